/*
 * The statistics extension: GET /v2/models/stats and
 * /v2/models/{m}[/versions/{v}]/stats, with the JSON of Triton's
 * TRITONSERVER_ServerModelStatistics (protocol reference §6), written
 * compactly in Triton's member order.
 */
#include <stdlib.h>

#include "json_util.h"
#include "kserve.h"
#include "kserve_params.h"
#include "osprey/stats.h"

static void write_duration(jbuf *b, const char *name,
                           const osp_duration_stat *d) {
    jbuf_printf(b, "\"%s\":{\"count\":%llu,\"ns\":%llu}", name,
                (unsigned long long)d->count, (unsigned long long)d->ns);
}

static void write_model(jbuf *b, const osp_model_stats *m) {
    jbuf_puts(b, "{\"name\":");
    jbuf_json_cstr(b, m->name);
    jbuf_printf(b,
                ",\"version\":\"%lld\",\"last_inference\":%llu,"
                "\"inference_count\":%llu,\"execution_count\":%llu,"
                "\"inference_stats\":{",
                (long long)m->version, (unsigned long long)m->last_inference_ms,
                (unsigned long long)m->inference_count,
                (unsigned long long)m->execution_count);
    write_duration(b, "success", &m->success);
    jbuf_putc(b, ',');
    write_duration(b, "fail", &m->fail);
    jbuf_putc(b, ',');
    write_duration(b, "queue", &m->queue);
    jbuf_putc(b, ',');
    write_duration(b, "compute_input", &m->compute_input);
    jbuf_putc(b, ',');
    write_duration(b, "compute_infer", &m->compute_infer);
    jbuf_putc(b, ',');
    write_duration(b, "compute_output", &m->compute_output);
    jbuf_putc(b, ',');
    write_duration(b, "cache_hit", &m->cache_hit);
    jbuf_putc(b, ',');
    write_duration(b, "cache_miss", &m->cache_miss);
    /* response_stats are per-response statistics of decoupled backends;
     * memory_usage is what backends report. Osprey has neither. */
    jbuf_puts(b, "},\"response_stats\":{},\"batch_stats\":[");
    for (size_t i = 0; i < m->n_batch_stats; i++) {
        const osp_batch_stat *s = &m->batch_stats[i];
        jbuf_printf(b, "%s{\"batch_size\":%llu,", i ? "," : "",
                    (unsigned long long)s->batch_size);
        write_duration(b, "compute_input", &s->compute_input);
        jbuf_putc(b, ',');
        write_duration(b, "compute_infer", &s->compute_infer);
        jbuf_putc(b, ',');
        write_duration(b, "compute_output", &s->compute_output);
        jbuf_putc(b, '}');
    }
    jbuf_puts(b, "],\"memory_usage\":[]}");
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
    jbuf b;
    jbuf_init(&b);
    jbuf_puts(&b, "{\"model_stats\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            jbuf_putc(&b, ',');
        write_model(&b, &stats[i]);
    }
    jbuf_puts(&b, "]}");
    osp_model_stats_free(stats, n);
    return kserve_reply_json(req, &b);
}
