/*
 * nvmet.host.*: the hosts (by NQN) that may connect to the subsystems
 * that list them, with their DH-HMAC-CHAP keys, as TrueNAS 25.10 shapes
 * them. Keys are in the NVMe secret representation ("DHHC-1:hh:<base64 of
 * the secret and its CRC-32>:", as nvme-cli prints and checks them),
 * checked on the way in, sealed at rest (control/pwenc.h, as CHAP
 * secrets) and returned in clear to a caller that may change shares (a
 * read-only key reads "********": api.c redacts them by name).
 * nvmet.host.generate_key makes one as `nvme gen-dhchap-key` does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "control/pwenc.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvmet_internal.h"

static uint32_t crc32_le(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_encode(const uint8_t *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    out[o] = 0;
}

/* Decode len characters of s into out (room for max): the byte count, or -1. */
static int b64_decode(const char *s, size_t len, uint8_t *out, size_t max)
{
    size_t o = 0;
    if (len % 4)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *p = s[i + k] == '=' ? NULL : strchr(b64, s[i + k]);
            if (s[i + k] == '=' && i + 4 == len && k >= 2)
                pad++;
            else if (!p || !s[i + k] || pad)
                return -1;
            v = v << 6 | (p ? (uint32_t)(p - b64) : 0);
        }
        for (int k = 0; k < 3 - pad; k++) {
            if (o == max)
                return -1;
            out[o++] = (uint8_t)(v >> (16 - 8 * k));
        }
    }
    return (int)o;
}

/* A key in the DH-HMAC-CHAP representation: "DHHC-1:hh:" (hh 00..03),
 * base64 of a 32, 48 or 64 byte secret and its CRC-32, ":". */
static bool key_valid(const char *k)
{
    uint8_t raw[80];
    if (strncmp(k, "DHHC-1:", 7) != 0 || k[7] != '0' || k[8] < '0' || k[8] > '3' || k[9] != ':')
        return false;
    const char *b = k + 10, *end = strchr(b, ':');
    if (!end || end[1])
        return false;
    int n = b64_decode(b, (size_t)(end - b), raw, sizeof(raw));
    if (n != 36 && n != 52 && n != 68)
        return false;
    uint32_t crc = crc32_le(raw, (size_t)n - 4);
    return raw[n - 4] == (uint8_t)crc && raw[n - 3] == (uint8_t)(crc >> 8) &&
           raw[n - 2] == (uint8_t)(crc >> 16) && raw[n - 1] == (uint8_t)(crc >> 24);
}

/* One key: kept when unchanged (still sealed as stored), else checked and sealed. */
static int key_field(struct nvw *w, char **key, const char *was, const char *name)
{
    char sealed[PWENC_SEALED_MAX];
    if (!*key || (was && strcmp(*key, was) == 0))
        return 0;
    if (!key_valid(*key)) {
        nvw_err(w, name, EINVAL,
                "Must be a DH-HMAC-CHAP key \"DHHC-1:0[0-3]:<base64 of a 32, 48 or 64 byte secret "
                "and its CRC-32>:\" (nvme gen-dhchap-key, or nvmet.host.generate_key)");
        return 0;
    }
    int rc = pwenc_seal(*key, sealed, sizeof(sealed));
    if (rc < 0)
        return api_error(w->call, -rc, "cannot encrypt the key");
    explicit_bzero(*key, strlen(*key));
    free(*key);
    *key = strdup(sealed);
    return *key ? 0 : api_error(w->call, ENOMEM, "out of memory");
}

static int host_check(struct nvw *w, void *obj, const void *prev)
{
    struct nvmet_host *h = obj;
    const struct nvmet_host *old = prev;
    int64_t n = 0;
    if (strncmp(h->hostnqn, "nqn.", 4) != 0 || strpbrk(h->hostnqn, " \t\r\n"))
        nvw_err(w, "hostnqn", EINVAL, "Must be an NQN (\"nqn.\", no spaces)");
    if (nvs_count(&nvs_host, "hostnqn = ?1 AND id != ?2", &n, "ti", h->hostnqn, h->id) == 0 && n)
        nvw_err(w, "hostnqn", EEXIST, "A host with NQN '%s' already exists", h->hostnqn);
    if (h->dhchap_ctrl_key && !h->dhchap_key)
        nvw_err(w, "dhchap_ctrl_key", EINVAL,
                "Cannot configure bi-directional authentication without setting dhchap_key");
    if (key_field(w, &h->dhchap_key, old ? old->dhchap_key : NULL, "dhchap_key") < 0 ||
        key_field(w, &h->dhchap_ctrl_key, old ? old->dhchap_ctrl_key : NULL, "dhchap_ctrl_key") < 0)
        return -1;
    return 0;
}

/* A sealed key in clear (null when unset or when it cannot be opened: logged). */
static json_t *key_open(const struct nvmet_host *h, const char *sealed, const char *name)
{
    char plain[PWENC_PLAIN_MAX];
    if (!sealed)
        return json_null();
    int rc = pwenc_open(sealed, plain, sizeof(plain));
    if (rc < 0) {
        log_error("nvmet: host %" PRId64 ": the stored %s cannot be decrypted: %s", h->id, name,
                  strerror(-rc));
        return json_null();
    }
    json_t *v = json_string(plain);
    explicit_bzero(plain, sizeof(plain));
    return v;
}

