/*
 * The embedded, crash-safe queue store: the ops table behind
 * include/osprey/queue.h for queue_embedded_open().
 *
 * Each queue is a mem_queue (queue_memory.c) behind its own mutex; every
 * mutation is applied in memory and its log records appended (queue_log.c)
 * in one critical section, so the log holds each queue's changes in the
 * order the queue applied them. The mutation's callback waits for the
 * writer thread's fsync that covers its records (group commit). Readers
 * see a change as soon as it is applied, before it is durable; a crash
 * can lose only changes whose callbacks had not run.
 *
 * Nothing calls a user callback with a lock held: a call collects what it
 * did (mem_effects) under the queue's lock and acts on it after unlocking.
 * A store thread (the timer) answers long polls whose time is up and
 * hands a departed consumer's items back to its group when its grace
 * period ends.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cond_deadline.h"
#include "osprey/clock.h"
#include "osprey/log.h"
#include "queue_embedded.h"
#include "queue_log.h"
#include "queue_memory.h"

typedef struct embedded_store embedded_store;

typedef struct embedded_queue {
    osp_queue super;
    pthread_mutex_t mu;
    pthread_cond_t delivered; /* a consumer's deliver loop ended */
    mem_queue *mem;
} embedded_queue;

typedef struct embedded_consumer {
    osp_queue_consumer super;
    mem_consumer *mc;
} embedded_consumer;

struct embedded_store {
    osp_queue_store super;
    mem_limits limits;
    queue_log *log;
    pthread_mutex_t mu; /* the queue list */
    embedded_queue **queues;
    size_t n_queues, cap_queues;

    pthread_mutex_t timer_mu;
    pthread_cond_t timer_cond; /* CLOCK_MONOTONIC */
    uint64_t timer_next_ns;    /* earliest deadline known */
    bool timer_stop;
    pthread_t timer;
    bool timer_started;
};

/* A get, as the queue keeps it while it waits, and the log waiter that
 * holds its answer back until its deletions are durable. */
typedef struct embedded_get {
    mem_get get; /* first: mem_effects hands back mem_get pointers */
    log_waiter waiter;
} embedded_get;

/* A mutation's acknowledgement, answered by the log. */
typedef struct done_waiter {
    log_waiter waiter;
    osp_queue_done_fn done;
    void *ctx;
} done_waiter;

typedef struct put_waiter {
    log_waiter waiter;
    embedded_queue *q; /* borrowed: queues live as long as the store */
    osp_queue_put_fn done;
    void *ctx;
    uint64_t index;
    char request_id[]; /* NUL-terminated */
} put_waiter;

static const queue_store_ops embedded_ops;

static embedded_store *store_of(osp_queue *queue) {
    return (embedded_store *)queue->store;
}

static int64_t wall_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static osp_error *shutting_down_error(void) {
    return osp_error_new_reason(OSP_ERROR_UNAVAILABLE, OSP_REASON_SHUTTING_DOWN,
                                "the queue store is closing");
}

/* ---- after the lock: answers and deliveries ---- */

static void get_free(embedded_get *eg) {
    free(eg->get.strings);
    free(eg);
}

/* Calls the get's callback (ownership of items and err moves) and frees
 * it. */
static void get_finish(embedded_get *eg, osp_error *err) {
    mem_get *g = &eg->get;
    if (err == NULL)
        err = g->err;
    else
        osp_error_free(g->err);
    if (err != NULL) {
        osp_queue_items_free(g->items, g->n_items);
        g->done(g->ctx, err, NULL, 0);
    } else {
        g->done(g->ctx, NULL, g->items, g->n_items);
    }
    get_free(eg);
}

/* A get whose deletions found no room on the disk still answers its
 * items: they are gone from memory, and since the deletion is not stored
 * they come back after a restart (at least once, never lost). */
static void get_durable(log_waiter *w, osp_error *err) {
    embedded_get *eg =
        (embedded_get *)((char *)w - offsetof(embedded_get, waiter));
    if (osp_error_get_reason(err) == OSP_REASON_STORAGE_FULL) {
        osp_error_free(err);
        err = NULL;
    }
    get_finish(eg, err);
}

static bool get_needs_log(const mem_get *g) {
    return g->args.auto_delete && g->n_items > 0 && g->err == NULL;
}

