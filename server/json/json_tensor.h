/*
 * Tensor data as JSON, the way Triton's HTTP frontend reads and writes it.
 * Decoding works straight on the request text of a `data` value (located by
 * json_scan), so large arrays never become json-c objects: nested arrays are
 * flattened row-major, nesting beyond HTTP_MAX_JSON_NESTING_DEPTH (100) is
 * refused, and element types and counts are checked with Triton's messages.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "json_util.h"
#include "osprey/datatype.h"
#include "osprey/error.h"

#define JSON_TENSOR_MAX_NESTING 100

/* Serialized size (4-byte length + bytes per element) of a BYTES `data`
 * value text[0..len), which json_scan has validated. */
osp_error *json_tensor_bytes_size(const char *text, size_t len, size_t *out);

/* Decodes the `data` value text[0..len) into dst. Non-BYTES types: exactly
 * `expected` elements of osp_datatype_byte_size(dt) bytes each. BYTES:
 * `expected` is the byte size from json_tensor_bytes_size. dst is borrowed
 * and must hold that many bytes. FP16/BF16/INVALID are refused by the caller
 * before this is reached. */
osp_error *json_tensor_decode(const char *text, size_t len, osp_datatype dt,
                              int64_t expected, void *dst);

/* Appends the `count` elements at data[0..byte_size) to b as a flat JSON
 * array. Errors: the size does not match the shape, FP16/BF16 outputs. */
osp_error *json_tensor_encode(bytebuf *b, const char *name, osp_datatype dt,
                              const void *data, size_t byte_size,
                              int64_t count);
