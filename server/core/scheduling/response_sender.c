/* Response senders of decoupled models (response_sender.h). */
#include "response_sender.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "execute_ctx.h"
#include "model_internal.h"
#include "request_answer.h"

struct core_sender {
    osp_response_sender super; /* first: the backend's view */
    pthread_mutex_t lock;      /* one send at a time: responses stay ordered */
    atomic_int refs;           /* the batch's, and the open request's */
    pending_request *p;        /* NULL once the final flag was sent */
    uint64_t n_sent;           /* responses so far: the next one's index */
    uint64_t last_end_ns;      /* when the previous response was delivered */
};

static atomic_size_t open_requests;

size_t response_senders_open(void) {
    return atomic_load(&open_requests);
}

static void sender_unref(core_sender *s) {
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Ends the open request (lock held; the request's reference is dropped by
 * the caller after unlocking). */
static void end_request_locked(core_sender *s, osp_infer_response *resp,
                               bool failed) {
    pending_request *p = s->p;
    s->p = NULL;
    if (p->times.compute_output_start == 0)
        p->times.compute_output_start = osp_now_ns();
    p->times.compute_end = osp_now_ns();
    if (failed)
        p->failure_reason = OSP_FAILURE_BACKEND;
    atomic_fetch_sub(&open_requests, 1);
    pending_request_finish_decoupled(p, resp, failed);
}

/* Triton's per-response statistics of one send (lock held). */
static void record_response(core_sender *s, osp_model *model,
                            response_outcome outcome, uint64_t sent_ns) {
    uint64_t end = osp_now_ns();
    model_stats_record_response(&model->stats, s->n_sent++, outcome,
                                s->last_end_ns, sent_ns, end);
    s->last_end_ns = end;
}

static osp_error *sender_send(osp_response_sender *self,
                              osp_sent_response *r, bool final) {
    core_sender *s = (core_sender *)self;
    osp_error *err = NULL;
    uint64_t sent_ns = osp_now_ns();
    pthread_mutex_lock(&s->lock);
    if (!s->p) {
        pthread_mutex_unlock(&s->lock);
        sent_response_free_buffers(r);
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "Unable to send response. Response sender has "
                             "been closed.");
    }
    pending_request *p = s->p;
    bool failed = r && r->error;
    response_outcome outcome = !r ? RESPONSE_EMPTY
                               : failed ? RESPONSE_FAIL
                                        : RESPONSE_SUCCESS;
    osp_infer_response *resp = NULL;
    if (!s->last_end_ns)
        s->last_end_ns = p->times.compute_start;
    if (osp_cancel_token_is_cancelled(p->cancel)) {
        sent_response_free_buffers(r); /* nobody to send it to */
        if (r)
            outcome = RESPONSE_CANCEL;
    } else if (r && !(resp = pending_request_response_from(p, r))) {
        err = osp_error_out_of_memory();
    }
    if (!final) {
        if (resp)
            p->respond(resp, false, p->user);
        record_response(s, p->model, outcome, sent_ns);
        pthread_mutex_unlock(&s->lock);
        return err;
    }
    /* Counted before the request ends, so that a client reading the
     * statistics after its final response sees it. */
    record_response(s, p->model, outcome, sent_ns);
    end_request_locked(s, resp, failed || (r && !resp && err));
    pthread_mutex_unlock(&s->lock);
    sender_unref(s);
    return err;
}

static bool sender_is_cancelled(const osp_response_sender *self) {
    core_sender *s = (core_sender *)self;
    /* Under the lock: a failed execute may end the request meanwhile. */
    pthread_mutex_lock(&s->lock);
    bool cancelled = s->p && osp_cancel_token_is_cancelled(s->p->cancel);
    pthread_mutex_unlock(&s->lock);
    return cancelled;
}

bool response_senders_new(pending_request **batch, size_t n,
                          core_sender **out, osp_response_sender **senders) {
    for (size_t i = 0; i < n; i++) {
        core_sender *s = calloc(1, sizeof *s);
        if (!s) {
            while (i-- > 0) {
                pthread_mutex_destroy(&out[i]->lock);
                free(out[i]);
                out[i] = NULL;
            }
            return false;
        }
        s->super.send = sender_send;
        s->super.is_cancelled = sender_is_cancelled;
        pthread_mutex_init(&s->lock, NULL);
        atomic_init(&s->refs, 2);
        s->p = batch[i];
        out[i] = s;
        senders[i] = &s->super;
    }
    atomic_fetch_add(&open_requests, n);
    return true;
}

void response_senders_release(core_sender **senders, size_t n,
                              const osp_error *err) {
    for (size_t i = 0; i < n; i++) {
        core_sender *s = senders[i];
        if (err) {
            pthread_mutex_lock(&s->lock);
            if (s->p) {
                osp_infer_response *resp = pending_request_response_new(s->p);
                if (resp)
                    resp->error = osp_error_new(osp_error_get_code(err), "%s",
                                                osp_error_message(err));
                if (!s->last_end_ns)
                    s->last_end_ns = s->p->times.compute_start;
                record_response(s, s->p->model, RESPONSE_FAIL, osp_now_ns());
                end_request_locked(s, resp, true);
                pthread_mutex_unlock(&s->lock);
                sender_unref(s); /* the open request's reference */
            } else {
                pthread_mutex_unlock(&s->lock);
            }
        }
        sender_unref(s);
    }
}
