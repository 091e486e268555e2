/*
 * Triton's auto_complete_config for python models, the server's half: the
 * stub runs TritonPythonModel.auto_complete_config and answers what it
 * added as lines (stub/osprey_python_stub.py, auto_complete); this applies
 * them to the config.
 */
#pragma once

#include "osprey/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Applies the stub's answer `text` (borrowed, NUL-terminated) to `config`:
 * tab-separated lines "max_batch_size N", "dynamic_batching",
 * "decoupled 0|1", "input NAME TYPE_X OPTIONAL DIMS" and
 * "output NAME TYPE_X DIMS" (DIMS comma-separated, may be empty). Added
 * tensors are allocated as osp_model_config_free frees them. Every field is
 * checked; on error `config` may hold the lines applied before it. */
osp_error *pycomplete_apply(osp_model_config *config, const char *text);

#ifdef __cplusplus
}
#endif
