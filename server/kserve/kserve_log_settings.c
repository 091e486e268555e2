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

/* ---- gRPC: typed values ---- */

static const kserve_log_setting *find_setting(const kserve_log_setting *s,
                                              size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].key, key) == 0)
            return &s[i];
    return NULL;
}

static osp_error *typed_bool(const kserve_log_setting *settings, size_t n,
                             const char *key, osp_log_level level) {
    const kserve_log_setting *s = find_setting(settings, n, key);
    if (!s)
        return NULL;
    if (s->kind != KSERVE_LOG_VALUE_BOOL)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "expect boolean for '%s'",
                             key);
    osp_log_set_enabled(level, s->b);
    return NULL;
}

osp_error *kserve_log_settings_update_typed(const kserve_log_setting *settings,
                                            size_t n) {
    osp_error *err;
    if (find_setting(settings, n, "log_file"))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "log file location can not be updated through "
                             "network protocol");
    if ((err = typed_bool(settings, n, "log_info", OSP_LOG_INFO)) ||
        (err = typed_bool(settings, n, "log_warning", OSP_LOG_WARNING)) ||
        (err = typed_bool(settings, n, "log_error", OSP_LOG_ERROR)))
        return err;
    const kserve_log_setting *s;
    if ((s = find_setting(settings, n, "log_verbose_level"))) {
        if (s->kind != KSERVE_LOG_VALUE_UINT32)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "expect int32 for 'log_verbose_level'");
        osp_log_set_verbose((int)(int32_t)s->u); /* Triton's int32 cast */
    }
    if ((s = find_setting(settings, n, "log_format"))) {
        if (s->kind != KSERVE_LOG_VALUE_STRING)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "expect string for 'log_format'");
        if (strcmp(s->s, "ISO8601") == 0)
            osp_log_set_format(OSP_LOG_FORMAT_ISO8601);
        else if (strcmp(s->s, "default") == 0)
            osp_log_set_format(OSP_LOG_FORMAT_DEFAULT);
        else
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "invalid argument for log_format, got: %s",
                                 s->s);
    }
    return NULL;
}
