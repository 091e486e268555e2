/*
 * Triton's shared memory extensions over HTTP:
 * /v2/systemsharedmemory[/region/{r}]/{status,register,unregister} and
 * /v2/cudasharedmemory/... on the registry in server/kserve/kserve_shm.c.
 * CUDA regions are CUDA IPC handles opened on a GPU; where no GPU can open
 * them, /v2/cudasharedmemory answers as a Triton built without GPU
 * support: status lists no regions, register fails with "GPUs not
 * supported", unregister finds nothing to remove.
 *
 * As in Triton, status is always open; register and unregister need
 * --allow-client-shm (else 501 "Client shared memory is disabled. ...").
 */
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "json_util.h"
#include "kserve.h"
#include "kserve_shm.h"
#include "osprey/device.h"

typedef struct shm_ctx {
    bool system;
    char *region; /* owned; "" when the path has none */
    char *action; /* owned */
} shm_ctx;

static void shm_ctx_free(void *p) {
    shm_ctx *ctx = p;
    if (!ctx)
        return;
    free(ctx->region);
    free(ctx->action);
    free(ctx);
}

static osp_error *disabled_error(void) {
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "Client shared memory is disabled. Start the server "
                         "with '--allow-client-shm=true' to enable.");
}

/* POST .../region/{r}/register: {"key": str, "offset"?: uint,
 * "byte_size": uint}, checked in Triton's order. */
static osp_error *system_register(http_request *req, kserve_shm_registry *reg,
                                  const char *region) {
    size_t len;
    const char *body = http_request_body(req, &len);
    struct json_object *root = NULL;
    osp_error *err = NULL;
    if (body && len > 0 && (err = json_parse_body(body, len, &root)))
        return err;
    struct json_object *v;
    const char *key = NULL;
    uint64_t offset = 0, byte_size = 0;
    if (!json_find(root, "key", &v)) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Shared memory register request has no 'key' "
                            "field");
        goto out;
    }
    if ((err = json_as_string(v, &key, NULL)))
        goto out;
    if (json_find(root, "offset", &v) && (err = json_as_uint(v, &offset)))
        goto out;
    if (!json_find(root, "byte_size", &v)) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Shared memory register request has no "
                            "'byte_size' field");
        goto out;
    }
    if ((err = json_as_uint(v, &byte_size)))
        goto out;
    err = kserve_shm_register(reg, region, key, offset, byte_size);
out:
    json_free(root);
    return err;
}

/* The longest raw_handle.b64 read: a cudaIpcMemHandle_t is 64 bytes, 88
 * characters of base64; anything much longer is not one. */
#define MAX_RAW_HANDLE_B64 1024

/* POST .../region/{r}/register: {"raw_handle": {"b64": str}, "byte_size":
 * uint, "device_id": uint}, checked in Triton's order. */
static osp_error *cuda_register(http_request *req, kserve_shm_registry *reg,
                                const char *region) {
    size_t len;
    const char *body = http_request_body(req, &len);
    struct json_object *root = NULL;
    osp_error *err = NULL;
    if (body && len > 0 && (err = json_parse_body(body, len, &root)))
        return err;
    struct json_object *raw;
    const char *b64 = NULL;
    size_t b64_len = 0;
    uint64_t byte_size = 0, device_id = 0;
    unsigned char *handle = NULL;
    size_t handle_len = 0;
    if (!json_find(root, "raw_handle", &raw)) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Shared memory register request has no "
                            "'raw_handle' field");
        goto out;
    }
    struct json_object *v;
    if ((err = json_member_string(raw, "b64", &b64, &b64_len)) ||
        (err = json_member_required(root, "byte_size", &v)) ||
        (err = json_as_uint(v, &byte_size)) ||
        (err = json_member_required(root, "device_id", &v)) ||
        (err = json_as_uint(v, &device_id)))
        goto out;
    if (b64_len > MAX_RAW_HANDLE_B64 ||
        !base64_decode(b64, b64_len, &handle, &handle_len) ||
        handle_len != OSP_DEVICE_IPC_HANDLE_BYTES) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "'raw_handle' must be a valid base64 encoded "
                            "cudaIpcMemHandle_t");
        goto out;
    }
    err = kserve_shm_register_cuda(reg, region, handle, handle_len, device_id,
                                   byte_size);
out:
    free(handle);
    json_free(root);
    return err;
}

/* status, register or unregister of either kind. Status is always open;
 * register and unregister need --allow-client-shm. Without a GPU that
 * opens IPC handles, CUDA regions cannot be registered: "GPUs not
 * supported", as a Triton built without GPU support says. */
static osp_error *shm_action(http_request *req, shm_ctx *ctx) {
    const kserve_context *surface = http_request_surface_ctx(req);
    kserve_shm_registry *reg = surface->shm;
    kserve_shm_kind kind = ctx->system ? KSERVE_SHM_SYSTEM : KSERVE_SHM_CUDA;
    osp_error *err;
    if (strcmp(ctx->action, "status") == 0) {
        bytebuf b;
        bytebuf_init(&b);
        if (!reg && ctx->region[0])
            return osp_error_new(OSP_ERROR_NOT_FOUND,
                                 "Unable to find %s shared memory region: "
                                 "'%s'",
                                 ctx->system ? "system" : "cuda", ctx->region);
        if (!reg)
            bytebuf_puts(&b, "[]");
        else if ((err = kserve_shm_status(reg, kind, ctx->region, &b))) {
            bytebuf_free(&b);
            return err;
        }
        return kserve_reply_json(req, &b);
    }
    if (!surface->allow_client_shm || !reg)
        return disabled_error();
    if (strcmp(ctx->action, "register") == 0) {
        if (!ctx->region[0])
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "'region name' is necessary to register %s "
                                 "shared memory region",
                                 ctx->system ? "system" : "cuda");
        if (ctx->system)
            err = system_register(req, reg, ctx->region);
        else if (surface->cuda_shm)
            err = cuda_register(req, reg, ctx->region);
        else
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "failed to register CUDA shared memory "
                                "region: '%s', GPUs not supported",
                                ctx->region);
    } else if (ctx->region[0]) {
        err = kserve_shm_unregister(reg, kind, ctx->region);
    } else {
        err = kserve_shm_unregister_all(reg, kind);
    }
    if (err)
        return err;
    http_reply(req, 200, "application/json", NULL, 0);
    return NULL;
}

static osp_error *shm_on_complete(http_request *req) {
    return shm_action(req, http_request_handler_ctx(req));
}

static const http_handler shm_handler = {
    .on_body = NULL, /* register bodies are buffered (bounded) */
    .on_complete = shm_on_complete,
    .destroy = shm_ctx_free,
    .decode_body = false,
};

void kserve_shm_route(http_request *req, bool system, const char *region,
                      size_t region_len, const char *action) {
    http_method want =
        strcmp(action, "status") == 0 ? HTTP_METHOD_GET : HTTP_METHOD_POST;
    if (http_request_method(req) != want) {
        http_reply_error_status(req, 405, "Method Not Allowed");
        return;
    }
    shm_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx) {
        ctx->system = system;
        ctx->region = strndup(region ? region : "", region ? region_len : 0);
        ctx->action = strdup(action);
    }
    if (!ctx || !ctx->region || !ctx->action) {
        shm_ctx_free(ctx);
        http_reply_error_status(req, 503, "out of memory");
        return;
    }
    http_request_set_handler(req, &shm_handler, ctx);
}
