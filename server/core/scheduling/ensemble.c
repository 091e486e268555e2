/*
 * The ensemble scheduler (see ensemble.h). One `ensemble_run` per request:
 * the tensors made so far, which steps have started, how many are in
 * flight, the steps ready to submit. Step completions arrive on the step
 * models' threads, or inline inside the call that submitted the step; each
 * stores the step's outputs under the run's lock and queues the steps that
 * became ready. One thread at a time drives the run (drive_run): it submits
 * what is queued and, when nothing is left in flight, answers the
 * ensemble's request. A completion that finds a driver leaves the work to
 * it, so a chain of steps that complete inline never nests calls.
 */
#include "ensemble.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ensemble_graph.h"
#include "ensemble_limiter.h"
#include "osprey/log.h"
#include "trace_report.h"

struct ensemble {
    osp_model *model; /* borrowed: the model owns its ensemble */
    osp_server *server;
    ensemble_plan *plan;
    bool *step_decoupled;      /* per step: its model sends 0..n responses */
    bool *step_batching;       /* per step: its model has max_batch_size > 0 */
    /* per step, per input_map entry: the step model's config dims of that
     * input (for shape_for_reader) */
    osp_shape **step_input_dims;
    ensemble_limiter *limiter; /* max_inflight_requests, or NULL: none */
    pthread_mutex_t lock;      /* running, stopping, and the wait for idle */
    pthread_cond_t idle;
    size_t running;
    bool stopping; /* unloading: new requests are refused */
};

/* One value of a tensor: the one of iteration `iteration`. A decoupled
 * step's every response starts an iteration of its own, and the steps
 * downstream run once per iteration (Triton's IterationCount); a request
 * without decoupled steps has only iteration 0. */
typedef struct tensor_value {
    struct tensor_value *next; /* the tensor's other iterations */
    size_t iteration;
    bool present; /* has data (an optional input left out has none) */
    osp_datatype dtype;
    osp_shape shape;
    bool batched; /* made by a batching model (or a batching ensemble's
                     request): its dim 0 is the batch */
    osp_buffer *data; /* exactly the tensor's bytes; owned */
    size_t readers_left;
} tensor_value;

/* Whether shape matches config dims, -1 matching any size. */
static bool dims_match(const osp_shape *dims, const osp_shape *shape) {
    if (dims->rank != shape->rank)
        return false;
    for (int d = 0; d < dims->rank; d++)
        if (dims->dims[d] != -1 && dims->dims[d] != shape->dims[d])
            return false;
    return true;
}

/* The shape a reader (a step's input, or the ensemble's output) with
 * config `dims` and batching `reader_batches` gets a value in, as
 * Triton's ensemble reshapes between batching and non-batching models:
 * to a batching reader a value of a non-batching model whose shape is the
 * reader's dims comes with a batch dim of 1 in front; to a non-batching
 * reader a batch of 1 whose shape is not the reader's dims comes without
 * it. Otherwise the shape is the value's. */
static osp_shape shape_for_reader(const osp_shape *dims, bool reader_batches,
                                  const tensor_value *v) {
    osp_shape shape = v->shape;
    if (reader_batches == v->batched)
        return shape;
    if (reader_batches && dims_match(dims, &shape) &&
        shape.rank < OSP_MAX_DIMS) {
        memmove(&shape.dims[1], &shape.dims[0],
                (size_t)shape.rank * sizeof shape.dims[0]);
        shape.dims[0] = 1;
        shape.rank++;
    } else if (!reader_batches && !dims_match(dims, &shape) &&
               shape.rank > 0 && shape.dims[0] == 1) {
        memmove(&shape.dims[0], &shape.dims[1],
                (size_t)(shape.rank - 1) * sizeof shape.dims[0]);
        shape.rank--;
    }
    return shape;
}

typedef struct ensemble_run ensemble_run;

/* One execution of a step, for one iteration: what its response callback
 * needs. Owned by the run until its final response. */
typedef struct step_exec {
    ensemble_run *run;
    size_t step;
    size_t iteration;
    struct step_exec *next_ready; /* the ready queue's link */
    osp_trace *trace;             /* the step's child trace, or NULL */
    limiter_waiter wait;          /* its place while it waits for a slot */
    bool holds_slot;              /* of the ensemble's limiter */
} step_exec;

