#include "mask.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tg_utf8.h"

struct rt_mask {
    size_t n;       /* secrets kept */
    char **secrets; /* owned copies, each >= RT_MASK_SECRET_MIN bytes */
    size_t *lens;
};

/* Names whose value (after ':' or '=') is a secret. Compared case-insensitively with a whole
 * token, or with the end of a token after '_' or '-' ("openai_api_key"). */
#define NAME(s)                                                                                    \
    {                                                                                              \
        s, sizeof(s) - 1                                                                           \
    }
static const struct {
    const char *name;
    size_t len;
} secret_names[] = {
    NAME("x-api-key"),      NAME("api_key"),       NAME("api-key"),
    NAME("apikey"),         NAME("authorization"), NAME("proxy-authorization"),
    NAME("password"),       NAME("passwd"),        NAME("secret"),
    NAME("client_secret"),  NAME("access_token"),  NAME("refresh_token"),
    NAME("token"),          NAME("master_key"),    NAME("private_key"),
    NAME("x-goog-api-key"), NAME("api_token"),     NAME("auth_token"),
    NAME("secret_key"),     NAME("session_token"),
};
#undef NAME

void rt_mask_destroy(struct rt_mask **mask)
{
    struct rt_mask *m;

    if (mask == NULL || *mask == NULL)
        return;
    m = *mask;
    for (size_t i = 0; i < m->n; i++)
        free(m->secrets[i]);
    free(m->secrets);
    free(m->lens);
    free(m);
    *mask = NULL;
}

/* The cleaned form of in[0..n) into buf (n bytes suffice): valid UTF-8 only, control characters
 * dropped, tab, newline and CR as a space. Returns its length. */
static size_t clean_text(const char *in, size_t n, char *buf)
{
    size_t i = 0, o = 0;

    while (i < n) {
        unsigned char c = (unsigned char)in[i];
        size_t sl;

        if (c == '\t' || c == '\n' || c == '\r') {
            buf[o++] = ' ';
            i++;
            continue;
        }
        if (c < 0x20 || c == 0x7F) {
            i++;
            continue;
        }
        if (c < 0x80) {
            buf[o++] = (char)c;
            i++;
            continue;
        }
        sl = tg_utf8_seq((const unsigned char *)in + i, n - i);
        if (sl == 0) {
            i++;
            continue;
        }
        memcpy(buf + o, in + i, sl);
        o += sl;
        i += sl;
    }
    return o;
}

struct rt_mask *rt_mask_create(const char *const *secrets, size_t n, char *err, size_t errlen)
{
    struct rt_mask *m = NULL;

