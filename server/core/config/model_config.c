/*
 * config.pbtxt -> osp_model_config. pbtxt.c gives a schema-less tree; this
 * file knows model_config.proto: which fields exist, their types, and the
 * checks Triton makes when it loads a config.
 *
 * Fields of model_config.proto that Osprey does not use are skipped (listed
 * per message below); a name that is not in model_config.proto at all is an
 * error, as in Triton, so a typo does not silently become a default.
 * An absent `name` becomes "": the repository loader fills it from the
 * folder name (and rejects a name that differs from the folder).
 */
#include "osprey/model_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pbtxt.h"

/* A config file larger than this is refused before it is read. */
#define OSP_MODEL_CONFIG_MAX_BYTES (16u << 20)

typedef struct mapper {
    const char *file;
} mapper;

static const char *const ignored_config_fields[] = {
    "runtime",
    "batch_input",
    "batch_output",
    "cc_model_filenames",
    "metric_tags",
    "model_operations",
    "model_repository_agents",
    "model_metrics",
    NULL,
};
static const char *const ignored_input_fields[] = {
    "format",
    "reshape",
    "is_shape_tensor",
    "allow_ragged_batch",
    "is_non_linear_format_io",
    NULL,
};
static const char *const ignored_output_fields[] = {
    "reshape",
    "is_shape_tensor",
    "is_non_linear_format_io",
    NULL,
};
static const char *const ignored_instance_group_fields[] = {
    "rate_limiter", "secondary_devices", "profile",
    "passive",      "host_policy",       NULL,
};

static const char *const instance_kind_names[] = {
    [OSP_INSTANCE_KIND_AUTO] = "KIND_AUTO",
    [OSP_INSTANCE_KIND_GPU] = "KIND_GPU",
    [OSP_INSTANCE_KIND_CPU] = "KIND_CPU",
    [OSP_INSTANCE_KIND_MODEL] = "KIND_MODEL",
};
const char *osp_instance_kind_name(osp_instance_kind kind) {
    return (unsigned)kind < 4 ? instance_kind_names[kind] : "KIND_AUTO";
}

static const char *const timeout_action_names[] = {
    [OSP_TIMEOUT_REJECT] = "REJECT",
    [OSP_TIMEOUT_DELAY] = "DELAY",
};
static const char *const priority_names[] = {
    [OSP_MODEL_PRIORITY_DEFAULT] = "PRIORITY_DEFAULT",
    [OSP_MODEL_PRIORITY_MAX] = "PRIORITY_MAX",
    [OSP_MODEL_PRIORITY_MIN] = "PRIORITY_MIN",
};

static bool is_one_of(const char *name, const char *const *list) {
    for (; *list; list++)
        if (strcmp(name, *list) == 0)
            return true;
    return false;
}

/* INVALID_ARG "<file>:<line>: <prefix>.<field>: <why>" (empty parts are
 * left out). */
static osp_error *config_error(const mapper *m, int line, const char *prefix,
                               const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static osp_error *config_error(const mapper *m, int line, const char *prefix,
                               const char *field, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    bool has_prefix = prefix && *prefix, has_field = field && *field;
    return osp_error_new(
        OSP_ERROR_INVALID_ARG, "%s:%d: %s%s%.64s%s%s", m->file, line,
        has_prefix ? prefix : "", has_prefix && has_field ? "." : "",
        has_field ? field : "", has_prefix || has_field ? ": " : "", why);
}

/* Describes a value for "expected X, got Y" messages. */
static const char *describe(const pbtxt_node *n, char *buf, size_t cap) {
    switch (n->kind) {
    case PBTXT_MESSAGE:
        return "a message";
    case PBTXT_STRING:
        return "a string";
    case PBTXT_INT:
        return "an integer";
    case PBTXT_FLOAT:
        return "a floating-point number";
    case PBTXT_IDENT:
        snprintf(buf, cap, "'%.40s'", n->str);
        return buf;
    }
    return "?";
}

static osp_error *expect_kind(const mapper *m, const char *prefix,
                              const pbtxt_node *n, pbtxt_kind kind,
                              const char *what) {
    char buf[64];
    if (n->kind == kind)
        return NULL;
    return config_error(m, n->line, prefix, n->name, "expected %s, got %s",
                        what, describe(n, buf, sizeof(buf)));
}

/* Marks a non-repeated field as seen; a second occurrence is an error. */
static osp_error *once(const mapper *m, const char *prefix, const pbtxt_node *n,
                       unsigned *seen, unsigned bit) {
    if (*seen & bit)
        return config_error(m, n->line, prefix, n->name,
                            "non-repeated field is specified more than once");
    *seen |= bit;
    return NULL;
}

static osp_error *unknown_field(const mapper *m, const char *prefix,
                                const pbtxt_node *n) {
    return config_error(m, n->line, prefix, n->name,
                        "unknown field (not in model_config.proto)");
}

/* Replaces *out with a copy of the string value. */
static osp_error *get_string(const mapper *m, const char *prefix,
                             const pbtxt_node *n, char **out) {
    osp_error *err = expect_kind(m, prefix, n, PBTXT_STRING, "a string");
    if (err)
        return err;
    if (strlen(n->str) != n->str_len)
        return config_error(m, n->line, prefix, n->name,
                            "string contains a NUL byte");
    char *copy = strdup(n->str);
    if (!copy)
        return osp_error_out_of_memory();
    free(*out);
    *out = copy;
    return NULL;
}

/* Signed integer value within [min, max]. */
static osp_error *get_int(const mapper *m, const char *prefix,
                          const pbtxt_node *n, int64_t min, int64_t max,
                          int64_t *out) {
    osp_error *err = expect_kind(m, prefix, n, PBTXT_INT, "an integer");
    if (err)
        return err;
    int64_t v = 0;
    if (n->negative && n->magnitude > (uint64_t)INT64_MAX + 1)
        goto range;
    if (!n->negative && n->magnitude > (uint64_t)INT64_MAX)
        goto range;
    v = n->negative ? (int64_t)(0 - n->magnitude) : (int64_t)n->magnitude;
    if (v < min || v > max)
        goto range;
    *out = v;
    return NULL;
range:
    return config_error(
        m, n->line, prefix, n->name, "value %s%llu out of range [%lld, %lld]",
        n->negative ? "-" : "", (unsigned long long)n->magnitude,
        (long long)min, (long long)max);
}

/* Unsigned integer value within [0, max]. */
static osp_error *get_uint(const mapper *m, const char *prefix,
                           const pbtxt_node *n, uint64_t max, uint64_t *out) {
    osp_error *err = expect_kind(m, prefix, n, PBTXT_INT, "an integer");
    if (err)
        return err;
    if ((n->negative && n->magnitude != 0) || n->magnitude > max)
        return config_error(
            m, n->line, prefix, n->name, "value %s%llu out of range [0, %llu]",
            n->negative ? "-" : "", (unsigned long long)n->magnitude,
            (unsigned long long)max);
    *out = n->magnitude;
    return NULL;
}

static osp_error *get_i32(const mapper *m, const char *prefix,
                          const pbtxt_node *n, int32_t min, int32_t *out) {
    int64_t v = 0;
    osp_error *err = get_int(m, prefix, n, min, INT32_MAX, &v);
    if (!err)
        *out = (int32_t)v;
    return err;
}

static osp_error *get_bool(const mapper *m, const char *prefix,
                           const pbtxt_node *n, bool *out) {
    char buf[64];
    if (n->kind == PBTXT_IDENT) {
        if (!strcmp(n->str, "true") || !strcmp(n->str, "True") ||
            !strcmp(n->str, "t")) {
            *out = true;
            return NULL;
        }
        if (!strcmp(n->str, "false") || !strcmp(n->str, "False") ||
            !strcmp(n->str, "f")) {
            *out = false;
            return NULL;
        }
    } else if (n->kind == PBTXT_INT && !n->negative && n->magnitude <= 1) {
        *out = n->magnitude == 1;
        return NULL;
    }
    return config_error(m, n->line, prefix, n->name,
                        "expected true or false, got %s",
                        describe(n, buf, sizeof(buf)));
}

/* Enum value by name: *out = index of n's identifier in names[0..count). */
static osp_error *get_enum(const mapper *m, const char *prefix,
                           const pbtxt_node *n, const char *const *names,
                           int count, int *out) {
    osp_error *err = expect_kind(m, prefix, n, PBTXT_IDENT, "an enum value");
    if (err)
        return err;
    for (int i = 0; i < count; i++) {
        if (strcmp(n->str, names[i]) == 0) {
            *out = i;
            return NULL;
        }
    }
    return config_error(m, n->line, prefix, n->name,
                        "unknown enum value '%.64s'", n->str);
}

/* Duplicate detection in O(n log n): entries sorted by key, then index. */
typedef struct key_ref {
    const char *str;
    uint64_t num;
    size_t index;
} key_ref;

static int compare_str_keys(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    int c = strcmp(x->str, y->str);
    if (c)
        return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int compare_num_keys(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    if (x->num != y->num)
        return x->num < y->num ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Sorts keys and returns the smallest index that repeats an earlier key's
 * value, or -1 (keys are reordered). */
static long first_duplicate(key_ref *keys, size_t n, bool numeric) {
    long dup = -1;
    if (n < 2)
        return -1;
    qsort(keys, n, sizeof(*keys),
          numeric ? compare_num_keys : compare_str_keys);
    for (size_t i = 1; i < n; i++) {
        bool same = numeric ? keys[i].num == keys[i - 1].num
                            : strcmp(keys[i].str, keys[i - 1].str) == 0;
        if (same && (dup < 0 || keys[i].index < (size_t)dup))
            dup = (long)keys[i].index;
    }
    return dup;
}

/* The n-th (0-based) direct field called `name`. */
static const pbtxt_node *nth_field(const pbtxt_node *msg, const char *name,
                                   size_t nth) {
    for (const pbtxt_node *f = msg->first_child; f; f = f->next)
        if (strcmp(f->name, name) == 0 && nth-- == 0)
            return f;
    return NULL;
}

/* A plain file name next to config.pbtxt: no path, no "." or "..". */
static bool is_plain_file_name(const char *name) {
    return name[0] && strcmp(name, ".") && strcmp(name, "..") &&
           !strchr(name, '/');
}

/* One `input { ... }` or `output { ... }`. */
static osp_error *map_io(const mapper *m, const pbtxt_node *n, bool is_input,
                         int32_t max_batch_size, osp_model_io *io) {
    osp_error *err = NULL;
    const char *prefix = is_input ? "input" : "output";
    unsigned seen = 0;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "name")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = get_string(m, prefix, f, &io->name)))
                return err;
        } else if (!strcmp(f->name, "data_type")) {
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = expect_kind(m, prefix, f, PBTXT_IDENT, "a data type")))
                return err;
            io->dtype = osp_datatype_from_config_name(f->str);
            if (io->dtype == OSP_TYPE_INVALID)
                return config_error(m, f->line, prefix, f->name,
                                    "unknown data type '%.64s'", f->str);
        } else if (!strcmp(f->name, "dims")) {
            int64_t dim = 0;
            if ((err = get_int(m, prefix, f, INT64_MIN, INT64_MAX, &dim)))
                return err;
            if (dim != -1 && dim <= 0)
                return config_error(m, f->line, prefix, f->name,
                                    "dimension must be -1 or > 0, got %lld",
                                    (long long)dim);
            /* With batching the batch dim is prepended to these. */
            int max_rank = OSP_MAX_DIMS - (max_batch_size > 0);
            if (io->dims.rank >= max_rank)
                return config_error(
                    m, f->line, prefix, f->name, "more than %d dimensions%s",
                    max_rank,
                    max_batch_size > 0 ? " (plus the batch dimension)" : "");
            io->dims.dims[io->dims.rank++] = dim;
        } else if (is_input && !strcmp(f->name, "optional")) {
            if ((err = once(m, prefix, f, &seen, 4)) ||
                (err = get_bool(m, prefix, f, &io->optional)))
                return err;
        } else if (!is_input && !strcmp(f->name, "label_filename")) {
            if ((err = once(m, prefix, f, &seen, 8)) ||
                (err = get_string(m, prefix, f, &io->label_filename)))
                return err;
            if (!io->label_filename[0]) { /* "": proto3's default, none */
                free(io->label_filename);
                io->label_filename = NULL;
            } else if (!is_plain_file_name(io->label_filename))
                return config_error(m, f->line, prefix, f->name,
                                    "must be a file name in the model "
                                    "folder, got '%.64s'",
                                    io->label_filename);
        } else if (!is_one_of(f->name, is_input ? ignored_input_fields
                                                : ignored_output_fields)) {
            return unknown_field(m, prefix, f);
        }
    }
    if (!io->name || !io->name[0])
        return config_error(m, n->line, prefix, "name", "is required");
    if (io->dtype == OSP_TYPE_INVALID)
        return config_error(m, n->line, prefix, "data_type",
                            "is required for %s '%.64s'", prefix, io->name);
    if (io->dims.rank == 0)
        return config_error(m, n->line, prefix, "dims",
                            "is required for %s '%.64s'", prefix, io->name);
    return NULL;
}

