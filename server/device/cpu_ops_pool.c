/*
 * The CPU device's pool (osprey/tensor_ops.h): MAX, AVG and LP over 1 to 3
 * spatial dimensions (seen as three, cpu_ops_nn.h), with strides, leading
 * pads and dilation.
 *
 * Each output row (the last dimension) is built from whole input rows:
 * when the window is narrower than the output row, one pass per kernel
 * tap over the row's outputs (vectorised along the row); when it is wider
 * (global pooling), one reduction per output over the taps. MAX with
 * indices walks each window in order, keeping the first maximum.
 *
 * Padding never wins a MAX, and a window with no real element gives
 * -inf (index -1). AVG divides by the window's count of real elements, or
 * with count_include_pad by its count of positions inside the padded
 * input [-pad_begin, in + pad_end), pad_end being the least that out_dims
 * imply: max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - in -
 * pad_begin). A window with nothing to count gives 0. LP is
 * (sum |x|^p)^(1/p) over real elements.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_ops.h"
#include "cpu_ops_nn.h"
#include "cpu_threads.h"
#include "osprey/error.h"

typedef struct pool_plan {
    osp_pool_kind kind;
    float p;
    cpu_nn_geom g;
    /* AVG: per dimension, each output's divisor along it */
    float *counts[3];
    bool wide; /* window wider than the output row: reduce per output */
} pool_plan;

/* ---- row kernels -------------------------------------------------------- */

CPU_NN_INLINE float lp_term(float v, float p) {
    float a = fabsf(v);
    return p == 2.0f ? a * a : p == 1.0f ? a : powf(a, p);
}

/* Strided rows go through this many gathered elements at a time. */
#define POOL_GATHER_CHUNK 256

/* y[i] = max(y[i], x[i]) for i < n; padding and NaN never win. */
CPU_NN_INLINE void row_max_contiguous(float *restrict y,
                                      const float *restrict x, int64_t n) {
    CPU_NN_LOOP(n, i, y[i] = x[i] > y[i] ? x[i] : y[i]);
}

/* y[i] += x[i] (AVG) or its LP term, for i < n. */
CPU_NN_INLINE void row_sum_contiguous(float *restrict y,
                                      const float *restrict x, int64_t n,
                                      osp_pool_kind kind, float p) {
    if (kind == OSP_POOL_LP)
        CPU_NN_LOOP(n, i, y[i] += lp_term(x[i], p));
    else
        CPU_NN_LOOP(n, i, y[i] += x[i]);
}

/* y[i] = y[i] combined with x[i * step] for i < n: max for MAX, a sum
 * for AVG and LP. */
CPU_NN_INLINE void row_pool(float *y, const float *x, int64_t n, int64_t step,
                            osp_pool_kind kind, float p) {
    float gathered[POOL_GATHER_CHUNK];
    for (int64_t at = 0; at < n; at += POOL_GATHER_CHUNK) {
        int64_t len = n - at < POOL_GATHER_CHUNK ? n - at : POOL_GATHER_CHUNK;
        const float *src = x + at * step;
        if (step == 2) {
            cpu_nn_gather_even(gathered, src, len);
            src = gathered;
        } else if (step != 1) {
            for (int64_t i = 0; i < len; i++)
                gathered[i] = src[i * step];
            src = gathered;
        }
        if (kind == OSP_POOL_MAX)
            row_max_contiguous(y + at, src, len);
        else
            row_sum_contiguous(y + at, src, len, kind, p);
    }
}

/* The max (or sum, or LP sum) of x[i * step] for i < n, in
 * CPU_NN_BLOCK lanes. */
CPU_NN_INLINE float reduce_window(const float *restrict x, int64_t n,
                                  int64_t step, osp_pool_kind kind, float p) {
    float lane[CPU_NN_BLOCK];
    float init = kind == OSP_POOL_MAX ? -INFINITY : 0.0f;
    for (int j = 0; j < CPU_NN_BLOCK; j++)
        lane[j] = init;
    int64_t i = 0;
    for (; i + CPU_NN_BLOCK <= n; i += CPU_NN_BLOCK)
        for (int j = 0; j < CPU_NN_BLOCK; j++) {
            float v = x[(i + j) * step];
            if (kind == OSP_POOL_MAX)
                lane[j] = v > lane[j] ? v : lane[j];
            else
                lane[j] += kind == OSP_POOL_LP ? lp_term(v, p) : v;
        }
    for (; i < n; i++) {
        float v = x[i * step];
        if (kind == OSP_POOL_MAX)
            lane[0] = v > lane[0] ? v : lane[0];
        else
            lane[0] += kind == OSP_POOL_LP ? lp_term(v, p) : v;
    }
    float r = lane[0];
    for (int j = 1; j < CPU_NN_BLOCK; j++)
        r = kind == OSP_POOL_MAX ? (lane[j] > r ? lane[j] : r) : r + lane[j];
    return r;
}

