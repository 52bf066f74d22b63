/* admin_answer: the answers of router-svc's admin APIs (key and team routes), in OpenAI's error
 * shape: a JSON body handed to the route's done callback, a 500 of fixed text when it cannot be
 * built or exceeds the route's cap, and the texts their bodies share (ISO 8601 times, LiteLLM's
 * durations). Error messages and params never carry a virtual key: anything that looks like one
 * ("sk-" and what follows) is replaced. No state; any thread. */
#ifndef RT_ADMIN_ANSWER_H
#define RT_ADMIN_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The answer callback of an admin route: status, body (valid during the call), length. */
typedef void (*rt_answer_fn)(int status, const char *body, size_t len, void *ud);

/* rt_answer_json: dump o (taken; NULL answers 500) compactly and call done; a body of max bytes
 * or more, or one that cannot be built, answers the fixed 500. */
void rt_answer_json(rt_answer_fn done, void *ud, int status, json_t *o, size_t max);

/* rt_answer_500: the fixed 500 internal_error (when nothing else can be built). */
void rt_answer_500(rt_answer_fn done, void *ud);

/* rt_answer_error: {"error": {message, type, param (null when NULL), code}}, keys scrubbed. */
void rt_answer_error(rt_answer_fn done, void *ud, size_t max, int status, const char *type,
                     const char *code, const char *param, const char *message);

/* rt_answer_field_error: 400 invalid_field for err "field: problem", param the field (null when
 * err names none). */
void rt_answer_field_error(rt_answer_fn done, void *ud, size_t max, const char *err);

/* rt_answer_scrub: replace in s anything that looks like a virtual key by "sk-***". */
void rt_answer_scrub(char *s);

/* rt_answer_iso8601: epoch ms as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC). */
void rt_answer_iso8601(int64_t epoch_ms, char *out, size_t cap);

/* rt_answer_duration: seconds in LiteLLM's duration form, the largest whole unit ("30d", "12h",
 * "5m", "45s"). */
void rt_answer_duration(int64_t s, char *out, size_t cap);

#endif
