/*
 * The KServe v2 HTTP surface (/v2/...) with Triton's extensions: health,
 * server and model metadata, model config, repository index and control,
 * and inference (kserve_infer.c). Routing follows Triton's dispatch order
 * and regular expressions exactly (§1 of the protocol reference). The
 * protocol logic without HTTP (request decoder, response encoder, setting
 * rules, parameter parsers) is in server/kserve/.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_server.h"
#include "kserve_header_forward.h"
#include "kserve_restrict.h"
#include "osprey/error.h"
#include "osprey/server.h"
#include "osprey/trace.h"

struct bytebuf;
/* server/kserve/kserve_shm.h */
typedef struct kserve_shm_registry kserve_shm_registry;

/* ---- shared by the handlers (kserve_surface.c) ---- */

/* The surface's context: main.c builds one and lists it as the surface_ctx
 * of the "kserve" http_surface, so handlers reach the core and the tracer
 * through the request, not through transport globals. */
typedef struct kserve_context {
    osp_server *server; /* borrowed for the HTTP server's lifetime */
    osp_tracer *tracer; /* borrowed likewise; may be NULL */
    /* borrowed likewise; NULL: nothing is restricted */
    const kserve_restriction *restricted;
    const char *server_id; /* "name" of GET /v2; NULL: "triton" */
    /* GET /v2/health/ready: true, every model must be ready (Triton's
     * default); false, ready whenever live. */
    bool strict_readiness;
    /* System and CUDA shared memory regions (borrowed likewise; owned by
     * main.c, freed after the HTTP server), whether clients may register
     * and unregister them (--allow-client-shm), and whether a GPU here can
     * open CUDA IPC handles (else /v2/cudasharedmemory answers as a Triton
     * without GPUs). */
    kserve_shm_registry *shm;
    bool allow_client_shm;
    bool cuda_shm;
    /* --http-header-forward-pattern (borrowed likewise; NULL: none) */
    const kserve_header_forward *forward_headers;
} kserve_context;

/* Gives ctx a shared memory registry (ctx->shm) and sets
 * ctx->allow_client_shm and ctx->cuda_shm; after the devices are up (the
 * core is started). Pair with kserve_context_destroy_shm once the
 * HTTP server is stopped and freed. */
osp_error *kserve_context_init_shm(kserve_context *ctx, bool allow_client_shm);
void kserve_context_destroy_shm(kserve_context *ctx);

/* Whether the request may use API group `api`; when not, it has been
 * answered with Triton's 403 "This API is restricted, expecting header
 * '<header>'". */
bool kserve_api_allowed(http_request *req, kserve_api api);

/* The core, the tracer (NULL when none) and the shared memory registry
 * (NULL when none) of the request's surface. */
osp_server *kserve_core(const http_request *req);
osp_tracer *kserve_tracer(const http_request *req);
kserve_shm_registry *kserve_shm(const http_request *req);
/* Adds the request's headers that --http-header-forward-pattern matches to
 * `request` as string parameters, as Triton's KServe infer does. */
osp_error *kserve_forward_headers(const http_request *req,
                                  osp_infer_request *request);

/* Triton's HTTP status of an error code: UNKNOWN 400, INTERNAL 500,
 * NOT_FOUND 404, INVALID_ARG 400, UNAVAILABLE 503, UNSUPPORTED 501,
 * ALREADY_EXISTS 400, CANCELLED 400. */
unsigned kserve_error_status(osp_error_code code);
/* The surface's reply_error: {"error":"<message>"} with that status; err
 * is borrowed. */
void kserve_reply_error(http_request *req, osp_error *err);

/* Replies 200 with the JSON in b (taken over), or returns UNAVAILABLE
 * "out of memory" for the caller's error reply. */
osp_error *kserve_reply_json(http_request *req, struct bytebuf *b);

/* ---- routes ---- */

/* The surface to list in http_server_options, with a kserve_context as
 * its surface_ctx and kserve_reply_error as its reply_error. */
bool kserve_route(http_request *req, void *surface_ctx);

/* Starts POST .../infer for model `name` (borrowed) and version string
 * `version` ("" when absent). Claims the request. */
void kserve_infer_route(http_request *req, const char *name,
                        const char *version);

/* Starts POST .../generate (streaming false) or .../generate_stream
 * (streaming true) for model `name` and version string `version` (both
 * borrowed; version "" when absent), in kserve_generate.c. Claims the
 * request. */
void kserve_generate_route(http_request *req, const char *name,
                           const char *version, bool streaming);

/* GET/POST /v2/trace/setting (model NULL) and
 * /v2/models/{model}/trace/setting (kserve_trace.c). `model` (model_len
 * bytes) is borrowed. Claims the request. */
void kserve_trace_route(http_request *req, const char *model, size_t model_len);

/* /v2/systemsharedmemory[/region/{r}]/{status,register,unregister} and the
 * /v2/cudasharedmemory ones (kserve_shm_http.c): `system` picks which,
 * `region` (region_len bytes, borrowed; NULL when the path has none) and
 * `action` (borrowed) are from the path. Claims the request. */
void kserve_shm_route(http_request *req, bool system, const char *region,
                      size_t region_len, const char *action);

/* GET/POST /v2/logging (kserve_logging.c). Claims the request. */
void kserve_logging_route(http_request *req);

/* Replies to a statistics request for `model` ("" = every model) and
 * `version` ("" = every ready version) with Triton's JSON, or returns the
 * error (kserve_stats.c). Both strings borrowed. */
osp_error *kserve_stats_reply(http_request *req, const char *model,
                              const char *version);
