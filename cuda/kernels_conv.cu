/*
 * Convolutions (osprey/tensor_ops.h), FP32, NCHW, 1 to 3 spatial
 * dimensions seen as three (leading dimensions of size 1), as the CPU
 * device sees them (cpu_ops_nn.h):
 * - conv as an implicit GEMM: per image and group, y_g[mg, P] = w_g[mg, K]
 *   col[K, P] where col (the im2col matrix, K = channels x taps, P the
 *   output positions) is never stored: each block gathers its tile of it
 *   from x into shared memory. Tiles of TILE_M x TILE_N outputs, TILE_K
 *   deep; each thread computes 4 x 4 of them, TILE_N / 4 apart along the
 *   positions, so that loads of x and stores of y are coalesced. The
 *   epilogue (bias, residual, activation) is applied in registers;
 * - depthwise conv (one input channel per group): a thread per output
 *   walking its taps, neighbouring threads on neighbouring positions;
 * - conv_epilogue: the epilogue alone, after the cuBLAS routes' GEMMs
 *   (pointwise in cuda_ops_nn.c, im2col in cuda_conv_gemm.c);
 * - conv_im2col: the im2col matrix of a chunk of images or output
 *   positions, FP32 or rounded to FP16, for cuda_conv_gemm.c's cuBLAS
 *   route (TF32, FP16 operands);
 * - conv_transpose: a thread per output gathering the inputs and taps
 *   that land on it (no atomics, deterministic).
 */
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "kernels_launch.cuh"
#include "kernels_nn.h"
#include "kernels_window.cuh"
#include "unary_rules.h"

enum { TILE_M = 64, TILE_N = 64, TILE_K = 16, THREAD_TILE = 4 };
/* The implicit GEMM's threads are 16 x 16, each THREAD_TILE x THREAD_TILE
 * outputs; the x tile's loads keep a column per thread. */
static_assert((int)OSP_CUDA_BLOCK == 256 && TILE_M == 16 * THREAD_TILE &&
                  TILE_N == 16 * THREAD_TILE &&
                  (int)OSP_CUDA_BLOCK % TILE_N == 0 &&
                  TILE_K <= (int)OSP_CUDA_BLOCK,
              "conv tile shape");

/* The shapes of a conv, by value. */
struct conv_geom : window_geom {
    int64_t batch, in_channels, out_channels, group;
};

/* The epilogue's operands: bias per output channel and residual in y's
 * layout, each optional. */
typedef struct conv_epilogue {
    const float *bias;
    const float *residual;
    osp_unary_op act;
    float alpha, beta;
} conv_epilogue;

__device__ float epilogue_apply(const conv_epilogue &e, float v, int64_t oc,
                                size_t at) {
    if (e.bias != NULL)
        v = v + e.bias[oc];
    if (e.residual != NULL)
        v = v + e.residual[at];
    return unary_apply_f32(e.act, v, e.alpha, e.beta);
}

/* ---- implicit GEMM ------------------------------------------------------- */

/* Each k-step of the implicit GEMM decodes its TILE_K rows of the im2col
 * matrix once (into shared memory): row k is input channel c and tap
 * (kd, kh, kw), which reads x at the channel's plane, shifted by the
 * dilated tap. */
typedef struct col_row {
    int64_t plane;      /* c * in_size, or -1 past the last row */
    int64_t dd, dh, dw; /* kd * dilation[0], ... */
} col_row;

/* Block (x: tile of positions, y: tile of the group's channels, z: image
 * and group, grid-stride). OSP_CUDA_BLOCK threads as 16 x 16; a thread
 * loads the x tile's column tid % TILE_N, so it decodes that output
 * position once. */
