/* Logging: one line per record on stderr, "I1202 18:30:00.123456 <tid>
 * file] msg" is Triton's format; Osprey keeps the level letter and time. */
#include "osprey/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static int verbose_level;

void osp_log_set_verbose(int level) {
    verbose_level = level;
}

int osp_log_verbose(void) {
    return verbose_level;
}

void osp_log(osp_log_level level, const char *fmt, ...) {
    static const char letters[] = {'E', 'W', 'I', 'V'};
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%c%02d%02d %02d:%02d:%02d.%06ld] ",
                     letters[level & 3], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (long)tv.tv_usec);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    /* One fputs per record so concurrent threads do not interleave. */
    fprintf(stderr, "%s\n", line);
}
