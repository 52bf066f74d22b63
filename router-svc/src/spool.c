#include "spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tg_crc32c.h"
#include "tg_err.h"
#include "tg_log.h"

#define SPOOL_MAGIC 0x314c4754u /* "TGL1" little endian */
#define SPOOL_HDR_BYTES 28u
#define SPOOL_SCAN_CHUNK 65536u
#define SPOOL_READAHEAD (256u * 1024) /* the reader's buffer: one pread serves many records */

struct spool_segment {
    uint64_t first_seq; /* seq of its first record; every seq in it is < the next one's */
    uint64_t bytes;     /* file size (readable bytes) */
};

struct rt_spool {
    char dir[PATH_MAX];
    struct rt_spool_config cfg;
    pthread_mutex_t mu;           /* guards segs, nsegs, wfd, next_seq, live_bytes */
    struct spool_segment *segs;   /* ascending first_seq; the last is written when wfd >= 0 */
    uint32_t nsegs;
    uint32_t cap_segs;            /* set at open */
    int wfd;                      /* segment being written, or -1 before the first append */
    uint64_t next_seq;
    uint64_t live_bytes;
    /* Reader state: publisher thread only. */
    uint64_t r_seg;               /* first_seq of the segment being read */
    uint64_t r_off;               /* byte offset in it */
    uint64_t r_bytes;             /* its readable bytes when last looked up (only grow) */
    uint64_t r_next;              /* the first seq of the next segment then, or UINT64_MAX */
    int r_known;                  /* r_bytes and r_next hold for r_seg (else look up, under mu) */
    uint64_t r_min_seq;           /* records below this are skipped */
    int rfd;                      /* open segment for reading, or -1 */
    uint64_t rfd_seg;             /* which segment rfd is */
    unsigned char *ra;            /* read-ahead of rfd: SPOOL_READAHEAD bytes */
    uint64_t ra_off;              /* file offset of ra[0] */
    size_t ra_len;                /* valid bytes in ra; 0 after rfd changes */
    uint64_t acked_below;         /* checkpoint */
    _Atomic uint64_t st_appended;
    _Atomic uint64_t st_full;
    _Atomic uint64_t st_corrupt;
    _Atomic uint64_t st_write_errors;
};

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void seg_path(const struct rt_spool *sp, uint64_t first_seq, char *out, size_t cap)
{
    snprintf(out, cap, "%s/seg-%020" PRIu64 ".tgs", sp->dir, first_seq);
}

static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return TG_EIO;
        got += (size_t)r;
    }
    return 0;
}

/* n bytes at off of the reader's segment (rfd), of which size are readable: from the read-ahead
 * buffer, refilled with one pread of up to SPOOL_READAHEAD readable bytes when it does not hold
 * them (a segment is append-only below its readable size, so buffered bytes never change).
 * Without a buffer (sp NULL: recovery scans) a plain pread. Returns 0 or TG_EIO. */
static int reader_pread(struct rt_spool *sp, int fd, void *dst, size_t n, uint64_t off,
                        uint64_t size)
{
    if (sp == NULL || sp->ra == NULL || n > SPOOL_READAHEAD)
        return pread_full(fd, dst, n, off);
    if (off < sp->ra_off || off + n > sp->ra_off + sp->ra_len) {
        size_t want = size - off < SPOOL_READAHEAD ? (size_t)(size - off) : SPOOL_READAHEAD;

        sp->ra_len = 0;
        if (want < n || pread_full(fd, sp->ra, want, off) != 0)
            return TG_EIO;
        sp->ra_off = off;
        sp->ra_len = want;
    }
    memcpy(dst, sp->ra + (off - sp->ra_off), n);
    return 0;
}

/* Validates the frame at off (through the reader's buffer when ra is given). Returns 1 valid
 * (fills rec and payload), 0 invalid, TG_EIO. */
static int frame_check(struct rt_spool *ra, int fd, uint64_t size, uint64_t off,
                       struct rt_spool_record *rec, void *buf, size_t cap)
{
    unsigned char hdr[SPOOL_HDR_BYTES];
    uint32_t len, crc;

