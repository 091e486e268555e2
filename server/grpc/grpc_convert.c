/*
 * The gRPC inference codec (see grpc_convert.h).
 */
#include "grpc_convert.h"

#include <inttypes.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "kserve_params.h"

static osp_error *parse_error(void) {
    return osp_error_new(OSP_ERROR_INTERNAL, KGRPC_PARSE_ERROR);
}

/* ---- protobuf-c with a memory budget ---- */

/* protobuf-c allocates per field while unpacking; a message of tiny
 * repeated submessages could otherwise expand a hundredfold. The budget
 * bounds the bytes live at once (a free is credited back with the
 * block's usable size: protobuf-c frees its scan tables after each
 * submessage; the blocks are plain malloc, so callers free the message
 * with the default allocator) and fails the unpack once it is spent. It grows
 * with the message, never with an element count: ten million one-byte
 * bytes_contents elements (30 MB on the wire) decode, as on Triton. */
typedef struct budget {
    size_t left;
    bool exceeded;
} budget;

static void *budget_alloc(void *data, size_t size) {
    budget *b = data;
    if (size > b->left) {
        b->exceeded = true;
        return NULL;
    }
    void *p = malloc(size);
    size_t got = p ? malloc_usable_size(p) : 0;
    if (got > b->left) {
        free(p);
        b->exceeded = true;
        return NULL;
    }
    b->left -= got;
    return p;
}

static void budget_free(void *data, void *ptr) {
    budget *b = data;
    b->left += malloc_usable_size(ptr);
    free(ptr);
}

/* Live unpacked memory allowed for `len` bytes of message. The worst
 * valid expansion is an empty repeated element: 2 bytes on the wire, a
 * 32-byte scan entry (in tables that double), its value slot and
 * malloc's rounding: under 64 bytes per wire byte. A floor covers small
 * messages. */
static size_t unpack_budget(size_t len) {
    size_t cap = (size_t)1 << 56;
    return len > cap / 64 ? cap : len * 64 + 65536;
}

/* UTF-8 as proto3 `string` fields must hold it (C++ protobuf refuses a
 * message whose string field does not): no overlong forms, no
 * surrogates, nothing past U+10FFFF. */
static bool utf8_valid(const char *text) {
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        unsigned c = *s;
        size_t n;
        unsigned min;
        if (c < 0x80) {
            s++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        for (size_t i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80)
                return false;
            c = (c << 6) | (s[i] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return false;
        s += n + 1;
    }
    return true;
}

/* Every `string` field of m (borrowed), nested messages and map entries
 * included, is valid UTF-8. protobuf-c copies a string's bytes without
 * looking at them; Triton's runtime refuses such a message as unparsable. */
static bool strings_valid(const ProtobufCMessage *m) {
    const ProtobufCMessageDescriptor *desc = m->descriptor;
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &desc->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING &&
            f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *at = (const char *)m + f->offset;
        void *const *values = (void *const *)at;
        size_t n = 1;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)((const char *)m + f->quantifier_offset);
            values = *(void *const *const *)at;
        } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which =
                *(const uint32_t *)((const char *)m + f->quantifier_offset);
            if (which != f->id)
                continue;
        }
        for (size_t k = 0; k < n; k++) {
            if (!values[k])
                continue;
            if (f->type == PROTOBUF_C_TYPE_STRING ? !utf8_valid(values[k])
                                                  : !strings_valid(values[k]))
                return false;
        }
    }
    return true;
}

ProtobufCMessage *kgrpc_unpack_bounded(const ProtobufCMessageDescriptor *desc,
                                       const uint8_t *data, size_t len,
                                       bool *too_large) {
    budget b = {.left = unpack_budget(len)};
    ProtobufCAllocator allocator = {budget_alloc, budget_free, &b};
    ProtobufCMessage *m = protobuf_c_message_unpack(
        desc, &allocator, len, data ? data : (const uint8_t *)"");
    *too_large = !m && b.exceeded;
    if (m && !strings_valid(m)) {
        protobuf_c_message_free_unpacked(m, &allocator);
        return NULL;
    }
    return m;
}

/* ---- decoded request ---- */

void kgrpc_decoded_init(kgrpc_decoded *d) {
    memset(d, 0, sizeof *d);
}

