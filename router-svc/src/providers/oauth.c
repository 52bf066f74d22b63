/* oauth: the pieces of OAuth 2.0 the families with a token endpoint share: the form a token
 * request posts, and the parse of the endpoint's JSON answer (RFC 6749, sections 4.4, 5.1 and
 * 5.2; Microsoft Entra ID's client-credentials answer and Google's JWT-bearer answer have this
 * shape). See provider.h. */
#include "providers/provider.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "tg_err.h"
#include "usage.h"

/* A token endpoint's answer is small: a few members. */
#define OAUTH_ANSWER_MAX_BYTES (64u * 1024u)
#define OAUTH_ANSWER_MAX_DEPTH 8
#define OAUTH_ANSWER_MAX_ELEMENTS 256
/* A lifetime longer than a day is taken as a day (a garbage value cannot park a refresh). */
#define OAUTH_EXPIRES_MAX_S 86400

int rt_oauth_form_append(char *buf, size_t cap, size_t *len, const char *name, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = *len;
    const char *parts[2] = {name, value};

    if (n > 0) {
        if (n + 1 >= cap)
            return TG_EFULL;
        buf[n++] = '&';
    }
    for (int i = 0; i < 2; i++) {
        for (const unsigned char *s = (const unsigned char *)parts[i]; *s != '\0'; s++) {
            if (n + 4 >= cap)
                return TG_EFULL;
            /* application/x-www-form-urlencoded: unreserved bytes as they are, space as '+',
             * everything else percent-encoded */
            if ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
                *s == '-' || *s == '.' || *s == '_' || *s == '~') {
                buf[n++] = (char)*s;
            } else if (*s == ' ') {
                buf[n++] = '+';
            } else {
                buf[n++] = '%';
                buf[n++] = hex[*s >> 4];
                buf[n++] = hex[*s & 15];
            }
        }
        if (i == 0) {
            if (n + 1 >= cap)
                return TG_EFULL;
            buf[n++] = '=';
        }
    }
    buf[n] = '\0';
    *len = n;
    return 0;
}

/* Printable ASCII of a short code from the endpoint (error, error codes), for messages. */
static void safe_code(const char *in, char *out, size_t cap)
{
    size_t n = 0;

    for (; in != NULL && *in != '\0' && n + 1 < cap && n < 64; in++)
        out[n++] = (*in > 0x20 && *in < 0x7f && *in != '"' && *in != '\\') ? *in : '?';
    out[n] = '\0';
}

int rt_oauth_token_parse(int http_status, const char *body, size_t len, char *out, size_t cap,
                         int64_t *expires_in_s, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *j = NULL;
    json_t *tok, *exp, *type;
    char code[72];
    int rc = TG_EPROTO;

    out[0] = '\0';
    *expires_in_s = 0;
    if (body == NULL || len == 0 || len > OAUTH_ANSWER_MAX_BYTES) {
        snprintf(err, errlen, "token endpoint answered HTTP %d with %s", http_status,
                 len == 0 ? "no body" : "a body too large");
        return TG_EPROTO;
    }
    j = rt_json_load_bounded(body, len, OAUTH_ANSWER_MAX_DEPTH, OAUTH_ANSWER_MAX_ELEMENTS, &jerr);
    if (!json_is_object(j)) {
        snprintf(err, errlen,
                 "token endpoint answered HTTP %d with a body that is not a JSON "
                 "object",
                 http_status);
        goto out;
    }
    if (http_status < 200 || http_status > 299 || json_object_get(j, "error") != NULL) {
        json_t *e = json_object_get(j, "error");

        /* the error code only: error_description may quote what was sent */
        safe_code(json_is_string(e) ? json_string_value(e) : NULL, code, sizeof(code));
        snprintf(err, errlen, "token endpoint answered HTTP %d, error \"%s\"", http_status,
                 code[0] != '\0' ? code : "(none)");
        goto out;
    }
    tok = json_object_get(j, "access_token");
    exp = json_object_get(j, "expires_in");
    type = json_object_get(j, "token_type");
    if (!json_is_string(tok) || json_string_length(tok) == 0) {
        snprintf(err, errlen, "token endpoint answer has no access_token");
        goto out;
    }
    if (type != NULL &&
        !(json_is_string(type) && strcasecmp(json_string_value(type), "bearer") == 0)) {
        snprintf(err, errlen, "token endpoint answer has a token_type other than Bearer");
        goto out;
    }
    if (json_string_length(tok) >= cap) {
        snprintf(err, errlen, "access_token too long (%zu bytes, max %zu)", json_string_length(tok),
                 cap - 1);
        goto out;
    }
    for (const char *s = json_string_value(tok); *s != '\0'; s++) {
        /* it goes into a header: visible ASCII only */
        if (*s <= 0x20 || *s >= 0x7f) {
            snprintf(err, errlen, "access_token has a byte that cannot go in a header");
            goto out;
        }
    }
    /* expires_in: a number of seconds (Entra ID has sent it as a string of digits too) */
    if (json_is_integer(exp)) {
        *expires_in_s = json_integer_value(exp);
    } else if (json_is_string(exp)) {
        const char *s = json_string_value(exp);
        int64_t v = 0;

        for (; *s >= '0' && *s <= '9' && v < OAUTH_EXPIRES_MAX_S; s++)
            v = v * 10 + (*s - '0');
        *expires_in_s = v;
    } else if (json_is_real(exp)) {
        double d = json_real_value(exp);

        *expires_in_s = d > 0 && d < OAUTH_EXPIRES_MAX_S ? (int64_t)d : 0;
    }
    if (*expires_in_s <= 0) {
        snprintf(err, errlen, "token endpoint answer has no positive expires_in");
        goto out;
    }
    if (*expires_in_s > OAUTH_EXPIRES_MAX_S)
        *expires_in_s = OAUTH_EXPIRES_MAX_S;
    memcpy(out, json_string_value(tok), json_string_length(tok) + 1);
    rc = 0;
out:
    json_decref(j);
    return rc;
}
