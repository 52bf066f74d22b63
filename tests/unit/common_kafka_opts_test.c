/* tg_kafka_opts unit tests: the kafka: security keys and librdkafka properties both services
 * read — good configurations (and what reaches librdkafka), and every error message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>

#include "tg_err.h"
#include "tg_kafka_opts.h"
#include "tg_yaml.h"

static struct tg_kafka_opts opts; /* about 20 KB: not on the stack */
static char error[TG_YAML_LINE_MAX];
static char warning[TG_YAML_LINE_MAX]; /* the last warning */
static char doc[65536];

static void sink(void *ud, int is_error, const char *line)
{
    (void)ud;
    snprintf(is_error ? error : warning, TG_YAML_LINE_MAX, "%s", line);
}

/* parse: "kafka:\n" + body (its lines indented by the caller) through tg_kafka_opts_parse. */
static int parse(const char *body)
{
    struct tg_yaml y;
    yaml_node_t *root, *kafka = NULL;
    int rc;

    error[0] = '\0';
    warning[0] = '\0';
    snprintf(doc, sizeof(doc), "kafka:\n%s", body);
    rc = tg_yaml_open(&y, "k.yaml", doc, strlen(doc), sink, NULL);
    assert_int_equal(rc, 0);
    root = tg_yaml_root(&y);
    TG_YAML_FOR_PAIRS(root, pair)
    kafka = tg_yaml_node(&y, pair->value);
    rc = tg_kafka_opts_parse(&opts, &y, kafka, "kafka");
    tg_yaml_close(&y);
    return rc;
}

static void expect_error(const char *body, const char *want)
{
    int rc = parse(body);

    if (rc == 0 || strstr(error, want) == NULL)
        fail_msg("body:\n%s\nwanted \"%s\", got rc=%d \"%s\"", body, want, rc, error);
    assert_int_equal(rc, TG_ECONFIG);
}

static const char *data(const char *name)
{
    static char path[4][512];
    static int next;
    const char *src = getenv("TG_SOURCE_DIR");
    char *p = path[next++ % 4];

    snprintf(p, 512, "%s/tests/unit/data/kafka/%s", src != NULL ? src : ".", name);
    return p;
}

/* conf_get: what the applied set gives librdkafka for name. */
static const char *conf_get(rd_kafka_conf_t *conf, const char *name)
{
    static char v[512];
    size_t n = sizeof(v);

    if (rd_kafka_conf_get(conf, name, v, &n) != RD_KAFKA_CONF_OK)
        return "(unknown)";
    return v;
}

static void test_absent_or_plain(void **state)
{
    (void)state;
    assert_int_equal(parse("  brokers: 127.0.0.1:1\n  topic: t\n"), 0);
    assert_int_equal(opts.n, 0);
    assert_int_equal(parse("  security_protocol: PLAINTEXT\n"), 0);
    assert_int_equal(opts.n, 1);
    assert_string_equal(opts.protocol, "PLAINTEXT");
    assert_int_equal(parse("  sasl: ~\n  ssl: null\n  librdkafka: {}\n"), 0);
    assert_int_equal(opts.n, 0);
}

