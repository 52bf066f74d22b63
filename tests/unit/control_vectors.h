/* control_vectors: the control topic golden vectors (tests/golden/control, NAME.vec), read for the
 * tests of proto and of both services. Format: README.md there. */
#ifndef CONTROL_VECTORS_H
#define CONTROL_VECTORS_H

#include <stddef.h>
#include <stdint.h>

#define CV_FIELDS_MAX 16

struct cv_vector {
    char name[64];          /* file name without .vec */
    char *record_key;       /* "record_key:" */
    char *value;            /* "value:", or NULL for a tombstone */
    size_t value_len;
    char *expect;           /* "expect:": put, delete, block, unblock, skip, invalid */
    size_t n;               /* the other "name: text" lines, in file order */
    char *names[CV_FIELDS_MAX];
    char *texts[CV_FIELDS_MAX];
    char *buf;              /* the file (every pointer above points into it) */
};

/* cv_load: every vector, sorted by name, into a new array (*n entries). Fails the test (cmocka)
 * on a malformed file. Free with cv_free. */
struct cv_vector *cv_load(size_t *n);
void cv_free(struct cv_vector *v, size_t n);

/* cv_get: the text of a field, or NULL. cv_int: a whole-number field (fails the test if absent). */
const char *cv_get(const struct cv_vector *v, const char *name);
int64_t cv_int(const struct cv_vector *v, const char *name);

#endif
