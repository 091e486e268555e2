/* A decoupled python model's instance: many open requests per stub, one
 * reader thread (python_decoupled.h). */
#include "python_decoupled.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "osprey/clock.h"
#include "osprey/log.h"
#include "python_gpu.h"

/* How often the reader looks at its requests' clients and deadlines while
 * the stub is quiet, so that is_cancelled() turns true soon after a client
 * goes. */
#define PYDEC_TICK_MS 10

osp_error *pydec_init(pydec *d, pystub *stub, const void *model,
                      const char *model_name, pydec_convert_fn convert) {
    memset(d, 0, sizeof *d);
    if (!(d->bls = pybls_outbox_new(stub->max_frame)))
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: cannot make the BLS outbox "
                             "(out of memory or file descriptors)");
    d->stub = stub;
    d->model = model;
    d->model_name = model_name;
    d->convert = convert;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->changed, NULL);
    pthread_mutex_init(&d->send_lock, NULL);
    stub->send_lock = &d->send_lock;
    return NULL;
}

/* Index of the open request of `batch`, or -1. Caller holds d->lock. */
static long find_open(const pydec *d, uint64_t batch) {
    for (size_t i = 0; i < d->n_open; i++)
        if (d->open[i].batch == batch)
            return (long)i;
    return -1;
}

static void remove_open(pydec *d, size_t i) {
    d->open[i] = d->open[--d->n_open];
    pthread_cond_broadcast(&d->changed);
}

/* Ends every open request with `message` (the stub is gone). Caller holds
 * d->lock. */
static void end_all_locked(pydec *d, const char *message) {
    while (d->n_open > 0) {
        osp_response_sender *sender = d->open[d->n_open - 1].sender;
        remove_open(d, d->n_open - 1);
        osp_sent_response sent = {
            .error = osp_error_new(OSP_ERROR_INTERNAL, "%s", message)};
        osp_error *err = osp_response_sender_send(sender, &sent, true);
        osp_error_free(err);
    }
}

/* Passes one RESPONSE frame to its request's sender; a frame of a request
 * no longer open (ended by an error, or a late thread) is dropped. */
static void route_response(pydec *d, const uint8_t *payload, size_t len) {
    pyproto_stream_response r;
    osp_error *bad = pyproto_stream_response_decode(payload, len, &r);
    if (bad) {
        OSP_LOG_ERROR("python model '%s': %s", d->model_name,
                      osp_error_message(bad));
        osp_error_free(bad);
        return;
    }
    pthread_mutex_lock(&d->lock);
    long i = find_open(d, r.batch);
    if (i >= 0) {
        osp_response_sender *sender = d->open[i].sender;
        /* Sent under the lock: the worker's error path and
         * pydec_stop never end a request while its response goes out. */
        osp_sent_response sent = {0};
        osp_infer_output *outputs = NULL;
        if (r.has_response)
            d->convert(d->model, &r.response, r.data, &sent, &outputs);
        if (r.final)
            remove_open(d, (size_t)i);
        osp_error *err = osp_response_sender_send(
            sender, r.has_response ? &sent : NULL, r.final);
        free(outputs);
        if (err) {
            OSP_LOG_WARN("python model '%s': a response was lost: %s",
                         d->model_name, osp_error_message(err));
            osp_error_free(err);
        }
    }
    pthread_mutex_unlock(&d->lock);
    /* Copied or dropped: the stub may free the GPU tensors it lent. */
    if (r.has_response)
        pygpu_release(d->stub, &r.response, 1);
    pyproto_stream_response_destroy(&r);
}

/* Tells the stub about clients that have gone (CANCEL with the request's
 * batch number) and kills a stub past a request's deadline. */