/* All `input` (or `output`) fields of the root, names checked unique. */
static osp_error *map_ios(const mapper *m, const pbtxt_node *root,
                          bool is_input, int32_t max_batch_size,
                          osp_model_io **ios_out, size_t *n_out) {
    osp_error *err = NULL;
    const char *field = is_input ? "input" : "output";
    size_t n = pbtxt_count(root, field);
    key_ref *keys = NULL;
    if (n == 0)
        return NULL;
    osp_model_io *ios = calloc(n, sizeof(*ios));
    keys = calloc(n, sizeof(*keys));
    if (!ios || !keys) {
        free(ios);
        free(keys);
        return osp_error_out_of_memory();
    }
    *ios_out = ios; /* from here the config owns the array */
    size_t i = 0;
    for (const pbtxt_node *f = root->first_child; f; f = f->next) {
        if (strcmp(f->name, field) != 0)
            continue;
        *n_out = i + 1;
        if ((err = map_io(m, f, is_input, max_batch_size, &ios[i])))
            goto out;
        keys[i] = (key_ref){.str = ios[i].name, .index = i};
        i++;
    }
    long dup = first_duplicate(keys, n, false);
    if (dup >= 0)
        err = config_error(m, nth_field(root, field, (size_t)dup)->line, field,
                           "name", "duplicate %s name '%.64s'", field,
                           ios[dup].name);
out:
    free(keys);
    return err;
}

static osp_error *map_version_policy(const mapper *m, const pbtxt_node *n,
                                     osp_version_policy *vp) {
    osp_error *err = NULL;
    const char *prefix = "version_policy";
    const pbtxt_node *choice = NULL;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (strcmp(f->name, "latest") && strcmp(f->name, "all") &&
            strcmp(f->name, "specific"))
            return unknown_field(m, prefix, f);
        if (choice)
            return config_error(m, f->line, prefix, f->name,
                                "only one of latest, all and specific may "
                                "be given");
        choice = f;
        if ((err = expect_kind(m, prefix, f, PBTXT_MESSAGE, "a message")))
            return err;
    }
    vp->kind = OSP_VERSION_POLICY_LATEST;
    vp->latest_num_versions = 1;
    if (!choice)
        return NULL;

    char sub[64];
    snprintf(sub, sizeof(sub), "%s.%s", prefix, choice->name);
    if (!strcmp(choice->name, "all")) {
        vp->kind = OSP_VERSION_POLICY_ALL;
        if (choice->first_child)
            return unknown_field(m, sub, choice->first_child);
    } else if (!strcmp(choice->name, "latest")) {
        unsigned seen = 0;
        uint64_t num = 0;
        for (const pbtxt_node *f = choice->first_child; f; f = f->next) {
            if (strcmp(f->name, "num_versions") != 0)
                return unknown_field(m, sub, f);
            if ((err = once(m, sub, f, &seen, 1)) ||
                (err = get_uint(m, sub, f, UINT32_MAX, &num)))
                return err;
        }
        if (num == 0)
            return config_error(m, choice->line, sub, "num_versions",
                                "must be > 0");
        vp->latest_num_versions = (uint32_t)num;
    } else {
        vp->kind = OSP_VERSION_POLICY_SPECIFIC;
        size_t n_versions = pbtxt_count(choice, "versions");
        if (n_versions > 0) {
            vp->versions = calloc(n_versions, sizeof(*vp->versions));
            if (!vp->versions)
                return osp_error_out_of_memory();
        }
        for (const pbtxt_node *f = choice->first_child; f; f = f->next) {
            if (strcmp(f->name, "versions") != 0)
                return unknown_field(m, sub, f);
            int64_t v = 0;
            if ((err = get_int(m, sub, f, 1, INT64_MAX, &v)))
                return err;
            vp->versions[vp->n_versions++] = v;
        }
    }
    return NULL;
}

static osp_error *map_instance_group(const mapper *m, const pbtxt_node *n,
                                     osp_instance_group *ig) {
    osp_error *err = NULL;
    const char *prefix = "instance_group";
    unsigned seen = 0;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    size_t n_gpus = pbtxt_count(n, "gpus");
    if (n_gpus > 0) {
        ig->gpus = calloc(n_gpus, sizeof(*ig->gpus));
        if (!ig->gpus)
            return osp_error_out_of_memory();
    }
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "name")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = get_string(m, prefix, f, &ig->name)))
                return err;
        } else if (!strcmp(f->name, "kind")) {
            int kind = 0;
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = get_enum(m, prefix, f, instance_kind_names, 4, &kind)))
                return err;
            ig->kind = (osp_instance_kind)kind;
        } else if (!strcmp(f->name, "count")) {
            if ((err = once(m, prefix, f, &seen, 4)) ||
                (err = get_i32(m, prefix, f, 0, &ig->count)))
                return err;
        } else if (!strcmp(f->name, "gpus")) {
            if ((err = get_i32(m, prefix, f, 0, &ig->gpus[ig->n_gpus])))
                return err;
            ig->n_gpus++;
        } else if (!is_one_of(f->name, ignored_instance_group_fields)) {
            return unknown_field(m, prefix, f);
        }
    }
    if (ig->n_gpus > 0 && (ig->kind == OSP_INSTANCE_KIND_CPU ||
                           ig->kind == OSP_INSTANCE_KIND_MODEL))
        return config_error(m, n->line, prefix, "gpus",
                            "must not be given for %s",
                            instance_kind_names[ig->kind]);
    return NULL;
}

