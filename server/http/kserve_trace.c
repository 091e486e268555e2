/*
 * GET/POST /v2/trace/setting and /v2/models/{m}/trace/setting: Triton's
 * trace extension over HTTP (HTTPAPIServer::HandleTrace), with its exact
 * messages and order of checks (§4 of the protocol reference). The update
 * rules are in server/kserve/kserve_trace_settings.c; the settings
 * themselves live in the tracer (osprey/trace.h).
 *
 * One deliberate extension: with --trace-file-directory, "trace_file" may
 * be set to a plain file name inside that directory; without it, any
 * "trace_file" member is refused exactly as Triton refuses it.
 */
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "kserve.h"
#include "kserve_trace_settings.h"
#include "osprey/trace.h"

typedef struct trace_ctx {
    char *model; /* NULL for the global settings */
} trace_ctx;

static void trace_ctx_free(void *p) {
    trace_ctx *ctx = p;
    if (!ctx)
        return;
    free(ctx->model);
    free(ctx);
}

/* Applies a POST body (kserve_trace_settings.c has the rules). */
static osp_error *apply_update(http_request *req, osp_tracer *tracer,
                               const char *model) {
    size_t len;
    const char *body = http_request_body(req, &len);
    struct json_object *root = NULL;
    /* An empty body is a JSON error ("The document is empty."). */
    osp_error *err = json_parse_body(body ? body : "", body ? len : 0, &root);
    if (err)
        return err;
    err = kserve_trace_settings_update(tracer, model, root);
    json_free(root);
    return err;
}

static osp_error *trace_on_complete(http_request *req) {
    trace_ctx *ctx = http_request_handler_ctx(req);
    osp_tracer *tracer = kserve_tracer(req);
    osp_error *err;
    if (!tracer)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "the server does not support tracing");
    if (ctx->model &&
        (err = kserve_trace_check_model(kserve_core(req), ctx->model)))
        return err;
    if (http_request_method(req) == HTTP_METHOD_POST &&
        (err = apply_update(req, tracer, ctx->model)))
        return err;

    osp_trace_settings s;
    osp_tracer_get_settings(tracer, ctx->model, &s);
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_puts(&b, "{\"trace_level\":[");
    if (s.level == OSP_TRACE_LEVEL_OFF)
        bytebuf_puts(&b, "\"OFF\"");
    if (s.level & OSP_TRACE_LEVEL_TIMESTAMPS)
        bytebuf_puts(&b, "\"TIMESTAMPS\"");
    if (s.level & OSP_TRACE_LEVEL_TENSORS)
        bytebuf_puts(&b, s.level & OSP_TRACE_LEVEL_TIMESTAMPS ? ",\"TENSORS\""
                                                              : "\"TENSORS\"");
    bytebuf_printf(&b,
                   "],\"trace_rate\":\"%u\",\"trace_count\":\"%d\","
                   "\"log_frequency\":\"%u\",\"trace_file\":",
                   (unsigned)s.rate, (int)s.count, (unsigned)s.log_frequency);
    json_write_cstr(&b, s.file);
    bytebuf_puts(&b, ",\"trace_mode\":");
    json_write_cstr(&b, s.mode);
    bytebuf_putc(&b, '}');
    return kserve_reply_json(req, &b);
}

static const http_handler trace_handler = {
    .on_body = NULL, /* POST bodies are buffered (bounded by the limit) */
    .on_complete = trace_on_complete,
    .destroy = trace_ctx_free,
    .decode_body = false,
};

void kserve_trace_route(http_request *req, const char *model,
                        size_t model_len) {
    http_method m = http_request_method(req);
    if (m != HTTP_METHOD_GET && m != HTTP_METHOD_POST) {
        http_reply_error_status(req, 405, "Method Not Allowed");
        return;
    }
    trace_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx && model) {
        ctx->model = malloc(model_len + 1);
        if (ctx->model) {
            memcpy(ctx->model, model, model_len);
            ctx->model[model_len] = '\0';
        }
    }
    if (!ctx || (model && !ctx->model)) {
        trace_ctx_free(ctx);
        http_reply_error_status(req, 503, "out of memory");
        return;
    }
    http_request_set_handler(req, &trace_handler, ctx);
}
