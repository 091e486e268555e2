/*
 * Triton's classification extension: an output asked for with a class
 * count k comes back as its top-k classes instead of its values.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/infer.h"
#include "osprey/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An output's class labels (label_filename, one per line), or none. */
typedef struct class_labels {
    char **labels;
    size_t n;
} class_labels;

/* NULL when outputs of dtype can be classified, else INVALID_ARG
 * "class result not available for output due to unsupported type '<DT>'". */
osp_error *classification_check_dtype(osp_datatype dtype);

/* Replaces `out` (host data) by its top-k classes: BYTES elements
 * "<value>:<index>[:<label>]", per batch item (the first dimension when
 * `batched`) sorted by value, largest first (ties by index), the value
 * printed as C++ std::to_string prints it (floats as %f). The shape
 * becomes [batch, min(k, elements per item)], or [min(k, elements)]. The
 * old buffer is freed. INVALID_ARG "classification output tensor too large"
 * above 10^6 elements. */
osp_error *classification_apply(osp_infer_output *out, bool batched, uint32_t k,
                                const class_labels *labels);

/* Reads the label file at `path` into *out (caller frees with
 * class_labels_free). */
osp_error *class_labels_load(const char *path, class_labels *out);
void class_labels_free(class_labels *labels);

#ifdef __cplusplus
}
#endif
