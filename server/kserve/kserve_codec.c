/*
 * The KServe v2 inference codec (see kserve_codec.h): the JSON request
 * header to an osp_infer_request (Triton's HTTPAPIServer request parsing,
 * with its messages and order of checks), binary input blobs into their
 * final buffers, and the response as a JSON header plus binary parts.
 */
#include "kserve_codec.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_doc.h"
#include "json_tensor.h"
#include "json_util.h"
#include "osprey/log.h"

/* ---- request header ---- */

/* One kserve_decode_header call: what it fills and where buffers come
 * from (all borrowed). */
typedef struct decoder {
    kserve_decoded *d;
    osp_server *core;
    const kserve_decode_limits *limits;
} decoder;

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

/* ---- the header document ----
 * The header is parsed into a rapidjson-compatible document on one arena
 * (json_doc.h) instead of a json-c tree, which allocated every node and key
 * and freed them one by one: ~45,000 instructions of a small request. The
 * helpers keep the json-c reading the decoder was written against: a
 * repeated key means its last value, and an integer is integer-typed when
 * it fits 64 bits. Messages are json_util's. */

/* The last member of obj named key, or NULL (also when obj is not an
 * object). */
static const tj_value *member(const tj_value *obj, const char *key) {
    if (!obj || obj->type != TJ_OBJECT)
        return NULL;
    size_t key_len = strlen(key);
    const tj_value *found = NULL;
    for (uint32_t i = 0; i < obj->n; i++) {
        const tj_member *m = &obj->u.members[i];
        if (m->name.n == key_len && memcmp(m->name.u.s, key, key_len) == 0)
            found = &m->value;
    }
    return found;
}

static osp_error *member_required(const tj_value *obj, const char *key,
                                  const tj_value **out) {
    if (!(*out = member(obj, key)))
        return osp_error_new(
            OSP_ERROR_INTERNAL,
            "attempt to access non-existing object member '%s'", key);
    return NULL;
}

static bool is_int64(const tj_value *v) {
    return v->type == TJ_NUMBER && (v->num & TJ_NUM_INT64);
}

static bool is_uint64(const tj_value *v) {
    return v->type == TJ_NUMBER && (v->num & TJ_NUM_UINT64);
}

static uint64_t get_uint64(const tj_value *v) {
    return (v->num & TJ_NUM_INT64) ? (uint64_t)v->u.i : v->u.u;
}

static osp_error *as_string(const tj_value *v, const char **s) {
    if (v->type != TJ_STRING)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "attempt to access JSON non-string as string");
    *s = v->u.s;
    return NULL;
}

static osp_error *as_uint(const tj_value *v, uint64_t *out) {
    if (!is_uint64(v))
        return osp_error_new(
            OSP_ERROR_INTERNAL,
            "attempt to access JSON non-unsigned-integer as unsigned-integer");
    *out = get_uint64(v);
    return NULL;
}

static osp_error *as_bool(const tj_value *v, bool *out) {
    if (v->type != TJ_TRUE && v->type != TJ_FALSE)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "attempt to access JSON non-boolean as boolean");
    *out = v->type == TJ_TRUE;
    return NULL;
}

static osp_error *as_array(const tj_value *v) {
    if (v->type != TJ_ARRAY)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "attempt to access JSON non-array as array");
    return NULL;
}

static osp_error *member_string(const tj_value *obj, const char *key,
                                const char **s) {
    const tj_value *v;
    osp_error *err = member_required(obj, key, &v);
    return err ? err : as_string(v, s);
}

static osp_error *member_array(const tj_value *obj, const char *key,
                               const tj_value **out) {
    osp_error *err = member_required(obj, key, out);
    return err ? err : as_array(*out);
}

/* Orders an object's members by name, then by position. */
static int compare_members(const void *a, const void *b) {
    const tj_member *x = *(const tj_member *const *)a;
    const tj_member *y = *(const tj_member *const *)b;
    size_t n = x->name.n < y->name.n ? x->name.n : y->name.n;
    int c = memcmp(x->name.u.s, y->name.u.s, n);
    if (c == 0 && x->name.n != y->name.n)
        c = x->name.n < y->name.n ? -1 : 1;
    return c ? c : (x > y) - (x < y);
}

