/*
 * The scheduler queue of one model version and its dynamic batcher: which
 * queued requests run together, in which order, and when.
 *
 * Pure bookkeeping with an injected clock: no threads, no locks, no clock
 * reads and no allocation per request (entries are embedded in the caller's
 * requests). model.c wraps it in a mutex and a condition variable; the unit
 * tests drive it with a fake clock.
 *
 * Semantics follow Triton's dynamic batcher (core dynamic_batch_scheduler.cc
 * and scheduler_utils.cc):
 * - Without `dynamic_batching` the queue is plain FIFO and every batch is a
 *   single request; priorities, queue policies and timeouts do not apply.
 * - With it, requests wait in priority levels 1..priority_levels (1 is the
 *   highest; a single level 0 when priority_levels is 0). A request's
 *   priority 0, or one above priority_levels, means default_priority_level.
 *   FIFO within a level.
 * - Each level has a queue policy (its priority_queue_policy entry, else
 *   default_queue_policy). max_queue_size bounds the requests waiting at
 *   that level: enqueue fails with UNAVAILABLE "Exceeds maximum queue
 *   size". A request's deadline is default_timeout_microseconds after
 *   enqueue; with allow_timeout_override a request's own timeout replaces
 *   it when it is shorter (never when the default is 0 = no timeout, as in
 *   Triton). Once past its deadline a request is REJECTed (handed back as
 *   expired; the caller fails it with "Request timeout expired") or DELAYed
 *   (moved behind every unexpired request of its level; it still runs).
 * - A batch is built by walking the queue in order (levels ascending, each
 *   level's unexpired requests, then its delayed ones), counting each
 *   request's batch size (at least 1), up to max_batch_size (1 for models
 *   that do not batch). The walk stops at the first request whose inputs
 *   are incompatible with the first one of the batch (the compatible
 *   callback: non-batch shapes, datatypes, optional inputs given), which
 *   then sends what precedes it at once.
 * - preferred_batch_size (default: [max_batch_size], as Triton normalises
 *   the config): the largest preferred size the walk reaches is sent at
 *   once; when the next request would overflow the largest preferred size
 *   the batch so far is sent. Otherwise the batch waits until the oldest
 *   request in it has waited max_queue_delay_microseconds (0 = no wait:
 *   whatever is queued goes) and then goes as it is.
 * - preserve_ordering: every taken request gets a sequence number in the
 *   order requests leave the queue (arrival order within a level), and the
 *   reorder buffer below releases finished requests in that order, across
 *   instances.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One queued request, embedded in the caller's request object. The caller
 * fills the first four fields before batcher_enqueue; the rest belong to
 * the batcher. */
typedef struct batcher_entry {
    void *owner;         /* the caller's request; never touched */
    int64_t batch_size;  /* rows it adds to a batch; < 1 counts as 1 */
    uint64_t priority;   /* as requested: 0 = the default level */
    uint64_t timeout_us; /* as requested: 0 = none */

    uint64_t enqueue_ns;        /* when it entered the queue */
    uint64_t deadline_ns;       /* 0 = none (or already expired and delayed) */
    uint64_t sequence;          /* order of leaving the queue (batcher_take) */
    struct batcher_entry *next; /* queue, expired or reorder list link */
} batcher_entry;

/* Whether b may run in the same batch as a (the batch's first request).
 * Called only for models that batch. */
typedef bool (*batcher_compatible_fn)(const batcher_entry *a,
                                      const batcher_entry *b, void *ctx);

typedef struct batcher_list {
    batcher_entry *head, *tail;
} batcher_list;

typedef struct batcher_level {
    uint64_t level; /* priority level number; 0 without levels */
    osp_queue_policy policy;
    batcher_list unexpired; /* FIFO */
    batcher_list delayed;   /* expired under DELAY, FIFO */
    size_t count;           /* entries in both lists */
    bool permanent;         /* kept while empty (default or own policy) */
} batcher_level;

