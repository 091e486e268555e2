/*
 * An ensemble's step graph: Triton's load checks (its messages, from
 * model_config_utils.cc and ensemble_utils.cc) and the plan the ensemble
 * scheduler follows. The graph's nodes are the ensemble tensors; a step's
 * outputs depend on all of its inputs.
 */
#include "ensemble_graph.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_STEP SIZE_MAX

/* The tensors named by an ensemble's steps, in order of first mention,
 * and each step's input_map and output_map entries as tensor indices. */
typedef struct tensor_table {
    const char **names;
    size_t *producer; /* the step whose output_map writes it, or NO_STEP */
    size_t n, cap;
    size_t **step_in, **step_out; /* per step, per map entry */
    size_t n_steps;
} tensor_table;

static void table_free(tensor_table *t) {
    free(t->names);
    free(t->producer);
    for (size_t s = 0; s < t->n_steps; s++) {
        free(t->step_in ? t->step_in[s] : NULL);
        free(t->step_out ? t->step_out[s] : NULL);
    }
    free(t->step_in);
    free(t->step_out);
}

static size_t table_find(const tensor_table *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0)
            return i;
    return SIZE_MAX;
}

/* The index of `name` (borrowed), added when new; SIZE_MAX on OOM or when
 * the table is full (*err says which). */
static size_t table_get(tensor_table *t, const char *name, const char *ens,
                        osp_error **err) {
    size_t i = table_find(t, name);
    if (i != SIZE_MAX)
        return i;
    if (t->n == ENSEMBLE_MAX_TENSORS) {
        *err = osp_error_new(OSP_ERROR_INVALID_ARG,
                             "ensemble '%s' names more than %d tensors", ens,
                             ENSEMBLE_MAX_TENSORS);
        return SIZE_MAX;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        const char **names = realloc(t->names, cap * sizeof(*names));
        if (names)
            t->names = names;
        size_t *producer = realloc(t->producer, cap * sizeof(*producer));
        if (producer)
            t->producer = producer;
        if (!names || !producer) {
            *err = osp_error_out_of_memory();
            return SIZE_MAX;
        }
        t->cap = cap;
    }
    t->names[t->n] = name;
    t->producer[t->n] = NO_STEP;
    return t->n++;
}

/* Triton's BuildEnsembleGraph: every step complete, and no tensor in two
 * output maps. */
static osp_error *build_table(const osp_model_config *cfg, tensor_table *t) {
    const osp_ensemble_scheduling *es = &cfg->ensemble_scheduling;
    osp_error *err = NULL;
    size_t entries = 0;
    for (size_t s = 0; s < es->n_steps; s++)
        entries += es->steps[s].n_input_map + es->steps[s].n_output_map;
    if (entries > ENSEMBLE_MAX_MAP_ENTRIES)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "ensemble '%s' has more than %d input_map and "
                             "output_map entries",
                             cfg->name, ENSEMBLE_MAX_MAP_ENTRIES);
    t->step_in = calloc(es->n_steps + 1, sizeof(*t->step_in));
    t->step_out = calloc(es->n_steps + 1, sizeof(*t->step_out));
    if (!t->step_in || !t->step_out)
        return osp_error_out_of_memory();
    t->n_steps = es->n_steps;
    for (size_t s = 0; s < es->n_steps; s++) {
        const osp_ensemble_step *st = &es->steps[s];
        const char *missing = !st->model_name[0]  ? "model_name"
                              : !st->n_input_map  ? "input_map"
                              : !st->n_output_map ? "output_map"
                                                  : NULL;
        if (missing)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "must specify '%s' in step %zu of ensemble "
                                 "'%s'",
                                 missing, s, cfg->name);
        t->step_in[s] = calloc(st->n_input_map, sizeof(size_t));
        t->step_out[s] = calloc(st->n_output_map, sizeof(size_t));
        if (!t->step_in[s] || !t->step_out[s])
            return osp_error_out_of_memory();
        for (size_t k = 0; k < st->n_output_map; k++) {
            size_t i = table_get(t, st->output_map[k].value, cfg->name, &err);
            if (i == SIZE_MAX)
                return err;
            t->step_out[s][k] = i;
            if (t->producer[i] != NO_STEP)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "ensemble tensor '%s' can appear in an "
                                     "output map only once for ensemble '%s' "
                                     "step %zu",
                                     t->names[i], cfg->name, s);
            t->producer[i] = s;
        }
        for (size_t k = 0; k < st->n_input_map; k++)
            if ((t->step_in[s][k] = table_get(t, st->input_map[k].value,
                                              cfg->name, &err)) == SIZE_MAX)
                return err;
    }
    return NULL;
}

