/* Unit tests for the NVMe reservation rules and their saved form
 * (src/nvme/nvme_resv.c): each command's effect on a state, the text form
 * round trip, a malformed text refused, the extended report's layout, and
 * the store called only while Persist Through Power Loss is on. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nvme/nvme_internal.h"
#include "nvme/nvme_resv.h"
#include "nvme/nvme_resv_priv.h"

#define H1 0x11
#define H2 0x22

static struct resv_args args(uint8_t op, uint8_t host, uint8_t action, uint8_t rtype,
                             uint64_t crkey, uint64_t nrkey)
{
    struct resv_args a = {
        .op = op, .action = action, .rtype = rtype, .crkey = crkey, .nrkey = nrkey};
    memset(a.hostid, host, sizeof(a.hostid));
    return a;
}

static uint16_t reg(struct resv_state *s, uint8_t host, uint64_t key)
{
    struct resv_args a = args(NVME_IO_RESV_REGISTER, host, 0, 0, 0, key);
    return resv_apply(s, &a);
}

static uint16_t acquire(struct resv_state *s, uint8_t host, uint8_t action, uint8_t rtype,
                        uint64_t crkey, uint64_t prkey)
{
    struct resv_args a = args(NVME_IO_RESV_ACQUIRE, host, action, rtype, crkey, prkey);
    return resv_apply(s, &a);
}

static uint16_t release(struct resv_state *s, uint8_t host, uint8_t action, uint8_t rtype,
                        uint64_t crkey)
{
    struct resv_args a = args(NVME_IO_RESV_RELEASE, host, action, rtype, crkey, 0);
    return resv_apply(s, &a);
}

static void test_register(void **state)
{
    (void)state;
    struct resv_state s = {0};
    assert_int_equal(reg(&s, H1, 5), 0);
    assert_int_equal(reg(&s, H1, 5), 0);                     /* same key: no change */
    assert_int_equal(reg(&s, H1, 6), NVME_SC_RESV_CONFLICT); /* another key */
    assert_int_equal(s.nregs, 1);
    assert_int_equal(s.gen, 1);
    struct resv_args p = args(NVME_IO_RESV_REGISTER, H1, 0, 0, 0, 5);
    p.cptpl = 3; /* the same key with CPTPL: persistence changes */
    assert_int_equal(resv_apply(&s, &p), 0);
    assert_true(s.ptpl);
    struct resv_args a = args(NVME_IO_RESV_REGISTER, H1, 2, 0, 9, 7); /* replace, bad key */
    assert_int_equal(resv_apply(&s, &a), NVME_SC_RESV_CONFLICT);
    a.iekey = true;
    assert_int_equal(resv_apply(&s, &a), 0);
    assert_true(s.regs[0].key == 7);
    a = args(NVME_IO_RESV_REGISTER, H1, 1, 0, 7, 0); /* unregister */
    assert_int_equal(resv_apply(&s, &a), 0);
    assert_int_equal(s.nregs, 0);
    a = args(NVME_IO_RESV_REGISTER, H1, 5, 0, 0, 1); /* RREGA 101b: reserved */
    assert_int_equal(resv_apply(&s, &a), NVME_SC_INVALID_FIELD);
}

static void test_acquire_release(void **state)
{
    (void)state;
    struct resv_state s = {0};
    assert_int_equal(reg(&s, H1, 1), 0);
    assert_int_equal(reg(&s, H2, 2), 0);
    assert_int_equal(acquire(&s, H1, 0, 0, 1, 0), NVME_SC_INVALID_FIELD); /* type 0 */
    assert_int_equal(acquire(&s, H1, 0, 1, 1, 0), 0);
    assert_int_equal(acquire(&s, H1, 0, 2, 1, 0), NVME_SC_RESV_CONFLICT); /* other type */
    assert_int_equal(acquire(&s, H2, 0, 1, 2, 0), NVME_SC_RESV_CONFLICT);
    assert_int_equal(release(&s, H2, 0, 1, 2), 0); /* not the holder: no effect */
    assert_int_equal(s.type, 1);
    assert_int_equal(release(&s, H1, 0, 2, 1), NVME_SC_INVALID_FIELD); /* wrong type */
    assert_int_equal(release(&s, H1, 0, 1, 1), 0);
    assert_int_equal(s.type, 0);
    /* All registrants: any registrant releases it for all. */
    assert_int_equal(acquire(&s, H1, 0, 6, 1, 0), 0);
    assert_int_equal(acquire(&s, H2, 0, 6, 2, 0), 0); /* already a holder */
    assert_int_equal(release(&s, H2, 0, 6, 2), 0);
    assert_int_equal(s.type, 0);
    /* Clear: everything goes, and generation moves. */
    uint32_t gen = s.gen;
    assert_int_equal(acquire(&s, H1, 0, 3, 1, 0), 0);
    assert_int_equal(release(&s, H2, 1, 0, 2), 0);
    assert_int_equal(s.nregs, 0);
    assert_int_equal(s.type, 0);
    assert_true(s.gen > gen);
}