__global__ void conv_implicit_gemm_kernel(conv_geom g, const float *x,
                                          const float *w, float *y,
                                          conv_epilogue e) {
    /* +1: the weights' stores, a column at a time, hit distinct banks */
    __shared__ float tile_w[TILE_K][TILE_M + 1];
    __shared__ float tile_x[TILE_K][TILE_N];
    __shared__ col_row rows[TILE_K];
    const int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    const int64_t K = cg * g.kernel_size, P = g.out_size;
    const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.y * TILE_M,
                  p0 = (int64_t)blockIdx.x * TILE_N;
    /* This thread's output position in the x tile: where its window
     * starts in the input. */
    const int n_mine = tid % TILE_N;
    const int64_t p = p0 + n_mine;
    const bool p_ok = p < P;
    const int64_t ow = p % g.out[2], oh = p / g.out[2] % g.out[1],
                  od = p / g.out[2] / g.out[1];
    const int64_t d0 = od * g.stride[0] - g.pad[0],
                  h0 = oh * g.stride[1] - g.pad[1],
                  w0 = ow * g.stride[2] - g.pad[2];
    for (int64_t z = blockIdx.z; z < g.batch * g.group; z += gridDim.z) {
        int64_t b = z / g.group, gi = z % g.group;
        const float *xg = x + (b * g.in_channels + gi * cg) * g.in_size;
        float acc[THREAD_TILE][THREAD_TILE];
        for (int i = 0; i < THREAD_TILE; i++)
            for (int j = 0; j < THREAD_TILE; j++)
                acc[i][j] = 0.0f;
        for (int64_t k0 = 0; k0 < K; k0 += TILE_K) {
            if (tid < TILE_K) {
                int64_t k = k0 + tid, t = k % g.kernel_size;
                col_row r;
                r.plane = k < K ? k / g.kernel_size * g.in_size : -1;
                r.dw = t % g.kernel[2] * g.dilation[2];
                r.dh = t / g.kernel[2] % g.kernel[1] * g.dilation[1];
                r.dd = t / g.kernel[2] / g.kernel[1] * g.dilation[0];
                rows[tid] = r;
            }
            for (int e_ = tid; e_ < TILE_K * TILE_M; e_ += OSP_CUDA_BLOCK) {
                int kk = e_ % TILE_K, m = e_ / TILE_K;
                int64_t oc = m0 + m, k = k0 + kk;
                tile_w[kk][m] =
                    oc < mg && k < K ? w[(gi * mg + oc) * K + k] : 0.0f;
            }
            __syncthreads();
            for (int kk = tid / TILE_N; kk < TILE_K;
                 kk += OSP_CUDA_BLOCK / TILE_N) {
                col_row r = rows[kk];
                int64_t id = d0 + r.dd, ih = h0 + r.dh, iw = w0 + r.dw;
                bool inside = p_ok && r.plane >= 0 && id >= 0 && id < g.in[0] &&
                              ih >= 0 && ih < g.in[1] && iw >= 0 &&
                              iw < g.in[2];
                tile_x[kk][n_mine] =
                    inside ? xg[r.plane + (id * g.in[1] + ih) * g.in[2] + iw]
                           : 0.0f;
            }
            __syncthreads();
            for (int kk = 0; kk < TILE_K; kk++) {
                float a[THREAD_TILE], c[THREAD_TILE];
                for (int i = 0; i < THREAD_TILE; i++)
                    a[i] = tile_w[kk][ty + 16 * i];
                for (int j = 0; j < THREAD_TILE; j++)
                    c[j] = tile_x[kk][tx + 16 * j];
                for (int i = 0; i < THREAD_TILE; i++)
                    for (int j = 0; j < THREAD_TILE; j++)
                        acc[i][j] += a[i] * c[j];
            }
            __syncthreads();
        }
        for (int i = 0; i < THREAD_TILE; i++) {
            int64_t oc = m0 + ty + 16 * i;
            if (oc >= mg)
                continue;
            int64_t goc = gi * mg + oc;
            for (int j = 0; j < THREAD_TILE; j++) {
                int64_t q = p0 + tx + 16 * j;
                if (q >= P)
                    continue;
                size_t at =
                    (size_t)(b * g.out_channels + goc) * (size_t)P + (size_t)q;
                y[at] = epilogue_apply(e, acc[i][j], goc, at);
            }
        }
    }
}

/* ---- depthwise ----------------------------------------------------------- */

