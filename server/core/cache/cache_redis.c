/*
 * The redis response cache (Triton's --cache-config=redis,...; the
 * interface is response_cache.h). Every replica that names the same Redis
 * shares its entries: a key is "osprey:cache:" and the hex SHA-256 of the
 * request's content (cache_request_key.h), the same on every replica; a
 * value is the response's outputs in cache_value.h's layout, written with
 * a plain SET and no expiry (as Triton's), so that Redis' maxmemory policy
 * decides what is evicted.
 *
 * Redis unreachable or slow is never a failed request: a lookup that
 * cannot get an answer in time is a miss, an insert that cannot is
 * dropped; cache_redis_pool.c logs each outage once. A value this Osprey
 * cannot read (corrupt, another layout, another program's) is a miss and
 * a warning, and the insert after that miss overwrites it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache_redis_pool.h"
#include "cache_request_key.h"
#include "cache_value.h"
#include "osprey/clock.h"
#include "osprey/log.h"
#include "response_cache.h"

#define KEY_PREFIX "osprey:cache:"
/* Redis' largest string (proto-max-bulk-len's default). */
#define VALUE_MAX_BYTES (512ull * 1024 * 1024)

typedef struct redis_cache {
    response_cache super;
    redis_pool *pool;
    pthread_mutex_t stats_lock;
    uint64_t lookups, hits, misses, inserts;
    uint64_t lookup_ns, insertion_ns;
} redis_cache;

static cache_key redis_cache_key(const response_cache *base, const char *model,
                                 int64_t version,
                                 const osp_infer_request *req) {
    (void)base;
    return cache_key_sha256(model, version, req);
}

/* KEY_PREFIX + hex of key into buf. */
static size_t redis_key_name(const cache_key *key, char buf[80]) {
    char hex[65];
    cache_key_hex(key, hex);
    return (size_t)snprintf(buf, 80, KEY_PREFIX "%s", hex);
}

static bool redis_cache_lookup(response_cache *base, cache_key key,
                               osp_infer_response *resp) {
    redis_cache *c = (redis_cache *)base;
    uint64_t start = osp_now_ns();
    bool hit = false;
    if (key.len == 32) {
        char name[80];
        const char *argv[2] = {"GET", name};
        size_t lens[2] = {3, redis_key_name(&key, name)};
        redisReply *r = NULL;
        char why[256];
        redis_pool_result res =
            redis_pool_command(c->pool, 2, argv, lens, &r, why, sizeof why);
        const char *bad = NULL;
        if (res == REDIS_POOL_BUSY)
            OSP_LOG_VERBOSE("redis response cache: lookup of [%s] is a "
                            "miss: %s",
                            name + sizeof KEY_PREFIX - 1, why);
        else if (res != REDIS_POOL_OK)
            ; /* an outage: logged once by the pool */
        else if (r->type == REDIS_REPLY_STRING)
            hit = cache_value_decode((const unsigned char *)r->str, r->len,
                                     resp, &bad);
        else if (r->type == REDIS_REPLY_ERROR)
            bad = r->str ? r->str : "an error reply";
        else if (r->type != REDIS_REPLY_NIL)
            bad = "not a string";
        if (bad)
            OSP_LOG_WARN("redis response cache: the value of key [%s] is "
                         "not one this Osprey reads (%s): served as a miss",
                         name + sizeof KEY_PREFIX - 1, bad);
        if (r)
            freeReplyObject(r);
    }
    uint64_t took = osp_now_ns() - start;
    pthread_mutex_lock(&c->stats_lock);
    c->lookups++;
    if (hit)
        c->hits++;
    else
        c->misses++;
    c->lookup_ns += took;
    pthread_mutex_unlock(&c->stats_lock);
    return hit;
}

