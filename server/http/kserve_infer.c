/*
 * POST /v2/models/{m}[/versions/{v}]/infer: request framing (Triton's
 * binary tensor data extension) and the reply. The KServe JSON itself is
 * server/kserve/kserve_codec.c: this file finds the header in the body,
 * streams the blobs into the buffers the decoder planned, and sends what
 * the encoder built.
 *
 * The body streams through on_body. The JSON header (the first
 * Inference-Header-Content-Length bytes, or the whole body without that
 * header) is collected and decoded as soon as it is complete; each binary
 * input then has its final buffer and the following bytes are copied
 * straight into it (kserve_decoded_feed). A raw request
 * (Inference-Header-Content-Length: 0) copies the body into one buffer.
 *
 * Errors follow Triton's order: a problem in the header is kept and
 * reported only after the blobs of the inputs before it were checked, as
 * Triton reads those first (kserve_decoded_finish).
 *
 * Tracing: the request is offered to the tracer's sampler when it is
 * routed; a sampled trace goes to the transport, which stamps the HTTP
 * receive and send stages and ends it (http_request_set_trace), and is
 * lent to the core with the request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_compress.h"
#include "json_util.h"
#include "kserve.h"
#include "kserve_codec.h"
#include "kserve_params.h"
#include "osprey/infer.h"
#include "osprey/log.h"

typedef struct infer_ctx {
    http_request *http;
    osp_server *core;
    char *model;
    int64_t version;
    size_t max_input;

    /* framing */
    bool length_known; /* exact decoded body length known up front */
    uint64_t length;   /* ... and its value */
    bool compressed;
    bool has_cl; /* Content-Length used for the IHCL range check */
    uint64_t cl;
    bool has_ihcl;
    int64_t ihcl_value; /* as parsed (may be negative) */
    uint64_t ihcl;      /* when not negative */
    char *ihcl_text;    /* header value, for messages */
    bool raw;           /* IHCL 0 (or, found at the end, an empty body) */

    /* JSON header */
    bytebuf header;
    bool header_parsed;
    bool json_too_large; /* more header bytes than the limit; not kept */

    /* raw body */
    osp_buffer *raw_buf; /* exact size when the length is known */
    size_t raw_len;      /* bytes in raw_buf */
    bytebuf raw_grow;    /* otherwise */
    bool raw_too_large;

    /* the decoded request (or the raw one), its binary inputs and the
     * output choices the response is encoded with */
    kserve_decoded dec;

    osp_infer_response *response;

} infer_ctx;

static void infer_ctx_free(void *p) {
    infer_ctx *ctx = p;
    if (!ctx)
        return;
    free(ctx->model);
    free(ctx->ihcl_text);
    bytebuf_free(&ctx->header);
    osp_buffer_free(ctx->raw_buf);
    bytebuf_free(&ctx->raw_grow);
    kserve_decoded_destroy(&ctx->dec);
    osp_infer_response_free(ctx->response);
    free(ctx);
}

/* ---- header values ---- */

static osp_error *header_parse_error(const char *header, const char *value,
                                     int why) {
    if (why == 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Unable to parse %s, got: %s", header, value);
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "Unable to parse %s, value is out of range [ "
                         "-2147483648, 2147483647 ], got: %s",
                         header, value);
}

static osp_error *ihcl_range_error(const infer_ctx *ctx,
                                   uint64_t content_length) {
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "inference header size should be in range (0, "
                         "%llu), got: %s",
                         (unsigned long long)content_length, ctx->ihcl_text);
}

static osp_error *raw_size_error(uint64_t n, size_t max) {
    return osp_error_new_reason(
        OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
        "Raw input has a byte_size (%llu bytes) that exceeds "
        "the maximum allowed value of %zu bytes. Use "
        "--http-max-input-size to increase the limit.",
        (unsigned long long)n, max);
}

/* ---- the JSON header ---- */

/* Decodes the complete JSON header (ctx->header) into ctx->dec; a failure
 * is kept there for infer_on_complete. The header text goes afterwards. */
static void parse_header(infer_ctx *ctx) {
    ctx->header_parsed = true;
    if (!bytebuf_reserve(&ctx->header, 1)) {
        ctx->dec.error = osp_error_out_of_memory();
        bytebuf_free(&ctx->header);
        return;
    }
    const char *text = ctx->header.data ? ctx->header.data : "";
    if (ctx->header.data)
        ctx->header.data[ctx->header.len] = '\0';
    /* Bytes of the body that can hold the header and blobs: the exact
     * decoded length, or for a compressed body of unknown length the
     * bound on its decompressed size. */
    kserve_decode_limits limits = {
        .max_input = ctx->max_input,
        .body_limited = ctx->length_known || ctx->compressed,
        .body_bytes = ctx->length_known ? ctx->length : ctx->max_input,
        .header_bytes = ctx->ihcl,
    };
    kserve_decode_header(&ctx->dec, ctx->core, ctx->model, ctx->version, text,
                         ctx->header.len, &limits);
    bytebuf_free(&ctx->header);
}

