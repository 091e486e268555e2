/*
 * The Redis Streams queue store (--queue-store=redis://HOST:PORT[/DB]):
 * its table of queue_store_ops, its threads (queue_redis_internal.h), and
 * the operations that are one script each (put, delete, truncate, commit,
 * reject, end, get, attributes, search, count). Consumers are in
 * queue_redis_consumer.c, the key layout in queue_redis_scripts.c, the
 * user's view in docs/queue-redis.md.
 *
 * Replicas: every fact lives in Redis and every change is one atomic
 * script, so any number of Osprey processes on one Redis serve the same
 * queues; what a replica keeps for itself is only what it serves now
 * (waiting gets, open consumers) and its counters.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "osprey/clock.h"
#include "osprey/log.h"
#include "queue_redis_internal.h"

_Thread_local redis_conn *redis_current_conn;

/* Tags a put may carry. */
#define MAX_PUT_TAGS 256
/* The idle time given to a rejected item: far past any claim threshold,
 * so that the next consumer of its group takes it at once. */
#define REJECTED_IDLE_MS 1000000000ull

static const queue_store_ops redis_ops;

static redis_store *store_of(osp_queue_store *s) {
    return (redis_store *)s;
}
static redis_queue *queue_of(osp_queue *q) {
    return (redis_queue *)q;
}

static void atomic_max(_Atomic uint64_t *v, uint64_t x) {
    uint64_t cur = atomic_load(v);
    while (cur < x && !atomic_compare_exchange_weak(v, &cur, x)) {
    }
}

static int64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- jobs and store threads ---- */

void redis_store_submit(redis_store *rs, redis_job *job, bool internal) {
    osp_error *err = NULL;
    pthread_mutex_lock(&rs->mu);
    if (rs->workers_exit || (rs->stopping && !internal))
        err = osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                   OSP_REASON_SHUTTING_DOWN,
                                   "the queue store is closing");
    else if (!internal && rs->n_jobs >= REDIS_MAX_QUEUED_JOBS)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "queue store unavailable: %d operations are "
                            "already waiting for Redis",
                            REDIS_MAX_QUEUED_JOBS);
    if (err == NULL) {
        job->next = NULL;
        if (rs->jobs_tail != NULL)
            rs->jobs_tail->next = job;
        else
            rs->jobs_head = job;
        rs->jobs_tail = job;
        rs->n_jobs++;
        pthread_cond_signal(&rs->jobs_cond);
    }
    pthread_mutex_unlock(&rs->mu);
    if (err != NULL)
        job->fail(job, err);
}

typedef struct worker_arg {
    redis_store *rs;
    int slot;
} worker_arg;

static void put_job_run(redis_job *job, redis_conn *conn);
static void put_jobs_run(redis_job **jobs, size_t n, redis_conn *conn);

/* A store thread: runs jobs until the store closes and the list is
 * drained. */
static void *worker_main(void *arg) {
    redis_store *rs = ((worker_arg *)arg)->rs;
    redis_conn *conn = &rs->conns[((worker_arg *)arg)->slot];
    free(arg);
    redis_current_conn = conn;
    pthread_mutex_lock(&rs->mu);
    for (;;) {
        while (rs->jobs_head == NULL && !rs->workers_exit)
            pthread_cond_wait(&rs->jobs_cond, &rs->mu);
        redis_job *job = rs->jobs_head;
        if (job == NULL)
            break;
        rs->jobs_head = job->next;
        if (rs->jobs_head == NULL)
            rs->jobs_tail = NULL;
        rs->n_jobs--;
        /* Puts waiting behind this one go out with it, pipelined: one
         * round trip for all of them (16 putters on 4 connections waited
         * for one script round trip each). */
        redis_job *puts[REDIS_PIPELINE_MAX];
        size_t n_puts = 0;
        if (job->run == put_job_run) {
            puts[n_puts++] = job;
            while (n_puts < REDIS_PIPELINE_MAX && rs->jobs_head != NULL &&
                   rs->jobs_head->run == put_job_run) {
                puts[n_puts++] = rs->jobs_head;
                rs->jobs_head = rs->jobs_head->next;
                if (rs->jobs_head == NULL)
                    rs->jobs_tail = NULL;
                rs->n_jobs--;
            }
        }
        pthread_mutex_unlock(&rs->mu);
        if (n_puts > 1)
            put_jobs_run(puts, n_puts, conn);
        else
            job->run(job, conn);
        pthread_mutex_lock(&rs->mu);
    }
    pthread_mutex_unlock(&rs->mu);
    redis_current_conn = NULL;
    return NULL;
}

void redis_store_log_background(redis_store *rs, const char *what,
                                const osp_error *err) {
    uint64_t now = osp_now_ns();
    pthread_mutex_lock(&rs->mu);
    bool log = now - rs->last_down_log_ns > 5ull * 1000 * 1000 * 1000 ||
               rs->last_down_log_ns == 0;
    if (log)
        rs->last_down_log_ns = now;
    pthread_mutex_unlock(&rs->mu);
    if (log)
        OSP_LOG_WARN("redis queue store: %s: %s", what, osp_error_message(err));
}

void redis_args_script_head(redis_args *args, redis_queue *q) {
    redis_args_str(args, "2");
    redis_args_str(args, q->key);
    redis_args_str(args, q->rs->channel);
    redis_args_str(args, q->super.name);
}

/* Runs a script from a synchronous call: inline on a store thread, else
 * on one (waiting for it). Caller owns *out on success. */
typedef struct sync_job {
    redis_job base;
    redis_script script;
    redis_args *args;
    redisReply *reply;
    osp_error *err;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool done;
} sync_job;

static void sync_job_finish(sync_job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->mu);
}

static void sync_job_run(redis_job *job, redis_conn *conn) {
    sync_job *j = (sync_job *)job;
    j->err = redis_conn_script(conn, j->script, j->args, &j->reply);
    sync_job_finish(j);
}

static void sync_job_fail(redis_job *job, osp_error *err) {
    sync_job *j = (sync_job *)job;
    j->err = err;
    sync_job_finish(j);
}

