#include "sse.h"

#include <string.h>

size_t rt_sse_event_len(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] == '\n' && p[i + 1] == '\n')
            return i + 2;
        if (i + 3 < n && p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == '\r' && p[i + 3] == '\n')
            return i + 4;
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
        size_t j = i;
        size_t ll;

        while (j < n && p[j] != '\n')
            j++;
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