    if (off + SPOOL_HDR_BYTES > size)
        return 0;
    if (reader_pread(ra, fd, hdr, sizeof(hdr), off, size) != 0)
        return TG_EIO;
    if (get32(hdr) != SPOOL_MAGIC)
        return 0;
    len = get32(hdr + 4);
    if (len > RT_SPOOL_RECORD_MAX_BYTES || len > cap || off + SPOOL_HDR_BYTES + len > size)
        return 0;
    if (len > 0 && reader_pread(ra, fd, buf, len, off + SPOOL_HDR_BYTES, size) != 0)
        return TG_EIO;
    crc = tg_crc32c(0, hdr + 4, 20);
    crc = tg_crc32c(crc, buf, len);
    if (crc != get32(hdr + 24))
        return 0;
    rec->seq = get64(hdr + 8);
    rec->ts_ms = get64(hdr + 16);
    rec->len = len;
    return 1;
}

/* Reads the frame at *off, resynchronising on the next valid frame past corruption.
 * Returns 1 (frame read, *off past it), 0 (end of the readable bytes), or TG_EIO. */
static int frame_next(struct rt_spool *sp, int reader, int fd, uint64_t size, uint64_t *off,
                      struct rt_spool_record *rec, void *buf, size_t cap)
{
    static const unsigned char magic[4] = {0x54, 0x47, 0x4c, 0x31};
    unsigned char *chunk = NULL;
    int rc;

    while (*off < size) {
        rc = frame_check(reader ? sp : NULL, fd, size, *off, rec, buf, cap);
        if (rc < 0)
            goto out;
        if (rc == 1) {
            *off += SPOOL_HDR_BYTES + rec->len;
            rc = 1;
            goto out;
        }
        /* Torn or corrupt: count it once and look for the next magic. */
        atomic_fetch_add(&sp->st_corrupt, 1);
        TG_WARN_RL("event=spool_corrupt_record offset=%" PRIu64 " action=skip", *off);
        if (chunk == NULL && (chunk = malloc(SPOOL_SCAN_CHUNK)) == NULL) {
            rc = TG_ENOMEM;
            goto out;
        }
        {
            uint64_t pos = *off + 1;
            int found = 0;

            while (pos < size && !found) {
                size_t n = size - pos < SPOOL_SCAN_CHUNK ? (size_t)(size - pos) : SPOOL_SCAN_CHUNK;
                unsigned char *hit;

                if (pread_full(fd, chunk, n, pos) != 0) {
                    rc = TG_EIO;
                    goto out;
                }
                hit = memmem(chunk, n, magic, sizeof(magic));
                if (hit != NULL) {
                    *off = pos + (uint64_t)(hit - chunk);
                    found = 1;
                } else {
                    pos += n > 3 ? n - 3 : n;
                }
            }
            if (!found)
                *off = size;
        }
    }
    rc = 0;
out:
    free(chunk);
    return rc;
}

static int write_checkpoint(struct rt_spool *sp, uint64_t acked_below)
{
    char path[PATH_MAX + 16], tmp[PATH_MAX + 16], line[64];
    int fd, n;

    snprintf(path, sizeof(path), "%s/checkpoint", sp->dir);
    snprintf(tmp, sizeof(tmp), "%s/checkpoint.tmp", sp->dir);
    n = snprintf(line, sizeof(line), "acked_below=%" PRIu64 "\n", acked_below);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return TG_EIO;
    if (write(fd, line, (size_t)n) != n) {
        close(fd);
        return TG_EIO;
    }
    if (sp->cfg.fsync_interval_ms > 0)
        fdatasync(fd);
    close(fd);
    return rename(tmp, path) == 0 ? 0 : TG_EIO;
}

static uint64_t read_checkpoint(const char *dir)
{
    char path[PATH_MAX + 16];
    unsigned long long v = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/checkpoint", dir);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    if (fscanf(f, "acked_below=%llu", &v) != 1)
        v = 0;
    fclose(f);
    return (uint64_t)v;
}

