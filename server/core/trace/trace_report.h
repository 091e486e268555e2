/*
 * The core's reports into a request's trace (osp_infer_request.trace, a
 * pointer the frontend lends; see osprey/trace.h). Callers check
 * `p->req->trace` first, so a request that is not traced costs one branch.
 * All of these run before the request's completion callback: the core
 * never touches a trace after it.
 */
#pragma once

#include <stddef.h>

#include "model_internal.h"

/* A new trace for a request that `parent`'s request makes (a step of an
 * ensemble, Triton's SpawnChildTrace): the same setting and level, its own
 * id, `parent_id` the parent's. NULL on OOM. The caller owns it
 * (osp_trace_end). Defined in trace.c. */
osp_trace *trace_spawn_child(osp_trace *parent);

/* A validated request about to be queued: TENSOR_QUEUE_INPUT captures
 * (level TENSORS). */
void trace_report_accepted(const pending_request *p);

/* A batch that ran: TENSOR_BACKEND_INPUT from the device tensors the
 * backend read (`inputs`, config order; device memory is copied to the
 * host only for the traced requests' slices, capped) and
 * TENSOR_BACKEND_OUTPUT from each response's outputs. Does nothing unless
 * some request of the batch traces tensors. */
void trace_report_backend_tensors(model_instance *inst, pending_request **batch,
                                  size_t n, const osp_backend_tensor *inputs,
                                  osp_infer_response **resps);

/* The request ends (from pending_request_finish): the model record and the
 * stage stamps REQUEST_START .. COMPUTE_END from p->times, then
 * INFER_RESPONSE_COMPLETE and REQUEST_END now. */
void trace_report_finish(const pending_request *p);
