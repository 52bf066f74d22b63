/* tg_utf8: strict UTF-8 (RFC 3629): no overlong forms, no surrogates (U+D800..U+DFFF), nothing
 * above U+10FFFF, no sequence cut by the end of the input. */
#ifndef TG_UTF8_H
#define TG_UTF8_H

#include <stddef.h>

/* tg_utf8_seq: length (1..4) of the valid UTF-8 sequence at s (n >= 1 bytes readable,
 * borrowed), or 0 when the bytes there are not one (a stray continuation byte, a lead byte
 * C0, C1 or F5..FF, an overlong form, a surrogate, a code point above U+10FFFF, or a sequence
 * longer than n). ASCII, NUL included, gives 1. Pure; any thread. */
size_t tg_utf8_seq(const unsigned char *s, size_t n);

/* tg_utf8_boundary: the largest n <= max such that s[0..n) does not end inside a UTF-8
 * sequence (s holds len >= max bytes, borrowed): where to cut s to at most max bytes. Input
 * that is not UTF-8 is cut at max. Pure; any thread. */
size_t tg_utf8_boundary(const char *s, size_t len, size_t max);

/* tg_utf8_copy: src (NUL-terminated, borrowed; NULL gives "") into dst (cap >= 1 bytes), cut at
 * a UTF-8 boundary to at most cap - 1 bytes, NUL-terminated. Reads at most cap bytes of src.
 * Pure; any thread. */
void tg_utf8_copy(char *dst, size_t cap, const char *src);

#endif
