/*
 * pool (osprey/tensor_ops.h): MAX, AVG and LP over 1 to 3 spatial
 * dimensions, seen as three (leading dimensions of size 1), a thread per
 * output walking its window in order (depth, height, width), so that MAX
 * keeps the first maximum as the CPU device does (cpu_ops_pool.c):
 * padding and NaN never win a MAX, a window without a real element gives
 * -inf and index -1; AVG divides by the real elements, or with
 * count_include_pad by the window's positions inside the padded input
 * (pad_end the least that out_dims imply), 0 for an empty window; LP is
 * (sum |x|^p)^(1/p).
 */
#include <math.h>
#include <stdint.h>

#include "kernels_launch.cuh"
#include "kernels_nn.h"
#include "kernels_window.cuh"

typedef window_geom pool_geom;

__device__ float lp_term(float v, float p) {
    float a = fabsf(v);
    return p == 2.0f ? a * a : p == 1.0f ? a : powf(a, p);
}

/* AVG's divisor along dimension d for output o: the window's positions
 * that count. */
__device__ float avg_count(const pool_geom &g, int d, int64_t o,
                           bool include_pad) {
    int64_t in = g.in[d], s = g.stride[d], pad = g.pad[d], dil = g.dilation[d],
            k = g.kernel[d];
    int64_t pad_end = (g.out[d] - 1) * s + (k - 1) * dil + 1 - in - pad;
    if (pad_end < 0)
        pad_end = 0;
    int64_t lo = include_pad ? -pad : 0, hi = include_pad ? in + pad_end : in;
    int64_t n = 0;
    for (int64_t j = 0; j < k; j++) {
        int64_t at = o * s - pad + j * dil;
        n += at >= lo && at < hi;
    }
    return (float)n;
}

__global__ void pool_kernel(osp_pool_kind kind, pool_geom g, int64_t planes,
                            bool include_pad, float p, const float *x, float *y,
                            int64_t *indices) {
    size_t count = (size_t)planes * (size_t)g.out_size;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        int64_t plane = (int64_t)(i / (size_t)g.out_size);
        int64_t r = (int64_t)(i % (size_t)g.out_size);
        int64_t ow = r % g.out[2], oh = r / g.out[2] % g.out[1],
                od = r / g.out[2] / g.out[1];
        const float *xp = x + plane * g.in_size;
        float acc = kind == OSP_POOL_MAX ? -INFINITY : 0.0f;
        int64_t best_at = -1;
        for (int64_t kd = 0; kd < g.kernel[0]; kd++) {
            int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
            if (id < 0 || id >= g.in[0])
                continue;
            for (int64_t kh = 0; kh < g.kernel[1]; kh++) {
                int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
                if (ih < 0 || ih >= g.in[1])
                    continue;
                const float *row = xp + (id * g.in[1] + ih) * g.in[2];
                for (int64_t kw = 0; kw < g.kernel[2]; kw++) {
                    int64_t iw =
                        ow * g.stride[2] - g.pad[2] + kw * g.dilation[2];
                    if (iw < 0 || iw >= g.in[2])
                        continue;
                    float v = row[iw];
                    if (kind == OSP_POOL_MAX) {
                        if (v > acc) {
                            acc = v;
                            best_at = (id * g.in[1] + ih) * g.in[2] + iw;
                        }
                    } else {
                        acc += kind == OSP_POOL_LP ? lp_term(v, p) : v;
                    }
                }
            }
        }
        if (kind == OSP_POOL_AVG) {
            float d = avg_count(g, 0, od, include_pad) *
                      avg_count(g, 1, oh, include_pad) *
                      avg_count(g, 2, ow, include_pad);
            acc = d > 0.0f ? acc / d : 0.0f;
        } else if (kind == OSP_POOL_LP) {
            acc = p == 2.0f   ? sqrtf(acc)
                  : p == 1.0f ? acc
                              : powf(acc, 1.0f / p);
        }
        y[i] = acc;
        if (indices != NULL)
            indices[i] = best_at < 0 ? -1 : plane * g.in_size + best_at;
    }
}

extern "C" cudaError_t cuda_launch_pool(cudaStream_t stream,
                                        const osp_pool_args *a) {
    pool_geom g = window_geom_of(a);
    int64_t planes = a->planes;
    osp_pool_kind kind = a->kind;
    bool include_pad = a->count_include_pad;
    float p = a->p;
    size_t count = (size_t)planes * (size_t)g.out_size;
    const float *x = OSP_DEVICE_ARG(
        stream, a->x, (size_t)planes * (size_t)g.in_size * sizeof(float));
    float *y = OSP_DEVICE_ARG(stream, a->y, count * sizeof(float));
    int64_t *indices =
        a->indices != NULL
            ? OSP_DEVICE_ARG(stream, a->indices, count * sizeof(int64_t))
            : NULL;
    return OSP_LAUNCH(pool_kernel, cuda_grid_for(count), OSP_CUDA_BLOCK, 0,
                      stream, kind, g, planes, include_pad, p, x, y, indices);
}
