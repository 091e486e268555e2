/*
 * The CPU device's reductions and normalisations: reduce, softmax,
 * layer_norm, channel_affine, topk, cumsum.
 *
 * Most take x as [outer, n, inner] and work along n. With inner == 1 each
 * reduced line is contiguous and is reduced as a vector; otherwise the
 * lines of a block of up to COLS adjacent columns are reduced together,
 * a row of the block at a time, so that every loop runs over contiguous
 * memory. FP32 sums accumulate in double, so their rounding error stays
 * far below float's (well within 1e-5 of numpy's). exp is unary_rules.h's
 * unary_expf, which vectorises, flushed to 0 below FLT_MIN
 * (exp_shifted). Softmax along contiguous lines and LayerNormalization
 * with scale and bias run cpu_reduce_avx512.h's loops where the CPU has
 * AVX-512; the loops here stay the reference.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "cpu_ops_nd.h"
#include "cpu_ops_nn.h"
#include "cpu_reduce_avx512.h"
#include "cpu_threads.h"
#include "osprey/error.h"
#include "unary_rules.h"

/* Columns reduced together when inner > 1 (their accumulators stay in
 * L1). */
#define COLS 256

/* NaN-propagating max and min (numpy's): once a NaN is taken it stays. */
static inline float max_nan(float m, float x) {
    return (x > m || x != x) ? x : m;
}

static inline float min_nan(float m, float x) {
    return (x < m || x != x) ? x : m;
}

/* e^d for d <= 0 (a value minus the max of its line), but 0 where that
 * is below FLT_MIN: computing a denormal costs a microcode assist per
 * element on x86 (masked attention feeds softmax thousands of -10000s),
 * and next to the max's e^0 = 1 in the sum it is lost anyway. NaN stays
 * NaN. */
static inline float exp_shifted(float d) {
    bool tiny = d < -87.0f;
    return unary_select_f32(tiny, 0.0f,
                            unary_expf(unary_select_f32(tiny, -87.0f, d)));
}

/* ---- reduce: FP32 ------------------------------------------------------ */

/* The sums of the FP32 reductions: what each adds up per element. */
typedef enum sum_kind { SUM_PLAIN, SUM_ABS, SUM_SQUARE, SUM_PRODUCT } sum_kind;

static sum_kind sum_kind_of(osp_reduce_op op) {
    switch (op) {
    case OSP_REDUCE_L1:
        return SUM_ABS;
    case OSP_REDUCE_L2:
    case OSP_REDUCE_SUM_SQUARE:
        return SUM_SQUARE;
    case OSP_REDUCE_PROD:
        return SUM_PRODUCT;
    default: /* SUM, MEAN, LOG_SUM */
        return SUM_PLAIN;
    }
}

/* The reduction's value from its sum s over n elements. */
static float sum_finish(osp_reduce_op op, double s, int64_t n) {
    switch (op) {
    case OSP_REDUCE_MEAN:
        return (float)(s / (double)n); /* NaN for n == 0, as numpy */
    case OSP_REDUCE_L2:
        return (float)sqrt(s);
    case OSP_REDUCE_LOG_SUM:
        return (float)log(s);
    default:
        return (float)s;
    }
}

/* The sum of v[0..n) of the given kind, in double, with four independent
 * accumulators (an unrolled loop the compiler can keep in registers). */
