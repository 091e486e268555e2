/*
 * The server object: which models exist, their versions' states, loading
 * and unloading, and the entry point of inference (validate, then queue on
 * the model).
 *
 * Locking: `lock` guards the entries table and is held only briefly;
 * `load_lock` serialises whole load/unload operations, which do their slow
 * work (reading weights, starting instances, draining queues) without
 * holding `lock`.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend_fields.h"
#include "cond_deadline.h"
#include "ensemble.h"
#include "ensemble_graph.h"
#include "load_override.h"
#include "model_internal.h"
#include "osprey/log.h"
#include "repository.h"
#include "repository_set.h"
#include "request_validate.h"
#include "response_cache.h"
#include "trace_report.h"

typedef struct version_slot {
    int64_t version;
    osp_model_state state;
    char *reason;
    bool unloaded;    /* UNAVAILABLE after an unload, not a failure */
    osp_model *model; /* loader's reference, when READY */
} version_slot;

typedef struct model_entry {
    char *name;
    char *reason; /* why the whole model is unavailable, or NULL */
    version_slot *versions;
    size_t n_versions;
    bool wanted;          /* asked to be loaded (readiness counts it) */
    uint64_t fingerprint; /* of its folder when last loaded (poll mode) */
} model_entry;

/* An osp_backend_setting the server owns; backend "" = every backend. */
typedef struct backend_setting {
    char *backend, *key, *value;
} backend_setting;

struct osp_server {
    char *repo_root; /* NULL when the models come from a source */
    char *load_override_dir; /* parent of `file:` loads; NULL: $TMPDIR */
    const osp_repository_source *source; /* `local`, `set` or the options' */
    osp_repository_source local;         /* the folder at repo_root */
    repository_set *set;                 /* several repositories, or NULL */
    const osp_backend *const *backends; /* borrowed from the options */
    size_t n_backends;
    bool auto_complete; /* Triton's auto-complete (see the options) */
    backend_setting *backend_settings; /* --backend-config, copied */
    size_t n_backend_settings;
    osp_model_control_mode control_mode;
    bool strict_gpu;
    size_t max_sequences; /* per sequence model version */
    int load_threads; /* models loaded at once by a repository scan */
    pthread_mutex_t lock;
    pthread_mutex_t load_lock;
    model_entry *entries;
    size_t n_entries;
    atomic_bool shutting_down;
    /* poll mode: the thread rescanning the repository */
    int poll_secs;
    pthread_t poll_thread;
    bool polling;
    bool poll_stop; /* under poll_mutex */
    pthread_mutex_t poll_mutex;
    pthread_cond_t poll_cond;
    response_cache *cache; /* NULL: none (see open_response_cache) */
};

/* The registered backend a config names (borrowed), or INVALID_ARG naming
 * the registered ones (or the platform, for a config that names only a
 * platform Osprey does not serve). */
static osp_error *find_backend(const osp_server *server,
                               const osp_model_config *cfg,
                               const osp_backend **out) {
    const char *name = cfg->backend;
    if (!name[0] && cfg->platform[0])
        return osp_error_new(OSP_ERROR_INVALID_ARG, "unknown platform '%s'",
                             cfg->platform);
    char names[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < server->n_backends; i++) {
        const osp_backend *b = server->backends[i];
        if (strcmp(b->name, name) == 0) {
            *out = b;
            return NULL;
        }
        int n = snprintf(names + used, sizeof names - used, "%s%s",
                         i ? ", " : "", b->name);
        if (n > 0 && (size_t)n < sizeof names - used)
            used += (size_t)n;
    }
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "unknown backend '%s' (registered: %s)", name,
                         server->n_backends ? names : "none");
}

const char *osp_model_state_name(osp_model_state state) {
    switch (state) {
    case OSP_MODEL_STATE_READY:
        return "READY";
    case OSP_MODEL_STATE_UNAVAILABLE:
        return "UNAVAILABLE";
    case OSP_MODEL_STATE_LOADING:
        return "LOADING";
    case OSP_MODEL_STATE_UNLOADING:
        return "UNLOADING";
    default:
        return "";
    }
}

void osp_server_options_init(osp_server_options *opts) {
    memset(opts, 0, sizeof(*opts));
    opts->control_mode = OSP_MODEL_CONTROL_NONE;
    opts->auto_complete_config = true;
    opts->model_load_threads = 4;
    opts->max_sequences = 4096;
    osp_device_options_init(&opts->devices);
}

/* ---- entries table (call with `lock` held) ---------------------------------
 */

static model_entry *find_entry(osp_server *server, const char *name) {
    for (size_t i = 0; i < server->n_entries; i++)
        if (strcmp(server->entries[i].name, name) == 0)
            return &server->entries[i];
    return NULL;
}

/* Finds or appends the entry for `name` (kept sorted by name). */
static model_entry *get_or_add_entry(osp_server *server, const char *name) {
    model_entry *e = find_entry(server, name);
    if (e)
        return e;
    char *copy = strdup(name);
    model_entry *bigger =
        copy ? realloc(server->entries,
                       sizeof(*bigger) * (server->n_entries + 1))
             : NULL;
    if (!bigger) {
        free(copy);
        return NULL;
    }
    server->entries = bigger;
    size_t pos = 0;
    while (pos < server->n_entries && strcmp(bigger[pos].name, name) < 0)
        pos++;
    memmove(&bigger[pos + 1], &bigger[pos],
            sizeof(*bigger) * (server->n_entries - pos));
    memset(&bigger[pos], 0, sizeof(*bigger));
    bigger[pos].name = copy;
    server->n_entries++;
    return &bigger[pos];
}

static void versions_free(version_slot *slots, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(slots[i].reason);
    free(slots);
}

/* ---- loading
 * ------------------------------------------------------------------ */

static char *read_text_file(const char *path, size_t *len, osp_error **err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err =
            osp_error_new(OSP_ERROR_INVALID_ARG, "cannot open '%s': %m", path);
        return NULL;
    }
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || size > 16 * 1024 * 1024 || fseek(f, 0, SEEK_SET) != 0) {
        *err = osp_error_new(OSP_ERROR_INVALID_ARG,
                             "'%s' is unreadable or larger than 16 MiB", path);
        goto out;
    }
    text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        free(text);
        text = NULL;
        *err = osp_error_new(OSP_ERROR_INVALID_ARG, "cannot read '%s'", path);
        goto out;
    }
    text[size] = '\0';
    *len = (size_t)size;
out:
    fclose(f);
    return text;
}

/* Where a load takes the model from: the repository's folder and its
 * config.pbtxt, or what a load request supplied (see osp_load_override). */
typedef struct load_source {
    char *model_dir;
    char *model_parent; /* the folder holding model_dir, kept out of replies */
    char *override_dir; /* the temporary folder of override files, if any */
    char *text;         /* the config, protobuf text */
    size_t len;
    char path[PATH_MAX]; /* names the config in messages */
    /* A request's config is completed from the folder's config.pbtxt (see
     * osp_model_config_parse_over); NULL when there is none to use. */
    char *base_text;
    size_t base_len;
    char base_path[PATH_MAX];
} load_source;

/* Parses a model's config, checks its name against the model's (an
 * absent name takes the model's) and completes its backend fields from
 * the model's folder (backend_fields_complete). Caller owns *out. */
