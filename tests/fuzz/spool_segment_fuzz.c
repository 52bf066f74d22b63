/* libFuzzer target: router-svc's spool recovery and reader over a segment file of any bytes (what
 * a killed writer, a full disk or a damaged volume leaves behind), then the batch append on top.
 * The input is the content of the first segment; when its first byte has the high bit set, the
 * segment is named as starting at seq (first byte & 0x7f). Properties, abort() on violation:
 * - opening never fails on the segment's content and every record read back is at most
 *   RT_SPOOL_RECORD_MAX_BYTES (a damaged file may hold a valid frame twice or seqs out of order:
 *   its records are replayed as they are, and spend-svc keeps one row per call id);
 * - a batch appended after recovery (records cut from the input, up to RT_SPOOL_BATCH_MAX) is
 *   read back whole, in order, with consecutive seqs from the recovered next_seq;
 * - once all of it is acknowledged (the input's segment released with the others before the
 *   one written: 4 KiB segments), the same batch appended again is read back whole, and so is
 *   it, and nothing else, after a restart, with nothing counted as corrupt;
 * - nothing is read outside the buffers (ASan). */
#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[512];

    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        unlink(path);
    }
    if (d != NULL)
        closedir(d);
    rmdir(dir);
}

/* Appends the n records of recs; aborts unless each is appended with the seq after the last. */
static void append_all(struct rt_spool *sp, const struct iovec *recs, size_t n, uint64_t from)
{
    int rcs[RT_SPOOL_BATCH_MAX];
    uint64_t seqs[RT_SPOOL_BATCH_MAX];

    if (rt_spool_append_batch(sp, recs, n, 7, rcs, seqs) != (int)n)
        abort();
    for (size_t i = 0; i < n; i++) {
        if (rcs[i] != 0 || seqs[i] != from + i)
            abort();
    }
}

/* Reads the n records of recs back, seqs from "from" on, then nothing more. */
static void read_back(struct rt_spool *sp, const struct iovec *recs, size_t n, uint64_t from)
{
    static unsigned char buf[RT_SPOOL_RECORD_MAX_BYTES];
    struct rt_spool_record r;

    for (size_t i = 0; i < n; i++) {
        if (rt_spool_read_next(sp, &r, buf, sizeof(buf)) != 1 || r.seq != from + i ||
            r.len != recs[i].iov_len || r.ts_ms != 7 ||
            (r.len > 0 && memcmp(buf, recs[i].iov_base, r.len) != 0))
            abort();
    }
    if (rt_spool_read_next(sp, &r, buf, sizeof(buf)) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char buf[RT_SPOOL_RECORD_MAX_BYTES];
    char dir[64] = "/tmp/tg-spool-fuzz.XXXXXX", path[128];
    struct rt_spool_config cfg = {.dir = dir, .max_bytes = 1u << 20, .segment_bytes = 4096};
    struct rt_spool_recovery rec, rec2;
    struct rt_spool_record r;
    struct iovec recs[RT_SPOOL_BATCH_MAX];
    struct rt_spool *sp;
    char err[256];
    size_t n = 0, off = 0;
    uint64_t base;
    unsigned first_seq;
    int fd;

    if (mkdtemp(dir) == NULL)
        return 0;
    first_seq = size > 0 && (data[0] & 0x80) ? data[0] & 0x7f : 0;
    snprintf(path, sizeof(path), "%s/seg-%020u.tgs", dir, first_seq);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size) {
        if (fd >= 0)
            close(fd);
        rm_dir(dir);
        return 0;
    }
    close(fd);
    sp = rt_spool_open(&cfg, &rec, err, sizeof(err));
    if (sp == NULL)
        abort(); /* the content of a segment never keeps the spool from opening */
    while (rt_spool_read_next(sp, &r, buf, sizeof(buf)) == 1) {
        if (r.len > RT_SPOOL_RECORD_MAX_BYTES)
            abort();
    }
    /* a batch cut from the input: lengths 0..255 from successive bytes */
    while (n < RT_SPOOL_BATCH_MAX && off < size) {
        size_t len = data[off++];

        if (len > size - off)
            len = size - off;
        recs[n].iov_base = (void *)(data + off);
        recs[n].iov_len = len;
        off += len;
        n++;
    }
    append_all(sp, recs, n, rec.next_seq);
    read_back(sp, recs, n, rec.next_seq);
    /* all acknowledged: the batch again, then a restart (not where the input's seqs leave no
     * room to count on: a spool counts from 0 and never gets there) */
    if (rec.next_seq > UINT64_MAX / 2) {
        rt_spool_close(&sp);
        rm_dir(dir);
        return 0;
    }
    base = rec.next_seq + n;
    if (rt_spool_ack_below(sp, base) != 0)
        abort();
    append_all(sp, recs, n, base);
    read_back(sp, recs, n, base);
    rt_spool_close(&sp);
    sp = rt_spool_open(&cfg, &rec2, err, sizeof(err));
    if (sp == NULL || rec2.next_seq != base + n || rec2.pending != n || rec2.corrupt != 0 ||
        rec2.acked_below != base)
        abort();
    read_back(sp, recs, n, base);
    rt_spool_close(&sp);
    rm_dir(dir);
    return 0;
}
