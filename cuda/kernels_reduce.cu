/*
 * reduce (osprey/tensor_ops.h): x as [outer, n, inner], out[o, i] reduces
 * x[o, :, i]. Two shapes of launch:
 * - lines (inner < LINE_INNER_MAX, n >= LINE_N_MIN): a block per output,
 *   its threads striding along the line, combined in shared memory
 *   (kernels_block.cuh);
 * - columns (wider inner, or short lines): a thread per output walking
 *   its column, so that neighbouring threads read neighbouring addresses
 *   (or, for short lines, no block idles on a few elements).
 * Semantics are the CPU device's (cpu_ops_reduce.c): FP32 sums, products
 * and norms accumulate in double; MAX and MIN propagate NaN; ARGMAX and
 * ARGMIN never pick a NaN after the first element and keep index 0 when
 * that one is NaN; integer SUM and PROD wrap.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kernels_block.cuh"
#include "kernels_launch.cuh"
#include "kernels_nn.h"
#include "unary_rules.h"

/* Below this inner size a line of at least LINE_N_MIN elements gets a
 * block (its elements are too far apart for a thread per column to read
 * coalesced anyway); shorter lines would leave most of a block idle. */
enum { LINE_INNER_MAX = 32, LINE_N_MIN = 64 };

struct combine_mul {
    template <typename T> __device__ T operator()(T a, T b) const {
        return a * b;
    }
};

template <typename T> struct combine_max {
    __device__ T operator()(T a, T b) const {
        return b > a ? b : a;
    }
};

template <typename T> struct combine_min {
    __device__ T operator()(T a, T b) const {
        return b < a ? b : a;
    }
};

/* A candidate of ARGMAX / ARGMIN: value and index (i < 0: none yet). */
template <typename T> struct arg_pair {
    T v;
    int64_t i;
};

/* The better of two candidates; equal values go to the lower index, or
 * with `last` to the higher. */
template <typename T> struct combine_arg {
    bool largest, last;
    __device__ arg_pair<T> operator()(arg_pair<T> a, arg_pair<T> b) const {
        if (a.i < 0)
            return b;
        if (b.i < 0)
            return a;
        if (b.v == a.v)
            return (last ? b.i > a.i : b.i < a.i) ? b : a;
        return (largest ? b.v > a.v : b.v < a.v) ? b : a;
    }
};

/* Where a thread's share of a line starts and how it steps. */
template <bool BLOCK> struct line_walk {
    __device__ static int64_t first() {
        return BLOCK ? (int64_t)threadIdx.x : 0;
    }
    __device__ static int64_t step() {
        return BLOCK ? (int64_t)blockDim.x : 1;
    }
    template <typename T, typename C> __device__ static T all(T v, C c) {
        return BLOCK ? block_combine(v, c) : v;
    }
};

/* The first output of this block (lines) or thread (columns), and the
 * grid-wide step between outputs. */
template <bool BLOCK> __device__ size_t first_output() {
    return BLOCK ? blockIdx.x : blockIdx.x * (size_t)blockDim.x + threadIdx.x;
}
template <bool BLOCK> __device__ size_t output_step() {
    return BLOCK ? gridDim.x : (size_t)gridDim.x * blockDim.x;
}

/* The index of the arg-extreme of line[k * inner], k < n (n >= 1). */
template <typename T, bool BLOCK>
__device__ int64_t line_arg(const T *line, int64_t n, int64_t inner,
                            bool largest, bool last) {
    typedef line_walk<BLOCK> W;
    combine_arg<T> c = {largest, last};
    arg_pair<T> best = {T(0), -1};
    for (int64_t k = W::first(); k < n; k += W::step()) {
        T v = line[k * inner];
        if (v == v) /* a NaN is never picked (but see below) */
            best = c(best, arg_pair<T>{v, k});
    }
    best = W::all(best, c);
    T first = line[0];
    return first != first || best.i < 0 ? 0 : best.i;
}

/* ---- FP32 ---------------------------------------------------------------- */

