/*
 * The session registry: every logged-in session, for iscsi.global.sessions,
 * target delete (count / force close), session reinstatement and TSIH
 * allocation. Sessions live on their connection's reactor; the registry
 * holds pointers under a mutex and only ever reads the fixed info copy or
 * posts a close (conn_close_async) — never touches session state.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "iscsi/iscsi_internal.h"

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct iscsi_session *reg_head;
static uint16_t tsih_next;
static unsigned reg_count;

#define REGISTRY_MAX 65000

bool iscsi_session_tsih_exists(uint16_t tsih)
{
    bool found = false;
    pthread_mutex_lock(&reg_lock);
    for (struct iscsi_session *s = reg_head; s && !found; s = s->reg_next)
        found = s->info.tsih == tsih;
    pthread_mutex_unlock(&reg_lock);
    return found;
}

static bool tsih_in_use_locked(uint16_t tsih)
{
    for (struct iscsi_session *s = reg_head; s; s = s->reg_next)
        if (s->info.tsih == tsih)
            return true;
    return false;
}

uint16_t iscsi_session_new_tsih(void)
{
    pthread_mutex_lock(&reg_lock);
    uint16_t t;
    do {
        t = ++tsih_next;
    } while (t == 0 || tsih_in_use_locked(t));
    pthread_mutex_unlock(&reg_lock);
    return t;
}

int iscsi_session_register(struct iscsi_session *s)
{
    pthread_mutex_lock(&reg_lock);
    if (reg_count >= REGISTRY_MAX) {
        pthread_mutex_unlock(&reg_lock);
        return -ENOSPC;
    }
    s->reg_prev = NULL;
    s->reg_next = reg_head;
    if (reg_head)
        reg_head->reg_prev = s;
    reg_head = s;
    reg_count++;
    pthread_mutex_unlock(&reg_lock);
    return 0;
}

void iscsi_session_unregister(struct iscsi_session *s)
{
    pthread_mutex_lock(&reg_lock);
    bool listed = s->reg_prev || reg_head == s;
    if (listed) {
        if (s->reg_prev)
            s->reg_prev->reg_next = s->reg_next;
        else
            reg_head = s->reg_next;
        if (s->reg_next)
            s->reg_next->reg_prev = s->reg_prev;
        s->reg_next = s->reg_prev = NULL;
        reg_count--;
    }
    pthread_mutex_unlock(&reg_lock);
}

void iscsi_sessions_drain_all(void)
{
    pthread_mutex_lock(&reg_lock);
    for (struct iscsi_session *s = reg_head; s; s = s->reg_next) {
        if (s->closing)
            continue;
        conn_get(s->ic->c);
        s->ic->drain_msg.fn = iscsi_conn_drain_msg;
        reactor_post(s->ic->c->reactor, &s->ic->drain_msg);
    }
    pthread_mutex_unlock(&reg_lock);
}

unsigned iscsi_sessions_count(void)
{
    pthread_mutex_lock(&reg_lock);
    unsigned n = reg_count;
    pthread_mutex_unlock(&reg_lock);
    return n;
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
    pthread_mutex_lock(&reg_lock);
    for (struct iscsi_session *s = reg_head; s; s = s->reg_next) {
        if (s != n && !s->info.discovery && s->info.isid == n->info.isid &&
            strcasecmp(s->info.initiator, n->info.initiator) == 0 &&
            strcasecmp(s->info.target, n->info.target) == 0) {
            log_info("%s: session reinstatement closes the old session from %s", n->ic->c->peer,
                     s->info.initiator_addr);
            close_locked(s);
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

int iscsi_sessions_list(struct iscsi_session_info **out)
{
    pthread_mutex_lock(&reg_lock);
    size_t n = reg_count;
    struct iscsi_session_info *a = calloc(n ? n : 1, sizeof(*a));
    if (!a) {
        pthread_mutex_unlock(&reg_lock);
        return -ENOMEM;
    }
    size_t i = 0;
    for (struct iscsi_session *s = reg_head; s && i < n; s = s->reg_next) {
        a[i] = s->info;
        a[i].commands = atomic_load_explicit(&s->st_commands, memory_order_relaxed);
        a[i].bytes_read = atomic_load_explicit(&s->st_read, memory_order_relaxed);
        a[i].bytes_written = atomic_load_explicit(&s->st_written, memory_order_relaxed);
        i++;
    }
    pthread_mutex_unlock(&reg_lock);
    *out = a;
    return (int)i;
}

unsigned iscsi_sessions_count_target(const char *iqn)
{
    unsigned n = 0;
    pthread_mutex_lock(&reg_lock);
    for (struct iscsi_session *s = reg_head; s; s = s->reg_next)
        if (!s->info.discovery && !s->closing && strcasecmp(s->info.target, iqn) == 0)
            n++;
    pthread_mutex_unlock(&reg_lock);
    return n;
}

unsigned iscsi_sessions_close_target(const char *iqn)
{
    unsigned n = 0;
    pthread_mutex_lock(&reg_lock);
    for (struct iscsi_session *s = reg_head; s; s = s->reg_next) {
        if (!s->info.discovery && strcasecmp(s->info.target, iqn) == 0) {
            if (!s->closing)
                n++;
            close_locked(s);
        }
    }
    pthread_mutex_unlock(&reg_lock);
    if (n)
        log_info("iscsi: closing %u session(s) of target %s", n, iqn);
    return n;
}

/* Close every session (server stop). */
void iscsi_sessions_close_all(void);
void iscsi_sessions_close_all(void)
{
    pthread_mutex_lock(&reg_lock);
    for (struct iscsi_session *s = reg_head; s; s = s->reg_next)
        close_locked(s);
    pthread_mutex_unlock(&reg_lock);
}
