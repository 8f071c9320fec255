/* blockctl pool / volume / snapshot commands (TrueNAS-shaped API calls). */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- helpers ---- */

static int need_args(struct cli_ctx *ctx, int argc, int want, const char *what)
{
    if (argc - optind < want)
        return cli_usage(ctx, "missing %s", what);
    if (argc - optind > want)
        return cli_usage(ctx, "too many arguments");
    return 0;
}

/* The options of a command that takes one operand (what names it): vals[i]
 * is opts[i]'s argument, "" for a flag, NULL when not given. 0 or CLI_USAGE
 * (reported). */
static int opts_one_arg(struct cli_ctx *ctx, int argc, char **argv, const struct option *opts,
                        const char **vals, const char *what)
{
    cli_opt_begin();
    int c;
    while ((c = cli_opt_next(ctx, argc, argv, "", opts)) != -1) {
        if (c == '?')
            return CLI_USAGE;
        for (size_t i = 0; opts[i].name; i++)
            if (opts[i].val == c)
                vals[i] = opts[i].has_arg == no_argument ? "" : optarg;
    }
    return need_args(ctx, argc, 1, what) ? CLI_USAGE : 0;
}

static int parse_size_arg(struct cli_ctx *ctx, const char *opt, const char *s, uint64_t *out)
{
    if (cli_parse_size(s, out) < 0)
        return cli_usage(ctx, "%s: invalid size '%s' (a number with optional K, M, G, T suffix)",
                         opt, s);
    if (*out > (uint64_t)INT64_MAX)
        return cli_usage(ctx, "%s: size '%s' too large", opt, s);
    return 0;
}

/* The --size every volume create and resize needs. 0 or CLI_USAGE
 * (reported). */
static int size_required(struct cli_ctx *ctx, const char *size, uint64_t *bytes)
{
    if (!size)
        return cli_usage(ctx, "--size is required");
    return parse_size_arg(ctx, "--size", size, bytes) ? CLI_USAGE : 0;
}

static void human_size(json_t *row, const char *key, char *buf, size_t len)
{
    uint64_t v;
    if (cli_prop_int(row, key, &v))
        cli_format_size(v, buf, len);
    else
        snprintf(buf, len, "-");
}

/* First of several keys that holds a size. */
static void human_size_any(json_t *row, const char *const *keys, char *buf, size_t len)
{
    uint64_t v;
    for (size_t i = 0; keys[i]; i++) {
        if (cli_prop_int(row, keys[i], &v)) {
            cli_format_size(v, buf, len);
            return;
        }
    }
    snprintf(buf, len, "-");
}

static const char *row_name(json_t *row)
{
    const char *n = json_string_value(json_object_get(row, "id"));
    return n ? n : json_string_value(json_object_get(row, "name"));
}

static bool has_at(const char *s)
{
    const char *at = strchr(s, '@');
    return at && at != s && at[1];
}

/* Print the result the way --json wants, or the human line. */
static int done(struct cli_ctx *ctx, json_t *result, const char *fmt, const char *a, const char *b)
{
    if (ctx->json)
        cli_print_json(result);
    else
        printf(fmt, a, b);
    json_decref(result);
    return CLI_OK;
}

/* ---- pool ---- */

/* path made absolute (the daemon has its own working directory) into
 * buf; NULL if it cannot be. */
static const char *abs_path(const char *path, char *buf, size_t len)
{
    char cwd[PATH_MAX];

    if (path[0] == '/')
        return path;
    if (!getcwd(cwd, sizeof(cwd)) || (size_t)snprintf(buf, len, "%s/%s", cwd, path) >= len)
        return NULL;
    return buf;
}

struct pool_opts {
    const char *path, *rbd, *ns, *conf, *id, *keyring, *mon_host, *key_file;
};

