/*
 * osp_model_config to inference.ModelConfig (see grpc_model_config.h). The
 * protobuf-c structs are built in an arena of allocations that is freed
 * once the message is packed: nothing in them is owned by the config.
 */
#include "grpc_model_config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "model_config.pb-c.h"

/* Every allocation of one conversion, freed together. */
typedef struct arena {
    void **blocks;
    size_t n, cap;
    bool oom;
} arena;

static void *arena_calloc(arena *a, size_t n, size_t size) {
    if (a->oom)
        return NULL;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        void **grown = realloc(a->blocks, cap * sizeof *grown);
        if (!grown) {
            a->oom = true;
            return NULL;
        }
        a->blocks = grown;
        a->cap = cap;
    }
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        a->oom = true;
        return NULL;
    }
    a->blocks[a->n++] = p;
    return p;
}

static void arena_free(arena *a) {
    for (size_t i = 0; i < a->n; i++)
        free(a->blocks[i]);
    free(a->blocks);
}

static Inference__DataType data_type(osp_datatype dt) {
    /* osp_datatype and DataType share their order, INVALID = 0 first, but
     * differ in where BYTES sits. */
    switch (dt) {
    case OSP_TYPE_BOOL:
        return INFERENCE__DATA_TYPE__TYPE_BOOL;
    case OSP_TYPE_UINT8:
        return INFERENCE__DATA_TYPE__TYPE_UINT8;
    case OSP_TYPE_UINT16:
        return INFERENCE__DATA_TYPE__TYPE_UINT16;
    case OSP_TYPE_UINT32:
        return INFERENCE__DATA_TYPE__TYPE_UINT32;
    case OSP_TYPE_UINT64:
        return INFERENCE__DATA_TYPE__TYPE_UINT64;
    case OSP_TYPE_INT8:
        return INFERENCE__DATA_TYPE__TYPE_INT8;
    case OSP_TYPE_INT16:
        return INFERENCE__DATA_TYPE__TYPE_INT16;
    case OSP_TYPE_INT32:
        return INFERENCE__DATA_TYPE__TYPE_INT32;
    case OSP_TYPE_INT64:
        return INFERENCE__DATA_TYPE__TYPE_INT64;
    case OSP_TYPE_FP16:
        return INFERENCE__DATA_TYPE__TYPE_FP16;
    case OSP_TYPE_FP32:
        return INFERENCE__DATA_TYPE__TYPE_FP32;
    case OSP_TYPE_FP64:
        return INFERENCE__DATA_TYPE__TYPE_FP64;
    case OSP_TYPE_BYTES:
        return INFERENCE__DATA_TYPE__TYPE_STRING;
    case OSP_TYPE_BF16:
        return INFERENCE__DATA_TYPE__TYPE_BF16;
    default:
        return INFERENCE__DATA_TYPE__TYPE_INVALID;
    }
}

static int64_t *dims_of(arena *a, const osp_shape *s, size_t *n) {
    int64_t *d = arena_calloc(a, (size_t)s->rank, sizeof *d);
    *n = d ? (size_t)s->rank : 0;
    for (size_t i = 0; d && i < *n; i++)
        d[i] = s->dims[i];
    return d;
}

static Inference__ModelInput **inputs(arena *a, const osp_model_config *c) {
    Inference__ModelInput **list = arena_calloc(a, c->n_inputs, sizeof *list);
    for (size_t i = 0; list && i < c->n_inputs; i++) {
        Inference__ModelInput *in = arena_calloc(a, 1, sizeof *in);
        if (!in)
            return NULL;
        inference__model_input__init(in);
        in->name = c->inputs[i].name;
        in->data_type = data_type(c->inputs[i].dtype);
        in->dims = dims_of(a, &c->inputs[i].dims, &in->n_dims);
        in->optional = c->inputs[i].optional;
        list[i] = in;
    }
    return list;
}

