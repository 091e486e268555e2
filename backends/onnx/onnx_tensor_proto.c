/*
 * TensorProto -> onnx_tensor: data types, dims, the data in raw_data, in
 * the typed fields or in an external file, and the TensorProto files of
 * ONNX's test data sets.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host_memory.h"
#include "onnx_load_internal.h"

/* raw_data, like every ONNX byte layout, is little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the ONNX loader copies little-endian data as it is");

/* How deep a TensorProto file may nest (tensor, external_data entry). */
#define TENSOR_FILE_MAX_DEPTH 8u

/* Indexed by TensorProto.DataType; 17-23 came after onnx 1.12. */
static const struct {
    const char *name;
    osp_datatype dtype;
} datatypes[] = {
    {"UNDEFINED", OSP_TYPE_INVALID},
    {"FLOAT", OSP_TYPE_FP32},
    {"UINT8", OSP_TYPE_UINT8},
    {"INT8", OSP_TYPE_INT8},
    {"UINT16", OSP_TYPE_UINT16},
    {"INT16", OSP_TYPE_INT16},
    {"INT32", OSP_TYPE_INT32},
    {"INT64", OSP_TYPE_INT64},
    {"STRING", OSP_TYPE_BYTES},
    {"BOOL", OSP_TYPE_BOOL},
    {"FLOAT16", OSP_TYPE_FP16},
    {"DOUBLE", OSP_TYPE_FP64},
    {"UINT32", OSP_TYPE_UINT32},
    {"UINT64", OSP_TYPE_UINT64},
    {"COMPLEX64", OSP_TYPE_INVALID},
    {"COMPLEX128", OSP_TYPE_INVALID},
    {"BFLOAT16", OSP_TYPE_BF16},
    {"FLOAT8E4M3FN", OSP_TYPE_INVALID},
    {"FLOAT8E4M3FNUZ", OSP_TYPE_INVALID},
    {"FLOAT8E5M2", OSP_TYPE_INVALID},
    {"FLOAT8E5M2FNUZ", OSP_TYPE_INVALID},
    {"UINT4", OSP_TYPE_INVALID},
    {"INT4", OSP_TYPE_INVALID},
    {"FLOAT4E2M1", OSP_TYPE_INVALID},
};

#define N_DATATYPES ((int32_t)(sizeof datatypes / sizeof datatypes[0]))

osp_datatype onnx__datatype(int32_t onnx_type) {
    if (onnx_type < 0 || onnx_type >= N_DATATYPES)
        return OSP_TYPE_INVALID;
    return datatypes[onnx_type].dtype;
}

const char *onnx__datatype_name(int32_t onnx_type) {
    if (onnx_type < 0 || onnx_type >= N_DATATYPES)
        return "UNKNOWN";
    return datatypes[onnx_type].name;
}

void onnx__tensor_ctx_destroy(onnx__tensor_ctx *ctx) {
    free(ctx->base_real);
    ctx->base_real = NULL;
}

void onnx_tensor_clear(onnx_tensor *t) {
    if (!t)
        return;
    host_free_aligned(t->data, t->byte_size);
    memset(t, 0, sizeof *t);
}

/* INVALID_ARG "<what>: <why>". */
static osp_error *tensor_error(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static osp_error *tensor_error(const char *what, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return osp_error_new(OSP_ERROR_INVALID_ARG, "%s: %s", what, why);
}

/* Aligned memory for `size` bytes of tensor data, or NULL. */
static void *tensor_alloc(size_t size) {
    return host_alloc_aligned(size);
}

/* ---- external data ---- */

/* Parses a decimal offset or length: digits only, no sign, no overflow. */
static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s)
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

/* Whether `location` is relative and has no ".." component. */
static bool location_stays_inside(const char *location) {
    if (location[0] == '/')
        return false;
    const char *p = location;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return false;
        p += n;
        if (*p == '/')
            p++;
    }
    return true;
}

/* Whether `path` (resolved) lies under folder `dir` (resolved). */
static bool path_is_under(const char *path, const char *dir) {
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/')
        return path[0] == '/' && path[1] != '\0';
    return strncmp(path, dir, n) == 0 && path[n] == '/';
}

