/*
 * The dynamic batcher (see batcher.h for the rules it implements).
 *
 * Levels live in an array sorted by level number. The default level and
 * the levels with their own policy exist for the batcher's lifetime; any
 * other level a request names is created when it first gets a request and
 * freed when it empties, so a client cycling through priorities cannot
 * grow the array.
 */
#include "batcher.h"

#include <stdlib.h>
#include <string.h>

/* ---- lists ------------------------------------------------------------------
 */

static void list_append(batcher_list *l, batcher_entry *e) {
    e->next = NULL;
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
}

static batcher_entry *list_pop(batcher_list *l) {
    batcher_entry *e = l->head;
    if (e) {
        l->head = e->next;
        if (!l->head)
            l->tail = NULL;
        e->next = NULL;
    }
    return e;
}

static int64_t rows_of(const batcher_entry *e) {
    return e->batch_size > 0 ? e->batch_size : 1;
}

/* ---- levels -----------------------------------------------------------------
 */

/* The policy of level `number`: its priority_queue_policy, else the
 * default. Sets *permanent when the level must outlive its requests. */
static osp_queue_policy level_policy(const batcher *b, uint64_t number,
                                     bool *permanent) {
    for (size_t i = 0; i < b->n_level_policies; i++) {
        if (b->level_policies[i].level == number) {
            *permanent = true;
            return b->level_policies[i].policy;
        }
    }
    *permanent = number == b->default_level;
    return b->default_policy;
}

/* Finds level `number`, creating it in priority order. NULL on allocation
 * failure. */
static batcher_level *level_get(batcher *b, uint64_t number) {
    size_t pos = 0;
    while (pos < b->n_levels && b->levels[pos]->level < number)
        pos++;
    if (pos < b->n_levels && b->levels[pos]->level == number)
        return b->levels[pos];
    batcher_level *lvl = calloc(1, sizeof(*lvl));
    batcher_level **bigger =
        lvl ? realloc(b->levels, sizeof(*bigger) * (b->n_levels + 1)) : NULL;
    if (!bigger) {
        free(lvl);
        return NULL;
    }
    b->levels = bigger;
    memmove(&bigger[pos + 1], &bigger[pos],
            sizeof(*bigger) * (b->n_levels - pos));
    lvl->level = number;
    lvl->policy = level_policy(b, number, &lvl->permanent);
    bigger[pos] = lvl;
    b->n_levels++;
    return lvl;
}

/* Frees level index i if it is empty and not permanent. */
static void level_release(batcher *b, size_t i) {
    batcher_level *lvl = b->levels[i];
    if (lvl->count > 0 || lvl->permanent)
        return;
    memmove(&b->levels[i], &b->levels[i + 1],
            sizeof(*b->levels) * (b->n_levels - i - 1));
    b->n_levels--;
    free(lvl);
}

/* ---- setup ------------------------------------------------------------------
 */

static int compare_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* preferred_batch_size as a sorted set; Triton fills an empty list with
 * max_batch_size. Sizes a batch can never have are ignored. */
static osp_error *init_preferred(batcher *b, const osp_dynamic_batching *db) {
    b->preferred = calloc(db->n_preferred_batch_sizes + 1, sizeof(int64_t));
    if (!b->preferred)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < db->n_preferred_batch_sizes; i++) {
        int64_t size = db->preferred_batch_sizes[i];
        if (size >= 1 && size <= b->max_batch)
            b->preferred[b->n_preferred++] = size;
    }
    if (b->n_preferred == 0)
        b->preferred[b->n_preferred++] = b->max_batch;
    qsort(b->preferred, b->n_preferred, sizeof(int64_t), compare_i64);
    size_t unique = 0;
    for (size_t i = 0; i < b->n_preferred; i++)
        if (unique == 0 || b->preferred[unique - 1] != b->preferred[i])
            b->preferred[unique++] = b->preferred[i];
    b->n_preferred = unique;
    b->max_preferred = b->preferred[unique - 1];
    return NULL;
}

