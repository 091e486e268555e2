/*
 * POST /v2/models/{m}[/versions/{v}]/infer: request framing (Triton's
 * binary tensor data extension), JSON header parsing into an
 * osp_infer_request, and the response (JSON header + output blobs).
 *
 * The body streams through on_body. The JSON header (the first
 * Inference-Header-Content-Length bytes, or the whole body without that
 * header) is collected and parsed as soon as it is complete; each binary
 * input then gets its final buffer from osp_server_alloc_input_buffer and
 * the following bytes are copied straight into it. A raw request
 * (Inference-Header-Content-Length: 0) copies the body into one buffer.
 *
 * Errors follow Triton's order: a problem in the header is kept and
 * reported only after the blobs of the inputs before it were checked, as
 * Triton reads those first.
 *
 * Tracing: the request is offered to the tracer's sampler when it is
 * routed; a sampled request's trace (owned by the ctx) gets HTTP_RECV_START
 * then, HTTP_RECV_END when the body is in, is lent to the core with the
 * request, gets HTTP_SEND_START when the response is built and
 * HTTP_SEND_END when the connection is done with it, and is ended there.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_compress.h"
#include "json_tensor.h"
#include "json_util.h"
#include "kserve.h"
#include "kserve_params.h"
#include "osprey/infer.h"
#include "osprey/log.h"

typedef struct blob {
    char *name;      /* owned copy of the input name */
    uint64_t size;   /* binary_data_size */
    uint64_t filled; /* bytes received so far */
    char *dst;       /* the input buffer (owned by the request); NULL when
                        the bytes are only counted */
} blob;

typedef struct output_choice {
    char *name;
    bool binary;
} output_choice;

typedef struct infer_ctx {
    http_request *http;
    osp_server *core;
    char *model;
    int64_t version;
    uint64_t start_ns;
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
    jbuf header;
    bool header_parsed;
    bool json_too_large; /* more header bytes than the limit; not kept */

    /* raw body */
    osp_buffer *raw_buf; /* exact size when the length is known */
    size_t raw_len;      /* bytes in raw_buf */
    jbuf raw_grow;       /* otherwise */
    bool raw_too_large;

    /* the request being built and its binary inputs */
    osp_infer_request *request;
    blob *blobs;
    size_t n_blobs;
    size_t cur_blob;
    uint64_t extra_bytes;       /* after the last blob */
    uint64_t reserved;          /* bytes the blobs so far need from the body */
    osp_error *deferred;        /* header error, reported after blob checks */
    size_t deferred_blobs;      /* blobs before the failing part */
    bool deferred_after_inputs; /* the error is in outputs */

    /* outputs */
    bool default_binary;
    output_choice *outputs;
    size_t n_outputs;

    osp_infer_response *response;

    /* this request's trace when sampled (owned; ended in infer_ctx_free) */
    osp_trace *trace;
} infer_ctx;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void infer_ctx_free(void *p) {
    infer_ctx *ctx = p;
    if (!ctx)
        return;
    if (ctx->trace) {
        /* The connection is done with the response (or the request ended
         * without one). */
        if (osp_trace_stamped(ctx->trace, OSP_TRACE_HTTP_SEND_START))
            osp_trace_stamp(ctx->trace, OSP_TRACE_HTTP_SEND_END, now_ns());
        osp_trace_end(ctx->trace);
    }
    free(ctx->model);
    free(ctx->ihcl_text);
    jbuf_free(&ctx->header);
    osp_buffer_free(ctx->raw_buf);
    jbuf_free(&ctx->raw_grow);
    osp_infer_request_free(ctx->request);
    for (size_t i = 0; i < ctx->n_blobs; i++)
        free(ctx->blobs[i].name);
    free(ctx->blobs);
    osp_error_free(ctx->deferred);
    for (size_t i = 0; i < ctx->n_outputs; i++)
        free(ctx->outputs[i].name);
    free(ctx->outputs);
    osp_infer_response_free(ctx->response);
    free(ctx);
}

