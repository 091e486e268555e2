/*
 * Upgraded connections (see the contract at the top of http_server.h): one
 * thread per http_server owns every socket its surfaces took over, reads
 * them into the surfaces' on_data, writes their bounded output queues
 * without blocking, and ends them with on_close.
 */
#include "http_upgrade.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "osprey/clock.h"
#include "osprey/log.h"

/* How long http_upgraded_close waits for queued output to drain. */
#define HTTP_UPGRADED_CLOSE_NS (5ull * 1000 * 1000 * 1000)
/* Bytes read from an upgraded socket per on_data call at most. */
#define HTTP_UPGRADED_READ 16384

struct http_upgraded {
    http_upgrades *owner;
    http_upgraded *next;
    MHD_socket fd;
    struct MHD_UpgradeResponseHandle *urh;
    const http_upgrade_handler *h;
    void *ctx;
    /* bytes read with the request head, delivered first (upgrade thread) */
    char *early;
    size_t early_len;
    bool opened; /* on_open ran (upgrade thread only) */
    /* under owner->mu */
    char *out;
    size_t out_off, out_len, out_cap, max_out;
    bool closing;      /* http_upgraded_close was called */
    bool dead;         /* peer gone or I/O failed: close now */
    uint64_t close_by; /* closing: deadline for the output to drain */
};

static bool set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl != -1 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

static void wake_thread(http_upgrades *u) {
    char b = 1;
    ssize_t rc = write(u->wake[1], &b, 1);
    (void)rc; /* a full pipe already wakes it */
}

/* Ends an upgraded connection the thread has unlinked: the surface's
 * on_close, then the socket goes back to MHD, which closes it. */
static void upgraded_finish(http_upgraded *c) {
    if (c->h->on_close)
        c->h->on_close(c->ctx);
    shutdown(c->fd, SHUT_RDWR); /* the peer sees the end at once */
    MHD_upgrade_action(c->urh, MHD_UPGRADE_ACTION_CLOSE);
    free(c->early);
    free(c->out);
    free(c);
}

bool http_upgrades_adopt(http_upgrades *u, const http_upgrade_handler *h,
                         void *ctx, MHD_socket sock,
                         struct MHD_UpgradeResponseHandle *urh,
                         const char *extra_in, size_t extra_in_size) {
    http_upgraded *c = calloc(1, sizeof *c);
    if (c && extra_in_size > 0) {
        c->early = malloc(extra_in_size);
        if (c->early) {
            memcpy(c->early, extra_in, extra_in_size);
            c->early_len = extra_in_size;
        }
    }
    if (!c || (extra_in_size > 0 && !c->early)) {
        free(c);
        shutdown(sock, SHUT_RDWR);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return false;
    }
    c->owner = u;
    c->fd = sock;
    c->urh = urh;
    c->h = h;
    c->ctx = ctx;
    c->max_out = h->max_queued ? h->max_queued : HTTP_UPGRADED_MAX_QUEUED;
    set_nonblocking(sock);
    pthread_mutex_lock(&u->mu);
    bool stopping = u->stop;
    if (!stopping) {
        c->next = u->list;
        u->list = c;
    }
    pthread_mutex_unlock(&u->mu);
    if (stopping) /* the thread is gone or going: close here */
        upgraded_finish(c);
    else
        wake_thread(u);
    return true;
}

/* Writes queued output until the socket would block. Call with the owner's mu.
 */
static void upgraded_flush(http_upgraded *c) {
    while (c->out_off < c->out_len && !c->dead) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
                c->dead = true;
            break;
        }
    }
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
}

osp_error *http_upgraded_send(http_upgraded *c, const void *data, size_t len) {
    osp_error *err = NULL;
    bool wake = false;
    http_upgrades *u = c->owner;
    pthread_mutex_lock(&u->mu);
    if (c->closing || c->dead) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE, "connection closed");
        goto out;
    }
    size_t queued = c->out_len - c->out_off;
    if (len > c->max_out || queued > c->max_out - len) {
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "output queue of the connection is full");
        goto out;
    }
    if (c->out_off > 0 && c->out_len + len > c->out_cap) {
        memmove(c->out, c->out + c->out_off, queued);
        c->out_len = queued;
        c->out_off = 0;
    }
    if (c->out_len + len > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + len)
            cap *= 2;
        char *grown = realloc(c->out, cap);
        if (!grown) {
            err = osp_error_out_of_memory();
            goto out;
        }
        c->out = grown;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    upgraded_flush(c);
    /* the thread watches for writability (or ends it on failure) */
    wake = c->out_len > 0 || c->dead;
out:
    pthread_mutex_unlock(&u->mu);
    if (wake)
        wake_thread(u);
    return err;
}

void http_upgraded_close(http_upgraded *c) {
    http_upgrades *u = c->owner;
    pthread_mutex_lock(&u->mu);
    if (!c->closing) {
        c->closing = true;
        c->close_by = osp_now_ns() + HTTP_UPGRADED_CLOSE_NS;
    }
    pthread_mutex_unlock(&u->mu);
    wake_thread(u);
}

/* The upgrade thread's poll set, rebuilt on every round. */
typedef struct upgrade_set {
    struct pollfd *fds; /* fds[0] is the wake pipe */
    http_upgraded **conns;
    size_t cap;
} upgrade_set;

