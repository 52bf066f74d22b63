/* devkafka: a standalone development Kafka broker built on librdkafka's mock cluster.
 *
 * For development and tests only. Everything is in memory; each partition keeps about 5 MiB
 * (and at most 100,000 message sets), older data is dropped silently; there is no compaction
 * and nothing survives a restart. Production uses a real Kafka cluster.
 *
 * Threads: main parses options, creates the cluster and then serves the control channel
 * (poll loop) until SIGINT/SIGTERM. The mock cluster runs its own broker thread inside
 * librdkafka; the rd_kafka_mock_* calls made here are thread-safe requests to it. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "dk_bind.h"
#include "tg_log.h"

#define DK_BROKERS_MAX DK_BIND_PORTS_MAX
#define DK_TOPICS_MAX 64
#define DK_TOPIC_NAME_MAX_BYTES 249
#define DK_PARTITIONS_MAX 1024
#define DK_REPLICATION_MAX 3
#define DK_CTL_CLIENTS_MAX 16
#define DK_CTL_LINE_MAX_BYTES 512
#define DK_CTL_REPLY_MAX_BYTES 1024
#define DK_ERRORS_PUSH_MAX 10000
#define DK_RTT_MAX_MS 600000
#define DK_POLL_INTERVAL_MS 200
#define DK_PATH_MAX_BYTES 4096

struct dk_topic {
    char name[DK_TOPIC_NAME_MAX_BYTES + 1];
    int partitions;
};

struct dk_opts {
    int brokers;
    struct dk_topic topics[DK_TOPICS_MAX];
    int topic_cnt;
    uint16_t ports[DK_BROKERS_MAX]; /* fixed listener ports, broker 1 first */
    int port_cnt;
    const char *bootstrap_file; /* borrowed from argv */
    const char *control;        /* "127.0.0.1:PORT", borrowed from argv */
    const char *control_file;   /* borrowed from argv */
};

/* One control connection: a line buffer of DK_CTL_LINE_MAX_BYTES, never grown. */
struct dk_client {
    int fd; /* -1 = free slot */
    size_t len;
    char line[DK_CTL_LINE_MAX_BYTES];
};

struct dk_state {
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mc;
    int brokers;
    int down[DK_BROKERS_MAX + 1]; /* 1 = set down through the control channel; index = id */
    int rtt_ms[DK_BROKERS_MAX + 1];
    int listen_fd;
    struct dk_client clients[DK_CTL_CLIENTS_MAX];
    unsigned long long clients_refused; /* connections over DK_CTL_CLIENTS_MAX */
};

static volatile sig_atomic_t dk_stop;

static void dk_on_signal(int sig)
{
    (void)sig;
    dk_stop = 1;
}

static void dk_usage(FILE *out)
{
    fprintf(
        out,
        "usage: devkafka [options]\n"
        "\n"
        "A Kafka broker for DEVELOPMENT AND TESTS ONLY, built on librdkafka's mock cluster.\n"
        "All data is in memory: each partition retains about 5 MiB (and at most 100,000\n"
        "message sets); older data is dropped silently. No compaction, no persistence,\n"
        "no security. Never use it in production: production uses a real Kafka cluster.\n"
        "\n"
        "options:\n"
        "  --brokers N               number of brokers (1..%d, default 1)\n"
        "  --topic NAME:PARTITIONS   create a topic (repeatable), e.g.\n"
        "                            --topic tollgate.events.v1:6 --topic tollgate.control.v1:1\n"
        "  --ports P1,P2,..          fixed listener ports, one per broker, in broker order\n"
        "                            (default: the kernel picks); choose ports below 32768\n"
        "                            so they never collide with outgoing connections\n"
        "  --bootstrap-file FILE     write the bootstrap list (host:port,..) to FILE once\n"
        "                            ready (atomically); removed on exit\n"
        "  --control 127.0.0.1:PORT  line-based control channel on loopback (PORT 0: any)\n"
        "  --control-file FILE       write the control address to FILE once ready\n"
        "  --help                    this text\n"
        "\n"
        "control commands (one per line; answers \"ok ...\" or \"err ...\"):\n"
        "  ping | status | brokers\n"
        "  down ID|all               broker(s) stop serving; clients see disconnects\n"
        "  up ID|all\n"
        "  rtt ID|all MS             added round-trip time per request\n"
        "  error API_KEY ERR COUNT   the next COUNT requests of API_KEY (number or name:\n"
        "                            Produce, Fetch, Metadata, OffsetCommit, ...) fail with\n"
        "                            ERR (Kafka error code number or name)\n"
        "  clear API_KEY             drop pending injected errors for API_KEY\n"
        "  topic NAME PARTITIONS     create a topic\n"
        "  leader TOPIC PARTITION ID move a partition's leader\n"
        "  quit                      close this control connection\n"
        "\n"
        "SIGINT/SIGTERM stop it cleanly.\n",
        DK_BROKERS_MAX);
}

