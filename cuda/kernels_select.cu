/*
 * Selection and scans: topk and cumsum over x viewed as [outer, n, inner]
 * (osprey/tensor_ops.h), each matching the CPU device's result exactly.
 *
 * topk ranks instead of sorting: the CPU's order is a strict total order
 * (larger, or smaller, values first, NaN the largest of all, equal values
 * by index), so an element's place in the sorted line is the number of
 * elements that come before it. One thread per element counts them,
 * stopping once it has found k, and when the place is below k writes the
 * element there. The k kept elements scan the whole line and the others
 * stop early: about k n ln(n / k) comparisons per line in random order,
 * n^2 at worst (k near n), all independent (the line is read through the
 * cache; threads of a warp read the same element or neighbouring ones).
 * The result is always sorted, as on the CPU.
 *
 * cumsum adds each line (o, i) in the axis order in one thread, as the
 * CPU does, so float sums round the same: consecutive threads take
 * consecutive i when inner > 1, so the reads coalesce; contiguous lines
 * (inner == 1) go through shared-memory tiles so that they coalesce too.
 */
#include <stdint.h>

#include "kernels.h"
#include "kernels_launch.cuh"
#include "kernels_nd.cuh"

/* ---- topk -------------------------------------------------------------- */

/* a > b in the order that puts NaN above everything (the CPU's
 * greater_f32). */
__device__ __forceinline__ bool topk_greater(float a, float b) {
    return a > b || (a != a && b == b);
}

__device__ __forceinline__ bool topk_greater(int64_t a, int64_t b) {
    return a > b;
}

/* Whether (va, ia) is listed before (vb, ib). */
template <typename T>
__device__ __forceinline__ bool topk_before(T va, int64_t ia, T vb, int64_t ib,
                                            bool largest) {
    if (topk_greater(va, vb))
        return largest;
    if (topk_greater(vb, va))
        return !largest;
    return ia < ib;
}

template <typename T>
__global__ void topk_kernel(const T *x, T *values, int64_t *indices, int64_t n,
                            int64_t inner, int64_t k, bool largest,
                            int64_t count) {
    OSP_GRID_STRIDE(int64_t, e, count) {
        int64_t i = e % inner, j = e / inner % n, o = e / inner / n;
        const T *line = x + o * n * inner + i;
        T v = line[j * inner];
        int64_t place = 0;
        for (int64_t t = 0; t < n && place < k; t++)
            place += topk_before(line[t * inner], t, v, j, largest);
        if (place < k) {
            int64_t at = (o * k + place) * inner + i;
            values[at] = v;
            indices[at] = j;
        }
    }
}

template <typename T>
static cudaError_t launch_topk(cudaStream_t stream, const osp_topk_args *args) {
    int64_t count = args->outer * args->n * args->inner;
    size_t out_n = (size_t)(args->outer * args->k * args->inner);
    const T *x =
        OSP_DEVICE_ARG(stream, (const T *)args->x, (size_t)count * sizeof(T));
    T *values = OSP_DEVICE_ARG(stream, (T *)args->values, out_n * sizeof(T));
    int64_t *indices =
        OSP_DEVICE_ARG(stream, args->indices, out_n * sizeof(int64_t));
    return OSP_LAUNCH(topk_kernel<T>, cuda_grid_for((size_t)count),
                      OSP_CUDA_BLOCK, 0, stream, x, values, indices, args->n,
                      args->inner, args->k, args->largest, count);
}

extern "C" cudaError_t cuda_launch_topk(cudaStream_t stream,
                                        const osp_topk_args *args) {
    switch (args->dtype) {
    case OSP_TYPE_FP32:
        return launch_topk<float>(stream, args);
    case OSP_TYPE_INT64:
        return launch_topk<int64_t>(stream, args);
    default:
        return cudaErrorInvalidValue;
    }
}

/* ---- cumsum ------------------------------------------------------------ */

/* One thread per line: sums in U (unsigned for integers, so that they
 * wrap), exclusive and/or reversed as ONNX CumSum. */
