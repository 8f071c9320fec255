/*
 * TrueNAS-style query filters and options over rows built as JSON.
 *
 * Semantics follow the middleware's filter_list (utils/filter_list.py and
 * filter_ops.py): a missing field never matches; nin/rin/rnin/^/$ on null
 * are false; "~" is re.match (anchored at the start only), here with POSIX
 * extended syntax; a "C" prefix makes an operator case-insensitive; a list
 * in a dotted path is indexed by number or fanned out with "*".
 * One deliberate difference: order_by keys sort like SQL ORDER BY (the
 * first key is the primary one, as TrueNAS' datastore-backed queries do),
 * and null/missing values sort as the smallest value instead of raising;
 * "nulls_first:"/"nulls_last:" place them explicitly.
 *
 * Filters are compiled once per call (regexes included), then evaluated
 * per row; nothing is cached between calls, so this is thread-safe.
 */
#include <errno.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/query_regex.h"
#include "core/log.h"

#define QUERY_MAX_DEPTH 3       /* OR nesting, as TrueNAS MAX_FILTERS_DEPTH */
#define QUERY_MAX_COMPONENT 255 /* bytes of one dotted path component */
#define QUERY_MAX_REGEX 4096

enum qop {
    OP_EQ,
    OP_NE,
    OP_GT,
    OP_GE,
    OP_LT,
    OP_LE,
    OP_RE,
    OP_IN,
    OP_NIN,
    OP_RIN,
    OP_RNIN,
    OP_SW,
    OP_NSW,
    OP_EW,
    OP_NEW,
};

static const struct {
    const char *name;
    enum qop op;
} op_names[] = {
    {"=", OP_EQ},      {"!=", OP_NE}, {">", OP_GT},   {">=", OP_GE},   {"<", OP_LT},
    {"<=", OP_LE},     {"~", OP_RE},  {"in", OP_IN},  {"nin", OP_NIN}, {"rin", OP_RIN},
    {"rnin", OP_RNIN}, {"^", OP_SW},  {"!^", OP_NSW}, {"$", OP_EW},    {"!$", OP_NEW},
};

struct qlist;

struct qnode {
    bool is_or;
    /* condition */
    const char *path; /* borrowed from the params JSON */
    enum qop op;
    bool fold;
    json_t *value; /* own reference */
    bool has_re;
    regex_t re;
    uint64_t re_cost; /* query_regex_cost of the pattern */
    /* OR: each branch is a conjunction */
    struct qlist *branches;
    size_t nbranches;
};

struct qlist {
    struct qnode *nodes;
    size_t n;
};

static void qlist_free(struct qlist *l);

static void qnode_free(struct qnode *n)
{
    json_decref(n->value);
    if (n->has_re)
        regfree(&n->re);
    for (size_t i = 0; i < n->nbranches; i++)
        qlist_free(&n->branches[i]);
    free(n->branches);
}

static void qlist_free(struct qlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        qnode_free(&l->nodes[i]);
    free(l->nodes);
    l->nodes = NULL;
    l->n = 0;
}

/* ---- helpers on JSON values ---- */

/* ASCII case folding: enough for dataset, target and IQN names. */
static json_t *casefold(json_t *v)
{
    if (json_is_string(v)) {
        size_t len = json_string_length(v);
        char *s = malloc(len + 1);
        if (!s)
            return json_incref(v);
        const char *src = json_string_value(v);
        for (size_t i = 0; i < len; i++)
            s[i] = (src[i] >= 'A' && src[i] <= 'Z') ? (char)(src[i] + 32) : src[i];
        s[len] = 0;
        json_t *r = json_stringn_nocheck(s, len);
        free(s);
        return r;
    }
    if (json_is_array(v)) {
        json_t *r = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) json_array_append_new(r, casefold(e));
        return r;
    }
    return json_incref(v);
}

static bool num_equal(json_t *a, json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b))
        return json_integer_value(a) == json_integer_value(b);
    return json_number_value(a) == json_number_value(b);
}

static bool value_equal(json_t *a, json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return num_equal(a, b);
    return json_equal(a, b);
}

static int strn_cmp(json_t *a, json_t *b)
{
    size_t la = json_string_length(a), lb = json_string_length(b);
    int c = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
    if (c)
        return c;
    return la < lb ? -1 : la > lb ? 1 : 0;
}

/* Ordering of two values of comparable types; *ok false when the types
 * cannot be ordered against each other (Python would raise). */
