/*
 * iscsi_write.h: the typed writes of targets, extents and LUN mappings
 * for writers that are not an iscsi.* call. Each is the tail of its
 * method's handler (config_target.c, config_extent.c,
 * config_targetextent.c) after decoding, in its own icfg_write.
 */
#include <errno.h>
#include <stdlib.h>

#include "iscsi/config/config_crud.h"
#include "iscsi/config/config_internal.h"
#include "iscsi/config/iscsi_write.h"

/* A create is capped as the method's is (--max-share-objects). */
static int cap_check(struct icfg_write *w, int64_t id)
{
    return id ? 0 : icfg_cap_check(w, api_call_method(w->call));
}

int iscsi_target_write(struct api_call *call, struct icfg_target *t)
{
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int rc = cap_check(&w, t->id);
    return icfg_write_end(&w, rc < 0 ? rc : icfg_target_save(&w, t));
}

int iscsi_extent_write(struct api_call *call, struct icfg_extent *e)
{
    struct icfg_write w;
    struct icfg_extent old = {0};
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int rc = e->id ? icfg_extent_get(e->id, &old) : cap_check(&w, 0);
    if (rc < 0 && e->id)
        rc = icfg_missing(call, rc, "Extent", e->id);
    else
        rc = icfg_extent_save(&w, e, e->id ? &old : NULL);
    icfg_extent_clear(&old);
    return icfg_write_end(&w, rc);
}

int iscsi_targetextent_write(struct api_call *call, struct icfg_targetextent *te)
{
    struct icfg_write w;
    struct icfg_targetextent old;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int rc = te->id ? icfg_targetextent_get(te->id, &old) : cap_check(&w, 0);
    if (rc < 0 && te->id)
        rc = icfg_missing(call, rc, "Target-extent mapping", te->id);
    else if (te->id)
        icfg_changed_target(&w, old.target); /* the old target loses the LUN */
    if (rc == 0)
        rc = icfg_targetextent_save(&w, te);
    return icfg_write_end(&w, rc);
}

int iscsi_target_remove(struct api_call *call, int64_t id, bool force, bool delete_extents)
{
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int rc = icfg_target_exists(id);
    if (rc < 0)
        rc = icfg_missing(call, rc, "Target", id);
    else
        rc = icfg_target_remove(&w, id, force, delete_extents);
    return icfg_write_end(&w, rc);
}

int iscsi_extent_remove(struct api_call *call, int64_t id, bool remove, bool force)
{
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    return icfg_write_end(&w, icfg_extent_delete_row(&w, id, remove, force));
}

int iscsi_targetextent_remove(struct api_call *call, int64_t id, bool force)
{
    struct icfg_write w;
    struct icfg_targetextent te;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int rc = icfg_targetextent_get(id, &te);
    if (rc < 0)
        rc = icfg_missing(call, rc, "Target-extent mapping", id);
    else
        rc = icfg_target_check_sessions(&w, te.target, force);
    if (rc == 0)
        rc = icfg_targetextent_remove(&w, "id", id);
    return icfg_write_end(&w, rc);
}
