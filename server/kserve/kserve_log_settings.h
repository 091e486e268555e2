/*
 * Triton's logging-setting update rules (the logging extension), without
 * a transport: log_file refused, then log_info, log_warning, log_error,
 * log_verbose_level, log_format, with Triton's messages. The HTTP surface
 * (server/http/kserve_logging.c) parses the POST body and calls the JSON
 * reader; the gRPC surface (server/grpc) hands its typed settings map to
 * the typed one, which has Triton's gRPC messages.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* One entry of a gRPC LogSettingsRequest's map: a key and the value it
 * carries (a oneof: which member is set, or none). Strings borrowed. */
typedef enum kserve_log_value_kind {
    KSERVE_LOG_VALUE_NONE = 0,
    KSERVE_LOG_VALUE_BOOL,
    KSERVE_LOG_VALUE_UINT32,
    KSERVE_LOG_VALUE_STRING,
} kserve_log_value_kind;

typedef struct kserve_log_setting {
    const char *key;
    kserve_log_value_kind kind;
    bool b;
    uint32_t u;
    const char *s;
} kserve_log_setting;

/* Applies gRPC log settings in Triton's order (its GRPC LogSettings
 * handler): log_file present at all is UNSUPPORTED; log_info, log_warning
 * and log_error must be bool ("expect boolean for '<k>'"),
 * log_verbose_level uint32 ("expect int32 for '<k>'"), log_format a string
 * ("expect string for '<k>'", then INVALID_ARG "invalid argument for
 * log_format, got: <s>"). An error stops there, earlier ones applied. */
osp_error *kserve_log_settings_update_typed(const kserve_log_setting *settings,
                                            size_t n);

#ifdef __cplusplus
}
#endif
