/*
 * The device interface: where memory lives and how compute runs.
 *
 * Backends and the core call only these functions; each device (CPU,
 * CUDA) implements the table in osprey/device_impl.h. All ops are enqueued
 * on a stream and may complete asynchronously: results are visible after
 * osp_stream_synchronize(), after an event recorded later completes, or in
 * a host function launched later on the same stream. Pointers passed to
 * ops are device memory of the stream's device (for the CPU device, host
 * memory). Shapes are row-major.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"
#include "osprey/error.h"
#include "osprey/memory.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct osp_device osp_device;
typedef struct osp_stream osp_stream;
typedef struct osp_event osp_event;

typedef enum osp_device_type {
    OSP_DEVICE_CPU = 0,
    OSP_DEVICE_CUDA,
} osp_device_type;

typedef struct osp_device_info {
    osp_device_type type;
    int index;           /* GPU ordinal; 0 for the CPU device */
    char name[128];      /* "CPU", "NVIDIA H100 80GB HBM3", ... */
    size_t total_memory; /* bytes; 0 when unknown */
    int compute_major;   /* CUDA compute capability; 0 for CPU */
    int compute_minor;
} osp_device_info;

/* Memory counters of a device, for metrics and tests. */
typedef struct osp_device_memory_stats {
    size_t pinned_pool_total;    /* bytes reserved for the pinned host pool */
    size_t pinned_pool_used;     /* bytes handed out from it now */
    uint64_t pageable_fallbacks; /* host allocations that could not be pinned */
    size_t device_pool_total;    /* bytes held by the device-memory pool */
    size_t device_pool_used;
} osp_device_memory_stats;

typedef enum osp_copy_kind {
    OSP_COPY_HOST_TO_DEVICE = 0,
    OSP_COPY_DEVICE_TO_HOST,
    OSP_COPY_DEVICE_TO_DEVICE,
    OSP_COPY_HOST_TO_HOST,
} osp_copy_kind;

typedef enum osp_binary_op {
    OSP_BINARY_ADD = 0,
    OSP_BINARY_SUB,
    OSP_BINARY_MUL,
} osp_binary_op;

typedef enum osp_activation {
    OSP_ACTIVATION_NONE = 0,
    OSP_ACTIVATION_RELU,
    OSP_ACTIVATION_SIGMOID,
    OSP_ACTIVATION_TANH,
    OSP_ACTIVATION_GELU, /* tanh approximation, as PyTorch's approximate="tanh"
                          */
} osp_activation;

/* Row-major GEMM: C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C.
 * op(X) is X or X^T. lda/ldb/ldc are row strides in elements of the
 * matrices as stored. dtype is FP32 or FP16 (A and B of it, and C unless
 * c_dtype says otherwise; FP16 accumulates in FP32). allow_tf32 lets FP32
 * use TF32 tensor cores where the device has them; ignored elsewhere.
 * c_dtype (osp_op_gemm_ex only; 0 means dtype): OSP_TYPE_FP32 with FP16
 * A and B keeps the FP32 sum as it is (C, beta's C and the epilogue in
 * FP32), where an FP16 C would round it to FP16. */
typedef struct osp_gemm_args {
    bool trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    osp_datatype dtype;
    const void *a;
    int64_t lda;
    const void *b;
    int64_t ldb;
    void *c;
    int64_t ldc;
    bool allow_tf32;
    osp_datatype c_dtype;
} osp_gemm_args;

/* C's dtype in g: c_dtype, or dtype when c_dtype is 0. */
static inline osp_datatype osp_gemm_c_dtype(const osp_gemm_args *g) {
    return g->c_dtype != OSP_TYPE_INVALID ? g->c_dtype : g->dtype;
}

/* ---- discovery ---------------------------------------------------------- */

/* The process-wide CPU device. Never NULL; not freed by callers. */
osp_device *osp_device_cpu(void);
/* Number of usable CUDA GPUs: 0 when built without CUDA or none present.
 * Valid after osp_devices_init (see device_options.h); 0 before. */
