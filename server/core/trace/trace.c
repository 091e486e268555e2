/*
 * The tracer: trace settings with Triton's semantics (TraceManager in
 * triton-inference-server/server src/tracer.cc), sampling, and the
 * per-request trace objects. Files and the writer are in trace_file.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cond_deadline.h"
#include "osprey/log.h"
#include "trace_internal.h"

#define DEFAULT_MAX_PENDING_BYTES ((size_t)64 << 20)
/* A name from the API leaves room for ".<idx>" within NAME_MAX. */
#define TRACE_FILE_NAME_MAX 240

static const char *const activity_names[OSP_TRACE_ACTIVITY_COUNT_] = {
    [OSP_TRACE_HTTP_RECV_START] = "HTTP_RECV_START",
    [OSP_TRACE_HTTP_RECV_END] = "HTTP_RECV_END",
    [OSP_TRACE_GRPC_WAITREAD_START] = "GRPC_WAITREAD_START",
    [OSP_TRACE_GRPC_WAITREAD_END] = "GRPC_WAITREAD_END",
    [OSP_TRACE_REQUEST_START] = "REQUEST_START",
    [OSP_TRACE_QUEUE_START] = "QUEUE_START",
    [OSP_TRACE_COMPUTE_START] = "COMPUTE_START",
    [OSP_TRACE_COMPUTE_INPUT_END] = "COMPUTE_INPUT_END",
    [OSP_TRACE_COMPUTE_OUTPUT_START] = "COMPUTE_OUTPUT_START",
    [OSP_TRACE_COMPUTE_END] = "COMPUTE_END",
    [OSP_TRACE_INFER_RESPONSE_COMPLETE] = "INFER_RESPONSE_COMPLETE",
    [OSP_TRACE_REQUEST_END] = "REQUEST_END",
    [OSP_TRACE_HTTP_SEND_START] = "HTTP_SEND_START",
    [OSP_TRACE_HTTP_SEND_END] = "HTTP_SEND_END",
    [OSP_TRACE_GRPC_SEND_START] = "GRPC_SEND_START",
    [OSP_TRACE_GRPC_SEND_END] = "GRPC_SEND_END",
};

static const char *const tensor_activity_names[] = {
    [OSP_TRACE_TENSOR_QUEUE_INPUT] = "TENSOR_QUEUE_INPUT",
    [OSP_TRACE_TENSOR_BACKEND_INPUT] = "TENSOR_BACKEND_INPUT",
    [OSP_TRACE_TENSOR_BACKEND_OUTPUT] = "TENSOR_BACKEND_OUTPUT",
};

const char *osp_trace_activity_name(osp_trace_activity a) {
    return (unsigned)a < OSP_TRACE_ACTIVITY_COUNT_ ? activity_names[a]
                                                   : "UNKNOWN";
}

const char *osp_trace_tensor_activity_name(osp_trace_tensor_activity a) {
    return (unsigned)a < OSP_TRACE_TENSOR_ACTIVITY_COUNT_
               ? tensor_activity_names[a]
               : "UNKNOWN";
}

/* ---- options ------------------------------------------------------------- */

void osp_tracer_options_init(osp_tracer_options *opts) {
    memset(opts, 0, sizeof(*opts));
    opts->level = OSP_TRACE_LEVEL_OFF;
    opts->rate = 1000;
    opts->count = -1;
    opts->log_frequency = 0;
    opts->file = "";
    opts->max_pending_bytes = DEFAULT_MAX_PENDING_BYTES;
}