/* The members of obj as json-c iterated them: each name once, where it
 * first occurs, with the value of its last occurrence. Sets (*value_of)[i]
 * to the index whose value member i stands for, or -1 for a repeat to
 * skip. O(n log n) for hostile objects. Caller frees *value_of. */
static osp_error *unique_members(const tj_value *obj, int64_t **value_of) {
    size_t n = obj->n;
    int64_t *map = malloc((n ? n : 1) * sizeof *map);
    const tj_member **sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!map || !sorted) {
        free(map);
        free(sorted);
        return osp_error_out_of_memory();
    }
    for (size_t i = 0; i < n; i++) {
        map[i] = -1;
        sorted[i] = &obj->u.members[i];
    }
    qsort(sorted, n, sizeof *sorted, compare_members);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && sorted[j + 1]->name.n == sorted[i]->name.n &&
               memcmp(sorted[j + 1]->name.u.s, sorted[i]->name.u.s,
                      sorted[i]->name.n) == 0)
            j++;
        map[sorted[i] - obj->u.members] = sorted[j] - obj->u.members;
        i = j + 1;
    }
    free(sorted);
    *value_of = map;
    return NULL;
}

/* Request-level "parameters", as Triton's ParseJsonTritonParams. */
static osp_error *parse_request_parameters(decoder *dec,
                                           const tj_value *params) {
    osp_infer_request *req = dec->d->request;
    osp_error *err = NULL;
    if (params->type != TJ_OBJECT)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "failed to get request params.: attempt to "
                             "access JSON non-object as object");
    int64_t *value_of = NULL;
    if ((err = unique_members(params, &value_of)))
        return err;
    for (uint32_t m = 0; m < params->n && !err; m++) {
        if (value_of[m] < 0)
            continue;
        const char *key = params->u.members[m].name.u.s;
        const tj_value *v = &params->u.members[value_of[m]].value;
        if (strcmp(key, "sequence_id") == 0) {
            const char *s = NULL;
            if (is_uint64(v)) {
                int64_t i = (int64_t)get_uint64(v);
                err = add_param(req, key, OSP_PARAM_INT, &i);
            } else if (!(err = as_string(v, &s))) {
                err = add_param(req, key, OSP_PARAM_STRING, s);
            } else {
                err = osp_error_wrap(err, "Unable to parse 'sequence_id'");
            }
        } else if (strcmp(key, "sequence_start") == 0 ||
                   strcmp(key, "sequence_end") == 0) {
            bool b = false;
            err = as_bool(v, &b);
            if (err)
                err = osp_error_wrap(err, "Unable to parse '%s'", key);
            else
                err = add_param(req, key, OSP_PARAM_BOOL, &b);
        } else if (strcmp(key, "priority") == 0) {
            err = as_uint(v, &req->priority);
            if (err)
                err = osp_error_wrap(err, "Unable to parse 'priority'");
        } else if (strcmp(key, "timeout") == 0) {
            err = as_uint(v, &req->timeout_us);
            if (err)
                err = osp_error_wrap(err, "Unable to parse 'timeout'");
        } else if (strcmp(key, "binary_data_output") == 0) {
            err = as_bool(v, &dec->d->outputs.default_binary);
            if (err)
                err =
                    osp_error_wrap(err, "Unable to parse 'binary_data_output'");
        } else if (strncmp(key, "triton_", 7) == 0) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "parameter keys starting with 'triton_' are "
                                "reserved for Triton usage and should not be "
                                "specified.");
        } else if (v->type == TJ_STRING) {
            err = add_param(req, key, OSP_PARAM_STRING, v->u.s);
        } else if (is_int64(v)) {
            int64_t i = v->u.i;
            err = add_param(req, key, OSP_PARAM_INT, &i);
        } else if (v->type == TJ_TRUE || v->type == TJ_FALSE) {
            bool b = v->type == TJ_TRUE;
            err = add_param(req, key, OSP_PARAM_BOOL, &b);
        } else if (v->type == TJ_NUMBER) {
            double d = tj_get_double(v);
            err = add_param(req, key, OSP_PARAM_DOUBLE, &d);
        } else {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "parameter '%s' has invalid type. It should be "
                                "either 'int', 'bool', or 'string'.",
                                key);
        }
    }
    free(value_of);
    return err;
}

