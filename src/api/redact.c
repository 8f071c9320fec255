/* Secrets out of job records (redact.h). */
#include "api/redact.h"

#include <stddef.h>
#include <string.h>

/* Field names that hold a secret wherever they appear. "key" is an API
 * key (api_key.create's answer) and a cephx key; a field of that name
 * that is not secret would be hidden too, which loses nothing but
 * display. */
static const char *const secret_fields[] = {
    "password",   "secret",          "peersecret", "key",        "api_key",     "otp_token",
    "psk",        "tls_psk",         "cephx_key",  "passphrase", "private_key", "token",
    "dhchap_key", "dhchap_ctrl_key",
};

/* Positional secrets: method and the index of its secret parameter. */
static const struct {
    const char *method;
    size_t index;
} secret_args[] = {
    {"auth.login", 1},
    {"auth.login_with_api_key", 0},
};

bool redact_field_is_secret(const char *name)
{
    for (size_t i = 0; i < sizeof(secret_fields) / sizeof(secret_fields[0]); i++)
        if (strcmp(name, secret_fields[i]) == 0)
            return true;
    return false;
}

/* Replace secrets inside v (a copy the caller owns), at any depth. */
static void redact_in_place(json_t *v)
{
    if (json_is_object(v)) {
        const char *k;
        json_t *item;
        json_object_foreach(v, k, item)
        {
            if (redact_field_is_secret(k) && !json_is_null(item))
                json_object_set_new(v, k, json_string(REDACTED));
            else
                redact_in_place(item);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) redact_in_place(item);
    }
}

json_t *redact_value(const json_t *v)
{
    if (!v)
        return NULL;
    json_t *copy = json_deep_copy(v);
    if (copy)
        redact_in_place(copy);
    return copy;
}

/* Replace method's positional secrets in params (an array, owned). */
static void redact_positional(const char *method, json_t *params)
{
    if (!method || !json_is_array(params))
        return;
    for (size_t i = 0; i < sizeof(secret_args) / sizeof(secret_args[0]); i++)
        if (strcmp(method, secret_args[i].method) == 0 &&
            json_array_get(params, secret_args[i].index))
            json_array_set_new(params, secret_args[i].index, json_string(REDACTED));
}

json_t *redact_params(const char *method, const json_t *params)
{
    json_t *copy = redact_value(params);
    if (!copy)
        return NULL;
    redact_positional(method, copy);
    if (method && strcmp(method, "core.bulk") == 0) {
        /* core.bulk [method, [[params]…], description] */
        const char *inner = json_string_value(json_array_get(copy, 0));
        size_t i;
        json_t *call;
        json_array_foreach(json_array_get(copy, 1), i, call) redact_positional(inner, call);
    }
    return copy;
}
