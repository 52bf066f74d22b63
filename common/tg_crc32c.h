/* tg_crc32c: CRC-32C (Castagnoli), used to frame spool records. */
#ifndef TG_CRC32C_H
#define TG_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* tg_crc32c: continue crc (start with 0) over data. Any thread. With the CPU's CRC-32C
 * instruction where it has one (x86-64 SSE 4.2), else tables. */
uint32_t tg_crc32c(uint32_t crc, const void *data, size_t len);

/* tg_crc32c_portable: the same with the tables always (tests compare the two). */
uint32_t tg_crc32c_portable(uint32_t crc, const void *data, size_t len);

#endif
