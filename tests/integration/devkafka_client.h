/* devkafka_client: what the C integration tests that need devkafka's fault channel share.
 *
 * dk_client_ctl sends one line to devkafka's control channel (TG_KAFKA_CTL, host:port) and reads
 * the answer; dk_client_reexec runs the calling test again under a shell that starts devkafka
 * through tests/lib/services.sh (when TG_KAFKA_BROKERS / TG_KAFKA_CTL are unset, as under
 * tests/run, which shares an Apache Kafka cluster without such a channel) and stops it on exit. */
#ifndef TG_DEVKAFKA_CLIENT_H
#define TG_DEVKAFKA_CLIENT_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* CHECK(cond, fmt, ...): the test fails (exit 1) with FILE:LINE and the message unless cond. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Sends line to the control channel at ctl ("host:port") and puts the answer in reply. Returns
 * 0 when the answer starts with "ok", -1 otherwise (reply then says why when it can). */
int dk_client_ctl(const char *ctl, const char *line, char *reply, size_t cap);

/* Runs self again as "bash -c": tests/lib/services.sh starts devkafka with `brokers` brokers
 * and `topics` (tg_devkafka_start's second argument), exports TG_KAFKA_BROKERS and TG_KAFKA_CTL,
 * sets nested_env=1 and runs self; devkafka is stopped when it exits. Needs TG_SOURCE_DIR and
 * TG_BUILD_DIR (set by ctest). Does not return; exits 1 when it cannot run. */
void dk_client_reexec(const char *self, const char *nested_env, int brokers, const char *topics);

#endif
