/* The flag table of options.h: name, argument, help text, handler. */
#include "daemon/options.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/callmem.h"
#include "api/api.h"
#include "core/admit.h"
#include "core/bounds.h"
#include "core/allowdir.h"
#include "core/log.h"
#include "core/reactor.h"
#include "core/util.h"
#include "daemon/config_file.h"
#include "daemon/metrics_allow.h"
#include "gateway/gateway.h"
#include "iscsi/iscsi_runtime.h"
#include "nbd/nbd.h"
#include "nvme/nvme_target.h"
#include "store/rbd_cluster.h"

struct flag {
    const char *name;
    const char *arg; /* NULL: the flag takes no value */
    int (*apply)(const char *arg, struct options *o);
    const char *help; /* lines after the first are indented under it */
};

/* A decimal in min..max, or -1 after naming the flag and its range. */
static int uint_arg(const char *flag, const char *arg, unsigned long min, unsigned long max,
                    unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(arg, &end, 10);
    if (errno || *end || end == arg || v < min || v > max) {
        fprintf(stderr, "blockd: --%s must be %lu..%lu\n", flag, min, max);
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

/* A size with a K/M/G/T suffix in min..max, or -1 after naming the flag. */
static int size_arg(const char *flag, const char *arg, uint64_t min, uint64_t max,
                    const char *range, uint64_t *out)
{
    if (parse_size(arg, out) < 0 || *out < min || *out > max) {
        fprintf(stderr, "blockd: --%s must be %s\n", flag, range);
        return -1;
    }
    return 0;
}

static int f_state_dir(const char *arg, struct options *o)
{
    o->state_dir = arg;
    return 0;
}

static int f_api_socket(const char *arg, struct options *o)
{
    o->api_socket = arg;
    return 0;
}

static int f_threads(const char *arg, struct options *o)
{
    return uint_arg("threads", arg, 1, 256, &o->threads);
}

static int f_log_level(const char *arg, struct options *o)
{
    (void)o;
    enum log_level lvl;
    if (log_parse_level(arg, &lvl) < 0) {
        fprintf(stderr, "blockd: --log-level must be error, warn, info or debug\n");
        return -1;
    }
    log_set_level(lvl);
    return 0;
}

static int f_log_format(const char *arg, struct options *o)
{
    (void)o;
    enum log_format f;
    if (log_parse_format(arg, &f) < 0) {
        fprintf(stderr, "blockd: --log-format must be auto, plain or journal\n");
        return -1;
    }
    log_set_format(f);
    return 0;
}

static int f_nbd_listen(const char *arg, struct options *o)
{
    o->nbd_listen = arg;
    return 0;
}

static int f_iscsi_listen(const char *arg, struct options *o)
{
    o->iscsi_listen = arg;
    return 0;
}

static int f_api_listen(const char *arg, struct options *o)
{
    o->api_listen = arg;
    return 0;
}

static int f_api_tls_cert(const char *arg, struct options *o)
{
    o->api_tls_cert = arg;
    return 0;
}

static int f_api_tls_key(const char *arg, struct options *o)
{
    o->api_tls_key = arg;
    return 0;
}

static int f_api_priority(const char *arg, struct options *o)
{
    (void)o;
    if (api_set_thread_priority(arg) < 0) {
        fprintf(stderr, "blockd: --api-priority must be idle, low or normal\n");
        return -1;
    }
    return 0;
}

static int f_reactor_spin_us(const char *arg, struct options *o)
{
    (void)o;
    unsigned v;
    if (uint_arg("reactor-spin-us", arg, 0, 10000, &v) < 0)
        return -1;
    reactors_set_spin(v);
    return 0;
}

static int f_config(const char *arg, struct options *o)
{
    (void)arg; /* read by config_file_merge before parsing */
    (void)o;
    return 0;
}

static int f_allow_dir(const char *arg, struct options *o)
{
    (void)o;
    int rc = allowdir_add(arg);
    if (rc < 0) {
        fprintf(stderr, "blockd: --allow-dir %s: %s\n", arg, strerror(-rc));
        return -1;
    }
    return 0;
}

static int f_handshake_timeout(const char *arg, struct options *o)
{
    (void)o;
    unsigned v;
    if (uint_arg("handshake-timeout", arg, 1, 3600, &v) < 0)
        return -1;
    admit_configure(v, 0, 0);
    return 0;
}

static int f_max_pending(const char *arg, struct options *o)
{
    (void)o;
    unsigned v;
    if (uint_arg("max-pending", arg, 1, 65536, &v) < 0)
        return -1;
    admit_configure(0, v, 0);
    return 0;
}

static int f_max_pending_per_addr(const char *arg, struct options *o)
{
    (void)o;
    unsigned v;
    if (uint_arg("max-pending-per-addr", arg, 1, 65536, &v) < 0)
        return -1;
    admit_configure(0, 0, v);
    return 0;
}

/* --max-subscriptions etc. (core/bounds.h): 1..10^9. */
static int limit_arg(enum limit_kind k, const char *arg)
{
    unsigned v;
    if (uint_arg(limit_flag(k) + 2, arg, 1, 1000000000, &v) < 0)
        return -1;
    limit_set(k, v);
    return 0;
}

static int f_max_subscriptions(const char *arg, struct options *o)
{
    (void)o;
    return limit_arg(LIMIT_SUBSCRIPTIONS, arg);
}

static int f_max_api_keys(const char *arg, struct options *o)
{
    (void)o;
    return limit_arg(LIMIT_API_KEYS, arg);
}

static int f_max_pools(const char *arg, struct options *o)
{
    (void)o;
    return limit_arg(LIMIT_POOLS, arg);
}

static int f_max_datasets(const char *arg, struct options *o)
{
    (void)o;
    return limit_arg(LIMIT_DATASETS, arg);
}

static int f_max_snapshots(const char *arg, struct options *o)
{
    (void)o;
    return limit_arg(LIMIT_SNAPSHOTS, arg);
}

static int f_max_share_objects(const char *arg, struct options *o)
{
    (void)o;
    return limit_arg(LIMIT_SHARE_OBJECTS, arg);
}

static int f_iscsi_max_connections(const char *arg, struct options *o)
{
    (void)o;
    unsigned v;
    if (uint_arg("iscsi-max-connections", arg, 1, 65536, &v) < 0)
        return -1;
    iscsi_server_set_max_connections(v);
    return 0;
}

static int f_nvme_max_connections(const char *arg, struct options *o)
{
    (void)o;
    unsigned v;
    if (uint_arg("nvme-max-connections", arg, 1, 65536, &v) < 0)
        return -1;
    nvme_target_set_max_connections(v);
    return 0;
}

static int f_nbd_payload_budget(const char *arg, struct options *o)
{
    (void)o;
    uint64_t v;
    if (size_arg("nbd-payload-budget", arg, 1u << 20, 1ull << 40, "1M..1T", &v) < 0)
        return -1;
    nbd_set_payload_budget((size_t)v);
    return 0;
}

static int f_shutdown_timeout(const char *arg, struct options *o)
{
    return uint_arg("shutdown-timeout", arg, 1, 3600, &o->shutdown_timeout_s);
}

static int f_api_call_memory(const char *arg, struct options *o)
{
    (void)o;
    uint64_t v;
    if (size_arg("api-call-memory", arg, 64u << 10, 1ull << 40, "64K..1T", &v) < 0)
        return -1;
    callmem_set_budget(v);
    return 0;
}

static int f_metrics_allow(const char *arg, struct options *o)
{
    (void)o;
    int rc = metrics_allow_add(arg);
    if (rc < 0) {
        fprintf(stderr, "blockd: --metrics-allow %s: %s\n", arg,
                rc == -ENOSPC ? "more than 32 networks"
                              : "not a list of networks (10.0.0.0/8,::1/128)");
        return -1;
    }
    return 0;
}

/* --gateway-*: gateway/gateway.h checks and keeps them. */
static int gateway_flag(int rc, const char *why)
{
    if (rc < 0)
        fprintf(stderr, "blockd: %s\n", why);
    return rc < 0 ? -1 : 0;
}

static int f_gateway_group(const char *arg, struct options *o)
{
    (void)o;
    return gateway_flag(gateway_configure_group(arg),
                        "--gateway-group must be 1..63 of A-Z a-z 0-9 . _ -");
}

static int f_gateway_id(const char *arg, struct options *o)
{
    (void)o;
    return gateway_flag(gateway_configure_id(arg), "--gateway-id must be 1..32");
}

static int f_gateway_name(const char *arg, struct options *o)
{
    (void)o;
    return gateway_flag(gateway_configure_name(arg),
                        "--gateway-name must be 1..63 of A-Z a-z 0-9 . _ -");
}

static int f_ceph_admin_socket(const char *arg, struct options *o)
{
    (void)o;
    if (arg[0] != '/') {
        fprintf(stderr, "blockd: --ceph-admin-socket %s: an absolute path is needed\n", arg);
        return -1;
    }
    rbd_cluster_set_admin_socket(arg);
    return 0;
}

static int f_gateway_ceph_conf(const char *arg, struct options *o)
{
    (void)o;
    return gateway_flag(gateway_configure_ceph(arg, NULL, NULL), "--gateway-ceph-conf: too long");
}

static int f_gateway_ceph_id(const char *arg, struct options *o)
{
    (void)o;
    return gateway_flag(gateway_configure_ceph(NULL, arg, NULL), "--gateway-ceph-id: too long");
}

static int f_gateway_pool(const char *arg, struct options *o)
{
    (void)o;
    return gateway_flag(gateway_configure_ceph(NULL, NULL, arg),
                        "--gateway-pool must be a pool name");
}

static int f_gateway_heartbeat_timeout(const char *arg, struct options *o)
{
    (void)o;
    return gateway_flag(gateway_configure_timeout(arg),
                        "--gateway-heartbeat-timeout must be 2..60");
}

static int f_version(const char *arg, struct options *o);
static int f_help(const char *arg, struct options *o);

static const struct flag flags[] = {
    {"config", "FILE", f_config,
     "settings as 'key = value' lines, a key per flag below\n"
     "(default " CONFIG_FILE_DEFAULT " if it exists);\n"
     "flags given here override the file"},
    {"state-dir", "DIR", f_state_dir,
     "configuration DB, pools, lock (default $STATE_DIRECTORY,\n"
     "else /var/lib/blockd)"},
    {"api-socket", "PATH", f_api_socket,
     "JSON-RPC Unix socket, mode 0600 (default\n"
     "$RUNTIME_DIRECTORY/blockd.sock, else DIR/blockd.sock)"},
    {"threads", "N", f_threads, "reactor threads (default: one per CPU)"},
    {"log-level", "LEVEL", f_log_level,
     "log verbosity on stderr: error, warn, info (default) or debug"},
    {"log-format", "F", f_log_format,
     "journal: lines start with a <N> syslog priority, no\n"
     "timestamp; plain: timestamp and level; auto (default):\n"
     "journal when $JOURNAL_STREAM is our stderr"},
    {"nbd-listen", "ADDR:PORT", f_nbd_listen,
     "NBD listen address (default from config, 0.0.0.0:10809)"},
    {"iscsi-listen", "A:P", f_iscsi_listen,
     "also serve iSCSI on address A, and make P the\n"
     "portals' port (iscsi.global.listen_port) at start\n"
     "(default: the portals' addresses at listen_port)"},
    {"api-listen", "ADDR:PORT", f_api_listen,
     "serve the JSON-RPC API over WebSocket (/api/current)"},
    {"api-tls-cert", "FILE", f_api_tls_cert, "with --api-tls-key: PEM certificate, serve wss://"},
    {"api-tls-key", "FILE", f_api_tls_key, "PEM private key for --api-tls-cert"},
    {"api-priority", "P", f_api_priority,
     "CPU priority of API threads: idle (SCHED_IDLE,\n"
     "default: I/O first), low (nice 10), normal"},
    {"reactor-spin-us", "N", f_reactor_spin_us,
     "after handling events a reactor polls N more\n"
     "microseconds before sleeping (default 20; 0: never)"},
    {"allow-dir", "DIR", f_allow_dir,
     "a directory where API calls may name host files (NBD\n"
     "unix_socket, TLS files) besides the state directory;\n"
     "repeatable (docs/security.md)"},
    {"handshake-timeout", "S", f_handshake_timeout,
     "NBD handshake, iSCSI login, NVMe/TCP Connect (and\n"
     "DH-HMAC-CHAP) and WebSocket upgrade + authentication\n"
     "must finish within S seconds (default 10)"},
    {"max-pending", "N", f_max_pending,
     "per protocol, connections still in that phase (default\n"
     "128, at most 3/4 of the protocol's connection cap; when\n"
     "full, the oldest of the busiest address is evicted)"},
    {"max-pending-per-addr", "N", f_max_pending_per_addr,
     "of those, from one remote address or IPv6 /64\n"
     "(default 16)"},
    {"max-subscriptions", "N", f_max_subscriptions,
     "event subscriptions (core.subscribe) one API connection\n"
     "may hold (default 64)"},
    {"max-api-keys", "N", f_max_api_keys, "API keys in all (default 1000)"},
    {"max-pools", "N", f_max_pools, "pools in all (default 64)"},
    {"max-datasets", "N", f_max_datasets,
     "datasets (volumes, filesystems, clones) in all pools\n"
     "(default 100000)"},
    {"max-snapshots", "N", f_max_snapshots, "snapshots per dataset (default 10000)"},
    {"max-share-objects", "N", f_max_share_objects,
     "NBD exports, iSCSI portals, initiator groups, CHAP credentials, targets, extents, "
     "target-extent mappings, NVMe-oF subsystems, namespaces, ports, hosts and links: each "
     "kind (default 10000)"},
    {"iscsi-max-connections", "N", f_iscsi_max_connections,
     "iSCSI connections in all (default 1024)"},
    {"nvme-max-connections", "N", f_nvme_max_connections,
     "NVMe/TCP connections (admin and I/O queues) in all\n"
     "(default 4096)"},
    {"nbd-payload-budget", "SIZE", f_nbd_payload_budget,
     "payload all NBD connections may hold together\n"
     "(K/M/G; default 256M); past it they stop reading requests"},
    {"shutdown-timeout", "S", f_shutdown_timeout,
     "at SIGTERM, wait up to S seconds for in-flight requests\n"
     "and their replies (default 10)"},
    {"api-call-memory", "SIZE", f_api_call_memory,
     "JSON one API call (or job) may build, and the length of\n"
     "its response (K/M/G; default 256M); past it the call\n"
     "fails with ENOMEM"},
    {"metrics-allow", "LIST", f_metrics_allow,
     "networks (CIDR, comma-separated; repeatable) that may\n"
     "read /metrics without an API key (default: none)"},
    {"gateway-group", "NAME", f_gateway_group,
     "join gateway group NAME: several blockd serving the same\n"
     "RBD images over several paths (docs/ha.md; default off)"},
    {"gateway-id", "N", f_gateway_id,
     "this member's id, 1..32: its target port group and\n"
     "relative target port id (required with a group)"},
    {"gateway-name", "NAME", f_gateway_name, "this member's name (default: the host name)"},
    {"gateway-ceph-conf", "FILE", f_gateway_ceph_conf,
     "ceph.conf of the cluster holding the membership\n"
     "(default: librados' search)"},
    {"gateway-ceph-id", "ID", f_gateway_ceph_id, "its client id (default admin)"},
    {"gateway-pool", "POOL", f_gateway_pool, "RADOS pool of the membership object (default rbd)"},
    {"ceph-admin-socket", "PATH", f_ceph_admin_socket,
     "librados admin socket of blockd's Ceph clients, e.g.\n"
     "/run/blockd/$name.$pid.asok (default: none)"},
    {"gateway-heartbeat-timeout", "S", f_gateway_heartbeat_timeout,
     "a member silent for S seconds is OFFLINE and fenced\n"
     "(2..60, default 3)"},
    {"version", NULL, f_version, "print the version and exit"},
    {"help", NULL, f_help, "print this help and exit"},
};
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

/* "  --name ARG" in a 26-column gutter, then the help, a line per line. */
static void usage(FILE *f)
{
    fprintf(f, "usage: blockd [--FLAG VALUE]...\n\n");
    for (size_t i = 0; i < NFLAGS; i++) {
        char head[64];
        snprintf(head, sizeof(head), "  --%s%s%s", flags[i].name, flags[i].arg ? " " : "",
                 flags[i].arg ? flags[i].arg : "");
        const char *h = flags[i].help;
        int pad = strlen(head) < 26 ? (int)(26 - strlen(head)) : 1;
        if (strlen(head) >= 26) {
            fprintf(f, "%s\n", head);
            snprintf(head, sizeof(head), "%s", "");
            pad = 26;
        }
        size_t len = strcspn(h, "\n");
        fprintf(f, "%s%*s%.*s\n", head, pad, "", (int)len, h);
        for (h += len; *h == '\n'; h += len) {
            h++;
            len = strcspn(h, "\n");
            fprintf(f, "%26s%.*s\n", "", (int)len, h);
        }
    }
}

static int f_version(const char *arg, struct options *o)
{
    (void)arg;
    (void)o;
    printf("blockd %s\n", BLOCKD_VERSION);
    exit(0);
}

static int f_help(const char *arg, struct options *o)
{
    (void)arg;
    (void)o;
    usage(stdout);
    exit(0);
}

int options_parse(int argc, char **argv, struct options *o)
{
    /* The getopt table lives until exit: config_file_reload reads it. */
    static struct option longopts[NFLAGS + 1];
    for (size_t i = 0; i < NFLAGS; i++)
        longopts[i] = (struct option){flags[i].name, flags[i].arg ? required_argument : no_argument,
                                      NULL, (int)(256 + i)};
    if (config_file_merge(&argc, &argv, longopts) < 0)
        return -1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h')
            c = 256 + (int)(NFLAGS - 1);
        if (c < 256 || c >= 256 + (int)NFLAGS) {
            usage(stderr);
            return -1;
        }
        if (flags[c - 256].apply(optarg, o) < 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "blockd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    return 0;
}
