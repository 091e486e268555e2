/*
 * The STRING cases of Cast, CastLike and Equal (onnx_ops_strings.h).
 */
#include "onnx_ops_strings.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

static bool is_number(osp_datatype dt) {
    switch (dt) {
    case OSP_TYPE_BOOL:
    case OSP_TYPE_UINT8:
    case OSP_TYPE_UINT16:
    case OSP_TYPE_UINT32:
    case OSP_TYPE_UINT64:
    case OSP_TYPE_INT8:
    case OSP_TYPE_INT16:
    case OSP_TYPE_INT32:
    case OSP_TYPE_INT64:
    case OSP_TYPE_FP16:
    case OSP_TYPE_BF16:
    case OSP_TYPE_FP32:
    case OSP_TYPE_FP64:
        return true;
    default:
        return false;
    }
}

static bool is_floating(osp_datatype dt) {
    return dt == OSP_TYPE_FP16 || dt == OSP_TYPE_BF16 || dt == OSP_TYPE_FP32 ||
           dt == OSP_TYPE_FP64;
}

static bool is_signed_int(osp_datatype dt) {
    return dt == OSP_TYPE_INT8 || dt == OSP_TYPE_INT16 ||
           dt == OSP_TYPE_INT32 || dt == OSP_TYPE_INT64;
}

/* Element i of a floating dtype as a double. */
static double read_floating(osp_datatype dt, const void *src, size_t i) {
    switch (dt) {
    case OSP_TYPE_FP16:
        return fp16_to_fp32(((const uint16_t *)src)[i]);
    case OSP_TYPE_BF16:
        return bf16_to_fp32(((const uint16_t *)src)[i]);
    case OSP_TYPE_FP32:
        return ((const float *)src)[i];
    default:
        return ((const double *)src)[i];
    }
}

size_t onnx_string_format_number(osp_datatype dt, const void *src, size_t i,
                                 char *buf) {
    int n = 0;
    if (is_floating(dt)) {
        double v = read_floating(dt, src, i);
        if (isnan(v))
            n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "NaN");
        else if (isinf(v))
            n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, v < 0 ? "-INF" : "INF");
        else
            n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%.8g", v);
        return (size_t)n;
    }
    switch (dt) {
    case OSP_TYPE_BOOL:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%d",
                     ((const uint8_t *)src)[i] != 0);
        break;
    case OSP_TYPE_UINT8:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%u",
                     (unsigned)((const uint8_t *)src)[i]);
        break;
    case OSP_TYPE_UINT16:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%u",
                     (unsigned)((const uint16_t *)src)[i]);
        break;
    case OSP_TYPE_UINT32:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%lu",
                     (unsigned long)((const uint32_t *)src)[i]);
        break;
    case OSP_TYPE_UINT64:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%llu",
                     (unsigned long long)((const uint64_t *)src)[i]);
        break;
    case OSP_TYPE_INT8:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%d",
                     (int)((const int8_t *)src)[i]);
        break;
    case OSP_TYPE_INT16:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%d",
                     (int)((const int16_t *)src)[i]);
        break;
    case OSP_TYPE_INT32:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%ld",
                     (long)((const int32_t *)src)[i]);
        break;
    case OSP_TYPE_INT64:
        n = snprintf(buf, ONNX_NUMBER_TEXT_MAX, "%lld",
                     (long long)((const int64_t *)src)[i]);
        break;
    default:
        buf[0] = '\0';
        break;
    }
    return n > 0 ? (size_t)n : 0;
}

/* The low `bytes` bytes of v (little-endian): C's conversion to a
 * narrower integer, as a C++ static_cast truncates. */
static void store_low_bytes(uint64_t v, void *dst, size_t i, size_t bytes) {
    memcpy((char *)dst + i * bytes, &v, bytes);
}

/* Up to 40 bytes of text, with bytes that do not print as '?', for an
 * error message. */
