/*
 * One queue's semantics in memory, without locks, threads or a disk: items
 * in delivery order (priority desc, index asc) and by index, the request-id
 * index, consumer groups, consumers with their windows and held (pending)
 * items, the grace period of a consumer that left, and the gets waiting for
 * an item. The embedded store (queue_embedded.c) wraps each call in the
 * queue's lock and turns what a call did (mem_effects) into log records,
 * deliveries and callbacks once the lock is released; recovery replays the
 * log through the same calls.
 *
 * Every function expects the caller to hold the queue's lock; none blocks,
 * none calls a user callback.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queue_store_impl.h"

typedef struct mem_queue mem_queue;
typedef struct mem_group mem_group;
typedef struct mem_entry mem_entry;

typedef struct mem_limits {
    uint64_t max_payload_bytes; /* inclusive */
    uint64_t max_length;
    uint64_t grace_ns; /* a consumer that left keeps its items */
} mem_limits;

typedef enum mem_consumer_state {
    MEM_CONSUMER_RUNNING = 0,
    MEM_CONSUMER_LEAVING, /* closed; its held items wait for it (grace) */
    MEM_CONSUMER_GONE,    /* out of its group; freed at the last unref */
} mem_consumer_state;

/* A consumer gid.uid. The group holds one reference while the consumer is
 * in it, an open handle one, and each mem_effects kick entry one. The
 * outbox holds items already picked for it (held, or deleted for an
 * auto-commit consumer), not yet passed to deliver: the store drains it
 * with no lock held, one thread at a time (`delivering`). */
typedef struct mem_consumer {
    mem_queue *queue;
    mem_group *group;
    char *uid;
    char *id; /* "<gid>.<uid>" */
    mem_consumer_state state;
    uint64_t leave_deadline_ns; /* LEAVING: when the items go back */
    uint64_t last_seen_ns;
    uint64_t min_index;  /* items with a smaller index are not for it */
    uint64_t last_index; /* last index delivered (attributes) */
    unsigned window;
    bool auto_commit;
    osp_queue_tag *filters; /* one block with the strings */
    size_t n_filters;
    mem_entry **held; /* delivered, not committed */
    size_t n_held, cap_held;
    osp_queue_item **outbox; /* FIFO, [outbox_head, n_outbox) */
    size_t outbox_head, n_outbox, cap_outbox;
    void (*deliver)(void *ctx, osp_queue_item *item);
    void *deliver_ctx;
    int refs;
    bool delivering; /* a thread is inside deliver for this consumer */
    bool closing;    /* its handle is closing: deliver no more */
    pthread_t deliver_thread;
    struct mem_consumer *next; /* in its group */
} mem_consumer;

/* A get waiting for an item (long poll). Made by the store, owned by the
 * queue while it waits; mem_effects.served hands it back with its answer. */
typedef struct mem_get {
    osp_queue_get_args args; /* strings point into `strings` */
    char *strings;           /* request id and filters, one block */
    osp_queue_tag *filters;
    uint64_t deadline_ns;
    osp_queue_items_fn done;
    void *ctx;
    /* the answer */
    osp_queue_item **items;
    size_t n_items;
    osp_error *err;
    struct mem_get *prev, *next; /* waiting list */
} mem_get;

/* What one call did, for the caller to act on after unlocking: indexes
 * deleted (each needs a DELETE log record), gets answered, consumers with
 * new outbox items (one reference each). oom: a step could not be recorded
 * (an out-of-memory while growing these arrays). */
typedef struct mem_effects {
    uint64_t *deleted;
    size_t n_deleted, cap_deleted;
    mem_get **served;
    size_t n_served, cap_served;
    mem_consumer **kick;
    size_t n_kick, cap_kick;
    bool oom;
} mem_effects;

void mem_effects_init(mem_effects *eff);
/* Frees the arrays only (the caller has taken the gets and references). */
void mem_effects_destroy(mem_effects *eff);

/* A new empty queue; name copied. NULL when out of memory. */
mem_queue *mem_queue_new(const char *name, const mem_limits *limits);
/* Frees the queue, its items, groups and consumers (which must have no
 * handle left) and every waiting get (their callbacks are NOT called). */
void mem_queue_free(mem_queue *q);
const char *mem_queue_name(const mem_queue *q);

