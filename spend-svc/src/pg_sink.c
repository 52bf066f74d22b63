#include "pg_sink.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"
#include "tg_time.h"

#define SP_PG_ADVISORY_LOCK_ID 7270016001LL /* migrations lock, any replica */
#define SP_PG_MIGRATE_TIMEOUT_MS 60000
#define SP_PG_NCOLS 30 /* spend_logs parameter arrays */

struct sp_pg {
    char *dsn;           /* owned copy */
    int timeout_ms;      /* per connect and per query */
    PGconn *conn;        /* NULL when not connected */
    _Atomic int up;      /* 1 after a successful connect or query */
    char sqlstate[6];    /* of the last failed query */
    uint64_t deadline_ms; /* monotonic deadline of the query in flight */
    int timeout_used_ms; /* its timeout, for the log line */
    int session_ready;   /* sp_batch temp table and sp_flush prepared on this connection */
    int direct;          /* the query in flight is a direct-path COPY (a duplicate is expected) */
    struct fold *daily;  /* direct path, owned: spend_daily groups of the batch being written */
    struct fold *minute; /* direct path, owned: its per-minute increments; both sized to twice
                          * the largest batch sent on this connection (batch.max_events) */
    uint64_t conn_gen;   /* connections made so far (a snapshot must stay on one) */
    uint64_t snap_gen;   /* conn_gen when the snapshot transaction began */
    int in_doubt;        /* a statement was given up after it was sent (see flush_result) */
};

/* Only one cancel request in flight at a time: PQcancel blocks while the server is stopped,
 * so it runs on a detached thread and a second timeout does not start another. */
static _Atomic int pg_cancel_busy;

/* Growable text used for query parameters; bounded by the batch's byte cap times the escape
 * factor, released with the batch. */
struct dstr {
    char *p;
    size_t len;
    size_t cap;
};

/* One event of a batch: where its record lies in the batch's arena. The record is the event's
 * tuple of the binary COPY stream (rec_encode), about half a kilobyte where a struct
 * proto_event takes three, so a large batch stays small and the COPY stream is the records
 * back to back. */
struct batch_event {
    int32_t partition;
    int64_t offset;
    size_t rec_off;      /* bytes into the arena */
    size_t rec_len;      /* bytes */
};

struct batch_dead {
    char reason[SP_PG_DEAD_REASON_MAX];
    char *payload;       /* owned, <= SP_PG_DEAD_PAYLOAD_MAX_BYTES */
    size_t len;
    int32_t partition;
    int64_t offset;
};

/* A group of a batch's request events, folded in spend-svc (direct path): the event holding its
 * strings, its day number or minute, the sums. */
struct fold_ent {
    uint64_t h;
    int rec;                 /* event index, -1 when the slot is empty */
    int64_t t;
    int64_t requests, failures, prompt, completion, cost;
};

struct fold {
    struct fold_ent *e;
    size_t cap;              /* power of two, at least twice the events */
    size_t n;
};

struct sp_pg_batch {
    int max_events;
    size_t max_bytes;
    struct batch_event *ev; /* [max_events] */
    struct dstr rec;        /* arena of the event records, bounded by max_events records */
    int nev;
    size_t bytes;           /* encoded bytes of held events */
    struct batch_dead dead[SP_PG_DEAD_PER_BATCH_MAX];
    int ndead;
    int32_t part[SP_PG_PARTITIONS_MAX];
    int64_t first[SP_PG_PARTITIONS_MAX]; /* lowest offset of the partition in the batch */
    int64_t next[SP_PG_PARTITIONS_MAX];
    int npart;
    struct sp_pg_incr *incr; /* [max_events] results of the last flush */
    int nincr;
    struct dstr col[SP_PG_NCOLS + 8];
    int copy_path;           /* the statement in flight: 0 parameter arrays, 1 COPY into the temp
                              * table, 2 COPY straight into spend_logs */
};

/* dstr ------------------------------------------------------------------------------------- */

static int dstr_reserve(struct dstr *d, size_t extra)
{
    size_t need = d->len + extra + 1;
    size_t ncap;
    char *np;

    if (need <= d->cap)
        return 0;
    ncap = d->cap ? d->cap : 4096;
    while (ncap < need)
        ncap *= 2;
    np = realloc(d->p, ncap);
    if (!np)
        return TG_ENOMEM;
    d->p = np;
    d->cap = ncap;
    return 0;
}

static int dstr_putc(struct dstr *d, char c)
{
    if (dstr_reserve(d, 1) < 0)
        return TG_ENOMEM;
    d->p[d->len++] = c;
    d->p[d->len] = '\0';
    return 0;
}

static int dstr_put(struct dstr *d, const char *s, size_t n)
{
    if (dstr_reserve(d, n) < 0)
        return TG_ENOMEM;
    memcpy(d->p + d->len, s, n);
    d->len += n;
    d->p[d->len] = '\0';
    return 0;
}

static int dstr_puts(struct dstr *d, const char *s)
{
    return dstr_put(d, s, strlen(s));
}

