/*
 * osprey: command-line flags (Triton's names), server start, and an orderly
 * shutdown on SIGTERM/SIGINT. Signals are taken synchronously with sigwait
 * in the main thread (they are blocked in every other thread), so nothing
 * runs inside a signal handler.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends.h"
#include "http_server.h"
#include "kserve.h"
#include "metrics.h"
#include "osprey/log.h"
#include "osprey/server.h"
#include "osprey/trace.h"
#ifdef OSPREY_HAVE_CUDA
#include "cuda_provider.h"
#endif

#define DRAIN_TIMEOUT_MS 30000

typedef struct flags {
    const char *model_repository;
    long long http_port;
    const char *http_address;
    long long http_thread_count;
    long long http_max_input_size;
    osp_model_control_mode control_mode;
    const char **load_models;
    size_t n_load_models;
    long long log_verbose;
    bool strict_gpu;
    osp_device_options devices;
    osp_tracer_options trace;
    bool allow_metrics;
    bool allow_gpu_metrics;
    bool allow_cpu_metrics;
    long long metrics_port;
    const char *metrics_address; /* NULL = the HTTP address */
} flags;

static void usage(FILE *f) {
    fprintf(
        f, "Usage: osprey --model-repository=DIR [options]\n"
           "\n"
           "Options (--flag=value or --flag value):\n"
           "  --model-repository=DIR            model repository (required)\n"
           "  --http-port=PORT                  HTTP port, 0 = any free port "
           "(default 8000)\n"
           "  --http-address=ADDR               HTTP bind address (default "
           "0.0.0.0)\n"
           "  --http-thread-count=N             HTTP worker threads (default "
           "8)\n"
           "  --http-max-input-size=BYTES       largest JSON body, raw body, "
           "decompressed body\n"
           "                                    or JSON input (default "
           "67108864)\n"
           "  --model-control-mode=MODE         none (load all) or explicit "
           "(default none)\n"
           "  --load-model=NAME                 explicit mode: load NAME at "
           "start; '*' = all;\n"
           "                                    repeatable\n"
           "  --log-verbose=N                   verbose logging level "
           "(default 0)\n"
           "  --log-info, --log-warning, --log-error=BOOL\n"
           "                                    print records of that level "
           "(default true)\n"
           "  --log-format=default|ISO8601      record prefix (default "
           "default)\n"
           "  --strict-gpu[=true|false]         fail models that ask for a "
           "GPU when none is present\n"
           "  --pinned-memory-pool-byte-size=N  pinned host memory pool "
           "(default 268435456)\n"
           "  --cuda-memory-pool-byte-size=GPU:BYTES\n"
           "                                    device memory pool of one GPU "
           "(default 67108864);\n"
           "                                    repeatable\n"
           "  --trace-config=[MODE,]KEY=VALUE   trace settings (Triton's): "
           "rate=N, level=OFF|\n"
           "                                    TIMESTAMPS|TENSORS, count=N, "
           "mode=triton,\n"
           "                                    triton,file=PATH, "
           "triton,log-frequency=N;\n"
           "                                    repeatable\n"
           "  --trace-file-directory=DIR        let the trace settings API set "
           "trace_file to a\n"
           "                                    file name inside DIR "
           "(default: refused)\n"
           "  --allow-metrics=BOOL              Prometheus metrics service "
           "(default true)\n"
           "  --allow-gpu-metrics=BOOL          GPU metrics through NVML when "
           "present (default true)\n"
           "  --allow-cpu-metrics=BOOL          CPU metrics from /proc "
           "(default true)\n"
           "  --metrics-port=PORT               metrics port, 0 = any free "
           "port (default 8002)\n"
           "  --metrics-address=ADDR            metrics bind address "
           "(default: --http-address)\n"
           "  --help                            this text\n");
}

static bool parse_ll(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, bool *out) {
    if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) {
        *out = true;
        return true;
    }
    if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0) {
        *out = false;
        return true;
    }
    return false;
}

static void bad_value(const char *flag, const char *value) {
    fprintf(stderr, "Error: invalid value '%s' for --%s\n", value, flag);
    exit(2);
}