static void test_sasl_ssl_scram_with_ca(void **state)
{
    char body[2048], desc[128];
    const char *sec[4];
    rd_kafka_conf_t *conf;
    char err[256];

    (void)state;
    setenv("INFRA_TEST_KAFKA_PW", "pw-from-env-42", 1);
    snprintf(body, sizeof(body),
             "  security_protocol: sasl_ssl\n"
             "  sasl: {mechanism: scram-sha-512, username: spend,\n"
             "         password: os.environ/INFRA_TEST_KAFKA_PW}\n"
             "  ssl: {ca_file: %s}\n"
             "  librdkafka: {linger.ms: 7, socket.keepalive.enable: true}\n",
             data("ca.pem"));
    assert_int_equal(parse(body), 0);
    assert_string_equal(opts.protocol, "SASL_SSL");
    assert_string_equal(opts.mechanism, "SCRAM-SHA-512");
    assert_int_equal(opts.n, 7);
    assert_int_equal(tg_kafka_opts_secrets(&opts, sec, 4), 1);
    assert_string_equal(sec[0], "pw-from-env-42");
    tg_kafka_opts_describe(&opts, desc, sizeof(desc));
    assert_string_equal(desc, "security_protocol=SASL_SSL sasl_mechanism=SCRAM-SHA-512 properties=7");
    conf = rd_kafka_conf_new();
    assert_non_null(conf);
    assert_int_equal(rd_kafka_conf_set(conf, "linger.ms", "5", err, sizeof(err)), RD_KAFKA_CONF_OK);
    assert_int_equal(tg_kafka_opts_apply(&opts, conf, err, sizeof(err)), 0);
    assert_string_equal(conf_get(conf, "security.protocol"), "sasl_ssl");
    assert_string_equal(conf_get(conf, "sasl.mechanisms"), "SCRAM-SHA-512");
    assert_string_equal(conf_get(conf, "sasl.username"), "spend");
    assert_string_equal(conf_get(conf, "sasl.password"), "pw-from-env-42");
    assert_string_equal(conf_get(conf, "ssl.ca.location"), data("ca.pem"));
    assert_string_equal(conf_get(conf, "linger.ms"), "7"); /* the user's wins over the default */
    rd_kafka_conf_destroy(conf);
    tg_kafka_opts_wipe(&opts);
    assert_int_equal(opts.n, 0);
    assert_int_equal(tg_kafka_opts_secrets(&opts, sec, 4), 0);
    unsetenv("INFRA_TEST_KAFKA_PW");
}

static void test_plain_and_scram256(void **state)
{
    (void)state;
    assert_int_equal(parse("  security_protocol: SASL_PLAINTEXT\n"
                           "  sasl: {mechanism: PLAIN, username: u, password: p}\n"),
                     0);
    assert_string_equal(opts.mechanism, "PLAIN");
    assert_int_equal(parse("  security_protocol: SASL_PLAINTEXT\n"
                           "  sasl: {mechanism: SCRAM-SHA-256, username: u, password: p}\n"),
                     0);
    assert_string_equal(opts.mechanism, "SCRAM-SHA-256");
}

static void test_ssl_client_certificate(void **state)
{
    char body[2048];
    const char *sec[4];

    (void)state;
    snprintf(body, sizeof(body),
             "  security_protocol: SSL\n"
             "  ssl:\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n"
             "    key_password: test-key-pass\n",
             data("ca.pem"), data("client.pem"), data("client.key"));
    assert_int_equal(parse(body), 0);
    assert_int_equal(opts.n, 5);
    assert_int_equal(tg_kafka_opts_secrets(&opts, sec, 4), 1);
    assert_string_equal(sec[0], "test-key-pass");

    /* The key does not open with another password: librdkafka says so at load. */
    snprintf(body, sizeof(body),
             "  security_protocol: SSL\n"
             "  ssl:\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n"
             "    key_password: wrong-pass\n",
             data("ca.pem"), data("client.pem"), data("client.key"));
    expect_error(body, "k.yaml:2: kafka: librdkafka refuses these settings: ssl.key.location");
    assert_null(strstr(error, "wrong-pass"));
}

static void test_oauthbearer_and_secret_passthrough(void **state)
{
    const char *sec[4];

    (void)state;
    assert_int_equal(parse("  security_protocol: SASL_SSL\n"
                           "  sasl: {mechanism: OAUTHBEARER}\n"
                           "  librdkafka:\n"
                           "    enable.sasl.oauthbearer.unsecure.jwt: true\n"
                           "    sasl.oauthbearer.config: principal=admin\n"
                           "    ssl.keystore.password: ks-secret\n"),
                     0);
    assert_int_equal(opts.n, 5);
    assert_int_equal(tg_kafka_opts_secrets(&opts, sec, 4), 2);
    assert_string_equal(sec[0], "principal=admin");
    assert_string_equal(sec[1], "ks-secret");
    /* more secrets than room: counted, cap written */
    assert_int_equal(tg_kafka_opts_secrets(&opts, sec, 1), 2);
}