/* Parse a decimal integer in [lo, hi]. Returns 0 and fills *out, or -1. */
static int dk_parse_int(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    long v;

    if (!s || !*s)
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int dk_topic_add(struct dk_opts *o, const char *name, int partitions, char *err,
                        size_t errlen)
{
    size_t nlen = strlen(name);
    int i;

    if (nlen == 0 || nlen > DK_TOPIC_NAME_MAX_BYTES) {
        snprintf(err, errlen, "topic name must be 1..%d bytes", DK_TOPIC_NAME_MAX_BYTES);
        return -1;
    }
    for (i = 0; i < o->topic_cnt; i++) {
        if (strcmp(o->topics[i].name, name) == 0) {
            snprintf(err, errlen, "topic %s given twice", name);
            return -1;
        }
    }
    if (o->topic_cnt >= DK_TOPICS_MAX) {
        snprintf(err, errlen, "too many topics (max %d)", DK_TOPICS_MAX);
        return -1;
    }
    memcpy(o->topics[o->topic_cnt].name, name, nlen + 1);
    o->topics[o->topic_cnt].partitions = partitions;
    o->topic_cnt++;
    return 0;
}

static int dk_parse_topic(struct dk_opts *o, const char *arg, char *err, size_t errlen)
{
    char name[DK_TOPIC_NAME_MAX_BYTES + 1];
    const char *colon = strrchr(arg, ':');
    size_t nlen;
    long parts;

    if (!colon || colon == arg) {
        snprintf(err, errlen, "--topic wants NAME:PARTITIONS, got '%s'", arg);
        return -1;
    }
    nlen = (size_t)(colon - arg);
    if (nlen > DK_TOPIC_NAME_MAX_BYTES) {
        snprintf(err, errlen, "topic name longer than %d bytes", DK_TOPIC_NAME_MAX_BYTES);
        return -1;
    }
    if (dk_parse_int(colon + 1, 1, DK_PARTITIONS_MAX, &parts) != 0) {
        snprintf(err, errlen, "partition count must be 1..%d in '%s'", DK_PARTITIONS_MAX, arg);
        return -1;
    }
    memcpy(name, arg, nlen);
    name[nlen] = '\0';
    return dk_topic_add(o, name, (int)parts, err, errlen);
}

static int dk_parse_ports(struct dk_opts *o, const char *arg, char *err, size_t errlen)
{
    char buf[256];
    char *save = NULL;
    char *tok;
    long port;
    int i;

    if (strlen(arg) >= sizeof(buf)) {
        snprintf(err, errlen, "--ports list too long");
        return -1;
    }
    memcpy(buf, arg, strlen(arg) + 1);
    o->port_cnt = 0;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->port_cnt >= DK_BROKERS_MAX) {
            snprintf(err, errlen, "more than %d ports", DK_BROKERS_MAX);
            return -1;
        }
        if (dk_parse_int(tok, 1, 65535, &port) != 0) {
            snprintf(err, errlen, "bad port '%s' (1..65535)", tok);
            return -1;
        }
        for (i = 0; i < o->port_cnt; i++) {
            if (o->ports[i] == (uint16_t)port) {
                snprintf(err, errlen, "port %ld given twice", port);
                return -1;
            }
        }
        o->ports[o->port_cnt++] = (uint16_t)port;
    }
    if (o->port_cnt == 0) {
        snprintf(err, errlen, "--ports wants P1,P2,..");
        return -1;
    }
    return 0;
}

