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
#include "control/datasets.h"
#include "control/db.h"
#include "control/snaptask.h"
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
#include "daemon/options.h"
#include "gateway/gateway.h"
#include "gwsync/gwconfig.h"
#include "gwsync/gwnvme.h"
#include "iscsi/iscsi_runtime.h"
#include "iscsi/config/iscsi_config.h"
#include "nbd/nbd.h"
#include "nvme/config/nvme_config.h"
#include "nvme/nvme_target.h"
#include "api/jobs.h"
#include "api/service.h"
#include "api/ws.h"

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

/* The state directory (created), its DB, the API socket path: from the
 * flags, else systemd's StateDirectory=/RuntimeDirectory=, else defaults.
 * Buffers are PATH_MAX long. Returns 0, or an exit status. */
static int resolve_paths(struct options *o, char *state_dir, char *api_socket, char *db_path)
{
    char env_state[PATH_MAX];
    const char *sd_state = getenv("STATE_DIRECTORY"), *sd_run = getenv("RUNTIME_DIRECTORY");
    if (!o->state_dir && sd_state && *sd_state &&
        snprintf(env_state, sizeof(env_state), "%.*s", (int)strcspn(sd_state, ":"), sd_state) <
            (int)sizeof(env_state))
        o->state_dir = env_state;
    if (!o->state_dir) {
        if (geteuid() != 0) {
            fprintf(stderr, "blockd: --state-dir is required when not running as root\n");
            return 2;
        }
        o->state_dir = "/var/lib/blockd";
    }
    if (mkdir_p(o->state_dir, 0700) < 0 || !realpath(o->state_dir, state_dir)) {
        fprintf(stderr, "blockd: cannot create state dir %s: %s\n", o->state_dir, strerror(errno));
        return 1;
    }
    o->state_dir = NULL; /* env_state goes out of scope: use state_dir */
    if (o->api_socket)
        snprintf(api_socket, PATH_MAX, "%s", o->api_socket);
    else if (sd_run && *sd_run)
        snprintf(api_socket, PATH_MAX, "%.*s/blockd.sock", (int)strcspn(sd_run, ":"), sd_run);
    else if (path_join(api_socket, PATH_MAX, state_dir, "blockd.sock") < 0)
        return 1;
    return path_join(db_path, PATH_MAX, state_dir, "blockd.db") < 0 ? 1 : 0;
}

/* Threads, the modules and their configuration, the front-ends, the API.
 * Returns 0, or -1 after logging why (the daemon then exits 1). */
static int start_all(const struct options *o, const char *state_dir, const char *api_socket,
                     const char *db_path)
{
    int rc = reactors_start(o->threads);
    if (rc == 0)
        rc = iopool_start(0);
    if (rc < 0) {
        log_error("cannot start threads: %s", strerror(-rc));
        return -1;
    }
    if (modules_init(state_dir, db_path) < 0)
        return -1;
    /* Before the front-ends: LUs on RBD images take the group's identity. */
    if (gateway_start(o->iscsi_listen) < 0)
        return -1;
    gwnvme_start(); /* NVMe ANA groups and the members' ports (a group only) */
    /* Front-ends start once the configuration they serve is open. */
    if ((rc = nbd_server_start(o->nbd_listen)) < 0) {
        log_error("cannot start the NBD server: %s", strerror(-rc));
        return -1;
    }
    if ((rc = iscsi_server_start()) < 0) {
        log_error("cannot start the iSCSI server: %s", strerror(-rc));
        return -1;
    }
    if ((rc = nvme_target_init()) < 0) {
        log_error("cannot start the NVMe/TCP target: %s", strerror(-rc));
        return -1;
    }
    if ((rc = iscsi_config_start(o->iscsi_listen)) < 0) {
        log_error("cannot publish the iSCSI configuration: %s", strerror(-rc));
        return -1;
    }
    if ((rc = nvme_config_start()) < 0) {
        log_error("cannot publish the NVMe-oF configuration: %s", strerror(-rc));
        return -1;
    }
    /* The group's shares: catches up with the other members in the
     * background (gwsync/gwconfig.h). */
    if (gwconfig_start() < 0)
        return -1;
    /* Periodic snapshot tasks: the DB is open and the volumes can open. */
    if (snaptask_start() < 0)
        return -1;
    svc_opts = o; /* the front-ends as services (service.start/stop) */
    svc_iscsi_on = svc_nbd_on = true;
    service_register("iscsitarget", &svc_iscsi_ops);
    service_register("nbd", &svc_nbd_ops);
    service_apply_enabled();
    if ((rc = api_server_start(api_socket)) < 0) {
        log_error("cannot serve the API on %s: %s", api_socket, strerror(-rc));
        return -1;
    }
    if (o->api_listen && (rc = api_ws_start(o->api_listen, o->api_tls_cert, o->api_tls_key)) < 0) {
        log_error("cannot serve the WebSocket API on %s: %s", o->api_listen, strerror(-rc));
        return -1;
    }
    return 0;
}

