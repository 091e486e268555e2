/*
 * ModelInfer: one request, one response, asynchronous end to end. The
 * completion-queue thread decodes the request (raw inputs copied once from
 * the received slices into the core's input buffers), hands it to the core
 * and goes back to the queue; the core's completion callback encodes the
 * response around the output buffers (no copy) and starts the reply batch.
 *
 * Trace: a sampled request gets GRPC_WAITREAD_START (when the server asked
 * gRPC for the call, as Triton stamps it), GRPC_WAITREAD_END (when the
 * call arrived with its request), GRPC_SEND_START and GRPC_SEND_END around
 * the reply, and is ended when the reply batch completes.
 *
 * The per-call state comes from a pool of at most
 * --grpc-infer-allocation-pool-size idle contexts, as Triton keeps its
 * inference states for reuse.
 */
#include <stdlib.h>
#include <string.h>

#include "grpc_internal.h"
#include "kserve_codec.h"
#include "kserve_params.h"
#include "osprey/clock.h"
#include "osprey/log.h"

typedef struct infer_ctx {
    kgrpc_server *server;
    kgrpc_call *call;
    kgrpc_decoded decoded;
    osp_trace *trace;
    osp_cancel_token *cancel; /* the call's, shared with the request */
    struct infer_ctx *next_idle; /* in the pool */
} infer_ctx;

/* ---- the pool of idle contexts (guarded by the server's mutex) ---- */

static infer_ctx *ctx_get(kgrpc_server *s) {
    pthread_mutex_lock(&s->mu);
    infer_ctx *ctx = s->infer_pool;
    if (ctx) {
        s->infer_pool = ctx->next_idle;
        s->infer_pool_len--;
    }
    pthread_mutex_unlock(&s->mu);
    if (!ctx && !(ctx = malloc(sizeof *ctx)))
        return NULL;
    memset(ctx, 0, sizeof *ctx);
    ctx->server = s;
    kgrpc_decoded_init(&ctx->decoded);
    return ctx;
}

/* The call's handler_free: ends the trace, releases what the request
 * held, and keeps the context for reuse when the pool has room. */
static void ctx_put(void *p) {
    infer_ctx *ctx = p;
    kgrpc_decoded_destroy(&ctx->decoded);
    osp_trace_end(ctx->trace);
    ctx->trace = NULL;
    osp_cancel_token_unref(ctx->cancel);
    ctx->cancel = NULL;
    kgrpc_server *s = ctx->server;
    pthread_mutex_lock(&s->mu);
    if (s->infer_pool_len < (size_t)(s->opts.infer_allocation_pool_size > 0
                                         ? s->opts.infer_allocation_pool_size
                                         : 0)) {
        ctx->next_idle = s->infer_pool;
        s->infer_pool = ctx;
        s->infer_pool_len++;
        ctx = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(ctx);
}

void kgrpc_infer_pool_free(kgrpc_server *s) {
    infer_ctx *ctx = s->infer_pool;
    while (ctx) {
        infer_ctx *next = ctx->next_idle;
        free(ctx);
        ctx = next;
    }
    s->infer_pool = NULL;
    s->infer_pool_len = 0;
}

/* ---- input buffers from the core ---- */

static osp_error *core_alloc(void *core, size_t size, osp_buffer **out) {
    return osp_server_alloc_input_buffer(core, size, out);
}

/* Triton checks the model before the request's own contents: when the
 * model or version cannot be had, that is the error, not the request's. */
static osp_error *prefer_model_error(osp_server *core, const kgrpc_decoded *d,
                                     osp_error *err) {
    if (osp_error_get_code(err) != OSP_ERROR_INVALID_ARG || !d->model_name)
        return err;
    int64_t version;
    osp_error *version_err = kserve_parse_version(d->model_version, &version);
    if (version_err) { /* the version itself was the problem */
        osp_error_free(version_err);
        return err;
    }
    osp_model *model = NULL;
    osp_error *model_err =
        osp_server_model_get(core, d->model_name, version, &model);
    if (!model_err) {
        osp_model_unref(model);
        return err;
    }
    osp_error_free(err);
    return model_err;
}

/* Triton's refusal of a decoupled model (it answers ModelStreamInfer
 * only), checked as soon as the model is known; NULL otherwise. */
static osp_error *refuse_decoupled(osp_server *core, const kgrpc_decoded *d) {
    int64_t version;
    osp_model *model = NULL;
    if (!d->model_name || !d->model_version)
        return NULL;
    osp_error *err = kserve_parse_version(d->model_version, &version);
    if (!err)
        err = osp_server_model_get(core, d->model_name, version, &model);
    if (err) {
        osp_error_free(err);
        return NULL;
    }
    bool decoupled = osp_model_get_config(model)->decoupled;
    osp_model_unref(model);
    if (!decoupled)
        return NULL;
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "ModelInfer RPC doesn't support models with "
                         "decoupled transaction policy");
}

/* The client cancelled the call or went away (the queue thread): the
 * model sees it, and a request still queued is answered CANCELLED
 * without running, as Triton cancels a ModelInfer call. */
