#include "litellm_map.h"

#include <stdio.h>
#include <string.h>

/* A value worth sending: not null, not an empty list, not an empty object. */
static int present(const json_t *v)
{
    if (v == NULL || json_is_null(v))
        return 0;
    if (json_is_array(v))
        return json_array_size(v) > 0;
    if (json_is_object(v))
        return json_object_size(v) > 0;
    return 1;
}

/* body[name] = row[name] when present (a deep copy: the row is not shared). */
static void copy(json_t *body, const json_t *row, const char *name)
{
    const json_t *v = json_object_get(row, name);

    if (present(v))
        json_object_set_new(body, name, json_deep_copy(v));
}

/* body[name] = row[name], else budget[name] (the row's LiteLLM_BudgetTable row). */
static void copy_or_budget(json_t *body, const json_t *row, const json_t *budget,
                           const char *name)
{
    const json_t *v = json_object_get(row, name);

    if (!present(v) && json_is_object(budget))
        v = json_object_get(budget, name);
    if (present(v))
        json_object_set_new(body, name, json_deep_copy(v));
}

/* models without LiteLLM's "every model" markers; not set when nothing else is left. Entries that
 * are not strings are kept: the API names them in its 400. */
static void copy_models(json_t *body, const json_t *row)
{
    const json_t *m = json_object_get(row, "models"), *v;
    json_t *out;
    size_t i;

    if (!json_is_array(m)) {
        if (present(m))
            json_object_set_new(body, "models", json_deep_copy(m)); /* the API's 400 names it */
        return;
    }
    out = json_array();
    if (out == NULL)
        return;
    json_array_foreach (m, i, v) {
        const char *s = json_string_value(v);

        if (s != NULL && (strcmp(s, "all-proxy-models") == 0 || strcmp(s, "all-team-models") == 0))
            continue;
        json_array_append_new(out, json_deep_copy(v));
    }
    if (json_array_size(out) > 0)
        json_object_set_new(body, "models", out);
    else
        json_decref(out);
}

static int is_hash(const char *s)
{
    size_t n = strlen(s);

    if (n != 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    }
    return 1;
}

/* A printable, bounded copy of s (control bytes, quotes and backslashes as '?'). */
static void printable(char *out, size_t cap, const char *s)
{
    size_t o = 0;

    for (size_t i = 0; s[i] != '\0' && o + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];

        out[o++] = c < 0x20 || c == 0x7f || c == '"' || c == '\\' ? '?' : (char)c;
    }
    out[o] = '\0';
}

static void name_with_alias(char id[LM_ID_CAP], const char *what, const char *name,
                            const json_t *alias)
{
    char n[40], a[48];

    printable(n, sizeof(n), name);
    if (json_is_string(alias) && json_string_length(alias) > 0) {
        printable(a, sizeof(a), json_string_value(alias));
        snprintf(id, LM_ID_CAP, "%s %s (alias \"%s\")", what, n, a);
    } else {
        snprintf(id, LM_ID_CAP, "%s %s", what, n);
    }
}