static osp_error *run_script_sync(redis_store *rs, redis_script script,
                                  redis_args *args, redisReply **out) {
    if (redis_current_conn != NULL)
        return redis_conn_script(redis_current_conn, script, args, out);
    sync_job j = {.base = {.run = sync_job_run, .fail = sync_job_fail},
                  .script = script,
                  .args = args};
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cond, NULL);
    redis_store_submit(rs, &j.base, false);
    pthread_mutex_lock(&j.mu);
    while (!j.done)
        pthread_cond_wait(&j.cond, &j.mu);
    pthread_mutex_unlock(&j.mu);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cond);
    if (j.err == NULL)
        *out = j.reply;
    return j.err;
}

/* {n, length} replies of delete, truncate and end. */
static bool reply_count_length(const redisReply *r, long long *n,
                               long long *length) {
    return redis_reply_is_array(r, 2) && redis_reply_int(r->element[0], n) &&
           redis_reply_int(r->element[1], length) && *n >= 0 && *length >= 0;
}

static osp_error *bad_reply(const char *what) {
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "redis queue store: unexpected reply to %s", what);
}

/* ---- put ---- */

typedef struct put_job {
    redis_job base;
    redis_queue *q;
    osp_queue_put_fn done;
    void *ctx;
    redis_args args; /* the whole script call, owned */
    char request_id[];
} put_job;

static void put_job_fail(redis_job *job, osp_error *err) {
    put_job *j = (put_job *)job;
    j->done(j->ctx, err, 0, NULL);
    redis_args_destroy(&j->args);
    free(j);
}

/* Sets the put's floor: the highest index this replica has seen, read
 * when the job runs (another put may have raised it). */
static void put_job_floor(put_job *j, char floor[24]) {
    snprintf(floor, 24, "%llu",
             (unsigned long long)atomic_load(&j->q->max_index));
    j->args.argv[5] = floor;
    j->args.lens[5] = strlen(floor);
}

/* Answers the put from its script's reply r (freed here) or err (ownership
 * moves), and frees the job. */
static void put_job_finish(put_job *j, osp_error *err, redisReply *r) {
    redis_queue *q = j->q;
    long long index = 0, length = 0;
    if (err == NULL && !reply_count_length(r, &index, &length))
        err = bad_reply("put");
    if (r != NULL)
        freeReplyObject(r);
    if (err == NULL && index == 0)
        err = osp_error_new_reason(
            OSP_ERROR_UNAVAILABLE, OSP_REASON_QUEUE_FULL,
            "queue '%s' is full (%lld items, the limit is %llu)", q->super.name,
            length, (unsigned long long)q->rs->max_length);
    if (err != NULL) {
        put_job_fail(&j->base, err);
        return;
    }
    atomic_max(&q->max_index, (uint64_t)index);
    atomic_store(&q->length, (uint64_t)length);
    atomic_fetch_add(&q->puts, 1);
    j->done(j->ctx, NULL, (uint64_t)index, j->request_id);
    redis_args_destroy(&j->args);
    free(j);
}

static void put_job_run(redis_job *job, redis_conn *conn) {
    put_job *j = (put_job *)job;
    char floor[24];
    put_job_floor(j, floor);
    redisReply *r = NULL;
    osp_error *err = redis_conn_script(conn, REDIS_SCRIPT_PUT, &j->args, &r);
    put_job_finish(j, err, r);
}

/* Runs n put jobs (2 to REDIS_PIPELINE_MAX; owned) in one pipeline. Each
 * script is atomic by itself, as when they run one by one; the replies
 * come back in order. */
static void put_jobs_run(redis_job **jobs, size_t n, redis_conn *conn) {
    char floors[REDIS_PIPELINE_MAX][24];
    redis_args *args[REDIS_PIPELINE_MAX];
    redisReply *replies[REDIS_PIPELINE_MAX];
    osp_error *errs[REDIS_PIPELINE_MAX];
    for (size_t i = 0; i < n; i++) {
        put_job *j = (put_job *)jobs[i];
        put_job_floor(j, floors[i]);
        args[i] = &j->args;
    }
    redis_conn_script_pipeline(conn, REDIS_SCRIPT_PUT, args, n, replies, errs);
    for (size_t i = 0; i < n; i++)
        put_job_finish((put_job *)jobs[i], errs[i], replies[i]);
}

static void redis_put(osp_queue *queue, const osp_queue_put_args *args,
                      osp_queue_put_fn done, void *ctx) {
    redis_queue *q = queue_of(queue);
    redis_store *rs = q->rs;
    if (args->size > rs->max_payload_bytes) {
        done(ctx,
             osp_error_new_reason(
                 OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
                 "payload of %zu bytes is over the queue's limit of %llu",
                 args->size, (unsigned long long)rs->max_payload_bytes),
             0, NULL);
        return;
    }
    if (args->n_tags > MAX_PUT_TAGS) {
        done(ctx,
             osp_error_new(OSP_ERROR_INVALID_ARG,
                           "an item carries at most %d tags", MAX_PUT_TAGS),
             0, NULL);
        return;
    }
    const char *tagged = queue_tags_find(args->tags, args->n_tags, "requestId");
    char fresh[37];
    if (tagged == NULL || tagged[0] == '\0') {
        queue_request_id_new(fresh);
        tagged = fresh;
    }
    size_t rid_len = strlen(tagged);
    put_job *j = malloc(sizeof *j + rid_len + 1);
    if (j == NULL) {
        done(ctx, osp_error_out_of_memory(), 0, NULL);
        return;
    }
    memset(j, 0, sizeof *j);
    j->base.run = put_job_run;
    j->base.fail = put_job_fail;
    j->q = q;
    j->done = done;
    j->ctx = ctx;
    memcpy(j->request_id, tagged, rid_len + 1);
    redis_args *a = &j->args;
    redis_args_init(a);
    redis_args_script_head(a, q);                                  /* 0-3 */
    redis_args_fmt(a, "%llu", (unsigned long long)rs->max_length); /* 4 */
    redis_args_str(a, "0"); /* 5: the floor, set when the job runs */
    redis_args_fmt(a, "%d", args->priority);         /* 6 */
    redis_args_fmt(a, "%lld", (long long)wall_ns()); /* 7 */
    redis_args_str(a, j->request_id);                /* 8 */
    /* The data and tags are copied: the caller's are borrowed for the
     * call only. */
    redis_args_copy(a, args->data, args->size); /* 9 */
    for (size_t i = 0; i < args->n_tags; i++) {
        if (strcmp(args->tags[i].key, "requestId") == 0)
            continue;
        redis_args_fmt(a, "%s", args->tags[i].key);
        redis_args_fmt(a, "%s", args->tags[i].value);
    }
    if (a->failed) {
        put_job_fail(&j->base, osp_error_out_of_memory());
        return;
    }
    redis_store_submit(rs, &j->base, false);
}