static osp_error *oom(void) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of memory");
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
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "Raw input has a byte_size (%llu bytes) that exceeds "
                         "the maximum allowed value of %zu bytes. Use "
                         "--http-max-input-size to increase the limit.",
                         (unsigned long long)n, max);
}

/* ---- building the request from the JSON header ---- */

static osp_error *add_param(osp_infer_request *req, const char *key,
                            osp_parameter_type type, const void *value) {
    osp_parameter p;
    memset(&p, 0, sizeof p);
    p.key = (char *)key;
    p.type = type;
    switch (type) {
    case OSP_PARAM_STRING:
        p.value.s = (char *)value;
        break;
    case OSP_PARAM_INT:
        p.value.i = *(const int64_t *)value;
        break;
    case OSP_PARAM_BOOL:
        p.value.b = *(const bool *)value;
        break;
    case OSP_PARAM_DOUBLE:
        p.value.d = *(const double *)value;
        break;
    }
    return osp_infer_request_add_parameter(req, &p);
}

/* Request-level "parameters", as Triton's ParseJsonTritonParams. */
static osp_error *parse_request_parameters(infer_ctx *ctx,
                                           struct json_object *params) {
    osp_infer_request *req = ctx->request;
    osp_error *err = NULL;
    if (!json_object_is_type(params, json_type_object))
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "failed to get request params.: attempt to "
                             "access JSON non-object as object");
    json_object_object_foreach(params, key, v) {
        if (strcmp(key, "sequence_id") == 0) {
            uint64_t u;
            const char *s;
            if (json_is_uint64(v)) {
                u = json_object_get_uint64(v);
                int64_t i = (int64_t)u;
                err = add_param(req, key, OSP_PARAM_INT, &i);
            } else if (!(err = json_as_string(v, &s, NULL))) {
                err = add_param(req, key, OSP_PARAM_STRING, s);
            } else {
                err = osp_error_wrap(err, "Unable to parse 'sequence_id'");
            }
        } else if (strcmp(key, "sequence_start") == 0 ||
                   strcmp(key, "sequence_end") == 0) {
            bool b;
            err = json_as_bool(v, &b);
            if (err)
                err = osp_error_wrap(err, "Unable to parse '%s'", key);
            else
                err = add_param(req, key, OSP_PARAM_BOOL, &b);
        } else if (strcmp(key, "priority") == 0) {
            err = json_as_uint(v, &req->priority);
            if (err)
                err = osp_error_wrap(err, "Unable to parse 'priority'");
        } else if (strcmp(key, "timeout") == 0) {
            err = json_as_uint(v, &req->timeout_us);
            if (err)
                err = osp_error_wrap(err, "Unable to parse 'timeout'");
        } else if (strcmp(key, "binary_data_output") == 0) {
            err = json_as_bool(v, &ctx->default_binary);
            if (err)
                err =
                    osp_error_wrap(err, "Unable to parse 'binary_data_output'");
        } else if (strncmp(key, "triton_", 7) == 0) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "parameter keys starting with 'triton_' are "
                                "reserved for Triton usage and should not be "
                                "specified.");
        } else if (json_object_is_type(v, json_type_string)) {
            err = add_param(req, key, OSP_PARAM_STRING,
                            json_object_get_string(v));
        } else if (json_is_int64(v)) {
            int64_t i = json_object_get_int64(v);
            err = add_param(req, key, OSP_PARAM_INT, &i);
        } else if (json_object_is_type(v, json_type_boolean)) {
            bool b = json_object_get_boolean(v);
            err = add_param(req, key, OSP_PARAM_BOOL, &b);
        } else if (json_object_is_type(v, json_type_double) ||
                   json_object_is_type(v, json_type_int)) {
            double d;
            json_as_double(v, &d);
            err = add_param(req, key, OSP_PARAM_DOUBLE, &d);
        } else {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "parameter '%s' has invalid type. It should be "
                                "either 'int', 'bool', or 'string'.",
                                key);
        }
        if (err)
            return err;
    }
    return NULL;
}

