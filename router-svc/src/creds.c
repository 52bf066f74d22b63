/* creds: tokens refreshed off the request path. See creds.h. */
#include "creds.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/provider.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"
#include "upstream.h"

struct slot {
    uint32_t di;                          /* deployment index in cfg */
    const struct rt_deployment_conf *dep; /* borrowed */
    char token[RT_TOKEN_CAP];             /* "" when none */
    uint64_t expires_mono_ms;             /* token valid before this */
    uint64_t due_mono_ms;                 /* next fetch */
    uint32_t backoff_s;                   /* next retry delay after a failure */
    int first_done;                       /* the first fetch finished */
    char err[RT_CREDS_ERR_CAP];           /* last error, "" after a success */
};

/* One token request in flight (the refresher waits for it; upstream's loop thread ends it). */
struct fetch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    int err;
    long status;
    char *body; /* taken from the result */
    size_t body_len;
    char detail[128];
};

struct rt_creds {
    const struct rt_config *cfg;
    size_t n;
    struct slot *slots;
    int32_t *slot_of; /* per deployment: slot index or -1 */

    pthread_mutex_t lock; /* slots' tokens and schedule, stop, stats */
    pthread_cond_t cond;  /* wakes the refresher (stop) and the start-up waiter */
    int stop;
    int started;
    pthread_t thread;
    struct rt_upstream *up; /* the refresher's own (standalone: its own loop thread) */
    struct rt_creds_stats stats;
};

struct rt_creds *rt_creds_create(const struct rt_config *cfg, char *err, size_t errlen)
{
    struct rt_creds *cr = calloc(1, sizeof(*cr));
    size_t n = 0;

    if (cr == NULL)
        goto nomem;
    cr->cfg = cfg;
    pthread_mutex_init(&cr->lock, NULL);
    {
        /* deadlines on the monotonic clock (a wall-clock step must not stall a refresh) */
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&cr->cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    cr->slot_of = calloc(cfg->n_deployments > 0 ? cfg->n_deployments : 1, sizeof(*cr->slot_of));
    if (cr->slot_of == NULL)
        goto nomem;
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        cr->slot_of[i] = -1;
        if (rt_provider_needs_token(&cfg->deployments[i]))
            n++;
    }
    cr->slots = calloc(n > 0 ? n : 1, sizeof(*cr->slots));
    if (cr->slots == NULL)
        goto nomem;
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        if (!rt_provider_needs_token(&cfg->deployments[i]))
            continue;
        cr->slots[cr->n].di = i;
        cr->slots[cr->n].dep = &cfg->deployments[i];
        cr->slots[cr->n].backoff_s = RT_CREDS_RETRY_MIN_S;
        cr->slot_of[i] = (int32_t)cr->n;
        cr->n++;
    }
    return cr;
nomem:
    snprintf(err, errlen, "credentials: out of memory");
    rt_creds_destroy(&cr);
    return NULL;
}

size_t rt_creds_slots(const struct rt_creds *cr)
{
    return cr->n;
}