/* A ModelQueuePolicy message. */
static osp_error *map_queue_policy(const mapper *m, const char *prefix,
                                   const pbtxt_node *n, osp_queue_policy *qp) {
    osp_error *err = NULL;
    unsigned seen = 0;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "timeout_action")) {
            int action = 0;
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err =
                     get_enum(m, prefix, f, timeout_action_names, 2, &action)))
                return err;
            qp->timeout_action = (osp_timeout_action)action;
        } else if (!strcmp(f->name, "default_timeout_microseconds")) {
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = get_uint(m, prefix, f, UINT64_MAX,
                                &qp->default_timeout_us)))
                return err;
        } else if (!strcmp(f->name, "allow_timeout_override")) {
            if ((err = once(m, prefix, f, &seen, 4)) ||
                (err = get_bool(m, prefix, f, &qp->allow_timeout_override)))
                return err;
        } else if (!strcmp(f->name, "max_queue_size")) {
            uint64_t v = 0;
            if ((err = once(m, prefix, f, &seen, 8)) ||
                (err = get_uint(m, prefix, f, UINT32_MAX, &v)))
                return err;
            qp->max_queue_size = (uint32_t)v;
        } else {
            return unknown_field(m, prefix, f);
        }
    }
    return NULL;
}

/* One `priority_queue_policy { key: N value { ... } }` map entry. */
static osp_error *map_priority_entry(const mapper *m, const pbtxt_node *n,
                                     osp_priority_queue_policy *entry) {
    osp_error *err = NULL;
    const char *prefix = "dynamic_batching.priority_queue_policy";
    unsigned seen = 0;
    if ((err = expect_kind(m, "dynamic_batching", n, PBTXT_MESSAGE,
                           "a map entry message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "key")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = get_uint(m, prefix, f, UINT64_MAX, &entry->level)))
                return err;
        } else if (!strcmp(f->name, "value")) {
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = expect_kind(m, prefix, f, PBTXT_MESSAGE, "a message")) ||
                (err = map_queue_policy(m, prefix, f, &entry->policy)))
                return err;
        } else {
            return unknown_field(m, prefix, f);
        }
    }
    if (!(seen & 1))
        return config_error(m, n->line, prefix, "key", "is required");
    return NULL;
}

static osp_error *map_dynamic_batching(const mapper *m, const pbtxt_node *n,
                                       int32_t max_batch_size,
                                       osp_dynamic_batching *db) {
    osp_error *err = NULL;
    const char *prefix = "dynamic_batching";
    unsigned seen = 0;
    key_ref *keys = NULL;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    db->enabled = true;
    size_t n_sizes = pbtxt_count(n, "preferred_batch_size");
    size_t n_policies = pbtxt_count(n, "priority_queue_policy");
    if (n_sizes > 0) {
        db->preferred_batch_sizes = calloc(n_sizes, sizeof(int32_t));
        if (!db->preferred_batch_sizes)
            return osp_error_out_of_memory();
    }
    if (n_policies > 0) {
        db->priority_queue_policies =
            calloc(n_policies, sizeof(*db->priority_queue_policies));
        keys = calloc(n_policies, sizeof(*keys));
        if (!db->priority_queue_policies || !keys) {
            err = osp_error_out_of_memory();
            goto out;
        }
    }

    const pbtxt_node *default_level = NULL;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "preferred_batch_size")) {
            int32_t *size =
                &db->preferred_batch_sizes[db->n_preferred_batch_sizes];
            if ((err = get_i32(m, prefix, f, 1, size)))
                goto out;
            if (max_batch_size > 0 && *size > max_batch_size) {
                err = config_error(m, f->line, prefix, f->name,
                                   "%d is larger than max_batch_size %d", *size,
                                   max_batch_size);
                goto out;
            }
            db->n_preferred_batch_sizes++;
        } else if (!strcmp(f->name, "max_queue_delay_microseconds")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = get_uint(m, prefix, f, UINT64_MAX,
                                &db->max_queue_delay_us)))
                goto out;
        } else if (!strcmp(f->name, "preserve_ordering")) {
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = get_bool(m, prefix, f, &db->preserve_ordering)))
                goto out;
        } else if (!strcmp(f->name, "priority_levels")) {
            if ((err = once(m, prefix, f, &seen, 4)) ||
                (err =
                     get_uint(m, prefix, f, UINT64_MAX, &db->priority_levels)))
                goto out;
        } else if (!strcmp(f->name, "default_priority_level")) {
            if ((err = once(m, prefix, f, &seen, 8)) ||
                (err = get_uint(m, prefix, f, UINT64_MAX,
                                &db->default_priority_level)))
                goto out;
            default_level = f;
        } else if (!strcmp(f->name, "default_queue_policy")) {
            if ((err = once(m, prefix, f, &seen, 16)) ||
                (err = expect_kind(m, prefix, f, PBTXT_MESSAGE, "a message")))
                goto out;
            char sub[64];
            snprintf(sub, sizeof(sub), "%s.%s", prefix, f->name);
            if ((err = map_queue_policy(m, sub, f, &db->default_queue_policy)))
                goto out;
        } else if (!strcmp(f->name, "priority_queue_policy")) {
            size_t i = db->n_priority_queue_policies;
            if ((err =
                     map_priority_entry(m, f, &db->priority_queue_policies[i])))
                goto out;
            keys[i] = (key_ref){.num = db->priority_queue_policies[i].level,
                                .index = i};
            db->n_priority_queue_policies++;
        } else {
            err = unknown_field(m, prefix, f);
            goto out;
        }
    }

    /* Triton: levels run 1..priority_levels; 0 levels means no priorities. */
    uint64_t levels = db->priority_levels;
    if (default_level &&
        (levels == 0 ? db->default_priority_level != 0
                     : db->default_priority_level < 1 ||
                           db->default_priority_level > levels)) {
        err = config_error(m, default_level->line, prefix, default_level->name,
                           "must be in [1, priority_levels]%s",
                           levels == 0 ? " (priority_levels is 0)" : "");
        goto out;
    }
    for (size_t i = 0; i < db->n_priority_queue_policies; i++) {
        uint64_t level = db->priority_queue_policies[i].level;
        if (level < 1 || level > levels) {
            err =
                config_error(m, nth_field(n, "priority_queue_policy", i)->line,
                             prefix, "priority_queue_policy",
                             "key %llu is not in [1, priority_levels]",
                             (unsigned long long)level);
            goto out;
        }
    }
    long dup = first_duplicate(keys, db->n_priority_queue_policies, true);
    if (dup >= 0)
        err = config_error(
            m, nth_field(n, "priority_queue_policy", (size_t)dup)->line, prefix,
            "priority_queue_policy", "duplicate key %llu",
            (unsigned long long)db->priority_queue_policies[dup].level);
out:
    free(keys);
    return err;
}

/* One `parameters { key: "k" value { string_value: "v" } }` map entry. */
static osp_error *map_parameter(const mapper *m, const pbtxt_node *n,
                                osp_model_parameter *p) {
    osp_error *err = NULL;
    const char *prefix = "parameters";
    unsigned seen = 0;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a map entry message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "key")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = get_string(m, prefix, f, &p->key)))
                return err;
        } else if (!strcmp(f->name, "value")) {
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = expect_kind(m, prefix, f, PBTXT_MESSAGE, "a message")))
                return err;
            unsigned value_seen = 0;
            for (const pbtxt_node *v = f->first_child; v; v = v->next) {
                if (strcmp(v->name, "string_value") != 0)
                    return unknown_field(m, "parameters.value", v);
                if ((err = once(m, "parameters.value", v, &value_seen, 1)) ||
                    (err = get_string(m, "parameters.value", v, &p->value)))
                    return err;
            }
        } else {
            return unknown_field(m, prefix, f);
        }
    }
    if (!p->key)
        return config_error(m, n->line, prefix, "key", "is required");
    if (!p->value) {
        p->value = strdup("");
        if (!p->value)
            return osp_error_out_of_memory();
    }
    return NULL;
}

static osp_error *map_parameters(const mapper *m, const pbtxt_node *root,
                                 osp_model_config *cfg) {
    osp_error *err = NULL;
    size_t n = pbtxt_count(root, "parameters");
    key_ref *keys = NULL;
    if (n == 0)
        return NULL;
    cfg->parameters = calloc(n, sizeof(*cfg->parameters));
    keys = calloc(n, sizeof(*keys));
    if (!cfg->parameters || !keys) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (const pbtxt_node *f = root->first_child; f; f = f->next) {
        if (strcmp(f->name, "parameters") != 0)
            continue;
        size_t i = cfg->n_parameters++;
        if ((err = map_parameter(m, f, &cfg->parameters[i])))
            goto out;
        keys[i] = (key_ref){.str = cfg->parameters[i].key, .index = i};
    }
    long dup = first_duplicate(keys, n, false);
    if (dup >= 0)
        err = config_error(m, nth_field(root, "parameters", (size_t)dup)->line,
                           "parameters", "key", "duplicate key '%.64s'",
                           cfg->parameters[dup].key);
out:
    free(keys);
    return err;
}

/* One `parameters { key: "k" value: "v" }` entry (map<string, string>)
 * of the message `parent` names. */
