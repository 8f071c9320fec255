/*
 * /etc/blockd/blockd.conf: `key = value` lines, one key per command-line
 * flag. The flags' getopt table is the only list of keys: `--foo-bar X`
 * is `foo_bar = X` (or `foo-bar = X`) in the file, so every new flag has
 * a key without touching this module. The file's settings are turned into
 * flags placed before the command line's, so that flags given on the
 * command line override the file (and a repeatable flag accumulates).
 *
 * All functions run on the main thread.
 */
#ifndef BLOCKD_DAEMON_CONFIG_FILE_H
#define BLOCKD_DAEMON_CONFIG_FILE_H

#include <getopt.h>

/* The file read when --config is not given (if it exists). */
#ifndef BLOCKD_SYSCONFDIR
#define BLOCKD_SYSCONFDIR "/etc"
#endif
#define CONFIG_FILE_DEFAULT BLOCKD_SYSCONFDIR "/blockd/blockd.conf"

/*
 * Find the file (--config FILE or --config=FILE in *argvp, else
 * CONFIG_FILE_DEFAULT if it exists), parse it, and replace *argcp and *argvp
 * with a new vector: argv[0], one "--key=value" word per setting, then the
 * original arguments. longopts is the daemon's getopt table (static
 * storage: kept for config_file_reload). The new vector lives until exit.
 * On a bad file prints "blockd: FILE:LINE: why" and returns -1; else 0.
 */
int config_file_merge(int *argcp, char ***argvp, const struct option *longopts);

/* getopt failed on word argv[index] (a value a flag's handler refused):
 * if that word came from the file, print which line it was. */
void config_file_explain(int index);

/* The file in use, or NULL. */
const char *config_file_path(void);

/*
 * SIGHUP / `systemctl reload`: read the file again and apply what can
 * change live (log_level, log_format), unless the command line set it; a
 * key removed from the file returns to its default. Every other changed
 * key is logged as needing a restart. A bad file changes nothing and
 * returns -1 (logged); else 0.
 */
int config_file_reload(void);

#endif