struct ensemble_run {
    ensemble *ens;
    pending_request *p; /* the ensemble's request */
    pthread_mutex_t lock;
    tensor_value **tensors; /* per tensor: its values, one per iteration */
    size_t next_iteration;
    size_t in_flight; /* step executions queued or submitted, not ended */
    step_exec *ready_head, *ready_tail; /* to submit, FIFO */
    bool driving;                       /* a thread is in drive_run */
    osp_error *error;                   /* the first step error, prefixed */
    /* A complete set of the ensemble's outputs not yet sent: it goes as a
     * non-final response when the next set completes, or with the final
     * flag when the run ends. */
    osp_infer_response *held;
    bool responded; /* a response went (or is held) */
    /* Per step: whether it runs for this request. Triton prunes the steps
     * that only lead to outputs the request did not ask for. */
    bool *step_needed;
    stats_sink compute; /* the steps' compute durations, summed */
};

/* ---- buffers ----------------------------------------------------------- */

static void free_buffer(void *buf) {
    osp_buffer_free(buf);
}

/* `buf` (ownership moves) as a buffer of exactly `size` bytes: itself, or
 * a view of its first bytes that frees it. NULL on OOM (buf freed). */
static osp_buffer *exact_buffer(osp_buffer *buf, size_t size) {
    if (!buf || buf->size == size)
        return buf;
    osp_buffer *view =
        osp_buffer_wrap(buf->data, size, buf->kind, free_buffer, buf);
    if (!view)
        osp_buffer_free(buf);
    return view;
}

/* ---- tensor values (run lock held) --------------------------------------- */

static tensor_value *find_value(const ensemble_run *run, size_t t,
                                size_t iteration) {
    for (tensor_value *v = run->tensors[t]; v; v = v->next)
        if (v->iteration == iteration)
            return v;
    return NULL;
}

static void drop_value(ensemble_run *run, size_t t, tensor_value *v) {
    tensor_value **at = &run->tensors[t];
    while (*at != v)
        at = &(*at)->next;
    *at = v->next;
    osp_buffer_free(v->data);
    free(v);
}

/* A reader's copy of value v of tensor t: its buffer itself when this is
 * the last use (the value goes), else a copy. *out NULL for an absent
 * optional input. */
static osp_error *take_for_reader(ensemble_run *run, size_t t,
                                  tensor_value *v, osp_buffer **out) {
    *out = NULL;
    if (v->present && v->readers_left == 1) {
        *out = v->data;
        v->data = NULL;
    } else if (v->present) {
        osp_buffer *copy = osp_buffer_new_host(v->data->size);
        if (!copy)
            return osp_error_out_of_memory();
        memcpy(copy->data, v->data->data, v->data->size);
        *out = copy;
    }
    if (--v->readers_left == 0)
        drop_value(run, t, v);
    return NULL;
}

static void run_free(ensemble_run *run) {
    const ensemble_plan *plan = run->ens->plan;
    for (size_t t = 0; run->tensors && t < plan->n_tensors; t++)
        while (run->tensors[t])
            drop_value(run, t, run->tensors[t]);
    free(run->tensors);
    free(run->step_needed);
    while (run->ready_head) {
        step_exec *e = run->ready_head;
        run->ready_head = e->next_ready;
        free(e);
    }
    osp_infer_response_free(run->held);
    osp_error_free(run->error);
    pthread_mutex_destroy(&run->lock);
    free(run);
}

static osp_error *build_response(ensemble_run *run, size_t iteration,
                                  osp_infer_response **out);

/* Queues step s for `iteration` when all its inputs have a value of that
 * iteration, and counts it in flight. */
static osp_error *queue_if_ready(ensemble_run *run, size_t s,
                                 size_t iteration) {
    const ensemble_plan_step *ps = &run->ens->plan->steps[s];
    if (!run->step_needed[s])
        return NULL;
    for (size_t k = 0; k < ps->config->n_input_map; k++)
        if (!find_value(run, ps->in_tensors[k], iteration))
            return NULL;
    step_exec *e = calloc(1, sizeof *e);
    if (!e)
        return osp_error_out_of_memory();
    *e = (step_exec){.run = run, .step = s, .iteration = iteration};
    if (run->ready_tail)
        run->ready_tail->next_ready = e;
    else
        run->ready_head = e;
    run->ready_tail = e;
    run->in_flight++;
    return NULL;
}