osp_error *batcher_init(batcher *b, const osp_model_config *config,
                        batcher_compatible_fn compatible, void *ctx) {
    const osp_dynamic_batching *db = &config->dynamic_batching;
    osp_error *err = NULL;
    memset(b, 0, sizeof(*b));
    b->dynamic = db->enabled;
    b->max_batch = config->max_batch_size > 0 ? config->max_batch_size : 1;
    b->compatible = compatible;
    b->compatible_ctx = ctx;
    if (b->dynamic) {
        /* Saturated: a delay beyond 584 years is as good as forever. */
        b->max_delay_ns = db->max_queue_delay_us < UINT64_MAX / 1000
                              ? db->max_queue_delay_us * 1000
                              : UINT64_MAX;
        b->priority_levels = db->priority_levels;
        b->default_level = db->priority_levels ? db->default_priority_level : 0;
        b->default_policy = db->default_queue_policy;
        if ((err = init_preferred(b, db)))
            goto out;
        if (db->priority_levels && db->n_priority_queue_policies) {
            b->level_policies = calloc(db->n_priority_queue_policies,
                                       sizeof(*b->level_policies));
            if (!b->level_policies) {
                err = osp_error_out_of_memory();
                goto out;
            }
            memcpy(b->level_policies, db->priority_queue_policies,
                   sizeof(*b->level_policies) * db->n_priority_queue_policies);
            b->n_level_policies = db->n_priority_queue_policies;
        }
    }
    /* The permanent levels: the default one and those with a policy. */
    if (!level_get(b, b->default_level)) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < b->n_level_policies; i++) {
        if (!level_get(b, b->level_policies[i].level)) {
            err = osp_error_out_of_memory();
            goto out;
        }
    }
out:
    if (err)
        batcher_destroy(b);
    return err;
}

void batcher_destroy(batcher *b) {
    for (size_t i = 0; i < b->n_levels; i++)
        free(b->levels[i]);
    free(b->levels);
    free(b->preferred);
    free(b->level_policies);
    memset(b, 0, sizeof(*b));
}

/* ---- enqueue ----------------------------------------------------------------
 */

osp_error *batcher_enqueue(batcher *b, batcher_entry *e, uint64_t now_ns) {
    uint64_t number = 0;
    if (b->dynamic) {
        number = e->priority;
        if (number == 0 || number > b->priority_levels)
            number = b->default_level;
    }
    batcher_level *lvl = level_get(b, number);
    if (!lvl)
        return osp_error_out_of_memory();
    const osp_queue_policy *policy = &lvl->policy;
    if (policy->max_queue_size != 0 && lvl->count >= policy->max_queue_size)
        return osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                    OSP_REASON_QUEUE_FULL,
                                    "Exceeds maximum queue size");
    uint64_t timeout_us = policy->default_timeout_us;
    if (policy->allow_timeout_override && e->timeout_us != 0 &&
        e->timeout_us < timeout_us)
        timeout_us = e->timeout_us;
    e->enqueue_ns = now_ns;
    /* A timeout too long to represent is no timeout. */
    e->deadline_ns = timeout_us && timeout_us < (UINT64_MAX - now_ns) / 1000
                         ? now_ns + timeout_us * 1000
                         : 0;
    list_append(&lvl->unexpired, e);
    lvl->count++;
    b->count++;
    if (e->deadline_ns)
        b->n_deadlines++;
    return NULL;
}

/* ---- expiry -----------------------------------------------------------------
 */

/* Applies each level's timeout action to the entries past their deadline
 * at now_ns: REJECT prepends them to *expired, DELAY moves them behind
 * the level's unexpired entries. Returns the closest deadline still
 * pending (0 = none). */
