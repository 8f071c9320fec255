/*
 * What the files of nvme/config/ share (private to nvme/config/): the
 * objects' descriptions and method tables, the encoders other objects
 * embed, and the publisher's entry points.
 */
#ifndef BLOCKD_NVME_CONFIG_NVMET_INTERNAL_H
#define BLOCKD_NVME_CONFIG_NVMET_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "api/api.h"
#include "nvme/config/nvmet_crud.h"

extern const struct nvmet_res nvmet_subsys_res, nvmet_namespace_res, nvmet_port_res, nvmet_host_res,
    nvmet_host_subsys_res, nvmet_port_subsys_res;

extern const struct api_method nvmet_subsys_methods[], nvmet_namespace_methods[],
    nvmet_port_methods[], nvmet_host_methods[], nvmet_link_methods[], nvmet_global_methods[];
extern const size_t nvmet_subsys_methods_n, nvmet_namespace_methods_n, nvmet_port_methods_n,
    nvmet_host_methods_n, nvmet_link_methods_n, nvmet_global_methods_n;

/* An object of ids → encoded rows of r ("1": {...}), for the rows that
 * embed another object (namespace.subsys, port_subsys.port). */
json_t *nvmet_index(const struct nvmet_res *r);
/* The embedded row of id in index (a new reference; null when missing). */
json_t *nvmet_index_get(json_t *index, int64_t id);

/* "zvol/POOL/VOL" → "POOL/VOL", else NULL. */
const char *nvmet_zvol_dataset(const char *device_path);

/* The dataset hooks (nvmet_datasets.c): registered by nvme_config_init. */
void nvmet_datasets_init(void);
/* The store of NVMe reservations (nvmet_resv.c): registered by
 * nvme_config_init. */
void nvmet_resv_init(void);
/* Drop the saved reservations of namespaces that are gone (a namespace
 * removed with its dataset or its share leaves them; ids are never
 * reused): at service start. */
void nvmet_resv_prune(void);

/* The publisher (nvmet_publish.c): subscribe to CONF_NVME. */
void nvmet_publish_init(void);
/* Rebuild and publish the part (start, pool online, resize: the
 * subsystems holding dataset get new objects so the target sees the
 * change; NULL for none). 0 or -errno. */
int nvmet_republish(const char *resized_dataset);
/* Whether the target serves now (between nvme_config_start and stop). */
bool nvmet_running(void);

/* The listeners (nvmet_listen.c): open/close to match the part's ports
 * and the discovery address; close all. No DB lock held. */
void nvmet_listen_apply(void);
void nvmet_listen_close_all(void);

/* share.nvme.* (nvmet_share.c). */
extern const struct api_method nvmet_share_methods[];
extern const size_t nvmet_share_methods_n;

#endif
