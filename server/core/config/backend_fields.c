/*
 * Triton's AutoCompleteBackendFields (see backend_fields.h). The rules are
 * Triton's conventions for config.pbtxt, not knowledge of a backend: the
 * core names a backend here only as a config may name it, and a model
 * still loads only when a backend of that name is registered.
 */
#include "backend_fields.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The model kinds of Triton's rules that Osprey can serve, in Triton's
 * order of trying them. */
typedef struct known_backend {
    const char *backend;
    const char *platform; /* the platform Triton fills in; NULL: none */
    const char *filename; /* the model file in a version folder */
} known_backend;

static const known_backend known_backends[] = {
    {"onnxruntime", "onnxruntime_onnx", "model.onnx"},
    {"python", NULL, "model.py"},
};

/* Replaces *field with a copy of value. */
static osp_error *set_string(char **field, const char *value) {
    char *copy = strdup(value);
    if (!copy)
        return osp_error_out_of_memory();
    free(*field);
    *field = copy;
    return NULL;
}

/* The model folder's first subfolder in name order (Triton inspects that
 * one, whatever the version policy), as "<model_dir>/<sub>" in buf;
 * false when there is none. */
static bool first_subfolder(const char *model_dir, char *buf, size_t cap,
                            osp_error **err) {
    char first[NAME_MAX + 1] = "";
    DIR *dir = opendir(model_dir);
    if (!dir) {
        *err = osp_error_new(OSP_ERROR_INVALID_ARG, "cannot list '%s': %s",
                             model_dir, strerror(errno));
        return false;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (first[0] && strcmp(e->d_name, first) >= 0)
            continue;
        struct stat st;
        int n = snprintf(buf, cap, "%s/%s", model_dir, e->d_name);
        if (n > 0 && (size_t)n < cap && stat(buf, &st) == 0 &&
            S_ISDIR(st.st_mode))
            snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(dir);
    int n = snprintf(buf, cap, "%s/%s", model_dir, first);
    return first[0] && n > 0 && (size_t)n < cap;
}

/* Whether folder `dir` holds an entry named `name` (of any kind). */
static bool folder_holds(const char *dir, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    return n > 0 && (size_t)n < sizeof path && lstat(path, &st) == 0;
}

osp_error *backend_fields_complete(osp_model_config *cfg,
                                   const char *model_name,
                                   const char *model_dir) {
    osp_error *err = NULL;
    char version_dir[PATH_MAX];
    bool nothing_given = !cfg->backend[0] && !cfg->platform[0] &&
                         !cfg->default_model_filename[0];
    bool has_version =
        nothing_given &&
        first_subfolder(model_dir, version_dir, sizeof version_dir, &err);
    if (err)
        return err;
    for (size_t i = 0; i < sizeof known_backends / sizeof known_backends[0];
         i++) {
        const known_backend *k = &known_backends[i];
        if (!cfg->backend[0] &&
            ((k->platform && !strcmp(cfg->platform, k->platform)) ||
             !strcmp(cfg->default_model_filename, k->filename) ||
             (has_version && folder_holds(version_dir, k->filename))) &&
            (err = set_string(&cfg->backend, k->backend)))
            return err;
        if (strcmp(cfg->backend, k->backend) != 0)
            continue;
        if (k->platform && !cfg->platform[0] &&
            (err = set_string(&cfg->platform, k->platform)))
            return err;
        if (!cfg->default_model_filename[0])
            err = set_string(&cfg->default_model_filename, k->filename);
        return err;
    }
    if (!nothing_given)
        return NULL;
    /* Triton's custom backends: "<x>.<backend>" names its backend. */
    const char *dot = strchr(model_name, '.');
    if (!dot)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "Invalid model name: Could not determine backend "
                             "for model '%s' with no backend in model "
                             "configuration. Expected model name of the form "
                             "'model.<backend_name>'.",
                             model_name);
    size_t cap = strlen("model.") + strlen(dot + 1) + 1;
    char *filename = malloc(cap);
    if (!filename || (err = set_string(&cfg->backend, dot + 1))) {
        free(filename);
        return err ? err : osp_error_out_of_memory();
    }
    snprintf(filename, cap, "model.%s", dot + 1);
    free(cfg->default_model_filename);
    cfg->default_model_filename = filename;
    return NULL;
}
