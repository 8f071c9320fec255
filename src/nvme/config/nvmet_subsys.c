/*
 * nvmet.subsys.*: NVMe-oF subsystems as TrueNAS 25.10 shapes them. The
 * subnqn defaults to "<basenqn>:<name>" (made once, at create; a later
 * basenqn change does not rename it), the serial is made by the server
 * (20 hexadecimal digits, unique), hosts/namespaces/ports are id lists
 * filled only with extra.verbose (TrueNAS's extend_context), delete
 * refuses while namespaces or ports use the subsystem unless force (then
 * takes them along; TrueNAS's allowed hosts always go).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "control/db.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvmet_internal.h"

/* An NQN as NVMe base 4.5 has it: "nqn." and printable ASCII, no space. */
static bool nqn_valid(const char *s)
{
    if (strncmp(s, "nqn.", 4) != 0 || strlen(s) > NVS_NQN_MAX)
        return false;
    for (; *s; s++)
        if (*s <= 0x20 || *s >= 0x7f)
            return false;
    return true;
}

/* "0A0B0C", "00:0A:0B" or "00-0A-0B": 24 bits of hexadecimal. */
static bool oui_valid(const char *s)
{
    int digits = 0;
    for (size_t i = 0; s[i]; i++) {
        if (isxdigit((unsigned char)s[i]))
            digits++;
        else if (!((s[i] == ':' || s[i] == '-') && i % 3 == 2 && strlen(s) == 8))
            return false;
    }
    return digits == 6;
}

/* A serial no other subsystem has: 20 hexadecimal digits, as TrueNAS. */
static int serial_new(char out[21])
{
    for (int tries = 0; tries < 10; tries++) {
        uint8_t b[10];
        int64_t n = 1;
        if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
            return -EIO;
        for (int i = 0; i < 10; i++)
            snprintf(out + 2 * i, 3, "%02x", b[i]);
        if (nvs_count(&nvs_subsys, "serial = ?1", &n, "t", out) < 0)
            return -EIO;
        if (n == 0)
            return 0;
    }
    return -EAGAIN;
}

static void subsys_check_nqn(struct nvw *w, struct nvmet_subsys *s)
{
    if (!s->subnqn || !*s->subnqn) {
        /* tns-csi sends "" for "make one", as TrueNAS takes it */
        struct nvmet_global g;
        char nqn[2 * NVS_NQN_MAX];
        if (nvs_global_load(&g) < 0 || !*g.basenqn) {
            nvw_err(w, "subnqn", EIO, "the global basenqn cannot be read");
            return;
        }
        snprintf(nqn, sizeof(nqn), "%s:%s", g.basenqn, s->name);
        if (!nqn_valid(nqn)) {
            nvw_err(w, "name", EINVAL,
                    "\"%s:<name>\" must be a valid NQN of at most %d bytes (printable, no spaces)",
                    g.basenqn, NVS_NQN_MAX);
            return;
        }
        free(s->subnqn);
        s->subnqn = strdup(nqn);
    } else if (!nqn_valid(s->subnqn)) {
        nvw_err(w, "subnqn", EINVAL,
                "Must be an NQN: \"nqn.\" and printable ASCII without spaces, at most %d bytes",
                NVS_NQN_MAX);
    }
}

static int subsys_check(struct nvw *w, void *obj, const void *prev)
{
    struct nvmet_subsys *s = obj;
    const struct nvmet_subsys *old = prev;
    int64_t n = 0;
    if (nvs_count(&nvs_subsys, "name = ?1 AND id != ?2", &n, "ti", s->name, s->id) == 0 && n)
        nvw_err(w, "name", EEXIST, "A subsystem named '%s' already exists", s->name);
    subsys_check_nqn(w, s);
    n = 0;
    if (!s->subnqn)
        return api_error(w->call, ENOMEM, "out of memory");
    if (nvs_count(&nvs_subsys, "subnqn = ?1 AND id != ?2", &n, "ti", s->subnqn, s->id) == 0 && n)
        nvw_err(w, "subnqn", EEXIST, "A subsystem with NQN '%s' already exists", s->subnqn);
    if (s->ieee_oui && !oui_valid(s->ieee_oui))
        nvw_err(w, "ieee_oui", EINVAL,
                "Must be 24 bits of hexadecimal (\"0A0B0C\" or \"00:0A:0B\")");
    if (old)
        return 0; /* the serial stays (the object was read from the stored one) */
    char serial[21];
    int rc = serial_new(serial);
    if (rc < 0)
        return api_error(w->call, -rc, "Failed to generate a random serial for subsystem");
    free(s->serial);
    s->serial = strdup(serial);
    return s->serial ? 0 : api_error(w->call, ENOMEM, "out of memory");
}

/* extra.verbose (TrueNAS's extend_context), or extra.options.verbose. */
static bool verbose(json_t *params)
{
    json_t *extra = params ? api_query_extra(params) : NULL;
    return json_is_true(json_object_get(extra, "verbose")) ||
           json_is_true(json_object_get(json_object_get(extra, "options"), "verbose"));
}

