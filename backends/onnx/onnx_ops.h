/*
 * How the ONNX runtime's ops are written. An op is a table of four
 * functions, registered by (domain, op_type) in onnx_ops.c; each family
 * lives in its own file (onnx_ops_elementwise.c, onnx_ops_shape.c, ...).
 * The planner (onnx_plan.c) never computes anything itself: it asks ops
 * for their output types and shapes (infer), and runs them (run) either at
 * execution time on the instance's stream, or once on the host while it
 * plans (constant folding, shape arithmetic), with the same code. Ops only
 * call device ops (osprey/device.h, osprey/tensor_ops.h), so one op works
 * on every device that has the slots it uses.
 *
 * Life of an op on a node:
 *   prepare   at load, once per node: read and check the attributes into a
 *             state the op allocates (or none); an attribute or case the
 *             runtime does not implement is an UNSUPPORTED error naming
 *             it (the planner adds the node, op and opset to the message).
 *   infer     whenever the planner binds new input shapes: output dtypes
 *             and shapes from the inputs' dtypes, shapes and, where the op
 *             needs them (Reshape's shape, Slice's starts), their values
 *             on the host; a bad shape is an INVALID_ARG error.
 *   run       enqueue the device ops for one execution.
 *   free      the state.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onnx_graph.h"
#include "onnx_strings.h"
#include "osprey/device.h"
#include "osprey/error.h"
#include "osprey/tensor_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the planner knows of a tensor at bind time. */
typedef struct onnx_desc {
    bool present; /* false for an omitted optional input/output */
    osp_datatype dtype;
    osp_shape shape;
    /* The tensor's values on the host when they are known while planning
     * (initializers, constants, anything computed only from those and
     * from shapes), else NULL. Borrowed: valid while the plan lives. Ops
     * that need an input's values at infer (a shape, axes, pads) read them
     * here and fail with onnx_error_needs_values() when it is NULL. */
    const void *host;
} onnx_desc;

typedef struct onnx_infer_ctx {
    const onnx_node *node; /* borrowed */
    void *state;           /* from prepare */
    size_t n_inputs;
    const onnx_desc *inputs;
    size_t n_outputs;
    onnx_desc *outputs; /* set dtype and shape of each present one; ignore
                           `host` (the planner fills it) */
    /* Bytes of scratch device memory run needs (0 by default); the planner
     * gives run that much, 64-byte aligned, in ctx->workspace. */
    size_t workspace_bytes;
    /* In: the model's precision is fp16: FP32 matrix products (MatMul,
     * Gemm, Einsum, Conv) may multiply FP16 operands on devices other
     * than the CPU (run's ctx->fp16), so infer reserves the workspace
     * their FP16 casts need, after what the FP32 path uses (the plan
     * serves every device, and a run on the CPU reads only the FP32
     * part). Out: bit j set when run reads constant FP32 input j as FP16
     * from ctx->in_fp16 where the session gives it, and as FP32 from
     * ctx->in otherwise. */
    bool fp16_weights;
    uint32_t fp16_inputs;
    /* In: the model's allow_tf32 (Conv reserves its GEMM route's
     * workspace for it, osp_conv_workspace_bytes). */
    bool allow_tf32;
} onnx_infer_ctx;

typedef struct onnx_run_ctx {
    osp_stream *stream; /* borrowed; its device is where every pointer is */
    const onnx_node *node;
    void *state;
    size_t n_inputs;
    const onnx_desc *in_desc; /* as at infer (host values included) */
    const void *const *in;    /* device memory; NULL when not present */
    size_t n_outputs;
    const onnx_desc *out_desc;
    void *const *out; /* device memory, contiguous, sized by out_desc;
                         NULL when not present */
    void *workspace;  /* infer's workspace_bytes of device memory */
    bool allow_tf32;  /* FP32 matrix products may use TF32 (the model's
                         allow_tf32) */
    /* FP32 matrix products multiply FP16 operands with FP32 accumulation
     * (the model's precision fp16, on a device other than the CPU):
     * constants from in_fp16, other operands cast into the workspace
     * infer reserved under fp16_weights. */
    bool fp16;
    /* NULL, or per input: an FP16 device copy of constant input j for each
     * bit j infer set in fp16_inputs (ctx->in[j] is then NULL). */
    const void *const *in_fp16;
    /* Where an op that makes strings (Cast to STRING) puts their bytes
     * (onnx_strings.h): the session's pool, or the plan's or model's when
     * the node runs while planning or folding. Borrowed. */
    onnx_string_pool *strings;
} onnx_run_ctx;

