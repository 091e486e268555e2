/*
 * A loaded model version: backend state, instances placed on devices, and
 * the scheduler queue its instance workers take requests from.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cancel_token.h"
#include "cond_deadline.h"
#include "ensemble.h"
#include "model_internal.h"
#include "osprey/log.h"
#include "request_validate.h"
#include "warmup.h"

osp_model *model_ref(osp_model *model) {
    atomic_fetch_add(&model->refs, 1);
    return model;
}

/* Frees the struct itself once nobody refers to it; instances and backend
 * state are already gone (model_unload). */
void osp_model_unref(osp_model *model) {
    if (!model || atomic_fetch_sub(&model->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&model->lock);
    pthread_cond_destroy(&model->work_ready);
    pthread_mutex_destroy(&model->order_lock);
    batcher_destroy(&model->batcher);
    sequence_batcher_free(model->sequences);
    model_stats_destroy(&model->stats);
    ensemble_free(model->ensemble);
    osp_model_config_free(model->config);
    for (size_t i = 0; i < model->n_output_labels; i++)
        class_labels_free(&model->output_labels[i]);
    free(model->output_labels);
    free(model->version_path);
    free(model);
}

/* Reads every output's label_filename, a file in the model's folder (the
 * parent of the version folder). */
static osp_error *load_labels(osp_model *model) {
    const osp_model_config *cfg = model->config;
    model->output_labels = calloc(cfg->n_outputs + 1, sizeof(class_labels));
    if (!model->output_labels)
        return osp_error_out_of_memory();
    model->n_output_labels = cfg->n_outputs;
    const char *slash = strrchr(model->version_path, '/');
    int dir_len = slash ? (int)(slash - model->version_path) : 1;
    const char *dir = slash ? model->version_path : ".";
    for (size_t i = 0; i < cfg->n_outputs; i++) {
        if (!cfg->outputs[i].label_filename)
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%.*s/%s", dir_len, dir,
                 cfg->outputs[i].label_filename);
        osp_error *err = class_labels_load(path, &model->output_labels[i]);
        if (err)
            return osp_error_wrap(err, "output '%s'", cfg->outputs[i].name);
    }
    return NULL;
}

const osp_model_config *osp_model_get_config(const osp_model *model) {
    return model->config;
}

int64_t osp_model_get_version(const osp_model *model) {
    return model->version;
}

void osp_model_describe_placement(const osp_model *model, char *buf,
                                  size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < model->n_instances && used < cap; i++) {
        osp_device_info info;
        osp_device_get_info(model->instances[i].device, &info);
        if (info.type == OSP_DEVICE_CPU)
            used += (size_t)snprintf(buf + used, cap - used, "%sCPU",
                                     i ? ", " : "");
        else
            used += (size_t)snprintf(buf + used, cap - used, "%sGPU %d (%s)",
                                     i ? ", " : "", info.index, info.name);
    }
}

/* ---- instance workers ------------------------------------------------------
 */

/* Whether request b may run in one batch with a (batcher_compatible_fn):
 * the same optional inputs given, and each input's datatype and shape
 * beyond the batch dimension equal (gather_input concatenates rows). */
static bool requests_compatible(const batcher_entry *a, const batcher_entry *b,
                                void *ctx) {
    const osp_model_config *cfg = ctx;
    const pending_request *p = a->owner, *q = b->owner;
    if (cfg->decoupled)
        return false; /* one request per batch (osprey/backend.h) */
    for (size_t i = 0; i < cfg->n_inputs; i++) {
        int x = p->input_map[i], y = q->input_map[i];
        if ((x < 0) != (y < 0))
            return false;
        if (x < 0)
            continue;
        const osp_infer_input *u = &p->req->inputs[x];
        const osp_infer_input *v = &q->req->inputs[y];
        if (u->dtype != v->dtype || u->shape.rank != v->shape.rank)
            return false;
        for (int d = cfg->max_batch_size > 0 ? 1 : 0; d < u->shape.rank; d++)
            if (u->shape.dims[d] != v->shape.dims[d])
                return false;
    }
    return true;
}