/* Passes the consumer's outbox to deliver, one item at a time, no lock
 * held; only one thread does so for a consumer at a time (a second one,
 * or a deliver callback that commits, leaves the items to it). Drops the
 * reference its kick held. */
static void consumer_drain(embedded_queue *q, mem_consumer *c) {
    pthread_mutex_lock(&q->mu);
    if (!c->delivering) {
        c->delivering = true;
        c->deliver_thread = pthread_self();
        osp_queue_item *item;
        while (!c->closing && c->state == MEM_CONSUMER_RUNNING &&
               (item = mem_consumer_outbox_pop(c)) != NULL) {
            void (*deliver)(void *, osp_queue_item *) = c->deliver;
            void *ctx = c->deliver_ctx;
            pthread_mutex_unlock(&q->mu);
            deliver(ctx, item);
            pthread_mutex_lock(&q->mu);
        }
        c->delivering = false;
        pthread_cond_broadcast(&q->delivered);
    }
    bool last = mem_consumer_unref(c);
    pthread_mutex_unlock(&q->mu);
    if (last)
        mem_consumer_free(c);
}

/* The work a call left for after unlocking: gets answered without a
 * deletion to wait for, and consumers to deliver to. */
static void effects_run(embedded_queue *q, mem_effects *eff) {
    for (size_t i = 0; i < eff->n_served; i++) {
        embedded_get *eg = (embedded_get *)eff->served[i];
        if (eg != NULL)
            get_finish(eg, NULL);
    }
    for (size_t i = 0; i < eff->n_kick; i++)
        consumer_drain(q, eff->kick[i]);
    mem_effects_destroy(eff);
}

/* With q->mu held, after a memory operation: appends `batch` (the call's
 * own records) and a DELETE of what the operation deleted besides, and
 * registers `own` (may be NULL) and the answered auto-deleting gets with
 * the log. Gets that wait for the log are taken out of eff->served. On an
 * error (the log failed) nothing waits: the gets fail in effects_run and
 * the caller answers `own` with the error returned. */
static osp_error *queue_settle(embedded_queue *q, log_batch *batch,
                               log_waiter *own, mem_effects *eff) {
    embedded_store *store = store_of(&q->super);
    if (eff->n_deleted > 0)
        log_batch_delete(batch, q->super.name, eff->deleted, eff->n_deleted);
    log_waiter *chain = own, **tail = own ? &own->next : &chain;
    if (own != NULL)
        own->next = NULL;
    /* Once appended, the writer may answer and free a get at any moment:
     * the gets it answers leave eff->served before the append. */
    mem_get *durable_head = NULL;
    for (size_t i = 0; i < eff->n_served; i++) {
        embedded_get *eg = (embedded_get *)eff->served[i];
        if (eg != NULL && get_needs_log(&eg->get)) {
            eg->waiter.done = get_durable;
            eg->waiter.next = NULL;
            *tail = &eg->waiter;
            tail = &eg->waiter.next;
            eff->served[i] = NULL;
            if (durable_head == NULL)
                durable_head = &eg->get;
        }
    }
    if (batch->len == 0 && chain == NULL)
        return NULL;
    osp_error *err = queue_log_append(store->log, batch, chain);
    if (err != NULL && durable_head != NULL) {
        /* Nothing was registered: the gets fail in effects_run. */
        size_t w = 0;
        for (size_t i = 0; i < eff->n_served; i++)
            if (eff->served[i] != NULL)
                eff->served[w++] = eff->served[i];
        for (log_waiter *x = own ? own->next : chain; x; x = x->next) {
            embedded_get *eg =
                (embedded_get *)((char *)x - offsetof(embedded_get, waiter));
            eg->get.err = osp_error_new(OSP_ERROR_UNAVAILABLE, "%s",
                                        osp_error_message(err));
            eff->served[w++] = &eg->get; /* room: they were there */
        }
        eff->n_served = w;
    }
    return err;
}

/* ---- queues ---- */