static int cmp_seg(const void *a, const void *b)
{
    const struct spool_segment *x = a, *y = b;

    return x->first_seq < y->first_seq ? -1 : x->first_seq > y->first_seq;
}

static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];

    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0750) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0750) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Lists segment files into sp->segs. Returns 0 or an error with err filled. */
static int load_segments(struct rt_spool *sp, char *err, size_t errlen)
{
    DIR *d = opendir(sp->dir);
    struct dirent *de;

    if (d == NULL) {
        snprintf(err, errlen, "spool: cannot open %s: %s", sp->dir, strerror(errno));
        return TG_EIO;
    }
    while ((de = readdir(d)) != NULL) {
        unsigned long long first;
        char path[PATH_MAX + 64];
        struct stat st;
        int consumed = 0;

        if (sscanf(de->d_name, "seg-%20llu.tgs%n", &first, &consumed) != 1 ||
            de->d_name[consumed] != '\0')
            continue;
        if (sp->nsegs == sp->cap_segs) {
            closedir(d);
            snprintf(err, errlen, "spool: %s holds more than %u segments (max_bytes / "
                     "segment_bytes): raise tollgate.spool.max_bytes", sp->dir, sp->cap_segs);
            return TG_EFULL;
        }
        seg_path(sp, first, path, sizeof(path));
        if (stat(path, &st) != 0)
            continue;
        sp->segs[sp->nsegs].first_seq = first;
        sp->segs[sp->nsegs].bytes = (uint64_t)st.st_size;
        sp->nsegs++;
    }
    closedir(d);
    qsort(sp->segs, sp->nsegs, sizeof(sp->segs[0]), cmp_seg);
    return 0;
}

/* Drop segment i from the table (its file stays). */
static void forget_segment_at(struct rt_spool *sp, uint32_t i)
{
    sp->live_bytes -= sp->segs[i].bytes;
    memmove(&sp->segs[i], &sp->segs[i + 1], (sp->nsegs - i - 1) * sizeof(sp->segs[0]));
    sp->nsegs--;
}

static void remove_segment_at(struct rt_spool *sp, uint32_t i)
{
    char path[PATH_MAX + 64];

    seg_path(sp, sp->segs[i].first_seq, path, sizeof(path));
    unlink(path);
    forget_segment_at(sp, i);
}