/* ---- body ---- */

static osp_error *infer_on_body(http_request *http, const char *data,
                                size_t len) {
    infer_ctx *ctx = http_request_handler_ctx(http);
    if (ctx->has_ihcl && ctx->ihcl_value < 0)
        return NULL; /* reported at the end, with the body length */
    if (ctx->raw) {
        if (ctx->raw_buf) {
            /* exact size: the length is known */
            if (len > ctx->raw_buf->size - ctx->raw_len)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "request body longer than its "
                                     "Content-Length");
            memcpy((char *)ctx->raw_buf->data + ctx->raw_len, data, len);
            ctx->raw_len += len;
            return NULL;
        }
        if (ctx->raw_too_large)
            return NULL;
        if (ctx->raw_grow.len + len > ctx->max_input) {
            ctx->raw_too_large = true;
            bytebuf_free(&ctx->raw_grow);
            return NULL;
        }
        bytebuf_put(&ctx->raw_grow, data, len);
        return ctx->raw_grow.oom ? osp_error_out_of_memory() : NULL;
    }
    if (!ctx->header_parsed) {
        size_t take = len;
        if (ctx->has_ihcl) {
            uint64_t have = http_request_body_bytes(http) - len;
            uint64_t want = ctx->ihcl - have;
            take = want < len ? (size_t)want : len;
        }
        if (!ctx->json_too_large) {
            if (ctx->header.len + take > ctx->max_input) {
                ctx->json_too_large = true;
                bytebuf_free(&ctx->header);
            } else {
                bytebuf_put(&ctx->header, data, take);
                if (ctx->header.oom)
                    return osp_error_out_of_memory();
            }
        }
        data += take;
        len -= take;
        if (ctx->has_ihcl && http_request_body_bytes(http) - len == ctx->ihcl &&
            !ctx->json_too_large)
            parse_header(ctx);
        if (!ctx->header_parsed)
            return NULL;
    }
    kserve_decoded_feed(&ctx->dec, data, len);
    return NULL;
}

/* ---- completion ---- */

static void infer_done(osp_infer_response *response, void *user) {
    infer_ctx *ctx = user;
    ctx->response = response;
    http_request_resume(ctx->http);
}

static osp_error *build_raw_request(infer_ctx *ctx) {
    uint64_t n = http_request_body_bytes(ctx->http);
    if (ctx->raw_too_large || n > ctx->max_input)
        return raw_size_error(n, ctx->max_input);
    osp_buffer *buf = ctx->raw_buf;
    ctx->raw_buf = NULL;
    if (!buf) {
        /* chunked or compressed: the bytes were collected in raw_grow */
        osp_error *err =
            osp_server_alloc_input_buffer(ctx->core, ctx->raw_grow.len, &buf);
        if (err)
            return err;
        if (ctx->raw_grow.len)
            memcpy(buf->data, ctx->raw_grow.data, ctx->raw_grow.len);
        bytebuf_free(&ctx->raw_grow);
    }
    ctx->dec.request = osp_infer_request_new(ctx->model, ctx->version);
    if (!ctx->dec.request) {
        osp_buffer_free(buf);
        return osp_error_out_of_memory();
    }
    osp_error *err = osp_infer_request_set_raw_input(ctx->dec.request, buf);
    if (err) {
        osp_buffer_free(buf);
        return err;
    }
    ctx->dec.outputs.default_binary = true;
    return NULL;
}

/* Decodes the whole request and hands it to the core; *id gets a copy of
 * its id once known (the caller frees it), for the failure log line. */
