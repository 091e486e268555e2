/*
 * The core's response senders for requests of decoupled models
 * (osprey/backend.h): one per request of a batch, handed to the backend
 * through the execute context. A sender owns its pending request until the
 * final send ends it; the batch holds a second reference until execute has
 * returned, so that a failed execute can end the requests the backend left
 * open without racing the backend's own final sends.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/backend.h"
#include "pending_request.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct core_sender core_sender;

/* Senders for the n requests of a batch (ownership of each request moves
 * to its sender); senders[i] is the public view of out[i]. On OOM returns
 * false and the requests stay the caller's. */
bool response_senders_new(pending_request **batch, size_t n,
                          core_sender **out, osp_response_sender **senders);

/* After execute returned: `err` (borrowed; NULL when execute worked) ends
 * every request still open with that error; then the batch's references
 * go. */
void response_senders_release(core_sender **senders, size_t n,
                              const osp_error *err);

/* How many requests of decoupled models are open (sent, not yet final):
 * for the leak check and unit tests. */
size_t response_senders_open(void);

#ifdef __cplusplus
}
#endif
