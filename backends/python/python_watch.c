/* The idle channel of a python instance that is not decoupled: its
 * doorbell and watcher thread (python_watch.h). */
#define _GNU_SOURCE
#include "python_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "osprey/log.h"
#include "python_bls.h"
#include "python_protocol.h"

/* The stub's doorbell is its fd 5: the eventfd must lie above it. */
#define PYWATCH_LOWEST_FD 6

struct pywatch {
    pystub *stub;            /* borrowed: the instance's */
    pybls_outbox *bls;       /* borrowed: the instance's */
    int doorbell;            /* eventfd above the stub's fds */
    pthread_mutex_t channel; /* held by whoever reads the stub's channel */
    pthread_t thread;
    bool running;
    atomic_bool stopping;
};

static void *watch_main(void *arg);

osp_error *pywatch_new(pystub *stub, pybls_outbox *bls, pywatch **out) {
    pywatch *w = calloc(1, sizeof *w);
    if (!w)
        return osp_error_out_of_memory();
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd >= 0 && fd < PYWATCH_LOWEST_FD) {
        int moved = fcntl(fd, F_DUPFD_CLOEXEC, PYWATCH_LOWEST_FD);
        close(fd);
        fd = moved;
    }
    if (fd < 0) {
        free(w);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: cannot make the doorbell of "
                             "instance '%s': %s",
                             stub->name, strerror(errno));
    }
    w->stub = stub;
    w->bls = bls;
    w->doorbell = fd;
    atomic_init(&w->stopping, false);
    pthread_mutex_init(&w->channel, NULL);
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        pthread_mutex_destroy(&w->channel);
        close(fd);
        free(w);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: cannot start the watcher thread "
                             "of instance '%s'",
                             stub->name);
    }
    w->running = true;
    *out = w;
    return NULL;
}

int pywatch_doorbell_fd(const pywatch *w) {
    return w->doorbell;
}

static void ring(pywatch *w) {
    uint64_t one = 1;
    if (write(w->doorbell, &one, sizeof one) < 0 && errno != EAGAIN)
        OSP_LOG_WARN("python backend: doorbell write: %s", strerror(errno));
}

/* Kills a stub whose channel broke or that broke the protocol between
 * requests; the next request starts a fresh one. Caller holds channel. */
static void end_stub(pywatch *w, const char *why) {
    OSP_LOG_ERROR("python backend: the stub of instance '%s' %s between "
                  "requests; the next request starts a fresh one",
                  w->stub->name, why);
    pystub_kill(w->stub); /* its calls are forgotten */
}

/* Serves what the stub sent while no request ran: every frame readable
 * now, and the answers waiting. Returns whether calls are still in flight
 * (keep watching the channel and the outbox). Caller holds channel. */
static bool serve_locked(pywatch *w) {
    pystub *stub = w->stub;
    if (stub->pid == 0 || stub->control < 0)
        return false; /* dead: the next request restarts it */
    for (;;) {
        if (!pybls_outbox_flush(w->bls, stub)) {
            end_stub(w, "closed its channel");
            return false;
        }
        struct pollfd p = {.fd = stub->control, .events = POLLIN};
        int ready = poll(&p, 1, 0);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            break;
        uint32_t type = 0;
        uint8_t *buf = NULL;
        size_t len = 0;
        /* Once a frame begins it is read whole. */
        if (pyproto_recv(stub->control, 0, stub->max_frame, &type, &buf,
                         &len) != PYPROTO_RECV_OK) {
            end_stub(w, "closed its channel");
            return false;
        }
        pystub_frame_status served;
        if (type == PYPROTO_BLS) {
            /* The region belongs to the next request: a stub calls
             * through it only while its execute runs. */
            pybls_gathered refused = {
                .error = osp_error_new(OSP_ERROR_INTERNAL,
                                       "python backend: a region BLS request "
                                       "outside execute")};
            served = pybls_send_gathered(stub, &refused) ? PYSTUB_FRAME_SERVED
                                                         : PYSTUB_FRAME_BROKEN;
            osp_error_free(refused.error);
        } else {
            served = pystub_serve_frame(stub, type, buf, len);
        }
        free(buf);
        if (served == PYSTUB_FRAME_BROKEN) {
            end_stub(w, "closed its channel");
            return false;
        }
        if (served == PYSTUB_FRAME_OTHER) {
            OSP_LOG_ERROR("python backend: frame %u from the stub of instance "
                          "'%s' while no request runs",
                          type, stub->name);
            end_stub(w, "broke the protocol");
            return false;
        }
    }
    return pybls_outbox_busy(w->bls);
}

/* The watcher: asleep on the doorbell; while calls are in flight also on
 * the channel and the outbox. */
static void *watch_main(void *arg) {
    pywatch *w = arg;
    bool watching = false;
    int control = -1;
    while (!atomic_load(&w->stopping)) {
        struct pollfd pfd[3] = {
            {.fd = w->doorbell, .events = POLLIN},
            {.fd = control, .events = POLLIN},
            {.fd = pybls_outbox_wake_fd(w->bls), .events = POLLIN}};
        int ready = poll(pfd, watching ? 3 : 1, -1);
        if (ready < 0 && errno != EINTR) {
            OSP_LOG_ERROR("python backend: the watcher of instance '%s' "
                          "stops: poll: %s",
                          w->stub->name, strerror(errno));
            break;
        }
        uint64_t rung;
        if (read(w->doorbell, &rung, sizeof rung) < 0 && errno != EAGAIN)
            OSP_LOG_WARN("python backend: doorbell read: %s", strerror(errno));
        pthread_mutex_lock(&w->channel);
        if (!atomic_load(&w->stopping))
            watching = serve_locked(w);
        /* Read under the lock: a restarted stub has a channel of its own
         * (a stale fd in the poll above only wakes the watcher once). */
        control = w->stub->control;
        pthread_mutex_unlock(&w->channel);
    }
    return NULL;
}

/* How long pywatch_stop lets the watcher finish what it serves before it
 * breaks the channel under it (a stub that no longer reads). */
#define PYWATCH_STOP_GRACE_S 5

void pywatch_stop(pywatch *w) {
    if (!w->running)
        return;
    atomic_store(&w->stopping, true);
    ring(w);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += PYWATCH_STOP_GRACE_S;
    if (pthread_timedjoin_np(w->thread, NULL, &until) != 0) {
        /* Blocked sending to, or reading from, a stub that stalls: the
         * stub cannot be finalized through this channel anyway. */
        OSP_LOG_WARN("python backend: the stub of instance '%s' stalls its "
                     "channel; shutting the channel down",
                     w->stub->name);
        int control = w->stub->control;
        if (control >= 0)
            shutdown(control, SHUT_RDWR);
        pthread_join(w->thread, NULL);
    }
    w->running = false;
}

void pywatch_free(pywatch *w) {
    if (!w)
        return;
    pywatch_stop(w);
    close(w->doorbell);
    pthread_mutex_destroy(&w->channel);
    free(w);
}

void pywatch_take(pywatch *w) {
    pthread_mutex_lock(&w->channel);
}

void pywatch_give(pywatch *w) {
    if (w->stub->control >= 0 && pybls_outbox_busy(w->bls))
        ring(w); /* the watcher sends their answers from now on */
    pthread_mutex_unlock(&w->channel);
}
