/*
 * For device implementers only (server/device/cpu_device.c, cuda/): the
 * function table behind device.h. The core's dispatch (server/device/device.c)
 * validates arguments, fills in the optional slots' fallbacks, and wraps
 * pointers into osp_buffer; implementations stay small.
 *
 * Slots marked (optional) may be NULL:
 *   alloc_host     -> 64-byte aligned pageable host memory
 *   memcpy_async   -> synchronize the stream, then memcpy
 *   launch_host_func -> synchronize the stream, then call fn
 *   stream_set_threads -> nothing (the device runs no ops on host threads)
 *   event_*        -> host monotonic clock taken after synchronizing
 *   memory_stats   -> all zero
 *   memcpy_sync    -> synchronous memmove (memory is host memory)
 *   ipc_open/ipc_close -> UNSUPPORTED (the device cannot share memory)
 *   ipc_export     -> UNSUPPORTED
 *   graph_*       -> UNSUPPORTED (osp_stream_supports_graphs is false)
 */
#pragma once

#include "osprey/device.h"
#include "osprey/device_options.h"
#include "osprey/tensor_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct osp_device_ops {
    /* Device memory of `size` bytes (size may be 0). Sets *ptr. */
    osp_error *(*alloc)(osp_device *dev, size_t size, void **ptr);
    void (*free)(osp_device *dev, void *ptr, size_t size);
    /* (optional) host memory for transfers; *pinned says what it got. */
    osp_error *(*alloc_host)(osp_device *dev, size_t size, void **ptr,
                             bool *pinned);
    void (*free_host)(osp_device *dev, void *ptr, size_t size, bool pinned);
    /* (optional) */
    void (*memory_stats)(const osp_device *dev, osp_device_memory_stats *out);

    /* Streams: *impl is the implementation's per-stream state. */
    osp_error *(*stream_new)(osp_device *dev, void **impl);
    void (*stream_free)(osp_device *dev, void *impl);
    osp_error *(*stream_synchronize)(osp_device *dev, void *impl);
    /* (optional) */
    osp_error *(*memcpy_async)(osp_device *dev, void *stream_impl, void *dst,
                               const void *src, size_t n, osp_copy_kind kind);
    /* (optional) */
    osp_error *(*launch_host_func)(osp_device *dev, void *stream_impl,
                                   void (*fn)(void *arg), void *arg);
    /* (optional) caps the host threads ops on the stream may use (threads
     * >= 0; 0 = the device's default). */
    osp_error *(*stream_set_threads)(osp_device *dev, void *stream_impl,
                                     int threads);

    /* (optional, all four or none) */
    osp_error *(*event_new)(osp_device *dev, void **impl);
    void (*event_free)(osp_device *dev, void *impl);
    osp_error *(*event_record)(osp_device *dev, void *impl, void *stream_impl);
    osp_error *(*event_synchronize)(osp_device *dev, void *impl);
    /* (optional, needs the event slots) */
    osp_error *(*event_elapsed_ns)(osp_device *dev, void *start, void *end,
                                   uint64_t *ns);

    /* (optional) n bytes copied, arrived when it returns, on no stream of
     * the caller's (osp_device_memcpy). n > 0, pointers not NULL. */
    osp_error *(*memcpy_sync)(osp_device *dev, void *dst, const void *src,
                              size_t n, osp_copy_kind kind);
    /* (optional, both or none) Maps memory another process exported
     * (handle of handle_len bytes): *ptr and the *size bytes of its
     * allocation from there; ipc_close unmaps it. Messages are fit for
     * clients (no file names). */
    osp_error *(*ipc_open)(osp_device *dev, const void *handle,
                           size_t handle_len, void **ptr, size_t *size);
    osp_error *(*ipc_close)(osp_device *dev, void *ptr);
    /* (optional) The handle (handle_len bytes) of the allocation holding
     * device memory ptr, for another process, and ptr's *offset in it.
     * Messages are fit for clients. */
    osp_error *(*ipc_export)(osp_device *dev, const void *ptr, void *handle,
                             size_t handle_len, uint64_t *offset);

    /* (optional, all four or none) Graphs (osprey/device.h): begin and end
     * a recording of what the calling thread enqueues on a stream (end
     * gives the device's replayable graph in *graph, or an error when the
     * capture was invalidated, leaving the stream out of capture either
     * way); launch a graph on a stream; free a graph. */
    osp_error *(*graph_begin)(osp_device *dev, void *stream_impl);
    osp_error *(*graph_end)(osp_device *dev, void *stream_impl, void **graph);
    osp_error *(*graph_launch)(osp_device *dev, void *graph,
                               void *stream_impl);
    void (*graph_free)(osp_device *dev, void *graph);

    /* Compute ops: arguments already validated by the dispatcher. */
    osp_error *(*gemm)(osp_device *dev, void *stream_impl,
                       const osp_gemm_args *args);
    osp_error *(*binary)(osp_device *dev, void *stream_impl, osp_binary_op op,
                         osp_datatype dtype, const void *a, const void *b,
                         void *out, size_t n);
    osp_error *(*bias_activation)(osp_device *dev, void *stream_impl, float *x,
                                  const float *bias, int64_t rows, int64_t cols,
                                  osp_activation act);
    osp_error *(*softmax_rows)(osp_device *dev, void *stream_impl,
                               const float *x, float *out, int64_t rows,
                               int64_t cols);
    osp_error *(*cast)(osp_device *dev, void *stream_impl, const void *src,
                       osp_datatype src_dtype, void *dst,
                       osp_datatype dst_dtype, size_t n);

    /* Tensor ops of osprey/tensor_ops.h, every one (optional): NULL means
     * the device does not have it (osp_device_supports_op is false and a
     * call is UNSUPPORTED), except gemm_ex, whose fallback is the
     * dispatcher's (a gemm per batch, then the epilogue through unary and
     * binary_nd). Arguments are validated by the dispatcher
     * (server/device/tensor_ops.c) and never describe zero elements. */
    osp_error *(*gemm_ex)(osp_device *dev, void *stream_impl,
                          const osp_gemm_ex_args *args);
    /* (optional) osp_op_gemm_prepack (b checked, FP32 only; *out NULL
     * when there is no packed form); needs packed_weights_free. */
    osp_error *(*gemm_prepack)(osp_device *dev, void *stream_impl,
                               const osp_gemm_ex_args *args,
                               osp_packed_weights **out);
    osp_error *(*unary)(osp_device *dev, void *stream_impl,
                        const osp_unary_args *args);
    osp_error *(*binary_nd)(osp_device *dev, void *stream_impl,
                            const osp_binary_nd_args *args);
    osp_error *(*where)(osp_device *dev, void *stream_impl,
                        const osp_where_args *args);
    osp_error *(*copy_strided)(osp_device *dev, void *stream_impl,
                               const osp_copy_strided_args *args);
    osp_error *(*gather)(osp_device *dev, void *stream_impl,
                         const osp_gather_args *args);
    osp_error *(*fill)(osp_device *dev, void *stream_impl,
                       const osp_fill_args *args);
    osp_error *(*pad)(osp_device *dev, void *stream_impl,
                      const osp_pad_args *args);
    osp_error *(*reduce)(osp_device *dev, void *stream_impl,
                         const osp_reduce_args *args);
    osp_error *(*softmax)(osp_device *dev, void *stream_impl,
                          const osp_softmax_args *args);
    osp_error *(*layer_norm)(osp_device *dev, void *stream_impl,
                             const osp_layer_norm_args *args);
    osp_error *(*channel_affine)(osp_device *dev, void *stream_impl,
                                 const osp_channel_affine_args *args);
    osp_error *(*conv)(osp_device *dev, void *stream_impl,
                       const osp_conv_args *args);
    osp_error *(*conv_transpose)(osp_device *dev, void *stream_impl,
                                 const osp_conv_transpose_args *args);
    /* (optional, both or none) osp_op_conv_prepack (args validated as for
     * conv, shapes only; *out NULL when this conv has no packed form) and
     * osp_packed_weights_free (packed not NULL; also gemm_prepack's).
     * Without them prepack gives NULL and conv reads w. */
    osp_error *(*conv_prepack)(osp_device *dev, void *stream_impl,
                               const osp_conv_args *args,
                               osp_packed_weights **out);
    void (*packed_weights_free)(osp_device *dev, osp_packed_weights *packed);
    osp_error *(*pool)(osp_device *dev, void *stream_impl,
                       const osp_pool_args *args);
    osp_error *(*topk)(osp_device *dev, void *stream_impl,
                       const osp_topk_args *args);
    osp_error *(*cumsum)(osp_device *dev, void *stream_impl,
                         const osp_cumsum_args *args);
    osp_error *(*scatter)(osp_device *dev, void *stream_impl,
                          const osp_scatter_args *args);
} osp_device_ops;

struct osp_device {
    const osp_device_ops *ops;
    osp_device_info info;
    void *impl; /* the implementation's per-device state */
};

#ifdef __cplusplus
}
#endif