void kgrpc_decoded_destroy(kgrpc_decoded *d) {
    osp_infer_request_free(d->request);
    d->request = NULL;
    free(d->model_name);
    free(d->model_version);
    free(d->id);
    d->model_name = d->model_version = d->id = NULL;
    for (size_t i = 0; i < d->n_shm_inputs; i++)
        kserve_shm_region_release(d->shm_inputs[i]);
    free(d->shm_inputs);
    d->shm_inputs = NULL;
    d->n_shm_inputs = 0;
    for (size_t i = 0; i < d->n_shm_outputs; i++) {
        free(d->shm_outputs[i].name);
        kserve_shm_region_release(d->shm_outputs[i].region);
    }
    free(d->shm_outputs);
    d->shm_outputs = NULL;
    d->n_shm_outputs = 0;
}

/* ---- parameters ---- */

typedef Inference__InferParameter param_t;

/* The value of `key` in a generated map field (entries with ->key and
 * ->value; every InferParameter map has that shape), or NULL. */
#define FIND_PARAM(entries, n, key_)                                           \
    ({                                                                         \
        const param_t *found_ = NULL;                                          \
        for (size_t i_ = 0; i_ < (n) && !found_; i_++)                         \
            if ((entries)[i_]->key && strcmp((entries)[i_]->key, (key_)) == 0) \
                found_ = (entries)[i_]->value;                                 \
        found_;                                                                \
    })

static bool param_is(const param_t *p,
                     Inference__InferParameter__ParameterChoiceCase c) {
    return p && p->parameter_choice_case == c;
}

#define PARAM_BOOL INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM
#define PARAM_INT64 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM
#define PARAM_STRING INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM
#define PARAM_DOUBLE INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM
#define PARAM_UINT64 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM

static osp_error *add_param(osp_infer_request *req, const char *key,
                            osp_parameter_type type, const param_t *v) {
    osp_parameter p;
    memset(&p, 0, sizeof p);
    p.key = (char *)key;
    p.type = type;
    switch (type) {
    case OSP_PARAM_STRING:
        p.value.s = v->string_param ? v->string_param : (char *)"";
        break;
    case OSP_PARAM_INT:
        p.value.i = v->int64_param;
        break;
    case OSP_PARAM_BOOL:
        p.value.b = v->bool_param;
        break;
    case OSP_PARAM_DOUBLE:
        p.value.d = v->double_param;
        break;
    }
    return osp_infer_request_add_parameter(req, &p);
}

/* Request-level parameters, as Triton's SetInferenceRequestMetadata. */
static osp_error *
apply_request_parameters(osp_infer_request *req,
                         const Inference__ModelInferRequest *m) {
    for (size_t i = 0; i < m->n_parameters; i++) {
        const char *key = m->parameters[i]->key ? m->parameters[i]->key : "";
        const param_t *v = m->parameters[i]->value;
        static const param_t unset = INFERENCE__INFER_PARAMETER__INIT;
        if (!v)
            v = &unset;
        osp_error *err = NULL;
        if (strcmp(key, "sequence_id") == 0) {
            if (param_is(v, PARAM_INT64))
                err = add_param(req, key, OSP_PARAM_INT, v);
            else if (param_is(v, PARAM_STRING))
                err = add_param(req, key, OSP_PARAM_STRING, v);
            else
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "invalid value type for 'sequence_id' "
                                    "parameter, expected int64_param or "
                                    "string_param.");
        } else if (strcmp(key, "sequence_start") == 0 ||
                   strcmp(key, "sequence_end") == 0) {
            if (!param_is(v, PARAM_BOOL))
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "invalid value type for '%s' parameter, "
                                    "expected bool_param.",
                                    key);
            else
                err = add_param(req, key, OSP_PARAM_BOOL, v);
        } else if (strcmp(key, "priority") == 0) {
            if (param_is(v, PARAM_INT64)) {
                if (v->int64_param < 0)
                    err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                        "invalid value for 'priority', "
                                        "expected value >= 0.");
                else
                    req->priority = (uint64_t)v->int64_param;
            } else if (param_is(v, PARAM_UINT64)) {
                req->priority = v->uint64_param;
            } else {
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "invalid value type for 'priority' "
                                    "parameter, expected int64_param or "
                                    "uint64_param.");
            }
        } else if (strcmp(key, "timeout") == 0) {
            if (!param_is(v, PARAM_INT64))
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "invalid value type for 'timeout' "
                                    "parameter, expected int64_param.");
            else
                req->timeout_us = (uint64_t)v->int64_param; /* as Triton */
        } else if (strncmp(key, "triton_", 7) == 0) {
            if (strcmp(key, "triton_enable_empty_final_response") != 0)
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "parameter keys starting with 'triton_' "
                                    "are reserved for Triton usage. Only the "
                                    "following keys starting with 'triton_' "
                                    "are allowed: "
                                    "triton_enable_empty_final_response");
            else if (!param_is(v, PARAM_BOOL))
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "invalid value type for '%s' parameter, "
                                    "expected bool_param.",
                                    key);
            /* read by read_empty_final_flag */
        } else if (param_is(v, PARAM_INT64)) {
            err = add_param(req, key, OSP_PARAM_INT, v);
        } else if (param_is(v, PARAM_BOOL)) {
            err = add_param(req, key, OSP_PARAM_BOOL, v);
        } else if (param_is(v, PARAM_STRING)) {
            err = add_param(req, key, OSP_PARAM_STRING, v);
        } else if (param_is(v, PARAM_DOUBLE)) {
            err = add_param(req, key, OSP_PARAM_DOUBLE, v);
        } else {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "invalid value type for '%s' parameter, "
                                "expected int64_param, bool_param, or "
                                "string_param.",
                                key);
        }
        if (err)
            return err;
    }
    return NULL;
}

