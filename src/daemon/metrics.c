/* Prometheus metrics, the /metrics and /ui routes, core.metrics (metrics.h). */
#include "daemon/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "api/api.h"
#include "api/apistats.h"
#include "api/auth.h"
#include "api/ws.h"
#include "control/datasets.h"
#include "control/db.h"
#include "core/iostats.h"
#include "core/log.h"
#include "daemon/metrics_allow.h"
#include "iscsi/iscsi_runtime.h"
#include "nbd/nbd_conn.h"
#include "nvme/nvme_target.h"

/* The page, generated from ui.html at build time (ui_html.h, xxd -i). */
#include "ui_html.h"

/* ---- a growable text buffer ---- */

struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

/* Room for n more bytes and a NUL (at least): false (and oom) if not. */
static bool sb_grow(struct sbuf *b, size_t n)
{
    size_t nc = b->cap * 2 + n + 1;
    char *np = realloc(b->p, nc);
    if (!np) {
        b->oom = true;
        return false;
    }
    b->p = np;
    b->cap = nc;
    return true;
}

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        if (!sb_grow(b, (size_t)n))
            return;
    }
}

/* Append n bytes. */
static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->cap - b->len <= n && !sb_grow(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

/* "name{label} value\n" without printf: a scrape of 1,000 volumes writes
 * some 14,000 of these lines. */
static void sb_series(struct sbuf *b, const char *name, size_t name_len, const char *label,
                      size_t label_len, uint64_t v)
{
    char num[24];
    size_t i = sizeof(num);
    num[--i] = '\n';
    do {
        num[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    num[--i] = ' ';
    num[--i] = '}';
    sb_put(b, name, name_len);
    sb_put(b, "{", 1);
    sb_put(b, label, label_len);
    sb_put(b, num + i, sizeof(num) - i);
}

/* A label value with \, " and newline escaped (Prometheus text format). */
static void label_escape(const char *in, char *out, size_t outlen)
{
    size_t j = 0;
    for (; *in && j + 3 < outlen; in++) {
        if (*in == '\\' || *in == '"') {
            out[j++] = '\\';
            out[j++] = *in;
        } else if (*in == '\n') {
            out[j++] = '\\';
            out[j++] = 'n';
        } else {
            out[j++] = *in;
        }
    }
    out[j] = 0;
}

static void family(struct sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* "1.2.3.4:5000" → "1.2.3.4", "[::1]:5000" → "::1"; others unchanged. */
static void peer_host(const char *peer, char *out, size_t len)
{
    const char *p = peer;
    const char *colon = strchr(p, ':');
    if (colon && colon - p <= 4 && strncmp(p, "ws", 2) != 0 && strchr(colon + 1, ':') == NULL &&
        (colon[1] < '0' || colon[1] > '9'))
        p = colon + 1; /* a transport prefix ("tls:") */
    if (*p == '[') {
        const char *e = strchr(p, ']');
        snprintf(out, len, "%.*s", e ? (int)(e - p - 1) : (int)strlen(p + 1), p + 1);
        return;
    }
    const char *last = strrchr(p, ':');
    if (last && strchr(p, ':') == last)
        snprintf(out, len, "%.*s", (int)(last - p), p);
    else
        snprintf(out, len, "%s", p);
}

/* ---- volume I/O ---- */

struct vrow {
    size_t slot;
    enum iostats_proto proto;
    char label[600]; /* volume="...",protocol="..." */
    size_t label_len;
    struct iostats_totals t;
};

static int vrows_collect(struct vrow **out)
{
    size_t n = iostats_slots();
    struct vrow *v = malloc((n ? n : 1) * IOSTATS_NPROTO * sizeof(*v));
    if (!v)
        return -ENOMEM;
    size_t k = 0;
    for (size_t s = 0; s < n; s++) {
        for (int p = 0; p < IOSTATS_NPROTO; p++) {
            if (!iostats_bound(s, (enum iostats_proto)p))
                continue;
            struct vrow *r = &v[k++];
            r->slot = s;
            r->proto = (enum iostats_proto)p;
            char esc[512];
            label_escape(iostats_name(s), esc, sizeof(esc));
            int ln = snprintf(r->label, sizeof(r->label), "volume=\"%s\",protocol=\"%s\"", esc,
                              iostats_proto_name(r->proto));
            r->label_len = ln > 0 && (size_t)ln < sizeof(r->label) ? (size_t)ln : strlen(r->label);
            iostats_read(s, r->proto, &r->t);
        }
    }
    *out = v;
    return (int)k;
}

static uint64_t total_ops(const struct iostats_totals *t)
{
    uint64_t n = 0;
    for (int op = 0; op < IOSTATS_NOP; op++)
        n += t->ops[op];
    return n;
}

static void render_volumes(struct sbuf *b)
{
    struct vrow *v;
    int n = vrows_collect(&v);
    if (n < 0) {
        b->oom = true;
        return;
    }
    char name[128], help[160];
    for (int op = 0; op < IOSTATS_NOP; op++) {
        const char *on = iostats_op_name((enum iostats_op)op);
        snprintf(name, sizeof(name), "blockd_volume_%s_ops_total", on);
        snprintf(help, sizeof(help), "Completed %s requests.", on);
        family(b, name, "counter", help);
        for (int i = 0; i < n; i++)
            sb_series(b, name, strlen(name), v[i].label, v[i].label_len, v[i].t.ops[op]);
        if (op != IOSTATS_FLUSH && op != IOSTATS_OTHER) {
            snprintf(name, sizeof(name), "blockd_volume_%s_bytes_total", on);
            snprintf(help, sizeof(help), "Bytes of completed %s requests.", on);
            family(b, name, "counter", help);
            for (int i = 0; i < n; i++)
                sb_series(b, name, strlen(name), v[i].label, v[i].label_len, v[i].t.bytes[op]);
        }
        snprintf(name, sizeof(name), "blockd_volume_%s_errors_total", on);
        snprintf(help, sizeof(help), "%s requests answered with an error.", on);
        family(b, name, "counter", help);
        for (int i = 0; i < n; i++)
            sb_series(b, name, strlen(name), v[i].label, v[i].label_len, v[i].t.errors[op]);
        snprintf(name, sizeof(name), "blockd_volume_%s_seconds", on);
        snprintf(help, sizeof(help),
                 "Latency of %s requests, arrival to completion (histogram; series "
                 "appear with the first request).",
                 on);
        family(b, name, "histogram", help);
        for (int i = 0; i < n; i++) {
            const struct iostats_totals *t = &v[i].t;
            if (t->ops[op] == 0)
                continue;
            uint64_t cum = 0;
            for (unsigned k = 0; k < IOSTATS_NBUCKETS - 1; k++) {
                cum += t->buckets[op][k];
                sb_printf(b, "%s_bucket{%s,le=\"%g\"} %" PRIu64 "\n", name, v[i].label,
                          iostats_bucket_le(k), cum);
            }
            cum += t->buckets[op][IOSTATS_NBUCKETS - 1];
            sb_printf(b, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", name, v[i].label, cum);
            sb_printf(b, "%s_sum{%s} %.9f\n%s_count{%s} %" PRIu64 "\n", name, v[i].label,
                      (double)t->sum_ns[op] / 1e9, name, v[i].label, cum);
        }
    }
    family(b, "blockd_volume_inflight_requests", "gauge",
           "Requests received and not yet completed.");
    for (int i = 0; i < n; i++) {
        uint64_t done = total_ops(&v[i].t);
        uint64_t infl = v[i].t.started > done ? v[i].t.started - done : 0;
        sb_series(b, "blockd_volume_inflight_requests", 31, v[i].label, v[i].label_len, infl);
    }
    free(v);
}

/* ---- sessions ---- */

struct peer_count {
    char target[300];
    char peer[80];
    unsigned sessions, connections;
};

static void peer_add(struct peer_count **a, size_t *n, size_t *cap, const char *target,
                     const char *peer, unsigned conns)
{
    char host[80];
    peer_host(peer, host, sizeof(host));
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*a)[i].target, target) == 0 && strcmp((*a)[i].peer, host) == 0) {
            (*a)[i].sessions++;
            (*a)[i].connections += conns;
            return;
        }
    }
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        struct peer_count *na = realloc(*a, nc * sizeof(*na));
        if (!na)
            return;
        *a = na;
        *cap = nc;
    }
    struct peer_count *p = &(*a)[(*n)++];
    snprintf(p->target, sizeof(p->target), "%s", target);
    snprintf(p->peer, sizeof(p->peer), "%s", host);
    p->sessions = 1;
    p->connections = conns;
}

