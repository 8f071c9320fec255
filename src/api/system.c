/*
 * system.info, system.version, system.version_short, system.product_type,
 * system.ready, system.state: what TrueNAS clients read to learn which
 * server and which API level they talk to. blockd names itself (product
 * "blockd", its own version) and the TrueNAS API level whose shapes it
 * follows (SYSTEM_API_LEVEL), so a client can tell it from a TrueNAS and
 * still decide what it may call.
 */
#include "api/system.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "core/util.h"

/* The TrueNAS release whose API (methods, rows, errors) blockd follows. */
#define SYSTEM_API_LEVEL "25.10.0"

static time_t started;

/* "blockd-0.1.0 (TrueNAS API 25.10.0)": TrueNAS answers
 * "TrueNAS-SCALE-25.10.0"; clients show it, none parse it further. */
static int sys_version(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = json_string("blockd-" BLOCKD_VERSION " (TrueNAS API " SYSTEM_API_LEVEL ")");
    return 0;
}

/* The API level, as TrueNAS's system.version_short ("25.10.0"): what
 * clients compare to decide which methods exist. */
static int sys_version_short(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = json_string(SYSTEM_API_LEVEL);
    return 0;
}

static int sys_product_type(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = json_string("BLOCKD");
    return 0;
}

static int sys_ready(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = json_true(); /* the API answers only once blockd is ready */
    return 0;
}

static int sys_state(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = json_string("READY");
    return 0;
}

/* TrueNAS's system.info keys that describe this machine and server. */
static int sys_info(struct api_call *call, json_t *params, json_t **result)
{
    struct utsname u;
    struct sysinfo si;
    char host[256] = "";
    (void)params;

    if (uname(&u) < 0 || sysinfo(&si) < 0)
        return api_error(call, errno, "cannot read the system's information");
    gethostname(host, sizeof(host) - 1);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *result = json_pack(
        "{s:s, s:s, s:s, s:s, s:I, s:s, s:i, s:i, s:I, s:f, s:[f,f,f], s:s, s:n, s:n, s:b, "
        "s:{s:I}, s:{s:I}, s:s}",
        "version", "blockd-" BLOCKD_VERSION " (TrueNAS API " SYSTEM_API_LEVEL ")", "product",
        "blockd", "product_type", "BLOCKD", "api_level", SYSTEM_API_LEVEL, "physmem",
        (json_int_t)si.totalram * (json_int_t)si.mem_unit, "model", u.machine, "cores",
        (int)(cores > 0 ? cores : 1), "physical_cores", (int)(cores > 0 ? cores : 1),
        "uptime_seconds", (json_int_t)si.uptime, "uptime_daemon",
        started ? difftime(time(NULL), started) : 0.0, "loadavg", si.loads[0] / 65536.0,
        si.loads[1] / 65536.0, si.loads[2] / 65536.0, "hostname", host, "system_serial",
        "system_product", "ecc_memory", false, "buildtime", "$date", (json_int_t)0, "datetime",
        "$date", (json_int_t)time(NULL) * 1000, "timezone", "UTC");
    return *result ? 0 : api_error(call, ENOMEM, "out of memory");
}

static const struct api_method system_methods[] = {
    {"system.info", NULL, "This server: product blockd, its version and TrueNAS API level, host",
     sys_info, API_READ, NULL, 0},
    {"system.version", NULL, "\"blockd-<version> (TrueNAS API <level>)\"", sys_version, API_READ,
     NULL, 0},
    {"system.version_short", NULL, "The TrueNAS API level blockd follows (\"25.10.0\")",
     sys_version_short, API_READ, NULL, 0},
    {"system.product_type", NULL, "\"BLOCKD\" (TrueNAS answers COMMUNITY_EDITION or ENTERPRISE)",
     sys_product_type, API_READ, NULL, 0},
    {"system.ready", NULL, "true once blockd serves its API", sys_ready, API_READ, NULL, 0},
    {"system.state", NULL, "\"READY\"", sys_state, API_READ, NULL, 0},
};

void system_init(void)
{
    started = time(NULL);
    api_register(system_methods, ARRAY_SIZE(system_methods));
}
