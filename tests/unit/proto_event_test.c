/* proto_event unit tests: golden vectors, the 4 KiB bound under adversarial input, the trail
 * ring, normalisation, and a bounded mutation loop that must never crash the decoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>

#include "proto_event.h"
#include "proto_int.h"
#include "tg_err.h"

#define CALL_ID "0190b3e2-7c1a-7b3e-8f00-123456789abc"
#define BIG_BYTES (1024 * 1024)
#define MUTATIONS 100000
#define RANDOM_EVENTS 5000

/* ---- helpers ---------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    uint64_t x = rng_state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
}

static const char *golden_dir(void)
{
    static char dir[4096];
    const char *src = getenv("TG_SOURCE_DIR");

    assert_non_null(src);
    snprintf(dir, sizeof(dir), "%s/tests/golden", src);
    return dir;
}

/* Whole file into a new buffer (caller frees), exact size (no NUL added, so an over-read shows
 * under ASan); NULL when missing. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    assert_true(n >= 0 && n < 1024 * 1024);
    buf = malloc(n > 0 ? (size_t)n : 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* File contents as a string without its trailing newline (caller frees). */
static char *read_text(const char *path)
{
    size_t n = 0;
    char *raw = read_file(path, &n);
    char *s;

    if (raw == NULL)
        return NULL;
    while (n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == '\r'))
        n--;
    s = malloc(n + 1);
    assert_non_null(s);
    memcpy(s, raw, n);
    s[n] = '\0';
    free(raw);
    return s;
}

static void assert_events_equal(const struct proto_event *a, const struct proto_event *b)
{
    assert_int_equal(a->v, b->v);
    assert_int_equal(a->kind, b->kind);
    assert_string_equal(a->call_id, b->call_id);
    assert_int_equal(a->ts_start_ms, b->ts_start_ms);
    assert_int_equal(a->ts_end_ms, b->ts_end_ms);
    assert_string_equal(a->endpoint, b->endpoint);
    assert_int_equal(a->stream, b->stream);
    assert_string_equal(a->key_hash, b->key_hash);
    assert_string_equal(a->key_alias, b->key_alias);
    assert_string_equal(a->team_id, b->team_id);
    assert_string_equal(a->user_id, b->user_id);
    assert_string_equal(a->end_user, b->end_user);
    assert_string_equal(a->model_requested, b->model_requested);
    assert_string_equal(a->model_group, b->model_group);
    assert_string_equal(a->deployment_id, b->deployment_id);
    assert_string_equal(a->provider, b->provider);
    assert_string_equal(a->model, b->model);
    assert_int_equal(a->status, b->status);
    assert_string_equal(a->error_class, b->error_class);
    assert_int_equal(a->prompt_tokens, b->prompt_tokens);
    assert_int_equal(a->completion_tokens, b->completion_tokens);
    assert_int_equal(a->cost_nusd, b->cost_nusd);
    assert_int_equal(a->latency_ms, b->latency_ms);
    assert_int_equal(a->ttft_ms, b->ttft_ms);
    assert_int_equal(a->attempts, b->attempts);
    assert_int_equal(a->fallbacks, b->fallbacks);
    assert_int_equal(a->trail_len, b->trail_len);
    for (uint32_t i = 0; i < a->trail_len; i++) {
        assert_string_equal(a->trail[i].group, b->trail[i].group);
        assert_string_equal(a->trail[i].deployment_id, b->trail[i].deployment_id);
        assert_int_equal(a->trail[i].http_status, b->trail[i].http_status);
        assert_string_equal(a->trail[i].error_class, b->trail[i].error_class);
        assert_int_equal(a->trail[i].latency_ms, b->trail[i].latency_ms);
        assert_string_equal(a->trail[i].message, b->trail[i].message);
    }
    assert_int_equal(a->tags_len, b->tags_len);
    for (uint32_t i = 0; i < a->tags_len; i++)
        assert_string_equal(a->tags[i], b->tags[i]);
    assert_string_equal(a->trace_id, b->trace_id);
    assert_int_equal(a->cache_read_tokens, b->cache_read_tokens);
    assert_int_equal(a->cache_creation_tokens, b->cache_creation_tokens);
    assert_int_equal(a->reasoning_tokens, b->reasoning_tokens);
    assert_int_equal(a->price_unknown, b->price_unknown);
}

/* Independent check with jansson: the text is one well-formed JSON object. */
static void assert_json_object(const char *text, size_t len)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);

    if (root == NULL)
        fail_msg("encoder output is not valid JSON: %s at %d", jerr.text, jerr.position);
    assert_true(json_is_object(root));
    json_decref(root);
}

/* Encode, check the bound and JSON validity, decode, and check the canonical fixpoint:
 * encoding the decoded event gives the same bytes. Decoded event in *dec. */
static void round_trip(const struct proto_event *ev, struct proto_event *dec, char *out,
                       size_t *outlen)
{
    struct proto_event again;
    char out2[TG_EVENT_MAX_BYTES + 1];
    char reason[256];
    size_t n2 = 0;

    assert_int_equal(proto_event_encode(ev, out, TG_EVENT_MAX_BYTES + 1, outlen), 0);
    assert_true(*outlen <= TG_EVENT_MAX_BYTES);
    assert_int_equal(strlen(out), *outlen);
    assert_json_object(out, *outlen);
    if (proto_event_decode(out, *outlen, dec, reason, sizeof(reason)) != 0)
        fail_msg("own encoding rejected: %s\n%s", reason, out);
    assert_int_equal(proto_event_encode(dec, out2, sizeof(out2), &n2), 0);
    assert_int_equal(n2, *outlen);
    assert_memory_equal(out, out2, n2);
    assert_int_equal(proto_event_decode(out2, n2, &again, reason, sizeof(reason)), 0);
    assert_events_equal(dec, &again);
}

static void base_event(struct proto_event *ev)
{
    proto_event_init(ev);
    strcpy(ev->call_id, CALL_ID);
    strcpy(ev->endpoint, "/v1/chat/completions");
    ev->ts_start_ms = 1764486000000;
    ev->ts_end_ms = 1764486000420;
    ev->status = 200;
}

