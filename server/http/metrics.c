/*
 * The metrics service (see metrics.h): Triton's metric names, HELP texts
 * and label sets, in the order Triton registers its families, written the
 * way prometheus-cpp's text serializer writes them.
 *
 * Path rules (Triton's HTTPMetricsServer): any method but GET gives 405
 * {"error":"Method Not Allowed"}; GET /metrics or /metrics/ gives the
 * text; any other GET gives 200 with an empty body. The surface claims
 * every request of its http_server.
 */
#include "metrics.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array_grow.h"
#include "http_server.h"
#include "json_util.h"
#include "osprey/custom_metrics.h"
#include "osprey/device.h"
#include "osprey/log.h"
#include "osprey/stats.h"

#define MAX_NVML_DEVICES 64

/* ---- NVML, resolved at run time ---------------------------------------------
 */

/* The few NVML types used, as nvml.h declares them. */
typedef struct nvml_device_st *nvml_device;
typedef struct nvml_utilization {
    unsigned int gpu;
    unsigned int memory;
} nvml_utilization;
typedef struct nvml_memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvml_memory;

typedef struct nvml_api {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, nvml_device *);
    int (*uuid)(nvml_device, char *, unsigned int);
    int (*utilization)(nvml_device, nvml_utilization *);
    int (*memory)(nvml_device, nvml_memory *);
    int (*power)(nvml_device, unsigned int *);        /* mW */
    int (*power_limit)(nvml_device, unsigned int *);  /* mW */
    int (*energy)(nvml_device, unsigned long long *); /* mJ (optional) */
    unsigned int n;
    struct {
        nvml_device handle;
        char uuid[96];
        bool has_energy;
        unsigned long long energy_at_start; /* mJ */
    } devices[MAX_NVML_DEVICES];
} nvml_api;

/* Loads libnvidia-ml.so.1 and lists its GPUs. false (and nothing held)
 * when the library or a GPU is missing: GPU metrics are then left out. */
static bool nvml_open(nvml_api *api) {
    memset(api, 0, sizeof(*api));
    api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!api->lib)
        return false;
#define NVML_SYM(field, name) *(void **)(&api->field) = dlsym(api->lib, name)
    NVML_SYM(init, "nvmlInit_v2");
    NVML_SYM(shutdown, "nvmlShutdown");
    NVML_SYM(count, "nvmlDeviceGetCount_v2");
    NVML_SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
    NVML_SYM(uuid, "nvmlDeviceGetUUID");
    NVML_SYM(utilization, "nvmlDeviceGetUtilizationRates");
    NVML_SYM(memory, "nvmlDeviceGetMemoryInfo");
    NVML_SYM(power, "nvmlDeviceGetPowerUsage");
    NVML_SYM(power_limit, "nvmlDeviceGetPowerManagementLimit");
    NVML_SYM(energy, "nvmlDeviceGetTotalEnergyConsumption");
#undef NVML_SYM
    unsigned int n = 0;
    if (!api->init || !api->shutdown || !api->count || !api->handle ||
        !api->uuid || !api->utilization || !api->memory || !api->power ||
        !api->power_limit || api->init() != 0) {
        dlclose(api->lib);
        api->lib = NULL;
        return false;
    }
    if (api->count(&n) != 0)
        n = 0;
    for (unsigned int i = 0; i < n && api->n < MAX_NVML_DEVICES; i++) {
        nvml_device h;
        if (api->handle(i, &h) != 0)
            continue;
        unsigned k = api->n;
        api->devices[k].handle = h;
        if (api->uuid(h, api->devices[k].uuid, sizeof(api->devices[k].uuid)) !=
            0)
            snprintf(api->devices[k].uuid, sizeof(api->devices[k].uuid),
                     "GPU-%u", i);
        api->devices[k].has_energy =
            api->energy &&
            api->energy(h, &api->devices[k].energy_at_start) == 0;
        api->n++;
    }
    if (api->n == 0) {
        api->shutdown();
        dlclose(api->lib);
        api->lib = NULL;
        return false;
    }
    return true;
}

