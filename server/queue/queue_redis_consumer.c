/*
 * Consumers of the Redis Streams queue store (queue_redis_internal.h): a
 * consumer gid.uid is the Redis consumer `uid` of the Redis consumer group
 * `gid` on every priority's stream of its queue.
 *
 * A consumer is driven by turns on the store threads (never two at once
 * for one consumer); a turn runs on every notification of its queue, on
 * this replica's commits, and every heartbeat period. One turn:
 *   1. the PUMP script: makes sure the group exists, lists the consumer's
 *      pending entries (delivered, not committed: its window), marks them
 *      fresh (idle 0) so that no one claims them while it lives, and
 *      records its heartbeat line (attributes);
 *   2. pending entries this session has not delivered (the same gid.uid
 *      is back after a drop, on this replica or another) go out again;
 *   3. with free window slots: entries other consumers of the group left
 *      idle longer than the claim threshold (a dead consumer, a replica
 *      killed mid-item, items given back by reject) are claimed with
 *      XAUTOCLAIM, then new entries are read with XREADGROUP, highest
 *      priority first.
 * A consumer that closes stops its heartbeat: its pending items wait for
 * the same gid.uid for the claim threshold (10 s by default, the
 * contract's grace period), then any consumer of the group claims them.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osprey/clock.h"
#include "osprey/log.h"
#include "queue_redis_internal.h"

/* The consumer whose turn runs on this thread (a close from its deliver
 * callback must not wait for the turn to end). */
static _Thread_local redis_consumer *current_turn;

static void consumer_free(redis_consumer *c) {
    for (size_t i = 0; i < c->n_filters; i++) {
        free((char *)c->filters[i].key);
        free((char *)c->filters[i].value);
    }
    free(c->filters);
    free(c->tags_line);
    free(c->gid);
    free(c->uid);
    free(c->sent);
    free(c);
}

static bool consumer_is_closed(redis_consumer *c) {
    pthread_mutex_lock(&c->q->mu);
    bool closed = c->closed;
    pthread_mutex_unlock(&c->q->mu);
    return closed;
}

/* ---- one turn ---- */

typedef struct turn {
    redis_consumer *c;
    redis_conn *conn;
    uint64_t *commit; /* auto_commit: delivered, to delete */
    size_t n_commit, cap_commit;
    bool failed; /* Redis failed: end the turn */
    bool closed; /* closed from its own deliver: end the turn */
} turn;

static void sent_add(redis_consumer *c, uint64_t index) {
    if (c->n_sent == c->cap_sent) {
        size_t cap = c->cap_sent ? c->cap_sent * 2 : 16;
        uint64_t *grown = realloc(c->sent, cap * sizeof *grown);
        if (grown == NULL)
            return; /* it is delivered again next turn: harmless */
        c->sent = grown;
        c->cap_sent = cap;
    }
    c->sent[c->n_sent++] = index;
}

static bool sent_has(const redis_consumer *c, uint64_t index) {
    for (size_t i = 0; i < c->n_sent; i++)
        if (c->sent[i] == index)
            return true;
    return false;
}

static void stream_key(char *buf, size_t cap, const redis_queue *q, int prio) {
    snprintf(buf, cap, "%s:s:%d", q->key, prio);
}

/* XACK of one entry this group will not deliver (filtered out, or
 * malformed). */
static void skip_entry(turn *t, const char *stream, const char *id,
                       size_t id_len) {
    redis_args a;
    redis_args_init(&a);
    redis_args_str(&a, "XACK");
    redis_args_str(&a, stream);
    redis_args_str(&a, t->c->gid);
    redis_args_add(&a, id, id_len);
    redisReply *r = NULL;
    osp_error *err = redis_conn_command(t->conn, &a, false, &r);
    redis_args_destroy(&a);
    if (r != NULL)
        freeReplyObject(r);
    if (err != NULL) {
        t->failed = true;
        osp_error_free(err);
    }
}

/* Delivers one stream entry (borrowed) to the consumer; true when it was
 * delivered. */
