/* tg_redis_url: see tg_redis_url.h. */
#include "tg_redis_url.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_err.h"
#include "tg_units.h"

/* pct_decode: src with %XX decoded into dst (cap bytes). 0, or -1 (a bad escape, a NUL, too
 * long). */
static int pct_decode(const char *src, char *dst, size_t cap)
{
    size_t n = 0;

    for (const char *p = src; *p != '\0'; p++) {
        int c = (unsigned char)*p;

        if (c == '%') {
            char hex[3] = {p[1], p[1] != '\0' ? p[2] : '\0', '\0'};
            char *end = NULL;

            if (!isxdigit((unsigned char)hex[0]) || !isxdigit((unsigned char)hex[1]))
                return -1;
            c = (int)strtol(hex, &end, 16);
            p += 2;
            if (c == 0)
                return -1;
        }
        if (n + 1 >= cap)
            return -1;
        dst[n++] = (char)c;
    }
    dst[n] = '\0';
    return 0;
}

static int fail(char *err, size_t errlen, const char *why)
{
    snprintf(err, errlen, "%s", why);
    return -1;
}

int tg_redis_url_parse(const char *url, struct tg_redis_url *out, char *err, size_t errlen)
{
    char buf[TG_REDIS_URL_HOST_CAP + TG_REDIS_URL_USER_CAP + TG_REDIS_URL_PASS_CAP + 32];
    char *host;
    char *at;
    char *slash;
    char *colon;
    uint64_t n = 0;

    memset(out, 0, sizeof(*out));
    out->port = TG_REDIS_DEFAULT_PORT;
    if (strlen(url) >= sizeof(buf))
        return fail(err, errlen, "URL too long");
    snprintf(buf, sizeof(buf), "%s", url);
    if (strncmp(buf, "redis://", 8) == 0) {
        host = buf + 8;
    } else if (strncmp(buf, "rediss://", 9) == 0) {
        host = buf + 9;
        out->tls = 1;
    } else {
        return fail(err, errlen, "expected redis://HOST:PORT/DB or rediss://...");
    }
    slash = strchr(host, '/');
    if (slash != NULL)
        *slash = '\0';
    at = strrchr(host, '@');
    if (at != NULL) {
        char *pw = NULL;

        *at = '\0';
        colon = strchr(host, ':');
        if (colon != NULL) {
            *colon = '\0';
            pw = colon + 1;
        }
        /* never quote the credentials in a message */
        if (pct_decode(host, out->username, sizeof(out->username)) != 0 ||
            (pw != NULL && pct_decode(pw, out->password, sizeof(out->password)) != 0)) {
            memset(buf, 0, sizeof(buf));
            return fail(err, errlen, "bad credentials in the URL (percent-encode @ : / %)");
        }
        host = at + 1;
    }
    if (slash != NULL && slash[1] != '\0') {
        if (tg_parse_u64(slash + 1, &n) != 0 || n > TG_REDIS_DB_MAX)
            return fail(err, errlen, "bad database number");
        out->db = (int)n;
    }
    colon = strrchr(host, ':');
    if (colon != NULL) {
        *colon = '\0';
        if (tg_parse_u64(colon + 1, &n) != 0 || n == 0 || n > 65535)
            return fail(err, errlen, "bad port");
        out->port = (int)n;
    }
    if (host[0] == '\0')
        return fail(err, errlen, "missing host");
    if (strlen(host) >= sizeof(out->host))
        return fail(err, errlen, "host name too long");
    snprintf(out->host, sizeof(out->host), "%s", host);
    memset(buf, 0, sizeof(buf));
    return 0;
}

int tg_redis_url_read(struct tg_yaml *y, const yaml_node_t *v, const char *path,
                      struct tg_redis_url *out)
{
    char buf[TG_REDIS_URL_CAP];
    char why[128];
    int rc = 0;

    if (tg_yaml_str_nonempty(y, v, path, buf, sizeof(buf)) != 0)
        return TG_ECONFIG;
    if (tg_redis_url_parse(buf, out, why, sizeof(why)) != 0)
        rc = tg_yaml_fail(y, v, path, "%s", why);
    memset(buf, 0, sizeof(buf));
    return rc;
}
