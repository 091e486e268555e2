/*
 * The model configuration as protobuf JSON (GET .../config), the way Triton
 * prints a ModelConfig (proto field names, declaration order, every
 * primitive and repeated field printed with its default, enums as strings,
 * 64-bit integers as JSON numbers). Message fields that Osprey does not model
 * (reshape, optimization.cuda, ...) are left out, as
 * protobuf leaves out unset messages. `optimization` is always there: Triton
 * normalises every config to have one, with pinned memory enabled.
 */
#include "model_config_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

static void key(bytebuf *b, bool *first, const char *name) {
    if (!*first)
        bytebuf_putc(b, ',');
    *first = false;
    json_write_cstr(b, name);
    bytebuf_putc(b, ':');
}

static void str_field(bytebuf *b, bool *first, const char *name,
                      const char *v) {
    key(b, first, name);
    json_write_cstr(b, v ? v : "");
}

static void bool_field(bytebuf *b, bool *first, const char *name, bool v) {
    key(b, first, name);
    json_write_bool(b, v);
}

static void int_field(bytebuf *b, bool *first, const char *name, int64_t v) {
    key(b, first, name);
    json_write_int(b, v);
}

static void dims_field(bytebuf *b, bool *first, const char *name,
                       const osp_shape *dims) {
    key(b, first, name);
    bytebuf_putc(b, '[');
    for (int i = 0; i < dims->rank; i++) {
        if (i)
            bytebuf_putc(b, ',');
        json_write_int(b, dims->dims[i]);
    }
    bytebuf_putc(b, ']');
}

static void write_input(bytebuf *b, const osp_model_io *io) {
    bool first = true;
    bytebuf_putc(b, '{');
    str_field(b, &first, "name", io->name);
    str_field(b, &first, "data_type", osp_datatype_config_name(io->dtype));
    str_field(b, &first, "format", "FORMAT_NONE");
    dims_field(b, &first, "dims", &io->dims);
    bool_field(b, &first, "is_shape_tensor", false);
    bool_field(b, &first, "allow_ragged_batch", false);
    bool_field(b, &first, "optional", io->optional);
    bool_field(b, &first, "is_non_linear_format_io", false);
    bytebuf_putc(b, '}');
}

static void write_output(bytebuf *b, const osp_model_io *io) {
    bool first = true;
    bytebuf_putc(b, '{');
    str_field(b, &first, "name", io->name);
    str_field(b, &first, "data_type", osp_datatype_config_name(io->dtype));
    dims_field(b, &first, "dims", &io->dims);
    str_field(b, &first, "label_filename", io->label_filename);
    bool_field(b, &first, "is_shape_tensor", false);
    bool_field(b, &first, "is_non_linear_format_io", false);
    bytebuf_putc(b, '}');
}

static void write_version_policy(bytebuf *b, const osp_version_policy *vp) {
    switch (vp->kind) {
    case OSP_VERSION_POLICY_ALL:
        bytebuf_puts(b, "{\"all\":{}}");
        break;
    case OSP_VERSION_POLICY_SPECIFIC:
        bytebuf_puts(b, "{\"specific\":{\"versions\":[");
        for (size_t i = 0; i < vp->n_versions; i++) {
            if (i)
                bytebuf_putc(b, ',');
            json_write_int(b, vp->versions[i]);
        }
        bytebuf_puts(b, "]}}");
        break;
    default:
        bytebuf_printf(b, "{\"latest\":{\"num_versions\":%u}}",
                       vp->latest_num_versions ? vp->latest_num_versions : 1u);
        break;
    }
}

