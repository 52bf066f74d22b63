/* proto_event_decode: the strict decoder of the event schema (proto_event.h); the encoder and
 * the field helpers are in proto_event.c. */
#include "proto_event.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "proto_int.h"
#include "tg_err.h"
#include "tg_utf8.h"

/* ---------------------------------------------------------------------------------------------
 * Decoder: a strict RFC 8259 parser specialised for the event object.
 *
 * One pass over the input. Syntax errors (malformed JSON, invalid UTF-8, lone surrogates, a
 * known key given twice) stop the parse at once with "invalid JSON at byte N: ...". Schema
 * errors are collected instead and ranked by the field's position in the schema, so that the
 * reason reported is that of the first offending field in schema order, whatever the order of
 * the keys in the input. Unknown fields are parsed for syntax and skipped.
 * ------------------------------------------------------------------------------------------- */

static void set_reason(char *reason, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_reason(char *reason, size_t cap, const char *fmt, ...)
{
    va_list ap;

    if (reason == NULL || cap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(reason, cap, fmt, ap);
    va_end(ap);
}

#define JP_MAX_DEPTH 64
#define JP_RANK_NONE 0x7fffffff

enum jp_num { JP_NUM_INT, JP_NUM_REAL, JP_NUM_BIG, JP_NUM_NEGBIG };

struct jp {
    const unsigned char *start;
    const unsigned char *p;
    const unsigned char *end;
    char *reason; /* caller's buffer for a syntax error, may be NULL */
    size_t reasoncap;
    int rank;      /* rank of the schema error in err, JP_RANK_NONE when none */
    size_t slen;   /* decoded length of the last string parsed */
    char err[200]; /* the lowest-ranked schema error so far */
};

static void jp_syntax(struct jp *j, const char *what)
{
    if (j->p >= j->end)
        what = "unexpected end of input";
    set_reason(j->reason, j->reasoncap, "invalid JSON at byte %zu: %s", (size_t)(j->p - j->start),
               what);
}

static void jp_schema(struct jp *j, int rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void jp_schema(struct jp *j, int rank, const char *fmt, ...)
{
    va_list ap;

    if (rank >= j->rank)
        return;
    j->rank = rank;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof(j->err), fmt, ap);
    va_end(ap);
}

static inline void jp_ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* \uXXXX at j->p (pointing at 'u'); advances past the digits. Returns the unit or -1. */
static long jp_u4(struct jp *j)
{
    long v = 0;

    if (j->end - j->p < 5) {
        j->p = j->end;
        jp_syntax(j, "truncated \\u escape");
        return -1;
    }
    for (int i = 1; i <= 4; i++) {
        int h = hexval(j->p[i]);
        if (h < 0) {
            j->p += i;
            jp_syntax(j, "invalid \\u escape");
            return -1;
        }
        v = v * 16 + h;
    }
    j->p += 5;
    return v;
}

#define JP_STR_OVERCAP 1
#define JP_STR_NUL 2

/* jp_plain[c]: c is copied as it is inside a string (printable ASCII but '"' and '\\'); bytes
 * from 0x80 on are 0 (UTF-8, checked apart). */
static const unsigned char jp_plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x00 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10 */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x30 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x40 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x60 */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x70 */
};

/* String at j->p (the opening quote). Writes the decoded value into dst (cap bytes, NUL
 * included) when dst is not NULL; a value longer than cap - 1 bytes sets JP_STR_OVERCAP and a
 * \u0000 sets JP_STR_NUL (the value is then unusable, the parse goes on). Returns 0, or -1 on
 * a syntax error. */
static int jp_string(struct jp *j, char *dst, size_t cap, int *flags)
{
    size_t len = 0;
    int over = 0;

    *flags = 0;
    j->p++; /* opening quote */
    for (;;) {
        const unsigned char *run = j->p;
        unsigned char c;
        unsigned char ubuf[4];
        const unsigned char *put;
        size_t n;

        while (j->p < j->end && jp_plain[*j->p])
            j->p++;
        n = (size_t)(j->p - run);
        if (n > 0 && dst != NULL) {
            if (!over && len + n <= cap - 1)
                memcpy(dst + len, run, n);
            else
                over = 1;
        }
        len += n;
        if (j->p >= j->end) {
            jp_syntax(j, "unterminated string");
            return -1;
        }
        c = *j->p;
        if (c == '"') {
            j->p++;
            break;
        }
        if (c < 0x20) {
            jp_syntax(j, "control character in string");
            return -1;
        }
        if (c >= 0x80) {
            n = tg_utf8_seq(j->p, (size_t)(j->end - j->p));
            if (n == 0) {
                jp_syntax(j, "invalid UTF-8");
                return -1;
            }
            put = j->p;
            j->p += n;
        } else {
            /* backslash */
            const unsigned char *esc;
            long u;

            j->p++;
            if (j->p >= j->end) {
                jp_syntax(j, "unterminated string");
                return -1;
            }
            c = *j->p;
            put = ubuf;
            n = 1;
            switch (c) {
            case '"':
            case '\\':
            case '/':
                ubuf[0] = c;
                j->p++;
                break;
            case 'b':
                ubuf[0] = '\b';
                j->p++;
                break;
            case 'f':
                ubuf[0] = '\f';
                j->p++;
                break;
            case 'n':
                ubuf[0] = '\n';
                j->p++;
                break;
            case 'r':
                ubuf[0] = '\r';
                j->p++;
                break;
            case 't':
                ubuf[0] = '\t';
                j->p++;
                break;
            case 'u':
                esc = j->p - 1;
                u = jp_u4(j);
                if (u < 0)
                    return -1;
                if (u >= 0xDC00 && u <= 0xDFFF) {
                    j->p = esc;
                    jp_syntax(j, "invalid \\u escape (lone low surrogate)");
                    return -1;
                }
                if (u >= 0xD800 && u <= 0xDBFF) {
                    long lo;

                    if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') {
                        j->p = esc;
                        jp_syntax(j, "invalid \\u escape (lone high surrogate)");
                        return -1;
                    }
                    j->p++;
                    lo = jp_u4(j);
                    if (lo < 0)
                        return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        j->p = esc;
                        jp_syntax(j, "invalid \\u escape (lone high surrogate)");
                        return -1;
                    }
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (u == 0) {
                    *flags |= JP_STR_NUL;
                    n = 0;
                } else if (u < 0x80) {
                    ubuf[0] = (unsigned char)u;
                } else if (u < 0x800) {
                    ubuf[0] = (unsigned char)(0xC0 | (u >> 6));
                    ubuf[1] = (unsigned char)(0x80 | (u & 0x3F));
                    n = 2;
                } else if (u < 0x10000) {
                    ubuf[0] = (unsigned char)(0xE0 | (u >> 12));
                    ubuf[1] = (unsigned char)(0x80 | ((u >> 6) & 0x3F));
                    ubuf[2] = (unsigned char)(0x80 | (u & 0x3F));
                    n = 3;
                } else {
                    ubuf[0] = (unsigned char)(0xF0 | (u >> 18));
                    ubuf[1] = (unsigned char)(0x80 | ((u >> 12) & 0x3F));
                    ubuf[2] = (unsigned char)(0x80 | ((u >> 6) & 0x3F));
                    ubuf[3] = (unsigned char)(0x80 | (u & 0x3F));
                    n = 4;
                }
                break;
            default:
                jp_syntax(j, "invalid escape");
                return -1;
            }
        }
        if (n > 0 && dst != NULL) {
            if (!over && len + n <= cap - 1)
                memcpy(dst + len, put, n);
            else
                over = 1;
        }
        len += n;
    }
    if (dst != NULL) {
        dst[over ? 0 : len] = '\0';
        if (over)
            *flags |= JP_STR_OVERCAP;
    }
    j->slen = len;
    return 0;
}

