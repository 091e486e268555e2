/*
 * The response cache (Triton's --cache-config=local,size=BYTES with
 * `response_cache { enable: true }` per model): finished responses kept
 * under a key of the request (model, version, inputs' names, types, shapes
 * and bytes, requested outputs), evicted least recently used first when
 * the bytes they take would pass the capacity. Thread-safe; an entry is
 * complete before anyone can find it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/infer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct response_cache response_cache;

/* 128 bits of a keyed hash (the seed is random per cache, so that a
 * client cannot aim at another request's key). */
typedef struct cache_key {
    uint64_t lo, hi;
} cache_key;

typedef struct response_cache_stats {
    size_t entries;
    size_t bytes; /* what the entries take, as counted against capacity */
    size_t capacity;
    uint64_t lookups, hits, misses, inserts, evictions;
    uint64_t lookup_ns, insertion_ns; /* summed, lock waits included */
} response_cache_stats;

/* A cache of `capacity` bytes (> 0, else INVALID_ARG). Caller owns *out. */
osp_error *response_cache_new(size_t capacity, response_cache **out);
void response_cache_free(response_cache *cache);

/* The key of `req` (borrowed) for model `model` version `version`: its
 * inputs in name order, each with its datatype, shape and bytes, and the
 * outputs it asks for in its order, with their class counts. */
cache_key response_cache_key(const response_cache *cache, const char *model,
                             int64_t version, const osp_infer_request *req);

/* On a hit, appends copies of the cached outputs to resp (which has none)
 * and returns true. False on a miss (or when memory for the copies runs
 * out: resp is left without outputs). */
bool response_cache_lookup(response_cache *cache, cache_key key,
                           osp_infer_response *resp);

/* Keeps a copy of resp's outputs (borrowed; an error response is not
 * kept) under key, unless the key is there already or the copy would not
 * fit in the whole cache; older entries are evicted to make room. */
void response_cache_insert(response_cache *cache, cache_key key,
                           const osp_infer_response *resp);

void response_cache_get_stats(response_cache *cache, response_cache_stats *out);

#ifdef __cplusplus
}
#endif