static bool deliver_entry(turn *t, const char *stream, const redisReply *e,
                          bool redelivery) {
    redis_consumer *c = t->c;
    redis_queue *q = c->q;
    bool malformed = false;
    osp_queue_item *item = redis_entry_item(e, &malformed);
    if (item == NULL) {
        if (malformed && redis_reply_is_array(e, 1) &&
            redis_reply_is_string(e->element[0])) {
            OSP_LOG_WARN("queue '%s': skipping a malformed Redis entry",
                         q->super.name);
            skip_entry(t, stream, e->element[0]->str, e->element[0]->len);
        }
        return false;
    }
    if (!queue_item_matches(item, c->filters, c->n_filters)) {
        skip_entry(t, stream, e->element[0]->str, e->element[0]->len);
        osp_queue_item_free(item);
        return false;
    }
    if (consumer_is_closed(c)) { /* closed from its own deliver */
        t->closed = true;
        osp_queue_item_free(item);
        return false;
    }
    uint64_t index = item->index;
    if (c->auto_commit) {
        if (t->n_commit == t->cap_commit) {
            size_t cap = t->cap_commit ? t->cap_commit * 2 : 16;
            uint64_t *grown = realloc(t->commit, cap * sizeof *grown);
            if (grown != NULL) {
                t->commit = grown;
                t->cap_commit = cap;
            }
        }
        if (t->n_commit < t->cap_commit)
            t->commit[t->n_commit++] = index;
    } else {
        sent_add(c, index);
    }
    if (redelivery)
        atomic_fetch_add(&q->redeliveries, 1);
    c->deliver(c->ctx, item);
    if (current_turn == c && consumer_is_closed(c))
        t->closed = true;
    return true;
}

/* Delivers every entry of an entry array reply (borrowed); returns how
 * many were delivered, *seen how many there were. */
static size_t deliver_entries(turn *t, const char *stream,
                              const redisReply *entries, bool redelivery,
                              size_t *seen) {
    size_t n = 0;
    *seen = 0;
    if (!redis_reply_is_array(entries, 0))
        return 0;
    for (size_t i = 0; i < entries->elements && !t->failed && !t->closed; i++) {
        const redisReply *e = entries->element[i];
        if (e == NULL || e->type != REDIS_REPLY_ARRAY)
            continue; /* an entry deleted meanwhile */
        (*seen)++;
        if (deliver_entry(t, stream, e, redelivery))
            n++;
    }
    return n;
}

static redisReply *turn_command(turn *t, redis_args *a) {
    redisReply *r = NULL;
    osp_error *err = redis_conn_command(t->conn, a, false, &r);
    redis_args_destroy(a);
    if (err != NULL) {
        redis_store_log_background(t->c->q->rs, "consumer", err);
        osp_error_free(err);
        t->failed = true;
        return NULL;
    }
    return r;
}

/* Step 2: the consumer's pending entries of one stream that this session
 * has not delivered. */
static void redeliver_pending(turn *t, const char *stream, const uint64_t *ids,
                              size_t n) {
    redis_consumer *c = t->c;
    redis_args a;
    redis_args_init(&a);
    redis_args_str(&a, "XCLAIM");
    redis_args_str(&a, stream);
    redis_args_str(&a, c->gid);
    redis_args_str(&a, c->uid);
    redis_args_str(&a, "0");
    size_t asked = 0;
    for (size_t i = 0; i < n; i++)
        if (!sent_has(c, ids[i])) {
            redis_args_fmt(&a, "%llu-0", (unsigned long long)ids[i]);
            asked++;
        }
    if (asked == 0) {
        redis_args_destroy(&a);
        return;
    }
    redisReply *r = turn_command(t, &a);
    if (r == NULL)
        return;
    size_t seen;
    deliver_entries(t, stream, r, true, &seen);
    freeReplyObject(r);
}

/* Step 3a: entries idle past the claim threshold in the group. */
static size_t claim_idle(turn *t, const char *stream, size_t want) {
    redis_consumer *c = t->c;
    redis_args a;
    redis_args_init(&a);
    redis_args_str(&a, "XAUTOCLAIM");
    redis_args_str(&a, stream);
    redis_args_str(&a, c->gid);
    redis_args_str(&a, c->uid);
    redis_args_fmt(&a, "%llu", (unsigned long long)c->q->rs->url.claim_idle_ms);
    redis_args_str(&a, "0-0");
    redis_args_str(&a, "COUNT");
    redis_args_fmt(&a, "%zu", want);
    redisReply *r = turn_command(t, &a);
    if (r == NULL)
        return 0;
    size_t n = 0, seen;
    if (redis_reply_is_array(r, 2))
        n = deliver_entries(t, stream, r->element[1], true, &seen);
    freeReplyObject(r);
    return n;
}

/* Step 3b: new entries for the group; stops when the stream has no more
 * or `want` were delivered. */
