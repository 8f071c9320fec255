/*
 * CRC32C (Castagnoli), as iSCSI and NVMe/TCP header and data digests use it (RFC 7143
 * §13.1, RFC 3720 appendix B.4; NVMe/TCP 3.6.1). Uses the SSE4.2 crc32 instruction when the
 * CPU has it (checked once at run time), else a slicing table.
 * Thread-safe, pure.
 */
#ifndef BLOCKD_CORE_CRC32C_H
#define BLOCKD_CORE_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: start with crc = 0 for a fresh digest. The value returned
 * is final (already inverted) and can be fed back to extend it. */
uint32_t crc32c(uint32_t crc, const void *data, size_t len);
/* The portable path, for tests (same results as crc32c). */
uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len);
/* Whether the hardware instruction is used. */
bool crc32c_hw(void);

#endif
