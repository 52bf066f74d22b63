#include "prices.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jbound.h"
#include "tg_err.h"
#include "tg_units.h"

/* The built-in map: router-svc/data/model_prices.json, compiled in by CMake (prices_data.c). Its
 * prices are LiteLLM's published map of this day (router-svc/data/README.md says which list
 * each provider's prices come from). */
#define RT_PRICES_BUILTIN_DATE "2026-07-24"

extern const char rt_prices_builtin_json[];
extern const size_t rt_prices_builtin_json_len;

#define PRICES_MAX_DEPTH 32        /* LiteLLM's entries nest 3 levels */
#define PRICES_MAX_VALUES 4000000u /* its whole file holds about 60,000 */
#define PRICES_MAX_TOKENS 1000000000000ll

struct rt_prices {
    struct rt_price_entry *e; /* sorted by key */
    size_t n;
};

void rt_model_price_none(struct rt_model_price *p)
{
    p->input = RT_PRICE_NONE;
    p->output = RT_PRICE_NONE;
    p->cache_read = RT_PRICE_NONE;
    p->cache_creation = RT_PRICE_NONE;
    p->reasoning = RT_PRICE_NONE;
    p->max_input_tokens = 0;
    p->max_output_tokens = 0;
}

/* A USD number (integer or real, >= 0) to femto-USD. 15 significant digits carry every decimal
 * a price list writes exactly; the decimal text is then scaled without binary rounding. */
static int usd_value(const json_t *v, int64_t *out)
{
    char text[40];
    double d;

    if (!json_is_number(v))
        return TG_EPROTO;
    d = json_number_value(v);
    if (!(d >= 0.0))
        return TG_EPROTO;
    snprintf(text, sizeof(text), "%.15g", d);
    if (strchr(text, 'n') != NULL || strchr(text, 'N') != NULL) /* inf, nan */
        return TG_EPROTO;
    return tg_parse_usd_fusd(text, out) == 0 ? 0 : TG_EPROTO;
}

static int tokens_value(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0 || json_integer_value(v) > PRICES_MAX_TOKENS)
            return TG_EPROTO;
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);

        if (!(d >= 0.0) || d > (double)PRICES_MAX_TOKENS || d != (double)(int64_t)d)
            return TG_EPROTO;
        *out = (int64_t)d;
        return 0;
    }
    return TG_EPROTO;
}

static int text_value(const json_t *v, char *dst, size_t cap)
{
    const char *s = json_string_value(v);
    size_t n;

    if (s == NULL)
        return TG_EPROTO;
    n = strlen(s);
    if (n >= cap)
        n = cap - 1; /* a label only: cut */
    memcpy(dst, s, n);
    dst[n] = '\0';
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)dst[i] < 0x20 || dst[i] == 0x7f)
            dst[i] = '?';
    }
    return 0;
}

/* The fields of one entry. Returns 0, or TG_EPROTO with the field's name in *bad. */
static int read_entry(const json_t *obj, struct rt_price_entry *e, const char **bad)
{
    static const struct {
        const char *name;
        size_t off;
    } usd[] = {
        {"input_cost_per_token", offsetof(struct rt_model_price, input)},
        {"output_cost_per_token", offsetof(struct rt_model_price, output)},
        {"cache_read_input_token_cost", offsetof(struct rt_model_price, cache_read)},
        {"cache_creation_input_token_cost", offsetof(struct rt_model_price, cache_creation)},
        {"output_cost_per_reasoning_token", offsetof(struct rt_model_price, reasoning)},
    };
    const json_t *v;

    rt_model_price_none(&e->price);
    for (size_t i = 0; i < sizeof(usd) / sizeof(usd[0]); i++) {
        v = json_object_get(obj, usd[i].name);
        if (v != NULL && !json_is_null(v) &&
            usd_value(v, (int64_t *)((char *)&e->price + usd[i].off)) != 0) {
            *bad = usd[i].name;
            return TG_EPROTO;
        }
    }
    v = json_object_get(obj, "max_input_tokens");
    if (v != NULL && !json_is_null(v) && tokens_value(v, &e->price.max_input_tokens) != 0) {
        *bad = "max_input_tokens";
        return TG_EPROTO;
    }
    v = json_object_get(obj, "max_output_tokens");
    if (v != NULL && !json_is_null(v) && tokens_value(v, &e->price.max_output_tokens) != 0) {
        *bad = "max_output_tokens";
        return TG_EPROTO;
    }
    v = json_object_get(obj, "litellm_provider");
    if (v != NULL && !json_is_null(v) && text_value(v, e->provider, sizeof(e->provider)) != 0) {
        *bad = "litellm_provider";
        return TG_EPROTO;
    }
    v = json_object_get(obj, "mode");
    if (v != NULL && !json_is_null(v) && text_value(v, e->mode, sizeof(e->mode)) != 0) {
        *bad = "mode";
        return TG_EPROTO;
    }
    return 0;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct rt_price_entry *)a)->key, ((const struct rt_price_entry *)b)->key);
}

