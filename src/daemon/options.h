/*
 * The daemon's command-line flags (and so the config file's keys, see
 * config_file.h): one table, from which the getopt table, the --help text
 * and each flag's check-and-apply come. A flag's handler checks its value
 * and either stores it in struct options (what main() needs itself) or
 * hands it to the module it configures (admit, nbd, iscsi, api...).
 *
 * Main thread only, before any other thread starts.
 */
#ifndef BLOCKD_DAEMON_OPTIONS_H
#define BLOCKD_DAEMON_OPTIONS_H

struct options {
    const char *state_dir;
    const char *api_socket;
    unsigned threads;
    const char *nbd_listen;
    const char *iscsi_listen;
    const char *api_listen;
    const char *api_tls_cert;
    const char *api_tls_key;
    unsigned shutdown_timeout_s;
};

/*
 * Merge the config file's settings ahead of argv (config_file_merge), then
 * parse every flag into *o (defaults set by the caller). --help and
 * --version print and exit(0). Returns 0, or -1 after printing why to
 * stderr (the caller then calls config_file_explain for the failed word).
 */
int options_parse(int argc, char **argv, struct options *o);

#endif
