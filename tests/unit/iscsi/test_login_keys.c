/* Login text parsing and the key negotiation rules (RFC 7143 §6, §13). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "iscsi/iscsi_text.h"

/* Negotiate one key and return the answer value ("" if none). */
static const char *neg(struct iscsi_neg *n, const char *key, const char *value, int *rc)
{
    static char answer[256];
    struct iscsi_text_out out;
    iscsi_text_out_init(&out, 4096);
    *rc = iscsi_neg_key(n, key, value, &out);
    answer[0] = '\0';
    if (out.len) {
        const char *eq = strchr(out.buf, '=');
        assert_non_null(eq);
        assert_int_equal((size_t)(eq - out.buf), strlen(key));
        assert_memory_equal(out.buf, key, strlen(key));
        snprintf(answer, sizeof(answer), "%s", eq + 1);
    }
    iscsi_text_out_free(&out);
    return answer;
}

static void test_bool_rules(void **state)
{
    (void)state;
    struct iscsi_neg n;
    int rc;
    iscsi_neg_init(&n, NULL);
    /* InitialR2T is OR, we say No: the result follows the initiator. */
    assert_string_equal(neg(&n, "InitialR2T", "No", &rc), "No");
    assert_false(n.params.initial_r2t);
    iscsi_neg_init(&n, NULL);
    assert_string_equal(neg(&n, "InitialR2T", "Yes", &rc), "Yes");
    assert_true(n.params.initial_r2t);
    /* ImmediateData is AND, we say Yes. */
    assert_string_equal(neg(&n, "ImmediateData", "No", &rc), "No");
    assert_false(n.params.immediate_data);
    iscsi_neg_init(&n, NULL);
    assert_string_equal(neg(&n, "ImmediateData", "Yes", &rc), "Yes");
    /* DataPDUInOrder / DataSequenceInOrder are OR, we say Yes. */
    assert_string_equal(neg(&n, "DataPDUInOrder", "No", &rc), "Yes");
    assert_string_equal(neg(&n, "DataSequenceInOrder", "No", &rc), "Yes");
    /* Markers are AND with our No. */
    assert_string_equal(neg(&n, "OFMarker", "Yes", &rc), "No");
    assert_string_equal(neg(&n, "IFMarker", "No", &rc), "No");
    assert_string_equal(neg(&n, "OFMarkInt", "2048~8192", &rc), "Irrelevant");
    /* A boolean must be Yes or No. */
    iscsi_neg_init(&n, NULL);
    assert_string_equal(neg(&n, "ImmediateData", "yes", &rc), "Reject");
    assert_string_equal(neg(&n, "InitialR2T", "", &rc), "Reject");
    assert_true(n.params.initial_r2t); /* unchanged default */
}

static void test_numeric_rules(void **state)
{
    (void)state;
    struct iscsi_neg n;
    int rc;
    iscsi_neg_init(&n, NULL);
    /* MaxBurstLength: min(offered, ours). */
    assert_string_equal(neg(&n, "MaxBurstLength", "262144", &rc), "262144");
    assert_int_equal(n.params.max_burst, 262144);
    /* FirstBurstLength above MaxBurstLength is clamped at finish. */
    assert_string_equal(neg(&n, "FirstBurstLength", "1048576", &rc), "1048576");
    iscsi_neg_finish(&n);
    assert_int_equal(n.params.first_burst, 262144);
    /* DefaultTime2Wait is max(offered, ours = 0); Time2Retain is min. */
    assert_string_equal(neg(&n, "DefaultTime2Wait", "2", &rc), "2");
    assert_string_equal(neg(&n, "DefaultTime2Retain", "20", &rc), "0");
    /* MaxConnections: we support one. ErrorRecoveryLevel: 0 only. */
    assert_string_equal(neg(&n, "MaxConnections", "8", &rc), "1");
    assert_string_equal(neg(&n, "ErrorRecoveryLevel", "2", &rc), "0");
    assert_string_equal(neg(&n, "MaxOutstandingR2T", "0x20", &rc), "16");
    /* Out of range / malformed numbers are rejected. */
    iscsi_neg_init(&n, NULL);
    assert_string_equal(neg(&n, "MaxBurstLength", "511", &rc), "Reject");
    assert_string_equal(neg(&n, "FirstBurstLength", "16777216", &rc), "Reject");
    assert_string_equal(neg(&n, "DefaultTime2Wait", "3601", &rc), "Reject");
    assert_string_equal(neg(&n, "MaxOutstandingR2T", "0", &rc), "Reject");
    assert_string_equal(neg(&n, "ErrorRecoveryLevel", "-1", &rc), "Reject");
    assert_string_equal(neg(&n, "MaxConnections", "12abc", &rc), "Reject");
    assert_string_equal(neg(&n, "DefaultTime2Retain", "99999999999999999999999", &rc), "Reject");
    assert_int_equal(n.params.max_burst, 262144); /* defaults kept */
    assert_int_equal(n.params.first_burst, 65536);
}

