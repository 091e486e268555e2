/*
 * ModelStreamInfer: a bidirectional stream of ModelInferRequest in and
 * ModelStreamInferResponse out. Requests are read one at a time and each
 * goes to the core as soon as it is read, so several are in flight on one
 * stream; responses are written in the order they finish, one write at a
 * time (gRPC allows one outstanding send per call). A request that fails
 * is answered in-band (error_message, with the request's id) and the
 * stream goes on, unless the client sent the metadata
 * "triton_grpc_error: true", which makes the first error end the stream
 * with that error's status, as in Triton.
 *
 * Bounds: at most STREAM_MAX_IN_FLIGHT requests of a stream wait for the
 * core or for their write; past that the stream stops reading until one is
 * written, so a client that never reads cannot grow the server's memory.
 *
 * A decoupled model answers a request with 0..n responses and a final
 * flag: each response is written as it comes, with Triton's
 * "triton_final_response" parameter, and the flag alone becomes an empty
 * response only when the request asked for it
 * (triton_enable_empty_final_response). `in_flight` counts the requests
 * in the core plus the responses waiting for their write.
 *
 * The stream ends with OK once the client has half-closed (or the server
 * stops accepting calls) and every request read has been answered. A
 * client that cancels or disconnects fails the pending operations and
 * cancels the stream's token: the requests already in the core finish,
 * their models see is_cancelled(), and their responses are dropped.
 *
 * Locking: `mu` guards the stream's state; gRPC batches are started under
 * it (they never call back synchronously). The call's references are never
 * dropped while holding it.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "grpc_internal.h"
#include "osprey/clock.h"
#include "osprey/log.h"

#define STREAM_MAX_IN_FLIGHT 64
/* Most responses waiting for their write: reached only when decoupled
 * models answer faster than the client reads; the stream then ends with
 * RESOURCE_EXHAUSTED and its requests are cancelled. */
#define STREAM_MAX_QUEUED 4096

/* A response waiting for its write, or being written. */
typedef struct pending_write {
    struct pending_write *next;
    grpc_byte_buffer *message;
    osp_trace *trace; /* ended once written (or dropped) */
} pending_write;

/* One request between its read and its response. */
typedef struct stream_request {
    struct stream *stream;
    kgrpc_decoded decoded;
    osp_trace *trace;
} stream_request;

typedef struct stream {
    kgrpc_call *call;
    pthread_mutex_t mu;
    kgrpc_tag read_tag;
    kgrpc_tag write_tag;
    grpc_byte_buffer *received;
    uint64_t read_start_ns;
    bool reading;     /* a read is outstanding */
    bool read_closed; /* half-closed, cancelled or failed: no more reads */
    bool quiescing;   /* the server stops accepting calls */
    bool grpc_errors; /* triton_grpc_error: errors end the stream */
    bool failed;      /* a write failed: the client is gone */
    bool finishing;   /* the final status is on its way */
    osp_cancel_token *cancel; /* the requests' "client gone" flag */
    size_t in_flight; /* read, not yet written */
    size_t queued;    /* writes waiting in the queue */
    bool overflowed;  /* STREAM_MAX_QUEUED was passed */
    pending_write *queue_head, *queue_tail;
    pending_write *writing; /* the write outstanding */
} stream;

static void start_read_locked(stream *st);
static void pump_locked(stream *st);

static void pending_write_free(pending_write *w) {
    if (w->message)
        grpc_byte_buffer_destroy(w->message);
    osp_trace_end(w->trace);
    free(w);
}

static void stream_free(void *p) {
    stream *st = p;
    pending_write *w = st->queue_head;
    while (w) {
        pending_write *next = w->next;
        pending_write_free(w);
        w = next;
    }
    if (st->writing)
        pending_write_free(st->writing);
    if (st->received)
        grpc_byte_buffer_destroy(st->received);
    osp_cancel_token_unref(st->cancel);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* Cancels the stream's requests (their models see is_cancelled, the
 * schedulers drop the queued ones), saying why in the verbose log the
 * first time. */
