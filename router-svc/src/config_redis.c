/* config_redis: tollgate.redis, the Redis through which replicas exchange limiter counts
 * (limsync.h), and LiteLLM's names for the same Redis: router_settings.redis_host,
 * redis_port, redis_password, and the REDIS_HOST / REDIS_PORT / REDIS_PASSWORD environment.
 *
 * tollgate.redis: {url: redis[s]://[USER[:PASSWORD]@]HOST[:PORT][/DB] (tg_redis_url.h),
 * username, password, tls: {ca_file, cert_file, key_file, server_name}, timeout_ms,
 * sync_interval_ms, sync_subjects_max}, the keys of spend-svc's redis section plus the sync's.
 * Precedence: tollgate.redis.url, then router_settings.redis_host, then REDIS_HOST; the sync's
 * own keys apply whichever names the server. Main thread (the loader's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_int.h"
#include "tg_err.h"
#include "tg_redis_url.h"
#include "tg_units.h"

struct redis_ctx {
    struct ld *ld;
    int tls; /* 1 while reading tollgate.redis.tls */
};

static int tls_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                   const char *p)
{
    struct ld *ld = ctx;
    struct rt_redis_conf *r = &ld->cfg->redis;

    (void)knode;
    if (strcmp(k, "ca_file") == 0)
        return tg_yaml_str(&ld->y, v, p, r->ca_file, sizeof(r->ca_file));
    if (strcmp(k, "cert_file") == 0)
        return tg_yaml_str(&ld->y, v, p, r->cert_file, sizeof(r->cert_file));
    if (strcmp(k, "key_file") == 0)
        return tg_yaml_str(&ld->y, v, p, r->key_file, sizeof(r->key_file));
    if (strcmp(k, "server_name") == 0)
        return tg_yaml_str(&ld->y, v, p, r->server_name, sizeof(r->server_name));
    return TG_YAML_UNKNOWN;
}

static int read_url(struct ld *ld, const yaml_node_t *v, const char *p)
{
    struct rt_redis_conf *r = &ld->cfg->redis;
    struct tg_redis_url u;

    if (tg_redis_url_read(&ld->y, v, p, &u) != 0)
        return TG_ECONFIG;
    r->enabled = 1;
    r->tls = u.tls;
    r->db = u.db;
    r->port = u.port;
    snprintf(r->host, sizeof(r->host), "%s", u.host);
    snprintf(ld->url_username, sizeof(ld->url_username), "%s", u.username);
    snprintf(ld->url_password, sizeof(ld->url_password), "%s", u.password);
    memset(&u, 0, sizeof(u));
    return 0;
}

static int redis_key(void *ctx, const char *k, const yaml_node_t *knode, yaml_node_t *v,
                     const char *p)
{
    struct ld *ld = ctx;
    struct rt_redis_conf *r = &ld->cfg->redis;
    int rc;

    (void)knode;
    if (strcmp(k, "url") == 0)
        return read_url(ld, v, p);
    if (strcmp(k, "username") == 0)
        return tg_yaml_str(&ld->y, v, p, r->username, sizeof(r->username));
    if (strcmp(k, "password") == 0)
        return tg_yaml_str(&ld->y, v, p, r->password, sizeof(r->password));
    if (strcmp(k, "tls") == 0) {
        ld->redis_tls_node = v;
        return tg_yaml_map(&ld->y, v, p, tls_key, ld);
    }
    if (strcmp(k, "timeout_ms") == 0) {
        rc = tg_yaml_u32(&ld->y, v, p, 60000, &r->timeout_ms);
        if (rc == 0 && r->timeout_ms < 10)
            rc = tg_yaml_fail(&ld->y, v, p, "expected 10..60000 (ms)");
        return rc;
    }
    if (strcmp(k, "sync_interval_ms") == 0) {
        rc = tg_yaml_u32(&ld->y, v, p, 60000, &r->sync_interval_ms);
        if (rc == 0 && r->sync_interval_ms < 10)
            rc = tg_yaml_fail(&ld->y, v, p, "expected 10..60000 (ms)");
        return rc;
    }
    if (strcmp(k, "sync_subjects_max") == 0) {
        rc = tg_yaml_u32(&ld->y, v, p, 1000000, &r->sync_subjects_max);
        if (rc == 0 && r->sync_subjects_max == 0)
            rc = tg_yaml_fail(&ld->y, v, p, "expected at least 1");
        return rc;
    }
    return TG_YAML_UNKNOWN;
}

int rt_config_parse_redis(struct ld *ld, yaml_node_t *n, const char *path)
{
    if (tg_yaml_is_null(n))
        return 0;
    ld->redis_node = n;
    return tg_yaml_map(&ld->y, n, path, redis_key, ld);
}

