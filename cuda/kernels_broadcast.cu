/*
 * The broadcasting elementwise kernels: binary_nd and where. One thread
 * per output element (output contiguous, so stores coalesce), each input
 * read through the simplified N-d map of kernels_nd.cuh: equal shapes and
 * scalar operands come out as rank 1 (offsets without a division), a row
 * broadcast as rank 2 (one). The per-element rules are the CPU device's:
 * server/device/binary_rules.h beyond plain arithmetic, integer
 * arithmetic in the unsigned type so that it wraps, BOOL as bytes.
 */
#include <stdint.h>

#include "binary_rules.h"
#include "kernels.h"
#include "kernels_launch.cuh"
#include "kernels_nd.cuh"

/* ---- the arithmetic of each dtype (comparisons are generic) ------------ */

/* Each ops struct's apply(op, x, y) is the row loop's expression in
 * cpu_ops_elementwise.c for every op but the comparisons. */
struct ops_f32 {
    typedef float T;
    static __device__ __forceinline__ T apply(osp_binary_nd_op op, T x, T y) {
        switch (op) {
        case OSP_BINARY_ND_ADD:
            return x + y;
        case OSP_BINARY_ND_SUB:
            return x - y;
        case OSP_BINARY_ND_MUL:
            return x * y;
        case OSP_BINARY_ND_DIV:
            return x / y;
        case OSP_BINARY_ND_POW:
            return powf(x, y);
        case OSP_BINARY_ND_MAX:
            return binary_max_f32(x, y);
        case OSP_BINARY_ND_MIN:
            return binary_min_f32(x, y);
        case OSP_BINARY_ND_MOD:
            return binary_mod_f32(x, y);
        case OSP_BINARY_ND_FMOD:
            return fmodf(x, y);
        default: /* PRELU */
            return x < 0.0f ? x * y : x;
        }
    }
};

struct ops_f64 {
    typedef double T;
    static __device__ __forceinline__ T apply(osp_binary_nd_op op, T x, T y) {
        switch (op) {
        case OSP_BINARY_ND_ADD:
            return x + y;
        case OSP_BINARY_ND_SUB:
            return x - y;
        case OSP_BINARY_ND_MUL:
            return x * y;
        case OSP_BINARY_ND_DIV:
            return x / y;
        case OSP_BINARY_ND_POW:
            return pow(x, y);
        case OSP_BINARY_ND_MAX:
            return binary_max_f64(x, y);
        case OSP_BINARY_ND_MIN:
            return binary_min_f64(x, y);
        case OSP_BINARY_ND_MOD:
            return binary_mod_f64(x, y);
        case OSP_BINARY_ND_FMOD:
            return fmod(x, y);
        default: /* PRELU */
            return x < 0.0 ? x * y : x;
        }
    }
};

#define OPS_SIGNED(TT, AU, sfx)                                                \
    struct ops_##sfx {                                                         \
        typedef TT T;                                                          \
        static __device__ __forceinline__ T apply(osp_binary_nd_op op, T x,    \
                                                  T y) {                       \
            switch (op) {                                                      \
            case OSP_BINARY_ND_ADD:                                            \
                return (T)((AU)x + (AU)y);                                     \
            case OSP_BINARY_ND_SUB:                                            \
                return (T)((AU)x - (AU)y);                                     \
            case OSP_BINARY_ND_MUL:                                            \
                return (T)((AU)x * (AU)y);                                     \
            case OSP_BINARY_ND_DIV:                                            \
                return binary_div_##sfx(x, y);                                 \
            case OSP_BINARY_ND_POW:                                            \
                return binary_pow_##sfx(x, y);                                 \
            case OSP_BINARY_ND_MAX:                                            \
                return x > y ? x : y;                                          \
            case OSP_BINARY_ND_MIN:                                            \
                return x < y ? x : y;                                          \
            case OSP_BINARY_ND_MOD:                                            \
                return binary_mod_##sfx(x, y);                                 \
            case OSP_BINARY_ND_FMOD:                                           \
                return binary_fmod_##sfx(x, y);                                \
            default: /* PRELU */                                               \
                return x < 0 ? (T)((AU)x * (AU)y) : x;                         \
            }                                                                  \
        }                                                                      \
    };
OPS_SIGNED(int8_t, uint32_t, i8)
OPS_SIGNED(int16_t, uint32_t, i16)
OPS_SIGNED(int32_t, uint32_t, i32)
OPS_SIGNED(int64_t, uint64_t, i64)
#undef OPS_SIGNED

