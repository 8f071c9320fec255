/*
 * One description per object: the api_field table that validates a
 * method's parameters (api/validate.h) also says, for each field, where it
 * lives in the object's C struct (off) and how it is decoded and encoded
 * (codec), in the manner of SPDK's spdk_json_object_decoder tables. An
 * object's create, update, get_instance and query then share one table:
 *
 *   static const struct api_field portal_fields[] = {
 *       {.name = "comment", .type = API_T_STRING, .def = "\"\"",
 *        API_AT(struct icfg_portal, comment, api_codec_str)},
 *       ...
 *   };
 *   api_fields_decode(portal_fields, n, body, &portal);   // keys present only
 *   api_fields_encode(portal_fields, n, &portal, row);    // every codec field
 *
 * Decoding trusts the value's shape (the dispatcher validated it against
 * the same table) and applies only the keys present, so that an update's
 * partial body changes only what it names. Fields whose meaning spans
 * several members (a nullable integer with a "has" flag, secrets that are
 * sealed) keep no codec and are read and written by the object's module.
 */
#ifndef BLOCKD_API_FIELDS_H
#define BLOCKD_API_FIELDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api/validate.h"

struct api_codec {
    /* v (validated, never absent) into the member at field: 0 or -ENOMEM. */
    int (*decode)(const struct api_field *f, json_t *v, void *field);
    /* The member at field as JSON: a new reference, or NULL (ENOMEM). */
    json_t *(*encode)(const struct api_field *f, const void *field);
    /* Free what the member owns and zero it (NULL: it owns nothing). */
    void (*clear)(const struct api_field *f, void *field);
};

/* A list of owned strings (api_codec_strv; also what the iSCSI stores
 * keep: a target's auth_networks, an initiator group's names). */
struct api_strv {
    char **v;
    size_t n;
};
/* Free the strings and the array, and empty sv. */
void api_strv_clear(struct api_strv *sv);
/* Append a copy of s. 0 or -ENOMEM (sv unchanged). */
int api_strv_add(struct api_strv *sv, const char *s);

/* char * (owned, freed on replace): JSON null decodes to NULL; NULL
 * encodes as "" (api_codec_str) or null (api_codec_str_null). */
extern const struct api_codec api_codec_str;
extern const struct api_codec api_codec_str_null;
/* char * holding a secret: as api_codec_str_null, and the value it
 * replaces is wiped before it is freed. */
extern const struct api_codec api_codec_secret;
/* bool. */
extern const struct api_codec api_codec_bool;
/* Integers of these C types (the table's API_RANGE keeps them in range). */
extern const struct api_codec api_codec_int;
extern const struct api_codec api_codec_i64;
extern const struct api_codec api_codec_u32;
/* An int holding the index of the value in the field's choices (API_T_ENUM). */
extern const struct api_codec api_codec_enum;
/* A char array member: the field's max (API_RANGE, set by API_AT_CHARS
 * from the array's size) bounds the string, so it always fits with its
 * NUL; null decodes to "". Encodes as a string. */
extern const struct api_codec api_codec_chars;
/* struct api_strv: a JSON array of strings. */
extern const struct api_codec api_codec_strv;
/* An embedded struct described by the field's own table (f->fields, an
 * API_T_OBJECT): decoded key by key (an update's partial object changes
 * only what it names), encoded whole. */
extern const struct api_codec api_codec_object;

/* The member of type T a field describes, with codec C. */
#define API_AT(T, member, C) .off = offsetof(T, member), .codec = &(C)
/* A char array member of T (api_codec_chars): the field's max is the
 * array's size less its NUL (the field sets API_RANGE and min, not max). */
#define API_AT_CHARS(T, member)                                                                    \
    .off = offsetof(T, member), .codec = &api_codec_chars, .max = sizeof(((T *)0)->member) - 1

/* Apply the keys of data that fields describe with a codec to obj. 0 or
 * -ENOMEM (obj may then hold some of the new values). */
int api_fields_decode(const struct api_field *fields, size_t n, json_t *data, void *obj);
/* Set every codec field of obj in out (an object). 0 or -ENOMEM. */
int api_fields_encode(const struct api_field *fields, size_t n, const void *obj, json_t *out);

/* Set obj's codec fields to their defaults (each field's def; an
 * api_codec_object field without one gets its own fields' defaults), as a
 * create starts from. 0 or -ENOMEM (-EINVAL: a def that is not JSON, a
 * programming error, logged). */
int api_fields_defaults(const struct api_field *fields, size_t n, void *obj);
/* Free what obj's codec fields own (secrets wiped) and zero them. */
void api_fields_clear(const struct api_field *fields, size_t n, void *obj);
/* A row: {"id": id} then every codec field of obj. New reference or NULL. */
json_t *api_fields_row(int64_t id, const struct api_field *fields, size_t n, const void *obj);

#endif