/* Number at j->p. Returns 0 and its class in *cls (value in *out for JP_NUM_INT), or -1. */
static int jp_number(struct jp *j, int64_t *out, enum jp_num *cls)
{
    int neg = 0;
    int big = 0;
    uint64_t mag = 0;
    uint64_t limit;

    *out = 0;
    *cls = JP_NUM_INT;
    if (*j->p == '-') {
        neg = 1;
        j->p++;
    }
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
        jp_syntax(j, "invalid number");
        return -1;
    }
    if (*j->p == '0') {
        j->p++;
        if (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
            jp_syntax(j, "invalid number (leading zero)");
            return -1;
        }
    } else {
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
            unsigned d = (unsigned)(*j->p - '0');

            if (!big && mag > (limit - d) / 10)
                big = 1;
            if (!big)
                mag = mag * 10 + d;
            j->p++;
        }
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
            jp_syntax(j, "invalid number");
            return -1;
        }
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
        *cls = JP_NUM_REAL;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
            jp_syntax(j, "invalid number");
            return -1;
        }
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
        *cls = JP_NUM_REAL;
    }
    if (*cls == JP_NUM_REAL)
        return 0;
    if (big) {
        *cls = neg ? JP_NUM_NEGBIG : JP_NUM_BIG;
        return 0;
    }
    if (neg)
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    else
        *out = (int64_t)mag;
    return 0;
}