static embedded_queue *queue_new(embedded_store *store, const char *name) {
    embedded_queue *q = calloc(1, sizeof *q);
    if (q == NULL)
        return NULL;
    q->mem = mem_queue_new(name, &store->limits);
    if (q->mem == NULL) {
        free(q);
        return NULL;
    }
    q->super.ops = &embedded_ops;
    q->super.store = &store->super;
    q->super.name = (char *)mem_queue_name(q->mem);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->delivered, NULL);
    return q;
}

static void queue_free(embedded_queue *q) {
    mem_queue_free(q->mem);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->delivered);
    free(q);
}

/* The queue `name`, made when missing; NULL when out of memory. */
static embedded_queue *store_find_or_add(embedded_store *store,
                                         const char *name) {
    embedded_queue *found = NULL;
    pthread_mutex_lock(&store->mu);
    for (size_t i = 0; i < store->n_queues; i++)
        if (strcmp(store->queues[i]->super.name, name) == 0) {
            found = store->queues[i];
            goto out;
        }
    if (store->n_queues == store->cap_queues) {
        size_t cap = store->cap_queues ? store->cap_queues * 2 : 8;
        embedded_queue **grown = realloc(store->queues, cap * sizeof *grown);
        if (grown == NULL)
            goto out;
        store->queues = grown;
        store->cap_queues = cap;
    }
    found = queue_new(store, name);
    if (found != NULL)
        store->queues[store->n_queues++] = found;
out:
    pthread_mutex_unlock(&store->mu);
    return found;
}

static embedded_queue *store_queue_at(embedded_store *store, size_t i) {
    embedded_queue *q = NULL;
    pthread_mutex_lock(&store->mu);
    if (i < store->n_queues)
        q = store->queues[i];
    pthread_mutex_unlock(&store->mu);
    return q;
}

static osp_error *embedded_store_queue(osp_queue_store *s, const char *name,
                                       osp_queue **out) {
    embedded_queue *q = store_find_or_add((embedded_store *)s, name);
    if (q == NULL)
        return osp_error_out_of_memory();
    *out = &q->super;
    return NULL;
}

static void embedded_store_foreach(osp_queue_store *s,
                                   void (*fn)(void *ctx, osp_queue *queue),
                                   void *ctx) {
    embedded_store *store = (embedded_store *)s;
    embedded_queue *q;
    for (size_t i = 0; (q = store_queue_at(store, i)) != NULL; i++)
        fn(ctx, &q->super);
}

/* ---- the timer thread ---- */

/* Makes the timer wake by `deadline_ns` at the latest. */
static void timer_poke(embedded_store *store, uint64_t deadline_ns) {
    pthread_mutex_lock(&store->timer_mu);
    if (deadline_ns < store->timer_next_ns) {
        store->timer_next_ns = deadline_ns;
        pthread_cond_signal(&store->timer_cond);
    }
    pthread_mutex_unlock(&store->timer_mu);
}

static void queue_expire(embedded_queue *q, uint64_t now,
                         uint64_t *next_deadline) {
    mem_effects eff;
    mem_effects_init(&eff);
    log_batch batch;
    log_batch_init(&batch);
    pthread_mutex_lock(&q->mu);
    mem_queue_expire(q->mem, now, next_deadline, &eff);
    osp_error *err = queue_settle(q, &batch, NULL, &eff);
    pthread_mutex_unlock(&q->mu);
    osp_error_free(err);
    log_batch_destroy(&batch);
    effects_run(q, &eff);
}

static void *timer_main(void *arg) {
    embedded_store *store = arg;
    pthread_mutex_lock(&store->timer_mu);
    while (!store->timer_stop) {
        uint64_t now = osp_now_ns();
        if (store->timer_next_ns > now) {
            uint64_t wake = store->timer_next_ns;
            if (wake - now > 1000000000ull) /* re-check at least each 1 s */
                wake = now + 1000000000ull;
            cond_wait_until(&store->timer_cond, &store->timer_mu, wake);
            continue;
        }
        store->timer_next_ns = UINT64_MAX;
        pthread_mutex_unlock(&store->timer_mu);
        uint64_t next = UINT64_MAX;
        embedded_queue *q;
        for (size_t i = 0; (q = store_queue_at(store, i)) != NULL; i++)
            queue_expire(q, now, &next);
        pthread_mutex_lock(&store->timer_mu);
        if (next < store->timer_next_ns)
            store->timer_next_ns = next;
    }
    pthread_mutex_unlock(&store->timer_mu);
    return NULL;
}