static void test_errors_of_the_dedicated_keys(void **state)
{
    char body[1024];

    (void)state;
    expect_error("  security_protocol: TLS\n",
                 "k.yaml:2: kafka.security_protocol: expected PLAINTEXT, SSL, SASL_PLAINTEXT or "
                 "SASL_SSL");
    expect_error("  security_protocol: ''\n", "k.yaml:2: kafka.security_protocol: empty");
    expect_error("  security_protocol: [SSL]\n",
                 "k.yaml:2: kafka.security_protocol: expected a scalar value");
    expect_error("  security_protocol: SASL_SSL\n  sasl: {mechanism: GSSAPI}\n",
                 "k.yaml:3: kafka.sasl.mechanism: expected PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
                 "or OAUTHBEARER");
    expect_error("  security_protocol: SASL_SSL\n  sasl: {mechanism: PLAIN, user: u}\n",
                 "k.yaml:3: kafka.sasl.user: unknown key (expected mechanism, username, "
                 "password)");
    expect_error("  security_protocol: SSL\n  ssl: {ca: x}\n",
                 "k.yaml:3: kafka.ssl.ca: unknown key (expected ca_file, cert_file, key_file, "
                 "key_password)");
    expect_error("  security_protocol: SSL\n  ssl: {ca_file: /nonexistent/ca.pem}\n",
                 "k.yaml:3: kafka.ssl.ca_file: cannot read /nonexistent/ca.pem: No such file or "
                 "directory");
    expect_error("  sasl: [PLAIN]\n", "k.yaml:2: kafka.sasl: expected a mapping");
    expect_error("  security_protocol: SASL_SSL\n"
                 "  sasl: {mechanism: PLAIN, username: u, password: os.environ/INFRA_UNSET_PW}\n",
                 "k.yaml:3: kafka.sasl.password: environment variable INFRA_UNSET_PW is not set");
    /* A file librdkafka cannot take as a CA: its message, at load. */
    snprintf(body, sizeof(body), "  security_protocol: SSL\n  ssl: {ca_file: %s}\n",
             data("README.md"));
    expect_error(body, "k.yaml:2: kafka: librdkafka refuses these settings: ssl.ca.location");
}

static void test_errors_between_keys(void **state)
{
    char body[1024];

    (void)state;
    expect_error("  sasl: {mechanism: PLAIN, username: u, password: p}\n",
                 "k.yaml:2: kafka.sasl: security_protocol is PLAINTEXT (the default): SASL needs "
                 "SASL_PLAINTEXT or SASL_SSL");
    expect_error("  security_protocol: SSL\n  sasl: {mechanism: PLAIN, username: u, password: p}\n",
                 "k.yaml:3: kafka.sasl: security_protocol is SSL: SASL needs SASL_PLAINTEXT or "
                 "SASL_SSL");
    snprintf(body, sizeof(body), "  security_protocol: SASL_PLAINTEXT\n  ssl: {ca_file: %s}\n",
             data("ca.pem"));
    expect_error(body, "k.yaml:3: kafka.ssl: security_protocol is SASL_PLAINTEXT: TLS needs SSL "
                       "or SASL_SSL");
    expect_error("  security_protocol: SASL_SSL\n",
                 "k.yaml:2: kafka.sasl: mechanism missing: security_protocol SASL_SSL needs "
                 "sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)");
    expect_error("  security_protocol: SASL_SSL\n  sasl: {username: u, password: p}\n",
                 "k.yaml:3: kafka.sasl: mechanism missing");
    expect_error("  security_protocol: SASL_PLAINTEXT\n  sasl: {mechanism: PLAIN, username: u}\n",
                 "k.yaml:3: kafka.sasl: mechanism PLAIN needs a username and a password");
    expect_error("  security_protocol: SASL_PLAINTEXT\n"
                 "  sasl: {mechanism: SCRAM-SHA-256, password: p}\n",
                 "k.yaml:3: kafka.sasl: mechanism SCRAM-SHA-256 needs a username and a password");
    expect_error("  security_protocol: SASL_SSL\n"
                 "  sasl: {mechanism: OAUTHBEARER, username: u}\n",
                 "k.yaml:3: kafka.sasl: username and password are not used by OAUTHBEARER");
    snprintf(body, sizeof(body), "  security_protocol: SSL\n  ssl: {cert_file: %s}\n",
             data("client.pem"));
    expect_error(body, "k.yaml:3: kafka.ssl: cert_file and key_file go together");
}

