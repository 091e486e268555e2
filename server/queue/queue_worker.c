/*
 * A model service's built-in worker (see queue_worker.h). Each item is one
 * job that moves through asynchronous steps, none of which blocks the
 * thread it runs on:
 *
 *   deliver (store thread) -> decode + osp_server_infer_async
 *   infer_done (core thread) -> encode the response or the error item
 *   sink_put -> put_done -> osp_queue_commit -> commit_done -> job_finish
 *
 * The worker is reference counted: its owner holds one reference and every
 * job in flight another, so a stopped worker lives until its last job
 * ends.
 */
#include "queue_worker.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cond_deadline.h"
#include "json_util.h"
#include "kserve_codec.h"
#include "osprey/clock.h"
#include "osprey/log.h"

#define HEADER_LENGTH_TAG "Inference-Header-Content-Length"

struct queue_worker {
    char *model;
    char *uid;
    osp_server *core;
    osp_tracer *tracer;
    osp_queue *input;
    osp_queue *sink;
    size_t max_input;
    osp_queue_consumer *consumer; /* NULL once stopped */

    pthread_mutex_t mu;  /* everything below */
    pthread_cond_t idle; /* in_flight dropped */
    unsigned refs;
    unsigned in_flight;
    bool stopping;
    struct job *retry; /* jobs whose sink put failed */
    bool retry_warned;
    uint64_t processed, failed, wait_count, wait_us;
};

typedef struct job {
    queue_worker *w;
    osp_queue_item *item; /* owned */
    osp_trace *trace;     /* owned; NULL when not sampled */
    kserve_output_choices outputs;
    bool has_outputs;
    char *sink_data; /* owned */
    size_t sink_len;
    osp_queue_tag tags[3];
    size_t n_tags;
    char status[12];
    char header_len[24];
    struct job *next; /* in w->retry */
} job;

static void worker_unref_locked(queue_worker *w, bool *free_it) {
    *free_it = --w->refs == 0;
}

static void worker_free(queue_worker *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->idle);
    free(w->model);
    free(w->uid);
    free(w);
}

/* ---- the end of a job ---- */

/* Frees the job and drops its hold on the worker. */
static void job_finish(job *j) {
    queue_worker *w = j->w;
    osp_trace_end(j->trace);
    if (j->has_outputs)
        kserve_output_choices_destroy(&j->outputs);
    osp_queue_item_free(j->item);
    free(j->sink_data);
    free(j);
    bool free_it;
    pthread_mutex_lock(&w->mu);
    w->in_flight--;
    pthread_cond_broadcast(&w->idle);
    worker_unref_locked(w, &free_it);
    pthread_mutex_unlock(&w->mu);
    if (free_it)
        worker_free(w);
}

static void commit_done(void *ctx, osp_error *err) {
    job *j = ctx;
    if (err) {
        /* The sink item is stored; the input item comes back later and is
         * run again (at-least-once). */
        OSP_LOG_WARN("queue worker '%s': commit of item %" PRIu64 " failed: %s",
                     j->w->model, j->item->index, osp_error_message(err));
        osp_error_free(err);
    }
    job_finish(j);
}

static void sink_put(job *j);

static void put_done(void *ctx, osp_error *err, uint64_t index,
                     const char *request_id) {
    (void)index;
    (void)request_id;
    job *j = ctx;
    queue_worker *w = j->w;
    if (err) {
        pthread_mutex_lock(&w->mu);
        bool stopping = w->stopping;
        bool warn = !w->retry_warned;
        w->retry_warned = true;
        if (!stopping) {
            j->next = w->retry;
            w->retry = j;
        }
        pthread_mutex_unlock(&w->mu);
        if (warn)
            OSP_LOG_WARN("queue worker '%s': storing a result in the sink "
                         "failed (%s); retrying",
                         w->model, osp_error_message(err));
        osp_error_free(err);
        if (stopping) /* the input item stays uncommitted */
            job_finish(j);
        return;
    }
    if (j->trace)
        osp_trace_stamp(j->trace, OSP_TRACE_HTTP_SEND_END, osp_now_ns());
    pthread_mutex_lock(&w->mu);
    w->retry_warned = false;
    pthread_mutex_unlock(&w->mu);
    osp_queue_commit(w->input, w->model, w->uid, &j->item->index, 1,
                     commit_done, j);
}

static void sink_put(job *j) {
    if (j->trace)
        osp_trace_stamp(j->trace, OSP_TRACE_HTTP_SEND_START, osp_now_ns());
    osp_queue_put_args args = {.data = j->sink_data,
                               .size = j->sink_len,
                               .tags = j->tags,
                               .n_tags = j->n_tags,
                               .priority = j->item->priority};
    osp_queue_put(j->w->sink, &args, put_done, j);
}

/* Tags of the sink item: requestId, status and, for a response with
 * binary outputs, the JSON header's length. */
