/*
 * The model repository on disk: safe model names, listing model folders,
 * resolving a model's folder and picking its version folders.
 *
 * Containment is checked on realpath() results, so symlinks are allowed as
 * long as they stay inside the repository (model folders) or inside the
 * model folder (version folders). The check is made when these functions
 * run; a folder swapped for a symlink afterwards is the operator's doing.
 */
#include "repository.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "array_grow.h"
#include "osprey/log.h"

osp_error *repository_check_name(const char *name) {
    if (!name)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "model name is missing");
    if (!name[0])
        return osp_error_new(OSP_ERROR_INVALID_ARG, "model name is empty");
    if (!strcmp(name, ".") || !strcmp(name, ".."))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "model name '%s' is not allowed", name);
    if (strchr(name, '/'))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "model name '%.64s' contains '/'", name);
    if (strlen(name) > NAME_MAX)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "model name is longer than %d bytes", NAME_MAX);
    return NULL;
}

/* True if the resolved path `path` lies strictly below the resolved
 * directory `dir` (dir itself does not count). */
static bool path_is_inside(const char *dir, const char *path) {
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/')
        return path[0] == '/' && path[1] != '\0';
    return strncmp(path, dir, n) == 0 && path[n] == '/' && path[n + 1] != '\0';
}

/* "<dir>/<name>"; caller frees. NULL when out of memory. */
static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *path = malloc(a + 1 + b + 1);
    if (!path)
        return NULL;
    memcpy(path, dir, a);
    path[a] = '/';
    memcpy(path + a + 1, name, b + 1);
    return path;
}

/* realpath() of a directory the caller named (the repository root or a
 * model folder): NOT_FOUND when it does not exist. Caller frees *out. */
static osp_error *resolve_dir(const char *what, const char *path, char **out) {
    if (!path)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "%s path is missing", what);
    char *real = realpath(path, NULL);
    if (!real) {
        int e = errno;
        return osp_error_new(e == ENOENT || e == ENOTDIR ? OSP_ERROR_NOT_FOUND
                                                         : OSP_ERROR_INTERNAL,
                             "%s '%s': %s", what, path, strerror(e));
    }
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
        free(real);
        return osp_error_new(OSP_ERROR_NOT_FOUND, "%s '%s' is not a directory",
                             what, path);
    }
    *out = real;
    return NULL;
}

/* Resolves `real_dir`/`name` and returns the resolved path if it is a
 * directory strictly inside real_dir, else NULL (also when out of memory;
 * the callers treat it as "skip"). */
static char *resolve_child_dir(const char *real_dir, const char *name) {
    char *joined = join_path(real_dir, name);
    char *real = joined ? realpath(joined, NULL) : NULL;
    struct stat st;
    free(joined);
    if (real && path_is_inside(real_dir, real) && stat(real, &st) == 0 &&
        S_ISDIR(st.st_mode))
        return real;
    free(real);
    return NULL;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

osp_error *repository_list(const char *root, char ***names_out, size_t *n_out) {
    osp_error *err = NULL;
    char *real_root = NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    DIR *dir = NULL;

    if ((err = resolve_dir("model repository", root, &real_root)))
        return err;
    dir = opendir(real_root);
    if (!dir) {
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "model repository '%s': cannot open: %s", root,
                            strerror(errno));
        goto out;
    }
    for (;;) {
        errno = 0;
        struct dirent *ent = readdir(dir);
        if (!ent) {
            if (errno)
                err = osp_error_new(OSP_ERROR_INTERNAL,
                                    "model repository '%s': cannot read: %s",
                                    root, strerror(errno));
            break;
        }
        const char *name = ent->d_name;
        osp_error *bad = NULL;
        if (name[0] == '.')
            continue;
        if ((bad = repository_check_name(name))) {
            osp_error_free(bad);
            continue;
        }
        char *real = resolve_child_dir(real_root, name);
        if (!real)
            continue; /* a plain file, or a link that leaves the root */
        free(real);
        if (!array_grow((void **)&names, &cap, n + 1, sizeof *names)) {
            err = osp_error_out_of_memory();
            goto out;
        }
        if (!(names[n] = strdup(name))) {
            err = osp_error_out_of_memory();
            goto out;
        }
        n++;
    }
    if (n > 1)
        qsort(names, n, sizeof(*names), compare_names);
out:
    if (dir)
        closedir(dir);
    free(real_root);
    if (err) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
    } else {
        *names_out = names;
        *n_out = n;
    }
    return err;
}

