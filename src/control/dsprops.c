/* The ZFS properties blockd keeps for TrueNAS clients (see dsprops.h). */
#include "control/dsprops.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "core/log.h"

#define T_FS (1u << DS_FILESYSTEM)
#define T_VOL (1u << DS_VOLUME)

const char *const ds_choices_onoff_inherit[] = {"ON", "OFF", "INHERIT", NULL};
const char *const ds_choices_sync_inherit[] = {"STANDARD", "ALWAYS", "DISABLED", "INHERIT", NULL};
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
_Static_assert(NPROPS == DS_PROPS_COUNT, "dsprops.h: DS_PROPS_COUNT is the table's size");

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

/* ---- what a dataset inherits ---- */

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

/* An inheritable property's nearest local value up the tree. The dataset
 * it comes from is a prefix of the name asked about, so its length names
 * it (and says which of two is nearer); 0: no local value up the tree. */
struct inh_value {
    char raw[64]; /* raw values are short: lower-case enums, integers */
    size_t from_len;
};

/* What a dataset inherits, by the table's index (a C array rather than a
 * map: the table is fixed and small). */
struct inherited {
    struct inh_value v[NPROPS];
};

/* ds_dataset_zfs_props_of's callback: keep the nearest local value of
 * an inheritable property. */
static void inherited_add(const char *ds, const char *prop, const char *value, void *arg)
{
    struct inherited *out = arg;
    const struct propdef *p = by_zfs(prop);
    struct inh_value *have;

    if (!p || !p->inheritable)
        return;
    have = &out->v[p - props];
    /* ancestors are prefixes of each other: the longest is nearest */
    if (have->from_len >= strlen(ds))
        return;
    snprintf(have->raw, sizeof(have->raw), "%s", value);
    have->from_len = strlen(ds);
}

/* The nearest local value among names[0..n) of each inheritable property
 * into out. DB locked. */
static void inherited(char names[][DS_NAME_BUF], size_t n, struct inherited *out)
{
    memset(out, 0, sizeof(*out));
    (void)ds_dataset_zfs_props_of(names, n, inherited_add, out);
}

/* Between ds_props_batch_begin/end (one row-building pass, DB locked):
 * the inherited values of the last parent, since siblings come in a row.
 * batch_inh is allocated by the pass's first lookup. */
static __thread bool batch;
static __thread struct inherited *batch_inh;
static __thread char batch_parent[DS_NAME_BUF];

void ds_props_batch_begin(void)
{
    batch = true;
    batch_parent[0] = '\0';
}

void ds_props_batch_end(void)
{
    batch = false;
    free(batch_inh);
    batch_inh = NULL;
}

/* What name inherits into out. */
static void inherited_for(const char *name, struct inherited *out)
{
    size_t max = depth(name);
    const char *slash = strrchr(name, '/');
    size_t plen = slash ? (size_t)(slash - name) : 0;
    char(*anc)[DS_NAME_BUF];

    if (batch && slash && batch_inh && strlen(batch_parent) == plen &&
        strncmp(batch_parent, name, plen) == 0) {
        *out = *batch_inh;
        return;
    }
    anc = max ? malloc(max * sizeof(*anc)) : NULL;
    inherited(anc, anc ? ancestors(name, anc, max) : 0, out);
    free(anc);
    if (batch && slash && (batch_inh || (batch_inh = malloc(sizeof(*batch_inh))))) {
        *batch_inh = *out;
        snprintf(batch_parent, sizeof(batch_parent), "%.*s", (int)plen, name);
    }
}

void ds_props_local_add(struct ds_props_local *local, const char *zfs_name, const char *raw)
{
    const struct propdef *p = by_zfs(zfs_name);

    if (!p || !raw)
        return;
    local->set[p - props] = true;
    snprintf(local->raw[p - props], sizeof(local->raw[0]), "%s", raw);
}

