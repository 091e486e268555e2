/* Helpers shared by the GPU benchmarks: setup of GPU 0 and error exits. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_provider.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"

/* Prints the error and exits: benchmarks are programs, main may exit. */
#define BENCH_CHECK(expr)                                                      \
    do {                                                                       \
        osp_error *bench_err_ = (expr);                                        \
        if (bench_err_ != NULL) {                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,      \
                    osp_error_message(bench_err_));                            \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static inline double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Initialises devices with a pinned pool of pinned_bytes and returns GPU
 * 0; exits with status 2 when there is no GPU. */
static inline osp_device *bench_gpu0(size_t pinned_bytes) {
    osp_device_options opts;
    osp_device_options_init(&opts);
    opts.pinned_pool_bytes = pinned_bytes;
    static const osp_device_provider *const providers[] = {
        &osp_cuda_device_provider};
    opts.providers = providers;
    opts.n_providers = 1;
    BENCH_CHECK(osp_devices_init(&opts));
    if (osp_device_cuda_count() == 0) {
        fprintf(stderr, "no CUDA GPU found\n");
        exit(2);
    }
    osp_device *dev = NULL;
    BENCH_CHECK(osp_device_cuda_get(0, &dev));
    osp_device_info info;
    osp_device_get_info(dev, &info);
    printf("GPU 0: %s (compute %d.%d)\n", info.name, info.compute_major,
           info.compute_minor);
    return dev;
}
