/* keys: immutable snapshots, atomic batches, block marks, capacity, readers during swaps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "config.h"
#include "control_vectors.h"
#include "keys.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"

static struct rt_key_spec *spec_for(const char *token, const char *alias)
{
    struct rt_key_spec *s = calloc(1, sizeof(*s));

    assert_non_null(s);
    tg_sha256_hex(token, strlen(token), s->key_hash);
    snprintf(s->key_alias, sizeof(s->key_alias), "%s", alias);
    s->max_budget_nusd = RT_LIMIT_NONE;
    s->rpm_limit = RT_LIMIT_NONE;
    s->tpm_limit = RT_LIMIT_NONE;
    s->max_parallel_requests = RT_LIMIT_NONE;
    s->num_retries = -1;
    return s;
}

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_OFF);
    return 0;
}

static void test_static_keys_and_record(void **state)
{
    struct rt_key_spec *s = spec_for("sk-one-000000001", "one");
    struct rt_keys *keys;
    struct rt_keys_table *t;
    const struct rt_key *k;
    char err[128];

    (void)state;
    snprintf(s->team_id, sizeof(s->team_id), "team");
    s->n_models = 2;
    snprintf(s->models[0], RT_NAME_CAP, "gpt-main");
    snprintf(s->models[1], RT_NAME_CAP, "alias-main");
    s->n_tags = 1;
    snprintf(s->tags[0], RT_TAG_CAP, "prod");
    s->n_model_limits = 1;
    snprintf(s->model_limits[0].group, RT_NAME_CAP, "gpt-main");
    s->model_limits[0].rpm = 5;
    s->model_limits[0].tpm = RT_LIMIT_NONE;
    s->has_fallbacks = 1;
    s->n_fallbacks = 1;
    snprintf(s->fallbacks[0].group, RT_NAME_CAP, "gpt-main");
    s->fallbacks[0].n_targets = 2;
    snprintf(s->fallbacks[0].targets[0], RT_NAME_CAP, "fb1");
    snprintf(s->fallbacks[0].targets[1], RT_NAME_CAP, "fb2");
    s->n_aliases = 1;
    snprintf(s->aliases[0].alias, RT_NAME_CAP, "m");
    snprintf(s->aliases[0].group, RT_NAME_CAP, "gpt-main");
    s->num_retries = 3;
    s->rpm_limit = 10;
    keys = rt_keys_create(s, 1, 4, err, sizeof(err));
    assert_non_null(keys);
    memset(s, 0xAB, sizeof(*s)); /* the table holds its own copy */
    t = rt_keys_acquire(keys);
    assert_int_equal(rt_keys_count(t), 1);
    k = rt_keys_lookup(t, "sk-one-000000001", 16);
    assert_non_null(k);
    assert_string_equal(k->key_alias, "one");
    assert_string_equal(k->team_id, "team");
    assert_string_equal(k->user_id, "");
    assert_int_equal(k->n_models, 2);
    assert_string_equal(k->models[1], "alias-main");
    assert_int_equal(k->n_tags, 1);
    assert_string_equal(k->tags[0], "prod");
    assert_int_equal(k->n_group_limits, 1);
    assert_int_equal(k->group_limits[0].rpm, 5);
    assert_int_equal(k->has_fallbacks, 1);
    assert_string_equal(k->fallbacks[0].targets[1], "fb2");
    assert_string_equal(k->aliases[0].alias, "m");
    assert_int_equal(k->num_retries, 3);
    assert_int_equal(k->rpm_limit, 10);
    assert_int_equal(k->blocked, 0);
    assert_true(rt_key_allows(k, "gpt-main"));
    assert_false(rt_key_allows(k, "fb1"));
    assert_true(rt_key_allows(NULL, "fb1"));
    assert_null(rt_keys_lookup(t, "sk-one-000000002", 16));
    assert_null(rt_keys_lookup(t, NULL, 0));
    assert_null(rt_keys_lookup_hash(t, "not-a-hash"));
    assert_ptr_equal(rt_keys_lookup_hash(t, k->hash), k);
    {
        /* the key's own hash with one byte changed, at every place, to a byte next to a hex
         * digit's range (or uppercase, or high), or cut short, or one byte longer: none is a
         * hash, so none is looked up */
        static const char bad[] = {'/', ':', '`', 'g', 'A', 'F', ' ', '\x80', '\xb0', '\xe1', '\x7f'};
        char h[TG_SHA256_HEX_LEN + 2];

        for (int i = 0; i < TG_SHA256_HEX_LEN; i++) {
            for (size_t b = 0; b < sizeof(bad); b++) {
                memcpy(h, k->hash, TG_SHA256_HEX_LEN + 1);
                h[i] = bad[b];
                assert_null(rt_keys_lookup_hash(t, h));
            }
            memcpy(h, k->hash, TG_SHA256_HEX_LEN + 1);
            h[i] = '\0';
            assert_null(rt_keys_lookup_hash(t, h));
        }
        memcpy(h, k->hash, TG_SHA256_HEX_LEN);
        h[TG_SHA256_HEX_LEN] = '0';
        h[TG_SHA256_HEX_LEN + 1] = '\0';
        assert_null(rt_keys_lookup_hash(t, h));
        assert_null(rt_keys_lookup_hash(t, ""));
    }
    {
        /* every digit's byte, the ends of both ranges included, is one: a key stored under
         * such a hash is taken and found by it */
        struct rt_key_spec *d = spec_for("sk-unused", "digits");
        struct rt_keys *dk;
        struct rt_keys_table *dt;

        for (int i = 0; i < TG_SHA256_HEX_LEN; i++)
            d->key_hash[i] = "0123456789abcdef"[(i * 7) % 16];
        d->key_hash[TG_SHA256_HEX_LEN] = '\0';
        dk = rt_keys_create(d, 1, 1, err, sizeof(err));
        assert_non_null(dk);
        dt = rt_keys_acquire(dk);
        assert_non_null(rt_keys_lookup_hash(dt, d->key_hash));
        assert_string_equal(rt_keys_lookup_hash(dt, d->key_hash)->key_alias, "digits");
        rt_keys_release(&dt);
        rt_keys_destroy(&dk);
        free(d);
    }
    rt_keys_release(&t);
    assert_null(t);
    rt_keys_destroy(&keys);
    assert_null(keys);
    free(s);
}

