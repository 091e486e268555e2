/*
 * Model warmup (model_warmup in config.pbtxt): sample requests run on
 * every instance of a model while it loads, before it is ready, as
 * Triton's BackendModelInstance::WarmUp does.
 */
#pragma once

#include "osprey/error.h"

typedef struct osp_model osp_model;

/* Runs each warmup sample `count` times on each instance of `model`
 * (borrowed; its instances exist and their workers have not started), one
 * request of the sample's batch_size at a time, straight on the instance
 * (no queue, no sequence batcher: a sequence model's sample names its
 * control and state inputs itself; a sample of batch_size 0 is skipped).
 * Inputs are zeros, random bytes, or the bytes of a file in the model's
 * warmup/ folder, repeated for each batch row. What the samples ran is not counted in the model's
 * statistics. The first failure is returned as Triton words it:
 * "failed to run warmup sample '<name>': <why>". */
osp_error *warmup_run(osp_model *model);
