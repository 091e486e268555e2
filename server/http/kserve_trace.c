/*
 * GET/POST /v2/trace/setting and /v2/models/{m}/trace/setting: Triton's
 * trace extension over HTTP (HTTPAPIServer::HandleTrace), with its exact
 * messages and order of checks (§4 of the protocol reference). The
 * settings themselves live in the tracer (osprey/trace.h).
 *
 * One deliberate extension: with --trace-file-directory, "trace_file" may
 * be set to a plain file name inside that directory; without it, any
 * "trace_file" member is refused exactly as Triton refuses it.
 */
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "kserve.h"
#include "kserve_params.h"
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

/* As Triton's ModelIsReady(m, -1) check. An unknown model gets "Request
 * for unknown model : <m>" (400), the message Triton's trace handler has
 * for a model that is not ready and the one its QA test expects; other
 * errors (e.g. no available versions) are the core's. */
static osp_error *check_model(http_request *req, const char *model) {
    osp_model *m = NULL;
    osp_error *err =
        osp_server_model_get(http_request_core(req), model, -1, &m);
    if (!err) {
        osp_model_unref(m);
        return NULL;
    }
    osp_error *unknown =
        osp_error_new(OSP_ERROR_NOT_FOUND,
                      "Request for unknown model: '%s' is not found", model);
    bool is_unknown =
        osp_error_get_code(err) == OSP_ERROR_NOT_FOUND &&
        strcmp(osp_error_message(err), osp_error_message(unknown)) == 0;
    osp_error_free(unknown);
    if (!is_unknown)
        return err;
    osp_error_free(err);
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "Request for unknown model : %s", model);
}

/* Member `key` as Triton reads these settings: absent changes nothing,
 * null clears (*change), otherwise a JSON string read with std::stoi, whose
 * out-of-range message names `range`. *n and *text are set, and *got is
 * true, only when a number was read; the caller checks and stores it. */
static osp_error *stoi_member(struct json_object *root, const char *key,
                              const char *range, osp_trace_change *change,
                              bool *got, long long *n, const char **text) {
    struct json_object *v;
    *got = false;
    if (!json_find(root, key, &v))
        return NULL;
    if (!v) {
        *change = OSP_TRACE_CLEAR;
        return NULL;
    }
    osp_error *err = json_as_string(v, text, NULL);
    if (err)
        return err;
    int why = kserve_parse_stoi(*text, n);
    if (why == 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Unable to parse '%s', got: %s", key, *text);
    if (why == 2)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Unable to parse '%s', value is out of range [ "
                             "%s ], got: %s",
                             key, range, *text);
    *got = true;
    return NULL;
}

/* "trace_rate" and "log_frequency": std::stoi into a uint32 (so "-5"
 * wraps, as in Triton). */
static osp_error *parse_uint32_member(struct json_object *root, const char *key,
                                      osp_trace_change *change, uint32_t *out) {
    bool got;
    long long n;
    const char *s;
    osp_error *err =
        stoi_member(root, key, "0, 4294967295", change, &got, &n, &s);
    if (!err && got) {
        *out = (uint32_t)(int32_t)n;
        *change = OSP_TRACE_SET;
    }
    return err;
}

/* "trace_count": -1 (no limit) or more. */
static osp_error *parse_count_member(struct json_object *root,
                                     osp_trace_update *u) {
    bool got;
    long long n;
    const char *s;
    osp_error *err = stoi_member(root, "trace_count", "-1, 2147483647",
                                 &u->count_change, &got, &n, &s);
    if (err || !got)
        return err;
    if (n < -1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Unable to parse 'trace_count'. Expecting value "
                             ">= -1, got:%s",
                             s);
    u->count = (int32_t)n;
    u->count_change = OSP_TRACE_SET;
    return NULL;
}

/* "trace_level": null clears; otherwise an array of strings where OFF must
 * stand alone, TIMESTAMPS and TENSORS add up and anything else is
 * ignored (so an empty array changes nothing). */
static osp_error *parse_level_member(struct json_object *root,
                                     osp_trace_update *u) {
    struct json_object *v;
    if (!json_find(root, "trace_level", &v))
        return NULL;
    if (!v) {
        u->level_change = OSP_TRACE_CLEAR;
        return NULL;
    }
    osp_error *err = json_as_array(v);
    if (err)
        return err;
    size_t n = json_object_array_length(v);
    unsigned level = OSP_TRACE_LEVEL_OFF;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        if ((err = json_as_string(json_object_array_get_idx(v, i), &s, NULL)))
            return err;
        if (strcmp(s, "OFF") == 0) {
            if (n != 1)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "Expect only one trace level 'OFF' is "
                                     "specified");
            level = OSP_TRACE_LEVEL_OFF;
            u->level_change = OSP_TRACE_SET;
        } else if (strcmp(s, "TIMESTAMPS") == 0) {
            level |= OSP_TRACE_LEVEL_TIMESTAMPS;
            u->level_change = OSP_TRACE_SET;
        } else if (strcmp(s, "TENSORS") == 0) {
            level |= OSP_TRACE_LEVEL_TENSORS;
            u->level_change = OSP_TRACE_SET;
        }
    }
    u->level = level;
    return NULL;
}