/* ---- delete, truncate, commit, reject, end ---- */

typedef enum mutation_kind {
    MUTATION_DELETE,
    MUTATION_TRUNCATE,
    MUTATION_COMMIT,
    MUTATION_REJECT,
    MUTATION_END,
} mutation_kind;

typedef struct mutation_job {
    redis_job base;
    redis_queue *q;
    mutation_kind kind;
    redis_script script;
    osp_queue_done_fn done;
    void *ctx;
    redis_args args;
} mutation_job;

static void mutation_job_fail(redis_job *job, osp_error *err) {
    mutation_job *j = (mutation_job *)job;
    j->done(j->ctx, err);
    redis_args_destroy(&j->args);
    free(j);
}

static void mutation_job_run(redis_job *job, redis_conn *conn) {
    mutation_job *j = (mutation_job *)job;
    redis_queue *q = j->q;
    redisReply *r = NULL;
    osp_error *err = redis_conn_script(conn, j->script, &j->args, &r);
    long long n = 0, length = 0;
    if (err == NULL) {
        bool ok = j->kind == MUTATION_REJECT
                      ? redis_reply_int(r, &n)
                      : reply_count_length(r, &n, &length);
        if (!ok)
            err = bad_reply(redis_script_name(j->script));
        else if (j->kind != MUTATION_REJECT)
            atomic_store(&q->length, (uint64_t)length);
    }
    if (r != NULL)
        freeReplyObject(r);
    if (err != NULL) {
        mutation_job_fail(job, err);
        return;
    }
    if (j->kind == MUTATION_COMMIT)
        atomic_fetch_add(&q->commits, (uint64_t)n);
    /* Window slots freed or items given back: this replica's consumers
     * need not wait for the notification to come round. */
    if (j->kind == MUTATION_COMMIT || j->kind == MUTATION_REJECT ||
        j->kind == MUTATION_DELETE)
        redis_queue_wake(q);
    j->done(j->ctx, NULL);
    redis_args_destroy(&j->args);
    free(j);
}

static mutation_job *mutation_new(redis_queue *q, mutation_kind kind,
                                  redis_script script, osp_queue_done_fn done,
                                  void *ctx) {
    mutation_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        done(ctx, osp_error_out_of_memory());
        return NULL;
    }
    j->base.run = mutation_job_run;
    j->base.fail = mutation_job_fail;
    j->q = q;
    j->kind = kind;
    j->script = script;
    j->done = done;
    j->ctx = ctx;
    redis_args_init(&j->args);
    redis_args_script_head(&j->args, q);
    return j;
}

static void mutation_submit(mutation_job *j) {
    if (j->args.failed) {
        mutation_job_fail(&j->base, osp_error_out_of_memory());
        return;
    }
    redis_store_submit(j->q->rs, &j->base, false);
}

static void add_indexes(redis_args *a, const uint64_t *indexes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (indexes[i] != 0)
            redis_args_fmt(a, "%llu", (unsigned long long)indexes[i]);
}

static void redis_delete(osp_queue *queue, const uint64_t *indexes, size_t n,
                         osp_queue_done_fn done, void *ctx) {
    mutation_job *j = mutation_new(queue_of(queue), MUTATION_DELETE,
                                   REDIS_SCRIPT_DELETE, done, ctx);
    if (j == NULL)
        return;
    add_indexes(&j->args, indexes, n);
    mutation_submit(j);
}

static void redis_truncate(osp_queue *queue, uint64_t before,
                           osp_queue_done_fn done, void *ctx) {
    mutation_job *j = mutation_new(queue_of(queue), MUTATION_TRUNCATE,
                                   REDIS_SCRIPT_TRUNCATE, done, ctx);
    if (j == NULL)
        return;
    redis_args_fmt(&j->args, "%llu", (unsigned long long)before);
    mutation_submit(j);
}

static void redis_commit(osp_queue *queue, const char *gid, const char *uid,
                         const uint64_t *indexes, size_t n,
                         osp_queue_done_fn done, void *ctx) {
    (void)gid;
    (void)uid;
    /* A commit deletes the items for every group (the protocol's commit
     * and delete both remove the item); the consumer's slot frees because
     * its pending entry goes with it. */
    mutation_job *j = mutation_new(queue_of(queue), MUTATION_COMMIT,
                                   REDIS_SCRIPT_DELETE, done, ctx);
    if (j == NULL)
        return;
    add_indexes(&j->args, indexes, n);
    mutation_submit(j);
}

static void redis_reject(osp_queue *queue, const char *gid, const char *uid,
                         const uint64_t *indexes, size_t n, const char *code,
                         const char *reason, osp_queue_done_fn done,
                         void *ctx) {
    redis_queue *q = queue_of(queue);
    OSP_LOG_INFO("queue '%s': consumer %s.%s gives back %zu item(s): %s %s",
                 q->super.name, gid, uid, n, code ? code : "",
                 reason ? reason : "");
    mutation_job *j =
        mutation_new(q, MUTATION_REJECT, REDIS_SCRIPT_REJECT, done, ctx);
    if (j == NULL)
        return;
    redis_args_fmt(&j->args, "%s", gid);
    redis_args_fmt(&j->args, "%s", uid);
    redis_args_fmt(&j->args, "%llu", REJECTED_IDLE_MS);
    add_indexes(&j->args, indexes, n);
    mutation_submit(j);
}

