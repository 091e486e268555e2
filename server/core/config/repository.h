/*
 * The model repository on disk (Triton layout):
 *   <root>/<model>/config.pbtxt
 *   <root>/<model>/<version>/...     version = decimal, not starting with 0
 * Everything here refuses names and paths that would leave the repository:
 * "", ".", "..", names containing '/' or NUL, and symlinks whose target
 * resolves outside the root (or, for versions, outside the model folder).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/model_config.h"
#include "osprey/server.h"

#ifdef __cplusplus
extern "C" {
#endif

/* INVALID_ARG with a message saying why if `name` is not a safe model name. */
osp_error *repository_check_name(const char *name);

/* Sorted names of the model folders directly under `root` (hidden entries,
 * plain files and unsafe entries are skipped). Caller frees each name and
 * the array with free(). */
osp_error *repository_list(const char *root, char ***names, size_t *n);

/* A number that changes when model `name`'s folder changes in a way a
 * reload would see: its config.pbtxt (time and size) and its version
 * folders (names and times). 0 when the folder is gone. For poll mode. */
uint64_t repository_fingerprint(const char *root, const char *name);

/* Absolute, symlink-resolved path of model `name`'s folder, verified to be
 * inside `root`. NOT_FOUND when missing, INVALID_ARG when unsafe. Caller
 * frees *path. */
osp_error *repository_model_dir(const char *root, const char *name,
                                char **path);

/* The versions of the model in `model_dir` that `policy` selects, ascending:
 * latest N = the N highest numeric folders, all = every one, specific = the
 * listed ones that exist. Non-numeric folders and those starting with '0'
 * are ignored; version folders that are symlinks out of model_dir are
 * skipped. No version at all is NOT_FOUND. Caller frees *versions. */
osp_error *repository_select_versions(const char *model_dir,
                                      const osp_version_policy *policy,
                                      int64_t **versions, size_t *n);

/* *src reads the local repository at `root` (borrowed; it must outlive
 * src) with the functions above. */
void repository_local_source(const char *root, osp_repository_source *src);

#ifdef __cplusplus
}
#endif