static uint64_t apply_timeouts(batcher *b, uint64_t now_ns,
                               batcher_entry **expired) {
    uint64_t closest = 0;
    if (b->n_deadlines == 0)
        return 0;
    for (size_t i = 0; i < b->n_levels; i++) {
        batcher_level *lvl = b->levels[i];
        batcher_list keep = {NULL, NULL};
        batcher_entry *e = lvl->unexpired.head;
        while (e) {
            batcher_entry *next = e->next;
            if (e->deadline_ns == 0 || now_ns <= e->deadline_ns) {
                if (e->deadline_ns &&
                    (closest == 0 || e->deadline_ns < closest))
                    closest = e->deadline_ns;
                list_append(&keep, e);
            } else if (lvl->policy.timeout_action == OSP_TIMEOUT_DELAY) {
                e->deadline_ns = 0;
                b->n_deadlines--;
                list_append(&lvl->delayed, e);
            } else {
                b->n_deadlines--;
                lvl->count--;
                b->count--;
                e->next = *expired;
                *expired = e;
            }
            e = next;
        }
        lvl->unexpired = keep;
    }
    for (size_t i = b->n_levels; i-- > 0;)
        level_release(b, i);
    return closest;
}

/* Moves the entries of list l that drop() selects onto *removed; returns
 * how many, and how many of them had a deadline in *with_deadline. */
static size_t list_remove_if(batcher_list *l, batcher_drop_fn drop, void *ctx,
                             batcher_entry **removed, size_t *with_deadline) {
    batcher_list keep = {NULL, NULL};
    size_t n = 0;
    batcher_entry *e = l->head;
    while (e) {
        batcher_entry *next = e->next;
        if (drop(e, ctx)) {
            if (e->deadline_ns)
                (*with_deadline)++;
            e->next = *removed;
            *removed = e;
            n++;
        } else {
            list_append(&keep, e);
        }
        e = next;
    }
    *l = keep;
    return n;
}

size_t batcher_remove_if(batcher *b, batcher_drop_fn drop, void *ctx,
                         batcher_entry **removed) {
    size_t total = 0;
    for (size_t i = b->n_levels; i-- > 0;) {
        batcher_level *lvl = b->levels[i];
        size_t with_deadline = 0;
        size_t n =
            list_remove_if(&lvl->unexpired, drop, ctx, removed, &with_deadline);
        n += list_remove_if(&lvl->delayed, drop, ctx, removed, &with_deadline);
        b->n_deadlines -= with_deadline;
        lvl->count -= n;
        b->count -= n;
        total += n;
        level_release(b, i);
    }
    return total;
}

/* ---- batches ----------------------------------------------------------------
 */

static bool is_preferred(const batcher *b, int64_t rows) {
    for (size_t i = 0; i < b->n_preferred; i++)
        if (b->preferred[i] == rows)
            return true;
    return false;
}

/* Removes the first entry in walk order (levels ascending; unexpired, then
 * delayed). */
static batcher_entry *pop_front(batcher *b) {
    for (size_t i = 0; i < b->n_levels; i++) {
        batcher_level *lvl = b->levels[i];
        batcher_entry *e = list_pop(&lvl->unexpired);
        if (!e)
            e = list_pop(&lvl->delayed);
        if (!e)
            continue;
        if (e->deadline_ns)
            b->n_deadlines--;
        lvl->count--;
        b->count--;
        level_release(b, i);
        return e;
    }
    return NULL;
}

/* The walk of one batch decision. */
typedef struct batch_walk {
    size_t n; /* entries walked into the pending batch */
    int64_t rows;
    size_t best_n;      /* entries of the batch to send without waiting */
    bool send_now;      /* the batch cannot grow: send all n */
    uint64_t oldest_ns; /* enqueue time of the oldest walked entry */
} batch_walk;

/* Considers e for the pending batch w (entries go to batch[]). Returns
 * false when the walk must stop before e. */
static bool walk_step(const batcher *b, batch_walk *w, batcher_entry *e,
                      batcher_entry **batch, size_t cap) {
    int64_t rows = rows_of(e);
    if (w->n > 0) {
        /* Past the largest preferred size: what is pending is the batch
         * to send (unless the delay has run out, which sends more). */
        if (w->rows + rows > b->max_preferred && w->best_n == 0)
            w->best_n = w->n;
        if (w->rows + rows > b->max_batch || w->n == cap) {
            w->send_now = true;
            return false;
        }
        if (b->compatible && !b->compatible(batch[0], e, b->compatible_ctx)) {
            w->send_now = true;
            return false;
        }
    } else if (cap == 0) {
        return false;
    }
    batch[w->n++] = e;
    w->rows += rows;
    if (w->oldest_ns == 0 || e->enqueue_ns < w->oldest_ns)
        w->oldest_ns = e->enqueue_ns;
    if (is_preferred(b, w->rows))
        w->best_n = w->n;
    return true;
}

