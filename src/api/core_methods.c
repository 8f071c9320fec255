/* The built-in core.* methods every transport answers. */
#include <errno.h>

#include "api/api_internal.h"
#include "api/validate.h"

static int core_ping(struct api_call *call, json_t *params, json_t **result)
{
    if (api_check_arity(call, params, 0) < 0)
        return api_invalid(call);
    *result = json_string("pong");
    return 0;
}

/* TrueNAS returns an object keyed by method name; so do we. */
static int core_get_methods(struct api_call *call, json_t *params, json_t **result)
{
    /* TrueNAS takes (target, …) selectors; we have one method set. */
    if (api_check_arity(call, params, 2) < 0)
        return api_invalid(call);
    const struct api_method **methods;
    size_t n = api_methods(&methods);
    json_t *out = json_object();
    for (size_t i = 0; i < n; i++) {
        const struct api_method *m = methods[i];
        json_object_set_new(out, m->name,
                            json_pack("{s:s, s:s, s:b}", "params", m->params ? m->params : "",
                                      "summary", m->summary ? m->summary : "", "no_auth",
                                      (m->flags & API_NO_AUTH) != 0));
    }
    *result = out;
    return 0;
}

const struct api_method api_core_methods[] = {
    {"core.ping", "[]", "Check that the daemon answers; returns \"pong\".", core_ping, API_NO_AUTH},
    {"core.get_methods", "[]",
     "Every method with its parameter synopsis and summary, keyed by name.", core_get_methods, 0},
};
const size_t api_core_method_count = sizeof(api_core_methods) / sizeof(api_core_methods[0]);
