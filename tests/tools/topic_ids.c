/* topic_ids: print the call id of every event on a Kafka topic, one per line.
 *
 *   topic_ids BROKERS TOPIC [TIMEOUT_MS]
 *
 * Reads every partition from the beginning up to the high watermark seen at start (no consumer
 * group), splits each record into its events (one or several, proto_record_split), decodes each
 * with the v1 decoder and checks it is at most 4 KiB and of the record's key. Exits 1 when an
 * event is too large, undecodable or of another key (with the reason), or when the end cannot be
 * reached in TIMEOUT_MS (default 60 s). Used by the router-svc event tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "proto_event.h"
#include "tg_limits.h"
#include "tg_time.h"

#define TI_PARTITIONS_MAX 256

int main(int argc, char **argv)
{
    char err[512];
    rd_kafka_conf_t *conf;
    rd_kafka_t *rk = NULL;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *rkt = NULL;
    rd_kafka_topic_partition_list_t *parts = NULL;
    int64_t high[TI_PARTITIONS_MAX];
    int32_t ids[TI_PARTITIONS_MAX];
    int done[TI_PARTITIONS_MAX] = {0};
    unsigned long per[TI_PARTITIONS_MAX] = {0};
    int64_t lows[TI_PARTITIONS_MAX];
    int nparts = 0, ndone = 0, rc = 1;
    uint64_t deadline;
    struct proto_event *ev = malloc(sizeof(*ev));
    unsigned long count = 0, records = 0;

    if (argc < 3 || ev == NULL) {
        fprintf(stderr, "usage: topic_ids BROKERS TOPIC [TIMEOUT_MS]\n");
        return 2;
    }
    deadline = tg_now_mono_ms() + (argc > 3 ? strtoull(argv[3], NULL, 10) : 60000);
    conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof(err)) != 0 ||
        rd_kafka_conf_set(conf, "group.id", "topic-ids", err, sizeof(err)) != 0 ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err)) != 0 ||
        rd_kafka_conf_set(conf, "enable.partition.eof", "true", err, sizeof(err)) != 0) {
        fprintf(stderr, "topic_ids: %s\n", err);
        return 2;
    }
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (rk == NULL) {
        fprintf(stderr, "topic_ids: %s\n", err);
        return 2;
    }
    rkt = rd_kafka_topic_new(rk, argv[2], NULL);
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "topic_ids: no metadata for %s\n", argv[2]);
        goto out;
    }
    nparts = md->topics[0].partition_cnt;
    if (nparts > TI_PARTITIONS_MAX)
        nparts = TI_PARTITIONS_MAX;
    parts = rd_kafka_topic_partition_list_new(nparts);
    for (int i = 0; i < nparts; i++) {
        int64_t low = 0;

        ids[i] = md->topics[0].partitions[i].id;
        if (rd_kafka_query_watermark_offsets(rk, argv[2], ids[i], &low, &high[i], 10000) != 0 ||
            (lows[i] = low) < 0) {
            fprintf(stderr, "topic_ids: no watermarks for partition %d\n", ids[i]);
            goto out;
        }
        if (high[i] <= low) {
            done[i] = 1;
            ndone++;
        }
        rd_kafka_topic_partition_list_add(parts, argv[2], ids[i])->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    }
    if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "topic_ids: assign failed\n");
        goto out;
    }
    while (ndone < nparts) {
        rd_kafka_message_t *m;
        int idx = -1;

        if (tg_now_mono_ms() > deadline) {
            fprintf(stderr, "topic_ids: timed out with %d of %d partitions read\n", ndone,
                    nparts);
            goto out;
        }
        m = rd_kafka_consumer_poll(rk, 200);
        if (m == NULL)
            continue;
        for (int i = 0; i < nparts; i++) {
            if (ids[i] == m->partition)
                idx = i;
        }
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            struct proto_span sp[PROTO_RECORD_EVENTS_MAX];
            char reason[200];
            int nev = 0;

            if (m->len > PROTO_RECORD_MAX_BYTES ||
                proto_record_split(m->payload, m->len, sp, PROTO_RECORD_EVENTS_MAX, &nev) != 0) {
                fprintf(stderr, "topic_ids: record of %zu bytes: over %u bytes or %d events\n",
                        m->len, PROTO_RECORD_MAX_BYTES, PROTO_RECORD_EVENTS_MAX);
                rd_kafka_message_destroy(m);
                goto out;
            }
            for (int e = 0; e < nev; e++) {
                const char *data = (const char *)m->payload + sp[e].off;

                if (sp[e].len > TG_EVENT_MAX_BYTES) {
                    fprintf(stderr, "topic_ids: event of %zu bytes (> %d)\n", sp[e].len,
                            TG_EVENT_MAX_BYTES);
                    rd_kafka_message_destroy(m);
                    goto out;
                }
                if (proto_event_decode(data, sp[e].len, ev, reason, sizeof(reason)) != 0) {
                    fprintf(stderr, "topic_ids: undecodable event: %s\n", reason);
                    rd_kafka_message_destroy(m);
                    goto out;
                }
                if (m->key_len != strlen(ev->key_hash) ||
                    (m->key_len > 0 && memcmp(m->key, ev->key_hash, m->key_len) != 0)) {
                    fprintf(stderr, "topic_ids: an event of key %s in a record of another key\n",
                            ev->key_hash);
                    rd_kafka_message_destroy(m);
                    goto out;
                }
                printf("%s\n", ev->call_id);
                count++;
            }
            records++;
            if (idx >= 0)
                per[idx]++;
        }
        if (idx >= 0 && !done[idx] &&
            (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF ||
             (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->offset + 1 >= high[idx]))) {
            done[idx] = 1;
            ndone++;
        }
        rd_kafka_message_destroy(m);
    }
    fprintf(stderr, "topic_ids: %lu events in %lu records from %d partitions\n", count, records,
            nparts);
    for (int i = 0; i < nparts; i++) {
        if (per[i] != (unsigned long)(high[i] - lows[i]))
            fprintf(stderr, "topic_ids: partition %d: read %lu, watermarks %lld..%lld\n", ids[i],
                    per[i], (long long)lows[i], (long long)high[i]);
    }
    rc = 0;
out:
    if (parts != NULL)
        rd_kafka_topic_partition_list_destroy(parts);
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    if (rkt != NULL)
        rd_kafka_topic_destroy(rkt);
    if (rk != NULL) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    free(ev);
    return rc;
}