static void render_peers(struct sbuf *b, const char *proto, struct peer_count *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char t[600], p[200];
        label_escape(a[i].target, t, sizeof(t));
        label_escape(a[i].peer, p, sizeof(p));
        sb_printf(b, "blockd_sessions{protocol=\"%s\",target=\"%s\",peer=\"%s\"} %u\n", proto, t, p,
                  a[i].sessions);
    }
}

static void render_sessions(struct sbuf *b)
{
    struct peer_count *nb = NULL, *is = NULL;
    size_t nn = 0, nc = 0, in = 0, ic = 0;
    struct nbd_session_info *ns = NULL;
    int k = nbd_sessions_list(&ns);
    for (int i = 0; i < k; i++)
        if (ns[i].transmission)
            peer_add(&nb, &nn, &nc, ns[i].export, ns[i].peer, 1);
    free(ns);
    struct iscsi_session_info *ss = NULL;
    k = iscsi_sessions_list(&ss);
    for (int i = 0; i < k; i++)
        if (!ss[i].discovery)
            peer_add(&is, &in, &ic, ss[i].target, ss[i].initiator_addr, ss[i].connections);
    free(ss);
    struct peer_count *nv = NULL;
    size_t vn = 0, vc = 0;
    struct nvme_session_info *vs = NULL;
    k = nvme_sessions_list(&vs);
    for (int i = 0; i < k; i++)
        if (!vs[i].discovery)
            peer_add(&nv, &vn, &vc, vs[i].subnqn, vs[i].peer, 1);
    free(vs);
    family(b, "blockd_sessions", "gauge",
           "Live sessions per target (iSCSI), export (NBD) or subsystem (NVMe) and peer address.");
    render_peers(b, "nbd", nb, nn);
    render_peers(b, "iscsi", is, in);
    render_peers(b, "nvme", nv, vn);
    free(nv);
    family(b, "blockd_connections", "gauge",
           "Live connections per target (iSCSI) or export (NBD) and peer address.");
    for (int pass = 0; pass < 2; pass++) {
        struct peer_count *a = pass ? is : nb;
        size_t n = pass ? in : nn;
        for (size_t i = 0; i < n; i++) {
            char t[600], p[200];
            label_escape(a[i].target, t, sizeof(t));
            label_escape(a[i].peer, p, sizeof(p));
            sb_printf(b, "blockd_connections{protocol=\"%s\",target=\"%s\",peer=\"%s\"} %u\n",
                      pass ? "iscsi" : "nbd", t, p, a[i].connections);
        }
    }
    free(nb);
    free(is);
}

