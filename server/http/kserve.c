#include "kserve.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "json_util.h"
#include "kserve_metadata.h"
#include "kserve_params.h"
#include "model_config_from_json.h"
#include "model_config_json.h"
#include "osprey/log.h"

/* ---- helpers ---- */

/* The request is decided at route time: only the reply is pending. These
 * handlers ignore the body (GET endpoints) or buffer it (POST ones). */
typedef struct simple_ctx {
    osp_error *(*complete)(http_request *req, struct simple_ctx *ctx);
    /* (optional) after asynchronous work: sets the reply */
    osp_error *(*resume)(http_request *req, struct simple_ctx *ctx);
    http_request *req;
    char *model;   /* owned; "" when the path has none */
    char *version; /* owned */
    char *repository;
    char *action;
    int64_t version_num;
    osp_error *result; /* of the asynchronous work */
    /* load: the body's "config" and "file:" parameters (all owned) */
    osp_load_override override;
    bool has_override;
} simple_ctx;

static void override_free(osp_load_override *ov) {
    free((char *)ov->config_pbtxt);
    for (size_t i = 0; i < ov->n_files; i++) {
        free((char *)ov->files[i].path);
        free((void *)ov->files[i].data);
    }
    free((osp_model_file *)ov->files);
}

static void simple_destroy(void *p) {
    simple_ctx *ctx = p;
    if (!ctx)
        return;
    override_free(&ctx->override);
    free(ctx->model);
    free(ctx->version);
    free(ctx->repository);
    free(ctx->action);
    osp_error_free(ctx->result);
    free(ctx);
}

static osp_error *simple_complete(http_request *req) {
    simple_ctx *ctx = http_request_handler_ctx(req);
    return ctx->complete(req, ctx);
}

static osp_error *simple_resume(http_request *req) {
    simple_ctx *ctx = http_request_handler_ctx(req);
    return ctx->resume(req, ctx);
}

static const http_handler simple_handler = {
    .on_body = NULL,
    .on_complete = simple_complete,
    .on_resume = simple_resume,
    .destroy = simple_destroy,
    .decode_body = false,
};

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Claims the request for `complete`, copying the path pieces. */
static void claim(http_request *req,
                  osp_error *(*complete)(http_request *, simple_ctx *),
                  const char *model, size_t model_len, const char *version,
                  size_t version_len) {
    simple_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx) {
        ctx->complete = complete;
        ctx->req = req;
        ctx->model = dup_n(model ? model : "", model ? model_len : 0);
        ctx->version = dup_n(version ? version : "", version ? version_len : 0);
    }
    if (!ctx || !ctx->model || !ctx->version) {
        simple_destroy(ctx);
        http_reply_error_status(req, 503, "out of memory");
        return;
    }
    http_request_set_handler(req, &simple_handler, ctx);
}

/* ---- health and server metadata ---- */

static osp_error *health_live(http_request *req, simple_ctx *ctx) {
    (void)ctx;
    bool live = osp_server_is_live(kserve_core(req));
    http_reply(req, live ? 200 : 400, NULL, NULL, 0);
    return NULL;
}

static osp_error *health_ready(http_request *req, simple_ctx *ctx) {
    (void)ctx;
    const kserve_context *surface = http_request_surface_ctx(req);
    bool ready = surface->strict_readiness
                     ? osp_server_is_ready(kserve_core(req))
                     : osp_server_is_live(kserve_core(req));
    http_reply(req, ready ? 200 : 400, NULL, NULL, 0);
    return NULL;
}

static osp_error *server_metadata(http_request *req, simple_ctx *ctx) {
    (void)ctx;
    bytebuf b;
    bytebuf_init(&b);
    const kserve_context *surface = http_request_surface_ctx(req);
    bytebuf_puts(&b, "{\"name\":");
    json_write_cstr(&b, surface->server_id ? surface->server_id : "triton");
    bytebuf_puts(&b, ",\"version\":");
    json_write_cstr(&b, kserve_server_version());
    bytebuf_puts(&b, ",\"extensions\":[");
    for (size_t i = 0; kserve_extensions[i]; i++) {
        if (i > 0)
            bytebuf_putc(&b, ',');
        json_write_cstr(&b, kserve_extensions[i]);
    }
    bytebuf_puts(&b, "]}");
    return kserve_reply_json(req, &b);
}

