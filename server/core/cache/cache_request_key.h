/*
 * What a request's response-cache key covers, in one place, so that every
 * cache implementation keys the same content: the model's name and
 * version; the inputs in name order, each with its name, datatype, shape
 * and bytes; the number of outputs asked for, then each one's name and
 * class count, in the request's order. A cache feeds the walk to a hash of
 * its own (a keyed hash for the local cache, SHA-256 for redis).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/infer.h"
#include "response_cache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Receives the walk's fields in order. `field` gets one variable-length
 * field (the hash must delimit it, e.g. by its length); `number` one
 * integer. */
typedef struct cache_key_sink {
    void (*field)(void *ctx, const void *data, size_t n);
    void (*number)(void *ctx, uint64_t v);
    void *ctx;
} cache_key_sink;

/* Feeds the content of req's key (all borrowed) to sink. */
void cache_key_walk(const char *model, int64_t version,
                    const osp_infer_request *req, const cache_key_sink *sink);

/* SHA-256 of the walk, every number 8 bytes little-endian and every field
 * preceded by its length as a number, after a domain tag naming this
 * layout: the same bytes on every replica and build. key.len is 0 when
 * libcrypto could not be used (out of memory): a key nothing matches. */
cache_key cache_key_sha256(const char *model, int64_t version,
                           const osp_infer_request *req);

#ifdef __cplusplus
}
#endif