json_t *lm_key_body(const json_t *row, char id[LM_ID_CAP], int *raw_token, char *why,
                    size_t whylen)
{
    const json_t *tok = json_object_get(row, "token"), *budget, *exp, *meta;
    const char *t;
    json_t *body;
    char head[16];

    snprintf(id, LM_ID_CAP, "key (unnamed row)");
    *raw_token = 0;
    if (!json_is_object(row)) {
        snprintf(why, whylen, "row: expected a JSON object");
        return NULL;
    }
    t = json_string_value(tok);
    if (t == NULL || strlen(t) != json_string_length(tok)) {
        snprintf(why, whylen, "token: expected the key's hash as a string");
        return NULL;
    }
    if (is_hash(t)) {
        snprintf(head, sizeof(head), "%.12s", t);
    } else if (strncmp(t, "sk-", 3) == 0) {
        *raw_token = 1;
        snprintf(head, sizeof(head), "sk-...");
    } else {
        snprintf(why, whylen, "token: neither a SHA-256 hex digest nor an \"sk-\" key");
        return NULL;
    }
    name_with_alias(id, "key", head, json_object_get(row, "key_alias"));
    /* An alias that holds the raw key itself (some set the alias to the key) would print it:
     * the report names such a key without its alias. */
    if (*raw_token && strstr(id, t) != NULL)
        snprintf(id, LM_ID_CAP, "key %s (alias withheld: it holds the key)", head);
    exp = json_object_get(row, "_expires_in_s");
    if (exp != NULL && !json_is_null(exp) && !json_is_integer(exp)) {
        snprintf(why, whylen, "expires: not a time");
        return NULL;
    }
    if (json_is_integer(exp) && json_integer_value(exp) <= 0) {
        snprintf(why, whylen, "expired");
        return NULL;
    }
    budget = json_object_get(row, "_budget");
    body = json_object();
    if (body == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    json_object_set_new(body, *raw_token ? "key" : "key_hash", json_string(t));
    if (json_is_integer(exp)) {
        char d[32];

        snprintf(d, sizeof(d), "%llds", (long long)json_integer_value(exp));
        json_object_set_new(body, "duration", json_string(d));
    }
    copy(body, row, "key_alias");
    copy_models(body, row);
    copy_or_budget(body, row, budget, "max_budget");
    copy_or_budget(body, row, budget, "budget_duration");
    copy_or_budget(body, row, budget, "rpm_limit");
    copy_or_budget(body, row, budget, "tpm_limit");
    copy_or_budget(body, row, budget, "max_parallel_requests");
    copy_or_budget(body, row, budget, "model_max_budget");
    if (json_is_object(budget))
        copy(body, budget, "soft_budget");
    copy(body, row, "user_id");
    copy(body, row, "team_id");
    copy(body, row, "organization_id");
    copy(body, row, "budget_id");
    copy(body, row, "aliases");
    copy(body, row, "config");
    copy(body, row, "permissions");
    copy(body, row, "allowed_routes");
    copy(body, row, "allowed_cache_controls");
    copy(body, row, "spend");
    if (json_is_true(json_object_get(row, "blocked")))
        json_object_set_new(body, "blocked", json_true());
    meta = json_object_get(row, "metadata");
    if (json_is_object(meta) && json_object_size(meta) > 0) {
        json_t *m = json_deep_copy(meta);
        static const char *const moved[] = {"model_rpm_limit", "model_tpm_limit"};

        for (size_t i = 0; m != NULL && i < sizeof(moved) / sizeof(moved[0]); i++) {
            json_t *v = json_object_get(m, moved[i]);

            if (present(v))
                json_object_set(body, moved[i], v);
            json_object_del(m, moved[i]);
        }
        if (m != NULL && json_object_size(m) > 0)
            json_object_set_new(body, "metadata", m);
        else
            json_decref(m);
    } else if (present(meta)) {
        json_object_set_new(body, "metadata", json_deep_copy(meta)); /* the API's 400 names it */
    }
    return body;
}

json_t *lm_team_body(const json_t *row, char id[LM_ID_CAP], char *why, size_t whylen)
{
    const json_t *tid = json_object_get(row, "team_id");
    json_t *body;

    snprintf(id, LM_ID_CAP, "team (unnamed row)");
    if (!json_is_object(row)) {
        snprintf(why, whylen, "row: expected a JSON object");
        return NULL;
    }
    if (!json_is_string(tid) || json_string_length(tid) == 0 ||
        strlen(json_string_value(tid)) != json_string_length(tid)) {
        snprintf(why, whylen, "team_id: expected a non-empty string");
        return NULL;
    }
    name_with_alias(id, "team", json_string_value(tid), json_object_get(row, "team_alias"));
    body = json_object();
    if (body == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    copy(body, row, "team_id");
    copy(body, row, "team_alias");
    copy_models(body, row);
    copy(body, row, "max_budget");
    copy(body, row, "budget_duration");
    copy(body, row, "rpm_limit");
    copy(body, row, "tpm_limit");
    copy(body, row, "max_parallel_requests");
    copy(body, row, "metadata");
    /* stored by Tollgate without being acted on (its API's team fields of LiteLLM's); the member
     * lists are not: a large team's would pass the 16 KiB those fields may take */
    copy(body, row, "organization_id");
    copy(body, row, "model_max_budget");
    copy(body, row, "team_member_permissions");
    if (json_is_true(json_object_get(row, "blocked")))
        json_object_set_new(body, "blocked", json_true());
    return body;
}

json_t *lm_update_body(const json_t *body)
{
    /* Limits LiteLLM no longer has are cleared, a model list it dropped becomes every model and a
     * block it lifted is lifted, so that a second import mirrors the source. */
    static const char *const cleared[] = {"max_budget", "budget_duration", "rpm_limit",
                                          "tpm_limit", "max_parallel_requests"};
    json_t *u = json_deep_copy(body);

    if (u == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(cleared) / sizeof(cleared[0]); i++) {
        if (json_object_get(u, cleared[i]) == NULL)
            json_object_set_new(u, cleared[i], json_null());
    }
    if (json_object_get(u, "models") == NULL)
        json_object_set_new(u, "models", json_array()); /* every model */
    if (json_object_get(u, "blocked") == NULL)
        json_object_set_new(u, "blocked", json_false());
    return u;
}