/* ---- models ---- */

/* A held reference to the model the URL names. */
static osp_error *get_model(http_request *req, simple_ctx *ctx,
                            osp_model **model) {
    osp_error *err = kserve_parse_version(ctx->version, &ctx->version_num);
    if (err)
        return err;
    return osp_server_model_get(kserve_core(req), ctx->model, ctx->version_num,
                                model);
}

/* As TRITONSERVER_ServerModelIsReady: a model the core cannot hand out is
 * its error (404 unknown model or version, 503 not at ready state); 400
 * "Model version not ready" is left for a model that is handed out but not
 * READY, which osp_server_model_get never does. */
static osp_error *model_ready(http_request *req, simple_ctx *ctx) {
    osp_model *model = NULL;
    osp_error *err = get_model(req, ctx, &model);
    if (err)
        return err;
    osp_model_unref(model);
    http_reply(req, 200, NULL, NULL, 0);
    return NULL;
}

static void write_io(bytebuf *b, const osp_model_io *io, size_t n,
                     bool batch_dim) {
    bytebuf_putc(b, '[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            bytebuf_putc(b, ',');
        bytebuf_puts(b, "{\"name\":");
        json_write_cstr(b, io[i].name);
        bytebuf_puts(b, ",\"datatype\":");
        json_write_cstr(b, osp_datatype_wire_name(io[i].dtype));
        bytebuf_puts(b, ",\"shape\":[");
        bool first = true;
        if (batch_dim) {
            bytebuf_puts(b, "-1");
            first = false;
        }
        for (int d = 0; d < io[i].dims.rank; d++) {
            if (!first)
                bytebuf_putc(b, ',');
            first = false;
            json_write_int(b, io[i].dims.dims[d]);
        }
        bytebuf_puts(b, "]}");
    }
    bytebuf_putc(b, ']');
}

static osp_error *model_metadata(http_request *req, simple_ctx *ctx) {
    osp_model *model = NULL;
    osp_error *err = get_model(req, ctx, &model);
    if (err)
        return err;
    const osp_model_config *cfg = osp_model_get_config(model);
    int64_t *versions = NULL;
    size_t n_versions = 0;
    if (ctx->version_num < 0) {
        err = osp_model_ready_versions(kserve_core(req), ctx->model, &versions,
                                       &n_versions);
        if (err)
            goto out;
    }
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_puts(&b, "{\"name\":");
    json_write_cstr(&b, ctx->model);
    bytebuf_puts(&b, ",\"versions\":[");
    if (ctx->version_num >= 0) {
        bytebuf_printf(&b, "\"%lld\"", (long long)ctx->version_num);
    } else {
        for (size_t i = 0; i < n_versions; i++)
            bytebuf_printf(&b, "%s\"%lld\"", i ? "," : "",
                           (long long)versions[i]);
    }
    bytebuf_puts(&b, "],\"platform\":");
    json_write_cstr(&b, cfg->platform[0] ? cfg->platform : cfg->backend);
    bytebuf_puts(&b, ",\"inputs\":");
    write_io(&b, cfg->inputs, cfg->n_inputs, cfg->max_batch_size > 0);
    bytebuf_puts(&b, ",\"outputs\":");
    write_io(&b, cfg->outputs, cfg->n_outputs, cfg->max_batch_size > 0);
    bytebuf_putc(&b, '}');
    err = kserve_reply_json(req, &b);
out:
    free(versions);
    osp_model_unref(model);
    return err;
}

static osp_error *model_config(http_request *req, simple_ctx *ctx) {
    osp_model *model = NULL;
    osp_error *err = get_model(req, ctx, &model);
    if (err)
        return err;
    bytebuf b;
    bytebuf_init(&b);
    model_config_to_json(osp_model_get_config(model), &b);
    err = kserve_reply_json(req, &b);
    osp_model_unref(model);
    return err;
}