static int dk_parse_args(struct dk_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    long v;
    int i;

    memset(o, 0, sizeof(*o));
    o->brokers = 1;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            dk_usage(stdout);
            exit(0);
        }
        if (!val) {
            snprintf(err, errlen, "unknown option or missing value: %s", a);
            return -1;
        }
        i++;
        if (strcmp(a, "--brokers") == 0) {
            if (dk_parse_int(val, 1, DK_BROKERS_MAX, &v) != 0) {
                snprintf(err, errlen, "--brokers must be 1..%d", DK_BROKERS_MAX);
                return -1;
            }
            o->brokers = (int)v;
        } else if (strcmp(a, "--topic") == 0) {
            if (dk_parse_topic(o, val, err, errlen) != 0)
                return -1;
        } else if (strcmp(a, "--ports") == 0) {
            if (dk_parse_ports(o, val, err, errlen) != 0)
                return -1;
        } else if (strcmp(a, "--bootstrap-file") == 0) {
            o->bootstrap_file = val;
        } else if (strcmp(a, "--control") == 0) {
            o->control = val;
        } else if (strcmp(a, "--control-file") == 0) {
            o->control_file = val;
        } else {
            snprintf(err, errlen, "unknown option: %s", a);
            return -1;
        }
    }
    if (o->port_cnt > 0 && o->port_cnt != o->brokers) {
        snprintf(err, errlen, "--ports lists %d ports for %d brokers", o->port_cnt, o->brokers);
        return -1;
    }
    if (o->control_file && !o->control) {
        snprintf(err, errlen, "--control-file needs --control");
        return -1;
    }
    return 0;
}

/* Write text to path atomically (temporary file in the same directory, then rename).
 * Returns 0 or -1 with errno set. */
static int dk_write_file_atomic(const char *path, const char *text)
{
    char tmp[DK_PATH_MAX_BYTES];
    size_t len = strlen(text);
    size_t off = 0;
    int fd = -1;
    int rc = -1;
    int saved;
    int n;

    n = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        goto out;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto out;
        off += (size_t)w;
    }
    if (close(fd) != 0) {
        fd = -1;
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) != 0)
        goto out;
    rc = 0;
out:
    saved = errno;
    if (fd >= 0)
        close(fd);
    if (rc != 0)
        unlink(tmp);
    errno = saved;
    return rc;
}

/* Parse "127.0.0.1:PORT" (loopback only). Returns 0 or -1. */
static int dk_parse_loopback(const char *addr, struct sockaddr_in *sin)
{
    const char *colon = strrchr(addr, ':');
    char host[64];
    long port;

    if (!colon || (size_t)(colon - addr) >= sizeof(host))
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    if (dk_parse_int(colon + 1, 0, 65535, &port) != 0)
        return -1;
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
        return -1;
    if ((ntohl(sin->sin_addr.s_addr) >> 24) != 127)
        return -1;
    return 0;
}

