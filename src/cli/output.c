/* blockctl output helpers: tables, sizes, messages, property access. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/util.h"

struct cli_table {
    size_t ncols;
    char **headers;
    char ***rows;
    size_t nrows, cap;
};

struct cli_table *cli_table_new(size_t ncols, const char *const *headers)
{
    struct cli_table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->ncols = ncols;
    t->headers = calloc(ncols, sizeof(char *));
    for (size_t i = 0; i < ncols; i++)
        t->headers[i] = strdup(headers[i]);
    return t;
}

void cli_table_add(struct cli_table *t, const char *const *cells)
{
    if (!t)
        return;
    if (t->nrows == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        char ***n = realloc(t->rows, ncap * sizeof(*n));
        if (!n)
            return;
        t->rows = n;
        t->cap = ncap;
    }
    char **row = calloc(t->ncols, sizeof(char *));
    if (!row)
        return;
    for (size_t i = 0; i < t->ncols; i++)
        row[i] = strdup(cells[i] ? cells[i] : "-");
    t->rows[t->nrows++] = row;
}

static const char *header_text(const char *h)
{
    return h[0] == '>' ? h + 1 : h;
}

void cli_table_print(struct cli_table *t, FILE *out)
{
    if (!t)
        return;
    size_t *w = calloc(t->ncols, sizeof(size_t));
    if (!w)
        return;
    for (size_t c = 0; c < t->ncols; c++) {
        w[c] = strlen(header_text(t->headers[c]));
        for (size_t r = 0; r < t->nrows; r++) {
            size_t l = strlen(t->rows[r][c]);
            if (l > w[c])
                w[c] = l;
        }
    }
    for (size_t r = 0; r <= t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *cell = r == 0 ? header_text(t->headers[c]) : t->rows[r - 1][c];
            bool right = t->headers[c][0] == '>';
            bool last = c + 1 == t->ncols;
            if (right)
                fprintf(out, "%*s%s", (int)w[c], cell, last ? "" : "  ");
            else if (last)
                fprintf(out, "%s", cell);
            else
                fprintf(out, "%-*s  ", (int)w[c], cell);
        }
        fputc('\n', out);
    }
    free(w);
}

void cli_table_free(struct cli_table *t)
{
    if (!t)
        return;
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++)
            free(t->rows[r][c]);
        free(t->rows[r]);
    }
    for (size_t c = 0; c < t->ncols; c++)
        free(t->headers[c]);
    free(t->headers);
    free(t->rows);
    free(t);
}

void cli_vmessage(const char *fmt, va_list ap)
{
    fputs("blockctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vmessage(fmt, ap);
    va_end(ap);
    return CLI_ERROR;
}

void cli_print_json(json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY);
    if (s) {
        puts(s);
        free(s);
    }
}

int cli_parse_size(const char *s, uint64_t *out)
{
    return parse_size(s, out);
}

void cli_format_size(uint64_t v, char *buf, size_t len)
{
    format_size(v, buf, len);
}

static bool str_to_u64(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return false;
    return parse_size(s, out) == 0;
}

bool cli_prop_int(json_t *row, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(row, key);
    if (json_is_object(v)) {
        json_t *p = json_object_get(v, "parsed");
        if (json_is_integer(p)) {
            *out = (uint64_t)json_integer_value(p);
            return true;
        }
        if (str_to_u64(json_string_value(json_object_get(v, "rawvalue")), out))
            return true;
        v = json_object_get(v, "value");
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v) && json_real_value(v) >= 0) {
        *out = (uint64_t)json_real_value(v);
        return true;
    }
    return str_to_u64(json_string_value(v), out);
}

const char *cli_prop_str(json_t *row, const char *key)
{
    json_t *v = json_object_get(row, key);
    if (json_is_object(v)) {
        json_t *s = json_object_get(v, "value");
        if (!json_is_string(s))
            s = json_object_get(v, "rawvalue");
        v = s;
    }
    if (json_is_true(v))
        return "true";
    if (json_is_false(v))
        return "false";
    return json_string_value(v);
}
