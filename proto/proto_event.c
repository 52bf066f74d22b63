#include "proto_event.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

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

/* Output bytes per input byte inside a JSON string (input is well-formed UTF-8 by then). */
static unsigned char esc_width[256];
static const char esc_short[256] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r',
                                    ['\t'] = 't', ['"'] = '"',  ['\\'] = '\\'};

static void esc_table_init(void)
{
    for (int c = 0; c < 256; c++) {
        if (esc_short[c] != 0)
            esc_width[c] = 2;
        else if (c < 0x20)
            esc_width[c] = 6;
        else
            esc_width[c] = 1;
    }
}

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
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
                     (c >= 'A' && c <= 'F'))) {
            return 0;
        }
    }
    return s[36] == '\0';
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
    static pthread_once_t esc_once = PTHREAD_ONCE_INIT;
    struct proto_event work;
    struct jw w;

    if (ev == NULL || out == NULL || outcap < TG_EVENT_MAX_BYTES + 1)
        return TG_EINVAL;
    if (ev->kind != PROTO_KIND_REQUEST && ev->kind != PROTO_KIND_COOLDOWN)
        return TG_EINVAL;
    pthread_once(&esc_once, esc_table_init);
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
 * Decoder
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

struct dctx {
    char *reason;
    size_t reasoncap;
};

/* String field: copies into dst (cap bytes) or fails with a reason. */
static int get_str(struct dctx *d, json_t *obj, const char *name, const char *label, char *dst,
                   size_t cap, int required)
{
    json_t *v = json_object_get(obj, name);
    size_t n;

    if (v == NULL) {
        if (required) {
            set_reason(d->reason, d->reasoncap, "field %s: missing", label);
            return -1;
        }
        dst[0] = '\0';
        return 0;
    }
    if (!json_is_string(v)) {
        set_reason(d->reason, d->reasoncap, "field %s: not a string", label);
        return -1;
    }
    n = json_string_length(v);
    if (n > cap - 1) {
        set_reason(d->reason, d->reasoncap, "field %s: longer than %zu bytes", label, cap - 1);
        return -1;
    }
    memcpy(dst, json_string_value(v), n);
    dst[n] = '\0';
    return 0;
}

/* Integer field in [0, max]. */
static int get_int(struct dctx *d, json_t *obj, const char *name, const char *label, int64_t max,
                   int required, int64_t *out)
{
    json_t *v = json_object_get(obj, name);
    json_int_t x;

    *out = 0;
    if (v == NULL) {
        if (required) {
            set_reason(d->reason, d->reasoncap, "field %s: missing", label);
            return -1;
        }
        return 0;
    }
    if (!json_is_integer(v)) {
        set_reason(d->reason, d->reasoncap, "field %s: not an integer", label);
        return -1;
    }
    x = json_integer_value(v);
    if (x < 0) {
        set_reason(d->reason, d->reasoncap, "field %s: negative", label);
        return -1;
    }
    if (x > max) {
        set_reason(d->reason, d->reasoncap, "field %s: out of range (max %lld)", label,
                   (long long)max);
        return -1;
    }
    *out = (int64_t)x;
    return 0;
}

static int get_i32(struct dctx *d, json_t *obj, const char *name, const char *label, int64_t max,
                   int required, int32_t *out)
{
    int64_t x;

    if (get_int(d, obj, name, label, max, required, &x) != 0)
        return -1;
    *out = (int32_t)x;
    return 0;
}

static int decode_trail(struct dctx *d, json_t *root, struct proto_event *ev)
{
    json_t *arr = json_object_get(root, "trail");
    char label[48];

    if (arr == NULL)
        return 0;
    if (!json_is_array(arr)) {
        set_reason(d->reason, d->reasoncap, "field trail: not an array");
        return -1;
    }
    if (json_array_size(arr) > PROTO_TRAIL_MAX) {
        set_reason(d->reason, d->reasoncap, "field trail: more than %d entries", PROTO_TRAIL_MAX);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i);
        struct proto_attempt *a = &ev->trail[i];
        int64_t lat;

        if (!json_is_object(o)) {
            set_reason(d->reason, d->reasoncap, "field trail[%zu]: not an object", i);
            return -1;
        }
        snprintf(label, sizeof(label), "trail[%zu].group", i);
        if (get_str(d, o, "group", label, a->group, sizeof(a->group), 0) != 0)
            return -1;
        snprintf(label, sizeof(label), "trail[%zu].deployment_id", i);
        if (get_str(d, o, "deployment_id", label, a->deployment_id, sizeof(a->deployment_id),
                    0) != 0)
            return -1;
        snprintf(label, sizeof(label), "trail[%zu].status", i);
        if (get_i32(d, o, "status", label, 999, 0, &a->http_status) != 0)
            return -1;
        snprintf(label, sizeof(label), "trail[%zu].error_class", i);
        if (get_str(d, o, "error_class", label, a->error_class, sizeof(a->error_class), 0) != 0)
            return -1;
        snprintf(label, sizeof(label), "trail[%zu].latency_ms", i);
        if (get_int(d, o, "latency_ms", label, UINT32_MAX, 0, &lat) != 0)
            return -1;
        a->latency_ms = (uint32_t)lat;
        snprintf(label, sizeof(label), "trail[%zu].message", i);
        if (get_str(d, o, "message", label, a->message, sizeof(a->message), 0) != 0)
            return -1;
        ev->trail_len = (uint32_t)(i + 1);
    }
    return 0;
}

