/*
 * The asynchronous queue service's storage and delivery semantics (PAI-EAS
 * compatible): a store holds named queues ("svc" is a service's input
 * queue, "svc/sink" its sink); each queue holds items with a strictly
 * increasing index (never 0, continuing across deletes and restarts), a
 * priority, tags (one of them "requestId") and opaque data. Two stores
 * implement this one interface and pass the same tests: the embedded,
 * crash-safe log (the default) and Redis Streams (replicas sharing queues).
 *
 * Delivery order: higher priority first, then ascending index.
 *
 * Durability: a mutation's completion callback (put, delete, truncate,
 * commit, a get with auto_delete, end of stream) runs only once the change
 * is as durable as the store's fsync policy promises; an error in the
 * callback means nothing of that call was applied (a put that fails stores
 * nothing). Limits are checked before anything is stored.
 *
 * Errors (the frontend maps them to statuses), code and reason:
 *   payload over max_payload_bytes   INVALID_ARG, OSP_REASON_TOO_LARGE
 *   queue at max_length              UNAVAILABLE, OSP_REASON_QUEUE_FULL
 *   store unreachable (Redis down)   UNAVAILABLE, OSP_REASON_NONE
 *   store closing                    UNAVAILABLE, OSP_REASON_SHUTTING_DOWN
 *   no room on the store's disk      UNAVAILABLE, OSP_REASON_STORAGE_FULL
 *     (the embedded store; the change was not stored, later ones may be)
 *   unknown index where one is required   NOT_FOUND
 *
 * Threads: every function is thread-safe. Callbacks run on the caller's
 * thread (before the call returns) or on a store thread; they must not
 * block, and may call back into the store (commit from a deliver callback,
 * say). No store lock is held while a callback runs.
 *
 * Ownership: argument structs and the strings they point to are borrowed
 * for the call only. Items and errors handed to a callback belong to the
 * callback (osp_queue_item_free, osp_error_free).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct osp_queue_store osp_queue_store;
typedef struct osp_queue osp_queue;
typedef struct osp_queue_consumer osp_queue_consumer;

/* When an acknowledged mutation reaches the disk (embedded store). */
typedef enum osp_queue_fsync {
    OSP_QUEUE_FSYNC_BATCH = 0, /* default: one fsync covers every mutation
                                  waiting for it (group commit) before any
                                  of them is acknowledged */
    OSP_QUEUE_FSYNC_ALWAYS,    /* one fsync per mutation */
    OSP_QUEUE_FSYNC_NONE,      /* written to the OS, never fsynced: survives
                                  a process kill, not a machine crash */
} osp_queue_fsync;

typedef struct osp_queue_store_options {
    /* NULL or "": the embedded store in `dir`. "redis://HOST:PORT[/DB]":
     * Redis Streams. */
    const char *url;
    const char *dir;            /* embedded store directory (created) */
    osp_queue_fsync fsync;      /* embedded store only */
    uint64_t max_payload_bytes; /* inclusive; 0 = 524288 */
    uint64_t max_length;        /* items per queue; 0 = 4095 */
    /* This process's name among replicas (Redis consumer names, request
     * ids); NULL = hostname:pid. */
    const char *instance_id;
    /* How long the uncommitted items of a consumer that left without
     * coming back wait for the same gid.uid before they return to its
     * group; 0 = 10 s. Tests shorten it. */
    uint64_t consumer_grace_ns;
    /* Redis: the password AUTH sends (borrowed; wins over the URL's);
     * NULL: the URL's, if any. Never logged. */
    const char *password;
} osp_queue_store_options;

/* Opens (and for the embedded store recovers: a torn or corrupt log tail
 * is cut and logged, never fatal) the store. Caller owns *out. */
osp_error *osp_queue_store_open(const osp_queue_store_options *opts,
                                osp_queue_store **out);
/* Fails every get still waiting (UNAVAILABLE, SHUTTING_DOWN), waits for
 * acknowledgements in flight, flushes and frees. Every consumer must have
 * been closed before. */
