/*
 * The index-driven kernels: gather and scatter, over data viewed as
 * [outer, axis_len, inner] (osprey/tensor_ops.h). One thread per element
 * of the gathered output or of the updates, consecutive threads along
 * inner, so rows move coalesced; gather moves rows as the widest words
 * (up to 8 bytes, 16-byte elements whole) that the row length and the
 * pointers allow.
 *
 * The indices are device memory, so a bad one cannot be reported before
 * the slot returns: gather writes zeros for it, scatter skips it (the
 * contract's choice for such devices). Scatter's reductions combine with
 * compare-and-swap loops, so repeated indices all apply (in some order:
 * integer results are exact, float sums and products may round
 * differently from the CPU's in-order loop); NONE keeps any one update.
 */
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "kernels_launch.cuh"
#include "kernels_nd.cuh"

/* indices[j], negative counting from len; -1 when outside [-len, len). */
template <typename X>
__device__ __forceinline__ int64_t axis_index(const X *indices, int64_t j,
                                              int64_t len) {
    int64_t v = (int64_t)indices[j];
    if (v < -len || v >= len)
        return -1;
    return v < 0 ? v + len : v;
}

/* ---- gather ------------------------------------------------------------ */

/* Element e of an [outer, n_indices, inner] box as (o, j, i); I is the
 * index type (uint32_t where the box fits, as kernels_nd.cuh's). */
template <typename I>
__device__ __forceinline__ void
box_position(I e, I n_indices, I inner, int64_t *o, int64_t *j, int64_t *i) {
    I row = e / inner, oo = row / n_indices;
    *i = (int64_t)(e - row * inner);
    *j = (int64_t)(row - oo * n_indices);
    *o = (int64_t)oo;
}

/* out[o, j, i] = data[o, indices[j], i] over words of type E (inner
 * counts words). */
template <typename E, typename X, typename I>
__global__ void gather_kernel(const E *data, const X *indices, E *out,
                              int64_t len, I n_indices, I inner, I n) {
    OSP_GRID_STRIDE(I, e, n) {
        int64_t o, j, i;
        box_position(e, n_indices, inner, &o, &j, &i);
        int64_t v = axis_index(indices, j, len);
        out[e] = v < 0 ? E() : data[(o * len + v) * (int64_t)inner + i];
    }
}

/* A 16-byte element (8-byte aligned: two 8-byte moves). */
struct gather_elem16 {
    uint64_t lo, hi;
};

template <typename E, typename X, typename I>
static cudaError_t launch_gather_as(cudaStream_t stream,
                                    const osp_gather_args *args, const E *data,
                                    E *out, int64_t inner, int64_t n) {
    const X *idx = OSP_DEVICE_ARG(stream, (const X *)args->indices,
                                  (size_t)args->n_indices * sizeof(X));
    return OSP_LAUNCH((gather_kernel<E, X, I>), cuda_grid_for((size_t)n),
                      OSP_CUDA_BLOCK, 0, stream, data, idx, out, args->axis_len,
                      (I)args->n_indices, (I)inner, (I)n);
}

template <typename E>
static cudaError_t launch_gather(cudaStream_t stream,
                                 const osp_gather_args *args, int64_t inner) {
    int64_t n = args->outer * args->n_indices * inner;
    const E *data = OSP_DEVICE_ARG(
        stream, (const E *)args->data,
        (size_t)(args->outer * args->axis_len * inner) * sizeof(E));
    E *out = OSP_DEVICE_ARG(stream, (E *)args->out, (size_t)n * sizeof(E));
    bool small = (uint64_t)n <= OSP_ND_SMALL_COUNT;
    if (args->index_dtype == OSP_TYPE_INT32)
        return small ? launch_gather_as<E, int32_t, uint32_t>(
                           stream, args, data, out, inner, n)
                     : launch_gather_as<E, int32_t, int64_t>(stream, args, data,
                                                             out, inner, n);
    return small ? launch_gather_as<E, int64_t, uint32_t>(stream, args, data,
                                                          out, inner, n)
                 : launch_gather_as<E, int64_t, int64_t>(stream, args, data,
                                                         out, inner, n);
}

extern "C" cudaError_t cuda_launch_gather(cudaStream_t stream,
                                          const osp_gather_args *args) {
    /* Rows of row_bytes move as words of w bytes. */
    size_t row_bytes = (size_t)args->inner * args->elem_size;
    size_t w = args->elem_size == 16 ? 16 : 8;
    while (w > 1 && (row_bytes % w != 0 || (uintptr_t)args->data % w != 0 ||
                     (uintptr_t)args->out % w != 0))
        w /= 2;
    if (w < args->elem_size) /* misaligned elements: as they are */
        w = args->elem_size;
    int64_t inner = (int64_t)(row_bytes / w);
    switch (w) {
    case 1:
        return launch_gather<uint8_t>(stream, args, inner);
    case 2:
        return launch_gather<uint16_t>(stream, args, inner);
    case 4:
        return launch_gather<uint32_t>(stream, args, inner);
    case 8:
        return launch_gather<uint64_t>(stream, args, inner);
    default:
        return launch_gather<gather_elem16>(stream, args, inner);
    }
}

/* ---- scatter ----------------------------------------------------------- */