static void redis_end(osp_queue *queue, bool force, osp_queue_done_fn done,
                      void *ctx) {
    mutation_job *j = mutation_new(queue_of(queue), MUTATION_END,
                                   REDIS_SCRIPT_END, done, ctx);
    if (j == NULL)
        return;
    redis_args_str(&j->args, force ? "1" : "0");
    mutation_submit(j);
}

/* ---- get ---- */

struct redis_get_job {
    redis_job base;
    redis_queue *q;
    redis_get_job *next_waiter;
    osp_queue_items_fn done;
    void *ctx;
    uint64_t deadline_ns; /* 0: answer at once */
    bool ran_once;
    osp_error *last_err; /* why the last re-run failed (Redis down) */
    redis_args args;
};

static void get_job_free(redis_get_job *j) {
    osp_error_free(j->last_err);
    redis_args_destroy(&j->args);
    free(j);
}

static void get_job_fail(redis_job *job, osp_error *err) {
    redis_get_job *j = (redis_get_job *)job;
    j->done(j->ctx, err, NULL, 0);
    get_job_free(j);
}

/* The items of a get reply {length, entry...}; *n of them. */
static osp_error *get_reply_items(redis_queue *q, const redisReply *r,
                                  osp_queue_item ***items, size_t *n) {
    long long length;
    if (!redis_reply_is_array(r, 1) || !redis_reply_int(r->element[0], &length))
        return bad_reply("get");
    atomic_store(&q->length, (uint64_t)(length < 0 ? 0 : length));
    *items = NULL;
    *n = 0;
    if (r->elements == 1)
        return NULL;
    osp_queue_item **out = calloc(r->elements - 1, sizeof *out);
    if (out == NULL)
        return osp_error_out_of_memory();
    size_t k = 0;
    for (size_t i = 1; i < r->elements; i++) {
        bool malformed;
        osp_queue_item *item = redis_entry_item(r->element[i], &malformed);
        if (item == NULL && !malformed) {
            osp_queue_items_free(out, k);
            return osp_error_out_of_memory();
        }
        if (item == NULL) {
            OSP_LOG_WARN("queue '%s': skipping a malformed Redis entry",
                         q->super.name);
            continue;
        }
        atomic_max(&q->max_index, item->index);
        out[k++] = item;
    }
    *items = out;
    *n = k;
    return NULL;
}

static void get_job_run(redis_job *job, redis_conn *conn) {
    redis_get_job *j = (redis_get_job *)job;
    redis_queue *q = j->q;
    redis_store *rs = q->rs;
    pthread_mutex_lock(&q->mu);
    uint64_t seq = q->wake_seq;
    pthread_mutex_unlock(&q->mu);

    redisReply *r = NULL;
    osp_error *err = redis_conn_script(conn, REDIS_SCRIPT_GET, &j->args, &r);
    osp_queue_item **items = NULL;
    size_t n = 0;
    if (err == NULL)
        err = get_reply_items(q, r, &items, &n);
    if (r != NULL)
        freeReplyObject(r);
    bool first = !j->ran_once;
    j->ran_once = true;
    bool expired = j->deadline_ns == 0 || osp_now_ns() >= j->deadline_ns;
    /* Answer now: items, a failure of the first try (the caller learns at
     * once that Redis is down), or no time left. A failed re-run keeps
     * waiting: Redis may come back before the deadline. */
    if (n > 0 || (err != NULL && (first || expired)) || expired) {
        if (err == NULL && n == 0 && j->last_err != NULL) {
            err = j->last_err;
            j->last_err = NULL;
        }
        atomic_fetch_add(&q->gets, n);
        j->done(j->ctx, err, items, n);
        get_job_free(j);
        return;
    }
    if (err != NULL) {
        osp_error_free(j->last_err);
        j->last_err = err;
    } else {
        osp_error_free(j->last_err);
        j->last_err = NULL;
    }
    free(items);
    pthread_mutex_lock(&rs->mu);
    bool stopping = rs->stopping;
    pthread_mutex_unlock(&rs->mu);
    if (stopping) {
        j->done(j->ctx,
                osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                     OSP_REASON_SHUTTING_DOWN,
                                     "the queue store is closing"),
                NULL, 0);
        get_job_free(j);
        return;
    }
    pthread_mutex_lock(&q->mu);
    bool again = q->wake_seq != seq && err == NULL;
    if (!again) {
        j->next_waiter = q->waiters;
        q->waiters = j;
    }
    pthread_mutex_unlock(&q->mu);
    if (again)
        redis_store_submit(rs, &j->base, true);
}

static void redis_get(osp_queue *queue, const osp_queue_get_args *args,
                      osp_queue_items_fn done, void *ctx) {
    redis_queue *q = queue_of(queue);
    redis_get_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        done(ctx, osp_error_out_of_memory(), NULL, 0);
        return;
    }
    j->base.run = get_job_run;
    j->base.fail = get_job_fail;
    j->q = q;
    j->done = done;
    j->ctx = ctx;
    if (args->timeout_ns > 0)
        j->deadline_ns = osp_now_ns() + args->timeout_ns;
    redis_args *a = &j->args;
    redis_args_init(a);
    redis_args_script_head(a, q);
    redis_args_fmt(a, "%llu", (unsigned long long)args->index);
    size_t length = args->length;
    if (length > q->rs->max_length)
        length = q->rs->max_length; /* more are never stored */
    redis_args_fmt(a, "%zu", length);
    redis_args_fmt(a, "%s", args->request_id ? args->request_id : "");
    redis_args_str(a, args->auto_delete ? "1" : "0");
    for (size_t i = 0; i < args->n_filters; i++) {
        redis_args_fmt(a, "%s", args->filters[i].key);
        redis_args_fmt(a, "%s", args->filters[i].value);
    }
    if (a->failed) {
        get_job_fail(&j->base, osp_error_out_of_memory());
        return;
    }
    redis_store_submit(q->rs, &j->base, false);
}

