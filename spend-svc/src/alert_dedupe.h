/* alert_dedupe: the (type, subject) de-duplication window of the alerter.
 *
 * A fixed table of capacity entries, set at creation. The first alert of a (type, subject)
 * passes and opens a window of window_ms; later ones inside it are suppressed and counted; the
 * first one after the window passes with the count, which its message reports ("N similar
 * suppressed"), and opens a new window. When the table is full the least recently seen entry
 * is evicted (counted; its pending count is lost). Time is an argument; no lock (the caller's
 * lock protects it). */
#ifndef SP_ALERT_DEDUPE_H
#define SP_ALERT_DEDUPE_H

#include <stddef.h>
#include <stdint.h>

#include "alert.h"

struct sp_dedupe;

/* sp_dedupe_create: table of capacity (>= 1) entries. Returns new (sp_dedupe_destroy) or NULL
 * when out of memory. */
struct sp_dedupe *sp_dedupe_create(size_t capacity);

/* sp_dedupe_destroy: free *d and set it to NULL; NULL is a no-op. */
void sp_dedupe_destroy(struct sp_dedupe **d);

/* sp_dedupe_check: 1 when the alert passes (then *suppressed_out is the number suppressed since
 * the previous one that passed), 0 when it is suppressed. window_ms 0 lets everything pass.
 * subject borrowed, compared up to SP_ALERT_SUBJECT_CAP bytes. */
int sp_dedupe_check(struct sp_dedupe *d, int type, const char *subject, uint64_t now_ms,
                    uint64_t window_ms, uint64_t *suppressed_out);

/* sp_dedupe_evictions: entries evicted because the table was full. */
uint64_t sp_dedupe_evictions(const struct sp_dedupe *d);

#endif