static osp_error *read_config(const char *name, const load_source *src,
                              osp_model_config **out) {
    osp_model_config *cfg = NULL;
    const char *path = src->path;
    osp_error *err =
        osp_model_config_parse_over(src->text, src->len, path, src->base_text,
                                    src->base_len, src->base_path, &cfg);
    if (err)
        return err;
    if (!cfg->name || !cfg->name[0]) {
        free(cfg->name);
        cfg->name = strdup(name);
        if (!cfg->name) {
            osp_model_config_free(cfg);
            return osp_error_out_of_memory();
        }
    } else if (strcmp(cfg->name, name) != 0) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "%s: name: model name '%s' does not match its "
                            "folder '%s'",
                            path, cfg->name, name);
        osp_model_config_free(cfg);
        return err;
    }
    if ((err = backend_fields_complete(cfg, name, src->model_dir))) {
        osp_model_config_free(cfg);
        return err;
    }
    *out = cfg;
    return NULL;
}

static void load_source_free(load_source *src) {
    load_override_remove(src->override_dir);
    free(src->model_dir);
    free(src->model_parent);
    free(src->text);
    free(src->base_text);
}

/* A copy of msg with every "<dir>/" removed, so that it names files
 * relative to dir (the repository, or an override's temporary folder):
 * no reply carries a server file path. NULL on OOM. */
static char *without_dir(const char *msg, const char *dir) {
    size_t dlen = dir ? strlen(dir) : 0;
    char *out = strdup(msg);
    if (!out || dlen == 0)
        return out;
    char *w = out;
    for (const char *r = msg; *r;) {
        if (strncmp(r, dir, dlen) == 0 && r[dlen] == '/') {
            r += dlen + 1;
            continue;
        }
        *w++ = *r++;
    }
    *w = '\0';
    return out;
}

/* err with the repository root and `extra_dir` (may be NULL) removed from
 * its message (code and reason kept; ownership of err moves). */
static osp_error *error_without_dirs(const osp_server *server, osp_error *err,
                                     const char *extra_dir) {
    if (!err)
        return NULL;
    char *a = without_dir(osp_error_message(err), server->repo_root);
    char *b = a ? without_dir(a, extra_dir) : NULL;
    osp_error *out =
        b ? osp_error_new_reason(osp_error_get_code(err),
                                 osp_error_get_reason(err), "%s", b)
          : err;
    if (out != err)
        osp_error_free(err);
    free(a);
    free(b);
    return out;
}

/* Triton's answer when a load cannot even start. */
static osp_error *poll_failure(const char *name) {
    return osp_error_new(OSP_ERROR_INTERNAL,
                         "failed to load '%s', failed to poll from model "
                         "repository",
                         name);
}

osp_error *osp_load_override_error(const char *name, osp_error *err) {
    OSP_LOG_ERROR("Invalid config override: %s", osp_error_message(err));
    osp_error_free(err);
    return poll_failure(name);
}

/* Fills src for model `name`. Errors from a request's override become
 * osp_load_override_error. */
static osp_error *load_source_open(osp_server *server, const char *name,
                                   const osp_load_override *ov,
                                   load_source *src) {
    osp_error *err = NULL;
    if (ov && ov->n_files > 0 && !ov->config_pbtxt) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "load files need a config parameter too");
    } else if (ov && ov->n_files > 0) {
        if (!(err = load_override_write(ov, server->load_override_dir,
                                       &src->override_dir)) &&
            !(src->model_dir = strdup(src->override_dir)))
            err = osp_error_out_of_memory();
    } else {
        err = server->source->model_dir(server->source->self, name,
                                        &src->model_dir);
        const char *slash = err ? NULL : strrchr(src->model_dir, '/');
        if (slash && !(src->model_parent = strndup(
                           src->model_dir, (size_t)(slash - src->model_dir))))
            err = osp_error_out_of_memory();
        if (err && (osp_error_get_code(err) == OSP_ERROR_NOT_FOUND ||
                    server->source != &server->local)) {
            /* Triton's answer for a model the repository does not have,
             * or whose files could not be fetched from object storage;
             * the reason, which names the repository, is only logged. */
            OSP_LOG_ERROR("failed to load '%s': %s", name,
                          osp_error_message(err));
            osp_error_free(err);
            return poll_failure(name);
        }
    }
    if (!err && ov && ov->config_pbtxt) {
        snprintf(src->path, sizeof src->path, "load request config of '%s'",
                 name);
        src->len = strlen(ov->config_pbtxt);
        if (!(src->text = strdup(ov->config_pbtxt)))
            err = osp_error_out_of_memory();
        if (!err && server->auto_complete && !src->override_dir) {
            /* The repository's config completes a partial override; a
             * folder without one leaves the override on its own. */
            snprintf(src->base_path, sizeof src->base_path, "%s/config.pbtxt",
                     src->model_dir);
            osp_error *missing = NULL;
            src->base_text =
                read_text_file(src->base_path, &src->base_len, &missing);
            osp_error_free(missing);
        }
    } else if (!err) {
        snprintf(src->path, sizeof src->path, "%s/config.pbtxt",
                 src->model_dir);
        struct stat st;
        if (server->auto_complete && stat(src->path, &st) != 0 &&
            errno == ENOENT) {
            /* As Triton with auto-complete on: no config.pbtxt is an empty
             * config, completed from the model's files. */
            src->len = 0;
            if (!(src->text = strdup("")))
                err = osp_error_out_of_memory();
        } else {
            src->text = read_text_file(src->path, &src->len, &err);
        }
    }
    return err && ov ? osp_load_override_error(name, err) : err;
}

/* Sets `key` to `value` in cfg->backend_config, whose array has room for
 * one more key. */
static osp_error *put_backend_setting(osp_model_config *cfg, const char *key,
                                      const char *value) {
    osp_model_parameter *list = cfg->backend_config;
    size_t k = 0;
    while (k < cfg->n_backend_config && strcmp(list[k].key, key) != 0)
        k++;
    char *copy = strdup(value);
    if (!copy || (k == cfg->n_backend_config && !(list[k].key = strdup(key)))) {
        free(copy);
        return osp_error_out_of_memory();
    }
    free(list[k].value);
    list[k].value = copy;
    if (k == cfg->n_backend_config)
        cfg->n_backend_config++;
    return NULL;
}

/* Stores in cfg->backend_config the --backend-config settings for
 * `backend` (see osp_server_options.backend_settings): the global ones,
 * the backend's own over them, and Triton's default-max-batch-size. */
static osp_error *set_backend_config(const osp_server *server,
                                     const char *backend,
                                     osp_model_config *cfg) {
    osp_error *err = NULL;
    size_t n = server->n_backend_settings;
    free(cfg->backend_config); /* the parser sets none */
    cfg->n_backend_config = 0;
    if (!(cfg->backend_config = calloc(n + 1, sizeof *cfg->backend_config)))
        return osp_error_out_of_memory();
    for (size_t i = 0; i < n && !err; i++)
        if (!server->backend_settings[i].backend[0])
            err = put_backend_setting(cfg, server->backend_settings[i].key,
                                      server->backend_settings[i].value);
    for (size_t i = 0; i < n && !err; i++)
        if (!strcmp(server->backend_settings[i].backend, backend))
            err = put_backend_setting(cfg, server->backend_settings[i].key,
                                      server->backend_settings[i].value);
    if (!err &&
        !osp_model_config_backend_setting(cfg, "default-max-batch-size"))
        err = put_backend_setting(cfg, "default-max-batch-size", "4");
    return err;
}

/* Triton's normalisation after auto-complete (NormalizeModelConfig):
 * dynamic batching without preferred sizes prefers max_batch_size, which
 * the config then shows (the batcher behaves the same either way). */
static osp_error *normalize_config(osp_model_config *cfg) {
    osp_dynamic_batching *db = &cfg->dynamic_batching;
    if (!db->enabled || db->n_preferred_batch_sizes > 0 ||
        cfg->max_batch_size <= 0)
        return NULL;
    int32_t *sizes = malloc(sizeof *sizes);
    if (!sizes)
        return osp_error_out_of_memory();
    sizes[0] = cfg->max_batch_size;
    free(db->preferred_batch_sizes);
    db->preferred_batch_sizes = sizes;
    db->n_preferred_batch_sizes = 1;
    return NULL;
}

