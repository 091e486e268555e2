/*
 * The tracer's writer: one thread that turns finished traces into Triton's
 * trace file records, batches them per setting (log_frequency, trace_count)
 * and writes the files, so that requests never wait for a disk.
 *
 * File format (Triton's triton mode): a file is a JSON array of compact
 * records; the records of one trace are joined with ",", traces too. A
 * setting buffers its traces and writes them
 *  - to "<file>.<idx>" as a complete "[...]" when log_frequency traces are
 *    buffered, or when trace_count has run out and every trace it took has
 *    arrived (idx is shared by the settings using that file);
 *  - otherwise when the setting is replaced or at shutdown: to the indexed
 *    file when its log_frequency is not 0, else appended to "<file>",
 *    which is opened on its first write with "[", gets "," between batches
 *    and "]" when the last setting using it goes (at the latest, shutdown).
 * Unlike Triton, memory stays bounded on a long run: a setting with
 * log_frequency 0 and no trace_count also appends to "<file>" whenever
 * more than TRACE_STREAM_FLUSH_BYTES are buffered (the file's content is
 * the same), and a batch meant for an indexed file is written early once
 * it passes TRACE_STREAM_MAX_BYTES (that file then holds fewer traces).
 * Also unlike Triton, the trace_count batch is written once every trace the
 * setting took has arrived, whatever the rate (Triton compares with the
 * number of requests seen, which only matches at rate 1).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cond_deadline.h"
#include "osprey/log.h"
#include "trace_internal.h"

#define TRACE_STREAM_FLUSH_BYTES (1u << 20)
/* A batch for an indexed file (log_frequency or trace_count traces) is
 * written early when it grows past this, so that a huge log_frequency or
 * count cannot exhaust memory. */
#define TRACE_STREAM_MAX_BYTES (64u << 20)
/* After a busy round the writer waits this long before looking again, so
 * that producers under load do not have to wake it for every trace. */
#define TRACE_WRITER_BATCH_NS (10 * 1000 * 1000)

/* ---- JSON text ---------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_sequence(const unsigned char *s, size_t n) {
    size_t len;
    uint32_t cp;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xE0) == 0xC0) {
        len = 2;
        cp = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3;
        cp = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        len = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

void trace_json_chars(bytebuf *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            size_t run = i;
            while (run < n && p[run] >= 0x20 && p[run] < 0x80 &&
                   p[run] != '"' && p[run] != '\\')
                run++;
            bytebuf_put(b, s + i, run - i);
            i = run;
            continue;
        }
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            bytebuf_put(b, esc, 2);
            i++;
            continue;
        }
        size_t seq = c >= 0x80 ? utf8_sequence(p + i, n - i) : 0;
        if (seq > 0) {
            bytebuf_put(b, s + i, seq);
            i += seq;
            continue;
        }
        switch (c) {
        case '\n':
            bytebuf_puts(b, "\\n");
            break;
        case '\r':
            bytebuf_puts(b, "\\r");
            break;
        case '\t':
            bytebuf_puts(b, "\\t");
            break;
        default:
            bytebuf_printf(b, "\\u%04x", (unsigned)c);
        }
        i++;
    }
}

/* ---- files --------------------------------------------------------------- */

trace_file *trace_file_new(osp_tracer *t, const char *name, bool in_directory) {
    trace_file *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->name = strdup(name ? name : "");
    if (!f->name) {
        free(f);
        return NULL;
    }
    f->job.kind = TRACE_JOB_FILE_CLOSE;
    f->tracer = t;
    f->refs = 1;
    f->in_directory = in_directory;
    f->fd = -1;
    pthread_mutex_lock(&t->lock);
    f->next = t->files;
    if (t->files)
        t->files->prev = f;
    t->files = f;
    pthread_mutex_unlock(&t->lock);
    return f;
}

void trace_file_ref_locked(trace_file *f) {
    f->refs++;
}

static void file_destroy(trace_file *f) {
    if (f->fd >= 0)
        close(f->fd);
    free(f->name);
    free(f);
}

