/*
 * Dispatch of the matrix, convolution and pooling ops of
 * osprey/tensor_ops.h (gemm_ex, conv, conv_transpose, pool): argument
 * checks, so that a device may trust what it is given (shapes whose
 * element counts and window spans fit in int64 and size_t, pointers set
 * where there are elements), the zero-element shortcut, and gemm_ex's
 * fallback for devices that only have plain gemm.
 */
#include <limits.h>
#include <stdint.h>

#include "device_internal.h"
#include "osprey/device_impl.h"
#include "osprey/error.h"
#include "osprey/memory.h"
#include "osprey/tensor_ops.h"
#include "unary_rules.h"

/* ---- shared checks ------------------------------------------------------ */

/* UNSUPPORTED: the device left the op's slot empty. */
static osp_error *unsupported(const osp_device *dev, const char *op) {
    return osp_error_new(OSP_ERROR_UNSUPPORTED, "device %s has no %s op",
                         dev->info.name, op);
}

/* *out = a * b; false when the product leaves [0, INT64_MAX] or its bytes
 * as floats do not fit in size_t. a and b are non-negative. */
static bool mul_count(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) ||
        (uint64_t)r > SIZE_MAX / sizeof(float))
        return false;
    *out = r;
    return true;
}

/* *out = a + b for non-negative a and b; false on overflow. */
static bool add_count(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---- gemm_ex ------------------------------------------------------------ */

/* Elements a batch of matrices spans: (batch - 1) * stride + extent, where
 * extent is rows x cols stored with row stride ld. False on overflow. */
static bool batch_span(int64_t batch, int64_t stride, int64_t rows,
                       int64_t cols, int64_t ld, int64_t *out) {
    int64_t extent, tail;
    if (rows == 0 || cols == 0) {
        *out = 0;
        return true;
    }
    if (!mul_count(rows - 1, ld, &extent) ||
        !add_count(extent, cols, &extent) ||
        !mul_count(batch - 1, stride, &tail) || !add_count(tail, extent, out))
        return false;
    return (uint64_t)*out <= SIZE_MAX / sizeof(float);
}

/* Everything osp_op_gemm checks, plus the batch, its strides, the epilogue
 * and the sizes the whole batch spans. *empty when there is no output. */
static osp_error *check_gemm_ex(const osp_gemm_ex_args *x, bool *empty) {
    const osp_gemm_args *g = &x->gemm;
    *empty = false;
    if (g->dtype != OSP_TYPE_FP32 && g->dtype != OSP_TYPE_FP16)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "gemm_ex: datatype %s is not FP32 or FP16",
                             osp_datatype_wire_name(g->dtype));
    osp_datatype c_dtype = osp_gemm_c_dtype(g);
    if (c_dtype != g->dtype &&
        !(g->dtype == OSP_TYPE_FP16 && c_dtype == OSP_TYPE_FP32))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "gemm_ex: C of %s with %s operands is not "
                             "supported (FP32 C takes FP16 operands only)",
                             osp_datatype_wire_name(c_dtype),
                             osp_datatype_wire_name(g->dtype));
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->m > INT_MAX || g->n > INT_MAX ||
        g->k > INT_MAX)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_ex: invalid shape m=%lld n=%lld k=%lld",
                             (long long)g->m, (long long)g->n, (long long)g->k);
    if (x->batch_count < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_ex: batch_count %lld is negative",
                             (long long)x->batch_count);
    if (!unary_is_f32_op(x->act))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_ex: %d is not an activation", (int)x->act);
    int64_t batch = x->batch_count > 1 ? x->batch_count : 1;
    if (batch > 1 && (x->stride_a < 0 || x->stride_b < 0 || x->stride_c < 0))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_ex: negative batch stride (a %lld, b %lld, "
                             "c %lld)",
                             (long long)x->stride_a, (long long)x->stride_b,
                             (long long)x->stride_c);
    if (g->m == 0 || g->n == 0) {
        *empty = true;
        return NULL;
    }
    osp_error *err;
    int64_t a_rows = g->trans_a ? g->k : g->m,
            a_cols = g->trans_a ? g->m : g->k;
    int64_t b_rows = g->trans_b ? g->n : g->k,
            b_cols = g->trans_b ? g->k : g->n;
    if ((err = device_gemm_check_matrix("a", g->a, a_rows, a_cols, g->lda)) !=
            NULL ||
        (err = device_gemm_check_matrix("b", g->b, b_rows, b_cols, g->ldb)) !=
            NULL ||
        (err = device_gemm_check_matrix("c", g->c, g->m, g->n, g->ldc)) != NULL)
        return err;
    int64_t span;
    if (!batch_span(batch, x->stride_a, a_rows, a_cols, g->lda, &span) ||
        !batch_span(batch, x->stride_b, b_rows, b_cols, g->ldb, &span) ||
        !batch_span(batch, x->stride_c, g->m, g->n, g->ldc, &span))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_ex: a batch of %lld matrices overflows",
                             (long long)batch);
    /* Outputs of different batch elements must not overlap. */
    if (batch > 1 && x->stride_c < (g->m - 1) * g->ldc + g->n)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_ex: stride_c %lld makes the %lldx%lld "
                             "outputs (ldc %lld) overlap",
                             (long long)x->stride_c, (long long)g->m,
                             (long long)g->n, (long long)g->ldc);
    return NULL;
}