/* One input channel per group, out_channels / in_channels outputs each. */
__global__ void conv_depthwise_kernel(conv_geom g, const float *x,
                                      const float *w, float *y,
                                      conv_epilogue e) {
    size_t count = (size_t)(g.batch * g.out_channels) * (size_t)g.out_size;
    int64_t mult = g.out_channels / g.in_channels;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t plane = (int64_t)(i / (size_t)g.out_size);
        int64_t r = (int64_t)(i % (size_t)g.out_size);
        int64_t b = plane / g.out_channels, oc = plane % g.out_channels;
        int64_t ow = r % g.out[2], oh = r / g.out[2] % g.out[1],
                od = r / g.out[2] / g.out[1];
        const float *xp = x + (b * g.in_channels + oc / mult) * g.in_size;
        const float *wk = w + oc * g.kernel_size;
        float acc = 0.0f;
        for (int64_t kd = 0; kd < g.kernel[0]; kd++) {
            int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
            if (id < 0 || id >= g.in[0])
                continue;
            for (int64_t kh = 0; kh < g.kernel[1]; kh++) {
                int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
                if (ih < 0 || ih >= g.in[1])
                    continue;
                const float *row = xp + (id * g.in[1] + ih) * g.in[2];
                const float *wr = wk + (kd * g.kernel[1] + kh) * g.kernel[2];
                for (int64_t kw = 0; kw < g.kernel[2]; kw++) {
                    int64_t iw =
                        ow * g.stride[2] - g.pad[2] + kw * g.dilation[2];
                    if (iw >= 0 && iw < g.in[2])
                        acc += wr[kw] * row[iw];
                }
            }
        }
        y[i] = epilogue_apply(e, acc, oc, i);
    }
}

/* ---- im2col -------------------------------------------------------------- */

/* The images [b0, b0 + nb) and output positions [p0, p0 + np) of a chunk
 * of the GEMM route. */
typedef struct im2col_chunk {
    int64_t b0, nb, p0, np;
} im2col_chunk;

/* Element (row k, position q) of image b's im2col matrix for group gi:
 * row k is the group's input channel k / taps at tap k % taps, which
 * reads x at output position q's window shifted by the dilated tap, or
 * 0 in the padding. */
__device__ float im2col_value(const conv_geom &g, const float *x, int64_t b,
                              int64_t gi, int64_t k, int64_t q) {
    int64_t cg = g.in_channels / g.group;
    int64_t ch = gi * cg + k / g.kernel_size, t = k % g.kernel_size;
    int64_t ow = q % g.out[2], oh = q / g.out[2] % g.out[1],
            od = q / g.out[2] / g.out[1];
    int64_t kw = t % g.kernel[2], kh = t / g.kernel[2] % g.kernel[1],
            kd = t / g.kernel[2] / g.kernel[1];
    int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0],
            ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1],
            iw = ow * g.stride[2] - g.pad[2] + kw * g.dilation[2];
    if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 ||
        iw >= g.in[2])
        return 0.0f;
    return x[(b * g.in_channels + ch) * g.in_size +
             (id * g.in[1] + ih) * g.in[2] + iw];
}

__device__ void im2col_store(float *col, size_t i, float v) {
    col[i] = v;
}
__device__ void im2col_store(__half *col, size_t i, float v) {
    col[i] = __float2half_rn(v);
}

/* col[img][gi][k][p] (row-major, np positions a row) = the value of image
 * b0 + img, group gi, row k at position p0 + p; neighbouring threads take
 * neighbouring positions, so that they read neighbouring inputs. */
template <typename T>
__global__ void conv_im2col_kernel(conv_geom g, const float *x, T *col,
                                   im2col_chunk c) {
    const int64_t rows = g.in_channels / g.group * g.kernel_size;
    size_t count = (size_t)(c.nb * g.group * rows) * (size_t)c.np;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t p = (int64_t)(i % (size_t)c.np);
        int64_t row = (int64_t)(i / (size_t)c.np);
        int64_t k = row % rows, ig = row / rows;
        im2col_store(
            col, i,
            im2col_value(g, x, c.b0 + ig / g.group, ig % g.group, k, c.p0 + p));
    }
}

/* ---- the epilogue alone -------------------------------------------------- */

__global__ void conv_epilogue_kernel(float *y, size_t count, int64_t out_size,
                                     int64_t out_channels, conv_epilogue e) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t oc = (int64_t)(i / (size_t)out_size % (size_t)out_channels);
        y[i] = epilogue_apply(e, y[i], oc, i);
    }
}

