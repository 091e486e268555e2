/*
 * An ensemble's max_inflight_requests (Triton's backpressure): per step,
 * at most `limit` executions submitted and not yet ended (final response),
 * counted across all the ensemble's requests. Triton blocks the thread
 * that schedules an execution over the limit; here the execution waits in
 * its step's FIFO instead and takes the slot the next ending execution of
 * that step gives up, so no step model's thread is ever held (a step
 * whose completion drives the next submissions cannot deadlock itself).
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Embedded in what waits for a slot (intrusive FIFO link). */
typedef struct limiter_waiter {
    struct limiter_waiter *next;
} limiter_waiter;

typedef struct ensemble_limiter ensemble_limiter;

/* A limiter of `limit` slots (> 0) for each of `n_steps` steps; NULL on
 * out of memory. */
ensemble_limiter *ensemble_limiter_new(size_t n_steps, uint32_t limit);
/* With no execution in flight or waiting. NULL is a no-op. */
void ensemble_limiter_free(ensemble_limiter *lim);

/* Takes a slot of `step` for `w` (borrowed; it must stay alive until it is
 * handed back by ensemble_limiter_release): true when one was free, else
 * false and `w` waits at the back of the step's FIFO. */
bool ensemble_limiter_acquire(ensemble_limiter *lim, size_t step,
                              limiter_waiter *w);

/* Gives back a slot of `step`. The first waiter of the step, if any, now
 * holds it and is returned (its owner must submit it); NULL otherwise. */
limiter_waiter *ensemble_limiter_release(ensemble_limiter *lim, size_t step);

/* Executions of `step` holding a slot (for tests and logs). */
uint32_t ensemble_limiter_in_flight(ensemble_limiter *lim, size_t step);
