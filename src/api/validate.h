/*
 * Strict parameter validation, shaped like the TrueNAS middleware's pydantic
 * models (extra="forbid", strict=True): unknown keys are refused with
 * "Extra inputs are not permitted", JSON types are never coerced (5 is not
 * "5", 1 is not true), and every problem is reported at once as a field
 * error ("pool.dataset.create.volsize: Input should be a valid integer")
 * through api_verr(), so the call fails with -32602 and data.extra lists
 * [[field, message, errno], …].
 *
 * Usage: the field table is attached to the method's registration and the
 * dispatcher validates against it before the handler runs (api.h):
 *
 *   static const char *const sync_values[] = {"STANDARD", "ALWAYS", "DISABLED", NULL};
 *   static const struct api_field create_fields[] = {
 *       {.name = "name", .type = API_T_STRING, .flags = API_REQUIRED},
 *       {.name = "volsize", .type = API_T_INT, .flags = API_REQUIRED | API_RANGE,
 *        .min = 1, .max = INT64_MAX},
 *       {.name = "sync", .type = API_T_ENUM, .choices = sync_values, .def = "\"STANDARD\""},
 *       {.name = "comments", .type = API_T_STRING, .flags = API_NULLABLE | API_RANGE,
 *        .min = 0, .max = 1024},
 *   };
 *   static const struct api_arg create_args[] = {API_ARG_OBJECT("data", create_fields, 0)};
 *   … {"pool.dataset.create", NULL, "Create a volume", dataset_create, 0, API_ARGS(create_args)},
 *
 *   static int dataset_create(struct api_call *call, json_t *params, json_t **result)
 *   {
 *       json_t *data = api_param(params, 0); // already checked against create_fields
 *       // ... semantic checks: api_verr(call, "pool.dataset.create.volsize", EINVAL,
 *       //                              "must be a multiple of volblocksize");
 *       if (api_has_verrs(call))
 *           return api_invalid(call);
 *       ...
 *   }
 *
 * api_validate_object/api_validate_value stay available for nested checks
 * a handler must make itself (a value whose shape depends on another).
 *
 * Field names: prefix NULL means the method name ("pool.dataset.create"),
 * so a field is reported as "<method>.<field>"; nested objects and list
 * items extend the path ("iscsi.target.create.groups.0.portal").
 * For *.update methods pass API_PARTIAL: required fields may be absent
 * (TrueNAS ForUpdateMetaclass), everything present is still checked.
 */
#ifndef BLOCKD_API_VALIDATE_H
#define BLOCKD_API_VALIDATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/api.h"

struct api_codec;

enum api_type {
    API_T_ANY,    /* any JSON value (still subject to API_NULLABLE) */
    API_T_STRING, /* JSON string; API_RANGE bounds its length in bytes */
    API_T_INT,    /* JSON integer (not real, not bool); API_RANGE bounds it;
                   * int_choices (if set) lists the allowed values */
    API_T_NUMBER, /* JSON integer or real */
    API_T_BOOL,   /* true / false */
    API_T_ENUM,   /* JSON string, one of choices (NULL-terminated) */
    API_T_OBJECT, /* JSON object; fields/nfields (if set) validate it */
    API_T_ARRAY,  /* JSON array; items (if set) validates each element;
                   * API_RANGE bounds its length */
};

enum api_field_flags {
    API_REQUIRED = 1u << 0, /* must be present ("Field required") */
    API_NULLABLE = 1u << 1, /* JSON null accepted */
    API_RANGE = 1u << 2,    /* check min/max (see the type) */
};

struct api_field {
    const char *name; /* key in the object (unused for array items) */
    enum api_type type;
    unsigned flags;                /* enum api_field_flags */
    const char *const *choices;    /* API_T_ENUM: NULL-terminated allowed strings */
    const json_int_t *int_choices; /* API_T_INT: allowed values (n_int_choices) */
    size_t n_int_choices;
    json_int_t min, max;            /* with API_RANGE */
    const struct api_field *fields; /* API_T_OBJECT: nested fields (nfields) */
    size_t nfields;
    const struct api_field *items; /* API_T_ARRAY: element description */
    const char *def;               /* JSON text of the default (api_apply_defaults) */
    /* One description per object (api/fields.h): where the field lives in
     * the object's C struct and how its value moves between JSON and C, so
     * that this table validates, decodes and encodes. A field without a
     * codec is only validated here (its handler reads it). */
    size_t off;
    const struct api_codec *codec;
};

/* A string field of lo to hi bytes, flags besides API_RANGE in fl:
 * API_FIELD_STRING("name", API_REQUIRED, 1, NAME_DATASET_MAX). */
#define API_FIELD_STRING(nm, fl, lo, hi)                                                           \
    {                                                                                              \
        .name = (nm), .type = API_T_STRING, .flags = (fl) | API_RANGE, .min = (lo), .max = (hi)    \
    }

enum api_validate_flags {
    API_PARTIAL = 1u << 0,     /* update: no field is required */
    API_ALLOW_EXTRA = 1u << 1, /* unknown keys are accepted (rarely right) */
};