static int dstr_printf(struct dstr *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int dstr_printf(struct dstr *d, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return TG_EINVAL;
    return dstr_put(d, tmp, (size_t)n);
}

static void dstr_reset(struct dstr *d)
{
    d->len = 0;
    if (d->p)
        d->p[0] = '\0';
}

/* utf8_seq: length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t len;
    unsigned int cp;

    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xE0) == 0xC0) {
        len = 2;
        cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3;
        cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        len = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* arr_str: append s as a quoted array element (text[] literal); invalid UTF-8 bytes become '?'
 * so that one bad byte can never make Postgres refuse a whole batch. */
static int arr_strn(struct dstr *d, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    if (dstr_reserve(d, n * 2 + 3) < 0)
        return TG_ENOMEM;
    d->p[d->len++] = '"';
    while (i < n) {
        size_t k = utf8_seq(p + i, n - i);
        if (k == 0) {
            d->p[d->len++] = '?';
            i++;
            continue;
        }
        if (p[i] == '"' || p[i] == '\\')
            d->p[d->len++] = '\\';
        memcpy(d->p + d->len, p + i, k);
        d->len += k;
        i += k;
    }
    d->p[d->len++] = '"';
    d->p[d->len] = '\0';
    return 0;
}

static int arr_str(struct dstr *d, const char *s)
{
    return arr_strn(d, s, strlen(s));
}

/* json_str: append s as a JSON string (quotes, backslashes, control bytes escaped; invalid
 * UTF-8 replaced by '?'). */
static int json_str(struct dstr *d, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    size_t i = 0;

    if (dstr_reserve(d, n * 6 + 3) < 0)
        return TG_ENOMEM;
    d->p[d->len++] = '"';
    while (i < n) {
        size_t k = utf8_seq(p + i, n - i);
        if (k == 0) {
            d->p[d->len++] = '?';
            i++;
            continue;
        }
        if (p[i] == '"' || p[i] == '\\') {
            d->p[d->len++] = '\\';
            d->p[d->len++] = (char)p[i];
        } else if (p[i] < 0x20) {
            d->len += (size_t)snprintf(d->p + d->len, 7, "\\u%04x", p[i]);
        } else {
            memcpy(d->p + d->len, p + i, k);
            d->len += k;
        }
        i += k;
    }
    d->p[d->len++] = '"';
    d->p[d->len] = '\0';
    return 0;
}

/* Connection -------------------------------------------------------------------------------- */

struct sp_pg *sp_pg_create(const char *dsn, int timeout_ms, char *err, size_t errlen)
{
    struct sp_pg *pg = calloc(1, sizeof(*pg));
    if (!pg) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pg->dsn = strdup(dsn);
    if (!pg->dsn) {
        free(pg);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pg->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    return pg;
}

static void pg_close(struct sp_pg *pg)
{
    if (pg->conn) {
        PQfinish(pg->conn);
        pg->conn = NULL;
    }
    pg->session_ready = 0;
    atomic_store(&pg->up, 0);
}

void sp_pg_destroy(struct sp_pg **pgp)
{
    struct sp_pg *pg;

    if (!pgp || !*pgp)
        return;
    pg = *pgp;
    pg_close(pg);
    for (int i = 0; i < 2; i++) {
        struct fold *f = i ? pg->minute : pg->daily;
        if (f)
            free(f->e);
        free(f);
    }
    free(pg->dsn);
    free(pg);
    *pgp = NULL;
}

int sp_pg_is_up(const struct sp_pg *pg)
{
    return atomic_load(&pg->up);
}

/* pg_wait: poll the socket for events until deadline (monotonic ms). 0, or TG_ETIMEOUT/EIO. */
static int pg_wait(PGconn *conn, short events, uint64_t deadline_ms)
{
    struct pollfd pfd;
    uint64_t now;
    int rc;

    pfd.fd = PQsocket(conn);
    if (pfd.fd < 0)
        return TG_EIO;
    pfd.events = events;
    for (;;) {
        now = tg_now_mono_ms();
        if (now >= deadline_ms)
            return TG_ETIMEOUT;
        pfd.revents = 0;
        rc = poll(&pfd, 1, (int)(deadline_ms - now));
        if (rc > 0)
            return 0;
        if (rc == 0)
            return TG_ETIMEOUT;
        if (errno != EINTR)
            return TG_EIO;
    }
}

static void pg_notice_drop(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* conn_reason: libpq's message about the failed connection (TLS, authentication, refusal),
 * escaped and cut, for the log. libpq quotes a piece of a malformed connection string back, so
 * a message holding the DSN's password, or any message when the DSN's password cannot be found,
 * is replaced by a fixed text: the password never reaches a log. */
static const char *conn_reason(const struct sp_pg *pg, char *buf, size_t cap)
{
    PQconninfoOption *opts = PQconninfoParse(pg->dsn, NULL);
    const char *msg = pg->conn ? PQerrorMessage(pg->conn) : "";
    const char *pw = NULL;
    size_t len = strlen(msg);

    if (opts == NULL) {
        snprintf(buf, cap, "connection string not parsed (not shown: it holds a password)");
        return buf;
    }
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (strcmp(o->keyword, "password") == 0)
            pw = o->val;
    }
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
        len--;
    if (pw != NULL && pw[0] != '\0' && strstr(msg, pw) != NULL)
        snprintf(buf, cap, "(not shown: libpq's message quotes the password)");
    else
        tg_log_escape(buf, cap, msg, len);
    PQconninfoFree(opts);
    return buf;
}

int sp_pg_connect(struct sp_pg *pg)
{
    char reason[256];

    uint64_t deadline;
    PostgresPollingStatusType st;

    if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK)
        return 0;
    pg_close(pg);
    deadline = tg_now_mono_ms() + (uint64_t)pg->timeout_ms;
    pg->conn = PQconnectStart(pg->dsn);
    if (!pg->conn)
        return TG_ENOMEM;
    if (PQstatus(pg->conn) == CONNECTION_BAD)
        goto fail;
    st = PGRES_POLLING_WRITING;
    for (;;) {
        int rc;
        if (st == PGRES_POLLING_OK)
            break;
        if (st == PGRES_POLLING_FAILED)
            goto fail;
        rc = pg_wait(pg->conn, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
        if (rc < 0)
            goto fail;
        st = PQconnectPoll(pg->conn);
    }
    if (PQsetnonblocking(pg->conn, 1) != 0)
        goto fail;
    /* server notices ("... already exists, skipping") would go to stderr unformatted */
    PQsetNoticeProcessor(pg->conn, pg_notice_drop, NULL);
    pg->conn_gen++;
    atomic_store(&pg->up, 1);
    return 0;
fail:
    TG_WARN_RL("msg=\"postgres connect failed\" status=%d reason=\"%s\"", (int)PQstatus(pg->conn),
               conn_reason(pg, reason, sizeof(reason)));
    pg_close(pg);
    return TG_EUNAVAIL;
}

static void *pg_cancel_thread(void *arg)
{
    PGcancel *c = arg;
    char buf[256];

    PQcancel(c, buf, sizeof(buf));
    PQfreeCancel(c);
    atomic_store(&pg_cancel_busy, 0);
    return NULL;
}

/* pg_abandon: the query ran out of time: ask the server to cancel it (in the background) and
 * drop the connection. Whatever the statement did is either committed or not; the flush is
 * idempotent, so a retry cannot double count. */
static void pg_abandon(struct sp_pg *pg)
{
    int expected = 0;

    pg->in_doubt = 1;
    if (pg->conn && atomic_compare_exchange_strong(&pg_cancel_busy, &expected, 1)) {
        PGcancel *c = PQgetCancel(pg->conn);
        pthread_t th;
        pthread_attr_t attr;
        int started = 0;
        if (c && pthread_attr_init(&attr) == 0) {
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            started = pthread_create(&th, &attr, pg_cancel_thread, c) == 0;
            pthread_attr_destroy(&attr);
        }
        if (!started) {
            if (c)
                PQfreeCancel(c);
            atomic_store(&pg_cancel_busy, 0);
        }
    }
    pg_close(pg);
}

/* pg_classify: map a failed result to a tg_err. Connection-class problems (08, 57, 53, 40)
 * mean "retry later"; data problems (22, 23) mean "this data will never go in". */
static int pg_classify(struct sp_pg *pg, PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

    snprintf(pg->sqlstate, sizeof(pg->sqlstate), "%s", state ? state : "");
    if (!pg->conn || PQstatus(pg->conn) != CONNECTION_OK || !state)
        return TG_EUNAVAIL;
    if (strncmp(state, "08", 2) == 0 || strncmp(state, "57", 2) == 0)
        return TG_EUNAVAIL;
    if (strncmp(state, "53", 2) == 0 || strncmp(state, "40", 2) == 0)
        return TG_EAGAIN;
    if (strncmp(state, "22", 2) == 0 || strncmp(state, "23", 2) == 0)
        return TG_EPROTO;
    return TG_EIO;
}

/* pg_send: send one query (extended protocol with text parameters when simple is 0, the simple
 * protocol otherwise) and push it to the server before the deadline (now + timeout_ms), which
 * also bounds pg_collect. Returns 0 or TG_EUNAVAIL / TG_ETIMEOUT (connection dropped). */
static int pg_send(struct sp_pg *pg, const char *sql, int nparams, const char *const *values,
                   int simple, int timeout_ms)
{
    int rc;
    int ok;

    pg->deadline_ms = tg_now_mono_ms() + (uint64_t)timeout_ms;
    pg->timeout_used_ms = timeout_ms;
    rc = sp_pg_connect(pg);
    if (rc < 0)
        return rc;
    if (simple)
        ok = PQsendQuery(pg->conn, sql);
    else
        ok = PQsendQueryParams(pg->conn, sql, nparams, NULL, values, NULL, NULL, 0);
    if (!ok) {
        pg_close(pg);
        return TG_EUNAVAIL;
    }
    for (;;) {
        int f = PQflush(pg->conn);
        if (f == 0)
            return 0;
        if (f < 0 || pg_wait(pg->conn, POLLOUT | POLLIN, pg->deadline_ms) < 0 ||
            !PQconsumeInput(pg->conn))
            break;
    }
    if (tg_now_mono_ms() >= pg->deadline_ms) {
        TG_WARN_RL("msg=\"postgres query timed out\" timeout_ms=%d", timeout_ms);
        pg_abandon(pg);
        return TG_ETIMEOUT;
    }
    pg_close(pg);
    return TG_EUNAVAIL;
}

/* pg_collect: the results of the query sent by pg_send. With block 0 it returns TG_EAGAIN at
 * once while the server is still working (the deadline still applies: past it the query is
 * abandoned). On success returns 0 and *out (new, PQclear) is the last result. */
static int pg_collect(struct sp_pg *pg, int block, PGresult **out)
{
    PGresult *last = NULL;
    PGresult *r;
    int direct;
    int rc;

    *out = NULL;
    if (!pg->conn)
        return TG_EUNAVAIL;
    if (!block) {
        if (!PQconsumeInput(pg->conn))
            goto broken;
        if (PQisBusy(pg->conn)) {
            if (tg_now_mono_ms() >= pg->deadline_ms)
                goto timeout;
            return TG_EAGAIN;
        }
    }
    for (;;) {
        while (PQisBusy(pg->conn)) {
            rc = pg_wait(pg->conn, POLLIN, pg->deadline_ms);
            if (rc < 0)
                goto timeout;
            if (!PQconsumeInput(pg->conn))
                goto broken;
        }
        r = PQgetResult(pg->conn);
        if (!r)
            break;
        if (last) {
            ExecStatusType prev = PQresultStatus(last);
            /* keep the first error: later results only repeat the abort */
            if (prev == PGRES_FATAL_ERROR) {
                PQclear(r);
                continue;
            }
            PQclear(last);
        }
        last = r;
    }
    direct = pg->direct;
    pg->direct = 0;
    if (!last)
        goto broken;
    if (PQresultStatus(last) != PGRES_TUPLES_OK && PQresultStatus(last) != PGRES_COMMAND_OK) {
        rc = pg_classify(pg, last);
        /* TG_EAGAIN from here means "still running": a deadlock or serialization failure
         * (class 40) or a resource shortage (53) is "unavailable, retry later" */
        if (rc == TG_EAGAIN)
            rc = TG_EUNAVAIL;
        if (direct && strcmp(pg->sqlstate, "23505") == 0)
            TG_DEBUG("msg=\"batch holds a stored call id, writing it with ON CONFLICT\"");
        else
            TG_WARN_RL("msg=\"postgres query failed\" sqlstate=%s err=%s", pg->sqlstate,
                       tg_errname(rc));
        PQclear(last);
        if (rc == TG_EUNAVAIL)
            pg_close(pg);
        return rc;
    }
    atomic_store(&pg->up, 1);
    *out = last;
    return 0;
timeout:
    if (last)
        PQclear(last);
    TG_WARN_RL("msg=\"postgres query timed out\" timeout_ms=%d", pg->timeout_used_ms);
    pg_abandon(pg);
    return TG_ETIMEOUT;
broken:
    if (last)
        PQclear(last);
    pg->in_doubt = 1; /* the connection broke while the statement ran */
    pg_close(pg);
    return TG_EUNAVAIL;
}

/* pg_run: pg_send then a blocking pg_collect. */
static int pg_run(struct sp_pg *pg, const char *sql, int nparams, const char *const *values,
                  int simple, int timeout_ms, PGresult **out)
{
    int rc;

    *out = NULL;
    rc = pg_send(pg, sql, nparams, values, simple, timeout_ms);
    if (rc < 0)
        return rc;
    return pg_collect(pg, 1, out);
}

static int pg_exec(struct sp_pg *pg, const char *sql, int nparams, const char *const *values,
                   PGresult **out)
{
    return pg_run(pg, sql, nparams, values, 0, pg->timeout_ms, out);
}

/* Migrations ----------------------------------------------------------------------------------- */

struct migration {
    int version;
    const char *sql;
};

static const struct migration pg_migrations[] = {
    {1,
     "CREATE TABLE spend_logs ("
     " call_id uuid PRIMARY KEY,"
     " kind text NOT NULL,"
     " ts_start_ms bigint NOT NULL,"
     " ts_end_ms bigint NOT NULL,"
     " endpoint text NOT NULL,"
     " stream boolean NOT NULL,"
     " key_hash text NOT NULL,"
     " key_alias text NOT NULL,"
     " team_id text NOT NULL,"
     " user_id text NOT NULL,"
     " end_user text NOT NULL,"
     " model_requested text NOT NULL,"
     " model_group text NOT NULL,"
     " deployment_id text NOT NULL,"
     " provider text NOT NULL,"
     " model text NOT NULL,"
     " status integer NOT NULL,"
     " error_class text NOT NULL,"
     " prompt_tokens bigint NOT NULL,"
     " completion_tokens bigint NOT NULL,"
     " cost_nusd bigint NOT NULL,"
     " latency_ms bigint NOT NULL,"
     " ttft_ms bigint NOT NULL,"
     " attempts integer NOT NULL,"
     " fallbacks integer NOT NULL,"
     " trail jsonb NOT NULL,"
     " tags jsonb NOT NULL,"
     " trace_id text NOT NULL,"
     " kafka_partition integer NOT NULL,"
     " kafka_offset bigint NOT NULL,"
     " inserted_at timestamptz NOT NULL DEFAULT now());"
     /* budgets over periods that do not start at midnight read recent rows by time: a BRIN
      * index costs almost nothing per insert, where btrees on (key, time) halved the insert
      * rate; whole-day periods read spend_daily */
     "CREATE INDEX spend_logs_ts_brin ON spend_logs USING brin (ts_end_ms);"
     "CREATE TABLE spend_daily ("
     " day date NOT NULL,"
     " key_hash text NOT NULL,"
     " team_id text NOT NULL,"
     " model_group text NOT NULL,"
     " deployment_id text NOT NULL,"
     " requests bigint NOT NULL DEFAULT 0,"
     " failures bigint NOT NULL DEFAULT 0,"
     " prompt_tokens bigint NOT NULL DEFAULT 0,"
     " completion_tokens bigint NOT NULL DEFAULT 0,"
     " cost_nusd bigint NOT NULL DEFAULT 0,"
     " PRIMARY KEY (day, key_hash, team_id, model_group, deployment_id))"
     /* rows are updated in place after every batch: room on the page keeps those updates
      * HOT (no index entries, no bottom-up index cleanup) */
     " WITH (fillfactor = 50);"
     "CREATE INDEX spend_daily_key_day ON spend_daily (key_hash, day);"
     "CREATE INDEX spend_daily_team_day ON spend_daily (team_id, day);"
     "CREATE TABLE consumer_offsets ("
     " topic text NOT NULL,"
     " partition integer NOT NULL,"
     " next_offset bigint NOT NULL,"
     " updated_at timestamptz NOT NULL DEFAULT now(),"
     " PRIMARY KEY (topic, partition));"
     "CREATE TABLE dead_letters ("
     " id bigserial PRIMARY KEY,"
     " source text NOT NULL,"
     " reason text NOT NULL,"
     " payload bytea NOT NULL,"
     " payload_bytes integer NOT NULL,"
     " kafka_partition integer NOT NULL,"
     " kafka_offset bigint NOT NULL,"
     " created_at timestamptz NOT NULL DEFAULT now(),"
     " UNIQUE (source, kafka_partition, kafka_offset));"
     "CREATE TABLE api_keys ("
     " key_hash text PRIMARY KEY,"
     " key_alias text NOT NULL DEFAULT '',"
     " team_id text NOT NULL DEFAULT '',"
     " user_id text NOT NULL DEFAULT '',"
     " max_budget_nusd bigint,"
     " budget_duration_s bigint,"
     " metadata jsonb NOT NULL DEFAULT '{}',"
     " updated_at timestamptz NOT NULL DEFAULT now());"
     "CREATE TABLE budget_state ("
     " kind text NOT NULL,"
     " subject text NOT NULL,"
     " period_start_ms bigint NOT NULL,"
     " level_pct integer NOT NULL DEFAULT 0,"
     " blocked_period_ms bigint,"
     " updated_at timestamptz NOT NULL DEFAULT now(),"
     " PRIMARY KEY (kind, subject));"},
};

int sp_pg_migrate(struct sp_pg *pg)
{
    char lock_sql[128];
    char unlock_sql[128];
    char check_sql[128];
    PGresult *res = NULL;
    struct dstr q = {0};
    int locked = 0;
    int applied = 0;
    int rc;

    snprintf(lock_sql, sizeof(lock_sql), "SELECT pg_advisory_lock(%lld)",
             (long long)SP_PG_ADVISORY_LOCK_ID);
    snprintf(unlock_sql, sizeof(unlock_sql), "SELECT pg_advisory_unlock(%lld)",
             (long long)SP_PG_ADVISORY_LOCK_ID);
    rc = pg_run(pg, lock_sql, 0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &res);
    if (rc < 0)
        goto out;
    PQclear(res);
    res = NULL;
    locked = 1;
    rc = pg_run(pg,
                "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())",
                0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &res);
    if (rc < 0)
        goto out;
    PQclear(res);
    res = NULL;
    for (size_t i = 0; i < sizeof(pg_migrations) / sizeof(pg_migrations[0]); i++) {
        const struct migration *m = &pg_migrations[i];
        int have;
        snprintf(check_sql, sizeof(check_sql),
                 "SELECT 1 FROM schema_migrations WHERE version = %d", m->version);
        rc = pg_run(pg, check_sql, 0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &res);
        if (rc < 0)
            goto out;
        have = PQntuples(res) > 0;
        PQclear(res);
        res = NULL;
        if (have)
            continue;
        dstr_reset(&q);
        if (dstr_put(&q, "BEGIN;", 6) < 0 || dstr_put(&q, m->sql, strlen(m->sql)) < 0 ||
            dstr_printf(&q, ";INSERT INTO schema_migrations (version) VALUES (%d);", m->version) <
                0 ||
            dstr_put(&q, "COMMIT;", 7) < 0) {
            rc = TG_ENOMEM;
            goto out;
        }
        rc = pg_run(pg, q.p, 0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &res);
        if (rc < 0) {
            TG_ERROR("msg=\"migration failed\" version=%d sqlstate=%s", m->version, pg->sqlstate);
            goto out;
        }
        PQclear(res);
        res = NULL;
        applied++;
        TG_INFO("msg=\"migration applied\" version=%d", m->version);
    }
    rc = 0;
out:
    if (res)
        PQclear(res);
    if (locked && pg->conn) {
        PGresult *u = NULL;
        if (pg_run(pg, unlock_sql, 0, NULL, 1, SP_PG_MIGRATE_TIMEOUT_MS, &u) == 0)
            PQclear(u);
    }
    free(q.p);
    if (rc == 0)
        TG_INFO("msg=\"schema ready\" applied=%d", applied);
    return rc;
}

/* Batch ------------------------------------------------------------------------------------------ */

struct sp_pg_batch *sp_pg_batch_create(int max_events, int max_bytes)
{
    struct sp_pg_batch *b;

    if (max_events <= 0 || max_bytes <= 0)
        return NULL;
    b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->max_events = max_events;
    b->max_bytes = (size_t)max_bytes;
    b->ev = calloc((size_t)max_events, sizeof(*b->ev));
    b->incr = calloc((size_t)max_events, sizeof(*b->incr));
    if (!b->ev || !b->incr) {
        sp_pg_batch_destroy(&b);
        return NULL;
    }
    return b;
}

void sp_pg_batch_reset(struct sp_pg_batch *b)
{
    for (int i = 0; i < b->ndead; i++) {
        free(b->dead[i].payload);
        b->dead[i].payload = NULL;
    }
    b->ndead = 0;
    b->nev = 0;
    dstr_reset(&b->rec);
    b->bytes = 0;
    b->npart = 0;
    b->nincr = 0;
}

void sp_pg_batch_destroy(struct sp_pg_batch **bp)
{
    struct sp_pg_batch *b;

    if (!bp || !*bp)
        return;
    b = *bp;
    sp_pg_batch_reset(b);
    for (size_t i = 0; i < sizeof(b->col) / sizeof(b->col[0]); i++)
        free(b->col[i].p);
    free(b->rec.p);
    free(b->ev);
    free(b->incr);
    free(b);
    *bp = NULL;
}

/* batch_note_offset: record that partition has been read up to offset (inclusive). */
static int batch_note_offset(struct sp_pg_batch *b, int32_t partition, int64_t offset)
{
    for (int i = 0; i < b->npart; i++) {
        if (b->part[i] == partition) {
            if (offset + 1 > b->next[i])
                b->next[i] = offset + 1;
            if (offset < b->first[i])
                b->first[i] = offset;
            return 0;
        }
    }
    if (b->npart >= SP_PG_PARTITIONS_MAX)
        return TG_EFULL;
    b->part[b->npart] = partition;
    b->first[b->npart] = offset;
    b->next[b->npart] = offset + 1;
    b->npart++;
    return 0;
}

static int batch_has_partition(const struct sp_pg_batch *b, int32_t partition)
{
    for (int i = 0; i < b->npart; i++)
        if (b->part[i] == partition)
            return 1;
    return 0;
}

static int rec_encode(struct sp_pg_batch *b, const struct proto_event *ev, int32_t partition,
                      int64_t offset);

int sp_pg_batch_add_event(struct sp_pg_batch *b, const struct proto_event *ev, int32_t partition,
                          int64_t offset, size_t encoded_len)
{
    size_t start = b->rec.len;
    int rc;

    if (b->nev >= b->max_events || b->bytes + encoded_len > b->max_bytes)
        return TG_EFULL;
    if (!batch_has_partition(b, partition) && b->npart >= SP_PG_PARTITIONS_MAX)
        return TG_EFULL;
    rc = rec_encode(b, ev, partition, offset);
    if (rc < 0) {
        b->rec.len = start;
        return rc;
    }
    b->ev[b->nev].partition = partition;
    b->ev[b->nev].offset = offset;
    b->ev[b->nev].rec_off = start;
    b->ev[b->nev].rec_len = b->rec.len - start;
    b->nev++;
    b->bytes += encoded_len;
    return batch_note_offset(b, partition, offset);
}

int sp_pg_batch_add_dead(struct sp_pg_batch *b, const char *reason, const void *payload,
                         size_t len, int32_t partition, int64_t offset)
{
    struct batch_dead *d;

    if (b->ndead >= SP_PG_DEAD_PER_BATCH_MAX)
        return TG_EFULL;
    if (!batch_has_partition(b, partition) && b->npart >= SP_PG_PARTITIONS_MAX)
        return TG_EFULL;
    d = &b->dead[b->ndead];
    if (len > SP_PG_DEAD_PAYLOAD_MAX_BYTES)
        len = SP_PG_DEAD_PAYLOAD_MAX_BYTES;
    d->payload = malloc(len ? len : 1);
    if (!d->payload)
        return TG_ENOMEM;
    if (len)
        memcpy(d->payload, payload, len);
    d->len = len;
    snprintf(d->reason, sizeof(d->reason), "%s", reason ? reason : "invalid");
    d->partition = partition;
    d->offset = offset;
    b->ndead++;
    return batch_note_offset(b, partition, offset);
}

void sp_pg_batch_drop_partition(struct sp_pg_batch *b, int32_t partition)
{
    int j = 0;

    for (int i = 0; i < b->nev; i++) {
        if (b->ev[i].partition == partition)
            continue; /* bytes stays as counted: it only makes the batch close early */
        if (i != j)
            b->ev[j] = b->ev[i];
        j++;
    }
    b->nev = j;
    j = 0;
    for (int i = 0; i < b->ndead; i++) {
        if (b->dead[i].partition == partition) {
            free(b->dead[i].payload);
            b->dead[i].payload = NULL;
            continue;
        }
        if (i != j) {
            b->dead[j] = b->dead[i];
            b->dead[i].payload = NULL;
        }
        j++;
    }
    b->ndead = j;
    j = 0;
    for (int i = 0; i < b->npart; i++) {
        if (b->part[i] == partition)
            continue;
        b->part[j] = b->part[i];
        b->first[j] = b->first[i];
        b->next[j] = b->next[i];
        j++;
    }
    b->npart = j;
}

int sp_pg_batch_full(const struct sp_pg_batch *b)
{
    return b->nev >= b->max_events || b->bytes + TG_EVENT_MAX_BYTES > b->max_bytes ||
           b->ndead >= SP_PG_DEAD_PER_BATCH_MAX || b->npart >= SP_PG_PARTITIONS_MAX;
}

int sp_pg_batch_events(const struct sp_pg_batch *b)
{
    return b->nev;
}

int sp_pg_batch_dead(const struct sp_pg_batch *b)
{
    return b->ndead;
}

int sp_pg_batch_messages(const struct sp_pg_batch *b)
{
    return b->nev + b->ndead;
}

int64_t sp_pg_batch_next_offset(const struct sp_pg_batch *b, int32_t partition)
{
    for (int i = 0; i < b->npart; i++)
        if (b->part[i] == partition)
            return b->next[i];
    return -1;
}

int sp_pg_batch_offsets(const struct sp_pg_batch *b, int32_t *parts, int64_t *next, int cap)
{
    int n = b->npart < cap ? b->npart : cap;
    for (int i = 0; i < n; i++) {
        parts[i] = b->part[i];
        next[i] = b->next[i];
    }
    return n;
}

/* Flush ------------------------------------------------------------------------------------------ */

/* One statement, one transaction. Parameters:
 *   $1..$30  spend_logs columns as arrays (see pg_build_events)
 *   $31..$34 dead letters: reason text[], payload bytea[], partition int[], offset bigint[]
 *   $35      topic
 *   $36..$37 consumer offsets: partition int[], next_offset bigint[]
 * Result: rows with t = 0 are the aggregates of inserted request rows (per minute, key, team,
 * model group); the single row with t = 1 carries the inserted and dead-letter counts. */
static const char pg_flush_sql[] =
    "WITH u AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::bigint[],"
    " $5::text[], $6::boolean[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],"
    " $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::integer[],"
    " $18::text[], $19::bigint[], $20::bigint[], $21::bigint[], $22::bigint[], $23::bigint[],"
    " $24::integer[], $25::integer[], $26::jsonb[], $27::jsonb[], $28::text[], $29::integer[],"
    " $30::bigint[]) AS x(call_id, kind, ts_start_ms, ts_end_ms, endpoint, stream, key_hash,"
    " key_alias, team_id, user_id, end_user, model_requested, model_group, deployment_id,"
    " provider, model, status, error_class, prompt_tokens, completion_tokens, cost_nusd,"
    " latency_ms, ttft_ms, attempts, fallbacks, trail, tags, trace_id, kafka_partition,"
    " kafka_offset)),"
    " ins AS (INSERT INTO spend_logs (call_id, kind, ts_start_ms, ts_end_ms, endpoint, stream,"
    " key_hash, key_alias, team_id, user_id, end_user, model_requested, model_group,"
    " deployment_id, provider, model, status, error_class, prompt_tokens, completion_tokens,"
    " cost_nusd, latency_ms, ttft_ms, attempts, fallbacks, trail, tags, trace_id,"
    " kafka_partition, kafka_offset)"
    " SELECT call_id, kind, ts_start_ms, ts_end_ms, endpoint, stream, key_hash, key_alias,"
    " team_id, user_id, end_user, model_requested, model_group, deployment_id, provider, model,"
    " status, error_class, prompt_tokens, completion_tokens, cost_nusd, latency_ms, ttft_ms,"
    " attempts, fallbacks, trail, tags, trace_id,"
    " kafka_partition, kafka_offset FROM u"
    " ON CONFLICT (call_id) DO NOTHING"
    " RETURNING kind, ts_end_ms, key_hash, team_id, model_group, deployment_id, status,"
    " prompt_tokens, completion_tokens, cost_nusd),"
    " agg AS (SELECT date '1970-01-01' + (ts_end_ms / 86400000)::integer AS day,"
    " (ts_end_ms / 60000) * 60000 AS minute_ms, key_hash, team_id, model_group, deployment_id,"
    " count(*)::bigint AS requests, count(*) FILTER (WHERE status >= 400)::bigint AS failures,"
    " sum(prompt_tokens)::bigint AS prompt_tokens,"
    " sum(completion_tokens)::bigint AS completion_tokens, sum(cost_nusd)::bigint AS cost_nusd"
    " FROM ins WHERE kind = 'request' GROUP BY 1, 2, 3, 4, 5, 6),"
    " daily AS (INSERT INTO spend_daily AS d (day, key_hash, team_id, model_group,"
    " deployment_id, requests, failures, prompt_tokens, completion_tokens, cost_nusd)"
    " SELECT day, key_hash, team_id, model_group, deployment_id, sum(requests), sum(failures),"
    " sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd) FROM agg"
    " GROUP BY day, key_hash, team_id, model_group, deployment_id"
    " ORDER BY day, key_hash, team_id, model_group, deployment_id"
    " ON CONFLICT (day, key_hash, team_id, model_group, deployment_id) DO UPDATE SET"
    " requests = d.requests + EXCLUDED.requests, failures = d.failures + EXCLUDED.failures,"
    " prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,"
    " completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,"
    " cost_nusd = d.cost_nusd + EXCLUDED.cost_nusd RETURNING 1),"
    " dl AS (INSERT INTO dead_letters (source, reason, payload, payload_bytes, kafka_partition,"
    " kafka_offset) SELECT $35::text, r, p, length(p), pa, o FROM unnest($31::text[],"
    " $32::bytea[], $33::integer[], $34::bigint[]) AS y(r, p, pa, o)"
    " ON CONFLICT (source, kafka_partition, kafka_offset) DO NOTHING RETURNING 1),"
    " offs AS (INSERT INTO consumer_offsets AS c (topic, partition, next_offset)"
    " SELECT $35::text, p, n FROM unnest($36::integer[], $37::bigint[]) AS z(p, n)"
    " ON CONFLICT (topic, partition) DO UPDATE SET"
    " next_offset = GREATEST(c.next_offset, EXCLUDED.next_offset), updated_at = now()"
    " RETURNING 1)"
    " SELECT 0, minute_ms, key_hash, team_id, model_group, sum(requests)::bigint,"
    " sum(failures)::bigint, sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,"
    " sum(cost_nusd)::bigint FROM agg GROUP BY minute_ms, key_hash, team_id, model_group"
    " UNION ALL SELECT 1, (SELECT count(*) FROM ins), NULL, NULL, NULL, (SELECT count(*) FROM dl),"
    " (SELECT count(*) FROM daily), (SELECT count(*) FROM offs), NULL, NULL";

/* Column indexes of the spend_logs arrays. */
enum {
    C_CALL_ID, C_KIND, C_TS_START, C_TS_END, C_ENDPOINT, C_STREAM, C_KEY_HASH, C_KEY_ALIAS,
    C_TEAM, C_USER, C_END_USER, C_MODEL_REQ, C_MODEL_GROUP, C_DEPLOYMENT, C_PROVIDER, C_MODEL,
    C_STATUS, C_ERROR_CLASS, C_PROMPT, C_COMPLETION, C_COST, C_LATENCY, C_TTFT, C_ATTEMPTS,
    C_FALLBACKS, C_TRAIL, C_TAGS, C_TRACE, C_PART, C_OFFSET,
    C_DL_REASON, C_DL_PAYLOAD, C_DL_PART, C_DL_OFFSET, C_OFF_PART, C_OFF_NEXT, C_TMP
};

/* A field of an event record (the binary COPY tuple written by rec_encode). */
struct rec_field {
    const char *p;
    int32_t len;         /* bytes */
};

static uint64_t be_get(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* rec_fields: the SP_PG_NCOLS fields of event i (records are written by this file only, so
 * their shape is trusted). */
static void rec_fields(const struct sp_pg_batch *b, int i, struct rec_field *f)
{
    const unsigned char *p = (const unsigned char *)b->rec.p + b->ev[i].rec_off + 2;

    for (int k = 0; k < SP_PG_NCOLS; k++) {
        f[k].len = (int32_t)be_get(p, 4);
        f[k].p = (const char *)p + 4;
        p += 4 + f[k].len;
    }
}

/* rec_int: a big-endian integer field of 1, 4 or 8 bytes, sign-extended. */
static int64_t rec_int(const struct rec_field *f)
{
    uint64_t v = be_get((const unsigned char *)f->p, f->len);
    if (f->len == 4)
        return (int64_t)(int32_t)(uint32_t)v;
    return (int64_t)v;
}

/* col_is_text: the column's record field is text (for the trail and tags: after jsonb's
 * version byte). */
static int col_is_text(int k)
{
    return k == C_KIND || k == C_ENDPOINT || (k >= C_KEY_HASH && k <= C_MODEL) ||
           k == C_ERROR_CLASS || k == C_TRAIL || k == C_TAGS || k == C_TRACE;
}

/* rec_uuid_text: a record's 16-byte call id in canonical text form (out: 37 bytes). */
static void rec_uuid_text(const struct rec_field *f, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)f->p;
    int o = 0;

    for (int i = 0; i < 16 && f->len == 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[u[i] >> 4];
        out[o++] = hex[u[i] & 15];
    }
    out[o] = '\0';
}

static int col_sep(struct dstr *d, int first)
{
    return first ? 0 : dstr_putc(d, ',');
}

/* build_trail: the trail as a JSON array into tmp. */
static int build_trail(struct dstr *tmp, const struct proto_event *ev)
{
    uint32_t n = ev->trail_len > PROTO_TRAIL_MAX ? PROTO_TRAIL_MAX : ev->trail_len;
    int rc = 0;

    dstr_reset(tmp);
    rc |= dstr_putc(tmp, '[');
    for (uint32_t i = 0; i < n; i++) {
        const struct proto_attempt *a = &ev->trail[i];
        if (i)
            rc |= dstr_putc(tmp, ',');
        rc |= dstr_put(tmp, "{\"group\":", 9);
        rc |= json_str(tmp, a->group);
        rc |= dstr_put(tmp, ",\"deployment_id\":", 17);
        rc |= json_str(tmp, a->deployment_id);
        rc |= dstr_printf(tmp, ",\"http_status\":%" PRId32 ",\"error_class\":", a->http_status);
        rc |= json_str(tmp, a->error_class);
        rc |= dstr_printf(tmp, ",\"latency_ms\":%" PRIu32 ",\"message\":", a->latency_ms);
        rc |= json_str(tmp, a->message);
        rc |= dstr_putc(tmp, '}');
    }
    rc |= dstr_putc(tmp, ']');
    return rc ? TG_ENOMEM : 0;
}

static int build_tags(struct dstr *tmp, const struct proto_event *ev)
{
    uint32_t n = ev->tags_len > PROTO_TAGS_MAX ? PROTO_TAGS_MAX : ev->tags_len;
    int rc = 0;

    dstr_reset(tmp);
    rc |= dstr_putc(tmp, '[');
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            rc |= dstr_putc(tmp, ',');
        rc |= json_str(tmp, ev->tags[i]);
    }
    rc |= dstr_putc(tmp, ']');
    return rc ? TG_ENOMEM : 0;
}

/* pg_build: fill the parameter arrays from events [ev_from, ev_to), dead letters
 * [dl_from, dl_to) and the offsets given. */
static int pg_build(struct sp_pg_batch *b, int ev_from, int ev_to, int dl_from, int dl_to,
                    const int32_t *opart, const int64_t *onext, int noff)
{
    struct dstr *c = b->col;
    int rc = 0;

    for (int k = 0; k < C_TMP; k++) {
        dstr_reset(&c[k]);
        rc |= dstr_putc(&c[k], '{');
    }
    for (int i = ev_from; i < ev_to; i++) {
        struct rec_field f[SP_PG_NCOLS];
        int first = i == ev_from;
        rec_fields(b, i, f);
        for (int k = 0; k < SP_PG_NCOLS; k++) {
            rc |= col_sep(&c[k], first);
            if (k == C_CALL_ID) {
                char id[40];
                rec_uuid_text(&f[k], id);
                rc |= arr_str(&c[k], id);
            } else if (k == C_TRAIL || k == C_TAGS)
                rc |= arr_strn(&c[k], f[k].p + 1, (size_t)f[k].len - 1);
            else if (col_is_text(k))
                rc |= arr_strn(&c[k], f[k].p, (size_t)f[k].len);
            else if (k == C_STREAM)
                rc |= dstr_putc(&c[k], rec_int(&f[k]) ? 't' : 'f');
            else
                rc |= dstr_printf(&c[k], "%" PRId64, rec_int(&f[k]));
        }
    }
    for (int i = dl_from; i < dl_to; i++) {
        const struct batch_dead *d = &b->dead[i];
        static const char hex[] = "0123456789abcdef";
        int first = i == dl_from;
        rc |= col_sep(&c[C_DL_REASON], first);
        rc |= col_sep(&c[C_DL_PAYLOAD], first);
        rc |= col_sep(&c[C_DL_PART], first);
        rc |= col_sep(&c[C_DL_OFFSET], first);
        rc |= arr_str(&c[C_DL_REASON], d->reason);
        /* bytea hex form inside an array element: "\\x..." */
        rc |= dstr_put(&c[C_DL_PAYLOAD], "\"\\\\x", 4);
        if (dstr_reserve(&c[C_DL_PAYLOAD], d->len * 2 + 2) < 0) {
            rc |= TG_ENOMEM;
        } else {
            for (size_t k = 0; k < d->len; k++) {
                unsigned char ch = (unsigned char)d->payload[k];
                c[C_DL_PAYLOAD].p[c[C_DL_PAYLOAD].len++] = hex[ch >> 4];
                c[C_DL_PAYLOAD].p[c[C_DL_PAYLOAD].len++] = hex[ch & 15];
            }
            c[C_DL_PAYLOAD].p[c[C_DL_PAYLOAD].len] = '\0';
        }
        rc |= dstr_putc(&c[C_DL_PAYLOAD], '"');
        rc |= dstr_printf(&c[C_DL_PART], "%" PRId32, d->partition);
        rc |= dstr_printf(&c[C_DL_OFFSET], "%" PRId64, d->offset);
    }
    for (int i = 0; i < noff; i++) {
        rc |= col_sep(&c[C_OFF_PART], i == 0);
        rc |= col_sep(&c[C_OFF_NEXT], i == 0);
        rc |= dstr_printf(&c[C_OFF_PART], "%" PRId32, opart[i]);
        rc |= dstr_printf(&c[C_OFF_NEXT], "%" PRId64, onext[i]);
    }
    for (int k = 0; k < C_TMP; k++)
        rc |= dstr_putc(&c[k], '}');
    return rc ? TG_ENOMEM : 0;
}

static int64_t res_i64(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return 0;
    return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* pg_flush_send: build and send the statement for the given ranges. */
static int pg_flush_send(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic, int ev_from,
                         int ev_to, int dl_from, int dl_to, const int32_t *opart,
                         const int64_t *onext, int noff)
{
    const char *values[37];
    uint64_t t0 = tg_now_mono_us();
    int rc;

    rc = pg_build(b, ev_from, ev_to, dl_from, dl_to, opart, onext, noff);
    if (rc < 0)
        return rc;
    for (int k = 0; k <= C_OFFSET; k++)
        values[k] = b->col[k].p;
    values[30] = b->col[C_DL_REASON].p;
    values[31] = b->col[C_DL_PAYLOAD].p;
    values[32] = b->col[C_DL_PART].p;
    values[33] = b->col[C_DL_OFFSET].p;
    values[34] = topic;
    values[35] = b->col[C_OFF_PART].p;
    values[36] = b->col[C_OFF_NEXT].p;
    TG_DEBUG("msg=\"flush build\" build_us=%llu events=%d",
             (unsigned long long)(tg_now_mono_us() - t0), ev_to - ev_from);
    /* libpq copies the parameters into its output buffer: values need not outlive this */
    return pg_send(pg, pg_flush_sql, 37, values, 0, pg->timeout_ms);
}

/* pg_flush_parse: add the statement's result (nev events sent) to res and b->incr. */
static void pg_flush_parse(struct sp_pg_batch *b, const PGresult *r, int nev,
                           struct sp_pg_flush_result *res)
{
    for (int i = 0; i < PQntuples(r); i++) {
        if (res_i64(r, i, 0) == 1) {
            int64_t ins = res_i64(r, i, 1);
            res->inserted += ins;
            res->duplicates += nev - ins;
            res->dead += res_i64(r, i, 5);
            continue;
        }
        if (!b->incr || b->nincr >= b->max_events)
            continue; /* cannot happen: at most one aggregate per inserted row */
        struct sp_pg_incr *in = &b->incr[b->nincr++];
        in->minute_ms = res_i64(r, i, 1);
        snprintf(in->key_hash, sizeof(in->key_hash), "%s", PQgetvalue(r, i, 2));
        snprintf(in->team_id, sizeof(in->team_id), "%s", PQgetvalue(r, i, 3));
        snprintf(in->model_group, sizeof(in->model_group), "%s", PQgetvalue(r, i, 4));
        in->requests = res_i64(r, i, 5);
        in->failures = res_i64(r, i, 6);
        in->prompt_tokens = res_i64(r, i, 7);
        in->completion_tokens = res_i64(r, i, 8);
        in->cost_nusd = res_i64(r, i, 9);
    }
}

/* pg_flush_range: one statement for the given ranges, waited for; adds to res and b->incr. */
static int pg_flush_range(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic, int ev_from,
                          int ev_to, int dl_from, int dl_to, const int32_t *opart,
                          const int64_t *onext, int noff, struct sp_pg_flush_result *res)
{
    PGresult *r = NULL;
    int rc;

    rc = pg_flush_send(pg, b, topic, ev_from, ev_to, dl_from, dl_to, opart, onext, noff);
    if (rc == 0)
        rc = pg_collect(pg, 1, &r);
    if (rc < 0)
        return rc;
    pg_flush_parse(b, r, ev_to - ev_from, res);
    PQclear(r);
    return 0;
}

/* pg_flush_one_by_one: Postgres refused the batch's data. Write each event alone; an event it
 * refuses becomes a dead letter (reason names the SQLSTATE); then the batch's own dead letters
 * and offsets. Still idempotent: every statement is. */
static int pg_flush_one_by_one(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                               struct sp_pg_flush_result *res)
{
    int rc;

    for (int i = 0; i < b->nev; i++) {
        int32_t p = b->ev[i].partition;
        int64_t n = b->ev[i].offset + 1;
        rc = pg_flush_range(pg, b, topic, i, i + 1, 0, 0, &p, &n, 1, res);
        if (rc == TG_EPROTO || rc == TG_EIO) {
            /* a rejected event: keep its text for inspection as a dead letter */
            char reason[SP_PG_DEAD_REASON_MAX];
            char payload[SP_PG_DEAD_PAYLOAD_MAX_BYTES];
            size_t len;
            struct sp_pg_batch one;
            snprintf(reason, sizeof(reason), "postgres rejected the event: sqlstate %s",
                     pg->sqlstate);
            {
                struct rec_field f[SP_PG_NCOLS];
                char id[40];
                rec_fields(b, i, f);
                rec_uuid_text(&f[C_CALL_ID], id);
                len = (size_t)snprintf(payload, sizeof(payload), "{\"call_id\":\"%s\"}", id);
            }
            memset(&one, 0, sizeof(one));
            one.max_events = 0;
            snprintf(one.dead[0].reason, sizeof(one.dead[0].reason), "%s", reason);
            one.dead[0].payload = payload;
            one.dead[0].len = len;
            one.dead[0].partition = p;
            one.dead[0].offset = b->ev[i].offset;
            one.ndead = 1;
            one.incr = NULL;
            rc = pg_flush_range(pg, &one, topic, 0, 0, 0, 1, &p, &n, 1, res);
            for (size_t k = 0; k < sizeof(one.col) / sizeof(one.col[0]); k++)
                free(one.col[k].p);
            if (rc == 0)
                res->rejected++;
        }
        if (rc < 0)
            return rc;
    }
    return pg_flush_range(pg, b, topic, 0, 0, 0, b->ndead, b->part, b->next, b->npart, res);
}

/* Fast path: binary COPY ------------------------------------------------------------------------ */

/* Text parameter arrays cost Postgres an array parse of every element and a text-to-type
 * conversion of every number; binary COPY hands it each field ready to store. The events go
 * into a session temp table, then a statement prepared once per connection moves them on:
 *   COPY sp_batch FROM STDIN (FORMAT binary); EXECUTE sp_flush(topic, partitions, offsets)
 * Both travel in ONE simple-query message, which Postgres runs as one implicit transaction:
 * the COPY, spend_logs, spend_daily and consumer_offsets commit together or not at all, and
 * ON COMMIT DELETE ROWS empties sp_batch at that commit (a rolled-back COPY leaves nothing).
 * Batches with dead letters take the parameter-array statement above (rare, and it has the
 * dead_letters insert). */
static const char pg_session_sql[] =
    "CREATE TEMP TABLE sp_batch (call_id uuid, kind text, ts_start_ms bigint,"
    " ts_end_ms bigint, endpoint text, stream boolean, key_hash text, key_alias text,"
    " team_id text, user_id text, end_user text, model_requested text, model_group text,"
    " deployment_id text, provider text, model text, status integer, error_class text,"
    " prompt_tokens bigint, completion_tokens bigint, cost_nusd bigint, latency_ms bigint,"
    " ttft_ms bigint, attempts integer, fallbacks integer, trail jsonb, tags jsonb,"
    " trace_id text, kafka_partition integer, kafka_offset bigint) ON COMMIT DELETE ROWS;"
    "PREPARE sp_flush (text, integer[], bigint[]) AS"
    " WITH ins AS (INSERT INTO spend_logs (call_id, kind, ts_start_ms, ts_end_ms, endpoint,"
    " stream, key_hash, key_alias, team_id, user_id, end_user, model_requested, model_group,"
    " deployment_id, provider, model, status, error_class, prompt_tokens, completion_tokens,"
    " cost_nusd, latency_ms, ttft_ms, attempts, fallbacks, trail, tags, trace_id,"
    " kafka_partition, kafka_offset)"
    " SELECT call_id, kind, ts_start_ms, ts_end_ms, endpoint, stream, key_hash,"
    " key_alias, team_id, user_id, end_user, model_requested, model_group, deployment_id,"
    " provider, model, status, error_class, prompt_tokens, completion_tokens, cost_nusd,"
    " latency_ms, ttft_ms, attempts, fallbacks, trail, tags, trace_id,"
    " kafka_partition, kafka_offset FROM sp_batch"
    " ON CONFLICT (call_id) DO NOTHING"
    " RETURNING kind, ts_end_ms, key_hash, team_id, model_group, deployment_id, status,"
    " prompt_tokens, completion_tokens, cost_nusd),"
    " agg AS (SELECT date '1970-01-01' + (ts_end_ms / 86400000)::integer AS day,"
    " (ts_end_ms / 60000) * 60000 AS minute_ms, key_hash, team_id, model_group, deployment_id,"
    " count(*)::bigint AS requests, count(*) FILTER (WHERE status >= 400)::bigint AS failures,"
    " sum(prompt_tokens)::bigint AS prompt_tokens,"
    " sum(completion_tokens)::bigint AS completion_tokens, sum(cost_nusd)::bigint AS cost_nusd"
    " FROM ins WHERE kind = 'request' GROUP BY 1, 2, 3, 4, 5, 6),"
    " daily AS (INSERT INTO spend_daily AS d (day, key_hash, team_id, model_group,"
    " deployment_id, requests, failures, prompt_tokens, completion_tokens, cost_nusd)"
    " SELECT day, key_hash, team_id, model_group, deployment_id, sum(requests), sum(failures),"
    " sum(prompt_tokens), sum(completion_tokens), sum(cost_nusd) FROM agg"
    " GROUP BY day, key_hash, team_id, model_group, deployment_id"
    " ORDER BY day, key_hash, team_id, model_group, deployment_id"
    " ON CONFLICT (day, key_hash, team_id, model_group, deployment_id) DO UPDATE SET"
    " requests = d.requests + EXCLUDED.requests, failures = d.failures + EXCLUDED.failures,"
    " prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,"
    " completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,"
    " cost_nusd = d.cost_nusd + EXCLUDED.cost_nusd RETURNING 1),"
    " offs AS (INSERT INTO consumer_offsets AS c (topic, partition, next_offset)"
    " SELECT $1, p, n FROM unnest($2, $3) AS z(p, n)"
    " ON CONFLICT (topic, partition) DO UPDATE SET"
    " next_offset = GREATEST(c.next_offset, EXCLUDED.next_offset), updated_at = now()"
    " RETURNING 1)"
    " SELECT 0, minute_ms, key_hash, team_id, model_group, sum(requests)::bigint,"
    " sum(failures)::bigint, sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,"
    " sum(cost_nusd)::bigint FROM agg GROUP BY minute_ms, key_hash, team_id, model_group"
    " UNION ALL SELECT 1, (SELECT count(*) FROM ins), NULL, NULL, NULL, 0::bigint,"
    " (SELECT count(*) FROM daily), (SELECT count(*) FROM offs), NULL, NULL";

#define SP_PG_COPY_CHUNK_BYTES 65536 /* PQputCopyData per call */

/* cp_*: append one field of a binary COPY tuple (int32 length, then the value, big-endian). */
static void cp_be(char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)(v & 0xff);
        v >>= 8;
    }
}