/* PRELU is the identity (nothing is negative). */
#define OPS_UNSIGNED(TT, AU, sfx)                                              \
    struct ops_##sfx {                                                         \
        typedef TT T;                                                          \
        static __device__ __forceinline__ T apply(osp_binary_nd_op op, T x,    \
                                                  T y) {                       \
            switch (op) {                                                      \
            case OSP_BINARY_ND_ADD:                                            \
                return (T)((AU)x + (AU)y);                                     \
            case OSP_BINARY_ND_SUB:                                            \
                return (T)((AU)x - (AU)y);                                     \
            case OSP_BINARY_ND_MUL:                                            \
                return (T)((AU)x * (AU)y);                                     \
            case OSP_BINARY_ND_DIV:                                            \
                return binary_div_##sfx(x, y);                                 \
            case OSP_BINARY_ND_POW:                                            \
                return (T)binary_pow_u64(x, y);                                \
            case OSP_BINARY_ND_MAX:                                            \
                return x > y ? x : y;                                          \
            case OSP_BINARY_ND_MIN:                                            \
                return x < y ? x : y;                                          \
            case OSP_BINARY_ND_MOD:                                            \
            case OSP_BINARY_ND_FMOD:                                           \
                return binary_mod_##sfx(x, y);                                 \
            case OSP_BINARY_ND_BITSHIFT_LEFT:                                  \
                return binary_shl_##sfx(x, y);                                 \
            case OSP_BINARY_ND_BITSHIFT_RIGHT:                                 \
                return binary_shr_##sfx(x, y);                                 \
            default: /* PRELU */                                               \
                return x;                                                      \
            }                                                                  \
        }                                                                      \
    };
OPS_UNSIGNED(uint8_t, uint32_t, u8)
OPS_UNSIGNED(uint16_t, uint32_t, u16)
OPS_UNSIGNED(uint32_t, uint32_t, u32)
OPS_UNSIGNED(uint64_t, uint64_t, u64)
#undef OPS_UNSIGNED

/* BOOL as bytes (0 or 1); EQUAL is a comparison. */
struct ops_bool {
    typedef uint8_t T;
    static __device__ __forceinline__ T apply(osp_binary_nd_op op, T x, T y) {
        switch (op) {
        case OSP_BINARY_ND_AND:
            return x & y;
        case OSP_BINARY_ND_OR:
            return x | y;
        default: /* XOR */
            return x ^ y;
        }
    }
};

template <typename T>
__device__ __forceinline__ uint8_t binary_compare(osp_binary_nd_op op, T x,
                                                  T y) {
    switch (op) {
    case OSP_BINARY_ND_EQUAL:
        return x == y;
    case OSP_BINARY_ND_LESS:
        return x < y;
    case OSP_BINARY_ND_LESS_EQUAL:
        return x <= y;
    case OSP_BINARY_ND_GREATER:
        return x > y;
    default: /* GREATER_EQUAL */
        return x >= y;
    }
}

/* ---- binary_nd --------------------------------------------------------- */

/* out[i] = a op b for each element i of the box m (operands a, b). The op
 * is uniform across the grid, so its switch never diverges. */
template <typename Ops, typename I>
__global__ void binary_nd_kernel(osp_binary_nd_op op, bool compare, nd_map<2> m,
                                 const typename Ops::T *a,
                                 const typename Ops::T *b, void *out, I n) {
    typedef typename Ops::T T;
    OSP_GRID_STRIDE(I, i, n) {
        int64_t off[2];
        nd_offsets(m, i, off);
        T x = a[off[0]], y = b[off[1]];
        if (compare)
            ((uint8_t *)out)[i] = binary_compare(op, x, y);
        else
            ((T *)out)[i] = Ops::apply(op, x, y);
    }
}

