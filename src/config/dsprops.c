/* The ZFS properties blockd keeps for TrueNAS clients (see dsprops.h). */
#include "config/dsprops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/db.h"
#include "core/log.h"

#define T_FS (1u << DS_FILESYSTEM)
#define T_VOL (1u << DS_VOLUME)

const char *const ds_choices_onoff_inherit[] = {"ON", "OFF", "INHERIT", NULL};
const char *const ds_choices_acltype[] = {"OFF", "NFSV4", "POSIX", "INHERIT", NULL};
const char *const ds_choices_aclmode[] = {"PASSTHROUGH", "RESTRICTED", "DISCARD", "INHERIT", NULL};
const char *const ds_choices_casesensitivity[] = {"SENSITIVE", "INSENSITIVE", "INHERIT", NULL};
const char *const ds_choices_snapdir[] = {"DISABLED", "VISIBLE", "HIDDEN", "INHERIT", NULL};
const char *const ds_choices_xattr[] = {"ON", "SA", "INHERIT", NULL};
const char *const ds_choices_dedup[] = {"ON", "VERIFY", "OFF", "INHERIT", NULL};
const char *const ds_choices_checksum[] = {"ON",     "OFF",     "FLETCHER2", "FLETCHER4",
                                           "SHA256", "SHA512",  "SKEIN",     "EDONR",
                                           "BLAKE3", "INHERIT", NULL};
const char *const ds_choices_snapdev[] = {"HIDDEN", "VISIBLE", "INHERIT", NULL};
const char *const ds_choices_share_type[] = {"GENERIC", "MULTIPROTOCOL", "NFS",
                                             "SMB",     "APPS",          NULL};
const char *const ds_choices_compression[] = {"ON",
                                              "OFF",
                                              "LZ4",
                                              "GZIP",
                                              "GZIP-1",
                                              "GZIP-9",
                                              "ZSTD",
                                              "ZSTD-FAST",
                                              "ZLE",
                                              "LZJB",
                                              "ZSTD-1",
                                              "ZSTD-2",
                                              "ZSTD-3",
                                              "ZSTD-4",
                                              "ZSTD-5",
                                              "ZSTD-6",
                                              "ZSTD-7",
                                              "ZSTD-8",
                                              "ZSTD-9",
                                              "ZSTD-10",
                                              "ZSTD-11",
                                              "ZSTD-12",
                                              "ZSTD-13",
                                              "ZSTD-14",
                                              "ZSTD-15",
                                              "ZSTD-16",
                                              "ZSTD-17",
                                              "ZSTD-18",
                                              "ZSTD-19",
                                              "ZSTD-FAST-1",
                                              "ZSTD-FAST-2",
                                              "ZSTD-FAST-3",
                                              "ZSTD-FAST-4",
                                              "ZSTD-FAST-5",
                                              "ZSTD-FAST-6",
                                              "ZSTD-FAST-7",
                                              "ZSTD-FAST-8",
                                              "ZSTD-FAST-9",
                                              "ZSTD-FAST-10",
                                              "ZSTD-FAST-20",
                                              "ZSTD-FAST-30",
                                              "ZSTD-FAST-40",
                                              "ZSTD-FAST-50",
                                              "ZSTD-FAST-60",
                                              "ZSTD-FAST-70",
                                              "ZSTD-FAST-80",
                                              "ZSTD-FAST-90",
                                              "ZSTD-FAST-100",
                                              "ZSTD-FAST-500",
                                              "ZSTD-FAST-1000",
                                              "INHERIT",
                                              NULL};

/* How a property's raw value is given and shown (as TrueNAS' property
 * normalisation shows it). */
enum kind {
    K_ENUM,     /* upper-case API value, lower-case raw; parsed = raw */
    K_BOOL,     /* enum whose parsed is true for "on", false for "off" */
    K_NULLSIZE, /* bytes; raw "0" shows parsed/value null ("none") */
    K_INT,      /* integer; parsed int */
    K_PERCENT,  /* 0…100, a TrueNAS user property: parsed is the string */
    K_RECSIZE,  /* recordsize: bytes, value "128K" */
    K_SSB,      /* special_small_block_size: 0…16M, parsed is the string */
};