/* A complete set of the requested outputs of `iteration`: the ensemble's
 * response. The one held before it goes now, as a non-final response. */
static osp_error *respond_if_complete(ensemble_run *run, size_t iteration) {
    const ensemble_plan *plan = run->ens->plan;
    const osp_model_config *cfg = run->p->model->config;
    for (size_t o = 0; o < cfg->n_outputs; o++)
        if (run->p->output_requested[o] &&
            !find_value(run, plan->output_tensors[o], iteration))
            return NULL;
    osp_infer_response *resp = NULL;
    osp_error *err = build_response(run, iteration, &resp);
    if (err)
        return err;
    if (run->held)
        run->p->respond(run->held, false, run->p->user);
    run->held = resp;
    run->responded = true;
    return NULL;
}

/* Stores a value of tensor t (data ownership moves; NULL: an optional
 * input left out), then queues what it makes ready: the steps reading t
 * and, for an output, the ensemble's response. */
static osp_error *set_tensor(ensemble_run *run, size_t t, size_t iteration,
                             osp_datatype dtype, const osp_shape *shape,
                             bool batched, osp_buffer *data) {
    const ensemble_plan *plan = run->ens->plan;
    tensor_value *v = find_value(run, t, iteration);
    if (v) { /* (a step's output map names it once) */
        osp_buffer_free(v->data);
    } else if (!(v = calloc(1, sizeof *v))) {
        osp_buffer_free(data);
        return osp_error_out_of_memory();
    } else {
        v->iteration = iteration;
        v->next = run->tensors[t];
        run->tensors[t] = v;
    }
    v->present = data != NULL;
    v->dtype = dtype;
    v->shape = *shape;
    v->batched = batched;
    v->data = data;
    /* The ensemble's own outputs keep their buffer for the response. */
    v->readers_left = plan->readers[t] + (plan->is_output[t] ? 1 : 0);
    if (v->readers_left == 0) {
        drop_value(run, t, v);
        return NULL;
    }
    osp_error *err = NULL;
    for (size_t s = 0; s < plan->n_steps && !err; s++)
        for (size_t k = 0; k < plan->steps[s].config->n_input_map; k++)
            if (plan->steps[s].in_tensors[k] == t) {
                err = queue_if_ready(run, s, iteration);
                break;
            }
    if (!err && plan->is_output[t])
        err = respond_if_complete(run, iteration);
    return err;
}

/* Triton's ensemble responses carry the steps' sequence id and flags,
 * which are the request's: sequence_id (its string, or the number as
 * INT64; 0 without one), sequence_start and sequence_end (false without
 * them). Triton adds the three once per output (repeated JSON keys over
 * HTTP); here they come once. */
static osp_error *add_sequence_parameters(osp_infer_response *resp,
                                          const osp_infer_request *req) {
    osp_parameter params[3] = {
        {.key = "sequence_id", .type = OSP_PARAM_INT, .value.i = 0},
        {.key = "sequence_start", .type = OSP_PARAM_BOOL},
        {.key = "sequence_end", .type = OSP_PARAM_BOOL},
    };
    for (size_t i = 0; i < req->n_parameters; i++)
        for (size_t k = 0; k < 3; k++)
            if (strcmp(req->parameters[i].key, params[k].key) == 0 &&
                (k == 0 || req->parameters[i].type == OSP_PARAM_BOOL))
                params[k] = req->parameters[i];
    if (!(resp->parameters = calloc(3, sizeof *resp->parameters)))
        return osp_error_out_of_memory();
    for (size_t k = 0; k < 3; k++) {
        osp_parameter *to = &resp->parameters[resp->n_parameters];
        *to = params[k];
        to->key = strdup(params[k].key);
        if (params[k].type == OSP_PARAM_STRING)
            to->value.s = strdup(params[k].value.s ? params[k].value.s : "");
        else
            to->type = k == 0 ? OSP_PARAM_INT : OSP_PARAM_BOOL;
        if (!to->key || (params[k].type == OSP_PARAM_STRING && !to->value.s)) {
            free(to->key);
            return osp_error_out_of_memory();
        }
        resp->n_parameters++;
    }
    return NULL;
}

