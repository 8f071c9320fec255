/* Compact JSON writer with saved texts for shared rows (see jsonw.h). */
#include "api/jsonw.h"

#include "api/callmem.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 2048

/* ---- registry of saved texts: open addressing on the object's address ---- */
struct memo {
    json_t *obj; /* NULL: empty; TOMB: deleted */
    char *text;
    size_t len;
};
#define TOMB ((json_t *)1)

static pthread_rwlock_t memo_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct memo *memo_tab;
static size_t memo_cap;  /* power of two, or 0 */
static size_t memo_used; /* live entries */
static size_t memo_tomb; /* deleted entries still occupying slots */

static size_t memo_hash(const json_t *o)
{
    uint64_t x = (uint64_t)(uintptr_t)o;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

/* Slot holding o, or NULL (read or write lock held). */
static const struct memo *memo_find(const json_t *o)
{
    if (!memo_used)
        return NULL;
    size_t mask = memo_cap - 1;
    for (size_t i = memo_hash(o) & mask;; i = (i + 1) & mask) {
        if (memo_tab[i].obj == o)
            return &memo_tab[i];
        if (!memo_tab[i].obj)
            return NULL;
    }
}

/* Rebuild with room for at least want live entries (write lock held). */
static int memo_grow(size_t want)
{
    size_t cap = 64;
    while (cap < want * 2)
        cap *= 2;
    struct memo *tab = calloc(cap, sizeof(*tab));
    if (!tab)
        return -ENOMEM;
    for (size_t k = 0; k < memo_cap; k++) {
        json_t *o = memo_tab[k].obj;
        if (!o || o == TOMB)
            continue;
        size_t i = memo_hash(o) & (cap - 1);
        while (tab[i].obj)
            i = (i + 1) & (cap - 1);
        tab[i] = memo_tab[k];
    }
    free(memo_tab);
    memo_tab = tab;
    memo_cap = cap;
    memo_tomb = 0;
    return 0;
}

/* ---- output buffer ---- */
struct wbuf {
    char *p;
    size_t len, cap;
    size_t max; /* 0: no limit */
    bool failed, too_big;
};

static bool reserve(struct wbuf *b, size_t n)
{
    if (b->failed)
        return false;
    if (b->cap - b->len >= n)
        return true;
    if (b->max && b->len + n > b->max) {
        b->failed = b->too_big = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void put(struct wbuf *b, const char *s, size_t n)
{
    if (reserve(b, n)) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
    }
}

static void put_int(struct wbuf *b, json_int_t v)
{
    char tmp[24];
    char *e = tmp + sizeof(tmp), *s = e;
    /* negate in unsigned arithmetic: INT64_MIN has no positive twin */
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--s = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--s = '-';
    put(b, s, (size_t)(e - s));
}

/* As jansson writes reals: %.17g, a ".0" when it would read back as an
 * integer, no '+' or leading zeros in the exponent. */
static void put_real(struct wbuf *b, double v)
{
    if (!isfinite(v)) {
        b->failed = true;
        return;
    }
    char tmp[48];
    int n = snprintf(tmp, sizeof(tmp) - 3, "%.17g", v);
    if (n < 0 || (size_t)n >= sizeof(tmp) - 3) {
        b->failed = true;
        return;
    }
    size_t len = (size_t)n;
    for (char *c = tmp; *c; c++)
        if (*c == ',') /* a locale's decimal comma */
            *c = '.';
    if (!strchr(tmp, '.') && !strchr(tmp, 'e')) {
        memcpy(tmp + len, ".0", 3);
        len += 2;
    }
    char *start = strchr(tmp, 'e');
    if (start) {
        start++;
        char *end = start + 1;
        if (*start == '-')
            start++;
        while (*end == '0')
            end++;
        if (end != start) {
            memmove(start, end, len - (size_t)(end - tmp) + 1);
            len -= (size_t)(end - start);
        }
    }
    put(b, tmp, len);
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid:
 * no overlong forms, surrogates or code points above U+10FFFF (what
 * jansson accepts). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

static void put_string(struct wbuf *b, const char *str, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *s = (const unsigned char *)str;
    if (!reserve(b, n + 2))
        return;
    b->p[b->len++] = '"';
    size_t run = 0; /* bytes since the last escape, copied in one go */
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++;
            run++;
            continue;
        }
        if (c >= 0x80) {
            size_t l = utf8_seq(s + i, n - i);
            if (!l) {
                b->failed = true; /* jansson refuses to write invalid UTF-8 too */
                return;
            }
            i += l;
            run += l;
            continue;
        }
        put(b, (const char *)s + i - run, run);
        run = 0;
        char esc[6] = {'\\', 0};
        size_t el = 2;
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            el = 6;
        }
        put(b, esc, el);
        i++;
    }
    put(b, (const char *)s + n - run, run);
    put(b, "\"", 1);
}

