/*
 * Which snapshots a replication sends, as TrueNAS (zettarepl) selects
 * them: by naming schema (a strftime pattern the whole snapshot name must
 * parse with, giving the time that orders snapshots) or by name regex (the
 * whole name must match; snapshots are ordered by creation). Pure
 * functions, any thread; private to src/control/ (replication.c, tests).
 */
#ifndef BLOCKD_CONFIG_REPL_SELECT_H
#define BLOCKD_CONFIG_REPL_SELECT_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Check a naming schema as TrueNAS validates one (SnapshotNameSchema):
 * only the characters [0-9A-Za-z %_.:-]; no "%%"; either "%s" alone or
 * all of %Y %m %d %H %M; not %z together with ':'. blockd parses the
 * directives %Y %m %d %H %M %S %y %z %s (others are refused here with a
 * message saying so). 0, or -EINVAL with the reason in why.
 */
int repl_schema_check(const char *schema, char *why, size_t len);

/*
 * Parse name with schema like Python's strptime: every character of name
 * must be consumed. *when receives the named time as naive seconds
 * (timegm of the fields; %s converts through local time as Python's
 * fromtimestamp does). 0, or -EINVAL when name does not match.
 */
int repl_schema_parse(const char *schema, const char *name, int64_t *when);

/*
 * Compile a TrueNAS name_regex: the whole snapshot name must match
 * (Python's re.match of "(regex)$"). blockd uses POSIX extended regular
 * expressions: Python-only syntax (\d, (?:…), lazy quantifiers) is
 * refused. 0, or -EINVAL with regerror's text in why.
 */
int repl_regex_compile(const char *regex, regex_t *out, char *why, size_t len);
bool repl_regex_match(const regex_t *re, const char *name);

#endif
