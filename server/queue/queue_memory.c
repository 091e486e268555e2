/*
 * One queue's semantics in memory (queue_memory.h).
 *
 * Items live in mem_entry records referenced from two arrays: by_index
 * (ascending index: lookups, truncate, first and last entry) and by_order
 * (delivery order: priority desc, index asc). A delete marks the entry dead
 * and frees its item at once; the arrays drop dead entries when they
 * outnumber the live ones, so a delete costs O(log n) and no memmove.
 * Request ids hash into chains of live entries.
 *
 * A consumer holds an item it was sent and has not committed: the entry
 * lists its holders (one per group at most), the consumer lists its held
 * entries. An item is deliverable to a group when no consumer of that group
 * holds it.
 */
#define _GNU_SOURCE
#include "queue_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "array_grow.h"

typedef struct mem_hold {
    mem_consumer *consumer;
    struct mem_hold *next;
} mem_hold;

struct mem_entry {
    uint64_t index;
    int priority;
    bool dead;
    bool redeliver;       /* its holder left: count it when it is sent again */
    osp_queue_item *item; /* NULL once dead */
    mem_hold *holds;
    struct mem_entry *rid_next; /* request-id chain */
};

struct mem_group {
    char *gid;
    mem_consumer *consumers;
    size_t n_consumers;
    size_t rr; /* round-robin start */
    struct mem_group *next;
};

struct mem_queue {
    char *name;
    mem_limits limits;
    mem_entry **by_index;
    size_t n_index, cap_index;
    mem_entry **by_order;
    size_t n_order, cap_order;
    size_t live, dead;
    uint64_t next_index;
    bool ended;
    mem_entry **rid_buckets;
    size_t n_buckets;
    mem_group *groups;
    mem_get *waiting_head, *waiting_tail;
    osp_queue_stats stats;
};

/* ---- small helpers ---- */

void mem_effects_init(mem_effects *eff) {
    memset(eff, 0, sizeof *eff);
}

void mem_effects_destroy(mem_effects *eff) {
    free(eff->deleted);
    free(eff->served);
    free(eff->kick);
    mem_effects_init(eff);
}

static void effects_deleted(mem_effects *eff, uint64_t index) {
    if (!array_grow((void **)&eff->deleted, &eff->cap_deleted,
                    eff->n_deleted + 1, sizeof *eff->deleted)) {
        eff->oom = true;
        return;
    }
    eff->deleted[eff->n_deleted++] = index;
}

static void effects_served(mem_effects *eff, mem_get *get) {
    /* served must never lose a get: its callback is owed exactly once.
     * The array has room reserved by mem_queue_get / expire before a get
     * is taken off the waiting list, see reserve_served. */
    eff->served[eff->n_served++] = get;
}

static bool reserve_served(mem_effects *eff, size_t more) {
    if (array_grow((void **)&eff->served, &eff->cap_served,
                   eff->n_served + more, sizeof *eff->served))
        return true;
    eff->oom = true;
    return false;
}

static void effects_kick(mem_effects *eff, mem_consumer *c) {
    for (size_t i = 0; i < eff->n_kick; i++)
        if (eff->kick[i] == c)
            return;
    if (!array_grow((void **)&eff->kick, &eff->cap_kick, eff->n_kick + 1,
                    sizeof *eff->kick)) {
        eff->oom = true; /* the items wait in the outbox for a later kick */
        return;
    }
    mem_consumer_ref(c);
    eff->kick[eff->n_kick++] = c;
}