static osp_error *map_string_entry(const mapper *m, const char *parent,
                                   const pbtxt_node *n,
                                   osp_model_parameter *p) {
    osp_error *err = NULL;
    unsigned seen = 0;
    char prefix[160];
    snprintf(prefix, sizeof(prefix), "%s.%s", parent, n->name);
    if ((err = expect_kind(m, parent, n, PBTXT_MESSAGE, "a map entry message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "key")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = get_string(m, prefix, f, &p->key)))
                return err;
        } else if (!strcmp(f->name, "value")) {
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = get_string(m, prefix, f, &p->value)))
                return err;
        } else {
            return unknown_field(m, prefix, f);
        }
    }
    if (!p->key)
        return config_error(m, n->line, prefix, "key", "is required");
    if (!p->value && !(p->value = strdup("")))
        return osp_error_out_of_memory();
    return NULL;
}

/* One `gpu_execution_accelerator { name: "..." parameters { ... } }` (or
 * cpu_...), its parameter keys checked unique. */
static osp_error *map_accelerator(const mapper *m, const pbtxt_node *n,
                                  osp_execution_accelerator *acc) {
    osp_error *err = NULL;
    unsigned seen = 0;
    key_ref *keys = NULL;
    const char *parent = "optimization.execution_accelerators";
    char prefix[128], sub[160];
    snprintf(prefix, sizeof(prefix), "%s.%s", parent, n->name);
    snprintf(sub, sizeof(sub), "%s.parameters", prefix);
    if ((err = expect_kind(m, parent, n, PBTXT_MESSAGE, "a message")))
        return err;
    size_t n_params = pbtxt_count(n, "parameters");
    if (n_params > 0) {
        acc->parameters = calloc(n_params, sizeof(*acc->parameters));
        keys = calloc(n_params, sizeof(*keys));
        if (!acc->parameters || !keys) {
            err = osp_error_out_of_memory();
            goto out;
        }
    }
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "name")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = get_string(m, prefix, f, &acc->name)))
                goto out;
        } else if (!strcmp(f->name, "parameters")) {
            size_t i = acc->n_parameters++;
            if ((err = map_string_entry(m, prefix, f, &acc->parameters[i])))
                goto out;
            keys[i] = (key_ref){.str = acc->parameters[i].key, .index = i};
        } else {
            err = unknown_field(m, prefix, f);
            goto out;
        }
    }
    if (!acc->name && !(acc->name = strdup(""))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    long dup = first_duplicate(keys, acc->n_parameters, false);
    if (dup >= 0)
        err = config_error(m, nth_field(n, "parameters", (size_t)dup)->line,
                           sub, "key", "duplicate key '%.64s'",
                           acc->parameters[dup].key);
out:
    free(keys);
    return err;
}

/* `execution_accelerators { gpu_execution_accelerator [...]
 * cpu_execution_accelerator [...] }`. */
static osp_error *map_accelerators(const mapper *m, const pbtxt_node *n,
                                   osp_model_optimization *opt) {
    osp_error *err = NULL;
    const char *prefix = "optimization.execution_accelerators";
    if ((err = expect_kind(m, "optimization", n, PBTXT_MESSAGE, "a message")))
        return err;
    size_t n_gpu = pbtxt_count(n, "gpu_execution_accelerator");
    size_t n_cpu = pbtxt_count(n, "cpu_execution_accelerator");
    if (n_gpu > 0 && !(opt->gpu_accelerators =
                           calloc(n_gpu, sizeof(*opt->gpu_accelerators))))
        return osp_error_out_of_memory();
    if (n_cpu > 0 && !(opt->cpu_accelerators =
                           calloc(n_cpu, sizeof(*opt->cpu_accelerators))))
        return osp_error_out_of_memory();
    opt->has_execution_accelerators = true;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "gpu_execution_accelerator")) {
            size_t i = opt->n_gpu_accelerators++;
            err = map_accelerator(m, f, &opt->gpu_accelerators[i]);
        } else if (!strcmp(f->name, "cpu_execution_accelerator")) {
            size_t i = opt->n_cpu_accelerators++;
            err = map_accelerator(m, f, &opt->cpu_accelerators[i]);
        } else {
            err = unknown_field(m, prefix, f);
        }
        if (err)
            return err;
    }
    return NULL;
}

/* `input_pinned_memory { enable: B }` (or output_...). */
static osp_error *map_pinned_memory(const mapper *m, const pbtxt_node *n,
                                    bool *enable) {
    osp_error *err = NULL;
    unsigned seen = 0;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "optimization.%s", n->name);
    if ((err = expect_kind(m, "optimization", n, PBTXT_MESSAGE, "a message")))
        return err;
    *enable = false; /* a message without `enable` is enable: false */
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (strcmp(f->name, "enable") != 0)
            return unknown_field(m, prefix, f);
        if ((err = once(m, prefix, f, &seen, 1)) ||
            (err = get_bool(m, prefix, f, enable)))
            return err;
    }
    return NULL;
}

/* `graph { level: N }`. */
static osp_error *map_graph(const mapper *m, const pbtxt_node *n,
                            osp_model_optimization *opt) {
    osp_error *err = NULL;
    const char *prefix = "optimization.graph";
    unsigned seen = 0;
    if ((err = expect_kind(m, "optimization", n, PBTXT_MESSAGE, "a message")))
        return err;
    opt->has_graph = true;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (strcmp(f->name, "level") != 0)
            return unknown_field(m, prefix, f);
        if ((err = once(m, prefix, f, &seen, 1)) ||
            (err = get_i32(m, prefix, f, INT32_MIN, &opt->graph_level)))
            return err;
    }
    return NULL;
}

/* `cuda { graphs: B ... }`: graphs kept, the other fields accepted. */
static osp_error *map_cuda(const mapper *m, const pbtxt_node *n,
                           osp_model_optimization *opt) {
    osp_error *err = NULL;
    unsigned seen = 0;
    if ((err = expect_kind(m, "optimization", n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next)
        if (!strcmp(f->name, "graphs") &&
            ((err = once(m, "optimization.cuda", f, &seen, 1)) ||
             (err = get_bool(m, "optimization.cuda", f, &opt->cuda_graphs))))
            return err;
    return NULL;
}

/* optimization { ... } (ModelOptimizationPolicy); of `cuda`, graphs. */
static osp_error *map_optimization(const mapper *m, const pbtxt_node *n,
                                   osp_model_optimization *opt) {
    osp_error *err = NULL;
    const char *prefix = "optimization";
    unsigned seen = 0;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        const char *name = f->name;
        if (!strcmp(name, "graph")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = map_graph(m, f, opt)))
                return err;
        } else if (!strcmp(name, "priority")) {
            int priority = 0;
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = get_enum(m, prefix, f, priority_names, 3, &priority)))
                return err;
            opt->priority = (osp_model_priority)priority;
        } else if (!strcmp(name, "cuda")) {
            if ((err = once(m, prefix, f, &seen, 4)) ||
                (err = map_cuda(m, f, opt)))
                return err;
        } else if (!strcmp(name, "execution_accelerators")) {
            if ((err = once(m, prefix, f, &seen, 8)) ||
                (err = map_accelerators(m, f, opt)))
                return err;
        } else if (!strcmp(name, "input_pinned_memory")) {
            if ((err = once(m, prefix, f, &seen, 16)) ||
                (err = map_pinned_memory(m, f, &opt->input_pinned_memory)))
                return err;
        } else if (!strcmp(name, "output_pinned_memory")) {
            if ((err = once(m, prefix, f, &seen, 32)) ||
                (err = map_pinned_memory(m, f, &opt->output_pinned_memory)))
                return err;
        } else if (!strcmp(name, "gather_kernel_buffer_threshold")) {
            uint64_t v = 0;
            if ((err = once(m, prefix, f, &seen, 64)) ||
                (err = get_uint(m, prefix, f, UINT32_MAX, &v)))
                return err;
            opt->gather_kernel_buffer_threshold = (uint32_t)v;
        } else if (!strcmp(name, "eager_batching")) {
            if ((err = once(m, prefix, f, &seen, 128)) ||
                (err = get_bool(m, prefix, f, &opt->eager_batching)))
                return err;
        } else {
            return unknown_field(m, prefix, f);
        }
    }
    return NULL;
}

static osp_error *map_transaction_policy(const mapper *m, const pbtxt_node *n,
                                         bool *decoupled) {
    osp_error *err = NULL;
    const char *prefix = "model_transaction_policy";
    unsigned seen = 0;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (strcmp(f->name, "decoupled") != 0)
            return unknown_field(m, prefix, f);
        if ((err = once(m, prefix, f, &seen, 1)) ||
            (err = get_bool(m, prefix, f, decoupled)))
            return err;
    }
    return NULL;
}

/* One map<string, string> field of an ensemble step (input_map or
 * output_map): entries appended to *list, keys checked unique. */
static osp_error *map_step_map(const mapper *m, const char *prefix,
                               const pbtxt_node *step, const char *field,
                               osp_model_parameter **list, size_t *n) {
    osp_error *err = NULL;
    size_t count = pbtxt_count(step, field);
    key_ref *keys = NULL;
    if (count == 0)
        return NULL;
    *list = calloc(count, sizeof(**list));
    keys = calloc(count, sizeof(*keys));
    if (!*list || !keys) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (const pbtxt_node *f = step->first_child; f; f = f->next) {
        if (strcmp(f->name, field) != 0)
            continue;
        size_t i = (*n)++;
        if ((err = map_string_entry(m, prefix, f, &(*list)[i])))
            goto out;
        keys[i] = (key_ref){.str = (*list)[i].key, .index = i};
    }
    long dup = first_duplicate(keys, *n, false);
    if (dup >= 0) {
        char sub[160];
        snprintf(sub, sizeof(sub), "%s.%s", prefix, field);
        err = config_error(m, nth_field(step, field, (size_t)dup)->line, sub,
                           "key", "duplicate key '%.64s'", (*list)[dup].key);
    }
out:
    free(keys);
    return err;
}