template <bool BLOCK>
__global__ void reduce_f32_kernel(osp_reduce_op op, const float *x, void *out,
                                  int64_t outer, int64_t n, int64_t inner,
                                  bool last) {
    typedef line_walk<BLOCK> W;
    size_t count = (size_t)outer * (size_t)inner;
    for (size_t q = first_output<BLOCK>(); q < count;
         q += output_step<BLOCK>()) {
        int64_t o = (int64_t)(q / (size_t)inner), i = (int64_t)(q % inner);
        const float *line = x + o * n * inner + i;
        float *y = (float *)out + q;
        switch (op) {
        case OSP_REDUCE_ARGMAX:
        case OSP_REDUCE_ARGMIN: {
            int64_t at = line_arg<float, BLOCK>(line, n, inner,
                                                op == OSP_REDUCE_ARGMAX, last);
            if (!BLOCK || threadIdx.x == 0)
                ((int64_t *)out)[q] = at;
            continue;
        }
        case OSP_REDUCE_MAX:
        case OSP_REDUCE_MIN:
        case OSP_REDUCE_LOG_SUM_EXP: {
            bool is_min = op == OSP_REDUCE_MIN;
            float m = is_min ? INFINITY : -INFINITY;
            for (int64_t k = W::first(); k < n; k += W::step())
                m = is_min ? reduce_combine_min_nan()(m, line[k * inner])
                           : reduce_combine_max_nan()(m, line[k * inner]);
            m = is_min ? W::all(m, reduce_combine_min_nan())
                       : W::all(m, reduce_combine_max_nan());
            if (op != OSP_REDUCE_LOG_SUM_EXP) {
                if (!BLOCK || threadIdx.x == 0)
                    *y = m;
                continue;
            }
            float shift = isfinite(m) ? m : 0.0f; /* no NaN from inf - inf */
            double s = 0.0;
            for (int64_t k = W::first(); k < n; k += W::step())
                s += softmax_exp_shifted(line[k * inner] - shift);
            s = W::all(s, reduce_combine_add());
            if (!BLOCK || threadIdx.x == 0)
                *y = isfinite(m) ? m + (float)log(s) : m;
            continue;
        }
        case OSP_REDUCE_PROD: {
            double p = 1.0;
            for (int64_t k = W::first(); k < n; k += W::step())
                p *= line[k * inner];
            p = W::all(p, combine_mul());
            if (!BLOCK || threadIdx.x == 0)
                *y = (float)p;
            continue;
        }
        default: {
            double s = 0.0;
            for (int64_t k = W::first(); k < n; k += W::step()) {
                double v = line[k * inner];
                s += op == OSP_REDUCE_L1 ? fabs(v)
                     : op == OSP_REDUCE_L2 || op == OSP_REDUCE_SUM_SQUARE
                         ? v * v
                         : v;
            }
            s = W::all(s, reduce_combine_add());
            if (BLOCK && threadIdx.x != 0)
                continue;
            *y = op == OSP_REDUCE_MEAN      ? (float)(s / (double)n)
                 : op == OSP_REDUCE_L2      ? (float)sqrt(s)
                 : op == OSP_REDUCE_LOG_SUM ? (float)log(s)
                                            : (float)s;
            continue;
        }
        }
    }
}

/* ---- integers ------------------------------------------------------------ */

