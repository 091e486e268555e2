/*
 * The flag table (see flags.h). Each row is a flag: its name, the
 * placeholder of its value in --help, how the value is stored (a typed
 * field of osprey_flags, or a function for the flags that need one), its
 * default (applied through the same path as a command-line value) and its
 * help.
 */
#include "flags.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "osprey/log.h"

typedef enum flag_kind {
    FLAG_STRING, /* const char * field */
    FLAG_INT,    /* long long field, within [min, max] */
    FLAG_SIZE,   /* size_t field, within [min, max] */
    FLAG_BOOL,   /* bool field: true|on|1 or false|off|0, any case */
    FLAG_APPLY,  /* apply() */
} flag_kind;

typedef struct flag_def {
    const char *name; /* without "--"; Triton's name unless osprey_only */
    bool osprey_only; /* a flag Triton does not have */
    const char *arg;  /* value placeholder for --help */
    flag_kind kind;
    size_t offset;      /* of the field in osprey_flags */
    long long min, max; /* FLAG_INT, FLAG_SIZE */
    /* FLAG_APPLY: stores `value`; false when it is not valid. */
    bool (*apply)(osprey_flags *f, const char *value);
    const char *default_value; /* applied before argv; NULL: none */
    const char *help;          /* lines after the first are indented */
    bool value_optional;       /* FLAG_BOOL given alone means true */
    /* The value may hold a password: an invalid one is not echoed (the
     * apply function prints what is wrong). */
    bool secret;
} flag_def;

#define FIELD(field) offsetof(osprey_flags, field)

/* ---- the flags whose values need more than a typed field ---- */

static bool parse_ll(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return false;
    *out = v;
    return true;
}

/* Triton's bool values: true, on, 1 and false, off, 0, in any case. */
static bool parse_bool(const char *s, bool *out) {
    if (strcasecmp(s, "true") == 0 || strcasecmp(s, "on") == 0 ||
        strcmp(s, "1") == 0) {
        *out = true;
        return true;
    }
    if (strcasecmp(s, "false") == 0 || strcasecmp(s, "off") == 0 ||
        strcmp(s, "0") == 0) {
        *out = false;
        return true;
    }
    return false;
}

static bool apply_control_mode(osprey_flags *f, const char *value) {
    if (strcmp(value, "none") == 0) {
        f->control_mode = OSP_MODEL_CONTROL_NONE;
    } else if (strcmp(value, "explicit") == 0) {
        f->control_mode = OSP_MODEL_CONTROL_EXPLICIT;
    } else if (strcmp(value, "poll") == 0) {
        f->control_mode = OSP_MODEL_CONTROL_POLL;
    } else {
        return false;
    }
    return true;
}

/* Triton's --log-verbose takes an integer, or true (1) and false (0). */
static bool apply_log_verbose(osprey_flags *f, const char *value) {
    long long level;
    if (strcasecmp(value, "true") == 0)
        level = 1;
    else if (strcasecmp(value, "false") == 0)
        level = 0;
    else if (!parse_ll(value, &level) || level < 0 || level > INT_MAX)
        return false;
    f->log_verbose = level;
    return true;
}

static bool apply_log_file(osprey_flags *f, const char *value) {
    (void)f;
    osp_error *err = osp_log_set_file(value);
    if (!err)
        return true;
    fprintf(stderr, "Error: %s\n", osp_error_message(err));
    osp_error_free(err);
    return false;
}

/* Repeatable, as Triton's: local folders and s3:// locations mixed. */
static bool apply_model_repository(osprey_flags *f, const char *value) {
    const char **grown = realloc(f->model_repositories,
                                 (f->n_model_repositories + 1) * sizeof *grown);
    if (!grown)
        return false;
    f->model_repositories = grown;
    f->model_repositories[f->n_model_repositories++] = value;
    if (!f->model_repository)
        f->model_repository = value;
    return true;
}

static bool apply_load_model(osprey_flags *f, const char *value) {
    const char **grown =
        realloc(f->load_models, (f->n_load_models + 1) * sizeof *grown);
    if (!grown)
        return false;
    f->load_models = grown;
    f->load_models[f->n_load_models++] = value;
    return true;
}

static bool apply_log_level(osp_log_level level, const char *value) {
    bool on;
    if (!parse_bool(value, &on))
        return false;
    osp_log_set_enabled(level, on);
    return true;
}

static bool apply_log_info(osprey_flags *f, const char *value) {
    (void)f;
    return apply_log_level(OSP_LOG_INFO, value);
}

static bool apply_log_warning(osprey_flags *f, const char *value) {
    (void)f;
    return apply_log_level(OSP_LOG_WARNING, value);
}

static bool apply_log_error(osprey_flags *f, const char *value) {
    (void)f;
    return apply_log_level(OSP_LOG_ERROR, value);
}

static bool apply_log_format(osprey_flags *f, const char *value) {
    (void)f;
    if (strcmp(value, "default") == 0)
        osp_log_set_format(OSP_LOG_FORMAT_DEFAULT);
    else if (strcmp(value, "ISO8601") == 0)
        osp_log_set_format(OSP_LOG_FORMAT_ISO8601);
    else
        return false;
    return true;
}

/* <gpu>:<bytes>, as Triton's --cuda-memory-pool-byte-size. */
static bool apply_cuda_pool(osprey_flags *f, const char *value) {
    const char *colon = strchr(value, ':');
    char gpu_text[32];
    size_t gpu_len = colon ? (size_t)(colon - value) : 0;
    if (!colon || gpu_len == 0 || gpu_len >= sizeof gpu_text)
        return false;
    memcpy(gpu_text, value, gpu_len);
    gpu_text[gpu_len] = '\0';
    long long gpu, bytes;
    size_t max_gpus = sizeof f->devices.cuda_pool_bytes /
                      sizeof f->devices.cuda_pool_bytes[0];
    if (!parse_ll(gpu_text, &gpu) || gpu < 0 || (size_t)gpu >= max_gpus ||
        !parse_ll(colon + 1, &bytes) || bytes < 0)
        return false;
    f->devices.cuda_pool_bytes[gpu] = (size_t)bytes;
    return true;
}

