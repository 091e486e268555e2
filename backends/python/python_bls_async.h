/*
 * BLS calls in flight, several at once: pb_utils.InferenceRequest(...)
 * .exec(), .async_exec() and .exec(decoupled=True), from execute or from
 * any thread the model started, also after execute returned, as Triton
 * allows between initialize and finalize. Each BLS_CALL frame names its
 * call by an id the stub chose and carries its tensors inline (the region
 * belongs to whichever request the instance runs meanwhile); the core runs
 * each asynchronously and every response goes back as a BLS_ANSWER frame
 * naming the call (python_protocol.h); a BLS_CANCEL frame cancels an
 * exec(decoupled=True) call. A model that is not decoupled also has one
 * region call at a time while its execute runs (a BLS frame, tensors in
 * the region, answered BLS_RESULT): its stub uses it for exec() while the
 * region is free.
 *
 * Answers are built on the core's threads and wait in the instance's
 * outbox; the thread that reads the stub's channel (python_decoupled.c's
 * reader, pystub_call during an INIT, EXEC or FINALIZE, python_watch.c's
 * watcher between them) sends them, so a core thread never blocks on a
 * stub that reads slowly. The outbox is reference counted: calls still in
 * the core when the instance goes keep it alive, and their answers are
 * dropped.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/server.h"
#include "python_stub.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most BLS calls one instance has in the core at once; a call past it is
 * answered with an error at once. */
#define PYBLS_MAX_CALLS 1024

/* Most bytes of answers that wait for the stub to read them, or one
 * frame's worth when frames are larger; a response past it is dropped and
 * its call ends with an error. */
#define PYBLS_OUTBOX_MAX_BYTES (64u << 20)

typedef struct pybls_outbox pybls_outbox;

/* A new, empty outbox holding one reference (the caller's); NULL when out
 * of memory or file descriptors. A response whose BLS_ANSWER would pass
 * `max_frame` bytes (pyproto_frame_max of the stub's region limit) is
 * answered with an error naming shm-region-max-byte-size. */
pybls_outbox *pybls_outbox_new(size_t max_frame);

/* Drops the caller's reference; the last one frees the outbox. Call
 * pybls_outbox_close first when the instance goes. */
void pybls_outbox_unref(pybls_outbox *outbox);

/* The instance goes: waiting answers are dropped, calls still in the core
 * are cancelled and their later answers dropped. */
void pybls_outbox_close(pybls_outbox *outbox);

/* A file descriptor that polls readable while answers wait (borrowed: the
 * outbox's). */
int pybls_outbox_wake_fd(const pybls_outbox *outbox);

/* The stub went (or a fresh one starts): answers to calls of the old stub
 * are dropped, now and when they come, and calls still in the core are
 * cancelled. */
void pybls_outbox_forget_stub(pybls_outbox *outbox);

/* Whether calls are in the core or answers wait to be sent. */
bool pybls_outbox_busy(pybls_outbox *outbox);

/* Sends every waiting answer to `stub` (borrowed; on the reader thread).
 * false when the channel broke. */
bool pybls_outbox_flush(pybls_outbox *outbox, pystub *stub);

/* Serves one BLS_CALL frame (payload borrowed): decodes and checks it,
 * hands the request to `server` (borrowed; NULL: answered with an error)
 * and returns; the answers reach the outbox as the core responds. A frame
 * that does not decode is answered with the decoder's error when it names
 * its call, else logged and dropped. */
void pybls_call_start(pybls_outbox *outbox, osp_server *server,
                      const char *instance, const uint8_t *payload, size_t len);

/* Serves one BLS_CANCEL frame (payload borrowed): cancels that
 * exec(decoupled=True) call of the current stub, if still in the core
 * (the called model sees is_cancelled(); the core ends the call with its
 * final answer). A frame that does not decode is logged. */
void pybls_call_cancel(pybls_outbox *outbox, const uint8_t *payload,
                       size_t len);

/* The stub answered its EXEC while its region call was in flight (it
 * never does): that call's answer is dropped, as it would write into the
 * next EXEC's region. */
void pybls_outbox_drop_region_call(pybls_outbox *outbox);

/* Serves one region BLS frame (payload borrowed) of `stub` (borrowed; on
 * the thread that reads its channel): decodes and checks it, hands the
 * request to stub->server and returns; the answer waits in the outbox
 * until pybls_outbox_flush writes it into the region and sends
 * BLS_RESULT. A frame that fails at once, or a second region call while
 * one is in flight, is answered at once with the error. false when the
 * channel broke. */
bool pybls_region_call_start(pybls_outbox *outbox, pystub *stub,
                             const uint8_t *payload, size_t len);

#ifdef __cplusplus
}
#endif
