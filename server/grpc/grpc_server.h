/*
 * The KServe v2 gRPC frontend (inference.GRPCInferenceService and
 * grpc.health.v1.Health/Check) on gRPC core's C API. main.c starts it as a
 * service beside the HTTP one, on the same core, tracer and shared memory
 * registry. Its files, one concern each:
 *   grpc_server.c        transport: the gRPC server, its completion queue
 *                        and threads, the method table, call lifetimes,
 *                        restricted APIs, statuses, shutdown
 *   grpc_infer.c         ModelInfer (asynchronous through the core)
 *   grpc_stream.c        ModelStreamInfer (bidirectional, several in flight)
 *   grpc_admin.c         health, metadata, config, statistics, repository
 *   grpc_settings.c      TraceSetting and LogSettings
 *   grpc_shm.c           the shared memory RPCs
 *   grpc_convert.c       request/response mapping (no gRPC types)
 *   grpc_model_config.c  ModelConfig as protobuf
 *   grpc_wire.c          protobuf wire helpers (no gRPC types)
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "kserve_header_forward.h"
#include "kserve_restrict.h"
#include "kserve_shm.h"
#include "osprey/error.h"
#include "osprey/server.h"
#include "osprey/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kgrpc_server kgrpc_server;

/* Response compression of the inference RPCs
 * (--grpc-infer-response-compression-level); gRPC picks the algorithm the
 * client accepts. */
typedef enum kgrpc_compression {
    KGRPC_COMPRESSION_NONE = 0,
    KGRPC_COMPRESSION_LOW,
    KGRPC_COMPRESSION_MEDIUM,
    KGRPC_COMPRESSION_HIGH,
} kgrpc_compression;

/* Triton's gRPC keepalive options, in milliseconds where they are times;
 * 0 for the connection ages means unset. */
typedef struct kgrpc_keepalive {
    int time_ms;
    int timeout_ms;
    bool permit_without_calls;
    int http2_max_pings_without_data;
    int http2_min_recv_ping_interval_without_data_ms;
    int http2_max_ping_strikes;
    int max_connection_age_ms;
    int max_connection_age_grace_ms;
} kgrpc_keepalive;

typedef struct kgrpc_options {
    const char *address; /* borrowed during kgrpc_server_start */
    int port;            /* 0: any free port (kgrpc_server_port) */
    bool reuse_port;
    /* The rest is borrowed for the server's lifetime. */
    osp_server *core;
    osp_tracer *tracer;                   /* may be NULL */
    const kserve_restriction *restricted; /* per kserve_api; may be NULL */
    const char *server_id;                /* ServerMetadata name */
    bool strict_readiness;
    kserve_shm_registry *shm; /* may be NULL */
    bool allow_client_shm;
    /* TLS: PEM files read at start (paths borrowed during start). */
    bool use_ssl;
    bool use_ssl_mutual;
    const char *server_cert;
    const char *server_key;
    const char *root_cert;
    kgrpc_keepalive keepalive;
    kgrpc_compression infer_compression;
    int max_message_size;           /* both directions; Triton: INT32_MAX */
    int infer_thread_count;         /* completion-queue threads; 0 = 1 on hosts
                                       with at most 2 CPUs, else 2 */
    int infer_allocation_pool_size; /* idle inference contexts kept */
    /* --grpc-header-forward-pattern; may be NULL */
    const kserve_header_forward *forward_headers;
} kgrpc_options;

/* Starts listening and serving. Errors name what failed (the address, a
 * certificate flag). Caller owns *out. */
osp_error *kgrpc_server_start(const kgrpc_options *opts, kgrpc_server **out);
/* The bound port (the chosen one when opts->port was 0). */
int kgrpc_server_port(const kgrpc_server *s);
/* Stops taking new calls; calls and streams in progress go on, and each
 * stream ends with OK once its requests in flight are answered. */
void kgrpc_server_stop_accepting(kgrpc_server *s);
/* Waits up to timeout_ms for every call to finish, then cancels what is
 * left. False when calls were still waiting for the core afterwards (the
 * server must then not be freed, nor the core). */
bool kgrpc_server_drain(kgrpc_server *s, int timeout_ms);
/* Frees a drained server. */
void kgrpc_server_free(kgrpc_server *s);

#ifdef __cplusplus
}
#endif
