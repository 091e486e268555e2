/*
 * Per-model-version statistics (Triton's InferenceStatsAggregator and
 * TRITONSERVER_ServerModelStatistics); osp_server_model_statistics in
 * server.c gathers them.
 */
#include "stats.h"

#include <stdlib.h>
#include <string.h>

const char *osp_failure_reason_name(osp_failure_reason reason) {
    switch (reason) {
    case OSP_FAILURE_REJECTED:
        return "REJECTED";
    case OSP_FAILURE_CANCELED:
        return "CANCELED";
    case OSP_FAILURE_BACKEND:
        return "BACKEND";
    default:
        return "OTHER";
    }
}

/* ---- recorder
 * ----------------------------------------------------------------- */

osp_error *model_stats_init(model_stats *s, int64_t max_batch) {
    memset(s, 0, sizeof(*s));
    s->n_batches = (size_t)(max_batch > 0 ? max_batch : 1) + 1;
    s->batches = calloc(s->n_batches, sizeof(*s->batches));
    if (!s->batches)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < s->n_batches; i++)
        s->batches[i].batch_size = i;
    pthread_mutex_init(&s->lock, NULL);
    return NULL;
}

void model_stats_destroy(model_stats *s) {
    if (!s->batches)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s->batches);
    free(s->responses);
    s->batches = NULL;
    s->responses = NULL;
}

/* b - a, or 0 when a stage was not reached or clocks disagree. */
static uint64_t span(uint64_t a, uint64_t b) {
    return a && b > a ? b - a : 0;
}

static void add(osp_duration_stat *d, uint64_t count, uint64_t ns) {
    d->count += count;
    d->ns += ns;
    d->us += ns / 1000;
}

void model_stats_record_success(model_stats *s, const stats_stamps *t,
                                uint64_t end_ns, int64_t rows) {
    uint64_t request = span(t->request_start, end_ns);
    uint64_t queue = span(t->queue_start, t->compute_start);
    uint64_t input = span(t->compute_start, t->compute_input_end);
    uint64_t infer = span(t->compute_input_end, t->compute_output_start);
    uint64_t output = span(t->compute_output_start, t->compute_end);
    pthread_mutex_lock(&s->lock);
    osp_model_stats *m = &s->totals;
    m->inference_count += (uint64_t)(rows > 0 ? rows : 1);
    add(&m->success, 1, request);
    add(&m->queue, 1, queue);
    add(&m->compute_input, 1, input);
    add(&m->compute_infer, 1, infer);
    add(&m->compute_output, 1, output);
    pthread_mutex_unlock(&s->lock);
}

void model_stats_record_cache_hit(model_stats *s, uint64_t request_start_ns,
                                  uint64_t end_ns, uint64_t lookup_ns) {
    pthread_mutex_lock(&s->lock);
    add(&s->totals.success, 1, span(request_start_ns, end_ns));
    add(&s->totals.queue, 1, 0); /* Triton counts a hit as queued, briefly */
    add(&s->totals.cache_hit, 1, lookup_ns);
    pthread_mutex_unlock(&s->lock);
}

void model_stats_record_cache_miss(model_stats *s, uint64_t ns) {
    pthread_mutex_lock(&s->lock);
    add(&s->totals.cache_miss, 1, ns);
    pthread_mutex_unlock(&s->lock);
}

void stats_sink_add(stats_sink *sink, const stats_stamps *t) {
    __atomic_fetch_add(&sink->input_ns,
                       span(t->compute_start, t->compute_input_end),
                       __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&sink->infer_ns,
                       span(t->compute_input_end, t->compute_output_start),
                       __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&sink->output_ns,
                       span(t->compute_output_start, t->compute_end),
                       __ATOMIC_SEQ_CST);
}