void ds_props_emit(json_t *row, const char *name, enum ds_type type,
                   const struct ds_props_local *local)
{
    struct inherited inh;

    inherited_for(name, &inh);
    for (size_t i = 0; i < NPROPS; i++) {
        const struct propdef *p = &props[i];
        const struct inh_value *iv = &inh.v[i];
        const char *lv = local->set[i] ? local->raw[i] : NULL;

        if (!(p->types & (1u << type)))
            continue;
        if (p->column) {
            json_t *shown = json_object_get(row, p->api);
            if (shown)
                json_object_set_new(shown, "source",
                                    json_string(lv             ? "LOCAL"
                                                : iv->from_len ? "INHERITED"
                                                               : "DEFAULT"));
            continue;
        }
        if (lv)
            json_object_set_new(row, p->api, render(p, lv, "LOCAL"));
        else if (strcmp(p->zfs, "refreservation") == 0 && type == DS_VOLUME)
            continue; /* dsrows.c derives it from sparse */
        else if (iv->from_len)
            json_object_set_new(row, p->api, render(p, iv->raw, "INHERITED"));
        else
            json_object_set_new(row, p->api, render(p, p->def, "DEFAULT"));
    }
}

/* The value an inheritable property has on a dataset (or, with
 * from_parent, on its parent): the nearest local value up the tree, else
 * the default. DB locked. */
static void effective(const char *name, bool from_parent, const struct propdef *p, char *buf,
                      size_t len)
{
    size_t max = depth(name);
    char(*chain)[DS_NAME_BUF] = malloc((max + 1) * sizeof(*chain));
    struct inherited inh;
    const struct inh_value *iv = &inh.v[p - props];
    size_t n = 0;

    if (!chain) {
        snprintf(buf, len, "%s", p->def);
        return;
    }
    if (!from_parent)
        snprintf(chain[n++], DS_NAME_BUF, "%s", name);
    n += ancestors(name, chain + n, max);
    inherited(chain, n, &inh);
    free(chain);
    snprintf(buf, len, "%s", iv->from_len ? iv->raw : p->def);
}

/* ---- the decoder: request object → struct ds_propset ---- */

/* One property's value v (checked against the schema) into its slot, as
 * the raw string ZFS would store. 0 or -ENOMEM. */
static int decode_value(const struct propdef *p, json_t *v, struct ds_propval *out)
{
    const char *s = json_string_value(v);

    out->given = DS_PROP_SET;
    if (s && strcmp(s, "INHERIT") == 0) {
        out->given = DS_PROP_INHERIT;
        return 0;
    }
    switch (p->kind) {
    case K_ENUM:
    case K_BOOL:
        lower(out->raw, sizeof(out->raw), s ? s : "");
        break;
    case K_RECSIZE:
        if (!s || !ds_recordsize_parse(s)) {
            out->given = DS_PROP_BAD_SIZE;
            out->bad = strdup(s ? s : "");
            return out->bad ? 0 : -ENOMEM;
        }
        snprintf(out->raw, sizeof(out->raw), "%" PRIu64, ds_recordsize_parse(s));
        break;
    case K_NULLSIZE:
        if (json_is_null(v) || json_integer_value(v) == 0) {
            out->given = DS_PROP_NONE; /* "none": as no local value */
            break;
        }
        /* fall through */
    case K_INT:
    case K_PERCENT:
    case K_SSB:
        if (!json_is_integer(v)) {
            out->given = DS_PROP_NOT_INT;
            break;
        }
        out->num = json_integer_value(v);
        snprintf(out->raw, sizeof(out->raw), "%" PRId64, out->num);
        break;
    }
    return 0;
}

/* TrueNAS' share_type presets (pool.dataset.create), as data: the raw
 * value each preset gives for SMB and for the other share types (NULL:
 * left as the request gave it). They override what the request gave. */
static void share_presets(struct ds_propset *set, const char *share_type)
{
    static const struct {
        const char *zfs, *smb, *other;
    } presets[] = {
        {"casesensitivity", "insensitive", "sensitive"},
        {"atime", NULL, "off"},
        {"acltype", "nfsv4", "nfsv4"},
        {"aclmode", "restricted", "passthrough"},
    };
    bool smb = strcmp(share_type, "SMB") == 0;

    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
        const char *raw = smb ? presets[i].smb : presets[i].other;
        struct ds_propval *v = &set->v[by_zfs(presets[i].zfs) - props];

        if (!raw)
            continue;
        v->given = DS_PROP_SET;
        snprintf(v->raw, sizeof(v->raw), "%s", raw);
    }
}