static int value_order(json_t *a, json_t *b, bool *ok)
{
    *ok = true;
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b)) {
            json_int_t x = json_integer_value(a), y = json_integer_value(b);
            return x < y ? -1 : x > y;
        }
        double x = json_number_value(a), y = json_number_value(b);
        return x < y ? -1 : x > y;
    }
    if (json_is_string(a) && json_is_string(b))
        return strn_cmp(a, b);
    if (json_is_boolean(a) && json_is_boolean(b))
        return (int)json_is_true(a) - (int)json_is_true(b);
    *ok = false;
    return 0;
}

static int type_rank(json_t *v)
{
    if (!v || json_is_null(v))
        return 0;
    if (json_is_boolean(v))
        return 1;
    if (json_is_number(v))
        return 2;
    if (json_is_string(v))
        return 3;
    if (json_is_array(v))
        return 4;
    return 5;
}

/* Total order for sorting: by type, then by value. */
static int sort_order(json_t *a, json_t *b)
{
    int ra = type_rank(a), rb = type_rank(b);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    bool ok;
    int c = value_order(a, b, &ok);
    if (ok)
        return c;
    if (json_is_array(a)) {
        size_t na = json_array_size(a), nb = json_array_size(b);
        for (size_t i = 0; i < na && i < nb; i++) {
            c = sort_order(json_array_get(a, i), json_array_get(b, i));
            if (c)
                return c;
        }
        return na < nb ? -1 : na > nb;
    }
    return 0;
}

static bool str_contains(json_t *hay, json_t *needle)
{
    return memmem(json_string_value(hay), json_string_length(hay), json_string_value(needle),
                  json_string_length(needle)) != NULL;
}

/* Python's `item in container` for the JSON types a filter can hold. */
static bool contains(json_t *container, json_t *item, bool *ok)
{
    *ok = true;
    if (json_is_array(container)) {
        size_t i;
        json_t *e;
        json_array_foreach(container, i, e) if (value_equal(e, item)) return true;
        return false;
    }
    if (json_is_string(container) && json_is_string(item))
        return str_contains(container, item);
    if (json_is_object(container) && json_is_string(item))
        return json_object_get(container, json_string_value(item)) != NULL;
    *ok = false;
    return false;
}

static bool has_prefix(json_t *s, json_t *p)
{
    size_t ls = json_string_length(s), lp = json_string_length(p);
    return lp <= ls && memcmp(json_string_value(s), json_string_value(p), lp) == 0;
}

static bool has_suffix(json_t *s, json_t *p)
{
    size_t ls = json_string_length(s), lp = json_string_length(p);
    return lp <= ls && memcmp(json_string_value(s) + ls - lp, json_string_value(p), lp) == 0;
}

/* ---- dotted paths ---- */

/* Copy the next component of a dotted path ("\." is a literal dot) into
 * comp; returns the rest of the path (after the dot) or NULL at the end. */
static const char *path_next(const char *path, char *comp, size_t len, bool *too_long)
{
    size_t o = 0;
    *too_long = false;
    const char *p = path;
    for (; *p; p++) {
        if (*p == '\\' && p[1] == '.') {
            p++;
        } else if (*p == '.') {
            comp[o < len ? o : len - 1] = 0;
            return p + 1;
        }
        if (o + 1 < len)
            comp[o++] = *p;
        else
            *too_long = true;
    }
    comp[o] = 0;
    return NULL;
}

static bool is_index(const char *s, size_t *out)
{
    if (!*s)
        return false;
    size_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        if (v > (SIZE_MAX - 9) / 10)
            return false;
        v = v * 10 + (size_t)(*p - '0');
    }
    *out = v;
    return true;
}

enum path_step { STEP_ON, STEP_MISSING_KEY, STEP_NOT_INDEX };

/* One component of a path from *cur: STEP_ON with *cur the value there
 * (json null for an index past a list's end; a scalar stays itself, as
 * the middleware's get() does), STEP_MISSING_KEY (an object without it),
 * or STEP_NOT_INDEX (a list, and comp is not an index). */
static enum path_step path_step(json_t **cur, const char *comp)
{
    size_t idx;
    if (json_is_object(*cur)) {
        *cur = json_object_get(*cur, comp);
        return *cur ? STEP_ON : STEP_MISSING_KEY;
    }
    if (json_is_array(*cur)) {
        if (!is_index(comp, &idx))
            return STEP_NOT_INDEX;
        *cur = idx < json_array_size(*cur) ? json_array_get(*cur, idx) : json_null();
    }
    return STEP_ON;
}

/* Walk a dotted path without fan-out. Returns the value, json null for an
 * index past a list's end or a name on a list, or NULL when a key is
 * missing (undefined). */
static json_t *path_get(json_t *cur, const char *path)
{
    char comp[QUERY_MAX_COMPONENT + 1];
    const char *rest = path;
    while (rest && *rest) {
        bool too_long;
        rest = path_next(rest, comp, sizeof(comp), &too_long);
        enum path_step st = path_step(&cur, comp);
        if (st == STEP_MISSING_KEY)
            return NULL;
        if (st == STEP_NOT_INDEX)
            return json_null();
    }
    return cur;
}

