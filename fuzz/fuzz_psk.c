/*
 * libFuzzer target for the PSK key file line parser (src/core/tls.c), which
 * reads "identity:hexkey" lines of the file that --nbd-tls-psk names.
 */
#include <stddef.h>
#include <stdint.h>

#include "core/tls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *u;
    size_t ul, kl;
    unsigned char key[64];
    if (tls_psk_parse_line((const char *)data, size, &u, &ul, key, sizeof(key), &kl) == 0 &&
        (ul > size || kl > sizeof(key)))
        __builtin_trap();
    return 0;
}