static int jp_literal(struct jp *j, const char *lit, size_t n)
{
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) {
        jp_syntax(j, "invalid literal");
        return -1;
    }
    j->p += n;
    return 0;
}

/* Any value at j->p (whitespace skipped already): checked for syntax and discarded. */
static int jp_skip(struct jp *j, int depth)
{
    int flags;
    int64_t x;
    enum jp_num cls;

    if (j->p >= j->end) {
        jp_syntax(j, "unexpected end of input");
        return -1;
    }
    if (depth > JP_MAX_DEPTH) {
        jp_syntax(j, "nesting too deep");
        return -1;
    }
    switch (*j->p) {
    case '"':
        return jp_string(j, NULL, 0, &flags);
    case 't':
        return jp_literal(j, "true", 4);
    case 'f':
        return jp_literal(j, "false", 5);
    case 'n':
        return jp_literal(j, "null", 4);
    case '[':
        j->p++;
        jp_ws(j);
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 0;
        }
        for (;;) {
            jp_ws(j);
            if (jp_skip(j, depth + 1) != 0)
                return -1;
            jp_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                j->p++;
                return 0;
            }
            jp_syntax(j, "expected ',' or ']'");
            return -1;
        }
    case '{':
        j->p++;
        jp_ws(j);
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return 0;
        }
        for (;;) {
            jp_ws(j);
            if (j->p >= j->end || *j->p != '"') {
                jp_syntax(j, "expected a string key");
                return -1;
            }
            if (jp_string(j, NULL, 0, &flags) != 0)
                return -1;
            jp_ws(j);
            if (j->p >= j->end || *j->p != ':') {
                jp_syntax(j, "expected ':'");
                return -1;
            }
            j->p++;
            jp_ws(j);
            if (jp_skip(j, depth + 1) != 0)
                return -1;
            jp_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == '}') {
                j->p++;
                return 0;
            }
            jp_syntax(j, "expected ',' or '}'");
            return -1;
        }
    default:
        if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
            return jp_number(j, &x, &cls);
        jp_syntax(j, "unexpected character");
        return -1;
    }
}

/* Field kinds of the schema. */
enum fk { FK_V, FK_KIND, FK_UUID, FK_STR, FK_I64, FK_I32, FK_U32, FK_BOOL, FK_TRAIL, FK_TAGS };

struct field {
    const char *name;
    unsigned char len;  /* strlen(name) */
    unsigned char kind; /* enum fk */
    unsigned char required;
    unsigned short off; /* offset in the struct */
    unsigned short cap; /* string capacity, NUL included */
    int64_t max;        /* integer maximum */
};

#define F_STR(n, s, f, req)                                                                        \
    {                                                                                              \
        n, sizeof(n) - 1, FK_STR, req, offsetof(s, f), sizeof(((s *)0)->f), 0                      \
    }
