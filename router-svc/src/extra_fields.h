/* extra_fields: LiteLLM API fields that Tollgate accepts, keeps in a record and returns without
 * acting on them, for one kind of record (a key: key_extra.h; a team: team_extra.h). Each kind
 * has its own table of fields with their JSON types (struct rt_extra_set); the checks, the merge
 * and the stored text are shared.
 *
 * Each field's JSON type is checked (a value of another type is a 400 naming the field; null
 * removes the field), so garbage is refused while a LiteLLM client's body is taken whole. The
 * fields live in the record's spec as one compact JSON object, members in name order (so that
 * equal fields give equal bytes in the stored form), at most a fixed number of bytes (the
 * caller's cap): a body that would take more is refused (400 naming the cap), nothing is cut.
 *
 * In the stored form of the record they are the member "extra", written last and only when
 * there is at least one field; spend-svc skips it (proto_control.h). Nothing on the request path
 * reads them.
 *
 * Threads: pure functions; any thread. */
#ifndef RT_EXTRA_FIELDS_H
#define RT_EXTRA_FIELDS_H

#include <stddef.h>

struct json_t; /* jansson */

/* How the fields are written (jansson json_dump flags): compact, members in name order at every
 * depth, numbers with 15 significant digits (0.1 stays 0.1; 15 digits survive a text -> double
 * -> text round trip, so the text is a fixpoint). The stored forms are written with the same
 * precision. */
#define RT_EXTRA_DUMP_FLAGS (JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15))

/* The JSON type a field must have (null is always accepted: it removes the field). */
enum rt_extra_kind {
    RT_EXTRA_NUMBER,       /* a number */
    RT_EXTRA_INTEGER,      /* an integer */
    RT_EXTRA_STRING,       /* a string */
    RT_EXTRA_BOOL,         /* true or false */
    RT_EXTRA_OBJECT,       /* any object */
    RT_EXTRA_LIST,         /* a list of anything */
    RT_EXTRA_STR_LIST,     /* a list of strings */
    RT_EXTRA_OBJ_LIST,     /* a list of objects */
    RT_EXTRA_INT_MAP,      /* an object of integers */
    RT_EXTRA_STR_LIST_MAP, /* an object of lists of strings */
    RT_EXTRA_LIMIT_TYPE,   /* "guaranteed_throughput", "best_effort_throughput" or "dynamic" */
    RT_EXTRA_KEY_TYPE,     /* "llm_api", "management", "read_only" or "default" */
};

struct rt_extra_field {
    const char *name;
    enum rt_extra_kind kind;
};

/* The fields of one kind of record (static tables: key_extra.c, team_extra.c). */
struct rt_extra_set {
    const struct rt_extra_field *fields; /* n_fields entries, names unique */
    size_t n_fields;
    const char *holder; /* what holds them, for messages: "key", "team" */
};

/* rt_extra_is_field: 1 when name is a field of set, else 0. */
int rt_extra_is_field(const struct rt_extra_set *set, const char *name);

/* rt_extra_note: one field of an API body: checks v (borrowed) against the field's type in set
 * and records it in *pending (a JSON object created on first use; the caller json_decrefs it),
 * null as a removal. Returns 0, or TG_EINVAL with err "name: expected ..." / "name: unknown
 * field" (or TG_ENOMEM). */
int rt_extra_note(const struct rt_extra_set *set, struct json_t **pending, const char *name,
                  struct json_t *v, char *err, size_t errlen);

/* rt_extra_note_stored: the stored form's "extra" member v (borrowed): an object whose members
 * are all fields of set, each of its type ("extra.name: ..." otherwise), or null (no fields).
 * Every member goes to *pending as with rt_extra_note. */
int rt_extra_note_stored(const struct rt_extra_set *set, struct json_t **pending,
                         struct json_t *v, char *err, size_t errlen);

/* rt_extra_apply: merge pending (borrowed; may be NULL: nothing to change) into extra (the
 * compact JSON text of a spec, cap bytes with the NUL; "" = no field), starting from no field
 * when replace. A member sets its field, null removes it. Writes the canonical text (compact,
 * members in name order at every depth; "" when no field is left). Returns 0; TG_EINVAL with err
 * naming the largest field and the cap when the result would take more than cap - 1 bytes
 * (extra is then unchanged); TG_ENOMEM. */
int rt_extra_apply(const struct rt_extra_set *set, char *extra, size_t cap,
                   struct json_t *pending, int replace, char *err, size_t errlen);

/* rt_extra_object: the fields of extra (compact JSON text) as a new JSON object (caller
 * json_decrefs), or NULL when extra is "" (no field), not a JSON object, or out of memory. */
struct json_t *rt_extra_object(const char *extra);

#endif
