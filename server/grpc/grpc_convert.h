/*
 * The KServe v2 gRPC inference codec without gRPC: a received
 * ModelInferRequest (in slices) to an osp_infer_request, and an
 * osp_infer_response to a ModelInferResponse or ModelStreamInferResponse
 * laid out as parts that point into the output buffers. Triton's rules and
 * messages (its infer_handler.cc and grpc_utils.h; §5 of the protocol
 * reference):
 *  - raw_input_contents[i] belongs to the i-th input with neither contents
 *    nor a shared memory region; its bytes are copied once, from the
 *    received slices into the buffer the allocator hands out;
 *  - typed contents are converted to the tensor's bytes (int_contents to
 *    INT8/INT16/INT32, uint_contents to UINT8/UINT16/UINT32, bool to one
 *    byte, bytes_contents to length-prefixed elements);
 *  - request parameters are checked by type (sequence_id, sequence_start,
 *    sequence_end, priority, timeout, reserved triton_ keys, custom ones);
 *  - outputs always answer in raw_output_contents, one entry per output.
 * The decoder's memory is bounded: protobuf-c unpacks with an allocator
 * that refuses to go past a budget proportional to the message.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grpc_wire.h"
#include "kserve_shm.h"
#include "osprey/error.h"
#include "osprey/infer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hands out an input buffer of `size` bytes (the core's pinned pool in
 * the server, plain host memory in tests). Caller owns *out. */
typedef osp_error *(*kgrpc_alloc_fn)(void *ctx, size_t size, osp_buffer **out);

/* What decoding needs from its surroundings (all borrowed). */
typedef struct kgrpc_decode_env {
    kgrpc_alloc_fn alloc;
    void *alloc_ctx;
    /* Where shared_memory_region parameters are looked up; NULL: regions
     * are unknown ("Unable to find shared memory region"). */
    kserve_shm_registry *shm;
} kgrpc_decode_env;

/* An output the response writes into a shared memory region: a use of
 * the region held until the decoded request is destroyed. */
typedef struct kgrpc_output_shm {
    char *name; /* owned */
    kserve_shm_region *region;
    void *addr;
    uint64_t byte_size;
} kgrpc_output_shm;

/* A decoded request and what its response needs. */
typedef struct kgrpc_decoded {
    /* owned; NULL after an error or once taken */
    osp_infer_request *request;
    /* Copies of the request's model_name, model_version and id, for the
     * response and for errors that must name them (stream errors carry
     * the id). Set as soon as the message could be parsed; "" otherwise. */
    char *model_name;
    char *model_version;
    char *id;
    kserve_shm_region **shm_inputs; /* uses held */
    size_t n_shm_inputs;
    kgrpc_output_shm *shm_outputs;
    size_t n_shm_outputs;
    /* triton_enable_empty_final_response: a decoupled model's final flag
     * without a response is sent as an empty response. */
    bool empty_final_response;
} kgrpc_decoded;

void kgrpc_decoded_init(kgrpc_decoded *d);
/* Frees the request if still there and gives back the regions. */
void kgrpc_decoded_destroy(kgrpc_decoded *d);

/* The message Triton's gRPC server answers an unparsable request with
 * (INTERNAL). */
#define KGRPC_PARSE_ERROR "Unable to parse request"

/* Decodes the ModelInferRequest in `m` (borrowed) into d (initialised).
 * Errors: INTERNAL "Unable to parse request" for bytes that are not a
 * ModelInferRequest; INVALID_ARG with Triton's messages for a request that
 * is one but breaks its rules; UNAVAILABLE when a buffer cannot be had.
 * d->model_name/model_version/id are filled whenever the message parsed,
 * even on error. */
osp_error *kgrpc_decode_infer_request(const kgrpc_message *m,
                                      const kgrpc_decode_env *env,
                                      kgrpc_decoded *d);

/* Unpacks data[0..len) as a message of `desc` with the decoder's memory
 * budget. NULL when the bytes are not such a message or the budget ran
 * out (*too_large then). Free with
 * protobuf_c_message_free_unpacked(msg, NULL). */
struct ProtobufCMessageDescriptor;
struct ProtobufCMessage;
struct ProtobufCMessage *
kgrpc_unpack_bounded(const struct ProtobufCMessageDescriptor *desc,
                     const uint8_t *data, size_t len, bool *too_large);

/* ---- responses ---- */

/* One piece of an encoded response: len bytes at base. Exactly one owner:
 * `buffer` (an output buffer taken from the response) or `heap` (malloc'ed
 * bytes base points into); a transport may move either out (set it NULL)
 * to keep the bytes alive while it sends them. */
typedef struct kgrpc_part {
    const void *base;
    size_t len;
    osp_buffer *buffer;
    void *heap;
} kgrpc_part;

typedef struct kgrpc_encoded {
    kgrpc_part *parts;
    size_t n_parts;
    size_t total; /* bytes of the serialized message */
} kgrpc_encoded;

/* Frees every part still owned and the part list. */
void kgrpc_encoded_destroy(kgrpc_encoded *e);

/* Encodes a successful response r (borrowed; its output buffers are
 * taken into the parts) as a ModelInferResponse, or, when `stream`, as a
 * ModelStreamInferResponse carrying it (with Triton's
 * "triton_final_response" parameter set to `final`). d (borrowed) supplies the
 * request's names and its shared memory outputs: those are copied into
 * their regions and answered with an empty raw entry; a region smaller
 * than the output is Triton's INTERNAL "shared memory size specified with
 * the request for output '<o>' (<n> bytes) should be at least <m> bytes to
 * hold the results". On success the caller owns *out. */
osp_error *kgrpc_encode_infer_response(osp_infer_response *r,
                                       const kgrpc_decoded *d, bool stream,
                                       bool final, kgrpc_encoded *out);

/* A stream's in-band error: ModelStreamInferResponse{error_message,
 * infer_response{id, model_name, model_version}} packed into a malloc'ed
 * buffer (caller frees). `message`, `id`, `model` and `version` borrowed
 * (NULL = ""). `final` >= 0 adds the "triton_final_response" parameter
 * (Triton adds it to a response the core answered; -1: a request refused
 * before). With message NULL it is a decoupled model's empty final
 * response. NULL on OOM. */
uint8_t *kgrpc_encode_stream_error(const char *message, const char *id,
                                   const char *model, const char *version,
                                   int final, size_t *len);

#ifdef __cplusplus
}
#endif
