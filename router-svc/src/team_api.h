/* team_api: LiteLLM's team admin routes, served through the key API (key_api.h: same master key
 * authentication, same in-flight bound, same answer cap, same error shape).
 *
 *   POST /team/new       body: team fields (below); team_id optional (a new UUID when absent).
 *                        200 the team (the fields below plus budget_reset_at, spend).
 *                        409 team_exists when team_id is taken.
 *   POST /team/update    body: team_id plus the fields to change (absent fields keep their
 *                        value, null resets one). 200 {"team_id":..,"data":{the team}}.
 *   GET  /team/info?team_id=<id>, POST /team/info {"team_id":..}:
 *                        200 {"team_id":..,"team_info":{the team},"keys":[key hashes of the
 *                        team, at most RT_TEAM_API_INFO_KEYS_MAX]}.
 *   GET|POST /team/list  200 [{the team}, ...] in team_id order (at most
 *                        RT_TEAM_API_LIST_MAX; "truncated" is never silent: beyond it the
 *                        answer is 400 asking for ?team_alias= or a smaller set).
 *                        Optional filter team_alias (query or body).
 *   POST /team/delete    body {"team_ids":[...]} (LiteLLM's shape), at most
 *                        RT_TEAM_API_DELETE_MAX. The teams' keys are deleted first (as LiteLLM
 *                        does; keys of the config file stay: they are changed there), then the
 *                        teams. 200 {"deleted_teams":[ids],"deleted_keys":[hashes]}; 404
 *                        team_not_found names the first unknown id (nothing is deleted then);
 *                        a 503 after some keys were deleted leaves the teams: a retry deletes
 *                        the rest.
 *   POST /team/block, /team/unblock   body {"team_id":..}: 200 the team. A blocked team's keys
 *                        are refused (401 team_blocked) on every replica.
 * Team fields: team_id (1 to 64 letters, digits, "-_.:@"), team_alias, models, max_budget
 * (USD), budget_duration ("30d"; by the calendar for 1d/7d/30d), rpm_limit, tpm_limit,
 * max_parallel_requests, metadata (an object, at most RT_TEAM_METADATA_MAX bytes), blocked, and
 * LiteLLM's other team fields, stored and returned at the top level of every team answer
 * without being acted on (team_extra.h; at most RT_TEAM_EXTRA_MAX_BYTES together, a 400 naming
 * the cap beyond). Any other field: 400 invalid_field naming it; a wrong type: 400 naming the
 * field.
 * A key's team_id (key_api) links the key to the team (teams.h says what that limits).
 *
 * Durability: as keys: every change is a team:<id> record on the control topic, answered when
 * the brokers confirmed it (503 team_store_unavailable otherwise); control == NULL (local mode)
 * applies changes directly. Bounds: the teams table's capacity (tollgate.limits.max_teams):
 * a new team beyond it is refused with 503 teams_capacity before anything is published. */
#ifndef RT_TEAM_API_H
#define RT_TEAM_API_H

#include <stddef.h>

#include "config.h"
#include "control.h"
#include "keys.h"
#include "teams.h"

#define RT_TEAM_API_DELETE_MAX 100     /* teams in one /team/delete */
#define RT_TEAM_API_LIST_MAX 1000      /* teams in one /team/list answer */
#define RT_TEAM_API_INFO_KEYS_MAX 1000 /* key hashes in one /team/info answer */

struct rt_team_api;

/* Called exactly once per rt_team_api_handle: HTTP status and body (borrowed for the call). */
typedef void (*rt_team_api_done_fn)(int status, const char *body, size_t len, void *ud);

/* rt_team_api_create: cfg (model names), teams, keys (for /team/info's key list) and control
 * (NULL = local mode) are borrowed and outlive the api. Returns new (rt_team_api_destroy) or
 * NULL with err. Main thread. */
struct rt_team_api *rt_team_api_create(const struct rt_config *cfg, struct rt_teams *teams,
                                       struct rt_keys *keys, struct rt_control *control,
                                       char *err, size_t errlen);

/* rt_team_api_destroy: free; accepts NULL; sets *api to NULL. After no answer is due. */
void rt_team_api_destroy(struct rt_team_api **api);

/* rt_team_api_is_path: 1 for the /team/... paths above. */
int rt_team_api_is_path(const char *path);

/* rt_team_api_handle: serve one request (method "GET"/"POST"; path without the query;
 * param: the team_id query parameter for GET /team/info, or team_alias for GET /team/list,
 * NULL when absent). done is called exactly once, before this returns or later on the control
 * thread. The caller counts the request in flight until done. Any HTTP thread; never blocks on
 * Kafka. */
void rt_team_api_handle(struct rt_team_api *api, const char *method, const char *path,
                        const char *param, const char *body, size_t len, rt_team_api_done_fn done,
                        void *ud);

#endif