/* SUM and PROD in U (unsigned: they wrap), MAX, MIN, ARGMAX, ARGMIN. */
template <typename T, typename U, bool BLOCK>
__global__ void reduce_int_kernel(osp_reduce_op op, const T *x, void *out,
                                  int64_t outer, int64_t n, int64_t inner,
                                  bool last, T t_min, T t_max) {
    typedef line_walk<BLOCK> W;
    size_t count = (size_t)outer * (size_t)inner;
    for (size_t q = first_output<BLOCK>(); q < count;
         q += output_step<BLOCK>()) {
        int64_t o = (int64_t)(q / (size_t)inner), i = (int64_t)(q % inner);
        const T *line = x + o * n * inner + i;
        T r;
        if (op == OSP_REDUCE_ARGMAX || op == OSP_REDUCE_ARGMIN) {
            int64_t at = line_arg<T, BLOCK>(line, n, inner,
                                            op == OSP_REDUCE_ARGMAX, last);
            if (!BLOCK || threadIdx.x == 0)
                ((int64_t *)out)[q] = at;
            continue;
        } else if (op == OSP_REDUCE_MAX || op == OSP_REDUCE_MIN) {
            bool is_max = op == OSP_REDUCE_MAX;
            r = is_max ? t_min : t_max;
            for (int64_t k = W::first(); k < n; k += W::step())
                r = is_max ? combine_max<T>()(r, line[k * inner])
                           : combine_min<T>()(r, line[k * inner]);
            r = is_max ? W::all(r, combine_max<T>())
                       : W::all(r, combine_min<T>());
        } else {
            bool prod = op == OSP_REDUCE_PROD;
            U acc = prod ? 1 : 0;
            for (int64_t k = W::first(); k < n; k += W::step())
                acc =
                    prod ? acc * (U)line[k * inner] : acc + (U)line[k * inner];
            acc = prod ? W::all(acc, combine_mul())
                       : W::all(acc, reduce_combine_add());
            r = (T)acc;
        }
        if (!BLOCK || threadIdx.x == 0)
            ((T *)out)[q] = r;
    }
}

/* ---- launcher ------------------------------------------------------------ */

/* The launch's arguments by value (the args struct is only borrowed). */
typedef struct reduce_launch {
    osp_reduce_op op;
    int64_t outer, n, inner;
    bool last;
    size_t count;
    unsigned line_grid;
} reduce_launch;

/* Lines or columns (see the top) of one integer type. */
template <typename T, typename U>
cudaError_t launch_int(cudaStream_t stream, reduce_launch r, const void *x,
                       void *out, T t_min, T t_max) {
    const T *xt = (const T *)x;
    if (r.inner < LINE_INNER_MAX && r.n >= LINE_N_MIN)
        return OSP_LAUNCH_BLOCK_SYNC(
            (reduce_int_kernel<T, U, true>), r.line_grid, OSP_CUDA_BLOCK, 0,
            stream, r.op, xt, out, r.outer, r.n, r.inner, r.last, t_min, t_max);
    return OSP_LAUNCH((reduce_int_kernel<T, U, false>), cuda_grid_for(r.count),
                      OSP_CUDA_BLOCK, 0, stream, r.op, xt, out, r.outer, r.n,
                      r.inner, r.last, t_min, t_max);
}

extern "C" cudaError_t cuda_launch_reduce(cudaStream_t stream,
                                          const osp_reduce_args *a) {
    reduce_launch r = {a->op,
                       a->outer,
                       a->n,
                       a->inner,
                       a->select_last_index,
                       (size_t)a->outer * (size_t)a->inner,
                       0};
    r.line_grid = r.count > 65535 ? 65535u : (unsigned)r.count;
    size_t es = osp_datatype_byte_size(a->dtype);
    bool arg = r.op == OSP_REDUCE_ARGMAX || r.op == OSP_REDUCE_ARGMIN;
    const void *x = OSP_DEVICE_ARG(stream, a->x, r.count * (size_t)r.n * es);
    void *out =
        OSP_DEVICE_ARG(stream, a->out, r.count * (arg ? sizeof(int64_t) : es));
    switch (a->dtype) {
    case OSP_TYPE_FP32: {
        const float *xf = (const float *)x;
        if (r.inner < LINE_INNER_MAX && r.n >= LINE_N_MIN)
            return OSP_LAUNCH_BLOCK_SYNC(reduce_f32_kernel<true>, r.line_grid,
                                         OSP_CUDA_BLOCK, 0, stream, r.op, xf,
                                         out, r.outer, r.n, r.inner, r.last);
        return OSP_LAUNCH(reduce_f32_kernel<false>, cuda_grid_for(r.count),
                          OSP_CUDA_BLOCK, 0, stream, r.op, xf, out, r.outer,
                          r.n, r.inner, r.last);
    }
    case OSP_TYPE_INT32:
        return launch_int<int32_t, uint32_t>(stream, r, x, out, INT32_MIN,
                                             INT32_MAX);
    case OSP_TYPE_INT64:
        return launch_int<int64_t, uint64_t>(stream, r, x, out, INT64_MIN,
                                             INT64_MAX);
    default:
        return cudaErrorInvalidValue;
    }
}