/* The CPU device's combination of an update s with the element d it
 * lands on (cpu_ops_index.c); integers in unsigned arithmetic (U, float
 * for float), so that sums and products wrap. */
template <typename T, typename U>
__device__ __forceinline__ T scatter_combine(osp_scatter_reduction r, T d,
                                             T s) {
    switch (r) {
    case OSP_SCATTER_ADD:
        return (T)((U)d + (U)s);
    case OSP_SCATTER_MUL:
        return (T)((U)d * (U)s);
    case OSP_SCATTER_MAX:
        return s > d ? s : d;
    default: /* MIN */
        return s < d ? s : d;
    }
}

/* How an update lands: stored (NONE), or combined atomically by a
 * compare-and-swap loop on the bits (W, the unsigned type atomicCAS takes,
 * of T's size). */
struct scatter_store {
    template <typename T>
    static __device__ __forceinline__ void apply(osp_scatter_reduction r, T *p,
                                                 T s) {
        (void)r;
        *p = s;
    }
};

template <typename U, typename W> struct scatter_atomic {
    template <typename T>
    static __device__ __forceinline__ void apply(osp_scatter_reduction r, T *p,
                                                 T s) {
        W *word = (W *)p;
        W old = *word, assumed;
        do {
            assumed = old;
            T d;
            memcpy(&d, &assumed, sizeof d);
            T v = scatter_combine<T, U>(r, d, s);
            W bits;
            memcpy(&bits, &v, sizeof bits);
            old = atomicCAS(word, assumed, bits);
        } while (old != assumed);
    }
};

/* One thread per update element (o, j, i), landing as Land says. */
template <typename T, typename Land, typename X, typename I>
__global__ void scatter_kernel(osp_scatter_reduction r, T *data,
                               const X *indices, const T *updates, int64_t len,
                               I n_indices, I inner, I n) {
    OSP_GRID_STRIDE(I, e, n) {
        int64_t o, j, i;
        box_position(e, n_indices, inner, &o, &j, &i);
        int64_t v = axis_index(indices, j, len);
        if (v >= 0)
            Land::apply(r, data + (o * len + v) * (int64_t)inner + i,
                        updates[e]);
    }
}

template <typename T, typename Land, typename X, typename I>
static cudaError_t launch_scatter_as(cudaStream_t stream,
                                     const osp_scatter_args *args, T *data,
                                     const T *updates, int64_t n) {
    const X *idx = OSP_DEVICE_ARG(stream, (const X *)args->indices,
                                  (size_t)args->n_indices * sizeof(X));
    return OSP_LAUNCH((scatter_kernel<T, Land, X, I>), cuda_grid_for((size_t)n),
                      OSP_CUDA_BLOCK, 0, stream, args->reduction, data, idx,
                      updates, args->axis_len, (I)args->n_indices,
                      (I)args->inner, (I)n);
}

template <typename T, typename Land>
static cudaError_t launch_scatter(cudaStream_t stream,
                                  const osp_scatter_args *args) {
    int64_t n = args->outer * args->n_indices * args->inner;
    T *data = OSP_DEVICE_ARG(
        stream, (T *)args->data,
        (size_t)(args->outer * args->axis_len * args->inner) * sizeof(T));
    const T *updates =
        OSP_DEVICE_ARG(stream, (const T *)args->updates, (size_t)n * sizeof(T));
    bool small = (uint64_t)n <= OSP_ND_SMALL_COUNT;
    if (args->index_dtype == OSP_TYPE_INT32)
        return small ? launch_scatter_as<T, Land, int32_t, uint32_t>(
                           stream, args, data, updates, n)
                     : launch_scatter_as<T, Land, int32_t, int64_t>(
                           stream, args, data, updates, n);
    return small
               ? launch_scatter_as<T, Land, int64_t, uint32_t>(stream, args,
                                                               data, updates, n)
               : launch_scatter_as<T, Land, int64_t, int64_t>(stream, args,
                                                              data, updates, n);
}

extern "C" cudaError_t cuda_launch_scatter(cudaStream_t stream,
                                           const osp_scatter_args *args) {
    if (args->reduction != OSP_SCATTER_NONE) {
        switch (args->dtype) {
        case OSP_TYPE_FP32:
            return launch_scatter<float, scatter_atomic<float, unsigned int>>(
                stream, args);
        case OSP_TYPE_INT32:
            return launch_scatter<int32_t,
                                  scatter_atomic<uint32_t, unsigned int>>(
                stream, args);
        case OSP_TYPE_INT64:
            return launch_scatter<int64_t,
                                  scatter_atomic<uint64_t, unsigned long long>>(
                stream, args);
        default:
            return cudaErrorInvalidValue;
        }
    }
    /* NONE moves elements: by size. */
    switch (osp_datatype_byte_size(args->dtype)) {
    case 1:
        return launch_scatter<uint8_t, scatter_store>(stream, args);
    case 2:
        return launch_scatter<uint16_t, scatter_store>(stream, args);
    case 4:
        return launch_scatter<uint32_t, scatter_store>(stream, args);
    case 8:
        return launch_scatter<uint64_t, scatter_store>(stream, args);
    default:
        return cudaErrorInvalidValue;
    }
}
