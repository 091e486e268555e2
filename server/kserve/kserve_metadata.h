/*
 * What GET /v2 and the gRPC ServerMetadata RPC report: the server's
 * version and the extensions Osprey implements, in Triton's order.
 */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* Extensions in Triton's order, NULL-terminated: the list Triton 2.51
 * reports whatever its flags, so clients that look for a name find it; a
 * disabled one (client shared memory without --allow-client-shm, CUDA
 * regions without a GPU) answers its own error when used. */
extern const char *const kserve_extensions[];

/* The server version string (static). */
const char *kserve_server_version(void);

#ifdef __cplusplus
}
#endif
