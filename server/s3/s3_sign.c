/*
 * SigV4 through libcurl (see s3_sign.h). libcurl signs the Host header,
 * x-amz-date and every header the caller adds, and hashes the (empty)
 * payload; S3 also wants that hash sent as x-amz-content-sha256.
 */
#include "s3_sign.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends "name: value" to *list; false when out of memory. */
static bool add_header(struct curl_slist **list, const char *name,
                       const char *value) {
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (!line)
        return false;
    snprintf(line, n, "%s: %s", name, value);
    struct curl_slist *grown = curl_slist_append(*list, line);
    free(line);
    if (!grown)
        return false;
    *list = grown;
    return true;
}

bool s3_sign_request(CURL *curl, const s3_credentials *creds, const char *url,
                     const char *range, const char *amz_date,
                     struct curl_slist **headers) {
    *headers = NULL;
    curl_easy_setopt(curl, CURLOPT_URL, url);
    if (range && !add_header(headers, "Range", range))
        return false;
    if (!creds->access_key_id)
        return true; /* anonymous */
    char provider[128];
    snprintf(provider, sizeof provider, "aws:amz:%s:s3", creds->region);
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, provider);
    curl_easy_setopt(curl, CURLOPT_USERNAME, creds->access_key_id);
    curl_easy_setopt(curl, CURLOPT_PASSWORD, creds->secret_access_key);
    if (!add_header(headers, "x-amz-content-sha256", S3_EMPTY_PAYLOAD_SHA256))
        return false;
    if (creds->session_token &&
        !add_header(headers, "x-amz-security-token", creds->session_token))
        return false;
    if (amz_date && !add_header(headers, "x-amz-date", amz_date))
        return false;
    return true;
}
