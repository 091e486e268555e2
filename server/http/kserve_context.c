/*
 * Accessors of the KServe surface's context (see kserve_context.h).
 */
#include "kserve_context.h"

osp_server *kserve_core(const http_request *req) {
    const kserve_context *ctx = http_request_surface_ctx(req);
    return ctx->server;
}

osp_tracer *kserve_tracer(const http_request *req) {
    const kserve_context *ctx = http_request_surface_ctx(req);
    return ctx->tracer;
}