static osp_error *infer_submit(http_request *http, char **id) {
    infer_ctx *ctx = http_request_handler_ctx(http);
    osp_error *err;
    uint64_t body = http_request_body_bytes(http);
    uint64_t content_length = ctx->has_cl ? ctx->cl : body;
    if (ctx->has_ihcl && (ctx->ihcl_value < 0 || ctx->ihcl > content_length))
        return ihcl_range_error(ctx, content_length);
    if (!ctx->has_ihcl && body == 0)
        ctx->raw = true; /* an empty body takes the raw path, as in Triton */

    if (ctx->raw) {
        if ((err = build_raw_request(ctx)))
            return err;
    } else {
        if (ctx->json_too_large)
            return http_json_size_error(ctx->has_ihcl ? ctx->ihcl : body,
                                        ctx->max_input);
        if (!ctx->header_parsed) {
            if (ctx->has_ihcl && ctx->header.len < ctx->ihcl)
                return osp_error_new(
                    OSP_ERROR_INVALID_ARG,
                    "unexpected size for request JSON, "
                    "expecting %llu more bytes",
                    (unsigned long long)(ctx->ihcl - ctx->header.len));
            parse_header(ctx);
        }
        if ((err = kserve_decoded_finish(&ctx->dec)))
            return err;
    }

    osp_infer_request *request = kserve_decoded_take_request(&ctx->dec);
    if (request->id[0] && !(*id = strdup(request->id))) {
        osp_infer_request_free(request);
        return osp_error_out_of_memory();
    }
    if ((err = kserve_forward_headers(http, request))) {
        osp_infer_request_free(request);
        return err;
    }
    request->receive_start_ns = http_request_start_ns(http);
    request->trace = http_request_trace(http); /* lent to the core */
    http_request_begin_async(http);
    err = osp_server_infer_async(ctx->core, request, infer_done, ctx);
    if (err) {
        http_request_resume(http); /* the callback will not run */
        return err;
    }
    return NULL;
}

static osp_error *infer_on_complete(http_request *http) {
    char *id = NULL;
    osp_error *err = infer_submit(http, &id);
    if (err)
        kserve_log_infer_failed(id, err);
    free(id);
    return err;
}

/* ---- response ---- */

/* Builds the reply from ctx->response with the codec: JSON header, then
 * the binary outputs in output order, sent from their buffers without a
 * copy. */
static osp_error *infer_on_resume(http_request *http) {
    infer_ctx *ctx = http_request_handler_ctx(http);
    osp_infer_response *r = ctx->response;
    osp_error *err = NULL;
    if (!r)
        return osp_error_new(OSP_ERROR_INTERNAL, "no inference response");
    if (r->error) {
        err = r->error;
        r->error = NULL;
        kserve_decoded_destroy(&ctx->dec); /* shared memory regions too */
        return err;
    }
    kserve_encoded e;
    memset(&e, 0, sizeof e);
    http_part *parts = NULL;
    if ((err = kserve_encode_response(r, ctx->model, &ctx->dec.outputs, &e)))
        goto out;
    if (!(parts = calloc(e.n_parts, sizeof *parts))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < e.n_parts; i++) {
        parts[i].base = e.parts[i].base;
        parts[i].len = e.parts[i].len;
    }

    const char *content_type =
        e.binary ? "application/octet-stream" : "application/json";
    if (e.binary) {
        char ihcl[32];
        snprintf(ihcl, sizeof ihcl, "%zu", e.header_len);
        http_reply_header(http, "Inference-Header-Content-Length", ihcl);
    }
    http_encoding enc =
        http_accept_encoding(http_request_header(http, "Accept-Encoding"));
    if (enc != HTTP_ENCODING_IDENTITY) {
        char *z;
        size_t z_len;
        osp_error *zerr = http_compress(enc, parts, e.n_parts, &z, &z_len);
        if (!zerr) {
            http_reply_header(http, "Content-Encoding",
                              http_encoding_name(enc));
            http_reply(http, 200, content_type, z, z_len);
            goto out; /* the payload is freed below */
        }
        /* As Triton: send identity when compression fails. */
        OSP_LOG_VERBOSE("unable to compress response: %s",
                        osp_error_message(zerr));
        osp_error_free(zerr);
    }
    http_reply_parts(http, 200, content_type, parts, e.n_parts,
                     kserve_encoded_payload_free, e.payload);
    e.payload = NULL; /* the connection releases it */
out:
    kserve_encoded_destroy(&e);
    free(parts);
    /* The request is done with its shared memory regions before the reply
     * goes out, so a client that unregisters them right after reading it
     * finds them free. */
    kserve_decoded_destroy(&ctx->dec);
    return err;
}

static const http_handler infer_handler = {
    .on_body = infer_on_body,
    .on_complete = infer_on_complete,
    .on_resume = infer_on_resume,
    .destroy = infer_ctx_free,
    .decode_body = true,
};

/* ---- route ---- */