int ds_propset_decode(json_t *data, bool create, enum ds_type type, struct ds_propset *set)
{
    const char *st = json_string_value(json_object_get(data, "share_type"));
    int rc = 0;

    memset(set, 0, sizeof(*set));
    for (size_t i = 0; rc == 0 && i < NPROPS; i++) {
        json_t *v = json_object_get(data, props[i].api);
        if (v)
            rc = decode_value(&props[i], v, &set->v[i]);
    }
    if (rc < 0) {
        ds_propset_free(set);
        return rc;
    }
    if (st)
        snprintf(set->share_type, sizeof(set->share_type), "%s", st);
    set->encryption = json_is_true(json_object_get(data, "encryption"));
    /* a volume refuses a share_type (check_create_only): no presets */
    if (create && type != DS_VOLUME && st && strcmp(st, "GENERIC") != 0)
        share_presets(set, st);
    return 0;
}

void ds_propset_free(struct ds_propset *set)
{
    for (size_t i = 0; i < NPROPS; i++) {
        free(set->v[i].bad);
        set->v[i].bad = NULL;
    }
}

enum ds_prop_given ds_propset_given(const struct ds_propset *set, const char *api)
{
    for (size_t i = 0; i < NPROPS; i++)
        if (strcmp(props[i].api, api) == 0)
            return set->v[i].given;
    return DS_PROP_ABSENT;
}

/* ---- checks of the decoded set (the API's field errors) ---- */

static void field_name(char *buf, size_t len, const char *method, const char *key)
{
    snprintf(buf, len, "%s.%s", method, key);
}

/* int (within [min, max]) or "INHERIT" where inheritable. */
static void check_int(struct api_call *call, const char *field, const struct ds_propval *v,
                      int64_t min, int64_t max, const char *range)
{
    if (v->given == DS_PROP_INHERIT)
        return;
    if (v->given == DS_PROP_NOT_INT) {
        api_verr(call, field, EINVAL, "Input should be a valid integer or 'INHERIT'");
        return;
    }
    if (v->num < min || v->num > max)
        api_verr(call, field, EINVAL, "%s", range);
}

/* acltype / aclmode pairs TrueNAS refuses (its __common_validation). */
static void check_acl(struct api_call *call, const char *method, const struct ds_propset *set,
                      const char *name, bool update)
{
    static const char *const keys[2] = {"acltype", "aclmode"};
    char val[2][32], field[128];

    if (!ds_propset_given(set, "acltype") && !ds_propset_given(set, "aclmode") &&
        !set->share_type[0])
        return; /* nothing changes; existing combinations stay as they are */
    for (int k = 0; k < 2; k++) {
        const struct propdef *p = by_zfs(keys[k]);
        const struct ds_propval *v = &set->v[p - props];

        if (v->given == DS_PROP_SET)
            snprintf(val[k], sizeof(val[k]), "%s", v->raw);
        else
            effective(name, !update || v->given != DS_PROP_ABSENT, p, val[k], sizeof(val[k]));
    }
    field_name(field, sizeof(field), method, "aclmode");
    if ((strcmp(val[0], "posix") == 0 || strcmp(val[0], "off") == 0) &&
        strcmp(val[1], "discard") != 0)
        api_verr(call, field, EINVAL, "Must be set to DISCARD when acltype is POSIX or OFF");
    else if (strcmp(val[0], "nfsv4") == 0 && strcmp(val[1], "discard") == 0)
        api_verr(call, field, EINVAL, "DISCARD aclmode may not be set for NFSv4 acl type");
}

/* Create only: no share_type for a volume (the decoder applied the
 * presets otherwise), no child under a read-only parent (TrueNAS), no
 * encryption (blockd does not encrypt). */
