/*
 * Osprey's ONNX graph runtime: plan once, run many.
 *
 *   onnx_rt_model_new    at load: orders the graph, binds every node to
 *                        its op, folds what only depends on constants,
 *                        fuses (unless graph level -1). The weights stay
 *                        in host memory owned by the model, shared by
 *                        every session on the CPU device.
 *   onnx_session_new     per instance: a device, a stream and an arena.
 *   onnx_session_run     per batch: finds (or makes) the plan for the
 *                        inputs' shapes (onnx_plan.c: shapes of every
 *                        tensor, shape arithmetic on the host, memory by
 *                        liveness), grows the arena if that plan needs
 *                        more, and enqueues the ops on the stream.
 *
 * The backend adapter (onnx_backend.c) and the conformance runner
 * (tests/onnx/) are the users of this header.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "onnx_graph.h"
#include "onnx_strings.h"
#include "osprey/device.h"
#include "osprey/error.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct onnx_rt_model onnx_rt_model;
typedef struct onnx_session onnx_session;

typedef struct onnx_rt_options {
    bool fuse;          /* fusion passes (graph level -1 turns them off) */
    size_t max_plans;   /* input-shape plans cached per model (default 16) */
    /* On devices that record graphs (CUDA): the second run of a plan in a
     * session records its steps as a graph, later runs replay it. */
    bool graphs;
    size_t max_graphs;  /* input shapes a session keeps graphs for (LRU,
                           default 16) */
    bool allow_tf32;    /* FP32 matrix products may use TF32 tensor cores */
    /* On devices other than the CPU (precision fp16): every FP32 matrix
     * product (MatMul, Gemm, Einsum, Conv but depthwise) multiplies FP16
     * operands with FP32 accumulation into an FP32 result, constant
     * weights held in FP16 once per device, activations FP32 between ops
     * (docs/gpu.md). */
    bool fp16_weights;
    /* On the CPU device: a batch of a graph whose nodes keep samples apart
     * (CNNs) runs in chunks whose arena fits in this many bytes, so that
     * activations stay in the cache (0: half the last-level cache;
     * SIZE_MAX: never chunk). */
    size_t batch_chunk_bytes;
} onnx_rt_options;

/* Prepares `model` (ownership moves, also on error). Errors: a node the
 * runtime cannot serve (UNSUPPORTED, naming node, op, domain and opset,
 * and what is missing), a graph that is not a DAG, a tensor nobody
 * defines (INVALID_ARG). opts may be NULL. Caller owns *out. */
osp_error *onnx_rt_model_new(onnx_model *model, const onnx_rt_options *opts,
                             onnx_rt_model **out);
void onnx_rt_model_free(onnx_rt_model *m);

/* The graph's inputs and outputs as the file declares them (borrowed). */
const onnx_graph *onnx_rt_model_graph(const onnx_rt_model *m);

/* Whether the model has STRING tensors, which its sessions run on the CPU
 * device only (onnx_session_new refuses another device). */
bool onnx_rt_model_has_strings(const onnx_rt_model *m);

/* Checks that `dev` has every device op the model's nodes use;
 * UNSUPPORTED naming the first node and op it lacks. */
osp_error *onnx_rt_model_check_device(const onnx_rt_model *m,
                                      const osp_device *dev);

/* A tensor handed to or taken from a run: device memory of the session's
 * device. host_data (optional, NULL when the caller has none) is a host
 * copy of the same bytes, valid during onnx_session_run: on a device whose
 * memory is not host memory, the plan reads a small input's values from
 * it when the graph needs them to plan (a shape, pads or axes fed as a
 * graph input); without it such a graph fails on that device.
 * A STRING (BYTES) tensor is an array of onnx_string references, 16 bytes
 * each (onnx_strings.h), not the wire form: an input's bytes must stay
 * valid during the run; an output's point into the inputs, the model's
 * constants or the session's string pool, valid until the session's next
 * run. Strings run on the CPU device only. */
typedef struct onnx_io {
    osp_datatype dtype;
    osp_shape shape;
    const void *data;
    size_t byte_size;
    const void *host_data;
} onnx_io;

/* Asked for graph output `index` once its shape is known, before the ops
 * are enqueued: sets *data to device memory of byte_size bytes that the
 * run writes the output into, or leaves it NULL when nobody wants that
 * output. */
typedef osp_error *(*onnx_output_alloc_fn)(void *ctx, size_t index,
                                           osp_datatype dtype,
                                           const osp_shape *shape,
                                           size_t byte_size, void **data);

/* Per-instance state on `device`, whose work goes on `stream` (both
 * borrowed, valid until onnx_session_free). Caller owns *out. */
osp_error *onnx_session_new(onnx_rt_model *m, osp_device *device,
                            osp_stream *stream, onnx_session **out);
void onnx_session_free(onnx_session *s);

/* Runs the graph on inputs[i] = graph input i (n_inputs must equal the
 * graph's input count; dtypes must match). Shapes may differ from run to
 * run; each distinct set of input shapes gets its plan once. Outputs go
 * where alloc puts them. The work is enqueued on the session's stream and
 * may still be running on return. Errors are INVALID_ARG for inputs the
 * graph cannot take (naming the input and the node that refused them). */
osp_error *onnx_session_run(onnx_session *s, const onnx_io *inputs,
                            size_t n_inputs, onnx_output_alloc_fn alloc,
                            void *alloc_ctx);

/* Bytes of the session's arena now (for tests and memory reports). */
size_t onnx_session_arena_bytes(const onnx_session *s);

/* Bytes of constants on the session's device that its model's sessions
 * on that device share (0 on the CPU device, which reads the model's). */
size_t onnx_session_weight_bytes(const onnx_session *s);

/* What a session did with graphs (for tests and reports). */
typedef struct onnx_graph_stats {
    size_t graphs;        /* graphs held now */
    uint64_t captures;    /* graphs recorded */
    uint64_t replays;     /* runs that launched a graph */
    uint64_t eager_runs;  /* runs that enqueued their steps one by one */
    uint64_t refused;     /* recordings the device refused (run eagerly) */
    uint64_t invalidated; /* graphs dropped because the arena moved */
    uint64_t chunked_runs; /* CPU runs whose batch went in chunks */
} onnx_graph_stats;
void onnx_session_graph_stats(const onnx_session *s, onnx_graph_stats *out);

/* Per-op timing (for benchmarks): when on, every step is followed by a
 * stream synchronisation and its time is added to its op type's total, or
 * with ONNX_PROFILE_NODES to its node's (named "node (op)"). The report
 * prints one line per op type or node, slowest first: key, calls, total
 * ms, share of the whole. */
typedef enum {
    ONNX_PROFILE_OFF,
    ONNX_PROFILE_OPS,
    ONNX_PROFILE_NODES,
} onnx_profile_mode;
void onnx_session_set_profiling(onnx_session *s, onnx_profile_mode mode);
void onnx_session_profile_report(const onnx_session *s, FILE *out);

#ifdef __cplusplus
}
#endif