/* The ensemble's response from its output values of `iteration`, in the
 * request's order (its top classes for an output asked for with a class
 * count), with Triton's sequence parameters. */
static osp_error *build_response(ensemble_run *run, size_t iteration,
                                  osp_infer_response **out) {
    pending_request *p = run->p;
    const osp_model_config *cfg = p->model->config;
    const ensemble_plan *plan = run->ens->plan;
    osp_infer_response *resp = pending_request_response_new(p);
    if (!resp || !(resp->outputs = calloc(p->n_response_outputs + 1,
                                          sizeof(*resp->outputs)))) {
        osp_infer_response_free(resp);
        return osp_error_out_of_memory();
    }
    osp_error *err = NULL;
    for (size_t k = 0; k < p->n_response_outputs && !err; k++) {
        size_t o = p->response_outputs[k];
        size_t t = plan->output_tensors[o];
        tensor_value *v = find_value(run, t, iteration);
        if (!v->present) { /* a step left it out: so does the response */
            OSP_LOG_VERBOSE("Composing models did not output tensor %s",
                            cfg->outputs[o].name);
            if (--v->readers_left == 0)
                drop_value(run, t, v);
            continue;
        }
        osp_infer_output *out_k = &resp->outputs[resp->n_outputs++];
        if (!(out_k->name = strdup(cfg->outputs[o].name))) {
            err = osp_error_out_of_memory();
        } else {
            out_k->dtype = v->dtype;
            out_k->shape = shape_for_reader(&cfg->outputs[o].dims,
                                            cfg->max_batch_size > 0, v);
            if (!(err = take_for_reader(run, t, v, &out_k->data)))
                out_k->byte_size = out_k->data->size;
        }
        /* Triton's classification extension (the ensemble has no labels). */
        uint32_t classes =
            p->req->n_outputs ? p->req->output_class_counts[k] : 0;
        static const class_labels no_labels = {0};
        if (!err && classes)
            err = classification_apply(out_k, cfg->max_batch_size > 0,
                                       classes, &no_labels);
    }
    /* The outputs the request did not ask for are done with too. */
    for (size_t o = 0; o < cfg->n_outputs; o++) {
        size_t t = plan->output_tensors[o];
        tensor_value *v = find_value(run, t, iteration);
        if (!p->output_requested[o] && v && --v->readers_left == 0)
            drop_value(run, t, v);
    }
    if (!err)
        err = add_sequence_parameters(resp, p->req);
    if (err) {
        osp_infer_response_free(resp);
        return err;
    }
    *out = resp;
    return NULL;
}

/* The run is over (no step in flight): statistics as Triton keeps them for
 * an ensemble (compute stages are the sums of its steps'), then the last
 * response with the final flag, then the run goes. A decoupled ensemble
 * may end with the flag alone; any other must have answered. */
static void run_finish(ensemble_run *run) {
    ensemble *ens = run->ens;
    pending_request *p = run->p;
    osp_infer_response *resp = run->held;
    osp_error *err = run->error;
    run->held = NULL;
    run->error = NULL;
    bool decoupled = p->model->config->decoupled;
    if (!err && !resp && !decoupled)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "in ensemble '%s', unexpected deadlock, at least "
                            "one output is not set while no more ensemble "
                            "steps can be made",
                            p->model->config->name);
    if (err) {
        osp_infer_response_free(resp);
        p->failure_reason = OSP_FAILURE_OTHER; /* as Triton's ensemble */
        pending_request_fail(p, err);
    } else {
        request_times *t = &p->times;
        t->compute_input_end =
            t->compute_start +
            __atomic_load_n(&run->compute.input_ns, __ATOMIC_SEQ_CST);
        t->compute_output_start =
            t->compute_input_end +
            __atomic_load_n(&run->compute.infer_ns, __ATOMIC_SEQ_CST);
        t->compute_end =
            t->compute_output_start +
            __atomic_load_n(&run->compute.output_ns, __ATOMIC_SEQ_CST);
        stats_stamps s = {.compute_start = t->compute_start,
                          .compute_input_end = t->compute_input_end,
                          .compute_output_start = t->compute_output_start,
                          .compute_end = t->compute_end};
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        model_stats_record_execution(
            &ens->model->stats, &s, p->batch_size > 0 ? p->batch_size : 1,
            (uint64_t)wall.tv_sec * 1000u + (uint64_t)wall.tv_nsec / 1000000u);
        if (decoupled)
            pending_request_finish_decoupled(p, resp, false);
        else
            pending_request_finish(p, resp);
    }
    run->p = NULL;
    run_free(run);
    pthread_mutex_lock(&ens->lock);
    if (--ens->running == 0)
        pthread_cond_broadcast(&ens->idle);
    pthread_mutex_unlock(&ens->lock);
}