osp_error *repository_model_dir(const char *root, const char *name,
                                char **path) {
    osp_error *err = NULL;
    char *real_root = NULL, *joined = NULL, *real = NULL;
    struct stat st;

    if ((err = repository_check_name(name)) ||
        (err = resolve_dir("model repository", root, &real_root)))
        return err;
    if (!(joined = join_path(real_root, name))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if (!(real = realpath(joined, NULL))) {
        int e = errno;
        err = osp_error_new(e == ENOENT || e == ENOTDIR ? OSP_ERROR_NOT_FOUND
                                                        : OSP_ERROR_INVALID_ARG,
                            "model '%s' not found in '%s': %s", name, root,
                            strerror(e));
        goto out;
    }
    if (!path_is_inside(real_root, real)) {
        OSP_LOG_WARN("model folder '%s' resolves outside the repository (%s)",
                     name, real);
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "model folder '%s' resolves outside the model "
                            "repository",
                            name);
        goto out;
    }
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
        err = osp_error_new(OSP_ERROR_NOT_FOUND,
                            "model '%s' not found in '%s': not a directory",
                            name, root);
        goto out;
    }
    *path = real;
    real = NULL;
out:
    free(real);
    free(joined);
    free(real_root);
    return err;
}

/* A version folder name: decimal digits, no leading '0', fits int64. */
static bool parse_version(const char *name, int64_t *version) {
    int64_t v = 0;
    if (name[0] < '1' || name[0] > '9')
        return false;
    for (const char *p = name; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        int digit = *p - '0';
        if (v > (INT64_MAX - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *version = v;
    return true;
}

static int compare_versions(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Ascending versions of the numeric folders inside model_dir. Caller
 * frees *versions (NULL when *n is 0). */
static osp_error *list_versions(const char *model_dir, int64_t **versions_out,
                                size_t *n_out) {
    osp_error *err = NULL;
    char *real_dir = NULL;
    int64_t *versions = NULL;
    size_t n = 0, cap = 0;
    DIR *dir = NULL;

    if ((err = resolve_dir("model folder", model_dir, &real_dir)))
        return err;
    if (!(dir = opendir(real_dir))) {
        err = osp_error_new(OSP_ERROR_INTERNAL, "model folder '%s': %s",
                            model_dir, strerror(errno));
        goto out;
    }
    for (;;) {
        errno = 0;
        struct dirent *ent = readdir(dir);
        if (!ent) {
            if (errno)
                err = osp_error_new(OSP_ERROR_INTERNAL,
                                    "model folder '%s': cannot read: %s",
                                    model_dir, strerror(errno));
            break;
        }
        int64_t version;
        if (!parse_version(ent->d_name, &version)) {
            if (ent->d_name[0] == '0' && ent->d_name[1] &&
                strspn(ent->d_name, "0123456789") == strlen(ent->d_name))
                OSP_LOG_WARN("ignore version directory '%s' which contains "
                             "leading zeros in its directory name",
                             ent->d_name);
            continue;
        }
        char *real = resolve_child_dir(real_dir, ent->d_name);
        if (!real) {
            OSP_LOG_VERBOSE("skipping version '%s' of '%s': not a folder "
                            "inside the model folder",
                            ent->d_name, model_dir);
            continue;
        }
        free(real);
        if (!array_grow((void **)&versions, &cap, n + 1, sizeof *versions)) {
            err = osp_error_out_of_memory();
            goto out;
        }
        versions[n++] = version;
    }
    if (n > 1)
        qsort(versions, n, sizeof(*versions), compare_versions);
out:
    if (dir)
        closedir(dir);
    free(real_dir);
    if (err) {
        free(versions);
    } else {
        *versions_out = versions;
        *n_out = n;
    }
    return err;
}

osp_error *repository_select_versions(const char *model_dir,
                                      const osp_version_policy *policy,
                                      int64_t **versions_out, size_t *n_out) {
    osp_error *err = NULL;
    int64_t *found = NULL, *wanted = NULL;
    size_t n_found = 0, n_selected = 0;

    if (!policy)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "version policy missing");
    if ((err = list_versions(model_dir, &found, &n_found)))
        return err;
    if (n_found == 0) {
        err = osp_error_new(OSP_ERROR_NOT_FOUND, "no version folder in '%s'",
                            model_dir);
        goto out;
    }

    /* Selected versions are compacted to the front of `found`. */
    switch (policy->kind) {
    case OSP_VERSION_POLICY_ALL:
        n_selected = n_found;
        break;
    case OSP_VERSION_POLICY_SPECIFIC:
        if (policy->n_versions > 0) {
            wanted = malloc(policy->n_versions * sizeof(*wanted));
            if (!wanted) {
                err = osp_error_out_of_memory();
                goto out;
            }
            memcpy(wanted, policy->versions,
                   policy->n_versions * sizeof(*wanted));
            qsort(wanted, policy->n_versions, sizeof(*wanted),
                  compare_versions);
        }
        for (size_t i = 0; i < n_found; i++) {
            if (wanted && bsearch(&found[i], wanted, policy->n_versions,
                                  sizeof(*wanted), compare_versions))
                found[n_selected++] = found[i];
        }
        break;
    case OSP_VERSION_POLICY_LATEST:
    default: {
        /* A zeroed policy means the default, latest 1. */
        size_t keep =
            policy->latest_num_versions ? policy->latest_num_versions : 1;
        if (keep > n_found)
            keep = n_found;
        memmove(found, found + (n_found - keep), keep * sizeof(*found));
        n_selected = keep;
        break;
    }
    }
    if (n_selected == 0) {
        err = osp_error_new(OSP_ERROR_NOT_FOUND,
                            "none of the versions named by the version "
                            "policy exist in '%s'",
                            model_dir);
        goto out;
    }
    *versions_out = found;
    *n_out = n_selected;
    found = NULL;
out:
    free(found);
    free(wanted);
    return err;
}

/* FNV-1a over the bytes of v, continuing from h. */
static uint64_t fnv_mix(uint64_t h, const void *v, size_t n) {
    const unsigned char *p = v;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t stat_hash(const struct stat *st) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv_mix(h, &st->st_mtim, sizeof st->st_mtim);
    h = fnv_mix(h, &st->st_size, sizeof st->st_size);
    return fnv_mix(h, &st->st_ino, sizeof st->st_ino);
}

uint64_t repository_fingerprint(const char *root, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", root, name) >= (int)sizeof path ||
        stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    DIR *dir = opendir(path);
    if (!dir)
        return 0;
    uint64_t sum = 0, mix = 0;
    struct dirent *d;
    while ((d = readdir(dir)) != NULL) {
        bool version = d->d_name[0] != '\0';
        for (const char *c = d->d_name; *c && version; c++)
            version = *c >= '0' && *c <= '9';
        if (!version && strcmp(d->d_name, "config.pbtxt") != 0)
            continue;
        char entry[PATH_MAX];
        if (snprintf(entry, sizeof entry, "%s/%s", path, d->d_name) >=
                (int)sizeof entry ||
            stat(entry, &st) != 0)
            continue;
        /* Sum and xor do not depend on the directory's order. */
        uint64_t h = fnv_mix(stat_hash(&st), d->d_name, strlen(d->d_name));
        sum += h;
        mix ^= h;
    }
    closedir(dir);
    uint64_t fp = sum ^ (mix * 0x9e3779b97f4a7c15ull);
    return fp ? fp : 1;
}

static osp_error *local_list(void *root, char ***names, size_t *n) {
    return repository_list(root, names, n);
}

static uint64_t local_fingerprint(void *root, const char *name) {
    return repository_fingerprint(root, name);
}

static osp_error *local_model_dir(void *root, const char *name, char **dir) {
    return repository_model_dir(root, name, dir);
}

void repository_local_source(const char *root, osp_repository_source *src) {
    src->self = (void *)root;
    src->list = local_list;
    src->fingerprint = local_fingerprint;
    src->model_dir = local_model_dir;
}