static osp_error *validate_content_type(struct json_object *in) {
    struct json_object *params = json_member(in, "parameters");
    bool has_data = json_find(in, "data", NULL);
    bool has_binary = json_find(params, "binary_data_size", NULL);
    bool has_shm = json_find(params, "shared_memory_region", NULL);
    int set = has_data + has_binary + has_shm;
    if (set == 1)
        return NULL;
    if (set == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Input must set only one of the following "
                             "fields: 'data', 'binary_data_size' in "
                             "'parameters', 'shared_memory_region' in "
                             "'parameters'. But no field is set");
    return osp_error_new(
        OSP_ERROR_INVALID_ARG,
        "Input must set only one of the following fields: "
        "'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But set%s%s%s",
        has_data ? " 'data'" : "", has_binary ? " 'binary_data_size'" : "",
        has_shm ? " 'shared_memory_region'" : "");
}

/* Triton's ShapeToString of the dims as int64: "[a,b]". */
static void format_dims(const uint64_t *dims, size_t n, char *buf, size_t cap) {
    size_t off = 0;
    off += (size_t)snprintf(buf + off, cap - off, "[");
    for (size_t i = 0; i < n && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld", i ? "," : "",
                                (long long)(int64_t)dims[i]);
    if (off < cap)
        snprintf(buf + off, cap - off, "]");
}

/* Bytes of the body that can still hold blobs, or UINT64_MAX when not
 * known (chunked identity bodies, which Triton does not limit). */
static uint64_t blob_capacity(const infer_ctx *ctx) {
    uint64_t total;
    if (ctx->length_known)
        total = ctx->length;
    else if (ctx->compressed)
        total = ctx->max_input; /* the decompressed size is bounded */
    else
        return UINT64_MAX;
    uint64_t used = ctx->ihcl + ctx->reserved;
    return total > used ? total - used : 0;
}

static const json_span *find_span(const json_scan_info *info, size_t input) {
    for (size_t i = 0; i < info->n_spans; i++)
        if (info->spans[i].input_index == input)
            return &info->spans[i];
    return NULL;
}

/* Adds a binary input: its buffer is allocated now and filled by on_body. */
static osp_error *add_binary_input(infer_ctx *ctx, const char *name,
                                   osp_datatype dt, const osp_shape *shape,
                                   uint64_t size) {
    osp_buffer *buf = NULL;
    osp_error *err;
    bool fits = size <= blob_capacity(ctx);
    /* A blob the body cannot contain is only counted; the size check at
     * the end reports it. */
    err =
        osp_server_alloc_input_buffer(ctx->core, fits ? (size_t)size : 0, &buf);
    if (err)
        return err;
    if ((err =
             osp_infer_request_add_input(ctx->request, name, dt, shape, buf))) {
        osp_buffer_free(buf);
        return err;
    }
    if (size == 0)
        return NULL; /* an empty buffer; consumes nothing */
    blob *grown = realloc(ctx->blobs, (ctx->n_blobs + 1) * sizeof *grown);
    if (!grown)
        return oom();
    ctx->blobs = grown;
    blob *b = &ctx->blobs[ctx->n_blobs];
    memset(b, 0, sizeof *b);
    if (!(b->name = strdup(name)))
        return oom();
    b->size = size;
    b->dst = fits ? buf->data : NULL;
    ctx->n_blobs++;
    ctx->reserved += size;
    return NULL;
}

