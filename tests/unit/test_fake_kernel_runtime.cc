// The fake CUDA runtime's kernel execution (tests/fake_cuda/
// fake_kernel_runtime.h): the kernels below are CUDA code, compiled here
// for the host as the kernel files of cuda/ are in the fake build, and
// launched through cuda/kernels_launch.cuh's macros. They check what the
// CUDA device's kernel tests rely on: every thread of a 3-D grid runs once
// with its own indices, __syncthreads() orders a block, shared memory is
// per block, device pointers are checked, and what CUDA refuses or leaves
// undefined is reported.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#define OSP_CUDA_FAKE_KERNELS 1
#include "kernels_launch.cuh"

namespace {

// ---- kernels ---------------------------------------------------------------

__global__ void write_linear_ids(unsigned *out) {
    unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x +
                     blockIdx.x;
    unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x +
                      threadIdx.x;
    out[block * threads + thread] += block * threads + thread + 1;
}

// Reverses each block's slice through shared memory: wrong without the
// barrier, since thread t reads what thread n-1-t wrote.
__global__ void reverse_blocks(const int *in, int *out) {
    __shared__ int tile[64];
    unsigned base = blockIdx.x * blockDim.x;
    tile[threadIdx.x] = in[base + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

// Sums each block's slice in dynamic shared memory; acc[1] shows what a
// block finds there before writing (poison: uninitialised on a GPU).
__global__ void block_sums(const int *in, int *sums) {
    OSP_DYNAMIC_SHARED(int, acc);
    if (threadIdx.x == 0) {
        sums[gridDim.x + blockIdx.x] = acc[1];
        acc[0] = 0;
    }
    __syncthreads();
    atomicAdd(&acc[0], in[blockIdx.x * blockDim.x + threadIdx.x]);
    __syncthreads();
    if (threadIdx.x == 0)
        sums[blockIdx.x] = acc[0];
}

__global__ void divergent_barrier(int *out) {
    if (threadIdx.x == 0)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void barrier_without_sync_launch(int *out) {
    __syncthreads();
    out[threadIdx.x] = 1;
}

// ---- harness ---------------------------------------------------------------

class FakeKernelRuntime : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
        ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    }
    void TearDown() override {
        for (void *p : allocations_)
            cudaFree(p);
        cudaStreamDestroy(stream_);
    }

    template <typename T> T *Upload(const std::vector<T> &host) {
        void *p = nullptr;
        EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
        allocations_.push_back(p);
        EXPECT_EQ(cudaMemcpyAsync(p, host.data(), host.size() * sizeof(T),
                                  cudaMemcpyHostToDevice, stream_),
                  cudaSuccess);
        return static_cast<T *>(p);
    }

    template <typename T> std::vector<T> Download(const T *dev, size_t n) {
        std::vector<T> host(n);
        EXPECT_EQ(cudaMemcpyAsync(host.data(), dev, n * sizeof(T),
                                  cudaMemcpyDeviceToHost, stream_),
                  cudaSuccess);
        EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        return host;
    }

    cudaStream_t stream_ = nullptr;
    std::vector<void *> allocations_;
};

TEST_F(FakeKernelRuntime, EveryThreadOfA3DGridRunsOnceWithItsIndices) {
    const dim3 grid(3, 2, 2), block(4, 3, 2);
    const size_t n = 12 * 24;
    unsigned *out = Upload(std::vector<unsigned>(n, 0));
    unsigned *view = OSP_DEVICE_ARG(stream_, out, n * sizeof(unsigned));
    ASSERT_EQ(OSP_LAUNCH(write_linear_ids, grid, block, 0, stream_, view),
              cudaSuccess);
    std::vector<unsigned> got = Download(out, n);
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(got[i], i + 1) << "element " << i;
}

TEST_F(FakeKernelRuntime, SyncthreadsOrdersTheBlock) {
    std::vector<int> in(4 * 64);
    std::iota(in.begin(), in.end(), 0);
    const int *d_in = Upload(in);
    int *d_out = Upload(std::vector<int>(in.size(), -1));
    const int *in_view = OSP_DEVICE_ARG(stream_, d_in, in.size() * 4);
    int *out_view = OSP_DEVICE_ARG(stream_, d_out, in.size() * 4);
    ASSERT_EQ(OSP_LAUNCH_BLOCK_SYNC(reverse_blocks, 4, 64, 0, stream_,
                                    in_view, out_view),
              cudaSuccess);
    std::vector<int> got = Download(d_out, in.size());
    for (int b = 0; b < 4; b++)
        for (int t = 0; t < 64; t++)
            ASSERT_EQ(got[b * 64 + t], b * 64 + 63 - t);
}

TEST_F(FakeKernelRuntime, DynamicSharedMemoryIsPerBlockAndPoisoned) {
    std::vector<int> in(5 * 32, 1);
    in[33] = 10;
    const int *d_in = Upload(in);
    int *d_sums = Upload(std::vector<int>(10, 0));
    const int *in_view = OSP_DEVICE_ARG(stream_, d_in, in.size() * 4);
    int *sums_view = OSP_DEVICE_ARG(stream_, d_sums, 10 * 4);
    ASSERT_EQ(OSP_LAUNCH_BLOCK_SYNC(block_sums, 5, 32, 2 * sizeof(int),
                                    stream_, in_view, sums_view),
              cudaSuccess);
    EXPECT_EQ(Download(d_sums, 10),
              (std::vector<int>{32, 41, 32, 32, 32, -1, -1, -1, -1, -1}));
}

TEST_F(FakeKernelRuntime, HostPointerFailsTheLaunchAndRunsNothing) {
    std::vector<unsigned> host(8, 0);
    unsigned *bad = OSP_DEVICE_ARG(stream_, host.data(), host.size() * 4);
    EXPECT_EQ(bad, nullptr);
    EXPECT_EQ(OSP_LAUNCH(write_linear_ids, 1, 8, 0, stream_, bad),
              cudaErrorInvalidValue);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    // The failure belonged to that launch only.
    unsigned *out = Upload(std::vector<unsigned>(8, 0));
    unsigned *view = OSP_DEVICE_ARG(stream_, out, 8 * 4);
    EXPECT_EQ(OSP_LAUNCH(write_linear_ids, 1, 8, 0, stream_, view),
              cudaSuccess);
    EXPECT_EQ(Download(out, 8)[7], 8u);
}

TEST_F(FakeKernelRuntime, RangePastTheAllocationIsRefused) {
    unsigned *out = Upload(std::vector<unsigned>(8, 0));
    EXPECT_EQ(OSP_DEVICE_ARG(stream_, out, 9 * sizeof(unsigned)), nullptr);
    EXPECT_EQ(OSP_LAUNCH(write_linear_ids, 1, 8, 0, stream_, out),
              cudaErrorInvalidValue);
}

TEST_F(FakeKernelRuntime, InvalidConfigurationsAreRefusedAsCudaDoes) {
    unsigned *out = Upload(std::vector<unsigned>(8, 0));
    unsigned *view = OSP_DEVICE_ARG(stream_, out, 8 * 4);
    EXPECT_EQ(OSP_LAUNCH(write_linear_ids, 1, 2048, 0, stream_, view),
              cudaErrorInvalidConfiguration);
    EXPECT_EQ(OSP_LAUNCH(write_linear_ids, 0, 8, 0, stream_, view),
              cudaErrorInvalidConfiguration);
}

using FakeKernelRuntimeDeathTest = FakeKernelRuntime;

TEST_F(FakeKernelRuntimeDeathTest, ThreadReturningBeforeABarrierIsReported) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            int *out = Upload(std::vector<int>(8, 0));
            int *view = OSP_DEVICE_ARG(stream_, out, 8 * 4);
            (void)OSP_LAUNCH_BLOCK_SYNC(divergent_barrier, 1, 8, 0, stream_,
                                        view);
            cudaStreamSynchronize(stream_);
        },
        "a thread returned while others of its block wait");
}

TEST_F(FakeKernelRuntimeDeathTest, BarrierNeedsABlockSyncLaunch) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            int *out = Upload(std::vector<int>(8, 0));
            int *view = OSP_DEVICE_ARG(stream_, out, 8 * 4);
            (void)OSP_LAUNCH(barrier_without_sync_launch, 1, 8, 0, stream_,
                             view);
            cudaStreamSynchronize(stream_);
        },
        "not launched with OSP_LAUNCH_BLOCK_SYNC");
}

} // namespace
