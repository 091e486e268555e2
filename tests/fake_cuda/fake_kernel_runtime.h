/*
 * The CUDA kernel language on the host, so that the fake CUDA runtime runs
 * the kernels of cuda/ (.cu files) themselves: their math, their indexing, their
 * grid-stride loops and their block-wide barriers, on the CPU.
 *
 * tests/fake_cuda/CMakeLists.txt compiles each kernel file of cuda/ with the host C++
 * compiler, this header first and OSP_CUDA_FAKE_KERNELS defined, and the
 * file's own code inside a namespace of its own (so two files' __device__
 * helpers of the same name stay apart, as they do under nvcc).
 * cuda/kernels_launch.cuh then turns each launch into fake_kernel_launch and
 * each device pointer a launcher hands to a kernel into its writable view
 * (fake_kernel_arg), checked as the GPU would fault: inside one allocation
 * of the stream's GPU.
 *
 * A launch runs on the stream's worker thread, in stream order: every block
 * in turn, and in each block every thread in turn. Kernels launched with
 * block_sync (OSP_LAUNCH_BLOCK_SYNC) run each thread of a block as a fiber
 * that __syncthreads() suspends until every thread of the block has reached
 * it; a thread that returns while others wait at a barrier is reported (on
 * a GPU that is undefined behaviour). __shared__ variables are thread-local
 * statics: the blocks of a launch run one after another on one thread, so
 * each block sees them as its own, though holding the previous block's
 * values where a GPU has garbage (dynamic shared memory is poisoned
 * instead, see fake_kernel_dynamic_shared).
 *
 * What the host cannot show: races between the threads of a block (they
 * never run at the same time here), warp-level behaviour (kernels use
 * shared memory and __syncthreads, never warp intrinsics) and performance.
 * tests/gpu/check.sh runs the same kernels on a real GPU.
 */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <math.h>
#include <stdint.h>

/* The kernel language's qualifiers, as host C++. */
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __restrict__
#define __global__ inline
#define __device__ inline
#define __host__
#define __forceinline__
#define __restrict__ __restrict
#define __shared__ static thread_local

/* Where the current CUDA thread is: threadIdx and friends read it. */
struct fake_kernel_thread {
    uint3 thread_idx, block_idx;
    dim3 block_dim, grid_dim;
};

/* The thread running on the calling OS thread (or fiber) now. */
const fake_kernel_thread *fake_kernel_current(void);

#define threadIdx (fake_kernel_current()->thread_idx)
#define blockIdx (fake_kernel_current()->block_idx)
#define blockDim (fake_kernel_current()->block_dim)
#define gridDim (fake_kernel_current()->grid_dim)

/* Suspends the calling CUDA thread until every thread of its block has
 * called it (the launch must be block_sync). */
void __syncthreads(void);

/* The dynamic shared memory of the current block (the launch's shmem
 * bytes). Uninitialised on a GPU, so here filled with 0xff bytes (NaN
 * floats, -1 integers) at the start of each block. */
void *fake_kernel_dynamic_shared(void);

/* Queues body(), run once per CUDA thread of grid x block, on stream, after
 * fake_check_launch. Fails (cudaErrorInvalidValue, nothing queued) when a
 * fake_kernel_arg of this launch failed, and as CUDA fails a launch whose
 * configuration is invalid (an empty grid or block, more than 1024
 * threads per block). */
cudaError_t fake_kernel_launch(cudaStream_t stream, const char *kernel,
                               dim3 grid, dim3 block, size_t shmem,
                               bool block_sync, std::function<void()> body);

/* The writable view of the device range [ptr, ptr + bytes) for a kernel
 * on stream; NULL for bytes == 0 ranges is returned as given. When the
 * range is not device memory of the stream's GPU it says so on stderr,
 * returns NULL and makes the calling thread's next fake_kernel_launch
 * fail. */
void *fake_kernel_arg_view(cudaStream_t stream, const char *what,
                           const void *ptr, size_t bytes);

template <typename T>
static inline T *fake_kernel_arg(cudaStream_t stream, const char *what, T *ptr,
                                 size_t bytes) {
    return (T *)fake_kernel_arg_view(stream, what, (const void *)ptr, bytes);
}

/* Device functions the host's libm does not have. */
static inline float rsqrtf(float x) {
    return 1.0f / sqrtf(x);
}
template <typename T> static inline T __ldg(const T *p) {
    return *p;
}
/* The threads of a launch run one at a time: plain read-modify-write. */
static inline float atomicAdd(float *p, float v) {
    float old = *p;
    *p = old + v;
    return old;
}
static inline int atomicAdd(int *p, int v) {
    int old = *p;
    *p = old + v;
    return old;
}
static inline unsigned long long atomicAdd(unsigned long long *p,
                                           unsigned long long v) {
    unsigned long long old = *p;
    *p = old + v;
    return old;
}
static inline unsigned int atomicCAS(unsigned int *p, unsigned int compare,
                                     unsigned int v) {
    unsigned int old = *p;
    if (old == compare)
        *p = v;
    return old;
}
static inline unsigned long long atomicCAS(unsigned long long *p,
                                           unsigned long long compare,
                                           unsigned long long v) {
    unsigned long long old = *p;
    if (old == compare)
        *p = v;
    return old;
}