static Inference__ModelOutput **outputs(arena *a, const osp_model_config *c) {
    Inference__ModelOutput **list = arena_calloc(a, c->n_outputs, sizeof *list);
    for (size_t i = 0; list && i < c->n_outputs; i++) {
        Inference__ModelOutput *out = arena_calloc(a, 1, sizeof *out);
        if (!out)
            return NULL;
        inference__model_output__init(out);
        out->name = c->outputs[i].name;
        out->data_type = data_type(c->outputs[i].dtype);
        out->dims = dims_of(a, &c->outputs[i].dims, &out->n_dims);
        out->label_filename =
            c->outputs[i].label_filename ? c->outputs[i].label_filename : "";
        list[i] = out;
    }
    return list;
}

static Inference__ModelVersionPolicy *
version_policy(arena *a, const osp_version_policy *vp) {
    Inference__ModelVersionPolicy *p = arena_calloc(a, 1, sizeof *p);
    if (!p)
        return NULL;
    inference__model_version_policy__init(p);
    if (vp->kind == OSP_VERSION_POLICY_ALL) {
        Inference__ModelVersionPolicy__All *all =
            arena_calloc(a, 1, sizeof *all);
        if (!all)
            return NULL;
        inference__model_version_policy__all__init(all);
        p->policy_choice_case =
            INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_ALL;
        p->all = all;
    } else if (vp->kind == OSP_VERSION_POLICY_SPECIFIC) {
        Inference__ModelVersionPolicy__Specific *s =
            arena_calloc(a, 1, sizeof *s);
        int64_t *v = arena_calloc(a, vp->n_versions, sizeof *v);
        if (!s || !v)
            return NULL;
        inference__model_version_policy__specific__init(s);
        memcpy(v, vp->versions, vp->n_versions * sizeof *v);
        s->versions = v;
        s->n_versions = vp->n_versions;
        p->policy_choice_case =
            INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC;
        p->specific = s;
    } else {
        Inference__ModelVersionPolicy__Latest *l =
            arena_calloc(a, 1, sizeof *l);
        if (!l)
            return NULL;
        inference__model_version_policy__latest__init(l);
        l->num_versions = vp->latest_num_versions ? vp->latest_num_versions : 1;
        p->policy_choice_case =
            INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST;
        p->latest = l;
    }
    return p;
}

static Inference__ModelInstanceGroup__Kind kind_of(osp_instance_kind k) {
    switch (k) {
    case OSP_INSTANCE_KIND_GPU:
        return INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU;
    case OSP_INSTANCE_KIND_CPU:
        return INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
    case OSP_INSTANCE_KIND_MODEL:
        return INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_MODEL;
    default:
        return INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_AUTO;
    }
}

static Inference__ModelInstanceGroup **
instance_groups(arena *a, const osp_model_config *c) {
    Inference__ModelInstanceGroup **list =
        arena_calloc(a, c->n_instance_groups, sizeof *list);
    for (size_t i = 0; list && i < c->n_instance_groups; i++) {
        const osp_instance_group *g = &c->instance_groups[i];
        Inference__ModelInstanceGroup *pg = arena_calloc(a, 1, sizeof *pg);
        if (!pg)
            return NULL;
        inference__model_instance_group__init(pg);
        if (g->name && g->name[0]) {
            pg->name = g->name;
        } else {
            /* Triton names unnamed groups "<model>_<index>". */
            size_t cap = strlen(c->name) + 24;
            if (!(pg->name = arena_calloc(a, cap, 1)))
                return NULL;
            snprintf(pg->name, cap, "%s_%zu", c->name, i);
        }
        pg->kind = kind_of(g->kind);
        pg->count = g->count > 0 ? g->count : 1;
        pg->n_gpus = g->n_gpus;
        pg->gpus = g->gpus;
        pg->host_policy = "";
        list[i] = pg;
    }
    return list;
}

