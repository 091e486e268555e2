/*
 * Where the implicit states of a sequence model live between requests: in
 * the memory of the device of the instance that holds the sequence's batch
 * slot (a CPU instance's device memory is host memory).
 *
 * The batch slot pins a sequence to one instance under both strategies
 * (`direct` and `oldest`), so a state never moves between devices: the
 * batch gathers its rows with device-to-device copies from the sequences'
 * buffers and scatters the next values into new buffers the same way
 * (instance_exec.c).
 *
 * This store holds what every sequence of an instance shares: each state's
 * initial value (zeros or initial_state's data_file), uploaded once per
 * instance when the model loads, and zeros for `direct`'s filler rows. The
 * sequences' own buffers (sequence_slot.state, sequence_step.next_state)
 * come from sequence_state_alloc and belong to the slot or step that holds
 * them.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/device.h"
#include "osprey/error.h"
#include "osprey/memory.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One instance's shared state values, on its device. */
typedef struct sequence_state_instance {
    osp_device *device;   /* borrowed: the model's instance */
    osp_buffer **initial; /* per state, owned */
    /* Per state: zeros (filler rows). Owned, or NULL where the initial
     * value is zeros (initial then serves). */
    osp_buffer **zeros;
} sequence_state_instance;

typedef struct sequence_state_store {
    size_t n_states;
    const size_t *row_bytes; /* per state, borrowed from the batcher */
    sequence_state_instance *instances;
    size_t n_instances;
} sequence_state_store;

/* Uploads, for each of the n_instances devices (borrowed; they outlive the
 * store), each state's initial value (`initial`, n_states host buffers of
 * row_bytes[k] bytes, borrowed during the call; initial_is_zero[k] when it
 * is all zeros) and, where it is not zeros, a zero row. row_bytes is
 * borrowed for the store's life. On error what was made is freed. */
osp_error *sequence_state_store_init(sequence_state_store *s, size_t n_states,
                                     const size_t *row_bytes,
                                     osp_buffer *const *initial,
                                     const bool *initial_is_zero,
                                     osp_device *const *devices,
                                     size_t n_instances);
/* Frees every uploaded buffer. A zeroed store is a no-op. */
void sequence_state_store_destroy(sequence_state_store *s);

/* State k's initial value, and a zero row, on `instance`'s device
 * (borrowed: the store owns them); NULL for an unknown instance. */
const osp_buffer *sequence_state_initial(const sequence_state_store *s,
                                         size_t instance, size_t k);
const osp_buffer *sequence_state_zeros(const sequence_state_store *s,
                                       size_t instance, size_t k);

/* A buffer for one row of state k on `instance`'s device. Caller owns
 * *out (osp_buffer_free). The device's error when it is out of memory. */
osp_error *sequence_state_alloc(const sequence_state_store *s, size_t instance,
                                size_t k, osp_buffer **out);

#ifdef __cplusplus
}
#endif
