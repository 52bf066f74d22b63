/* proto_event: the tollgate.events.v1 spend event, shared by router-svc and spend-svc.
 *
 * The struct holds value copies only, every string in a fixed array: an event has the same
 * size whatever the request looked like. The encoder writes JSON that never exceeds
 * TG_EVENT_MAX_BYTES (4 KiB); the decoder validates types, ranges and caps and rejects anything
 * else with a precise reason. Schema evolution: add optional fields only; bump v otherwise. */
#ifndef PROTO_EVENT_H
#define PROTO_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "tg_limits.h"

#define PROTO_EVENT_VERSION 1

/* String field capacities in bytes, NUL included (so the longest value is cap - 1). */
#define PROTO_CALL_ID_CAP 37     /* canonical UUID */
#define PROTO_ENDPOINT_CAP 32    /* "/v1/chat/completions" */
#define PROTO_KEY_HASH_CAP 65    /* SHA-256 hex, or "" when unauthenticated */
#define PROTO_NAME_CAP 65        /* key_alias, team_id, user_id, end_user, deployment_id */
#define PROTO_MODEL_CAP 129      /* model_requested, model_group, model */
#define PROTO_PROVIDER_CAP 33    /* "openai", "anthropic" */
#define PROTO_ERROR_CLASS_CAP 33 /* "rate_limit", "timeout", ... */
#define PROTO_TRACE_ID_CAP 33    /* W3C trace-id, 32 lowercase hex */
#define PROTO_TRAIL_MAX TG_TRAIL_MAX_ENTRIES
#define PROTO_TAGS_MAX TG_EVENT_TAGS_MAX
#define PROTO_TAG_CAP TG_EVENT_TAG_MAX
#define PROTO_MESSAGE_CAP TG_TRAIL_MESSAGE_MAX

enum proto_kind { PROTO_KIND_REQUEST = 0, PROTO_KIND_COOLDOWN = 1 };

/* One attempt of a request: the bounded retry record entry. */
struct proto_attempt {
    char group[PROTO_MODEL_CAP];             /* model group tried */
    char deployment_id[PROTO_NAME_CAP];      /* model_info.id of the deployment */
    int32_t http_status;                     /* upstream status, 0 when none (connect/timeout) */
    char error_class[PROTO_ERROR_CLASS_CAP]; /* "" on success */
    uint32_t latency_ms;                     /* attempt duration, ms */
    char message[PROTO_MESSAGE_CAP];         /* masked, short; never a secret */
};

struct proto_event {
    int32_t v;                         /* schema version, PROTO_EVENT_VERSION */
    enum proto_kind kind;              /* request | cooldown */
    char call_id[PROTO_CALL_ID_CAP];   /* UUID, unique per request */
    int64_t ts_start_ms;               /* epoch ms, request received */
    int64_t ts_end_ms;                 /* epoch ms, final response sent */
    char endpoint[PROTO_ENDPOINT_CAP]; /* API path served */
    int stream;                        /* 1 when streamed */
    char key_hash[PROTO_KEY_HASH_CAP]; /* SHA-256 of the virtual key */
    char key_alias[PROTO_NAME_CAP];
    char team_id[PROTO_NAME_CAP];
    char user_id[PROTO_NAME_CAP];
    char end_user[PROTO_NAME_CAP];         /* "user" field of the request */
    char model_requested[PROTO_MODEL_CAP]; /* as the client sent it (alias allowed) */
    char model_group[PROTO_MODEL_CAP];     /* group that produced the final response */
    char deployment_id[PROTO_NAME_CAP];
    char provider[PROTO_PROVIDER_CAP];
    char model[PROTO_MODEL_CAP];             /* provider model name */
    int32_t status;                          /* HTTP status returned to the client */
    char error_class[PROTO_ERROR_CLASS_CAP]; /* "" on success */
    int64_t prompt_tokens;                   /* >= 0 */
    int64_t completion_tokens;               /* >= 0 */
    int64_t cost_nusd;                       /* nano-USD, >= 0 */
    int64_t latency_ms;                      /* total, >= 0 */
    int64_t ttft_ms;                         /* time to first token (stream), else 0 */
    int32_t attempts;                        /* attempts made (may exceed trail entries) */
    int32_t fallbacks;                       /* fallback groups used */
    uint32_t trail_len;                      /* entries in trail, <= PROTO_TRAIL_MAX */
    struct proto_attempt trail[PROTO_TRAIL_MAX];
    uint32_t tags_len; /* entries in tags, <= PROTO_TAGS_MAX */
    char tags[PROTO_TAGS_MAX][PROTO_TAG_CAP];
    char trace_id[PROTO_TRACE_ID_CAP]; /* optional, "" when absent */
    /* Optional parts of the counts (written only when not 0; absent decodes as 0): */
    int64_t cache_read_tokens;     /* of prompt_tokens: read from the provider's prompt cache */
    int64_t cache_creation_tokens; /* of prompt_tokens: written to it */
    int64_t reasoning_tokens;      /* of completion_tokens: reasoning */
    int price_unknown; /* 1: tokens were used but no price was known (cost_nusd is 0) */
};

