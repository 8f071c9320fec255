#include "daemon/config_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

/* Files are a handful of lines; a bound keeps a wrong --config (a disk
 * image) from eating memory. */
#define CONFIG_MAX_LINES 4096
#define CONFIG_MAX_LINE 4096

struct setting {
    const struct option *opt; /* the flag this key is */
    char *value;              /* NULL for a flag without argument */
    bool off;                 /* "no"/"false" for a flag without argument */
    int line;
};

struct settings {
    struct setting *v;
    size_t n;
};

static const struct option *flags; /* the daemon's getopt table */
static char *file_path;            /* NULL: no file */
static struct settings loaded;     /* as read at start */
static char **cmdline_argv;        /* the original arguments */
static int cmdline_argc;
static int file_words_end; /* argv[1..end) came from the file */
static int *word_lines;    /* their line numbers */

/* Keys the file may not set: they are about this invocation. */
static bool key_reserved(const char *name)
{
    return strcmp(name, "config") == 0 || strcmp(name, "help") == 0 || strcmp(name, "version") == 0;
}

static const struct option *flag_find(const char *key)
{
    char name[128];
    size_t len = strlen(key);
    if (len >= sizeof(name))
        return NULL;
    for (size_t i = 0; i <= len; i++)
        name[i] = key[i] == '_' ? '-' : key[i];
    for (const struct option *o = flags; o->name; o++)
        if (strcmp(o->name, name) == 0)
            return key_reserved(o->name) ? NULL : o;
    return NULL;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = 0;
    return s;
}

static void settings_free(struct settings *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].value);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

/* A flag without argument takes yes/true/1/on or no/false/0/off. */
static int setting_bool(const char *value, bool *off)
{
    if (!strcmp(value, "yes") || !strcmp(value, "true") || !strcmp(value, "1") ||
        !strcmp(value, "on")) {
        *off = false;
        return 0;
    }
    if (!strcmp(value, "no") || !strcmp(value, "false") || !strcmp(value, "0") ||
        !strcmp(value, "off")) {
        *off = true;
        return 0;
    }
    return -EINVAL;
}

/* The value of key (flag o) into st: a flag's yes or no, or a copy of an
 * argument. On error writes "path:line: why" to err. */
static int setting_value(const struct option *o, const char *key, const char *value,
                         struct setting *st, const char *path, char *err, size_t errlen)
{
    if (o->has_arg == no_argument) {
        if (setting_bool(value, &st->off) < 0) {
            snprintf(err, errlen, "%s:%d: %s takes yes or no", path, st->line, key);
            return -EINVAL;
        }
        return 0;
    }
    if (!*value && o->has_arg == required_argument) {
        snprintf(err, errlen, "%s:%d: %s needs a value", path, st->line, key);
        return -EINVAL;
    }
    if (!(st->value = strdup(value))) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    return 0;
}

/* One line (buf, read whole) into st. 1 for a blank or comment line, 0
 * with st filled (st->value is the caller's), or -errno with "path:line:
 * why" in err. */
static int setting_parse_line(char *buf, int lineno, struct setting *st, const char *path,
                              char *err, size_t errlen)
{
    char *s = trim(buf), *eq, *key, *value;
    const struct option *o;
    size_t vlen;

    if (!*s || *s == '#')
        return 1;
    eq = strchr(s, '=');
    if (!eq) {
        snprintf(err, errlen, "%s:%d: expected 'key = value'", path, lineno);
        return -EINVAL;
    }
    *eq = 0;
    key = trim(s);
    value = trim(eq + 1);
    o = flag_find(key);
    if (!o) {
        snprintf(err, errlen, "%s:%d: unknown key '%s' (see blockd.conf(5))", path, lineno, key);
        return -EINVAL;
    }
    /* "a value" keeps its spaces and '#'s */
    vlen = strlen(value);
    if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
        value[vlen - 1] = 0;
        value++;
    }
    *st = (struct setting){.opt = o, .line = lineno};
    return setting_value(o, key, value, st, path, err, errlen);
}