static void test_apply_batches_and_snapshots(void **state)
{
    struct rt_key_spec *a = spec_for("sk-key-aaaaaaaa", "a");
    struct rt_key_spec *b = spec_for("sk-key-bbbbbbbb", "b");
    struct rt_key_spec *a2 = spec_for("sk-key-aaaaaaaa", "a-updated");
    struct rt_keys *keys;
    struct rt_keys_table *old, *now;
    struct rt_key_change ch[3];
    struct rt_keys_stats st;
    char err[128];

    (void)state;
    keys = rt_keys_create(a, 1, 2, err, sizeof(err));
    assert_non_null(keys);
    old = rt_keys_acquire(keys);
    memset(ch, 0, sizeof(ch));
    ch[0].op = RT_KEY_PUT;
    ch[0].spec = b;
    ch[1].op = RT_KEY_PUT;
    ch[1].spec = a2;
    assert_int_equal(rt_keys_apply(keys, ch, 2), 0);
    now = rt_keys_acquire(keys);
    /* The old snapshot is unchanged while held. */
    assert_int_equal(rt_keys_count(old), 1);
    assert_string_equal(rt_keys_lookup(old, "sk-key-aaaaaaaa", 15)->key_alias, "a");
    assert_null(rt_keys_lookup(old, "sk-key-bbbbbbbb", 15));
    assert_int_equal(rt_keys_count(now), 2);
    assert_string_equal(rt_keys_lookup(now, "sk-key-aaaaaaaa", 15)->key_alias, "a-updated");
    rt_keys_release(&old);
    /* Full: a batch that would exceed the capacity is refused whole. */
    {
        struct rt_key_spec *c = spec_for("sk-key-cccccccc", "c");

        memset(ch, 0, sizeof(ch));
        ch[0].op = RT_KEY_DELETE;
        memcpy(ch[0].hash, rt_keys_lookup(now, "sk-key-bbbbbbbb", 15)->hash, 65);
        ch[1].op = RT_KEY_PUT;
        ch[1].spec = c;
        ch[2].op = RT_KEY_PUT;
        ch[2].spec = b;
        assert_int_equal(rt_keys_apply(keys, ch, 3), TG_EFULL);
        rt_keys_get_stats(keys, &st);
        assert_int_equal(st.full_rejections, 1);
        assert_int_equal(st.count, 2);
        assert_int_equal(st.capacity, 2);
        /* Without the last PUT it fits: b replaced by c. */
        assert_int_equal(rt_keys_apply(keys, ch, 2), 0);
        rt_keys_release(&now);
        now = rt_keys_acquire(keys);
        assert_null(rt_keys_lookup(now, "sk-key-bbbbbbbb", 15));
        assert_non_null(rt_keys_lookup(now, "sk-key-cccccccc", 15));
        free(c);
    }
    /* Malformed changes. */
    memset(ch, 0, sizeof(ch));
    ch[0].op = RT_KEY_PUT;
    assert_int_equal(rt_keys_apply(keys, ch, 1), TG_EINVAL);
    ch[0].op = RT_KEY_DELETE;
    snprintf(ch[0].hash, sizeof(ch[0].hash), "xyz");
    assert_int_equal(rt_keys_apply(keys, ch, 1), TG_EINVAL);
    rt_keys_get_stats(keys, &st);
    assert_int_equal(st.generation, 3);
    rt_keys_release(&now);
    rt_keys_destroy(&keys);
    free(a);
    free(b);
    free(a2);
}

static void test_block_marks(void **state)
{
    struct rt_key_spec *a = spec_for("sk-key-aaaaaaaa", "a");
    struct rt_key_spec *late = spec_for("sk-key-late0000", "late");
    struct rt_keys *keys;
    struct rt_keys_table *t;
    struct rt_key_change ch;
    char err[128];

    (void)state;
    keys = rt_keys_create(a, 1, 8, err, sizeof(err));
    memset(&ch, 0, sizeof(ch));
    ch.op = RT_KEY_BLOCK;
    memcpy(ch.hash, a->key_hash, 65);
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_int_equal(rt_keys_lookup(t, "sk-key-aaaaaaaa", 15)->blocked, 1);
    assert_string_equal(rt_keys_lookup(t, "sk-key-aaaaaaaa", 15)->key_alias, "a");
    rt_keys_release(&t);
    /* A key update keeps the block. */
    ch.op = RT_KEY_PUT;
    ch.spec = a;
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_int_equal(rt_keys_lookup(t, "sk-key-aaaaaaaa", 15)->blocked, 1);
    rt_keys_release(&t);
    ch.op = RT_KEY_UNBLOCK;
    ch.spec = NULL;
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_int_equal(rt_keys_lookup(t, "sk-key-aaaaaaaa", 15)->blocked, 0);
    rt_keys_release(&t);
    /* A block that arrives before its key is kept and applies when the key comes. */
    ch.op = RT_KEY_BLOCK;
    memcpy(ch.hash, late->key_hash, 65);
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_null(rt_keys_lookup(t, "sk-key-late0000", 15));
    assert_int_equal(rt_keys_is_blocked_hash(t, late->key_hash), 1);
    assert_int_equal(rt_keys_count(t), 1);
    rt_keys_release(&t);
    ch.op = RT_KEY_PUT;
    ch.spec = late;
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_int_equal(rt_keys_lookup(t, "sk-key-late0000", 15)->blocked, 1);
    rt_keys_release(&t);
    /* Delete removes record and mark. */
    ch.op = RT_KEY_DELETE;
    memcpy(ch.hash, late->key_hash, 65);
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_int_equal(rt_keys_is_blocked_hash(t, late->key_hash), 0);
    rt_keys_release(&t);
    rt_keys_destroy(&keys);
    free(a);
    free(late);
}

struct reader_arg {
    struct rt_keys *keys;
    int lookups_ok;
    int stop_after;
};

static void *reader(void *p)
{
    struct reader_arg *a = p;

    for (int i = 0; i < a->stop_after; i++) {
        struct rt_keys_table *t = rt_keys_acquire(a->keys);
        const struct rt_key *k = rt_keys_lookup(t, "sk-key-static00", 15);

        if (k != NULL && strcmp(k->key_alias, "static") == 0)
            a->lookups_ok++;
        rt_keys_release(&t);
    }
    return NULL;
}

/* Readers keep finding the static key while a writer publishes 500 snapshots. */
static void test_readers_during_swaps(void **state)
{
    struct rt_key_spec *st = spec_for("sk-key-static00", "static");
    struct rt_key_spec *dyn = spec_for("x", "dyn");
    struct rt_keys *keys;
    pthread_t th[2];
    struct reader_arg ra[2];
    char err[128];

    (void)state;
    keys = rt_keys_create(st, 1, 1000, err, sizeof(err));
    for (int i = 0; i < 2; i++) {
        ra[i].keys = keys;
        ra[i].lookups_ok = 0;
        ra[i].stop_after = 20000;
        pthread_create(&th[i], NULL, reader, &ra[i]);
    }
    for (int i = 0; i < 500; i++) {
        struct rt_key_change ch;
        char tok[32];

        snprintf(tok, sizeof(tok), "sk-dyn-%06d", i);
        tg_sha256_hex(tok, strlen(tok), dyn->key_hash);
        memset(&ch, 0, sizeof(ch));
        ch.op = RT_KEY_PUT;
        ch.spec = dyn;
        assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(ra[i].lookups_ok, 20000);
    }
    {
        struct rt_keys_table *t = rt_keys_acquire(keys);

        assert_int_equal(rt_keys_count(t), 501);
        assert_non_null(rt_keys_lookup(t, "sk-dyn-000499", 13));
        rt_keys_release(&t);
    }
    rt_keys_destroy(&keys);
    free(st);
    free(dyn);
}

static const char *json_cfg_yaml = "model_list:\n"
                                   "  - {model_name: gpt-main, litellm_params: {model: m}}\n"
                                   "  - {model_name: gpt-fallback, litellm_params: {model: f}}\n"
                                   "router_settings: {model_group_alias: {alias-main: gpt-main}}\n";