/* ---- conv_transpose ------------------------------------------------------ */

/* y[b, oc, o] = bias[oc] + sum over the group's input channels ic and taps
 * t with o = i * stride - pad + t * dilation of x[b, ic, i] w[ic, oc', t]. */
__global__ void conv_transpose_kernel(conv_geom g, const float *x,
                                      const float *w, const float *bias,
                                      float *y) {
    size_t count = (size_t)(g.batch * g.out_channels) * (size_t)g.out_size;
    int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t plane = (int64_t)(i / (size_t)g.out_size);
        int64_t r = (int64_t)(i % (size_t)g.out_size);
        int64_t b = plane / g.out_channels, oc = plane % g.out_channels;
        int64_t gi = oc / mg, ocl = oc % mg;
        int64_t o[3] = {r / g.out[2] / g.out[1], r / g.out[2] % g.out[1],
                        r % g.out[2]};
        float acc = bias != NULL ? bias[oc] : 0.0f;
        for (int64_t kd = 0; kd < g.kernel[0]; kd++) {
            int64_t nd = o[0] + g.pad[0] - kd * g.dilation[0];
            if (nd < 0 || nd % g.stride[0] != 0 || nd / g.stride[0] >= g.in[0])
                continue;
            for (int64_t kh = 0; kh < g.kernel[1]; kh++) {
                int64_t nh = o[1] + g.pad[1] - kh * g.dilation[1];
                if (nh < 0 || nh % g.stride[1] != 0 ||
                    nh / g.stride[1] >= g.in[1])
                    continue;
                for (int64_t kw = 0; kw < g.kernel[2]; kw++) {
                    int64_t nw = o[2] + g.pad[2] - kw * g.dilation[2];
                    if (nw < 0 || nw % g.stride[2] != 0 ||
                        nw / g.stride[2] >= g.in[2])
                        continue;
                    int64_t at =
                        (nd / g.stride[0] * g.in[1] + nh / g.stride[1]) *
                            g.in[2] +
                        nw / g.stride[2];
                    int64_t tap = (kd * g.kernel[1] + kh) * g.kernel[2] + kw;
                    for (int64_t c = 0; c < cg; c++) {
                        int64_t ic = gi * cg + c;
                        acc += x[(b * g.in_channels + ic) * g.in_size + at] *
                               w[(ic * mg + ocl) * g.kernel_size + tap];
                    }
                }
            }
        }
        y[i] = acc;
    }
}

/* ---- launchers ----------------------------------------------------------- */

static conv_geom geom_of(const osp_conv_args *a) {
    conv_geom g;
    static_cast<window_geom &>(g) = window_geom_of(a);
    g.batch = a->batch;
    g.in_channels = a->in_channels;
    g.out_channels = a->out_channels;
    g.group = a->group;
    return g;
}

/* The epilogue's device pointers, checked for y's size. */
static conv_epilogue epilogue_of(cudaStream_t stream, const osp_conv_args *a,
                                 const conv_geom &g) {
    (void)stream; /* used by OSP_DEVICE_ARG in the fake build only */
    conv_epilogue e;
    e.bias = a->bias != NULL
                 ? OSP_DEVICE_ARG(stream, a->bias,
                                  (size_t)g.out_channels * sizeof(float))
                 : NULL;
    e.residual = a->residual != NULL
                     ? OSP_DEVICE_ARG(stream, a->residual,
                                      (size_t)(g.batch * g.out_channels) *
                                          (size_t)g.out_size * sizeof(float))
                     : NULL;
    e.act = a->act;
    e.alpha = a->act_alpha;
    e.beta = a->act_beta;
    return e;
}

