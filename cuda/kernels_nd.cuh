/*
 * N-d addressing for the strided kernels (binary_nd, where, copy_strided,
 * pad): a box of dims read or written by K operands, each through its own
 * strides. The host simplifies the box once per launch (nd_map_make, the
 * rules of the CPU device's cpu_nd_init: size-1 dimensions dropped, a
 * dimension merged into the one inside it wherever every operand steps
 * over both as one), and the map travels to the kernel by value; each
 * thread turns its flat (row-major) index into every operand's element
 * offset with nd_offsets. Same-shape and scalar-broadcast operands become
 * rank 1, where that costs no division.
 */
#pragma once

#include <stdint.h>

#include "kernels_launch.cuh"
#include "osprey/tensor.h"

/* I: the index type of the kernels' element loops, uint32_t when the
 * element count fits (32-bit division is several times cheaper on a GPU)
 * else int64_t; the headroom keeps a grid-stride step from wrapping. */
#define OSP_ND_SMALL_COUNT ((uint64_t)INT32_MAX)

template <int K> struct nd_map {
    int rank; /* >= 1 */
    int64_t dims[OSP_MAX_DIMS];
    int64_t strides[K][OSP_MAX_DIMS];
};

/* Row-major contiguous strides of dims. */
static inline void nd_contiguous(int rank, const int64_t *dims,
                                 int64_t *strides) {
    int64_t step = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = step;
        step *= dims[d];
    }
}

/* The simplified map of the box dims (rank 0 to OSP_MAX_DIMS, no
 * dimension 0) as K operands see it through strides[k] (borrowed). A
 * scalar becomes rank 1 [1]. */
template <int K>
static inline nd_map<K> nd_map_make(int rank, const int64_t *dims,
                                    const int64_t *const *strides) {
    nd_map<K> m;
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1)
            continue;
        bool merge = r > 0;
        for (int k = 0; k < K && merge; k++)
            merge = m.strides[k][r - 1] == strides[k][d] * dims[d];
        if (merge) {
            m.dims[r - 1] *= dims[d];
            for (int k = 0; k < K; k++)
                m.strides[k][r - 1] = strides[k][d];
        } else {
            m.dims[r] = dims[d];
            for (int k = 0; k < K; k++)
                m.strides[k][r] = strides[k][d];
            r++;
        }
    }
    if (r == 0) {
        m.dims[0] = 1;
        for (int k = 0; k < K; k++)
            m.strides[k][0] = 0;
        r = 1;
    }
    m.rank = r;
    return m;
}

/* The number of elements of the box m. */
template <int K> static inline uint64_t nd_count(const nd_map<K> &m) {
    uint64_t n = 1;
    for (int d = 0; d < m.rank; d++)
        n *= (uint64_t)m.dims[d];
    return n;
}

/* The device view (OSP_DEVICE_ARG) of operand k of m at ptr, elements of
 * es bytes: the range its strides reach, which starts before ptr where a
 * stride is negative. */
template <int K, typename T>
static inline T *nd_device_arg(cudaStream_t stream, const nd_map<K> &m, int k,
                               T *ptr, size_t es) {
    (void)stream; /* unused by nvcc's OSP_DEVICE_ARG */
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < m.rank; d++) {
        int64_t reach = m.strides[k][d] * (m.dims[d] - 1);
        if (reach < 0)
            lo += reach;
        else
            hi += reach;
    }
    int64_t lo_bytes = lo * (int64_t)es;
    char *first = (char *)ptr + lo_bytes;
    char *view =
        (char *)OSP_DEVICE_ARG(stream, first, (size_t)(hi - lo + 1) * es);
    return view == NULL ? NULL : (T *)(view - lo_bytes);
}

/* off[k] = operand k's element offset of the box's flat index i. */
template <int K, typename I>
__device__ __forceinline__ void nd_offsets(const nd_map<K> &m, I i,
                                           int64_t *off) {
    for (int k = 0; k < K; k++)
        off[k] = 0;
    for (int d = m.rank - 1; d > 0; d--) {
        I dim = (I)m.dims[d];
        I q = i / dim;
        int64_t r = (int64_t)(i - q * dim);
        for (int k = 0; k < K; k++)
            off[k] += r * m.strides[k][d];
        i = q;
    }
    for (int k = 0; k < K; k++)
        off[k] += (int64_t)i * m.strides[k][0];
}

/* The grid-stride loop of the element kernels: for (I i ...; i < n; ...). */
#define OSP_GRID_STRIDE(I, i, n)                                               \
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < (n);        \
         i += (I)gridDim.x * (I)blockDim.x)
