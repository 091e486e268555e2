/*
 * BLS: requests a python model sends from execute()
 * (pb_utils.InferenceRequest(...).exec()) go into the core as ordinary
 * inference requests, to any model of the server, python or not.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/server.h"
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

#ifdef __cplusplus
}
#endif