static struct rt_config *json_cfg(void)
{
    static struct rt_config_diag diag;
    struct rt_config *cfg =
        rt_config_load_buffer("t.yaml", json_cfg_yaml, strlen(json_cfg_yaml), &diag);

    assert_non_null(cfg);
    return cfg;
}

static void expect_json_error(struct rt_config *cfg, const char *body, const char *message)
{
    struct rt_key_spec *s = calloc(1, sizeof(*s));
    char err[256];

    assert_non_null(s);
    rt_key_spec_init(s);
    err[0] = '\0';
    assert_int_equal(
        rt_key_spec_from_json(s, RT_KEY_JSON_API, body, strlen(body), cfg, err, sizeof(err)),
        TG_EINVAL);
    if (strcmp(err, message) != 0)
        fail_msg("got \"%s\", expected \"%s\"", err, message);
    free(s);
}

static void test_json_api_body(void **state)
{
    struct rt_config *cfg = json_cfg();
    struct rt_key_spec *s = calloc(1, sizeof(*s));
    char err[256];
    const char *body =
        "{\"key_alias\":\"svc\",\"models\":[\"gpt-main\",\"alias-main\"],\"team_id\":\"t\","
        "\"user_id\":null,\"max_budget\":12.5,\"budget_duration\":\"30d\",\"rpm_limit\":10,"
        "\"tpm_limit\":null,\"max_parallel_requests\":2,\"model_rpm_limit\":{\"gpt-main\":1},"
        "\"model_tpm_limit\":{\"gpt-fallback\":500},\"metadata\":{\"disable_fallbacks\":true,"
        "\"tags\":[\"a\"],\"owner\":{\"x\":1}},\"router_settings\":{\"fallbacks\":[],"
        "\"model_group_alias\":{\"m\":\"gpt-main\"},\"num_retries\":1},\"duration\":\"1h\","
        "\"key\":\"sk-custom-key\"}";

    (void)state;
    rt_key_spec_init(s);
    assert_int_equal(
        rt_key_spec_from_json(s, RT_KEY_JSON_API, body, strlen(body), cfg, err, sizeof(err)), 0);
    assert_string_equal(s->key_alias, "svc");
    assert_int_equal(s->n_models, 2);
    assert_string_equal(s->models[1], "alias-main");
    assert_int_equal(s->max_budget_nusd, 12500000000LL);
    assert_int_equal(s->budget_duration_s, 2592000);
    assert_int_equal(s->rpm_limit, 10);
    assert_int_equal(s->tpm_limit, RT_LIMIT_NONE);
    assert_int_equal(s->max_parallel_requests, 2);
    assert_int_equal(s->n_model_limits, 2);
    assert_int_equal(s->model_limits[0].rpm, 1);
    assert_int_equal(s->model_limits[1].tpm, 500);
    assert_int_equal(s->disable_fallbacks, 1);
    assert_int_equal(s->n_tags, 1);
    assert_int_equal(s->has_fallbacks, 1);
    assert_int_equal(s->n_fallbacks, 0);
    assert_int_equal(s->n_aliases, 1);
    assert_int_equal(s->num_retries, 1);
    assert_string_equal(s->key_hash, ""); /* "key" is the caller's to hash */
    /* An update merges: only the fields present change; null resets. */
    const char *upd = "{\"rpm_limit\":5,\"router_settings\":{\"fallbacks\":null}}";
    assert_int_equal(
        rt_key_spec_from_json(s, RT_KEY_JSON_API, upd, strlen(upd), cfg, err, sizeof(err)), 0);
    assert_int_equal(s->rpm_limit, 5);
    assert_string_equal(s->key_alias, "svc");
    assert_int_equal(s->has_fallbacks, 0);
    assert_int_equal(s->n_aliases, 1);
    free(s);
    rt_config_destroy(&cfg);
}

static void test_json_errors_name_the_field(void **state)
{
    struct rt_config *cfg = json_cfg();

    (void)state;
    expect_json_error(cfg, "{\"models\":[\"gpt-main\",\"zz\"]}",
                      "models[1]: unknown model group or alias \"zz\"");
    expect_json_error(cfg, "{\"rpm_limit\":-1}",
                      "rpm_limit: expected a non-negative integer or null");
    expect_json_error(cfg, "{\"rpm_limit\":\"10\"}",
                      "rpm_limit: expected a non-negative integer or null");
    expect_json_error(cfg, "{\"colour\":\"red\"}", "colour: unknown field");
    expect_json_error(cfg, "{\"router_settings\":{\"fallbacks\":[{\"gpt-main\":[\"nope\"]}]}}",
                      "router_settings.fallbacks[0].gpt-main[0]: unknown model group or alias "
                      "\"nope\"");
    expect_json_error(cfg, "{\"router_settings\":{\"cache\":true}}",
                      "router_settings.cache: unknown field");
    expect_json_error(cfg, "{\"model_rpm_limit\":{\"zz\":1}}",
                      "model_rpm_limit.zz: unknown model group or alias \"zz\"");
    expect_json_error(cfg, "{\"metadata\":{\"tags\":[1]}}", "metadata.tags[0]: expected a string");
    expect_json_error(cfg, "{\"max_budget\":\"lots\"}",
                      "max_budget: expected a non-negative number (USD) or null");
    expect_json_error(cfg, "{\"budget_duration\":\"forever\"}",
                      "budget_duration: expected a duration like 30s, 10m, 1h, 7d or 1mo");
    expect_json_error(cfg, "[1,2]", "body: expected a JSON object");
    expect_json_error(cfg, "{\"a\":", "body: invalid JSON at line 1 column 5");
    expect_json_error(cfg, "{\"rpm_limit\":1,\"rpm_limit\":2}",
                      "body: invalid JSON at line 1 column 26");
    {
        char body[400];
        char name[200];

        memset(name, 'a', sizeof(name) - 1);
        name[sizeof(name) - 1] = '\0';
        snprintf(body, sizeof(body), "{\"key_alias\":\"%s\"}", name);
        expect_json_error(cfg, body, "key_alias: too long (199 bytes, max 64)");
    }
    rt_config_destroy(&cfg);
}

