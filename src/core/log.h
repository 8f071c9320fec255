/* Leveled logging to stderr. Thread-safe; one line per call. */
#ifndef BLOCKD_CORE_LOG_H
#define BLOCKD_CORE_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* How a line starts: a UTC timestamp and the level name (a terminal or a
 * file), or the sd-daemon(3) priority prefix "<3>".."<7>" that the journal
 * turns into the entry's priority (stderr connected to journald). */
enum log_format { LOG_FORMAT_AUTO = 0, LOG_FORMAT_PLAIN = 1, LOG_FORMAT_JOURNAL = 2 };

extern enum log_level log_current_level;

/* Any thread, any time (a reload changes it live). */
void log_set_level(enum log_level level);
/* "error" | "warn" | "info" | "debug" → 0, or -EINVAL. */
int log_parse_level(const char *s, enum log_level *out);
/* AUTO: journal prefixes when $JOURNAL_STREAM names our stderr (systemd
 * sets it for StandardError=journal), else plain. Any thread, any time. */
void log_set_format(enum log_format format);
/* "auto" | "plain" | "journal" → 0, or -EINVAL. */
int log_parse_format(const char *s, enum log_format *out);
/* Control characters in the message (a peer's name with a newline in it)
 * are written as '?', so that one call is always one line. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_at(lvl, ...)                                                                           \
    do {                                                                                           \
        if ((int)(lvl) <= (int)__atomic_load_n(&log_current_level, __ATOMIC_RELAXED))              \
            log_msg((lvl), __VA_ARGS__);                                                           \
    } while (0)
#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)

#endif
