/*
 * The response cache (Triton's --cache-config with
 * `response_cache { enable: true }` per model): finished responses kept
 * under a key of the request (model, version, inputs' names, types, shapes
 * and bytes, requested outputs and their class counts). One interface, two
 * implementations:
 *
 *   local (cache_local.c)  in this process's memory, evicted least
 *                          recently used first past its capacity;
 *   redis (cache_redis.c)  in a Redis server that several replicas share,
 *                          under keys every replica computes alike.
 *
 * The core calls only the functions below; each dispatches through the
 * cache's ops table. Every implementation is thread-safe, makes an entry
 * complete before anyone can find it, and counts its statistics the same
 * way (a lookup that cannot reach its store is a miss).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/infer.h"
#include "osprey/server.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct response_cache response_cache;

/* A request's key: `len` bytes of `bytes` (16 for the local cache's keyed
 * hash, 32 for the redis cache's SHA-256). */
typedef struct cache_key {
    unsigned char bytes[32];
    size_t len;
} cache_key;

/* Lowercase hex of key (borrowed) into buf (at least 65 bytes). */
void cache_key_hex(const cache_key *key, char buf[65]);

typedef struct response_cache_stats {
    size_t entries;  /* 0 where unknown (redis) */
    size_t bytes;    /* what the entries take, as counted against capacity */
    size_t capacity; /* 0: not bounded here (redis: its maxmemory) */
    uint64_t lookups, hits, misses, inserts, evictions;
    uint64_t lookup_ns, insertion_ns; /* summed, waits included */
} response_cache_stats;

/* What an implementation provides; every slot is required. */
typedef struct response_cache_ops {
    const char *kind; /* "local", "redis" */
    cache_key (*key)(const response_cache *cache, const char *model,
                     int64_t version, const osp_infer_request *req);
    bool (*lookup)(response_cache *cache, cache_key key,
                   osp_infer_response *resp);
    void (*insert)(response_cache *cache, cache_key key,
                   const osp_infer_response *resp);
    void (*get_stats)(response_cache *cache, response_cache_stats *out);
    void (*free)(response_cache *cache);
} response_cache_ops;

/* The base every implementation embeds first. */
struct response_cache {
    const response_cache_ops *ops;
};

/* A local cache of `capacity` bytes (> 0, else INVALID_ARG). Caller owns
 * *out. */
osp_error *response_cache_local_new(size_t capacity, response_cache **out);

/* A cache in the Redis server opts (borrowed; copied) names. Never fails
 * for Redis being unreachable: it tries once now, logs why it could not
 * connect, and answers misses until Redis is back. INVALID_ARG for
 * settings out of range. Caller owns *out. */
osp_error *response_cache_redis_new(const osp_redis_cache_options *opts,
                                    response_cache **out);

/* NULL is a no-op. */
void response_cache_free(response_cache *cache);

/* The key of `req` (borrowed) for model `model` version `version`: its
 * inputs in name order, each with its datatype, shape and bytes, and the
 * outputs it asks for in its order, with their class counts. */
cache_key response_cache_key(const response_cache *cache, const char *model,
                             int64_t version, const osp_infer_request *req);

/* On a hit, appends copies of the cached outputs to resp (which has none)
 * and returns true. False on a miss (or when memory for the copies runs
 * out, or the store cannot be reached in time: resp is left without
 * outputs). */
bool response_cache_lookup(response_cache *cache, cache_key key,
                           osp_infer_response *resp);

/* Keeps a copy of resp's outputs (borrowed; an error response is not
 * kept) under key. A failure to keep it is logged ("Failed to insert key
 * [...] into response cache: why", Triton's words), never returned. */
void response_cache_insert(response_cache *cache, cache_key key,
                           const osp_infer_response *resp);

void response_cache_get_stats(response_cache *cache, response_cache_stats *out);

#ifdef __cplusplus
}
#endif