/* ---- golden vectors ---------------------------------------------------------------------- */

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s);
    size_t m = strlen(suf);

    return n >= m && strcmp(s + n - m, suf) == 0;
}

static void test_golden_valid(void **state)
{
    char dir[4200];
    DIR *d;
    struct dirent *de;
    int count = 0;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/valid", golden_dir());
    d = opendir(dir);
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        char path[8400];
        char out[TG_EVENT_MAX_BYTES + 1];
        char reason[256];
        struct proto_event ev;
        struct proto_event dec;
        size_t len = 0;
        size_t outlen = 0;
        char *data;
        char *expected;

        if (!has_suffix(de->d_name, ".json"))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        data = read_file(path, &len);
        assert_non_null(data);
        snprintf(path + strlen(path) - 5, 16, ".expected");
        expected = read_text(path);
        if (expected == NULL)
            fail_msg("%s: no .expected file", de->d_name);
        if (proto_event_decode(data, len, &ev, reason, sizeof(reason)) != 0)
            fail_msg("%s rejected: %s", de->d_name, reason);
        round_trip(&ev, &dec, out, &outlen);
        if (strcmp(out, expected) != 0)
            fail_msg("%s: canonical encoding differs\n got: %s\nwant: %s", de->d_name, out,
                     expected);
        assert_events_equal(&ev, &dec);
        free(expected);
        free(data);
        count++;
    }
    closedir(d);
    assert_true(count >= 6);
}

static void test_golden_invalid(void **state)
{
    char dir[4200];
    DIR *d;
    struct dirent *de;
    int count = 0;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/invalid", golden_dir());
    d = opendir(dir);
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        char path[8400];
        char reason[256];
        struct proto_event ev;
        size_t len = 0;
        char *data;
        char *expected;
        int rc;

        if (!has_suffix(de->d_name, ".json"))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        data = read_file(path, &len);
        assert_non_null(data);
        snprintf(path + strlen(path) - 5, 16, ".reason");
        expected = read_text(path);
        if (expected == NULL)
            fail_msg("%s: no .reason file", de->d_name);
        rc = proto_event_decode(data, len, &ev, reason, sizeof(reason));
        if (rc == 0)
            fail_msg("%s accepted", de->d_name);
        if (strcmp(reason, expected) != 0)
            fail_msg("%s: reason differs\n got: %s\nwant: %s", de->d_name, reason, expected);
        if (strncmp(expected, "event too large", 15) == 0)
            assert_int_equal(rc, TG_ETOOBIG);
        else
            assert_int_equal(rc, TG_EPROTO);
        /* A rejected event leaves nothing half-filled behind. */
        assert_string_equal(ev.call_id, "");
        assert_int_equal(ev.trail_len, 0);
        free(expected);
        free(data);
        count++;
    }
    closedir(d);
    assert_true(count >= 15);
}

/* ---- the acceptance case: 1 MB strings and 1,000 attempts ------------------------------ */

static void fill_all(struct proto_event *ev, const char *big, int attempts_n, const char *tag)
{
    struct proto_attempt a;

    base_event(ev);
    proto_str_set(ev->endpoint, PROTO_ENDPOINT_CAP, big);
    proto_str_set(ev->key_alias, PROTO_NAME_CAP, big);
    proto_str_set(ev->team_id, PROTO_NAME_CAP, big);
    proto_str_set(ev->user_id, PROTO_NAME_CAP, big);
    proto_str_set(ev->end_user, PROTO_NAME_CAP, big);
    proto_str_set(ev->model_requested, PROTO_MODEL_CAP, big);
    proto_str_set(ev->model_group, PROTO_MODEL_CAP, big);
    proto_str_set(ev->deployment_id, PROTO_NAME_CAP, big);
    proto_str_set(ev->provider, PROTO_PROVIDER_CAP, big);
    proto_str_set(ev->model, PROTO_MODEL_CAP, big);
    proto_str_set(ev->error_class, PROTO_ERROR_CLASS_CAP, big);
    memset(ev->key_hash, 'f', 64);
    memset(ev->trace_id, 'a', 32);
    ev->prompt_tokens = INT64_MAX;
    ev->completion_tokens = INT64_MAX;
    ev->cost_nusd = INT64_MAX;
    ev->latency_ms = INT64_MAX;
    ev->ttft_ms = INT64_MAX;
    ev->ts_start_ms = INT64_MAX;
    ev->ts_end_ms = INT64_MAX;
    ev->status = 999;
    ev->fallbacks = INT32_MAX;
    for (int i = 0; i < attempts_n; i++) {
        memset(&a, 0, sizeof(a));
        proto_str_set(a.group, sizeof(a.group), big);
        proto_str_set(a.deployment_id, sizeof(a.deployment_id), big);
        proto_str_set(a.error_class, sizeof(a.error_class), big);
        proto_str_set(a.message, sizeof(a.message), big);
        a.http_status = 500 + i % 100;
        a.latency_ms = (uint32_t)i;
        assert_int_equal(proto_event_add_attempt(ev, &a), i >= PROTO_TRAIL_MAX ? 1 : 0);
    }
    for (int i = 0; i < 20; i++)
        assert_int_equal(proto_event_add_tag(ev, tag), i < PROTO_TAGS_MAX ? 0 : TG_EFULL);
}

