/*
 * Triton's auto-complete for the dense backend: a config without inputs
 * or without outputs gets them from the weights file, as the backend reads
 * it. The input is FP32 of dims [in], in the columns of layers.0.weight
 * [out0, in]; the output is FP32 of dims [out], the rows of the last
 * layer's weight [out, in_last]. Names the config does not give are
 * INPUT0 and OUTPUT0. Anything else about the layers is checked when the
 * model loads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense_internal.h"

#define DENSE_INPUT_NAME "INPUT0"
#define DENSE_OUTPUT_NAME "OUTPUT0"

/* Sets *ios to one FP32 tensor `name` of dims [dim]. */
static osp_error *one_tensor(const char *model, const char *name, int64_t dim,
                             osp_model_io **ios, size_t *n) {
    osp_model_io *io = calloc(1, sizeof *io);
    if (!io || !(io->name = strdup(name))) {
        free(io);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "dense model '%s': out of memory", model);
    }
    io->dtype = OSP_TYPE_FP32;
    io->dims.rank = 1;
    io->dims.dims[0] = dim;
    *ios = io;
    *n = 1;
    return NULL;
}

/* The weight of layer i, when it is a matrix. */
static const safetensors_tensor *layer_weight(const safetensors *st, size_t i) {
    char name[64];
    snprintf(name, sizeof name, "layers.%zu.weight", i);
    const safetensors_tensor *w = safetensors_find(st, name);
    return w && w->shape.rank == 2 && w->shape.dims[0] > 0 &&
                   w->shape.dims[1] > 0
               ? w
               : NULL;
}

osp_error *dense_auto_complete(osp_model_config *config,
                               const char *version_path) {
    osp_error *err = NULL;
    char *path = NULL;
    safetensors *st = NULL;
    if ((err = dense_weights_path(config, version_path, &path)) ||
        (err = dense_weights_load(config, path, &st)))
        goto out;
    size_t n = dense_count_layers(st);
    const safetensors_tensor *first = n ? layer_weight(st, 0) : NULL;
    const safetensors_tensor *last = n ? layer_weight(st, n - 1) : NULL;
    if (!first || !last) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "dense model '%s': cannot complete its config "
                            "from '%s': it needs a matrix 'layers.0.weight' "
                            "and one per layer after it",
                            config->name, path);
        goto out;
    }
    if (config->n_inputs == 0 &&
        (err = one_tensor(config->name, DENSE_INPUT_NAME, first->shape.dims[1],
                          &config->inputs, &config->n_inputs)))
        goto out;
    if (config->n_outputs == 0)
        err = one_tensor(config->name, DENSE_OUTPUT_NAME, last->shape.dims[0],
                         &config->outputs, &config->n_outputs);
out:
    safetensors_free(st);
    free(path);
    return err;
}
