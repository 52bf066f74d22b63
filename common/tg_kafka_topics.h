/* tg_kafka_topics: the Kafka topics a service depends on, checked at start and created on
 * demand (--create-topics), for both services.
 *
 * Check: each topic exists; its partition count and replication factor (cluster metadata) and
 * cleanup.policy (DescribeConfigs) are reported; a problem is a topic that does not exist, or
 * a topic that must be compacted (the control topic: its latest record per key is the state)
 * whose cleanup.policy has no "compact" (Kafka would delete keys after retention.ms).
 *
 * Create: the topics that do not exist, with the partitions and replication factor asked (the
 * replication factor is lowered to the number of brokers when the cluster has fewer),
 * min.insync.replicas 2 when replicated at least 3 times (else 1), cleanup.policy=compact for
 * the compacted ones. Existing topics are left as they are (and checked).
 *
 * Threads: one call at a time per handle; every call is bounded by its timeout. */
#ifndef TG_KAFKA_TOPICS_H
#define TG_KAFKA_TOPICS_H

#include <stddef.h>
#include <stdio.h>

#define TG_TOPICS_MAX 4
#define TG_TOPICS_REPORT_CAP 512 /* a check's report or problem, bytes */

struct rd_kafka_s;
struct tg_kafka_opts;

struct tg_topic_want {
    const char *name;
    int compact;     /* must be compacted (cleanup.policy holds "compact") */
    int partitions;  /* for create: > 0 */
    int replication; /* for create: > 0, lowered to the broker count */
};

/* Both services' topics (README "Topics"): --create-topics' defaults and its bound. */
#define TG_TOPICS_EVENTS_PARTITIONS 12
#define TG_TOPICS_CONTROL_PARTITIONS 3
#define TG_TOPICS_REPLICATION 3
#define TG_TOPICS_CREATE_TIMEOUT_MS 30000

/* The command line of --create-topics, the same for both services. */
struct tg_topics_args {
    int create;      /* --create-topics */
    int partitions;  /* --partitions N (events topic), TG_TOPICS_EVENTS_PARTITIONS */
    int replication; /* --replication-factor N, TG_TOPICS_REPLICATION */
};

void tg_topics_args_init(struct tg_topics_args *a);

/* tg_topics_args_take: when argv[*i] is --create-topics, --partitions N or --replication-factor
 * N, take it (moving *i past its value) and return 1; 0 for another argument; -1 for a value
 * that is not a whole number in range (partitions 1..10000, replication 1..32) or missing. */
int tg_topics_args_take(struct tg_topics_args *a, int argc, char **argv, int *i);

/* tg_kafka_topics_tollgate: the topics both services depend on into want[0..1]: the events
 * topic (partitions when created) and the compacted control topic (TG_TOPICS_CONTROL_PARTITIONS),
 * replication for both. The names are borrowed. Returns 2. */
size_t tg_kafka_topics_tollgate(const char *events, const char *control, int partitions,
                                int replication, struct tg_topic_want want[2]);

/* tg_kafka_topics_handle: a librdkafka handle for the admin calls (a producer that produces
 * nothing), bootstrap brokers and the service's security options (opts may be NULL). Returns
 * it (rd_kafka_destroy) or NULL with the reason in err. */
struct rd_kafka_s *tg_kafka_topics_handle(const char *brokers, const struct tg_kafka_opts *opts,
                                          char *err, size_t errlen);

/* tg_kafka_topics_check: n (<= TG_TOPICS_MAX) topics. report: one line,
 * "tollgate.events.v1: 12 partitions, replication 3, cleanup.policy=delete; ..."; problem: ""
 * or what is wrong ("tollgate.control.v1: does not exist (create it: --create-topics)",
 * "tollgate.control.v1: cleanup.policy=delete, not compacted: keys would expire"). Returns 0
 * (checked), or TG_EUNAVAIL (the cluster did not answer within timeout_ms: reason in problem). */
int tg_kafka_topics_check(struct rd_kafka_s *rk, const struct tg_topic_want *want, size_t n,
                          int timeout_ms, char *report, size_t rcap, char *problem, size_t pcap);

/* tg_kafka_topics_create: create those of the n topics that do not exist (see above), then
 * check all. msg: what was done, one line per topic ("created tollgate.events.v1: 12
 * partitions, replication 3", "tollgate.control.v1 exists: ..."). Returns 0 when every topic
 * exists afterwards without a problem, TG_EUNAVAIL (no answer), TG_EIO (refused by the
 * cluster, e.g. no authorisation: the reason in msg) or TG_EINVAL (a topic exists with a
 * problem, e.g. not compacted: named in msg; Tollgate does not alter existing topics). */
int tg_kafka_topics_create(struct rd_kafka_s *rk, const struct tg_topic_want *want, size_t n,
                           int timeout_ms, char *msg, size_t mcap);

/* tg_kafka_topics_run_create: --create-topics of a service: a handle for brokers and opts,
 * tg_kafka_topics_create with timeout_ms, what was done printed to out (one line per topic, or
 * the reason). Returns the process exit status: 0 done, 1 not. */
int tg_kafka_topics_run_create(const char *brokers, const struct tg_kafka_opts *opts,
                               const struct tg_topic_want *want, size_t n, int timeout_ms,
                               FILE *out);

/* A start-up check on a thread of its own: the topics are checked (each check bounded by
 * TG_TOPICS_CHECK_MS) every TG_TOPICS_RETRY_MS until the cluster answers and they are as
 * expected (so a topic created, or made compacted, later is seen); after each check cb gets its
 * result (rc 0 checked, problem "" when all is well; TG_EUNAVAIL not reached, reason in
 * problem). The report is logged when it changes (info), with its problem as a warning. Then
 * the thread ends and its librdkafka handle is destroyed. cb runs on the watch's thread and
 * must not block. */
#define TG_TOPICS_CHECK_MS 5000
#define TG_TOPICS_RETRY_MS 10000

typedef void (*tg_topics_cb)(void *ud, int rc, const char *report, const char *problem);

struct tg_topics_watch;

/* tg_topics_watch_start: want (n <= TG_TOPICS_MAX) and the strings in it are copied. Returns
 * the watch (tg_topics_watch_stop) or NULL with the reason in err. */
struct tg_topics_watch *tg_topics_watch_start(const char *brokers,
                                              const struct tg_kafka_opts *opts,
                                              const struct tg_topic_want *want, size_t n,
                                              tg_topics_cb cb, void *ud, char *err,
                                              size_t errlen);

/* tg_topics_watch_stop: stop and join (at most one check's time), free. NULL is fine. */
void tg_topics_watch_stop(struct tg_topics_watch **w);

#endif