static osp_error *add_json_input(infer_ctx *ctx, const char *name,
                                 osp_datatype dt, const osp_shape *shape,
                                 const uint64_t *dims, size_t rank,
                                 const char *text, const json_span *span) {
    osp_error *err = NULL;
    osp_buffer *buf = NULL;
    int64_t count;
    char dims_text[512];
    if (!osp_shape_element_count(shape, &count)) {
        format_dims(dims, rank, dims_text, sizeof dims_text);
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "invalid shape for input '%s': shape %s causes "
                             "total element count to exceed maximum size of "
                             "%lld",
                             name, dims_text, (long long)INT64_MAX);
    }
    if (count == 0) {
        /* 'data' is not read at all */
        if ((err = osp_server_alloc_input_buffer(ctx->core, 0, &buf)))
            return err;
        goto add;
    }
    const char *data = span ? text + span->start : "[]";
    size_t data_len = span ? span->end - span->start : 2;
    if (data[0] != '[')
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "Unable to parse 'data': attempt to access JSON "
                             "non-array as array");
    uint64_t byte_size;
    if (dt == OSP_TYPE_BYTES) {
        size_t n;
        if ((err = json_tensor_bytes_size(data, data_len, &n)))
            return err;
        byte_size = n;
    } else {
        uint64_t es = osp_datatype_byte_size(dt);
        if (es > 1 && (uint64_t)count > (uint64_t)INT64_MAX / es)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "byte size overflow for input '%s': element "
                                 "count (%lld) * data type size (%llu) exceeds "
                                 "maximum allowed size (%lld)",
                                 name, (long long)count, (unsigned long long)es,
                                 (long long)INT64_MAX);
        byte_size = (uint64_t)count * es;
    }
    if (byte_size > ctx->max_input)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "JSON input '%s' has a byte_size (%llu bytes) that "
            "exceeds the maximum allowed value of %zu bytes. "
            "Use --http-max-input-size to increase the limit.",
            name, (unsigned long long)byte_size, ctx->max_input);
    if (dt == OSP_TYPE_FP16 || dt == OSP_TYPE_BF16)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "receiving %s data via JSON is not supported. "
                             "Please use the binary data format for input %s",
                             dt == OSP_TYPE_FP16 ? "FP16" : "BF16", name);
    if (dt == OSP_TYPE_INVALID)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "invalid datatype for input %s", name);
    if ((err =
             osp_server_alloc_input_buffer(ctx->core, (size_t)byte_size, &buf)))
        return err;
    err = json_tensor_decode(data, data_len, dt,
                             dt == OSP_TYPE_BYTES ? (int64_t)byte_size : count,
                             buf->data);
    if (err) {
        osp_buffer_free(buf);
        return err;
    }
add:
    if ((err = osp_infer_request_add_input(ctx->request, name, dt, shape, buf)))
        osp_buffer_free(buf);
    return err;
}

static osp_error *parse_input(infer_ctx *ctx, struct json_object *in,
                              size_t index, const char *text,
                              const json_scan_info *info) {
    osp_error *err;
    if ((err = validate_content_type(in)))
        return err;
    const char *name, *datatype;
    if ((err = json_member_string(in, "name", &name, NULL)))
        return osp_error_wrap(err, "Unable to parse 'name'");
    if ((err = json_member_string(in, "datatype", &datatype, NULL)))
        return osp_error_wrap(err, "Unable to parse 'datatype'");
    osp_datatype dt = osp_datatype_from_wire_name(datatype);
    struct json_object *shape_json;
    if ((err = json_member_array(in, "shape", &shape_json)))
        return osp_error_wrap(err, "Unable to parse 'shape'");
    size_t rank = json_object_array_length(shape_json);
    uint64_t dims[OSP_MAX_DIMS];
    osp_shape shape = {0};
    for (size_t d = 0; d < rank; d++) {
        uint64_t v;
        err = json_as_uint(json_object_array_get_idx(shape_json, d), &v);
        if (err)
            return osp_error_wrap(err, "Unable to parse 'shape'");
        if (d >= OSP_MAX_DIMS)
            continue;
        dims[d] = v;
        shape.dims[d] = (int64_t)v;
    }
    if (rank > OSP_MAX_DIMS)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "input '%s' has %zu dimensions, more than the "
                             "maximum of %d",
                             name, rank, OSP_MAX_DIMS);
    shape.rank = (int)rank;
    for (size_t d = 0; d < rank; d++) {
        if (shape.dims[d] < 0) {
            char dims_text[512];
            format_dims(dims, rank, dims_text, sizeof dims_text);
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "invalid shape for input '%s': shape %s "
                                 "contains one or more invalid dimensions",
                                 name, dims_text);
        }
    }

    struct json_object *params = json_member(in, "parameters");
    struct json_object *bds;
    if (json_find(params, "binary_data_size", &bds)) {
        uint64_t size;
        if ((err = json_as_uint(bds, &size)))
            return osp_error_wrap(err, "Unable to parse 'binary_data_size'");
        return add_binary_input(ctx, name, dt, &shape, size);
    }
    if (json_find(params, "shared_memory_region", NULL))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "input '%s': shared memory is not supported",
                             name);
    return add_json_input(ctx, name, dt, &shape, dims, rank, text,
                          find_span(info, index));
}

