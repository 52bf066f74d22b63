/* consumer: every Kafka handle of spend-svc (the only module that includes rdkafka.h).
 *
 * Events: a consumer group on the events topic with enable.auto.commit=false and
 * enable.auto.offset.store=false, eager rebalancing (range/roundrobin assignors: the protocol
 * librdkafka 2.0.2 and its mock cluster support completely). On assignment the next offsets
 * are read from Postgres through a hook and the partitions are assigned at exactly those
 * offsets; partitions Postgres knows nothing about start at the beginning. When Postgres cannot
 * be read, the partitions are assigned at the offsets committed to Kafka (which never run ahead
 * of Postgres): re-reading is harmless because the sink is idempotent per call_id.
 * Before partitions are revoked a hook lets the caller commit (or drop) what it holds for them.
 *
 * Hold: while the sink cannot commit, sp_consumer_hold() pauses every assigned partition and
 * polling continues (group membership and heartbeats stay alive); messages that were already
 * fetched are discarded. sp_consumer_release() seeks each partition back to the first message
 * not handed to the caller and resumes, so nothing is skipped.
 *
 * Control topic: a second, group-less consumer reads tollgate.control.v1 from the beginning
 * (key: records and blocks), and an idempotent producer with acks=all publishes block records.
 *
 * Threads: everything here runs on the consumer (main loop) thread, except
 * sp_consumer_write_metrics and sp_consumer_kafka_up (any thread). */
#ifndef SP_CONSUMER_H
#define SP_CONSUMER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "tg_buf.h"

struct sp_consumer;

struct sp_consumer_hooks {
    /* offsets_load: next offsets for parts (next[i] = -1: none). 0 or a tg_err. */
    int (*offsets_load)(void *ctx, const int32_t *parts, int n, int64_t *next);
    /* revoking: parts are about to be taken away; commit or drop what is held for them. */
    void (*revoking)(void *ctx, const int32_t *parts, int n);
    void *ctx;
};

/* One consumed message; payload borrowed until the next sp_consumer_poll or close. */
struct sp_consumer_msg {
    int32_t partition;
    int64_t offset;
    const void *payload;
    size_t len;
};

/* sp_consumer_create: connect the three handles and subscribe. cfg borrowed (copied).
 * Returns new (sp_consumer_destroy) or NULL with err. */
struct sp_consumer *sp_consumer_create(const struct sp_config *cfg,
                                       const struct sp_consumer_hooks *hooks, char *err,
                                       size_t errlen);

/* sp_consumer_close: leave the group (revoke hook runs), then sp_consumer_destroy frees. */
void sp_consumer_close(struct sp_consumer *c);
void sp_consumer_destroy(struct sp_consumer **c);

/* sp_consumer_poll: wait up to timeout_ms for one message. Returns 1 with *msg filled, 0 when
 * none (timeout, event, or a message discarded while held), or a negative tg_err for a
 * consumer error (logged, rate-limited). */
int sp_consumer_poll(struct sp_consumer *c, int timeout_ms, struct sp_consumer_msg *msg);

/* sp_consumer_hold / sp_consumer_release / sp_consumer_held: see the header comment.
 * release resumes every assigned partition right after the last message handed out. */
void sp_consumer_hold(struct sp_consumer *c);
void sp_consumer_release(struct sp_consumer *c);
int sp_consumer_held(const struct sp_consumer *c);

/* sp_consumer_unread: the message at (partition, offset) was handed out but not kept: the
 * next release resumes the partition at offset. Use before sp_consumer_hold. */
void sp_consumer_unread(struct sp_consumer *c, int32_t partition, int64_t offset);

/* sp_consumer_park / sp_consumer_unpark: back-pressure for part of the assignment. park pauses
 * the assigned partitions p with p % mod == rem (messages already fetched for them are
 * discarded); unpark seeks each back to the first message not handed out (or unread) and
 * resumes it. A writer whose batches are all taken parks its partitions instead of stopping
 * the loop, so the other writers keep being fed. Both are no-ops while held; release clears
 * every park. */
void sp_consumer_park(struct sp_consumer *c, int mod, int rem);
void sp_consumer_unpark(struct sp_consumer *c, int mod, int rem);

/* sp_consumer_commit: commit next offsets to Kafka, asynchronously (for lag tools). */
void sp_consumer_commit(struct sp_consumer *c, const int32_t *parts, const int64_t *next, int n);

/* Control records: fn(ctx, key, keylen, value, vlen, partition, offset) for each record
 * available now (at most max); value NULL for a tombstone. fn returns 0, or a negative value to
 * stop and re-read this record later (e.g. Postgres is down). Returns the count handled. */
typedef int (*sp_consumer_control_fn)(void *ctx, const char *key, size_t keylen,
                                      const void *value, size_t vlen);
int sp_consumer_control_poll(struct sp_consumer *c, int max, sp_consumer_control_fn fn,
                             void *ctx);

/* sp_consumer_control_caught_up: 1 once the control topic was read to its end at least once. */
int sp_consumer_control_caught_up(const struct sp_consumer *c);

/* sp_consumer_publish_control: produce (key, value) to the control topic (value NULL: a
 * tombstone) and wait up to timeout_ms for the broker's acknowledgement. Returns 0 or
 * TG_ETIMEOUT / TG_EUNAVAIL. A producer that reported a fatal error is replaced first (at most
 * every SP_CONSUMER_RENEW_MS). One thread at a time. */
#define SP_CONSUMER_RENEW_MS 1000u
int sp_consumer_publish_control(struct sp_consumer *c, const char *key, const char *value,
                                size_t len, int timeout_ms);

/* sp_consumer_update_lag: refresh per-partition lag from cached watermarks (cheap). */
void sp_consumer_update_lag(struct sp_consumer *c);

/* sp_consumer_total_lag: sum of the last computed lags. Any thread. */
int64_t sp_consumer_total_lag(struct sp_consumer *c);

/* sp_consumer_kafka_up: 1 when the brokers were reachable lately. Any thread. */
int sp_consumer_kafka_up(const struct sp_consumer *c);

/* sp_consumer_kafka_reason: while the brokers are down, the last Kafka error into buf ("" when
 * up or none), e.g. "_AUTHENTICATION: sasl_ssl://kafka-0:9093/bootstrap: SASL authentication
 * error: ..." (escaped; never a credential). Returns buf. Any thread. */
const char *sp_consumer_kafka_reason(struct sp_consumer *c, char *buf, size_t cap);

/* sp_consumer_write_metrics: tollgate_spend_kafka_up, tollgate_spend_consumer_lag{partition},
 * rebalances, discarded, control producer renewals. Any thread. */
void sp_consumer_write_metrics(struct sp_consumer *c, struct tg_buf *b);

#endif
