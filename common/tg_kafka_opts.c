#include "tg_kafka_opts.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "tg_err.h"
#include "tg_log.h"

#define PROBLEM_CAP 256 /* librdkafka's message about one property, bytes */

static const char *const protocols[] = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"};
#define TG_KAFKA_SCRAM_FIXED 0x020601ff /* librdkafka 2.6.1: SCRAM works with Kafka 4 */

static const char *const mechanisms[] = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512",
                                         "OAUTHBEARER"};

/* The dedicated keys: YAML section, key, librdkafka property, secret, a file to read. */
struct dedicated {
    const char *section; /* "sasl", "ssl", or "" for a key of kafka: itself */
    const char *key;
    const char *prop;
    int secret;
    int file;
};

static const struct dedicated dedicated[] = {
    {"", "security_protocol", "security.protocol", 0, 0},
    {"sasl", "mechanism", "sasl.mechanisms", 0, 0},
    {"sasl", "username", "sasl.username", 0, 0},
    {"sasl", "password", "sasl.password", 1, 0},
    {"ssl", "ca_file", "ssl.ca.location", 0, 1},
    {"ssl", "cert_file", "ssl.certificate.location", 0, 1},
    {"ssl", "key_file", "ssl.key.location", 0, 1},
    {"ssl", "key_password", "ssl.key.password", 1, 0},
};

#define N_DEDICATED (sizeof(dedicated) / sizeof(dedicated[0]))

/* The properties the services own: what their guarantees rest on (the spool and exactly-once
 * sink, offsets stored with the rows, the eager rebalance protocol their callbacks speak), and
 * what the config sets elsewhere. Aliases included. */
static const char *const owned[] = {"bootstrap.servers",
                                    "metadata.broker.list",
                                    "client.id",
                                    "group.id",
                                    "group.instance.id",
                                    "transactional.id",
                                    "enable.idempotence",
                                    "acks",
                                    "request.required.acks",
                                    "enable.auto.commit",
                                    "auto.commit.enable",
                                    "enable.auto.offset.store",
                                    "auto.offset.reset",
                                    "enable.partition.eof",
                                    "partition.assignment.strategy",
                                    "message.timeout.ms",
                                    "delivery.timeout.ms",
                                    "session.timeout.ms"};

int tg_kafka_opts_is_key(const char *key)
{
    return strcmp(key, "security_protocol") == 0 || strcmp(key, "sasl") == 0 ||
           strcmp(key, "ssl") == 0 || strcmp(key, "librdkafka") == 0;
}

static int secret_name(const char *name)
{
    return strstr(name, "password") != NULL || strstr(name, "secret") != NULL ||
           strcmp(name, "ssl.key.pem") == 0 || strcmp(name, "sasl.oauthbearer.config") == 0;
}

static void no_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    (void)level;
    (void)fac;
    (void)buf;
}

/* conf_set: rd_kafka_conf_set with the problem in why; a secret's value is never repeated
 * (librdkafka quotes a value it finds invalid). */
static int conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, int secret,
                    char *why, size_t whycap)
{
    char e[PROBLEM_CAP];
    rd_kafka_conf_res_t r = rd_kafka_conf_set(conf, name, value, e, sizeof(e));

    if (r == RD_KAFKA_CONF_OK)
        return 0;
    if (secret && r != RD_KAFKA_CONF_UNKNOWN)
        snprintf(why, whycap, "librdkafka refused the value of %s (not shown: a secret)", name);
    else
        snprintf(why, whycap, "%s", e);
    return TG_ECONFIG;
}

/* add: the property name = value, checked alone on a throwaway conf; errors at n under path. */
static int add(struct tg_kafka_opts *o, struct tg_yaml *y, const yaml_node_t *n, const char *path,
               const char *name, const char *value, int secret)
{
    size_t vlen = strlen(value);
    struct tg_kafka_opt *op;
    rd_kafka_conf_t *conf;
    char why[PROBLEM_CAP];
    int rc;

    if (o->n >= TG_KAFKA_OPTS_MAX)
        return tg_yaml_fail(y, n, path, "too many Kafka properties (max %d)", TG_KAFKA_OPTS_MAX);
    if (vlen + 1 > sizeof(o->text) - o->text_used)
        return tg_yaml_fail(y, n, path, "Kafka property values too long in all (max %d bytes)",
                            TG_KAFKA_OPT_TEXT_CAP);
    conf = rd_kafka_conf_new();
    if (conf == NULL)
        return tg_yaml_fail(y, n, path, "out of memory");
    rd_kafka_conf_set_log_cb(conf, no_log);
    rc = conf_set(conf, name, value, secret, why, sizeof(why));
    rd_kafka_conf_destroy(conf);
    if (rc != 0)
        return tg_yaml_fail(y, n, path, "%s", why);
    op = &o->opt[o->n++];
    snprintf(op->name, sizeof(op->name), "%s", name);
    op->value_off = o->text_used;
    op->secret = secret;
    memcpy(o->text + o->text_used, value, vlen + 1);
    o->text_used += (uint32_t)(vlen + 1);
    return 0;
}

