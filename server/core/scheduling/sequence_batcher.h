/*
 * Triton's sequence batcher (sequence_batching in config.pbtxt), in front
 * of a model's queue: correlation ids, control inputs, implicit state.
 *
 * - Every request names its sequence with the `sequence_id` parameter (a
 *   uint64 or a string; 0 and "" mean none) and flags its first and last
 *   requests with `sequence_start` / `sequence_end`.
 * - At most one request of a sequence is queued or running; later ones
 *   wait in the sequence's backlog and run in arrival order, each after
 *   the previous one has finished (so each sees the state the previous one
 *   left).
 * - Each request gets the model's control inputs (START, END, READY,
 *   CORRID with the values of their *_false_true lists) and each state's
 *   input tensor: its value after the sequence's previous request, or the
 *   initial value (zeros or initial_state's data_file) on START. The
 *   backend's state outputs become the sequence's next state.
 * - Batch slots (Triton's sequence slots): each instance has
 *   max_batch_size of them (`oldest`: max_candidate_sequences when set).
 *   A new sequence takes a free one and keeps it until its END or its
 *   idle release: all its requests run on that instance. When every slot
 *   is held new sequences wait, in arrival order, and take slots as they
 *   free (a reaper thread releases idle holders while some wait).
 * - Each instance batches its own sequences' requests: `oldest` in a
 *   dynamic batcher with its preferred_batch_size, max_queue_delay and
 *   preserve_ordering; `direct` puts each request at the row of its batch
 *   slot (slot_batcher.h), the rows in between being filler requests
 *   (sequence_batcher_filler_new) whose READY is false.
 * - A sequence idle for max_sequence_idle_microseconds is released; a
 *   request that is not START for an unknown, ended or released sequence
 *   fails with Triton's message. The table of live sequences is bounded
 *   (--max-sequences, default SEQUENCE_TABLE_CAPACITY); a full table
 *   refuses new sequences.
 *
 * Threading: one mutex guards the table. Requests enter through
 * model_enqueue; a finished request (pending_request_finish) hands the
 * next one of its sequence, and the first one of a sequence its release
 * gave a batch slot, to the model (the slot's instance's queue); the
 * reaper thread does the same for the slots of idle sequences.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/error.h"
#include "osprey/memory.h"
#include "osprey/model_config.h"

typedef struct osp_model osp_model;
typedef struct sequence_batcher sequence_batcher;
typedef struct sequence_slot sequence_slot;
struct pending_request;

/* Live sequences per model version when the server sets no bound
 * (--max-sequences' default). */
#define SEQUENCE_TABLE_CAPACITY 4096

/* What a request of a sequence carries (pending_request.sequence). */
typedef struct sequence_step {
    sequence_batcher *batcher; /* borrowed: the model owns it */
    sequence_slot *slot;       /* NULL once its outcome has been recorded */
    bool start, end;
    /* A `direct` filler row's (sequence_batcher_filler_new): no sequence,
     * zero states. */
    bool filler;
    /* The batch slot its sequence holds, set when it is dispatched: it
     * runs on that instance, at that row of a `direct` batch. */
    int instance, batch_index;
    /* Per state: the state output rows of this request, set by the batch
     * that ran it, on its instance's device
     * (sequence_batcher_next_state_row). Owned. */
    osp_buffer **next_state;
} sequence_step;

/* The sequence batcher for `config` (borrowed; it must outlive the
 * batcher), loading initial_state files from `version_path`/initial_state,
 * with room for `max_sequences` live sequences (0: the default). Load
 * errors name the state or control. Caller owns *out. */
osp_error *sequence_batcher_new(const osp_model_config *config,
                                const char *version_path, size_t max_sequences,
                                sequence_batcher **out);
void sequence_batcher_free(sequence_batcher *sb);

/* Inputs the batcher adds to every request beyond the config's: the
 * control inputs, then the states' inputs. extra_input gives the k-th one's
 * name (borrowed) and datatype. */