static void cancel_requests(stream *st, const char *why) {
    if (!osp_cancel_token_is_cancelled(st->cancel))
        OSP_LOG_VERBOSE("gRPC ModelStreamInfer: the stream's requests are "
                        "cancelled: %s",
                        why);
    osp_cancel_token_cancel(st->cancel);
}

/* Queues the response to one request read (message and trace ownership
 * move) to be written in its turn; when it cannot be sent any more, the
 * request is done with here. */
static void enqueue_locked(stream *st, grpc_byte_buffer *message,
                           osp_trace *trace) {
    if (st->queued >= STREAM_MAX_QUEUED && !st->failed) {
        st->failed = st->overflowed = true; /* the client reads too slowly */
        cancel_requests(st, "the client reads too slowly");
    }
    pending_write *w = calloc(1, sizeof *w);
    if (!w || st->failed || st->finishing) {
        /* nowhere to send it */
        if (message)
            grpc_byte_buffer_destroy(message);
        osp_trace_end(trace);
        free(w);
        st->in_flight--;
        return;
    }
    w->message = message;
    w->trace = trace;
    st->queued++;
    if (st->queue_tail)
        st->queue_tail->next = w;
    else
        st->queue_head = w;
    st->queue_tail = w;
}

/* An in-band error for the request with `id` (and, for errors from the
 * core, its model and version). */
static void enqueue_error_locked(stream *st, const osp_error *err,
                                 const kgrpc_decoded *d, bool with_model,
                                 bool final, osp_trace *trace) {
    if (st->grpc_errors && !st->finishing) {
        /* triton_grpc_error: the error ends the stream */
        osp_trace_end(trace);
        st->in_flight--;
        st->read_closed = true;
        st->finishing = true;
        kgrpc_call_finish(st->call, NULL,
                          kgrpc_status_of(osp_error_get_code(err)),
                          osp_error_message(err), false);
        return;
    }
    size_t len;
    uint8_t *packed = kgrpc_encode_stream_error(
        osp_error_message(err), d ? d->id : NULL,
        with_model && d ? d->model_name : NULL,
        with_model && d ? d->model_version : NULL,
        with_model ? (int)final : -1, &len);
    grpc_byte_buffer *bb = packed ? kgrpc_byte_buffer_copy(packed, len) : NULL;
    free(packed);
    enqueue_locked(st, bb, trace);
}

static void write_done(kgrpc_tag *tag, bool ok) {
    stream *st = tag->call->handler;
    pthread_mutex_lock(&st->mu);
    pending_write *w = st->writing;
    st->writing = NULL;
    if (w && w->trace)
        osp_trace_stamp(w->trace, OSP_TRACE_GRPC_SEND_END, osp_now_ns());
    if (!ok) {
        st->failed = true;
        cancel_requests(st, "a write failed");
    }
    if (w)
        st->in_flight--;
    pump_locked(st);
    pthread_mutex_unlock(&st->mu);
    if (w)
        pending_write_free(w);
}

/* Writes the next queued response, resumes reading when there is room,
 * and ends the stream when everything is answered. */
static void pump_locked(stream *st) {
    if (st->failed) {
        /* The client is gone: drop what waits. */
        while (st->queue_head) {
            pending_write *w = st->queue_head;
            st->queue_head = w->next;
            st->in_flight--;
            st->queued--;
            pending_write_free(w);
        }
        st->queue_tail = NULL;
    }
    if (!st->writing && st->queue_head && !st->finishing) {
        pending_write *w = st->queue_head;
        st->queue_head = w->next;
        st->queued--;
        if (!st->queue_head)
            st->queue_tail = NULL;
        grpc_op ops[2];
        size_t n = 0;
        if (!st->call->initial_metadata_sent) {
            kgrpc__initial_metadata_op(st->call, &ops[n++], true);
            st->call->initial_metadata_sent = true;
        }
        memset(&ops[n], 0, sizeof ops[n]);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = w->message;
        n++;
        if (w->trace)
            osp_trace_stamp(w->trace, OSP_TRACE_GRPC_SEND_START, osp_now_ns());
        st->writing = w;
        st->write_tag.done = write_done;
        if (!w->message ||
            !kgrpc_call_start_batch(st->call, ops, n, &st->write_tag)) {
            /* could not encode or send: the stream is broken */
            st->writing = NULL;
            st->failed = true;
            st->in_flight--;
            pending_write_free(w);
            pump_locked(st);
            return;
        }
    }
    if (!st->read_closed && !st->reading && !st->quiescing &&
        st->in_flight < STREAM_MAX_IN_FLIGHT)
        start_read_locked(st);
    /* A read outstanding while quiescing (or after a failed write) may wait
     * for a client that never writes again; sending the status completes
     * it. */
    bool done_reading = st->read_closed || st->quiescing || st->failed;
    if (done_reading && st->in_flight == 0 && !st->writing && !st->finishing) {
        st->finishing = true;
        if (st->overflowed)
            kgrpc_call_finish(st->call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED,
                              "more than 4096 responses wait for the client "
                              "to read them",
                              false);
        else
            kgrpc_call_finish(st->call, NULL, GRPC_STATUS_OK, NULL, false);
    }
}