/* Open the control listener. Returns the fd or -1 (logged). Fills *bound with the address. */
static int dk_control_listen(const char *addr, struct sockaddr_in *bound)
{
    struct sockaddr_in sin;
    socklen_t slen = sizeof(sin);
    int on = 1;
    int fd;

    if (dk_parse_loopback(addr, &sin) != 0) {
        fprintf(stderr, "devkafka: --control wants a loopback 127.x.x.x:PORT, got '%s'\n", addr);
        return -1;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        fprintf(stderr, "devkafka: control socket: %s\n", strerror(errno));
        return -1;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        fprintf(stderr, "devkafka: cannot bind control port %u on %s: %s\n",
                (unsigned)ntohs(sin.sin_port), addr, strerror(errno));
        close(fd);
        return -1;
    }
    if (listen(fd, 16) != 0 || getsockname(fd, (struct sockaddr *)&sin, &slen) != 0) {
        fprintf(stderr, "devkafka: control listen: %s\n", strerror(errno));
        close(fd);
        return -1;
    }
    *bound = sin;
    return fd;
}

/* Kafka API keys by name, for the "error" and "clear" commands. */
static const struct {
    const char *name;
    int key;
} dk_api_names[] = {
    {"Produce", 0},       {"Fetch", 1},           {"ListOffsets", 2},         {"Metadata", 3},
    {"OffsetCommit", 8},  {"OffsetFetch", 9},     {"FindCoordinator", 10},    {"JoinGroup", 11},
    {"Heartbeat", 12},    {"LeaveGroup", 13},     {"SyncGroup", 14},          {"ApiVersions", 18},
    {"CreateTopics", 19}, {"InitProducerId", 22}, {"AddPartitionsToTxn", 24}, {"EndTxn", 26},
};

static int dk_parse_api_key(const char *s, int16_t *out)
{
    size_t i;
    long v;

    if (dk_parse_int(s, 0, 32767, &v) == 0) {
        *out = (int16_t)v;
        return 0;
    }
    for (i = 0; i < sizeof(dk_api_names) / sizeof(dk_api_names[0]); i++) {
        if (strcasecmp(s, dk_api_names[i].name) == 0) {
            *out = (int16_t)dk_api_names[i].key;
            return 0;
        }
    }
    return -1;
}

/* Error code by number or by librdkafka's name (with or without the ERR_ prefix). */
static int dk_parse_err(const char *s, rd_kafka_resp_err_t *out)
{
    const struct rd_kafka_err_desc *descs = NULL;
    size_t cnt = 0;
    size_t i;
    long v;

    if (dk_parse_int(s, -32768, 32767, &v) == 0) {
        *out = (rd_kafka_resp_err_t)v;
        return 0;
    }
    if (strncasecmp(s, "ERR_", 4) == 0)
        s += 4;
    rd_kafka_get_err_descs(&descs, &cnt);
    for (i = 0; i < cnt; i++) {
        if (descs[i].name && strcasecmp(descs[i].name, s) == 0) {
            *out = descs[i].code;
            return 0;
        }
    }
    return -1;
}

/* Parse a broker selector: "all" -> 0, or an id in 1..brokers. Returns -1 when invalid. */
static int dk_parse_broker(const struct dk_state *st, const char *s)
{
    long v;

    if (strcmp(s, "all") == 0)
        return 0;
    if (dk_parse_int(s, 1, st->brokers, &v) != 0)
        return -1;
    return (int)v;
}

static void dk_status(const struct dk_state *st, char *reply, size_t cap)
{
    size_t off;
    int id;

    off = (size_t)snprintf(reply, cap, "ok brokers=%d down=", st->brokers);
    for (id = 1; id <= st->brokers && off < cap; id++) {
        if (st->down[id])
            off += (size_t)snprintf(reply + off, cap - off, "%d,", id);
    }
    if (off < cap)
        snprintf(reply + off, cap - off, " clients_refused=%llu", st->clients_refused);
}

/* Execute one control command line; writes the answer (no newline) into reply.
 * Returns 1 when the connection should be closed afterwards, else 0. */