size_t sequence_batcher_extra_inputs(const sequence_batcher *sb);
void sequence_batcher_extra_input(const sequence_batcher *sb, size_t k,
                                  const char **name, osp_datatype *dtype);
/* Outputs the backend produces beyond the config's: one per state. */
size_t sequence_batcher_extra_outputs(const sequence_batcher *sb);
const osp_sequence_state *sequence_batcher_state(const sequence_batcher *sb,
                                                 size_t k);
/* Bytes of one row (one sequence's value) of state k. */
size_t sequence_batcher_state_bytes(const sequence_batcher *sb, size_t k);

/* Takes a validated request of the model (ownership of p moves, also on
 * error, as model_enqueue): checks its correlation id and flags, queues it
 * behind its sequence's earlier requests, and hands it to the model's
 * queue when its turn comes. */
osp_error *sequence_batcher_submit(sequence_batcher *sb, osp_model *model,
                                   struct pending_request *p);

/* Requests waiting behind their sequence's request in flight or for a
 * batch slot: queued, as Triton's pending request count has them. Reads
 * a counter, no lock. */
size_t sequence_batcher_backlogged(sequence_batcher *sb);

/* Called by pending_request_finish for a request of a sequence before it
 * is delivered: on success its state outputs become the sequence's state;
 * either way the sequence's next request goes to the queue (or, after its
 * END, the sequence is released). */
void sequence_batcher_step_finished(struct pending_request *p, bool succeeded);

/* Gives the batcher the model's instances: n_instances x slots-per-
 * instance batch slots, and starts the reaper thread. `model` is borrowed
 * (it owns the batcher). */
osp_error *sequence_batcher_start(sequence_batcher *sb, osp_model *model,
                                  size_t n_instances);
/* Batch slots of each instance (after sequence_batcher_start). */
size_t sequence_batcher_slots_per_instance(const sequence_batcher *sb);
/* Stops the reaper (the model is stopping: its queue refuses requests);
 * the sequences still waiting for a batch slot then fail. Idempotent;
 * never called on the reaper's own thread. */
void sequence_batcher_stop(sequence_batcher *sb);

/* A filler row for a `direct` batch slot without a request (Triton's null
 * request): the config inputs `like` (borrowed: a request of the batch)
 * gives, with its shapes and zero bytes (BYTES: empty strings), START,
 * END and READY false, CORRID 0 (or ""), zero states. It has no model,
 * sequence or requested output; its response is to be dropped. Caller
 * owns *out (complete is left for the caller to set). */
osp_error *sequence_batcher_filler_new(sequence_batcher *sb,
                                       const struct pending_request *like,
                                       struct pending_request **out);

/* Where row p (borrowed) of a batch running on `instance` takes state k
 * from, on that instance's device: for a request of a sequence its
 * sequence's state (the initial value on START or before any request of
 * it ran), for a filler row zeros. *out is borrowed, valid while the
 * batch runs (only p's own step changes it); NULL for a request that did
 * not come through the sequence batcher (a warmup sample gives its states
 * as ordinary inputs). INTERNAL when p's sequence is held by another
 * instance. */
osp_error *sequence_batcher_state_row(sequence_batcher *sb,
                                      const struct pending_request *p,
                                      size_t instance, size_t k,
                                      const osp_buffer **out);

/* A new buffer on `instance`'s device for p's next value of state k
 * (one row), owned by p's step, which hands it to its sequence if p
 * succeeds (sequence_batcher_step_finished) and frees it otherwise; *out
 * is borrowed. *out NULL (no error) when nobody keeps p's state (a filler
 * row, a warmup sample). */
osp_error *sequence_batcher_next_state_row(sequence_batcher *sb,
                                           struct pending_request *p,
                                           size_t instance, size_t k,
                                           osp_buffer **out);

/* Frees a step and the state rows it holds. */
void sequence_step_free(sequence_step *step);
