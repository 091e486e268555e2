/*
 * The redis response cache's value layout (cache_value.h): an encoder that
 * writes only what the decoder accepts, and a decoder that checks every
 * length against what is left before reading it.
 */
#include "cache_value.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "osprey/datatype.h"
#include "osprey/memory.h"
#include "osprey/tensor.h"

static const unsigned char MAGIC[2] = {'O', 'C'};
#define NAME_MAX_BYTES 65535u
/* name length, datatype, rank, byte size: the least one output takes */
#define OUTPUT_MIN_BYTES (4u + 1u + 1u + 8u)

/* Codes on the wire, fixed here so that a reordered osp_datatype cannot
 * change what a stored value means. Index = code. */
static const osp_datatype CODES[] = {
    OSP_TYPE_INVALID, OSP_TYPE_BOOL,   OSP_TYPE_UINT8, OSP_TYPE_UINT16,
    OSP_TYPE_UINT32,  OSP_TYPE_UINT64, OSP_TYPE_INT8,  OSP_TYPE_INT16,
    OSP_TYPE_INT32,   OSP_TYPE_INT64,  OSP_TYPE_FP16,  OSP_TYPE_FP32,
    OSP_TYPE_FP64,    OSP_TYPE_BYTES,  OSP_TYPE_BF16,
};
#define N_CODES (sizeof CODES / sizeof CODES[0])

static int code_of(osp_datatype dt) {
    for (size_t c = 1; c < N_CODES; c++)
        if (CODES[c] == dt)
            return (int)c;
    return 0;
}

/* Whether `bytes` of `dt` are exactly what `shape` holds: a fixed-size
 * type's count times its size, or for BYTES one 4-byte length plus that
 * many bytes per element, with nothing left over. */
static bool bytes_match_shape(osp_datatype dt, const osp_shape *shape,
                              const unsigned char *bytes, uint64_t n) {
    int64_t count;
    if (!osp_shape_element_count(shape, &count) || count < 0)
        return false;
    if (dt != OSP_TYPE_BYTES) {
        uint64_t size = osp_datatype_byte_size(dt);
        return size != 0 && (uint64_t)count <= UINT64_MAX / size &&
               (uint64_t)count * size == n;
    }
    uint64_t at = 0;
    for (int64_t i = 0; i < count; i++) {
        if (n - at < 4)
            return false;
        const unsigned char *p = bytes + at;
        uint64_t len = (uint64_t)p[0] | (uint64_t)p[1] << 8 |
                       (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        at += 4;
        if (n - at < len)
            return false;
        at += len;
    }
    return at == n;
}

/* ---- encode -------------------------------------------------------------- */

static unsigned char *put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + n;
}

bool cache_value_encode(const osp_infer_response *resp, size_t max_len,
                        unsigned char **out, size_t *len, const char **why) {
    if (resp->n_outputs > UINT32_MAX) {
        *why = "too many outputs";
        return false;
    }
    size_t total = sizeof MAGIC + 1 + 4;
    for (size_t i = 0; i < resp->n_outputs; i++) {
        const osp_infer_output *o = &resp->outputs[i];
        size_t name_len = o->name ? strlen(o->name) : 0;
        size_t bytes = o->data ? o->byte_size : 0;
        if (name_len == 0 || name_len > NAME_MAX_BYTES) {
            *why = "an output name is empty or longer than 65535 bytes";
            return false;
        }
        if (!code_of(o->dtype) || o->shape.rank < 0 ||
            o->shape.rank > OSP_MAX_DIMS ||
            !bytes_match_shape(o->dtype, &o->shape,
                               o->data ? o->data->data : NULL, bytes)) {
            *why = "an output's bytes do not match its datatype and shape";
            return false;
        }
        size_t need = OUTPUT_MIN_BYTES + name_len + 8 * (size_t)o->shape.rank;
        if (bytes > max_len || need > max_len || total > max_len - need ||
            total + need > max_len - bytes) {
            *why = "the response is larger than a cache value may be";
            return false;
        }
        total += need + bytes;
    }
    unsigned char *buf = malloc(total);
    if (!buf) {
        *why = "out of memory";
        return false;
    }
    unsigned char *p = buf;
    memcpy(p, MAGIC, sizeof MAGIC);
    p += sizeof MAGIC;
    *p++ = CACHE_VALUE_VERSION;
    p = put_le(p, resp->n_outputs, 4);
    for (size_t i = 0; i < resp->n_outputs; i++) {
        const osp_infer_output *o = &resp->outputs[i];
        size_t name_len = strlen(o->name);
        size_t bytes = o->data ? o->byte_size : 0;
        p = put_le(p, name_len, 4);
        memcpy(p, o->name, name_len);
        p += name_len;
        *p++ = (unsigned char)code_of(o->dtype);
        *p++ = (unsigned char)o->shape.rank;
        for (int d = 0; d < o->shape.rank; d++)
            p = put_le(p, (uint64_t)o->shape.dims[d], 8);
        p = put_le(p, bytes, 8);
        if (bytes)
            memcpy(p, o->data->data, bytes);
        p += bytes;
    }
    *out = buf;
    *len = total;
    return true;
}

