/*
 * The temporary model folder of a load request's "file:" parameters
 * (osp_load_override, osprey/server.h).
 */
#pragma once

#include "osprey/server.h"

/* Creates a private folder in `parent` (NULL: $TMPDIR or /tmp) holding
 * ov's files at their paths.
 * Paths must be relative, without empty, "." or ".." components, each
 * component at most NAME_MAX bytes. Caller owns *dir and removes it with
 * load_override_remove. */
osp_error *load_override_write(const osp_load_override *ov,
                               const char *parent, char **dir);

/* Deletes the folder from load_override_write and frees `dir` (NULL: no-op). */
void load_override_remove(char *dir);