static void test_errors_of_librdkafka_properties(void **state)
{
    static const char *const owned[] = {
        "bootstrap.servers", "metadata.broker.list", "client.id", "group.id",
        "group.instance.id", "transactional.id", "enable.idempotence", "acks",
        "request.required.acks", "enable.auto.commit", "auto.commit.enable",
        "enable.auto.offset.store", "auto.offset.reset", "enable.partition.eof",
        "partition.assignment.strategy", "message.timeout.ms", "delivery.timeout.ms",
        "session.timeout.ms"};
    static const char *const dedicated[][2] = {
        {"security.protocol", "kafka.security_protocol"},
        {"sasl.mechanisms", "kafka.sasl.mechanism"},
        {"sasl.mechanism", "kafka.sasl.mechanism"},
        {"sasl.username", "kafka.sasl.username"},
        {"sasl.password", "kafka.sasl.password"},
        {"ssl.ca.location", "kafka.ssl.ca_file"},
        {"ssl.certificate.location", "kafka.ssl.cert_file"},
        {"ssl.key.location", "kafka.ssl.key_file"},
        {"ssl.key.password", "kafka.ssl.key_password"}};
    char body[1024], want[512];

    (void)state;
    expect_error("  librdkafka: {linger.mss: 5}\n",
                 "k.yaml:2: kafka.librdkafka.linger.mss: No such configuration property: "
                 "\"linger.mss\"");
    expect_error("  librdkafka:\n    socket.timeout.ms: soon\n",
                 "k.yaml:3: kafka.librdkafka.socket.timeout.ms: Invalid value for configuration "
                 "property \"socket.timeout.ms\"");
    expect_error("  librdkafka:\n    compression.codec: zip\n",
                 "k.yaml:3: kafka.librdkafka.compression.codec: Invalid value \"zip\" for "
                 "configuration property \"compression.codec\"");
    expect_error("  librdkafka:\n    dr_cb: x\n",
                 "k.yaml:3: kafka.librdkafka.dr_cb: Property \"dr_cb\" must be set through "
                 "dedicated");
    expect_error("  librdkafka:\n    plugin.library.paths: /tmp/x.so\n",
                 "k.yaml:3: kafka.librdkafka.plugin.library.paths: refused: a plugin loads code "
                 "into the service");
    expect_error("  librdkafka:\n    linger.ms: [1]\n",
                 "k.yaml:3: kafka.librdkafka.linger.ms: expected a scalar value");
    expect_error("  librdkafka: [linger.ms]\n", "k.yaml:2: kafka.librdkafka: expected a mapping");
    expect_error("  librdkafka:\n    "
                 "a.property.name.longer.than.any.librdkafka.has.ever.had.at.all.xyz: 1\n",
                 "k.yaml:3: kafka.librdkafka.a.property.name.longer.than.any.librdkafka.has.ever."
                 "had.at.all.xyz: No such configuration property (name over 63 bytes)");
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
        snprintf(body, sizeof(body), "  librdkafka:\n    %s: x\n", owned[i]);
        snprintf(want, sizeof(want),
                 "k.yaml:3: kafka.librdkafka.%s: owned by the service (its delivery and offset "
                 "guarantees rest on it): not configurable",
                 owned[i]);
        expect_error(body, want);
    }
    for (size_t i = 0; i < sizeof(dedicated) / sizeof(dedicated[0]); i++) {
        snprintf(body, sizeof(body), "  librdkafka:\n    %s: x\n", dedicated[i][0]);
        snprintf(want, sizeof(want), "k.yaml:3: kafka.librdkafka.%s: give it as %s",
                 dedicated[i][0], dedicated[i][1]);
        expect_error(body, want);
    }
}

