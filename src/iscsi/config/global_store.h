/*
 * The stored iSCSI global settings (settings iscsi.global.*, control/db.h
 * db_setting_*): struct icfg_global. The API (config_global.c) decodes
 * JSON into the struct and encodes the TrueNAS row. Store conventions (DB
 * lock held, writes inside the caller's transaction): store.h.
 */
#ifndef BLOCKD_CONFIG_ISCSI_GLOBAL_STORE_H
#define BLOCKD_CONFIG_ISCSI_GLOBAL_STORE_H

#include <stdbool.h>

#include "iscsi/config/store.h"

/*
 * The settings. Owned: basename, isns_servers (icfg_global_clear).
 *   basename      the IQN prefix of every target (basename:name)
 *   isns_servers  stored and shown; blockd registers with none
 *   listen_port   the port of every portal address
 *   alua, iser, pool_avail_threshold   a request asked for a feature
 *                 blockd does not have (refused by the API; never stored,
 *                 shown as false/false/null)
 */
struct icfg_global {
    char *basename;
    struct api_strv isns_servers;
    int listen_port;
    bool alua, iser, pool_avail_threshold;
};

void icfg_global_clear(struct icfg_global *g);
/* The settings in force into *out (zeroed first; defaults for those never
 * stored). 0 or -ENOMEM. */
int icfg_global_get(struct icfg_global *out);
/* Store one setting. 0 or -errno. */
int icfg_global_set_basename(const char *basename);
int icfg_global_set_listen_port(int port);
int icfg_global_set_isns(const struct api_strv *servers);
/* The basename (a malloc'd copy, caller frees; the default if never set)
 * and listen_port in force. */
char *icfg_global_basename(void);
int icfg_global_listen_port(void);

#endif
