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
    "model_repository",
    "model_repository(unload_dependents)", /* accepted; no ensembles */
    "schedule_policy", /* request priority and timeout parameters */
    "model_configuration",
    "system_shared_memory", /* with --allow-client-shm */
    "cuda_shared_memory",   /* with it and a GPU that opens IPC handles */
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
    NULL,
};

bool kserve_extension_reported(const char *name, bool shm, bool cuda_shm) {
    if (strcmp(name, "system_shared_memory") == 0)
        return shm;
    if (strcmp(name, "cuda_shared_memory") == 0)
        return shm && cuda_shm;
    return true;
}

const char *kserve_server_version(void) {
    return OSPREY_VERSION;
}