/* The core's callback for each response of one request (any thread):
 * queues its write, or its error in-band. The request's own count in
 * in_flight goes to the final response's write, or, when the final flag
 * comes alone, is dropped here. */
static void request_respond(osp_infer_response *response, bool final,
                            void *user) {
    stream_request *r = user;
    stream *st = r->stream;
    kgrpc_call *call = st->call;
    osp_error *err = response ? response->error : NULL;
    grpc_byte_buffer *bb = NULL;
    if (response) {
        response->error = NULL;
        if (!err) {
            kgrpc_encoded e;
            err = kgrpc_encode_infer_response(response, &r->decoded, true,
                                              final, &e);
            if (!err) {
                if (!(bb = kgrpc_byte_buffer_from_parts(&e)))
                    err = osp_error_out_of_memory();
                kgrpc_encoded_destroy(&e);
            }
        }
        osp_infer_response_free(response);
    } else if (final && r->decoded.empty_final_response) {
        size_t len;
        uint8_t *packed = kgrpc_encode_stream_error(
            NULL, r->decoded.id, r->decoded.model_name,
            r->decoded.model_version, 1, &len);
        if (!packed || !(bb = kgrpc_byte_buffer_copy(packed, len)))
            err = osp_error_out_of_memory();
        free(packed);
    }
    osp_trace *trace = final ? r->trace : NULL; /* ends with the last write */
    pthread_mutex_lock(&st->mu);
    if (!final)
        st->in_flight++; /* this response's write */
    if (err)
        enqueue_error_locked(st, err, &r->decoded, true, final, trace);
    else if (bb)
        enqueue_locked(st, bb, trace);
    else /* the final flag alone: nothing to write */
        st->in_flight--;
    if (!bb && !err)
        osp_trace_end(trace);
    pump_locked(st);
    pthread_mutex_unlock(&st->mu);
    osp_error_free(err);
    if (!final)
        return;
    kgrpc_decoded_destroy(&r->decoded);
    free(r);
    kgrpc_call_unref(call); /* the request's reference */
}

static osp_error *core_alloc(void *core, size_t size, osp_buffer **out) {
    return osp_server_alloc_input_buffer(core, size, out);
}

/* Decodes one received request and hands it to the core, or queues its
 * error. Called without the lock. */
