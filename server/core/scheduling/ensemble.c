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

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ensemble_graph.h"
#include "trace_report.h"

struct ensemble {
    osp_model *model; /* borrowed: the model owns its ensemble */
    osp_server *server;
    ensemble_plan *plan;
    pthread_mutex_t lock; /* running, stopping, and the wait for idle */
    pthread_cond_t idle;
    size_t running;
    bool stopping; /* unloading: new requests are refused */
};

/* One tensor of a run. */
typedef struct tensor_value {
    bool ready;   /* written (or an absent optional input) */
    bool present; /* has data */
    osp_datatype dtype;
    osp_shape shape;
    osp_buffer *data; /* exactly the tensor's bytes; owned */
    size_t readers_left;
} tensor_value;

typedef struct ensemble_run ensemble_run;

/* A step of a run: what its completion callback needs. */
typedef struct run_step {
    ensemble_run *run;
    size_t index;
    bool started;
    size_t next_ready; /* the ready queue's link (SIZE_MAX ends it) */
    osp_trace *trace;  /* the step's child trace, or NULL */
} run_step;

struct ensemble_run {
    ensemble *ens;
    pending_request *p; /* the ensemble's request */
    pthread_mutex_t lock;
    tensor_value *tensors;
    run_step *steps;
    size_t in_flight; /* steps queued or submitted, not completed */
    size_t ready_head, ready_tail; /* steps to submit, FIFO; SIZE_MAX: none */
    bool driving;                  /* a thread is in drive_run */
    osp_error *error;              /* the first step error, already prefixed */
    stats_sink compute;            /* the steps' compute durations, summed */
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

/* A reader's copy of tensor v: its buffer itself when this is the last
 * use, else a copy. NULL with *err set on OOM. */
static osp_buffer *take_for_reader(tensor_value *v, osp_error **err) {
    if (--v->readers_left == 0) {
        osp_buffer *buf = v->data;
        v->data = NULL;
        return buf;
    }
    osp_buffer *copy = osp_buffer_new_host(v->data->size);
    if (!copy) {
        *err = osp_error_out_of_memory();
        return NULL;
    }
    memcpy(copy->data, v->data->data, v->data->size);
    return copy;
}

/* ---- runs ---------------------------------------------------------------- */

static void run_free(ensemble_run *run) {
    const ensemble_plan *plan = run->ens->plan;
    for (size_t t = 0; run->tensors && t < plan->n_tensors; t++)
        osp_buffer_free(run->tensors[t].data);
    free(run->tensors);
    free(run->steps);
    osp_error_free(run->error);
    pthread_mutex_destroy(&run->lock);
    free(run);
}

/* Stores a tensor's value (data ownership moves) with its readers. */
static void set_tensor(ensemble_run *run, size_t t, osp_datatype dtype,
                       const osp_shape *shape, osp_buffer *data) {
    const ensemble_plan *plan = run->ens->plan;
    tensor_value *v = &run->tensors[t];
    osp_buffer_free(v->data); /* (a step's output map names it once) */
    v->ready = true;
    v->present = data != NULL;
    v->dtype = dtype;
    v->shape = *shape;
    v->data = data;
    /* The ensemble's own outputs keep their buffer to the end. */
    v->readers_left = plan->readers[t] + (plan->is_output[t] ? 1 : 0);
}

/* Queues every step not started whose inputs are all ready, in config
 * order, and counts them in flight. Lock held. */
static void collect_ready(ensemble_run *run) {
    const ensemble_plan *plan = run->ens->plan;
    for (size_t s = 0; s < plan->n_steps; s++) {
        run_step *rs = &run->steps[s];
        if (rs->started)
            continue;
        bool ready = true;
        for (size_t k = 0; k < plan->steps[s].config->n_input_map && ready; k++)
            ready = run->tensors[plan->steps[s].in_tensors[k]].ready;
        if (!ready)
            continue;
        rs->started = true;
        rs->next_ready = SIZE_MAX;
        if (run->ready_head == SIZE_MAX)
            run->ready_head = s;
        else
            run->steps[run->ready_tail].next_ready = s;
        run->ready_tail = s;
        run->in_flight++;
    }
}

/* The ensemble's response from its output tensors, in the request's
 * order (its top classes for an output asked for with a class count). */
static osp_error *build_response(ensemble_run *run, osp_infer_response **out) {
    pending_request *p = run->p;
    const osp_model_config *cfg = p->model->config;
    const ensemble_plan *plan = run->ens->plan;
    osp_infer_response *resp = pending_request_response_new(p);
    if (!resp || !(resp->outputs = calloc(p->n_response_outputs + 1,
                                          sizeof(*resp->outputs)))) {
        osp_infer_response_free(resp);
        return osp_error_out_of_memory();
    }
    for (size_t k = 0; k < p->n_response_outputs; k++) {
        size_t o = p->response_outputs[k];
        tensor_value *v = &run->tensors[plan->output_tensors[o]];
        osp_infer_output *out_k = &resp->outputs[k];
        resp->n_outputs = k + 1;
        if (!(out_k->name = strdup(cfg->outputs[o].name))) {
            osp_infer_response_free(resp);
            return osp_error_out_of_memory();
        }
        if (!v->present) { /* a step left it out: nothing more can run */
            osp_infer_response_free(resp);
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "in ensemble '%s', unexpected deadlock, at "
                                 "least one output is not set while no more "
                                 "ensemble steps can be made",
                                 cfg->name);
        }
        out_k->dtype = v->dtype;
        out_k->shape = v->shape;
        osp_error *err = NULL;
        out_k->data = take_for_reader(v, &err);
        if (err) {
            osp_infer_response_free(resp);
            return err;
        }
        out_k->byte_size = out_k->data->size;
        /* Triton's classification extension (the ensemble has no labels). */
        uint32_t classes =
            p->req->n_outputs ? p->req->output_class_counts[k] : 0;
        static const class_labels no_labels = {0};
        if (classes &&
            (err = classification_apply(out_k, cfg->max_batch_size > 0, classes,
                                        &no_labels))) {
            osp_infer_response_free(resp);
            return err;
        }
    }
    *out = resp;
    return NULL;
}