static void quote_text(const char *text, size_t len, char out[48]) {
    size_t n = len > 40 ? 40 : len;
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)text[k];
        out[k] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    strcpy(out + n, len > n ? "..." : "");
}

osp_error *onnx_string_parse_number(osp_datatype dt, const char *text,
                                    size_t len, void *dst, size_t i) {
    /* The C parsers want a NUL-terminated copy; they stop at an embedded
     * NUL, as onnxruntime's std::sto* on c_str() do. */
    char small[128];
    char *z = len < sizeof small ? small : malloc(len + 1);
    if (!z)
        return osp_error_out_of_memory();
    memcpy(z, text, len);
    z[len] = '\0';
    char *end = NULL;
    errno = 0;
    double d = 0;
    long long s = 0;
    unsigned long long u = 0;
    if (is_floating(dt))
        d = strtod(z, &end);
    else if (is_signed_int(dt))
        s = strtoll(z, &end, 10);
    else
        u = strtoull(z, &end, 10);
    bool none = end == z, range = errno == ERANGE;
    if (z != small)
        free(z);
    if (none || range) {
        char quoted[48];
        quote_text(text, len, quoted);
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             none ? "'%s' is not a number (casting to %s)"
                                  : "'%s' is out of range (casting to %s)",
                             quoted, osp_datatype_wire_name(dt));
    }
    switch (dt) {
    case OSP_TYPE_FP16:
        ((uint16_t *)dst)[i] = fp32_to_fp16((float)d);
        break;
    case OSP_TYPE_BF16:
        ((uint16_t *)dst)[i] = fp32_to_bf16((float)d);
        break;
    case OSP_TYPE_FP32:
        ((float *)dst)[i] = (float)d;
        break;
    case OSP_TYPE_FP64:
        ((double *)dst)[i] = d;
        break;
    case OSP_TYPE_BOOL:
        ((uint8_t *)dst)[i] = u != 0;
        break;
    default:
        store_low_bytes(is_signed_int(dt) ? (uint64_t)s : (uint64_t)u, dst, i,
                        osp_datatype_byte_size(dt));
        break;
    }
    return NULL;
}

bool onnx_strings_castable(osp_datatype from, osp_datatype to) {
    if (from == OSP_TYPE_BYTES)
        return to == OSP_TYPE_BYTES || is_number(to);
    return to == OSP_TYPE_BYTES && is_number(from);
}

osp_error *onnx_strings_cast_run(onnx_run_ctx *ctx) {
    const onnx_desc *x = &ctx->in_desc[0], *y = &ctx->out_desc[0];
    int64_t n = onnx_shape_count(&x->shape);
    if (n == 0)
        return NULL;
    if (x->dtype == y->dtype) /* STRING to STRING: the references */
        return onnx_copy_bytes(ctx->stream, ctx->out[0], ctx->in[0],
                               (size_t)n * ONNX_STRING_BYTES);
    if (!ctx->strings)
        return onnx_node_error(ctx->node, OSP_ERROR_INTERNAL,
                               "no string pool for the strings it makes");
    if (x->dtype == OSP_TYPE_BYTES) {
        const onnx_string *in = ctx->in[0];
        for (int64_t i = 0; i < n; i++) {
            osp_error *err = onnx_string_parse_number(
                y->dtype, in[i].data, in[i].len, ctx->out[0], (size_t)i);
            if (err) {
                osp_error *named = onnx_node_error(
                    ctx->node, osp_error_get_code(err),
                    "element %lld of input 0: %s",
                    (long long)i, osp_error_message(err));
                osp_error_free(err);
                return named;
            }
        }
        return NULL;
    }
    onnx_string *out = ctx->out[0];
    for (int64_t i = 0; i < n; i++) {
        char text[ONNX_NUMBER_TEXT_MAX];
        size_t len = onnx_string_format_number(x->dtype, ctx->in[0],
                                               (size_t)i, text);
        char *at = onnx_string_pool_alloc(ctx->strings, len);
        if (!at)
            return osp_error_out_of_memory();
        memcpy(at, text, len);
        out[i] = (onnx_string){.data = at, .len = len};
    }
    return NULL;
}

