/*
 * What every KServe v2 HTTP handler shares (kserve.c, kserve_infer.c,
 * kserve_stats.c, kserve_trace.c, kserve_logging.c): the surface's
 * context, Triton's error rendering and JSON replies. Protocol logic that
 * other transports need as well lives in server/kserve/ instead.
 */
#include "kserve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "kserve_shm.h"

osp_server *kserve_core(const http_request *req) {
    const kserve_context *ctx = http_request_surface_ctx(req);
    return ctx->server;
}

/* The context that header_forward_one passes along. */
typedef struct forward_ctx {
    const kserve_header_forward *forward;
    osp_infer_request *request;
    osp_error *err;
} forward_ctx;

static bool header_forward_one(void *p, const char *name, const char *value) {
    forward_ctx *c = p;
    c->err = kserve_header_forward_apply(c->forward, c->request, name,
                                         strlen(name), value, strlen(value));
    return !c->err;
}

osp_error *kserve_forward_headers(const http_request *req,
                                  osp_infer_request *request) {
    const kserve_context *ctx = http_request_surface_ctx(req);
    forward_ctx c = {.forward = ctx->forward_headers, .request = request};
    if (c.forward)
        http_request_header_foreach(req, header_forward_one, &c);
    return c.err;
}

osp_tracer *kserve_tracer(const http_request *req) {
    const kserve_context *ctx = http_request_surface_ctx(req);
    return ctx->tracer;
}

kserve_shm_registry *kserve_shm(const http_request *req) {
    const kserve_context *ctx = http_request_surface_ctx(req);
    return ctx->shm;
}

/* Triton's HTTP status per error code (HttpCodeFromError), indexed by
 * osp_error_code. */
static const unsigned status_of_code[] = {
    [OSP_ERROR_UNKNOWN] = 400,        [OSP_ERROR_INTERNAL] = 500,
    [OSP_ERROR_NOT_FOUND] = 404,      [OSP_ERROR_INVALID_ARG] = 400,
    [OSP_ERROR_UNAVAILABLE] = 503,    [OSP_ERROR_UNSUPPORTED] = 501,
    [OSP_ERROR_ALREADY_EXISTS] = 400, [OSP_ERROR_CANCELLED] = 400,
};

unsigned kserve_error_status(osp_error_code code) {
    if ((unsigned)code >= sizeof status_of_code / sizeof status_of_code[0])
        return 500;
    return status_of_code[code];
}

void kserve_reply_error(http_request *req, osp_error *err) {
    http_reply_error_status(req, kserve_error_status(osp_error_get_code(err)),
                            osp_error_message(err));
}

osp_error *kserve_reply_json(http_request *req, bytebuf *b) {
    size_t len;
    char *body = bytebuf_take(b, &len);
    if (!body)
        return osp_error_out_of_memory();
    http_reply(req, 200, "application/json", body, len);
    return NULL;
}

/* ---- restricted APIs (the table is server/kserve/kserve_restrict.c) ---- */

bool kserve_api_allowed(http_request *req, kserve_api api) {
    const kserve_context *ctx = http_request_surface_ctx(req);
    const kserve_restriction *r =
        ctx && ctx->restricted ? &ctx->restricted[api] : NULL;
    if (!r || !r->header)
        return true;
    const char *got = http_request_header(req, r->header);
    if (got && strcmp(got, r->value) == 0)
        return true;
    char message[512];
    snprintf(message, sizeof message,
             "This API is restricted, expecting header '%s'", r->header);
    http_reply_error_status(req, 403, message);
    return false;
}

osp_error *kserve_context_init_shm(kserve_context *ctx, bool allow_client_shm) {
    ctx->allow_client_shm = allow_client_shm;
    ctx->cuda_shm = kserve_shm_cuda_supported();
    return kserve_shm_registry_new(&ctx->shm);
}

void kserve_context_destroy_shm(kserve_context *ctx) {
    kserve_shm_registry_free(ctx->shm);
    ctx->shm = NULL;
}