static void test_acceptance_1mb_strings_1000_attempts(void **state)
{
    struct proto_event ev;
    struct proto_event dec;
    char out[TG_EVENT_MAX_BYTES + 1];
    size_t outlen = 0;
    char *big = malloc(BIG_BYTES + 1);

    (void)state;
    assert_non_null(big);
    memset(big, 'x', BIG_BYTES);
    big[BIG_BYTES] = '\0';
    fill_all(&ev, big, 1000, big);
    assert_int_equal(ev.attempts, 1000);
    assert_int_equal(ev.trail_len, PROTO_TRAIL_MAX);
    assert_int_equal(ev.tags_len, PROTO_TAGS_MAX);

    round_trip(&ev, &dec, out, &outlen);
    assert_true(outlen <= TG_EVENT_MAX_BYTES);

    /* Decodes back to the capped values: every string is the first cap - 1 bytes. */
    assert_int_equal(strlen(dec.endpoint), PROTO_ENDPOINT_CAP - 1);
    assert_int_equal(strlen(dec.key_alias), PROTO_NAME_CAP - 1);
    assert_int_equal(strlen(dec.team_id), PROTO_NAME_CAP - 1);
    assert_int_equal(strlen(dec.user_id), PROTO_NAME_CAP - 1);
    assert_int_equal(strlen(dec.end_user), PROTO_NAME_CAP - 1);
    assert_int_equal(strlen(dec.model_requested), PROTO_MODEL_CAP - 1);
    assert_int_equal(strlen(dec.model_group), PROTO_MODEL_CAP - 1);
    assert_int_equal(strlen(dec.deployment_id), PROTO_NAME_CAP - 1);
    assert_int_equal(strlen(dec.provider), PROTO_PROVIDER_CAP - 1);
    assert_int_equal(strlen(dec.model), PROTO_MODEL_CAP - 1);
    assert_int_equal(strlen(dec.error_class), PROTO_ERROR_CLASS_CAP - 1);
    assert_int_equal(strncmp(dec.model, big, PROTO_MODEL_CAP - 1), 0);
    assert_int_equal(dec.attempts, 1000);
    assert_int_equal(dec.trail_len, PROTO_TRAIL_MAX);
    for (uint32_t i = 0; i < PROTO_TRAIL_MAX; i++) {
        /* newest kept, in order */
        assert_int_equal(dec.trail[i].latency_ms, 1000 - PROTO_TRAIL_MAX + i);
        assert_int_equal(dec.trail[i].http_status, 500 + (int)((1000 - PROTO_TRAIL_MAX + i) % 100));
        assert_int_equal(strlen(dec.trail[i].group), PROTO_MODEL_CAP - 1);
        assert_int_equal(strlen(dec.trail[i].deployment_id), PROTO_NAME_CAP - 1);
        assert_int_equal(strlen(dec.trail[i].error_class), PROTO_ERROR_CLASS_CAP - 1);
        assert_int_equal(strlen(dec.trail[i].message), PROTO_MESSAGE_CAP - 1);
    }
    assert_int_equal(dec.tags_len, PROTO_TAGS_MAX);
    for (uint32_t i = 0; i < PROTO_TAGS_MAX; i++)
        assert_int_equal(strlen(dec.tags[i]), PROTO_TAG_CAP - 1);
    assert_int_equal(dec.prompt_tokens, INT64_MAX);
    assert_int_equal(dec.cost_nusd, INT64_MAX);
    assert_int_equal(dec.status, 999);
    free(big);
}

/* ---- adversarial escaping ---------------------------------------------------------------- */

/* Every free-text field at its cap, filled with the worst bytes for JSON: control characters
 * (6 bytes each), quotes and backslashes (2), multibyte characters, invalid UTF-8. */
static void test_adversarial_fill_stays_in_bound(void **state)
{
    static const char *const patterns[] = {
        "\x01",             /* \u0001: 6 bytes each */
        "\"",               /* \" */
        "\\",               /* \\ */
        "\x1f\"\\\n",       /* mixed */
        "\xc3\xa9",         /* e acute, 2-byte */
        "\xf0\x9f\x98\x80", /* 4-byte emoji */
        "\xff",             /* invalid: becomes U+FFFD (3 bytes) */
        "\xe2\x82",         /* truncated sequence */
        "a\x01\xf0\x9f\x98\x80\"",
    };
    char *big = malloc(BIG_BYTES + 1);

    (void)state;
    assert_non_null(big);
    for (size_t p = 0; p < sizeof(patterns) / sizeof(patterns[0]); p++) {
        size_t pl = strlen(patterns[p]);
        struct proto_event ev;
        struct proto_event dec;
        char out[TG_EVENT_MAX_BYTES + 1];
        size_t outlen = 0;

        for (size_t i = 0; i + pl <= BIG_BYTES; i += pl)
            memcpy(big + i, patterns[p], pl);
        big[BIG_BYTES - BIG_BYTES % pl] = '\0';
        fill_all(&ev, big, 1000, big);
        round_trip(&ev, &dec, out, &outlen);
        assert_true(outlen <= TG_EVENT_MAX_BYTES);
        /* Fields that are never shortened keep their values. */
        assert_string_equal(dec.call_id, CALL_ID);
        assert_int_equal(dec.attempts, 1000);
        assert_int_equal(dec.trail_len, PROTO_TRAIL_MAX);
        assert_int_equal(dec.trail[3].latency_ms, 999);
        assert_int_equal(strlen(dec.key_hash), 64);
        assert_int_equal(strlen(dec.trace_id), 32);
        /* Shortened strings are prefixes of what the caller set, cut at a character. */
        assert_int_equal(strncmp(dec.model, ev.model, strlen(dec.model)), 0);
        assert_int_equal(strncmp(dec.endpoint, ev.endpoint, strlen(dec.endpoint)), 0);
        assert_string_equal(dec.endpoint, ev.endpoint);
    }
    free(big);
}

/* Random bytes in every field and random numbers: always encodes, always within the bound,
 * always decodes, canonical fixpoint. */
static void test_random_events_round_trip(void **state)
{
    (void)state;
    for (int n = 0; n < RANDOM_EVENTS; n++) {
        struct proto_event ev;
        struct proto_event dec;
        char out[TG_EVENT_MAX_BYTES + 1];
        size_t outlen = 0;
        unsigned char *raw = (unsigned char *)&ev;

        /* Garbage everywhere (no NUL guaranteed in any string), then the two fields the encoder
         * requires. */
        for (size_t i = 0; i < sizeof(ev); i++)
            raw[i] = (unsigned char)rng();
        if (rng() % 4 == 0) {
            for (size_t i = 0; i < sizeof(ev); i++)
                raw[i] = (unsigned char)(rng() % 0x20);
        }
        ev.kind = (enum proto_kind)(rng() % 2);
        memcpy(ev.call_id, CALL_ID, sizeof(CALL_ID));
        round_trip(&ev, &dec, out, &outlen);
        assert_true(dec.trail_len <= PROTO_TRAIL_MAX);
        assert_true(dec.tags_len <= PROTO_TAGS_MAX);
        assert_true(dec.prompt_tokens >= 0 && dec.cost_nusd >= 0);
    }
}