/* Whole-string decimal in [min, max]. */
static bool parse_flag_number(const char *s, long long min, long long max,
                              long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

osp_error *osp_tracer_options_parse(osp_tracer_options *opts,
                                    const char *value) {
    const char *eq = strchr(value, '=');
    if (!eq)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "--trace-config expects [<mode>,]<setting>=<value>"
                             ", got '%s'",
                             value);
    const char *comma = memchr(value, ',', (size_t)(eq - value));
    const char *key = comma ? comma + 1 : value;
    size_t key_len = (size_t)(eq - key);
    const char *v = eq + 1;
    if (comma) {
        size_t mode_len = (size_t)(comma - value);
        if (mode_len == 13 && strncmp(value, "opentelemetry", 13) == 0)
            return osp_error_new(OSP_ERROR_UNSUPPORTED,
                                 "--trace-config: the opentelemetry trace "
                                 "mode is not supported, only triton");
        if (mode_len != 6 || strncmp(value, "triton", 6) != 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "--trace-config: unknown trace mode '%.*s' "
                                 "in '%s'",
                                 (int)mode_len, value, value);
    }
#define KEY_IS(k) (key_len == strlen(k) && strncmp(key, k, key_len) == 0)
    long long n;
    if (KEY_IS("file")) {
        if (strlen(v) > OSP_TRACE_PATH_MAX)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "--trace-config: the trace file path is "
                                 "longer than %d bytes",
                                 OSP_TRACE_PATH_MAX);
        opts->file = v;
    } else if (KEY_IS("log-frequency")) {
        if (!parse_flag_number(v, 0, UINT32_MAX, &n))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "--trace-config: invalid log-frequency '%s' "
                                 "(expecting 0 to %u)",
                                 v, UINT32_MAX);
        opts->log_frequency = (uint32_t)n;
    } else if (comma) {
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "--trace-config: unknown triton mode setting "
                             "'%.*s' (expecting file or log-frequency)",
                             (int)key_len, key);
    } else if (KEY_IS("rate")) {
        if (!parse_flag_number(v, 0, UINT32_MAX, &n))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "--trace-config: invalid rate '%s' "
                                 "(expecting 0 to %u)",
                                 v, UINT32_MAX);
        opts->rate = (uint32_t)n;
    } else if (KEY_IS("count")) {
        if (!parse_flag_number(v, -1, INT32_MAX, &n))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "--trace-config: invalid count '%s' "
                                 "(expecting -1 to %d)",
                                 v, INT32_MAX);
        opts->count = (int32_t)n;
    } else if (KEY_IS("level")) {
        if (strcasecmp(v, "OFF") == 0)
            opts->level = OSP_TRACE_LEVEL_OFF;
        else if (strcasecmp(v, "TIMESTAMPS") == 0)
            opts->level |= OSP_TRACE_LEVEL_TIMESTAMPS;
        else if (strcasecmp(v, "TENSORS") == 0)
            opts->level |= OSP_TRACE_LEVEL_TENSORS;
        else
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "--trace-config: invalid level '%s' "
                                 "(expecting OFF, TIMESTAMPS or TENSORS)",
                                 v);
    } else if (KEY_IS("mode")) {
        if (strcmp(v, "opentelemetry") == 0)
            return osp_error_new(OSP_ERROR_UNSUPPORTED,
                                 "--trace-config: the opentelemetry trace "
                                 "mode is not supported, only triton");
        if (strcmp(v, "triton") != 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "--trace-config: unknown trace mode '%s'", v);
    } else {
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "--trace-config: unknown setting '%.*s' "
                             "(expecting rate, level, count, mode, file or "
                             "log-frequency)",
                             (int)key_len, key);
    }
#undef KEY_IS
    return NULL;
}

/* ---- settings ------------------------------------------------------------ */

static const char *invalid_reason(unsigned level, uint32_t rate,
                                  const trace_file *file) {
    if (level == OSP_TRACE_LEVEL_OFF)
        return "tracing is disabled";
    if (rate == 0)
        return "sample rate must be non-zero";
    if (file->name[0] == '\0')
        return "trace file name is not given";
    return NULL;
}

typedef struct setting_values {
    unsigned level;
    uint32_t rate;
    int32_t count;
    uint32_t log_frequency;
    trace_file *file; /* borrowed; the new setting takes a reference */
    bool level_specified, rate_specified, count_specified;
    bool log_frequency_specified, file_specified;
} setting_values;

/* A new setting with one reference, listed in t->settings. Call with
 * t->lock held. NULL on OOM. */