#define F_INT(n, k, s, f, req, mx)                                                                 \
    {                                                                                              \
        n, sizeof(n) - 1, k, req, offsetof(s, f), 0, mx                                            \
    }

/* Schema order: the rank of a field is its index here. */
static const struct field event_fields[] = {
    {"v", 1, FK_V, 1, offsetof(struct proto_event, v), 0, 0},
    {"kind", 4, FK_KIND, 1, offsetof(struct proto_event, kind), 0, 0},
    {"call_id", 7, FK_UUID, 1, offsetof(struct proto_event, call_id), PROTO_CALL_ID_CAP, 0},
    F_INT("ts_start_ms", FK_I64, struct proto_event, ts_start_ms, 1, INT64_MAX),
    F_INT("ts_end_ms", FK_I64, struct proto_event, ts_end_ms, 1, INT64_MAX),
    F_STR("endpoint", struct proto_event, endpoint, 1),
    F_INT("stream", FK_BOOL, struct proto_event, stream, 0, 1),
    F_STR("key_hash", struct proto_event, key_hash, 0),
    F_STR("key_alias", struct proto_event, key_alias, 0),
    F_STR("team_id", struct proto_event, team_id, 0),
    F_STR("user_id", struct proto_event, user_id, 0),
    F_STR("end_user", struct proto_event, end_user, 0),
    F_STR("model_requested", struct proto_event, model_requested, 0),
    F_STR("model_group", struct proto_event, model_group, 0),
    F_STR("deployment_id", struct proto_event, deployment_id, 0),
    F_STR("provider", struct proto_event, provider, 0),
    F_STR("model", struct proto_event, model, 0),
    F_INT("status", FK_I32, struct proto_event, status, 1, 999),
    F_STR("error_class", struct proto_event, error_class, 0),
    F_INT("prompt_tokens", FK_I64, struct proto_event, prompt_tokens, 0, INT64_MAX),
    F_INT("completion_tokens", FK_I64, struct proto_event, completion_tokens, 0, INT64_MAX),
    F_INT("cost_nusd", FK_I64, struct proto_event, cost_nusd, 0, INT64_MAX),
    F_INT("latency_ms", FK_I64, struct proto_event, latency_ms, 0, INT64_MAX),
    F_INT("ttft_ms", FK_I64, struct proto_event, ttft_ms, 0, INT64_MAX),
    F_INT("attempts", FK_I32, struct proto_event, attempts, 0, INT32_MAX),
    F_INT("fallbacks", FK_I32, struct proto_event, fallbacks, 0, INT32_MAX),
    F_INT("cache_read_tokens", FK_I64, struct proto_event, cache_read_tokens, 0, INT64_MAX),
    F_INT("cache_creation_tokens", FK_I64, struct proto_event, cache_creation_tokens, 0, INT64_MAX),
    F_INT("reasoning_tokens", FK_I64, struct proto_event, reasoning_tokens, 0, INT64_MAX),
    F_INT("price_unknown", FK_BOOL, struct proto_event, price_unknown, 0, 1),
    {"trail", 5, FK_TRAIL, 0, 0, 0, 0},
    {"tags", 4, FK_TAGS, 0, 0, 0, 0},
    F_STR("trace_id", struct proto_event, trace_id, 0),
};
#define EVENT_NFIELDS (sizeof(event_fields) / sizeof(event_fields[0]))
#define RANK_TRACE_ID ((int)EVENT_NFIELDS - 1)
#define RANK_KEY_HASH 7
_Static_assert(EVENT_NFIELDS <= 64, "the decoder's seen mask has 64 bits");

static const struct field attempt_fields[] = {
    F_STR("group", struct proto_attempt, group, 0),
    F_STR("deployment_id", struct proto_attempt, deployment_id, 0),
    F_INT("status", FK_I32, struct proto_attempt, http_status, 0, 999),
    F_STR("error_class", struct proto_attempt, error_class, 0),
    F_INT("latency_ms", FK_U32, struct proto_attempt, latency_ms, 0, UINT32_MAX),
    F_STR("message", struct proto_attempt, message, 0),
};
#define ATTEMPT_NFIELDS (sizeof(attempt_fields) / sizeof(attempt_fields[0]))

