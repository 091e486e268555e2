#include "json_tensor.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- scalar tokens ---- */

typedef enum token_kind {
    TOK_INT,    /* integer literal that fits int64 */
    TOK_UINT,   /* integer literal above INT64_MAX that fits uint64 */
    TOK_DOUBLE, /* any other number, NaN, Infinity */
    TOK_TRUE,
    TOK_FALSE,
    TOK_NULL,
    TOK_STRING,
    TOK_OBJECT,
} token_kind;

typedef struct token {
    token_kind kind;
    int64_t i;
    uint64_t u;
    size_t start; /* offset of the token */
} token;

static bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Classifies the scalar at text[*pos] and leaves *pos after it (for strings
 * and objects *pos is left at the token: callers consume those). Integers
 * get their value; doubles are parsed by the caller when needed. */
static void read_scalar(const char *text, size_t len, size_t *pos, token *t) {
    size_t p = *pos;
    t->start = p;
    char c = text[p];
    if (c == '"') {
        t->kind = TOK_STRING;
        return;
    }
    if (c == '{') {
        t->kind = TOK_OBJECT;
        return;
    }
    if (c == 't') {
        t->kind = TOK_TRUE;
        *pos = p + 4;
        return;
    }
    if (c == 'f') {
        t->kind = TOK_FALSE;
        *pos = p + 5;
        return;
    }
    if (c == 'n') {
        t->kind = TOK_NULL;
        *pos = p + 4;
        return;
    }
    /* number, NaN, Infinity, -Infinity (validated by json_scan) */
    bool neg = false;
    if (c == '-') {
        neg = true;
        p++;
    }
    if (p < len && (text[p] == 'I' || text[p] == 'N')) {
        t->kind = TOK_DOUBLE;
        *pos = p + (text[p] == 'I' ? 8 : 3);
        return;
    }
    uint64_t v = 0;
    bool overflow = false;
    while (p < len && is_digit(text[p])) {
        unsigned d = (unsigned)(text[p] - '0');
        if (v > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            v = v * 10 + d;
        p++;
    }
    bool fraction = false;
    while (p < len && (is_digit(text[p]) || text[p] == '.' || text[p] == 'e' ||
                       text[p] == 'E' || text[p] == '+' || text[p] == '-')) {
        fraction = true;
        p++;
    }
    *pos = p;
    if (fraction || overflow) {
        t->kind = TOK_DOUBLE;
    } else if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) {
            t->kind = TOK_DOUBLE;
        } else {
            t->kind = TOK_INT;
            t->i = (int64_t)(0 - v);
        }
    } else if (v > (uint64_t)INT64_MAX) {
        t->kind = TOK_UINT;
        t->u = v;
    } else {
        t->kind = TOK_INT;
        t->i = (int64_t)v;
    }
}

/* Clinger's fast path: with at most 15 significant digits and a decimal
 * exponent within +-22, one multiplication or division of exact doubles
 * rounds correctly. Anything else (and NaN/Infinity) goes to strtod. */
static double parse_double(const char *text) {
    static const double pow10[] = {
        1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char *s = text;
    bool neg = *s == '-';
    if (neg)
        s++;
    uint64_t mant = 0;
    int digits = 0, exp10 = 0;
    for (; is_digit(*s); s++) {
        if (mant || *s != '0') {
            if (++digits > 15)
                return strtod(text, NULL);
            mant = mant * 10 + (uint64_t)(*s - '0');
        }
    }
    if (*s == '.') {
        for (s++; is_digit(*s); s++) {
            if (mant || *s != '0') {
                if (++digits > 15)
                    return strtod(text, NULL);
                mant = mant * 10 + (uint64_t)(*s - '0');
            }
            exp10--;
        }
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        bool eneg = *s == '-';
        if (*s == '+' || *s == '-')
            s++;
        int e = 0;
        for (; is_digit(*s); s++)
            if (e < 10000)
                e = e * 10 + (*s - '0');
        exp10 += eneg ? -e : e;
    } else if (*s == 'I' || *s == 'N') {
        return strtod(text, NULL);
    }
    if (exp10 < -22 || exp10 > 22)
        return strtod(text, NULL);
    double d = (double)mant;
    d = exp10 < 0 ? d / pow10[-exp10] : d * pow10[exp10];
    return neg ? -d : d;
}

/* ---- decoding ---- */

/* Triton's size pass for BYTES reports it bare; the element reader's
 * error gets the "Unable to parse 'data'" prefix (still INVALID_ARG). */
static osp_error *depth_error(bool prefixed) {
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "%sJSON nesting depth exceeds maximum allowed limit "
                         "(%d)",
                         prefixed ? "Unable to parse 'data': " : "",
                         JSON_TENSOR_MAX_NESTING);
}

