/*
 * TF Serving's REST JSON codec (util/json_tensor.cc at the reference
 * commit) on the rapidjson-compatible DOM of tfs_json.c. Messages are
 * TF's, word for word; where TF would build a TensorProto we build the
 * tensor's bytes directly.
 */
#include "tfs_codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array_grow.h"
#include "base64.h"
#include "json_doc.h"
#include "json_util.h"

#define TFS_DEFAULT_SIGNATURE "serving_default"

/* memcpy that accepts NULL pointers when n is 0. */
static void copy_bytes(void *dst, const void *src, size_t n) {
    if (n)
        memcpy(dst, src, n);
}

static osp_error *oom_error(void) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE,
                         "out of memory handling a TF Serving request");
}

/* ---- messages ---- */

/* An error whose message is msg->data (the buffer is freed). */
static osp_error *error_from(osp_error_code code, bytebuf *msg) {
    osp_error *err;
    if (msg->oom)
        err = oom_error();
    else
        err = osp_error_new(code, "%.*s", (int)msg->len,
                            msg->data ? msg->data : "");
    bytebuf_free(msg);
    return err;
}

/* "JSON Value: <debug string of v><rest>" (TF's FormatError and kin). */
static osp_error *value_error(osp_error_code code, const tj_value *v,
                              const char *rest) {
    bytebuf msg;
    bytebuf_init(&msg);
    bytebuf_puts(&msg, "JSON Value: ");
    tj_debug_string(v, &msg);
    bytebuf_puts(&msg, rest);
    return error_from(code, &msg);
}

static osp_error *type_error(const tj_value *v, osp_datatype dt) {
    bytebuf msg;
    bytebuf_init(&msg);
    bytebuf_puts(&msg, "JSON Value: ");
    tj_debug_string(v, &msg);
    bytebuf_printf(&msg, " Type: %s is not of expected type: %s",
                   tj_type_name(v), tfs_dtype_string(dt));
    return error_from(OSP_ERROR_INVALID_ARG, &msg);
}

/* absl::Status::ToString's code prefix for a TF status we produce. */
static const char *status_prefix(const osp_error *err) {
    return osp_error_get_code(err) == OSP_ERROR_UNSUPPORTED
               ? "UNIMPLEMENTED: "
               : "INVALID_ARGUMENT: ";
}

/* Errors that are TF statuses (wrapped by the row format) rather than
 * Osprey's own (out of memory, size limits), which pass through. */
static bool is_tf_status(const osp_error *err) {
    osp_error_code code = osp_error_get_code(err);
    return (code == OSP_ERROR_INVALID_ARG || code == OSP_ERROR_UNSUPPORTED) &&
           osp_error_get_reason(err) == OSP_REASON_NONE;
}

/* ---- base64 (absl::Base64Unescape / Base64Escape) ---- */

static bool b64_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
           c == '\r';
}

/* absl's rules: whitespace anywhere is skipped; '=' or '.' ends the data
 * and may be followed only by whitespace and more of them; the padding
 * count must be 0 or exactly what the data needs; one leftover character
 * is an error. `out` has room for n / 4 * 3 + 3 bytes. */
static bool b64_unescape(const char *s, size_t n, unsigned char *out,
                         size_t *out_len) {
    size_t o = 0, i = 0;
    unsigned temp = 0;
    int state = 0;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int v = base64_sextet((char)c);
        if (v < 0) {
            if (b64_space(c))
                continue;
            if (c == '=' || c == '.')
                break;
            return false;
        }
        temp = (temp << 6) | (unsigned)v;
        if (++state == 4) {
            out[o++] = (unsigned char)(temp >> 16);
            out[o++] = (unsigned char)(temp >> 8);
            out[o++] = (unsigned char)temp;
            state = 0;
            temp = 0;
        }
    }
    int expected = 0;
    switch (state) {
    case 1:
        return false;
    case 2:
        out[o++] = (unsigned char)(temp >> 4);
        expected = 2;
        break;
    case 3:
        out[o++] = (unsigned char)(temp >> 10);
        out[o++] = (unsigned char)(temp >> 2);
        expected = 1;
        break;
    default:
        break;
    }
    int equals = 0;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '=' || c == '.')
            equals++;
        else if (!b64_space(c))
            return false;
    }
    if (equals != 0 && equals != expected)
        return false;
    *out_len = o;
    return true;
}

static void b64_escape(bytebuf *out, const unsigned char *s, size_t n) {
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n > (SIZE_MAX - 3) / 4 * 3 || !bytebuf_reserve(out, (n + 2) / 3 * 4))
        return;
    char *o = out->data + out->len;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = alphabet[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)s[i] << 16;
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8;
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = '=';
    }
    out->len = (size_t)(o - out->data);
}

/* ---- the body ---- */

struct tfs_body {
    tj_doc *doc;
    const char *signature_name;
    bool signature_given; /* a non-empty "signature_name" was sent */
};

osp_error *tfs_body_parse(const char *text, size_t len, tfs_body **out,
                          const char **signature_name) {
    osp_error *err = NULL;
    tj_doc *doc = NULL;
    tfs_body *body = NULL;
    if (len == 0) {
        /* TF checks this before rapidjson: no period, no offset. */
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "JSON Parse error: The document is empty");
        goto out;
    }
    if ((err = tj_parse(text, len, &doc)))
        goto out;
    const tj_value *root = tj_doc_root(doc);
    if (root->type != TJ_OBJECT) {
        err = value_error(OSP_ERROR_INVALID_ARG, root, " Is not object");
        goto out;
    }
    const tj_value *sig = tj_find(root, "signature_name");
    if (sig && sig->type != TJ_STRING) {
        err = value_error(OSP_ERROR_INVALID_ARG, root,
                          " not formatted correctly. 'signature_name' key "
                          "must be a string value.");
        goto out;
    }
    body = malloc(sizeof *body);
    if (!body) {
        err = oom_error();
        goto out;
    }
    body->doc = doc;
    body->signature_name = sig && sig->n > 0 ? sig->u.s : TFS_DEFAULT_SIGNATURE;
    doc = NULL;
    *out = body;
    *signature_name = body->signature_name;
