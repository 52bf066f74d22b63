/* litellm_map: rows of a LiteLLM proxy's PostgreSQL database, as JSON objects (to_jsonb of the
 * row, see litellm_import.c for the queries), to the bodies of Tollgate's team and key API.
 * Pure: no I/O, no clock (the query computes the seconds left before a key expires).
 *
 * Key rows come from "LiteLLM_VerificationToken" with two members the query adds:
 * - "_expires_in_s": whole seconds until "expires" (null when the key never expires);
 * - "_budget": the "LiteLLM_BudgetTable" row of the key's budget_id, or null. Its max_budget,
 *   soft_budget, rpm_limit, tpm_limit, max_parallel_requests, budget_duration and
 *   model_max_budget apply where the key's own are null, as LiteLLM applies them.
 * Team rows come from "LiteLLM_TeamTable".
 *
 * The column names are LiteLLM's (its Prisma schema, schema.prisma / the migration SQL of
 * litellm-proxy-extras); the body field names are those of LiteLLM's /key/generate and /team/new,
 * which Tollgate's API takes. Members that are null, empty lists or empty objects are left out.
 * LiteLLM's "all-proxy-models" and "all-team-models" in models mean "every model" (Tollgate's
 * empty list; a team's list still restricts its keys) and are dropped. LiteLLM keeps a key's
 * model_rpm_limit and model_tpm_limit inside its metadata: they move to the top-level fields. */
#ifndef TG_LITELLM_MAP_H
#define TG_LITELLM_MAP_H

#include <stddef.h>

#include <jansson.h>

#define LM_ID_CAP 128/* a printable name of a row, for reports: never a secret */

/* lm_key_body: the /key/generate body of one key row (new reference), or NULL with why set
 * (the key is expired, its token is not a key hash nor a key, or the row is not an object).
 * id receives a name for reports: the first 12 hex digits of the key's hash and its alias.
 * *raw_token is set to 1 when the token column holds a raw "sk-" key (LiteLLM before hashed
 * storage): the body then names it by "key", else by "key_hash". */
json_t *lm_key_body(const json_t *row, char id[LM_ID_CAP], int *raw_token, char *why,
                    size_t whylen);

/* lm_team_body: the /team/new body of one team row (new reference), or NULL with why set (no
 * team_id, or the row is not an object). id receives the team_id and its alias. */
json_t *lm_team_body(const json_t *row, char id[LM_ID_CAP], char *why, size_t whylen);

/* lm_update_body: the /key/update (or /team/update) body for an entity that exists already: a
 * copy of a generate/new body (new reference) where max_budget, budget_duration, rpm_limit,
 * tpm_limit and max_parallel_requests the source no longer has are null (cleared), models absent
 * is [] (every model) and blocked absent is false, so that importing twice mirrors the source.
 * Returns NULL on allocation failure. */
json_t *lm_update_body(const json_t *body);

#endif
