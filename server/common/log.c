/* Logging: one record per line on stderr (or the log file), in Triton's
 * format: "I1202 18:30:00.123456 <pid> <file>:<line>] "<message>"" (UTC,
 * the message a JSON string) or, with --log-format=ISO8601,
 * "2026-12-02T18:30:00Z I <pid> <file>:<line>] ...". The settings are
 * atomics: the logging API changes them at run time. */
#include "osprey/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

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

/* Whether messages are written as JSON strings: Triton escapes them
 * unless TRITON_SERVER_ESCAPE_LOG_MESSAGES is "0" or "false" (any case).
 * Read once; -1 until then. */
static atomic_int escape_messages = -1;

static bool escaping(void) {
    int e = atomic_load(&escape_messages);
    if (e < 0) {
        const char *v = getenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES");
        e = !(v && (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0));
        atomic_store(&escape_messages, e);
    }
    return e;
}

/* Appends `msg` to out[*at..cap) as a JSON string (quotes included), as
 * Triton escapes a record; stops before an escape that would not fit. */
static void append_escaped(char *out, size_t cap, size_t *at, const char *msg) {
    size_t n = *at;
    if (n + 2 >= cap)
        return;
    out[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        char esc[8];
        const char *named = *p == '"'    ? "\\\""
                            : *p == '\\' ? "\\\\"
                            : *p == '\n'  ? "\\n"
                            : *p == '\r'  ? "\\r"
                            : *p == '\t'  ? "\\t"
                            : *p == '\b'  ? "\\b"
                            : *p == '\f'  ? "\\f"
                                          : NULL;
        size_t len;
        if (named)
            len = (size_t)snprintf(esc, sizeof esc, "%s", named);
        else if (*p < 0x20)
            len = (size_t)snprintf(esc, sizeof esc, "\\u%04x", *p);
        else
            esc[0] = (char)*p, len = 1;
        if (n + len + 2 > cap)
            break;
        memcpy(out + n, esc, len);
        n += len;
    }
    out[n++] = '"';
    out[n] = '\0';
    *at = n;
}

void osp_log_at(osp_log_level level, const char *file, int line,
                const char *fmt, ...) {
    /* Triton's letters: verbose records are 'I' too */
    static const char letters[] = {'E', 'W', 'I', 'I'};
    if (!osp_log_enabled(level))
        return;
    char message[2048], record[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    const char *slash = strrchr(file, '/');
    file = slash ? slash + 1 : file;
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    unsigned pid = (unsigned)getpid();
    int n;
    if (osp_log_get_format() == OSP_LOG_FORMAT_ISO8601)
        n = snprintf(record, sizeof record,
                     "%04d-%02d-%02dT%02d:%02d:%02dZ %c %u %s:%d] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, letters[level & 3], pid, file, line);
    else
        n = snprintf(record, sizeof record,
                     "%c%02d%02d %02d:%02d:%02d.%06ld %u %s:%d] ",
                     letters[level & 3], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (long)tv.tv_usec, pid, file, line);
    size_t at = n > 0 && (size_t)n < sizeof record ? (size_t)n : 0;
    if (escaping())
        append_escaped(record, sizeof record, &at, message);
    else
        snprintf(record + at, sizeof record - at, "%s", message);
    /* One fprintf per record so concurrent threads do not interleave; a
     * file is flushed per record so a crash loses nothing written.
     * Every record goes to stderr when there is no file, as Triton's. */
    FILE *out = log_file ? log_file : stderr;
    fprintf(out, "%s\n", record);
    if (log_file)
        fflush(log_file);
}
