/* Unit tests of the router-svc event spool: framing, replay after restart, checkpoints,
 * segment release, torn and corrupt records, the size bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spool.h"
#include "tg_err.h"

static char test_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(test_dir, sizeof(test_dir), "/tmp/tg-spool-test.XXXXXX");
    assert_non_null(mkdtemp(test_dir));
    return 0;
}

static int teardown(void **state)
{
    DIR *d = opendir(test_dir);
    struct dirent *de;
    char path[512];

    (void)state;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", test_dir, de->d_name);
        unlink(path);
    }
    if (d != NULL)
        closedir(d);
    rmdir(test_dir);
    return 0;
}

static int count_segments(void)
{
    DIR *d = opendir(test_dir);
    struct dirent *de;
    int n = 0;

    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "seg-", 4) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static struct rt_spool *open_spool(uint64_t max_bytes, uint64_t seg_bytes,
                                   struct rt_spool_recovery *rec)
{
    struct rt_spool_config cfg = {.dir = test_dir, .max_bytes = max_bytes,
                                  .segment_bytes = seg_bytes, .fsync_interval_ms = 0};
    char err[256] = "";
    struct rt_spool *sp = rt_spool_open(&cfg, rec, err, sizeof(err));

    if (sp == NULL)
        fail_msg("rt_spool_open: %s", err);
    return sp;
}

static void append_n(struct rt_spool *sp, int from, int n)
{
    for (int i = from; i < from + n; i++) {
        char payload[64];
        uint64_t seq = 0;
        int len = snprintf(payload, sizeof(payload), "event-%06d", i);

        assert_int_equal(rt_spool_append(sp, payload, (size_t)len, 1000 + (uint64_t)i, &seq), 0);
        assert_int_equal(seq, (uint64_t)i);
    }
}

/* Reads everything available; checks contents; returns the count and the first seq. */
static int read_all(struct rt_spool *sp, uint64_t *first, uint64_t *last)
{
    static char buf[RT_SPOOL_RECORD_MAX_BYTES];
    struct rt_spool_record rec;
    int n = 0;

    while (rt_spool_read_next(sp, &rec, buf, sizeof(buf)) == 1) {
        char want[64];
        int len = snprintf(want, sizeof(want), "event-%06d", (int)rec.seq);

        assert_int_equal(rec.len, (uint32_t)len);
        assert_memory_equal(buf, want, (size_t)len);
        assert_int_equal(rec.ts_ms, 1000 + rec.seq);
        if (n == 0 && first != NULL)
            *first = rec.seq;
        if (last != NULL)
            *last = rec.seq;
        n++;
    }
    return n;
}

static void test_append_read_ack_release(void **state)
{
    struct rt_spool_recovery rec;
    struct rt_spool_stats st;
    struct rt_spool *sp;
    uint64_t first = 0, last = 0;

    (void)state;
    sp = open_spool(1 << 20, 4096, &rec);
    assert_int_equal(rec.next_seq, 0);
    assert_int_equal(rec.pending, 0);
    append_n(sp, 0, 1000);
    assert_int_equal(read_all(sp, &first, &last), 1000);
    assert_int_equal(first, 0);
    assert_int_equal(last, 999);
    assert_int_equal(read_all(sp, NULL, NULL), 0); /* caught up */
    rt_spool_get_stats(sp, &st);
    assert_true(st.segments > 5); /* ~39 bytes a record, 4 KiB segments */
    int before = count_segments();
    assert_int_equal(rt_spool_ack_below(sp, 500), 0);
    assert_true(count_segments() < before);
    assert_true(count_segments() > 1);
    rt_spool_close(&sp);
    assert_null(sp);

    /* Restart: everything from the checkpoint on is replayed, new appends continue the seq. */
    sp = open_spool(1 << 20, 4096, &rec);
    assert_int_equal(rec.acked_below, 500);
    assert_int_equal(rec.next_seq, 1000);
    /* The segment holding 500 may also hold a few records just below it. */
    assert_true(rec.pending == 500);
    assert_int_equal(read_all(sp, &first, &last), 500);
    assert_int_equal(first, 500);
    assert_int_equal(last, 999);
    append_n(sp, 1000, 10);
    assert_int_equal(read_all(sp, &first, &last), 10);
    assert_int_equal(first, 1000);
    /* Everything acknowledged and closed: no segment is left behind. */
    assert_int_equal(rt_spool_ack_below(sp, 1010), 0);
    rt_spool_close(&sp);
    assert_int_equal(count_segments(), 0);
    sp = open_spool(1 << 20, 4096, &rec);
    assert_int_equal(rec.next_seq, 1010);
    assert_int_equal(rec.pending, 0);
    rt_spool_close(&sp);
}

