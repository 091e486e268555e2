/*
 * osprey: flags (flags.c), the services in start order, and an orderly
 * shutdown on SIGTERM/SIGINT. Signals are taken synchronously with sigwait
 * in the main thread (they are blocked in every other thread), so nothing
 * runs inside a signal handler.
 *
 * The services form one table: they start in order and stop in reverse,
 * by one path for a failed start and for a signal. Stopping has two
 * passes: every service first stops taking new work (the HTTP and gRPC
 * ports close before the core refuses requests, so no accepted connection
 * or call sees a half-stopped server; gRPC streams end once their requests
 * are answered), then each finishes and frees, last started first.
 * A service that cannot finish in time (requests still in flight) makes
 * the ones below it abandon rather than free what may still be in use.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "backends.h"
#include "flags.h"
#include "grpc_server.h"
#include "http_server.h"
#include "kserve.h"
#include "metrics.h"
#include "osprey/log.h"
#include "osprey/server.h"
#include "osprey/trace.h"
#include "queue_api.h"
#include "queue_services.h"
#include "s3_repository.h"
#include "s3_url.h"
#include "tfserving.h"
#if defined(OSPREY_CUDA_LINKED)
#include "cuda_provider.h" /* osprey_fakegpu: the device is linked in */
#elif defined(OSPREY_CUDA_MODULE)
#include "cuda_module.h" /* loaded at run time, only where a GPU is */
#endif

/* Everything the services share; each owns its own fields. */
typedef struct app {
    osprey_flags flags;
    osp_tracer *tracer;
    osp_server *core;
    /* The repositories' sources: an s3:// --model-repository's, NULL for
     * a folder (one per --model-repository). */
    s3_repository **s3_repos;
    const osp_repository_source **sources;
    kserve_context kserve;
    /* --http- and --grpc-header-forward-pattern, compiled (NULL: none);
     * started and stopped with kserve. */
    kserve_header_forward *http_forward_headers;
    kserve_header_forward *grpc_forward_headers;
    tfserving_context tfserving;
    queue_services *queues;
    bool queues_idle; /* the workers finished at quiesce */
    queue_api *queue_api;
    http_surface http_surfaces[3];
    http_server *http;
    metrics_exporter *metrics;
    http_surface metrics_surfaces[1];
    http_server *metrics_http;
    kgrpc_server *grpc;
} app;

typedef struct service {
    const char *name;
    /* Starts the service; an error stops the ones already started. */
    osp_error *(*start)(app *a);
    /* (optional) Stops taking new work. */
    void (*quiesce)(app *a);
    /* Finishes and frees. `abandoned`: a service started after this one
     * could not finish, so nothing it may still use can be freed. Returns
     * false when this one could not finish either. */
    bool (*stop)(app *a, bool abandoned);
} service;

/* ---- trace: first up, last down, so every trace is written ---- */

static osp_error *tracer_start(app *a) {
    return osp_tracer_new(&a->flags.trace, &a->tracer);
}

static bool tracer_stop(app *a, bool abandoned) {
    if (abandoned)
        osp_tracer_shutdown(a->tracer); /* trace files still get their "]" */
    else
        osp_tracer_free(a->tracer);
    return true;
}

/* ---- the core: models, scheduling, backends and devices ---- */

static void s3_repositories_close(app *a) {
    for (size_t i = 0; a->s3_repos && i < a->flags.n_model_repositories; i++)
        s3_repository_close(a->s3_repos[i]);
    free(a->s3_repos);
    free(a->sources);
    a->s3_repos = NULL;
    a->sources = NULL;
}

/* Opens every s3:// --model-repository (listing it once, so that a wrong
 * location or credentials stop the start) and fills a->sources. */
static osp_error *s3_repositories_open(app *a) {
    const osprey_flags *f = &a->flags;
    size_t n = f->n_model_repositories;
    a->s3_repos = calloc(n, sizeof *a->s3_repos);
    a->sources = calloc(n, sizeof *a->sources);
    if (!a->s3_repos || !a->sources) {
        s3_repositories_close(a);
        return osp_error_out_of_memory();
    }
    for (size_t i = 0; i < n; i++) {
        if (!s3_url_is_s3(f->model_repositories[i]))
            continue;
        osp_error *err = s3_repository_open(
            f->model_repositories[i], f->repository_cache_dir,
            f->repository_ca_file, &a->s3_repos[i]);
        if (err) {
            s3_repositories_close(a);
            return osp_error_wrap(err, "failed to open model repository");
        }
        a->sources[i] = s3_repository_source(a->s3_repos[i]);
    }
    return NULL;
}