/* Whether the request asks for Triton's empty final response of a
 * decoupled model (its type was checked by apply_request_parameters). */
static osp_error *read_empty_final_flag(const Inference__ModelInferRequest *m,
                                        kgrpc_decoded *d) {
    for (size_t i = 0; i < m->n_parameters; i++) {
        const param_t *v = m->parameters[i]->value;
        if (m->parameters[i]->key && v &&
            strcmp(m->parameters[i]->key,
                   "triton_enable_empty_final_response") == 0)
            d->empty_final_response = v->bool_param;
    }
    return NULL;
}

/* Triton's ParseSharedMemoryParams of a tensor's parameter map. */
typedef struct shm_params {
    bool present;
    const char *region;
    int64_t offset;
    int64_t byte_size;
} shm_params;

#define PARSE_SHM_PARAMS(tensor_, name_, out_)                                 \
    parse_shm_params(                                                          \
        FIND_PARAM((tensor_)->parameters, (tensor_)->n_parameters,             \
                   "shared_memory_region"),                                    \
        FIND_PARAM((tensor_)->parameters, (tensor_)->n_parameters,             \
                   "shared_memory_offset"),                                    \
        FIND_PARAM((tensor_)->parameters, (tensor_)->n_parameters,             \
                   "shared_memory_byte_size"),                                 \
        (name_), (out_))

/* The three shared memory parameters of a tensor (each NULL when
 * absent). */
static osp_error *parse_shm_params(const param_t *region_v,
                                   const param_t *offset_v,
                                   const param_t *size_v, const char *tensor,
                                   shm_params *out) {
    memset(out, 0, sizeof *out);
    const param_t *v = region_v;
    if (v) {
        out->present = true;
        if (!param_is(v, PARAM_STRING))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "invalid value type for "
                                 "'shared_memory_region' parameter for tensor "
                                 "'%s', expected string_param.",
                                 tensor);
        out->region = v->string_param ? v->string_param : "";
    }
    if ((v = offset_v)) {
        if (!out->present)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "'shared_memory_offset' can not be specified "
                                 "without 'shared_memory_region' parameter "
                                 "for tensor '%s'",
                                 tensor);
        if (!param_is(v, PARAM_INT64))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "invalid value type for "
                                 "'shared_memory_offset' parameter for tensor "
                                 "'%s', expected int64_param.",
                                 tensor);
        out->offset = v->int64_param;
    }
    if ((v = size_v)) {
        if (!out->present)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "'shared_memory_byte_size' can not be "
                                 "specified without 'shared_memory_region' "
                                 "parameter for tensor '%s'",
                                 tensor);
        if (!param_is(v, PARAM_INT64))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "invalid value type for "
                                 "'shared_memory_byte_size' parameter for "
                                 "tensor '%s', expected int64_param.",
                                 tensor);
        out->byte_size = v->int64_param;
    } else if (out->present) {
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "'shared_memory_byte_size' must be specified "
                             "along with 'shared_memory_region' parameter for "
                             "tensor '%s'",
                             tensor);
    }
    return NULL;
}

/* A use of the region the parameters name, and the address of its bytes. */
static osp_error *acquire_region(const kgrpc_decode_env *env,
                                 const shm_params *sp,
                                 kserve_shm_region **region, void **addr) {
    if (!env->shm)
        return osp_error_new(OSP_ERROR_NOT_FOUND,
                             "Unable to find shared memory region: '%s'",
                             sp->region);
    /* Triton reads both as int64 and converts to size_t. */
    return kserve_shm_acquire(env->shm, sp->region, (uint64_t)sp->offset,
                              (uint64_t)sp->byte_size, region, addr);
}

/* ---- input data ---- */

/* The bytes of one input, before they get a buffer: either a span of
 * the message (raw), a region (shared memory) or converted contents. */
