/*
 * Per-step slots of an ensemble's max_inflight_requests (see
 * ensemble_limiter.h). One mutex guards all steps: the work under it is a
 * counter and a list link.
 */
#include "ensemble_limiter.h"

#include <stdlib.h>

typedef struct step_slots {
    uint32_t in_flight;          /* slots taken */
    limiter_waiter *head, *tail; /* waiting for a slot, FIFO */
} step_slots;

struct ensemble_limiter {
    pthread_mutex_t lock;
    uint32_t limit;
    size_t n_steps;
    step_slots steps[];
};

ensemble_limiter *ensemble_limiter_new(size_t n_steps, uint32_t limit) {
    ensemble_limiter *lim =
        calloc(1, sizeof(*lim) + (n_steps + 1) * sizeof(step_slots));
    if (!lim)
        return NULL;
    pthread_mutex_init(&lim->lock, NULL);
    lim->limit = limit;
    lim->n_steps = n_steps;
    return lim;
}

void ensemble_limiter_free(ensemble_limiter *lim) {
    if (!lim)
        return;
    pthread_mutex_destroy(&lim->lock);
    free(lim);
}

bool ensemble_limiter_acquire(ensemble_limiter *lim, size_t step,
                              limiter_waiter *w) {
    step_slots *s = &lim->steps[step];
    pthread_mutex_lock(&lim->lock);
    /* Waiters go first: a new execution never overtakes one that waits. */
    bool free_slot = s->in_flight < lim->limit && !s->head;
    if (free_slot) {
        s->in_flight++;
    } else {
        w->next = NULL;
        if (s->tail)
            s->tail->next = w;
        else
            s->head = w;
        s->tail = w;
    }
    pthread_mutex_unlock(&lim->lock);
    return free_slot;
}

limiter_waiter *ensemble_limiter_release(ensemble_limiter *lim, size_t step) {
    step_slots *s = &lim->steps[step];
    pthread_mutex_lock(&lim->lock);
    limiter_waiter *next = s->head;
    if (next) { /* the slot passes straight to it */
        s->head = next->next;
        if (!s->head)
            s->tail = NULL;
        next->next = NULL;
    } else if (s->in_flight > 0) {
        s->in_flight--;
    }
    pthread_mutex_unlock(&lim->lock);
    return next;
}

uint32_t ensemble_limiter_in_flight(ensemble_limiter *lim, size_t step) {
    pthread_mutex_lock(&lim->lock);
    uint32_t n = lim->steps[step].in_flight;
    pthread_mutex_unlock(&lim->lock);
    return n;
}
