/*
 * gRPC inference requests (server/grpc): the input is a serialized
 * ModelInferRequest. It is decoded twice, whole and cut into 3-byte
 * segments (as gRPC hands over slices), through the raw-field split, the
 * bounded protobuf-c unpack and the request building (parameters, typed
 * contents, raw contents); every input byte read back. Then a stream error
 * reply is encoded. Everything is freed; a leak or a bad access is a
 * finding.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "grpc_convert.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static osp_error *host_alloc(void *ctx, size_t size, osp_buffer **out) {
    (void)ctx;
    if (size > ((size_t)1 << 26))
        return osp_error_new(OSP_ERROR_INVALID_ARG, "too large");
    *out = osp_buffer_new_host(size);
    return *out ? NULL : osp_error_new(OSP_ERROR_UNAVAILABLE, "oom");
}

static void decode(const uint8_t *data, size_t size, size_t piece) {
    size_t n = piece ? (size + piece - 1) / piece : 1;
    kgrpc_segment *segs = calloc(n ? n : 1, sizeof *segs);
    if (!segs)
        return;
    size_t k = 0;
    for (size_t at = 0; at < size; at += piece ? piece : size) {
        size_t len = piece && size - at > piece ? piece : size - at;
        segs[k++] = (kgrpc_segment){data + at, len};
        if (!piece)
            break;
    }
    kgrpc_message m = {segs, k, size};
    kgrpc_decode_env env = {host_alloc, NULL, NULL};
    kgrpc_decoded d;
    kgrpc_decoded_init(&d);
    osp_error *err = kgrpc_decode_infer_request(&m, &env, &d);
    if (err) {
        size_t len;
        uint8_t *reply = kgrpc_encode_stream_error(
            osp_error_message(err), d.id, d.model_name, d.model_version, -1,
            &len);
        free(reply);
        osp_error_free(err);
    } else {
        volatile unsigned char sink = 0;
        for (size_t i = 0; i < d.request->n_inputs; i++) {
            const osp_buffer *b = d.request->inputs[i].data;
            for (size_t j = 0; j < b->size; j++)
                sink ^= ((const unsigned char *)b->data)[j];
        }
        (void)sink;
    }
    kgrpc_decoded_destroy(&d);
    free(segs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    decode(data, size, 0);
    decode(data, size, 3);
    return 0;
}
