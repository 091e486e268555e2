/*
 * The sequence table of one model version: which correlation ids have a
 * live sequence, the requests each one still has to run, and its implicit
 * state between requests.
 *
 * Pure bookkeeping with an injected clock, as batcher.h: no locks, no
 * threads, no clock reads. sequence_batcher.c wraps it in a mutex; the
 * unit tests drive it with a fake clock.
 *
 * The table is a fixed array of `capacity` slots allocated once: a full
 * table refuses a new sequence (UNAVAILABLE) instead of growing, and a
 * slot's address stays valid while the sequence lives, so requests in
 * flight point at it. Lookups scan the used slots (capacity is small: a
 * few thousand at most).
 *
 * Batch slots (Triton's sequence slots), once sequence_table_set_batch_slots
 * has given the table n_instances x per_instance of them: a new sequence
 * takes a free one (the lowest row, then the lowest instance, as Triton's
 * priority queue of ready slots) and keeps it until it is released; all
 * its requests run on that instance at that row. When every batch slot is
 * held the sequence waits (waiting_for_slot) in a FIFO; a release hands
 * the freed batch slot to the oldest waiting sequence, which is then
 * "promoted" until the caller collects it (sequence_table_take_promoted)
 * to run its first request.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/memory.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pending_request;

/* A correlation id: a uint64 or a string (Triton's SequenceId). 0 and ""
 * mean "none". */
typedef struct sequence_id {
    bool is_string;
    uint64_t number;
    const char *string; /* borrowed in lookups; owned (copied) in a slot */
} sequence_id;

typedef struct sequence_slot {
    bool used;
    /* Its END request has arrived: later requests with the same id do not
     * join it (a START opens a new sequence), and the slot is released
     * once that request has run. */
    bool ending;
    bool in_flight; /* one of its requests is queued or running */
    sequence_id id; /* string owned by the slot */
    uint64_t last_active_ns;
    /* Requests waiting for the one in flight, FIFO, linked by ->next. The
     * slot does not own them (the sequence batcher does). */
    struct pending_request *backlog_head, *backlog_tail;
    /* Per configured state: its value after the last request that ran, in
     * the memory of the device of the instance holding its batch slot
     * (sequence_state.h), or NULL for the initial value. Owned by the
     * slot: freed when the sequence is released. */
    osp_buffer **state;
    /* Its batch slot: the instance and the row of that instance's batches
     * its requests run at; both -1 while it waits for one, or when the
     * table has no batch slots. */
    int instance, batch_index;
    bool waiting_for_slot; /* in the FIFO of sequences without a slot */
} sequence_slot;

/* A FIFO of sequences, a ring of fixed capacity (the table's). */
typedef struct sequence_ring {
    sequence_slot **items;
    size_t head, count, capacity;
} sequence_ring;

typedef struct sequence_table {
    sequence_slot *slots;
    size_t capacity;
    size_t used;
    size_t n_states;
    uint64_t idle_ns; /* max_sequence_idle_microseconds, in ns */
    /* Batch slots: holder[index * n_instances + instance], or NULL when
     * free. None (n_instances 0) until sequence_table_set_batch_slots. */
    size_t n_instances, per_instance;
    sequence_slot **holder;
    sequence_ring waiting;  /* sequences waiting for a batch slot */
    sequence_ring promoted; /* given one by a release, not yet collected */
} sequence_table;

/* A table of `capacity` (>= 1) slots for sequences with n_states implicit
 * states each, released after idle_ns without a request. */
osp_error *sequence_table_init(sequence_table *t, size_t capacity,
                               size_t n_states, uint64_t idle_ns);
/* Frees the slots, their ids and states. Backlogs must be empty. */
void sequence_table_destroy(sequence_table *t);
/* Gives the (empty) table n_instances x per_instance batch slots (both
 * >= 1). */
osp_error *sequence_table_set_batch_slots(sequence_table *t, size_t n_instances,
                                          size_t per_instance);

/* Whether the ids are the same (type and value). */
bool sequence_id_equal(const sequence_id *a, const sequence_id *b);
/* Writes the id as Triton prints it in messages (the number, or the
 * string) into buf. */
const char *sequence_id_format(const sequence_id *id, char *buf, size_t cap);

/* The live sequence with `id` (borrowed) that new requests may join, or
 * NULL. A sequence idle past idle_ns at now_ns is released here and not
 * returned, as Triton's reaper would have released it. */
sequence_slot *sequence_table_find(sequence_table *t, const sequence_id *id,
                                   uint64_t now_ns);
/* Opens a sequence for `id` (copied) at now_ns, releasing idle sequences
 * first when the table is full. UNAVAILABLE when every slot is busy. With
 * batch slots the sequence takes a free one, or waits for one
 * (waiting_for_slot). */
osp_error *sequence_table_open(sequence_table *t, const sequence_id *id,
                               uint64_t now_ns, sequence_slot **out);
/* Frees the slot's id and state and makes it available. Its backlog must
 * be empty and nothing may be in flight. Its batch slot goes to the
 * oldest waiting sequence, which becomes promoted. */
void sequence_table_release(sequence_table *t, sequence_slot *slot);
/* Releases every sequence idle at now_ns; returns how many. */
size_t sequence_table_reap(sequence_table *t, uint64_t now_ns);

/* The oldest sequence that a release gave a batch slot and that the
 * caller has not collected yet (it then runs its first waiting request),
 * or NULL. */
sequence_slot *sequence_table_take_promoted(sequence_table *t);
/* Sequences waiting for a batch slot. */
size_t sequence_table_waiting(const sequence_table *t);
/* When the first sequence holding a batch slot becomes idle (and would be
 * released by sequence_table_reap), or UINT64_MAX when none can: what a
 * reaper waits for while sequences wait for a slot. */
uint64_t sequence_table_next_idle_ns(const sequence_table *t);

#ifdef __cplusplus
}
#endif
