/*
 * Normalisations (osprey/tensor_ops.h): softmax and log-softmax along the
 * middle axis of [outer, n, inner], layer_norm over rows, channel_affine
 * (batch and instance norm's per-channel scale and shift, activation
 * fused). Semantics are the CPU device's (cpu_ops_reduce.c): sums in
 * double, NaN-propagating max, the same exp (unary_rules.h), flushed to 0
 * below FLT_MIN.
 *
 * softmax and layer_norm give a line a block when its elements are close
 * together and it is long enough to keep a block busy (inner below
 * LINE_INNER_MAX and n at least LINE_N_MIN; layer_norm's rows always),
 * the block's threads striding along it and combining in shared memory;
 * otherwise softmax gives a thread per line, neighbouring threads on
 * neighbouring columns. Where out aliases x each element is read and
 * then written by one thread, after the line's reductions.
 */
#include <math.h>
#include <stdint.h>

#include "kernels_block.cuh"
#include "kernels_launch.cuh"
#include "kernels_nn.h"
#include "unary_rules.h"

enum { LINE_INNER_MAX = 32, LINE_N_MIN = 64 };

/* ---- softmax ------------------------------------------------------------- */

template <bool BLOCK>
__global__ void softmax_kernel(const float *x, float *out, int64_t outer,
                               int64_t n, int64_t inner, bool log_) {
    size_t count = (size_t)outer * (size_t)inner;
    int64_t first = BLOCK ? (int64_t)threadIdx.x : 0;
    int64_t step = BLOCK ? (int64_t)blockDim.x : 1;
    size_t q0 =
        BLOCK ? blockIdx.x : blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t q_step = BLOCK ? gridDim.x : (size_t)gridDim.x * blockDim.x;
    for (size_t q = q0; q < count; q += q_step) {
        int64_t o = (int64_t)(q / (size_t)inner), i = (int64_t)(q % inner);
        const float *line = x + o * n * inner + i;
        float *y = out + o * n * inner + i;
        float m = -INFINITY;
        for (int64_t k = first; k < n; k += step)
            m = reduce_combine_max_nan()(m, line[k * inner]);
        if (BLOCK)
            m = block_combine(m, reduce_combine_max_nan());
        double s = 0.0;
        for (int64_t k = first; k < n; k += step)
            s += softmax_exp_shifted(line[k * inner] - m);
        if (BLOCK)
            s = block_combine(s, reduce_combine_add());
        float f = log_ ? (float)log(s) : (float)(1.0 / s);
        for (int64_t k = first; k < n; k += step) {
            float v = line[k * inner];
            y[k * inner] = log_ ? (v - m) - f : softmax_exp_shifted(v - m) * f;
        }
    }
}

extern "C" cudaError_t cuda_launch_softmax(cudaStream_t stream,
                                           const osp_softmax_args *a) {
    int64_t outer = a->outer, n = a->n, inner = a->inner;
    bool log_ = a->log;
    size_t lines = (size_t)outer * (size_t)inner;
    const float *x =
        OSP_DEVICE_ARG(stream, a->x, lines * (size_t)n * sizeof(float));
    float *out =
        OSP_DEVICE_ARG(stream, a->out, lines * (size_t)n * sizeof(float));
    if (inner < LINE_INNER_MAX && n >= LINE_N_MIN)
        return OSP_LAUNCH_BLOCK_SYNC(
            softmax_kernel<true>, lines > 65535 ? 65535u : (unsigned)lines,
            OSP_CUDA_BLOCK, 0, stream, x, out, outer, n, inner, log_);
    return OSP_LAUNCH(softmax_kernel<false>, cuda_grid_for(lines),
                      OSP_CUDA_BLOCK, 0, stream, x, out, outer, n, inner, log_);
}

/* ---- layer_norm ---------------------------------------------------------- */

/* A block per row (grid-stride over rows). Mean and the two-pass variance
 * in double; the row's mean and 1/sqrt(var + epsilon) also go to mean and
 * inv_std where given. cols may be 0 (x and out are then unused). */