/* Fails requests whose queue timeout expired under REJECT (a list linked
 * by entry.next), as Triton: UNAVAILABLE "Request timeout expired". */
static void fail_expired(batcher_entry *expired) {
    while (expired) {
        pending_request *p = expired->owner;
        expired = expired->next;
        p->failure_reason = OSP_FAILURE_REJECTED;
        pending_request_fail(
            p, osp_error_new_reason(OSP_ERROR_UNAVAILABLE, OSP_REASON_TIMEOUT,
                                    "Request timeout expired"));
    }
}

/* Moves the n entries the queue left in inst->entries into inst->batch
 * as their requests (a `direct` hole stays NULL: instance_execute_batch
 * fills it). */
static void claim_batch(model_instance *inst, size_t n) {
    osp_model *model = inst->model;
    const osp_model_config *cfg = model->config;
    reorder_buffer *order = NULL;
    if (cfg->dynamic_batching.enabled &&
        cfg->dynamic_batching.preserve_ordering)
        order = &model->reorder;
    else if (model->sequences && !model->direct_rows &&
             cfg->sequence_batching.oldest_preserve_ordering)
        order = &inst->reorder;
    for (size_t i = 0; i < n; i++) {
        inst->batch[i] = inst->entries[i] ? inst->entries[i]->owner : NULL;
        if (inst->batch[i])
            inst->batch[i]->reorder = order;
    }
}

/* The queue inst takes its batches from: the model's, or for a sequence
 * model the instance's own dynamic batcher (`oldest`; NULL for `direct`,
 * whose rows are inst->seq_rows). */
static batcher *instance_queue(model_instance *inst) {
    osp_model *model = inst->model;
    if (!model->sequences)
        return &model->batcher;
    return model->direct_rows ? NULL : &inst->seq_queue;
}

/* Requests queued for inst: the model's queue, or its own. Lock held. */
static size_t instance_queued(model_instance *inst) {
    batcher *q = instance_queue(inst);
    return q ? batcher_queued(q) : slot_batcher_queued(&inst->seq_rows);
}

/* A queued request whose client has cancelled it. */
static bool entry_cancelled(const batcher_entry *e, void *ctx) {
    (void)ctx;
    return pending_request_cancelled(e->owner);
}

/* Answers the requests of `cancelled` (a list linked by entry.next)
 * CANCELLED without running them. */
static void fail_cancelled(batcher_entry *cancelled) {
    while (cancelled) {
        pending_request *p = cancelled->owner;
        cancelled = cancelled->next;
        pending_request_cancel(p);
    }
}

/* batcher_take (or slot_batcher_take) on inst's queue into inst->entries.
 * The instance first takes out the requests whose client has cancelled
 * them into *cancelled, as Triton's schedulers skip them (the sequence
 * batcher then decides what becomes of their sequence). The model's shared
 * queue is searched only when some token was cancelled since its last
 * search. Lock held. */
static size_t instance_take(model_instance *inst, bool flush,
                            batcher_entry **expired, batcher_entry **cancelled,
                            uint64_t *wait_ns) {
    osp_model *model = inst->model;
    batcher *q = instance_queue(inst);
    *expired = NULL;
    *cancelled = NULL;
    if (model->sequences && q) {
        batcher_remove_if(q, entry_cancelled, NULL, cancelled);
    } else if (model->sequences) {
        slot_batcher_remove_if(&inst->seq_rows, entry_cancelled, NULL,
                               cancelled);
    } else {
        uint64_t epoch = cancel_token_epoch();
        if (epoch != model->cancel_epoch_seen) {
            model->cancel_epoch_seen = epoch;
            batcher_remove_if(q, entry_cancelled, NULL, cancelled);
        }
    }
    if (!q)
        return slot_batcher_take(&inst->seq_rows, osp_now_ns(), flush,
                                 inst->entries, wait_ns);
    return batcher_take(q, osp_now_ns(), flush, inst->entries,
                        batcher_max_entries(q), expired, wait_ns);
}