struct propdef {
    const char *api; /* key in the API and the rows */
    const char *zfs; /* ZFS name: the dataset_props row name */
    enum kind kind;
    unsigned types;   /* T_FS | T_VOL */
    bool inheritable; /* children take the nearest ancestor's local value */
    bool create_only; /* refused by update (TrueNAS excludes it there) */
    const char *def;  /* raw default */
    /* sync, readonly: blockd acts on them, so the datasets row holds the
     * effective value (ds_props_recompute keeps it); dataset_props holds
     * only whether it is set locally. dsrows.c shows the value. */
    bool column;
};

static const struct propdef props[] = {
    {"sync", "sync", K_ENUM, T_FS | T_VOL, true, false, "standard", true},
    {"readonly", "readonly", K_BOOL, T_FS | T_VOL, true, false, "off", true},
    {"atime", "atime", K_BOOL, T_FS, true, false, "on", false},
    {"exec", "exec", K_BOOL, T_FS, true, false, "on", false},
    {"acltype", "acltype", K_ENUM, T_FS, true, false, "off", false},
    {"aclmode", "aclmode", K_ENUM, T_FS, true, false, "discard", false},
    {"casesensitivity", "casesensitivity", K_ENUM, T_FS, false, true, "sensitive", false},
    {"compression", "compression", K_ENUM, T_FS | T_VOL, true, false, "off", false},
    {"quota", "quota", K_NULLSIZE, T_FS, false, false, "0", false},
    {"refquota", "refquota", K_NULLSIZE, T_FS, false, false, "0", false},
    {"reservation", "reservation", K_NULLSIZE, T_FS | T_VOL, false, false, "0", false},
    {"refreservation", "refreservation", K_NULLSIZE, T_FS | T_VOL, false, false, "0", false},
    {"recordsize", "recordsize", K_RECSIZE, T_FS, true, false, "131072", false},
    {"snapdir", "snapdir", K_ENUM, T_FS, true, false, "hidden", false},
    {"xattr", "xattr", K_BOOL, T_FS, true, false, "sa", false},
    {"copies", "copies", K_INT, T_FS | T_VOL, true, false, "1", false},
    {"deduplication", "dedup", K_ENUM, T_FS | T_VOL, true, false, "off", false},
    {"checksum", "checksum", K_BOOL, T_FS | T_VOL, true, false, "on", false},
    {"snapdev", "snapdev", K_ENUM, T_FS | T_VOL, true, false, "hidden", false},
    {"special_small_block_size", "special_small_blocks", K_SSB, T_FS | T_VOL, true, false, "0",
     false},
    {"quota_warning", "quota_warning", K_PERCENT, T_FS | T_VOL, true, false, "80", false},
    {"quota_critical", "quota_critical", K_PERCENT, T_FS | T_VOL, true, false, "95", false},
    {"refquota_warning", "refquota_warning", K_PERCENT, T_FS | T_VOL, true, false, "80", false},
    {"refquota_critical", "refquota_critical", K_PERCENT, T_FS | T_VOL, true, false, "95", false},
};
#define NPROPS (sizeof(props) / sizeof(props[0]))

#define SSB_MAX (16 * 1024 * 1024)
#define QUOTA_MIN (1024LL * 1024 * 1024)

/* How many ancestors name has (its '/' count). */
static size_t depth(const char *name)
{
    size_t n = 0;

    for (; *name; name++)
        n += *name == '/';
    return n;
}

static const struct propdef *by_zfs(const char *zfs)
{
    for (size_t i = 0; i < NPROPS; i++)
        if (strcmp(props[i].zfs, zfs) == 0)
            return &props[i];
    return NULL;
}

static const struct propdef *by_name(const char *n)
{
    for (size_t i = 0; i < NPROPS; i++)
        if (strcmp(props[i].zfs, n) == 0 || strcmp(props[i].api, n) == 0)
            return &props[i];
    return NULL;
}

static void lower(char *dst, size_t len, const char *src)
{
    size_t i;

    for (i = 0; src[i] && i + 1 < len; i++)
        dst[i] = (char)(src[i] >= 'A' && src[i] <= 'Z' ? src[i] + 32 : src[i]);
    dst[i] = '\0';
}

static void upper(char *dst, size_t len, const char *src)
{
    size_t i;

    for (i = 0; src[i] && i + 1 < len; i++)
        dst[i] = (char)(src[i] >= 'a' && src[i] <= 'z' ? src[i] - 32 : src[i]);
    dst[i] = '\0';
}

