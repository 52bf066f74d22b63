/* spend-svc config: defaults, os.environ/ values, FILE:LINE: key: problem errors, durations and
 * USD amounts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "tg_err.h"
#include "tg_yaml.h"

static char tmp_path[256];

/* write_cfg: the YAML text into a fresh temporary file; returns its path (static). */
static const char *write_cfg(const char *text)
{
    FILE *f;
    int fd;

    snprintf(tmp_path, sizeof(tmp_path), "/tmp/spend_config_test.XXXXXX");
    fd = mkstemp(tmp_path);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return tmp_path;
}

static struct sp_config cfg;
static char err[1024];

static int load(const char *text)
{
    int rc = sp_config_load(write_cfg(text), &cfg, NULL, NULL, err, sizeof(err));
    unlink(tmp_path);
    return rc;
}

static void test_full_config(void **state)
{
    (void)state;
    setenv("SPEND_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/tollgate", 1);
    setenv("SPEND_TEST_MASTER", "mk-1", 1);
    assert_int_equal(load("listen: 127.0.0.1:4101\n"
                          "master_key: os.environ/SPEND_TEST_MASTER\n"
                          "kafka: {brokers: \"127.0.0.1:1,127.0.0.1:2\", topic: ev,\n"
                          "        control_topic: ctl, group_id: g}\n"
                          "postgres: {dsn: os.environ/SPEND_TEST_DSN, writers: 4}\n"
                          "redis: {url: redis://127.0.0.1:6380/3}\n"
                          "batch: {max_events: 100, max_wait_ms: 50}\n"
                          "budgets:\n"
                          "  thresholds: [25, 75, 100]\n"
                          "  teams:\n"
                          "    - {team_id: t1, max_budget: 12.5, budget_duration: 1d}\n"
                          "timezone: Europe/Berlin\n"
                          "alerting: {anything: goes}\n"),
                     0);
    assert_string_equal(cfg.listen_host, "127.0.0.1");
    assert_int_equal(cfg.listen_port, 4101);
    assert_string_equal(cfg.master_key, "mk-1");
    assert_string_equal(cfg.kafka_brokers, "127.0.0.1:1,127.0.0.1:2");
    assert_string_equal(cfg.kafka_topic, "ev");
    assert_string_equal(cfg.kafka_control_topic, "ctl");
    assert_string_equal(cfg.kafka_group_id, "g");
    assert_string_equal(cfg.pg_dsn, "postgresql://postgres@127.0.0.1:5432/tollgate");
    assert_int_equal(cfg.pg_writers, 4);
    assert_string_equal(cfg.redis_host, "127.0.0.1");
    assert_int_equal(cfg.redis_port, 6380);
    assert_int_equal(cfg.redis_db, 3);
    assert_int_equal(cfg.batch_max_events, 100);
    assert_int_equal(cfg.batch_max_wait_ms, 50);
    assert_int_equal(cfg.budget_thresholds_n, 3);
    assert_int_equal(cfg.budget_thresholds[0], 25);
    assert_int_equal(cfg.teams_n, 1);
    assert_string_equal(cfg.teams[0].team_id, "t1");
    assert_int_equal(cfg.teams[0].max_budget_nusd, 12500000000LL);
    assert_int_equal(cfg.teams[0].budget_period_s, 86400);
    assert_string_equal(cfg.timezone, "Europe/Berlin");
}

static void test_defaults(void **state)
{
    (void)state;
    assert_int_equal(load("postgres: {dsn: \"host=127.0.0.1\"}\n"), 0);
    assert_int_equal(cfg.listen_port, 4001);
    assert_string_equal(cfg.listen_host, "0.0.0.0");
    assert_string_equal(cfg.kafka_topic, "tollgate.events.v1");
    assert_string_equal(cfg.kafka_control_topic, "tollgate.control.v1");
    assert_int_equal(cfg.batch_max_events, 5000);
    assert_int_equal(cfg.batch_max_wait_ms, 200);
    assert_int_equal(cfg.pg_writers, 2);
    assert_int_equal(cfg.budget_thresholds_n, 3);
    assert_int_equal(cfg.budget_thresholds[2], 100);
    assert_true(cfg.redis_pending_max > 0);
}

