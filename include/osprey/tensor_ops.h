/*
 * Tensor ops for graph runtimes (the ONNX backend first): the device slots
 * a plan dispatches, beside the five basic ops of osprey/device.h.
 *
 * Every op here is an optional slot of a device (osprey/device_impl.h): a
 * device may leave it empty, osp_device_supports_op() says which are
 * there, and calling an empty one returns UNSUPPORTED. The CPU device
 * implements all of them and is the reference the others are tested
 * against.
 *
 * Conventions, for every op:
 * - Enqueued on `stream` like the ops of device.h; pointers are memory of
 *   the stream's device. The args struct is borrowed for the call only (a
 *   device copies what it needs before returning).
 * - Shapes are row-major; dims and strides count elements, not bytes. A
 *   stride of 0 broadcasts a dimension. rank 0 is a scalar.
 * - An op with zero output elements does nothing and succeeds.
 * - Outputs never alias inputs unless the op says so.
 * - "FP32 only" ops take and give float; others name their dtypes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"
#include "osprey/device.h"
#include "osprey/error.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each slot a device may have; OSP_OP_GEMM..OSP_OP_CAST are device.h's.
 * OSP_OP_NONE (0) ends lists of kinds. */
typedef enum osp_op_kind {
    OSP_OP_NONE = 0,
    OSP_OP_GEMM,
    OSP_OP_BINARY,
    OSP_OP_BIAS_ACTIVATION,
    OSP_OP_SOFTMAX_ROWS,
    OSP_OP_CAST,
    OSP_OP_GEMM_EX,
    OSP_OP_UNARY,
    OSP_OP_BINARY_ND,
    OSP_OP_WHERE,
    OSP_OP_COPY_STRIDED,
    OSP_OP_GATHER,
    OSP_OP_FILL,
    OSP_OP_PAD,
    OSP_OP_REDUCE,
    OSP_OP_SOFTMAX,
    OSP_OP_LAYER_NORM,
    OSP_OP_CHANNEL_AFFINE,
    OSP_OP_CONV,
    OSP_OP_CONV_TRANSPOSE,
    OSP_OP_POOL,
    OSP_OP_TOPK,
    OSP_OP_CUMSUM,
    OSP_OP_SCATTER,
    OSP_OP_KIND_COUNT_
} osp_op_kind;

/* Whether `dev` implements `op` (the dispatcher's fallbacks count: a
 * device with `gemm` supports OSP_OP_GEMM_EX). */
bool osp_device_supports_op(const osp_device *dev, osp_op_kind op);
/* "conv", "gather", ...: a static string for messages. */
const char *osp_op_kind_name(osp_op_kind op);

/* ---- elementwise ---------------------------------------------------------
 */

/* y = f(x), elementwise. alpha and beta are the op's parameters where it
 * has any (named below); others ignore them. OSP_UNARY_IDENTITY is also
 * "no activation" in the epilogues of gemm_ex and conv. */
