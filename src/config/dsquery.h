/*
 * Query plumbing that the dataset rows (dsrows.c, datasets.c) and the
 * snapshot rows (snapshots.c) share. Private to src/config/; API thread,
 * DB locked where said.
 */
#ifndef BLOCKD_CONFIG_DSQUERY_H
#define BLOCKD_CONFIG_DSQUERY_H

#include <jansson.h>
#include <sqlite3.h>

struct api_call;

/*
 * Prepare "<select>[ WHERE <where>] <order>" (db_stmt; give it back with
 * db_stmt_done) and bind the strings of binds to ?1, ?2…; where NULL
 * selects every row. binds must outlive the statement's steps (bound
 * without a copy). 0 or -errno. DB locked.
 */
int ds_select_where(const char *select, const char *where, const char *order, json_t *binds,
                    sqlite3_stmt **st);

/*
 * <ns>.get_instance [id]: builds only the rows an [["id", "=", id]] query
 * gives (rows_hinted, e.g. ds_dataset_rows_hinted), then answers as
 * ds_get_instance. what names the rows in the error ("datasets"). Takes
 * the DB lock itself; the handler's return value.
 */
int ds_get_instance_hinted(struct api_call *call, json_t *params, json_t **result,
                           json_t *(*rows_hinted)(json_t *params), const char *what);

#endif
