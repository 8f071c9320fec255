/*
 * libFuzzer target: the iSCSI PDU reader and full feature phase. Each input
 * is a byte stream sent to a real connection right after a valid login (so
 * it reaches SCSI commands, Data-Out, TMF, NOP, Text, Logout), over a
 * socketpair on real reactors.
 */
#include "fuzz_iscsi_common.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_iscsi_setup(false);
    if (size > 1 << 20)
        return 0;
    uint8_t *buf = malloc(size + 1024);
    if (!buf)
        return 0;
    size_t n = fuzz_login_pdu(buf, fuzz_login_text, sizeof(fuzz_login_text) - 1,
                              ISCSI_LOGIN_TRANSIT | (1 << 2) | 3);
    memcpy(buf + n, data, size);
    fuzz_iscsi_feed(buf, n + size);
    free(buf);
    return 0;
}
