/* router-svc: the Tollgate LLM gateway.
 *
 *   router-svc --config FILE          serve (FILE may also come from TOLLGATE_CONFIG)
 *   router-svc --config FILE --check  validate, print warnings, exit 0; or print
 *                                     FILE:LINE: key: problem and exit 2
 *   router-svc --providers            the provider table, one line each: prefix, default base,
 *                                     key variables, base variables (tab-separated)
 *
 * SIGTERM/SIGINT: readiness turns false, new connections are refused, requests in flight get
 * up to TOLLGATE_SHUTDOWN_GRACE_S seconds (default 25) to finish, then whatever is left is
 * cancelled and the process exits 0. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "control.h"
#include "creds.h"
#include "providers/provider.h"
#include "health.h"
#include "http_front.h"
#include "key_api.h"
#include "keys.h"
#include "limsync.h"
#include "mask.h"
#include "prices.h"
#include "publisher.h"
#include "resolver.h"
#include "router.h"
#include "upstream.h"
#include "rt_metrics.h"
#include "tg_kafka_topics.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_period.h"
#include "tg_time.h"

#define RT_SHUTDOWN_GRACE_S_DEFAULT 25
#define RT_CANCEL_WAIT_MS 3000
#define RT_DRAIN_LINGER_MS 500 /* quiet time with nothing in flight before stopping */
#define RT_MASK_CONFIG_SECRETS_MAX 1024
#define RT_PUBLISHER_FLUSH_S_DEFAULT 10 /* TOLLGATE_FLUSH_DEADLINE_S: producer flush at exit */
#define RT_DEP_POLL_MS 1000             /* dependency states are refreshed this often */
#define RT_IDLE_CPU_US 20000u /* under this much CPU in one poll: quiet (trim_when_quiet) */
#define RT_MMAP_THRESHOLD_BYTES (512 * 1024)  /* kept fixed; see limit_malloc_arenas */
#define RT_TRIM_THRESHOLD_BYTES (1024 * 1024) /* an arena keeps that much free at its top */

static struct rt_config_diag diag; /* ~17 KB: static, not on the stack */

struct hook_state {
    struct rt_metrics *metrics;
};

/* Without Kafka and a spool nothing is published: the completion hook logs one debug line. */
static void on_complete_log(const struct proto_event *ev, void *ud)
{
    (void)ud;
    TG_DEBUG("msg=request_complete call_id=%s endpoint=%s status=%d model_group=%s "
             "deployment=%s attempts=%d fallbacks=%d prompt_tokens=%" PRId64
             " completion_tokens=%" PRId64 " cost_nusd=%" PRId64 " latency_ms=%" PRId64
             " error_class=%s trace_id=%s",
             ev->call_id, ev->endpoint, ev->status, ev->model_group, ev->deployment_id,
             ev->attempts, ev->fallbacks, ev->prompt_tokens, ev->completion_tokens, ev->cost_nusd,
             ev->latency_ms, ev->error_class, ev->trace_id);
}

/* The completion hook: the event goes to the spool (one write(); Kafka is never waited on). */
static void on_complete_publish(const struct proto_event *ev, void *ud)
{
    rt_publisher_submit(ud, ev);
}

static int batch_begin_publisher(void *ud)
{
    return rt_publisher_batch_begin(ud);
}

/* full_policy reject: 503 before routing while the spool is full. */
static int admit_publisher(void *ud)
{
    return rt_publisher_admit(ud);
}

struct extra_metrics {
    struct rt_publisher *pub;
    struct rt_control *ctl;
    struct rt_creds *creds;
    struct rt_limsync *limsync;
};

