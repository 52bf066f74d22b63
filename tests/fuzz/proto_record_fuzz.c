/* libFuzzer target for proto_record_split, the reader of an events-topic record's value, as
 * spend-svc reads it: split, then every event decoded.
 *
 * Properties checked on every input (abort on violation):
 *  - with cap PROTO_RECORD_EVENTS_MAX and with a small cap (1-4, from the first byte), the split
 *    returns 0 exactly when the record holds at most cap events, counted here independently
 *    (one more than its newlines, less one for a newline at the very end), else TG_ETOOBIG with
 *    *n = 0;
 *  - the spans tile the record: the first starts at 0, each next one right after the previous
 *    one's newline, none holds a newline, the last ends at the end (or before a final newline);
 *  - every event decodes to 0, TG_EPROTO or TG_ETOOBIG, with a reason when refused, and an
 *    accepted one encodes to at most TG_EVENT_MAX_BYTES without a newline (so it can share a
 *    record with others). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_event.h"
#include "tg_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "proto_record_fuzz: %s\n", what);
        abort();
    }
}

static void check_split(const char *d, size_t size, int cap, struct proto_span *sp)
{
    size_t newlines = 0;
    int events, n = -1, rc;

    for (size_t i = 0; i < size; i++)
        newlines += d[i] == '\n';
    events = (int)(newlines + 1 - (size > 0 && d[size - 1] == '\n'));
    rc = proto_record_split(d, size, sp, cap, &n);
    if (events > cap) {
        check(rc == TG_ETOOBIG && n == 0, "more events than cap not refused");
        return;
    }
    check(rc == 0 && n == events, "event count differs");
    check(sp[0].off == 0, "first event does not start the record");
    for (int i = 0; i < n; i++) {
        check(sp[i].off <= size && sp[i].len <= size - sp[i].off, "span outside the record");
        check(memchr(d + sp[i].off, '\n', sp[i].len) == NULL, "newline inside an event");
        if (i + 1 < n)
            check(sp[i + 1].off == sp[i].off + sp[i].len + 1 && d[sp[i].off + sp[i].len] == '\n',
                  "events do not follow each other");
    }
    check(sp[n - 1].off + sp[n - 1].len == size ||
              (sp[n - 1].off + sp[n - 1].len + 1 == size && d[size - 1] == '\n'),
          "last event does not end the record");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct proto_event ev;
    static char out[TG_EVENT_MAX_BYTES + 1];
    struct proto_span sp[PROTO_RECORD_EVENTS_MAX];
    const char *d = (const char *)data;
    char reason[256];
    size_t outlen;
    int n = 0, rc;

    check(proto_record_split(d, size, NULL, 1, &n) == TG_EINVAL, "NULL spans accepted");
    check_split(d, size, size > 0 ? 1 + data[0] % 4 : 1, sp);
    check_split(d, size, PROTO_RECORD_EVENTS_MAX, sp);
    if (proto_record_split(d, size, sp, PROTO_RECORD_EVENTS_MAX, &n) != 0)
        return 0;
    for (int i = 0; i < n; i++) {
        reason[0] = '\0';
        rc = proto_event_decode(d + sp[i].off, sp[i].len, &ev, reason, sizeof(reason));
        if (rc != 0) {
            check(rc == TG_EPROTO || rc == TG_ETOOBIG, "unexpected decode return code");
            check(reason[0] != '\0', "event refused without a reason");
            continue;
        }
        rc = proto_event_encode(&ev, out, sizeof(out), &outlen);
        check(rc == 0 && outlen <= TG_EVENT_MAX_BYTES, "accepted event does not encode");
        check(memchr(out, '\n', outlen) == NULL, "an encoding holds a newline");
    }
    return 0;
}
