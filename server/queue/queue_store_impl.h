/*
 * Inside the queue service: the table a store implements behind
 * include/osprey/queue.h, and helpers every store shares. queue_store.c
 * dispatches each osp_queue_* call through the table of the store that
 * made the handle.
 *
 * Handles embed their base first (h2o's `super`): an implementation's store
 * struct starts with `osp_queue_store super`, its queue with `osp_queue
 * super`, its consumer with `osp_queue_consumer super`, and casts back.
 * The bases are filled by the implementation (ops and name included); the
 * dispatch layer never allocates them.
 */
#pragma once

#include "osprey/queue.h"

#define QUEUE_DEFAULT_MAX_PAYLOAD_BYTES 524288u
#define QUEUE_DEFAULT_MAX_LENGTH 4095u
#define QUEUE_MAX_NAME_BYTES 256u
/* How long the uncommitted items of a consumer that dropped wait for the
 * same gid.uid to come back before they return to its group, unless
 * osp_queue_store_options.consumer_grace_ns says otherwise. */
#define QUEUE_CONSUMER_GRACE_NS (10ull * 1000 * 1000 * 1000)

typedef struct queue_store_ops queue_store_ops;

struct osp_queue_store {
    const queue_store_ops *ops;
};

struct osp_queue {
    const queue_store_ops *ops;
    osp_queue_store *store;
    char *name; /* owned by the implementation */
};

struct osp_queue_consumer {
    osp_queue *queue;
};

/* One slot per osp_queue_* call, with the same contract as the public
 * function (see include/osprey/queue.h); the dispatch layer has already
 * checked what it documents (non-NULL handles, length >= 1, name rules). */
struct queue_store_ops {
    const char *name; /* "embedded", "redis": meta.backend */
    void (*store_free)(osp_queue_store *store);
    osp_error *(*store_queue)(osp_queue_store *store, const char *name,
                              osp_queue **out);
    void (*store_foreach)(osp_queue_store *store,
                          void (*fn)(void *ctx, osp_queue *queue), void *ctx);
    /* (optional) osp_queue_store_lost_records; NULL answers 0 */
    uint64_t (*store_lost_records)(osp_queue_store *store);

    void (*put)(osp_queue *queue, const osp_queue_put_args *args,
                osp_queue_put_fn done, void *ctx);
    void (*delete_items)(osp_queue *queue, const uint64_t *indexes, size_t n,
                         osp_queue_done_fn done, void *ctx);
    void (*truncate)(osp_queue *queue, uint64_t before, osp_queue_done_fn done,
                     void *ctx);
    void (*commit)(osp_queue *queue, const char *gid, const char *uid,
                   const uint64_t *indexes, size_t n, osp_queue_done_fn done,
                   void *ctx);
    void (*reject)(osp_queue *queue, const char *gid, const char *uid,
                   const uint64_t *indexes, size_t n, const char *code,
                   const char *reason, osp_queue_done_fn done, void *ctx);
    void (*end)(osp_queue *queue, bool force, osp_queue_done_fn done,
                void *ctx);

    void (*get)(osp_queue *queue, const osp_queue_get_args *args,
                osp_queue_items_fn done, void *ctx);
    osp_error *(*attributes)(osp_queue *queue, osp_queue_attribute **out,
                             size_t *n);
    osp_error *(*search)(osp_queue *queue, uint64_t index,
                         osp_queue_search_result *out);
    osp_error *(*count)(osp_queue *queue, int priority,
                        const osp_queue_tag *filters, size_t n_filters,
                        uint64_t *out);
    void (*get_stats)(osp_queue *queue, osp_queue_stats *out);

    osp_error *(*consumer_open)(osp_queue *queue,
                                const osp_queue_consumer_args *args,
                                osp_queue_consumer **out);
    void (*consumer_close)(osp_queue_consumer *consumer);
    void (*consumer_touch)(osp_queue_consumer *consumer);
};

/* The two stores' constructors (queue_embedded.c, queue_redis.c). opts has
 * its defaults filled in. Caller owns *out. */
osp_error *queue_embedded_open(const osp_queue_store_options *opts,
                               osp_queue_store **out);
osp_error *queue_redis_open(const osp_queue_store_options *opts,
                            osp_queue_store **out);

/* ---- shared helpers (queue_item.c) ---- */

/* A new item as one block holding every string and the data (copied).
 * request_id NULL: taken from a "requestId" tag, else request_id_buf must
 * be given. The item's tags are `tags` plus "requestId" when the input
 * lacks it. NULL when out of memory. Caller owns the item. */
osp_queue_item *queue_item_new(uint64_t index, int priority,
                               const char *request_id,
                               const osp_queue_tag *tags, size_t n_tags,
                               const void *data, size_t size,
                               int64_t put_unix_ns);
/* A copy of item (one block). NULL when out of memory. */
osp_queue_item *queue_item_clone(const osp_queue_item *item);
/* true when the item's tags hold every filter pair. */
bool queue_item_matches(const osp_queue_item *item,
                        const osp_queue_tag *filters, size_t n_filters);
/* The value of tag `key` in tags, or NULL. */
const char *queue_tags_find(const osp_queue_tag *tags, size_t n,
                            const char *key);
/* A fresh request id: 36 characters of a random (v4) UUID plus NUL. */
void queue_request_id_new(char out[37]);
/* Appends one attribute (both strings copied) to *attrs of *n entries.
 * false when out of memory (nothing appended). */
bool queue_attributes_add(osp_queue_attribute **attrs, size_t *n,
                          const char *key, const char *value_fmt, ...)
    __attribute__((format(printf, 4, 5)));
