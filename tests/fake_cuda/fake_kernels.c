/*
 * The kernel launchers of cuda/kernels.h, faked: each checks its launch as
 * the GPU would see it (the stream's GPU current, every pointer inside a
 * device allocation of that GPU) and queues the CPU device's op on the
 * stream, working on the writable views of the device memory.
 */
#include <stdio.h>
#include <stdlib.h>

#include "device_internal.h"
#include "fake_cuda.h"
#include "kernels.h"
#include "osprey/datatype.h"
#include "osprey/device_impl.h"

typedef enum { BINARY, BIAS_ACTIVATION, SOFTMAX, CAST } kernel_kind;

typedef struct kernel_ctx {
    kernel_kind kind;
    int op; /* osp_binary_op or osp_activation */
    osp_datatype in_dtype, out_dtype;
    const void *a, *b;
    void *out;
    size_t n;
    int64_t rows, cols;
} kernel_ctx;

static void run_kernel(void *ctx) {
    kernel_ctx *k = ctx;
    osp_device *cpu = osp_cpu_device_get();
    const osp_device_ops *ops = cpu->ops;
    osp_error *err = NULL;
    switch (k->kind) {
    case BINARY:
        err = ops->binary(cpu, NULL, (osp_binary_op)k->op, k->in_dtype, k->a,
                          k->b, k->out, k->n);
        break;
    case BIAS_ACTIVATION:
        err = ops->bias_activation(cpu, NULL, k->out, k->b, k->rows, k->cols,
                                   (osp_activation)k->op);
        break;
    case SOFTMAX:
        err = ops->softmax_rows(cpu, NULL, k->a, k->out, k->rows, k->cols);
        break;
    case CAST:
        err =
            ops->cast(cpu, NULL, k->a, k->in_dtype, k->out, k->out_dtype, k->n);
        break;
    }
    if (err != NULL) { /* the dispatcher validated: a kernel cannot fail */
        fprintf(stderr, "fake CUDA: kernel failed: %s\n",
                osp_error_message(err));
        abort();
    }
}

/* The view of [*ptr, *ptr + bytes) on the stream's GPU; false (and a line
 * on stderr) when the kernel would fault. A kernel over no elements reads
 * nothing, whatever the pointer. */
static bool map_arg(cudaStream_t stream, const char *kernel, const char *name,
                    const void **ptr, size_t bytes) {
    if (bytes == 0)
        return true;
    int gpu = -1;
    void *view = fake_device_view(*ptr, bytes, &gpu);
    if (view == NULL || gpu != fake_stream_device(stream)) {
        fprintf(stderr,
                "fake CUDA: %s: %s %p (%zu bytes) is not device memory of "
                "GPU %d\n",
                kernel, name, *ptr, bytes, fake_stream_device(stream));
        return false;
    }
    *ptr = view;
    return true;
}

static cudaError_t launch(cudaStream_t stream, kernel_ctx *k) {
    kernel_ctx *copy = malloc(sizeof *copy);
    if (copy == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    *copy = *k;
    return fake_stream_enqueue(stream, run_kernel, copy);
}

cudaError_t osp_cuda_launch_binary(cudaStream_t stream, osp_binary_op op,
                                   osp_datatype dtype, const void *a,
                                   const void *b, void *out, size_t n) {
    fake_enter(__func__);
    cudaError_t st = fake_check_launch(stream);
    if (st != cudaSuccess)
        return st;
    size_t bytes = n * osp_datatype_byte_size(dtype);
    kernel_ctx k = {.kind = BINARY, .op = op, .in_dtype = dtype, .n = n};
    const void *o = out;
    if (!map_arg(stream, __func__, "a", &a, bytes) ||
        !map_arg(stream, __func__, "b", &b, bytes) ||
        !map_arg(stream, __func__, "out", &o, bytes))
        return fake_status(cudaErrorInvalidValue);
    k.a = a, k.b = b, k.out = (void *)o;
    return launch(stream, &k);
}

cudaError_t osp_cuda_launch_bias_activation(cudaStream_t stream, float *x,
                                            const float *bias, int64_t rows,
                                            int64_t cols, osp_activation act) {
    fake_enter(__func__);
    cudaError_t st = fake_check_launch(stream);
    if (st != cudaSuccess)
        return st;
    const void *xv = x, *bv = bias;
    if (!map_arg(stream, __func__, "x", &xv,
                 (size_t)rows * (size_t)cols * sizeof(float)) ||
        (bias != NULL &&
         !map_arg(stream, __func__, "bias", &bv, (size_t)cols * sizeof(float))))
        return fake_status(cudaErrorInvalidValue);
    kernel_ctx k = {.kind = BIAS_ACTIVATION,
                    .op = act,
                    .out = (void *)xv,
                    .b = bv,
                    .rows = rows,
                    .cols = cols};
    return launch(stream, &k);
}

cudaError_t osp_cuda_launch_softmax_rows(cudaStream_t stream, const float *x,
                                         float *out, int64_t rows,
                                         int64_t cols) {
    fake_enter(__func__);
    cudaError_t st = fake_check_launch(stream);
    if (st != cudaSuccess)
        return st;
    if (rows <= 0 || cols <= 0) /* as the real launcher: nothing to do */
        return cudaSuccess;
    size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
    const void *xv = x, *ov = out;
    if (!map_arg(stream, __func__, "x", &xv, bytes) ||
        !map_arg(stream, __func__, "out", &ov, bytes))
        return fake_status(cudaErrorInvalidValue);
    kernel_ctx k = {.kind = SOFTMAX,
                    .a = xv,
                    .out = (void *)ov,
                    .rows = rows,
                    .cols = cols};
    return launch(stream, &k);
}

cudaError_t osp_cuda_launch_cast(cudaStream_t stream, const void *src,
                                 osp_datatype src_dtype, void *dst,
                                 osp_datatype dst_dtype, size_t n) {
    fake_enter(__func__);
    cudaError_t st = fake_check_launch(stream);
    if (st != cudaSuccess)
        return st;
    const void *dv = dst;
    if (!map_arg(stream, __func__, "src", &src,
                 n * osp_datatype_byte_size(src_dtype)) ||
        !map_arg(stream, __func__, "dst", &dv,
                 n * osp_datatype_byte_size(dst_dtype)))
        return fake_status(cudaErrorInvalidValue);
    kernel_ctx k = {.kind = CAST,
                    .a = src,
                    .in_dtype = src_dtype,
                    .out = (void *)dv,
                    .out_dtype = dst_dtype,
                    .n = n};
    return launch(stream, &k);
}
