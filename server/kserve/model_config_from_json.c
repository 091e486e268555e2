/*
 * A ModelConfig in protobuf JSON (the load API's "config" parameter, often
 * what GET .../config returned, edited) rewritten as protobuf text, so
 * that one parser (server/core/config/model_config.c) reads every config and
 * gives the same errors. What protobuf's JSON mapping changes is undone:
 *  - lowerCamelCase field names become proto names (maxBatchSize);
 *  - map fields become repeated { key value } entries;
 *  - integers may be strings ("16"), for every integer field (protobuf's
 *    JSON parser takes a number or a string for int32, uint32, int64 and
 *    uint64 alike), and become numbers;
 *  - enum values are names (strings) or numbers and become identifiers;
 *  - null means absent, and so do empty lists and maps.
 */
#include "model_config_from_json.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

#define CONFIG_MAX_DEPTH 64

/* ModelConfig's map fields, its enum fields, and its integer fields (of any
 * width: protobuf's JSON writes the 64-bit ones as strings, and its parser
 * takes strings for all). Names are unique enough across the messages of
 * model_config.proto that the field name alone decides. */
static const char *const map_fields[] = {"parameters",
                                         "priority_queue_policy",
                                         "cc_model_filenames",
                                         "metric_tags",
                                         "inputs",
                                         "input_map",
                                         "output_map",
                                         NULL};
static const char *const enum_fields[] = {
    "data_type", "kind", "format", "timeout_action", "priority", NULL};
static const char *const integer_fields[] = {"dims",
                                             "max_batch_size",
                                             "count",
                                             "gpus",
                                             "preferred_batch_size",
                                             "num_versions",
                                             "batch_size",
                                             "device_id",
                                             "shape",
                                             "model_version",
                                             "gather_kernel_buffer_threshold",
                                             "level",
                                             "int32_false_true",
                                             "int32_start_value",
                                             "int32_step_value",
                                             "int32_max_value",
                                             "max_queue_delay_microseconds",
                                             "default_timeout_microseconds",
                                             "versions",
                                             "priority_levels",
                                             "default_priority_level",
                                             "max_queue_size",
                                             "max_candidate_sequences",
                                             "max_sequence_idle_microseconds",
                                             NULL};

static bool listed(const char *name, const char *const *list) {
    for (; *list; list++)
        if (strcmp(name, *list) == 0)
            return true;
    return false;
}

/* A field name in proto form (max_batch_size for maxBatchSize); NULL when
 * out of memory. Caller frees. */
static char *proto_name(const char *name) {
    char *out = malloc(2 * strlen(name) + 1), *o = out;
    for (const char *c = name; out && *c; c++) {
        if (isupper((unsigned char)*c)) {
            *o++ = '_';
            *o++ = (char)tolower((unsigned char)*c);
        } else {
            *o++ = *c;
        }
    }
    if (out)
        *o = '\0';
    return out;
}

/* A protobuf text string literal: printable ASCII as is, the rest octal. */
static void put_string(bytebuf *b, const char *s, size_t n) {
    bytebuf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            bytebuf_printf(b, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f)
            bytebuf_putc(b, (char)c);
        else
            bytebuf_printf(b, "\\%03o", c);
    }
    bytebuf_putc(b, '"');
}

static bool is_integer_text(const char *s) {
    if (*s == '-')
        s++;
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

static osp_error *put_message(bytebuf *b, struct json_object *obj);

/* The enum values of model_config.proto, by field, in number order. */
static const struct {
    const char *field;
    const char *const *names;
    size_t n;
} enum_values[] = {
    {"data_type",
     (const char *const[]){"TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8",
                           "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64",
                           "TYPE_INT8", "TYPE_INT16", "TYPE_INT32",
                           "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64",
                           "TYPE_STRING", "TYPE_BF16"},
     15},
    {"kind",
     (const char *const[]){"KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"},
     4},
    {"format",
     (const char *const[]){"FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"}, 3},
    {"timeout_action", (const char *const[]){"REJECT", "DELAY"}, 2},
    {"priority",
     (const char *const[]){"PRIORITY_DEFAULT", "PRIORITY_MAX", "PRIORITY_MIN"},
     3},
};

/* An enum field given as a number (protobuf's JSON accepts either), as
 * its value's name. */
static osp_error *put_enum_number(bytebuf *b, const char *field, int64_t v) {
    for (size_t i = 0; i < sizeof enum_values / sizeof enum_values[0]; i++) {
        if (strcmp(enum_values[i].field, field) != 0)
            continue;
        if (v < 0 || (uint64_t)v >= enum_values[i].n)
            break;
        bytebuf_puts(b, enum_values[i].names[v]);
        return NULL;
    }
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "config: field '%s': unknown enum value %lld", field,
                         (long long)v);
}