/* The ids of the rows of links (host_subsys/port_subsys: their other end)
 * or of the namespaces whose subsystem is id. */
static json_t *ids_of(const struct nvs_table *t, int64_t id)
{
    void *objs;
    size_t n;
    json_t *out = json_array();
    if (nvs_load(t, "subsys_id = ?1", &objs, &n, "i", id) < 0)
        return out;
    for (size_t i = 0; i < n; i++)
        json_array_append_new(out, json_integer(t == &nvs_namespace
                                                    ? *(int64_t *)NVS_AT(t, objs, i)
                                                    : ((struct nvmet_link *)objs)[i].other_id));
    nvs_free_all(t, objs, n);
    return out;
}

static json_t *subsys_context(json_t *params)
{
    return verbose(params) ? json_true() : NULL;
}

static json_t *subsys_encode(const void *obj, json_t *ctx)
{
    const struct nvmet_subsys *s = obj;
    json_t *o = nvmet_row(&nvmet_subsys_res, s);
    bool all = json_is_true(ctx);
    json_object_set_new(o, "hosts", all ? ids_of(&nvs_host_subsys, s->id) : json_array());
    json_object_set_new(o, "namespaces", all ? ids_of(&nvs_namespace, s->id) : json_array());
    json_object_set_new(o, "ports", all ? ids_of(&nvs_port_subsys, s->id) : json_array());
    return o;
}

/* "Subsystem x contains 2 namespaces: 1,2" (TrueNAS's words). */
static void refuse_namespaces(struct nvw *w, const char *name, struct nvmet_namespace *ns, size_t n)
{
    char list[64] = "";
    size_t len = 0;
    for (size_t i = 0; i < n && i < 3; i++)
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%" PRId64, i ? "," : "",
                                ns[i].nsid.v);
    nvw_err(w, "id", EBUSY, "Subsystem %s contains %zu namespace%s: %s%s (use force)", name, n,
            n == 1 ? "" : "s", list, n > 3 ? ",..." : "");
}

static int subsys_remove(struct nvw *w, const void *obj, json_t *opts)
{
    const struct nvmet_subsys *s = obj;
    int64_t nports = 0;
    bool force = nvj_bool(opts, "force");
    void *ns;
    size_t nns;
    if (nvs_load(&nvs_namespace, "subsys_id = ?1", &ns, &nns, "i", s->id) < 0)
        return api_error(w->call, EIO, "cannot read the subsystem's namespaces");
    if (!force && nns)
        refuse_namespaces(w, s->name, ns, nns);
    nvs_free_all(&nvs_namespace, ns, nns);
    if (nvs_count(&nvs_port_subsys, "subsys_id = ?1", &nports, "i", s->id) < 0)
        return api_error(w->call, EIO, "cannot read the subsystem's ports");
    if (!force && nports)
        nvw_err(w, "id", EBUSY, "Subsystem %s visible on %" PRId64 " port%s (use force)", s->name,
                nports, nports == 1 ? "" : "s");
    if (api_has_verrs(w->call)) {
        log_warn("nvmet: %s refused subsystem %s in use (peer %s)", w->method, s->name,
                 api_call_peer(w->call));
        return api_invalid(w->call);
    }
    int rc = nvs_delete(&nvs_namespace, NULL, "subsys_id = ?1", "i", s->id);
    if (rc == 0)
        rc = nvs_delete(&nvs_port_subsys, NULL, "subsys_id = ?1", "i", s->id);
    if (rc == 0)
        rc = nvs_delete(&nvs_host_subsys, NULL, "subsys_id = ?1", "i", s->id);
    return rc < 0 ? api_error(w->call, -rc, "cannot delete what uses the subsystem") : 0;
}

const struct nvmet_res nvmet_subsys_res = {
    .what = "subsystem",
    .t = &nvs_subsys,
    .check = subsys_check,
    .context = subsys_context,
    .encode = subsys_encode,
    .remove = subsys_remove,
};

NVMET_CRUD_HANDLERS(subsys, nvmet_subsys_res, "NVMe-oF subsystem")

static const struct api_field del_fields[] = {
    {.name = "force", .type = API_T_BOOL, .def = "false"},
};
static const struct api_arg create_args[] = {
    NVMET_ARG_DATA(nvs_subsys_fields, NVS_SUBSYS_INPUT, 0)};
static const struct api_arg update_args[] = {
    API_ARG_ID, NVMET_ARG_DATA(nvs_subsys_fields, NVS_SUBSYS_INPUT, API_PARTIAL)};
static const struct api_arg delete_args[] = {
    API_ARG_ID, API_ARG_OBJECT("options", del_fields, API_ARG_OPTIONAL)};

const struct api_method nvmet_subsys_methods[] = {
    NVMET_CRUD_METHODS("nvmet.subsys", subsys, "subsystem", create_args, update_args, delete_args),
};
const size_t nvmet_subsys_methods_n = ARRAY_SIZE(nvmet_subsys_methods);