/* GET /v2/models/stats (ctx->model "") and .../{m}[/versions/{v}]/stats. */
static osp_error *model_stats(http_request *req, simple_ctx *ctx) {
    return kserve_stats_reply(req, ctx->model, ctx->version);
}

/* ---- repository ---- */

/* The buffered JSON body, or NULL when empty (allowed everywhere here). */
static osp_error *body_json(http_request *req, struct json_object **out) {
    size_t len;
    const char *body = http_request_body(req, &len);
    *out = NULL;
    if (!body || len == 0)
        return NULL;
    return json_parse_body(body, len, out);
}

static osp_error *repository_index(http_request *req, simple_ctx *ctx) {
    (void)ctx;
    struct json_object *root = NULL;
    bool ready_only = false;
    osp_repository_entry *entries = NULL;
    size_t n = 0;
    osp_error *err = body_json(req, &root);
    if (err)
        goto out;
    struct json_object *ready;
    if (json_find(root, "ready", &ready)) {
        /* null included: TritonJson's Find succeeds, IsBool fails */
        if (!json_object_is_type(ready, json_type_boolean)) {
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "Invalid value for 'ready': expected a "
                                "boolean");
            goto out;
        }
        ready_only = json_object_get_boolean(ready);
    }
    err =
        osp_server_repository_index(kserve_core(req), ready_only, &entries, &n);
    if (err)
        goto out;
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_putc(&b, '[');
    for (size_t i = 0; i < n; i++) {
        const osp_repository_entry *e = &entries[i];
        bytebuf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        json_write_cstr(&b, e->name);
        if (e->version >= 0)
            bytebuf_printf(&b, ",\"version\":\"%lld\"", (long long)e->version);
        const char *state = osp_model_state_name(e->state);
        if (state && state[0]) {
            bytebuf_puts(&b, ",\"state\":");
            json_write_cstr(&b, state);
        }
        if (e->reason && e->reason[0]) {
            bytebuf_puts(&b, ",\"reason\":");
            json_write_cstr(&b, e->reason);
        }
        bytebuf_putc(&b, '}');
    }
    bytebuf_putc(&b, ']');
    err = kserve_reply_json(req, &b);
out:
    osp_repository_index_free(entries, n);
    json_free(root);
    return err;
}

/* Load and unload block until done, so they run on their own thread while
 * the connection is suspended, keeping the MHD threads serving. The
 * request (and ctx) stay alive until http_request_resume. */
static void *control_thread(void *p) {
    simple_ctx *ctx = p;
    osp_server *core = kserve_core(ctx->req);
    ctx->result =
        strcmp(ctx->action, "load") != 0
            ? osp_server_unload_model(core, ctx->model)
        : ctx->has_override
            ? osp_server_load_model_override(core, ctx->model, &ctx->override)
            : osp_server_load_model(core, ctx->model);
    http_request_resume(ctx->req);
    return NULL;
}

static osp_error *control_done(http_request *req, simple_ctx *ctx) {
    osp_error *err = ctx->result;
    ctx->result = NULL;
    if (err)
        return err;
    http_reply(req, 200, "application/json", NULL, 0);
    return NULL;
}

/* Takes one load parameter into ctx->override: "config" (ModelConfig JSON,
 * rewritten as protobuf text) or "file:<path>" (base64 file contents).
 * Others are ignored, as Triton does. */
static osp_error *take_load_parameter(simple_ctx *ctx, const char *key,
                                      const char *value, size_t len) {
    osp_load_override *ov = &ctx->override;
    if (strcmp(key, "config") == 0) {
        char *pbtxt = NULL;
        osp_error *err = model_config_json_to_pbtxt(value, len, &pbtxt);
        if (err)
            return osp_load_override_error(ctx->model, err);
        free((char *)ov->config_pbtxt);
        ov->config_pbtxt = pbtxt;
        ctx->has_override = true;
        return NULL;
    }
    if (strncmp(key, "file:", 5) != 0)
        return NULL;
    unsigned char *data = NULL;
    size_t size = 0;
    if (!base64_decode(value, len, &data, &size))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "load parameter '%s' is not base64", key);
    osp_model_file *files =
        realloc((void *)ov->files, (ov->n_files + 1) * sizeof(*files));
    char *path = strdup(key + 5);
    if (!files || !path) {
        free(data);
        free(path);
        if (files)
            ov->files = files;
        return osp_error_out_of_memory();
    }
    files[ov->n_files++] = (osp_model_file){path, data, size};
    ov->files = files;
    ctx->has_override = true;
    return NULL;
}