/* The run is over (no step in flight): statistics as Triton keeps them for
 * an ensemble (compute stages are the sums of its steps'), then the
 * response, then the run goes. */
static void run_finish(ensemble_run *run) {
    ensemble *ens = run->ens;
    pending_request *p = run->p;
    osp_infer_response *resp = NULL;
    osp_error *err = run->error;
    run->error = NULL;
    if (!err)
        err = build_response(run, &resp);
    if (err) {
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
        pending_request_finish(p, resp);
    }
    run->p = NULL;
    run_free(run);
    pthread_mutex_lock(&ens->lock);
    if (--ens->running == 0)
        pthread_cond_broadcast(&ens->idle);
    pthread_mutex_unlock(&ens->lock);
}

/* Records a step's end (lock held): its error (ownership moves; NULL when
 * it worked) becomes the run's unless one came first; otherwise the steps
 * it made ready are queued. */
static void step_ended_locked(ensemble_run *run, osp_error *step_error) {
    if (step_error && !run->error)
        run->error = osp_error_new(
            osp_error_get_code(step_error), "in ensemble '%s', %s",
            run->ens->model->config->name, osp_error_message(step_error));
    osp_error_free(step_error);
    run->in_flight--;
    if (!run->error)
        collect_ready(run);
}

static void drive_run(ensemble_run *run);

/* A step's end from its completion: recorded, then the run is driven
 * here unless a thread already drives it. */
static void step_ended(ensemble_run *run, osp_error *step_error) {
    pthread_mutex_lock(&run->lock);
    step_ended_locked(run, step_error);
    bool drive = !run->driving;
    run->driving = true;
    pthread_mutex_unlock(&run->lock);
    if (drive)
        drive_run(run);
}

/* A step's completion callback: its outputs become ensemble tensors. */
static void step_complete(osp_infer_response *resp, void *user) {
    run_step *rs = user;
    ensemble_run *run = rs->run;
    const ensemble_plan_step *ps = &run->ens->plan->steps[rs->index];
    osp_error *err = NULL;
    osp_trace_end(rs->trace);
    rs->trace = NULL;
    if (!resp) {
        err = osp_error_out_of_memory();
    } else if (resp->error) {
        err = resp->error;
        resp->error = NULL;
    }
    pthread_mutex_lock(&run->lock);
    for (size_t i = 0; !err && i < resp->n_outputs; i++) {
        osp_infer_output *o = &resp->outputs[i];
        for (size_t k = 0; k < ps->config->n_output_map; k++) {
            if (strcmp(ps->config->output_map[k].key, o->name) != 0)
                continue;
            osp_buffer *data = exact_buffer(o->data, o->byte_size);
            o->data = NULL;
            if (!data)
                err = osp_error_out_of_memory();
            else
                set_tensor(run, ps->out_tensors[k], o->dtype, &o->shape, data);
            break;
        }
    }
    pthread_mutex_unlock(&run->lock);
    osp_infer_response_free(resp);
    step_ended(run, err);
}