/* The row with the keys in clear (a read-only caller gets "********": api.c). */
static json_t *host_encode(const void *obj, json_t *ctx)
{
    const struct nvmet_host *h = obj;
    (void)ctx;
    json_t *o = nvmet_row(&nvmet_host_res, h);
    json_object_set_new(o, "dhchap_key", key_open(h, h->dhchap_key, "dhchap_key"));
    json_object_set_new(o, "dhchap_ctrl_key", key_open(h, h->dhchap_ctrl_key, "dhchap_ctrl_key"));
    return o;
}

static int host_remove(struct nvw *w, const void *obj, json_t *opts)
{
    const struct nvmet_host *h = obj;
    int64_t n = 0;
    if (nvs_count(&nvs_host_subsys, "host_id = ?1", &n, "i", h->id) < 0)
        return api_error(w->call, EIO, "cannot read the host's subsystems");
    if (n && !nvj_bool(opts, "force")) {
        nvw_err(w, "id", EBUSY, "Host %s is allowed on %" PRId64 " subsystem%s (use force)",
                h->hostnqn, n, n == 1 ? "" : "s");
        return api_invalid(w->call);
    }
    int rc = nvs_delete(&nvs_host_subsys, NULL, "host_id = ?1", "i", h->id);
    return rc < 0 ? api_error(w->call, -rc, "cannot delete the host's links") : 0;
}

const struct nvmet_res nvmet_host_res = {
    .what = "host",
    .t = &nvs_host,
    .check = host_check,
    .encode = host_encode,
    .remove = host_remove,
};

NVMET_CRUD_HANDLERS(host, nvmet_host_res, "NVMe-oF host")

/* nvmet.host.generate_key [dhchap_hash, nqn]: a random secret of the
 * hash's length (32/48/64 bytes) with its CRC-32, "DHHC-1:0N:...:". The
 * NQN is the host's, to which the secret is transformed when used (the
 * representation does not depend on it). */
static int host_generate_key(struct api_call *call, json_t *params, json_t **result)
{
    json_t *h = api_param(params, 0);
    const char *hash = json_is_string(h) ? json_string_value(h) : "SHA-256";
    int idx = -1;
    for (int i = 0; nvs_dhchap_hashes[i]; i++)
        if (strcmp(hash, nvs_dhchap_hashes[i]) == 0)
            idx = i;
    if (idx < 0) {
        api_verr(call, "nvmet.host.generate_key.dhchap_hash", EINVAL,
                 "Input should be 'SHA-256', 'SHA-384' or 'SHA-512'");
        return api_invalid(call);
    }
    size_t len = 32 + 16 * (size_t)idx;
    uint8_t raw[68];
    char enc[100], key[120];
    if (getrandom(raw, len, 0) != (ssize_t)len)
        return api_error(call, EIO, "no random bytes");
    uint32_t crc = crc32_le(raw, len);
    for (int i = 0; i < 4; i++)
        raw[len + (size_t)i] = (uint8_t)(crc >> (8 * i));
    b64_encode(raw, len + 4, enc);
    snprintf(key, sizeof(key), "DHHC-1:0%d:%s:", idx + 1, enc);
    explicit_bzero(raw, sizeof(raw));
    *result = json_string(key);
    explicit_bzero(key, sizeof(key));
    return 0;
}

static int host_hash_choices(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result =
        json_pack("[s,s,s]", nvs_dhchap_hashes[0], nvs_dhchap_hashes[1], nvs_dhchap_hashes[2]);
    return 0;
}

static int host_dhgroup_choices(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = json_pack("[s,s,s,s,s]", nvs_dhchap_dhgroups[0], nvs_dhchap_dhgroups[1],
                        nvs_dhchap_dhgroups[2], nvs_dhchap_dhgroups[3], nvs_dhchap_dhgroups[4]);
    return 0;
}

static const struct api_field del_fields[] = {
    {.name = "force", .type = API_T_BOOL, .def = "false"},
};
static const struct api_arg create_args[] = {NVMET_ARG_DATA(nvs_host_fields, NVS_HOST_INPUT, 0)};
static const struct api_arg update_args[] = {
    API_ARG_ID, NVMET_ARG_DATA(nvs_host_fields, NVS_HOST_INPUT, API_PARTIAL)};
static const struct api_arg delete_args[] = {
    API_ARG_ID, API_ARG_OBJECT("options", del_fields, API_ARG_OPTIONAL)};
static const struct api_arg genkey_args[] = {
    {.name = "dhchap_hash", .type = API_T_STRING, .flags = API_ARG_OPTIONAL},
    {.name = "nqn", .type = API_T_STRING, .flags = API_ARG_OPTIONAL | API_ARG_NULLABLE}};

const struct api_method nvmet_host_methods[] = {
    NVMET_CRUD_METHODS("nvmet.host", host, "host", create_args, update_args, delete_args),
    {"nvmet.host.generate_key", NULL, "A new DH-HMAC-CHAP key (as nvme gen-dhchap-key)",
     host_generate_key, API_READ, API_ARGS(genkey_args)},
    {"nvmet.host.dhchap_hash_choices", NULL, "The DH-HMAC-CHAP hashes", host_hash_choices,
     API_READ},
    {"nvmet.host.dhchap_dhgroup_choices", NULL, "The DH-HMAC-CHAP Diffie-Hellman groups",
     host_dhgroup_choices, API_READ},
};
const size_t nvmet_host_methods_n = ARRAY_SIZE(nvmet_host_methods);