/* Parse pool create's options into o; 0 or CLI_USAGE. */
static int pool_create_opts(struct cli_ctx *ctx, int argc, char **argv, struct pool_opts *o)
{
    enum {
        O_PATH = 'p',
        O_RBD = 'r',
        O_NS = 'n',
        O_CONF = 'c',
        O_ID = 'i',
        O_KEYRING = 'k',
        O_MON = 'm',
        O_KEYFILE = 'K'
    };
    static const struct option opts[] = {{"path", required_argument, NULL, O_PATH},
                                         {"rbd", required_argument, NULL, O_RBD},
                                         {"rbd-namespace", required_argument, NULL, O_NS},
                                         {"ceph-conf", required_argument, NULL, O_CONF},
                                         {"ceph-id", required_argument, NULL, O_ID},
                                         {"keyring", required_argument, NULL, O_KEYRING},
                                         {"mon-host", required_argument, NULL, O_MON},
                                         {"ceph-key-file", required_argument, NULL, O_KEYFILE},
                                         {0}};
    cli_opt_begin();
    int c;
    while ((c = cli_opt_next(ctx, argc, argv, "", opts)) != -1) {
        const char **field = c == O_PATH      ? &o->path
                             : c == O_RBD     ? &o->rbd
                             : c == O_NS      ? &o->ns
                             : c == O_CONF    ? &o->conf
                             : c == O_ID      ? &o->id
                             : c == O_KEYRING ? &o->keyring
                             : c == O_MON     ? &o->mon_host
                             : c == O_KEYFILE ? &o->key_file
                                              : NULL;
        if (!field)
            return CLI_USAGE;
        *field = optarg;
    }
    if (need_args(ctx, argc, 1, "pool NAME"))
        return CLI_USAGE;
    if (!o->rbd && (o->ns || o->conf || o->id || o->keyring || o->mon_host || o->key_file))
        return cli_usage(ctx, "--rbd-namespace, --mon-host, --ceph-key-file, --ceph-conf, "
                              "--ceph-id and --keyring need --rbd");
    if (o->rbd && o->path)
        return cli_usage(ctx, "a pool has either --path or --rbd, not both");
    return 0;
}

/* Set key to path made absolute in obj; false if it cannot be. */
static bool set_abs_path(json_t *obj, const char *key, const char *path)
{
    char buf[PATH_MAX];
    const char *abs = abs_path(path, buf, sizeof(buf));
    if (!abs)
        return false;
    json_object_set_new(obj, key, json_string(abs));
    return true;
}

/* The cephx key in file (read by blockctl, with its user's rights, and
 * sent as data): a keyring's "key = ..." line, or the file's first line.
 * Into r's "key"; false after printing why. */
static bool set_key_from_file(json_t *r, const char *file)
{
    char line[512], key[256] = "";
    FILE *f = fopen(file, "re");

    if (!f) {
        cli_fail("cannot read %s: %s", file, strerror(errno));
        return false;
    }
    while (fgets(line, sizeof(line), f)) {
        char *eq = strchr(line, '=');
        char *v = line;

        if (eq && strncmp(line + strspn(line, " \t"), "key", 3) == 0)
            v = eq + 1;
        else if (key[0] || eq || line[0] == '[')
            continue;
        v += strspn(v, " \t");
        size_t n = strcspn(v, " \t\r\n");
        if (n >= sizeof(key))
            n = sizeof(key) - 1;
        memcpy(key, v, n); /* not snprintf "%.*s": a false -Wformat-truncation at -O3 */
        key[n] = '\0';
        if (eq)
            break;
    }
    fclose(f);
    if (!key[0]) {
        cli_fail("no key found in %s", file);
        return false;
    }
    json_object_set_new(r, "key", json_string(key));
    explicit_bzero(key, sizeof(key));
    explicit_bzero(line, sizeof(line));
    return true;
}

/* The pool.create parameters for o, or NULL after printing why. */
static json_t *pool_create_params(const char *name, const struct pool_opts *o)
{
    json_t *data = json_pack("{s:s}", "name", name);
    if (o->path && !set_abs_path(data, "path", o->path)) {
        cli_fail("cannot make %s absolute", o->path);
        json_decref(data);
        return NULL;
    }
    if (!o->rbd)
        return data;
    json_t *r = json_pack("{s:s}", "pool", o->rbd);
    json_object_set_new(data, "rbd", r);
    if (o->ns)
        json_object_set_new(r, "namespace", json_string(o->ns));
    if (o->id)
        json_object_set_new(r, "id", json_string(o->id));
    if (o->mon_host)
        json_object_set_new(r, "mon_host", json_string(o->mon_host));
    if (o->key_file && !set_key_from_file(r, o->key_file)) {
        json_decref(data);
        return NULL;
    }
    const char *bad = o->conf && !set_abs_path(r, "conf", o->conf)            ? "--ceph-conf"
                      : o->keyring && !set_abs_path(r, "keyring", o->keyring) ? "--keyring"
                                                                              : NULL;
    if (bad) {
        cli_fail("cannot make the %s path absolute", bad);
        json_decref(data);
        return NULL;
    }
    return data;
}

