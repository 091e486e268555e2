/*
 * How the kernels of cuda/ (.cu files) are launched: grid sizing, and the two
 * launch macros and the device-argument macro that let the same files run
 * on a GPU (nvcc) and, in tests, on the host through the fake CUDA runtime
 * (tests/fake_cuda/fake_kernel_runtime.h, OSP_CUDA_FAKE_KERNELS).
 *
 * Rules for kernel code, so that both builds mean the same thing:
 * - launch only through OSP_LAUNCH (kernels without barriers) or
 *   OSP_LAUNCH_BLOCK_SYNC (kernels that call __syncthreads());
 * - pass every device pointer a kernel dereferences through
 *   OSP_DEVICE_ARG with the bytes the kernel may touch;
 * - shapes and strides travel by value (structs of fixed-size arrays),
 *   never behind a pointer;
 * - block-wide cooperation through __shared__ memory and __syncthreads()
 *   only (no warp intrinsics), and every thread of a block reaches each
 *   barrier.
 */
#pragma once

#include <stddef.h>

#ifdef OSP_CUDA_FAKE_KERNELS
#include "fake_kernel_runtime.h"
#endif

enum { OSP_CUDA_BLOCK = 256 };

/* Blocks for a grid-stride loop over n elements: enough to fill any GPU,
 * few enough that every thread does some work on large inputs. */
static inline unsigned cuda_grid_for(size_t n) {
    size_t blocks = (n + OSP_CUDA_BLOCK - 1) / OSP_CUDA_BLOCK;
    const size_t max_blocks = 65535;
    if (blocks > max_blocks)
        blocks = max_blocks;
    return blocks == 0 ? 1u : (unsigned)blocks;
}

#ifdef OSP_CUDA_FAKE_KERNELS
/* The arguments are evaluated at the launch, as CUDA does (the body runs
 * later, on the stream's worker, when what they read may be gone), and
 * the kernel is called as written, so template arguments may be
 * deduced. */
#define OSP_LAUNCH_IMPL_(sync, kernel, grid, block, shmem, stream, ...)        \
    fake_kernel_launch(stream, #kernel, dim3(grid), dim3(block), shmem, sync,  \
                       [osp_launch_args_ = std::make_tuple(__VA_ARGS__)]() {   \
                           std::apply([](const auto &...a) { kernel(a...); },  \
                                      osp_launch_args_);                       \
                       })
#define OSP_DEVICE_ARG(stream, ptr, bytes)                                     \
    fake_kernel_arg(stream, #ptr, ptr, bytes)
#else
#define OSP_LAUNCH_IMPL_(sync, kernel, grid, block, shmem, stream, ...)        \
    ((kernel)<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__),            \
     cudaGetLastError())
#define OSP_DEVICE_ARG(stream, ptr, bytes) ((void)(bytes), (ptr))
#endif

/* Launches kernel(args...) on stream and returns the launch's
 * cudaError_t. shmem: dynamic shared memory bytes (OSP_DYNAMIC_SHARED). */
#define OSP_LAUNCH(kernel, grid, block, shmem, stream, ...)                    \
    OSP_LAUNCH_IMPL_(false, kernel, grid, block, shmem, stream, __VA_ARGS__)
#define OSP_LAUNCH_BLOCK_SYNC(kernel, grid, block, shmem, stream, ...)         \
    OSP_LAUNCH_IMPL_(true, kernel, grid, block, shmem, stream, __VA_ARGS__)

/* Declares `type *name`, the block's dynamic shared memory. */
#ifdef OSP_CUDA_FAKE_KERNELS
#define OSP_DYNAMIC_SHARED(type, name)                                         \
    type *name = (type *)fake_kernel_dynamic_shared()
#else
#define OSP_DYNAMIC_SHARED(type, name)                                         \
    extern __shared__ unsigned char osp_dynamic_shared_[];                    \
    type *name = (type *)osp_dynamic_shared_
#endif
