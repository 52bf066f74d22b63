/* libFuzzer target for the service-account JSON reader (router-svc/src/providers/google.c,
 * rt_google_sa_parse), which reads what vertex_credentials gives at load.
 *
 * Input: the JSON text. Properties (abort on violation):
 *  - the answer is 0 or TG_EINVAL;
 *  - 0: client_email and private_key are non-empty, every field NUL-terminated within its
 *    array, token_uri an http(s) URL, client_email and private_key_id free of bytes that cannot
 *    go into a JWT's JSON (quote, backslash, control, space, non-ASCII);
 *  - TG_EINVAL: the output is all zeroes, and the message does not depend on the private_key
 *    (a secret): the same document with another private_key of the same length gets the same
 *    message. */
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
    fprintf(stderr, "service_account_fuzz: %s\n", what);
    abort();
}

static void terminated(const char *s, size_t cap)
{
    if (memchr(s, '\0', cap) == NULL)
        fail("a field not NUL-terminated");
}

static void jwt_safe(const char *s)
{
    for (; *s != '\0'; s++) {
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f || *s == '"' || *s == '\\')
            fail("a byte that cannot go into the JWT");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rt_google_sa sa;
    char err[256];
    int rc;

    err[0] = '\0';
    rc = rt_google_sa_parse((const char *)data, size, &sa, err, sizeof(err));
    if (rc != 0 && rc != TG_EINVAL)
        fail("answer");
    if (rc == 0) {
        terminated(sa.client_email, sizeof(sa.client_email));
        terminated(sa.private_key, sizeof(sa.private_key));
        terminated(sa.private_key_id, sizeof(sa.private_key_id));
        terminated(sa.token_uri, sizeof(sa.token_uri));
        terminated(sa.project_id, sizeof(sa.project_id));
        if (sa.client_email[0] == '\0' || sa.private_key[0] == '\0')
            fail("empty required field");
        if (strncmp(sa.token_uri, "https://", 8) != 0 && strncmp(sa.token_uri, "http://", 7) != 0)
            fail("token_uri");
        jwt_safe(sa.client_email);
        jwt_safe(sa.private_key_id);
    } else {
        static const struct rt_google_sa zero;
        json_t *j = json_loadb((const char *)data, size, 0, NULL);
        json_t *k = json_object_get(j, "private_key");

        if (memcmp(&sa, &zero, sizeof(sa)) != 0)
            fail("output left after an error");
        if (json_is_object(j) && json_is_string(k)) {
            /* the same document with another key of the same length */
            size_t kl = json_string_length(k);
            char *other = malloc(kl + 1);
            char *text;
            char err2[256];

            if (other != NULL) {
                memset(other, json_string_value(k)[0] == 'Z' ? 'Y' : 'Z', kl);
                other[kl] = '\0';
                json_object_set_new(j, "private_key", json_string(other));
                text = json_dumps(j, JSON_COMPACT);
                if (text != NULL) {
                    err2[0] = '\0';
                    rt_google_sa_parse(text, strlen(text), &sa, err2, sizeof(err2));
                    if (strcmp(err, err2) != 0 && strstr(err, "not a JSON object") == NULL)
                        fail("the message depends on the private key");
                    free(text);
                }
                free(other);
            }
        }
        json_decref(j);
    }
    return 0;
}