extern "C" cudaError_t cuda_launch_conv(cudaStream_t stream,
                                        const osp_conv_args *a) {
    conv_geom g = geom_of(a);
    size_t x_count = (size_t)(g.batch * g.in_channels) * (size_t)g.in_size;
    size_t w_count = (size_t)g.out_channels *
                     (size_t)(g.in_channels / g.group) * (size_t)g.kernel_size;
    size_t y_count = (size_t)(g.batch * g.out_channels) * (size_t)g.out_size;
    const float *x = OSP_DEVICE_ARG(stream, a->x, x_count * sizeof(float));
    const float *w = OSP_DEVICE_ARG(stream, a->w, w_count * sizeof(float));
    float *y = OSP_DEVICE_ARG(stream, a->y, y_count * sizeof(float));
    conv_epilogue e = epilogue_of(stream, a, g);
    if (g.group > 1 && g.in_channels == g.group)
        return OSP_LAUNCH(conv_depthwise_kernel, cuda_grid_for(y_count),
                          OSP_CUDA_BLOCK, 0, stream, g, x, w, y, e);
    int64_t mg = g.out_channels / g.group;
    int64_t z = g.batch * g.group;
    dim3 grid((unsigned)((g.out_size + TILE_N - 1) / TILE_N),
              (unsigned)((mg + TILE_M - 1) / TILE_M),
              z > 65535 ? 65535u : (unsigned)z);
    return OSP_LAUNCH_BLOCK_SYNC(conv_implicit_gemm_kernel, grid,
                                 OSP_CUDA_BLOCK, 0, stream, g, x, w, y, e);
}

extern "C" cudaError_t cuda_launch_conv_im2col(cudaStream_t stream,
                                               const osp_conv_args *a,
                                               int64_t b0, int64_t nb,
                                               int64_t p0, int64_t np,
                                               bool fp16, void *col) {
    conv_geom g = geom_of(a);
    size_t x_count = (size_t)(g.batch * g.in_channels) * (size_t)g.in_size;
    size_t count = (size_t)(nb * g.in_channels * g.kernel_size) * (size_t)np;
    const float *x = OSP_DEVICE_ARG(stream, a->x, x_count * sizeof(float));
    im2col_chunk c;
    c.b0 = b0;
    c.nb = nb;
    c.p0 = p0;
    c.np = np;
    if (fp16) {
        __half *h = OSP_DEVICE_ARG(stream, (__half *)col, count * 2);
        return OSP_LAUNCH(conv_im2col_kernel<__half>, cuda_grid_for(count),
                          OSP_CUDA_BLOCK, 0, stream, g, x, h, c);
    }
    float *f = OSP_DEVICE_ARG(stream, (float *)col, count * 4);
    return OSP_LAUNCH(conv_im2col_kernel<float>, cuda_grid_for(count),
                      OSP_CUDA_BLOCK, 0, stream, g, x, f, c);
}

extern "C" cudaError_t cuda_launch_conv_epilogue(cudaStream_t stream,
                                                 const osp_conv_args *a) {
    conv_geom g = geom_of(a);
    size_t y_count = (size_t)(g.batch * g.out_channels) * (size_t)g.out_size;
    float *y = OSP_DEVICE_ARG(stream, a->y, y_count * sizeof(float));
    conv_epilogue e = epilogue_of(stream, a, g);
    int64_t out_size = g.out_size, out_channels = g.out_channels;
    return OSP_LAUNCH(conv_epilogue_kernel, cuda_grid_for(y_count),
                      OSP_CUDA_BLOCK, 0, stream, y, y_count, out_size,
                      out_channels, e);
}

extern "C" cudaError_t cuda_launch_conv_transpose(cudaStream_t stream,
                                                  const osp_conv_args *a) {
    conv_geom g = geom_of(a);
    size_t x_count = (size_t)(g.batch * g.in_channels) * (size_t)g.in_size;
    size_t w_count = (size_t)g.in_channels *
                     (size_t)(g.out_channels / g.group) * (size_t)g.kernel_size;
    size_t y_count = (size_t)(g.batch * g.out_channels) * (size_t)g.out_size;
    const float *x = OSP_DEVICE_ARG(stream, a->x, x_count * sizeof(float));
    const float *w = OSP_DEVICE_ARG(stream, a->w, w_count * sizeof(float));
    float *y = OSP_DEVICE_ARG(stream, a->y, y_count * sizeof(float));
    const float *bias =
        a->bias != NULL ? OSP_DEVICE_ARG(stream, a->bias,
                                         (size_t)g.out_channels * sizeof(float))
                        : NULL;
    return OSP_LAUNCH(conv_transpose_kernel, cuda_grid_for(y_count),
                      OSP_CUDA_BLOCK, 0, stream, g, x, w, bias, y);
}
