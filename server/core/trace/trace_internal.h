/*
 * Inside the tracer (trace.c: settings, sampling, traces; trace_file.c: the
 * writer thread, trace files and the record format).
 *
 * Objects and who touches what:
 *  - trace_setting: one per global/model setting version. Immutable after
 *    creation except the sampling counters (under its `mu`) and the
 *    buffered output (`stream` & co), which only the writer thread touches.
 *    Reference-counted: the tracer's table holds one reference, each live
 *    trace another. When the last one goes, a "setting done" job asks the
 *    writer to write what is still buffered (Triton's ~TraceSetting).
 *  - trace_file: one per trace file name in use; settings share it, so the
 *    <file>.<idx> index is shared too. Reference count under tracer->lock;
 *    the writer owns the descriptor and the index. When the last setting
 *    lets go, a "file close" job writes the closing "]".
 *  - osp_trace: owned by a frontend until osp_trace_end, then queued for
 *    the writer (the queue is bounded in bytes; a trace that does not fit
 *    is dropped and counted).
 *
 * Lock order: tracer->lock, then a setting's mu, then tracer->qlock. No
 * function that may take tracer->lock is called with qlock held.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bytebuf.h"
#include "osprey/trace.h"

/* ---- text ---------------------------------------------------------------- */

/* The bytes as the inside of a JSON string: '"', '\\' and control
 * characters escaped, valid UTF-8 kept, any other byte as \u00XX, so the
 * output is always valid JSON whatever the input. */
void trace_json_chars(bytebuf *b, const char *s, size_t n);

/* ---- writer jobs --------------------------------------------------------- */

typedef enum trace_job_kind {
    TRACE_JOB_TRACE = 0,    /* an osp_trace to write */
    TRACE_JOB_SETTING_DONE, /* a trace_setting nobody refers to any more */
    TRACE_JOB_FILE_CLOSE,   /* a trace_file nobody refers to any more */
} trace_job_kind;

typedef struct trace_job {
    struct trace_job *next;
    trace_job_kind kind;
} trace_job;

/* ---- files, settings, traces --------------------------------------------- */

typedef struct trace_file {
    trace_job job; /* first: the close job */
    osp_tracer *tracer;
    int refs;          /* under tracer->lock */
    char *name;        /* as shown by GET; "" = none */
    bool in_directory; /* name is relative to tracer->dir_fd */
    /* writer thread only (or the shutdown thread once the writer is gone) */
    unsigned next_index;
    int fd;                         /* the plain file, once opened; -1 before */
    bool closed;                    /* "]" written: nothing more goes to it */
    struct trace_file *prev, *next; /* tracer->files, under tracer->lock */
} trace_file;

typedef struct trace_setting {
    trace_job job; /* first: the "done" job */
    osp_tracer *tracer;
    atomic_int refs;
    unsigned level;
    uint32_t rate;
    uint32_t log_frequency;
    trace_file *file; /* holds a reference */
    bool level_specified;
    bool rate_specified;
    bool count_specified;
    bool log_frequency_specified;
    bool file_specified;
    /* Static text; NULL when valid (besides count). */
    const char *invalid_reason;

    pthread_mutex_t mu; /* the sampling state below */
    int32_t count;      /* remaining; -1 = no limit; 0 = sampling stopped */
    uint64_t sample;    /* requests seen */
    uint64_t created;   /* traces taken */
    atomic_uint_fast64_t dropped; /* taken but never reached the writer */

    /* writer thread only */
    bytebuf stream; /* traces not yet in a file, comma-joined */
    uint32_t sample_in_stream;
    uint64_t collected; /* traces the writer has seen */

    struct trace_setting *prev, *next; /* tracer->settings, under lock */
    struct trace_setting *retired;     /* scratch list in updates */
} trace_setting;

typedef struct trace_tensor {
    struct trace_tensor *next;
    osp_trace_tensor_activity activity;
    size_t len;
    char text[]; /* the record after `{"id":N,` */
} trace_tensor;

struct osp_trace {
    trace_job job;          /* first */
    trace_setting *setting; /* holds a reference */
    uint64_t id;
    uint64_t parent_id; /* the ensemble's trace of a step's; 0 = none */
    unsigned level;
    uint64_t ns[OSP_TRACE_ACTIVITY_COUNT_];
    char *model_name; /* NULL until set */
    int64_t model_version;
    char *request_id; /* NULL = none */
    trace_tensor *tensors, *tensors_tail;
    size_t bytes; /* approximate memory, for the writer's bound */
};

typedef struct model_setting {
    char *model;
    trace_setting *setting; /* holds a reference */
} model_setting;

struct osp_tracer {
    pthread_mutex_t lock;
    trace_setting *global_default; /* the startup values */
    trace_setting *global;
    model_setting *models;
    size_t n_models;
    size_t cap_models;
    trace_file *files;       /* every live file */
    trace_setting *settings; /* every live setting */
    bool shut;
    atomic_bool active; /* some setting might sample */
    atomic_uint_fast64_t next_id;
    int dir_fd; /* -1 without a file directory */

    /* writer queue */
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    trace_job *qhead, *qtail;
    size_t pending_bytes;
    size_t max_pending_bytes;
    bool writer_idle; /* waiting without a timeout: wake it */
    bool stopping;
    bool writer_gone; /* the queue refuses jobs */
    bool writer_started;
    pthread_t writer;

    atomic_uint_fast64_t written;
    atomic_uint_fast64_t dropped;
    atomic_uint_fast64_t write_errors;
};

/* ---- trace_file.c -------------------------------------------------------- */

osp_error *trace_writer_start(osp_tracer *t);
/* Lets the writer finish every queued job, joins it, then writes what live
 * settings still buffer and closes every live file. */
void trace_writer_stop(osp_tracer *t);

/* Queues a job. Trace jobs are refused (false) when `bytes` do not fit
 * the bound; every job is refused once the writer is gone. */
bool trace_queue_push(osp_tracer *t, trace_job *job, size_t bytes);

/* A new file with one reference, listed in t->files. NULL on OOM. */
trace_file *trace_file_new(osp_tracer *t, const char *name, bool in_directory);
/* Call with t->lock held. */
void trace_file_ref_locked(trace_file *f);
/* Call without t->lock. */
void trace_file_unref(trace_file *f);

/* Call without t->lock: the last reference queues the setting's final
 * write (or frees it at once when the writer is gone). */
void trace_setting_unref(trace_setting *s);
/* Frees the setting and drops its file reference; writes nothing. Call
 * without t->lock. */
void trace_setting_destroy(trace_setting *s);

/* Frees a trace and drops its setting reference. */
void trace_free(osp_trace *trace);