/* Ranks: field index * 1024 for a top-level field; inside the trail and tags the array-level
 * problems come first, then entries in order, then subfields in schema order. */
static int rank_of(int field)
{
    return field * 1024;
}

/* field_find: the field named key in tab, looked for from *hint on (wrapping round); *hint
 * then points after it. The encoder writes fields in table order, so its events find each
 * key at the first comparison; any other order still finds every key. */
static const struct field *field_find(const struct field *tab, size_t n, const char *key,
                                      size_t klen, size_t *idx, size_t *hint)
{
    size_t i = *hint < n ? *hint : 0;

    for (size_t k = 0; k < n; k++, i = i + 1 < n ? i + 1 : 0) {
        if (tab[i].len == klen && memcmp(tab[i].name, key, klen) == 0) {
            *idx = i;
            *hint = i + 1;
            return &tab[i];
        }
    }
    return NULL;
}

/* How a field is named in reasons: "model", "trail[2].message", "tags[1]". Formatted only
 * when a reason is actually recorded. */
struct jlabel {
    const char *array; /* "trail" or "tags", NULL for a top-level field */
    size_t entry;      /* index in the array */
    const char *name;  /* field name; NULL for a tags entry */
};

static void jp_ferr(struct jp *j, int rank, const struct jlabel *L, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void jp_ferr(struct jp *j, int rank, const struct jlabel *L, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (rank >= j->rank)
        return;
    j->rank = rank;
    if (L->array == NULL)
        n = snprintf(j->err, sizeof(j->err), "field %s: ", L->name);
    else if (L->name == NULL)
        n = snprintf(j->err, sizeof(j->err), "field %s[%zu]: ", L->array, L->entry);
    else
        n = snprintf(j->err, sizeof(j->err), "field %s[%zu].%s: ", L->array, L->entry, L->name);
    if (n < 0 || (size_t)n >= sizeof(j->err))
        return;
    va_start(ap, fmt);
    vsnprintf(j->err + n, sizeof(j->err) - (size_t)n, fmt, ap);
    va_end(ap);
}

/* One scalar field value at j->p into base + f->off; schema problems are ranked, syntax
 * problems returned as -1. L names the field in reasons. */
static int jp_scalar(struct jp *j, const struct field *f, void *base, int rank,
                     const struct jlabel *L)
{
    unsigned char *dst = (unsigned char *)base + f->off;
    int flags;
    int64_t x;
    enum jp_num cls;

    if (j->p >= j->end) {
        jp_syntax(j, "unexpected end of input");
        return -1;
    }
    switch ((enum fk)f->kind) {
    case FK_STR:
    case FK_UUID:
        if (*j->p != '"') {
            jp_ferr(j, rank, L, "not a string");
            return jp_skip(j, 1);
        }
        if (jp_string(j, (char *)dst, f->cap, &flags) != 0)
            return -1;
        if (f->kind == FK_UUID && (flags != 0 || !proto_is_uuid((char *)dst)))
            jp_ferr(j, rank, L, "not a UUID");
        else if (f->kind == FK_UUID)
            proto_uuid_lower((char *)dst);
        else if (flags & JP_STR_NUL)
            jp_ferr(j, rank, L, "contains a NUL character");
        else if (flags & JP_STR_OVERCAP)
            jp_ferr(j, rank, L, "longer than %u bytes", f->cap - 1u);
        return 0;
    case FK_KIND: {
        char k[16];

        if (*j->p != '"') {
            jp_ferr(j, rank, L, "not a string");
            return jp_skip(j, 1);
        }
        if (jp_string(j, k, sizeof(k), &flags) != 0)
            return -1;
        if (flags == 0 && strcmp(k, "request") == 0)
            *(enum proto_kind *)dst = PROTO_KIND_REQUEST;
        else if (flags == 0 && strcmp(k, "cooldown") == 0)
            *(enum proto_kind *)dst = PROTO_KIND_COOLDOWN;
        else
            jp_ferr(j, rank, L, "not \"request\" or \"cooldown\"");
        return 0;
    }
    case FK_BOOL:
        if (*j->p == 't') {
            *(int *)dst = 1;
            return jp_literal(j, "true", 4);
        }
        if (*j->p == 'f') {
            *(int *)dst = 0;
            return jp_literal(j, "false", 5);
        }
        jp_ferr(j, rank, L, "not a boolean");
        return jp_skip(j, 1);
    case FK_V:
    case FK_I64:
    case FK_I32:
    case FK_U32:
        if (*j->p != '-' && (*j->p < '0' || *j->p > '9')) {
            jp_ferr(j, rank, L, "not an integer");
            return jp_skip(j, 1);
        }
        if (jp_number(j, &x, &cls) != 0)
            return -1;
        if (cls == JP_NUM_REAL) {
            jp_ferr(j, rank, L, "not an integer");
            return 0;
        }
        if (f->kind == FK_V) {
            if (cls != JP_NUM_INT)
                jp_ferr(j, rank, L, "unsupported version (out of range)");
            else if (x != PROTO_EVENT_VERSION)
                jp_ferr(j, rank, L, "unsupported version %lld", (long long)x);
            else
                *(int32_t *)dst = (int32_t)x;
            return 0;
        }
        if (cls == JP_NUM_NEGBIG || (cls == JP_NUM_INT && x < 0)) {
            jp_ferr(j, rank, L, "negative");
            return 0;
        }
        if (cls == JP_NUM_BIG || x > f->max) {
            jp_ferr(j, rank, L, "out of range (max %lld)", (long long)f->max);
            return 0;
        }
        if (f->kind == FK_I64)
            *(int64_t *)dst = x;
        else if (f->kind == FK_I32)
            *(int32_t *)dst = (int32_t)x;
        else
            *(uint32_t *)dst = (uint32_t)x;
        return 0;
    default:
        return jp_skip(j, 1);
    }
}

/* Generic "expect c after optional whitespace" helpers for the two object parsers. */
static int jp_expect(struct jp *j, unsigned char c, const char *what)
{
    jp_ws(j);
    if (j->p >= j->end || *j->p != c) {
        jp_syntax(j, what);
        return -1;
    }
    j->p++;
    return 0;
}

/* Returns 1 after ',' (another member follows), 0 after the closer, -1 on a syntax error. */
static int jp_next(struct jp *j, unsigned char closer, const char *what)
{
    jp_ws(j);
    if (j->p < j->end && *j->p == ',') {
        j->p++;
        return 1;
    }
    if (j->p < j->end && *j->p == closer) {
        j->p++;
        return 0;
    }
    jp_syntax(j, what);
    return -1;
}

/* Object key at j->p into key (cap 32); longer keys come back as "" (never a known field). */
static int jp_key(struct jp *j, char *key, size_t cap, size_t *klen)
{
    int flags;

    jp_ws(j);
    if (j->p >= j->end || *j->p != '"') {
        jp_syntax(j, "expected a string key");
        return -1;
    }
    if (jp_string(j, key, cap, &flags) != 0)
        return -1;
    *klen = flags != 0 ? 0 : j->slen;
    if (flags != 0)
        key[0] = '\0';
    return jp_expect(j, ':', "expected ':'");
}

static int jp_attempt(struct jp *j, struct proto_attempt *a, size_t i, int base_rank)
{
    unsigned seen = 0;
    char key[32];
    size_t klen;
    size_t idx;
    size_t hint = 0;
    int more;

    j->p++; /* '{' */
    jp_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    do {
        const unsigned char *kpos;
        const struct field *f;

        jp_ws(j);
        kpos = j->p;
        if (jp_key(j, key, sizeof(key), &klen) != 0)
            return -1;
        jp_ws(j);
        f = field_find(attempt_fields, ATTEMPT_NFIELDS, key, klen, &idx, &hint);
        if (f == NULL) {
            if (jp_skip(j, 3) != 0)
                return -1;
        } else {
            if (seen & (1u << idx)) {
                char what[64];

                j->p = kpos;
                snprintf(what, sizeof(what), "duplicate key \"%s\"", f->name);
                jp_syntax(j, what);
                return -1;
            }
            seen |= 1u << idx;
            struct jlabel L = {"trail", i, f->name};

            if (jp_scalar(j, f, a, base_rank + (int)idx, &L) != 0)
                return -1;
        }
        more = jp_next(j, '}', "expected ',' or '}'");
    } while (more == 1);
    return more;
}

static int jp_trail(struct jp *j, struct proto_event *ev, int rank)
{
    size_t i = 0;
    int more;

    if (*j->p != '[') {
        jp_schema(j, rank, "field trail: not an array");
        return jp_skip(j, 1);
    }
    j->p++;
    jp_ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
    }
    do {
        jp_ws(j);
        if (j->p >= j->end) {
            jp_syntax(j, "unexpected end of input");
            return -1;
        }
        if (i >= PROTO_TRAIL_MAX) {
            jp_schema(j, rank, "field trail: more than %d entries", PROTO_TRAIL_MAX);
            if (jp_skip(j, 2) != 0)
                return -1;
        } else if (*j->p != '{') {
            jp_schema(j, rank + 1 + (int)i * 8, "field trail[%zu]: not an object", i);
            if (jp_skip(j, 2) != 0)
                return -1;
        } else {
            if (jp_attempt(j, &ev->trail[i], i, rank + 2 + (int)i * 8) != 0)
                return -1;
            ev->trail_len = (uint32_t)(i + 1);
        }
        i++;
        more = jp_next(j, ']', "expected ',' or ']'");
    } while (more == 1);
    return more;
}