/* Records a step error (ownership moves) as the run's unless one came
 * first (lock held). */
static void record_error_locked(ensemble_run *run, osp_error *step_error) {
    if (step_error && !run->error)
        run->error = osp_error_new(
            osp_error_get_code(step_error), "in ensemble '%s', %s",
            run->ens->model->config->name, osp_error_message(step_error));
    osp_error_free(step_error);
}

static void drive_run(ensemble_run *run);
static void drive_unlock(ensemble_run *run);

/* Gives back a slot of `step`; the execution waiting first for one, of
 * whichever request, now holds it: it goes to the front of its run's
 * ready queue and its run is driven (here, unless a thread drives it). */
static void release_slot(ensemble *ens, size_t step) {
    limiter_waiter *w = ensemble_limiter_release(ens->limiter, step);
    if (!w)
        return;
    step_exec *next = (step_exec *)((char *)w - offsetof(step_exec, wait));
    ensemble_run *run = next->run;
    pthread_mutex_lock(&run->lock);
    next->holds_slot = true;
    next->next_ready = run->ready_head;
    run->ready_head = next;
    if (!run->ready_tail)
        run->ready_tail = next;
    drive_unlock(run);
}

/* After a step's response (lock held by the caller, released here): the
 * run is driven here unless a thread already drives it. */
static void drive_unlock(ensemble_run *run) {
    bool drive = !run->driving;
    run->driving = true;
    pthread_mutex_unlock(&run->lock);
    if (drive)
        drive_run(run);
}

/* A step's response callback: its outputs become tensor values of the
 * step's iteration, or, for a decoupled step, of a new iteration each;
 * the final flag ends the execution. */
static void step_respond(osp_infer_response *resp, bool final, void *user) {
    step_exec *e = user;
    ensemble_run *run = e->run;
    const ensemble_plan_step *ps = &run->ens->plan->steps[e->step];
    osp_error *err = NULL;
    /* As Triton, the slot goes back before the response is used. e still
     * counts in its run's in_flight, so the run outlives this. */
    if (final && e->holds_slot) {
        e->holds_slot = false;
        release_slot(run->ens, e->step);
    }
    if (resp && resp->error) {
        err = resp->error;
        resp->error = NULL;
    }
    pthread_mutex_lock(&run->lock);
    if (resp && !err && !run->error) {
        size_t iteration = run->ens->step_decoupled[e->step]
                               ? run->next_iteration++
                               : e->iteration;
        /* An output the response left out is an absent value, for an
         * optional input downstream (as Triton). */
        for (size_t k = 0; k < ps->config->n_output_map && !err; k++) {
            osp_infer_output *o = NULL;
            for (size_t i = 0; i < resp->n_outputs && !o; i++)
                if (strcmp(ps->config->output_map[k].key,
                           resp->outputs[i].name) == 0)
                    o = &resp->outputs[i];
            static const osp_shape scalar = {0};
            osp_buffer *data = NULL;
            if (o && o->data) {
                data = exact_buffer(o->data, o->byte_size);
                o->data = NULL;
                if (!data) {
                    err = osp_error_out_of_memory();
                    break;
                }
            }
            err = set_tensor(run, ps->out_tensors[k], iteration,
                             o ? o->dtype : OSP_TYPE_INVALID,
                             o ? &o->shape : &scalar,
                             run->ens->step_batching[e->step], data);
        }
    }
    record_error_locked(run, err);
    osp_infer_response_free(resp);
    if (final) {
        osp_trace_end(e->trace);
        run->in_flight--;
        free(e);
    }
    drive_unlock(run);
}

