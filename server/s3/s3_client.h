/*
 * The S3 requests a model repository needs, on libcurl: ListObjectsV2
 * (every page) and GetObject into a file (ranged, resumed after a broken
 * transfer, verified by size and by ETag when it is an MD5). Requests are
 * signed with AWS Signature Version 4 by libcurl (CURLOPT_AWS_SIGV4).
 *
 * Bounded: connecting may take 5 s, a transfer that moves no byte for
 * 10 s fails, and each request is tried AWS_MAX_ATTEMPTS times (default
 * 3) on 5xx, throttling and transport errors, with exponential backoff.
 * TLS is verified against --repository-ca-file or the system's store.
 * Thread-safe: every call uses its own connection.
 */
#pragma once

#include <stddef.h>

#include "osprey/error.h"
#include "s3_credentials.h"
#include "s3_list_xml.h"
#include "s3_url.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct s3_client s3_client;

/* `loc` and `ca_file` (NULL: the system store) are copied; ownership of
 * *creds moves to the client (it is zeroed). Caller frees *out. */
osp_error *s3_client_new(const s3_location *loc, s3_credentials *creds,
                         const char *ca_file, s3_client **out);
void s3_client_free(s3_client *client);

/* Every object whose key starts with `prefix` (borrowed; "" = all), in
 * key order, at most `max_objects`. Caller frees with s3_objects_free. */
osp_error *s3_client_list(s3_client *client, const char *prefix,
                          size_t max_objects, s3_object **objects, size_t *n);

/* Downloads `obj` into a new file at `path` (borrowed; must not exist).
 * A failed download may leave a partial file: callers write into a folder
 * they discard on error. */
osp_error *s3_client_download(s3_client *client, const s3_object *obj,
                              const char *path);

/* Where the credentials came from and the region, for the log. */
const char *s3_client_credentials_source(const s3_client *client);
const char *s3_client_region(const s3_client *client);

#ifdef __cplusplus
}
#endif