static void redis_cache_insert(response_cache *base, cache_key key,
                               const osp_infer_response *resp) {
    redis_cache *c = (redis_cache *)base;
    if (!resp || resp->error || key.len != 32)
        return;
    uint64_t start = osp_now_ns();
    char name[80];
    size_t name_len = redis_key_name(&key, name);
    const char *hex = name + sizeof KEY_PREFIX - 1;
    unsigned char *value = NULL;
    size_t value_len = 0;
    const char *bad = NULL;
    if (!cache_value_encode(resp, VALUE_MAX_BYTES, &value, &value_len, &bad)) {
        /* Triton's words, with Osprey's reason and key */
        OSP_LOG_ERROR("Failed to insert key [%s] into response cache: %s", hex,
                      bad);
        return;
    }
    const char *argv[3] = {"SET", name, (const char *)value};
    size_t lens[3] = {3, name_len, value_len};
    redisReply *r = NULL;
    char why[256];
    redis_pool_result res =
        redis_pool_command(c->pool, 3, argv, lens, &r, why, sizeof why);
    free(value);
    bool kept = res == REDIS_POOL_OK && r->type != REDIS_REPLY_ERROR;
    if (res == REDIS_POOL_OK && !kept) /* e.g. OOM under noeviction */
        snprintf(why, sizeof why, "redis: %.*s",
                 (int)(r->len > 200 ? 200 : r->len), r->str ? r->str : "");
    if (r)
        freeReplyObject(r);
    /* In an outage nothing was tried: its one log line says it all. */
    if (!kept && res != REDIS_POOL_DOWN)
        OSP_LOG_ERROR("Failed to insert key [%s] into response cache: %s", hex,
                      why);
    uint64_t took = osp_now_ns() - start;
    pthread_mutex_lock(&c->stats_lock);
    if (kept)
        c->inserts++;
    c->insertion_ns += took;
    pthread_mutex_unlock(&c->stats_lock);
}

static void redis_cache_get_stats(response_cache *base,
                                  response_cache_stats *out) {
    redis_cache *c = (redis_cache *)base;
    pthread_mutex_lock(&c->stats_lock);
    *out = (response_cache_stats){
        .lookups = c->lookups,
        .hits = c->hits,
        .misses = c->misses,
        .inserts = c->inserts,
        .lookup_ns = c->lookup_ns,
        .insertion_ns = c->insertion_ns,
    };
    pthread_mutex_unlock(&c->stats_lock);
}

static void redis_cache_free(response_cache *base) {
    redis_cache *c = (redis_cache *)base;
    redis_pool_free(c->pool);
    pthread_mutex_destroy(&c->stats_lock);
    free(c);
}

static const response_cache_ops redis_cache_ops = {
    .kind = "redis",
    .key = redis_cache_key,
    .lookup = redis_cache_lookup,
    .insert = redis_cache_insert,
    .get_stats = redis_cache_get_stats,
    .free = redis_cache_free,
};

osp_error *response_cache_redis_new(const osp_redis_cache_options *opts,
                                    response_cache **out) {
    redis_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return osp_error_out_of_memory();
    osp_error *err = redis_pool_new(opts, &c->pool);
    if (err) {
        free(c);
        return err;
    }
    pthread_mutex_init(&c->stats_lock, NULL);
    c->super.ops = &redis_cache_ops;
    const char *address = redis_pool_address(c->pool);
    if (!opts->connect_timeout_ms || !opts->socket_timeout_ms)
        OSP_LOG_WARN("redis response cache at %s: %s 0 (no limit, "
                     "Triton's default): a Redis that stops answering holds "
                     "requests until it answers; set connect_timeout and "
                     "socket_timeout",
                     address,
                     !opts->connect_timeout_ms && !opts->socket_timeout_ms
                         ? "connect_timeout and socket_timeout are"
                     : !opts->connect_timeout_ms ? "connect_timeout is"
                                                 : "socket_timeout is");
    /* One PING now, so that a wrong address or password shows at start;
     * the server starts either way and serves misses until Redis is back. */
    const char *ping[1] = {"PING"};
    size_t ping_len[1] = {4};
    redisReply *r = NULL;
    char why[256];
    if (redis_pool_command(c->pool, 1, ping, ping_len, &r, why, sizeof why) ==
        REDIS_POOL_OK) {
        OSP_LOG_INFO("redis response cache at %s: connected (pool of %d)",
                     address, opts->pool_size);
        freeReplyObject(r);
    }
    *out = &c->super;
    return NULL;
}
