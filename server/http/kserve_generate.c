/*
 * POST /v2/models/{m}[/versions/{v}]/generate and .../generate_stream:
 * Triton's generate extension, which maps a flat JSON object onto a model's
 * inputs and its outputs back onto a flat JSON object.
 *
 * Request (Triton's ConvertGenerateRequest with its default schema): each
 * top-level member, in document order and repeated keys included, is
 *  - "parameters": an object whose members are mapped the same way;
 *  - a model input: a scalar or a list becomes a tensor of the input's
 *    datatype (strings for BYTES), shaped from the model metadata's shape:
 *    fixed dimensions divide the element count, the innermost variable one
 *    takes what remains and other variable ones are 1;
 *  - anything else: a request parameter (string, int, bool or double).
 * "id" also names the request, as for infer.
 *
 * Response (ConvertGenerateResponse): one object whose members are sorted
 * by name as Triton's std::map sorts them: every output (a flat list, or
 * the bare value when it has one element), "model_name", "model_version",
 * "id" when the request had one, and the response parameters. generate
 * answers it as application/json; generate_stream as one server-sent event,
 * `data: <json>\n\n`, per response, with Content-Type text/event-stream;
 * charset=utf-8. A decoupled model may send 0..n responses: generate
 * needs exactly one (Triton's error otherwise); generate_stream sends one
 * event each, an error as `{"error":...}` (the first event's status is the
 * reply's). Events go out as they come (a chunked body); a client that
 * goes away cancels the request (the model's is_cancelled()).
 *
 * The body is buffered by the transport, so it is bounded by
 * --http-max-input-size with Triton's "request JSON size" error before any
 * of this runs; each input's expanded size is bounded again below.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_compress.h"
#include "json_tensor.h"
#include "json_util.h"
#include "kserve.h"
#include "kserve_codec.h"
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
    size_t consumed; /* expanded input bytes so far */
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
    jbuf events;
    unsigned status;
    http_stream *stream;
    osp_cancel_token *cancel;
} answer;

static void answer_unref(answer *a) {
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    osp_infer_response_free(a->response);
    jbuf_free(&a->events);
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

/* The model input named `name`, or NULL. */
static const osp_model_io *find_input(const generate_ctx *ctx,
                                      const char *name) {
    const osp_model_config *cfg = osp_model_get_config(ctx->model);
    for (size_t i = 0; i < cfg->n_inputs; i++)
        if (strcmp(cfg->inputs[i].name, name) == 0)
            return &cfg->inputs[i];
    return NULL;
}

/* ---- request ---- */

/* A non-input member as a request parameter, with Triton's
 * SetTritonParameterFromJsonParameter rules (v borrowed). */
static osp_error *add_parameter(generate_ctx *ctx, const char *key,
                                struct json_object *v) {
    osp_parameter p;
    memset(&p, 0, sizeof p);
    p.key = (char *)key;
    if (v && json_object_is_type(v, json_type_string)) {
        p.type = OSP_PARAM_STRING;
        p.value.s = (char *)json_object_get_string(v);
    } else if (v && json_object_is_type(v, json_type_int) && json_is_int64(v)) {
        p.type = OSP_PARAM_INT;
        p.value.i = json_object_get_int64(v);
    } else if (v && json_object_is_type(v, json_type_boolean)) {
        p.type = OSP_PARAM_BOOL;
        p.value.b = json_object_get_boolean(v);
    } else if (v && (json_object_is_type(v, json_type_double) ||
                     json_object_is_type(v, json_type_int))) {
        p.type = OSP_PARAM_DOUBLE;
        p.value.d = json_object_get_double(v);
    } else {
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "parameter '%s' has invalid type. It should be "
                             "either 'int', 'bool', or 'string'.",
                             key);
    }
    return osp_infer_request_add_parameter(ctx->request, &p);
}

/* Shapes `count` elements for an input whose metadata shape is `meta`
 * (Triton's two passes); false when they do not fit. */
static bool shape_elements(const osp_shape *meta, int64_t count,
                           osp_shape *out) {
    *out = *meta;
    for (int i = meta->rank - 1; i >= 0; i--) {
        int64_t d = meta->dims[i];
        if (d == -1)
            continue;
        if (d <= 0 || count % d)
            return false;
        count /= d;
    }
    for (int i = meta->rank - 1; i >= 0; i--) {
        if (meta->dims[i] == -1) {
            out->dims[i] = count;
            count = 1;
        }
    }
    return count == 1;
}

