/*
 * Weights a device packs once for one node (osp_op_conv_prepack,
 * osp_op_gemm_prepack): made on the node's first run and shared by every
 * instance that runs its plan, since the plan and the constant weights on
 * a device are shared. Used by onnx_ops_conv.c and onnx_ops_matmul.c; C
 * only (atomics).
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "osprey/device.h"
#include "osprey/error.h"
#include "osprey/tensor_ops.h"

typedef struct onnx_packed {
    pthread_mutex_t lock;
    _Atomic bool ready;  /* packing was tried (packed may stay NULL) */
    osp_device *device;  /* where it was made */
    const void *weights; /* the device memory it was made from */
    osp_packed_weights *packed;
} onnx_packed;

/* Makes the packed form of args' weights on `stream` (borrowed). */
typedef osp_error *(*onnx_prepack_fn)(osp_stream *stream, const void *args,
                                      osp_packed_weights **out);

osp_error *onnx_packed_init(onnx_packed *pk);
/* Frees the packed form and the lock. */
void onnx_packed_destroy(onnx_packed *pk);

/* *out = the packed form of `weights` (device memory of a constant) for
 * the stream's device, made by prepack(stream, args) on the first call;
 * NULL when the device has none, or when this call's device or weights
 * are not the first call's (the op then runs unpacked, which is always
 * correct). The result is borrowed from pk. */
osp_error *onnx_packed_get(onnx_packed *pk, osp_stream *stream,
                           const void *weights, onnx_prepack_fn prepack,
                           const void *args, const osp_packed_weights **out);