void osp_queue_store_free(osp_queue_store *store);

/* The queue `name` (any non-empty UTF-8 up to 256 bytes; created empty on
 * first use). Borrowed; valid until osp_queue_store_free. */
osp_error *osp_queue_store_queue(osp_queue_store *store, const char *name,
                                 osp_queue **out);
/* Calls fn for every queue the store knows (for metrics). */
void osp_queue_store_foreach(osp_queue_store *store,
                             void (*fn)(void *ctx, osp_queue *queue),
                             void *ctx);
/* Records the store found damaged and skipped when it opened (its intact
 * records kept); 0 for a store that keeps no log of its own (Redis). */
uint64_t osp_queue_store_lost_records(osp_queue_store *store);
const char *osp_queue_name(const osp_queue *queue);

/* ---- items ---- */

typedef struct osp_queue_tag {
    const char *key;
    const char *value;
} osp_queue_tag;

/* One item, allocated as one block; free with osp_queue_item_free. */
typedef struct osp_queue_item {
    uint64_t index;
    int priority;           /* 0 normal; higher is delivered first */
    const char *request_id; /* also present among tags as "requestId" */
    const osp_queue_tag *tags;
    size_t n_tags;
    const void *data;
    size_t size;
    int64_t put_unix_ns; /* wall clock at put (queue wait, trace) */
} osp_queue_item;

void osp_queue_item_free(osp_queue_item *item);
/* Frees n items and the array (NULL is fine). */
void osp_queue_items_free(osp_queue_item **items, size_t n);

/* ---- mutations (asynchronous acknowledgement) ---- */

/* Exactly once per call; err owned by the callee (NULL = done). */
typedef void (*osp_queue_done_fn)(void *ctx, osp_error *err);

typedef struct osp_queue_put_args {
    const void *data;
    size_t size;
    const osp_queue_tag *tags; /* a "requestId" tag keeps its value as the
                                  item's request id; otherwise one is made */
    size_t n_tags;
    int priority;
} osp_queue_put_args;

/* request_id borrowed for the call; index 0 on error. */
typedef void (*osp_queue_put_fn)(void *ctx, osp_error *err, uint64_t index,
                                 const char *request_id);
void osp_queue_put(osp_queue *queue, const osp_queue_put_args *args,
                   osp_queue_put_fn done, void *ctx);

/* Deletes the listed items (unknown indexes are ignored) for every group. */
void osp_queue_delete(osp_queue *queue, const uint64_t *indexes, size_t n,
                      osp_queue_done_fn done, void *ctx);
/* Deletes every item with index < before. */
void osp_queue_truncate(osp_queue *queue, uint64_t before,
                        osp_queue_done_fn done, void *ctx);
/* A consumer `gid.uid` confirms it consumed the items: they are deleted
 * and its window slots freed (the next items are pushed at once).
 * Idempotent: committing an unknown or already committed index succeeds. */
void osp_queue_commit(osp_queue *queue, const char *gid, const char *uid,
                      const uint64_t *indexes, size_t n, osp_queue_done_fn done,
                      void *ctx);
/* Negative commit: the consumer gives the items back undone (code, reason
 * logged); they are deliverable again and its window slots freed. */
void osp_queue_reject(osp_queue *queue, const char *gid, const char *uid,
                      const uint64_t *indexes, size_t n, const char *code,
                      const char *reason, osp_queue_done_fn done, void *ctx);
/* End of stream: meta.state becomes "End"; force also deletes every item
 * not yet delivered. */
void osp_queue_end(osp_queue *queue, bool force, osp_queue_done_fn done,
                   void *ctx);

/* ---- reads ---- */

typedef struct osp_queue_get_args {
    uint64_t index;               /* 0 = from the head, else index >= this */
    size_t length;                /* at most this many items (>= 1) */
    const char *request_id;       /* NULL = any */
    const osp_queue_tag *filters; /* the item's tags must hold every pair */
    size_t n_filters;
    bool auto_delete;    /* the returned items are deleted (durably,
                            before the callback) */
    uint64_t timeout_ns; /* wait this long while nothing matches; 0 =
                            answer at once */
} osp_queue_get_args;