/* Adds input `io` from the value text[0..len) (validated JSON). */
static osp_error *add_tensor(generate_ctx *ctx, const osp_model_io *io,
                             const char *text, size_t len) {
    osp_error *err = NULL;
    osp_buffer *buf = NULL;
    char *wrapped = NULL;
    const char *name = io->name;
    osp_datatype dt = io->dtype;
    /* A scalar is a list of one, read by the same element reader. */
    if (len == 0 || text[0] != '[') {
        if (!(wrapped = malloc(len + 3))) {
            err = osp_error_out_of_memory();
            goto out;
        }
        wrapped[0] = '[';
        memcpy(wrapped + 1, text, len);
        wrapped[len + 1] = ']';
        wrapped[len + 2] = '\0';
        text = wrapped;
        len += 2;
    }
    /* the top-level list's length */
    int64_t count = 0;
    {
        size_t depth = 0;
        bool in_string = false, any = false;
        for (size_t i = 0; i < len; i++) {
            char c = text[i];
            if (in_string) {
                if (c == '\\')
                    i++;
                else if (c == '"')
                    in_string = false;
                continue;
            }
            if (c == '"')
                in_string = true;
            if (c == '[' || c == '{')
                depth++;
            else if (c == ']' || c == '}')
                depth--;
            else if (c == ',' && depth == 1)
                count++;
            if (depth >= 1 && c != ' ' && c != '\n' && c != '\r' && c != '\t' &&
                !(depth == 1 && (c == '[' || c == ']')))
                any = true;
        }
        count = any ? count + 1 : 0;
    }

    size_t byte_size;
    if (dt == OSP_TYPE_BYTES) {
        if ((err = json_tensor_bytes_size(text, len, &byte_size)))
            goto out;
    } else {
        size_t es = osp_datatype_byte_size(dt);
        if (es == 0) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "input '%s' has unsupported datatype %s", name,
                                osp_datatype_wire_name(dt));
            goto out;
        }
        if ((uint64_t)count > SIZE_MAX / es) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "input '%s' has too many elements of datatype "
                                "%s",
                                name, osp_datatype_wire_name(dt));
            goto out;
        }
        byte_size = (size_t)count * es;
    }
    if (byte_size == 0) {
        osp_shape empty = {0};
        if (!(err = osp_server_alloc_input_buffer(ctx->core, 0, &buf)) &&
            !(err = osp_infer_request_add_input(ctx->request, name, dt, &empty,
                                                buf)))
            buf = NULL;
        goto out;
    }
    if (byte_size > ctx->max_input - ctx->consumed) {
        err = osp_error_new_reason(
            OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
            "request size of %zu bytes with input '%s' of size %zu bytes "
            "exceeds the maximum allowed input size of %zu. Use "
            "--http-max-input-size to increase the limit.",
            ctx->consumed, name, byte_size, ctx->max_input);
        goto out;
    }
    ctx->consumed += byte_size;

    const osp_model_config *cfg = osp_model_get_config(ctx->model);
    osp_shape meta = {0};
    if (cfg->max_batch_size > 0)
        meta.dims[meta.rank++] = -1;
    for (int i = 0; i < io->dims.rank && meta.rank < OSP_MAX_DIMS; i++)
        meta.dims[meta.rank++] = io->dims.dims[i];
    osp_shape shape;
    if (!shape_elements(&meta, count, &shape)) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "The schema can not convert input '%s' to tensor "
                            "with proper shape",
                            name);
        goto out;
    }
    if (dt == OSP_TYPE_FP16 || dt == OSP_TYPE_BF16) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "receiving %s data via JSON is not supported. "
                            "Please use the binary data format for input %s",
                            dt == OSP_TYPE_FP16 ? "FP16" : "BF16", name);
        goto out;
    }
    if ((err = osp_server_alloc_input_buffer(ctx->core, byte_size, &buf)))
        goto out;
    if ((err = json_tensor_decode(
             text, len, dt, dt == OSP_TYPE_BYTES ? (int64_t)byte_size : count,
             buf->data)))
        goto out;
    if ((err =
             osp_infer_request_add_input(ctx->request, name, dt, &shape, buf)))
        goto out;
    buf = NULL; /* the request owns it */
out:
    osp_buffer_free(buf);
    free(wrapped);
    return err;
}

