/* Triton's initialize() args and model_config JSON for a python model
 * (python_args.h). */
#include "python_args.h"

/* "input" or "output" list entries: name, data_type, dims, optional. */
static void io_list_json(pyproto_text *t, const char *key,
                         const osp_model_io *ios, size_t n, bool inputs) {
    pyproto_text_printf(t, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        const osp_model_io *io = &ios[i];
        pyproto_text_printf(t, "%s{\"name\":", i ? "," : "");
        pyproto_text_json_string(t, io->name);
        pyproto_text_printf(t, ",\"data_type\":\"%s\",\"dims\":[",
                            osp_datatype_config_name(io->dtype));
        for (int d = 0; d < io->dims.rank; d++)
            pyproto_text_printf(t, "%s%lld", d ? "," : "",
                                (long long)io->dims.dims[d]);
        pyproto_text_printf(t, "]");
        if (inputs)
            pyproto_text_printf(t, ",\"optional\":%s",
                                io->optional ? "true" : "false");
        pyproto_text_printf(t, "}");
    }
    pyproto_text_printf(t, "]");
}

/* "sequence_batching": its control inputs (one entry per control, with
 * kind and data_type) and states (input_name, output_name, data_type,
 * dims): what a model's initialize may read, and how the stub learns
 * which response tensors are next states. */
static void sequence_json(pyproto_text *t, const osp_sequence_batching *sb) {
    static const char *const kinds[] = {
        [OSP_SEQUENCE_CONTROL_START] = "CONTROL_SEQUENCE_START",
        [OSP_SEQUENCE_CONTROL_END] = "CONTROL_SEQUENCE_END",
        [OSP_SEQUENCE_CONTROL_READY] = "CONTROL_SEQUENCE_READY",
        [OSP_SEQUENCE_CONTROL_CORRID] = "CONTROL_SEQUENCE_CORRID",
    };
    pyproto_text_printf(t, ",\"sequence_batching\":{\"control_input\":[");
    for (size_t i = 0; i < sb->n_controls; i++) {
        const osp_sequence_control *c = &sb->controls[i];
        pyproto_text_printf(t, "%s{\"name\":", i ? "," : "");
        pyproto_text_json_string(t, c->name);
        pyproto_text_printf(t,
                            ",\"control\":[{\"kind\":\"%s\","
                            "\"data_type\":\"%s\"}]}",
                            kinds[c->kind], osp_datatype_config_name(c->dtype));
    }
    pyproto_text_printf(t, "],\"state\":[");
    for (size_t i = 0; i < sb->n_states; i++) {
        const osp_sequence_state *st = &sb->states[i];
        pyproto_text_printf(t, "%s{\"input_name\":", i ? "," : "");
        pyproto_text_json_string(t, st->input_name);
        pyproto_text_printf(t, ",\"output_name\":");
        pyproto_text_json_string(t, st->output_name);
        pyproto_text_printf(t, ",\"data_type\":\"%s\",\"dims\":[",
                            osp_datatype_config_name(st->dtype));
        for (int d = 0; d < st->dims.rank; d++)
            pyproto_text_printf(t, "%s%lld", d ? "," : "",
                                (long long)st->dims.dims[d]);
        pyproto_text_printf(t, "]}");
    }
    pyproto_text_printf(t, "]}");
}

void pyargs_config_json(pyproto_text *t, const osp_model_config *c) {
    pyproto_text_printf(t, "{\"name\":");
    pyproto_text_json_string(t, c->name);
    pyproto_text_printf(t, ",\"platform\":");
    pyproto_text_json_string(t, c->platform);
    pyproto_text_printf(t, ",\"backend\":\"python\",\"max_batch_size\":%d",
                        c->max_batch_size);
    io_list_json(t, "input", c->inputs, c->n_inputs, true);
    io_list_json(t, "output", c->outputs, c->n_outputs, false);
    pyproto_text_printf(t, ",\"instance_group\":[");
    for (size_t i = 0; i < c->n_instance_groups; i++) {
        const osp_instance_group *g = &c->instance_groups[i];
        pyproto_text_printf(t, "%s{\"name\":", i ? "," : "");
        pyproto_text_json_string(t, g->name ? g->name : "");
        pyproto_text_printf(t, ",\"kind\":\"%s\",\"count\":%d}",
                            osp_instance_kind_name(g->kind),
                            g->count ? g->count : 1);
    }
    pyproto_text_printf(t, "],\"parameters\":{");
    for (size_t i = 0; i < c->n_parameters; i++) {
        pyproto_text_printf(t, "%s", i ? "," : "");
        pyproto_text_json_string(t, c->parameters[i].key);
        pyproto_text_printf(t, ":{\"string_value\":");
        pyproto_text_json_string(t, c->parameters[i].value);
        pyproto_text_printf(t, "}");
    }
    pyproto_text_printf(t, "}");
    if (c->dynamic_batching.enabled)
        pyproto_text_printf(
            t,
            ",\"dynamic_batching\":{"
            "\"max_queue_delay_microseconds\":%llu}",
            (unsigned long long)c->dynamic_batching.max_queue_delay_us);
    if (c->sequence_batching.enabled)
        sequence_json(t, &c->sequence_batching);
    pyproto_text_printf(t, ",\"model_transaction_policy\":{\"decoupled\":%s}}",
                        c->decoupled ? "true" : "false");
}

/* One "key": "value" member of the args dict (every value is a string). */
static void arg(pyproto_text *t, const char *key, const char *value,
                bool first) {
    pyproto_text_printf(t, "%s\"%s\":", first ? "" : ",", key);
    pyproto_text_json_string(t, value);
}

void pyargs_init_payload(pyproto_text *t, const char *model_name,
                         const pyargs_instance *in) {
    char device_id[16];
    snprintf(device_id, sizeof device_id, "%d", in->device_id);
    pyproto_text_printf(t, "{\"model_file\":");
    pyproto_text_json_string(t, in->model_file);
    pyproto_text_printf(t,
                        ",\"growth\":%zu,\"region_max\":%zu,"
                        "\"frame_max\":%zu,\"doorbell\":%s,"
                        "\"memory_limit\":%llu,\"args\":{",
                        in->shm_growth, in->shm_limit, in->frame_max,
                        in->doorbell ? "true" : "false",
                        (unsigned long long)in->memory_limit);
    arg(t, "model_config", in->config_json, true);
    arg(t, "model_instance_kind", in->kind, false);
    arg(t, "model_instance_name", in->instance_name, false);
    arg(t, "model_instance_device_id", device_id, false);
    arg(t, "model_repository", in->model_repository, false);
    arg(t, "model_version", in->model_version, false);
    arg(t, "model_name", model_name, false);
    pyproto_text_printf(t, "}}");
}