    if (n > RT_MASK_SECRETS_MAX) {
        snprintf(err, errlen, "too many secrets to mask: %zu (max %d)", n, RT_MASK_SECRETS_MAX);
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        goto nomem;
    if (n > 0) {
        m->secrets = calloc(n, sizeof(*m->secrets));
        m->lens = calloc(n, sizeof(*m->lens));
        if (m->secrets == NULL || m->lens == NULL)
            goto nomem;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len;
        char *c;

        if (secrets[i] == NULL)
            continue;
        len = strlen(secrets[i]);
        if (len < RT_MASK_SECRET_MIN)
            continue;
        /* Kept in the form it has in cleaned text, where it is searched: a secret with a tab or
         * a control character in it would otherwise never match, and leave all but that byte in
         * the output. */
        c = malloc(len + 1);
        if (c == NULL)
            goto nomem;
        len = clean_text(secrets[i], len, c);
        c[len] = '\0';
        if (len < RT_MASK_SECRET_MIN) {
            free(c);
            continue;
        }
        m->secrets[m->n] = c;
        m->lens[m->n] = len;
        m->n++;
    }
    return m;
nomem:
    snprintf(err, errlen, "out of memory");
    rt_mask_destroy(&m);
    return NULL;
}

static int is_tok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static int is_value_end(unsigned char c)
{
    return c == ' ' || c == '"' || c == '\'' || c == ',' || c == ';' || c == '&' || c == '}' ||
           c == ')' || c == ']' || c == '>' || c == '<';
}

static void mark(unsigned char *hide, size_t from, size_t to)
{
    memset(hide + from, 1, to - from);
}

/* 1 when run[0..len) is a secret name (whole, or as a suffix after '_'/'-'). */
static int is_secret_name(const char *run, size_t len)
{
    char last;

    if (len < 5) /* shortest name: "token" */
        return 0;
    last = (char)tolower((unsigned char)run[len - 1]);
    if (last != 'y' && last != 'n' && last != 'd' && last != 't')
        return 0; /* every name ends in one of these: most words stop here */
    for (size_t i = 0; i < sizeof(secret_names) / sizeof(secret_names[0]); i++) {
        const char *name = secret_names[i].name;
        size_t nl = secret_names[i].len;

        if (nl > len || name[nl - 1] != last)
            continue;
        if (len == nl && strncasecmp(run, name, nl) == 0)
            return 1;
        if (len > nl && (run[len - nl - 1] == '_' || run[len - nl - 1] == '-') &&
            strncasecmp(run + len - nl, name, nl) == 0)
            return 1;
    }
    return 0;
}

static int is_scheme(const char *run, size_t len)
{
    return (len == 6 && strncasecmp(run, "bearer", 6) == 0) ||
           (len == 5 && strncasecmp(run, "basic", 5) == 0);
}

/* Mark the value starting at or after pos (spaces skipped, optional quote): up to a value end.
 * Returns the index after the value. */
static size_t mark_value(const char *buf, size_t len, size_t pos, unsigned char *hide)
{
    size_t start;

    while (pos < len && buf[pos] == ' ')
        pos++;
    if (pos < len && (buf[pos] == '"' || buf[pos] == '\''))
        pos++;
    start = pos;
    while (pos < len && !is_value_end((unsigned char)buf[pos]))
        pos++;
    if (pos > start)
        mark(hide, start, pos);
    return pos;
}

/* A token that looks like a key by its prefix. */
static int token_is_secret(const char *run, size_t len)
{
    if (len >= 7 && (strncmp(run, "sk-", 3) == 0 || strncmp(run, "sk_", 3) == 0))
        return 1;
    if ((len >= 4 + 16 && strncmp(run, "key-", 4) == 0) ||
        (len >= 3 + 16 && (strncmp(run, "pk-", 3) == 0 || strncmp(run, "rk-", 3) == 0)))
        return 1;
    /* AWS access key ids. */
    if (len == 20 && (strncmp(run, "AKIA", 4) == 0 || strncmp(run, "ASIA", 4) == 0))
        return 1;
    return 0;
}

/* Characters of base64/base64url/hex/JWT-like material. */
static int is_dense(unsigned char c)
{
    return is_tok(c) || c == '+' || c == '/' || c == '=' || c == '.';
}

/* A dense run of >= 24 characters with a segment (between - _ . /) of >= 16 characters. */
static int run_is_high_entropy(const char *run, size_t len)
{
    size_t seg = 0, longest = 0;

    if (len < 24)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (run[i] == '-' || run[i] == '_' || run[i] == '.' || run[i] == '/') {
            seg = 0;
            continue;
        }
        seg++;
        if (seg > longest)
            longest = seg;
    }
    return longest >= 16;
}