static void test_json_stored_round_trip(void **state)
{
    struct rt_config *cfg = json_cfg();
    struct rt_key_spec *a = calloc(1, sizeof(*a));
    struct rt_key_spec *b = calloc(1, sizeof(*b));
    static char out[RT_KEY_JSON_MAX];
    size_t len = 0;
    char err[256];
    const char *body = "{\"key_alias\":\"svc\",\"models\":[\"gpt-main\"],\"max_budget\":0.25,"
                       "\"model_rpm_limit\":{\"gpt-main\":1},\"model_tpm_limit\":{\"gpt-main\":9},"
                       "\"metadata\":{\"tags\":[\"a\",\"b\"]},"
                       "\"router_settings\":{\"fallbacks\":[{\"gpt-main\":[\"gpt-fallback\"]}],"
                       "\"model_group_alias\":{\"m\":\"gpt-main\"}}}";

    (void)state;
    rt_key_spec_init(a);
    rt_key_spec_init(b);
    assert_int_equal(
        rt_key_spec_from_json(a, RT_KEY_JSON_API, body, strlen(body), cfg, err, sizeof(err)), 0);
    tg_sha256_hex("sk-round-trip-key", 17, a->key_hash);
    a->blocked = 1;
    a->expires_epoch_ms = 1790000000000LL;
    assert_int_equal(rt_key_spec_to_json(a, out, sizeof(out), &len), 0);
    assert_int_equal(strlen(out), len);
    assert_null(strstr(out, "sk-round-trip-key"));
    assert_non_null(strstr(out, a->key_hash));
    assert_int_equal(rt_key_spec_from_json(b, RT_KEY_JSON_STORED, out, len, cfg, err, sizeof(err)),
                     0);
    assert_memory_equal(a, b, sizeof(*a));
    /* The stored form is refused by the API parser (no key_hash injection through the API:
     * it is skipped) and vice versa max_budget_nusd is not an API field. */
    expect_json_error(cfg, "{\"max_budget_nusd\":1}", "max_budget_nusd: unknown field");
    assert_int_equal(rt_key_spec_to_json(a, out, 16, &len), TG_ETOOBIG);
    /* A record gives back its spec. */
    {
        struct rt_keys *keys = rt_keys_create(a, 1, 4, err, sizeof(err));
        struct rt_keys_table *t = rt_keys_acquire(keys);

        rt_key_get_spec(rt_keys_lookup_hash(t, a->key_hash), b);
        assert_memory_equal(a, b, sizeof(*a));
        rt_keys_release(&t);
        rt_keys_destroy(&keys);
    }
    free(a);
    free(b);
    rt_config_destroy(&cfg);
}

/* The stored form listed model limits in the order the spec held them, which follows the order
 * model_rpm_limit and model_tpm_limit came in: a record with model_tpm_limit first, decoded and
 * stored again, gave other bytes each time (found by control_record_fuzz's fixpoint check).
 * Limits are stored by group name now. */
static void test_json_stored_model_limits_order_stable(void **state)
{
    struct rt_key_spec *a = calloc(1, sizeof(*a));
    struct rt_key_spec *b = calloc(1, sizeof(*b));
    static char once[RT_KEY_JSON_MAX], twice[RT_KEY_JSON_MAX];
    char body[512], err[256];
    size_t n1 = 0, n2 = 0;

    (void)state;
    assert_true(a != NULL && b != NULL);
    rt_key_spec_init(a);
    rt_key_spec_init(b);
    snprintf(body, sizeof(body),
             "{\"key_hash\":\"%064d\",\"model_tpm_limit\":{\"z\":1,\"b\":2},"
             "\"model_rpm_limit\":{\"b\":3,\"a\":4}}",
             0);
    assert_int_equal(
        rt_key_spec_from_json(a, RT_KEY_JSON_STORED, body, strlen(body), NULL, err, sizeof(err)),
        0);
    assert_int_equal(rt_key_spec_to_json(a, once, sizeof(once), &n1), 0);
    assert_non_null(strstr(once, "\"model_rpm_limit\":{\"a\":4,\"b\":3},"
                                 "\"model_tpm_limit\":{\"b\":2,\"z\":1}"));
    assert_int_equal(rt_key_spec_from_json(b, RT_KEY_JSON_STORED, once, n1, NULL, err, sizeof(err)),
                     0);
    assert_int_equal(rt_key_spec_to_json(b, twice, sizeof(twice), &n2), 0);
    assert_int_equal(n1, n2);
    assert_memory_equal(once, twice, n1);
    free(a);
    free(b);
}

/* Fill a field of cap bytes with the character JSON escapes the longest (\u0001, 6 bytes). */
static void fill_worst(char *s, size_t cap, char first)
{
    memset(s, 1, cap - 1);
    s[0] = first;
    s[cap - 1] = '\0';
}

/* RT_KEY_JSON_MAX was 64 KiB while a valid spec (every string at its capacity, every list at its
 * maximum, characters JSON escapes as \u00XX) encodes to about 92 KiB: such a key, accepted
 * from the control topic, could not be written to the snapshot (every later snapshot failed) nor
 * shown by /key/info. The bound now holds for the worst case. */
static void test_json_stored_worst_case_fits(void **state)
{
    struct rt_key_spec *a = calloc(1, sizeof(*a));
    struct rt_key_spec *b = calloc(1, sizeof(*b));
    char *out = malloc(RT_KEY_JSON_MAX), *again = malloc(RT_KEY_JSON_MAX);
    char rkey[80], err[256];
    struct rt_key_change ch;
    size_t len = 0, len2 = 0;

    (void)state;
    assert_true(a != NULL && b != NULL && out != NULL && again != NULL);
    rt_key_spec_init(a);
    tg_sha256_hex("sk-worst-case-key", 17, a->key_hash);
    fill_worst(a->key_alias, RT_ID_CAP, 'k');
    fill_worst(a->team_id, RT_ID_CAP, 't');
    fill_worst(a->user_id, RT_ID_CAP, 'u');
    a->n_models = RT_KEY_MODELS_MAX;
    for (int i = 0; i < RT_KEY_MODELS_MAX; i++)
        fill_worst(a->models[i], RT_NAME_CAP, 'm');
    a->n_model_limits = RT_KEY_MODEL_LIMITS_MAX;
    for (int i = 0; i < RT_KEY_MODEL_LIMITS_MAX; i++) {
        fill_worst(a->model_limits[i].group, RT_NAME_CAP, (char)('a' + i)); /* distinct keys */
        a->model_limits[i].rpm = INT64_MAX;
        a->model_limits[i].tpm = INT64_MAX;
    }
    a->n_tags = RT_KEY_TAGS_MAX;
    for (int i = 0; i < RT_KEY_TAGS_MAX; i++)
        fill_worst(a->tags[i], RT_TAG_CAP, 'g');
    a->has_fallbacks = 1;
    a->n_fallbacks = RT_KEY_FALLBACK_RULES_MAX;
    for (int i = 0; i < RT_KEY_FALLBACK_RULES_MAX; i++) {
        fill_worst(a->fallbacks[i].group, RT_NAME_CAP, 'f');
        a->fallbacks[i].n_targets = RT_FALLBACK_TARGETS_MAX;
        for (int t = 0; t < RT_FALLBACK_TARGETS_MAX; t++)
            fill_worst(a->fallbacks[i].targets[t], RT_NAME_CAP, 'x');
    }
    a->n_aliases = RT_KEY_ALIASES_MAX;
    for (int i = 0; i < RT_KEY_ALIASES_MAX; i++) {
        fill_worst(a->aliases[i].alias, RT_NAME_CAP, (char)('a' + i));
        fill_worst(a->aliases[i].group, RT_NAME_CAP, 'g');
    }
    a->max_budget_nusd = INT64_MAX;
    a->budget_duration_s = INT64_MAX;
    a->rpm_limit = INT64_MAX;
    a->tpm_limit = INT64_MAX;
    a->max_parallel_requests = INT64_MAX;
    a->expires_epoch_ms = INT64_MAX;
    a->num_retries = 16;
    a->disable_fallbacks = 1;
    {
        /* stored-only fields at their cap, in characters JSON writes as \u00XX */
        size_t n = (size_t)snprintf(a->extra, sizeof(a->extra), "{\"config\":{\"x\":\"");

        while (n + 6 + 3 <= RT_KEY_EXTRA_MAX_BYTES) {
            memcpy(a->extra + n, "\\u0001", 6);
            n += 6;
        }
        memcpy(a->extra + n, "\"}}", 4);
        assert_true(strlen(a->extra) > RT_KEY_EXTRA_MAX_BYTES - 6);
    }

    assert_int_equal(rt_key_spec_to_json(a, out, RT_KEY_JSON_MAX, &len), 0);
    assert_true(len > 65536 + RT_KEY_EXTRA_MAX_BYTES - 6); /* the case the old bound missed */
    /* it comes back from the control topic as the same record */
    snprintf(rkey, sizeof(rkey), "key:%s", a->key_hash);
    assert_int_equal(
        rt_keys_control_decode(rkey, strlen(rkey), out, len, NULL, &ch, b, err, sizeof(err)), 0);
    assert_int_equal(ch.op, RT_KEY_PUT);
    assert_int_equal(rt_key_spec_to_json(b, again, RT_KEY_JSON_MAX, &len2), 0);
    assert_int_equal(len2, len);
    assert_memory_equal(out, again, len);
    free(again);
    free(out);
    free(b);
    free(a);
}