/* ---- compiling filters ---- */

struct qctx {
    struct api_call *call;
    char field[64];        /* "<method>.query-filters" */
    uint64_t re_cost_used; /* summed over the call's patterns */
};

/* Matching work left for the query running on this thread, and whether it
 * ran out (query_regex.h). Thread-local: eval_* take no context, and one
 * thread runs one query at a time. */
static _Thread_local uint64_t re_work_left = QUERY_REGEX_WORK_MAX;
static _Thread_local bool re_work_over;

static int compile_list(struct qctx *q, json_t *arr, int depth, const char *where,
                        struct qlist *out);

static int bad_filter(struct qctx *q, const char *where, const char *fmt, const char *arg)
{
    api_verr(q->call, where, EINVAL, fmt, arg);
    return -1;
}

static int op_lookup(const char *s, enum qop *op)
{
    for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++) {
        if (strcmp(op_names[i].name, s) == 0) {
            *op = op_names[i].op;
            return 0;
        }
    }
    return -1;
}

/* Every component of a dotted field name fits QUERY_MAX_COMPONENT. */
static int check_path(struct qctx *q, const char *where, const char *path)
{
    for (const char *rest = path; rest && *rest;) {
        char comp[QUERY_MAX_COMPONENT + 1];
        bool too_long;
        rest = path_next(rest, comp, sizeof(comp), &too_long);
        if (too_long)
            return bad_filter(q, where, "Invalid filter: field name component too long%s", "");
    }
    return 0;
}

/* The operations that need a particular type of value get it. */
static int check_value(struct qctx *q, const char *where, enum qop op, const char *ops, json_t *val)
{
    switch (op) {
    case OP_IN:
    case OP_NIN:
        if (!json_is_array(val) && !json_is_string(val))
            return bad_filter(q, where, "Invalid filter: %s needs a list (or string) value", ops);
        break;
    case OP_SW:
    case OP_NSW:
    case OP_EW:
    case OP_NEW:
    case OP_RE:
        if (!json_is_string(val))
            return bad_filter(q, where, "Invalid filter: %s needs a string value", ops);
        break;
    default:
        break;
    }
    return 0;
}

/* A "~" filter: its cost within the call's budget, then compiled anchored
 * at the start as Python's re.match is. */