/* Parses argv into f. Exits 2 on a usage error, 0 after --help. */
static void parse_flags(int argc, char **argv, flags *f) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "Error: unexpected argument '%s'\n", arg);
            usage(stderr);
            exit(2);
        }
        char name[64];
        const char *value = NULL;
        const char *eq = strchr(arg + 2, '=');
        size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (n >= sizeof name) {
            fprintf(stderr, "Error: unknown option '%s'\n", arg);
            exit(2);
        }
        memcpy(name, arg + 2, n);
        name[n] = '\0';
        if (eq)
            value = eq + 1;

        if (strcmp(name, "help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(name, "strict-gpu") == 0) {
            f->strict_gpu = true;
            if (value && !parse_bool(value, &f->strict_gpu))
                bad_value(name, value);
            continue;
        }
        static const char *const known[] = {"model-repository",
                                            "http-port",
                                            "http-address",
                                            "http-thread-count",
                                            "http-max-input-size",
                                            "model-control-mode",
                                            "load-model",
                                            "log-verbose",
                                            "log-info",
                                            "log-warning",
                                            "log-error",
                                            "log-format",
                                            "pinned-memory-pool-byte-size",
                                            "cuda-memory-pool-byte-size",
                                            "trace-config",
                                            "trace-file-directory",
                                            "allow-metrics",
                                            "allow-gpu-metrics",
                                            "allow-cpu-metrics",
                                            "metrics-port",
                                            "metrics-address",
                                            NULL};
        bool is_known = false;
        for (size_t k = 0; known[k]; k++)
            is_known = is_known || strcmp(name, known[k]) == 0;
        if (!is_known) {
            fprintf(stderr, "Error: unknown option '--%s'\n", name);
            usage(stderr);
            exit(2);
        }
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "Error: option '--%s' needs a value\n", name);
                exit(2);
            }
            value = argv[++i];
        }

        long long v;
        if (strcmp(name, "model-repository") == 0) {
            f->model_repository = value;
        } else if (strcmp(name, "http-port") == 0) {
            if (!parse_ll(value, &v) || v < 0 || v > 65535)
                bad_value(name, value);
            f->http_port = v;
        } else if (strcmp(name, "http-address") == 0) {
            f->http_address = value;
        } else if (strcmp(name, "http-thread-count") == 0) {
            if (!parse_ll(value, &v) || v < 1 || v > 1024)
                bad_value(name, value);
            f->http_thread_count = v;
        } else if (strcmp(name, "http-max-input-size") == 0) {
            if (!parse_ll(value, &v))
                bad_value(name, value);
            f->http_max_input_size = v;
        } else if (strcmp(name, "model-control-mode") == 0) {
            if (strcmp(value, "none") == 0)
                f->control_mode = OSP_MODEL_CONTROL_NONE;
            else if (strcmp(value, "explicit") == 0)
                f->control_mode = OSP_MODEL_CONTROL_EXPLICIT;
            else
                bad_value(name, value);
        } else if (strcmp(name, "load-model") == 0) {
            const char **grown =
                realloc(f->load_models, (f->n_load_models + 1) * sizeof *grown);
            if (!grown) {
                fprintf(stderr, "Error: out of memory\n");
                exit(1);
            }
            f->load_models = grown;
            f->load_models[f->n_load_models++] = value;
        } else if (strcmp(name, "log-verbose") == 0) {
            if (!parse_ll(value, &v) || v < 0 || v > INT_MAX)
                bad_value(name, value);
            f->log_verbose = v;
        } else if (strcmp(name, "log-info") == 0 ||
                   strcmp(name, "log-warning") == 0 ||
                   strcmp(name, "log-error") == 0) {
            bool on;
            if (!parse_bool(value, &on))
                bad_value(name, value);
            osp_log_set_enabled(name[4] == 'i'   ? OSP_LOG_INFO
                                : name[4] == 'w' ? OSP_LOG_WARNING
                                                 : OSP_LOG_ERROR,
                                on);
        } else if (strcmp(name, "log-format") == 0) {
            if (strcmp(value, "default") == 0)
                osp_log_set_format(OSP_LOG_FORMAT_DEFAULT);
            else if (strcmp(value, "ISO8601") == 0)
                osp_log_set_format(OSP_LOG_FORMAT_ISO8601);
            else
                bad_value(name, value);
        } else if (strcmp(name, "pinned-memory-pool-byte-size") == 0) {
            if (!parse_ll(value, &v) || v < 0)
                bad_value(name, value);
            f->devices.pinned_pool_bytes = (size_t)v;
        } else if (strcmp(name, "cuda-memory-pool-byte-size") == 0) {
            const char *colon = strchr(value, ':');
            long long gpu, bytes;
            char gpu_text[32];
            size_t gl = colon ? (size_t)(colon - value) : 0;
            if (!colon || gl == 0 || gl >= sizeof gpu_text)
                bad_value(name, value);
            memcpy(gpu_text, value, gl);
            gpu_text[gl] = '\0';
            size_t max_gpus = sizeof f->devices.cuda_pool_bytes /
                              sizeof f->devices.cuda_pool_bytes[0];
            if (!parse_ll(gpu_text, &gpu) || gpu < 0 ||
                (size_t)gpu >= max_gpus || !parse_ll(colon + 1, &bytes) ||
                bytes < 0)
                bad_value(name, value);
            f->devices.cuda_pool_bytes[gpu] = (size_t)bytes;
        } else if (strcmp(name, "trace-config") == 0) {
            osp_error *err = osp_tracer_options_parse(&f->trace, value);
            if (err) {
                fprintf(stderr, "Error: %s\n", osp_error_message(err));
                osp_error_free(err);
                exit(2);
            }
        } else if (strcmp(name, "trace-file-directory") == 0) {
            f->trace.file_directory = value;
        } else if (strcmp(name, "allow-metrics") == 0) {
            if (!parse_bool(value, &f->allow_metrics))
                bad_value(name, value);
        } else if (strcmp(name, "allow-gpu-metrics") == 0) {
            if (!parse_bool(value, &f->allow_gpu_metrics))
                bad_value(name, value);
        } else if (strcmp(name, "allow-cpu-metrics") == 0) {
            if (!parse_bool(value, &f->allow_cpu_metrics))
                bad_value(name, value);
        } else if (strcmp(name, "metrics-port") == 0) {
            if (!parse_ll(value, &v) || v < 0 || v > 65535)
                bad_value(name, value);
            f->metrics_port = v;
        } else if (strcmp(name, "metrics-address") == 0) {
            f->metrics_address = value;
        }
    }
}

