/* Strict, pydantic-like parameter validation (see validate.h). */
#include "api/validate.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* Field paths are bounded; deeper nesting is truncated, which only shortens
 * an error message. */
#define PATH_MAX_LEN 256

static void join_path(char *buf, size_t len, const char *prefix, const char *name)
{
    if (prefix && *prefix && name && *name)
        snprintf(buf, len, "%s.%s", prefix, name);
    else
        snprintf(buf, len, "%s", prefix && *prefix ? prefix : name ? name : "");
}

static const char *type_message(enum api_type t)
{
    switch (t) {
    case API_T_STRING:
    case API_T_ENUM:
        return "Input should be a valid string";
    case API_T_INT:
        return "Input should be a valid integer";
    case API_T_NUMBER:
        return "Input should be a valid number";
    case API_T_BOOL:
        return "Input should be a valid boolean";
    case API_T_OBJECT:
        return "Input should be a valid dictionary";
    case API_T_ARRAY:
        return "Input should be a valid list";
    case API_T_ANY:
        break;
    }
    return "Input should not be null";
}

/* "Input should be 'A', 'B' or 'C'" as pydantic words it. */
static void enum_message(struct api_call *call, const char *path, const char *const *choices)
{
    char buf[512];
    size_t off = 0;
    size_t n = 0;
    while (choices[n])
        n++;
    off += (size_t)snprintf(buf, sizeof(buf), "Input should be ");
    for (size_t i = 0; i < n && off < sizeof(buf); i++) {
        const char *sep = i == 0 ? "" : (i + 1 == n ? " or " : ", ");
        off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s'%s'", sep, choices[i]);
    }
    api_verr(call, path, EINVAL, "%s", buf);
}

static int check_int(struct api_call *call, const char *path, json_t *v, const struct api_field *f)
{
    json_int_t x = json_integer_value(v);
    if (f->int_choices && f->n_int_choices) {
        bool ok = false;
        for (size_t i = 0; i < f->n_int_choices; i++)
            ok |= (f->int_choices[i] == x);
        if (!ok) {
            char buf[512];
            size_t off = (size_t)snprintf(buf, sizeof(buf), "Input should be ");
            for (size_t i = 0; i < f->n_int_choices && off < sizeof(buf); i++) {
                const char *sep = i == 0 ? "" : (i + 1 == f->n_int_choices ? " or " : ", ");
                off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%" JSON_INTEGER_FORMAT,
                                        sep, f->int_choices[i]);
            }
            api_verr(call, path, EINVAL, "%s", buf);
            return -EINVAL;
        }
    }
    if (f->flags & API_RANGE) {
        if (x < f->min) {
            api_verr(call, path, EINVAL,
                     "Input should be greater than or equal to %" JSON_INTEGER_FORMAT, f->min);
            return -EINVAL;
        }
        if (x > f->max) {
            api_verr(call, path, EINVAL,
                     "Input should be less than or equal to %" JSON_INTEGER_FORMAT, f->max);
            return -EINVAL;
        }
    }
    return 0;
}

/* Whether v has the JSON type field type t wants (API_T_ANY: any). */
static bool type_matches(json_t *v, enum api_type t)
{
    switch (t) {
    case API_T_ANY:
        return true;
    case API_T_STRING:
    case API_T_ENUM:
        return json_is_string(v);
    case API_T_INT:
        return json_is_integer(v);
    case API_T_NUMBER:
        return json_is_number(v);
    case API_T_BOOL:
        return json_is_boolean(v);
    case API_T_OBJECT:
        return json_is_object(v);
    case API_T_ARRAY:
        return json_is_array(v);
    }
    return false;
}

/* A string: its length in range, and no NUL inside (C code below the API
 * would see a shorter string). */
static int check_string(struct api_call *call, const char *path, json_t *v,
                        const struct api_field *f)
{
    size_t len = json_string_length(v);

    if ((f->flags & API_RANGE) && (json_int_t)len < f->min) {
        api_verr(call, path, EINVAL,
                 "String should have at least %" JSON_INTEGER_FORMAT " character%s", f->min,
                 f->min == 1 ? "" : "s");
        return -EINVAL;
    }
    if ((f->flags & API_RANGE) && (json_int_t)len > f->max) {
        api_verr(call, path, EINVAL,
                 "String should have at most %" JSON_INTEGER_FORMAT " character%s", f->max,
                 f->max == 1 ? "" : "s");
        return -EINVAL;
    }
    if (strlen(json_string_value(v)) != len) {
        api_verr(call, path, EINVAL, "String must not contain NUL characters");
        return -EINVAL;
    }
    return 0;
}