/* ---- mutations ---- */

static void done_durable(log_waiter *w, osp_error *err) {
    done_waiter *dw = (done_waiter *)w;
    dw->done(dw->ctx, err);
    free(dw);
}

/* Answers a put once its record is durable. A put the log refused for
 * lack of room is taken back out of memory first, so that what the queue
 * serves matches what a restart would find (a reader may have seen it in
 * the meantime, as with any change before its answer). */
static void put_durable(log_waiter *w, osp_error *err) {
    put_waiter *pw = (put_waiter *)w;
    if (osp_error_get_reason(err) == OSP_REASON_STORAGE_FULL) {
        mem_effects eff;
        mem_effects_init(&eff);
        pthread_mutex_lock(&pw->q->mu);
        mem_queue_delete(pw->q->mem, &pw->index, 1, &eff);
        pthread_mutex_unlock(&pw->q->mu);
        effects_run(pw->q, &eff);
    }
    pw->done(pw->ctx, err, err ? 0 : pw->index, pw->request_id);
    free(pw);
}

static void embedded_put(osp_queue *queue, const osp_queue_put_args *args,
                         osp_queue_put_fn done, void *ctx) {
    embedded_queue *q = (embedded_queue *)queue;
    embedded_store *store = store_of(queue);
    char fresh_id[37];
    const char *request_id =
        queue_tags_find(args->tags, args->n_tags, "requestId");
    if (request_id == NULL) {
        queue_request_id_new(fresh_id);
        request_id = fresh_id;
    }
    osp_error *err = queue_log_check(store->log);
    if (err != NULL) {
        done(ctx, err, 0, request_id);
        return;
    }
    size_t id_len = strlen(request_id);
    put_waiter *pw = malloc(sizeof *pw + id_len + 1);
    if (pw == NULL) {
        done(ctx, osp_error_out_of_memory(), 0, request_id);
        return;
    }
    memcpy(pw->request_id, request_id, id_len + 1);
    pw->waiter.done = put_durable;
    pw->q = q;
    pw->done = done;
    pw->ctx = ctx;

    mem_effects eff;
    mem_effects_init(&eff);
    log_batch batch;
    log_batch_init(&batch);
    pthread_mutex_lock(&q->mu);
    err = mem_queue_check_put(q->mem, args->size);
    if (err != NULL)
        goto unlock;
    uint64_t index = mem_queue_next_index(q->mem);
    osp_queue_item *item =
        queue_item_new(index, args->priority, request_id, args->tags,
                       args->n_tags, args->data, args->size, wall_clock_ns());
    if (item == NULL) {
        err = osp_error_out_of_memory();
        goto unlock;
    }
    log_batch_put(&batch, queue->name, item);
    if (batch.oom || batch.too_large) {
        free(item);
        err = batch.oom ? osp_error_out_of_memory()
                        : osp_error_new_reason(OSP_ERROR_INVALID_ARG,
                                               OSP_REASON_TOO_LARGE,
                                               "the item's tags and data are "
                                               "too large to store");
        goto unlock;
    }
    if (!mem_queue_put(q->mem, item, false, &eff)) {
        err = osp_error_out_of_memory();
        goto unlock;
    }
    pw->index = index;
    err = queue_settle(q, &batch, &pw->waiter, &eff);
unlock:
    pthread_mutex_unlock(&q->mu);
    log_batch_destroy(&batch);
    if (err != NULL) {
        done(ctx, err, 0, request_id);
        free(pw);
    }
    effects_run(q, &eff);
}

/* The shape of delete, truncate, commit and end: check the log, apply
 * under the lock, append, and let the log answer. `apply` fills the
 * batch with the call's own records (besides the deletions it made). */
typedef void (*apply_fn)(embedded_queue *q, void *arg, log_batch *batch,
                         mem_effects *eff);