static bool apply_restricted_api(osprey_flags *f, const char *value) {
    osp_error *err = kserve_restriction_add(
        f->restricted_apis, &kserve_http_restriction_flag, value);
    if (!err)
        return true;
    fprintf(stderr, "Error: %s\n", osp_error_message(err));
    osp_error_free(err);
    return false;
}

static bool apply_grpc_restricted_protocol(osprey_flags *f, const char *value) {
    osp_error *err = kserve_restriction_add(
        f->grpc_restricted, &kserve_grpc_restriction_flag, value);
    if (!err)
        return true;
    fprintf(stderr, "Error: %s\n", osp_error_message(err));
    osp_error_free(err);
    return false;
}

/* none, low, medium or high, any case (kgrpc_compression's order). */
static bool apply_grpc_compression(osprey_flags *f, const char *value) {
    static const char *const levels[] = {"none", "low", "medium", "high"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(value, levels[i]) == 0) {
            f->grpc_infer_compression = i;
            return true;
        }
    fprintf(stderr, "Error: invalid argument for "
                    "--grpc_infer_response_compression_level\n");
    return false;
}

static bool apply_trace_config(osprey_flags *f, const char *value) {
    osp_error *err = osp_tracer_options_parse(&f->trace, value);
    if (!err)
        return true;
    fprintf(stderr, "Error: %s\n", osp_error_message(err));
    osp_error_free(err);
    return false;
}

/* Triton's --backend-config=[<backend>,]<setting>=<value>, split as Triton
 * splits it: the backend ends at the first ',', the setting at the first
 * '=' after it. Without a backend the setting is for every backend. */
static bool apply_backend_config(osprey_flags *f, const char *value) {
    const char *comma = strchr(value, ',');
    const char *setting = comma ? comma + 1 : value;
    const char *eq = strchr(setting, '=');
    if (comma == value) {
        fprintf(stderr,
                "Error: No backend specified. --backend-config option format "
                "is <backend name>,<setting>=<value> or <setting>=<value>. "
                "Got %s\n",
                value);
        return false;
    }
    if (!eq || eq == setting || eq[1] == '\0') {
        fprintf(stderr,
                "Error: --backend-config option format is '<backend "
                "name>,<setting>=<value>'. Got %s\n",
                value);
        return false;
    }
    /* "<backend>\0<setting>\0<value>\0" in one allocation */
    size_t backend_len = comma ? (size_t)(comma - value) : 0;
    size_t len = strlen(value);
    char *block = malloc(len + 2);
    osp_backend_setting *grown =
        block ? realloc(f->backend_settings,
                        (f->n_backend_settings + 1) * sizeof *grown)
              : NULL;
    if (!grown) {
        free(block);
        return false;
    }
    f->backend_settings = grown;
    memcpy(block, value, backend_len);
    block[backend_len] = '\0';
    char *key = block + backend_len + 1;
    memcpy(key, setting, len - (size_t)(setting - value) + 1);
    key[eq - setting] = '\0';
    f->backend_settings[f->n_backend_settings++] = (osp_backend_setting){
        .backend = block, .key = key, .value = key + (eq - setting) + 1};
    return true;
}

/* Triton's --cache-config=<cache>,<key>=<value>, repeatable: its "local"
 * cache as local,size=BYTES (0 bytes refused), its "redis" cache as
 * redis,KEY=VALUE (cache_config.h). A second cache type is refused in
 * Triton's words. */
static bool apply_cache_config(osprey_flags *f, const char *value) {
    static const char prefix[] = "local,size=";
    char *end = NULL;
    size_t type_len = strcspn(value, ",");
    if (!f->cache_config_given) {
        snprintf(f->cache_config_type, sizeof f->cache_config_type, "%.*s",
                 (int)type_len, value);
    } else if (strlen(f->cache_config_type) != type_len ||
               strncmp(f->cache_config_type, value, type_len) != 0) {
        fprintf(stderr, "error: creating server: Invalid argument - found "
                        "multiple cache configurations, but only a single "
                        "cache is currently supported\n");
        return false;
    }
    f->cache_config_given = true;
    if (type_len == 5 && strncmp(value, "redis", 5) == 0) {
        if (value[type_len] != ',') {
            fprintf(stderr, "Error: --cache-config: expected "
                            "redis,<key>=<value>\n");
            return false;
        }
        return redis_cache_config_apply(&f->redis_cache, value + type_len + 1);
    }
    if (strncmp(value, prefix, sizeof prefix - 1) != 0) {
        fprintf(stderr,
                "Error: --cache-config: the caches are local (local,size="
                "<bytes>) and redis (redis,<key>=<value>). Got %.*s\n",
                (int)type_len, value);
        return false;
    }
    const char *number = value + sizeof prefix - 1;
    errno = 0;
    unsigned long long size = strtoull(number, &end, 10);
    if (!isdigit((unsigned char)number[0]) || *end || errno == ERANGE ||
        size > SIZE_MAX) {
        fprintf(stderr, "Error: --cache-config: invalid size '%s'\n", number);
        return false;
    }
    if (size == 0) {
        fprintf(stderr, "Error: --cache-config: the local cache needs a size "
                        "greater than 0\n");
        return false;
    }
    f->response_cache_bytes = (size_t)size;
    return true;
}

/* Triton's older --response-cache-byte-size=BYTES: a local cache of that
 * size (0: none). */
static bool apply_response_cache_byte_size(osprey_flags *f,
                                           const char *value) {
    char *end = NULL;
    errno = 0;
    unsigned long long size = strtoull(value, &end, 10);
    if (!isdigit((unsigned char)value[0]) || *end || errno == ERANGE ||
        size > SIZE_MAX)
        return false;
    f->cache_byte_size_given = true;
    f->response_cache_bytes = (size_t)size;
    return true;
}

