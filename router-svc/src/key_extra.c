#include "key_extra.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "tg_err.h"

/* The JSON type a field must have (null is always accepted: it removes the field). */
enum kind {
    K_NUMBER,       /* a number */
    K_STRING,       /* a string */
    K_BOOL,         /* true or false */
    K_OBJECT,       /* any object */
    K_LIST,         /* a list of anything */
    K_STR_LIST,     /* a list of strings */
    K_OBJ_LIST,     /* a list of objects */
    K_INT_MAP,      /* an object of integers */
    K_STR_LIST_MAP, /* an object of lists of strings */
    K_LIMIT_TYPE,   /* "guaranteed_throughput", "best_effort_throughput" or "dynamic" */
    K_KEY_TYPE,     /* "llm_api", "management", "read_only" or "default" */
};

/* LiteLLM's key fields Tollgate does not act on, in name order, with their types: the request
 * schemas GenerateKeyRequest and UpdateKeyRequest of LiteLLM's proxy API reference (the OpenAPI
 * document a LiteLLM 1.x proxy serves at /openapi.json; fields described at
 * https://docs.litellm.ai/docs/proxy/virtual_keys). temp_budget_increase and temp_budget_expiry
 * are UpdateKeyRequest's only; both routes take every field here. The fields LiteLLM documents
 * that Tollgate acts on (key_alias, models, max_budget, tags, aliases, ...) are keys.c's. */
static const struct field {
    const char *name;
    enum kind kind;
} fields[] = {
    {"access_group_ids", K_STR_LIST},
    {"agent_id", K_STRING},
    {"allowed_cache_controls", K_LIST},
    {"allowed_passthrough_routes", K_LIST},
    {"allowed_routes", K_LIST},
    {"allowed_vector_store_indexes", K_OBJ_LIST},
    {"auto_rotate", K_BOOL},
    {"budget_fallbacks", K_STR_LIST_MAP},
    {"budget_id", K_STRING},
    {"budget_limits", K_OBJ_LIST},
    {"config", K_OBJECT},
    {"disable_global_guardrails", K_BOOL},
    {"enforced_params", K_STR_LIST},
    {"guardrails", K_STR_LIST},
    {"key_type", K_KEY_TYPE},
    {"mcp_rpm_limit", K_INT_MAP},
    {"model_max_budget", K_OBJECT},
    {"object_permission", K_OBJECT},
    {"organization_id", K_STRING},
    {"permissions", K_OBJECT},
    {"policies", K_STR_LIST},
    {"project_id", K_STRING},
    {"prompts", K_STR_LIST},
    {"rotation_interval", K_STRING},
    {"rpm_limit_type", K_LIMIT_TYPE},
    {"send_invite_email", K_BOOL},
    {"soft_budget", K_NUMBER},
    {"spend", K_NUMBER},
    {"tag_rpm_limit", K_INT_MAP},
    {"temp_budget_expiry", K_STRING},
    {"temp_budget_increase", K_NUMBER},
    {"throttle_on_budget_exceeded", K_BOOL},
    {"tpm_limit_type", K_LIMIT_TYPE},
};
#define N_FIELDS (sizeof(fields) / sizeof(fields[0]))

static const struct field *field_find(const char *name)
{
    for (size_t i = 0; i < N_FIELDS; i++) {
        if (strcmp(fields[i].name, name) == 0)
            return &fields[i];
    }
    return NULL;
}

int rt_key_extra_is_field(const char *name)
{
    return name != NULL && field_find(name) != NULL;
}

static int one_of(const json_t *v, const char *const *names)
{
    if (!json_is_string(v))
        return 0;
    for (size_t i = 0; names[i] != NULL; i++) {
        if (strcmp(json_string_value(v), names[i]) == 0)
            return 1;
    }
    return 0;
}

/* 1 when every element of list v (or every member of object v) is of type t. */
static int all_of(const json_t *v, int (*ok)(const json_t *))
{
    size_t i;
    const char *k;
    json_t *e;

    if (json_is_array(v)) {
        json_array_foreach((json_t *)v, i, e)
        {
            if (!ok(e))
                return 0;
        }
        return 1;
    }
    json_object_foreach((json_t *)v, k, e)
    {
        if (!ok(e))
            return 0;
    }
    return 1;
}

static int is_string(const json_t *v)
{
    return json_is_string(v);
}

static int is_object(const json_t *v)
{
    return json_is_object(v);
}

static int is_integer(const json_t *v)
{
    return json_is_integer(v);
}

static int is_str_list(const json_t *v)
{
    return json_is_array(v) && all_of(v, is_string);
}

/* What a value of kind k must be, for messages. */
static const char *expected(enum kind k)
{
    switch (k) {
    case K_NUMBER:
        return "a number or null";
    case K_STRING:
        return "a string or null";
    case K_BOOL:
        return "true, false or null";
    case K_OBJECT:
        return "an object or null";
    case K_LIST:
        return "a list or null";
    case K_STR_LIST:
        return "a list of strings or null";
    case K_OBJ_LIST:
        return "a list of objects or null";
    case K_INT_MAP:
        return "an object of integers or null";
    case K_STR_LIST_MAP:
        return "an object of lists of strings or null";
    case K_LIMIT_TYPE:
        return "\"guaranteed_throughput\", \"best_effort_throughput\", \"dynamic\" or null";
    case K_KEY_TYPE:
        return "\"llm_api\", \"management\", \"read_only\", \"default\" or null";
    }
    return "null";
}