/* Takes the next batch for an instance into inst->batch, blocking until
 * the batcher has one ready (or its delay or a queue timeout runs out)
 * and the instance is not running a batch inline. Expired requests are
 * failed on the way. Returns 0 when the model is stopping, its queue is
 * drained and no inline batch uses the instance: while stopping, whatever
 * is queued runs at once. previous_done: the worker ran a batch since it
 * last took one (it still holds the instance's busy flag). */
static size_t take_batch(model_instance *inst, bool previous_done) {
    osp_model *model = inst->model;
    size_t n = 0;
    pthread_mutex_lock(&model->lock);
    if (previous_done)
        inst->busy = false; /* the batch this worker ran last is done */
    for (;;) {
        if (inst->busy) { /* a caller runs a batch on it inline */
            pthread_cond_wait(&model->work_ready, &model->lock);
            continue;
        }
        batcher_entry *expired = NULL, *cancelled = NULL;
        uint64_t wait_ns = 0;
        n = instance_take(inst, model->stopping || model->flushing, &expired,
                          &cancelled, &wait_ns);
        if (n > 0 || expired || cancelled) {
            inst->busy = n > 0;
            /* What is left may make a batch for another idle instance
             * (a sequence model's instance takes only its own). */
            if (!model->sequences && batcher_queued(&model->batcher) > 0)
                pthread_cond_signal(&model->work_ready);
            pthread_mutex_unlock(&model->lock);
            fail_expired(expired);
            fail_cancelled(cancelled);
            if (n > 0)
                break;
            pthread_mutex_lock(&model->lock);
            continue;
        }
        if (model->stopping) { /* and nothing is queued */
            pthread_mutex_unlock(&model->lock);
            break;
        }
        if (wait_ns == 0) {
            pthread_cond_wait(&model->work_ready, &model->lock);
        } else {
            /* Long waits are cut to an hour: the batcher is asked again. */
            const uint64_t hour_ns = 3600ull * 1000000000ull;
            cond_wait_until(
                &model->work_ready, &model->lock,
                deadline_after_ns(wait_ns < hour_ns ? wait_ns : hour_ns));
        }
    }
    claim_batch(inst, n);
    return n;
}

static void *instance_worker(void *arg) {
    model_instance *inst = arg;
    size_t n;
    bool ran = false;
    while ((n = take_batch(inst, ran)) > 0) {
        instance_execute_batch(inst, inst->batch, n);
        ran = true;
    }
    return NULL;
}

/* An instance of `model` not running a batch, or NULL. Lock held. */
static model_instance *idle_instance(osp_model *model) {
    for (size_t i = 0; i < model->n_instances; i++)
        if (!model->instances[i].busy)
            return &model->instances[i];
    return NULL;
}

/* Runs on the calling thread the batches the batcher has ready now, on
 * `inst` (idle), at most MODEL_INLINE_MAX_BATCHES of them so that a
 * caller under sustained load gets back to its own connections. Called
 * and returns with the model's lock held; unlocks around each batch.
 * Whatever is still queued afterwards goes to the workers. */
static void run_inline_batches(osp_model *model, model_instance *inst) {
    inst->busy = true;
    for (int round = 0; round < MODEL_INLINE_MAX_BATCHES; round++) {
        batcher_entry *expired = NULL, *cancelled = NULL;
        uint64_t wait_ns = 0;
        size_t n = instance_take(inst, model->flushing, &expired, &cancelled,
                                 &wait_ns);
        if (n == 0 && !expired && !cancelled)
            break; /* empty, or waiting for the batch to fill */
        claim_batch(inst, n);
        pthread_mutex_unlock(&model->lock);
        fail_expired(expired);
        fail_cancelled(cancelled);
        if (n > 0)
            instance_execute_batch(inst, inst->batch, n);
        pthread_mutex_lock(&model->lock);
    }
    inst->busy = false;
    /* Every worker rechecks: one may wait for this instance (to run what
     * is queued, or to exit while stopping). */
    if (batcher_queued(&model->batcher) > 0 || model->stopping)
        pthread_cond_broadcast(&model->work_ready);
}

