/*
 * api_thread_background / boost / unboost: API threads run SCHED_IDLE
 * (default) or nice 10 ("low"), and hold data-path locks at normal priority.
 * Raising the priority back needs CAP_SYS_NICE: skipped checks say so.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/api.h"

struct seen {
    int policy_bg, policy_boost, policy_unboost;
    int nice_bg, nice_boost, nice_unboost;
};

static int my_nice(void)
{
    errno = 0;
    return getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
}

static void *thread(void *p)
{
    struct seen *s = p;
    api_thread_background();
    s->policy_bg = sched_getscheduler(0);
    s->nice_bg = my_nice();
    api_thread_boost();
    s->policy_boost = sched_getscheduler(0);
    s->nice_boost = my_nice();
    api_thread_unboost();
    s->policy_unboost = sched_getscheduler(0);
    s->nice_unboost = my_nice();
    return NULL;
}

static struct seen run(void)
{
    struct seen s = {0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thread, &s), 0);
    pthread_join(t, NULL);
    return s;
}

static void test_policies(void **state)
{
    bool privileged = geteuid() == 0;

    assert_int_equal(api_set_thread_priority("bogus"), -EINVAL);

    assert_int_equal(api_set_thread_priority("idle"), 0);
    struct seen s = run();
    assert_int_equal(s.policy_bg, SCHED_IDLE);
    if (privileged)
        assert_int_equal(s.policy_boost, SCHED_OTHER);
    assert_int_equal(s.policy_unboost, SCHED_IDLE);

    /* relative to the niceness the suite runs at (0, or more under nice) */
    int base = my_nice(), low = base + 10 > 19 ? 19 : base + 10;
    assert_int_equal(api_set_thread_priority("low"), 0);
    s = run();
    assert_int_equal(s.policy_bg, SCHED_OTHER);
    assert_int_equal(s.nice_bg, low);
    if (privileged)
        assert_int_equal(s.nice_boost, base);
    assert_int_equal(s.nice_unboost, low);

    assert_int_equal(api_set_thread_priority("normal"), 0);
    s = run();
    assert_int_equal(s.policy_bg, SCHED_OTHER);
    assert_int_equal(s.nice_bg, base);
    assert_int_equal(s.nice_unboost, base);

    /* the calling (non-API) thread is untouched by boost/unboost */
    api_thread_boost();
    api_thread_unboost();
    assert_int_equal(sched_getscheduler(0), SCHED_OTHER);
    assert_int_equal(my_nice(), base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