/* A temporary FP32 array of `count` elements in device memory; *buf is set
 * (caller owns it) or an error returned. */
static osp_error *fallback_temp(osp_device *dev, int64_t count,
                                osp_buffer **buf) {
    return osp_device_alloc(dev, (size_t)count * sizeof(float), buf);
}

/* Frees the fallback's temporaries once the stream has used them: a host
 * function after the work where the stream can run one, else after
 * synchronising. */
static void free_when_done(void *arg) {
    osp_buffer_free(arg);
}

static void fallback_release(osp_stream *stream, osp_buffer *buf) {
    if (buf == NULL)
        return;
    osp_error *err = osp_stream_launch_host_func(stream, free_when_done, buf);
    if (err == NULL)
        return;
    osp_error_free(err);
    osp_error_free(osp_stream_synchronize(stream));
    osp_buffer_free(buf);
}

/* An FP32 [batch, m, n] view: data and its three strides. */
typedef struct fp32_view {
    const float *data;
    int64_t strides[3];
} fp32_view;

/* out (contiguous [batch, m, n]) = a + b through binary_nd. */
static osp_error *fallback_add(osp_stream *stream, int64_t batch, int64_t m,
                               int64_t n, fp32_view a, fp32_view b,
                               float *out) {
    osp_binary_nd_args add = {
        .op = OSP_BINARY_ND_ADD,
        .dtype = OSP_TYPE_FP32,
        .rank = 3,
        .dims = {batch, m, n},
        .a = a.data,
        .a_strides = {a.strides[0], a.strides[1], a.strides[2]},
        .b = b.data,
        .b_strides = {b.strides[0], b.strides[1], b.strides[2]},
        .out = out,
    };
    return osp_op_binary_nd(stream, &add);
}

/* Copies the [batch, m, n] view src into dst (strides ldc, stride_c), a row
 * at a time unless both are contiguous. */
static osp_error *fallback_copy(osp_stream *stream, int64_t batch, int64_t m,
                                int64_t n, fp32_view src, float *dst,
                                int64_t ldc, int64_t stride_c) {
    bool packed =
        src.strides[1] == n && ldc == n &&
        (batch == 1 || (src.strides[0] == m * n && stride_c == m * n));
    if (packed)
        return osp_memcpy_async(stream, dst, src.data,
                                (size_t)(batch * m * n) * sizeof(float),
                                OSP_COPY_DEVICE_TO_DEVICE);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t r = 0; r < m; r++) {
            osp_error *err = osp_memcpy_async(
                stream, dst + b * stride_c + r * ldc,
                src.data + b * src.strides[0] + r * src.strides[1],
                (size_t)n * sizeof(float), OSP_COPY_DEVICE_TO_DEVICE);
            if (err != NULL)
                return err;
        }
    return NULL;
}