static osp_error *load_model_locked(osp_server *server, const char *name,
                                    const osp_load_override *ov);

/* How deep explicit loads of ensembles' steps nest on this thread (a
 * bound, so that ensembles naming each other end). */
static _Thread_local int step_load_depth;
#define MAX_STEP_LOAD_DEPTH 8

/* A reference on the model of step `st` (NULL when none is ready): in
 * explicit mode a step model that is not loaded is loaded first, as
 * Triton loads an ensemble's dependencies. */
static osp_model *ensemble_step_model(osp_server *server,
                                      const osp_ensemble_step *st) {
    osp_model *model = NULL;
    osp_error *err =
        osp_server_model_get(server, st->model_name, st->model_version, &model);
    if (err && server->control_mode == OSP_MODEL_CONTROL_EXPLICIT &&
        step_load_depth < MAX_STEP_LOAD_DEPTH) {
        osp_error_free(err);
        step_load_depth++;
        osp_error_free(load_model_locked(server, st->model_name, NULL));
        step_load_depth--;
        err = osp_server_model_get(server, st->model_name, st->model_version,
                                   &model);
    }
    osp_error_free(err);
    return err ? NULL : model;
}

/* Triton's answer for step `st` of ensemble `ens` whose model is not
 * ready though the repository has it. */
static osp_error *step_not_loaded(osp_server *server, const char *ens,
                                  const osp_ensemble_step *st) {
    if (st->model_version >= 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "ensemble '%s' depends on '%s' whose required "
                             "version %lld is not loaded.",
                             ens, st->model_name, (long long)st->model_version);
    char *reason = NULL;
    pthread_mutex_lock(&server->lock);
    model_entry *e = find_entry(server, st->model_name);
    if (e && e->reason)
        reason = strdup(e->reason);
    pthread_mutex_unlock(&server->lock);
    osp_error *err =
        reason ? osp_error_new(OSP_ERROR_INVALID_ARG,
                               "ensemble '%s' depends on '%s' which has no "
                               "loaded version. Model '%s' loading failed "
                               "with error: %s",
                               ens, st->model_name, st->model_name, reason)
               : osp_error_new(OSP_ERROR_INVALID_ARG,
                               "ensemble '%s' depends on '%s' which has no "
                               "loaded version.",
                               ens, st->model_name);
    free(reason);
    return err;
}

/* References on the models of every step of ensemble `cfg` into steps[]
 * (n_steps slots, zeroed; the caller unrefs them), or Triton's error: the
 * step models the repository does not have, else the first one that is
 * not ready. */
static osp_error *resolve_steps(osp_server *server, const osp_model_config *cfg,
                                osp_model **steps) {
    const osp_ensemble_scheduling *es = &cfg->ensemble_scheduling;
    osp_error *err = NULL;
    char missing[1024] = "";
    size_t used = 0;
    for (size_t i = 0; i < es->n_steps; i++) {
        const osp_ensemble_step *st = &es->steps[i];
        if ((steps[i] = ensemble_step_model(server, st)))
            continue;
        if (server->source->fingerprint(server->source->self,
                                        st->model_name) != 0) {
            if (!err)
                err = step_not_loaded(server, cfg->name, st);
            continue;
        }
        bool listed = false; /* each name once, in step order */
        for (size_t k = 0; k < i && !listed; k++)
            listed = !steps[k] &&
                     strcmp(es->steps[k].model_name, st->model_name) == 0;
        if (!listed && used < sizeof missing)
            used += (size_t)snprintf(missing + used, sizeof missing - used,
                                     "%s%s", used ? ", " : "", st->model_name);
    }
    if (used) {
        osp_error_free(err);
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "ensemble %s contains models that are not "
                            "available or ambiguous: %s",
                            cfg->name, missing);
    }
    return err;
}

/* Resolves an ensemble's steps and checks them against their models'
 * configs (ensemble_check_steps). On success *out_steps holds the
 * references (caller unrefs each and frees the array). */
static osp_error *ensemble_dependencies(osp_server *server,
                                        const osp_model_config *cfg,
                                        osp_model ***out_steps) {
    size_t n = cfg->ensemble_scheduling.n_steps;
    osp_model **steps = calloc(n + 1, sizeof(*steps));
    const osp_model_config **step_cfgs = calloc(n + 1, sizeof(*step_cfgs));
    osp_error *err = steps && step_cfgs ? resolve_steps(server, cfg, steps)
                                        : osp_error_out_of_memory();
    for (size_t i = 0; !err && i < n; i++)
        step_cfgs[i] = osp_model_get_config(steps[i]);
    if (!err)
        err = ensemble_check_steps(cfg, step_cfgs);
    free(step_cfgs);
    if (err && steps) {
        for (size_t i = 0; i < n; i++)
            osp_model_unref(steps[i]);
        free(steps);
        steps = NULL;
    }
    *out_steps = steps;
    return err;
}

/* Loads a version of an ensemble (cfg is taken over on success): a shell
 * model whose scheduler runs the steps, checked against the configs of
 * the step models loaded now. */
static osp_error *load_ensemble_version(osp_server *server,
                                        osp_model_config *cfg, int64_t version,
                                        const char *vpath, osp_model **out) {
    size_t n = cfg->ensemble_scheduling.n_steps;
    osp_model **steps = NULL;
    const osp_model_config **step_cfgs = calloc(n + 1, sizeof(*step_cfgs));
    osp_error *err = step_cfgs ? ensemble_dependencies(server, cfg, &steps)
                               : osp_error_out_of_memory();
    for (size_t i = 0; !err && i < n; i++)
        step_cfgs[i] = osp_model_get_config(steps[i]);
    if (!err && !(err = model_load_shell(cfg, version, vpath, out)) &&
        (err = ensemble_attach(*out, server, step_cfgs))) {
        (*out)->config = NULL; /* the caller keeps it on failure */
        osp_model_unref(*out);
        *out = NULL;
    }
    for (size_t i = 0; steps && i < n; i++)
        osp_model_unref(steps[i]);
    free(steps);
    free(step_cfgs);
    return err;
}

/* Loads version `version` of a model that a backend serves (cfg is taken
 * over on success). */
static osp_error *load_backend_version(osp_server *server,
                                       osp_model_config *cfg, int64_t version,
                                       const char *vpath, osp_model **out) {
    const osp_backend *backend = NULL;
    osp_error *err = find_backend(server, cfg, &backend);
    if (!err)
        err = set_backend_config(server, backend->name, cfg);
    if (!err && server->auto_complete && backend->auto_complete &&
        (cfg->n_inputs == 0 || cfg->n_outputs == 0))
        err = backend->auto_complete(cfg, vpath);
    if (!err)
        err = normalize_config(cfg);
    model_load_options load = {.strict_gpu = server->strict_gpu,
                               .max_sequences = server->max_sequences};
    if (!err)
        err = model_load(cfg, backend, version, vpath, &load, out);
    return err;
}

/* Triton's refusal of the response cache for a decoupled model (its
 * config validation, whether or not the server has a cache). */
static osp_error *check_response_cache_config(const osp_model_config *cfg) {
    if (!cfg->decoupled || !cfg->response_cache)
        return NULL;
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "Response Cache does not currently support model %s "
                         "with 'decoupled' transaction policy. Please disable "
                         "the response cache.",
                         cfg->name);
}

/* Loads every selected version of model `name` into new slots. Returns an
 * error only when nothing could be tried (bad name, config, versions);
 * per-version failures are recorded in the slots. */