static osp_error *core_start(app *a) {
    const osprey_flags *f = &a->flags;
    osp_server_options opts;
    osp_server_options_init(&opts);
    opts.control_mode = f->control_mode;
    opts.repository_poll_secs = (int)f->repository_poll_secs;
    opts.load_models = f->load_models;
    opts.n_load_models = f->n_load_models;
    opts.strict_gpu = f->strict_gpu;
    opts.max_sequences = (size_t)f->max_sequences;
    opts.model_load_threads = (int)f->model_load_thread_count;
    opts.auto_complete_config =
        !f->disable_auto_complete_config && !f->strict_model_config;
    opts.load_override_dir = f->repository_cache_dir;
    opts.backend_settings = f->backend_settings;
    opts.n_backend_settings = f->n_backend_settings;
    opts.devices = f->devices;
    opts.response_cache_bytes = f->response_cache_bytes;
    if (f->cache_config_given && strcmp(f->cache_config_type, "redis") == 0)
        opts.redis_cache = &f->redis_cache.opts;
    opts.backends = backends_builtin;
    opts.n_backends = backends_builtin_count;
    static const osp_device_provider *providers[1];
    const osp_device_provider *cuda = NULL;
#if defined(OSPREY_CUDA_LINKED)
    cuda = &osp_cuda_device_provider;
#elif defined(OSPREY_CUDA_MODULE)
    cuda = cuda_module_load();
#endif
    if (cuda) {
        providers[0] = cuda;
        opts.devices.providers = providers;
        opts.devices.n_providers = 1;
    }
    osp_error *err = s3_repositories_open(a);
    if (err)
        return err;
    opts.model_repositories = f->model_repositories;
    opts.repository_sources = a->sources;
    opts.n_model_repositories = f->n_model_repositories;
    if ((err = osp_server_new(&opts, &a->core)))
        err = osp_error_wrap(err, "failed to start the server");
    /* Start-up loads are done: not ready now means a model failed. */
    else if (f->exit_on_error && !osp_server_is_ready(a->core))
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "failed to load all models (--exit-on-error)");
    if (err) {
        /* No service uses the core yet: free it, so that the S3 cache
         * folders can go. */
        osp_server_free(a->core);
        a->core = NULL;
        s3_repositories_close(a);
    }
    return err;
}

static void core_quiesce(app *a) {
    osp_server_begin_shutdown(a->core);
}

static bool core_stop(app *a, bool abandoned) {
    if (!abandoned) {
        OSP_LOG_INFO("All models are stopped, unloading models");
        osp_server_free(a->core);
        s3_repositories_close(a); /* after the models are gone */
    }
    return true;
}

/* ---- the queue service: the store, the services and their workers ---- */

/* Whether clients outside this machine can reach `address`. */
static bool address_is_loopback(const char *address) {
    return strncmp(address, "127.", 4) == 0 || strcmp(address, "::1") == 0 ||
           strcmp(address, "localhost") == 0;
}

/* The embedded store's directory when --queue-dir is not given: keyed by
 * the HTTP port, so that servers on other ports started from one working
 * directory do not contend for one store's lock, and a restart on the same
 * port finds its queues again. With --http-port=0 (any free port) there is
 * no port to key by yet: the process id keys it. */
static const char *default_queue_dir(const osprey_flags *f) {
    static char dir[64];
    if (f->http_port > 0)
        snprintf(dir, sizeof dir, "osprey-queue-%lld", f->http_port);
    else
        snprintf(dir, sizeof dir, "osprey-queue-0-%ld", (long)getpid());
    return dir;
}

