/* pg_sink: the connection (lazy connect, queries sent asynchronously and waited for against a
 * deadline, cancel on timeout) and the text helpers the other files of the module share. The
 * schema is in pg_schema.c, batches in pg_batch.c (their two write paths in pg_rows.c and
 * pg_copy.c, the direct path's fold in pg_fold.c), reads in pg_query.c. */
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

#include "pg_int.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"
#include "tg_utf8.h"

/* Only one cancel request in flight at a time: PQcancel blocks while the server is stopped,
 * so it runs on a detached thread and a second timeout does not start another. */
static _Atomic int pg_cancel_busy;

/* dstr ----------------------------------------------------------------------------------------- */

int sp_pg_dstr_grow(struct dstr *d, size_t extra)
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

int sp_pg_dstr_put(struct dstr *d, const char *s, size_t n)
{
    if (sp_pg_dstr_reserve(d, n) < 0)
        return TG_ENOMEM;
    memcpy(d->p + d->len, s, n);
    d->len += n;
    d->p[d->len] = '\0';
    return 0;
}

int sp_pg_dstr_puts(struct dstr *d, const char *s)
{
    return sp_pg_dstr_put(d, s, strlen(s));
}

int sp_pg_dstr_printf(struct dstr *d, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return TG_EINVAL;
    return sp_pg_dstr_put(d, tmp, (size_t)n);
}

void sp_pg_dstr_reset(struct dstr *d)
{
    d->len = 0;
    if (d->p)
        d->p[0] = '\0';
}

/* quote_utf8: append the n bytes at s in double quotes, with a backslash before '"' and '\',
 * and '?' for each invalid UTF-8 byte (so that one bad byte can never make Postgres refuse a
 * whole batch). json: a JSON string, control bytes escaped too (\u00XX); otherwise a text[]
 * element, control bytes kept. Returns 0 or TG_ENOMEM. */
