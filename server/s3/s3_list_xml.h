/*
 * Readers of S3's XML replies, on expat: a ListObjectsV2 page and an
 * <Error> body. Every size is bounded: keys at most 1024 bytes (S3's
 * limit), ETags and tokens at most 1024, at most S3_LIST_MAX_OBJECTS
 * objects per page, element nesting at most 16.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define S3_LIST_MAX_OBJECTS 10000

typedef struct s3_object {
    char *key;
    uint64_t size;
    char *etag; /* as listed, quotes removed; "" when absent */
} s3_object;

typedef struct s3_list_page {
    s3_object *objects;
    size_t n_objects;
    bool truncated;
    char *next_token; /* NextContinuationToken, NULL when none */
} s3_list_page;

/* Parses a ListBucketResult. INVALID_ARG for malformed XML, a document
 * that is not a ListBucketResult, or a value over its bound. Caller
 * destroys *page (also zeroed on error). */
osp_error *s3_list_page_parse(const char *xml, size_t len, s3_list_page *page);
void s3_list_page_destroy(s3_list_page *page);

/* Frees n objects and the array. */
void s3_objects_free(s3_object *objects, size_t n);

/* S3's error body: <Error><Code>..</Code><Message>..</Message>
 * <Region>..</Region></Error>, each field "" when absent and cut to fit. */
typedef struct s3_error_reply {
    char code[128];
    char message[512];
    char region[64];
} s3_error_reply;

/* Fills *out (zeroed first); false when the body is not such a document. */
bool s3_error_parse(const char *xml, size_t len, s3_error_reply *out);

#ifdef __cplusplus
}
#endif