CPU_NN_INLINE double vec_sum_f32(sum_kind kind, const float *v, int64_t n) {
    double acc[4];
    int64_t i = 0;
#define VEC_SUM(INIT, STEP)                                                    \
    for (int j = 0; j < 4; j++)                                                \
        acc[j] = (INIT);                                                       \
    for (; i + 4 <= n; i += 4)                                                 \
        for (int j = 0; j < 4; j++) {                                          \
            double a = acc[j], x = v[i + j];                                   \
            acc[j] = (STEP);                                                   \
        }                                                                      \
    for (; i < n; i++) {                                                       \
        double a = acc[0], x = v[i];                                           \
        acc[0] = (STEP);                                                       \
    }
    switch (kind) {
    case SUM_ABS:
        VEC_SUM(0.0, a + fabs(x));
        break;
    case SUM_SQUARE:
        VEC_SUM(0.0, a + x * x);
        break;
    case SUM_PRODUCT:
        VEC_SUM(1.0, a * x);
        return (acc[0] * acc[1]) * (acc[2] * acc[3]);
    default:
        VEC_SUM(0.0, a + x);
        break;
    }
#undef VEC_SUM
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* The max (or min) of v[0..n) in CPU_BLOCK lanes, then across them. */
#define VEC_EXTREME(name, INIT, PICK)                                          \
    CPU_NN_INLINE float name(const float *v, int64_t n) {                      \
        float m[CPU_BLOCK], r = (INIT);                                        \
        for (int j = 0; j < CPU_BLOCK; j++)                                    \
            m[j] = (INIT);                                                     \
        int64_t i = 0;                                                         \
        for (; i + CPU_BLOCK <= n; i += CPU_BLOCK)                             \
            for (int j = 0; j < CPU_BLOCK; j++)                                \
                m[j] = PICK(m[j], v[i + j]);                                   \
        for (int j = 0; j < CPU_BLOCK; j++)                                    \
            r = PICK(r, m[j]);                                                 \
        for (; i < n; i++)                                                     \
            r = PICK(r, v[i]);                                                 \
        return r;                                                              \
    }
VEC_EXTREME(vec_max_f32, -INFINITY, max_nan)
VEC_EXTREME(vec_min_f32, INFINITY, min_nan)
#undef VEC_EXTREME

/* The sum of exp(v[i] - m) over v[0..n), in double, in CPU_BLOCK lanes. */
CPU_NN_INLINE double vec_sum_exp_f32(const float *v, int64_t n, float m) {
    double acc[CPU_BLOCK] = {0.0}, s = 0.0;
    int64_t i = 0;
    for (; i + CPU_BLOCK <= n; i += CPU_BLOCK)
        for (int j = 0; j < CPU_BLOCK; j++)
            acc[j] += exp_shifted(v[i + j] - m);
    for (int j = 0; j < CPU_BLOCK; j++)
        s += acc[j];
    for (; i < n; i++)
        s += exp_shifted(v[i] - m);
    return s;
}

/* log(sum(exp(v))) with the max taken out; -inf for n == 0 or all -inf,
 * +inf (or NaN) when the max is. */
CPU_NN_INLINE float vec_lse_f32(const float *v, int64_t n) {
    float m = vec_max_f32(v, n);
    if (isinf(m) || m != m)
        return m;
    return m + (float)log(vec_sum_exp_f32(v, n, m));
}

/* Index of the first (or last) largest (or smallest) of v[0..n), n >= 1. */
static int64_t vec_arg_f32(const float *v, int64_t n, bool largest, bool last) {
    float best = v[0];
    int64_t at = 0;
    for (int64_t i = 1; i < n; i++) {
        float x = v[i];
        bool better = largest ? (last ? x >= best : x > best)
                              : (last ? x <= best : x < best);
        if (better) {
            best = x;
            at = i;
        }
    }
    return at;
}

/* out[i] for the w columns of x (row stride inner) reduced over n rows. */
static void cols_reduce_f32(osp_reduce_op op, const float *x, int64_t n,
                            int64_t inner, int64_t w, float *out) {
    if (op == OSP_REDUCE_MAX || op == OSP_REDUCE_MIN ||
        op == OSP_REDUCE_LOG_SUM_EXP) {
        float m[COLS];
        bool max = op != OSP_REDUCE_MIN;
        for (int64_t i = 0; i < w; i++)
            m[i] = max ? -INFINITY : INFINITY;
        for (int64_t k = 0; k < n; k++) {
            const float *r = x + k * inner;
            if (max)
                CPU_LOOP(w, i, m[i] = max_nan(m[i], r[i]));
            else
                CPU_LOOP(w, i, m[i] = min_nan(m[i], r[i]));
        }
        if (op != OSP_REDUCE_LOG_SUM_EXP) {
            memcpy(out, m, (size_t)w * sizeof(float));
            return;
        }
        double s[COLS];
        float shift[COLS]; /* 0 where the max is not finite: no NaN */
        for (int64_t i = 0; i < w; i++) {
            s[i] = 0.0;
            shift[i] = isfinite(m[i]) ? m[i] : 0.0f;
        }
        for (int64_t k = 0; k < n; k++) {
            const float *r = x + k * inner;
            CPU_LOOP(w, i, s[i] += exp_shifted(r[i] - shift[i]));
        }
        for (int64_t i = 0; i < w; i++)
            out[i] = isfinite(m[i]) ? m[i] + (float)log(s[i]) : m[i];
        return;
    }
    double acc[COLS];
    sum_kind kind = sum_kind_of(op);
    for (int64_t i = 0; i < w; i++)
        acc[i] = kind == SUM_PRODUCT ? 1.0 : 0.0;
    for (int64_t k = 0; k < n; k++) {
        const float *r = x + k * inner;
        switch (kind) {
        case SUM_ABS:
            CPU_LOOP(w, i, acc[i] += fabs((double)r[i]));
            break;
        case SUM_SQUARE:
            CPU_LOOP(w, i, acc[i] += (double)r[i] * r[i]);
            break;
        case SUM_PRODUCT:
            CPU_LOOP(w, i, acc[i] *= r[i]);
            break;
        default:
            CPU_LOOP(w, i, acc[i] += r[i]);
            break;
        }
    }
    for (int64_t i = 0; i < w; i++)
        out[i] = sum_finish(op, acc[i], n);
}

/* out[i] = the arg-extreme row of each of the w columns of x, n >= 1. */
#define COLS_ARG(T, sfx)                                                       \
    static void cols_arg_##sfx(const T *x, int64_t n, int64_t inner,           \
                               int64_t w, bool largest, bool last,             \
                               int64_t *out) {                                 \
        T best[COLS];                                                          \
        int64_t at[COLS];                                                      \
        for (int64_t i = 0; i < w; i++) {                                      \
            best[i] = x[i];                                                    \
            at[i] = 0;                                                         \
        }                                                                      \
        for (int64_t k = 1; k < n; k++) {                                      \
            const T *r = x + k * inner;                                        \
            CPU_LOOP(                                                          \
                w, i, T v = r[i];                                              \
                bool better = largest ? (last ? v >= best[i] : v > best[i])    \
                                      : (last ? v <= best[i] : v < best[i]);   \
                best[i] = better ? v : best[i]; at[i] = better ? k : at[i]);   \
        }                                                                      \
        memcpy(out, at, (size_t)w * sizeof(int64_t));                          \
    }