/* The encoder's fast paths (strings copied and escaped a word at a time, numbers two digits a
 * step) against independent references: jansson reads every string back as the cleaned input,
 * at every length and alignment around a word, with each byte that needs an escape (and a
 * non-ASCII one) at each position; every number is written as printf writes it. */
static void test_encode_fast_paths_match_reference(void **state)
{
    static const int64_t nums[] = {0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 65535,
                                   99999999, 100000000, 1234567890123, INT64_MAX};
    static const unsigned char odd[] = {0x01, 0x08, 0x09, 0x0a, 0x0c, 0x0d, 0x1f, '"', '\\',
                                        0x7f, 0xc3};

    (void)state;
    for (size_t len = 0; len <= 20; len++) {
        for (size_t at = 0; at <= len; at++) {
            for (size_t k = 0; k <= sizeof(odd); k++) {
                struct proto_event ev;
                char out[TG_EVENT_MAX_BYTES + 1], want[32];
                size_t outlen = 0;
                json_error_t jerr;
                json_t *root;
                const char *got;

                if (k < sizeof(odd) && at == len)
                    continue; /* the odd byte goes at a position inside the string */
                base_event(&ev);
                for (size_t i = 0; i < len; i++)
                    want[i] = (char)('a' + (i * 7) % 26);
                if (k < sizeof(odd))
                    want[at] = (char)odd[k];
                want[len] = '\0';
                if (k < sizeof(odd) && odd[k] == 0xc3) {
                    if (at + 1 < len) {
                        want[at + 1] = (char)0xa9; /* U+00E9, two bytes */
                    } else {
                        continue;
                    }
                }
                strcpy(ev.key_alias, want);
                strcpy(ev.model, want);
                assert_int_equal(proto_event_encode(&ev, out, sizeof(out), &outlen), 0);
                root = json_loadb(out, outlen, 0, &jerr);
                if (root == NULL)
                    fail_msg("not JSON (%s): %s", jerr.text, out);
                if (len == 0) { /* "" is the default: the members are left out */
                    assert_null(json_object_get(root, "key_alias"));
                    assert_null(json_object_get(root, "model"));
                    json_decref(root);
                    continue;
                }
                got = json_string_value(json_object_get(root, "key_alias"));
                assert_non_null(got);
                assert_string_equal(got, want);
                assert_string_equal(json_string_value(json_object_get(root, "model")), want);
                json_decref(root);
            }
        }
    }
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        struct proto_event ev;
        char out[TG_EVENT_MAX_BYTES + 1], want[64];
        size_t outlen = 0;

        base_event(&ev);
        ev.prompt_tokens = nums[i];
        ev.cost_nusd = nums[i];
        assert_int_equal(proto_event_encode(&ev, out, sizeof(out), &outlen), 0);
        if (nums[i] == 0) { /* 0 is the default: the members are left out */
            assert_null(strstr(out, "\"prompt_tokens\""));
            assert_null(strstr(out, "\"cost_nusd\""));
            continue;
        }
        snprintf(want, sizeof(want), "\"prompt_tokens\":%lld,", (long long)nums[i]);
        if (strstr(out, want) == NULL)
            fail_msg("%s not in %s", want, out);
        snprintf(want, sizeof(want), "\"cost_nusd\":%lld}", (long long)nums[i]); /* the last */
        if (strstr(out, want) == NULL)
            fail_msg("%s not in %s", want, out);
    }
}

/* Encode ev both ways, the direct pass (proto_event_encode) and the cleaning way; they must
 * agree byte for byte. */
static void encode_both_agree(const struct proto_event *ev)
{
    char out[TG_EVENT_MAX_BYTES + 1], ref[TG_EVENT_MAX_BYTES + 1];
    size_t outlen = 0, reflen = 0;
    int rc = proto_event_encode(ev, out, sizeof(out), &outlen);
    int rrc = proto_event_encode_cleaned(ev, ref, &reflen);

    assert_int_equal(rc, rrc);
    if (rc != 0)
        return;
    if (outlen != reflen || memcmp(out, ref, outlen) != 0)
        fail_msg("direct pass and cleaning way differ:\n%s\n%s", out, ref);
}

/* The direct pass writes an ASCII event straight from the caller's fields; whatever it accepts
 * must come out as the cleaning way writes it. Events of ASCII bytes (control characters, quotes
 * and backslashes included) with NULs strewn about, so fields end anywhere or not at all, and
 * the cases at the edges: a key_hash or trace_id that becomes valid only when cut to its cap
 * (found by the proto_encode fuzz target), an upper-case call_id, escapes past the 4 KiB cap. */
static void test_direct_pass_matches_cleaned(void **state)
{
    struct proto_event ev;

    (void)state;
    for (int n = 0; n < RANDOM_EVENTS; n++) {
        unsigned char *raw = (unsigned char *)&ev;
        unsigned nul = 4u + (unsigned)(rng() % 60);

        for (size_t i = 0; i < sizeof(ev); i++)
            raw[i] = (rng() % nul == 0) ? 0 : (unsigned char)(1 + rng() % 0x7f);
        ev.kind = (enum proto_kind)(rng() % 2);
        memcpy(ev.call_id, CALL_ID, sizeof(CALL_ID));
        if (rng() % 3 == 0)
            ev.trail_len = (uint32_t)(rng() % (PROTO_TRAIL_MAX + 2));
        if (rng() % 3 == 0)
            ev.tags_len = (uint32_t)(rng() % (PROTO_TAGS_MAX + 2));
        if (rng() % 4 == 0)
            memset(ev.key_hash, 'a' + (int)(rng() % 6), 64);
        if (rng() % 4 == 0)
            memset(ev.trace_id, '0' + (int)(rng() % 10), 32);
        encode_both_agree(&ev);
    }

    base_event(&ev);
    encode_both_agree(&ev);
    memset(ev.key_hash, 'b', sizeof(ev.key_hash)); /* 65 hex digits, no NUL: cut, it is valid */
    encode_both_agree(&ev);
    base_event(&ev);
    memset(ev.trace_id, 'c', sizeof(ev.trace_id)); /* 33 hex digits, no NUL */
    encode_both_agree(&ev);
    base_event(&ev);
    memcpy(ev.call_id, "0190B3E2-7C1A-7B3E-8F00-123456789ABC", sizeof(ev.call_id));
    encode_both_agree(&ev);
    base_event(&ev);
    memset(ev.model, 'm', sizeof(ev.model)); /* no NUL: cut to 128 bytes */
    encode_both_agree(&ev);
    base_event(&ev);
    ev.trail_len = PROTO_TRAIL_MAX;
    for (int i = 0; i < PROTO_TRAIL_MAX; i++) {
        memset(ev.trail[i].message, 0x01, PROTO_MESSAGE_CAP - 1); /* 6 bytes each escaped */
        ev.trail[i].message[PROTO_MESSAGE_CAP - 1] = '\0';
    }
    ev.tags_len = PROTO_TAGS_MAX;
    for (int i = 0; i < PROTO_TAGS_MAX; i++) {
        memset(ev.tags[i], 0x02, PROTO_TAG_CAP - 1);
        ev.tags[i][PROTO_TAG_CAP - 1] = '\0';
    }
    encode_both_agree(&ev); /* over the cap: shortened by the cleaning way */
    base_event(&ev);
    strcpy(ev.team_id, "caf\xc3\xa9 \xff"); /* not ASCII: the cleaning way */
    encode_both_agree(&ev);
}