static osp_error *parse_output(infer_ctx *ctx, struct json_object *out) {
    osp_error *err;
    struct json_object *params = json_member(out, "parameters");
    bool has_shm = json_find(params, "shared_memory_region", NULL);
    struct json_object *cls, *bin;
    bool has_cls = json_find(params, "classification", &cls);
    bool has_bin = json_find(params, "binary_data", &bin);
    if (has_shm) {
        if (has_cls)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Output can't set both 'shared_memory_region' "
                                 "and 'classification'");
        if (has_bin) {
            bool b;
            if ((err = json_as_bool(bin, &b)))
                return osp_error_wrap(err, "Unable to set 'binary_data'");
            if (b)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "Output can't set both "
                                     "'shared_memory_region' and "
                                     "'binary_data'");
        }
    }
    const char *name;
    if ((err = json_member_string(out, "name", &name, NULL)))
        return osp_error_wrap(err, "Unable to parse 'name'");
    uint64_t class_count = 0;
    if (has_cls && (err = json_as_uint(cls, &class_count)))
        return osp_error_wrap(err, "Unable to set 'classification'");
    if (class_count > UINT32_MAX) /* more than any output has elements */
        class_count = UINT32_MAX;
    if ((err = osp_infer_request_add_output_classified(ctx->request, name,
                                                       (uint32_t)class_count)))
        return err;
    if (has_shm)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "output '%s': shared memory is not supported",
                             name);
    bool binary = false;
    if (has_bin && (err = json_as_bool(bin, &binary)))
        return osp_error_wrap(err, "Unable to parse 'binary_data'");
    output_choice *grown =
        realloc(ctx->outputs, (ctx->n_outputs + 1) * sizeof *grown);
    if (!grown)
        return oom();
    ctx->outputs = grown;
    if (!(grown[ctx->n_outputs].name = strdup(name)))
        return oom();
    grown[ctx->n_outputs++].binary = binary;
    return NULL;
}

/* Parses the complete JSON header into ctx->request. A failure is kept in
 * ctx->deferred together with how many blobs precede it. */
static void parse_header(infer_ctx *ctx) {
    osp_error *err = NULL;
    struct json_object *root = NULL;
    json_scan_info info = {0};
    info.want_data_spans = true;
    ctx->header_parsed = true;
    if (!jbuf_reserve(&ctx->header, 1)) {
        err = oom();
        goto out;
    }
    const char *text = ctx->header.data ? ctx->header.data : "";
    if (ctx->header.data)
        ctx->header.data[ctx->header.len] = '\0';
    size_t len = ctx->header.len;

    if ((err = json_scan(text, len, &info)))
        goto out;
    if ((err = json_parse(text, len, info.max_depth, info.spans, info.n_spans,
                          &root)))
        goto out;
    if (!(ctx->request = osp_infer_request_new(ctx->model, ctx->version))) {
        err = oom();
        goto out;
    }
    struct json_object *id;
    if (json_find(root, "id", &id)) {
        const char *s;
        if ((err = json_as_string(id, &s, NULL))) {
            err = osp_error_wrap(err, "Unable to parse 'id'");
            goto out;
        }
        if ((err = osp_infer_request_set_id(ctx->request, s)))
            goto out;
    }
    struct json_object *params;
    if (json_find(root, "parameters", &params) &&
        (err = parse_request_parameters(ctx, params)))
        goto out;
    struct json_object *inputs;
    if ((err = json_member_array(root, "inputs", &inputs))) {
        err = osp_error_wrap(err, "Unable to parse 'inputs'");
        goto out;
    }
    size_t n_inputs = json_object_array_length(inputs);
    for (size_t i = 0; i < n_inputs; i++) {
        err = parse_input(ctx, json_object_array_get_idx(inputs, i), i, text,
                          &info);
        if (err)
            goto out;
    }
    ctx->deferred_after_inputs = true;
    struct json_object *outputs;
    if (json_find(root, "outputs", &outputs)) {
        if ((err = json_as_array(outputs))) {
            err = osp_error_wrap(err, "Unable to parse 'outputs'");
            goto out;
        }
        size_t n = json_object_array_length(outputs);
        for (size_t i = 0; i < n; i++) {
            err = parse_output(ctx, json_object_array_get_idx(outputs, i));
            if (err)
                goto out;
        }
    }
out:
    if (err) {
        ctx->deferred = err;
        ctx->deferred_blobs = ctx->n_blobs;
        /* The request and its buffers go now; the remaining body bytes
         * are only counted. */
        osp_infer_request_free(ctx->request);
        ctx->request = NULL;
        for (size_t i = 0; i < ctx->n_blobs; i++)
            ctx->blobs[i].dst = NULL;
    }
    /* The header text is not needed any more. */
    jbuf_free(&ctx->header);
    json_free(root);
    free(info.spans);
}

