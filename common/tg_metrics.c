#include "tg_metrics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tg_err.h"

const double tg_latency_bounds_s[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1,    0.25,  0.5,    1,     2.5,  5,     10,
                                      30,     60};
const size_t tg_latency_bounds_n = sizeof(tg_latency_bounds_s) / sizeof(tg_latency_bounds_s[0]);

int tg_histogram_init(struct tg_histogram *h, const double *bounds, size_t n)
{
    if (n > TG_HIST_MAX_BUCKETS)
        return TG_EINVAL;
    for (size_t i = 1; i < n; i++) {
        if (!(bounds[i] > bounds[i - 1]))
            return TG_EINVAL;
    }
    memset(h, 0, sizeof(*h));
    h->nbounds = n;
    memcpy(h->bounds, bounds, n * sizeof(bounds[0]));
    return 0;
}

void tg_histogram_observe(struct tg_histogram *h, double v)
{
    size_t i;

    for (i = 0; i < h->nbounds; i++) {
        if (v <= h->bounds[i])
            break;
    }
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    if (v > 0)
        atomic_fetch_add_explicit(&h->sum_micro, (uint64_t)llround(v * 1e6), memory_order_relaxed);
}

static void put_escaped(struct tg_buf *b, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            tg_buf_append(b, "\\\\", 2);
        else if (*s == '"')
            tg_buf_append(b, "\\\"", 2);
        else if (*s == '\n')
            tg_buf_append(b, "\\n", 2);
        else
            tg_buf_append(b, s, 1);
    }
}

static void put_labels(struct tg_buf *b, const struct tg_label *labels, size_t n, const char *le)
{
    if (n == 0 && le == NULL)
        return;
    tg_buf_append(b, "{", 1);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            tg_buf_append(b, ",", 1);
        tg_buf_puts(b, labels[i].name);
        tg_buf_append(b, "=\"", 2);
        put_escaped(b, labels[i].value != NULL ? labels[i].value : "");
        tg_buf_append(b, "\"", 1);
    }
    if (le != NULL) {
        if (n > 0)
            tg_buf_append(b, ",", 1);
        tg_buf_printf(b, "le=\"%s\"", le);
    }
    tg_buf_append(b, "}", 1);
}

void tg_prom_header(struct tg_buf *b, const char *name, const char *type, const char *help)
{
    tg_buf_printf(b, "# HELP %s ", name);
    for (const char *p = help; *p != '\0'; p++) {
        if (*p == '\\')
            tg_buf_append(b, "\\\\", 2);
        else if (*p == '\n')
            tg_buf_append(b, "\\n", 2);
        else
            tg_buf_append(b, p, 1);
    }
    tg_buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

static void put_double(struct tg_buf *b, double v)
{
    if (isnan(v))
        tg_buf_puts(b, "NaN");
    else if (isinf(v))
        tg_buf_puts(b, v > 0 ? "+Inf" : "-Inf");
    else if (v == (double)(long long)v && fabs(v) < 1e15)
        tg_buf_printf(b, "%lld", (long long)v);
    else
        tg_buf_printf(b, "%.9g", v);
}

void tg_prom_sample(struct tg_buf *b, const char *name, const struct tg_label *labels,
                    size_t nlabels, double value)
{
    tg_buf_puts(b, name);
    put_labels(b, labels, nlabels, NULL);
    tg_buf_append(b, " ", 1);
    put_double(b, value);
    tg_buf_append(b, "\n", 1);
}

void tg_prom_sample_u64(struct tg_buf *b, const char *name, const struct tg_label *labels,
                        size_t nlabels, uint64_t value)
{
    tg_buf_puts(b, name);
    put_labels(b, labels, nlabels, NULL);
    tg_buf_printf(b, " %llu\n", (unsigned long long)value);
}

void tg_prom_histogram(struct tg_buf *b, const char *name, const struct tg_label *labels,
                       size_t nlabels, const struct tg_histogram *h)
{
    char le[32];
    uint64_t cum = 0;

    for (size_t i = 0; i <= h->nbounds; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < h->nbounds)
            snprintf(le, sizeof(le), "%.9g", h->bounds[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        tg_buf_printf(b, "%s_bucket", name);
        put_labels(b, labels, nlabels, le);
        tg_buf_printf(b, " %llu\n", (unsigned long long)cum);
    }
    tg_buf_printf(b, "%s_sum", name);
    put_labels(b, labels, nlabels, NULL);
    tg_buf_append(b, " ", 1);
    put_double(b, (double)atomic_load(&h->sum_micro) / 1e6);
    tg_buf_append(b, "\n", 1);
    tg_buf_printf(b, "%s_count", name);
    put_labels(b, labels, nlabels, NULL);
    /* _count equals the +Inf bucket so that the exposition is self-consistent. */
    tg_buf_printf(b, " %llu\n", (unsigned long long)cum);
}

void tg_prom_counter(struct tg_buf *b, const char *name, const char *help, uint64_t value)
{
    tg_prom_header(b, name, "counter", help);
    tg_prom_sample_u64(b, name, NULL, 0, value);
}

void tg_prom_gauge(struct tg_buf *b, const char *name, const char *help, double value)
{
    tg_prom_header(b, name, "gauge", help);
    tg_prom_sample(b, name, NULL, 0, value);
}
