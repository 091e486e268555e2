/*
 * A model configuration as protobuf JSON, the way Triton prints a
 * ModelConfig (GET .../config over HTTP; the gRPC ModelConfig reply
 * carries the same message).
 */
#pragma once

#include "osprey/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bytebuf;

/* Appends the configuration (borrowed) to b (borrowed; see json_util.h).
 * A loaded model's instance groups are the placed ones (kind, count, gpus
 * as chosen by the loader). An allocation failure sets b->oom. */
void model_config_to_json(const osp_model_config *config, struct bytebuf *b);

#ifdef __cplusplus
}
#endif