static int pool_create(struct cli_ctx *ctx, int argc, char **argv)
{
    struct pool_opts o = {0};
    int rc = pool_create_opts(ctx, argc, argv, &o);
    if (rc)
        return rc;
    json_t *data = pool_create_params(argv[optind], &o);
    if (!data)
        return CLI_ERROR;
    json_t *res;
    rc = cli_call(ctx, "pool.create", json_pack("[o]", data), &res);
    if (rc)
        return rc;
    return done(ctx, res, "created\t%s%s\n", argv[optind], "");
}

static int pool_list(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *res;
    int rc = cli_call(ctx, "pool.query", json_pack("[[], {s:[s]}]", "order_by", "name"), &res);
    if (rc)
        return rc;
    if (ctx->json)
        return done(ctx, res, "", "", "");
    static const char *const hdr[] = {"NAME", "PATH", "STATUS", ">SIZE", ">FREE"};
    struct cli_table *t = cli_table_new(5, hdr);
    size_t i;
    json_t *row;
    json_array_foreach(res, i, row)
    {
        static const char *const size_keys[] = {"size", "total", NULL};
        static const char *const free_keys[] = {"free", "available", NULL};
        char size[32], avail[32];
        human_size_any(row, size_keys, size, sizeof(size));
        human_size_any(row, free_keys, avail, sizeof(avail));
        const char *cells[] = {cli_prop_str(row, "name"), cli_prop_str(row, "path"),
                               cli_prop_str(row, "status"), size, avail};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(res);
    return CLI_OK;
}

/* ---- volume ---- */

static int upper_sync(struct cli_ctx *ctx, const char *s, char *out, size_t len)
{
    static const char *const ok[] = {"standard", "always", "disabled"};
    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(s, ok[i]) == 0) {
            size_t k = 0;
            for (; ok[i][k] && k + 1 < len; k++)
                out[k] = (char)toupper((unsigned char)ok[i][k]);
            out[k] = 0;
            return 0;
        }
    }
    return cli_usage(ctx, "--sync: '%s' is not one of standard, always, disabled", s);
}

static int volume_create(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"size", required_argument, NULL, 's'}, {"blocksize", required_argument, NULL, 'b'},
        {"sync", required_argument, NULL, 'y'}, {"readonly", no_argument, NULL, 'r'},
        {"thick", no_argument, NULL, 't'},      {0},
    };
    const char *size = NULL, *bs = NULL, *sync = NULL;
    bool ro = false, thick = false;
    cli_opt_begin();
    int c;
    while ((c = cli_opt_next(ctx, argc, argv, "", opts)) != -1) {
        switch (c) {
        case 's':
            size = optarg;
            break;
        case 'b':
            bs = optarg;
            break;
        case 'y':
            sync = optarg;
            break;
        case 'r':
            ro = true;
            break;
        case 't':
            thick = true;
            break;
        default:
            return CLI_USAGE;
        }
    }
    if (need_args(ctx, argc, 1, "POOL/NAME"))
        return CLI_USAGE;
    uint64_t bytes;
    if (size_required(ctx, size, &bytes))
        return CLI_USAGE;
    const char *name = argv[optind];
    json_t *data = json_pack("{s:s, s:s, s:I, s:b, s:s}", "name", name, "type", "VOLUME", "volsize",
                             (json_int_t)bytes, "sparse", !thick, "readonly", ro ? "ON" : "OFF");
    if (bs) {
        uint64_t b;
        if (parse_size_arg(ctx, "--blocksize", bs, &b)) {
            json_decref(data);
            return CLI_USAGE;
        }
        char text[32];
        if (b >= 1024 && b % 1024 == 0)
            snprintf(text, sizeof(text), "%lluK", (unsigned long long)(b / 1024));
        else
            snprintf(text, sizeof(text), "%llu", (unsigned long long)b);
        json_object_set_new(data, "volblocksize", json_string(text));
    }
    if (sync) {
        char up[16];
        if (upper_sync(ctx, sync, up, sizeof(up))) {
            json_decref(data);
            return CLI_USAGE;
        }
        json_object_set_new(data, "sync", json_string(up));
    }
    json_t *res;
    int rc = cli_call(ctx, "pool.dataset.create", json_pack("[o]", data), &res);
    if (rc)
        return rc;
    return done(ctx, res, "created\t%s%s\n", name, "");
}