/* proto_event_init: zero the event and set v = PROTO_EVENT_VERSION. Caller storage. */
void proto_event_init(struct proto_event *ev);

/* proto_str_set: copy the C string src (borrowed; any length, read only as far as needed) into
 * a fixed field of cap bytes as well-formed UTF-8: a byte that does not start a well-formed
 * sequence becomes U+FFFD, and the copy is cut at a character boundary when too long. src may
 * be NULL (gives ""). Returns 1 when cut, else 0. No allocation; any thread. */
int proto_str_set(char *dst, size_t cap, const char *src);

/* proto_event_add_attempt: append a value copy of *a (borrowed) to the trail and count it in
 * ev->attempts. The trail keeps the newest PROTO_TRAIL_MAX entries in chronological order: when
 * it is full the oldest entry is dropped, while ev->attempts still counts every attempt (so the
 * caller does not count attempts itself). Strings are capped and cleaned like proto_str_set.
 * Returns 0, or 1 when an older entry was dropped. Any thread (caller owns ev). */
int proto_event_add_attempt(struct proto_event *ev, const struct proto_attempt *a);

/* proto_event_add_tag: append a copy of tag (borrowed; capped at PROTO_TAG_CAP - 1 bytes).
 * Returns 0, or TG_EFULL when PROTO_TAGS_MAX tags are already present (the tag is dropped). */
int proto_event_add_tag(struct proto_event *ev, const char *tag);

/* proto_event_encode: canonical JSON for ev into out (outcap >= TG_EVENT_MAX_BYTES + 1),
 * NUL-terminated, length in *outlen. No allocation, no jansson: a hand-written writer into out.
 * The required members (v, kind, call_id, ts_start_ms, ts_end_ms, endpoint, status) are always
 * written, in schema order; an optional one only when it is not at the value the decoder gives
 * an absent member ("", 0, false, an empty trail or tag list; in a trail entry likewise).
 * An event whose strings are all ASCII and end within their fields (every event router-svc
 * builds) is written straight from ev in one pass; any other goes through a cleaned copy first.
 * Both ways give the same bytes.
 *
 * Every string is read at most up to its field capacity (an unterminated array is safe), invalid
 * UTF-8 is replaced by U+FFFD and the result cut at a character boundary to the field cap; the
 * trail and tags are cut to their maxima. Values the decoder would reject are normalised so the
 * output always decodes: call_id is written in lowercase, negative numbers become 0, an HTTP status
 * outside 0..999 becomes 0, a key_hash that is not 64 lowercase hex is omitted, a trace_id that is
 * not 32 lowercase hex is omitted (it is omitted when empty too).
 *
 * If escaping (a control character takes 6 bytes) still makes the object longer than
 * TG_EVENT_MAX_BYTES, fields are shortened at character boundaries, each only as much as needed,
 * in this order until it fits: trail messages (oldest entry first), tags (last first), end_user,
 * user_id, key_alias, team_id, the trail entries' group, deployment_id and error_class (oldest
 * entry first), model_requested, model, model_group, deployment_id, provider, error_class.
 * call_id, endpoint, key_hash, trace_id, numbers and the JSON structure are never shortened:
 * at their worst they take 1,050 bytes (proto_event_test checks it), so once everything else
 * may shrink to nothing the result always fits in TG_EVENT_MAX_BYTES.
 *
 * Returns 0; TG_EINVAL when outcap < TG_EVENT_MAX_BYTES + 1, kind is not a proto_kind or call_id
 * is not a canonical UUID (the event could not be decoded). Any thread; a typical event of the
 * router (~570 bytes) takes about 0.2 us on one core. */
