/* Leveled logging to stderr. Thread-safe; one line per call. */
#ifndef BLOCKD_CORE_LOG_H
#define BLOCKD_CORE_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern enum log_level log_current_level;

void log_set_level(enum log_level level);
/* "error" | "warn" | "info" | "debug" → 0, or -EINVAL. */
int log_parse_level(const char *s, enum log_level *out);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_at(lvl, ...)                                                                           \
    do {                                                                                           \
        if ((lvl) <= log_current_level)                                                            \
            log_msg((lvl), __VA_ARGS__);                                                           \
    } while (0)
#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)

#endif
