/*
 * The typed stores of the iSCSI configuration objects: what
 * every <object>_store.c shares. A store holds an object's SQL behind
 * functions that take and return its C struct (target_store.h, ...); the
 * API files (config_<object>.c) decode JSON into those structs and encode
 * them back, so no JSON reaches a store and no SQL leaves iscsi/config/.
 * The gateway's shared configuration (gwsync/gwconfig_rows.c) reads the
 * targets, extents and LUN mappings through the same stores.
 *
 * Every store function runs with the DB lock held (control/db.h db_lock,
 * or inside a struct cfg_tx, control/cfgtx.h): writes join the caller's
 * transaction, which records the changes and commits them (the handler's
 * one transaction). Any API/worker thread.
 */
#ifndef BLOCKD_CONFIG_ISCSI_STORE_H
#define BLOCKD_CONFIG_ISCSI_STORE_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/fields.h"

/* Lists of owned strings (a target's auth_networks, an initiator
 * group's names) are struct api_strv (api/fields.h: api_strv_add,
 * api_strv_clear, and api_codec_strv for their field tables). */
/* The column text of a stored list (a JSON array of strings: the format
 * the tables have always used) into *out (cleared first); NULL or text
 * that is not such an array is the empty list. 0 or -ENOMEM. */
int icfg_strv_from_text(const char *text, struct api_strv *out);
/* The column text of s (malloc'd, caller frees), or NULL on ENOMEM. */
char *icfg_strv_to_text(const struct api_strv *s);

/* One value of a key: an integer or a (borrowed) string. */
struct icfg_key_value {
    bool is_int;
    int64_t i;
    const char *s;
};

/* What a list may be narrowed to: rows whose column equals one of the
 * values (column NULL: every row). The API layer fills it from a query's
 * filters (config_crud.h icfg_key_from_query); column is one of the
 * store's own literal column names. values are borrowed. */
struct icfg_key {
    const char *column;
    const struct icfg_key_value *values;
    size_t n;
};

/* Decode the row at st into elem (zeroed before the call). 0 or -errno. */
typedef int (*icfg_decode_fn)(sqlite3_stmt *st, void *elem);

/*
 * The rows of select_sql (narrowed by key, if any, then order_sql), each
 * decoded by fn into an element of elem_size bytes: a new array in *out
 * (n elements, NULL when none; the caller frees each element with the
 * object's clear function, then the array). On error the elements
 * decoded so far are released with clear (may be NULL). 0 or -errno.
 */
int icfg_list(const char *select_sql, const char *order_sql, const struct icfg_key *key,
              size_t elem_size, icfg_decode_fn fn, void (*clear)(void *elem), void **out,
              size_t *n);

/* Replace *dst with a copy of src (NULL: none). 0 or -ENOMEM. */
int icfg_str_set(char **dst, const char *src);

/* The index of s in names (NULL-terminated), or def when absent. */
int icfg_name_index(const char *const *names, const char *s, int def);

/* How a store's rows become its structs: the SELECT of the columns
 * decode reads (an "id" column narrows icfg_table_get), their order, the
 * struct's size and its release function (NULL: it owns no memory). */
struct icfg_table {
    const char *select;
    const char *order;
    size_t elem_size;
    icfg_decode_fn decode;
    void (*clear)(void *elem);
};
/* icfg_list over a table. */
int icfg_table_list(const struct icfg_table *t, const struct icfg_key *key, void **out, size_t *n);
/* The one row whose id is id into out (elem_size bytes, zeroed first).
 * 0, -ENOENT or -errno. */
int icfg_table_get(const struct icfg_table *t, int64_t id, void *out);
/* Release n structs of a table's list and the array. */
void icfg_table_free(const struct icfg_table *t, void *v, size_t n);

/* An icfg_decode_fn: column 0 into an int64_t (a list of ids). */
int icfg_decode_id(sqlite3_stmt *st, void *elem);

/* A column's text copied (NULL for SQL NULL when or_null, else ""). */
char *icfg_col_dup(sqlite3_stmt *st, int col, bool or_null);

#endif