uint64_t ds_recordsize_parse(const char *s)
{
    char *end;
    unsigned long long n;
    uint64_t mult = 1;

    if (!s || !*s || *s < '0' || *s > '9')
        return 0;
    n = strtoull(s, &end, 10);
    if (strcmp(end, "K") == 0)
        mult = 1024;
    else if (strcmp(end, "M") == 0)
        mult = 1024 * 1024;
    else if (*end && strcmp(end, "B") != 0)
        return 0;
    if (n == 0 || n > SSB_MAX)
        return 0;
    n *= mult;
    if (n < 512 || n > SSB_MAX || (n & (n - 1)) != 0)
        return 0;
    return n;
}

/* "128K" style, as TrueNAS shows recordsize. */
static void recsize_value(uint64_t v, char *buf, size_t len)
{
    if (v >= 1024 * 1024)
        snprintf(buf, len, "%lluM", (unsigned long long)(v / (1024 * 1024)));
    else if (v >= 1024)
        snprintf(buf, len, "%lluK", (unsigned long long)(v / 1024));
    else
        snprintf(buf, len, "%llu", (unsigned long long)v);
}

static json_t *render(const struct propdef *p, const char *raw, const char *source)
{
    char up[64], val[32];
    json_t *parsed = NULL;
    const char *value = up;
    unsigned long long n = strtoull(raw, NULL, 10);

    upper(up, sizeof(up), raw);
    switch (p->kind) {
    case K_BOOL:
        parsed = strcmp(raw, "on") == 0    ? json_true()
                 : strcmp(raw, "off") == 0 ? json_false()
                                           : json_null();
        break;
    case K_ENUM:
    case K_PERCENT:
    case K_SSB:
        parsed = json_string(raw);
        break;
    case K_INT:
        parsed = json_integer((json_int_t)n);
        break;
    case K_RECSIZE:
        parsed = json_integer((json_int_t)n);
        recsize_value(n, val, sizeof(val));
        value = val;
        break;
    case K_NULLSIZE:
        if (n == 0) {
            parsed = json_null();
            value = NULL;
        } else {
            parsed = json_integer((json_int_t)n);
            ds_nicenum(n, val, sizeof(val));
            value = val;
        }
        break;
    }
    return json_pack("{s:o, s:s, s:s?, s:s}", "parsed", parsed ? parsed : json_null(), "rawvalue",
                     raw, "value", value, "source", source);
}

json_t *ds_props_render(const char *zfs_name, const char *raw, const char *source)
{
    const struct propdef *p = by_zfs(zfs_name);
    return p ? render(p, raw, source) : NULL;
}

/* The API value in data as the raw ZFS string, or NULL for "INHERIT" (and
 * quota null / 0, which mean "none"). buf holds the result. */
static const char *raw_of(const struct propdef *p, json_t *v, char *buf, size_t len)
{
    if (json_is_string(v) && strcmp(json_string_value(v), "INHERIT") == 0)
        return NULL;
    switch (p->kind) {
    case K_ENUM:
    case K_BOOL:
        lower(buf, len, json_string_value(v));
        return buf;
    case K_RECSIZE:
        snprintf(buf, len, "%llu", (unsigned long long)ds_recordsize_parse(json_string_value(v)));
        return buf;
    case K_NULLSIZE:
        if (json_is_null(v) || json_integer_value(v) == 0)
            return NULL;
        /* fall through */
    case K_INT:
    case K_PERCENT:
    case K_SSB:
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return buf;
    }
    return NULL;
}

/* The ancestors of name, nearest first ("p/a/b" → "p/a", "p"). */
static size_t ancestors(const char *name, char out[][DS_NAME_BUF], size_t max)
{
    char buf[DS_NAME_BUF];
    size_t n = 0;
    char *slash;

    snprintf(buf, sizeof(buf), "%s", name);
    while (n < max && (slash = strrchr(buf, '/'))) {
        *slash = '\0';
        snprintf(out[n++], DS_NAME_BUF, "%s", buf);
    }
    return n;
}

/*
 * The nearest local value among names[0..n) (nearest first) of each table
 * property, into an object ZFS name → [raw, dataset name] (new reference).
 */
/* ds_dataset_zfs_props_of's callback: keep the nearest local value of
 * an inheritable property. */
