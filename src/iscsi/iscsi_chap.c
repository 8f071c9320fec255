/* CHAP MD5 responses and iSCSI binary encodings. */
#include "iscsi/iscsi_chap.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/util.h"

int iscsi_chap_response(uint8_t id, const char *secret, const uint8_t *challenge,
                        size_t challenge_len, uint8_t out[ISCSI_CHAP_DIGEST_LEN])
{
    size_t sl = strlen(secret);
    size_t n = 1 + sl + challenge_len;
    uint8_t stackbuf[512];
    uint8_t *buf = n <= sizeof(stackbuf) ? stackbuf : malloc(n);
    if (!buf)
        return -ENOMEM;
    buf[0] = id;
    memcpy(buf + 1, secret, sl);
    memcpy(buf + 1 + sl, challenge, challenge_len);
    int rc = gnutls_hash_fast(GNUTLS_DIG_MD5, buf, n, out);
    memset(buf, 0, n);
    if (buf != stackbuf)
        free(buf);
    return rc < 0 ? -EIO : 0;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int iscsi_chap_decode(const char *s, uint8_t *out, size_t max)
{
    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X' && s[1] != 'b' && s[1] != 'B'))
        return -EINVAL;
    const char *p = s + 2;
    size_t len = strlen(p);
    if (len == 0)
        return -EINVAL;
    size_t n = 0;
    if (s[1] == 'x' || s[1] == 'X') {
        /* An odd digit count means a leading zero nibble. */
        size_t i = 0;
        if (len % 2) {
            int v = hex_value(p[0]);
            if (v < 0)
                return -EINVAL;
            if (n >= max)
                return -E2BIG;
            out[n++] = (uint8_t)v;
            i = 1;
        }
        int rc = hex_decode(p + i, len - i, out + n, max - n);
        return rc < 0 ? rc : (int)n + rc;
    }
    uint32_t acc = 0;
    int bits = 0;
    size_t i;
    for (i = 0; i < len && p[i] != '='; i++) {
        int v = b64val(p[i]);
        if (v < 0)
            return -EINVAL;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n >= max)
                return -E2BIG;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    for (; i < len; i++)
        if (p[i] != '=')
            return -EINVAL;
    return n ? (int)n : -EINVAL;
}

void iscsi_chap_encode_hex(const uint8_t *in, size_t len, char *out, size_t outlen)
{
    static const char digits[] = "0123456789abcdef";
    if (outlen < 2 * len + 3) {
        if (outlen)
            out[0] = '\0';
        return;
    }
    out[0] = '0';
    out[1] = 'x';
    for (size_t i = 0; i < len; i++) {
        out[2 + 2 * i] = digits[in[i] >> 4];
        out[3 + 2 * i] = digits[in[i] & 15];
    }
    out[2 + 2 * len] = '\0';
}

bool iscsi_chap_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
    uint8_t d = 0;
    for (size_t i = 0; i < len; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

int iscsi_chap_random(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
