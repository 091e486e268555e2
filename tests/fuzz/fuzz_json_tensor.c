/*
 * libFuzzer target for JSON tensor data (server/http/json_tensor.c), driven
 * the way kserve_infer.c's add_json_input drives it: the request text is
 * validated by json_scan, which locates inputs[0].data; BYTES are sized with
 * json_tensor_bytes_size, other types take shape x element size; then
 * json_tensor_decode fills an exact-size buffer. A decoded tensor is also
 * written back with json_tensor_encode and decoded again: the bytes must
 * come back the same. Build: see README.md.
 *
 * Input: byte 0 picks the datatype, byte 1 the rank (0-4), then one byte per
 * dimension (0-15, or 16-255 as they are with the top bit set); the rest is
 * the text of the `data` value, placed in
 *   {"inputs":[{"name":"x","datatype":..,"shape":..,"data":<rest>}]}
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_tensor.h"
#include "osprey/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Like --http-max-input-size, small enough to keep runs fast. */
#define MAX_INPUT_BYTES ((uint64_t)1 << 20)

static void check_error(osp_error *err) {
    osp_error_code code = osp_error_get_code(err);
    if (code != OSP_ERROR_INTERNAL && code != OSP_ERROR_INVALID_ARG)
        abort();
    osp_error_free(err);
}

/* Equal bytes, except that any NaN equals any NaN (JSON has one NaN). */
static bool same_values(osp_datatype dt, const uint8_t *a, const uint8_t *b,
                        size_t n) {
    if (dt == OSP_TYPE_FP32) {
        for (size_t i = 0; i + 4 <= n; i += 4) {
            float x, y;
            memcpy(&x, a + i, 4);
            memcpy(&y, b + i, 4);
            if (!(isnan(x) && isnan(y)) && memcmp(&x, &y, 4) != 0)
                return false;
        }
        return true;
    }
    if (dt == OSP_TYPE_FP64) {
        for (size_t i = 0; i + 8 <= n; i += 8) {
            double x, y;
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (!(isnan(x) && isnan(y)) && memcmp(&x, &y, 8) != 0)
                return false;
        }
        return true;
    }
    return n == 0 || memcmp(a, b, n) == 0;
}

/* kserve_infer.c's add_json_input, less the server: returns the decoded
 * bytes (caller frees) or NULL after an error. */
static uint8_t *decode_input(const char *text, const json_scan_info *info,
                             osp_datatype dt, const osp_shape *shape,
                             uint64_t *size_out) {
    osp_error *err;
    int64_t count;
    if (!osp_shape_element_count(shape, &count) || count == 0)
        return NULL; /* an error, or 'data' is not read at all */
    const json_span *span = NULL;
    for (size_t i = 0; i < info->n_spans; i++)
        if (info->spans[i].input_index == 0) {
            span = &info->spans[i];
            break;
        }
    const char *data = span ? text + span->start : "[]";
    size_t data_len = span ? span->end - span->start : 2;
    if (data[0] != '[')
        return NULL;
    uint64_t byte_size;
    if (dt == OSP_TYPE_BYTES) {
        size_t n;
        if ((err = json_tensor_bytes_size(data, data_len, &n))) {
            check_error(err);
            return NULL;
        }
        byte_size = n;
    } else {
        uint64_t es = osp_datatype_byte_size(dt);
        if (es > 1 && (uint64_t)count > (uint64_t)INT64_MAX / es)
            return NULL;
        byte_size = (uint64_t)count * es;
    }
    if (byte_size > MAX_INPUT_BYTES || dt == OSP_TYPE_FP16 ||
        dt == OSP_TYPE_BF16 || dt == OSP_TYPE_INVALID)
        return NULL;
    /* Exact size (malloc(0) included), so ASan catches overruns. */
    uint8_t *buf = malloc((size_t)byte_size);
    if (!buf && byte_size)
        return NULL;
    err = json_tensor_decode(data, data_len, dt,
                             dt == OSP_TYPE_BYTES ? (int64_t)byte_size : count,
                             buf);
    if (err) {
        check_error(err);
        free(buf);
        return NULL;
    }
    *size_out = byte_size;
    return buf;
}

/* Writes the decoded tensor back to JSON and decodes that again. */
static void check_round_trip(osp_datatype dt, const osp_shape *shape,
                             const uint8_t *bytes, uint64_t byte_size) {
    int64_t count;
    if (!osp_shape_element_count(shape, &count))
        abort();
    if (dt == OSP_TYPE_BYTES) {
        /* The element count is not checked on input (the core does that):
         * count the elements the bytes hold. */
        count = 0;
        for (uint64_t off = 0; off < byte_size; count++) {
            uint32_t n;
            memcpy(&n, bytes + off, 4);
            off += 4 + (uint64_t)n;
        }
    }
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_puts(&b, "{\"inputs\":[{\"data\":");
    size_t data_start = b.len;
    osp_error *err =
        json_tensor_encode(&b, "x", dt, bytes, (size_t)byte_size, count);
    if (err)
        abort(); /* any decoded tensor can be written */
    size_t data_end = b.len;
    bytebuf_puts(&b, "}]}");
    size_t len;
    char *text = bytebuf_take(&b, &len);
    if (!text)
        abort();
    json_scan_info info = {0};
    info.want_data_spans = true;
    if ((err = json_scan(text, len, &info)))
        abort(); /* the writer's output must be valid JSON */
    if (info.n_spans != 1 || info.spans[0].start != data_start ||
        info.spans[0].end != data_end)
        abort();
    osp_shape flat = {.rank = 1, .dims = {count}};
    uint64_t again_size = 0;
    uint8_t *again = decode_input(text, &info, dt, &flat, &again_size);
    if (count > 0 && !again)
        abort();
    if (again && (again_size != byte_size ||
                  !same_values(dt, bytes, again, (size_t)byte_size)))
        abort();
    free(again);
    free(info.spans);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    osp_datatype dt = (osp_datatype)(data[0] % OSP_TYPE_COUNT_);
    osp_shape shape = {0};
    shape.rank = data[1] % 5;
    size_t used = 2;
    for (int d = 0; d < shape.rank; d++) {
        if (used >= size)
            return 0;
        uint8_t v = data[used++];
        shape.dims[d] = v & 0x80 ? v : v % 16;
    }

    /* The request body, NUL-terminated as the HTTP layer leaves it. */
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_printf(&b,
                   "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"%s\","
                   "\"shape\":[",
                   osp_datatype_wire_name(dt));
    for (int d = 0; d < shape.rank; d++)
        bytebuf_printf(&b, "%s%lld", d ? "," : "", (long long)shape.dims[d]);
    bytebuf_puts(&b, "],\"data\":");
    bytebuf_put(&b, data + used, size - used);
    bytebuf_puts(&b, "}]}");
    size_t len;
    char *text = bytebuf_take(&b, &len);
    if (!text)
        return 0;
    /* An exact-size copy (with the NUL), so ASan catches overreads. */
    char *exact = malloc(len + 1);
    if (!exact) {
        free(text);
        return 0;
    }
    memcpy(exact, text, len + 1);
    free(text);

    json_scan_info info = {0};
    info.want_data_spans = true;
    osp_error *err = json_scan(exact, len, &info);
    if (err) {
        osp_error_free(err);
        free(exact);
        return 0;
    }
    uint64_t byte_size = 0;
    uint8_t *bytes = decode_input(exact, &info, dt, &shape, &byte_size);
    if (bytes)
        check_round_trip(dt, &shape, bytes, byte_size);
    free(bytes);
    free(info.spans);
    free(exact);
    return 0;
}