/* proto_is_lower_hex (16 bytes a step where it can) against a byte-wise reference: every byte
 * value at every position of a 64- and a 32-digit field, and at the NUL's place. */
static int lower_hex_ref(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    }
    return s[n] == '\0';
}

static void test_lower_hex_every_byte_every_position(void **state)
{
    static const size_t lens[] = {64, 32};
    char f[PROTO_KEY_HASH_CAP];

    (void)state;
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        size_t n = lens[l];

        for (size_t pos = 0; pos <= n; pos++) {
            for (int b = 0; b < 256; b++) {
                for (size_t i = 0; i < n; i++)
                    f[i] = "0123456789abcdef"[(i * 7 + pos) % 16];
                f[n] = '\0';
                f[pos] = (char)b;
                if (proto_is_lower_hex(f, n) != lower_hex_ref(f, n))
                    fail_msg("len %zu: byte 0x%02x at %zu: %d", n, b, pos,
                             proto_is_lower_hex(f, n));
            }
        }
    }
}

/* The direct pass's one-pass call id check and lowering against the cleaning way's
 * (proto_uuid_lower, then proto_is_uuid): every byte value at every position of an upper- and
 * a lower-case UUID, and at the NUL's place, gives the same answer and the same bytes. */
static void test_call_id_every_byte_every_position(void **state)
{
    static const char *const ids[] = {CALL_ID, "0190B3E2-7C1A-7B3E-8F00-123456789ABC"};
    struct proto_event ev;
    char out[TG_EVENT_MAX_BYTES + 1];
    size_t outlen = 0;

    (void)state;
    for (size_t k = 0; k < sizeof(ids) / sizeof(ids[0]); k++) {
        for (size_t pos = 0; pos < PROTO_CALL_ID_CAP; pos++) {
            for (int b = 0; b < 256; b++) {
                char ref[PROTO_CALL_ID_CAP];
                int ok;

                base_event(&ev);
                memcpy(ev.call_id, ids[k], PROTO_CALL_ID_CAP);
                ev.call_id[pos] = (char)b;
                encode_both_agree(&ev);
                memcpy(ref, ev.call_id, PROTO_CALL_ID_CAP);
                ref[PROTO_CALL_ID_CAP - 1] = '\0'; /* a field without its NUL is cut to its cap */
                proto_uuid_lower(ref);
                ok = proto_event_encode(&ev, out, sizeof(out), &outlen) == 0;
                assert_int_equal(ok, proto_is_uuid(ref));
                if (ok && (strncmp(strstr(out, "\"call_id\":\"") + 11, ref, 36) != 0 ||
                           strpbrk(ref, "ABCDEF") != NULL))
                    fail_msg("byte 0x%02x at %zu: call id not written lowercase:\n%s", b, pos,
                             out);
            }
        }
    }
}

/* The proof that the bound always holds: the encoder may shorten every free-text field down to
 * nothing, so it always fits if the part it never shortens fits. Build that part at its worst
 * (endpoint of control characters, every number at its longest, 4 trail entries, 8 tags,
 * key_hash and trace_id present) with all shortenable strings empty: it must fit with room. */
static void test_unshortenable_part_worst_case_fits(void **state)
{
    struct proto_event ev;
    struct proto_event dec;
    char out[TG_EVENT_MAX_BYTES + 1];
    size_t outlen = 0;

    (void)state;
    base_event(&ev);
    memset(ev.endpoint, '\x01', PROTO_ENDPOINT_CAP - 1);
    memset(ev.key_hash, 'f', 64);
    memset(ev.trace_id, 'a', 32);
    ev.ts_start_ms = INT64_MAX;
    ev.ts_end_ms = INT64_MAX;
    ev.stream = 1; /* written only when true */
    ev.status = 999;
    ev.prompt_tokens = INT64_MAX;
    ev.completion_tokens = INT64_MAX;
    ev.cost_nusd = INT64_MAX;
    ev.latency_ms = INT64_MAX;
    ev.ttft_ms = INT64_MAX;
    ev.attempts = INT32_MAX;
    ev.fallbacks = INT32_MAX;
    ev.cache_read_tokens = INT64_MAX;
    ev.cache_creation_tokens = INT64_MAX;
    ev.reasoning_tokens = INT64_MAX;
    ev.price_unknown = 1;
    ev.kind = PROTO_KIND_COOLDOWN; /* "cooldown" is longer than "request" */
    ev.trail_len = PROTO_TRAIL_MAX;
    for (int i = 0; i < PROTO_TRAIL_MAX; i++) {
        ev.trail[i].http_status = 999;
        ev.trail[i].latency_ms = UINT32_MAX;
    }
    ev.tags_len = PROTO_TAGS_MAX;
    round_trip(&ev, &dec, out, &outlen);
    print_message("unshortenable part at its worst: %zu bytes of %d\n", outlen,
                  TG_EVENT_MAX_BYTES);
    assert_true(outlen < TG_EVENT_MAX_BYTES / 2);
}

