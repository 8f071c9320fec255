/* The stored iSCSI global settings (global_store.h). */
#include "iscsi/config/global_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/config_internal.h"

#define KEY_BASENAME "iscsi.global.basename"
#define KEY_PORT "iscsi.global.listen_port"
#define KEY_ISNS "iscsi.global.isns_servers"

char *icfg_global_basename(void)
{
    char *v = NULL;
    if (db_setting_get(KEY_BASENAME, &v) < 0 || !v)
        return strdup(ICFG_DEFAULT_BASENAME);
    return v;
}

int icfg_global_listen_port(void)
{
    char *v = NULL;
    int port = ICFG_DEFAULT_PORT;
    if (db_setting_get(KEY_PORT, &v) == 0 && v) {
        char *end;
        long p = strtol(v, &end, 10);
        if (*end == '\0' && p > 0 && p <= 65535)
            port = (int)p;
    }
    free(v);
    return port;
}

void icfg_global_clear(struct icfg_global *g)
{
    free(g->basename);
    api_strv_clear(&g->isns_servers);
    memset(g, 0, sizeof(*g));
}

int icfg_global_get(struct icfg_global *out)
{
    char *isns = NULL;
    memset(out, 0, sizeof(*out));
    out->basename = icfg_global_basename();
    out->listen_port = icfg_global_listen_port();
    int rc = out->basename ? 0 : -ENOMEM;
    if (rc == 0 && db_setting_get(KEY_ISNS, &isns) == 0 && isns)
        rc = icfg_strv_from_text(isns, &out->isns_servers);
    free(isns);
    return rc;
}

int icfg_global_set_basename(const char *basename)
{
    return db_setting_set(KEY_BASENAME, basename);
}

int icfg_global_set_listen_port(int port)
{
    char buf[16];
    snprintf(buf, sizeof(buf), "%d", port);
    return db_setting_set(KEY_PORT, buf);
}

int icfg_global_set_isns(const struct api_strv *servers)
{
    char *text = icfg_strv_to_text(servers);
    int rc = text ? db_setting_set(KEY_ISNS, text) : -ENOMEM;
    free(text);
    return rc;
}
