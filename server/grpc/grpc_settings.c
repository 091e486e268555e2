/*
 * TraceSetting and LogSettings: Triton's trace and logging extensions over
 * gRPC. The update rules live in server/kserve (kserve_trace_settings.c,
 * kserve_log_settings.c), shared with HTTP; this file maps the settings
 * maps in and out. An empty settings map only reads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_internal.h"
#include "grpc_service.pb-c.h"
#include "kserve_log_settings.h"
#include "kserve_trace_settings.h"
#include "osprey/log.h"
#include "osprey/trace.h"

static bool failed(kgrpc_call *call, osp_error *err) {
    if (!err)
        return false;
    kgrpc_call_reply_error(call, err);
    osp_error_free(err);
    return true;
}

/* ---- trace ---- */

/* Applies the request's settings map to the tracer. */
static osp_error *trace_update(osp_tracer *tracer,
                               const Inference__TraceSettingRequest *req,
                               const char *model) {
    kserve_trace_setting_list *lists = calloc(req->n_settings, sizeof *lists);
    if (!lists)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < req->n_settings; i++) {
        const Inference__TraceSettingRequest__SettingsEntry *e =
            req->settings[i];
        lists[i].key = e->key ? e->key : "";
        lists[i].values =
            e->value ? (const char *const *)e->value->value : NULL;
        lists[i].n_values = e->value ? e->value->n_value : 0;
    }
    osp_trace_update u;
    osp_error *err = kserve_trace_update_from_lists(
        lists, req->n_settings, osp_tracer_file_updates_allowed(tracer), &u);
    if (!err)
        err = osp_tracer_update_settings(tracer, model, &u);
    free(lists);
    return err;
}

/* The response map: the 6 keys Triton's triton mode reports. */
static void trace_reply(kgrpc_call *call, osp_tracer *tracer,
                        const char *model) {
    osp_trace_settings s;
    osp_tracer_get_settings(tracer, model, &s);
    char rate[16], count[16], frequency[16];
    snprintf(rate, sizeof rate, "%u", (unsigned)s.rate);
    snprintf(count, sizeof count, "%d", (int)s.count);
    snprintf(frequency, sizeof frequency, "%u", (unsigned)s.log_frequency);
    char *levels[2];
    size_t n_levels = 0;
    if (s.level == OSP_TRACE_LEVEL_OFF)
        levels[n_levels++] = "OFF";
    if (s.level & OSP_TRACE_LEVEL_TIMESTAMPS)
        levels[n_levels++] = "TIMESTAMPS";
    if (s.level & OSP_TRACE_LEVEL_TENSORS)
        levels[n_levels++] = "TENSORS";
    char *rate_v[] = {rate}, *count_v[] = {count}, *freq_v[] = {frequency},
         *file_v[] = {s.file}, *mode_v[] = {(char *)s.mode};
    struct {
        const char *key;
        char **values;
        size_t n;
    } rows[] = {
        {"trace_level", levels, n_levels}, {"trace_rate", rate_v, 1},
        {"trace_count", count_v, 1},       {"log_frequency", freq_v, 1},
        {"trace_file", file_v, 1},         {"trace_mode", mode_v, 1},
    };
    enum { N_ROWS = sizeof rows / sizeof rows[0] };
    Inference__TraceSettingResponse__SettingValue values[N_ROWS];
    Inference__TraceSettingResponse__SettingsEntry entries[N_ROWS];
    Inference__TraceSettingResponse__SettingsEntry *ptrs[N_ROWS];
    for (size_t i = 0; i < N_ROWS; i++) {
        inference__trace_setting_response__setting_value__init(&values[i]);
        values[i].value = rows[i].values;
        values[i].n_value = rows[i].n;
        inference__trace_setting_response__settings_entry__init(&entries[i]);
        entries[i].key = (char *)rows[i].key;
        entries[i].value = &values[i];
        ptrs[i] = &entries[i];
    }
    Inference__TraceSettingResponse resp =
        INFERENCE__TRACE_SETTING_RESPONSE__INIT;
    resp.settings = ptrs;
    resp.n_settings = N_ROWS;
    kgrpc_call_reply(call, &resp.base);
}

