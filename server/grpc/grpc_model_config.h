/*
 * A model configuration as the protobuf ModelConfig of the gRPC
 * ModelConfig reply (proto/model_config.proto), with the same content the
 * HTTP config endpoint prints as JSON (server/kserve/model_config_json.c):
 * a loaded model's placed instance groups, unnamed groups named
 * "<model>_<index>", dynamic batching only when configured.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The serialized ModelConfigResponse{config} of `config` (borrowed), in a
 * malloc'ed buffer the caller frees; NULL on OOM. */
uint8_t *kgrpc_pack_model_config_response(const osp_model_config *config,
                                          size_t *len);

#ifdef __cplusplus
}
#endif