/* Reads `size` bytes at `offset` of fd into buf; false on error or EOF. */
static bool read_fully_at(int fd, uint8_t *buf, size_t size, uint64_t offset) {
    size_t done = 0;
    while (done < size) {
        ssize_t got =
            pread(fd, buf + done, size - done, (off_t)(offset + done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        done += (size_t)got;
    }
    return true;
}

/*
 * Reads external data of `need` bytes for tensor `what` into *data (aligned,
 * caller owns). The entries say where: "location" (relative to
 * ctx->base_dir, not leaving it, also through symlinks), "offset" (default
 * 0) and "length" (default: to the end of the file; must equal need).
 */
static osp_error *read_external(onnx__tensor_ctx *ctx,
                                const Onnx__TensorProto *tp, const char *what,
                                size_t need, void **data) {
    osp_error *err = NULL;
    const char *location = NULL, *offset_text = NULL, *length_text = NULL;
    char *full = NULL, *real = NULL;
    void *buf = NULL;
    int fd = -1;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        if (!e->key)
            continue;
        if (strcmp(e->key, "location") == 0)
            location = e->value;
        else if (strcmp(e->key, "offset") == 0)
            offset_text = e->value;
        else if (strcmp(e->key, "length") == 0)
            length_text = e->value;
    }
    if (!location || !*location)
        return tensor_error(what, "external data without a location");
    if (!location_stays_inside(location))
        return tensor_error(what,
                            "external data location '%s' leaves the model's "
                            "folder (absolute, or with a '..')",
                            location);
    if (!ctx->base_dir)
        return tensor_error(what,
                            "external data '%s', but the model was given as "
                            "bytes without a folder",
                            location);
    uint64_t offset = 0, length = 0;
    if (offset_text && !parse_u64(offset_text, &offset))
        return tensor_error(what, "external data offset '%s' is not a number",
                            offset_text);
    if (length_text && !parse_u64(length_text, &length))
        return tensor_error(what, "external data length '%s' is not a number",
                            length_text);

    if (!ctx->base_real) {
        ctx->base_real = realpath(ctx->base_dir, NULL);
        if (!ctx->base_real)
            return tensor_error(what, "cannot resolve the model's folder: %s",
                                strerror(errno));
    }
    size_t full_len = strlen(ctx->base_dir) + 1 + strlen(location) + 1;
    full = malloc(full_len);
    if (!full) {
        err = osp_error_out_of_memory();
        goto out;
    }
    snprintf(full, full_len, "%s/%s", ctx->base_dir, location);
    real = realpath(full, NULL);
    if (!real) {
        err = tensor_error(what, "external data file '%s': %s", location,
                           strerror(errno));
        goto out;
    }
    if (!path_is_under(real, ctx->base_real)) {
        err = tensor_error(what,
                           "external data file '%s' lies outside the model's "
                           "folder",
                           location);
        goto out;
    }
    fd = open(real, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        err = tensor_error(what, "cannot open external data file '%s': %s",
                           location, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        err = tensor_error(what, "external data '%s' is not a regular file",
                           location);
        goto out;
    }
    uint64_t file_size = (uint64_t)st.st_size;
    if (offset > file_size) {
        err = tensor_error(what,
                           "external data offset %llu lies past the end of "
                           "'%s' (%llu bytes)",
                           (unsigned long long)offset, location,
                           (unsigned long long)file_size);
        goto out;
    }
    if (!length_text)
        length = file_size - offset;
    if (length > file_size - offset) {
        err =
            tensor_error(what,
                         "external data at offset %llu, length %llu runs "
                         "past the end of '%s' (%llu bytes)",
                         (unsigned long long)offset, (unsigned long long)length,
                         location, (unsigned long long)file_size);
        goto out;
    }
    if (length != need) {
        err = tensor_error(what,
                           "external data in '%s' has %llu bytes, but the "
                           "tensor's type and dims need %zu",
                           location, (unsigned long long)length, need);
        goto out;
    }
    buf = tensor_alloc(need);
    if (!buf) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if (!read_fully_at(fd, buf, need, offset)) {
        err =
            tensor_error(what, "cannot read external data file '%s'", location);
        goto out;
    }
    *data = buf;
    buf = NULL;
out:
    host_free_aligned(buf, need);
    if (fd >= 0)
        close(fd);
    free(real);
    free(full);
    return err;
}

/* ---- the typed fields ---- */

/* The typed field that carries values of `onnx_type`, by field number. */
static unsigned typed_field_for(int32_t onnx_type) {
    switch (onnx_type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        return 4; /* float_data */
    case ONNX__TENSOR_PROTO__DATA_TYPE__STRING:
        return 6; /* string_data */
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        return 7; /* int64_data */
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        return 10; /* double_data */
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
        return 11; /* uint64_data */
    default:
        return 5; /* int32_data: INT32 and the narrower types */
    }
}

/* Number of values in typed field `field` of tp, and its name. */
static size_t typed_count(const Onnx__TensorProto *tp, unsigned field,
                          const char **name) {
    switch (field) {
    case 4:
        *name = "float_data";
        return tp->n_float_data;
    case 5:
        *name = "int32_data";
        return tp->n_int32_data;
    case 6:
        *name = "string_data";
        return tp->n_string_data;
    case 7:
        *name = "int64_data";
        return tp->n_int64_data;
    case 10:
        *name = "double_data";
        return tp->n_double_data;
    default:
        *name = "uint64_data";
        return tp->n_uint64_data;
    }
}

static const unsigned typed_fields[] = {4, 5, 6, 7, 10, 11};

/* The first typed field other than `except` that holds values, or 0. */
static unsigned other_typed_field(const Onnx__TensorProto *tp,
                                  unsigned except) {
    for (size_t i = 0; i < sizeof typed_fields / sizeof typed_fields[0]; i++) {
        const char *name;
        if (typed_fields[i] != except &&
            typed_count(tp, typed_fields[i], &name))
            return typed_fields[i];
    }
    return 0;
}

/* Writes `count` values of the typed field of tp->data_type into dst
 * (need bytes), narrowing int32_data to the element size. */
static void copy_typed(const Onnx__TensorProto *tp, osp_datatype dtype,
                       size_t count, uint8_t *dst) {
    if (count == 0)
        return; /* the fields may be NULL */
    switch (typed_field_for(tp->data_type)) {
    case 4:
        memcpy(dst, tp->float_data, count * sizeof(float));
        return;
    case 7:
        memcpy(dst, tp->int64_data, count * sizeof(int64_t));
        return;
    case 10:
        memcpy(dst, tp->double_data, count * sizeof(double));
        return;
    case 11:
        if (dtype == OSP_TYPE_UINT64) {
            memcpy(dst, tp->uint64_data, count * sizeof(uint64_t));
        } else {
            for (size_t i = 0; i < count; i++) {
                uint32_t v = (uint32_t)tp->uint64_data[i];
                memcpy(dst + 4 * i, &v, 4);
            }
        }
        return;
    default:
        break;
    }
    /* int32_data: INT32 as is; 16-bit types (FLOAT16 and BFLOAT16 as their
     * bit patterns) and 8-bit types keep the low bytes; BOOL is 0 or 1. */
    size_t elem = osp_datatype_byte_size(dtype);
    for (size_t i = 0; i < count; i++) {
        int32_t v = tp->int32_data[i];
        if (dtype == OSP_TYPE_BOOL) {
            dst[i] = v != 0;
        } else if (elem == 1) {
            dst[i] = (uint8_t)v;
        } else if (elem == 2) {
            uint16_t h = (uint16_t)v;
            memcpy(dst + 2 * i, &h, 2);
        } else {
            memcpy(dst + 4 * i, &v, 4);
        }
    }
}

/* Builds the BYTES serialisation of string_data (4-byte LE length, then
 * the bytes, per element) within max_bytes. */
static osp_error *strings_to_bytes(const Onnx__TensorProto *tp,
                                   const char *what, uint64_t max_bytes,
                                   void **data, size_t *size) {
    uint64_t total = 0;
    for (size_t i = 0; i < tp->n_string_data; i++) {
        uint64_t len = tp->string_data[i].len;
        if (len > UINT32_MAX)
            return tensor_error(what, "string %zu is longer than 4 GiB", i);
        total += 4 + len; /* no overflow: each len came from memory */
        if (total > max_bytes)
            return tensor_error(what,
                                "its strings take more than the limit of "
                                "%llu bytes",
                                (unsigned long long)max_bytes);
    }
    uint8_t *buf = tensor_alloc((size_t)total);
    if (!buf)
        return osp_error_out_of_memory();
    uint8_t *p = buf;
    for (size_t i = 0; i < tp->n_string_data; i++) {
        uint32_t len = (uint32_t)tp->string_data[i].len;
        uint8_t le[4] = {(uint8_t)len, (uint8_t)(len >> 8),
                         (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
        memcpy(p, le, 4);
        if (len)
            memcpy(p + 4, tp->string_data[i].data, len);
        p += 4 + (size_t)len;
    }
    *data = buf;
    *size = (size_t)total;
    return NULL;
}

/* Sets shape from tp's dims and *count to its element count, checking the
 * rank, that no dim is negative and that the count does not overflow. */
static osp_error *tensor_shape(const Onnx__TensorProto *tp, const char *what,
                               osp_shape *shape, uint64_t *count) {
    if (tp->n_dims > OSP_MAX_DIMS)
        return tensor_error(what, "rank %zu is more than the %d supported",
                            tp->n_dims, OSP_MAX_DIMS);
    shape->rank = (int)tp->n_dims;
    uint64_t n = 1;
    for (size_t i = 0; i < tp->n_dims; i++) {
        int64_t d = tp->dims[i];
        if (d < 0)
            return tensor_error(what, "dimension %zu is negative (%lld)", i,
                                (long long)d);
        shape->dims[i] = d;
    }
    /* A zero dim makes any product 0; check overflow only otherwise. */
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] == 0) {
            *count = 0;
            return NULL;
        }
    }
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (__builtin_mul_overflow(n, (uint64_t)tp->dims[i], &n) ||
            n > (uint64_t)INT64_MAX)
            return tensor_error(what,
                                "its dims' element count overflows (dim %zu "
                                "is %lld)",
                                i, (long long)tp->dims[i]);
    }
    *count = n;
    return NULL;
}

