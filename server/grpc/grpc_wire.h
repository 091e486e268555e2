/*
 * Protobuf wire format at the level the gRPC frontend needs beside
 * protobuf-c: reading a received message that lies in several slices
 * without joining them, splitting a ModelInferRequest so that its
 * raw_input_contents never get copied by protobuf-c (they go straight from
 * the received slices into the input buffers), and writing the varints
 * and field keys that frame raw_output_contents around output buffers
 * that are sent without a copy. No gRPC types here (the fuzz target and
 * unit tests link it alone).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One contiguous piece of a received message (borrowed). */
typedef struct kgrpc_segment {
    const uint8_t *data;
    size_t len;
} kgrpc_segment;

/* A received message: its pieces in order (borrowed) and their total. */
typedef struct kgrpc_message {
    const kgrpc_segment *segments;
    size_t n_segments;
    size_t total;
} kgrpc_message;

/* Where a length-delimited field's payload lies in a message. */
typedef struct kgrpc_span {
    size_t offset;
    size_t len;
} kgrpc_span;

/* ModelInferRequest.raw_input_contents and the response's
 * raw_output_contents / ModelStreamInferResponse's fields. */
#define KGRPC_INFER_REQUEST_RAW_FIELD 7
#define KGRPC_INFER_RESPONSE_RAW_FIELD 6
#define KGRPC_STREAM_ERROR_FIELD 1
#define KGRPC_STREAM_RESPONSE_FIELD 2

/* Splits a serialized ModelInferRequest. Every top-level field other than
 * raw_input_contents is copied, in order, into *rest (malloc'ed; caller
 * frees; may be NULL when empty) for protobuf-c; each raw_input_contents
 * entry is listed in *raw (malloc'ed; caller frees) in order. Returns
 * false, with nothing to free, when the bytes are not a well-formed
 * message at the top level (a varint or length running past the end, a
 * field number 0, a group or an unknown wire type) or memory runs out
 * (*oom set). */
bool kgrpc_split_infer_request(const kgrpc_message *m, uint8_t **rest,
                               size_t *rest_len, kgrpc_span **raw,
                               size_t *n_raw, bool *oom);

/* Copies the bytes of `span` (inside m) to dst. */
void kgrpc_message_copy(const kgrpc_message *m, kgrpc_span span, void *dst);

/* Bytes a varint of v takes (1..10). */
size_t kgrpc_varint_size(uint64_t v);
/* Writes the key of a length-delimited field `field` followed by the
 * varint `len` into buf (at least 15 bytes); returns the bytes written. */
size_t kgrpc_put_length_prefix(uint8_t *buf, uint32_t field, uint64_t len);

#ifdef __cplusplus
}
#endif
