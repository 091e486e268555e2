/*
 * Server metadata shared by the KServe surfaces (see kserve_metadata.h).
 */
#include "kserve_metadata.h"

#include <string.h>

#ifndef OSPREY_VERSION
#define OSPREY_VERSION "0.0.0"
#endif

const char *const kserve_extensions[] = {
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
    NULL,
};

const char *kserve_server_version(void) {
    return OSPREY_VERSION;
}
