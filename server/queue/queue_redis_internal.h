/*
 * Inside the Redis Streams queue store: the store, queue and consumer
 * structs shared by queue_redis.c (the store, its threads and the
 * operations), queue_redis_consumer.c (consumers and their pumps) and
 * queue_redis_entry.c (stream entries into items).
 *
 * Threads: every Redis command runs on a store thread. WORKERS threads
 * each own one connection and take jobs from one FIFO; one events thread
 * owns a SUBSCRIBE connection to the store's notification channel (every
 * script that changes a queue publishes the queue's name there, whichever
 * replica ran it) and a clock: on a notification, and every heartbeat
 * period as a fallback, it re-runs the queue's waiting gets and pumps its
 * consumers; it also ends gets whose timeout passed. No public call waits
 * for Redis except attributes, search and count, which the contract makes
 * synchronous (they wait for one job, bounded by the command timeout).
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "queue_redis_conn.h"
#include "queue_store_impl.h"

#define REDIS_WORKERS 4
/* Public calls waiting for a store thread beyond this fail (UNAVAILABLE)
 * instead of growing the job list without bound. */
#define REDIS_MAX_QUEUED_JOBS 65536
/* A consumer with auto_commit takes at most this many items per turn. */
#define REDIS_AUTO_COMMIT_BATCH 16
/* Priorities a consumer's turn looks at (highest first). */
#define REDIS_MAX_PRIORITIES 32

typedef struct redis_store redis_store;
typedef struct redis_queue redis_queue;
typedef struct redis_consumer redis_consumer;
typedef struct redis_job redis_job;

/* One piece of work for a store thread. */
struct redis_job {
    redis_job *next;
    /* Runs on a store thread with that thread's connection (borrowed);
     * owns the job from then on (frees it, or hands it on). */
    void (*run)(redis_job *job, redis_conn *conn);
    /* Called instead of run when the job cannot be queued (store closing,
     * too many jobs): answers the caller with err (ownership moves) and
     * frees the job. */
    void (*fail)(redis_job *job, osp_error *err);
};

typedef struct redis_get_job redis_get_job;

struct redis_queue {
    osp_queue super;
    redis_queue *next; /* the store's list */
    redis_store *rs;
    char *key;              /* "<prefix>:q:{<name>}", the keys' prefix */
    pthread_mutex_t mu;     /* guards what follows, up to the counters */
    pthread_cond_t cond;    /* a consumer's turn ended */
    redis_get_job *waiters; /* gets waiting for items */
    redis_consumer *consumers;
    uint64_t wake_seq; /* bumped by every wake (a waiter that ran before a
                          wake runs again instead of waiting) */
    /* Counters for osp_queue_get_stats (this replica's, since start) and
     * what the last script said. */
    _Atomic uint64_t max_index; /* highest index seen: a put never gives a
                                   smaller one, even if Redis lost data */
    _Atomic uint64_t length;
    _Atomic uint64_t puts, gets, commits, redeliveries;
    _Atomic uint64_t n_consumers;
    _Atomic uint64_t length_refresh_ns;
};

struct redis_store {
    osp_queue_store super;
    redis_url url;
    char channel[96]; /* "<prefix>:notify" */
    uint64_t max_payload_bytes;
    uint64_t max_length;
    uint64_t heartbeat_ns; /* consumer heartbeat and fallback poll period */

    pthread_mutex_t mu; /* guards the job list, stopping and queues */
    pthread_cond_t jobs_cond;
    redis_job *jobs_head, *jobs_tail;
    size_t n_jobs;
    bool stopping;     /* no new public calls */
    bool workers_exit; /* the job list is drained: workers return */
    redis_queue *queues;

    pthread_t workers[REDIS_WORKERS];
    redis_conn conns[REDIS_WORKERS];
    int n_workers;

    pthread_t events;
    bool events_started;
    _Atomic bool events_exit;
    int wake_pipe[2];
    redis_conn sub;
    uint64_t last_down_log_ns; /* rate limit of "Redis is down" logs */
};

/* The connection of the store thread running now, NULL elsewhere (a
 * synchronous call made on a store thread runs its job inline). */
extern _Thread_local redis_conn *redis_current_conn;

/* Queues a job. internal: pumps and re-runs, which never fail for a full
 * list. Calls job->fail (on this thread) when the store is closing or the
 * list is full. */
void redis_store_submit(redis_store *rs, redis_job *job, bool internal);

/* Runs the queue's waiting gets again and gives its consumers a turn. */
void redis_queue_wake(redis_queue *q);

/* Logs a failure of a background step (a consumer's turn, the
 * subscription) at most once a few seconds, so that a Redis outage does
 * not flood the log. err is borrowed. */
void redis_store_log_background(redis_store *rs, const char *what,
                                const osp_error *err);

/* Args starting "<keys=2> <queue key> <channel> <queue name>", as every
 * script takes them. */
void redis_args_script_head(redis_args *args, redis_queue *q);

/* ---- entries (queue_redis_entry.c) ---- */

/* The index of stream id "<index>-0" (borrowed); 0 when malformed. */
uint64_t redis_id_index(const char *id, size_t len);
/* A new item from a stream entry reply [id, [field, value, ...]]
 * (borrowed). NULL when the entry is malformed (*malformed set) or memory
 * ran out. Caller owns the item. */
osp_queue_item *redis_entry_item(const redisReply *entry, bool *malformed);

/* ---- consumers (queue_redis_consumer.c) ---- */

/* One open consumer of this replica. Its Redis consumer is named uid in
 * the Redis consumer group gid, on every priority's stream. */
struct redis_consumer {
    osp_queue_consumer super;
    redis_consumer *next; /* the queue's list, under q->mu */
    redis_queue *q;
    char *gid, *uid;
    int64_t start_index;
    unsigned window;
    bool auto_commit;
    osp_queue_tag *filters; /* owned copies */
    size_t n_filters;
    char *tags_line; /* "k=v,..." for the attributes */
    void (*deliver)(void *ctx, osp_queue_item *item);
    void *ctx;
    redis_job pump_job; /* the one turn queued or running */

    /* Under q->mu: */
    int refs; /* the owner until close, plus a queued or running turn */
    bool closed;
    bool pump_queued, pump_running, pump_again;

    /* Only touched by the turn (one at a time): */
    bool groups_ready; /* the group was created from start_index */
    uint64_t *sent;    /* pending items delivered in this session */
    size_t n_sent, cap_sent;
    _Atomic uint64_t touched_ns;
};

osp_error *redis_consumer_open(osp_queue *queue,
                               const osp_queue_consumer_args *args,
                               osp_queue_consumer **out);
void redis_consumer_close(osp_queue_consumer *consumer);
void redis_consumer_touch(osp_queue_consumer *consumer);
/* Gives the consumer a turn on a store thread (one at a time; a turn
 * asked for while one runs follows it). Call with q->mu held. */
void redis_consumer_schedule_locked(redis_consumer *c);