/* Until SIGTERM or SIGINT; SIGHUP rereads the config file. */
static void wait_for_signal(int sfd)
{
    for (;;) {
        struct signalfd_siginfo si;
        ssize_t n = read(sfd, &si, sizeof(si));
        if (n != sizeof(si)) {
            if (n < 0 && errno == EINTR)
                continue;
            log_error("signalfd read failed: %s", strerror(errno));
            return;
        }
        if (si.ssi_signo == SIGHUP) {
            /* API configuration applies live already; this is the file. */
            sdnotify_send("RELOADING=1");
            config_file_reload();
            sdnotify_send("READY=1");
            continue;
        }
        log_info("received %s, shutting down", strsignal((int)si.ssi_signo));
        return;
    }
}

/* Stop taking requests first: every request already started completes and
 * its reply is sent before its connection closes (up to the deadline), so
 * nothing reaches a disk unacknowledged. Then stop everything in the
 * reverse order of start_all. */
static void stop_all(const struct options *o)
{
    uint64_t drain_end = time_now_ns() + (uint64_t)o->shutdown_timeout_s * 1000000000ull;
    nbd_server_drain(o->shutdown_timeout_s * 1000u);
    uint64_t drain_now = time_now_ns();
    iscsi_server_drain(drain_now < drain_end ? (unsigned)((drain_end - drain_now) / 1000000u) : 0);
    drain_now = time_now_ns();
    nvme_target_drain(drain_now < drain_end ? (unsigned)((drain_end - drain_now) / 1000000u) : 0);
    api_server_stop();
    api_ws_stop();
    snaptask_stop(); /* no new snapshots; waits for one in progress */
    jobs_stop();     /* wait for running jobs */
    gwconfig_stop(); /* no more shares from the group */
    nbd_server_stop();
    iscsi_config_stop(); /* withdraw targets, close portal listeners */
    iscsi_server_stop();
    nvme_config_stop(); /* withdraw subsystems, close port listeners */
    nvme_target_stop(); /* then the connections they accepted */
    gateway_stop();     /* leave the group after the last I/O */
    datasets_flush_all();
    reactors_stop();
    iopool_stop();
    datasets_shutdown();
    db_close();
}

int main(int argc, char **argv)
{
    struct options o = {.shutdown_timeout_s = 10};
    /* Before any JSON is allocated (the config file, the DB): see callmem.h. */
    callmem_init();
    if (options_parse(argc, argv, &o) < 0) {
        config_file_explain(optind - 1);
        return 2;
    }
    char state_dir[PATH_MAX], api_socket[PATH_MAX], db_path[PATH_MAX];
    int rc = resolve_paths(&o, state_dir, api_socket, db_path);
    if (rc != 0)
        return rc;
    raise_fd_limit();
    allowdir_add(state_dir); /* API-named host files (core/allowdir.h) */
    int lock_fd = take_lock(state_dir);
    if (lock_fd < 0)
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

    if (start_all(&o, state_dir, api_socket, db_path) < 0)
        return 1;
    log_info("blockd ready: state %s, api %s, %u reactor threads", state_dir, api_socket,
             reactors_count());
    if ((rc = watchdog_start()) < 0)
        log_warn("cannot start the watchdog thread: %s", strerror(-rc));
    sdnotify_send("READY=1");
    wait_for_signal(sfd);
    sdnotify_send("STOPPING=1");
    watchdog_stop();
    stop_all(&o);
    log_info("blockd stopped");
    close(lock_fd);
    return 0;
}
