/*
 * libFuzzer target for the NBD option and command parsers (src/nbd/nbd_proto.c)
 * and the PSK file line parser (src/core/tls.c). The first input byte picks
 * the parser and, for requests, the negotiated session; the rest is wire data.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/tls.h"
#include "nbd/nbd_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++;
    size--;
    switch (sel % 4) {
    case 0: { /* a stream of request headers against a session */
        struct nbd_session_caps s = {
            .eflags = (uint16_t)((sel >> 2) * 0x1357u),
            .structured = sel & 0x40,
            .meta_alloc = sel & 0x80,
            .size = 1ull << (sel % 48),
            .max_length = 32u << 20,
        };
        while (size >= NBD_REQUEST_LEN) {
            struct nbd_request r;
            if (nbd_request_parse(data, &r) == 0) {
                const char *why = NULL;
                uint32_t err = nbd_request_validate(&r, &s, &why);
                if (err == 0 && r.length > s.max_length && r.type <= NBD_CMD_WRITE)
                    __builtin_trap();
                if (err && !why)
                    __builtin_trap();
                (void)nbd_cmd_name(r.type);
            }
            data += NBD_REQUEST_LEN;
            size -= NBD_REQUEST_LEN;
        }
        break;
    }
    case 1: { /* INFO/GO payload */
        struct nbd_opt_go go;
        if (size > UINT32_MAX)
            return 0;
        if (nbd_opt_go_parse(data, (uint32_t)size, &go) == 0) {
            if (go.name_len > size || (const uint8_t *)go.name < data ||
                go.reqs + 2 * (size_t)go.nreqs > data + size)
                __builtin_trap();
            volatile uint8_t sink = 0;
            for (uint32_t i = 0; i < go.name_len; i++)
                sink ^= (uint8_t)go.name[i];
            for (unsigned i = 0; i < go.nreqs; i++)
                sink ^= go.reqs[2 * i];
            (void)sink;
        }
        break;
    }
    case 2: { /* LIST/SET_META_CONTEXT payload */
        struct nbd_opt_meta m;
        if (size > UINT32_MAX)
            return 0;
        if (nbd_opt_meta_parse(data, (uint32_t)size, &m) == 0) {
            uint32_t pos = 0, ql;
            const char *q;
            while (nbd_opt_meta_next(&m, &pos, &q, &ql) == 1) {
                if ((const uint8_t *)q + ql > data + size)
                    __builtin_trap();
                (void)nbd_meta_query_matches(q, ql, sel & 4);
            }
        }
        break;
    }
    case 3: { /* PSK file line */
        const char *u;
        size_t ul, kl;
        unsigned char key[64];
        if (tls_psk_parse_line((const char *)data, size, &u, &ul, key, sizeof(key), &kl) == 0 &&
            (ul > size || kl > sizeof(key)))
            __builtin_trap();
        break;
    }
    }
    return 0;
}