static void test_shorten_order_trail_messages_oldest_first(void **state)
{
    struct proto_event ev;
    struct proto_event dec;
    struct proto_attempt a;
    char out[TG_EVENT_MAX_BYTES + 1];
    size_t outlen = 0;

    (void)state;
    base_event(&ev);
    memset(&a, 0, sizeof(a));
    strcpy(a.group, "gpt-main");
    memset(a.message, '\x02', PROTO_MESSAGE_CAP - 1); /* 960 bytes escaped */
    for (int i = 0; i < 4; i++)
        proto_event_add_attempt(&ev, &a);
    proto_event_add_tag(&ev, "keep-me");
    round_trip(&ev, &dec, out, &outlen);
    assert_true(outlen <= TG_EVENT_MAX_BYTES);
    /* Only the oldest message had to give way; everything else is whole. */
    assert_true(strlen(dec.trail[0].message) < PROTO_MESSAGE_CAP - 1);
    for (int i = 1; i < 4; i++)
        assert_int_equal(strlen(dec.trail[i].message), PROTO_MESSAGE_CAP - 1);
    assert_string_equal(dec.tags[0], "keep-me");
    assert_string_equal(dec.trail[0].group, "gpt-main");
    /* It gave exactly as much as needed, to within one escaped character. */
    assert_true(outlen > TG_EVENT_MAX_BYTES - 6);
}

/* ---- construction helpers and normalisation ---------------------------------------------- */

static void test_str_set_cuts_at_character(void **state)
{
    char dst[4];

    (void)state;
    assert_int_equal(proto_str_set(dst, sizeof(dst), "abc"), 0);
    assert_string_equal(dst, "abc");
    assert_int_equal(proto_str_set(dst, sizeof(dst), "abcd"), 1);
    assert_string_equal(dst, "abc");
    /* e acute twice: the second does not fit in 3 bytes, so it is dropped whole */
    assert_int_equal(proto_str_set(dst, sizeof(dst), "\xc3\xa9\xc3\xa9"), 1);
    assert_string_equal(dst, "\xc3\xa9");
    /* invalid byte becomes U+FFFD */
    assert_int_equal(proto_str_set(dst, sizeof(dst), "\xff"), 0);
    assert_string_equal(dst, "\xef\xbf\xbd");
    /* overlong encoding of '/' and a surrogate are invalid too */
    assert_int_equal(proto_str_set(dst, sizeof(dst), "\xc0\xaf"), 1);
    assert_string_equal(dst, "\xef\xbf\xbd");
    assert_int_equal(proto_str_set(dst, sizeof(dst), NULL), 0);
    assert_string_equal(dst, "");
}

static void test_add_attempt_ring_keeps_newest(void **state)
{
    struct proto_event ev;
    struct proto_attempt a;

    (void)state;
    proto_event_init(&ev);
    memset(&a, 0, sizeof(a));
    for (int i = 1; i <= 6; i++) {
        snprintf(a.deployment_id, sizeof(a.deployment_id), "d%d", i);
        a.latency_ms = (uint32_t)i;
        assert_int_equal(proto_event_add_attempt(&ev, &a), i > PROTO_TRAIL_MAX ? 1 : 0);
    }
    assert_int_equal(ev.attempts, 6);
    assert_int_equal(ev.trail_len, PROTO_TRAIL_MAX);
    assert_string_equal(ev.trail[0].deployment_id, "d3");
    assert_string_equal(ev.trail[3].deployment_id, "d6");
    assert_int_equal(ev.trail[3].latency_ms, 6);
    /* an unterminated source array is read only up to its size */
    memset(a.message, 'm', sizeof(a.message));
    proto_event_add_attempt(&ev, &a);
    assert_int_equal(strlen(ev.trail[3].message), PROTO_MESSAGE_CAP - 1);
}