osp_error *model_enqueue(osp_model *model, pending_request *p) {
    /* Hook: a sequence model's requests wait for their sequence's turn. */
    if (model->sequences)
        return sequence_batcher_submit(model->sequences, model, p);
    osp_error *err = model_enqueue_keep(model, p);
    if (err)
        pending_request_free(p);
    return err;
}

osp_error *model_enqueue_keep(osp_model *model, pending_request *p) {
    pthread_mutex_lock(&model->lock);
    if (model->stopping) {
        pthread_mutex_unlock(&model->lock);
        return osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                    OSP_REASON_MODEL_NOT_READY,
                                    "Request for unknown model: '%s' is not "
                                    "at ready state",
                                    model->config->name);
    }
    uint64_t now = osp_now_ns();
    p->times.queue_start = now;
    p->next = NULL;
    p->entry.owner = p;
    p->entry.batch_size = p->batch_size;
    p->entry.priority = p->req->priority;
    p->entry.timeout_us = p->req->timeout_us;
    osp_error *err = NULL;
    model_instance *idle = NULL;
    if (model->sequences) {
        /* The instance holding the sequence's batch slot runs it. */
        const sequence_step *step = p->sequence;
        model_instance *inst = &model->instances[step->instance];
        if (!model->direct_rows)
            err = batcher_enqueue(&inst->seq_queue, &p->entry, now);
        else if (!slot_batcher_put(&inst->seq_rows, (size_t)step->batch_index,
                                   &p->entry, now))
            err = osp_error_new(OSP_ERROR_INTERNAL,
                                "batch slot %d of instance %d is taken",
                                step->batch_index, step->instance);
        idle = err || inst->busy ? NULL : inst;
    } else {
        err = batcher_enqueue(&model->batcher, &p->entry, now);
        idle = err ? NULL : idle_instance(model);
    }
    bool run_here = idle && model->run_inline && !model->flushing;
    if (run_here) {
        /* p, and with it its model reference, may end inside. */
        model_ref(model);
        run_inline_batches(model, idle);
    } else if (idle) {
        /* When every instance is busy no one is woken: whoever finishes
         * first takes the request (a worker looks at the queue before it
         * waits, an inline caller broadcasts), and a signal would only
         * wake a worker whose instance an inline caller holds, to wait
         * again: two context switches for nothing. Workers of an inline
         * model also wait for their busy instance on this condition, so
         * they all look. */
        if (model->run_inline || model->sequences)
            pthread_cond_broadcast(&model->work_ready);
        else
            pthread_cond_signal(&model->work_ready);
    }
    pthread_mutex_unlock(&model->lock);
    if (run_here)
        osp_model_unref(model);
    if (err) {
        /* Triton prefixes the queue's refusal with the request id. */
        return request_error(p->req, err);
    }
    return NULL;
}

void model_flush(osp_model *model) {
    pthread_mutex_lock(&model->lock);
    model->flushing = true;
    pthread_cond_broadcast(&model->work_ready);
    pthread_mutex_unlock(&model->lock);
}

size_t model_pending_count(osp_model *model) {
    pthread_mutex_lock(&model->lock);
    size_t n = batcher_queued(&model->batcher);
    for (size_t i = 0; model->sequences && i < model->n_instances; i++)
        n += instance_queued(&model->instances[i]);
    pthread_mutex_unlock(&model->lock);
    if (model->sequences)
        n += sequence_batcher_backlogged(model->sequences);
    return n;
}

/* ---- placement
 * --------------------------------------------------------------- */

/* Appends one instance slot on `dev`. */
static osp_error *add_instance(osp_model *model, osp_device *dev) {
    model_instance *bigger =
        realloc(model->instances, sizeof(*bigger) * (model->n_instances + 1));
    if (!bigger)
        return osp_error_out_of_memory();
    model->instances = bigger;
    model_instance *inst = &model->instances[model->n_instances];
    memset(inst, 0, sizeof(*inst));
    inst->model = model;
    inst->index = (int)model->n_instances;
    inst->device = dev;
    model->n_instances++;
    return NULL;
}