/* ---- API, configuration, pools, process ---- */

static void render_api(struct sbuf *b)
{
    struct apistats_row *r = NULL;
    int n = apistats_snapshot(&r);
    if (n < 0)
        return;
    family(b, "blockd_api_calls_total", "counter", "JSON-RPC calls by method.");
    for (int i = 0; i < n; i++)
        sb_printf(b, "blockd_api_calls_total{method=\"%s\"} %" PRIu64 "\n", r[i].method,
                  r[i].calls);
    family(b, "blockd_api_errors_total", "counter", "JSON-RPC calls that returned an error.");
    for (int i = 0; i < n; i++)
        sb_printf(b, "blockd_api_errors_total{method=\"%s\"} %" PRIu64 "\n", r[i].method,
                  r[i].errors);
    family(b, "blockd_api_call_seconds", "summary", "Time spent in JSON-RPC method handlers.");
    for (int i = 0; i < n; i++)
        sb_printf(b,
                  "blockd_api_call_seconds_sum{method=\"%s\"} %.9f\n"
                  "blockd_api_call_seconds_count{method=\"%s\"} %" PRIu64 "\n",
                  r[i].method, (double)r[i].sum_ns / 1e9, r[i].method, r[i].calls);
    free(r);
}

static void render_config(struct sbuf *b)
{
    uint64_t commits = 0, syncs = 0;
    db_sync_stats(&commits, &syncs);
    family(b, "blockd_config_generation", "counter",
           "Configuration transactions committed since start.");
    sb_printf(b, "blockd_config_generation %" PRIu64 "\n", commits);
    family(b, "blockd_config_last_apply_timestamp_seconds", "gauge",
           "When the configuration last changed (Unix time; 0: not since start).");
    sb_printf(b, "blockd_config_last_apply_timestamp_seconds %.3f\n",
              (double)db_last_commit_ms() / 1e3);
}

