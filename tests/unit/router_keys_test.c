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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_static_keys_and_record),
        cmocka_unit_test(test_apply_batches_and_snapshots),
        cmocka_unit_test(test_block_marks),
        cmocka_unit_test(test_readers_during_swaps),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