/* One acknowledgement past many segments releases them all (their files are unlinked a batch
 * at a time, with the lock let go between batches), the one written excepted; the records
 * after the acknowledged ones are still read. */
static void test_ack_releases_many_segments(void **state)
{
    struct rt_spool_recovery rec;
    struct rt_spool_stats st;
    struct rt_spool *sp;
    uint64_t first = 0, last = 0;

    (void)state;
    sp = open_spool(1 << 20, 512, &rec);
    append_n(sp, 0, 2000); /* ~39 bytes a record: some 150 segments */
    rt_spool_get_stats(sp, &st);
    assert_true(st.segments > 10 * RT_SPOOL_RELEASE_MAX);
    assert_int_equal(count_segments(), (int)st.segments);
    assert_int_equal(rt_spool_ack_below(sp, 1990), 0);
    rt_spool_get_stats(sp, &st);
    assert_true(st.segments <= 2); /* the one holding 1990..1999, and the one before */
    assert_int_equal(count_segments(), (int)st.segments);
    assert_int_equal(read_all(sp, &first, &last), 10);
    assert_int_equal(first, 1990);
    assert_int_equal(last, 1999);
    assert_int_equal(rt_spool_ack_below(sp, 2000), 0);
    rt_spool_get_stats(sp, &st);
    assert_int_equal(st.segments, 1); /* the one written */
    assert_int_equal(count_segments(), 1);
    rt_spool_close(&sp);
}

static void test_rewind(void **state)
{
    struct rt_spool *sp;
    uint64_t first = 0, last = 0;

    (void)state;
    sp = open_spool(1 << 20, 1024, NULL);
    append_n(sp, 0, 200);
    assert_int_equal(read_all(sp, NULL, NULL), 200);
    rt_spool_rewind(sp, 137);
    assert_int_equal(read_all(sp, &first, &last), 63);
    assert_int_equal(first, 137);
    assert_int_equal(last, 199);
    rt_spool_close(&sp);
}

static void find_single_segment(char *path, size_t cap)
{
    DIR *d = opendir(test_dir);
    struct dirent *de;

    path[0] = '\0';
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "seg-", 4) == 0)
            snprintf(path, cap, "%s/%s", test_dir, de->d_name);
    }
    closedir(d);
    assert_true(path[0] != '\0');
}

static void test_torn_tail_skipped_rest_replayed(void **state)
{
    struct rt_spool_recovery rec;
    struct rt_spool *sp;
    struct stat stt;
    char path[512];
    uint64_t first = 0, last = 0;

    (void)state;
    sp = open_spool(1 << 20, 1 << 20, NULL);
    append_n(sp, 0, 10);
    rt_spool_close(&sp);
    find_single_segment(path, sizeof(path));
    assert_int_equal(stat(path, &stt), 0);
    assert_int_equal(truncate(path, stt.st_size - 5), 0); /* the last record is torn */
    sp = open_spool(1 << 20, 1 << 20, &rec);
    assert_int_equal(rec.pending, 9);
    assert_true(rec.corrupt >= 1);
    assert_int_equal(rec.next_seq, 9);
    assert_int_equal(read_all(sp, &first, &last), 9);
    assert_int_equal(first, 0);
    assert_int_equal(last, 8);
    /* New records go to a new segment, after the torn one. */
    append_n(sp, 9, 3);
    assert_int_equal(read_all(sp, &first, &last), 3);
    assert_int_equal(first, 9);
    rt_spool_close(&sp);
}

static void test_corrupt_middle_record_skipped(void **state)
{
    struct rt_spool_recovery rec;
    struct rt_spool *sp;
    char path[512];
    static char buf[RT_SPOOL_RECORD_MAX_BYTES];
    struct rt_spool_record r;
    int fd, n = 0;
    char c;

    (void)state;
    sp = open_spool(1 << 20, 1 << 20, NULL);
    append_n(sp, 0, 10);
    rt_spool_close(&sp);
    find_single_segment(path, sizeof(path));
    /* Each record is 28 + 12 bytes; flip a payload byte of record 3. */
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &c, 1, 3 * 40 + 30), 1);
    c ^= 0x55;
    assert_int_equal(pwrite(fd, &c, 1, 3 * 40 + 30), 1);
    close(fd);
    sp = open_spool(1 << 20, 1 << 20, &rec);
    assert_int_equal(rec.pending, 9);
    assert_int_equal(rec.next_seq, 10);
    while (rt_spool_read_next(sp, &r, buf, sizeof(buf)) == 1) {
        assert_int_not_equal(r.seq, 3);
        n++;
    }
    assert_int_equal(n, 9);
    rt_spool_close(&sp);
}

