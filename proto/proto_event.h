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
#define PROTO_CALL_ID_CAP 37      /* canonical UUID */
#define PROTO_ENDPOINT_CAP 32     /* "/v1/chat/completions" */
#define PROTO_KEY_HASH_CAP 65     /* SHA-256 hex, or "" when unauthenticated */
#define PROTO_NAME_CAP 65         /* key_alias, team_id, user_id, end_user, deployment_id */
#define PROTO_MODEL_CAP 129       /* model_requested, model_group, model */
#define PROTO_PROVIDER_CAP 33     /* "openai", "anthropic" */
#define PROTO_ERROR_CLASS_CAP 33  /* "rate_limit", "timeout", ... */
#define PROTO_TRACE_ID_CAP 33     /* W3C trace-id, 32 lowercase hex */
#define PROTO_TRAIL_MAX TG_TRAIL_MAX_ENTRIES
#define PROTO_TAGS_MAX TG_EVENT_TAGS_MAX
#define PROTO_TAG_CAP TG_EVENT_TAG_MAX
#define PROTO_MESSAGE_CAP TG_TRAIL_MESSAGE_MAX

enum proto_kind { PROTO_KIND_REQUEST = 0, PROTO_KIND_COOLDOWN = 1 };

/* One attempt of a request: the bounded retry record entry. */
struct proto_attempt {
    char group[PROTO_MODEL_CAP];            /* model group tried */
    char deployment_id[PROTO_NAME_CAP];     /* model_info.id of the deployment */
    int32_t http_status;                    /* upstream status, 0 when none (connect/timeout) */
    char error_class[PROTO_ERROR_CLASS_CAP]; /* "" on success */
    uint32_t latency_ms;                    /* attempt duration, ms */
    char message[PROTO_MESSAGE_CAP];        /* masked, short; never a secret */
};

struct proto_event {
    int32_t v;                                  /* schema version, PROTO_EVENT_VERSION */
    enum proto_kind kind;                       /* request | cooldown */
    char call_id[PROTO_CALL_ID_CAP];            /* UUID, unique per request */
    int64_t ts_start_ms;                        /* epoch ms, request received */
    int64_t ts_end_ms;                          /* epoch ms, final response sent */
    char endpoint[PROTO_ENDPOINT_CAP];          /* API path served */
    int stream;                                 /* 1 when streamed */
    char key_hash[PROTO_KEY_HASH_CAP];          /* SHA-256 of the virtual key */
    char key_alias[PROTO_NAME_CAP];
    char team_id[PROTO_NAME_CAP];
    char user_id[PROTO_NAME_CAP];
    char end_user[PROTO_NAME_CAP];              /* "user" field of the request */
    char model_requested[PROTO_MODEL_CAP];      /* as the client sent it (alias allowed) */
    char model_group[PROTO_MODEL_CAP];          /* group that produced the final response */
    char deployment_id[PROTO_NAME_CAP];
    char provider[PROTO_PROVIDER_CAP];
    char model[PROTO_MODEL_CAP];                /* provider model name */
    int32_t status;                             /* HTTP status returned to the client */
    char error_class[PROTO_ERROR_CLASS_CAP];    /* "" on success */
    int64_t prompt_tokens;                      /* >= 0 */
    int64_t completion_tokens;                  /* >= 0 */
    int64_t cost_nusd;                          /* nano-USD, >= 0 */
    int64_t latency_ms;                         /* total, >= 0 */
    int64_t ttft_ms;                            /* time to first token (stream), else 0 */
    int32_t attempts;                           /* attempts made (may exceed trail entries) */
    int32_t fallbacks;                          /* fallback groups used */
    uint32_t trail_len;                         /* entries in trail, <= PROTO_TRAIL_MAX */
    struct proto_attempt trail[PROTO_TRAIL_MAX];
    uint32_t tags_len;                          /* entries in tags, <= PROTO_TAGS_MAX */
    char tags[PROTO_TAGS_MAX][PROTO_TAG_CAP];
    char trace_id[PROTO_TRACE_ID_CAP];          /* optional, "" when absent */
};

/* proto_event_init: zero the event and set v = PROTO_EVENT_VERSION. Caller storage. */
void proto_event_init(struct proto_event *ev);

/* proto_str_set: copy src into a fixed field of cap bytes, cut at a UTF-8 character boundary
 * when too long. src may be NULL (gives ""). Returns 1 when cut, else 0. */
int proto_str_set(char *dst, size_t cap, const char *src);

/* proto_event_encode: JSON for ev into out (outcap >= TG_EVENT_MAX_BYTES + 1), NUL-terminated,
 * length in *outlen. Strings are capped, the trail and tags are cut to their maxima, and if
 * escaping still makes the object too large, trail messages then tags then other free-text
 * fields are shortened until it fits: the result is always <= TG_EVENT_MAX_BYTES.
 * Returns 0, or TG_EINVAL (outcap too small). Any thread; no allocation beyond jansson's. */
int proto_event_encode(const struct proto_event *ev, char *out, size_t outcap, size_t *outlen);

/* proto_event_decode: parse and validate one event. On success fills *ev and returns 0. On
 * rejection returns TG_EPROTO (or TG_ETOOBIG for len > TG_EVENT_MAX_BYTES) and writes a precise
 * reason (e.g. "field call_id: not a UUID") into reason. Never crashes on any input. */
int proto_event_decode(const char *data, size_t len, struct proto_event *ev, char *reason,
                       size_t reasoncap);

#endif
