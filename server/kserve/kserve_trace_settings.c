/*
 * The trace-setting update rules of Triton's trace extension, shared by
 * every KServe surface (see kserve_trace_settings.h).
 */
#include "kserve_trace_settings.h"

#include <stdio.h>
#include <string.h>

#include "json_util.h"
#include "kserve_params.h"

/* A setting's text read with std::stoi as Triton reads it; the
 * out-of-range message names `range`. */
static osp_error *stoi_setting(const char *key, const char *text,
                               const char *range, long long *n) {
    int why = kserve_parse_stoi(text, n);
    if (why == 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Unable to parse '%s', got: %s", key, text);
    if (why == 2)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Unable to parse '%s', value is out of range [ "
                             "%s ], got: %s",
                             key, range, text);
    return NULL;
}

/* Member `key` as Triton reads these settings: absent changes nothing,
 * null clears (*change), otherwise a JSON string read with std::stoi, whose
 * out-of-range message names `range`. *n and *text are set, and *got is
 * true, only when a number was read; the caller checks and stores it. */
static osp_error *stoi_member(struct json_object *root, const char *key,
                              const char *range, osp_trace_change *change,
                              bool *got, long long *n, const char **text) {
    struct json_object *v;
    *got = false;
    if (!json_find(root, key, &v))
        return NULL;
    if (!v) {
        *change = OSP_TRACE_CLEAR;
        return NULL;
    }
    osp_error *err = json_as_string(v, text, NULL);
    if (err)
        return err;
    if ((err = stoi_setting(key, *text, range, n)))
        return err;
    *got = true;
    return NULL;
}

/* "trace_rate" and "log_frequency": std::stoi into a uint32 (so "-5"
 * wraps, as in Triton). */
static osp_error *parse_uint32_member(struct json_object *root, const char *key,
                                      osp_trace_change *change, uint32_t *out) {
    bool got;
    long long n;
    const char *s;
    osp_error *err =
        stoi_member(root, key, "0, 4294967295", change, &got, &n, &s);
    if (!err && got) {
        *out = (uint32_t)(int32_t)n;
        *change = OSP_TRACE_SET;
    }
    return err;
}

/* "trace_count": -1 (no limit) or more. */
static osp_error *parse_count_member(struct json_object *root,
                                     osp_trace_update *u) {
    bool got;
    long long n;
    const char *s;
    osp_error *err = stoi_member(root, "trace_count", "-1, 2147483647",
                                 &u->count_change, &got, &n, &s);
    if (err || !got)
        return err;
    if (n < -1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Unable to parse 'trace_count'. Expecting value "
                             ">= -1, got:%s",
                             s);
    u->count = (int32_t)n;
    u->count_change = OSP_TRACE_SET;
    return NULL;
}

/* "trace_level": null clears; otherwise an array of strings where OFF must
 * stand alone, TIMESTAMPS and TENSORS add up and anything else is
 * ignored (so an empty array changes nothing). */
static osp_error *parse_level_member(struct json_object *root,
                                     osp_trace_update *u) {
    struct json_object *v;
    if (!json_find(root, "trace_level", &v))
        return NULL;
    if (!v) {
        u->level_change = OSP_TRACE_CLEAR;
        return NULL;
    }
    osp_error *err = json_as_array(v);
    if (err)
        return err;
    size_t n = json_object_array_length(v);
    unsigned level = OSP_TRACE_LEVEL_OFF;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        if ((err = json_as_string(json_object_array_get_idx(v, i), &s, NULL)))
            return err;
        if (strcmp(s, "OFF") == 0) {
            if (n != 1)
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "Expect only one trace level 'OFF' is "
                                     "specified");
            level = OSP_TRACE_LEVEL_OFF;
            u->level_change = OSP_TRACE_SET;
        } else if (strcmp(s, "TIMESTAMPS") == 0) {
            level |= OSP_TRACE_LEVEL_TIMESTAMPS;
            u->level_change = OSP_TRACE_SET;
        } else if (strcmp(s, "TENSORS") == 0) {
            level |= OSP_TRACE_LEVEL_TENSORS;
            u->level_change = OSP_TRACE_SET;
        }
    }
    u->level = level;
    return NULL;
}

osp_error *kserve_trace_update_from_json(struct json_object *root,
                                         bool file_updates_allowed,
                                         osp_trace_update *u) {
    osp_error *err;
    memset(u, 0, sizeof *u);
    struct json_object *v;
    if (json_find(root, "trace_file", &v)) {
        if (!file_updates_allowed)
            return osp_error_new(OSP_ERROR_UNSUPPORTED,
                                 "trace file location can not be updated "
                                 "through network protocol");
        if (!v) {
            u->file_change = OSP_TRACE_CLEAR;
        } else {
            if ((err = json_as_string(v, &u->file, &u->file_len)))
                return err;
            u->file_change = OSP_TRACE_SET;
        }
    }
    if ((err = parse_level_member(root, u)))
        return err;
    if ((err = parse_uint32_member(root, "trace_rate", &u->rate_change,
                                   &u->rate)))
        return err;
    if ((err = parse_count_member(root, u)))
        return err;
    return parse_uint32_member(root, "log_frequency", &u->log_frequency_change,
                               &u->log_frequency);
}

