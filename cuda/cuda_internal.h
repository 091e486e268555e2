/*
 * State shared by the files of the CUDA device (cuda_device.c owns it,
 * cuda_gemm.c reads it).
 */
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>

#include "osprey/device_impl.h"
#include "range_pool.h"

/* Process-wide pinned host pool, shared by every GPU (allocated portable). */
typedef struct cuda_pinned_pool {
    pthread_mutex_t lock;
    range_pool pool; /* empty when pinning is disabled or failed */
    bool configured; /* --pinned-memory-pool-byte-size > 0 */
    atomic_uint_fast64_t pageable_fallbacks;
    atomic_bool fallback_logged;
} cuda_pinned_pool;

/* One GPU. `device` is what the rest of Osprey sees; device.impl points
 * back at this struct. */
typedef struct cuda_device {
    osp_device device;
    int ordinal;
    pthread_mutex_t pool_lock;
    range_pool pool;          /* device memory, grows on demand, never shrinks
                                 unless cudaMalloc runs out */
    size_t pool_grow_bytes;   /* smallest region added when the pool is full */
    cuda_pinned_pool *pinned; /* shared, owned by the device list */
    /* Synchronous copies (cuda_memcpy_sync) take turns on copy_stream,
     * made on first use. */
    pthread_mutex_t copy_lock;
    cudaStream_t copy_stream;
} cuda_device;

typedef struct cuda_stream {
    cudaStream_t stream;
    cublasHandle_t blas; /* bound to `stream` */
} cuda_stream;

static inline cuda_device *cuda_device_of(osp_device *dev) {
    return (cuda_device *)dev->impl;
}

/* Makes dev's GPU current for the calling thread (cheap when it already
 * is); every entry point calls it first since any thread may call any
 * device. */
osp_error *cuda_device_make_current(osp_device *dev);

/* The gemm slot (cuda_gemm.c). */
osp_error *cuda_gemm(osp_device *dev, void *stream_impl,
                     const osp_gemm_args *args);

/* The ipc_open, ipc_close, ipc_export and memcpy_sync slots
 * (cuda_ipc.c). */
osp_error *cuda_ipc_open(osp_device *dev, const void *handle, size_t handle_len,
                         void **ptr, size_t *size);
osp_error *cuda_ipc_close(osp_device *dev, void *ptr);
osp_error *cuda_ipc_export(osp_device *dev, const void *ptr, void *handle,
                           size_t handle_len, uint64_t *offset);
osp_error *cuda_memcpy_sync(osp_device *dev, void *dst, const void *src,
                            size_t n, osp_copy_kind kind);

/* Row-major C_b = alpha op(A_b) op(B_b) + beta C_b for b < batch (X_b = X
 * + b * stride_x elements; 0 reuses X), FP32 (TF32 when g asks) or FP16
 * with FP32 accumulation, in one cuBLAS call on s (one per INT_MAX
 * elements of the batch; cuda_gemm.c). */
osp_error *cuda_gemm_batched(cuda_stream *s, const osp_gemm_args *g,
                             int64_t batch, int64_t stride_a, int64_t stride_b,
                             int64_t stride_c);

/* conv a through im2col and cuBLAS (cuda_conv_gemm.c): TF32 when a
 * allows it, FP16 operands under w_fp16, in a's workspace. *done false
 * (nothing enqueued) when the workspace cannot hold one position's
 * column or a size is past cuBLAS's ints: the caller then runs the
 * device's own kernel (or fails, without FP32 weights). */
osp_error *cuda_conv_gemm(cuda_stream *s, const osp_conv_args *a, bool *done);

/* The neural-network tensor-op slots (osprey/tensor_ops.h): gemm_ex in
 * cuda_gemm.c, the others in cuda_ops_nn.c. */
osp_error *cuda_gemm_ex(osp_device *dev, void *stream_impl,
                        const osp_gemm_ex_args *args);
osp_error *cuda_conv(osp_device *dev, void *stream_impl,
                     const osp_conv_args *args);
osp_error *cuda_conv_transpose(osp_device *dev, void *stream_impl,
                               const osp_conv_transpose_args *args);
osp_error *cuda_pool(osp_device *dev, void *stream_impl,
                     const osp_pool_args *args);
osp_error *cuda_reduce(osp_device *dev, void *stream_impl,
                       const osp_reduce_args *args);
osp_error *cuda_softmax(osp_device *dev, void *stream_impl,
                        const osp_softmax_args *args);
osp_error *cuda_layer_norm(osp_device *dev, void *stream_impl,
                           const osp_layer_norm_args *args);
osp_error *cuda_channel_affine(osp_device *dev, void *stream_impl,
                               const osp_channel_affine_args *args);

/* Defines the tensor-op slot cuda_<name>(dev, stream_impl, args): makes
 * dev's GPU current, enqueues launcher(stream, args) (kernels.h) and maps
 * its status to an osp_error. */
#define CUDA_TENSOR_OP_SLOT(name, args_type, launcher)                         \
    osp_error *cuda_##name(osp_device *dev, void *stream_impl,                 \
                           const args_type *args) {                            \
        osp_error *err = cuda_device_make_current(dev);                        \
        if (err != NULL)                                                       \
            return err;                                                        \
        return OSP_CUDA_CHECK(                                                 \
            launcher(((cuda_stream *)stream_impl)->stream, args));             \
    }

/* The elementwise slots (cuda_ops_elementwise.c). */
osp_error *cuda_unary(osp_device *dev, void *stream_impl,
                      const osp_unary_args *args);
osp_error *cuda_binary_nd(osp_device *dev, void *stream_impl,
                          const osp_binary_nd_args *args);
osp_error *cuda_where(osp_device *dev, void *stream_impl,
                      const osp_where_args *args);

/* The data-movement, index and scan slots (cuda_ops_movement.c). */
osp_error *cuda_copy_strided(osp_device *dev, void *stream_impl,
                             const osp_copy_strided_args *args);
osp_error *cuda_fill(osp_device *dev, void *stream_impl,
                     const osp_fill_args *args);
osp_error *cuda_pad(osp_device *dev, void *stream_impl,
                    const osp_pad_args *args);
osp_error *cuda_gather(osp_device *dev, void *stream_impl,
                       const osp_gather_args *args);
osp_error *cuda_scatter(osp_device *dev, void *stream_impl,
                        const osp_scatter_args *args);
osp_error *cuda_topk(osp_device *dev, void *stream_impl,
                     const osp_topk_args *args);
osp_error *cuda_cumsum(osp_device *dev, void *stream_impl,
                       const osp_cumsum_args *args);

/* The graph slots (cuda_graph.c): stream capture into CUDA graphs. */
osp_error *cuda_graph_begin(osp_device *dev, void *stream_impl);
osp_error *cuda_graph_end(osp_device *dev, void *stream_impl, void **graph);
osp_error *cuda_graph_launch(osp_device *dev, void *graph, void *stream_impl);
void cuda_graph_free(osp_device *dev, void *graph);