out:
    tj_doc_free(doc);
    return err;
}

void tfs_body_free(tfs_body *body) {
    if (!body)
        return;
    tj_doc_free(body->doc);
    free(body);
}

/* ---- predict: JSON values to tensors ---- */

/* One input being filled: its values appended as they are converted. */
typedef struct input_acc {
    const tfs_input_spec *spec;
    bool seen;      /* first item's size and shape recorded */
    int64_t size;   /* values of the first item */
    int64_t *shape; /* shape of the first item (heap) */
    size_t rank;    /* its rank */
    unsigned char *data;
    size_t len, cap;
    size_t stamp; /* 1 + the last instance whose object named this input */
} input_acc;

typedef struct predict_ctx {
    input_acc *acc;
    size_t n;
    size_t total, max_bytes;
    /* scratch: the shape of the item being filled, and the walk's stack */
    int64_t *dims;
    size_t n_dims, cap_dims;
    const tj_value **walk;
    uint32_t *walk_next;
    size_t cap_walk;
} predict_ctx;

static osp_error *acc_append(predict_ctx *ctx, input_acc *a, const void *p,
                             size_t n) {
    if (n > ctx->max_bytes - ctx->total)
        return osp_error_new_reason(
            OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
            "the request's input tensors exceed the limit of %zu bytes",
            ctx->max_bytes);
    if (!array_grow((void **)&a->data, &a->cap, a->len + n, 1))
        return oom_error();
    copy_bytes(a->data + a->len, p, n);
    a->len += n;
    ctx->total += n;
    return NULL;
}