/* Reads the optional body the way Triton does before acting: load takes
 * its override parameters, unload checks 'unload_dependents'. */
static osp_error *control_read_body(http_request *req, simple_ctx *ctx,
                                    bool load) {
    struct json_object *root = NULL;
    osp_error *err = body_json(req, &root);
    if (err || !root)
        return err;
    struct json_object *params = json_member(root, "parameters");
    if (params && json_object_is_type(params, json_type_object)) {
        json_object_object_foreach(params, key, value) {
            if (load) {
                const char *s;
                size_t len;
                err = json_as_string(value, &s, &len);
                if (!err)
                    err = take_load_parameter(ctx, key, s, len);
                if (err)
                    break;
            } else if (strcmp(key, "unload_dependents") == 0) {
                bool b;
                err = json_as_bool(value, &b);
                if (err) {
                    err = osp_error_wrap(err,
                                         "Unable to parse 'unload_dependents'");
                    break;
                }
            }
        }
    }
    json_free(root);
    return err;
}

static osp_error *repository_control(http_request *req, simple_ctx *ctx) {
    if (ctx->repository[0])
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "'repository_name' specification is not "
                             "supported");
    osp_error *err =
        control_read_body(req, ctx, strcmp(ctx->action, "load") == 0);
    if (err)
        return err;
    ctx->resume = control_done;
    http_request_begin_async(req);
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&tid, &attr, control_thread, ctx);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        http_request_resume(req);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "failed to start the model control thread");
    }
    return NULL;
}

/* ---- routing ---- */

/* What a route's pattern captured from the path: pointers into it, NULL
 * (length 0) for a piece the pattern does not have. `action` is the
 * pattern's last segment when that is a choice ("(load|unload)"): the
 * path's own NUL-terminated tail. */
typedef struct route_match {
    const char *model, *version, *region, *repo, *action;
    size_t model_len, version_len, region_len, repo_len;
} route_match;

/* One KServe HTTP endpoint, as grpc_server.c's methods[] for gRPC.
 * `pattern` is matched segment by segment: a literal, {model}, {region}
 * or {repo} (one non-empty segment), {version} (digits), or a choice
 * (a|b) of literals. `methods` (bits of 1 << http_method) is checked
 * after the API group, as Triton does: a request with another method
 * gets 405; 0 when the handler answers every method itself. */
typedef struct kserve_http_route {
    const char *pattern;
    unsigned methods;
    kserve_api api;
    void (*handle)(http_request *req, const route_match *m);
} kserve_http_route;

#define GET (1u << HTTP_METHOD_GET)
#define POST (1u << HTTP_METHOD_POST)

static void claim_match(http_request *req,
                        osp_error *(*complete)(http_request *, simple_ctx *),
                        const route_match *m) {
    claim(req, complete, m->model, m->model_len, m->version, m->version_len);
}

