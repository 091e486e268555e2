/*
 * Block-wide reductions through shared memory, for kernels launched with
 * OSP_LAUNCH_BLOCK_SYNC and OSP_CUDA_BLOCK threads (a power of two). Every
 * thread of the block calls each one (they hold barriers) and gets the
 * result. No warp intrinsics (kernels_launch.cuh's rules).
 */
#pragma once

#include "kernels_launch.cuh"
#include "unary_rules.h"

/* Combines v over the block with combine(a, b) (associative). T is a
 * plain type or a struct of plain members. */
template <typename T, typename Combine>
__device__ T block_combine(T v, Combine combine) {
    __shared__ T block_buf[OSP_CUDA_BLOCK];
    unsigned tid = threadIdx.x;
    block_buf[tid] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            block_buf[tid] = combine(block_buf[tid], block_buf[tid + s]);
        __syncthreads();
    }
    T result = block_buf[0];
    __syncthreads(); /* the buffer is reused by the next call */
    return result;
}

struct reduce_combine_add {
    template <typename T> __device__ T operator()(T a, T b) const {
        return a + b;
    }
};

/* NaN-propagating max and min (numpy's, the CPU device's): once a NaN is
 * taken it stays. */
struct reduce_combine_max_nan {
    __device__ float operator()(float m, float x) const {
        return (x > m || x != x) ? x : m;
    }
};

struct reduce_combine_min_nan {
    __device__ float operator()(float m, float x) const {
        return (x < m || x != x) ? x : m;
    }
};

/* e^d for d <= 0 (a value minus the max of its line), 0 below FLT_MIN,
 * as the CPU device's reductions compute it (cpu_ops_reduce.c). */
static __device__ float softmax_exp_shifted(float d) {
    bool tiny = d < -87.0f;
    return unary_select_f32(tiny, 0.0f,
                            unary_expf(unary_select_f32(tiny, -87.0f, d)));
}
