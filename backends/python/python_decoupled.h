/*
 * A decoupled python model's instance (python_backend.c), as Triton's
 * python backend runs it: execute() returns once the stub's execute has
 * returned, and the instance takes its next request while the response
 * senders of earlier ones keep sending from the model's threads. One
 * reader thread per stub reads every frame the stub sends and routes each
 * RESPONSE by its request (the EXEC's batch number) to that request's
 * sender until its final flag; it also serves LOG frames, starts the BLS
 * calls the model's threads make (BLS_CALL, python_bls_async.h), cancels
 * them (BLS_CANCEL) and sends their answers, tells the stub which clients
 * have gone (CANCEL), and hands the EXEC's answer to the instance's
 * worker. A stub that dies ends every open request with Triton's "Stub
 * process '<instance>' is not healthy."; its BLS calls still in the core
 * are cancelled and their answers dropped.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "osprey/backend.h"
#include "python_bls_async.h"
#include "python_protocol.h"
#include "python_stub.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most requests one instance keeps open at once; the next execute waits
 * for one to end. */
#define PYDEC_MAX_IN_FLIGHT 64

/* Turns one response of the stub (tensors at `data` + offsets) into what
 * the core's sender takes; *outputs is freed by the caller after the
 * send. Borrowed `model`. */
typedef void (*pydec_convert_fn)(const void *model,
                                 const pyproto_response *response,
                                 const uint8_t *data, osp_sent_response *sent,
                                 osp_infer_output **outputs);

typedef struct pydec_request {
    uint64_t batch; /* the EXEC's number, RESPONSE frames name it */
    osp_response_sender *sender; /* borrowed until its final send */
    uint64_t deadline_ns;        /* 0 = none: execute-timeout-seconds */
    bool told_cancel;
} pydec_request;

typedef struct pydec {
    pystub *stub;      /* borrowed: the instance's */
    const void *model; /* borrowed, for convert */
    const char *model_name;
    pydec_convert_fn convert;
    pthread_mutex_t lock; /* everything below */
    pthread_cond_t changed;
    pthread_mutex_t send_lock; /* one frame at a time onto the channel */
    pybls_outbox *bls;         /* owned: answers to the stub's BLS calls */
    pthread_t reader;
    bool reader_running;
    bool dead; /* the reader saw the stub go: every request was ended */
    pydec_request open[PYDEC_MAX_IN_FLIGHT];
    size_t n_open;
    /* The answer to the frame the worker waits on (EXEC, FINALIZE). */
    bool waiting, answered;
    uint64_t answer_deadline_ns; /* 0 = none */
    uint32_t answer_type;
    uint8_t *answer; /* owned until taken */
    size_t answer_len;
} pydec;

/* Sets up `d` for `stub` (borrowed; its send_lock is pointed at d's).
 * On failure nothing is left to destroy. */
osp_error *pydec_init(pydec *d, pystub *stub, const void *model,
                      const char *model_name, pydec_convert_fn convert);
/* Stops the reader if running (the stub must already be dead or its
 * channel shut down) and frees what `d` holds. */
void pydec_destroy(pydec *d);

/* Starts the reader thread on a freshly initialized stub. */
osp_error *pydec_start(pydec *d);

/* Runs one request: waits for room (PYDEC_MAX_IN_FLIGHT), sends the EXEC
 * (`exec`, borrowed) and returns once the stub's execute has returned.
 * The request stays open, its responses forwarded to `sender` by the
 * reader until the final flag. An error (execute raised or returned
 * something else than None, the stub died or timed out) is returned and
 * the request is no longer the reader's. */
osp_error *pydec_execute(pydec *d, osp_response_sender *sender, uint64_t batch,
                         const pyproto_text *exec, uint64_t deadline_ns);

/* Whether the stub has died (the reader ended every request): the caller
 * restarts it with pydec_reap, a fresh stub, pydec_start. */
bool pydec_is_dead(pydec *d);

/* Joins the reader of a dead stub and reaps the stub; afterwards the
 * stub may be started again. */
void pydec_reap(pydec *d);

/* Asks the stub to finalize (at most timeout_ms), then shuts it down,
 * joins the reader and ends the requests still open with an error. */
void pydec_stop(pydec *d, int timeout_ms);

#ifdef __cplusplus
}
#endif