typedef enum osp_unary_op {
    OSP_UNARY_IDENTITY = 0,
    OSP_UNARY_ABS,        /* FP32, INT32, INT64, INT8, ... */
    OSP_UNARY_NEG,        /* FP32, INT32, INT64, INT8, ... */
    OSP_UNARY_SIGN,       /* FP32, INT32, INT64 */
    OSP_UNARY_NOT,        /* BOOL only */
    OSP_UNARY_RELU,       /* FP32, INT32, INT64 */
    OSP_UNARY_CLIP,       /* min(max(x, alpha), beta); FP32, INT32, INT64 */
    OSP_UNARY_EXP,        /* the rest: FP32 only */
    OSP_UNARY_LOG,
    OSP_UNARY_SQRT,
    OSP_UNARY_RECIPROCAL,
    OSP_UNARY_FLOOR,
    OSP_UNARY_CEIL,
    OSP_UNARY_ROUND,      /* half to even */
    OSP_UNARY_SIGMOID,
    OSP_UNARY_TANH,
    OSP_UNARY_ERF,
    OSP_UNARY_GELU,       /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    OSP_UNARY_GELU_TANH,  /* tanh approximation */
    OSP_UNARY_SILU,       /* x * sigmoid(x) */
    OSP_UNARY_SOFTPLUS,   /* log(1 + exp(x)) */
    OSP_UNARY_SOFTSIGN,   /* x / (1 + |x|) */
    OSP_UNARY_MISH,       /* x * tanh(softplus(x)) */
    OSP_UNARY_ELU,        /* x < 0 ? alpha (exp(x) - 1) : x */
    OSP_UNARY_CELU,       /* max(0,x) + min(0, alpha (exp(x/alpha) - 1)) */
    OSP_UNARY_SELU,       /* beta (x <= 0 ? alpha (exp(x) - 1) : x) */
    OSP_UNARY_LEAKY_RELU, /* x < 0 ? alpha x : x */
    OSP_UNARY_THRESHOLDED_RELU, /* x > alpha ? x : 0 */
    OSP_UNARY_HARD_SIGMOID,     /* max(0, min(1, alpha x + beta)) */
    OSP_UNARY_HARD_SWISH,       /* x * max(0, min(1, x/6 + 1/2)) */
    OSP_UNARY_SIN,
    OSP_UNARY_COS,
    OSP_UNARY_TAN,
    OSP_UNARY_ASIN,
    OSP_UNARY_ACOS,
    OSP_UNARY_ATAN,
    OSP_UNARY_SINH,
    OSP_UNARY_COSH,
    OSP_UNARY_ASINH,
    OSP_UNARY_ACOSH,
    OSP_UNARY_ATANH,
    OSP_UNARY_ISNAN,      /* FP32 in, BOOL out */
    OSP_UNARY_ISINF,      /* FP32 in, BOOL out; alpha != 0: detect +inf,
                             beta != 0: detect -inf */
    OSP_UNARY_OP_COUNT_
} osp_unary_op;

typedef struct osp_unary_args {
    osp_unary_op op;
    osp_datatype dtype; /* of x (and of y, but for ISNAN/ISINF: BOOL) */
    const void *x;
    void *y; /* may alias x */
    size_t n;
    float alpha, beta;
} osp_unary_args;

osp_error *osp_op_unary(osp_stream *stream, const osp_unary_args *args);

/* The binary ops of osp_op_binary_nd; osp_op_binary (device.h) takes the
 * first three. Integer division truncates toward zero; integer MOD takes
 * the divisor's sign (Python's %), FMOD the dividend's (C's fmod). Integer
 * division or MOD by zero gives 0 (never a trap). Comparisons give BOOL;
 * AND/OR/XOR take and give BOOL; BITSHIFT_* take unsigned integers. PRELU
 * is a < 0 ? a * b : a. */
typedef enum osp_binary_nd_op {
    OSP_BINARY_ND_ADD = 0,
    OSP_BINARY_ND_SUB,
    OSP_BINARY_ND_MUL,
    OSP_BINARY_ND_DIV,
    OSP_BINARY_ND_POW,
    OSP_BINARY_ND_MAX,
    OSP_BINARY_ND_MIN,
    OSP_BINARY_ND_MOD,
    OSP_BINARY_ND_FMOD,
    OSP_BINARY_ND_PRELU,
    OSP_BINARY_ND_EQUAL,
    OSP_BINARY_ND_LESS,
    OSP_BINARY_ND_LESS_EQUAL,
    OSP_BINARY_ND_GREATER,
    OSP_BINARY_ND_GREATER_EQUAL,
    OSP_BINARY_ND_AND,
    OSP_BINARY_ND_OR,
    OSP_BINARY_ND_XOR,
    OSP_BINARY_ND_BITSHIFT_LEFT,
    OSP_BINARY_ND_BITSHIFT_RIGHT,
    OSP_BINARY_ND_OP_COUNT_
} osp_binary_nd_op;

