/*
 * The published state the NBD connections read (the export table: the NBD
 * part of the configuration generation, control/confgen.h; the settings)
 * and the listening sockets. Publication swaps one pointer under a mutex;
 * a connection takes a reference at accept/option time and never locks
 * again on the I/O path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/listener.h"
#include "core/log.h"
#include "core/tls.h"
#include "nbd/nbd_conn.h"
#include "nbd/nbd_export.h"
#include "nbd/nbd_server.h"

static pthread_mutex_t pub_lock = PTHREAD_MUTEX_INITIALIZER; /* the settings */
static struct nbd_settings *pub_settings;

void nbd_export_ref(struct nbd_export *e)
{
    atomic_fetch_add(&e->refs, 1);
}

void nbd_export_unref(struct nbd_export *e)
{
    if (!e || atomic_fetch_sub(&e->refs, 1) != 1)
        return;
    if (e->vol)
        volume_unref(e->vol);
    free(e->name);
    free(e->description);
    free(e->dataset);
    free(e->path);
    free(e->unavailable);
    free(e);
}

static void table_destroy(struct conf_part *p)
{
    struct nbd_export_table *t = (struct nbd_export_table *)p;
    for (size_t i = 0; i < t->count; i++)
        nbd_export_unref(t->exports[i]);
    free(t);
}

void nbd_export_table_unref(struct nbd_export_table *t)
{
    if (t)
        conf_part_unref(&t->part);
}

struct nbd_export_table *nbd_export_table_new(size_t count)
{
    /* The index for conf_apply lives in the same block, after the
     * exports: sealing cannot fail. */
    size_t exports = sizeof(struct nbd_export_table) + count * sizeof(struct nbd_export *);
    size_t at = (exports + _Alignof(struct conf_obj) - 1) / _Alignof(struct conf_obj) *
                _Alignof(struct conf_obj);
    struct nbd_export_table *t = calloc(1, at + count * sizeof(struct conf_obj));
    if (t) {
        atomic_init(&t->part.refs, 1);
        t->part.destroy = table_destroy;
        t->objs = (struct conf_obj *)((char *)t + at);
    }
    return t;
}

struct nbd_export_table *nbd_exports_current(void)
{
    struct conf_part *p = conf_part_get(CONF_NBD);
    if (p)
        return (struct nbd_export_table *)p;
    struct nbd_export_table *t = nbd_export_table_new(0);
    if (!t)
        abort(); /* as nbd_settings_current: no memory for an empty table */
    return t;
}

static int obj_cmp(const void *a, const void *b)
{
    const struct conf_obj *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

void nbd_export_table_seal(struct nbd_export_table *t)
{
    for (size_t i = 0; i < t->count; i++)
        t->objs[i] = (struct conf_obj){.id = t->exports[i]->id, .obj = t->exports[i]};
    qsort(t->objs, t->count, sizeof(*t->objs), obj_cmp);
    t->part.objs = t->objs;
    t->part.n_objs = t->count;
}

void nbd_exports_publish(struct nbd_export_table *t)
{
    nbd_export_table_seal(t);
    conf_publish_part(CONF_NBD, &t->part);
}

struct nbd_export *nbd_export_table_find(const struct nbd_export_table *t, const char *name,
                                         size_t len)
{
    for (size_t i = 0; i < t->count; i++) {
        struct nbd_export *e = t->exports[i];
        if (e->enabled && strlen(e->name) == len && memcmp(e->name, name, len) == 0)
            return e;
    }
    return NULL;
}

struct nbd_settings *nbd_settings_current(void)
{
    pthread_mutex_lock(&pub_lock);
    if (!pub_settings) {
        pub_settings = calloc(1, sizeof(*pub_settings));
        if (!pub_settings)
            abort();
        atomic_init(&pub_settings->refs, 1);
        pub_settings->max_request = NBD_DEFAULT_MAX_REQUEST;
        pub_settings->max_inflight = NBD_DEFAULT_MAX_INFLIGHT;
        pub_settings->max_connections = NBD_DEFAULT_MAX_CONNECTIONS;
    }
    struct nbd_settings *s = pub_settings;
    atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&pub_lock);
    return s;
}

void nbd_settings_unref(struct nbd_settings *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    if (s->tls)
        tls_creds_unref(s->tls);
    free(s);
}

void nbd_settings_publish(struct nbd_settings *s)
{
    pthread_mutex_lock(&pub_lock);
    struct nbd_settings *old = pub_settings;
    pub_settings = s;
    pthread_mutex_unlock(&pub_lock);
    nbd_settings_unref(old);
}

/* ---- listeners ---- */

static pthread_mutex_t listen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct listener *tcp_listener, *unix_listener;
static char *tcp_addr, *unix_path;

static void on_accept(int fd, const struct sockaddr *peer, socklen_t peerlen,
                      const struct sockaddr *local, socklen_t locallen, void *arg)
{
    nbd_conn_accept(fd, peer, peerlen);
}

static bool same(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

int nbd_listen_apply(const char *tcp, const char *unix_sock)
{
    int rc = 0;
    pthread_mutex_lock(&listen_lock);
    if (!same(tcp, tcp_addr) || !tcp_listener) {
        struct listener *l = NULL;
        if (tcp && *tcp) {
            if (tcp_listener) {
                /* Close first so the same port can be bound again. */
                listener_close(tcp_listener);
                tcp_listener = NULL;
            }
            rc = listener_open_tcp(tcp, on_accept, NULL, &l);
            if (rc < 0)
                goto out;
            /* The bound address: for ":0" the port the kernel chose. */
            char bound[LISTENER_ADDR_MAX];
            if (listener_bound_addr(l, bound, sizeof(bound)) < 0)
                snprintf(bound, sizeof(bound), "%s", tcp);
            log_info("nbd: listening on %s", bound);
        } else if (tcp_listener) {
            listener_close(tcp_listener);
        }
        tcp_listener = l;
        free(tcp_addr);
        tcp_addr = tcp ? strdup(tcp) : NULL;
    }
    if (!same(unix_sock, unix_path) || (!unix_listener && unix_sock && *unix_sock)) {
        if (unix_listener) {
            listener_close(unix_listener);
            unix_listener = NULL;
        }
        if (unix_sock && *unix_sock) {
            rc = listener_open_unix(unix_sock, NBD_UNIX_SOCKET_MODE, on_accept, NULL,
                                    &unix_listener);
            if (rc < 0)
                goto out;
            log_info("nbd: listening on unix socket %s", unix_sock);
        }
        free(unix_path);
        unix_path = unix_sock ? strdup(unix_sock) : NULL;
    }
out:
    pthread_mutex_unlock(&listen_lock);
    return rc;
}

void nbd_listen_close(void)
{
    pthread_mutex_lock(&listen_lock);
    if (tcp_listener)
        listener_close(tcp_listener);
    if (unix_listener)
        listener_close(unix_listener);
    tcp_listener = unix_listener = NULL;
    free(tcp_addr);
    free(unix_path);
    tcp_addr = unix_path = NULL;
    pthread_mutex_unlock(&listen_lock);
}

int nbd_listen_port(void)
{
    pthread_mutex_lock(&listen_lock);
    int p = tcp_listener ? listener_port(tcp_listener) : 0;
    pthread_mutex_unlock(&listen_lock);
    return p;
}