static void handle_request(stream *st, grpc_byte_buffer *bb,
                           uint64_t read_start, uint64_t read_end) {
    kgrpc_call *call = st->call;
    kgrpc_server *s = call->server;
    stream_request *r = calloc(1, sizeof *r);
    osp_error *err = NULL;
    if (!r) {
        err = osp_error_out_of_memory();
    } else {
        r->stream = st;
        kgrpc_decoded_init(&r->decoded);
        kgrpc_received received;
        kgrpc_decode_env env = {
            .alloc = core_alloc, .alloc_ctx = s->opts.core, .shm = s->opts.shm};
        if (!kgrpc_received_init(&received, bb))
            err = osp_error_new(OSP_ERROR_INTERNAL, KGRPC_PARSE_ERROR);
        else
            err = kgrpc_decode_infer_request(&received.message, &env,
                                             &r->decoded);
        kgrpc_received_destroy(&received);
        if (!err)
            err = kgrpc_call_forward_metadata(call, r->decoded.request);
    }
    grpc_byte_buffer_destroy(bb);
    if (!err) {
        osp_infer_request *req = r->decoded.request;
        r->decoded.request = NULL;
        r->trace = osp_tracer_sample(s->opts.tracer, req->model_name);
        if (r->trace) {
            osp_trace_stamp(r->trace, OSP_TRACE_GRPC_WAITREAD_START,
                            read_start);
            osp_trace_stamp(r->trace, OSP_TRACE_GRPC_WAITREAD_END, read_end);
        }
        req->trace = r->trace;
        req->receive_start_ns = read_end;
        kgrpc_call_ref(call); /* for request_respond */
        err = osp_server_infer_stream_async(s->opts.core, req, st->cancel,
                                            request_respond, r);
        if (!err)
            return;
        kgrpc_call_unref(call);
    }
    pthread_mutex_lock(&st->mu);
    enqueue_error_locked(st, err, r ? &r->decoded : NULL, false, true,
                         r ? r->trace : NULL);
    pump_locked(st);
    pthread_mutex_unlock(&st->mu);
    osp_error_free(err);
    if (r) {
        kgrpc_decoded_destroy(&r->decoded);
        free(r);
    }
}

static void read_done(kgrpc_tag *tag, bool ok) {
    stream *st = tag->call->handler;
    uint64_t read_end = osp_now_ns();
    pthread_mutex_lock(&st->mu);
    st->reading = false;
    grpc_byte_buffer *bb = st->received;
    st->received = NULL;
    uint64_t read_start = st->read_start_ns;
    if (!ok || !bb || st->finishing) {
        /* half-closed, cancelled or ended */
        st->read_closed = true;
        if (!ok)
            cancel_requests(st, "a read failed");
        if (bb)
            grpc_byte_buffer_destroy(bb);
        pump_locked(st);
        pthread_mutex_unlock(&st->mu);
        return;
    }
    st->in_flight++;
    /* Read on while this one is decoded and queued. */
    pump_locked(st);
    pthread_mutex_unlock(&st->mu);
    handle_request(st, bb, read_start, read_end);
}

static void start_read_locked(stream *st) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &st->received;
    st->read_tag.done = read_done;
    st->read_start_ns = osp_now_ns();
    st->reading = true;
    if (!kgrpc_call_start_batch(st->call, &op, 1, &st->read_tag)) {
        st->reading = false;
        st->read_closed = true;
    }
}

static void stream_quiesce(kgrpc_call *call) {
    stream *st = call->handler;
    pthread_mutex_lock(&st->mu);
    st->quiescing = true;
    pump_locked(st);
    pthread_mutex_unlock(&st->mu);
}

/* The client cancelled the stream: its requests see it (is_cancelled;
 * the schedulers drop the ones still queued). */
static void stream_cancelled(kgrpc_call *call) {
    cancel_requests(call->handler, "the client cancelled the stream");
}

void kgrpc_model_stream_infer(kgrpc_call *call) {
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        kgrpc_call_finish(call, NULL, GRPC_STATUS_UNAVAILABLE, "out of memory",
                          false);
        return;
    }
    if (!(st->cancel = osp_cancel_token_new())) {
        free(st);
        kgrpc_call_finish(call, NULL, GRPC_STATUS_UNAVAILABLE, "out of memory",
                          false);
        return;
    }
    pthread_mutex_init(&st->mu, NULL);
    st->call = call;
    size_t len;
    const char *mode = kgrpc_call_metadata(call, "triton_grpc_error", &len);
    st->grpc_errors = mode && len == 4 && strncasecmp(mode, "true", 4) == 0;
    pthread_mutex_lock(&call->server->mu);
    call->handler = st;
    call->handler_free = stream_free;
    call->on_quiesce = stream_quiesce;
    call->on_cancelled = stream_cancelled;
    bool accepting = call->server->accepting;
    pthread_mutex_unlock(&call->server->mu);
    if (atomic_load(&call->cancelled)) /* before the hook was set */
        cancel_requests(st, "the client cancelled the stream");
    pthread_mutex_lock(&st->mu);
    st->quiescing = !accepting;
    pump_locked(st);
    pthread_mutex_unlock(&st->mu);
}
