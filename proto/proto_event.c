#include "proto_event.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <stddef.h>
#include "tg_err.h"

/* ---------------------------------------------------------------------------------------------
 * UTF-8 helpers
 * ------------------------------------------------------------------------------------------- */

static const char utf8_replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Length (1..4) of the well-formed UTF-8 sequence at s, which has at most n readable bytes, or
 * 0 when it is not well formed (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF). A NUL
 * is never a continuation byte, so a sequence never runs over the end of a C string. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];

    if (c < 0x80)
        return 1;
    if (c < 0xC2)
        return 0;
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return 0;
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        if (c == 0xE0 && s[1] < 0xA0)
            return 0;
        if (c == 0xED && s[1] > 0x9F)
            return 0;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90)
            return 0;
        if (c == 0xF4 && s[1] > 0x8F)
            return 0;
        return 4;
    }
    return 0;
}

/* Copy the C string src (read at most srcmax bytes) into dst of cap bytes as well-formed UTF-8:
 * each byte that does not start a well-formed sequence becomes U+FFFD; the copy stops at a
 * character boundary when the next character does not fit in cap - 1 bytes. dst and src must
 * not overlap. Returns the output length; *cut is 1 when input was left over. */
static size_t utf8_clean(char *dst, size_t cap, const char *src, size_t srcmax, int *cut)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0;
    size_t o = 0;

    *cut = 0;
    if (cap == 0)
        return 0;
    if (src == NULL) {
        dst[0] = '\0';
        return 0;
    }
    while (i < srcmax && s[i] != '\0') {
        const char *put;
        size_t putlen;
        size_t k;

        if (s[i] < 0x80) {
            if (o + 1 > cap - 1) {
                *cut = 1;
                break;
            }
            dst[o++] = (char)s[i++];
            continue;
        }
        k = utf8_seq_len(s + i, srcmax - i);
        if (k == 0) {
            put = utf8_replacement;
            putlen = 3;
            k = 1;
        } else {
            put = (const char *)s + i;
            putlen = k;
        }
        if (o + putlen > cap - 1) {
            *cut = 1;
            break;
        }
        memcpy(dst + o, put, putlen);
        o += putlen;
        i += k;
    }
    dst[o] = '\0';
    return o;
}

/* ---------------------------------------------------------------------------------------------
 * Event construction
 * ------------------------------------------------------------------------------------------- */

void proto_event_init(struct proto_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    ev->v = PROTO_EVENT_VERSION;
}

int proto_str_set(char *dst, size_t cap, const char *src)
{
    int cut = 0;

    utf8_clean(dst, cap, src, (size_t)-1, &cut);
    return cut;
}

/* Copy a fixed array that may lack its NUL (read at most cap bytes) into a field of cap bytes. */
static void field_copy(char *dst, const char *src, size_t cap)
{
    int cut;

    utf8_clean(dst, cap, src, cap, &cut);
}

int proto_event_add_attempt(struct proto_event *ev, const struct proto_attempt *a)
{
    struct proto_attempt *slot;
    int dropped = 0;

    if (ev->trail_len > PROTO_TRAIL_MAX)
        ev->trail_len = PROTO_TRAIL_MAX;
    if (ev->trail_len == PROTO_TRAIL_MAX) {
        /* Ring semantics with entries kept in order: drop the oldest, shift the rest down. */
        memmove(&ev->trail[0], &ev->trail[1], (PROTO_TRAIL_MAX - 1) * sizeof(ev->trail[0]));
        ev->trail_len--;
        dropped = 1;
    }
    slot = &ev->trail[ev->trail_len];
    memset(slot, 0, sizeof(*slot));
    field_copy(slot->group, a->group, sizeof(slot->group));
    field_copy(slot->deployment_id, a->deployment_id, sizeof(slot->deployment_id));
    field_copy(slot->error_class, a->error_class, sizeof(slot->error_class));
    field_copy(slot->message, a->message, sizeof(slot->message));
    slot->http_status = a->http_status;
    slot->latency_ms = a->latency_ms;
    ev->trail_len++;
    if (ev->attempts < INT32_MAX)
        ev->attempts++;
    return dropped;
}