static json_t *volume_filters(void)
{
    return json_pack("[[[s, s, s]], {s:[s]}]", "type", "=", "VOLUME", "order_by", "name");
}

static void volume_row(struct cli_table *t, json_t *row)
{
    char size[32], used[32], bs[32];
    human_size(row, "volsize", size, sizeof(size));
    static const char *const used_keys[] = {"used", "allocated", "referenced", NULL};
    human_size_any(row, used_keys, used, sizeof(used));
    const char *bss = cli_prop_str(row, "volblocksize");
    uint64_t b;
    if (!bss && cli_prop_int(row, "volblocksize", &b)) {
        if (b % 1024 == 0)
            snprintf(bs, sizeof(bs), "%lluK", (unsigned long long)(b / 1024));
        else
            snprintf(bs, sizeof(bs), "%llu", (unsigned long long)b);
        bss = bs;
    }
    const char *ro = cli_prop_str(row, "readonly");
    const char *origin = cli_prop_str(row, "origin");
    const char *sparse = cli_prop_str(row, "sparse");
    const char *alloc = sparse ? (strcmp(sparse, "true") == 0 ? "sparse" : "thick") : NULL;
    if (!alloc) {
        const char *thick = cli_prop_str(row, "thick");
        alloc = thick ? (strcmp(thick, "true") == 0 ? "thick" : "sparse") : NULL;
    }
    const char *cells[] = {row_name(row),
                           size,
                           used,
                           bss,
                           cli_prop_str(row, "sync"),
                           ro,
                           alloc,
                           origin && *origin ? origin : NULL};
    cli_table_add(t, cells);
}

static int volume_list(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *res;
    int rc = cli_call(ctx, "pool.dataset.query", volume_filters(), &res);
    if (rc)
        return rc;
    if (ctx->json)
        return done(ctx, res, "", "", "");
    static const char *const hdr[] = {"NAME", ">SIZE",    ">USED", ">BLOCKSIZE",
                                      "SYNC", "READONLY", "ALLOC", "ORIGIN"};
    struct cli_table *t = cli_table_new(8, hdr);
    size_t i;
    json_t *row;
    json_array_foreach(res, i, row) volume_row(t, row);
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(res);
    return CLI_OK;
}

static bool is_size_key(const char *k)
{
    static const char *const keys[] = {"volsize",
                                       "used",
                                       "allocated",
                                       "referenced",
                                       "available",
                                       "size",
                                       "free",
                                       "refreservation",
                                       "reservation",
                                       "usedbydataset",
                                       "usedbysnapshots",
                                       "usedbychildren",
                                       NULL};
    for (size_t i = 0; keys[i]; i++)
        if (strcmp(k, keys[i]) == 0)
            return true;
    return false;
}

static void show_row(json_t *row)
{
    size_t w = 0;
    const char *key;
    json_t *v;
    json_object_foreach(row, key, v) if (strlen(key) > w) w = strlen(key);
    json_object_foreach(row, key, v)
    {
        uint64_t n;
        if (is_size_key(key) && cli_prop_int(row, key, &n)) {
            char h[32];
            cli_format_size(n, h, sizeof(h));
            printf("%-*s  %s (%llu bytes)\n", (int)w, key, h, (unsigned long long)n);
            continue;
        }
        const char *s = cli_prop_str(row, key);
        if (s) {
            printf("%-*s  %s\n", (int)w, key, s);
            continue;
        }
        if (json_is_object(v) && json_is_integer(json_object_get(v, "parsed"))) {
            printf("%-*s  %lld\n", (int)w, key,
                   (long long)json_integer_value(json_object_get(v, "parsed")));
            continue;
        }
        char *j = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        printf("%-*s  %s\n", (int)w, key, j ? j : "?");
        free(j);
    }
}

