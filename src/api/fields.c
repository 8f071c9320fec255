/*
 * The field codecs and the table walkers of api/fields.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/fields.h"

static int str_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    char **dst = field;
    char *copy = NULL;
    if (json_is_string(v) && !(copy = strdup(json_string_value(v))))
        return -ENOMEM;
    free(*dst);
    *dst = copy;
    return 0;
}

static json_t *str_encode(const struct api_field *f, const void *field)
{
    (void)f;
    const char *s = *(char *const *)field;
    return json_string(s ? s : "");
}

static json_t *str_null_encode(const struct api_field *f, const void *field)
{
    (void)f;
    const char *s = *(char *const *)field;
    return s ? json_string(s) : json_null();
}

static int bool_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    *(bool *)field = json_is_true(v);
    return 0;
}

static json_t *bool_encode(const struct api_field *f, const void *field)
{
    (void)f;
    return json_boolean(*(const bool *)field);
}

static int int_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    *(int *)field = (int)json_integer_value(v);
    return 0;
}

static json_t *int_encode(const struct api_field *f, const void *field)
{
    (void)f;
    return json_integer(*(const int *)field);
}

static int i64_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    *(int64_t *)field = (int64_t)json_integer_value(v);
    return 0;
}

static json_t *i64_encode(const struct api_field *f, const void *field)
{
    (void)f;
    return json_integer((json_int_t) * (const int64_t *)field);
}

static int u32_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    *(uint32_t *)field = (uint32_t)json_integer_value(v);
    return 0;
}

static json_t *u32_encode(const struct api_field *f, const void *field)
{
    (void)f;
    return json_integer((json_int_t) * (const uint32_t *)field);
}

static int enum_decode(const struct api_field *f, json_t *v, void *field)
{
    const char *s = json_string_value(v);
    for (int i = 0; s && f->choices[i]; i++)
        if (strcmp(f->choices[i], s) == 0) {
            *(int *)field = i;
            return 0;
        }
    return 0; /* validated: unreachable for a value of the table */
}

static json_t *enum_encode(const struct api_field *f, const void *field)
{
    int i = *(const int *)field;
    for (int k = 0; f->choices[k]; k++)
        if (k == i)
            return json_string(f->choices[k]);
    return json_null();
}

static void str_clear(const struct api_field *f, void *field)
{
    (void)f;
    char **p = field;
    free(*p);
    *p = NULL;
}

const struct api_codec api_codec_str = {str_decode, str_encode, str_clear};
const struct api_codec api_codec_str_null = {str_decode, str_null_encode, str_clear};
const struct api_codec api_codec_bool = {bool_decode, bool_encode};
const struct api_codec api_codec_int = {int_decode, int_encode};
const struct api_codec api_codec_i64 = {i64_decode, i64_encode};
const struct api_codec api_codec_u32 = {u32_decode, u32_encode};
const struct api_codec api_codec_enum = {enum_decode, enum_encode};

