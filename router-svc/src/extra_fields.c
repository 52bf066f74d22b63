/* extra_fields: the machinery of the LiteLLM fields stored without being acted on. See
 * extra_fields.h. */
#include "extra_fields.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "tg_err.h"

static const struct rt_extra_field *field_find(const struct rt_extra_set *set, const char *name)
{
    for (size_t i = 0; i < set->n_fields; i++) {
        if (strcmp(set->fields[i].name, name) == 0)
            return &set->fields[i];
    }
    return NULL;
}

int rt_extra_is_field(const struct rt_extra_set *set, const char *name)
{
    return name != NULL && field_find(set, name) != NULL;
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
static const char *expected(enum rt_extra_kind k)
{
    switch (k) {
    case RT_EXTRA_NUMBER:
        return "a number or null";
    case RT_EXTRA_INTEGER:
        return "an integer or null";
    case RT_EXTRA_STRING:
        return "a string or null";
    case RT_EXTRA_BOOL:
        return "true, false or null";
    case RT_EXTRA_OBJECT:
        return "an object or null";
    case RT_EXTRA_LIST:
        return "a list or null";
    case RT_EXTRA_STR_LIST:
        return "a list of strings or null";
    case RT_EXTRA_OBJ_LIST:
        return "a list of objects or null";
    case RT_EXTRA_INT_MAP:
        return "an object of integers or null";
    case RT_EXTRA_STR_LIST_MAP:
        return "an object of lists of strings or null";
    case RT_EXTRA_LIMIT_TYPE:
        return "\"guaranteed_throughput\", \"best_effort_throughput\", \"dynamic\" or null";
    case RT_EXTRA_KEY_TYPE:
        return "\"llm_api\", \"management\", \"read_only\", \"default\" or null";
    }
    return "null";
}

static int type_ok(enum rt_extra_kind k, const json_t *v)
{
    static const char *const limit_types[] = {"guaranteed_throughput", "best_effort_throughput",
                                              "dynamic", NULL};
    static const char *const key_types[] = {"llm_api", "management", "read_only", "default",
                                            NULL};

    if (json_is_null(v))
        return 1;
    switch (k) {
    case RT_EXTRA_NUMBER:
        return json_is_number(v);
    case RT_EXTRA_INTEGER:
        return json_is_integer(v);
    case RT_EXTRA_STRING:
        return json_is_string(v);
    case RT_EXTRA_BOOL:
        return json_is_boolean(v);
    case RT_EXTRA_OBJECT:
        return json_is_object(v);
    case RT_EXTRA_LIST:
        return json_is_array(v);
    case RT_EXTRA_STR_LIST:
        return is_str_list(v);
    case RT_EXTRA_OBJ_LIST:
        return json_is_array(v) && all_of(v, is_object);
    case RT_EXTRA_INT_MAP:
        return json_is_object(v) && all_of(v, is_integer);
    case RT_EXTRA_STR_LIST_MAP:
        return json_is_object(v) && all_of(v, is_str_list);
    case RT_EXTRA_LIMIT_TYPE:
        return one_of(v, limit_types);
    case RT_EXTRA_KEY_TYPE:
        return one_of(v, key_types);
    }
    return 0;
}

/* Check and record one field; prefix ("" or "extra.") goes before the name in messages. */
static int note(const struct rt_extra_set *set, json_t **pending, const char *prefix,
                const char *name, json_t *v, char *err, size_t errlen)
{
    const struct rt_extra_field *f = field_find(set, name);

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

int rt_extra_note(const struct rt_extra_set *set, json_t **pending, const char *name, json_t *v,
                  char *err, size_t errlen)
{
    return note(set, pending, "", name, v, err, errlen);
}

int rt_extra_note_stored(const struct rt_extra_set *set, json_t **pending, json_t *v, char *err,
                         size_t errlen)
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
        int rc = note(set, pending, "extra.", k, m, err, errlen);

        if (rc != 0)
            return rc;
    }
    return 0;
}

json_t *rt_extra_object(const char *extra)
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

int rt_extra_apply(const struct rt_extra_set *set, char *extra, size_t cap, json_t *pending,
                   int replace, char *err, size_t errlen)
{
    json_t *cur = NULL, *v;
    const char *k;
    size_t need;
    int rc = TG_ENOMEM;

    if (pending == NULL && !replace)
        return 0;
    cur = replace ? NULL : rt_extra_object(extra);
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
    need = json_dumpb(cur, NULL, 0, RT_EXTRA_DUMP_FLAGS);
    if (need == 0)
        goto nomem;
    if (need + 1 > cap) {
        snprintf(err, errlen,
                 "%.100s: the fields stored without being acted on take %zu bytes as JSON, more "
                 "than the %zu bytes a %s may hold (%.100s is the largest)",
                 largest(cur), need, cap - 1, set->holder, largest(cur));
        json_decref(cur);
        return TG_EINVAL;
    }
    if (json_dumpb(cur, extra, cap, RT_EXTRA_DUMP_FLAGS) != need)
        goto nomem;
    extra[need] = '\0';
    json_decref(cur);
    return 0;
nomem:
    snprintf(err, errlen, "extra: out of memory");
    json_decref(cur);
    return rc;
}
