/*
 * The logging-setting update rules of Triton's logging extension, shared
 * by every KServe surface (see kserve_log_settings.h).
 */
#include "kserve_log_settings.h"

#include <string.h>

#include "json_util.h"
#include "osprey/log.h"

/* Member `key` (a JSON bool when present and not null) switches `level`. */
static osp_error *apply_bool(struct json_object *root, const char *key,
                             osp_log_level level) {
    struct json_object *v;
    if (!json_find(root, key, &v) || !v)
        return NULL;
    bool on;
    osp_error *err = json_as_bool(v, &on);
    if (!err)
        osp_log_set_enabled(level, on);
    return err;
}

osp_error *kserve_log_settings_update(struct json_object *root) {
    struct json_object *v;
    osp_error *err = NULL;
    if (json_find(root, "log_file", &v) && v)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "log file location can not be updated through "
                             "network protocol");
    if ((err = apply_bool(root, "log_info", OSP_LOG_INFO)) ||
        (err = apply_bool(root, "log_warning", OSP_LOG_WARNING)) ||
        (err = apply_bool(root, "log_error", OSP_LOG_ERROR)))
        return err;
    if (json_find(root, "log_verbose_level", &v) && v) {
        uint64_t level;
        if ((err = json_as_uint(v, &level)))
            return err;
        osp_log_set_verbose((int)level); /* Triton's int32 cast */
    }
    if (json_find(root, "log_format", &v) && v) {
        const char *format;
        if ((err = json_as_string(v, &format, NULL)))
            return err;
        if (strcmp(format, "ISO8601") == 0)
            osp_log_set_format(OSP_LOG_FORMAT_ISO8601);
        else if (strcmp(format, "default") == 0)
            osp_log_set_format(OSP_LOG_FORMAT_DEFAULT);
        else
            err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                                "invalid argument for --log_format, got: %s",
                                format);
    }
    return err;
}
