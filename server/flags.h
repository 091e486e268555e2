/*
 * The osprey program's command-line flags: one table (flags.c) gives each
 * flag's name (Triton's where Triton has the flag), type, default, help
 * and how it is applied, so --help, the defaults and parsing cannot drift
 * apart.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cache_config.h"
#include "kserve_restrict.h"
#include "osprey/device_impl.h"
#include "osprey/queue.h"
#include "osprey/server.h"
#include "osprey/trace.h"

typedef struct osprey_flags {
    const char *model_repository;    /* the first of model_repositories */
    const char **model_repositories; /* owned array of argv strings */
    size_t n_model_repositories;
    const char *server_id; /* --id: "name" of GET /v2 */
    bool exit_on_error;    /* exit at start when a model fails to load */
    bool strict_readiness; /* ready = live and every model ready */
    long long exit_timeout_secs;
    long long model_load_thread_count; /* models loaded at once */
    long long http_port;
    const char *http_address;
    long long http_thread_count;
    long long http_max_connections;    /* open at once, all clients */
    long long http_connection_timeout; /* seconds idle; 0: never closed */
    long long http_max_input_size;
    osp_model_control_mode control_mode;
    long long repository_poll_secs;
    const char *repository_cache_dir; /* s3:// models; NULL: $TMPDIR */
    const char *repository_ca_file;   /* s3:// over TLS; NULL: system's */
    const char **load_models; /* owned array of argv strings */
    size_t n_load_models;
    long long log_verbose;
    bool strict_gpu;
    long long max_sequences; /* live sequences per sequence model version */
    bool disable_auto_complete_config;
    bool strict_model_config;
    /* --backend-config: owned array; each entry's three strings share one
     * allocation, starting at `backend` */
    osp_backend_setting *backend_settings;
    size_t n_backend_settings;
    osp_device_options devices;
    size_t response_cache_bytes; /* --cache-config=local,size=N or
                                    --response-cache-byte-size=N */
    /* which of the two cache flags were given, and the cache type of the
     * first --cache-config (Triton refuses a mix of either) */
    bool cache_config_given, cache_byte_size_given;
    char cache_config_type[16];
    /* --cache-config=redis,...; used when cache_config_type is "redis" */
    redis_cache_config redis_cache;
    osp_tracer_options trace;
    bool allow_metrics;
    bool allow_gpu_metrics;
    bool allow_cpu_metrics;
    long long metrics_port;
    const char *metrics_address; /* NULL = the HTTP address */
    bool rest_api_enable_cors_support;
    bool allow_client_shm;
    /* the queue service (docs/queue.md) */
    const char **queue_services; /* --queue-service: owned array of argv
                                    strings */
    size_t n_queue_services;
    const char *queue_token; /* NULL: no Authorization needed */
    /* --queue-store-password-file's first line (owned), NULL when not
     * given */
    char *queue_store_password;
    long long queue_max_payload_bytes;
    long long queue_max_length;
    const char *queue_dir; /* embedded store directory */
    osp_queue_fsync queue_fsync;
    const char *queue_store; /* NULL: embedded; redis://HOST:PORT[/DB] */
    long long queue_worker_window;
    long long queue_consumer_grace_ms;
    /* --http-restricted-api groups, per KServe API (kserve_restrict.h) */
    kserve_restriction restricted_apis[KSERVE_API_COUNT];
    /* headers forwarded as request parameters (kserve_header_forward.h);
     * NULL: none */
    const char *http_header_forward_pattern;
    const char *grpc_header_forward_pattern;
    /* the gRPC service (server/grpc/grpc_server.h) */
    bool allow_grpc;
    long long grpc_port;
    const char *grpc_address;
    bool reuse_grpc_port;
    long long grpc_infer_thread_count;
    long long grpc_infer_allocation_pool_size;
    bool grpc_use_ssl;
    bool grpc_use_ssl_mutual;
    const char *grpc_server_cert;
    const char *grpc_server_key;
    const char *grpc_root_cert;
    int grpc_infer_compression; /* kgrpc_compression */
    long long grpc_keepalive_time_ms;
    long long grpc_keepalive_timeout_ms;
    bool grpc_keepalive_permit_without_calls;
    long long grpc_http2_max_pings_without_data;
    long long grpc_http2_min_recv_ping_interval_ms;
    long long grpc_http2_max_ping_strikes;
    long long grpc_max_connection_age_ms;
    long long grpc_max_connection_age_grace_ms;
    long long grpc_max_message_size;
    /* --grpc-restricted-protocol groups (metadata keys prefixed with
     * "triton-grpc-protocol-", as Triton) */
    kserve_restriction grpc_restricted[KSERVE_API_COUNT];
} osprey_flags;

/* Fills *f with every flag's default, then applies argv (`--flag=value` or
 * `--flag value`; strings point into argv). Returns -1 to go on, or the
 * status main() exits with: 0 after --help or --help-markdown, 2 after a usage error (the
 * message is printed). Triton flags that mean nothing to Osprey are
 * accepted, each logged once as a warning "--<flag> has no effect in
 * Osprey" after argv is applied (so --log-file and --log-warning hold for
 * it); a flag neither side knows is a usage error. Release with
 * flags_free in every case. */
int flags_parse(int argc, char **argv, osprey_flags *f);
void flags_free(osprey_flags *f);

/* The --help text, generated from the table. */
void flags_usage(FILE *out);

/* The flag reference as Markdown (--help-markdown): a table of every flag
 * with its default and help, then the Triton flags accepted without
 * effect. docs/flags.md holds its output; a test keeps the two equal. */
void flags_markdown(FILE *out);