static void test_encode_normalises_and_refuses(void **state)
{
    struct proto_event ev;
    struct proto_event dec;
    char out[TG_EVENT_MAX_BYTES + 1];
    size_t outlen = 0;

    (void)state;
    base_event(&ev);
    ev.prompt_tokens = -5;
    ev.attempts = -1;
    ev.status = 1000;
    strcpy(ev.key_hash, "not-a-hash");
    strcpy(ev.trace_id, "ABCDEF");
    round_trip(&ev, &dec, out, &outlen);
    assert_int_equal(dec.prompt_tokens, 0);
    assert_int_equal(dec.attempts, 0);
    assert_int_equal(dec.status, 0);
    assert_string_equal(dec.key_hash, "");
    assert_null(strstr(out, "trace_id"));

    strcpy(ev.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    round_trip(&ev, &dec, out, &outlen);
    assert_non_null(strstr(out, ",\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\"}"));

    assert_int_equal(proto_event_encode(&ev, out, TG_EVENT_MAX_BYTES, &outlen), TG_EINVAL);
    ev.kind = (enum proto_kind)7;
    assert_int_equal(proto_event_encode(&ev, out, sizeof(out), &outlen), TG_EINVAL);
    ev.kind = PROTO_KIND_COOLDOWN;
    strcpy(ev.call_id, "not-a-uuid");
    assert_int_equal(proto_event_encode(&ev, out, sizeof(out), &outlen), TG_EINVAL);
}

/* The optional parts of the counts and the unknown-price flag: written only when set (an event
 * without them encodes as before, so older decoders and the golden vectors are unchanged),
 * decoded back, absent as 0, checked like the other counts. */
static void test_optional_counts(void **state)
{
    struct proto_event ev, dec;
    char out[TG_EVENT_MAX_BYTES + 1];
    char reason[256];
    size_t outlen = 0;
    static const char *const bad[][2] = {
        {"\"cache_read_tokens\":-1", "field cache_read_tokens"},
        {"\"reasoning_tokens\":1.5", "field reasoning_tokens"},
        {"\"price_unknown\":1", "field price_unknown"},
        {"\"cache_creation_tokens\":\"7\"", "field cache_creation_tokens"},
    };

    (void)state;
    base_event(&ev);
    round_trip(&ev, &dec, out, &outlen);
    assert_null(strstr(out, "cache_read_tokens"));
    assert_null(strstr(out, "price_unknown"));
    assert_int_equal(dec.cache_read_tokens, 0);
    assert_int_equal(dec.price_unknown, 0);
    ev.cache_read_tokens = 4000;
    ev.cache_creation_tokens = 1000;
    ev.reasoning_tokens = 30;
    ev.price_unknown = 1;
    round_trip(&ev, &dec, out, &outlen);
    assert_non_null(strstr(out, ",\"cache_read_tokens\":4000,\"cache_creation_tokens\":1000,"
                                "\"reasoning_tokens\":30,\"price_unknown\":true}"));
    assert_events_equal(&ev, &dec);
    ev.cache_read_tokens = -5; /* normalised like the other counts */
    round_trip(&ev, &dec, out, &outlen);
    assert_int_equal(dec.cache_read_tokens, 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[TG_EVENT_MAX_BYTES + 64];
        int n;

        base_event(&ev);
        assert_int_equal(proto_event_encode(&ev, out, sizeof(out), &outlen), 0);
        n = snprintf(text, sizeof(text), "%.*s,%s}", (int)outlen - 1, out, bad[i][0]);
        assert_true(n > 0 && (size_t)n < sizeof(text));
        assert_int_equal(proto_event_decode(text, (size_t)n, &dec, reason, sizeof(reason)),
                         TG_EPROTO);
        if (strstr(reason, bad[i][1]) == NULL)
            fail_msg("%s: reason \"%s\"", bad[i][0], reason);
    }
}

static void test_decode_edges(void **state)
{
    struct proto_event ev;
    char reason[8];
    char out[TG_EVENT_MAX_BYTES + 1];
    size_t outlen = 0;
    char *exact;

    (void)state;
    /* a small reason buffer is cut, not overrun; NULL reason is fine */
    assert_int_equal(proto_event_decode("[]", 2, &ev, reason, sizeof(reason)), TG_EPROTO);
    assert_string_equal(reason, "event: ");
    assert_int_equal(proto_event_decode("[]", 2, &ev, NULL, 0), TG_EPROTO);
    assert_int_equal(proto_event_decode(NULL, 0, &ev, NULL, 0), TG_EINVAL);
    /* exactly TG_EVENT_MAX_BYTES is not too large; one more is */
    base_event(&ev);
    assert_int_equal(proto_event_encode(&ev, out, sizeof(out), &outlen), 0);
    exact = malloc(TG_EVENT_MAX_BYTES + 1);
    assert_non_null(exact);
    memset(exact, ' ', TG_EVENT_MAX_BYTES + 1);
    memcpy(exact, out, outlen);
    assert_int_equal(proto_event_decode(exact, TG_EVENT_MAX_BYTES, &ev, NULL, 0), 0);
    assert_int_equal(proto_event_decode(exact, TG_EVENT_MAX_BYTES + 1, &ev, NULL, 0), TG_ETOOBIG);
    free(exact);
    /* the decoder never reads past len (the buffer has no NUL: ASan would see it) */
    exact = malloc(outlen);
    assert_non_null(exact);
    memcpy(exact, out, outlen);
    assert_int_equal(proto_event_decode(exact, outlen, &ev, NULL, 0), 0);
    for (size_t cut = 0; cut < outlen; cut++)
        assert_int_equal(proto_event_decode(exact, cut, &ev, NULL, 0), TG_EPROTO);
    free(exact);
}

/* ---- mutation loop --------------------------------------------------------------------- */

static const char *const dictionary[] = {
    "\"",
    "\\",
    "\\u0000",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "-",
    "0",
    "1e5",
    "9223372036854775808",
    "-9223372036854775809",
    "null",
    "true",
    "\xff",
    "\xc3",
    "\"v\":2",
    "\"trail\":[{},{},{},{},{}]",
    "\"tags\":[1]",
    "\"status\":200",
    "\"call_id\":\"x\"",
    "\x01",
    "1.5",
};

static size_t mutate(unsigned char *buf, size_t len, size_t cap)
{
    int ops = 1 + (int)(rng() % 4);

    for (int k = 0; k < ops; k++) {
        size_t pos = len > 0 ? (size_t)(rng() % len) : 0;

        switch (rng() % 6) {
        case 0: /* flip a byte */
            if (len > 0)
                buf[pos] = (unsigned char)rng();
            break;
        case 1: /* delete a run */
            if (len > 0) {
                size_t n = 1 + (size_t)(rng() % 8);
                if (n > len - pos)
                    n = len - pos;
                memmove(buf + pos, buf + pos + n, len - pos - n);
                len -= n;
            }
            break;
        case 2: { /* insert a dictionary token */
            const char *t = dictionary[rng() % (sizeof(dictionary) / sizeof(dictionary[0]))];
            size_t n = strlen(t);

            if (len + n <= cap) {
                memmove(buf + pos + n, buf + pos, len - pos);
                memcpy(buf + pos, t, n);
                len += n;
            }
            break;
        }
        case 3: /* truncate */
            len = pos;
            break;
        case 4: /* duplicate a run */
            if (len > 0) {
                size_t n = 1 + (size_t)(rng() % 32);
                if (n > len - pos)
                    n = len - pos;
                if (len + n <= cap) {
                    memmove(buf + pos + n, buf + pos, len - pos);
                    len += n;
                }
            }
            break;
        default: /* replace a digit or letter with another */
            if (len > 0)
                buf[pos] = (unsigned char)("0123456789-.eE\"{}[]ntf"[rng() % 22]);
            break;
        }
    }
    return len;
}

static void test_mutations_never_crash(void **state)
{
    static const char *const seeds[] = {"full",          "unicode", "max_caps", "minimal",
                                        "unknown_field", "stream",  "cooldown"};
    char *seed_data[sizeof(seeds) / sizeof(seeds[0])];
    size_t seed_len[sizeof(seeds) / sizeof(seeds[0])];
    const size_t cap = 2 * TG_EVENT_MAX_BYTES;
    unsigned char *buf = malloc(cap);
    unsigned char *exact;
    int accepted = 0;

    (void)state;
    assert_non_null(buf);
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        char path[4300];

        snprintf(path, sizeof(path), "%s/valid/%s.json", golden_dir(), seeds[i]);
        seed_data[i] = read_file(path, &seed_len[i]);
        assert_non_null(seed_data[i]);
    }
    for (int n = 0; n < MUTATIONS; n++) {
        size_t s = (size_t)(rng() % (sizeof(seeds) / sizeof(seeds[0])));
        size_t len = seed_len[s] < cap ? seed_len[s] : cap;
        struct proto_event ev;
        char reason[256];
        int rc;

        memcpy(buf, seed_data[s], len);
        len = mutate(buf, len, cap);
        /* exact-size copy so that any over-read is caught by ASan */
        exact = malloc(len > 0 ? len : 1);
        assert_non_null(exact);
        memcpy(exact, buf, len);
        reason[0] = 'X';
        rc = proto_event_decode((const char *)exact, len, &ev, reason, sizeof(reason));
        if (rc == 0) {
            struct proto_event dec;
            char out[TG_EVENT_MAX_BYTES + 1];
            size_t outlen = 0;
            json_error_t jerr;
            json_t *root;

            accepted++;
            /* Whatever the decoder accepts is JSON to an independent parser too, except for
             * what RFC 8259 allows and jansson does not: big integers or reals and \u0000 in
             * keys of unknown fields, which the decoder skips. */
            root = json_loadb((const char *)exact, len, JSON_ALLOW_NUL, &jerr);
            if (root == NULL && strstr(jerr.text, "too big") == NULL &&
                strstr(jerr.text, "real number overflow") == NULL &&
                strstr(jerr.text, "NUL byte in object key") == NULL)
                fail_msg("accepted but jansson says %s:\n%.*s", jerr.text, (int)len, exact);
            json_decref(root);
            round_trip(&ev, &dec, out, &outlen);
            assert_events_equal(&ev, &dec);
        } else {
            assert_true(rc == TG_EPROTO || rc == TG_ETOOBIG);
            assert_true(reason[0] != 'X' && reason[0] != '\0');
        }
        free(exact);
    }
    /* the loop exercised both paths */
    assert_true(accepted > 100);
    assert_true(accepted < MUTATIONS);
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        free(seed_data[i]);
    free(buf);
}