static const char *value_of(const struct tg_kafka_opts *o, const char *name)
{
    for (uint32_t i = 0; i < o->n; i++) {
        if (strcmp(o->opt[i].name, name) == 0)
            return o->text + o->opt[i].value_off;
    }
    return NULL;
}

/* one_of: v is one of names[0..n) (any case); its canonical spelling into dst. */
static int one_of(const char *v, const char *const *names, size_t n, char *dst, size_t cap)
{
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(v, names[i]) == 0) {
            snprintf(dst, cap, "%s", names[i]);
            return 0;
        }
    }
    return -1;
}

static int parse_dedicated(struct tg_kafka_opts *o, struct tg_yaml *y, const yaml_node_t *n,
                           const char *section, const char *key, const char *path)
{
    const struct dedicated *d = NULL;
    const char *v = NULL;

    for (size_t i = 0; i < N_DEDICATED; i++) {
        if (strcmp(dedicated[i].section, section) == 0 && strcmp(dedicated[i].key, key) == 0)
            d = &dedicated[i];
    }
    if (d == NULL)
        return tg_yaml_fail(y, n, path, "unknown key (%s)",
                            strcmp(section, "sasl") == 0
                                ? "expected mechanism, username, password"
                                : "expected ca_file, cert_file, key_file, key_password");
    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    if (v[0] == '\0')
        return tg_yaml_fail(y, n, path, "empty");
    if (strcmp(key, "security_protocol") == 0) {
        if (one_of(v, protocols, 4, o->protocol, sizeof(o->protocol)) != 0)
            return tg_yaml_fail(y, n, path,
                                "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL");
        v = o->protocol;
    } else if (strcmp(key, "mechanism") == 0) {
        if (one_of(v, mechanisms, 4, o->mechanism, sizeof(o->mechanism)) != 0)
            return tg_yaml_fail(y, n, path,
                                "expected PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER");
        v = o->mechanism;
    } else if (d->file && access(v, R_OK) != 0) {
        return tg_yaml_fail(y, n, path, "cannot read %.200s: %s", v, strerror(errno));
    }
    return add(o, y, n, path, d->prop, v, d->secret);
}