static osp_error *load_versions(osp_server *server, const char *name,
                                const osp_load_override *ov,
                                version_slot **slots_out, size_t *n_out,
                                bool *unlisted) {
    osp_error *err = NULL;
    load_source src = {0};
    osp_model_config *cfg = NULL;
    int64_t *versions = NULL;
    size_t n_versions = 0;
    version_slot *slots = NULL;

    if ((err = repository_check_name(name)))
        goto out;
    if ((err = load_source_open(server, name, ov, &src)))
        goto out;
    if ((err = read_config(name, &src, &cfg)) ||
        (err = repository_select_versions(src.model_dir, &cfg->version_policy,
                                          &versions, &n_versions))) {
        err = ov ? osp_load_override_error(name, err)
                 : error_without_dirs(server, err, src.model_parent);
        goto out;
    }
    /* Triton finds these when it polls the repository or builds its
     * dependency graph: the model never gets as far as a version load,
     * and the index lists its name alone. */
    if ((err = ensemble_check_config(cfg)) ||
        (err = check_response_cache_config(cfg))) {
        OSP_LOG_ERROR("Poll failed for model directory '%s': %s", name,
                      osp_error_message(err));
        osp_error_free(err);
        err = poll_failure(name);
        *unlisted = true;
        goto out;
    }
    if (cfg->ensemble_scheduling.enabled) {
        osp_model **steps = NULL;
        if ((err = ensemble_dependencies(server, cfg, &steps))) {
            osp_error *wrapped = osp_error_new(
                osp_error_get_code(err), "load failed for model '%s': %s\n",
                name, osp_error_message(err));
            osp_error_free(err);
            err = wrapped;
            *unlisted = true;
            goto out;
        }
        for (size_t i = 0; i < cfg->ensemble_scheduling.n_steps; i++)
            osp_model_unref(steps[i]);
        free(steps);
    }
    slots = calloc(n_versions, sizeof(*slots));
    if (!slots) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < n_versions; i++) {
        version_slot *slot = &slots[i];
        slot->version = versions[i];
        char vpath[PATH_MAX];
        snprintf(vpath, sizeof(vpath), "%s/%lld", src.model_dir,
                 (long long)versions[i]);
        /* Each version owns its config: parse again (cheap, and keeps
         * versions independent). */
        osp_model_config *vcfg = NULL;
        osp_error *verr = read_config(name, &src, &vcfg);
        if (!verr && vcfg->ensemble_scheduling.enabled)
            verr = load_ensemble_version(server, vcfg, versions[i], vpath,
                                         &slot->model);
        else if (!verr)
            verr = load_backend_version(server, vcfg, versions[i], vpath,
                                        &slot->model);
        verr = error_without_dirs(server, verr,
                                  src.override_dir ? src.override_dir
                                                   : src.model_parent);
        if (verr) {
            osp_model_config_free(vcfg);
            slot->state = OSP_MODEL_STATE_UNAVAILABLE;
            slot->reason = strdup(osp_error_message(verr));
            OSP_LOG_ERROR("failed to load '%s' version %lld: %s", name,
                          (long long)versions[i], osp_error_message(verr));
            osp_error_free(verr);
        } else {
            slot->state = OSP_MODEL_STATE_READY;
            char where[256];
            osp_model_describe_placement(slot->model, where, sizeof(where));
            OSP_LOG_INFO("successfully loaded '%s' version %lld on %s", name,
                         (long long)versions[i], where);
        }
    }
    *slots_out = slots;
    *n_out = n_versions;
    slots = NULL;
out:
    free(slots);
    free(versions);
    osp_model_config_free(cfg);
    load_source_free(&src);
    return err;
}

/* Unloads the versions in `slots` that hold a model (their queues drain
 * first) and marks them "unloaded". Call without `lock` held; the slot
 * fields are updated under it so lookups never see a half-written slot. */
static void unload_slots(osp_server *server, version_slot *slots, size_t n) {
    for (size_t i = 0; i < n; i++) {
        osp_model *model = slots[i].model;
        if (!model)
            continue;
        model_unload(model);
        char *reason = strdup("unloaded");
        pthread_mutex_lock(&server->lock);
        slots[i].model = NULL;
        slots[i].state = OSP_MODEL_STATE_UNAVAILABLE;
        slots[i].unloaded = true;
        free(slots[i].reason);
        slots[i].reason = reason;
        pthread_mutex_unlock(&server->lock);
    }
}

/* Loads (or reloads) `name`; call with load_lock held. New versions are
 * loaded before old ones are unloaded. On failure the error is returned and
 * the model is left UNAVAILABLE with the reason, unless versions loaded
 * earlier are serving: those then stay as they were. */
static osp_error *load_model_locked(osp_server *server, const char *name,
                                    const osp_load_override *ov) {
    version_slot *slots = NULL, *old = NULL;
    size_t n = 0, n_old = 0;
    uint64_t fingerprint =
        ov ? 0 : server->source->fingerprint(server->source->self, name);
    bool unlisted = false;
    osp_error *err = error_without_dirs(
        server, load_versions(server, name, ov, &slots, &n, &unlisted), NULL);
    bool any_ready = false;
    for (size_t i = 0; i < n; i++)
        any_ready |= slots[i].state == OSP_MODEL_STATE_READY;
    if (!err && !any_ready)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "load failed for model '%s': version %lld is at "
                            "UNAVAILABLE state: %s",
                            name, n ? (long long)slots[0].version : -1LL,
                            n && slots[0].reason ? slots[0].reason : "");
    else if (err)
        OSP_LOG_ERROR("failed to load '%s': %s", name, osp_error_message(err));

    osp_error *unsafe = repository_check_name(name);
    if (unsafe) {
        /* Never create entries for unsafe names (nothing was loaded). */
        osp_error_free(unsafe);
        versions_free(slots, n);
        return err;
    }
    pthread_mutex_lock(&server->lock);
    model_entry *e = get_or_add_entry(server, name);
    if (!e) {
        pthread_mutex_unlock(&server->lock);
        unload_slots(server, slots, n);
        versions_free(slots, n);
        osp_error_free(err);
        return osp_error_out_of_memory();
    }
    bool old_serving = false;
    for (size_t i = 0; i < e->n_versions; i++)
        old_serving |= e->versions[i].state == OSP_MODEL_STATE_READY;
    if (err && old_serving) {
        /* A failed reload leaves the loaded versions serving (as Triton
         * does); what the attempt loaded is dropped. */
        pthread_mutex_unlock(&server->lock);
        OSP_LOG_WARN("reload of '%s' failed; the loaded versions keep "
                     "serving",
                     name);
        unload_slots(server, slots, n);
        versions_free(slots, n);
        return err;
    }
    old = e->versions;
    n_old = e->n_versions;
    e->versions = slots;
    e->n_versions = n;
    e->wanted = true;
    e->fingerprint = fingerprint;
    free(e->reason);
    e->reason = err && !unlisted ? strdup(osp_error_message(err)) : NULL;
    pthread_mutex_unlock(&server->lock);

    unload_slots(server, old, n_old);
    versions_free(old, n_old);
    return err;
}

/* Unloads every version of `name` (queues drain first); call with
 * load_lock held. */
static void unload_model_locked(osp_server *server, const char *name) {
    version_slot *slots = NULL;
    size_t n = 0;
    pthread_mutex_lock(&server->lock);
    model_entry *e = find_entry(server, name);
    if (e) {
        e->wanted = false;
        e->fingerprint = 0;
        slots = e->versions;
        n = e->n_versions;
        for (size_t i = 0; i < n; i++)
            if (slots[i].state == OSP_MODEL_STATE_READY)
                slots[i].state = OSP_MODEL_STATE_UNLOADING;
    }
    pthread_mutex_unlock(&server->lock);
    /* Drain outside `lock`: lookups see UNLOADING meanwhile. The slots stay
     * owned by the entry; only load_lock holders replace them. */
    unload_slots(server, slots, n);
}

