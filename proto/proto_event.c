#include "proto_event.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <stddef.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "proto_int.h"
#include "tg_err.h"
#include "tg_str.h"
#include "tg_utf8.h"

/* ---------------------------------------------------------------------------------------------
 * UTF-8 helpers
 * ------------------------------------------------------------------------------------------- */

static const char utf8_replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

#define HIGHS 0x8080808080808080ull

/* 1 when none of the n bytes at s has its high bit set (ASCII), 8 bytes at a time. */
static int ascii_only(const unsigned char *s, size_t n)
{
    uint64_t acc = 0;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x;

        memcpy(&x, s + i, 8);
        acc |= x;
    }
    for (; i < n; i++)
        acc |= s[i];
    return (acc & HIGHS) == 0;
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
    /* Every field of a real event: ASCII that fits, copied as it is. */
    o = strnlen(src, srcmax);
    if (o < cap && ascii_only(s, o)) {
        memcpy(dst, src, o);
        dst[o] = '\0';
        return o;
    }
    o = 0;
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
        k = tg_utf8_seq(s + i, srcmax - i);
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

/* Writer into a fixed buffer; keeps counting past the end so the caller learns the full size.
 * In direct mode the strings are the caller's own fields, not yet cleaned: the first one that
 * is not ASCII ending within its capacity sets bail, and the caller goes the cleaning way. */
struct jw {
    char *buf;
    size_t cap; /* bytes that may be written */
    size_t len; /* bytes the whole object needs so far */
    int direct; /* strings are the caller's, unchecked */
    int bail;   /* direct mode met a string it cannot write as it is */
};

static inline void jw_put(struct jw *w, const char *s, size_t n)
{
    if (w->len + n <= w->cap)
        memcpy(w->buf + w->len, s, n);
    w->len += n;
}

#define JW_LIT(w, lit) jw_put((w), (lit), sizeof(lit) - 1)

/* Write the string field s of cap bytes (read up to its NUL, never at or past s + cap). */
static void jw_str(struct jw *w, const char *s, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *end = p + cap;
    const unsigned char *run;

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (w->len + cap + 2 <= w->cap) {
        /* Room for the whole field as it is: each word is stored as it is scanned, and the
         * output moves by its plain bytes (a word stored past them is overwritten next). A
         * string of plain bytes, every string of a real event, ends here. */
        char *o = w->buf + w->len;

        *o++ = '"';
#ifdef __SSE2__
        while (end - p >= 16) {
            /* 16 bytes a step: a special byte stops the copy there */
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
            unsigned m = tg_json_special16(v);

            _mm_storeu_si128((__m128i *)(void *)o, v);
            if (m != 0) {
                unsigned k = (unsigned)__builtin_ctz(m);

                p += k;
                o += k;
                goto plain_done;
            }
            p += 16;
            o += 16;
        }
#endif
        while (end - p >= 8) {
            uint64_t x, m;

            memcpy(&x, p, 8);
            memcpy(o, &x, 8);
            m = tg_json_special8(x);
            if (m != 0) {
                unsigned k = (unsigned)__builtin_ctzll(m) >> 3;

                p += k;
                o += k;
                break;
            }
            p += 8;
            o += 8;
        }
#ifdef __SSE2__
    plain_done:
#endif
        w->len = (size_t)(o - w->buf);
        if (p < end && *p == '\0') {
            w->buf[w->len++] = '"';
            return;
        }
    } else
#endif
    {
        jw_put(w, "\"", 1);
    }
    run = p;
    for (;;) {
        unsigned char c;
        char e[6];
        uint64_t x;

        if (end - p >= 8) {
            uint64_t m;

            memcpy(&x, p, 8);
            m = tg_json_special8(x);
            if (m == 0) {
                p += 8;
                continue;
            }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            p += (unsigned)__builtin_ctzll(m) >> 3; /* to the first byte that is not plain */
#endif
        } else if (p == end) { /* no NUL within the field: only the caller's own fields lack one */
            w->bail = 1;
            break;
        }
        c = *p;
        if (c == '\0')
            break;
        p++;
        if (c >= 0x80) {
            if (w->direct) { /* well-formed or not: the cleaning way decides */
                w->bail = 1;
                break;
            }
            continue; /* well-formed UTF-8 after utf8_clean */
        }
        if (esc_width[c] == 1)
            continue;
        jw_put(w, (const char *)run, (size_t)(p - 1 - run));
        run = p;
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
    char tmp[TG_U64_DEC_MAX + 1];
    char *dst = tmp;
    size_t n = 0;

    if (w->len + sizeof(tmp) <= w->cap)
        dst = w->buf + w->len; /* room for the longest: written in place */
    if (v < 0)
        dst[n++] = '-';
    n += tg_u64_dec(dst + n, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
    if (dst == tmp)
        jw_put(w, tmp, n);
    else
        w->len += n;
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
        size_t k = tg_utf8_seq(p + i, 4);
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

int proto_is_lower_hex(const char *s, size_t n)
{
    size_t i = 0;

#ifdef __SSE2__
    for (; i + 16 <= n; i += 16) {
        /* a byte minus '0' at most 9, or minus 'a' at most 5, as unsigned bytes */
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i d = _mm_sub_epi8(v, _mm_set1_epi8('0'));
        __m128i a = _mm_sub_epi8(v, _mm_set1_epi8('a'));
        __m128i ok = _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d),
                                  _mm_cmpeq_epi8(_mm_min_epu8(a, _mm_set1_epi8(5)), a));

        if (_mm_movemask_epi8(ok) != 0xffff)
            return 0;
    }
#endif
    for (; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return s[n] == '\0';
}

/* 1 for the bytes a UUID's hex digits may be (either case). */
static const unsigned char uuid_hex[256] = {
    ['0' ... '9'] = 1, ['a' ... 'f'] = 1, ['A' ... 'F'] = 1,
};

int proto_is_uuid(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;

    /* stops at the first byte that does not fit: never reads past a NUL */
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23 ? u[i] != '-' : !uuid_hex[u[i]])
            return 0;
    }
    return u[36] == '\0';
}