static bool apply_queue_service(osprey_flags *f, const char *value) {
    if (value[0] == '\0')
        return false;
    const char **grown =
        realloc(f->queue_services, (f->n_queue_services + 1) * sizeof *grown);
    if (!grown)
        return false;
    f->queue_services = grown;
    f->queue_services[f->n_queue_services++] = value;
    return true;
}

static bool apply_queue_fsync(osprey_flags *f, const char *value) {
    if (strcmp(value, "batch") == 0)
        f->queue_fsync = OSP_QUEUE_FSYNC_BATCH;
    else if (strcmp(value, "always") == 0)
        f->queue_fsync = OSP_QUEUE_FSYNC_ALWAYS;
    else if (strcmp(value, "none") == 0)
        f->queue_fsync = OSP_QUEUE_FSYNC_NONE;
    else
        return false;
    return true;
}

/* Reads the Redis password from the first line of the file `value`
 * (the file's name may be logged, never what it holds). */
static bool apply_queue_store_password_file(osprey_flags *f,
                                            const char *value) {
    FILE *fp = fopen(value, "r");
    if (!fp) {
        fprintf(stderr, "Error: cannot read --queue-store-password-file: %s\n",
                strerror(errno));
        return false;
    }
    char line[512];
    bool ok = fgets(line, sizeof line, fp) != NULL;
    fclose(fp);
    if (!ok) {
        fprintf(stderr, "Error: --queue-store-password-file is empty\n");
        return false;
    }
    line[strcspn(line, "\r\n")] = '\0';
    free(f->queue_store_password);
    f->queue_store_password = strdup(line);
    memset(line, 0, sizeof line);
    return f->queue_store_password != NULL;
}

static bool apply_queue_store(osprey_flags *f, const char *value) {
    if (value[0] == '\0') { /* the embedded store */
        f->queue_store = NULL;
        return true;
    }
    if (strncmp(value, "redis://", 8) != 0 || value[8] == '\0') {
        fprintf(stderr, "Error: --queue-store takes "
                        "redis://[USER:PASSWORD@]HOST:PORT[/DB]\n");
        return false;
    }
    f->queue_store = value;
    return true;
}

/* Triton's deprecated --trace-level, --trace-rate, --trace-count and
 * --trace-log-frequency: the --trace-config setting `key`=value. */
static bool apply_trace_setting(osprey_flags *f, const char *key,
                                const char *value) {
    char setting[128];
    int n = snprintf(setting, sizeof setting, "%s=%s", key, value);
    if (n < 0 || (size_t)n >= sizeof setting)
        return false;
    return apply_trace_config(f, setting);
}

static bool apply_trace_level(osprey_flags *f, const char *value) {
    return apply_trace_setting(f, "level", value);
}

static bool apply_trace_rate(osprey_flags *f, const char *value) {
    return apply_trace_setting(f, "rate", value);
}

static bool apply_trace_count(osprey_flags *f, const char *value) {
    return apply_trace_setting(f, "count", value);
}

static bool apply_trace_log_frequency(osprey_flags *f, const char *value) {
    return apply_trace_setting(f, "triton,log-frequency", value);
}

/* --trace-file: the setting keeps pointing into argv. */
static bool apply_trace_file(osprey_flags *f, const char *value) {
    if (strlen(value) > OSP_TRACE_PATH_MAX)
        return false;
    f->trace.file = value;
    return true;
}

/* Triton's flags that mean nothing to Osprey: accepted with their value
 * and warned about once each. `why` (optional) follows the warning. */
typedef struct ignored_flag {
    const char *name;
    const char *why;
} ignored_flag;

static const ignored_flag ignored_flags[] = {
    {"model-load-retry-count", NULL},
    {"model-namespacing", NULL},
    {"allow-http", "HTTP is always served"},
    {"reuse-http-port", NULL},
    {"grpc-max-response-pool-size", "responses are not pooled"},
    {"allow-sagemaker", NULL},
    {"sagemaker-port", NULL},
    {"sagemaker-safe-port-range", NULL},
    {"sagemaker-thread-count", NULL},
    {"allow-vertex-ai", NULL},
    {"vertex-ai-port", NULL},
    {"vertex-ai-thread-count", NULL},
    {"vertex-ai-default-model", NULL},
    {"metrics-interval-ms", "metrics are read when scraped"},
    {"metrics-config", NULL},
    {"cache-directory", NULL},
    {"rate-limit", NULL},
    {"rate-limit-resource", NULL},
    {"cuda-virtual-address-size", NULL},
    {"min-supported-compute-capability", NULL},
    {"buffer-manager-thread-count", NULL},
    {"host-policy", NULL},
    {"model-load-gpu-limit", NULL},
    {"backend-directory", "its backends are built in"},
    {"repoagent-directory", NULL},
};

#define N_IGNORED (sizeof ignored_flags / sizeof ignored_flags[0])

static const ignored_flag *find_ignored(const char *name, size_t len) {
    for (size_t i = 0; i < N_IGNORED; i++)
        if (strlen(ignored_flags[i].name) == len &&
            strncmp(ignored_flags[i].name, name, len) == 0)
            return &ignored_flags[i];
    return NULL;
}

/* ---- the table ---- */