template <typename Ops>
static cudaError_t launch_binary_nd(cudaStream_t stream,
                                    const osp_binary_nd_args *args) {
    typedef typename Ops::T T;
    osp_binary_nd_op op = args->op;
    bool compare = op == OSP_BINARY_ND_EQUAL || op == OSP_BINARY_ND_LESS ||
                   op == OSP_BINARY_ND_LESS_EQUAL ||
                   op == OSP_BINARY_ND_GREATER ||
                   op == OSP_BINARY_ND_GREATER_EQUAL;
    const int64_t *strides[2] = {args->a_strides, args->b_strides};
    nd_map<2> m = nd_map_make<2>(args->rank, args->dims, strides);
    uint64_t n = nd_count(m);
    const T *a = nd_device_arg(stream, m, 0, (const T *)args->a, sizeof(T));
    const T *b = nd_device_arg(stream, m, 1, (const T *)args->b, sizeof(T));
    void *out = OSP_DEVICE_ARG(stream, args->out,
                               (size_t)n * (compare ? 1 : sizeof(T)));
    unsigned grid = cuda_grid_for((size_t)n);
    if (n <= OSP_ND_SMALL_COUNT)
        return OSP_LAUNCH((binary_nd_kernel<Ops, uint32_t>), grid,
                          OSP_CUDA_BLOCK, 0, stream, op, compare, m, a, b, out,
                          (uint32_t)n);
    return OSP_LAUNCH((binary_nd_kernel<Ops, int64_t>), grid, OSP_CUDA_BLOCK, 0,
                      stream, op, compare, m, a, b, out, (int64_t)n);
}

extern "C" cudaError_t cuda_launch_binary_nd(cudaStream_t stream,
                                             const osp_binary_nd_args *args) {
    switch (args->dtype) {
    case OSP_TYPE_FP32:
        return launch_binary_nd<ops_f32>(stream, args);
    case OSP_TYPE_FP64:
        return launch_binary_nd<ops_f64>(stream, args);
    case OSP_TYPE_INT8:
        return launch_binary_nd<ops_i8>(stream, args);
    case OSP_TYPE_INT16:
        return launch_binary_nd<ops_i16>(stream, args);
    case OSP_TYPE_INT32:
        return launch_binary_nd<ops_i32>(stream, args);
    case OSP_TYPE_INT64:
        return launch_binary_nd<ops_i64>(stream, args);
    case OSP_TYPE_UINT8:
        return launch_binary_nd<ops_u8>(stream, args);
    case OSP_TYPE_UINT16:
        return launch_binary_nd<ops_u16>(stream, args);
    case OSP_TYPE_UINT32:
        return launch_binary_nd<ops_u32>(stream, args);
    case OSP_TYPE_UINT64:
        return launch_binary_nd<ops_u64>(stream, args);
    case OSP_TYPE_BOOL:
        return launch_binary_nd<ops_bool>(stream, args);
    default:
        return cudaErrorInvalidValue;
    }
}

/* ---- where ------------------------------------------------------------- */

/* out[i] = cond ? x : y over the box m (operands cond, x, y), elements of
 * E's size. */
template <typename E, typename I>
__global__ void where_kernel(nd_map<3> m, const uint8_t *cond, const E *x,
                             const E *y, E *out, I n) {
    OSP_GRID_STRIDE(I, i, n) {
        int64_t off[3];
        nd_offsets(m, i, off);
        out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
    }
}

template <typename E>
static cudaError_t launch_where(cudaStream_t stream,
                                const osp_where_args *args) {
    const int64_t *strides[3] = {args->cond_strides, args->x_strides,
                                 args->y_strides};
    nd_map<3> m = nd_map_make<3>(args->rank, args->dims, strides);
    uint64_t n = nd_count(m);
    const uint8_t *cond =
        nd_device_arg(stream, m, 0, (const uint8_t *)args->cond, 1);
    const E *x = nd_device_arg(stream, m, 1, (const E *)args->x, sizeof(E));
    const E *y = nd_device_arg(stream, m, 2, (const E *)args->y, sizeof(E));
    E *out = OSP_DEVICE_ARG(stream, (E *)args->out, (size_t)n * sizeof(E));
    unsigned grid = cuda_grid_for((size_t)n);
    if (n <= OSP_ND_SMALL_COUNT)
        return OSP_LAUNCH((where_kernel<E, uint32_t>), grid, OSP_CUDA_BLOCK, 0,
                          stream, m, cond, x, y, out, (uint32_t)n);
    return OSP_LAUNCH((where_kernel<E, int64_t>), grid, OSP_CUDA_BLOCK, 0,
                      stream, m, cond, x, y, out, (int64_t)n);
}

extern "C" cudaError_t cuda_launch_where(cudaStream_t stream,
                                         const osp_where_args *args) {
    switch (args->elem_size) {
    case 1:
        return launch_where<uint8_t>(stream, args);
    case 2:
        return launch_where<uint16_t>(stream, args);
    case 4:
        return launch_where<uint32_t>(stream, args);
    case 8:
        return launch_where<uint64_t>(stream, args);
    default:
        return cudaErrorInvalidValue;
    }
}
