#define _GNU_SOURCE /* nftw's FTW_DEPTH, FTW_PHYS */
#include "load_override.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Checks `path` (see load_override_write) and creates its parent folders
 * under `root`. */
static osp_error *make_parents(const char *root, const char *path) {
    size_t n = strlen(path);
    if (n == 0 || path[0] == '/' || path[n - 1] == '/')
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "file '%s': not a relative file path", path);
    char full[PATH_MAX];
    if ((size_t)snprintf(full, sizeof full, "%s/%s", root, path) >= sizeof full)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "file '%s': path too long",
                             path);
    const char *component = path;
    for (;;) {
        const char *slash = strchr(component, '/');
        size_t len = slash ? (size_t)(slash - component) : strlen(component);
        if (len == 0 || (len == 1 && component[0] == '.') ||
            (len == 2 && component[0] == '.' && component[1] == '.'))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "file '%s': empty, '.' or '..' component",
                                 path);
        if (len > NAME_MAX)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "file '%s': a name longer than %d bytes", path,
                                 NAME_MAX);
        if (!slash)
            return NULL;
        /* full = root + '/' + path: cut it after this component. */
        size_t end = strlen(root) + 1 + (size_t)(slash - path);
        full[end] = '\0';
        if (mkdir(full, 0700) != 0 && errno != EEXIST)
            return osp_error_new(OSP_ERROR_INTERNAL, "cannot create '%s': %m",
                                 full);
        full[end] = '/';
        component = slash + 1;
    }
}

static osp_error *write_file(const char *root, const osp_model_file *f) {
    osp_error *err = make_parents(root, f->path);
    if (err)
        return err;
    char full[PATH_MAX];
    snprintf(full, sizeof full, "%s/%s", root, f->path);
    int fd =
        open(full, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return osp_error_new(OSP_ERROR_INTERNAL, "cannot create '%s': %m",
                             full);
    const char *p = f->data;
    size_t left = f->size;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            err = osp_error_new(OSP_ERROR_INTERNAL, "cannot write '%s': %m",
                                full);
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    close(fd);
    return err;
}

osp_error *load_override_write(const osp_load_override *ov,
                               const char *parent, char **dir) {
    if (!parent || !*parent)
        parent = getenv("TMPDIR");
    char *root = NULL;
    if (asprintf(&root, "%s/osprey-load-XXXXXX",
                 parent && *parent ? parent : "/tmp") < 0)
        return osp_error_out_of_memory();
    if (!mkdtemp(root)) {
        osp_error *err = osp_error_new(
            OSP_ERROR_INTERNAL, "cannot create a folder like '%s': %m", root);
        free(root);
        return err;
    }
    for (size_t i = 0; i < ov->n_files; i++) {
        osp_error *err = write_file(root, &ov->files[i]);
        if (err) {
            load_override_remove(root);
            return err;
        }
    }
    *dir = root;
    return NULL;
}

static int remove_entry(const char *path, const struct stat *st, int type,
                        struct FTW *ftw) {
    (void)st, (void)type, (void)ftw;
    remove(path);
    return 0;
}

void load_override_remove(char *dir) {
    if (!dir)
        return;
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}
