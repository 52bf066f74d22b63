/* spool_bench: what the event spool costs a request thread.
 *
 * The request path of router-svc encodes one spend event (proto_event_encode, at most 4 KiB)
 * and appends it to the local spool with one write(); rt_publisher_submit() does exactly that.
 * This bench measures that work on realistic events:
 *   - append only: rt_spool_append of events encoded beforehand (framed as the publisher frames
 *     them) from 1, 2 and 4 threads at full speed: the spool alone, appends per second and
 *     per-append latency p50/p99/p999;
 *   - encode + append: the same with proto_event_encode in each call (what a request thread
 *     does), no Kafka;
 *   - spool + publisher: rt_publisher_submit from 1, 2 and 4 threads while the publisher thread
 *     reads the spool and produces to Kafka, so reads, produce, delivery reports and
 *     checkpoints compete with the appends; also events acknowledged by Kafka per second;
 *   - paced: one thread at a steady request rate (--rate), encode + append without and with
 *     the publisher running:
 *     the latency a request actually pays for its event (the added p50/p99/p999).
 * Every figure is the median of --repeats runs. Prints a markdown table and, with --json FILE,
 * the headline figures as one JSON object. No timing is asserted: the bench fails only on a
 * functional error (an append or submit that fails, a publisher that never delivers).
 *
 * Kafka: TG_KAFKA_BROKERS (and TG_KAFKA_CTL to create the bench topic) from
 * tests/lib/services.sh; when unset, a private devkafka is started through services.sh and
 * stopped at the end. Spool files go to a fresh directory under --dir (default TMPDIR or /tmp),
 * removed after each run. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto_event.h"
#include "publisher.h"
#include "spool.h"
#include "tg_buf.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_limits.h"
#include "tg_log.h"
#include "tg_time.h"

#ifndef SB_DEFAULT_SOURCE_DIR
#define SB_DEFAULT_SOURCE_DIR "."
#endif
#ifndef SB_DEFAULT_BUILD_DIR
#define SB_DEFAULT_BUILD_DIR "."
#endif

#define SB_THREADS_MAX 4u
#define SB_EVENTS 256u       /* distinct events cycled through */
#define SB_HEAVY_EVERY 8u    /* every 8th event is a worst-case one */
#define SB_KEY_MAX_BYTES 64u /* key hash in the publisher's framing */
#define SB_FRAME_MAX_BYTES (1u + SB_KEY_MAX_BYTES + TG_EVENT_MAX_BYTES + 1u)
#define SB_TOPIC "tollgate.bench.spool"
#define SB_TOPIC_PARTITIONS 6
#define SB_SPOOL_MAX_BYTES (4ull * 1024 * 1024 * 1024)
#define SB_SEGMENT_BYTES (64ull * 1024 * 1024)
#define SB_WARMUP_EVENTS 2000u     /* delivered before a publisher run starts */
#define SB_DELIVERY_WAIT_MS 30000u /* bound on waiting for the warm-up delivery */
#define SB_REPEATS_MAX 15u
#define SB_PATH_MAX 512u
#define SB_METRICS_BYTES (64u * 1024u)
#define SB_ENCODE_LOOPS 100000u /* encodes timed for the encode-alone figure */
#define SB_RATE_LIMIT_MESSAGE                                                                      \
    "Rate limit reached for requests in organization org-****; retry after 2 s. "

struct sb_opts {
    double seconds;        /* length of a full-speed run, s */
    uint32_t max_appends;  /* cap on appends per run (all threads), also the latency capacity */
    uint32_t repeats;      /* runs per configuration; the median is reported */
    uint32_t rate;         /* paced runs: appends per second */
    double paced_seconds;  /* length of a paced run, s */
    const char *json_path; /* headline figures as JSON, or NULL */
    const char *dir;       /* parent of the spool directories */
};

/* What a run's threads call per event. */
enum sb_mode {
    SB_MODE_APPEND = 0,   /* rt_spool_append of an event encoded beforehand: the spool alone */
    SB_MODE_SPOOL = 1,    /* proto_event_encode + rt_spool_append: a request thread, no Kafka */
    SB_MODE_PUBLISHER = 2 /* rt_publisher_submit with the publisher thread producing */
};

static const char *const sb_mode_names[] = {"append", "spool", "publisher"};

/* The events, and their frames as the publisher writes them to the spool. */
struct sb_input {
    struct proto_event events[SB_EVENTS];
    unsigned char frames[SB_EVENTS][SB_FRAME_MAX_BYTES];
    size_t frame_len[SB_EVENTS];
    double frame_avg_bytes; /* mean frame length */
    double json_avg_bytes;  /* mean encoded event length */
};