typedef struct batcher {
    bool dynamic;       /* dynamic_batching was configured */
    int64_t max_batch;  /* rows per batch, >= 1 */
    int64_t *preferred; /* ascending, unique, each in 1..max_batch */
    size_t n_preferred;
    int64_t max_preferred;
    uint64_t max_delay_ns;
    uint64_t priority_levels; /* 0 = a single level 0 */
    uint64_t default_level;
    osp_queue_policy default_policy;
    osp_priority_queue_policy *level_policies; /* priority_queue_policy */
    size_t n_level_policies;
    /* Levels in priority order (ascending number); created on first use. */
    batcher_level **levels;
    size_t n_levels;
    size_t count;       /* entries queued, all levels */
    size_t n_deadlines; /* queued entries with a deadline */
    uint64_t next_sequence;
    batcher_compatible_fn compatible;
    void *compatible_ctx;
} batcher;

/* Sets up an empty queue for a model with `config` (borrowed; the values
 * are copied). `compatible` (with ctx) decides which requests may share a
 * batch; it may be NULL when every request may. */
osp_error *batcher_init(batcher *b, const osp_model_config *config,
                        batcher_compatible_fn compatible, void *ctx);
/* Frees the batcher's own memory. Entries still queued are forgotten (the
 * caller owns them); callers drain the queue first. */
void batcher_destroy(batcher *b);

/* Queues entry e (borrowed until it is taken or expired) at time now_ns.
 * Errors: UNAVAILABLE "Exceeds maximum queue size"; UNAVAILABLE when a new
 * priority level cannot be allocated. On error e is not queued. */
osp_error *batcher_enqueue(batcher *b, batcher_entry *e, uint64_t now_ns);

/* Decides at now_ns what runs next.
 * - Entries past their deadline under REJECT are removed and prepended to
 *   *expired (linked by ->next; the caller fails them).
 * - Returns the number of entries removed into batch[0..] (at most cap;
 *   they run as one batch, in this order) when a batch is ready.
 * - Returns 0 when nothing should run yet: *wait_ns is then how long to wait
 *   before asking again unless a request arrives (0 = the queue is empty:
 *   wait for an arrival).
 * flush: send whatever is queued now (shutdown), ignoring the delay. */
size_t batcher_take(batcher *b, uint64_t now_ns, bool flush,
                    batcher_entry **batch, size_t cap, batcher_entry **expired,
                    uint64_t *wait_ns);

/* Removes every queued entry for which drop(e, ctx) is true (a request its
 * client cancelled, as Triton's queue skips them) and prepends it to
 * *removed (linked by ->next; the caller answers them). Returns how many. */
typedef bool (*batcher_drop_fn)(const batcher_entry *e, void *ctx);
size_t batcher_remove_if(batcher *b, batcher_drop_fn drop, void *ctx,
                         batcher_entry **removed);

/* Requests waiting (all levels). */
size_t batcher_queued(const batcher *b);
/* The most entries one batch can hold: a batch array this long is enough
 * for batcher_take. */
size_t batcher_max_entries(const batcher *b);

/* ---- response ordering ----------------------------------------------------
 */

/* Releases finished entries in the order of their ->sequence, which must
 * run 0, 1, 2, ... without gaps (batcher_take assigns them so). */
typedef struct reorder_buffer {
    uint64_t next;       /* the sequence number to release next */
    batcher_entry *held; /* finished early, ascending sequence */
} reorder_buffer;

void reorder_init(reorder_buffer *rb);
/* Records that e (borrowed) has finished. Returns the entries that may be
 * delivered now, in order, linked by ->next (possibly none: NULL). */
batcher_entry *reorder_push(reorder_buffer *rb, batcher_entry *e);
/* Entries finished but held back behind an unfinished one. */
size_t reorder_held(const reorder_buffer *rb);

#ifdef __cplusplus
}
#endif
