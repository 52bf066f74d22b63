/* libFuzzer target for mask (router-svc/src/mask.h): configured secrets and built-in rules
 * removed from free text.
 *
 * Input: byte 0 gives the number of secrets (0..FUZZ_SECRETS_MAX); each secret is a length byte
 * (0..63) and that many bytes (a NUL ends it early, as a C string would); the rest is the text.
 * A '*' in a secret is made a '+': the replacement "***" next to kept text can spell a secret
 * made of stars without anything leaking from the input.
 *
 * Properties (abort on violation):
 *  - no configured secret of RT_MASK_SECRET_MIN bytes or more appears in the output, judged in
 *    the form it has in cleaned text (tab, newline and CR as a space, other control characters
 *    and invalid UTF-8 dropped, as mask.h says the text is cleaned) when that form is still
 *    RT_MASK_SECRET_MIN bytes long;
 *  - the output is NUL-terminated at the returned length, below outcap, valid UTF-8 without
 *    control characters, and at most 3 bytes per inspected input byte;
 *  - a smaller outcap gives a prefix of the full output, cut at a unit (a character or a
 *    replacement) and not shorter than needed (at most one unit of 4 bytes is left out). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"

#define FUZZ_SECRETS_MAX 4
#define FUZZ_SECRET_MAX 64
#define FUZZ_OUT_CAP (3 * RT_MASK_INPUT_MAX + 1) /* never the limit */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "mask_fuzz: %s%s%s\n", what, detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
    abort();
}

static void check(int ok, const char *what, const char *detail)
{
    if (!ok)
        fail(what, detail);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid (mask.h's rules: no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        len = 2;
        cp = s[0] & 0x1Fu;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        len = 3;
        cp = s[0] & 0x0Fu;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        len = 4;
        cp = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0u) != 0x80u)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if ((len == 3 && cp < 0x800u) || (len == 4 && cp < 0x10000u) || cp > 0x10FFFFu ||
        (cp >= 0xD800u && cp <= 0xDFFFu))
        return 0;
    return len;
}

/* The cleaned form of s[0..n) into out (n + 1 bytes); returns its length. */
static size_t clean(const char *s, size_t n, char *out)
{
    size_t i = 0, o = 0;

    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t l;

        if (c == '\t' || c == '\n' || c == '\r') {
            out[o++] = ' ';
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            i++;
        } else if ((l = utf8_len((const unsigned char *)s + i, n - i)) == 0) {
            i++;
        } else {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
        }
    }
    out[o] = '\0';
    return o;
}

static void check_output(const char *out, size_t o, size_t outcap, size_t inlen)
{
    size_t i = 0;

    check(o < outcap && out[o] == '\0' && strlen(out) == o,
          "output not NUL-terminated at its length below outcap", NULL);
    check(o <= 3 * (inlen < RT_MASK_INPUT_MAX ? inlen : RT_MASK_INPUT_MAX),
          "output longer than 3 bytes per inspected input byte", NULL);
    while (i < o) {
        unsigned char c = (unsigned char)out[i];
        size_t l = utf8_len((const unsigned char *)out + i, o - i);

        check(l > 0, "output is not valid UTF-8", out);
        check(c >= 0x20 && c != 0x7F, "control character in the output", out);
        i += l;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char secrets[FUZZ_SECRETS_MAX][FUZZ_SECRET_MAX];
    const char *ptrs[FUZZ_SECRETS_MAX];
    char cleaned[FUZZ_SECRET_MAX];
    static char full[FUZZ_OUT_CAP], part[FUZZ_OUT_CAP];
    size_t at = 1, n = 0, text_len, full_len, part_len, cap;
    const char *text;
    struct rt_mask *m;
    char err[128];
    uint64_t h = 0xcbf29ce484222325ull;

    if (size == 0)
        return 0;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    n = data[0] % (FUZZ_SECRETS_MAX + 1);
    for (size_t s = 0; s < n; s++) {
        size_t len = at < size ? data[at] % FUZZ_SECRET_MAX : 0;

        at += at < size;
        if (len > size - at)
            len = size - at;
        memcpy(secrets[s], data + at, len);
        secrets[s][len] = '\0';
        for (size_t i = 0; i < len; i++) {
            if (secrets[s][i] == '*')
                secrets[s][i] = '+';
        }
        ptrs[s] = secrets[s];
        at += len;
    }
    text = (const char *)data + at;
    text_len = size - at;

    m = rt_mask_create(ptrs, n, err, sizeof(err));
    check(m != NULL, "rt_mask_create refused a few secrets", err);
    full_len = rt_mask_apply(m, text_len > 0 ? text : NULL, text_len, full, sizeof(full));
    check_output(full, full_len, sizeof(full), text_len);
    for (size_t s = 0; s < n; s++) {
        size_t cl = clean(secrets[s], strlen(secrets[s]), cleaned);

        if (strlen(secrets[s]) >= RT_MASK_SECRET_MIN && cl >= RT_MASK_SECRET_MIN &&
            memmem(full, full_len, cleaned, cl) != NULL)
            fail("a configured secret appears in the output", cleaned);
    }

    /* a smaller buffer: a prefix of the full output, cut at a unit */
    cap = 1 + (size_t)(h % (full_len + 2));
    part_len = rt_mask_apply(m, text_len > 0 ? text : NULL, text_len, part, cap);
    check_output(part, part_len, cap, text_len);
    check(part_len <= full_len && memcmp(part, full, part_len) == 0,
          "output in a smaller buffer is not a prefix of the full output", part);
    check(part_len == full_len || part_len + 4 >= cap - 1,
          "output in a smaller buffer cut more than one unit short", part);
    rt_mask_destroy(&m);
    check(m == NULL, "rt_mask_destroy did not clear the pointer", NULL);
    return 0;
}