/*
 * One positional parameter of a method (struct api_method.args).
 *
 *   API_T_OBJECT with fields  the object is checked as api_validate_object
 *                             (prefix, default the method name) with the
 *                             arg's API_PARTIAL / API_ALLOW_EXTRA flags, so
 *                             errors read "<method>.<field>" as before.
 *   API_T_ANY                 not checked here: the handler (api_query for
 *                             [filters, options]) owns it; the arg only
 *                             counts for the arity and the synopsis.
 *   other types               the value is checked as one field named
 *                             "<method>.<name>" (API_T_INT id: "Field
 *                             required" / "Input should be a valid integer").
 *   check                     replaces the above for an argument whose errors
 *                             are worded by its module; it gets params[i] as
 *                             sent (NULL when absent) and returns 0, or -1
 *                             after api_verr() (or after api_error() for an
 *                             error that is not -32602, e.g. ENOENT).
 *
 * An API_ARG_OPTIONAL argument that is absent or null is not checked; only
 * trailing arguments should be optional.
 */
enum api_arg_flags {
    API_ARG_OPTIONAL = 1u << 8,      /* may be absent or null */
    API_ARG_NULLABLE = 1u << 9,      /* scalar: JSON null accepted */
    API_ARG_TYPE_MSG = 1u << 10,     /* scalar: a missing value gets the type error
                                      * ("Input should be a valid integer"), not
                                      * "Field required" (what these methods always said) */
    API_ARG_SELF_CHECKED = 1u << 11, /* the handler checks this argument itself (its errors
                                      * come with another argument's, or its shape varies);
                                      * the fields are for the synopsis only */
};

struct api_arg {
    const char *name; /* synopsis name ("id", "data"); scalar errors use it */
    enum api_type type;
    unsigned flags;                 /* enum api_arg_flags | API_PARTIAL | API_ALLOW_EXTRA */
    const struct api_field *fields; /* API_T_OBJECT */
    size_t nfields;
    const char *prefix; /* API_T_OBJECT: error path prefix (NULL: the method name) */
    int (*check)(struct api_call *call, json_t *value);
};

/* The arg entries: API_ARG_OBJECT("data", create_fields, 0). */
#define API_ARG_OBJECT(nm, tbl, fl)                                                                \
    {                                                                                              \
        .name = (nm), .type = API_T_OBJECT, .flags = (fl), .fields = (tbl),                        \
        .nfields = sizeof(tbl) / sizeof((tbl)[0])                                                  \
    }
#define API_ARG_ID                                                                                 \
    {                                                                                              \
        .name = "id", .type = API_T_INT                                                            \
    }
#define API_ARG_QUERY                                                                              \
    {.name = "filters", .type = API_T_ANY, .flags = API_ARG_OPTIONAL},                             \
    {                                                                                              \
        .name = "options", .type = API_T_ANY, .flags = API_ARG_OPTIONAL                            \
    }

/*
 * The dispatcher's check (api.c calls it before a method without a
 * hand-written params synopsis runs): more arguments than m->nargs is
 * "Too many arguments"; then each argument in order, stopping at the
 * first that fails (a handler used to return at its first bad argument).
 * 0, or -EINVAL with the errors added to call. Any thread.
 */
int api_validate_args(struct api_call *call, const struct api_method *m, json_t *params);

/*
 * The synopsis of m (malloc'd; NULL on ENOMEM): the hand-written params
 * text if it has one, else generated from its args, e.g.
 *   [id, data: {name?, path?, rbd?: {pool?, conf?}}]
 * Optional arguments and fields end in "?"; API_PARTIAL makes every field
 * of that argument optional; nested objects and lists of objects print
 * their fields.
 */
char *api_method_synopsis(const struct api_method *m);

/*
 * Check obj (must be a JSON object) against fields. Each problem becomes
 * one api_verr() on call with the field path prefix + "." + name. Returns
 * 0 if obj passed, -EINVAL if any error was added (the caller then
 * returns api_invalid(call)). obj NULL is reported as "<prefix>: Field
 * required".
 */
int api_validate_object(struct api_call *call, const char *prefix, json_t *obj,
                        const struct api_field *fields, size_t nfields, unsigned flags);

/* Check one value against one field description; path is the full field
 * name used in the errors. 0 or -EINVAL (errors added). */
int api_validate_value(struct api_call *call, const char *path, json_t *value,
                       const struct api_field *field);

/*
 * Positional params: more than max → "<method>: Too many arguments
 * (expected max, found n)" (the text TrueNAS clients look for when they
 * probe for optional trailing arguments). 0 or -EINVAL (error added).
 */
int api_check_arity(struct api_call *call, json_t *params, size_t max);

/*
 * Fill missing keys of obj from the fields' def texts (JSON, e.g. "\"16K\"",
 * "false", "null"). Objects only; call after api_validate_object. 0 or
 * -ENOMEM / -EINVAL (a def that is not valid JSON: a programming error,
 * logged).
 */
int api_apply_defaults(json_t *obj, const struct api_field *fields, size_t nfields);
/* f's default (f->def parsed): a new reference, or NULL (not valid JSON: a
 * programming error, logged). */
json_t *api_field_default(const struct api_field *f);

#endif