/* TF's JsonDecodeBase64Object into a BYTES element. */
static osp_error *add_b64_value(predict_ctx *ctx, input_acc *a,
                                const tj_value *v) {
    const tj_value *str;
    if (!tj_is_b64_object(v, &str))
        return value_error(OSP_ERROR_INVALID_ARG, v,
                           " not formatted correctly for base64 data");
    unsigned char *dec = malloc((size_t)str->n / 4 * 3 + 3);
    if (!dec)
        return oom_error();
    size_t n = 0;
    osp_error *err = NULL;
    if (!b64_unescape(str->u.s, str->n, dec, &n)) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG, "Unable to base64 decode");
        goto out;
    }
    unsigned char hdr[4] = {(unsigned char)n, (unsigned char)(n >> 8),
                            (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
    if (!(err = acc_append(ctx, a, hdr, 4)))
        err = acc_append(ctx, a, dec, n);
out:
    free(dec);
    return err;
}

/* TF's AddValueToTensor: one JSON scalar (or array/null at a leaf) as an
 * element of the input's dtype, with rapidjson's number classes. */
static osp_error *add_value(predict_ctx *ctx, input_acc *a, const tj_value *v) {
    osp_datatype dt = a->spec->dtype;
    bool number = v->type == TJ_NUMBER;
    switch (dt) {
    case OSP_TYPE_FP32: {
        if (!number)
            return type_error(v, dt);
        float f = (float)tj_get_double(v);
        return acc_append(ctx, a, &f, sizeof f);
    }
    case OSP_TYPE_FP64: {
        if (!number)
            return type_error(v, dt);
        double d = tj_get_double(v);
        return acc_append(ctx, a, &d, sizeof d);
    }
    case OSP_TYPE_INT32:
    case OSP_TYPE_INT16:
    case OSP_TYPE_INT8:
    case OSP_TYPE_UINT8: {
        if (!(v->num & TJ_NUM_INT))
            return type_error(v, dt);
        /* TF keeps int_val as int32 and narrows without a range check. */
        int32_t x = (int32_t)v->u.i;
        if (dt == OSP_TYPE_INT32)
            return acc_append(ctx, a, &x, 4);
        if (dt == OSP_TYPE_INT16) {
            int16_t y = (int16_t)x;
            return acc_append(ctx, a, &y, 2);
        }
        uint8_t y = (uint8_t)x;
        return acc_append(ctx, a, &y, 1);
    }
    case OSP_TYPE_BYTES: {
        if (v->type != TJ_STRING)
            return type_error(v, dt);
        uint32_t n = v->n;
        unsigned char hdr[4] = {(unsigned char)n, (unsigned char)(n >> 8),
                                (unsigned char)(n >> 16),
                                (unsigned char)(n >> 24)};
        osp_error *err = acc_append(ctx, a, hdr, 4);
        return err ? err : acc_append(ctx, a, v->u.s, n);
    }
    case OSP_TYPE_INT64: {
        if (!(v->num & TJ_NUM_INT64))
            return type_error(v, dt);
        int64_t x = v->u.i;
        return acc_append(ctx, a, &x, 8);
    }
    case OSP_TYPE_BOOL: {
        if (v->type != TJ_TRUE && v->type != TJ_FALSE)
            return type_error(v, dt);
        uint8_t b = v->type == TJ_TRUE;
        return acc_append(ctx, a, &b, 1);
    }
    case OSP_TYPE_UINT32: {
        if (!(v->num & TJ_NUM_UINT))
            return type_error(v, dt);
        uint32_t x = (uint32_t)v->u.i;
        return acc_append(ctx, a, &x, 4);
    }
    case OSP_TYPE_UINT64: {
        if (!(v->num & TJ_NUM_UINT64))
            return type_error(v, dt);
        uint64_t x = (v->num & TJ_NUM_INT64) ? (uint64_t)v->u.i : v->u.u;
        return acc_append(ctx, a, &x, 8);
    }
    default: {
        bytebuf msg;
        bytebuf_init(&msg);
        bytebuf_puts(&msg, "Conversion of JSON Value: ");
        tj_debug_string(v, &msg);
        bytebuf_printf(&msg, " to type: %s", tfs_dtype_string(dt));
        return error_from(OSP_ERROR_UNSUPPORTED, &msg);
    }
    }
}

/* TF's GetDenseTensorShape: the sizes of the first element at each depth,
 * into ctx->dims. */
static osp_error *dense_shape(predict_ctx *ctx, const tj_value *v) {
    ctx->n_dims = 0;
    while (v->type == TJ_ARRAY) {
        if (!array_grow((void **)&ctx->dims, &ctx->cap_dims, ctx->n_dims + 1,
                        sizeof(int64_t)))
            return oom_error();
        ctx->dims[ctx->n_dims++] = v->n;
        if (v->n == 0)
            break;
        v = &v->u.items[0];
    }
    return NULL;
}

/* TF's FillTensorProto over ctx->dims, without recursion: every list
 * must match its dimension and every leaf sit at the last level. Adds the
 * number of values to *count. */
static osp_error *fill_values(predict_ctx *ctx, input_acc *a,
                              const tj_value *val, int64_t *count) {
    size_t rank = ctx->n_dims;
    if (!array_grow((void **)&ctx->walk, &ctx->cap_walk, rank + 1,
                    sizeof(*ctx->walk)))
        return oom_error();
    uint32_t *next = realloc(ctx->walk_next, (rank + 1) * sizeof(uint32_t));
    if (!next)
        return oom_error();
    ctx->walk_next = next;
    size_t depth = 0;
    const tj_value *cur = val;
    for (;;) {
        if (cur) {
            size_t level = depth;
            if (cur->type != TJ_ARRAY) {
                if (level != rank) {
                    bytebuf msg;
                    bytebuf_init(&msg);
                    bytebuf_puts(&msg, "JSON Value: ");
                    tj_debug_string(cur, &msg);
                    bytebuf_printf(&msg,
                                   " found at incorrect level: %zu in the JSON "
                                   "DOM. Expected at level: %zu",
                                   level + 1, rank);
                    return error_from(OSP_ERROR_INVALID_ARG, &msg);
                }
                osp_error *err;
                if (cur->type == TJ_OBJECT)
                    err = a->spec->dtype == OSP_TYPE_BYTES
                              ? add_b64_value(ctx, a, cur)
                              : type_error(cur, a->spec->dtype);
                else
                    err = add_value(ctx, a, cur);
                if (err)
                    return err;
                (*count)++;
            } else {
                if (level >= rank)
                    return osp_error_new(
                        OSP_ERROR_INVALID_ARG,
                        "Encountered list at unexpected level: %zu expected "
                        "< %zu",
                        level, rank);
                if ((int64_t)cur->n != ctx->dims[level])
                    return osp_error_new(
                        OSP_ERROR_INVALID_ARG,
                        "Encountered list at unexpected size: %u at level: "
                        "%zu expected size: %lld",
                        (unsigned)cur->n, level, (long long)ctx->dims[level]);
                ctx->walk[depth] = cur;
                ctx->walk_next[depth] = 0;
                depth++;
            }
            cur = NULL;
        }
        if (depth == 0)
            return NULL;
        const tj_value *arr = ctx->walk[depth - 1];
        if (ctx->walk_next[depth - 1] < arr->n)
            cur = &arr->u.items[ctx->walk_next[depth - 1]++];
        else
            depth--;
    }
}

/* TF's ShapeToString: "[a,b]". */
static void shape_string(bytebuf *out, const int64_t *dims, size_t rank) {
    bytebuf_putc(out, '[');
    for (size_t i = 0; i < rank; i++) {
        if (i)
            bytebuf_putc(out, ',');
        bytebuf_printf(out, "%lld", (long long)dims[i]);
    }
    bytebuf_putc(out, ']');
}

/* TF's AddInstanceItem: one instance's value for input `a`; every
 * instance must give the first one's value count, then its shape. */
static osp_error *add_instance_item(predict_ctx *ctx, input_acc *a,
                                    const tj_value *item) {
    osp_error *err = dense_shape(ctx, item);
    if (err)
        return err;
    int64_t count = 0;
    if ((err = fill_values(ctx, a, item, &count)))
        return err;
    if (!a->seen) {
        a->shape = malloc((ctx->n_dims ? ctx->n_dims : 1) * sizeof(int64_t));
        if (!a->shape)
            return oom_error();
        copy_bytes(a->shape, ctx->dims, ctx->n_dims * sizeof(int64_t));
        a->rank = ctx->n_dims;
        a->size = count;
        a->seen = true;
        return NULL;
    }
    if (a->size != count)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Expecting tensor size: %lld but got: %lld",
                             (long long)a->size, (long long)count);
    if (a->rank != ctx->n_dims ||
        (a->rank &&
         memcmp(a->shape, ctx->dims, a->rank * sizeof(int64_t)) != 0)) {
        bytebuf msg;
        bytebuf_init(&msg);
        bytebuf_puts(&msg, "Expecting shape ");
        shape_string(&msg, a->shape, a->rank);
        bytebuf_puts(&msg, " but got: ");
        shape_string(&msg, ctx->dims, ctx->n_dims);
        return error_from(OSP_ERROR_INVALID_ARG, &msg);
    }
    return NULL;
}

static bool is_element_object(const tj_value *v) {
    return v->type == TJ_OBJECT && !tj_is_b64_object(v, NULL);
}

/* "Failed to process element: <i>[ key: <k>] of 'instances' list. Error:
 * <status>" around a TF status; other errors pass through. */
static osp_error *wrap_element_error(osp_error *inner, size_t i,
                                     const char *key) {
    if (!is_tf_status(inner))
        return inner;
    osp_error *err;
    if (key)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Failed to process element: %zu key: %s of "
                            "'instances' list. Error: %s%s",
                            i, key, status_prefix(inner),
                            osp_error_message(inner));
    else
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Failed to process element: %zu of 'instances' "
                            "list. Error: %s%s",
                            i, status_prefix(inner), osp_error_message(inner));
    osp_error_free(inner);
    return err;
}

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The signature's input keys, sorted and joined by "," (std::set order). */
static osp_error *sorted_keys(const tfs_input_spec *specs, size_t n,
                              bytebuf *out) {
    const char **keys = malloc(n * sizeof *keys);
    if (!keys)
        return oom_error();
    for (size_t i = 0; i < n; i++)
        keys[i] = specs[i].key;
    qsort(keys, n, sizeof *keys, cmp_cstr);
    for (size_t i = 0; i < n; i++) {
        if (i && strcmp(keys[i], keys[i - 1]) == 0)
            continue;
        if (i)
            bytebuf_putc(out, ',');
        bytebuf_puts(out, keys[i]);
    }
    free(keys);
    return NULL;
}