static void write_instance_group(bytebuf *b, const char *model,
                                 const osp_instance_group *g, size_t index) {
    bool first = true;
    bytebuf_putc(b, '{');
    if (g->name && g->name[0]) {
        str_field(b, &first, "name", g->name);
    } else {
        /* Triton names unnamed groups "<model>_<index>". */
        char name[512];
        snprintf(name, sizeof name, "%s_%zu", model, index);
        str_field(b, &first, "name", name);
    }
    str_field(b, &first, "kind", osp_instance_kind_name(g->kind));
    int_field(b, &first, "count", g->count > 0 ? g->count : 1);
    key(b, &first, "gpus");
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < g->n_gpus; i++) {
        if (i)
            bytebuf_putc(b, ',');
        json_write_int(b, g->gpus[i]);
    }
    bytebuf_putc(b, ']');
    key(b, &first, "secondary_devices");
    bytebuf_puts(b, "[]");
    key(b, &first, "profile");
    bytebuf_puts(b, "[]");
    bool_field(b, &first, "passive", false);
    str_field(b, &first, "host_policy", "");
    bytebuf_putc(b, '}');
}

static void write_queue_policy(bytebuf *b, const osp_queue_policy *q) {
    bool first = true;
    bytebuf_putc(b, '{');
    str_field(b, &first, "timeout_action",
              q->timeout_action == OSP_TIMEOUT_DELAY ? "DELAY" : "REJECT");
    int_field(b, &first, "default_timeout_microseconds",
              (int64_t)q->default_timeout_us);
    bool_field(b, &first, "allow_timeout_override", q->allow_timeout_override);
    int_field(b, &first, "max_queue_size", q->max_queue_size);
    bytebuf_putc(b, '}');
}

static void write_dynamic_batching(bytebuf *b, const osp_dynamic_batching *db) {
    bool first = true;
    bytebuf_putc(b, '{');
    key(b, &first, "preferred_batch_size");
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < db->n_preferred_batch_sizes; i++) {
        if (i)
            bytebuf_putc(b, ',');
        json_write_int(b, db->preferred_batch_sizes[i]);
    }
    bytebuf_putc(b, ']');
    int_field(b, &first, "max_queue_delay_microseconds",
              (int64_t)db->max_queue_delay_us);
    bool_field(b, &first, "preserve_ordering", db->preserve_ordering);
    int_field(b, &first, "priority_levels", (int64_t)db->priority_levels);
    int_field(b, &first, "default_priority_level",
              (int64_t)db->default_priority_level);
    key(b, &first, "default_queue_policy");
    write_queue_policy(b, &db->default_queue_policy);
    key(b, &first, "priority_queue_policy");
    bytebuf_putc(b, '{');
    for (size_t i = 0; i < db->n_priority_queue_policies; i++) {
        if (i)
            bytebuf_putc(b, ',');
        bytebuf_printf(
            b, "\"%llu\":",
            (unsigned long long)db->priority_queue_policies[i].level);
        write_queue_policy(b, &db->priority_queue_policies[i].policy);
    }
    bytebuf_putc(b, '}');
    bytebuf_putc(b, '}');
}

static void ints_field(bytebuf *b, bool *first, const char *name,
                       const int32_t *v, size_t n) {
    key(b, first, name);
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            bytebuf_putc(b, ',');
        json_write_int(b, v[i]);
    }
    bytebuf_putc(b, ']');
}

/* One ControlInput per run of controls of the same name (the parser
 * flattens them in config order). */
static void write_control_inputs(bytebuf *b, const osp_sequence_batching *sb) {
    static const char *const kinds[] = {
        "CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END",
        "CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_CORRID"};
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < sb->n_controls;) {
        const char *name = sb->controls[i].name;
        if (i)
            bytebuf_putc(b, ',');
        bytebuf_puts(b, "{\"name\":");
        json_write_cstr(b, name);
        bytebuf_puts(b, ",\"control\":[");
        for (size_t k = i;
             i < sb->n_controls && strcmp(sb->controls[i].name, name) == 0;
             i++) {
            const osp_sequence_control *c = &sb->controls[i];
            bool first = true, is_i = c->dtype == OSP_TYPE_INT32,
                 is_f = c->dtype == OSP_TYPE_FP32,
                 is_b = c->dtype == OSP_TYPE_BOOL,
                 corrid = c->kind == OSP_SEQUENCE_CONTROL_CORRID;
            if (i > k)
                bytebuf_putc(b, ',');
            bytebuf_putc(b, '{');
            str_field(b, &first, "kind", kinds[c->kind]);
            ints_field(b, &first, "int32_false_true", c->int32_false_true,
                       is_i && !corrid ? 2 : 0);
            key(b, &first, "fp32_false_true");
            if (is_f && !corrid)
                bytebuf_printf(b, "[%.9g,%.9g]", c->fp32_false_true[0],
                               c->fp32_false_true[1]);
            else
                bytebuf_puts(b, "[]");
            key(b, &first, "bool_false_true");
            if (is_b && !corrid)
                bytebuf_printf(b, "[%s,%s]",
                               c->bool_false_true[0] ? "true" : "false",
                               c->bool_false_true[1] ? "true" : "false");
            else
                bytebuf_puts(b, "[]");
            str_field(b, &first, "data_type",
                      corrid ? osp_datatype_config_name(c->dtype)
                             : "TYPE_INVALID");
            bytebuf_putc(b, '}');
        }
        bytebuf_puts(b, "]}");
    }
    bytebuf_putc(b, ']');
}