static void mutate(embedded_queue *q, apply_fn apply, void *arg,
                   osp_queue_done_fn done, void *ctx) {
    embedded_store *store = store_of(&q->super);
    osp_error *err = queue_log_check(store->log);
    done_waiter *dw = err ? NULL : malloc(sizeof *dw);
    if (err == NULL && dw == NULL)
        err = osp_error_out_of_memory();
    if (err != NULL) {
        if (done)
            done(ctx, err);
        else
            osp_error_free(err);
        return;
    }
    dw->waiter.done = done_durable;
    dw->done = done;
    dw->ctx = ctx;
    mem_effects eff;
    mem_effects_init(&eff);
    log_batch batch;
    log_batch_init(&batch);
    pthread_mutex_lock(&q->mu);
    apply(q, arg, &batch, &eff);
    err = queue_settle(q, &batch, &dw->waiter, &eff);
    pthread_mutex_unlock(&q->mu);
    log_batch_destroy(&batch);
    if (err != NULL) {
        done(ctx, err);
        free(dw);
    }
    effects_run(q, &eff);
}

typedef struct index_list {
    const uint64_t *indexes;
    size_t n;
} index_list;

static void apply_delete(embedded_queue *q, void *arg, log_batch *batch,
                         mem_effects *eff) {
    (void)batch;
    index_list *list = arg;
    mem_queue_delete(q->mem, list->indexes, list->n, eff);
}

static void embedded_delete(osp_queue *queue, const uint64_t *indexes, size_t n,
                            osp_queue_done_fn done, void *ctx) {
    index_list list = {indexes, n};
    mutate((embedded_queue *)queue, apply_delete, &list, done, ctx);
}

static void apply_commit(embedded_queue *q, void *arg, log_batch *batch,
                         mem_effects *eff) {
    (void)batch;
    index_list *list = arg;
    mem_queue_commit(q->mem, list->indexes, list->n, eff);
}

static void embedded_commit(osp_queue *queue, const char *gid, const char *uid,
                            const uint64_t *indexes, size_t n,
                            osp_queue_done_fn done, void *ctx) {
    (void)gid; /* a commit deletes the items for every group */
    (void)uid;
    index_list list = {indexes, n};
    mutate((embedded_queue *)queue, apply_commit, &list, done, ctx);
}

static void apply_truncate(embedded_queue *q, void *arg, log_batch *batch,
                           mem_effects *eff) {
    uint64_t before = *(const uint64_t *)arg;
    size_t first = eff->n_deleted;
    mem_queue_truncate(q->mem, before, eff);
    /* The TRUNCATE record says it for these; keep the others (deletions
     * the truncate caused, such as auto-commit deliveries). */
    size_t w = first;
    for (size_t i = first; i < eff->n_deleted; i++)
        if (eff->deleted[i] >= before)
            eff->deleted[w++] = eff->deleted[i];
    eff->n_deleted = w;
    log_batch_truncate(batch, q->super.name, before);
}

static void embedded_truncate(osp_queue *queue, uint64_t before,
                              osp_queue_done_fn done, void *ctx) {
    mutate((embedded_queue *)queue, apply_truncate, &before, done, ctx);
}

static void apply_end(embedded_queue *q, void *arg, log_batch *batch,
                      mem_effects *eff) {
    bool force = *(const bool *)arg;
    mem_queue_end(q->mem, force, eff);
    log_batch_state(batch, q->super.name, mem_queue_next_index(q->mem), true);
}

static void embedded_end(osp_queue *queue, bool force, osp_queue_done_fn done,
                         void *ctx) {
    mutate((embedded_queue *)queue, apply_end, &force, done, ctx);
}

/* A reject changes only who holds the items, which the log does not
 * keep (consumers do not outlive the process): answered at once. */
static void embedded_reject(osp_queue *queue, const char *gid, const char *uid,
                            const uint64_t *indexes, size_t n, const char *code,
                            const char *reason, osp_queue_done_fn done,
                            void *ctx) {
    embedded_queue *q = (embedded_queue *)queue;
    OSP_LOG_VERBOSE("queue %s: %s.%s gives back %zu item(s): %s %s",
                    queue->name, gid, uid, n, code ? code : "",
                    reason ? reason : "");
    mem_effects eff;
    mem_effects_init(&eff);
    log_batch batch;
    log_batch_init(&batch);
    pthread_mutex_lock(&q->mu);
    mem_queue_reject(q->mem, gid, uid, indexes, n, &eff);
    osp_error *err = queue_settle(q, &batch, NULL, &eff);
    pthread_mutex_unlock(&q->mu);
    log_batch_destroy(&batch);
    done(ctx, err);
    effects_run(q, &eff);
}

