/*
 * BLS: requests a python model sends (pb_utils.InferenceRequest(...)
 * .exec()) go into the core as ordinary inference requests, to any model
 * of the server, python or not. Shared pieces of both paths: building the
 * core's request, and the region answer (BLS_RESULT) of a call whose
 * tensors travel through the region, which a model that is not decoupled
 * uses for one call at a time while execute runs. Calls with inline
 * tensors, and the starting and routing of every call, are
 * python_bls_async.h's.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/server.h"
#include "python_protocol.h"
#include "python_stub.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the core answered a region BLS call (a BLS frame), waiting for the
 * channel's thread to write it into the region and send BLS_RESULT. */
typedef struct pybls_gathered {
    uint64_t out_offset;          /* where the call's outputs may start */
    osp_infer_response *response; /* its response; owned */
    osp_error *error; /* the call failed before the core answered; owned */
} pybls_gathered;

/* Writes the outputs of `g` (borrowed) into the stub's region (growing
 * it) and sends the BLS_RESULT answer; an error becomes the answer's one
 * response. Returns false only when the channel to the stub broke. */
bool pybls_send_gathered(pystub *stub, const pybls_gathered *g);

/* Frees what `g` holds and `g` itself. NULL is fine. */
void pybls_gathered_free(pybls_gathered *g);

/* Builds the core's request from a decoded BLS request (its inputs,
 * outputs, timeout and parameters); each input's bytes are copied from
 * `base` (borrowed: the region, or a BLS_CALL's inline data) + its offset,
 * which the decoder checked, or from its GPU memory (python_gpu.h). Caller
 * owns *out on success; nothing to free on failure. */
osp_error *pybls_build_request(const pyproto_bls_request *bls,
                               const uint8_t *base, osp_infer_request **out);

/* Appends an error response (u32 kind 1, u32 pb_utils.TritonError code,
 * u32 length, message) as RESULT and BLS answers carry it. */
void pybls_append_error(pyproto_text *t, const osp_error *err);

#ifdef __cplusplus
}
#endif