/* A UUID's hex digits (either case) in lowercase; 0 for every other byte. */
static const unsigned char uuid_hex_lower[256] = {
    ['0'] = '0', ['1'] = '1', ['2'] = '2', ['3'] = '3', ['4'] = '4', ['5'] = '5', ['6'] = '6',
    ['7'] = '7', ['8'] = '8', ['9'] = '9', ['a'] = 'a', ['b'] = 'b', ['c'] = 'c', ['d'] = 'd',
    ['e'] = 'e', ['f'] = 'f', ['A'] = 'a', ['B'] = 'b', ['C'] = 'c', ['D'] = 'd', ['E'] = 'e',
    ['F'] = 'f',
};

/* 1 when s is a UUID in either case and nothing more (what proto_uuid_lower then
 * proto_is_uuid accept), its canonical text then in out (PROTO_CALL_ID_CAP bytes). One pass;
 * stops at the first byte that does not fit, so never reads past a NUL. */
static int uuid_canon(char *out, const char *s)
{
    static const unsigned char group[5] = {8, 4, 4, 4, 12};
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;

    for (int g = 0; g < 5; g++) {
        for (unsigned k = 0; k < group[g]; k++, i++) {
            unsigned char c = uuid_hex_lower[u[i]];

            if (c == 0)
                return 0;
            out[i] = (char)c;
        }
        if (g < 4) {
            if (u[i] != '-')
                return 0;
            out[i++] = '-';
        }
    }
    if (u[i] != '\0')
        return 0;
    out[i] = '\0';
    return 1;
}

/* Canonical UUID text is lowercase; input may be either case (RFC 9562). */
void proto_uuid_lower(char *s)
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
    proto_uuid_lower(w->call_id);
    w->ts_start_ms = nonneg(ev->ts_start_ms);
    w->ts_end_ms = nonneg(ev->ts_end_ms);
    field_copy(w->endpoint, ev->endpoint, sizeof(w->endpoint));
    w->stream = ev->stream != 0;
    field_copy(w->key_hash, ev->key_hash, sizeof(w->key_hash));
    if (!proto_is_lower_hex(w->key_hash, 64))
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
    if (!proto_is_lower_hex(w->trace_id, 32))
        w->trace_id[0] = '\0';
}

/* 1 when the field s of cap bytes holds n lowercase hex digits and its end (key_hash, trace_id,
 * written only then). In direct mode an unterminated field bails: cut to its cap, which only
 * the cleaning way does, it may become valid. */
static int jw_hex_ok(struct jw *w, const char *s, size_t cap, size_t n)
{
    if (proto_is_lower_hex(s, n))
        return 1;
    if (w->direct && strnlen(s, cap) == cap)
        w->bail = 1;
    return 0;
}

/* A member's name: lit is ,"key": with its comma, left out when the member is the first of its
 * object (nothing written since the object's { at open; SIZE_MAX: never the first). */
static inline void jw_member(struct jw *w, size_t open, const char *lit, size_t litlen)
{
    if (w->len == open)
        jw_put(w, lit + 1, litlen - 1);
    else
        jw_put(w, lit, litlen);
}

/* The member lit with the string s of cap bytes, when s is not empty (an empty string is the
 * decoder's default: the member is left out). */