/* The index the next put gets (>= 1). */
uint64_t mem_queue_next_index(const mem_queue *q);
/* Recovery: the next index becomes at least `next`. */
void mem_queue_raise_next_index(mem_queue *q, uint64_t next);
bool mem_queue_ended(const mem_queue *q);
void mem_queue_set_ended(mem_queue *q, bool ended);
size_t mem_queue_length(const mem_queue *q);

/* The put limits: TOO_LARGE over max_payload_bytes, QUEUE_FULL at
 * max_length. NULL when a put of `size` bytes may be stored. */
osp_error *mem_queue_check_put(const mem_queue *q, size_t size);

/* Stores item (ownership moves; its index must be >= next index, which
 * then moves past it), answers the waiting gets it matches and pushes it
 * to consumers. false when out of memory (the item is freed, nothing
 * changed). `replay`: recovery, no stats. */
bool mem_queue_put(mem_queue *q, osp_queue_item *item, bool replay,
                   mem_effects *eff);

/* Deletes the listed items (unknown ones ignored); each deleted index is
 * added to eff->deleted. Returns the number deleted. */
size_t mem_queue_delete(mem_queue *q, const uint64_t *indexes, size_t n,
                        mem_effects *eff);
/* Deletes every item with index < before. */
size_t mem_queue_truncate(mem_queue *q, uint64_t before, mem_effects *eff);
/* Deletes the items (for every group) and counts them as committed. */
void mem_queue_commit(mem_queue *q, const uint64_t *indexes, size_t n,
                      mem_effects *eff);
/* The consumer gid.uid gives the items back: deliverable again. */
void mem_queue_reject(mem_queue *q, const char *gid, const char *uid,
                      const uint64_t *indexes, size_t n, mem_effects *eff);
/* End of stream; force deletes every item no consumer holds. */
void mem_queue_end(mem_queue *q, bool force, mem_effects *eff);

/* Answers get at once when an item matches or its timeout is 0 (it is
 * then added to eff->served), else keeps it waiting (ownership moves to
 * the queue until it is served). An error (out of memory): nothing was
 * done, the caller still owns get and answers it. */
osp_error *mem_queue_get(mem_queue *q, mem_get *get, uint64_t now_ns,
                         mem_effects *eff);
/* Answers the gets whose deadline passed (no items) and gives the items of
 * consumers whose grace ended back to their group. *next_deadline_ns is
 * lowered to the earliest deadline still ahead. */
void mem_queue_expire(mem_queue *q, uint64_t now_ns, uint64_t *next_deadline_ns,
                      mem_effects *eff);
/* Answers every waiting get with err_fn()'s error (store closing). */
void mem_queue_fail_waiting(mem_queue *q, osp_error *(*err_fn)(void),
                            mem_effects *eff);

/* Joins (or, for a gid.uid still in its grace period, rejoins: its held
 * items go to its outbox again first) and pushes what the window allows.
 * The returned consumer carries one reference for the caller's handle.
 * NULL when out of memory. */
mem_consumer *mem_consumer_open(mem_queue *q,
                                const osp_queue_consumer_args *args,
                                uint64_t now_ns, mem_effects *eff);
/* The handle closes: the outbox is dropped, the held items wait
 * grace_ns for the same gid.uid (or the consumer leaves its group at once
 * when it holds nothing). Drops the handle's reference; returns true when
 * the caller must free the consumer (mem_consumer_free). */
bool mem_consumer_close(mem_consumer *c, uint64_t now_ns, mem_effects *eff);
void mem_consumer_touch(mem_consumer *c, uint64_t now_ns);
/* The next outbox item (ownership moves), NULL when empty. */
osp_queue_item *mem_consumer_outbox_pop(mem_consumer *c);
void mem_consumer_ref(mem_consumer *c);
/* true when that was the last reference: call mem_consumer_free. */
bool mem_consumer_unref(mem_consumer *c);
void mem_consumer_free(mem_consumer *c);

/* Reads. */
osp_error *mem_queue_attributes(mem_queue *q, const char *backend,
                                uint64_t now_ns, osp_queue_attribute **out,
                                size_t *n);
void mem_queue_search(mem_queue *q, uint64_t index,
                      osp_queue_search_result *out);
uint64_t mem_queue_count(mem_queue *q, int priority,
                         const osp_queue_tag *filters, size_t n_filters);
void mem_queue_stats(mem_queue *q, osp_queue_stats *out);