static void look_at_clients(pydec *d) {
    uint64_t now = osp_now_ns();
    bool late = false;
    pthread_mutex_lock(&d->lock);
    if (d->waiting && d->answer_deadline_ns && now >= d->answer_deadline_ns)
        late = true;
    for (size_t i = 0; i < d->n_open; i++) {
        pydec_request *q = &d->open[i];
        if (q->deadline_ns && now >= q->deadline_ns)
            late = true;
        if (!q->told_cancel && osp_response_sender_is_cancelled(q->sender)) {
            q->told_cancel = true;
            pystub_send(d->stub, PYPROTO_CANCEL, &q->batch, sizeof q->batch);
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (late) {
        OSP_LOG_ERROR("python model '%s': the stub of instance '%s' did not "
                      "finish within execute-timeout-seconds and was killed",
                      d->model_name, d->stub->name);
        kill(d->stub->pid, SIGKILL); /* the reader then sees the channel end */
    }
}

/* Hands a frame to the worker waiting on its answer (ownership of
 * payload moves). */
static void post_answer(pydec *d, uint32_t type, uint8_t *payload, size_t len) {
    pthread_mutex_lock(&d->lock);
    if (d->waiting && !d->answered) {
        d->answered = true;
        d->answer_type = type;
        d->answer = payload;
        d->answer_len = len;
        payload = NULL;
        pthread_cond_broadcast(&d->changed);
    }
    pthread_mutex_unlock(&d->lock);
    free(payload);
}

/* The reader: every frame the stub sends, until the channel ends; between
 * frames it sends the answers of BLS calls as the core gives them. */
static void *reader_main(void *arg) {
    pydec *d = arg;
    pystub *stub = d->stub;
    for (;;) {
        struct pollfd pfd[2] = {
            {.fd = stub->control, .events = POLLIN},
            {.fd = pybls_outbox_wake_fd(d->bls), .events = POLLIN}};
        int ready = poll(pfd, 2, PYDEC_TICK_MS);
        look_at_clients(d);
        if (ready == 0 || (ready < 0 && errno == EINTR))
            continue;
        if (ready < 0)
            break;
        if ((pfd[1].revents & POLLIN) && !pybls_outbox_flush(d->bls, stub))
            break;
        if (!pfd[0].revents)
            continue;
        uint32_t type = 0;
        uint8_t *buf = NULL;
        size_t len = 0;
        /* Once a frame begins it is read whole. */
        if (pyproto_recv(stub->control, 0, stub->max_frame, &type, &buf,
                         &len) != PYPROTO_RECV_OK)
            break;
        if (type == PYPROTO_BLS_CALL) {
            pybls_call_start(d->bls, stub->server, stub->name, buf, len);
            free(buf);
            continue;
        }
        if (type == PYPROTO_BLS_CANCEL) {
            pybls_call_cancel(d->bls, buf, len);
            free(buf);
            continue;
        }
        if (type == PYPROTO_BLS) {
            /* A decoupled stub sends BLS_CALL: the region is not the
             * call's. Nothing answers this one. */
            OSP_LOG_ERROR("python instance '%s': a region BLS frame from a "
                          "decoupled model's stub was dropped",
                          stub->name);
            free(buf);
            continue;
        }
        pystub_frame_status served = pystub_serve_frame(stub, type, buf, len);
        if (served == PYSTUB_FRAME_BROKEN) {
            free(buf);
            break;
        }
        if (served == PYSTUB_FRAME_SERVED) {
            free(buf);
        } else if (type == PYPROTO_RESPONSE) {
            route_response(d, buf, len);
            free(buf);
        } else {
            post_answer(d, type, buf, len); /* RESULT, ERROR, OK */
        }
    }
    char message[320];
    snprintf(message, sizeof message, "Stub process '%s' is not healthy.",
             stub->name);
    pybls_outbox_forget_stub(d->bls); /* its calls have no one to answer */
    pthread_mutex_lock(&d->lock);
    d->dead = true;
    end_all_locked(d, message);
    pthread_cond_broadcast(&d->changed);
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

osp_error *pydec_start(pydec *d) {
    d->dead = false;
    pybls_outbox_forget_stub(d->bls); /* nothing of an earlier stub's */
    if (pthread_create(&d->reader, NULL, reader_main, d) != 0)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: cannot start a reader thread");
    d->reader_running = true;
    return NULL;
}

bool pydec_is_dead(pydec *d) {
    pthread_mutex_lock(&d->lock);
    bool dead = d->dead || !d->reader_running;
    pthread_mutex_unlock(&d->lock);
    return dead;
}

void pydec_reap(pydec *d) {
    if (d->reader_running) {
        if (d->stub->control >= 0)
            shutdown(d->stub->control, SHUT_RDWR);
        pthread_join(d->reader, NULL);
        d->reader_running = false;
    }
    pystub_kill(d->stub);
}

/* Waits (d->lock held) until the worker's frame is answered or the stub
 * died; takes the answer. */
static bool wait_answer(pydec *d, uint32_t *type, uint8_t **payload,
                        size_t *len) {
    while (!d->answered && !d->dead)
        pthread_cond_wait(&d->changed, &d->lock);
    bool got = d->answered;
    *type = d->answer_type;
    *payload = d->answer;
    *len = d->answer_len;
    d->waiting = d->answered = false;
    d->answer = NULL;
    d->answer_deadline_ns = 0;
    return got;
}

osp_error *pydec_execute(pydec *d, osp_response_sender *sender, uint64_t batch,
                         const pyproto_text *exec, uint64_t deadline_ns) {
    osp_error *err = NULL;
    uint32_t type = 0;
    uint8_t *answer = NULL;
    size_t len = 0;
    pthread_mutex_lock(&d->lock);
    while (d->n_open >= PYDEC_MAX_IN_FLIGHT && !d->dead)
        pthread_cond_wait(&d->changed, &d->lock);
    if (d->dead) {
        pthread_mutex_unlock(&d->lock);
        return pystub_unhealthy_error(d->stub);
    }
    d->open[d->n_open++] = (pydec_request){
        .batch = batch, .sender = sender, .deadline_ns = deadline_ns};
    d->waiting = true;
    d->answered = false;
    d->answer_deadline_ns = deadline_ns;
    pthread_mutex_unlock(&d->lock);
    if (!pystub_send(d->stub, PYPROTO_EXEC, exec->data, exec->len))
        kill(d->stub->pid, SIGKILL); /* the reader ends the request */
    pthread_mutex_lock(&d->lock);
    bool answered = wait_answer(d, &type, &answer, &len);
    long i = find_open(d, batch);
    if (!answered)
        err = pystub_unhealthy_error(d->stub); /* already ended */
    else if (type != PYPROTO_RESULT)
        err = osp_error_new(OSP_ERROR_INTERNAL, "%s",
                            type == PYPROTO_ERROR && answer
                                ? (char *)answer
                                : "python backend: unexpected answer");
    /* On an error the core ends the request: the reader forgets it. */
    if (err && i >= 0)
        remove_open(d, (size_t)i);
    pthread_mutex_unlock(&d->lock);
    free(answer);
    return err;
}

void pydec_stop(pydec *d, int timeout_ms) {
    if (d->reader_running && !pydec_is_dead(d)) {
        pthread_mutex_lock(&d->lock);
        d->waiting = true;
        d->answered = false;
        pthread_mutex_unlock(&d->lock);
        if (pystub_send(d->stub, PYPROTO_FINALIZE, NULL, 0)) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += timeout_ms / 1000;
            until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_mutex_lock(&d->lock);
            while (!d->answered && !d->dead &&
                   pthread_cond_timedwait(&d->changed, &d->lock, &until) == 0)
                ;
            free(d->answer);
            d->answer = NULL;
            d->waiting = d->answered = false;
            pthread_mutex_unlock(&d->lock);
        }
    }
    pydec_reap(d); /* the reader ends what is still open */
    pthread_mutex_lock(&d->lock);
    char message[320];
    snprintf(message, sizeof message, "Stub process '%s' is not healthy.",
             d->stub->name);
    end_all_locked(d, message);
    pthread_mutex_unlock(&d->lock);
}

void pydec_destroy(pydec *d) {
    if (d->reader_running)
        pydec_reap(d);
    free(d->answer);
    pybls_outbox_close(d->bls);
    pybls_outbox_unref(d->bls);
    d->stub->send_lock = NULL;
    pthread_mutex_destroy(&d->send_lock);
    pthread_cond_destroy(&d->changed);
    pthread_mutex_destroy(&d->lock);
}