COLS_ARG(float, f32)
COLS_ARG(int32_t, i32)
COLS_ARG(int64_t, i64)
#undef COLS_ARG

CPU_NN_HOT static void reduce_f32(const osp_reduce_args *args) {
    const float *x = args->x;
    int64_t n = args->n, inner = args->inner;
    osp_reduce_op op = args->op;
    bool arg = op == OSP_REDUCE_ARGMAX || op == OSP_REDUCE_ARGMIN;
    bool largest = op == OSP_REDUCE_ARGMAX;
    for (int64_t o = 0; o < args->outer; o++) {
        const float *xo = x + o * n * inner;
        if (inner == 1) {
            if (arg) {
                ((int64_t *)args->out)[o] =
                    vec_arg_f32(xo, n, largest, args->select_last_index);
                continue;
            }
            float *out = (float *)args->out + o;
            switch (op) {
            case OSP_REDUCE_MAX:
                *out = vec_max_f32(xo, n);
                break;
            case OSP_REDUCE_MIN:
                *out = vec_min_f32(xo, n);
                break;
            case OSP_REDUCE_LOG_SUM_EXP:
                *out = vec_lse_f32(xo, n);
                break;
            default:
                *out = sum_finish(op, vec_sum_f32(sum_kind_of(op), xo, n), n);
                break;
            }
            continue;
        }
        for (int64_t i0 = 0; i0 < inner; i0 += COLS) {
            int64_t w = inner - i0 < COLS ? inner - i0 : COLS;
            if (arg)
                cols_arg_f32(xo + i0, n, inner, w, largest,
                             args->select_last_index,
                             (int64_t *)args->out + o * inner + i0);
            else
                cols_reduce_f32(op, xo + i0, n, inner, w,
                                (float *)args->out + o * inner + i0);
        }
    }
}