/* The request of execution e, its inputs taken from the run's values. */
static osp_error *step_request(step_exec *e, osp_infer_request **out) {
    ensemble_run *run = e->run;
    const ensemble_plan_step *ps = &run->ens->plan->steps[e->step];
    const osp_ensemble_step *st = ps->config;
    const osp_infer_request *top = run->p->req;
    osp_error *err = NULL;
    osp_infer_request *req =
        osp_infer_request_new(st->model_name, st->model_version);
    if (!req)
        return osp_error_out_of_memory();
    req->priority = top->priority;
    req->timeout_us = top->timeout_us;
    err = osp_infer_request_set_id(req, top->id);
    for (size_t i = 0; !err && i < top->n_parameters; i++)
        err = osp_infer_request_add_parameter(req, &top->parameters[i]);
    pthread_mutex_lock(&run->lock);
    if (!err && run->error) /* a step failed: no more are submitted */
        err = osp_error_new(OSP_ERROR_INTERNAL, "step not run");
    for (size_t k = 0; !err && k < st->n_input_map; k++) {
        size_t t = ps->in_tensors[k];
        tensor_value *v = find_value(run, t, e->iteration);
        osp_datatype dtype = v->dtype;
        osp_shape shape =
            shape_for_reader(&run->ens->step_input_dims[e->step][k],
                             run->ens->step_batching[e->step], v);
        osp_buffer *data = NULL;
        err = take_for_reader(run, t, v, &data);
        if (!err && data &&
            (err = osp_infer_request_add_input(req, st->input_map[k].key,
                                               dtype, &shape, data)))
            osp_buffer_free(data);
    }
    pthread_mutex_unlock(&run->lock);
    for (size_t k = 0; !err && k < st->n_output_map; k++)
        err = osp_infer_request_add_output(req, st->output_map[k].key);
    if (err) {
        osp_infer_request_free(req);
        return err;
    }
    *out = req;
    return NULL;
}

/* Submits execution e, counted in flight; on error it is ended here. */
static osp_error *submit_step(step_exec *e) {
    ensemble_run *run = e->run;
    osp_infer_request *req = NULL;
    osp_error *err = step_request(e, &req);
    if (err)
        return err;
    osp_trace *parent = run->p->req->trace;
    if (parent)
        req->trace = e->trace = trace_spawn_child(parent);
    err = server_infer_step(run->ens->server, req, step_respond, e,
                            &run->compute);
    if (err)
        osp_trace_end(e->trace);
    return err;
}

/* The driver's loop (run->driving set by the caller): submits queued
 * executions until none is left, then finishes the run when nothing is in
 * flight, or hands driving back. Responses meanwhile only queue work. */
static void drive_run(ensemble_run *run) {
    pthread_mutex_lock(&run->lock);
    for (;;) {
        step_exec *e = run->ready_head;
        if (!e)
            break;
        run->ready_head = e->next_ready;
        if (!run->ready_head)
            run->ready_tail = NULL;
        /* Over max_inflight_requests, e waits for a slot of its step
         * (release_slot queues it again); a failed run's executions are not
         * submitted and need none, nor a cancelled request's (Triton lets
         * them through). */
        bool needs_slot = run->ens->limiter && !e->holds_slot && !run->error &&
                          !pending_request_cancelled(run->p);
        pthread_mutex_unlock(&run->lock);
        if (needs_slot) {
            if (!ensemble_limiter_acquire(run->ens->limiter, e->step,
                                          &e->wait)) {
                pthread_mutex_lock(&run->lock);
                continue;
            }
            e->holds_slot = true;
        }
        osp_error *err = submit_step(e);
        if (err && e->holds_slot)
            release_slot(run->ens, e->step);
        pthread_mutex_lock(&run->lock);
        if (err) {
            record_error_locked(run, err);
            run->in_flight--;
            free(e);
        }
    }
    bool done = run->in_flight == 0;
    run->driving = false;
    pthread_mutex_unlock(&run->lock);
    if (done)
        run_finish(run);
}