static void inherited_add(const char *ds, const char *prop, const char *value, void *arg)
{
    json_t *out = arg, *have = json_object_get(out, prop);
    const struct propdef *p = by_zfs(prop);

    if (!p || !p->inheritable)
        return;
    /* ancestors are prefixes of each other: the longest is nearest */
    if (have && strlen(json_string_value(json_array_get(have, 1))) >= strlen(ds))
        return;
    json_object_set_new(out, prop, json_pack("[ss]", value, ds));
}

static json_t *inherited(char names[][DS_NAME_BUF], size_t n)
{
    json_t *out = json_object();

    if (out)
        (void)ds_dataset_zfs_props_of(names, n, inherited_add, out);
    return out;
}

/* Between ds_props_batch_begin/end (one row-building pass, DB locked):
 * the inherited values of the last parent, since siblings come in a row. */
static __thread bool batch;
static __thread json_t *batch_inh;
static __thread char batch_parent[DS_NAME_BUF];

void ds_props_batch_begin(void)
{
    batch = true;
    batch_parent[0] = '\0';
}

void ds_props_batch_end(void)
{
    batch = false;
    json_decref(batch_inh);
    batch_inh = NULL;
}

/* What name inherits (new reference): an object ZFS name → [raw, from]. */
static json_t *inherited_for(const char *name)
{
    size_t max = depth(name);
    const char *slash = strrchr(name, '/');
    char(*anc)[DS_NAME_BUF];
    size_t n;
    json_t *inh;

    if (batch && slash && batch_inh && strlen(batch_parent) == (size_t)(slash - name) &&
        strncmp(batch_parent, name, (size_t)(slash - name)) == 0)
        return json_incref(batch_inh);
    anc = max ? malloc(max * sizeof(*anc)) : NULL;
    n = anc ? ancestors(name, anc, max) : 0;
    inh = inherited(anc, n);
    free(anc);
    if (batch && slash && inh) {
        json_decref(batch_inh);
        batch_inh = json_incref(inh);
        snprintf(batch_parent, sizeof(batch_parent), "%.*s", (int)(slash - name), name);
    }
    return inh;
}

void ds_props_emit(json_t *row, const char *name, enum ds_type type, json_t *local)
{
    json_t *inh = inherited_for(name);

    for (size_t i = 0; i < NPROPS; i++) {
        const struct propdef *p = &props[i];
        json_t *lv = json_object_get(local, p->zfs), *iv = json_object_get(inh, p->zfs);

        if (!(p->types & (1u << type)))
            continue;
        if (p->column) {
            json_t *shown = json_object_get(row, p->api);
            if (shown)
                json_object_set_new(shown, "source",
                                    json_string(json_is_string(lv) ? "LOCAL"
                                                : iv               ? "INHERITED"
                                                                   : "DEFAULT"));
            continue;
        }
        if (json_is_string(lv))
            json_object_set_new(row, p->api, render(p, json_string_value(lv), "LOCAL"));
        else if (strcmp(p->zfs, "refreservation") == 0 && type == DS_VOLUME)
            continue; /* dsrows.c derives it from sparse */
        else if (iv)
            json_object_set_new(row, p->api,
                                render(p, json_string_value(json_array_get(iv, 0)), "INHERITED"));
        else
            json_object_set_new(row, p->api, render(p, p->def, "DEFAULT"));
    }
    json_decref(inh);
}

/* The value an inheritable property has on a dataset (or, with
 * from_parent, on its parent): the nearest local value up the tree, else
 * the default. DB locked. */
static void effective(const char *name, bool from_parent, const struct propdef *p, char *buf,
                      size_t len)
{
    size_t max = depth(name);
    char(*chain)[DS_NAME_BUF] = malloc((max + 1) * sizeof(*chain));
    size_t n = 0;
    json_t *inh, *iv;

    if (!chain) {
        snprintf(buf, len, "%s", p->def);
        return;
    }
    if (!from_parent)
        snprintf(chain[n++], DS_NAME_BUF, "%s", name);
    n += ancestors(name, chain + n, max);
    inh = inherited(chain, n);
    free(chain);
    iv = json_object_get(inh, p->zfs);
    snprintf(buf, len, "%s", iv ? json_string_value(json_array_get(iv, 0)) : p->def);
    json_decref(inh);
}

static void field_name(char *buf, size_t len, const char *method, const char *key)
{
    snprintf(buf, len, "%s.%s", method, key);
}

