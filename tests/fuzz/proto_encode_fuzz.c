/* libFuzzer target for proto_event_encode: the input bytes become the raw struct (so strings
 * may lack their NUL, counters may be negative or huge), with only kind and call_id made
 * valid (in upper case when the first byte says so; left as the input has it when its bit 4
 * says so: then the direct pass and the cleaning way must give the same answer, 0 or
 * TG_EINVAL, and when both refuse it a valid one is put in). Properties: encoding succeeds, never
 * exceeds TG_EVENT_MAX_BYTES, decodes, and is byte for byte what the cleaning way writes (the
 * direct pass that takes ASCII events must not differ from it on anything it accepts); encoding
 * what it decodes to gives the same bytes (an optional member is left out exactly when it is at
 * the default the decoder gives it); no optional member is written at such a default ("" or
 * false, an empty trail or tag list: within a JSON string these sequences cannot occur
 * unescaped). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_event.h"
#include "proto_int.h"
#include "tg_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char call_id[] = "0190b3e2-7c1a-7b3e-8f00-123456789abc";
    static const char call_id_upper[] = "0190B3E2-7C1A-7B3E-8F00-123456789ABC";
    struct proto_event ev;
    struct proto_event dec;
    char out[TG_EVENT_MAX_BYTES + 1];
    char cleaned[TG_EVENT_MAX_BYTES + 1];
    size_t cleanedlen = 0;
    char reason[256];
    size_t outlen = 0;
    int rc;

    memset(&ev, 0, sizeof(ev));
    memcpy(&ev, data, size < sizeof(ev) ? size : sizeof(ev));
    ev.kind = (size > 0 && (data[0] & 1)) ? PROTO_KIND_COOLDOWN : PROTO_KIND_REQUEST;
    if (size > 0 && (data[0] & 4)) {
        /* the call id as the input has it: both ways must agree on taking it */
        int direct = proto_event_encode(&ev, out, sizeof(out), &outlen);

        rc = proto_event_encode_cleaned(&ev, cleaned, &cleanedlen);
        if (direct != rc || (rc != 0 && rc != TG_EINVAL)) {
            fprintf(stderr, "proto_encode_fuzz: call id answers differ: direct %d cleaned %d\n",
                    direct, rc);
            abort();
        }
        if (rc != 0) /* refused both ways: the rest is checked with a valid one */
            memcpy(ev.call_id, call_id, sizeof(call_id));
    } else if (size > 0 && (data[0] & 2)) {
        memcpy(ev.call_id, call_id_upper, sizeof(call_id_upper));
    } else {
        memcpy(ev.call_id, call_id, sizeof(call_id));
    }
    rc = proto_event_encode(&ev, out, sizeof(out), &outlen);
    if (rc != 0 || outlen > TG_EVENT_MAX_BYTES || strlen(out) != outlen) {
        fprintf(stderr, "proto_encode_fuzz: encode rc=%d len=%zu\n", rc, outlen);
        abort();
    }
    rc = proto_event_encode_cleaned(&ev, cleaned, &cleanedlen);
    if (rc != 0 || cleanedlen != outlen || memcmp(cleaned, out, outlen) != 0) {
        fprintf(stderr, "proto_encode_fuzz: direct and cleaned encodings differ (rc=%d)\n%s\n%s\n",
                rc, out, cleaned);
        abort();
    }
    rc = proto_event_decode(out, outlen, &dec, reason, sizeof(reason));
    if (rc != 0) {
        fprintf(stderr, "proto_encode_fuzz: own encoding rejected: %s\n%s\n", reason, out);
        abort();
    }
    rc = proto_event_encode(&dec, cleaned, sizeof(cleaned), &cleanedlen);
    if (rc != 0 || cleanedlen != outlen || memcmp(cleaned, out, outlen) != 0) {
        fprintf(stderr, "proto_encode_fuzz: not a fixed point (rc=%d)\n%s\n%s\n", rc, out,
                cleaned);
        abort();
    }
    for (const char *h = strstr(out, "\":\"\""); h != NULL; h = strstr(h + 1, "\":\"\"")) {
        if (h - out < 9 || memcmp(h - 9, "\"endpoint", 9) != 0) { /* endpoint is required */
            fprintf(stderr, "proto_encode_fuzz: an empty string member written\n%s\n", out);
            abort();
        }
    }
    if (strstr(out, "\"stream\":false") != NULL ||
        strstr(out, "\"price_unknown\":false") != NULL || strstr(out, "\"trail\":[]") != NULL ||
        strstr(out, "\"tags\":[]") != NULL) {
        fprintf(stderr, "proto_encode_fuzz: a member written at its default\n%s\n", out);
        abort();
    }
    return 0;
}