static void check_create_only(struct api_call *call, const char *method,
                              const struct ds_propset *set, enum ds_type type, const char *name)
{
    char field[128], parent[DS_NAME_BUF], *slash;
    enum volume_sync ps;
    bool pro;

    if (type == DS_VOLUME && set->share_type[0] && strcmp(set->share_type, "GENERIC") != 0) {
        field_name(field, sizeof(field), method, "share_type");
        api_verr(call, field, EINVAL, "This field is not valid for VOLUME");
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
    if (set->encryption) {
        field_name(field, sizeof(field), method, "encryption");
        api_verr(call, field, ENOTSUP, "blockd does not encrypt datasets (use encryption: false)");
    }
}

/* The value of property p (given as v) by its kind's rules; the schema
 * checked enums and booleans already. */
static void check_prop_value(struct api_call *call, const char *field, const struct ds_propval *v,
                             const struct propdef *p)
{
    switch (p->kind) {
    case K_NULLSIZE:
        /* DS_PROP_SET: an integer other than 0 */
        if ((strcmp(p->zfs, "quota") == 0 || strcmp(p->zfs, "refquota") == 0) &&
            v->given == DS_PROP_SET && v->num < QUOTA_MIN)
            api_verr(call, field, EINVAL,
                     "Input should be greater than or equal to 1073741824 (1 GiB), 0 or null");
        break;
    case K_RECSIZE:
        if (v->given == DS_PROP_BAD_SIZE)
            api_verr(call, field, EINVAL, "'%s' is an invalid recordsize.", v->bad);
        break;
    case K_INT:
        check_int(call, field, v, 1, 3, "copies must be 1, 2 or 3");
        break;
    case K_PERCENT:
        check_int(call, field, v, 0, 100, "Input should be between 0 and 100");
        break;
    case K_SSB:
        check_int(call, field, v, 0, SSB_MAX, "This field must be from zero to 16M");
        break;
    case K_ENUM:
    case K_BOOL:
        break; /* the schema checked the value */
    }
}

/* Property p given as v: valid for this type, settable now (create-only
 * ones not on update), "INHERIT" only where it inherits, then its value. */
static void check_prop(struct api_call *call, const char *method, const struct ds_propval *v,
                       const struct propdef *p, enum ds_type type, bool update)
{
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
    if (v->given == DS_PROP_INHERIT && !p->inheritable && !p->create_only) {
        api_verr(call, field, EINVAL, "%s is not inherited; give a value", p->api);
        return;
    }
    check_prop_value(call, field, v, p);
}

int ds_props_check(struct api_call *call, const char *method, const struct ds_propset *set,
                   enum ds_type type, const char *name, bool update)
{
    if (!update)
        check_create_only(call, method, set, type, name);
    for (size_t i = 0; i < NPROPS; i++)
        if (set->v[i].given != DS_PROP_ABSENT)
            check_prop(call, method, &set->v[i], &props[i], type, update);
    if (type == DS_FILESYSTEM)
        check_acl(call, method, set, name, update);
    return api_has_verrs(call) ? -EINVAL : 0;
}

int ds_props_apply(int64_t id, const struct ds_propset *set, enum ds_type type, bool update)
{
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < NPROPS; i++) {
        const struct propdef *p = &props[i];
        const struct ds_propval *v = &set->v[i];

        if (!(p->types & (1u << type)))
            continue;
        switch (v->given) {
        case DS_PROP_ABSENT:
            /* TrueNAS creates every filesystem with xattr=sa (speed) */
            if (!update && strcmp(p->zfs, "xattr") == 0)
                rc = ds_prop_set(id, p->zfs, "sa");
            break;
        case DS_PROP_SET:
            rc = ds_prop_set(id, p->zfs, v->raw);
            break;
        case DS_PROP_INHERIT:
        case DS_PROP_NONE:
            rc = ds_prop_set(id, p->zfs, NULL); /* the local value goes */
            break;
        case DS_PROP_NOT_INT:
        case DS_PROP_BAD_SIZE:
            rc = -EINVAL; /* ds_props_check refuses them */
            break;
        }
    }
    return rc;
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