/* Maps one member `key` whose value is v (json-c, borrowed) and whose text
 * is text[0..len). */
static osp_error *map_member(generate_ctx *ctx, const char *key,
                             struct json_object *v, const char *text,
                             size_t len) {
    const osp_model_io *io = find_input(ctx, key);
    if (io)
        return add_tensor(ctx, io, text, len);
    return add_parameter(ctx, key, v);
}

/* The reserved "parameters" object: its members map as top-level ones. */
static osp_error *map_parameters(generate_ctx *ctx, struct json_object *v) {
    osp_error *err = NULL;
    if (find_input(ctx, "parameters"))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Keyword 'parameters' for nested schema also "
                             "given as input tensor name");
    if (!v || !json_object_is_type(v, json_type_object))
        return osp_error_wrap(
            osp_error_new(OSP_ERROR_INTERNAL,
                          "attempt to access JSON non-object as object"),
            "Expected JSON object for keyword: 'parameters'");
    json_object_object_foreach(v, key, val) {
        const char *text = "";
        size_t len = 0;
        if (find_input(ctx, key)) {
            /* rare: an input inside "parameters"; its text again */
            text = json_object_to_json_string_length(
                val, JSON_C_TO_STRING_PLAIN, &len);
            if (!text) {
                err = osp_error_out_of_memory();
                break;
            }
        }
        if ((err = map_member(ctx, key, val, text, len)))
            break;
    }
    if (err)
        err = osp_error_wrap(err, "Converting keyword: 'parameters'");
    return err;
}

/* A member's key, unescaped (caller frees). */
static osp_error *member_key(const char *text, const json_member_span *m,
                             char **out) {
    size_t at = m->key_start - 1, probe = at; /* the opening quote */
    size_t n = json_string_decode(text, &probe, NULL);
    if (!(*out = malloc(n + 1)))
        return osp_error_out_of_memory();
    json_string_decode(text, &at, *out);
    (*out)[n] = '\0';
    return NULL;
}

/* Builds ctx->request from the body (Triton's order: parse, "id", then the
 * members). */
static osp_error *convert_request(generate_ctx *ctx) {
    osp_error *err = NULL;
    struct json_object *root = NULL;
    json_member_span *members = NULL;
    size_t n_members = 0;
    size_t len;
    const char *body = http_request_body(ctx->http, &len);
    const char *text = body ? body : "";
    if ((err = json_parse_body(text, body ? len : 0, &root)))
        goto out;
    if (!(ctx->request =
              osp_infer_request_new(ctx->model_name, ctx->version))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if ((err = kserve_request_id_from_json(ctx->request, root)))
        goto out;
    if (!json_object_is_type(root, json_type_object)) {
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "attempt to access JSON non-object as object");
        goto out;
    }
    if ((err = json_root_members(text, len, &members, &n_members)))
        goto out;
    for (size_t i = 0; i < n_members && !err; i++) {
        char *key = NULL;
        if ((err = member_key(text, &members[i], &key)))
            break;
        struct json_object *v = json_member(root, key);
        if (strcmp(key, "parameters") == 0)
            err = map_parameters(ctx, v);
        else
            err = map_member(ctx, key, v, text + members[i].value_start,
                             members[i].value_end - members[i].value_start);
        free(key);
    }
out:
    free(members);
    json_free(root);
    return err;
}

/* ---- response ---- */

typedef struct field {
    const char *name;
    enum { FIELD_TEXT, FIELD_OUTPUT, FIELD_PARAMETER } kind;
    const char *text; /* FIELD_TEXT */
    size_t index;     /* FIELD_OUTPUT, FIELD_PARAMETER */
} field;

static int field_cmp(const void *a, const void *b) {
    return strcmp(((const field *)a)->name, ((const field *)b)->name);
}

/* Appends output i as a JSON value: a flat list, or its only element. */
static osp_error *write_output(jbuf *b, const osp_infer_output *o) {
    int64_t count;
    if (!osp_shape_element_count(&o->shape, &count))
        return osp_error_new(OSP_ERROR_INTERNAL, "output shape overflow");
    jbuf tmp;
    jbuf_init(&tmp);
    osp_error *err =
        json_tensor_encode(&tmp, o->name, o->dtype,
                           o->data ? o->data->data : NULL, o->byte_size, count);
    if (!err && tmp.oom)
        err = osp_error_out_of_memory();
    if (!err) {
        if (count == 1 && tmp.len >= 2) /* strip the list of one */
            jbuf_put(b, tmp.data + 1, tmp.len - 2);
        else
            jbuf_put(b, tmp.data, tmp.len);
    }
    jbuf_free(&tmp);
    return err;
}

