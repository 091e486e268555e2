/*
 * The channel of a python instance that is not decoupled between its
 * requests. As in Triton, its model may make BLS calls and log from any
 * thread from the end of initialize to finalize, also while no execute
 * runs; but the instance's worker reads the stub's channel only from an
 * INIT, EXEC or FINALIZE to its answer (pystub_call), and polling the
 * channel otherwise would wake a thread at every answer of the plain
 * request path. So the idle channel is not polled: the stub rings a
 * doorbell (an eventfd it inherits as fd 5) after each frame it sends
 * while the server is not reading, and one watcher thread per instance,
 * asleep on the doorbell, then takes the channel, serves what came (LOG,
 * BLS_CALL, BLS_CANCEL) and, while calls are in the core, also watches the
 * channel and the outbox, sending their answers, until they end. The
 * worker rings the doorbell itself when it leaves calls in flight.
 *
 * Whoever reads the channel holds it: the worker from its frame to the
 * answer (pywatch_take .. pywatch_give), the watcher while it serves.
 * A request that arrives while the watcher serves waits for it (a frame
 * read and served, the answers waiting sent), never for a call's answer.
 */
#pragma once

#include "osprey/error.h"
#include "python_bls_async.h"
#include "python_stub.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pywatch pywatch;

/* A watcher for `stub` and `bls` (both borrowed, outliving it), its
 * thread started. Caller owns *out (pywatch_free). */
osp_error *pywatch_new(pystub *stub, pybls_outbox *bls, pywatch **out);

/* Stops and joins the watcher thread; the caller must not hold the
 * channel. A watcher still blocked on the stub after a few seconds (a stub
 * that stopped reading) has the channel shut down under it. Idempotent:
 * pywatch_free stops it too. */
void pywatch_stop(pywatch *w);

/* Stops the watcher if running and frees it. NULL is fine. */
void pywatch_free(pywatch *w);

/* The fd to hand the stub as its doorbell (pystub_options.doorbell_fd). */
int pywatch_doorbell_fd(const pywatch *w);

/* Takes the channel before sending a frame whose answer the caller reads
 * (waits while the watcher serves). */
void pywatch_take(pywatch *w);

/* Gives the channel back; when BLS calls are still in flight the watcher
 * takes over their answers. */
void pywatch_give(pywatch *w);

#ifdef __cplusplus
}
#endif