/* `ensemble_scheduling { step [ { model_name model_version input_map
 * output_map } ] }`. Whether the steps make a graph is checked at load
 * (ensemble_graph.c), with Triton's messages. */
static osp_error *map_ensemble_scheduling(const mapper *m, const pbtxt_node *n,
                                          osp_ensemble_scheduling *es) {
    osp_error *err = NULL;
    const char *prefix = "ensemble_scheduling";
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    es->enabled = true;
    size_t count = pbtxt_count(n, "step");
    if (count > 0 && !(es->steps = calloc(count, sizeof(*es->steps))))
        return osp_error_out_of_memory();
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (!strcmp(f->name, "max_inflight_requests")) {
            uint64_t limit = 0;
            if ((err = get_uint(m, prefix, f, UINT32_MAX, &limit)))
                return err;
            es->max_inflight_requests = (uint32_t)limit;
            continue;
        }
        if (strcmp(f->name, "step") != 0)
            return unknown_field(m, prefix, f);
        const char *sp = "ensemble_scheduling.step";
        if ((err = expect_kind(m, prefix, f, PBTXT_MESSAGE, "a message")))
            return err;
        osp_ensemble_step *st = &es->steps[es->n_steps++];
        st->model_version = -1;
        unsigned seen = 0;
        for (const pbtxt_node *g = f->first_child; g; g = g->next) {
            if (!strcmp(g->name, "model_name")) {
                if ((err = once(m, sp, g, &seen, 1)) ||
                    (err = get_string(m, sp, g, &st->model_name)))
                    return err;
            } else if (!strcmp(g->name, "model_version")) {
                if ((err = once(m, sp, g, &seen, 2)) ||
                    (err = get_int(m, sp, g, INT64_MIN, INT64_MAX,
                                   &st->model_version)))
                    return err;
            } else if (!strcmp(g->name, "model_namespace")) {
                char *ns = NULL;
                err = get_string(m, sp, g, &ns);
                free(ns);
                if (err)
                    return err;
            } else if (strcmp(g->name, "input_map") &&
                       strcmp(g->name, "output_map")) {
                return unknown_field(m, sp, g);
            }
        }
        if ((err = map_step_map(m, sp, f, "input_map", &st->input_map,
                                &st->n_input_map)) ||
            (err = map_step_map(m, sp, f, "output_map", &st->output_map,
                                &st->n_output_map)))
            return err;
        if (!st->model_name && !(st->model_name = strdup("")))
            return osp_error_out_of_memory();
    }
    return NULL;
}

/* `response_cache { enable: true }`. */
static osp_error *map_response_cache(const mapper *m, const pbtxt_node *n,
                                     bool *enable) {
    osp_error *err = NULL;
    unsigned seen = 0;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f; f = f->next) {
        if (strcmp(f->name, "enable") != 0)
            return unknown_field(m, "response_cache", f);
        if ((err = once(m, "response_cache", f, &seen, 1)) ||
            (err = get_bool(m, "response_cache", f, enable)))
            return err;
    }
    return NULL;
}

/* ---- sequence_batching and model_warmup ---------------------------------
 */

/* A float field: an integer or floating-point literal. */
static osp_error *get_float(const mapper *m, const char *prefix,
                            const pbtxt_node *n, float *out) {
    char buf[64];
    if (n->kind == PBTXT_FLOAT) {
        *out = (float)n->fval;
        return NULL;
    }
    if (n->kind == PBTXT_INT && n->magnitude <= (1ull << 24)) {
        *out = n->negative ? -(float)n->magnitude : (float)n->magnitude;
        return NULL;
    }
    return config_error(m, n->line, prefix, n->name,
                        "expected a number, got %s",
                        describe(n, buf, sizeof(buf)));
}

/* A data_type enum value (TYPE_FP32, ...) into *out. */
static osp_error *get_data_type(const mapper *m, const char *prefix,
                                const pbtxt_node *n, osp_datatype *out) {
    osp_error *err = expect_kind(m, prefix, n, PBTXT_IDENT, "a data type");
    if (err)
        return err;
    *out = osp_datatype_from_config_name(n->str);
    if (*out == OSP_TYPE_INVALID)
        return config_error(m, n->line, prefix, n->name,
                            "unknown data type '%.64s'", n->str);
    return NULL;
}

/* One `dims: N` element appended to *dims (each -1 or > 0). */
static osp_error *add_dim(const mapper *m, const char *prefix,
                          const pbtxt_node *n, osp_shape *dims) {
    int64_t dim = 0;
    osp_error *err = get_int(m, prefix, n, -1, INT64_MAX, &dim);
    if (err)
        return err;
    if (dim == 0)
        return config_error(m, n->line, prefix, n->name,
                            "dimension must be -1 or > 0, got 0");
    if (dims->rank >= OSP_MAX_DIMS - 1)
        return config_error(m, n->line, prefix, n->name,
                            "more than %d dimensions", OSP_MAX_DIMS - 1);
    dims->dims[dims->rank++] = dim;
    return NULL;
}

static const char *const control_kind_names[] = {
    [OSP_SEQUENCE_CONTROL_START] = "CONTROL_SEQUENCE_START",
    [OSP_SEQUENCE_CONTROL_END] = "CONTROL_SEQUENCE_END",
    [OSP_SEQUENCE_CONTROL_READY] = "CONTROL_SEQUENCE_READY",
    [OSP_SEQUENCE_CONTROL_CORRID] = "CONTROL_SEQUENCE_CORRID",
};

/* Reads a two-element *_false_true list of field `list` of control c. */
static osp_error *map_false_true(const mapper *m, const char *prefix,
                                 const pbtxt_node *c, const char *list,
                                 osp_sequence_control *ctl) {
    osp_error *err = NULL;
    size_t i = 0;
    int line = c->line;
    for (const pbtxt_node *f = c->first_child; f; f = f->next) {
        if (strcmp(f->name, list) != 0)
            continue;
        line = f->line;
        if (i >= 2)
            break;
        if (list[0] == 'i') {
            err = get_i32(m, prefix, f, INT32_MIN, &ctl->int32_false_true[i]);
        } else if (list[0] == 'f') {
            err = get_float(m, prefix, f, &ctl->fp32_false_true[i]);
        } else {
            err = get_bool(m, prefix, f, &ctl->bool_false_true[i]);
        }
        if (err)
            return err;
        i++;
    }
    if (i != 2 || pbtxt_count(c, list) != 2)
        return config_error(m, line, prefix, list,
                            "must have exactly 2 entries for control '%.64s'",
                            ctl->name);
    return NULL;
}

/* One `control { kind ... }` of control input `name` into *ctl. */
static osp_error *map_control(const mapper *m, const char *name,
                              const pbtxt_node *c, osp_sequence_control *ctl) {
    const char *prefix = "sequence_batching.control_input.control";
    osp_error *err = NULL;
    unsigned seen = 0;
    int kind = -1;
    if ((err = expect_kind(m, prefix, c, PBTXT_MESSAGE, "a message")))
        return err;
    if (!(ctl->name = strdup(name)))
        return osp_error_out_of_memory();
    const char *list = NULL;
    for (const pbtxt_node *f = c->first_child; f; f = f->next) {
        if (!strcmp(f->name, "kind")) {
            if ((err = once(m, prefix, f, &seen, 1)) ||
                (err = get_enum(m, prefix, f, control_kind_names, 4, &kind)))
                return err;
        } else if (!strcmp(f->name, "data_type")) {
            /* TYPE_INVALID is the unset default (GET .../config shows it) */
            if (f->kind == PBTXT_IDENT && !strcmp(f->str, "TYPE_INVALID"))
                continue;
            if ((err = once(m, prefix, f, &seen, 2)) ||
                (err = get_data_type(m, prefix, f, &ctl->dtype)))
                return err;
        } else if (!strcmp(f->name, "int32_false_true") ||
                   !strcmp(f->name, "fp32_false_true") ||
                   !strcmp(f->name, "bool_false_true")) {
            if (list && strcmp(list, f->name) != 0)
                return config_error(m, f->line, prefix, f->name,
                                    "only one of int32_false_true, "
                                    "fp32_false_true and bool_false_true "
                                    "may be given for control '%.64s'",
                                    name);
            list = f->name;
        } else {
            return unknown_field(m, prefix, f);
        }
    }
    if (kind < 0)
        return config_error(m, c->line, prefix, "kind",
                            "is required for control input '%.64s'", name);
    ctl->kind = (osp_sequence_control_kind)kind;
    if (ctl->kind == OSP_SEQUENCE_CONTROL_CORRID) {
        osp_datatype dt = ctl->dtype;
        if (list || (dt != OSP_TYPE_UINT64 && dt != OSP_TYPE_INT64 &&
                     dt != OSP_TYPE_UINT32 && dt != OSP_TYPE_INT32 &&
                     dt != OSP_TYPE_BYTES))
            return config_error(
                m, c->line, prefix, "data_type",
                "control '%.64s' of kind CONTROL_SEQUENCE_CORRID needs a "
                "data_type of TYPE_UINT64, TYPE_INT64, TYPE_UINT32, "
                "TYPE_INT32 or TYPE_STRING and no *_false_true list",
                name);
        return NULL;
    }
    if (!list || (seen & 2))
        return config_error(m, c->line, prefix, "kind",
                            "control '%.64s' needs exactly one of "
                            "int32_false_true, fp32_false_true and "
                            "bool_false_true, and no data_type",
                            name);
    ctl->dtype = list[0] == 'i'   ? OSP_TYPE_INT32
                 : list[0] == 'f' ? OSP_TYPE_FP32
                                  : OSP_TYPE_BOOL;
    return map_false_true(m, prefix, c, list, ctl);
}

