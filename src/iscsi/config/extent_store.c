/* The stored iSCSI extents (extent_store.h). */
#include "iscsi/config/extent_store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "control/db.h"
#include "iscsi/config/config_internal.h"

const char *const icfg_extent_type_names[] = {"DISK", "FILE", NULL};

#define EXTENT_SELECT                                                                              \
    "SELECT id, name, type, disk, path, filesize, serial, blocksize, pblocksize, "                 \
    "avail_threshold, comment, naa, insecure_tpc, xen, rpm, ro, enabled, vendor, gen "             \
    "FROM iscsi_extent"

void icfg_extent_clear(struct icfg_extent *e)
{
    free(e->name);
    free(e->disk);
    free(e->path);
    free(e->serial);
    free(e->comment);
    free(e->naa);
    free(e->rpm);
    free(e->vendor);
    memset(e, 0, sizeof(*e));
}

/* The row at st (EXTENT_SELECT's columns). 0 or -ENOMEM. */
static int extent_decode_row(sqlite3_stmt *st, void *elem)
{
    struct icfg_extent *e = elem;
    e->id = sqlite3_column_int64(st, 0);
    e->name = icfg_col_dup(st, 1, false);
    e->type = (enum icfg_extent_type)icfg_name_index(
        icfg_extent_type_names, (const char *)sqlite3_column_text(st, 2), ICFG_EXTENT_DISK);
    e->disk = icfg_col_dup(st, 3, true);
    e->path = icfg_col_dup(st, 4, true);
    e->filesize = sqlite3_column_int64(st, 5);
    e->serial = icfg_col_dup(st, 6, false);
    e->blocksize = sqlite3_column_int64(st, 7);
    e->pblocksize = sqlite3_column_int(st, 8) != 0;
    e->has_avail_threshold = sqlite3_column_type(st, 9) != SQLITE_NULL;
    e->avail_threshold = sqlite3_column_int64(st, 9);
    e->comment = icfg_col_dup(st, 10, false);
    e->naa = icfg_col_dup(st, 11, false);
    e->insecure_tpc = sqlite3_column_int(st, 12) != 0;
    e->xen = sqlite3_column_int(st, 13) != 0;
    e->rpm = icfg_col_dup(st, 14, false);
    e->ro = sqlite3_column_int(st, 15) != 0;
    e->enabled = sqlite3_column_int(st, 16) != 0;
    e->vendor = icfg_col_dup(st, 17, false);
    e->gen = sqlite3_column_int64(st, 18);
    bool ok = e->name && e->serial && e->comment && e->naa && e->rpm && e->vendor &&
              (e->disk || sqlite3_column_type(st, 3) == SQLITE_NULL) &&
              (e->path || sqlite3_column_type(st, 4) == SQLITE_NULL);
    return ok ? 0 : -ENOMEM;
}

static void extent_clear_elem(void *elem)
{
    icfg_extent_clear(elem);
}

const struct icfg_table icfg_extent_table = {
    EXTENT_SELECT, "ORDER BY id", sizeof(struct icfg_extent), extent_decode_row, extent_clear_elem};

int icfg_extent_exists(int64_t id)
{
    int64_t found;
    return icfg_int(&found, "SELECT id FROM iscsi_extent WHERE id = ?", "i", id);
}

int icfg_extent_get(int64_t id, struct icfg_extent *out)
{
    return icfg_table_get(&icfg_extent_table, id, out);
}

static void random_hex(char *out, size_t digits)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t raw[32];
    size_t need = (digits + 1) / 2;
    if (getrandom(raw, need, 0) != (ssize_t)need) {
        /* getrandom cannot fail for ≤256 bytes once the pool is ready;
         * fall back to something unique-ish rather than abort. */
        for (size_t i = 0; i < need; i++)
            raw[i] = (uint8_t)(rand() ^ (int)getpid());
    }
    for (size_t i = 0; i < digits; i++)
        out[i] = hex[(raw[i / 2] >> ((i & 1) ? 0 : 4)) & 0xf];
    out[digits] = '\0';
}

/* A serial for e if it has none: 15 random hex digits no extent uses. */
static int serial_assign(struct icfg_extent *e)
{
    char serial[24];
    int64_t dup;
    if (e->serial && *e->serial)
        return 0;
    do
        random_hex(serial, 15);
    while (icfg_int(&dup, "SELECT id FROM iscsi_extent WHERE serial = ?", "t", serial) == 0);
    return icfg_str_set(&e->serial, serial);
}

/* Bind e's columns 1..15 (name ... enabled) of an INSERT or UPDATE. */
static void extent_bind(sqlite3_stmt *st, const struct icfg_extent *e)
{
    sqlite3_bind_text(st, 1, e->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, icfg_extent_type_names[e->type], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, e->disk, -1, SQLITE_STATIC); /* NULL: SQL NULL */
    sqlite3_bind_text(st, 4, e->path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, e->filesize);
    sqlite3_bind_text(st, 6, e->serial, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, e->blocksize);
    sqlite3_bind_int(st, 8, e->pblocksize);
    if (e->has_avail_threshold)
        sqlite3_bind_int64(st, 9, e->avail_threshold);
    else
        sqlite3_bind_null(st, 9);
    sqlite3_bind_text(st, 10, e->comment ? e->comment : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 11, e->insecure_tpc);
    sqlite3_bind_int(st, 12, e->xen);
    sqlite3_bind_text(st, 13, e->rpm ? e->rpm : "SSD", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 14, e->ro);
    sqlite3_bind_int(st, 15, e->enabled);
}