template <typename T, typename U>
__global__ void cumsum_kernel(const T *x, T *y, int64_t n, int64_t inner,
                              bool exclusive, bool reverse, int64_t lines) {
    OSP_GRID_STRIDE(int64_t, line, lines) {
        int64_t i = line % inner, o = line / inner;
        int64_t base = o * n * inner + i;
        U acc = 0;
        for (int64_t t = 0; t < n; t++) {
            int64_t at = base + (reverse ? n - 1 - t : t) * inner;
            U v = (U)x[at];
            if (exclusive) {
                y[at] = (T)acc;
                acc += v;
            } else {
                acc += v;
                y[at] = (T)acc;
            }
        }
    }
}

enum { SCAN_TILE = 32, SCAN_ROWS = 8 };

/* The same sums for contiguous lines (inner == 1), whose elements one
 * thread per line would read SCAN_TILE lines apart: a block of
 * SCAN_TILE x SCAN_ROWS threads takes SCAN_TILE lines and walks them
 * SCAN_TILE positions at a time, loading the tile coalesced (along the
 * lines) into shared memory, where one thread per line adds its
 * positions in order, then storing it coalesced. */
template <typename T, typename U>
__global__ void cumsum_lines_kernel(const T *x, T *y, int64_t lines, int64_t n,
                                    bool exclusive, bool reverse) {
    __shared__ T tile[SCAN_TILE][SCAN_TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t groups = (lines + SCAN_TILE - 1) / SCAN_TILE;
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        int64_t first = g * SCAN_TILE;
        U acc = 0; /* line first + tx's sum, in the threads of row 0 */
        for (int64_t p0 = 0; p0 < n; p0 += SCAN_TILE) {
            /* Position p of a line is element p, or n - 1 - p reversed. */
            int64_t p = p0 + tx, at = reverse ? n - 1 - p : p;
            for (int r = ty; r < SCAN_TILE; r += SCAN_ROWS)
                if (first + r < lines && p < n)
                    tile[r][tx] = x[(first + r) * n + at];
            __syncthreads();
            if (ty == 0 && first + tx < lines) {
                int steps = n - p0 < SCAN_TILE ? (int)(n - p0) : SCAN_TILE;
                for (int k = 0; k < steps; k++) {
                    U v = (U)tile[tx][k];
                    if (exclusive) {
                        tile[tx][k] = (T)acc;
                        acc += v;
                    } else {
                        acc += v;
                        tile[tx][k] = (T)acc;
                    }
                }
            }
            __syncthreads();
            for (int r = ty; r < SCAN_TILE; r += SCAN_ROWS)
                if (first + r < lines && p < n)
                    y[(first + r) * n + at] = tile[r][tx];
            __syncthreads(); /* the tile is refilled next */
        }
    }
}

template <typename T, typename U>
static cudaError_t launch_cumsum(cudaStream_t stream,
                                 const osp_cumsum_args *args) {
    int64_t lines = args->outer * args->inner;
    size_t bytes = (size_t)(lines * args->n) * sizeof(T);
    const T *x = OSP_DEVICE_ARG(stream, (const T *)args->x, bytes);
    T *y = OSP_DEVICE_ARG(stream, (T *)args->y, bytes);
    if (args->inner == 1) {
        int64_t groups = (lines + SCAN_TILE - 1) / SCAN_TILE;
        return OSP_LAUNCH_BLOCK_SYNC((cumsum_lines_kernel<T, U>),
                                     groups > 65535 ? 65535u : (unsigned)groups,
                                     dim3(SCAN_TILE, SCAN_ROWS), 0, stream, x,
                                     y, lines, args->n, args->exclusive,
                                     args->reverse);
    }
    return OSP_LAUNCH((cumsum_kernel<T, U>), cuda_grid_for((size_t)lines),
                      OSP_CUDA_BLOCK, 0, stream, x, y, args->n, args->inner,
                      args->exclusive, args->reverse, lines);
}

extern "C" cudaError_t cuda_launch_cumsum(cudaStream_t stream,
                                          const osp_cumsum_args *args) {
    switch (args->dtype) {
    case OSP_TYPE_FP32:
        return launch_cumsum<float, float>(stream, args);
    case OSP_TYPE_INT32:
        return launch_cumsum<int32_t, uint32_t>(stream, args);
    case OSP_TYPE_INT64:
        return launch_cumsum<int64_t, uint64_t>(stream, args);
    default:
        return cudaErrorInvalidValue;
    }
}
