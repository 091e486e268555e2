/*
 * The local response cache (Triton's --cache-config=local,size=BYTES; the
 * interface is response_cache.h): a hash table of entries on a doubly
 * linked LRU list, under one mutex. An entry is one allocation: the
 * struct, its outputs' descriptions, names and bytes; its size counts
 * against the capacity. Keys are a 128-bit hash keyed by a seed random
 * per cache, so that a client cannot aim at another request's key.
 */
#include "cache_request_key.h"
#include "cache_value.h"
#include "response_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "osprey/clock.h"
#include "osprey/log.h"

typedef struct cached_output {
    char *name; /* inside the entry */
    osp_datatype dtype;
    osp_shape shape;
    unsigned char *data; /* inside the entry */
    size_t byte_size;
} cached_output;

/* The local key: 128 bits of the keyed hash. */
typedef struct local_key {
    uint64_t lo, hi;
} local_key;

typedef struct cache_entry {
    local_key key;
    struct cache_entry *chain;         /* next in its bucket */
    struct cache_entry *newer, *older; /* LRU list */
    size_t size;                       /* counted against capacity */
    size_t n_outputs;
    cached_output outputs[];
} cache_entry;

typedef struct local_cache {
    response_cache super;
    pthread_mutex_t lock;
    uint64_t seed[2];
    cache_entry **buckets;
    size_t n_buckets; /* a power of two */
    cache_entry *newest, *oldest;
    size_t entries, bytes, capacity;
    uint64_t lookups, hits, misses, inserts, evictions;
    uint64_t lookup_ns, insertion_ns;
} local_cache;

/* ---- keys ---------------------------------------------------------------- */

/* A two-lane streaming hash over 8-byte words, keyed by the cache's seed;
 * each field ends with its length, so fields cannot run into each other. */
typedef struct hasher {
    uint64_t a, b;
} hasher;

