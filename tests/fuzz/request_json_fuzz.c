/* libFuzzer target for the request JSON scanner (router-svc/src/usage.h: rt_json_scan_object,
 * rt_json_is_true, rt_json_plain_string) against jansson: a differential between the request
 * path's fast path (no tree) and its slow path (json_loadb, flags 0).
 *
 * The input is a request body. It is scanned for the members http_front.c reads, with the
 * nested scans of its scan_request() (stream_options.include_usage, metadata.user_id), and the
 * values the router takes from it are compared with the ones request_start() takes from the
 * jansson tree when the scanner declines. scan_request() is static in http_front.c; its logic is
 * restated below (fast_path) and must follow it when it changes.
 *
 * Properties (abort on violation):
 *  - whenever the scanner answers 0, jansson accepts the text as an object; every located
 *    member is present in jansson's object (and every wanted member jansson has was located),
 *    its byte span parses to a value equal to jansson's, rt_json_is_true agrees with
 *    json_is_true, and a plain string has jansson's bytes; *close_off is the closing brace and
 *    only whitespace follows it; the scanner answers only 0 or TG_EINVAL;
 *  - asking for members never makes the scanner accept more: 0 with members implies 0 without;
 *  - when the fast path takes the request (scan_request() would return 1), model, stream,
 *    stream_options.include_usage, disable_fallbacks and the end user are what the slow path
 *    reads from the tree. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tg_err.h"
#include "usage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The members http_front.c locates (FM_* there), in its order. */
enum { M_MODEL = 0, M_STREAM, M_STREAM_OPTIONS, M_DISABLE_FALLBACKS, M_USER, M_METADATA, M_N };
static const char *const member_names[M_N] = {
    "model", "stream", "stream_options", "disable_fallbacks", "user", "metadata"};

/* What the router reads from a request body. */
struct request_view {
    int model_is_string;
    const char *model; /* bytes, not NUL-terminated on the fast path */
    size_t model_len;
    int stream, include_usage, disable_fallbacks;
    const char *end_user; /* NULL when none */
    size_t end_user_len;
};

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "request_json_fuzz: %s%s%s\n", what, detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
    abort();
}

/* A scan that answered 0 against jansson's tree of the same text: see the header. */
static void check_scan(const char *text, size_t len, const struct rt_json_member *m, size_t nm,
                       size_t close_off, const char *where)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);

    if (!json_is_object(root))
        fail("the scanner accepts what jansson refuses", root == NULL ? jerr.text : where);
    if (close_off >= len || text[close_off] != '}')
        fail("close_off is not the closing brace", where);
    for (size_t i = close_off + 1; i < len; i++) {
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\n' && text[i] != '\r')
            fail("bytes other than whitespace after close_off", where);
    }
    for (size_t i = 0; i < nm; i++) {
        json_t *jv = json_object_get(root, m[i].name);
        json_t *sv;
        const char *s;
        size_t n;

        if ((m[i].val_len > 0) != (jv != NULL))
            fail(jv == NULL ? "scanner located a member jansson does not have"
                            : "scanner missed a member jansson has",
                 m[i].name);
        if (jv == NULL)
            continue;
        if (m[i].val_off + m[i].val_len > len || m[i].key_off >= m[i].val_off ||
            text[m[i].key_off] != '"')
            fail("member span outside the text", m[i].name);
        sv = json_loadb(text + m[i].val_off, m[i].val_len, JSON_DECODE_ANY, &jerr);
        if (sv == NULL || !json_equal(sv, jv))
            fail("member span is not jansson's value", m[i].name);
        json_decref(sv);
        if (rt_json_is_true(text, &m[i]) != json_is_true(jv))
            fail("rt_json_is_true disagrees with json_is_true", m[i].name);
        if (rt_json_plain_string(text, &m[i], &s, &n)) {
            if (!json_is_string(jv) || json_string_length(jv) != n ||
                memcmp(json_string_value(jv), s, n) != 0)
                fail("plain string differs from jansson's string", m[i].name);
        } else if (json_is_string(jv) && memchr(text + m[i].val_off, '\\', m[i].val_len) == NULL) {
            fail("a string without escapes was not given as plain", m[i].name);
        }
    }
    json_decref(root);
}

