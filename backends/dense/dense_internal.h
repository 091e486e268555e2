/*
 * What the files of the dense backend share: dense.c (loading and
 * running a model) and dense_complete.c (completing its config).
 */
#pragma once

#include <stddef.h>

#include "osprey/model_config.h"
#include "safetensors.h"

#define DENSE_DEFAULT_WEIGHTS "model.safetensors"

/* The weights file of `config` in version_path (parameter `weights`, a
 * file directly in the version folder; default DENSE_DEFAULT_WEIGHTS).
 * Caller frees *out. */
osp_error *dense_weights_path(const osp_model_config *config,
                              const char *version_path, char **out);

/* Reads the weights file at `path`; a missing one is INVALID_ARG saying
 * what parameter 'weights' means. Caller owns *out. */
osp_error *dense_weights_load(const osp_model_config *config, const char *path,
                              safetensors **out);

/* Number of consecutive layers.<i>.weight from i = 0. */
size_t dense_count_layers(const safetensors *st);

/* The auto_complete slot (dense_complete.c). */
osp_error *dense_auto_complete(osp_model_config *config,
                               const char *version_path);