void kserve_infer_route(http_request *http, const char *name,
                        const char *version) {
    osp_error *err = NULL;
    infer_ctx *ctx = NULL;
    if (http_request_method(http) != HTTP_METHOD_POST) {
        http_reply_error_status(http, 405, "Method Not Allowed");
        return;
    }
    int64_t v;
    if ((err = kserve_parse_version(version, &v)))
        goto fail;
    osp_server *core = kserve_core(http);
    osp_model *model = NULL;
    if ((err = osp_server_model_get(core, name, v, &model)))
        goto fail;
    bool decoupled = osp_model_get_config(model)->decoupled;
    osp_model_unref(model);
    if (decoupled) {
        err = osp_error_new(OSP_ERROR_UNSUPPORTED,
                            "HTTP end point doesn't support models with "
                            "decoupled transaction policy");
        goto fail;
    }

    ctx = calloc(1, sizeof *ctx);
    if (!ctx || !(ctx->model = strdup(name))) {
        err = osp_error_out_of_memory();
        goto fail;
    }
    ctx->http = http;
    ctx->core = core;
    ctx->version = v;
    ctx->max_input = http_request_max_input_size(http);
    osp_trace *trace = osp_tracer_sample(kserve_tracer(http), name);
    if (trace)
        http_request_set_trace(http, trace);
    bytebuf_init(&ctx->header);
    bytebuf_init(&ctx->raw_grow);
    kserve_decoded_init(&ctx->dec);
    ctx->dec.model = ctx->model; /* for messages, even without a header */
    ctx->dec.shm = kserve_shm(http);
    http_request_set_handler(http, &infer_handler, ctx);
    /* From here the handler owns ctx; errors are recorded, not replied. */

    /* Content-Length as Triton reads it (std::stoi), for the IHCL range
     * check: present and not compressed, even with chunked framing. */
    const char *encoding = http_request_header(http, "Content-Encoding");
    ctx->compressed = http_content_encoding(encoding) != HTTP_ENCODING_IDENTITY;
    ctx->length_known = http_request_decoded_length(http, &ctx->length);
    const char *cl = http_request_header(http, "Content-Length");
    if (cl && !ctx->compressed) {
        long long parsed;
        int why = kserve_parse_stoi(cl, &parsed);
        if (why) {
            http_request_fail(http,
                              header_parse_error("Content-Length", cl, why));
            return;
        }
        ctx->has_cl = parsed >= 0;
        ctx->cl = parsed >= 0 ? (uint64_t)parsed : 0;
    }
    const char *ihcl =
        http_request_header(http, "Inference-Header-Content-Length");
    if (ihcl) {
        long long parsed;
        int why = kserve_parse_stoi(ihcl, &parsed);
        if (why) {
            http_request_fail(
                http, header_parse_error("Inference-Header-Content-Length",
                                         ihcl, why));
            return;
        }
        if (!(ctx->ihcl_text = strdup(ihcl))) {
            http_request_fail(http, osp_error_out_of_memory());
            return;
        }
        ctx->has_ihcl = true;
        ctx->ihcl_value = parsed;
        ctx->ihcl = parsed < 0 ? 0 : (uint64_t)parsed;
        if (parsed < 0)
            return; /* the range error needs the body length: at the end */
        if (ctx->has_cl && ctx->ihcl > ctx->cl) {
            http_request_fail(http, ihcl_range_error(ctx, ctx->cl));
            return;
        }
        ctx->raw = parsed == 0;
        if (!ctx->raw && ctx->ihcl > ctx->max_input)
            ctx->json_too_large = true; /* reported at the end */
    } else if (ctx->length_known && ctx->length == 0) {
        ctx->raw = true;
    }

    if (ctx->raw && ctx->length_known) {
        if (ctx->length > ctx->max_input) {
            http_request_fail(http,
                              raw_size_error(ctx->length, ctx->max_input));
            return;
        }
        err = osp_server_alloc_input_buffer(core, (size_t)ctx->length,
                                            &ctx->raw_buf);
        if (err)
            http_request_fail(http, err);
        return;
    }
    if (!ctx->raw && !ctx->json_too_large) {
        /* one allocation for the header when its size is known */
        uint64_t expect = ctx->has_ihcl       ? ctx->ihcl
                          : ctx->length_known ? ctx->length
                                              : 0;
        if (expect > 0 && expect <= ctx->max_input)
            bytebuf_reserve(&ctx->header, (size_t)expect + 1);
        else if (!ctx->has_ihcl && ctx->length_known && expect > ctx->max_input)
            ctx->json_too_large = true;
    }
    return;

fail:
    infer_ctx_free(ctx);
    http_reply_error(http, err);
}
