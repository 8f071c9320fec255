/*
 * blockd: the daemon. A thin main over the modules: parse flags, take the
 * state-dir lock, start reactors and the I/O pool, open the config DB,
 * start the front-ends and the API, then wait for a signal.
 *
 * Shutdown order (SIGTERM/SIGINT): stop accepting (API, NBD, iSCSI
 * listeners), let in-flight requests finish, flush every volume, stop the
 * threads, close the DB. Exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/callmem.h"
#include "api/server.h"
#include "config/datasets.h"
#include "config/db.h"
#include "core/allowdir.h"
#include "core/admit.h"
#include "core/iopool.h"
#include "core/log.h"
#include "core/reactor.h"
#include "core/util.h"
#include "daemon/config_file.h"
#include "daemon/metrics_allow.h"
#include "daemon/sdnotify.h"
#include "daemon/watchdog.h"
#include "daemon/modules.h"
#include "gateway/gateway.h"
#include "iscsi/iscsi_runtime.h"
#include "iscsi/iscsi_config.h"
#include "nbd/nbd.h"
#include "api/jobs.h"
#include "api/service.h"
#include "api/ws.h"

struct options {
    const char *state_dir;
    const char *api_socket;
    unsigned threads;
    const char *nbd_listen;
    const char *iscsi_listen;
    const char *api_listen;   /* control */
    const char *api_tls_cert; /* control */
    const char *api_tls_key;  /* control */
    unsigned shutdown_timeout_s;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: blockd [--config FILE] [--state-dir DIR] [--api-socket PATH] [--threads N]\n"
            "              [--log-level error|warn|info|debug] [--log-format auto|plain|journal]\n"
            "              [--nbd-listen ADDR:PORT] [--iscsi-listen ADDR:PORT]\n"
            "              [--api-listen ADDR:PORT [--api-tls-cert F --api-tls-key F]]\n"
            "              [--api-priority idle|low|normal] [--reactor-spin-us N]\n"
            "              [--allow-dir DIR]...\n"
            "              [--handshake-timeout S] [--max-pending N] [--max-pending-per-addr N]\n"
            "              [--iscsi-max-connections N] [--nbd-payload-budget SIZE]\n"
            "              [--shutdown-timeout S] [--api-call-memory SIZE]\n"
            "              [--metrics-allow CIDR[,CIDR]...]\n"
            "              [--gateway-group NAME --gateway-id N [--gateway-name NAME]\n"
            "               [--gateway-ceph-conf FILE] [--gateway-ceph-id ID]\n"
            "               [--gateway-pool POOL] [--gateway-heartbeat-timeout S]]\n"
            "\n"
            "  --config FILE          settings as 'key = value' lines, a key per flag below\n"
            "                         (default " CONFIG_FILE_DEFAULT " if it exists);\n"
            "                         flags given here override the file\n"
            "  --state-dir DIR        configuration DB, pools, lock (default $STATE_DIRECTORY,\n"
            "                         else /var/lib/blockd)\n"
            "  --api-socket PATH      JSON-RPC Unix socket, mode 0600 (default\n"
            "                         $RUNTIME_DIRECTORY/blockd.sock, else DIR/blockd.sock)\n"
            "  --threads N            reactor threads (default: one per CPU)\n"
            "  --log-level LEVEL      log verbosity on stderr (default info)\n"
            "  --log-format F         journal: lines start with a <N> syslog priority, no\n"
            "                         timestamp; plain: timestamp and level; auto (default):\n"
            "                         journal when $JOURNAL_STREAM is our stderr\n"
            "  --nbd-listen ADDR:PORT NBD listen address (default from config, 0.0.0.0:10809)\n"
            "  --iscsi-listen A:P     also serve iSCSI on address A, and make P the\n"
            "                         portals' port (iscsi.global.listen_port) at start\n"
            "                         (default: the portals' addresses at listen_port)\n"
            "  --api-listen ADDR:PORT serve the JSON-RPC API over WebSocket (/api/current)\n"
            "  --api-tls-cert FILE    with --api-tls-key: PEM certificate, serve wss://\n"
            "  --api-tls-key FILE     PEM private key for --api-tls-cert\n"
            "  --api-priority P       CPU priority of API threads: idle (SCHED_IDLE,\n"
            "                         default: I/O first), low (nice 10), normal\n"
            "  --reactor-spin-us N    after handling events a reactor polls N more\n"
            "                         microseconds before sleeping (default 20; 0: never)\n"
            "  --allow-dir DIR        a directory where API calls may name host files (NBD\n"
            "                         unix_socket, TLS files) besides the state directory;\n"
            "                         repeatable (docs/security.md)\n"
            "  --handshake-timeout S  NBD handshake, iSCSI login and WebSocket upgrade +\n"
            "                         authentication must finish within S seconds (default 10)\n"
            "  --max-pending N        per protocol, connections still in that phase (default\n"
            "                         128, at most 3/4 of the protocol's connection cap)\n"
            "  --max-pending-per-addr N  of those, from one remote address (default 16)\n"
            "  --iscsi-max-connections N iSCSI connections in all (default 1024)\n"
            "  --nbd-payload-budget SIZE payload all NBD connections may hold together\n"
            "                         (K/M/G; default 256M); past it they stop reading requests\n"
            "  --shutdown-timeout S   at SIGTERM, wait up to S seconds for in-flight requests\n"
            "                         and their replies (default 10)\n"
            "  --api-call-memory SIZE JSON one API call (or job) may build, and the length of\n"
            "                         its response (K/M/G; default 256M); past it the call\n"
            "                         fails with ENOMEM\n"
            "  --metrics-allow LIST   networks (CIDR, comma-separated; repeatable) that may\n"
            "                         read /metrics without an API key (default: none)\n"
            "  --gateway-group NAME   join gateway group NAME: several blockd serving the same\n"
            "                         RBD images over several paths (docs/ha.md; default off)\n"
            "  --gateway-id N         this member's id, 1..32: its target port group and\n"
            "                         relative target port id (required with a group)\n"
            "  --gateway-name NAME    this member's name (default: the host name)\n"
            "  --gateway-ceph-conf F  ceph.conf of the cluster holding the membership\n"
            "                         (default: librados' search)\n"
            "  --gateway-ceph-id ID   its client id (default admin)\n"
            "  --gateway-pool POOL    RADOS pool of the membership object (default rbd)\n"
            "  --gateway-heartbeat-timeout S  a member silent for S seconds is OFFLINE and\n"
            "                         fenced (2..60, default 3)\n");
}

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"state-dir", required_argument, NULL, 's'},
        {"api-socket", required_argument, NULL, 'a'},
        {"threads", required_argument, NULL, 't'},
        {"log-level", required_argument, NULL, 'l'},
        {"nbd-listen", required_argument, NULL, 'n'},
        {"iscsi-listen", required_argument, NULL, 'i'},
        {"api-listen", required_argument, NULL, 'L'},   /* control */
        {"api-tls-cert", required_argument, NULL, 'C'}, /* control */
        {"api-tls-key", required_argument, NULL, 'K'},  /* control */
        {"api-priority", required_argument, NULL, 'P'}, /* control */
        {"reactor-spin-us", required_argument, NULL, 'S'},
        {"config", required_argument, NULL, 'c'}, /* read by config_file_merge */
        {"log-format", required_argument, NULL, 'F'},
        {"version", no_argument, NULL, 'V'},
        {"allow-dir", required_argument, NULL, 'D'},
        {"handshake-timeout", required_argument, NULL, 'H'},
        {"max-pending", required_argument, NULL, 'p'},
        {"max-pending-per-addr", required_argument, NULL, 'A'},
        {"iscsi-max-connections", required_argument, NULL, 'I'},
        {"nbd-payload-budget", required_argument, NULL, 'B'},
        {"shutdown-timeout", required_argument, NULL, 'T'},
        {"api-call-memory", required_argument, NULL, 'M'},
        {"metrics-allow", required_argument, NULL, 'W'},
        {"gateway-group", required_argument, NULL, 1001},
        {"gateway-id", required_argument, NULL, 1002},
        {"gateway-name", required_argument, NULL, 1003},
        {"gateway-ceph-conf", required_argument, NULL, 1004},
        {"gateway-ceph-id", required_argument, NULL, 1005},
        {"gateway-pool", required_argument, NULL, 1006},
        {"gateway-heartbeat-timeout", required_argument, NULL, 1007},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    /* The config file's keys are these flags: its settings come first. */
    if (config_file_merge(&argc, &argv, longopts) < 0)
        return -1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            o->state_dir = optarg;
            break;
        case 'a':
            o->api_socket = optarg;
            break;
        case 't': {
            char *end;
            errno = 0;
            unsigned long v = strtoul(optarg, &end, 10);
            if (errno || *end || v == 0 || v > 256) {
                fprintf(stderr, "blockd: --threads must be 1..256\n");
                return -1;
            }
            o->threads = (unsigned)v;
            break;
        }
        case 'l': {
            enum log_level lvl;
            if (log_parse_level(optarg, &lvl) < 0) {
                fprintf(stderr, "blockd: --log-level must be error, warn, info or debug\n");
                return -1;
            }
            log_set_level(lvl);
            break;
        }
        case 'n':
            o->nbd_listen = optarg;
            break;
        case 'i':
            o->iscsi_listen = optarg;
            break;
        case 'L': /* control */
            o->api_listen = optarg;
            break;
        case 'C': /* control */
            o->api_tls_cert = optarg;
            break;
        case 'K': /* control */
            o->api_tls_key = optarg;
            break;
        case 'P': /* control */
            if (api_set_thread_priority(optarg) < 0) {
                fprintf(stderr, "blockd: --api-priority must be idle, low or normal\n");
                return -1;
            }
            break;
        case 'S': {
            char *end;
            errno = 0;
            unsigned long v = strtoul(optarg, &end, 10);
            if (errno || *end || end == optarg || v > 10000) {
                fprintf(stderr, "blockd: --reactor-spin-us must be 0..10000\n");
                return -1;
            }
            reactors_set_spin((unsigned)v);
            break;
        }
        case 'c':
            break;
        case 'F': {
            enum log_format f;
            if (log_parse_format(optarg, &f) < 0) {
                fprintf(stderr, "blockd: --log-format must be auto, plain or journal\n");
                return -1;
            }
            log_set_format(f);
            break;
        }
        case 'V':
            printf("blockd %s\n", BLOCKD_VERSION);
            exit(0);
        case 'D': {
            int rc = allowdir_add(optarg);
            if (rc < 0) {
                fprintf(stderr, "blockd: --allow-dir %s: %s\n", optarg, strerror(-rc));
                return -1;
            }
            break;
        }
        case 'H':
        case 'p':
        case 'A':
        case 'I':
        case 'T': {
            static const struct {
                int opt;
                const char *name;
                unsigned long max;
            } lim[] = {{'H', "--handshake-timeout", 3600},
                       {'p', "--max-pending", 65536},
                       {'A', "--max-pending-per-addr", 65536},
                       {'I', "--iscsi-max-connections", 65536},
                       {'T', "--shutdown-timeout", 3600}};
            unsigned long max = 0;
            const char *name = "";
            for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++)
                if (lim[i].opt == c) {
                    max = lim[i].max;
                    name = lim[i].name;
                }
            char *end;
            errno = 0;
            unsigned long v = strtoul(optarg, &end, 10);
            if (errno || *end || end == optarg || v == 0 || v > max) {
                fprintf(stderr, "blockd: %s must be 1..%lu\n", name, max);
                return -1;
            }
            if (c == 'H')
                admit_configure((unsigned)v, 0, 0);
            else if (c == 'p')
                admit_configure(0, (unsigned)v, 0);
            else if (c == 'A')
                admit_configure(0, 0, (unsigned)v);
            else if (c == 'I')
                iscsi_server_set_max_connections((unsigned)v);
            else
                o->shutdown_timeout_s = (unsigned)v;
            break;
        }
        case 'B': {
            uint64_t v;
            if (parse_size(optarg, &v) < 0 || v < (1u << 20) || v > (1ull << 40)) {
                fprintf(stderr, "blockd: --nbd-payload-budget must be 1M..1T\n");
                return -1;
            }
            nbd_set_payload_budget((size_t)v);
            break;
        }
        case 'M': {
            uint64_t v;
            if (parse_size(optarg, &v) < 0 || v < (64u << 10) || v > (1ull << 40)) {
                fprintf(stderr, "blockd: --api-call-memory must be 64K..1T\n");
                return -1;
            }
            callmem_set_budget(v);
            break;
        }
        case 'W': {
            int rc = metrics_allow_add(optarg);
            if (rc < 0) {
                fprintf(stderr, "blockd: --metrics-allow %s: %s\n", optarg,
                        rc == -ENOSPC ? "more than 32 networks"
                                      : "not a list of networks (10.0.0.0/8,::1/128)");
                return -1;
            }
            break;
        }
        case 1001:
        case 1002:
        case 1003:
        case 1004:
        case 1005:
        case 1006:
        case 1007: {
            static const char *const what[] = {
                "--gateway-group must be 1..63 of A-Z a-z 0-9 . _ -",
                "--gateway-id must be 1..32",
                "--gateway-name must be 1..63 of A-Z a-z 0-9 . _ -",
                "--gateway-ceph-conf: path too long",
                "--gateway-ceph-id: too long",
                "--gateway-pool must be a pool name",
                "--gateway-heartbeat-timeout must be 2..60",
            };
            int rc = c == 1001   ? gateway_configure_group(optarg)
                     : c == 1002 ? gateway_configure_id(optarg)
                     : c == 1003 ? gateway_configure_name(optarg)
                     : c == 1004 ? gateway_configure_ceph(optarg, NULL, NULL)
                     : c == 1005 ? gateway_configure_ceph(NULL, optarg, NULL)
                     : c == 1006 ? gateway_configure_ceph(NULL, NULL, optarg)
                                 : gateway_configure_timeout(optarg);
            if (rc < 0) {
                fprintf(stderr, "blockd: %s\n", what[c - 1001]);
                return -1;
            }
            break;
        }
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "blockd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    return 0;
}

