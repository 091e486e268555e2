/*
 * How one S3 request is signed: libcurl computes AWS Signature Version 4
 * (CURLOPT_AWS_SIGV4) over the headers set here. Apart from the client so
 * that the unit tests can sign AWS's published examples with a fixed date.
 */
#pragma once

#include <curl/curl.h>
#include <stdbool.h>

#include "s3_credentials.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SHA-256 of an empty payload: what S3 requires in x-amz-content-sha256
 * for a GET. */
#define S3_EMPTY_PAYLOAD_SHA256                                                \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Sets up `curl` for a signed GET of `url` (borrowed): credentials,
 * region, x-amz-content-sha256, the session token and `range` ("bytes=A-B",
 * NULL: none) as signed headers, and `amz_date` ("YYYYMMDDTHHMMSSZ", NULL:
 * now) for tests. Anonymous credentials leave the request unsigned. The
 * caller owns *headers, also on failure (curl_slist_free_all after the
 * transfer); creds must outlive the transfer. False when out of memory. */
bool s3_sign_request(CURL *curl, const s3_credentials *creds, const char *url,
                     const char *range, const char *amz_date,
                     struct curl_slist **headers);

#ifdef __cplusplus
}
#endif
