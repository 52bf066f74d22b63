#include "tg_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_err.h"

int tg_buf_init(struct tg_buf *b, size_t cap)
{
    b->data = malloc(cap + 1);
    b->len = 0;
    b->cap = b->data != NULL ? cap : 0;
    b->truncated = 0;
    if (b->data == NULL)
        return TG_ENOMEM;
    b->data[0] = '\0';
    return 0;
}

void tg_buf_fini(struct tg_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void tg_buf_reset(struct tg_buf *b)
{
    b->len = 0;
    b->truncated = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

int tg_buf_append(struct tg_buf *b, const void *data, size_t n)
{
    size_t room = b->cap - b->len;
    int rc = 0;

    if (n > room) {
        n = room;
        b->truncated = 1;
        rc = TG_EFULL;
    }
    if (n > 0)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    if (b->data != NULL)
        b->data[b->len] = '\0';
    return rc;
}

int tg_buf_puts(struct tg_buf *b, const char *s)
{
    return tg_buf_append(b, s, strlen(s));
}

int tg_buf_printf(struct tg_buf *b, const char *fmt, ...)
{
    size_t room = b->cap - b->len;
    va_list ap;
    int n;

    if (b->data == NULL)
        return TG_EFULL;
    va_start(ap, fmt);
    n = vsnprintf(b->data + b->len, room + 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return TG_EINVAL;
    if ((size_t)n > room) {
        b->len = b->cap;
        b->truncated = 1;
        return TG_EFULL;
    }
    b->len += (size_t)n;
    return 0;
}