/* Replaces config->instance_groups with `groups` (ownership moves). */
static void set_effective_groups(osp_model_config *cfg,
                                 osp_instance_group *groups, size_t n) {
    for (size_t i = 0; i < cfg->n_instance_groups; i++) {
        free(cfg->instance_groups[i].name);
        free(cfg->instance_groups[i].gpus);
    }
    free(cfg->instance_groups);
    cfg->instance_groups = groups;
    cfg->n_instance_groups = n;
}

/* Decides the devices of every instance from instance_group (Triton's
 * rules: KIND_AUTO = GPU when present; a group without gpus uses every GPU;
 * count instances per GPU). Without a GPU, KIND_GPU falls back to the CPU
 * with one warning unless strict_gpu. Afterwards the config's groups say
 * what was chosen (kind, count, gpus, a name), as Triton reports them, so
 * the model configuration endpoints show where instances live. */
static osp_error *place_instances(osp_model *model, bool strict_gpu) {
    osp_model_config *cfg = model->config;
    int gpus = osp_device_cuda_count();
    osp_instance_group fallback = {.count = 1, .kind = OSP_INSTANCE_KIND_AUTO};
    const osp_instance_group *groups =
        cfg->n_instance_groups ? cfg->instance_groups : &fallback;
    size_t n_groups = cfg->n_instance_groups ? cfg->n_instance_groups : 1;
    osp_instance_group *placed = calloc(n_groups, sizeof(*placed));
    bool warned = false;
    osp_error *err = NULL;
    if (!placed)
        return osp_error_out_of_memory();

    for (size_t g = 0; g < n_groups && !err; g++) {
        const osp_instance_group *grp = &groups[g];
        osp_instance_group *eff = &placed[g];
        int count = grp->count > 0 ? grp->count : 1;
        bool want_gpu = grp->kind == OSP_INSTANCE_KIND_GPU ||
                        (grp->kind == OSP_INSTANCE_KIND_AUTO && gpus > 0);
        char name[512];
        if (grp->name && grp->name[0])
            snprintf(name, sizeof(name), "%s", grp->name);
        else
            snprintf(name, sizeof(name), "%s_%zu", cfg->name, g);
        eff->name = strdup(name);
        eff->count = count;
        if (!eff->name) {
            err = osp_error_out_of_memory();
            break;
        }
        if (want_gpu && gpus == 0) {
            if (strict_gpu) {
                err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                                    "instance group %zu of model '%s' asks "
                                    "for KIND_GPU but no GPU is available "
                                    "(--strict-gpu)",
                                    g, cfg->name);
                break;
            }
            if (!warned)
                OSP_LOG_WARN("model '%s': KIND_GPU requested but no GPU is "
                             "available; running its instances on the CPU",
                             cfg->name);
            warned = true;
            want_gpu = false;
        }
        if (!want_gpu) {
            eff->kind = OSP_INSTANCE_KIND_CPU;
            for (int c = 0; c < count && !err; c++)
                err = add_instance(model, osp_device_cpu());
            continue;
        }
        eff->kind = OSP_INSTANCE_KIND_GPU;
        size_t n_ids = grp->n_gpus ? grp->n_gpus : (size_t)gpus;
        eff->gpus = calloc(n_ids + 1, sizeof(*eff->gpus));
        if (!eff->gpus) {
            err = osp_error_out_of_memory();
            break;
        }
        for (size_t k = 0; k < n_ids && !err; k++) {
            int id = grp->n_gpus ? grp->gpus[k] : (int)k;
            osp_device *dev = NULL;
            if ((err = osp_device_cuda_get(id, &dev)))
                break;
            eff->gpus[eff->n_gpus++] = id;
            for (int c = 0; c < count && !err; c++)
                err = add_instance(model, dev);
        }
    }
    if (err) {
        for (size_t g = 0; g < n_groups; g++) {
            free(placed[g].name);
            free(placed[g].gpus);
        }
        free(placed);
        return err;
    }
    set_effective_groups(cfg, placed, n_groups);
    return NULL;
}

