/* libFuzzer target for prices (router-svc/src/prices.h): a price map in LiteLLM's
 * model_prices_and_context_window.json format, as tollgate.price_map loads it from a file.
 *
 * Input: the file's bytes.
 *
 * Properties (abort on violation):
 *  - a map is returned exactly when 0 is returned, and an error always says something;
 *  - every entry has a key of 1..RT_PRICES_KEY_MAX bytes, every price is RT_PRICE_NONE or
 *    >= 0, token limits are >= 0, provider and mode are NUL-terminated within their caps and
 *    free of control bytes;
 *  - the entries are in strictly increasing key order (sorted, unique), rt_prices_find finds
 *    each under its own key, and rt_prices_lookup with no provider finds an entry for each key
 *    (itself, unless the key has a date suffix: then possibly its undated twin; never NULL). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prices.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "price_map_fuzz: %s%s%s\n", what, detail != NULL ? ": " : "",
                detail != NULL ? detail : "");
        abort();
    }
}

static int clean_label(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);

    if (n == cap)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    }
    return 1;
}

static int price_ok(int64_t v)
{
    return v == RT_PRICE_NONE || v >= 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rt_prices *p = NULL;
    const struct rt_price_entry *prev = NULL;
    char err[256];
    int rc;

    err[0] = '\0';
    rc = rt_prices_parse("fuzz.json", (const char *)data, size, &p, err, sizeof(err));
    check((rc == 0) == (p != NULL), "a map returned iff 0", err);
    if (rc != 0) {
        check(err[0] != '\0', "an error without a reason", NULL);
        return 0;
    }
    for (size_t i = 0; i < rt_prices_count(p); i++) {
        const struct rt_price_entry *e = rt_prices_at(p, i);
        const struct rt_price_entry *found;
        size_t kl;

        check(e != NULL, "entry missing below the count", NULL);
        kl = strlen(e->key);
        check(kl >= 1 && kl <= RT_PRICES_KEY_MAX, "key length", e->key);
        check(price_ok(e->price.input) && price_ok(e->price.output) &&
                  price_ok(e->price.cache_read) && price_ok(e->price.cache_creation) &&
                  price_ok(e->price.reasoning),
              "negative price", e->key);
        check(e->price.max_input_tokens >= 0 && e->price.max_output_tokens >= 0,
              "negative token limit", e->key);
        check(clean_label(e->provider, sizeof(e->provider)) &&
                  clean_label(e->mode, sizeof(e->mode)),
              "provider or mode not a clean label", e->key);
        check(prev == NULL || strcmp(prev->key, e->key) < 0, "keys not sorted and unique", e->key);
        check(rt_prices_find(p, e->key) == e, "entry not found under its own key", e->key);
        found = rt_prices_lookup(p, NULL, "", e->key);
        check(found != NULL, "lookup of a present key found nothing", e->key);
        prev = e;
    }
    check(rt_prices_at(p, rt_prices_count(p)) == NULL, "an entry past the count", NULL);
    rt_prices_destroy(&p);
    check(p == NULL, "destroy left the pointer", NULL);
    return 0;
}