void redis_queue_wake(redis_queue *q) {
    pthread_mutex_lock(&q->mu);
    q->wake_seq++;
    redis_get_job *w = q->waiters;
    q->waiters = NULL;
    for (redis_consumer *c = q->consumers; c != NULL; c = c->next)
        redis_consumer_schedule_locked(c);
    pthread_mutex_unlock(&q->mu);
    while (w != NULL) {
        redis_get_job *next = w->next_waiter;
        redis_store_submit(q->rs, &w->base, true);
        w = next;
    }
}

/* Answers the queue's waiting gets whose time is up (every one when
 * closing, with err, which is borrowed). */
static void expire_waiters(redis_queue *q, uint64_t now, const osp_error *err) {
    redis_get_job *expired = NULL;
    pthread_mutex_lock(&q->mu);
    redis_get_job **link = &q->waiters;
    while (*link != NULL) {
        redis_get_job *w = *link;
        if (err != NULL || now >= w->deadline_ns) {
            *link = w->next_waiter;
            w->next_waiter = expired;
            expired = w;
        } else {
            link = &w->next_waiter;
        }
    }
    pthread_mutex_unlock(&q->mu);
    while (expired != NULL) {
        redis_get_job *next = expired->next_waiter;
        osp_error *e = NULL;
        if (err != NULL)
            e = osp_error_new_reason(osp_error_get_code(err),
                                     osp_error_get_reason(err), "%s",
                                     osp_error_message(err));
        else if (expired->last_err != NULL) {
            e = expired->last_err;
            expired->last_err = NULL;
        }
        expired->done(expired->ctx, e, NULL, 0);
        get_job_free(expired);
        expired = next;
    }
}

/* ---- attributes, search, count ---- */

/* One consumer line of the attributes from its heartbeat line
 * "<ms>|<pending>|<start>|<window>|<auto>|<tags>" (borrowed). */
static bool add_consumer_line(osp_queue_attribute **attrs, size_t *n, size_t i,
                              const char *id, long long idle_ms,
                              const char *line, uint64_t heartbeat_ms) {
    long long seen, pending, start, window, autoc;
    int used = 0;
    if (sscanf(line, "%lld|%lld|%lld|%lld|%lld|%n", &seen, &pending, &start,
               &window, &autoc, &used) != 5 ||
        used == 0)
        return true; /* not ours: skipped */
    const char *tags = line + used;
    long long slots = window > pending ? window - pending : 0;
    char key[48];
    snprintf(key, sizeof key, "consumers.list.[%zu]", i);
    return queue_attributes_add(
        attrs, n, key,
        "Id: %s, Index: %lld, Pending: %lld, Status: %s, Idle: %lld.%03llds, "
        "Window: %lld, Slots: %lld, AutoCommit: %s%s%s%s",
        id, start, pending,
        (uint64_t)idle_ms > 3 * heartbeat_ms ? "Leaving" : "Running",
        idle_ms / 1000, idle_ms % 1000, window, slots, autoc ? "true" : "false",
        tags[0] ? ", Tags: tags[" : "", tags, tags[0] ? "]" : "");
}

static osp_error *redis_attributes(osp_queue *queue, osp_queue_attribute **out,
                                   size_t *n_out) {
    redis_queue *q = queue_of(queue);
    redis_store *rs = q->rs;
    redis_args a;
    redis_args_init(&a);
    redis_args_script_head(&a, q);
    redis_args_fmt(&a, "%llu", (unsigned long long)rs->url.claim_idle_ms);
    redisReply *r = NULL;
    osp_error *err = run_script_sync(rs, REDIS_SCRIPT_ATTRS, &a, &r);
    redis_args_destroy(&a);
    if (err != NULL)
        return err;
    long long length, first, last;
    char state[32];
    if (!redis_reply_is_array(r, 6) ||
        !redis_reply_int(r->element[0], &length) ||
        !redis_reply_int(r->element[1], &first) ||
        !redis_reply_int(r->element[2], &last) ||
        !redis_reply_copy(r->element[3], state, sizeof state) ||
        !redis_reply_is_array(r->element[4], 0) ||
        r->element[4]->elements % 3 != 0 ||
        !redis_reply_is_array(r->element[5], 0) ||
        r->element[5]->elements % 3 != 0) {
        freeReplyObject(r);
        return bad_reply("attributes");
    }
    atomic_store(&q->length, (uint64_t)length);
    osp_queue_attribute *attrs = NULL;
    size_t n = 0;
    bool ok =
        queue_attributes_add(&attrs, &n, "meta.name", "%s", q->super.name) &&
        queue_attributes_add(&attrs, &n, "meta.backend", "redis") &&
        queue_attributes_add(&attrs, &n, "meta.state", "%s", state) &&
        queue_attributes_add(&attrs, &n, "meta.maxPayloadBytes", "%llu",
                             (unsigned long long)rs->max_payload_bytes) &&
        queue_attributes_add(&attrs, &n, "meta.header.user",
                             "X-EAS-QueueService-Redis-Uid") &&
        queue_attributes_add(&attrs, &n, "meta.header.group",
                             "X-EAS-QueueService-Redis-Gid") &&
        queue_attributes_add(&attrs, &n, "meta.header.priority",
                             "X-EAS-QueueService-Priority") &&
        queue_attributes_add(&attrs, &n, "stream.maxPayloadBytes", "%llu",
                             (unsigned long long)rs->max_payload_bytes) &&
        queue_attributes_add(&attrs, &n, "stream.approxMaxLength", "%llu",
                             (unsigned long long)rs->max_length) &&
        queue_attributes_add(&attrs, &n, "stream.length", "%lld", length);
    if (ok && length > 0)
        ok = queue_attributes_add(&attrs, &n, "stream.firstEntry", "%lld",
                                  first) &&
             queue_attributes_add(&attrs, &n, "stream.lastEntry", "%lld", last);
    const redisReply *cons = r->element[4];
    size_t listed = 0;
    for (size_t i = 0; ok && i < cons->elements; i += 3) {
        char id[300], line[1024];
        long long idle;
        if (!redis_reply_copy(cons->element[i], id, sizeof id) ||
            !redis_reply_int(cons->element[i + 1], &idle) ||
            !redis_reply_copy(cons->element[i + 2], line, sizeof line))
            continue;
        size_t before = n;
        ok = add_consumer_line(&attrs, &n, listed, id, idle, line,
                               rs->heartbeat_ns / 1000000);
        if (n > before)
            listed++;
    }
    if (ok)
        ok = queue_attributes_add(&attrs, &n, "consumers.stats.total", "%zu",
                                  listed);
    const redisReply *gs = r->element[5];
    for (size_t i = 0; ok && i < gs->elements; i += 3) {
        char name[300];
        long long consumers, pending;
        if (!redis_reply_copy(gs->element[i], name, sizeof name) ||
            !redis_reply_int(gs->element[i + 1], &consumers) ||
            !redis_reply_int(gs->element[i + 2], &pending))
            continue;
        char key[48];
        snprintf(key, sizeof key, "groups.list.[%zu]", i / 3);
        ok = queue_attributes_add(&attrs, &n, key,
                                  "Id: %s, Consumers: %lld, Pending: %lld",
                                  name, consumers, pending);
    }
    freeReplyObject(r);
    if (!ok) {
        osp_queue_attributes_free(attrs, n);
        return osp_error_out_of_memory();
    }
    *out = attrs;
    *n_out = n;
    return NULL;
}