/* Applies a POST body in Triton's order: trace_file, trace_level,
 * trace_rate, trace_count, log_frequency, then the update itself. */
static osp_error *apply_update(http_request *req, osp_tracer *tracer,
                               const char *model) {
    size_t len;
    const char *body = http_request_body(req, &len);
    struct json_object *root = NULL;
    /* An empty body is a JSON error ("The document is empty."). */
    osp_error *err = json_parse_body(body ? body : "", body ? len : 0, &root);
    if (err)
        return err;
    osp_trace_update u;
    memset(&u, 0, sizeof u);
    struct json_object *v;
    if (json_find(root, "trace_file", &v)) {
        if (!osp_tracer_file_updates_allowed(tracer)) {
            err = osp_error_new(OSP_ERROR_UNSUPPORTED,
                                "trace file location can not be updated "
                                "through network protocol");
            goto out;
        }
        if (!v) {
            u.file_change = OSP_TRACE_CLEAR;
        } else {
            if ((err = json_as_string(v, &u.file, &u.file_len)))
                goto out;
            u.file_change = OSP_TRACE_SET;
        }
    }
    if ((err = parse_level_member(root, &u)))
        goto out;
    if ((err =
             parse_uint32_member(root, "trace_rate", &u.rate_change, &u.rate)))
        goto out;
    if ((err = parse_count_member(root, &u)))
        goto out;
    if ((err = parse_uint32_member(root, "log_frequency",
                                   &u.log_frequency_change, &u.log_frequency)))
        goto out;
    err = osp_tracer_update_settings(tracer, model, &u);
out:
    json_free(root);
    return err;
}

static osp_error *trace_on_complete(http_request *req) {
    trace_ctx *ctx = http_request_handler_ctx(req);
    osp_tracer *tracer = http_request_tracer(req);
    osp_error *err;
    if (!tracer)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "the server does not support tracing");
    if (ctx->model && (err = check_model(req, ctx->model)))
        return err;
    if (http_request_method(req) == HTTP_METHOD_POST &&
        (err = apply_update(req, tracer, ctx->model)))
        return err;

    osp_trace_settings s;
    osp_tracer_get_settings(tracer, ctx->model, &s);
    jbuf b;
    jbuf_init(&b);
    jbuf_puts(&b, "{\"trace_level\":[");
    if (s.level == OSP_TRACE_LEVEL_OFF)
        jbuf_puts(&b, "\"OFF\"");
    if (s.level & OSP_TRACE_LEVEL_TIMESTAMPS)
        jbuf_puts(&b, "\"TIMESTAMPS\"");
    if (s.level & OSP_TRACE_LEVEL_TENSORS)
        jbuf_puts(&b, s.level & OSP_TRACE_LEVEL_TIMESTAMPS ? ",\"TENSORS\""
                                                           : "\"TENSORS\"");
    jbuf_printf(&b,
                "],\"trace_rate\":\"%u\",\"trace_count\":\"%d\","
                "\"log_frequency\":\"%u\",\"trace_file\":",
                (unsigned)s.rate, (int)s.count, (unsigned)s.log_frequency);
    jbuf_json_cstr(&b, s.file);
    jbuf_puts(&b, ",\"trace_mode\":");
    jbuf_json_cstr(&b, s.mode);
    jbuf_putc(&b, '}');
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
