/*
 * The effective sync and readonly of datasets (see dsprops.h): the value
 * a dataset inherits from its nearest ancestor, and the recompute of a
 * subtree's effective values after a local value or the tree changed.
 * Split from dsprops.c, which describes and stores the properties; this
 * file only walks the datasets rows.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/dsprops.h"

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
        /* stored lower-case; volume_sync_parse ignores case */
        if (volume_sync_parse(ls, &v) == 0)
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