static osp_error *data_error(const char *msg) {
    return osp_error_new(OSP_ERROR_INTERNAL, "Unable to parse 'data': %s", msg);
}

static const char *type_message(osp_datatype dt) {
    switch (dt) {
    case OSP_TYPE_BOOL:
        return "attempt to access JSON non-boolean as boolean";
    case OSP_TYPE_UINT8:
    case OSP_TYPE_UINT16:
    case OSP_TYPE_UINT32:
    case OSP_TYPE_UINT64:
        return "attempt to access JSON non-unsigned-integer as "
               "unsigned-integer";
    case OSP_TYPE_INT8:
    case OSP_TYPE_INT16:
    case OSP_TYPE_INT32:
    case OSP_TYPE_INT64:
        return "attempt to access JSON non-signed-integer as signed-integer";
    case OSP_TYPE_FP32:
    case OSP_TYPE_FP64:
        return "attempt to access JSON non-number as double";
    default:
        return "attempt to access JSON non-string as string";
    }
}

/* Stores one scalar of a numeric/BOOL tensor; false if its JSON type does
 * not fit (values are truncated like Triton, never range-checked). */
static bool store_scalar(const char *text, const token *t, osp_datatype dt,
                         void *dst, int64_t idx) {
    uint64_t u;
    int64_t i;
    double d;
    switch (dt) {
    case OSP_TYPE_BOOL:
        if (t->kind != TOK_TRUE && t->kind != TOK_FALSE)
            return false;
        ((uint8_t *)dst)[idx] = t->kind == TOK_TRUE;
        return true;
    case OSP_TYPE_UINT8:
    case OSP_TYPE_UINT16:
    case OSP_TYPE_UINT32:
    case OSP_TYPE_UINT64:
        if (t->kind == TOK_UINT)
            u = t->u;
        else if (t->kind == TOK_INT && t->i >= 0)
            u = (uint64_t)t->i;
        else
            return false;
        if (dt == OSP_TYPE_UINT8)
            ((uint8_t *)dst)[idx] = (uint8_t)u;
        else if (dt == OSP_TYPE_UINT16)
            ((uint16_t *)dst)[idx] = (uint16_t)u;
        else if (dt == OSP_TYPE_UINT32)
            ((uint32_t *)dst)[idx] = (uint32_t)u;
        else
            ((uint64_t *)dst)[idx] = u;
        return true;
    case OSP_TYPE_INT8:
    case OSP_TYPE_INT16:
    case OSP_TYPE_INT32:
    case OSP_TYPE_INT64:
        if (t->kind != TOK_INT)
            return false;
        i = t->i;
        if (dt == OSP_TYPE_INT8)
            ((int8_t *)dst)[idx] = (int8_t)i;
        else if (dt == OSP_TYPE_INT16)
            ((int16_t *)dst)[idx] = (int16_t)i;
        else if (dt == OSP_TYPE_INT32)
            ((int32_t *)dst)[idx] = (int32_t)i;
        else
            ((int64_t *)dst)[idx] = i;
        return true;
    case OSP_TYPE_FP32:
    case OSP_TYPE_FP64:
        if (t->kind == TOK_INT)
            d = (double)t->i;
        else if (t->kind == TOK_UINT)
            d = (double)t->u;
        else if (t->kind == TOK_DOUBLE)
            d = parse_double(text + t->start);
        else
            return false;
        if (dt == OSP_TYPE_FP32)
            ((float *)dst)[idx] = (float)d;
        else
            ((double *)dst)[idx] = d;
        return true;
    default:
        return false;
    }
}

