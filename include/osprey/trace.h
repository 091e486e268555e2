/*
 * Triton's trace extension (triton mode): a tracer, owned by the server
 * process, holds the trace settings (one global setting, optionally one per
 * model) and samples requests; each sampled request carries an osp_trace
 * that collects activity timestamps, the model record and, at level
 * TENSORS, tensor captures. Finished traces go to a writer thread that
 * formats them and writes Triton's trace files (a JSON array of compact
 * records), so no request ever waits for a file.
 *
 * Ownership of a trace: osp_tracer_sample() hands the trace to the caller (a
 * frontend), which attaches it to its osp_infer_request as a borrowed
 * pointer (osp_infer_request.trace). The core stamps and captures into it
 * while it holds the request, finishing before it calls the request's
 * completion callback (or before osp_server_infer_async returns an error),
 * and never touches it afterwards. The frontend then adds its own stamps and
 * gives the trace back with osp_trace_end().
 *
 * Threads: every osp_tracer_* function is thread-safe. An osp_trace is used
 * by one thread at a time; a request's own hand-offs (queue, completion
 * callback, resume) order those uses.
 *
 * Timestamps are CLOCK_MONOTONIC nanoseconds (Triton: steady_clock).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"
#include "osprey/error.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct osp_tracer osp_tracer;
typedef struct osp_trace osp_trace;

/* Level bits; 0 is OFF. */
#define OSP_TRACE_LEVEL_OFF 0u
#define OSP_TRACE_LEVEL_TIMESTAMPS 1u
#define OSP_TRACE_LEVEL_TENSORS 2u

/* Timestamped activities, in the order a trace file lists them. */
typedef enum osp_trace_activity {
    OSP_TRACE_HTTP_RECV_START = 0,
    OSP_TRACE_HTTP_RECV_END,
    OSP_TRACE_GRPC_WAITREAD_START,
    OSP_TRACE_GRPC_WAITREAD_END,
    OSP_TRACE_REQUEST_START,
    OSP_TRACE_QUEUE_START,
    OSP_TRACE_COMPUTE_START,
    OSP_TRACE_COMPUTE_INPUT_END,
    OSP_TRACE_COMPUTE_OUTPUT_START,
    OSP_TRACE_COMPUTE_END,
    OSP_TRACE_INFER_RESPONSE_COMPLETE,
    OSP_TRACE_REQUEST_END,
    OSP_TRACE_HTTP_SEND_START,
    OSP_TRACE_HTTP_SEND_END,
    OSP_TRACE_GRPC_SEND_START,
    OSP_TRACE_GRPC_SEND_END,
    OSP_TRACE_ACTIVITY_COUNT_
} osp_trace_activity;

typedef enum osp_trace_tensor_activity {
    OSP_TRACE_TENSOR_QUEUE_INPUT = 0,
    OSP_TRACE_TENSOR_BACKEND_INPUT,
    OSP_TRACE_TENSOR_BACKEND_OUTPUT,
    OSP_TRACE_TENSOR_ACTIVITY_COUNT_
} osp_trace_tensor_activity;

/* "HTTP_RECV_START", ..., "TENSOR_QUEUE_INPUT", ... (Triton's names). */
const char *osp_trace_activity_name(osp_trace_activity a);
const char *osp_trace_tensor_activity_name(osp_trace_tensor_activity a);

/* A tensor capture holds at most this many elements (the first ones); a
 * BYTES capture also stops after the element that takes its string bytes
 * past OSP_TRACE_TENSOR_MAX_STRING_BYTES. "shape" always shows the whole
 * tensor, so a reader sees the cut by comparing it with the data. */
#define OSP_TRACE_TENSOR_MAX_ELEMENTS 1024
#define OSP_TRACE_TENSOR_MAX_STRING_BYTES 65536

/* Longest trace file path (startup flag) or name (API) accepted. */
#define OSP_TRACE_PATH_MAX 4096

/* ---- the tracer ---------------------------------------------------------- */

typedef struct osp_tracer_options {
    /* The startup ("default") global setting, Triton's defaults. */
    unsigned level;         /* OSP_TRACE_LEVEL_* bits (default OFF) */
    uint32_t rate;          /* default 1000 */
    int32_t count;          /* default -1 (no limit) */
    uint32_t log_frequency; /* default 0 */
    const char *file;       /* default "": borrowed during osp_tracer_new */
    /* When set, the settings API may set "trace_file" to a plain file name
     * created inside this existing directory (borrowed during
     * osp_tracer_new). NULL: trace_file updates are refused as Triton
     * refuses them. */
    const char *file_directory;
    /* Finished traces waiting for the writer, in bytes; when a trace does
     * not fit it is dropped and counted. Default 64 MiB. */
    size_t max_pending_bytes;
} osp_tracer_options;

void osp_tracer_options_init(osp_tracer_options *opts);

/* Applies one --trace-config value to opts, in Triton's syntax:
 * "rate=N", "level=OFF|TIMESTAMPS|TENSORS" (TIMESTAMPS and TENSORS add up
 * over repeated flags, OFF clears), "count=N", "mode=triton",
 * "triton,file=PATH", "triton,log-frequency=N", and "file=PATH" /
 * "log-frequency=N" without the mode prefix. `value` is borrowed for as
 * long as opts is used (opts->file may point into it). INVALID_ARG with a
 * message naming the problem; UNSUPPORTED for mode opentelemetry. */
osp_error *osp_tracer_options_parse(osp_tracer_options *opts,
                                    const char *value);

/* Starts the tracer and its writer thread. INVALID_ARG when
 * file_directory is not an accessible directory. Caller owns *out. */