typedef struct input_data {
    const kgrpc_message *m;
    kgrpc_span raw;
    bool is_raw;
    const kserve_shm_region *region; /* bytes are in this region */
    const void *bytes;               /* contents or region bytes */
    size_t size;
    uint8_t *owned; /* converted contents (freed by the caller) */
} input_data;

/* Triton's InferGRPCToInputHelper: one typed field per tensor, of the
 * tensor's own datatype. */
static osp_error *check_contents_type(const char *input, const char *model,
                                      osp_datatype field_type,
                                      osp_datatype input_type,
                                      size_t size_so_far) {
    if (size_so_far != 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "unexpected explicit tensor data for input "
                             "tensor '%s' for model '%s', binary data was "
                             "already supplied.",
                             input, model);
    if (field_type != input_type)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "unexpected explicit tensor data for input "
                             "tensor '%s' for model '%s' of type '%s', "
                             "expected datatype '%s'",
                             input, model, osp_datatype_wire_name(field_type),
                             osp_datatype_wire_name(input_type));
    return NULL;
}

/* Packs n elements of `width` bytes (the low bytes of each src element of
 * src_width bytes, little-endian) into a new buffer in *out. */
static osp_error *pack_elements(input_data *out, const void *src, size_t n,
                                size_t src_width, size_t width) {
    if (n > SIZE_MAX / width)
        return osp_error_out_of_memory();
    uint8_t *dst = malloc(n > 0 ? n * width : 1);
    if (!dst)
        return osp_error_out_of_memory();
    const uint8_t *s = src;
    for (size_t i = 0; i < n; i++)
        memcpy(dst + i * width, s + i * src_width, width);
    free(out->owned);
    out->owned = dst;
    out->bytes = dst;
    out->size = n * width;
    return NULL;
}

/* Converts the typed contents of input `in` into *out, field by field in
 * Triton's order. */
static osp_error *
convert_contents(const Inference__ModelInferRequest__InferInputTensor *in,
                 osp_datatype dt, const char *model, input_data *out) {
    const Inference__InferTensorContents *c = in->contents;
    const char *name = in->name ? in->name : "";
    osp_error *err;
    out->bytes = NULL;
    out->size = 0;
    if (c->n_bool_contents) {
        if ((err = check_contents_type(name, model, OSP_TYPE_BOOL, dt,
                                       out->size)))
            return err;
        if (!(out->owned = malloc(c->n_bool_contents)))
            return osp_error_out_of_memory();
        for (size_t i = 0; i < c->n_bool_contents; i++)
            out->owned[i] = c->bool_contents[i] ? 1 : 0;
        out->bytes = out->owned;
        out->size = c->n_bool_contents;
    }
    if (c->n_int_contents) {
        osp_datatype field = dt == OSP_TYPE_INT8    ? OSP_TYPE_INT8
                             : dt == OSP_TYPE_INT16 ? OSP_TYPE_INT16
                                                    : OSP_TYPE_INT32;
        if ((err = check_contents_type(name, model, field, dt, out->size)) ||
            (err = pack_elements(out, c->int_contents, c->n_int_contents, 4,
                                 osp_datatype_byte_size(field))))
            return err;
    }
    if (c->n_int64_contents) {
        if ((err = check_contents_type(name, model, OSP_TYPE_INT64, dt,
                                       out->size)))
            return err;
        out->bytes = c->int64_contents;
        out->size = c->n_int64_contents * 8;
    }
    if (c->n_uint_contents) {
        osp_datatype field = dt == OSP_TYPE_UINT8    ? OSP_TYPE_UINT8
                             : dt == OSP_TYPE_UINT16 ? OSP_TYPE_UINT16
                                                     : OSP_TYPE_UINT32;
        if ((err = check_contents_type(name, model, field, dt, out->size)) ||
            (err = pack_elements(out, c->uint_contents, c->n_uint_contents, 4,
                                 osp_datatype_byte_size(field))))
            return err;
    }
    if (c->n_uint64_contents) {
        if ((err = check_contents_type(name, model, OSP_TYPE_UINT64, dt,
                                       out->size)))
            return err;
        out->bytes = c->uint64_contents;
        out->size = c->n_uint64_contents * 8;
    }
    if (c->n_fp32_contents) {
        if ((err = check_contents_type(name, model, OSP_TYPE_FP32, dt,
                                       out->size)))
            return err;
        out->bytes = c->fp32_contents;
        out->size = c->n_fp32_contents * 4;
    }
    if (c->n_fp64_contents) {
        if ((err = check_contents_type(name, model, OSP_TYPE_FP64, dt,
                                       out->size)))
            return err;
        out->bytes = c->fp64_contents;
        out->size = c->n_fp64_contents * 8;
    }
    if (c->n_bytes_contents) {
        if ((err = check_contents_type(name, model, OSP_TYPE_BYTES, dt,
                                       out->size)))
            return err;
        size_t total = 0;
        for (size_t i = 0; i < c->n_bytes_contents; i++) {
            if (c->bytes_contents[i].len > UINT32_MAX)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "element %zu of input '%s' is longer "
                                     "than 4 GiB",
                                     i, name);
            total += 4 + c->bytes_contents[i].len;
        }
        uint8_t *dst = malloc(total ? total : 1);
        if (!dst)
            return osp_error_out_of_memory();
        size_t at = 0;
        for (size_t i = 0; i < c->n_bytes_contents; i++) {
            uint32_t len = (uint32_t)c->bytes_contents[i].len;
            memcpy(dst + at, &len, 4); /* little-endian hosts only */
            if (len)
                memcpy(dst + at + 4, c->bytes_contents[i].data, len);
            at += 4 + len;
        }
        free(out->owned);
        out->owned = dst;
        out->bytes = dst;
        out->size = total;
    }
    return NULL;
}

