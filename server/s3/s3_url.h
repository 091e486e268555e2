/*
 * Where an S3 model repository lives, in the forms Triton takes:
 *   s3://BUCKET[/PREFIX]                      AWS (virtual-hosted style)
 *   s3://HOST:PORT/BUCKET[/PREFIX]            an S3-compatible endpoint, HTTP
 *   s3://http://HOST:PORT/BUCKET[/PREFIX]     the same, spelled out
 *   s3://https://HOST:PORT/BUCKET[/PREFIX]    an S3-compatible endpoint, HTTPS
 * Endpoints are addressed path-style (as MinIO wants); AWS virtual-hosted
 * style, or path-style when the bucket name has a dot (TLS names).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define S3_MAX_PREFIX 1024 /* S3's own limit on a key */

typedef struct s3_location {
    bool https;
    char host[256]; /* "" for AWS: the host follows from bucket and region */
    int port;       /* 0 for AWS */
    char bucket[64];
    char prefix[S3_MAX_PREFIX]; /* "" or "a/b": no leading or trailing '/' */
} s3_location;

/* True when `path` names an S3 repository (starts with "s3://"). */
bool s3_url_is_s3(const char *path);

/* Parses `url` (borrowed). INVALID_ARG saying what is wrong otherwise. */
osp_error *s3_location_parse(const char *url, s3_location *out);

/* The request URL of object `key` (NULL: the bucket itself) with `query`
 * (already canonical: sorted, encoded; NULL or "" for none). The key is
 * percent-encoded as SigV4 signs it. Caller frees; NULL when out of memory. */
char *s3_location_url(const s3_location *loc, const char *region,
                      const char *key, const char *query);

/* "s3://HOST:PORT/BUCKET/PREFIX" or "s3://BUCKET/PREFIX" into buf, for
 * messages (a location holds no secret). */
void s3_location_describe(const s3_location *loc, char *buf, size_t cap);

/* Appends `s` percent-encoded (RFC 3986 unreserved kept, and '/' when
 * keep_slash) to buf[*len..cap). False when it does not fit. */
bool s3_url_encode(const char *s, bool keep_slash, char *buf, size_t *len,
                   size_t cap);

#ifdef __cplusplus
}
#endif
