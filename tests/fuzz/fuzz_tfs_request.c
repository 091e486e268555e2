/*
 * TF Serving request bodies (server/tfserving): tfs_body_parse, then
 * tfs_predict_inputs against two fixed signatures (one float input "x";
 * an int32 and a string input) and tfs_parse_examples, with every
 * feature read back. Everything is freed; a leak or a bad access is a
 * finding.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tfs_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void predict(const tfs_body *body, const tfs_input_spec *specs,
                    size_t n) {
    tfs_format format;
    tfs_tensor *tensors = NULL;
    osp_error *err =
        tfs_predict_inputs(body, specs, n, 1 << 20, &format, &tensors);
    if (err) {
        (void)osp_error_message(err);
        osp_error_free(err);
        return;
    }
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < tensors[i].data->size; b++)
            sink ^= ((const unsigned char *)tensors[i].data->data)[b];
    (void)sink;
    tfs_tensors_free(tensors, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const tfs_input_spec float_x[] = {{"x", OSP_TYPE_FP32}};
    static const tfs_input_spec int_str[] = {{"int_tensor", OSP_TYPE_INT32},
                                             {"str_tensor", OSP_TYPE_BYTES}};
    tfs_body *body = NULL;
    const char *sig = NULL;
    osp_error *err = tfs_body_parse((const char *)data, size, &body, &sig);
    if (err) {
        osp_error_free(err);
        return 0;
    }
    (void)strlen(sig);
    predict(body, float_x, 1);
    predict(body, int_str, 2);
    tfs_examples *ex = NULL;
    err = tfs_parse_examples(body, &ex);
    if (err) {
        osp_error_free(err);
    } else {
        volatile size_t sink = 0;
        for (size_t i = 0; i < tfs_examples_count(ex); i++) {
            const tfs_example *e = tfs_examples_at(ex, i);
            for (size_t f = 0; f < e->n_features; f++) {
                const tfs_feature *ft = &e->features[f];
                sink += strlen(ft->name);
                for (size_t k = 0; k < ft->n; k++) {
                    if (ft->kind == TFS_FEATURE_BYTES)
                        sink +=
                            ft->lens[k] ? (unsigned char)ft->bytes[k][0] : 0;
                    else if (ft->kind == TFS_FEATURE_INT64)
                        sink += (size_t)ft->ints[k];
                    else
                        sink += ft->floats[k] > 0;
                }
                if (tfs_example_feature(e, ft->name) == NULL)
                    __builtin_trap();
            }
        }
        (void)sink;
        tfs_examples_free(ex);
    }
    tfs_body_free(body);
    return 0;
}
