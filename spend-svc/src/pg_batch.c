/* pg_batch: the batch (events held as binary COPY tuples in one arena, dead letters, offsets
 * per partition), the tuples' encoding and decoding, and the flush that picks a write path:
 * the direct COPY (pg_copy.c) for a batch without dead letters, falling back to the temp-table
 * COPY when a call id is already stored, and the parameter-array statement (pg_rows.c) for the
 * rest and for one-by-one retries. */
#include "pg_sink.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"
#include "proto_event.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"
#include "tg_utf8.h"

/* Batch ---------------------------------------------------------------------------------------- */

struct sp_pg_batch *sp_pg_batch_create(int max_events, int max_bytes)
{
    struct sp_pg_batch *b;

    if (max_events <= 0 || max_bytes <= 0)
        return NULL;
    b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->max_events = max_events;
    b->max_bytes = (size_t)max_bytes;
    b->cap_events = max_events + PROTO_RECORD_EVENTS_MAX - 1;
    b->ev = calloc((size_t)b->cap_events, sizeof(*b->ev));
    b->incr = calloc((size_t)b->cap_events, sizeof(*b->incr));
    if (!b->ev || !b->incr) {
        sp_pg_batch_destroy(&b);
        return NULL;
    }
    return b;
}

void sp_pg_batch_reset(struct sp_pg_batch *b)
{
    for (int i = 0; i < b->ndead; i++) {
        free(b->dead[i].payload);
        b->dead[i].payload = NULL;
    }
    b->ndead = 0;
    b->nev = 0;
    sp_pg_dstr_reset(&b->rec);
    b->bytes = 0;
    b->npart = 0;
    b->nincr = 0;
}

void sp_pg_batch_destroy(struct sp_pg_batch **bp)
{
    struct sp_pg_batch *b;

    if (!bp || !*bp)
        return;
    b = *bp;
    sp_pg_batch_reset(b);
    for (size_t i = 0; i < sizeof(b->col) / sizeof(b->col[0]); i++)
        free(b->col[i].p);
    free(b->rec.p);
    free(b->ev);
    free(b->incr);
    free(b);
    *bp = NULL;
}

/* batch_note_offset: record that partition has been read up to offset (inclusive). */
static int batch_note_offset(struct sp_pg_batch *b, int32_t partition, int64_t offset)
{
    for (int i = 0; i < b->npart; i++) {
        if (b->part[i] == partition) {
            if (offset + 1 > b->next[i])
                b->next[i] = offset + 1;
            if (offset < b->first[i])
                b->first[i] = offset;
            return 0;
        }
    }
    if (b->npart >= SP_PG_PARTITIONS_MAX)
        return TG_EFULL;
    b->part[b->npart] = partition;
    b->first[b->npart] = offset;
    b->next[b->npart] = offset + 1;
    b->npart++;
    return 0;
}

static int batch_has_partition(const struct sp_pg_batch *b, int32_t partition)
{
    for (int i = 0; i < b->npart; i++)
        if (b->part[i] == partition)
            return 1;
    return 0;
}

static int rec_encode(struct sp_pg_batch *b, const struct proto_event *ev, int32_t partition,
                      int64_t offset);

/* same_record: 1 when (partition, offset) is the record added last (its next event). */
static int same_record(const struct sp_pg_batch *b, int32_t partition, int64_t offset)
{
    return b->nev + b->ndead > 0 && b->cur_part == partition && b->cur_off == offset;
}

int sp_pg_batch_add_event(struct sp_pg_batch *b, const struct proto_event *ev, int32_t partition,
                          int64_t offset, int32_t index, size_t encoded_len)
{
    size_t start = b->rec.len;
    int rc;

    if (b->nev >= b->cap_events)
        return TG_EFULL;
    if (!same_record(b, partition, offset) &&
        (b->nev >= b->max_events || b->bytes + encoded_len > b->max_bytes))
        return TG_EFULL;
    if (!batch_has_partition(b, partition) && b->npart >= SP_PG_PARTITIONS_MAX)
        return TG_EFULL;
    rc = rec_encode(b, ev, partition, offset);
    if (rc < 0) {
        b->rec.len = start;
        return rc;
    }
    b->ev[b->nev].partition = partition;
    b->ev[b->nev].offset = offset;
    b->ev[b->nev].index = index;
    b->ev[b->nev].rec_off = start;
    b->ev[b->nev].rec_len = b->rec.len - start;
    b->nev++;
    b->bytes += encoded_len;
    b->cur_part = partition;
    b->cur_off = offset;
    return batch_note_offset(b, partition, offset);
}

