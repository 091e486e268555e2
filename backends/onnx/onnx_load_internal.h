/*
 * What the ONNX loader's files share (onnx_wire.c, onnx_tensor_proto.c,
 * onnx_loader.c): reading a file with a size limit, the checked and
 * memory-bounded protobuf-c unpack, and TensorProto -> onnx_tensor. Internal
 * to backends/onnx; it names protoc-c types (onnx.pb-c.h, generated from
 * Debian's onnx.proto at build time).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "onnx.pb-c.h"
#include "onnx_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The defaults of onnx_load_limits (onnx_graph.h). */
#define ONNX__DEFAULT_MAX_FILE_BYTES ((uint64_t)4 << 30)
#define ONNX__DEFAULT_MAX_TENSOR_BYTES ((uint64_t)4 << 30)
#define ONNX__DEFAULT_MAX_NODES 1000000u
#define ONNX__DEFAULT_MAX_GRAPH_DEPTH 16u

/* protobuf-c unpacks nested messages recursively (about 1 KiB of stack a
 * level); messages nested deeper than this are refused before it runs,
 * whatever max_graph_depth says. */
#define ONNX__WIRE_MAX_DEPTH 256u

/* Memory that protobuf-c may hold while it unpacks `len` bytes: this many
 * bytes per input byte, plus ONNX__UNPACK_SLACK. Weights unpack 1:1; the
 * densest real graphs (small nodes and attributes) stay well under 16:1,
 * while a hostile file of empty sub-messages would reach 130:1. */
#define ONNX__UNPACK_BYTES_PER_BYTE 32u
#define ONNX__UNPACK_SLACK ((size_t)64 << 20)

/* A protobuf-c allocator that counts the bytes it holds and refuses to
 * hold more than `limit`. It must outlive every message unpacked with it. */
typedef struct onnx__pb_budget {
    ProtobufCAllocator allocator; /* .allocator_data points at this struct */
    size_t live;
    size_t limit;
    bool exceeded;      /* an allocation would have passed the limit */
    bool out_of_memory; /* malloc failed */
} onnx__pb_budget;

/*
 * Reads the regular file at `path` whole into *data (malloc'ed, caller
 * frees; at least one byte allocated) after checking its size against
 * max_bytes. `what` ("model", "tensor") completes messages. Errors are
 * INVALID_ARG, out of memory UNAVAILABLE; they do not name `path` (the
 * caller prefixes it).
 */
osp_error *onnx__read_file(const char *path, uint64_t max_bytes,
                           const char *what, uint8_t **data, size_t *len);

/*
 * Checks `len` bytes (borrowed) of a serialized `desc` message, then
 * unpacks them with a budget sized for len (initialised here; it must
 * outlive *out). The check walks the wire format without recursion and
 * refuses what protobuf-c would choke on or recurse too deep into:
 * truncated varints and lengths, field number 0, groups and unknown wire
 * types, a known field with the wrong wire type, a string holding a NUL
 * byte, sub-messages nested deeper than max_depth (at most
 * ONNX__WIRE_MAX_DEPTH). Errors are INVALID_ARG and say at which byte.
 * Free *out with onnx__pb_free(*out, budget).
 */
osp_error *onnx__pb_unpack(const ProtobufCMessageDescriptor *desc,
                           const uint8_t *data, size_t len, unsigned max_depth,
                           onnx__pb_budget *budget, ProtobufCMessage **out);
/* NULL is a no-op. */
void onnx__pb_free(ProtobufCMessage *msg, onnx__pb_budget *budget);
/* Frees a bytes field of an unpacked message early (its data is copied
 * out) and clears it. */
void onnx__pb_release_bytes(onnx__pb_budget *budget, ProtobufCBinaryData *bd);

/* Where tensor data may come from, for onnx__tensor_from_proto. */
typedef struct onnx__tensor_ctx {
    const char *base_dir;      /* borrowed; NULL: external data refused */
    char *base_real;           /* realpath(base_dir), owned, made lazily */
    uint64_t max_tensor_bytes; /* resolved (never 0) */
    onnx__pb_budget *budget;   /* the budget `tp` was unpacked with */
} onnx__tensor_ctx;

/* Frees what the context made (base_real). */
void onnx__tensor_ctx_destroy(onnx__tensor_ctx *ctx);

/*
 * Converts TensorProto `tp` (borrowed; its raw_data is released once
 * copied) into *out (zeroed by the caller; on error left zeroed). `what`
 * ("initializer 'w'", "attribute 'value' of node 'c'") starts every error
 * message. Checks the data type, the dims (rank <= OSP_MAX_DIMS,
 * non-negative, no overflow, bytes within max_tensor_bytes) and that the
 * data holds exactly the elements the dims call for; reads external data
 * relative to ctx->base_dir, refusing locations that leave it.
 */
osp_error *onnx__tensor_from_proto(onnx__tensor_ctx *ctx, Onnx__TensorProto *tp,
                                   const char *what, onnx_tensor *out);

/* The osp_datatype of TensorProto.DataType `onnx_type`; OSP_TYPE_INVALID
 * for types Osprey has no counterpart for (complex, float8, 4-bit). */
osp_datatype onnx__datatype(int32_t onnx_type);
/* ONNX's name of TensorProto.DataType `onnx_type` ("FLOAT", "COMPLEX64",
 * "FLOAT8E4M3FN"); "UNKNOWN" past the known ones. Static string. */
const char *onnx__datatype_name(int32_t onnx_type);

#ifdef __cplusplus
}
#endif
