/*
 * What GET /v2 and the gRPC ServerMetadata RPC report: the server's
 * version and the extensions Osprey implements, in Triton's order.
 */
#pragma once

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Extensions in Triton's order, NULL-terminated; exactly what Osprey
 * implements ("system_shared_memory" only with --allow-client-shm,
 * "cuda_shared_memory" only with it and a GPU that opens IPC handles: see
 * kserve_extension_reported). */
extern const char *const kserve_extensions[];

/* Whether extension `name` (borrowed) is reported when client shared
 * memory is (shm) or is not allowed, and CUDA regions can (cuda_shm) or
 * cannot be opened. */
bool kserve_extension_reported(const char *name, bool shm, bool cuda_shm);

/* The server version string (static). */
const char *kserve_server_version(void);

#ifdef __cplusplus
}
#endif