/* TF's FillTensorMapFromInstancesList (format kRow). */
static osp_error *fill_rows(predict_ctx *ctx, const tj_value *instances) {
    const tj_value *first = &instances->u.items[0];
    if (first->type != TJ_OBJECT && ctx->n > 1)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "instances is a plain list, but expecting list of objects as "
            "multiple input tensors required as per tensorinfo_map");
    bool objects = is_element_object(first);
    for (size_t i = 0; i < instances->n; i++) {
        const tj_value *elem = &instances->u.items[i];
        osp_error *err;
        if (!objects) {
            if (is_element_object(elem))
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "Expecting value/list but got object at "
                                     "item %zu of input list",
                                     i);
            if ((err = add_instance_item(ctx, &ctx->acc[0], elem)))
                return wrap_element_error(err, i, NULL);
            continue;
        }
        if (!is_element_object(elem))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Expecting object but got list at item %zu "
                                 "of input list",
                                 i);
        for (uint32_t m = 0; m < elem->n; m++) {
            const tj_member *mem = &elem->u.members[m];
            /* TF copies the key as a C string: it ends at a NUL. */
            const char *name = mem->name.u.s;
            input_acc *a = NULL;
            for (size_t k = 0; k < ctx->n; k++) {
                if (strcmp(ctx->acc[k].spec->key, name) == 0) {
                    a = &ctx->acc[k];
                    break;
                }
            }
            if (!a)
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "JSON object: does not have named input: "
                                    "%s",
                                    name);
            else
                err = add_instance_item(ctx, a, &mem->value);
            if (err)
                return wrap_element_error(err, i, name);
            a->stamp = i + 1;
        }
        for (size_t k = 0; k < ctx->n; k++) {
            if (ctx->acc[k].stamp == i + 1)
                continue;
            bytebuf msg;
            bytebuf_init(&msg);
            bytebuf_printf(
                &msg,
                "Failed to process element: %zu of 'instances' list. "
                "JSON object: ",
                i);
            tj_debug_string(elem, &msg);
            bytebuf_puts(&msg, " keys must be equal to: ");
            const tfs_input_spec *specs = ctx->acc[0].spec;
            if ((err = sorted_keys(specs, ctx->n, &msg))) {
                bytebuf_free(&msg);
                return err;
            }
            return error_from(OSP_ERROR_INVALID_ARG, &msg);
        }
    }
    return NULL;
}

/* TF's FillTensorMapFromInputsMap (format kColumnar): errors unwrapped. */
static osp_error *fill_columns(predict_ctx *ctx, const tj_value *inputs) {
    osp_error *err;
    int64_t count = 0;
    if (inputs->type != TJ_OBJECT || tj_is_b64_object(inputs, NULL)) {
        if (ctx->n > 1)
            return osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "inputs is a plain value/list, but expecting an object as "
                "multiple input tensors required as per tensorinfo_map");
        input_acc *a = &ctx->acc[0];
        if ((err = dense_shape(ctx, inputs)) ||
            (err = fill_values(ctx, a, inputs, &count)))
            return err;
        a->seen = true;
        a->size = count;
        a->rank = ctx->n_dims;
        a->shape = malloc((a->rank ? a->rank : 1) * sizeof(int64_t));
        if (!a->shape)
            return oom_error();
        copy_bytes(a->shape, ctx->dims, a->rank * sizeof(int64_t));
        return NULL;
    }
    for (size_t k = 0; k < ctx->n; k++) {
        input_acc *a = &ctx->acc[k];
        const tj_value *item = tj_find(inputs, a->spec->key);
        if (!item)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Missing named input: %s in 'inputs' object.",
                                 a->spec->key);
        count = 0;
        if ((err = dense_shape(ctx, item)) ||
            (err = fill_values(ctx, a, item, &count)))
            return err;
        a->seen = true;
        a->size = count;
        a->rank = ctx->n_dims;
        a->shape = malloc((a->rank ? a->rank : 1) * sizeof(int64_t));
        if (!a->shape)
            return oom_error();
        copy_bytes(a->shape, ctx->dims, a->rank * sizeof(int64_t));
    }
    return NULL;
}

/* Bytes of the first `count` elements of a's values. */
static size_t prefix_bytes(const input_acc *a, int64_t count) {
    size_t el = osp_datatype_byte_size(a->spec->dtype);
    if (a->spec->dtype != OSP_TYPE_BYTES)
        return (size_t)count * el;
    size_t off = 0;
    for (int64_t i = 0; i < count && off + 4 <= a->len; i++) {
        const unsigned char *h = a->data + off;
        uint32_t n = (uint32_t)h[0] | (uint32_t)h[1] << 8 |
                     (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        off += 4 + n;
    }
    return off;
}

/* Turns an accumulated input into its tensor: shape (with the batch
 * dimension in the row format) and the first elements of that shape (an
 * instance object that repeats a key adds values TF also drops). */
static osp_error *make_tensor(const input_acc *a, bool row, int64_t batch,
                              tfs_tensor *t) {
    size_t rank = a->rank + (row ? 1 : 0);
    if (rank > OSP_MAX_DIMS)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "input '%s' has %zu dimensions; Osprey supports "
                             "at most %d",
                             a->spec->key, rank, OSP_MAX_DIMS);
    t->key = a->spec->key;
    t->dtype = a->spec->dtype;
    t->shape.rank = (int)rank;
    size_t d = 0;
    if (row)
        t->shape.dims[d++] = batch;
    for (size_t i = 0; i < a->rank; i++)
        t->shape.dims[d++] = a->shape[i];
    int64_t count = 0;
    if (!osp_shape_element_count(&t->shape, &count))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "input '%s' has too many elements", a->spec->key);
    size_t bytes = prefix_bytes(a, count);
    if (bytes > a->len)
        bytes = a->len;
    t->data = osp_buffer_new_host(bytes);
    if (!t->data)
        return oom_error();
    if (bytes)
        memcpy(t->data->data, a->data, bytes);
    return NULL;
}

