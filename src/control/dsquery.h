/*
 * Query plumbing that the dataset rows (dsrows.c, datasets.c) and the
 * snapshot rows (snapshots.c) share. Private to src/control/; API thread,
 * DB locked where said.
 */
#ifndef BLOCKD_CONFIG_DSQUERY_H
#define BLOCKD_CONFIG_DSQUERY_H

#include <jansson.h>

struct api_call;

/*
 * <ns>.get_instance [id]: builds only the rows an [["id", "=", id]] query
 * gives (rows_hinted, e.g. ds_dataset_rows_hinted), then answers as
 * ds_get_instance. what names the rows in the error ("datasets"). Takes
 * the DB lock itself; the handler's return value.
 */
int ds_get_instance_hinted(struct api_call *call, json_t *params, json_t **result,
                           json_t *(*rows_hinted)(json_t *params), const char *what);

#endif