static void nvml_close(nvml_api *api) {
    if (!api->lib)
        return;
    api->shutdown();
    dlclose(api->lib);
    api->lib = NULL;
}

/* ---- the surface's context --------------------------------------------------
 */

struct metrics_exporter {
    osp_server *core;
    queue_services *queues;
    bool cpu;
    bool gpu;
    nvml_api nvml;
    pthread_mutex_t lock;         /* the CPU sample below, and NVML calls */
    uint64_t cpu_busy, cpu_total; /* /proc/stat at the previous scrape */
};

/* ---- text format ------------------------------------------------------------
 */

static void family(bytebuf *b, const char *name, const char *help,
                   const char *type) {
    bytebuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with Prometheus's escapes (\\, \", \n). */
static void label_value(bytebuf *b, const char *s) {
    bytebuf_putc(b, '"');
    for (; *s; s++) {
        if (*s == '\\')
            bytebuf_puts(b, "\\\\");
        else if (*s == '"')
            bytebuf_puts(b, "\\\"");
        else if (*s == '\n')
            bytebuf_puts(b, "\\n");
        else
            bytebuf_putc(b, *s);
    }
    bytebuf_putc(b, '"');
}

/* name{model="m",[reason="r",]version="v"} (labels sorted by name, as
 * prometheus-cpp writes them). */
static void model_sample(bytebuf *b, const char *name, const osp_model_stats *m,
                         const char *reason) {
    bytebuf_printf(b, "%s{model=", name);
    label_value(b, m->name);
    if (reason) {
        bytebuf_puts(b, ",reason=");
        label_value(b, reason);
    }
    bytebuf_printf(b, ",version=\"%lld\"} ", (long long)m->version);
}

static void value_u64(bytebuf *b, uint64_t v) {
    bytebuf_printf(b, "%" PRIu64 "\n", v);
}

static void value_double(bytebuf *b, double v) {
    bytebuf_printf(b, "%.10g\n", v);
}

/* A per-model counter family whose value is field(m). */
typedef uint64_t (*model_field)(const osp_model_stats *m);

static uint64_t f_success(const osp_model_stats *m) {
    return m->success.count;
}
static uint64_t f_count(const osp_model_stats *m) {
    return m->inference_count;
}
static uint64_t f_exec(const osp_model_stats *m) {
    return m->execution_count;
}
static uint64_t f_request_us(const osp_model_stats *m) {
    return m->success.us;
}
static uint64_t f_queue_us(const osp_model_stats *m) {
    return m->queue.us;
}
static uint64_t f_input_us(const osp_model_stats *m) {
    return m->compute_input.us;
}
static uint64_t f_infer_us(const osp_model_stats *m) {
    return m->compute_infer.us;
}
static uint64_t f_output_us(const osp_model_stats *m) {
    return m->compute_output.us;
}
static uint64_t f_pending(const osp_model_stats *m) {
    return m->pending_requests;
}

static const struct model_family {
    const char *name;
    const char *help;
    const char *type;
    model_field field; /* NULL: the failure family, one series per reason */
} model_families[] = {
    {"nv_inference_request_success",
     "Number of successful inference requests, all batch sizes", "counter",
     f_success},
    {"nv_inference_request_failure",
     "Number of failed inference requests, all batch sizes", "counter", NULL},
    {"nv_inference_count",
     "Number of inferences performed (does not include cached requests)",
     "counter", f_count},
    {"nv_inference_exec_count",
     "Number of model executions performed (does not include cached "
     "requests)",
     "counter", f_exec},
    {"nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes "
     "cached requests)",
     "counter", f_request_us},
    {"nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes "
     "cached requests)",
     "counter", f_queue_us},
    {"nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include "
     "cached requests)",
     "counter", f_input_us},
    {"nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not "
     "include cached requests)",
     "counter", f_infer_us},
    {"nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does "
     "not include cached requests)",
     "counter", f_output_us},
    {"nv_inference_pending_request_count",
     "Instantaneous number of pending requests awaiting execution "
     "per-model.",
     "gauge", f_pending},
};

static uint64_t f_cache_hits(const osp_model_stats *m) {
    return m->cache_hit.count;
}
static uint64_t f_cache_misses(const osp_model_stats *m) {
    return m->cache_miss.count;
}
static uint64_t f_cache_hit_us(const osp_model_stats *m) {
    return m->cache_hit.us;
}
static uint64_t f_cache_miss_us(const osp_model_stats *m) {
    return m->cache_miss.us;
}

/* Triton's per-model cache families (in its order), for the models the
 * response cache serves (none of them when no model uses it). */
static const struct model_family cache_families[] = {
    {"nv_cache_num_hits_per_model", "Number of cache hits per model", "counter",
     f_cache_hits},
    {"nv_cache_hit_duration_per_model",
     "Total cache hit duration per model, in microseconds", "counter",
     f_cache_hit_us},
    {"nv_cache_num_misses_per_model", "Number of cache misses per model",
     "counter", f_cache_misses},
    {"nv_cache_miss_duration_per_model",
     "Total cache miss (insert+lookup) duration per model, in microseconds",
     "counter", f_cache_miss_us},
};

/* Triton's label order of the failure reasons. */
static const osp_failure_reason failure_order[] = {
    OSP_FAILURE_REJECTED, OSP_FAILURE_CANCELED, OSP_FAILURE_BACKEND,
    OSP_FAILURE_OTHER};

static void render_models(bytebuf *b, const osp_model_stats *stats, size_t n) {
    size_t n_families = sizeof(model_families) / sizeof(model_families[0]);
    for (size_t f = 0; f < n_families; f++) {
        const struct model_family *fam = &model_families[f];
        family(b, fam->name, fam->help, fam->type);
        for (size_t i = 0; i < n; i++) {
            if (fam->field) {
                model_sample(b, fam->name, &stats[i], NULL);
                value_u64(b, fam->field(&stats[i]));
                continue;
            }
            for (size_t r = 0; r < 4; r++) {
                osp_failure_reason reason = failure_order[r];
                model_sample(b, fam->name, &stats[i],
                             osp_failure_reason_name(reason));
                value_u64(b, stats[i].failures[reason]);
            }
        }
    }
    bool any_cache = false;
    for (size_t i = 0; i < n; i++)
        any_cache |= stats[i].response_cache;
    for (size_t f = 0; any_cache && f < 4; f++) {
        const struct model_family *fam = &cache_families[f];
        family(b, fam->name, fam->help, fam->type);
        for (size_t i = 0; i < n; i++) {
            if (!stats[i].response_cache)
                continue;
            model_sample(b, fam->name, &stats[i], NULL);
            value_u64(b, fam->field(&stats[i]));
        }
    }
}

/* The pinned pool is one per process, kept by the first GPU. */
static void render_pinned(bytebuf *b) {
    osp_device_memory_stats mem;
    osp_device *gpu = NULL;
    if (osp_device_cuda_count() > 0 && !osp_device_cuda_get(0, &gpu))
        osp_device_get_memory_stats(gpu, &mem);
    else
        osp_device_get_memory_stats(osp_device_cpu(), &mem);
    family(b, "nv_pinned_memory_pool_total_bytes",
           "Pinned memory pool total memory size, in bytes", "gauge");
    bytebuf_puts(b, "nv_pinned_memory_pool_total_bytes ");
    value_u64(b, mem.pinned_pool_total);
    family(b, "nv_pinned_memory_pool_used_bytes",
           "Pinned memory pool used memory size, in bytes", "gauge");
    bytebuf_puts(b, "nv_pinned_memory_pool_used_bytes ");
    value_u64(b, mem.pinned_pool_used);
    family(b, "osprey_pinned_memory_pageable_fallbacks",
           "Host buffers for device transfers that were allocated as "
           "pageable memory because the pinned pool was full (or could not "
           "be pinned at start)",
           "counter");
    bytebuf_puts(b, "osprey_pinned_memory_pageable_fallbacks ");
    value_u64(b, mem.pageable_fallbacks);
}

static void gpu_sample(bytebuf *b, const char *name, const char *uuid) {
    bytebuf_printf(b, "%s{gpu_uuid=", name);
    label_value(b, uuid);
    bytebuf_puts(b, "} ");
}

/* Call with ms->lock held. */
static void render_gpus(metrics_exporter *ms, bytebuf *b) {
    nvml_api *api = &ms->nvml;
    if (!api->lib)
        return;
    static const struct {
        const char *name, *help;
    } gauges[] = {
        {"nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)"},
        {"nv_gpu_memory_total_bytes", "GPU total memory, in bytes"},
        {"nv_gpu_memory_used_bytes", "GPU used memory, in bytes"},
        {"nv_gpu_power_usage", "GPU power usage in watts"},
        {"nv_gpu_power_limit", "GPU power management limit in watts"},
    };
    for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]); g++) {
        family(b, gauges[g].name, gauges[g].help, "gauge");
        for (unsigned i = 0; i < api->n; i++) {
            nvml_device h = api->devices[i].handle;
            nvml_utilization util = {0, 0};
            nvml_memory mem = {0, 0, 0};
            unsigned int mw = 0;
            double v = 0;
            bool ok = false;
            switch (g) {
            case 0:
                ok = api->utilization(h, &util) == 0;
                v = util.gpu / 100.0;
                break;
            case 1:
            case 2:
                ok = api->memory(h, &mem) == 0;
                v = (double)(g == 1 ? mem.total : mem.used);
                break;
            case 3:
                ok = api->power(h, &mw) == 0;
                v = mw / 1000.0;
                break;
            default:
                ok = api->power_limit(h, &mw) == 0;
                v = mw / 1000.0;
                break;
            }
            if (!ok)
                continue;
            gpu_sample(b, gauges[g].name, api->devices[i].uuid);
            value_double(b, v);
        }
    }
    family(b, "nv_energy_consumption",
           "GPU energy consumption in joules since the Triton Server started",
           "counter");
    for (unsigned i = 0; i < api->n; i++) {
        unsigned long long mj;
        if (!api->devices[i].has_energy ||
            api->energy(api->devices[i].handle, &mj) != 0)
            continue;
        gpu_sample(b, "nv_energy_consumption", api->devices[i].uuid);
        value_double(b,
                     (double)(mj - api->devices[i].energy_at_start) / 1000.0);
    }
}