/* gemm_ex on a device without the slot: a gemm per batch element, then
 * the epilogue through binary_nd (bias, residual) and unary (act). Both
 * binary_nd adds write a contiguous temporary (their output may not alias
 * an input), the activation runs in place there (unary allows it), and
 * the result is copied back into C. FP16 has no epilogue this way (unary
 * and binary_nd are not FP16 ops): UNSUPPORTED. */
static osp_error *gemm_ex_fallback(osp_stream *stream,
                                   const osp_gemm_ex_args *x) {
    osp_device *dev = stream->device;
    const osp_gemm_args *g = &x->gemm;
    int64_t batch = x->batch_count > 1 ? x->batch_count : 1;
    bool epilogue =
        x->bias != NULL || x->residual != NULL || x->act != OSP_UNARY_IDENTITY;
    if (osp_gemm_c_dtype(g) != g->dtype)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "device %s has no gemm_ex op, and its fallback "
                             "has no FP32 C for FP16 operands",
                             dev->info.name);
    if (epilogue && g->dtype != OSP_TYPE_FP32)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "device %s has no gemm_ex op, and its fallback "
                             "has no epilogue for %s",
                             dev->info.name, osp_datatype_wire_name(g->dtype));
    size_t elem = g->dtype == OSP_TYPE_FP16 ? 2 : 4;
    osp_error *err = NULL;
    osp_buffer *tmp[2] = {NULL, NULL};
    for (int64_t b = 0; b < batch; b++) {
        osp_gemm_args one = *g;
        one.a = (const char *)g->a + (size_t)(b * x->stride_a) * elem;
        one.b = (const char *)g->b + (size_t)(b * x->stride_b) * elem;
        one.c = (char *)g->c + (size_t)(b * x->stride_c) * elem;
        err = osp_op_gemm(stream, &one);
        if (err != NULL)
            goto out;
    }
    if (!epilogue)
        goto out;

    int64_t m = g->m, n = g->n, count = batch * m * n;
    float *c = g->c;
    fp32_view cur = {c, {x->stride_c, g->ldc, 1}};
    bool c_packed = g->ldc == n && (batch == 1 || x->stride_c == m * n);
    int used = 0;
    const fp32_view adds[2] = {
        {x->bias, {0, 0, 1}},
        {x->residual, {x->stride_c, g->ldc, 1}},
    };
    int n_adds = (x->bias != NULL) + (x->residual != NULL);
    for (int i = 0, done = 0; i < 2; i++) {
        if (adds[i].data == NULL)
            continue;
        done++;
        float *dst;
        if (done == n_adds && c_packed && cur.data != c) {
            dst = c; /* the last add lands in C when C is not its input */
        } else {
            if (tmp[used] == NULL &&
                (err = fallback_temp(dev, count, &tmp[used])) != NULL)
                goto out;
            dst = tmp[used]->data;
            used ^= 1;
        }
        err = fallback_add(stream, batch, m, n, cur, adds[i], dst);
        if (err != NULL)
            goto out;
        cur = (fp32_view){dst, {m * n, n, 1}};
    }
    if (x->act != OSP_UNARY_IDENTITY) {
        if (cur.data == c && !c_packed) {
            /* No add ran and C has gaps: activate a packed copy. */
            if ((err = fallback_temp(dev, count, &tmp[0])) != NULL ||
                (err = fallback_copy(stream, batch, m, n, cur, tmp[0]->data, n,
                                     m * n)) != NULL)
                goto out;
            cur = (fp32_view){tmp[0]->data, {m * n, n, 1}};
        }
        osp_unary_args act = {
            .op = x->act,
            .dtype = OSP_TYPE_FP32,
            .x = cur.data,
            .y = (void *)cur.data,
            .n = (size_t)count,
            .alpha = x->act_alpha,
            .beta = x->act_beta,
        };
        if ((err = osp_op_unary(stream, &act)) != NULL)
            goto out;
    }
    if (cur.data != c)
        err = fallback_copy(stream, batch, m, n, cur, c, g->ldc, x->stride_c);
