/*
 * The data-movement kernels: copy_strided (Transpose, Slice, Expand,
 * Concat, Split in the ONNX runtime), fill and pad. They move bytes and
 * never look at values, so each works on element sizes.
 *
 * copy_strided, after the N-d map of kernels_nd.cuh has merged what can
 * be merged:
 * - when both sides are contiguous along the innermost dimension, rows
 *   are copied as the widest words (up to 8 bytes) that the row length,
 *   the strides and the pointers allow, one thread per word, so a slice
 *   or concat of floats moves 8 bytes per thread with coalesced accesses
 *   on both sides;
 * - a transpose (src contiguous along another dimension than dst) goes
 *   through 32 x 32 tiles in shared memory, so that reads and writes both
 *   coalesce;
 * - anything else is one thread per element.
 */
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "kernels_launch.cuh"
#include "kernels_nd.cuh"
#include "pad_rules.h"

/* A 16-byte element (8-byte aligned: two 8-byte moves). */
struct elem16 {
    uint64_t lo, hi;
};

/* ---- copy_strided ------------------------------------------------------ */

template <typename E, typename I>
__global__ void copy_strided_kernel(nd_map<2> m, const E *src, E *dst, I n) {
    OSP_GRID_STRIDE(I, i, n) {
        int64_t off[2];
        nd_offsets(m, i, off);
        dst[off[1]] = src[off[0]];
    }
}

enum { TILE = 32, TILE_ROWS = 8 };

/* The transposing copy: each plane (the dimensions of `planes`) is an
 * [n_p, n_i] box that src reads contiguously along p and dst writes
 * contiguously along i. A block of TILE x TILE_ROWS threads moves one
 * TILE x TILE tile at a time: reads along p into shared memory, writes
 * along i out of it (the extra column keeps the column reads free of bank
 * conflicts). */
template <typename E>
__global__ void transpose_kernel(nd_map<2> planes, int64_t n_p, int64_t n_i,
                                 int64_t src_i, int64_t dst_p, int64_t tiles_p,
                                 int64_t tiles_i, int64_t n_tiles, const E *src,
                                 E *dst) {
    __shared__ E tile[TILE][TILE + 1];
    for (int64_t t = blockIdx.x; t < n_tiles; t += gridDim.x) {
        int64_t ti = t % tiles_i, tp = t / tiles_i % tiles_p,
                plane = t / tiles_i / tiles_p;
        int64_t off[2];
        nd_offsets(planes, plane, off);
        int64_t p = tp * TILE + threadIdx.x;
        for (int r = threadIdx.y; r < TILE; r += TILE_ROWS) {
            int64_t i = ti * TILE + r;
            if (p < n_p && i < n_i)
                tile[r][threadIdx.x] = src[off[0] + i * src_i + p];
        }
        __syncthreads();
        int64_t i = ti * TILE + threadIdx.x;
        for (int r = threadIdx.y; r < TILE; r += TILE_ROWS) {
            int64_t pp = tp * TILE + r;
            if (pp < n_p && i < n_i)
                dst[off[1] + pp * dst_p + i] = tile[threadIdx.x][r];
        }
        __syncthreads(); /* the tile is refilled for the next t */
    }
}

/* The transposing copy of m, or false when m is not one: dst contiguous
 * along the innermost dimension, src along another one, p, both at least
 * 8 long (below that the element kernel does as well). */