static int quote_utf8(struct dstr *d, const char *s, size_t n, int json)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    if (sp_pg_dstr_reserve(d, n * (json ? 6 : 2) + 3) < 0)
        return TG_ENOMEM;
    d->p[d->len++] = '"';
    while (i < n) {
        size_t k = tg_utf8_seq(p + i, n - i);
        if (k == 0) {
            d->p[d->len++] = '?';
            i++;
            continue;
        }
        if (p[i] == '"' || p[i] == '\\') {
            d->p[d->len++] = '\\';
            d->p[d->len++] = (char)p[i];
        } else if (json && p[i] < 0x20) {
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

/* sp_pg_arr_str: append s as a quoted array element (text[] literal), as quote_utf8. */
int sp_pg_arr_strn(struct dstr *d, const char *s, size_t n)
{
    return quote_utf8(d, s, n, 0);
}

int sp_pg_arr_str(struct dstr *d, const char *s)
{
    return sp_pg_arr_strn(d, s, strlen(s));
}

/* sp_pg_json_str: append s as a JSON string, as quote_utf8. */
int sp_pg_json_str(struct dstr *d, const char *s)
{
    return quote_utf8(d, s, strlen(s), 1);
}

int sp_pg_col_sep(struct dstr *d, int first)
{
    return first ? 0 : sp_pg_dstr_putc(d, ',');
}

int64_t sp_pg_res_i64(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return 0;
    return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* Connection ----------------------------------------------------------------------------------- */

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

void sp_pg_close(struct sp_pg *pg)
{
    if (pg->conn) {
        PQfinish(pg->conn);
        pg->conn = NULL;
    }
    pg->session_ready = 0;
}

void sp_pg_destroy(struct sp_pg **pgp)
{
    struct sp_pg *pg;

    if (!pgp || !*pgp)
        return;
    pg = *pgp;
    sp_pg_close(pg);
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

/* sp_pg_wait: poll the socket for events until deadline (monotonic ms). 0, or TG_ETIMEOUT/EIO. */
int sp_pg_wait(PGconn *conn, short events, uint64_t deadline_ms)
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
    sp_pg_close(pg);
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
        rc = sp_pg_wait(pg->conn, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
        if (rc < 0)
            goto fail;
        st = PQconnectPoll(pg->conn);
    }
    if (PQsetnonblocking(pg->conn, 1) != 0)
        goto fail;
    /* server notices ("... already exists, skipping") would go to stderr unformatted */
    PQsetNoticeProcessor(pg->conn, pg_notice_drop, NULL);
    pg->conn_gen++;
    return 0;
fail:
    TG_WARN_RL("msg=\"postgres connect failed\" status=%d reason=\"%s\"", (int)PQstatus(pg->conn),
               conn_reason(pg, reason, sizeof(reason)));
    sp_pg_close(pg);
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

/* sp_pg_abandon: the query ran out of time: ask the server to cancel it (in the background) and
 * drop the connection. Whatever the statement did is either committed or not; the flush is
 * idempotent, so a retry cannot double count. */
void sp_pg_abandon(struct sp_pg *pg)
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
    sp_pg_close(pg);
}

/* sp_pg_classify: map a failed result to a tg_err. Connection-class problems (08, 57, 53, 40)
 * mean "retry later"; data problems (22, 23) mean "this data will never go in". */
int sp_pg_classify(struct sp_pg *pg, PGresult *res)
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

/* sp_pg_send: send one query (extended protocol with text parameters when simple is 0, the simple
 * protocol otherwise) and push it to the server before the deadline (now + timeout_ms), which
 * also bounds sp_pg_collect. Returns 0 or TG_EUNAVAIL / TG_ETIMEOUT (connection dropped). */
int sp_pg_send(struct sp_pg *pg, const char *sql, int nparams, const char *const *values,
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
        sp_pg_close(pg);
        return TG_EUNAVAIL;
    }
    return sp_pg_push(pg);
}

int sp_pg_push(struct sp_pg *pg)
{
    for (;;) {
        int f = PQflush(pg->conn);
        if (f == 0)
            return 0;
        if (f < 0 || sp_pg_wait(pg->conn, POLLOUT | POLLIN, pg->deadline_ms) < 0 ||
            !PQconsumeInput(pg->conn))
            break;
    }
    if (tg_now_mono_ms() >= pg->deadline_ms) {
        TG_WARN_RL("msg=\"postgres query timed out\" timeout_ms=%d", pg->timeout_used_ms);
        sp_pg_abandon(pg);
        return TG_ETIMEOUT;
    }
    sp_pg_close(pg);
    return TG_EUNAVAIL;
}

/* sp_pg_collect: the results of the query sent by sp_pg_send. With block 0 it returns TG_EAGAIN at
 * once while the server is still working (the deadline still applies: past it the query is
 * abandoned). On success returns 0 and *out (new, PQclear) is the last result. */
int sp_pg_collect(struct sp_pg *pg, int block, PGresult **out)
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
            rc = sp_pg_wait(pg->conn, POLLIN, pg->deadline_ms);
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
        rc = sp_pg_classify(pg, last);
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
            sp_pg_close(pg);
        return rc;
    }
    *out = last;
    return 0;
timeout:
    if (last)
        PQclear(last);
    TG_WARN_RL("msg=\"postgres query timed out\" timeout_ms=%d", pg->timeout_used_ms);
    sp_pg_abandon(pg);
    return TG_ETIMEOUT;
broken:
    if (last)
        PQclear(last);
    pg->in_doubt = 1; /* the connection broke while the statement ran */
    sp_pg_close(pg);
    return TG_EUNAVAIL;
}

/* sp_pg_run: sp_pg_send then a blocking sp_pg_collect. */
int sp_pg_run(struct sp_pg *pg, const char *sql, int nparams, const char *const *values, int simple,
              int timeout_ms, PGresult **out)
{
    int rc;

    *out = NULL;
    rc = sp_pg_send(pg, sql, nparams, values, simple, timeout_ms);
    if (rc < 0)
        return rc;
    return sp_pg_collect(pg, 1, out);
}

int sp_pg_exec(struct sp_pg *pg, const char *sql, int nparams, const char *const *values,
               PGresult **out)
{
    return sp_pg_run(pg, sql, nparams, values, 0, pg->timeout_ms, out);
}