static void test_secret_values_are_not_repeated(void **state)
{
    (void)state;
    /* Not built into Debian's librdkafka: refused, and the value is not quoted back. */
    expect_error("  librdkafka:\n    sasl.oauthbearer.client.secret: hush-hush-1234\n",
                 "k.yaml:3: kafka.librdkafka.sasl.oauthbearer.client.secret: librdkafka refused "
                 "the value of sasl.oauthbearer.client.secret (not shown: a secret)");
    assert_null(strstr(error, "hush-hush-1234"));
}

static int refused_here(const char *name)
{
    static const char *const skip[] = {"builtin.features", "plugin.library.paths", "client.id",
                                       "security.protocol", "metadata.broker.list",
                                       "bootstrap.servers", "group.id", "acks"};

    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
        if (strcmp(name, skip[i]) == 0)
            return 1;
    return strstr(name, "sasl.") != NULL || strstr(name, "ssl") != NULL ||
           strstr(name, "timeout") != NULL || strstr(name, "idempotence") != NULL ||
           strstr(name, "transactional") != NULL || strstr(name, "offset") != NULL ||
           strstr(name, "partition.eof") != NULL || strstr(name, "commit") != NULL ||
           strstr(name, "_cb") != NULL || strstr(name, "instance.id") != NULL ||
           strstr(name, "assignment.strategy") != NULL;
}

static void test_bounds(void **state)
{
    static const char *const strings[] = {"client.rack", "sasl.kerberos.service.name",
                                          "sasl.kerberos.principal", "sasl.kerberos.kinit.cmd"};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    size_t cnt = 0, off, used = 0;
    const char **dump = rd_kafka_conf_dump(conf, &cnt);
    char *big = malloc(65536), *val = malloc(4200);
    char err[256];

    (void)state;
    assert_non_null(big);
    assert_non_null(val);
    /* TG_KAFKA_OPTS_MAX + 1 distinct properties, each set to its default value */
    off = (size_t)snprintf(big, 65536, "  librdkafka:\n");
    for (size_t i = 0; i + 1 < cnt && used <= TG_KAFKA_OPTS_MAX; i += 2) {
        rd_kafka_conf_t *t;

        if (refused_here(dump[i]) || dump[i + 1][0] == '\0' || strchr(dump[i + 1], '\'') ||
            strlen(dump[i]) >= TG_KAFKA_OPT_NAME_CAP)
            continue;
        t = rd_kafka_conf_new();
        if (rd_kafka_conf_set(t, dump[i], dump[i + 1], err, sizeof(err)) == RD_KAFKA_CONF_OK) {
            off += (size_t)snprintf(big + off, 65536 - off, "    '%s': '%s'\n", dump[i],
                                    dump[i + 1]);
            used++;
        }
        rd_kafka_conf_destroy(t);
    }
    rd_kafka_conf_dump_free(dump, cnt);
    rd_kafka_conf_destroy(conf);
    assert_int_equal(used, TG_KAFKA_OPTS_MAX + 1);
    expect_error(big, "kafka.librdkafka.");
    assert_non_null(strstr(error, ": too many Kafka properties (max 48)"));

    /* TG_KAFKA_OPT_TEXT_CAP bytes of values in all */
    memset(val, 'k', 4100);
    val[4100] = '\0';
    off = (size_t)snprintf(big, 65536, "  librdkafka:\n");
    for (size_t i = 0; i < 4; i++)
        off += (size_t)snprintf(big + off, 65536 - off, "    %s: %s\n", strings[i], val);
    expect_error(big, "k.yaml:6: kafka.librdkafka.sasl.kerberos.kinit.cmd: Kafka property values "
                      "too long in all (max 16384 bytes)");
    free(big);
    free(val);
}

