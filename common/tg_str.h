/* tg_str: the string building the request path does for every request, without printf: a
 * bounded copy (what snprintf(dst, cap, "%s", src) did), decimal digits, and the test for the
 * bytes a JSON string carries as they are. Header only. */
#ifndef TG_STR_H
#define TG_STR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

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

/* The bytes a JSON string carries as they are: 0x20 to 0x7f but '"' and '\\'. The others (a
 * control byte, a quote, a backslash, a byte of a UTF-8 sequence) are "special".
 * tg_json_special8: the special bytes of x (8 bytes, in little-endian order) marked by their
 * high bit, 0 when there are none. Only the lowest mark is exact (a borrow may mark bytes above
 * it), which is the one a scan wants; a NUL counts as a control byte. */
static inline uint64_t tg_json_special8(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t ctl = (x - ones * 0x20) & ~x & highs;
    uint64_t q = x ^ (ones * '"');
    uint64_t b = x ^ (ones * '\\');

    q = (q - ones) & ~q & highs;
    b = (b - ones) & ~b & highs;
    return ctl | q | b | (x & highs);
}

#ifdef __SSE2__
/* tg_json_special16: bit i set when byte i of v is special; every bit exact. */
static inline unsigned tg_json_special16(__m128i v)
{
    /* below 0x20 as signed bytes: the control bytes and every byte from 0x80 */
    __m128i sp = _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                              _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                           _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));

    return (unsigned)_mm_movemask_epi8(sp);
}
#endif

#endif
