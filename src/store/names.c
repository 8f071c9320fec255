/* Dataset and pool name validation. A dataset name becomes a path under the
 * pool directory, so every rule here exists to keep that path inside it. */
#include "store/names.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NAME_COMPONENT_MAX 255

static int why_set(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int why_set(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static bool name_char_ok(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.' || ch == ':' || ch == '-';
}

int name_check_component(const char *c, size_t len, char *why, size_t whylen)
{
    if (!c || len == 0)
        return why_set(why, whylen, "empty name component");
    if (len > NAME_COMPONENT_MAX)
        return why_set(why, whylen, "name component is %zu bytes long (at most %d allowed)", len,
                       NAME_COMPONENT_MAX);
    if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
        return why_set(why, whylen, "name component '%.*s' is not allowed", (int)len, c);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)c[i];
        if (ch == '\0')
            return why_set(why, whylen, "name contains a NUL byte");
        if (!name_char_ok(ch)) {
            if (ch >= 0x21 && ch < 0x7f)
                return why_set(why, whylen,
                               "invalid character '%c' in name component '%.*s' (allowed: "
                               "letters, digits, '_', '.', ':', '-')",
                               ch, (int)(len < 64 ? len : 64), c);
            return why_set(why, whylen,
                           "invalid byte 0x%02x in name component (allowed: letters, digits, "
                           "'_', '.', ':', '-')",
                           ch);
        }
    }
    return 0;
}

int name_check_pool(const char *name, char *why, size_t whylen)
{
    if (!name || !*name)
        return why_set(why, whylen, "pool name is empty");
    size_t len = strnlen(name, NAME_DATASET_MAX + 1);
    if (len > NAME_COMPONENT_MAX)
        return why_set(why, whylen, "pool name is longer than %d bytes", NAME_COMPONENT_MAX);
    if (memchr(name, '/', len))
        return why_set(why, whylen, "pool name must be a single component (no '/')");
    if (memchr(name, '@', len))
        return why_set(why, whylen, "pool name must not contain '@'");
    return name_check_component(name, len, why, whylen);
}

int name_check_dataset(const char *name, bool allow_snapshot, char *why, size_t whylen)
{
    if (!name || !*name)
        return why_set(why, whylen, "dataset name is empty");
    size_t len = strnlen(name, NAME_DATASET_MAX + 1);
    if (len > NAME_DATASET_MAX)
        return why_set(why, whylen, "dataset name is longer than %d bytes", NAME_DATASET_MAX);
    if (name[0] == '/')
        return why_set(why, whylen,
                       "dataset name must be relative (pool/name), not an absolute path");

    const char *at = memchr(name, '@', len);
    size_t dlen = at ? (size_t)(at - name) : len;
    if (at) {
        if (!allow_snapshot)
            return why_set(why, whylen, "a snapshot name ('@') is not allowed here");
        const char *snap = at + 1;
        size_t slen = len - dlen - 1;
        if (slen == 0)
            return why_set(why, whylen, "snapshot name after '@' is empty");
        if (memchr(snap, '@', slen))
            return why_set(why, whylen, "name contains more than one '@'");
        if (memchr(snap, '/', slen))
            return why_set(why, whylen, "snapshot name must not contain '/'");
        char inner[256];
        int rc = name_check_component(snap, slen, inner, sizeof(inner));
        if (rc < 0)
            return why_set(why, whylen, "snapshot name: %s", inner);
    }
    if (dlen == 0)
        return why_set(why, whylen, "dataset part before '@' is empty");

    size_t ncomp = 0;
    size_t start = 0;
    for (size_t i = 0; i <= dlen; i++) {
        if (i < dlen && name[i] != '/')
            continue;
        char inner[256];
        if (i == start) {
            if (i == dlen)
                return why_set(why, whylen, "dataset name must not end with '/'");
            return why_set(why, whylen, "dataset name has an empty component ('//')");
        }
        int rc = name_check_component(name + start, i - start, inner, sizeof(inner));
        if (rc < 0)
            return why_set(why, whylen, "%s", inner);
        ncomp++;
        start = i + 1;
    }
    if (ncomp < 2)
        return why_set(why, whylen, "dataset name must be pool/name (got only a pool name)");
    return 0;
}