/* ---- loading many models at once ------------------------------------------
 * A repository scan loads its models on up to load_threads threads, as
 * Triton's --model-load-thread-count. Loads of different models touch
 * different entries (their table is guarded by `lock`), so the caller's
 * load_lock covers them all; the entries are made first, in the order
 * given, so that the table does not depend on which load ends first. */

typedef struct parallel_load {
    osp_server *server;
    char *const *names;
    size_t n;
    atomic_size_t next; /* the next name to take */
} parallel_load;

static void *parallel_load_worker(void *arg) {
    parallel_load *pl = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&pl->next, 1);
        if (i >= pl->n)
            break;
        osp_error_free(load_model_locked(pl->server, pl->names[i], NULL));
    }
    return NULL;
}

static void load_plain_models(osp_server *server, char *const *names, size_t n);

/* Whether model folder `name` holds an ensemble's config. */
static bool is_ensemble_folder(const osp_server *server, const char *name) {
    char path[PATH_MAX], *dir = NULL;
    osp_model_config *cfg = NULL;
    osp_error *err = server->source->model_dir(server->source->self, name, &dir);
    if (!err) {
        snprintf(path, sizeof path, "%s/config.pbtxt", dir);
        err = osp_model_config_load(path, &cfg);
    }
    free(dir);
    bool yes = !err && (cfg->ensemble_scheduling.enabled ||
                        strcmp(cfg->platform, "ensemble") == 0);
    osp_error_free(err);
    osp_model_config_free(cfg);
    return yes;
}

static bool has_ready_version(const model_entry *e) {
    for (size_t v = 0; e && v < e->n_versions; v++)
        if (e->versions[v].state == OSP_MODEL_STATE_READY)
            return true;
    return false;
}

/* Loads the ensembles names[0..n) (borrowed) one at a time, again while a
 * round makes one more ready: an ensemble of ensembles loads once the
 * inner ones have. Call with load_lock held. */
static void load_ensembles(osp_server *server, char *const *names, size_t n) {
    bool *ready = calloc(n + 1, sizeof(*ready));
    bool progress = true;
    for (int round = 0; ready && progress && round <= MAX_STEP_LOAD_DEPTH;
         round++) {
        progress = false;
        for (size_t i = 0; i < n; i++) {
            if (ready[i])
                continue;
            osp_error_free(load_model_locked(server, names[i], NULL));
            pthread_mutex_lock(&server->lock);
            ready[i] = has_ready_version(find_entry(server, names[i]));
            pthread_mutex_unlock(&server->lock);
            progress |= ready[i];
        }
    }
    free(ready);
}

/* Loads models names[0..n) (borrowed); call with load_lock held.
 * Failures are logged and recorded, not returned. Ensembles load after
 * the other models, which their steps may name. */