struct rt_spool *rt_spool_open(const struct rt_spool_config *cfg, struct rt_spool_recovery *rec,
                               char *err, size_t errlen)
{
    struct rt_spool *sp = NULL;
    void *buf = NULL;
    struct rt_spool_recovery r = {0};

    if (cfg->dir == NULL || cfg->dir[0] == '\0' || cfg->max_bytes == 0 ||
        cfg->segment_bytes == 0 || cfg->segment_bytes > cfg->max_bytes) {
        snprintf(err, errlen, "spool: dir must be set, 0 < segment_bytes <= max_bytes");
        return NULL;
    }
    sp = calloc(1, sizeof(*sp));
    buf = malloc(RT_SPOOL_RECORD_MAX_BYTES);
    if (sp != NULL) {
        sp->wfd = -1;
        sp->rfd = -1;
        sp->ra = malloc(SPOOL_READAHEAD);
    }
    if (sp == NULL || buf == NULL || sp->ra == NULL) {
        snprintf(err, errlen, "spool: out of memory");
        goto fail;
    }
    snprintf(sp->dir, sizeof(sp->dir), "%s", cfg->dir);
    sp->cfg = *cfg;
    sp->cfg.dir = sp->dir;
    sp->wfd = -1;
    sp->rfd = -1;
    pthread_mutex_init(&sp->mu, NULL);
    sp->cap_segs = (uint32_t)(cfg->max_bytes / cfg->segment_bytes) + RT_SPOOL_EXTRA_SEGMENTS;
    sp->segs = calloc(sp->cap_segs, sizeof(sp->segs[0]));
    if (sp->segs == NULL) {
        snprintf(err, errlen, "spool: out of memory");
        goto fail;
    }
    if (mkdir_p(sp->dir) != 0) {
        snprintf(err, errlen, "spool: cannot create %s: %s", sp->dir, strerror(errno));
        goto fail;
    }
    if (load_segments(sp, err, errlen) != 0)
        goto fail;

    r.acked_below = read_checkpoint(sp->dir);
    sp->next_seq = r.acked_below;
    for (uint32_t i = 0; i < sp->nsegs; i++) {
        char path[PATH_MAX + 64];
        uint64_t off = 0, nrec = 0;
        struct rt_spool_record fr;
        int fd, rc;

        seg_path(sp, sp->segs[i].first_seq, path, sizeof(path));
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errlen, "spool: cannot read %s: %s", path, strerror(errno));
            goto fail;
        }
        while ((rc = frame_next(sp, 0, fd, sp->segs[i].bytes, &off, &fr, buf,
                                RT_SPOOL_RECORD_MAX_BYTES)) == 1) {
            if (fr.seq >= r.acked_below)
                r.pending++;
            if (fr.seq + 1 > sp->next_seq)
                sp->next_seq = fr.seq + 1;
            nrec++;
        }
        close(fd);
        if (rc < 0) {
            snprintf(err, errlen, "spool: cannot read %s: %s", path, tg_strerror(rc));
            goto fail;
        }
        sp->live_bytes += sp->segs[i].bytes;
        if (nrec == 0) {
            /* Nothing to replay (a roll killed before its first write, or nothing but damage):
             * gone, so that no new segment is ever given the name of one still listed (the
             * roll would append to its file and list it twice). */
            remove_segment_at(sp, i);
            i--;
        } else if (sp->segs[i].first_seq >= sp->next_seq) {
            /* Named past its records (a damaged directory): new segments go after it all the
             * same, the segments staying in order (the seqs between are never used). */
            sp->next_seq = sp->segs[i].first_seq + 1;
        }
    }
    r.corrupt = atomic_load(&sp->st_corrupt);
    if (r.corrupt > 0)
        TG_WARN("event=spool_recovered_corrupt dir_records_skipped=%" PRIu64, r.corrupt);
    sp->acked_below = r.acked_below;
    /* Segments wholly below the checkpoint were acknowledged before a crash: release them. */
    while (sp->nsegs > 1 && sp->segs[1].first_seq <= sp->acked_below)
        remove_segment_at(sp, 0);
    if (sp->nsegs == 1 && sp->next_seq <= sp->acked_below)
        remove_segment_at(sp, 0);
    sp->r_seg = sp->nsegs > 0 ? sp->segs[0].first_seq : sp->next_seq;
    sp->r_off = 0;
    sp->r_min_seq = sp->acked_below;
    r.next_seq = sp->next_seq;
    r.segments = sp->nsegs;
    if (rec != NULL)
        *rec = r;
    free(buf);
    return sp;
fail:
    free(buf);
    rt_spool_close(&sp);
    return NULL;
}

void rt_spool_close(struct rt_spool **spp)
{
    struct rt_spool *sp;

    if (spp == NULL || *spp == NULL)
        return;
    sp = *spp;
    *spp = NULL;
    if (sp->wfd >= 0)
        close(sp->wfd);
    if (sp->rfd >= 0)
        close(sp->rfd);
    /* Everything acknowledged: leave no segment behind (the checkpoint keeps the sequence). */
    if (sp->segs != NULL && sp->acked_below >= sp->next_seq) {
        while (sp->nsegs > 0)
            remove_segment_at(sp, 0);
    }
    pthread_mutex_destroy(&sp->mu);
    free(sp->segs);
    free(sp->ra);
    free(sp);
}

