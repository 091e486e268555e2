/*
 * Restricted API groups (see kserve_restrict.h): Triton's
 * ParseRestrictedFeatureOption and its messages.
 */
#include "kserve_restrict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const kserve_restriction_flag kserve_http_restriction_flag = {
    .option_name = "http-restricted-api",
    .feature_type = "api",
    .groups_placeholder = "API_1,API_2",
    .key_prefix = "",
};

/* gRPC metadata keys are lower case (HTTP/2), hence Triton's prefix. */
const kserve_restriction_flag kserve_grpc_restriction_flag = {
    .option_name = "grpc-restricted-protocol",
    .feature_type = "protocol",
    .groups_placeholder = "config name",
    .key_prefix = "triton-grpc-protocol-",
};

static const char *const api_names[KSERVE_API_COUNT] = {
    [KSERVE_API_HEALTH] = "health",
    [KSERVE_API_METADATA] = "metadata",
    [KSERVE_API_INFERENCE] = "inference",
    [KSERVE_API_SHARED_MEMORY] = "shared-memory",
    [KSERVE_API_MODEL_CONFIG] = "model-config",
    [KSERVE_API_MODEL_REPOSITORY] = "model-repository",
    [KSERVE_API_STATISTICS] = "statistics",
    [KSERVE_API_TRACE] = "trace",
    [KSERVE_API_LOGGING] = "logging",
};

osp_error *kserve_restriction_add(kserve_restriction table[KSERVE_API_COUNT],
                                  const kserve_restriction_flag *flag,
                                  const char *arg) {
    /* Triton's ParseGenericConfigOption: "<groups>:<setting>=<value>". */
    const char *colon = strchr(arg, ':');
    const char *eq = colon ? strchr(colon + 1, '=') : NULL;
    if (!colon || !eq || colon == arg || eq == colon + 1 || !eq[1])
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "--%s option format is "
                             "'<%s>:<setting>=<value>'. Got %s",
                             flag->option_name, flag->groups_placeholder, arg);
    for (const char *p = arg; p < colon;) {
        const char *end = memchr(p, ',', (size_t)(colon - p));
        if (!end)
            end = colon;
        size_t n = (size_t)(end - p);
        int api = -1;
        for (int i = 0; i < KSERVE_API_COUNT; i++)
            if (strlen(api_names[i]) == n && strncmp(api_names[i], p, n) == 0)
                api = i;
        if (api < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unknown restricted %s '%.*s'",
                                 flag->feature_type, (int)n, p);
        if (table[api].header)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "restricted %s '%.*s' can not be specified "
                                 "in multiple config groups",
                                 flag->feature_type, (int)n, p);
        size_t prefix_len = strlen(flag->key_prefix);
        size_t key_len = (size_t)(eq - colon - 1);
        table[api].header = malloc(prefix_len + key_len + 1);
        table[api].value = strdup(eq + 1);
        if (!table[api].header || !table[api].value)
            return osp_error_out_of_memory();
        memcpy(table[api].header, flag->key_prefix, prefix_len);
        memcpy(table[api].header + prefix_len, colon + 1, key_len);
        table[api].header[prefix_len + key_len] = '\0';
        p = end + 1;
    }
    return NULL;
}

void kserve_restrictions_free(kserve_restriction table[KSERVE_API_COUNT]) {
    for (int i = 0; i < KSERVE_API_COUNT; i++) {
        free(table[i].header);
        free(table[i].value);
        table[i].header = table[i].value = NULL;
    }
}
