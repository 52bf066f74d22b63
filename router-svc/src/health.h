/* health: liveness and readiness state of router-svc.
 *
 * Liveness never looks at a dependency: a process that can answer is alive. Readiness is true
 * once the configuration is loaded and the server is serving, and false from the moment
 * shutdown begins. Dependencies (Kafka, spool, key replay, ...) report their state here; a
 * dependency registered as "required" turns readiness false while it is down, the others are
 * only reported. The table of dependencies is fixed-size.
 *
 * Threads: every function is safe from any thread (atomics plus one small mutex for names). */
#ifndef RT_HEALTH_H
#define RT_HEALTH_H

#include "tg_buf.h"

#define RT_HEALTH_DEPS_MAX 8
#define RT_HEALTH_NAME_CAP 32
#define RT_HEALTH_REASON_CAP 256 /* why a dependency is down, bytes */

enum rt_dep_state { RT_DEP_UNKNOWN = 0, RT_DEP_UP = 1, RT_DEP_DOWN = 2 };

struct rt_health;

/* rt_health_create: new state, not ready. Destroy with rt_health_destroy. */
struct rt_health *rt_health_create(void);
void rt_health_destroy(struct rt_health **h);

/* rt_health_set_ready: 1 when config is loaded and serving; 0 when shutting down. */
void rt_health_set_ready(struct rt_health *h, int ready);
/* rt_health_set_shutting_down: readiness false for good. */
void rt_health_set_shutting_down(struct rt_health *h);

/* rt_health_dep_register: add a dependency by name (copied). required: readiness depends on
 * it. Returns its index or -1 when the table is full. Main thread, before serving. */
int rt_health_dep_register(struct rt_health *h, const char *name, int required);
/* rt_health_dep_set: update the state of dependency idx. Any thread. */
void rt_health_dep_set(struct rt_health *h, int idx, enum rt_dep_state st);

/* rt_health_dep_reason: why dependency idx is down (copied, made JSON-safe, cut at
 * RT_HEALTH_REASON_CAP; "" or NULL clears it); reported while the dependency is down. A reason
 * never holds a secret: it comes from a library's error text about a connection. Any thread. */
void rt_health_dep_reason(struct rt_health *h, int idx, const char *reason);

/* rt_health_ready: 1 when ready. */
int rt_health_ready(const struct rt_health *h);

/* rt_health_readiness_json: {"status":"ready"|"not_ready","config":"loaded",
 * "shutting_down":bool,"dependencies":{"name":"up"|"down"|"unknown",...}} into b, with
 * "reasons":{"name":"...",...} after dependencies when one down has a reason. */
void rt_health_readiness_json(const struct rt_health *h, struct tg_buf *b);

#endif