/* ---- body ---- */

static void feed_blobs(infer_ctx *ctx, const char *data, size_t len) {
    while (len > 0 && ctx->cur_blob < ctx->n_blobs) {
        blob *b = &ctx->blobs[ctx->cur_blob];
        uint64_t want = b->size - b->filled;
        size_t take = want < len ? (size_t)want : len;
        if (b->dst)
            memcpy(b->dst + b->filled, data, take);
        b->filled += take;
        data += take;
        len -= take;
        if (b->filled == b->size)
            ctx->cur_blob++;
    }
    ctx->extra_bytes += len;
}

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
            jbuf_free(&ctx->raw_grow);
            return NULL;
        }
        jbuf_put(&ctx->raw_grow, data, len);
        return ctx->raw_grow.oom ? oom() : NULL;
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
                jbuf_free(&ctx->header);
            } else {
                jbuf_put(&ctx->header, data, take);
                if (ctx->header.oom)
                    return oom();
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
    feed_blobs(ctx, data, len);
    return NULL;
}

/* ---- completion ---- */

static void infer_done(osp_infer_response *response, void *user) {
    infer_ctx *ctx = user;
    ctx->response = response;
    http_request_resume(ctx->http);
}

/* The first binary input (of the first n) that is missing bytes. */
static osp_error *check_blobs(const infer_ctx *ctx, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const blob *b = &ctx->blobs[i];
        if (b->filled < b->size)
            return osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "unexpected size for input '%s', expecting "
                "%llu additional bytes for model '%s'",
                b->name, (unsigned long long)(b->size - b->filled), ctx->model);
    }
    return NULL;
}

static osp_error *additional_data_error(const infer_ctx *ctx) {
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "unexpected additional input data for model '%s'",
                         ctx->model);
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
        jbuf_free(&ctx->raw_grow);
    }
    ctx->request = osp_infer_request_new(ctx->model, ctx->version);
    if (!ctx->request) {
        osp_buffer_free(buf);
        return oom();
    }
    osp_error *err = osp_infer_request_set_raw_input(ctx->request, buf);
    if (err) {
        osp_buffer_free(buf);
        return err;
    }
    ctx->default_binary = true;
    return NULL;
}

