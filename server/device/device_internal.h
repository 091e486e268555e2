/*
 * Pieces of the device layer shared inside server/device: the stream
 * object, and the CPU device (cpu_device.c), which the dispatcher
 * (device.c) hands out.
 */
#pragma once

#include "host_memory.h"
#include "osprey/device_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A stream: its device and the device's own stream object (what
 * stream_new made). Shared with the tensor-op dispatchers (tensor_ops*.c). */
struct osp_stream {
    osp_device *device;
    void *impl;
    bool capturing; /* between osp_stream_begin_capture and _end_capture */
};

/* The process-wide CPU device (a static object; never NULL, never freed). */
osp_device *cpu_device_get(void);

/* INVALID_ARG unless ptr is set and a row-major rows x cols matrix with row
 * stride ld is describable to BLAS (ld >= max(1, cols), ld <= INT_MAX);
 * `name` ("a", "b", "c") goes into the message. */
osp_error *device_gemm_check_matrix(const char *name, const void *ptr,
                                    int64_t rows, int64_t cols, int64_t ld);

#ifdef __cplusplus
}
#endif