/* Stops workers (after draining the queue) and frees instance state. */
static void stop_instances(osp_model *model) {
    pthread_mutex_lock(&model->lock);
    model->stopping = true;
    pthread_cond_broadcast(&model->work_ready);
    pthread_mutex_unlock(&model->lock);
    for (size_t i = 0; i < model->n_instances; i++) {
        model_instance *inst = &model->instances[i];
        if (inst->thread_started)
            pthread_join(inst->thread, NULL);
        if (inst->state)
            model->backend->instance_free(inst->state);
        for (int m = 0; m < 4; m++)
            osp_event_free(inst->marks[m]);
        osp_stream_free(inst->stream);
        free(inst->batch);
        free(inst->entries);
        batcher_destroy(&inst->seq_queue);
        slot_batcher_destroy(&inst->seq_rows);
    }
    free(model->instances);
    model->instances = NULL;
    model->n_instances = 0;
    if (model->backend_model)
        model->backend->model_free(model->backend_model);
    model->backend_model = NULL;
}

/* The dynamic batching an `oldest` sequence model's instances do: the
 * strategy's preferred sizes, delay and preserve_ordering. */
static osp_model_config oldest_queue_config(const osp_model_config *config) {
    const osp_sequence_batching *seq = &config->sequence_batching;
    osp_model_config queue = *config;
    queue.dynamic_batching = (osp_dynamic_batching){
        .enabled = true,
        .preferred_batch_sizes = seq->preferred_batch_sizes,
        .n_preferred_batch_sizes = seq->n_preferred_batch_sizes,
        .max_queue_delay_us = seq->oldest_max_queue_delay_us,
        .preserve_ordering = seq->oldest_preserve_ordering,
    };
    return queue;
}

/* The model's queue: the dynamic batcher; for sequence_batching the
 * sequence batcher in front of the instances' own queues
 * (init_sequence_queues), the model's staying empty. */
static osp_error *init_queue(osp_model *model, const char *version_path,
                             size_t max_sequences) {
    const osp_model_config *config = model->config;
    const osp_sequence_batching *seq = &config->sequence_batching;
    if (!seq->enabled)
        return batcher_init(&model->batcher, config, requests_compatible,
                            (void *)config);
    osp_error *err = sequence_batcher_new(config, version_path, max_sequences,
                                          &model->sequences);
    if (err)
        return err;
    osp_model_config queue = oldest_queue_config(config);
    return batcher_init(&model->batcher, &queue, requests_compatible,
                        (void *)config);
}

/* A sequence model's batch slots (n_instances x slots per instance) and
 * each instance's queue: `direct` one row per slot, `oldest` a dynamic
 * batcher. Sets model->batch_capacity. */
static osp_error *init_sequence_queues(osp_model *model) {
    const osp_model_config *config = model->config;
    const osp_sequence_batching *seq = &config->sequence_batching;
    model->batch_capacity = batcher_max_entries(&model->batcher);
    if (!model->sequences)
        return NULL;
    osp_error *err =
        sequence_batcher_start(model->sequences, model, model->n_instances);
    if (err)
        return err;
    size_t slots = sequence_batcher_slots_per_instance(model->sequences);
    /* A decoupled model runs one request per batch (osprey/backend.h):
     * its `direct` batches get no filler rows, each request running
     * alone from its instance's queue. */
    model->direct_rows =
        seq->strategy == OSP_SEQUENCE_DIRECT && !config->decoupled;
    if (model->direct_rows && slots > model->batch_capacity)
        model->batch_capacity = slots;
    osp_model_config queue = oldest_queue_config(config);
    for (size_t i = 0; i < model->n_instances && !err; i++) {
        model_instance *inst = &model->instances[i];
        reorder_init(&inst->reorder);
        if (model->direct_rows)
            err = slot_batcher_init(&inst->seq_rows, slots,
                                    config->max_batch_size,
                                    seq->direct_max_queue_delay_us,
                                    seq->direct_minimum_slot_utilization,
                                    requests_compatible, (void *)config);
        else
            err = batcher_init(&inst->seq_queue, &queue, requests_compatible,
                               (void *)config);
    }
    return err;
}

/* The parts of a loaded model every model has: reference, locks, config,
 * version and path, statistics. */