static int compile_regex(struct qctx *q, const char *where, json_t *val, struct qnode *n)
{
    if (json_string_length(val) > QUERY_MAX_REGEX)
        return bad_filter(q, where, "Invalid filter: regular expression too long%s", "");
    const char *pat = json_string_value(val);
    size_t plen = json_string_length(val);
    char why[160];
    if (strlen(pat) != plen)
        return bad_filter(q, where, "Invalid regular expression: %s", "contains a NUL byte");
    if (query_regex_cost(pat, plen, &n->re_cost, why, sizeof(why)) < 0) {
        log_warn("api: %s: %s refused a regular expression filter: %s", api_call_peer(q->call),
                 api_call_method(q->call), why);
        return bad_filter(q, where, "Invalid regular expression: %s", why);
    }
    q->re_cost_used += n->re_cost;
    if (q->re_cost_used > QUERY_REGEX_CALL_COST_MAX) {
        snprintf(why, sizeof(why),
                 "the regular expressions of one query expand to more than %u nodes in all",
                 QUERY_REGEX_CALL_COST_MAX);
        log_warn("api: %s: %s: %s", api_call_peer(q->call), api_call_method(q->call), why);
        return bad_filter(q, where, "Invalid regular expression: %s", why);
    }
    /* re.match: anchored at the start. "^(P)" is P anchored (P has
     * balanced parentheses, checked above); REG_NOSUB lets glibc match
     * without submatch registers, in time linear in the subject. */
    char *anchored = malloc(plen + 4);
    if (!anchored)
        return bad_filter(q, where, "Invalid regular expression: %s", "out of memory");
    anchored[0] = '^';
    anchored[1] = '(';
    memcpy(anchored + 2, pat, plen);
    anchored[plen + 2] = ')';
    anchored[plen + 3] = '\0';
    int rc = regcomp(&n->re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    if (rc != 0) {
        char msg[128];
        regerror(rc, &n->re, msg, sizeof(msg));
        return bad_filter(q, where, "Invalid regular expression: %s", msg);
    }
    n->has_re = true;
    return 0;
}

static int compile_condition(struct qctx *q, json_t *f, const char *where, struct qnode *n)
{
    json_t *name = json_array_get(f, 0), *jop = json_array_get(f, 1), *val = json_array_get(f, 2);
    if (!json_is_string(name))
        return bad_filter(q, where, "Invalid filter: field name must be a string%s", "");
    if (!json_is_string(jop))
        return bad_filter(q, where, "Invalid filter: operation must be a string%s", "");
    const char *ops = json_string_value(jop);
    bool fold = false;
    if (ops[0] == 'C' && ops[1]) {
        fold = true;
        if (strcmp(ops + 1, "~") == 0)
            return bad_filter(q, where, "Invalid case-insensitive operation: %s", ops);
        ops++;
    }
    enum qop op;
    if (op_lookup(ops, &op) < 0)
        return bad_filter(q, where, "Invalid operation: %s", json_string_value(jop));
    const char *path = json_string_value(name);
    if (check_path(q, where, path) < 0 || check_value(q, where, op, ops, val) < 0)
        return -1;

    n->is_or = false;
    n->path = path;
    n->op = op;
    n->fold = fold;
    n->value = fold ? casefold(val) : json_incref(val);
    return op == OP_RE ? compile_regex(q, where, val, n) : 0;
}

static int compile_node(struct qctx *q, json_t *f, int depth, const char *where, struct qnode *n)
{
    memset(n, 0, sizeof(*n));
    if (!json_is_array(f))
        return bad_filter(q, where, "Invalid filter: must be a list [field, operation, value]%s",
                          "");
    size_t len = json_array_size(f);
    if (len == 3)
        return compile_condition(q, f, where, n);
    if (len != 2)
        return bad_filter(q, where,
                          "Invalid filter: must be [field, operation, value] or "
                          "[\"OR\", [filters]]%s",
                          "");
    json_t *op = json_array_get(f, 0), *branches = json_array_get(f, 1);
    if (!json_is_string(op) || strcmp(json_string_value(op), "OR") != 0)
        return bad_filter(q, where, "Invalid operation: %s",
                          json_is_string(op) ? json_string_value(op) : "(not a string)");
    if (!json_is_array(branches) || json_array_size(branches) == 0)
        return bad_filter(q, where, "OR filter requires at least one branch.%s", "");
    if (depth + 1 > QUERY_MAX_DEPTH)
        return bad_filter(q, where, "query-filters max recursion depth exceeded%s", "");

    n->is_or = true;
    size_t nb = json_array_size(branches);
    n->branches = calloc(nb, sizeof(*n->branches));
    if (!n->branches)
        return bad_filter(q, where, "out of memory%s", "");
    for (size_t i = 0; i < nb; i++) {
        json_t *b = json_array_get(branches, i);
        char sub[256];
        /* The path only names the branch in error messages; the depth limit
         * keeps it short, but a cut-off name would point at the wrong one. */
        if (snprintf(sub, sizeof(sub), "%s.1.%zu", where, i) >= (int)sizeof(sub))
            return bad_filter(q, where, "query-filters max recursion depth exceeded%s", "");
        n->nbranches = i + 1;
        if (json_is_array(b) && json_array_size(b) > 0 && json_is_array(json_array_get(b, 0))) {
            /* a list of filters: all must hold for the branch */
            if (compile_list(q, b, depth + 1, sub, &n->branches[i]) < 0)
                return -1;
        } else {
            if (json_is_array(b) && json_array_size(b) == 0)
                return bad_filter(q, sub, "Invalid filter: empty OR branch%s", "");
            struct qlist *l = &n->branches[i];
            l->nodes = calloc(1, sizeof(*l->nodes));
            if (!l->nodes)
                return bad_filter(q, sub, "out of memory%s", "");
            l->n = 1;
            if (compile_node(q, b, depth + 1, sub, &l->nodes[0]) < 0)
                return -1;
        }
    }
    return 0;
}

static int compile_list(struct qctx *q, json_t *arr, int depth, const char *where,
                        struct qlist *out)
{
    out->n = 0;
    out->nodes = NULL;
    size_t n = json_array_size(arr);
    if (n == 0)
        return 0;
    out->nodes = calloc(n, sizeof(*out->nodes));
    if (!out->nodes)
        return bad_filter(q, where, "out of memory%s", "");
    for (size_t i = 0; i < n; i++) {
        char sub[256];
        snprintf(sub, sizeof(sub), "%s.%zu", where, i);
        out->n = i + 1;
        if (compile_node(q, json_array_get(arr, i), depth, sub, &out->nodes[i]) < 0)
            return -1;
    }
    return 0;
}

/* ---- evaluating filters ---- */

static bool apply_op(const struct qnode *n, json_t *x)
{
    json_t *folded = NULL;
    if (n->fold)
        x = folded = casefold(x);
    json_t *y = n->value;
    bool r = false, ok;
    int c;
    switch (n->op) {
    case OP_EQ:
        r = value_equal(x, y);
        break;
    case OP_NE:
        r = !value_equal(x, y);
        break;
    case OP_GT:
        c = value_order(x, y, &ok);
        r = ok && c > 0;
        break;
    case OP_GE:
        c = value_order(x, y, &ok);
        r = ok && c >= 0;
        break;
    case OP_LT:
        c = value_order(x, y, &ok);
        r = ok && c < 0;
        break;
    case OP_LE:
        c = value_order(x, y, &ok);
        r = ok && c <= 0;
        break;
    case OP_RE: {
        /* re.match: null is treated as "" and the match must start at 0 */
        const char *s = json_is_null(x) ? "" : json_string_value(x);
        if (!s) {
            r = false;
            break;
        }
        uint64_t work = ((uint64_t)json_string_length(x) + 1) * n->re_cost;
        if (work > re_work_left) {
            re_work_over = true;
            re_work_left = 0;
            r = false;
            break;
        }
        re_work_left -= work;
        r = regexec(&n->re, s, 0, NULL, 0) == 0;
        break;
    }
    case OP_IN:
        r = contains(y, x, &ok);
        break;
    case OP_NIN:
        r = !json_is_null(x) && !contains(y, x, &ok) && ok;
        break;
    case OP_RIN:
        r = !json_is_null(x) && contains(x, y, &ok);
        break;
    case OP_RNIN:
        r = !json_is_null(x) && !contains(x, y, &ok) && ok;
        break;
    case OP_SW:
        r = json_is_string(x) && has_prefix(x, y);
        break;
    case OP_NSW:
        r = json_is_string(x) && !has_prefix(x, y);
        break;
    case OP_EW:
        r = json_is_string(x) && has_suffix(x, y);
        break;
    case OP_NEW:
        r = json_is_string(x) && !has_suffix(x, y);
        break;
    }
    json_decref(folded);
    return r;
}

/* The condition on cur at path; "*" on a list matches if any element does. */
static bool eval_path(json_t *cur, const char *path, const struct qnode *n)
{
    char comp[QUERY_MAX_COMPONENT + 1];
    const char *rest = path;
    while (rest && *rest) {
        bool too_long;
        rest = path_next(rest, comp, sizeof(comp), &too_long);
        enum path_step st = path_step(&cur, comp);
        if (st == STEP_NOT_INDEX && strcmp(comp, "*") == 0) {
            size_t i;
            json_t *e;
            json_array_foreach(cur, i, e) if (eval_path(e, rest ? rest : "", n)) return true;
            return false;
        }
        if (st != STEP_ON)
            return false; /* a missing key, or a name on a list: never matches */
    }
    return apply_op(n, cur);
}

static bool eval_list(const struct qlist *l, json_t *row);

static bool eval_node(const struct qnode *n, json_t *row)
{
    if (!n->is_or)
        return eval_path(row, n->path, n);
    for (size_t i = 0; i < n->nbranches; i++)
        if (eval_list(&n->branches[i], row))
            return true;
    return false;
}

static bool eval_list(const struct qlist *l, json_t *row)
{
    for (size_t i = 0; i < l->n; i++)
        if (!eval_node(&l->nodes[i], row))
            return false;
    return true;
}

/* ---- options ---- */

enum nulls_place { NULLS_DEFAULT, NULLS_FIRST, NULLS_LAST };

struct qorder {
    const char *path;
    bool desc;
    enum nulls_place nulls;
};

struct qopts {
    bool get, count;
    json_int_t limit, offset;
    json_t *select; /* borrowed array or NULL */
    struct qorder *order;
    size_t norder;
};

static const char *const known_options[] = {
    "extra",         "order_by", "select",         "count",
    "get",           "offset",   "limit",          "force_sql_filters",
    "relationships", "extend",   "extend_context", "prefix",
};

static void opt_err(struct api_call *call, const char *opt, const char *fmt, const char *arg)
{
    char field[160];
    snprintf(field, sizeof(field), "%s.query-options%s%s", api_call_method(call), opt ? "." : "",
             opt ? opt : "");
    api_verr(call, field, EINVAL, fmt, arg);
}

/* Known option names and the JSON types of the scalar ones; sets a field
 * error for each problem and returns -1 if there was one. */
static int check_option_types(struct api_call *call, json_t *o)
{
    int rc = 0;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof(known_options) / sizeof(known_options[0]); i++)
            known |= strcmp(key, known_options[i]) == 0;
        if (!known) {
            opt_err(call, key, "Extra inputs are not permitted%s", "");
            rc = -1;
        }
    }
    static const char *const bools[] = {"get", "count", "force_sql_filters", "relationships"};
    for (size_t i = 0; i < 4; i++) {
        v = json_object_get(o, bools[i]);
        if (v && !json_is_boolean(v)) {
            opt_err(call, bools[i], "Input should be a valid boolean%s", "");
            rc = -1;
        }
    }
    static const char *const ints[] = {"limit", "offset"};
    for (size_t i = 0; i < 2; i++) {
        v = json_object_get(o, ints[i]);
        if (v && (!json_is_integer(v) || json_integer_value(v) < 0)) {
            opt_err(call, ints[i], "Input should be a non-negative integer%s", "");
            rc = -1;
        }
    }
    static const char *const strs[] = {"extend", "extend_context", "prefix"};
    for (size_t i = 0; i < 3; i++) {
        v = json_object_get(o, strs[i]);
        if (v && !json_is_string(v) && !json_is_null(v)) {
            opt_err(call, strs[i], "Input should be a valid string%s", "");
            rc = -1;
        }
    }
    v = json_object_get(o, "extra");
    if (v && !json_is_object(v)) {
        opt_err(call, "extra", "Input should be a valid dictionary%s", "");
        rc = -1;
    }
    return rc;
}

