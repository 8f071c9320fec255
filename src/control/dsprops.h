/*
 * The ZFS dataset properties TrueNAS' pool.dataset.create/update accept
 * beyond the ones blockd acts on (volsize, sync, readonly, comments):
 * atime, exec, acltype, aclmode, compression, casesensitivity, quota,
 * refquota, reservation, refreservation, recordsize, snapdir, xattr,
 * copies, deduplication, checksum, snapdev, special_small_block_size and
 * the quota_warning/critical user properties. One table describes each
 * (API name, ZFS name, values, default, which dataset types take it,
 * whether children inherit it); validation, storage (dataset_props rows
 * named by the ZFS name, raw lower-case ZFS values) and the query rows
 * ({parsed, rawvalue, value, source} with LOCAL / INHERITED / DEFAULT)
 * all walk that table. sync and readonly are in it for inheritance; blockd
 * acts on them (the datasets row keeps their effective value); the others
 * are stored for clients only (docs/api-datasets.md).
 *
 * A request's properties are decoded once into a struct ds_propset
 * (ds_propset_decode, in the handler); checking and storing take only
 * that struct. The query rows are encoded to JSON here (ds_props_emit).
 *
 * Private to src/control/. API thread; DB locked where said.
 */
#ifndef BLOCKD_CONFIG_DSPROPS_H
#define BLOCKD_CONFIG_DSPROPS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/validate.h"
#include "control/ds_internal.h"

extern const char *const ds_choices_onoff_inherit[];
extern const char *const ds_choices_sync_inherit[];
extern const char *const ds_choices_acltype[];
extern const char *const ds_choices_aclmode[];
extern const char *const ds_choices_casesensitivity[];
extern const char *const ds_choices_snapdir[];
extern const char *const ds_choices_xattr[];
extern const char *const ds_choices_dedup[];
extern const char *const ds_choices_checksum[];
extern const char *const ds_choices_snapdev[];
extern const char *const ds_choices_compression[];
extern const char *const ds_choices_share_type[];

/* Schema entries (type checks only) of the properties both create and
 * update take; ds_props_check makes the semantic checks. */
#define DS_PROP_FIELDS_COMMON                                                                      \
    {.name = "atime", .type = API_T_ENUM, .choices = ds_choices_onoff_inherit},                    \
        {.name = "exec", .type = API_T_ENUM, .choices = ds_choices_onoff_inherit},                 \
        {.name = "acltype", .type = API_T_ENUM, .choices = ds_choices_acltype},                    \
        {.name = "aclmode", .type = API_T_ENUM, .choices = ds_choices_aclmode},                    \
        {.name = "compression", .type = API_T_ENUM, .choices = ds_choices_compression},            \
        {.name = "quota", .type = API_T_INT, .flags = API_NULLABLE},                               \
        {.name = "refquota", .type = API_T_INT, .flags = API_NULLABLE},                            \
        {.name = "reservation",                                                                    \
         .type = API_T_INT,                                                                        \
         .flags = API_RANGE,                                                                       \
         .min = 0,                                                                                 \
         .max = INT64_MAX},                                                                        \
        {.name = "refreservation",                                                                 \
         .type = API_T_INT,                                                                        \
         .flags = API_RANGE,                                                                       \
         .min = 0,                                                                                 \
         .max = INT64_MAX},                                                                        \
        {.name = "recordsize", .type = API_T_STRING},                                              \
        {.name = "snapdir", .type = API_T_ENUM, .choices = ds_choices_snapdir},                    \
        {.name = "xattr", .type = API_T_ENUM, .choices = ds_choices_xattr},                        \
        {.name = "copies", .type = API_T_ANY},                                                     \
        {.name = "deduplication", .type = API_T_ENUM, .choices = ds_choices_dedup},                \
        {.name = "checksum", .type = API_T_ENUM, .choices = ds_choices_checksum},                  \
        {.name = "snapdev", .type = API_T_ENUM, .choices = ds_choices_snapdev},                    \
        {.name = "special_small_block_size", .type = API_T_ANY},                                   \
        {.name = "quota_warning", .type = API_T_ANY},                                              \
        {.name = "quota_critical", .type = API_T_ANY},                                             \
        {.name = "refquota_warning", .type = API_T_ANY},                                           \
    {                                                                                              \
        .name = "refquota_critical", .type = API_T_ANY                                             \
    }

/* Create-only: casesensitivity, share_type, the encryption switches. */
#define DS_PROP_FIELDS_CREATE                                                                      \
    {.name = "casesensitivity", .type = API_T_ENUM, .choices = ds_choices_casesensitivity},        \
        {.name = "share_type", .type = API_T_ENUM, .choices = ds_choices_share_type},              \
        {.name = "encryption", .type = API_T_BOOL},                                                \
        {.name = "encryption_options", .type = API_T_OBJECT},                                      \
    {                                                                                              \
        .name = "inherit_encryption", .type = API_T_BOOL                                           \
    }

/* The number of properties in dsprops.c's table (it checks this). */
#define DS_PROPS_COUNT 24

/* How a request gives one of the table's properties. */
enum ds_prop_given {
    DS_PROP_ABSENT = 0, /* not in the request: unchanged */
    DS_PROP_SET,        /* a value; raw holds it as stored */
    DS_PROP_INHERIT,    /* "INHERIT": the local value goes */
    DS_PROP_NONE,       /* a size given as null or 0 ("none"): the local value goes */
    DS_PROP_NOT_INT,    /* an integer property given neither an integer nor "INHERIT" */
    DS_PROP_BAD_SIZE,   /* a recordsize that is none of the sizes; bad holds it */
};