static int decode_tags(struct dctx *d, json_t *root, struct proto_event *ev)
{
    json_t *arr = json_object_get(root, "tags");

    if (arr == NULL)
        return 0;
    if (!json_is_array(arr)) {
        set_reason(d->reason, d->reasoncap, "field tags: not an array");
        return -1;
    }
    if (json_array_size(arr) > PROTO_TAGS_MAX) {
        set_reason(d->reason, d->reasoncap, "field tags: more than %d entries", PROTO_TAGS_MAX);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *t = json_array_get(arr, i);
        size_t n;

        if (!json_is_string(t)) {
            set_reason(d->reason, d->reasoncap, "field tags[%zu]: not a string", i);
            return -1;
        }
        n = json_string_length(t);
        if (n > PROTO_TAG_CAP - 1) {
            set_reason(d->reason, d->reasoncap, "field tags[%zu]: longer than %d bytes", i,
                       PROTO_TAG_CAP - 1);
            return -1;
        }
        memcpy(ev->tags[i], json_string_value(t), n);
        ev->tags[i][n] = '\0';
        ev->tags_len = (uint32_t)(i + 1);
    }
    return 0;
}

static int decode_fields(struct dctx *d, json_t *root, struct proto_event *ev)
{
    json_t *v;
    int64_t x;

    /* v first: a newer version may change anything else. */
    v = json_object_get(root, "v");
    if (v == NULL) {
        set_reason(d->reason, d->reasoncap, "field v: missing");
        return -1;
    }
    if (!json_is_integer(v)) {
        set_reason(d->reason, d->reasoncap, "field v: not an integer");
        return -1;
    }
    if (json_integer_value(v) != PROTO_EVENT_VERSION) {
        set_reason(d->reason, d->reasoncap, "field v: unsupported version %lld",
                   (long long)json_integer_value(v));
        return -1;
    }
    ev->v = PROTO_EVENT_VERSION;

    v = json_object_get(root, "kind");
    if (v == NULL) {
        set_reason(d->reason, d->reasoncap, "field kind: missing");
        return -1;
    }
    if (!json_is_string(v)) {
        set_reason(d->reason, d->reasoncap, "field kind: not a string");
        return -1;
    }
    if (strcmp(json_string_value(v), "request") == 0 && json_string_length(v) == 7) {
        ev->kind = PROTO_KIND_REQUEST;
    } else if (strcmp(json_string_value(v), "cooldown") == 0 && json_string_length(v) == 8) {
        ev->kind = PROTO_KIND_COOLDOWN;
    } else {
        set_reason(d->reason, d->reasoncap, "field kind: not \"request\" or \"cooldown\"");
        return -1;
    }

    if (get_str(d, root, "call_id", "call_id", ev->call_id, sizeof(ev->call_id), 1) != 0) {
        /* An over-long value is not a UUID either; say so in the UUID terms. */
        if (json_is_string(json_object_get(root, "call_id")))
            set_reason(d->reason, d->reasoncap, "field call_id: not a UUID");
        return -1;
    }
    if (!is_uuid(ev->call_id)) {
        set_reason(d->reason, d->reasoncap, "field call_id: not a UUID");
        return -1;
    }
    if (get_int(d, root, "ts_start_ms", "ts_start_ms", INT64_MAX, 1, &ev->ts_start_ms) != 0)
        return -1;
    if (get_int(d, root, "ts_end_ms", "ts_end_ms", INT64_MAX, 1, &ev->ts_end_ms) != 0)
        return -1;
    if (get_str(d, root, "endpoint", "endpoint", ev->endpoint, sizeof(ev->endpoint), 1) != 0)
        return -1;

    v = json_object_get(root, "stream");
    if (v != NULL) {
        if (!json_is_boolean(v)) {
            set_reason(d->reason, d->reasoncap, "field stream: not a boolean");
            return -1;
        }
        ev->stream = json_is_true(v) ? 1 : 0;
    }

    if (get_str(d, root, "key_hash", "key_hash", ev->key_hash, sizeof(ev->key_hash), 0) != 0)
        return -1;
    if (ev->key_hash[0] != '\0' && !is_lower_hex(ev->key_hash, 64)) {
        set_reason(d->reason, d->reasoncap, "field key_hash: not a lowercase SHA-256 hex digest");
        return -1;
    }
    if (get_str(d, root, "key_alias", "key_alias", ev->key_alias, sizeof(ev->key_alias), 0) != 0)
        return -1;
    if (get_str(d, root, "team_id", "team_id", ev->team_id, sizeof(ev->team_id), 0) != 0)
        return -1;
    if (get_str(d, root, "user_id", "user_id", ev->user_id, sizeof(ev->user_id), 0) != 0)
        return -1;
    if (get_str(d, root, "end_user", "end_user", ev->end_user, sizeof(ev->end_user), 0) != 0)
        return -1;
    if (get_str(d, root, "model_requested", "model_requested", ev->model_requested,
                sizeof(ev->model_requested), 0) != 0)
        return -1;
    if (get_str(d, root, "model_group", "model_group", ev->model_group, sizeof(ev->model_group),
                0) != 0)
        return -1;
    if (get_str(d, root, "deployment_id", "deployment_id", ev->deployment_id,
                sizeof(ev->deployment_id), 0) != 0)
        return -1;
    if (get_str(d, root, "provider", "provider", ev->provider, sizeof(ev->provider), 0) != 0)
        return -1;
    if (get_str(d, root, "model", "model", ev->model, sizeof(ev->model), 0) != 0)
        return -1;
    if (get_i32(d, root, "status", "status", 999, 1, &ev->status) != 0)
        return -1;
    if (get_str(d, root, "error_class", "error_class", ev->error_class, sizeof(ev->error_class),
                0) != 0)
        return -1;
    if (get_int(d, root, "prompt_tokens", "prompt_tokens", INT64_MAX, 0, &ev->prompt_tokens) != 0)
        return -1;
    if (get_int(d, root, "completion_tokens", "completion_tokens", INT64_MAX, 0,
                &ev->completion_tokens) != 0)
        return -1;
    if (get_int(d, root, "cost_nusd", "cost_nusd", INT64_MAX, 0, &ev->cost_nusd) != 0)
        return -1;
    if (get_int(d, root, "latency_ms", "latency_ms", INT64_MAX, 0, &ev->latency_ms) != 0)
        return -1;
    if (get_int(d, root, "ttft_ms", "ttft_ms", INT64_MAX, 0, &ev->ttft_ms) != 0)
        return -1;
    if (get_int(d, root, "attempts", "attempts", INT32_MAX, 0, &x) != 0)
        return -1;
    ev->attempts = (int32_t)x;
    if (get_int(d, root, "fallbacks", "fallbacks", INT32_MAX, 0, &x) != 0)
        return -1;
    ev->fallbacks = (int32_t)x;
    if (decode_trail(d, root, ev) != 0)
        return -1;
    if (decode_tags(d, root, ev) != 0)
        return -1;
    if (get_str(d, root, "trace_id", "trace_id", ev->trace_id, sizeof(ev->trace_id), 0) != 0)
        return -1;
    if (ev->trace_id[0] != '\0' && !is_lower_hex(ev->trace_id, 32)) {
        set_reason(d->reason, d->reasoncap, "field trace_id: not 32 lowercase hex digits");
        return -1;
    }
    return 0;
}

int proto_event_decode(const char *data, size_t len, struct proto_event *ev, char *reason,
                       size_t reasoncap)
{
    struct dctx d = {reason, reasoncap};
    json_error_t jerr;
    json_t *root = NULL;
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
    root = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (root == NULL) {
        set_reason(reason, reasoncap, "invalid JSON at byte %d: %s", jerr.position, jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        set_reason(reason, reasoncap, "event: not a JSON object");
        goto out;
    }
    if (decode_fields(&d, root, ev) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0)
        proto_event_init(ev);
    json_decref(root);
    return rc;
}