/* Marks ready every tensor that data from the ensemble's inputs (ready[]
 * already) reaches: a step's outputs once all of its inputs are (Triton's
 * ready queue), in time linear in the map entries. readers[t] gets the
 * number of input_map entries that read t. */
static osp_error *mark_ready(const osp_model_config *cfg, const tensor_table *t,
                             bool *ready, size_t *readers) {
    const osp_ensemble_scheduling *es = &cfg->ensemble_scheduling;
    size_t entries = 0;
    for (size_t s = 0; s < es->n_steps; s++)
        entries += es->steps[s].n_input_map;
    /* The steps reading each tensor, one slot per map entry: the slots of
     * tensor i are reader_step[first[i] .. first[i + 1]). */
    size_t *first = calloc(t->n + 1, sizeof(*first));
    size_t *filled = calloc(t->n + 1, sizeof(*filled));
    size_t *reader_step = calloc(entries + 1, sizeof(*reader_step));
    size_t *waiting = calloc(es->n_steps + 1, sizeof(*waiting));
    size_t *queue = calloc(t->n + 1, sizeof(*queue));
    osp_error *err = NULL;
    if (!first || !filled || !reader_step || !waiting || !queue) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t s = 0; s < es->n_steps; s++)
        for (size_t k = 0; k < es->steps[s].n_input_map; k++)
            readers[t->step_in[s][k]]++;
    for (size_t i = 0; i < t->n; i++)
        first[i + 1] = first[i] + readers[i];
    for (size_t s = 0; s < es->n_steps; s++) {
        waiting[s] = es->steps[s].n_input_map;
        for (size_t k = 0; k < es->steps[s].n_input_map; k++) {
            size_t i = t->step_in[s][k];
            reader_step[first[i] + filled[i]++] = s;
        }
    }
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < t->n; i++)
        if (ready[i])
            queue[tail++] = i;
    while (head < tail) {
        size_t i = queue[head++];
        for (size_t r = first[i]; r < first[i + 1]; r++) {
            size_t s = reader_step[r];
            if (--waiting[s] != 0)
                continue;
            for (size_t k = 0; k < es->steps[s].n_output_map; k++) {
                size_t o = t->step_out[s][k];
                if (!ready[o]) {
                    ready[o] = true;
                    queue[tail++] = o;
                }
            }
        }
    }
out:
    free(first);
    free(filled);
    free(reader_step);
    free(waiting);
    free(queue);
    return err;
}

/* Triton's "is not written" message for output `o`, naming the first
 * tensor upstream that nothing writes. */
static osp_error *not_written(const osp_model_config *cfg,
                              const tensor_table *t, const bool *ready,
                              size_t o) {
    bool *seen = calloc(t->n, sizeof(*seen));
    if (!seen)
        return osp_error_out_of_memory();
    size_t last = o, at = o;
    for (;;) {
        size_t step = t->producer[at], next = SIZE_MAX;
        if (step == NO_STEP)
            break;
        const osp_ensemble_step *st = &cfg->ensemble_scheduling.steps[step];
        for (size_t k = 0; k < st->n_input_map && next == SIZE_MAX; k++) {
            size_t i = t->step_in[step][k];
            if (!ready[i] && !seen[i])
                next = i;
        }
        if (next == SIZE_MAX)
            break;
        seen[next] = true;
        last = at = next;
    }
    free(seen);
    if (last == o)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "output '%s' for ensemble '%s' is not written",
                             t->names[o], cfg->name);
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "output '%s' for ensemble '%s' is not written: at "
                         "least one of its depending tensors, '%s', is not "
                         "connected",
                         t->names[o], cfg->name, t->names[last]);
}