/* Every mapped LUN and export holds a file descriptor, and every session a
 * socket: thousands of shares need more than the usual soft limit of 1024. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            fprintf(stderr, "blockd: warning: cannot raise the open-file limit: %s\n",
                    strerror(errno));
    }
}

static int mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, mode) < 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static int path_join(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* One daemon per state dir: an flock'd lock file holding our pid. */
static int take_lock(const char *state_dir)
{
    char path[PATH_MAX];
    if (path_join(path, sizeof(path), state_dir, "blockd.lock") < 0) {
        fprintf(stderr, "blockd: state dir path too long\n");
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "blockd: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        if (n > 0) {
            pid[n] = 0;
            pid[strcspn(pid, "\n")] = 0;
        }
        fprintf(stderr,
                "blockd: another blockd (pid %s) is already running with state dir %s; "
                "refusing to start\n",
                n > 0 ? pid : "?", state_dir);
        close(fd);
        return -1;
    }
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        fprintf(stderr, "blockd: warning: cannot write pid to %s\n", path);
    return fd; /* kept open (and locked) for the life of the process */
}

/* control: the front-ends as services (service.start/stop/restart/reload).
 * Only API threads call these, one at a time (service.c serializes them). */
static const struct options *svc_opts;
static bool svc_iscsi_on, svc_nbd_on;