int api_fields_decode(const struct api_field *fields, size_t n, json_t *data, void *obj)
{
    for (size_t i = 0; i < n; i++) {
        const struct api_field *f = &fields[i];
        json_t *v;
        if (!f->codec || !(v = json_object_get(data, f->name)))
            continue;
        int rc = f->codec->decode(f, v, (char *)obj + f->off);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int api_fields_encode(const struct api_field *fields, size_t n, const void *obj, json_t *out)
{
    for (size_t i = 0; i < n; i++) {
        const struct api_field *f = &fields[i];
        if (!f->codec)
            continue;
        json_t *v = f->codec->encode(f, (const char *)obj + f->off);
        if (!v || json_object_set_new(out, f->name, v) < 0)
            return -ENOMEM;
    }
    return 0;
}

static int chars_decode(const struct api_field *f, json_t *v, void *field)
{
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    size_t n = strlen(s);
    if (n > (size_t)f->max) /* validated against max: cannot happen */
        n = (size_t)f->max;
    memcpy(field, s, n);
    ((char *)field)[n] = '\0';
    return 0;
}

static json_t *chars_encode(const struct api_field *f, const void *field)
{
    (void)f;
    return json_string(field);
}

const struct api_codec api_codec_chars = {chars_decode, chars_encode, NULL};

/* A secret: the old value is wiped before it is freed. */
static int secret_decode(const struct api_field *f, json_t *v, void *field)
{
    char **dst = field;
    char *old = *dst;
    *dst = NULL;
    int rc = str_decode(f, v, field);
    if (old)
        explicit_bzero(old, strlen(old));
    free(old);
    return rc;
}

static void secret_clear(const struct api_field *f, void *field)
{
    (void)f;
    char **p = field;
    if (*p)
        explicit_bzero(*p, strlen(*p));
    free(*p);
    *p = NULL;
}

const struct api_codec api_codec_secret = {secret_decode, str_null_encode, secret_clear};

void api_strv_clear(struct api_strv *sv)
{
    for (size_t i = 0; i < sv->n; i++)
        free(sv->v[i]);
    free(sv->v);
    sv->v = NULL;
    sv->n = 0;
}

int api_strv_add(struct api_strv *sv, const char *s)
{
    char *copy = strdup(s);
    char **v = copy ? realloc(sv->v, (sv->n + 1) * sizeof(*v)) : NULL;
    if (!v) {
        free(copy);
        return -ENOMEM;
    }
    sv->v = v;
    sv->v[sv->n++] = copy;
    return 0;
}

static void strv_clear(const struct api_field *f, void *field)
{
    (void)f;
    api_strv_clear(field);
}

static int strv_decode(const struct api_field *f, json_t *v, void *field)
{
    struct api_strv *sv = field, next = {0};
    size_t i;
    json_t *item;
    if (json_array_size(v) && !(next.v = calloc(json_array_size(v), sizeof(char *))))
        return -ENOMEM;
    json_array_foreach(v, i, item)
    {
        if (!(next.v[next.n] = strdup(json_string_value(item) ? json_string_value(item) : ""))) {
            strv_clear(f, &next);
            return -ENOMEM;
        }
        next.n++;
    }
    strv_clear(f, sv);
    *sv = next;
    return 0;
}

static json_t *strv_encode(const struct api_field *f, const void *field)
{
    (void)f;
    const struct api_strv *sv = field;
    json_t *a = json_array();
    for (size_t i = 0; a && i < sv->n; i++)
        if (json_array_append_new(a, json_string(sv->v[i])) < 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

const struct api_codec api_codec_strv = {strv_decode, strv_encode, strv_clear};

static int object_decode(const struct api_field *f, json_t *v, void *field)
{
    return api_fields_decode(f->fields, f->nfields, v, field);
}

static json_t *object_encode(const struct api_field *f, const void *field)
{
    json_t *o = json_object();
    if (o && api_fields_encode(f->fields, f->nfields, field, o) < 0) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

static void object_clear(const struct api_field *f, void *field)
{
    api_fields_clear(f->fields, f->nfields, field);
}

const struct api_codec api_codec_object = {object_decode, object_encode, object_clear};

int api_fields_defaults(const struct api_field *fields, size_t n, void *obj)
{
    for (size_t i = 0; i < n; i++) {
        const struct api_field *f = &fields[i];
        if (!f->codec)
            continue;
        if (!f->def) {
            int rc = f->codec == &api_codec_object
                         ? api_fields_defaults(f->fields, f->nfields, (char *)obj + f->off)
                         : 0;
            if (rc < 0)
                return rc;
            continue;
        }
        json_t *v = api_field_default(f);
        if (!v)
            return -EINVAL;
        int rc = f->codec->decode(f, v, (char *)obj + f->off);
        json_decref(v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void api_fields_clear(const struct api_field *fields, size_t n, void *obj)
{
    for (size_t i = 0; i < n; i++)
        if (fields[i].codec && fields[i].codec->clear)
            fields[i].codec->clear(&fields[i], (char *)obj + fields[i].off);
}

json_t *api_fields_row(int64_t id, const struct api_field *fields, size_t n, const void *obj)
{
    json_t *r = json_pack("{s:I}", "id", (json_int_t)id);
    if (r && api_fields_encode(fields, n, obj, r) < 0) {
        json_decref(r);
        r = NULL;
    }
    return r;
}