out:
    fallback_release(stream, tmp[0]);
    fallback_release(stream, tmp[1]);
    return err;
}

osp_error *osp_op_gemm_ex(osp_stream *stream, const osp_gemm_ex_args *args) {
    if (stream == NULL || args == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_ex: stream and args are required");
    bool empty;
    osp_error *err = check_gemm_ex(args, &empty);
    if (err != NULL || empty)
        return err;
    osp_device *dev = stream->device;
    if (dev->ops->gemm_ex == NULL)
        return gemm_ex_fallback(stream, args);
    return dev->ops->gemm_ex(dev, stream->impl, args);
}

osp_error *osp_op_gemm_prepack(osp_stream *stream, const osp_gemm_ex_args *args,
                               osp_packed_weights **out) {
    if (stream == NULL || args == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_prepack: stream, args and out are required");
    *out = NULL;
    const osp_gemm_args *g = &args->gemm;
    if (g->n < 1 || g->k < 1 || g->n > INT_MAX || g->k > INT_MAX)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm_prepack: invalid shape n=%lld k=%lld",
                             (long long)g->n, (long long)g->k);
    osp_error *err = device_gemm_check_matrix(
        "b", g->b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb);
    if (err != NULL)
        return err;
    osp_device *dev = stream->device;
    if (g->dtype != OSP_TYPE_FP32 || dev->ops->gemm_prepack == NULL)
        return NULL;
    return dev->ops->gemm_prepack(dev, stream->impl, args, out);
}

/* ---- conv, conv_transpose ----------------------------------------------- */

/* Checks the spatial description shared by conv and pool: per dimension
 * in >= 1, out >= 0, kernel, stride and dilation >= 1, pad_begin >= 0,
 * and every window's span addressable in int64. Sets *in_count and
 * *out_count (the product of in_dims and of out_dims) and *kernel_count. */
static osp_error *check_spatial(const char *op, int rank, const int64_t *in,
                                const int64_t *out, const int64_t *kernel,
                                const int64_t *stride, const int64_t *pad,
                                const int64_t *dilation, int64_t *in_count,
                                int64_t *out_count, int64_t *kernel_count) {
    if (rank < 1 || rank > OSP_CONV_MAX_SPATIAL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: spatial_rank %d is not 1 to %d", op, rank,
                             OSP_CONV_MAX_SPATIAL);
    *in_count = *out_count = *kernel_count = 1;
    for (int d = 0; d < rank; d++) {
        if (in[d] < 1 || out[d] < 0 || kernel[d] < 1 || stride[d] < 1 ||
            dilation[d] < 1 || pad[d] < 0)
            return osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "%s: dimension %d invalid (in %lld, out %lld, kernel %lld, "
                "stride %lld, pad %lld, dilation %lld)",
                op, d, (long long)in[d], (long long)out[d],
                (long long)kernel[d], (long long)stride[d], (long long)pad[d],
                (long long)dilation[d]);
        /* The farthest position a window reaches, from either end. */
        int64_t reach, window;
        if (!mul_count(out[d] > 0 ? out[d] - 1 : 0, stride[d], &reach) ||
            !mul_count(kernel[d] - 1, dilation[d], &window) ||
            !add_count(reach, window, &reach) ||
            !add_count(reach, in[d], &reach) ||
            !add_count(reach, pad[d], &reach) ||
            !mul_count(*in_count, in[d], in_count) ||
            !mul_count(*out_count, out[d], out_count) ||
            !mul_count(*kernel_count, kernel[d], kernel_count))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "%s: dimension %d overflows", op, d);
    }
    return NULL;
}

