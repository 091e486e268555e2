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
    if (!c->ensemble_scheduling.enabled) /* Triton sets none for one */
        mc.optimization = optimization(&a, &c->optimization);
    mc.n_instance_group = c->n_instance_groups;
    mc.instance_group = instance_groups(&a, c);
    mc.default_model_filename = c->default_model_filename;
    mc.n_parameters = c->n_parameters;
    mc.parameters = parameters(&a, c);
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
