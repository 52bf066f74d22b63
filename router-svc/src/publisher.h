/* rt_publisher: spend events from router-svc to Kafka, through the local spool.
 *
 * The request path only encodes the event and appends it to the spool (one write()); it never
 * calls Kafka and never waits. A publisher thread tails the spool, produces each record without
 * blocking (never RD_KAFKA_MSG_F_BLOCK) to the events topic keyed by the key hash, serves
 * delivery reports, and advances the spool's checkpoint to the lowest unacknowledged record.
 * With events_per_record > 1, the events of one key hash that a pass reads from the spool share
 * Kafka records (one per line, up to events_per_record of them and PROTO_RECORD_MAX_BYTES, in
 * the order they were read): librdkafka's work is per record, and it is most of the event
 * pipeline's CPU. An event is acknowledged with its record.
 * When Kafka is down or the producer queue is full, records simply wait in the spool and are
 * produced later; on start everything after the checkpoint is replayed (duplicates at Kafka
 * level are fine: spend-svc deduplicates by call id).
 *
 * Bounds: producer queue (queue.buffering.max.messages/kbytes) and the in-flight window
 * (RT_PUBLISHER_WINDOW records past the checkpoint) are fixed; the spool has max_bytes. When the
 * spool is full, full_policy drop counts and drops the event, reject makes rt_publisher_admit()
 * refuse new requests (the HTTP front answers 503). */
#ifndef RT_PUBLISHER_H
#define RT_PUBLISHER_H

#include <stddef.h>
#include <stdint.h>

#include "proto_event.h"
#include "tg_buf.h"

#define RT_PUBLISHER_WINDOW 65536u          /* records in flight past the checkpoint */
/* While Kafka does not acknowledge anything for RT_PUBLISHER_STALL_MS, at most this many
 * records are handed to the producer: the rest waits in the spool (on disk), so an outage does
 * not grow the process's memory. */
#define RT_PUBLISHER_STALLED_WINDOW 256u
#define RT_PUBLISHER_STALL_MS 2000u
/* Producer queue cap (queue.buffering.max.kbytes): bytes of events handed to librdkafka and
 * not yet acknowledged. It bounds the memory a backlog takes when Kafka returns after an
 * outage: the rest waits in the spool (on disk) and goes out as acknowledgements come back.
 * 2 MiB in flight is ~2,500 events, ~45,000 events/s with the 50 ms linger. */
#define RT_PUBLISHER_QUEUE_KBYTES 2048
#define RT_PUBLISHER_CHECKPOINT_MS 100      /* checkpoint written at most this often */
/* Records produced per pass over the spool at most; a pass that drained the spool sleeps
 * RT_PUBLISHER_TAIL_MS (or longer, below), then serves the delivery reports that came
 * meanwhile, so that one pass reads and produces the records of many requests instead of
 * waking per request. A sleep, not a wait for reports: each produce response's reports woke
 * the thread early, for a shorter pass (its context switches per 1,000 requests in
 * tests/bench/router_bench.sh: 13.1 -> 9.7). */
#define RT_PUBLISHER_PASS_MAX 10000
#define RT_PUBLISHER_TAIL_MS 10
/* Below ~13k events a second a pass of 10 ms reads fewer than RT_PUBLISHER_PASS_EVENTS: the
 * sleep then grows, up to RT_PUBLISHER_QUIET_MS, until a pass reads about that many at the
 * rate the last pass saw (rt_publisher_tail_ms). Each pass has costs of its own whatever it
 * carries (the wake-up, the spool's read, librdkafka's poll, a broker thread woken by the
 * first record of a batch): 100 passes a second cost an idle router ~100 wake-ups a second,
 * and at one request at a time they were a fixed share of every request. The events wait in
 * the spool meanwhile: they reach Kafka at most 40 ms later than with 10 ms passes. */
