/* tg_kafka_topics unit tests: the --create-topics command line and both services' topic list.
 * The check and the creation against a cluster are in tests/integration/kafka_topics.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tg_kafka_topics.h"

static int take_all(struct tg_topics_args *a, int argc, char **argv)
{
    tg_topics_args_init(a);
    for (int i = 1; i < argc; i++) {
        int rc = tg_topics_args_take(a, argc, argv, &i);

        if (rc <= 0)
            return rc == 0 ? i : -1; /* the first argument not taken, or a bad one */
    }
    return 0;
}

static void test_args(void **state)
{
    struct tg_topics_args a;
    char *ok[] = {"x", "--create-topics", "--partitions", "24", "--replication-factor", "2"};
    char *other[] = {"x", "--partitions", "6", "--config", "f"};
    char *zero[] = {"x", "--partitions", "0"};
    char *big[] = {"x", "--replication-factor", "33"};
    char *missing[] = {"x", "--partitions"};
    char *text[] = {"x", "--partitions", "12x"};
    (void)state;

    assert_int_equal(take_all(&a, 6, ok), 0);
    assert_int_equal(a.create, 1);
    assert_int_equal(a.partitions, 24);
    assert_int_equal(a.replication, 2);
    assert_int_equal(take_all(&a, 5, other), 3); /* --config is the caller's */
    assert_int_equal(a.create, 0);
    assert_int_equal(a.partitions, 6);
    assert_int_equal(a.replication, TG_TOPICS_REPLICATION);
    assert_int_equal(take_all(&a, 3, zero), -1);
    assert_int_equal(take_all(&a, 3, big), -1);
    assert_int_equal(take_all(&a, 2, missing), -1);
    assert_int_equal(take_all(&a, 3, text), -1);
    tg_topics_args_init(&a);
    assert_int_equal(a.partitions, TG_TOPICS_EVENTS_PARTITIONS);
}

static void test_tollgate_topics(void **state)
{
    struct tg_topic_want w[2];
    (void)state;

    assert_int_equal(tg_kafka_topics_tollgate("ev", "ctl", 24, 2, w), 2);
    assert_string_equal(w[0].name, "ev");
    assert_int_equal(w[0].compact, 0);
    assert_int_equal(w[0].partitions, 24);
    assert_int_equal(w[0].replication, 2);
    assert_string_equal(w[1].name, "ctl");
    assert_int_equal(w[1].compact, 1);
    assert_int_equal(w[1].partitions, TG_TOPICS_CONTROL_PARTITIONS);
    assert_int_equal(w[1].replication, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_tollgate_topics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