static void write_extra_metrics(struct tg_buf *b, void *ud)
{
    struct extra_metrics *x = ud;

    if (x->pub != NULL)
        rt_publisher_write_metrics(x->pub, b);
    if (x->ctl != NULL)
        rt_control_write_metrics(x->ctl, b);
    if (x->creds != NULL && rt_creds_slots(x->creds) > 0) {
        struct rt_creds_stats st;

        rt_creds_stats(x->creds, &st);
        tg_prom_counter(b, "tollgate_router_tokens_fetched_total",
                        "Provider tokens obtained from token endpoints (refreshed off the request "
                        "path)",
                        st.fetched);
        tg_prom_counter(b, "tollgate_router_token_fetch_failures_total",
                        "Token endpoint requests that failed", st.failed);
        tg_prom_counter(b, "tollgate_router_token_missing_total",
                        "Attempts that found no valid token for their deployment (answered 503 "
                        "or retried elsewhere)",
                        st.missing);
    }
    if (x->limsync != NULL) {
        struct rt_limsync_stats ls;

        rt_limsync_get_stats(x->limsync, &ls);
        tg_prom_counter(b, "tollgate_router_limit_sync_rounds_total",
                        "Rounds that exchanged limiter counts with the other replicas (Redis)",
                        ls.rounds);
        tg_prom_counter(b, "tollgate_router_limit_sync_failures_total",
                        "Limit sync rounds or connects that failed (Redis down, slow or "
                        "answering otherwise)",
                        ls.failures);
        tg_prom_gauge(b, "tollgate_router_limit_sync_replicas_seen",
                      "Live router replicas seen at the last limit sync (>= 1)",
                      (double)ls.replicas_seen);
        tg_prom_gauge(b, "tollgate_router_limit_sync_fallback",
                      "1 while no fresh limit sync: each limit divided by the replicas seen",
                      (double)ls.fallback);
    }
}

/* Raise RLIMIT_NOFILE to need (the hard limit too, when the process may), or explain why the
 * limits of the config cannot be served. Returns 0 or -1 with err. */
static int fit_fd_limit(uint64_t need, char *err, size_t errlen)
{
    struct rlimit rl;
    rlim_t before;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        snprintf(err, errlen, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        return -1;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_cur == RLIM_INFINITY)
        return 0;
    before = rl.rlim_cur;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
        rl.rlim_cur = (rlim_t)need;
    } else {
        rl.rlim_cur = (rlim_t)need;
        rl.rlim_max = (rlim_t)need; /* needs CAP_SYS_RESOURCE */
    }
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        struct rlimit now;

        getrlimit(RLIMIT_NOFILE, &now);
        snprintf(err, errlen,
                 "limits.max_connections and limits.max_in_flight need %llu file descriptors, "
                 "but RLIMIT_NOFILE allows %llu (hard limit %llu) and cannot be raised: raise "
                 "the limit (ulimit -n, the container runtime's nofile) or lower the limits",
                 (unsigned long long)need, (unsigned long long)now.rlim_cur,
                 (unsigned long long)now.rlim_max);
        return -1;
    }
    TG_INFO("msg=fd_limit_raised from=%llu to=%llu", (unsigned long long)before,
            (unsigned long long)need);
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: router-svc --config FILE [--check]\n"
                 "       router-svc --config FILE --create-topics [--partitions N]"
                 " [--replication-factor N]\n"
                 "       router-svc --providers\n"
                 "  FILE may also be given in TOLLGATE_CONFIG\n");
}

/* Start-up topic check result -> the "topics" dependency (reported, never required). */
struct topics_dep {
    struct rt_health *health;
    int idx;
};

static void on_topics(void *ud, int rc, const char *report, const char *problem)
{
    struct topics_dep *d = ud;

    (void)report;
    rt_health_dep_set(d->health, d->idx, rc == 0 && problem[0] == '\0' ? RT_DEP_UP : RT_DEP_DOWN);
    rt_health_dep_reason(d->health, d->idx, problem);
}

/* The provider table on stdout: prefix, default base ("-" when none), key variables, base
 * variables ("-" when none), tab-separated. */
static void print_providers(void)
{
    for (size_t i = 0; i < rt_provider_count(); i++) {
        const struct rt_provider *p = rt_provider_at(i);
        const char *const *lists[2] = {p->key_env, p->base_env};

        printf("%s\t%s", p->name, p->default_base != NULL ? p->default_base : "-");
        for (int l = 0; l < 2; l++) {
            printf("\t");
            if (lists[l] == NULL || lists[l][0] == NULL)
                printf("-");
            for (size_t j = 0; lists[l] != NULL && lists[l][j] != NULL; j++)
                printf("%s%s", j > 0 ? "," : "", lists[l][j]);
        }
        printf("\n");
    }
}

static int env_seconds(const char *name, int dflt)
{
    const char *s = getenv(name);
    long v;

    if (s == NULL || *s == '\0')
        return dflt;
    v = strtol(s, NULL, 10);
    if (v < 0 || v > 3600)
        return dflt;
    return (int)v;
}

