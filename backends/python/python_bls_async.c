/* BLS calls in flight, answered as the core responds
 * (python_bls_async.h). */
#define _GNU_SOURCE
#include "python_bls_async.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "osprey/infer.h"
#include "osprey/log.h"
#include "python_bls.h"
#include "python_protocol.h"

/* One BLS_ANSWER payload waiting for the reader. */
typedef struct bls_answer {
    struct bls_answer *next;
    char *data; /* owned; a BLS_ANSWER payload */
    size_t len;
    /* A region call's answer instead (owned): written into the region
     * and sent as BLS_RESULT by the thread that flushes. */
    pybls_gathered *gathered;
} bls_answer;

/* One call in the core. Owned by the core's callbacks from submission
 * until its final answer; the outbox lists it so that it can be cancelled
 * when the stub goes. */
typedef struct bls_call {
    pybls_outbox *outbox; /* a reference */
    uint64_t id;
    uint64_t generation;      /* the stub it came from */
    char model[128];          /* for messages */
    bool lost;                /* a response was dropped: the outbox was full */
    osp_cancel_token *cancel; /* exec(decoupled=True) only; owned */
    /* A region call: what the core answered so far, and its answer
     * allocated up front so that the final one cannot fail. Owned. */
    pybls_gathered *gathered;
    bls_answer *region_answer;
    struct bls_call *prev, *next;
} bls_call;

struct pybls_outbox {
    size_t max_frame;     /* largest BLS_ANSWER (pyproto_frame_max) */
    size_t max_waiting;   /* most answer bytes waiting for the stub */
    pthread_mutex_t lock; /* everything below */
    int refs;
    int wake_fd;         /* eventfd: non-zero while answers wait */
    uint64_t generation; /* bumped when the stub goes */
    bool closed;
    bls_answer *head, *tail;
    size_t bytes; /* of the waiting answers */
    bls_call *calls;
    size_t n_calls;
    bls_call *region_call; /* the one call using the region, or NULL */
};

pybls_outbox *pybls_outbox_new(size_t max_frame) {
    pybls_outbox *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->max_frame = max_frame;
    /* Room for at least one answer of the largest size beside others. */
    o->max_waiting =
        PYBLS_OUTBOX_MAX_BYTES > max_frame ? PYBLS_OUTBOX_MAX_BYTES : max_frame;
    o->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (o->wake_fd < 0) {
        free(o);
        return NULL;
    }
    pthread_mutex_init(&o->lock, NULL);
    o->refs = 1;
    return o;
}

/* Frees a list of answers. */
static void free_answers(bls_answer *a) {
    while (a) {
        bls_answer *next = a->next;
        free(a->data);
        pybls_gathered_free(a->gathered);
        free(a);
        a = next;
    }
}

/* Drops the waiting answers and cancels the calls in the core; their later
 * answers are dropped by the generation check. Caller holds o->lock. */
static void forget_locked(pybls_outbox *o) {
    o->generation++;
    o->region_call = NULL; /* its answer will be dropped */
    free_answers(o->head);
    o->head = o->tail = NULL;
    o->bytes = 0;
    uint64_t drained;
    if (read(o->wake_fd, &drained, sizeof drained) < 0 && errno != EAGAIN)
        OSP_LOG_WARN("python backend: eventfd read: %s", strerror(errno));
    for (bls_call *c = o->calls; c; c = c->next)
        if (c->cancel)
            osp_cancel_token_cancel(c->cancel);
}

void pybls_outbox_forget_stub(pybls_outbox *o) {
    pthread_mutex_lock(&o->lock);
    forget_locked(o);
    pthread_mutex_unlock(&o->lock);
}

void pybls_outbox_close(pybls_outbox *o) {
    pthread_mutex_lock(&o->lock);
    o->closed = true;
    forget_locked(o);
    pthread_mutex_unlock(&o->lock);
}

void pybls_outbox_unref(pybls_outbox *o) {
    if (!o)
        return;
    pthread_mutex_lock(&o->lock);
    bool last = --o->refs == 0;
    pthread_mutex_unlock(&o->lock);
    if (!last)
        return;
    free_answers(o->head);
    close(o->wake_fd);
    pthread_mutex_destroy(&o->lock);
    free(o);
}

int pybls_outbox_wake_fd(const pybls_outbox *o) {
    return o->wake_fd;
}

/* Queues `a` (ownership moves) and wakes the reader. Caller holds
 * o->lock. */
