/*
 * The session registry: every logged-in session, for iscsi.global.sessions,
 * target delete (count / force close), session reinstatement and TSIH
 * allocation. Sessions live on their connection's reactor; the registry
 * (core/registry.h) holds them under its lock and only ever reads the fixed
 * info copy or posts a close (conn_close_async) — never touches session
 * state.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "core/util.h"
#include "iscsi/iscsi_internal.h"

#define REGISTRY_MAX 65000

static struct registry sessions = REGISTRY_INIT(REGISTRY_MAX);
static uint16_t tsih_next; /* under sessions.lock */

static struct iscsi_session *session_of(struct registry_entry *e)
{
    return container_of(e, struct iscsi_session, reg);
}

static bool tsih_in_use_locked(uint16_t tsih)
{
    REGISTRY_FOREACH (&sessions, e)
        if (session_of(e)->info.tsih == tsih)
            return true;
    return false;
}

bool iscsi_session_tsih_exists(uint16_t tsih)
{
    registry_lock(&sessions);
    bool found = tsih_in_use_locked(tsih);
    registry_unlock(&sessions);
    return found;
}

uint16_t iscsi_session_new_tsih(void)
{
    registry_lock(&sessions);
    uint16_t t;
    do {
        t = ++tsih_next;
    } while (t == 0 || tsih_in_use_locked(t));
    registry_unlock(&sessions);
    return t;
}

int iscsi_session_register(struct iscsi_session *s)
{
    return registry_add(&sessions, &s->reg);
}

void iscsi_session_unregister(struct iscsi_session *s)
{
    registry_remove(&sessions, &s->reg);
}

void iscsi_sessions_drain_all(void)
{
    registry_lock(&sessions);
    REGISTRY_FOREACH (&sessions, e) {
        struct iscsi_session *s = session_of(e);
        if (s->closing)
            continue;
        conn_get(s->ic->c);
        s->ic->drain_msg.fn = iscsi_conn_drain_msg;
        reactor_post(s->ic->c->reactor, &s->ic->drain_msg);
    }
    registry_unlock(&sessions);
}

unsigned iscsi_sessions_count(void)
{
    return registry_count(&sessions);
}

const struct iscsi_target_view *iscsi_session_view(struct iscsi_session *s)
{
    if (!s->view)
        return NULL;
    uint64_t gen = iscsi_runtime_generation();
    if (gen != s->view_gen) {
        struct iscsi_target_view *v = iscsi_runtime_find_target(s->info.target);
        s->view_gen = gen;
        if (v) {
            iscsi_target_view_unref(s->view);
            s->view = v;
        }
    }
    return s->view;
}

static void close_locked(struct iscsi_session *s)
{
    if (s->closing)
        return;
    s->closing = true;
    conn_close_async(s->ic->c);
}

void iscsi_session_reinstate(struct iscsi_session *n)
{
    registry_lock(&sessions);
    REGISTRY_FOREACH (&sessions, e) {
        struct iscsi_session *s = session_of(e);
        if (s != n && !s->info.discovery && s->info.isid == n->info.isid &&
            strcasecmp(s->info.initiator, n->info.initiator) == 0 &&
            strcasecmp(s->info.target, n->info.target) == 0) {
            log_info("%s: session reinstatement closes the old session from %s", n->ic->c->peer,
                     s->info.initiator_addr);
            close_locked(s);
        }
    }
    registry_unlock(&sessions);
}

int iscsi_sessions_list(struct iscsi_session_info **out)
{
    registry_lock(&sessions);
    size_t n = sessions.count;
    struct iscsi_session_info *a = calloc(n ? n : 1, sizeof(*a));
    if (!a) {
        registry_unlock(&sessions);
        return -ENOMEM;
    }
    size_t i = 0;
    REGISTRY_FOREACH (&sessions, e) {
        struct iscsi_session *s = session_of(e);
        a[i] = s->info;
        a[i].commands = atomic_load_explicit(&s->st_commands, memory_order_relaxed);
        a[i].bytes_read = atomic_load_explicit(&s->st_read, memory_order_relaxed);
        a[i].bytes_written = atomic_load_explicit(&s->st_written, memory_order_relaxed);
        i++;
    }
    registry_unlock(&sessions);
    *out = a;
    return (int)i;
}

unsigned iscsi_sessions_count_target(const char *iqn)
{
    unsigned n = 0;
    registry_lock(&sessions);
    REGISTRY_FOREACH (&sessions, e) {
        struct iscsi_session *s = session_of(e);
        if (!s->info.discovery && !s->closing && strcasecmp(s->info.target, iqn) == 0)
            n++;
    }
    registry_unlock(&sessions);
    return n;
}

unsigned iscsi_sessions_close_target(const char *iqn)
{
    unsigned n = 0;
    registry_lock(&sessions);
    REGISTRY_FOREACH (&sessions, e) {
        struct iscsi_session *s = session_of(e);
        if (!s->info.discovery && strcasecmp(s->info.target, iqn) == 0) {
            if (!s->closing)
                n++;
            close_locked(s);
        }
    }
    registry_unlock(&sessions);
    if (n)
        log_info("iscsi: closing %u session(s) of target %s", n, iqn);
    return n;
}

/* Close every session (server stop). */
void iscsi_sessions_close_all(void);
void iscsi_sessions_close_all(void)
{
    registry_lock(&sessions);
    REGISTRY_FOREACH (&sessions, e)
        close_locked(session_of(e));
    registry_unlock(&sessions);
}