typedef struct onnx_op {
    const char *op_type; /* "Conv" */
    const char *domain;  /* "" for ai.onnx, "osprey" for fused ops */
    /* Opsets this entry serves: a node with opset in [since, until]
     * (until 0 = no upper bound). Opsets below 7 are not served. */
    int64_t since, until;
    /* (optional) NULL: no attributes are read, no state. */
    osp_error *(*prepare)(const onnx_node *node, void **state);
    /* (optional) frees prepare's state: libc's free where the state is one
     * block from malloc. */
    void (*free)(void *state);
    osp_error *(*infer)(onnx_infer_ctx *ctx);
    osp_error *(*run)(onnx_run_ctx *ctx);
    /* Output 0 is input 0's memory viewed with another shape (Reshape,
     * Squeeze, Identity, ...): run is never called; the planner aliases
     * them. */
    bool output_aliases_input;
    /* Outputs depend only on the inputs' shapes and dtypes, not their
     * values (Shape, Size): the planner evaluates the node while planning
     * even when its inputs' values are unknown. */
    bool needs_only_shapes;
    /* The op takes or makes STRING tensors (16-byte onnx_string elements,
     * onnx_strings.h); the planner refuses a STRING input or output of
     * every other op (UNSUPPORTED, naming the node and the tensor). */
    bool takes_strings;
    /* The device op slots run uses, ended by OSP_OP_NONE (or by
     * OSP_OP_KIND_COUNT_; at most 7); the planner refuses a model at load
     * on a device without one of them. */
    osp_op_kind uses[8];
} onnx_op;

/* Every op family registers its table here (onnx_ops.c lists them). */
typedef struct onnx_op_family {
    const onnx_op *ops;
    size_t n_ops;
} onnx_op_family;

/* The op that serves `node` (its domain, op_type and opset), or NULL. */
const onnx_op *onnx_op_find(const char *domain, const char *op_type,
                            int64_t opset);

/* Calls fn on every registered op, family by family (for listings). */
void onnx_op_each(void (*fn)(const onnx_op *op, void *ctx), void *ctx);

/* ---- helpers for op implementations (onnx_ops_util.c) --------------------
 */

/* An error of `code` with the message "node 'name' (OpType): <fmt...>", the
 * form of every helper below. The planner (rt_node_error) turns that prefix
 * into "node 'name' (OpType, opset N): ", so an op's message read alone and
 * the planner's both say where the model is wrong. */