/* Gives the input its buffer, with its bytes copied in once. */
static osp_error *input_buffer(const kgrpc_decode_env *env,
                               const input_data *in, osp_buffer **out) {
    size_t size = in->is_raw ? in->raw.len : in->size;
    osp_error *err = env->alloc(env->alloc_ctx, size, out);
    if (err)
        return err;
    if (in->is_raw)
        kgrpc_message_copy(in->m, in->raw, (*out)->data);
    else if (in->region && size)
        err = kserve_shm_read(in->region, in->bytes, (*out)->data, size);
    else if (size)
        memcpy((*out)->data, in->bytes, size);
    if (err) {
        osp_buffer_free(*out);
        *out = NULL;
    }
    return err;
}

static bool push_region(kserve_shm_region ***list, size_t *n,
                        kserve_shm_region *r) {
    kserve_shm_region **grown = realloc(*list, (*n + 1) * sizeof *grown);
    if (!grown)
        return false;
    grown[(*n)++] = r;
    *list = grown;
    return true;
}

static osp_error *add_inputs(const Inference__ModelInferRequest *m,
                             const kgrpc_message *msg, const kgrpc_span *raw,
                             size_t n_raw, const kgrpc_decode_env *env,
                             kgrpc_decoded *d) {
    const char *model = d->model_name;
    size_t raw_index = 0;
    for (size_t i = 0; i < m->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *in = m->inputs[i];
        const char *name = in->name ? in->name : "";
        osp_datatype dt =
            osp_datatype_from_wire_name(in->datatype ? in->datatype : "");
        osp_shape shape = {0};
        if (in->n_shape > OSP_MAX_DIMS)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "input '%s' for model '%s' has %zu "
                                 "dimensions; at most %d are supported",
                                 name, model, in->n_shape, OSP_MAX_DIMS);
        /* A negative dimension goes on to the core, which answers it with
         * Triton's words once the shape has met the model's. */
        for (size_t k = 0; k < in->n_shape; k++)
            shape.dims[shape.rank++] = in->shape[k];
        shm_params sp;
        osp_error *err = PARSE_SHM_PARAMS(in, name, &sp);
        if (err)
            return err;
        input_data data = {.m = msg};
        if (sp.present) {
            if (in->contents)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "unexpected 'content' provided when "
                                     "using shared memory for input tensor "
                                     "'%s' for model '%s'",
                                     name, model);
            kserve_shm_region *region = NULL;
            void *addr = NULL;
            if ((err = acquire_region(env, &sp, &region, &addr)))
                return err;
            if (!push_region(&d->shm_inputs, &d->n_shm_inputs, region)) {
                kserve_shm_region_release(region);
                return osp_error_out_of_memory();
            }
            data.region = region;
            data.bytes = addr;
            data.size = (size_t)sp.byte_size;
        } else if (in->contents && n_raw > 0) {
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "contents field must not be specified when "
                                 "using raw_input_contents for '%s' for "
                                 "model '%s'",
                                 name, model);
        } else if (in->contents) {
            if ((err = convert_contents(in, dt, model, &data))) {
                free(data.owned);
                return err;
            }
        } else if (raw_index < n_raw) {
            data.is_raw = true;
            data.raw = raw[raw_index++];
        } else {
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unable to find data for input tensor '%s' "
                                 "for model '%s' in request.",
                                 name, model);
        }
        osp_buffer *buf = NULL;
        err = input_buffer(env, &data, &buf);
        free(data.owned);
        if (err)
            return err;
        if ((err = osp_infer_request_add_input(d->request, name, dt, &shape,
                                               buf))) {
            osp_buffer_free(buf);
            return err;
        }
    }
    return NULL;
}