static uint64_t hash_string(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- the request-id index ---- */

/* Grows the buckets ahead of an insert. false only when there are none
 * and none can be made. */
static bool rid_reserve(mem_queue *q) {
    if (q->live + 1 > q->n_buckets) {
        size_t n = q->n_buckets ? q->n_buckets * 2 : 64;
        mem_entry **buckets = calloc(n, sizeof *buckets);
        if (buckets != NULL) {
            for (size_t b = 0; b < q->n_buckets; b++) {
                mem_entry *next;
                for (mem_entry *x = q->rid_buckets[b]; x; x = next) {
                    next = x->rid_next;
                    size_t slot = hash_string(x->item->request_id) % n;
                    x->rid_next = buckets[slot];
                    buckets[slot] = x;
                }
            }
            free(q->rid_buckets);
            q->rid_buckets = buckets;
            q->n_buckets = n;
        } /* else: longer chains, still correct */
    }
    return q->n_buckets > 0;
}

static void rid_insert(mem_queue *q, mem_entry *e) {
    size_t slot = hash_string(e->item->request_id) % q->n_buckets;
    e->rid_next = q->rid_buckets[slot];
    q->rid_buckets[slot] = e;
}

static void rid_remove(mem_queue *q, mem_entry *e) {
    size_t slot = hash_string(e->item->request_id) % q->n_buckets;
    for (mem_entry **p = &q->rid_buckets[slot]; *p; p = &(*p)->rid_next)
        if (*p == e) {
            *p = e->rid_next;
            return;
        }
}

/* ---- entries ---- */

/* First position in by_index whose index >= `index`. */
static size_t index_lower_bound(const mem_queue *q, uint64_t index) {
    size_t lo = 0, hi = q->n_index;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (q->by_index[mid]->index < index)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static mem_entry *entry_find(const mem_queue *q, uint64_t index) {
    size_t at = index_lower_bound(q, index);
    if (at < q->n_index && q->by_index[at]->index == index &&
        !q->by_index[at]->dead)
        return q->by_index[at];
    return NULL;
}

static bool entry_held_in_group(const mem_entry *e, const mem_group *g) {
    for (const mem_hold *h = e->holds; h; h = h->next)
        if (h->consumer->group == g)
            return true;
    return false;
}

static void consumer_drop_held(mem_consumer *c, mem_entry *e) {
    for (size_t i = 0; i < c->n_held; i++)
        if (c->held[i] == e) {
            memmove(&c->held[i], &c->held[i + 1],
                    (c->n_held - i - 1) * sizeof *c->held);
            c->n_held--;
            return;
        }
}

/* Removes consumer c's hold on e (both sides). true when it held e. */
static bool entry_release(mem_entry *e, mem_consumer *c) {
    for (mem_hold **p = &e->holds; *p; p = &(*p)->next)
        if ((*p)->consumer == c) {
            mem_hold *h = *p;
            *p = h->next;
            free(h);
            consumer_drop_held(c, e);
            return true;
        }
    return false;
}

/* Drops dead entries from both arrays once they outnumber the live ones. */
static void entries_compact(mem_queue *q) {
    if (q->dead < 64 || q->dead < q->live)
        return;
    size_t w = 0;
    for (size_t i = 0; i < q->n_index; i++)
        if (!q->by_index[i]->dead)
            q->by_index[w++] = q->by_index[i];
    q->n_index = w;
    w = 0;
    for (size_t i = 0; i < q->n_order; i++) {
        mem_entry *e = q->by_order[i];
        if (e->dead)
            free(e);
        else
            q->by_order[w++] = e;
    }
    q->n_order = w;
    q->dead = 0;
}

/* Deletes a live entry: its holders lose it (their window slot frees),
 * waiting and searching stop seeing it. */
static void entry_kill(mem_queue *q, mem_entry *e, mem_effects *eff) {
    while (e->holds != NULL)
        entry_release(e, e->holds->consumer);
    rid_remove(q, e);
    free(e->item);
    e->item = NULL;
    e->dead = true;
    q->live--;
    q->dead++;
    if (eff != NULL)
        effects_deleted(eff, e->index);
}

/* ---- queue ---- */

mem_queue *mem_queue_new(const char *name, const mem_limits *limits) {
    mem_queue *q = calloc(1, sizeof *q);
    if (q == NULL)
        return NULL;
    q->name = strdup(name);
    if (q->name == NULL) {
        free(q);
        return NULL;
    }
    q->limits = *limits;
    q->next_index = 1;
    return q;
}

static void group_free(mem_group *g) {
    free(g->gid);
    free(g);
}

void mem_queue_free(mem_queue *q) {
    if (q == NULL)
        return;
    for (mem_group *g = q->groups, *gn; g; g = gn) {
        gn = g->next;
        for (mem_consumer *c = g->consumers, *cn; c; c = cn) {
            cn = c->next;
            c->state = MEM_CONSUMER_GONE;
            c->group = NULL;
            mem_consumer_free(c);
        }
        group_free(g);
    }
    for (size_t i = 0; i < q->n_order; i++) {
        mem_entry *e = q->by_order[i];
        while (e->holds) {
            mem_hold *h = e->holds;
            e->holds = h->next;
            free(h);
        }
        free(e->item);
        free(e);
    }
    for (mem_get *g = q->waiting_head, *gn; g; g = gn) {
        gn = g->next;
        free(g->strings);
        free(g);
    }
    free(q->by_index);
    free(q->by_order);
    free(q->rid_buckets);
    free(q->name);
    free(q);
}

const char *mem_queue_name(const mem_queue *q) {
    return q->name;
}
uint64_t mem_queue_next_index(const mem_queue *q) {
    return q->next_index;
}
void mem_queue_raise_next_index(mem_queue *q, uint64_t next) {
    if (next > q->next_index)
        q->next_index = next;
}
bool mem_queue_ended(const mem_queue *q) {
    return q->ended;
}
void mem_queue_set_ended(mem_queue *q, bool ended) {
    q->ended = ended;
}
size_t mem_queue_length(const mem_queue *q) {
    return q->live;
}

osp_error *mem_queue_check_put(const mem_queue *q, size_t size) {
    if (size > q->limits.max_payload_bytes)
        return osp_error_new_reason(
            OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
            "payload too large: %zu bytes, the limit is %llu", size,
            (unsigned long long)q->limits.max_payload_bytes);
    if (q->live >= q->limits.max_length)
        return osp_error_new_reason(
            OSP_ERROR_UNAVAILABLE, OSP_REASON_QUEUE_FULL,
            "queue is full: %zu items, the limit is %llu", q->live,
            (unsigned long long)q->limits.max_length);
    return NULL;
}

/* ---- delivery to consumers ---- */

static bool consumer_has_room(const mem_consumer *c) {
    return c->state == MEM_CONSUMER_RUNNING &&
           (c->auto_commit || c->n_held < c->window);
}

static bool consumer_wants(const mem_consumer *c, const mem_entry *e) {
    return e->index >= c->min_index &&
           queue_item_matches(e->item, c->filters, c->n_filters);
}

static bool outbox_push(mem_consumer *c, osp_queue_item *item) {
    if (c->outbox_head > 0 && c->n_outbox == c->cap_outbox) {
        memmove(c->outbox, c->outbox + c->outbox_head,
                (c->n_outbox - c->outbox_head) * sizeof *c->outbox);
        c->n_outbox -= c->outbox_head;
        c->outbox_head = 0;
    }
    if (!array_grow((void **)&c->outbox, &c->cap_outbox, c->n_outbox + 1,
                    sizeof *c->outbox))
        return false;
    c->outbox[c->n_outbox++] = item;
    return true;
}

osp_queue_item *mem_consumer_outbox_pop(mem_consumer *c) {
    if (c->outbox_head == c->n_outbox)
        return NULL;
    osp_queue_item *item = c->outbox[c->outbox_head++];
    if (c->outbox_head == c->n_outbox)
        c->outbox_head = c->n_outbox = 0;
    return item;
}

static void outbox_clear(mem_consumer *c) {
    osp_queue_item *item;
    while ((item = mem_consumer_outbox_pop(c)) != NULL)
        osp_queue_item_free(item);
}

/* Sends e to c: a copy goes to the outbox; the entry is held by c, or
 * deleted when c auto-commits. false when out of memory (nothing done). */
static bool deliver_entry(mem_queue *q, mem_consumer *c, mem_entry *e,
                          mem_effects *eff) {
    osp_queue_item *copy = queue_item_clone(e->item);
    if (copy == NULL)
        return false;
    mem_hold *hold = NULL;
    if (!c->auto_commit) {
        hold = malloc(sizeof *hold);
        if (hold == NULL || !array_grow((void **)&c->held, &c->cap_held,
                                        c->n_held + 1, sizeof *c->held)) {
            free(hold);
            free(copy);
            return false;
        }
    }
    if (!outbox_push(c, copy)) {
        free(hold);
        free(copy);
        return false;
    }
    if (e->redeliver) {
        q->stats.redeliveries++;
        e->redeliver = false;
    }
    c->last_index = e->index;
    if (c->auto_commit) {
        q->stats.commits++;
        entry_kill(q, e, eff);
    } else {
        hold->consumer = c;
        hold->next = e->holds;
        e->holds = hold;
        c->held[c->n_held++] = e;
    }
    effects_kick(eff, c);
    return true;
}

/* The next consumer of g, round robin, with room for e and wanting it. */
static mem_consumer *group_pick(mem_group *g, const mem_entry *e) {
    size_t n = g->n_consumers;
    for (size_t k = 0; k < n; k++) {
        size_t at = (g->rr + k) % n;
        mem_consumer *c = g->consumers;
        for (size_t i = 0; i < at; i++)
            c = c->next;
        if (consumer_has_room(c) && consumer_wants(c, e)) {
            g->rr = at + 1;
            return c;
        }
    }
    return NULL;
}

static bool group_has_room(const mem_group *g) {
    for (const mem_consumer *c = g->consumers; c; c = c->next)
        if (consumer_has_room(c))
            return true;
    return false;
}

/* Pushes deliverable items to every group's consumers while windows
 * allow. */
static void dispatch(mem_queue *q, mem_effects *eff) {
    for (mem_group *g = q->groups; g; g = g->next) {
        if (!group_has_room(g))
            continue;
        for (size_t i = 0; i < q->n_order; i++) {
            mem_entry *e = q->by_order[i];
            if (e->dead || entry_held_in_group(e, g))
                continue;
            mem_consumer *c = group_pick(g, e);
            if (c == NULL)
                continue;
            if (!deliver_entry(q, c, e, eff)) {
                eff->oom = true;
                return;
            }
            if (!group_has_room(g))
                break;
        }
    }
}

/* ---- gets ---- */

static bool get_wants(const mem_get *get, const mem_entry *e) {
    if (e->dead)
        return false;
    if (get->args.index > 0 && e->index < get->args.index)
        return false;
    if (get->args.request_id != NULL &&
        strcmp(get->args.request_id, e->item->request_id) != 0)
        return false;
    return queue_item_matches(e->item, get->args.filters, get->args.n_filters);
}

static int order_cmp(const void *a, const void *b) {
    const mem_entry *x = *(mem_entry *const *)a, *y = *(mem_entry *const *)b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Collects up to get->args.length matching entries in delivery order into
 * `found` (room for length). Returns how many. */
static size_t get_collect(mem_queue *q, const mem_get *get, mem_entry **found) {
    size_t n = 0, want = get->args.length;
    if (get->args.request_id != NULL) {
        if (q->n_buckets == 0)
            return 0;
        size_t slot = hash_string(get->args.request_id) % q->n_buckets;
        /* A request id is usually unique; collect all then order. */
        size_t cap = 0;
        mem_entry **all = NULL;
        size_t n_all = 0;
        for (mem_entry *e = q->rid_buckets[slot]; e; e = e->rid_next)
            if (get_wants(get, e)) {
                if (!array_grow((void **)&all, &cap, n_all + 1, sizeof *all))
                    break;
                all[n_all++] = e;
            }
        if (n_all > 1)
            qsort(all, n_all, sizeof *all, order_cmp);
        for (size_t i = 0; i < n_all && n < want; i++)
            found[n++] = all[i];
        free(all);
        return n;
    }
    for (size_t i = 0; i < q->n_order && n < want; i++)
        if (get_wants(get, q->by_order[i]))
            found[n++] = q->by_order[i];
    return n;
}

/* Answers get with `found` (copies; auto_delete deletes them). false when
 * out of memory (nothing answered or deleted). */
static bool get_answer(mem_queue *q, mem_get *get, mem_entry **found, size_t n,
                       mem_effects *eff) {
    if (n > 0) {
        get->items = calloc(n, sizeof *get->items);
        if (get->items == NULL)
            return false;
        for (size_t i = 0; i < n; i++) {
            get->items[i] = queue_item_clone(found[i]->item);
            if (get->items[i] == NULL) {
                osp_queue_items_free(get->items, i);
                get->items = NULL;
                return false;
            }
        }
    }
    get->n_items = n;
    q->stats.gets += n;
    if (get->args.auto_delete)
        for (size_t i = 0; i < n; i++)
            entry_kill(q, found[i], eff);
    effects_served(eff, get);
    return true;
}

static void waiting_unlink(mem_queue *q, mem_get *get) {
    if (get->prev)
        get->prev->next = get->next;
    else
        q->waiting_head = get->next;
    if (get->next)
        get->next->prev = get->prev;
    else
        q->waiting_tail = get->prev;
    get->prev = get->next = NULL;
}

osp_error *mem_queue_get(mem_queue *q, mem_get *get, uint64_t now_ns,
                         mem_effects *eff) {
    if (!reserve_served(eff, 1))
        return osp_error_out_of_memory();
    size_t want = get->args.length;
    if (want > q->live)
        want = q->live;
    mem_entry **found = want ? malloc(want * sizeof *found) : NULL;
    if (want && found == NULL)
        return osp_error_out_of_memory();
    size_t n = want ? get_collect(q, get, found) : 0;
    if (n > 0 || get->args.timeout_ns == 0) {
        bool answered = get_answer(q, get, found, n, eff);
        free(found);
        entries_compact(q);
        return answered ? NULL : osp_error_out_of_memory();
    }
    free(found);
    get->deadline_ns = now_ns + get->args.timeout_ns;
    get->prev = q->waiting_tail;
    get->next = NULL;
    if (q->waiting_tail)
        q->waiting_tail->next = get;
    else
        q->waiting_head = get;
    q->waiting_tail = get;
    return NULL;
}

/* A new entry: the waiting gets it matches are answered with it, in the
 * order they came (the first auto-deleting one takes it). */
static void serve_waiting(mem_queue *q, mem_entry *e, mem_effects *eff) {
    for (mem_get *get = q->waiting_head, *next; get && !e->dead; get = next) {
        next = get->next;
        if (!get_wants(get, e))
            continue;
        if (!reserve_served(eff, 1))
            return;
        waiting_unlink(q, get);
        if (!get_answer(q, get, &e, 1, eff)) {
            get->err = osp_error_out_of_memory();
            effects_served(eff, get);
        }
    }
}

void mem_queue_fail_waiting(mem_queue *q, osp_error *(*err_fn)(void),
                            mem_effects *eff) {
    while (q->waiting_head != NULL) {
        if (!reserve_served(eff, 1))
            return;
        mem_get *get = q->waiting_head;
        waiting_unlink(q, get);
        get->err = err_fn();
        effects_served(eff, get);
    }
}

/* ---- mutations ---- */

bool mem_queue_put(mem_queue *q, osp_queue_item *item, bool replay,
                   mem_effects *eff) {
    /* Items auto-deleted by gets and auto-commit deliveries leave dead
     * entries too: dropped here, outside any walk of the arrays. */
    entries_compact(q);
    mem_entry *e = calloc(1, sizeof *e);
    if (e == NULL || !rid_reserve(q) ||
        !array_grow((void **)&q->by_index, &q->cap_index, q->n_index + 1,
                    sizeof *q->by_index) ||
        !array_grow((void **)&q->by_order, &q->cap_order, q->n_order + 1,
                    sizeof *q->by_order)) {
        free(e);
        free(item);
        return false;
    }
    e->index = item->index;
    e->priority = item->priority;
    e->item = item;
    /* by_index: puts come in ascending index order. */
    q->by_index[q->n_index++] = e;
    /* by_order: the end of its priority band (its index is the largest).
     * Most puts share the last entry's priority and append: checking that
     * first spares a binary search whose every step is a cache miss on a
     * long queue (it was 7% of a put's CPU at 100,000 items). */
    size_t lo = 0, hi = q->n_order;
    if (hi == 0 || q->by_order[hi - 1]->priority >= e->priority)
        lo = hi;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (q->by_order[mid]->priority >= e->priority)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&q->by_order[lo + 1], &q->by_order[lo],
            (q->n_order - lo) * sizeof *q->by_order);
    q->by_order[lo] = e;
    q->n_order++;
    q->live++;
    rid_insert(q, e);
    if (item->index >= q->next_index)
        q->next_index = item->index + 1;
    if (!replay)
        q->stats.puts++;
    serve_waiting(q, e, eff);
    if (!e->dead)
        dispatch(q, eff);
    return true;
}

size_t mem_queue_delete(mem_queue *q, const uint64_t *indexes, size_t n,
                        mem_effects *eff) {
    size_t deleted = 0;
    for (size_t i = 0; i < n; i++) {
        mem_entry *e = entry_find(q, indexes[i]);
        if (e != NULL) {
            entry_kill(q, e, eff);
            deleted++;
        }
    }
    entries_compact(q);
    if (deleted > 0)
        dispatch(q, eff);
    return deleted;
}

size_t mem_queue_truncate(mem_queue *q, uint64_t before, mem_effects *eff) {
    size_t deleted = 0;
    size_t end = index_lower_bound(q, before);
    for (size_t i = 0; i < end; i++) {
        mem_entry *e = q->by_index[i];
        if (!e->dead) {
            entry_kill(q, e, eff);
            deleted++;
        }
    }
    entries_compact(q);
    if (deleted > 0)
        dispatch(q, eff);
    return deleted;
}

void mem_queue_commit(mem_queue *q, const uint64_t *indexes, size_t n,
                      mem_effects *eff) {
    q->stats.commits += mem_queue_delete(q, indexes, n, eff);
}

static mem_group *group_find(mem_queue *q, const char *gid) {
    for (mem_group *g = q->groups; g; g = g->next)
        if (strcmp(g->gid, gid) == 0)
            return g;
    return NULL;
}

static mem_consumer *group_find_consumer(mem_group *g, const char *uid,
                                         mem_consumer_state state) {
    for (mem_consumer *c = g->consumers; c; c = c->next)
        if (c->state == state && strcmp(c->uid, uid) == 0)
            return c;
    return NULL;
}

void mem_queue_reject(mem_queue *q, const char *gid, const char *uid,
                      const uint64_t *indexes, size_t n, mem_effects *eff) {
    mem_group *g = group_find(q, gid);
    if (g == NULL)
        return;
    bool released = false;
    for (mem_consumer *c = g->consumers; c; c = c->next) {
        if (strcmp(c->uid, uid) != 0)
            continue;
        for (size_t i = 0; i < n; i++) {
            mem_entry *e = entry_find(q, indexes[i]);
            if (e != NULL && entry_release(e, c))
                released = true;
        }
    }
    if (released)
        dispatch(q, eff);
}

void mem_queue_end(mem_queue *q, bool force, mem_effects *eff) {
    q->ended = true;
    if (!force)
        return;
    for (size_t i = 0; i < q->n_index; i++) {
        mem_entry *e = q->by_index[i];
        if (!e->dead && e->holds == NULL)
            entry_kill(q, e, eff);
    }
    entries_compact(q);
}

/* ---- consumers ---- */

void mem_consumer_ref(mem_consumer *c) {
    c->refs++;
}

bool mem_consumer_unref(mem_consumer *c) {
    return --c->refs == 0;
}

void mem_consumer_free(mem_consumer *c) {
    if (c == NULL)
        return;
    outbox_clear(c);
    free(c->outbox);
    free(c->held);
    free(c->filters);
    free(c->uid);
    free(c->id);
    free(c);
}

/* Copies filters into one block (array then strings). */
static osp_queue_tag *filters_copy(const osp_queue_tag *filters, size_t n) {
    size_t bytes = n * sizeof *filters;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(filters[i].key) + strlen(filters[i].value) + 2;
    osp_queue_tag *copy = malloc(bytes ? bytes : 1);
    if (copy == NULL)
        return NULL;
    char *cursor = (char *)(copy + n);
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(filters[i].key) + 1, v = strlen(filters[i].value) + 1;
        copy[i].key = memcpy(cursor, filters[i].key, k);
        cursor += k;
        copy[i].value = memcpy(cursor, filters[i].value, v);
        cursor += v;
    }
    return copy;
}

/* Removes c from its group (the group's reference is dropped; the caller
 * frees c when that was the last). Frees an empty group. */
static bool consumer_leave_group(mem_queue *q, mem_consumer *c) {
    mem_group *g = c->group;
    for (mem_consumer **p = &g->consumers; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            g->n_consumers--;
            break;
        }
    c->next = NULL;
    c->group = NULL;
    c->state = MEM_CONSUMER_GONE;
    if (g->consumers == NULL) {
        for (mem_group **p = &q->groups; *p; p = &(*p)->next)
            if (*p == g) {
                *p = g->next;
                break;
            }
        group_free(g);
    }
    return mem_consumer_unref(c);
}

/* Queues c's held items in its outbox again (a rejoin). */
static void consumer_resend_held(mem_queue *q, mem_consumer *c,
                                 mem_effects *eff) {
    for (size_t i = 0; i < c->n_held; i++) {
        osp_queue_item *copy = queue_item_clone(c->held[i]->item);
        if (copy == NULL || !outbox_push(c, copy)) {
            free(copy);
            eff->oom = true;
            return;
        }
        q->stats.redeliveries++;
        c->last_index = c->held[i]->index;
    }
    if (c->n_held > 0)
        effects_kick(eff, c);
}

static bool consumer_configure(mem_consumer *c,
                               const osp_queue_consumer_args *args,
                               uint64_t next_index) {
    osp_queue_tag *filters = filters_copy(args->filters, args->n_filters);
    if (filters == NULL)
        return false;
    free(c->filters);
    c->filters = filters;
    c->n_filters = args->n_filters;
    c->window = args->window;
    c->auto_commit = args->auto_commit;
    c->deliver = args->deliver;
    c->deliver_ctx = args->ctx;
    if (args->start_index < 0)
        c->min_index = next_index;
    else
        c->min_index = (uint64_t)args->start_index;
    return true;
}

mem_consumer *mem_consumer_open(mem_queue *q,
                                const osp_queue_consumer_args *args,
                                uint64_t now_ns, mem_effects *eff) {
    mem_group *g = group_find(q, args->gid);
    mem_consumer *c =
        g ? group_find_consumer(g, args->uid, MEM_CONSUMER_LEAVING) : NULL;
    if (c != NULL) { /* back within its grace period */
        if (!consumer_configure(c, args, q->next_index))
            return NULL;
        c->state = MEM_CONSUMER_RUNNING;
        c->closing = false;
        c->last_seen_ns = now_ns;
        mem_consumer_ref(c); /* the handle */
        consumer_resend_held(q, c, eff);
        dispatch(q, eff);
        return c;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->uid = strdup(args->uid);
    if (asprintf(&c->id, "%s.%s", args->gid, args->uid) < 0)
        c->id = NULL;
    bool new_group = g == NULL;
    if (new_group) {
        g = calloc(1, sizeof *g);
        if (g != NULL && (g->gid = strdup(args->gid)) == NULL) {
            free(g);
            g = NULL;
        }
    }
    if (c->uid == NULL || c->id == NULL || g == NULL ||
        !consumer_configure(c, args, q->next_index)) {
        if (new_group && g != NULL)
            group_free(g);
        mem_consumer_free(c);
        return NULL;
    }
    if (new_group) {
        g->next = q->groups;
        q->groups = g;
    }
    c->queue = q;
    c->group = g;
    c->state = MEM_CONSUMER_RUNNING;
    c->last_seen_ns = now_ns;
    c->refs = 2; /* the group and the handle */
    /* Appended: the round robin visits consumers in joining order. */
    mem_consumer **tail = &g->consumers;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c;
    g->n_consumers++;
    dispatch(q, eff);
    return c;
}

bool mem_consumer_close(mem_consumer *c, uint64_t now_ns, mem_effects *eff) {
    mem_queue *q = c->queue;
    outbox_clear(c);
    if (c->state == MEM_CONSUMER_RUNNING) {
        if (c->n_held == 0) {
            if (consumer_leave_group(q, c))
                return true; /* cannot be: the handle still holds one */
        } else {
            c->state = MEM_CONSUMER_LEAVING;
            c->leave_deadline_ns = now_ns + q->limits.grace_ns;
        }
        /* Its room is gone: nothing to dispatch, but other consumers of
         * the group may take what it would have been sent. */
        dispatch(q, eff);
    }
    return mem_consumer_unref(c);
}

void mem_consumer_touch(mem_consumer *c, uint64_t now_ns) {
    c->last_seen_ns = now_ns;
}

void mem_queue_expire(mem_queue *q, uint64_t now_ns, uint64_t *next_deadline_ns,
                      mem_effects *eff) {
    for (mem_get *get = q->waiting_head, *next; get; get = next) {
        next = get->next;
        if (get->deadline_ns <= now_ns) {
            if (!reserve_served(eff, 1))
                break;
            waiting_unlink(q, get);
            get_answer(q, get, NULL, 0, eff); /* no items: cannot fail */
        } else if (get->deadline_ns < *next_deadline_ns) {
            *next_deadline_ns = get->deadline_ns;
        }
    }
    bool released = false;
    for (mem_group *g = q->groups, *gn; g; g = gn) {
        gn = g->next; /* leaving the group may free it */
        for (mem_consumer *c = g->consumers, *cn; c; c = cn) {
            cn = c->next;
            if (c->state != MEM_CONSUMER_LEAVING)
                continue;
            if (c->leave_deadline_ns > now_ns) {
                if (c->leave_deadline_ns < *next_deadline_ns)
                    *next_deadline_ns = c->leave_deadline_ns;
                continue;
            }
            while (c->n_held > 0) {
                mem_entry *e = c->held[c->n_held - 1];
                entry_release(e, c);
                e->redeliver = true;
            }
            released = true;
            if (consumer_leave_group(q, c))
                mem_consumer_free(c);
        }
    }
    if (released)
        dispatch(q, eff);
    entries_compact(q);
}

/* ---- reads ---- */

static const char *consumer_status(const mem_consumer *c) {
    return c->state == MEM_CONSUMER_RUNNING ? "Running" : "Leaving";
}

/* "tags[k=v,k2=v2]" for the consumer line; NULL when out of memory. */
static char *filters_text(const mem_consumer *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    fputs("tags[", f);
    for (size_t i = 0; i < c->n_filters; i++)
        fprintf(f, "%s%s=%s", i ? "," : "", c->filters[i].key,
                c->filters[i].value);
    fputs("]", f);
    fclose(f);
    return text;
}

osp_error *mem_queue_attributes(mem_queue *q, const char *backend,
                                uint64_t now_ns, osp_queue_attribute **out,
                                size_t *n_out) {
    osp_queue_attribute *a = NULL;
    size_t n = 0;
    bool ok = true;
    unsigned long long max_payload =
        (unsigned long long)q->limits.max_payload_bytes;
    ok = ok && queue_attributes_add(&a, &n, "meta.name", "%s", q->name);
    ok = ok && queue_attributes_add(&a, &n, "meta.backend", "%s", backend);
    ok = ok && queue_attributes_add(&a, &n, "meta.state", "%s",
                                    q->ended ? "End" : "OK");
    ok = ok && queue_attributes_add(&a, &n, "meta.maxPayloadBytes", "%llu",
                                    max_payload);
    ok = ok && queue_attributes_add(&a, &n, "meta.header.user", "%s",
                                    "X-EAS-QueueService-Redis-Uid");
    ok = ok && queue_attributes_add(&a, &n, "meta.header.group", "%s",
                                    "X-EAS-QueueService-Redis-Gid");
    ok = ok && queue_attributes_add(&a, &n, "meta.header.priority", "%s",
                                    "X-EAS-QueueService-Priority");
    ok = ok && queue_attributes_add(&a, &n, "stream.maxPayloadBytes", "%llu",
                                    max_payload);
    ok = ok && queue_attributes_add(&a, &n, "stream.length", "%zu", q->live);
    ok = ok && queue_attributes_add(&a, &n, "stream.approxMaxLength", "%llu",
                                    (unsigned long long)q->limits.max_length);
    if (q->live > 0) {
        uint64_t first = 0, last = 0;
        for (size_t i = 0; i < q->n_index; i++)
            if (!q->by_index[i]->dead) {
                first = q->by_index[i]->index;
                break;
            }
        for (size_t i = q->n_index; i-- > 0;)
            if (!q->by_index[i]->dead) {
                last = q->by_index[i]->index;
                break;
            }
        ok = ok && queue_attributes_add(&a, &n, "stream.firstEntry", "%llu",
                                        (unsigned long long)first);
        ok = ok && queue_attributes_add(&a, &n, "stream.lastEntry", "%llu",
                                        (unsigned long long)last);
    }
    size_t total = 0, groups = 0;
    for (mem_group *g = q->groups; g; g = g->next) {
        groups++;
        for (mem_consumer *c = g->consumers; c; c = c->next) {
            char key[64];
            snprintf(key, sizeof key, "consumers.list.[%zu]", total++);
            uint64_t idle =
                now_ns > c->last_seen_ns ? now_ns - c->last_seen_ns : 0;
            size_t slots = c->n_held < c->window ? c->window - c->n_held : 0;
            char *tags = c->n_filters ? filters_text(c) : NULL;
            ok = ok && queue_attributes_add(
                           &a, &n, key,
                           "Id: %s, Index: %llu, Pending: %zu, Status: %s, "
                           "Idle: %.3fs, Window: %u, Slots: %zu, AutoCommit: "
                           "%s%s%s",
                           c->id, (unsigned long long)c->last_index, c->n_held,
                           consumer_status(c), (double)idle / 1e9, c->window,
                           slots, c->auto_commit ? "true" : "false",
                           tags ? ", Tags: " : "", tags ? tags : "");
            free(tags);
        }
    }
    ok = ok &&
         queue_attributes_add(&a, &n, "consumers.stats.total", "%zu", total);
    size_t gi = 0;
    for (mem_group *g = q->groups; g; g = g->next) {
        char key[64];
        size_t pending = 0;
        for (mem_consumer *c = g->consumers; c; c = c->next)
            pending += c->n_held;
        snprintf(key, sizeof key, "groups.list.[%zu]", gi++);
        ok = ok && queue_attributes_add(&a, &n, key,
                                        "Id: %s, Consumers: %zu, Pending: %zu",
                                        g->gid, g->n_consumers, pending);
    }
    (void)groups;
    if (!ok) {
        osp_queue_attributes_free(a, n);
        return osp_error_out_of_memory();
    }
    *out = a;
    *n_out = n;
    return NULL;
}

void mem_queue_search(mem_queue *q, uint64_t index,
                      osp_queue_search_result *out) {
    mem_entry *e = index > 0 ? entry_find(q, index) : NULL;
    if (e == NULL) {
        out->found = false;
        return;
    }
    out->found = true;
    if (e->holds != NULL) {
        out->is_pending = true;
        snprintf(out->consumer_id, sizeof out->consumer_id, "%s",
                 e->holds->consumer->id);
        out->wait_count = 0;
        return;
    }
    uint64_t ahead = 0;
    for (size_t i = 0; i < q->n_order && q->by_order[i] != e; i++) {
        const mem_entry *x = q->by_order[i];
        if (!x->dead && x->holds == NULL)
            ahead++;
    }
    out->wait_count = ahead;
}

uint64_t mem_queue_count(mem_queue *q, int priority,
                         const osp_queue_tag *filters, size_t n_filters) {
    uint64_t n = 0;
    for (size_t i = 0; i < q->n_index; i++) {
        const mem_entry *e = q->by_index[i];
        if (e->dead || (priority >= 0 && e->priority != priority))
            continue;
        if (queue_item_matches(e->item, filters, n_filters))
            n++;
    }
    return n;
}

void mem_queue_stats(mem_queue *q, osp_queue_stats *out) {
    *out = q->stats;
    out->length = q->live;
    uint64_t consumers = 0;
    for (mem_group *g = q->groups; g; g = g->next)
        for (mem_consumer *c = g->consumers; c; c = c->next)
            if (c->state == MEM_CONSUMER_RUNNING)
                consumers++;
    out->consumers = consumers;
}
