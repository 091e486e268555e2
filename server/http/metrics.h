/*
 * Prometheus metrics on their own port (Triton's metrics service, protocol
 * reference §8): a separate libmicrohttpd daemon answering GET /metrics
 * with the text exposition format. Per-model counters come from the core's
 * statistics (osprey/stats.h); CPU figures from /proc; GPU figures from
 * NVML, loaded with dlopen at start so that the binary runs (without GPU
 * metrics) where no NVIDIA driver is installed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/error.h"
#include "osprey/server.h"

typedef struct metrics_server metrics_server;

typedef struct metrics_options {
    const char *address; /* IPv4 or IPv6 literal; borrowed during start */
    int port;            /* 0 = pick a free port */
    bool gpu;            /* --allow-gpu-metrics */
    bool cpu;            /* --allow-cpu-metrics */
} metrics_options;

/* Binds and starts serving. `core` is borrowed for the server's lifetime.
 * Caller owns *out. */
osp_error *metrics_server_start(const metrics_options *opts, osp_server *core,
                                metrics_server **out);
/* The port actually bound. */
int metrics_server_port(const metrics_server *ms);
/* Stops the daemon (waiting for a scrape in progress) and frees. */
void metrics_server_free(metrics_server *ms);

/* The exposition text a scrape returns now. Caller frees *text. */
osp_error *metrics_render(metrics_server *ms, char **text, size_t *len);