template <typename E>
static bool launch_transpose(cudaStream_t stream, const nd_map<2> &m,
                             const E *src, E *dst, cudaError_t *status) {
    int inner = m.rank - 1, p = -1;
    if (m.rank < 2 || m.strides[1][inner] != 1 || m.strides[0][inner] == 1)
        return false;
    for (int d = 0; d < inner; d++)
        if (m.strides[0][d] == 1)
            p = d;
    if (p < 0 || m.dims[inner] < 8 || m.dims[p] < 8)
        return false;
    nd_map<2> planes;
    planes.rank = 0;
    for (int d = 0; d < inner; d++) {
        if (d == p)
            continue;
        planes.dims[planes.rank] = m.dims[d];
        planes.strides[0][planes.rank] = m.strides[0][d];
        planes.strides[1][planes.rank] = m.strides[1][d];
        planes.rank++;
    }
    if (planes.rank == 0) {
        planes.dims[0] = 1;
        planes.strides[0][0] = planes.strides[1][0] = 0;
        planes.rank = 1;
    }
    int64_t n_p = m.dims[p], n_i = m.dims[inner];
    int64_t tiles_p = (n_p + TILE - 1) / TILE,
            tiles_i = (n_i + TILE - 1) / TILE;
    int64_t n_tiles = (int64_t)nd_count(planes) * tiles_p * tiles_i;
    unsigned grid = n_tiles > 65535 ? 65535u : (unsigned)n_tiles;
    *status = OSP_LAUNCH_BLOCK_SYNC(
        transpose_kernel<E>, grid, dim3(TILE, TILE_ROWS), 0, stream, planes,
        n_p, n_i, m.strides[0][inner], m.strides[1][p], tiles_p, tiles_i,
        n_tiles, src, dst);
    return true;
}

template <typename E>
static cudaError_t launch_copy(cudaStream_t stream, const nd_map<2> &m,
                               const void *src_ptr, void *dst_ptr) {
    const E *src = nd_device_arg(stream, m, 0, (const E *)src_ptr, sizeof(E));
    E *dst = nd_device_arg(stream, m, 1, (E *)dst_ptr, sizeof(E));
    cudaError_t status;
    if (launch_transpose<E>(stream, m, src, dst, &status))
        return status;
    uint64_t n = nd_count(m);
    unsigned grid = cuda_grid_for((size_t)n);
    if (n <= OSP_ND_SMALL_COUNT)
        return OSP_LAUNCH((copy_strided_kernel<E, uint32_t>), grid,
                          OSP_CUDA_BLOCK, 0, stream, m, src, dst, (uint32_t)n);
    return OSP_LAUNCH((copy_strided_kernel<E, int64_t>), grid, OSP_CUDA_BLOCK,
                      0, stream, m, src, dst, (int64_t)n);
}

/* Rewrites m (elements of *es bytes, both sides contiguous along the
 * innermost dimension) to words of the widest size up to 8 bytes that the
 * innermost length, every other stride and both pointers allow. */
static void widen(nd_map<2> *m, size_t *es, const void *src, const void *dst) {
    int inner = m->rank - 1;
    if (m->strides[0][inner] != 1 || m->strides[1][inner] != 1)
        return;
    for (int64_t w = 8; w > (int64_t)*es; w /= 2) {
        bool ok = (m->dims[inner] * (int64_t)*es) % w == 0 &&
                  (uintptr_t)src % (uintptr_t)w == 0 &&
                  (uintptr_t)dst % (uintptr_t)w == 0;
        for (int d = 0; d < inner && ok; d++)
            ok = (m->strides[0][d] * (int64_t)*es) % w == 0 &&
                 (m->strides[1][d] * (int64_t)*es) % w == 0;
        if (!ok)
            continue;
        int64_t ratio = w / (int64_t)*es;
        m->dims[inner] /= ratio;
        for (int d = 0; d < inner; d++) {
            m->strides[0][d] /= ratio;
            m->strides[1][d] /= ratio;
        }
        *es = (size_t)w;
        return;
    }
}

extern "C" cudaError_t
cuda_launch_copy_strided(cudaStream_t stream,
                         const osp_copy_strided_args *args) {
    const int64_t *strides[2] = {args->src_strides, args->dst_strides};
    nd_map<2> m = nd_map_make<2>(args->rank, args->dims, strides);
    size_t es = args->elem_size;
    widen(&m, &es, args->src, args->dst);
    switch (es) {
    case 1:
        return launch_copy<uint8_t>(stream, m, args->src, args->dst);
    case 2:
        return launch_copy<uint16_t>(stream, m, args->src, args->dst);
    case 4:
        return launch_copy<uint32_t>(stream, m, args->src, args->dst);
    case 8:
        return launch_copy<uint64_t>(stream, m, args->src, args->dst);
    case 16:
        return launch_copy<elem16>(stream, m, args->src, args->dst);
    default:
        return cudaErrorInvalidValue;
    }
}

/* ---- fill -------------------------------------------------------------- */