int proto_event_add_tag(struct proto_event *ev, const char *tag)
{
    if (ev->tags_len >= PROTO_TAGS_MAX)
        return TG_EFULL;
    proto_str_set(ev->tags[ev->tags_len], PROTO_TAG_CAP, tag);
    ev->tags_len++;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Encoder
 * ------------------------------------------------------------------------------------------- */

/* Output bytes per input byte inside a JSON string (input is well-formed UTF-8 by then):
 * \u00XX for control characters, a two-byte escape for the short forms, the byte otherwise. */
static const unsigned char esc_width[256] = {
    [0x00 ... 0x07] = 6, [0x08 ... 0x0a] = 2, /* \b \t \n */
    [0x0b] = 6,          [0x0c ... 0x0d] = 2, /* \f \r */
    [0x0e ... 0x1f] = 6, [0x20 ... 0x21] = 1, [0x22] = 2, /* " */
    [0x23 ... 0x5b] = 1, [0x5c] = 2,                      /* \\ */
    [0x5d ... 0xff] = 1,
};
static const char esc_short[256] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r',
                                    ['\t'] = 't', ['"'] = '"',  ['\\'] = '\\'};

/* Writer into a fixed buffer; keeps counting past the end so the caller learns the full size. */
struct jw {
    char *buf;
    size_t cap; /* bytes that may be written */
    size_t len; /* bytes the whole object needs so far */
};

static inline void jw_put(struct jw *w, const char *s, size_t n)
{
    if (w->len + n <= w->cap)
        memcpy(w->buf + w->len, s, n);
    w->len += n;
}

#define JW_LIT(w, lit) jw_put((w), (lit), sizeof(lit) - 1)

static void jw_str(struct jw *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *run = p;

    jw_put(w, "\"", 1);
    for (; *p != '\0'; p++) {
        unsigned char c = *p;
        char e[6];

        if (esc_width[c] == 1)
            continue;
        jw_put(w, (const char *)run, (size_t)(p - run));
        run = p + 1;
        e[0] = '\\';
        if (esc_short[c] != 0) {
            e[1] = esc_short[c];
            jw_put(w, e, 2);
        } else {
            e[1] = 'u';
            e[2] = '0';
            e[3] = '0';
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            jw_put(w, e, 6);
        }
    }
    jw_put(w, (const char *)run, (size_t)(p - run));
    jw_put(w, "\"", 1);
}

static void jw_i64(struct jw *w, int64_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        tmp[--i] = '-';
    jw_put(w, tmp + i, sizeof(tmp) - i);
}

/* Escaped size of a string (quotes excluded). */
static size_t esc_len(const char *s)
{
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        n += esc_width[*p];
    return n;
}

/* Cut s (well-formed UTF-8) at the last character boundary where its escaped size is still
 * <= budget. Returns the escaped size after the cut. */
static size_t esc_cut(char *s, size_t budget)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t used = 0;
    size_t i = 0;

    while (p[i] != '\0') {
        size_t k = utf8_seq_len(p + i, 4);
        size_t wdt;

        if (k == 0)
            k = 1; /* cannot happen after utf8_clean; stay safe */
        wdt = (k == 1) ? esc_width[p[i]] : k;
        if (used + wdt > budget)
            break;
        used += wdt;
        i += k;
    }
    s[i] = '\0';
    return used;
}

static int is_lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return s[n] == '\0';
}

static int is_uuid(const char *s)
{
    for (int i = 0; i < 36; i++) {
        char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return 0;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
            return 0;
        }
    }
    return s[36] == '\0';
}

/* Canonical UUID text is lowercase; input may be either case (RFC 9562). */
static void uuid_lower(char *s)
{
    for (; *s != '\0'; s++) {
        if (*s >= 'A' && *s <= 'F')
            *s = (char)(*s - 'A' + 'a');
    }
}