static int cp_int(struct dstr *d, int64_t v, int n)
{
    if (dstr_reserve(d, 4 + (size_t)n) < 0)
        return TG_ENOMEM;
    cp_be(d->p + d->len, (uint64_t)n, 4);
    cp_be(d->p + d->len + 4, (uint64_t)v, n);
    d->len += 4 + (size_t)n;
    return 0;
}

/* cp_textv: s as a text field, after version bytes ver (jsonb's binary form is the version
 * byte 1 and the JSON text); invalid UTF-8 bytes become '?' (as in arr_str), so the stored
 * value is the same on both paths and one bad byte cannot refuse the batch. */
static int cp_textv(struct dstr *d, const char *ver, size_t nver, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    size_t i = 0;
    char *o;

    if (dstr_reserve(d, 4 + nver + n) < 0)
        return TG_ENOMEM;
    cp_be(d->p + d->len, (uint64_t)(nver + n), 4);
    if (nver > 0)
        memcpy(d->p + d->len + 4, ver, nver);
    d->len += nver;
    o = d->p + d->len + 4;
    while (i < n) {
        size_t k;
        if (p[i] < 0x80) {
            o[i] = (char)p[i];
            i++;
            continue;
        }
        k = utf8_seq(p + i, n - i);
        if (k == 0) {
            o[i++] = '?';
            continue;
        }
        memcpy(o + i, p + i, k);
        i += k;
    }
    d->len += 4 + n;
    return 0;
}