static void load_models(osp_server *server, char *const *names, size_t n) {
    char **plain = calloc(n + 1, sizeof(*plain));
    char **ensembles = calloc(n + 1, sizeof(*ensembles));
    size_t n_plain = 0, n_ensembles = 0;
    if (!plain || !ensembles) {
        free(plain);
        free(ensembles);
        load_plain_models(server, names, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (is_ensemble_folder(server, names[i]))
            ensembles[n_ensembles++] = names[i];
        else
            plain[n_plain++] = names[i];
    }
    load_plain_models(server, plain, n_plain);
    load_ensembles(server, ensembles, n_ensembles);
    free(plain);
    free(ensembles);
}

/* Loads models names[0..n) (borrowed) on up to load_threads threads; call
 * with load_lock held. */
static void load_plain_models(osp_server *server, char *const *names,
                              size_t n) {
    pthread_mutex_lock(&server->lock);
    for (size_t i = 0; i < n; i++) {
        osp_error *unsafe = repository_check_name(names[i]);
        if (unsafe)
            osp_error_free(unsafe);
        else
            (void)get_or_add_entry(server, names[i]); /* NULL: made later */
    }
    pthread_mutex_unlock(&server->lock);
    parallel_load pl = {.server = server, .names = names, .n = n};
    atomic_init(&pl.next, 0);
    size_t want = server->load_threads > 1 ? (size_t)server->load_threads : 1;
    if (want > n)
        want = n;
    pthread_t threads[64];
    size_t started = 0;
    for (; started + 1 < want && started < 64; started++)
        if (pthread_create(&threads[started], NULL, parallel_load_worker,
                           &pl) != 0)
            break; /* the threads there are (this one at least) do it all */
    parallel_load_worker(&pl);
    for (size_t t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
}

/* ---- poll mode ------------------------------------------------------------
 * Like Triton's --model-control-mode=poll: every poll_secs the repository
 * is scanned; a model folder that is new, or whose config.pbtxt or version
 * folders changed, is (re)loaded, and a loaded model whose folder is gone
 * is unloaded. A failed reload keeps the loaded versions serving. */

static void poll_repository(osp_server *server) {
    char **names = NULL;
    size_t n = 0;
    osp_error *err = server->source->list(server->source->self, &names, &n);
    if (err) {
        OSP_LOG_ERROR("poll: %s", osp_error_message(err));
        osp_error_free(err);
        return;
    }
    pthread_mutex_lock(&server->load_lock);
    char **changed = calloc(n ? n : 1, sizeof *changed);
    size_t n_changed = 0;
    for (size_t i = 0; changed && i < n; i++) {
        uint64_t fp =
            server->source->fingerprint(server->source->self, names[i]);
        pthread_mutex_lock(&server->lock);
        model_entry *e = find_entry(server, names[i]);
        bool is_changed = !e || e->fingerprint != fp;
        bool waiting = e && !has_ready_version(e);
        pthread_mutex_unlock(&server->lock);
        /* An ensemble that is not ready may wait for a step model that
         * this poll brings: it is tried again. */
        is_changed |= waiting && is_ensemble_folder(server, names[i]);
        if (is_changed) {
            OSP_LOG_INFO("poll: loading '%s'", names[i]);
            changed[n_changed++] = names[i];
        }
    }
    if (!changed)
        OSP_LOG_ERROR("poll: out of memory");
    load_models(server, changed, n_changed);
    free(changed);
    /* Loaded models whose folder is gone. */
    for (size_t i = 0;; i++) {
        char *gone = NULL;
        pthread_mutex_lock(&server->lock);
        for (; i < server->n_entries && !gone; i++) {
            model_entry *e = &server->entries[i];
            bool listed = false;
            for (size_t k = 0; k < n && !listed; k++)
                listed = strcmp(names[k], e->name) == 0;
            if (!listed && e->fingerprint != 0)
                gone = strdup(e->name);
        }
        pthread_mutex_unlock(&server->lock);
        if (!gone)
            break;
        i--; /* the entry table may have moved: rescan from there */
        OSP_LOG_INFO("poll: unloading '%s' (its folder is gone)", gone);
        unload_model_locked(server, gone);
        free(gone);
    }
    pthread_mutex_unlock(&server->load_lock);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void *poll_thread(void *arg) {
    osp_server *server = arg;
    pthread_mutex_lock(&server->poll_mutex);
    while (!server->poll_stop) {
        uint64_t next_poll =
            deadline_after_ns((uint64_t)server->poll_secs * 1000000000ull);
        while (
            !server->poll_stop &&
            cond_wait_until(&server->poll_cond, &server->poll_mutex, next_poll))
            ;
        if (server->poll_stop)
            break;
        pthread_mutex_unlock(&server->poll_mutex);
        poll_repository(server);
        pthread_mutex_lock(&server->poll_mutex);
    }
    pthread_mutex_unlock(&server->poll_mutex);
    return NULL;
}

static void stop_polling(osp_server *server) {
    if (!server->polling)
        return;
    pthread_mutex_lock(&server->poll_mutex);
    server->poll_stop = true;
    pthread_cond_signal(&server->poll_cond);
    pthread_mutex_unlock(&server->poll_mutex);
    pthread_join(server->poll_thread, NULL);
    server->polling = false;
}

/* ---- lifecycle
 * ------------------------------------------------------------------ */

/* Loads every model folder of the repository (control mode none, or
 * --load-model=*). Failures are logged and recorded, not returned. */
static void load_all(osp_server *server) {
    char **names = NULL;
    size_t n = 0;
    osp_error *err = server->source->list(server->source->self, &names, &n);
    if (err) {
        OSP_LOG_ERROR("cannot list model repository: %s",
                      osp_error_message(err));
        osp_error_free(err);
        return;
    }
    load_models(server, names, n);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void free_backend_settings(backend_setting *settings, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(settings[i].backend);
        free(settings[i].key);
        free(settings[i].value);
    }
    free(settings);
}

/* Copies opts' backend settings into the server (a NULL backend becomes
 * "": every backend). */
static osp_error *copy_backend_settings(osp_server *server,
                                        const osp_server_options *opts) {
    size_t n = opts->n_backend_settings;
    if (n == 0)
        return NULL;
    if (!(server->backend_settings = calloc(n, sizeof(backend_setting))))
        return osp_error_out_of_memory();
    for (size_t i = 0; i < n; i++) {
        const osp_backend_setting *from = &opts->backend_settings[i];
        backend_setting *to = &server->backend_settings[i];
        server->n_backend_settings = i + 1;
        if (!from->key || !from->value)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "backend setting %zu has no key or value", i);
        to->backend = strdup(from->backend ? from->backend : "");
        to->key = strdup(from->key);
        to->value = strdup(from->value);
        if (!to->backend || !to->key || !to->value)
            return osp_error_out_of_memory();
    }
    return NULL;
}

/* The response cache the options ask for: local (response_cache_bytes),
 * redis (redis_cache), or none (*out NULL). Both at once is Triton's
 * "multiple cache configurations" error. */
static osp_error *open_response_cache(const osp_server_options *opts,
                                      response_cache **out) {
    *out = NULL;
    if (opts->response_cache_bytes && opts->redis_cache)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "found multiple cache configurations, but only "
                             "a single cache is currently supported");
    if (opts->response_cache_bytes)
        return response_cache_local_new(opts->response_cache_bytes, out);
    if (opts->redis_cache)
        return response_cache_redis_new(opts->redis_cache, out);
    return NULL;
}

osp_error *osp_server_new(const osp_server_options *opts, osp_server **out) {
    const char *path = opts->model_repository;
    const osp_repository_source *source = opts->repository_source;
    if (opts->n_model_repositories == 1) {
        path = opts->model_repositories[0];
        source = opts->repository_sources ? opts->repository_sources[0] : NULL;
    }
    if (!path && opts->n_model_repositories == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "--model-repository must be specified");
    osp_error *err = osp_devices_init(&opts->devices);
    if (err)
        return err;
    osp_server *server = calloc(1, sizeof(*server));
    if (!server)
        return osp_error_out_of_memory();
    if (opts->n_model_repositories > 1) {
        if ((err = repository_set_new(
                 opts->model_repositories, opts->repository_sources,
                 opts->n_model_repositories, &server->set))) {
            free(server);
            return err;
        }
        server->source = repository_set_source(server->set);
    } else if (source) {
        server->source = source;
    } else if ((server->repo_root = realpath(path, NULL))) {
        repository_local_source(server->repo_root, &server->local);
        server->source = &server->local;
    } else {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to stat model repository path '%s': %m",
                            path);
        free(server);
        return err;
    }
    if ((err = copy_backend_settings(server, opts)) ||
        (err = open_response_cache(opts, &server->cache)) ||
        (opts->load_override_dir &&
         !(server->load_override_dir = strdup(opts->load_override_dir)) &&
         (err = osp_error_out_of_memory()))) {
        free_backend_settings(server->backend_settings,
                              server->n_backend_settings);
        response_cache_free(server->cache);
        repository_set_free(server->set);
        free(server->repo_root);
        free(server);
        return err;
    }
    server->backends = opts->backends;
    server->auto_complete = opts->auto_complete_config;
    server->n_backends = opts->n_backends;
    for (size_t i = 0; i < server->n_backends; i++)
        if (server->backends[i]->attach_server)
            server->backends[i]->attach_server(server);
    server->control_mode = opts->control_mode;
    server->strict_gpu = opts->strict_gpu;
    server->max_sequences = opts->max_sequences;
    server->load_threads = opts->model_load_threads;
    pthread_mutex_init(&server->lock, NULL);
    pthread_mutex_init(&server->load_lock, NULL);
    atomic_init(&server->shutting_down, false);

    pthread_mutex_init(&server->poll_mutex, NULL);
    cond_init_monotonic(&server->poll_cond);

    pthread_mutex_lock(&server->load_lock);
    if (opts->control_mode != OSP_MODEL_CONTROL_EXPLICIT) {
        load_all(server);
    } else {
        for (size_t i = 0; i < opts->n_load_models; i++) {
            if (strcmp(opts->load_models[i], "*") == 0)
                load_all(server);
            else
                osp_error_free(
                    load_model_locked(server, opts->load_models[i], NULL));
        }
    }
    pthread_mutex_unlock(&server->load_lock);
    if (opts->control_mode == OSP_MODEL_CONTROL_POLL) {
        server->poll_secs =
            opts->repository_poll_secs > 0 ? opts->repository_poll_secs : 15;
        if (pthread_create(&server->poll_thread, NULL, poll_thread, server) ==
            0)
            server->polling = true;
        else
            OSP_LOG_ERROR("cannot start the repository poll thread");
    }
    *out = server;
    return NULL;
}

void osp_server_begin_shutdown(osp_server *server) {
    atomic_store(&server->shutting_down, true);
    /* Requests already queued run now rather than wait for batches to
     * fill, so that draining the frontends does not wait out batch
     * delays. Only READY slots: an UNLOADING model may be freed by its
     * unloader at any time (and its stopping workers flush anyway). */
    pthread_mutex_lock(&server->lock);
    for (size_t i = 0; i < server->n_entries; i++) {
        const model_entry *e = &server->entries[i];
        for (size_t v = 0; v < e->n_versions; v++)
            if (e->versions[v].state == OSP_MODEL_STATE_READY &&
                e->versions[v].model)
                model_flush(e->versions[v].model);
    }
    pthread_mutex_unlock(&server->lock);
}

void osp_server_free(osp_server *server) {
    if (!server)
        return;
    osp_server_begin_shutdown(server);
    stop_polling(server);
    pthread_mutex_lock(&server->load_lock);
    for (size_t i = 0; i < server->n_entries; i++) {
        model_entry *e = &server->entries[i];
        unload_slots(server, e->versions, e->n_versions);
        versions_free(e->versions, e->n_versions);
        free(e->name);
        free(e->reason);
    }
    free(server->entries);
    pthread_mutex_unlock(&server->load_lock);
    pthread_mutex_destroy(&server->lock);
    pthread_mutex_destroy(&server->load_lock);
    pthread_mutex_destroy(&server->poll_mutex);
    pthread_cond_destroy(&server->poll_cond);
    free_backend_settings(server->backend_settings, server->n_backend_settings);
    repository_set_free(server->set);
    response_cache_free(server->cache);
    free(server->repo_root);
    free(server->load_override_dir);
    free(server);
}

bool osp_server_is_live(const osp_server *server) {
    return !atomic_load(&server->shutting_down);
}