static void walk_queue(const batcher *b, batch_walk *w, batcher_entry **batch,
                       size_t cap) {
    for (size_t i = 0; i < b->n_levels; i++) {
        const batcher_level *lvl = b->levels[i];
        for (int delayed = 0; delayed < 2; delayed++) {
            batcher_entry *e =
                delayed ? lvl->delayed.head : lvl->unexpired.head;
            for (; e; e = e->next)
                if (!walk_step(b, w, e, batch, cap))
                    return;
        }
    }
}

/* Moves the first n entries out of the queue (they are batch[0..n)). */
static size_t take_front(batcher *b, batcher_entry **batch, size_t n) {
    for (size_t i = 0; i < n; i++) {
        batcher_entry *e = pop_front(b);
        (void)e; /* == batch[i]: the walk visits the queue front first */
        batch[i]->sequence = b->next_sequence++;
    }
    return n;
}

size_t batcher_take(batcher *b, uint64_t now_ns, bool flush,
                    batcher_entry **batch, size_t cap, batcher_entry **expired,
                    uint64_t *wait_ns) {
    *wait_ns = 0;
    if (!b->dynamic) {
        /* Plain FIFO: one request per batch. */
        if (b->count == 0 || cap == 0)
            return 0;
        batch[0] = b->levels[0]->unexpired.head;
        return take_front(b, batch, 1);
    }
    uint64_t closest_deadline = apply_timeouts(b, now_ns, expired);
    batch_walk w = {0};
    walk_queue(b, &w, batch, cap);
    if (w.n == 0)
        return 0;

    uint64_t age = now_ns > w.oldest_ns ? now_ns - w.oldest_ns : 0;
    bool delay_exceeded = b->max_delay_ns != 0 && age >= b->max_delay_ns;
    if (flush)
        return take_front(b, batch, w.n);
    if (w.best_n != 0 && !delay_exceeded)
        return take_front(b, batch, w.best_n);
    if (w.send_now || w.rows >= b->max_preferred || delay_exceeded ||
        b->max_delay_ns == 0)
        return take_front(b, batch, w.n);

    /* Wait for the batch to fill, at most until the oldest request has
     * waited the delay, and wake for the next deadline (just past it: a
     * request expires once now > deadline). */
    uint64_t wait = b->max_delay_ns - age;
    if (closest_deadline != 0) {
        uint64_t until = closest_deadline - now_ns + 1000;
        if (until < wait)
            wait = until;
    }
    *wait_ns = wait;
    return 0;
}

size_t batcher_queued(const batcher *b) {
    return b->count;
}

size_t batcher_max_entries(const batcher *b) {
    return (size_t)b->max_batch;
}

/* ---- response ordering ----------------------------------------------------
 */

void reorder_init(reorder_buffer *rb) {
    rb->next = 0;
    rb->held = NULL;
}

batcher_entry *reorder_push(reorder_buffer *rb, batcher_entry *e) {
    /* Insert in sequence order. */
    batcher_entry **at = &rb->held;
    while (*at && (*at)->sequence < e->sequence)
        at = &(*at)->next;
    e->next = *at;
    *at = e;

    /* Release the run that starts at the next expected number. */
    batcher_entry *ready = NULL, **tail = &ready;
    while (rb->held && rb->held->sequence == rb->next) {
        batcher_entry *r = rb->held;
        rb->held = r->next;
        r->next = NULL;
        *tail = r;
        tail = &r->next;
        rb->next++;
    }
    return ready;
}

size_t reorder_held(const reorder_buffer *rb) {
    size_t n = 0;
    for (const batcher_entry *e = rb->held; e; e = e->next)
        n++;
    return n;
}