static int jp_tags(struct jp *j, struct proto_event *ev, int rank)
{
    static const struct field tagf = {"tags", 4, FK_STR, 0, 0, PROTO_TAG_CAP, 0};
    size_t i = 0;
    int more;

    if (*j->p != '[') {
        jp_schema(j, rank, "field tags: not an array");
        return jp_skip(j, 1);
    }
    j->p++;
    jp_ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
    }
    do {
        jp_ws(j);
        if (j->p >= j->end) {
            jp_syntax(j, "unexpected end of input");
            return -1;
        }
        if (i >= PROTO_TAGS_MAX) {
            jp_schema(j, rank, "field tags: more than %d entries", PROTO_TAGS_MAX);
            if (jp_skip(j, 2) != 0)
                return -1;
        } else {
            struct jlabel L = {"tags", i, NULL};

            if (jp_scalar(j, &tagf, ev->tags[i], rank + 1 + (int)i, &L) != 0)
                return -1;
            ev->tags_len = (uint32_t)(i + 1);
        }
        i++;
        more = jp_next(j, ']', "expected ',' or ']'");
    } while (more == 1);
    return more;
}

/* The event object. Returns 0 when the JSON is well formed (schema errors in j), -1 if not. */
static int jp_event(struct jp *j, struct proto_event *ev, uint64_t *seen)
{
    char key[32];
    size_t klen;
    size_t idx;
    size_t hint = 0;
    int more;

    j->p++; /* '{' */
    jp_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    do {
        const unsigned char *kpos;
        const struct field *f;

        jp_ws(j);
        kpos = j->p;
        if (jp_key(j, key, sizeof(key), &klen) != 0)
            return -1;
        jp_ws(j);
        f = field_find(event_fields, EVENT_NFIELDS, key, klen, &idx, &hint);
        if (f == NULL) {
            if (jp_skip(j, 1) != 0)
                return -1;
        } else {
            int rc;

            if (*seen & (1ull << idx)) {
                char what[64];

                j->p = kpos;
                snprintf(what, sizeof(what), "duplicate key \"%s\"", f->name);
                jp_syntax(j, what);
                return -1;
            }
            *seen |= 1ull << idx;
            if (j->p >= j->end) {
                jp_syntax(j, "unexpected end of input");
                return -1;
            }
            if (f->kind == FK_TRAIL)
                rc = jp_trail(j, ev, rank_of((int)idx));
            else if (f->kind == FK_TAGS)
                rc = jp_tags(j, ev, rank_of((int)idx));
            else {
                struct jlabel L = {NULL, 0, f->name};

                rc = jp_scalar(j, f, ev, rank_of((int)idx), &L);
            }
            if (rc != 0)
                return -1;
        }
        more = jp_next(j, '}', "expected ',' or '}'");
    } while (more == 1);
    return more;
}

