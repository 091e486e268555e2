/* Logging: one line per record on stderr, "I1202 18:30:00.123456 <tid>
 * file] msg" is Triton's format; Osprey keeps the level letter and time.
 * The settings are atomics: the logging API changes them at run time. */
#include "osprey/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static atomic_int verbose_level;
static atomic_bool enabled[] = {true, true, true}; /* ERROR, WARNING, INFO */
static atomic_int format;
/* Set at start-up, before any other thread logs (osp_log_set_file). */
static FILE *log_file;
static char *log_file_path;

osp_error *osp_log_set_file(const char *path) {
    FILE *fp = fopen(path, "a");
    if (!fp)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "failed to open log file '%s': %s", path,
                             strerror(errno));
    char *copy = strdup(path);
    if (!copy) {
        fclose(fp);
        return osp_error_out_of_memory();
    }
    osp_log_close_file();
    log_file = fp;
    log_file_path = copy;
    return NULL;
}

const char *osp_log_file(void) {
    return log_file_path ? log_file_path : "";
}

void osp_log_close_file(void) {
    if (log_file)
        fclose(log_file);
    free(log_file_path);
    log_file = NULL;
    log_file_path = NULL;
}

void osp_log_set_verbose(int level) {
    atomic_store(&verbose_level, level);
}

int osp_log_verbose(void) {
    return atomic_load(&verbose_level);
}

void osp_log_set_enabled(osp_log_level level, bool on) {
    if (level >= OSP_LOG_ERROR && level <= OSP_LOG_INFO)
        atomic_store(&enabled[level], on);
}

bool osp_log_enabled(osp_log_level level) {
    if (level >= OSP_LOG_ERROR && level <= OSP_LOG_INFO)
        return atomic_load(&enabled[level]);
    return osp_log_verbose() > 0;
}

void osp_log_set_format(osp_log_format f) {
    atomic_store(&format, (int)f);
}

osp_log_format osp_log_get_format(void) {
    return (osp_log_format)atomic_load(&format);
}

void osp_log(osp_log_level level, const char *fmt, ...) {
    static const char letters[] = {'E', 'W', 'I', 'V'};
    if (!osp_log_enabled(level))
        return;
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    int n;
    if (osp_log_get_format() == OSP_LOG_FORMAT_ISO8601) {
        gmtime_r(&tv.tv_sec, &tm);
        n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02dZ %c] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, letters[level & 3]);
    } else {
        localtime_r(&tv.tv_sec, &tm);
        n = snprintf(line, sizeof(line), "%c%02d%02d %02d:%02d:%02d.%06ld] ",
                     letters[level & 3], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (long)tv.tv_usec);
    }
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    /* One fprintf per record so concurrent threads do not interleave; a
     * file is flushed per record so a crash loses nothing written. */
    if (log_file) {
        fprintf(log_file, "%s\n", line);
        fflush(log_file);
    } else {
        fprintf(stderr, "%s\n", line);
    }
}
