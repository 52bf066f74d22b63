/* prices: what a model costs per token, from a price map in LiteLLM's
 * model_prices_and_context_window.json format.
 *
 * A map is one JSON object: model name -> object. Of each entry these fields are read (LiteLLM's
 * names; every other field is ignored, so a LiteLLM user's own file loads as it is):
 *   input_cost_per_token, output_cost_per_token, cache_read_input_token_cost,
 *   cache_creation_input_token_cost, output_cost_per_reasoning_token   USD per token, >= 0
 *   max_input_tokens, max_output_tokens                               whole numbers, >= 0
 *   litellm_provider, mode                                            strings
 * An entry named "sample_spec" (LiteLLM's documentation entry) and top-level values that are
 * not objects are skipped. Prices are kept as integer femto-USD (tg_units.h).
 *
 * The built-in map (router-svc/data/model_prices.json, compiled in) holds the chat, responses
 * and embedding models of the providers Tollgate speaks; tollgate.price_map loads a file that
 * extends and overrides it.
 *
 * Lookup of a deployment's model (rt_prices_lookup): "provider/model", then "model", each
 * first as written and then with a date suffix removed ("-2024-08-06", "-20241022",
 * "@20241022"); at each step the user's map before the built-in one.
 *
 * Threads: a map is immutable once parsed; any thread may read it. */
#ifndef RT_PRICES_H
#define RT_PRICES_H

#include <stddef.h>
#include <stdint.h>

#define RT_PRICES_MAX_ENTRIES 200000u        /* entries in one map */
#define RT_PRICES_KEY_MAX 255u               /* bytes of one model name */
#define RT_PRICES_FILE_MAX_BYTES (16u << 20) /* a price map file */
#define RT_PRICES_PROVIDER_CAP 48            /* litellm_provider, bytes incl. NUL */
#define RT_PRICES_MODE_CAP 24                /* mode, bytes incl. NUL */
#define RT_PRICE_NONE (-1)                   /* a price the entry does not give */

/* Prices of one model in femto-USD per token, RT_PRICE_NONE when not given. */
struct rt_model_price {
    int64_t input;             /* input_cost_per_token */
    int64_t output;            /* output_cost_per_token */
    int64_t cache_read;        /* cache_read_input_token_cost */
    int64_t cache_creation;    /* cache_creation_input_token_cost */
    int64_t reasoning;         /* output_cost_per_reasoning_token */
    int64_t max_input_tokens;  /* 0 when unknown */
    int64_t max_output_tokens; /* 0 when unknown */
};

struct rt_price_entry {
    const char *key; /* the model name as the map writes it */
    struct rt_model_price price;
    char provider[RT_PRICES_PROVIDER_CAP]; /* litellm_provider, "" when absent */
    char mode[RT_PRICES_MODE_CAP];         /* "chat", "embedding", ... or "" */
};

struct rt_prices;

/* rt_model_price_none: every price RT_PRICE_NONE, token limits 0. */
void rt_model_price_none(struct rt_model_price *p);

/* rt_prices_parse: a map from text[0..len) (name: its file name in messages). Returns 0 with a
 * new map in *out, or TG_EPROTO (not JSON, not an object, a field of the wrong type or out of
 * range), TG_ERANGE (more than RT_PRICES_MAX_ENTRIES entries, a key longer than
 * RT_PRICES_KEY_MAX, nesting or size past the JSON bounds) or TG_ENOMEM, with the reason in err
 * ("NAME: \"gpt-4o\".input_cost_per_token: expected a non-negative number"). Any thread. */
int rt_prices_parse(const char *name, const char *text, size_t len, struct rt_prices **out,
                    char *err, size_t errlen);

/* rt_prices_load_file: rt_prices_parse of the file at path (at most RT_PRICES_FILE_MAX_BYTES). */
int rt_prices_load_file(const char *path, struct rt_prices **out, char *err, size_t errlen);

/* rt_prices_builtin: the built-in map, parsed on first use (thread-safe), never freed. NULL only
 * if it could not be parsed (out of memory: a unit test proves the text itself parses). */
const struct rt_prices *rt_prices_builtin(void);

/* rt_prices_builtin_date: the day the built-in map's prices were taken, "YYYY-MM-DD". */
const char *rt_prices_builtin_date(void);

void rt_prices_destroy(struct rt_prices **p);

size_t rt_prices_count(const struct rt_prices *p);

/* rt_prices_at: entry i (0 <= i < count) in key order (strcmp), or NULL past the end. */
const struct rt_price_entry *rt_prices_at(const struct rt_prices *p, size_t i);

/* rt_prices_find: the entry named key exactly, or NULL. */
const struct rt_price_entry *rt_prices_find(const struct rt_prices *p, const char *key);

/* rt_prices_lookup: the entry for provider/model (provider may be "" for none) in user (may be
 * NULL) then builtin (may be NULL), in the order the header describes. Returns the entry (its
 * key is the name that matched) or NULL. */
const struct rt_price_entry *rt_prices_lookup(const struct rt_prices *user,
                                              const struct rt_prices *builtin, const char *provider,
                                              const char *model);

#endif
