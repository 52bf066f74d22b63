/* team_extra: LiteLLM's /team/new and /team/update fields that Tollgate accepts, keeps in the
 * team's record and returns (/team/new, /team/update, /team/info, /team/list), without acting
 * on them: members_with_roles, organization_id, model_aliases, team_member_budget, ... (the full
 * list: team_extra.c, and README "Teams").
 *
 * The checks, the merge and the stored text are extra_fields.h's. The fields live in struct
 * rt_team_spec.extra, at most RT_TEAM_EXTRA_MAX_BYTES bytes; in the stored form (teams.h,
 * RT_TEAM_JSON_STORED) they are the member "extra", written last and only when there is at least
 * one field. */
#ifndef RT_TEAM_EXTRA_H
#define RT_TEAM_EXTRA_H

#include "extra_fields.h"

/* The team fields stored without being acted on. */
extern const struct rt_extra_set rt_team_extra;

#endif