static int type_ok(enum kind k, const json_t *v)
{
    static const char *const limit_types[] = {"guaranteed_throughput", "best_effort_throughput",
                                              "dynamic", NULL};
    static const char *const key_types[] = {"llm_api", "management", "read_only", "default",
                                            NULL};

    if (json_is_null(v))
        return 1;
    switch (k) {
    case K_NUMBER:
        return json_is_number(v);
    case K_STRING:
        return json_is_string(v);
    case K_BOOL:
        return json_is_boolean(v);
    case K_OBJECT:
        return json_is_object(v);
    case K_LIST:
        return json_is_array(v);
    case K_STR_LIST:
        return is_str_list(v);
    case K_OBJ_LIST:
        return json_is_array(v) && all_of(v, is_object);
    case K_INT_MAP:
        return json_is_object(v) && all_of(v, is_integer);
    case K_STR_LIST_MAP:
        return json_is_object(v) && all_of(v, is_str_list);
    case K_LIMIT_TYPE:
        return one_of(v, limit_types);
    case K_KEY_TYPE:
        return one_of(v, key_types);
    }
    return 0;
}

/* Check and record one field; prefix ("" or "extra.") goes before the name in messages. */
static int note(json_t **pending, const char *prefix, const char *name, json_t *v, char *err,
                size_t errlen)
{
    const struct field *f = field_find(name);

    if (f == NULL) {
        snprintf(err, errlen, "%s%.100s: unknown field", prefix, name);
        return TG_EINVAL;
    }
    if (!type_ok(f->kind, v)) {
        snprintf(err, errlen, "%s%s: expected %s", prefix, name, expected(f->kind));
        return TG_EINVAL;
    }
    if (*pending == NULL)
        *pending = json_object();
    if (*pending == NULL || json_object_set(*pending, name, v) != 0) {
        snprintf(err, errlen, "%s%s: out of memory", prefix, name);
        return TG_ENOMEM;
    }
    return 0;
}

int rt_key_extra_note(json_t **pending, const char *name, json_t *v, char *err, size_t errlen)
{
    return note(pending, "", name, v, err, errlen);
}

int rt_key_extra_note_stored(json_t **pending, json_t *v, char *err, size_t errlen)
{
    const char *k;
    json_t *m;

    if (*pending == NULL)
        *pending = json_object();
    if (*pending == NULL) {
        snprintf(err, errlen, "extra: out of memory");
        return TG_ENOMEM;
    }
    if (json_is_null(v))
        return 0;
    if (!json_is_object(v)) {
        snprintf(err, errlen, "extra: expected an object or null");
        return TG_EINVAL;
    }
    json_object_foreach(v, k, m)
    {
        int rc = note(pending, "extra.", k, m, err, errlen);

        if (rc != 0)
            return rc;
    }
    return 0;
}

json_t *rt_key_extra_object(const char *extra)
{
    json_t *o;

    if (extra == NULL || extra[0] == '\0')
        return NULL;
    o = json_loads(extra, JSON_REJECT_DUPLICATES, NULL);
    if (o != NULL && !json_is_object(o)) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

/* The member of o whose compact encoding is the longest (for the cap's message). */
static const char *largest(json_t *o)
{
    const char *k, *best = "extra";
    json_t *v;
    size_t most = 0;

    json_object_foreach(o, k, v)
    {
        size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);

        if (n >= most) {
            most = n;
            best = k;
        }
    }
    return best;
}

int rt_key_extra_apply(char *extra, size_t cap, json_t *pending, int replace, char *err,
                       size_t errlen)
{
    json_t *cur = NULL, *v;
    const char *k;
    size_t need;
    int rc = TG_ENOMEM;

    if (pending == NULL && !replace)
        return 0;
    cur = replace ? NULL : rt_key_extra_object(extra);
    if (cur == NULL)
        cur = json_object();
    if (cur == NULL)
        goto nomem;
    if (pending != NULL) {
        json_object_foreach(pending, k, v)
        {
            if (json_is_null(v))
                json_object_del(cur, k);
            else if (json_object_set(cur, k, v) != 0)
                goto nomem;
        }
    }
    if (json_object_size(cur) == 0) {
        extra[0] = '\0';
        json_decref(cur);
        return 0;
    }
    /* Members sorted at every depth: the text depends on the fields, not on the order they came
     * in, and decoding it then encoding it again gives the same bytes. */
    need = json_dumpb(cur, NULL, 0, RT_KEY_EXTRA_DUMP_FLAGS);
    if (need == 0)
        goto nomem;
    if (need + 1 > cap) {
        snprintf(err, errlen,
                 "%.100s: the fields stored without being acted on take %zu bytes as JSON, more "
                 "than the %zu bytes a key may hold (%.100s is the largest)",
                 largest(cur), need, cap - 1, largest(cur));
        json_decref(cur);
        return TG_EINVAL;
    }
    if (json_dumpb(cur, extra, cap, RT_KEY_EXTRA_DUMP_FLAGS) != need)
        goto nomem;
    extra[need] = '\0';
    json_decref(cur);
    return 0;
nomem:
    snprintf(err, errlen, "extra: out of memory");
    json_decref(cur);
    return rc;
}