int osp_device_cuda_count(void);
/* Borrowed handle of GPU `index`; NOT_FOUND if there is no such GPU. */
osp_error *osp_device_cuda_get(int index, osp_device **out);
void osp_device_get_info(const osp_device *dev, osp_device_info *out);
void osp_device_get_memory_stats(const osp_device *dev,
                                 osp_device_memory_stats *out);

/* ---- memory ------------------------------------------------------------- */

/* Device memory (from the device's caching pool). Caller owns *out. */
osp_error *osp_device_alloc(osp_device *dev, size_t size, osp_buffer **out);
/* Host memory for transfers to/from `dev`: pinned (from the pinned pool)
 * when the device has one and it has room, otherwise pageable (counted as
 * a fallback). For the CPU device, aligned host memory. Caller owns *out. */
osp_error *osp_device_alloc_host(osp_device *dev, size_t size,
                                 osp_buffer **out);

/* ---- streams and events -------------------------------------------------- */

osp_error *osp_stream_new(osp_device *dev, osp_stream **out);
/* Waits for pending work, then frees. NULL is a no-op. */
void osp_stream_free(osp_stream *stream);
osp_device *osp_stream_device(const osp_stream *stream);
osp_error *osp_stream_synchronize(osp_stream *stream);

/* Caps the host threads the stream's ops may use; 0 = the device's
 * default; devices that do not run ops on host threads ignore it. Applies
 * to ops enqueued after it returns. The CPU device's default is the
 * environment's OSPREY_CPU_THREADS, else OPENBLAS_NUM_THREADS, else the
 * CPUs the process may run on; its threads come from one pool shared by
 * every stream, so streams running at once never use more host threads
 * than the pool has, whatever their caps add up to. INVALID_ARG for a
 * negative count. Not to be called while another thread enqueues on the
 * same stream. */
osp_error *osp_stream_set_threads(osp_stream *stream, int threads);

/* Enqueues a copy of n bytes. Host pointers should be pinned for the copy
 * to be truly asynchronous; pageable host memory works but may serialise. */
osp_error *osp_memcpy_async(osp_stream *stream, void *dst, const void *src,
                            size_t n, osp_copy_kind kind);

/* Calls fn(arg) on some host thread once all work enqueued before it on
 * `stream` has finished. fn may free buffers but must make no other device
 * call (no allocation, copy, op, event or synchronisation, on any stream):
 * on a GPU it runs on a CUDA thread where CUDA calls are forbidden. For
 * devices that run synchronously it is called before this returns. */
osp_error *osp_stream_launch_host_func(osp_stream *stream,
                                       void (*fn)(void *arg), void *arg);

osp_error *osp_event_new(osp_device *dev, osp_event **out);
void osp_event_free(osp_event *event);
/* Records the point in `stream` reached by the work enqueued so far. */
osp_error *osp_event_record(osp_event *event, osp_stream *stream);
osp_error *osp_event_synchronize(osp_event *event);
/* Nanoseconds between two completed events. */
osp_error *osp_event_elapsed_ns(osp_event *start, osp_event *end, uint64_t *ns);

/* Copies n bytes between host memory and memory of `dev` (or within
 * either) and returns once they have arrived, whatever the device's
 * streams are doing; for memory no stream of `dev` is using meanwhile
 * (regions of client shared memory). Devices without a copy of their own
 * (the CPU) memmove. */
osp_error *osp_device_memcpy(osp_device *dev, void *dst, const void *src,
                             size_t n, osp_copy_kind kind);

/* ---- graphs (recorded work replayed at once: CUDA graphs) ---------------- */

typedef struct osp_graph osp_graph;

/* Whether `stream`'s device can record graphs (the CUDA device can; the
 * CPU device cannot). */
bool osp_stream_supports_graphs(const osp_stream *stream);

/* Starts recording: until osp_stream_end_capture, work enqueued on
 * `stream` by the calling thread is recorded, not run. UNSUPPORTED on a
 * device without graphs. While recording, the calling thread must not
 * synchronise (streams, events, the device), allocate device memory
 * through the device's own allocator past its pool, or launch host
 * functions on `stream` (refused: a replay would call them again); such
 * a call fails and so does the capture. Every pointer the recorded work
 * touches must stay valid, and mean the same, for as long as the graph
 * may be launched. */