static const flag_def flag_table[] = {
    {.name = "model-repository",
     .arg = "DIR",
     .kind = FLAG_APPLY,
     .apply = apply_model_repository,
     .help = "model repository (required; repeatable): a folder,\n"
             "or s3://[http(s)://HOST:PORT/]BUCKET[/PREFIX]"},
    {.name = "model-store",
     .arg = "DIR",
     .kind = FLAG_APPLY,
     .apply = apply_model_repository,
     .help = "the same as --model-repository"},
    {.name = "id",
     .arg = "NAME",
     .kind = FLAG_STRING,
     .offset = FIELD(server_id),
     .default_value = "triton",
     .help = "server name in GET /v2; Triton's default, which\n"
             "clients written for Triton check"},
    {.name = "exit-on-error",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(exit_on_error),
     .default_value = "true",
     .help = "exit at start (status 1) when a model fails to load"},
    {.name = "strict-readiness",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(strict_readiness),
     .default_value = "true",
     .help = "/v2/health/ready needs every model ready;\n"
             "false: ready whenever live"},
    {.name = "exit-timeout-secs",
     .arg = "SECS",
     .kind = FLAG_INT,
     .offset = FIELD(exit_timeout_secs),
     .min = INT_MIN,
     .max = INT_MAX / 1000,
     .default_value = "30",
     .help = "at shutdown, wait this long for requests in flight\n"
             "(negative: 0)"},
    {.name = "model-load-thread-count",
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(model_load_thread_count),
     .min = 0,
     .max = INT_MAX,
     .default_value = "4",
     .help = "models of the repository loaded at once\n(0: 1; at most 64)"},
    {.name = "http-port",
     .arg = "PORT",
     .kind = FLAG_INT,
     .offset = FIELD(http_port),
     .min = 0,
     .max = 65535,
     .default_value = "8000",
     .help = "HTTP port, 0 = any free port"},
    {.name = "http-address",
     .arg = "ADDR",
     .kind = FLAG_STRING,
     .offset = FIELD(http_address),
     .default_value = "0.0.0.0",
     .help = "HTTP bind address"},
    {.name = "http-header-forward-pattern",
     .arg = "REGEX",
     .kind = FLAG_STRING,
     .offset = FIELD(http_header_forward_pattern),
     .help = "KServe infer requests' headers whose name matches\n"
             "(anywhere, case-sensitive, POSIX extended syntax)\n"
             "become string parameters the model sees"},
    {.name = "http-thread-count",
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(http_thread_count),
     .min = 1,
     .max = 1024,
     .default_value = "8",
     .help = "HTTP worker threads"},
    {.name = "http-max-connections",
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(http_max_connections),
     .min = 1,
     .max = 1000000,
     .default_value = "8192",
     .help = "HTTP connections open at once; past it new ones wait\n"
             "in the listen backlog until one closes"},
    {.name = "http-connection-timeout",
     .arg = "SECONDS",
     .kind = FLAG_INT,
     .offset = FIELD(http_connection_timeout),
     .min = 0,
     .max = 86400,
     .default_value = "0",
     .help = "close an HTTP connection idle this long (0: never)"},
    {.name = "http-max-input-size",
     .arg = "BYTES",
     .kind = FLAG_INT,
     .offset = FIELD(http_max_input_size),
     .min = LLONG_MIN,
     .max = LLONG_MAX,
     .default_value = "67108864",
     .help = "largest JSON body, raw body, decompressed body\n"
             "or JSON input"},
    {.name = "http-restricted-api",
     .arg = "API[,API...]:HEADER=VALUE",
     .kind = FLAG_APPLY,
     .apply = apply_restricted_api,
     .help = "requests to these APIs (health, metadata, inference,\n"
             "shared-memory, model-config, model-repository, statistics,\n"
             "trace, logging) need HEADER: VALUE; repeatable"},
    {.name = "allow-grpc",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(allow_grpc),
     .default_value = "true",
     .help = "serve KServe v2 gRPC (inference.GRPCInferenceService)"},
    {.name = "grpc-port",
     .arg = "PORT",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_port),
     .min = 0,
     .max = 65535,
     .default_value = "8001",
     .help = "gRPC port, 0 = any free port (printed at start)"},
    {.name = "grpc-address",
     .arg = "ADDR",
     .kind = FLAG_STRING,
     .offset = FIELD(grpc_address),
     .default_value = "0.0.0.0",
     .help = "gRPC bind address"},
    {.name = "grpc-header-forward-pattern",
     .arg = "REGEX",
     .kind = FLAG_STRING,
     .offset = FIELD(grpc_header_forward_pattern),
     .help = "ModelInfer and ModelStreamInfer metadata whose key\n"
             "matches (anywhere; keys are lower case) become\n"
             "string parameters the model sees"},
    {.name = "reuse-grpc-port",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(reuse_grpc_port),
     .default_value = "false",
     .help = "let several servers listen on the gRPC port (SO_REUSEPORT)"},
    {.name = "grpc-infer-thread-count",
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_infer_thread_count),
     .min = 0,
     .max = 128,
     .default_value = "0",
     .help = "threads serving the gRPC completion queue (0: 1 on hosts with "
             "at most 2 CPUs, else 2, Triton's default)"},
    {.name = "grpc-infer-allocation-pool-size",
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_infer_allocation_pool_size),
     .min = 0,
     .max = INT_MAX,
     .default_value = "8",
     .help = "idle ModelInfer call states kept for reuse"},
    {.name = "grpc-use-ssl",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(grpc_use_ssl),
     .default_value = "false",
     .help = "TLS on the gRPC port (--grpc-server-cert, --grpc-server-key)"},
    {.name = "grpc-use-ssl-mutual",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(grpc_use_ssl_mutual),
     .default_value = "false",
     .help = "TLS with client certificates signed by --grpc-root-cert\n"
             "(implies --grpc-use-ssl)"},
    {.name = "grpc-server-cert",
     .arg = "PEM",
     .kind = FLAG_STRING,
     .offset = FIELD(grpc_server_cert),
     .help = "file holding the PEM server certificate"},
    {.name = "grpc-server-key",
     .arg = "PEM",
     .kind = FLAG_STRING,
     .offset = FIELD(grpc_server_key),
     .help = "file holding the PEM server key"},
    {.name = "grpc-root-cert",
     .arg = "PEM",
     .kind = FLAG_STRING,
     .offset = FIELD(grpc_root_cert),
     .help = "file holding the PEM root certificate clients are\n"
             "verified against"},
    {.name = "grpc-infer-response-compression-level",
     .arg = "LEVEL",
     .kind = FLAG_APPLY,
     .apply = apply_grpc_compression,
     .default_value = "none",
     .help = "none, low, medium or high: compression of inference\n"
             "responses (gzip or deflate, as the client accepts)"},
    {.name = "grpc-keepalive-time",
     .arg = "MS",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_keepalive_time_ms),
     .min = 0,
     .max = INT_MAX,
     .default_value = "7200000",
     .help = "period of keepalive pings"},
    {.name = "grpc-keepalive-timeout",
     .arg = "MS",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_keepalive_timeout_ms),
     .min = 0,
     .max = INT_MAX,
     .default_value = "20000",
     .help = "wait for a keepalive ping's acknowledgement"},
    {.name = "grpc-keepalive-permit-without-calls",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(grpc_keepalive_permit_without_calls),
     .default_value = "false",
     .help = "keepalive pings without calls in flight"},
    {.name = "grpc-http2-max-pings-without-data",
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_http2_max_pings_without_data),
     .min = 0,
     .max = INT_MAX,
     .default_value = "2",
     .help = "pings sent without data (0: no limit)"},
    {.name = "grpc-http2-min-recv-ping-interval-without-data",
     .arg = "MS",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_http2_min_recv_ping_interval_ms),
     .min = 0,
     .max = INT_MAX,
     .default_value = "300000",
     .help = "shortest interval between pings without data"},
    {.name = "grpc-http2-max-ping-strikes",
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_http2_max_ping_strikes),
     .min = 0,
     .max = INT_MAX,
     .default_value = "2",
     .help = "bad pings tolerated before GOAWAY (0: any)"},
    {.name = "grpc-max-connection-age",
     .arg = "MS",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_max_connection_age_ms),
     .min = 0,
     .max = INT_MAX,
     .default_value = "0",
     .help = "longest life of a connection (0: unlimited)"},
    {.name = "grpc-max-connection-age-grace",
     .arg = "MS",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_max_connection_age_grace_ms),
     .min = 0,
     .max = INT_MAX,
     .default_value = "0",
     .help = "grace after the connection age (0: unlimited)"},
    {.name = "grpc-max-message-size",
     .osprey_only = true,
     .arg = "BYTES",
     .kind = FLAG_INT,
     .offset = FIELD(grpc_max_message_size),
     .min = 1,
     .max = INT_MAX,
     .default_value = "2147483647",
     .help = "largest gRPC message received or sent (Triton's\n"
             "INT32_MAX); larger ones get RESOURCE_EXHAUSTED"},
    {.name = "grpc-restricted-protocol",
     .arg = "API[,API...]:KEY=VALUE",
     .kind = FLAG_APPLY,
     .apply = apply_grpc_restricted_protocol,
     .help = "gRPC calls of these APIs (as --http-restricted-api)\n"
             "need metadata triton-grpc-protocol-KEY: VALUE; repeatable"},
    {.name = "model-control-mode",
     .arg = "MODE",
     .kind = FLAG_APPLY,
     .apply = apply_control_mode,
     .default_value = "none",
     .help = "none (load all), explicit (load API) or poll (load all,\n"
             "then follow the repository's changes)"},
    {.name = "repository-poll-secs",
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(repository_poll_secs),
     .min = 1,
     .max = 86400,
     .default_value = "15",
     .help = "poll mode: seconds between repository scans"},
    {.name = "repository-cache-dir",
     .osprey_only = true,
     .arg = "DIR",
     .kind = FLAG_STRING,
     .offset = FIELD(repository_cache_dir),
     .help = "s3:// repositories: models are downloaded into a\n"
             "private folder made here, removed at exit; a load\n"
             "request's file: contents are written here too\n"
             "(default: $TMPDIR or /tmp)"},
    {.name = "repository-ca-file",
     .osprey_only = true,
     .arg = "FILE",
     .kind = FLAG_STRING,
     .offset = FIELD(repository_ca_file),
     .help = "s3://https://... repositories: CA certificates (PEM)\n"
             "that verify the endpoint (default: the system's)"},
    {.name = "load-model",
     .arg = "NAME",
     .kind = FLAG_APPLY,
     .apply = apply_load_model,
     .help = "explicit mode: load NAME at start; '*' = all;\n"
             "repeatable"},
    {.name = "log-verbose",
     .arg = "N",
     .kind = FLAG_APPLY,
     .apply = apply_log_verbose,
     .default_value = "0",
     .help = "verbose logging level (true = 1, false = 0)"},
    {.name = "log-file",
     .arg = "PATH",
     .kind = FLAG_APPLY,
     .apply = apply_log_file,
     .help = "append the log to PATH instead of stderr"},
    {.name = "log-info",
     .arg = "BOOL",
     .kind = FLAG_APPLY,
     .apply = apply_log_info,
     .default_value = "true",
     .help = "print INFO records"},
    {.name = "log-warning",
     .arg = "BOOL",
     .kind = FLAG_APPLY,
     .apply = apply_log_warning,
     .default_value = "true",
     .help = "print WARNING records"},
    {.name = "log-error",
     .arg = "BOOL",
     .kind = FLAG_APPLY,
     .apply = apply_log_error,
     .default_value = "true",
     .help = "print ERROR records"},
    {.name = "log-format",
     .arg = "FORMAT",
     .kind = FLAG_APPLY,
     .apply = apply_log_format,
     .default_value = "default",
     .help = "record prefix: default or ISO8601"},
    {.name = "strict-gpu",
     .osprey_only = true,
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(strict_gpu),
     .default_value = "false",
     .value_optional = true,
     .help = "fail models that ask for a GPU when none is present"},
    {.name = "max-sequences",
     .osprey_only = true,
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(max_sequences),
     .min = 1,
     .max = 65536,
     .default_value = "4096",
     .help = "live sequences per version of a sequence_batching model;\n"
             "a new sequence beyond them is refused (503 / UNAVAILABLE)\n"
             "until one ends or idles out (Triton has no such bound)"},
    {.name = "disable-auto-complete-config",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(disable_auto_complete_config),
     .default_value = "false",
     .value_optional = true,
     .help = "load requests' partial configs are not completed from\n"
             "the model's config.pbtxt"},
    {.name = "strict-model-config",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(strict_model_config),
     .default_value = "false",
     .help = "true: the same as --disable-auto-complete-config"},
    {.name = "backend-config",
     .arg = "[BACKEND,]KEY=VALUE",
     .kind = FLAG_APPLY,
     .apply = apply_backend_config,
     .help = "a setting for the models of BACKEND, or without BACKEND\n"
             "for those of every backend (a backend's own one wins),\n"
             "e.g. onnxruntime,default-max-batch-size=8 (Triton's\n"
             "default: 4); repeatable"},
    {.name = "pinned-memory-pool-byte-size",
     .arg = "N",
     .kind = FLAG_SIZE,
     .offset = FIELD(devices.pinned_pool_bytes),
     .min = 0,
     .max = LLONG_MAX,
     .default_value = "268435456",
     .help = "pinned host memory pool"},
    {.name = "cuda-memory-pool-byte-size",
     .arg = "GPU:BYTES",
     .kind = FLAG_APPLY,
     .apply = apply_cuda_pool,
     .help = "device memory pool of one GPU (default 67108864);\n"
             "repeatable"},
    {.name = "cache-config",
     .arg = "CACHE,KEY=VALUE",
     .kind = FLAG_APPLY,
     .apply = apply_cache_config,
     .secret = true,
     .help = "the response cache of the models whose config\n"
             "enables response_cache; repeatable, one cache.\n"
             "local,size=BYTES: in memory (Triton's local cache).\n"
             "redis,KEY=VALUE: in a Redis that replicas share\n"
             "(Triton's redis cache); keys host, port (required),\n"
             "user, password, db, connect_timeout, socket_timeout\n"
             "(ms, 0: no limit), pool_size (1), wait_timeout (ms,\n"
             "1000), tls_enabled (true is refused: no TLS in this\n"
             "hiredis), cert, key, cacert, cacert_dir, sni;\n"
             "redis,host=H,port=P,... sets several at once"},
    {.name = "response-cache-byte-size",
     .arg = "BYTES",
     .kind = FLAG_APPLY,
     .apply = apply_response_cache_byte_size,
     .help = "Triton's older form of --cache-config=local,size=BYTES\n"
             "(0: no cache); not together with --cache-config"},
    {.name = "trace-config",
     .arg = "[MODE,]KEY=VALUE",
     .kind = FLAG_APPLY,
     .apply = apply_trace_config,
     .help = "trace settings (Triton's): rate=N, level=OFF|\n"
             "TIMESTAMPS|TENSORS, count=N, mode=triton,\n"
             "triton,file=PATH, triton,log-frequency=N; repeatable"},
    {.name = "trace-file",
     .arg = "PATH",
     .kind = FLAG_APPLY,
     .apply = apply_trace_file,
     .help = "deprecated: --trace-config triton,file=PATH"},
    {.name = "trace-level",
     .arg = "LEVEL",
     .kind = FLAG_APPLY,
     .apply = apply_trace_level,
     .help = "deprecated: --trace-config level=LEVEL"},
    {.name = "trace-rate",
     .arg = "N",
     .kind = FLAG_APPLY,
     .apply = apply_trace_rate,
     .help = "deprecated: --trace-config rate=N"},
    {.name = "trace-count",
     .arg = "N",
     .kind = FLAG_APPLY,
     .apply = apply_trace_count,
     .help = "deprecated: --trace-config count=N"},
    {.name = "trace-log-frequency",
     .arg = "N",
     .kind = FLAG_APPLY,
     .apply = apply_trace_log_frequency,
     .help = "deprecated: --trace-config triton,log-frequency=N"},
    {.name = "trace-file-directory",
     .osprey_only = true,
     .arg = "DIR",
     .kind = FLAG_STRING,
     .offset = FIELD(trace.file_directory),
     .help = "let the trace settings API set trace_file to a\n"
             "file name inside DIR (default: refused)"},
    {.name = "rest-api-enable-cors-support",
     .osprey_only = true,
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(rest_api_enable_cors_support),
     .default_value = "false",
     .value_optional = true,
     .help = "TF Serving's --rest_api_enable_cors_support: CORS headers\n"
             "on /v1 replies"},
    {.name = "allow-client-shm",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(allow_client_shm),
     .default_value = "false",
     .help = "let clients register, unregister and use system shared\n"
             "memory regions for inference inputs and outputs"},
    {.name = "queue-service",
     .osprey_only = true,
     .arg = "NAME",
     .kind = FLAG_APPLY,
     .apply = apply_queue_service,
     .help = "a queue-only service NAME (input queue and NAME/sink, no\n"
             "model; its workers are outside Osprey); repeatable. Every\n"
             "loaded model is a queue service with a built-in worker"},
    {.name = "queue-token",
     .osprey_only = true,
     .arg = "TOKEN",
     .kind = FLAG_STRING,
     .offset = FIELD(queue_token),
     .help = "the queue API (and its WebSocket watch) needs\n"
             "'Authorization: TOKEN' (default: open; a warning when\n"
             "the HTTP address is not loopback)"},
    {.name = "queue-max-payload-bytes",
     .osprey_only = true,
     .arg = "BYTES",
     .kind = FLAG_INT,
     .offset = FIELD(queue_max_payload_bytes),
     .min = 1,
     .max = 64ll * 1024 * 1024,
     .default_value = "524288",
     .help = "largest queue item (inclusive); larger puts get 413"},
    {.name = "queue-max-length",
     .osprey_only = true,
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(queue_max_length),
     .min = 1,
     .max = 1000000000,
     .default_value = "4095",
     .help = "items a queue holds; puts to a full one get 429"},
    {.name = "queue-dir",
     .osprey_only = true,
     .arg = "DIR",
     .kind = FLAG_STRING,
     .offset = FIELD(queue_dir),
     .help = "directory of the embedded queue store (created;\n"
             "relative to the working directory; one server at a\n"
             "time). Default: osprey-queue-<http-port>, so servers\n"
             "on other ports share a working directory"},
    {.name = "queue-fsync",
     .osprey_only = true,
     .arg = "POLICY",
     .kind = FLAG_APPLY,
     .apply = apply_queue_fsync,
     .default_value = "batch",
     .help = "embedded store: batch (acknowledged after an fsync shared\n"
             "by the writes waiting for it), always (one fsync each),\n"
             "none (survives a process kill, not a machine crash)"},
    {.name = "queue-store",
     .osprey_only = true,
     .arg = "URL",
     .kind = FLAG_APPLY,
     .apply = apply_queue_store,
     .help = "redis://HOST:PORT[/DB]: queues in Redis Streams, shared\n"
             "by replicas (default: the embedded store in --queue-dir)"},
    {.name = "queue-store-password-file",
     .osprey_only = true,
     .arg = "FILE",
     .kind = FLAG_APPLY,
     .apply = apply_queue_store_password_file,
     .help = "the Redis password (AUTH) from the file's first line;\n"
             "else $OSPREY_QUEUE_STORE_PASSWORD, else the URL's\n"
             "redis://USER:PASSWORD@... Never logged"},
    {.name = "queue-worker-window",
     .osprey_only = true,
     .arg = "N",
     .kind = FLAG_INT,
     .offset = FIELD(queue_worker_window),
     .min = 1,
     .max = 1024,
     .default_value = "8",
     .help = "items a model service's built-in worker runs at once"},
    {.name = "queue-consumer-grace-ms",
     .osprey_only = true,
     .arg = "MS",
     .kind = FLAG_INT,
     .offset = FIELD(queue_consumer_grace_ms),
     .min = 1,
     .max = 86400000,
     .default_value = "10000",
     .help = "how long the uncommitted items of a consumer that left\n"
             "wait for the same gid.uid before they return to its group"},
    {.name = "allow-metrics",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(allow_metrics),
     .default_value = "true",
     .help = "Prometheus metrics service"},
    {.name = "allow-gpu-metrics",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(allow_gpu_metrics),
     .default_value = "true",
     .help = "GPU metrics through NVML when present"},
    {.name = "allow-cpu-metrics",
     .arg = "BOOL",
     .kind = FLAG_BOOL,
     .offset = FIELD(allow_cpu_metrics),
     .default_value = "true",
     .help = "CPU metrics from /proc"},
    {.name = "metrics-port",
     .arg = "PORT",
     .kind = FLAG_INT,
     .offset = FIELD(metrics_port),
     .min = 0,
     .max = 65535,
     .default_value = "8002",
     .help = "metrics port, 0 = any free port"},
    {.name = "metrics-address",
     .arg = "ADDR",
     .kind = FLAG_STRING,
     .offset = FIELD(metrics_address),
     .help = "metrics bind address (default: --http-address)"},
};