static void test_full_is_refused_and_counted(void **state)
{
    struct rt_spool_stats st;
    struct rt_spool *sp;
    char payload[1000];
    int ok = 0, full = 0;

    (void)state;
    memset(payload, 'x', sizeof(payload));
    sp = open_spool(16384, 4096, NULL);
    for (int i = 0; i < 100; i++) {
        int rc = rt_spool_append(sp, payload, sizeof(payload), 1, NULL);
        if (rc == 0)
            ok++;
        else if (rc == TG_EFULL)
            full++;
        else
            fail_msg("unexpected %d", rc);
    }
    rt_spool_get_stats(sp, &st);
    assert_true(ok > 0 && ok < 17);
    assert_int_equal(full, 100 - ok);
    assert_int_equal(st.full, (uint64_t)full);
    assert_true(st.bytes <= 16384);
    assert_false(rt_spool_has_room(sp, sizeof(payload)));
    /* Acknowledging releases segments and makes room again. */
    rt_spool_ack_below(sp, (uint64_t)ok);
    assert_true(rt_spool_has_room(sp, sizeof(payload)));
    assert_int_equal(rt_spool_append(sp, payload, 70000, 1, NULL), TG_ETOOBIG);
    rt_spool_close(&sp);
}

/* A batch: one call appends records in order under consecutive seqs, rolling segments in
 * the middle of it where the next record would pass segment_bytes (one write per segment), and
 * reads back as single appends do, also after a restart. */
static void test_batch_appends_in_order_across_segments(void **state)
{
    static char buf[RT_SPOOL_RECORD_MAX_BYTES];
    char payloads[RT_SPOOL_BATCH_MAX][64];
    struct iovec recs[RT_SPOOL_BATCH_MAX];
    int rcs[RT_SPOOL_BATCH_MAX];
    uint64_t seqs[RT_SPOOL_BATCH_MAX];
    struct rt_spool_recovery rec;
    struct rt_spool_stats st;
    struct rt_spool_record r;
    struct rt_spool *sp;

    (void)state;
    sp = open_spool(1 << 20, 512, &rec); /* ~39 bytes a record: a segment holds 13 */
    append_n(sp, 0, 3);
    assert_int_equal(read_all(sp, NULL, NULL), 3);
    for (unsigned i = 0; i < RT_SPOOL_BATCH_MAX; i++) {
        int len = snprintf(payloads[i], sizeof(payloads[i]), "batch-%06u", i);

        recs[i].iov_base = payloads[i];
        recs[i].iov_len = (size_t)len;
        rcs[i] = -1;
    }
    rt_spool_get_stats(sp, &st);
    uint32_t segs_before = st.segments;
    assert_int_equal(rt_spool_append_batch(sp, recs, RT_SPOOL_BATCH_MAX, 77, rcs, seqs),
                     (int)RT_SPOOL_BATCH_MAX);
    rt_spool_get_stats(sp, &st);
    assert_true(st.segments >= segs_before + 4); /* 64 records in 512-byte segments */
    assert_int_equal(st.next_seq, 3 + RT_SPOOL_BATCH_MAX);
    for (unsigned i = 0; i < RT_SPOOL_BATCH_MAX; i++) {
        assert_int_equal(rcs[i], 0);
        assert_int_equal(seqs[i], 3 + (uint64_t)i);
        assert_int_equal(rt_spool_read_next(sp, &r, buf, sizeof(buf)), 1);
        assert_int_equal(r.seq, 3 + (uint64_t)i);
        assert_int_equal(r.ts_ms, 77);
        assert_int_equal(r.len, recs[i].iov_len);
        assert_memory_equal(buf, recs[i].iov_base, recs[i].iov_len);
    }
    assert_int_equal(rt_spool_read_next(sp, &r, buf, sizeof(buf)), 0); /* caught up */
    assert_int_equal(rt_spool_append_batch(sp, recs, RT_SPOOL_BATCH_MAX + 1, 77, rcs, seqs),
                     TG_EINVAL);
    rt_spool_close(&sp);
    /* restart: every record of both kinds is recovered, the seq goes on */
    sp = open_spool(1 << 20, 512, &rec);
    assert_int_equal(rec.next_seq, 3 + RT_SPOOL_BATCH_MAX);
    assert_int_equal(rec.pending, 3 + RT_SPOOL_BATCH_MAX);
    assert_int_equal(rec.corrupt, 0);
    append_n(sp, 3 + RT_SPOOL_BATCH_MAX, 2);
    rt_spool_close(&sp);
}