/* ---- reads ---- */

/* A copy of the get's arguments that outlives the call. NULL when out of
 * memory. */
static embedded_get *get_new(const osp_queue_get_args *args,
                             osp_queue_items_fn done, void *ctx) {
    embedded_get *eg = calloc(1, sizeof *eg);
    if (eg == NULL)
        return NULL;
    size_t bytes = args->n_filters * sizeof(osp_queue_tag);
    if (args->request_id)
        bytes += strlen(args->request_id) + 1;
    for (size_t i = 0; i < args->n_filters; i++)
        bytes +=
            strlen(args->filters[i].key) + strlen(args->filters[i].value) + 2;
    eg->get.strings = malloc(bytes ? bytes : 1);
    if (eg->get.strings == NULL) {
        free(eg);
        return NULL;
    }
    osp_queue_tag *filters = (osp_queue_tag *)eg->get.strings;
    char *cursor = eg->get.strings + args->n_filters * sizeof *filters;
    eg->get.args = *args;
    if (args->request_id) {
        size_t n = strlen(args->request_id) + 1;
        eg->get.args.request_id = memcpy(cursor, args->request_id, n);
        cursor += n;
    }
    for (size_t i = 0; i < args->n_filters; i++) {
        size_t k = strlen(args->filters[i].key) + 1;
        size_t v = strlen(args->filters[i].value) + 1;
        filters[i].key = memcpy(cursor, args->filters[i].key, k);
        cursor += k;
        filters[i].value = memcpy(cursor, args->filters[i].value, v);
        cursor += v;
    }
    eg->get.args.filters = filters;
    eg->get.filters = filters;
    eg->get.done = done;
    eg->get.ctx = ctx;
    return eg;
}

static void embedded_get_items(osp_queue *queue, const osp_queue_get_args *args,
                               osp_queue_items_fn done, void *ctx) {
    embedded_queue *q = (embedded_queue *)queue;
    embedded_store *store = store_of(queue);
    osp_error *err = args->auto_delete ? queue_log_check(store->log) : NULL;
    embedded_get *eg = err ? NULL : get_new(args, done, ctx);
    if (err == NULL && eg == NULL)
        err = osp_error_out_of_memory();
    if (err != NULL) {
        done(ctx, err, NULL, 0);
        return;
    }
    mem_effects eff;
    mem_effects_init(&eff);
    log_batch batch;
    log_batch_init(&batch);
    pthread_mutex_lock(&q->mu);
    err = mem_queue_get(q->mem, &eg->get, osp_now_ns(), &eff);
    /* Read before unlocking: once it waits, another thread may answer
     * and free it. */
    uint64_t deadline = err ? 0 : eg->get.deadline_ns;
    if (err == NULL) {
        osp_error *log_err = queue_settle(q, &batch, NULL, &eff);
        osp_error_free(log_err); /* the get itself carries it */
    }
    pthread_mutex_unlock(&q->mu);
    log_batch_destroy(&batch);
    if (err != NULL) {
        get_free(eg);
        done(ctx, err, NULL, 0);
    }
    effects_run(q, &eff);
    if (deadline != 0)
        timer_poke(store, deadline);
}

static osp_error *embedded_attributes(osp_queue *queue,
                                      osp_queue_attribute **out, size_t *n) {
    embedded_queue *q = (embedded_queue *)queue;
    pthread_mutex_lock(&q->mu);
    osp_error *err =
        mem_queue_attributes(q->mem, embedded_ops.name, osp_now_ns(), out, n);
    pthread_mutex_unlock(&q->mu);
    return err;
}