static void enqueue_locked(pybls_outbox *o, bls_answer *a) {
    a->next = NULL;
    if (o->tail)
        o->tail->next = a;
    else
        o->head = a;
    o->tail = a;
    o->bytes += a->len;
    uint64_t one = 1;
    if (write(o->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        OSP_LOG_WARN("python backend: eventfd write: %s", strerror(errno));
}

/* A BLS_ANSWER payload: the call's id, the final flag, and the response
 * `r` (NULL: an empty one) or the error `err` (wins over r), tensors
 * inline. A response over `max_frame` becomes an error saying so. NULL
 * when out of memory. */
static bls_answer *encode_answer(uint64_t id, bool final,
                                 const osp_infer_response *r,
                                 const osp_error *err, size_t max_frame) {
    if (!err && r && r->error)
        err = r->error;
    pyproto_text t = {0};
    uint32_t flags = final ? 1 : 0;
    uint64_t data_len = 0;
    pyproto_text_append(&t, &id, sizeof id);
    pyproto_text_append(&t, &flags, sizeof flags);
    pyproto_text_append(&t, &data_len, sizeof data_len); /* patched below */
    size_t n = err || !r ? 0 : r->n_outputs;
    if (err) {
        pybls_append_error(&t, err);
    } else {
        uint32_t head[2] = {0, (uint32_t)n};
        pyproto_text_append(&t, head, sizeof head);
    }
    osp_error *bad = NULL;
    for (size_t k = 0; k < n && !bad; k++) {
        const osp_infer_output *out = &r->outputs[k];
        bad = pyproto_append_tensor(&t, out->name, out->dtype, &out->shape,
                                    data_len, out->byte_size);
        data_len += out->byte_size;
    }
    if (!bad && t.len + data_len > max_frame)
        bad = osp_error_new_reason(
            OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
            "python backend: a BLS response with its tensors inline carries "
            "at most %zu bytes (shm-region-max-byte-size plus %u of "
            "descriptors), this one has %llu",
            max_frame, PYPROTO_MAX_FRAME,
            (unsigned long long)(t.len + data_len));
    if (!bad)
        pyproto_text_reserve(&t, data_len);
    for (size_t k = 0; k < n && !bad; k++) {
        const osp_infer_output *out = &r->outputs[k];
        if (out->byte_size)
            pyproto_text_append(&t, out->data->data, out->byte_size);
    }
    bls_answer *a = NULL;
    if (bad) {
        pyproto_text_free(&t);
        a = encode_answer(id, final, NULL, bad, max_frame);
        osp_error_free(bad);
        return a;
    }
    if (t.failed || !(a = malloc(sizeof *a))) {
        pyproto_text_free(&t);
        return NULL;
    }
    memcpy(t.data + 12, &data_len, sizeof data_len);
    a->next = NULL;
    a->data = t.data;
    a->len = t.len;
    a->gathered = NULL;
    return a;
}

/* An answer when even encoding failed: the smallest error frame, from
 * memory of its own, so that the waiting thread never hangs. */
static bls_answer *out_of_memory_answer(uint64_t id, bool final) {
    osp_error *oom = osp_error_out_of_memory();
    bls_answer *a = encode_answer(id, final, NULL, oom, PYPROTO_MAX_FRAME);
    osp_error_free(oom);
    return a;
}

/* Unlinks a finished call. Caller holds o->lock. */
static void unlink_call_locked(pybls_outbox *o, bls_call *c) {
    if (c->prev)
        c->prev->next = c->next;
    else
        o->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    o->n_calls--;
    if (o->region_call == c)
        o->region_call = NULL;
}

/* Queues one answer of `c` (ownership of `a` moves; NULL when it could
 * not be built). A final answer also ends the call and frees it. Answers
 * of an old stub, and those past PYBLS_OUTBOX_MAX_BYTES, are dropped; the
 * final answer of a call that lost some becomes an error saying so. */
static void post_answer(bls_call *c, bls_answer *a, bool final) {
    pybls_outbox *o = c->outbox;
    pthread_mutex_lock(&o->lock);
    bool current = !o->closed && c->generation == o->generation;
    if (current && !a && final)
        a = out_of_memory_answer(c->id, true);
    if (current && a && !final &&
        (c->lost || (o->bytes && o->bytes + a->len > o->max_waiting))) {
        if (!c->lost)
            OSP_LOG_WARN("python backend: BLS responses of model '%s' wait "
                         "unread past %zu bytes; dropping them",
                         c->model, o->max_waiting);
        c->lost = true;
        free_answers(a);
        a = NULL;
    }
    if (current && a && final && c->lost) {
        free_answers(a);
        osp_error *err = osp_error_new(
            OSP_ERROR_UNAVAILABLE,
            "python backend: responses of the BLS request to model '%s' "
            "were dropped: more than %zu bytes of them waited for the stub",
            c->model, o->max_waiting);
        a = encode_answer(c->id, true, NULL, err, o->max_frame);
        osp_error_free(err);
    }
    if (current && a)
        enqueue_locked(o, a);
    else
        free_answers(a);
    if (final)
        unlink_call_locked(o, c);
    pthread_mutex_unlock(&o->lock);
    if (final) {
        if (c->cancel)
            osp_cancel_token_unref(c->cancel);
        pybls_gathered_free(c->gathered);
        free(c->region_answer);
        pybls_outbox_unref(o);
        free(c);
    }
}

/* The core's completion of a call of a model that is not decoupled. */
static void call_complete(osp_infer_response *response, void *user) {
    bls_call *c = user;
    post_answer(
        c, encode_answer(c->id, true, response, NULL, c->outbox->max_frame),
        true);
    osp_infer_response_free(response);
}

/* Each response of an exec(decoupled=True) call. */
static void call_respond(osp_infer_response *response, bool final, void *user) {
    bls_call *c = user;
    post_answer(
        c, encode_answer(c->id, final, response, NULL, c->outbox->max_frame),
        final);
    osp_infer_response_free(response);
}

/* Queues the answer of region call `c` with what it gathered; ends c. */
static void post_region_answer(bls_call *c) {
    bls_answer *a = c->region_answer;
    a->gathered = c->gathered;
    c->region_answer = NULL;
    c->gathered = NULL;
    post_answer(c, a, true);
}

/* The core's completion of a region exec() call. */
static void region_complete(osp_infer_response *response, void *user) {
    bls_call *c = user;
    c->gathered->response = response;
    post_region_answer(c);
}

/* Answers call `id` with `err` at once (a call that never reached the
 * core; it is not listed). Takes err. */
static void answer_now(pybls_outbox *o, uint64_t id, osp_error *err) {
    bls_answer *a = encode_answer(id, true, NULL, err, o->max_frame);
    osp_error_free(err);
    if (!a)
        a = out_of_memory_answer(id, true);
    pthread_mutex_lock(&o->lock);
    if (a && !o->closed)
        enqueue_locked(o, a);
    else
        free_answers(a);
    pthread_mutex_unlock(&o->lock);
}

/* Lists a new call of model `model` (borrowed) under the stub's `id`;
 * NULL with *err set past PYBLS_MAX_CALLS or out of memory. Caller holds
 * o->lock. */
static bls_call *register_call_locked(pybls_outbox *o, const char *instance,
                                      const char *model, uint64_t id,
                                      osp_error **err) {
    bls_call *c = NULL;
    if (o->n_calls >= PYBLS_MAX_CALLS)
        *err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: instance '%s' has %d BLS "
                             "requests in flight, the most it may",
                             instance, PYBLS_MAX_CALLS);
    else if (!(c = calloc(1, sizeof *c)))
        *err = osp_error_out_of_memory();
    if (!c)
        return NULL;
    c->outbox = o;
    o->refs++;
    c->id = id;
    c->generation = o->generation;
    snprintf(c->model, sizeof c->model, "%s", model);
    c->next = o->calls;
    if (o->calls)
        o->calls->prev = c;
    o->calls = c;
    o->n_calls++;
    return c;
}

void pybls_call_start(pybls_outbox *o, osp_server *server, const char *instance,
                      const uint8_t *payload, size_t len) {
    pyproto_bls_request bls = {0};
    uint64_t id = 0;
    osp_error *err = pyproto_bls_call_decode(payload, len, &bls, &id);
    if (err && len < sizeof id) {
        OSP_LOG_ERROR("python instance '%s': %s", instance,
                      osp_error_message(err));
        osp_error_free(err);
        return;
    }
    if (err) {
        answer_now(o, id, err);
        return;
    }
    /* exec(decoupled=True) can be cancelled (BLS_CANCEL): its token is
     * the call's before the call is listed. */
    osp_cancel_token *cancel = NULL;
    if (bls.decoupled && !(cancel = osp_cancel_token_new()))
        err = osp_error_out_of_memory();
    bls_call *c = NULL;
    if (!err) {
        pthread_mutex_lock(&o->lock);
        if ((c = register_call_locked(o, instance, bls.model, id, &err)))
            c->cancel = cancel;
        pthread_mutex_unlock(&o->lock);
    }
    if (err) {
        if (cancel)
            osp_cancel_token_unref(cancel);
        pyproto_bls_destroy(&bls);
        answer_now(o, id, err);
        return;
    }
    osp_infer_request *req = NULL;
    if (!server)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "BLS requests need a server (none attached)");
    if (!err)
        err = pybls_build_request(&bls, bls.data, &req);
    /* From here on the callbacks own c, possibly before the call returns;
     * ownership of req moves to the server either way. */
    if (!err)
        err = bls.decoupled
                  ? osp_server_infer_stream_async(server, req, c->cancel,
                                                  call_respond, c)
                  : osp_server_infer_async(server, req, call_complete, c);
    pyproto_bls_destroy(&bls);
    if (err) {
        post_answer(c, encode_answer(id, true, NULL, err, o->max_frame), true);
        osp_error_free(err);
    }
}

