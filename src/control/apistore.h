/*
 * The SQL side of the API's own objects (API keys, accounts, service
 * settings): implements api/store.h.
 */
#ifndef BLOCKD_CONFIG_APISTORE_H
#define BLOCKD_CONFIG_APISTORE_H

/* Register the api_key and account tables and install the api/store.h
 * table. Startup only, before db_open() (and before any API call that
 * reads keys, accounts or service settings). */
void apistore_init(void);

#endif
