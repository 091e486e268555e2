/*
 * Triton's server-side completion of a model config's backend, platform
 * and default_model_filename (its AutoCompleteBackendFields), run on every
 * config a load reads, whether or not auto-complete is on.
 */
#pragma once

#include "osprey/error.h"
#include "osprey/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Completes cfg (borrowed; what it sets it allocates as the config owns
 * its strings) for model `model_name` in folder `model_dir` (both
 * borrowed), as Triton does for the model kinds Osprey can serve:
 *  - platform "onnxruntime_onnx" or default_model_filename "model.onnx"
 *    without a backend: backend "onnxruntime"; default_model_filename
 *    "model.py" without a backend: backend "python";
 *  - nothing of the three given: the backend whose file the model's first
 *    subfolder (in name order, as Triton's std::set) holds: model.onnx
 *    (file or folder) or model.py;
 *  - backend "onnxruntime" gets platform "onnxruntime_onnx", and each of
 *    the two backends its default_model_filename, when they are empty;
 *  - still nothing: a model named "<x>.<backend>" gets backend <backend>
 *    and default_model_filename "model.<backend>", any other name is
 *    INVALID_ARG "Invalid model name: Could not determine backend for
 *    model '<name>' ..." (Triton's words).
 * Other platforms (tensorflow_*, tensorrt_plan, pytorch_*) are left as they
 * are: the loader answers "unknown platform" for them. */
osp_error *backend_fields_complete(osp_model_config *cfg,
                                   const char *model_name,
                                   const char *model_dir);

#ifdef __cplusplus
}
#endif
