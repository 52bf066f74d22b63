/* control_snapshot: the control store's local snapshot file (format and rules: control.h,
 * "Snapshot file"). */
#include "control_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tg_crc32c.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"

/* ---- writing ---- */

struct snap_writer {
    struct rt_control *ctl;
    FILE *f;
    uint32_t crc;
    uint64_t n;
    int failed;
    struct rt_key_spec *spec;
    char *json;
};

static void snap_put(struct snap_writer *w, const char *data, size_t len)
{
    if (w->failed)
        return;
    if (fwrite(data, 1, len, w->f) != len) {
        w->failed = 1;
        return;
    }
    w->crc = tg_crc32c(w->crc, data, len);
}

static int snap_entry(const struct rt_key *k, int present, void *arg)
{
    struct snap_writer *w = arg;
    int stat = present && rt_control_is_static(w->ctl, k->hash);
    char line[TG_SHA256_HEX_LEN + 4];
    size_t len = 0;

    if (present && !stat) {
        rt_key_get_spec(k, w->spec);
        if (rt_key_spec_to_json(w->spec, w->json + 2, SNAP_LINE_MAX - 3, &len) != 0) {
            w->failed = 1;
            return 1;
        }
        w->json[0] = 'K';
        w->json[1] = ' ';
        w->json[2 + len] = '\n';
        snap_put(w, w->json, len + 3);
        w->n++;
    } else if (k->blocked) {
        /* A block mark without a record, or on a static key. */
        snprintf(line, sizeof(line), "B %s\n", k->hash);
        snap_put(w, line, strlen(line));
        w->n++;
    }
    return w->failed;
}