static void test_preempt(void **state)
{
    (void)state;
    struct resv_state s = {0};
    assert_int_equal(reg(&s, H1, 1), 0);
    assert_int_equal(reg(&s, H2, 2), 0);
    assert_int_equal(acquire(&s, H1, 0, 1, 1, 0), 0);
    assert_int_equal(acquire(&s, H2, 1, 2, 2, 0), NVME_SC_INVALID_FIELD); /* PRKEY 0 */
    assert_int_equal(acquire(&s, H2, 1, 2, 2, 9), NVME_SC_RESV_CONFLICT); /* no such key */
    assert_int_equal(acquire(&s, H2, 2, 2, 2, 1), 0); /* preempt and abort the holder */
    assert_int_equal(s.nregs, 1);
    assert_int_equal(s.type, 2);
    assert_int_equal(s.holder[0], H2);
    /* Unregistering the holder of a non-all-registrants type releases. */
    struct resv_args a = args(NVME_IO_RESV_REGISTER, H2, 1, 0, 2, 0);
    assert_int_equal(resv_apply(&s, &a), 0);
    assert_int_equal(s.type, 0);
}

static void test_text_and_report(void **state)
{
    (void)state;
    struct resv_state s = {0}, back;
    assert_int_equal(reg(&s, H1, 0x1122334455667788ull), 0);
    assert_int_equal(reg(&s, H2, 2), 0);
    assert_int_equal(acquire(&s, H2, 0, 4, 2, 0), 0);
    s.ptpl = true;
    char *t = resv_format(&s, 42);
    uint64_t seq = 0;
    assert_int_equal(resv_parse(&back, t, &seq), 0);
    free(t);
    assert_true(seq == 42);
    assert_memory_equal(&back, &s, offsetof(struct resv_state, regs));
    assert_memory_equal(back.regs, s.regs, 2 * sizeof(s.regs[0]));
    assert_int_equal(resv_parse(&back, "nvme-resv 1\nbogus line\n", NULL), -EINVAL);
    assert_int_equal(resv_parse(&back, "reg zz 1\n", NULL), -EINVAL);

    uint8_t rep[192];
    memset(rep, 0, sizeof(rep));
    resv_report_fill(&s, rep, sizeof(rep));
    assert_int_equal(le32_get(rep), s.gen);
    assert_int_equal(rep[4], 4);                  /* RTYPE */
    assert_int_equal(le16_get(rep + 5), 2);       /* REGCTL */
    assert_int_equal(rep[9], 1);                  /* PTPLS */
    assert_int_equal(le16_get(rep + 64), 0xffff); /* CNTLID: dynamic model */
    assert_int_equal(rep[64 + 2], 0);             /* H1 does not hold */
    assert_true(le64_get(rep + 64 + 8) == 0x1122334455667788ull);
    assert_int_equal(rep[64 + 16], H1);
    assert_int_equal(rep[128 + 2], 1); /* H2 holds */
}

/* A store that remembers what it was given. */
static char *saved;
static int saves;
static int st_load(int64_t id, char **text)
{
    (void)id;
    *text = saved ? strdup(saved) : NULL;
    return 0;
}
static int st_save(int64_t id, const char *text)
{
    (void)id;
    free(saved);
    saved = text ? strdup(text) : NULL;
    saves++;
    return 0;
}

static void test_store(void **state)
{
    (void)state;
    nvme_resv_set_store(&(struct nvme_resv_store){.load = st_load, .save = st_save});
    struct resv_state s = {0};
    assert_int_equal(reg(&s, H1, 1), 0);
    assert_int_equal(acquire(&s, H1, 0, 2, 1, 0), 0);
    s.ptpl = true;
    saved = resv_format(&s, 0);
    struct nvme_resv *r = nvme_resv_get(7);
    assert_non_null(r);
    assert_int_equal(nvme_resv_check(r, (uint8_t[16]){H2}, false), NVME_SC_RESV_CONFLICT);
    assert_int_equal(nvme_resv_check(r, (uint8_t[16]){[0 ... 15] = H1}, true), 0);
    assert_ptr_equal(nvme_resv_get(7), r); /* one object per namespace row */
    nvme_resv_unref(r);
    nvme_resv_unref(r);
    nvme_resv_forget(7);
    assert_null(saved);
    /* A saved state without PTPL is not loaded. */
    s.ptpl = false;
    saved = resv_format(&s, 0);
    r = nvme_resv_get(8);
    assert_int_equal(nvme_resv_check(r, (uint8_t[16]){H2}, true), 0);
    nvme_resv_unref(r);
    free(saved);
    saved = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register), cmocka_unit_test(test_acquire_release),
        cmocka_unit_test(test_preempt),  cmocka_unit_test(test_text_and_report),
        cmocka_unit_test(test_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