static trace_setting *setting_new_locked(osp_tracer *t,
                                         const setting_values *v) {
    trace_setting *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return NULL;
    }
    s->job.kind = TRACE_JOB_SETTING_DONE;
    s->tracer = t;
    atomic_init(&s->refs, 1);
    atomic_init(&s->dropped, 0);
    s->level = v->level;
    s->rate = v->rate;
    s->count = v->count;
    s->log_frequency = v->log_frequency;
    s->file = v->file;
    trace_file_ref_locked(v->file);
    s->level_specified = v->level_specified;
    s->rate_specified = v->rate_specified;
    s->count_specified = v->count_specified;
    s->log_frequency_specified = v->log_frequency_specified;
    s->file_specified = v->file_specified;
    s->invalid_reason = invalid_reason(v->level, v->rate, v->file);
    s->next = t->settings;
    if (t->settings)
        t->settings->prev = s;
    t->settings = s;
    return s;
}

static int32_t setting_count(trace_setting *s) {
    pthread_mutex_lock(&s->mu);
    int32_t count = s->count;
    pthread_mutex_unlock(&s->mu);
    return count;
}

static model_setting *find_model_locked(osp_tracer *t, const char *model) {
    for (size_t i = 0; i < t->n_models; i++)
        if (strcmp(t->models[i].model, model) == 0)
            return &t->models[i];
    return NULL;
}

/* Sampling is worth trying when some setting is valid (its count may
 * still have run out). */
static void update_active_locked(osp_tracer *t) {
    bool active = !t->shut && t->global && !t->global->invalid_reason;
    for (size_t i = 0; i < t->n_models && !active && !t->shut; i++)
        active = !t->models[i].setting->invalid_reason;
    atomic_store(&t->active, active);
}

static void retire(trace_setting **list, trace_setting *s) {
    if (!s)
        return;
    s->retired = *list;
    *list = s;
}

static void unref_retired(trace_setting *list) {
    while (list) {
        trace_setting *next = list->retired;
        trace_setting_unref(list);
        list = next;
    }
}

/* Triton's TraceManager::UpdateTraceSettingInternal for `model` (NULL =
 * global). `new_file`, when not NULL, is the file a global update sets
 * (borrowed). Replaced settings are added to *retired. Call with t->lock
 * held. */
static osp_error *update_locked(osp_tracer *t, const char *model,
                                const osp_trace_update *u, trace_file *new_file,
                                trace_setting **retired) {
    model_setting *entry = model ? find_model_locked(t, model) : NULL;
    trace_setting *current =
        model ? (entry ? entry->setting : NULL) : t->global;
    trace_setting *fallback = model ? t->global : t->global_default;

    setting_values v = {
        .level = fallback->level,
        .rate = fallback->rate,
        .count = setting_count(fallback),
        .log_frequency = fallback->log_frequency,
        .file = fallback->file,
    };
#define SPECIFIED(change, flag)                                                \
    ((change) == OSP_TRACE_CLEAR                                               \
         ? false                                                               \
         : ((current && current->flag) || (change) == OSP_TRACE_SET))
    v.level_specified = SPECIFIED(u->level_change, level_specified);
    v.rate_specified = SPECIFIED(u->rate_change, rate_specified);
    v.count_specified = SPECIFIED(u->count_change, count_specified);
    v.log_frequency_specified =
        SPECIFIED(u->log_frequency_change, log_frequency_specified);
    /* The file is never model-specific. */
    v.file_specified = !model && SPECIFIED(u->file_change, file_specified);
#undef SPECIFIED
    if (v.level_specified)
        v.level = u->level_change == OSP_TRACE_SET ? u->level : current->level;
    if (v.rate_specified)
        v.rate = u->rate_change == OSP_TRACE_SET ? u->rate : current->rate;
    if (v.count_specified)
        v.count = u->count_change == OSP_TRACE_SET ? u->count
                                                   : setting_count(current);
    if (v.log_frequency_specified)
        v.log_frequency = u->log_frequency_change == OSP_TRACE_SET
                              ? u->log_frequency
                              : current->log_frequency;
    if (v.file_specified)
        v.file = u->file_change == OSP_TRACE_SET ? new_file : current->file;

    if (model && !(v.level_specified || v.rate_specified || v.count_specified ||
                   v.log_frequency_specified)) {
        /* Nothing of its own left: the model follows the global setting. */
        if (entry) {
            retire(retired, entry->setting);
            free(entry->model);
            *entry = t->models[--t->n_models];
        }
        return NULL;
    }

    const char *reason = invalid_reason(v.level, v.rate, v.file);
    if ((reason || v.count == 0) && v.level != OSP_TRACE_LEVEL_OFF)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Attempting to set invalid trace setting :%s",
                             reason ? reason : "");

    if (model && !entry) {
        if (t->n_models == t->cap_models) {
            size_t cap = t->cap_models ? t->cap_models * 2 : 8;
            model_setting *bigger = realloc(t->models, cap * sizeof(*bigger));
            if (!bigger)
                return osp_error_out_of_memory();
            t->models = bigger;
            t->cap_models = cap;
        }
        entry = &t->models[t->n_models];
        entry->model = strdup(model);
        entry->setting = NULL;
        if (!entry->model)
            return osp_error_out_of_memory();
        t->n_models++;
    }
    trace_setting *s = setting_new_locked(t, &v);
    if (!s) {
        if (entry && !entry->setting) {
            free(entry->model);
            *entry = t->models[--t->n_models];
        }
        return osp_error_out_of_memory();
    }
    if (model) {
        retire(retired, entry->setting);
        entry->setting = s;
    } else {
        retire(retired, t->global);
        t->global = s;
    }
    return NULL;
}

