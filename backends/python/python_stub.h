/*
 * One python stub process: its pid, its control channel and the shared
 * memory region it maps (see python_protocol.h for what travels).
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "osprey/backend.h"
#include "osprey/error.h"
#include "osprey/server.h"
#include "python_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pystub {
    pid_t pid;   /* 0 when not running */
    int control; /* the server's end of the socket; -1 when closed */
    pyshm_region region;
    size_t max_frame;   /* largest frame it may send (pyproto_frame_max) */
    char name[256];     /* "<model>_0_<n>", as Triton names the instance */
    osp_server *server; /* where its BLS requests go (borrowed); may be NULL */
    /* (optional) held around each frame sent, where two threads send
     * (a decoupled instance's worker and reader); borrowed */
    pthread_mutex_t *send_lock;
    /* (optional) a model that is not decoupled: its BLS calls in flight
     * (python_bls_async.h); borrowed, the instance's */
    struct pybls_outbox *bls;
    /* the custom metrics it made (python_metrics.h): made at its first
     * METRIC frame, freed when it ends */
    struct pymetrics *metrics;
    /* A model that is not decoupled: the batch whose EXEC the instance
     * worker waits for (NULL otherwise) and its number, for the stub's
     * IS_CANCELLED questions; set and read on the worker's thread. */
    osp_execute_ctx *exec_ctx;
    uint64_t exec_batch;
} pystub;

typedef struct pystub_options {
    const char *python;      /* executable, looked up in PATH without '/' */
    const char *stub_script; /* osprey_python_stub.py */
    size_t shm_initial, shm_growth, shm_limit;
    /* (optional) the doorbell the stub rings when it sends while the
     * server is not reading (python_watch.h); it becomes the stub's fd 5.
     * Borrowed; 0 = none. */
    int doorbell_fd;
} pystub_options;

/* Starts the stub (borrowed strings are copied by the exec); the stub is
 * then waiting for INIT. On failure nothing is left running. */
osp_error *pystub_start(pystub *stub, const pystub_options *options);

typedef enum pystub_call_status {
    PYSTUB_ANSWERED = 0, /* *reply_type and *reply are set */
    PYSTUB_DEAD,         /* the stub died or broke the protocol: stopped */
    PYSTUB_TIMED_OUT,    /* no answer before the deadline: killed */
} pystub_call_status;

/* Sends one frame (under send_lock when set). false when the stub is
 * gone. */
bool pystub_send(pystub *stub, uint32_t type, const void *payload, size_t len);

/* Sends one frame and waits for the answer, writing LOG frames that come
 * first into the server log, starting the BLS calls the stub makes
 * meanwhile (BLS, BLS_CALL and BLS_CANCEL, with stub->bls) and sending
 * their answers as the core gives them (python_bls_async.h). Inline calls
 * still in the core when the answer comes stay in flight (their answers
 * wait in the outbox for whoever reads the channel next); a region call
 * cannot outlive the EXEC and is dropped. deadline_ns 0 waits as long as
 * the stub lives. Anything but ANSWERED leaves the stub killed and reaped.
 * The caller owns *reply (free()). */
pystub_call_status pystub_call(pystub *stub, uint32_t type, const void *payload,
                               size_t len, uint64_t deadline_ns,
                               uint32_t *reply_type, uint8_t **reply,
                               size_t *reply_len);

typedef enum pystub_frame_status {
    PYSTUB_FRAME_OTHER = 0, /* not a LOG or BLS frame: the caller's */
    PYSTUB_FRAME_SERVED,
    PYSTUB_FRAME_BROKEN, /* the channel failed while answering a BLS */
} pystub_frame_status;

/* Serves a frame the stub may send at any time during a call: LOG (into
 * the server log), and with stub->bls the BLS calls BLS, BLS_CALL and
 * BLS_CANCEL (python_bls_async.h; without it a BLS frame is answered with
 * an error). payload borrowed. */
pystub_frame_status pystub_serve_frame(pystub *stub, uint32_t type,
                                       const uint8_t *payload, size_t len);

/* Kills and reaps the stub and closes its channel and region. */
void pystub_kill(pystub *stub);

/* Asks the stub to finalize (waiting at most timeout_ms), then kills what
 * is left, reaps it and closes the channel and region. Safe to call on a
 * stub that is not running. */
void pystub_stop(pystub *stub, int timeout_ms);

/* Triton's message for a stub that died: "Stub process '<name>' is not
 * healthy." */
osp_error *pystub_unhealthy_error(const pystub *stub);

#ifdef __cplusplus
}
#endif