/* One `control_input { name control [...] }`: appends its controls. */
static osp_error *map_control_input(const mapper *m, const pbtxt_node *n,
                                    osp_sequence_batching *sb) {
    const char *prefix = "sequence_batching.control_input";
    osp_error *err = NULL;
    char *name = NULL;
    if ((err = expect_kind(m, prefix, n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f && !err; f = f->next) {
        if (!strcmp(f->name, "name"))
            err = get_string(m, prefix, f, &name);
        else if (strcmp(f->name, "control") != 0)
            err = unknown_field(m, prefix, f);
    }
    if (!err && (!name || !name[0]))
        err = config_error(m, n->line, prefix, "name", "is required");
    for (const pbtxt_node *f = n->first_child; f && !err; f = f->next) {
        if (strcmp(f->name, "control") != 0)
            continue;
        osp_sequence_control *bigger =
            realloc(sb->controls, (sb->n_controls + 1) * sizeof(*sb->controls));
        if (!bigger) {
            err = osp_error_out_of_memory();
            break;
        }
        sb->controls = bigger;
        memset(&sb->controls[sb->n_controls], 0, sizeof(*bigger));
        err = map_control(m, name, f, &sb->controls[sb->n_controls++]);
    }
    free(name);
    return err;
}

/* One `initial_state { data_type dims zero_data | data_file name }`. */
static osp_error *map_initial_state(const mapper *m, const pbtxt_node *n,
                                    osp_sequence_state *st) {
    const char *prefix = "sequence_batching.state.initial_state";
    osp_error *err = NULL;
    bool zero = false;
    if ((err = expect_kind(m, prefix, n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f && !err; f = f->next) {
        if (!strcmp(f->name, "name")) {
            err = get_string(m, prefix, f, &st->initial_name);
        } else if (!strcmp(f->name, "zero_data")) {
            err = get_bool(m, prefix, f, &zero);
        } else if (!strcmp(f->name, "data_file")) {
            err = get_string(m, prefix, f, &st->initial_data_file);
            if (!err && !is_plain_file_name(st->initial_data_file))
                err = config_error(m, f->line, prefix, f->name,
                                   "must be a file name in the "
                                   "initial_state folder, got '%.64s'",
                                   st->initial_data_file);
        } else if (!strcmp(f->name, "data_type") || !strcmp(f->name, "dims")) {
            /* the state's own data_type and dims are the ones used */
        } else {
            err = unknown_field(m, prefix, f);
        }
    }
    if (!err && zero == (st->initial_data_file != NULL))
        err = config_error(m, n->line, prefix, "",
                           "exactly one of zero_data and data_file must be "
                           "given for state '%.64s'",
                           st->input_name ? st->input_name : "");
    return err;
}

/* One `state { input_name output_name data_type dims initial_state }`. */
static osp_error *map_state(const mapper *m, const pbtxt_node *n,
                            osp_sequence_state *st) {
    const char *prefix = "sequence_batching.state";
    osp_error *err = NULL;
    const pbtxt_node *initial = NULL;
    if ((err = expect_kind(m, prefix, n, PBTXT_MESSAGE, "a message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f && !err; f = f->next) {
        if (!strcmp(f->name, "input_name"))
            err = get_string(m, prefix, f, &st->input_name);
        else if (!strcmp(f->name, "output_name"))
            err = get_string(m, prefix, f, &st->output_name);
        else if (!strcmp(f->name, "data_type"))
            err = get_data_type(m, prefix, f, &st->dtype);
        else if (!strcmp(f->name, "dims"))
            err = add_dim(m, prefix, f, &st->dims);
        else if (!strcmp(f->name, "initial_state")) {
            if (initial)
                err = config_error(m, f->line, prefix, f->name,
                                   "only one initial_state is supported");
            initial = f;
        } else if (strcmp(f->name, "use_same_buffer_for_input_output") &&
                   strcmp(f->name, "use_growable_memory"))
            err = unknown_field(m, prefix, f);
    }
    if (err)
        return err;
    if (!st->input_name || !st->input_name[0] || !st->output_name ||
        !st->output_name[0])
        return config_error(m, n->line, prefix, "",
                            "input_name and output_name are required");
    if (st->dtype == OSP_TYPE_INVALID || st->dtype == OSP_TYPE_BYTES)
        return config_error(m, n->line, prefix, "data_type",
                            "state '%.64s' needs a fixed-size data_type",
                            st->input_name);
    if (st->dims.rank == 0)
        return config_error(m, n->line, prefix, "dims",
                            "is required for state '%.64s'", st->input_name);
    for (int d = 0; d < st->dims.rank; d++)
        if (st->dims.dims[d] < 0)
            return config_error(m, n->line, prefix, "dims",
                                "state '%.64s' must have fixed dims (Osprey "
                                "keeps no growable state)",
                                st->input_name);
    return initial ? map_initial_state(m, initial, st) : NULL;
}

/* oldest { ... } or direct { ... }. */
static osp_error *map_sequence_strategy(const mapper *m, const pbtxt_node *n,
                                        int32_t max_batch_size,
                                        osp_sequence_batching *sb) {
    bool oldest = !strcmp(n->name, "oldest");
    const char *prefix =
        oldest ? "sequence_batching.oldest" : "sequence_batching.direct";
    osp_error *err = NULL;
    if (sb->strategy_given)
        return config_error(m, n->line, "sequence_batching", n->name,
                            "only one of direct and oldest may be given");
    if ((err = expect_kind(m, prefix, n, PBTXT_MESSAGE, "a message")))
        return err;
    sb->strategy_given = true;
    sb->strategy = oldest ? OSP_SEQUENCE_OLDEST : OSP_SEQUENCE_DIRECT;
    size_t n_sizes = pbtxt_count(n, "preferred_batch_size");
    if (oldest && n_sizes &&
        !(sb->preferred_batch_sizes = calloc(n_sizes, sizeof(int32_t))))
        return osp_error_out_of_memory();
    for (const pbtxt_node *f = n->first_child; f && !err; f = f->next) {
        if (!strcmp(f->name, "max_queue_delay_microseconds")) {
            err = get_uint(m, prefix, f, UINT64_MAX,
                           oldest ? &sb->oldest_max_queue_delay_us
                                  : &sb->direct_max_queue_delay_us);
        } else if (!oldest && !strcmp(f->name, "minimum_slot_utilization")) {
            err = get_float(m, prefix, f, &sb->direct_minimum_slot_utilization);
        } else if (oldest && !strcmp(f->name, "max_candidate_sequences")) {
            err = get_i32(m, prefix, f, 0, &sb->max_candidate_sequences);
        } else if (oldest && !strcmp(f->name, "preserve_ordering")) {
            err = get_bool(m, prefix, f, &sb->oldest_preserve_ordering);
        } else if (oldest && !strcmp(f->name, "preferred_batch_size")) {
            int32_t *size =
                &sb->preferred_batch_sizes[sb->n_preferred_batch_sizes];
            err = get_i32(m, prefix, f, 1, size);
            if (!err && max_batch_size > 0 && *size > max_batch_size)
                err = config_error(m, f->line, prefix, f->name,
                                   "%d is larger than max_batch_size %d", *size,
                                   max_batch_size);
            if (!err)
                sb->n_preferred_batch_sizes++;
        } else {
            err = unknown_field(m, prefix, f);
        }
    }
    return err;
}

static osp_error *map_sequence_batching(const mapper *m, const pbtxt_node *n,
                                        int32_t max_batch_size,
                                        osp_sequence_batching *sb) {
    const char *prefix = "sequence_batching";
    osp_error *err = NULL;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    sb->enabled = true;
    sb->max_sequence_idle_us = 1000000;
    size_t n_states = pbtxt_count(n, "state");
    if (n_states && !(sb->states = calloc(n_states, sizeof(*sb->states))))
        return osp_error_out_of_memory();
    for (const pbtxt_node *f = n->first_child; f && !err; f = f->next) {
        if (!strcmp(f->name, "max_sequence_idle_microseconds")) {
            err = get_uint(m, prefix, f, UINT64_MAX / 1000,
                           &sb->max_sequence_idle_us);
        } else if (!strcmp(f->name, "control_input")) {
            err = map_control_input(m, f, sb);
        } else if (!strcmp(f->name, "state")) {
            err = map_state(m, f, &sb->states[sb->n_states++]);
        } else if (!strcmp(f->name, "direct") || !strcmp(f->name, "oldest")) {
            err = map_sequence_strategy(m, f, max_batch_size, sb);
        } else if (strcmp(f->name, "iterative_sequence") &&
                   strcmp(f->name, "generative_sequence")) {
            err = unknown_field(m, prefix, f);
        }
    }
    /* Triton's normalisation: oldest without preferred sizes prefers
     * max_batch_size. */
    if (!err && sb->strategy == OSP_SEQUENCE_OLDEST &&
        !sb->n_preferred_batch_sizes && max_batch_size > 0) {
        if (!(sb->preferred_batch_sizes = calloc(1, sizeof(int32_t))))
            return osp_error_out_of_memory();
        sb->preferred_batch_sizes[0] = max_batch_size;
        sb->n_preferred_batch_sizes = 1;
    }
    return err;
}

/* One `inputs { key: "IN" value { data_type dims zero_data | ... } }`. */
static osp_error *map_warmup_input(const mapper *m, const pbtxt_node *n,
                                   osp_warmup_input *in) {
    const char *prefix = "model_warmup.inputs";
    osp_error *err = NULL;
    const pbtxt_node *value = NULL;
    int sources = 0;
    if ((err = expect_kind(m, prefix, n, PBTXT_MESSAGE, "a map entry message")))
        return err;
    for (const pbtxt_node *f = n->first_child; f && !err; f = f->next) {
        if (!strcmp(f->name, "key"))
            err = get_string(m, prefix, f, &in->key);
        else if (!strcmp(f->name, "value"))
            err =
                expect_kind(m, prefix, (value = f), PBTXT_MESSAGE, "a message");
        else
            err = unknown_field(m, prefix, f);
    }
    if (err)
        return err;
    if (!in->key || !value)
        return config_error(m, n->line, prefix, "",
                            "key and value are required");
    for (const pbtxt_node *f = value->first_child; f && !err; f = f->next) {
        bool flag = false;
        if (!strcmp(f->name, "data_type")) {
            err = get_data_type(m, prefix, f, &in->dtype);
        } else if (!strcmp(f->name, "dims")) {
            err = add_dim(m, prefix, f, &in->dims);
        } else if (!strcmp(f->name, "zero_data") ||
                   !strcmp(f->name, "random_data")) {
            err = get_bool(m, prefix, f, &flag);
            if (flag) {
                in->data = f->name[0] == 'z' ? OSP_WARMUP_ZERO_DATA
                                             : OSP_WARMUP_RANDOM_DATA;
                sources++;
            }
        } else if (!strcmp(f->name, "input_data_file")) {
            err = get_string(m, prefix, f, &in->input_data_file);
            if (!err && !is_plain_file_name(in->input_data_file))
                err = config_error(m, f->line, prefix, f->name,
                                   "must be a file name in the warmup "
                                   "folder, got '%.64s'",
                                   in->input_data_file);
            in->data = OSP_WARMUP_INPUT_DATA_FILE;
            sources++;
        } else {
            err = unknown_field(m, prefix, f);
        }
    }
    /* None given (or -1 dims) fails the sample at load, as in Triton. */
    if (!err && sources > 1)
        err = config_error(m, value->line, prefix, "",
                           "input '%.64s' may have only one of zero_data, "
                           "random_data and input_data_file",
                           in->key);
    return err;
}

/* One `model_warmup { name batch_size inputs count }`. */
static osp_error *map_warmup(const mapper *m, const pbtxt_node *n,
                             osp_model_warmup *w) {
    const char *prefix = "model_warmup";
    osp_error *err = NULL;
    if ((err = expect_kind(m, "", n, PBTXT_MESSAGE, "a message")))
        return err;
    size_t n_inputs = pbtxt_count(n, "inputs");
    if (n_inputs && !(w->inputs = calloc(n_inputs, sizeof(*w->inputs))))
        return osp_error_out_of_memory();
    for (const pbtxt_node *f = n->first_child; f && !err; f = f->next) {
        uint64_t v = 0;
        if (!strcmp(f->name, "name")) {
            err = get_string(m, prefix, f, &w->name);
        } else if (!strcmp(f->name, "batch_size") ||
                   !strcmp(f->name, "count")) {
            err = get_uint(m, prefix, f, 1u << 20, &v);
            *(f->name[0] == 'b' ? &w->batch_size : &w->count) = (uint32_t)v;
        } else if (!strcmp(f->name, "inputs")) {
            err = map_warmup_input(m, f, &w->inputs[w->n_inputs++]);
        } else {
            err = unknown_field(m, prefix, f);
        }
    }
    if (!err && !w->name && !(w->name = strdup("")))
        err = osp_error_out_of_memory();
    return err;
}

static osp_error *map_warmups(const mapper *m, const pbtxt_node *root,
                              osp_model_config *cfg) {
    size_t n = pbtxt_count(root, "model_warmup");
    if (n == 0)
        return NULL;
    if (!(cfg->warmups = calloc(n, sizeof(*cfg->warmups))))
        return osp_error_out_of_memory();
    for (const pbtxt_node *f = root->first_child; f; f = f->next) {
        if (strcmp(f->name, "model_warmup") != 0)
            continue;
        osp_error *err = map_warmup(m, f, &cfg->warmups[cfg->n_warmups++]);
        if (err)
            return err;
    }
    return NULL;
}

/* The top-level fields. max_batch_size is read first because input/output
 * dims and preferred batch sizes are checked against it. */
static osp_error *map_config(const mapper *m, const pbtxt_node *root,
                             osp_model_config *cfg) {
    osp_error *err = NULL;
    unsigned seen = 0;
    const pbtxt_node *mbs = nth_field(root, "max_batch_size", 0);
    if (mbs && (err = get_i32(m, "", mbs, 0, &cfg->max_batch_size)))
        return err;
    if ((err = map_ios(m, root, true, cfg->max_batch_size, &cfg->inputs,
                       &cfg->n_inputs)) ||
        (err = map_ios(m, root, false, cfg->max_batch_size, &cfg->outputs,
                       &cfg->n_outputs)) ||
        (err = map_parameters(m, root, cfg)) ||
        (err = map_warmups(m, root, cfg)))
        return err;

    size_t n_groups = pbtxt_count(root, "instance_group");
    if (n_groups > 0) {
        cfg->instance_groups = calloc(n_groups, sizeof(*cfg->instance_groups));
        if (!cfg->instance_groups)
            return osp_error_out_of_memory();
    }

    const pbtxt_node *scheduling = NULL;
    cfg->version_policy.kind = OSP_VERSION_POLICY_LATEST;
    cfg->version_policy.latest_num_versions = 1;
    cfg->optimization.input_pinned_memory = true;
    cfg->optimization.output_pinned_memory = true;
    for (const pbtxt_node *f = root->first_child; f; f = f->next) {
        const char *name = f->name;
        if (!strcmp(name, "dynamic_batching") ||
            !strcmp(name, "sequence_batching") ||
            !strcmp(name, "ensemble_scheduling")) {
            if (scheduling && strcmp(scheduling->name, name) != 0)
                return config_error(m, f->line, "", name,
                                    "cannot be given together with %s",
                                    scheduling->name);
            scheduling = f;
        }

        if (!strcmp(name, "name")) {
            if ((err = once(m, "", f, &seen, 1)) ||
                (err = get_string(m, "", f, &cfg->name)))
                return err;
        } else if (!strcmp(name, "platform")) {
            if ((err = once(m, "", f, &seen, 2)) ||
                (err = get_string(m, "", f, &cfg->platform)))
                return err;
        } else if (!strcmp(name, "backend")) {
            if ((err = once(m, "", f, &seen, 4)) ||
                (err = get_string(m, "", f, &cfg->backend)))
                return err;
        } else if (!strcmp(name, "max_batch_size")) {
            if ((err = once(m, "", f, &seen, 8)))
                return err; /* value read above */
        } else if (!strcmp(name, "version_policy")) {
            if ((err = once(m, "", f, &seen, 16)) ||
                (err = map_version_policy(m, f, &cfg->version_policy)))
                return err;
        } else if (!strcmp(name, "instance_group")) {
            osp_instance_group *ig =
                &cfg->instance_groups[cfg->n_instance_groups++];
            if ((err = map_instance_group(m, f, ig)))
                return err;
        } else if (!strcmp(name, "dynamic_batching")) {
            if ((err = once(m, "", f, &seen, 32)) ||
                (err = map_dynamic_batching(m, f, cfg->max_batch_size,
                                            &cfg->dynamic_batching)))
                return err;
        } else if (!strcmp(name, "sequence_batching")) {
            if ((err = once(m, "", f, &seen, 512)) ||
                (err = map_sequence_batching(m, f, cfg->max_batch_size,
                                             &cfg->sequence_batching)))
                return err;
        } else if (!strcmp(name, "model_transaction_policy")) {
            if ((err = once(m, "", f, &seen, 64)) ||
                (err = map_transaction_policy(m, f, &cfg->decoupled)))
                return err;
        } else if (!strcmp(name, "default_model_filename")) {
            if ((err = once(m, "", f, &seen, 128)) ||
                (err = get_string(m, "", f, &cfg->default_model_filename)))
                return err;
            /* Backends open it in the version folder: no path. */
            if (cfg->default_model_filename[0] &&
                !is_plain_file_name(cfg->default_model_filename))
                return config_error(m, f->line, "", name,
                                    "must be a file name in the version "
                                    "folder, got '%.64s'",
                                    cfg->default_model_filename);
        } else if (!strcmp(name, "optimization")) {
            if ((err = once(m, "", f, &seen, 256)) ||
                (err = map_optimization(m, f, &cfg->optimization)))
                return err;
        } else if (!strcmp(name, "ensemble_scheduling")) {
            if ((err = once(m, "", f, &seen, 512)) ||
                (err =
                     map_ensemble_scheduling(m, f, &cfg->ensemble_scheduling)))
                return err;
        } else if (!strcmp(name, "response_cache")) {
            if ((err = once(m, "", f, &seen, 1024)) ||
                (err = map_response_cache(m, f, &cfg->response_cache)))
                return err;
        } else if (!strcmp(name, "input") || !strcmp(name, "output") ||
                   !strcmp(name, "parameters") ||
                   !strcmp(name, "model_warmup")) {
            /* mapped above */
        } else if (!is_one_of(name, ignored_config_fields)) {
            return unknown_field(m, "", f);
        }
    }
    return NULL;
}

/* Fills NULL name/platform/backend/default_model_filename with "" (the
 * header promises non-NULL; name is "" until the loader sets it). */
static osp_error *fill_empty_strings(osp_model_config *cfg) {
    char **fields[] = {&cfg->name, &cfg->platform, &cfg->backend,
                       &cfg->default_model_filename};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (!*fields[i] && !(*fields[i] = strdup("")))
            return osp_error_out_of_memory();
    }
    return NULL;
}

osp_error *osp_model_config_parse(const char *text, size_t len,
                                  const char *filename,
                                  osp_model_config **out) {
    osp_error *err = NULL;
    pbtxt_node *root = NULL;
    mapper m = {.file = filename ? filename : "<config>"};
    osp_model_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return osp_error_out_of_memory();
    err = pbtxt_parse(text, len, m.file, &root);
    if (!err)
        err = map_config(&m, root, cfg);
    if (!err)
        err = fill_empty_strings(cfg);
    pbtxt_free(root);
    if (err)
        osp_model_config_free(cfg);
    else
        *out = cfg;
    return err;
}

/* Moves every top-level field of `over` into `base`, dropping the base's
 * fields of the same names first (so a repeated field is replaced whole). */
static void overlay_fields(pbtxt_node *base, pbtxt_node *over) {
    for (pbtxt_node *f = over->first_child; f; f = f->next) {
        pbtxt_node **link = &base->first_child;
        base->last_child = NULL;
        while (*link) {
            pbtxt_node *b = *link;
            if (strcmp(b->name, f->name) == 0) {
                *link = b->next;
                b->next = NULL;
                pbtxt_free(b);
                continue;
            }
            base->last_child = b;
            link = &b->next;
        }
    }
    if (over->first_child) {
        if (base->last_child)
            base->last_child->next = over->first_child;
        else
            base->first_child = over->first_child;
        base->last_child = over->last_child;
        over->first_child = over->last_child = NULL;
    }
}

osp_error *osp_model_config_parse_over(const char *text, size_t len,
                                       const char *filename, const char *base,
                                       size_t base_len,
                                       const char *base_filename,
                                       osp_model_config **out) {
    osp_error *err = NULL;
    pbtxt_node *over_root = NULL, *base_root = NULL, *root;
    mapper m = {.file = filename ? filename : "<config>"};
    osp_model_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return osp_error_out_of_memory();
    if ((err = pbtxt_parse(text, len, m.file, &over_root)))
        goto out;
    root = over_root;
    bool partial = pbtxt_count(over_root, "backend") == 0 &&
                   pbtxt_count(over_root, "platform") == 0;
    if (base && partial) {
        if ((err = pbtxt_parse(base, base_len, base_filename, &base_root)))
            goto out;
        overlay_fields(base_root, over_root);
        root = base_root;
    }
    if (!(err = map_config(&m, root, cfg)))
        err = fill_empty_strings(cfg);
out:
    pbtxt_free(over_root);
    pbtxt_free(base_root);
    if (err)
        osp_model_config_free(cfg);
    else
        *out = cfg;
    return err;
}

osp_error *osp_model_config_load(const char *path, osp_model_config **out) {
    osp_error *err = NULL;
    char *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return osp_error_new(e == ENOENT || e == ENOTDIR ? OSP_ERROR_NOT_FOUND
                                                         : OSP_ERROR_INTERNAL,
                             "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err = osp_error_new(OSP_ERROR_INTERNAL, "%s: cannot stat: %s", path,
                            strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG, "%s: not a regular file",
                            path);
        goto out;
    }
    if ((uint64_t)st.st_size > OSP_MODEL_CONFIG_MAX_BYTES) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG, "%s: larger than %u bytes",
                            path, OSP_MODEL_CONFIG_MAX_BYTES);
        goto out;
    }
    size_t size = (size_t)st.st_size, got = 0;
    text = malloc(size + 1);
    if (!text) {
        err = osp_error_out_of_memory();
        goto out;
    }
    while (got < size) {
        ssize_t r = read(fd, text + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = osp_error_new(OSP_ERROR_INTERNAL, "%s: read failed: %s", path,
                                strerror(errno));
            goto out;
        }
        if (r == 0)
            break; /* the file shrank; parse what is there */
        got += (size_t)r;
    }
    err = osp_model_config_parse(text, got, path, out);
out:
    free(text);
    close(fd);
    return err;
}

static void free_parameters(osp_model_parameter *params, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(params[i].key);
        free(params[i].value);
    }
    free(params);
}

static void free_accelerators(osp_execution_accelerator *accs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(accs[i].name);
        free_parameters(accs[i].parameters, accs[i].n_parameters);
    }
    free(accs);
}

