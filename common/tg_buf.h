/* tg_buf: a byte buffer whose capacity is fixed at init. Appends past the capacity are cut and
 * set the truncated flag; the buffer never grows. */
#ifndef TG_BUF_H
#define TG_BUF_H

#include <stddef.h>

struct tg_buf {
    char *data;    /* NUL-terminated contents, owned */
    size_t len;    /* bytes used, NUL excluded */
    size_t cap;    /* usable bytes, NUL excluded */
    int truncated; /* 1 once an append did not fit */
};

/* tg_buf_init: allocate cap bytes. Returns 0 or TG_ENOMEM. Release with tg_buf_fini(). */
int tg_buf_init(struct tg_buf *b, size_t cap);
void tg_buf_fini(struct tg_buf *b);
void tg_buf_reset(struct tg_buf *b);

/* Append; on overflow the part that fits is kept, truncated is set and TG_EFULL returned. */
int tg_buf_append(struct tg_buf *b, const void *data, size_t n);
int tg_buf_puts(struct tg_buf *b, const char *s);
int tg_buf_printf(struct tg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