static int cp_text(struct dstr *d, const char *s)
{
    return cp_textv(d, NULL, 0, s);
}

static int cp_jsonb(struct dstr *d, const char *json)
{
    return cp_textv(d, "\001", 1, json);
}

/* cp_uuid: a canonical UUID (8-4-4-4-12 hex) as 16 bytes; TG_EINVAL when s is not one. */
static int cp_uuid(struct dstr *d, const char *s)
{
    unsigned char u[16];

    if (tg_uuid_parse(s, u) != 0)
        return TG_EINVAL;
    if (dstr_reserve(d, 4 + 16) < 0)
        return TG_ENOMEM;
    cp_be(d->p + d->len, 16, 4);
    memcpy(d->p + d->len + 4, u, 16);
    d->len += 20;
    return 0;
}

/* rec_encode: append ev's binary COPY tuple (field count, then the 30 fields in sp_batch's
 * column order) to the batch's arena. Returns 0 or TG_ENOMEM. */
static int rec_encode(struct sp_pg_batch *b, const struct proto_event *ev, int32_t partition,
                      int64_t offset)
{
    struct dstr *d = &b->rec;
    struct dstr *tmp = &b->col[C_TMP];
    int rc = 0;

    if (dstr_reserve(d, 2) < 0)
        return TG_ENOMEM;
    cp_be(d->p + d->len, SP_PG_NCOLS, 2);
    d->len += 2;
    rc = cp_uuid(d, ev->call_id);
    if (rc == TG_EINVAL)
        return rc;
    rc |= cp_text(d, ev->kind == PROTO_KIND_COOLDOWN ? "cooldown" : "request");
    rc |= cp_int(d, ev->ts_start_ms, 8);
    rc |= cp_int(d, ev->ts_end_ms, 8);
    rc |= cp_text(d, ev->endpoint);
    rc |= cp_int(d, ev->stream ? 1 : 0, 1);
    rc |= cp_text(d, ev->key_hash);
    rc |= cp_text(d, ev->key_alias);
    rc |= cp_text(d, ev->team_id);
    rc |= cp_text(d, ev->user_id);
    rc |= cp_text(d, ev->end_user);
    rc |= cp_text(d, ev->model_requested);
    rc |= cp_text(d, ev->model_group);
    rc |= cp_text(d, ev->deployment_id);
    rc |= cp_text(d, ev->provider);
    rc |= cp_text(d, ev->model);
    rc |= cp_int(d, ev->status, 4);
    rc |= cp_text(d, ev->error_class);
    rc |= cp_int(d, ev->prompt_tokens, 8);
    rc |= cp_int(d, ev->completion_tokens, 8);
    rc |= cp_int(d, ev->cost_nusd, 8);
    rc |= cp_int(d, ev->latency_ms, 8);
    rc |= cp_int(d, ev->ttft_ms, 8);
    rc |= cp_int(d, ev->attempts, 4);
    rc |= cp_int(d, ev->fallbacks, 4);
    rc |= build_trail(tmp, ev);
    rc |= cp_jsonb(d, tmp->p);
    rc |= build_tags(tmp, ev);
    rc |= cp_jsonb(d, tmp->p);
    rc |= cp_text(d, ev->trace_id);
    rc |= cp_int(d, partition, 4);
    rc |= cp_int(d, offset, 8);
    return rc ? TG_ENOMEM : 0;
}

