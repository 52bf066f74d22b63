/* tg_metrics: Prometheus text exposition (format 0.0.4) into a fixed-capacity tg_buf, and a
 * lock-free fixed-bucket histogram.
 *
 * Modules keep their own atomic counters and write them at scrape time; there is no global
 * registry that could grow. Label values are escaped (backslash, quote, newline). */
#ifndef TG_METRICS_H
#define TG_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tg_buf.h"
#include "tg_limits.h"

#define TG_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct tg_label {
    const char *name;  /* borrowed */
    const char *value; /* borrowed; escaped when written */
};

/* Histogram with at most TG_HIST_MAX_BUCKETS upper bounds (ascending), plus +Inf. */
struct tg_histogram {
    size_t nbounds;                             /* number of finite bounds */
    double bounds[TG_HIST_MAX_BUCKETS];         /* upper bounds, ascending, in the metric unit */
    _Atomic uint64_t counts[TG_HIST_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
    _Atomic uint64_t count;                     /* observations */
    _Atomic uint64_t sum_micro;                 /* sum of observations x 1e6 */
};

/* tg_histogram_init: copy n bounds (n <= TG_HIST_MAX_BUCKETS, ascending). Returns 0 or
 * TG_EINVAL. Caller storage; no fini needed. */
int tg_histogram_init(struct tg_histogram *h, const double *bounds, size_t n);

/* tg_histogram_observe: record one value. Lock-free; any thread. */
void tg_histogram_observe(struct tg_histogram *h, double v);

/* Default latency bounds in seconds (0.5 ms ... 60 s). */
extern const double tg_latency_bounds_s[];
extern const size_t tg_latency_bounds_n;

/* tg_prom_header: "# HELP name help\n# TYPE name type\n". type: counter|gauge|histogram. */
void tg_prom_header(struct tg_buf *b, const char *name, const char *type, const char *help);

/* tg_prom_sample: one sample line "name{labels} value". */
void tg_prom_sample(struct tg_buf *b, const char *name, const struct tg_label *labels,
                    size_t nlabels, double value);
void tg_prom_sample_u64(struct tg_buf *b, const char *name, const struct tg_label *labels,
                        size_t nlabels, uint64_t value);

/* tg_prom_histogram: _bucket (cumulative, le labels), _sum and _count lines. No header. */
void tg_prom_histogram(struct tg_buf *b, const char *name, const struct tg_label *labels,
                       size_t nlabels, const struct tg_histogram *h);

/* Convenience: header + one unlabelled sample. */
void tg_prom_counter(struct tg_buf *b, const char *name, const char *help, uint64_t value);
void tg_prom_gauge(struct tg_buf *b, const char *name, const char *help, double value);

#endif