/* rt_json_scan_object, with the properties above checked when it answers 0. */
static int scan(const char *text, size_t len, struct rt_json_member *m, size_t nm,
                size_t *close_off, const char *where)
{
    size_t off = (size_t)-1;
    int rc = rt_json_scan_object(text, len, m, nm, &off);

    if (rc != 0 && rc != TG_EINVAL)
        fail("scanner answered neither 0 nor TG_EINVAL", where);
    if (rc == 0) {
        check_scan(text, len, m, nm, off, where);
        if (nm > 0 && rt_json_scan_object(text, len, NULL, 0, NULL) != 0)
            fail("the scanner accepts with members what it refuses without", where);
    }
    if (close_off != NULL)
        *close_off = off;
    return rc;
}

/* http_front.c scan_request() restated: 1 when the fast path takes the request. */
static int fast_path(const char *body, size_t len, struct request_view *v)
{
    struct rt_json_member fm[M_N];
    struct rt_json_member sub[1];
    const char *s;
    size_t n, close_off;

    memset(v, 0, sizeof(*v));
    memset(fm, 0, sizeof(fm));
    for (int i = 0; i < M_N; i++)
        fm[i].name = member_names[i];
    if (len == 0 || scan(body, len, fm, M_N, &close_off, "request") != 0)
        return 0;
    if (fm[M_MODEL].val_len > 0 && body[fm[M_MODEL].val_off] == '"' &&
        !rt_json_plain_string(body, &fm[M_MODEL], &s, &n))
        return 0;
    if (fm[M_STREAM_OPTIONS].val_len > 0 && body[fm[M_STREAM_OPTIONS].val_off] == '{') {
        memset(sub, 0, sizeof(sub));
        sub[0].name = "include_usage";
        if (scan(body + fm[M_STREAM_OPTIONS].val_off, fm[M_STREAM_OPTIONS].val_len, sub, 1, NULL,
                 "stream_options") != 0)
            return 0;
        v->include_usage = rt_json_is_true(body + fm[M_STREAM_OPTIONS].val_off, &sub[0]);
    }
    if (fm[M_USER].val_len > 0 && body[fm[M_USER].val_off] == '"') {
        if (!rt_json_plain_string(body, &fm[M_USER], &v->end_user, &v->end_user_len))
            return 0;
    } else if (fm[M_METADATA].val_len > 0 && body[fm[M_METADATA].val_off] == '{') {
        const char *mb = body + fm[M_METADATA].val_off;

        memset(sub, 0, sizeof(sub));
        sub[0].name = "user_id";
        if (scan(mb, fm[M_METADATA].val_len, sub, 1, NULL, "metadata") != 0)
            return 0;
        if (sub[0].val_len > 0 && mb[sub[0].val_off] == '"' &&
            !rt_json_plain_string(mb, &sub[0], &v->end_user, &v->end_user_len))
            return 0;
    }
    /* request_start() in raw mode */
    v->model_is_string = rt_json_plain_string(body, &fm[M_MODEL], &v->model, &v->model_len);
    v->stream = rt_json_is_true(body, &fm[M_STREAM]);
    v->disable_fallbacks = rt_json_is_true(body, &fm[M_DISABLE_FALLBACKS]);
    return 1;
}

/* request_start() and the event's end user without raw mode: from the tree (borrowed). */
static void slow_path(const json_t *req, struct request_view *v)
{
    const json_t *model = json_object_get(req, "model");
    const json_t *user = json_object_get(req, "user");

    memset(v, 0, sizeof(*v));
    if (json_is_string(model)) {
        v->model_is_string = 1;
        v->model = json_string_value(model);
        v->model_len = json_string_length(model);
    }
    v->stream = json_is_true(json_object_get(req, "stream"));
    v->include_usage =
        json_is_true(json_object_get(json_object_get(req, "stream_options"), "include_usage"));
    v->disable_fallbacks = json_is_true(json_object_get(req, "disable_fallbacks"));
    if (!json_is_string(user))
        user = json_object_get(json_object_get(req, "metadata"), "user_id");
    if (json_is_string(user)) {
        v->end_user = json_string_value(user);
        v->end_user_len = json_string_length(user);
    }
}

