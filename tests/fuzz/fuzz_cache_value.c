/*
 * libFuzzer target for the redis response cache's value decoder
 * (server/core/cache/cache_value.c): the input is a value as read from a
 * Redis that anything may have written to. A decode that fails leaves the
 * response without outputs; one that succeeds yields outputs whose bytes
 * match their datatypes and shapes, and encoding them again gives back
 * the input byte for byte (the layout has one spelling per response).
 * Build: see README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache_value.h"
#include "osprey/datatype.h"
#include "osprey/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    osp_infer_response *resp = calloc(1, sizeof(*resp));
    if (!resp)
        return 0;
    const char *why = NULL;
    if (!cache_value_decode(data, size, resp, &why)) {
        if (resp->outputs || resp->n_outputs || !why)
            abort(); /* a failed decode leaves nothing behind */
        osp_infer_response_free(resp);
        return 0;
    }
    for (size_t i = 0; i < resp->n_outputs; i++) {
        const osp_infer_output *o = &resp->outputs[i];
        int64_t count;
        if (!o->name || !o->data || o->byte_size != o->data->size ||
            !osp_shape_element_count(&o->shape, &count))
            abort();
        if (o->dtype != OSP_TYPE_BYTES &&
            o->byte_size != (size_t)count * osp_datatype_byte_size(o->dtype))
            abort();
    }
    unsigned char *again = NULL;
    size_t len = 0;
    if (!cache_value_encode(resp, SIZE_MAX, &again, &len, &why) ||
        len != size || memcmp(again, data, size) != 0)
        abort();
    free(again);
    osp_infer_response_free(resp);
    return 0;
}