int proto_event_encode(const struct proto_event *ev, char *out, size_t outcap, size_t *outlen);

/* proto_event_decode: parse and validate one event (data borrowed, need not be NUL-terminated;
 * exactly len bytes are read). On success fills *ev and returns 0. On rejection resets *ev with
 * proto_event_init, returns TG_EPROTO (TG_ETOOBIG for len > TG_EVENT_MAX_BYTES, TG_EINVAL for
 * data == NULL) and writes a precise reason into reason (NULL or reasoncap 0: none written).
 *
 * A strict RFC 8259 parser, no allocation. Malformed JSON, invalid UTF-8, lone surrogates or a
 * known key given twice give "invalid JSON at byte N: ..." (N = 0-based offset). Otherwise the
 * schema is checked: required v (must be 1), kind, call_id (canonical UUID in either case,
 * stored lowercase), ts_start_ms, ts_end_ms, endpoint, status (0..999); everything else is
 * optional with defaults ("" / 0 / false / empty). Integers must be integers (no fraction or
 * exponent), >= 0 and within the field's type; strings over their cap are rejected, never
 * truncated, and may not contain U+0000; key_hash is "" or 64 lowercase hex; trace_id "" or 32
 * lowercase hex; the trail holds at most PROTO_TRAIL_MAX objects, tags at most PROTO_TAGS_MAX
 * strings. Unknown fields are skipped after a syntax check (forward compatible; nesting up to 64
 * levels). The reason names the first offending field in schema order, whatever the key order of
 * the input: "field v: unsupported version 2", "field call_id: not a UUID", "field prompt_tokens:
 * negative", "field trail: more than 4 entries", "field trail[1].message: longer than 160
 * bytes", "event too large: 5000 bytes > 4096". Never crashes on any input. Any thread. */
int proto_event_decode(const char *data, size_t len, struct proto_event *ev, char *reason,
                       size_t reasoncap);

/* Records of the events topic. A record's value holds one encoded event, or several joined by
 * '\n': an encoding never holds a raw newline (the encoder escapes every control character and
 * writes no whitespace), so a one-event record reads the same either way and every reader of
 * several-event records reads one-event records unchanged. A writer puts in one record only
 * events of one key hash (the record's key, so they land on the partition their key always
 * does), at most PROTO_RECORD_EVENTS_MAX of them, and no more than PROTO_RECORD_MAX_BYTES
 * (a single event may reach TG_EVENT_MAX_BYTES). */
#define PROTO_RECORD_EVENTS_MAX 64
#define PROTO_RECORD_MAX_BYTES (64u * 1024u)

/* One event's bytes in a record: data + off, len bytes (no newline in them). */
struct proto_span {
    size_t off;
    size_t len;
};

/* proto_record_split: the events of the record data[0..len) (borrowed; need not be
 * NUL-terminated), in order, into spans[0..*n). A newline at the very end ends the last event
 * (it makes no empty one); any other empty line is an event of length 0, which
 * proto_event_decode rejects. An empty record is one empty event. Returns 0; TG_ETOOBIG when
 * the record holds more than cap events (*n = 0: the record is refused whole); TG_EINVAL for
 * NULL spans or n, cap < 1, or data NULL with len > 0. Never reads outside data. Any thread. */
int proto_record_split(const char *data, size_t len, struct proto_span *spans, int cap, int *n);

#endif
