#include "tg_yaml.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tg_cfgtext.h"
#include "tg_err.h"
#include "tg_units.h"

static void report(struct tg_yaml *y, int is_error, const yaml_node_t *node, const char *path,
                   const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void report(struct tg_yaml *y, int is_error, const yaml_node_t *node, const char *path,
                   const char *fmt, va_list ap)
{
    char problem[TG_YAML_LINE_MAX];
    char line[TG_YAML_LINE_MAX];
    unsigned long lineno = node != NULL ? (unsigned long)node->start_mark.line + 1 : 0;

    vsnprintf(problem, sizeof(problem), fmt, ap);
    if (path != NULL && path[0] != '\0')
        snprintf(line, sizeof(line), "%.96s:%lu: %.160s: %.220s", y->file, lineno, path, problem);
    else
        snprintf(line, sizeof(line), "%.96s:%lu: %.380s", y->file, lineno, problem);
    if (is_error) {
        if (y->failed)
            return; /* the first error is the one reported */
        y->failed = 1;
    }
    if (y->diag != NULL)
        y->diag(y->diag_ud, is_error, line);
}

int tg_yaml_fail(struct tg_yaml *y, const yaml_node_t *node, const char *path, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    report(y, 1, node, path, fmt, ap);
    va_end(ap);
    return TG_ECONFIG;
}

void tg_yaml_warn(struct tg_yaml *y, const yaml_node_t *node, const char *path, const char *fmt,
                  ...)
{
    va_list ap;

    va_start(ap, fmt);
    report(y, 0, node, path, fmt, ap);
    va_end(ap);
}

yaml_node_t *tg_yaml_root(struct tg_yaml *y)
{
    return y->doc_ok ? yaml_document_get_root_node(&y->doc) : NULL;
}

yaml_node_t *tg_yaml_node(struct tg_yaml *y, int id)
{
    return yaml_document_get_node(&y->doc, id);
}

void tg_yaml_path(char out[TG_YAML_PATH_MAX], const char *base, const char *key)
{
    if (base == NULL || base[0] == '\0')
        snprintf(out, TG_YAML_PATH_MAX, "%s", key);
    else
        snprintf(out, TG_YAML_PATH_MAX, "%s.%s", base, key);
}

void tg_yaml_path_index(char out[TG_YAML_PATH_MAX], const char *base, size_t i)
{
    snprintf(out, TG_YAML_PATH_MAX, "%.230s[%zu]", base, i);
}

int tg_yaml_is_null(const yaml_node_t *n)
{
    const char *v;

    if (n == NULL)
        return 1;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    v = (const char *)n->data.scalar.value;
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

int tg_yaml_expect(struct tg_yaml *y, const yaml_node_t *n, const char *path, yaml_node_type_t t)
{
    if (n != NULL && n->type == t)
        return 0;
    if (t == YAML_MAPPING_NODE)
        return tg_yaml_fail(y, n, path, "expected a mapping");
    if (t == YAML_SEQUENCE_NODE)
        return tg_yaml_fail(y, n, path, "expected a list");
    return tg_yaml_fail(y, n, path, "expected a scalar value");
}

const char *tg_yaml_key(struct tg_yaml *y, const yaml_node_pair_t *pair, const char *path)
{
    yaml_node_t *k = tg_yaml_node(y, pair->key);

    if (k == NULL || k->type != YAML_SCALAR_NODE) {
        tg_yaml_fail(y, k, path, "mapping keys must be scalars");
        return NULL;
    }
    return (const char *)k->data.scalar.value;
}

const char *tg_yaml_pair(struct tg_yaml *y, const yaml_node_pair_t *pair, const char *path,
                         char p[TG_YAML_PATH_MAX], yaml_node_t **v)
{
    const char *k = tg_yaml_key(y, pair, path);

    if (k == NULL)
        return NULL;
    tg_yaml_path(p, path, k);
    if (v != NULL)
        *v = tg_yaml_node(y, pair->value);
    return k;
}

int tg_yaml_map(struct tg_yaml *y, const yaml_node_t *n, const char *path, tg_yaml_key_fn fn,
                void *ctx)
{
    char p[TG_YAML_PATH_MAX];

    if (tg_yaml_is_null(n))
        return 0;
    if (tg_yaml_expect(y, n, path, YAML_MAPPING_NODE) != 0)
        return TG_ECONFIG;
    TG_YAML_FOR_PAIRS(n, pair)
    {
        yaml_node_t *v;
        const char *k = tg_yaml_pair(y, pair, path, p, &v);
        int rc;

        if (k == NULL)
            return TG_ECONFIG;
        rc = fn(ctx, k, tg_yaml_node(y, pair->key), v, p);
        if (rc == TG_YAML_UNKNOWN)
            return tg_yaml_fail(y, tg_yaml_node(y, pair->key), p, "unknown key");
        if (rc != 0)
            return TG_ECONFIG;
    }
    return 0;
}

size_t tg_yaml_seq_len(const yaml_node_t *n)
{
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

int tg_yaml_scalar(struct tg_yaml *y, const yaml_node_t *n, const char *path, const char **out)
{
    const char *v;
    const char *env_name = NULL;
    char why[160];

    if (n == NULL || n->type != YAML_SCALAR_NODE)
        return tg_yaml_fail(y, n, path, "expected a scalar value");
    v = (const char *)n->data.scalar.value;
    if (tg_cfgtext_check(v, n->data.scalar.length, NULL, why, sizeof(why)) != 0)
        return tg_yaml_fail(y, n, path, "%s", why);
    if (strncmp(v, TG_YAML_ENV_PREFIX, strlen(TG_YAML_ENV_PREFIX)) == 0) {
        const char *name = v + strlen(TG_YAML_ENV_PREFIX);
        const char *env;

        if (name[0] == '\0')
            return tg_yaml_fail(y, n, path, "os.environ/ without a variable name");
        env = getenv(name);
        if (env == NULL)
            return tg_yaml_fail(y, n, path, "environment variable %.64s is not set", name);
        v = env;
        env_name = name;
    }
    if (env_name != NULL && tg_cfgtext_check(v, (size_t)-1, env_name, why, sizeof(why)) != 0)
        return tg_yaml_fail(y, n, path, "%s", why);
    *out = v;
    return 0;
}

int tg_yaml_str(struct tg_yaml *y, const yaml_node_t *n, const char *path, char *dst, size_t cap)
{
    const char *v = NULL;
    size_t len;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    len = strlen(v);
    if (len >= cap)
        return tg_yaml_fail(y, n, path, "value too long (%zu bytes, max %zu)", len, cap - 1);
    memcpy(dst, v, len + 1);
    return 0;
}

int tg_yaml_str_nonempty(struct tg_yaml *y, const yaml_node_t *n, const char *path, char *dst,
                         size_t cap)
{
    if (tg_yaml_str(y, n, path, dst, cap) != 0)
        return TG_ECONFIG;
    if (dst[0] == '\0')
        return tg_yaml_fail(y, n, path, "expected a non-empty string");
    return 0;
}

int tg_yaml_u64(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint64_t max,
                uint64_t *out)
{
    const char *v = NULL;
    uint64_t r = 0;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    if (tg_parse_u64(v, &r) != 0)
        return tg_yaml_fail(y, n, path, "expected a non-negative integer");
    if (r > max)
        return tg_yaml_fail(y, n, path, "value %llu out of range (max %llu)", (unsigned long long)r,
                            (unsigned long long)max);
    *out = r;
    return 0;
}

int tg_yaml_u32(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint32_t max,
                uint32_t *out)
{
    uint64_t r = 0;

    if (tg_yaml_u64(y, n, path, max, &r) != 0)
        return TG_ECONFIG;
    *out = (uint32_t)r;
    return 0;
}

int tg_yaml_i32(struct tg_yaml *y, const yaml_node_t *n, const char *path, int32_t *out)
{
    const char *v = NULL;
    char *end = NULL;
    long long r;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    errno = 0;
    r = strtoll(v, &end, 10);
    if (v[0] == '\0' || *end != '\0' || errno != 0 || r < INT32_MIN || r > INT32_MAX)
        return tg_yaml_fail(y, n, path, "expected an integer");
    *out = (int32_t)r;
    return 0;
}

int tg_yaml_u64_range(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint64_t lo,
                      uint64_t hi, uint64_t *out)
{
    uint64_t r = 0;

    if (tg_yaml_u64(y, n, path, UINT64_MAX, &r) != 0)
        return TG_ECONFIG;
    if (r < lo || r > hi)
        return tg_yaml_fail(y, n, path, "must be between %llu and %llu", (unsigned long long)lo,
                            (unsigned long long)hi);
    *out = r;
    return 0;
}

int tg_yaml_u32_range(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint32_t lo,
                      uint32_t hi, uint32_t *out)
{
    uint64_t r = 0;

    if (tg_yaml_u64_range(y, n, path, lo, hi, &r) != 0)
        return TG_ECONFIG;
    *out = (uint32_t)r;
    return 0;
}

int tg_yaml_int_range(struct tg_yaml *y, const yaml_node_t *n, const char *path, int lo, int hi,
                      int *out)
{
    const char *v = NULL;
    const char *digits;
    uint64_t mag = 0;
    int rc;
    int64_t r;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    digits = v[0] == '-' || v[0] == '+' ? v + 1 : v;
    /* one sign at most: tg_parse_u64 would take a second '+' */
    if (digits[0] < '0' || digits[0] > '9')
        return tg_yaml_fail(y, n, path, "expected an integer");
    rc = tg_parse_u64(digits, &mag);
    if (rc == TG_EINVAL)
        return tg_yaml_fail(y, n, path, "expected an integer");
    if (rc != 0 || mag > (uint64_t)INT64_MAX)
        return tg_yaml_fail(y, n, path, "must be between %d and %d", lo, hi);
    r = v[0] == '-' ? -(int64_t)mag : (int64_t)mag;
    if (r < lo || r > hi)
        return tg_yaml_fail(y, n, path, "must be between %d and %d", lo, hi);
    *out = (int)r;
    return 0;
}

int tg_yaml_double_range(struct tg_yaml *y, const yaml_node_t *n, const char *path, double lo,
                         int lo_inclusive, double hi, double *out)
{
    const char *v = NULL;
    char *end = NULL;
    double r;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    errno = 0;
    r = strtod(v, &end);
    if (v[0] == '\0' || end == v || *end != '\0' || errno != 0 || !isfinite(r))
        return tg_yaml_fail(y, n, path, "expected a number");
    if ((lo_inclusive ? r < lo : r <= lo) || r > hi)
        return tg_yaml_fail(y, n, path, "must be %s %g and at most %g",
                            lo_inclusive ? "at least" : "greater than", lo, hi);
    *out = r;
    return 0;
}

int tg_yaml_bool(struct tg_yaml *y, const yaml_node_t *n, const char *path, int *out)
{
    const char *v = NULL;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    if (strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0) {
        *out = 1;
        return 0;
    }
    if (strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 || strcasecmp(v, "off") == 0) {
        *out = 0;
        return 0;
    }
    return tg_yaml_fail(y, n, path, "expected true or false");
}

int tg_yaml_usd_fusd(struct tg_yaml *y, const yaml_node_t *n, const char *path, int64_t *out)
{
    const char *v = NULL;
    int rc;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    rc = tg_parse_usd_fusd(v, out);
    if (rc == TG_ERANGE)
        return tg_yaml_fail(y, n, path, "price too large");
    if (rc != 0)
        return tg_yaml_fail(y, n, path, "expected a non-negative decimal number (USD)");
    return 0;
}

int tg_yaml_seconds_ms(struct tg_yaml *y, const yaml_node_t *n, const char *path, uint32_t *out)
{
    const char *v = NULL;
    unsigned __int128 m;
    int e;
    int64_t ms;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    if (tg_parse_decimal(v, &m, &e) != 0 || tg_scale_round(m, e + 3, &ms) != 0)
        return tg_yaml_fail(y, n, path, "expected a number of seconds");
    if (ms < 1 || ms > 86400000)
        return tg_yaml_fail(y, n, path, "expected between 0.001 and 86400 seconds");
    *out = (uint32_t)ms;
    return 0;
}

int tg_yaml_duration_s(struct tg_yaml *y, const yaml_node_t *n, const char *path, int64_t min_s,
                       int64_t max_s, int64_t *out)
{
    const char *v = NULL;
    int64_t r = 0;

    if (tg_yaml_scalar(y, n, path, &v) != 0)
        return TG_ECONFIG;
    if (tg_parse_duration_s(v, &r) != 0)
        return tg_yaml_fail(y, n, path, "expected a duration like 30s, 10m, 1h, 7d or 1mo");
    if (r < min_s)
        return tg_yaml_fail(y, n, path, "must be at least %lld s", (long long)min_s);
    if (r > max_s)
        return tg_yaml_fail(y, n, path, "must be at most %lld s", (long long)max_s);
    *out = r;
    return 0;
}

static int key_cmp(const void *a, const void *b)
{
    const yaml_node_t *x = *(const yaml_node_t *const *)a;
    const yaml_node_t *z = *(const yaml_node_t *const *)b;

    return strcmp((const char *)x->data.scalar.value, (const char *)z->data.scalar.value);
}

/* Keys sorted per mapping: a mapping of n keys costs n log n. */
static int check_duplicates(struct tg_yaml *y)
{
    for (yaml_node_t *n = y->doc.nodes.start; n < y->doc.nodes.top; n++) {
        size_t np, k = 0;
        const yaml_node_t **keys;

        if (n->type != YAML_MAPPING_NODE)
            continue;
        np = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
        if (np < 2)
            continue;
        keys = malloc(np * sizeof(*keys));
        if (keys == NULL)
            return tg_yaml_fail(y, n, "", "out of memory");
        TG_YAML_FOR_PAIRS(n, pair)
        {
            yaml_node_t *kn = tg_yaml_node(y, pair->key);

            if (kn != NULL && kn->type == YAML_SCALAR_NODE)
                keys[k++] = kn;
        }
        qsort(keys, k, sizeof(*keys), key_cmp);
        for (size_t i = 1; i < k; i++) {
            if (key_cmp(&keys[i - 1], &keys[i]) == 0) {
                const yaml_node_t *second =
                    keys[i]->start_mark.index > keys[i - 1]->start_mark.index ? keys[i]
                                                                              : keys[i - 1];
                char name[96];

                snprintf(name, sizeof(name), "%s", (const char *)second->data.scalar.value);
                free(keys);
                return tg_yaml_fail(y, second, name, "duplicate key (given twice in one mapping)");
            }
        }
        free(keys);
    }
    return 0;
}

int tg_yaml_open(struct tg_yaml *y, const char *file, const char *data, size_t len,
                 tg_yaml_diag_fn diag, void *diag_ud)
{
    yaml_parser_t parser;
    int rc = 0;

    memset(y, 0, sizeof(*y));
    y->file = file != NULL ? file : "config";
    y->diag = diag;
    y->diag_ud = diag_ud;
    if (!yaml_parser_initialize(&parser))
        return tg_yaml_fail(y, NULL, "", "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &y->doc)) {
        char problem[200];

        snprintf(problem, sizeof(problem), "YAML syntax error: %s",
                 parser.problem != NULL ? parser.problem : "unknown");
        {
            yaml_node_t at;

            memset(&at, 0, sizeof(at));
            at.start_mark = parser.problem_mark;
            rc = tg_yaml_fail(y, &at, "", "%s", problem);
        }
        yaml_parser_delete(&parser);
        return rc;
    }
    y->doc_ok = 1;
    yaml_parser_delete(&parser);
    return check_duplicates(y);
}

char *tg_yaml_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;

    if (f == NULL) {
        snprintf(err, errlen, "%s:0: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    buf = malloc(max + 1);
    if (buf == NULL) {
        fclose(f);
        snprintf(err, errlen, "%s:0: out of memory", path);
        return NULL;
    }
    n = fread(buf, 1, max + 1, f);
    if (ferror(f)) {
        snprintf(err, errlen, "%s:0: cannot read: %s", path, strerror(errno));
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    if (n > max) {
        snprintf(err, errlen, "%s:0: file too large (max %zu bytes)", path, max);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

void tg_yaml_borrow(struct tg_yaml *y, const char *file, const yaml_document_t *doc,
                    tg_yaml_diag_fn diag, void *diag_ud)
{
    memset(y, 0, sizeof(*y));
    y->doc = *doc; /* a view: the node arrays stay the owner's, doc_ok 0 keeps them */
    y->file = file;
    y->diag = diag;
    y->diag_ud = diag_ud;
}

void tg_yaml_close(struct tg_yaml *y)
{
    if (y->doc_ok)
        yaml_document_delete(&y->doc);
    y->doc_ok = 0;
}
