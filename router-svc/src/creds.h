/* creds: short-lived tokens for the deployments that authenticate with one (Microsoft Entra ID
 * client credentials for azure/; the provider families describe the request and parse the
 * answer, providers/provider.h), fetched and refreshed on a thread of its own through a
 * standalone upstream (upstream.h), never on the request path.
 *
 * One slot per such deployment, fixed at creation (the config's count). A slot holds the current
 * token, its expiry and the last error. The refresher renews a token RT_CREDS_MARGIN_S before it
 * expires (half way through a shorter lifetime); a failed fetch is retried with a backoff of
 * RT_CREDS_RETRY_MIN_S doubling to RT_CREDS_RETRY_MAX_S while the old token, if any, serves until
 * its expiry. A request reads the token with rt_creds_token: a copy under a mutex that the
 * refresher holds only to store a token, never while it waits for an endpoint. A deployment
 * without a valid token fails its attempt at once with the reason (the call answers 503, or
 * retries elsewhere).
 *
 * Start-up: rt_creds_start waits, once, for every slot's first fetch to finish (successful or
 * not), at most first_wait_ms: requests are served with tokens from the first one.
 *
 * Threads: create/start/destroy on the main thread; rt_creds_token and rt_creds_stats from any
 * thread. */
#ifndef RT_CREDS_H
#define RT_CREDS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define RT_CREDS_FIRST_WAIT_MS 10000u           /* start-up wait for the first tokens */
#define RT_CREDS_MARGIN_S 300                   /* renew this long before expiry */
#define RT_CREDS_MIN_REFRESH_S 5                /* never renew sooner than this after a success */
#define RT_CREDS_RETRY_MIN_S 1                  /* backoff after a failed fetch, doubling ... */
#define RT_CREDS_RETRY_MAX_S 60                 /* ... up to this */
#define RT_CREDS_FETCH_TIMEOUT_MS 10000         /* one token request */
#define RT_CREDS_ANSWER_MAX_BYTES (64u * 1024u) /* a token endpoint's answer */
#define RT_CREDS_ERR_CAP 192                    /* the last error of a slot, bytes */

struct rt_creds;

/* rt_creds_create: the slots for cfg's deployments that need a token (borrowed cfg, outlives the
 * creds). Starts nothing. Returns new (rt_creds_destroy) or NULL with err. Main thread. */
struct rt_creds *rt_creds_create(const struct rt_config *cfg, char *err, size_t errlen);

/* rt_creds_slots: how many deployments need a token. */
size_t rt_creds_slots(const struct rt_creds *cr);

/* rt_creds_start: start the refresher (when there is a slot) and wait for every slot's first
 * fetch to finish, at most first_wait_ms. Returns 0, or TG_EIO when the thread or the upstream
 * could not start (err). Main thread, once. */
int rt_creds_start(struct rt_creds *cr, uint32_t first_wait_ms, char *err, size_t errlen);

/* rt_creds_token: the current token of deployment index di (of cfg) copied into out (cap bytes).
 * Returns 0; TG_ENOTFOUND when the deployment needs no token; TG_EAGAIN when it has none valid
 * now, with the reason in why (the last error, or that the first fetch has not finished). Never
 * waits for a fetch. Any thread. */
int rt_creds_token(struct rt_creds *cr, uint32_t di, char *out, size_t cap, char *why,
                   size_t whycap);

struct rt_creds_stats {
    uint64_t fetched; /* tokens obtained */
    uint64_t failed;  /* fetches that failed */
    uint64_t missing; /* rt_creds_token calls answered TG_EAGAIN */
};
void rt_creds_stats(struct rt_creds *cr, struct rt_creds_stats *out);

/* rt_creds_destroy: stop and join the refresher, wipe the tokens, free. Accepts NULL; sets *cr
 * to NULL. Main thread, after the HTTP front stopped. */
void rt_creds_destroy(struct rt_creds **cr);

#endif
