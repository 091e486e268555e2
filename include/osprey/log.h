/* Logging to stderr, Triton-style one-line records. */
#pragma once

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum osp_log_level {
    OSP_LOG_ERROR = 0,
    OSP_LOG_WARNING,
    OSP_LOG_INFO,
    OSP_LOG_VERBOSE,
} osp_log_level;

/* Verbose records print only when the verbosity (--log-verbose) >= 1. */
void osp_log_set_verbose(int level);
int osp_log_verbose(void);

/* Whether records of ERROR, WARNING and INFO print (all on by default;
 * --log-error, --log-warning, --log-info and the logging API). Safe to
 * change while other threads log. */
void osp_log_set_enabled(osp_log_level level, bool on);
bool osp_log_enabled(osp_log_level level);

/* Record prefix: "I1202 18:30:00.123456] " (default, Triton's glog style)
 * or "2026-12-02T18:30:00Z I] " (ISO8601). */
typedef enum osp_log_format {
    OSP_LOG_FORMAT_DEFAULT = 0,
    OSP_LOG_FORMAT_ISO8601,
} osp_log_format;
void osp_log_set_format(osp_log_format format);
osp_log_format osp_log_get_format(void);
void osp_log(osp_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define OSP_LOG_ERROR(...) osp_log(OSP_LOG_ERROR, __VA_ARGS__)
#define OSP_LOG_WARN(...) osp_log(OSP_LOG_WARNING, __VA_ARGS__)
#define OSP_LOG_INFO(...) osp_log(OSP_LOG_INFO, __VA_ARGS__)
#define OSP_LOG_VERBOSE(...)                                                   \
    do {                                                                       \
        if (osp_log_verbose() > 0)                                             \
            osp_log(OSP_LOG_VERBOSE, __VA_ARGS__);                             \
    } while (0)

#ifdef __cplusplus
}
#endif
