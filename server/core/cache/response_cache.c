/*
 * The response cache's interface (response_cache.h): each call goes to the
 * implementation behind the cache.
 */
#include "response_cache.h"

void response_cache_free(response_cache *cache) {
    if (cache)
        cache->ops->free(cache);
}

cache_key response_cache_key(const response_cache *cache, const char *model,
                             int64_t version, const osp_infer_request *req) {
    return cache->ops->key(cache, model, version, req);
}

bool response_cache_lookup(response_cache *cache, cache_key key,
                           osp_infer_response *resp) {
    return cache->ops->lookup(cache, key, resp);
}

void response_cache_insert(response_cache *cache, cache_key key,
                           const osp_infer_response *resp) {
    cache->ops->insert(cache, key, resp);
}

void response_cache_get_stats(response_cache *cache,
                              response_cache_stats *out) {
    cache->ops->get_stats(cache, out);
}