static void render_pools(struct sbuf *b)
{
    struct datasets_pool_path *p = NULL;
    size_t n = 0;
    /* what was read before an error is still shown */
    (void)datasets_pool_paths(&p, &n);
    /* statvfs outside the DB lock: a slow file system must not hold it. */
    struct statvfs *sv = calloc(n ? n : 1, sizeof(*sv));
    bool *ok = calloc(n ? n : 1, sizeof(*ok));
    for (size_t i = 0; sv && ok && i < n; i++)
        ok[i] = statvfs(p[i].path, &sv[i]) == 0;
    static const char *const fam[3][2] = {
        {"blockd_pool_size_bytes", "Size of the file system holding the pool."},
        {"blockd_pool_free_bytes", "Free space in the pool's file system."},
        {"blockd_pool_available_bytes", "Space available to blockd (free minus reserved)."},
    };
    for (int f = 0; f < 3 && sv && ok; f++) {
        family(b, fam[f][0], "gauge", fam[f][1]);
        for (size_t i = 0; i < n; i++) {
            if (!ok[i])
                continue;
            uint64_t blocks = f == 0 ? sv[i].f_blocks : f == 1 ? sv[i].f_bfree : sv[i].f_bavail;
            char esc[600];
            label_escape(p[i].name, esc, sizeof(esc));
            sb_printf(b, "%s{pool=\"%s\"} %" PRIu64 "\n", fam[f][0], esc,
                      blocks * (uint64_t)sv[i].f_frsize);
        }
    }
    free(sv);
    free(ok);
    free(p);
}