static int dk_control_exec(struct dk_state *st, char *line, char *reply, size_t cap)
{
    char *argv[6];
    char *save = NULL;
    char *tok;
    int argc = 0;
    int id;
    int lo;
    int hi;
    long v;
    long cnt;
    int16_t api;
    rd_kafka_resp_err_t kerr;
    rd_kafka_resp_err_t rerr;

    for (tok = strtok_r(line, " \t\r", &save); tok && argc < 6;
         tok = strtok_r(NULL, " \t\r", &save))
        argv[argc++] = tok;
    if (argc == 0) {
        snprintf(reply, cap, "err empty command");
        return 0;
    }
    if (strcmp(argv[0], "ping") == 0) {
        snprintf(reply, cap, "ok pong");
    } else if (strcmp(argv[0], "quit") == 0) {
        snprintf(reply, cap, "ok bye");
        return 1;
    } else if (strcmp(argv[0], "help") == 0) {
        snprintf(reply, cap,
                 "ok commands: ping status brokers down up rtt error clear topic "
                 "leader quit");
    } else if (strcmp(argv[0], "status") == 0) {
        dk_status(st, reply, cap);
    } else if (strcmp(argv[0], "brokers") == 0) {
        snprintf(reply, cap, "ok %s", rd_kafka_mock_cluster_bootstraps(st->mc));
    } else if ((strcmp(argv[0], "down") == 0 || strcmp(argv[0], "up") == 0) && argc == 2) {
        int want_down = argv[0][0] == 'd';

        if ((id = dk_parse_broker(st, argv[1])) < 0) {
            snprintf(reply, cap, "err broker must be 1..%d or all", st->brokers);
            return 0;
        }
        lo = id ? id : 1;
        hi = id ? id : st->brokers;
        for (id = lo; id <= hi; id++) {
            rerr = want_down ? rd_kafka_mock_broker_set_down(st->mc, id)
                             : rd_kafka_mock_broker_set_up(st->mc, id);
            if (rerr) {
                snprintf(reply, cap, "err broker %d: %s", id, rd_kafka_err2str(rerr));
                return 0;
            }
            st->down[id] = want_down;
        }
        TG_INFO("event=broker_%s brokers=%s", want_down ? "down" : "up", argv[1]);
        snprintf(reply, cap, "ok");
    } else if (strcmp(argv[0], "rtt") == 0 && argc == 3) {
        if ((id = dk_parse_broker(st, argv[1])) < 0 ||
            dk_parse_int(argv[2], 0, DK_RTT_MAX_MS, &v) != 0) {
            snprintf(reply, cap, "err usage: rtt ID|all MS (0..%d)", DK_RTT_MAX_MS);
            return 0;
        }
        lo = id ? id : 1;
        hi = id ? id : st->brokers;
        for (id = lo; id <= hi; id++) {
            if ((rerr = rd_kafka_mock_broker_set_rtt(st->mc, id, (int)v))) {
                snprintf(reply, cap, "err broker %d: %s", id, rd_kafka_err2str(rerr));
                return 0;
            }
            st->rtt_ms[id] = (int)v;
        }
        TG_INFO("event=broker_rtt brokers=%s rtt_ms=%ld", argv[1], v);
        snprintf(reply, cap, "ok");
    } else if (strcmp(argv[0], "error") == 0 && argc == 4) {
        rd_kafka_resp_err_t *errs = NULL;
        long i;

        if (dk_parse_api_key(argv[1], &api) != 0 || dk_parse_err(argv[2], &kerr) != 0 ||
            dk_parse_int(argv[3], 1, DK_ERRORS_PUSH_MAX, &cnt) != 0) {
            snprintf(reply, cap, "err usage: error API_KEY ERRCODE COUNT (1..%d)",
                     DK_ERRORS_PUSH_MAX);
            return 0;
        }
        errs = calloc((size_t)cnt, sizeof(*errs));
        if (!errs) {
            snprintf(reply, cap, "err out of memory");
            return 0;
        }
        for (i = 0; i < cnt; i++)
            errs[i] = kerr;
        rd_kafka_mock_push_request_errors_array(st->mc, api, (size_t)cnt, errs);
        free(errs);
        TG_INFO("event=errors_pushed api_key=%d err=%d count=%ld", (int)api, (int)kerr, cnt);
        snprintf(reply, cap, "ok");
    } else if (strcmp(argv[0], "clear") == 0 && argc == 2) {
        if (dk_parse_api_key(argv[1], &api) != 0) {
            snprintf(reply, cap, "err usage: clear API_KEY");
            return 0;
        }
        rd_kafka_mock_clear_request_errors(st->mc, api);
        snprintf(reply, cap, "ok");
    } else if (strcmp(argv[0], "topic") == 0 && argc == 3) {
        if (strlen(argv[1]) > DK_TOPIC_NAME_MAX_BYTES ||
            dk_parse_int(argv[2], 1, DK_PARTITIONS_MAX, &v) != 0) {
            snprintf(reply, cap, "err usage: topic NAME PARTITIONS (1..%d)", DK_PARTITIONS_MAX);
            return 0;
        }
        rerr = rd_kafka_mock_topic_create(st->mc, argv[1], (int)v,
                                          st->brokers < DK_REPLICATION_MAX ? st->brokers
                                                                           : DK_REPLICATION_MAX);
        if (rerr) {
            snprintf(reply, cap, "err %s", rd_kafka_err2str(rerr));
            return 0;
        }
        TG_INFO("event=topic_created topic=%s partitions=%ld", argv[1], v);
        snprintf(reply, cap, "ok");
    } else if (strcmp(argv[0], "leader") == 0 && argc == 4) {
        if (dk_parse_int(argv[2], 0, DK_PARTITIONS_MAX - 1, &v) != 0 ||
            (id = dk_parse_broker(st, argv[3])) <= 0) {
            snprintf(reply, cap, "err usage: leader TOPIC PARTITION BROKER_ID");
            return 0;
        }
        rerr = rd_kafka_mock_partition_set_leader(st->mc, argv[1], (int32_t)v, id);
        if (rerr) {
            snprintf(reply, cap, "err %s", rd_kafka_err2str(rerr));
            return 0;
        }
        snprintf(reply, cap, "ok");
    } else {
        snprintf(reply, cap, "err unknown command or wrong arguments (try: help)");
    }
    return 0;
}