/* Run sql with e's columns and, at 16 and 17, two integers (a, b; b
 * unused when the statement has 16 parameters) or the NAA text at 16. */
static int extent_write(const char *sql, const struct icfg_extent *e, const char *naa, int64_t a,
                        int64_t b)
{
    sqlite3_stmt *st;
    int rc = icfg_prepare(sql, &st);
    if (rc < 0)
        return rc;
    extent_bind(st, e);
    if (naa) {
        sqlite3_bind_text(st, 16, naa, -1, SQLITE_STATIC);
    } else {
        sqlite3_bind_int64(st, 16, a);
        sqlite3_bind_int64(st, 17, b);
    }
    rc = icfg_step(st, sql);
    icfg_finalize(st);
    return rc;
}

int icfg_extent_insert(struct icfg_extent *e)
{
    char naa[40];
    int64_t dup;
    int rc = serial_assign(e);
    if (rc < 0)
        return rc;
    do {
        memcpy(naa, "0x6589cfc000000", 15);
        random_hex(naa + 15, 19);
    } while (icfg_int(&dup, "SELECT id FROM iscsi_extent WHERE naa = ?", "t", naa) == 0);
    rc = extent_write("INSERT INTO iscsi_extent (name, type, disk, path, filesize, serial, "
                      "blocksize, pblocksize, avail_threshold, comment, insecure_tpc, xen, rpm, "
                      "ro, enabled, naa) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      e, naa, 0, 0);
    if (rc < 0)
        return rc;
    e->id = sqlite3_last_insert_rowid(db_handle());
    return icfg_str_set(&e->naa, naa);
}

int icfg_extent_update(struct icfg_extent *e, bool new_lu)
{
    int rc = serial_assign(e);
    if (rc < 0)
        return rc;
    return extent_write("UPDATE iscsi_extent SET name = ?, type = ?, disk = ?, path = ?, "
                        "filesize = ?, serial = ?, blocksize = ?, pblocksize = ?, "
                        "avail_threshold = ?, comment = ?, insecure_tpc = ?, xen = ?, rpm = ?, "
                        "ro = ?, enabled = ?, gen = gen + ? WHERE id = ?",
                        e, NULL, new_lu ? 1 : 0, e->id);
}

int icfg_extent_delete(int64_t id)
{
    return icfg_run("DELETE FROM iscsi_extent WHERE id = ?", "i", id);
}

int icfg_extent_find_name(const char *name, int64_t except_id, int64_t *id)
{
    return icfg_int(id, "SELECT id FROM iscsi_extent WHERE name = ? AND id != ?", "ti", name,
                    except_id);
}

int icfg_extent_find_serial(const char *serial, int64_t except_id, int64_t *id)
{
    return icfg_int(id, "SELECT id FROM iscsi_extent WHERE serial = ? AND id != ?", "ti", serial,
                    except_id);
}

int icfg_extent_find_disk(const char *disk, int64_t *id)
{
    return icfg_int(id, "SELECT id FROM iscsi_extent WHERE disk = ?", "t", disk);
}

int icfg_extent_target(int64_t id, int64_t *target)
{
    return icfg_int(target, "SELECT target_id FROM iscsi_targetextent WHERE extent_id = ?", "i",
                    id);
}

int icfg_volume_size(const char *dataset, uint64_t *size)
{
    int64_t v;
    int rc = icfg_int(&v, "SELECT volsize FROM datasets WHERE name = ? AND type = 'VOLUME'", "t",
                      dataset);
    if (rc == 0)
        *size = (uint64_t)v;
    return rc;
}

static int choice_decode(sqlite3_stmt *st, void *elem)
{
    struct icfg_volume_choice *c = elem;
    c->name = icfg_col_dup(st, 0, false);
    c->size = (uint64_t)sqlite3_column_int64(st, 1);
    return c->name ? 0 : -ENOMEM;
}

static void choice_clear(void *elem)
{
    free(((struct icfg_volume_choice *)elem)->name);
}

int icfg_volume_choices(struct icfg_volume_choice **out, size_t *n)
{
    void *v;
    int rc = icfg_list("SELECT name, volsize FROM datasets WHERE type = 'VOLUME' AND 'zvol/' || "
                       "name NOT IN (SELECT disk FROM iscsi_extent WHERE disk IS NOT NULL)",
                       "ORDER BY name", NULL, sizeof(struct icfg_volume_choice), choice_decode,
                       choice_clear, &v, n);
    *out = v;
    return rc;
}

void icfg_volume_choices_free(struct icfg_volume_choice *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        choice_clear(&v[i]);
    free(v);
}