/* copy_put: n bytes of the COPY stream, waiting (deadline) while libpq's buffer is full.
 * Returns 0, -1 (connection broken) or -2 (deadline). */
static int copy_put(struct sp_pg *pg, const char *p, size_t n)
{
    for (;;) {
        int w = PQputCopyData(pg->conn, p, (int)n);
        if (w < 0)
            return -1;
        if (w == 1)
            return 0;
        /* nonblocking and the buffer is full: let the socket drain */
        if (pg_wait(pg->conn, POLLOUT, pg->deadline_ms) < 0)
            return -2;
        if (PQflush(pg->conn) < 0)
            return -1;
    }
}

/* copy_stream: the binary COPY stream of the batch's events, straight from the arena: header,
 * the records of the events still held (a revoked partition's records stay in the arena,
 * unused; adjacent records go out together, up to SP_PG_COPY_CHUNK_BYTES), trailer.
 * Returns 0, -1 (connection broken) or -2 (deadline). */
static int copy_stream(struct sp_pg *pg, const struct sp_pg_batch *b)
{
    static const char head[19] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0',
                                  0, 0, 0, 0, 0, 0, 0, 0}; /* signature, flags, extension */
    static const char trailer[2] = {'\377', '\377'};     /* field count -1 */
    size_t run_off = 0;
    size_t run_len = 0;
    int rc = copy_put(pg, head, sizeof(head));

    for (int i = 0; rc == 0 && i < b->nev; i++) {
        const struct batch_event *e = &b->ev[i];

        if (run_len > 0 && e->rec_off == run_off + run_len &&
            run_len + e->rec_len <= SP_PG_COPY_CHUNK_BYTES) {
            run_len += e->rec_len;
            continue;
        }
        if (run_len > 0)
            rc = copy_put(pg, b->rec.p + run_off, run_len);
        run_off = e->rec_off;
        run_len = e->rec_len;
    }
    if (rc == 0 && run_len > 0)
        rc = copy_put(pg, b->rec.p + run_off, run_len);
    if (rc == 0)
        rc = copy_put(pg, trailer, sizeof(trailer));
    return rc;
}