/* "select": a list of field names or [field name, alias] pairs. */
static int parse_select(struct api_call *call, json_t *v, struct qopts *out)
{
    if (!json_is_array(v)) {
        opt_err(call, "select", "Input should be a valid list%s", "");
        return -1;
    }
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s)
    {
        bool ok = json_is_string(s) ||
                  (json_is_array(s) && json_array_size(s) == 2 &&
                   json_is_string(json_array_get(s, 0)) && json_is_string(json_array_get(s, 1)));
        if (!ok) {
            opt_err(call, "select", "selectors must be a field name or [field name, as name]%s",
                    "");
            return -1;
        }
    }
    out->select = json_array_size(v) ? v : NULL;
    return 0;
}

/* "order_by": ["[nulls_first:|nulls_last:][-]field", ...] into out->order. */
static int parse_order_by(struct api_call *call, json_t *v, struct qopts *out)
{
    if (!json_is_array(v)) {
        opt_err(call, "order_by", "Input should be a valid list%s", "");
        return -1;
    }
    size_t n = json_array_size(v);
    out->order = n ? calloc(n, sizeof(*out->order)) : NULL;
    if (n && !out->order) {
        opt_err(call, "order_by", "out of memory%s", "");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) {
            opt_err(call, "order_by", "every entry must be a string%s", "");
            return -1;
        }
        const char *p = json_string_value(s);
        struct qorder *ord = &out->order[out->norder++];
        if (strncmp(p, "nulls_first:", 12) == 0) {
            ord->nulls = NULLS_FIRST;
            p += 12;
        } else if (strncmp(p, "nulls_last:", 11) == 0) {
            ord->nulls = NULLS_LAST;
            p += 11;
        }
        if (*p == '-') {
            ord->desc = true;
            p++;
        }
        if (!*p) {
            opt_err(call, "order_by", "empty field name in %s", json_string_value(s));
            return -1;
        }
        ord->path = p;
    }
    return 0;
}