static void test_control_records(void **state)
{
    struct rt_key_spec *a = spec_for("sk-control-key-1", "ctl");
    struct rt_key_spec *spec = calloc(1, sizeof(*spec));
    struct rt_keys *keys;
    struct rt_keys_table *t;
    struct rt_key_change ch;
    static char value[RT_KEY_JSON_MAX];
    char rkey[80], err[256];
    size_t len;

    (void)state;
    keys = rt_keys_create(NULL, 0, 4, err, sizeof(err));
    assert_non_null(keys);
    assert_int_equal(rt_key_spec_to_json(a, value, sizeof(value), &len), 0);
    snprintf(rkey, sizeof(rkey), "key:%s", a->key_hash);
    assert_int_equal(
        rt_keys_control_decode(rkey, strlen(rkey), value, len, NULL, &ch, spec, err, sizeof(err)),
        0);
    assert_int_equal(ch.op, RT_KEY_PUT);
    assert_ptr_equal(ch.spec, spec);
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    snprintf(rkey, sizeof(rkey), "block:%s", a->key_hash);
    assert_int_equal(rt_keys_control_decode(rkey, strlen(rkey), "{\"reason\":\"budget\"}", 19, NULL,
                                            &ch, spec, err, sizeof(err)),
                     0);
    assert_int_equal(ch.op, RT_KEY_BLOCK);
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_string_equal(rt_keys_lookup(t, "sk-control-key-1", 16)->key_alias, "ctl");
    assert_int_equal(rt_keys_lookup(t, "sk-control-key-1", 16)->blocked, 1);
    rt_keys_release(&t);
    /* Tombstones: unblock, delete. */
    assert_int_equal(
        rt_keys_control_decode(rkey, strlen(rkey), NULL, 0, NULL, &ch, spec, err, sizeof(err)), 0);
    assert_int_equal(ch.op, RT_KEY_UNBLOCK);
    snprintf(rkey, sizeof(rkey), "key:%s", a->key_hash);
    assert_int_equal(
        rt_keys_control_decode(rkey, strlen(rkey), NULL, 0, NULL, &ch, spec, err, sizeof(err)), 0);
    assert_int_equal(ch.op, RT_KEY_DELETE);
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_null(rt_keys_lookup(t, "sk-control-key-1", 16));
    rt_keys_release(&t);
    /* A value whose hash differs from the record key is refused; other records are skipped. */
    snprintf(rkey, sizeof(rkey), "key:%064d", 0);
    assert_int_equal(
        rt_keys_control_decode(rkey, strlen(rkey), value, len, NULL, &ch, spec, err, sizeof(err)),
        TG_EINVAL);
    assert_string_equal(err, "key_hash: does not match the record key");
    assert_int_equal(
        rt_keys_control_decode("team:x", 6, "{}", 2, NULL, &ch, spec, err, sizeof(err)),
        TG_ENOTFOUND);
    snprintf(rkey, sizeof(rkey), "key:%064d", 0);
    rkey[10] = 'Z';
    assert_int_equal(
        rt_keys_control_decode(rkey, strlen(rkey), NULL, 0, NULL, &ch, spec, err, sizeof(err)),
        TG_EINVAL);
    rt_keys_destroy(&keys);
    free(a);
    free(spec);
}

struct walk {
    int present;
    int marks;
    int stop_at;
};

static int walk_fn(const struct rt_key *key, int present, void *arg)
{
    struct walk *w = arg;

    assert_int_equal(strlen(key->hash), TG_SHA256_HEX_LEN);
    if (present)
        w->present++;
    else
        w->marks++;
    if (w->stop_at > 0 && w->present + w->marks == w->stop_at)
        return 7;
    return 0;
}

static void test_foreach(void **state)
{
    struct rt_key_spec *a = spec_for("sk-walk-key-0001", "a");
    struct rt_key_spec *b = spec_for("sk-walk-key-0002", "b");
    struct rt_key_spec specs[2];
    struct rt_keys *keys;
    struct rt_keys_table *t;
    struct rt_key_change ch;
    struct walk w = {0, 0, 0};
    char err[128];

    (void)state;
    specs[0] = *a;
    specs[1] = *b;
    keys = rt_keys_create(specs, 2, 8, err, sizeof(err));
    memset(&ch, 0, sizeof(ch));
    ch.op = RT_KEY_BLOCK;
    tg_sha256_hex("sk-walk-unknown", 15, ch.hash);
    assert_int_equal(rt_keys_apply(keys, &ch, 1), 0);
    t = rt_keys_acquire(keys);
    assert_int_equal(rt_keys_foreach(t, walk_fn, &w), 0);
    assert_int_equal(w.present, 2);
    assert_int_equal(w.marks, 1);
    w.present = w.marks = 0;
    w.stop_at = 2;
    assert_int_equal(rt_keys_foreach(t, walk_fn, &w), 7);
    assert_int_equal(w.present + w.marks, 2);
    rt_keys_release(&t);
    rt_keys_destroy(&keys);
    free(a);
    free(b);
}

/* Defect: a key's models list could not name the key's own alias (router_settings.
 * model_group_alias): "unknown model group or alias", so a key could not be limited to the alias
 * it was given. Names are now checked once the whole body is read; an update that drops the
 * alias while models still lists it is refused. */