/* One run: threads started together, each appending until the deadline or its share of the cap. */
struct sb_run {
    enum sb_mode mode;
    struct rt_spool *spool;    /* SB_MODE_APPEND, SB_MODE_SPOOL (borrowed) */
    struct rt_publisher *pub;  /* SB_MODE_PUBLISHER (borrowed) */
    const struct sb_input *in; /* events and frames (borrowed) */
    atomic_int go;             /* 0: wait, 1: start, -1: give up (a thread failed to start) */
    uint64_t duration_ns;      /* run length */
    uint64_t interval_ns;      /* paced: ns between appends; 0: full speed */
    uint64_t per_thread_max;   /* appends per thread at most */
    atomic_int first_error;    /* 0 or the first tg_err of any thread */
};

struct sb_thread {
    struct sb_run *run;
    uint32_t index;
    uint64_t *lat_ns; /* per-append latency, capacity run->per_thread_max (owned by main) */
    uint64_t n;       /* appends done */
    pthread_t tid;
};

/* Figures of one run, and of one configuration (medians over its runs). */
struct sb_figures {
    double appends_per_s;
    double mib_per_s;
    double p50_us, p99_us, p999_us;
    double acked_per_s; /* publisher runs: events acknowledged by Kafka per second during the run */
};

struct sb_row {
    const char *label;
    enum sb_mode mode;
    uint32_t threads;
    int paced;
    struct sb_figures fig;
};

static char sb_state_dir[SB_PATH_MAX]; /* private services.sh state, "" when none started */

/* ---------------------------------------------------------------------------- events */

static void sb_set(char *dst, size_t cap, const char *src)
{
    proto_str_set(dst, cap, src);
}

/* Fills ev with a realistic request event. Most are a first-try success; every
 * SB_HEAVY_EVERY-th is the worst case the encoder allows a request to produce: four failed
 * attempts with full-length messages, eight tags, long names. */
static int sb_event_make(struct proto_event *ev, uint32_t i)
{
    static const char *const groups[] = {"gpt-main", "claude-main", "gpt-fallback", "embed-small"};
    char key[32];
    struct proto_attempt a;
    uint64_t now = tg_now_epoch_ms();
    int heavy = (i % SB_HEAVY_EVERY) == SB_HEAVY_EVERY - 1;

    proto_event_init(ev);
    ev->kind = PROTO_KIND_REQUEST;
    if (tg_uuid_v7(now, ev->call_id) != 0)
        return TG_EIO;
    ev->ts_start_ms = (int64_t)now - 850;
    ev->ts_end_ms = (int64_t)now;
    sb_set(ev->endpoint, sizeof(ev->endpoint),
           i % 3 == 0 ? "/v1/messages" : "/v1/chat/completions");
    ev->stream = (int)(i % 2);
    snprintf(key, sizeof(key), "sk-bench-key-%u", i % 64);
    tg_sha256_hex(key, strlen(key), ev->key_hash);
    sb_set(ev->key_alias, sizeof(ev->key_alias),
           heavy ? "analytics-batch-nightly-reprocessing-pipeline-eu-west-1-prod" : "web-frontend");
    sb_set(ev->team_id, sizeof(ev->team_id), "team-7f3c2a91-growth");
    sb_set(ev->user_id, sizeof(ev->user_id), "user-0042");
    sb_set(ev->end_user, sizeof(ev->end_user),
           heavy ? "customer-3b8e5d0c-1c4f-4e2a-9d77-2f9b1a6c8e10" : "cust-1187");
    sb_set(ev->model_requested, sizeof(ev->model_requested), groups[i % 4]);
    sb_set(ev->model_group, sizeof(ev->model_group), heavy ? "gpt-fallback" : groups[i % 4]);
    sb_set(ev->deployment_id, sizeof(ev->deployment_id), heavy ? "fallback-eastus2-2" : "main-1");
    sb_set(ev->provider, sizeof(ev->provider), i % 3 == 0 ? "anthropic" : "openai");
    sb_set(ev->model, sizeof(ev->model),
           i % 3 == 0 ? "claude-sonnet-4-5-20250929" : "gpt-5.4-nano-2026-03-05");
    ev->status = 200;
    ev->prompt_tokens = 1200 + (int64_t)(i % 700);
    ev->completion_tokens = 180 + (int64_t)(i % 400);
    ev->cost_nusd = ev->prompt_tokens * 50 + ev->completion_tokens * 400;
    ev->latency_ms = 850;
    ev->ttft_ms = ev->stream ? 210 : 0;
    ev->fallbacks = heavy ? 1 : 0;
    tg_random_bytes(key, 16);
    for (int k = 0; k < 16; k++)
        snprintf(ev->trace_id + 2 * k, 3, "%02x", (unsigned char)key[k]);

    if (heavy) {
        for (int k = 0; k < 5; k++) {
            memset(&a, 0, sizeof(a));
            sb_set(a.group, sizeof(a.group),
                   k < 4 ? "gpt-main-primary-deployments-with-a-long-name" : "gpt-fallback");
            snprintf(a.deployment_id, sizeof(a.deployment_id),
                     "main-%d-eastus2-provisioned-throughput", k + 1);
            a.http_status = k < 4 ? 429 : 200;
            sb_set(a.error_class, sizeof(a.error_class), k < 4 ? "rate_limit" : "");
            a.latency_ms = 120u + (uint32_t)k * 40u;
            if (k < 4) {
                memset(a.message, 'x', sizeof(a.message) - 1);
                memcpy(a.message, SB_RATE_LIMIT_MESSAGE, sizeof(SB_RATE_LIMIT_MESSAGE) - 1);
            }
            proto_event_add_attempt(ev, &a);
        }
        for (int k = 0; k < PROTO_TAGS_MAX; k++) {
            char tag[PROTO_TAG_CAP];
            snprintf(tag, sizeof(tag), "tag-%d-feature-flag-experiment-cohort-%08u-%d", k, i, k);
            proto_event_add_tag(ev, tag);
        }
    } else {
        memset(&a, 0, sizeof(a));
        sb_set(a.group, sizeof(a.group), ev->model_group);
        sb_set(a.deployment_id, sizeof(a.deployment_id), ev->deployment_id);
        a.http_status = 200;
        a.latency_ms = 840;
        proto_event_add_attempt(ev, &a);
        proto_event_add_tag(ev, "env:prod");
        proto_event_add_tag(ev, "app:checkout");
    }
    return 0;
}

