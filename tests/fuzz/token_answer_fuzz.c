/* libFuzzer target for the token endpoints' answers (router-svc/src/providers/oauth.c,
 * rt_oauth_token_parse, which every family with a token endpoint uses as its token_parse).
 *
 * The input's first byte picks the HTTP status (200, 400, 401, 500, or the byte itself); the
 * rest is the body. Properties (abort on violation):
 *  - the answer is 0 or a negative tg_err code;
 *  - 0: the token is non-empty, shorter than the buffer, visible ASCII only (it goes into a
 *    header), the lifetime is 1..86400 s, and the status was 2xx;
 *  - an error: the token buffer is empty, and the message is printable and never quotes the
 *    body's error_description or access_token (either may carry a secret);
 *  - a smaller buffer never turns an error into a success. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "providers/provider.h"
#include "tg_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "token_answer_fuzz: %s\n", what);
    abort();
}

/* The body's member (a string of 12 bytes or more, long enough to be told apart from a code)
 * is quoted in err: it appears there, and the same answer with another value in its place
 * gives the same message with that other value where it appeared. The other value keeps the
 * length and every byte that cannot go in a header (so the answer fails the same way) and has
 * '#' for the others; the rest of the body (what follows the JSON value included) is
 * unchanged. A value that is a word of the message itself (an error_description of
 * "access_token") stays in the message and is no quote. */
static int quotes(int status, const char *body, size_t len, const char *err, int rc,
                  const char *member)
{
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_DISABLE_EOF_CHECK, &jerr);
    json_t *v = json_object_get(j, member);
    char tok[RT_TOKEN_CAP], err2[256], want[256], *dump = NULL, *val = NULL, *orig = NULL, *body2 = NULL;
    size_t vn, dn;
    int64_t exp;
    int quoted = 0;

    if (!json_is_string(v) || json_string_length(v) < 12 ||
        strstr(err, json_string_value(v)) == NULL)
        goto out;
    vn = json_string_length(v);
    val = malloc(vn + 1);
    orig = strdup(json_string_value(v));
    if (val == NULL || orig == NULL)
        goto out;
    for (size_t i = 0; i < vn; i++) {
        unsigned char c = (unsigned char)json_string_value(v)[i];

        val[i] = c > 0x20 && c < 0x7f ? '#' : (char)c;
    }
    val[vn] = '\0';
    v = json_stringn(val, vn);
    if (v == NULL || json_object_set_new(j, member, v) != 0)
        goto out;
    dump = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (dump == NULL)
        goto out;
    dn = strlen(dump);
    body2 = malloc(dn + len - jerr.position + 1);
    if (body2 == NULL)
        goto out;
    memcpy(body2, dump, dn);
    memcpy(body2 + dn, body + jerr.position, len - jerr.position);
    err2[0] = '\0';
    rt_oauth_token_parse(status, body2, dn + len - jerr.position, tok, sizeof(tok), &exp, err2,
                         sizeof(err2));
    /* quoted: the message changed exactly where the value was, into the other value */
    snprintf(want, sizeof(want), "%s", err);
    for (char *w = strstr(want, orig); w != NULL; w = strstr(w + vn, orig))
        memcpy(w, val, vn);
    quoted = rc != 0 && strcmp(err2, want) == 0;
out:
    free(body2);
    free(dump);
    free(val);
    free(orig);
    json_decref(j);
    return quoted;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int statuses[] = {200, 400, 401, 500};
    char tok[RT_TOKEN_CAP];
    char small[16];
    char err[256];
    int64_t exp = -1, exp2 = -1;
    int status, rc, rc2;
    const char *body;
    size_t len;

    if (size == 0)
        return 0;
    status = data[0] < 4 ? statuses[data[0]] : data[0] + 100;
    body = (const char *)data + 1;
    len = size - 1;
    err[0] = '\0';
    rc = rt_oauth_token_parse(status, body, len, tok, sizeof(tok), &exp, err, sizeof(err));
    if (rc > 0)
        fail("positive answer");
    if (rc == 0) {
        size_t n = strlen(tok);

        if (n == 0 || n >= sizeof(tok))
            fail("token length");
        for (size_t i = 0; i < n; i++) {
            if (tok[i] <= 0x20 || tok[i] >= 0x7f)
                fail("token byte that cannot go in a header");
        }
        if (exp < 1 || exp > 86400)
            fail("lifetime out of 1..86400");
        if (status < 200 || status > 299)
            fail("success from a non-2xx answer");
    } else {
        if (tok[0] != '\0')
            fail("token left after an error");
        for (const char *s = err; *s != '\0'; s++) {
            if ((unsigned char)*s < 0x20 || *s == 0x7f)
                fail("control byte in the message");
        }
        if (quotes(status, body, len, err, rc, "error_description") ||
            quotes(status, body, len, err, rc, "access_token"))
            fail("the message quotes the body");
    }
    rc2 = rt_oauth_token_parse(status, body, len, small, sizeof(small), &exp2, err, sizeof(err));
    if (rc2 == 0 && rc != 0)
        fail("a smaller buffer turned an error into a success");
    if (rc2 == 0 && (strcmp(small, tok) != 0 || exp2 != exp))
        fail("a smaller buffer gave another token");
    return 0;
}