/* One scalar value of field `field` (a message for objects). */
static osp_error *put_value(bytebuf *b, const char *field,
                            struct json_object *v) {
    switch (json_object_get_type(v)) {
    case json_type_object:
        return put_message(b, v);
    case json_type_boolean:
        bytebuf_puts(b, json_object_get_boolean(v) ? "true" : "false");
        return NULL;
    case json_type_int:
        if (listed(field, enum_fields))
            return put_enum_number(b, field, json_object_get_int64(v));
        if (json_is_uint64(v) && !json_is_int64(v))
            bytebuf_printf(b, "%llu",
                           (unsigned long long)json_object_get_uint64(v));
        else
            bytebuf_printf(b, "%lld", (long long)json_object_get_int64(v));
        return NULL;
    case json_type_double:
        bytebuf_printf(b, "%.17g", json_object_get_double(v));
        return NULL;
    case json_type_string: {
        const char *s = json_object_get_string(v);
        size_t n = (size_t)json_object_get_string_len(v);
        bool ident = listed(field, enum_fields) && n > 0 && strlen(s) == n;
        for (size_t i = 0; ident && i < n; i++)
            ident = isalnum((unsigned char)s[i]) || s[i] == '_';
        if (ident || (listed(field, integer_fields) && is_integer_text(s)))
            bytebuf_puts(b, s);
        else
            put_string(b, s, n);
        return NULL;
    }
    default:
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "config: field '%s': unexpected JSON value",
                             field);
    }
}

/* Field `name` (proto form) with JSON value v, as zero or more text-format
 * fields. */
static osp_error *put_proto_field(bytebuf *b, const char *name,
                                  struct json_object *v) {
    osp_error *err = NULL;
    if (v == NULL)
        return NULL; /* null: absent */
    if (json_object_is_type(v, json_type_array)) {
        size_t n = json_object_array_length(v);
        for (size_t i = 0; i < n && !err; i++) {
            struct json_object *e = json_object_array_get_idx(v, i);
            if (!e || json_object_is_type(e, json_type_array))
                return osp_error_new(OSP_ERROR_INVALID_ARG,
                                     "config: field '%s': a list may not "
                                     "hold null or lists",
                                     name);
            bytebuf_puts(b, name);
            bytebuf_puts(b,
                         json_object_is_type(e, json_type_object) ? " " : ": ");
            err = put_value(b, name, e);
            bytebuf_putc(b, '\n');
        }
        return err;
    }
    if (listed(name, map_fields) && json_object_is_type(v, json_type_object)) {
        json_object_object_foreach(v, key, value) {
            bytebuf_puts(b, name);
            bytebuf_puts(b, " { key: ");
            /* priority_queue_policy's keys are numbers */
            if (is_integer_text(key) &&
                strcmp(name, "priority_queue_policy") == 0)
                bytebuf_puts(b, key);
            else
                put_string(b, key, strlen(key));
            bytebuf_puts(b, json_object_is_type(value, json_type_object)
                                ? " value "
                                : " value: ");
            if (value && (err = put_value(b, name, value)))
                return err;
            bytebuf_puts(b, " }\n");
        }
        return NULL;
    }
    bytebuf_puts(b, name);
    bytebuf_puts(b, json_object_is_type(v, json_type_object) ? " " : ": ");
    err = put_value(b, name, v);
    bytebuf_putc(b, '\n');
    return err;
}

/* put_proto_field for a field name as JSON gives it. */
static osp_error *put_field(bytebuf *b, const char *json_name,
                            struct json_object *v) {
    char *name = proto_name(json_name);
    if (!name)
        return osp_error_out_of_memory();
    osp_error *err = put_proto_field(b, name, v);
    free(name);
    return err;
}

static osp_error *put_message(bytebuf *b, struct json_object *obj) {
    osp_error *err = NULL;
    bytebuf_puts(b, "{\n");
    json_object_object_foreach(obj, key, value) {
        if ((err = put_field(b, key, value)))
            return err;
    }
    bytebuf_puts(b, "}");
    return NULL;
}

osp_error *model_config_json_to_pbtxt(const char *json, size_t len,
                                      char **pbtxt) {
    /* The writer recurses once per level: nesting is capped at what the
     * config parser takes anyway (PBTXT_MAX_DEPTH). */
    struct json_object *root = NULL;
    json_scan_info info = {0};
    osp_error *err = json_scan(json, len, &info);
    if (!err && info.max_depth > CONFIG_MAX_DEPTH)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "nested deeper than %d levels", CONFIG_MAX_DEPTH);
    free(info.spans);
    if (!err)
        err = json_parse(json, len, info.max_depth, NULL, 0, &root);
    if (err)
        return osp_error_wrap(err, "config");
    if (!json_object_is_type(root, json_type_object)) {
        json_free(root);
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "config: expected a JSON object");
    }
    bytebuf b;
    bytebuf_init(&b);
    json_object_object_foreach(root, key, value) {
        if ((err = put_field(&b, key, value)))
            break;
    }
    json_free(root);
    if (err) {
        bytebuf_free(&b);
        return err;
    }
    size_t n;
    *pbtxt = bytebuf_take(&b, &n);
    if (!*pbtxt)
        return osp_error_out_of_memory();
    return NULL;
}
