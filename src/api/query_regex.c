/* Size estimate of a POSIX ERE before glibc expands it (query_regex.h). */
#include "api/query_regex.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

struct rp {
    const char *p, *end;
    int depth;
    char *why;
    size_t whylen;
    bool bad;
};

/* Above the limit the exact value no longer matters: saturate, so the
 * products of nested repetitions cannot overflow. */
#define COST_CAP ((uint64_t)QUERY_REGEX_COST_MAX + 1)

static uint64_t sat(uint64_t v)
{
    return v > COST_CAP ? COST_CAP : v;
}

static void fail(struct rp *r, const char *msg)
{
    if (!r->bad)
        snprintf(r->why, r->whylen, "%s", msg);
    r->bad = true;
}

static uint64_t parse_alt(struct rp *r);

/* [...] with classes [:alpha:], equivalence [=a=] and collating [.a.]. */
static void skip_bracket(struct rp *r)
{
    r->p++; /* '[' */
    if (r->p < r->end && *r->p == '^')
        r->p++;
    if (r->p < r->end && *r->p == ']')
        r->p++; /* a leading ']' is literal */
    while (r->p < r->end && *r->p != ']') {
        if (*r->p == '[' && r->p + 1 < r->end &&
            (r->p[1] == ':' || r->p[1] == '=' || r->p[1] == '.')) {
            char kind = r->p[1];
            r->p += 2;
            while (r->p + 1 < r->end && !(r->p[0] == kind && r->p[1] == ']'))
                r->p++;
            if (r->p + 1 >= r->end) {
                fail(r, "unterminated character class");
                return;
            }
            r->p += 2;
        } else {
            r->p++;
        }
    }
    if (r->p >= r->end) {
        fail(r, "unterminated bracket expression");
        return;
    }
    r->p++; /* ']' */
}

/* {m}, {m,}, {m,n}: the number of copies glibc makes, or 0 if this '{'
 * does not start a valid interval (then it is a literal). */
static uint64_t parse_interval(struct rp *r)
{
    const char *q = r->p + 1;
    uint64_t m = 0, n = 0;
    bool has_n = false, comma = false;
    int digits = 0;

    while (q < r->end && *q >= '0' && *q <= '9' && digits < 7) {
        m = m * 10 + (uint64_t)(*q++ - '0');
        digits++;
    }
    if (digits == 0 && !(q < r->end && *q == ','))
        return 0; /* glibc reads "{,n}" as "{0,n}" */
    if (q < r->end && *q == ',') {
        comma = true;
        q++;
        digits = 0;
        while (q < r->end && *q >= '0' && *q <= '9' && digits < 7) {
            n = n * 10 + (uint64_t)(*q++ - '0');
            digits++;
        }
        has_n = digits > 0;
    }
    if (q >= r->end || *q != '}')
        return 0;
    r->p = q + 1;
    if (m > 32767 || n > 32767 || (has_n && n < m)) {
        fail(r, "invalid repetition count");
        return 1;
    }
    if (has_n)
        return n ? n : 1;
    return comma ? m + 1 : (m ? m : 1);
}

static uint64_t parse_atom(struct rp *r)
{
    char c = *r->p;

    if (c == '(') {
        if (++r->depth > QUERY_REGEX_DEPTH_MAX) {
            fail(r, "parentheses nested too deeply");
            return COST_CAP;
        }
        r->p++;
        uint64_t inner = parse_alt(r);
        if (r->p >= r->end || *r->p != ')') {
            fail(r, "unbalanced parentheses");
            return COST_CAP;
        }
        r->p++;
        r->depth--;
        return sat(inner + 2);
    }
    if (c == '[') {
        skip_bracket(r);
        return 1;
    }
    if (c == '\\') {
        if (r->p + 1 >= r->end) {
            fail(r, "trailing backslash");
            return 1;
        }
        if (r->p[1] >= '1' && r->p[1] <= '9') {
            fail(r, "back-references (\\1..\\9) are not supported");
            return COST_CAP;
        }
        r->p += 2;
        return 1;
    }
    r->p++; /* '.', '^', '$', a literal, or a quantifier with no operand */
    return 1;
}

static uint64_t parse_seq(struct rp *r)
{
    uint64_t total = 0;

    while (r->p < r->end && *r->p != '|' && *r->p != ')' && !r->bad) {
        uint64_t c = parse_atom(r);
        for (;;) {
            if (r->p >= r->end)
                break;
            if (*r->p == '*' || *r->p == '?') {
                c = sat(c + 1);
                r->p++;
            } else if (*r->p == '+') {
                c = sat(2 * c + 1); /* a+ is a a* */
                r->p++;
            } else if (*r->p == '{') {
                uint64_t copies = parse_interval(r);
                if (!copies)
                    break; /* a literal '{', read as the next atom */
                c = sat(c * copies + 1);
            } else {
                break;
            }
        }
        total = sat(total + c);
    }
    return total;
}

static uint64_t parse_alt(struct rp *r)
{
    uint64_t total = parse_seq(r);

    while (r->p < r->end && *r->p == '|' && !r->bad) {
        r->p++;
        total = sat(total + parse_seq(r) + 1);
    }
    return total;
}

int query_regex_cost(const char *pat, size_t len, uint64_t *cost, char *why, size_t whylen)
{
    struct rp r = {.p = pat, .end = pat + len, .why = why, .whylen = whylen};
    uint64_t c = parse_alt(&r);

    if (!r.bad && r.p < r.end)
        fail(&r, "unbalanced parentheses"); /* a ')' with no '(' */
    if (!r.bad && c > QUERY_REGEX_COST_MAX) {
        snprintf(why, whylen,
                 "regular expression too complex (expands to more than %u nodes: nested or "
                 "large {m,n} repetitions)",
                 QUERY_REGEX_COST_MAX);
        r.bad = true;
    }
    if (r.bad)
        return -EINVAL;
    *cost = c ? c : 1;
    return 0;
}