static bool upgrade_set_reserve(upgrade_set *set, size_t n) {
    if (n <= set->cap)
        return true;
    size_t cap = set->cap ? set->cap : 16;
    while (cap < n)
        cap *= 2;
    struct pollfd *fds = realloc(set->fds, (cap + 1) * sizeof *fds);
    if (fds)
        set->fds = fds;
    http_upgraded **conns = realloc(set->conns, cap * sizeof *conns);
    if (conns)
        set->conns = conns;
    if (!fds || !conns)
        return false;
    set->cap = cap;
    return true;
}

/* Under u->mu: unlinks the connections to end (all when stopping) into
 * *done and lists the rest in set with their poll events. Returns how many
 * are listed and sets *timeout_ms for the nearest close deadline. */
static size_t upgrade_collect(http_upgrades *u, upgrade_set *set,
                              http_upgraded **done, int *timeout_ms) {
    uint64_t now = osp_now_ns(), next = 0;
    size_t n = 0;
    http_upgraded **link = &u->list;
    while (*link) {
        http_upgraded *c = *link;
        bool drained = c->out_len == c->out_off;
        if (u->stop || c->dead ||
            (c->closing && (drained || now >= c->close_by)) ||
            !upgrade_set_reserve(set, n + 1)) {
            *link = c->next;
            c->next = *done;
            *done = c;
            continue;
        }
        if (c->closing && (next == 0 || c->close_by < next))
            next = c->close_by;
        set->conns[n] = c;
        set->fds[n + 1].fd = c->fd;
        set->fds[n + 1].events = (short)(POLLIN | (drained ? 0 : POLLOUT));
        set->fds[n + 1].revents = 0;
        n++;
        link = &c->next;
    }
    *timeout_ms = next == 0 ? -1 : (int)((next - now) / 1000000 + 1);
    return n;
}

/* Owns every upgraded socket: reads and hands bytes to on_data, writes
 * queued output, ends connections. Callbacks run without u->mu. */
static void *upgrade_thread(void *arg) {
    http_upgrades *u = arg;
    upgrade_set set = {NULL, NULL, 0};
    char buf[HTTP_UPGRADED_READ];
    for (;;) {
        http_upgraded *done = NULL;
        int timeout_ms = -1;
        pthread_mutex_lock(&u->mu);
        bool stop = u->stop;
        size_t n = upgrade_collect(u, &set, &done, &timeout_ms);
        pthread_mutex_unlock(&u->mu);
        while (done) {
            http_upgraded *c = done;
            done = c->next;
            upgraded_finish(c);
        }
        if (stop)
            break;
        /* New connections: on_open, then the early bytes. */
        for (size_t i = 0; i < n; i++) {
            http_upgraded *c = set.conns[i];
            if (c->opened)
                continue;
            c->opened = true;
            if (c->h->on_open)
                c->h->on_open(c->ctx, c);
            if (c->early_len > 0)
                c->h->on_data(c->ctx, c, c->early, c->early_len);
            free(c->early);
            c->early = NULL;
            c->early_len = 0;
        }
        /* set.fds is NULL only while no connection was ever listed */
        struct pollfd wake = {u->wake[0], POLLIN, 0};
        struct pollfd *fds = set.fds ? set.fds : &wake;
        fds[0] = wake;
        if (poll(fds, n + 1, timeout_ms) < 0 && errno != EINTR) {
            OSP_LOG_ERROR("HTTP upgrade thread: poll: %s", strerror(errno));
            struct timespec delay = {0, 10 * 1000 * 1000};
            nanosleep(&delay, NULL);
            continue;
        }
        if (fds[0].revents & POLLIN) {
            char sink[64];
            while (read(u->wake[0], sink, sizeof sink) > 0)
                ;
        }
        for (size_t i = 0; i < n; i++) {
            http_upgraded *c = set.conns[i];
            short ev = fds[i + 1].revents;
            if (ev & (POLLIN | POLLHUP | POLLERR)) {
                ssize_t got = recv(c->fd, buf, sizeof buf, 0);
                if (got > 0) {
                    c->h->on_data(c->ctx, c, buf, (size_t)got);
                } else if (got == 0 ||
                           (errno != EAGAIN && errno != EWOULDBLOCK &&
                            errno != EINTR)) {
                    pthread_mutex_lock(&u->mu);
                    c->dead = true;
                    pthread_mutex_unlock(&u->mu);
                }
            }
            if (ev & POLLOUT) {
                pthread_mutex_lock(&u->mu);
                upgraded_flush(c);
                pthread_mutex_unlock(&u->mu);
            }
        }
    }
    free(set.fds);
    free(set.conns);
    return NULL;
}

void http_upgrades_stop(http_upgrades *u) {
    if (!u->started)
        return;
    pthread_mutex_lock(&u->mu);
    u->stop = true;
    pthread_mutex_unlock(&u->mu);
    wake_thread(u);
    pthread_join(u->thread, NULL);
    u->started = false;
}

osp_error *http_upgrades_start(http_upgrades *u) {
    memset(u, 0, sizeof *u);
    u->wake[0] = u->wake[1] = -1;
    pthread_mutex_init(&u->mu, NULL);
    if (pipe(u->wake) != 0 || !set_nonblocking(u->wake[0]) ||
        !set_nonblocking(u->wake[1]))
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "pipe: %s",
                             strerror(errno));
    if (pthread_create(&u->thread, NULL, upgrade_thread, u) != 0)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "no thread");
    u->started = true;
    return NULL;
}

void http_upgrades_destroy(http_upgrades *u) {
    for (int i = 0; i < 2; i++)
        if (u->wake[i] >= 0)
            close(u->wake[i]);
    pthread_mutex_destroy(&u->mu);
}