static void set_tags(job *j, unsigned status, bool binary, size_t hlen) {
    snprintf(j->status, sizeof j->status, "%u", status);
    j->tags[0] = (osp_queue_tag){"requestId", j->item->request_id};
    j->tags[1] = (osp_queue_tag){"status", j->status};
    j->n_tags = 2;
    if (binary) {
        snprintf(j->header_len, sizeof j->header_len, "%zu", hlen);
        j->tags[2] = (osp_queue_tag){HEADER_LENGTH_TAG, j->header_len};
        j->n_tags = 3;
    }
}

/* Triton's HTTP status of an error code (as the KServe surface). */
static unsigned error_status(osp_error_code code) {
    switch (code) {
    case OSP_ERROR_INTERNAL:
        return 500;
    case OSP_ERROR_NOT_FOUND:
        return 404;
    case OSP_ERROR_UNAVAILABLE:
        return 503;
    case OSP_ERROR_UNSUPPORTED:
        return 501;
    default:
        return 400;
    }
}

/* The item ran and failed with err (freed): one error item in the sink,
 * tagged with `status` (0: the error's). Not when the server is shutting
 * down: the item then stays uncommitted and runs after a restart. */
static void job_fail_status(job *j, osp_error *err, unsigned status) {
    queue_worker *w = j->w;
    if (osp_error_get_reason(err) == OSP_REASON_SHUTTING_DOWN) {
        osp_error_free(err);
        job_finish(j);
        return;
    }
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_puts(&b, "{\"error\":");
    json_write_cstr(&b, osp_error_message(err));
    bytebuf_putc(&b, '}');
    set_tags(j, status ? status : error_status(osp_error_get_code(err)), false,
             0);
    osp_error_free(err);
    j->sink_data = bytebuf_take(&b, &j->sink_len);
    pthread_mutex_lock(&w->mu);
    w->processed++;
    w->failed++;
    pthread_mutex_unlock(&w->mu);
    if (j->sink_data == NULL) { /* out of memory: run it again later */
        job_finish(j);
        return;
    }
    sink_put(j);
}

static void job_fail(job *j, osp_error *err) {
    job_fail_status(j, err, 0);
}

/* The response as the HTTP body would carry it. */
static osp_error *job_encode(job *j, osp_infer_response *r) {
    kserve_encoded enc;
    osp_error *err = kserve_encode_response(r, j->w->model, &j->outputs, &enc);
    if (err)
        return err;
    size_t total = 0;
    for (size_t i = 0; i < enc.n_parts; i++)
        total += enc.parts[i].len;
    char *data = malloc(total ? total : 1);
    if (data == NULL) {
        kserve_encoded_destroy(&enc);
        return osp_error_out_of_memory();
    }
    size_t off = 0;
    for (size_t i = 0; i < enc.n_parts; i++) {
        memcpy(data + off, enc.parts[i].base, enc.parts[i].len);
        off += enc.parts[i].len;
    }
    set_tags(j, 200, enc.binary, enc.header_len);
    kserve_encoded_destroy(&enc);
    j->sink_data = data;
    j->sink_len = total;
    return NULL;
}

static void infer_done(osp_infer_response *r, void *user) {
    job *j = user;
    osp_error *err = r->error;
    r->error = NULL;
    if (!err)
        err = job_encode(j, r);
    osp_infer_response_free(r);
    if (err) {
        job_fail(j, err);
        return;
    }
    pthread_mutex_lock(&j->w->mu);
    j->w->processed++;
    pthread_mutex_unlock(&j->w->mu);
    sink_put(j);
}

/* ---- the start of a job ---- */

/* CLOCK_MONOTONIC nanoseconds of a wall-clock time (the item's put). */
static uint64_t monotonic_of(int64_t unix_ns, uint64_t now_mono) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now_unix = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    int64_t age = now_unix - unix_ns;
    if (unix_ns <= 0 || age < 0)
        return now_mono;
    return (uint64_t)age < now_mono ? now_mono - (uint64_t)age : 1;
}

/* The JSON header's length: the item's Inference-Header-Content-Length
 * tag when it names a prefix of the data, else the whole item. */
static size_t header_length(const osp_queue_item *item) {
    const char *v = NULL;
    for (size_t i = 0; i < item->n_tags && v == NULL; i++)
        if (strcmp(item->tags[i].key, HEADER_LENGTH_TAG) == 0)
            v = item->tags[i].value;
    if (v == NULL)
        return item->size;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*v == '\0' || *end != '\0' || n > item->size)
        return item->size;
    return (size_t)n;
}