static osp_error *validate_content_type(const tj_value *in) {
    const tj_value *params = member(in, "parameters");
    bool has_data = member(in, "data") != NULL;
    bool has_binary = member(params, "binary_data_size") != NULL;
    bool has_shm = member(params, "shared_memory_region") != NULL;
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
 * limited (chunked identity bodies, which Triton does not limit). */
static uint64_t blob_capacity(const decoder *dec) {
    const kserve_decode_limits *l = dec->limits;
    if (!l->body_limited)
        return UINT64_MAX;
    uint64_t used = l->header_bytes + dec->d->reserved;
    return l->body_bytes > used ? l->body_bytes - used : 0;
}

static const json_span *find_span(const json_scan_info *info, size_t input) {
    for (size_t i = 0; i < info->n_spans; i++)
        if (info->spans[i].input_index == input)
            return &info->spans[i];
    return NULL;
}

/* Adds a binary input: its buffer is allocated now and filled by
 * kserve_decoded_feed. A blob the body cannot hold gets an empty buffer and
 * is only counted. `name` and `shape` are borrowed. */
static osp_error *add_binary_input(decoder *dec, const char *name,
                                   osp_datatype dt, const osp_shape *shape,
                                   uint64_t size) {
    osp_buffer *buf = NULL;
    osp_error *err;
    bool fits = size <= blob_capacity(dec);
    /* A blob the body cannot contain is only counted; the size check at
     * the end reports it. */
    err =
        osp_server_alloc_input_buffer(dec->core, fits ? (size_t)size : 0, &buf);
    if (err)
        return err;
    if ((err = osp_infer_request_add_input(dec->d->request, name, dt, shape,
                                           buf))) {
        osp_buffer_free(buf);
        return err;
    }
    if (size == 0)
        return NULL; /* an empty buffer; consumes nothing */
    kserve_blob *grown =
        realloc(dec->d->blobs, (dec->d->n_blobs + 1) * sizeof *grown);
    if (!grown)
        return osp_error_out_of_memory();
    dec->d->blobs = grown;
    kserve_blob *b = &dec->d->blobs[dec->d->n_blobs];
    memset(b, 0, sizeof *b);
    if (!(b->name = strdup(name)))
        return osp_error_out_of_memory();
    b->size = size;
    b->dst = fits ? buf->data : NULL;
    dec->d->n_blobs++;
    dec->d->reserved += size;
    return NULL;
}

/* Adds an input whose values are the JSON `data` value at span (NULL: no
 * data member) of the header `text`, decoded into a new buffer. All
 * pointers borrowed. */
static osp_error *add_json_input(decoder *dec, const char *name,
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
        if ((err = osp_server_alloc_input_buffer(dec->core, 0, &buf)))
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
    if (byte_size > dec->limits->max_input)
        return osp_error_new_reason(
            OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
            "JSON input '%s' has a byte_size (%llu bytes) that "
            "exceeds the maximum allowed value of %zu bytes. "
            "Use --http-max-input-size to increase the limit.",
            name, (unsigned long long)byte_size, dec->limits->max_input);
    if (dt == OSP_TYPE_FP16 || dt == OSP_TYPE_BF16)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "receiving %s data via JSON is not supported. "
                             "Please use the binary data format for input %s",
                             dt == OSP_TYPE_FP16 ? "FP16" : "BF16", name);
    if (dt == OSP_TYPE_INVALID)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "invalid datatype for input %s", name);
    if ((err =
             osp_server_alloc_input_buffer(dec->core, (size_t)byte_size, &buf)))
        return err;
    err = json_tensor_decode(data, data_len, dt,
                             dt == OSP_TYPE_BYTES ? (int64_t)byte_size : count,
                             buf->data);
    if (err) {
        osp_buffer_free(buf);
        return err;
    }
add:
    if ((err = osp_infer_request_add_input(dec->d->request, name, dt, shape,
                                           buf)))
        osp_buffer_free(buf);
    return err;
}

/* The shared_memory_* parameters of an input or output (`params`,
 * borrowed), as Triton's CheckSharedMemoryData: offset and byte size
 * default to 0. */
