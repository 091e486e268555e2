// CUDA IPC through the CUDA device on a real GPU (ctest label gpu; reports
// SKIPPED without one): a child process cudaMallocs and exports memory as
// Triton's clients do, this process opens the handle with
// osp_device_ipc_open, reads what the child wrote, writes back, and
// closes; the child checks what arrived. The fake runtime's version of
// the round trip is in test_device_conformance (FakeIpcRoundTrips).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "osp_test.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#ifdef OSPREY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_provider.h"
#endif

namespace {

#ifdef OSPREY_HAVE_CUDA
constexpr size_t kBytes = (size_t{1} << 20) + 12;

unsigned char Pattern(size_t i, int salt) {
    return (unsigned char)(i * 31 + (size_t)salt);
}

// The exporting client: returns its exit status (0 = the server's bytes
// arrived).
int RunExporter(int to_parent, int from_parent) {
    void *d = nullptr;
    std::vector<unsigned char> host(kBytes);
    for (size_t i = 0; i < kBytes; i++)
        host[i] = Pattern(i, 1);
    cudaIpcMemHandle_t h;
    if (cudaSetDevice(0) != cudaSuccess ||
        cudaMalloc(&d, kBytes) != cudaSuccess ||
        cudaMemcpy(d, host.data(), kBytes, cudaMemcpyHostToDevice) !=
            cudaSuccess ||
        cudaIpcGetMemHandle(&h, d) != cudaSuccess)
        return 2;
    if (write(to_parent, &h, sizeof h) != (ssize_t)sizeof h)
        return 3;
    char done;
    if (read(from_parent, &done, 1) != 1)
        return 4;
    if (cudaMemcpy(host.data(), d, kBytes, cudaMemcpyDeviceToHost) !=
        cudaSuccess)
        return 5;
    for (size_t i = 0; i < kBytes; i++)
        if (host[i] != Pattern(i, 2))
            return 6;
    cudaFree(d);
    return 0;
}
#endif

TEST(CudaIpc, HandleOfAnotherProcessRoundTrips) {
#ifndef OSPREY_HAVE_CUDA
    GTEST_SKIP() << "built without CUDA";
#else
    // Only this process's child may touch CUDA before the fork.
    int up[2], down[2];
    ASSERT_EQ(pipe(up), 0);
    ASSERT_EQ(pipe(down), 0);
    int count = 0;
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(up[0]);
        close(down[1]);
        if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
            _exit(77);
        _exit(RunExporter(up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    cudaIpcMemHandle_t h;
    ssize_t got = read(up[0], &h, sizeof h);
    if (got != (ssize_t)sizeof h) {
        int status = 0;
        waitpid(child, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
            GTEST_SKIP() << "no CUDA GPU";
        FAIL() << "exporter failed, status " << status;
    }
    osp_device_options opts;
    osp_device_options_init(&opts);
    static const osp_device_provider *const providers[] = {
        &osp_cuda_device_provider};
    opts.providers = providers;
    opts.n_providers = 1;
    ASSERT_OK(osp_devices_init(&opts));
    osp_device *dev = nullptr;
    ASSERT_OK(osp_device_cuda_get(0, &dev));
    void *ptr = nullptr;
    size_t size = 0;
    ASSERT_OK(osp_device_ipc_open(dev, &h, sizeof h, &ptr, &size));
    EXPECT_GE(size, kBytes);
    std::vector<unsigned char> host(kBytes);
    ASSERT_OK(osp_device_memcpy(dev, host.data(), ptr, kBytes,
                                OSP_COPY_DEVICE_TO_HOST));
    for (size_t i = 0; i < kBytes; i++)
        ASSERT_EQ(host[i], Pattern(i, 1)) << i;
    for (size_t i = 0; i < kBytes; i++)
        host[i] = Pattern(i, 2);
    ASSERT_OK(osp_device_memcpy(dev, ptr, host.data(), kBytes,
                                OSP_COPY_HOST_TO_DEVICE));
    ASSERT_OK(osp_device_ipc_close(dev, ptr));
    ASSERT_EQ(write(down[1], "x", 1), 1);
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
#endif
}

} // namespace