static void deliver(void *ctx, osp_queue_item *item) {
    queue_worker *w = ctx;
    job *j = calloc(1, sizeof *j);
    pthread_mutex_lock(&w->mu);
    w->refs++;
    w->in_flight++;
    pthread_mutex_unlock(&w->mu);
    if (j == NULL) { /* the item stays uncommitted */
        osp_queue_item_free(item);
        pthread_mutex_lock(&w->mu);
        w->in_flight--;
        bool free_it;
        worker_unref_locked(w, &free_it);
        pthread_mutex_unlock(&w->mu);
        if (free_it)
            worker_free(w);
        return;
    }
    j->w = w;
    j->item = item;
    uint64_t now = osp_now_ns();
    uint64_t put_mono = monotonic_of(item->put_unix_ns, now);
    pthread_mutex_lock(&w->mu);
    w->wait_count++;
    w->wait_us += (now - put_mono) / 1000;
    pthread_mutex_unlock(&w->mu);

    j->trace = osp_tracer_sample(w->tracer, w->model);
    if (j->trace) { /* the queue wait: put -> taken by this worker */
        osp_trace_stamp(j->trace, OSP_TRACE_HTTP_RECV_START, put_mono);
        osp_trace_stamp(j->trace, OSP_TRACE_HTTP_RECV_END, now);
    }
    osp_infer_request *req = NULL;
    osp_error *err = NULL;
    if (item->size == 0)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "the item is empty; expected a KServe v2 JSON "
                            "inference request");
    else
        err = kserve_decode_request_body(w->core, w->model, -1, item->data,
                                         item->size, header_length(item),
                                         w->max_input, &req, &j->outputs);
    if (err) { /* the item is not a request the model can run: 400 (the
                  JSON parser's errors are INTERNAL, as Triton's) */
        bool oom = osp_error_get_code(err) == OSP_ERROR_UNAVAILABLE;
        job_fail_status(j, err, oom ? 0 : 400);
        return;
    }
    j->has_outputs = true;
    req->priority = item->priority > 0 ? 1 : 0;
    req->trace = j->trace;
    req->receive_start_ns = put_mono;
    err = osp_server_infer_async(w->core, req, infer_done, j);
    if (err)
        job_fail(j, err);
}

/* ---- the worker ---- */

osp_error *queue_worker_start(const queue_worker_options *o,
                              queue_worker **out) {
    queue_worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return osp_error_out_of_memory();
    w->model = strdup(o->model);
    w->uid = strdup(o->uid);
    if (w->model == NULL || w->uid == NULL) {
        free(w->model);
        free(w->uid);
        free(w);
        return osp_error_out_of_memory();
    }
    w->core = o->core;
    w->tracer = o->tracer;
    w->input = o->input;
    w->sink = o->sink;
    w->max_input = o->max_input;
    w->refs = 1;
    pthread_mutex_init(&w->mu, NULL);
    cond_init_monotonic(&w->idle);
    osp_queue_consumer_args args = {.gid = w->model,
                                    .uid = w->uid,
                                    .start_index = 0,
                                    .window = o->window ? o->window : 1,
                                    .deliver = deliver,
                                    .ctx = w};
    osp_error *err = osp_queue_consumer_open(w->input, &args, &w->consumer);
    if (err) {
        worker_free(w);
        return osp_error_wrap(err, "queue worker of '%s'", o->model);
    }
    *out = w;
    return NULL;
}

/* Ends the jobs waiting for a retry (their items stay uncommitted). */
static void drop_retries(queue_worker *w) {
    pthread_mutex_lock(&w->mu);
    job *list = w->retry;
    w->retry = NULL;
    pthread_mutex_unlock(&w->mu);
    while (list) {
        job *next = list->next;
        job_finish(list);
        list = next;
    }
}

bool queue_worker_stop(queue_worker *w, int timeout_ms) {
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    osp_queue_consumer *consumer = w->consumer;
    w->consumer = NULL;
    pthread_mutex_unlock(&w->mu);
    if (consumer)
        osp_queue_consumer_close(consumer);
    drop_retries(w);
    uint64_t deadline = deadline_after_ns((uint64_t)timeout_ms * 1000000u);
    pthread_mutex_lock(&w->mu);
    while (w->in_flight > 0 && cond_wait_until(&w->idle, &w->mu, deadline))
        ;
    bool idle = w->in_flight == 0;
    pthread_mutex_unlock(&w->mu);
    return idle;
}

void queue_worker_retry(queue_worker *w) {
    pthread_mutex_lock(&w->mu);
    job *list = w->retry;
    w->retry = NULL;
    bool stopping = w->stopping;
    pthread_mutex_unlock(&w->mu);
    while (list) {
        job *next = list->next;
        if (stopping)
            job_finish(list);
        else
            sink_put(list);
        list = next;
    }
}

void queue_worker_release(queue_worker *w) {
    if (w == NULL)
        return;
    bool free_it;
    pthread_mutex_lock(&w->mu);
    worker_unref_locked(w, &free_it);
    pthread_mutex_unlock(&w->mu);
    if (free_it)
        worker_free(w);
}

const char *queue_worker_model(const queue_worker *w) {
    return w->model;
}

void queue_worker_counts(queue_worker *w, uint64_t *processed, uint64_t *failed,
                         uint64_t *wait_count, uint64_t *wait_us) {
    pthread_mutex_lock(&w->mu);
    *processed = w->processed;
    *failed = w->failed;
    *wait_count = w->wait_count;
    *wait_us = w->wait_us;
    pthread_mutex_unlock(&w->mu);
}