static osp_error *parse_shm_params(const tj_value *params, const char **region,
                                   uint64_t *offset, uint64_t *byte_size) {
    osp_error *err;
    const tj_value *v;
    *offset = 0;
    *byte_size = 0;
    if ((v = member(params, "shared_memory_region")) &&
        (err = as_string(v, region)))
        return osp_error_wrap(err, "Unable to parse 'shared_memory_region'");
    if ((v = member(params, "shared_memory_offset")) &&
        (err = as_uint(v, offset)))
        return osp_error_wrap(err, "Unable to parse 'shared_memory_offset'");
    if ((v = member(params, "shared_memory_byte_size")) &&
        (err = as_uint(v, byte_size)))
        return osp_error_wrap(err, "Unable to parse 'shared_memory_byte_size'");
    return NULL;
}

static osp_error *shm_unsupported(const char *what, const char *name) {
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "%s '%s': shared memory is not supported", what, name);
}

/* Adds an input whose bytes are in a shared memory region: they are copied
 * once into the input's (host) buffer, from the GPU for CUDA regions; the use
 * of the region is kept in d->shm_inputs for the request's lifetime, as Triton
 * keeps it. The core checks the byte size against the tensor's. */
static osp_error *add_shm_input(decoder *dec, const char *name, osp_datatype dt,
                                const osp_shape *shape,
                                const tj_value *params) {
    osp_error *err;
    const char *region_name = NULL;
    uint64_t offset, byte_size;
    if (!dec->d->shm)
        return shm_unsupported("input", name);
    if ((err = parse_shm_params(params, &region_name, &offset, &byte_size)))
        return err;
    kserve_shm_region *region = NULL;
    void *addr;
    if ((err = kserve_shm_acquire(dec->d->shm, region_name, offset, byte_size,
                                  &region, &addr)))
        return err;
    kserve_decoded *d = dec->d;
    kserve_shm_region **held =
        realloc(d->shm_inputs, (d->n_shm_inputs + 1) * sizeof *held);
    if (!held) {
        kserve_shm_region_release(region);
        return osp_error_out_of_memory();
    }
    d->shm_inputs = held;
    held[d->n_shm_inputs++] = region;
    osp_buffer *buf = NULL;
    if ((err =
             osp_server_alloc_input_buffer(dec->core, (size_t)byte_size, &buf)))
        return err;
    if ((err = kserve_shm_read(region, addr, buf->data, (size_t)byte_size))) {
        osp_buffer_free(buf);
        return err;
    }
    if ((err = osp_infer_request_add_input(dec->d->request, name, dt, shape,
                                           buf)))
        osp_buffer_free(buf);
    return err;
}

/* Adds inputs[index] (`in`, borrowed) to the request: binary (a blob is
 * planned) or JSON data. */