/* Exactly once per get, with 0..length items in delivery order; items and
 * err owned by the callee. Runs on a store thread when the get waited. */
typedef void (*osp_queue_items_fn)(void *ctx, osp_error *err,
                                   osp_queue_item **items, size_t n);
void osp_queue_get(osp_queue *queue, const osp_queue_get_args *args,
                   osp_queue_items_fn done, void *ctx);

/* Flat attributes (dotted keys, string values) as the EAS protocol lists
 * them: meta.*, stream.length/approxMaxLength/firstEntry/lastEntry
 * (first/last only when not empty), consumers.stats.total,
 * consumers.list.[i], groups.list.[i]. Caller frees with
 * osp_queue_attributes_free. */
typedef struct osp_queue_attribute {
    char *key;
    char *value;
} osp_queue_attribute;
osp_error *osp_queue_attributes(osp_queue *queue, osp_queue_attribute **out,
                                size_t *n);
void osp_queue_attributes_free(osp_queue_attribute *attrs, size_t n);

/* Where an item stands. found=false for an unknown index. */
typedef struct osp_queue_search_result {
    bool found;
    bool is_pending;       /* a consumer holds it (sent, not committed) */
    char consumer_id[256]; /* "<gid>.<uid>" when pending */
    uint64_t wait_count;   /* deliverable items ahead of it */
} osp_queue_search_result;
osp_error *osp_queue_search(osp_queue *queue, uint64_t index,
                            osp_queue_search_result *out);

/* Items stored that match the filters (and, when priority >= 0, have that
 * priority). */
osp_error *osp_queue_count(osp_queue *queue, int priority,
                           const osp_queue_tag *filters, size_t n_filters,
                           uint64_t *out);

/* Counters for /metrics, since start (length and consumers are current). */
typedef struct osp_queue_stats {
    uint64_t length;
    uint64_t puts;
    uint64_t gets;         /* items returned by get */
    uint64_t commits;      /* items committed */
    uint64_t redeliveries; /* items delivered again after a consumer left */
    uint64_t consumers;
} osp_queue_stats;
void osp_queue_get_stats(osp_queue *queue, osp_queue_stats *out);

/* ---- consumers (watch, built-in workers) ---- */

typedef struct osp_queue_consumer_args {
    const char *gid; /* consumer group: items are load-balanced within a
                        group; every group sees every item */
    const char *uid; /* consumer id "<gid>.<uid>" */
    /* 0 = from the head, N = items with index >= N, -1 = only items put
     * from now on. */
    int64_t start_index;
    unsigned window;  /* at most this many delivered and uncommitted */
    bool auto_commit; /* delivered = committed (the item is deleted) */
    const osp_queue_tag *filters; /* only items whose tags hold these */
    size_t n_filters;
    /* Pushes one item to the consumer (ownership of item moves). Never
     * called concurrently for one consumer, never after
     * osp_queue_consumer_close returns. Must not block. */
    void (*deliver)(void *ctx, osp_queue_item *item);
    void *ctx;
} osp_queue_consumer_args;

/* Joins the consumer to its group and starts pushing (deliver may run
 * before this returns, *out already set). When the same gid.uid closed
 * less than the grace period (consumer_grace_ns, 10 s) ago, its
 * uncommitted items are delivered to it again first. Caller owns *out. */
osp_error *osp_queue_consumer_open(osp_queue *queue,
                                   const osp_queue_consumer_args *args,
                                   osp_queue_consumer **out);
/* The consumer leaves: after this returns, deliver is not called again.
 * Its uncommitted items wait the grace period (10 s) for the same gid.uid
 * to come back, then go back to the group (counted as redeliveries when
 * sent again). Frees the consumer. */
void osp_queue_consumer_close(osp_queue_consumer *consumer);
/* Marks the consumer alive (a WebSocket ping). */
void osp_queue_consumer_touch(osp_queue_consumer *consumer);

#ifdef __cplusplus
}
#endif