/* Aggregate CPU time from /proc/stat (Triton's busy/idle split). */
static bool read_cpu_times(uint64_t *busy, uint64_t *total) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return false;
    unsigned long long v[8] = {0};
    int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                     &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (got < 4)
        return false;
    /* user nice system idle iowait irq softirq steal */
    uint64_t idle = v[3] + v[4];
    *busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    *total = *busy + idle;
    return true;
}

/* MemTotal and MemTotal - MemAvailable, in bytes. */
static bool read_memory(uint64_t *total, uint64_t *used) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return false;
    char line[256];
    unsigned long long kb, mem_total = 0, mem_available = 0;
    bool have_total = false, have_available = false;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
            mem_total = kb;
            have_total = true;
        } else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            mem_available = kb;
            have_available = true;
        }
    }
    fclose(f);
    if (!have_total || !have_available)
        return false;
    if (mem_available > mem_total)
        mem_available = mem_total;
    *total = (uint64_t)mem_total * 1024;
    *used = (uint64_t)(mem_total - mem_available) * 1024;
    return true;
}

/* Call with ms->lock held. Utilisation is over the time since the previous
 * scrape (since boot on the first). */
static void render_cpu(metrics_exporter *ms, bytebuf *b) {
    uint64_t busy, total, mem_total, mem_used;
    if (read_cpu_times(&busy, &total)) {
        double util = 0;
        if (total > ms->cpu_total && busy >= ms->cpu_busy)
            util =
                (double)(busy - ms->cpu_busy) / (double)(total - ms->cpu_total);
        ms->cpu_busy = busy;
        ms->cpu_total = total;
        family(b, "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]",
               "gauge");
        bytebuf_puts(b, "nv_cpu_utilization ");
        value_double(b, util > 1.0 ? 1.0 : util);
    }
    if (read_memory(&mem_total, &mem_used)) {
        family(b, "nv_cpu_memory_total_bytes",
               "CPU total memory (RAM), in bytes", "gauge");
        bytebuf_puts(b, "nv_cpu_memory_total_bytes ");
        value_u64(b, mem_total);
        family(b, "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes",
               "gauge");
        bytebuf_puts(b, "nv_cpu_memory_used_bytes ");
        value_u64(b, mem_used);
    }
}