/* Append st to out (which then owns st.value). 0 or -ENOMEM. */
static int settings_append(struct settings *out, struct setting st)
{
    struct setting *nv = realloc(out->v, (out->n + 1) * sizeof(*nv));

    if (!nv)
        return -ENOMEM;
    out->v = nv;
    out->v[out->n++] = st;
    return 0;
}

/* Parse path into out. On error writes "path:line: why" to err. The
 * bounds (lines, line length) keep a wrong --config from eating memory. */
static int settings_read(const char *path, struct settings *out, char *err, size_t errlen)
{
    char buf[CONFIG_MAX_LINE];
    int lineno = 0, rc = 0;
    FILE *f;

    *out = (struct settings){0};
    f = fopen(path, "re");
    if (!f) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(-rc));
        return rc;
    }
    while (rc == 0 && fgets(buf, sizeof(buf), f)) {
        struct setting st = {0};
        size_t blen = strlen(buf);

        if (++lineno > CONFIG_MAX_LINES) {
            snprintf(err, errlen, "%s: more than %d lines", path, CONFIG_MAX_LINES);
            rc = -EFBIG;
        } else if (blen == sizeof(buf) - 1 && buf[blen - 1] != '\n') {
            snprintf(err, errlen, "%s:%d: line longer than %d bytes", path, lineno,
                     CONFIG_MAX_LINE - 2);
            rc = -EINVAL;
        } else if ((rc = setting_parse_line(buf, lineno, &st, path, err, errlen)) == 0 &&
                   (rc = settings_append(out, st)) < 0) {
            free(st.value);
            snprintf(err, errlen, "%s: out of memory", path);
        }
        if (rc > 0)
            rc = 0; /* a blank or comment line */
    }
    if (rc == 0 && ferror(f)) {
        rc = -EIO;
        snprintf(err, errlen, "%s: read error", path);
    }
    fclose(f);
    if (rc < 0)
        settings_free(out);
    return rc;
}

/* The --config argument in argv, or NULL. */
static const char *config_arg(int argc, char **argv, int *bad)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) {
                *bad = 1;
                return NULL;
            }
            path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            path = argv[i] + 9;
        }
    }
    return path;
}

int config_file_merge(int *argcp, char ***argvp, const struct option *longopts)
{
    flags = longopts;
    cmdline_argc = *argcp;
    cmdline_argv = *argvp;
    int bad = 0;
    const char *path = config_arg(*argcp, *argvp, &bad);
    if (bad) {
        fprintf(stderr, "blockd: --config needs a FILE\n");
        return -1;
    }
    if (!path) {
        if (access(CONFIG_FILE_DEFAULT, F_OK) != 0)
            return 0; /* no file: flags and built-in defaults only */
        path = CONFIG_FILE_DEFAULT;
    }
    char err[512];
    if (settings_read(path, &loaded, err, sizeof(err)) < 0) {
        fprintf(stderr, "blockd: %s\n", err);
        return -1;
    }
    if (!(file_path = strdup(path)))
        return -1;

    size_t words = 0;
    for (size_t i = 0; i < loaded.n; i++)
        words += !loaded.v[i].off;
    char **nv = calloc((size_t)*argcp + words + 1, sizeof(*nv));
    word_lines = calloc(words + 1, sizeof(*word_lines));
    if (!nv || !word_lines) {
        fprintf(stderr, "blockd: out of memory\n");
        return -1;
    }
    int k = 0;
    nv[k++] = (*argvp)[0];
    for (size_t i = 0; i < loaded.n; i++) {
        const struct setting *s = &loaded.v[i];
        if (s->off)
            continue;
        size_t len = strlen(s->opt->name) + (s->value ? strlen(s->value) : 0) + 4;
        char *w = malloc(len);
        if (!w) {
            fprintf(stderr, "blockd: out of memory\n");
            return -1;
        }
        if (s->value)
            snprintf(w, len, "--%s=%s", s->opt->name, s->value);
        else
            snprintf(w, len, "--%s", s->opt->name);
        word_lines[k - 1] = s->line;
        nv[k++] = w;
    }
    file_words_end = k;
    for (int i = 1; i < *argcp; i++)
        nv[k++] = (*argvp)[i];
    nv[k] = NULL;
    *argcp = k;
    *argvp = nv;
    return 0;
}

