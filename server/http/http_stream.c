/* Reply bodies written piece by piece (http_stream.h). The connection is
 * suspended while the writer has nothing for it, and resumed by the next
 * write or the end, so no thread waits and no poll spins. */
#include "http_stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Most bytes a stream holds for a client that reads slower than the model
 * writes; past it the client counts as gone. */
#define STREAM_MAX_PENDING (64u << 20)

struct http_stream {
    pthread_mutex_t mu;
    atomic_int refs;
    char *pending; /* written, not yet handed to MHD */
    size_t len, cap;
    bool ended;     /* http_stream_end was called */
    bool gone;      /* the response was freed (or never sent) */
    bool suspended; /* the connection waits for a write */
    struct MHD_Connection *conn;
};

http_stream *http__stream_new(void) {
    http_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->refs, 2);
    return s;
}

static void stream_unref(http_stream *s) {
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    free(s->pending);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Takes the connection out of its wait (lock held); the caller resumes it
 * after unlocking: a suspended connection cannot go away meanwhile. */
static struct MHD_Connection *wake_locked(http_stream *s) {
    if (!s->suspended)
        return NULL;
    s->suspended = false;
    return s->conn;
}

bool http_stream_write(http_stream *s, const void *data, size_t len) {
    pthread_mutex_lock(&s->mu);
    bool ok = !s->gone && !s->ended && s->len + len <= STREAM_MAX_PENDING;
    if (ok && s->len + len > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + len)
            cap *= 2;
        char *grown = realloc(s->pending, cap);
        if (grown) {
            s->pending = grown;
            s->cap = cap;
        } else {
            ok = false;
        }
    }
    if (ok && len) {
        memcpy(s->pending + s->len, data, len);
        s->len += len;
    }
    struct MHD_Connection *conn = ok ? wake_locked(s) : NULL;
    pthread_mutex_unlock(&s->mu);
    if (conn)
        MHD_resume_connection(conn);
    return ok;
}

void http_stream_end(http_stream *s) {
    pthread_mutex_lock(&s->mu);
    s->ended = true;
    struct MHD_Connection *conn = wake_locked(s);
    pthread_mutex_unlock(&s->mu);
    if (conn)
        MHD_resume_connection(conn);
    stream_unref(s);
}

/* MHD asks for the next bytes (on the connection's thread). */
static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    http_stream *s = cls;
    pthread_mutex_lock(&s->mu);
    ssize_t n = 0;
    if (s->len > 0) {
        n = (ssize_t)(s->len < max ? s->len : max);
        memcpy(buf, s->pending, (size_t)n);
        memmove(s->pending, s->pending + n, s->len - (size_t)n);
        s->len -= (size_t)n;
    } else if (s->ended) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        s->suspended = true;
        MHD_suspend_connection(s->conn);
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void free_stream(void *cls) {
    http__stream_drop(cls);
}

struct MHD_Response *http__stream_response(http_stream *s,
                                           struct MHD_Connection *conn) {
    s->conn = conn;
    return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
                                             read_stream, s, free_stream);
}

void http__stream_drop(http_stream *s) {
    pthread_mutex_lock(&s->mu);
    s->gone = true;
    s->suspended = false;
    s->conn = NULL;
    pthread_mutex_unlock(&s->mu);
    stream_unref(s);
}