static int parse_section(struct tg_kafka_opts *o, struct tg_yaml *y, const yaml_node_t *n,
                         const char *section, const char *path)
{
    char p[TG_YAML_PATH_MAX];

    if (tg_yaml_expect(y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(y, pair, path);

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
        if (parse_dedicated(o, y, tg_yaml_node(y, pair->value), section, k, p) != 0)
            return TG_ECONFIG;
    }
    return 0;
}

static int parse_passthrough(struct tg_kafka_opts *o, struct tg_yaml *y, const yaml_node_t *n,
                             const char *base, const char *path)
{
    char p[TG_YAML_PATH_MAX], q[TG_YAML_PATH_MAX];

    if (tg_yaml_expect(y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        const char *k = tg_yaml_key(y, pair, path);
        const yaml_node_t *kn = tg_yaml_node(y, pair->key);
        const char *v = NULL;

        if (k == NULL)
            return TG_ECONFIG;
        tg_yaml_path(p, path, k);
        if (strlen(k) >= TG_KAFKA_OPT_NAME_CAP)
            return tg_yaml_fail(y, kn, p, "No such configuration property (name over %d bytes)",
                                TG_KAFKA_OPT_NAME_CAP - 1);
        for (size_t i = 0; i < N_DEDICATED; i++) {
            if (strcmp(k, dedicated[i].prop) != 0 &&
                !(strcmp(k, "sasl.mechanism") == 0 && strcmp(dedicated[i].key, "mechanism") == 0))
                continue;
            tg_yaml_path(q, base, dedicated[i].section);
            if (dedicated[i].section[0] == '\0')
                snprintf(q, sizeof(q), "%s", base);
            return tg_yaml_fail(y, kn, p, "give it as %.200s.%s", q, dedicated[i].key);
        }
        for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
            if (strcmp(k, owned[i]) == 0)
                return tg_yaml_fail(y, kn, p,
                                    "owned by the service (its delivery and offset guarantees "
                                    "rest on it): not configurable");
        }
        if (strcmp(k, "plugin.library.paths") == 0)
            return tg_yaml_fail(y, kn, p, "refused: a plugin loads code into the service");
        if (tg_yaml_scalar(y, tg_yaml_node(y, pair->value), p, &v) != 0)
            return TG_ECONFIG;
        if (add(o, y, tg_yaml_node(y, pair->value), p, k, v, secret_name(k)) != 0)
            return TG_ECONFIG;
    }
    return 0;
}

/* check: the keys against each other, then a throwaway client from the whole set. */
static int check(struct tg_kafka_opts *o, struct tg_yaml *y, const yaml_node_t *kafka,
                 const yaml_node_t *sasl, const yaml_node_t *ssl, const char *path)
{
    int is_sasl = strncmp(o->protocol, "SASL_", 5) == 0;
    int is_ssl = strcmp(o->protocol, "SSL") == 0 || strcmp(o->protocol, "SASL_SSL") == 0;
    const char *proto = o->protocol[0] != '\0' ? o->protocol : "PLAINTEXT (the default)";
    const char *user = value_of(o, "sasl.username");
    const char *pass = value_of(o, "sasl.password");
    char p[TG_YAML_PATH_MAX];
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_t *rk;
    char e[512];

    if (sasl != NULL && !is_sasl) {
        tg_yaml_path(p, path, "sasl");
        return tg_yaml_fail(y, sasl, p,
                            "security_protocol is %s: SASL needs SASL_PLAINTEXT or SASL_SSL",
                            proto);
    }
    if (ssl != NULL && !is_ssl) {
        tg_yaml_path(p, path, "ssl");
        return tg_yaml_fail(y, ssl, p, "security_protocol is %s: TLS needs SSL or SASL_SSL",
                            proto);
    }
    tg_yaml_path(p, path, "sasl");
    if (is_sasl && o->mechanism[0] == '\0')
        return tg_yaml_fail(y, sasl != NULL ? sasl : kafka, p,
                            "mechanism missing: security_protocol %s needs sasl.mechanism "
                            "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)",
                            o->protocol);
    if (strcmp(o->mechanism, "OAUTHBEARER") == 0 && (user != NULL || pass != NULL))
        return tg_yaml_fail(y, sasl, p,
                            "username and password are not used by OAUTHBEARER (its settings "
                            "are the sasl.oauthbearer.* properties, under librdkafka)");
    if (o->mechanism[0] != '\0' && strcmp(o->mechanism, "OAUTHBEARER") != 0 &&
        (user == NULL || pass == NULL))
        return tg_yaml_fail(y, sasl, p, "mechanism %s needs a username and a password",
                            o->mechanism);
    /* librdkafka before 2.6.1 repeats the client nonce in SCRAM's final message, which Kafka 4
     * brokers refuse whatever the password (librdkafka#4895): say so before it happens */
    if (strncmp(o->mechanism, "SCRAM-", 6) == 0 && rd_kafka_version() < TG_KAFKA_SCRAM_FIXED)
        tg_yaml_warn(y, sasl, p,
                     "%s: this librdkafka (%s) cannot log in with SCRAM to Kafka 4 brokers "
                     "(fixed in 2.6.1); use PLAIN over SASL_SSL with them",
                     o->mechanism, rd_kafka_version_str());
    tg_yaml_path(p, path, "ssl");
    if ((value_of(o, "ssl.certificate.location") == NULL) !=
        (value_of(o, "ssl.key.location") == NULL))
        return tg_yaml_fail(y, ssl, p, "cert_file and key_file go together (a client certificate "
                                       "and its key)");
    if (o->n == 0)
        return 0;
    /* librdkafka checks the rest when a client is made: the mechanism is built in, the
     * certificates and the key load (with key_password). No broker is contacted. */
    conf = rd_kafka_conf_new();
    if (conf == NULL)
        return tg_yaml_fail(y, kafka, path, "out of memory");
    rd_kafka_conf_set_log_cb(conf, no_log);
    if (tg_kafka_opts_apply(o, conf, e, sizeof(e)) != 0) {
        rd_kafka_conf_destroy(conf);
        return tg_yaml_fail(y, kafka, path, "%s", e);
    }
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (rk == NULL) {
        rd_kafka_conf_destroy(conf);
        return tg_yaml_fail(y, kafka, path, "librdkafka refuses these settings: %s", e);
    }
    rd_kafka_destroy(rk);
    return 0;
}

int tg_kafka_opts_parse(struct tg_kafka_opts *o, struct tg_yaml *y, const yaml_node_t *kafka,
                        const char *path)
{
    const yaml_node_t *sasl = NULL, *ssl = NULL;
    char p[TG_YAML_PATH_MAX];

    memset(o, 0, sizeof(*o));
    if (tg_yaml_is_null(kafka))
        return 0;
    if (tg_yaml_expect(y, kafka, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(kafka, pair)
    {
        const char *k = tg_yaml_key(y, pair, path);
        const yaml_node_t *v = tg_yaml_node(y, pair->value);
        int rc = 0;

        if (k == NULL)
            return TG_ECONFIG;
        if (!tg_kafka_opts_is_key(k) || tg_yaml_is_null(v))
            continue;
        tg_yaml_path(p, path, k);
        if (strcmp(k, "security_protocol") == 0) {
            rc = parse_dedicated(o, y, v, "", k, p);
        } else if (strcmp(k, "sasl") == 0) {
            sasl = v;
            rc = parse_section(o, y, v, "sasl", p);
        } else if (strcmp(k, "ssl") == 0) {
            ssl = v;
            rc = parse_section(o, y, v, "ssl", p);
        } else {
            rc = parse_passthrough(o, y, v, path, p);
        }
        if (rc != 0)
            return TG_ECONFIG;
    }
    return check(o, y, kafka, sasl, ssl, path);
}

int tg_kafka_opts_apply(const struct tg_kafka_opts *o, struct rd_kafka_conf_s *conf, char *err,
                        size_t errlen)
{
    char why[PROBLEM_CAP];

    for (uint32_t i = 0; i < o->n; i++) {
        const struct tg_kafka_opt *op = &o->opt[i];

        if (conf_set(conf, op->name, o->text + op->value_off, op->secret, why, sizeof(why)) !=
            0) {
            snprintf(err, errlen, "%s: %s", op->name, why);
            return TG_ECONFIG;
        }
    }
    return 0;
}

size_t tg_kafka_opts_secrets(const struct tg_kafka_opts *o, const char **out, size_t cap)
{
    size_t n = 0;

    for (uint32_t i = 0; i < o->n; i++) {
        const char *v = o->text + o->opt[i].value_off;

        if (!o->opt[i].secret || v[0] == '\0')
            continue;
        if (n < cap)
            out[n] = v;
        n++;
    }
    return n;
}

const char *tg_kafka_opts_describe(const struct tg_kafka_opts *o, char *buf, size_t cap)
{
    snprintf(buf, cap, "security_protocol=%s sasl_mechanism=%s properties=%u",
             o->protocol[0] != '\0' ? o->protocol : "PLAINTEXT",
             o->mechanism[0] != '\0' ? o->mechanism : "none", o->n);
    return buf;
}

void tg_kafka_opts_wipe(struct tg_kafka_opts *o)
{
    memset(o, 0, sizeof(*o));
}

void tg_kafka_lasterr_init(struct tg_kafka_lasterr *e)
{
    pthread_mutex_init(&e->mu, NULL);
    e->text[0] = '\0';
}

void tg_kafka_lasterr_fini(struct tg_kafka_lasterr *e)
{
    pthread_mutex_destroy(&e->mu);
}

int tg_kafka_lasterr_note(struct tg_kafka_lasterr *e, int err, const char *reason, char *esc,
                          size_t esccap)
{
    const char *name = rd_kafka_err2name((rd_kafka_resp_err_t)err);

    tg_log_escape(esc, esccap, reason != NULL ? reason : "", reason != NULL ? strlen(reason) : 0);
    if (err != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        pthread_mutex_lock(&e->mu);
        snprintf(e->text, sizeof(e->text), "%.40s: %.200s", name, esc);
        pthread_mutex_unlock(&e->mu);
    }
    return err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || err == RD_KAFKA_RESP_ERR__TRANSPORT ||
           err == RD_KAFKA_RESP_ERR__AUTHENTICATION || err == RD_KAFKA_RESP_ERR__SSL;
}

const char *tg_kafka_lasterr_get(struct tg_kafka_lasterr *e, int up, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (up)
        return buf;
    pthread_mutex_lock(&e->mu);
    snprintf(buf, cap, "%s", e->text);
    pthread_mutex_unlock(&e->mu);
    return buf;
}