static void dk_client_close(struct dk_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->len = 0;
}

/* Blocking-ish reply write on a non-blocking socket; a control client that does not read its
 * answers is disconnected rather than buffered for. */
static int dk_client_reply(struct dk_client *c, const char *reply)
{
    char out[DK_CTL_REPLY_MAX_BYTES + 2];
    size_t len;
    size_t off = 0;
    int tries = 0;

    len = (size_t)snprintf(out, sizeof(out) - 1, "%s", reply);
    if (len > sizeof(out) - 2)
        len = sizeof(out) - 2;
    out[len++] = '\n';
    while (off < len && tries < 50) {
        ssize_t w = send(c->fd, out + off, len - off, MSG_NOSIGNAL);

        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            struct pollfd p = {.fd = c->fd, .events = POLLOUT};

            (void)poll(&p, 1, 20);
            tries++;
            continue;
        }
        return -1;
    }
    return off == len ? 0 : -1;
}

static void dk_client_read(struct dk_state *st, struct dk_client *c)
{
    char reply[DK_CTL_REPLY_MAX_BYTES];
    ssize_t n;
    char *nl;

    n = recv(c->fd, c->line + c->len, sizeof(c->line) - c->len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        dk_client_close(c);
        return;
    }
    c->len += (size_t)n;
    while (c->fd >= 0 && (nl = memchr(c->line, '\n', c->len)) != NULL) {
        size_t used = (size_t)(nl - c->line) + 1;
        int close_after;

        *nl = '\0';
        close_after = dk_control_exec(st, c->line, reply, sizeof(reply));
        if (dk_client_reply(c, reply) != 0 || close_after) {
            dk_client_close(c);
            return;
        }
        memmove(c->line, c->line + used, c->len - used);
        c->len -= used;
    }
    if (c->len == sizeof(c->line)) {
        (void)dk_client_reply(c, "err line too long");
        dk_client_close(c);
    }
}