/* int (within [min, max]) or "INHERIT" where inheritable. */
static void check_int(struct api_call *call, const char *field, json_t *v, const struct propdef *p,
                      json_int_t min, json_int_t max, const char *range)
{
    if (json_is_string(v) && strcmp(json_string_value(v), "INHERIT") == 0)
        return;
    if (!json_is_integer(v)) {
        api_verr(call, field, EINVAL, "Input should be a valid integer or 'INHERIT'");
        return;
    }
    if (json_integer_value(v) < min || json_integer_value(v) > max)
        api_verr(call, field, EINVAL, "%s", range);
    (void)p;
}

/* TrueNAS' share_type presets (pool.dataset.create). */
static void share_presets(json_t *data)
{
    const char *st = json_string_value(json_object_get(data, "share_type"));

    if (!st || strcmp(st, "GENERIC") == 0)
        return;
    if (strcmp(st, "SMB") == 0) {
        json_object_set_new(data, "casesensitivity", json_string("INSENSITIVE"));
        json_object_set_new(data, "acltype", json_string("NFSV4"));
        json_object_set_new(data, "aclmode", json_string("RESTRICTED"));
    } else {
        json_object_set_new(data, "casesensitivity", json_string("SENSITIVE"));
        json_object_set_new(data, "atime", json_string("OFF"));
        json_object_set_new(data, "acltype", json_string("NFSV4"));
        json_object_set_new(data, "aclmode", json_string("PASSTHROUGH"));
    }
}

/* acltype / aclmode pairs TrueNAS refuses (its __common_validation). */
static void check_acl(struct api_call *call, const char *method, json_t *data, const char *name,
                      bool update)
{
    static const char *const keys[2] = {"acltype", "aclmode"};
    char val[2][32], field[128];

    if (!json_object_get(data, "acltype") && !json_object_get(data, "aclmode") &&
        !json_object_get(data, "share_type"))
        return; /* nothing changes; existing combinations stay as they are */
    for (int k = 0; k < 2; k++) {
        const char *v = json_string_value(json_object_get(data, keys[k]));
        const struct propdef *p = by_zfs(keys[k]);

        if (v && strcmp(v, "INHERIT") != 0)
            lower(val[k], sizeof(val[k]), v);
        else
            effective(name, !update || v, p, val[k], sizeof(val[k]));
    }
    field_name(field, sizeof(field), method, "aclmode");
    if ((strcmp(val[0], "posix") == 0 || strcmp(val[0], "off") == 0) &&
        strcmp(val[1], "discard") != 0)
        api_verr(call, field, EINVAL, "Must be set to DISCARD when acltype is POSIX or OFF");
    else if (strcmp(val[0], "nfsv4") == 0 && strcmp(val[1], "discard") == 0)
        api_verr(call, field, EINVAL, "DISCARD aclmode may not be set for NFSv4 acl type");
}

/* Create only: share_type presets (not for a volume), no child under a
 * read-only parent (TrueNAS), no encryption (blockd does not encrypt). */
static void check_create_only(struct api_call *call, const char *method, json_t *data,
                              enum ds_type type, const char *name)
{
    json_t *v = json_object_get(data, "share_type");
    char field[128], parent[DS_NAME_BUF], *slash;
    enum volume_sync ps;
    bool pro;

    if (type == DS_VOLUME && v && strcmp(json_string_value(v), "GENERIC") != 0) {
        field_name(field, sizeof(field), method, "share_type");
        api_verr(call, field, EINVAL, "This field is not valid for VOLUME");
    } else {
        share_presets(data);
    }
    ds_props_parent_effective(name, &ps, &pro);
    snprintf(parent, sizeof(parent), "%s", name);
    slash = strrchr(parent, '/');
    if (slash)
        *slash = '\0';
    if (pro) {
        field_name(field, sizeof(field), method, "readonly");
        api_verr(call, field, EROFS, "Turn off readonly mode on %s to create %s", parent, name);
    }
    if (json_is_true(json_object_get(data, "encryption"))) {
        field_name(field, sizeof(field), method, "encryption");
        api_verr(call, field, ENOTSUP, "blockd does not encrypt datasets (use encryption: false)");
    }
}

/* The value of property p (given as v) by its kind's rules; the schema
 * checked enums and booleans already. */