static void fsync_dir_of(const char *path)
{
    char copy[RT_PATH_CAP];
    int fd;

    snprintf(copy, sizeof(copy), "%s", path);
    fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

typedef void (*snap_emit_fn)(struct snap_writer *w);

/* Write a snapshot file atomically: magic header, emit's lines, END line; to tmp, fsync, rename
 * to path, fsync of the directory. Returns 0 or TG_EIO (tmp removed). */
static int snap_file_write(struct snap_writer *w, const char *path, const char *tmp,
                           const char *magic, snap_emit_fn emit)
{
    char head[128], tail[96];
    int fd, rc = TG_EIO;

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        goto out;
    w->f = fdopen(fd, "w");
    if (w->f == NULL) {
        close(fd);
        goto out;
    }
    snprintf(head, sizeof(head), "%s written_ms=%" PRIu64 "\n", magic, tg_now_epoch_ms());
    snap_put(w, head, strlen(head));
    emit(w);
    snprintf(tail, sizeof(tail), "END %" PRIu64 " %08" PRIx32 "\n", w->n, w->crc);
    if (!w->failed && fwrite(tail, 1, strlen(tail), w->f) != strlen(tail))
        w->failed = 1;
    if (w->failed || fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
        goto out;
    if (fclose(w->f) != 0) {
        w->f = NULL;
        goto out;
    }
    w->f = NULL;
    if (rename(tmp, path) != 0)
        goto out;
    fsync_dir_of(path);
    rc = 0;
out:
    if (w->f != NULL)
        fclose(w->f);
    w->f = NULL;
    if (rc != 0)
        unlink(tmp);
    return rc;
}

static void keys_emit(struct snap_writer *w)
{
    struct rt_keys_table *t = rt_keys_acquire(w->ctl->keys);

    rt_keys_foreach(t, snap_entry, w);
    rt_keys_release(&t);
}

/* Write the snapshot file atomically. Control thread (or destroy, after the thread stopped). */
static int snapshot_write(struct rt_control *ctl)
{
    struct snap_writer w = {ctl, NULL, 0, 0, 0, NULL, NULL};
    struct rt_keys_stats st;
    int rc = TG_ENOMEM;

    rt_keys_get_stats(ctl->keys, &st);
    w.spec = malloc(sizeof(*w.spec));
    w.json = malloc(SNAP_LINE_MAX);
    if (w.spec != NULL && w.json != NULL)
        rc = snap_file_write(&w, ctl->snap_path, ctl->snap_tmp, SNAP_MAGIC, keys_emit);
    if (rc == 0) {
        ctl->snap_gen = st.generation;
        atomic_store(&ctl->snapshot_keys, w.n);
        atomic_fetch_add(&ctl->snapshot_writes, 1);
    } else {
        atomic_fetch_add(&ctl->snapshot_errors, 1);
        TG_WARN_RL("msg=\"keys snapshot not written\" err=%s errno=%d", tg_errname(rc), errno);
    }
    free(w.json);
    free(w.spec);
    return rc;
}

/* One "T <stored JSON>" line per team, in team_id order. */
static void teams_emit(struct snap_writer *w)
{
    struct rt_teams_table *t = rt_teams_acquire(w->ctl->teams);
    size_t n = rt_teams_count(t), len = 0;

    for (size_t i = 0; i < n && !w->failed; i++) {
        if (rt_team_spec_to_json(rt_teams_at(t, i), w->json + 2, SNAP_LINE_MAX - 3, &len) != 0) {
            w->failed = 1;
            break;
        }
        w->json[0] = 'T';
        w->json[1] = ' ';
        w->json[2 + len] = '\n';
        snap_put(w, w->json, len + 3);
        w->n++;
    }
    rt_teams_release(&t);
}

/* Write the teams snapshot file atomically. Control thread (or destroy). */
static int teams_snapshot_write(struct rt_control *ctl)
{
    struct snap_writer w = {ctl, NULL, 0, 0, 0, NULL, NULL};
    struct rt_teams_stats st;
    int rc = TG_ENOMEM;

    rt_teams_get_stats(ctl->teams, &st);
    w.json = malloc(SNAP_LINE_MAX);
    if (w.json != NULL)
        rc = snap_file_write(&w, ctl->tsnap_path, ctl->tsnap_tmp, SNAP_TEAMS_MAGIC, teams_emit);
    if (rc == 0) {
        ctl->tsnap_gen = st.generation;
        atomic_store(&ctl->snapshot_teams, w.n);
        atomic_fetch_add(&ctl->snapshot_teams_writes, 1);
    } else {
        atomic_fetch_add(&ctl->snapshot_teams_errors, 1);
        TG_WARN_RL("msg=\"teams snapshot not written\" err=%s errno=%d", tg_errname(rc), errno);
    }
    free(w.json);
    return rc;
}

/* Read one line into ctl->line. Returns its length (newline included), 0 at end of file, or
 * TG_EPROTO when the line is too long or does not end with a newline. */
static long snap_line(struct rt_control *ctl, FILE *f)
{
    size_t len;

    if (fgets(ctl->line, SNAP_LINE_MAX, f) == NULL)
        return 0;
    len = strlen(ctl->line);
    if (len == 0 || ctl->line[len - 1] != '\n')
        return TG_EPROTO;
    return (long)len;
}

/* Pass 1: the file is complete and intact: magic header, lines whose first byte is one of kinds,
 * END line with their count and checksum, at most max entries. Returns the entry count or a
 * negative error (TG_EPROTO, TG_EFULL). */
static long snapshot_verify(struct rt_control *ctl, FILE *f, const char *magic, const char *kinds,
                            size_t max)
{
    uint32_t crc = 0, want_crc = 0;
    uint64_t n = 0, want_n = 0;
    long len;

    len = snap_line(ctl, f);
    if (len <= 0 || strncmp(ctl->line, magic, strlen(magic)) != 0 ||
        ctl->line[strlen(magic)] != ' ')
        return TG_EPROTO;
    crc = tg_crc32c(crc, ctl->line, (size_t)len);
    for (;;) {
        len = snap_line(ctl, f);
        if (len <= 0)
            return TG_EPROTO; /* no END line: truncated */
        if (strncmp(ctl->line, "END ", 4) == 0) {
            if (sscanf(ctl->line, "END %" SCNu64 " %" SCNx32, &want_n, &want_crc) != 2 ||
                want_n != n || want_crc != crc)
                return TG_EPROTO;
            if (snap_line(ctl, f) != 0)
                return TG_EPROTO; /* bytes after END */
            return n > max ? TG_EFULL : (long)n;
        }
        if (ctl->line[0] == '\0' || strchr(kinds, ctl->line[0]) == NULL)
            return TG_EPROTO;
        crc = tg_crc32c(crc, ctl->line, (size_t)len);
        n++;
    }
}

void rt_control_snapshot_load(struct rt_control *ctl)
{
    FILE *f = fopen(ctl->snap_path, "re");
    long n, len;
    size_t nb = 0;
    uint64_t loaded = 0, bad = 0;
    char err[256];
    struct rt_keys_stats st;

    if (f == NULL) {
        if (errno != ENOENT) {
            atomic_fetch_add(&ctl->snapshot_errors, 1);
            TG_WARN("msg=\"keys snapshot unreadable, ignored\" errno=%d", errno);
        }
        return;
    }
    n = snapshot_verify(ctl, f, SNAP_MAGIC, "KB", ctl->max_keys);
    if (n < 0) {
        atomic_fetch_add(&ctl->snapshot_errors, 1);
        TG_WARN("msg=\"keys snapshot failed its check, ignored\" err=%s", tg_errname((int)n));
        fclose(f);
        return;
    }
    rewind(f);
    (void)snap_line(ctl, f); /* header */
    while ((len = snap_line(ctl, f)) > 0 && strncmp(ctl->line, "END ", 4) != 0) {
        struct rt_key_change *c = &ctl->changes[nb];

        memset(c, 0, sizeof(*c));
        ctl->line[len - 1] = '\0';
        if (ctl->line[0] == 'B' && len - 1 == 2 + TG_SHA256_HEX_LEN &&
            rt_control_hash_ok(ctl->line + 2)) {
            c->op = RT_KEY_BLOCK;
            memcpy(c->hash, ctl->line + 2, sizeof(c->hash));
        } else if (ctl->line[0] == 'K' && len > 3) {
            struct rt_key_spec *s = &ctl->specs[nb];

            rt_key_spec_init(s);
            if (rt_key_spec_from_json(s, RT_KEY_JSON_STORED, ctl->line + 2, (size_t)len - 3, NULL,
                                      err, sizeof(err)) != 0 ||
                !rt_control_hash_ok(s->key_hash) || rt_control_is_static(ctl, s->key_hash)) {
                bad++;
                continue;
            }
            c->op = RT_KEY_PUT;
            c->spec = s;
            memcpy(c->hash, s->key_hash, sizeof(c->hash));
        } else {
            bad++;
            continue;
        }
        loaded++;
        if (++nb == ctl->batch_cap) {
            rt_control_apply_changes(ctl, ctl->changes, nb);
            nb = 0;
        }
    }
    rt_control_apply_changes(ctl, ctl->changes, nb);
    fclose(f);
    rt_keys_get_stats(ctl->keys, &st);
    ctl->snap_gen = st.generation;
    ctl->snap_ok = 1;
    atomic_store(&ctl->snapshot_loaded, loaded);
    atomic_store(&ctl->snapshot_keys, loaded);
    TG_INFO("msg=\"keys snapshot loaded\" entries=%" PRIu64 " skipped=%" PRIu64, loaded, bad);
}

void rt_control_maybe_snapshot(struct rt_control *ctl, uint64_t now, int force)
{
    struct rt_keys_stats st;
    int keys_changed, teams_changed = 0;

    if ((ctl->snap_path[0] == '\0' && ctl->tsnap_path[0] == '\0') || !atomic_load(&ctl->replayed))
        return;
    if (!force && now < ctl->snap_next_ms)
        return;
    rt_keys_get_stats(ctl->keys, &st);
    keys_changed = ctl->snap_path[0] != '\0' && (force || st.generation != ctl->snap_gen);
    if (ctl->tsnap_path[0] != '\0' && ctl->teams != NULL) {
        struct rt_teams_stats ts;

        rt_teams_get_stats(ctl->teams, &ts);
        teams_changed = force || ts.generation != ctl->tsnap_gen;
    }
    if (!keys_changed && !teams_changed)
        return;
    if (keys_changed)
        (void)snapshot_write(ctl);
    if (teams_changed)
        (void)teams_snapshot_write(ctl);
    /* At most one write per interval, and never more than a fifth of the control thread's time
     * (a large table takes a while to write). */
    {
        uint64_t took = tg_now_mono_ms() - now;
        uint64_t gap =
            4 * took > RT_CONTROL_SNAPSHOT_INTERVAL_MS ? 4 * took : RT_CONTROL_SNAPSHOT_INTERVAL_MS;

        ctl->snap_next_ms = now + took + gap;
    }
}

/* ---- teams ---- */

static int cmp_team_id(const void *a, const void *b)
{
    return strcmp(a, b);
}

void rt_control_teams_snapshot_load(struct rt_control *ctl)
{
    FILE *f = NULL;
    struct rt_teams_stats ts;
    struct rt_team_spec *spec = NULL;
    char err[256];
    long n, len;
    size_t k = 0;
    uint64_t bad = 0;

    if (ctl->tsnap_path[0] == '\0' || ctl->teams == NULL)
        return;
    f = fopen(ctl->tsnap_path, "re");
    if (f == NULL) {
        if (errno != ENOENT) {
            atomic_fetch_add(&ctl->snapshot_teams_errors, 1);
            TG_WARN("msg=\"teams snapshot unreadable, ignored\" errno=%d", errno);
        }
        return;
    }
    rt_teams_get_stats(ctl->teams, &ts);
    n = snapshot_verify(ctl, f, SNAP_TEAMS_MAGIC, "T", (size_t)ts.capacity);
    if (n < 0) {
        atomic_fetch_add(&ctl->snapshot_teams_errors, 1);
        TG_WARN("msg=\"teams snapshot failed its check, ignored\" err=%s max_teams=%" PRIu64,
                tg_errname((int)n), ts.capacity);
        goto out;
    }
    spec = malloc(sizeof(*spec));
    ctl->tsnap_ids = calloc(n > 0 ? (size_t)n : 1, sizeof(*ctl->tsnap_ids));
    ctl->tsnap_seen = calloc(n > 0 ? (size_t)n : 1, 1);
    if (spec == NULL || ctl->tsnap_ids == NULL || ctl->tsnap_seen == NULL) {
        atomic_fetch_add(&ctl->snapshot_teams_errors, 1);
        TG_WARN("msg=\"teams snapshot not loaded: out of memory\"");
        rt_control_teams_forget(ctl);
        goto out;
    }
    rewind(f);
    (void)snap_line(ctl, f); /* header */
    while ((len = snap_line(ctl, f)) > 0 && strncmp(ctl->line, "END ", 4) != 0 &&
           k < (size_t)n) {
        ctl->line[len - 1] = '\0';
        rt_team_spec_init(spec);
        if (len < 4 || ctl->line[0] != 'T' || ctl->line[1] != ' ' ||
            rt_team_spec_from_json(spec, RT_TEAM_JSON_STORED, ctl->line + 2, (size_t)len - 3,
                                   NULL, err, sizeof(err)) != 0 ||
            !proto_ctl_team_id_ok(spec->team_id) || rt_teams_put(ctl->teams, spec) != 0) {
            bad++;
            continue;
        }
        memcpy(ctl->tsnap_ids[k++], spec->team_id, RT_TEAM_ID_CAP);
    }
    qsort(ctl->tsnap_ids, k, sizeof(*ctl->tsnap_ids), cmp_team_id);
    ctl->tsnap_n = 0;
    for (size_t i = 0; i < k; i++) { /* unique ids: one reconcile verdict per team */
        if (ctl->tsnap_n == 0 || strcmp(ctl->tsnap_ids[ctl->tsnap_n - 1], ctl->tsnap_ids[i]) != 0)
            memmove(ctl->tsnap_ids[ctl->tsnap_n++], ctl->tsnap_ids[i], RT_TEAM_ID_CAP);
    }
    rt_teams_get_stats(ctl->teams, &ts);
    ctl->tsnap_gen = ts.generation;
    atomic_store(&ctl->snapshot_teams_loaded, ctl->tsnap_n);
    atomic_store(&ctl->snapshot_teams, ctl->tsnap_n);
    TG_INFO("msg=\"teams snapshot loaded\" teams=%zu skipped=%" PRIu64, ctl->tsnap_n, bad);
out:
    free(spec);
    fclose(f);
}

void rt_control_teams_note(struct rt_control *ctl, const char *id)
{
    char (*hit)[RT_TEAM_ID_CAP];

    if (ctl->tsnap_n == 0 || id == NULL)
        return;
    hit = bsearch(id, ctl->tsnap_ids, ctl->tsnap_n, sizeof(*ctl->tsnap_ids), cmp_team_id);
    if (hit != NULL)
        ctl->tsnap_seen[hit - ctl->tsnap_ids] = 1;
}

void rt_control_teams_reconcile(struct rt_control *ctl)
{
    struct rt_teams_table *t = rt_teams_acquire(ctl->teams);
    uint64_t dropped = 0;

    for (size_t i = 0; i < ctl->tsnap_n && t != NULL; i++) {
        if (ctl->tsnap_seen[i] || rt_teams_lookup(t, ctl->tsnap_ids[i]) == NULL)
            continue; /* the topic decided, or the team is gone already */
        if (rt_teams_delete(ctl->teams, ctl->tsnap_ids[i]) == 0)
            dropped++;
    }
    rt_teams_release(&t);
    if (dropped > 0) {
        atomic_fetch_add(&ctl->snapshot_teams_dropped, dropped);
        TG_INFO("msg=\"control replay: removing snapshot teams no longer on the topic\" "
                "teams=%" PRIu64,
                dropped);
    }
    rt_control_teams_forget(ctl);
}

void rt_control_teams_forget(struct rt_control *ctl)
{
    free(ctl->tsnap_ids);
    free(ctl->tsnap_seen);
    ctl->tsnap_ids = NULL;
    ctl->tsnap_seen = NULL;
    ctl->tsnap_n = 0;
}