static osp_error *add_outputs(const Inference__ModelInferRequest *m,
                              const kgrpc_decode_env *env, kgrpc_decoded *d) {
    for (size_t i = 0; i < m->n_outputs; i++) {
        const Inference__ModelInferRequest__InferRequestedOutputTensor *o =
            m->outputs[i];
        const char *name = o->name ? o->name : "";
        shm_params sp;
        osp_error *err = PARSE_SHM_PARAMS(o, name, &sp);
        if (err)
            return err;
        uint32_t classes = 0;
        const param_t *c =
            FIND_PARAM(o->parameters, o->n_parameters, "classification");
        if (c) {
            if (!param_is(c, PARAM_INT64))
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "invalid value type for 'classification' "
                                     "parameter, expected int64_param");
            if (c->int64_param <= 0)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "invalid value for 'classification' "
                                     "parameter, expected >= 0");
            classes = (uint32_t)c->int64_param;
            if (sp.present)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "output can't set both "
                                     "'shared_memory_region' and "
                                     "'classification'");
        }
        /* An output named twice is refused, as current Triton refuses it
         * (qa/L0_grpc's test_duplicate_output_names_rejected; Triton 2.51
         * answered it once); checked before a region is taken. */
        for (size_t k = 0; k < d->request->n_outputs; k++)
            if (strcmp(d->request->outputs[k], name) == 0)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "output '%s' already exists in request",
                                     name);
        if (sp.present) {
            kgrpc_output_shm shm = {0};
            if ((err = acquire_region(env, &sp, &shm.region, &shm.addr)))
                return err;
            shm.byte_size = (uint64_t)sp.byte_size;
            kgrpc_output_shm *grown =
                realloc(d->shm_outputs, (d->n_shm_outputs + 1) * sizeof *grown);
            if (!grown || !(shm.name = strdup(name))) {
                if (grown)
                    d->shm_outputs = grown;
                kserve_shm_region_release(shm.region);
                return osp_error_out_of_memory();
            }
            grown[d->n_shm_outputs++] = shm;
            d->shm_outputs = grown;
        }
        if ((err = osp_infer_request_add_output_classified(d->request, name,
                                                           classes)))
            return err;
    }
    return NULL;
}

