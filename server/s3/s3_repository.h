/*
 * A Triton-layout model repository in an S3 bucket, served through the
 * core's osp_repository_source: the bucket is listed for model names and
 * per-model fingerprints (keys, sizes, ETags), and a model is downloaded
 * into a cache folder before it loads, so that backends read plain files.
 *
 * Cache layout, under a private folder made in --repository-cache-dir
 * (default $TMPDIR or /tmp) and removed by s3_repository_close:
 *   .partial-<n>/<model>/...   a download in progress (removed on failure)
 *   <n>/<model>/...            a complete download, renamed into place
 * A model keeps its last two downloads (the one loaded and the one being
 * replaced); older ones are removed.
 */
#pragma once

#include "osprey/error.h"
#include "osprey/server.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct s3_repository s3_repository;

/* Opens the repository at `url` (s3://..., see s3_url.h): reads the
 * credentials, makes the cache folder in `cache_dir` (NULL: the system's
 * temporary folder), and lists the bucket once, so that a wrong location,
 * wrong credentials or an endpoint that does not answer fail here, within
 * the client's timeouts. `ca_file` (NULL: the system store) verifies TLS.
 * All borrowed. Caller closes *out. */
osp_error *s3_repository_open(const char *url, const char *cache_dir,
                              const char *ca_file, s3_repository **out);

/* The source to put in osp_server_options (valid until close). */
const osp_repository_source *s3_repository_source(s3_repository *repo);

/* Removes the cache folder and frees. Call after the server is freed. */
void s3_repository_close(s3_repository *repo);

#ifdef __cplusplus
}
#endif