static void test_json_models_may_name_own_alias(void **state)
{
    struct rt_config *cfg = json_cfg();
    struct rt_key_spec *s = calloc(1, sizeof(*s));
    char err[256];
    char out[RT_KEY_JSON_MAX];
    size_t outlen = 0;
    static const char *body =
        "{\"models\":[\"mine\",\"alias-main\"],"
        "\"router_settings\":{\"model_group_alias\":{\"mine\":\"gpt-fallback\"}}}";
    static const char *drop = "{\"router_settings\":{\"model_group_alias\":null}}";

    (void)state;
    assert_non_null(s);
    rt_key_spec_init(s);
    err[0] = '\0';
    assert_int_equal(rt_key_spec_from_json(s, RT_KEY_JSON_API, body, strlen(body), cfg, err,
                                           sizeof(err)),
                     0);
    assert_int_equal(s->n_models, 2);
    assert_string_equal(s->models[0], "mine");
    memset(s->key_hash, 'a', TG_SHA256_HEX_LEN);
    s->key_hash[TG_SHA256_HEX_LEN] = '\0';
    /* the stored form (models before router_settings) reads back */
    assert_int_equal(rt_key_spec_to_json(s, out, sizeof(out), &outlen), 0);
    rt_key_spec_init(s);
    if (rt_key_spec_from_json(s, RT_KEY_JSON_STORED, out, outlen, cfg, err, sizeof(err)) != 0)
        fail_msg("stored form: %s", err);
    assert_int_equal(s->n_aliases, 1);
    /* dropping the alias it lists is refused */
    assert_int_equal(rt_key_spec_from_json(s, RT_KEY_JSON_API, drop, strlen(drop), cfg, err,
                                           sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "models[0]: unknown model group or alias \"mine\"");
    expect_json_error(cfg, "{\"models\":[\"mine\"]}",
                      "models[0]: unknown model group or alias \"mine\"");
    free(s);
    rt_config_destroy(&cfg);
}

/* LiteLLM's /key/generate fields Tollgate does not act on (key_extra.h) are accepted by type,
 * kept in the spec as one canonical JSON object (members in name order, whatever order they
 * came in), written last in the stored form, and read back as the same spec and the same bytes;
 * tags and aliases are LiteLLM's names for metadata.tags and router_settings.model_group_alias. */
static void test_json_litellm_stored_fields(void **state)
{
    struct rt_config *cfg = json_cfg();
    struct rt_key_spec *a = calloc(1, sizeof(*a));
    struct rt_key_spec *b = calloc(1, sizeof(*b));
    static char once[RT_KEY_JSON_MAX], twice[RT_KEY_JSON_MAX];
    size_t n1 = 0, n2 = 0;
    char err[256];
    const char *body =
        "{\"tpm_limit_type\":\"dynamic\",\"spend\":0,\"soft_budget\":0.1,"
        "\"guardrails\":[\"pii\"],\"allowed_cache_controls\":[\"no-cache\"],"
        "\"config\":{\"z\":1,\"a\":{\"y\":[true,null],\"b\":\"x\"}},\"permissions\":{},"
        "\"model_max_budget\":{\"gpt-main\":{\"budget_limit\":0.5,\"time_period\":\"30d\"}},"
        "\"enforced_params\":[\"user\"],\"key_type\":\"llm_api\",\"send_invite_email\":false,"
        "\"budget_id\":\"tier-1\",\"organization_id\":\"org-1\",\"project_id\":null,"
        "\"object_permission\":{\"vector_stores\":[]},\"prompts\":[],\"allowed_routes\":[],"
        "\"allowed_passthrough_routes\":[\"/x\"],\"rpm_limit_type\":\"best_effort_throughput\","
        "\"auto_rotate\":true,\"rotation_interval\":\"30d\",\"agent_id\":\"ag\","
        "\"budget_limits\":[{\"budget_duration\":\"1d\",\"max_budget\":1}],"
        "\"budget_fallbacks\":{\"gpt-main\":[\"gpt-fallback\"]},\"mcp_rpm_limit\":{\"s\":1},"
        "\"tag_rpm_limit\":{\"t\":2},\"policies\":[\"p\"],\"access_group_ids\":[\"g\"],"
        "\"disable_global_guardrails\":false,\"throttle_on_budget_exceeded\":true,"
        "\"allowed_vector_store_indexes\":[{\"index_name\":\"i\"}],\"temp_budget_increase\":5,"
        "\"temp_budget_expiry\":\"2030-01-01T00:00:00Z\","
        "\"tags\":[\"prod\"],\"aliases\":{\"my-gpt\":\"gpt-main\"},\"models\":[\"my-gpt\"]}";
    const char *canonical =
        "{\"access_group_ids\":[\"g\"],\"agent_id\":\"ag\",\"allowed_cache_controls\":"
        "[\"no-cache\"],\"allowed_passthrough_routes\":[\"/x\"],\"allowed_routes\":[],"
        "\"allowed_vector_store_indexes\":[{\"index_name\":\"i\"}],\"auto_rotate\":true,"
        "\"budget_fallbacks\":{\"gpt-main\":[\"gpt-fallback\"]},\"budget_id\":\"tier-1\","
        "\"budget_limits\":[{\"budget_duration\":\"1d\",\"max_budget\":1}],"
        "\"config\":{\"a\":{\"b\":\"x\",\"y\":[true,null]},\"z\":1},"
        "\"disable_global_guardrails\":false,\"enforced_params\":[\"user\"],"
        "\"guardrails\":[\"pii\"],\"key_type\":\"llm_api\",\"mcp_rpm_limit\":{\"s\":1},"
        "\"model_max_budget\":{\"gpt-main\":{\"budget_limit\":0.5,\"time_period\":\"30d\"}},"
        "\"object_permission\":{\"vector_stores\":[]},\"organization_id\":\"org-1\","
        "\"permissions\":{},\"policies\":[\"p\"],\"prompts\":[],"
        "\"rotation_interval\":\"30d\",\"rpm_limit_type\":\"best_effort_throughput\","
        "\"send_invite_email\":false,\"soft_budget\":0.1,\"spend\":0,\"tag_rpm_limit\":{\"t\":2},"
        "\"temp_budget_expiry\":\"2030-01-01T00:00:00Z\",\"temp_budget_increase\":5,"
        "\"throttle_on_budget_exceeded\":true,\"tpm_limit_type\":\"dynamic\"}";
    const char *upd = "{\"soft_budget\":null,\"guardrails\":[\"a\",\"b\"],\"spend\":2.5}";
    const char *all_null = "{\"access_group_ids\":null,\"agent_id\":null,"
                           "\"allowed_cache_controls\":null,\"allowed_passthrough_routes\":null,"
                           "\"allowed_routes\":null,\"allowed_vector_store_indexes\":null,"
                           "\"auto_rotate\":null,\"budget_fallbacks\":null,\"budget_id\":null,"
                           "\"budget_limits\":null,\"config\":null,"
                           "\"disable_global_guardrails\":null,\"enforced_params\":null,"
                           "\"guardrails\":null,\"key_type\":null,\"mcp_rpm_limit\":null,"
                           "\"model_max_budget\":null,\"object_permission\":null,"
                           "\"organization_id\":null,\"permissions\":null,\"policies\":null,"
                           "\"prompts\":null,\"rotation_interval\":null,\"rpm_limit_type\":null,"
                           "\"send_invite_email\":null,\"spend\":null,\"tag_rpm_limit\":null,"
                           "\"temp_budget_expiry\":null,\"temp_budget_increase\":null,"
                           "\"throttle_on_budget_exceeded\":null,\"tpm_limit_type\":null}";

    (void)state;
    assert_true(a != NULL && b != NULL);
    rt_key_spec_init(a);
    rt_key_spec_init(b);
    if (rt_key_spec_from_json(a, RT_KEY_JSON_API, body, strlen(body), cfg, err, sizeof(err)) != 0)
        fail_msg("refused: %s", err);
    assert_string_equal(a->extra, canonical);
    assert_int_equal(a->n_tags, 1);
    assert_string_equal(a->tags[0], "prod");
    assert_int_equal(a->n_aliases, 1);
    assert_string_equal(a->aliases[0].alias, "my-gpt");
    assert_string_equal(a->aliases[0].group, "gpt-main");
    /* stored form: extra last, then the same spec and the same bytes back */
    tg_sha256_hex("sk-litellm-fields", 17, a->key_hash);
    assert_int_equal(rt_key_spec_to_json(a, once, sizeof(once), &n1), 0);
    assert_true(n1 > strlen(canonical) + 10);
    assert_memory_equal(once + n1 - strlen(canonical) - 10, ",\"extra\":", 9);
    assert_memory_equal(once + n1 - strlen(canonical) - 1, canonical, strlen(canonical));
    assert_int_equal(once[n1 - 1], '}');
    assert_non_null(strstr(once, "\"metadata\":{\"disable_fallbacks\":false,\"tags\":[\"prod\"]}"));
    assert_non_null(strstr(once, "\"model_group_alias\":{\"my-gpt\":\"gpt-main\"}"));
    assert_int_equal(rt_key_spec_from_json(b, RT_KEY_JSON_STORED, once, n1, cfg, err, sizeof(err)),
                     0);
    assert_memory_equal(a, b, sizeof(*a));
    assert_int_equal(rt_key_spec_to_json(b, twice, sizeof(twice), &n2), 0);
    assert_int_equal(n1, n2);
    assert_memory_equal(once, twice, n1);
    /* an update merges: null removes a field, a value replaces it, the others stay */
    assert_int_equal(
        rt_key_spec_from_json(a, RT_KEY_JSON_API, upd, strlen(upd), cfg, err, sizeof(err)), 0);
    assert_null(strstr(a->extra, "soft_budget"));
    assert_non_null(strstr(a->extra, "\"guardrails\":[\"a\",\"b\"]"));
    assert_non_null(strstr(a->extra, "\"spend\":2.5,"));
    assert_non_null(strstr(a->extra, "\"config\":{\"a\":"));
    /* removing every field leaves none, and the stored form has no extra member */
    assert_int_equal(rt_key_spec_from_json(a, RT_KEY_JSON_API, all_null, strlen(all_null), cfg,
                                           err, sizeof(err)),
                     0);
    assert_string_equal(a->extra, "");
    assert_int_equal(rt_key_spec_to_json(a, once, sizeof(once), &n1), 0);
    assert_null(strstr(once, "\"extra\""));
    free(a);
    free(b);
    rt_config_destroy(&cfg);
}

/* Every stored-only field refuses a value of another type with a message naming it, LiteLLM's
 * enumerations refuse other strings, and a field nobody documents is still refused. A body that
 * gives a list both ways (tags and metadata.tags; aliases and router_settings.model_group_alias)
 * is refused. */
static void test_json_litellm_field_types(void **state)
{
    static const struct {
        const char *body, *message;
    } cases[] = {
        {"{\"soft_budget\":\"10\"}", "soft_budget: expected a number or null"},
        {"{\"spend\":true}", "spend: expected a number or null"},
        {"{\"temp_budget_increase\":[]}", "temp_budget_increase: expected a number or null"},
        {"{\"budget_id\":1}", "budget_id: expected a string or null"},
        {"{\"organization_id\":{}}", "organization_id: expected a string or null"},
        {"{\"agent_id\":false}", "agent_id: expected a string or null"},
        {"{\"project_id\":2}", "project_id: expected a string or null"},
        {"{\"rotation_interval\":30}", "rotation_interval: expected a string or null"},
        {"{\"temp_budget_expiry\":1}", "temp_budget_expiry: expected a string or null"},
        {"{\"auto_rotate\":\"yes\"}", "auto_rotate: expected true, false or null"},
        {"{\"send_invite_email\":1}", "send_invite_email: expected true, false or null"},
        {"{\"disable_global_guardrails\":0}",
         "disable_global_guardrails: expected true, false or null"},
        {"{\"throttle_on_budget_exceeded\":\"\"}",
         "throttle_on_budget_exceeded: expected true, false or null"},
        {"{\"config\":[]}", "config: expected an object or null"},
        {"{\"permissions\":\"all\"}", "permissions: expected an object or null"},
        {"{\"model_max_budget\":1}", "model_max_budget: expected an object or null"},
        {"{\"object_permission\":[]}", "object_permission: expected an object or null"},
        {"{\"allowed_cache_controls\":\"no-cache\"}",
         "allowed_cache_controls: expected a list or null"},
        {"{\"allowed_routes\":{}}", "allowed_routes: expected a list or null"},
        {"{\"allowed_passthrough_routes\":1}",
         "allowed_passthrough_routes: expected a list or null"},
        {"{\"guardrails\":[1]}", "guardrails: expected a list of strings or null"},
        {"{\"enforced_params\":\"user\"}", "enforced_params: expected a list of strings or null"},
        {"{\"prompts\":[null]}", "prompts: expected a list of strings or null"},
        {"{\"policies\":{}}", "policies: expected a list of strings or null"},
        {"{\"access_group_ids\":[[]]}", "access_group_ids: expected a list of strings or null"},
        {"{\"budget_limits\":[1]}", "budget_limits: expected a list of objects or null"},
        {"{\"allowed_vector_store_indexes\":{}}",
         "allowed_vector_store_indexes: expected a list of objects or null"},
        {"{\"mcp_rpm_limit\":{\"s\":1.5}}",
         "mcp_rpm_limit: expected an object of integers or null"},
        {"{\"tag_rpm_limit\":[1]}", "tag_rpm_limit: expected an object of integers or null"},
        {"{\"budget_fallbacks\":{\"a\":\"b\"}}",
         "budget_fallbacks: expected an object of lists of strings or null"},
        {"{\"rpm_limit_type\":\"fast\"}",
         "rpm_limit_type: expected \"guaranteed_throughput\", \"best_effort_throughput\", "
         "\"dynamic\" or null"},
        {"{\"tpm_limit_type\":1}",
         "tpm_limit_type: expected \"guaranteed_throughput\", \"best_effort_throughput\", "
         "\"dynamic\" or null"},
        {"{\"key_type\":\"admin\"}",
         "key_type: expected \"llm_api\", \"management\", \"read_only\", \"default\" or null"},
        {"{\"soft_budgt\":1}", "soft_budgt: unknown field"},
        {"{\"extra\":{}}", "extra: unknown field"},
        {"{\"tags\":\"a\"}", "tags: expected a list of strings"},
        {"{\"aliases\":{\"x\":\"nope\"}}", "aliases.x: unknown model group or alias \"nope\""},
        {"{\"metadata\":{\"tags\":[\"a\"]},\"tags\":[\"b\"]}",
         "tags: also given as metadata.tags: give the list one way"},
        {"{\"tags\":[\"b\"],\"metadata\":{\"tags\":[\"a\"]}}",
         "metadata.tags: also given as tags: give the list one way"},
        {"{\"aliases\":{},\"router_settings\":{\"model_group_alias\":{}}}",
         "router_settings.model_group_alias: also given as aliases: give the list one way"},
    };
    struct rt_config *cfg = json_cfg();

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_json_error(cfg, cases[i].body, cases[i].message);
    rt_config_destroy(&cfg);
}

/* The stored-only fields of a key take at most RT_KEY_EXTRA_MAX_BYTES as JSON: exactly the cap
 * is kept, one byte more is refused naming the field and the cap, and the spec keeps its fields.
 * The stored form's extra member is checked as strictly as an API body. */
static void test_json_litellm_extra_cap(void **state)
{
    struct rt_key_spec *s = calloc(1, sizeof(*s));
    size_t pad = RT_KEY_EXTRA_MAX_BYTES - strlen("{\"config\":{\"x\":\"\"}}");
    size_t cap = pad + 64;
    char *body = malloc(cap), *fill = malloc(pad + 2), err[256];
    char stored[512];

    (void)state;
    assert_true(s != NULL && body != NULL && fill != NULL);
    rt_key_spec_init(s);
    memset(fill, 'x', pad);
    fill[pad] = '\0';
    snprintf(body, cap, "{\"config\":{\"x\":\"%s\"}}", fill);
    if (rt_key_spec_from_json(s, RT_KEY_JSON_API, body, strlen(body), NULL, err, sizeof(err)) != 0)
        fail_msg("refused at the cap: %s", err);
    assert_int_equal(strlen(s->extra), RT_KEY_EXTRA_MAX_BYTES);
    fill[pad] = 'x';
    fill[pad + 1] = '\0';
    snprintf(body, cap, "{\"soft_budget\":1,\"config\":{\"x\":\"%s\"}}", fill);
    err[0] = '\0';
    assert_int_equal(
        rt_key_spec_from_json(s, RT_KEY_JSON_API, body, strlen(body), NULL, err, sizeof(err)),
        TG_EINVAL);
    assert_string_equal(err, "config: the fields stored without being acted on take 16401 bytes "
                             "as JSON, more than the 16384 bytes a key may hold (config is the "
                             "largest)");
    assert_int_equal(strlen(s->extra), RT_KEY_EXTRA_MAX_BYTES);
    assert_null(strstr(s->extra, "soft_budget"));
    /* the stored form */
    rt_key_spec_init(s);
    snprintf(stored, sizeof(stored), "{\"key_hash\":\"%064d\",\"extra\":{\"colour\":1}}", 0);
    assert_int_equal(rt_key_spec_from_json(s, RT_KEY_JSON_STORED, stored, strlen(stored), NULL, err,
                                           sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "extra.colour: unknown field");
    snprintf(stored, sizeof(stored), "{\"key_hash\":\"%064d\",\"extra\":[1]}", 0);
    assert_int_equal(rt_key_spec_from_json(s, RT_KEY_JSON_STORED, stored, strlen(stored), NULL, err,
                                           sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "extra: expected an object or null");
    snprintf(stored, sizeof(stored), "{\"key_hash\":\"%064d\",\"extra\":{\"spend\":\"1\"}}", 0);
    assert_int_equal(rt_key_spec_from_json(s, RT_KEY_JSON_STORED, stored, strlen(stored), NULL, err,
                                           sizeof(err)),
                     TG_EINVAL);
    assert_string_equal(err, "extra.spend: expected a number or null");
    free(fill);
    free(body);
    free(s);
}

/* The control topic golden vectors (tests/golden/control) as router-svc reads them: whose
 * record it is, the operation, and for its own stored form the same fields as proto and
 * spend-svc read, encoded back to the same bytes. Key values in LiteLLM's names (not the stored
 * form) are spend-svc's alone: router-svc validates every field of the stored form. */
static void test_control_golden_vectors(void **state)
{
    static struct rt_key_spec spec;
    static char enc[RT_KEY_JSON_MAX];
    struct rt_key_change ch;
    char err[256];
    size_t n, enc_len, stored = 0;
    struct cv_vector *vs = cv_load(&n);
    (void)state;

    for (size_t i = 0; i < n; i++) {
        const struct cv_vector *v = &vs[i];
        const char *ex = v->expect;
        int rc;

        err[0] = '\0';
        rc = rt_keys_control_decode(v->record_key, strlen(v->record_key), v->value,
                                    v->value_len, NULL, &ch, &spec, err, sizeof(err));
        if (strncmp(v->record_key, "team:", 5) == 0) {
            /* team records are not the keys table's (router_teams_test reads them) */
            assert_int_equal(rc, TG_ENOTFOUND);
        } else if (strcmp(ex, "skip") == 0) {
            assert_int_equal(rc, TG_ENOTFOUND);
        } else if (strcmp(ex, "invalid") == 0) {
            /* block values are not validated by router-svc: any value blocks (fail closed) */
            if (strncmp(v->record_key, "block:", 6) == 0 &&
                strncmp(cv_get(v, "problem"), "record key:", 11) != 0)
                assert_true(rc == 0 && ch.op == RT_KEY_BLOCK);
            else if (rc != TG_EINVAL)
                fail_msg("%s: router-svc accepts it (%d)", v->name, rc);
        } else if (strcmp(ex, "delete") == 0 || strcmp(ex, "unblock") == 0 ||
                   strcmp(ex, "block") == 0) {
            assert_int_equal(rc, 0);
            assert_int_equal(ch.op, strcmp(ex, "delete") == 0    ? RT_KEY_DELETE
                                    : strcmp(ex, "unblock") == 0 ? RT_KEY_UNBLOCK
                                                                 : RT_KEY_BLOCK);
            assert_string_equal(ch.hash, cv_get(v, "key_hash"));
        } else if (strcmp(ex, "put") == 0 && cv_get(v, "stored") != NULL) {
            if (rc != 0)
                fail_msg("%s: refused: %s", v->name, err);
            assert_int_equal(ch.op, RT_KEY_PUT);
            assert_string_equal(spec.key_hash, cv_get(v, "key_hash"));
            assert_string_equal(spec.key_alias, cv_get(v, "key_alias"));
            assert_string_equal(spec.team_id, cv_get(v, "team_id"));
            assert_string_equal(spec.user_id, cv_get(v, "user_id"));
            assert_int_equal(spec.max_budget_nusd < 0 ? -1 : spec.max_budget_nusd,
                             cv_int(v, "max_budget_nusd"));
            assert_int_equal(spec.budget_duration_s, cv_int(v, "budget_duration_s"));
            assert_int_equal(rt_key_spec_to_json(&spec, enc, sizeof(enc), &enc_len), 0);
            if (enc_len != v->value_len || memcmp(enc, v->value, enc_len) != 0)
                fail_msg("%s: encodes as %s", v->name, enc);
            stored++;
        }
    }
    assert_true(stored >= 3);
    cv_free(vs, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_static_keys_and_record),
        cmocka_unit_test(test_control_golden_vectors),
        cmocka_unit_test(test_apply_batches_and_snapshots),
        cmocka_unit_test(test_block_marks),
        cmocka_unit_test(test_readers_during_swaps),
        cmocka_unit_test(test_json_api_body),
        cmocka_unit_test(test_json_errors_name_the_field),
        cmocka_unit_test(test_json_stored_round_trip),
        cmocka_unit_test(test_json_stored_worst_case_fits),
        cmocka_unit_test(test_json_stored_model_limits_order_stable),
        cmocka_unit_test(test_control_records),
        cmocka_unit_test(test_foreach),
        cmocka_unit_test(test_json_models_may_name_own_alias),
        cmocka_unit_test(test_json_litellm_stored_fields),
        cmocka_unit_test(test_json_litellm_field_types),
        cmocka_unit_test(test_json_litellm_extra_cap),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