/* Opens a new write segment starting at next_seq. Caller holds mu. */
static int roll_segment(struct rt_spool *sp)
{
    char path[PATH_MAX + 64];
    int fd;

    if (sp->nsegs == sp->cap_segs)
        return TG_EFULL;
    seg_path(sp, sp->next_seq, path, sizeof(path));
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        TG_ERROR_RL("event=spool_open_failed errno=%d", errno);
        return TG_EIO;
    }
    if (sp->wfd >= 0)
        close(sp->wfd);
    sp->wfd = fd;
    sp->segs[sp->nsegs].first_seq = sp->next_seq;
    sp->segs[sp->nsegs].bytes = 0;
    sp->nsegs++;
    return 0;
}

int rt_spool_has_room(struct rt_spool *sp, size_t len)
{
    int ok;

    pthread_mutex_lock(&sp->mu);
    ok = sp->live_bytes + SPOOL_HDR_BYTES + len <= sp->cfg.max_bytes;
    pthread_mutex_unlock(&sp->mu);
    return ok;
}

/* Writes the k frames gathered in iov (header and payload each, pend bytes in all) at the end
 * of the segment being written, in one writev, and sets their results in rcs (and their seqs).
 * A short write is cut back, so that the reader never meets a partial frame. Caller holds mu. */
static void write_frames(struct rt_spool *sp, struct iovec *iov, unsigned k, uint64_t pend,
                         const unsigned *idx, int *rcs, uint64_t *seqs)
{
    struct spool_segment *cur = &sp->segs[sp->nsegs - 1];
    ssize_t w;

    if (k == 0)
        return;
    do {
        w = writev(sp->wfd, iov, (int)(2 * k));
    } while (w < 0 && errno == EINTR);
    if (w != (ssize_t)pend) {
        /* Never leave a partial frame for the reader: cut the file back. */
        if (w > 0 && ftruncate(sp->wfd, (off_t)cur->bytes) != 0) {
            cur->bytes += (uint64_t)w; /* the reader will skip it as corrupt */
            sp->live_bytes += (uint64_t)w; /* (releasing the segment subtracts its bytes) */
        }
        atomic_fetch_add(&sp->st_write_errors, 1);
        TG_ERROR_RL("event=spool_write_failed errno=%d records=%u", w < 0 ? errno : 0, k);
        for (unsigned j = 0; j < k; j++)
            rcs[idx[j]] = TG_EIO;
        return;
    }
    cur->bytes += pend;
    sp->live_bytes += pend;
    for (unsigned j = 0; j < k; j++) {
        rcs[idx[j]] = 0;
        if (seqs != NULL)
            seqs[idx[j]] = sp->next_seq + j;
    }
    sp->next_seq += k;
    atomic_fetch_add(&sp->st_appended, k);
}

int rt_spool_append_batch(struct rt_spool *sp, const struct iovec *recs, size_t n, uint64_t ts_ms,
                          int *rcs, uint64_t *seqs)
{
    unsigned char hdr[RT_SPOOL_BATCH_MAX][SPOOL_HDR_BYTES];
    struct iovec iov[2 * RT_SPOOL_BATCH_MAX];
    unsigned idx[RT_SPOOL_BATCH_MAX] = {0}; /* (k == 0 reads none: for the compiler) */
    unsigned k = 0; /* frames gathered, not written yet */
    uint64_t pend = 0;
    unsigned ok = 0;

    if (n > RT_SPOOL_BATCH_MAX)
        return TG_EINVAL;
    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < n; i++) {
        size_t len = recs[i].iov_len;
        uint64_t frame = SPOOL_HDR_BYTES + len;
        struct spool_segment *cur;
        uint32_t crc;
        int rc;

        if (len > RT_SPOOL_RECORD_MAX_BYTES) {
            rcs[i] = TG_ETOOBIG;
            continue;
        }
        if (sp->live_bytes + pend + frame > sp->cfg.max_bytes) {
            atomic_fetch_add(&sp->st_full, 1);
            rcs[i] = TG_EFULL;
            continue;
        }
        cur = sp->wfd >= 0 ? &sp->segs[sp->nsegs - 1] : NULL;
        if (cur == NULL ||
            (cur->bytes + pend > 0 && cur->bytes + pend + frame > sp->cfg.segment_bytes)) {
            write_frames(sp, iov, k, pend, idx, rcs, seqs);
            k = 0;
            pend = 0;
            rc = roll_segment(sp);
            if (rc != 0) {
                if (rc == TG_EFULL)
                    atomic_fetch_add(&sp->st_full, 1);
                rcs[i] = rc;
                continue;
            }
        }
        put32(hdr[k], SPOOL_MAGIC);
        put32(hdr[k] + 4, (uint32_t)len);
        put64(hdr[k] + 8, sp->next_seq + k);
        put64(hdr[k] + 16, ts_ms);
        crc = tg_crc32c(0, hdr[k] + 4, 20);
        crc = tg_crc32c(crc, recs[i].iov_base, len);
        put32(hdr[k] + 24, crc);
        iov[2 * k].iov_base = hdr[k];
        iov[2 * k].iov_len = SPOOL_HDR_BYTES;
        iov[2 * k + 1] = recs[i];
        idx[k++] = (unsigned)i;
        pend += frame;
    }
    write_frames(sp, iov, k, pend, idx, rcs, seqs);
    pthread_mutex_unlock(&sp->mu);
    for (size_t i = 0; i < n; i++)
        ok += rcs[i] == 0;
    return (int)ok;
}