__global__ void layer_norm_kernel(const float *x, const float *scale,
                                  const float *bias, float *out, int64_t rows,
                                  int64_t cols, float epsilon, float *mean_out,
                                  float *inv_std_out) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *row = x + r * cols;
        float *y = out + r * cols;
        double s = 0.0;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
            s += row[c];
        s = block_combine(s, reduce_combine_add());
        double mean = cols > 0 ? s / (double)cols : 0.0;
        double v = 0.0;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            double d = row[c] - mean;
            v += d * d;
        }
        v = block_combine(v, reduce_combine_add());
        double var = cols > 0 ? v / (double)cols : 0.0;
        float m = (float)mean;
        float inv = (float)(1.0 / sqrt(var + (double)epsilon));
        if (threadIdx.x == 0) {
            if (mean_out != NULL)
                mean_out[r] = m;
            if (inv_std_out != NULL)
                inv_std_out[r] = inv;
        }
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float t = (row[c] - m) * inv;
            if (scale != NULL)
                t = t * scale[c];
            if (bias != NULL)
                t = t + bias[c];
            y[c] = t;
        }
    }
}

extern "C" cudaError_t cuda_launch_layer_norm(cudaStream_t stream,
                                              const osp_layer_norm_args *a) {
    int64_t rows = a->rows, cols = a->cols;
    float epsilon = a->epsilon;
    size_t count = (size_t)rows * (size_t)cols;
    const float *x = OSP_DEVICE_ARG(stream, a->x, count * sizeof(float));
    float *out = OSP_DEVICE_ARG(stream, a->out, count * sizeof(float));
    const float *scale =
        a->scale != NULL
            ? OSP_DEVICE_ARG(stream, a->scale, (size_t)cols * sizeof(float))
            : NULL;
    const float *bias =
        a->bias != NULL
            ? OSP_DEVICE_ARG(stream, a->bias, (size_t)cols * sizeof(float))
            : NULL;
    float *mean = a->mean != NULL ? OSP_DEVICE_ARG(stream, a->mean,
                                                   (size_t)rows * sizeof(float))
                                  : NULL;
    float *inv_std =
        a->inv_std != NULL
            ? OSP_DEVICE_ARG(stream, a->inv_std, (size_t)rows * sizeof(float))
            : NULL;
    return OSP_LAUNCH_BLOCK_SYNC(layer_norm_kernel,
                                 rows > 65535 ? 65535u : (unsigned)rows,
                                 OSP_CUDA_BLOCK, 0, stream, x, scale, bias, out,
                                 rows, cols, epsilon, mean, inv_std);
}

/* ---- channel_affine ------------------------------------------------------ */

__global__ void channel_affine_kernel(const float *x, float *out, size_t count,
                                      int64_t channels, int64_t spatial,
                                      const float *scale, const float *shift,
                                      osp_unary_op act, float alpha,
                                      float beta) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t c = (int64_t)(i / (size_t)spatial % (size_t)channels);
        float sc = scale != NULL ? scale[c] : 1.0f;
        float sh = shift != NULL ? shift[c] : 0.0f;
        out[i] = unary_apply_f32(act, x[i] * sc + sh, alpha, beta);
    }
}

extern "C" cudaError_t
cuda_launch_channel_affine(cudaStream_t stream,
                           const osp_channel_affine_args *a) {
    size_t count = (size_t)a->batch * (size_t)a->channels * (size_t)a->spatial;
    const float *x = OSP_DEVICE_ARG(stream, a->x, count * sizeof(float));
    float *out = OSP_DEVICE_ARG(stream, a->out, count * sizeof(float));
    const float *scale =
        a->scale != NULL ? OSP_DEVICE_ARG(stream, a->scale,
                                          (size_t)a->channels * sizeof(float))
                         : NULL;
    const float *shift =
        a->shift != NULL ? OSP_DEVICE_ARG(stream, a->shift,
                                          (size_t)a->channels * sizeof(float))
                         : NULL;
    int64_t channels = a->channels, spatial = a->spatial;
    osp_unary_op act = a->act;
    float alpha = a->act_alpha, beta = a->act_beta;
    return OSP_LAUNCH(channel_affine_kernel, cuda_grid_for(count),
                      OSP_CUDA_BLOCK, 0, stream, x, out, count, channels,
                      spatial, scale, shift, act, alpha, beta);
}