/* out[i...] = a[i...] op b[i...] over the output shape `dims`, reading a
 * and b through their strides (0 where they broadcast). out is contiguous.
 * dtype is a's and b's: FP32, FP64, INT8..INT64, UINT8..UINT64, BOOL where
 * the op makes sense (arithmetic on numbers; POW on FP32 and on integers
 * with an integer exponent; logic on BOOL). out has dtype, or BOOL for
 * comparisons. */
typedef struct osp_binary_nd_args {
    osp_binary_nd_op op;
    osp_datatype dtype;
    int rank;
    int64_t dims[OSP_MAX_DIMS];
    const void *a;
    int64_t a_strides[OSP_MAX_DIMS];
    const void *b;
    int64_t b_strides[OSP_MAX_DIMS];
    void *out;
} osp_binary_nd_args;

osp_error *osp_op_binary_nd(osp_stream *stream, const osp_binary_nd_args *args);

/* out = cond ? x : y over the output shape, each input read through its
 * strides. cond is BOOL; x, y and out have elements of elem_size bytes
 * (1, 2, 4 or 8). out is contiguous. */
typedef struct osp_where_args {
    size_t elem_size;
    int rank;
    int64_t dims[OSP_MAX_DIMS];
    const bool *cond;
    int64_t cond_strides[OSP_MAX_DIMS];
    const void *x;
    int64_t x_strides[OSP_MAX_DIMS];
    const void *y;
    int64_t y_strides[OSP_MAX_DIMS];
    void *out;
} osp_where_args;

osp_error *osp_op_where(osp_stream *stream, const osp_where_args *args);

/* ---- data movement -------------------------------------------------------
 */

/* Copies the `dims` box of elements of elem_size bytes (1, 2, 4, 8 or 16)
 * from src to dst, each addressed through its own strides (src strides
 * may be 0 or negative: Expand, reversed Slice; dst strides must be
 * positive and must not overlap). Transpose, Slice, Expand, Concat and
 * Split are this op. src and dst must not overlap. */
typedef struct osp_copy_strided_args {
    size_t elem_size;
    int rank;
    int64_t dims[OSP_MAX_DIMS];
    const void *src;
    int64_t src_strides[OSP_MAX_DIMS];
    void *dst;
    int64_t dst_strides[OSP_MAX_DIMS];
} osp_copy_strided_args;

osp_error *osp_op_copy_strided(osp_stream *stream,
                               const osp_copy_strided_args *args);

/* ONNX Gather on axis: data viewed as [outer, axis_len, inner], indices
 * (INT32 or INT64, n_indices of them, negative counts from the end) pick
 * rows of the axis: out[o, j, i] = data[o, indices[j], i], out contiguous
 * [outer, n_indices, inner]. An index outside [-axis_len, axis_len) is
 * INVALID_ARG on devices that can tell before returning (the CPU); others
 * write zeros for it. */
typedef struct osp_gather_args {
    size_t elem_size;
    const void *data;
    int64_t outer, axis_len, inner;
    osp_datatype index_dtype;
    const void *indices;
    int64_t n_indices;
    void *out;
} osp_gather_args;

osp_error *osp_op_gather(osp_stream *stream, const osp_gather_args *args);

/* n elements of elem_size bytes (1, 2, 4 or 8), each the first elem_size
 * bytes of value (the element's bytes, little-endian). */
typedef struct osp_fill_args {
    size_t elem_size;
    uint8_t value[8];
    void *dst;
    size_t n;
} osp_fill_args;

osp_error *osp_op_fill(osp_stream *stream, const osp_fill_args *args);

typedef enum osp_pad_mode {
    OSP_PAD_CONSTANT = 0,
    OSP_PAD_REFLECT, /* mirror without repeating the edge: pad < dim */
    OSP_PAD_EDGE,
    OSP_PAD_WRAP,
} osp_pad_mode;

/* y has out_dims[d] = in_dims[d] + pad_begin[d] + pad_end[d]; negative pads
 * crop. Both contiguous. CONSTANT fills with the first elem_size bytes of
 * value. */
