/* tg_str: the string building the request path does for every request, without printf: a
 * bounded copy (what snprintf(dst, cap, "%s", src) did) and decimal digits. Header only. */
#ifndef TG_STR_H
#define TG_STR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* tg_strcpy_cap: copy the C string src (NULL: empty) into dst of cap bytes (cap > 0), cut to
 * cap - 1 bytes, always NUL-terminated. Returns the bytes copied. */
static inline size_t tg_strcpy_cap(char *dst, size_t cap, const char *src)
{
    size_t n = src != NULL ? strlen(src) : 0; /* src is NUL-terminated, as "%s" wanted */

    if (n > cap - 1)
        n = cap - 1;
    memcpy(dst, src != NULL ? src : "", n);
    dst[n] = '\0';
    return n;
}

/* tg_u64_dec: v in decimal into out (at least TG_U64_DEC_MAX bytes), no NUL. Returns its
 * length. Two digits a division. */
#define TG_U64_DEC_MAX 20
static inline size_t tg_u64_dec(char *out, uint64_t v)
{
    static const char pairs[] = "000102030405060708091011121314151617181920212223242526272829"
                                "303132333435363738394041424344454647484950515253545556575859"
                                "6061626364656667686970717273747576777879"
                                "8081828384858687888990919293949596979899";
    char tmp[TG_U64_DEC_MAX];
    size_t i = sizeof(tmp);

    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);

        v /= 100;
        tmp[--i] = pairs[2 * r + 1];
        tmp[--i] = pairs[2 * r];
    }
    if (v >= 10) {
        tmp[--i] = pairs[2 * v + 1];
        tmp[--i] = pairs[2 * v];
    } else {
        tmp[--i] = (char)('0' + v);
    }
    memcpy(out, tmp + i, sizeof(tmp) - i);
    return sizeof(tmp) - i;
}

#endif