void model_stats_record_failure(model_stats *s, uint64_t request_start_ns,
                                uint64_t end_ns, osp_failure_reason reason) {
    if ((unsigned)reason >= OSP_FAILURE_REASON_COUNT)
        reason = OSP_FAILURE_OTHER;
    pthread_mutex_lock(&s->lock);
    add(&s->totals.fail, 1, span(request_start_ns, end_ns));
    s->totals.failures[reason]++;
    pthread_mutex_unlock(&s->lock);
}

void model_stats_record_execution(model_stats *s, const stats_stamps *t,
                                  int64_t rows, uint64_t now_ms) {
    uint64_t input = span(t->compute_start, t->compute_input_end);
    uint64_t infer = span(t->compute_input_end, t->compute_output_start);
    uint64_t output = span(t->compute_output_start, t->compute_end);
    size_t size = (size_t)(rows > 0 ? rows : 1);
    pthread_mutex_lock(&s->lock);
    if (now_ms > s->totals.last_inference_ms)
        s->totals.last_inference_ms = now_ms;
    s->totals.execution_count++;
    if (size < s->n_batches) {
        osp_batch_stat *b = &s->batches[size];
        add(&b->compute_input, 1, input);
        add(&b->compute_infer, 1, infer);
        add(&b->compute_output, 1, output);
    }
    pthread_mutex_unlock(&s->lock);
}

void model_stats_record_response(model_stats *s, uint64_t index,
                                 response_outcome outcome, uint64_t start_ns,
                                 uint64_t sent_ns, uint64_t end_ns) {
    if (index >= MODEL_STATS_MAX_RESPONSES)
        return;
    pthread_mutex_lock(&s->lock);
    if (index >= s->n_responses) {
        size_t n = (size_t)index + 1;
        osp_response_stat *grown = realloc(s->responses, n * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&s->lock);
            return; /* a statistic is lost, never a request */
        }
        memset(grown + s->n_responses, 0,
               (n - s->n_responses) * sizeof *grown);
        for (size_t i = s->n_responses; i < n; i++)
            grown[i].index = i;
        s->responses = grown;
        s->n_responses = n;
    }
    osp_response_stat *r = &s->responses[index];
    uint64_t infer = span(start_ns, sent_ns), output = span(sent_ns, end_ns);
    switch (outcome) {
    case RESPONSE_SUCCESS:
    case RESPONSE_FAIL:
        add(&r->compute_infer, 1, infer);
        add(&r->compute_output, 1, output);
        add(outcome == RESPONSE_SUCCESS ? &r->success : &r->fail, 1,
            span(start_ns, end_ns));
        break;
    case RESPONSE_EMPTY:
        add(&r->empty_response, 1, span(start_ns, end_ns));
        break;
    default:
        add(&r->cancel, 1, span(start_ns, end_ns));
    }
    pthread_mutex_unlock(&s->lock);
}

osp_error *model_stats_snapshot(model_stats *s, osp_model_stats *out) {
    osp_batch_stat *list = calloc(s->n_batches, sizeof(*list));
    if (!list)
        return osp_error_out_of_memory();
    char *name = out->name;
    int64_t version = out->version;
    size_t n = 0;
    osp_response_stat *responses = NULL;
    pthread_mutex_lock(&s->lock);
    size_t n_responses = s->n_responses;
    if (n_responses &&
        (responses = malloc(n_responses * sizeof *responses)))
        memcpy(responses, s->responses, n_responses * sizeof *responses);
    *out = s->totals;
    for (size_t i = 0; i < s->n_batches; i++)
        if (s->batches[i].compute_infer.count > 0)
            list[n++] = s->batches[i];
    pthread_mutex_unlock(&s->lock);
    if (n_responses && !responses) {
        free(list);
        return osp_error_out_of_memory();
    }
    out->name = name;
    out->version = version;
    out->batch_stats = list;
    out->n_batch_stats = n;
    out->response_stats = responses;
    out->n_response_stats = n_responses;
    return NULL;
}

void osp_model_stats_free(osp_model_stats *stats, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(stats[i].name);
        free(stats[i].batch_stats);
        free(stats[i].response_stats);
    }
    free(stats);
}
