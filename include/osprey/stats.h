/*
 * Inference statistics of loaded model versions, as Triton's statistics
 * extension and Prometheus metrics report them. Every queued request is
 * counted once when it ends (success or failure); every execution of a
 * batch once when it finishes. Requests refused before they were queued
 * (bad input, full queue) are not counted, as in Triton.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct osp_server osp_server;

/* Why a queued request failed (the `reason` label of
 * nv_inference_request_failure). */
typedef enum osp_failure_reason {
    OSP_FAILURE_OTHER = 0,
    OSP_FAILURE_REJECTED, /* its queue timeout expired (REJECT) */
    OSP_FAILURE_CANCELED,
    OSP_FAILURE_BACKEND, /* the batch it ran in failed */
    OSP_FAILURE_REASON_COUNT,
} osp_failure_reason;

/* "REJECTED", "CANCELED", "BACKEND", "OTHER". */
const char *osp_failure_reason_name(osp_failure_reason reason);

/* A count and the cumulative duration of what it counts. */
typedef struct osp_duration_stat {
    uint64_t count;
    uint64_t ns;
    /* The sum of each duration in whole microseconds (Prometheus counters
     * add ns / 1000 per request, as Triton does). */
    uint64_t us;
} osp_duration_stat;

/* Executions of one batch size. */
typedef struct osp_batch_stat {
    uint64_t batch_size;
    osp_duration_stat compute_input; /* count = executions */
    osp_duration_stat compute_infer;
    osp_duration_stat compute_output;
} osp_batch_stat;

/* Triton's per-response statistics of a decoupled model: its requests'
 * index-th responses (0 the first). compute_infer runs from the previous
 * response (or the request's compute start) to the backend's send,
 * compute_output from there until the frontend has it; success and fail
 * count data and error responses with their whole durations,
 * empty_response the final flag sent alone, cancel the responses dropped
 * because the client had gone. */
typedef struct osp_response_stat {
    uint64_t index;
    osp_duration_stat compute_infer;
    osp_duration_stat compute_output;
    osp_duration_stat success;
    osp_duration_stat fail;
    osp_duration_stat empty_response;
    osp_duration_stat cancel;
} osp_response_stat;

typedef struct osp_model_stats {
    char *name;
    int64_t version;
    uint64_t last_inference_ms; /* ms since the epoch; 0 = never */
    uint64_t inference_count;   /* batch rows of successful requests */
    uint64_t execution_count;   /* batches executed */
    osp_duration_stat success;  /* request durations */
    osp_duration_stat fail;
    osp_duration_stat queue; /* count = success count */
    osp_duration_stat compute_input;
    osp_duration_stat compute_infer;
    osp_duration_stat compute_output;
    osp_duration_stat cache_hit;  /* answered from the response cache */
    osp_duration_stat cache_miss; /* lookup + insertion of the others */
    uint64_t failures[OSP_FAILURE_REASON_COUNT]; /* fail.count, by reason */
    osp_batch_stat *batch_stats; /* ascending batch size, executed only */
    size_t n_batch_stats;
    osp_response_stat *response_stats; /* ascending index; decoupled only */
    size_t n_response_stats;
    uint64_t pending_requests; /* queued now, waiting for an instance */
    /* The response cache serves this model (its nv_cache_* metrics). */
    bool response_cache;
} osp_model_stats;

/* Statistics of READY model versions, in name order, versions ascending.
 * name NULL or "" = every model (version ignored); version -1 = every
 * ready version of `name`. Errors (INVALID_ARG, as Triton): "requested
 * model '<m>' is not available" (unknown, or no ready version),
 * "requested model version is not available for model '<m>'". Caller
 * frees *stats with osp_model_stats_free. */
osp_error *osp_server_model_statistics(osp_server *server, const char *name,
                                       int64_t version, osp_model_stats **stats,
                                       size_t *n);
void osp_model_stats_free(osp_model_stats *stats, size_t n);

/* The response cache as a whole (Triton's nv_cache_* gauges). */
typedef struct osp_cache_stats {
    uint64_t entries, lookups, hits, misses, evictions;
    uint64_t lookup_us, insertion_us; /* summed durations */
    double util;                      /* bytes used / capacity */
} osp_cache_stats;

/* False (out untouched) when the server has no response cache. */
bool osp_server_cache_statistics(osp_server *server, osp_cache_stats *out);

#ifdef __cplusplus
}
#endif