bool osp_tracer_file_updates_allowed(const osp_tracer *tracer) {
    return tracer->dir_fd >= 0;
}

/* A name the API may set: a plain, new or regular, file inside the trace
 * file directory. */
static osp_error *check_file_name(osp_tracer *t, const char *name, size_t len) {
    const char *why = NULL;
    struct stat st;
    if (len == 0)
        why = "a file name is required";
    else if (memchr(name, '\0', len))
        why = "the name contains a NUL character";
    else if (len > TRACE_FILE_NAME_MAX)
        why = "the name is longer than 240 bytes";
    else if (memchr(name, '/', len) || strcmp(name, ".") == 0 ||
             strcmp(name, "..") == 0)
        why = "expecting a plain file name inside the trace file directory "
              "(no '/', not '.' or '..')";
    else if (fstatat(t->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode))
            why = "it is a symbolic link; trace files are only created "
                  "inside the trace file directory";
        else if (!S_ISREG(st.st_mode))
            why = "it exists and is not a regular file";
    } else if (errno != ENOENT) {
        why = "it cannot be checked in the trace file directory";
    }
    if (!why)
        return NULL;
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "Unable to set 'trace_file' to '%.*s': %s",
                         (int)(len > 256 ? 256 : len), name, why);
}

osp_error *osp_tracer_update_settings(osp_tracer *tracer, const char *model,
                                      const osp_trace_update *update) {
    osp_tracer *t = tracer;
    if (model && model[0] == '\0')
        model = NULL;
    trace_file *new_file = NULL;
    if (update->file_change != OSP_TRACE_KEEP) {
        if (t->dir_fd < 0)
            return osp_error_new(OSP_ERROR_UNSUPPORTED,
                                 "trace file location can not be updated "
                                 "through network protocol");
        /* A model never has a file of its own, so clearing it there is
         * a no-op; setting it is refused. */
        if (model && update->file_change == OSP_TRACE_SET)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "Unable to set 'trace_file' for model '%s': "
                                 "the trace file is a global setting",
                                 model);
        if (!model && update->file_change == OSP_TRACE_SET) {
            osp_error *err = check_file_name(t, update->file, update->file_len);
            if (err)
                return err;
            /* A new file object: its index restarts at 0. */
            new_file = trace_file_new(t, update->file, true);
            if (!new_file)
                return osp_error_out_of_memory();
        }
    }

    trace_setting *retired = NULL;
    osp_error *err = NULL;
    pthread_mutex_lock(&t->lock);
    if (t->shut) {
        err = osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                   OSP_REASON_SHUTTING_DOWN,
                                   "Server is shutting down");
    } else {
        err = update_locked(t, model, update, new_file, &retired);
        /* A global update recomputes every model setting that tracks it
         * (all of them: the file is never model-specific). */
        static const osp_trace_update keep = {0};
        for (size_t i = 0; !err && !model && i < t->n_models; i++)
            err = update_locked(t, t->models[i].model, &keep, NULL, &retired);
        update_active_locked(t);
    }
    pthread_mutex_unlock(&t->lock);
    unref_retired(retired);
    trace_file_unref(new_file); /* the new setting holds its own reference */
    return err;
}