/* Walks the array text[0..len). For each scalar calls `visit` (unless
 * NULL); nesting is checked first, as Triton's recursive reader does. */
typedef osp_error *(*scalar_fn)(const char *text, size_t len, size_t *pos,
                                void *ctx);

static osp_error *walk_array(const char *text, size_t len, scalar_fn visit,
                             void *ctx, bool prefix_depth_error) {
    size_t p = 0;
    while (p < len && is_ws(text[p]))
        p++;
    if (p >= len || text[p] != '[')
        return data_error("attempt to access JSON non-array as array");
    int level = 0; /* arrays currently open */
    while (p < len) {
        char c = text[p];
        if (is_ws(c) || c == ',') {
            p++;
        } else if (c == '[') {
            if (level >= JSON_TENSOR_MAX_NESTING)
                return depth_error(prefix_depth_error);
            level++;
            p++;
        } else if (c == ']') {
            p++;
            if (--level == 0)
                return NULL;
        } else {
            if (level >= JSON_TENSOR_MAX_NESTING)
                return depth_error(prefix_depth_error);
            osp_error *err = visit(text, len, &p, ctx);
            if (err)
                return err;
        }
    }
    return NULL;
}

typedef struct bytes_size_ctx {
    size_t total;
} bytes_size_ctx;

static osp_error *bytes_size_visit(const char *text, size_t len, size_t *pos,
                                   void *vctx) {
    bytes_size_ctx *ctx = vctx;
    token t;
    read_scalar(text, len, pos, &t);
    if (t.kind != TOK_STRING)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "Unable to parse JSON bytes array: attempt to "
                             "access JSON non-string as string");
    size_t n = json_string_decode(text, pos, NULL);
    ctx->total += n + sizeof(uint32_t);
    return NULL;
}

osp_error *json_tensor_bytes_size(const char *text, size_t len, size_t *out) {
    bytes_size_ctx ctx = {0};
    osp_error *err = walk_array(text, len, bytes_size_visit, &ctx, false);
    if (err)
        return err;
    *out = ctx.total;
    return NULL;
}

typedef struct decode_ctx {
    osp_datatype dt;
    int64_t expected; /* elements, or bytes for BYTES */
    int64_t counter;  /* elements, or bytes for BYTES */
    void *dst;
} decode_ctx;

static osp_error *decode_visit(const char *text, size_t len, size_t *pos,
                               void *vctx) {
    decode_ctx *ctx = vctx;
    token t;
    if (ctx->dt != OSP_TYPE_BYTES && ctx->counter >= ctx->expected)
        return data_error("Shape does not match true shape of 'data' field");
    read_scalar(text, len, pos, &t);
    if (ctx->dt == OSP_TYPE_BYTES) {
        if (t.kind != TOK_STRING)
            return data_error(type_message(ctx->dt));
        size_t probe = *pos;
        size_t n = json_string_decode(text, &probe, NULL);
        if ((int64_t)(n + sizeof(uint32_t)) > ctx->expected - ctx->counter)
            return data_error(
                "shape does not match true shape of 'data' field");
        char *o = (char *)ctx->dst + ctx->counter;
        uint32_t n32 = (uint32_t)n;
        memcpy(o, &n32, sizeof n32);
        json_string_decode(text, pos, o + sizeof n32);
        ctx->counter += (int64_t)(n + sizeof n32);
        return NULL;
    }
    if (!store_scalar(text, &t, ctx->dt, ctx->dst, ctx->counter))
        return data_error(type_message(ctx->dt));
    ctx->counter++;
    return NULL;
}

osp_error *json_tensor_decode(const char *text, size_t len, osp_datatype dt,
                              int64_t expected, void *dst) {
    decode_ctx ctx = {dt, expected, 0, dst};
    osp_error *err = walk_array(text, len, decode_visit, &ctx, true);
    if (err)
        return err;
    if (ctx.counter != expected)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "Failed to parse 'data' field: shape does not "
                             "match true shape");
    return NULL;
}

