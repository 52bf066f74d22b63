#include "tg_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "tg_time.h"

_Atomic int tg_log_level = TG_LOG_INFO;

static const char *log_service = "tollgate";
static _Atomic uint64_t stat_lines;
static _Atomic uint64_t stat_bytes;
static _Atomic uint64_t stat_truncated;
static _Atomic uint64_t stat_suppressed;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void tg_log_init(const char *service)
{
    const char *name = "TOLLGATE_LOG_LEVEL";
    const char *env = getenv(name);

    if (service != NULL)
        log_service = service;
    if (env == NULL) {
        name = "LITELLM_LOG"; /* LiteLLM's variable (DEBUG, INFO, ...), so its setups carry over */
        env = getenv(name);
    }
    if (env != NULL && tg_log_parse_level(env) >= 0)
        tg_log_set_level(tg_log_parse_level(env));
    else if (env != NULL)
        fprintf(stderr, "%s: %s=\"%.32s\" is not a log level (debug, info, warn, error, off); "
                        "keeping the default\n",
                log_service, name, env);
}

void tg_log_set_level(int level)
{
    if (level < TG_LOG_DEBUG)
        level = TG_LOG_DEBUG;
    if (level > TG_LOG_OFF)
        level = TG_LOG_OFF;
    atomic_store(&tg_log_level, level);
}

int tg_log_parse_level(const char *name)
{
    for (int i = 0; i <= TG_LOG_OFF; i++) {
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    }
    if (strcasecmp(name, "warning") == 0)
        return TG_LOG_WARN;
    return -1;
}

/* Writes the fixed prefix; returns its length (always < cap). */
static size_t log_prefix(char *buf, size_t cap, int level)
{
    struct timespec ts;
    struct tm tm;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    if (level < 0 || level > TG_LOG_ERROR)
        level = TG_LOG_ERROR;
    n = snprintf(buf, cap, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s svc=%s ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000L, level_names[level], log_service);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

static void log_vemit(int level, uint64_t suppressed, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void log_vemit(int level, uint64_t suppressed, const char *fmt, va_list ap)
{
    char line[TG_LOG_LINE_MAX];
    size_t len = log_prefix(line, sizeof(line) - 1, level);
    int n;
    int cut = 0;

    n = vsnprintf(line + len, sizeof(line) - 1 - len, fmt, ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(line) - 1 - len) {
        cut = 1;
        len = sizeof(line) - 1;
    } else {
        len += (size_t)n;
    }
    if (!cut && suppressed > 0) {
        n = snprintf(line + len, sizeof(line) - 1 - len, " suppressed=%llu",
                     (unsigned long long)suppressed);
        if (n < 0 || (size_t)n >= sizeof(line) - 1 - len) {
            cut = 1;
            len = sizeof(line) - 1;
        } else {
            len += (size_t)n;
        }
    }
    if (cut) {
        memcpy(line + sizeof(line) - 4, "...", 3);
        atomic_fetch_add(&stat_truncated, 1);
    }
    /* Newlines inside a message would split one event over several lines. */
    for (size_t i = 0; i < len; i++) {
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    }
    line[len++] = '\n';
    if (write(STDERR_FILENO, line, len) > 0) {
        atomic_fetch_add(&stat_lines, 1);
        atomic_fetch_add(&stat_bytes, len);
    }
}

void tg_log_emit(int level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vemit(level, 0, fmt, ap);
    va_end(ap);
}

void tg_log_emit_rl(int level, uint64_t suppressed, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vemit(level, suppressed, fmt, ap);
    va_end(ap);
}

int tg_log_rl_pass(struct tg_log_rl *rl, uint64_t *suppressed_out)
{
    uint64_t now = tg_now_mono_ms();
    uint64_t next = atomic_load(&rl->next_ms);

    if (now >= next &&
        atomic_compare_exchange_strong(&rl->next_ms, &next, now + TG_LOG_RATE_INTERVAL_MS)) {
        *suppressed_out = atomic_exchange(&rl->suppressed, 0);
        return 1;
    }
    atomic_fetch_add(&rl->suppressed, 1);
    atomic_fetch_add(&stat_suppressed, 1);
    return 0;
}

void tg_log_get_stats(struct tg_log_stats *out)
{
    out->lines = atomic_load(&stat_lines);
    out->bytes = atomic_load(&stat_bytes);
    out->truncated = atomic_load(&stat_truncated);
    out->suppressed = atomic_load(&stat_suppressed);
}

/* Escaped form of one byte into tmp (at most 4 bytes); returns its length. */
static size_t log_escape_byte(unsigned char c, char tmp[4])
{
    static const char hex[] = "0123456789abcdef";

    if (c == '"' || c == '\\') {
        tmp[0] = '\\';
        tmp[1] = (char)c;
        return 2;
    }
    if (c < 0x20 || c >= 0x7f) {
        tmp[0] = '\\';
        tmp[1] = 'x';
        tmp[2] = hex[c >> 4];
        tmp[3] = hex[c & 15];
        return 4;
    }
    tmp[0] = (char)c;
    return 1;
}

char *tg_log_escape(char *dst, size_t dstcap, const char *src, size_t srclen)
{
    size_t room;
    size_t total = 0;
    size_t o = 0;
    size_t i;
    char tmp[4];

    if (dstcap == 0)
        return dst;
    room = dstcap - 1; /* bytes before the NUL */
    for (i = 0; i < srclen && total <= room; i++)
        total += log_escape_byte((unsigned char)src[i], tmp);
    /* When everything fits it is written whole; otherwise room is kept for the marker. */
    if (total > room) {
        if (room < 3) {
            dst[0] = '\0';
            return dst;
        }
        room -= 3;
    }
    for (i = 0; i < srclen; i++) {
        size_t n = log_escape_byte((unsigned char)src[i], tmp);

        if (o + n > room)
            break;
        memcpy(dst + o, tmp, n);
        o += n;
    }
    if (i < srclen) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
    return dst;
}

char *tg_log_json_plain(char *dst, size_t dstcap, const char *src)
{
    size_t o = 0;

    if (dstcap == 0)
        return dst;
    for (; *src != '\0' && o + 1 < dstcap; src++) {
        unsigned char c = (unsigned char)*src;

        if (c == '"')
            dst[o++] = '\'';
        else if (c == '\\')
            dst[o++] = '/';
        else if (c >= 0x20 && c < 0x7f)
            dst[o++] = (char)c;
    }
    dst[o] = '\0';
    return dst;
}