static osp_error *parse_input(decoder *dec, const tj_value *in, size_t index,
                              const char *text, const json_scan_info *info) {
    osp_error *err;
    if ((err = validate_content_type(in)))
        return err;
    const char *name = NULL, *datatype = NULL;
    if ((err = member_string(in, "name", &name)))
        return osp_error_wrap(err, "Unable to parse 'name'");
    if ((err = member_string(in, "datatype", &datatype)))
        return osp_error_wrap(err, "Unable to parse 'datatype'");
    osp_datatype dt = osp_datatype_from_wire_name(datatype);
    const tj_value *shape_json;
    if ((err = member_array(in, "shape", &shape_json)))
        return osp_error_wrap(err, "Unable to parse 'shape'");
    size_t rank = shape_json->n;
    uint64_t dims[OSP_MAX_DIMS];
    osp_shape shape = {0};
    for (size_t d = 0; d < rank; d++) {
        uint64_t v = 0;
        err = as_uint(&shape_json->u.items[d], &v);
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

    const tj_value *params = member(in, "parameters");
    const tj_value *bds;
    if ((bds = member(params, "binary_data_size"))) {
        uint64_t size = 0;
        if ((err = as_uint(bds, &size)))
            return osp_error_wrap(err, "Unable to parse 'binary_data_size'");
        return add_binary_input(dec, name, dt, &shape, size);
    }
    if (member(params, "shared_memory_region"))
        return add_shm_input(dec, name, dt, &shape, params);
    return add_json_input(dec, name, dt, &shape, dims, rank, text,
                          find_span(info, index));
}

/* Adds a requested output (`out`, borrowed) and records its binary
 * choice. */
static osp_error *parse_output(decoder *dec, const tj_value *out) {
    osp_error *err;
    const tj_value *params = member(out, "parameters");
    bool has_shm = member(params, "shared_memory_region") != NULL;
    const tj_value *cls = member(params, "classification");
    const tj_value *bin = member(params, "binary_data");
    bool has_cls = cls != NULL, has_bin = bin != NULL;
    if (has_shm) {
        if (has_cls)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Output can't set both 'shared_memory_region' "
                                 "and 'classification'");
        if (has_bin) {
            bool b = false;
            if ((err = as_bool(bin, &b)))
                return osp_error_wrap(err, "Unable to set 'binary_data'");
            if (b)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "Output can't set both "
                                     "'shared_memory_region' and "
                                     "'binary_data'");
        }
    }
    const char *name = NULL;
    if ((err = member_string(out, "name", &name)))
        return osp_error_wrap(err, "Unable to parse 'name'");
    uint64_t class_count = 0;
    if (has_cls && (err = as_uint(cls, &class_count)))
        return osp_error_wrap(err, "Unable to set 'classification'");
    if (class_count > UINT32_MAX) /* more than any output has elements */
        class_count = UINT32_MAX;
    if ((err = osp_infer_request_add_output_classified(dec->d->request, name,
                                                       (uint32_t)class_count)))
        return err;
    kserve_output_choice choice = {0};
    if (has_shm) {
        /* Triton takes the region when it parses the output. */
        const char *region_name = NULL;
        uint64_t offset;
        if (!dec->d->shm)
            return shm_unsupported("output", name);
        if ((err = parse_shm_params(params, &region_name, &offset,
                                    &choice.shm_byte_size)))
            return err;
        if ((err = kserve_shm_acquire(dec->d->shm, region_name, offset,
                                      choice.shm_byte_size, &choice.shm,
                                      &choice.shm_addr)))
            return err;
    } else if (has_bin && (err = as_bool(bin, &choice.binary))) {
        return osp_error_wrap(err, "Unable to parse 'binary_data'");
    }
    kserve_output_choice *grown =
        realloc(dec->d->outputs.items, (dec->d->outputs.n + 1) * sizeof *grown);
    if (grown)
        dec->d->outputs.items = grown;
    if (!grown || !(choice.name = strdup(name))) {
        kserve_shm_region_release(choice.shm);
        return osp_error_out_of_memory();
    }
    grown[dec->d->outputs.n++] = choice;
    return NULL;
}

/* The request's "id", when there is one. */
static osp_error *request_id_from_doc(osp_infer_request *req,
                                      const tj_value *root) {
    const tj_value *id = member(root, "id");
    if (!id)
        return NULL;
    const char *s = NULL;
    osp_error *err = as_string(id, &s);
    if (err)
        return osp_error_wrap(err, "Unable to parse 'id'");
    return osp_infer_request_set_id(req, s);
}

/* Parses the complete JSON header into d->request. A failure is kept in
 * d->error together with how many blobs precede it. */
