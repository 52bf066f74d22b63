#include "tg_crc32c.h"

#include <pthread.h>
#include <string.h>

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static uint32_t (*crc_impl)(uint32_t crc, const unsigned char *p, size_t len);

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* SSE 4.2's crc32 instruction computes CRC-32C itself, eight bytes a step. Each step waits for
 * the one before (three cycles on current cores, one more may start every cycle), so a buffer
 * of CRC_BLOCK bytes or more goes as three streams of CRC_STREAM bytes at once: the CRC of the
 * block is that of the first stream carried over the 2 * CRC_STREAM bytes after it (as if they
 * were zeros: crc_shift2), xor the second's carried over CRC_STREAM (crc_shift1), xor the third's
 * (the CRC register is linear in it and in the data). Every spool record is framed with it,
 * written and read again; at ~640 bytes the three streams take under two thirds of the time. */
#define CRC_STREAM 64u
#define CRC_BLOCK (3u * CRC_STREAM)
static uint32_t crc_shift1[4][256], crc_shift2[4][256];

/* crc carried over n zero bytes, by table: t[k][b] is byte k of crc equal to b carried over. */
static inline uint32_t crc_carry(const uint32_t t[4][256], uint32_t crc)
{
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p,
                                                         size_t len)
{
    uint64_t c = crc;

    while (len >= CRC_BLOCK) {
        uint64_t c1 = 0, c2 = 0;

        for (unsigned i = 0; i < CRC_STREAM; i += 8) {
            uint64_t v0, v1, v2;

            memcpy(&v0, p + i, sizeof(v0));
            memcpy(&v1, p + CRC_STREAM + i, sizeof(v1));
            memcpy(&v2, p + 2 * CRC_STREAM + i, sizeof(v2));
            c = __builtin_ia32_crc32di(c, v0);
            c1 = __builtin_ia32_crc32di(c1, v1);
            c2 = __builtin_ia32_crc32di(c2, v2);
        }
        c = crc_carry(crc_shift2, (uint32_t)c) ^ crc_carry(crc_shift1, (uint32_t)c1) ^ c2;
        p += CRC_BLOCK;
        len -= CRC_BLOCK;
    }
    while (len >= 8) {
        uint64_t v;

        memcpy(&v, p, sizeof(v));
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        len -= 8;
    }
    crc = (uint32_t)c;
    while (len-- > 0)
        crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
#define TG_CRC32C_HW 1

/* The tables of crc carried over n zero bytes: by the table way, which needs no instruction. */
static void crc_shift_init(uint32_t t[4][256], size_t n)
{
    static const unsigned char zeros[2 * CRC_STREAM];

    for (unsigned k = 0; k < 4; k++) {
        for (uint32_t b = 0; b < 256; b++)
            t[k][b] = crc_sw(b << (8 * k), zeros, n);
    }
}
#endif

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    }
    crc_impl = crc_sw;
#ifdef TG_CRC32C_HW
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        crc_shift_init(crc_shift1, CRC_STREAM);
        crc_shift_init(crc_shift2, 2 * CRC_STREAM);
        crc_impl = crc_hw;
    }
#endif
}

uint32_t tg_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return ~crc_impl(~crc, data, len);
}

uint32_t tg_crc32c_portable(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return ~crc_sw(~crc, data, len);
}

/* The tables, eight bytes a step (crc pre-inverted by the caller). */
static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
              crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len-- > 0)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return crc;
}