/* ---- encoding ---- */

static osp_error *size_mismatch(const char *name) {
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "Failed to write 'data' field: output tensor shape "
                         "does not match size of output for '%s'",
                         name);
}

osp_error *json_tensor_encode(bytebuf *b, const char *name, osp_datatype dt,
                              const void *data, size_t byte_size,
                              int64_t count) {
    size_t n = count > 0 ? (size_t)count : 0;
    if (dt == OSP_TYPE_FP16 || dt == OSP_TYPE_BF16)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "sending %s data via JSON is not supported. Please "
            "use the binary data format for output",
            dt == OSP_TYPE_FP16 ? "FP16" : "BF16");
    if (dt == OSP_TYPE_INVALID || dt >= OSP_TYPE_COUNT_)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Invalid data type for output tensor");
    if (dt != OSP_TYPE_BYTES) {
        size_t es = osp_datatype_byte_size(dt);
        if (n > SIZE_MAX / es || byte_size != n * es)
            return size_mismatch(name);
        /* ~one reservation for the common cases */
        bytebuf_reserve(
            b, n * (dt == OSP_TYPE_FP32 || dt == OSP_TYPE_FP64 ? 20 : 6) + 2);
    }
    bytebuf_putc(b, '[');
    const uint8_t *p = data;
    for (size_t e = 0; e < n; e++) {
        if (e)
            bytebuf_putc(b, ',');
        switch (dt) {
        case OSP_TYPE_BOOL:
            json_write_bool(b, p[e] != 0);
            break;
        case OSP_TYPE_UINT8:
            json_write_uint(b, p[e]);
            break;
        case OSP_TYPE_UINT16: {
            uint16_t v;
            memcpy(&v, p + 2 * e, 2);
            json_write_uint(b, v);
            break;
        }
        case OSP_TYPE_UINT32: {
            uint32_t v;
            memcpy(&v, p + 4 * e, 4);
            json_write_uint(b, v);
            break;
        }
        case OSP_TYPE_UINT64: {
            uint64_t v;
            memcpy(&v, p + 8 * e, 8);
            json_write_uint(b, v);
            break;
        }
        case OSP_TYPE_INT8:
            json_write_int(b, (int8_t)p[e]);
            break;
        case OSP_TYPE_INT16: {
            int16_t v;
            memcpy(&v, p + 2 * e, 2);
            json_write_int(b, v);
            break;
        }
        case OSP_TYPE_INT32: {
            int32_t v;
            memcpy(&v, p + 4 * e, 4);
            json_write_int(b, v);
            break;
        }
        case OSP_TYPE_INT64: {
            int64_t v;
            memcpy(&v, p + 8 * e, 8);
            json_write_int(b, v);
            break;
        }
        case OSP_TYPE_FP32: {
            float v;
            memcpy(&v, p + 4 * e, 4);
            json_write_double(b, (double)v);
            break;
        }
        case OSP_TYPE_FP64: {
            double v;
            memcpy(&v, p + 8 * e, 8);
            json_write_double(b, v);
            break;
        }
        case OSP_TYPE_BYTES: {
            /* p advances through the length-prefixed elements */
            size_t used = (size_t)(p - (const uint8_t *)data);
            uint32_t len;
            if (byte_size - used < sizeof len)
                return osp_error_new(OSP_ERROR_INTERNAL,
                                     "output tensor shape does not match size "
                                     "of output for '%s'",
                                     name);
            memcpy(&len, p, sizeof len);
            if (byte_size - used - sizeof len < len)
                return osp_error_new(OSP_ERROR_INTERNAL,
                                     "output tensor shape does not match size "
                                     "of output for '%s'",
                                     name);
            json_write_string(b, (const char *)p + sizeof len, len);
            p += sizeof len + len;
            break;
        }
        default:
            break;
        }
    }
    bytebuf_putc(b, ']');
    if (b->oom)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "out of memory writing output '%s'", name);
    return NULL;
}
