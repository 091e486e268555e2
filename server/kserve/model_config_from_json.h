/* The load API's "config" parameter: a ModelConfig in protobuf JSON (HTTP
 * load requests; gRPC RepositoryModelLoad carries the same JSON text). */
#pragma once

#include <stddef.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rewrites the ModelConfig JSON in json[0..len) (NUL at json[len]) as
 * protobuf text for the config parser. Caller frees *pbtxt. Errors are
 * INVALID_ARG and name the offending JSON. */
osp_error *model_config_json_to_pbtxt(const char *json, size_t len,
                                      char **pbtxt);

#ifdef __cplusplus
}
#endif