osp_error *osp_stream_begin_capture(osp_stream *stream);
/* Ends the recording begun on `stream` by this thread. On success *out
 * is the graph (caller owns, osp_graph_free); when something refused
 * during the capture invalidated it, an error and no graph. Either way
 * the stream is back to running work. */
osp_error *osp_stream_end_capture(osp_stream *stream, osp_graph **out);
/* Enqueues the recorded work on `stream` (a stream of the graph's
 * device; it need not be the one recorded on). */
osp_error *osp_graph_launch(osp_graph *graph, osp_stream *stream);
/* Frees a graph; launches already enqueued still run. NULL is a no-op. */
void osp_graph_free(osp_graph *graph);

/* ---- memory shared by another process (CUDA IPC) ------------------------ */

/* Bytes of a CUDA IPC memory handle (cudaIpcMemHandle_t). */
#define OSP_DEVICE_IPC_HANDLE_BYTES 64

/* True when `dev` can open memory handles of other processes. */
bool osp_device_supports_ipc(const osp_device *dev);
/* Maps the device memory that another process exported as `handle`
 * (handle_len bytes, borrowed) into this process on `dev`: *ptr is its
 * first byte (device memory of `dev`) and *size the bytes of the exporting
 * allocation from there. Errors: UNSUPPORTED when the device cannot,
 * INVALID_ARG for a handle it cannot open. Caller owns the mapping: give
 * it back with osp_device_ipc_close. */
osp_error *osp_device_ipc_open(osp_device *dev, const void *handle,
                               size_t handle_len, void **ptr, size_t *size);
/* Unmaps what osp_device_ipc_open mapped at ptr. The message of an error
 * is fit for a client ("failed to close CUDA IPC handle: ..."). */
osp_error *osp_device_ipc_close(osp_device *dev, void *ptr);
/* Exports device memory of `dev` for another process to open: writes
 * the handle (handle_len bytes, OSP_DEVICE_IPC_HANDLE_BYTES; caller's
 * buffer) of the allocation that holds ptr and *offset, ptr's offset in
 * it; the other side opens the handle (osp_device_ipc_open there) and
 * adds the offset. The memory stays this process's: it must outlive the
 * other side's use. Errors: UNSUPPORTED when the device cannot,
 * INVALID_ARG when ptr is not memory the device can export. */
osp_error *osp_device_ipc_export(osp_device *dev, const void *ptr, void *handle,
                                 size_t handle_len, uint64_t *offset);

/* ---- compute ops -----------------------------------------------------------
 */

osp_error *osp_op_gemm(osp_stream *stream, const osp_gemm_args *args);

/* out[i] = a[i] op b[i] for n elements of dtype INT32, INT64, FP32 or
 * FP16. out may alias a or b. */
osp_error *osp_op_binary(osp_stream *stream, osp_binary_op op,
                         osp_datatype dtype, const void *a, const void *b,
                         void *out, size_t n);

/* In place on FP32 x[rows, cols]: x = act(x + bias) with bias[cols]
 * broadcast over rows; bias may be NULL. */
osp_error *osp_op_bias_activation(osp_stream *stream, float *x,
                                  const float *bias, int64_t rows, int64_t cols,
                                  osp_activation act);

/* FP32 softmax of each row of x[rows, cols] into out (may alias x),
 * numerically stable (max subtracted). */
osp_error *osp_op_softmax_rows(osp_stream *stream, const float *x, float *out,
                               int64_t rows, int64_t cols);

/* n elements from src_dtype to dst_dtype, among BOOL, UINT8..UINT64,
 * INT8..INT64, FP16, BF16, FP32, FP64 (not BYTES). Float to integer
 * truncates toward zero; anything to BOOL is (x != 0). */
osp_error *osp_op_cast(osp_stream *stream, const void *src,
                       osp_datatype src_dtype, void *dst,
                       osp_datatype dst_dtype, size_t n);

#ifdef __cplusplus
}
#endif