typedef struct osp_pad_args {
    osp_pad_mode mode;
    size_t elem_size;
    int rank;
    int64_t in_dims[OSP_MAX_DIMS];
    int64_t pad_begin[OSP_MAX_DIMS];
    int64_t pad_end[OSP_MAX_DIMS];
    uint8_t value[8];
    const void *x;
    void *y;
} osp_pad_args;

osp_error *osp_op_pad(osp_stream *stream, const osp_pad_args *args);

/* ---- reductions and normalisations ---------------------------------------
 */

typedef enum osp_reduce_op {
    OSP_REDUCE_SUM = 0,
    OSP_REDUCE_MEAN,
    OSP_REDUCE_MAX,
    OSP_REDUCE_MIN,
    OSP_REDUCE_PROD,
    OSP_REDUCE_L1,
    OSP_REDUCE_L2,
    OSP_REDUCE_LOG_SUM,
    OSP_REDUCE_LOG_SUM_EXP,
    OSP_REDUCE_SUM_SQUARE,
    OSP_REDUCE_ARGMAX, /* out is INT64 */
    OSP_REDUCE_ARGMIN, /* out is INT64 */
    OSP_REDUCE_OP_COUNT_
} osp_reduce_op;

/* x viewed as contiguous [outer, n, inner]; out[o, i] reduces x[o, :, i].
 * dtype: FP32 for all; INT32 and INT64 for SUM, MAX, MIN, PROD, ARGMAX,
 * ARGMIN. n == 0 gives the op's identity (0 for sums, 1 for PROD, -inf /
 * +inf for MAX / MIN, -inf for LOG_SUM_EXP; ARGMAX/ARGMIN with n == 0 is
 * INVALID_ARG). ARGMAX/ARGMIN take the first extreme index, or the last
 * when select_last_index. */
typedef struct osp_reduce_args {
    osp_reduce_op op;
    osp_datatype dtype;
    const void *x;
    int64_t outer, n, inner;
    void *out;
    bool select_last_index;
} osp_reduce_args;

osp_error *osp_op_reduce(osp_stream *stream, const osp_reduce_args *args);

/* FP32 only. x viewed as [outer, n, inner]; softmax (or log-softmax) over
 * the middle axis, numerically stable. out may alias x. */
typedef struct osp_softmax_args {
    const float *x;
    float *out;
    int64_t outer, n, inner;
    bool log;
} osp_softmax_args;

osp_error *osp_op_softmax(osp_stream *stream, const osp_softmax_args *args);

/* FP32 only. Each row of x[rows, cols] normalised to zero mean and unit
 * variance (biased variance, epsilon added), then times scale[cols] and
 * plus bias[cols] (each optional). mean and inv_std, when not NULL, get
 * each row's mean and 1/sqrt(var + epsilon) [rows]. out may alias x.
 * InstanceNormalization and GroupNormalization are this op (no scale)
 * followed by channel_affine. */
typedef struct osp_layer_norm_args {
    const float *x;
    const float *scale;
    const float *bias;
    float *out;
    int64_t rows, cols;
    float epsilon;
    float *mean;
    float *inv_std;
} osp_layer_norm_args;

osp_error *osp_op_layer_norm(osp_stream *stream,
                             const osp_layer_norm_args *args);

/* FP32 only. x viewed as [batch, channels, spatial]:
 * out[b, c, s] = act(x[b, c, s] * scale[c] + shift[c]); scale and shift
 * each optional (1 and 0). out may alias x. BatchNormalization in
 * inference is this op with scale and shift folded from its statistics. */
typedef struct osp_channel_affine_args {
    const float *x;
    float *out;
    int64_t batch, channels, spatial;
    const float *scale;
    const float *shift;
    osp_unary_op act;
    float act_alpha, act_beta;
} osp_channel_affine_args;

osp_error *osp_op_channel_affine(osp_stream *stream,
                                 const osp_channel_affine_args *args);

/* ---- matrix products, convolution, pooling --------------------------------
 */

