/*
 * Timed condition waits on the monotonic clock: the one way the tree
 * waits "until signalled or until a deadline". Deadlines are absolute
 * osp_now_ns() values (CLOCK_MONOTONIC), so a wall clock set back or
 * forward (NTP, an operator) neither stretches nor cuts a wait.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* pthread_cond_init with CLOCK_MONOTONIC: every condition variable that
 * cond_wait_until waits on is made by this. */
void cond_init_monotonic(pthread_cond_t *cond);

/* The deadline `ns` from now (saturating). */
uint64_t deadline_after_ns(uint64_t ns);

/* Waits on cond (made by cond_init_monotonic; mu held) until it is
 * signalled, spuriously woken or deadline_ns passes. false when the
 * deadline has passed, true otherwise: callers loop on their condition,
 * as with pthread_cond_wait. */
bool cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu,
                     uint64_t deadline_ns);

#ifdef __cplusplus
}
#endif