/* Marks the steps the request needs (Triton's pruning): with every output
 * requested, all; else a tensor is needed when the request asks for it,
 * when nothing reads it (a step's spare output keeps its step), or when a
 * needed step reads it, and a step is needed when it writes a needed
 * tensor. `needed_tensor` has plan->n_tensors entries, zeroed. */
static void mark_needed_steps(ensemble_run *run, bool *needed_tensor) {
    const ensemble_plan *plan = run->ens->plan;
    const pending_request *p = run->p;
    const osp_model_config *cfg = p->model->config;
    bool all = true;
    for (size_t o = 0; o < cfg->n_outputs; o++)
        all = all && p->output_requested[o];
    if (all) {
        for (size_t s = 0; s < plan->n_steps; s++)
            run->step_needed[s] = true;
        return;
    }
    for (size_t t = 0; t < plan->n_tensors; t++)
        needed_tensor[t] = plan->readers[t] == 0 && !plan->is_output[t];
    for (size_t o = 0; o < cfg->n_outputs; o++)
        if (p->output_requested[o])
            needed_tensor[plan->output_tensors[o]] = true;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t s = 0; s < plan->n_steps; s++) {
            const ensemble_plan_step *ps = &plan->steps[s];
            if (run->step_needed[s])
                continue;
            for (size_t k = 0; k < ps->config->n_output_map; k++)
                if (needed_tensor[ps->out_tensors[k]])
                    run->step_needed[s] = true;
            if (!run->step_needed[s])
                continue;
            changed = true;
            for (size_t k = 0; k < ps->config->n_input_map; k++)
                needed_tensor[ps->in_tensors[k]] = true;
        }
    }
}

/* Moves the request's inputs into their tensors (iteration 0). */
static osp_error *take_request_inputs(ensemble_run *run) {
    pending_request *p = run->p;
    const osp_model_config *cfg = p->model->config;
    static const osp_shape scalar = {0};
    osp_error *err = NULL;
    for (size_t i = 0; i < cfg->n_inputs && !err; i++) {
        size_t t = run->ens->plan->input_tensors[i];
        int j = p->input_map[i];
        if (j < 0) {
            err = set_tensor(run, t, 0, cfg->inputs[i].dtype, &scalar,
                             cfg->max_batch_size > 0, NULL);
            continue;
        }
        osp_infer_input *in = &p->req->inputs[j];
        osp_buffer *data = in->data;
        in->data = NULL;
        err = set_tensor(run, t, 0, in->dtype, &in->shape,
                         cfg->max_batch_size > 0, data);
    }
    return err;
}

void ensemble_start(ensemble *ens, pending_request *p) {
    const ensemble_plan *plan = ens->plan;
    ensemble_run *run = calloc(1, sizeof(*run));
    bool *needed_tensor = calloc(plan->n_tensors + 1, sizeof *needed_tensor);
    if (run) {
        run->tensors = calloc(plan->n_tensors + 1, sizeof(*run->tensors));
        run->step_needed = calloc(plan->n_steps + 1, sizeof *run->step_needed);
    }
    if (!run || !run->tensors || !run->step_needed || !needed_tensor) {
        if (run) {
            free(run->tensors);
            free(run->step_needed);
        }
        free(run);
        free(needed_tensor);
        pending_request_fail(p, osp_error_out_of_memory());
        return;
    }
    pthread_mutex_init(&run->lock, NULL);
    run->ens = ens;
    run->p = p;
    run->next_iteration = 1;
    mark_needed_steps(run, needed_tensor);
    free(needed_tensor);
    p->times.queue_start = p->times.compute_start = osp_now_ns();
    pthread_mutex_lock(&ens->lock);
    bool stopping = ens->stopping;
    if (!stopping)
        ens->running++;
    pthread_mutex_unlock(&ens->lock);
    if (stopping) { /* as model_enqueue answers for a model being unloaded */
        run_free(run);
        pending_request_fail(
            p, osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                    OSP_REASON_MODEL_NOT_READY,
                                    "Request for unknown model: '%s' is not "
                                    "at ready state",
                                    ens->model->config->name));
        return;
    }

    run->driving = true;
    pthread_mutex_lock(&run->lock);
    record_error_locked(run, take_request_inputs(run));
    pthread_mutex_unlock(&run->lock);
    drive_run(run);
}