/* ---- reduce: integers -------------------------------------------------- */

/* SUM, PROD (wrapping, in U), MAX, MIN, ARGMAX, ARGMIN of type T. Each
 * row of x is folded straight into out's row (reduce_row_<sfx>). */
#define REDUCE_INT(T, U, sfx, TMIN, TMAX)                                      \
    static void reduce_row_##sfx(osp_reduce_op op, int64_t w, T *restrict out, \
                                 const T *restrict r) {                        \
        switch (op) {                                                          \
        case OSP_REDUCE_PROD:                                                  \
            CPU_LOOP(w, i, out[i] = (T)((U)out[i] * (U)r[i]));                 \
            break;                                                             \
        case OSP_REDUCE_MAX:                                                   \
            CPU_LOOP(w, i, out[i] = r[i] > out[i] ? r[i] : out[i]);            \
            break;                                                             \
        case OSP_REDUCE_MIN:                                                   \
            CPU_LOOP(w, i, out[i] = r[i] < out[i] ? r[i] : out[i]);            \
            break;                                                             \
        default:                                                               \
            CPU_LOOP(w, i, out[i] = (T)((U)out[i] + (U)r[i]));                 \
            break;                                                             \
        }                                                                      \
    }                                                                          \
                                                                               \
    static void reduce_##sfx(const osp_reduce_args *args) {                    \
        const T *x = args->x;                                                  \
        int64_t n = args->n, inner = args->inner;                              \
        osp_reduce_op op = args->op;                                           \
        bool largest = op == OSP_REDUCE_ARGMAX;                                \
        if (op == OSP_REDUCE_ARGMAX || op == OSP_REDUCE_ARGMIN) {              \
            for (int64_t o = 0; o < args->outer; o++)                          \
                for (int64_t i0 = 0; i0 < inner; i0 += COLS)                   \
                    cols_arg_##sfx(x + o * n * inner + i0, n, inner,           \
                                   inner - i0 < COLS ? inner - i0 : COLS,      \
                                   largest, args->select_last_index,           \
                                   (int64_t *)args->out + o * inner + i0);     \
            return;                                                            \
        }                                                                      \
        T init = op == OSP_REDUCE_PROD  ? 1                                    \
                 : op == OSP_REDUCE_MAX ? (TMIN)                               \
                 : op == OSP_REDUCE_MIN ? (TMAX)                               \
                                        : 0;                                   \
        for (int64_t o = 0; o < args->outer; o++) {                            \
            const T *xo = x + o * n * inner;                                   \
            T *out = (T *)args->out + o * inner;                               \
            CPU_LOOP(inner, i, out[i] = init);                                 \
            for (int64_t k = 0; k < n; k++)                                    \
                reduce_row_##sfx(op, inner, out, xo + k * inner);              \
        }                                                                      \
    }
REDUCE_INT(int32_t, uint32_t, i32, INT32_MIN, INT32_MAX)
REDUCE_INT(int64_t, uint64_t, i64, INT64_MIN, INT64_MAX)
#undef REDUCE_INT

/* The outer rows [lo, hi) of a reduce. */
static void reduce_range(void *arg, int64_t lo, int64_t hi) {
    const osp_reduce_args *args = arg;
    bool arg_op =
        args->op == OSP_REDUCE_ARGMAX || args->op == OSP_REDUCE_ARGMIN;
    size_t es = osp_datatype_byte_size(args->dtype);
    size_t out_es = arg_op ? sizeof(int64_t) : es;
    osp_reduce_args part = *args;
    part.outer = hi - lo;
    part.x = (const char *)args->x + (size_t)(lo * args->n * args->inner) * es;
    part.out = (char *)args->out + (size_t)(lo * args->inner) * out_es;
    switch (args->dtype) {
    case OSP_TYPE_FP32:
        reduce_f32(&part);
        break;
    case OSP_TYPE_INT32:
        reduce_i32(&part);
        break;
    default:
        reduce_i64(&part);
        break;
    }
}

