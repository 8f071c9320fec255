/* The stored iSCSI portals and their addresses (portal_store.h). */
#include "iscsi/config/portal_store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/config_internal.h"

#define PORTAL_SELECT "SELECT id, tag, comment FROM iscsi_portal"

void icfg_portal_clear(struct icfg_portal *p)
{
    free(p->comment);
    api_strv_clear(&p->listen);
    memset(p, 0, sizeof(*p));
}

static int ip_decode(sqlite3_stmt *st, void *elem)
{
    *(char **)elem = icfg_col_dup(st, 0, false);
    return *(char **)elem ? 0 : -ENOMEM;
}

static void ip_clear(void *elem)
{
    free(*(char **)elem);
}

/* The row at st (id, tag, comment) with its addresses. */
static int portal_decode_row(sqlite3_stmt *st, void *elem)
{
    struct icfg_portal *p = elem;
    p->id = sqlite3_column_int64(st, 0);
    p->tag = sqlite3_column_int64(st, 1);
    p->comment = icfg_col_dup(st, 2, false);
    p->port = icfg_global_listen_port();
    if (!p->comment)
        return -ENOMEM;
    struct icfg_key key = {.column = "portal_id",
                           .values = &(struct icfg_key_value){.is_int = true, .i = p->id},
                           .n = 1};
    void *ips;
    int rc = icfg_list("SELECT ip FROM iscsi_portal_ip", "ORDER BY rowid", &key, sizeof(char *),
                       ip_decode, ip_clear, &ips, &p->listen.n);
    p->listen.v = ips;
    return rc;
}

static void portal_clear_elem(void *elem)
{
    icfg_portal_clear(elem);
}

const struct icfg_table icfg_portal_table = {
    PORTAL_SELECT, "ORDER BY id", sizeof(struct icfg_portal), portal_decode_row, portal_clear_elem};

int icfg_portal_get(int64_t id, struct icfg_portal *out)
{
    return icfg_table_get(&icfg_portal_table, id, out);
}

static int ips_store(int64_t id, const struct api_strv *listen)
{
    int rc = icfg_run("DELETE FROM iscsi_portal_ip WHERE portal_id = ?", "i", id);
    for (size_t i = 0; rc == 0 && i < listen->n; i++)
        rc = icfg_run("INSERT INTO iscsi_portal_ip (portal_id, ip) VALUES (?, ?)", "it", id,
                      listen->v[i]);
    return rc;
}

int icfg_portal_insert(struct icfg_portal *p)
{
    int64_t count = 0;
    int rc = icfg_int(&count, "SELECT COUNT(*) FROM iscsi_portal", "");
    if (rc < 0 && rc != -ENOENT)
        return rc;
    rc = icfg_run("INSERT INTO iscsi_portal (tag, comment) VALUES (?, ?)", "it", count + 1,
                  p->comment ? p->comment : "");
    if (rc < 0)
        return rc;
    p->id = sqlite3_last_insert_rowid(db_handle());
    p->tag = count + 1;
    return ips_store(p->id, &p->listen);
}

int icfg_portal_update(const struct icfg_portal *p, bool addresses)
{
    int rc = icfg_run("UPDATE iscsi_portal SET comment = ? WHERE id = ?", "ti",
                      p->comment ? p->comment : "", p->id);
    return rc == 0 && addresses ? ips_store(p->id, &p->listen) : rc;
}

int icfg_portal_delete(int64_t id)
{
    int64_t tag;
    int rc = icfg_int(&tag, "SELECT tag FROM iscsi_portal WHERE id = ?", "i", id);
    /* As TrueNAS: the target groups on this portal go with it. */
    if (rc == 0)
        rc = icfg_run("DELETE FROM iscsi_target_group WHERE portal_id = ?", "i", id);
    if (rc == 0)
        rc = icfg_run("DELETE FROM iscsi_portal_ip WHERE portal_id = ?", "i", id);
    if (rc == 0)
        rc = icfg_run("DELETE FROM iscsi_portal WHERE id = ?", "i", id);
    if (rc == 0)
        rc = icfg_run("UPDATE iscsi_portal SET tag = tag - 1 WHERE tag > ?", "i", tag);
    return rc;
}

int icfg_portal_first(int64_t *id)
{
    return icfg_int(id, "SELECT MIN(id) FROM iscsi_portal", "");
}

int icfg_portal_find_ip(const char *ip, int64_t except_id, int64_t *id)
{
    return icfg_int(id, "SELECT portal_id FROM iscsi_portal_ip WHERE ip = ? AND portal_id != ?",
                    "ti", ip, except_id);
}

int icfg_portal_has_ip(int64_t portal_id, const char *ip)
{
    int64_t found;
    return icfg_int(&found, "SELECT portal_id FROM iscsi_portal_ip WHERE ip = ? AND portal_id = ?",
                    "ti", ip, portal_id);
}
