/*
 * Triton's trace-setting update rules (HTTPAPIServer::HandleTrace), without
 * a transport: which members a settings update may carry, how each value
 * is read (std::stoi for the numbers, Triton's messages and order of
 * checks; §4 of the protocol reference). The HTTP surface
 * (server/http/kserve_trace.c) parses the POST body and calls this; a gRPC
 * surface can build the same JSON object from its settings map.
 */
#pragma once

#include <stdbool.h>

#include "osprey/error.h"
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

#ifdef __cplusplus
}
#endif
