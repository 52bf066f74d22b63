/* key_api: the virtual key admin API (LiteLLM's /key/... endpoints), independent of the HTTP
 * server. It also serves LiteLLM's /team/... routes (team_api.h) when given a teams table:
 * same authentication by the front, same in-flight bound, same error shape.
 *
 *   POST /key/generate   body: key fields (below), optional "duration" ("30d", null = never
 *                        expires) and optional "key" (a caller-chosen "sk-..." value).
 *                        200 {"key":"sk-...","key_hash":..,"key_alias":..,"expires":..,...}
 *                        The raw key is in this answer only: it is stored as SHA-256.
 *   POST /key/update     body: "key" (raw) or "key_hash", plus the fields to change (absent
 *                        fields keep their value, null resets one) and optional "duration"
 *                        (counted from now). 200 with the key's info (no raw key).
 *   POST /key/delete     body: {"keys":["sk-..."]} (LiteLLM's shape) and/or
 *                        {"key_hashes":["<64 hex>"]}; at most RT_KEY_API_DELETE_MAX entries.
 *                        200 {"deleted_keys":["<hash>",..]} (hashes, never the raw keys).
 *   GET  /key/info?key=  the key's 64-hex SHA-256 hash (a raw key in the URL is refused, 400
 *                        raw_key_in_url: URLs end up in access logs);
 *   POST /key/info       body {"key": raw key or hash}. 200 {"key":"<hash>","key_hash":..,
 *                        "info":{...}} (LiteLLM puts the hashed token in "key"; the raw key is
 *                        never returned).
 * Key fields: key_alias, models, team_id, user_id, max_budget (USD), budget_duration, rpm_limit,
 * tpm_limit, max_parallel_requests, model_rpm_limit, model_tpm_limit, metadata
 * (disable_fallbacks, tags; other metadata keys are ignored and never stored),
 * router_settings (model_group_alias, fallbacks, num_retries). Model groups named in models,
 * limits, fallbacks and aliases must exist in the config (group or alias).
 *
 * Answers (OpenAI error shape {"error":{"message","type","param","code"}}):
 *   400 invalid_request_error, code invalid_field, param = the field ("models[1]", "body");
 *   400 code static_key: config keys (tollgate.keys) cannot be changed through the API;
 *   404 code key_not_found; 405 code method_not_allowed; 404 code not_found (unknown path);
 *   409 code key_exists (a caller-chosen key that already exists);
 *   503 code key_store_unavailable: "key store unavailable: the control topic could not
 *       confirm the change; retry later" (Kafka unreachable, publish failed or timed out);
 *   503 code key_store_busy: too many changes waiting for confirmation (bounded queue);
 *   503 code keys_capacity: the keys table is full.
 * Nothing the client sent is echoed in an error except field names, so a raw key never appears
 * in an error body or a log line.
 *
 * Authentication: the HTTP front checks `Authorization: Bearer <general_settings.master_key>`
 * (constant-time) before calling rt_key_api_handle; this module does not authenticate. Without
 * a master key configured the front must not route the key API paths here.
 *
 * Durability: every change is published through rt_control (acks=all) and answered only when
 * the brokers confirmed it; rt_control applies it to this replica's keys table before the
 * answer. With control == NULL ("local" mode, for tests and single-process tools) changes are
 * applied to the keys table directly and answered at once.
 *
 * Bounds: at most RT_KEY_API_IN_FLIGHT_MAX requests in progress (503 key_store_busy beyond);
 * a request holds about 100 KB while in progress; the answer body is at most
 * RT_KEY_API_BODY_MAX bytes. */
#ifndef RT_KEY_API_H
#define RT_KEY_API_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "control.h"
#include "keys.h"
#include "teams.h"

#define RT_KEY_API_BODY_MAX (RT_KEY_JSON_MAX + 4096) /* answer body cap, bytes */
#define RT_KEY_API_IN_FLIGHT_MAX 64                  /* admin requests in progress */
#define RT_KEY_API_DELETE_MAX 100                    /* keys in one /key/delete */
#define RT_KEY_API_KEY_MAX 256                       /* raw key length accepted, bytes */
#define RT_KEY_API_RANDOM_BYTES 32                   /* generated key: sk- + 43 base64url */

struct rt_key_api;

struct rt_key_api_config {
    const struct rt_config *cfg; /* borrowed, outlives the api: model names, static keys */
    struct rt_keys *keys;        /* borrowed, outlives the api */
    struct rt_control *control;  /* borrowed, outlives the api; NULL = local mode */
    struct rt_teams *teams;      /* borrowed, outlives the api; NULL = no /team/... routes
                                  * (404). The team routes (team_api.h) are served here. */
};

/* Called exactly once per rt_key_api_handle call: status is the HTTP status, body (borrowed,
 * valid during the call only: copy it) is the JSON answer of len bytes, NUL-terminated.
 * Runs on the caller's thread (answers decided at once: validation, 404, local mode) or on the
 * control thread (after the brokers answered). Must not block and must not destroy the api. */
typedef void (*rt_key_api_done_fn)(int status, const char *body, size_t len, void *ud);

/* rt_key_api_create: returns a new api (rt_key_api_destroy) or NULL with err. Main thread. */
struct rt_key_api *rt_key_api_create(const struct rt_key_api_config *c, char *err, size_t errlen);

/* rt_key_api_destroy: free the api; accepts NULL, sets *api to NULL. Call after the HTTP front
 * stopped and after rt_control_destroy (so no answer is still due). Main thread. */
void rt_key_api_destroy(struct rt_key_api **api);

/* rt_key_api_is_admin_path: 1 when path (without the query string) is one of /key/generate,
 * /key/update, /key/delete, /key/info, /key/list, /key/block, /key/unblock, /key/regenerate
 * (the front routes these here after the master key check; GET /key/list's query arguments
 * come as a JSON body), else 0. */
int rt_key_api_is_admin_path(const char *path);

/* rt_key_api_handle: serve one admin request. method "GET"/"POST"; path without the query
 * string; key_param: the value of the "key" query parameter (GET /key/info), NULL when absent;
 * body/len: the request body (may be NULL/0: treated as {} where a body is optional). All are
 * borrowed for the call only. done(status, body, len, ud) is called exactly once, before this
 * returns or later from the control thread. Any HTTP thread; never blocks on Kafka. */
void rt_key_api_handle(struct rt_key_api *api, const char *method, const char *path,
                       const char *key_param, const char *body, size_t len, rt_key_api_done_fn done,
                       void *ud);

/* rt_key_api_in_flight: requests in progress now. Any thread. */
int rt_key_api_in_flight(const struct rt_key_api *api);

#endif