/* --check: where each deployment's prices come from, every unpriced one named. */
static void print_prices(const struct rt_config *cfg)
{
    uint32_t unpriced = 0;

    printf("prices: built-in map of %s (%zu models)%s%s\n", rt_prices_builtin_date(),
           rt_prices_count(rt_prices_builtin()),
           cfg->price_map[0] != '\0' ? ", tollgate.price_map " : "", cfg->price_map);
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        const struct rt_deployment_conf *d = &cfg->deployments[i];

        if (d->priced) {
            printf("  %s (%s/%s): %s\n", d->id, d->provider, d->model, d->price_source);
        } else {
            printf("  %s (%s/%s): NO PRICE, its calls cost 0\n", d->id, d->provider, d->model);
            unpriced++;
        }
    }
    if (unpriced > 0)
        printf("prices: %u of %u deployments without a price\n", unpriced, cfg->n_deployments);
}

/* glibc gives a thread that meets a locked arena a new one, up to 8 per core. The event loops
 * keep theirs; but librdkafka's broker threads, busy only when a backlog goes out after a Kafka
 * outage, then open arenas of their own and keep their pages: a few MB of RSS more after each
 * outage (chaos c10: 26 -> 31 MB). One arena per event loop and two for every other thread
 * bound that (26 -> 28 MB). MALLOC_ARENA_MAX in the environment still decides when given. */
static void limit_malloc_arenas(uint32_t loops)
{
    if (getenv("MALLOC_ARENA_MAX") == NULL)
        mallopt(M_ARENA_MAX, (int)(loops > 0 ? loops : 1) + 2);
    /* glibc raises its mmap threshold to the size of each mmapped block freed (up to 32 MB):
     * once the control topic's replay set (MBs) is freed, every later buffer up to that size
     * lands in the heap, where a live neighbour pins it after its free. A fixed threshold
     * keeps large buffers mapped on their own, given back whole when freed (idle RSS with
     * TLS providers pooled: 29.8 -> 25.5 MB). 512 KiB, not glibc's initial 128 KiB: the
     * producer's batches (RT_PUBLISHER_KAFKA_BATCH_BYTES, a message set and its LZ4 copy) come
     * from the heap, used again, instead of being mapped and faulted in for each batch
     * (tests/bench/router_bench.sh, 300,000-byte batches, side by side with 128 KiB: the broker
     * thread's page faults 14.6 -> 6.1 per 1,000 requests, its CPU 1.3 -> 0.9 µs a request;
     * idle RSS 22.7-23.6 MB in six runs). A fixed mmap threshold also leaves the trim
     * threshold at 128 KiB: an arena whose free top passed that gave it back at once, and the
     * batch buffers of the events' producer (RT_PUBLISHER_KAFKA_BATCH_BYTES, many a second) were
     * faulted in again page by page for every batch: 3.5 µs of CPU per request on its broker
     * thread, 1.0 µs with a trim threshold of 1 MiB. (256 KiB is not enough: the faults come
     * back; 8 MiB keeps what the backlog after a Kafka outage used: chaos c10's RSS 17 -> 22
     * MB, 17 -> 17 with 1 MiB.) What a burst leaves free goes back to the system once the
     * process is quiet (trim_when_quiet), and once a Kafka backlog is acknowledged, busy or not
     * (publisher.c). MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ still decide when
     * given. */
    if (getenv("MALLOC_TRIM_THRESHOLD_") == NULL)
        mallopt(M_TRIM_THRESHOLD, RT_TRIM_THRESHOLD_BYTES);
    if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL)
        mallopt(M_MMAP_THRESHOLD, RT_MMAP_THRESHOLD_BYTES);
}

/* The built-in client sends a provider's requests through libcurl until the resolver thread
 * has its name; asked now, the names are known before the first requests (unless a proxy from
 * the environment sends every provider through libcurl anyway). */
static void prefetch_provider_names(const struct rt_config *cfg)
{
    static const char *const proxies[] = {"http_proxy",  "HTTP_PROXY", "https_proxy",
                                          "HTTPS_PROXY", "all_proxy",  "ALL_PROXY"};

    if (!cfg->upstream_native)
        return;
    for (size_t i = 0; i < sizeof(proxies) / sizeof(proxies[0]); i++) {
        if (getenv(proxies[i]) != NULL)
            return;
    }
    for (uint32_t i = 0; i < cfg->n_deployments; i++)
        rt_resolver_prefetch_url(cfg->deployments[i].api_base);
}