bool osp_server_is_ready(const osp_server *server) {
    if (atomic_load(&server->shutting_down))
        return false;
    osp_server *s = (osp_server *)server;
    bool ready = true;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_entries && ready; i++) {
        const model_entry *e = &s->entries[i];
        if (!e->wanted)
            continue;
        bool any = false;
        for (size_t v = 0; v < e->n_versions; v++)
            any |= e->versions[v].state == OSP_MODEL_STATE_READY;
        ready = any;
    }
    pthread_mutex_unlock(&s->lock);
    return ready;
}

/* Triton's NOT_FOUND for a model name the repository does not have. */
static osp_error *unknown_model_error(const char *name) {
    return osp_error_new_reason(OSP_ERROR_NOT_FOUND, OSP_REASON_MODEL_NOT_FOUND,
                                "Request for unknown model: '%s' is not found",
                                name);
}

/* ---- model lookup
 * ---------------------------------------------------------------- */

osp_error *osp_server_model_get(osp_server *server, const char *name,
                                int64_t version, osp_model **out) {
    osp_error *err = NULL;
    pthread_mutex_lock(&server->lock);
    model_entry *e = find_entry(server, name);
    version_slot *pick = NULL;
    if (!e) {
        err = unknown_model_error(name);
    } else if (version < 0) {
        for (size_t i = 0; i < e->n_versions; i++)
            if (e->versions[i].state == OSP_MODEL_STATE_READY)
                pick = &e->versions[i];
        if (!pick)
            err = osp_error_new_reason(OSP_ERROR_NOT_FOUND,
                                       OSP_REASON_MODEL_NOT_READY,
                                       "Request for unknown model: '%s' has "
                                       "no available versions",
                                       name);
    } else {
        for (size_t i = 0; i < e->n_versions; i++)
            if (e->versions[i].version == version)
                pick = &e->versions[i];
        if (!pick)
            err = osp_error_new_reason(OSP_ERROR_NOT_FOUND,
                                       OSP_REASON_VERSION_NOT_FOUND,
                                       "Request for unknown model: '%s' "
                                       "version %lld is not found",
                                       name, (long long)version);
        else if (pick->state != OSP_MODEL_STATE_READY)
            err = osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                       OSP_REASON_MODEL_NOT_READY,
                                       "Request for unknown model: '%s' "
                                       "version %lld is not at ready state",
                                       name, (long long)version);
    }
    if (!err)
        *out = model_ref(pick->model);
    pthread_mutex_unlock(&server->lock);
    return err;
}

osp_error *osp_model_ready_versions(osp_server *server, const char *name,
                                    int64_t **versions, size_t *n) {
    osp_error *err = NULL;
    pthread_mutex_lock(&server->lock);
    model_entry *e = find_entry(server, name);
    if (!e) {
        err = unknown_model_error(name);
        goto out;
    }
    *versions = malloc(sizeof(int64_t) * (e->n_versions + 1));
    if (!*versions) {
        err = osp_error_out_of_memory();
        goto out;
    }
    *n = 0;
    for (size_t i = 0; i < e->n_versions; i++)
        if (e->versions[i].state == OSP_MODEL_STATE_READY)
            (*versions)[(*n)++] = e->versions[i].version;
out:
    pthread_mutex_unlock(&server->lock);
    return err;
}

/* ---- repository API
 * ---------------------------------------------------------------- */

static bool entry_push(osp_repository_entry **list, size_t *n, size_t *cap,
                       const char *name, int64_t version, osp_model_state state,
                       const char *reason, bool unloaded) {
    if (*n == *cap) {
        size_t bigger_cap = *cap ? *cap * 2 : 16;
        osp_repository_entry *bigger =
            realloc(*list, sizeof(**list) * bigger_cap);
        if (!bigger)
            return false;
        *list = bigger;
        *cap = bigger_cap;
    }
    osp_repository_entry *r = &(*list)[*n];
    r->name = strdup(name);
    r->reason = strdup(reason ? reason : "");
    r->version = version;
    r->state = state;
    r->unloaded = unloaded;
    if (!r->name || !r->reason) {
        free(r->name);
        free(r->reason);
        return false;
    }
    (*n)++;
    return true;
}

osp_error *osp_server_repository_index(osp_server *server, bool ready_only,
                                       osp_repository_entry **entries,
                                       size_t *n) {
    char **names = NULL;
    size_t n_names = 0, cap = 0, count = 0;
    osp_repository_entry *list = NULL;
    bool ok = true;
    osp_error *err =
        server->source->list(server->source->self, &names, &n_names);
    if (err)
        return err;
    pthread_mutex_lock(&server->lock);
    for (size_t i = 0; i < n_names && ok; i++) {
        model_entry *e = find_entry(server, names[i]);
        if (!e || (e->n_versions == 0 && !e->reason)) {
            if (!ready_only)
                ok = entry_push(&list, &count, &cap, names[i], -1,
                                OSP_MODEL_STATE_UNKNOWN, NULL, false);
            continue;
        }
        if (e->n_versions == 0 && !ready_only)
            ok = entry_push(&list, &count, &cap, names[i], -1,
                            OSP_MODEL_STATE_UNAVAILABLE, e->reason, false);
        for (size_t v = 0; v < e->n_versions && ok; v++) {
            const version_slot *s = &e->versions[v];
            if (ready_only && s->state != OSP_MODEL_STATE_READY)
                continue;
            ok = entry_push(&list, &count, &cap, names[i], s->version, s->state,
                            s->reason, s->unloaded);
        }
    }
    pthread_mutex_unlock(&server->lock);
    for (size_t i = 0; i < n_names; i++)
        free(names[i]);
    free(names);
    if (!ok) {
        osp_repository_index_free(list, count);
        return osp_error_out_of_memory();
    }
    *entries = list;
    *n = count;
    return NULL;
}

void osp_repository_index_free(osp_repository_entry *entries, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(entries[i].name);
        free(entries[i].reason);
    }
    free(entries);
}

static osp_error *check_explicit(const osp_server *server) {
    if (server->control_mode != OSP_MODEL_CONTROL_EXPLICIT)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "explicit model load / unload is not allowed if "
                             "polling is enabled");
    return NULL;
}

osp_error *osp_server_load_model(osp_server *server, const char *name) {
    return osp_server_load_model_override(server, name, NULL);
}

osp_error *osp_server_load_model_override(osp_server *server, const char *name,
                                          const osp_load_override *override) {
    osp_error *err = check_explicit(server);
    if (err)
        return err;
    pthread_mutex_lock(&server->load_lock);
    err = load_model_locked(server, name, override);
    pthread_mutex_unlock(&server->load_lock);
    return err;
}

osp_error *osp_server_unload_model(osp_server *server, const char *name) {
    osp_error *err = check_explicit(server);
    if (err)
        return err;
    pthread_mutex_lock(&server->load_lock);
    unload_model_locked(server, name);
    pthread_mutex_unlock(&server->load_lock);
    return NULL;
}

/* ---- inference
 * ------------------------------------------------------------------- */

osp_error *osp_server_alloc_input_buffer(osp_server *server, size_t size,
                                         osp_buffer **out) {
    (void)server;
    osp_device *gpu = NULL;
    if (osp_device_cuda_count() > 0 && !osp_device_cuda_get(0, &gpu))
        return osp_device_alloc_host(gpu, size, out);
    *out = osp_buffer_new_host(size);
    if (!*out)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "cannot allocate %zu bytes for an input", size);
    return NULL;
}

/* Looks validated request p up in the response cache: a hit completes p
 * (true; ownership of p moved); on a miss p remembers the key, so that its
 * response is inserted when it succeeds. */