int sp_pg_batch_add_dead(struct sp_pg_batch *b, const char *reason, const void *payload,
                         size_t len, int32_t partition, int64_t offset, int32_t index)
{
    struct batch_dead *d;

    if (b->ndead >= SP_PG_DEAD_PER_BATCH_MAX)
        return TG_EFULL;
    if (!batch_has_partition(b, partition) && b->npart >= SP_PG_PARTITIONS_MAX)
        return TG_EFULL;
    d = &b->dead[b->ndead];
    if (len > SP_PG_DEAD_PAYLOAD_MAX_BYTES)
        len = SP_PG_DEAD_PAYLOAD_MAX_BYTES;
    d->payload = malloc(len ? len : 1);
    if (!d->payload)
        return TG_ENOMEM;
    if (len)
        memcpy(d->payload, payload, len);
    d->len = len;
    snprintf(d->reason, sizeof(d->reason), "%s", reason ? reason : "invalid");
    d->partition = partition;
    d->offset = offset;
    d->index = index;
    b->ndead++;
    b->cur_part = partition;
    b->cur_off = offset;
    return batch_note_offset(b, partition, offset);
}

int sp_pg_batch_room(const struct sp_pg_batch *b, int nev, size_t bytes)
{
    if (b->nev + b->ndead == 0)
        return 1;
    return nev <= b->max_events - b->nev && b->bytes <= b->max_bytes &&
           bytes <= b->max_bytes - b->bytes &&
           nev <= SP_PG_DEAD_PER_BATCH_MAX - b->ndead && b->npart < SP_PG_PARTITIONS_MAX;
}

void sp_pg_batch_mark(const struct sp_pg_batch *b, int32_t partition, struct sp_pg_batch_mark *m)
{
    m->nev = b->nev;
    m->ndead = b->ndead;
    m->npart = b->npart;
    m->rec_len = b->rec.len;
    m->bytes = b->bytes;
    m->cur_part = b->cur_part;
    m->cur_off = b->cur_off;
    m->part_at = -1;
    for (int i = 0; i < b->npart; i++) {
        if (b->part[i] == partition) {
            m->part_at = i;
            m->part_first = b->first[i];
            m->part_next = b->next[i];
            break;
        }
    }
}

void sp_pg_batch_rewind(struct sp_pg_batch *b, const struct sp_pg_batch_mark *m)
{
    for (int i = m->ndead; i < b->ndead; i++) {
        free(b->dead[i].payload);
        b->dead[i].payload = NULL;
    }
    b->ndead = m->ndead;
    b->nev = m->nev;
    b->rec.len = m->rec_len;
    b->bytes = m->bytes;
    b->cur_part = m->cur_part;
    b->cur_off = m->cur_off;
    if (m->part_at >= 0) {
        b->first[m->part_at] = m->part_first;
        b->next[m->part_at] = m->part_next;
    }
    b->npart = m->npart; /* a partition the record brought in was the last one added */
}

void sp_pg_batch_drop_partition(struct sp_pg_batch *b, int32_t partition)
{
    int j = 0;

    for (int i = 0; i < b->nev; i++) {
        if (b->ev[i].partition == partition)
            continue; /* bytes stays as counted: it only makes the batch close early */
        if (i != j)
            b->ev[j] = b->ev[i];
        j++;
    }
    b->nev = j;
    j = 0;
    for (int i = 0; i < b->ndead; i++) {
        if (b->dead[i].partition == partition) {
            free(b->dead[i].payload);
            b->dead[i].payload = NULL;
            continue;
        }
        if (i != j) {
            b->dead[j] = b->dead[i];
            b->dead[i].payload = NULL;
        }
        j++;
    }
    b->ndead = j;
    j = 0;
    for (int i = 0; i < b->npart; i++) {
        if (b->part[i] == partition)
            continue;
        b->part[j] = b->part[i];
        b->first[j] = b->first[i];
        b->next[j] = b->next[i];
        j++;
    }
    b->npart = j;
}

