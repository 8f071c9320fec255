/* An RBD pool's cluster as data; the few files it may name (rbd_creds.h). */
#include "control/rbd_creds.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/ds_internal.h"
#include "core/allowdir.h"
#include "store/poolfs.h"

static bool within(const char *outer, const char *inner)
{
    size_t n = strlen(outer);

    return strncmp(outer, inner, n) == 0 && (inner[n] == '/' || inner[n] == '\0');
}

static bool plain_components(const char *p)
{
    for (p++;;) {
        size_t n = strcspn(p, "/");

        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        if (!p[n])
            return true;
        p += n + 1;
    }
}

int rbd_creds_path_check(const char *path, char *why, size_t whylen)
{
    char dir[PATH_MAX], root[PATH_MAX], list[1024];

    if (path[0] != '/' || strlen(path) >= PATH_MAX || !plain_components(path)) {
        snprintf(why, whylen, "%s: must be an absolute path without \".\", \"..\" or \"//\"", path);
        return -EINVAL;
    }
    /* Clients write volumes there: a "conf" could be a volume's data. */
    if ((ds_state_dir[0] && within(ds_state_dir, path)) ||
        poolfs_root_of(path, root, sizeof(root)) == 0) {
        snprintf(why, whylen,
                 "%s lies in blockd's state directory or a pool, where clients write: a Ceph "
                 "file must be in " RBD_CREDS_ETC " or a directory given with blockd --allow-dir",
                 path);
        return -EINVAL;
    }
    if (within(RBD_CREDS_ETC, path) || allowdir_below(path, ds_state_dir))
        return allowdir_canonical_parent(path, dir, sizeof(dir), why, whylen);
    allowdir_list(list, sizeof(list));
    snprintf(why, whylen,
             "%s: a Ceph conf or keyring must be in " RBD_CREDS_ETC
             " or a directory the operator allows with blockd --allow-dir (allowed: %s); or give "
             "the cluster as data: mon_host, id, key",
             path, list);
    return -EINVAL;
}

/* Owned by root or by us, and not writable by group or others. */
static bool owned_safely(const struct stat *st)
{
    return (st->st_uid == 0 || st->st_uid == geteuid()) && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

static int dir_check(const char *path, char *why, size_t whylen)
{
    char dir[PATH_MAX];
    struct stat st;
    int fd, rc;

    rc = allowdir_canonical_parent(path, dir, sizeof(dir), why, whylen);
    if (rc < 0)
        return rc;
    fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        snprintf(why, whylen, "directory %s: %s", dir, strerror(-rc));
        return rc;
    }
    close(fd);
    if (!owned_safely(&st)) {
        snprintf(why, whylen,
                 "directory %s must be owned by root and not writable by group or others", dir);
        return -EPERM;
    }
    return 0;
}

int rbd_creds_file_open(const char *path, char *why, size_t whylen)
{
    struct stat st;
    int fd, rc = rbd_creds_path_check(path, why, whylen);

    if (rc == 0)
        rc = dir_check(path, why, whylen);
    if (rc < 0)
        return rc;
    /* O_NONBLOCK: a FIFO planted there must not hang the open. */
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        snprintf(why, whylen, "%s: %s", path,
                 rc == -ELOOP ? "a symbolic link (not followed)" : strerror(-rc));
        return rc == -ELOOP ? -EINVAL : rc;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !owned_safely(&st) ||
        st.st_size > RBD_CREDS_FILE_MAX) {
        snprintf(why, whylen,
                 "%s must be a regular file of at most %d bytes, owned by root and not writable "
                 "by group or others",
                 path, RBD_CREDS_FILE_MAX);
        close(fd);
        return -EPERM;
    }
    return fd;
}

/* The whole file at path (rules above), NUL-terminated: a new buffer in
 * *out. 0 or -errno with why. */