/* Weights laid out once for one device's kernels (opaque; from
 * osp_op_gemm_prepack or osp_op_conv_prepack, freed with
 * osp_packed_weights_free). */
typedef struct osp_packed_weights osp_packed_weights;

/* A batch of GEMMs (osp_gemm_args, FP32 or FP16 as osp_op_gemm) with an
 * epilogue: for each b < batch_count (0 counts as 1), C_b = alpha op(A_b)
 * op(B_b) + beta C_b where X_b = X + b * stride_x (elements; a stride of 0
 * reuses the matrix), then C_b += bias[col] (bias, FP32 [n], optional),
 * then C_b += residual_b (optional, FP32, the layout of C with stride_c),
 * then C_b = act(C_b). Devices without the slot get the dispatcher's
 * fallback: one gemm per batch, then unary/binary_nd for the epilogue. */
typedef struct osp_gemm_ex_args {
    osp_gemm_args gemm;
    int64_t batch_count;
    int64_t stride_a, stride_b, stride_c;
    const float *bias;
    const float *residual;
    osp_unary_op act;
    float act_alpha, act_beta;
    /* (optional, borrowed) gemm.b packed by osp_op_gemm_prepack for this
     * k, n and trans_b on this stream's device; NULL: the device reads b
     * (it also may where the packed form does not serve the call). */
    const osp_packed_weights *packed_b;
} osp_gemm_ex_args;

osp_error *osp_op_gemm_ex(osp_stream *stream, const osp_gemm_ex_args *args);

/* Lays gemm.b (k x n after trans_b; a constant such as MatMul's weights)
 * out once for the device's GEMM kernel, for later osp_op_gemm_ex calls
 * with the same b, k, n and trans_b to pass as packed_b. Only those
 * fields and dtype are read. *out (caller owns, osp_packed_weights_free)
 * is NULL when the device has no packed form for it. Synchronous. */
osp_error *osp_op_gemm_prepack(osp_stream *stream, const osp_gemm_ex_args *args,
                               osp_packed_weights **out);

#define OSP_CONV_MAX_SPATIAL 3

/* The most scratch a conv's GEMM route asks for (osp_conv_workspace_bytes):
 * a device that multiplies through its GEMM library lays the im2col
 * matrix of as many images (or, for one large image, output positions)
 * as fit in it, and goes through the batch a part at a time. */
#define OSP_CONV_WORKSPACE_MAX_BYTES ((size_t)64 << 20)

/* FP32 tensors, NCHW-style layouts, spatial_rank 1 to 3:
 * x [batch, in_channels, in_dims...], w [out_channels, in_channels / group,
 * kernel...], bias [out_channels] (optional), y [batch, out_channels,
 * out_dims...]; out_dims are the caller's (the ONNX rules, ceil mode and
 * auto_pad already applied), pad_begin the leading pads (trailing ones
 * follow from out_dims). Epilogue: y = act(conv + bias + residual), with
 * residual (optional) in y's layout. */