int sp_pg_batch_full(const struct sp_pg_batch *b)
{
    return b->nev >= b->max_events || b->bytes + TG_EVENT_MAX_BYTES > b->max_bytes ||
           b->ndead >= SP_PG_DEAD_PER_BATCH_MAX || b->npart >= SP_PG_PARTITIONS_MAX;
}

int sp_pg_batch_events(const struct sp_pg_batch *b)
{
    return b->nev;
}

int sp_pg_batch_dead(const struct sp_pg_batch *b)
{
    return b->ndead;
}

int sp_pg_batch_messages(const struct sp_pg_batch *b)
{
    return b->nev + b->ndead;
}

int64_t sp_pg_batch_next_offset(const struct sp_pg_batch *b, int32_t partition)
{
    for (int i = 0; i < b->npart; i++)
        if (b->part[i] == partition)
            return b->next[i];
    return -1;
}

int sp_pg_batch_offsets(const struct sp_pg_batch *b, int32_t *parts, int64_t *next, int cap)
{
    int n = b->npart < cap ? b->npart : cap;
    for (int i = 0; i < n; i++) {
        parts[i] = b->part[i];
        next[i] = b->next[i];
    }
    return n;
}
/* Records -------------------------------------------------------------------------------------- */

/* sp_pg_rec_uuid_text: a record's 16-byte call id in canonical text form (out: 37 bytes). */
void sp_pg_rec_uuid_text(const struct rec_field *f, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)f->p;
    int o = 0;

    for (int i = 0; i < 16 && f->len == 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[u[i] >> 4];
        out[o++] = hex[u[i] & 15];
    }
    out[o] = '\0';
}

/* json_list: n items of ev as a JSON array into tmp, item i written by item(tmp, ev, i). Returns
 * 0 or TG_ENOMEM. */
static int json_list(struct dstr *tmp, const struct proto_event *ev, uint32_t n,
                     int (*item)(struct dstr *tmp, const struct proto_event *ev, uint32_t i))
{
    int rc = 0;

    sp_pg_dstr_reset(tmp);
    rc |= sp_pg_dstr_putc(tmp, '[');
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            rc |= sp_pg_dstr_putc(tmp, ',');
        rc |= item(tmp, ev, i);
    }
    rc |= sp_pg_dstr_putc(tmp, ']');
    return rc ? TG_ENOMEM : 0;
}

/* trail_item: attempt i of the trail as a JSON object (json_list). */
static int trail_item(struct dstr *tmp, const struct proto_event *ev, uint32_t i)
{
    const struct proto_attempt *a = &ev->trail[i];
    int rc = 0;

    rc |= sp_pg_dstr_put(tmp, "{\"group\":", 9);
    rc |= sp_pg_json_str(tmp, a->group);
    rc |= sp_pg_dstr_put(tmp, ",\"deployment_id\":", 17);
    rc |= sp_pg_json_str(tmp, a->deployment_id);
    rc |= sp_pg_dstr_printf(tmp, ",\"http_status\":%" PRId32 ",\"error_class\":", a->http_status);
    rc |= sp_pg_json_str(tmp, a->error_class);
    rc |= sp_pg_dstr_printf(tmp, ",\"latency_ms\":%" PRIu32 ",\"message\":", a->latency_ms);
    rc |= sp_pg_json_str(tmp, a->message);
    rc |= sp_pg_dstr_putc(tmp, '}');
    return rc;
}

/* tag_item: tag i as a JSON string (json_list). */
static int tag_item(struct dstr *tmp, const struct proto_event *ev, uint32_t i)
{
    return sp_pg_json_str(tmp, ev->tags[i]);
}

/* build_trail / build_tags: the trail / the tags as a JSON array into tmp. */
static int build_trail(struct dstr *tmp, const struct proto_event *ev)
{
    return json_list(tmp, ev, ev->trail_len > PROTO_TRAIL_MAX ? PROTO_TRAIL_MAX : ev->trail_len,
                     trail_item);
}

static int build_tags(struct dstr *tmp, const struct proto_event *ev)
{
    return json_list(tmp, ev, ev->tags_len > PROTO_TAGS_MAX ? PROTO_TAGS_MAX : ev->tags_len,
                     tag_item);
}