static osp_error *queue_start(app *a) {
    const osprey_flags *f = &a->flags;
    const char *queue_dir = f->queue_dir ? f->queue_dir : default_queue_dir(f);
    const char *password = f->queue_store_password
                               ? f->queue_store_password
                               : getenv("OSPREY_QUEUE_STORE_PASSWORD");
    /* The store's URL as logged: from the host on (no USER:PASSWORD@) */
    const char *shown = f->queue_store ? strchr(f->queue_store, '@') : NULL;
    shown = shown ? shown + 1 : f->queue_store;
    queue_services_options opts = {
        .core = a->core,
        .tracer = a->tracer,
        .store = {.url = f->queue_store,
                  .dir = queue_dir,
                  .fsync = f->queue_fsync,
                  .max_payload_bytes = (uint64_t)f->queue_max_payload_bytes,
                  .max_length = (uint64_t)f->queue_max_length,
                  .consumer_grace_ns =
                      (uint64_t)f->queue_consumer_grace_ms * 1000000,
                  .password = password},
        .queue_only = f->queue_services,
        .n_queue_only = f->n_queue_services,
        .worker_window = (unsigned)f->queue_worker_window,
        .max_input = (size_t)f->http_max_input_size,
    };
    osp_error *err = queue_services_new(&opts, &a->queues);
    if (err)
        return osp_error_wrap(err, "failed to start the queue service");
    if ((!f->queue_token || !f->queue_token[0]) &&
        !address_is_loopback(f->http_address))
        OSP_LOG_WARN("*** the queue API (/api/predict/...) on %s is open to "
                     "anyone who can reach it: set --queue-token ***",
                     f->http_address);
    OSP_LOG_INFO("Started queue service (%s store%s%s)",
                 f->queue_store ? "Redis" : "embedded",
                 f->queue_store ? " at " : " in ",
                 f->queue_store ? shown : queue_dir);
    return NULL;
}

/* Workers stop taking items and finish the ones in flight while the core
 * still runs them. */
static void queue_quiesce(app *a) {
    long long secs = a->flags.exit_timeout_secs;
    a->queues_idle =
        queue_services_quiesce(a->queues, secs > 0 ? (int)(secs * 1000) : 0);
    if (!a->queues_idle)
        OSP_LOG_WARN("queue workers still have items in flight; exiting");
}

static bool queue_stop(app *a, bool abandoned) {
    if (abandoned || !a->queues_idle)
        return false;
    queue_services_free(a->queues);
    return true;
}

/* ---- KServe state both ports share: the system shared memory regions,
 *      the header forwarding patterns ---- */

static void free_forward_headers(app *a) {
    kserve_header_forward_free(a->http_forward_headers);
    kserve_header_forward_free(a->grpc_forward_headers);
    a->http_forward_headers = a->grpc_forward_headers = NULL;
    a->kserve.forward_headers = NULL;
}

static osp_error *kserve_start(app *a) {
    const osprey_flags *f = &a->flags;
    a->kserve = (kserve_context){.server = a->core,
                                 .tracer = a->tracer,
                                 .restricted = f->restricted_apis,
                                 .server_id = f->server_id,
                                 .strict_readiness = f->strict_readiness};
    osp_error *err = kserve_header_forward_new("http-header-forward-pattern",
                                               f->http_header_forward_pattern,
                                               &a->http_forward_headers);
    if (!err)
        err = kserve_header_forward_new("grpc-header-forward-pattern",
                                        f->grpc_header_forward_pattern,
                                        &a->grpc_forward_headers);
    a->kserve.forward_headers = a->http_forward_headers;
    if (!err)
        err = kserve_context_init_shm(&a->kserve, f->allow_client_shm);
    if (err)
        free_forward_headers(a);
    return err;
}

static bool kserve_stop(app *a, bool abandoned) {
    if (abandoned)
        return true;
    kserve_context_destroy_shm(&a->kserve);
    free_forward_headers(a);
    return true;
}

/* ---- the gRPC port: KServe v2 (Triton logs it first, so does Osprey) ---- */

