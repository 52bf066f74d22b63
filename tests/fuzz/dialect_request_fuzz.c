/* libFuzzer target for the dialects' request writers (router-svc/src/providers/gemini.c,
 * bedrock.c): a client's OpenAI chat request (or an embeddings request), as the router parsed
 * it, turned into a Gemini API, Vertex AI or Bedrock Converse body. These walk whatever JSON a
 * client sent (messages, parts, tools, schemas with $ref, tool results with media, thinking
 * blocks), so they are parsers of untrusted input like the ones that read the bytes.
 *
 * Input: the first byte picks the dialect (its value mod 3: Gemini API, Vertex AI, Converse)
 * and, in bit 2, whether the client asked for a stream; the rest is the request body. A body
 * that is not JSON is skipped (jansson's own parser is not under test here).
 *
 * Properties (abort on violation):
 *  - a request converts to NULL with a message saying why (a 400 names what is wrong), or to a
 *    JSON object that serialises; a Gemini body has a non-empty "contents" array, a Converse
 *    body a "messages" array;
 *  - the same for the embeddings writer of that dialect, given the same body;
 *  - the conversion never changes the client's request (it is borrowed): the body serialises
 *    the same before and after. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "providers/provider.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "dialect_request_fuzz: %s\n", what);
    abort();
}

/* out: the dialect's body or NULL; err its message. Checks the shape named in the header. */
static void check_body(json_t *out, const char *err, const char *list_key, int nonempty)
{
    char *s;

    if (out == NULL) {
        if (err[0] == '\0')
            fail("a request refused without a message");
        return;
    }
    if (!json_is_object(out))
        fail("a body that is not an object");
    if (list_key != NULL) {
        const json_t *l = json_object_get(out, list_key);

        if (!json_is_array(l) || (nonempty && json_array_size(l) == 0))
            fail("a body without its list of messages");
    }
    s = json_dumps(out, JSON_COMPACT);
    if (s == NULL)
        fail("a body that does not serialise");
    free(s);
    json_decref(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct {
        const struct rt_dialect *d;
        const char *list_key;
        int nonempty;
    } dialects[3] = {
        {&rt_dialect_gemini, "contents", 1},
        {&rt_dialect_vertex_gemini, "contents", 1},
        {&rt_dialect_converse, "messages", 0},
    };
    struct rt_deployment_conf dep;
    char err[512];
    json_t *req, *out;
    char *before, *after;
    int pick, stream;

    if (size < 1)
        return 0;
    pick = data[0] % 3;
    stream = (data[0] >> 2) & 1;
    req = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (req == NULL)
        return 0;
    before = json_dumps(req, JSON_COMPACT | JSON_ENCODE_ANY);
    memset(&dep, 0, sizeof(dep));
    snprintf(dep.id, sizeof(dep.id), "fuzz-1");
    snprintf(dep.model, sizeof(dep.model), "%s", pick == 2 ? "anthropic.claude-3" : "gemini-3");

    err[0] = '\0';
    out = dialects[pick].d->request(req, &dep, stream, err, sizeof(err));
    check_body(out, err, dialects[pick].list_key, dialects[pick].nonempty);
    if (dialects[pick].d->embed_request != NULL) {
        err[0] = '\0';
        out = dialects[pick].d->embed_request(req, &dep, err, sizeof(err));
        check_body(out, err, NULL, 0);
    }
    after = json_dumps(req, JSON_COMPACT | JSON_ENCODE_ANY);
    if (before != NULL && after != NULL && strcmp(before, after) != 0)
        fail("the client's request was changed");
    free(before);
    free(after);
    json_decref(req);
    return 0;
}