static void check_prop_value(struct api_call *call, const char *field, json_t *v,
                             const struct propdef *p)
{
    const char *s = json_string_value(v);

    switch (p->kind) {
    case K_NULLSIZE:
        if ((strcmp(p->zfs, "quota") == 0 || strcmp(p->zfs, "refquota") == 0) &&
            json_is_integer(v) && json_integer_value(v) != 0 && json_integer_value(v) < QUOTA_MIN)
            api_verr(call, field, EINVAL,
                     "Input should be greater than or equal to 1073741824 (1 GiB), 0 or null");
        break;
    case K_RECSIZE:
        if (strcmp(s, "INHERIT") != 0 && !ds_recordsize_parse(s))
            api_verr(call, field, EINVAL, "'%s' is an invalid recordsize.", s);
        break;
    case K_INT:
        check_int(call, field, v, p, 1, 3, "copies must be 1, 2 or 3");
        break;
    case K_PERCENT:
        check_int(call, field, v, p, 0, 100, "Input should be between 0 and 100");
        break;
    case K_SSB:
        check_int(call, field, v, p, 0, SSB_MAX, "This field must be from zero to 16M");
        break;
    case K_ENUM:
    case K_BOOL:
        break; /* the schema checked the value */
    }
}

/* Property p given as v: valid for this type, settable now (create-only
 * ones not on update), "INHERIT" only where it inherits, then its value. */
static void check_prop(struct api_call *call, const char *method, json_t *v,
                       const struct propdef *p, enum ds_type type, bool update)
{
    const char *s = json_string_value(v);
    char field[128];

    field_name(field, sizeof(field), method, p->api);
    if (!(p->types & (1u << type))) {
        api_verr(call, field, EINVAL, "This field is not valid for %s",
                 type == DS_VOLUME ? "VOLUME" : "FILESYSTEM");
        return;
    }
    if (update && p->create_only) {
        api_verr(call, field, EINVAL, "Extra inputs are not permitted");
        return;
    }
    if (s && strcmp(s, "INHERIT") == 0 && !p->inheritable && !p->create_only) {
        api_verr(call, field, EINVAL, "%s is not inherited; give a value", p->api);
        return;
    }
    check_prop_value(call, field, v, p);
}

int ds_props_check(struct api_call *call, const char *method, json_t *data, enum ds_type type,
                   const char *name, bool update)
{
    if (!update)
        check_create_only(call, method, data, type, name);
    for (size_t i = 0; i < NPROPS; i++) {
        json_t *v = json_object_get(data, props[i].api);
        if (v)
            check_prop(call, method, v, &props[i], type, update);
    }
    if (type == DS_FILESYSTEM)
        check_acl(call, method, data, name, update);
    return api_has_verrs(call) ? -EINVAL : 0;
}

int ds_props_apply(int64_t id, json_t *data, enum ds_type type, bool update)
{
    char buf[64];
    int rc;

    for (size_t i = 0; i < NPROPS; i++) {
        const struct propdef *p = &props[i];
        json_t *v = json_object_get(data, p->api);

        if (!(p->types & (1u << type)))
            continue;
        if (!v) {
            /* TrueNAS creates every filesystem with xattr=sa (speed) */
            if (!update && strcmp(p->zfs, "xattr") == 0 && (rc = ds_prop_set(id, p->zfs, "sa")) < 0)
                return rc;
            continue;
        }
        rc = ds_prop_set(id, p->zfs, raw_of(p, v, buf, sizeof(buf)));
        if (rc < 0)
            return rc;
    }
    return 0;
}

void ds_props_select(json_t *row, json_t *names)
{
    const char *key;
    json_t *v, *n;
    void *tmp;
    size_t i;

    json_object_foreach_safe(row, tmp, key, v)
    {
        bool keep = false;

        if (!json_is_object(v) || !json_object_get(v, "rawvalue"))
            continue; /* not a property object: id, name, children, … */
        json_array_foreach(names, i, n)
        {
            const char *s = json_string_value(n);
            const struct propdef *p = s ? by_name(s) : NULL;

            if (s && (strcmp(s, key) == 0 || (p && strcmp(p->api, key) == 0))) {
                keep = true;
                break;
            }
        }
        if (!keep)
            json_object_del(row, key);
    }
}

void ds_props_parent_effective(const char *name, enum volume_sync *sync, bool *readonly)
{
    char anc[DS_NAME_BUF];
    struct ds_row row;
    char *slash;

    *sync = VOLUME_SYNC_STANDARD;
    *readonly = false;
    snprintf(anc, sizeof(anc), "%s", name);
    while ((slash = strrchr(anc, '/'))) {
        *slash = '\0';
        if (ds_dataset_get(anc, &row) == 0) {
            *sync = row.sync;
            *readonly = row.readonly;
            return;
        }
    }
}

