/* key_extra: the key fields stored without being acted on. See key_extra.h. */
#include "key_extra.h"

/* LiteLLM's key fields Tollgate does not act on, in name order, with their types: the request
 * schemas GenerateKeyRequest and UpdateKeyRequest of LiteLLM's proxy API reference (the OpenAPI
 * document a LiteLLM 1.x proxy serves at /openapi.json; fields described at
 * https://docs.litellm.ai/docs/proxy/virtual_keys). temp_budget_increase and temp_budget_expiry
 * are UpdateKeyRequest's only; both routes take every field here. The fields LiteLLM documents
 * that Tollgate acts on (key_alias, models, max_budget, tags, aliases, ...) are keys.c's. */
static const struct rt_extra_field fields[] = {
    {"access_group_ids", RT_EXTRA_STR_LIST},
    {"agent_id", RT_EXTRA_STRING},
    {"allowed_cache_controls", RT_EXTRA_LIST},
    {"allowed_passthrough_routes", RT_EXTRA_LIST},
    {"allowed_routes", RT_EXTRA_LIST},
    {"allowed_vector_store_indexes", RT_EXTRA_OBJ_LIST},
    {"auto_rotate", RT_EXTRA_BOOL},
    {"budget_fallbacks", RT_EXTRA_STR_LIST_MAP},
    {"budget_id", RT_EXTRA_STRING},
    {"budget_limits", RT_EXTRA_OBJ_LIST},
    {"config", RT_EXTRA_OBJECT},
    {"disable_global_guardrails", RT_EXTRA_BOOL},
    {"enforced_params", RT_EXTRA_STR_LIST},
    {"guardrails", RT_EXTRA_STR_LIST},
    {"key_type", RT_EXTRA_KEY_TYPE},
    {"mcp_rpm_limit", RT_EXTRA_INT_MAP},
    {"model_max_budget", RT_EXTRA_OBJECT},
    {"object_permission", RT_EXTRA_OBJECT},
    {"organization_id", RT_EXTRA_STRING},
    {"permissions", RT_EXTRA_OBJECT},
    {"policies", RT_EXTRA_STR_LIST},
    {"project_id", RT_EXTRA_STRING},
    {"prompts", RT_EXTRA_STR_LIST},
    {"rotation_interval", RT_EXTRA_STRING},
    {"rpm_limit_type", RT_EXTRA_LIMIT_TYPE},
    {"send_invite_email", RT_EXTRA_BOOL},
    {"soft_budget", RT_EXTRA_NUMBER},
    {"spend", RT_EXTRA_NUMBER},
    {"tag_rpm_limit", RT_EXTRA_INT_MAP},
    {"temp_budget_expiry", RT_EXTRA_STRING},
    {"temp_budget_increase", RT_EXTRA_NUMBER},
    {"throttle_on_budget_exceeded", RT_EXTRA_BOOL},
    {"tpm_limit_type", RT_EXTRA_LIMIT_TYPE},
};

const struct rt_extra_set rt_key_extra = {fields, sizeof(fields) / sizeof(fields[0]), "key"};