void trace_file_unref(trace_file *f) {
    if (!f)
        return;
    osp_tracer *t = f->tracer;
    pthread_mutex_lock(&t->lock);
    bool last = --f->refs == 0;
    if (last) {
        if (f->prev)
            f->prev->next = f->next;
        else
            t->files = f->next;
        if (f->next)
            f->next->prev = f->prev;
        f->prev = f->next = NULL;
    }
    pthread_mutex_unlock(&t->lock);
    if (last && !trace_queue_push(t, &f->job, 0))
        file_destroy(f); /* the writer is gone: already closed */
}

static void write_error(osp_tracer *t, const char *what, const char *name) {
    uint64_t n = atomic_fetch_add(&t->write_errors, 1);
    /* A full or read-only disk would otherwise log once per batch. */
    if (n < 10)
        OSP_LOG_ERROR("trace file '%s': %s: %s", name, what, strerror(errno));
}

static int file_open(osp_tracer *t, const trace_file *f, const char *name) {
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    if (f->in_directory)
        return openat(t->dir_fd, name, flags | O_NOFOLLOW, 0644);
    return open(name, flags, 0644);
}

static bool write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Triton's TraceFile::SaveTraces: `text` (comma-joined records) goes to
 * the next "<file>.<idx>" as a whole array, or is appended to the plain
 * file. Writer thread (or shutdown after it is gone). */
static void file_save(osp_tracer *t, trace_file *f, const bytebuf *text,
                      bool to_index_file) {
    if (text->len == 0 || f->name[0] == '\0')
        return;
    if (to_index_file) {
        size_t n = strlen(f->name) + 24;
        char *path = malloc(n);
        if (!path) {
            errno = ENOMEM;
            write_error(t, "cannot name an indexed file", f->name);
            return;
        }
        snprintf(path, n, "%s.%u", f->name, f->next_index++);
        int fd = file_open(t, f, path);
        if (fd < 0 || !write_all(fd, "[", 1) ||
            !write_all(fd, text->data, text->len) || !write_all(fd, "]", 1))
            write_error(t, "cannot write", path);
        if (fd >= 0)
            close(fd);
        free(path);
        return;
    }
    if (f->closed)
        return;
    const char *sep = ",";
    if (f->fd < 0) {
        f->fd = file_open(t, f, f->name);
        if (f->fd < 0) {
            write_error(t, "cannot open", f->name);
            return;
        }
        sep = "[";
    }
    if (!write_all(f->fd, sep, 1) || !write_all(f->fd, text->data, text->len))
        write_error(t, "cannot write", f->name);
}