/* pg_session: the temp table and the prepared statement of the fast path on this connection
 * (once per connection: a reconnect clears session_ready). Returns 0 or a tg_err. */
static int pg_session(struct sp_pg *pg)
{
    PGresult *r = NULL;
    int rc;

    if (pg->conn && pg->session_ready && PQstatus(pg->conn) == CONNECTION_OK)
        return 0;
    rc = pg_run(pg, pg_session_sql, 0, NULL, 1, pg->timeout_ms, &r);
    if (rc < 0)
        return rc;
    PQclear(r);
    pg->session_ready = 1;
    return 0;
}

/* pg_push: flush libpq's output buffer to the server before the deadline; 0 or a tg_err
 * (the connection is dropped on error). */
static int pg_push(struct sp_pg *pg)
{
    for (;;) {
        int f = PQflush(pg->conn);
        if (f == 0)
            return 0;
        if (f < 0 || pg_wait(pg->conn, POLLOUT | POLLIN, pg->deadline_ms) < 0 ||
            !PQconsumeInput(pg->conn))
            break;
    }
    if (tg_now_mono_ms() >= pg->deadline_ms) {
        TG_WARN_RL("msg=\"postgres query timed out\" timeout_ms=%d", pg->timeout_used_ms);
        pg_abandon(pg);
        return TG_ETIMEOUT;
    }
    pg_close(pg);
    return TG_EUNAVAIL;
}

/* Direct path: COPY straight into spend_logs ---------------------------------------------------- */

/* Redelivered events are rare (a restart, a rebalance, the router's spool replay): a batch
 * usually holds only new call ids. Such a batch is written as
 *   COPY spend_logs FROM STDIN (FORMAT binary); INSERT INTO spend_daily ... ON CONFLICT DO
 *   UPDATE; INSERT INTO consumer_offsets ... ON CONFLICT DO UPDATE
 * in one simple-query message (one implicit transaction), with the spend_daily groups and the
 * Redis increments folded here from the batch's records: no temp table, no speculative
 * insertion, no RETURNING, and COPY's multi-row inserts. A call id that is already stored
 * fails the COPY with unique_violation: nothing was written, and the batch goes through the
 * temp-table statement (ON CONFLICT DO NOTHING RETURNING), which counts only new rows. */

static const char direct_copy_sql[] =
    "COPY spend_logs (call_id, kind, ts_start_ms, ts_end_ms, endpoint, stream, key_hash,"
    " key_alias, team_id, user_id, end_user, model_requested, model_group, deployment_id,"
    " provider, model, status, error_class, prompt_tokens, completion_tokens, cost_nusd,"
    " latency_ms, ttft_ms, attempts, fallbacks, trail, tags, trace_id, kafka_partition,"
    " kafka_offset) FROM STDIN (FORMAT binary);";

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;

    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int field_eq(const struct rec_field *a, const struct rec_field *b)
{
    return a->len == b->len && memcmp(a->p, b->p, (size_t)a->len) == 0;
}

/* fold_ready: an empty table with room for n groups. Returns 0 or TG_ENOMEM. */
static int fold_ready(struct fold **fp, size_t n)
{
    struct fold *f = *fp;
    size_t cap = 64;

    while (cap < n * 2)
        cap *= 2;
    if (!f) {
        f = calloc(1, sizeof(*f));
        if (!f)
            return TG_ENOMEM;
        *fp = f;
    }
    if (f->cap < cap) {
        struct fold_ent *e = malloc(cap * sizeof(*e));
        if (!e)
            return TG_ENOMEM;
        free(f->e);
        f->e = e;
        f->cap = cap;
    }
    for (size_t i = 0; i < f->cap; i++)
        f->e[i].rec = -1;
    f->n = 0;
    return 0;
}

/* fold_add: add event i (fields f) to the group (t, the fields named in cols) of table fd. */
static void fold_add(struct fold *fd, const struct sp_pg_batch *b, int i,
                     const struct rec_field *f, int64_t t, const int *cols, int ncols)
{
    uint64_t h = fnv(14695981039346656037ull, &t, sizeof(t));
    size_t j;

    for (int k = 0; k < ncols; k++) {
        h = fnv(h, f[cols[k]].p, (size_t)f[cols[k]].len);
        h = fnv(h, "", 1);
    }
    for (j = h & (fd->cap - 1);; j = (j + 1) & (fd->cap - 1)) {
        struct fold_ent *e = &fd->e[j];
        struct rec_field g[SP_PG_NCOLS];
        int same = 1;

        if (e->rec < 0) {
            memset(e, 0, sizeof(*e));
            e->h = h;
            e->rec = i;
            e->t = t;
            fd->n++;
            break;
        }
        if (e->h != h || e->t != t)
            continue;
        rec_fields(b, e->rec, g);
        for (int k = 0; k < ncols && same; k++)
            same = field_eq(&g[cols[k]], &f[cols[k]]);
        if (same)
            break;
    }
    fd->e[j].requests++;
    fd->e[j].failures += rec_int(&f[C_STATUS]) >= 400;
    fd->e[j].prompt += rec_int(&f[C_PROMPT]);
    fd->e[j].completion += rec_int(&f[C_COMPLETION]);
    fd->e[j].cost += rec_int(&f[C_COST]);
}

static void copy_field(char *dst, size_t cap, const struct rec_field *f)
{
    size_t n = (size_t)f->len < cap - 1 ? (size_t)f->len : cap - 1;

    memcpy(dst, f->p, n);
    dst[n] = '\0';
}

/* direct_fold: the batch's request events grouped by (day, key, team, model group,
 * deployment) into pg->daily and by (minute, key, team, model group) into b->incr, as the
 * temp-table statement does in SQL. Returns 0 or TG_ENOMEM. */
static int direct_fold(struct sp_pg *pg, struct sp_pg_batch *b)
{
    static const int dcols[] = {C_KEY_HASH, C_TEAM, C_MODEL_GROUP, C_DEPLOYMENT};
    static const int mcols[] = {C_KEY_HASH, C_TEAM, C_MODEL_GROUP};

    if (fold_ready(&pg->daily, (size_t)b->nev) < 0 || fold_ready(&pg->minute, (size_t)b->nev) < 0)
        return TG_ENOMEM;
    for (int i = 0; i < b->nev; i++) {
        struct rec_field f[SP_PG_NCOLS];
        int64_t ts;

        rec_fields(b, i, f);
        if (f[C_KIND].len != 7 || memcmp(f[C_KIND].p, "request", 7) != 0)
            continue;
        ts = rec_int(&f[C_TS_END]);
        fold_add(pg->daily, b, i, f, ts / 86400000, dcols, 4);
        fold_add(pg->minute, b, i, f, (ts / 60000) * 60000, mcols, 3);
    }
    b->nincr = 0;
    for (size_t j = 0; j < pg->minute->cap && b->incr; j++) {
        const struct fold_ent *e = &pg->minute->e[j];
        struct rec_field g[SP_PG_NCOLS];
        struct sp_pg_incr *in;

        if (e->rec < 0 || b->nincr >= b->max_events)
            continue;
        rec_fields(b, e->rec, g);
        in = &b->incr[b->nincr++];
        in->minute_ms = e->t;
        copy_field(in->key_hash, sizeof(in->key_hash), &g[C_KEY_HASH]);
        copy_field(in->team_id, sizeof(in->team_id), &g[C_TEAM]);
        copy_field(in->model_group, sizeof(in->model_group), &g[C_MODEL_GROUP]);
        in->requests = e->requests;
        in->failures = e->failures;
        in->prompt_tokens = e->prompt;
        in->completion_tokens = e->completion;
        in->cost_nusd = e->cost;
    }
    return 0;
}

/* put_lit: s (n bytes) as an SQL string literal. Returns 0 or TG_ENOMEM. */
static int put_lit(struct sp_pg *pg, struct dstr *q, const char *s, size_t n)
{
    char *lit = PQescapeLiteral(pg->conn, s, n);
    int rc;

    if (!lit)
        return TG_ENOMEM;
    rc = dstr_put(q, lit, strlen(lit));
    PQfreemem(lit);
    return rc;
}

/* direct_sql: the statements after the COPY into q: the spend_daily upsert of pg->daily (in
 * key order, as the temp-table statement, so that writers lock rows in the same order) and
 * the consumer_offsets upsert. Returns 0 or TG_ENOMEM. */
static int direct_sql(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                      struct dstr *q)
{
    static const int scols[] = {C_KEY_HASH, C_TEAM, C_MODEL_GROUP, C_DEPLOYMENT};
    const struct fold *fd = pg->daily;
    int rc = 0;

    dstr_reset(q);
    rc |= dstr_put(q, direct_copy_sql, sizeof(direct_copy_sql) - 1);
    if (fd->n > 0) {
        /* one array per column (day numbers, the four strings, the five sums), each group
         * appended to all ten in one pass; b->col[0..9] are free while this batch is sent */
        struct dstr *arr = b->col;

        for (int k = 0; k < 10; k++) {
            dstr_reset(&arr[k]);
            rc |= dstr_putc(&arr[k], '{');
        }
        int first = 1;

        for (size_t j = 0; j < fd->cap; j++) {
            const struct fold_ent *e = &fd->e[j];
            const int64_t sums[6] = {e->t, e->requests, e->failures, e->prompt, e->completion,
                                     e->cost};
            struct rec_field g[SP_PG_NCOLS];

            if (e->rec < 0)
                continue;
            rec_fields(b, e->rec, g);
            for (int k = 0; k < 10; k++)
                rc |= col_sep(&arr[k], first);
            first = 0;
            for (int k = 0; k < 4; k++)
                rc |= arr_strn(&arr[1 + k], g[scols[k]].p, (size_t)g[scols[k]].len);
            rc |= dstr_printf(&arr[0], "%" PRId64, sums[0]);
            for (int k = 1; k < 6; k++)
                rc |= dstr_printf(&arr[4 + k], "%" PRId64, sums[k]);
        }
        rc |= dstr_puts(q, "INSERT INTO spend_daily AS d (day, key_hash, team_id, model_group,"
                           " deployment_id, requests, failures, prompt_tokens,"
                           " completion_tokens, cost_nusd) SELECT date '1970-01-01' + dn, kh, tm,"
                           " mg, dp, rq, fl, pt, ct, cs FROM unnest(");
        for (int k = 0; k < 10; k++) {
            rc |= dstr_putc(&arr[k], '}');
            if (k > 0)
                rc |= dstr_putc(q, ',');
            rc |= put_lit(pg, q, arr[k].p, arr[k].len);
            rc |= dstr_puts(q, k == 0 ? "::integer[]" : k <= 4 ? "::text[]" : "::bigint[]");
        }
        rc |= dstr_puts(q, ") AS z(dn, kh, tm, mg, dp, rq, fl, pt, ct, cs) ORDER BY 1, 2, 3, 4, 5"
                           " ON CONFLICT (day, key_hash, team_id, model_group, deployment_id)"
                           " DO UPDATE SET requests = d.requests + EXCLUDED.requests,"
                           " failures = d.failures + EXCLUDED.failures,"
                           " prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,"
                           " completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,"
                           " cost_nusd = d.cost_nusd + EXCLUDED.cost_nusd;");
    }
    rc |= dstr_puts(q, "INSERT INTO consumer_offsets AS c (topic, partition, next_offset) SELECT ");
    rc |= put_lit(pg, q, topic, strlen(topic));
    rc |= dstr_puts(q, ", p, n FROM unnest('{");
    for (int i = 0; i < b->npart; i++) {
        rc |= col_sep(q, i == 0);
        rc |= dstr_printf(q, "%" PRId32, b->part[i]);
    }
    rc |= dstr_puts(q, "}'::integer[], '{");
    for (int i = 0; i < b->npart; i++) {
        rc |= col_sep(q, i == 0);
        rc |= dstr_printf(q, "%" PRId64, b->next[i]);
    }
    rc |= dstr_puts(q, "}'::bigint[]) AS z(p, n) ON CONFLICT (topic, partition) DO UPDATE SET"
                      " next_offset = GREATEST(c.next_offset, EXCLUDED.next_offset),"
                      " updated_at = now()");
    return rc ? TG_ENOMEM : 0;
}