/* The data-flow checks on a table that build_table made. */
static osp_error *check_flow(const osp_model_config *cfg,
                             const tensor_table *t) {
    osp_error *err = NULL;
    bool *ready = calloc(t->n + 1, sizeof(*ready));
    bool *is_output = calloc(t->n + 1, sizeof(*is_output));
    size_t *readers = calloc(t->n + 1, sizeof(*readers));
    if (!ready || !is_output || !readers) {
        err = osp_error_out_of_memory();
        goto out;
    }
    /* (sic: Triton's messages for inputs and outputs miss a quote) */
    for (size_t i = 0; i < cfg->n_inputs && !err; i++) {
        size_t k = table_find(t, cfg->inputs[i].name);
        if (k == SIZE_MAX)
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "ensemble input '%s' for ensemble %s' is not "
                                "used",
                                cfg->inputs[i].name, cfg->name);
        else
            ready[k] = true;
    }
    if (err)
        goto out;
    if ((err = mark_ready(cfg, t, ready, readers)))
        goto out;
    for (size_t i = 0; i < cfg->n_outputs && !err; i++) {
        size_t k = table_find(t, cfg->outputs[i].name);
        if (k == SIZE_MAX)
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "ensemble output '%s' for ensemble %s' is not "
                                "used",
                                cfg->outputs[i].name, cfg->name);
        else if (!ready[k])
            err = not_written(cfg, t, ready, k);
        else
            is_output[k] = true;
    }
    for (size_t k = 0; k < t->n && !err; k++) {
        if (is_output[k])
            continue;
        if (!ready[k] || readers[k] == 0)
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "ensemble tensor '%s' is unused in ensemble "
                                "'%s'",
                                t->names[k], cfg->name);
    }
out:
    free(ready);
    free(is_output);
    free(readers);
    return err;
}

osp_error *ensemble_check_config(const osp_model_config *cfg) {
    bool is_ensemble = strcmp(cfg->platform, "ensemble") == 0;
    if (!cfg->ensemble_scheduling.enabled) {
        if (!is_ensemble)
            return NULL;
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "ensemble scheduling must be set for ensemble %s "
                             "whose platform is ensemble",
                             cfg->name);
    }
    if (!is_ensemble)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "ensemble scheduling cannot be set for model '%s' "
                             "whose platform is not ensemble",
                             cfg->name);
    if (cfg->n_instance_groups)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "instance group should not be specified for "
                             "ensemble '%s'",
                             cfg->name);
    if (cfg->optimization.has_graph ||
        cfg->optimization.has_execution_accelerators)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "optimization should not be specified for "
                             "ensemble '%s'",
                             cfg->name);
    if (cfg->ensemble_scheduling.n_steps == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "must specify 'step' for ensemble '%s'",
                             cfg->name);
    tensor_table t = {0};
    osp_error *err = build_table(cfg, &t);
    if (!err)
        err = check_flow(cfg, &t);
    table_free(&t);
    return err;
}

/* ---- checks against the steps' models ---------------------------------- */

/* What one tensor is known to be, and which model said so. */
typedef struct tensor_info {
    bool known;
    osp_datatype dtype;
    const osp_shape *dims; /* borrowed from a config */
    bool batching;         /* full shape = [-1] + dims */
    const char *model;
} tensor_info;

static int64_t full_dim(const tensor_info *x, int d) {
    if (x->batching)
        return d == 0 ? -1 : x->dims->dims[d - 1];
    return x->dims->dims[d];
}

static int full_rank(const tensor_info *x) {
    return x->dims->rank + (x->batching ? 1 : 0);
}

/* Triton's CompareDimsWithWildcard on the dims (full = false) or on the
 * full shapes. */
static bool dims_match(const tensor_info *a, const tensor_info *b, bool full) {
    int ra = full ? full_rank(a) : a->dims->rank;
    int rb = full ? full_rank(b) : b->dims->rank;
    if (ra != rb)
        return false;
    for (int d = 0; d < ra; d++) {
        int64_t x = full ? full_dim(a, d) : a->dims->dims[d];
        int64_t y = full ? full_dim(b, d) : b->dims->dims[d];
        if (x != y && x != -1 && y != -1)
            return false;
    }
    return true;
}

static void format_full(const tensor_info *x, char *buf, size_t cap) {
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < full_rank(x) && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d ? "," : "",
                                 (long long)full_dim(x, d));
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
}

/* Triton's ValidateTensorConsistency for ensemble tensor `name`. */
static osp_error *consistent(const char *ens, const char *name,
                             const tensor_info *a, const tensor_info *b) {
    if (a->dtype != b->dtype)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "in ensemble %s, ensemble tensor %s: inconsistent data type: %s "
            "is inferred from model %s while %s is inferred from model %s",
            ens, name, osp_datatype_config_name(a->dtype), a->model,
            osp_datatype_config_name(b->dtype), b->model);
    if (!dims_match(a, b, false) && !dims_match(a, b, true)) {
        char x[256], y[256];
        format_full(a, x, sizeof x);
        format_full(b, y, sizeof y);
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "in ensemble %s, ensemble tensor %s: inconsistent "
                             "shape: %s is inferred from model %s while %s is "
                             "inferred from model %s",
                             ens, name, x, a->model, y, b->model);
    }
    return NULL;
}

/* Records what `io` of `model` says about tensor `name`, or checks it
 * against what is already known. */
