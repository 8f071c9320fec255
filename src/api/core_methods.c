/* The built-in core.* methods every transport answers. */
#include <errno.h>
#include <stdlib.h>

#include "api/api_internal.h"
#include "api/validate.h"

static int core_ping(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = json_string("pong");
    return 0;
}

/* TrueNAS returns an object keyed by method name; so do we. */
static int core_get_methods(struct api_call *call, json_t *params, json_t **result)
{
    (void)params; /* TrueNAS takes (target, …) selectors; we have one method set. */
    const struct api_method **methods;
    size_t n = api_methods(&methods);
    json_t *out = json_object();
    for (size_t i = 0; i < n; i++) {
        const struct api_method *m = methods[i];
        char *syn = api_method_synopsis(m);
        if (!syn) {
            json_decref(out);
            return api_error(call, ENOMEM, "out of memory");
        }
        /* the least role that may call it (api.h enum api_method_flags) */
        const char *role = (m->flags & API_READ)    ? "READONLY_ADMIN"
                           : (m->flags & API_SHARE) ? "SHARING_ADMIN"
                                                    : "FULL_ADMIN";
        json_object_set_new(out, m->name,
                            json_pack("{s:s, s:s, s:b, s:s, s:b}", "params", syn, "summary",
                                      m->summary ? m->summary : "", "no_auth",
                                      (m->flags & API_NO_AUTH) != 0, "role", role, "local_only",
                                      (m->flags & API_LOCAL_ONLY) != 0));
        free(syn);
    }
    *result = out;
    return 0;
}

/* TrueNAS's (target, …) selectors: accepted, not used. */
static const struct api_arg get_methods_args[] = {
    {.name = "target", .type = API_T_ANY, .flags = API_ARG_OPTIONAL},
    {.name = "options", .type = API_T_ANY, .flags = API_ARG_OPTIONAL},
};

const struct api_method api_core_methods[] = {
    {"core.ping", NULL, "Check that the daemon answers; returns \"pong\".", core_ping,
     API_NO_AUTH | API_READ},
    {"core.get_methods", NULL,
     "Every method with its parameter synopsis, summary and the least role that may call it, "
     "keyed by name.",
     core_get_methods, API_READ, API_ARGS(get_methods_args)},
};
const size_t api_core_method_count = sizeof(api_core_methods) / sizeof(api_core_methods[0]);