static void free_ios(osp_model_io *ios, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(ios[i].name);
        free(ios[i].label_filename);
    }
    free(ios);
}

void osp_model_config_free(osp_model_config *cfg) {
    if (!cfg)
        return;
    free(cfg->name);
    free(cfg->platform);
    free(cfg->backend);
    free_ios(cfg->inputs, cfg->n_inputs);
    free_ios(cfg->outputs, cfg->n_outputs);
    free(cfg->version_policy.versions);
    for (size_t i = 0; i < cfg->n_instance_groups; i++) {
        free(cfg->instance_groups[i].name);
        free(cfg->instance_groups[i].gpus);
    }
    free(cfg->instance_groups);
    free(cfg->dynamic_batching.preferred_batch_sizes);
    free(cfg->dynamic_batching.priority_queue_policies);
    free_parameters(cfg->parameters, cfg->n_parameters);
    free(cfg->default_model_filename);
    free_accelerators(cfg->optimization.gpu_accelerators,
                      cfg->optimization.n_gpu_accelerators);
    free_accelerators(cfg->optimization.cpu_accelerators,
                      cfg->optimization.n_cpu_accelerators);
    free_parameters(cfg->backend_config, cfg->n_backend_config);
    for (size_t i = 0; i < cfg->ensemble_scheduling.n_steps; i++) {
        osp_ensemble_step *st = &cfg->ensemble_scheduling.steps[i];
        free(st->model_name);
        free_parameters(st->input_map, st->n_input_map);
        free_parameters(st->output_map, st->n_output_map);
    }
    free(cfg->ensemble_scheduling.steps);
    osp_sequence_batching *sb = &cfg->sequence_batching;
    for (size_t i = 0; i < sb->n_controls; i++)
        free(sb->controls[i].name);
    free(sb->controls);
    for (size_t i = 0; i < sb->n_states; i++) {
        free(sb->states[i].input_name);
        free(sb->states[i].output_name);
        free(sb->states[i].initial_name);
        free(sb->states[i].initial_data_file);
    }
    free(sb->states);
    free(sb->preferred_batch_sizes);
    for (size_t w = 0; w < cfg->n_warmups; w++) {
        for (size_t i = 0; i < cfg->warmups[w].n_inputs; i++) {
            free(cfg->warmups[w].inputs[i].key);
            free(cfg->warmups[w].inputs[i].input_data_file);
        }
        free(cfg->warmups[w].inputs);
        free(cfg->warmups[w].name);
    }
    free(cfg->warmups);
    free(cfg);
}

const char *osp_model_config_parameter(const osp_model_config *cfg,
                                       const char *key) {
    for (size_t i = 0; cfg && key && i < cfg->n_parameters; i++)
        if (strcmp(cfg->parameters[i].key, key) == 0)
            return cfg->parameters[i].value;
    return NULL;
}

const char *osp_model_config_backend_setting(const osp_model_config *cfg,
                                             const char *key) {
    for (size_t i = 0; cfg && key && i < cfg->n_backend_config; i++)
        if (strcmp(cfg->backend_config[i].key, key) == 0)
            return cfg->backend_config[i].value;
    return NULL;
}

static int io_index(const osp_model_io *ios, size_t n, const char *name) {
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(ios[i].name, name) == 0)
            return (int)i;
    return -1;
}

int osp_model_config_input_index(const osp_model_config *cfg,
                                 const char *name) {
    return cfg ? io_index(cfg->inputs, cfg->n_inputs, name) : -1;
}

int osp_model_config_output_index(const osp_model_config *cfg,
                                  const char *name) {
    return cfg ? io_index(cfg->outputs, cfg->n_outputs, name) : -1;
}