static osp_error *redis_search(osp_queue *queue, uint64_t index,
                               osp_queue_search_result *out) {
    redis_queue *q = queue_of(queue);
    redis_args a;
    redis_args_init(&a);
    redis_args_script_head(&a, q);
    redis_args_fmt(&a, "%llu", (unsigned long long)index);
    redisReply *r = NULL;
    osp_error *err = run_script_sync(q->rs, REDIS_SCRIPT_SEARCH, &a, &r);
    redis_args_destroy(&a);
    if (err != NULL)
        return err;
    long long found = 0, pending = 0, ahead = 0;
    if (!redis_reply_is_array(r, 1) ||
        !redis_reply_int(r->element[0], &found) ||
        (found == 1 &&
         (r->elements != 4 || !redis_reply_int(r->element[1], &pending) ||
          !redis_reply_copy(r->element[2], out->consumer_id,
                            sizeof out->consumer_id) ||
          !redis_reply_int(r->element[3], &ahead) || ahead < 0))) {
        freeReplyObject(r);
        memset(out, 0, sizeof *out);
        return bad_reply("search");
    }
    freeReplyObject(r);
    out->found = found == 1;
    out->is_pending = pending == 1;
    out->wait_count = (uint64_t)ahead;
    return NULL;
}

static osp_error *redis_count(osp_queue *queue, int priority,
                              const osp_queue_tag *filters, size_t n_filters,
                              uint64_t *out) {
    redis_queue *q = queue_of(queue);
    redis_args a;
    redis_args_init(&a);
    redis_args_script_head(&a, q);
    if (priority >= 0)
        redis_args_fmt(&a, "%d", priority);
    else
        redis_args_str(&a, "");
    for (size_t i = 0; i < n_filters; i++) {
        redis_args_str(&a, filters[i].key);
        redis_args_str(&a, filters[i].value);
    }
    redisReply *r = NULL;
    osp_error *err = run_script_sync(q->rs, REDIS_SCRIPT_COUNT, &a, &r);
    redis_args_destroy(&a);
    if (err != NULL)
        return err;
    long long n;
    bool ok = redis_reply_int(r, &n) && n >= 0;
    freeReplyObject(r);
    if (!ok)
        return bad_reply("count");
    *out = (uint64_t)n;
    return NULL;
}

/* The cached length is refreshed in the background, at most once a
 * second, whenever someone reads the statistics. */
typedef struct length_job {
    redis_job base;
    redis_queue *q;
} length_job;

static void length_job_run(redis_job *job, redis_conn *conn) {
    length_job *j = (length_job *)job;
    redis_args a;
    redis_args_init(&a);
    redis_args_str(&a, "ZCARD");
    redis_args_fmt(&a, "%s:z", j->q->key);
    redisReply *r = NULL;
    osp_error *err = redis_conn_command(conn, &a, false, &r);
    long long n;
    if (err == NULL && redis_reply_int(r, &n) && n >= 0)
        atomic_store(&j->q->length, (uint64_t)n);
    osp_error_free(err);
    if (r != NULL)
        freeReplyObject(r);
    redis_args_destroy(&a);
    free(j);
}

static void length_job_fail(redis_job *job, osp_error *err) {
    osp_error_free(err);
    free(job);
}

static void redis_get_stats(osp_queue *queue, osp_queue_stats *out) {
    redis_queue *q = queue_of(queue);
    uint64_t now = osp_now_ns(), last = atomic_load(&q->length_refresh_ns);
    if (now - last > 1000000000ull &&
        atomic_compare_exchange_strong(&q->length_refresh_ns, &last, now)) {
        length_job *j = calloc(1, sizeof *j);
        if (j != NULL) {
            j->base.run = length_job_run;
            j->base.fail = length_job_fail;
            j->q = q;
            redis_store_submit(q->rs, &j->base, false);
        }
    }
    out->length = atomic_load(&q->length);
    out->puts = atomic_load(&q->puts);
    out->gets = atomic_load(&q->gets);
    out->commits = atomic_load(&q->commits);
    out->redeliveries = atomic_load(&q->redeliveries);
    out->consumers = atomic_load(&q->n_consumers);
}

/* ---- queues ---- */

static void queue_free(redis_queue *q) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cond);
    free(q->key);
    free(q->super.name);
    free(q);
}

