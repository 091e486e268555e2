/*
 * Triton's trace-setting update rules (HTTPAPIServer::HandleTrace), without
 * a transport: which members a settings update may carry, how each value
 * is read (std::stoi for the numbers, Triton's messages and order of
 * checks; §4 of the protocol reference). The HTTP surface
 * (server/http/kserve_trace.c) parses the POST body and calls the JSON
 * reader; the gRPC surface (server/grpc) hands its settings map, whose
 * values are lists of strings, to the list reader.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/error.h"
#include "osprey/server.h"
#include "osprey/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

struct json_object;

/* Reads a settings update from `root` (borrowed; a parsed JSON object) into
 * *u, in Triton's order: trace_file (refused with UNSUPPORTED "trace file
 * location can not be updated through network protocol" unless
 * `file_updates_allowed`, see osp_tracer_file_updates_allowed), trace_level,
 * trace_rate, trace_count, log_frequency. Absent members change nothing,
 * null clears. u->file points into root and lives as long as it. *u is
 * zeroed first; on error it holds what was read before the failure. */
osp_error *kserve_trace_update_from_json(struct json_object *root,
                                         bool file_updates_allowed,
                                         osp_trace_update *u);

/* Reads the update from `root` (borrowed) and applies it to `tracer`
 * (borrowed) for `model` (borrowed; NULL for the global settings). Nothing
 * changes when reading fails; osp_tracer_update_settings's errors otherwise. */
osp_error *kserve_trace_settings_update(osp_tracer *tracer, const char *model,
                                        struct json_object *root);

/* One entry of a gRPC TraceSettingRequest's settings map: the key and its
 * value list (all borrowed). */
typedef struct kserve_trace_setting_list {
    const char *key;
    const char *const *values;
    size_t n_values;
} kserve_trace_setting_list;

/* Reads a gRPC settings update (Triton's GRPC TraceSetting handler) into
 * *u, in the same order as the JSON reader: an empty list clears a
 * setting, more than one value for trace_rate, trace_count or
 * log_frequency is INVALID_ARG "expect only 1 value for '<k>'", and the
 * trace_count floor message reads "Expecting value >= -1, got: <s>".
 * u->file points into `settings`. Unknown keys are ignored. */
osp_error *
kserve_trace_update_from_lists(const kserve_trace_setting_list *settings,
                               size_t n, bool file_updates_allowed,
                               osp_trace_update *u);

/* Triton's ModelIsReady(m, -1) check of the trace settings API: NULL when
 * `model` (borrowed) has a ready version; an unknown model gets
 * INVALID_ARG "Request for unknown model : <m>" (the message Triton's QA
 * test expects); other errors (no available versions, ...) are the
 * core's. */
osp_error *kserve_trace_check_model(osp_server *core, const char *model);

#ifdef __cplusplus
}
#endif
