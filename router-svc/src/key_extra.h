/* key_extra: LiteLLM's /key/generate and /key/update fields that Tollgate accepts, keeps in the
 * key's record and returns (/key/generate, /key/update, /key/info, /key/list with
 * return_full_object), without acting on them: soft_budget, guardrails, allowed_routes,
 * key_type, ... (the full list: key_extra.c, and README "Virtual keys").
 *
 * The checks, the merge and the stored text are extra_fields.h's. The fields live in struct
 * rt_key_spec.extra, at most RT_KEY_EXTRA_MAX_BYTES bytes; in the stored form (keys.h,
 * RT_KEY_JSON_STORED) they are the member "extra", written last and only when there is at least
 * one field. */
#ifndef RT_KEY_EXTRA_H
#define RT_KEY_EXTRA_H

#include "extra_fields.h"

/* The key fields stored without being acted on. */
extern const struct rt_extra_set rt_key_extra;

#endif
