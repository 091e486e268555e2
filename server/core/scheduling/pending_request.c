/*
 * Pending requests and their completion: freeing, response shells, and the
 * one path by which every queued request ends (statistics, trace, then the
 * frontend's callback, in queue order when the model preserves ordering).
 */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "request_answer.h"
#include "sequence_batcher.h"
#include "trace_report.h"

void pending_request_free(pending_request *p) {
    if (!p)
        return;
    osp_infer_request_free(p->req);
    free(p->input_map);
    free(p->output_requested);
    free(p->response_outputs);
    sequence_step_free(p->sequence);
    osp_cancel_token_unref(p->cancel);
    if (p->model)
        osp_model_unref(p->model);
    free(p);
}

osp_infer_response *pending_request_response_new(const pending_request *p) {
    osp_infer_response *resp = calloc(1, sizeof(*resp));
    if (!resp)
        return NULL;
    resp->model_name = strdup(p->req->model_name);
    resp->id = strdup(p->req->id);
    resp->model_version = p->model ? p->model->version : -1;
    if (!resp->model_name || !resp->id) {
        osp_infer_response_free(resp);
        return NULL;
    }
    return resp;
}

/* Hands resp to p's callback and frees p; with preserve_ordering, in queue
 * order: a request that finishes early waits in the model's reorder buffer
 * and is delivered by the thread that finishes the one before it. */
static void deliver(pending_request *p, osp_infer_response *resp) {
    if (p->respond) {
        p->respond(resp, true, p->user);
        pending_request_free(p);
        return;
    }
    if (!p->reorder) {
        p->complete(resp, p->user);
        pending_request_free(p);
        return;
    }
    /* Callbacks run under order_lock so that two threads releasing
     * consecutive requests cannot overtake each other. */
    osp_model *model = model_ref(p->model);
    pthread_mutex_lock(&model->order_lock);
    p->held_response = resp;
    batcher_entry *ready = reorder_push(p->reorder, &p->entry);
    while (ready) {
        pending_request *q = ready->owner;
        ready = ready->next;
        q->complete(q->held_response, q->user);
        pending_request_free(q);
    }
    pthread_mutex_unlock(&model->order_lock);
    osp_model_unref(model);
}

/* Statistics and trace of p's end; `success` says how it counts. */
static void record_end(pending_request *p, osp_infer_response *resp,
                       bool success) {
    /* Hook: the sequence's next request may go now (sequence_batcher.c). */
    if (p->sequence)
        sequence_batcher_step_finished(p, success);
    if (p->req->trace)
        trace_report_finish(p);
    if (p->model) {
        uint64_t end_ns = osp_now_ns();
        if (success && p->cache_hit) {
            model_stats_record_cache_hit(&p->model->stats,
                                         p->times.request_start, end_ns,
                                         p->cache_lookup_ns);
        } else if (success) {
            if (p->cache) {
                response_cache_insert(p->cache, p->cache_request_key, resp);
                uint64_t inserted = osp_now_ns();
                model_stats_record_cache_miss(
                    &p->model->stats, p->cache_lookup_ns + (inserted - end_ns));
                end_ns = inserted;
            }
            stats_stamps t = {
                .request_start = p->times.request_start,
                .queue_start = p->times.queue_start,
                .compute_start = p->times.compute_start,
                .compute_input_end = p->times.compute_input_end,
                .compute_output_start = p->times.compute_output_start,
                .compute_end = p->times.compute_end,
            };
            model_stats_record_success(&p->model->stats, &t, end_ns,
                                       p->batch_size);
            if (p->secondary_stats)
                stats_sink_add(p->secondary_stats, &t);
        } else {
            model_stats_record_failure(&p->model->stats, p->times.request_start,
                                       end_ns, p->failure_reason);
        }
    }
}

void pending_request_finish(pending_request *p, osp_infer_response *resp) {
    record_end(p, resp, resp && !resp->error);
    deliver(p, resp);
}

void pending_request_finish_decoupled(pending_request *p,
                                      osp_infer_response *resp, bool failed) {
    record_end(p, resp, !failed);
    deliver(p, resp);
}

osp_infer_response *pending_request_response_from(const pending_request *p,
                                                  osp_sent_response *r) {
    const osp_model_config *cfg = p->model->config;
    osp_infer_response *resp = pending_request_response_new(p);
    if (resp && r->error) {
        resp->error = r->error;
        r->error = NULL;
    } else if (resp && !(resp->outputs = calloc(p->n_response_outputs + 1,
                                                sizeof *resp->outputs))) {
        osp_infer_response_free(resp);
        resp = NULL;
    }
    for (size_t k = 0; resp && !resp->error && k < p->n_response_outputs; k++) {
        const char *name = cfg->outputs[p->response_outputs[k]].name;
        for (size_t i = 0; i < r->n_outputs; i++) {
            osp_infer_output *o = &r->outputs[i];
            if (!o->data || strcmp(o->name, name) != 0)
                continue;
            osp_infer_output *dst = &resp->outputs[resp->n_outputs];
            if (!(dst->name = strdup(name))) {
                osp_infer_response_free(resp);
                resp = NULL;
                break;
            }
            dst->dtype = o->dtype;
            dst->shape = o->shape;
            dst->byte_size = o->byte_size;
            dst->data = o->data;
            o->data = NULL;
            resp->n_outputs++;
            break;
        }
    }
    sent_response_free_buffers(r);
    return resp;
}

void pending_request_fail(pending_request *p, osp_error *err) {
    osp_infer_response *resp = pending_request_response_new(p);
    if (resp)
        resp->error = err;
    else
        osp_error_free(err);
    pending_request_finish(p, resp);
}

bool pending_request_cancelled(const pending_request *p) {
    return osp_cancel_token_is_cancelled(p->cancel);
}

void pending_request_cancel(pending_request *p) {
    p->failure_reason = OSP_FAILURE_CANCELED;
    pending_request_fail(p, osp_error_new(OSP_ERROR_CANCELLED, "%s", ""));
}
