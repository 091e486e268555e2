/*
 * The batches of one model instance under the sequence batcher's `direct`
 * strategy (Triton's DirectSequenceBatch): each of the instance's batch
 * slots holds at most one request ready to run, and a batch puts every
 * slot's request at the row of its slot.
 *
 * Pure bookkeeping with an injected clock, as batcher.h: no locks, no
 * threads, no clock reads, no allocation per request (entries are embedded
 * in the caller's requests).
 *
 * - A batch holds rows 0..h, h the highest slot with a ready request; the
 *   rows of slots without one are holes (NULL) that the caller fills with
 *   requests whose READY control is false.
 * - It runs at once when max_queue_delay_microseconds or
 *   minimum_slot_utilization is 0; otherwise once the oldest ready request
 *   has waited the delay, or as soon as (ready slots) / max_batch_size
 *   reaches minimum_slot_utilization (Triton's rule).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batcher.h"
#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct slot_batcher {
    batcher_entry **ready; /* per slot: its request waiting to run, or NULL */
    size_t n_slots;
    size_t n_ready;
    int64_t max_batch; /* the utilization's denominator, >= 1 */
    uint64_t max_delay_ns;
    float min_utilization;
    batcher_compatible_fn compatible; /* NULL: every request may share */
    void *compatible_ctx;
} slot_batcher;

/* n_slots (>= 1) batch slots; max_batch_size (< 1 counts as 1), the delay
 * and the utilization threshold as the config gives them; `compatible`
 * (with ctx, may be NULL) as batcher_init's. */
osp_error *slot_batcher_init(slot_batcher *sb, size_t n_slots,
                             int64_t max_batch_size, uint64_t max_delay_us,
                             float min_utilization,
                             batcher_compatible_fn compatible, void *ctx);
/* Frees the batcher's memory; entries still held are forgotten. */
void slot_batcher_destroy(slot_batcher *sb);

/* Puts e (borrowed until taken) into batch slot `slot`, ready at now_ns
 * (e->enqueue_ns). False, and nothing done, when the slot is out of range
 * or already holds a request (its sequence runs one request at a time). */
bool slot_batcher_put(slot_batcher *sb, size_t slot, batcher_entry *e,
                      uint64_t now_ns);

/* Decides at now_ns whether the batch runs. Returns its rows (0: not now)
 * in batch[0..rows), NULL for holes; the taken slots are empty again.
 * When 0, *wait_ns is how long to wait before asking again unless a
 * request arrives (0: no request is ready). flush: run whatever is ready
 * now (shutdown). batch must have room for n_slots entries. */
size_t slot_batcher_take(slot_batcher *sb, uint64_t now_ns, bool flush,
                         batcher_entry **batch, uint64_t *wait_ns);

/* Empties the slots whose request drop(e, ctx) selects (a request its
 * client cancelled: Triton then releases the sequence) and prepends each
 * to *removed (linked by ->next). Returns how many. */
size_t slot_batcher_remove_if(slot_batcher *sb, batcher_drop_fn drop,
                              void *ctx, batcher_entry **removed);

/* Requests ready in the slots. */
size_t slot_batcher_queued(const slot_batcher *sb);

#ifdef __cplusplus
}
#endif