static uint64_t rotl(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

static void absorb(hasher *h, uint64_t w) {
    h->a = rotl(h->a ^ (w * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
    h->b = (rotl(h->b + (w * 0x9e3779b97f4a7c15ull), 27) ^ h->a) *
           0xff51afd7ed558ccdull;
}

static void absorb_bytes(hasher *h, const void *data, size_t n) {
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        absorb(h, w);
    }
    uint64_t tail = 0;
    memcpy(&tail, p + i, n - i);
    absorb(h, tail);
    absorb(h, (uint64_t)n);
}

static void absorb_field(void *ctx, const void *data, size_t n) {
    absorb_bytes(ctx, data, n);
}

static void absorb_number(void *ctx, uint64_t v) {
    absorb(ctx, v);
}

static uint64_t finish(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static local_key local_key_of(cache_key key) {
    local_key k = {0, 0};
    memcpy(&k.lo, key.bytes, 8);
    memcpy(&k.hi, key.bytes + 8, 8);
    return k;
}

static cache_key local_cache_key(const response_cache *base, const char *model,
                                 int64_t version,
                                 const osp_infer_request *req) {
    const local_cache *cache = (const local_cache *)base;
    hasher h = {cache->seed[0], cache->seed[1]};
    cache_key_sink sink = {absorb_field, absorb_number, &h};
    cache_key_walk(model, version, req, &sink);
    uint64_t lo = finish(h.a ^ rotl(h.b, 17)), hi = finish(h.b + h.a);
    cache_key key = {.len = 16};
    memcpy(key.bytes, &lo, 8);
    memcpy(key.bytes + 8, &hi, 8);
    return key;
}

/* ---- the table ----------------------------------------------------------- */

static size_t bucket_of(const local_cache *c, local_key key) {
    return (size_t)key.lo & (c->n_buckets - 1);
}

static cache_entry *find(local_cache *c, local_key key) {
    for (cache_entry *e = c->buckets[bucket_of(c, key)]; e; e = e->chain)
        if (e->key.lo == key.lo && e->key.hi == key.hi)
            return e;
    return NULL;
}

static void lru_unlink(local_cache *c, cache_entry *e) {
    if (e->newer)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push_newest(local_cache *c, cache_entry *e) {
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest)
        c->newest->newer = e;
    c->newest = e;
    if (!c->oldest)
        c->oldest = e;
}

static void remove_entry(local_cache *c, cache_entry *e) {
    cache_entry **link = &c->buckets[bucket_of(c, e->key)];
    while (*link != e)
        link = &(*link)->chain;
    *link = e->chain;
    lru_unlink(c, e);
    c->entries--;
    c->bytes -= e->size;
    free(e);
}

/* Doubles the buckets when there are more entries than buckets; staying
 * as it is when memory is short only makes chains longer. */
static void maybe_grow(local_cache *c) {
    if (c->entries < c->n_buckets)
        return;
    size_t n = c->n_buckets * 2;
    cache_entry **grown = calloc(n, sizeof(*grown));
    if (!grown)
        return;
    for (size_t b = 0; b < c->n_buckets; b++) {
        cache_entry *e = c->buckets[b];
        while (e) {
            cache_entry *next = e->chain;
            size_t to = (size_t)e->key.lo & (n - 1);
            e->chain = grown[to];
            grown[to] = e;
            e = next;
        }
    }
    free(c->buckets);
    c->buckets = grown;
    c->n_buckets = n;
}

static const response_cache_ops local_cache_ops;

osp_error *response_cache_local_new(size_t capacity, response_cache **out) {
    if (capacity == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the response cache needs a size greater than 0");
    local_cache *c = calloc(1, sizeof(*c));
    if (!c || !(c->buckets = calloc(64, sizeof(*c->buckets)))) {
        free(c);
        return osp_error_out_of_memory();
    }
    c->n_buckets = 64;
    c->capacity = capacity;
    if (getrandom(c->seed, sizeof(c->seed), 0) != (ssize_t)sizeof(c->seed)) {
        c->seed[0] = osp_now_ns() * 0x9e3779b97f4a7c15ull;
        c->seed[1] = (uint64_t)(uintptr_t)c ^ rotl(c->seed[0], 23);
    }
    pthread_mutex_init(&c->lock, NULL);
    c->super.ops = &local_cache_ops;
    *out = &c->super;
    return NULL;
}

static void local_cache_free(response_cache *base) {
    local_cache *c = (local_cache *)base;
    while (c->oldest)
        remove_entry(c, c->oldest);
    free(c->buckets);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- lookup and insert --------------------------------------------------- */

/* Copies e's outputs into resp. False when out of memory. */
static bool copy_out(const cache_entry *e, osp_infer_response *resp) {
    resp->outputs = calloc(e->n_outputs + 1, sizeof(*resp->outputs));
    if (!resp->outputs)
        return false;
    for (size_t i = 0; i < e->n_outputs; i++) {
        const cached_output *from = &e->outputs[i];
        osp_infer_output *to = &resp->outputs[i];
        resp->n_outputs = i + 1;
        to->name = strdup(from->name);
        to->data = osp_buffer_new_host(from->byte_size);
        if (!to->name || !to->data)
            return false;
        to->dtype = from->dtype;
        to->shape = from->shape;
        to->byte_size = from->byte_size;
        memcpy(to->data->data, from->data, from->byte_size);
    }
    return true;
}

static bool local_cache_lookup(response_cache *base, cache_key key,
                               osp_infer_response *resp) {
    local_cache *c = (local_cache *)base;
    uint64_t start = osp_now_ns();
    pthread_mutex_lock(&c->lock);
    c->lookups++;
    cache_entry *e = find(c, local_key_of(key));
    bool hit = e && copy_out(e, resp);
    if (e) { /* most recently used */
        lru_unlink(c, e);
        lru_push_newest(c, e);
    }
    if (hit)
        c->hits++;
    else
        c->misses++;
    c->lookup_ns += osp_now_ns() - start;
    pthread_mutex_unlock(&c->lock);
    if (!hit) /* a copy cut short by OOM leaves nothing behind */
        cache_response_drop_outputs(resp);
    return hit;
}

/* A copy of resp's outputs under key, or NULL with *why saying what
 * stopped it (larger than `limit` bytes, or out of memory). */
static cache_entry *entry_new(local_key key, const osp_infer_response *resp,
                              size_t limit, const char **why) {
    size_t size = sizeof(cache_entry) + resp->n_outputs * sizeof(cached_output);
    *why = "the response is larger than the whole cache";
    for (size_t i = 0; i < resp->n_outputs; i++) {
        const osp_infer_output *o = &resp->outputs[i];
        size_t need = (o->data ? o->byte_size : 0) + strlen(o->name) + 1;
        if (need > limit || size > limit - need)
            return NULL;
        size += need;
    }
    if (size > limit)
        return NULL;
    *why = "out of memory";
    cache_entry *e = malloc(size);
    if (!e)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->key = key;
    e->size = size;
    e->n_outputs = resp->n_outputs;
    unsigned char *p = (unsigned char *)&e->outputs[resp->n_outputs];
    for (size_t i = 0; i < resp->n_outputs; i++) {
        const osp_infer_output *o = &resp->outputs[i];
        cached_output *to = &e->outputs[i];
        to->dtype = o->dtype;
        to->shape = o->shape;
        to->byte_size = o->data ? o->byte_size : 0;
        to->data = p;
        memcpy(p, o->data ? o->data->data : "", to->byte_size);
        p += to->byte_size;
        to->name = (char *)p;
        memcpy(p, o->name, strlen(o->name) + 1);
        p += strlen(o->name) + 1;
    }
    return e;
}

static void local_cache_insert(response_cache *base, cache_key public_key,
                               const osp_infer_response *resp) {
    local_cache *c = (local_cache *)base;
    if (!resp || resp->error)
        return;
    uint64_t start = osp_now_ns();
    const char *why = NULL;
    local_key key = local_key_of(public_key);
    cache_entry *e = entry_new(key, resp, c->capacity, &why);
    if (!e) {
        /* Triton's words, with Osprey's reason and key */
        char hex[65];
        cache_key_hex(&public_key, hex);
        OSP_LOG_ERROR("Failed to insert key [%s] into response cache: %s", hex,
                      why);
        return;
    }
    pthread_mutex_lock(&c->lock);
    if (find(c, key)) { /* a concurrent identical miss came first */
        pthread_mutex_unlock(&c->lock);
        free(e);
        return;
    }
    while (c->bytes + e->size > c->capacity && c->oldest) {
        remove_entry(c, c->oldest);
        c->evictions++;
    }
    size_t b = bucket_of(c, key);
    e->chain = c->buckets[b];
    c->buckets[b] = e;
    lru_push_newest(c, e);
    c->entries++;
    c->bytes += e->size;
    c->inserts++;
    maybe_grow(c);
    c->insertion_ns += osp_now_ns() - start;
    pthread_mutex_unlock(&c->lock);
}

static void local_cache_get_stats(response_cache *base,
                                  response_cache_stats *out) {
    local_cache *c = (local_cache *)base;
    pthread_mutex_lock(&c->lock);
    *out = (response_cache_stats){
        .entries = c->entries,
        .bytes = c->bytes,
        .capacity = c->capacity,
        .lookups = c->lookups,
        .hits = c->hits,
        .misses = c->misses,
        .inserts = c->inserts,
        .evictions = c->evictions,
        .lookup_ns = c->lookup_ns,
        .insertion_ns = c->insertion_ns,
    };
    pthread_mutex_unlock(&c->lock);
}

static const response_cache_ops local_cache_ops = {
    .kind = "local",
    .key = local_cache_key,
    .lookup = local_cache_lookup,
    .insert = local_cache_insert,
    .get_stats = local_cache_get_stats,
    .free = local_cache_free,
};