/* An enum: one of the choices (listed in the error as pydantic does). */
static int check_enum(struct api_call *call, const char *path, json_t *v, const struct api_field *f)
{
    const char *s = json_string_value(v);

    for (size_t i = 0; f->choices && f->choices[i]; i++)
        if (strcmp(s, f->choices[i]) == 0)
            return 0;
    if (f->choices)
        enum_message(call, path, f->choices);
    else
        api_verr(call, path, EINVAL, "Input is not an allowed value");
    return -EINVAL;
}

/* A list: its length in range, then every item against f->items (all
 * item errors are reported). */
static int check_array(struct api_call *call, const char *path, json_t *v,
                       const struct api_field *f)
{
    size_t n = json_array_size(v);
    int rc = 0;

    if ((f->flags & API_RANGE) && (json_int_t)n < f->min) {
        api_verr(call, path, EINVAL, "List should have at least %" JSON_INTEGER_FORMAT " item%s",
                 f->min, f->min == 1 ? "" : "s");
        return -EINVAL;
    }
    if ((f->flags & API_RANGE) && (json_int_t)n > f->max) {
        api_verr(call, path, EINVAL, "List should have at most %" JSON_INTEGER_FORMAT " item%s",
                 f->max, f->max == 1 ? "" : "s");
        return -EINVAL;
    }
    for (size_t i = 0; f->items && i < n; i++) {
        char sub[PATH_MAX_LEN], idx[24];
        snprintf(idx, sizeof(idx), "%zu", i);
        join_path(sub, sizeof(sub), path, idx);
        if (api_validate_value(call, sub, json_array_get(v, i), f->items) < 0)
            rc = -EINVAL;
    }
    return rc;
}

int api_validate_value(struct api_call *call, const char *path, json_t *v,
                       const struct api_field *f)
{
    if (json_is_null(v) && (f->flags & API_NULLABLE))
        return 0;
    if (json_is_null(v) || !type_matches(v, f->type)) {
        api_verr(call, path, EINVAL, "%s", type_message(f->type));
        return -EINVAL;
    }
    switch (f->type) {
    case API_T_STRING:
        return check_string(call, path, v, f);
    case API_T_ENUM:
        return check_enum(call, path, v, f);
    case API_T_INT:
        return check_int(call, path, v, f);
    case API_T_OBJECT:
        return f->fields ? api_validate_object(call, path, v, f->fields, f->nfields, 0) : 0;
    case API_T_ARRAY:
        return check_array(call, path, v, f);
    case API_T_ANY:
    case API_T_NUMBER:
    case API_T_BOOL:
        break;
    }
    return 0;
}

int api_validate_object(struct api_call *call, const char *prefix, json_t *obj,
                        const struct api_field *fields, size_t nfields, unsigned flags)
{
    if (!prefix)
        prefix = api_call_method(call);
    if (!obj) {
        api_verr(call, prefix, EINVAL, "Field required");
        return -EINVAL;
    }
    if (!json_is_object(obj)) {
        api_verr(call, prefix, EINVAL, "Input should be a valid dictionary");
        return -EINVAL;
    }
    int rc = 0;
    char path[PATH_MAX_LEN];
    if (!(flags & API_ALLOW_EXTRA)) {
        const char *key;
        json_t *val;
        json_object_foreach(obj, key, val)
        {
            bool known = false;
            for (size_t i = 0; i < nfields && !known; i++)
                known = strcmp(fields[i].name, key) == 0;
            if (!known) {
                join_path(path, sizeof(path), prefix, key);
                api_verr(call, path, EINVAL, "Extra inputs are not permitted");
                rc = -EINVAL;
            }
        }
    }
    for (size_t i = 0; i < nfields; i++) {
        const struct api_field *f = &fields[i];
        join_path(path, sizeof(path), prefix, f->name);
        json_t *v = json_object_get(obj, f->name);
        if (!v) {
            if ((f->flags & API_REQUIRED) && !(flags & API_PARTIAL)) {
                api_verr(call, path, EINVAL, "Field required");
                rc = -EINVAL;
            }
            continue;
        }
        if (api_validate_value(call, path, v, f) < 0)
            rc = -EINVAL;
    }
    return rc;
}

int api_check_arity(struct api_call *call, json_t *params, size_t max)
{
    size_t n = json_is_array(params) ? json_array_size(params) : 0;
    if (n <= max)
        return 0;
    api_verr(call, api_call_method(call), EINVAL, "Too many arguments (expected %zu, found %zu)",
             max, n);
    return -EINVAL;
}

