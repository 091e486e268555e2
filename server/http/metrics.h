/*
 * Prometheus metrics on their own port (Triton's metrics service, protocol
 * reference §8): a surface of its own http_server answering GET /metrics
 * with the text exposition format. Per-model counters come from the core's
 * statistics (osprey/stats.h); CPU figures from /proc; GPU figures from
 * NVML, loaded with dlopen at start so that the binary runs (without GPU
 * metrics) where no NVIDIA driver is installed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "http_server.h"
#include "osprey/error.h"
#include "osprey/server.h"
#include "queue_services.h"

/* The surface's context: the core, NVML and the last CPU sample. */
typedef struct metrics_exporter metrics_exporter;

typedef struct metrics_options {
    bool gpu; /* --allow-gpu-metrics */
    bool cpu; /* --allow-cpu-metrics */
    /* The queue services (borrowed for the exporter's life; NULL: no
     * queue metrics). */
    queue_services *queues;
} metrics_options;

/* Opens NVML when asked and present, and takes the first CPU sample.
 * `core` is borrowed for the context's lifetime. Caller owns *out. */
osp_error *metrics_new(const metrics_options *opts, osp_server *core,
                       metrics_exporter **out);
/* After the http_server serving it was freed. NULL is a no-op. */
void metrics_free(metrics_exporter *ms);

/* The "metrics" http_surface's route, with a metrics_exporter as its
 * surface_ctx: claims every request (GET /metrics gives the text). */
bool metrics_route(http_request *req, void *surface_ctx);

/* The exposition text a scrape returns now. Caller frees *text. */
osp_error *metrics_render(metrics_exporter *ms, char **text, size_t *len);