void osp_tracer_get_settings(osp_tracer *tracer, const char *model,
                             osp_trace_settings *out) {
    osp_tracer *t = tracer;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&t->lock);
    model_setting *entry =
        model && model[0] ? find_model_locked(t, model) : NULL;
    trace_setting *s = entry ? entry->setting : t->global;
    if (s) {
        out->level = s->level;
        out->rate = s->rate;
        out->count = setting_count(s);
        out->log_frequency = s->log_frequency;
        snprintf(out->file, sizeof(out->file), "%s", s->file->name);
    }
    pthread_mutex_unlock(&t->lock);
    out->mode = "triton";
}

void osp_tracer_get_stats(osp_tracer *tracer, osp_tracer_stats *out) {
    out->traces_written = atomic_load(&tracer->written);
    out->traces_dropped = atomic_load(&tracer->dropped);
    out->write_errors = atomic_load(&tracer->write_errors);
}

/* ---- lifecycle ----------------------------------------------------------- */

osp_error *osp_tracer_new(const osp_tracer_options *opts, osp_tracer **out) {
    osp_tracer *t = calloc(1, sizeof(*t));
    if (!t)
        return osp_error_out_of_memory();
    t->dir_fd = -1;
    if (opts->file_directory) {
        t->dir_fd =
            open(opts->file_directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (t->dir_fd < 0) {
            osp_error *err =
                osp_error_new(OSP_ERROR_INVALID_ARG,
                              "--trace-file-directory '%s' is "
                              "not an accessible directory: %s",
                              opts->file_directory, strerror(errno));
            free(t);
            return err;
        }
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->qlock, NULL);
    cond_init_monotonic(&t->qcond);
    atomic_init(&t->active, false);
    atomic_init(&t->next_id, 0);
    atomic_init(&t->written, 0);
    atomic_init(&t->dropped, 0);
    atomic_init(&t->write_errors, 0);
    t->max_pending_bytes = opts->max_pending_bytes ? opts->max_pending_bytes
                                                   : DEFAULT_MAX_PENDING_BYTES;

    osp_error *err = NULL;
    trace_file *file = trace_file_new(t, opts->file ? opts->file : "", false);
    if (!file) {
        err = osp_error_out_of_memory();
        goto fail;
    }
    setting_values v = {
        .level = opts->level,
        .rate = opts->rate,
        .count = opts->count,
        .log_frequency = opts->log_frequency,
        .file = file,
    };
    pthread_mutex_lock(&t->lock);
    t->global_default = setting_new_locked(t, &v);
    t->global = setting_new_locked(t, &v);
    update_active_locked(t);
    pthread_mutex_unlock(&t->lock);
    trace_file_unref(file); /* the settings hold it */
    if (!t->global_default || !t->global) {
        err = osp_error_out_of_memory();
        goto fail;
    }
    if ((err = trace_writer_start(t)))
        goto fail;
    if (opts->level != OSP_TRACE_LEVEL_OFF && t->global->invalid_reason)
        OSP_LOG_WARN("tracing is enabled but no request will be traced: %s",
                     t->global->invalid_reason);
    *out = t;
    return NULL;
fail:
    osp_tracer_free(t);
    return err;
}

void osp_tracer_shutdown(osp_tracer *tracer) {
    osp_tracer *t = tracer;
    trace_setting *retired = NULL;
    pthread_mutex_lock(&t->lock);
    bool was_shut = t->shut;
    t->shut = true;
    atomic_store(&t->active, false);
    retire(&retired, t->global_default);
    retire(&retired, t->global);
    t->global_default = t->global = NULL;
    for (size_t i = 0; i < t->n_models; i++) {
        retire(&retired, t->models[i].setting);
        free(t->models[i].model);
    }
    t->n_models = 0;
    pthread_mutex_unlock(&t->lock);
    if (was_shut)
        return;
    /* The settings' final writes and the files' "]" are queued by these
     * unrefs; the writer runs them all before it stops. */
    unref_retired(retired);
    trace_writer_stop(t);
    uint64_t dropped = atomic_load(&t->dropped);
    if (dropped > 0)
        OSP_LOG_WARN("%llu traces were dropped: the trace writer could not "
                     "keep up",
                     (unsigned long long)dropped);
}

void osp_tracer_free(osp_tracer *tracer) {
    if (!tracer)
        return;
    osp_tracer_shutdown(tracer);
    osp_tracer *t = tracer;
    /* Whatever is still listed was only referenced by the lists (or by
     * traces the caller failed to end): free without writing. */
    while (t->settings)
        trace_setting_destroy(t->settings);
    while (t->files) {
        trace_file *f = t->files;
        t->files = f->next;
        if (f->fd >= 0)
            close(f->fd);
        free(f->name);
        free(f);
    }
    free(t->models);
    if (t->dir_fd >= 0)
        close(t->dir_fd);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->qlock);
    pthread_cond_destroy(&t->qcond);
    free(t);
}