static osp_error *infer_on_complete(http_request *http) {
    infer_ctx *ctx = http_request_handler_ctx(http);
    osp_error *err;
    if (ctx->trace)
        osp_trace_stamp(ctx->trace, OSP_TRACE_HTTP_RECV_END, now_ns());
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
        if (ctx->deferred) {
            if ((err = check_blobs(ctx, ctx->deferred_blobs)))
                return err;
            if (ctx->deferred_after_inputs && ctx->extra_bytes > 0)
                return additional_data_error(ctx);
            err = ctx->deferred;
            ctx->deferred = NULL;
            return err;
        }
        if ((err = check_blobs(ctx, ctx->n_blobs)))
            return err;
        if (ctx->extra_bytes > 0)
            return additional_data_error(ctx);
    }

    osp_infer_request *request = ctx->request;
    ctx->request = NULL;
    request->receive_start_ns = ctx->start_ns;
    request->trace = ctx->trace; /* lent to the core */
    http_request_begin_async(http);
    err = osp_server_infer_async(ctx->core, request, infer_done, ctx);
    if (err) {
        http_request_resume(http); /* the callback will not run */
        return err;
    }
    return NULL;
}

/* ---- response ---- */

typedef struct response_payload {
    char *json;
    osp_buffer **buffers;
    size_t n_buffers;
} response_payload;

static void response_payload_free(void *p) {
    response_payload *pl = p;
    if (!pl)
        return;
    free(pl->json);
    for (size_t i = 0; i < pl->n_buffers; i++)
        osp_buffer_free(pl->buffers[i]);
    free(pl->buffers);
    free(pl);
}

static bool output_is_binary(const infer_ctx *ctx, const char *name) {
    for (size_t i = 0; i < ctx->n_outputs; i++)
        if (strcmp(ctx->outputs[i].name, name) == 0)
            return ctx->outputs[i].binary;
    return ctx->default_binary;
}

static void write_response_parameters(jbuf *b, const osp_infer_response *r) {
    jbuf_puts(b, ",\"parameters\":{");
    for (size_t i = 0; i < r->n_parameters; i++) {
        const osp_parameter *p = &r->parameters[i];
        if (i)
            jbuf_putc(b, ',');
        jbuf_json_cstr(b, p->key);
        jbuf_putc(b, ':');
        switch (p->type) {
        case OSP_PARAM_STRING:
            jbuf_json_cstr(b, p->value.s ? p->value.s : "");
            break;
        case OSP_PARAM_INT:
            jbuf_json_int(b, p->value.i);
            break;
        case OSP_PARAM_BOOL:
            jbuf_json_bool(b, p->value.b);
            break;
        case OSP_PARAM_DOUBLE:
            jbuf_json_double(b, p->value.d);
            break;
        }
    }
    jbuf_putc(b, '}');
}

/* Builds the reply from ctx->response: JSON header, then the binary
 * outputs in output order, sent from their buffers without a copy. */