/* CPU time the process has used, in µs. */
static uint64_t cpu_used_us(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* After busy time, once the process has gone quiet (under RT_IDLE_CPU_US of CPU in one
 * RT_DEP_POLL_MS), the memory freed since goes back to the system: the buffers of a burst's
 * connections and transfers would otherwise stay resident in the heap (idle RSS with TLS
 * providers pooled 3.4 MB lower). Once per quiet spell; main thread. */
static void trim_when_quiet(uint64_t *last_cpu_us, int *busy)
{
    uint64_t now = cpu_used_us();
    uint64_t used = now - *last_cpu_us;

    *last_cpu_us = now;
    if (used >= RT_IDLE_CPU_US) {
        *busy = 1;
    } else if (*busy) {
        malloc_trim(0);
        *busy = 0;
    }
}

int main(int argc, char **argv)
{
    const char *path = getenv("TOLLGATE_CONFIG");
    int check = 0;
    int rc = 1;
    char err[512];
    struct rt_config *cfg = NULL;
    struct rt_mask *mask = NULL;
    struct rt_keys *keys = NULL;
    struct rt_teams *teams = NULL;
    struct rt_router *router = NULL;
    struct rt_metrics *metrics = NULL;
    struct rt_health *health = NULL;
    struct rt_front *front = NULL;
    struct rt_publisher *pub = NULL;
    struct rt_control *ctl = NULL;
    struct rt_key_api *key_api = NULL;
    struct extra_metrics extra = {NULL, NULL, NULL, NULL};
    struct rt_limsync *limsync = NULL;
    struct rt_creds *creds = NULL;
    int dep_kafka = -1, dep_keys = -1;
    struct tg_topics_args topics_args;
    int taken;
    struct tg_topics_watch *topics = NULL;
    struct topics_dep tdep = {NULL, -1};
    const char **secrets = NULL;
    size_t nsecrets;
    sigset_t set;
    int sig = 0;
    uint64_t cpu_us = 0;
    int busy = 0;

    tg_log_init("router-svc");
    tg_topics_args_init(&topics_args);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else if ((taken = tg_topics_args_take(&topics_args, argc, argv, &i)) != 0) {
            if (taken < 0) {
                usage(stderr);
                return 2;
            }
        } else if (strcmp(argv[i], "--providers") == 0) {
            print_providers();
            return 0;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (path == NULL || *path == '\0') {
        usage(stderr);
        return 2;
    }
    if (check)
        tg_log_set_level(TG_LOG_ERROR); /* the warnings are printed below, once */
    cfg = rt_config_load_file(path, &diag);
    if (cfg != NULL && rt_config_check_auth(cfg, diag.error, sizeof(diag.error)) != 0)
        rt_config_destroy(&cfg);
    if (check) {
        for (uint32_t i = 0; i < diag.n_warnings; i++)
            fprintf(stderr, "%s\n", diag.warnings[i]);
        if (diag.warnings_dropped > 0)
            fprintf(stderr, "%s: %u more warnings not shown\n", path, diag.warnings_dropped);
        if (cfg == NULL) {
            fprintf(stderr, "%s\n", diag.error);
            return 2;
        }
        printf("%s: ok (%u deployments, %u static keys)\n", path, cfg->n_deployments, cfg->n_keys);
        print_prices(cfg);
        rt_config_destroy(&cfg);
        return 0;
    }
    if (cfg == NULL) {
        fprintf(stderr, "%s\n", diag.error);
        return 2;
    }
    limit_malloc_arenas(cfg->threads);
    if (topics_args.create) {
        struct tg_topic_want want[2];
        size_t n = tg_kafka_topics_tollgate(cfg->events_topic, cfg->control_topic,
                                                topics_args.partitions,
                                                topics_args.replication, want);

        rc = tg_kafka_topics_run_create(cfg->kafka_brokers, &cfg->kafka_opts, want, n,
                                        TG_TOPICS_CREATE_TIMEOUT_MS, stdout);
        rt_config_destroy(&cfg);
        return rc;
    }

    /* the budget time zone, process-wide, before any thread starts (checked at load) */
    if (tg_period_set_tz(cfg->timezone, err, sizeof(err)) != 0) {
        fprintf(stderr, "router-svc: litellm_settings.timezone: %s\n", err);
        rt_config_destroy(&cfg);
        return 2;
    }
    if (fit_fd_limit(rt_front_fds_needed(cfg), err, sizeof(err)) != 0) {
        TG_ERROR("msg=start_failed part=fd_limit reason=\"%s\"", err);
        fprintf(stderr, "router-svc: %s\n", err);
        rt_config_destroy(&cfg);
        return 1;
    }

    /* Signals are taken by sigwait in main; every thread created below inherits the mask. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (rt_upstream_global_init() != 0) {
        TG_ERROR("msg=start_failed part=upstream reason=\"libcurl initialisation failed\"");
        goto out;
    }

    secrets = calloc(RT_MASK_CONFIG_SECRETS_MAX, sizeof(*secrets));
    if (secrets == NULL)
        goto out;
    nsecrets = rt_config_secrets(cfg, secrets, RT_MASK_CONFIG_SECRETS_MAX);
    if (nsecrets > RT_MASK_CONFIG_SECRETS_MAX)
        nsecrets = RT_MASK_CONFIG_SECRETS_MAX;
    mask = rt_mask_create(secrets, nsecrets, err, sizeof(err));
    if (mask == NULL) {
        TG_ERROR("msg=start_failed part=mask reason=\"%s\"", err);
        goto out;
    }
    keys = rt_keys_create(cfg->keys, cfg->n_keys, cfg->max_keys, err, sizeof(err));
    if (keys == NULL) {
        TG_ERROR("msg=start_failed part=keys reason=\"%s\"", err);
        goto out;
    }
    teams = rt_teams_create(cfg->max_teams, err, sizeof(err));
    if (teams == NULL) {
        TG_ERROR("msg=start_failed part=teams reason=\"%s\"", err);
        goto out;
    }
    router = rt_router_create(cfg, mask, err, sizeof(err));
    if (router == NULL) {
        TG_ERROR("msg=start_failed part=router reason=\"%s\"", err);
        goto out;
    }
    rt_router_set_teams(router, teams);
    /* Limits across replicas: the counts exchanged through Redis off the request path; Redis
     * need not be up (the limiter divides the limits meanwhile), and readiness ignores it. */
    if (cfg->redis.enabled) {
        limsync = rt_limsync_start(router, &cfg->redis, err, sizeof(err));
        if (limsync == NULL) {
            TG_ERROR("msg=start_failed part=limit_sync reason=\"%s\"", err);
            goto out;
        }
        TG_INFO("msg=limit_sync redis=%s:%d tls=%d interval_ms=%u replica=%s", cfg->redis.host,
                cfg->redis.port, cfg->redis.tls, cfg->redis.sync_interval_ms,
                rt_limsync_replica_id(limsync));
    }
    metrics = rt_metrics_create(cfg);
    health = rt_health_create();
    if (metrics == NULL || health == NULL) {
        TG_ERROR("msg=start_failed reason=out_of_memory");
        goto out;
    }
    /* Keys from the control topic (and the local snapshot while Kafka is away). */
    {
        char snapshot[RT_PATH_CAP + 32] = "", tsnapshot[RT_PATH_CAP + 32] = "";
        struct rt_control_config cc;

        if (cfg->spool_dir[0] != '\0') {
            snprintf(snapshot, sizeof(snapshot), "%s/keys.snapshot", cfg->spool_dir);
            snprintf(tsnapshot, sizeof(tsnapshot), "%s/teams.snapshot", cfg->spool_dir);
        }
        memset(&cc, 0, sizeof(cc));
        cc.brokers = cfg->kafka_brokers;
        cc.topic = cfg->control_topic;
        cc.kafka_opts = &cfg->kafka_opts;
        cc.snapshot_path = snapshot;
        cc.teams_snapshot_path = tsnapshot;
        cc.cfg = cfg;
        cc.teams = teams;
        ctl = rt_control_create(&cc, keys, err, sizeof(err));
        if (ctl == NULL) {
            TG_ERROR("msg=start_failed part=control reason=\"%s\"", err);
            goto out;
        }
        if (cfg->master_key[0] != '\0') {
            struct rt_key_api_config kc = {cfg, keys, ctl, teams};

            key_api = rt_key_api_create(&kc, err, sizeof(err));
            if (key_api == NULL) {
                TG_ERROR("msg=start_failed part=key_api reason=\"%s\"", err);
                goto out;
            }
        }
        dep_keys = rt_health_dep_register(health, "keys", 1);
    }
    /* Spend events: spool + Kafka publisher. */
    if (cfg->kafka_brokers[0] != '\0' && cfg->spool_dir[0] != '\0') {
        struct rt_publisher_config pc;

        memset(&pc, 0, sizeof(pc));
        pc.brokers = cfg->kafka_brokers;
        pc.topic = cfg->events_topic;
        pc.events_per_record = cfg->events_per_record;
        pc.kafka_opts = &cfg->kafka_opts;
        pc.spool_dir = cfg->spool_dir;
        pc.spool_max_bytes = cfg->spool_max_bytes;
        pc.spool_segment_bytes = cfg->spool_segment_bytes;
        pc.reject_when_full = cfg->spool_full_policy == RT_SPOOL_FULL_REJECT;
        pc.fsync_interval_ms =
            cfg->spool_fsync == RT_SPOOL_FSYNC_INTERVAL ? cfg->spool_fsync_interval_ms : 0;
        pub = rt_publisher_create(&pc, err, sizeof(err));
        if (pub == NULL) {
            TG_ERROR("msg=start_failed part=publisher reason=\"%s\"", err);
            goto out;
        }
        dep_kafka = rt_health_dep_register(health, "kafka", 0);
        {
            struct tg_topic_want want[2];
            size_t n = tg_kafka_topics_tollgate(cfg->events_topic, cfg->control_topic,
                                                topics_args.partitions,
                                                topics_args.replication, want);

            tdep.health = health;
            tdep.idx = rt_health_dep_register(health, "topics", 0);
            topics = tg_topics_watch_start(cfg->kafka_brokers, &cfg->kafka_opts, want, n,
                                           on_topics, &tdep, err, sizeof(err));
            if (topics == NULL)
                TG_WARN("msg=\"topic check not started\" reason=\"%s\"", err);
        }
        {
            char kdesc[128];

            /* the Kafka settings' kinds and count, never a value (secrets are among them) */
            TG_INFO("msg=kafka_client %s",
                    tg_kafka_opts_describe(&cfg->kafka_opts, kdesc, sizeof(kdesc)));
        }
    } else {
        TG_WARN("msg=spend_events_disabled reason=\"tollgate.kafka.brokers and "
                "tollgate.spool.dir must both be set to publish spend events\"");
    }
    /* Tokens of the deployments that need one, refreshed off the request path; the first ones
     * are waited for here, once. */
    creds = rt_creds_create(cfg, err, sizeof(err));
    if (creds == NULL || rt_creds_start(creds, RT_CREDS_FIRST_WAIT_MS, err, sizeof(err)) != 0) {
        TG_ERROR("msg=start_failed part=credentials reason=\"%s\"", err);
        goto out;
    }
    extra.pub = pub;
    extra.ctl = ctl;
    extra.creds = creds;
    extra.limsync = limsync;
    rt_metrics_set_writer(metrics, write_extra_metrics, &extra);
    {
        struct rt_front_deps deps;

        memset(&deps, 0, sizeof(deps));
        deps.cfg = cfg;
        deps.keys = keys;
        deps.mask = mask;
        deps.metrics = metrics;
        deps.health = health;
        deps.router = router;
        deps.creds = creds;
        deps.on_complete = pub != NULL ? on_complete_publish : on_complete_log;
        deps.on_complete_ud = pub;
        deps.admit = pub != NULL ? admit_publisher : NULL;
        deps.admit_ud = pub;
        if (pub != NULL) {
            /* one spool write per run of the loop for the run's events */
            deps.batch_begin = batch_begin_publisher;
            deps.batch_pending = rt_publisher_batch_pending;
            deps.batch_flush = rt_publisher_batch_flush;
            deps.batch_end = rt_publisher_batch_end;
            deps.batch_ud = pub;
        }
        deps.key_api = key_api;
        deps.teams = teams;
        prefetch_provider_names(cfg);
        front = rt_front_start(&deps, err, sizeof(err));
        if (front == NULL) {
            TG_ERROR("msg=start_failed part=http reason=\"%s\"", err);
            goto out;
        }
    }
    rt_health_set_ready(health, 1);
    TG_INFO("msg=listening listen=%s port=%u admin_listen=%s admin_port=%u deployments=%u "
            "keys=%u threads=%u",
            cfg->listen, (unsigned)rt_front_port(front),
            cfg->admin_listen[0] != '\0' ? cfg->admin_listen : "-",
            (unsigned)rt_front_admin_port(front), cfg->n_deployments, cfg->n_keys, cfg->threads);

    /* Wait for a signal, refreshing the dependency states readiness reports; memory goes back
     * to the system when the process goes quiet. */
    cpu_us = cpu_used_us();
    busy = 1; /* start-up's own garbage (config, prices, the control replay) */
    for (;;) {
        struct timespec ts = {RT_DEP_POLL_MS / 1000, (RT_DEP_POLL_MS % 1000) * 1000000L};

        if (dep_keys >= 0)
            rt_health_dep_set(health, dep_keys, rt_control_ready(ctl) ? RT_DEP_UP : RT_DEP_DOWN);
        if (dep_kafka >= 0) {
            char why[TG_KAFKA_LASTERR_CAP];

            rt_health_dep_reason(health, dep_kafka,
                                 rt_publisher_kafka_reason(pub, why, sizeof(why)));
            rt_health_dep_set(health, dep_kafka,
                              rt_publisher_kafka_up(pub) ? RT_DEP_UP : RT_DEP_DOWN);
        }
        sig = sigtimedwait(&set, NULL, &ts);
        if (sig > 0)
            break;
        trim_when_quiet(&cpu_us, &busy);
    }
    TG_INFO("msg=shutdown_begin signal=%d in_flight=%lld", sig,
            (long long)rt_front_in_flight(front));
    rt_health_set_shutting_down(health);
    rt_front_quiesce(front);
    {
        uint64_t deadline =
            tg_now_mono_ms() +
            (uint64_t)env_seconds("TOLLGATE_SHUTDOWN_GRACE_S", RT_SHUTDOWN_GRACE_S_DEFAULT) * 1000u;

        uint64_t idle_since = 0;

        /* Until nothing is in flight and no request has come for RT_DRAIN_LINGER_MS: clients
         * on kept-alive connections get their answers with Connection: close meanwhile. */
        while (tg_now_mono_ms() < deadline) {
            if (rt_front_in_flight(front) > 0) {
                idle_since = 0;
            } else if (idle_since == 0) {
                idle_since = tg_now_mono_ms();
            } else if (tg_now_mono_ms() - idle_since >= RT_DRAIN_LINGER_MS) {
                break;
            }
            tg_sleep_ms(20);
        }
    }
    if (rt_front_in_flight(front) > 0)
        TG_WARN("msg=shutdown_grace_expired in_flight=%lld", (long long)rt_front_in_flight(front));
    /* whatever is still waiting on a provider is cancelled; its connection resumes and gets
     * an answer (or its stream ends with an error event) */
    rt_front_cancel_upstream(front);
    {
        uint64_t deadline = tg_now_mono_ms() + RT_CANCEL_WAIT_MS;

        while (rt_front_in_flight(front) > 0 && tg_now_mono_ms() < deadline)
            tg_sleep_ms(10);
    }
    /* Admin requests still waiting on the control topic get their 503 while the front can
     * still answer them. */
    if (ctl != NULL)
        rt_control_stop(ctl);
    rt_front_stop(&front);
    if (pub != NULL) {
        int flush_s = env_seconds("TOLLGATE_FLUSH_DEADLINE_S", RT_PUBLISHER_FLUSH_S_DEFAULT);

        if (rt_publisher_drain(pub, (uint32_t)flush_s * 1000u) != 0)
            TG_WARN("msg=shutdown_flush_incomplete action=left_in_spool_for_next_start");
    }
    TG_INFO("msg=shutdown_done completed=%llu", (unsigned long long)rt_metrics_completed(metrics));
    rc = 0;
out:
    tg_topics_watch_stop(&topics);
    rt_front_stop(&front);
    rt_limsync_stop(&limsync);
    rt_creds_destroy(&creds);
    rt_publisher_destroy(&pub);
    rt_control_destroy(&ctl);
    rt_key_api_destroy(&key_api);
    rt_health_destroy(&health);
    rt_metrics_destroy(&metrics);
    rt_router_destroy(&router);
    rt_keys_destroy(&keys);
    rt_teams_destroy(&teams);
    rt_mask_destroy(&mask);
    free(secrets);
    rt_config_destroy(&cfg);
    rt_upstream_global_fini();
    return rc;
}