void kserve_decode_header(kserve_decoded *d, osp_server *core,
                          const char *model, int64_t version, const char *text,
                          size_t len, const kserve_decode_limits *limits) {
    decoder dec_s = {.d = d, .core = core, .limits = limits};
    decoder *dec = &dec_s;
    osp_error *err = NULL;
    tj_doc *doc = NULL;
    bytebuf pruned;
    bytebuf_init(&pruned);
    json_scan_info info = {0};
    info.want_data_spans = true;
    d->model = model;
    d->version = version;

    /* json_scan validates with rapidjson's messages and finds the data
     * arrays, which json_tensor_decode reads from the text; the document
     * gets the rest, nesting bounded as for json-c. */
    if ((err = json_scan(text, len, &info)))
        goto out;
    if (!json_prune(text, len, info.spans, info.n_spans, &pruned)) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if ((err = tj_parse(pruned.data ? pruned.data : "", pruned.len, &doc))) {
        /* json_scan accepted the text: only memory can be missing. */
        osp_error_free(err);
        err = osp_error_out_of_memory();
        goto out;
    }
    const tj_value *root = tj_doc_root(doc);
    if (!(d->request = osp_infer_request_new(model, version))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if ((err = request_id_from_doc(d->request, root)))
        goto out;
    const tj_value *params;
    if ((params = member(root, "parameters")) &&
        (err = parse_request_parameters(dec, params)))
        goto out;
    const tj_value *inputs;
    if ((err = member_array(root, "inputs", &inputs))) {
        err = osp_error_wrap(err, "Unable to parse 'inputs'");
        goto out;
    }
    for (uint32_t i = 0; i < inputs->n; i++) {
        err = parse_input(dec, &inputs->u.items[i], i, text, &info);
        if (err)
            goto out;
    }
    d->error_after_inputs = true;
    const tj_value *outputs;
    if ((outputs = member(root, "outputs"))) {
        if ((err = as_array(outputs))) {
            err = osp_error_wrap(err, "Unable to parse 'outputs'");
            goto out;
        }
        for (uint32_t i = 0; i < outputs->n; i++) {
            err = parse_output(dec, &outputs->u.items[i]);
            if (err)
                goto out;
        }
    }
out:
    if (err) {
        d->error = err;
        d->error_blobs = d->n_blobs;
        /* The request and its buffers go now; the remaining body bytes
         * are only counted. */
        osp_infer_request_free(d->request);
        d->request = NULL;
        for (size_t i = 0; i < d->n_blobs; i++)
            d->blobs[i].dst = NULL;
    }
    tj_doc_free(doc);
    bytebuf_free(&pruned);
    free(info.spans);
}

osp_error *kserve_request_id_from_json(osp_infer_request *req,
                                       struct json_object *root) {
    struct json_object *id;
    if (!json_find(root, "id", &id))
        return NULL;
    const char *s;
    osp_error *err = json_as_string(id, &s, NULL);
    if (err)
        return osp_error_wrap(err, "Unable to parse 'id'");
    return osp_infer_request_set_id(req, s);
}

void kserve_decoded_init(kserve_decoded *d) {
    memset(d, 0, sizeof *d);
}

void kserve_output_choices_destroy(kserve_output_choices *c) {
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->items[i].name);
        kserve_shm_region_release(c->items[i].shm);
    }
    free(c->items);
    memset(c, 0, sizeof *c);
}

void kserve_decoded_destroy(kserve_decoded *d) {
    if (!d)
        return;
    osp_infer_request_free(d->request);
    for (size_t i = 0; i < d->n_blobs; i++)
        free(d->blobs[i].name);
    free(d->blobs);
    osp_error_free(d->error);
    kserve_output_choices_destroy(&d->outputs);
    for (size_t i = 0; i < d->n_shm_inputs; i++)
        kserve_shm_region_release(d->shm_inputs[i]);
    free(d->shm_inputs);
    memset(d, 0, sizeof *d);
}

/* ---- binary inputs ---- */

void kserve_decoded_feed(kserve_decoded *d, const char *data, size_t len) {
    while (len > 0 && d->cur_blob < d->n_blobs) {
        kserve_blob *b = &d->blobs[d->cur_blob];
        uint64_t want = b->size - b->filled;
        size_t take = want < len ? (size_t)want : len;
        if (b->dst)
            memcpy(b->dst + b->filled, data, take);
        b->filled += take;
        data += take;
        len -= take;
        if (b->filled == b->size)
            d->cur_blob++;
    }
    d->extra_bytes += len;
}

/* The first binary input (of the first n) that is missing bytes. */
static osp_error *check_blobs(const kserve_decoded *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const kserve_blob *b = &d->blobs[i];
        if (b->filled < b->size)
            return osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "unexpected size for input '%s', expecting "
                "%llu additional bytes for model '%s'",
                b->name, (unsigned long long)(b->size - b->filled), d->model);
    }
    return NULL;
}

static osp_error *additional_data_error(const kserve_decoded *d) {
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "unexpected additional input data for model '%s'",
                         d->model);
}