static void write_states(bytebuf *b, const osp_sequence_batching *sb) {
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < sb->n_states; i++) {
        const osp_sequence_state *s = &sb->states[i];
        bool first = true;
        if (i)
            bytebuf_putc(b, ',');
        bytebuf_putc(b, '{');
        str_field(b, &first, "input_name", s->input_name);
        str_field(b, &first, "output_name", s->output_name);
        str_field(b, &first, "data_type", osp_datatype_config_name(s->dtype));
        dims_field(b, &first, "dims", &s->dims);
        key(b, &first, "initial_state");
        if (s->initial_name || s->initial_data_file) {
            bool in = true;
            bytebuf_puts(b, "[{");
            str_field(b, &in, "data_type", osp_datatype_config_name(s->dtype));
            dims_field(b, &in, "dims", &s->dims);
            if (s->initial_data_file)
                str_field(b, &in, "data_file", s->initial_data_file);
            else
                bool_field(b, &in, "zero_data", true);
            str_field(b, &in, "name", s->initial_name);
            bytebuf_puts(b, "}]");
        } else {
            bytebuf_puts(b, "[]");
        }
        bool_field(b, &first, "use_same_buffer_for_input_output", false);
        bool_field(b, &first, "use_growable_memory", false);
        bytebuf_putc(b, '}');
    }
    bytebuf_putc(b, ']');
}

static void write_sequence_batching(bytebuf *b,
                                    const osp_sequence_batching *sb) {
    bool first = true;
    bytebuf_putc(b, '{');
    if (sb->strategy == OSP_SEQUENCE_OLDEST) {
        bool in = true;
        key(b, &first, "oldest");
        bytebuf_putc(b, '{');
        int_field(b, &in, "max_candidate_sequences",
                  sb->max_candidate_sequences);
        ints_field(b, &in, "preferred_batch_size", sb->preferred_batch_sizes,
                   sb->n_preferred_batch_sizes);
        int_field(b, &in, "max_queue_delay_microseconds",
                  (int64_t)sb->oldest_max_queue_delay_us);
        bool_field(b, &in, "preserve_ordering", sb->oldest_preserve_ordering);
        bytebuf_putc(b, '}');
    } else if (sb->strategy_given) {
        bool in = true;
        key(b, &first, "direct");
        bytebuf_putc(b, '{');
        int_field(b, &in, "max_queue_delay_microseconds",
                  (int64_t)sb->direct_max_queue_delay_us);
        key(b, &in, "minimum_slot_utilization");
        bytebuf_printf(b, "%.9g", sb->direct_minimum_slot_utilization);
        bytebuf_putc(b, '}');
    }
    int_field(b, &first, "max_sequence_idle_microseconds",
              (int64_t)sb->max_sequence_idle_us);
    key(b, &first, "control_input");
    write_control_inputs(b, sb);
    key(b, &first, "state");
    write_states(b, sb);
    bool_field(b, &first, "iterative_sequence", false);
    bytebuf_putc(b, '}');
}

