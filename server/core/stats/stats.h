/*
 * The statistics recorder of one model version (Triton's
 * InferenceStatsAggregator): counters updated when requests and batch
 * executions end, read as a snapshot by the statistics API and metrics.
 * Thread-safe; each update takes the recorder's mutex briefly.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "osprey/stats.h"

typedef struct model_stats {
    pthread_mutex_t lock;
    osp_model_stats totals;  /* name, version, batch_stats unused here */
    osp_batch_stat *batches; /* index = batch size, 0..max_batch */
    size_t n_batches;
    /* A decoupled model's per-response statistics, by response index (at
     * most MODEL_STATS_MAX_RESPONSES indices are kept). */
    osp_response_stat *responses;
    size_t n_responses;
} model_stats;

#define MODEL_STATS_MAX_RESPONSES 4096

typedef enum response_outcome {
    RESPONSE_SUCCESS = 0,
    RESPONSE_FAIL,
    RESPONSE_EMPTY, /* the final flag alone */
    RESPONSE_CANCEL,
} response_outcome;

/* Monotonic stage stamps (ns) of one request or batch; see request_times
 * in model_internal.h. */
typedef struct stats_stamps {
    uint64_t request_start;
    uint64_t queue_start;
    uint64_t compute_start;
    uint64_t compute_input_end;
    uint64_t compute_output_start;
    uint64_t compute_end;
} stats_stamps;

/* Where a request's compute durations are also added when it succeeds
 * (Triton's secondary statistics aggregator): an ensemble sums its steps'
 * into its own compute stages. */
typedef struct stats_sink {
    /* Added to and read with __atomic builtins (the header is also read
     * by C++ tests, where stdatomic.h's types do not exist). */
    uint64_t input_ns, infer_ns, output_ns;
} stats_sink;

/* Adds t's compute stages to sink. */
void stats_sink_add(stats_sink *sink, const stats_stamps *t);

/* Sets up counters for batches of up to max_batch rows. */
osp_error *model_stats_init(model_stats *s, int64_t max_batch);
void model_stats_destroy(model_stats *s);

/* A request ended well at end_ns: one success of `rows` inferences. */
void model_stats_record_success(model_stats *s, const stats_stamps *t,
                                uint64_t end_ns, int64_t rows);
/* A request answered from the response cache at end_ns: a success (its
 * duration counted) and a cache hit whose lookup took lookup_ns; as a
 * running Triton counts it, also one queue entry (of no time here) and no
 * inference, execution or compute. */
void model_stats_record_cache_hit(model_stats *s, uint64_t request_start_ns,
                                  uint64_t end_ns, uint64_t lookup_ns);
/* A cache miss whose lookup and insertion took ns together. */
void model_stats_record_cache_miss(model_stats *s, uint64_t ns);

/* A queued request failed at end_ns. */
void model_stats_record_failure(model_stats *s, uint64_t request_start_ns,
                                uint64_t end_ns, osp_failure_reason reason);
/* A batch of `rows` rows was executed (compute stamps of t) and finished
 * at wall-clock time now_ms (ms since the epoch). */
void model_stats_record_execution(model_stats *s, const stats_stamps *t,
                                  int64_t rows, uint64_t now_ms);

/* Response `index` of a decoupled model's request: started (the previous
 * one ended) at start_ns, sent by the backend at sent_ns, delivered at
 * end_ns (Triton's UpdateResponseSuccess / Fail / Empty / Cancel). */
void model_stats_record_response(model_stats *s, uint64_t index,
                                 response_outcome outcome, uint64_t start_ns,
                                 uint64_t sent_ns, uint64_t end_ns);

/* Copies the counters into out (name and version left alone;
 * out->batch_stats and out->response_stats are allocated: caller frees). */
osp_error *model_stats_snapshot(model_stats *s, osp_model_stats *out);