/* cp_*: append one field of a binary COPY tuple (int32 length, then the value, big-endian). */
static void cp_be(char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)(v & 0xff);
        v >>= 8;
    }
}

static int cp_int(struct dstr *d, int64_t v, int n)
{
    if (sp_pg_dstr_reserve(d, 4 + (size_t)n) < 0)
        return TG_ENOMEM;
    cp_be(d->p + d->len, (uint64_t)n, 4);
    cp_be(d->p + d->len + 4, (uint64_t)v, n);
    d->len += 4 + (size_t)n;
    return 0;
}

/* cp_textv: s as a text field, after version bytes ver (jsonb's binary form is the version
 * byte 1 and the JSON text); invalid UTF-8 bytes become '?' (as in sp_pg_arr_str), so the stored
 * value is the same on both paths and one bad byte cannot refuse the batch. */
static int cp_textv(struct dstr *d, const char *ver, size_t nver, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    size_t i = 0;
    char *o;

    if (sp_pg_dstr_reserve(d, 4 + nver + n) < 0)
        return TG_ENOMEM;
    cp_be(d->p + d->len, (uint64_t)(nver + n), 4);
    if (nver > 0)
        memcpy(d->p + d->len + 4, ver, nver);
    d->len += nver;
    o = d->p + d->len + 4;
    while (i < n) {
        size_t k;
        if (p[i] < 0x80) {
            o[i] = (char)p[i];
            i++;
            continue;
        }
        k = tg_utf8_seq(p + i, n - i);
        if (k == 0) {
            o[i++] = '?';
            continue;
        }
        memcpy(o + i, p + i, k);
        i += k;
    }
    d->len += 4 + n;
    return 0;
}

static int cp_text(struct dstr *d, const char *s)
{
    return cp_textv(d, NULL, 0, s);
}

static int cp_jsonb(struct dstr *d, const char *json)
{
    return cp_textv(d, "\001", 1, json);
}

/* cp_uuid: a canonical UUID (8-4-4-4-12 hex) as 16 bytes; TG_EINVAL when s is not one. */
static int cp_uuid(struct dstr *d, const char *s)
{
    unsigned char u[16];

    if (tg_uuid_parse(s, u) != 0)
        return TG_EINVAL;
    if (sp_pg_dstr_reserve(d, 4 + 16) < 0)
        return TG_ENOMEM;
    cp_be(d->p + d->len, 16, 4);
    memcpy(d->p + d->len + 4, u, 16);
    d->len += 20;
    return 0;
}

/* rec_encode: append ev's binary COPY tuple (field count, then the 30 fields in sp_batch's
 * column order) to the batch's arena. Returns 0 or TG_ENOMEM. */
static int rec_encode(struct sp_pg_batch *b, const struct proto_event *ev, int32_t partition,
                      int64_t offset)
{
    struct dstr *d = &b->rec;
    struct dstr *tmp = &b->col[C_TMP];
    int rc = 0;

    if (sp_pg_dstr_reserve(d, 2) < 0)
        return TG_ENOMEM;
    cp_be(d->p + d->len, SP_PG_NCOLS, 2);
    d->len += 2;
    rc = cp_uuid(d, ev->call_id);
    if (rc == TG_EINVAL)
        return rc;
    rc |= cp_text(d, ev->kind == PROTO_KIND_COOLDOWN ? "cooldown" : "request");
    rc |= cp_int(d, ev->ts_start_ms, 8);
    rc |= cp_int(d, ev->ts_end_ms, 8);
    rc |= cp_text(d, ev->endpoint);
    rc |= cp_int(d, ev->stream ? 1 : 0, 1);
    rc |= cp_text(d, ev->key_hash);
    rc |= cp_text(d, ev->key_alias);
    rc |= cp_text(d, ev->team_id);
    rc |= cp_text(d, ev->user_id);
    rc |= cp_text(d, ev->end_user);
    rc |= cp_text(d, ev->model_requested);
    rc |= cp_text(d, ev->model_group);
    rc |= cp_text(d, ev->deployment_id);
    rc |= cp_text(d, ev->provider);
    rc |= cp_text(d, ev->model);
    rc |= cp_int(d, ev->status, 4);
    rc |= cp_text(d, ev->error_class);
    rc |= cp_int(d, ev->prompt_tokens, 8);
    rc |= cp_int(d, ev->completion_tokens, 8);
    rc |= cp_int(d, ev->cost_nusd, 8);
    rc |= cp_int(d, ev->latency_ms, 8);
    rc |= cp_int(d, ev->ttft_ms, 8);
    rc |= cp_int(d, ev->attempts, 4);
    rc |= cp_int(d, ev->fallbacks, 4);
    rc |= build_trail(tmp, ev);
    rc |= cp_jsonb(d, tmp->p);
    rc |= build_tags(tmp, ev);
    rc |= cp_jsonb(d, tmp->p);
    rc |= cp_text(d, ev->trace_id);
    rc |= cp_int(d, partition, 4);
    rc |= cp_int(d, offset, 8);
    return rc ? TG_ENOMEM : 0;
}