static Inference__ModelQueuePolicy *queue_policy(arena *a,
                                                 const osp_queue_policy *q) {
    Inference__ModelQueuePolicy *p = arena_calloc(a, 1, sizeof *p);
    if (!p)
        return NULL;
    inference__model_queue_policy__init(p);
    p->timeout_action =
        q->timeout_action == OSP_TIMEOUT_DELAY
            ? INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__DELAY
            : INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__REJECT;
    p->default_timeout_microseconds = q->default_timeout_us;
    p->allow_timeout_override = q->allow_timeout_override;
    p->max_queue_size = q->max_queue_size;
    return p;
}

static Inference__ModelDynamicBatching *
dynamic_batching(arena *a, const osp_dynamic_batching *db) {
    Inference__ModelDynamicBatching *p = arena_calloc(a, 1, sizeof *p);
    Inference__ModelDynamicBatching__PriorityQueuePolicyEntry **entries =
        arena_calloc(a, db->n_priority_queue_policies, sizeof *entries);
    if (!p || !entries)
        return NULL;
    inference__model_dynamic_batching__init(p);
    p->n_preferred_batch_size = db->n_preferred_batch_sizes;
    p->preferred_batch_size = db->preferred_batch_sizes;
    p->max_queue_delay_microseconds = db->max_queue_delay_us;
    p->preserve_ordering = db->preserve_ordering;
    p->priority_levels = db->priority_levels;
    p->default_priority_level = db->default_priority_level;
    p->default_queue_policy = queue_policy(a, &db->default_queue_policy);
    for (size_t i = 0; i < db->n_priority_queue_policies; i++) {
        Inference__ModelDynamicBatching__PriorityQueuePolicyEntry *e =
            arena_calloc(a, 1, sizeof *e);
        if (!e)
            return NULL;
        inference__model_dynamic_batching__priority_queue_policy_entry__init(e);
        e->key = db->priority_queue_policies[i].level;
        e->value = queue_policy(a, &db->priority_queue_policies[i].policy);
        entries[i] = e;
    }
    p->n_priority_queue_policy = db->n_priority_queue_policies;
    p->priority_queue_policy = entries;
    return p;
}

/* A two-element *_false_true list. */
static void *false_true(arena *a, const void *pair, size_t elem) {
    void *p = arena_calloc(a, 2, elem);
    if (p)
        memcpy(p, pair, 2 * elem);
    return p;
}

static Inference__ModelSequenceBatching__Control *
sequence_control(arena *a, const osp_sequence_control *c) {
    static const Inference__ModelSequenceBatching__Control__Kind kinds[] = {
        [OSP_SEQUENCE_CONTROL_START] =
            INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__KIND__CONTROL_SEQUENCE_START,
        [OSP_SEQUENCE_CONTROL_END] =
            INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__KIND__CONTROL_SEQUENCE_END,
        [OSP_SEQUENCE_CONTROL_READY] =
            INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__KIND__CONTROL_SEQUENCE_READY,
        [OSP_SEQUENCE_CONTROL_CORRID] =
            INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__KIND__CONTROL_SEQUENCE_CORRID,
    };
    Inference__ModelSequenceBatching__Control *p =
        arena_calloc(a, 1, sizeof *p);
    if (!p)
        return NULL;
    inference__model_sequence_batching__control__init(p);
    p->kind = kinds[c->kind];
    if (c->kind == OSP_SEQUENCE_CONTROL_CORRID) {
        p->data_type = data_type(c->dtype);
    } else if (c->dtype == OSP_TYPE_INT32) {
        p->n_int32_false_true = 2;
        p->int32_false_true =
            false_true(a, c->int32_false_true, sizeof(int32_t));
    } else if (c->dtype == OSP_TYPE_FP32) {
        p->n_fp32_false_true = 2;
        p->fp32_false_true = false_true(a, c->fp32_false_true, sizeof(float));
    } else {
        protobuf_c_boolean pair[2] = {c->bool_false_true[0],
                                      c->bool_false_true[1]};
        p->n_bool_false_true = 2;
        p->bool_false_true = false_true(a, pair, sizeof pair[0]);
    }
    return p;
}

/* One ControlInput per run of controls of the same name (the parser
 * flattens them in config order). */