osp_error *kserve_trace_settings_update(osp_tracer *tracer, const char *model,
                                        struct json_object *root) {
    osp_trace_update u;
    osp_error *err = kserve_trace_update_from_json(
        root, osp_tracer_file_updates_allowed(tracer), &u);
    if (err)
        return err;
    return osp_tracer_update_settings(tracer, model, &u);
}

/* ---- gRPC: value lists ---- */

static const kserve_trace_setting_list *
find_list(const kserve_trace_setting_list *settings, size_t n,
          const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(settings[i].key, key) == 0)
            return &settings[i];
    return NULL;
}

/* "trace_rate", "log_frequency" or "trace_count" from a list: none clears,
 * one value is read with std::stoi, more is Triton's "expect only 1 value
 * for '<k>'". *got is true when *n was read. */
static osp_error *list_number(const kserve_trace_setting_list *l,
                              const char *range, osp_trace_change *change,
                              bool *got, long long *n) {
    *got = false;
    if (!l)
        return NULL;
    if (l->n_values == 0) {
        *change = OSP_TRACE_CLEAR;
        return NULL;
    }
    if (l->n_values > 1)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "expect only 1 value for '%s'", l->key);
    osp_error *err = stoi_setting(l->key, l->values[0], range, n);
    *got = err == NULL;
    return err;
}

osp_error *
kserve_trace_update_from_lists(const kserve_trace_setting_list *settings,
                               size_t n, bool file_updates_allowed,
                               osp_trace_update *u) {
    memset(u, 0, sizeof *u);
    const kserve_trace_setting_list *l;
    if ((l = find_list(settings, n, "trace_file"))) {
        if (!file_updates_allowed)
            return osp_error_new(OSP_ERROR_UNSUPPORTED,
                                 "trace file location can not be updated "
                                 "through network protocol");
        if (l->n_values == 0) {
            u->file_change = OSP_TRACE_CLEAR;
        } else if (l->n_values > 1) {
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "expect only 1 value for 'trace_file'");
        } else {
            u->file = l->values[0];
            u->file_len = strlen(l->values[0]);
            u->file_change = OSP_TRACE_SET;
        }
    }
    if ((l = find_list(settings, n, "trace_level"))) {
        if (l->n_values == 0)
            u->level_change = OSP_TRACE_CLEAR;
        for (size_t i = 0; i < l->n_values; i++) {
            const char *s = l->values[i];
            if (strcmp(s, "OFF") == 0) {
                if (l->n_values != 1)
                    return osp_error_new(OSP_ERROR_INVALID_ARG,
                                         "Expect only one trace level 'OFF' "
                                         "is specified");
                u->level = OSP_TRACE_LEVEL_OFF;
                u->level_change = OSP_TRACE_SET;
            } else if (strcmp(s, "TIMESTAMPS") == 0) {
                u->level |= OSP_TRACE_LEVEL_TIMESTAMPS;
                u->level_change = OSP_TRACE_SET;
            } else if (strcmp(s, "TENSORS") == 0) {
                u->level |= OSP_TRACE_LEVEL_TENSORS;
                u->level_change = OSP_TRACE_SET;
            }
        }
    }
    bool got;
    long long v;
    osp_error *err = list_number(find_list(settings, n, "trace_rate"),
                                 "0, 4294967295", &u->rate_change, &got, &v);
    if (err)
        return err;
    if (got) {
        u->rate = (uint32_t)(int32_t)v;
        u->rate_change = OSP_TRACE_SET;
    }
    l = find_list(settings, n, "trace_count");
    if ((err = list_number(l, "-1, 2147483647", &u->count_change, &got, &v)))
        return err;
    if (got) {
        if (v < -1)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Unable to parse 'trace_count'. Expecting "
                                 "value >= -1, got: %s",
                                 l->values[0]);
        u->count = (int32_t)v;
        u->count_change = OSP_TRACE_SET;
    }
    if ((err =
             list_number(find_list(settings, n, "log_frequency"),
                         "0, 4294967295", &u->log_frequency_change, &got, &v)))
        return err;
    if (got) {
        u->log_frequency = (uint32_t)(int32_t)v;
        u->log_frequency_change = OSP_TRACE_SET;
    }
    return NULL;
}

/* ---- the model check ---- */

osp_error *kserve_trace_check_model(osp_server *core, const char *model) {
    osp_model *m = NULL;
    osp_error *err = osp_server_model_get(core, model, -1, &m);
    if (!err) {
        osp_model_unref(m);
        return NULL;
    }
    if (osp_error_get_reason(err) != OSP_REASON_MODEL_NOT_FOUND)
        return err;
    osp_error_free(err);
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "Request for unknown model : %s", model);
}