#define N_FLAGS (sizeof flag_table / sizeof flag_table[0])

static const flag_def *find_flag(const char *name, size_t len) {
    for (size_t i = 0; i < N_FLAGS; i++)
        if (strlen(flag_table[i].name) == len &&
            strncmp(flag_table[i].name, name, len) == 0)
            return &flag_table[i];
    return NULL;
}

/* The flag or ignored Triton flag that name[0..len) names, as getopt_long
 * resolves it: an exact name, or else a prefix of exactly one name
 * ("--log-warn" for --log-warning). Returns the number of candidates: 1
 * with *def or *ignored set, 0 for an unknown name, more when the prefix is
 * ambiguous (each candidate then printed to `err`). */
static size_t resolve_option(const char *name, size_t len,
                             const flag_def **def, const ignored_flag **ignored,
                             FILE *err) {
    *def = find_flag(name, len);
    *ignored = *def ? NULL : find_ignored(name, len);
    if (*def || *ignored)
        return 1;
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < N_FLAGS + N_IGNORED; i++) {
            const char *candidate = i < N_FLAGS
                                        ? flag_table[i].name
                                        : ignored_flags[i - N_FLAGS].name;
            if (strncmp(candidate, name, len) != 0)
                continue;
            if (pass == 1) {
                fprintf(err, " '--%s'", candidate);
            } else if (n++ == 0) {
                *def = i < N_FLAGS ? &flag_table[i] : NULL;
                *ignored = i < N_FLAGS ? NULL : &ignored_flags[i - N_FLAGS];
            }
        }
        if (n <= 1)
            return n;
        if (pass == 0) {
            *def = NULL;
            *ignored = NULL;
            fprintf(err, "Error: option '--%.*s' is ambiguous; possibilities:",
                    (int)len, name);
        }
    }
    fputc('\n', err);
    return n;
}