static void render_process(struct sbuf *b)
{
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    /* Fields after the command name, which may contain spaces. */
    const char *s = strrchr(buf, ')');
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
    if (s && sscanf(s + 2,
                    "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
                    "%*d %llu %llu %llu",
                    &utime, &stime, &start, &vsize, &rss) == 5) {
        family(b, "process_cpu_seconds_total", "counter", "User and system CPU time spent.");
        sb_printf(b, "process_cpu_seconds_total %.2f\n", (double)(utime + stime) / (double)tck);
        family(b, "process_resident_memory_bytes", "gauge", "Resident memory size.");
        sb_printf(b, "process_resident_memory_bytes %llu\n", rss * (unsigned long long)page);
        family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size.");
        sb_printf(b, "process_virtual_memory_bytes %llu\n", vsize);
        unsigned long long btime = 0;
        FILE *ps = fopen("/proc/stat", "re");
        char line[256];
        while (ps && fgets(line, sizeof(line), ps))
            if (sscanf(line, "btime %llu", &btime) == 1)
                break;
        if (ps)
            fclose(ps);
        family(b, "process_start_time_seconds", "gauge", "Start time since the epoch.");
        sb_printf(b, "process_start_time_seconds %.2f\n",
                  (double)btime + (double)start / (double)tck);
    }
    unsigned fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.')
                fds++;
        closedir(d);
        family(b, "process_open_fds", "gauge", "Open file descriptors.");
        sb_printf(b, "process_open_fds %u\n", fds ? fds - 1 : 0); /* minus the DIR's own */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        family(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        sb_printf(b, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
}

char *metrics_render(size_t *len)
{
    struct sbuf b = {.cap = 65536};
    b.p = malloc(b.cap);
    if (!b.p)
        return NULL;
    b.p[0] = 0;
    render_volumes(&b);
    render_sessions(&b);
    render_api(&b);
    render_config(&b);
    render_pools(&b);
    render_process(&b);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* ---- HTTP routes ---- */

static int http_response(char **resp, size_t *resp_len, int status, const char *reason,
                         const char *extra_headers, const char *ctype, const char *body,
                         size_t body_len)
{
    struct sbuf b = {.cap = body_len + 512};
    b.p = malloc(b.cap);
    if (!b.p)
        return 0; /* the upgrade path answers; nothing better to do */
    sb_printf(&b,
              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
              "Cache-Control: no-store\r\n%sConnection: close\r\n\r\n",
              status, reason, ctype, body_len, extra_headers);
    if (!b.oom && b.cap - b.len >= body_len) {
        memcpy(b.p + b.len, body, body_len);
        b.len += body_len;
    } else {
        free(b.p);
        return 0;
    }
    *resp = b.p;
    *resp_len = b.len;
    return 1;
}

/* The value of header name in the request head, or NULL; *vlen its length. */
static const char *header_value(const char *head, size_t len, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    const char *end = head + len;
    const char *line = memmem(head, len, "\r\n", 2);
    while (line && line + 2 < end) {
        line += 2;
        const char *le = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (!le)
            break;
        if ((size_t)(le - line) > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = le;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *vlen = (size_t)(ve - v);
            return v;
        }
        line = le;
    }
    return NULL;
}

static int serve_metrics(const char *head, size_t len, const char *peer,
                         const struct sockaddr *peer_addr, char **resp, size_t *resp_len)
{
    size_t vlen = 0;
    const char *v = header_value(head, len, "Authorization", &vlen);
    int rc = -EACCES;
    if (v && vlen > 7 && strncasecmp(v, "Bearer ", 7) == 0)
        rc = auth_check_key(v + 7, vlen - 7, peer);
    else if (metrics_allow_match(peer_addr))
        rc = 0; /* --metrics-allow: this network scrapes without a key */
    else
        log_info("metrics: %s: /metrics without an API key refused%s", peer,
                 metrics_allow_count() ? " (not in --metrics-allow)" : "");
    if (rc == -EBUSY) {
        static const char msg[] = "too many failed logins from this address\n";
        return http_response(resp, resp_len, 429, "Too Many Requests", "", "text/plain", msg,
                             sizeof(msg) - 1);
    }
    if (rc < 0) {
        static const char msg[] = "an API key is required: Authorization: Bearer <key>\n";
        return http_response(resp, resp_len, 401, "Unauthorized",
                             "WWW-Authenticate: Bearer realm=\"blockd\"\r\n", "text/plain", msg,
                             sizeof(msg) - 1);
    }
    size_t blen = 0;
    char *body = metrics_render(&blen);
    if (!body) {
        static const char msg[] = "out of memory\n";
        return http_response(resp, resp_len, 503, "Service Unavailable", "", "text/plain", msg,
                             sizeof(msg) - 1);
    }
    int r = http_response(resp, resp_len, 200, "OK", "", "text/plain; version=0.0.4", body, blen);
    free(body);
    return r;
}

static int http_route(const char *head, size_t len, const char *peer,
                      const struct sockaddr *peer_addr, char **resp, size_t *resp_len)
{
    const char *eol = memmem(head, len, "\r\n", 2);
    if (!eol || len < 5 || memcmp(head, "GET ", 4) != 0)
        return 0;
    const char *path = head + 4;
    const char *pe = memchr(path, ' ', (size_t)(eol - path));
    if (!pe)
        return 0;
    size_t pl = (size_t)(pe - path);
    const char *q = memchr(path, '?', pl);
    if (q)
        pl = (size_t)(q - path);
    if (pl == 8 && memcmp(path, "/metrics", 8) == 0)
        return serve_metrics(head, len, peer, peer_addr, resp, resp_len);
    if ((pl == 3 && memcmp(path, "/ui", 3) == 0) || (pl == 4 && memcmp(path, "/ui/", 4) == 0))
        return http_response(resp, resp_len, 200, "OK",
                             "X-Frame-Options: DENY\r\nContent-Security-Policy: default-src "
                             "'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                             "connect-src 'self' ws: wss:; img-src data:\r\n",
                             "text/html; charset=utf-8", (const char *)ui_html, ui_html_len);
    return 0;
}

/* ---- core.metrics ---- */

static int m_core_metrics(struct api_call *call, json_t *params, json_t **result)
{
    struct vrow *v;
    int n = vrows_collect(&v);
    if (n < 0)
        return api_error(call, ENOMEM, "out of memory");
    json_t *vols = json_array();
    for (int i = 0; i < n; i++) {
        const struct iostats_totals *t = &v[i].t;
        uint64_t done = total_ops(t);
        json_t *o = json_object();
        json_object_set_new(o, "volume", json_string(iostats_name(v[i].slot)));
        json_object_set_new(o, "protocol", json_string(iostats_proto_name(v[i].proto)));
        json_object_set_new(o, "inflight",
                            json_integer((json_int_t)(t->started > done ? t->started - done : 0)));
        for (int op = 0; op < IOSTATS_NOP; op++) {
            json_t *x = json_object();
            json_object_set_new(x, "ops", json_integer((json_int_t)t->ops[op]));
            json_object_set_new(x, "bytes", json_integer((json_int_t)t->bytes[op]));
            json_object_set_new(x, "errors", json_integer((json_int_t)t->errors[op]));
            json_object_set_new(x, "seconds", json_real((double)t->sum_ns[op] / 1e9));
            json_object_set_new(o, iostats_op_name((enum iostats_op)op), x);
        }
        json_array_append_new(vols, o);
    }
    free(v);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *result = json_pack("{s:f, s:o}", "time", (double)ts.tv_sec + (double)ts.tv_nsec / 1e9,
                        "volumes", vols);
    return 0;
}

static const struct api_method methods[] = {
    {"core.metrics", NULL,
     "I/O counters per volume and protocol (ops, bytes, errors, seconds per operation; "
     "in-flight requests), with a monotonic time in seconds for computing rates",
     m_core_metrics, API_READ},
};

void metrics_init(void)
{
    api_register(methods, sizeof(methods) / sizeof(methods[0]));
    api_ws_set_http_handler(http_route);
}