static int parse_options(struct api_call *call, json_t *o, struct qopts *out)
{
    memset(out, 0, sizeof(*out));
    if (!o)
        return 0;
    if (!json_is_object(o)) {
        opt_err(call, NULL, "Input should be a valid dictionary%s", "");
        return -1;
    }
    int rc = check_option_types(call, o);
    out->get = json_is_true(json_object_get(o, "get"));
    out->count = json_is_true(json_object_get(o, "count"));
    out->limit = json_integer_value(json_object_get(o, "limit"));
    out->offset = json_integer_value(json_object_get(o, "offset"));
    if (out->get && (out->limit > 1 || out->offset > 0)) {
        opt_err(call, "get", "Invalid options combination. `get` implies a single result.%s", "");
        rc = -1;
    }
    json_t *v = json_object_get(o, "select");
    if (v && parse_select(call, v, out) < 0)
        rc = -1;
    /* A bad order_by ends the checks at once (as before): its entries are
     * parsed into memory the caller frees. */
    v = json_object_get(o, "order_by");
    if (v && parse_order_by(call, v, out) < 0)
        return -1;
    return rc;
}

/* ---- select ---- */

/* The row reduced to the selected fields; dotted names keep their nesting
 * ("a.b" → {"a": {"b": …}}), [name, alias] puts the value at alias. */
