/*
 * Triton's logging-setting update rules (the logging extension), without
 * a transport: log_file refused, then log_info, log_warning, log_error,
 * log_verbose_level, log_format, with Triton's messages. The HTTP surface
 * (server/http/kserve_logging.c) parses the POST body and calls this; a
 * gRPC surface can build the same JSON object from its settings map.
 */
#pragma once

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct json_object;

/* Applies the settings in `root` (borrowed; a parsed JSON object) to the
 * process-wide log settings (osprey/log.h) in Triton's order. Absent and
 * null members change nothing. An error stops there, with the earlier
 * settings applied, as in Triton. */
osp_error *kserve_log_settings_update(struct json_object *root);

#ifdef __cplusplus
}
#endif