/* Records of several events: split by newline, a final newline ends the last event, other
 * empty lines are events of length 0, more than cap events refuse the record whole. */
static void test_record_split(void **state)
{
    struct proto_span sp[PROTO_RECORD_EVENTS_MAX];
    static char big[PROTO_RECORD_EVENTS_MAX * 2 + 2];
    int n = -1;
    (void)state;

    assert_int_equal(proto_record_split("{\"a\":1}", 7, sp, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_true(sp[0].off == 0 && sp[0].len == 7);
    assert_int_equal(proto_record_split("ab\ncd\n", 6, sp, 4, &n), 0);
    assert_int_equal(n, 2);
    assert_true(sp[0].off == 0 && sp[0].len == 2 && sp[1].off == 3 && sp[1].len == 2);
    assert_int_equal(proto_record_split("ab\n\ncd", 6, sp, 4, &n), 0);
    assert_int_equal(n, 3);
    assert_true(sp[1].off == 3 && sp[1].len == 0 && sp[2].off == 4 && sp[2].len == 2);
    assert_int_equal(proto_record_split("", 0, sp, 4, &n), 0);
    assert_true(n == 1 && sp[0].len == 0);
    assert_int_equal(proto_record_split(NULL, 0, sp, 4, &n), 0);
    assert_true(n == 1 && sp[0].len == 0);
    assert_int_equal(proto_record_split("\n", 1, sp, 4, &n), 0);
    assert_true(n == 1 && sp[0].len == 0);
    assert_int_equal(proto_record_split("a\r\nb", 4, sp, 4, &n), 0);
    assert_true(n == 2 && sp[0].len == 2); /* the CR stays with its event (which refuses it) */
    assert_int_equal(proto_record_split("a\nb\nc", 5, sp, 2, &n), TG_ETOOBIG);
    assert_int_equal(n, 0);
    assert_int_equal(proto_record_split("a\nb\n", 4, sp, 2, &n), 0);
    assert_int_equal(n, 2);
    for (int i = 0; i < PROTO_RECORD_EVENTS_MAX; i++) {
        big[2 * i] = 'x';
        big[2 * i + 1] = '\n';
    }
    assert_int_equal(proto_record_split(big, 2 * PROTO_RECORD_EVENTS_MAX, sp,
                                        PROTO_RECORD_EVENTS_MAX, &n), 0);
    assert_int_equal(n, PROTO_RECORD_EVENTS_MAX);
    big[2 * PROTO_RECORD_EVENTS_MAX] = 'x';
    assert_int_equal(proto_record_split(big, 2 * PROTO_RECORD_EVENTS_MAX + 1, sp,
                                        PROTO_RECORD_EVENTS_MAX, &n), TG_ETOOBIG);
    assert_int_equal(proto_record_split(NULL, 3, sp, 4, &n), TG_EINVAL);
    assert_int_equal(proto_record_split("a", 1, NULL, 4, &n), TG_EINVAL);
    assert_int_equal(proto_record_split("a", 1, sp, 0, &n), TG_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_valid),
        cmocka_unit_test(test_golden_invalid),
        cmocka_unit_test(test_acceptance_1mb_strings_1000_attempts),
        cmocka_unit_test(test_adversarial_fill_stays_in_bound),
        cmocka_unit_test(test_random_events_round_trip),
        cmocka_unit_test(test_encode_fast_paths_match_reference),
        cmocka_unit_test(test_direct_pass_matches_cleaned),
        cmocka_unit_test(test_lower_hex_every_byte_every_position),
        cmocka_unit_test(test_call_id_every_byte_every_position),
        cmocka_unit_test(test_unshortenable_part_worst_case_fits),
        cmocka_unit_test(test_shorten_order_trail_messages_oldest_first),
        cmocka_unit_test(test_str_set_cuts_at_character),
        cmocka_unit_test(test_add_attempt_ring_keeps_newest),
        cmocka_unit_test(test_encode_normalises_and_refuses),
        cmocka_unit_test(test_optional_counts),
        cmocka_unit_test(test_decode_edges),
        cmocka_unit_test(test_mutations_never_crash),
        cmocka_unit_test(test_record_split),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