/* use_memo: look objects up in the registry (its read lock is held). */
static void put_value(struct wbuf *b, json_t *v, int depth, bool use_memo)
{
    if (b->failed)
        return;
    if (depth > MAX_DEPTH) {
        b->failed = true;
        return;
    }
    switch (json_typeof(v)) {
    case JSON_NULL:
        put(b, "null", 4);
        break;
    case JSON_TRUE:
        put(b, "true", 4);
        break;
    case JSON_FALSE:
        put(b, "false", 5);
        break;
    case JSON_INTEGER:
        put_int(b, json_integer_value(v));
        break;
    case JSON_REAL:
        put_real(b, json_real_value(v));
        break;
    case JSON_STRING:
        put_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_ARRAY: {
        put(b, "[", 1);
        size_t n = json_array_size(v);
        for (size_t i = 0; i < n; i++) {
            if (i)
                put(b, ",", 1);
            put_value(b, json_array_get(v, i), depth + 1, use_memo);
        }
        put(b, "]", 1);
        break;
    }
    case JSON_OBJECT: {
        const struct memo *m = use_memo ? memo_find(v) : NULL;
        if (m) {
            put(b, m->text, m->len);
            break;
        }
        put(b, "{", 1);
        bool first = true;
        for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
            if (!first)
                put(b, ",", 1);
            first = false;
            const char *key = json_object_iter_key(it);
            put_string(b, key, json_object_iter_key_len(it));
            put(b, ":", 1);
            put_value(b, json_object_iter_value(it), depth + 1, use_memo);
        }
        put(b, "}", 1);
        break;
    }
    }
}

static char *finish(struct wbuf *b, size_t *len)
{
    if (!b->failed && reserve(b, 1))
        b->p[b->len] = '\0';
    if (b->failed) {
        free(b->p);
        errno = b->too_big ? E2BIG : ENOMEM;
        return NULL;
    }
    if (len)
        *len = b->len;
    return b->p;
}

char *api_json_dumps(json_t *v, size_t *len)
{
    if (!v)
        return NULL;
    /* A response is bounded like the call that built it (callmem.h). */
    uint64_t max = callmem_budget();
    struct wbuf b = {.max = max < SIZE_MAX ? (size_t)max : 0};
    pthread_rwlock_rdlock(&memo_lock);
    put_value(&b, v, 0, true);
    pthread_rwlock_unlock(&memo_lock);
    return finish(&b, len);
}

int api_json_memo_set(json_t *obj)
{
    if (!json_is_object(obj))
        return -EINVAL;
    /* Written without the registry: obj itself is not in it yet, and rows
     * hold scalars. */
    struct wbuf b = {0};
    put_value(&b, obj, 0, false);
    size_t len = 0;
    char *text = finish(&b, &len);
    if (!text)
        return -ENOMEM;
    pthread_rwlock_wrlock(&memo_lock);
    int rc = 0;
    if (memo_find(obj)) {
        free(text); /* registered before */
    } else if ((memo_used + memo_tomb + 1) * 2 > memo_cap && memo_grow(memo_used + 1) < 0) {
        free(text);
        rc = -ENOMEM;
    } else {
        size_t mask = memo_cap - 1, i = memo_hash(obj) & mask;
        while (memo_tab[i].obj && memo_tab[i].obj != TOMB)
            i = (i + 1) & mask;
        if (memo_tab[i].obj == TOMB)
            memo_tomb--;
        memo_tab[i] = (struct memo){.obj = json_incref(obj), .text = text, .len = len};
        memo_used++;
    }
    pthread_rwlock_unlock(&memo_lock);
    return rc;
}

void api_json_memo_clear(json_t *obj)
{
    pthread_rwlock_wrlock(&memo_lock);
    struct memo *m = (struct memo *)memo_find(obj);
    json_t *drop = NULL;
    if (m) {
        free(m->text);
        drop = m->obj;
        *m = (struct memo){.obj = TOMB};
        memo_used--;
        memo_tomb++;
    }
    pthread_rwlock_unlock(&memo_lock);
    json_decref(drop); /* may free rows: outside the lock */
}

size_t api_json_memo_count(void)
{
    pthread_rwlock_rdlock(&memo_lock);
    size_t n = memo_used;
    pthread_rwlock_unlock(&memo_lock);
    return n;
}