static size_t read_new(turn *t, const char *stream, size_t want) {
    redis_consumer *c = t->c;
    size_t delivered = 0;
    /* Filtered-out entries are skipped without a delivery: a few rounds,
     * then the next turn goes on. */
    for (int round = 0;
         round < 8 && delivered < want && !t->failed && !t->closed; round++) {
        size_t ask = want - delivered;
        redis_args a;
        redis_args_init(&a);
        redis_args_str(&a, "XREADGROUP");
        redis_args_str(&a, "GROUP");
        redis_args_str(&a, c->gid);
        redis_args_str(&a, c->uid);
        redis_args_str(&a, "COUNT");
        redis_args_fmt(&a, "%zu", ask);
        redis_args_str(&a, "STREAMS");
        redis_args_str(&a, stream);
        redis_args_str(&a, ">");
        redisReply *r = turn_command(t, &a);
        if (r == NULL)
            break;
        size_t seen = 0;
        if (redis_reply_is_array(r, 1) &&
            redis_reply_is_array(r->element[0], 2))
            delivered += deliver_entries(t, stream, r->element[0]->element[1],
                                         false, &seen);
        freeReplyObject(r);
        if (seen < ask)
            break; /* the stream has no more */
    }
    return delivered;
}

static void commit_delivered(turn *t) {
    if (t->n_commit == 0 || t->failed)
        return;
    redis_queue *q = t->c->q;
    redis_args a;
    redis_args_init(&a);
    redis_args_script_head(&a, q);
    for (size_t i = 0; i < t->n_commit; i++)
        redis_args_fmt(&a, "%llu", (unsigned long long)t->commit[i]);
    redisReply *r = NULL;
    osp_error *err = redis_conn_script(t->conn, REDIS_SCRIPT_DELETE, &a, &r);
    redis_args_destroy(&a);
    if (err != NULL) {
        /* Still pending: delivered again when Redis is back. */
        redis_store_log_background(q->rs, "auto-commit", err);
        osp_error_free(err);
        return;
    }
    long long n;
    if (redis_reply_is_array(r, 2) && redis_reply_int(r->element[0], &n) &&
        n > 0)
        atomic_fetch_add(&q->commits, (uint64_t)n);
    freeReplyObject(r);
}

/* The PUMP script's reply {prio, {id...}, ...} into prios and the pending
 * indexes of each; false when malformed. */
typedef struct pending_list {
    int prio;
    uint64_t *ids;
    size_t n;
} pending_list;

static bool parse_pump_reply(const redisReply *r, pending_list *lists,
                             size_t *n_lists, size_t *total) {
    *n_lists = 0;
    *total = 0;
    if (!redis_reply_is_array(r, 0) || r->elements % 2 != 0)
        return false;
    for (size_t i = 0; i < r->elements && *n_lists < REDIS_MAX_PRIORITIES;
         i += 2) {
        long long prio;
        const redisReply *ids = r->element[i + 1];
        if (!redis_reply_int(r->element[i], &prio) || prio < -1000000000 ||
            prio > 1000000000 || !redis_reply_is_array(ids, 0))
            return false;
        pending_list *l = &lists[(*n_lists)++];
        l->prio = (int)prio;
        l->n = 0;
        l->ids = ids->elements ? calloc(ids->elements, sizeof *l->ids) : NULL;
        if (ids->elements > 0 && l->ids == NULL)
            return false;
        for (size_t k = 0; k < ids->elements; k++) {
            if (!redis_reply_is_string(ids->element[k]))
                return false;
            uint64_t index =
                redis_id_index(ids->element[k]->str, ids->element[k]->len);
            if (index != 0)
                l->ids[l->n++] = index;
        }
        *total += l->n;
    }
    return true;
}

