#include "tg_utf8.h"

#include <string.h>

size_t tg_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80; /* bounds of the second byte (Unicode 15, table 3-7) */
    unsigned char hi = 0xBF;
    size_t len;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4;
    else
        return 0;
    if (len > n)
        return 0;
    if (c == 0xE0)
        lo = 0xA0; /* overlong below U+0800 */
    else if (c == 0xED)
        hi = 0x9F; /* surrogates */
    else if (c == 0xF0)
        lo = 0x90; /* overlong below U+10000 */
    else if (c == 0xF4)
        hi = 0x8F; /* above U+10FFFF */
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    }
    return len;
}

size_t tg_utf8_boundary(const char *s, size_t len, size_t max)
{
    size_t n = max;

    if (max >= len)
        return len;
    /* s[n] is the first byte left out: step back while it continues a sequence. A valid
     * sequence has at most 3 continuation bytes; more means the input was not UTF-8 and any
     * cut is as good as another. */
    for (int steps = 0; n > 0 && steps < 3; steps++) {
        if (((unsigned char)s[n] & 0xC0) != 0x80)
            return n;
        n--;
    }
    if (((unsigned char)s[n] & 0xC0) != 0x80)
        return n;
    return max;
}

void tg_utf8_copy(char *dst, size_t cap, const char *src)
{
    size_t len;

    if (src == NULL) {
        dst[0] = '\0';
        return;
    }
    len = strnlen(src, cap);
    len = tg_utf8_boundary(src, len, cap - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
}
