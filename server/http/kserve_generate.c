/*
 * POST /v2/models/{m}[/versions/{v}]/generate and .../generate_stream:
 * Triton's generate extension, which maps a flat JSON object onto a model's
 * inputs and its outputs back onto a flat JSON object.
 *
 * The JSON mapping itself is server/kserve/kserve_generate_codec.c. generate
 * answers the response object as application/json; generate_stream as one
 * server-sent event, `data: <json>\n\n`, per response, with Content-Type
 * text/event-stream; charset=utf-8. A decoupled model may send 0..n
 * responses: generate needs exactly one (Triton's error otherwise);
 * generate_stream sends one event each, an error as `{"error":...}` (the
 * first event's status is the reply's). Events go out as they come (a
 * chunked body); a client that goes away cancels the request (the model's
 * is_cancelled()).
 *
 * The body is buffered by the transport, so it is bounded by
 * --http-max-input-size with Triton's "request JSON size" error before any
 * of this runs; each input's expanded size is bounded again by the codec.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_compress.h"
#include "json_util.h"
#include "kserve.h"
#include "kserve_codec.h"
#include "kserve_generate_codec.h"
#include "kserve_params.h"
#include "osprey/infer.h"

typedef struct generate_ctx {
    http_request *http;
    osp_server *core;
    osp_model *model; /* a reference, for the input metadata */
    char *model_name;
    int64_t version;
    bool streaming;
    size_t max_input;
    osp_infer_request *request;
    struct answer *answer;
} generate_ctx;

/* What the core answers, shared by the request's handler and the core's
 * callbacks (a reference each): the core may answer after the client has
 * gone and the handler is destroyed. The first response (generate_stream)
 * or the final flag resumes the connection; generate_stream's events go
 * out as they come once on_resume has started the reply's stream. */
typedef struct answer {
    pthread_mutex_t mu;
    atomic_int refs;
    http_request *http; /* valid until resumed */
    bool streaming;
    bool resumed;
    bool final;
    /* generate: the first response and how many came */
    osp_infer_response *response;
    size_t n_responses;
    /* generate_stream: events not yet written, the reply's status (the
     * first event's), the reply's stream once started, and the token that
     * tells the model its client has gone */
    bytebuf events;
    unsigned status;
    http_stream *stream;
    osp_cancel_token *cancel;
} answer;