static void infer_cancelled(kgrpc_call *call) {
    infer_ctx *ctx = call->handler;
    OSP_LOG_VERBOSE("gRPC ModelInfer: the call is cancelled");
    osp_cancel_token_cancel(ctx->cancel);
}

/* ---- the reply ---- */

static void reply_sent(kgrpc_call *call, bool ok) {
    (void)ok;
    infer_ctx *ctx = call->handler;
    if (ctx->trace)
        osp_trace_stamp(ctx->trace, OSP_TRACE_GRPC_SEND_END, osp_now_ns());
}

/* The core's completion callback (any thread). */
static void infer_complete(osp_infer_response *response, void *user) {
    infer_ctx *ctx = user;
    kgrpc_call *call = ctx->call;
    osp_error *err = response->error;
    response->error = NULL;
    grpc_byte_buffer *bb = NULL;
    if (!err) {
        kgrpc_encoded e;
        err = kgrpc_encode_infer_response(response, &ctx->decoded, false, true,
                                          &e);
        if (!err) {
            if (!(bb = kgrpc_byte_buffer_from_parts(&e)))
                err = osp_error_out_of_memory();
            kgrpc_encoded_destroy(&e);
        }
    }
    osp_infer_response_free(response);
    /* Shared memory regions are free before the reply goes out, so a
     * client that unregisters them right after reading it finds them so. */
    kgrpc_decoded_destroy(&ctx->decoded);
    if (ctx->trace)
        osp_trace_stamp(ctx->trace, OSP_TRACE_GRPC_SEND_START, osp_now_ns());
    if (err) {
        kgrpc_call_reply_error(call, err);
        osp_error_free(err);
    } else {
        kgrpc_call_finish(call, bb, GRPC_STATUS_OK, NULL, true);
    }
    kgrpc_call_unref(call); /* the core's reference */
}

void kgrpc_model_infer(kgrpc_call *call) {
    kgrpc_server *s = call->server;
    osp_error *err = NULL;
    infer_ctx *ctx = ctx_get(s);
    osp_cancel_token *cancel = ctx ? osp_cancel_token_new() : NULL;
    if (!cancel) {
        if (ctx)
            ctx_put(ctx);
        err = osp_error_out_of_memory();
        kgrpc_call_reply_error(call, err);
        osp_error_free(err);
        return;
    }
    ctx->call = call;
    ctx->cancel = cancel;
    pthread_mutex_lock(&s->mu);
    call->handler = ctx;
    call->handler_free = ctx_put;
    call->on_finished = reply_sent;
    call->on_cancelled = infer_cancelled;
    pthread_mutex_unlock(&s->mu);
    if (atomic_load(&call->cancelled)) /* before the hook was set */
        osp_cancel_token_cancel(cancel);

    kgrpc_received received;
    kgrpc_decode_env env = {
        .alloc = core_alloc, .alloc_ctx = s->opts.core, .shm = s->opts.shm};
    if (!kgrpc_received_init(&received, call->payload))
        err = osp_error_new(OSP_ERROR_INTERNAL, KGRPC_PARSE_ERROR);
    else
        err =
            kgrpc_decode_infer_request(&received.message, &env, &ctx->decoded);
    kgrpc_received_destroy(&received);
    if (!err)
        err = kgrpc_call_forward_metadata(call, ctx->decoded.request);
    /* The request's bytes are in the input buffers now. */
    grpc_byte_buffer_destroy(call->payload);
    call->payload = NULL;
    osp_error *decoupled = refuse_decoupled(s->opts.core, &ctx->decoded);
    if (decoupled) {
        osp_error_free(err);
        kgrpc_call_reply_error(call, decoupled);
        osp_error_free(decoupled);
        return;
    }
    if (err) {
        err = prefer_model_error(s->opts.core, &ctx->decoded, err);
        kserve_log_infer_failed(ctx->decoded.request ? ctx->decoded.request->id
                                                     : NULL,
                                err);
        kgrpc_call_reply_error(call, err);
        osp_error_free(err);
        return;
    }

    osp_infer_request *req = ctx->decoded.request;
    ctx->decoded.request = NULL; /* moves to the core below */
    ctx->trace = osp_tracer_sample(s->opts.tracer, req->model_name);
    if (ctx->trace) {
        osp_trace_stamp(ctx->trace, OSP_TRACE_GRPC_WAITREAD_START,
                        call->armed_ns);
        osp_trace_stamp(ctx->trace, OSP_TRACE_GRPC_WAITREAD_END,
                        call->matched_ns);
    }
    req->trace = ctx->trace; /* lent to the core */
    req->receive_start_ns = call->matched_ns;
    char *id = req->id[0] ? strdup(req->id) : NULL; /* for the log line */
    kgrpc_call_ref(call); /* for infer_complete */
    err = osp_server_infer_async_cancellable(s->opts.core, req, ctx->cancel,
                                             infer_complete, ctx);
    if (err) {
        kserve_log_infer_failed(id, err);
        kgrpc_call_unref(call);
        kgrpc_call_reply_error(call, err);
        osp_error_free(err);
    }
    free(id);
}