template <typename E> __global__ void fill_kernel(E *dst, size_t n, E value) {
    OSP_GRID_STRIDE(size_t, i, n) {
        dst[i] = value;
    }
}

template <typename E>
static cudaError_t launch_fill(cudaStream_t stream, void *dst_ptr, size_t n,
                               const uint8_t *value) {
    E v;
    memcpy(&v, value, sizeof v);
    E *dst = OSP_DEVICE_ARG(stream, (E *)dst_ptr, n * sizeof(E));
    return OSP_LAUNCH(fill_kernel<E>, cuda_grid_for(n), OSP_CUDA_BLOCK, 0,
                      stream, dst, n, v);
}

extern "C" cudaError_t cuda_launch_fill(cudaStream_t stream,
                                        const osp_fill_args *args) {
    switch (args->elem_size) {
    case 1:
        return launch_fill<uint8_t>(stream, args->dst, args->n, args->value);
    case 2:
        return launch_fill<uint16_t>(stream, args->dst, args->n, args->value);
    case 4:
        return launch_fill<uint32_t>(stream, args->dst, args->n, args->value);
    case 8:
        return launch_fill<uint64_t>(stream, args->dst, args->n, args->value);
    default:
        return cudaErrorInvalidValue;
    }
}

/* ---- pad --------------------------------------------------------------- */

/* A pad's shape, by value: per dimension where output positions read
 * (pad_rules.h) and the input's contiguous strides. */
struct pad_geometry {
    osp_pad_mode mode;
    int rank;
    pad_dim dims[OSP_MAX_DIMS];
    int64_t in_strides[OSP_MAX_DIMS];
};

/* One thread per output element: its input element, or the value. */
template <typename E, typename I>
__global__ void pad_kernel(pad_geometry g, const E *x, E *y, I n, E value) {
    OSP_GRID_STRIDE(I, i, n) {
        I rest = i;
        int64_t src = 0;
        bool constant = false;
        for (int d = g.rank - 1; d >= 0; d--) {
            I out = (I)g.dims[d].out;
            I q = rest / out;
            int64_t o = (int64_t)(rest - q * out);
            rest = q;
            int64_t from = pad_source(g.mode, &g.dims[d], o - g.dims[d].before);
            constant = constant || from < 0;
            src += from * g.in_strides[d];
        }
        y[i] = constant ? value : x[src];
    }
}

template <typename E>
static cudaError_t launch_pad(cudaStream_t stream, const osp_pad_args *args) {
    pad_geometry g;
    g.mode = args->mode;
    g.rank = args->rank;
    nd_contiguous(args->rank, args->in_dims, g.in_strides);
    uint64_t in_n = 1, out_n = 1;
    for (int d = 0; d < args->rank; d++) {
        g.dims[d] = pad_dim_of(args, d);
        in_n *= (uint64_t)args->in_dims[d];
        out_n *= (uint64_t)g.dims[d].out;
    }
    E value;
    memcpy(&value, args->value, sizeof value);
    const E *x =
        OSP_DEVICE_ARG(stream, (const E *)args->x, (size_t)in_n * sizeof(E));
    E *y = OSP_DEVICE_ARG(stream, (E *)args->y, (size_t)out_n * sizeof(E));
    unsigned grid = cuda_grid_for((size_t)out_n);
    if (out_n <= OSP_ND_SMALL_COUNT)
        return OSP_LAUNCH((pad_kernel<E, uint32_t>), grid, OSP_CUDA_BLOCK, 0,
                          stream, g, x, y, (uint32_t)out_n, value);
    return OSP_LAUNCH((pad_kernel<E, int64_t>), grid, OSP_CUDA_BLOCK, 0, stream,
                      g, x, y, (int64_t)out_n, value);
}

extern "C" cudaError_t cuda_launch_pad(cudaStream_t stream,
                                       const osp_pad_args *args) {
    switch (args->elem_size) {
    case 1:
        return launch_pad<uint8_t>(stream, args);
    case 2:
        return launch_pad<uint16_t>(stream, args);
    case 4:
        return launch_pad<uint32_t>(stream, args);
    case 8:
        return launch_pad<uint64_t>(stream, args);
    default:
        return cudaErrorInvalidValue;
    }
}