int rt_spool_append(struct rt_spool *sp, const void *payload, size_t len, uint64_t ts_ms,
                    uint64_t *seq_out)
{
    struct iovec rec = {(void *)payload, len};
    uint64_t seq = 0;
    int rc = TG_EIO;

    rt_spool_append_batch(sp, &rec, 1, ts_ms, &rc, &seq);
    if (rc == 0 && seq_out != NULL)
        *seq_out = seq;
    return rc;
}

/* Finds the segment being read (the last one starting at or before r_seg; the first one when
 * that was released); returns its bytes and the first seq of the next segment, or UINT64_MAX.
 * Returns 0 when there is no segment at all. Publisher thread. */
static int reader_segment(struct rt_spool *sp, uint64_t *bytes, uint64_t *next_first)
{
    int idx = -1;

    pthread_mutex_lock(&sp->mu);
    for (uint32_t i = 0; i < sp->nsegs; i++) {
        if (sp->segs[i].first_seq <= sp->r_seg)
            idx = (int)i;
    }
    if (idx < 0 && sp->nsegs > 0)
        idx = 0;
    if (idx >= 0) {
        if (sp->segs[idx].first_seq != sp->r_seg) {
            sp->r_seg = sp->segs[idx].first_seq;
            sp->r_off = 0;
        }
        *bytes = sp->segs[idx].bytes;
        *next_first = (uint32_t)idx + 1 < sp->nsegs ? sp->segs[idx + 1].first_seq : UINT64_MAX;
    }
    pthread_mutex_unlock(&sp->mu);
    return idx >= 0;
}

int rt_spool_read_next(struct rt_spool *sp, struct rt_spool_record *rec, void *buf, size_t cap)
{
    for (;;) {
        int rc, fresh = 0;

        /* The segment's size is looked up (under the appenders' mutex) only once the reader has
         * read what it knew of: not once a record. */
        if (!sp->r_known || sp->r_off >= sp->r_bytes) {
            if (!reader_segment(sp, &sp->r_bytes, &sp->r_next)) {
                sp->r_known = 0;
                return 0;
            }
            sp->r_known = 1;
            fresh = 1;
        }
        if (sp->rfd < 0 || sp->rfd_seg != sp->r_seg) {
            char path[PATH_MAX + 64];

            if (sp->rfd >= 0)
                close(sp->rfd);
            sp->ra_len = 0;
            seg_path(sp, sp->r_seg, path, sizeof(path));
            sp->rfd = open(path, O_RDONLY | O_CLOEXEC);
            if (sp->rfd < 0)
                return TG_EIO;
            sp->rfd_seg = sp->r_seg;
        }
        rc = frame_next(sp, 1, sp->rfd, sp->r_bytes, &sp->r_off, rec, buf, cap);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            if (rec->seq < sp->r_min_seq)
                continue;
            return 1;
        }
        if (!fresh) {
            sp->r_known = 0; /* the end of what was known: look again */
            continue;
        }
        if (sp->r_next == UINT64_MAX)
            return 0; /* caught up with the writer */
        sp->r_seg = sp->r_next;
        sp->r_off = 0;
        sp->r_known = 0;
    }
}