static void find_spans(const struct rt_mask *m, const char *buf, size_t len, unsigned char *hide)
{
    size_t i = 0;

    if (m != NULL) {
        for (size_t s = 0; s < m->n; s++) {
            const char *p = buf;
            size_t left = len;
            const char *hit;

            while (left >= m->lens[s] && (hit = memmem(p, left, m->secrets[s], m->lens[s]))) {
                size_t off = (size_t)(hit - buf);

                mark(hide, off, off + m->lens[s]);
                p = hit + 1;
                left = len - (off + 1);
            }
        }
    }
    /* Dense runs (wider than tokens: base64 with + / =, JWTs with dots). */
    while (i < len) {
        size_t start;

        if (!is_dense((unsigned char)buf[i])) {
            i++;
            continue;
        }
        start = i;
        while (i < len && is_dense((unsigned char)buf[i]))
            i++;
        if (run_is_high_entropy(buf + start, i - start))
            mark(hide, start, i);
    }
    i = 0;
    while (i < len) {
        size_t start, end, j;

        if (!is_tok((unsigned char)buf[i])) {
            i++;
            continue;
        }
        start = i;
        while (i < len && is_tok((unsigned char)buf[i]))
            i++;
        end = i;
        if (token_is_secret(buf + start, end - start)) {
            mark(hide, start, end);
            continue;
        }
        if (is_scheme(buf + start, end - start)) {
            if (end < len && buf[end] == ' ')
                i = mark_value(buf, len, end, hide);
            continue;
        }
        if (is_secret_name(buf + start, end - start)) {
            j = end;
            if (j < len && (buf[j] == '"' || buf[j] == '\''))
                j++;
            while (j < len && buf[j] == ' ')
                j++;
            if (j < len && (buf[j] == ':' || buf[j] == '=')) {
                size_t vstart = j + 1, vend;

                while (vstart < len && buf[vstart] == ' ')
                    vstart++;
                if (vstart < len && (buf[vstart] == '"' || buf[vstart] == '\''))
                    vstart++;
                vend = vstart;
                while (vend < len && is_tok((unsigned char)buf[vend]))
                    vend++;
                /* "Authorization: Bearer xyz": the scheme word stays, its value is hidden. */
                if (is_scheme(buf + vstart, vend - vstart) && vend < len && buf[vend] == ' ')
                    i = mark_value(buf, len, vend, hide);
                else
                    i = mark_value(buf, len, j + 1, hide);
            }
        }
    }
}

size_t rt_mask_apply(const struct rt_mask *mask, const char *in, size_t inlen, char *out,
                     size_t outcap)
{
    char buf[RT_MASK_INPUT_MAX];
    unsigned char hide[RT_MASK_INPUT_MAX];
    size_t n = 0, o = 0, i = 0, take;
    int cut = 0;

    if (outcap == 0)
        return 0;
    out[0] = '\0';
    if (in == NULL || inlen == 0)
        return 0;
    take = inlen;
    if (take > RT_MASK_INPUT_MAX) {
        take = RT_MASK_INPUT_MAX;
        cut = 1;
    }
    /* Clean copy: valid UTF-8 only, control characters dropped, whitespace folded to ' '. */
    n = clean_text(in, take, buf);
    /* A token cut by the inspection limit may be part of a secret: drop it whole. */
    if (cut) {
        while (n > 0 && buf[n - 1] != ' ')
            n--;
    }
    memset(hide, 0, n);
    find_spans(mask, buf, n, hide);

    i = 0;
    while (i < n) {
        size_t unit;

        if (hide[i]) {
            while (i < n && hide[i])
                i++;
            unit = sizeof(RT_MASK_REPLACEMENT) - 1;
            if (o + unit > outcap - 1)
                break;
            memcpy(out + o, RT_MASK_REPLACEMENT, unit);
            o += unit;
            continue;
        }
        if ((unsigned char)buf[i] < 0x80) {
            if (o + 1 > outcap - 1)
                break;
            out[o++] = buf[i++];
            continue;
        }
        unit = tg_utf8_seq((const unsigned char *)buf + i, n - i);
        if (unit == 0)
            unit = 1; /* cannot happen: buf holds valid UTF-8 only */
        if (o + unit > outcap - 1)
            break;
        memcpy(out + o, buf + i, unit);
        o += unit;
        i += unit;
    }
    out[o] = '\0';
    return o;
}
