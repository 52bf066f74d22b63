/* rt_spool: the local append-only event spool of router-svc.
 *
 * Every event is written here before the last byte of its response reaches the client, so a
 * SIGKILL after the response cannot lose it: a write() to the page cache survives the death of
 * the process. Kafka delivery is tracked separately (rt_publisher) and reported back through
 * rt_spool_ack_below(), which persists a checkpoint and deletes fully acknowledged segments.
 *
 * On disk: segment files "seg-<first seq, 20 digits>.tgs" and a "checkpoint" file. A record is
 *   magic u32 | len u32 | seq u64 | ts_ms u64 | crc32c u32 | payload[len]
 * (little endian; the CRC covers len, seq, ts_ms and the payload). A torn or corrupt record is
 * skipped, counted and logged once; reading resynchronises on the next valid record.
 *
 * Bounds: the total bytes of live segments never exceed max_bytes (append returns TG_EFULL);
 * segments roll at segment_bytes; the segment table holds at most
 * max_bytes / segment_bytes + RT_SPOOL_EXTRA_SEGMENTS entries, set at open.
 *
 * Threads: rt_spool_append() and rt_spool_append_batch() from any request thread (one mutex,
 * held for one write() per segment); the read, rewind, ack and sync calls from a single
 * publisher thread. The reader reads ahead: one pread of up to 256 KiB of the segment's
 * written bytes serves the records in it. */
#ifndef RT_SPOOL_H
#define RT_SPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define RT_SPOOL_RECORD_MAX_BYTES 65536u /* payload cap; events are <= 4 KiB */
#define RT_SPOOL_SEGMENT_BYTES_DEFAULT (64ull * 1024 * 1024)
#define RT_SPOOL_EXTRA_SEGMENTS 4
#define RT_SPOOL_RELEASE_MAX 16 /* segments released per hold of the lock */

struct rt_spool;

struct rt_spool_config {
    const char *dir;          /* directory, created if missing (borrowed) */
    uint64_t max_bytes;       /* cap on live segment bytes, > 0 */
    uint64_t segment_bytes;   /* roll size, > 0 and <= max_bytes */
    uint32_t fsync_interval_ms; /* 0: never fsync (page cache only); else rt_spool_sync() syncs */
};

/* What rt_spool_open() found on disk. */
struct rt_spool_recovery {
    uint64_t acked_below;  /* checkpoint: every seq below this was acknowledged */
    uint64_t next_seq;     /* first seq new appends get */
    uint64_t pending;      /* valid records at or above the checkpoint (to replay) */
    uint64_t corrupt;      /* records skipped as torn or corrupt */
    uint32_t segments;     /* live segments after cleanup */
};

struct rt_spool_record {
    uint64_t seq;     /* sequence number: increasing as appended (a damaged segment
                       * may repeat one; recovery replays it as is) */
    uint64_t ts_ms;   /* epoch ms at append */
    uint32_t len;     /* payload bytes */
};

struct rt_spool_stats {
    uint64_t appended;      /* records appended since open */
    uint64_t full;          /* appends refused because the spool was full */
    uint64_t corrupt;       /* corrupt or torn records skipped (recovery and reads) */
    uint64_t bytes;         /* live segment bytes */
    uint32_t segments;      /* live segments */
    uint64_t acked_below;   /* checkpoint */
    uint64_t next_seq;      /* next seq to assign */
    uint64_t write_errors;  /* failed write() calls */
};

/* rt_spool_open: open or create the spool in cfg->dir, recover what is there (see
 * struct rt_spool_recovery) and position the reader at the checkpoint. A segment without a
 * record is removed (no later roll may take its name). New appends go to a new segment.
 * Returns new spool (rt_spool_close) or NULL with a message in err. Main thread. */
struct rt_spool *rt_spool_open(const struct rt_spool_config *cfg, struct rt_spool_recovery *rec,
                               char *err, size_t errlen);

/* rt_spool_close: close files and free (accepts NULL; sets *sp to NULL). Nothing is deleted
 * except what rt_spool_ack_below() already released. */
void rt_spool_close(struct rt_spool **sp);

/* rt_spool_append: append one record (len <= RT_SPOOL_RECORD_MAX_BYTES) with one write().
 * Returns 0 and the record's seq in *seq_out (may be NULL), TG_EFULL when max_bytes would be
 * exceeded (counted), TG_ETOOBIG, or TG_EIO. Any thread. */
int rt_spool_append(struct rt_spool *sp, const void *payload, size_t len, uint64_t ts_ms,
                    uint64_t *seq_out);

/* rt_spool_append_batch: append n records (n <= RT_SPOOL_BATCH_MAX, each as rt_spool_append
 * would) under one lock with one writev per segment they go to, in order: rcs[i] is record i's
 * result as rt_spool_append returns it, seqs[i] (seqs may be NULL) its seq when rcs[i] is 0.
 * A record that does not fit is refused (TG_EFULL) and the next ones are still tried. Returns
 * how many were appended, or TG_EINVAL when n is over the cap. Any thread. */
#define RT_SPOOL_BATCH_MAX 64u
int rt_spool_append_batch(struct rt_spool *sp, const struct iovec *recs, size_t n, uint64_t ts_ms,
                          int *rcs, uint64_t *seqs);

/* rt_spool_has_room: 1 when a record of len bytes would fit now. Any thread. */
int rt_spool_has_room(struct rt_spool *sp, size_t len);

/* rt_spool_read_next: copy the next record at or after the read cursor into buf (cap bytes;
 * cap >= RT_SPOOL_RECORD_MAX_BYTES) and advance. Returns 1 with *rec filled, 0 when the reader
 * has caught up with the writer, or TG_EIO. Corrupt records are skipped (counted). Publisher
 * thread only. */
int rt_spool_read_next(struct rt_spool *sp, struct rt_spool_record *rec, void *buf, size_t cap);

/* rt_spool_rewind: move the read cursor back so that the next read returns the first record
 * with seq >= seq. Publisher thread only. */
void rt_spool_rewind(struct rt_spool *sp, uint64_t seq);

/* rt_spool_ack_below: every record with seq < seq is acknowledged: persist the checkpoint
 * (tmp + rename) and delete segments whose records are all below it (never the segment being
 * written). Returns 0 or TG_EIO. Publisher thread only. */
int rt_spool_ack_below(struct rt_spool *sp, uint64_t seq);

/* rt_spool_sync: fdatasync the segment being written (fsync policy interval_ms). */
void rt_spool_sync(struct rt_spool *sp);

/* rt_spool_get_stats: snapshot. Any thread. */
void rt_spool_get_stats(struct rt_spool *sp, struct rt_spool_stats *out);

#endif