osp_error *kgrpc_decode_infer_request(const kgrpc_message *msg,
                                      const kgrpc_decode_env *env,
                                      kgrpc_decoded *d) {
    uint8_t *rest = NULL;
    size_t rest_len = 0;
    kgrpc_span *raw = NULL;
    size_t n_raw = 0;
    bool split_oom = false;
    Inference__ModelInferRequest *m = NULL;
    osp_error *err = NULL;
    budget b = {.left = unpack_budget(msg->total)};
    ProtobufCAllocator allocator = {budget_alloc, budget_free, &b};

    if (!kgrpc_split_infer_request(msg, &rest, &rest_len, &raw, &n_raw,
                                   &split_oom))
        return split_oom ? osp_error_out_of_memory() : parse_error();
    m = inference__model_infer_request__unpack(&allocator, rest_len,
                                               rest ? rest : (uint8_t *)"");
    if (!m) {
        err = b.exceeded ? osp_error_new_reason(
                               OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
                               "request message of %zu bytes needs more "
                               "than %zu bytes once decoded",
                               msg->total, unpack_budget(msg->total))
                         : parse_error();
        goto out;
    }
    if (!strings_valid(&m->base)) {
        err = parse_error();
        goto out;
    }
    d->model_name = strdup(m->model_name ? m->model_name : "");
    d->model_version = strdup(m->model_version ? m->model_version : "");
    d->id = strdup(m->id ? m->id : "");
    if (!d->model_name || !d->model_version || !d->id) {
        err = osp_error_out_of_memory();
        goto out;
    }
    int64_t version;
    if ((err = kserve_parse_version(d->model_version, &version)))
        goto out;
    if (!(d->request = osp_infer_request_new(d->model_name, version))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if ((err = osp_infer_request_set_id(d->request, d->id)) ||
        (err = apply_request_parameters(d->request, m)) ||
        (err = read_empty_final_flag(m, d)) ||
        (err = add_inputs(m, msg, raw, n_raw, env, d)) ||
        (err = add_outputs(m, env, d)))
        goto out;
out:
    if (err) {
        osp_infer_request_free(d->request);
        d->request = NULL;
    }
    if (m)
        inference__model_infer_request__free_unpacked(m, &allocator);
    free(rest);
    free(raw);
    return err;
}

/* ---- responses ---- */

void kgrpc_encoded_destroy(kgrpc_encoded *e) {
    for (size_t i = 0; i < e->n_parts; i++) {
        osp_buffer_free(e->parts[i].buffer);
        free(e->parts[i].heap);
    }
    free(e->parts);
    memset(e, 0, sizeof *e);
}

static const kgrpc_output_shm *output_shm(const kgrpc_decoded *d,
                                          const char *name) {
    for (size_t i = 0; d && i < d->n_shm_outputs; i++)
        if (strcmp(d->shm_outputs[i].name, name) == 0)
            return &d->shm_outputs[i];
    return NULL;
}

/* Fills p (an unpacked InferParameter) from an osp parameter. */
static void set_infer_parameter(param_t *p, const osp_parameter *src) {
    switch (src->type) {
    case OSP_PARAM_STRING:
        p->parameter_choice_case = PARAM_STRING;
        p->string_param = src->value.s ? src->value.s : (char *)"";
        break;
    case OSP_PARAM_INT:
        p->parameter_choice_case = PARAM_INT64;
        p->int64_param = src->value.i;
        break;
    case OSP_PARAM_BOOL:
        p->parameter_choice_case = PARAM_BOOL;
        p->bool_param = src->value.b;
        break;
    case OSP_PARAM_DOUBLE:
        p->parameter_choice_case = PARAM_DOUBLE;
        p->double_param = src->value.d;
        break;
    }
}

/* The response's metadata (everything but raw_output_contents) packed
 * into a new buffer after `reserve` free bytes at its front. */
static uint8_t *pack_response_header(const osp_infer_response *r,
                                     const kgrpc_decoded *d, bool stream,
                                     bool final, size_t reserve, size_t *len) {
    Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    size_t n_out = r->n_outputs, n_params = r->n_parameters + (stream ? 1 : 0);
    uint8_t *packed = NULL;
    char version[24];
    Inference__ModelInferResponse__InferOutputTensor *outs =
        calloc(n_out ? n_out : 1, sizeof *outs);
    Inference__ModelInferResponse__InferOutputTensor **out_ptrs =
        calloc(n_out ? n_out : 1, sizeof *out_ptrs);
    Inference__ModelInferResponse__ParametersEntry *entries =
        calloc(n_params ? n_params : 1, sizeof *entries);
    Inference__ModelInferResponse__ParametersEntry **entry_ptrs =
        calloc(n_params ? n_params : 1, sizeof *entry_ptrs);
    param_t *values = calloc(n_params ? n_params : 1, sizeof *values);
    int64_t *shapes = calloc(n_out ? n_out * OSP_MAX_DIMS : 1, sizeof *shapes);
    if (!outs || !out_ptrs || !entries || !entry_ptrs || !values || !shapes)
        goto out;
    snprintf(version, sizeof version, "%" PRId64, r->model_version);
    resp.model_name = r->model_name && r->model_name[0] ? r->model_name
                      : d && d->model_name              ? d->model_name
                                                        : (char *)"";
    resp.model_version = version;
    resp.id = r->id ? r->id : (char *)"";
    for (size_t i = 0; i < n_out; i++) {
        const osp_infer_output *o = &r->outputs[i];
        inference__model_infer_response__infer_output_tensor__init(&outs[i]);
        outs[i].name = o->name;
        outs[i].datatype = (char *)osp_datatype_wire_name(o->dtype);
        outs[i].n_shape = (size_t)o->shape.rank;
        outs[i].shape = shapes + i * OSP_MAX_DIMS;
        for (int k = 0; k < o->shape.rank; k++)
            outs[i].shape[k] = o->shape.dims[k];
        out_ptrs[i] = &outs[i];
    }
    resp.n_outputs = n_out;
    resp.outputs = out_ptrs;
    for (size_t i = 0; i < n_params; i++) {
        inference__model_infer_response__parameters_entry__init(&entries[i]);
        inference__infer_parameter__init(&values[i]);
        if (i < r->n_parameters) {
            entries[i].key = r->parameters[i].key;
            set_infer_parameter(&values[i], &r->parameters[i]);
        } else {
            entries[i].key = (char *)"triton_final_response";
            values[i].parameter_choice_case = PARAM_BOOL;
            values[i].bool_param = final;
        }
        entries[i].value = &values[i];
        entry_ptrs[i] = &entries[i];
    }
    resp.n_parameters = n_params;
    resp.parameters = entry_ptrs;
    *len = inference__model_infer_response__get_packed_size(&resp);
    if ((packed = malloc(reserve + *len + 1)))
        inference__model_infer_response__pack(&resp, packed + reserve);
out:
    free(outs);
    free(out_ptrs);
    free(entries);
    free(entry_ptrs);
    free(values);
    free(shapes);
    return packed;
}

osp_error *kgrpc_encode_infer_response(osp_infer_response *r,
                                       const kgrpc_decoded *d, bool stream,
                                       bool final, kgrpc_encoded *out) {
    kgrpc_encoded e = {0};
    osp_error *err = NULL;
    size_t n = r->n_outputs;
    /* per output: its prefix and its data */
    if (!(e.parts = calloc(1 + 2 * n, sizeof *e.parts)))
        return osp_error_out_of_memory();
    size_t raw_total = 0;
    size_t *sizes = calloc(n ? n : 1, sizeof *sizes);
    if (!sizes) {
        err = osp_error_out_of_memory();
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        const osp_infer_output *o = &r->outputs[i];
        const kgrpc_output_shm *shm = output_shm(d, o->name);
        if (shm) {
            if (shm->byte_size < o->byte_size) {
                err = osp_error_new(OSP_ERROR_INTERNAL,
                                    "shared memory size specified with the "
                                    "request for output '%s' (%" PRIu64
                                    " bytes) should be at least %zu bytes to "
                                    "hold the results",
                                    o->name, shm->byte_size, o->byte_size);
                goto fail;
            }
            if (o->byte_size && o->data &&
                (err = kserve_shm_write(shm->region, shm->addr, o->data->data,
                                        o->byte_size)))
                goto fail;
            sizes[i] = 0;
        } else {
            sizes[i] = o->data ? o->byte_size : 0;
        }
        raw_total += 1 + kgrpc_varint_size(sizes[i]) + sizes[i];
    }
    size_t header_len = 0;
    /* The stream wrapper's key and length go in front of the header; its
     * length needs the header's, so measure with no reserve first. */
    size_t reserve = stream ? 1 + 10 : 0;
    uint8_t *header = pack_response_header(r, d, stream, final, reserve,
                                           &header_len);
    if (!header) {
        err = osp_error_out_of_memory();
        goto fail;
    }
    size_t front = 0;
    if (stream) {
        uint8_t prefix[16];
        front = kgrpc_put_length_prefix(prefix, KGRPC_STREAM_RESPONSE_FIELD,
                                        header_len + raw_total);
        memcpy(header + reserve - front, prefix, front);
    }
    e.parts[0] = (kgrpc_part){header + reserve - front, front + header_len,
                              NULL, header};
    e.n_parts = 1;
    e.total = front + header_len + raw_total;
    for (size_t i = 0; i < n; i++) {
        uint8_t *prefix = malloc(16);
        if (!prefix) {
            err = osp_error_out_of_memory();
            goto fail;
        }
        size_t plen = kgrpc_put_length_prefix(
            prefix, KGRPC_INFER_RESPONSE_RAW_FIELD, sizes[i]);
        e.parts[e.n_parts++] = (kgrpc_part){prefix, plen, NULL, prefix};
        if (sizes[i]) {
            osp_buffer *buf = osp_infer_response_take_output(r, i);
            e.parts[e.n_parts++] = (kgrpc_part){buf->data, sizes[i], buf, NULL};
        }
    }
    free(sizes);
    *out = e;
    return NULL;
fail:
    free(sizes);
    kgrpc_encoded_destroy(&e);
    return err;
}

uint8_t *kgrpc_encode_stream_error(const char *message, const char *id,
                                   const char *model, const char *version,
                                   int final, size_t *len) {
    Inference__ModelStreamInferResponse s =
        INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    Inference__ModelInferResponse__ParametersEntry entry =
        INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    Inference__ModelInferResponse__ParametersEntry *entries[1] = {&entry};
    param_t value = INFERENCE__INFER_PARAMETER__INIT;
    r.id = (char *)(id ? id : "");
    r.model_name = (char *)(model ? model : "");
    r.model_version = (char *)(version ? version : "");
    if (final >= 0) {
        entry.key = (char *)"triton_final_response";
        value.parameter_choice_case = PARAM_BOOL;
        value.bool_param = final > 0;
        entry.value = &value;
        r.n_parameters = 1;
        r.parameters = entries;
    }
    s.error_message = (char *)(message ? message : "");
    s.infer_response = &r;
    *len = inference__model_stream_infer_response__get_packed_size(&s);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (buf)
        inference__model_stream_infer_response__pack(&s, buf);
    return buf;
}