static void on_server_metadata(http_request *req, const route_match *m) {
    claim_match(req, server_metadata, m);
}
static void on_health_live(http_request *req, const route_match *m) {
    claim_match(req, health_live, m);
}
static void on_health_ready(http_request *req, const route_match *m) {
    claim_match(req, health_ready, m);
}
static void on_model_metadata(http_request *req, const route_match *m) {
    claim_match(req, model_metadata, m);
}
static void on_model_ready(http_request *req, const route_match *m) {
    claim_match(req, model_ready, m);
}
static void on_model_config(http_request *req, const route_match *m) {
    claim_match(req, model_config, m);
}
static void on_model_stats(http_request *req, const route_match *m) {
    claim_match(req, model_stats, m);
}
static void on_logging(http_request *req, const route_match *m) {
    (void)m;
    kserve_logging_route(req);
}
static void on_trace(http_request *req, const route_match *m) {
    kserve_trace_route(req, m->model, m->model_len);
}
static void on_system_shm(http_request *req, const route_match *m) {
    kserve_shm_route(req, true, m->region, m->region_len, m->action);
}
static void on_cuda_shm(http_request *req, const route_match *m) {
    kserve_shm_route(req, false, m->region, m->region_len, m->action);
}
static void on_repository_index(http_request *req, const route_match *m) {
    (void)m; /* the index ignores a repository name, as Triton */
    claim(req, repository_index, NULL, 0, NULL, 0);
}
static void on_repository_control(http_request *req, const route_match *m) {
    claim(req, repository_control, m->model, m->model_len, NULL, 0);
    simple_ctx *ctx = http_request_handler_ctx(req);
    if (ctx) {
        ctx->repository = dup_n(m->repo ? m->repo : "", m->repo_len);
        ctx->action = strdup(m->action);
        if (!ctx->repository || !ctx->action)
            http_reply_error_status(req, 503, "out of memory");
    }
}

/* Inference and generate take the model and version as strings. */
static void infer_like(http_request *req, const route_match *m, bool generate,
                       bool stream) {
    char *name = dup_n(m->model, m->model_len);
    char *version = dup_n(m->version ? m->version : "", m->version_len);
    if (!name || !version)
        http_reply_error_status(req, 503, "out of memory");
    else if (generate)
        kserve_generate_route(req, name, version, stream);
    else
        kserve_infer_route(req, name, version);
    free(name);
    free(version);
}
static void on_infer(http_request *req, const route_match *m) {
    infer_like(req, m, false, false);
}
static void on_generate(http_request *req, const route_match *m) {
    infer_like(req, m, true, false);
}
static void on_generate_stream(http_request *req, const route_match *m) {
    infer_like(req, m, true, true);
}

#define MODEL "/v2/models/{model}"
#define VERSION "/v2/models/{model}/versions/{version}"
#define SHM_ACTION "(status|register|unregister)"

/* In Triton's order: "/v2/models/stats" is checked before the model
 * endpoints (a model named "stats" has no metadata endpoint). Trace
 * settings are per model, not per version: no versioned route. */
static const kserve_http_route routes[] = {
    {"/v2/models/stats", GET, KSERVE_API_STATISTICS, on_model_stats},
    {"/v2/logging", 0, KSERVE_API_LOGGING, on_logging},
    {MODEL, GET, KSERVE_API_METADATA, on_model_metadata},
    {VERSION, GET, KSERVE_API_METADATA, on_model_metadata},
    {MODEL "/ready", GET, KSERVE_API_HEALTH, on_model_ready},
    {VERSION "/ready", GET, KSERVE_API_HEALTH, on_model_ready},
    {MODEL "/config", GET, KSERVE_API_MODEL_CONFIG, on_model_config},
    {VERSION "/config", GET, KSERVE_API_MODEL_CONFIG, on_model_config},
    {MODEL "/infer", 0, KSERVE_API_INFERENCE, on_infer},
    {VERSION "/infer", 0, KSERVE_API_INFERENCE, on_infer},
    {MODEL "/generate", 0, KSERVE_API_INFERENCE, on_generate},
    {VERSION "/generate", 0, KSERVE_API_INFERENCE, on_generate},
    {MODEL "/generate_stream", 0, KSERVE_API_INFERENCE, on_generate_stream},
    {VERSION "/generate_stream", 0, KSERVE_API_INFERENCE, on_generate_stream},
    {MODEL "/trace/setting", 0, KSERVE_API_TRACE, on_trace},
    {MODEL "/stats", GET, KSERVE_API_STATISTICS, on_model_stats},
    {VERSION "/stats", GET, KSERVE_API_STATISTICS, on_model_stats},
    {"/v2", GET, KSERVE_API_METADATA, on_server_metadata},
    {"/v2/health/live", GET, KSERVE_API_HEALTH, on_health_live},
    {"/v2/health/ready", GET, KSERVE_API_HEALTH, on_health_ready},
    {"/v2/systemsharedmemory/" SHM_ACTION, 0, KSERVE_API_SHARED_MEMORY,
     on_system_shm},
    {"/v2/systemsharedmemory/region/{region}/" SHM_ACTION, 0,
     KSERVE_API_SHARED_MEMORY, on_system_shm},
    {"/v2/cudasharedmemory/" SHM_ACTION, 0, KSERVE_API_SHARED_MEMORY,
     on_cuda_shm},
    {"/v2/cudasharedmemory/region/{region}/" SHM_ACTION, 0,
     KSERVE_API_SHARED_MEMORY, on_cuda_shm},
    {"/v2/repository/index", POST, KSERVE_API_MODEL_REPOSITORY,
     on_repository_index},
    {"/v2/repository/models/{model}/(load|unload)", POST,
     KSERVE_API_MODEL_REPOSITORY, on_repository_control},
    {"/v2/repository/{repo}/index", POST, KSERVE_API_MODEL_REPOSITORY,
     on_repository_index},
    {"/v2/repository/{repo}/models/{model}/(load|unload)", POST,
     KSERVE_API_MODEL_REPOSITORY, on_repository_control},
    {"/v2/trace/setting", 0, KSERVE_API_TRACE, on_trace},
};