static int64_t nonneg(int64_t v)
{
    return v < 0 ? 0 : v;
}

static int32_t http_status_norm(int32_t s)
{
    return (s < 0 || s > 999) ? 0 : s;
}

/* Build the working copy: every string cleaned and capped, every value normalised. */
static void encode_prepare(struct proto_event *w, const struct proto_event *ev)
{
    w->v = PROTO_EVENT_VERSION;
    w->kind = ev->kind;
    field_copy(w->call_id, ev->call_id, sizeof(w->call_id));
    uuid_lower(w->call_id);
    w->ts_start_ms = nonneg(ev->ts_start_ms);
    w->ts_end_ms = nonneg(ev->ts_end_ms);
    field_copy(w->endpoint, ev->endpoint, sizeof(w->endpoint));
    w->stream = ev->stream != 0;
    field_copy(w->key_hash, ev->key_hash, sizeof(w->key_hash));
    if (!is_lower_hex(w->key_hash, 64))
        w->key_hash[0] = '\0';
    field_copy(w->key_alias, ev->key_alias, sizeof(w->key_alias));
    field_copy(w->team_id, ev->team_id, sizeof(w->team_id));
    field_copy(w->user_id, ev->user_id, sizeof(w->user_id));
    field_copy(w->end_user, ev->end_user, sizeof(w->end_user));
    field_copy(w->model_requested, ev->model_requested, sizeof(w->model_requested));
    field_copy(w->model_group, ev->model_group, sizeof(w->model_group));
    field_copy(w->deployment_id, ev->deployment_id, sizeof(w->deployment_id));
    field_copy(w->provider, ev->provider, sizeof(w->provider));
    field_copy(w->model, ev->model, sizeof(w->model));
    w->status = http_status_norm(ev->status);
    field_copy(w->error_class, ev->error_class, sizeof(w->error_class));
    w->prompt_tokens = nonneg(ev->prompt_tokens);
    w->completion_tokens = nonneg(ev->completion_tokens);
    w->cost_nusd = nonneg(ev->cost_nusd);
    w->latency_ms = nonneg(ev->latency_ms);
    w->ttft_ms = nonneg(ev->ttft_ms);
    w->attempts = ev->attempts < 0 ? 0 : ev->attempts;
    w->fallbacks = ev->fallbacks < 0 ? 0 : ev->fallbacks;
    w->cache_read_tokens = nonneg(ev->cache_read_tokens);
    w->cache_creation_tokens = nonneg(ev->cache_creation_tokens);
    w->reasoning_tokens = nonneg(ev->reasoning_tokens);
    w->price_unknown = ev->price_unknown != 0;
    w->trail_len = ev->trail_len > PROTO_TRAIL_MAX ? PROTO_TRAIL_MAX : ev->trail_len;
    for (uint32_t i = 0; i < w->trail_len; i++) {
        const struct proto_attempt *a = &ev->trail[i];
        struct proto_attempt *b = &w->trail[i];

        field_copy(b->group, a->group, sizeof(b->group));
        field_copy(b->deployment_id, a->deployment_id, sizeof(b->deployment_id));
        b->http_status = http_status_norm(a->http_status);
        field_copy(b->error_class, a->error_class, sizeof(b->error_class));
        b->latency_ms = a->latency_ms;
        field_copy(b->message, a->message, sizeof(b->message));
    }
    w->tags_len = ev->tags_len > PROTO_TAGS_MAX ? PROTO_TAGS_MAX : ev->tags_len;
    for (uint32_t i = 0; i < w->tags_len; i++)
        field_copy(w->tags[i], ev->tags[i], PROTO_TAG_CAP);
    field_copy(w->trace_id, ev->trace_id, sizeof(w->trace_id));
    if (!is_lower_hex(w->trace_id, 32))
        w->trace_id[0] = '\0';
}

