/* What the typed iSCSI stores share: string lists and the list reader
 * (store.h). */
#include "iscsi/config/store.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "core/log.h"

/* The stored text is a JSON array (the schema's format since the first
 * version): jansson reads and writes it here, inside the store only. */
int icfg_strv_from_text(const char *text, struct api_strv *out)
{
    api_strv_clear(out);
    json_t *a = text ? json_loads(text, 0, NULL) : NULL;
    size_t i;
    json_t *item;
    int rc = 0;
    json_array_foreach(a, i, item)
    {
        if (json_is_string(item) && (rc = api_strv_add(out, json_string_value(item))) < 0)
            break;
    }
    json_decref(a);
    if (rc < 0)
        api_strv_clear(out);
    return rc;
}

char *icfg_strv_to_text(const struct api_strv *s)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < s->n; i++)
        if (json_array_append_new(a, json_string(s->v[i])) < 0) {
            json_decref(a);
            a = NULL;
        }
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return text;
}

int icfg_str_set(char **dst, const char *src)
{
    char *copy = src ? strdup(src) : NULL;
    if (src && !copy)
        return -ENOMEM;
    free(*dst);
    *dst = copy;
    return 0;
}

int icfg_name_index(const char *const *names, const char *s, int def)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return def;
}

char *icfg_col_dup(sqlite3_stmt *st, int col, bool or_null)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    if (!t)
        return or_null ? NULL : strdup("");
    return strdup((const char *)t);
}

/* select_sql [WHERE column IN (?, ...)] order_sql, prepared with the key's
 * values bound. 0 or -errno. */
static int list_prepare(const char *select_sql, const char *order_sql, const struct icfg_key *key,
                        sqlite3_stmt **st)
{
    char *sql = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&sql, &len);
    if (!f)
        return -ENOMEM;
    fputs(select_sql, f);
    if (key && key->column && key->n == 1)
        fprintf(f, " WHERE %s = ?", key->column);
    else if (key && key->column) {
        fprintf(f, " WHERE %s IN (", key->column);
        for (size_t k = 0; k < key->n; k++)
            fputs(k ? ", ?" : "?", f);
        fputs(")", f);
    }
    fprintf(f, " %s", order_sql);
    if (fclose(f) != 0 || !sql) {
        free(sql);
        return -ENOMEM;
    }
    int rc = db_stmt(sql, st) < 0 ? -EIO : 0;
    free(sql);
    for (size_t k = 0; rc == 0 && key && key->column && k < key->n; k++) {
        const struct icfg_key_value *v = &key->values[k];
        if (v->is_int)
            sqlite3_bind_int64(*st, (int)k + 1, v->i);
        else
            sqlite3_bind_text(*st, (int)k + 1, v->s, -1, SQLITE_TRANSIENT);
    }
    return rc;
}

int icfg_list(const char *select_sql, const char *order_sql, const struct icfg_key *key,
              size_t elem_size, icfg_decode_fn fn, void (*clear)(void *elem), void **out, size_t *n)
{
    sqlite3_stmt *st;
    *out = NULL;
    *n = 0;
    int rc = list_prepare(select_sql, order_sql, key, &st);
    if (rc < 0)
        return rc;
    char *arr = NULL;
    size_t count = 0;
    int s = SQLITE_DONE;
    while (rc == 0 && (s = sqlite3_step(st)) == SQLITE_ROW) {
        char *grown = realloc(arr, (count + 1) * elem_size);
        if (!grown) {
            rc = -ENOMEM;
            break;
        }
        arr = grown;
        memset(arr + count * elem_size, 0, elem_size);
        rc = fn(st, arr + count * elem_size);
        count++;
    }
    if (rc == 0 && s != SQLITE_DONE) {
        log_error("iscsi config: query failed: %s", sqlite3_errmsg(db_handle()));
        rc = -EIO;
    }
    db_stmt_done(st);
    if (rc < 0) {
        for (size_t i = 0; clear && i < count; i++)
            clear(arr + i * elem_size);
        free(arr);
        return rc;
    }
    *out = arr;
    *n = count;
    return 0;
}

int icfg_table_list(const struct icfg_table *t, const struct icfg_key *key, void **out, size_t *n)
{
    return icfg_list(t->select, t->order, key, t->elem_size, t->decode, t->clear, out, n);
}

int icfg_table_get(const struct icfg_table *t, int64_t id, void *out)
{
    struct icfg_key key = {
        .column = "id", .values = &(struct icfg_key_value){.is_int = true, .i = id}, .n = 1};
    void *v;
    size_t n;
    memset(out, 0, t->elem_size);
    int rc = icfg_table_list(t, &key, &v, &n);
    if (rc == 0 && n == 0)
        rc = -ENOENT;
    if (rc == 0)
        memcpy(out, v, t->elem_size); /* id is unique: the one element */
    free(v);
    return rc;
}

void icfg_table_free(const struct icfg_table *t, void *v, size_t n)
{
    for (size_t i = 0; t->clear && i < n; i++)
        t->clear((char *)v + i * t->elem_size);
    free(v);
}

int icfg_decode_id(sqlite3_stmt *st, void *elem)
{
    *(int64_t *)elem = sqlite3_column_int64(st, 0);
    return 0;
}