int main(int argc, char **argv) {
    flags f;
    memset(&f, 0, sizeof f);
    f.http_port = 8000;
    f.http_address = "0.0.0.0";
    f.http_thread_count = 8;
    f.http_max_input_size = 67108864;
    f.control_mode = OSP_MODEL_CONTROL_NONE;
    f.allow_metrics = true;
    f.allow_gpu_metrics = true;
    f.allow_cpu_metrics = true;
    f.metrics_port = 8002;
    osp_device_options_init(&f.devices);
    osp_tracer_options_init(&f.trace);
    parse_flags(argc, argv, &f);

    if (f.http_max_input_size <= 0) {
        fprintf(stderr,
                "Error: --http-max-input-size must be greater than 0.\n");
        return 1;
    }
    if (!f.model_repository) {
        fprintf(stderr, "Error: --model-repository is required\n");
        usage(stderr);
        return 2;
    }
    osp_log_set_verbose((int)f.log_verbose);

    /* Block the shutdown signals before any thread exists, so that only
     * sigwait below receives them. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    osp_server_options opts;
    osp_server_options_init(&opts);
    opts.model_repository = f.model_repository;
    opts.control_mode = f.control_mode;
    opts.load_models = f.load_models;
    opts.n_load_models = f.n_load_models;
    opts.strict_gpu = f.strict_gpu;
    opts.devices = f.devices;
    opts.backends = backends_builtin;
    opts.n_backends = backends_builtin_count;
#ifdef OSPREY_HAVE_CUDA
    static const osp_device_provider *const providers[] = {
        &osp_cuda_device_provider};
    opts.devices.providers = providers;
    opts.devices.n_providers = 1;
#endif

    /* After the signal mask: the tracer starts its writer thread. */
    osp_tracer *tracer = NULL;
    osp_error *err = osp_tracer_new(&f.trace, &tracer);
    if (err) {
        OSP_LOG_ERROR("%s", osp_error_message(err));
        osp_error_free(err);
        free(f.load_models);
        return 1;
    }

    osp_server *server = NULL;
    err = osp_server_new(&opts, &server);
    if (err) {
        OSP_LOG_ERROR("failed to start the server: %s", osp_error_message(err));
        osp_error_free(err);
        osp_tracer_free(tracer);
        free(f.load_models);
        return 1;
    }

    kserve_context kserve = {.server = server, .tracer = tracer};
    const http_surface surfaces[] = {
        {.name = "kserve",
         .route = kserve_route,
         .surface_ctx = &kserve,
         .reply_error = kserve_reply_error},
    };
    http_server_options hopts = {
        .address = f.http_address,
        .port = (int)f.http_port,
        .thread_count = (int)f.http_thread_count,
        .max_input_size = (size_t)f.http_max_input_size,
        .surfaces = surfaces,
        .n_surfaces = sizeof surfaces / sizeof surfaces[0],
    };
    http_server *http = NULL;
    err = http_server_start(&hopts, &http);
    if (err) {
        OSP_LOG_ERROR("%s", osp_error_message(err));
        osp_error_free(err);
        osp_server_free(server);
        osp_tracer_free(tracer);
        free(f.load_models);
        return 1;
    }
    metrics_server *metrics_ctx = NULL;
    http_server *metrics = NULL;
    /* Borrowed by the metrics server until it is freed. */
    http_surface msurfaces[] = {{.name = "metrics", .route = metrics_route}};
    const char *metrics_address =
        f.metrics_address ? f.metrics_address : f.http_address;
    if (f.allow_metrics) {
        metrics_options mopts = {
            .gpu = f.allow_gpu_metrics,
            .cpu = f.allow_cpu_metrics,
        };
        http_server_options moptions = {
            .name = "metrics",
            .address = metrics_address,
            .port = (int)f.metrics_port,
            .thread_count = 2,
            .max_input_size = (size_t)f.http_max_input_size,
            .connection_limit = 64,
            .connection_timeout_s = 60,
            .surfaces = msurfaces,
            .n_surfaces = 1,
        };
        err = metrics_new(&mopts, server, &metrics_ctx);
        if (!err) {
            msurfaces[0].surface_ctx = metrics_ctx;
            err = http_server_start(&moptions, &metrics);
        }
        if (err) {
            OSP_LOG_ERROR("%s", osp_error_message(err));
            osp_error_free(err);
            metrics_free(metrics_ctx);
            http_server_stop_accepting(http);
            osp_server_begin_shutdown(server);
            if (!http_server_drain(http, DRAIN_TIMEOUT_MS))
                return 1; /* see the same case at the end */
            http_server_free(http);
            osp_server_free(server);
            osp_tracer_free(tracer);
            free(f.load_models);
            return 1;
        }
    }
    OSP_LOG_INFO("Started HTTPService at %s:%d", f.http_address,
                 http_server_port(http));
    if (metrics)
        OSP_LOG_INFO("Started Metrics Service at %s:%d", metrics_address,
                     http_server_port(metrics));

    int sig = 0;
    while (sigwait(&stop_signals, &sig) != 0)
        ;
    OSP_LOG_INFO("received %s, shutting down",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");

    http_server_stop_accepting(http);
    osp_server_begin_shutdown(server);
    if (!http_server_drain(http, DRAIN_TIMEOUT_MS)) {
        /* Connections may still be suspended inside libmicrohttpd, which
         * must not be stopped then; the process exit releases them. */
        OSP_LOG_WARN("requests still in progress after %d ms; exiting",
                     DRAIN_TIMEOUT_MS);
        osp_tracer_shutdown(tracer); /* trace files still get their "]" */
        return 0;
    }
    http_server_free(http);
    http_server_free(metrics); /* it reads the core's statistics */
    metrics_free(metrics_ctx);
    osp_server_free(server);
    /* Last: every trace has ended; buffered traces are written and the
     * trace files closed. */
    osp_tracer_free(tracer);
    free(f.load_models);
    return 0;
}
