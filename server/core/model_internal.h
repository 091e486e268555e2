/*
 * Core-internal view of a loaded model version: its config, backend state,
 * instances and scheduler queue. Frontends see only the opaque osp_model of
 * osprey/server.h.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>

#include "batcher.h"
#include "classification.h"
#include "osprey/backend.h"
#include "osprey/clock.h"
#include "osprey/server.h"
#include "pending_request.h"
#include "sequence_batcher.h"
#include "slot_batcher.h"
#include "stats.h"

typedef struct model_instance model_instance;
struct ensemble;

/* The most batches one caller runs inline before leaving what is queued
 * to the workers (model_enqueue). */
#define MODEL_INLINE_MAX_BATCHES 4

struct model_instance {
    osp_model *model; /* borrowed: the model owns its instances */
    int index;
    osp_device *device; /* borrowed */
    osp_stream *stream; /* owned */
    void *state;        /* backend's instance state */
    pthread_t thread;
    bool thread_started;
    /* Running a batch, on its worker or inline on a caller's thread
     * (model_enqueue); guarded by the model's lock. At most one batch runs
     * on an instance at a time. */
    bool busy;
    /* Marks recorded on the stream around each batch, so that device-side
     * stage times come from the device, not from host time around async
     * calls: [0] compute start, [1] inputs copied, [2] backend done,
     * [3] outputs copied. */
    osp_event *marks[4];
    /* The batch being taken and run: batch_capacity slots each. */
    pending_request **batch;
    batcher_entry **entries;
    /* sequence_batching: the instance's own queue, where the sequence
     * batcher sends the requests of the sequences holding its batch slots
     * (guarded by the model's lock). `oldest`: a dynamic batcher with the
     * strategy's preferred sizes, delay and preserve_ordering (reorder);
     * `direct`: one row per batch slot. */
    batcher seq_queue;
    slot_batcher seq_rows;
    reorder_buffer reorder;
};

struct osp_model {
    atomic_int refs;
    osp_model_config *config; /* owned */
    int64_t version;
    char *version_path;
    const osp_backend *backend;
    void *backend_model;
    /* Per config output: labels from its label_filename (classification). */
    class_labels *output_labels;
    size_t n_output_labels;
    model_instance *instances;
    size_t n_instances;

    /* Scheduler queue and dynamic batcher, guarded by lock. work_ready
     * (CLOCK_MONOTONIC) wakes workers on arrivals and shutdown. */
    pthread_mutex_t lock;
    pthread_cond_t work_ready;
    batcher batcher;
    /* cancel_token_epoch() when the batcher was last searched for
     * cancelled requests (guarded by lock). */
    uint64_t cancel_epoch_seen;
    bool stopping; /* no new work; workers exit once drained */
    /* The backend's execute is quick (osp_backend.execute_is_quick) and
     * every instance is on the CPU: a request that finds an instance idle
     * runs on the thread that queued it. Set at load. */
    bool run_inline;
    bool flushing; /* shutting down: run what is queued now */

    /* preserve_ordering: finished requests wait here for their turn. */
    pthread_mutex_t order_lock;
    reorder_buffer reorder;

    model_stats stats;
    /* An ensemble's scheduler (ensemble.h): it runs requests instead of a
     * backend and instances. NULL for other models. */
    struct ensemble *ensemble;

    /* sequence_batching: requests pass through it on their way to the
     * queue (model_enqueue). NULL for other models. Owned. */
    sequence_batcher *sequences;
    bool direct_rows;      /* `direct`: instances batch by seq_rows */
    size_t batch_capacity; /* entries one batch of an instance can hold */
};

/* Inputs of a batch of this model: the config's, then the sequence
 * batcher's control and state inputs. */
static inline size_t model_batch_input_count(const osp_model *model) {
    return model->config->n_inputs +
           (model->sequences ? sequence_batcher_extra_inputs(model->sequences)
                             : 0);
}

/* The server's settings a model load follows. */
typedef struct model_load_options {
    bool strict_gpu;      /* KIND_GPU without a GPU fails the load */
    size_t max_sequences; /* sequence table size; 0: the default */
} model_load_options;

/* Loads version `version` of the model whose config is `config` (the model
 * takes ownership on success; the caller keeps it on failure) with
 * `backend` (borrowed, a static table) and `opts` (borrowed during the
 * call). Creates instances per instance_group and starts their workers. */
osp_error *model_load(osp_model_config *config, const osp_backend *backend,
                      int64_t version, const char *version_path,
                      const model_load_options *opts, osp_model **out);
/* A model version without a backend or instances (a scheduler of the core
 * runs its requests, as the ensemble's does): `config` is taken over on
 * success. */
osp_error *model_load_shell(osp_model_config *config, int64_t version,
                            const char *version_path, osp_model **out);

/* Stops accepting work, lets workers finish everything queued, frees the
 * instances and backend state, and drops the loader's reference. */
void model_unload(osp_model *model);

osp_model *model_ref(osp_model *model);

/* osp_server_infer_stream_async for a step of an ensemble: the request's
 * compute durations also go to `sink` (borrowed until the final
 * callback). */
osp_error *server_infer_step(osp_server *server, osp_infer_request *req,
                             osp_infer_response_fn respond, void *user,
                             stats_sink *sink);

/* Queues a validated request (ownership of p moves). Returns UNAVAILABLE if
 * the model is stopping (p is then freed without completing). When the
 * model runs inline and an instance is idle, the batch that the request
 * joins runs on the calling thread before this returns (its completion
 * callback included), with up to MODEL_INLINE_MAX_BATCHES - 1 more batches
 * that were queued meanwhile; otherwise an instance worker runs it. */
osp_error *model_enqueue(osp_model *model, pending_request *p);
/* model_enqueue without the sequence batcher in front, for the sequence
 * batcher itself: on error p stays the caller's. */
osp_error *model_enqueue_keep(osp_model *model, pending_request *p);

/* Runs one batch of requests on an instance and completes each of them.
 * Consumes the array's entries. */
void instance_execute_batch(model_instance *inst, pending_request **batch,
                            size_t n);

/* From now on queued requests run as soon as an instance is free, without
 * waiting for a batch to fill (server shutdown). */
void model_flush(osp_model *model);

/* Requests queued now, waiting for an instance. */
size_t model_pending_count(osp_model *model);