osp_error *onnx_node_error(const onnx_node *node, osp_error_code code,
                           const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True when input (or output) i is given: inside n and present. */
static inline bool onnx_present(size_t n, const onnx_desc *descs, size_t i) {
    return i < n && descs[i].present;
}

/* INVALID_ARG "input i is required" unless input i is given. */
osp_error *onnx_required_input(const onnx_node *node, size_t n_inputs,
                               const onnx_desc *inputs, size_t i);

/* UNSUPPORTED "input N: dtype D is not supported (FP32 only)" unless `desc`
 * (input N of the node) is FP32. */
osp_error *onnx_want_fp32(const onnx_node *node, const onnx_desc *desc,
                          size_t input);

/* UNSUPPORTED "<what>: dtype D is not supported" unless dt has a fixed size
 * of 1 to 8 bytes (every dtype but BYTES, whose STRING elements only the
 * ops flagged takes_strings handle), the elements that fill, copy and
 * gather move. `what` names the tensor ("input 0", "attribute 'value'"). */
osp_error *onnx_want_fixed_size(const onnx_node *node, osp_datatype dt,
                                const char *what);

/* As onnx_want_fixed_size, but also takes STRING (BYTES): what the
 * movement ops flagged takes_strings (Gather, Concat, Slice, ...) move,
 * a STRING element being a 16-byte onnx_string that copy_strided and
 * gather move like any element. */
osp_error *onnx_want_movable(const onnx_node *node, osp_datatype dt,
                             const char *what);

/* Bytes of one element of dt inside the runtime: ONNX_STRING_BYTES for
 * STRING (BYTES), else osp_datatype_byte_size. */
static inline size_t onnx_elem_bytes(osp_datatype dt) {
    return dt == OSP_TYPE_BYTES ? ONNX_STRING_BYTES
                                : osp_datatype_byte_size(dt);
}

/* The alignment of the workspace and of the slots ops carve from it. */
#define ONNX_WORKSPACE_ALIGN ((size_t)64)

/* Bytes rounded up to ONNX_WORKSPACE_ALIGN: a workspace slot's size. */
static inline size_t onnx_align64(size_t bytes) {
    return (bytes + ONNX_WORKSPACE_ALIGN - 1) & ~(ONNX_WORKSPACE_ALIGN - 1);
}

/* INVALID_ARG: "input N ('name') must be known when the model is planned
 * (a constant or computed from shapes)". */
osp_error *onnx_error_needs_values(const onnx_node *node, size_t input);

/* Attribute readers with a default; a present attribute of the wrong type
 * is INVALID_ARG naming it. */
osp_error *onnx_attr_int(const onnx_node *node, const char *name, int64_t dflt,
                         int64_t *out);
osp_error *onnx_attr_float(const onnx_node *node, const char *name, float dflt,
                           float *out);
/* *out borrowed from the node; dflt when absent. */
osp_error *onnx_attr_string(const onnx_node *node, const char *name,
                            const char *dflt, const char **out);
/* *out borrowed from the node (NULL and *n = 0 when absent). */
osp_error *onnx_attr_ints(const onnx_node *node, const char *name,
                          const int64_t **out, size_t *n);
osp_error *onnx_attr_floats(const onnx_node *node, const char *name,
                            const float **out, size_t *n);

/* The epilogue activation of a fused op (domain "osprey"): string attr
 * "activation" ("" or absent: OSP_UNARY_IDENTITY; "Relu", "Sigmoid",
 * "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Gelu" (erf),
 * "GeluTanh", "Silu", "Elu") and floats attr "activation_params" =
 * [alpha, beta] (LeakyRelu alpha, default 0.01; Clip min, max, default
 * -FLT_MAX, FLT_MAX; HardSigmoid alpha, beta, default 0.2, 0.5; Elu
 * alpha, default 1). Another name is UNSUPPORTED naming it. */
osp_error *onnx_fused_activation(const onnx_node *node, osp_unary_op *op,
                                 float *alpha, float *beta);

/* Reads the host values of an integer tensor input (INT32 or INT64) as
 * int64 into out[cap]; sets *n. Needs desc->host (onnx_error_needs_values
 * otherwise, with `input` its index on the node). */
osp_error *onnx_read_ints(const onnx_node *node, size_t input,
                          const onnx_desc *desc, int64_t *out, size_t cap,
                          size_t *n);
/* The first element of a host-known FP32/FP64/INT input as a double. */
osp_error *onnx_read_scalar(const onnx_node *node, size_t input,
                            const onnx_desc *desc, double *out);

/* Normalises an axis in [-rank, rank) to [0, rank); INVALID_ARG naming the
 * node otherwise. */
osp_error *onnx_axis(const onnx_node *node, int64_t axis, int rank, int *out);

/* Numpy broadcasting of two shapes into *out; INVALID_ARG naming the node
 * and both shapes when they do not broadcast. */
osp_error *onnx_broadcast_shape(const onnx_node *node, const osp_shape *a,
                                const osp_shape *b, osp_shape *out);
/* Element strides of `in` read as the broadcast shape `out` (0 where it
 * broadcasts; right-aligned as numpy). */
void onnx_broadcast_strides(const osp_shape *in, const osp_shape *out,
                            int64_t strides[OSP_MAX_DIMS]);
/* Contiguous row-major strides of a shape. */
void onnx_contiguous_strides(const osp_shape *shape,
                             int64_t strides[OSP_MAX_DIMS]);
/* Element count, 0 on overflow (the planner has checked every shape it
 * binds, so ops may use it freely on their descs). */
int64_t onnx_shape_count(const osp_shape *shape);
/* Product of dims [from, to). */
int64_t onnx_shape_span(const osp_shape *shape, int from, int to);

/* The osp_datatype of TensorProto.DataType t (an attribute's value, as
 * Cast's 'to'), OSP_TYPE_INVALID where Osprey has none; and ONNX's name of
 * t ("FLOAT", "STRING"; "UNKNOWN" past the known ones). */
osp_datatype onnx_proto_dtype(int64_t t);
const char *onnx_proto_dtype_name(int64_t t);

/* The little-endian bytes of the number v in the fixed-size dtype dt
 * (half types rounded to nearest even, BOOL v != 0, integers truncated
 * toward zero), zero-padded to 8 bytes: a fill value. */
void onnx_number_bytes(osp_datatype dt, double v, uint8_t out[8]);

/* Enqueues the copy of n bytes from src to dst, device memory of the
 * stream's device (borrowed); nothing when n is 0 or dst is src. */
osp_error *onnx_copy_bytes(osp_stream *stream, void *dst, const void *src,
                           size_t n);

/* Fills n elements at dst (device memory, borrowed) with v. */
osp_error *onnx_fill_f32(osp_stream *stream, float *dst, size_t n, float v);
osp_error *onnx_fill_i64(osp_stream *stream, int64_t *dst, size_t n, int64_t v);

/* seq[i] = i * step for i in [0, n) in INT64 (an exclusive cumsum of a
 * fill of step); tmp is scratch of n INT64. Device memory, borrowed. */
osp_error *onnx_iota_i64(osp_stream *stream, int64_t *tmp, int64_t *seq,
                         int64_t n, int64_t step);

/* out[i] = a[i] op b[i] over n contiguous elements of dt, one binary_nd of
 * rank 1; an operand flagged *_scalar is one element read for every i. out
 * must not overlap a or b (binary_nd's contract). */
osp_error *onnx_binary_flat(osp_stream *stream, osp_binary_nd_op op,
                            osp_datatype dt, const void *a, bool a_scalar,
                            const void *b, bool b_scalar, void *out, int64_t n);

/* Checks a shape an op computed (no negative dims, count and bytes for
 * dtype fit the runtime's limit); INVALID_ARG naming the node otherwise. */
osp_error *onnx_check_shape(const onnx_node *node, const osp_shape *shape,
                            osp_datatype dtype);

#ifdef __cplusplus
}
#endif