static int svc_iscsi_start(void)
{
    int rc = iscsi_server_start();
    if (rc == 0)
        rc = iscsi_config_start(svc_opts->iscsi_listen);
    if (rc < 0) {
        iscsi_config_stop();
        iscsi_server_stop();
    }
    svc_iscsi_on = rc == 0;
    return rc;
}
static int svc_iscsi_stop(void)
{
    iscsi_config_stop();
    iscsi_server_stop();
    svc_iscsi_on = false;
    return 0;
}
static bool svc_iscsi_running(void)
{
    return svc_iscsi_on;
}
static int svc_nbd_start(void)
{
    int rc = nbd_server_start(svc_opts->nbd_listen);
    if (rc < 0)
        nbd_server_stop();
    svc_nbd_on = rc == 0;
    return rc;
}
static int svc_nbd_stop(void)
{
    nbd_server_stop();
    svc_nbd_on = false;
    return 0;
}
static bool svc_nbd_running(void)
{
    return svc_nbd_on;
}
static const struct service_ops svc_iscsi_ops = {
    .start = svc_iscsi_start,
    .stop = svc_iscsi_stop,
    .reload = iscsi_config_reload, /* applies every deferred change */
    .running = svc_iscsi_running,
};
static const struct service_ops svc_nbd_ops = {
    .start = svc_nbd_start,
    .stop = svc_nbd_stop,
    .running = svc_nbd_running,
};