/* Encodes ev in the publisher's spool framing: key length byte, key hash, event JSON.
 * Returns 0 with the frame length in *len, or the encoder's error. */
static int sb_frame(const struct proto_event *ev, unsigned char *buf, size_t cap, size_t *len)
{
    size_t keylen = strnlen(ev->key_hash, SB_KEY_MAX_BYTES);
    size_t jlen = 0;
    int rc;

    buf[0] = (unsigned char)keylen;
    memcpy(buf + 1, ev->key_hash, keylen);
    rc = proto_event_encode(ev, (char *)buf + 1 + keylen, cap - 1 - keylen, &jlen);
    if (rc != 0)
        return rc;
    *len = 1 + keylen + jlen;
    return 0;
}

/* ---------------------------------------------------------------------------- runs */

static void sb_sleep_until_ns(uint64_t t_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000ull),
                          .tv_nsec = (long)(t_ns % 1000000000ull)};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static void *sb_thread_main(void *arg)
{
    struct sb_thread *t = arg;
    struct sb_run *run = t->run;
    unsigned char frame[SB_FRAME_MAX_BYTES];
    uint64_t t0, deadline, next;
    uint32_t ev_i = t->index * 37u;

    while (atomic_load(&run->go) == 0)
        tg_sleep_ms(1);
    if (atomic_load(&run->go) < 0)
        return NULL;
    t0 = tg_now_mono_ns();
    deadline = t0 + run->duration_ns;
    next = t0;
    while (t->n < run->per_thread_max) {
        uint32_t k = ev_i % SB_EVENTS;
        const struct proto_event *ev = &run->in->events[k];
        uint64_t a, b;
        size_t len = 0;
        int rc;

        if (run->interval_ns > 0) {
            next += run->interval_ns;
            if (next >= deadline)
                break;
            sb_sleep_until_ns(next);
        }
        a = tg_now_mono_ns();
        if (a >= deadline)
            break;
        if (run->mode == SB_MODE_APPEND) {
            rc = rt_spool_append(run->spool, run->in->frames[k], run->in->frame_len[k],
                                 tg_now_epoch_ms(), NULL);
        } else if (run->mode == SB_MODE_SPOOL) {
            rc = sb_frame(ev, frame, sizeof(frame), &len);
            if (rc == 0)
                rc = rt_spool_append(run->spool, frame, len, tg_now_epoch_ms(), NULL);
        } else {
            rc = rt_publisher_submit(run->pub, ev);
        }
        b = tg_now_mono_ns();
        if (rc != 0) {
            int zero = 0;
            atomic_compare_exchange_strong(&run->first_error, &zero, rc);
            break;
        }
        t->lat_ns[t->n++] = b - a;
        ev_i++;
    }
    return NULL;
}

static int sb_cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

    return a < b ? -1 : a > b;
}

static int sb_cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;

    return a < b ? -1 : a > b;
}