/* ---- the queue service ------------------------------------------------------
 */

/* Every queue's counters, read once per scrape. */
typedef struct queue_sample {
    char *name;
    osp_queue_stats stats;
} queue_sample;

typedef struct queue_samples {
    queue_sample *items;
    size_t n, cap;
    bool oom;
} queue_samples;

static void collect_queue(void *ctx, osp_queue *queue) {
    queue_samples *qs = ctx;
    if (!array_grow((void **)&qs->items, &qs->cap, qs->n + 1,
                    sizeof *qs->items)) {
        qs->oom = true;
        return;
    }
    queue_sample *s = &qs->items[qs->n];
    if (!(s->name = strdup(osp_queue_name(queue)))) {
        qs->oom = true;
        return;
    }
    osp_queue_get_stats(queue, &s->stats);
    qs->n++;
}

static void queue_label(bytebuf *b, const char *family, const char *label,
                        const char *name) {
    bytebuf_printf(b, "%s{%s=", family, label);
    label_value(b, name);
    bytebuf_puts(b, "} ");
}

static uint64_t q_length(const osp_queue_stats *s) {
    return s->length;
}
static uint64_t q_puts(const osp_queue_stats *s) {
    return s->puts;
}
static uint64_t q_gets(const osp_queue_stats *s) {
    return s->gets;
}
static uint64_t q_commits(const osp_queue_stats *s) {
    return s->commits;
}
static uint64_t q_redeliveries(const osp_queue_stats *s) {
    return s->redeliveries;
}
static uint64_t q_consumers(const osp_queue_stats *s) {
    return s->consumers;
}