json_t *api_field_default(const struct api_field *f)
{
    json_error_t err;
    json_t *v = json_loads(f->def, JSON_DECODE_ANY, &err);
    if (!v)
        log_error("api: default for field %s is not valid JSON: %s", f->name, err.text);
    return v;
}

int api_apply_defaults(json_t *obj, const struct api_field *fields, size_t nfields)
{
    if (!json_is_object(obj))
        return -EINVAL;
    for (size_t i = 0; i < nfields; i++) {
        const struct api_field *f = &fields[i];
        if (!f->def || json_object_get(obj, f->name))
            continue;
        json_t *v = api_field_default(f);
        if (!v)
            return -EINVAL;
        if (json_object_set_new(obj, f->name, v) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* One positional argument; 0 or -EINVAL (errors added). */
static int validate_arg(struct api_call *call, const struct api_arg *a, json_t *raw)
{
    json_t *v = json_is_null(raw) ? NULL : raw; /* as api_param() */
    if ((!v && (a->flags & API_ARG_OPTIONAL)) || (a->flags & API_ARG_SELF_CHECKED))
        return 0;
    if (a->check)
        return a->check(call, raw) < 0 ? -EINVAL : 0;
    if (a->type == API_T_ANY)
        return 0;
    if (a->type == API_T_OBJECT && a->fields)
        return api_validate_object(call, a->prefix, v, a->fields, a->nfields,
                                   a->flags & (API_PARTIAL | API_ALLOW_EXTRA));
    char path[PATH_MAX_LEN];
    join_path(path, sizeof(path), api_call_method(call), a->name);
    if (!raw && !(a->flags & API_ARG_TYPE_MSG)) {
        api_verr(call, path, EINVAL, "Field required");
        return -EINVAL;
    }
    struct api_field f = {.name = a->name,
                          .type = a->type,
                          .flags = (a->flags & API_ARG_NULLABLE) ? API_NULLABLE : 0};
    return api_validate_value(call, path, raw, &f);
}

int api_validate_args(struct api_call *call, const struct api_method *m, json_t *params)
{
    if (api_check_arity(call, params, m->nargs) < 0)
        return -EINVAL;
    for (size_t i = 0; i < m->nargs; i++) {
        json_t *raw = json_is_array(params) ? json_array_get(params, i) : NULL;
        if (validate_arg(call, &m->args[i], raw) < 0)
            return -EINVAL;
    }
    return 0;
}

/* A growing synopsis text; on ENOMEM it stays failed. */
struct syn {
    char *buf;
    size_t len, cap;
    bool failed;
};

static void syn_put(struct syn *s, const char *t)
{
    size_t n = strlen(t);
    if (s->failed)
        return;
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b) {
            s->failed = true;
            return;
        }
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, t, n + 1);
    s->len += n;
}

static void syn_fields(struct syn *s, const struct api_field *fields, size_t n, bool partial);

/* ": {…}" or ": [{…}]" after a field whose value has fields of its own. */
static void syn_shape(struct syn *s, const struct api_field *f)
{
    if (f->type == API_T_OBJECT && f->fields) {
        syn_put(s, ": ");
        syn_fields(s, f->fields, f->nfields, false);
    } else if (f->type == API_T_ARRAY && f->items && f->items->type == API_T_OBJECT &&
               f->items->fields) {
        syn_put(s, ": [");
        syn_fields(s, f->items->fields, f->items->nfields, false);
        syn_put(s, "]");
    }
}

static void syn_fields(struct syn *s, const struct api_field *fields, size_t n, bool partial)
{
    syn_put(s, "{");
    for (size_t i = 0; i < n; i++) {
        if (i)
            syn_put(s, ", ");
        syn_put(s, fields[i].name);
        if (partial || !(fields[i].flags & API_REQUIRED))
            syn_put(s, "?");
        syn_shape(s, &fields[i]);
    }
    syn_put(s, "}");
}

char *api_method_synopsis(const struct api_method *m)
{
    if (m->params)
        return strdup(m->params);
    struct syn s = {0};
    syn_put(&s, "[");
    for (size_t i = 0; i < m->nargs; i++) {
        const struct api_arg *a = &m->args[i];
        if (i)
            syn_put(&s, ", ");
        syn_put(&s, a->name);
        if (a->flags & API_ARG_OPTIONAL)
            syn_put(&s, "?");
        if (a->type == API_T_OBJECT && a->fields) {
            syn_put(&s, ": ");
            syn_fields(&s, a->fields, a->nfields, (a->flags & API_PARTIAL) != 0);
        }
    }
    syn_put(&s, "]");
    if (s.failed) {
        free(s.buf);
        return NULL;
    }
    return s.buf;
}