static void turn_run(redis_consumer *c, redis_conn *conn) {
    redis_queue *q = c->q;
    turn t = {.c = c, .conn = conn};
    char start_id[32] = "0";
    if (!c->groups_ready) {
        if (c->start_index < 0)
            strcpy(start_id, "$");
        else if (c->start_index > 1)
            snprintf(start_id, sizeof start_id, "%lld-0",
                     (long long)c->start_index - 1);
    }
    redis_args a;
    redis_args_init(&a);
    redis_args_script_head(&a, q);
    redis_args_str(&a, c->gid);
    redis_args_str(&a, c->uid);
    redis_args_fmt(&a, "%u", c->window + 64);
    redis_args_fmt(&a, "%lld|%u|%d|%s", (long long)c->start_index, c->window,
                   c->auto_commit ? 1 : 0, c->tags_line);
    redis_args_str(&a, start_id);
    redisReply *r = NULL;
    osp_error *err = redis_conn_script(conn, REDIS_SCRIPT_PUMP, &a, &r);
    redis_args_destroy(&a);
    if (err != NULL) {
        redis_store_log_background(q->rs, "consumer", err);
        osp_error_free(err);
        return;
    }
    pending_list lists[REDIS_MAX_PRIORITIES];
    size_t n_lists = 0, total = 0;
    bool ok = parse_pump_reply(r, lists, &n_lists, &total);
    freeReplyObject(r);
    if (!ok) {
        OSP_LOG_WARN("queue '%s': unexpected reply to a consumer's turn",
                     q->super.name);
        goto out;
    }
    c->groups_ready = true;

    /* What this session sent and is no longer pending was committed,
     * deleted or claimed by another consumer. */
    size_t keep = 0;
    for (size_t i = 0; i < c->n_sent; i++) {
        bool pending = false;
        for (size_t l = 0; l < n_lists && !pending; l++)
            for (size_t k = 0; k < lists[l].n && !pending; k++)
                pending = lists[l].ids[k] == c->sent[i];
        if (pending)
            c->sent[keep++] = c->sent[i];
    }
    c->n_sent = keep;

    char stream[QUEUE_MAX_NAME_BYTES + 128];
    for (size_t l = 0; l < n_lists && !t.failed && !t.closed; l++) {
        stream_key(stream, sizeof stream, q, lists[l].prio);
        redeliver_pending(&t, stream, lists[l].ids, lists[l].n);
    }
    size_t free_slots = c->auto_commit
                            ? REDIS_AUTO_COMMIT_BATCH
                            : (c->window > total ? c->window - total : 0);
    for (size_t l = 0; l < n_lists && free_slots > 0 && !t.failed && !t.closed;
         l++) {
        stream_key(stream, sizeof stream, q, lists[l].prio);
        free_slots -= claim_idle(&t, stream, free_slots);
        if (free_slots > 0 && !t.failed && !t.closed)
            free_slots -= read_new(&t, stream, free_slots);
    }
    commit_delivered(&t);
out:
    for (size_t l = 0; l < n_lists; l++)
        free(lists[l].ids);
    free(t.commit);
}

static void pump_job_run(redis_job *job, redis_conn *conn) {
    redis_consumer *c =
        (redis_consumer *)((char *)job - offsetof(redis_consumer, pump_job));
    redis_queue *q = c->q;
    pthread_mutex_lock(&q->mu);
    c->pump_queued = false;
    bool closed = c->closed;
    if (!closed)
        c->pump_running = true;
    pthread_mutex_unlock(&q->mu);
    if (!closed) {
        current_turn = c;
        turn_run(c, conn);
        current_turn = NULL;
    }
    pthread_mutex_lock(&q->mu);
    c->pump_running = false;
    pthread_cond_broadcast(&q->cond);
    bool again = c->pump_again && !c->closed;
    c->pump_again = false;
    if (again)
        redis_consumer_schedule_locked(c);
    int refs = --c->refs;
    pthread_mutex_unlock(&q->mu);
    if (refs == 0)
        consumer_free(c);
}

/* Only when the store is closing (the caller holds q->mu). */
static _Thread_local bool pump_submit_failed;
static void pump_job_fail(redis_job *job, osp_error *err) {
    (void)job;
    osp_error_free(err);
    pump_submit_failed = true;
}

void redis_consumer_schedule_locked(redis_consumer *c) {
    if (c->closed)
        return;
    if (c->pump_running) {
        c->pump_again = true;
        return;
    }
    if (c->pump_queued)
        return;
    c->pump_queued = true;
    c->refs++;
    pump_submit_failed = false;
    redis_store_submit(c->q->rs, &c->pump_job, true);
    if (pump_submit_failed) {
        c->pump_queued = false;
        c->refs--; /* the owner's ref is still there */
    }
}

/* ---- open, close, touch ---- */

