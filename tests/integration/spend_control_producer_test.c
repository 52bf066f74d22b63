/* spend-svc's control topic producer (the budget block records) against devkafka: a record is
 * published; then the broker answers a produce request with OUT_OF_ORDER_SEQUENCE_NUMBER, as a
 * new partition leader can after a leader change, and librdkafka 2.0.2 declares the idempotent
 * producer out of step (a fatal error: every produce on that instance is refused from then on).
 * spend-svc must replace the instance and publish the next records; before it did, no key or
 * team could be blocked for its budget until a restart. Needs devkafka's fault channel (a real
 * broker cannot be made to send that error on demand): the one named by TG_KAFKA_BROKERS and
 * TG_KAFKA_CTL, or its own, started through tests/lib/services.sh. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "consumer.h"
#include "devkafka_client.h"
#include "tg_buf.h"
#include "tg_log.h"
#include "tg_time.h"

static struct sp_config cfg;

static uint64_t renewals(struct sp_consumer *c)
{
    struct tg_buf b;
    const char *p;
    uint64_t v;

    CHECK(tg_buf_init(&b, 1u << 16) == 0, "metrics buffer");
    sp_consumer_write_metrics(c, &b);
    p = strstr(b.data, "\ntollgate_spend_control_producer_renewals_total ");
    CHECK(p != NULL, "no renewals counter in the metrics");
    v = strtoull(p + strlen("\ntollgate_spend_control_producer_renewals_total "), NULL, 10);
    tg_buf_fini(&b);
    return v;
}

int main(int argc, char **argv)
{
    const char *brokers = getenv("TG_KAFKA_BROKERS"), *ctl = getenv("TG_KAFKA_CTL");
    const char *value = "{\"reason\":\"budget_exceeded\",\"scope\":\"key\"}";
    char yaml[1024], err[512], reply[256];
    struct sp_consumer *c;
    uint64_t t0, deadline;
    int rc, refused = 0;

    (void)argc;
    if (brokers == NULL || brokers[0] == '\0' || ctl == NULL || ctl[0] == '\0')
        dk_client_reexec(argv[0], "TG_SPEND_CTLPROD_TEST_NESTED", 1,
                         "tollgate.events.v1:1,tollgate.control.v1:1");
    tg_log_init("spend_control_producer_test");
    snprintf(yaml, sizeof(yaml),
             "postgres: {dsn: \"host=127.0.0.1\"}\n"
             "kafka:\n  brokers: \"%s\"\n  topic: tollgate.events.v1\n"
             "  control_topic: tollgate.control.v1\n  group_id: spend-ctlprod-%" PRIu64 "\n",
             brokers, tg_now_epoch_ms());
    CHECK(sp_config_load_buffer("spend.yaml", yaml, strlen(yaml), &cfg, NULL, NULL, err,
                                sizeof(err)) == 0,
          "config: %s", err);
    c = sp_consumer_create(&cfg, NULL, err, sizeof(err));
    CHECK(c != NULL, "consumer: %s", err);

    rc = sp_consumer_publish_control(c, "block:test-before", value, strlen(value), 10000);
    CHECK(rc == 0, "first block record not published: %d", rc);
    printf("ok 1 - a block record published\n");

    CHECK(dk_client_ctl(ctl, "error Produce OUT_OF_ORDER_SEQUENCE_NUMBER 1", reply,
                        sizeof(reply)) == 0,
          "devkafka: %s", reply);
    t0 = tg_now_mono_ms();
    deadline = t0 + 20000;
    for (;;) {
        rc = sp_consumer_publish_control(c, "block:test-after", value, strlen(value), 5000);
        if (rc == 0 || tg_now_mono_ms() >= deadline)
            break;
        refused++;
        tg_sleep_ms(100);
    }
    CHECK(rc == 0, "no block record published in 20 s after a fatal producer error (%d refused)",
          refused);
    CHECK(refused >= 1, "the pushed error did not reach the producer: nothing was refused");
    CHECK(renewals(c) == 1, "the producer was replaced %" PRIu64 " times, not once", renewals(c));
    printf("# %d publish(es) refused, published again %.2f s after the error\n", refused,
           (double)(tg_now_mono_ms() - t0) / 1000.0);
    printf("ok 2 - a fatal producer error: the instance is replaced, block records go on\n");

    sp_consumer_close(c);
    sp_consumer_destroy(&c);
    printf("2 passed, 0 failed\n");
    return 0;
}