static int volume_show(struct cli_ctx *ctx, int argc, char **argv)
{
    cli_opt_begin();
    if (cli_opt_next(ctx, argc, argv, "", (const struct option[]){{0}}) == '?')
        return CLI_USAGE;
    if (need_args(ctx, argc, 1, "volume NAME"))
        return CLI_USAGE;
    const char *name = argv[optind];
    json_t *res, *err;
    int rc = cli_call_raw(ctx, "pool.dataset.query",
                          json_pack("[[[s, s, s]], {s:b}]", "id", "=", name, "get", 1), &res, &err);
    if (err) {
        json_t *data = json_object_get(err, "data");
        const char *en = json_string_value(json_object_get(data, "errname"));
        if (en && strcmp(en, "ENOENT") == 0 &&
            json_integer_value(json_object_get(err, "code")) == -32001)
            fprintf(stderr, "blockctl: volume %s does not exist\n", name);
        else
            cli_print_error(err);
        json_decref(err);
        return CLI_ERROR;
    }
    if (rc)
        return rc;
    if (ctx->json)
        return done(ctx, res, "", "", "");
    show_row(res);
    json_decref(res);
    return CLI_OK;
}

static int volume_resize(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {{"size", required_argument, NULL, 's'}, {0}};
    const char *size = NULL;
    if (opts_one_arg(ctx, argc, argv, opts, &size, "volume NAME"))
        return CLI_USAGE;
    uint64_t bytes;
    if (size_required(ctx, size, &bytes))
        return CLI_USAGE;
    const char *name = argv[optind];
    json_t *res;
    int rc = cli_call(ctx, "pool.dataset.update",
                      json_pack("[s, {s:I}]", name, "volsize", (json_int_t)bytes), &res);
    if (rc)
        return rc;
    char h[32];
    cli_format_size(bytes, h, sizeof(h));
    return done(ctx, res, "resized\t%s\t%s\n", name, h);
}

static int volume_set(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {{"sync", required_argument, NULL, 'y'},
                                         {"readonly", required_argument, NULL, 'r'},
                                         {"comments", required_argument, NULL, 'c'},
                                         {0}};
    json_t *changes = json_object();
    cli_opt_begin();
    int c;
    while ((c = cli_opt_next(ctx, argc, argv, "", opts)) != -1) {
        char up[16];
        switch (c) {
        case 'y':
            if (upper_sync(ctx, optarg, up, sizeof(up))) {
                json_decref(changes);
                return CLI_USAGE;
            }
            json_object_set_new(changes, "sync", json_string(up));
            break;
        case 'r':
            if (strcasecmp(optarg, "on") != 0 && strcasecmp(optarg, "off") != 0) {
                json_decref(changes);
                return cli_usage(ctx, "--readonly: '%s' is not on or off", optarg);
            }
            json_object_set_new(changes, "readonly",
                                json_string(strcasecmp(optarg, "on") == 0 ? "ON" : "OFF"));
            break;
        case 'c':
            json_object_set_new(changes, "comments", json_string(optarg));
            break;
        default:
            json_decref(changes);
            return CLI_USAGE;
        }
    }
    if (need_args(ctx, argc, 1, "volume NAME")) {
        json_decref(changes);
        return CLI_USAGE;
    }
    if (json_object_size(changes) == 0) {
        json_decref(changes);
        return cli_usage(ctx, "nothing to change (give --sync, --readonly or --comments)");
    }
    const char *name = argv[optind];
    json_t *res;
    int rc = cli_call(ctx, "pool.dataset.update", json_pack("[s, o]", name, changes), &res);
    if (rc)
        return rc;
    return done(ctx, res, "updated\t%s%s\n", name, "");
}

static int volume_delete(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {{"recursive", no_argument, NULL, 'r'}, {0}};
    const char *recursive = NULL;
    if (opts_one_arg(ctx, argc, argv, opts, &recursive, "volume NAME"))
        return CLI_USAGE;
    const char *name = argv[optind];
    json_t *res;
    int rc = cli_call(ctx, "pool.dataset.delete",
                      json_pack("[s, {s:b}]", name, "recursive", recursive != NULL), &res);
    if (rc)
        return rc;
    return done(ctx, res, "deleted\t%s%s\n", name, "");
}

