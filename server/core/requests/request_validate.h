/*
 * Checks an inference request against its model's config, the way Triton's
 * InferenceRequest::Normalize does, with Triton's messages, and fills the
 * routing fields of a pending_request.
 */
#pragma once

#include "model_internal.h"

/* Validates p->req against config and fills p->batch_size, p->input_map,
 * p->output_requested and p->response_outputs. Raw requests are resolved
 * here (name, dtype and shape deduced; BYTES get their length prefix).
 * INVALID_ARG errors carry the "[request id: <id>] " prefix. */
osp_error *request_validate(const osp_model_config *config, pending_request *p);

/* inner with Triton's "[request id: <id>] " prefix on its message (code and
 * reason kept; ownership of inner moves). */
osp_error *request_error(const osp_infer_request *req, osp_error *inner);
