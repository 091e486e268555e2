/*
 * HTTP content codings with zlib: request bodies are inflated as they
 * stream in (gzip and zlib-wrapped deflate, auto-detected as Triton does),
 * response bodies are compressed in one go when Accept-Encoding asks.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/error.h"

typedef enum http_encoding {
    HTTP_ENCODING_IDENTITY = 0,
    HTTP_ENCODING_GZIP,
    HTTP_ENCODING_DEFLATE,
    HTTP_ENCODING_UNKNOWN,
} http_encoding;

/* A request's Content-Encoding (NULL = absent): exact "gzip", "deflate",
 * "identity" or "" as Triton compares them; anything else is UNKNOWN. */
http_encoding http_content_encoding(const char *value);

/* The best of identity/deflate/gzip in an Accept-Encoding value (NULL =
 * absent), honouring ";q=" weights the way Triton parses them. */
http_encoding http_accept_encoding(const char *value);

const char *http_encoding_name(http_encoding enc);

/* ---- streaming inflate ---- */

typedef struct http_inflater http_inflater;

/* Receives decompressed bytes (borrowed, valid during the call). */
typedef osp_error *(*http_sink_fn)(void *ctx, const char *data, size_t len);

/* NULL on OOM. */
http_inflater *http_inflater_new(void);
void http_inflater_free(http_inflater *z);
/* Inflates in[0..n) and passes the output to sink in pieces. Errors come
 * from the sink, or INVALID_ARG for corrupt data. Bytes after the end of
 * the compressed stream are ignored. */
osp_error *http_inflater_feed(http_inflater *z, const void *in, size_t n,
                              http_sink_fn sink, void *ctx);
/* Whether the end of the compressed stream has been reached: a body that
 * ends before it was truncated. */
bool http_inflater_done(const http_inflater *z);

/* ---- one-shot compress ---- */

typedef struct http_part {
    const void *base;
    size_t len;
} http_part;

/* Compresses the concatenation of parts (gzip or deflate) into a new buffer
 * the caller frees. Errors only for OOM or zlib failures; callers then send
 * the identity body, as Triton does. */
osp_error *http_compress(http_encoding enc, const http_part *parts,
                         size_t n_parts, char **out, size_t *out_len);