static int file_read(const char *path, char **out, char *why, size_t whylen)
{
    char *buf = malloc(RBD_CREDS_FILE_MAX + 1);
    size_t n = 0;
    ssize_t r = 1;
    int fd = rbd_creds_file_open(path, why, whylen);

    *out = NULL;
    if (fd < 0 || !buf) {
        free(buf);
        if (fd >= 0)
            close(fd);
        return fd < 0 ? fd : -ENOMEM;
    }
    while (n < RBD_CREDS_FILE_MAX && (r = read(fd, buf + n, RBD_CREDS_FILE_MAX - n)) > 0)
        n += (size_t)r;
    close(fd);
    if (r < 0) {
        int e = errno;

        free(buf);
        snprintf(why, whylen, "%s: %s", path, strerror(e));
        return -e;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

static char *trim(char *s)
{
    char *e;

    while (*s == ' ' || *s == '\t')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* What blockd takes from a ceph.conf or a keyring. */
struct conf_vals {
    char mon_host[DS_RBD_MON_HOST_MAX];
    char keyring[PATH_MAX];
    char key[DS_RBD_KEY_MAX];
};

/* One "key = value" line of section sec (rank: how specific the section
 * is for client id; 0 ignores it) into *v. Keys are compared as Ceph
 * does: ' ' and '-' are '_'. */
static void conf_line(char *line, int rank, int *ranks, struct conf_vals *v)
{
    static const char *const keys[] = {"mon_host", "keyring", "key"};
    char *eq = strchr(line, '=');
    char *k, *val;

    if (!eq || rank == 0)
        return;
    *eq = '\0';
    k = trim(line);
    val = trim(eq + 1);
    val[strcspn(val, "#;")] = '\0';
    val = trim(val);
    for (char *c = k; *c; c++)
        *c = *c == ' ' || *c == '-' ? '_' : *c;
    for (int i = 0; i < 3; i++) {
        char *dst = i == 0 ? v->mon_host : i == 1 ? v->keyring : v->key;
        size_t len = i == 0 ? sizeof(v->mon_host) : i == 1 ? sizeof(v->keyring) : sizeof(v->key);

        if (strcmp(k, keys[i]) == 0 && rank >= ranks[i]) {
            snprintf(dst, len, "%s", val);
            ranks[i] = rank;
        }
    }
}

/* Parse text (ceph.conf or keyring syntax): the sections [global] (rank
 * 1), [client] (2) and [client.ID] (3) count. */
static void conf_parse(char *text, const char *id, struct conf_vals *v)
{
    int ranks[3] = {0, 0, 0}, rank = 0;
    char mine[DS_RBD_NAME_MAX + 8];

    snprintf(mine, sizeof(mine), "client.%s", id);
    memset(v, 0, sizeof(*v));
    for (char *next = text; next;) {
        char *nl = strchr(next, '\n');
        char *line = next;

        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        line = trim(line);
        if (*line == '#' || *line == ';' || !*line)
            continue;
        if (*line == '[') {
            char *end = strchr(line, ']');
            const char *sec = line + 1;

            if (end)
                *end = '\0';
            rank = strcmp(sec, "global") == 0   ? 1
                   : strcmp(sec, "client") == 0 ? 2
                   : strcmp(sec, mine) == 0     ? 3
                                                : 0;
            continue;
        }
        conf_line(line, rank, ranks, v);
    }
}

int rbd_creds_mon_host_check(const char *s, char *why, size_t whylen)
{
    for (const char *c = s; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              strchr(".:,[]/-_ ", *c))) {
            snprintf(why, whylen,
                     "mon_host: invalid character '%c' (monitor addresses: host or IP, port, "
                     "v1:/v2: prefixes, separated by ',' or ' ')",
                     *c);
            return -EINVAL;
        }
    }
    return 0;
}

int rbd_creds_key_check(const char *s, char *why, size_t whylen)
{
    size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=");

    if (s[n] || n >= DS_RBD_KEY_MAX) {
        snprintf(why, whylen, "key: must be a cephx key (base64, under %d characters)",
                 DS_RBD_KEY_MAX);
        return -EINVAL;
    }
    return 0;
}

/* The ceph.conf at path parsed into *v. 0 or -errno with why. */
static int conf_load(const char *path, const char *id, struct conf_vals *v, char *why,
                     size_t whylen)
{
    char *text;
    int rc = file_read(path, &text, why, whylen);

    if (rc < 0)
        return rc;
    conf_parse(text, id, v);
    explicit_bzero(text, strlen(text));
    free(text);
    return 0;
}

/* One keyring path with Ceph's metavariables ($cluster, $name, $id)
 * expanded into out. 0 or -EINVAL for another '$'. */
static int keyring_expand(const char *in, const char *id, char *out, size_t len)
{
    char name[DS_RBD_NAME_MAX + 8];
    const char *const vars[][2] = {{"$cluster", "ceph"}, {"$name", name}, {"$id", id}};
    size_t o = 0;

    snprintf(name, sizeof(name), "client.%s", id);
    for (const char *c = in; *c && o + 1 < len;) {
        size_t i = 0;

        if (*c != '$') {
            out[o++] = *c++;
            continue;
        }
        while (i < 3 && strncmp(c, vars[i][0], strlen(vars[i][0])) != 0)
            i++;
        if (i == 3)
            return -EINVAL;
        int n = snprintf(out + o, len - o, "%s", vars[i][1]);
        o = n < 0 || (size_t)n >= len - o ? len - 1 : o + (size_t)n;
        c += strlen(vars[i][0]);
    }
    out[o] = '\0';
    return 0;
}

/* The key of client.ID from the first existing file of list (a
 * ','-separated keyring setting); must: a missing file is an error (a
 * keyring the pool names), else it is skipped. 0 (key may stay "") or
 * -errno with why. */
static int keyring_load(const char *list, const char *id, bool must, char *key, size_t keylen,
                        char *why, size_t whylen)
{
    char buf[PATH_MAX], path[PATH_MAX];

    snprintf(buf, sizeof(buf), "%s", list);
    for (char *next = buf; next && *next;) {
        char *comma = strchr(next, ',');
        struct conf_vals v;
        int rc;

        if (comma)
            *comma = '\0';
        rc = keyring_expand(trim(next), id, path, sizeof(path));
        next = comma ? comma + 1 : NULL;
        if (rc < 0) {
            snprintf(why, whylen, "keyring %s: unknown $ variable", list);
            return rc;
        }
        if (strcmp(path, "/dev/null") == 0)
            continue; /* Ceph's way to say "no keyring" (a cluster without cephx) */
        rc = conf_load(path, id, &v, why, whylen);
        if (rc == -ENOENT && !must)
            continue;
        if (rc < 0)
            return rc;
        snprintf(key, keylen, "%s", v.key);
        explicit_bzero(&v, sizeof(v));
        return 0;
    }
    return 0;
}

/* The defaults Ceph searches when no keyring is named. */
#define DEFAULT_KEYRINGS                                                                           \
    RBD_CREDS_ETC "/ceph.$name.keyring," RBD_CREDS_ETC "/ceph.keyring," RBD_CREDS_ETC "/keyring"

int rbd_creds_resolve(const struct ds_rbd_spec *s, struct rbd_creds *out, char *why, size_t whylen)
{
    const char *conf = s->conf[0] ? s->conf : s->mon_host[0] ? NULL : RBD_CREDS_ETC "/ceph.conf";
    struct conf_vals v = {{0}};
    int rc = 0;

    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", s->id[0] ? s->id : "admin");
    if (conf && (rc = conf_load(conf, out->id, &v, why, whylen)) < 0)
        return rc;
    snprintf(out->mon_host, sizeof(out->mon_host), "%s", s->mon_host[0] ? s->mon_host : v.mon_host);
    snprintf(out->key, sizeof(out->key), "%s", s->key[0] ? s->key : v.key);
    if (!out->key[0] && s->keyring[0])
        rc = keyring_load(s->keyring, out->id, true, out->key, sizeof(out->key), why, whylen);
    else if (!out->key[0] && conf) /* data only (mon_host): no file is read */
        rc = keyring_load(v.keyring[0] ? v.keyring : DEFAULT_KEYRINGS, out->id, v.keyring[0] != 0,
                          out->key, sizeof(out->key), why, whylen);
    explicit_bzero(&v, sizeof(v));
    if (rc == 0 && !out->mon_host[0]) {
        snprintf(why, whylen, "no mon_host given%s%s", conf ? " nor found in " : "",
                 conf ? conf : "");
        rc = -EINVAL;
    }
    if (rc == 0)
        rc = rbd_creds_mon_host_check(out->mon_host, why, whylen);
    if (rc == 0)
        rc = rbd_creds_key_check(out->key, why, whylen);
    if (rc < 0)
        rbd_creds_clear(out);
    return rc;
}

void rbd_creds_clear(struct rbd_creds *c)
{
    explicit_bzero(c, sizeof(*c));
}

void rbd_creds_cluster_spec(const struct rbd_creds *c, struct rbd_cluster_spec *cs)
{
    memset(cs, 0, sizeof(*cs)); /* no conf, no keyring: librados reads no file */
    cs->mon_host = c->mon_host;
    cs->id = c->id;
    cs->key = c->key;
}
