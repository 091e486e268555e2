/*
 * Triton's generate extension as JSON, without a transport (Triton's
 * ConvertGenerateRequest / ConvertGenerateResponse with their default
 * schema); server/http/kserve_generate.c serves it.
 *
 * Request: each top-level member, in document order and repeated keys
 * included, is
 *  - "parameters": an object whose members are mapped the same way;
 *  - a model input: a scalar or a list becomes a tensor of the input's
 *    datatype (strings for BYTES), shaped from the model metadata's shape:
 *    fixed dimensions divide the element count, the innermost variable one
 *    takes what remains and other variable ones are 1;
 *  - anything else: a request parameter (string, int, bool or double).
 * "id" also names the request, as for infer.
 *
 * Response: one object whose members are sorted by name as Triton's
 * std::map sorts them: every output (a flat list, or the bare value when
 * it has one element), "model_name", "model_version", "id" when the
 * request had one, and the response parameters.
 */
#include "kserve_generate_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_tensor.h"
#include "json_util.h"
#include "kserve_codec.h"
#include "kserve_params.h"

/* One decode: the model's config (borrowed), the request being built and
 * the expanded input bytes so far, bounded by max_input. */
typedef struct generate_decoder {
    osp_server *core;
    const osp_model_config *config;
    size_t max_input;
    size_t consumed;
    osp_infer_request *request;
} generate_decoder;

/* ---- request ---- */

/* The model input named `name`, or NULL. */
static const osp_model_io *find_input(const generate_decoder *ctx,
                                      const char *name) {
    const osp_model_config *cfg = ctx->config;
    for (size_t i = 0; i < cfg->n_inputs; i++)
        if (strcmp(cfg->inputs[i].name, name) == 0)
            return &cfg->inputs[i];
    return NULL;
}


/* A non-input member as a request parameter, with Triton's
 * SetTritonParameterFromJsonParameter rules (v borrowed). */
static osp_error *add_parameter(generate_decoder *ctx, const char *key,
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
static osp_error *add_tensor(generate_decoder *ctx, const osp_model_io *io,
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

    const osp_model_config *cfg = ctx->config;
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
static osp_error *map_member(generate_decoder *ctx, const char *key,
                             struct json_object *v, const char *text,
                             size_t len) {
    const osp_model_io *io = find_input(ctx, key);
    if (io)
        return add_tensor(ctx, io, text, len);
    return add_parameter(ctx, key, v);
}

/* The reserved "parameters" object: its members map as top-level ones. */
static osp_error *map_parameters(generate_decoder *ctx, struct json_object *v) {
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

/* Decodes the body (Triton's order: parse, "id", then the members). */
osp_error *kserve_generate_request_decode(osp_server *core,
                                          const osp_model_config *config,
                                          const char *model_name,
                                          int64_t version, const char *text,
                                          size_t len, size_t max_input,
                                          osp_infer_request **out) {
    generate_decoder decoder = {.core = core,
                                .config = config,
                                .max_input = max_input};
    generate_decoder *ctx = &decoder;
    osp_error *err = NULL;
    struct json_object *root = NULL;
    json_member_span *members = NULL;
    size_t n_members = 0;
    *out = NULL;
    if ((err = json_parse_body(text, len, &root)))
        goto out;
    if (!(ctx->request = osp_infer_request_new(model_name, version))) {
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
    if (err)
        osp_infer_request_free(ctx->request);
    else
        *out = ctx->request;
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
static osp_error *write_output(bytebuf *b, const osp_infer_output *o) {
    int64_t count;
    if (!osp_shape_element_count(&o->shape, &count))
        return osp_error_new(OSP_ERROR_INTERNAL, "output shape overflow");
    bytebuf tmp;
    bytebuf_init(&tmp);
    osp_error *err =
        json_tensor_encode(&tmp, o->name, o->dtype,
                           o->data ? o->data->data : NULL, o->byte_size, count);
    if (!err && tmp.oom)
        err = osp_error_out_of_memory();
    if (!err) {
        if (count == 1 && tmp.len >= 2) /* strip the list of one */
            bytebuf_put(b, tmp.data + 1, tmp.len - 2);
        else
            bytebuf_put(b, tmp.data, tmp.len);
    }
    bytebuf_free(&tmp);
    return err;
}

/* The response object (Triton's member order: sorted by name; a name that
 * repeats keeps its first kind, as std::map::emplace does). */
osp_error *kserve_generate_response_encode(bytebuf *b,
                                          const osp_infer_response *r) {
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
    bytebuf_putc(b, '{');
    bool first = true;
    for (size_t i = 0; i < n && !err; i++) {
        if (i > 0 && strcmp(fields[i].name, fields[i - 1].name) == 0)
            continue;
        if (!first)
            bytebuf_putc(b, ',');
        first = false;
        json_write_cstr(b, fields[i].name);
        bytebuf_putc(b, ':');
        const field *f = &fields[i];
        if (f->kind == FIELD_TEXT) {
            json_write_cstr(b, f->text);
        } else if (f->kind == FIELD_OUTPUT) {
            err = write_output(b, &r->outputs[f->index]);
        } else {
            kserve_write_parameter_value(b, &r->parameters[f->index]);
        }
    }
    bytebuf_putc(b, '}');
    free(fields);
    if (!err && b->oom)
        err = osp_error_out_of_memory();
    return err;
}