static inline void jw_opt_str(struct jw *w, size_t open, const char *lit, size_t litlen,
                              const char *s, size_t cap)
{
    if (s[0] == '\0')
        return;
    jw_member(w, open, lit, litlen);
    jw_str(w, s, cap);
}

/* The member lit with v, when v > 0 (0 is the decoder's default; negative values are
 * written as 0). */
static inline void jw_opt_i64(struct jw *w, size_t open, const char *lit, size_t litlen,
                              int64_t v)
{
    if (v <= 0)
        return;
    jw_member(w, open, lit, litlen);
    jw_i64(w, v);
}

#define JW_OPT_STR_IN(w, open, key, s, cap) jw_opt_str((w), (open), key, sizeof(key) - 1, (s), (cap))
#define JW_OPT_I64_IN(w, open, key, v) jw_opt_i64((w), (open), key, sizeof(key) - 1, (v))
#define JW_OPT_STR(w, key, s, cap) JW_OPT_STR_IN((w), SIZE_MAX, key, (s), (cap))
#define JW_OPT_I64(w, key, v) JW_OPT_I64_IN((w), SIZE_MAX, key, (v))

/* One attempt of the trail: its members that are not at their defaults ({} when none is). */
static void encode_attempt(struct jw *w, const struct proto_attempt *a)
{
    size_t open;
    int32_t status = http_status_norm(a->http_status);

    JW_LIT(w, "{");
    open = w->len;
    JW_OPT_STR_IN(w, open, ",\"group\":", a->group, sizeof(a->group));
    JW_OPT_STR_IN(w, open, ",\"deployment_id\":", a->deployment_id, sizeof(a->deployment_id));
    JW_OPT_I64_IN(w, open, ",\"status\":", status);
    JW_OPT_STR_IN(w, open, ",\"error_class\":", a->error_class, sizeof(a->error_class));
    JW_OPT_I64_IN(w, open, ",\"latency_ms\":", (int64_t)a->latency_ms);
    JW_OPT_STR_IN(w, open, ",\"message\":", a->message, sizeof(a->message));
    JW_LIT(w, "}");
}

/* Write e as JSON, normalising every value as encode_prepare does (idempotent on its output),
 * so that e may be the caller's own event (direct mode) or the cleaned working copy. call_id is
 * passed apart: lowercased and checked by the caller. The required members are always written;
 * an optional one only when it is not at the decoder's default ("", 0, false, []), which makes
 * a typical event a fifth shorter (every stage after the encoder handles its bytes). */
