/* key_extra: LiteLLM's /key/generate and /key/update fields that Tollgate accepts, keeps in the
 * key's record and returns (/key/generate, /key/update, /key/info, /key/list with
 * return_full_object), without acting on them: soft_budget, guardrails, allowed_routes,
 * key_type, ... (the full list: key_extra.c, and README "Virtual keys").
 *
 * Each field's JSON type is checked (a value of another type is a 400 naming the field; null
 * removes the field), so garbage is refused while a LiteLLM client's body is taken whole. The
 * fields live in struct rt_key_spec.extra as one compact JSON object, members in name order (so
 * that equal fields give equal bytes in the stored form), at most RT_KEY_EXTRA_MAX_BYTES bytes:
 * a body that would take more is refused (400 naming the cap), nothing is cut.
 *
 * In the stored form (keys.h, RT_KEY_JSON_STORED) they are the member "extra", written last and
 * only when there is at least one field; spend-svc skips it (proto_control.h). Nothing on the
 * request path reads them.
 *
 * Threads: pure functions; any thread. */
#ifndef RT_KEY_EXTRA_H
#define RT_KEY_EXTRA_H

#include <stddef.h>

struct json_t; /* jansson */

/* How the fields are written (jansson json_dump flags): compact, members in name order at every
 * depth, numbers with 15 significant digits (0.1 stays 0.1; 15 digits survive a text -> double
 * -> text round trip, so the text is a fixpoint). The stored form is written with the same
 * precision. */
#define RT_KEY_EXTRA_DUMP_FLAGS (JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15))

/* rt_key_extra_is_field: 1 when name is a field stored without being acted on, else 0. */
int rt_key_extra_is_field(const char *name);

/* rt_key_extra_note: one field of a key API body: checks v (borrowed) against the field's type
 * and records it in *pending (a JSON object created on first use; the caller json_decrefs it),
 * null as a removal. Returns 0, or TG_EINVAL with err "name: expected ..." (or TG_ENOMEM). */
int rt_key_extra_note(struct json_t **pending, const char *name, struct json_t *v, char *err,
                      size_t errlen);

/* rt_key_extra_note_stored: the stored form's "extra" member v (borrowed): an object whose
 * members are all fields of this module, each of its type ("extra.name: ..." otherwise), or null
 * (no fields). Every member goes to *pending as with rt_key_extra_note. */
int rt_key_extra_note_stored(struct json_t **pending, struct json_t *v, char *err,
                             size_t errlen);

/* rt_key_extra_apply: merge pending (borrowed; may be NULL: nothing to change) into extra (the
 * compact JSON text of a spec, cap bytes with the NUL; "" = no field), starting from no field
 * when replace. A member sets its field, null removes it. Writes the canonical text (compact,
 * members in name order at every depth; "" when no field is left). Returns 0; TG_EINVAL with err
 * naming the largest field and the cap when the result would take more than cap - 1 bytes
 * (extra is then unchanged); TG_ENOMEM. */
int rt_key_extra_apply(char *extra, size_t cap, struct json_t *pending, int replace, char *err,
                       size_t errlen);

/* rt_key_extra_object: the fields of extra (compact JSON text) as a new JSON object (caller
 * json_decrefs), or NULL when extra is "" (no field), not a JSON object, or out of memory. */
struct json_t *rt_key_extra_object(const char *extra);

#endif