/* ---- decode -------------------------------------------------------------- */

typedef struct reader {
    const unsigned char *p;
    size_t left;
} reader;

static bool take(reader *r, size_t n, const unsigned char **at) {
    if (r->left < n)
        return false;
    *at = r->p;
    r->p += n;
    r->left -= n;
    return true;
}

static bool take_le(reader *r, int n, uint64_t *v) {
    const unsigned char *at;
    if (!take(r, (size_t)n, &at))
        return false;
    *v = 0;
    for (int i = 0; i < n; i++)
        *v |= (uint64_t)at[i] << (8 * i);
    return true;
}

void cache_response_drop_outputs(osp_infer_response *resp) {
    for (size_t i = 0; i < resp->n_outputs; i++) {
        free(resp->outputs[i].name);
        osp_buffer_free(resp->outputs[i].data);
    }
    free(resp->outputs);
    resp->outputs = NULL;
    resp->n_outputs = 0;
}

/* Reads one output into *o (which owns what it got, even on failure). */
static bool decode_output(reader *r, osp_infer_output *o, const char **why) {
    const unsigned char *at;
    uint64_t name_len, code, rank, bytes;
    *why = "truncated";
    if (!take_le(r, 4, &name_len))
        return false;
    if (name_len == 0 || name_len > NAME_MAX_BYTES) {
        *why = "bad output name length";
        return false;
    }
    if (!take(r, name_len, &at))
        return false;
    if (memchr(at, '\0', name_len)) {
        *why = "NUL in an output name";
        return false;
    }
    if (!(o->name = malloc(name_len + 1))) {
        *why = "out of memory";
        return false;
    }
    memcpy(o->name, at, name_len);
    o->name[name_len] = '\0';
    if (!take_le(r, 1, &code) || !take_le(r, 1, &rank))
        return false;
    if (code == 0 || code >= N_CODES) {
        *why = "unknown datatype code";
        return false;
    }
    if (rank > OSP_MAX_DIMS) {
        *why = "rank too large";
        return false;
    }
    o->dtype = CODES[code];
    o->shape.rank = (int)rank;
    for (uint64_t d = 0; d < rank; d++) {
        uint64_t dim;
        if (!take_le(r, 8, &dim))
            return false;
        if (dim > INT64_MAX) {
            *why = "negative dimension";
            return false;
        }
        o->shape.dims[d] = (int64_t)dim;
    }
    if (!take_le(r, 8, &bytes))
        return false;
    if (!take(r, bytes, &at))
        return false;
    if (!bytes_match_shape(o->dtype, &o->shape, at, bytes)) {
        *why = "output bytes do not match its datatype and shape";
        return false;
    }
    if (!(o->data = osp_buffer_new_host(bytes))) {
        *why = "out of memory";
        return false;
    }
    memcpy(o->data->data, at, bytes);
    o->byte_size = bytes;
    return true;
}

bool cache_value_decode(const unsigned char *value, size_t len,
                        osp_infer_response *resp, const char **why) {
    reader r = {value, len};
    const unsigned char *at;
    uint64_t version, n;
    if (!take(&r, sizeof MAGIC, &at) || memcmp(at, MAGIC, sizeof MAGIC) != 0) {
        *why = "not an Osprey response cache value";
        return false;
    }
    if (!take_le(&r, 1, &version) || version != CACHE_VALUE_VERSION) {
        *why = "unknown value version";
        return false;
    }
    if (!take_le(&r, 4, &n)) {
        *why = "truncated";
        return false;
    }
    if (n > r.left / OUTPUT_MIN_BYTES) {
        *why = "more outputs than the value holds";
        return false;
    }
    resp->outputs = calloc(n + 1, sizeof(*resp->outputs));
    if (!resp->outputs) {
        *why = "out of memory";
        return false;
    }
    for (uint64_t i = 0; i < n; i++) {
        resp->n_outputs = (size_t)i + 1;
        if (!decode_output(&r, &resp->outputs[i], why)) {
            cache_response_drop_outputs(resp);
            return false;
        }
    }
    if (r.left != 0) {
        *why = "bytes after the last output";
        cache_response_drop_outputs(resp);
        return false;
    }
    return true;
}