/* Stores `value` in the flag's field. false when it is not valid. */
static bool apply_flag(osprey_flags *f, const flag_def *def,
                       const char *value) {
    void *field = (char *)f + def->offset;
    long long v;
    switch (def->kind) {
    case FLAG_STRING:
        *(const char **)field = value;
        return true;
    case FLAG_INT:
        if (!parse_ll(value, &v) || v < def->min || v > def->max)
            return false;
        *(long long *)field = v;
        return true;
    case FLAG_SIZE:
        if (!parse_ll(value, &v) || v < def->min || v > def->max)
            return false;
        *(size_t *)field = (size_t)v;
        return true;
    case FLAG_BOOL:
        return parse_bool(value, (bool *)field);
    case FLAG_APPLY:
        return def->apply(f, value);
    }
    return false;
}

void flags_usage(FILE *out) {
    fprintf(out, "Usage: osprey --model-repository=DIR [options]\n\n"
                 "Options (--flag=value or --flag value; [osprey] marks "
                 "flags Triton does not have):\n");
    for (size_t i = 0; i < N_FLAGS; i++) {
        const flag_def *def = &flag_table[i];
        char head[64];
        snprintf(head, sizeof head, "--%s%s%s%s", def->name,
                 def->value_optional ? "[=" : "=", def->arg,
                 def->value_optional ? "]" : "");
        fprintf(out, "  %-34s", head);
        if (strlen(head) > 34)
            fprintf(out, "\n  %-34s", "");
        for (const char *p = def->help; *p; p++) {
            fputc(*p, out);
            if (*p == '\n')
                fprintf(out, "  %-34s", "");
        }
        if (def->default_value)
            fprintf(out, " (default %s)", def->default_value);
        if (def->osprey_only)
            fputs(" [osprey]", out);
        fputc('\n', out);
    }
    fprintf(out, "  %-34s%s\n", "--help", "this text");
    fprintf(out, "  %-34s%s\n", "--help-markdown",
            "the flag reference of docs/flags.md [osprey]");
    fprintf(out, "\nAccepted for Triton, with a warning that each has no "
                 "effect:\n ");
    size_t column = 1;
    for (size_t i = 0; i < N_IGNORED; i++) {
        size_t len = strlen(ignored_flags[i].name) + 3;
        if (column + len > 78) {
            fprintf(out, "\n ");
            column = 1;
        }
        fprintf(out, " --%s", ignored_flags[i].name);
        column += len;
    }
    fputc('\n', out);
}