static void fetch_on_done(void *ud, struct rt_upstream_result *res)
{
    struct fetch *f = ud;

    pthread_mutex_lock(&f->lock);
    f->err = res->err;
    f->status = res->status;
    f->body = res->body; /* taken */
    f->body_len = res->body_len;
    res->body = NULL;
    snprintf(f->detail, sizeof(f->detail), "%s", res->detail);
    f->done = 1;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

static const struct rt_upstream_ops fetch_ops = {NULL, fetch_on_done};

/* One fetch for slot s (no lock held): the token into tok (cap bytes) and its lifetime, or an
 * error in err. Refresher thread. */
static int fetch_token(struct rt_creds *cr, const struct slot *s, char *tok, size_t cap,
                       int64_t *expires_in_s, char *err, size_t errlen)
{
    const struct rt_provider *p = s->dep->prov;
    struct rt_token_request tr;
    struct rt_upstream_request req;
    struct fetch f;
    uint64_t handle;
    int rc;

    memset(&tr, 0, sizeof(tr));
    rc = p->token_request(s->dep, (int64_t)(tg_now_epoch_ms() / 1000), &tr, err, errlen);
    if (rc != 0) {
        free(tr.body);
        return rc;
    }
    memset(&req, 0, sizeof(req));
    req.url = tr.url;
    for (int i = 0; i < tr.n_headers && i < RT_UPSTREAM_HEADERS_MAX; i++)
        req.headers[i] = tr.headers[i];
    req.body = tr.body; /* taken by submit */
    req.body_len = tr.body_len;
    req.timeout_ms = RT_CREDS_FETCH_TIMEOUT_MS;
    req.max_response_bytes = RT_CREDS_ANSWER_MAX_BYTES;
    memset(&f, 0, sizeof(f));
    pthread_mutex_init(&f.lock, NULL);
    pthread_cond_init(&f.cond, NULL);
    rc = rt_upstream_submit(cr->up, &req, &fetch_ops, &f, &handle);
    memset(&tr, 0, sizeof(tr)); /* header lines may hold a secret */
    if (rc != 0) {
        snprintf(err, errlen, "token request not sent: %s", tg_strerror(rc));
    } else {
        /* the upstream ends every transfer (its own timeout): wait for on_done */
        pthread_mutex_lock(&f.lock);
        while (!f.done)
            pthread_cond_wait(&f.cond, &f.lock);
        pthread_mutex_unlock(&f.lock);
        if (f.err != 0)
            snprintf(err, errlen, "token endpoint: %s%s%s", tg_strerror(f.err),
                     f.detail[0] != '\0' ? ": " : "", f.detail);
        else
            rc = p->token_parse((int)f.status, f.body, f.body_len, tok, cap, expires_in_s, err,
                                errlen);
        if (f.err != 0)
            rc = f.err;
        if (f.body != NULL) {
            memset(f.body, 0, f.body_len); /* it held a token */
            free(f.body);
        }
    }
    pthread_cond_destroy(&f.cond);
    pthread_mutex_destroy(&f.lock);
    return rc;
}

static void *refresher(void *arg)
{
    struct rt_creds *cr = arg;
    char tok[RT_TOKEN_CAP];
    char err[RT_CREDS_ERR_CAP];

    pthread_setname_np(pthread_self(), "tg-creds"); /* in top, perf and /proc/PID/task */
    pthread_mutex_lock(&cr->lock);
    while (!cr->stop) {
        uint64_t now = tg_now_mono_ms();
        struct slot *s = NULL;

        for (size_t i = 0; i < cr->n; i++) {
            if (s == NULL || cr->slots[i].due_mono_ms < s->due_mono_ms)
                s = &cr->slots[i];
        }
        if (s == NULL)
            break;
        if (s->due_mono_ms > now) {
            struct timespec ts;

            tg_mono_deadline(s->due_mono_ms - now, &ts);
            pthread_cond_timedwait(&cr->cond, &cr->lock, &ts);
            continue;
        }
        pthread_mutex_unlock(&cr->lock);
        {
            int64_t exp_s = 0;
            int rc;

            err[0] = '\0';
            rc = fetch_token(cr, s, tok, sizeof(tok), &exp_s, err, sizeof(err));
            now = tg_now_mono_ms();
            pthread_mutex_lock(&cr->lock);
            if (rc == 0) {
                int64_t in_s =
                    exp_s > 2 * RT_CREDS_MARGIN_S ? exp_s - RT_CREDS_MARGIN_S : exp_s / 2;

                if (in_s < RT_CREDS_MIN_REFRESH_S)
                    in_s = RT_CREDS_MIN_REFRESH_S;
                memcpy(s->token, tok, strlen(tok) + 1);
                s->expires_mono_ms = now + (uint64_t)exp_s * 1000u;
                s->due_mono_ms = now + (uint64_t)in_s * 1000u;
                s->backoff_s = RT_CREDS_RETRY_MIN_S;
                s->err[0] = '\0';
                cr->stats.fetched++;
            } else {
                snprintf(s->err, sizeof(s->err), "%s", err[0] != '\0' ? err : tg_strerror(rc));
                s->due_mono_ms = now + (uint64_t)s->backoff_s * 1000u;
                s->backoff_s = s->backoff_s * 2 > RT_CREDS_RETRY_MAX_S ? RT_CREDS_RETRY_MAX_S
                                                                       : s->backoff_s * 2;
                cr->stats.failed++;
                TG_WARN("msg=token_fetch_failed deployment=%s provider=%s retry_s=%u error=\"%s\"",
                        s->dep->id, s->dep->prov->name, s->backoff_s, s->err);
            }
            memset(tok, 0, sizeof(tok));
            s->first_done = 1;
            pthread_cond_broadcast(&cr->cond); /* the start-up waiter */
        }
    }
    pthread_mutex_unlock(&cr->lock);
    return NULL;
}

int rt_creds_start(struct rt_creds *cr, uint32_t first_wait_ms, char *err, size_t errlen)
{
    struct rt_upstream_config uc;
    struct timespec ts;
    char uerr[256];
    int all;

    if (cr->n == 0 || cr->started)
        return 0;
    memset(&uc, 0, sizeof(uc));
    uc.max_transfers = 4;
    uc.max_host_connections = 2;
    uc.max_total_connections = 4;
    uc.embedded = 0;
    uc.native = 1;
    cr->up = rt_upstream_create(&uc, uerr, sizeof(uerr));
    if (cr->up == NULL) {
        snprintf(err, errlen, "credentials: %s", uerr);
        return TG_EIO;
    }
    if (pthread_create(&cr->thread, NULL, refresher, cr) != 0) {
        snprintf(err, errlen, "credentials: cannot start the refresher thread");
        rt_upstream_destroy(&cr->up);
        return TG_EIO;
    }
    cr->started = 1;
    tg_mono_deadline(first_wait_ms, &ts);
    pthread_mutex_lock(&cr->lock);
    for (;;) {
        all = 1;
        for (size_t i = 0; i < cr->n; i++)
            all &= cr->slots[i].first_done;
        if (all || pthread_cond_timedwait(&cr->cond, &cr->lock, &ts) == ETIMEDOUT)
            break;
    }
    for (size_t i = 0; i < cr->n; i++) {
        const struct slot *s = &cr->slots[i];

        if (s->token[0] == '\0')
            TG_WARN("msg=no_token_at_start deployment=%s provider=%s error=\"%s\"", s->dep->id,
                    s->dep->prov->name, s->first_done ? s->err : "first fetch not finished");
    }
    pthread_mutex_unlock(&cr->lock);
    return 0;
}

int rt_creds_token(struct rt_creds *cr, uint32_t di, char *out, size_t cap, char *why,
                   size_t whycap)
{
    struct slot *s;
    int rc = 0;

    out[0] = '\0';
    if (cr == NULL || di >= cr->cfg->n_deployments || cr->slot_of[di] < 0)
        return TG_ENOTFOUND;
    pthread_mutex_lock(&cr->lock);
    s = &cr->slots[cr->slot_of[di]];
    if (s->token[0] != '\0' && s->expires_mono_ms > tg_now_mono_ms() && strlen(s->token) < cap) {
        memcpy(out, s->token, strlen(s->token) + 1);
    } else {
        rc = TG_EAGAIN;
        cr->stats.missing++;
        if (!s->first_done)
            snprintf(why, whycap, "the first token has not been fetched yet");
        else if (s->token[0] != '\0')
            snprintf(why, whycap, "the token expired and its refresh fails: %s", s->err);
        else
            snprintf(why, whycap, "%s", s->err);
    }
    pthread_mutex_unlock(&cr->lock);
    return rc;
}

void rt_creds_stats(struct rt_creds *cr, struct rt_creds_stats *out)
{
    pthread_mutex_lock(&cr->lock);
    *out = cr->stats;
    pthread_mutex_unlock(&cr->lock);
}

void rt_creds_destroy(struct rt_creds **crp)
{
    struct rt_creds *cr;

    if (crp == NULL || *crp == NULL)
        return;
    cr = *crp;
    if (cr->started) {
        pthread_mutex_lock(&cr->lock);
        cr->stop = 1;
        pthread_cond_broadcast(&cr->cond);
        pthread_mutex_unlock(&cr->lock);
        /* a fetch in flight ends when the upstream is shut down */
        rt_upstream_shutdown(cr->up);
        pthread_join(cr->thread, NULL);
    }
    rt_upstream_destroy(&cr->up);
    if (cr->slots != NULL) {
        memset(cr->slots, 0, cr->n * sizeof(*cr->slots)); /* tokens are secrets */
        free(cr->slots);
    }
    free(cr->slot_of);
    pthread_cond_destroy(&cr->cond);
    pthread_mutex_destroy(&cr->lock);
    free(cr);
    *crp = NULL;
}
