/* Encrypted storage of secrets the daemon needs in cleartext (see pwenc.h). */
#include "control/pwenc.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"

#define KEY_LEN 32
#define NONCE_LEN 12
#define TAG_LEN 16
#define KEY_FILE "pwenc.key"
/* Binds a value to its purpose: a sealed value of another kind (a future
 * user of this module) does not open as a CHAP secret. */
static const char aad[] = "blockd pwenc v1";

static uint8_t key[KEY_LEN];
static bool have_key;

static int read_full(int fd, uint8_t *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EBADMSG;
        got += (size_t)n;
    }
    return 0;
}

static int key_load(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0)
        rc = -errno;
    else if (!S_ISREG(st.st_mode) || st.st_size != KEY_LEN) {
        log_error("pwenc: %s is not a %d-byte regular file", path, KEY_LEN);
        rc = -EBADMSG;
    } else if (st.st_uid != geteuid()) {
        log_error("pwenc: %s belongs to uid %u, not to blockd (uid %u)", path, (unsigned)st.st_uid,
                  (unsigned)geteuid());
        rc = -EPERM;
    } else {
        if (st.st_mode & 077) {
            /* Someone else could have read it: say so, and close it now. */
            log_warn("pwenc: %s was readable by others (mode %03o); now 0600", path,
                     (unsigned)(st.st_mode & 0777));
            if (fchmod(fd, 0600) < 0)
                log_warn("pwenc: chmod 0600 %s: %s", path, strerror(errno));
        }
        rc = read_full(fd, key, KEY_LEN);
    }
    close(fd);
    return rc;
}

static int key_create(const char *dir, const char *path)
{
    if (gnutls_rnd(GNUTLS_RND_KEY, key, KEY_LEN) < 0) {
        log_error("pwenc: random number generator failed");
        return -EIO;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = 0;
    size_t done = 0;
    while (done < KEY_LEN && rc == 0) {
        ssize_t n = write(fd, key + done, KEY_LEN - done);
        if (n < 0 && errno != EINTR)
            rc = -errno;
        else if (n > 0)
            done += (size_t)n;
    }
    /* The key must be on disk before any value sealed with it is. */
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    close(fd);
    if (rc == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) < 0)
                rc = -errno;
            close(dfd);
        }
    }
    if (rc < 0)
        unlink(path);
    return rc;
}

int pwenc_init(const char *state_dir)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", state_dir, KEY_FILE) >= sizeof(path))
        return -ENAMETOOLONG;
    int rc = key_load(path);
    if (rc == -ENOENT) {
        rc = key_create(state_dir, path);
        if (rc == 0)
            log_info("pwenc: created the secrets key %s", path);
        else if (rc == -EEXIST) /* raced with nobody (the state dir is locked) */
            rc = key_load(path);
    }
    if (rc < 0) {
        explicit_bzero(key, sizeof(key));
        log_error("pwenc: cannot use the secrets key %s: %s", path, strerror(-rc));
        return rc;
    }
    have_key = true;
    return 0;
}

void pwenc_fini(void)
{
    explicit_bzero(key, sizeof(key));
    have_key = false;
}

bool pwenc_is_sealed(const char *stored)
{
    return strncmp(stored, PWENC_PREFIX, sizeof(PWENC_PREFIX) - 1) == 0;
}

static int cipher_open(gnutls_aead_cipher_hd_t *h)
{
    if (!have_key)
        return -ENOKEY;
    gnutls_datum_t k = {.data = key, .size = KEY_LEN};
    return gnutls_aead_cipher_init(h, GNUTLS_CIPHER_AES_256_GCM, &k) < 0 ? -EIO : 0;
}

int pwenc_seal(const char *plain, char *out, size_t len)
{
    size_t pl = strlen(plain);
    if (pl == 0) {
        if (len)
            out[0] = 0;
        return 0;
    }
    if (pl >= PWENC_PLAIN_MAX || len < PWENC_SEALED_MAX)
        return -E2BIG;
    gnutls_aead_cipher_hd_t h;
    int rc = cipher_open(&h);
    if (rc < 0)
        return rc;
    uint8_t buf[NONCE_LEN + PWENC_PLAIN_MAX + TAG_LEN];
    size_t clen = sizeof(buf) - NONCE_LEN;
    if (gnutls_rnd(GNUTLS_RND_NONCE, buf, NONCE_LEN) < 0 ||
        gnutls_aead_cipher_encrypt(h, buf, NONCE_LEN, aad, sizeof(aad) - 1, TAG_LEN, plain, pl,
                                   buf + NONCE_LEN, &clen) < 0)
        rc = -EIO;
    gnutls_aead_cipher_deinit(h);
    if (rc < 0)
        return rc;
    static const char digits[] = "0123456789abcdef";
    size_t n = NONCE_LEN + clen, o = sizeof(PWENC_PREFIX) - 1;
    memcpy(out, PWENC_PREFIX, o);
    for (size_t i = 0; i < n; i++) {
        out[o++] = digits[buf[i] >> 4];
        out[o++] = digits[buf[i] & 15];
    }
    out[o] = 0;
    return 0;
}

int pwenc_open(const char *stored, char *out, size_t len)
{
    if (!pwenc_is_sealed(stored)) {
        if ((size_t)snprintf(out, len, "%s", stored) >= len) {
            explicit_bzero(out, len);
            return -E2BIG;
        }
        return 0;
    }
    const char *hex = stored + sizeof(PWENC_PREFIX) - 1;
    size_t hl = strlen(hex);
    uint8_t buf[NONCE_LEN + PWENC_PLAIN_MAX + TAG_LEN];
    if (hl % 2 || hl / 2 <= NONCE_LEN + TAG_LEN || hl / 2 > sizeof(buf))
        return -EBADMSG;
    if (hex_decode(hex, hl, buf, sizeof(buf)) < 0)
        return -EBADMSG;
    size_t n = hl / 2;
    if (len < n - NONCE_LEN - TAG_LEN + 1)
        return -E2BIG;
    gnutls_aead_cipher_hd_t h;
    int rc = cipher_open(&h);
    if (rc < 0)
        return rc;
    size_t pl = len - 1;
    if (gnutls_aead_cipher_decrypt(h, buf, NONCE_LEN, aad, sizeof(aad) - 1, TAG_LEN,
                                   buf + NONCE_LEN, n - NONCE_LEN, out, &pl) < 0)
        rc = -EBADMSG;
    gnutls_aead_cipher_deinit(h);
    if (rc < 0) {
        explicit_bzero(out, len);
        return rc;
    }
    out[pl] = 0;
    /* CHAP secrets are text: an embedded NUL would cut the secret short. */
    if (strlen(out) != pl) {
        explicit_bzero(out, len);
        return -EBADMSG;
    }
    return 0;
}