/* Writes s as one Markdown table cell: newlines become spaces, '|' is
 * escaped. */
static void markdown_cell(FILE *out, const char *s) {
    for (const char *p = s; *p; p++) {
        if (*p == '\n')
            fputc(' ', out);
        else if (*p == '|')
            fputs("\\|", out);
        else
            fputc(*p, out);
    }
}

void flags_markdown(FILE *out) {
    fputs("| flag | default | meaning |\n|---|---|---|\n", out);
    for (size_t i = 0; i < N_FLAGS; i++) {
        const flag_def *def = &flag_table[i];
        fprintf(out, "| `--%s%s%s%s` | ", def->name,
                def->value_optional ? "[=" : "=", def->arg,
                def->value_optional ? "]" : "");
        if (def->default_value && def->default_value[0]) {
            fputc('`', out);
            markdown_cell(out, def->default_value);
            fputc('`', out);
        }
        fputs(" | ", out);
        markdown_cell(out, def->help);
        if (def->osprey_only)
            fputs(" [osprey]", out);
        fputs(" |\n", out);
    }
    fputs("\nAccepted for Triton, each with one warning that it has no "
          "effect in Osprey:\n\n",
          out);
    for (size_t i = 0; i < N_IGNORED; i++) {
        fprintf(out, "- `--%s`", ignored_flags[i].name);
        if (ignored_flags[i].why)
            fprintf(out, ": %s", ignored_flags[i].why);
        fputc('\n', out);
    }
}