static void file_close(osp_tracer *t, trace_file *f) {
    if (f->fd >= 0 && !f->closed && !write_all(f->fd, "]", 1))
        write_error(t, "cannot write", f->name);
    f->closed = true;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

/* ---- settings' buffered output ------------------------------------------- */

void trace_setting_destroy(trace_setting *s) {
    osp_tracer *t = s->tracer;
    pthread_mutex_lock(&t->lock);
    if (s->prev)
        s->prev->next = s->next;
    else if (t->settings == s)
        t->settings = s->next;
    if (s->next)
        s->next->prev = s->prev;
    pthread_mutex_unlock(&t->lock);
    trace_file_unref(s->file);
    bytebuf_free(&s->stream);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void trace_setting_unref(trace_setting *s) {
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    if (!trace_queue_push(s->tracer, &s->job, 0))
        trace_setting_destroy(s); /* shutdown already wrote its traces */
}

/* Writes what the setting still buffers (Triton's ~TraceSetting). */
static void setting_flush(osp_tracer *t, trace_setting *s) {
    if (s->sample_in_stream != 0)
        file_save(t, s->file, &s->stream, s->log_frequency != 0);
    s->sample_in_stream = 0;
    bytebuf_free(&s->stream);
}

/* ---- the record format --------------------------------------------------- */

/* Decimal digits without printf: formatting runs once per record, and
 * vsnprintf was most of the writer's time. */
static void put_u64(bytebuf *b, uint64_t v) {
    char digits[20];
    size_t n = 0;
    do {
        digits[sizeof(digits) - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    bytebuf_put(b, digits + sizeof(digits) - n, n);
}

static void put_i64(bytebuf *b, int64_t v) {
    if (v < 0) {
        bytebuf_putc(b, '-');
        put_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        put_u64(b, (uint64_t)v);
    }
}

#define PUT_LITERAL(b, s) bytebuf_put((b), (s), sizeof(s) - 1)

/* `{"id":N,` preceded by "," unless it is the trace's first record. */
static void put_record_start(bytebuf *b, uint64_t id, bool *first) {
    if (*first)
        PUT_LITERAL(b, "{\"id\":");
    else
        PUT_LITERAL(b, ",{\"id\":");
    put_u64(b, id);
    bytebuf_putc(b, ',');
    *first = false;
}

static void put_tensors(bytebuf *b, const osp_trace *tr,
                        osp_trace_tensor_activity which, bool *first) {
    for (const trace_tensor *x = tr->tensors; x; x = x->next) {
        if (x->activity != which)
            continue;
        put_record_start(b, tr->id, first);
        bytebuf_put(b, x->text, x->len);
    }
}

/* Appends the trace's records to b, comma-joined, in activity order; the
 * model record right before REQUEST_START, each tensor kind after the
 * stage it belongs to. Returns false when there was nothing to write. */
static bool format_trace(bytebuf *b, const osp_trace *tr) {
    bool first = true;
    bool stamps = tr->level & OSP_TRACE_LEVEL_TIMESTAMPS;
    bool tensors = tr->level & OSP_TRACE_LEVEL_TENSORS;
    for (int a = 0; a < OSP_TRACE_ACTIVITY_COUNT_; a++) {
        if (stamps && a == OSP_TRACE_REQUEST_START && tr->model_name) {
            put_record_start(b, tr->id, &first);
            PUT_LITERAL(b, "\"model_name\":\"");
            trace_json_chars(b, tr->model_name, strlen(tr->model_name));
            PUT_LITERAL(b, "\",\"model_version\":");
            put_i64(b, tr->model_version);
            if (tr->request_id && tr->request_id[0]) {
                PUT_LITERAL(b, ",\"request_id\":\"");
                trace_json_chars(b, tr->request_id, strlen(tr->request_id));
                bytebuf_putc(b, '"');
            }
            if (tr->parent_id) {
                PUT_LITERAL(b, ",\"parent_id\":");
                put_i64(b, (int64_t)tr->parent_id);
            }
            bytebuf_putc(b, '}');
        }
        if (stamps && tr->ns[a] != 0) {
            put_record_start(b, tr->id, &first);
            PUT_LITERAL(b, "\"timestamps\":[{\"name\":\"");
            bytebuf_puts(b, osp_trace_activity_name((osp_trace_activity)a));
            PUT_LITERAL(b, "\",\"ns\":");
            put_u64(b, tr->ns[a]);
            PUT_LITERAL(b, "}]}");
        }
        if (!tensors)
            continue;
        if (a == OSP_TRACE_QUEUE_START)
            put_tensors(b, tr, OSP_TRACE_TENSOR_QUEUE_INPUT, &first);
        else if (a == OSP_TRACE_COMPUTE_START)
            put_tensors(b, tr, OSP_TRACE_TENSOR_BACKEND_INPUT, &first);
        else if (a == OSP_TRACE_COMPUTE_OUTPUT_START)
            put_tensors(b, tr, OSP_TRACE_TENSOR_BACKEND_OUTPUT, &first);
    }
    return !first;
}

/* Triton's TraceSetting::WriteTrace: the trace joins the setting's
 * buffered traces, which go to a file when a batch is complete. */
static void write_trace(osp_tracer *t, osp_trace *tr) {
    trace_setting *s = tr->setting;
    bytebuf *b = &s->stream;
    size_t before = b->len;
    s->collected++;
    if (s->sample_in_stream != 0)
        bytebuf_putc(b, ',');
    bool any = format_trace(b, tr);
    if (b->oom) {
        /* What is buffered is incomplete: drop it rather than write a
         * broken array. */
        errno = ENOMEM;
        write_error(t, "out of memory buffering traces", s->file->name);
        bytebuf_free(b);
        s->sample_in_stream = 0;
        return;
    }
    if (any) {
        s->sample_in_stream++;
        atomic_fetch_add(&t->written, 1);
    } else {
        b->len = before; /* nothing to write: no dangling comma */
    }
    if (s->sample_in_stream == 0)
        return;

    pthread_mutex_lock(&s->mu);
    bool counted = s->count != -1; /* its batch goes to an indexed file */
    bool count_done =
        s->count == 0 && s->collected + atomic_load(&s->dropped) >= s->created;
    pthread_mutex_unlock(&s->mu);
    bool indexed = counted || s->log_frequency != 0;
    bool to_index =
        count_done ||
        (s->log_frequency != 0 && s->sample_in_stream >= s->log_frequency) ||
        (indexed && b->len >= TRACE_STREAM_MAX_BYTES);
    if (to_index || (!indexed && b->len >= TRACE_STREAM_FLUSH_BYTES)) {
        file_save(t, s->file, b, to_index);
        b->len = 0; /* keep the buffer for the next batch */
        s->sample_in_stream = 0;
    }
}

static void run_job(osp_tracer *t, trace_job *job) {
    switch (job->kind) {
    case TRACE_JOB_TRACE: {
        osp_trace *tr = (osp_trace *)job;
        write_trace(t, tr);
        trace_free(tr);
        break;
    }
    case TRACE_JOB_SETTING_DONE: {
        trace_setting *s = (trace_setting *)job;
        setting_flush(t, s);
        trace_setting_destroy(s);
        break;
    }
    case TRACE_JOB_FILE_CLOSE: {
        trace_file *f = (trace_file *)job;
        file_close(t, f);
        file_destroy(f);
        break;
    }
    }
}

/* ---- the queue and the thread -------------------------------------------- */

bool trace_queue_push(osp_tracer *t, trace_job *job, size_t bytes) {
    pthread_mutex_lock(&t->qlock);
    bool ok = !t->writer_gone;
    if (ok && job->kind == TRACE_JOB_TRACE) {
        ok = bytes <= t->max_pending_bytes &&
             t->pending_bytes <= t->max_pending_bytes - bytes;
        if (ok)
            t->pending_bytes += bytes;
    }
    if (ok) {
        job->next = NULL;
        if (t->qtail)
            t->qtail->next = job;
        else
            t->qhead = job;
        t->qtail = job;
        if (t->writer_idle)
            pthread_cond_signal(&t->qcond);
    }
    pthread_mutex_unlock(&t->qlock);
    return ok;
}

static void *writer_main(void *arg) {
    osp_tracer *t = arg;
    pthread_mutex_lock(&t->qlock);
    for (;;) {
        while (!t->qhead && !t->stopping) {
            t->writer_idle = true;
            pthread_cond_wait(&t->qcond, &t->qlock);
            t->writer_idle = false;
        }
        if (!t->qhead)
            break; /* stopping and drained */
        trace_job *jobs = t->qhead;
        t->qhead = t->qtail = NULL;
        t->pending_bytes = 0;
        pthread_mutex_unlock(&t->qlock);
        while (jobs) {
            trace_job *next = jobs->next;
            run_job(t, jobs);
            jobs = next;
        }
        pthread_mutex_lock(&t->qlock);
        if (!t->qhead && !t->stopping) {
            /* Busy: collect for a moment instead of being woken per trace. */
            cond_wait_until(&t->qcond, &t->qlock,
                            deadline_after_ns(TRACE_WRITER_BATCH_NS));
        }
    }
    t->writer_gone = true;
    pthread_mutex_unlock(&t->qlock);
    return NULL;
}

osp_error *trace_writer_start(osp_tracer *t) {
    if (pthread_create(&t->writer, NULL, writer_main, t) != 0)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "cannot start the trace writer thread");
    t->writer_started = true;
    return NULL;
}

void trace_writer_stop(osp_tracer *t) {
    pthread_mutex_lock(&t->qlock);
    t->stopping = true;
    pthread_cond_signal(&t->qcond);
    pthread_mutex_unlock(&t->qlock);
    if (t->writer_started)
        pthread_join(t->writer, NULL);
    t->writer_started = false;
    pthread_mutex_lock(&t->qlock);
    t->writer_gone = true;
    pthread_mutex_unlock(&t->qlock);

    /* Settings and files still referenced by traces in flight (a shutdown
     * that could not wait for them): write and close them now; what those
     * traces bring later is discarded. */
    pthread_mutex_lock(&t->lock);
    for (trace_setting *s = t->settings; s; s = s->next)
        setting_flush(t, s);
    for (trace_file *f = t->files; f; f = f->next)
        file_close(t, f);
    pthread_mutex_unlock(&t->lock);
}
