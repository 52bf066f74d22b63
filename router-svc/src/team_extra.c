/* team_extra: the team fields stored without being acted on. See team_extra.h. */
#include "team_extra.h"

/* LiteLLM's team fields Tollgate does not act on, in name order, with their types: the request
 * schemas NewTeamRequest and UpdateTeamRequest of LiteLLM's proxy API reference (the OpenAPI
 * document a LiteLLM 1.x proxy serves at /openapi.json; fields described at
 * https://docs.litellm.ai/docs/proxy/team_budgets and in the /team/new route's documentation).
 * admins and members are the deprecated lists of user ids; both routes take every field here.
 * The fields LiteLLM documents that Tollgate acts on (team_id, team_alias, models, max_budget,
 * budget_duration, rpm_limit, tpm_limit, max_parallel_requests, metadata, blocked) are
 * teams.c's. */
static const struct rt_extra_field fields[] = {
    {"access_group_ids", RT_EXTRA_STR_LIST},
    {"admins", RT_EXTRA_LIST},
    {"allowed_passthrough_routes", RT_EXTRA_LIST},
    {"allowed_vector_store_indexes", RT_EXTRA_OBJ_LIST},
    {"disable_global_guardrails", RT_EXTRA_BOOL},
    {"guardrails", RT_EXTRA_STR_LIST},
    {"mcp_rpm_limit", RT_EXTRA_INT_MAP},
    {"members", RT_EXTRA_LIST},
    {"members_with_roles", RT_EXTRA_OBJ_LIST},
    {"model_aliases", RT_EXTRA_OBJECT},
    {"model_max_budget", RT_EXTRA_OBJECT},
    {"model_rpm_limit", RT_EXTRA_INT_MAP},
    {"model_tpm_limit", RT_EXTRA_INT_MAP},
    {"object_permission", RT_EXTRA_OBJECT},
    {"organization_id", RT_EXTRA_STRING},
    {"prompts", RT_EXTRA_STR_LIST},
    {"router_settings", RT_EXTRA_OBJECT},
    {"rpm_limit_type", RT_EXTRA_LIMIT_TYPE},
    {"secret_manager_settings", RT_EXTRA_OBJECT},
    {"soft_budget", RT_EXTRA_NUMBER},
    {"tags", RT_EXTRA_LIST},
    {"team_member_budget", RT_EXTRA_NUMBER},
    {"team_member_budget_duration", RT_EXTRA_STRING},
    {"team_member_key_duration", RT_EXTRA_STRING},
    {"team_member_permissions", RT_EXTRA_STR_LIST},
    {"team_member_rpm_limit", RT_EXTRA_INTEGER},
    {"team_member_tpm_limit", RT_EXTRA_INTEGER},
    {"tpm_limit_type", RT_EXTRA_LIMIT_TYPE},
};

const struct rt_extra_set rt_team_extra = {fields, sizeof(fields) / sizeof(fields[0]), "team"};