static osp_error *grpc_start(app *a) {
    const osprey_flags *f = &a->flags;
    if (!f->allow_grpc)
        return NULL;
    kgrpc_options opts = {
        .address = f->grpc_address,
        .port = (int)f->grpc_port,
        .reuse_port = f->reuse_grpc_port,
        .core = a->core,
        .tracer = a->tracer,
        .restricted = f->grpc_restricted,
        .server_id = f->server_id,
        .strict_readiness = f->strict_readiness,
        .shm = a->kserve.shm,
        .allow_client_shm = f->allow_client_shm,
        .use_ssl = f->grpc_use_ssl || f->grpc_use_ssl_mutual,
        .use_ssl_mutual = f->grpc_use_ssl_mutual,
        .server_cert = f->grpc_server_cert,
        .server_key = f->grpc_server_key,
        .root_cert = f->grpc_root_cert,
        .keepalive =
            {
                .time_ms = (int)f->grpc_keepalive_time_ms,
                .timeout_ms = (int)f->grpc_keepalive_timeout_ms,
                .permit_without_calls = f->grpc_keepalive_permit_without_calls,
                .http2_max_pings_without_data =
                    (int)f->grpc_http2_max_pings_without_data,
                .http2_min_recv_ping_interval_without_data_ms =
                    (int)f->grpc_http2_min_recv_ping_interval_ms,
                .http2_max_ping_strikes = (int)f->grpc_http2_max_ping_strikes,
                .max_connection_age_ms = (int)f->grpc_max_connection_age_ms,
                .max_connection_age_grace_ms =
                    (int)f->grpc_max_connection_age_grace_ms,
            },
        .infer_compression = (kgrpc_compression)f->grpc_infer_compression,
        .max_message_size = (int)f->grpc_max_message_size,
        .infer_thread_count = (int)f->grpc_infer_thread_count,
        .infer_allocation_pool_size = (int)f->grpc_infer_allocation_pool_size,
        .forward_headers = a->grpc_forward_headers,
    };
    osp_error *err = kgrpc_server_start(&opts, &a->grpc);
    if (err)
        return err;
    OSP_LOG_INFO("Started GRPCInferenceService at %s:%d", f->grpc_address,
                 kgrpc_server_port(a->grpc));
    return NULL;
}

static void grpc_quiesce(app *a) {
    if (a->grpc)
        kgrpc_server_stop_accepting(a->grpc);
}

static bool grpc_stop(app *a, bool abandoned) {
    if (!a->grpc)
        return true;
    if (abandoned)
        return false;
    long long secs = a->flags.exit_timeout_secs;
    int timeout_ms = secs > 0 ? (int)(secs * 1000) : 0;
    if (!kgrpc_server_drain(a->grpc, timeout_ms)) {
        /* Calls still wait for the core; the process exit ends them. */
        OSP_LOG_WARN("gRPC calls still in progress after %d ms; exiting",
                     timeout_ms);
        return false;
    }
    kgrpc_server_free(a->grpc);
    a->grpc = NULL;
    return true;
}

/* ---- the HTTP port: KServe v2, TF Serving, the queue API ---- */

static osp_error *http_start(app *a) {
    const osprey_flags *f = &a->flags;
    osp_error *err;
    a->tfserving = (tfserving_context){.server = a->core,
                                       .tracer = a->tracer,
                                       .cors = f->rest_api_enable_cors_support};
    a->http_surfaces[0] = (http_surface){.name = "kserve",
                                         .route = kserve_route,
                                         .surface_ctx = &a->kserve,
                                         .reply_error = kserve_reply_error};
    a->http_surfaces[1] = (http_surface){.name = "tfserving",
                                         .route = tfserving_route,
                                         .surface_ctx = &a->tfserving,
                                         .reply_error = tfserving_reply_error};
    queue_api_options qopts = {.services = a->queues,
                               .token = f->queue_token,
                               .max_payload_bytes =
                                   (uint64_t)f->queue_max_payload_bytes};
    if ((err = queue_api_new(&qopts, &a->queue_api)))
        return err;
    a->http_surfaces[2] = (http_surface){.name = "queue",
                                         .route = queue_api_route,
                                         .surface_ctx = a->queue_api,
                                         .reply_error = queue_api_reply_error};
    http_server_options opts = {
        .address = f->http_address,
        .port = (int)f->http_port,
        .thread_count = (int)f->http_thread_count,
        .max_input_size = (size_t)f->http_max_input_size,
        .connection_limit = (unsigned)f->http_max_connections,
        .connection_timeout_s = (unsigned)f->http_connection_timeout,
        .surfaces = a->http_surfaces,
        .n_surfaces = 3,
    };
    err = http_server_start(&opts, &a->http);
    if (err) {
        queue_api_free(a->queue_api);
        return err;
    }
    OSP_LOG_INFO("Started HTTPService at %s:%d", f->http_address,
                 http_server_port(a->http));
    return NULL;
}

