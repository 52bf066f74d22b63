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

/* s (NUL-terminated) appears in err when it is long enough to be told apart from a code */
static int quotes(const char *err, json_t *j, const char *member)
{
    json_t *v = json_object_get(j, member);

    return json_is_string(v) && json_string_length(v) >= 12 &&
           strstr(err, json_string_value(v)) != NULL;
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
    json_t *j;

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
        j = json_loadb(body, len, JSON_DISABLE_EOF_CHECK, NULL);
        if (json_is_object(j) &&
            (quotes(err, j, "error_description") || quotes(err, j, "access_token")))
            fail("the message quotes the body");
        json_decref(j);
    }
    rc2 = rt_oauth_token_parse(status, body, len, small, sizeof(small), &exp2, err, sizeof(err));
    if (rc2 == 0 && rc != 0)
        fail("a smaller buffer turned an error into a success");
    if (rc2 == 0 && (strcmp(small, tok) != 0 || exp2 != exp))
        fail("a smaller buffer gave another token");
    return 0;
}
