/*
 * Triton's restricted APIs without a transport: the API groups of the
 * KServe surfaces and the key (header or gRPC metadata) and value a group
 * requires. The HTTP surface reads them from --http-restricted-api and
 * checks request headers; the gRPC one reads --grpc-restricted-protocol
 * (whose keys Triton prefixes with "triton-grpc-protocol-") and checks
 * call metadata. Both parse with kserve_restriction_add.
 */
#pragma once

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Triton's API groups (RestrictedCategory), in its order. */
typedef enum kserve_api {
    KSERVE_API_HEALTH = 0,
    KSERVE_API_METADATA,
    KSERVE_API_INFERENCE,
    KSERVE_API_SHARED_MEMORY,
    KSERVE_API_MODEL_CONFIG,
    KSERVE_API_MODEL_REPOSITORY,
    KSERVE_API_STATISTICS,
    KSERVE_API_TRACE,
    KSERVE_API_LOGGING,
    KSERVE_API_COUNT,
} kserve_api;

/* Which key (and value) a restricted API group requires; key NULL: open
 * to everyone. Strings owned by the table. */
typedef struct kserve_restriction {
    char *header;
    char *value;
} kserve_restriction;

/* How one restriction flag is spelled: its name for the format error
 * ("http-restricted-api"), what a group is called in the other errors
 * ("api" or "protocol"), and what the key is prefixed with ("" or
 * "triton-grpc-protocol-"). */
typedef struct kserve_restriction_flag {
    const char *option_name;
    const char *feature_type;
    const char *key_prefix;
    const char *groups_placeholder; /* in the format error */
} kserve_restriction_flag;

extern const kserve_restriction_flag kserve_http_restriction_flag;
extern const kserve_restriction_flag kserve_grpc_restriction_flag;

/* Adds one flag value, "<group>[,<group>...]:<key>=<value>" (arg
 * borrowed), with Triton's start-up errors: the format, "unknown
 * restricted <type> '<group>'", "restricted <type> '<group>' can not be
 * specified in multiple config groups". */
osp_error *kserve_restriction_add(kserve_restriction table[KSERVE_API_COUNT],
                                  const kserve_restriction_flag *flag,
                                  const char *arg);
void kserve_restrictions_free(kserve_restriction table[KSERVE_API_COUNT]);

#ifdef __cplusplus
}
#endif