/* AVG's division (y[i] / (outer * count[i]), outer the divisor's depth
 * and height factors; 0 for an empty window) or LP's root, over one
 * output row. */
CPU_NN_INLINE void row_finish(float *restrict y, int64_t n,
                              const pool_plan *plan, float outer,
                              const float *restrict count) {
    if (plan->kind == OSP_POOL_AVG) {
        CPU_NN_LOOP(n, i, {
            float d = outer * count[i];
            y[i] = d > 0.0f ? y[i] / d : 0.0f;
        });
    } else if (plan->kind == OSP_POOL_LP) {
        float p = plan->p;
        if (p == 2.0f)
            CPU_NN_LOOP(n, i, y[i] = sqrtf(y[i]));
        else if (p != 1.0f)
            CPU_NN_LOOP(n, i, y[i] = powf(y[i], 1.0f / p));
    }
}

/* ---- planes ------------------------------------------------------------- */

/* One plane x (in_size elements) into y (out_size); the row kernels
 * above are inlined into its clones. */
CPU_NN_HOT static void pool_plane(const pool_plan *plan, const float *x,
                                  float *y) {
    const cpu_nn_geom *g = &plan->g;
    int64_t H = g->in[1], W = g->in[2], OW = g->out[2];
    int64_t sw = g->stride[2], pw = g->pad[2], dw = g->dilation[2];
    float init = plan->kind == OSP_POOL_MAX ? -INFINITY : 0.0f;
    for (int64_t od = 0; od < g->out[0]; od++)
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            float *row = y + (od * g->out[1] + oh) * OW;
            for (int64_t ow = 0; ow < OW; ow++)
                row[ow] = init;
            for (int64_t kd = 0; kd < g->kernel[0]; kd++) {
                int64_t id =
                    od * g->stride[0] - g->pad[0] + kd * g->dilation[0];
                if (id < 0 || id >= g->in[0])
                    continue;
                for (int64_t kh = 0; kh < g->kernel[1]; kh++) {
                    int64_t ih =
                        oh * g->stride[1] - g->pad[1] + kh * g->dilation[1];
                    if (ih < 0 || ih >= H)
                        continue;
                    const float *src = x + (id * H + ih) * W;
                    if (plan->wide) {
                        for (int64_t ow = 0; ow < OW; ow++) {
                            int64_t lo, hi, start = ow * sw - pw;
                            cpu_nn_valid_range(g->kernel[2], dw, start, W, &lo,
                                               &hi);
                            if (lo == hi)
                                continue;
                            float v =
                                reduce_window(src + (start + lo * dw), hi - lo,
                                              dw, plan->kind, plan->p);
                            if (plan->kind == OSP_POOL_MAX)
                                row[ow] = v > row[ow] ? v : row[ow];
                            else
                                row[ow] += v;
                        }
                        continue;
                    }
                    for (int64_t kw = 0; kw < g->kernel[2]; kw++) {
                        int64_t lo, hi, offset = kw * dw - pw;
                        cpu_nn_valid_range(OW, sw, offset, W, &lo, &hi);
                        if (lo == hi)
                            continue;
                        row_pool(row + lo, src + (lo * sw + offset), hi - lo,
                                 sw, plan->kind, plan->p);
                    }
                }
            }
            float outer = plan->kind == OSP_POOL_AVG
                              ? plan->counts[0][od] * plan->counts[1][oh]
                              : 1.0f;
            row_finish(row, OW, plan, outer,
                       plan->kind == OSP_POOL_AVG ? plan->counts[2] : NULL);
        }
}

/* MAX with indices: each window in order, the first maximum kept; its
 * index is flat in x's layout (plane_base + the spatial offset). */