static json_t *select_row(struct api_call *call, json_t *row, json_t *select, int *err)
{
    json_t *out = json_object();
    size_t i;
    json_t *s;
    json_array_foreach(select, i, s)
    {
        const char *path, *alias = NULL;
        if (json_is_string(s)) {
            path = json_string_value(s);
        } else {
            path = json_string_value(json_array_get(s, 0));
            alias = json_string_value(json_array_get(s, 1));
        }
        /* walk objects, remembering the keys for the nested result */
        char comps[16][QUERY_MAX_COMPONENT + 1];
        size_t nc = 0;
        json_t *cur = row;
        bool missing = false;
        for (const char *rest = path; rest && *rest;) {
            if (nc == 16) {
                opt_err(call, "select", "field path too deep: %s", path);
                *err = -1;
                json_decref(out);
                return NULL;
            }
            bool too_long;
            rest = path_next(rest, comps[nc], sizeof(comps[nc]), &too_long);
            if (json_is_array(cur)) {
                opt_err(call, "select", "Selecting by list index is not supported: %s", path);
                *err = -1;
                json_decref(out);
                return NULL;
            }
            if (!json_is_object(cur)) {
                missing = true;
                break;
            }
            cur = json_object_get(cur, comps[nc]);
            nc++;
            if (!cur) {
                missing = true;
                break;
            }
        }
        if (missing || nc == 0)
            continue;
        if (alias) {
            json_object_set(out, alias, cur);
            continue;
        }
        json_t *obj = out;
        for (size_t k = 0; k + 1 < nc; k++) {
            json_t *next = json_object_get(obj, comps[k]);
            if (!json_is_object(next)) {
                next = json_object();
                json_object_set_new(obj, comps[k], next);
            }
            obj = next;
        }
        json_object_set(obj, comps[nc - 1], cur);
    }
    return out;
}

/* ---- ordering ---- */

struct sort_item {
    json_t *row;
    json_t **keys; /* the order_by values of this row, looked up once */
    size_t idx;
};

static int sort_cmp(const void *pa, const void *pb, void *arg)
{
    const struct sort_item *a = pa, *b = pb;
    const struct qopts *o = arg;
    for (size_t i = 0; i < o->norder; i++) {
        const struct qorder *k = &o->order[i];
        json_t *va = a->keys[i], *vb = b->keys[i];
        bool na = !va || json_is_null(va), nb = !vb || json_is_null(vb);
        int c;
        if (na || nb) {
            if (na && nb)
                continue;
            /* null is the smallest value unless placed explicitly */
            if (k->nulls == NULLS_FIRST)
                return na ? -1 : 1;
            if (k->nulls == NULLS_LAST)
                return na ? 1 : -1;
            c = na ? -1 : 1;
        } else {
            c = sort_order(va, vb);
        }
        if (k->desc)
            c = -c;
        if (c)
            return c;
    }
    return a->idx < b->idx ? -1 : a->idx > b->idx; /* stable */
}

static int sort_rows(json_t *rows, const struct qopts *o)
{
    size_t n = json_array_size(rows);
    if (n < 2 || o->norder == 0)
        return 0;
    struct sort_item *items = calloc(n, sizeof(*items));
    json_t **keys = calloc(n * o->norder, sizeof(*keys));
    if (!items || !keys) {
        free(items);
        free(keys);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        items[i].row = json_incref(json_array_get(rows, i));
        items[i].keys = keys + i * o->norder;
        items[i].idx = i;
        for (size_t k = 0; k < o->norder; k++)
            items[i].keys[k] = path_get(items[i].row, o->order[k].path);
    }
    qsort_r(items, n, sizeof(*items), sort_cmp, (void *)o);
    for (size_t i = 0; i < n; i++)
        json_array_set_new(rows, i, items[i].row);
    free(keys);
    free(items);
    return 0;
}

/* ---- entry points ---- */

static int compile_filters(struct api_call *call, json_t *params, struct qlist *filters)
{
    memset(filters, 0, sizeof(*filters));
    struct qctx q = {.call = call};
    snprintf(q.field, sizeof(q.field), "%s.query-filters", api_call_method(call));
    if (json_array_size(params) > 2) {
        api_verr(call, api_call_method(call), EINVAL, "Too many arguments (expected 2, found %zu)",
                 json_array_size(params));
        return -1;
    }
    json_t *f = api_param(params, 0);
    if (!f)
        return 0;
    if (!json_is_array(f)) {
        api_verr(call, q.field, EINVAL, "Input should be a valid list");
        return -1;
    }
    if (compile_list(&q, f, 0, q.field, filters) < 0) {
        qlist_free(filters);
        return -1;
    }
    return 0;
}

static void not_found(struct api_call *call)
{
    api_error(call, ENOENT, "Object does not exist");
}

/* The rows that pass the filters (selected fields only, if asked) into rv;
 * -1 with a field error set when selecting failed or the regular
 * expressions ran out of their work budget. */