static void encode_write(struct jw *w, const struct proto_event *e)
{
    JW_LIT(w, "{\"v\":");
    jw_i64(w, e->v);
    if (e->kind == PROTO_KIND_COOLDOWN)
        JW_LIT(w, ",\"kind\":\"cooldown\"");
    else
        JW_LIT(w, ",\"kind\":\"request\"");
    JW_LIT(w, ",\"call_id\":");
    jw_str(w, e->call_id);
    JW_LIT(w, ",\"ts_start_ms\":");
    jw_i64(w, e->ts_start_ms);
    JW_LIT(w, ",\"ts_end_ms\":");
    jw_i64(w, e->ts_end_ms);
    JW_LIT(w, ",\"endpoint\":");
    jw_str(w, e->endpoint);
    if (e->stream)
        JW_LIT(w, ",\"stream\":true");
    else
        JW_LIT(w, ",\"stream\":false");
    JW_LIT(w, ",\"key_hash\":");
    jw_str(w, e->key_hash);
    JW_LIT(w, ",\"key_alias\":");
    jw_str(w, e->key_alias);
    JW_LIT(w, ",\"team_id\":");
    jw_str(w, e->team_id);
    JW_LIT(w, ",\"user_id\":");
    jw_str(w, e->user_id);
    JW_LIT(w, ",\"end_user\":");
    jw_str(w, e->end_user);
    JW_LIT(w, ",\"model_requested\":");
    jw_str(w, e->model_requested);
    JW_LIT(w, ",\"model_group\":");
    jw_str(w, e->model_group);
    JW_LIT(w, ",\"deployment_id\":");
    jw_str(w, e->deployment_id);
    JW_LIT(w, ",\"provider\":");
    jw_str(w, e->provider);
    JW_LIT(w, ",\"model\":");
    jw_str(w, e->model);
    JW_LIT(w, ",\"status\":");
    jw_i64(w, e->status);
    JW_LIT(w, ",\"error_class\":");
    jw_str(w, e->error_class);
    JW_LIT(w, ",\"prompt_tokens\":");
    jw_i64(w, e->prompt_tokens);
    JW_LIT(w, ",\"completion_tokens\":");
    jw_i64(w, e->completion_tokens);
    JW_LIT(w, ",\"cost_nusd\":");
    jw_i64(w, e->cost_nusd);
    JW_LIT(w, ",\"latency_ms\":");
    jw_i64(w, e->latency_ms);
    JW_LIT(w, ",\"ttft_ms\":");
    jw_i64(w, e->ttft_ms);
    JW_LIT(w, ",\"attempts\":");
    jw_i64(w, e->attempts);
    JW_LIT(w, ",\"fallbacks\":");
    jw_i64(w, e->fallbacks);
    if (e->cache_read_tokens > 0) {
        JW_LIT(w, ",\"cache_read_tokens\":");
        jw_i64(w, e->cache_read_tokens);
    }
    if (e->cache_creation_tokens > 0) {
        JW_LIT(w, ",\"cache_creation_tokens\":");
        jw_i64(w, e->cache_creation_tokens);
    }
    if (e->reasoning_tokens > 0) {
        JW_LIT(w, ",\"reasoning_tokens\":");
        jw_i64(w, e->reasoning_tokens);
    }
    if (e->price_unknown)
        JW_LIT(w, ",\"price_unknown\":true");
    JW_LIT(w, ",\"trail\":[");
    for (uint32_t i = 0; i < e->trail_len; i++) {
        const struct proto_attempt *a = &e->trail[i];

        if (i > 0)
            JW_LIT(w, ",");
        JW_LIT(w, "{\"group\":");
        jw_str(w, a->group);
        JW_LIT(w, ",\"deployment_id\":");
        jw_str(w, a->deployment_id);
        JW_LIT(w, ",\"status\":");
        jw_i64(w, a->http_status);
        JW_LIT(w, ",\"error_class\":");
        jw_str(w, a->error_class);
        JW_LIT(w, ",\"latency_ms\":");
        jw_i64(w, a->latency_ms);
        JW_LIT(w, ",\"message\":");
        jw_str(w, a->message);
        JW_LIT(w, "}");
    }
    JW_LIT(w, "],\"tags\":[");
    for (uint32_t i = 0; i < e->tags_len; i++) {
        if (i > 0)
            JW_LIT(w, ",");
        jw_str(w, e->tags[i]);
    }
    JW_LIT(w, "]");
    if (e->trace_id[0] != '\0') {
        JW_LIT(w, ",\"trace_id\":");
        jw_str(w, e->trace_id);
    }
    JW_LIT(w, "}");
}

