/* Shared librados connections (see rbd_cluster.h). */
#include "store/rbd_cluster.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"

struct rbd_cluster {
    struct rbd_cluster *next;
    char *conf, *mon_host, *id, *key, *keyring;
    char desc[512];
    unsigned op_timeout_s;
    rados_t rados;
    char addr[128]; /* client address, set once connected */
    int refs;       /* under lock */
    bool retired;   /* under lock: no longer in clusters */
    atomic_bool blocklisted;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rbd_cluster *clusters; /* the shared (current) connections */
/* Every connection seen blocklisted and not yet retired (to retire them
 * by rbd_cluster_retire_blocklisted without a list of all connections). */
#define BLOCKLISTED_MAX 16
static struct rbd_cluster *blocklisted[BLOCKLISTED_MAX]; /* under lock; references */
static _Atomic(void (*)(struct rbd_cluster *)) blocklist_hook;

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

/* The spec's op timeout, else BLOCKD_RBD_OP_TIMEOUT, else the default. */
static unsigned op_timeout(const struct rbd_cluster_spec *s)
{
    const char *env = getenv("BLOCKD_RBD_OP_TIMEOUT");
    char *end;
    unsigned long v;

    if (s->op_timeout_s)
        return s->op_timeout_s;
    if (env && env[0]) {
        errno = 0;
        v = strtoul(env, &end, 10);
        if (errno == 0 && *end == '\0' && v > 0 && v <= 86400)
            return (unsigned)v;
        log_warn("rbd: ignoring BLOCKD_RBD_OP_TIMEOUT=%s (want 1..86400 seconds)", env);
    }
    return RBD_CLUSTER_OP_TIMEOUT;
}

static bool same_spec(const struct rbd_cluster *c, const struct rbd_cluster_spec *s)
{
    return strcmp(c->conf, or_empty(s->conf)) == 0 &&
           strcmp(c->mon_host, or_empty(s->mon_host)) == 0 && strcmp(c->id, or_empty(s->id)) == 0 &&
           strcmp(c->key, or_empty(s->key)) == 0 && strcmp(c->keyring, or_empty(s->keyring)) == 0 &&
           c->op_timeout_s == op_timeout(s);
}

static int set_opt(rados_t r, const char *key, const char *val)
{
    int rc = rados_conf_set(r, key, val);
    if (rc < 0)
        log_warn("rbd: cannot set %s=%s: %s", key, val, strerror(-rc));
    return rc;
}

/*
 * Options that make librados write or load files, or talk to other
 * services, with the value blockd gives them whatever a ceph.conf, the
 * environment or the monitors' configuration database say (rados_conf_set
 * outranks all three). NULL: the compiled default, read before anything
 * else is (pin_read). An option this librados does not know is skipped.
 */
static const struct pinned_opt {
    const char *name;
    const char *value;
} pinned_opts[] = {
    {"log_file", ""},
    {"log_to_file", "false"},
    {"admin_socket", ""},
    {"log_to_syslog", "false"},
    {"err_to_syslog", "false"},
    {"log_to_graylog", "false"},
    {"err_to_graylog", "false"},
    {"log_to_journald", "false"},
    {"err_to_journald", "false"},
    {"rbd_tracing", "false"},
    {"rados_tracing", "false"},
    {"rbd_blkin_trace_all", "false"},
    {"rbd_plugins", ""},
    {"rbd_persistent_cache_mode", "disabled"},
    {"plugin_dir", NULL},
    {"erasure_code_dir", NULL},
    {"osd_class_dir", NULL},
    {"run_dir", NULL},
    {"pid_file", NULL},
    {"crash_dir", NULL},
    {"tmp_dir", NULL},
    {"openssl_engine_opts", NULL},
    {"plugin_crypto_accelerator", NULL},
    {"ms_type", NULL},
    {"ms_public_type", NULL},
    {"ms_cluster_type", NULL},
    {"rbd_persistent_cache_path", NULL},
    {"immutable_object_cache_sock", NULL},
    {"rbd_parent_cache_enabled", NULL},
};
#define PINNED_N (sizeof(pinned_opts) / sizeof(pinned_opts[0]))
#define PIN_VALUE_MAX 1024

/* The operator's admin socket template (--ceph-admin-socket), or "": none. */
static char admin_socket[1024];

void rbd_cluster_set_admin_socket(const char *path)
{
    snprintf(admin_socket, sizeof(admin_socket), "%s", path ? path : "");
}

/* The compiled defaults of the NULL entries, right after rados_create. */
static void pin_read(rados_t r, char (*defaults)[PIN_VALUE_MAX])
{
    for (size_t i = 0; i < PINNED_N; i++) {
        defaults[i][0] = '\0';
        if (!pinned_opts[i].value &&
            rados_conf_get(r, pinned_opts[i].name, defaults[i], PIN_VALUE_MAX) < 0)
            defaults[i][0] = '\x01'; /* unknown here: skipped */
    }
}

/* Set every pinned option. 0, or -errno: a connection whose options
 * cannot be pinned is not made. */
static int pin_apply(rados_t r, char (*defaults)[PIN_VALUE_MAX])
{
    for (size_t i = 0; i < PINNED_N; i++) {
        const char *v = pinned_opts[i].value ? pinned_opts[i].value : defaults[i];
        int rc;

        /* The one file option the operator may set: librados' admin socket
         * (perf counters, config show) for debugging, never a client's. */
        if (strcmp(pinned_opts[i].name, "admin_socket") == 0)
            v = admin_socket;

        if (v[0] == '\x01')
            continue;
        rc = rados_conf_set(r, pinned_opts[i].name, v);
        if (rc < 0 && rc != -ENOENT) {
            log_error("rbd: cannot pin %s=%s: %s", pinned_opts[i].name, v, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

/* Where the cluster is and who we are: an operator's conf file (read by
 * librados), or data only (then no keyring, key file or conf is read). */
static int conf_source(struct rbd_cluster *c)
{
    int rc = 0;

    if (c->conf[0]) {
        rc = rados_conf_read_file(c->rados, c->conf);
        /* The environment's CEPH_ARGS (e.g. --keyring) still applies. */
        if (rc == 0)
            rados_conf_parse_env(c->rados, NULL);
    } else {
        rc = set_opt(c->rados, "keyring", "");
        if (rc == 0)
            rc = set_opt(c->rados, "keyfile", "");
        /* No key: a cluster without cephx (not a search for a keyring). */
        if (rc == 0 && !c->key[0])
            rc = set_opt(c->rados, "auth_client_required", "none");
    }
    if (rc == 0 && c->mon_host[0])
        rc = set_opt(c->rados, "mon_host", c->mon_host);
    if (rc == 0 && c->key[0] && (rc = rados_conf_set(c->rados, "key", c->key)) < 0)
        log_warn("rbd: cannot set the cephx key: %s", strerror(-rc));
    if (rc == 0 && c->keyring[0])
        rc = set_opt(c->rados, "keyring", c->keyring);
    return rc;
}

static int connect_cluster(struct rbd_cluster *c, unsigned timeout_s)
{
    char(*defaults)[PIN_VALUE_MAX] = calloc(PINNED_N, PIN_VALUE_MAX);
    struct stat st;
    char buf[32];
    int rc;

    if (!defaults)
        return -ENOMEM;
    if (c->conf[0] && stat(c->conf, &st) < 0) {
        free(defaults);
        return -errno;
    }
    rc = rados_create(&c->rados, c->id[0] ? c->id : NULL);
    if (rc < 0) {
        free(defaults);
        return rc;
    }
    pin_read(c->rados, defaults);
    rc = conf_source(c);
    if (rc == 0)
        rc = pin_apply(c->rados, defaults);
    free(defaults);
    if (rc < 0)
        goto fail;
    snprintf(buf, sizeof(buf), "%u", timeout_s);
    set_opt(c->rados, "client_mount_timeout", buf);
    snprintf(buf, sizeof(buf), "%u", c->op_timeout_s);
    set_opt(c->rados, "rados_mon_op_timeout", buf);
    set_opt(c->rados, "rados_osd_op_timeout", buf);
    /* Discards zero what they cannot deallocate (the parts of a range that
     * do not cover whole objects), so a trimmed range always reads back as
     * zeros: UNMAP can then promise LBPRZ and SANITIZE BLOCK ERASE works.
     * librbd's default skips those parts, leaving the old data readable. */
    set_opt(c->rados, "rbd_skip_partial_discard", "false");
    /* No client-side write-back cache: a write is acknowledged once the
     * OSDs have it, so a flush that fails (the cluster lost for longer
     * than the op timeout) loses no acknowledged write, and the next one
     * may succeed (BDEV_SYNC_RETRIABLE): I/O resumes on its own when the
     * cluster comes back. With librbd's cache, dirty data could be
     * dropped on such an error. Measured within the noise either way
     * (bench/results/rbd_aio.md runs 1-3). Overrides ceph.conf. */
    set_opt(c->rados, "rbd_cache", "false");
    rc = rados_connect(c->rados);
    if (rc < 0)
        goto fail;
    char *addrs = NULL;
    if (rados_getaddrs(c->rados, &addrs) == 0 && addrs)
        snprintf(c->addr, sizeof(c->addr), "%s", addrs);
    if (addrs)
        rados_buffer_free(addrs);
    return 0;
fail:
    rados_shutdown(c->rados);
    c->rados = NULL;
    return rc;
}

static void cluster_free(struct rbd_cluster *c)
{
    if (c->key)
        explicit_bzero(c->key, strlen(c->key));
    free(c->conf), free(c->mon_host), free(c->id), free(c->key), free(c->keyring), free(c);
}

static char group_conf[4096], group_id[128];

void rbd_cluster_set_group(const char *conf, const char *id)
{
    snprintf(group_conf, sizeof(group_conf), "%s", or_empty(conf));
    snprintf(group_id, sizeof(group_id), "%s", or_empty(id));
}

bool rbd_cluster_group_spec(const char *conf, struct rbd_cluster_spec *spec)
{
    if (!group_conf[0] || !conf || strcmp(conf, group_conf) != 0)
        return false;
    memset(spec, 0, sizeof(*spec));
    spec->conf = group_conf;
    spec->id = group_id;
    return true;
}

int rbd_cluster_get(const struct rbd_cluster_spec *spec, unsigned timeout_s,
                    struct rbd_cluster **out)
{
    struct rbd_cluster *c;
    int rc;

    *out = NULL;
    pthread_mutex_lock(&lock);
    for (c = clusters; c; c = c->next) {
        if (same_spec(c, spec)) {
            c->refs++;
            pthread_mutex_unlock(&lock);
            *out = c;
            return 0;
        }
    }
    pthread_mutex_unlock(&lock);

    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->conf = strdup(or_empty(spec->conf));
    c->mon_host = strdup(or_empty(spec->mon_host));
    c->id = strdup(or_empty(spec->id));
    c->key = strdup(or_empty(spec->key));
    c->keyring = strdup(or_empty(spec->keyring));
    if (!c->conf || !c->mon_host || !c->id || !c->key || !c->keyring) {
        rc = -ENOMEM;
        goto fail;
    }
    c->op_timeout_s = op_timeout(spec);
    snprintf(c->desc, sizeof(c->desc), "%s=%.400s id=%s", c->conf[0] ? "conf" : "mon_host",
             c->conf[0] ? c->conf : c->mon_host, c->id[0] ? c->id : "admin");
    /* Connect outside the lock: it may take up to timeout_s. */
    rc = connect_cluster(c, timeout_s ? timeout_s : 10);
    if (rc < 0)
        goto fail;
    c->refs = 1;

    pthread_mutex_lock(&lock);
    for (struct rbd_cluster *o = clusters; o; o = o->next) {
        if (same_spec(o, spec)) { /* another thread connected meanwhile */
            o->refs++;
            pthread_mutex_unlock(&lock);
            rados_shutdown(c->rados);
            cluster_free(c);
            *out = o;
            return 0;
        }
    }
    c->next = clusters;
    clusters = c;
    pthread_mutex_unlock(&lock);
    log_info("rbd: connected to the cluster (%s) as client %s", c->desc,
             c->addr[0] ? c->addr : "(unknown address)");
    *out = c;
    return 0;
fail:
    cluster_free(c);
    return rc;
}

void rbd_cluster_ref(struct rbd_cluster *c)
{
    pthread_mutex_lock(&lock);
    c->refs++;
    pthread_mutex_unlock(&lock);
}

void rbd_cluster_put(struct rbd_cluster *c)
{
    struct rbd_cluster **pp;

    if (!c)
        return;
    pthread_mutex_lock(&lock);
    if (--c->refs > 0) {
        pthread_mutex_unlock(&lock);
        return;
    }
    for (pp = &clusters; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    rados_shutdown(c->rados);
    log_info("rbd: disconnected from the cluster (%s%s%s)", c->desc,
             c->retired ? ", retired client " : "", c->retired ? c->addr : "");
    cluster_free(c);
}

rados_t rbd_cluster_rados(struct rbd_cluster *c)
{
    return c->rados;
}

const char *rbd_cluster_describe(const struct rbd_cluster *c)
{
    return c->desc;
}

int rbd_cluster_ioctx(struct rbd_cluster *c, const char *pool, const char *ns, rados_ioctx_t *out)
{
    int rc = rados_ioctx_create(c->rados, pool, out);
    if (rc < 0)
        return rc;
    if (ns && ns[0])
        rados_ioctx_set_namespace(*out, ns);
    return 0;
}

const char *rbd_cluster_addr(const struct rbd_cluster *c)
{
    return c->addr;
}

void rbd_cluster_set_blocklist_hook(void (*fn)(struct rbd_cluster *c))
{
    atomic_store(&blocklist_hook, fn);
}

void rbd_cluster_note_error(struct rbd_cluster *c, int rc)
{
    if (rc != -ESHUTDOWN || !c || atomic_exchange(&c->blocklisted, true))
        return;
    void (*fn)(struct rbd_cluster *) = atomic_load(&blocklist_hook);
    /* Keep it findable for rbd_cluster_retire_blocklisted: a reference,
     * so that it cannot go away in between (a full table only means the
     * one not kept is retired by whoever holds it, e.g. the gateway).
     * Without a hook nobody replaces it: it is not kept. */
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; fn && i < BLOCKLISTED_MAX; i++) {
        if (!blocklisted[i]) {
            blocklisted[i] = c;
            c->refs++;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    log_error("rbd: the cluster refuses client %s (%s): it was blocklisted (fenced)",
              c->addr[0] ? c->addr : "(unknown address)", c->desc);
    if (fn)
        fn(c);
}

bool rbd_cluster_blocklisted(const struct rbd_cluster *c)
{
    return atomic_load(&((struct rbd_cluster *)c)->blocklisted);
}

/* Under lock. */
static void retire_locked(struct rbd_cluster *c)
{
    if (c->retired)
        return;
    for (struct rbd_cluster **pp = &clusters; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    c->next = NULL;
    c->retired = true;
}

void rbd_cluster_retire(struct rbd_cluster *c)
{
    pthread_mutex_lock(&lock);
    bool was = c->retired;
    retire_locked(c);
    pthread_mutex_unlock(&lock);
    if (!was)
        log_info("rbd: client %s (%s) retired: the next user connects a new client",
                 c->addr[0] ? c->addr : "(unknown address)", c->desc);
}

unsigned rbd_cluster_retire_blocklisted(void)
{
    struct rbd_cluster *done[BLOCKLISTED_MAX];
    unsigned n = 0;

    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < BLOCKLISTED_MAX; i++) {
        if (blocklisted[i]) {
            done[n++] = blocklisted[i];
            blocklisted[i] = NULL;
        }
    }
    pthread_mutex_unlock(&lock);
    for (unsigned i = 0; i < n; i++) {
        rbd_cluster_retire(done[i]);
        rbd_cluster_put(done[i]); /* the table's reference */
    }
    return n;
}

bool rbd_cluster_retired(const struct rbd_cluster *c)
{
    pthread_mutex_lock(&lock);
    bool r = c->retired;
    pthread_mutex_unlock(&lock);
    return r;
}

int rbd_cluster_get_like(struct rbd_cluster *c, unsigned timeout_s, struct rbd_cluster **out)
{
    struct rbd_cluster_spec spec = {.conf = c->conf,
                                    .mon_host = c->mon_host,
                                    .id = c->id,
                                    .key = c->key,
                                    .keyring = c->keyring,
                                    .op_timeout_s = c->op_timeout_s};
    pthread_mutex_lock(&lock);
    if (!c->retired) {
        c->refs++;
        pthread_mutex_unlock(&lock);
        *out = c;
        return 0;
    }
    pthread_mutex_unlock(&lock);
    /* c's strings stay valid: the caller holds a reference on c. */
    return rbd_cluster_get(&spec, timeout_s, out);
}
