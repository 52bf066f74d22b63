/* Fuzz target: the SSE event splitter and event parser (router-svc/src/sse.c), as the stream
 * pump uses them on the bytes a provider sends.
 *
 * The input is a stream. It is cut into events with rt_sse_event_len the way the pump does
 * (the first complete event, then the rest), and each event parsed with rt_sse_parse into
 * buffers of the pump's sizes and into deliberately small ones. Properties (abort on
 * violation):
 * - an event's length is within the bytes given and ends with an empty line ("\n\n" or
 *   "\r\n\r\n"), and no such empty line ends earlier (it is the first one);
 * - the split does not depend on how the bytes arrived: splitting every prefix of the stream
 *   finds the same first event once it is complete, and none before;
 * - the parse agrees with an independent reading of the event written here (line by line:
 *   the last "event:" value, the "data:" values joined with "\n", one space after the colon
 *   dropped), cut to the buffers, with the outputs NUL-terminated and *dlen < dcap. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sse.h"

#define PUMP_EVENT_CAP 64u
#define PUMP_DATA_CAP (12u * 1024u + 1u)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "sse_split_fuzz: %s\n", what);
    abort();
}

/* The first position where an event ends, by the definition above: 0 when none. */
static size_t ref_event_len(const char *p, size_t n)
{
    size_t best = 0;

    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] == '\n' && p[i + 1] == '\n') {
            best = i + 2;
            break;
        }
    }
    for (size_t i = 0; i + 3 < n; i++) {
        if (memcmp(p + i, "\r\n\r\n", 4) == 0) {
            if (best == 0 || i + 4 < best)
                best = i + 4;
            break;
        }
    }
    return best;
}

/* The independent reading of one event into malloc'ed name and data (uncut). */
static void ref_parse(const char *p, size_t n, char **ev, size_t *evl, char **dt, size_t *dtl)
{
    size_t start = 0;

    *ev = calloc(1, n + 1);
    *dt = calloc(1, 2 * n + 2);
    *evl = 0;
    *dtl = 0;
    if (*ev == NULL || *dt == NULL)
        abort();
    while (start < n) {
        const char *nl = memchr(p + start, '\n', n - start);
        size_t end = nl != NULL ? (size_t)(nl - p) : n;
        size_t len = end - start;
        const char *line = p + start;

        if (len > 0 && line[len - 1] == '\r')
            len--;
        if (len >= 5 && strncmp(line, "data:", 5) == 0) {
            const char *v = line + 5;
            size_t vl = len - 5;

            if (vl > 0 && v[0] == ' ') {
                v++;
                vl--;
            }
            if (*dtl > 0)
                (*dt)[(*dtl)++] = '\n';
            memcpy(*dt + *dtl, v, vl);
            *dtl += vl;
        } else if (len >= 6 && strncmp(line, "event:", 6) == 0) {
            const char *v = line + 6;
            size_t vl = len - 6;

            if (vl > 0 && v[0] == ' ') {
                v++;
                vl--;
            }
            memcpy(*ev, v, vl);
            *evl = vl;
        }
        start = end + 1;
    }
}

static void check_parse(const char *p, size_t n, size_t ecap, size_t dcap)
{
    char *ev = malloc(ecap), *dt = malloc(dcap);
    char *rev, *rdt;
    size_t dlen = (size_t)-1, revl, rdtl, want;

    if (ev == NULL || dt == NULL)
        abort();
    memset(ev, 'E', ecap);
    memset(dt, 'D', dcap);
    rt_sse_parse(p, n, ev, ecap, dt, dcap, &dlen);
    if (dlen >= dcap || dt[dlen] != '\0' || memchr(ev, '\0', ecap) == NULL)
        fail("outputs not NUL-terminated within their buffers");
    ref_parse(p, n, &rev, &revl, &rdt, &rdtl);
    want = revl < ecap - 1 ? revl : ecap - 1;
    if (strlen(ev) > want || memcmp(ev, rev, strlen(ev)) != 0 ||
        (strlen(ev) < want && memchr(rev, '\0', want) == NULL))
        fail("event name differs from the reference");
    /* data: the reference joined, cut to dcap - 1 (a separator that does not fit is dropped,
     * so the pump's data is a prefix of the reference's with at most that difference) */
    if (dlen > rdtl || memcmp(dt, rdt, dlen) != 0) {
        /* allowed only where the cut dropped a separator: compare without newlines */
        size_t a = 0, b = 0;

        while (a < dlen && b < rdtl) {
            if (dt[a] == rdt[b]) {
                a++;
                b++;
            } else if (rdt[b] == '\n') {
                b++;
            } else {
                fail("data differs from the reference");
            }
        }
        if (a < dlen)
            fail("data longer than the reference");
    }
    if (rdtl < dcap - 1 && dlen != rdtl)
        fail("data cut although it fits");
    free(rev);
    free(rdt);
    free(ev);
    free(dt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t off = 0;

    while (off < size) {
        size_t left = size - off;
        size_t len = rt_sse_event_len(p + off, left);
        size_t ref = ref_event_len(p + off, left);

        if (len != ref)
            fail("event length differs from the first empty line");
        if (len > left)
            fail("event longer than the bytes given");
        /* the same answer on every prefix long enough, none on a shorter one */
        for (size_t k = 0; k <= left && k < 2048; k += 1 + k / 16) {
            size_t lk = rt_sse_event_len(p + off, k);

            if (len > 0 && k >= len && lk != len)
                fail("a longer prefix found another first event");
            if ((len == 0 || k < len) && lk != 0)
                fail("an event found before its end arrived");
        }
        if (len == 0) {
            check_parse(p + off, left, PUMP_EVENT_CAP, PUMP_DATA_CAP);
            break;
        }
        check_parse(p + off, len, PUMP_EVENT_CAP, PUMP_DATA_CAP);
        check_parse(p + off, len, 4, 8);
        check_parse(p + off, len, 1, 1);
        off += len;
    }
    return 0;
}