osp_error *onnx__tensor_from_proto(onnx__tensor_ctx *ctx, Onnx__TensorProto *tp,
                                   const char *what, onnx_tensor *out) {
    osp_error *err = NULL;
    void *data = NULL;
    size_t size = 0;
    onnx_tensor t = {0};

    if (!tp->has_data_type ||
        tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED)
        return tensor_error(what, "no data type");
    t.dtype = onnx__datatype(tp->data_type);
    if (t.dtype == OSP_TYPE_INVALID)
        return tensor_error(what, "data type %s (%d) is not supported",
                            onnx__datatype_name(tp->data_type),
                            (int)tp->data_type);
    if (tp->segment)
        return tensor_error(what, "segmented tensors are not supported");
    uint64_t count = 0;
    err = tensor_shape(tp, what, &t.shape, &count);
    if (err)
        return err;
    char shape_text[64];
    osp_shape_format(&t.shape, shape_text, sizeof shape_text);

    /* Bytes the dims call for (BYTES: counted from the strings below). */
    uint64_t need = 0;
    size_t elem = osp_datatype_byte_size(t.dtype);
    if (t.dtype != OSP_TYPE_BYTES) {
        if (__builtin_mul_overflow(count, (uint64_t)elem, &need) ||
            need > ctx->max_tensor_bytes || need > SIZE_MAX)
            return tensor_error(what,
                                "%s %s needs more than the limit of %llu "
                                "bytes",
                                onnx__datatype_name(tp->data_type), shape_text,
                                (unsigned long long)ctx->max_tensor_bytes);
    }

    bool external =
        tp->has_data_location &&
        tp->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT;
    if (external &&
        tp->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return tensor_error(what, "unknown data_location %d",
                            (int)tp->data_location);
    unsigned expected = typed_field_for(tp->data_type);
    const char *expected_name;
    size_t n_typed = typed_count(tp, expected, &expected_name);
    unsigned stray = other_typed_field(tp, expected);
    if (stray) {
        const char *stray_name;
        typed_count(tp, stray, &stray_name);
        return tensor_error(what, "%s values belong in %s, but it has %s",
                            onnx__datatype_name(tp->data_type), expected_name,
                            stray_name);
    }
    if ((external || tp->has_raw_data) && n_typed)
        return tensor_error(what, "it has both %s and %s", expected_name,
                            external ? "external data" : "raw_data");
    if (external && tp->has_raw_data)
        return tensor_error(what, "it has both raw_data and external data");
    if (t.dtype == OSP_TYPE_BYTES && (external || tp->has_raw_data))
        return tensor_error(what,
                            "STRING tensors keep their values in string_data "
                            "(not in raw_data or external data)");

    if (t.dtype == OSP_TYPE_BYTES) {
        if (n_typed != count)
            return tensor_error(what,
                                "string_data holds %zu strings, but its dims "
                                "%s call for %llu",
                                n_typed, shape_text, (unsigned long long)count);
        err = strings_to_bytes(tp, what, ctx->max_tensor_bytes, &data, &size);
        if (err)
            return err;
    } else if (external) {
        size = (size_t)need;
        err = read_external(ctx, tp, what, size, &data);
        if (err)
            return err;
    } else if (tp->has_raw_data) {
        if (tp->raw_data.len != need)
            return tensor_error(what,
                                "raw_data holds %zu bytes, but %s %s needs "
                                "%llu",
                                tp->raw_data.len,
                                onnx__datatype_name(tp->data_type), shape_text,
                                (unsigned long long)need);
        size = (size_t)need;
        data = tensor_alloc(size);
        if (!data)
            return osp_error_out_of_memory();
        if (size)
            memcpy(data, tp->raw_data.data, size);
        if (ctx->budget)
            onnx__pb_release_bytes(ctx->budget, &tp->raw_data);
    } else {
        if (n_typed != count)
            return tensor_error(what,
                                "%s holds %zu values, but its dims %s call "
                                "for %llu",
                                expected_name, n_typed, shape_text,
                                (unsigned long long)count);
        size = (size_t)need;
        data = tensor_alloc(size);
        if (!data)
            return osp_error_out_of_memory();
        copy_typed(tp, t.dtype, (size_t)count, data);
    }
    t.data = data;
    t.byte_size = size;
    *out = t;
    return NULL;
}

osp_error *onnx_tensor_load_pb_file(const char *path, onnx_tensor *out,
                                    char **name) {
    osp_error *err = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    char *dir = NULL, *name_copy = NULL;
    ProtobufCMessage *msg = NULL;
    onnx__pb_budget budget;
    onnx__tensor_ctx ctx = {.max_tensor_bytes = ONNX__DEFAULT_MAX_TENSOR_BYTES,
                            .budget = &budget};
    onnx_tensor t = {0};

    err = onnx__read_file(path, ONNX__DEFAULT_MAX_FILE_BYTES, "tensor", &bytes,
                          &len);
    if (err)
        goto out;
    err = onnx__pb_unpack(&onnx__tensor_proto__descriptor, bytes, len,
                          TENSOR_FILE_MAX_DEPTH, &budget, &msg);
    free(bytes);
    bytes = NULL;
    if (err)
        goto out;
    Onnx__TensorProto *tp = (Onnx__TensorProto *)msg;
    /* External data lies beside the file. */
    dir = strdup(path);
    name_copy = strdup(tp->name ? tp->name : "");
    if (!dir || !name_copy) {
        err = osp_error_out_of_memory();
        goto out;
    }
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    ctx.base_dir = dir;

    char what[300];
    snprintf(what, sizeof what, "tensor '%.256s'", name_copy);
    err = onnx__tensor_from_proto(&ctx, tp, what, &t);
    if (err)
        goto out;
    *out = t;
    *name = name_copy;
    name_copy = NULL;
out:
    if (err)
        err = osp_error_wrap(err, "%s", path);
    if (msg)
        onnx__pb_free(msg, &budget);
    onnx__tensor_ctx_destroy(&ctx);
    free(name_copy);
    free(dir);
    free(bytes);
    return err;
}