/* ---- sampling and traces ------------------------------------------------- */

/* Triton's TraceSetting::SampleTrace for the setting of `model`. */
static osp_trace *sample_slow(osp_tracer *t, const char *model) {
    pthread_mutex_lock(&t->lock);
    trace_setting *s = NULL;
    if (!t->shut) {
        model_setting *entry =
            t->n_models && model ? find_model_locked(t, model) : NULL;
        s = entry ? entry->setting : t->global;
        if (s && !s->invalid_reason)
            atomic_fetch_add(&s->refs, 1);
        else
            s = NULL;
    }
    pthread_mutex_unlock(&t->lock);
    if (!s)
        return NULL;

    pthread_mutex_lock(&s->mu);
    bool take = false;
    if (s->count != 0) {
        take = ++s->sample % s->rate == 0;
        if (take) {
            if (s->count > 0)
                s->count--;
            s->created++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (!take) {
        trace_setting_unref(s);
        return NULL;
    }
    osp_trace *trace = calloc(1, sizeof(*trace));
    if (!trace) {
        atomic_fetch_add(&s->dropped, 1);
        atomic_fetch_add(&t->dropped, 1);
        trace_setting_unref(s);
        return NULL;
    }
    trace->job.kind = TRACE_JOB_TRACE;
    trace->setting = s;
    trace->level = s->level;
    trace->id = atomic_fetch_add(&t->next_id, 1) + 1;
    trace->bytes = sizeof(*trace);
    return trace;
}

osp_trace *trace_spawn_child(osp_trace *parent) {
    osp_trace *child = calloc(1, sizeof(*child));
    if (!child)
        return NULL;
    trace_setting *s = parent->setting;
    atomic_fetch_add(&s->refs, 1);
    child->job.kind = TRACE_JOB_TRACE;
    child->setting = s;
    child->level = parent->level;
    child->id = atomic_fetch_add(&s->tracer->next_id, 1) + 1;
    child->parent_id = parent->id;
    child->bytes = sizeof(*child);
    return child;
}

osp_trace *osp_tracer_sample(osp_tracer *tracer, const char *model) {
    if (!tracer || !atomic_load_explicit(&tracer->active, memory_order_relaxed))
        return NULL;
    return sample_slow(tracer, model);
}

uint64_t osp_trace_id(const osp_trace *trace) {
    return trace->id;
}

bool osp_trace_wants_tensors(const osp_trace *trace) {
    return trace && (trace->level & OSP_TRACE_LEVEL_TENSORS);
}

void osp_trace_stamp(osp_trace *trace, osp_trace_activity activity,
                     uint64_t ns) {
    if ((unsigned)activity < OSP_TRACE_ACTIVITY_COUNT_ && ns != 0)
        trace->ns[activity] = ns;
}

bool osp_trace_stamped(const osp_trace *trace, osp_trace_activity activity) {
    return (unsigned)activity < OSP_TRACE_ACTIVITY_COUNT_ &&
           trace->ns[activity] != 0;
}

void osp_trace_set_model(osp_trace *trace, const char *model_name,
                         int64_t model_version, const char *request_id) {
    free(trace->model_name);
    free(trace->request_id);
    trace->model_name = strdup(model_name ? model_name : "");
    trace->request_id = request_id && request_id[0] ? strdup(request_id) : NULL;
    trace->model_version = model_version;
    if (trace->model_name)
        trace->bytes += strlen(trace->model_name);
    if (trace->request_id)
        trace->bytes += strlen(trace->request_id);
}

void trace_free(osp_trace *trace) {
    trace_tensor *x = trace->tensors;
    while (x) {
        trace_tensor *next = x->next;
        free(x);
        x = next;
    }
    free(trace->model_name);
    free(trace->request_id);
    trace_setting_unref(trace->setting);
    free(trace);
}

void osp_trace_end(osp_trace *trace) {
    if (!trace)
        return;
    osp_tracer *t = trace->setting->tracer;
    if (!trace_queue_push(t, &trace->job, trace->bytes)) {
        atomic_fetch_add(&trace->setting->dropped, 1);
        atomic_fetch_add(&t->dropped, 1);
        trace_free(trace);
    }
}

/* ---- tensor captures ----------------------------------------------------- */

size_t osp_trace_tensor_capture_bytes(osp_datatype dtype, size_t byte_size) {
    size_t cap;
    if (dtype == OSP_TYPE_BYTES)
        cap = (size_t)OSP_TRACE_TENSOR_MAX_ELEMENTS * 4 +
              OSP_TRACE_TENSOR_MAX_STRING_BYTES;
    else
        cap = (size_t)OSP_TRACE_TENSOR_MAX_ELEMENTS *
              osp_datatype_byte_size(dtype);
    return byte_size < cap ? byte_size : cap;
}

/* Triton's TraceTensorActivity data: elements comma-joined as a C++
 * ostream prints them (float/double with 6 significant digits, BOOL as
 * 1/0, (U)INT8 as the raw character), BYTES elements wrapped in escaped
 * quotes, FP16/BF16 empty. Everything JSON-escaped. */
static void format_tensor_data(bytebuf *b, osp_datatype dtype, const void *data,
                               size_t byte_size, int64_t elements) {
    const unsigned char *p = data;
    size_t esize = osp_datatype_byte_size(dtype);
    if (elements > OSP_TRACE_TENSOR_MAX_ELEMENTS)
        elements = OSP_TRACE_TENSOR_MAX_ELEMENTS;
    if (dtype == OSP_TYPE_FP16 || dtype == OSP_TYPE_BF16 ||
        dtype == OSP_TYPE_INVALID || !data)
        return;
    if (dtype != OSP_TYPE_BYTES && (size_t)elements > byte_size / esize)
        elements = (int64_t)(byte_size / esize);
    size_t offset = 0, string_bytes = 0;
    for (int64_t e = 0; e < elements; e++) {
        const unsigned char *x = p + (size_t)e * esize;
        if (dtype == OSP_TYPE_BYTES) {
            uint32_t len;
            if (offset + 4 > byte_size ||
                string_bytes >= OSP_TRACE_TENSOR_MAX_STRING_BYTES)
                return;
            memcpy(&len, p + offset, 4);
            offset += 4;
            if (len > byte_size - offset)
                return;
            if (e)
                bytebuf_putc(b, ',');
            bytebuf_puts(b, "\\\"");
            trace_json_chars(b, (const char *)p + offset, len);
            bytebuf_puts(b, "\\\"");
            offset += len;
            string_bytes += len;
            continue;
        }
        if (e)
            bytebuf_putc(b, ',');
        switch (dtype) {
        case OSP_TYPE_BOOL:
            bytebuf_putc(b, x[0] ? '1' : '0');
            break;
        case OSP_TYPE_UINT8:
        case OSP_TYPE_INT8:
            trace_json_chars(b, (const char *)x, 1);
            break;
        case OSP_TYPE_UINT16: {
            uint16_t v;
            memcpy(&v, x, sizeof(v));
            bytebuf_printf(b, "%u", (unsigned)v);
            break;
        }
        case OSP_TYPE_UINT32: {
            uint32_t v;
            memcpy(&v, x, sizeof(v));
            bytebuf_printf(b, "%u", (unsigned)v);
            break;
        }
        case OSP_TYPE_UINT64: {
            uint64_t v;
            memcpy(&v, x, sizeof(v));
            bytebuf_printf(b, "%llu", (unsigned long long)v);
            break;
        }
        case OSP_TYPE_INT16: {
            int16_t v;
            memcpy(&v, x, sizeof(v));
            bytebuf_printf(b, "%d", (int)v);
            break;
        }
        case OSP_TYPE_INT32: {
            int32_t v;
            memcpy(&v, x, sizeof(v));
            bytebuf_printf(b, "%d", (int)v);
            break;
        }
        case OSP_TYPE_INT64: {
            int64_t v;
            memcpy(&v, x, sizeof(v));
            bytebuf_printf(b, "%lld", (long long)v);
            break;
        }
        case OSP_TYPE_FP32: {
            float v;
            memcpy(&v, x, sizeof(v));
            bytebuf_printf(b, "%g", (double)v);
            break;
        }
        case OSP_TYPE_FP64: {
            double v;
            memcpy(&v, x, sizeof(v));
            bytebuf_printf(b, "%g", v);
            break;
        }
        default:
            break;
        }
    }
}

void osp_trace_capture_tensor(osp_trace *trace,
                              osp_trace_tensor_activity activity,
                              const char *name, osp_datatype dtype,
                              const osp_shape *shape, const void *data,
                              size_t byte_size) {
    if (!osp_trace_wants_tensors(trace) ||
        (unsigned)activity >= OSP_TRACE_TENSOR_ACTIVITY_COUNT_)
        return;
    int64_t elements = 1;
    for (int d = 0; d < shape->rank; d++) {
        int64_t dim = shape->dims[d] < 0 ? 0 : shape->dims[d];
        elements =
            dim != 0 && elements > INT64_MAX / dim ? INT64_MAX : elements * dim;
    }
    bytebuf b = {0};
    bytebuf_printf(&b, "\"activity\":\"%s\",\"tensor\":{\"name\":\"",
                   tensor_activity_names[activity]);
    trace_json_chars(&b, name ? name : "", name ? strlen(name) : 0);
    bytebuf_puts(&b, "\",\"data\":\"");
    format_tensor_data(&b, dtype, data, byte_size, elements);
    bytebuf_puts(&b, "\",\"shape\":\"");
    for (int d = 0; d < shape->rank; d++)
        bytebuf_printf(&b, "%s%lld", d ? "," : "", (long long)shape->dims[d]);
    bytebuf_printf(&b, "\",\"dtype\":\"%s\"}}", osp_datatype_wire_name(dtype));
    if (b.oom) {
        bytebuf_free(&b);
        return;
    }
    trace_tensor *x = malloc(sizeof(*x) + b.len);
    if (x) {
        x->next = NULL;
        x->activity = activity;
        x->len = b.len;
        memcpy(x->text, b.data, b.len);
        if (trace->tensors_tail)
            trace->tensors_tail->next = x;
        else
            trace->tensors = x;
        trace->tensors_tail = x;
        trace->bytes += sizeof(*x) + b.len;
    }
    bytebuf_free(&b);
}
