/* eventstream: AWS's binary event-stream framing, the decoder ConverseStream's answers go
 * through. See provider.h.
 *
 * Layout (from the AWS SDKs' event-stream specification, e.g. awslabs/aws-c-event-stream):
 *   total length (4) | headers length (4) | prelude CRC (4, CRC-32 of the 8 bytes before) |
 *   headers | payload | message CRC (4, CRC-32 of everything before)
 * all integers big-endian, CRC-32 the IEEE one (polynomial 0xEDB88320 reflected, as zlib's).
 * A header: name length (1, 1..255) | name | value type (1) | value, where the value is by
 * type: 0 true, 1 false (no bytes), 2 byte (1), 3 short (2), 4 integer (4), 5 long (8),
 * 6 byte array and 7 string (2-byte length, then the bytes), 8 timestamp (8), 9 UUID (16).
 * Every length is checked against what remains before it is used. */
#include "providers/provider.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tg_err.h"

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_ieee(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;

    pthread_once(&crc_once, crc_init);
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

size_t rt_evs_frame_len(const char *p, size_t n)
{
    uint32_t total;

    if (n < 4)
        return 0;
    total = be32((const unsigned char *)p);
    if (total < RT_EVS_MIN_BYTES)
        return n >= RT_EVS_MIN_BYTES ? RT_EVS_MIN_BYTES : 0;
    return n >= total ? total : 0;
}

/* A string header's value into out (cap bytes, cut never: too long is an error). */
static int str_value(const unsigned char *v, size_t vl, char *out, size_t cap)
{
    if (vl >= cap || memchr(v, '\0', vl) != NULL)
        return TG_EPROTO;
    memcpy(out, v, vl);
    out[vl] = '\0';
    return 0;
}

int rt_evs_decode(const char *frame, size_t n, struct rt_evs_message *out)
{
    const unsigned char *p = (const unsigned char *)frame;
    uint32_t total, hlen;
    size_t off, end;

    memset(out, 0, sizeof(*out));
    if (n < RT_EVS_MIN_BYTES)
        return TG_EPROTO;
    total = be32(p);
    hlen = be32(p + 4);
    if (total != n || hlen > total - RT_EVS_MIN_BYTES)
        return TG_EPROTO;
    if (be32(p + 8) != crc32_ieee(p, 8) || be32(p + n - 4) != crc32_ieee(p, n - 4))
        return TG_EPROTO;
    off = 12;
    end = 12 + (size_t)hlen;
    while (off < end) {
        size_t nl = p[off++];
        const unsigned char *name;
        unsigned type;
        size_t vl;

        if (nl == 0 || off + nl + 1 > end)
            return TG_EPROTO;
        name = p + off;
        off += nl;
        type = p[off++];
        switch (type) {
        case 0:
        case 1:
            vl = 0;
            break;
        case 2:
            vl = 1;
            break;
        case 3:
            vl = 2;
            break;
        case 4:
            vl = 4;
            break;
        case 5:
        case 8:
            vl = 8;
            break;
        case 9:
            vl = 16;
            break;
        case 6:
        case 7:
            if (off + 2 > end)
                return TG_EPROTO;
            vl = ((size_t)p[off] << 8) | p[off + 1];
            off += 2;
            break;
        default:
            return TG_EPROTO;
        }
        if (off + vl > end)
            return TG_EPROTO;
        if (type == 7) {
            char *dst = NULL;
            size_t cap = 0;

            if (nl == 13 && memcmp(name, ":message-type", 13) == 0) {
                dst = out->message_type;
                cap = sizeof(out->message_type);
            } else if (nl == 11 && memcmp(name, ":event-type", 11) == 0) {
                dst = out->event_type;
                cap = sizeof(out->event_type);
            } else if ((nl == 15 && memcmp(name, ":exception-type", 15) == 0) ||
                       (nl == 11 && memcmp(name, ":error-code", 11) == 0)) {
                dst = out->exception_type;
                cap = sizeof(out->exception_type);
            }
            if (dst != NULL && str_value(p + off, vl, dst, cap) != 0)
                return TG_EPROTO;
        }
        off += vl;
    }
    out->payload = frame + end;
    out->payload_len = n - 4 - end;
    return 0;
}
