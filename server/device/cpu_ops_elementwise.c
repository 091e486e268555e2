/*
 * The CPU device's elementwise tensor ops: unary, binary_nd, where.
 *
 * Each op picks its loop once per call (or once per row), never per
 * element: the op and dtype switch sits outside flat loops the compiler
 * can vectorise. binary_nd and where walk their output a row at a time
 * (cpu_ops_nd.h) with a loop specialised for the common shapes of the
 * row: both inputs contiguous, or one of them a broadcast scalar.
 *
 * Integer arithmetic runs in unsigned types (at least unsigned int wide)
 * so that overflow wraps, as on a GPU, instead of being undefined; integer
 * division and MOD by zero give 0.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "binary_rules.h"
#include "cpu_act_avx512.h"
#include "cpu_ops.h"
#include "cpu_ops_nd.h"
#include "cpu_ops_nn.h"
#include "cpu_threads.h"
#include "osprey/error.h"
#include "unary_rules.h"

/* ---- unary ------------------------------------------------------------- */

/* FP32 -> FP32 ops; false for the others. */
CPU_NN_HOT static bool unary_f32(const osp_unary_args *args) {
    int64_t n = (int64_t)args->n;
    float alpha = args->alpha, beta = args->beta;
#define UNARY_F32_CASE(o, fn)                                                  \
    case o:                                                                    \
        CPU_MAP(float, n, args->x, args->y, i, v, fn(v, alpha, beta));         \
        return true;
    switch (args->op) {
        OSP_UNARY_F32_OPS(UNARY_F32_CASE)
    default:
        return false;
    }
#undef UNARY_F32_CASE
}