/* Checks conv (transpose false) or conv_transpose arguments; *empty when y
 * has no elements. shapes_only (prepack): only w is required. */
static osp_error *check_conv(const char *op, const osp_conv_args *a,
                             bool transpose, bool shapes_only, bool *empty) {
    *empty = false;
    int64_t in_sp, out_sp, k_sp;
    osp_error *err = check_spatial(op, a->spatial_rank, a->in_dims, a->out_dims,
                                   a->kernel, a->stride, a->pad_begin,
                                   a->dilation, &in_sp, &out_sp, &k_sp);
    if (err != NULL)
        return err;
    if (a->batch < 0 || a->in_channels < 1 || a->out_channels < 0 ||
        a->group < 1 || a->in_channels % a->group != 0 ||
        a->out_channels % a->group != 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: invalid channels (batch %lld, in %lld, out "
                             "%lld, group %lld; group must divide both)",
                             op, (long long)a->batch, (long long)a->in_channels,
                             (long long)a->out_channels, (long long)a->group);
    if (!transpose && !unary_is_f32_op(a->act))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: %d is not an activation", op, (int)a->act);
    int64_t x_count, w_count, y_count;
    int64_t w_rows = transpose ? a->in_channels : a->out_channels;
    int64_t w_cols =
        transpose ? a->out_channels / a->group : a->in_channels / a->group;
    if (!mul_count(a->batch, a->in_channels, &x_count) ||
        !mul_count(x_count, in_sp, &x_count) ||
        !mul_count(w_rows, w_cols, &w_count) ||
        !mul_count(w_count, k_sp, &w_count) ||
        !mul_count(a->batch, a->out_channels, &y_count) ||
        !mul_count(y_count, out_sp, &y_count))
        return osp_error_new(OSP_ERROR_INVALID_ARG, "%s: tensor sizes overflow",
                             op);
    if (shapes_only)
        return a->w == NULL || w_count == 0
                   ? osp_error_new(OSP_ERROR_INVALID_ARG, "%s: w is required",
                                   op)
                   : NULL;
    if (y_count == 0) {
        *empty = true;
        return NULL;
    }
    if (a->x == NULL || (a->w == NULL && a->w_fp16 == NULL) || a->y == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: x, w and y are required", op);
    if (a->w_fp16 == NULL)
        return NULL;
    if (transpose || (a->group > 1 && a->in_channels == a->group))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: w_fp16 is for convs other than depthwise "
                             "ones",
                             op);
    /* One output position's im2col column, over every group, in FP16. */
    size_t column = (size_t)a->in_channels * (size_t)k_sp * 2;
    if (a->workspace == NULL || a->workspace_bytes < column)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: w_fp16 needs a workspace of at least %zu "
                             "bytes, got %zu",
                             op, column,
                             a->workspace != NULL ? a->workspace_bytes : 0);
    return NULL;
}