static void test_errors_name_file_line_key(void **state)
{
    (void)state;
    unsetenv("SPEND_TEST_UNSET");
    assert_int_equal(load("postgres:\n  dsn: os.environ/SPEND_TEST_UNSET\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ":2: postgres.dsn: environment variable SPEND_TEST_UNSET"));
    assert_int_equal(strncmp(err, "/tmp/spend_config_test.", 23), 0);

    assert_int_equal(load("postgres: {dsn: x}\nbatch:\n  max_events: 0\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ":3: batch.max_events: must be between"));

    assert_int_equal(load("postgres:\n  dsn: x\n  writers: 9\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ":3: postgres.writers: must be between 1 and 8"));

    assert_int_equal(load("postgres: {dsn: x}\ntimezone: Mars/Olympus_Mons\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ":2: timezone: no time zone \"Mars/Olympus_Mons\""));

    assert_int_equal(load("postgres: {dsn: x}\nkafak: {}\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ":2: kafak: unknown key"));

    assert_int_equal(load("postgres: {dsn: x}\nredis: {url: http://x}\n"), TG_ECONFIG);
    assert_non_null(strstr(err, "redis.url"));

    assert_int_equal(load("postgres: {dsn: x}\nlisten: nowhere\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ":2: listen:"));

    assert_int_equal(load("kafka: {topic: t}\n"), TG_ECONFIG);
    assert_non_null(strstr(err, "postgres.dsn: missing"));

    /* config_values_with_crlf_reached_the_wire: a control byte names the key and the variable */
    setenv("SPEND_TEST_NL_KEY", "sk-master\n", 1);
    assert_int_equal(load("postgres: {dsn: x}\nmaster_key: os.environ/SPEND_TEST_NL_KEY\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, ":2: master_key: the value of environment variable "
                                "SPEND_TEST_NL_KEY contains a control character (0x0a at byte 9: "
                                "a trailing newline in the secret?)"));
    assert_null(strstr(err, "sk-master"));
    unsetenv("SPEND_TEST_NL_KEY");
    assert_int_equal(load("postgres: {dsn: \"host=a\\r\\nb\"}\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ":1: postgres.dsn: contains a control character (0x0d at byte 6)"));
    assert_int_equal(load("postgres: {dsn: \"host=a\\0b\"}\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ":1: postgres.dsn: contains a NUL byte"));

    assert_int_equal(load("postgres: {dsn: x}\nbudgets: {thresholds: [80, 50]}\n"), TG_ECONFIG);
    assert_non_null(strstr(err, "budgets.thresholds: must be ascending"));

    assert_int_equal(load("postgres: {dsn: x}\nbudgets:\n  teams:\n    - {team_id: a, "
                          "max_budget: lots}\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, ":4: budgets.teams.max_budget"));

    assert_int_equal(load("postgres: [unclosed\n"), TG_ECONFIG);
    assert_non_null(strstr(err, ": YAML syntax error: "));
    assert_int_equal(strncmp(err, "/tmp/spend_config_test.", 23), 0);

    assert_int_equal(sp_config_load("/nonexistent/spend.yaml", &cfg, NULL, NULL, err,
                                    sizeof(err)),
                     TG_EIO);
    assert_non_null(strstr(err, "/nonexistent/spend.yaml:0: cannot open:"));
}

/* load_mem: text through sp_config_load_buffer as "mem.yaml" (exact messages). */
static int load_mem(const char *text)
{
    return sp_config_load_buffer("mem.yaml", text, strlen(text), &cfg, NULL, NULL, err,
                                 sizeof(err));
}

/* A key given twice in one mapping is refused, wherever it is (YAML keeps both; a reader taking
 * each key once would silently use one of them): the second one is named with its line. */
static void test_duplicate_key_refused(void **state)
{
    (void)state;
    assert_int_equal(load("postgres: {dsn: x}\nlisten: 127.0.0.1:1\nlisten: 127.0.0.1:2\n"),
                     TG_ECONFIG);
    assert_int_equal(strncmp(err, "/tmp/spend_config_test.", 23), 0);
    assert_non_null(strstr(err, ":3: listen: duplicate key (given twice in one mapping)"));

    assert_int_equal(load_mem("postgres:\n  dsn: x\n  writers: 2\n  writers: 3\n"), TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:4: writers: duplicate key (given twice in one mapping)");
    assert_int_equal(load_mem("postgres: {dsn: x}\nbudgets:\n  teams:\n"
                              "    - {team_id: a, max_budget: 1, team_id: b}\n"),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:4: team_id: duplicate key (given twice in one mapping)");
    /* in the alerting section too, even with no hook reading it */
    assert_int_equal(load_mem("postgres: {dsn: x}\nalerting:\n  burst: 1\n  burst: 2\n"),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:4: burst: duplicate key (given twice in one mapping)");
}

/* os.environ/NAME: a variable that is not set is an error naming the key and the variable. */
static void test_env_missing_named(void **state)
{
    (void)state;
    unsetenv("SPEND_TEST_NO_BROKERS");
    assert_int_equal(load_mem("postgres: {dsn: x}\nkafka:\n"
                              "  brokers: os.environ/SPEND_TEST_NO_BROKERS\n"),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:3: kafka.brokers: environment variable "
                             "SPEND_TEST_NO_BROKERS is not set");
    assert_int_equal(load_mem("postgres: {dsn: x}\nmaster_key: os.environ/\n"), TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:2: master_key: os.environ/ without a variable name");
    setenv("SPEND_TEST_NO_BROKERS", "127.0.0.1:9", 1);
    assert_int_equal(load_mem("postgres: {dsn: x}\nkafka:\n"
                              "  brokers: os.environ/SPEND_TEST_NO_BROKERS\n"),
                     0);
    assert_string_equal(cfg.kafka_brokers, "127.0.0.1:9");
    unsetenv("SPEND_TEST_NO_BROKERS");
}

/* A control byte in a literal value is refused, naming the key (values reach wires). */
static void test_control_byte_refused(void **state)
{
    (void)state;
    assert_int_equal(load_mem("postgres: {dsn: x}\nkafka: {topic: \"ev\\tx\"}\n"), TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:2: kafka.topic: contains a control character (0x09 at "
                             "byte 2)");
    assert_int_equal(load_mem("postgres: {dsn: x}\nbudgets:\n  teams:\n"
                              "    - {team_id: \"a\\x7f\", max_budget: 1}\n"),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:4: budgets.teams.team_id: contains a control character "
                             "(0x7f at byte 1)");
    assert_int_equal(load_mem("postgres: {dsn: x}\nredis: {url: \"redis://h\\n:1\"}\n"),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:2: redis.url: contains a control character (0x0a at "
                             "byte 9)");
}

/* A team's budget_duration in the grammar both services share, never 0; errors name the key. */
static void test_team_duration(void **state)
{
    (void)state;
    assert_int_equal(load_mem("postgres: {dsn: x}\nbudgets:\n  teams:\n"
                              "    - {team_id: a, max_budget: 1, budget_duration: 1w}\n"),
                     0);
    assert_int_equal(cfg.teams[0].budget_period_s, 7 * 86400);
    assert_int_equal(load_mem("postgres: {dsn: x}\nbudgets:\n  teams:\n"
                              "    - {team_id: a, max_budget: 1, budget_duration: 0}\n"),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:4: budgets.teams.budget_duration: must be at least 1 s");
    assert_int_equal(load_mem("postgres: {dsn: x}\nbudgets:\n  teams:\n"
                              "    - {team_id: a, max_budget: 1, budget_duration: 1y}\n"),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:4: budgets.teams.budget_duration: expected a duration "
                             "like 30s, 10m, 1h, 7d or 1mo");
    /* the longest period whose milliseconds fit, and one second more */
    assert_int_equal(load_mem("postgres: {dsn: x}\nbudgets:\n  teams:\n"
                              "    - {team_id: a, max_budget: 1, budget_duration: "
                              "9223372036854775}\n"),
                     0);
    assert_int_equal(cfg.teams[0].budget_period_s, SP_CONFIG_PERIOD_MAX_S);
    assert_int_equal(load_mem("postgres: {dsn: x}\nbudgets:\n  teams:\n"
                              "    - {team_id: a, max_budget: 1, budget_duration: "
                              "9223372036854776}\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, "mem.yaml:4: budgets.teams.budget_duration: must be at most "));
}

static int alerting_seen;
static int alerting_hook(void *ctx, struct tg_yaml *y, const struct yaml_node_s *node)
{
    (void)y;
    (void)node;
    alerting_seen = *(int *)ctx;
    return 0;
}

static void test_alerting_hook(void **state)
{
    int ctx = 7;
    (void)state;
    alerting_seen = 0;
    assert_int_equal(sp_config_load(write_cfg("postgres: {dsn: x}\nalerting: {a: 1}\n"), &cfg,
                                    alerting_hook, &ctx, err, sizeof(err)),
                     0);
    unlink(tmp_path);
    assert_int_equal(alerting_seen, 7);
}

/* The hook reports through the document it is given: its error is the loader's. */
static int alerting_refuses(void *ctx, struct tg_yaml *y, const struct yaml_node_s *node)
{
    (void)ctx;
    return tg_yaml_fail(y, node, "alerting.burst", "refused by the hook");
}

static void test_alerting_hook_error(void **state)
{
    const char *text = "postgres: {dsn: x}\nalerting:\n  burst: 0\n";
    (void)state;

    assert_int_equal(sp_config_load_buffer("mem.yaml", text, strlen(text), &cfg, alerting_refuses,
                                           NULL, err, sizeof(err)),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:3: alerting.burst: refused by the hook");
}

/* sp_config_load_buffer: the same configuration and the same messages as from a file. */
static void test_load_buffer(void **state)
{
    static struct sp_config from_file;
    const char *text = "listen: 127.0.0.1:4101\npostgres: {dsn: x, writers: 3}\n"
                       "budgets: {teams: [{team_id: t1, max_budget: 2}]}\nalerting: {a: 1}\n";
    int ctx = 5;
    (void)state;

    alerting_seen = 0;
    assert_int_equal(sp_config_load_buffer("mem.yaml", text, strlen(text), &cfg, alerting_hook,
                                           &ctx, err, sizeof(err)),
                     0);
    assert_int_equal(alerting_seen, 5);
    assert_string_equal(cfg.file, "mem.yaml");
    assert_int_equal(cfg.pg_writers, 3);
    assert_int_equal(cfg.teams_n, 1);
    assert_int_equal(sp_config_load(write_cfg(text), &from_file, NULL, NULL, err, sizeof(err)), 0);
    unlink(tmp_path);
    memcpy(from_file.file, cfg.file, sizeof(cfg.file)); /* the name is the one difference */
    assert_memory_equal(&cfg, &from_file, sizeof(cfg));

    /* not NUL-terminated: only len bytes are read */
    assert_int_equal(sp_config_load_buffer("mem.yaml", "postgres: {dsn: x}\nbatch: 1", 19, &cfg,
                                           NULL, NULL, err, sizeof(err)),
                     0);
    assert_int_equal(sp_config_load_buffer("mem.yaml",
                                           "postgres: {dsn: x}\nbatch:\n  max_events: 0", 41, &cfg,
                                           NULL, NULL, err, sizeof(err)),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:3: batch.max_events: must be between 1 and 50000");
    assert_int_equal(sp_config_load_buffer("mem.yaml", NULL, 0, &cfg, NULL, NULL, err, sizeof(err)),
                     TG_ECONFIG);
    assert_string_equal(err, "mem.yaml:0: file: empty document");
}

static void test_durations_and_usd(void **state)
{
    int64_t v;
    (void)state;
    assert_int_equal(sp_config_parse_duration("30d", &v), 0);
    assert_int_equal(v, 30 * 86400);
    assert_int_equal(sp_config_parse_duration("12h", &v), 0);
    assert_int_equal(v, 43200);
    assert_int_equal(sp_config_parse_duration("15m", &v), 0);
    assert_int_equal(v, 900);
    assert_int_equal(sp_config_parse_duration("45", &v), 0);
    assert_int_equal(v, 45);
    /* the grammar router-svc reads too (tg_units.h) */
    assert_int_equal(sp_config_parse_duration("1w", &v), 0);
    assert_int_equal(v, 7 * 86400);
    assert_int_equal(sp_config_parse_duration("1mo", &v), 0);
    assert_int_equal(v, 30 * 86400);
    assert_int_equal(sp_config_parse_duration("0", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_duration("1y", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_duration("-1d", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_duration("", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_usd("0.000000001", &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(sp_config_parse_usd("100", &v), 0);
    assert_int_equal(v, 100000000000LL);
    assert_int_equal(sp_config_parse_usd("1.5", &v), 0);
    assert_int_equal(v, 1500000000LL);
    /* the grammar router-svc reads prices and budgets in (tg_units.h) */
    assert_int_equal(sp_config_parse_usd("1e3", &v), 0);
    assert_int_equal(v, 1000000000000LL);
    assert_int_equal(sp_config_parse_usd("0.0000000015", &v), 0);
    assert_int_equal(v, 2); /* half up */
    assert_int_equal(sp_config_parse_usd("", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_usd("1.2.3", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_usd("-2", &v), TG_EINVAL);
}

/* An amount above INT64_MAX nano-USD overflowed the conversion (UBSan: signed integer overflow;
 * found by spend_config_fuzz with max_budget: 49999999999): refused now, up to the last
 * nano-USD that fits. */
static void test_usd_beyond_int64_refused(void **state)
{
    int64_t v;
    (void)state;
    assert_int_equal(sp_config_parse_usd("9223372036.854775807", &v), 0);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(sp_config_parse_usd("9223372036.854775808", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_usd("9223372037", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_usd("49999999999", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_usd("99999999999999999999999", &v), TG_EINVAL);
    assert_int_equal(sp_config_parse_usd("9000000000.5", &v), 0);
    assert_int_equal(v, 9000000000500000000LL);
    assert_int_equal(load("postgres: {dsn: x}\nbudgets:\n  teams:\n"
                          "    - {team_id: t1, max_budget: 49999999999}\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, ":4: budgets.teams.max_budget: expected a positive USD amount"));
}

/* kafka's security keys and librdkafka properties (tg_kafka_opts; its own tests are
 * common_kafka_opts_test): read under kafka, errors in the loader's form. */
/* redis.url with credentials (percent-encoded), rediss:// and redis.tls; the explicit keys win
 * over the URL's credentials; a problem in the credentials is named without quoting them. */
static void test_redis_auth_and_tls(void **state)
{
    (void)state;
    assert_int_equal(load("postgres: {dsn: x}\n"
                          "redis: {url: \"rediss://ops%40acme:p%3Aw%2Fd@cache.example:6380/2\",\n"
                          "        tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem,\n"
                          "              server_name: cache.internal}}\n"),
                     0);
    assert_int_equal(cfg.redis_tls, 1);
    assert_string_equal(cfg.redis_host, "cache.example");
    assert_int_equal(cfg.redis_port, 6380);
    assert_int_equal(cfg.redis_db, 2);
    assert_string_equal(cfg.redis_username, "ops@acme");
    assert_string_equal(cfg.redis_password, "p:w/d");
    assert_string_equal(cfg.redis_ca_file, "/ca.pem");
    assert_string_equal(cfg.redis_cert_file, "/c.pem");
    assert_string_equal(cfg.redis_key_file, "/k.pem");
    assert_string_equal(cfg.redis_server_name, "cache.internal");

    /* password only; no TLS */
    assert_int_equal(load("postgres: {dsn: x}\nredis: {url: \"redis://:s3cret@h\"}\n"), 0);
    assert_int_equal(cfg.redis_tls, 0);
    assert_string_equal(cfg.redis_username, "");
    assert_string_equal(cfg.redis_password, "s3cret");
    assert_int_equal(cfg.redis_port, 6379);

    /* redis.password (a Secret through os.environ/) wins over the URL's, whatever the order */
    setenv("SPEND_TEST_REDIS_PW", "from-env", 1);
    assert_int_equal(load("postgres: {dsn: x}\n"
                          "redis: {password: os.environ/SPEND_TEST_REDIS_PW, username: u2,\n"
                          "        url: \"redis://u1:in-url@h:1/0\"}\n"),
                     0);
    assert_string_equal(cfg.redis_username, "u2");
    assert_string_equal(cfg.redis_password, "from-env");

    /* refusals */
    assert_int_equal(load("postgres: {dsn: x}\n"
                          "redis: {url: \"redis://h\", tls: {ca_file: /ca.pem}}\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, "redis.tls: needs a rediss:// url"));
    assert_int_equal(load("postgres: {dsn: x}\n"
                          "redis: {url: \"rediss://h\", tls: {cert_file: /c.pem}}\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, "cert_file and key_file go together"));
    assert_int_equal(load("postgres: {dsn: x}\nredis: {url: \"redis://u:pa%zzss@h\"}\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, "redis.url: bad credentials in the URL"));
    assert_null(strstr(err, "pa%zzss"));
    assert_int_equal(load("postgres: {dsn: x}\nredis: {tls: {verify: no}}\n"), TG_ECONFIG);
    assert_non_null(strstr(err, "redis.tls.verify: unknown key"));
}

static void test_kafka_security(void **state)
{
    char desc[128];

    (void)state;
    assert_int_equal(load("postgres: {dsn: x}\n"
                          "kafka:\n"
                          "  brokers: 127.0.0.1:1\n"
                          "  security_protocol: SASL_PLAINTEXT\n"
                          "  sasl: {mechanism: PLAIN, username: spend, password: pw-0042}\n"
                          "  librdkafka: {fetch.wait.max.ms: 100}\n"),
                     0);
    assert_string_equal(cfg.kafka_brokers, "127.0.0.1:1");
    assert_int_equal(cfg.kafka_opts.n, 5);
    tg_kafka_opts_describe(&cfg.kafka_opts, desc, sizeof(desc));
    assert_string_equal(desc, "security_protocol=SASL_PLAINTEXT sasl_mechanism=PLAIN properties=5");

    assert_int_equal(load("postgres: {dsn: x}\nkafka:\n  librdkafka:\n    group.id: other\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, ":4: kafka.librdkafka.group.id: owned by the service"));
    assert_int_equal(strncmp(err, "/tmp/spend_config_test.", 23), 0);
    assert_int_equal(load("postgres: {dsn: x}\nkafka:\n  librdkafka: {fetch.wait.max.ms: soon}\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, ":3: kafka.librdkafka.fetch.wait.max.ms: Invalid value for "
                                "configuration property \"fetch.wait.max.ms\""));
    assert_int_equal(load("postgres: {dsn: x}\nkafka:\n  security_protocol: SASL_SSL\n"),
                     TG_ECONFIG);
    assert_non_null(strstr(err, ":3: kafka.sasl: mechanism missing"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_errors_name_file_line_key),
        cmocka_unit_test(test_alerting_hook),
        cmocka_unit_test(test_alerting_hook_error),
        cmocka_unit_test(test_load_buffer),
        cmocka_unit_test(test_durations_and_usd),
        cmocka_unit_test(test_usd_beyond_int64_refused),
        cmocka_unit_test(test_redis_auth_and_tls),
        cmocka_unit_test(test_kafka_security),
        cmocka_unit_test(test_duplicate_key_refused),
        cmocka_unit_test(test_env_missing_named),
        cmocka_unit_test(test_control_byte_refused),
        cmocka_unit_test(test_team_duration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