osp_error *cpu_op_reduce(osp_device *dev, void *stream,
                         const osp_reduce_args *args) {
    (void)dev;
    if (args->dtype != OSP_TYPE_FP32 && args->dtype != OSP_TYPE_INT32 &&
        args->dtype != OSP_TYPE_INT64)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "CPU device: reduce on datatype %s",
                             osp_datatype_wire_name(args->dtype));
    int64_t work = args->n * args->inner *
                   (args->op == OSP_REDUCE_LOG_SUM_EXP ? CPU_WORK_MATH : 1);
    cpu_parallel_range(args->outer, work, cpu_stream_threads(stream),
                       reduce_range, (void *)args);
    return NULL;
}

/* ---- softmax ----------------------------------------------------------- */

/* One contiguous line: out may be x. Each loop either stores or sums,
 * never both, so that each vectorises. */
CPU_NN_INLINE void softmax_line(const float *x, float *out, int64_t n,
                                bool log_) {
    float m = vec_max_f32(x, n);
    if (log_) {
        /* (x - m) first: exact for the largest values, where m + log(s)
         * would round to m's precision. */
        float log_s = (float)log(vec_sum_exp_f32(x, n, m));
        CPU_MAP(float, n, x, out, i, v, (v - m) - log_s);
        return;
    }
    CPU_MAP(float, n, x, out, i, v, exp_shifted(v - m));
    float inv = (float)(1.0 / vec_sum_f32(SUM_PLAIN, out, n));
    CPU_LOOP(n, i, out[i] *= inv);
}

/* The w columns of x (row stride inner) over n rows. */
CPU_NN_INLINE void softmax_cols(const float *x, float *out, int64_t n,
                                int64_t inner, int64_t w, bool log_) {
    float m[COLS];
    double s[COLS];
    for (int64_t i = 0; i < w; i++) {
        m[i] = -INFINITY;
        s[i] = 0.0;
    }
    for (int64_t k = 0; k < n; k++) {
        const float *r = x + k * inner;
        CPU_LOOP(w, i, m[i] = max_nan(m[i], r[i]));
    }
    for (int64_t k = 0; k < n; k++) {
        const float *r = x + k * inner;
        float *o = out + k * inner;
        if (log_) {
            CPU_LOOP(w, i, s[i] += exp_shifted(r[i] - m[i]));
        } else {
            CPU_MAP(float, w, r, o, i, v, exp_shifted(v - m[i]));
            CPU_LOOP(w, i, s[i] += o[i]);
        }
    }
    float f[COLS];
    for (int64_t i = 0; i < w; i++)
        f[i] = log_ ? (float)log(s[i]) : (float)(1.0 / s[i]);
    for (int64_t k = 0; k < n; k++) {
        const float *r = x + k * inner;
        float *o = out + k * inner;
        if (log_)
            CPU_MAP(float, w, r, o, i, v, (v - m[i]) - f[i]);
        else
            CPU_LOOP(w, i, o[i] *= f[i]);
    }
}

/* The outer rows [lo, hi) of a softmax. */
CPU_NN_HOT static void softmax_range(void *arg, int64_t lo, int64_t hi) {
    const osp_softmax_args *args = arg;
    int64_t n = args->n, inner = args->inner;
    bool avx512 = inner == 1 && !args->log && cpu_reduce_avx512_serves();
    for (int64_t o = lo; o < hi; o++) {
        const float *x = args->x + o * n * inner;
        float *out = args->out + o * n * inner;
        if (avx512) {
            cpu_softmax_line_avx512(x, out, n);
            continue;
        }
        if (inner == 1) {
            softmax_line(x, out, n, args->log);
            continue;
        }
        for (int64_t i0 = 0; i0 < inner; i0 += COLS)
            softmax_cols(x + i0, out + i0, n, inner,
                         inner - i0 < COLS ? inner - i0 : COLS, args->log);
    }
}

osp_error *cpu_op_softmax(osp_device *dev, void *stream,
                          const osp_softmax_args *args) {
    (void)dev;
    cpu_parallel_range(args->outer, args->n * args->inner * CPU_WORK_MATH,
                       cpu_stream_threads(stream), softmax_range, (void *)args);
    return NULL;
}