static osp_error *redis_store_queue(osp_queue_store *store, const char *name,
                                    osp_queue **out) {
    redis_store *rs = store_of(store);
    pthread_mutex_lock(&rs->mu);
    redis_queue *q = rs->queues;
    while (q != NULL && strcmp(q->super.name, name) != 0)
        q = q->next;
    if (q == NULL) {
        q = calloc(1, sizeof *q);
        char *key = NULL;
        if (q != NULL && asprintf(&key, "%s:q:{%s}", rs->url.prefix, name) < 0)
            key = NULL;
        char *copy = key != NULL ? strdup(name) : NULL;
        if (copy == NULL) {
            pthread_mutex_unlock(&rs->mu);
            free(key);
            free(q);
            return osp_error_out_of_memory();
        }
        q->super.ops = &redis_ops;
        q->super.store = store;
        q->super.name = copy;
        q->rs = rs;
        q->key = key;
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->cond, NULL);
        q->next = rs->queues;
        rs->queues = q;
    }
    pthread_mutex_unlock(&rs->mu);
    *out = &q->super;
    return NULL;
}

static void redis_store_foreach(osp_queue_store *store,
                                void (*fn)(void *ctx, osp_queue *queue),
                                void *ctx) {
    redis_store *rs = store_of(store);
    /* Queues are only ever prepended and live until the store is freed:
     * the list from this head on can be walked without the lock. */
    pthread_mutex_lock(&rs->mu);
    redis_queue *q = rs->queues;
    pthread_mutex_unlock(&rs->mu);
    for (; q != NULL; q = q->next)
        fn(ctx, &q->super);
}

static redis_queue *find_queue(redis_store *rs, const char *name, size_t len) {
    pthread_mutex_lock(&rs->mu);
    redis_queue *q = rs->queues;
    pthread_mutex_unlock(&rs->mu);
    for (; q != NULL; q = q->next)
        if (strlen(q->super.name) == len &&
            memcmp(q->super.name, name, len) == 0)
            return q;
    return NULL;
}

static void wake_all(redis_store *rs) {
    pthread_mutex_lock(&rs->mu);
    redis_queue *q = rs->queues;
    pthread_mutex_unlock(&rs->mu);
    for (; q != NULL; q = q->next)
        redis_queue_wake(q);
}

/* ---- the events thread: notifications and the clock ---- */

/* Subscribes (after a reconnect too). false when Redis is down. */
static bool subscribe(redis_store *rs) {
    redis_conn *sub = &rs->sub;
    osp_error *err = redis_conn_ensure(sub);
    if (err != NULL) {
        redis_store_log_background(rs, "notifications", err);
        osp_error_free(err);
        return false;
    }
    const char *argv[2] = {"SUBSCRIBE", rs->channel};
    size_t lens[2] = {9, strlen(rs->channel)};
    int done = 0;
    if (redisAppendCommandArgv(sub->ctx, 2, argv, lens) != REDIS_OK ||
        redisBufferWrite(sub->ctx, &done) != REDIS_OK) {
        redis_conn_fail(sub, sub->ctx->errstr);
        return false;
    }
    while (!done) {
        if (redisBufferWrite(sub->ctx, &done) != REDIS_OK) {
            redis_conn_fail(sub, sub->ctx->errstr);
            return false;
        }
    }
    return true;
}

/* Handles every notification read so far. */
static void drain_notifications(redis_store *rs) {
    redis_conn *sub = &rs->sub;
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(sub->ctx, &reply) != REDIS_OK) {
            redis_conn_fail(sub, "bad notification");
            return;
        }
        if (reply == NULL)
            return;
        redisReply *r = reply;
        if (redis_reply_is_array(r, 3) &&
            redis_reply_equals(r->element[0], "message") &&
            redis_reply_is_string(r->element[2])) {
            redis_queue *q =
                find_queue(rs, r->element[2]->str, r->element[2]->len);
            if (q != NULL)
                redis_queue_wake(q);
        }
        freeReplyObject(r);
    }
}

static void *events_main(void *arg) {
    redis_store *rs = arg;
    uint64_t next_tick = osp_now_ns() + rs->heartbeat_ns;
    while (!atomic_load(&rs->events_exit)) {
        bool connected = rs->sub.ctx != NULL;
        if (!connected && osp_now_ns() >= rs->sub.retry_at_ns) {
            connected = subscribe(rs);
            if (connected) /* notifications may have been missed */
                wake_all(rs);
        }
        struct pollfd fds[2] = {
            {.fd = rs->wake_pipe[0], .events = POLLIN},
            {.fd = connected ? rs->sub.ctx->fd : -1, .events = POLLIN}};
        int ready = poll(fds, 2, 20);
        if (ready > 0 && (fds[0].revents & POLLIN)) {
            char buf[64];
            while (read(rs->wake_pipe[0], buf, sizeof buf) > 0) {
            }
        }
        if (ready > 0 && connected &&
            (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (redisBufferRead(rs->sub.ctx) != REDIS_OK) {
                char why[160];
                snprintf(why, sizeof why, "%s",
                         rs->sub.ctx->errstr[0] ? rs->sub.ctx->errstr
                                                : "connection lost");
                redis_conn_fail(&rs->sub, why);
            } else {
                drain_notifications(rs);
            }
        }
        uint64_t now = osp_now_ns();
        pthread_mutex_lock(&rs->mu);
        redis_queue *q = rs->queues;
        pthread_mutex_unlock(&rs->mu);
        for (; q != NULL; q = q->next)
            expire_waiters(q, now, NULL);
        if (now >= next_tick) {
            next_tick = now + rs->heartbeat_ns;
            wake_all(rs);
        }
    }
    return NULL;
}

/* ---- the store ---- */

static void redis_store_free(osp_queue_store *store) {
    redis_store *rs = store_of(store);
    pthread_mutex_lock(&rs->mu);
    rs->stopping = true;
    pthread_mutex_unlock(&rs->mu);
    if (rs->events_started) {
        atomic_store(&rs->events_exit, true);
        ssize_t w = write(rs->wake_pipe[1], "x", 1);
        (void)w;
        pthread_join(rs->events, NULL);
    }
    osp_error *closing =
        osp_error_new_reason(OSP_ERROR_UNAVAILABLE, OSP_REASON_SHUTTING_DOWN,
                             "the queue store is closing");
    for (redis_queue *q = rs->queues; q != NULL; q = q->next)
        expire_waiters(q, 0, closing);
    osp_error_free(closing);
    /* The workers run what is queued (acknowledgements in flight), then
     * return. */
    pthread_mutex_lock(&rs->mu);
    rs->workers_exit = true;
    pthread_cond_broadcast(&rs->jobs_cond);
    pthread_mutex_unlock(&rs->mu);
    for (int i = 0; i < rs->n_workers; i++)
        pthread_join(rs->workers[i], NULL);
    for (int i = 0; i < REDIS_WORKERS; i++)
        redis_conn_destroy(&rs->conns[i]);
    redis_conn_destroy(&rs->sub);
    while (rs->queues != NULL) {
        redis_queue *next = rs->queues->next;
        queue_free(rs->queues);
        rs->queues = next;
    }
    if (rs->wake_pipe[0] >= 0)
        close(rs->wake_pipe[0]);
    if (rs->wake_pipe[1] >= 0)
        close(rs->wake_pipe[1]);
    pthread_mutex_destroy(&rs->mu);
    pthread_cond_destroy(&rs->jobs_cond);
    free(rs);
}

/* One PING at open, so that a wrong address is told at start; a Redis
 * that is down does not stop the server (the store reconnects). */
/* Pings Redis at start: unreachable is a warning (queue requests answer
 * 503 until it answers), a refused password an error that stops the
 * start. */
static osp_error *check_reachable(redis_store *rs) {
    redis_args a;
    redis_args_init(&a);
    redis_args_str(&a, "PING");
    redisReply *r = NULL;
    osp_error *err = redis_conn_command(&rs->conns[0], &a, false, &r);
    redis_args_destroy(&a);
    if (r != NULL)
        freeReplyObject(r);
    if (err != NULL && rs->conns[0].auth_refused) {
        osp_error *refused = osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "redis queue store %s:%d refused the password: %s", rs->url.host,
            rs->url.port, rs->conns[0].last_error);
        osp_error_free(err);
        return refused;
    }
    if (err != NULL) {
        OSP_LOG_WARN("redis queue store: %s (queue requests fail with 503 "
                     "until it answers)",
                     osp_error_message(err));
        osp_error_free(err);
    } else {
        OSP_LOG_INFO("queue store: Redis Streams at %s:%d db %d (prefix "
                     "'%s')",
                     rs->url.host, rs->url.port, rs->url.db, rs->url.prefix);
    }
    return NULL;
}

