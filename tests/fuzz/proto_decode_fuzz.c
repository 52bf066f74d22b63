/* libFuzzer target for proto_event_decode.
 *
 * Properties checked on every input (abort on violation, so the fuzzer reports it):
 *  - the decoder returns 0, TG_EPROTO or TG_ETOOBIG, and a non-empty reason when it rejects;
 *  - an accepted event encodes to at most TG_EVENT_MAX_BYTES, that encoding decodes, and
 *    encoding it again gives the same bytes (canonical fixpoint).
 * Built with -fsanitize=fuzzer when TG_FUZZ=ON and the compiler is clang; fuzz_replay_main.c
 * feeds the committed corpus to the same entry point in every build. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_event.h"
#include "tg_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "proto_decode_fuzz: %s: %s\n", what, detail != NULL ? detail : "");
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_event ev;
    struct proto_event dec;
    char reason[256];
    char out[TG_EVENT_MAX_BYTES + 1];
    char out2[TG_EVENT_MAX_BYTES + 1];
    size_t outlen = 0;
    size_t outlen2 = 0;
    int rc;

    reason[0] = '\0';
    rc = proto_event_decode((const char *)data, size, &ev, reason, sizeof(reason));
    if (rc != 0) {
        check(rc == TG_EPROTO || rc == TG_ETOOBIG, "unexpected return code", reason);
        check(reason[0] != '\0', "rejected without a reason", NULL);
        return 0;
    }
    check(ev.trail_len <= PROTO_TRAIL_MAX && ev.tags_len <= PROTO_TAGS_MAX, "array over cap", NULL);
    rc = proto_event_encode(&ev, out, sizeof(out), &outlen);
    check(rc == 0, "accepted event does not encode", NULL);
    check(outlen <= TG_EVENT_MAX_BYTES && strlen(out) == outlen, "encoding over the bound", out);
    rc = proto_event_decode(out, outlen, &dec, reason, sizeof(reason));
    check(rc == 0, "own encoding rejected", reason);
    rc = proto_event_encode(&dec, out2, sizeof(out2), &outlen2);
    check(rc == 0 && outlen2 == outlen && memcmp(out, out2, outlen) == 0,
          "encoding is not a fixpoint", out);
    return 0;
}
