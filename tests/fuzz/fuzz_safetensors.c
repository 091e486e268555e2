/*
 * libFuzzer target for the safetensors reader (backends/dense/safetensors.c).
 * Any input must give either a parsed file whose tensors all lie inside the
 * input, or an INVALID_ARG error naming the file, without crashing, leaking
 * or reading out of bounds. Build: see README.md.
 *
 * The first byte picks how the rest becomes a file, so the header JSON can
 * be mutated without the fuzzer having to keep the length prefix in step:
 *   even: the rest is the whole file, as is;
 *   odd:  2 bytes give the tensor data size (mod 4097), the rest is the
 *         header; the file is u64 length + header + that many data bytes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char WHAT[] = "fuzz.safetensors";

/* Checks a parsed file against the promises in safetensors.h. */
static void check_parsed(const safetensors *st, const uint8_t *bytes,
                         size_t len) {
    for (size_t i = 0; i < st->n_tensors; i++) {
        const safetensors_tensor *t = &st->tensors[i];
        if (!t->name || safetensors_find(st, t->name) != t)
            abort(); /* names are unique */
        if (t->shape.rank < 0 || t->shape.rank > OSP_MAX_DIMS)
            abort();
        uint64_t count = 1;
        for (int d = 0; d < t->shape.rank; d++) {
            if (t->shape.dims[d] < 0)
                abort();
            count *= (uint64_t)t->shape.dims[d]; /* checked by the parser */
        }
        if (t->element_size == 0 || count * t->element_size != t->byte_size)
            abort();
        if (t->data < bytes + 8 || t->byte_size > len ||
            t->data + t->byte_size > bytes + len)
            abort();
        /* Touch the first and last byte, so ASan checks the range. */
        volatile uint8_t sink;
        if (t->byte_size) {
            sink = t->data[0];
            sink = t->data[t->byte_size - 1];
        }
        (void)sink;
        if (strnlen(t->dtype, sizeof t->dtype) == sizeof t->dtype)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint8_t *bytes;
    size_t len;
    if (!(data[0] & 1)) {
        /* An exact-size copy, so ASan catches any read past `len`. */
        len = size - 1;
        bytes = malloc(len ? len : 1);
        if (!bytes)
            return 0;
        if (len)
            memcpy(bytes, data + 1, len);
    } else {
        if (size < 3)
            return 0;
        size_t data_len = (size_t)(data[1] | data[2] << 8) % 4097;
        size_t header_len = size - 3;
        len = 8 + header_len + data_len;
        bytes = malloc(len);
        if (!bytes)
            return 0;
        for (int i = 0; i < 8; i++)
            bytes[i] = (uint8_t)((uint64_t)header_len >> (8 * i));
        memcpy(bytes + 8, data + 3, header_len);
        for (size_t i = 0; i < data_len; i++)
            bytes[8 + header_len + i] = (uint8_t)i;
    }

    safetensors *st = NULL;
    osp_error *err = safetensors_parse(bytes, len, WHAT, &st);
    if (err) {
        if (st)
            abort(); /* out is written only on success */
        osp_error_code code = osp_error_get_code(err);
        if (code != OSP_ERROR_INVALID_ARG && code != OSP_ERROR_UNAVAILABLE)
            abort(); /* malformed input is INVALID_ARG (UNAVAILABLE: OOM) */
        if (strncmp(osp_error_message(err), WHAT, sizeof WHAT - 1) != 0)
            abort(); /* every message names the file */
        osp_error_free(err);
    } else {
        check_parsed(st, bytes, len);
        safetensors_find(st, "");
        safetensors_free(st);
    }
    free(bytes);
    return 0;
}