#define RT_PUBLISHER_QUIET_MS 50
#define RT_PUBLISHER_PASS_EVENTS 128
/* librdkafka's batch.size for the events topic. Above the bytes of a pass (~150 KB at 28k
 * requests a second): at 100,000 a pass passed it once or twice, and each time produce() woke
 * the broker thread, which then sent part of the pass (tests/bench/router_bench.sh, side by
 * side: 23-24 wake-ups per 1,000 requests, 8 at 300,000; its CPU 1.9-2.0 -> 0.9-1.1 µs a
 * request). A batch's buffers
 * (the message set and its LZ4 copy) stay under glibc's mmap threshold (main.c), so they come
 * from the heap and are used again, not mapped and faulted in page by page for each batch. */
#define RT_PUBLISHER_KAFKA_BATCH_BYTES 300000
#define RT_PUBLISHER_REASONS_MAX 16         /* distinct delivery error reasons counted */
/* events_per_record > 1: the events a pass reads wait in a stage (at most this many events
 * and bytes) until the pass ends or the stage is full; then the events of each key hash go out
 * in shared records. The spool reader reads into the stage itself, so a record's room (64 KiB,
 * a spool record's cap) is kept free for each read. Allocated once (~280 KiB; resident as
 * used). Each shared record is built in a buffer of its own that librdkafka frees. */
#define RT_PUBLISHER_STAGE_EVENTS 512u
#define RT_PUBLISHER_STAGE_BYTES (256u * 1024u)
/* After a burst of at least RT_PUBLISHER_TRIM_BURST events in flight is acknowledged, free
 * memory is given back (malloc_trim), at most every RT_PUBLISHER_TRIM_MS (publisher.c). A lost
 * partition leader holds back only the partitions it led, until another node leads them: with
 * a burst of 1,000 the trim waited for more than that, and the broker threads' arenas kept
 * 2 MB after it (chaos c9, smaps at the fault's start and end). Where steady load keeps more
 * than this in flight, the trim's cost (the publisher thread walks the arenas) comes at most
 * every RT_PUBLISHER_TRIM_MS: a second, as after an outage the acknowledgement of the records
 * in flight during it ends one burst and the backlog sent next is another, whose memory waited
 * for the whole interval with 10 s. */
#define RT_PUBLISHER_TRIM_BURST 64u
#define RT_PUBLISHER_TRIM_DRAINED 16u /* the burst is over: in flight under its peak / this */
#define RT_PUBLISHER_TRIM_MS 1000u /* a trim took 0.4-2 ms with six arenas of ~3 MB each */
/* ... and only when the process's RSS is at least this much over what it was right after the
 * last trim (the first trim is always made): steady load fills and drains the window as a
 * burst does, and gives nothing back that it would not fault in again at once. */
#define RT_PUBLISHER_TRIM_GROWTH_BYTES (2u * 1024u * 1024u)

/* The trim decision, apart so that tests drive it. Zeroed at start. */
struct rt_trim {
    uint64_t burst_max; /* most events in flight since the last decision */
    uint64_t last_ms;   /* monotonic ms of the last decision (trim or not), 0: none yet */
    uint64_t rss;       /* resident bytes right after the last trim (the caller sets it), 0:
                         * none yet */
};

/* rt_trim_due: one pass's look, with out events in flight at now_ms: 1 when free memory should
 * go back now. The burst is over when out is at most its peak / RT_PUBLISHER_TRIM_DRAINED after
 * a peak of RT_PUBLISHER_TRIM_BURST or more, RT_PUBLISHER_TRIM_MS after the last decision; then
 * rss() (called only then; 0: unknown) decides: 1 when unknown, when no trim was made yet, or
 * when at least RT_PUBLISHER_TRIM_GROWTH_BYTES over t->rss. A decision either way starts a new
 * burst. Publisher thread. */
int rt_trim_due(struct rt_trim *t, uint64_t out, uint64_t now_ms, uint64_t (*rss)(void));

/* rt_publisher_tail_ms: the sleep after a pass that drained the spool and read events that
 * came in elapsed_ms (since the pass before began): the time RT_PUBLISHER_PASS_EVENTS take at
 * that rate, within [RT_PUBLISHER_TAIL_MS, RT_PUBLISHER_QUIET_MS]. */
uint32_t rt_publisher_tail_ms(uint64_t events, uint64_t elapsed_ms);

struct rt_publisher;
struct tg_kafka_opts;

