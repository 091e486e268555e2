/*
 * STRING tensors (ONNX tensor(string), Triton's TYPE_STRING / BYTES) inside
 * the ONNX runtime.
 *
 * Outside the runtime a BYTES tensor is Triton's serialisation: per
 * element a 4-byte little-endian length, then that many bytes. Inside, an
 * element is an onnx_string: a fixed-size reference (pointer + length) to
 * bytes that live elsewhere, so that the planner, the views (Identity,
 * Reshape, ...) and copies treat a string tensor like any tensor of
 * 16-byte elements. The bytes an element points at belong to:
 *   - a graph input: the caller's wire buffer (onnx_strings_from_wire
 *     borrows it; it must outlive the run);
 *   - a constant: the model (its initializer's wire bytes, or the model's
 *     pool for values folded at load), for the model's life;
 *   - a value an op made (Cast to STRING): a string pool, the session's
 *     (reset at the start of each run) or the plan's (values computed
 *     while planning).
 * Strings only exist on the CPU device (onnx_session_new refuses a model
 * with strings on another device), so ops read and write them directly.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One element of a STRING tensor: `len` bytes at `data` (borrowed; not
 * NUL-terminated, may hold NULs). */
typedef struct onnx_string {
    const char *data;
    size_t len;
} onnx_string;

/* Bytes of one STRING element inside the runtime. */
#define ONNX_STRING_BYTES ((size_t)16)

/* Reads `count` elements of the wire form wire[bytes] (borrowed) into
 * out[count] (caller's array), which then points into wire. INVALID_ARG
 * naming `what` (e.g. "input 'x'") when an element's length runs past the
 * end or bytes are left over after the last element. */
osp_error *onnx_strings_from_wire(const void *wire, size_t bytes,
                                  int64_t count, onnx_string *out,
                                  const char *what);

/* *out = bytes of the wire form of s[count]; INVALID_ARG when an element
 * is longer than a 4-byte length can say. */
osp_error *onnx_strings_wire_size(const onnx_string *s, int64_t count,
                                  size_t *out);

/* Writes the wire form of s[count] to out (onnx_strings_wire_size bytes;
 * caller's buffer). */
void onnx_strings_to_wire(const onnx_string *s, int64_t count, void *out);

/* ---- string pools ----------------------------------------------------------
 * Where ops put the bytes of the strings they make: chunks that live until
 * the pool is reset or destroyed. Not thread-safe (one per session or
 * plan). */

typedef struct onnx_string_chunk onnx_string_chunk;

typedef struct onnx_string_pool {
    onnx_string_chunk *chunks; /* newest first */
} onnx_string_pool;

/* A pool with no chunks (also what zeroed memory is). */
void onnx_string_pool_init(onnx_string_pool *pool);
/* Forgets every string (the pool keeps its newest chunk for reuse). */
void onnx_string_pool_reset(onnx_string_pool *pool);
/* Frees every chunk. */
void onnx_string_pool_destroy(onnx_string_pool *pool);
/* Room for len bytes, valid until the next reset or destroy; NULL when
 * out of memory. */
char *onnx_string_pool_alloc(onnx_string_pool *pool, size_t len);

#ifdef __cplusplus
}
#endif