/* Shorten fields in the documented order until excess bytes are gone. Returns what is left of
 * the excess (0 unless the fixed part alone were too large, which the limits rule out). */
static size_t encode_shorten(struct proto_event *e, size_t excess)
{
    char *order[PROTO_TRAIL_MAX + PROTO_TAGS_MAX + 4 + 3 * PROTO_TRAIL_MAX + 6];
    size_t n = 0;

    for (uint32_t i = 0; i < e->trail_len; i++)
        order[n++] = e->trail[i].message;
    for (uint32_t i = e->tags_len; i > 0; i--)
        order[n++] = e->tags[i - 1];
    order[n++] = e->end_user;
    order[n++] = e->user_id;
    order[n++] = e->key_alias;
    order[n++] = e->team_id;
    for (uint32_t i = 0; i < e->trail_len; i++) {
        order[n++] = e->trail[i].group;
        order[n++] = e->trail[i].deployment_id;
        order[n++] = e->trail[i].error_class;
    }
    order[n++] = e->model_requested;
    order[n++] = e->model;
    order[n++] = e->model_group;
    order[n++] = e->deployment_id;
    order[n++] = e->provider;
    order[n++] = e->error_class;

    for (size_t i = 0; i < n && excess > 0; i++) {
        size_t before = esc_len(order[i]);
        size_t after;

        if (before == 0)
            continue;
        after = esc_cut(order[i], before > excess ? before - excess : 0);
        excess -= (before - after) < excess ? (before - after) : excess;
    }
    return excess;
}

int proto_event_encode(const struct proto_event *ev, char *out, size_t outcap, size_t *outlen)
{
    struct proto_event work;
    struct jw w;

    if (ev == NULL || out == NULL || outcap < TG_EVENT_MAX_BYTES + 1)
        return TG_EINVAL;
    if (ev->kind != PROTO_KIND_REQUEST && ev->kind != PROTO_KIND_COOLDOWN)
        return TG_EINVAL;
    memset(&work, 0, sizeof(work));
    encode_prepare(&work, ev);
    if (!is_uuid(work.call_id))
        return TG_EINVAL;

    w.buf = out;
    w.cap = TG_EVENT_MAX_BYTES;
    w.len = 0;
    encode_write(&w, &work);
    if (w.len > TG_EVENT_MAX_BYTES) {
        if (encode_shorten(&work, w.len - TG_EVENT_MAX_BYTES) != 0)
            return TG_ETOOBIG; /* unreachable with the caps in proto_event.h */
        w.len = 0;
        encode_write(&w, &work);
        if (w.len > TG_EVENT_MAX_BYTES)
            return TG_ETOOBIG;
    }
    out[w.len] = '\0';
    if (outlen != NULL)
        *outlen = w.len;
    return 0;
}

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
            n = utf8_seq_len(j->p, (size_t)(j->end - j->p));
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
        if (f->kind == FK_UUID && (flags != 0 || !is_uuid((char *)dst)))
            jp_ferr(j, rank, L, "not a UUID");
        else if (f->kind == FK_UUID)
            uuid_lower((char *)dst);
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
        if (ev->key_hash[0] != '\0' && !is_lower_hex(ev->key_hash, 64))
            jp_schema(&j, rank_of(RANK_KEY_HASH),
                      "field key_hash: not a lowercase SHA-256 hex digest");
        if (ev->trace_id[0] != '\0' && !is_lower_hex(ev->trace_id, 32))
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