typedef struct osp_conv_args {
    int spatial_rank;
    int64_t batch, in_channels, out_channels, group;
    int64_t in_dims[OSP_CONV_MAX_SPATIAL];
    int64_t out_dims[OSP_CONV_MAX_SPATIAL];
    int64_t kernel[OSP_CONV_MAX_SPATIAL];
    int64_t stride[OSP_CONV_MAX_SPATIAL];
    int64_t pad_begin[OSP_CONV_MAX_SPATIAL];
    int64_t dilation[OSP_CONV_MAX_SPATIAL];
    const float *x;
    const float *w;
    const float *bias;
    const float *residual;
    float *y;
    osp_unary_op act;
    float act_alpha, act_beta;
    /* (optional, borrowed) w packed by osp_op_conv_prepack for these
     * shapes on this stream's device; NULL: the device reads w. */
    const osp_packed_weights *packed_w;
    /* FP32 products may use TF32 tensor cores where the device's conv
     * goes through its GEMM library (the CUDA device: 1x1 convs always,
     * others given a workspace); ignored elsewhere (depthwise convs, the
     * CPU device). Default off. */
    bool allow_tf32;
    /* (optional, borrowed) w rounded to FP16, in w's layout (the caller's
     * one-time conversion). When set, the conv is computed from x and w
     * rounded to FP16 with FP32 accumulation, y FP32 (the epilogue in
     * FP32), on every device (the CPU widens them and runs its FP32
     * conv), and w is not read (it may be NULL). Not for depthwise convs
     * (in_channels == group > 1): INVALID_ARG. It needs a workspace of
     * at least one output position's im2col column (in_channels x taps
     * x 2 bytes; INVALID_ARG otherwise); osp_conv_workspace_bytes(args,
     * true) is what runs in the fewest chunks. */
    const void *w_fp16;
    /* (optional) scratch device memory of workspace_bytes, 64-byte
     * aligned, that the conv may overwrite: the CUDA device's GEMM route
     * (allow_tf32, w_fp16) lays the im2col matrix there, chunk by chunk
     * (osp_conv_workspace_bytes is what runs in the fewest chunks). Under
     * allow_tf32, a conv with no workspace, or too little for one output
     * position's column, runs in FP32 on the device's own kernels. */
    void *workspace;
    size_t workspace_bytes;
} osp_conv_args;

osp_error *osp_op_conv(osp_stream *stream, const osp_conv_args *args);

/* Bytes of scratch args' conv uses (only its shapes and allow_tf32 are
 * read): 0 when no device takes a GEMM route for it (FP32 without
 * allow_tf32, depthwise convs, a 1x1 conv of stride 1 without padding
 * under allow_tf32, which multiplies x in place); with fp16 (the
 * w_fp16 form) or allow_tf32, the im2col matrix of the whole batch
 * (FP16 or FP32 elements), at most OSP_CONV_WORKSPACE_MAX_BYTES, and at
 * least one output position's column over every group. Saturates at
 * SIZE_MAX (the dispatcher refuses such shapes anyway). */
size_t osp_conv_workspace_bytes(const osp_conv_args *args, bool fp16);

/* Lays args->w out for the device's conv kernel, once (at plan time), so
 * that later osp_op_conv calls with the same w, group, channels and
 * kernel pass the result as packed_w instead of repacking every call.
 * Only args' shapes and w are read (x, y may be NULL). *out (caller owns,
 * osp_packed_weights_free) is NULL when the device has no packed form
 * for this conv: then call osp_op_conv without. Synchronous. */
osp_error *osp_op_conv_prepack(osp_stream *stream, const osp_conv_args *args,
                               osp_packed_weights **out);

/* Frees a packed form from osp_op_gemm_prepack or osp_op_conv_prepack
 * on `dev` (NULL: nothing). */
void osp_packed_weights_free(osp_device *dev, osp_packed_weights *packed);

/* FP32 only, the transpose (gradient) of conv: x [batch, in_channels,
 * in_dims...], w [in_channels, out_channels / group, kernel...], bias
 * [out_channels] (optional), y [batch, out_channels, out_dims...] with
 * out_dims the caller's (output_padding and output_shape applied) and
 * pad_begin the leading pads; activation and residual are not used. */
typedef osp_conv_args osp_conv_transpose_args;

osp_error *osp_op_conv_transpose(osp_stream *stream,
                                 const osp_conv_transpose_args *args);

typedef enum osp_pool_kind {
    OSP_POOL_MAX = 0,
    OSP_POOL_AVG,
    OSP_POOL_LP,
} osp_pool_kind;

/* FP32 only. x [planes, in_dims...] (planes = batch * channels), y
 * [planes, out_dims...], out_dims the caller's (ceil mode applied).
 * Padded positions never win a MAX; AVG divides by the window's size
 * inside the padded input when count_include_pad, else by the number of
 * real elements (windows that hang past the padded input count only
 * what they cover, as ONNX does in ceil mode). LP is (sum |x|^p)^(1/p).
 * indices (optional, INT64, MAX only) gets each maximum's flat index in
 * x's [batch, channels, in_dims...] layout (ONNX MaxPool's Indices with
 * storage_order 0). */