void pybls_call_cancel(pybls_outbox *o, const uint8_t *payload, size_t len) {
    uint64_t id = 0;
    osp_error *err = pyproto_bls_cancel_decode(payload, len, &id);
    if (err) {
        OSP_LOG_ERROR("%s", osp_error_message(err));
        osp_error_free(err);
        return;
    }
    pthread_mutex_lock(&o->lock);
    /* Ids are the stub's: only a call of the current stub matches. */
    for (bls_call *c = o->calls; c; c = c->next)
        if (c->id == id && c->generation == o->generation && c->cancel &&
            c != o->region_call)
            osp_cancel_token_cancel(c->cancel);
    pthread_mutex_unlock(&o->lock);
}

void pybls_outbox_drop_region_call(pybls_outbox *o) {
    pthread_mutex_lock(&o->lock);
    if (o->region_call) {
        /* An old generation's answer is dropped when it comes. */
        o->region_call->generation = o->generation - 1;
        o->region_call = NULL;
    }
    pthread_mutex_unlock(&o->lock);
}

bool pybls_outbox_flush(pybls_outbox *o, pystub *stub) {
    pthread_mutex_lock(&o->lock);
    bls_answer *list = o->head;
    o->head = o->tail = NULL;
    o->bytes = 0;
    uint64_t drained;
    if (read(o->wake_fd, &drained, sizeof drained) < 0 && errno != EAGAIN)
        OSP_LOG_WARN("python backend: eventfd read: %s", strerror(errno));
    pthread_mutex_unlock(&o->lock);
    bool sent = true;
    for (bls_answer *a = list; a && sent; a = a->next)
        sent = a->gathered
                   ? pybls_send_gathered(stub, a->gathered)
                   : pystub_send(stub, PYPROTO_BLS_ANSWER, a->data, a->len);
    free_answers(list);
    return sent;
}

