/*
 * Where each output position of osp_op_pad (osprey/tensor_ops.h) reads,
 * shared by the CPU device (the reference, cpu_ops_data.c) and the CUDA
 * kernels (cuda/kernels_movement.cu) so that both follow one definition.
 * Compiles as C and as CUDA (host + device).
 */
#pragma once

#include <stdint.h>

#include "osprey/tensor_ops.h"

#ifdef __CUDACC__
#define OSP_PAD_FN static __host__ __device__ inline
#else
#define OSP_PAD_FN static inline
#endif

/* One dimension of a pad: the input kept after cropping is
 * x[lo .. lo + kept), and output position o reads kept position o - before
 * (mapped by the mode where it falls outside); `out` is the output size. */
typedef struct pad_dim {
    int64_t lo, kept, before, out;
} pad_dim;

/* Dimension d of a pad whose arguments the dispatcher checked. */
OSP_PAD_FN pad_dim pad_dim_of(const osp_pad_args *args, int d) {
    int64_t b = args->pad_begin[d], e = args->pad_end[d];
    pad_dim pd;
    pd.lo = b < 0 ? -b : 0;
    pd.kept = args->in_dims[d] - pd.lo - (e < 0 ? -e : 0);
    pd.before = b > 0 ? b : 0;
    pd.out = pd.kept + pd.before + (e > 0 ? e : 0);
    return pd;
}

/* Where output position j (relative to the kept input, so j < 0 or
 * j >= kept is padding) reads, as an input position; -1 for the CONSTANT
 * value. The dispatcher saw to kept > 0 wherever a non-constant mode pads,
 * and to reflect pads < kept. */
OSP_PAD_FN int64_t pad_source(osp_pad_mode mode, const pad_dim *pd, int64_t j) {
    int64_t k = pd->kept;
    if (j >= 0 && j < k)
        return pd->lo + j;
    switch (mode) {
    case OSP_PAD_EDGE:
        return pd->lo + (j < 0 ? 0 : k - 1);
    case OSP_PAD_WRAP:
        return pd->lo + ((j % k) + k) % k;
    case OSP_PAD_REFLECT:
        return pd->lo + (j < 0 ? -j : 2 * (k - 1) - j);
    default:
        return -1;
    }
}