int main(int argc, char **argv)
{
    struct options o = {.shutdown_timeout_s = 10};
    /* Before any JSON is allocated (the config file, the DB): see callmem.h. */
    callmem_init();
    if (parse_args(argc, argv, &o) < 0) {
        config_file_explain(optind - 1);
        return 2;
    }
    /* Under systemd: StateDirectory= and RuntimeDirectory= (the unit). */
    char env_state[PATH_MAX], env_socket[PATH_MAX];
    const char *sd_state = getenv("STATE_DIRECTORY"), *sd_run = getenv("RUNTIME_DIRECTORY");
    if (!o.state_dir && sd_state && *sd_state &&
        snprintf(env_state, sizeof(env_state), "%.*s", (int)strcspn(sd_state, ":"), sd_state) <
            (int)sizeof(env_state))
        o.state_dir = env_state;
    if (!o.api_socket && sd_run && *sd_run &&
        snprintf(env_socket, sizeof(env_socket), "%.*s/blockd.sock", (int)strcspn(sd_run, ":"),
                 sd_run) < (int)sizeof(env_socket))
        o.api_socket = env_socket;
    if (!o.state_dir) {
        if (geteuid() != 0) {
            fprintf(stderr, "blockd: --state-dir is required when not running as root\n");
            return 2;
        }
        o.state_dir = "/var/lib/blockd";
    }
    char state_dir[PATH_MAX];
    if (mkdir_p(o.state_dir, 0700) < 0 || !realpath(o.state_dir, state_dir)) {
        fprintf(stderr, "blockd: cannot create state dir %s: %s\n", o.state_dir, strerror(errno));
        return 1;
    }
    raise_fd_limit();
    allowdir_add(state_dir); /* API-named host files (core/allowdir.h) */
    int lock_fd = take_lock(state_dir);
    if (lock_fd < 0)
        return 1;

    char api_socket[PATH_MAX];
    char db_path[PATH_MAX];
    if (o.api_socket)
        snprintf(api_socket, sizeof(api_socket), "%s", o.api_socket);
    else if (path_join(api_socket, sizeof(api_socket), state_dir, "blockd.sock") < 0)
        return 1;
    if (path_join(db_path, sizeof(db_path), state_dir, "blockd.db") < 0)
        return 1;

    /* Signals are handled synchronously here; every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);

    int rc = reactors_start(o.threads);
    if (rc == 0)
        rc = iopool_start(0);
    if (rc < 0) {
        log_error("cannot start threads: %s", strerror(-rc));
        return 1;
    }

    if (modules_init(state_dir, db_path) < 0)
        return 1;
    /* Before the front-ends: LUs on RBD images take the group's identity. */
    if ((rc = gateway_start(o.iscsi_listen)) < 0)
        return 1;
    /* Front-ends start once the configuration they serve is open. */
    if ((rc = nbd_server_start(o.nbd_listen)) < 0) { /* nbd */
        log_error("cannot start the NBD server: %s", strerror(-rc));
        return 1;
    }
    if ((rc = iscsi_server_start()) < 0) { /* iscsi */
        log_error("cannot start the iSCSI server: %s", strerror(-rc));
        return 1;
    }
    if ((rc = iscsi_config_start(o.iscsi_listen)) < 0) { /* iscsi-config: publish targets */
        log_error("cannot publish the iSCSI configuration: %s", strerror(-rc));
        return 1;
    }

    svc_opts = &o; /* control: register the front-ends as services */
    svc_iscsi_on = svc_nbd_on = true;
    service_register("iscsitarget", &svc_iscsi_ops);
    service_register("nbd", &svc_nbd_ops);
    service_apply_enabled();

    if ((rc = api_server_start(api_socket)) < 0) {
        log_error("cannot serve the API on %s: %s", api_socket, strerror(-rc));
        return 1;
    }
    if (o.api_listen && (rc = api_ws_start(o.api_listen, o.api_tls_cert, o.api_tls_key)) < 0) {
        log_error("cannot serve the WebSocket API on %s: %s", o.api_listen,
                  strerror(-rc)); /* control */
        return 1;
    }
    log_info("blockd ready: state %s, api %s, %u reactor threads", state_dir, api_socket,
             reactors_count());
    if ((rc = watchdog_start()) < 0)
        log_warn("cannot start the watchdog thread: %s", strerror(-rc));
    sdnotify_send("READY=1");

    for (;;) {
        struct signalfd_siginfo si;
        ssize_t n = read(sfd, &si, sizeof(si));
        if (n != sizeof(si)) {
            if (n < 0 && errno == EINTR)
                continue;
            log_error("signalfd read failed: %s", strerror(errno));
            break;
        }
        if (si.ssi_signo == SIGHUP) {
            /* API configuration applies live already; this is the file. */
            sdnotify_send("RELOADING=1");
            config_file_reload();
            sdnotify_send("READY=1");
            continue;
        }
        log_info("received %s, shutting down", strsignal((int)si.ssi_signo));
        break;
    }
    sdnotify_send("STOPPING=1");
    watchdog_stop();

    /* Stop taking requests first: every request already started completes
     * and its reply is sent before its connection closes (up to the
     * deadline), so nothing reaches a disk unacknowledged. */
    uint64_t drain_end = time_now_ns() + (uint64_t)o.shutdown_timeout_s * 1000000000ull;
    nbd_server_drain(o.shutdown_timeout_s * 1000u); /* nbd */
    uint64_t drain_now = time_now_ns();
    iscsi_server_drain(drain_now < drain_end ? (unsigned)((drain_end - drain_now) / 1000000u)
                                             : 0); /* iscsi */

    api_server_stop();
    api_ws_stop();       /* control */
    jobs_stop();         /* control: wait for running jobs */
    nbd_server_stop();   /* nbd */
    iscsi_config_stop(); /* iscsi-config: withdraw targets, close portal listeners */
    iscsi_server_stop(); /* iscsi */
    gateway_stop();      /* leave the group after the last I/O */
    datasets_flush_all();
    reactors_stop();
    iopool_stop();
    datasets_shutdown();
    db_close();
    log_info("blockd stopped");
    close(lock_fd);
    return 0;
}