bool pybls_outbox_busy(pybls_outbox *o) {
    pthread_mutex_lock(&o->lock);
    bool busy = o->n_calls > 0 || o->head;
    pthread_mutex_unlock(&o->lock);
    return busy;
}

bool pybls_region_call_start(pybls_outbox *o, pystub *stub,
                             const uint8_t *payload, size_t len) {
    pyproto_bls_request bls = {0};
    bls_call *c = NULL;
    osp_infer_request *req = NULL;
    /* Allocated up front: once listed, the call's answer cannot fail. */
    pybls_gathered *g = calloc(1, sizeof *g);
    bls_answer *a = calloc(1, sizeof *a);
    osp_error *err = pyproto_bls_decode(payload, len, &bls);
    if (!err && (!g || !a))
        err = osp_error_out_of_memory();
    if (!err)
        err = pyshm_region_follow(&stub->region, bls.region_size);
    if (!err && !stub->server)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "BLS requests need a server (none attached)");
    if (!err)
        err = pybls_build_request(&bls, stub->region.base, &req);
    if (!err) {
        pthread_mutex_lock(&o->lock);
        if (o->region_call)
            err = osp_error_new(OSP_ERROR_INTERNAL,
                                "python backend: instance '%s' sent a region "
                                "BLS request while one was in flight",
                                stub->name);
        else if ((c = register_call_locked(o, stub->name, bls.model, 0, &err)))
            o->region_call = c;
        pthread_mutex_unlock(&o->lock);
    }
    if (err) {
        /* Never listed: answered now. */
        osp_infer_request_free(req);
        pybls_gathered now = {.error = err};
        bool sent = pybls_send_gathered(stub, &now);
        osp_error_free(err);
        pybls_gathered_free(g);
        free(a);
        pyproto_bls_destroy(&bls);
        return sent;
    }
    g->out_offset = bls.out_offset;
    c->gathered = g;
    c->region_answer = a;
    /* From here on the callbacks own c; ownership of req moves to the
     * server either way. */
    err = osp_server_infer_async(stub->server, req, region_complete, c);
    pyproto_bls_destroy(&bls);
    if (err) {
        c->gathered->error = err;
        post_region_answer(c);
    }
    return true;
}