/* A batch against the size bound: the records that fit are appended, each one that does not is
 * refused with TG_EFULL and counted, a record over the cap is TG_ETOOBIG, and a smaller record
 * after a refused one is still tried; nothing past max_bytes is ever written. */
static void test_batch_full_and_too_big_per_record(void **state)
{
    static char big[RT_SPOOL_RECORD_MAX_BYTES + 1];
    char payload[1000];
    struct iovec recs[24];
    int rcs[24];
    struct rt_spool_stats st;
    struct rt_spool *sp;
    int ok = 0, full = 0, n;

    (void)state;
    memset(payload, 'x', sizeof(payload));
    sp = open_spool(16384, 4096, NULL);
    for (int i = 0; i < 20; i++) {
        recs[i].iov_base = payload;
        recs[i].iov_len = sizeof(payload);
    }
    recs[20].iov_base = big; /* over the cap */
    recs[20].iov_len = sizeof(big);
    recs[21].iov_base = payload; /* small: fits where a 1000-byte one no longer does */
    recs[21].iov_len = 10;
    n = rt_spool_append_batch(sp, recs, 22, 5, rcs, NULL);
    for (int i = 0; i < 20; i++) {
        if (rcs[i] == 0)
            ok++;
        else if (rcs[i] == TG_EFULL)
            full++;
        else
            fail_msg("record %d: unexpected %d", i, rcs[i]);
    }
    assert_true(ok > 0 && ok < 17);
    assert_int_equal(full, 20 - ok);
    assert_int_equal(rcs[20], TG_ETOOBIG);
    assert_int_equal(rcs[21], 0);
    assert_int_equal(n, ok + 1);
    rt_spool_get_stats(sp, &st);
    assert_int_equal(st.full, (uint64_t)full);
    assert_true(st.bytes <= 16384);
    assert_int_equal(st.next_seq, (uint64_t)ok + 1);
    rt_spool_close(&sp);
}

/* The reader's read-ahead: records of many sizes (up to the 64 KiB cap, so that frames straddle
 * and exceed what one buffer fill holds), read while the writer goes on appending (a buffer
 * filled short of the newest records is refilled, never served stale), across segment rolls,
 * come back whole and in order. */
static void test_read_ahead_while_appending(void **state)
{
    static unsigned char payload[RT_SPOOL_RECORD_MAX_BYTES], buf[RT_SPOOL_RECORD_MAX_BYTES];
    struct rt_spool_recovery rec;
    struct rt_spool *sp;
    struct rt_spool_record r;
    uint64_t next_read = 0;
    uint32_t lens[3000];
    int appended = 0;

    (void)state;
    sp = open_spool(512ull * 1024 * 1024, 2ull * 1024 * 1024, &rec);
    for (int i = 0; i < 3000; i++)
        lens[i] = i % 97 == 0 ? RT_SPOOL_RECORD_MAX_BYTES - (uint32_t)(i % 7)
                              : 1 + (uint32_t)((i * 7919u) % 3000u);
    while (appended < 3000 || next_read < 3000) {
        /* append a burst, then read some of it (not all: the buffer ends mid-stream) */
        for (int k = 0; k < 37 && appended < 3000; k++, appended++) {
            for (uint32_t b = 0; b < lens[appended]; b++)
                payload[b] = (unsigned char)(appended * 31 + b);
            assert_int_equal(rt_spool_append(sp, payload, lens[appended], 1000 + (uint64_t)appended,
                                             NULL),
                             0);
        }
        for (int k = 0; k < 29 || appended == 3000; k++) {
            int rc = rt_spool_read_next(sp, &r, buf, sizeof(buf));

            if (rc == 0)
                break;
            assert_int_equal(rc, 1);
            assert_int_equal(r.seq, next_read);
            assert_int_equal(r.len, lens[next_read]);
            for (uint32_t b = 0; b < r.len; b++) {
                if (buf[b] != (unsigned char)(next_read * 31 + b))
                    fail_msg("record %llu byte %u differs", (unsigned long long)next_read, b);
            }
            next_read++;
        }
    }
    assert_int_equal(next_read, 3000);
    assert_true(count_segments() > 1);
    rt_spool_close(&sp);
}

/* Reads everything available: n records, seqs first to last. */
static void read_expect(struct rt_spool *sp, int n, uint64_t first, uint64_t last)
{
    uint64_t f = UINT64_MAX, l = UINT64_MAX;

    assert_int_equal(read_all(sp, &f, &l), n);
    assert_int_equal(f, first);
    assert_int_equal(l, last);
}