/* ---- layer_norm -------------------------------------------------------- */

/* Mean and variance in double, the variance two-pass (no cancellation);
 * out may alias x (each element is read before it is written). */
CPU_NN_HOT static void layer_norm_range(void *arg, int64_t lo, int64_t hi) {
    const osp_layer_norm_args *args = arg;
    int64_t cols = args->cols;
    const float *scale = args->scale, *bias = args->bias;
    bool avx512 = cols > 0 && args->x != NULL && args->out != NULL &&
                  scale != NULL && bias != NULL && cpu_reduce_avx512_serves();
    for (int64_t r = lo; r < hi; r++) {
        if (avx512) {
            cpu_layer_norm_row_avx512(
                args->x + r * cols, scale, bias, args->out + r * cols, cols,
                args->epsilon, args->mean != NULL ? args->mean + r : NULL,
                args->inv_std != NULL ? args->inv_std + r : NULL);
            continue;
        }
        double mean = 0.0, var = 0.0;
        const float *x = args->x != NULL ? args->x + r * cols : NULL;
        float *y = args->out != NULL ? args->out + r * cols : NULL;
        if (cols > 0) {
            mean = vec_sum_f32(SUM_PLAIN, x, cols) / (double)cols;
            double acc[4] = {0.0, 0.0, 0.0, 0.0};
            int64_t c = 0;
            for (; c + 4 <= cols; c += 4)
                for (int j = 0; j < 4; j++) {
                    double d = x[c + j] - mean;
                    acc[j] += d * d;
                }
            for (; c < cols; c++) {
                double d = x[c] - mean;
                acc[0] += d * d;
            }
            var = ((acc[0] + acc[1]) + (acc[2] + acc[3])) / (double)cols;
        }
        float m = (float)mean;
        float inv = (float)(1.0 / sqrt(var + (double)args->epsilon));
        if (args->mean != NULL)
            args->mean[r] = m;
        if (args->inv_std != NULL)
            args->inv_std[r] = inv;
        if (scale != NULL && bias != NULL)
            CPU_MAP(float, cols, x, y, c, v,
                    (v - m) * inv * scale[c] + bias[c]);
        else if (scale != NULL)
            CPU_MAP(float, cols, x, y, c, v, (v - m) * inv * scale[c]);
        else if (bias != NULL)
            CPU_MAP(float, cols, x, y, c, v, (v - m) * inv + bias[c]);
        else
            CPU_MAP(float, cols, x, y, c, v, (v - m) * inv);
    }
}

osp_error *cpu_op_layer_norm(osp_device *dev, void *stream,
                             const osp_layer_norm_args *args) {
    (void)dev;
    cpu_parallel_range(args->rows, args->cols > 0 ? 4 * args->cols : 1,
                       cpu_stream_threads(stream), layer_norm_range,
                       (void *)args);
    return NULL;
}

/* ---- channel_affine ---------------------------------------------------- */

/* The activation is switched on once per channel row, and its rule from
 * unary_rules.h runs inline in the loop. Planes [lo, hi) of the
 * batch x channels planes. */
CPU_NN_HOT static void channel_affine_range(void *arg, int64_t lo, int64_t hi) {
    const osp_channel_affine_args *args = arg;
    int64_t channels = args->channels, spatial = args->spatial;
    float alpha = args->act_alpha, beta = args->act_beta;
    for (int64_t plane = lo; plane < hi; plane++) {
        int64_t c = plane % channels;
        const float *x = args->x + plane * spatial;
        float *y = args->out + plane * spatial;
        float sc = args->scale != NULL ? args->scale[c] : 1.0f;
        float sh = args->shift != NULL ? args->shift[c] : 0.0f;
#define AFFINE_CASE(o, fn)                                                     \
    case o:                                                                    \
        CPU_MAP(float, spatial, x, y, s, v, fn(v *sc + sh, alpha, beta));      \
        break;
        switch (args->act) {
            OSP_UNARY_F32_OPS(AFFINE_CASE)
        default:
            break;
        }
#undef AFFINE_CASE
    }
}