/* Long polls are answered and watches closed now, so the drain below
 * does not wait for them. */
static void http_quiesce(app *a) {
    http_server_stop_accepting(a->http);
    queue_api_quiesce(a->queue_api);
}

static bool http_stop(app *a, bool abandoned) {
    if (abandoned)
        return false;
    /* --exit-timeout-secs; Triton treats a negative value as 0. */
    long long secs = a->flags.exit_timeout_secs;
    int timeout_ms = secs > 0 ? (int)(secs * 1000) : 0;
    if (!http_server_drain(a->http, timeout_ms)) {
        /* Connections may still be suspended inside libmicrohttpd, which
         * must not be stopped then; the process exit releases them. */
        OSP_LOG_WARN("requests still in progress after %d ms; exiting",
                     timeout_ms);
        return false;
    }
    http_server_free(a->http);
    queue_api_free(a->queue_api);
    return true;
}

/* ---- the metrics port (reads the core's statistics) ---- */

static const char *metrics_address(const osprey_flags *f) {
    return f->metrics_address ? f->metrics_address : f->http_address;
}

static osp_error *metrics_start(app *a) {
    const osprey_flags *f = &a->flags;
    if (!f->allow_metrics)
        return NULL;
    metrics_options mopts = {.gpu = f->allow_gpu_metrics,
                             .cpu = f->allow_cpu_metrics,
                             .queues = a->queues};
    osp_error *err = metrics_new(&mopts, a->core, &a->metrics);
    if (err)
        return err;
    a->metrics_surfaces[0] = (http_surface){
        .name = "metrics", .route = metrics_route, .surface_ctx = a->metrics};
    http_server_options opts = {
        .name = "metrics",
        .address = metrics_address(f),
        .port = (int)f->metrics_port,
        .thread_count = 2,
        .max_input_size = (size_t)f->http_max_input_size,
        .connection_limit = 64,
        .connection_timeout_s = 60,
        .surfaces = a->metrics_surfaces,
        .n_surfaces = 1,
    };
    err = http_server_start(&opts, &a->metrics_http);
    if (err) {
        metrics_free(a->metrics);
        a->metrics = NULL;
        return err;
    }
    OSP_LOG_INFO("Started Metrics Service at %s:%d", metrics_address(f),
                 http_server_port(a->metrics_http));
    return NULL;
}

static bool metrics_stop(app *a, bool abandoned) {
    if (!a->metrics_http || abandoned)
        return true;
    http_server_free(a->metrics_http);
    metrics_free(a->metrics);
    return true;
}

/* In start order. */
static const service services[] = {
    {"trace", tracer_start, NULL, tracer_stop},
    {"core", core_start, core_quiesce, core_stop},
    {"queue", queue_start, queue_quiesce, queue_stop},
    {"kserve", kserve_start, NULL, kserve_stop},
    {"grpc", grpc_start, grpc_quiesce, grpc_stop},
    {"http", http_start, http_quiesce, http_stop},
    {"metrics", metrics_start, NULL, metrics_stop},
};

#define N_SERVICES (sizeof services / sizeof services[0])

/* Stops services[0 .. n) in reverse, in the two passes described above. */
static void stop_services(app *a, size_t n) {
    for (size_t i = n; i-- > 0;)
        if (services[i].quiesce)
            services[i].quiesce(a);
    bool abandoned = false;
    for (size_t i = n; i-- > 0;)
        if (!services[i].stop(a, abandoned))
            abandoned = true;
}

/* The main thread's kernel id, for forward_stop_signal. */
static pid_t main_tid;