static void answer_unref(answer *a) {
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    osp_infer_response_free(a->response);
    bytebuf_free(&a->events);
    osp_cancel_token_unref(a->cancel);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static void generate_ctx_free(void *p) {
    generate_ctx *ctx = p;
    if (!ctx)
        return;
    if (ctx->model)
        osp_model_unref(ctx->model);
    free(ctx->model_name);
    osp_infer_request_free(ctx->request);
    answer_unref(ctx->answer);
    free(ctx);
}

static const char *const SSE_TYPE = "text/event-stream; charset=utf-8";

/* Appends response r (borrowed; its error taken) to the stream's events:
 * `data: <json>\n\n`, or `data: {"error":...}\n\n`. The first sets the
 * reply's status. */
static void add_event(answer *ctx, osp_infer_response *r) {
    bytebuf b;
    bytebuf_init(&b);
    osp_error *err = r->error;
    r->error = NULL;
    if (!err)
        err = kserve_generate_response_encode(&b, r);
    if (ctx->n_responses++ == 0)
        ctx->status = err ? kserve_error_status(osp_error_get_code(err)) : 200;
    if (err) {
        bytebuf_free(&b);
        bytebuf_init(&b);
        bytebuf_puts(&b, "{\"error\":");
        json_write_cstr(&b, osp_error_message(err));
        bytebuf_putc(&b, '}');
        osp_error_free(err);
    }
    bytebuf_puts(&ctx->events, "data: ");
    bytebuf_put(&ctx->events, b.data, b.len);
    bytebuf_puts(&ctx->events, "\n\n");
    bytebuf_free(&b);
}

/* Hands the events gathered so far to the reply's stream (lock held); a
 * client that has gone is told to the model. */
static void flush_events_locked(answer *a) {
    if (!a->stream || a->events.len == 0)
        return;
    if (a->events.oom ||
        !http_stream_write(a->stream, a->events.data, a->events.len))
        osp_cancel_token_cancel(a->cancel);
    bytebuf_free(&a->events);
    bytebuf_init(&a->events);
}

static osp_error *generate_on_resume(http_request *http) {
    generate_ctx *ctx = http_request_handler_ctx(http);
    answer *a = ctx->answer;
    size_t n;
    if (a->streaming) {
        pthread_mutex_lock(&a->mu);
        http_stream *s = http_reply_stream(
            http, a->n_responses ? a->status : 200, SSE_TYPE);
        if (s) {
            a->stream = s;
            flush_events_locked(a);
            if (a->final) {
                http_stream_end(s);
                a->stream = NULL;
            }
        } else {
            osp_cancel_token_cancel(a->cancel); /* nowhere to send */
        }
        pthread_mutex_unlock(&a->mu);
        return NULL;
    }
    osp_infer_response *r = a->response; /* the final flag has come */
    if (!r || a->n_responses != 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "generate expects model to produce exactly 1 "
                             "response, use generate stream for model that "
                             "generates various number of responses");
    if (r->error) {
        osp_error *err = r->error;
        r->error = NULL;
        return err; /* the surface's error reply */
    }
    bytebuf b;
    bytebuf_init(&b);
    osp_error *err = kserve_generate_response_encode(&b, r);
    if (err) {
        bytebuf_free(&b);
        return err;
    }
    char *body = bytebuf_take(&b, &n);
    if (!body)
        return osp_error_out_of_memory();
    http_reply(http, 200, "application/json", body, n);
    return NULL;
}

/* The core's callback for each response (one at a time, in order). */
static void generate_respond(osp_infer_response *response, bool final,
                             void *user) {
    answer *a = user;
    pthread_mutex_lock(&a->mu);
    if (response && a->streaming) {
        add_event(a, response);
        osp_infer_response_free(response);
        flush_events_locked(a);
    } else if (response) {
        if (a->n_responses++ == 0)
            a->response = response;
        else
            osp_infer_response_free(response);
    }
    if (final) {
        a->final = true;
        if (a->stream) {
            http_stream_end(a->stream);
            a->stream = NULL;
        }
    }
    bool resume = !a->resumed && (final || (a->streaming && a->n_responses));
    a->resumed = a->resumed || resume;
    http_request *http = a->http;
    pthread_mutex_unlock(&a->mu);
    if (resume)
        http_request_resume(http);
    if (final)
        answer_unref(a); /* the core's reference */
}

static osp_error *generate_on_complete(http_request *http) {
    generate_ctx *ctx = http_request_handler_ctx(http);
    size_t len = 0;
    const char *body = http_request_body(http, &len);
    osp_error *err = kserve_generate_request_decode(
        ctx->core, osp_model_get_config(ctx->model), ctx->model_name,
        ctx->version, body ? body : "", body ? len : 0, ctx->max_input,
        &ctx->request);
    if (err)
        return err;
    answer *a = calloc(1, sizeof *a);
    if (!a || (ctx->streaming && !(a->cancel = osp_cancel_token_new()))) {
        free(a);
        return osp_error_out_of_memory();
    }
    pthread_mutex_init(&a->mu, NULL);
    atomic_init(&a->refs, 2); /* the handler's and the core's */
    a->http = http;
    a->streaming = ctx->streaming;
    bytebuf_init(&a->events);
    ctx->answer = a;
    osp_infer_request *request = ctx->request;
    ctx->request = NULL; /* moves to the core */
    request->receive_start_ns = http_request_start_ns(http);
    request->trace = http_request_trace(http);
    http_request_begin_async(http);
    if ((err = osp_server_infer_stream_async(ctx->core, request, a->cancel,
                                             generate_respond, a))) {
        atomic_fetch_sub(&a->refs, 1); /* the callback will not run */
        http_request_resume(http);
        return err;
    }
    return NULL;
}

static const http_handler generate_handler = {
    .on_body = NULL, /* buffered, bounded by --http-max-input-size */
    .on_complete = generate_on_complete,
    .on_resume = generate_on_resume,
    .destroy = generate_ctx_free,
    .decode_body = false,
};

/* ---- route ---- */

void kserve_generate_route(http_request *http, const char *name,
                           const char *version, bool streaming) {
    osp_error *err = NULL;
    generate_ctx *ctx = NULL;
    if (http_request_method(http) != HTTP_METHOD_POST) {
        http_reply_error_status(http, 405, "Method Not Allowed");
        return;
    }
    int64_t v;
    if ((err = kserve_parse_version(version, &v)))
        goto fail;
    osp_server *core = kserve_core(http);
    if (!(ctx = calloc(1, sizeof *ctx)) || !(ctx->model_name = strdup(name))) {
        err = osp_error_out_of_memory();
        goto fail;
    }
    if ((err = osp_server_model_get(core, name, v, &ctx->model)))
        goto fail;
    /* Triton reads the metadata, then refuses compressed bodies. */
    const char *encoding = http_request_header(http, "Content-Encoding");
    if (http_content_encoding(encoding) != HTTP_ENCODING_IDENTITY) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Unsupported content-encoding, only 'identity' "
                            "is supported.");
        goto fail;
    }
    ctx->http = http;
    ctx->core = core;
    ctx->version = v;
    ctx->streaming = streaming;
    ctx->max_input = http_request_max_input_size(http);
    osp_trace *trace = osp_tracer_sample(kserve_tracer(http), name);
    if (trace)
        http_request_set_trace(http, trace);
    http_request_set_handler(http, &generate_handler, ctx);
    return;

fail:
    generate_ctx_free(ctx);
    http_reply_error(http, err);
}