static void sequence_controls(arena *a, const osp_sequence_batching *sb,
                              Inference__ModelSequenceBatching *p) {
    p->control_input = arena_calloc(a, sb->n_controls, sizeof(void *));
    for (size_t i = 0; p->control_input && i < sb->n_controls;) {
        Inference__ModelSequenceBatching__ControlInput *ci =
            arena_calloc(a, 1, sizeof *ci);
        if (!ci)
            return;
        inference__model_sequence_batching__control_input__init(ci);
        ci->name = sb->controls[i].name;
        ci->control = arena_calloc(a, sb->n_controls, sizeof(void *));
        while (ci->control && i < sb->n_controls &&
               !strcmp(sb->controls[i].name, ci->name))
            ci->control[ci->n_control++] =
                sequence_control(a, &sb->controls[i++]);
        p->control_input[p->n_control_input++] = ci;
        if (!ci->control)
            return;
    }
}

static Inference__ModelSequenceBatching__State *
sequence_state(arena *a, const osp_sequence_state *s) {
    Inference__ModelSequenceBatching__State *p = arena_calloc(a, 1, sizeof *p);
    if (!p)
        return NULL;
    inference__model_sequence_batching__state__init(p);
    p->input_name = s->input_name;
    p->output_name = s->output_name;
    p->data_type = data_type(s->dtype);
    p->dims = dims_of(a, &s->dims, &p->n_dims);
    if (!s->initial_name && !s->initial_data_file)
        return p;
    Inference__ModelSequenceBatching__InitialState *init =
        arena_calloc(a, 1, sizeof *init);
    p->initial_state = arena_calloc(a, 1, sizeof(void *));
    if (!init || !p->initial_state)
        return NULL;
    inference__model_sequence_batching__initial_state__init(init);
    init->data_type = p->data_type;
    init->dims = dims_of(a, &s->dims, &init->n_dims);
    init->name = s->initial_name ? s->initial_name : "";
    if (s->initial_data_file) {
        init->state_data_case =
            INFERENCE__MODEL_SEQUENCE_BATCHING__INITIAL_STATE__STATE_DATA_DATA_FILE;
        init->data_file = s->initial_data_file;
    } else {
        init->state_data_case =
            INFERENCE__MODEL_SEQUENCE_BATCHING__INITIAL_STATE__STATE_DATA_ZERO_DATA;
        init->zero_data = true;
    }
    p->initial_state[0] = init;
    p->n_initial_state = 1;
    return p;
}

static Inference__ModelSequenceBatching *
sequence_batching(arena *a, const osp_sequence_batching *sb) {
    Inference__ModelSequenceBatching *p = arena_calloc(a, 1, sizeof *p);
    if (!p)
        return NULL;
    inference__model_sequence_batching__init(p);
    p->max_sequence_idle_microseconds = sb->max_sequence_idle_us;
    if (sb->strategy == OSP_SEQUENCE_OLDEST) {
        Inference__ModelSequenceBatching__StrategyOldest *o =
            arena_calloc(a, 1, sizeof *o);
        if (!o)
            return NULL;
        inference__model_sequence_batching__strategy_oldest__init(o);
        o->max_candidate_sequences = sb->max_candidate_sequences;
        o->n_preferred_batch_size = sb->n_preferred_batch_sizes;
        o->preferred_batch_size = sb->preferred_batch_sizes;
        o->max_queue_delay_microseconds = sb->oldest_max_queue_delay_us;
        o->preserve_ordering = sb->oldest_preserve_ordering;
        p->strategy_choice_case =
            INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_CHOICE_OLDEST;
        p->oldest = o;
    } else if (sb->strategy_given) {
        Inference__ModelSequenceBatching__StrategyDirect *d =
            arena_calloc(a, 1, sizeof *d);
        if (!d)
            return NULL;
        inference__model_sequence_batching__strategy_direct__init(d);
        d->max_queue_delay_microseconds = sb->direct_max_queue_delay_us;
        d->minimum_slot_utilization = sb->direct_minimum_slot_utilization;
        p->strategy_choice_case =
            INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_CHOICE_DIRECT;
        p->direct = d;
    }
    sequence_controls(a, sb, p);
    p->state = arena_calloc(a, sb->n_states, sizeof(void *));
    for (size_t i = 0; p->state && i < sb->n_states; i++)
        p->state[p->n_state++] = sequence_state(a, &sb->states[i]);
    return p;
}