static int filter_rows(struct api_call *call, json_t *rows, const struct qlist *filters,
                       const struct qopts *opts, json_t *rv)
{
    bool shortcircuit = opts->get && opts->norder == 0;
    size_t i;
    json_t *row;
    re_work_left = QUERY_REGEX_WORK_MAX;
    re_work_over = false;
    json_array_foreach(rows, i, row)
    {
        if (re_work_over)
            break;
        if (!eval_list(filters, row))
            continue;
        if (opts->select) {
            int err = 0;
            json_t *sel = select_row(call, row, opts->select, &err);
            if (!sel)
                return -1;
            json_array_append_new(rv, sel);
        } else {
            json_array_append(rv, row);
        }
        if (shortcircuit)
            break;
    }
    if (re_work_over) {
        char field[96];
        snprintf(field, sizeof(field), "%s.query-filters", api_call_method(call));
        log_warn("api: %s: %s: regular expression matching over %zu rows ran out of its budget",
                 api_call_peer(call), api_call_method(call), json_array_size(rows));
        api_verr(call, field, EINVAL,
                 "regular expression filters would take too long over these rows (more than "
                 "%llu units of matching work): narrow the query with other filters first",
                 (unsigned long long)QUERY_REGEX_WORK_MAX);
        return -1;
    }
    return 0;
}

/* The matching rows rv shaped as the options ask: a count, one object
 * (get), or a sorted page of the list. */
static int shape_result(struct api_call *call, json_t *rv, const struct qopts *opts,
                        json_t **result)
{
    if (opts->count && !opts->get) {
        *result = json_integer((json_int_t)json_array_size(rv));
        return 0;
    }
    if (sort_rows(rv, opts) < 0)
        return api_error(call, ENOMEM, "out of memory sorting %zu rows", json_array_size(rv));
    if (opts->get) {
        if (json_array_size(rv) == 0) {
            not_found(call);
            return -1;
        }
        *result = json_incref(json_array_get(rv, 0));
        return 0;
    }
    size_t n = json_array_size(rv);
    size_t off = (size_t)opts->offset < n ? (size_t)opts->offset : n;
    size_t lim = opts->limit > 0 && (size_t)opts->limit < n - off ? (size_t)opts->limit : n - off;
    if (off == 0 && lim == n) {
        *result = json_incref(rv);
    } else {
        json_t *page = json_array();
        for (size_t k = off; k < off + lim; k++)
            json_array_append(page, json_array_get(rv, k));
        *result = page;
    }
    return 0;
}

int api_query(struct api_call *call, json_t *rows, json_t *params, json_t **result)
{
    *result = NULL;
    if (!json_is_array(rows))
        return api_error(call, EFAULT, "query over a non-list");
    struct qlist filters;
    struct qopts opts;
    if (compile_filters(call, params, &filters) < 0)
        return api_invalid(call);
    if (parse_options(call, api_param(params, 1), &opts) < 0) {
        qlist_free(&filters);
        free(opts.order);
        return api_invalid(call);
    }
    json_t *rv = json_array();
    int rc = filter_rows(call, rows, &filters, &opts, rv);
    qlist_free(&filters);
    if (rc < 0)
        rc = api_invalid(call);
    else
        rc = shape_result(call, rv, &opts, result);
    json_decref(rv);
    free(opts.order);
    return rc;
}

int api_query_validate(struct api_call *call, json_t *params)
{
    struct qlist filters;
    struct qopts opts;
    if (compile_filters(call, params, &filters) < 0)
        return api_invalid(call);
    qlist_free(&filters);
    int rc = parse_options(call, api_param(params, 1), &opts);
    free(opts.order);
    return rc < 0 ? api_invalid(call) : 0;
}

json_t *api_query_extra(json_t *params)
{
    json_t *o = api_param(params, 1);
    json_t *e = json_is_object(o) ? json_object_get(o, "extra") : NULL;
    return json_is_object(e) ? e : NULL;
}

json_t *api_query_hint(json_t *params, const char *field, const char **op)
{
    json_t *filters = api_param(params, 0);
    size_t i;
    json_t *f;
    json_array_foreach(filters, i, f)
    {
        if (!json_is_array(f) || json_array_size(f) != 3)
            continue; /* OR branches cannot narrow the rows */
        const char *name = json_string_value(json_array_get(f, 0));
        const char *o = json_string_value(json_array_get(f, 1));
        json_t *v = json_array_get(f, 2);
        if (!name || !o || strcmp(name, field) != 0)
            continue;
        if (strcmp(o, "=") == 0) {
            *op = "=";
            return v;
        }
        if (strcmp(o, "in") == 0 && json_is_array(v)) {
            *op = "in";
            return v;
        }
    }
    return NULL;
}