osp_error *onnx_strings_equal_infer(onnx_infer_ctx *ctx) {
    const onnx_desc *a = &ctx->inputs[0], *b = &ctx->inputs[1];
    if (a->dtype != OSP_TYPE_BYTES || b->dtype != OSP_TYPE_BYTES)
        return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                               "Equal compares two tensors of one dtype, "
                               "not %s and %s",
                               a->dtype == OSP_TYPE_BYTES
                                   ? "STRING"
                                   : osp_datatype_wire_name(a->dtype),
                               b->dtype == OSP_TYPE_BYTES
                                   ? "STRING"
                                   : osp_datatype_wire_name(b->dtype));
    ctx->outputs[0].dtype = OSP_TYPE_BOOL;
    return onnx_broadcast_shape(ctx->node, &a->shape, &b->shape,
                                &ctx->outputs[0].shape);
}

osp_error *onnx_strings_equal_run(onnx_run_ctx *ctx) {
    const osp_shape *shape = &ctx->out_desc[0].shape;
    int64_t n = onnx_shape_count(shape);
    int64_t sa[OSP_MAX_DIMS], sb[OSP_MAX_DIMS], idx[OSP_MAX_DIMS] = {0};
    onnx_broadcast_strides(&ctx->in_desc[0].shape, shape, sa);
    onnx_broadcast_strides(&ctx->in_desc[1].shape, shape, sb);
    const onnx_string *a = ctx->in[0], *b = ctx->in[1];
    bool *out = ctx->out[0];
    int64_t ia = 0, ib = 0;
    for (int64_t i = 0; i < n; i++) {
        out[i] = a[ia].len == b[ib].len &&
                 (a[ia].len == 0 || memcmp(a[ia].data, b[ib].data,
                                           a[ia].len) == 0);
        /* Next index, last dim fastest, carrying the offsets along. */
        for (int d = shape->rank - 1; d >= 0; d--) {
            ia += sa[d];
            ib += sb[d];
            if (++idx[d] < shape->dims[d])
                break;
            ia -= sa[d] * shape->dims[d];
            ib -= sb[d] * shape->dims[d];
            idx[d] = 0;
        }
    }
    return NULL;
}

/* ---- Constant, ConstantOfShape ------------------------------------------
 */

/* *out = a copy of text[len] in ctx->strings. */
static osp_error *keep_in_pool(onnx_run_ctx *ctx, const char *text, size_t len,
                               onnx_string *out) {
    if (!ctx->strings)
        return onnx_node_error(ctx->node, OSP_ERROR_INTERNAL,
                               "no string pool for the strings it makes");
    char *at = onnx_string_pool_alloc(ctx->strings, len);
    if (!at)
        return osp_error_out_of_memory();
    if (len)
        memcpy(at, text, len);
    *out = (onnx_string){.data = at, .len = len};
    return NULL;
}

osp_error *onnx_strings_constant_run(onnx_run_ctx *ctx, const void *wire,
                                     size_t bytes, int64_t count) {
    onnx_string *out = ctx->out[0];
    osp_error *err =
        onnx_strings_from_wire(wire, bytes, count, out, "attribute 'value'");
    for (int64_t i = 0; !err && i < count; i++)
        err = keep_in_pool(ctx, out[i].data, out[i].len, &out[i]);
    return err;
}

osp_error *onnx_strings_fill_run(onnx_run_ctx *ctx, onnx_string value) {
    int64_t n = onnx_shape_count(&ctx->out_desc[0].shape);
    if (n == 0)
        return NULL;
    onnx_string kept;
    osp_error *err = keep_in_pool(ctx, value.data, value.len, &kept);
    if (err)
        return err;
    onnx_string *out = ctx->out[0];
    for (int64_t i = 0; i < n; i++)
        out[i] = kept;
    return NULL;
}