static osp_error *meet(const char *ens, tensor_table *t, tensor_info *info,
                       const char *name, const osp_model_io *io, bool batching,
                       const char *model) {
    osp_error *err = NULL;
    size_t i = table_get(t, name, ens, &err);
    if (i == SIZE_MAX)
        return err;
    tensor_info x = {.known = true,
                     .dtype = io->dtype,
                     .dims = &io->dims,
                     .batching = batching,
                     .model = model};
    if (info[i].known)
        return consistent(ens, name, &info[i], &x);
    info[i] = x;
    return NULL;
}

/* Triton's ValidateTensorMapping for one step. */
static osp_error *check_step(const osp_model_config *cfg,
                             const osp_ensemble_step *st,
                             const osp_model_config *m, tensor_table *t,
                             tensor_info *info) {
    const char *ens = cfg->name, *step = st->model_name;
    bool batching = m->max_batch_size > 0;
    osp_error *err = NULL;
    for (size_t k = 0; k < st->n_input_map; k++)
        if (osp_model_config_input_index(m, st->input_map[k].key) < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "in ensemble %s, ensemble tensor %s is "
                                 "mapping to non-existing input %s in model "
                                 "%s",
                                 ens, st->input_map[k].value,
                                 st->input_map[k].key, step);
    for (size_t i = 0; i < m->n_inputs; i++) {
        size_t mapped = 0;
        for (size_t k = 0; k < st->n_input_map && !err; k++) {
            if (strcmp(st->input_map[k].key, m->inputs[i].name) != 0)
                continue;
            err = meet(ens, t, info, st->input_map[k].value, &m->inputs[i],
                       batching, step);
            mapped++;
        }
        if (err)
            return err;
        if (mapped == 0 && !m->inputs[i].optional)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "in ensemble %s, input %s in model %s is not "
                                 "mapped to any ensemble tensors",
                                 ens, m->inputs[i].name, step);
    }
    for (size_t k = 0; k < st->n_output_map; k++) {
        int o = osp_model_config_output_index(m, st->output_map[k].key);
        if (o < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "in ensemble %s, ensemble tensor %s is "
                                 "mapped from non-existing output %s in model "
                                 "%s",
                                 ens, st->output_map[k].value,
                                 st->output_map[k].key, step);
        if ((err = meet(ens, t, info, st->output_map[k].value, &m->outputs[o],
                        batching, step)))
            return err;
    }
    return NULL;
}

osp_error *ensemble_check_steps(const osp_model_config *cfg,
                                const osp_model_config *const *step_cfgs) {
    osp_error *err = NULL;
    tensor_table t = {0};
    bool batching = cfg->max_batch_size > 0;
    size_t cap = cfg->n_inputs + cfg->n_outputs;
    for (size_t s = 0; s < cfg->ensemble_scheduling.n_steps; s++)
        cap += cfg->ensemble_scheduling.steps[s].n_input_map +
               cfg->ensemble_scheduling.steps[s].n_output_map;
    tensor_info *info = calloc(cap + 1, sizeof(*info));
    if (!info)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < cfg->n_inputs && !err; i++)
        err = meet(cfg->name, &t, info, cfg->inputs[i].name, &cfg->inputs[i],
                   batching, cfg->name);
    for (size_t i = 0; i < cfg->n_outputs && !err; i++)
        err = meet(cfg->name, &t, info, cfg->outputs[i].name, &cfg->outputs[i],
                   batching, cfg->name);
    for (size_t s = 0; s < cfg->ensemble_scheduling.n_steps && !err; s++) {
        const osp_ensemble_step *st = &cfg->ensemble_scheduling.steps[s];
        const osp_model_config *m = step_cfgs[s];
        if (m->max_batch_size != 0 && m->max_batch_size < cfg->max_batch_size)
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "ensemble %s allows maximum batch size %d, but "
                                "it contains model %s which only allows "
                                "maximum batch size to be %d",
                                cfg->name, (int)cfg->max_batch_size,
                                st->model_name, (int)m->max_batch_size);
        else
            err = check_step(cfg, st, m, &t, info);
    }
    free(info);
    table_free(&t);
    ensemble_plan *plan = NULL;
    bool decoupled = false;
    if (!err && !(err = ensemble_plan_new(cfg, &plan)))
        err = ensemble_plan_decoupled(plan, cfg, step_cfgs, &decoupled);
    ensemble_plan_free(plan);
    return err;
}

/* ---- the plan ------------------------------------------------------------ */