/* Value at quantile q of n sorted values (nearest rank). */
static double sb_quantile_us(const uint64_t *sorted, size_t n, double q)
{
    size_t rank;

    if (n == 0)
        return 0.0;
    rank = (size_t)(q * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)sorted[rank - 1] / 1000.0;
}

/* Removes the files of a flat spool directory and the directory itself. */
static void sb_rmdir_flat(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[SB_PATH_MAX + 300];

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* Reads one counter from the publisher's metrics text; -1 when absent. */
static int64_t sb_pub_counter(struct rt_publisher *pub, struct tg_buf *b, const char *name)
{
    const char *p;
    size_t nlen = strlen(name);

    tg_buf_reset(b);
    rt_publisher_write_metrics(pub, b);
    p = b->data;
    while (p != NULL && *p != '\0') {
        if (strncmp(p, name, nlen) == 0 && p[nlen] == ' ')
            return strtoll(p + nlen + 1, NULL, 10);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

/* Submits n events and waits until Kafka acknowledged every event submitted so far. */
static int sb_pub_warm(struct rt_publisher *pub, struct tg_buf *mb, const struct sb_input *in,
                       uint32_t n)
{
    uint64_t deadline = tg_now_mono_ms() + SB_DELIVERY_WAIT_MS;
    int64_t appended, acked;
    int rc;

    for (uint32_t i = 0; i < n; i++) {
        rc = rt_publisher_submit(pub, &in->events[i % SB_EVENTS]);
        if (rc != 0)
            return rc;
    }
    appended = sb_pub_counter(pub, mb, "tollgate_router_events_appended_total");
    for (;;) {
        acked = sb_pub_counter(pub, mb, "tollgate_router_events_acked_total");
        if (appended > 0 && acked >= appended)
            return 0;
        if (tg_now_mono_ms() >= deadline) {
            fprintf(stderr,
                    "spool_bench: only %" PRId64 " of %" PRId64
                    " warm-up events acknowledged by Kafka after %u ms\n",
                    acked, appended, SB_DELIVERY_WAIT_MS);
            return TG_ETIMEOUT;
        }
        tg_sleep_ms(20);
    }
}

/* One run of a configuration. Opens a fresh spool (or publisher), runs the threads, fills fig,
 * removes the spool. Returns 0 or a tg_err (functional failure). */
static int sb_run_once(const struct sb_opts *o, const struct sb_row *row, const char *brokers,
                       const struct sb_input *in, uint32_t seq, struct sb_figures *fig)
{
    struct sb_run run;
    struct sb_thread th[SB_THREADS_MAX];
    char dir[SB_PATH_MAX + 32];
    char err[256];
    uint64_t *all = NULL;
    struct tg_buf mb = {0};
    uint64_t total = 0, t0, t1;
    int64_t acked0 = 0, acked1 = 0;
    uint32_t started = 0;
    int rc = 0;

    memset(&run, 0, sizeof(run));
    memset(th, 0, sizeof(th));
    memset(fig, 0, sizeof(*fig));
    snprintf(dir, sizeof(dir), "%s/run-%u", o->dir, seq);
    run.mode = row->mode;
    run.in = in;
    atomic_init(&run.first_error, 0);
    atomic_init(&run.go, 0);
    if (row->paced) {
        run.duration_ns = (uint64_t)(o->paced_seconds * 1e9);
        run.interval_ns = 1000000000ull / o->rate;
        run.per_thread_max = (uint64_t)(o->paced_seconds * o->rate) + 1;
    } else {
        run.duration_ns = (uint64_t)(o->seconds * 1e9);
        run.per_thread_max = o->max_appends / row->threads;
    }
    if (tg_buf_init(&mb, SB_METRICS_BYTES) != 0) {
        rc = TG_ENOMEM;
        goto out;
    }
    if (row->mode != SB_MODE_PUBLISHER) {
        struct rt_spool_config sc = {.dir = dir,
                                     .max_bytes = SB_SPOOL_MAX_BYTES,
                                     .segment_bytes = SB_SEGMENT_BYTES,
                                     .fsync_interval_ms = 0};
        struct rt_spool_recovery rec;

        run.spool = rt_spool_open(&sc, &rec, err, sizeof(err));
        if (run.spool == NULL) {
            fprintf(stderr, "spool_bench: spool open failed: %s\n", err);
            rc = TG_EIO;
            goto out;
        }
    } else {
        struct rt_publisher_config pc = {.brokers = brokers,
                                         .topic = SB_TOPIC,
                                         .spool_dir = dir,
                                         .spool_max_bytes = SB_SPOOL_MAX_BYTES,
                                         .spool_segment_bytes = SB_SEGMENT_BYTES,
                                         .reject_when_full = 0,
                                         .fsync_interval_ms = 0};

        run.pub = rt_publisher_create(&pc, err, sizeof(err));
        if (run.pub == NULL) {
            fprintf(stderr, "spool_bench: publisher create failed: %s\n", err);
            rc = TG_EIO;
            goto out;
        }
        /* the publisher is connected and delivering before the measured run starts */
        rc = sb_pub_warm(run.pub, &mb, in, SB_WARMUP_EVENTS);
        if (rc != 0)
            goto out;
    }
    for (uint32_t i = 0; i < row->threads; i++) {
        th[i].lat_ns = malloc(sizeof(uint64_t) * run.per_thread_max);
        if (th[i].lat_ns == NULL) {
            rc = TG_ENOMEM;
            goto out;
        }
    }
    for (uint32_t i = 0; i < row->threads; i++) {
        th[i].run = &run;
        th[i].index = i;
        if (pthread_create(&th[i].tid, NULL, sb_thread_main, &th[i]) != 0) {
            fprintf(stderr, "spool_bench: pthread_create failed\n");
            atomic_store(&run.go, -1);
            for (uint32_t k = 0; k < started; k++)
                pthread_join(th[k].tid, NULL);
            rc = TG_ENOMEM;
            goto out;
        }
        started++;
    }
    if (run.pub != NULL)
        acked0 = sb_pub_counter(run.pub, &mb, "tollgate_router_events_acked_total");
    t0 = tg_now_mono_ns();
    atomic_store(&run.go, 1);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i].tid, NULL);
    t1 = tg_now_mono_ns();
    if (run.pub != NULL)
        acked1 = sb_pub_counter(run.pub, &mb, "tollgate_router_events_acked_total");
    rc = atomic_load(&run.first_error);
    if (rc != 0) {
        fprintf(stderr, "spool_bench: %s failed: %s\n",
                row->mode == SB_MODE_PUBLISHER ? "rt_publisher_submit" : "rt_spool_append",
                tg_strerror(rc));
        goto out;
    }

    for (uint32_t i = 0; i < row->threads; i++)
        total += th[i].n;
    all = malloc(sizeof(uint64_t) * (total > 0 ? total : 1));
    if (all == NULL) {
        rc = TG_ENOMEM;
        goto out;
    }
    total = 0;
    for (uint32_t i = 0; i < row->threads; i++) {
        memcpy(all + total, th[i].lat_ns, sizeof(uint64_t) * th[i].n);
        total += th[i].n;
    }
    if (total == 0) {
        fprintf(stderr, "spool_bench: no append completed in a run\n");
        rc = TG_EIO;
        goto out;
    }
    qsort(all, total, sizeof(uint64_t), sb_cmp_u64);
    fig->appends_per_s = (double)total * 1e9 / (double)(t1 - t0);
    fig->mib_per_s = fig->appends_per_s * in->frame_avg_bytes / (1024.0 * 1024.0);
    fig->p50_us = sb_quantile_us(all, total, 0.50);
    fig->p99_us = sb_quantile_us(all, total, 0.99);
    fig->p999_us = sb_quantile_us(all, total, 0.999);
    if (run.pub != NULL)
        fig->acked_per_s = (double)(acked1 - acked0) * 1e9 / (double)(t1 - t0);

out:
    free(all);
    for (uint32_t i = 0; i < SB_THREADS_MAX; i++)
        free(th[i].lat_ns);
    rt_publisher_destroy(&run.pub);
    rt_spool_close(&run.spool);
    tg_buf_fini(&mb);
    sb_rmdir_flat(dir);
    return rc;
}

/* Runs a configuration o->repeats times; row->fig receives the median of each figure. */
static int sb_run_row(const struct sb_opts *o, struct sb_row *row, const char *brokers,
                      const struct sb_input *in, uint32_t *seq)
{
    struct sb_figures r[SB_REPEATS_MAX];
    double v[SB_REPEATS_MAX];
    uint32_t n = o->repeats;
    int rc;

    for (uint32_t i = 0; i < n; i++) {
        rc = sb_run_once(o, row, brokers, in, (*seq)++, &r[i]);
        if (rc != 0)
            return rc;
    }
#define SB_MEDIAN(field)                                                                           \
    do {                                                                                           \
        for (uint32_t i = 0; i < n; i++)                                                           \
            v[i] = r[i].field;                                                                     \
        qsort(v, n, sizeof(double), sb_cmp_double);                                                \
        row->fig.field = v[n / 2];                                                                 \
    } while (0)
    SB_MEDIAN(appends_per_s);
    SB_MEDIAN(mib_per_s);
    SB_MEDIAN(p50_us);
    SB_MEDIAN(p99_us);
    SB_MEDIAN(p999_us);
    SB_MEDIAN(acked_per_s);
#undef SB_MEDIAN
    fprintf(stderr, "spool_bench: %s threads=%u: %.0f appends/s p50=%.1fus p99=%.1fus\n",
            row->label, row->threads, row->fig.appends_per_s, row->fig.p50_us, row->fig.p99_us);
    return 0;
}

/* ---------------------------------------------------------------------------- devkafka */

/* Runs cmd with bash -c (values reach it through the environment). Returns the exit status or
 * -1. */
static int sb_bash(const char *cmd)
{
    pid_t pid = fork();
    int status = 0;

    if (pid < 0)
        return -1;
    if (pid == 0) {
        execlp("bash", "bash", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Starts a private devkafka through tests/lib/services.sh; fills brokers. Returns 0 or -1. */
static int sb_kafka_start(char *brokers, size_t cap)
{
    static const char start_cmd[] =
        "set -e; . \"$TG_SOURCE_DIR/tests/lib/services.sh\"; tg_services_init \"$SB_STATE_DIR\";"
        " tg_devkafka_start 1 \"" SB_TOPIC ":6\" >&2;"
        " printf '%s\\n' \"$TG_KAFKA_BROKERS\" >\"$SB_STATE_DIR/brokers\"";
    char tmpl[SB_PATH_MAX], path[SB_PATH_MAX + 16];
    const char *tmp = getenv("TMPDIR");
    FILE *f;

    snprintf(tmpl, sizeof(tmpl), "%s/tollgate-spool-bench-kafka.XXXXXX", tmp ? tmp : "/tmp");
    if (mkdtemp(tmpl) == NULL)
        return -1;
    snprintf(sb_state_dir, sizeof(sb_state_dir), "%s", tmpl);
    setenv("SB_STATE_DIR", sb_state_dir, 1);
    if (sb_bash(start_cmd) != 0) {
        fprintf(stderr, "spool_bench: could not start devkafka through services.sh\n");
        return -1;
    }
    snprintf(path, sizeof(path), "%s/brokers", sb_state_dir);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    if (fgets(brokers, (int)cap, f) == NULL) {
        fclose(f);
        return -1;
    }
    fclose(f);
    brokers[strcspn(brokers, "\r\n")] = '\0';
    return brokers[0] != '\0' ? 0 : -1;
}

static void sb_kafka_stop(void)
{
    static const char stop_cmd[] =
        "export TG_STATE_DIR=\"$SB_STATE_DIR\"; . \"$TG_SOURCE_DIR/tests/lib/services.sh\";"
        " tg_services_stop_all; rm -rf \"$SB_STATE_DIR\"";

    if (sb_state_dir[0] == '\0')
        return;
    setenv("SB_STATE_DIR", sb_state_dir, 1);
    sb_bash(stop_cmd);
    sb_state_dir[0] = '\0';
}

/* Creates the bench topic on the shared broker, Apache Kafka or devkafka (TG_KAFKA_KIND); an
 * existing topic is fine. */
static void sb_kafka_topic(void)
{
    static const char topic_cmd[] = ". \"$TG_SOURCE_DIR/tests/lib/services.sh\";"
                                    " tg_kafka_topic " SB_TOPIC " 6 >/dev/null 2>&1 || true";

    sb_bash(topic_cmd);
}

/* ---------------------------------------------------------------------------- main */

static void sb_usage(FILE *f)
{
    fprintf(f, "usage: spool_bench [--seconds S] [--max-appends N] [--repeats N] [--rate R]\n"
               "                   [--paced-seconds S] [--dir DIR] [--json FILE]\n"
               "  --seconds S        length of a full-speed run (default 1)\n"
               "  --max-appends N    appends per run at most, all threads (default 150000)\n"
               "  --repeats N        runs per configuration, median reported (default 3)\n"
               "  --rate R           paced runs: appends per second, one thread (default 2000)\n"
               "  --paced-seconds S  length of a paced run (default 3)\n"
               "  --dir DIR          where spool directories are made (default TMPDIR or /tmp)\n"
               "  --json FILE        write the headline figures as one JSON object\n"
               "Kafka: TG_KAFKA_BROKERS (tests/lib/services.sh), or a private devkafka.\n");
}

static void sb_print_table(const struct sb_row *rows, size_t n, const struct sb_opts *o,
                           double avg_bytes, double encode_p50_us, double encode_p99_us)
{
    printf("\n### event spool (%s, %ld cores, median of %u runs; full-speed runs %.1f s, "
           "paced runs %u/s for %.1f s; events average %.0f bytes encoded; encoding alone "
           "p50 %.2f µs, p99 %.2f µs)\n\n",
           "rt_spool_append / rt_publisher_submit", sysconf(_SC_NPROCESSORS_ONLN), o->repeats,
           o->seconds, o->rate, o->paced_seconds, avg_bytes, encode_p50_us, encode_p99_us);
    printf("| scenario | threads | load | appends/s | MiB/s | p50 µs | p99 µs | p999 µs | "
           "acked by Kafka /s |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        const struct sb_row *r = &rows[i];
        char load[32], acked[32];

        if (r->paced)
            snprintf(load, sizeof(load), "%u/s", o->rate);
        else
            snprintf(load, sizeof(load), "full speed");
        if (r->mode == SB_MODE_PUBLISHER)
            snprintf(acked, sizeof(acked), "%.0f", r->fig.acked_per_s);
        else
            snprintf(acked, sizeof(acked), "-");
        printf("| %s | %u | %s | %.0f | %.1f | %.2f | %.2f | %.2f | %s |\n", r->label, r->threads,
               load, r->fig.appends_per_s, r->fig.mib_per_s, r->fig.p50_us, r->fig.p99_us,
               r->fig.p999_us, acked);
    }
    printf("\nappend only: rt_spool_append of an event encoded beforehand; encode + append: "
           "proto_event_encode + rt_spool_append, what a request thread does per event; submit: "
           "rt_publisher_submit (the same work) while the publisher thread reads the spool and "
           "produces to Kafka. Latency is per call (monotonic clock around it), all threads.\n");
    fflush(stdout);
}

static int sb_write_json(const char *path, const struct sb_row *rows, size_t n,
                         const struct sb_opts *o, double avg_bytes)
{
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return -1;
    fprintf(f, "{\"repeats\":%u,\"rate\":%u,\"event_bytes_avg\":%.0f,\"rows\":[", o->repeats,
            o->rate, avg_bytes);
    for (size_t i = 0; i < n; i++) {
        const struct sb_row *r = &rows[i];

        fprintf(f,
                "%s{\"scenario\":\"%s\",\"mode\":\"%s\",\"threads\":%u,\"paced\":%s,"
                "\"appends_per_s\":%.0f,\"mib_per_s\":%.2f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
                "\"p999_us\":%.2f,\"acked_per_s\":%.0f}",
                i ? "," : "", r->label, sb_mode_names[r->mode], r->threads,
                r->paced ? "true" : "false", r->fig.appends_per_s, r->fig.mib_per_s, r->fig.p50_us,
                r->fig.p99_us, r->fig.p999_us, r->fig.acked_per_s);
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"seconds", required_argument, NULL, 's'},
                                             {"max-appends", required_argument, NULL, 'n'},
                                             {"repeats", required_argument, NULL, 'r'},
                                             {"rate", required_argument, NULL, 'R'},
                                             {"paced-seconds", required_argument, NULL, 'p'},
                                             {"dir", required_argument, NULL, 'd'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct sb_opts o = {.seconds = 1.0,
                        .max_appends = 150000,
                        .repeats = 3,
                        .rate = 2000,
                        .paced_seconds = 3.0,
                        .json_path = NULL,
                        .dir = NULL};
    struct sb_row rows[] = {
        {.label = "append only", .mode = SB_MODE_APPEND, .threads = 1, .paced = 0},
        {.label = "append only", .mode = SB_MODE_APPEND, .threads = 2, .paced = 0},
        {.label = "append only", .mode = SB_MODE_APPEND, .threads = 4, .paced = 0},
        {.label = "encode + append", .mode = SB_MODE_SPOOL, .threads = 1, .paced = 0},
        {.label = "encode + append", .mode = SB_MODE_SPOOL, .threads = 2, .paced = 0},
        {.label = "encode + append", .mode = SB_MODE_SPOOL, .threads = 4, .paced = 0},
        {.label = "submit, publisher on", .mode = SB_MODE_PUBLISHER, .threads = 1, .paced = 0},
        {.label = "submit, publisher on", .mode = SB_MODE_PUBLISHER, .threads = 2, .paced = 0},
        {.label = "submit, publisher on", .mode = SB_MODE_PUBLISHER, .threads = 4, .paced = 0},
        {.label = "encode + append", .mode = SB_MODE_SPOOL, .threads = 1, .paced = 1},
        {.label = "submit, publisher on", .mode = SB_MODE_PUBLISHER, .threads = 1, .paced = 1},
    };
    struct sb_input *in = NULL;
    unsigned char frame[SB_FRAME_MAX_BYTES];
    uint64_t *enc_ns = NULL;
    char dir[SB_PATH_MAX], brokers[SB_PATH_MAX];
    const char *env;
    double encode_p50_us = 0.0, encode_p99_us = 0.0;
    uint32_t seq = 0;
    int c, made_dir = 0, rc = 1;

    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            o.seconds = atof(optarg);
            break;
        case 'n':
            o.max_appends = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'r':
            o.repeats = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'R':
            o.rate = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'p':
            o.paced_seconds = atof(optarg);
            break;
        case 'd':
            o.dir = optarg;
            break;
        case 'j':
            o.json_path = optarg;
            break;
        case 'h':
            sb_usage(stdout);
            return 0;
        default:
            sb_usage(stderr);
            return 2;
        }
    }
    if (o.seconds <= 0.0 || o.seconds > 60.0 || o.max_appends < SB_THREADS_MAX ||
        o.max_appends > 10000000 || o.repeats < 1 || o.repeats > SB_REPEATS_MAX || o.rate < 1 ||
        o.rate > 1000000 || o.paced_seconds <= 0.0 || o.paced_seconds > 60.0) {
        sb_usage(stderr);
        return 2;
    }
    tg_log_init("spool-bench");
    if (getenv("TOLLGATE_LOG_LEVEL") == NULL)
        tg_log_set_level(TG_LOG_WARN);
    setenv("TG_SOURCE_DIR", SB_DEFAULT_SOURCE_DIR, 0);
    setenv("TG_BUILD_DIR", SB_DEFAULT_BUILD_DIR, 0);

    env = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/tollgate-spool-bench.XXXXXX",
             o.dir ? o.dir : (env ? env : "/tmp"));
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "spool_bench: cannot create a directory under %s: %s\n",
                o.dir ? o.dir : (env ? env : "/tmp"), strerror(errno));
        goto out;
    }
    made_dir = 1;
    o.dir = dir;

    in = calloc(1, sizeof(*in));
    if (in == NULL)
        goto out;
    for (uint32_t i = 0; i < SB_EVENTS; i++) {
        size_t len = 0, keylen;

        if (sb_event_make(&in->events[i], i) != 0) {
            fprintf(stderr, "spool_bench: could not make event %u\n", i);
            goto out;
        }
        if (sb_frame(&in->events[i], in->frames[i], sizeof(in->frames[i]), &len) != 0) {
            fprintf(stderr, "spool_bench: event %u does not encode\n", i);
            goto out;
        }
        in->frame_len[i] = len;
        keylen = strnlen(in->events[i].key_hash, SB_KEY_MAX_BYTES);
        if (len - 1 - keylen > TG_EVENT_MAX_BYTES) {
            fprintf(stderr, "spool_bench: event %u encodes to %zu bytes\n", i, len - 1 - keylen);
            goto out;
        }
        in->json_avg_bytes += (double)(len - 1 - keylen) / SB_EVENTS;
        in->frame_avg_bytes += (double)len / SB_EVENTS;
    }
    enc_ns = malloc(sizeof(uint64_t) * SB_ENCODE_LOOPS);
    if (enc_ns == NULL)
        goto out;
    for (uint32_t i = 0; i < SB_ENCODE_LOOPS; i++) {
        size_t len = 0;
        uint64_t a = tg_now_mono_ns();

        if (sb_frame(&in->events[i % SB_EVENTS], frame, sizeof(frame), &len) != 0)
            goto out;
        enc_ns[i] = tg_now_mono_ns() - a;
    }
    qsort(enc_ns, SB_ENCODE_LOOPS, sizeof(uint64_t), sb_cmp_u64);
    encode_p50_us = sb_quantile_us(enc_ns, SB_ENCODE_LOOPS, 0.5);
    encode_p99_us = sb_quantile_us(enc_ns, SB_ENCODE_LOOPS, 0.99);

    env = getenv("TG_KAFKA_BROKERS");
    if (env != NULL && env[0] != '\0') {
        snprintf(brokers, sizeof(brokers), "%s", env);
        sb_kafka_topic();
    } else if (sb_kafka_start(brokers, sizeof(brokers)) != 0) {
        goto out;
    }
    fprintf(stderr, "spool_bench: kafka %s, spool under %s\n", brokers, dir);

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int r = sb_run_row(&o, &rows[i], brokers, in, &seq);

        if (r != 0) {
            fprintf(stderr, "spool_bench: FAIL %s threads=%u: %s\n", rows[i].label, rows[i].threads,
                    tg_strerror(r));
            goto out;
        }
    }
    sb_print_table(rows, sizeof(rows) / sizeof(rows[0]), &o, in->json_avg_bytes, encode_p50_us,
                   encode_p99_us);
    if (o.json_path != NULL && sb_write_json(o.json_path, rows, sizeof(rows) / sizeof(rows[0]), &o,
                                             in->json_avg_bytes) != 0) {
        fprintf(stderr, "spool_bench: cannot write %s\n", o.json_path);
        goto out;
    }
    rc = 0;

out:
    sb_kafka_stop();
    free(enc_ns);
    free(in);
    if (made_dir)
        rmdir(dir);
    return rc;
}