osp_error *queue_redis_open(const osp_queue_store_options *opts,
                            osp_queue_store **out) {
    redis_store *rs = calloc(1, sizeof *rs);
    if (rs == NULL)
        return osp_error_out_of_memory();
    rs->wake_pipe[0] = rs->wake_pipe[1] = -1;
    osp_error *err = redis_url_parse(opts->url, &rs->url);
    if (err == NULL && opts->password != NULL) {
        if (strlen(opts->password) >= sizeof rs->url.password)
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "the queue store password is longer than "
                                "%zu bytes",
                                sizeof rs->url.password - 1);
        else {
            strcpy(rs->url.password, opts->password);
            rs->url.has_password = true;
        }
    }
    if (err != NULL) {
        free(rs);
        return err;
    }
    /* The grace period of a consumer that left is the idle time after
     * which its pending items may be claimed; the URL's claim_idle_ms
     * wins when given. */
    if (!rs->url.claim_idle_ms_given && opts->consumer_grace_ns > 0)
        rs->url.claim_idle_ms = opts->consumer_grace_ns / 1000000 > 0
                                    ? opts->consumer_grace_ns / 1000000
                                    : 1;
    rs->super.ops = &redis_ops;
    snprintf(rs->channel, sizeof rs->channel, "%s:notify", rs->url.prefix);
    rs->max_payload_bytes = opts->max_payload_bytes;
    rs->max_length = opts->max_length;
    rs->heartbeat_ns = rs->url.claim_idle_ms * 1000000ull / 4;
    if (rs->heartbeat_ns > 1000000000ull)
        rs->heartbeat_ns = 1000000000ull;
    if (rs->heartbeat_ns < 10000000ull)
        rs->heartbeat_ns = 10000000ull;
    pthread_mutex_init(&rs->mu, NULL);
    pthread_cond_init(&rs->jobs_cond, NULL);
    for (int i = 0; i < REDIS_WORKERS; i++)
        redis_conn_init(&rs->conns[i], &rs->url, false);
    redis_conn_init(&rs->sub, &rs->url, true);
    if (pipe2(rs->wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        err = osp_error_new(OSP_ERROR_INTERNAL, "redis queue store: pipe: %s",
                            strerror(errno));
        goto fail;
    }
    if ((err = check_reachable(rs)) != NULL)
        goto fail;
    for (int i = 0; i < REDIS_WORKERS; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa == NULL) {
            err = osp_error_out_of_memory();
            goto fail;
        }
        wa->rs = rs;
        wa->slot = i;
        if (pthread_create(&rs->workers[i], NULL, worker_main, wa) != 0) {
            free(wa);
            err = osp_error_new(OSP_ERROR_INTERNAL,
                                "redis queue store: cannot start a thread");
            goto fail;
        }
        rs->n_workers++;
    }
    if (pthread_create(&rs->events, NULL, events_main, rs) != 0) {
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "redis queue store: cannot start a thread");
        goto fail;
    }
    rs->events_started = true;
    *out = &rs->super;
    return NULL;
fail:
    redis_store_free(&rs->super);
    return err;
}

static const queue_store_ops redis_ops = {
    .name = "redis",
    .store_free = redis_store_free,
    .store_queue = redis_store_queue,
    .store_foreach = redis_store_foreach,
    .put = redis_put,
    .delete_items = redis_delete,
    .truncate = redis_truncate,
    .commit = redis_commit,
    .reject = redis_reject,
    .end = redis_end,
    .get = redis_get,
    .attributes = redis_attributes,
    .search = redis_search,
    .count = redis_count,
    .get_stats = redis_get_stats,
    .consumer_open = redis_consumer_open,
    .consumer_close = redis_consumer_close,
    .consumer_touch = redis_consumer_touch,
};