void rt_spool_rewind(struct rt_spool *sp, uint64_t seq)
{
    pthread_mutex_lock(&sp->mu);
    sp->r_min_seq = seq > sp->acked_below ? seq : sp->acked_below;
    sp->r_seg = 0;
    for (uint32_t i = 0; i < sp->nsegs; i++) {
        if (sp->segs[i].first_seq <= sp->r_min_seq)
            sp->r_seg = sp->segs[i].first_seq;
    }
    sp->r_off = 0;
    sp->r_known = 0;
    pthread_mutex_unlock(&sp->mu);
}

int rt_spool_ack_below(struct rt_spool *sp, uint64_t seq)
{
    int more = 1, rc;

    pthread_mutex_lock(&sp->mu);
    if (seq <= sp->acked_below || seq > sp->next_seq) {
        pthread_mutex_unlock(&sp->mu);
        return 0;
    }
    sp->acked_below = seq;
    if (sp->r_min_seq < seq)
        sp->r_min_seq = seq;
    pthread_mutex_unlock(&sp->mu);
    /* Release every segment all of whose records are acknowledged, except the one written,
     * RT_SPOOL_RELEASE_MAX at a time. Their files are unlinked with the lock let go: freeing
     * a segment's pages and blocks takes milliseconds (tens while its pages are being written
     * back), and the event loops append under this lock. */
    while (more) {
        uint64_t gone[RT_SPOOL_RELEASE_MAX];
        size_t ngone = 0;

        pthread_mutex_lock(&sp->mu);
        while ((more = sp->nsegs > 1 && sp->segs[1].first_seq <= seq) &&
               ngone < RT_SPOOL_RELEASE_MAX) {
            if (sp->rfd >= 0 && sp->rfd_seg == sp->segs[0].first_seq) {
                close(sp->rfd);
                sp->rfd = -1;
                sp->ra_len = 0;
            }
            gone[ngone++] = sp->segs[0].first_seq;
            forget_segment_at(sp, 0);
            sp->r_known = 0; /* the reader's segment may be gone: look it up again */
        }
        pthread_mutex_unlock(&sp->mu);
        for (size_t i = 0; i < ngone; i++) {
            char path[PATH_MAX + 64];

            seg_path(sp, gone[i], path, sizeof(path));
            unlink(path);
        }
    }
    rc = write_checkpoint(sp, seq);
    if (rc != 0)
        TG_ERROR_RL("event=spool_checkpoint_failed errno=%d", errno);
    return rc;
}

void rt_spool_sync(struct rt_spool *sp)
{
    int fd;

    pthread_mutex_lock(&sp->mu);
    fd = sp->wfd >= 0 ? dup(sp->wfd) : -1;
    pthread_mutex_unlock(&sp->mu);
    if (fd >= 0) {
        fdatasync(fd);
        close(fd);
    }
}

void rt_spool_get_stats(struct rt_spool *sp, struct rt_spool_stats *out)
{
    pthread_mutex_lock(&sp->mu);
    out->bytes = sp->live_bytes;
    out->segments = sp->nsegs;
    out->acked_below = sp->acked_below;
    out->next_seq = sp->next_seq;
    pthread_mutex_unlock(&sp->mu);
    out->appended = atomic_load(&sp->st_appended);
    out->full = atomic_load(&sp->st_full);
    out->corrupt = atomic_load(&sp->st_corrupt);
    out->write_errors = atomic_load(&sp->st_write_errors);
}