void tfs_tensors_free(tfs_tensor *tensors, size_t n) {
    if (!tensors)
        return;
    for (size_t i = 0; i < n; i++)
        osp_buffer_free(tensors[i].data);
    free(tensors);
}

osp_error *tfs_predict_inputs(const tfs_body *body, const tfs_input_spec *specs,
                              size_t n, size_t max_bytes, tfs_format *format,
                              tfs_tensor **tensors) {
    osp_error *err = NULL;
    predict_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    tfs_tensor *out = NULL;
    tfs_format fmt = TFS_FORMAT_ROW;
    const tj_value *root = tj_doc_root(body->doc);
    if (n == 0) {
        err = osp_error_new(
            OSP_ERROR_INVALID_ARG, "Failed to get input map for signature: %s",
            strcmp(body->signature_name, TFS_DEFAULT_SIGNATURE) == 0
                ? "DEFAULT"
                : body->signature_name);
        goto out;
    }
    ctx.n = n;
    ctx.max_bytes = max_bytes;
    ctx.acc = calloc(n, sizeof *ctx.acc);
    out = calloc(n, sizeof *out);
    if (!ctx.acc || !out) {
        err = oom_error();
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        ctx.acc[i].spec = &specs[i];

    const tj_value *instances = tj_find(root, "instances");
    const tj_value *inputs = tj_find(root, "inputs");
    if (instances) {
        if (inputs) {
            err = value_error(OSP_ERROR_INVALID_ARG, root,
                              " Not formatted correctly expecting only one of "
                              "'inputs' or 'instances' keys to exist ");
            goto out;
        }
        if (instances->type != TJ_ARRAY) {
            err = value_error(OSP_ERROR_INVALID_ARG, root,
                              " Expecting 'instances' to be an list/array");
            goto out;
        }
        if (instances->n == 0) {
            err = value_error(OSP_ERROR_INVALID_ARG, root,
                              " No values in 'instances' array");
            goto out;
        }
        fmt = TFS_FORMAT_ROW;
        if ((err = fill_rows(&ctx, instances)))
            goto out;
        for (size_t i = 0; i < n; i++)
            if ((err = make_tensor(&ctx.acc[i], true, instances->n, &out[i])))
                goto out;
    } else if (inputs) {
        fmt = TFS_FORMAT_COLUMNAR;
        if ((err = fill_columns(&ctx, inputs)))
            goto out;
        for (size_t i = 0; i < n; i++)
            if ((err = make_tensor(&ctx.acc[i], false, 0, &out[i])))
                goto out;
    } else {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Missing 'inputs' or 'instances' key");
        goto out;
    }
    *format = fmt;
    *tensors = out;
    out = NULL;
out:
    tfs_tensors_free(out, n);
    if (ctx.acc) {
        for (size_t i = 0; i < n; i++) {
            free(ctx.acc[i].data);
            free(ctx.acc[i].shape);
        }
        free(ctx.acc);
    }
    free(ctx.dims);
    free(ctx.walk);
    free(ctx.walk_next);
    return err;
}

/* ---- predict: tensors to JSON ---- */

/* TF's WriteDecimal text of a float or double (is_float picks the
 * round-trip parse and the full precision): %.6g when it reads back
 * exactly, else %.9g / %.17g; ".0" when neither '.' nor 'e' appears. */
static size_t write_decimal(double v, bool is_float, char *buf, size_t cap) {
    if (isnan(v))
        return (size_t)snprintf(buf, cap, "NaN");
    if (isinf(v))
        return (size_t)snprintf(buf, cap, "%s",
                                signbit(v) ? "-Infinity" : "Infinity");
    snprintf(buf, cap, "%.6g", v);
    bool same =
        is_float ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v;
    if (!same)
        snprintf(buf, cap, is_float ? "%.9g" : "%.17g", v);
    if (!strchr(buf, '.') && !strchr(buf, 'e'))
        strncat(buf, ".0", cap - strlen(buf) - 1);
    return strlen(buf);
}

static bool write_decimal_token(tjw *w, double v, bool is_float) {
    char buf[48];
    size_t n = write_decimal(v, is_float, buf, sizeof buf);
    return tjw_raw_number(w, buf, n);
}

/* Where writing one output has got to. */
typedef struct out_cursor {
    const tfs_output *o;
    bool as_bytes; /* a DT_STRING output named *_bytes: {"b64": ...} */
    int64_t index;
    size_t offset; /* byte offset of element `index` */
} out_cursor;

static osp_error *write_unsupported(const tfs_output *o) {
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "Failed to write JSON value for tensor type: %s",
                         tfs_dtype_string(o->dtype));
}

/* TF's AddSingleValueAndAdvance. */
static osp_error *write_single(tjw *w, out_cursor *c) {
    const tfs_output *o = c->o;
    const unsigned char *p = (const unsigned char *)o->data + c->offset;
    size_t el = osp_datatype_byte_size(o->dtype);
    switch (o->dtype) {
    case OSP_TYPE_FP32: {
        float f;
        memcpy(&f, p, 4);
        write_decimal_token(w, f, true);
        break;
    }
    case OSP_TYPE_FP64: {
        double d;
        memcpy(&d, p, 8);
        write_decimal_token(w, d, false);
        break;
    }
    case OSP_TYPE_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        tjw_int64(w, x);
        break;
    }
    case OSP_TYPE_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        tjw_int64(w, x);
        break;
    }
    case OSP_TYPE_INT8:
        tjw_int64(w, (int8_t)p[0]);
        break;
    case OSP_TYPE_UINT8:
        tjw_int64(w, p[0]);
        break;
    case OSP_TYPE_INT64: {
        int64_t x;
        memcpy(&x, p, 8);
        tjw_int64(w, x);
        break;
    }
    case OSP_TYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        tjw_uint64(w, x);
        break;
    }
    case OSP_TYPE_UINT64: {
        uint64_t x;
        memcpy(&x, p, 8);
        tjw_uint64(w, x);
        break;
    }
    case OSP_TYPE_BOOL:
        tjw_bool(w, p[0] != 0);
        break;
    case OSP_TYPE_BYTES: {
        uint32_t n = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        el = 4 + (size_t)n;
        if (c->as_bytes) {
            bytebuf b64;
            bytebuf_init(&b64);
            b64_escape(&b64, p + 4, n);
            tjw_start_object(w);
            tjw_key(w, "b64", 3);
            tjw_string(w, b64.data ? b64.data : "", b64.len);
            tjw_end_object(w);
            bool oom = b64.oom;
            bytebuf_free(&b64);
            if (oom)
                return oom_error();
        } else {
            tjw_string(w, (const char *)p + 4, n);
        }
        break;
    }
    default:
        return write_unsupported(o);
    }
    c->index++;
    c->offset += el;
    return NULL;
}