int rt_config_redis_litellm_key(struct ld *ld, const char *k, const yaml_node_t *v, const char *p)
{
    if (strcmp(k, "redis_host") == 0) {
        ld->ls_redis_node = v;
        return tg_yaml_is_null(v) ? 0 : tg_yaml_str(&ld->y, v, p, ld->ls_host, sizeof(ld->ls_host));
    }
    if (strcmp(k, "redis_port") == 0) {
        if (tg_yaml_is_null(v))
            return 0;
        if (tg_yaml_u32(&ld->y, v, p, 65535, &ld->ls_port) != 0)
            return TG_ECONFIG;
        return ld->ls_port == 0 ? tg_yaml_fail(&ld->y, v, p, "expected a port 1..65535") : 0;
    }
    if (strcmp(k, "redis_password") == 0)
        return tg_yaml_is_null(v) ? 0
                                  : tg_yaml_str(&ld->y, v, p, ld->ls_password,
                                                sizeof(ld->ls_password));
    return TG_YAML_UNKNOWN;
}

/* from_env: REDIS_HOST / REDIS_PORT / REDIS_PASSWORD, LiteLLM's variables, when nothing in the
 * file named a Redis. */
static int from_env(struct ld *ld)
{
    struct rt_redis_conf *r = &ld->cfg->redis;
    const char *host = getenv("REDIS_HOST");
    const char *port = getenv("REDIS_PORT");
    const char *pw = getenv("REDIS_PASSWORD");
    uint64_t n = 0;

    if (host == NULL || host[0] == '\0')
        return 0;
    if (strlen(host) >= sizeof(r->host))
        return tg_yaml_fail(&ld->y, NULL, "REDIS_HOST (environment)", "too long");
    if (port != NULL && port[0] != '\0' &&
        (tg_parse_u64(port, &n) != 0 || n == 0 || n > 65535))
        return tg_yaml_fail(&ld->y, NULL, "REDIS_PORT (environment)", "expected a port 1..65535");
    if (pw != NULL && strlen(pw) >= sizeof(r->password))
        return tg_yaml_fail(&ld->y, NULL, "REDIS_PASSWORD (environment)", "too long");
    r->enabled = 1;
    snprintf(r->host, sizeof(r->host), "%s", host);
    r->port = n != 0 ? (int)n : TG_REDIS_DEFAULT_PORT;
    if (r->password[0] == '\0' && pw != NULL)
        snprintf(r->password, sizeof(r->password), "%s", pw);
    return 0;
}

int rt_config_redis_finish(struct ld *ld)
{
    struct rt_redis_conf *r = &ld->cfg->redis;

    if (r->timeout_ms == 0)
        r->timeout_ms = RT_DEFAULT_REDIS_TIMEOUT_MS;
    if (r->sync_interval_ms == 0)
        r->sync_interval_ms = RT_DEFAULT_REDIS_SYNC_INTERVAL_MS;
    if (r->sync_subjects_max == 0)
        r->sync_subjects_max = RT_DEFAULT_REDIS_SYNC_SUBJECTS;
    if (r->enabled) {
        /* tollgate.redis.url: its credentials where username/password were not given */
        if (r->username[0] == '\0')
            snprintf(r->username, sizeof(r->username), "%s", ld->url_username);
        if (r->password[0] == '\0')
            snprintf(r->password, sizeof(r->password), "%s", ld->url_password);
    } else if (ld->ls_host[0] != '\0') {
        r->enabled = 1;
        snprintf(r->host, sizeof(r->host), "%s", ld->ls_host);
        r->port = ld->ls_port != 0 ? (int)ld->ls_port : TG_REDIS_DEFAULT_PORT;
        if (r->password[0] == '\0')
            snprintf(r->password, sizeof(r->password), "%s", ld->ls_password);
    } else if (ld->ls_port != 0 || ld->ls_password[0] != '\0') {
        return tg_yaml_fail(&ld->y, ld->ls_redis_node, "router_settings.redis_host",
                            "missing (redis_port / redis_password need a redis_host)");
    } else if (from_env(ld) != 0) {
        return TG_ECONFIG;
    }
    if (!r->enabled && ld->redis_node != NULL && !tg_yaml_is_null(ld->redis_node))
        return tg_yaml_fail(&ld->y, ld->redis_node, "tollgate.redis.url",
                            "missing (redis://HOST:PORT/DB or rediss://...)");
    if (ld->redis_tls_node != NULL && !r->tls)
        return tg_yaml_fail(&ld->y, ld->redis_tls_node, "tollgate.redis.tls",
                            "needs a rediss:// url (TLS)");
    if ((r->cert_file[0] == '\0') != (r->key_file[0] == '\0'))
        return tg_yaml_fail(&ld->y, ld->redis_tls_node, "tollgate.redis.tls",
                            "cert_file and key_file go together");
    return 0;
}