static osp_model *model_new_shell(osp_model_config *config, int64_t version,
                                  const char *version_path) {
    osp_model *model = calloc(1, sizeof(*model));
    if (!model)
        return NULL;
    atomic_init(&model->refs, 1);
    pthread_mutex_init(&model->lock, NULL);
    pthread_mutex_init(&model->order_lock, NULL);
    reorder_init(&model->reorder);
    cond_init_monotonic(&model->work_ready);
    model->config = config;
    model->version = version;
    model->version_path = strdup(version_path);
    osp_error *err =
        model->version_path
            ? model_stats_init(&model->stats, config->max_batch_size)
            : osp_error_out_of_memory();
    if (err) {
        osp_error_free(err);
        model->config = NULL; /* the caller keeps the config on failure */
        osp_model_unref(model);
        return NULL;
    }
    return model;
}

osp_error *model_load_shell(osp_model_config *config, int64_t version,
                            const char *version_path, osp_model **out) {
    *out = model_new_shell(config, version, version_path);
    return *out ? NULL : osp_error_out_of_memory();
}

osp_error *model_load(osp_model_config *config, const osp_backend *backend,
                      int64_t version, const char *version_path,
                      const model_load_options *opts, osp_model **out) {
    osp_error *err = NULL;
    osp_model *model = model_new_shell(config, version, version_path);
    if (!model)
        return osp_error_out_of_memory();
    if ((err = load_labels(model)))
        goto out;
    model->backend = backend;
    if ((err = model->backend->model_new(config, version_path,
                                         &model->backend_model)))
        goto out;
    if ((err = init_queue(model, version_path, opts->max_sequences)))
        goto out;
    if ((err = place_instances(model, opts->strict_gpu)))
        goto out;
    if ((err = init_sequence_queues(model)))
        goto out;
    for (size_t i = 0; i < model->n_instances && !err; i++) {
        model_instance *inst = &model->instances[i];
        size_t slots = model->batch_capacity;
        inst->batch = calloc(slots, sizeof(*inst->batch));
        inst->entries = calloc(slots, sizeof(*inst->entries));
        if (!inst->batch || !inst->entries) {
            err = osp_error_out_of_memory();
            break;
        }
        err = osp_stream_new(inst->device, &inst->stream);
        for (int m = 0; m < 4 && !err; m++)
            err = osp_event_new(inst->device, &inst->marks[m]);
        if (!err)
            err = model->backend->instance_new(
                model->backend_model, inst->device, inst->stream, &inst->state);
    }
    model->run_inline = !err && model->backend->execute_is_quick &&
                        model->backend->execute_is_quick(model->backend_model);
    for (size_t i = 0; i < model->n_instances && !err; i++) {
        osp_device_info info;
        osp_device_get_info(model->instances[i].device, &info);
        if (info.type != OSP_DEVICE_CPU)
            model->run_inline = false; /* a GPU batch waits for its stream */
    }
    /* A finished step queues its sequence's next one: never inline, or a
     * long sequence would nest one batch inside another. */
    if (model->sequences)
        model->run_inline = false;
    /* Hook: model_warmup runs on the instances before their workers
     * start and before the model is ready. */
    if (!err)
        err = warmup_run(model);
    for (size_t i = 0; i < model->n_instances && !err; i++) {
        model_instance *inst = &model->instances[i];
        if (pthread_create(&inst->thread, NULL, instance_worker, inst) != 0)
            err = osp_error_new(OSP_ERROR_INTERNAL,
                                "cannot start instance thread");
        else
            inst->thread_started = true;
    }
out:
    if (err) {
        stop_instances(model);
        model->config = NULL; /* the caller keeps the config on failure */
        osp_model_unref(model);
        return err;
    }
    *out = model;
    return NULL;
}

void model_unload(osp_model *model) {
    if (model->ensemble)
        ensemble_drain(model->ensemble);
    stop_instances(model);
    /* Sequences still waiting for a batch slot fail now. */
    if (model->sequences)
        sequence_batcher_stop(model->sequences);
    osp_model_unref(model);
}