void rt_prices_destroy(struct rt_prices **p)
{
    if (p == NULL || *p == NULL)
        return;
    for (size_t i = 0; i < (*p)->n; i++)
        free((void *)(*p)->e[i].key);
    free((*p)->e);
    free(*p);
    *p = NULL;
}

/* The model name quoted for a message: cut, control bytes shown as '?'. */
static void quote_key(char *dst, size_t cap, const char *key)
{
    size_t n = 0;

    for (; key[n] != '\0' && n + 1 < cap; n++)
        dst[n] = (unsigned char)key[n] < 0x20 || key[n] == 0x7f || key[n] == '"' ? '?' : key[n];
    dst[n] = '\0';
}

int rt_prices_parse(const char *name, const char *text, size_t len, struct rt_prices **out,
                    char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    struct rt_prices *p = NULL;
    const char *key;
    json_t *val;
    int rc = 0;

    *out = NULL;
    if (name == NULL)
        name = "price map";
    root = rt_json_load_bounded(text, len, PRICES_MAX_DEPTH, PRICES_MAX_VALUES, &jerr);
    if (root == NULL) {
        if (jerr.position < 0) {
            snprintf(err, errlen, "%s: %s", name, jerr.text);
            return TG_ERANGE;
        }
        snprintf(err, errlen, "%s:%d: not JSON: %s", name, jerr.line, jerr.text);
        return TG_EPROTO;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: expected a JSON object (model name -> prices)", name);
        json_decref(root);
        return TG_EPROTO;
    }
    if (json_object_size(root) > RT_PRICES_MAX_ENTRIES) {
        snprintf(err, errlen, "%s: more than %u models", name, RT_PRICES_MAX_ENTRIES);
        json_decref(root);
        return TG_ERANGE;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL || (json_object_size(root) > 0 &&
                      (p->e = calloc(json_object_size(root), sizeof(*p->e))) == NULL)) {
        free(p);
        json_decref(root);
        snprintf(err, errlen, "%s: out of memory", name);
        return TG_ENOMEM;
    }
    json_object_foreach(root, key, val)
    {
        struct rt_price_entry *e = &p->e[p->n];
        const char *bad = NULL;
        char q[64];

        if (!json_is_object(val) || strcmp(key, "sample_spec") == 0)
            continue;
        quote_key(q, sizeof(q), key);
        if (key[0] == '\0' || strlen(key) > RT_PRICES_KEY_MAX) {
            snprintf(err, errlen, "%s: \"%s\": a model name of 1 to %u bytes expected", name, q,
                     RT_PRICES_KEY_MAX);
            rc = TG_ERANGE;
            break;
        }
        if (read_entry(val, e, &bad) != 0) {
            snprintf(err, errlen, "%s: \"%s\".%s: expected %s", name, q, bad,
                     strncmp(bad, "max_", 4) == 0 ? "a non-negative whole number"
                     : strcmp(bad, "litellm_provider") == 0 || strcmp(bad, "mode") == 0
                         ? "a string"
                         : "a non-negative number (USD per token)");
            rc = TG_EPROTO;
            break;
        }
        e->key = strdup(key);
        if (e->key == NULL) {
            snprintf(err, errlen, "%s: out of memory", name);
            rc = TG_ENOMEM;
            break;
        }
        p->n++;
    }
    json_decref(root);
    if (rc != 0) {
        rt_prices_destroy(&p);
        return rc;
    }
    if (p->n > 1)
        qsort(p->e, p->n, sizeof(*p->e), entry_cmp);
    *out = p;
    return 0;
}

