/*
 * A backend's answer to one request of a batch (osp_sent_response,
 * osprey/backend.h) as the core keeps it and turns it into the request's
 * response (pending_request_response_from): osp_execute_respond stores
 * answers during execute and instance_exec delivers them. Part of the
 * backends' library (osprey_execute), beside execute.c.
 */
#pragma once

#include <stdbool.h>

#include "osprey/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An answer the core holds: the outputs array and its names are owned. */
typedef struct request_answer {
    bool given;
    osp_sent_response sent;
} request_answer;

/* Stores `sent` in the empty answer `a`: its buffers and error move (also
 * on failure, when they are freed), its outputs array and names are
 * copied. Errors only for OOM; `a` stays empty then. */
osp_error *request_answer_store(request_answer *a, osp_sent_response *sent);

/* Frees what `a` holds and empties it. */
void request_answer_clear(request_answer *a);

/* Frees the buffers and the error `r` carries (its arrays stay the
 * caller's) and clears them. NULL is fine. */
void sent_response_free_buffers(osp_sent_response *r);

#ifdef __cplusplus
}
#endif