void ensemble_plan_free(ensemble_plan *plan) {
    if (!plan)
        return;
    for (size_t s = 0; s < plan->n_steps; s++) {
        free(plan->steps[s].in_tensors);
        free(plan->steps[s].out_tensors);
    }
    free(plan->steps);
    free(plan->tensor_names);
    free(plan->input_tensors);
    free(plan->output_tensors);
    free(plan->readers);
    free(plan->is_output);
    free(plan);
}

osp_error *ensemble_plan_new(const osp_model_config *cfg, ensemble_plan **out) {
    const osp_ensemble_scheduling *es = &cfg->ensemble_scheduling;
    tensor_table t = {0};
    osp_error *err = build_table(cfg, &t);
    ensemble_plan *plan = calloc(1, sizeof(*plan));
    if (!err && !plan)
        err = osp_error_out_of_memory();
    if (err)
        goto out;
    /* The checks found every input and output in the table. */
    plan->steps = calloc(es->n_steps + 1, sizeof(*plan->steps));
    plan->input_tensors = calloc(cfg->n_inputs + 1, sizeof(size_t));
    plan->output_tensors = calloc(cfg->n_outputs + 1, sizeof(size_t));
    plan->readers = calloc(t.n + 1, sizeof(size_t));
    plan->is_output = calloc(t.n + 1, sizeof(bool));
    if (!plan->steps || !plan->input_tensors || !plan->output_tensors ||
        !plan->readers || !plan->is_output) {
        err = osp_error_out_of_memory();
        goto out;
    }
    plan->n_steps = es->n_steps;
    for (size_t s = 0; s < es->n_steps; s++) {
        ensemble_plan_step *ps = &plan->steps[s];
        ps->config = &es->steps[s];
        ps->in_tensors = t.step_in[s]; /* taken from the table */
        ps->out_tensors = t.step_out[s];
        t.step_in[s] = t.step_out[s] = NULL;
        for (size_t k = 0; k < ps->config->n_input_map; k++)
            plan->readers[ps->in_tensors[k]]++;
    }
    for (size_t i = 0; i < cfg->n_inputs; i++)
        plan->input_tensors[i] = table_find(&t, cfg->inputs[i].name);
    for (size_t i = 0; i < cfg->n_outputs; i++) {
        plan->output_tensors[i] = table_find(&t, cfg->outputs[i].name);
        plan->is_output[plan->output_tensors[i]] = true;
    }
    plan->tensor_names = t.names;
    plan->n_tensors = t.n;
    t.names = NULL;
out:
    table_free(&t);
    if (err) {
        ensemble_plan_free(plan);
        return err;
    }
    *out = plan;
    return NULL;
}

/* Triton's decoupled data flow check (the end of its
 * ValidateEnsembleConfig): each
 * decoupled step starts a "label" of the tensors it writes, and a step may
 * not read tensors of two labels (their iterations could never meet). The
 * ensemble is decoupled when any label was started. */
osp_error *ensemble_plan_decoupled(const ensemble_plan *plan,
                                   const osp_model_config *cfg,
                                   const osp_model_config *const *step_cfgs,
                                   bool *decoupled) {
    size_t *label = calloc(plan->n_tensors + 1, sizeof *label);
    bool *known = calloc(plan->n_tensors + 1, sizeof *known);
    bool *done = calloc(plan->n_steps + 1, sizeof *done);
    osp_error *err = NULL;
    size_t labels = 0;
    if (!label || !known || !done) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < cfg->n_inputs; i++)
        known[plan->input_tensors[i]] = true;
    for (bool progress = true; progress && !err;) {
        progress = false;
        for (size_t s = 0; s < plan->n_steps && !err; s++) {
            const ensemble_plan_step *ps = &plan->steps[s];
            bool ready = !done[s];
            for (size_t k = 0; k < ps->config->n_input_map && ready; k++)
                ready = known[ps->in_tensors[k]];
            if (!ready)
                continue;
            size_t in_label =
                ps->config->n_input_map ? label[ps->in_tensors[0]] : 0;
            for (size_t k = 1; k < ps->config->n_input_map; k++)
                if (label[ps->in_tensors[k]] != in_label)
                    err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                        "in ensemble %s, step of model '%s' "
                                        "receives inputs originated from "
                                        "different decoupled models",
                                        cfg->name, ps->config->model_name);
            size_t out_label = step_cfgs[s]->decoupled ? ++labels : in_label;
            for (size_t k = 0; k < ps->config->n_output_map; k++) {
                label[ps->out_tensors[k]] = out_label;
                known[ps->out_tensors[k]] = true;
            }
            done[s] = progress = true;
        }
    }
    *decoupled = labels > 0;
out:
    free(label);
    free(known);
    free(done);
    return err;
}