static void encode_write(struct jw *w, const struct proto_event *e, const char *call_id)
{
    uint32_t trail_len = e->trail_len > PROTO_TRAIL_MAX ? PROTO_TRAIL_MAX : e->trail_len;
    uint32_t tags_len = e->tags_len > PROTO_TAGS_MAX ? PROTO_TAGS_MAX : e->tags_len;

    _Static_assert(PROTO_EVENT_VERSION == 1, "the literal below writes v");
    if (e->kind == PROTO_KIND_COOLDOWN)
        JW_LIT(w, "{\"v\":1,\"kind\":\"cooldown\",\"call_id\":");
    else
        JW_LIT(w, "{\"v\":1,\"kind\":\"request\",\"call_id\":");
    jw_str(w, call_id, PROTO_CALL_ID_CAP);
    JW_LIT(w, ",\"ts_start_ms\":");
    jw_i64(w, nonneg(e->ts_start_ms));
    JW_LIT(w, ",\"ts_end_ms\":");
    jw_i64(w, nonneg(e->ts_end_ms));
    JW_LIT(w, ",\"endpoint\":");
    jw_str(w, e->endpoint, sizeof(e->endpoint));
    if (e->stream)
        JW_LIT(w, ",\"stream\":true");
    if (jw_hex_ok(w, e->key_hash, sizeof(e->key_hash), 64)) {
        JW_LIT(w, ",\"key_hash\":");
        jw_str(w, e->key_hash, sizeof(e->key_hash));
    }
    JW_OPT_STR(w, ",\"key_alias\":", e->key_alias, sizeof(e->key_alias));
    JW_OPT_STR(w, ",\"team_id\":", e->team_id, sizeof(e->team_id));
    JW_OPT_STR(w, ",\"user_id\":", e->user_id, sizeof(e->user_id));
    JW_OPT_STR(w, ",\"end_user\":", e->end_user, sizeof(e->end_user));
    JW_OPT_STR(w, ",\"model_requested\":", e->model_requested, sizeof(e->model_requested));
    JW_OPT_STR(w, ",\"model_group\":", e->model_group, sizeof(e->model_group));
    JW_OPT_STR(w, ",\"deployment_id\":", e->deployment_id, sizeof(e->deployment_id));
    JW_OPT_STR(w, ",\"provider\":", e->provider, sizeof(e->provider));
    JW_OPT_STR(w, ",\"model\":", e->model, sizeof(e->model));
    JW_LIT(w, ",\"status\":");
    jw_i64(w, http_status_norm(e->status));
    JW_OPT_STR(w, ",\"error_class\":", e->error_class, sizeof(e->error_class));
    JW_OPT_I64(w, ",\"prompt_tokens\":", e->prompt_tokens);
    JW_OPT_I64(w, ",\"completion_tokens\":", e->completion_tokens);
    JW_OPT_I64(w, ",\"cost_nusd\":", e->cost_nusd);
    JW_OPT_I64(w, ",\"latency_ms\":", e->latency_ms);
    JW_OPT_I64(w, ",\"ttft_ms\":", e->ttft_ms);
    JW_OPT_I64(w, ",\"attempts\":", e->attempts);
    JW_OPT_I64(w, ",\"fallbacks\":", e->fallbacks);
    JW_OPT_I64(w, ",\"cache_read_tokens\":", e->cache_read_tokens);
    JW_OPT_I64(w, ",\"cache_creation_tokens\":", e->cache_creation_tokens);
    JW_OPT_I64(w, ",\"reasoning_tokens\":", e->reasoning_tokens);
    if (e->price_unknown)
        JW_LIT(w, ",\"price_unknown\":true");
    if (trail_len > 0) {
        JW_LIT(w, ",\"trail\":[");
        for (uint32_t i = 0; i < trail_len; i++) {
            if (i > 0)
                JW_LIT(w, ",");
            encode_attempt(w, &e->trail[i]);
        }
        JW_LIT(w, "]");
    }
    if (tags_len > 0) {
        JW_LIT(w, ",\"tags\":[");
        for (uint32_t i = 0; i < tags_len; i++) {
            if (i > 0)
                JW_LIT(w, ",");
            jw_str(w, e->tags[i], PROTO_TAG_CAP);
        }
        JW_LIT(w, "]");
    }
    if (jw_hex_ok(w, e->trace_id, sizeof(e->trace_id), 32)) {
        JW_LIT(w, ",\"trace_id\":");
        jw_str(w, e->trace_id, sizeof(e->trace_id));
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

int proto_event_encode_cleaned(const struct proto_event *ev, char *out, size_t *outlen)
{
    struct proto_event work;
    struct jw w = {.buf = out, .cap = TG_EVENT_MAX_BYTES};

    encode_prepare(&work, ev); /* sets every field encode_write and encode_shorten read */
    if (!proto_is_uuid(work.call_id))
        return TG_EINVAL;
    encode_write(&w, &work, work.call_id);
    if (w.len > TG_EVENT_MAX_BYTES) {
        if (encode_shorten(&work, w.len - TG_EVENT_MAX_BYTES) != 0)
            return TG_ETOOBIG; /* unreachable with the caps in proto_event.h */
        w.len = 0;
        encode_write(&w, &work, work.call_id);
        if (w.len > TG_EVENT_MAX_BYTES)
            return TG_ETOOBIG;
    }
    out[w.len] = '\0';
    *outlen = w.len;
    return 0;
}

int proto_event_encode(const struct proto_event *ev, char *out, size_t outcap, size_t *outlen)
{
    char call_id[PROTO_CALL_ID_CAP];
    size_t len;
    int rc;

    if (ev == NULL || out == NULL || outcap < TG_EVENT_MAX_BYTES + 1)
        return TG_EINVAL;
    if (ev->kind != PROTO_KIND_REQUEST && ev->kind != PROTO_KIND_COOLDOWN)
        return TG_EINVAL;

    /* Every event the router builds: fields already ASCII and terminated, and the whole within
     * the cap. Written straight from ev in one pass, byte for byte what the cleaning way writes
     * (the proto_encode fuzz target compares the two). */
    if (uuid_canon(call_id, ev->call_id)) {
        struct jw w = {.buf = out, .cap = TG_EVENT_MAX_BYTES, .direct = 1};

        encode_write(&w, ev, call_id);
        if (!w.bail && w.len <= TG_EVENT_MAX_BYTES) {
            out[w.len] = '\0';
            if (outlen != NULL)
                *outlen = w.len;
            return 0;
        }
    }
    /* Anything else: a cleaned working copy (UTF-8 repaired, strings cut to their caps), written,
     * and shortened when escaping made it too large. */
    rc = proto_event_encode_cleaned(ev, out, &len);
    if (rc == 0 && outlen != NULL)
        *outlen = len;
    return rc;
}
