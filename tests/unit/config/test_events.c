/*
 * control/events: subscribers get only the event types they asked for,
 * in subscription order; a rename's EV_RENAME_UPDATE stops at the first
 * error and returns it (the rename rolls back); EV_CONFIG_* reach only the
 * subscribers of the changed kinds (all on overflow), and EV_CONFIG_AFTER
 * only those EV_CONFIG_COMMITTED reached.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "control/events.h"

static char order[16];
static size_t n_order;
static int fail_update;

static int record(const struct event *ev, void *arg)
{
    char tag = *(const char *)arg;
    if (n_order + 1 < sizeof(order))
        order[n_order++] = tag;
    order[n_order] = 0;
    if (ev->type == EV_RENAME_UPDATE && tag == 'a')
        return fail_update;
    return 0;
}

static void reset(void)
{
    n_order = 0;
    order[0] = 0;
}

static int setup(void **state)
{
    (void)state;
    static const char a = 'a', b = 'b', c = 'c';
    /* a: renames and datasets; b: datasets and NBD exports; c: iSCSI targets */
    if (events_subscribe(
            &(struct event_subscriber){.name = "a",
                                       .types = EV_BIT(EV_RENAME_UPDATE) | EV_BIT(EV_DATASET),
                                       .fn = record,
                                       .arg = (void *)&a}) < 0 ||
        events_subscribe(&(struct event_subscriber){
            .name = "b",
            .types = EV_BIT(EV_RENAME_UPDATE) | EV_BIT(EV_DATASET) | EV_BIT(EV_CONFIG_COMMITTED) |
                     EV_BIT(EV_CONFIG_AFTER),
            .config_kinds = CFG_KIND_BIT(CFG_NBD_EXPORT),
            .fn = record,
            .arg = (void *)&b}) < 0 ||
        events_subscribe(&(struct event_subscriber){.name = "c",
                                                    .types = EV_BIT(EV_CONFIG_COMMITTED) |
                                                             EV_BIT(EV_CONFIG_AFTER),
                                                    .config_kinds = CFG_KIND_BIT(CFG_ISCSI_TARGET),
                                                    .fn = record,
                                                    .arg = (void *)&c}) < 0)
        return -1;
    return 0;
}

static void test_types_and_order(void **state)
{
    (void)state;
    reset();
    assert_int_equal(
        events_emit(&(struct event){.type = EV_DATASET,
                                    .dataset = {.what = DATASETS_DELETED, .name = "demo/v"}}),
        0);
    assert_string_equal(order, "ab");
    reset();
    assert_int_equal(events_emit(&(struct event){.type = EV_RENAME_LOCK}), 0);
    assert_string_equal(order, "");
}

static void test_rename_veto(void **state)
{
    (void)state;
    struct event ev = {.type = EV_RENAME_UPDATE,
                       .rename = {.old_name = "demo/a", .new_name = "demo/b", .subtree = true}};
    reset();
    fail_update = -EIO;
    assert_int_equal(events_emit(&ev), -EIO);
    fail_update = 0;
    assert_string_equal(order, "a"); /* b never saw the rename that failed */
    reset();
    assert_int_equal(events_emit(&ev), 0);
    assert_string_equal(order, "ab");
}

static void test_config_kinds(void **state)
{
    (void)state;
    struct cfg_change one = {.kind = CFG_ISCSI_TARGET, .op = CFG_UPDATED, .id = 1};
    struct cfg_changes ch = {.v = &one, .n = 1};
    reset();
    uint32_t reached = events_config_committed(&ch, CFG_KIND_BIT(CFG_ISCSI_TARGET));
    assert_string_equal(order, "c");
    events_config_after(reached);
    assert_string_equal(order, "cc");
    reset();
    ch.overflow = true;
    reached = events_config_committed(&ch, 0);
    assert_string_equal(order, "bc");
    reset();
    events_config_after(0);
    assert_string_equal(order, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_and_order),
        cmocka_unit_test(test_rename_veto),
        cmocka_unit_test(test_config_kinds),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