/* The integer ops of a signed type: ABS, NEG, SIGN, RELU, CLIP. */
#define UNARY_SIGNED(T, sfx, TMIN, TMAX)                                       \
    static bool unary_##sfx(const osp_unary_args *args) {                      \
        int64_t n = (int64_t)args->n;                                          \
        switch (args->op) {                                                    \
        case OSP_UNARY_ABS:                                                    \
            CPU_MAP(T, n, args->x, args->y, i, v, unary_abs_##sfx(v));         \
            return true;                                                       \
        case OSP_UNARY_NEG:                                                    \
            CPU_MAP(T, n, args->x, args->y, i, v, unary_neg_##sfx(v));         \
            return true;                                                       \
        case OSP_UNARY_SIGN:                                                   \
            CPU_MAP(T, n, args->x, args->y, i, v, unary_sign_##sfx(v));        \
            return true;                                                       \
        case OSP_UNARY_RELU:                                                   \
            CPU_MAP(T, n, args->x, args->y, i, v, unary_relu_##sfx(v));        \
            return true;                                                       \
        case OSP_UNARY_CLIP: {                                                 \
            T lo = unary_clip_bound_##sfx(args->alpha, TMIN);                  \
            T hi = unary_clip_bound_##sfx(args->beta, TMAX);                   \
            CPU_MAP(T, n, args->x, args->y, i, v,                              \
                    unary_clip_##sfx(v, lo, hi));                              \
            return true;                                                       \
        }                                                                      \
        default:                                                               \
            return false;                                                      \
        }                                                                      \
    }
UNARY_SIGNED(int8_t, i8, INT8_MIN, INT8_MAX)
UNARY_SIGNED(int16_t, i16, INT16_MIN, INT16_MAX)
UNARY_SIGNED(int32_t, i32, INT32_MIN, INT32_MAX)
UNARY_SIGNED(int64_t, i64, INT64_MIN, INT64_MAX)
#undef UNARY_SIGNED

/* y = x for n elements of es bytes; y may be x. */
static void copy_elements(void *y, const void *x, size_t n, size_t es) {
    if (y != x)
        memmove(y, x, n * es);
}

/* The op on args's n elements; false when it does not take the dtype. */
static bool unary_run(const osp_unary_args *args) {
    size_t n = args->n;
    bool done = false;
    if (args->op == OSP_UNARY_IDENTITY) {
        copy_elements(args->y, args->x, n, osp_datatype_byte_size(args->dtype));
        return true;
    }
    switch (args->dtype) {
    case OSP_TYPE_FP32:
        if (args->op == OSP_UNARY_ISNAN || args->op == OSP_UNARY_ISINF) {
            const float *x = args->x; /* bool and float never alias */
            bool *y = args->y;
            bool pos = args->alpha != 0.0f, neg = args->beta != 0.0f;
            if (args->op == OSP_UNARY_ISNAN)
                CPU_LOOP((int64_t)n, i, y[i] = unary_isnan_f32(x[i]));
            else
                CPU_LOOP((int64_t)n, i, y[i] = unary_isinf_f32(x[i], pos, neg));
            done = true;
        } else if (cpu_act_avx512_serves(args->op)) {
            cpu_act_avx512(args->x, args->y, (int64_t)n, args->op);
            done = true;
        } else {
            done = unary_f32(args);
        }
        break;
    case OSP_TYPE_BOOL:
        if (args->op == OSP_UNARY_NOT) {
            /* as bytes (0 or 1), which vectorises; _Bool does not */
            CPU_MAP(uint8_t, (int64_t)n, args->x, args->y, i, v, v ^ 1u);
            done = true;
        }
        break;
    case OSP_TYPE_INT8:
        done = unary_i8(args);
        break;
    case OSP_TYPE_INT16:
        done = unary_i16(args);
        break;
    case OSP_TYPE_INT32:
        done = unary_i32(args);
        break;
    case OSP_TYPE_INT64:
        done = unary_i64(args);
        break;
    case OSP_TYPE_UINT8:
    case OSP_TYPE_UINT16:
    case OSP_TYPE_UINT32:
    case OSP_TYPE_UINT64:
        if (args->op == OSP_UNARY_ABS) { /* |x| of an unsigned x is x */
            copy_elements(args->y, args->x, n,
                          osp_datatype_byte_size(args->dtype));
            done = true;
        }
        break;
    default:
        break;
    }
    return done;
}

/* Ranges of elements, one per task. */
typedef struct unary_job {
    const osp_unary_args *args;
    size_t in_es, out_es;
    _Atomic bool unsupported;
} unary_job;

static void unary_range(void *arg, int64_t lo, int64_t hi) {
    unary_job *job = arg;
    osp_unary_args part = *job->args;
    part.x = (const char *)part.x + (size_t)lo * job->in_es;
    part.y = (char *)part.y + (size_t)lo * job->out_es;
    part.n = (size_t)(hi - lo);
    if (!unary_run(&part))
        atomic_store(&job->unsupported, true);
}

/* The work of an element of op (cpu_threads.h): a comparison or a bit of
 * arithmetic costs what its memory does; transcendental math more. */
static int64_t unary_work(osp_unary_op op, osp_datatype dtype) {
    if (dtype != OSP_TYPE_FP32)
        return 1;
    switch (op) {
    case OSP_UNARY_IDENTITY:
    case OSP_UNARY_ABS:
    case OSP_UNARY_NEG:
    case OSP_UNARY_SIGN:
    case OSP_UNARY_RELU:
    case OSP_UNARY_CLIP:
    case OSP_UNARY_SQRT:
    case OSP_UNARY_RECIPROCAL:
    case OSP_UNARY_FLOOR:
    case OSP_UNARY_CEIL:
    case OSP_UNARY_ROUND:
    case OSP_UNARY_SOFTSIGN:
    case OSP_UNARY_LEAKY_RELU:
    case OSP_UNARY_THRESHOLDED_RELU:
    case OSP_UNARY_HARD_SIGMOID:
    case OSP_UNARY_HARD_SWISH:
    case OSP_UNARY_ISNAN:
    case OSP_UNARY_ISINF:
        return 1;
    default:
        return CPU_WORK_MATH;
    }
}

osp_error *cpu_op_unary(osp_device *dev, void *stream,
                        const osp_unary_args *args) {
    (void)dev;
    unary_job job = {.args = args,
                     .in_es = osp_datatype_byte_size(args->dtype)};
    job.out_es = args->op == OSP_UNARY_ISNAN || args->op == OSP_UNARY_ISINF
                     ? sizeof(bool)
                     : job.in_es;
    atomic_init(&job.unsupported, false);
    cpu_parallel_range((int64_t)args->n, unary_work(args->op, args->dtype),
                       cpu_stream_threads(stream), unary_range, &job);
    if (atomic_load(&job.unsupported))
        return osp_error_new(
            OSP_ERROR_UNSUPPORTED, "CPU device: unary op %d on datatype %s",
            (int)args->op, osp_datatype_wire_name(args->dtype));
    return NULL;
}

/* ---- binary_nd: one row -------------------------------------------------
 */

/* out[i] = a[i * sa] op b[i * sb] for i < n: the row kernel of binary_nd
 * (out never overlaps a or b). False when the op does not take the row's
 * type. */
typedef bool (*binary_row_fn)(osp_binary_nd_op op, int64_t n,
                              const void *restrict a, int64_t sa,
                              const void *restrict b, int64_t sb,
                              void *restrict out);

/* One loop of a row kernel: EXPR of x (from a) and y (from b) into out,
 * specialised for contiguous inputs and broadcast scalars so that the
 * common rows vectorise (a, b and out are the kernel's restrict
 * parameters). */
#define ROW_LOOP(T, OT, EXPR)                                                  \
    do {                                                                       \
        const T *pa = a, *pb = b;                                              \
        OT *po = out;                                                          \
        if (sa == 1 && sb == 1) {                                              \
            CPU_LOOP(n, i, T x = pa[i]; T y = pb[i]; po[i] = (OT)(EXPR));      \
        } else if (sa == 1 && sb == 0) {                                       \
            const T y = pb[0];                                                 \
            CPU_LOOP(n, i, T x = pa[i]; po[i] = (OT)(EXPR));                   \
        } else if (sa == 0 && sb == 1) {                                       \
            const T x = pa[0];                                                 \
            CPU_LOOP(n, i, T y = pb[i]; po[i] = (OT)(EXPR));                   \
        } else {                                                               \
            for (int64_t i = 0; i < n; i++) {                                  \
                T x = pa[i * sa], y = pb[i * sb];                              \
                po[i] = (OT)(EXPR);                                            \
            }                                                                  \
        }                                                                      \
    } while (0)

/* The comparisons, for every type: BOOL out. */
#define COMPARE_CASES(T)                                                       \
    case OSP_BINARY_ND_EQUAL:                                                  \
        ROW_LOOP(T, bool, x == y);                                             \
        return true;                                                           \
    case OSP_BINARY_ND_LESS:                                                   \
        ROW_LOOP(T, bool, x < y);                                              \
        return true;                                                           \
    case OSP_BINARY_ND_LESS_EQUAL:                                             \
        ROW_LOOP(T, bool, x <= y);                                             \
        return true;                                                           \
    case OSP_BINARY_ND_GREATER:                                                \
        ROW_LOOP(T, bool, x > y);                                              \
        return true;                                                           \
    case OSP_BINARY_ND_GREATER_EQUAL:                                          \
        ROW_LOOP(T, bool, x >= y);                                             \
        return true;

/* The float rows (binary_rules.h). */
#define BINARY_ROW_FLOAT(T, sfx, POW, FMOD, SELECT)                            \
    CPU_NN_HOT static bool binary_row_##sfx(                                   \
        osp_binary_nd_op op, int64_t n, const void *restrict a, int64_t sa,    \
        const void *restrict b, int64_t sb, void *restrict out) {              \
        switch (op) {                                                          \
        case OSP_BINARY_ND_ADD:                                                \
            ROW_LOOP(T, T, x + y);                                             \
            return true;                                                       \
        case OSP_BINARY_ND_SUB:                                                \
            ROW_LOOP(T, T, x - y);                                             \
            return true;                                                       \
        case OSP_BINARY_ND_MUL:                                                \
            ROW_LOOP(T, T, x *y);                                              \
            return true;                                                       \
        case OSP_BINARY_ND_DIV:                                                \
            ROW_LOOP(T, T, x / y);                                             \
            return true;                                                       \
        case OSP_BINARY_ND_POW:                                                \
            ROW_LOOP(T, T, POW(x, y));                                         \
            return true;                                                       \
        case OSP_BINARY_ND_MAX:                                                \
            ROW_LOOP(T, T, binary_max_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_MIN:                                                \
            ROW_LOOP(T, T, binary_min_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_MOD:                                                \
            ROW_LOOP(T, T, binary_mod_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_FMOD:                                               \
            ROW_LOOP(T, T, FMOD(x, y));                                        \
            return true;                                                       \
        case OSP_BINARY_ND_PRELU:                                              \
            ROW_LOOP(T, T, SELECT(x < 0, x * y, x));                           \
            return true;                                                       \
            COMPARE_CASES(T)                                                   \
        default:                                                               \
            return false;                                                      \
        }                                                                      \
    }
BINARY_ROW_FLOAT(float, f32, powf, fmodf, unary_select_f32)
BINARY_ROW_FLOAT(double, f64, pow, fmod, binary_select_f64)
#undef BINARY_ROW_FLOAT

#define BINARY_ROW_SIGNED(T, AU, sfx)                                          \
    static bool binary_row_##sfx(                                              \
        osp_binary_nd_op op, int64_t n, const void *restrict a, int64_t sa,    \
        const void *restrict b, int64_t sb, void *restrict out) {              \
        switch (op) {                                                          \
        case OSP_BINARY_ND_ADD:                                                \
            ROW_LOOP(T, T, (AU)x + (AU)y);                                     \
            return true;                                                       \
        case OSP_BINARY_ND_SUB:                                                \
            ROW_LOOP(T, T, (AU)x - (AU)y);                                     \
            return true;                                                       \
        case OSP_BINARY_ND_MUL:                                                \
            ROW_LOOP(T, T, (AU)x *(AU)y);                                      \
            return true;                                                       \
        case OSP_BINARY_ND_DIV:                                                \
            ROW_LOOP(T, T, binary_div_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_POW:                                                \
            ROW_LOOP(T, T, binary_pow_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_MAX:                                                \
            ROW_LOOP(T, T, x > y ? x : y);                                     \
            return true;                                                       \
        case OSP_BINARY_ND_MIN:                                                \
            ROW_LOOP(T, T, x < y ? x : y);                                     \
            return true;                                                       \
        case OSP_BINARY_ND_MOD:                                                \
            ROW_LOOP(T, T, binary_mod_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_FMOD:                                               \
            ROW_LOOP(T, T, binary_fmod_##sfx(x, y));                           \
            return true;                                                       \
        case OSP_BINARY_ND_PRELU:                                              \
            ROW_LOOP(T, T, x < 0 ? (T)((AU)x * (AU)y) : x);                    \
            return true;                                                       \
            COMPARE_CASES(T)                                                   \
        default:                                                               \
            return false;                                                      \
        }                                                                      \
    }
BINARY_ROW_SIGNED(int8_t, uint32_t, i8)
BINARY_ROW_SIGNED(int16_t, uint32_t, i16)
BINARY_ROW_SIGNED(int32_t, uint32_t, i32)
BINARY_ROW_SIGNED(int64_t, uint64_t, i64)
#undef BINARY_ROW_SIGNED

/* Unsigned rows: PRELU is the identity (nothing is negative); shifts by
 * the type's width or more give 0. */
#define BINARY_ROW_UNSIGNED(T, AU, sfx)                                        \
    static bool binary_row_##sfx(                                              \
        osp_binary_nd_op op, int64_t n, const void *restrict a, int64_t sa,    \
        const void *restrict b, int64_t sb, void *restrict out) {              \
        switch (op) {                                                          \
        case OSP_BINARY_ND_ADD:                                                \
            ROW_LOOP(T, T, (AU)x + (AU)y);                                     \
            return true;                                                       \
        case OSP_BINARY_ND_SUB:                                                \
            ROW_LOOP(T, T, (AU)x - (AU)y);                                     \
            return true;                                                       \
        case OSP_BINARY_ND_MUL:                                                \
            ROW_LOOP(T, T, (AU)x *(AU)y);                                      \
            return true;                                                       \
        case OSP_BINARY_ND_DIV:                                                \
            ROW_LOOP(T, T, binary_div_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_POW:                                                \
            ROW_LOOP(T, T, binary_pow_u64(x, y));                              \
            return true;                                                       \
        case OSP_BINARY_ND_MAX:                                                \
            ROW_LOOP(T, T, x > y ? x : y);                                     \
            return true;                                                       \
        case OSP_BINARY_ND_MIN:                                                \
            ROW_LOOP(T, T, x < y ? x : y);                                     \
            return true;                                                       \
        case OSP_BINARY_ND_MOD:                                                \
        case OSP_BINARY_ND_FMOD:                                               \
            ROW_LOOP(T, T, binary_mod_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_PRELU:                                              \
            ROW_LOOP(T, T, ((void)y, x));                                      \
            return true;                                                       \
        case OSP_BINARY_ND_BITSHIFT_LEFT:                                      \
            ROW_LOOP(T, T, binary_shl_##sfx(x, y));                            \
            return true;                                                       \
        case OSP_BINARY_ND_BITSHIFT_RIGHT:                                     \
            ROW_LOOP(T, T, binary_shr_##sfx(x, y));                            \
            return true;                                                       \
            COMPARE_CASES(T)                                                   \
        default:                                                               \
            return false;                                                      \
        }                                                                      \
    }
BINARY_ROW_UNSIGNED(uint8_t, uint32_t, u8)
BINARY_ROW_UNSIGNED(uint16_t, uint32_t, u16)
BINARY_ROW_UNSIGNED(uint32_t, uint32_t, u32)
BINARY_ROW_UNSIGNED(uint64_t, uint64_t, u64)
#undef BINARY_ROW_UNSIGNED

/* BOOL as bytes (0 or 1): bitwise logic gives the same 0 or 1 and,
 * unlike _Bool arithmetic, vectorises. */
static bool binary_row_bool(osp_binary_nd_op op, int64_t n,
                            const void *restrict a, int64_t sa,
                            const void *restrict b, int64_t sb,
                            void *restrict out) {
    switch (op) {
    case OSP_BINARY_ND_AND:
        ROW_LOOP(uint8_t, uint8_t, x & y);
        return true;
    case OSP_BINARY_ND_OR:
        ROW_LOOP(uint8_t, uint8_t, x | y);
        return true;
    case OSP_BINARY_ND_XOR:
        ROW_LOOP(uint8_t, uint8_t, x ^ y);
        return true;
    case OSP_BINARY_ND_EQUAL:
        ROW_LOOP(uint8_t, uint8_t, x == y);
        return true;
    default:
        return false;
    }
}

#undef COMPARE_CASES
#undef ROW_LOOP

static binary_row_fn binary_row_for(osp_datatype dtype) {
    switch (dtype) {
    case OSP_TYPE_FP32:
        return binary_row_f32;
    case OSP_TYPE_FP64:
        return binary_row_f64;
    case OSP_TYPE_INT8:
        return binary_row_i8;
    case OSP_TYPE_INT16:
        return binary_row_i16;
    case OSP_TYPE_INT32:
        return binary_row_i32;
    case OSP_TYPE_INT64:
        return binary_row_i64;
    case OSP_TYPE_UINT8:
        return binary_row_u8;
    case OSP_TYPE_UINT16:
        return binary_row_u16;
    case OSP_TYPE_UINT32:
        return binary_row_u32;
    case OSP_TYPE_UINT64:
        return binary_row_u64;
    case OSP_TYPE_BOOL:
        return binary_row_bool;
    default:
        return NULL;
    }
}

static bool is_comparison(osp_binary_nd_op op) {
    return op == OSP_BINARY_ND_EQUAL || op == OSP_BINARY_ND_LESS ||
           op == OSP_BINARY_ND_LESS_EQUAL || op == OSP_BINARY_ND_GREATER ||
           op == OSP_BINARY_ND_GREATER_EQUAL;
}

/* ---- binary_nd --------------------------------------------------------- */

/* binary_nd's output as elements [lo, hi) of its rows laid end to end:
 * a task takes a range, which may start or end inside a row. */
typedef struct binary_nd_job {
    const osp_binary_nd_args *args;
    binary_row_fn row;
    cpu_nd s;
    size_t es, out_es;
    _Atomic bool unsupported;
} binary_nd_job;

static void binary_nd_range(void *arg, int64_t lo, int64_t hi) {
    binary_nd_job *job = arg;
    const cpu_nd *s = &job->s;
    int inner = s->rank - 1;
    int64_t n = s->dims[inner], sa = s->strides[0][inner],
            sb = s->strides[1][inner], so = s->strides[2][inner];
    int64_t es = (int64_t)job->es, out_es = (int64_t)job->out_es;
    int64_t idx[OSP_MAX_DIMS] = {0}, off[3] = {0, 0, 0};
    const char *a = job->args->a, *b = job->args->b;
    char *out = job->args->out;
    int64_t c = lo % n;
    cpu_nd_seek(s, lo / n, idx, off);
    for (int64_t e = lo; e < hi;) {
        int64_t len = n - c < hi - e ? n - c : hi - e;
        if (!job->row(job->args->op, len, a + (off[0] + c * sa) * es, sa,
                      b + (off[1] + c * sb) * es, sb,
                      out + (off[2] + c * so) * out_es)) {
            atomic_store(&job->unsupported, true);
            return;
        }
        e += len;
        c = 0;
        cpu_nd_next_row(s, idx, off);
    }
}

osp_error *cpu_op_binary_nd(osp_device *dev, void *stream,
                            const osp_binary_nd_args *args) {
    (void)dev;
    binary_nd_job job = {.args = args, .row = binary_row_for(args->dtype)};
    atomic_init(&job.unsupported, job.row == NULL);
    if (job.row != NULL) {
        job.es = osp_datatype_byte_size(args->dtype);
        job.out_es = is_comparison(args->op) ? sizeof(bool) : job.es;
        int64_t out_strides[OSP_MAX_DIMS];
        cpu_nd_contiguous(args->rank, args->dims, out_strides);
        const int64_t *strides[3] = {args->a_strides, args->b_strides,
                                     out_strides};
        cpu_nd_init(&job.s, args->rank, args->dims, 3, strides);
        bool math = args->op == OSP_BINARY_ND_POW ||
                    args->op == OSP_BINARY_ND_MOD ||
                    args->op == OSP_BINARY_ND_FMOD;
        cpu_parallel_range(cpu_nd_rows(&job.s) * job.s.dims[job.s.rank - 1],
                           math ? CPU_WORK_MATH : 1, cpu_stream_threads(stream),
                           binary_nd_range, &job);
    }
    if (atomic_load(&job.unsupported))
        return osp_error_new(
            OSP_ERROR_UNSUPPORTED, "CPU device: binary_nd op %d on datatype %s",
            (int)args->op, osp_datatype_wire_name(args->dtype));
    return NULL;
}

/* ---- where ------------------------------------------------------------- */

/* out[i] = c[i * sc] ? x[i * sx] : y[i * sy] for i < n, for elements of
 * type T; contiguous and scalar x and y get their own loops. BOOL is read
 * as bytes (0 or 1) and both sides are loaded whatever the condition:
 * GCC vectorises neither a conversion from _Bool nor a conditional
 * load. */
#define WHERE_ROW(T)                                                           \
    static void where_row_##T(                                                 \
        int64_t n, const uint8_t *restrict c, int64_t sc, const T *restrict x, \
        int64_t sx, const T *restrict y, int64_t sy, T *restrict out) {        \
        if (sc == 1 && sx == 1 && sy == 1) {                                   \
            CPU_LOOP(n, i, T xv = x[i]; T yv = y[i]; out[i] = c[i] ? xv : yv); \
        } else if (sc == 1 && sx == 1 && sy == 0) {                            \
            T yv = y[0];                                                       \
            CPU_LOOP(n, i, T xv = x[i]; out[i] = c[i] ? xv : yv);              \
        } else if (sc == 1 && sx == 0 && sy == 1) {                            \
            T xv = x[0];                                                       \
            CPU_LOOP(n, i, T yv = y[i]; out[i] = c[i] ? xv : yv);              \
        } else if (sc == 1 && sx == 0 && sy == 0) {                            \
            T xv = x[0], yv = y[0];                                            \
            CPU_LOOP(n, i, out[i] = c[i] ? xv : yv);                           \
        } else {                                                               \
            for (int64_t i = 0; i < n; i++)                                    \
                out[i] = c[i * sc] ? x[i * sx] : y[i * sy];                    \
        }                                                                      \
    }
WHERE_ROW(uint8_t)
WHERE_ROW(uint16_t)
WHERE_ROW(uint32_t)
WHERE_ROW(uint64_t)
#undef WHERE_ROW

/* where's output as elements [lo, hi) of its rows laid end to end, as
 * binary_nd's. */
typedef struct where_job {
    const osp_where_args *args;
    cpu_nd s;
} where_job;

static void where_range(void *arg, int64_t lo, int64_t hi) {
    const where_job *job = arg;
    const cpu_nd *s = &job->s;
    const osp_where_args *args = job->args;
    int inner = s->rank - 1;
    int64_t n = s->dims[inner], sc = s->strides[0][inner],
            sx = s->strides[1][inner], sy = s->strides[2][inner],
            so = s->strides[3][inner];
    int64_t idx[OSP_MAX_DIMS] = {0}, off[4] = {0, 0, 0, 0};
    int64_t es = (int64_t)args->elem_size;
    const char *x = args->x, *y = args->y;
    char *out = args->out;
    int64_t c = lo % n;
    cpu_nd_seek(s, lo / n, idx, off);
    for (int64_t e = lo; e < hi;) {
        int64_t len = n - c < hi - e ? n - c : hi - e;
        const uint8_t *cr = (const uint8_t *)args->cond + off[0] + c * sc;
        const void *xr = x + (off[1] + c * sx) * es,
                   *yr = y + (off[2] + c * sy) * es;
        void *o = out + (off[3] + c * so) * es;
        switch (es) {
        case 1:
            where_row_uint8_t(len, cr, sc, xr, sx, yr, sy, o);
            break;
        case 2:
            where_row_uint16_t(len, cr, sc, xr, sx, yr, sy, o);
            break;
        case 4:
            where_row_uint32_t(len, cr, sc, xr, sx, yr, sy, o);
            break;
        default:
            where_row_uint64_t(len, cr, sc, xr, sx, yr, sy, o);
            break;
        }
        e += len;
        c = 0;
        cpu_nd_next_row(s, idx, off);
    }
}

osp_error *cpu_op_where(osp_device *dev, void *stream,
                        const osp_where_args *args) {
    (void)dev;
    where_job job = {.args = args};
    int64_t out_strides[OSP_MAX_DIMS];
    cpu_nd_contiguous(args->rank, args->dims, out_strides);
    const int64_t *strides[4] = {args->cond_strides, args->x_strides,
                                 args->y_strides, out_strides};
    cpu_nd_init(&job.s, args->rank, args->dims, 4, strides);
    cpu_parallel_range(cpu_nd_rows(&job.s) * job.s.dims[job.s.rank - 1], 1,
                       cpu_stream_threads(stream), where_range, &job);
    return NULL;
}