/* Positional-only commands: exactly n args, no options. */
static int plain_args(struct cli_ctx *ctx, int argc, char **argv, int n, const char *what)
{
    cli_opt_begin();
    if (cli_opt_next(ctx, argc, argv, "", (const struct option[]){{0}}) == '?')
        return CLI_USAGE;
    return need_args(ctx, argc, n, what) ? CLI_USAGE : 0;
}

static int volume_snapshot(struct cli_ctx *ctx, int argc, char **argv)
{
    if (plain_args(ctx, argc, argv, 1, "POOL/VOL@SNAP"))
        return CLI_USAGE;
    const char *full = argv[optind];
    if (!has_at(full))
        return cli_usage(ctx, "'%s' is not POOL/VOL@SNAP", full);
    const char *at = strchr(full, '@');
    char *ds = strndup(full, (size_t)(at - full));
    json_t *res;
    int rc = cli_call(ctx, "zfs.snapshot.create",
                      json_pack("[{s:s, s:s}]", "dataset", ds, "name", at + 1), &res);
    free(ds);
    if (rc)
        return rc;
    return done(ctx, res, "created\t%s%s\n", full, "");
}

static int volume_clone(struct cli_ctx *ctx, int argc, char **argv)
{
    if (plain_args(ctx, argc, argv, 2, "POOL/VOL@SNAP and POOL/NEW"))
        return CLI_USAGE;
    const char *snap = argv[optind], *dst = argv[optind + 1];
    if (!has_at(snap))
        return cli_usage(ctx, "'%s' is not POOL/VOL@SNAP", snap);
    char label[512];
    snprintf(label, sizeof(label), "cloning %s to %s", snap, dst);
    ctx->progress_label = label;
    json_t *res;
    int rc = cli_call(ctx, "zfs.snapshot.clone",
                      json_pack("[{s:s, s:s}]", "snapshot", snap, "dataset_dst", dst), &res);
    ctx->progress_label = NULL;
    if (rc)
        return rc;
    return done(ctx, res, "cloned\t%s\t%s\n", snap, dst);
}

static int volume_rollback(struct cli_ctx *ctx, int argc, char **argv)
{
    /* --force: roll back even while clients are connected to the volume's
     * shares (NBD clients are disconnected, iSCSI sessions get a unit
     * attention); --recursive: destroy the snapshots newer than SNAP. */
    static const struct option opts[] = {
        {"force", no_argument, NULL, 'f'}, {"recursive", no_argument, NULL, 'r'}, {0}};
    const char *given[2] = {NULL, NULL}; /* --force, --recursive */
    if (opts_one_arg(ctx, argc, argv, opts, given, "POOL/VOL@SNAP"))
        return CLI_USAGE;
    bool force = given[0] != NULL, recursive = given[1] != NULL;
    const char *snap = argv[optind];
    if (!has_at(snap))
        return cli_usage(ctx, "'%s' is not POOL/VOL@SNAP", snap);
    char label[512];
    snprintf(label, sizeof(label), "rolling back to %s", snap);
    ctx->progress_label = label;
    json_t *res;
    json_t *opts_obj = json_object();
    if (force)
        json_object_set_new(opts_obj, "force", json_true());
    if (recursive)
        json_object_set_new(opts_obj, "recursive", json_true());
    int rc = cli_call(ctx, "zfs.snapshot.rollback", json_pack("[s, o]", snap, opts_obj), &res);
    ctx->progress_label = NULL;
    if (rc)
        return rc;
    return done(ctx, res, "rolled back\t%s%s\n", snap, "");
}

/* ---- snapshot ---- */