/* pg_copy_send: send the fast-path query, wait for the server to accept the COPY, stream the
 * batch and end the COPY. The statement then runs; pg_collect gets its result. Returns 0 or a
 * tg_err; on error nothing was committed (the transaction cannot end before the COPY does). */
static int pg_copy_send(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic, int direct)
{
    struct dstr *q = &b->col[C_OFF_PART];
    char *lit = NULL;
    PGresult *r = NULL;
    int rc;

    pg->direct = direct;
    if (direct) {
        rc = sp_pg_connect(pg);
        if (rc == 0)
            rc = direct_fold(pg, b);
        if (rc == 0)
            rc = direct_sql(pg, b, topic, q);
        if (rc < 0)
            return rc;
        goto send;
    }
    rc = pg_session(pg);
    if (rc < 0)
        return rc;
    lit = PQescapeLiteral(pg->conn, topic, strlen(topic));
    if (!lit)
        return TG_ENOMEM;
    dstr_reset(q);
    rc |= dstr_put(q, "COPY sp_batch FROM STDIN (FORMAT binary);EXECUTE sp_flush(", 58);
    rc |= dstr_put(q, lit, strlen(lit));
    rc |= dstr_put(q, ",'{", 3);
    for (int i = 0; i < b->npart; i++) {
        rc |= col_sep(q, i == 0);
        rc |= dstr_printf(q, "%" PRId32, b->part[i]);
    }
    rc |= dstr_put(q, "}','{", 5);
    for (int i = 0; i < b->npart; i++) {
        rc |= col_sep(q, i == 0);
        rc |= dstr_printf(q, "%" PRId64, b->next[i]);
    }
    rc |= dstr_put(q, "}')", 3);
    PQfreemem(lit);
    if (rc)
        return TG_ENOMEM;
send:
    rc = pg_send(pg, q->p, 0, NULL, 1, pg->timeout_ms);
    if (rc < 0)
        return rc;
    /* the server runs the COPY statement and asks for the data */
    for (;;) {
        if (!PQconsumeInput(pg->conn))
            goto broken;
        if (!PQisBusy(pg->conn))
            break;
        if (pg_wait(pg->conn, POLLIN, pg->deadline_ms) < 0)
            goto timeout;
    }
    r = PQgetResult(pg->conn);
    if (!r || PQresultStatus(r) != PGRES_COPY_IN) {
        /* e.g. the session lost its temp table: start over on a new connection */
        rc = r ? pg_classify(pg, r) : TG_EUNAVAIL;
        TG_WARN_RL("msg=\"postgres refused the batch copy\" sqlstate=%s err=%s", pg->sqlstate,
                   tg_errname(rc));
        if (r)
            PQclear(r);
        pg_close(pg);
        return TG_EUNAVAIL;
    }
    PQclear(r);
    rc = copy_stream(pg, b);
    if (rc == -1)
        goto broken;
    if (rc == -2)
        goto timeout;
    for (;;) {
        int w = PQputCopyEnd(pg->conn, NULL);
        if (w < 0)
            goto broken;
        if (w == 1)
            break;
        if (pg_wait(pg->conn, POLLOUT, pg->deadline_ms) < 0)
            goto timeout;
        if (PQflush(pg->conn) < 0)
            goto broken;
    }
    return pg_push(pg);
timeout:
    TG_WARN_RL("msg=\"postgres query timed out\" timeout_ms=%d", pg->timeout_used_ms);
    pg_abandon(pg);
    return TG_ETIMEOUT;
broken:
    pg_close(pg);
    return TG_EUNAVAIL;
}

/* result_ranges: the offsets the committed batch covered, per partition. */
static void result_ranges(const struct sp_pg_batch *b, struct sp_pg_flush_result *res)
{
    res->parts = b->part;
    res->first = b->first;
    res->next = b->next;
    res->nparts = b->npart;
}

int sp_pg_batch_flush_start(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic)
{
    b->nincr = 0;
    b->copy_path = 0;
    if (b->nev > 0 && b->ndead == 0) {
        b->copy_path = 2;
        return pg_copy_send(pg, b, topic, 1);
    }
    return pg_flush_send(pg, b, topic, 0, b->nev, 0, b->ndead, b->part, b->next, b->npart);
}

int sp_pg_batch_flush_finish(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                             int block, struct sp_pg_flush_result *res)
{
    PGresult *r = NULL;
    int rc;

    memset(res, 0, sizeof(*res));
    rc = pg_collect(pg, block, &r);
    if (rc == TG_EAGAIN)
        return rc;
    if (b->copy_path == 2) {
        if (rc == 0) {
            /* every event went in: the fold computed before sending is the result */
            PQclear(r);
            res->inserted = b->nev;
            res->incr = b->incr;
            res->nincr = b->nincr;
            result_ranges(b, res);
            res->in_doubt = pg->in_doubt;
            pg->in_doubt = 0;
            return 0;
        }
        b->nincr = 0;
        if (rc == TG_EPROTO) {
            /* a call id already stored (or data Postgres refused): nothing was written; the
             * temp-table statement counts only new rows (and goes one by one if need be) */
            b->copy_path = 1;
            rc = pg_copy_send(pg, b, topic, 0);
            if (rc < 0)
                return rc;
            return sp_pg_batch_flush_finish(pg, b, topic, block, res);
        }
    }
    b->nincr = 0;
    if (rc == 0) {
        pg_flush_parse(b, r, b->nev, res);
        PQclear(r);
    } else if (rc == TG_EIO && b->copy_path) {
        /* not the data and not the connection (e.g. the session's prepared statement is
         * gone): retry on a fresh connection, which prepares the session again */
        pg_close(pg);
    } else if (rc == TG_EPROTO) {
        TG_WARN("msg=\"batch refused by postgres, writing events one by one\" sqlstate=%s "
                "events=%d",
                pg->sqlstate, b->nev);
        memset(res, 0, sizeof(*res));
        rc = pg_flush_one_by_one(pg, b, topic, res);
    }
    if (rc < 0) {
        memset(res, 0, sizeof(*res));
        b->nincr = 0;
        return rc;
    }
    res->incr = b->incr;
    res->nincr = b->nincr;
    result_ranges(b, res);
    res->in_doubt = pg->in_doubt;
    pg->in_doubt = 0;
    return 0;
}

int sp_pg_batch_flush(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                      struct sp_pg_flush_result *res)
{
    int rc;

    memset(res, 0, sizeof(*res));
    rc = sp_pg_batch_flush_start(pg, b, topic);
    if (rc < 0)
        return rc;
    return sp_pg_batch_flush_finish(pg, b, topic, 1, res);
}

/* Queries ------------------------------------------------------------------------------------------ */

int sp_pg_offsets_load(struct sp_pg *pg, const char *topic, const int32_t *parts, int n,
                       int64_t *next)
{
    struct dstr arr = {0};
    const char *values[2];
    PGresult *r = NULL;
    int rc = 0;

    for (int i = 0; i < n; i++)
        next[i] = -1;
    rc |= dstr_putc(&arr, '{');
    for (int i = 0; i < n; i++) {
        rc |= col_sep(&arr, i == 0);
        rc |= dstr_printf(&arr, "%" PRId32, parts[i]);
    }
    rc |= dstr_putc(&arr, '}');
    if (rc) {
        rc = TG_ENOMEM;
        goto out;
    }
    values[0] = topic;
    values[1] = arr.p;
    rc = pg_exec(pg,
                 "SELECT partition, next_offset FROM consumer_offsets WHERE topic = $1 AND"
                 " partition = ANY($2::integer[])",
                 2, values, &r);
    if (rc < 0)
        goto out;
    for (int row = 0; row < PQntuples(r); row++) {
        int32_t p = (int32_t)res_i64(r, row, 0);
        for (int i = 0; i < n; i++)
            if (parts[i] == p)
                next[i] = res_i64(r, row, 1);
    }
    PQclear(r);
out:
    free(arr.p);
    return rc;
}

int sp_pg_api_key_upsert(struct sp_pg *pg, const struct sp_pg_key *k)
{
    char budget[32];
    char period[32];
    const char *values[7];
    PGresult *r = NULL;
    int rc;

    snprintf(budget, sizeof(budget), "%" PRId64, k->max_budget_nusd);
    snprintf(period, sizeof(period), "%" PRId64, k->budget_period_s);
    values[0] = k->key_hash;
    values[1] = k->key_alias;
    values[2] = k->team_id;
    values[3] = k->user_id;
    values[4] = k->max_budget_nusd >= 0 ? budget : NULL;
    values[5] = k->budget_period_s > 0 ? period : NULL;
    values[6] = k->metadata_json ? k->metadata_json : "{}";
    rc = pg_exec(pg,
                 "INSERT INTO api_keys (key_hash, key_alias, team_id, user_id, max_budget_nusd,"
                 " budget_duration_s, metadata) VALUES ($1, $2, $3, $4, $5::bigint, $6::bigint,"
                 " $7::jsonb) ON CONFLICT (key_hash) DO UPDATE SET key_alias = EXCLUDED.key_alias,"
                 " team_id = EXCLUDED.team_id, user_id = EXCLUDED.user_id,"
                 " max_budget_nusd = EXCLUDED.max_budget_nusd,"
                 " budget_duration_s = EXCLUDED.budget_duration_s, metadata = EXCLUDED.metadata,"
                 " updated_at = now()",
                 7, values, &r);
    if (rc == 0)
        PQclear(r);
    return rc;
}

int sp_pg_api_key_delete(struct sp_pg *pg, const char *key_hash)
{
    const char *values[1] = {key_hash};
    PGresult *r = NULL;
    int rc = pg_exec(pg, "DELETE FROM api_keys WHERE key_hash = $1", 1, values, &r);
    if (rc == 0)
        PQclear(r);
    return rc;
}

/* Totals per subject since a time. A period that starts at midnight UTC is summed from
 * spend_daily (cheap); any other start from spend_logs (indexed by subject and ts_end_ms). */
static const char pg_totals_key_sql[] =
    "SELECT u.i, coalesce(sum(t.requests), 0)::bigint, coalesce(sum(t.failures), 0)::bigint,"
    " coalesce(sum(t.prompt_tokens), 0)::bigint, coalesce(sum(t.completion_tokens), 0)::bigint,"
    " coalesce(sum(t.cost_nusd), 0)::bigint"
    " FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(subject, since, i)"
    " LEFT JOIN LATERAL ("
    "  SELECT d.requests, d.failures, d.prompt_tokens, d.completion_tokens, d.cost_nusd"
    "  FROM spend_daily d WHERE u.since % 86400000 = 0 AND d.key_hash = u.subject"
    "  AND d.day >= date '1970-01-01' + (u.since / 86400000)::integer"
    "  UNION ALL"
    "  SELECT 1, (s.status >= 400)::integer, s.prompt_tokens, s.completion_tokens, s.cost_nusd"
    "  FROM spend_logs s WHERE u.since % 86400000 <> 0 AND s.key_hash = u.subject"
    "  AND s.ts_end_ms >= u.since AND s.kind = 'request') t ON true"
    " GROUP BY u.i ORDER BY u.i";

static const char pg_totals_team_sql[] =
    "SELECT u.i, coalesce(sum(t.requests), 0)::bigint, coalesce(sum(t.failures), 0)::bigint,"
    " coalesce(sum(t.prompt_tokens), 0)::bigint, coalesce(sum(t.completion_tokens), 0)::bigint,"
    " coalesce(sum(t.cost_nusd), 0)::bigint"
    " FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(subject, since, i)"
    " LEFT JOIN LATERAL ("
    "  SELECT d.requests, d.failures, d.prompt_tokens, d.completion_tokens, d.cost_nusd"
    "  FROM spend_daily d WHERE u.since % 86400000 = 0 AND d.team_id = u.subject"
    "  AND d.day >= date '1970-01-01' + (u.since / 86400000)::integer"
    "  UNION ALL"
    "  SELECT 1, (s.status >= 400)::integer, s.prompt_tokens, s.completion_tokens, s.cost_nusd"
    "  FROM spend_logs s WHERE u.since % 86400000 <> 0 AND s.team_id = u.subject"
    "  AND s.ts_end_ms >= u.since AND s.kind = 'request') t ON true"
    " GROUP BY u.i ORDER BY u.i";