/* TF's AddTensorValues from dimension `dim` (recursion bounded by the
 * rank, at most OSP_MAX_DIMS). */
static osp_error *write_values(tjw *w, out_cursor *c, int dim) {
    const osp_shape *s = &c->o->shape;
    if (dim > s->rank - 1)
        return write_single(w, c);
    tjw_start_array(w);
    for (int64_t i = 0; i < s->dims[dim]; i++) {
        osp_error *err = dim == s->rank - 1 ? write_single(w, c)
                                            : write_values(w, c, dim + 1);
        if (err)
            return err;
    }
    tjw_end_array(w);
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Checks that an output's bytes cover its shape (an Osprey invariant, not
 * a TF check). */
static osp_error *check_output(const tfs_output *o) {
    int64_t count;
    if (o->shape.rank < 0 || o->shape.rank > OSP_MAX_DIMS ||
        !osp_shape_element_count(&o->shape, &count) || count < 0)
        return osp_error_new(OSP_ERROR_INTERNAL, "output '%s' has a bad shape",
                             o->name);
    if (o->dtype == OSP_TYPE_BYTES) {
        size_t off = 0;
        for (int64_t i = 0; i < count; i++) {
            if (o->byte_size - off < 4)
                goto short_data;
            const unsigned char *h = (const unsigned char *)o->data + off;
            uint32_t n = (uint32_t)h[0] | (uint32_t)h[1] << 8 |
                         (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
            off += 4;
            if (o->byte_size - off < n)
                goto short_data;
            off += n;
        }
        return NULL;
    }
    size_t el = osp_datatype_byte_size(o->dtype);
    if (el && (uint64_t)count > o->byte_size / el)
        goto short_data;
    return NULL;
short_data:
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "output '%s' has %zu bytes, too few for its shape",
                         o->name, o->byte_size);
}

osp_error *tfs_write_predict(tfs_format format, const tfs_output *outputs,
                             size_t n, bytebuf *out) {
    osp_error *err = NULL;
    out_cursor *cur = NULL;
    size_t start = out->len;
    tjw w;
    tjw_init(&w, out, 0);
    if (n == 0) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Cannot convert empty tensor map to JSON");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if ((err = check_output(&outputs[i])))
            goto out;
    cur = calloc(n, sizeof *cur);
    if (!cur) {
        err = oom_error();
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        cur[i].o = &outputs[i];
        cur[i].as_bytes = outputs[i].dtype == OSP_TYPE_BYTES &&
                          ends_with(outputs[i].name, "_bytes");
    }
    bool multi = n > 1;
    if (format == TFS_FORMAT_ROW) {
        int64_t batch = -1;
        for (size_t i = 0; i < n; i++) {
            const tfs_output *o = &outputs[i];
            if (o->shape.rank == 0) {
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "Tensor name: %s has no shape information ",
                                    o->name);
                goto out;
            }
            if (batch >= 0 && batch != o->shape.dims[0]) {
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "Tensor name: %s has inconsistent batch "
                                    "size: %lld expecting: %lld",
                                    o->name, (long long)o->shape.dims[0],
                                    (long long)batch);
                goto out;
            }
            batch = o->shape.dims[0];
        }
        tjw_start_object(&w);
        tjw_key(&w, "predictions", 11);
        tjw_start_array(&w);
        for (int64_t item = 0; item < batch; item++) {
            if (multi)
                tjw_start_object(&w);
            w.single_line_arrays = true;
            for (size_t i = 0; i < n; i++) {
                if (multi)
                    tjw_key(&w, outputs[i].name, strlen(outputs[i].name));
                if ((err = write_values(&w, &cur[i], 1)))
                    goto out;
            }
            w.single_line_arrays = false;
            if (multi)
                tjw_end_object(&w);
        }
        tjw_end_array(&w);
        tjw_end_object(&w);
    } else {
        tjw_start_object(&w);
        tjw_key(&w, "outputs", 7);
        if (multi)
            tjw_start_object(&w);
        for (size_t i = 0; i < n; i++) {
            if (multi)
                tjw_key(&w, outputs[i].name, strlen(outputs[i].name));
            if ((err = write_values(&w, &cur[i], 0)))
                goto out;
        }
        if (multi)
            tjw_end_object(&w);
        tjw_end_object(&w);
    }
    if (out->oom)
        err = oom_error();
out:
    if (err && !out->oom)
        out->len = start;
    free(cur);
    tjw_destroy(&w);
    return err;
}

/* ---- classify and regress ---- */

osp_error *tfs_write_classify(size_t n, size_t k, const char *const *labels,
                              const float *scores, bytebuf *out) {
    if (n == 0)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "Cannot convert empty ClassificationResults to JSON");
    tjw w;
    tjw_init(&w, out, 0);
    tjw_start_object(&w);
    tjw_key(&w, "results", 7);
    tjw_start_array(&w);
    for (size_t e = 0; e < n; e++) {
        w.single_line_arrays = true;
        tjw_start_array(&w);
        for (size_t c = 0; c < k; c++) {
            const char *label = labels ? labels[e * k + c] : "";
            if (!label)
                label = "";
            tjw_start_array(&w);
            tjw_string(&w, label, strlen(label));
            write_decimal_token(&w, scores ? scores[e * k + c] : 0.0f, true);
            tjw_end_array(&w);
        }
        tjw_end_array(&w);
        w.single_line_arrays = false;
    }
    tjw_end_array(&w);
    tjw_end_object(&w);
    tjw_destroy(&w);
    return out->oom ? oom_error() : NULL;
}

