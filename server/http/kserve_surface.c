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

osp_error *kserve_reply_json(http_request *req, jbuf *b) {
    size_t len;
    char *body = jbuf_take(b, &len);
    if (!body)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of memory");
    http_reply(req, 200, "application/json", body, len);
    return NULL;
}

/* ---- restricted APIs ---- */

static const char *const api_names[KSERVE_API_COUNT] = {
    [KSERVE_API_HEALTH] = "health",
    [KSERVE_API_METADATA] = "metadata",
    [KSERVE_API_INFERENCE] = "inference",
    [KSERVE_API_SHARED_MEMORY] = "shared-memory",
    [KSERVE_API_MODEL_CONFIG] = "model-config",
    [KSERVE_API_MODEL_REPOSITORY] = "model-repository",
    [KSERVE_API_STATISTICS] = "statistics",
    [KSERVE_API_TRACE] = "trace",
    [KSERVE_API_LOGGING] = "logging",
};

osp_error *kserve_restriction_add(kserve_restriction table[KSERVE_API_COUNT],
                                  const char *arg) {
    /* Triton's ParseGenericConfigOption: "<apis>:<setting>=<value>". */
    const char *colon = strchr(arg, ':');
    const char *eq = colon ? strchr(colon + 1, '=') : NULL;
    if (!colon || !eq || colon == arg || eq == colon + 1 || !eq[1])
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "--http-restricted-api option format is "
                             "'<API_1,API_2>:<setting>=<value>'. Got %s",
                             arg);
    for (const char *p = arg; p < colon;) {
        const char *end = memchr(p, ',', (size_t)(colon - p));
        if (!end)
            end = colon;
        size_t n = (size_t)(end - p);
        int api = -1;
        for (int i = 0; i < KSERVE_API_COUNT; i++)
            if (strlen(api_names[i]) == n && strncmp(api_names[i], p, n) == 0)
                api = i;
        if (api < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unknown restricted api '%.*s'", (int)n, p);
        if (table[api].header)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "restricted api '%.*s' can not be specified "
                                 "in multiple config groups",
                                 (int)n, p);
        table[api].header = strndup(colon + 1, (size_t)(eq - colon - 1));
        table[api].value = strdup(eq + 1);
        if (!table[api].header || !table[api].value)
            return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of memory");
        p = end + 1;
    }
    return NULL;
}

void kserve_restrictions_free(kserve_restriction table[KSERVE_API_COUNT]) {
    for (int i = 0; i < KSERVE_API_COUNT; i++) {
        free(table[i].header);
        free(table[i].value);
        table[i].header = table[i].value = NULL;
    }
}

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