typedef struct worker_samples {
    bytebuf *b;
    int field; /* 0 processed, 1 failed, 2 wait_us, 3 wait_count */
} worker_samples;

static void render_worker(void *ctx, const queue_service_stats *s) {
    worker_samples *w = ctx;
    static const char *const names[] = {
        "osprey_queue_worker_items", "osprey_queue_worker_failures",
        "osprey_queue_wait_duration_us", "osprey_queue_wait_count"};
    const uint64_t values[] = {s->processed, s->failed, s->wait_us,
                               s->wait_count};
    queue_label(w->b, names[w->field], "service", s->name);
    value_u64(w->b, values[w->field]);
}

static void render_queues(metrics_exporter *ms, bytebuf *b) {
    static const struct {
        const char *name, *help, *type;
        uint64_t (*field)(const osp_queue_stats *);
    } families[] = {
        {"osprey_queue_length", "Items stored in the queue", "gauge", q_length},
        {"osprey_queue_puts", "Items put into the queue", "counter", q_puts},
        {"osprey_queue_gets", "Items returned by gets from the queue",
         "counter", q_gets},
        {"osprey_queue_commits", "Items committed by consumers", "counter",
         q_commits},
        {"osprey_queue_redeliveries",
         "Items delivered again after their consumer left", "counter",
         q_redeliveries},
        {"osprey_queue_consumers", "Consumers of the queue now", "gauge",
         q_consumers},
    };
    osp_queue_store *store = queue_services_store(ms->queues);
    family(b, "osprey_queue_store_lost_records",
           "Damaged records the embedded queue store skipped when it opened "
           "(the intact records after them kept; the bytes moved to "
           "queue.log.damaged)",
           "counter");
    bytebuf_printf(b, "osprey_queue_store_lost_records %llu\n",
                   (unsigned long long)osp_queue_store_lost_records(store));
    queue_samples qs = {0};
    osp_queue_store_foreach(store, collect_queue, &qs);
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        family(b, families[f].name, families[f].help, families[f].type);
        for (size_t i = 0; i < qs.n; i++) {
            queue_label(b, families[f].name, "queue", qs.items[i].name);
            value_u64(b, families[f].field(&qs.items[i].stats));
        }
    }
    for (size_t i = 0; i < qs.n; i++)
        free(qs.items[i].name);
    free(qs.items);
    static const struct {
        const char *name, *help, *type;
    } worker_families[] = {
        {"osprey_queue_worker_items",
         "Items a model service's built-in worker ran (a result or an error "
         "in the sink)",
         "counter"},
        {"osprey_queue_worker_failures",
         "Items whose inference failed (an error item in the sink)", "counter"},
        {"osprey_queue_wait_duration_us",
         "Cumulative time items waited in a model service's input queue, "
         "from put to taken by its worker, in microseconds",
         "counter"},
        {"osprey_queue_wait_count",
         "Items taken by a model service's worker (the count of "
         "osprey_queue_wait_duration_us)",
         "counter"},
    };
    for (int f = 0; f < 4; f++) {
        family(b, worker_families[f].name, worker_families[f].help,
               worker_families[f].type);
        worker_samples w = {b, f};
        queue_services_foreach_worker(ms->queues, render_worker, &w);
    }
}

