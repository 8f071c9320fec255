#include "core/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum log_level log_current_level = LOG_INFO;
/* Resolved (never AUTO); 0 until the first line or log_set_format. */
static int journal_prefix = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
/* syslog priorities: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */
static const char *const journal_prefixes[] = {"<3>", "<4>", "<6>", "<7>"};
static const char *const format_names[] = {"auto", "plain", "journal"};

void log_set_level(enum log_level level)
{
    __atomic_store_n(&log_current_level, level, __ATOMIC_RELAXED);
}

int log_parse_level(const char *s, enum log_level *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

int log_parse_format(const char *s, enum log_format *out)
{
    for (size_t i = 0; i < sizeof(format_names) / sizeof(format_names[0]); i++) {
        if (strcmp(s, format_names[i]) == 0) {
            *out = (enum log_format)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* $JOURNAL_STREAM is "DEV:INODE" of the stream systemd connected; it is
 * inherited by children whose stderr may go elsewhere, so compare. */
static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    if (!js || !*js)
        return false;
    unsigned long long dev, ino;
    char tail;
    if (sscanf(js, "%llu:%llu%c", &dev, &ino, &tail) != 2)
        return false;
    struct stat st;
    if (fstat(STDERR_FILENO, &st) < 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_format(enum log_format format)
{
    int j = format == LOG_FORMAT_JOURNAL || (format == LOG_FORMAT_AUTO && stderr_is_journal());
    __atomic_store_n(&journal_prefix, j, __ATOMIC_RELAXED);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    int journal = __atomic_load_n(&journal_prefix, __ATOMIC_RELAXED);
    if (journal < 0) {
        log_set_format(LOG_FORMAT_AUTO);
        journal = __atomic_load_n(&journal_prefix, __ATOMIC_RELAXED);
    }
    /* Format the whole line first so concurrent threads never interleave. */
    char line[2048];
    int n;
    if (journal) {
        /* The journal stamps each line itself. */
        n = snprintf(line, sizeof(line), "%s", journal_prefixes[level]);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[level]);
    }
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    for (size_t i = (size_t)n; i < len; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = '?';
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}
