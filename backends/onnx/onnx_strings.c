/*
 * STRING tensors: the wire form <-> references, and string pools
 * (onnx_strings.h).
 */
#include "onnx_strings.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(onnx_string) == ONNX_STRING_BYTES,
               "a STRING element is a 16-byte reference");

#define WIRE_LENGTH_BYTES 4
#define POOL_MIN_CHUNK ((size_t)64 << 10)

osp_error *onnx_strings_from_wire(const void *wire, size_t bytes,
                                  int64_t count, onnx_string *out,
                                  const char *what) {
    const unsigned char *p = wire;
    size_t at = 0;
    for (int64_t i = 0; i < count; i++) {
        if (bytes - at < WIRE_LENGTH_BYTES)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "%s: element %lld of %lld has no 4-byte "
                                 "length (the tensor ends at byte %zu)",
                                 what, (long long)i, (long long)count, bytes);
        uint32_t len = (uint32_t)p[at] | (uint32_t)p[at + 1] << 8 |
                       (uint32_t)p[at + 2] << 16 | (uint32_t)p[at + 3] << 24;
        at += WIRE_LENGTH_BYTES;
        if (len > bytes - at)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "%s: element %lld of %lld says it is %u "
                                 "bytes long, but only %zu bytes are left",
                                 what, (long long)i, (long long)count, len,
                                 bytes - at);
        out[i] = (onnx_string){.data = (const char *)p + at, .len = len};
        at += len;
    }
    if (at != bytes)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: %zu bytes are left after its %lld "
                             "elements",
                             what, bytes - at, (long long)count);
    return NULL;
}

osp_error *onnx_strings_wire_size(const onnx_string *s, int64_t count,
                                  size_t *out) {
    size_t total = 0;
    for (int64_t i = 0; i < count; i++) {
        if (s[i].len > UINT32_MAX ||
            total > SIZE_MAX - WIRE_LENGTH_BYTES - s[i].len)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "string element %lld is %zu bytes long, "
                                 "more than a BYTES tensor can hold",
                                 (long long)i, s[i].len);
        total += WIRE_LENGTH_BYTES + s[i].len;
    }
    *out = total;
    return NULL;
}

void onnx_strings_to_wire(const onnx_string *s, int64_t count, void *out) {
    unsigned char *p = out;
    for (int64_t i = 0; i < count; i++) {
        uint32_t len = (uint32_t)s[i].len;
        p[0] = (unsigned char)len;
        p[1] = (unsigned char)(len >> 8);
        p[2] = (unsigned char)(len >> 16);
        p[3] = (unsigned char)(len >> 24);
        if (len)
            memcpy(p + WIRE_LENGTH_BYTES, s[i].data, len);
        p += WIRE_LENGTH_BYTES + len;
    }
}

/* ---- pools ---------------------------------------------------------------
 */

struct onnx_string_chunk {
    onnx_string_chunk *next;
    size_t cap, used;
    char data[];
};

void onnx_string_pool_init(onnx_string_pool *pool) { pool->chunks = NULL; }

void onnx_string_pool_reset(onnx_string_pool *pool) {
    onnx_string_chunk *keep = pool->chunks;
    if (!keep)
        return;
    onnx_string_chunk *c = keep->next;
    while (c) {
        onnx_string_chunk *next = c->next;
        free(c);
        c = next;
    }
    keep->next = NULL;
    keep->used = 0;
}

void onnx_string_pool_destroy(onnx_string_pool *pool) {
    onnx_string_pool_reset(pool);
    free(pool->chunks);
    pool->chunks = NULL;
}

char *onnx_string_pool_alloc(onnx_string_pool *pool, size_t len) {
    onnx_string_chunk *c = pool->chunks;
    if (c && c->cap - c->used >= len) {
        char *at = c->data + c->used;
        c->used += len;
        return at;
    }
    /* A new chunk, twice the last (at least 64 KiB, at least len). */
    size_t cap = c && c->cap < SIZE_MAX / 4 ? c->cap * 2 : POOL_MIN_CHUNK;
    if (cap < len)
        cap = len;
    if (cap > SIZE_MAX - sizeof *c)
        return NULL;
    onnx_string_chunk *fresh = malloc(sizeof *fresh + cap);
    if (!fresh)
        return NULL;
    fresh->next = c;
    fresh->cap = cap;
    fresh->used = len;
    pool->chunks = fresh;
    return fresh->data;
}