osp_error *osp_tracer_new(const osp_tracer_options *opts, osp_tracer **out);

/* Stops sampling, writes every buffered trace, closes every trace file with
 * its "]" and stops the writer. Idempotent. Traces ended afterwards are
 * discarded. For a shutdown that cannot wait for in-flight requests. */
void osp_tracer_shutdown(osp_tracer *tracer);

/* osp_tracer_shutdown, then frees. Every trace must have been ended. NULL
 * is a no-op. */
void osp_tracer_free(osp_tracer *tracer);

/* ---- settings (GET/POST .../trace/setting) ------------------------------- */

typedef struct osp_trace_settings {
    unsigned level;
    uint32_t rate;
    int32_t count; /* remaining traces; -1 = no limit */
    uint32_t log_frequency;
    char file[OSP_TRACE_PATH_MAX + 1]; /* as given */
    const char *mode;                  /* "triton" (static) */
} osp_trace_settings;

/* The settings that apply to `model` (NULL or "" = the global ones). */
void osp_tracer_get_settings(osp_tracer *tracer, const char *model,
                             osp_trace_settings *out);

typedef enum osp_trace_change {
    OSP_TRACE_KEEP = 0, /* the field is not in the update */
    OSP_TRACE_SET,
    OSP_TRACE_CLEAR, /* JSON null: fall back (global: to the startup
                        value; model: to the current global value) */
} osp_trace_change;

typedef struct osp_trace_update {
    osp_trace_change level_change;
    unsigned level;
    osp_trace_change rate_change;
    uint32_t rate;
    osp_trace_change count_change;
    int32_t count;
    osp_trace_change log_frequency_change;
    uint32_t log_frequency;
    /* Only with a file directory, only globally: a plain name inside it
     * (file_len bytes at file, borrowed; may hold any bytes, checked). */
    osp_trace_change file_change;
    const char *file;
    size_t file_len;
} osp_trace_update;

/* True when the tracer has a file directory (trace_file may be updated). */
bool osp_tracer_file_updates_allowed(const osp_tracer *tracer);

/* Triton's update semantics: fields not set keep their specified value or
 * keep tracking their fallback; the setting object is replaced (its
 * sampling restarts and its buffered traces are written); a global update
 * recomputes every model setting; a model setting left with no specified
 * field is removed. Errors (nothing changed, except that a global update
 * has been applied when recomputing a model setting fails):
 *  - INVALID_ARG "Attempting to set invalid trace setting :<reason>" when
 *    the result is invalid and its level is not OFF (reasons: "sample rate
 *    must be non-zero", "trace file name is not given", "" for count 0);
 *  - UNSUPPORTED "trace file location can not be updated through network
 *    protocol" for a file change without a file directory;
 *  - INVALID_ARG for setting a file on a model (clearing it there is a
 *    no-op), or a name that is not a plain file name inside the directory
 *    (the message says why). */
osp_error *osp_tracer_update_settings(osp_tracer *tracer, const char *model,
                                      const osp_trace_update *update);

typedef struct osp_tracer_stats {
    uint64_t traces_written; /* traces handed to trace files */
    uint64_t traces_dropped; /* ended while the writer's buffer was full */
    uint64_t write_errors;   /* failed file opens or writes */
} osp_tracer_stats;

void osp_tracer_get_stats(osp_tracer *tracer, osp_tracer_stats *out);

/* ---- one request's trace ------------------------------------------------- */

/* Counts a request for `model` (borrowed) against the sampling of the
 * setting that applies to it and returns a new trace when this request is
 * to be traced; NULL otherwise (also when tracer is NULL, tracing is off,
 * or memory runs out). With tracing off this is one atomic load. Caller
 * owns the trace until osp_trace_end. */
osp_trace *osp_tracer_sample(osp_tracer *tracer, const char *model);

/* Trace id (global, increasing from 1). */
uint64_t osp_trace_id(const osp_trace *trace);
/* True at level TENSORS: tensor captures are wanted. */
bool osp_trace_wants_tensors(const osp_trace *trace);

/* Records `activity` at `ns`; the last stamp of an activity wins; ns 0 is
 * ignored. */
void osp_trace_stamp(osp_trace *trace, osp_trace_activity activity,
                     uint64_t ns);
/* Whether `activity` has been stamped. */
bool osp_trace_stamped(const osp_trace *trace, osp_trace_activity activity);

/* The model record written before REQUEST_START (strings copied;
 * request_id "" or NULL = none). Silently incomplete on OOM. */
void osp_trace_set_model(osp_trace *trace, const char *model_name,
                         int64_t model_version, const char *request_id);

/* Captures a tensor at level TENSORS (no-op otherwise). `data` is host
 * memory holding `byte_size` bytes (borrowed for the call; BYTES as 4-byte
 * length + bytes per element). At most OSP_TRACE_TENSOR_MAX_ELEMENTS
 * elements are read. */
void osp_trace_capture_tensor(osp_trace *trace,
                              osp_trace_tensor_activity activity,
                              const char *name, osp_datatype dtype,
                              const osp_shape *shape, const void *data,
                              size_t byte_size);

/* Bytes of a tensor's data that a capture reads at most: callers copying
 * device memory to the host for a capture copy only this much. */
size_t osp_trace_tensor_capture_bytes(osp_datatype dtype, size_t byte_size);

/* Gives the trace back to its tracer (ownership moves), which writes it.
 * NULL is a no-op. Never blocks on I/O: when the writer's buffer is full
 * the trace is dropped and counted. */
void osp_trace_end(osp_trace *trace);

#ifdef __cplusplus
}
#endif
