/* tg_log: level-gated, fixed-buffer, one-line-per-event logging to stderr.
 *
 * The level check happens before any argument is evaluated or formatted. Lines are built in a
 * TG_LOG_LINE_MAX stack buffer and cut with a "..." marker, never grown. Format:
 *   ts=2026-11-30T07:04:11.123Z level=info svc=router-svc <message as key=value pairs>
 * Never log a payload, a header value, a key or a metadata object: log lengths and at most a
 * short prefix escaped with tg_log_escape(). */
#ifndef TG_LOG_H
#define TG_LOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tg_limits.h"

enum tg_log_level { TG_LOG_DEBUG = 0, TG_LOG_INFO = 1, TG_LOG_WARN = 2, TG_LOG_ERROR = 3, TG_LOG_OFF = 4 };

/* Current threshold; read by the macros before formatting. Set with tg_log_set_level(). */
extern _Atomic int tg_log_level;

/* Per-call-site rate-limit state used by TG_LOG_RL; zero-initialised static storage. */
struct tg_log_rl {
    _Atomic uint64_t next_ms;    /* monotonic ms before which lines are suppressed */
    _Atomic uint64_t suppressed; /* lines suppressed since the last emitted one */
};

/* Counters since start (for /metrics and for the chaos suite's log-bytes-per-request). */
struct tg_log_stats {
    uint64_t lines;      /* lines written */
    uint64_t bytes;      /* bytes written, newline included */
    uint64_t truncated;  /* lines cut at TG_LOG_LINE_MAX */
    uint64_t suppressed; /* lines dropped by rate limiting */
};

/* tg_log_init: set the service name shown in svc= (borrowed: must outlive logging) and the level
 * from the environment variable TOLLGATE_LOG_LEVEL (debug|info|warn|error|off), else LiteLLM's
 * LITELLM_LOG, when set (an unknown value is reported on stderr and the default kept).
 * Call once from main before threads start. */
void tg_log_init(const char *service);

/* tg_log_set_level: change the threshold. Any thread. */
void tg_log_set_level(int level);

/* tg_log_parse_level: "debug"... -> level, or -1 when unknown. */
int tg_log_parse_level(const char *name);

/* tg_log_emit: format and write one line. Use the macros, which gate on the level first.
 * Any thread; a single write(2) per line so lines from threads do not interleave. */
void tg_log_emit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* tg_log_rl_pass: 1 when a rate-limited call site may emit now (then the suppressed count is
 * reported in the line as suppressed=N), 0 to drop (counted). */
int tg_log_rl_pass(struct tg_log_rl *rl, uint64_t *suppressed_out);

/* tg_log_emit_rl: like tg_log_emit, appending " suppressed=N" when N > 0. */
void tg_log_emit_rl(int level, uint64_t suppressed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tg_log_get_stats: snapshot of the counters. Any thread. */
void tg_log_get_stats(struct tg_log_stats *out);

/* tg_log_escape: write at most dstcap-1 bytes of an escaped, printable prefix of src into dst
 * (quotes, backslashes and non-printable bytes escaped; cut with "..." when longer).
 * Returns dst. For logging a short prefix of untrusted input. */
char *tg_log_escape(char *dst, size_t dstcap, const char *src, size_t srclen);

/* tg_log_json_plain: src (NUL-terminated) as the inside of a JSON string, into dst (cut at
 * dstcap-1 bytes): printable ASCII kept, a double quote and a backslash swapped for a single
 * quote and a slash, every other byte dropped. Returns dst. For a short reason (a library's
 * error text) in a JSON answer. */
char *tg_log_json_plain(char *dst, size_t dstcap, const char *src);

#define TG_LOG(lvl, ...)                                                                           \
    do {                                                                                           \
        if ((lvl) < atomic_load_explicit(&tg_log_level, memory_order_relaxed))                     \
            break;                                                                                 \
        tg_log_emit((lvl), __VA_ARGS__);                                                           \
    } while (0)

/* Rate-limited variant: at most one line per TG_LOG_RATE_INTERVAL_MS from this call site. */
#define TG_LOG_RL(lvl, ...)                                                                        \
    do {                                                                                           \
        static struct tg_log_rl tg_log_rl_site_;                                                   \
        uint64_t tg_log_supp_;                                                                     \
        if ((lvl) < atomic_load_explicit(&tg_log_level, memory_order_relaxed))                     \
            break;                                                                                 \
        if (!tg_log_rl_pass(&tg_log_rl_site_, &tg_log_supp_))                                      \
            break;                                                                                 \
        tg_log_emit_rl((lvl), tg_log_supp_, __VA_ARGS__);                                          \
    } while (0)

#define TG_DEBUG(...) TG_LOG(TG_LOG_DEBUG, __VA_ARGS__)
#define TG_INFO(...) TG_LOG(TG_LOG_INFO, __VA_ARGS__)
#define TG_WARN(...) TG_LOG(TG_LOG_WARN, __VA_ARGS__)
#define TG_ERROR(...) TG_LOG(TG_LOG_ERROR, __VA_ARGS__)
#define TG_WARN_RL(...) TG_LOG_RL(TG_LOG_WARN, __VA_ARGS__)
#define TG_ERROR_RL(...) TG_LOG_RL(TG_LOG_ERROR, __VA_ARGS__)

#endif
