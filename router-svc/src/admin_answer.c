#include "admin_answer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tg_utf8.h"

static const char fallback_500[] =
    "{\"error\":{\"message\":\"internal error\",\"type\":\"server_error\",\"param\":null,"
    "\"code\":\"internal_error\"}}";

void rt_answer_500(rt_answer_fn done, void *ud)
{
    done(500, fallback_500, sizeof(fallback_500) - 1, ud);
}

void rt_answer_scrub(char *s)
{
    char *p = s;

    while ((p = strstr(p, "sk-")) != NULL) {
        char *q = p + 3;

        while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
               *q == '-' || *q == '_' || *q == '.')
            q++;
        if (q - p < 6) {
            p = q; /* too short to be a key; replacing it would not shrink the text */
            continue;
        }
        memmove(p + 6, q, strlen(q) + 1);
        memcpy(p, "sk-***", 6);
        p += 6;
    }
}

void rt_answer_json(rt_answer_fn done, void *ud, int status, json_t *o, size_t max)
{
    /* sized to the body, not to the cap: a list's cap is megabytes */
    char *buf = o != NULL ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    size_t n = buf != NULL ? strlen(buf) : 0;

    json_decref(o);
    if (buf == NULL || n == 0 || n >= max) {
        free(buf);
        rt_answer_500(done, ud);
        return;
    }
    done(status, buf, n, ud);
    free(buf);
}

/* s made valid UTF-8 in place: a byte that does not start a valid sequence becomes '?' (a field
 * name cut by a "%.100s" can end inside one, and json_string refuses such text, which left the
 * answer without its message). */
static void utf8_fix(char *s)
{
    size_t n = strlen(s);

    for (size_t i = 0; i < n;) {
        size_t k = tg_utf8_seq((const unsigned char *)s + i, n - i);

        if (k == 0) {
            s[i++] = '?';
            continue;
        }
        i += k;
    }
}

void rt_answer_error(rt_answer_fn done, void *ud, size_t max, int status, const char *type,
                     const char *code, const char *param, const char *message)
{
    json_t *o = json_object(), *e = json_object();
    char msg[512], par[160];

    snprintf(msg, sizeof(msg), "%s", message);
    rt_answer_scrub(msg);
    utf8_fix(msg);
    if (param != NULL) {
        snprintf(par, sizeof(par), "%s", param);
        rt_answer_scrub(par);
        utf8_fix(par);
    }
    if (o == NULL || e == NULL) {
        json_decref(o);
        json_decref(e);
        rt_answer_json(done, ud, status, NULL, max);
        return;
    }
    json_object_set_new(e, "message", json_string(msg));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param != NULL ? json_string(par) : json_null());
    json_object_set_new(e, "code", json_string(code));
    json_object_set_new(o, "error", e);
    rt_answer_json(done, ud, status, o, max);
}

void rt_answer_field_error(rt_answer_fn done, void *ud, size_t max, const char *err)
{
    char field[160];
    const char *colon = strstr(err, ": ");
    size_t n = colon != NULL ? (size_t)(colon - err) : 0;

    if (n == 0 || n >= sizeof(field))
        snprintf(field, sizeof(field), "body");
    else
        snprintf(field, sizeof(field), "%.*s", (int)n, err);
    rt_answer_error(done, ud, max, 400, "invalid_request_error", "invalid_field",
                    strcmp(field, "body") == 0 ? NULL : field, err);
}

void rt_answer_iso8601(int64_t epoch_ms, char *out, size_t cap)
{
    time_t s = (time_t)(epoch_ms / 1000);
    struct tm tm;

    if (gmtime_r(&s, &tm) == NULL) {
        snprintf(out, cap, "invalid");
        return;
    }
    snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(epoch_ms % 1000));
}

void rt_answer_duration(int64_t s, char *out, size_t cap)
{
    if (s % 86400 == 0)
        snprintf(out, cap, "%" PRId64 "d", s / 86400);
    else if (s % 3600 == 0)
        snprintf(out, cap, "%" PRId64 "h", s / 3600);
    else if (s % 60 == 0)
        snprintf(out, cap, "%" PRId64 "m", s / 60);
    else
        snprintf(out, cap, "%" PRId64 "s", s);
}