static void dk_accept(struct dk_state *st)
{
    int fd;
    int i;

    while ((fd = accept4(st->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        for (i = 0; i < DK_CTL_CLIENTS_MAX; i++) {
            if (st->clients[i].fd < 0)
                break;
        }
        if (i == DK_CTL_CLIENTS_MAX) {
            static const char busy[] = "err too many control connections\n";

            st->clients_refused++;
            (void)send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL);
            close(fd);
            continue;
        }
        st->clients[i].fd = fd;
        st->clients[i].len = 0;
    }
}

/* Serve the control channel (or just wait) until a stop signal. `wait_mask` is the signal
 * mask used while polling (SIGINT/SIGTERM unblocked). */
static void dk_run(struct dk_state *st, const sigset_t *wait_mask)
{
    struct pollfd pfd[DK_CTL_CLIENTS_MAX + 1];
    int map[DK_CTL_CLIENTS_MAX + 1];
    struct timespec ts = {.tv_sec = 0, .tv_nsec = DK_POLL_INTERVAL_MS * 1000000L};
    int n;
    int i;

    while (!dk_stop) {
        n = 0;
        if (st->listen_fd >= 0) {
            pfd[n].fd = st->listen_fd;
            pfd[n].events = POLLIN;
            map[n++] = -1;
        }
        for (i = 0; i < DK_CTL_CLIENTS_MAX; i++) {
            if (st->clients[i].fd < 0)
                continue;
            pfd[n].fd = st->clients[i].fd;
            pfd[n].events = POLLIN;
            map[n++] = i;
        }
        if (ppoll(pfd, (nfds_t)n, &ts, wait_mask) <= 0)
            continue;
        for (i = 0; i < n; i++) {
            if (!pfd[i].revents)
                continue;
            if (map[i] < 0)
                dk_accept(st);
            else
                dk_client_read(st, &st->clients[map[i]]);
        }
    }
}

/* Create the mock cluster with fixed ports when asked. Returns 0 or -1 (message printed). */
static int dk_cluster_start(struct dk_state *st, const struct dk_opts *o)
{
    char errstr[512];
    rd_kafka_conf_t *conf = NULL;
    int used;
    int i;
    rd_kafka_resp_err_t rerr;
    int repl = o->brokers < DK_REPLICATION_MAX ? o->brokers : DK_REPLICATION_MAX;

    conf = rd_kafka_conf_new();
    /* The handle only hosts the mock cluster; it never connects anywhere. */
    if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "devkafka: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    st->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!st->rk) {
        fprintf(stderr, "devkafka: rd_kafka_new: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return -1;
    }

    /* Fixed ports are bound and listening before the cluster exists: a taken port is
     * reported here. (librdkafka 2.0.2 asserts inside rd_kafka_mock_cluster_new() when one of
     * its own binds fails, so that must never happen.) */
    if (o->port_cnt > 0 && dk_bind_prepare(o->ports, o->port_cnt, errstr, sizeof(errstr)) != 0) {
        fprintf(stderr, "devkafka: %s\n", errstr);
        return -1;
    }
    st->mc = rd_kafka_mock_cluster_new(st->rk, o->brokers);
    used = dk_bind_disarm();
    if (!st->mc) {
        fprintf(stderr, "devkafka: could not create the mock cluster\n");
        return -1;
    }
    if (o->port_cnt > 0 && used != o->port_cnt) {
        fprintf(stderr,
                "devkafka: expected %d listener binds, saw %d: this librdkafka does "
                "not bind the way devkafka expects, fixed ports unavailable\n",
                o->port_cnt, used);
        return -1;
    }
    for (i = 0; i < o->topic_cnt; i++) {
        rerr = rd_kafka_mock_topic_create(st->mc, o->topics[i].name, o->topics[i].partitions, repl);
        if (rerr) {
            fprintf(stderr, "devkafka: cannot create topic %s: %s\n", o->topics[i].name,
                    rd_kafka_err2str(rerr));
            return -1;
        }
    }
    return 0;
}

static void dk_cluster_stop(struct dk_state *st)
{
    if (st->mc)
        rd_kafka_mock_cluster_destroy(st->mc);
    st->mc = NULL;
    if (st->rk)
        rd_kafka_destroy(st->rk);
    st->rk = NULL;
}

int main(int argc, char **argv)
{
    struct dk_opts opts;
    struct dk_state st;
    struct sockaddr_in ctl_addr;
    struct sigaction sa;
    sigset_t block;
    sigset_t wait_mask;
    char err[512];
    char text[DK_CTL_REPLY_MAX_BYTES];
    const char *bootstraps;
    int wrote_bootstrap = 0;
    int wrote_control = 0;
    int rc = 1;
    int i;

    memset(&st, 0, sizeof(st));
    st.listen_fd = -1;
    for (i = 0; i < DK_CTL_CLIENTS_MAX; i++)
        st.clients[i].fd = -1;

    tg_log_init("devkafka");
    if (dk_parse_args(&opts, argc, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "devkafka: %s\n(try --help)\n", err);
        return 2;
    }
    st.brokers = opts.brokers;

    /* SIGINT/SIGTERM are blocked in every thread (librdkafka's inherit the mask) and only
     * delivered to main while it waits in ppoll(). */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = dk_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &wait_mask);
    sigdelset(&wait_mask, SIGINT);
    sigdelset(&wait_mask, SIGTERM);

    if (opts.control) {
        st.listen_fd = dk_control_listen(opts.control, &ctl_addr);
        if (st.listen_fd < 0)
            goto out;
    }
    if (dk_cluster_start(&st, &opts) != 0)
        goto out;

    bootstraps = rd_kafka_mock_cluster_bootstraps(st.mc);
    if (opts.bootstrap_file) {
        snprintf(text, sizeof(text), "%s\n", bootstraps);
        if (dk_write_file_atomic(opts.bootstrap_file, text) != 0) {
            fprintf(stderr, "devkafka: cannot write %s: %s\n", opts.bootstrap_file,
                    strerror(errno));
            goto out;
        }
        wrote_bootstrap = 1;
    }
    if (opts.control_file) {
        snprintf(text, sizeof(text), "127.0.0.1:%u\n", (unsigned)ntohs(ctl_addr.sin_port));
        if (dk_write_file_atomic(opts.control_file, text) != 0) {
            fprintf(stderr, "devkafka: cannot write %s: %s\n", opts.control_file, strerror(errno));
            goto out;
        }
        wrote_control = 1;
    }
    TG_INFO("event=ready brokers=%d bootstrap=%s topics=%d control_port=%u", opts.brokers,
            bootstraps, opts.topic_cnt,
            st.listen_fd >= 0 ? (unsigned)ntohs(ctl_addr.sin_port) : 0u);
    for (i = 0; i < opts.topic_cnt; i++)
        TG_INFO("event=topic topic=%s partitions=%d", opts.topics[i].name,
                opts.topics[i].partitions);

    dk_run(&st, &wait_mask);
    TG_INFO("event=stopping");
    rc = 0;
out:
    for (i = 0; i < DK_CTL_CLIENTS_MAX; i++)
        dk_client_close(&st.clients[i]);
    if (st.listen_fd >= 0)
        close(st.listen_fd);
    if (wrote_bootstrap)
        unlink(opts.bootstrap_file);
    if (wrote_control)
        unlink(opts.control_file);
    dk_cluster_stop(&st);
    return rc;
}