osp_error *kserve_decoded_finish(kserve_decoded *d) {
    osp_error *err;
    if (d->error) {
        if ((err = check_blobs(d, d->error_blobs)))
            return err;
        if (d->error_after_inputs && d->extra_bytes > 0)
            return additional_data_error(d);
        err = d->error;
        d->error = NULL;
        return err;
    }
    if ((err = check_blobs(d, d->n_blobs)))
        return err;
    if (d->extra_bytes > 0)
        return additional_data_error(d);
    return NULL;
}

osp_infer_request *kserve_decoded_take_request(kserve_decoded *d) {
    osp_infer_request *r = d->request;
    d->request = NULL;
    return r;
}

osp_error *kserve_decode_request_body(osp_server *core, const char *model,
                                      int64_t version, const char *body,
                                      size_t body_len, size_t header_len,
                                      size_t max_input,
                                      osp_infer_request **request,
                                      kserve_output_choices *outputs) {
    osp_error *err = NULL;
    kserve_decoded d;
    kserve_decoded_init(&d);
    if (header_len > body_len)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "inference header size should be in range (0, "
                             "%zu), got: %zu",
                             body_len, header_len);
    /* json_parse needs a NUL after the header: one copy of the header. */
    char *text = malloc(header_len + 1);
    if (!text)
        return osp_error_out_of_memory();
    if (header_len)
        memcpy(text, body, header_len);
    text[header_len] = '\0';
    kserve_decode_limits limits = {
        .max_input = max_input,
        .body_limited = true,
        .body_bytes = body_len,
        .header_bytes = header_len,
    };
    kserve_decode_header(&d, core, model, version, text, header_len, &limits);
    free(text);
    kserve_decoded_feed(&d, body + header_len, body_len - header_len);
    if ((err = kserve_decoded_finish(&d)))
        goto out;
    *request = kserve_decoded_take_request(&d);
    *outputs = d.outputs;
    memset(&d.outputs, 0, sizeof d.outputs);
out:
    kserve_decoded_destroy(&d);
    return err;
}

/* ---- response ---- */

typedef struct response_payload {
    char *json;
    osp_buffer **buffers;
    size_t n_buffers;
} response_payload;

void kserve_encoded_payload_free(void *p) {
    response_payload *pl = p;
    if (!pl)
        return;
    free(pl->json);
    for (size_t i = 0; i < pl->n_buffers; i++)
        osp_buffer_free(pl->buffers[i]);
    free(pl->buffers);
    free(pl);
}

void kserve_encoded_destroy(kserve_encoded *e) {
    if (!e)
        return;
    kserve_encoded_payload_free(e->payload);
    free(e->parts);
    memset(e, 0, sizeof *e);
}

/* The choice made for output `name`, or NULL when it was not named. */
static const kserve_output_choice *find_choice(const kserve_output_choices *c,
                                               const char *name) {
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->items[i].name, name) == 0)
            return &c->items[i];
    return NULL;
}

/* Copies output o into its region (choice->shm): host or GPU memory. */
static osp_error *write_shm_output(const osp_infer_output *o,
                                   const kserve_output_choice *choice) {
    size_t size = o->data ? o->byte_size : 0;
    if (size > choice->shm_byte_size)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "shared memory size specified with the request "
                             "for output '%s' (%llu bytes) should be at least "
                             "%zu bytes to hold the results",
                             o->name, (unsigned long long)choice->shm_byte_size,
                             size);
    return kserve_shm_write(choice->shm, choice->shm_addr,
                            size ? o->data->data : NULL, size);
}

void kserve_write_parameter_value(struct bytebuf *b, const osp_parameter *p) {
    switch (p->type) {
    case OSP_PARAM_STRING:
        json_write_cstr(b, p->value.s ? p->value.s : "");
        break;
    case OSP_PARAM_INT:
        json_write_int(b, p->value.i);
        break;
    case OSP_PARAM_BOOL:
        json_write_bool(b, p->value.b);
        break;
    case OSP_PARAM_DOUBLE:
        json_write_double(b, p->value.d);
        break;
    }
}

