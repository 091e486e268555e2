/*
 * Several model repositories read as one (Triton's repeated
 * --model-repository): local folders and sources (s3://) mixed. As in
 * Triton, a model name must be in one repository only; a name found in
 * more is left out of the listing and does not load, with the error
 * "failed to poll model '<m>': not unique across all model repositories"
 * in the log.
 */
#pragma once

#include "osprey/server.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct repository_set repository_set;

/* Repository i is sources[i] when sources and sources[i] are not NULL,
 * else the local folder paths[i] (resolved now: INVALID_ARG naming it when
 * it is missing). Everything borrowed; sources must outlive the set.
 * Caller frees *out. */
osp_error *repository_set_new(const char *const *paths,
                              const osp_repository_source *const *sources,
                              size_t n, repository_set **out);

/* The set as one source (valid until repository_set_free). */
const osp_repository_source *repository_set_source(repository_set *set);

void repository_set_free(repository_set *set);

#ifdef __cplusplus
}
#endif
