/*
 * The CUDA device's neural-network tensor-op slots (osprey/tensor_ops.h):
 * conv, conv_transpose, pool, reduce, softmax, layer_norm,
 * channel_affine (gemm_ex is in cuda_gemm.c). Each makes the device
 * current, enqueues its kernels (kernels_nn.h) on the stream and maps the
 * launch's status to an osp_error. Arguments were validated by the
 * dispatcher; none describes zero output elements.
 */
#include <limits.h>

#include "cuda_check.h"
#include "cuda_internal.h"
#include "kernels_nn.h"

/* A 1x1 conv with stride 1 and no padding: x already is the [channels,
 * positions] matrix of each image, so the GEMM is cuBLAS's (where its
 * sizes fit cuBLAS's ints). */
static bool conv_is_pointwise(const osp_conv_args *a) {
    if (a->group > 1 && a->in_channels == a->group)
        return false; /* depthwise: its own kernel */
    int64_t positions = 1;
    for (int d = 0; d < a->spatial_rank; d++) {
        if (a->kernel[d] != 1 || a->stride[d] != 1 || a->pad_begin[d] != 0 ||
            a->in_dims[d] != a->out_dims[d])
            return false;
        positions *= a->out_dims[d];
    }
    return positions <= INT_MAX && a->batch <= INT_MAX &&
           a->in_channels <= INT_MAX && a->out_channels <= INT_MAX;
}

/* Per group, every image in one cuBLAS call: y_b,g[mg, P] = w_g[mg, cg]
 * x_b,g[cg, P] (TF32 when args allow it); then the epilogue kernel where
 * there is one. */
static osp_error *conv_pointwise(cuda_stream *s, const osp_conv_args *a) {
    int64_t positions = 1;
    for (int d = 0; d < a->spatial_rank; d++)
        positions *= a->out_dims[d];
    int64_t cg = a->in_channels / a->group, mg = a->out_channels / a->group;
    for (int64_t gi = 0; gi < a->group; gi++) {
        osp_gemm_args g = {.m = mg,
                           .n = positions,
                           .k = cg,
                           .alpha = 1.0f,
                           .beta = 0.0f,
                           .dtype = OSP_TYPE_FP32,
                           .a = a->w + gi * mg * cg,
                           .lda = cg,
                           .b = a->x + gi * cg * positions,
                           .ldb = positions,
                           .c = a->y + gi * mg * positions,
                           .ldc = positions,
                           .allow_tf32 = a->allow_tf32};
        osp_error *err =
            cuda_gemm_batched(s, &g, a->batch, 0, a->in_channels * positions,
                              a->out_channels * positions);
        if (err != NULL)
            return err;
    }
    if (a->bias == NULL && a->residual == NULL && a->act == OSP_UNARY_IDENTITY)
        return NULL;
    return OSP_CUDA_CHECK(cuda_launch_conv_epilogue(s->stream, a));
}

/* The route of a conv: FP32 on the device's own kernels (depthwise,
 * implicit GEMM), except the products its kernels cannot make: FP16
 * operands (w_fp16) and TF32 (allow_tf32) go through cuBLAS, the 1x1
 * convs of stride 1 directly on x, the others through im2col in the
 * workspace (cuda_conv_gemm.c). Without room for that, TF32 falls back
 * to FP32. Depthwise convs stay FP32: they are bound by memory, not by
 * multiplications, and the dispatcher keeps w_fp16 from them. */
osp_error *cuda_conv(osp_device *dev, void *stream_impl,
                     const osp_conv_args *args) {
    cuda_stream *s = stream_impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    if (args->w_fp16 == NULL && conv_is_pointwise(args))
        return conv_pointwise(s, args);
    bool depthwise = args->group > 1 && args->in_channels == args->group;
    if (args->w_fp16 != NULL || (args->allow_tf32 && !depthwise)) {
        bool done;
        err = cuda_conv_gemm(s, args, &done);
        if (err != NULL || done)
            return err;
        if (args->w == NULL)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "conv: FP16 weights need the GEMM route, "
                                 "which these sizes exceed");
    }
    return OSP_CUDA_CHECK(cuda_launch_conv(s->stream, args));
}

/* The slots below only launch their kernel. */
#define CUDA_NN_SLOT(name, args_type)                                          \
    osp_error *cuda_##name(osp_device *dev, void *stream_impl,                 \
                           const args_type *args) {                            \
        cuda_stream *s = stream_impl;                                          \
        osp_error *err = cuda_device_make_current(dev);                        \
        if (err != NULL)                                                       \
            return err;                                                        \
        return OSP_CUDA_CHECK(cuda_launch_##name(s->stream, args));            \
    }

CUDA_NN_SLOT(conv_transpose, osp_conv_transpose_args)
CUDA_NN_SLOT(pool, osp_pool_args)
CUDA_NN_SLOT(reduce, osp_reduce_args)
CUDA_NN_SLOT(softmax, osp_softmax_args)
CUDA_NN_SLOT(layer_norm, osp_layer_norm_args)
CUDA_NN_SLOT(channel_affine, osp_channel_affine_args)