struct rt_publisher_config {
    const char *brokers;          /* bootstrap list (borrowed during create) */
    const struct tg_kafka_opts *kafka_opts; /* security and librdkafka properties, applied
                                             * after the publisher's own; NULL = none
                                             * (borrowed during create) */
    const char *topic;            /* events topic */
    uint32_t events_per_record;   /* 1..PROTO_RECORD_EVENTS_MAX (0: 1): events of one key hash
                                   * one Kafka record may hold (proto_record_split) */
    const char *spool_dir;        /* spool directory */
    uint64_t spool_max_bytes;     /* > 0 */
    uint64_t spool_segment_bytes; /* 0: default (64 MiB, or max_bytes / 8 when smaller) */
    int reject_when_full;         /* 1: full_policy reject (503), 0: drop (counted) */
    uint32_t fsync_interval_ms;   /* 0: page cache only */
};

/* rt_publisher_create: open the spool (recovering and scheduling replay of what is after the
 * checkpoint), create the producer and start the publisher thread. Kafka being unreachable is
 * not an error. Returns new publisher (rt_publisher_destroy) or NULL with err. Main thread. */
struct rt_publisher *rt_publisher_create(const struct rt_publisher_config *cfg, char *err,
                                         size_t errlen);

/* rt_publisher_admit: 0 when a new request may be served, TG_EFULL when the spool is full and
 * the policy is reject. Request threads; takes the spool mutex briefly. */
int rt_publisher_admit(struct rt_publisher *pub);

/* rt_publisher_submit: encode ev (<= 4 KiB by construction) and append it to the spool. Returns
 * 0; TG_EFULL when the spool is full (the event is dropped and counted: the caller carries on);
 * TG_EIO on a write error (counted). Never blocks on Kafka. Request threads. */
int rt_publisher_submit(struct rt_publisher *pub, const struct proto_event *ev);

/* Batches per loop turn: on a thread that called rt_publisher_batch_begin, rt_publisher_submit
 * encodes the event into the thread's batch (up to RT_SPOOL_BATCH_MAX events,
 * RT_PUBLISHER_BATCH_BYTES) and rt_publisher_batch_flush appends the whole batch with one
 * write (rt_spool_append_batch); a full batch is flushed by the submit that finds it full.
 * The caller holds back every response byte while rt_publisher_batch_pending is nonzero and
 * flushes before sending them, so that an event is in the spool before the last byte of its
 * response leaves, as with rt_publisher_submit alone. rt_publisher_batch_end flushes and frees
 * the batch (before the publisher is destroyed). A spool full or failing is counted per event
 * at the flush as at a submit. Loop threads: each its own batch. */
#define RT_PUBLISHER_BATCH_BYTES (64u * 1024u)
int rt_publisher_batch_begin(struct rt_publisher *pub);
int rt_publisher_batch_pending(void);
void rt_publisher_batch_flush(void);
void rt_publisher_batch_end(void);

/* rt_publisher_drain: wait until every spooled event is acknowledged by Kafka, or timeout_ms.
 * Returns 0 when drained, TG_ETIMEOUT otherwise (the rest stays in the spool for the next
 * start). Main thread, on SIGTERM after the HTTP front has finished its requests. */
int rt_publisher_drain(struct rt_publisher *pub, uint32_t timeout_ms);

/* rt_publisher_destroy: stop the thread, close producer and spool (accepts NULL; sets *pub to
 * NULL). Unacknowledged events stay in the spool. Main thread. */
void rt_publisher_destroy(struct rt_publisher **pub);

/* rt_publisher_kafka_up: 1 when the last word from the brokers was good. Any thread. */
int rt_publisher_kafka_up(struct rt_publisher *pub);

/* rt_publisher_kafka_reason: while Kafka is down, librdkafka's last error ("_AUTHENTICATION:
 * sasl_ssl://...: SASL authentication error: ...", escaped) into buf; "" when up or none.
 * Returns buf. Any thread. */
const char *rt_publisher_kafka_reason(struct rt_publisher *pub, char *buf, size_t cap);

/* rt_publisher_write_metrics: append the publisher and spool metrics. Any thread. */
void rt_publisher_write_metrics(struct rt_publisher *pub, struct tg_buf *b);

#endif