static Inference__ModelWarmup **warmups(arena *a, const osp_model_config *c) {
    Inference__ModelWarmup **list = arena_calloc(a, c->n_warmups, sizeof *list);
    for (size_t w = 0; list && w < c->n_warmups; w++) {
        const osp_model_warmup *mw = &c->warmups[w];
        Inference__ModelWarmup *p = arena_calloc(a, 1, sizeof *p);
        Inference__ModelWarmup__InputsEntry **entries =
            arena_calloc(a, mw->n_inputs, sizeof *entries);
        if (!p || !entries)
            return NULL;
        inference__model_warmup__init(p);
        p->name = mw->name;
        p->batch_size = mw->batch_size;
        p->count = mw->count;
        for (size_t i = 0; i < mw->n_inputs; i++) {
            const osp_warmup_input *in = &mw->inputs[i];
            Inference__ModelWarmup__InputsEntry *e =
                arena_calloc(a, 1, sizeof *e);
            Inference__ModelWarmup__Input *v = arena_calloc(a, 1, sizeof *v);
            if (!e || !v)
                return NULL;
            inference__model_warmup__inputs_entry__init(e);
            inference__model_warmup__input__init(v);
            v->data_type = data_type(in->dtype);
            v->dims = dims_of(a, &in->dims, &v->n_dims);
            if (in->data == OSP_WARMUP_INPUT_DATA_FILE) {
                v->input_data_type_case =
                    INFERENCE__MODEL_WARMUP__INPUT__INPUT_DATA_TYPE_INPUT_DATA_FILE;
                v->input_data_file = in->input_data_file;
            } else if (in->data == OSP_WARMUP_RANDOM_DATA) {
                v->input_data_type_case =
                    INFERENCE__MODEL_WARMUP__INPUT__INPUT_DATA_TYPE_RANDOM_DATA;
                v->random_data = true;
            } else if (in->data == OSP_WARMUP_ZERO_DATA) {
                v->input_data_type_case =
                    INFERENCE__MODEL_WARMUP__INPUT__INPUT_DATA_TYPE_ZERO_DATA;
                v->zero_data = true;
            }
            e->key = in->key;
            e->value = v;
            entries[i] = e;
        }
        p->n_inputs = mw->n_inputs;
        p->inputs = entries;
        list[w] = p;
    }
    return list;
}

static Inference__ModelConfig__ParametersEntry **
parameters(arena *a, const osp_model_config *c) {
    Inference__ModelConfig__ParametersEntry **list =
        arena_calloc(a, c->n_parameters, sizeof *list);
    for (size_t i = 0; list && i < c->n_parameters; i++) {
        Inference__ModelConfig__ParametersEntry *e =
            arena_calloc(a, 1, sizeof *e);
        Inference__ModelParameter *v = arena_calloc(a, 1, sizeof *v);
        if (!e || !v)
            return NULL;
        inference__model_config__parameters_entry__init(e);
        inference__model_parameter__init(v);
        v->string_value = c->parameters[i].value ? c->parameters[i].value : "";
        e->key = c->parameters[i].key;
        e->value = v;
        list[i] = e;
    }
    return list;
}

typedef Inference__ModelOptimizationPolicy__ExecutionAccelerators__Accelerator
    accelerator_msg;
typedef Inference__ModelOptimizationPolicy__ExecutionAccelerators__Accelerator__ParametersEntry
    accelerator_param_msg;