typedef struct osp_pool_args {
    osp_pool_kind kind;
    int spatial_rank;
    int64_t planes;
    int64_t in_dims[OSP_CONV_MAX_SPATIAL];
    int64_t out_dims[OSP_CONV_MAX_SPATIAL];
    int64_t kernel[OSP_CONV_MAX_SPATIAL];
    int64_t stride[OSP_CONV_MAX_SPATIAL];
    int64_t pad_begin[OSP_CONV_MAX_SPATIAL];
    int64_t dilation[OSP_CONV_MAX_SPATIAL];
    bool count_include_pad;
    float p;
    const float *x;
    float *y;
    int64_t *indices;
} osp_pool_args;

osp_error *osp_op_pool(osp_stream *stream, const osp_pool_args *args);

/* ---- selection and scans --------------------------------------------------
 */

/* FP32 or INT64 x viewed as [outer, n, inner]: the k largest (or smallest)
 * of each x[o, :, i] into values [outer, k, inner] (x's dtype) and
 * indices (INT64, same shape), sorted (largest first, or smallest first)
 * when `sorted`, ties broken by the lower index. 0 <= k <= n. */
typedef struct osp_topk_args {
    osp_datatype dtype;
    const void *x;
    int64_t outer, n, inner, k;
    bool largest, sorted;
    void *values;
    int64_t *indices;
} osp_topk_args;

osp_error *osp_op_topk(osp_stream *stream, const osp_topk_args *args);

/* Running sum of x [outer, n, inner] along the middle axis into y (same
 * shape; dtype FP32, INT32 or INT64), exclusive and/or reversed as ONNX
 * CumSum. */
typedef struct osp_cumsum_args {
    osp_datatype dtype;
    const void *x;
    void *y;
    int64_t outer, n, inner;
    bool exclusive, reverse;
} osp_cumsum_args;

osp_error *osp_op_cumsum(osp_stream *stream, const osp_cumsum_args *args);

/* ---- scatter --------------------------------------------------------------
 */

/* How osp_op_scatter combines an update with the element it lands on. */
typedef enum osp_scatter_reduction {
    OSP_SCATTER_NONE = 0, /* replace */
    OSP_SCATTER_ADD,
    OSP_SCATTER_MUL,
    OSP_SCATTER_MAX,
    OSP_SCATTER_MIN,
    OSP_SCATTER_REDUCTION_COUNT_
} osp_scatter_reduction;

/* The inverse of gather, in place: data viewed as contiguous [outer,
 * axis_len, inner], updates contiguous [outer, n_indices, inner], and
 * data[o, indices[j], i] = data[o, indices[j], i] (reduction)
 * updates[o, j, i] for every o, j, i. Indices are INT32 or INT64,
 * n_indices of them, negative counting from the end; one outside
 * [-axis_len, axis_len) is INVALID_ARG on devices that can tell before
 * writing anything (the CPU), skipped on others. NONE moves elements of
 * any fixed-size dtype; ADD, MUL, MAX and MIN take FP32, INT32 or INT64.
 * Repeated indices apply their updates one after the other, in order of
 * j on the CPU; with NONE another device may keep any one of them, with
 * the reductions the result is the same up to the order of float
 * rounding. updates must not overlap data. ScatterND, ScatterElements
 * and Scatter are this op on a flat index computed from theirs. */
typedef struct osp_scatter_args {
    osp_scatter_reduction reduction;
    osp_datatype dtype; /* of data and updates */
    void *data;
    int64_t outer, axis_len, inner;
    osp_datatype index_dtype;
    const void *indices;
    int64_t n_indices;
    const void *updates;
} osp_scatter_args;

osp_error *osp_op_scatter(osp_stream *stream, const osp_scatter_args *args);

#ifdef __cplusplus
}
#endif