osp_error *tfs_write_regress(const float *values, size_t n, bytebuf *out) {
    if (n == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Cannot convert empty RegressionResults to JSON");
    tjw w;
    tjw_init(&w, out, 0);
    tjw_start_object(&w);
    tjw_key(&w, "results", 7);
    w.single_line_arrays = true;
    tjw_start_array(&w);
    for (size_t i = 0; i < n; i++)
        write_decimal_token(&w, values[i], true);
    tjw_end_array(&w);
    tjw_end_object(&w);
    tjw_destroy(&w);
    return out->oom ? oom_error() : NULL;
}

void tfs_write_error(const char *message, bytebuf *out) {
    tjw w;
    tjw_init(&w, out, 0);
    tjw_start_object(&w);
    tjw_key(&w, "error", 5);
    tjw_string(&w, message, strlen(message));
    tjw_end_object(&w);
    tjw_destroy(&w);
}

/* ---- classify and regress: the examples ---- */

struct tfs_examples {
    tj_doc *arena; /* every feature, value and name lives here */
    tfs_example *examples;
    size_t n;
};

size_t tfs_examples_count(const tfs_examples *ex) {
    return ex->n;
}

const tfs_example *tfs_examples_at(const tfs_examples *ex, size_t i) {
    return i < ex->n ? &ex->examples[i] : NULL;
}

const tfs_feature *tfs_example_feature(const tfs_example *ex,
                                       const char *name) {
    for (size_t i = 0; i < ex->n_features; i++)
        if (strcmp(ex->features[i].name, name) == 0)
            return &ex->features[i];
    return NULL;
}

void tfs_examples_free(tfs_examples *ex) {
    if (!ex)
        return;
    tj_doc_free(ex->arena);
    free(ex);
}

/* The values of one feature while it is read (heap), before they move to
 * the arena. */
typedef struct feature_builder {
    tfs_feature_kind kind;
    size_t n, cap;
    float *floats;
    int64_t *ints;
    const char **bytes;
    size_t *lens;
} feature_builder;

static void feature_builder_reset(feature_builder *b) {
    free(b->floats);
    free(b->ints);
    free(b->bytes);
    free(b->lens);
    memset(b, 0, sizeof *b);
}

static bool feature_builder_room(feature_builder *b) {
    if (b->n < b->cap)
        return true;
    size_t cap = b->cap ? b->cap * 2 : 8;
    switch (b->kind) {
    case TFS_FEATURE_FLOAT: {
        float *p = realloc(b->floats, cap * sizeof *p);
        if (!p)
            return false;
        b->floats = p;
        break;
    }
    case TFS_FEATURE_INT64: {
        int64_t *p = realloc(b->ints, cap * sizeof *p);
        if (!p)
            return false;
        b->ints = p;
        break;
    }
    default: {
        const char **p = realloc(b->bytes, cap * sizeof *p);
        if (!p)
            return false;
        b->bytes = p;
        size_t *l = realloc(b->lens, cap * sizeof *l);
        if (!l)
            return false;
        b->lens = l;
        break;
    }
    }
    b->cap = cap;
    return true;
}

static const char *kind_name(tfs_feature_kind k) {
    switch (k) {
    case TFS_FEATURE_BYTES:
        return "bytes";
    case TFS_FEATURE_FLOAT:
        return "float";
    case TFS_FEATURE_INT64:
        return "int64";
    default:
        return "UNKNOWN";
    }
}

/* TF's IsFeatureOfKind, setting the kind on the first value. */
static osp_error *feature_kind(feature_builder *b, const char *name,
                               tfs_feature_kind kind) {
    if (b->kind != TFS_FEATURE_EMPTY && b->kind != kind)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Unexpected element type in feature: %s "
                             "expecting type: %s",
                             name, kind_name(b->kind));
    b->kind = kind;
    return feature_builder_room(b) ? NULL : oom_error();
}

/* TF's AddValueToFeature. Bytes are copied into the arena. */
static osp_error *add_feature_value(tj_doc *arena, feature_builder *b,
                                    const char *name, const tj_value *v) {
    osp_error *err;
    const tj_value *str;
    switch (v->type) {
    case TJ_FALSE:
    case TJ_TRUE:
        if ((err = feature_kind(b, name, TFS_FEATURE_INT64)))
            return err;
        b->ints[b->n++] = v->type == TJ_TRUE;
        return NULL;
    case TJ_OBJECT: {
        if (!tj_is_b64_object(v, &str))
            break;
        if ((err = feature_kind(b, name, TFS_FEATURE_BYTES)))
            return err;
        unsigned char *dec = tj_doc_alloc(arena, (size_t)str->n / 4 * 3 + 3);
        if (!dec)
            return oom_error();
        size_t n = 0;
        if (!b64_unescape(str->u.s, str->n, dec, &n))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Unable to base64 decode");
        b->bytes[b->n] = (const char *)dec;
        b->lens[b->n++] = n;
        return NULL;
    }
    case TJ_STRING:
        if ((err = feature_kind(b, name, TFS_FEATURE_BYTES)))
            return err;
        /* The document's string is not the examples' to keep. */
        {
            char *copy = tj_doc_alloc(arena, (size_t)v->n + 1);
            if (!copy)
                return oom_error();
            memcpy(copy, v->u.s, v->n);
            copy[v->n] = '\0';
            b->bytes[b->n] = copy;
            b->lens[b->n++] = v->n;
        }
        return NULL;
    case TJ_NUMBER:
        if (v->num & TJ_NUM_DOUBLE) {
            if ((err = feature_kind(b, name, TFS_FEATURE_FLOAT)))
                return err;
            b->floats[b->n++] = (float)v->u.d;
            return NULL;
        }
        if ((err = feature_kind(b, name, TFS_FEATURE_INT64)))
            return err;
        if (!(v->num & TJ_NUM_INT64))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Feature: %s has uint64_t element. Only "
                                 "int64_t is supported.",
                                 name);
        b->ints[b->n++] = v->u.i;
        return NULL;
    default:
        break;
    }
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "Feature: %s has element with unexpected JSON type: "
                         "%s",
                         name, tj_type_name(v));
}

