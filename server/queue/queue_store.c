/*
 * The public queue API (include/osprey/queue.h): checks what the contract
 * promises callers, fills option defaults, and dispatches to the store
 * that made the handle (queue_store_impl.h).
 */
#include <stdlib.h>
#include <string.h>

#include "queue_store_impl.h"

osp_error *osp_queue_store_open(const osp_queue_store_options *opts,
                                osp_queue_store **out) {
    osp_queue_store_options o = *opts;
    if (o.max_payload_bytes == 0)
        o.max_payload_bytes = QUEUE_DEFAULT_MAX_PAYLOAD_BYTES;
    if (o.max_length == 0)
        o.max_length = QUEUE_DEFAULT_MAX_LENGTH;
    if (o.consumer_grace_ns == 0)
        o.consumer_grace_ns = QUEUE_CONSUMER_GRACE_NS;
    if (o.url == NULL || o.url[0] == '\0') {
        if (o.dir == NULL || o.dir[0] == '\0')
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "the embedded queue store needs a directory");
        return queue_embedded_open(&o, out);
    }
    if (strncmp(o.url, "redis://", 8) == 0)
        return queue_redis_open(&o, out);
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "unknown queue store '%s' (expected "
                         "redis://HOST:PORT[/DB], or none for the embedded "
                         "store)",
                         o.url);
}

void osp_queue_store_free(osp_queue_store *store) {
    if (store != NULL)
        store->ops->store_free(store);
}

osp_error *osp_queue_store_queue(osp_queue_store *store, const char *name,
                                 osp_queue **out) {
    size_t len = name != NULL ? strlen(name) : 0;
    if (len == 0 || len > QUEUE_MAX_NAME_BYTES)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "a queue name has 1 to %u bytes",
                             QUEUE_MAX_NAME_BYTES);
    return store->ops->store_queue(store, name, out);
}

void osp_queue_store_foreach(osp_queue_store *store,
                             void (*fn)(void *ctx, osp_queue *queue),
                             void *ctx) {
    store->ops->store_foreach(store, fn, ctx);
}

uint64_t osp_queue_store_lost_records(osp_queue_store *store) {
    return store->ops->store_lost_records
               ? store->ops->store_lost_records(store)
               : 0;
}

const char *osp_queue_name(const osp_queue *queue) {
    return queue->name;
}

void osp_queue_put(osp_queue *queue, const osp_queue_put_args *args,
                   osp_queue_put_fn done, void *ctx) {
    queue->ops->put(queue, args, done, ctx);
}

void osp_queue_delete(osp_queue *queue, const uint64_t *indexes, size_t n,
                      osp_queue_done_fn done, void *ctx) {
    queue->ops->delete_items(queue, indexes, n, done, ctx);
}

void osp_queue_truncate(osp_queue *queue, uint64_t before,
                        osp_queue_done_fn done, void *ctx) {
    queue->ops->truncate(queue, before, done, ctx);
}

void osp_queue_commit(osp_queue *queue, const char *gid, const char *uid,
                      const uint64_t *indexes, size_t n, osp_queue_done_fn done,
                      void *ctx) {
    queue->ops->commit(queue, gid, uid, indexes, n, done, ctx);
}

void osp_queue_reject(osp_queue *queue, const char *gid, const char *uid,
                      const uint64_t *indexes, size_t n, const char *code,
                      const char *reason, osp_queue_done_fn done, void *ctx) {
    queue->ops->reject(queue, gid, uid, indexes, n, code, reason, done, ctx);
}

void osp_queue_end(osp_queue *queue, bool force, osp_queue_done_fn done,
                   void *ctx) {
    queue->ops->end(queue, force, done, ctx);
}

void osp_queue_get(osp_queue *queue, const osp_queue_get_args *args,
                   osp_queue_items_fn done, void *ctx) {
    if (args->length == 0) {
        done(ctx,
             osp_error_new(OSP_ERROR_INVALID_ARG,
                           "a get asks for at least one item"),
             NULL, 0);
        return;
    }
    queue->ops->get(queue, args, done, ctx);
}

osp_error *osp_queue_attributes(osp_queue *queue, osp_queue_attribute **out,
                                size_t *n) {
    return queue->ops->attributes(queue, out, n);
}

void osp_queue_attributes_free(osp_queue_attribute *attrs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(attrs[i].key);
        free(attrs[i].value);
    }
    free(attrs);
}

osp_error *osp_queue_search(osp_queue *queue, uint64_t index,
                            osp_queue_search_result *out) {
    memset(out, 0, sizeof *out);
    return queue->ops->search(queue, index, out);
}

osp_error *osp_queue_count(osp_queue *queue, int priority,
                           const osp_queue_tag *filters, size_t n_filters,
                           uint64_t *out) {
    return queue->ops->count(queue, priority, filters, n_filters, out);
}

void osp_queue_get_stats(osp_queue *queue, osp_queue_stats *out) {
    memset(out, 0, sizeof *out);
    queue->ops->get_stats(queue, out);
}

osp_error *osp_queue_consumer_open(osp_queue *queue,
                                   const osp_queue_consumer_args *args,
                                   osp_queue_consumer **out) {
    if (args->deliver == NULL || args->gid == NULL || args->uid == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "a consumer needs a gid, a uid and a deliver "
                             "callback");
    if (args->window == 0 && !args->auto_commit)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "a consumer's window is at least 1");
    return queue->ops->consumer_open(queue, args, out);
}

void osp_queue_consumer_close(osp_queue_consumer *consumer) {
    if (consumer != NULL)
        consumer->queue->ops->consumer_close(consumer);
}

void osp_queue_consumer_touch(osp_queue_consumer *consumer) {
    consumer->queue->ops->consumer_touch(consumer);
}
