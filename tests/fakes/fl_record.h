/* fl_record: a bounded ring of recorded HTTP request bodies (drop-oldest).
 *
 * fake-llm keeps the last N provider requests for GET /_requests and the last N Slack messages
 * for GET /_slack. Capacity and the per-body cap are fixed at creation; a body longer than the
 * cap is stored cut, with truncated=1 and its original size. Thread-safe (one mutex). */
#ifndef FL_RECORD_H
#define FL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define FL_RECORD_PATH_MAX 256     /* bytes kept of the request path, NUL included */
#define FL_RECORD_MODEL_MAX 129    /* bytes kept of the model name, NUL included */
#define FL_RECORD_HEADERS_MAX 4096 /* bytes of serialized request headers kept per entry */

struct fl_record;

/* fl_record_create: ring of capacity entries (> 0), each body cut at body_max bytes (> 0).
 * Returns new (destroy with fl_record_destroy) or NULL when out of memory. */
struct fl_record *fl_record_create(size_t capacity, size_t body_max);

/* fl_record_destroy: free everything, set *r NULL. Accepts NULL. */
void fl_record_destroy(struct fl_record **r);

/* fl_record_add: copy path, model (may be NULL), at most body_max bytes of body, status, and
 * headers (may be NULL): hlen bytes of "name\0value\0" pairs, cut at FL_RECORD_HEADERS_MAX.
 * When the ring is full the oldest entry is dropped (counted). Any thread. */
void fl_record_add(struct fl_record *r, const char *path, const char *model, const char *body,
                   size_t len, int status, uint64_t ts_ms, const char *headers, size_t hlen);

/* fl_record_list: new JSON array of the newest `limit` entries (oldest first) whose model equals
 * model_filter (NULL: all). Each: {path, model, body (string, invalid UTF-8 replaced by '?'),
 * size, truncated, status, ts_ms, headers {name: value}}. Returns NULL when out of memory. Caller
 * decrefs. Any thread. */
json_t *fl_record_list(struct fl_record *r, const char *model_filter, size_t limit);

/* fl_record_stats: totals since the last clear: added, dropped (overwritten oldest). */
void fl_record_stats(struct fl_record *r, uint64_t *added, uint64_t *dropped);

/* fl_record_clear: drop every entry and zero the totals. Any thread. */
void fl_record_clear(struct fl_record *r);

#endif