void kgrpc_trace_setting(kgrpc_call *call) {
    Inference__TraceSettingRequest *req =
        (Inference__TraceSettingRequest *)kgrpc_call_unpack(
            call, &inference__trace_setting_request__descriptor);
    if (!req)
        return;
    osp_tracer *tracer = call->server->opts.tracer;
    const char *model =
        req->model_name && req->model_name[0] ? req->model_name : NULL;
    osp_error *err = NULL;
    if (!tracer)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "the server does not support trace");
    else if (model)
        err = kserve_trace_check_model(call->server->opts.core, model);
    if (!err && req->n_settings > 0)
        err = trace_update(tracer, req, model);
    if (!failed(call, err))
        trace_reply(call, tracer, model);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* ---- logging ---- */

#define LOG_VALUE(kind)                                                        \
    INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_##kind

static osp_error *log_update(const Inference__LogSettingsRequest *req) {
    kserve_log_setting *settings = calloc(req->n_settings, sizeof *settings);
    if (!settings)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < req->n_settings; i++) {
        const Inference__LogSettingsRequest__SettingsEntry *e =
            req->settings[i];
        kserve_log_setting *s = &settings[i];
        s->key = e->key ? e->key : "";
        if (!e->value)
            continue;
        switch (e->value->parameter_choice_case) {
        case LOG_VALUE(BOOL_PARAM):
            s->kind = KSERVE_LOG_VALUE_BOOL;
            s->b = e->value->bool_param;
            break;
        case LOG_VALUE(UINT32_PARAM):
            s->kind = KSERVE_LOG_VALUE_UINT32;
            s->u = e->value->uint32_param;
            break;
        case LOG_VALUE(STRING_PARAM):
            s->kind = KSERVE_LOG_VALUE_STRING;
            s->s = e->value->string_param;
            break;
        default:
            break;
        }
    }
    osp_error *err =
        kserve_log_settings_update_typed(settings, req->n_settings);
    free(settings);
    return err;
}

#define OUT_VALUE(kind)                                                        \
    INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_##kind

void kgrpc_log_settings(kgrpc_call *call) {
    Inference__LogSettingsRequest *req =
        (Inference__LogSettingsRequest *)kgrpc_call_unpack(
            call, &inference__log_settings_request__descriptor);
    if (!req)
        return;
    osp_error *err = req->n_settings > 0 ? log_update(req) : NULL;
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (failed(call, err))
        return;
    enum { N = 6 };
    static const char *const keys[N] = {"log_file",          "log_info",
                                        "log_warning",       "log_error",
                                        "log_verbose_level", "log_format"};
    Inference__LogSettingsResponse__SettingValue values[N];
    Inference__LogSettingsResponse__SettingsEntry entries[N];
    Inference__LogSettingsResponse__SettingsEntry *ptrs[N];
    for (size_t i = 0; i < N; i++) {
        inference__log_settings_response__setting_value__init(&values[i]);
        inference__log_settings_response__settings_entry__init(&entries[i]);
        entries[i].key = (char *)keys[i];
        entries[i].value = &values[i];
        ptrs[i] = &entries[i];
    }
    values[0].parameter_choice_case = OUT_VALUE(STRING_PARAM);
    values[0].string_param = (char *)osp_log_file();
    values[1].parameter_choice_case = OUT_VALUE(BOOL_PARAM);
    values[1].bool_param = osp_log_enabled(OSP_LOG_INFO);
    values[2].parameter_choice_case = OUT_VALUE(BOOL_PARAM);
    values[2].bool_param = osp_log_enabled(OSP_LOG_WARNING);
    values[3].parameter_choice_case = OUT_VALUE(BOOL_PARAM);
    values[3].bool_param = osp_log_enabled(OSP_LOG_ERROR);
    values[4].parameter_choice_case = OUT_VALUE(UINT32_PARAM);
    values[4].uint32_param = (uint32_t)osp_log_verbose();
    values[5].parameter_choice_case = OUT_VALUE(STRING_PARAM);
    values[5].string_param = osp_log_get_format() == OSP_LOG_FORMAT_ISO8601
                                 ? (char *)"ISO8601"
                                 : (char *)"default";
    Inference__LogSettingsResponse resp =
        INFERENCE__LOG_SETTINGS_RESPONSE__INIT;
    resp.settings = ptrs;
    resp.n_settings = N;
    kgrpc_call_reply(call, &resp.base);
}