/* Triton's gauges of the response cache as a whole, when there is one.
 * (Triton 2.51 shows 0 for all but nv_cache_util; these are the real
 * values.) */
static void render_cache(metrics_exporter *ms, bytebuf *b) {
    osp_cache_stats c;
    if (!osp_server_cache_statistics(ms->core, &c))
        return;
    family(b, "nv_cache_util", "Cache utilization [0.0 - 1.0]", "gauge");
    bytebuf_puts(b, "nv_cache_util ");
    value_double(b, c.util);
    static const struct {
        const char *name, *help;
        size_t offset;
    } gauges[] = {
        {"nv_cache_num_entries", "Number of responses stored in response cache",
         offsetof(osp_cache_stats, entries)},
        {"nv_cache_num_hits", "Number of cache hits in response cache",
         offsetof(osp_cache_stats, hits)},
        {"nv_cache_num_misses", "Number of cache misses in response cache",
         offsetof(osp_cache_stats, misses)},
        {"nv_cache_num_lookups", "Number of cache lookups in response cache",
         offsetof(osp_cache_stats, lookups)},
        {"nv_cache_num_evictions",
         "Number of cache evictions in response cache",
         offsetof(osp_cache_stats, evictions)},
        {"nv_cache_lookup_duration",
         "Total cache lookup duration (hit and miss), in microseconds",
         offsetof(osp_cache_stats, lookup_us)},
        {"nv_cache_insertion_duration",
         "Total cache insertion duration, in microseconds",
         offsetof(osp_cache_stats, insertion_us)},
    };
    for (size_t g = 0; g < sizeof gauges / sizeof gauges[0]; g++) {
        uint64_t v;
        memcpy(&v, (const char *)&c + gauges[g].offset, sizeof v);
        family(b, gauges[g].name, gauges[g].help, "gauge");
        bytebuf_printf(b, "%s ", gauges[g].name);
        value_u64(b, v);
    }
}

