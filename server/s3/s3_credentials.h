/*
 * AWS credentials and region, found where the AWS tools (and Triton) look:
 *   keys:   AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
 *           else the profile (AWS_PROFILE, or "default") of the shared
 *           credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials),
 *           else of the config file (AWS_CONFIG_FILE, ~/.aws/config);
 *           none at all: anonymous (unsigned) requests, for public buckets.
 *   region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region` in the
 *           config file, else us-east-1.
 * Secrets stay in this struct: nothing here logs or returns them.
 */
#pragma once

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct s3_credentials {
    char *access_key_id;     /* NULL: anonymous */
    char *secret_access_key; /* NULL: anonymous */
    char *session_token;     /* NULL: none */
    char *region;
    const char *source; /* "the environment", ...: for messages (static) */
} s3_credentials;

/* Fills *out (caller destroys it with s3_credentials_destroy). Errors:
 * a profile named by AWS_PROFILE that no file has, an unreadable file, a
 * key id without its secret. */
osp_error *s3_credentials_load(s3_credentials *out);
void s3_credentials_destroy(s3_credentials *creds);

#ifdef __cplusplus
}
#endif