/* Threads that a library starts before main() (OpenBLAS's pool, from its
 * constructor) do not block SIGTERM and SIGINT, so the kernel may hand a
 * stop signal to one of them, and without a handler that ends the process
 * at once: "killed by signal 15" instead of an orderly stop, whenever the
 * signal came while the main thread was still starting services and not
 * yet in sigwait (a test that stopped a server right after it was ready
 * saw it). This handler, which only such threads can run (every other
 * thread blocks the signals), passes the signal on to the main thread,
 * where it stays pending until sigwait takes it. tgkill is a plain system
 * call, safe in a handler. */
static void forward_stop_signal(int sig) {
    int saved = errno;
    syscall(SYS_tgkill, getpid(), main_tid, sig);
    errno = saved;
}

/* Caps glibc's malloc arenas before any thread exists, unless the operator
 * chose with MALLOC_ARENA_MAX. By default glibc gives each new thread its
 * own arena (up to 8 per core), and an arena keeps its first pages and up
 * to M_TRIM_THRESHOLD of freed memory for good: every HTTP thread that
 * serves its first request grew the process by ~165 KiB that never came
 * back, and every arena cached what its largest request left behind. With
 * two arenas shared by all threads (tcache keeps small allocations
 * lock-free per thread) a thread's first request costs only its stack
 * pages, and the memory one request frees is reused by the next on any
 * thread. Measured with Triton's http_request_many_chunks.py logic
 * (test_kserve_http_memory.py): 1.3 MiB of growth with 8 HTTP threads
 * before, under 0.4 MiB after. */
static void malloc_limit_arenas(void) {
#ifdef __GLIBC__
    if (!getenv("MALLOC_ARENA_MAX"))
        mallopt(M_ARENA_MAX, 2);
#endif
}

/* gRPC core reads a message into slices it mallocs as the bytes arrive and
 * frees once the handler has copied them out. With glibc's default policy
 * a large message's freed slices go back to the kernel (heap trim above
 * 128 KiB, or munmap of chunks over the adaptive mmap threshold), so the
 * next message faults every page in again while recvmsg copies into it:
 * about 500 page faults per 16 MiB request, against 2 on the HTTP port,
 * whose input buffers come from the core's pool. Keeping up to 64 MiB of
 * freed memory per arena (two arenas: above), and serving chunks up to
 * 32 MiB from the heap, stops that; larger tensors still get their own
 * mappings. A no-op under the sanitizers' allocator. */
static void malloc_keep_freed_message_memory(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

int main(int argc, char **argv) {
    static app a;
    malloc_limit_arenas();
    malloc_keep_freed_message_memory();
    int status = flags_parse(argc, argv, &a.flags);
    if (status >= 0)
        goto out;
    status = 1;
    if (a.flags.http_max_input_size <= 0) {
        fprintf(stderr,
                "Error: --http-max-input-size must be greater than 0.\n");
        goto out;
    }
    if (!a.flags.model_repository) {
        fprintf(stderr, "Error: --model-repository is required\n");
        flags_usage(stderr);
        status = 2;
        goto out;
    }
    osp_log_set_verbose((int)a.flags.log_verbose);

    /* Block the shutdown signals before any thread of ours exists, so that
     * only sigwait below receives them; a thread that existed before main()
     * forwards them here (forward_stop_signal). */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction forward = {.sa_handler = forward_stop_signal};
    sigemptyset(&forward.sa_mask);
    sigaction(SIGINT, &forward, NULL);
    sigaction(SIGTERM, &forward, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* A file size limit (ulimit -f) then fails the write with EFBIG, which
     * the queue store answers like a full disk, instead of killing us. */
    signal(SIGXFSZ, SIG_IGN);

    size_t started = 0;
    for (; started < N_SERVICES; started++) {
        osp_error *err = services[started].start(&a);
        if (err) {
            OSP_LOG_ERROR("%s", osp_error_message(err));
            osp_error_free(err);
            break;
        }
    }
    if (started == N_SERVICES) {
        int sig = 0;
        while (sigwait(&stop_signals, &sig) != 0)
            ;
        /* Triton's words: the first on stdout, the rest as log records */
        printf("Signal (%d) received.\n", sig);
        fflush(stdout);
        OSP_LOG_INFO("Waiting for in-flight requests to complete.");
        status = 0;
    }
    stop_services(&a, started);
out:
    flags_free(&a.flags);
    return status;
}