osp_error *cpu_op_channel_affine(osp_device *dev, void *stream,
                                 const osp_channel_affine_args *args) {
    (void)dev;
    if (!unary_is_f32_op(args->act))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "CPU device: channel_affine activation %d",
                             (int)args->act);
    bool math = args->act != OSP_UNARY_IDENTITY &&
                args->act != OSP_UNARY_RELU && args->act != OSP_UNARY_CLIP &&
                args->act != OSP_UNARY_LEAKY_RELU;
    cpu_parallel_range(args->batch * args->channels,
                       args->spatial * (math ? CPU_WORK_MATH : 1),
                       cpu_stream_threads(stream), channel_affine_range,
                       (void *)args);
    return NULL;
}

/* ---- topk -------------------------------------------------------------- */

/* The k best of each line are kept in a heap whose root is the one that
 * would be listed last; popping the heap then lists them from the back.
 * "Before" is the output order: larger (or smaller) values first, NaN the
 * largest of all (as numpy and PyTorch sort), equal values by index. */
#define TOPK(T, sfx, GREATER)                                                  \
    typedef struct topk_entry_##sfx {                                          \
        T v;                                                                   \
        int64_t i;                                                             \
    } topk_entry_##sfx;                                                        \
                                                                               \
    static inline bool topk_before_##sfx(topk_entry_##sfx a,                   \
                                         topk_entry_##sfx b, bool largest) {   \
        if (GREATER(a.v, b.v))                                                 \
            return largest;                                                    \
        if (GREATER(b.v, a.v))                                                 \
            return !largest;                                                   \
        return a.i < b.i;                                                      \
    }                                                                          \
                                                                               \
    /* Restores the heap below `at` (a root that may come too early). */       \
    static void topk_sift_down_##sfx(topk_entry_##sfx *h, int64_t size,        \
                                     int64_t at, bool largest) {               \
        for (;;) {                                                             \
            int64_t l = 2 * at + 1, r = l + 1, last = at;                      \
            if (l < size && topk_before_##sfx(h[last], h[l], largest))         \
                last = l;                                                      \
            if (r < size && topk_before_##sfx(h[last], h[r], largest))         \
                last = r;                                                      \
            if (last == at)                                                    \
                return;                                                        \
            topk_entry_##sfx t = h[at];                                        \
            h[at] = h[last];                                                   \
            h[last] = t;                                                       \
            at = last;                                                         \
        }                                                                      \
    }                                                                          \
                                                                               \
    static void topk_sift_up_##sfx(topk_entry_##sfx *h, int64_t at,            \
                                   bool largest) {                             \
        while (at > 0) {                                                       \
            int64_t parent = (at - 1) / 2;                                     \
            if (!topk_before_##sfx(h[parent], h[at], largest))                 \
                return;                                                        \
            topk_entry_##sfx t = h[at];                                        \
            h[at] = h[parent];                                                 \
            h[parent] = t;                                                     \
            at = parent;                                                       \
        }                                                                      \
    }                                                                          \
                                                                               \
    static osp_error *topk_##sfx(const osp_topk_args *args) {                  \
        int64_t n = args->n, inner = args->inner, k = args->k;                 \
        topk_entry_##sfx *heap = malloc((size_t)k * sizeof *heap);             \
        if (heap == NULL)                                                      \
            return osp_error_out_of_memory();                                  \
        for (int64_t o = 0; o < args->outer; o++) {                            \
            for (int64_t i = 0; i < inner; i++) {                              \
                const T *x = (const T *)args->x + o * n * inner + i;           \
                int64_t size = 0;                                              \
                for (int64_t j = 0; j < n; j++) {                              \
                    topk_entry_##sfx e = {x[j * inner], j};                    \
                    if (size < k) {                                            \
                        heap[size] = e;                                        \
                        topk_sift_up_##sfx(heap, size++, args->largest);       \
                    } else if (topk_before_##sfx(e, heap[0], args->largest)) { \
                        heap[0] = e;                                           \
                        topk_sift_down_##sfx(heap, k, 0, args->largest);       \
                    }                                                          \
                }                                                              \
                T *values = (T *)args->values + o * k * inner + i;             \
                int64_t *indices = args->indices + o * k * inner + i;          \
                while (size > 0) {                                             \
                    size--;                                                    \
                    values[size * inner] = heap[0].v;                          \
                    indices[size * inner] = heap[0].i;                         \
                    heap[0] = heap[size];                                      \
                    topk_sift_down_##sfx(heap, size, 0, args->largest);        \
                }                                                              \
            }                                                                  \
        }                                                                      \
        free(heap);                                                            \
        return NULL;                                                           \
    }

/* a > b in the order that puts NaN above everything. */
static inline bool greater_f32(float a, float b) {
    return a > b || (a != a && b == b);
}

static inline bool greater_i64(int64_t a, int64_t b) {
    return a > b;
}

TOPK(float, f32, greater_f32)
TOPK(int64_t, i64, greater_i64)
#undef TOPK

/* Always sorted: an unsorted result may come in any order, and this one
 * costs nothing more. */
osp_error *cpu_op_topk(osp_device *dev, void *stream,
                       const osp_topk_args *args) {
    (void)dev;
    (void)stream;
    if (args->dtype == OSP_TYPE_FP32)
        return topk_f32(args);
    if (args->dtype == OSP_TYPE_INT64)
        return topk_i64(args);
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "CPU device: topk on datatype %s",
                         osp_datatype_wire_name(args->dtype));
}