void config_file_explain(int index)
{
    if (file_path && index >= 1 && index < file_words_end)
        fprintf(stderr, "blockd: (set by %s line %d)\n", file_path, word_lines[index - 1]);
}

const char *config_file_path(void)
{
    return file_path;
}

/* Did the command line set this flag? Then the file does not. */
static bool on_cmdline(const char *name)
{
    size_t len = strlen(name);
    for (int i = 1; i < cmdline_argc; i++) {
        const char *a = cmdline_argv[i];
        if (strcmp(a, "--") == 0)
            break;
        if (strncmp(a, "--", 2) == 0 && strncmp(a + 2, name, len) == 0 &&
            (a[2 + len] == 0 || a[2 + len] == '='))
            return true;
    }
    return false;
}

/* The keys that can change without a restart. */
static int live_log_level(const char *v, bool check_only)
{
    enum log_level l;
    if (log_parse_level(v, &l) < 0)
        return -EINVAL;
    if (!check_only)
        log_set_level(l);
    return 0;
}

static int live_log_format(const char *v, bool check_only)
{
    enum log_format f;
    if (log_parse_format(v, &f) < 0)
        return -EINVAL;
    if (!check_only)
        log_set_format(f);
    return 0;
}

static const struct live_key {
    const char *name;
    const char *fallback; /* when the key leaves the file */
    /* -EINVAL for a bad value; with check_only, change nothing */
    int (*apply)(const char *value, bool check_only);
} live_keys[] = {
    {"log-level", "info", live_log_level},
    {"log-format", "auto", live_log_format},
};

static const struct live_key *live_find(const char *name)
{
    for (size_t i = 0; i < sizeof(live_keys) / sizeof(live_keys[0]); i++)
        if (strcmp(live_keys[i].name, name) == 0)
            return &live_keys[i];
    return NULL;
}

/* The last value of name in s ("yes"/"no" for flags without argument). */
static const char *last_value(const struct settings *s, const char *name)
{
    const char *v = NULL;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i].opt->name, name) == 0)
            v = s->v[i].value ? s->v[i].value : s->v[i].off ? "no" : "yes";
    return v;
}

int config_file_reload(void)
{
    if (!file_path) {
        log_info("reload: no configuration file (started without one)");
        return 0;
    }
    struct settings now;
    char err[512];
    if (settings_read(file_path, &now, err, sizeof(err)) < 0) {
        log_error("reload: %s; nothing changed", err);
        return -1;
    }
    /* Check every live value before applying any. */
    for (size_t i = 0; i < sizeof(live_keys) / sizeof(live_keys[0]); i++) {
        const char *v = last_value(&now, live_keys[i].name);
        if (v && !on_cmdline(live_keys[i].name) && live_keys[i].apply(v, true) < 0) {
            log_error("reload: %s: bad %s '%s'; nothing changed", file_path, live_keys[i].name, v);
            settings_free(&now);
            return -1;
        }
    }
    unsigned pending = 0;
    for (size_t i = 0; i < sizeof(live_keys) / sizeof(live_keys[0]); i++) {
        const struct live_key *k = &live_keys[i];
        if (on_cmdline(k->name))
            continue;
        const char *v = last_value(&now, k->name);
        (void)k->apply(v ? v : k->fallback, false);
    }
    /* Everything else is read once at start: say what waits for a restart. */
    for (const struct option *o = flags; o->name; o++) {
        if (key_reserved(o->name) || live_find(o->name))
            continue;
        const char *was = last_value(&loaded, o->name), *is = last_value(&now, o->name);
        if ((was || is) && (!was || !is || strcmp(was, is) != 0)) {
            log_warn("reload: %s changed in %s; it takes effect when blockd restarts", o->name,
                     file_path);
            pending++;
        }
    }
    log_info("reload: %s read; log_level and log_format applied%s", file_path,
             pending ? "; other changes wait for a restart" : "");
    settings_free(&now);
    return 0;
}
