/*
 * The daemon's modules, brought up in one order: each registers its DB
 * schema and API methods, then the configuration DB opens (which creates or
 * upgrades every registered table), then what needs the DB runs once.
 * Shared by blockd's main and by the API fuzzer, so that the fuzzer drives
 * the very method table and DB the daemon serves.
 */
#ifndef BLOCKD_DAEMON_MODULES_H
#define BLOCKD_DAEMON_MODULES_H

/*
 * Register every module, open the DB at db_path, seal CHAP secrets stored
 * in clear by an older blockd, and create the default pool "demo" under
 * state_dir if there is none. Reactors and the I/O pool must be running.
 * Main thread, once. 0 or -errno (logged).
 */
int modules_init(const char *state_dir, const char *db_path);

#endif