/* a * b, or SIZE_MAX when it does not fit. */
static size_t mul_saturating(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

size_t osp_conv_workspace_bytes(const osp_conv_args *a, bool fp16) {
    if (a == NULL || (!fp16 && !a->allow_tf32) || a->group < 1 ||
        a->in_channels < 1 || a->batch < 0 || a->spatial_rank < 1 ||
        a->spatial_rank > OSP_CONV_MAX_SPATIAL ||
        (a->group > 1 && a->in_channels == a->group))
        return 0;
    size_t taps = 1, positions = 1;
    bool pointwise = true;
    for (int d = 0; d < a->spatial_rank; d++) {
        if (a->kernel[d] < 1 || a->out_dims[d] < 0)
            return 0;
        taps = mul_saturating(taps, (size_t)a->kernel[d]);
        positions = mul_saturating(positions, (size_t)a->out_dims[d]);
        pointwise &= a->kernel[d] == 1 && a->stride[d] == 1 &&
                     a->pad_begin[d] == 0 && a->in_dims[d] == a->out_dims[d];
    }
    if (!fp16 && pointwise)
        return 0; /* x is the GEMM's operand as it lies */
    /* One output position's column: every group's channels x taps. */
    size_t column = mul_saturating(mul_saturating((size_t)a->in_channels, taps),
                                   fp16 ? 2 : 4);
    size_t whole =
        mul_saturating(mul_saturating(column, positions), (size_t)a->batch);
    size_t want = whole < OSP_CONV_WORKSPACE_MAX_BYTES
                      ? whole
                      : OSP_CONV_WORKSPACE_MAX_BYTES;
    return want > column ? want : column;
}

osp_error *osp_op_conv(osp_stream *stream, const osp_conv_args *args) {
    if (stream == NULL || args == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "conv: stream and args are required");
    bool empty;
    osp_error *err = check_conv("conv", args, false, false, &empty);
    if (err != NULL || empty)
        return err;
    osp_device *dev = stream->device;
    if (dev->ops->conv == NULL)
        return unsupported(dev, "conv");
    return dev->ops->conv(dev, stream->impl, args);
}

osp_error *osp_op_conv_prepack(osp_stream *stream, const osp_conv_args *args,
                               osp_packed_weights **out) {
    if (stream == NULL || args == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "conv_prepack: stream, args and out are required");
    *out = NULL;
    bool empty;
    osp_error *err = check_conv("conv_prepack", args, false, true, &empty);
    if (err != NULL)
        return err;
    osp_device *dev = stream->device;
    if (dev->ops->conv_prepack == NULL)
        return NULL;
    return dev->ops->conv_prepack(dev, stream->impl, args, out);
}

void osp_packed_weights_free(osp_device *dev, osp_packed_weights *packed) {
    if (dev != NULL && packed != NULL && dev->ops->packed_weights_free != NULL)
        dev->ops->packed_weights_free(dev, packed);
}

osp_error *osp_op_conv_transpose(osp_stream *stream,
                                 const osp_conv_transpose_args *args) {
    if (stream == NULL || args == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "conv_transpose: stream and args are required");
    bool empty;
    osp_error *err = check_conv("conv_transpose", args, true, false, &empty);
    if (err != NULL || empty)
        return err;
    osp_device *dev = stream->device;
    if (dev->ops->conv_transpose == NULL)
        return unsupported(dev, "conv_transpose");
    return dev->ops->conv_transpose(dev, stream->impl, args);
}

/* ---- pool --------------------------------------------------------------- */

osp_error *osp_op_pool(osp_stream *stream, const osp_pool_args *args) {
    if (stream == NULL || args == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "pool: stream and args are required");
    const osp_pool_args *a = args;
    if (a->kind < OSP_POOL_MAX || a->kind > OSP_POOL_LP)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "pool: unknown kind %d",
                             (int)a->kind);
    if (a->kind == OSP_POOL_LP && !(a->p > 0.0f && a->p <= 1e30f))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "pool: LP needs a positive finite p, not %g",
                             (double)a->p);
    if (a->kind != OSP_POOL_MAX && a->indices != NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "pool: indices are for MAX only");
    int64_t in_sp, out_sp, k_sp, x_count, y_count;
    osp_error *err = check_spatial(
        "pool", a->spatial_rank, a->in_dims, a->out_dims, a->kernel, a->stride,
        a->pad_begin, a->dilation, &in_sp, &out_sp, &k_sp);
    if (err != NULL)
        return err;
    if (a->planes < 0 || !mul_count(a->planes, in_sp, &x_count) ||
        !mul_count(a->planes, out_sp, &y_count))
        return osp_error_new(OSP_ERROR_INVALID_ARG, "pool: invalid planes %lld",
                             (long long)a->planes);
    if (y_count == 0)
        return NULL;
    if (a->x == NULL || a->y == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "pool: x and y are required");
    osp_device *dev = stream->device;
    if (dev->ops->pool == NULL)
        return unsupported(dev, "pool");
    return dev->ops->pool(dev, stream->impl, args);
}
