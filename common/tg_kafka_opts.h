/* tg_kafka_opts: the Kafka client settings a user gives both services in their `kafka:` section
 * besides the brokers and topics: security (LiteLLM's names) and librdkafka properties passed
 * through.
 *
 *   security_protocol: PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
 *   sasl: {mechanism: PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER, username, password}
 *   ssl:  {ca_file, cert_file, key_file, key_password}
 *   librdkafka: {property: value}          anything else librdkafka knows
 *
 * Every value may be os.environ/NAME. Everything is checked at load, so `--check` finds it:
 * each property is set on a throwaway rd_kafka_conf_t (a misspelt property or a bad value is
 * `FILE:LINE: kafka.librdkafka.<prop>: <librdkafka's message>`), the keys are checked against
 * each other (SASL settings need a SASL protocol, PLAIN and SCRAM need a username and a
 * password, ...), the files named are readable, and when anything is set a throwaway client is
 * created from the whole set (librdkafka loads the certificates and checks the mechanism then).
 *
 * Refused under librdkafka: (a) the properties the dedicated keys set (security.protocol,
 * sasl.mechanisms, sasl.username, sasl.password, ssl.ca.location, ssl.certificate.location,
 * ssl.key.location, ssl.key.password): one way to say each thing; (b) the properties the
 * services own because their guarantees rest on them: bootstrap.servers, metadata.broker.list,
 * client.id, group.id, group.instance.id, transactional.id, enable.idempotence, acks,
 * request.required.acks, enable.auto.commit, auto.commit.enable, enable.auto.offset.store,
 * auto.offset.reset, enable.partition.eof, partition.assignment.strategy, message.timeout.ms,
 * delivery.timeout.ms, session.timeout.ms; (c) plugin.library.paths (it loads code while the
 * file is read). Setting callbacks is refused by
 * librdkafka itself. Every other property is applied after the service's own settings, so it
 * overrides a default such as linger.ms.
 *
 * Secrets (sasl.password, ssl.key_password, and librdkafka properties whose name holds
 * "password" or "secret", ssl.key.pem, sasl.oauthbearer.config) are never logged and are listed
 * by tg_kafka_opts_secrets for maskers; librdkafka's message about a secret's value is not
 * repeated either.
 *
 * Bounds: TG_KAFKA_OPTS_MAX properties, TG_KAFKA_OPT_TEXT_CAP bytes of values in all; more is a
 * configuration error naming the key.
 *
 * Also here (the one common module with librdkafka's header): tg_kafka_lasterr, below.
 *
 * Threads: parse on the loading thread; the loaded struct is plain data, read-only after. */
#ifndef TG_KAFKA_OPTS_H
#define TG_KAFKA_OPTS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tg_yaml.h"

struct rd_kafka_conf_s; /* librdkafka's rd_kafka_conf_t */

#define TG_KAFKA_OPTS_MAX 48          /* properties in all: the dedicated keys + librdkafka */
#define TG_KAFKA_OPT_NAME_CAP 64      /* a librdkafka property name, bytes incl. NUL */
#define TG_KAFKA_OPT_TEXT_CAP 16384   /* every value together, bytes incl. the NULs */

struct tg_kafka_opt {
    char name[TG_KAFKA_OPT_NAME_CAP]; /* librdkafka's property name */
    uint32_t value_off;               /* the value: text + value_off, NUL-terminated */
    int secret;                       /* 1: never logged, masked */
};

struct tg_kafka_opts {
    uint32_t n;                                   /* properties used in opt[] */
    struct tg_kafka_opt opt[TG_KAFKA_OPTS_MAX];
    uint32_t text_used;                           /* bytes of text[] used */
    char text[TG_KAFKA_OPT_TEXT_CAP];
    char protocol[16];  /* security_protocol as given (upper case), "" = librdkafka's PLAINTEXT */
    char mechanism[16]; /* sasl.mechanism, "" when none */
};

/* tg_kafka_opts_is_key: 1 when key (of a kafka: mapping) is one of security_protocol, sasl, ssl
 * or librdkafka: the services' own loaders skip those and call tg_kafka_opts_parse. */
int tg_kafka_opts_is_key(const char *key);

/* tg_kafka_opts_parse: read those keys of the kafka mapping node (path: its dotted path, e.g.
 * "tollgate.kafka") into o (caller storage, filled from zero) and check them as said above.
 * Other keys are left to the caller. Returns 0, or TG_ECONFIG after tg_yaml_fail. */
int tg_kafka_opts_parse(struct tg_kafka_opts *o, struct tg_yaml *y, const yaml_node_t *kafka,
                        const char *path);

/* tg_kafka_opts_apply: set every property on conf (the service's, borrowed; after the
 * service's own settings). Returns 0, or TG_ECONFIG with "<property>: <problem>" in err (a
 * secret's value is never in it). Any thread. */
int tg_kafka_opts_apply(const struct tg_kafka_opts *o, struct rd_kafka_conf_s *conf, char *err,
                        size_t errlen);

/* tg_kafka_opts_secrets: borrowed pointers to the non-empty secret values (valid while o lives)
 * into out[0..cap-1]; returns how many there are (may exceed cap). */
size_t tg_kafka_opts_secrets(const struct tg_kafka_opts *o, const char **out, size_t cap);

/* tg_kafka_opts_describe: "security_protocol=SASL_SSL sasl_mechanism=PLAIN properties=5" (no
 * value of any property) into buf, for a start-up log line. Returns buf. */
const char *tg_kafka_opts_describe(const struct tg_kafka_opts *o, char *buf, size_t cap);

/* tg_kafka_opts_wipe: zero o (secrets included). */
void tg_kafka_opts_wipe(struct tg_kafka_opts *o);

/* tg_kafka_lasterr: the last error a service's Kafka clients reported, for readiness. Each
 * service's error callback notes what librdkafka says; readiness reads it while Kafka is down.
 * librdkafka's reasons name brokers and causes ("SASL authentication error: ... invalid
 * credentials"), never a credential. Threads: note on librdkafka's callback threads, get from
 * any thread (a mutex inside). */
#define TG_KAFKA_LASTERR_CAP 256 /* "NAME: reason", bytes */

struct tg_kafka_lasterr {
    pthread_mutex_t mu;
    char text[TG_KAFKA_LASTERR_CAP]; /* "" until the first error */
};

void tg_kafka_lasterr_init(struct tg_kafka_lasterr *e);
void tg_kafka_lasterr_fini(struct tg_kafka_lasterr *e);

/* tg_kafka_lasterr_note: from an error callback (err: an rd_kafka_resp_err_t). Keeps
 * "NAME: reason" (reason escaped, cut) unless err is "all brokers down" (it says less than the
 * failure before it); the escaped reason also goes to esc for the caller's log line. Returns 1
 * when err means the brokers cannot be used (all down, transport, authentication, TLS). */
int tg_kafka_lasterr_note(struct tg_kafka_lasterr *e, int err, const char *reason, char *esc,
                          size_t esccap);

/* tg_kafka_lasterr_get: the kept text into buf when down, "" when up. Returns buf. */
const char *tg_kafka_lasterr_get(struct tg_kafka_lasterr *e, int up, char *buf, size_t cap);

#endif