int proto_event_decode(const char *data, size_t len, struct proto_event *ev, char *reason,
                       size_t reasoncap)
{
    struct jp j;
    uint64_t seen = 0;
    int rc = TG_EPROTO;

    if (reason != NULL && reasoncap > 0)
        reason[0] = '\0';
    if (ev == NULL)
        return TG_EINVAL;
    proto_event_init(ev);
    if (data == NULL) {
        set_reason(reason, reasoncap, "event: no data");
        rc = TG_EINVAL;
        goto out;
    }
    if (len > TG_EVENT_MAX_BYTES) {
        set_reason(reason, reasoncap, "event too large: %zu bytes > %d", len, TG_EVENT_MAX_BYTES);
        rc = TG_ETOOBIG;
        goto out;
    }
    j.start = j.p = (const unsigned char *)data;
    j.end = j.start + len;
    j.reason = reason;
    j.reasoncap = reasoncap;
    j.rank = JP_RANK_NONE;
    j.err[0] = '\0';

    jp_ws(&j);
    if (j.p >= j.end) {
        jp_syntax(&j, "unexpected end of input");
        goto out;
    }
    if (*j.p == '{') {
        if (jp_event(&j, ev, &seen) != 0)
            goto out;
    } else {
        if (jp_skip(&j, 1) != 0)
            goto out;
        jp_schema(&j, -1, "event: not a JSON object");
    }
    jp_ws(&j);
    if (j.p != j.end) {
        jp_syntax(&j, "unexpected data after the value");
        goto out;
    }
    if (j.rank > -1) {
        for (size_t i = 0; i < EVENT_NFIELDS; i++) {
            if (event_fields[i].required && !(seen & (1ull << i)))
                jp_schema(&j, rank_of((int)i), "field %s: missing", event_fields[i].name);
        }
        if (ev->key_hash[0] != '\0' && !proto_is_lower_hex(ev->key_hash, 64))
            jp_schema(&j, rank_of(RANK_KEY_HASH),
                      "field key_hash: not a lowercase SHA-256 hex digest");
        if (ev->trace_id[0] != '\0' && !proto_is_lower_hex(ev->trace_id, 32))
            jp_schema(&j, rank_of(RANK_TRACE_ID), "field trace_id: not 32 lowercase hex digits");
    }
    if (j.rank != JP_RANK_NONE) {
        set_reason(reason, reasoncap, "%s", j.err);
        goto out;
    }
    ev->v = PROTO_EVENT_VERSION;
    rc = 0;
out:
    if (rc != 0)
        proto_event_init(ev);
    return rc;
}

int proto_record_split(const char *data, size_t len, struct proto_span *spans, int cap, int *n)
{
    size_t at = 0;
    int k = 0;

    if (spans == NULL || n == NULL || cap < 1 || (data == NULL && len > 0))
        return TG_EINVAL;
    *n = 0;
    for (;;) {
        const char *nl = at < len ? memchr(data + at, '\n', len - at) : NULL;
        size_t end = nl != NULL ? (size_t)(nl - data) : len;

        if (k == cap)
            return TG_ETOOBIG;
        spans[k].off = at;
        spans[k].len = end - at;
        k++;
        if (nl == NULL || end + 1 == len)
            break; /* the last event, or a newline that ends the record */
        at = end + 1;
    }
    *n = k;
    return 0;
}