/* One dataset of a subtree being recomputed. */
struct eff_row {
    int64_t id;
    char name[DS_NAME_BUF];
    bool volume;
    enum volume_sync sync, old_sync;
    bool readonly, old_readonly;
    int local_sync; /* -1 unset, else enum volume_sync */
    int local_ro;   /* -1 unset, 0, 1 */
};

/* The rows being collected. */
struct eff_list {
    struct eff_row *v;
    size_t n, cap;
};

/* ds_dataset_each_local_sync's callback: keep r with its local values.
 * 0 or -ENOMEM. */
static int eff_add(const struct ds_row *r, const char *ls, const char *lr, void *arg)
{
    struct eff_list *l = arg;
    struct eff_row *e;
    char up[16];

    if (l->n == l->cap) {
        struct eff_row *grown = realloc(l->v, (l->cap ? l->cap * 2 : 8) * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        l->v = grown;
        l->cap = l->cap ? l->cap * 2 : 8;
    }
    e = &l->v[l->n++];
    memset(e, 0, sizeof(*e));
    e->id = r->id;
    snprintf(e->name, sizeof(e->name), "%s", r->name);
    e->volume = r->type == DS_VOLUME;
    e->old_sync = r->sync;
    e->old_readonly = r->readonly;
    e->local_sync = -1;
    if (ls) {
        enum volume_sync v;
        upper(up, sizeof(up), ls);
        if (volume_sync_parse(up, &v) == 0)
            e->local_sync = (int)v;
    }
    e->local_ro = lr ? strcmp(lr, "on") == 0 : -1;
    return 0;
}

static int eff_collect(const char *name, struct eff_row **out, size_t *n)
{
    struct eff_list l = {0};
    int rc = ds_dataset_each_local_sync(name, eff_add, &l);

    if (rc < 0) {
        free(l.v);
        l.v = NULL;
        l.n = 0;
    }
    *out = l.v;
    *n = l.n;
    return rc;
}

int ds_props_recompute(const char *name, struct ds_eff_change **changes, size_t *nchanges)
{
    struct eff_row *rows;
    size_t n, depth = 0, *stack;
    enum volume_sync psync;
    bool pro;
    int rc;

    *changes = NULL;
    *nchanges = 0;
    ds_props_parent_effective(name, &psync, &pro);
    rc = eff_collect(name, &rows, &n);
    if (rc < 0)
        return rc;
    stack = calloc(n ? n : 1, sizeof(*stack));
    *changes = calloc(n ? n : 1, sizeof(**changes));
    if (!stack || !*changes) {
        free(stack);
        free(rows);
        free(*changes);
        *changes = NULL;
        return -ENOMEM;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct eff_row *e = &rows[i];
        enum volume_sync s = psync;
        bool ro = pro;

        /* the nearest ancestor in the subtree: pop until one is a prefix */
        while (depth > 0) {
            const char *a = rows[stack[depth - 1]].name;
            size_t al = strlen(a);
            if (strncmp(e->name, a, al) == 0 && e->name[al] == '/')
                break;
            depth--;
        }
        if (depth > 0) {
            s = rows[stack[depth - 1]].sync;
            ro = rows[stack[depth - 1]].readonly;
        }
        e->sync = e->local_sync >= 0 ? (enum volume_sync)e->local_sync : s;
        e->readonly = e->local_ro >= 0 ? e->local_ro == 1 : ro;
        stack[depth++] = i;
        if (e->sync == e->old_sync && e->readonly == e->old_readonly)
            continue;
        rc = ds_dataset_set_effective(e->id, e->sync, e->readonly);
        if (rc == 0 && e->volume) {
            struct ds_eff_change *c = &(*changes)[(*nchanges)++];
            snprintf(c->name, sizeof(c->name), "%s", e->name);
            c->sync = e->sync;
            c->readonly = e->readonly;
            c->sync_changed = e->sync != e->old_sync;
            c->readonly_changed = e->readonly != e->old_readonly;
        }
    }
    free(stack);
    free(rows);
    if (rc < 0) {
        free(*changes);
        *changes = NULL;
        *nchanges = 0;
    }
    return rc;
}