int sp_pg_totals_since(struct sp_pg *pg, int by_team, const char *const *subject,
                       const int64_t *since_ms, int n, struct sp_pg_totals *out)
{
    struct dstr subj = {0};
    struct dstr since = {0};
    const char *values[2];
    PGresult *r = NULL;
    int rc = 0;

    memset(out, 0, sizeof(*out) * (size_t)n);
    if (n == 0)
        return 0;
    rc |= dstr_putc(&subj, '{');
    rc |= dstr_putc(&since, '{');
    for (int i = 0; i < n; i++) {
        rc |= col_sep(&subj, i == 0);
        rc |= col_sep(&since, i == 0);
        rc |= arr_str(&subj, subject[i]);
        rc |= dstr_printf(&since, "%" PRId64, since_ms[i]);
    }
    rc |= dstr_putc(&subj, '}');
    rc |= dstr_putc(&since, '}');
    if (rc) {
        rc = TG_ENOMEM;
        goto out;
    }
    values[0] = subj.p;
    values[1] = since.p;
    rc = pg_exec(pg, by_team ? pg_totals_team_sql : pg_totals_key_sql, 2, values, &r);
    if (rc < 0)
        goto out;
    for (int row = 0; row < PQntuples(r); row++) {
        int64_t i = res_i64(r, row, 0) - 1;
        if (i < 0 || i >= n)
            continue;
        out[i].requests = res_i64(r, row, 1);
        out[i].failures = res_i64(r, row, 2);
        out[i].prompt_tokens = res_i64(r, row, 3);
        out[i].completion_tokens = res_i64(r, row, 4);
        out[i].cost_nusd = res_i64(r, row, 5);
    }
    PQclear(r);
out:
    free(subj.p);
    free(since.p);
    return rc;
}

int sp_pg_snapshot_begin(struct sp_pg *pg, const char *topic, char *offsets, size_t cap)
{
    const char *values[1] = {topic};
    PGresult *r = NULL;
    int rc;

    offsets[0] = '\0';
    rc = pg_exec(pg, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, &r);
    if (rc < 0)
        return rc;
    PQclear(r);
    pg->snap_gen = pg->conn_gen;
    /* the transaction's snapshot is taken by its first query: this one */
    rc = pg_exec(pg,
                 "SELECT coalesce(string_agg(partition || ':' || next_offset, ','"
                 " ORDER BY partition), '') FROM consumer_offsets WHERE topic = $1",
                 1, values, &r);
    if (rc < 0)
        return rc;
    if (pg->conn_gen != pg->snap_gen || PQntuples(r) != 1 ||
        (size_t)PQgetlength(r, 0, 0) >= cap) {
        PQclear(r);
        sp_pg_snapshot_end(pg);
        return TG_EUNAVAIL;
    }
    memcpy(offsets, PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0) + 1);
    PQclear(r);
    return 0;
}

int sp_pg_snapshot_end(struct sp_pg *pg)
{
    PGresult *r = NULL;
    int rc;

    if (pg->conn == NULL || pg->conn_gen != pg->snap_gen) {
        /* the connection was replaced: what was read did not all come from the snapshot */
        pg_close(pg);
        return TG_EUNAVAIL;
    }
    rc = pg_exec(pg, "COMMIT", 0, NULL, &r);
    if (rc < 0)
        return rc;
    PQclear(r);
    return pg->conn_gen == pg->snap_gen ? 0 : TG_EUNAVAIL;
}

int sp_pg_day_totals(struct sp_pg *pg, const char *day, sp_pg_totals_fn fn, void *ctx)
{
    const char *values[1] = {day};
    PGresult *r = NULL;
    int rc;

    rc = pg_exec(pg,
                 "SELECT 'key', key_hash, sum(requests)::bigint, sum(failures)::bigint,"
                 " sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,"
                 " sum(cost_nusd)::bigint FROM spend_daily WHERE day = $1::date AND key_hash <> ''"
                 " GROUP BY key_hash"
                 " UNION ALL SELECT 'team', team_id, sum(requests)::bigint, sum(failures)::bigint,"
                 " sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,"
                 " sum(cost_nusd)::bigint FROM spend_daily WHERE day = $1::date AND team_id <> ''"
                 " GROUP BY team_id"
                 " UNION ALL SELECT 'model', model_group, sum(requests)::bigint,"
                 " sum(failures)::bigint, sum(prompt_tokens)::bigint,"
                 " sum(completion_tokens)::bigint, sum(cost_nusd)::bigint FROM spend_daily"
                 " WHERE day = $1::date AND model_group <> '' GROUP BY model_group",
                 1, values, &r);
    if (rc < 0)
        return rc;
    for (int row = 0; row < PQntuples(r); row++) {
        struct sp_pg_totals t;
        t.requests = res_i64(r, row, 2);
        t.failures = res_i64(r, row, 3);
        t.prompt_tokens = res_i64(r, row, 4);
        t.completion_tokens = res_i64(r, row, 5);
        t.cost_nusd = res_i64(r, row, 6);
        fn(ctx, PQgetvalue(r, row, 0), PQgetvalue(r, row, 1), &t);
    }
    PQclear(r);
    return 0;
}

int sp_pg_budget_raise(struct sp_pg *pg, const char *kind, const char *subject,
                       int64_t period_start_ms, int level, int *raised)
{
    char period[32];
    char lvl[16];
    const char *values[4];
    PGresult *r = NULL;
    int rc;

    *raised = 0;
    snprintf(period, sizeof(period), "%" PRId64, period_start_ms);
    snprintf(lvl, sizeof(lvl), "%d", level);
    values[0] = kind;
    values[1] = subject;
    values[2] = period;
    values[3] = lvl;
    rc = pg_exec(pg,
                 "INSERT INTO budget_state AS b (kind, subject, period_start_ms, level_pct)"
                 " VALUES ($1, $2, $3::bigint, $4::integer) ON CONFLICT (kind, subject) DO UPDATE"
                 " SET period_start_ms = EXCLUDED.period_start_ms,"
                 " level_pct = EXCLUDED.level_pct, updated_at = now()"
                 " WHERE b.period_start_ms < EXCLUDED.period_start_ms OR"
                 " (b.period_start_ms = EXCLUDED.period_start_ms AND"
                 " b.level_pct < EXCLUDED.level_pct) RETURNING 1",
                 4, values, &r);
    if (rc < 0)
        return rc;
    *raised = PQntuples(r) > 0;
    PQclear(r);
    return 0;
}

int sp_pg_budget_set_blocked(struct sp_pg *pg, const char *kind, const char *subject,
                             int64_t period_start_ms, int blocked)
{
    char period[32];
    const char *values[4];
    PGresult *r = NULL;
    int rc;

    snprintf(period, sizeof(period), "%" PRId64, period_start_ms);
    values[0] = kind;
    values[1] = subject;
    values[2] = period;
    values[3] = blocked ? "t" : "f";
    rc = pg_exec(pg,
                 "INSERT INTO budget_state AS b (kind, subject, period_start_ms, level_pct,"
                 " blocked_period_ms) VALUES ($1, $2, $3::bigint, 0,"
                 " CASE WHEN $4::boolean THEN $3::bigint END) ON CONFLICT (kind, subject) DO"
                 " UPDATE SET blocked_period_ms = CASE WHEN $4::boolean THEN $3::bigint END,"
                 " updated_at = now()",
                 4, values, &r);
    if (rc == 0)
        PQclear(r);
    return rc;
}

int sp_pg_budget_blocked(struct sp_pg *pg, sp_pg_blocked_fn fn, void *ctx)
{
    PGresult *r = NULL;
    int rc;

    rc = pg_exec(pg,
                 "SELECT kind, subject, blocked_period_ms FROM budget_state"
                 " WHERE blocked_period_ms IS NOT NULL",
                 0, NULL, &r);
    if (rc < 0)
        return rc;
    for (int row = 0; row < PQntuples(r); row++)
        fn(ctx, PQgetvalue(r, row, 0), PQgetvalue(r, row, 1), res_i64(r, row, 2));
    PQclear(r);
    return 0;
}

int sp_pg_day_top(struct sp_pg *pg, const char *day, int per_dim, sp_pg_totals_fn fn, void *ctx,
                  int64_t *total_cost, int64_t *total_requests)
{
    char cap[16];
    const char *values[2];
    PGresult *r = NULL;
    int rc;

    *total_cost = 0;
    *total_requests = 0;
    snprintf(cap, sizeof(cap), "%d", per_dim);
    values[0] = day;
    values[1] = cap;
    rc = pg_exec(
        pg,
        "WITH d AS (SELECT * FROM spend_daily WHERE day = $1::date),"
        " k AS (SELECT 'key'::text AS dim, coalesce(nullif(a.key_alias, ''), left(d.key_hash, 12))"
        "  AS name, sum(d.requests) AS rq, sum(d.failures) AS fl,"
        "  sum(d.prompt_tokens + d.completion_tokens) AS tk, sum(d.cost_nusd) AS c FROM d"
        "  LEFT JOIN api_keys a ON a.key_hash = d.key_hash WHERE d.key_hash <> '' GROUP BY 2"
        "  ORDER BY c DESC LIMIT $2::integer),"
        " t AS (SELECT 'team'::text, team_id, sum(requests), sum(failures),"
        "  sum(prompt_tokens + completion_tokens), sum(cost_nusd) AS c FROM d"
        "  WHERE team_id <> '' GROUP BY 2 ORDER BY c DESC LIMIT $2::integer),"
        " m AS (SELECT 'model'::text, model_group, sum(requests), sum(failures),"
        "  sum(prompt_tokens + completion_tokens), sum(cost_nusd) AS c FROM d"
        "  WHERE model_group <> '' GROUP BY 2 ORDER BY c DESC LIMIT $2::integer)"
        " SELECT 'total', '', coalesce(sum(requests), 0)::bigint, 0::bigint, 0::bigint,"
        "  coalesce(sum(cost_nusd), 0)::bigint FROM d"
        " UNION ALL SELECT * FROM k UNION ALL SELECT * FROM t UNION ALL SELECT * FROM m",
        2, values, &r);
    if (rc < 0)
        return rc;
    for (int row = 0; row < PQntuples(r); row++) {
        struct sp_pg_totals t;
        memset(&t, 0, sizeof(t));
        t.requests = res_i64(r, row, 2);
        t.failures = res_i64(r, row, 3);
        t.prompt_tokens = res_i64(r, row, 4);
        t.cost_nusd = res_i64(r, row, 5);
        if (strcmp(PQgetvalue(r, row, 0), "total") == 0) {
            *total_cost = t.cost_nusd;
            *total_requests = t.requests;
            continue;
        }
        fn(ctx, PQgetvalue(r, row, 0), PQgetvalue(r, row, 1), &t);
    }
    PQclear(r);
    return 0;
}

int sp_pg_spend_log_json(struct sp_pg *pg, const char *call_id, struct tg_buf *out)
{
    const char *values[1] = {call_id};
    PGresult *r = NULL;
    int rc;

    rc = pg_exec(pg, "SELECT row_to_json(s)::text FROM spend_logs s WHERE call_id = $1::uuid", 1,
                 values, &r);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return TG_ENOTFOUND;
    }
    tg_buf_puts(out, PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

int sp_pg_spend_report_json(struct sp_pg *pg, const char *group_by, const char *from,
                            const char *to, int row_cap, struct tg_buf *out)
{
    char cap[16];
    const char *values[4];
    PGresult *r = NULL;
    int rc;

    snprintf(cap, sizeof(cap), "%d", row_cap);
    values[0] = group_by;
    values[1] = from;
    values[2] = to;
    values[3] = cap;
    rc = pg_exec(
        pg,
        "WITH g AS (SELECT CASE $1::text WHEN 'key' THEN key_hash WHEN 'team' THEN team_id"
        " ELSE model_group END AS subject, sum(requests)::bigint AS requests,"
        " sum(failures)::bigint AS failures, sum(prompt_tokens)::bigint AS prompt_tokens,"
        " sum(completion_tokens)::bigint AS completion_tokens, sum(cost_nusd)::bigint AS"
        " cost_nusd FROM spend_daily WHERE day BETWEEN $2::date AND $3::date GROUP BY 1),"
        " t AS (SELECT * FROM g ORDER BY cost_nusd DESC, subject LIMIT $4::integer)"
        " SELECT json_build_object('group_by', $1::text, 'from', $2::text, 'to', $3::text,"
        " 'rows', coalesce((SELECT json_agg(t ORDER BY t.cost_nusd DESC, t.subject) FROM t),"
        " '[]'::json), 'truncated', (SELECT count(*) FROM g) > $4::integer)::text",
        4, values, &r);
    if (rc < 0)
        return rc;
    tg_buf_puts(out, PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "{}");
    PQclear(r);
    return 0;
}
