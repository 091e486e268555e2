/* Timed condition waits on the monotonic clock (cond_deadline.h). */
#include "cond_deadline.h"

#include <errno.h>
#include <time.h>

#include "osprey/clock.h"

void cond_init_monotonic(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

uint64_t deadline_after_ns(uint64_t ns) {
    uint64_t now = osp_now_ns();
    return ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
}

bool cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu,
                     uint64_t deadline_ns) {
    if (osp_now_ns() >= deadline_ns)
        return false;
    /* time_t holds any deadline osp_now_ns can reach (centuries). */
    struct timespec until = {(time_t)(deadline_ns / 1000000000ull),
                             (long)(deadline_ns % 1000000000ull)};
    return pthread_cond_timedwait(cond, mu, &until) != ETIMEDOUT;
}