static void pool_plane_max_indices(const cpu_nn_geom *g, const float *x,
                                   float *y, int64_t *indices,
                                   int64_t plane_base) {
    int64_t H = g->in[1], W = g->in[2];
    int64_t o = 0;
    for (int64_t od = 0; od < g->out[0]; od++)
        for (int64_t oh = 0; oh < g->out[1]; oh++)
            for (int64_t ow = 0; ow < g->out[2]; ow++, o++) {
                float best = -INFINITY;
                int64_t best_at = -1;
                for (int64_t kd = 0; kd < g->kernel[0]; kd++) {
                    int64_t id =
                        od * g->stride[0] - g->pad[0] + kd * g->dilation[0];
                    if (id < 0 || id >= g->in[0])
                        continue;
                    for (int64_t kh = 0; kh < g->kernel[1]; kh++) {
                        int64_t ih =
                            oh * g->stride[1] - g->pad[1] + kh * g->dilation[1];
                        if (ih < 0 || ih >= H)
                            continue;
                        for (int64_t kw = 0; kw < g->kernel[2]; kw++) {
                            int64_t iw = ow * g->stride[2] - g->pad[2] +
                                         kw * g->dilation[2];
                            if (iw < 0 || iw >= W)
                                continue;
                            int64_t at = (id * H + ih) * W + iw;
                            if (x[at] > best) {
                                best = x[at];
                                best_at = at;
                            }
                        }
                    }
                }
                y[o] = best;
                indices[o] = best_at < 0 ? -1 : plane_base + best_at;
            }
}

/* AVG's divisors along dimension d: for each output, how many of its
 * window's positions count (see the file comment). */
static void avg_counts(const cpu_nn_geom *g, int d, bool include_pad,
                       float *count) {
    int64_t in = g->in[d], s = g->stride[d], pad = g->pad[d],
            dil = g->dilation[d], k = g->kernel[d];
    int64_t pad_end = (g->out[d] - 1) * s + (k - 1) * dil + 1 - in - pad;
    if (pad_end < 0)
        pad_end = 0;
    int64_t lo = include_pad ? -pad : 0, hi = include_pad ? in + pad_end : in;
    for (int64_t o = 0; o < g->out[d]; o++) {
        int64_t n = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t at = o * s - pad + j * dil;
            n += at >= lo && at < hi;
        }
        count[o] = (float)n;
    }
}

/* Planes [lo, hi) of a pool. */
typedef struct pool_job {
    const osp_pool_args *args;
    const pool_plan *plan;
} pool_job;

static void pool_range(void *arg, int64_t lo, int64_t hi) {
    const pool_job *job = arg;
    const osp_pool_args *args = job->args;
    const cpu_nn_geom *g = &job->plan->g;
    for (int64_t pl = lo; pl < hi; pl++) {
        const float *x = args->x + pl * g->in_size;
        float *y = args->y + pl * g->out_size;
        if (args->kind == OSP_POOL_MAX && args->indices != NULL)
            pool_plane_max_indices(g, x, y, args->indices + pl * g->out_size,
                                   pl * g->in_size);
        else
            pool_plane(job->plan, x, y);
    }
}

osp_error *cpu_op_pool(osp_device *dev, void *stream,
                       const osp_pool_args *args) {
    (void)dev;
    osp_error *err = NULL;
    pool_plan plan = {.kind = args->kind, .p = args->p};
    cpu_nn_geom *g = &plan.g;
    cpu_nn_geom_init(g, args->spatial_rank, args->in_dims, args->out_dims,
                     args->kernel, args->stride, args->pad_begin,
                     args->dilation);
    if (plan.kind == OSP_POOL_AVG) {
        for (int d = 0; d < 3; d++) {
            plan.counts[d] = malloc((size_t)g->out[d] * sizeof(float));
            if (plan.counts[d] == NULL) {
                err = osp_error_out_of_memory();
                goto out;
            }
            avg_counts(g, d, args->count_include_pad, plan.counts[d]);
        }
    }
    plan.wide = g->out[2] == 1 || g->kernel[2] > g->out[2];
    /* a plane's work: every input read, or every window tap */
    int64_t work = g->in_size > g->out_size * g->kernel_size
                       ? g->in_size
                       : g->out_size * g->kernel_size;
    pool_job job = {args, &plan};
    cpu_parallel_range(args->planes, 2 * work, cpu_stream_threads(stream),
                       pool_range, &job);
out:
    for (int d = 0; d < 3; d++)
        free(plan.counts[d]);
    return err;
}