/* ---- lifetime ------------------------------------------------------------ */

static void step_facts_free(ensemble *ens) {
    if (ens->step_input_dims)
        for (size_t s = 0; s < ens->plan->n_steps; s++)
            free(ens->step_input_dims[s]);
    free(ens->step_input_dims);
    free(ens->step_batching);
    free(ens->step_decoupled);
}

/* What the run needs of each step's model config (step_cfgs, borrowed for
 * the call): whether it is decoupled, whether it batches, and the dims of
 * the inputs its input_map feeds. */
static osp_error *step_facts_new(ensemble *ens,
                                 const osp_model_config *const *step_cfgs) {
    size_t n = ens->plan->n_steps;
    ens->step_decoupled = calloc(n + 1, sizeof *ens->step_decoupled);
    ens->step_batching = calloc(n + 1, sizeof *ens->step_batching);
    ens->step_input_dims = calloc(n + 1, sizeof *ens->step_input_dims);
    if (!ens->step_decoupled || !ens->step_batching || !ens->step_input_dims)
        return osp_error_out_of_memory();
    for (size_t s = 0; s < n; s++) {
        const osp_ensemble_step *st = ens->plan->steps[s].config;
        ens->step_decoupled[s] = step_cfgs[s]->decoupled;
        ens->step_batching[s] = step_cfgs[s]->max_batch_size > 0;
        if (!(ens->step_input_dims[s] =
                  calloc(st->n_input_map + 1, sizeof(osp_shape))))
            return osp_error_out_of_memory();
        for (size_t k = 0; k < st->n_input_map; k++) {
            int i = osp_model_config_input_index(step_cfgs[s],
                                                 st->input_map[k].key);
            if (i >= 0) /* (ensemble_check_steps made sure) */
                ens->step_input_dims[s][k] = step_cfgs[s]->inputs[i].dims;
        }
    }
    return NULL;
}

osp_error *ensemble_attach(osp_model *model, osp_server *server,
                           const osp_model_config *const *step_cfgs) {
    osp_error *err = ensemble_check_steps(model->config, step_cfgs);
    if (err)
        return err;
    ensemble *ens = calloc(1, sizeof(*ens));
    if (!ens)
        return osp_error_out_of_memory();
    if ((err = ensemble_plan_new(model->config, &ens->plan))) {
        free(ens);
        return err;
    }
    ens->model = model;
    ens->server = server;
    bool decoupled = false;
    err = step_facts_new(ens, step_cfgs);
    if (!err)
        err = ensemble_plan_decoupled(ens->plan, model->config, step_cfgs,
                                      &decoupled);
    if (err) {
        step_facts_free(ens);
        ensemble_plan_free(ens->plan);
        free(ens);
        return err;
    }
    /* As Triton: an ensemble with a decoupled step is decoupled. */
    model->config->decoupled = model->config->decoupled || decoupled;
    uint32_t limit = model->config->ensemble_scheduling.max_inflight_requests;
    if (limit > 0) {
        if (!(ens->limiter = ensemble_limiter_new(ens->plan->n_steps, limit))) {
            step_facts_free(ens);
            ensemble_plan_free(ens->plan);
            free(ens);
            return osp_error_out_of_memory();
        }
        OSP_LOG_INFO("Ensemble model '%s' configured with "
                     "max_inflight_requests: %u",
                     model->config->name, limit);
    }
    pthread_mutex_init(&ens->lock, NULL);
    pthread_cond_init(&ens->idle, NULL);
    model->ensemble = ens;
    return NULL;
}

void ensemble_drain(ensemble *ens) {
    pthread_mutex_lock(&ens->lock);
    ens->stopping = true;
    while (ens->running > 0)
        pthread_cond_wait(&ens->idle, &ens->lock);
    pthread_mutex_unlock(&ens->lock);
}

void ensemble_free(ensemble *ens) {
    if (!ens)
        return;
    step_facts_free(ens); /* reads the plan's step count */
    ensemble_plan_free(ens->plan);
    ensemble_limiter_free(ens->limiter);
    pthread_mutex_destroy(&ens->lock);
    pthread_cond_destroy(&ens->idle);
    free(ens);
}