/* result_ranges: the offsets the committed batch covered, per partition. */
static void result_ranges(const struct sp_pg_batch *b, struct sp_pg_flush_result *res)
{
    res->parts = b->part;
    res->first = b->first;
    res->next = b->next;
    res->nparts = b->npart;
}

/* result_committed: the rest of res for a committed batch: b's aggregates of the inserted rows,
 * the offsets it covered, and whether a statement on pg was in doubt (cleared there). */
static void result_committed(struct sp_pg *pg, const struct sp_pg_batch *b,
                             struct sp_pg_flush_result *res)
{
    res->incr = b->incr;
    res->nincr = b->nincr;
    result_ranges(b, res);
    res->in_doubt = pg->in_doubt;
    pg->in_doubt = 0;
}

int sp_pg_batch_flush_start(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic)
{
    b->nincr = 0;
    b->copy_path = 0;
    if (b->nev > 0 && b->ndead == 0) {
        b->copy_path = 2;
        return sp_pg_copy_send(pg, b, topic, 1);
    }
    return sp_pg_rows_send(pg, b, topic, 0, b->nev, 0, b->ndead, b->part, b->next, b->npart);
}

int sp_pg_batch_flush_finish(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                             int block, struct sp_pg_flush_result *res)
{
    PGresult *r = NULL;
    int rc;

    memset(res, 0, sizeof(*res));
    rc = sp_pg_collect(pg, block, &r);
    if (rc == TG_EAGAIN)
        return rc;
    if (b->copy_path == 2) {
        if (rc == 0) {
            /* every event went in: the fold computed before sending is the result */
            PQclear(r);
            res->inserted = b->nev;
            result_committed(pg, b, res);
            return 0;
        }
        b->nincr = 0;
        if (rc == TG_EPROTO) {
            /* a call id already stored (or data Postgres refused): nothing was written; the
             * temp-table statement counts only new rows (and goes one by one if need be) */
            b->copy_path = 1;
            rc = sp_pg_copy_send(pg, b, topic, 0);
            if (rc < 0)
                return rc;
            return sp_pg_batch_flush_finish(pg, b, topic, block, res);
        }
    }
    b->nincr = 0;
    if (rc == 0) {
        sp_pg_rows_parse(b, r, b->nev, res);
        PQclear(r);
    } else if (rc == TG_EIO && b->copy_path) {
        /* not the data and not the connection (e.g. the session's prepared statement is
         * gone): retry on a fresh connection, which prepares the session again */
        sp_pg_close(pg);
    } else if (rc == TG_EPROTO) {
        TG_WARN("msg=\"batch refused by postgres, writing events one by one\" sqlstate=%s "
                "events=%d",
                pg->sqlstate, b->nev);
        memset(res, 0, sizeof(*res));
        rc = sp_pg_rows_one_by_one(pg, b, topic, res);
    }
    if (rc < 0) {
        memset(res, 0, sizeof(*res));
        b->nincr = 0;
        return rc;
    }
    result_committed(pg, b, res);
    return 0;
}

int sp_pg_batch_flush(struct sp_pg *pg, struct sp_pg_batch *b, const char *topic,
                      struct sp_pg_flush_result *res)
{
    int rc;

    memset(res, 0, sizeof(*res));
    rc = sp_pg_batch_flush_start(pg, b, topic);
    if (rc < 0)
        return rc;
    return sp_pg_batch_flush_finish(pg, b, topic, 1, res);
}