static void test_declarative_and_lists(void **state)
{
    (void)state;
    struct iscsi_neg n;
    int rc;
    struct iscsi_target_limits lim;
    iscsi_target_limits_default(&lim);
    lim.max_recv_dsl = 131072;
    iscsi_neg_init(&n, &lim);
    /* The initiator declares its own; we answer with ours. */
    assert_string_equal(neg(&n, "MaxRecvDataSegmentLength", "65536", &rc), "131072");
    assert_int_equal(n.params.max_send_dsl, 65536);
    assert_int_equal(n.params.max_recv_dsl, 131072);
    assert_true(n.sent_mrdsl);
    iscsi_neg_init(&n, &lim);
    assert_string_equal(neg(&n, "MaxRecvDataSegmentLength", "100", &rc), "Reject");
    /* Digest lists: first supported value of the initiator's list. */
    assert_string_equal(neg(&n, "HeaderDigest", "CRC32C,None", &rc), "CRC32C");
    assert_true(n.params.header_digest);
    assert_string_equal(neg(&n, "DataDigest", "None,CRC32C", &rc), "None");
    assert_false(n.params.data_digest);
    iscsi_neg_init(&n, &lim);
    assert_string_equal(neg(&n, "HeaderDigest", "MD5,Foo", &rc), "Reject");
    lim.allow_digests = false;
    iscsi_neg_init(&n, &lim);
    assert_string_equal(neg(&n, "DataDigest", "CRC32C,None", &rc), "None");
    assert_string_equal(neg(&n, "HeaderDigest", "CRC32C", &rc), "Reject");
}

static void test_unknown_duplicate_login_keys(void **state)
{
    (void)state;
    struct iscsi_neg n;
    int rc;
    iscsi_neg_init(&n, NULL);
    assert_string_equal(neg(&n, "X-com.example.Foo", "1", &rc), "NotUnderstood");
    assert_int_equal(rc, 0);
    assert_string_equal(neg(&n, "Bogus", "1", &rc), "NotUnderstood");
    /* Keys only a target sends. */
    assert_string_equal(neg(&n, "TargetPortalGroupTag", "1", &rc), "Reject");
    /* Login keys go back to the caller. */
    assert_string_equal(neg(&n, "InitiatorName", "iqn.x", &rc), "");
    assert_int_equal(rc, 1);
    assert_string_equal(neg(&n, "CHAP_A", "5", &rc), "");
    assert_int_equal(rc, 1);
    /* A key offered twice fails the negotiation. */
    neg(&n, "MaxBurstLength", "65536", &rc);
    assert_int_equal(rc, 0);
    neg(&n, "MaxBurstLength", "65536", &rc);
    assert_int_equal(rc, -EPROTO);
    assert_true(iscsi_key_known("HeaderDigest"));
    assert_false(iscsi_key_known("headerdigest")); /* case-sensitive */
}

struct collect {
    char keys[16][64];
    char values[16][64];
    int n;
};

static int collect_fn(const char *key, const char *value, void *arg)
{
    struct collect *c = arg;
    if (c->n >= 16)
        return -E2BIG;
    snprintf(c->keys[c->n], 64, "%s", key);
    snprintf(c->values[c->n], 64, "%s", value);
    c->n++;
    return 0;
}

static void test_text_parse(void **state)
{
    (void)state;
    struct collect c = {0};
    static const char ok[] = "InitiatorName=iqn.a\0SessionType=Normal\0Empty=\0\0\0";
    assert_int_equal(iscsi_text_parse(ok, sizeof(ok) - 1, collect_fn, &c), 0);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.keys[0], "InitiatorName");
    assert_string_equal(c.values[0], "iqn.a");
    assert_string_equal(c.values[2], "");
    /* Not NUL-terminated at the end: still parsed. */
    memset(&c, 0, sizeof(c));
    static const char unterminated[] = {'A', '=', 'b'};
    assert_int_equal(iscsi_text_parse(unterminated, 3, collect_fn, &c), 0);
    assert_string_equal(c.values[0], "b");
    /* Malformed pairs. */
    static const char noeq[] = "JustAKey\0";
    assert_int_equal(iscsi_text_parse(noeq, sizeof(noeq) - 1, collect_fn, &c), -EINVAL);
    static const char nokey[] = "=value\0";
    assert_int_equal(iscsi_text_parse(nokey, sizeof(nokey) - 1, collect_fn, &c), -EINVAL);
    static const char badchar[] = "Key Space=1\0";
    assert_int_equal(iscsi_text_parse(badchar, sizeof(badchar) - 1, collect_fn, &c), -EINVAL);
    char longkey[100];
    memset(longkey, 'K', 70);
    memcpy(longkey + 70, "=1", 3);
    assert_int_equal(iscsi_text_parse(longkey, 73, collect_fn, &c), -EINVAL);
    /* Numbers. */
    uint64_t v;
    assert_int_equal(iscsi_parse_u64("0x1F", &v), 0);
    assert_int_equal(v, 31);
    assert_int_equal(iscsi_parse_u64("", &v), -EINVAL);
    assert_int_equal(iscsi_parse_u64("0x", &v), -ERANGE);
    assert_int_equal(iscsi_parse_u64("+5", &v), -EINVAL);
    /* Output cap. */
    struct iscsi_text_out out;
    iscsi_text_out_init(&out, 10);
    assert_int_equal(iscsi_text_add(&out, "A", "1234"), 0); /* 7 bytes */
    assert_int_equal(iscsi_text_add(&out, "B", "1"), -E2BIG);
    assert_int_equal(out.len, 7);
    iscsi_text_out_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bool_rules),
        cmocka_unit_test(test_numeric_rules),
        cmocka_unit_test(test_declarative_and_lists),
        cmocka_unit_test(test_unknown_duplicate_login_keys),
        cmocka_unit_test(test_text_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