static accelerator_msg **
accelerators(arena *a, const osp_execution_accelerator *accs, size_t n) {
    accelerator_msg **list = arena_calloc(a, n, sizeof *list);
    for (size_t i = 0; list && i < n; i++) {
        accelerator_msg *p = arena_calloc(a, 1, sizeof *p);
        accelerator_param_msg **params =
            arena_calloc(a, accs[i].n_parameters, sizeof *params);
        if (!p || !params)
            return NULL;
        inference__model_optimization_policy__execution_accelerators__accelerator__init(
            p);
        p->name = accs[i].name;
        for (size_t k = 0; k < accs[i].n_parameters; k++) {
            accelerator_param_msg *e = arena_calloc(a, 1, sizeof *e);
            if (!e)
                return NULL;
            inference__model_optimization_policy__execution_accelerators__accelerator__parameters_entry__init(
                e);
            e->key = accs[i].parameters[k].key;
            e->value = accs[i].parameters[k].value;
            params[k] = e;
        }
        p->n_parameters = accs[i].n_parameters;
        p->parameters = params;
        list[i] = p;
    }
    return list;
}

/* What model_config_json.c writes: always a message, pinned memory
 * buffers always set. */
static Inference__ModelOptimizationPolicy *
optimization(arena *a, const osp_model_optimization *o) {
    Inference__ModelOptimizationPolicy *p = arena_calloc(a, 1, sizeof *p);
    Inference__ModelOptimizationPolicy__PinnedMemoryBuffer *in =
        arena_calloc(a, 1, sizeof *in);
    Inference__ModelOptimizationPolicy__PinnedMemoryBuffer *out =
        arena_calloc(a, 1, sizeof *out);
    if (!p || !in || !out)
        return NULL;
    inference__model_optimization_policy__init(p);
    if (o->has_graph) {
        Inference__ModelOptimizationPolicy__Graph *g =
            arena_calloc(a, 1, sizeof *g);
        if (!g)
            return NULL;
        inference__model_optimization_policy__graph__init(g);
        g->level = o->graph_level;
        p->graph = g;
    }
    p->priority =
        (Inference__ModelOptimizationPolicy__ModelPriority)o->priority;
    if (o->has_execution_accelerators) {
        Inference__ModelOptimizationPolicy__ExecutionAccelerators *ea =
            arena_calloc(a, 1, sizeof *ea);
        if (!ea)
            return NULL;
        inference__model_optimization_policy__execution_accelerators__init(ea);
        ea->n_gpu_execution_accelerator = o->n_gpu_accelerators;
        ea->gpu_execution_accelerator =
            accelerators(a, o->gpu_accelerators, o->n_gpu_accelerators);
        ea->n_cpu_execution_accelerator = o->n_cpu_accelerators;
        ea->cpu_execution_accelerator =
            accelerators(a, o->cpu_accelerators, o->n_cpu_accelerators);
        p->execution_accelerators = ea;
    }
    inference__model_optimization_policy__pinned_memory_buffer__init(in);
    inference__model_optimization_policy__pinned_memory_buffer__init(out);
    in->enable = o->input_pinned_memory;
    out->enable = o->output_pinned_memory;
    p->input_pinned_memory = in;
    p->output_pinned_memory = out;
    p->gather_kernel_buffer_threshold = o->gather_kernel_buffer_threshold;
    p->eager_batching = o->eager_batching;
    return p;
}

typedef Inference__ModelEnsembling__Step step_msg;
typedef Inference__ModelEnsembling__Step__InputMapEntry input_map_msg;
typedef Inference__ModelEnsembling__Step__OutputMapEntry output_map_msg;

/* A step's input_map and output_map entries (two message types of one
 * layout, hence the macro). */
#define STEP_MAP_ENTRIES(a, map, n, type, init_fn, out)                        \
    do {                                                                       \
        (out) = arena_calloc((a), (n), sizeof *(out));                         \
        for (size_t k = 0; (out) && k < (n); k++) {                            \
            type *e = arena_calloc((a), 1, sizeof *e);                         \
            if (!e) {                                                          \
                (out) = NULL;                                                  \
                break;                                                         \
            }                                                                  \
            init_fn(e);                                                        \
            e->key = (map)[k].key;                                             \
            e->value = (map)[k].value;                                         \
            (out)[k] = e;                                                      \
        }                                                                      \
    } while (0)