/* The response object (Triton's member order: sorted by name; a name that
 * repeats keeps its first kind, as std::map::emplace does). */
static osp_error *write_response(jbuf *b, const osp_infer_response *r) {
    osp_error *err = NULL;
    char version[32];
    snprintf(version, sizeof version, "%lld", (long long)r->model_version);
    size_t n = 0, cap = 3 + r->n_outputs + r->n_parameters;
    field *fields = calloc(cap, sizeof *fields);
    if (!fields)
        return osp_error_out_of_memory();
    if (r->id && r->id[0])
        fields[n++] = (field){"id", FIELD_TEXT, r->id, 0};
    fields[n++] = (field){"model_name", FIELD_TEXT, r->model_name, 0};
    fields[n++] = (field){"model_version", FIELD_TEXT, version, 0};
    for (size_t i = 0; i < r->n_parameters; i++)
        fields[n++] = (field){r->parameters[i].key, FIELD_PARAMETER, NULL, i};
    for (size_t i = 0; i < r->n_outputs; i++)
        fields[n++] = (field){r->outputs[i].name, FIELD_OUTPUT, NULL, i};
    /* stable for equal names: insertion order decides, then dedupe */
    for (size_t i = 1; i < n; i++) {
        field f = fields[i];
        size_t j = i;
        while (j > 0 && field_cmp(&fields[j - 1], &f) > 0) {
            fields[j] = fields[j - 1];
            j--;
        }
        fields[j] = f;
    }
    jbuf_putc(b, '{');
    bool first = true;
    for (size_t i = 0; i < n && !err; i++) {
        if (i > 0 && strcmp(fields[i].name, fields[i - 1].name) == 0)
            continue;
        if (!first)
            jbuf_putc(b, ',');
        first = false;
        jbuf_json_cstr(b, fields[i].name);
        jbuf_putc(b, ':');
        const field *f = &fields[i];
        if (f->kind == FIELD_TEXT) {
            jbuf_json_cstr(b, f->text);
        } else if (f->kind == FIELD_OUTPUT) {
            err = write_output(b, &r->outputs[f->index]);
        } else {
            kserve_write_parameter_value(b, &r->parameters[f->index]);
        }
    }
    jbuf_putc(b, '}');
    free(fields);
    if (!err && b->oom)
        err = osp_error_out_of_memory();
    return err;
}

static const char *const SSE_TYPE = "text/event-stream; charset=utf-8";

/* Appends response r (borrowed; its error taken) to the stream's events:
 * `data: <json>\n\n`, or `data: {"error":...}\n\n`. The first sets the
 * reply's status. */
static void add_event(answer *ctx, osp_infer_response *r) {
    jbuf b;
    jbuf_init(&b);
    osp_error *err = r->error;
    r->error = NULL;
    if (!err)
        err = write_response(&b, r);
    if (ctx->n_responses++ == 0)
        ctx->status = err ? kserve_error_status(osp_error_get_code(err)) : 200;
    if (err) {
        jbuf_free(&b);
        jbuf_init(&b);
        jbuf_puts(&b, "{\"error\":");
        jbuf_json_cstr(&b, osp_error_message(err));
        jbuf_putc(&b, '}');
        osp_error_free(err);
    }
    jbuf_puts(&ctx->events, "data: ");
    jbuf_put(&ctx->events, b.data, b.len);
    jbuf_puts(&ctx->events, "\n\n");
    jbuf_free(&b);
}

/* Hands the events gathered so far to the reply's stream (lock held); a
 * client that has gone is told to the model. */
static void flush_events_locked(answer *a) {
    if (!a->stream || a->events.len == 0)
        return;
    if (a->events.oom ||
        !http_stream_write(a->stream, a->events.data, a->events.len))
        osp_cancel_token_cancel(a->cancel);
    jbuf_free(&a->events);
    jbuf_init(&a->events);
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
    jbuf b;
    jbuf_init(&b);
    osp_error *err = write_response(&b, r);
    if (err) {
        jbuf_free(&b);
        return err;
    }
    char *body = jbuf_take(&b, &n);
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
    osp_error *err = convert_request(ctx);
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
    jbuf_init(&a->events);
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