static void test_lasterr(void **state)
{
    struct tg_kafka_lasterr e;
    char esc[TG_KAFKA_LASTERR_CAP], buf[TG_KAFKA_LASTERR_CAP];

    (void)state;
    tg_kafka_lasterr_init(&e);
    assert_string_equal(tg_kafka_lasterr_get(&e, 0, buf, sizeof(buf)), "");
    assert_int_equal(tg_kafka_lasterr_note(&e, RD_KAFKA_RESP_ERR__AUTHENTICATION,
                                           "b:9093/1: SASL authentication error: \"bad\"", esc,
                                           sizeof(esc)),
                     1);
    assert_string_equal(esc, "b:9093/1: SASL authentication error: \\\"bad\\\"");
    /* "all brokers down" keeps the more telling error before it */
    assert_int_equal(tg_kafka_lasterr_note(&e, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
                                           "1/1 brokers are down", esc, sizeof(esc)),
                     1);
    assert_string_equal(tg_kafka_lasterr_get(&e, 0, buf, sizeof(buf)),
                        "_AUTHENTICATION: b:9093/1: SASL authentication error: \\\"bad\\\"");
    assert_string_equal(tg_kafka_lasterr_get(&e, 1, buf, sizeof(buf)), ""); /* up: none */
    /* an error that does not make the brokers unusable is kept but not "down" */
    assert_int_equal(tg_kafka_lasterr_note(&e, RD_KAFKA_RESP_ERR__RESOLVE, NULL, esc, sizeof(esc)),
                     0);
    assert_string_equal(tg_kafka_lasterr_get(&e, 0, buf, 12), "_RESOLVE: ");
    assert_int_equal(tg_kafka_lasterr_note(&e, RD_KAFKA_RESP_ERR__TRANSPORT, "x", esc, sizeof(esc)),
                     1);
    assert_int_equal(tg_kafka_lasterr_note(&e, RD_KAFKA_RESP_ERR__SSL, "y", esc, sizeof(esc)), 1);
    assert_string_equal(tg_kafka_lasterr_get(&e, 0, buf, sizeof(buf)), "_SSL: y");
    tg_kafka_lasterr_fini(&e);
}

/* SCRAM with a librdkafka older than 2.6.1: loads, with a warning naming the Kafka 4 defect;
 * PLAIN gives none. */
static void test_scram_warning(void **state)
{
    (void)state;
    assert_int_equal(parse("  security_protocol: SASL_SSL\n"
                           "  sasl: {mechanism: SCRAM-SHA-512, username: u, password: p}\n"),
                     0);
    if (rd_kafka_version() < 0x020601ff) {
        if (strstr(warning, "k.yaml:3: kafka.sasl: SCRAM-SHA-512: this librdkafka") == NULL ||
            strstr(warning, "cannot log in with SCRAM to Kafka 4 brokers (fixed in 2.6.1)") == NULL)
            fail_msg("warning: \"%s\"", warning);
    } else {
        assert_string_equal(warning, "");
    }
    assert_int_equal(parse("  security_protocol: SASL_SSL\n"
                           "  sasl: {mechanism: PLAIN, username: u, password: p}\n"),
                     0);
    assert_string_equal(warning, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scram_warning),
        cmocka_unit_test(test_absent_or_plain),
        cmocka_unit_test(test_sasl_ssl_scram_with_ca),
        cmocka_unit_test(test_plain_and_scram256),
        cmocka_unit_test(test_ssl_client_certificate),
        cmocka_unit_test(test_oauthbearer_and_secret_passthrough),
        cmocka_unit_test(test_errors_of_the_dedicated_keys),
        cmocka_unit_test(test_errors_between_keys),
        cmocka_unit_test(test_errors_of_librdkafka_properties),
        cmocka_unit_test(test_secret_values_are_not_repeated),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_lasterr),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