/* The request of step s, its inputs taken from the run's tensors. */
static osp_error *step_request(ensemble_run *run, size_t s,
                               osp_infer_request **out) {
    const ensemble_plan_step *ps = &run->ens->plan->steps[s];
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
        tensor_value *v = &run->tensors[ps->in_tensors[k]];
        if (!v->present)
            continue; /* an optional input the request left out */
        osp_buffer *data = take_for_reader(v, &err);
        if (!err && (err = osp_infer_request_add_input(
                         req, st->input_map[k].key, v->dtype, &v->shape, data)))
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

/* Submits step s, counted in flight; an error is its end. */
static osp_error *submit_step(ensemble_run *run, size_t s) {
    run_step *rs = &run->steps[s];
    osp_infer_request *req = NULL;
    osp_error *err = step_request(run, s, &req);
    if (err)
        return err;
    osp_trace *parent = run->p->req->trace;
    if (parent)
        req->trace = rs->trace = trace_spawn_child(parent);
    err = server_infer_step(run->ens->server, req, step_complete, rs,
                            &run->compute);
    if (err) {
        osp_trace_end(rs->trace);
        rs->trace = NULL;
    }
    return err;
}

/* The driver's loop (run->driving set by the caller): submits queued steps
 * until none is left, then finishes the run when nothing is in flight, or
 * hands driving back. Completions meanwhile only queue work for it. */
static void drive_run(ensemble_run *run) {
    pthread_mutex_lock(&run->lock);
    for (;;) {
        size_t s = run->ready_head;
        if (s == SIZE_MAX)
            break;
        run->ready_head = run->steps[s].next_ready;
        pthread_mutex_unlock(&run->lock);
        osp_error *err = submit_step(run, s);
        pthread_mutex_lock(&run->lock);
        if (err)
            step_ended_locked(run, err);
    }
    bool done = run->in_flight == 0;
    run->driving = false;
    pthread_mutex_unlock(&run->lock);
    if (done)
        run_finish(run);
}

/* Moves the request's inputs into their tensors. */
static void take_request_inputs(ensemble_run *run) {
    pending_request *p = run->p;
    const osp_model_config *cfg = p->model->config;
    static const osp_shape scalar = {0};
    for (size_t i = 0; i < cfg->n_inputs; i++) {
        size_t t = run->ens->plan->input_tensors[i];
        int j = p->input_map[i];
        if (j < 0) {
            set_tensor(run, t, cfg->inputs[i].dtype, &scalar, NULL);
            continue;
        }
        osp_infer_input *in = &p->req->inputs[j];
        set_tensor(run, t, in->dtype, &in->shape, in->data);
        in->data = NULL;
    }
}

void ensemble_start(ensemble *ens, pending_request *p) {
    const ensemble_plan *plan = ens->plan;
    ensemble_run *run = calloc(1, sizeof(*run));
    if (run) {
        run->tensors = calloc(plan->n_tensors + 1, sizeof(*run->tensors));
        run->steps = calloc(plan->n_steps + 1, sizeof(*run->steps));
    }
    if (!run || !run->tensors || !run->steps) {
        if (run) {
            free(run->tensors);
            free(run->steps);
            free(run);
        }
        pending_request_fail(p, osp_error_out_of_memory());
        return;
    }
    pthread_mutex_init(&run->lock, NULL);
    run->ens = ens;
    run->p = p;
    p->times.queue_start = p->times.compute_start = osp_now_ns();
    for (size_t s = 0; s < plan->n_steps; s++)
        run->steps[s] = (run_step){.run = run, .index = s};
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

    run->ready_head = SIZE_MAX;
    run->driving = true;
    pthread_mutex_lock(&run->lock);
    take_request_inputs(run);
    collect_ready(run);
    pthread_mutex_unlock(&run->lock);
    drive_run(run);
}

/* ---- lifetime ------------------------------------------------------------ */

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
    ensemble_plan_free(ens->plan);
    pthread_mutex_destroy(&ens->lock);
    pthread_cond_destroy(&ens->idle);
    free(ens);
}
