/*
 * Packed weights made once per node (onnx_packed.h).
 */
#include "onnx_packed.h"

osp_error *onnx_packed_init(onnx_packed *pk) {
    pk->device = NULL;
    pk->weights = NULL;
    pk->packed = NULL;
    atomic_init(&pk->ready, false);
    return pthread_mutex_init(&pk->lock, NULL) == 0 ? NULL
                                                    : osp_error_out_of_memory();
}

void onnx_packed_destroy(onnx_packed *pk) {
    osp_packed_weights_free(pk->device, pk->packed);
    pthread_mutex_destroy(&pk->lock);
}

osp_error *onnx_packed_get(onnx_packed *pk, osp_stream *stream,
                           const void *weights, onnx_prepack_fn prepack,
                           const void *args, const osp_packed_weights **out) {
    *out = NULL;
    osp_device *dev = osp_stream_device(stream);
    if (!atomic_load_explicit(&pk->ready, memory_order_acquire)) {
        osp_error *err = NULL;
        pthread_mutex_lock(&pk->lock);
        if (!atomic_load_explicit(&pk->ready, memory_order_relaxed)) {
            err = prepack(stream, args, &pk->packed);
            pk->device = dev;
            pk->weights = weights;
            atomic_store_explicit(&pk->ready, true, memory_order_release);
        }
        pthread_mutex_unlock(&pk->lock);
        if (err)
            return err;
    }
    if (pk->device == dev && pk->weights == weights)
        *out = pk->packed;
    return NULL;
}