static bool answer_from_cache(response_cache *cache, pending_request *p) {
    uint64_t start = osp_now_ns();
    osp_infer_response *resp = pending_request_response_new(p);
    p->cache_request_key = response_cache_key(cache, p->model->config->name,
                                      p->model->version, p->req);
    bool hit = resp && response_cache_lookup(cache, p->cache_request_key, resp);
    p->cache_lookup_ns = osp_now_ns() - start;
    if (!hit) {
        osp_infer_response_free(resp);
        p->cache = cache;
        return false;
    }
    p->cache_hit = true;
    pending_request_finish(p, resp);
    return true;
}

/* osp_server_infer_async; a step of an ensemble also reports its compute
 * durations to `sink` (NULL for others). */
static osp_error *submit(osp_server *server, osp_infer_request *req,
                         osp_infer_complete_fn complete,
                         osp_infer_response_fn respond,
                         osp_cancel_token *cancel, void *user,
                         stats_sink *sink) {
    uint64_t request_start = osp_now_ns();
    if (atomic_load(&server->shutting_down)) {
        osp_infer_request_free(req);
        return osp_error_new_reason(OSP_ERROR_UNAVAILABLE,
                                    OSP_REASON_SHUTTING_DOWN,
                                    "Server is shutting down");
    }
    osp_model *model = NULL;
    osp_error *err = osp_server_model_get(server, req->model_name,
                                          req->model_version, &model);
    if (err) {
        osp_infer_request_free(req);
        return err;
    }
    if (model->config->decoupled && !respond) {
        osp_infer_request_free(req);
        err = osp_error_new(OSP_ERROR_UNSUPPORTED,
                            "model '%s' has the decoupled transaction policy: "
                            "it answers only streaming requests (gRPC "
                            "ModelStreamInfer, /generate_stream)",
                            model->config->name);
        osp_model_unref(model);
        return err;
    }
    pending_request *p = calloc(1, sizeof(*p));
    if (!p) {
        osp_infer_request_free(req);
        osp_model_unref(model);
        return osp_error_out_of_memory();
    }
    p->req = req;
    p->model = model;
    p->complete = complete;
    p->respond = respond;
    p->cancel = osp_cancel_token_ref(cancel);
    p->user = user;
    p->times.request_start = request_start;
    p->secondary_stats = sink;
    if ((err = request_validate(model->config, p))) {
        pending_request_free(p);
        return err;
    }
    if (req->trace)
        trace_report_accepted(p);
    /* A sequence's answer depends on its state, not only on its inputs:
     * Triton's sequence batcher never reads the cache either. */
    if (server->cache && model->config->response_cache &&
        !model->config->sequence_batching.enabled &&
        answer_from_cache(server->cache, p))
        return NULL;
    if (model->ensemble) {
        ensemble_start(model->ensemble, p);
        return NULL;
    }
    return model_enqueue(model, p);
}

osp_error *osp_server_infer_async(osp_server *server, osp_infer_request *req,
                                  osp_infer_complete_fn complete, void *user) {
    return submit(server, req, complete, NULL, NULL, user, NULL);
}

osp_error *osp_server_infer_async_cancellable(osp_server *server,
                                              osp_infer_request *req,
                                              osp_cancel_token *cancel,
                                              osp_infer_complete_fn complete,
                                              void *user) {
    return submit(server, req, complete, NULL, cancel, user, NULL);
}

osp_error *osp_server_infer_stream_async(osp_server *server,
                                         osp_infer_request *req,
                                         osp_cancel_token *cancel,
                                         osp_infer_response_fn respond,
                                         void *user) {
    return submit(server, req, NULL, respond, cancel, user, NULL);
}

osp_error *server_infer_step(osp_server *server, osp_infer_request *req,
                             osp_infer_response_fn respond, void *user,
                             stats_sink *sink) {
    return submit(server, req, NULL, respond, NULL, user, sink);
}

/* ---- statistics -----------------------------------------------------------
 * The server gathers its models' counters (stats.c keeps them per model
 * and knows nothing of the server). */

/* Appends the snapshot of name/version to the list; a version unloaded
 * meanwhile is skipped. */
static osp_error *append_model(osp_server *server, const char *name,
                               int64_t version, osp_model_stats **list,
                               size_t *n, size_t *cap) {
    osp_model *model = NULL;
    osp_error *err = osp_server_model_get(server, name, version, &model);
    if (err) {
        osp_error_free(err);
        return NULL;
    }
    if (*n == *cap) {
        size_t bigger_cap = *cap ? *cap * 2 : 8;
        osp_model_stats *bigger = realloc(*list, sizeof(**list) * bigger_cap);
        if (!bigger) {
            osp_model_unref(model);
            return osp_error_out_of_memory();
        }
        *list = bigger;
        *cap = bigger_cap;
    }
    osp_model_stats *m = &(*list)[*n];
    memset(m, 0, sizeof(*m));
    m->name = strdup(name);
    m->version = version;
    err = m->name ? model_stats_snapshot(&model->stats, m)
                  : osp_error_out_of_memory();
    if (!err) {
        m->pending_requests = model_pending_count(model);
        m->response_cache = server->cache && model->config->response_cache;
        (*n)++;
    } else {
        free(m->name);
    }
    osp_model_unref(model);
    return err;
}

bool osp_server_cache_statistics(osp_server *server, osp_cache_stats *out) {
    if (!server->cache)
        return false;
    response_cache_stats s;
    response_cache_get_stats(server->cache, &s);
    *out = (osp_cache_stats){
        .entries = s.entries,
        .lookups = s.lookups,
        .hits = s.hits,
        .misses = s.misses,
        .evictions = s.evictions,
        .lookup_us = s.lookup_ns / 1000,
        .insertion_us = s.insertion_ns / 1000,
        .util = s.capacity ? (double)s.bytes / (double)s.capacity : 0.0,
    };
    return true;
}

/* The ready versions of `name` to report, per the version asked for. */
static osp_error *versions_to_report(osp_server *server, const char *name,
                                     int64_t version, int64_t **versions,
                                     size_t *n) {
    *versions = NULL;
    *n = 0;
    osp_error *err = osp_model_ready_versions(server, name, versions, n);
    if (err && osp_error_get_code(err) != OSP_ERROR_NOT_FOUND)
        return err;
    if (err || *n == 0) {
        osp_error_free(err);
        free(*versions);
        *versions = NULL;
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "requested model '%s' is not available", name);
    }
    if (version < 0)
        return NULL;
    for (size_t i = 0; i < *n; i++) {
        if ((*versions)[i] == version) {
            (*versions)[0] = version;
            *n = 1;
            return NULL;
        }
    }
    free(*versions);
    *versions = NULL;
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "requested model version is not available for "
                         "model '%s'",
                         name);
}

osp_error *osp_server_model_statistics(osp_server *server, const char *name,
                                       int64_t version, osp_model_stats **stats,
                                       size_t *n) {
    osp_model_stats *list = NULL;
    size_t count = 0, cap = 0;
    osp_error *err = NULL;
    if (name && name[0]) {
        int64_t *versions = NULL;
        size_t n_versions = 0;
        if ((err = versions_to_report(server, name, version, &versions,
                                      &n_versions)))
            return err;
        for (size_t i = 0; i < n_versions && !err; i++)
            err = append_model(server, name, versions[i], &list, &count, &cap);
        free(versions);
    } else {
        osp_repository_entry *entries = NULL;
        size_t n_entries = 0;
        if ((err = osp_server_repository_index(server, true, &entries,
                                               &n_entries)))
            return err;
        for (size_t i = 0; i < n_entries && !err; i++)
            err = append_model(server, entries[i].name, entries[i].version,
                               &list, &count, &cap);
        osp_repository_index_free(entries, n_entries);
    }
    if (err) {
        osp_model_stats_free(list, count);
        return err;
    }
    *stats = list;
    *n = count;
    return NULL;
}