static osp_error *infer_on_resume(http_request *http) {
    infer_ctx *ctx = http_request_handler_ctx(http);
    if (ctx->trace)
        osp_trace_stamp(ctx->trace, OSP_TRACE_HTTP_SEND_START, now_ns());
    osp_infer_response *r = ctx->response;
    osp_error *err = NULL;
    if (!r)
        return osp_error_new(OSP_ERROR_INTERNAL, "no inference response");
    if (r->error) {
        err = r->error;
        r->error = NULL;
        return err;
    }
    response_payload *pl = calloc(1, sizeof *pl);
    http_part *parts = calloc(r->n_outputs + 1, sizeof *parts);
    if (!pl || !parts ||
        !(pl->buffers =
              calloc(r->n_outputs ? r->n_outputs : 1, sizeof *pl->buffers))) {
        err = oom();
        goto out;
    }
    size_t n_parts = 1;
    jbuf b;
    jbuf_init(&b);
    if (r->id && r->id[0]) {
        jbuf_puts(&b, "{\"id\":");
        jbuf_json_cstr(&b, r->id);
        jbuf_puts(&b, ",\"model_name\":");
    } else {
        jbuf_puts(&b, "{\"model_name\":");
    }
    jbuf_json_cstr(&b, r->model_name ? r->model_name : ctx->model);
    jbuf_printf(&b, ",\"model_version\":\"%lld\"", (long long)r->model_version);
    if (r->n_parameters > 0)
        write_response_parameters(&b, r);
    jbuf_puts(&b, ",\"outputs\":[");
    for (size_t i = 0; i < r->n_outputs; i++) {
        osp_infer_output *o = &r->outputs[i];
        if (i)
            jbuf_putc(&b, ',');
        jbuf_puts(&b, "{\"name\":");
        jbuf_json_cstr(&b, o->name);
        jbuf_puts(&b, ",\"datatype\":");
        jbuf_json_cstr(&b, osp_datatype_wire_name(o->dtype));
        jbuf_puts(&b, ",\"shape\":[");
        for (int d = 0; d < o->shape.rank; d++) {
            if (d)
                jbuf_putc(&b, ',');
            jbuf_json_int(&b, o->shape.dims[d]);
        }
        jbuf_putc(&b, ']');
        size_t size = o->data ? o->byte_size : 0;
        if (output_is_binary(ctx, o->name)) {
            jbuf_printf(&b, ",\"parameters\":{\"binary_data_size\":%zu}}",
                        size);
            if (size > 0) {
                osp_buffer *buf = osp_infer_response_take_output(r, i);
                pl->buffers[pl->n_buffers++] = buf;
                parts[n_parts].base = buf->data;
                parts[n_parts].len = size;
                n_parts++;
            }
            continue;
        }
        int64_t count;
        if (!osp_shape_element_count(&o->shape, &count)) {
            err = osp_error_new(OSP_ERROR_INTERNAL,
                                "invalid shape for output '%s'", o->name);
            jbuf_free(&b);
            goto out;
        }
        jbuf_puts(&b, ",\"data\":");
        err = json_tensor_encode(&b, o->name, o->dtype,
                                 o->data ? o->data->data : NULL, size, count);
        if (err) {
            jbuf_free(&b);
            goto out;
        }
        jbuf_putc(&b, '}');
    }
    jbuf_puts(&b, "]}");
    size_t json_len;
    pl->json = jbuf_take(&b, &json_len);
    if (!pl->json) {
        err = oom();
        goto out;
    }
    parts[0].base = pl->json;
    parts[0].len = json_len;

    bool binary = pl->n_buffers > 0;
    const char *content_type =
        binary ? "application/octet-stream" : "application/json";
    if (binary) {
        char ihcl[32];
        snprintf(ihcl, sizeof ihcl, "%zu", json_len);
        http_reply_header(http, "Inference-Header-Content-Length", ihcl);
    }
    http_encoding enc =
        http_accept_encoding(http_request_header(http, "Accept-Encoding"));
    if (enc != HTTP_ENCODING_IDENTITY) {
        char *z;
        size_t z_len;
        osp_error *zerr = http_compress(enc, parts, n_parts, &z, &z_len);
        if (!zerr) {
            http_reply_header(http, "Content-Encoding",
                              http_encoding_name(enc));
            http_reply(http, 200, content_type, z, z_len);
            goto out; /* pl is freed below */
        }
        /* As Triton: send identity when compression fails. */
        OSP_LOG_VERBOSE("unable to compress response: %s",
                        osp_error_message(zerr));
        osp_error_free(zerr);
    }
    http_reply_parts(http, 200, content_type, parts, n_parts,
                     response_payload_free, pl);
    pl = NULL;
out:
    response_payload_free(pl);
    free(parts);
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
    osp_server *core = http_request_core(http);
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
        err = oom();
        goto fail;
    }
    ctx->http = http;
    ctx->core = core;
    ctx->version = v;
    ctx->start_ns = now_ns();
    ctx->max_input = http_request_max_input_size(http);
    ctx->trace = osp_tracer_sample(http_request_tracer(http), name);
    if (ctx->trace)
        osp_trace_stamp(ctx->trace, OSP_TRACE_HTTP_RECV_START, ctx->start_ns);
    jbuf_init(&ctx->header);
    jbuf_init(&ctx->raw_grow);
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
            http_request_fail(http, oom());
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
            jbuf_reserve(&ctx->header, (size_t)expect + 1);
        else if (!ctx->has_ihcl && ctx->length_known && expect > ctx->max_input)
            ctx->json_too_large = true;
    }
    return;

fail:
    infer_ctx_free(ctx);
    http_reply_error(http, err);
}