/* Logs the warning of each ignored flag argv named (seen[i] for
 * ignored_flags[i]), once. */
static void warn_ignored(const bool seen[N_IGNORED]) {
    for (size_t i = 0; i < N_IGNORED; i++) {
        if (!seen[i])
            continue;
        if (ignored_flags[i].why)
            OSP_LOG_WARN("--%s has no effect in Osprey: %s",
                         ignored_flags[i].name, ignored_flags[i].why);
        else
            OSP_LOG_WARN("--%s has no effect in Osprey", ignored_flags[i].name);
    }
}

int flags_parse(int argc, char **argv, osprey_flags *f) {
    memset(f, 0, sizeof *f);
    redis_cache_config_init(&f->redis_cache);
    osp_device_options_init(&f->devices);
    osp_tracer_options_init(&f->trace);
    for (size_t i = 0; i < N_FLAGS; i++)
        if (flag_table[i].default_value &&
            !apply_flag(f, &flag_table[i], flag_table[i].default_value)) {
            fprintf(stderr, "Error: bad default for --%s\n",
                    flag_table[i].name);
            return 2;
        }

    bool seen_ignored[N_IGNORED] = {false};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0) {
            flags_usage(stdout);
            return 0;
        }
        if (strcmp(arg, "--help-markdown") == 0) {
            flags_markdown(stdout);
            return 0;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "Error: unexpected argument '%s'\n", arg);
            flags_usage(stderr);
            return 2;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        const flag_def *def;
        const ignored_flag *ignored;
        size_t candidates =
            resolve_option(name, name_len, &def, &ignored, stderr);
        if (candidates > 1) {
            flags_usage(stderr);
            return 2;
        }
        if (ignored) {
            /* Triton gives every one of these a value. */
            if (!eq && ++i >= argc) {
                fprintf(stderr, "Error: option '--%s' needs a value\n",
                        ignored->name);
                return 2;
            }
            seen_ignored[ignored - ignored_flags] = true;
            continue;
        }
        if (!def) {
            fprintf(stderr, "Error: unknown option '--%.*s'\n", (int)name_len,
                    name);
            flags_usage(stderr);
            return 2;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value && def->value_optional) {
            value = "true";
        } else if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "Error: option '--%s' needs a value\n",
                        def->name);
                return 2;
            }
            value = argv[++i];
        }
        if (!apply_flag(f, def, value)) {
            if (def->secret)
                fprintf(stderr, "Error: invalid value for --%s\n", def->name);
            else
                fprintf(stderr, "Error: invalid value '%s' for --%s\n", value,
                        def->name);
            return 2;
        }
    }
    if (f->cache_config_given && f->cache_byte_size_given) {
        fprintf(stderr, "Error: Incompatible flags --response-cache-byte-size "
                        "and --cache-config both provided. Please provide one "
                        "or the other.\n");
        return 2;
    }
    if (f->cache_config_given && strcmp(f->cache_config_type, "redis") == 0 &&
        !redis_cache_config_finish(&f->redis_cache))
        return 2;
    warn_ignored(seen_ignored);
    return -1;
}

void flags_free(osprey_flags *f) {
    osp_log_close_file();
    redis_cache_config_destroy(&f->redis_cache);
    free(f->queue_store_password);
    f->queue_store_password = NULL;
    kserve_restrictions_free(f->restricted_apis);
    free(f->queue_services);
    f->queue_services = NULL;
    f->n_queue_services = 0;
    for (size_t i = 0; i < f->n_backend_settings; i++)
        free((char *)f->backend_settings[i].backend); /* the whole block */
    free(f->backend_settings);
    f->backend_settings = NULL;
    f->n_backend_settings = 0;
    kserve_restrictions_free(f->grpc_restricted);
    free(f->load_models);
    free(f->model_repositories);
    f->model_repositories = NULL;
    f->n_model_repositories = 0;
    f->load_models = NULL;
    f->n_load_models = 0;
}