static void write_response_parameters(bytebuf *b, const osp_infer_response *r) {
    bytebuf_puts(b, ",\"parameters\":{");
    for (size_t i = 0; i < r->n_parameters; i++) {
        const osp_parameter *p = &r->parameters[i];
        if (i)
            bytebuf_putc(b, ',');
        json_write_cstr(b, p->key);
        bytebuf_putc(b, ':');
        kserve_write_parameter_value(b, p);
    }
    bytebuf_putc(b, '}');
}

osp_error *kserve_encode_response(osp_infer_response *r, const char *model,
                                  const kserve_output_choices *choices,
                                  kserve_encoded *out) {
    osp_error *err = NULL;
    bytebuf b;
    bytebuf_init(&b);
    /* Room for the envelope and each output's name, shape and parameters
     * up front; JSON data grows it as it is written. */
    bytebuf_reserve(&b, 128 + 96 * r->n_outputs);
    response_payload *pl = calloc(1, sizeof *pl);
    kserve_part *parts = calloc(r->n_outputs + 1, sizeof *parts);
    if (!pl || !parts ||
        !(pl->buffers =
              calloc(r->n_outputs ? r->n_outputs : 1, sizeof *pl->buffers))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    size_t n_parts = 1;
    if (r->id && r->id[0]) {
        bytebuf_puts(&b, "{\"id\":");
        json_write_cstr(&b, r->id);
        bytebuf_puts(&b, ",\"model_name\":");
    } else {
        bytebuf_puts(&b, "{\"model_name\":");
    }
    json_write_cstr(&b, r->model_name ? r->model_name : model);
    /* Numbers written by hand, not bytebuf_printf: vsnprintf twice was ~2,400
     * of a small request's instructions. */
    bytebuf_puts(&b, ",\"model_version\":\"");
    json_write_int(&b, r->model_version);
    bytebuf_putc(&b, '"');
    if (r->n_parameters > 0)
        write_response_parameters(&b, r);
    bytebuf_puts(&b, ",\"outputs\":[");
    for (size_t i = 0; i < r->n_outputs; i++) {
        osp_infer_output *o = &r->outputs[i];
        if (i)
            bytebuf_putc(&b, ',');
        bytebuf_puts(&b, "{\"name\":");
        json_write_cstr(&b, o->name);
        bytebuf_puts(&b, ",\"datatype\":");
        json_write_cstr(&b, osp_datatype_wire_name(o->dtype));
        bytebuf_puts(&b, ",\"shape\":[");
        for (int d = 0; d < o->shape.rank; d++) {
            if (d)
                bytebuf_putc(&b, ',');
            json_write_int(&b, o->shape.dims[d]);
        }
        bytebuf_putc(&b, ']');
        size_t size = o->data ? o->byte_size : 0;
        const kserve_output_choice *choice = find_choice(choices, o->name);
        if (choice && choice->shm) {
            if ((err = write_shm_output(o, choice)))
                goto out;
            bytebuf_putc(&b, '}');
            continue;
        }
        if (choice ? choice->binary : choices->default_binary) {
            bytebuf_puts(&b, ",\"parameters\":{\"binary_data_size\":");
            json_write_uint(&b, size);
            bytebuf_puts(&b, "}}");
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
            goto out;
        }
        bytebuf_puts(&b, ",\"data\":");
        err = json_tensor_encode(&b, o->name, o->dtype,
                                 o->data ? o->data->data : NULL, size, count);
        if (err)
            goto out;
        bytebuf_putc(&b, '}');
    }
    bytebuf_puts(&b, "]}");
    size_t json_len;
    pl->json = bytebuf_take(&b, &json_len);
    if (!pl->json) {
        err = osp_error_out_of_memory();
        goto out;
    }
    parts[0].base = pl->json;
    parts[0].len = json_len;
    out->parts = parts;
    out->n_parts = n_parts;
    out->header_len = json_len;
    out->binary = pl->n_buffers > 0;
    out->payload = pl;
    return NULL;
out:
    bytebuf_free(&b);
    kserve_encoded_payload_free(pl);
    free(parts);
    return err;
}

void kserve_log_infer_failed(const char *request_id, const osp_error *err) {
    OSP_LOG_VERBOSE("[request id: %s] Infer failed: %s",
                    request_id && *request_id ? request_id
                                              : OSP_REQUEST_ID_UNKNOWN,
                    osp_error_message(err));
}
