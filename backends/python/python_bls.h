/*
 * BLS: requests a python model sends from execute()
 * (pb_utils.InferenceRequest(...).exec()) go into the core as ordinary
 * inference requests, to any model of the server, python or not. This is
 * the path of a model that is not decoupled: its tensors travel through
 * the region while the server waits for the batch's answer. A decoupled
 * model's calls, from any of its threads, go through python_bls_async.h.
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

/* Runs the BLS request in `payload` (borrowed; python_protocol.h) on
 * `server` (borrowed; NULL: BLS unavailable, answered as an error), waits
 * for its response, writes the outputs into the stub's region (growing it)
 * and sends the BLS_RESULT answer. A failed request is an answer too.
 * Returns false only when the channel to the stub broke. */
bool pybls_serve(pystub *stub, osp_server *server, const uint8_t *payload,
                 size_t len);

/* Builds the core's request from a decoded BLS request; each input's
 * bytes are copied from `base` (borrowed: the region, or a BLS_CALL's
 * inline data) + its offset, which the decoder checked. Caller owns *out
 * on success; nothing to free on failure. */
osp_error *pybls_build_request(const pyproto_bls_request *bls,
                               const uint8_t *base, osp_infer_request **out);

/* Appends an error response (u32 kind 1, u32 pb_utils.TritonError code,
 * u32 length, message) as RESULT and BLS answers carry it. */
void pybls_append_error(pyproto_text *t, const osp_error *err);

#ifdef __cplusplus
}
#endif
