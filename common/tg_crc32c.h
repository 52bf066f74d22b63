/* tg_crc32c: CRC-32C (Castagnoli), used to frame spool records. */
#ifndef TG_CRC32C_H
#define TG_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* tg_crc32c: continue crc (start with 0) over data. Any thread. */
uint32_t tg_crc32c(uint32_t crc, const void *data, size_t len);

#endif