static void write_warmups(bytebuf *b, const osp_model_config *c) {
    static const char *const sources[] = {[OSP_WARMUP_ZERO_DATA] = "zero_data",
                                          [OSP_WARMUP_RANDOM_DATA] =
                                              "random_data"};
    bytebuf_putc(b, '[');
    for (size_t w = 0; w < c->n_warmups; w++) {
        const osp_model_warmup *mw = &c->warmups[w];
        bool first = true;
        if (w)
            bytebuf_putc(b, ',');
        bytebuf_putc(b, '{');
        str_field(b, &first, "name", mw->name);
        int_field(b, &first, "batch_size", mw->batch_size);
        key(b, &first, "inputs");
        bytebuf_putc(b, '{');
        for (size_t i = 0; i < mw->n_inputs; i++) {
            const osp_warmup_input *in = &mw->inputs[i];
            bool f = true;
            if (i)
                bytebuf_putc(b, ',');
            json_write_cstr(b, in->key);
            bytebuf_puts(b, ":{");
            str_field(b, &f, "data_type", osp_datatype_config_name(in->dtype));
            dims_field(b, &f, "dims", &in->dims);
            if (in->data == OSP_WARMUP_INPUT_DATA_FILE)
                str_field(b, &f, "input_data_file", in->input_data_file);
            else if (in->data != OSP_WARMUP_DATA_UNSET)
                bool_field(b, &f, sources[in->data], true);
            bytebuf_putc(b, '}');
        }
        bytebuf_putc(b, '}');
        int_field(b, &first, "count", mw->count);
        bytebuf_putc(b, '}');
    }
    bytebuf_putc(b, ']');
}

static const char *priority_name(osp_model_priority p) {
    switch (p) {
    case OSP_MODEL_PRIORITY_MAX:
        return "PRIORITY_MAX";
    case OSP_MODEL_PRIORITY_MIN:
        return "PRIORITY_MIN";
    default:
        return "PRIORITY_DEFAULT";
    }
}

static void write_accelerators(bytebuf *b,
                               const osp_execution_accelerator *accs,
                               size_t n) {
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < n; i++) {
        bool first = true;
        bytebuf_puts(b, i ? ",{" : "{");
        str_field(b, &first, "name", accs[i].name);
        key(b, &first, "parameters");
        bytebuf_putc(b, '{');
        for (size_t p = 0; p < accs[i].n_parameters; p++) {
            if (p)
                bytebuf_putc(b, ',');
            json_write_cstr(b, accs[i].parameters[p].key);
            bytebuf_putc(b, ':');
            json_write_cstr(b, accs[i].parameters[p].value);
        }
        bytebuf_puts(b, "}}");
    }
    bytebuf_putc(b, ']');
}

static void write_optimization(bytebuf *b, const osp_model_optimization *o) {
    bool first = true;
    bytebuf_putc(b, '{');
    if (o->has_graph) {
        key(b, &first, "graph");
        bytebuf_printf(b, "{\"level\":%d}", (int)o->graph_level);
    }
    str_field(b, &first, "priority", priority_name(o->priority));
    if (o->has_execution_accelerators) {
        key(b, &first, "execution_accelerators");
        bytebuf_puts(b, "{\"gpu_execution_accelerator\":");
        write_accelerators(b, o->gpu_accelerators, o->n_gpu_accelerators);
        bytebuf_puts(b, ",\"cpu_execution_accelerator\":");
        write_accelerators(b, o->cpu_accelerators, o->n_cpu_accelerators);
        bytebuf_putc(b, '}');
    }
    key(b, &first, "input_pinned_memory");
    bytebuf_printf(b, "{\"enable\":%s}",
                   o->input_pinned_memory ? "true" : "false");
    key(b, &first, "output_pinned_memory");
    bytebuf_printf(b, "{\"enable\":%s}",
                   o->output_pinned_memory ? "true" : "false");
    int_field(b, &first, "gather_kernel_buffer_threshold",
              o->gather_kernel_buffer_threshold);
    bool_field(b, &first, "eager_batching", o->eager_batching);
    bytebuf_putc(b, '}');
}

/* A map<string, string> as a JSON object, config order. */
static void write_string_map(bytebuf *b, const osp_model_parameter *map,
                             size_t n) {
    bytebuf_putc(b, '{');
    for (size_t i = 0; i < n; i++) {
        if (i)
            bytebuf_putc(b, ',');
        json_write_cstr(b, map[i].key);
        bytebuf_putc(b, ':');
        json_write_cstr(b, map[i].value);
    }
    bytebuf_putc(b, '}');
}