/* ---- cumsum ------------------------------------------------------------ */

/* Sums run in T (in U for integers, wrapping) in the order of the axis,
 * like numpy's cumsum; with inner > 1 each step adds a whole row
 * (cumsum_row_<sfx>). */
#define CUMSUM(T, U, sfx)                                                      \
    static void cumsum_row_##sfx(int64_t w, const T *restrict prev,            \
                                 const T *restrict add, T *restrict cur) {     \
        CPU_LOOP(w, i, cur[i] = (T)((U)prev[i] + (U)add[i]));                  \
    }                                                                          \
                                                                               \
    static void cumsum_##sfx(const osp_cumsum_args *args) {                    \
        int64_t n = args->n, inner = args->inner;                              \
        int64_t first = args->reverse ? n - 1 : 0;                             \
        int64_t step = args->reverse ? -1 : 1;                                 \
        for (int64_t o = 0; o < args->outer; o++) {                            \
            const T *x = (const T *)args->x + o * n * inner;                   \
            T *y = (T *)args->y + o * n * inner;                               \
            if (inner == 1) {                                                  \
                U acc = 0;                                                     \
                for (int64_t t = 0, k = first; t < n; t++, k += step) {        \
                    if (args->exclusive) {                                     \
                        y[k] = (T)acc;                                         \
                        acc += (U)x[k];                                        \
                    } else {                                                   \
                        acc += (U)x[k];                                        \
                        y[k] = (T)acc;                                         \
                    }                                                          \
                }                                                              \
                continue;                                                      \
            }                                                                  \
            T *row = y + first * inner;                                        \
            const T *xrow = x + first * inner;                                 \
            for (int64_t i = 0; i < inner; i++)                                \
                row[i] = args->exclusive ? 0 : xrow[i];                        \
            for (int64_t t = 1, k = first + step; t < n; t++, k += step) {     \
                cumsum_row_##sfx(inner, y + (k - step) * inner,                \
                                 x + (args->exclusive ? k - step : k) * inner, \
                                 y + k * inner);                               \
            }                                                                  \
        }                                                                      \
    }
CUMSUM(float, float, f32)
CUMSUM(int32_t, uint32_t, i32)
CUMSUM(int64_t, uint64_t, i64)
#undef CUMSUM

osp_error *cpu_op_cumsum(osp_device *dev, void *stream,
                         const osp_cumsum_args *args) {
    (void)dev;
    (void)stream;
    switch (args->dtype) {
    case OSP_TYPE_FP32:
        cumsum_f32(args);
        return NULL;
    case OSP_TYPE_INT32:
        cumsum_i32(args);
        return NULL;
    case OSP_TYPE_INT64:
        cumsum_i64(args);
        return NULL;
    default:
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "CPU device: cumsum on datatype %s",
                             osp_datatype_wire_name(args->dtype));
    }
}