static int same_bytes(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* Depth and values of a jansson tree (the container itself counts as a value). */
static void tree_size(const json_t *j, unsigned depth, unsigned *max_depth, uint64_t *values)
{
    (*values)++;
    if (json_is_object(j) || json_is_array(j)) {
        const char *k;
        json_t *v;
        size_t i;

        if (depth + 1 > *max_depth)
            *max_depth = depth + 1;
        if (json_is_object(j)) {
            json_object_foreach((json_t *)j, k, v) tree_size(v, depth + 1, max_depth, values);
        } else {
            json_array_foreach(j, i, v) tree_size(v, depth + 1, max_depth, values);
        }
    }
}

/* The bounded slow path (rt_json_load_bounded, small bounds so both answers are reached): when
 * the bounds pass, the same result as json_loadb; the bounds are exact on depth, and refuse on
 * values only a document that has more. */
#define FZ_DEPTH 8u
#define FZ_VALUES 64u
static void check_bounded(const char *body, size_t size)
{
    json_error_t jerr, jerr2;
    json_t *plain = json_loadb(body, size, 0, &jerr);
    json_t *bounded = rt_json_load_bounded(body, size, FZ_DEPTH, FZ_VALUES, &jerr2);

    if (bounded != NULL) {
        if (plain == NULL || !json_equal(plain, bounded))
            fail("the bounded parse differs from jansson's", NULL);
    } else if (plain != NULL && jerr2.position < 0) {
        unsigned depth = 0;
        uint64_t values = 0;
        /* jansson keeps one value of a duplicated key, the bounds count every value the text
         * has: the tree's size is the document's only without duplicates */
        json_t *strict = json_loadb(body, size, JSON_REJECT_DUPLICATES, &jerr);

        tree_size(plain, 0, &depth, &values);
        if (strict != NULL && depth <= FZ_DEPTH && values <= FZ_VALUES)
            fail("the bounds refused a document within them", jerr2.text);
        json_decref(strict);
    }
    if (plain != NULL && bounded == NULL && jerr2.position >= 0)
        fail("the bounded parse failed on a document jansson parses", jerr2.text);
    if (plain != NULL) {
        unsigned depth = 0;
        uint64_t values = 0;

        tree_size(plain, 0, &depth, &values);
        if (depth > FZ_DEPTH && bounded != NULL)
            fail("the bounds let a document deeper than their limit through", NULL);
    }
    json_decref(plain);
    json_decref(bounded);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    struct request_view fast, slow;
    json_error_t jerr;
    json_t *req;

    /* validation alone (no member wanted) */
    if (size > 0)
        (void)scan(body, size, NULL, 0, NULL, "whole text");
    check_bounded(body, size);
    if (!fast_path(body, size, &fast))
        return 0;
    req = json_loadb(body, size, 0, &jerr);
    if (!json_is_object(req))
        fail("fast path took a body the slow path refuses", jerr.text);
    slow_path(req, &slow);
    if (fast.model_is_string != slow.model_is_string ||
        (fast.model_is_string &&
         !same_bytes(fast.model, fast.model_len, slow.model, slow.model_len)))
        fail("model differs between the fast and the slow path", NULL);
    if (fast.stream != slow.stream || fast.include_usage != slow.include_usage ||
        fast.disable_fallbacks != slow.disable_fallbacks)
        fail("stream, include_usage or disable_fallbacks differs between the paths", NULL);
    if ((fast.end_user == NULL) != (slow.end_user == NULL) ||
        (fast.end_user != NULL &&
         !same_bytes(fast.end_user, fast.end_user_len, slow.end_user, slow.end_user_len)))
        fail("end user differs between the fast and the slow path", NULL);
    json_decref(req);
    return 0;
}