static void write_ensemble_scheduling(bytebuf *b,
                                      const osp_ensemble_scheduling *es) {
    bytebuf_puts(b, "{\"step\":[");
    for (size_t i = 0; i < es->n_steps; i++) {
        const osp_ensemble_step *st = &es->steps[i];
        bool first = true;
        bytebuf_puts(b, i ? ",{" : "{");
        str_field(b, &first, "model_name", st->model_name);
        key(b, &first, "model_version");
        bytebuf_printf(b, "%lld", (long long)st->model_version);
        key(b, &first, "input_map");
        write_string_map(b, st->input_map, st->n_input_map);
        key(b, &first, "output_map");
        write_string_map(b, st->output_map, st->n_output_map);
        str_field(b, &first, "model_namespace", "");
        bytebuf_putc(b, '}');
    }
    bytebuf_puts(b, "]}");
}

void model_config_to_json(const osp_model_config *c, bytebuf *b) {
    bool first = true;
    bytebuf_putc(b, '{');
    str_field(b, &first, "name", c->name);
    str_field(b, &first, "platform", c->platform);
    str_field(b, &first, "backend", c->backend);
    str_field(b, &first, "runtime", "");
    key(b, &first, "version_policy");
    write_version_policy(b, &c->version_policy);
    int_field(b, &first, "max_batch_size", c->max_batch_size);
    key(b, &first, "input");
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < c->n_inputs; i++) {
        if (i)
            bytebuf_putc(b, ',');
        write_input(b, &c->inputs[i]);
    }
    bytebuf_putc(b, ']');
    key(b, &first, "output");
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < c->n_outputs; i++) {
        if (i)
            bytebuf_putc(b, ',');
        write_output(b, &c->outputs[i]);
    }
    bytebuf_putc(b, ']');
    key(b, &first, "batch_input");
    bytebuf_puts(b, "[]");
    key(b, &first, "batch_output");
    bytebuf_puts(b, "[]");
    if (!c->ensemble_scheduling.enabled) { /* Triton shows none for one */
        key(b, &first, "optimization");
        write_optimization(b, &c->optimization);
    }
    if (c->dynamic_batching.enabled) {
        key(b, &first, "dynamic_batching");
        write_dynamic_batching(b, &c->dynamic_batching);
    }
    if (c->ensemble_scheduling.enabled) {
        key(b, &first, "ensemble_scheduling");
        write_ensemble_scheduling(b, &c->ensemble_scheduling);
    }
    if (c->sequence_batching.enabled) {
        key(b, &first, "sequence_batching");
        write_sequence_batching(b, &c->sequence_batching);
    }
    key(b, &first, "instance_group");
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < c->n_instance_groups; i++) {
        if (i)
            bytebuf_putc(b, ',');
        write_instance_group(b, c->name, &c->instance_groups[i], i);
    }
    bytebuf_putc(b, ']');
    str_field(b, &first, "default_model_filename", c->default_model_filename);
    key(b, &first, "cc_model_filenames");
    bytebuf_puts(b, "{}");
    key(b, &first, "metric_tags");
    bytebuf_puts(b, "{}");
    key(b, &first, "parameters");
    bytebuf_putc(b, '{');
    for (size_t i = 0; i < c->n_parameters; i++) {
        if (i)
            bytebuf_putc(b, ',');
        json_write_cstr(b, c->parameters[i].key);
        bytebuf_puts(b, ":{\"string_value\":");
        json_write_cstr(b, c->parameters[i].value);
        bytebuf_putc(b, '}');
    }
    bytebuf_putc(b, '}');
    key(b, &first, "model_warmup");
    write_warmups(b, c);
    key(b, &first, "model_transaction_policy");
    bytebuf_printf(b, "{\"decoupled\":%s}", c->decoupled ? "true" : "false");
    if (c->response_cache) {
        key(b, &first, "response_cache");
        bytebuf_puts(b, "{\"enable\":true}");
    }
    bytebuf_putc(b, '}');
}
