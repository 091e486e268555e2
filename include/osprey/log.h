/* Logging to stderr (or --log-file), Triton-style one-line records. */
#pragma once

#include <stdbool.h>

#include "osprey/error.h"

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

/* Record prefix, as Triton's: "I1202 18:30:00.123456 <pid> <file>:<line>] "
 * (default, UTC) or "2026-12-02T18:30:00Z I <pid> <file>:<line>] "
 * (ISO8601). The message follows as a JSON string unless the environment
 * sets TRITON_SERVER_ESCAPE_LOG_MESSAGES to 0 or false. */
typedef enum osp_log_format {
    OSP_LOG_FORMAT_DEFAULT = 0,
    OSP_LOG_FORMAT_ISO8601,
} osp_log_format;
void osp_log_set_format(osp_log_format format);
osp_log_format osp_log_get_format(void);
/* Sends every later record to the file at `path` (borrowed; opened for
 * appending, as Triton's --log-file) instead of stderr; a later call
 * replaces the file. Call before other threads log. INVALID_ARG naming the
 * path and the system's reason when it cannot be opened. */
osp_error *osp_log_set_file(const char *path);
/* The path of the log file, "" while logging to stderr. */
const char *osp_log_file(void);
/* Closes the log file; records go to stderr again. */
void osp_log_close_file(void);

/* One record written at `file` (borrowed; its last path component is
 * shown) and `line`; use the macros below. */
void osp_log_at(osp_log_level level, const char *file, int line,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define OSP_LOG_ERROR(...)                                                     \
    osp_log_at(OSP_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define OSP_LOG_WARN(...)                                                      \
    osp_log_at(OSP_LOG_WARNING, __FILE__, __LINE__, __VA_ARGS__)
#define OSP_LOG_INFO(...)                                                      \
    osp_log_at(OSP_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define OSP_LOG_VERBOSE(...)                                                   \
    do {                                                                       \
        if (osp_log_verbose() > 0)                                             \
            osp_log_at(OSP_LOG_VERBOSE, __FILE__, __LINE__, __VA_ARGS__);      \
    } while (0)

#ifdef __cplusplus
}
#endif
