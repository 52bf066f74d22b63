#include "fl_record.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tg_utf8.h"

struct fl_record_entry {
    char path[FL_RECORD_PATH_MAX];
    char model[FL_RECORD_MODEL_MAX];
    int has_model;
    char *body;    /* owned, stored bytes (<= body_max) */
    char *headers; /* owned, "name\0value\0" pairs, or NULL */
    size_t hlen;   /* bytes in headers */
    size_t stored; /* bytes in body */
    size_t size;   /* original body size in bytes */
    int status;    /* HTTP status answered */
    uint64_t ts_ms;
};

struct fl_record {
    pthread_mutex_t lock;
    struct fl_record_entry *ring; /* cap entries */
    size_t cap;
    size_t body_max; /* bytes */
    size_t head;     /* next slot to write */
    size_t len;      /* entries in use */
    uint64_t added;
    uint64_t dropped;
};

static void copy_cut(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

struct fl_record *fl_record_create(size_t capacity, size_t body_max)
{
    struct fl_record *r;

    if (capacity == 0 || body_max == 0)
        return NULL;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->ring = calloc(capacity, sizeof(*r->ring));
    if (r->ring == NULL) {
        free(r);
        return NULL;
    }
    r->cap = capacity;
    r->body_max = body_max;
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

static void clear_locked(struct fl_record *r)
{
    for (size_t i = 0; i < r->cap; i++) {
        free(r->ring[i].body);
        free(r->ring[i].headers);
        memset(&r->ring[i], 0, sizeof(r->ring[i]));
    }
    r->head = 0;
    r->len = 0;
    r->added = 0;
    r->dropped = 0;
}

void fl_record_destroy(struct fl_record **rp)
{
    struct fl_record *r;

    if (rp == NULL || *rp == NULL)
        return;
    r = *rp;
    *rp = NULL;
    clear_locked(r);
    pthread_mutex_destroy(&r->lock);
    free(r->ring);
    free(r);
}

void fl_record_add(struct fl_record *r, const char *path, const char *model, const char *body,
                   size_t len, int status, uint64_t ts_ms, const char *headers, size_t hlen)
{
    char *hcopy = NULL;

    if (hlen > FL_RECORD_HEADERS_MAX)
        hlen = FL_RECORD_HEADERS_MAX;
    if (headers != NULL && hlen > 0) {
        hcopy = malloc(hlen);
        if (hcopy != NULL)
            memcpy(hcopy, headers, hlen);
    }
    size_t keep = len < r->body_max ? len : r->body_max;
    /* Copy outside the lock: the lock only guards the ring slots. */
    char *copy = malloc(keep + 1);

    if (copy != NULL) {
        if (keep > 0)
            memcpy(copy, body, keep);
        copy[keep] = '\0';
    } else {
        keep = 0;
    }
    pthread_mutex_lock(&r->lock);
    struct fl_record_entry *e = &r->ring[r->head];
    if (r->len == r->cap) {
        free(e->body);
        free(e->headers);
        r->dropped++;
    } else {
        r->len++;
    }
    memset(e, 0, sizeof(*e));
    copy_cut(e->path, sizeof(e->path), path);
    if (model != NULL) {
        copy_cut(e->model, sizeof(e->model), model);
        e->has_model = 1;
    }
    e->body = copy;
    e->headers = hcopy;
    e->hlen = hcopy != NULL ? hlen : 0;
    e->stored = keep;
    e->size = len;
    e->status = status;
    e->ts_ms = ts_ms;
    r->head = (r->head + 1) % r->cap;
    r->added++;
    pthread_mutex_unlock(&r->lock);
}

/* New JSON string from bytes, replacing each invalid UTF-8 byte with '?' and NUL with '?'. */
static json_t *json_text_from_bytes(const char *p, size_t n)
{
    char *tmp = malloc(n + 1);
    json_t *j;
    size_t i = 0;

    if (tmp == NULL)
        return NULL;
    while (i < n) {
        size_t k = tg_utf8_seq((const unsigned char *)p + i, n - i);
        if (k == 0 || p[i] == '\0') {
            tmp[i] = '?';
            i++;
            continue;
        }
        memcpy(tmp + i, p + i, k);
        i += k;
    }
    tmp[n] = '\0';
    j = json_stringn(tmp, n);
    free(tmp);
    return j;
}

/* New JSON object from "name\0value\0" pairs; a cut last pair is skipped. */
static json_t *headers_json(const char *p, size_t n)
{
    json_t *o = json_object();
    size_t i = 0;

    while (o != NULL && i < n) {
        const char *k = p + i;
        const char *kend = memchr(k, '\0', n - i);
        if (kend == NULL)
            break;
        size_t vi = (size_t)(kend - p) + 1;
        if (vi >= n)
            break;
        const char *v = p + vi;
        const char *vend = memchr(v, '\0', n - vi);
        if (vend == NULL)
            break;
        json_t *key = json_text_from_bytes(k, (size_t)(kend - k));
        if (key != NULL)
            json_object_set_new(o, json_string_value(key),
                                json_text_from_bytes(v, (size_t)(vend - v)));
        json_decref(key);
        i = (size_t)(vend - p) + 1;
    }
    return o;
}

json_t *fl_record_list(struct fl_record *r, const char *model_filter, size_t limit)
{
    json_t *arr = json_array();
    size_t *idx = NULL;
    size_t nsel = 0;

    if (arr == NULL)
        return NULL;
    pthread_mutex_lock(&r->lock);
    idx = malloc((r->len ? r->len : 1) * sizeof(*idx));
    if (idx == NULL)
        goto fail;
    /* Walk newest to oldest, collect up to limit matches, then emit oldest first. */
    for (size_t k = 0; k < r->len && nsel < limit; k++) {
        size_t i = (r->head + r->cap - 1 - k) % r->cap;
        struct fl_record_entry *e = &r->ring[i];
        if (model_filter != NULL && (!e->has_model || strcmp(e->model, model_filter) != 0))
            continue;
        idx[nsel++] = i;
    }
    for (size_t k = nsel; k > 0; k--) {
        struct fl_record_entry *e = &r->ring[idx[k - 1]];
        json_t *body = json_text_from_bytes(e->body ? e->body : "", e->stored);
        json_t *o = json_pack(
            "{s:o?, s:o?, s:o?, s:I, s:b, s:i, s:I, s:o?}", "path",
            json_text_from_bytes(e->path, strlen(e->path)), "model",
            e->has_model ? json_text_from_bytes(e->model, strlen(e->model)) : json_null(), "body",
            body, "size", (json_int_t)e->size, "truncated", e->stored < e->size, "status",
            e->status, "ts_ms", (json_int_t)e->ts_ms, "headers", headers_json(e->headers, e->hlen));
        if (o == NULL || json_array_append_new(arr, o) != 0)
            goto fail;
    }
    pthread_mutex_unlock(&r->lock);
    free(idx);
    return arr;

fail:
    pthread_mutex_unlock(&r->lock);
    free(idx);
    json_decref(arr);
    return NULL;
}

void fl_record_stats(struct fl_record *r, uint64_t *added, uint64_t *dropped)
{
    pthread_mutex_lock(&r->lock);
    *added = r->added;
    *dropped = r->dropped;
    pthread_mutex_unlock(&r->lock);
}

void fl_record_clear(struct fl_record *r)
{
    pthread_mutex_lock(&r->lock);
    clear_locked(r);
    pthread_mutex_unlock(&r->lock);
}
