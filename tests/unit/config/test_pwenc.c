/*
 * control/pwenc.c: the secrets key file (created 0600 once, reused, its
 * mode corrected), seal/open round trips, fresh nonces, tamper and
 * wrong-key detection, cleartext rows from older versions passed through.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/pwenc.h"

static char dir[] = "/tmp/blockd-test-pwenc.XXXXXX";
static char keypath[256];

static void test_no_key(void **state)
{
    char out[PWENC_SEALED_MAX];
    pwenc_fini();
    assert_int_equal(pwenc_seal("abcdefghijkl", out, sizeof(out)), -ENOKEY);
}

static void test_roundtrip(void **state)
{
    assert_int_equal(pwenc_init(dir), 0);
    struct stat st;
    assert_int_equal(stat(keypath, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 32);

    char a[PWENC_SEALED_MAX], b[PWENC_SEALED_MAX], plain[PWENC_PLAIN_MAX];
    assert_int_equal(pwenc_seal("chapsecret123", a, sizeof(a)), 0);
    assert_true(pwenc_is_sealed(a));
    assert_null(strstr(a, "chapsecret123"));
    assert_int_equal(pwenc_seal("chapsecret123", b, sizeof(b)), 0);
    assert_string_not_equal(a, b); /* a fresh nonce each time */
    assert_int_equal(pwenc_open(a, plain, sizeof(plain)), 0);
    assert_string_equal(plain, "chapsecret123");
    assert_int_equal(pwenc_open(b, plain, sizeof(plain)), 0);
    assert_string_equal(plain, "chapsecret123");

    /* "" means not set and stays "" */
    assert_int_equal(pwenc_seal("", a, sizeof(a)), 0);
    assert_string_equal(a, "");
    /* cleartext from an older blockd opens as it is */
    assert_false(pwenc_is_sealed("oldcleartext1"));
    assert_int_equal(pwenc_open("oldcleartext1", plain, sizeof(plain)), 0);
    assert_string_equal(plain, "oldcleartext1");

    /* any altered digit fails the tag */
    assert_int_equal(pwenc_seal("chapsecret123", a, sizeof(a)), 0);
    size_t n = strlen(a);
    for (size_t i = sizeof(PWENC_PREFIX) - 1; i < n; i += 7) {
        char c = a[i];
        a[i] = c == '0' ? '1' : '0';
        assert_int_equal(pwenc_open(a, plain, sizeof(plain)), -EBADMSG);
        a[i] = c;
    }
    assert_int_equal(pwenc_open("$pwenc1$zz", plain, sizeof(plain)), -EBADMSG);
    assert_int_equal(pwenc_open("$pwenc1$00", plain, sizeof(plain)), -EBADMSG);

    /* the same key after a restart; a readable key file is closed */
    assert_int_equal(chmod(keypath, 0644), 0);
    pwenc_fini();
    assert_int_equal(pwenc_init(dir), 0);
    assert_int_equal(stat(keypath, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(pwenc_open(b, plain, sizeof(plain)), 0);
    assert_string_equal(plain, "chapsecret123");

    /* another key cannot open it */
    pwenc_fini();
    unlink(keypath);
    assert_int_equal(pwenc_init(dir), 0);
    assert_int_equal(pwenc_open(b, plain, sizeof(plain)), -EBADMSG);
    assert_string_equal(plain, "");

    /* a key file of the wrong size is refused, not replaced */
    pwenc_fini();
    FILE *f = fopen(keypath, "w");
    fputs("short", f);
    fclose(f);
    assert_true(pwenc_init(dir) < 0);
    unlink(keypath);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    snprintf(keypath, sizeof(keypath), "%s/pwenc.key", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_key),
        cmocka_unit_test(test_roundtrip),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(keypath);
    rmdir(dir);
    return rc;
}