static int snapshot_list(struct cli_ctx *ctx, int argc, char **argv)
{
    cli_opt_begin();
    if (cli_opt_next(ctx, argc, argv, "", (const struct option[]){{0}}) == '?')
        return CLI_USAGE;
    if (argc - optind > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *filters = json_array();
    if (argc - optind == 1)
        json_array_append_new(filters, json_pack("[s, s, s]", "dataset", "=", argv[optind]));
    json_t *res;
    int rc = cli_call(ctx, "zfs.snapshot.query",
                      json_pack("[o, {s:[s]}]", filters, "order_by", "id"), &res);
    if (rc)
        return rc;
    if (ctx->json)
        return done(ctx, res, "", "", "");
    static const char *const hdr[] = {"NAME", "DATASET", ">SIZE", ">USED", "CREATED", "CLONES"};
    struct cli_table *t = cli_table_new(6, hdr);
    size_t i;
    json_t *row;
    json_array_foreach(res, i, row)
    {
        char size[32], used[32];
        static const char *const size_keys[] = {"volsize", "size", NULL};
        static const char *const used_keys[] = {"used", "allocated", "referenced", NULL};
        human_size_any(row, size_keys, size, sizeof(size));
        human_size_any(row, used_keys, used, sizeof(used));
        json_t *props = json_object_get(row, "properties");
        if (strcmp(used, "-") == 0 && props)
            human_size_any(props, used_keys, used, sizeof(used));
        if (strcmp(size, "-") == 0 && props)
            human_size_any(props, size_keys, size, sizeof(size));
        const char *created = cli_prop_str(row, "created");
        if (!created)
            created = cli_prop_str(row, "creation");
        if (!created)
            created = cli_prop_str(json_object_get(row, "properties"), "creation");
        const char *clones = cli_prop_str(row, "clones");
        if (!clones)
            clones = cli_prop_str(json_object_get(row, "properties"), "clones");
        const char *cells[] = {row_name(row), cli_prop_str(row, "dataset"),     size, used,
                               created,       clones && *clones ? clones : NULL};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(res);
    return CLI_OK;
}

static int snapshot_delete(struct cli_ctx *ctx, int argc, char **argv)
{
    if (plain_args(ctx, argc, argv, 1, "POOL/VOL@SNAP"))
        return CLI_USAGE;
    const char *snap = argv[optind];
    if (!has_at(snap))
        return cli_usage(ctx, "'%s' is not POOL/VOL@SNAP", snap);
    json_t *res;
    int rc = cli_call(ctx, "zfs.snapshot.delete", json_pack("[s]", snap), &res);
    if (rc)
        return rc;
    return done(ctx, res, "deleted\t%s%s\n", snap, "");
}

static const struct cli_command volume_commands[] = {
    {"pool", "create",
     "NAME [--path DIR | --rbd POOL [--rbd-namespace NS] [--mon-host ADDRS] [--ceph-id ID] "
     "[--ceph-key-file FILE] [--ceph-conf FILE] [--keyring FILE]]",
     "Create a pool (a directory, or a Ceph RBD pool, holding volumes)", pool_create},
    {"pool", "list", "", "List pools", pool_list},
    {"volume", "create",
     "POOL/NAME --size SIZE [--blocksize B] [--sync standard|always|disabled] [--readonly] "
     "[--thick]",
     "Create a volume (sparse unless --thick; blocksize 512..128K, default 16K)", volume_create},
    {"volume", "list", "", "List volumes", volume_list},
    {"volume", "show", "NAME", "Show every property of a volume", volume_show},
    {"volume", "resize", "NAME --size SIZE", "Grow or shrink a volume", volume_resize},
    {"volume", "set",
     "NAME [--sync standard|always|disabled] [--readonly on|off] [--comments TEXT]",
     "Change a volume's properties", volume_set},
    {"volume", "delete", "NAME [--recursive]", "Delete a volume (--recursive: with its snapshots)",
     volume_delete},
    {"volume", "snapshot", "POOL/VOL@SNAP", "Take a snapshot", volume_snapshot},
    {"volume", "clone", "POOL/VOL@SNAP POOL/NEW", "Create a volume from a snapshot", volume_clone},
    {"volume", "rollback", "[--force] [--recursive] POOL/VOL@SNAP",
     "Replace a volume's contents with a snapshot's (--force: even with clients connected)",
     volume_rollback},
    {"snapshot", "list", "[POOL/VOL]", "List snapshots (of one volume)", snapshot_list},
    {"snapshot", "delete", "POOL/VOL@SNAP", "Delete a snapshot", snapshot_delete},
};
CLI_COMMANDS(volume_commands)