/* One property of a request, decoded. */
struct ds_propval {
    enum ds_prop_given given;
    int64_t num;  /* DS_PROP_SET of an integer property: the integer */
    char raw[32]; /* DS_PROP_SET: the raw ZFS value ("lz4", "131072", "3") */
    char *bad;    /* DS_PROP_BAD_SIZE: the text given (owned), for its error */
};

/* The table's properties of a pool.dataset.create/update request, one
 * slot per table entry (in the table's order), and the create-only
 * switches the checks need. */
struct ds_propset {
    struct ds_propval v[DS_PROPS_COUNT];
    char share_type[16]; /* as given; "" if not */
    bool encryption;     /* encryption: true was asked */
};

/*
 * Decode the table's properties of data (a request object already checked
 * against the schema above) into *set, once, in the handler. On create
 * the share_type presets (SMB, NFS, …) override what data gives, as
 * TrueNAS does, unless type is VOLUME (which refuses a share_type).
 * Values that break a rule are kept for ds_props_check to report. 0 or
 * -ENOMEM (nothing to free then); else free with ds_propset_free.
 */
int ds_propset_decode(json_t *data, bool create, enum ds_type type, struct ds_propset *set);
void ds_propset_free(struct ds_propset *set);
/* How set gives the table property with API name api (DS_PROP_ABSENT,
 * which is 0, if not or if api is no table property). */
enum ds_prop_given ds_propset_given(const struct ds_propset *set, const char *api);

/*
 * Semantic checks of set: which dataset type takes each property, ranges,
 * "INHERIT" only where ZFS inherits, recordsize values, the acltype/aclmode
 * pairs TrueNAS refuses (looking at name's ancestors for inherited
 * values); on create also share_type, a read-only parent and encryption.
 * Field errors "<method>.<key>" are added on call. update: name is the
 * existing dataset. DB locked. 0 or -EINVAL.
 */
int ds_props_check(struct api_call *call, const char *method, const struct ds_propset *set,
                   enum ds_type type, const char *name, bool update);

/* Store set (checked) for the dataset id: a value sets the local one,
 * "INHERIT" / a null quota removes it. On create (not update) a
 * FILESYSTEM gets xattr=sa unless set gives it, as TrueNAS does. DB
 * locked, inside a transaction. 0 or -errno. */
int ds_props_apply(int64_t id, const struct ds_propset *set, enum ds_type type, bool update);

/* A dataset's local values of the table's properties (its dataset_props
 * rows), by the table's index. Zero it before the first ds_props_local_add. */
struct ds_props_local {
    bool set[DS_PROPS_COUNT];
    char raw[DS_PROPS_COUNT][64]; /* raw values are short: lower-case enums, integers */
};

/* Record the dataset_props row (zfs_name, raw) in local if zfs_name is a
 * table property; other names are ignored (emit shows only the table). */
void ds_props_local_add(struct ds_props_local *local, const char *zfs_name, const char *raw);

/*
 * Add the table's property objects to a dataset row (the API's encoder):
 * local values from local, else the nearest ancestor's (source INHERITED)
 * for inheritable ones, else the default. Only the properties of the
 * row's type. DB locked.
 */
void ds_props_emit(json_t *row, const char *name, enum ds_type type,
                   const struct ds_props_local *local);

/* Around a pass that emits many rows with the DB locked and unchanged
 * (dsrows.c): lets siblings share one lookup of what they inherit. Same
 * thread; not nested. */
void ds_props_batch_begin(void);
void ds_props_batch_end(void);

/* Keep only the property objects ({parsed, rawvalue, …}) of row whose API
 * or ZFS name is in names (a JSON array of strings); other keys stay. */
void ds_props_select(json_t *row, json_t *names);

/* dsprops_eff.c: the effective sync and readonly. */

/* The effective sync / readonly of name's nearest existing ancestor
 * (what name inherits), defaults if none. DB locked. */
void ds_props_parent_effective(const char *name, enum volume_sync *sync, bool *readonly);

/* A volume whose effective sync or readonly a recompute changed. */
struct ds_eff_change {
    char name[DS_NAME_BUF];
    enum volume_sync sync;
    bool readonly;
    bool sync_changed, readonly_changed;
};

/*
 * sync and readonly act on volumes, so the datasets row keeps their
 * effective value: recompute it for name and its descendants from the
 * local values (dataset_props) and inheritance, after a change of a local
 * value or of the tree. *changes (malloc'd, caller frees; may be empty)
 * lists the volumes whose values changed, to apply to open volumes after
 * the commit. DB locked, inside a transaction. 0 or -errno.
 */
int ds_props_recompute(const char *name, struct ds_eff_change **changes, size_t *nchanges);

/* Pure helpers (unit-tested). */
/* "512", "512B", "4K", "128K", "1M" … "16M" → bytes (powers of two from
 * 512 to 16M, the values TrueNAS' recordsize_choices offers); 0 if not
 * one of them. */
uint64_t ds_recordsize_parse(const char *s);
/* The {parsed, rawvalue, value, source} object of the table property
 * zfs_name with raw value raw; NULL if not a table property. */
json_t *ds_props_render(const char *zfs_name, const char *raw, const char *source);

#endif
