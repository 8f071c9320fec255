/*
 * libFuzzer target: login text negotiation and security (CHAP) stages. The
 * input is split on 0xff bytes into login request texts; the byte before
 * each text selects the stage flags (T/C/CSG/NSG). The target requires
 * CHAP, so the security stage is exercised.
 */
#include "fuzz_iscsi_common.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_iscsi_setup(true);
    /* Failed CHAP logins from earlier inputs would block the response
     * check: each input starts unthrottled. */
    iscsi_chap_limit_reset();
    if (size > 64 * 1024)
        return 0;
    /* Worst case: every byte starts a new (empty) PDU of 48 + 3 bytes. */
    uint8_t *buf = malloc(52 * size + 4096);
    if (!buf)
        return 0;
    size_t n = 0, pos = 0;
    while (pos < size) {
        uint8_t flags = data[pos++];
        size_t start = pos;
        while (pos < size && data[pos] != 0xff)
            pos++;
        size_t tlen = pos - start;
        if (tlen > 8192)
            tlen = 8192;
        n += fuzz_login_pdu(buf + n, (const char *)data + start, tlen, flags);
        pos++; /* skip the separator */
    }
    fuzz_iscsi_feed(buf, n);
    free(buf);
    return 0;
}