/* Moves a built feature's values into the arena. */
static osp_error *feature_finish(tj_doc *arena, feature_builder *b,
                                 const char *name, tfs_feature *f) {
    memset(f, 0, sizeof *f);
    f->name = name;
    f->kind = b->kind;
    f->n = b->n;
    if (b->n == 0)
        return NULL;
    switch (b->kind) {
    case TFS_FEATURE_FLOAT: {
        float *p = tj_doc_alloc(arena, b->n * sizeof *p);
        if (!p)
            return oom_error();
        memcpy(p, b->floats, b->n * sizeof *p);
        f->floats = p;
        break;
    }
    case TFS_FEATURE_INT64: {
        int64_t *p = tj_doc_alloc(arena, b->n * sizeof *p);
        if (!p)
            return oom_error();
        memcpy(p, b->ints, b->n * sizeof *p);
        f->ints = p;
        break;
    }
    default: {
        const char **p = tj_doc_alloc(arena, b->n * sizeof *p);
        size_t *l = tj_doc_alloc(arena, b->n * sizeof *l);
        if (!p || !l)
            return oom_error();
        memcpy(p, b->bytes, b->n * sizeof *p);
        memcpy(l, b->lens, b->n * sizeof *l);
        f->bytes = p;
        f->lens = l;
        break;
    }
    }
    return NULL;
}

/* TF's MakeExampleFromJsonObject: the features of one object (a repeated
 * name keeps its last value, as the proto map assignment does). */
static osp_error *make_example(tj_doc *arena, const tj_value *val,
                               tfs_example *ex) {
    if (val->type != TJ_OBJECT)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Example must be JSON object but got JSON %s",
                             tj_type_name(val));
    osp_error *err = NULL;
    feature_builder b;
    memset(&b, 0, sizeof b);
    tfs_feature *features = NULL;
    size_t n = 0;
    if (val->n) {
        features = tj_doc_alloc(arena, val->n * sizeof *features);
        if (!features)
            return oom_error();
    }
    for (uint32_t m = 0; m < val->n; m++) {
        const tj_member *mem = &val->u.members[m];
        /* TF copies the key as a C string: it ends at a NUL. */
        size_t name_len = strlen(mem->name.u.s);
        char *name = tj_doc_alloc(arena, name_len + 1);
        if (!name) {
            err = oom_error();
            goto out;
        }
        memcpy(name, mem->name.u.s, name_len + 1);
        feature_builder_reset(&b);
        const tj_value *content = &mem->value;
        if (content->type == TJ_ARRAY) {
            for (uint32_t i = 0; i < content->n; i++)
                if ((err = add_feature_value(arena, &b, name,
                                             &content->u.items[i])))
                    goto out;
        } else if ((err = add_feature_value(arena, &b, name, content))) {
            goto out;
        }
        size_t slot = n;
        for (size_t i = 0; i < n; i++)
            if (strcmp(features[i].name, name) == 0)
                slot = i;
        if ((err = feature_finish(arena, &b, name, &features[slot])))
            goto out;
        if (slot == n)
            n++;
    }
    ex->features = features;
    ex->n_features = n;
out:
    feature_builder_reset(&b);
    return err;
}

/* The example's features, then the context's it does not name (the
 * server's context_bytes + example_bytes merge). */
static osp_error *merge_context(tj_doc *arena, const tfs_example *ctx,
                                tfs_example *ex) {
    size_t n = ex->n_features;
    tfs_feature *merged =
        tj_doc_alloc(arena, (n + ctx->n_features) * sizeof *merged);
    if (!merged)
        return oom_error();
    copy_bytes(merged, ex->features, n * sizeof *merged);
    for (size_t i = 0; i < ctx->n_features; i++)
        if (!tfs_example_feature(ex, ctx->features[i].name))
            merged[n++] = ctx->features[i];
    ex->features = merged;
    ex->n_features = n;
    return NULL;
}

osp_error *tfs_parse_examples(const tfs_body *body, tfs_examples **out) {
    osp_error *err = NULL;
    const tj_value *root = tj_doc_root(body->doc);
    tfs_examples *ex = calloc(1, sizeof *ex);
    if (!ex || !(ex->arena = tj_doc_new())) {
        err = oom_error();
        goto out;
    }
    tfs_example context = {0};
    const tj_value *ctx = tj_find(root, "context");
    if (ctx && (err = make_example(ex->arena, ctx, &context)))
        goto out;
    const tj_value *list = tj_find(root, "examples");
    if (!list) {
        err = value_error(OSP_ERROR_INVALID_ARG, root,
                          " When method is classify, key 'examples' is "
                          "expected and was not found");
        goto out;
    }
    if (list->type != TJ_ARRAY) {
        err = value_error(OSP_ERROR_INVALID_ARG, root,
                          " Expecting 'examples' value to be an list/array");
        goto out;
    }
    if (list->n == 0) {
        err = value_error(OSP_ERROR_INVALID_ARG, root,
                          " 'examples' value is an empty array");
        goto out;
    }
    ex->examples = tj_doc_alloc(ex->arena, list->n * sizeof *ex->examples);
    if (!ex->examples) {
        err = oom_error();
        goto out;
    }
    memset(ex->examples, 0, list->n * sizeof *ex->examples);
    for (uint32_t i = 0; i < list->n; i++) {
        tfs_example *e = &ex->examples[i];
        if ((err = make_example(ex->arena, &list->u.items[i], e)))
            goto out;
        if (ctx && (err = merge_context(ex->arena, &context, e)))
            goto out;
    }
    ex->n = list->n;
    *out = ex;
    ex = NULL;
out:
    tfs_examples_free(ex);
    return err;
}
