/*
 * The statistics extension: GET /v2/models/stats and
 * /v2/models/{m}[/versions/{v}]/stats, with the JSON of Triton's
 * TRITONSERVER_ServerModelStatistics (protocol reference §6), written
 * compactly in Triton's member order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "kserve.h"
#include "kserve_params.h"
#include "osprey/stats.h"

static void write_duration(bytebuf *b, const char *name,
                           const osp_duration_stat *d) {
    bytebuf_printf(b, "\"%s\":{\"count\":%llu,\"ns\":%llu}", name,
                   (unsigned long long)d->count, (unsigned long long)d->ns);
}

/* Orders response indices as Triton's std::map of their decimal strings
 * does: "0", "1", "10", "11", "2", ... */
static int by_index_text(const void *x, const void *y) {
    char a[24], c[24];
    snprintf(a, sizeof a, "%llu",
             (unsigned long long)((const osp_response_stat *)x)->index);
    snprintf(c, sizeof c, "%llu",
             (unsigned long long)((const osp_response_stat *)y)->index);
    return strcmp(a, c);
}

/* "response_stats": a decoupled model's statistics per response index. */
static void write_response_stats(bytebuf *b, const osp_model_stats *m) {
    bytebuf_puts(b, "\"response_stats\":{");
    osp_response_stat *sorted =
        m->n_response_stats ? malloc(m->n_response_stats * sizeof *sorted)
                            : NULL;
    if (sorted) {
        memcpy(sorted, m->response_stats, m->n_response_stats * sizeof *sorted);
        qsort(sorted, m->n_response_stats, sizeof *sorted, by_index_text);
    } else if (m->n_response_stats) {
        b->oom = true;
    }
    for (size_t i = 0; sorted && i < m->n_response_stats; i++) {
        const osp_response_stat *r = &sorted[i];
        bytebuf_printf(b, "%s\"%llu\":{", i ? "," : "",
                       (unsigned long long)r->index);
        write_duration(b, "compute_infer", &r->compute_infer);
        bytebuf_putc(b, ',');
        write_duration(b, "compute_output", &r->compute_output);
        bytebuf_putc(b, ',');
        write_duration(b, "success", &r->success);
        bytebuf_putc(b, ',');
        write_duration(b, "fail", &r->fail);
        bytebuf_putc(b, ',');
        write_duration(b, "empty_response", &r->empty_response);
        bytebuf_putc(b, ',');
        write_duration(b, "cancel", &r->cancel);
        bytebuf_putc(b, '}');
    }
    free(sorted);
    bytebuf_putc(b, '}');
}

static void write_model(bytebuf *b, const osp_model_stats *m) {
    bytebuf_puts(b, "{\"name\":");
    json_write_cstr(b, m->name);
    bytebuf_printf(b,
                   ",\"version\":\"%lld\",\"last_inference\":%llu,"
                   "\"inference_count\":%llu,\"execution_count\":%llu,"
                   "\"inference_stats\":{",
                   (long long)m->version,
                   (unsigned long long)m->last_inference_ms,
                   (unsigned long long)m->inference_count,
                   (unsigned long long)m->execution_count);
    write_duration(b, "success", &m->success);
    bytebuf_putc(b, ',');
    write_duration(b, "fail", &m->fail);
    bytebuf_putc(b, ',');
    write_duration(b, "queue", &m->queue);
    bytebuf_putc(b, ',');
    write_duration(b, "compute_input", &m->compute_input);
    bytebuf_putc(b, ',');
    write_duration(b, "compute_infer", &m->compute_infer);
    bytebuf_putc(b, ',');
    write_duration(b, "compute_output", &m->compute_output);
    bytebuf_putc(b, ',');
    write_duration(b, "cache_hit", &m->cache_hit);
    bytebuf_putc(b, ',');
    write_duration(b, "cache_miss", &m->cache_miss);
    /* memory_usage is what backends report: Osprey's report nothing. */
    bytebuf_puts(b, "},");
    write_response_stats(b, m);
    bytebuf_puts(b, ",\"batch_stats\":[");
    for (size_t i = 0; i < m->n_batch_stats; i++) {
        const osp_batch_stat *s = &m->batch_stats[i];
        bytebuf_printf(b, "%s{\"batch_size\":%llu,", i ? "," : "",
                       (unsigned long long)s->batch_size);
        write_duration(b, "compute_input", &s->compute_input);
        bytebuf_putc(b, ',');
        write_duration(b, "compute_infer", &s->compute_infer);
        bytebuf_putc(b, ',');
        write_duration(b, "compute_output", &s->compute_output);
        bytebuf_putc(b, '}');
    }
    bytebuf_puts(b, "],\"memory_usage\":[]}");
}

osp_error *kserve_stats_reply(http_request *req, const char *model,
                              const char *version) {
    int64_t version_num = -1;
    osp_error *err = kserve_parse_version(version, &version_num);
    if (err)
        return err;
    osp_model_stats *stats = NULL;
    size_t n = 0;
    err = osp_server_model_statistics(kserve_core(req), model, version_num,
                                      &stats, &n);
    if (err)
        return err;
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_puts(&b, "{\"model_stats\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            bytebuf_putc(&b, ',');
        write_model(&b, &stats[i]);
    }
    bytebuf_puts(&b, "]}");
    osp_model_stats_free(stats, n);
    return kserve_reply_json(req, &b);
}