static osp_error *embedded_search(osp_queue *queue, uint64_t index,
                                  osp_queue_search_result *out) {
    embedded_queue *q = (embedded_queue *)queue;
    pthread_mutex_lock(&q->mu);
    mem_queue_search(q->mem, index, out);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static osp_error *embedded_count(osp_queue *queue, int priority,
                                 const osp_queue_tag *filters, size_t n_filters,
                                 uint64_t *out) {
    embedded_queue *q = (embedded_queue *)queue;
    pthread_mutex_lock(&q->mu);
    *out = mem_queue_count(q->mem, priority, filters, n_filters);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void embedded_get_stats(osp_queue *queue, osp_queue_stats *out) {
    embedded_queue *q = (embedded_queue *)queue;
    pthread_mutex_lock(&q->mu);
    mem_queue_stats(q->mem, out);
    pthread_mutex_unlock(&q->mu);
}

/* ---- consumers ---- */

static osp_error *embedded_consumer_open(osp_queue *queue,
                                         const osp_queue_consumer_args *args,
                                         osp_queue_consumer **out) {
    embedded_queue *q = (embedded_queue *)queue;
    embedded_consumer *ec = calloc(1, sizeof *ec);
    if (ec == NULL)
        return osp_error_out_of_memory();
    ec->super.queue = queue;
    mem_effects eff;
    mem_effects_init(&eff);
    log_batch batch;
    log_batch_init(&batch);
    pthread_mutex_lock(&q->mu);
    ec->mc = mem_consumer_open(q->mem, args, osp_now_ns(), &eff);
    osp_error *err = queue_settle(q, &batch, NULL, &eff);
    pthread_mutex_unlock(&q->mu);
    osp_error_free(err); /* auto-commit deletions: the log reports it */
    log_batch_destroy(&batch);
    if (ec->mc == NULL) {
        effects_run(q, &eff);
        free(ec);
        return osp_error_out_of_memory();
    }
    *out = &ec->super;
    effects_run(q, &eff);
    return NULL;
}

static void embedded_consumer_close(osp_queue_consumer *consumer) {
    embedded_consumer *ec = (embedded_consumer *)consumer;
    embedded_queue *q = (embedded_queue *)consumer->queue;
    embedded_store *store = store_of(consumer->queue);
    mem_consumer *c = ec->mc;
    mem_effects eff;
    mem_effects_init(&eff);
    log_batch batch;
    log_batch_init(&batch);
    pthread_mutex_lock(&q->mu);
    c->closing = true;
    while (c->delivering && !pthread_equal(c->deliver_thread, pthread_self()))
        pthread_cond_wait(&q->delivered, &q->mu);
    bool leaving = c->n_held > 0;
    bool last = mem_consumer_close(c, osp_now_ns(), &eff);
    uint64_t deadline = leaving ? c->leave_deadline_ns : 0;
    osp_error *err = queue_settle(q, &batch, NULL, &eff);
    pthread_mutex_unlock(&q->mu);
    osp_error_free(err);
    log_batch_destroy(&batch);
    if (last)
        mem_consumer_free(c);
    free(ec);
    effects_run(q, &eff);
    if (deadline != 0)
        timer_poke(store, deadline);
}

static void embedded_consumer_touch(osp_queue_consumer *consumer) {
    embedded_consumer *ec = (embedded_consumer *)consumer;
    embedded_queue *q = (embedded_queue *)consumer->queue;
    pthread_mutex_lock(&q->mu);
    mem_consumer_touch(ec->mc, osp_now_ns());
    pthread_mutex_unlock(&q->mu);
}

/* ---- open, recovery, free ---- */

static void replay_put(void *ctx, const char *name, osp_queue_item *item) {
    embedded_queue *q = store_find_or_add(ctx, name);
    if (q == NULL || item->index < mem_queue_next_index(q->mem)) {
        /* Out of memory, or a PUT out of order (only a hand-made file). */
        if (q != NULL)
            OSP_LOG_WARN("queue log: queue %s: item %llu out of order, "
                         "ignored",
                         name, (unsigned long long)item->index);
        free(item);
        return;
    }
    mem_effects eff;
    mem_effects_init(&eff);
    mem_queue_put(q->mem, item, true, &eff);
    mem_effects_destroy(&eff);
}

static void replay_delete(void *ctx, const char *name, const uint64_t *indexes,
                          size_t n) {
    embedded_queue *q = store_find_or_add(ctx, name);
    if (q == NULL)
        return;
    mem_effects eff;
    mem_effects_init(&eff);
    mem_queue_delete(q->mem, indexes, n, &eff);
    mem_effects_destroy(&eff);
}

static void replay_truncate(void *ctx, const char *name, uint64_t before) {
    embedded_queue *q = store_find_or_add(ctx, name);
    if (q == NULL)
        return;
    mem_effects eff;
    mem_effects_init(&eff);
    mem_queue_truncate(q->mem, before, &eff);
    mem_effects_destroy(&eff);
}

static void replay_state(void *ctx, const char *name, uint64_t next_index,
                         bool ended) {
    embedded_queue *q = store_find_or_add(ctx, name);
    if (q == NULL)
        return;
    mem_queue_raise_next_index(q->mem, next_index);
    mem_queue_set_ended(q->mem, ended);
}

static const log_replay_ops replay_ops = {
    .put = replay_put,
    .delete_items = replay_delete,
    .truncate = replay_truncate,
    .state = replay_state,
};

static void embedded_store_free(osp_queue_store *s) {
    embedded_store *store = (embedded_store *)s;
    embedded_queue *q;
    /* Long polls still waiting fail now. */
    for (size_t i = 0; (q = store_queue_at(store, i)) != NULL; i++) {
        mem_effects eff;
        mem_effects_init(&eff);
        pthread_mutex_lock(&q->mu);
        mem_queue_fail_waiting(q->mem, shutting_down_error, &eff);
        pthread_mutex_unlock(&q->mu);
        effects_run(q, &eff);
    }
    if (store->timer_started) {
        pthread_mutex_lock(&store->timer_mu);
        store->timer_stop = true;
        pthread_cond_signal(&store->timer_cond);
        pthread_mutex_unlock(&store->timer_mu);
        pthread_join(store->timer, NULL);
    }
    /* Writes what is pending and answers every acknowledgement. */
    queue_log_free(store->log);
    for (size_t i = 0; i < store->n_queues; i++)
        queue_free(store->queues[i]);
    free(store->queues);
    pthread_mutex_destroy(&store->mu);
    pthread_mutex_destroy(&store->timer_mu);
    pthread_cond_destroy(&store->timer_cond);
    free(store);
}

osp_error *queue_embedded_open(const osp_queue_store_options *opts,
                               osp_queue_store **out) {
    embedded_store *store = calloc(1, sizeof *store);
    if (store == NULL)
        return osp_error_out_of_memory();
    store->super.ops = &embedded_ops;
    store->limits.max_payload_bytes = opts->max_payload_bytes;
    store->limits.max_length = opts->max_length;
    store->limits.grace_ns = opts->consumer_grace_ns;
    store->timer_next_ns = UINT64_MAX;
    pthread_mutex_init(&store->mu, NULL);
    pthread_mutex_init(&store->timer_mu, NULL);
    cond_init_monotonic(&store->timer_cond);

    osp_error *err =
        queue_log_open(opts->dir, opts->fsync, &replay_ops, store, &store->log);
    if (err == NULL &&
        pthread_create(&store->timer, NULL, timer_main, store) != 0)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "queue store: cannot start the timer thread");
    else if (err == NULL)
        store->timer_started = true;
    if (err != NULL) {
        embedded_store_free(&store->super);
        return err;
    }
    *out = &store->super;
    return NULL;
}

queue_log *queue_embedded_log(osp_queue_store *store) {
    if (store->ops != &embedded_ops)
        return NULL;
    return ((embedded_store *)store)->log;
}

static uint64_t embedded_lost_records(osp_queue_store *store) {
    queue_log_stats stats;
    queue_log_get_stats(((embedded_store *)store)->log, &stats);
    return stats.lost_records;
}

static const queue_store_ops embedded_ops = {
    .name = "embedded",
    .store_lost_records = embedded_lost_records,
    .store_free = embedded_store_free,
    .store_queue = embedded_store_queue,
    .store_foreach = embedded_store_foreach,
    .put = embedded_put,
    .delete_items = embedded_delete,
    .truncate = embedded_truncate,
    .commit = embedded_commit,
    .reject = embedded_reject,
    .end = embedded_end,
    .get = embedded_get_items,
    .attributes = embedded_attributes,
    .search = embedded_search,
    .count = embedded_count,
    .get_stats = embedded_get_stats,
    .consumer_open = embedded_consumer_open,
    .consumer_close = embedded_consumer_close,
    .consumer_touch = embedded_consumer_touch,
};
