#include "sse.h"

#include <string.h>

size_t rt_sse_event_len(const char *p, size_t n)
{
    /* From one LF to the next (memchr, not byte by byte: every event of every stream passes
     * here): the event ends at the first "\n\n" or "\r\n\r\n", whichever starts first. At
     * an LF at j, "\r\n\r\n" would start at j - 1, before "\n\n" at j. */
    const char *lf = n > 0 ? memchr(p, '\n', n) : NULL;

    while (lf != NULL) {
        size_t j = (size_t)(lf - p);

        if (j + 1 >= n)
            return 0;
        if (j >= 1 && j + 2 < n && p[j - 1] == '\r' && p[j + 1] == '\r' && p[j + 2] == '\n')
            return j + 3;
        if (p[j + 1] == '\n')
            return j + 2;
        lf = memchr(p + j + 1, '\n', n - j - 1);
    }
    return 0;
}

void rt_sse_parse(const char *p, size_t n, char *event, size_t ecap, char *data, size_t dcap,
                  size_t *dlen)
{
    size_t i = 0;

    event[0] = '\0';
    *dlen = 0;
    data[0] = '\0';
    while (i < n) {
        const char *lf = memchr(p + i, '\n', n - i);
        size_t j = lf != NULL ? (size_t)(lf - p) : n;
        size_t ll;

        ll = j - i;
        if (ll > 0 && p[i + ll - 1] == '\r')
            ll--;
        if (ll >= 5 && memcmp(p + i, "data:", 5) == 0) {
            size_t off = (ll > 5 && p[i + 5] == ' ') ? 6 : 5;
            size_t vl = ll - off;

            if (*dlen > 0 && *dlen + 1 < dcap)
                data[(*dlen)++] = '\n';
            if (*dlen + vl >= dcap)
                vl = dcap - 1 - *dlen;
            memcpy(data + *dlen, p + i + off, vl);
            *dlen += vl;
            data[*dlen] = '\0';
        } else if (ll >= 6 && memcmp(p + i, "event:", 6) == 0) {
            size_t off = (ll > 6 && p[i + 6] == ' ') ? 7 : 6;
            size_t vl = ll - off;

            if (vl >= ecap)
                vl = ecap - 1;
            memcpy(event, p + i + off, vl);
            event[vl] = '\0';
        }
        i = j + 1;
    }
}