/* Closes *sp and opens the spool again (1 MiB, 4 KiB segments): recovery must find next_seq,
 * pending records to replay and nothing corrupt. */
static void reopen_expect(struct rt_spool **sp, uint64_t next_seq, uint64_t pending)
{
    struct rt_spool_recovery rec;

    rt_spool_close(sp);
    *sp = open_spool(1 << 20, 4096, &rec);
    assert_int_equal(rec.next_seq, next_seq);
    assert_int_equal(rec.pending, pending);
    assert_int_equal(rec.corrupt, 0);
}

/* The path of the segment file starting at first. */
static void seg_file(uint64_t first, char *out, size_t cap)
{
    snprintf(out, cap, "%s/seg-%020llu.tgs", test_dir, (unsigned long long)first);
}

/* A segment without a record (a roll killed before its first write) is removed by recovery, so
 * that the next roll, which takes the same name, gets a file of its own and one entry. */
static void test_recovery_drops_segment_without_record(void **state)
{
    struct rt_spool_recovery rec;
    struct rt_spool_stats st;
    struct rt_spool *sp;
    char path[512];
    int fd;

    (void)state;
    sp = open_spool(1 << 20, 4096, NULL);
    append_n(sp, 0, 10);
    rt_spool_close(&sp);
    seg_file(10, path, sizeof(path));
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    close(fd);
    sp = open_spool(1 << 20, 4096, &rec);
    assert_int_equal(rec.segments, 1);
    assert_int_equal(rec.next_seq, 10);
    assert_int_equal(count_segments(), 1);
    append_n(sp, 10, 10);
    rt_spool_get_stats(sp, &st);
    assert_int_equal(st.segments, 2);
    assert_int_equal(count_segments(), 2);
    read_expect(sp, 20, 0, 19);
    reopen_expect(&sp, 20, 20);
    read_expect(sp, 20, 0, 19);
    rt_spool_close(&sp);
}

/* A segment named past its records (a damaged directory: seg-100 holding 0..9): its records are
 * replayed, and new segments go after it, in order, so that the reader reads them all. */
static void test_segment_named_past_its_records(void **state)
{
    struct rt_spool_recovery rec;
    struct rt_spool *sp;
    char from[512], to[512];

    (void)state;
    sp = open_spool(1 << 20, 4096, NULL);
    append_n(sp, 0, 10);
    rt_spool_close(&sp);
    seg_file(0, from, sizeof(from));
    seg_file(100, to, sizeof(to));
    assert_int_equal(rename(from, to), 0);
    sp = open_spool(1 << 20, 4096, &rec);
    assert_int_equal(rec.pending, 10);
    assert_int_equal(rec.next_seq, 101);
    read_expect(sp, 10, 0, 9);
    append_n(sp, 101, 3);
    read_expect(sp, 3, 101, 103);
    reopen_expect(&sp, 104, 13);
    read_expect(sp, 13, 0, 103);
    rt_spool_close(&sp);
}

/* Many rolls with acknowledgements between: segments are released as they go, the reader reads
 * each record once and whole, and a restart at any point finds exactly the records not
 * acknowledged. */
static void test_rolls_acks_and_restarts(void **state)
{
    struct rt_spool_recovery rec;
    struct rt_spool *sp;
    uint64_t next = 0;

    (void)state;
    sp = open_spool(1 << 20, 1024, NULL);
    for (int round = 0; round < 40; round++) {
        int n = 17 + (round * 13) % 61;

        append_n(sp, (int)next, n);
        read_expect(sp, n, next, next + (uint64_t)n - 1);
        next += (uint64_t)n;
        /* acknowledge all but the last few; the reader does not read again */
        assert_int_equal(rt_spool_ack_below(sp, next - 5), 0);
        assert_true(count_segments() <= 3);
        if (round % 9 == 8) {
            rt_spool_close(&sp);
            sp = open_spool(1 << 20, 1024, &rec);
            assert_int_equal(rec.next_seq, next);
            assert_int_equal(rec.pending, 5);
            assert_int_equal(rec.corrupt, 0);
            read_expect(sp, 5, next - 5, next - 1);
        }
    }
    rt_spool_close(&sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_append_read_ack_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ack_releases_many_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_skipped_rest_replayed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_middle_record_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_is_refused_and_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_ahead_while_appending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_appends_in_order_across_segments, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_batch_full_and_too_big_per_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recovery_drops_segment_without_record, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_segment_named_past_its_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rolls_acks_and_restarts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