int rt_prices_load_file(const char *path, struct rt_prices **out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n;
    int rc;

    *out = NULL;
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return TG_EIO;
    }
    buf = malloc((size_t)RT_PRICES_FILE_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        snprintf(err, errlen, "%s: out of memory", path);
        return TG_ENOMEM;
    }
    n = fread(buf, 1, (size_t)RT_PRICES_FILE_MAX_BYTES + 1, f);
    if (ferror(f)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        fclose(f);
        free(buf);
        return TG_EIO;
    }
    fclose(f);
    if (n > RT_PRICES_FILE_MAX_BYTES) {
        snprintf(err, errlen, "%s: larger than %u bytes", path, RT_PRICES_FILE_MAX_BYTES);
        free(buf);
        return TG_ERANGE;
    }
    rc = rt_prices_parse(path, buf, n, out, err, errlen);
    free(buf);
    return rc;
}

static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;
static struct rt_prices *builtin_map;

static void builtin_parse(void)
{
    char err[256];

    if (rt_prices_parse("built-in price map", rt_prices_builtin_json, rt_prices_builtin_json_len,
                        &builtin_map, err, sizeof(err)) != 0)
        builtin_map = NULL;
}

const struct rt_prices *rt_prices_builtin(void)
{
    pthread_once(&builtin_once, builtin_parse);
    return builtin_map;
}

const char *rt_prices_builtin_date(void)
{
    return RT_PRICES_BUILTIN_DATE;
}

size_t rt_prices_count(const struct rt_prices *p)
{
    return p != NULL ? p->n : 0;
}

const struct rt_price_entry *rt_prices_at(const struct rt_prices *p, size_t i)
{
    return p != NULL && i < p->n ? &p->e[i] : NULL;
}

const struct rt_price_entry *rt_prices_find(const struct rt_prices *p, const char *key)
{
    struct rt_price_entry probe;

    if (p == NULL || p->n == 0 || key == NULL)
        return NULL;
    memset(&probe, 0, sizeof(probe));
    probe.key = key;
    return bsearch(&probe, p->e, p->n, sizeof(*p->e), entry_cmp);
}

static int all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
    }
    return 1;
}

/* The length of name without its date suffix ("-2024-08-06", "-20241022", "@20241022"), or
 * its whole length when it has none. */
static size_t undated_len(const char *name)
{
    size_t n = strlen(name);

    if (n > 11 && name[n - 11] == '-' && all_digits(name + n - 10, 4) && name[n - 6] == '-' &&
        all_digits(name + n - 5, 2) && name[n - 3] == '-' && all_digits(name + n - 2, 2))
        return n - 11;
    if (n > 9 && (name[n - 9] == '-' || name[n - 9] == '@') && all_digits(name + n - 8, 8) &&
        name[n - 8] == '2' && name[n - 7] == '0')
        return n - 9;
    return n;
}

static const struct rt_price_entry *find_either(const struct rt_prices *user,
                                                const struct rt_prices *builtin, const char *key)
{
    const struct rt_price_entry *e = rt_prices_find(user, key);

    return e != NULL ? e : rt_prices_find(builtin, key);
}

const struct rt_price_entry *rt_prices_lookup(const struct rt_prices *user,
                                              const struct rt_prices *builtin, const char *provider,
                                              const char *model)
{
    char key[2 * RT_PRICES_KEY_MAX + 2];
    const struct rt_price_entry *e;
    size_t ml, ul;

    if (model == NULL || model[0] == '\0')
        return NULL;
    ml = strlen(model);
    if (ml > RT_PRICES_KEY_MAX)
        return NULL;
    ul = undated_len(model);
    if (provider != NULL && provider[0] != '\0' && strlen(provider) < RT_PRICES_KEY_MAX) {
        int w = snprintf(key, sizeof(key), "%s/%s", provider, model);

        if (w > 0 && (size_t)w < sizeof(key)) {
            if ((e = find_either(user, builtin, key)) != NULL)
                return e;
            if (ul < ml) {
                key[strlen(provider) + 1 + ul] = '\0';
                if ((e = find_either(user, builtin, key)) != NULL)
                    return e;
            }
        }
    }
    if ((e = find_either(user, builtin, model)) != NULL)
        return e;
    if (ul < ml) {
        memcpy(key, model, ul);
        key[ul] = '\0';
        if ((e = find_either(user, builtin, key)) != NULL)
            return e;
    }
    return NULL;
}