osp_error *metrics_render(metrics_exporter *ms, char **text, size_t *len) {
    osp_model_stats *stats = NULL;
    size_t n = 0;
    osp_error *err =
        osp_server_model_statistics(ms->core, NULL, -1, &stats, &n);
    if (err)
        return err;
    bytebuf b;
    bytebuf_init(&b);
    render_models(&b, stats, n);
    osp_model_stats_free(stats, n);
    render_cache(ms, &b);
    render_pinned(&b);
    if (ms->queues)
        render_queues(ms, &b);
    pthread_mutex_lock(&ms->lock);
    if (ms->gpu)
        render_gpus(ms, &b);
    if (ms->cpu)
        render_cpu(ms, &b);
    pthread_mutex_unlock(&ms->lock);
    /* the families models define (pb_utils.MetricFamily), after Triton's */
    char *custom = osp_custom_metrics_text();
    if (!custom) {
        bytebuf_free(&b);
        return osp_error_out_of_memory();
    }
    bytebuf_puts(&b, custom);
    free(custom);
    *text = bytebuf_take(&b, len);
    if (!*text)
        return osp_error_out_of_memory();
    return NULL;
}

/* ---- HTTP -------------------------------------------------------------------
 */

static bool is_metrics_path(const char *path) {
    return strcmp(path, "/metrics") == 0 || strcmp(path, "/metrics/") == 0;
}

/* A body is read and ignored. */
static osp_error *metrics_on_body(http_request *req, const char *data,
                                  size_t len) {
    (void)req;
    (void)data;
    (void)len;
    return NULL;
}

static osp_error *metrics_on_complete(http_request *req) {
    metrics_exporter *ms = http_request_surface_ctx(req);
    if (strcmp(http_request_method_name(req), "GET") != 0) {
        http_reply_error_status(req, 405, "Method Not Allowed");
        return NULL;
    }
    /* This service always decoded %XX in paths (the KServe one does not). */
    const char *raw = http_request_path(req);
    char path[16];
    size_t n = strlen(raw);
    bool metrics = false;
    if (n < sizeof path) {
        memcpy(path, raw, n + 1);
        http_percent_decode(path, n, false);
        metrics = is_metrics_path(path);
    }
    if (!metrics) {
        http_reply(req, 200, "text/plain; charset=utf-8", NULL, 0);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0;
    osp_error *err = metrics_render(ms, &text, &len);
    if (err) {
        OSP_LOG_ERROR("metrics: %s", osp_error_message(err));
        osp_error_free(err);
        http_reply(req, 500, "text/plain; charset=utf-8", NULL, 0);
        return NULL;
    }
    http_reply(req, 200, "text/plain; charset=utf-8", text, len);
    return NULL;
}

static const http_handler metrics_handler = {
    .on_body = metrics_on_body,
    .on_complete = metrics_on_complete,
};

bool metrics_route(http_request *req, void *surface_ctx) {
    (void)surface_ctx;
    http_request_set_handler(req, &metrics_handler, NULL);
    return true;
}

osp_error *metrics_new(const metrics_options *opts, osp_server *core,
                       metrics_exporter **out) {
    metrics_exporter *ms = calloc(1, sizeof(*ms));
    if (!ms)
        return osp_error_out_of_memory();
    ms->core = core;
    ms->queues = opts->queues;
    ms->cpu = opts->cpu;
    ms->gpu = opts->gpu && nvml_open(&ms->nvml);
    pthread_mutex_init(&ms->lock, NULL);
    if (opts->cpu) { /* the first scrape's utilisation starts from here */
        uint64_t busy, total;
        if (read_cpu_times(&busy, &total)) {
            ms->cpu_busy = busy;
            ms->cpu_total = total;
        }
    }
    *out = ms;
    return NULL;
}

void metrics_free(metrics_exporter *ms) {
    if (!ms)
        return;
    nvml_close(&ms->nvml);
    pthread_mutex_destroy(&ms->lock);
    free(ms);
}