static Inference__ModelEnsembling *
ensemble_scheduling(arena *a, const osp_ensemble_scheduling *es) {
    Inference__ModelEnsembling *msg = arena_calloc(a, 1, sizeof *msg);
    step_msg **steps = arena_calloc(a, es->n_steps, sizeof *steps);
    if (!msg || !steps)
        return NULL;
    inference__model_ensembling__init(msg);
    for (size_t i = 0; i < es->n_steps; i++) {
        const osp_ensemble_step *st = &es->steps[i];
        step_msg *s = arena_calloc(a, 1, sizeof *s);
        if (!s)
            return NULL;
        inference__model_ensembling__step__init(s);
        s->model_name = st->model_name;
        s->model_version = st->model_version;
        s->n_input_map = st->n_input_map;
        STEP_MAP_ENTRIES(
            a, st->input_map, st->n_input_map, input_map_msg,
            inference__model_ensembling__step__input_map_entry__init,
            s->input_map);
        s->n_output_map = st->n_output_map;
        STEP_MAP_ENTRIES(
            a, st->output_map, st->n_output_map, output_map_msg,
            inference__model_ensembling__step__output_map_entry__init,
            s->output_map);
        steps[i] = s;
    }
    msg->n_step = es->n_steps;
    msg->step = steps;
    return msg;
}

uint8_t *kgrpc_pack_model_config_response(const osp_model_config *c,
                                          size_t *len) {
    arena a = {0};
    uint8_t *packed = NULL;
    Inference__ModelConfig mc = INFERENCE__MODEL_CONFIG__INIT;
    Inference__ModelTransactionPolicy tp =
        INFERENCE__MODEL_TRANSACTION_POLICY__INIT;
    Inference__ModelConfigResponse resp =
        INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
    mc.name = c->name;
    mc.platform = c->platform;
    mc.backend = c->backend;
    mc.version_policy = version_policy(&a, &c->version_policy);
    mc.max_batch_size = c->max_batch_size;
    mc.n_input = c->n_inputs;
    mc.input = inputs(&a, c);
    mc.n_output = c->n_outputs;
    mc.output = outputs(&a, c);
    if (c->dynamic_batching.enabled) {
        mc.scheduling_choice_case =
            INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING;
        mc.dynamic_batching = dynamic_batching(&a, &c->dynamic_batching);
    }
    if (c->ensemble_scheduling.enabled) {
        mc.scheduling_choice_case =
            INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_ENSEMBLE_SCHEDULING;
        mc.ensemble_scheduling =
            ensemble_scheduling(&a, &c->ensemble_scheduling);
    }
    Inference__ModelResponseCache cache = INFERENCE__MODEL_RESPONSE_CACHE__INIT;
    if (c->response_cache) {
        cache.enable = true;
        mc.response_cache = &cache;
    }
    if (c->sequence_batching.enabled) {
        mc.scheduling_choice_case =
            INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_SEQUENCE_BATCHING;
        mc.sequence_batching = sequence_batching(&a, &c->sequence_batching);
    }
    if (!c->ensemble_scheduling.enabled) /* Triton sets none for one */
        mc.optimization = optimization(&a, &c->optimization);
    mc.n_instance_group = c->n_instance_groups;
    mc.instance_group = instance_groups(&a, c);
    mc.default_model_filename = c->default_model_filename;
    mc.n_parameters = c->n_parameters;
    mc.parameters = parameters(&a, c);
    mc.n_model_warmup = c->n_warmups;
    mc.model_warmup = warmups(&a, c);
    tp.decoupled = c->decoupled;
    mc.model_transaction_policy = &tp;
    resp.config = &mc;
    if (!a.oom) {
        *len = inference__model_config_response__get_packed_size(&resp);
        if ((packed = malloc(*len ? *len : 1)))
            inference__model_config_response__pack(&resp, packed);
    }
    arena_free(&a);
    return packed;
}
