/* libFuzzer target for litellm_map (tools/litellm_map.h): rows of a LiteLLM database, as the
 * import tool reads them (one JSON text per row), to key and team API bodies.
 *
 * Input: one byte choosing key row (even) or team row (odd), then the row's JSON text.
 *
 * Properties (abort on violation):
 *  - a body is a JSON object that names the key by exactly one of key_hash (64 lowercase hex)
 *    and key (an "sk-" string), or a team by a non-empty team_id string; a refusal has a reason;
 *  - the report's name is NUL-terminated within LM_ID_CAP and holds no control byte, quote or
 *    backslash, and a key row's name never its raw key (the token);
 *  - models, when present, holds no "every model" marker;
 *  - the update body of any body keeps every member of the body and has models and blocked. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "litellm_map.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "litellm_row_fuzz: %s\n", what);
    abort();
}

/* row: a key row, whose token the name must never show; NULL for a team row (LiteLLM's team
 * table has no token: a team_id or alias that happens to hold some key's text is the team's
 * name, and nothing in the row says it is a key). */
static void check_id(const char *id, const json_t *row)
{
    const char *tok = row != NULL ? json_string_value(json_object_get(row, "token")) : NULL;

    if (memchr(id, '\0', LM_ID_CAP) == NULL)
        fail("report name not terminated");
    for (const char *p = id; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;

        if (c < 0x20 || c == 0x7f || c == '\\')
            fail("report name holds a control byte or a backslash");
    }
    if (tok != NULL && strncmp(tok, "sk-", 3) == 0 && strlen(tok) > 6 && strstr(id, tok) != NULL)
        fail("report name shows a raw key");
}

static void check_models(const json_t *body)
{
    const json_t *m = json_object_get(body, "models"), *v;
    size_t i;

    if (!json_is_array(m))
        return;
    json_array_foreach (m, i, v) {
        const char *s = json_string_value(v);

        if (s != NULL && (strcmp(s, "all-proxy-models") == 0 || strcmp(s, "all-team-models") == 0))
            fail("models holds an every-model marker");
    }
}

static void check_update(json_t *body)
{
    json_t *u = lm_update_body(body);
    const char *k;
    json_t *v;

    if (u == NULL)
        return; /* allocation failure */
    json_object_foreach (body, k, v) {
        if (!json_equal(json_object_get(u, k), v))
            fail("update body lost a member");
    }
    if (json_object_get(u, "models") == NULL || json_object_get(u, "blocked") == NULL)
        fail("update body without models or blocked");
    json_decref(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char id[LM_ID_CAP], why[200];
    json_t *row, *body;
    int raw = 0;

    if (size < 1)
        return 0;
    row = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, NULL);
    if (row == NULL)
        return 0;
    why[0] = '\0';
    memset(id, 'x', sizeof(id));
    if ((data[0] & 1) == 0) {
        body = lm_key_body(row, id, &raw, why, sizeof(why));
        check_id(id, row);
        if (body != NULL) {
            const char *h = json_string_value(json_object_get(body, "key_hash"));
            const char *k = json_string_value(json_object_get(body, "key"));

            if ((h == NULL) == (k == NULL))
                fail("a key body names the key by neither or both of key_hash and key");
            if (h != NULL && (strlen(h) != 64 || strspn(h, "0123456789abcdef") != 64))
                fail("key_hash is not 64 lowercase hex");
            if (k != NULL && (strncmp(k, "sk-", 3) != 0 || !raw))
                fail("key is not an sk- key from a raw token");
        }
    } else {
        body = lm_team_body(row, id, why, sizeof(why));
        check_id(id, NULL);
        if (body != NULL) {
            const json_t *t = json_object_get(body, "team_id");

            if (!json_is_string(t) || json_string_length(t) == 0)
                fail("a team body without a team_id");
        }
    }
    if (body == NULL) {
        if (why[0] == '\0')
            fail("a refusal without a reason");
    } else {
        if (!json_is_object(body))
            fail("a body that is not an object");
        check_models(body);
        check_update(body);
        json_decref(body);
    }
    json_decref(row);
    return 0;
}