osp_error *redis_consumer_open(osp_queue *queue,
                               const osp_queue_consumer_args *args,
                               osp_queue_consumer **out) {
    redis_queue *q = (redis_queue *)queue;
    if (args->gid[0] == '\0' || args->uid[0] == '\0' || args->uid[0] == '~')
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "a consumer's gid and uid are not empty and "
                             "the uid does not start with '~'");
    redis_consumer *c = calloc(1, sizeof *c);
    if (c == NULL)
        return osp_error_out_of_memory();
    c->super.queue = queue;
    c->q = q;
    c->gid = strdup(args->gid);
    c->uid = strdup(args->uid);
    c->start_index = args->start_index;
    c->window = args->window;
    c->auto_commit = args->auto_commit;
    c->deliver = args->deliver;
    c->ctx = args->ctx;
    c->pump_job.run = pump_job_run;
    c->pump_job.fail = pump_job_fail;
    c->refs = 1;
    atomic_store(&c->touched_ns, osp_now_ns());
    bool ok = c->gid != NULL && c->uid != NULL;
    size_t line_len = 1;
    if (ok && args->n_filters > 0) {
        c->filters = calloc(args->n_filters, sizeof *c->filters);
        ok = c->filters != NULL;
        for (size_t i = 0; ok && i < args->n_filters; i++) {
            c->filters[i].key = strdup(args->filters[i].key);
            c->filters[i].value = strdup(args->filters[i].value);
            c->n_filters++;
            ok = c->filters[i].key != NULL && c->filters[i].value != NULL;
            line_len += strlen(args->filters[i].key) +
                        strlen(args->filters[i].value) + 2;
        }
    }
    if (ok)
        ok = (c->tags_line = malloc(line_len)) != NULL;
    if (!ok) {
        consumer_free(c);
        return osp_error_out_of_memory();
    }
    char *p = c->tags_line;
    p[0] = '\0';
    for (size_t i = 0; i < c->n_filters; i++)
        p += sprintf(p, "%s%s=%s", i ? "," : "", c->filters[i].key,
                     c->filters[i].value);

    /* *out is set before the first turn can deliver. */
    *out = &c->super;
    pthread_mutex_lock(&q->mu);
    c->next = q->consumers;
    q->consumers = c;
    atomic_fetch_add(&q->n_consumers, 1);
    redis_consumer_schedule_locked(c);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* After close: the consumer's heartbeat line goes, and its Redis consumer
 * when it holds nothing. */
typedef struct forget_job {
    redis_job base;
    redis_queue *q;
    char *gid, *uid;
} forget_job;

static void forget_job_free(forget_job *j) {
    free(j->gid);
    free(j->uid);
    free(j);
}

static void forget_job_run(redis_job *job, redis_conn *conn) {
    forget_job *j = (forget_job *)job;
    redis_args a;
    redis_args_init(&a);
    redis_args_script_head(&a, j->q);
    redis_args_str(&a, j->gid);
    redis_args_str(&a, j->uid);
    redisReply *r = NULL;
    osp_error *err = redis_conn_script(conn, REDIS_SCRIPT_FORGET, &a, &r);
    redis_args_destroy(&a);
    osp_error_free(err); /* the line goes stale by itself */
    if (r != NULL)
        freeReplyObject(r);
    forget_job_free(j);
}

static void forget_job_fail(redis_job *job, osp_error *err) {
    osp_error_free(err);
    forget_job_free((forget_job *)job);
}

/* The job that forgets c's line in the queue's consumer table, or NULL
 * when memory is short (the line then goes stale by itself). Built while
 * the caller still holds its reference to c. */
static forget_job *forget_job_new(redis_queue *q, const redis_consumer *c) {
    forget_job *f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    f->base.run = forget_job_run;
    f->base.fail = forget_job_fail;
    f->q = q;
    f->gid = strdup(c->gid);
    f->uid = strdup(c->uid);
    if (f->gid == NULL || f->uid == NULL) {
        forget_job_free(f);
        return NULL;
    }
    return f;
}

void redis_consumer_close(osp_queue_consumer *consumer) {
    redis_consumer *c = (redis_consumer *)consumer;
    redis_queue *q = c->q;
    /* Before our reference goes: once it has, a job on the store's worker
     * may drop the last one and free c. */
    forget_job *f = forget_job_new(q, c);
    pthread_mutex_lock(&q->mu);
    if (!c->closed) {
        c->closed = true;
        for (redis_consumer **link = &q->consumers; *link != NULL;
             link = &(*link)->next)
            if (*link == c) {
                *link = c->next;
                break;
            }
        atomic_fetch_sub(&q->n_consumers, 1);
    }
    /* deliver is never called after this returns; from its own deliver
     * callback the turn notices the close and stops. */
    if (current_turn != c)
        while (c->pump_running)
            pthread_cond_wait(&q->cond, &q->mu);
    int refs = --c->refs;
    pthread_mutex_unlock(&q->mu);

    if (f != NULL)
        redis_store_submit(q->rs, &f->base, false);
    if (refs == 0)
        consumer_free(c);
}

void redis_consumer_touch(osp_queue_consumer *consumer) {
    redis_consumer *c = (redis_consumer *)consumer;
    atomic_store(&c->touched_ns, osp_now_ns());
}
