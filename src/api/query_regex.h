/*
 * Bounds on the "~" query filter (POSIX extended regular expressions).
 *
 * glibc's regcomp expands a bounded repetition by copying its operand, so
 * "(a{32767}){32767}" asks for ~10^9 nodes (the daemon grew past 6 GiB in
 * 42 s); and matching with submatch tracking or back-references can take
 * seconds per row. So, before regcomp:
 *   - the pattern is parsed and its expanded size estimated (a{m,n} copies
 *     its operand max(m, n) times, nested repetitions multiply); over
 *     QUERY_REGEX_COST_MAX it is refused, as is a call whose patterns add
 *     up to more than QUERY_REGEX_CALL_COST_MAX;
 *   - back-references (\1..\9) are refused (their matching is exponential),
 *     as are unbalanced parentheses (the pattern is compiled as "^(P)").
 * The query engine then compiles "^(P)" with REG_NOSUB (no submatch
 * registers: glibc matches with its DFA, time linear in the subject), and
 * counts matching work per call: (subject length + 1) x pattern cost per
 * regexec, at most QUERY_REGEX_WORK_MAX per call.
 * Measured with glibc 2.36: a pattern at the cost limit compiles in
 * < 60 ms in < 3 MiB.
 */
#ifndef BLOCKD_API_QUERY_REGEX_H
#define BLOCKD_API_QUERY_REGEX_H

#include <stddef.h>
#include <stdint.h>

#define QUERY_REGEX_COST_MAX 1000u
#define QUERY_REGEX_CALL_COST_MAX 4000u
#define QUERY_REGEX_WORK_MAX (64ull << 20)
#define QUERY_REGEX_DEPTH_MAX 32

/* Estimate the expanded size of the ERE pat[0..len). 0 and *cost, or
 * -EINVAL with the reason in why (too complex, back-reference, unbalanced
 * or unterminated). Pure; any thread. */
int query_regex_cost(const char *pat, size_t len, uint64_t *cost, char *why, size_t whylen);

#endif