#undef MODEL
#undef VERSION
#undef SHM_ACTION
#undef GET
#undef POST

/* Whether the path segment seg[0..n) is one of the choice's literals,
 * choice[0..choice_len) being "(a|b|...)". */
static bool choice_has(const char *choice, size_t choice_len, const char *seg,
                       size_t n) {
    const char *c = choice + 1, *end = choice + choice_len - 1;
    while (c < end) {
        const char *bar = memchr(c, '|', (size_t)(end - c));
        size_t len = (size_t)((bar ? bar : end) - c);
        if (len == n && memcmp(c, seg, n) == 0)
            return true;
        c += len + 1;
    }
    return false;
}

/* Matches `path` against `pattern` (see kserve_http_route), filling *m. */
static bool route_matches(const char *pattern, const char *path,
                          route_match *m) {
    memset(m, 0, sizeof *m);
    const char *p = pattern, *s = path;
    while (*p && *s) {
        if (*p++ != '/' || *s++ != '/')
            return false;
        size_t plen = strcspn(p, "/"), n = strcspn(s, "/");
        if (*p == '{') {
            if (n == 0)
                return false;
            if (strncmp(p, "{version}", plen) == 0) {
                if (strspn(s, "0123456789") < n)
                    return false;
                m->version = s, m->version_len = n;
            } else if (strncmp(p, "{model}", plen) == 0) {
                m->model = s, m->model_len = n;
            } else if (strncmp(p, "{region}", plen) == 0) {
                m->region = s, m->region_len = n;
            } else {
                m->repo = s, m->repo_len = n;
            }
        } else if (*p == '(') {
            if (!choice_has(p, plen, s, n))
                return false;
            m->action = s;
        } else if (plen != n || memcmp(p, s, n) != 0) {
            return false;
        }
        p += plen;
        s += n;
    }
    return *p == '\0' && *s == '\0';
}

bool kserve_route(http_request *req, void *surface_ctx) {
    (void)surface_ctx;
    const char *path = http_request_path(req);
    OSP_LOG_VERBOSE("HTTP request: %s %s", http_request_method_name(req), path);
    if (strncmp(path, "/v2", 3) != 0)
        return false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const kserve_http_route *r = &routes[i];
        route_match m;
        if (!route_matches(r->pattern, path, &m))
            continue;
        if (!kserve_api_allowed(req, r->api))
            return true;
        if (r->methods && !(r->methods & (1u << http_request_method(req)))) {
            http_reply_error_status(req, 405, "Method Not Allowed");
            return true;
        }
        r->handle(req, &m);
        return true;
    }
    return false;
}
