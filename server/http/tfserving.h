/*
 * TensorFlow Serving's REST API (/v1/models/...) as a surface of the HTTP
 * transport, on the same port and models as KServe v2 (../shared protocol
 * reference; docs/tfserving.md for users). tfserving.c routes with TF
 * Serving's regular expressions and dispatch order, answers status and
 * metadata and renders errors; tfserving_infer.c runs predict, classify and
 * regress through the core. The JSON is server/tfserving's.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "http_server.h"
#include "osprey/server.h"
#include "osprey/trace.h"

/* The surface's context; main.c builds one and lists it as the
 * surface_ctx of the "tfserving" http_surface. */
typedef struct tfserving_context {
    osp_server *server; /* borrowed for the HTTP server's lifetime */
    osp_tracer *tracer; /* borrowed likewise; may be NULL */
    bool cors;          /* --rest-api-enable-cors-support */
} tfserving_context;

/* TF Serving decompresses gzip bodies up to ZLib::kMaxUncompressedBytes;
 * --http-max-input-size bounds them too, as it bounds every body. */
#define TFSERVING_MAX_INFLATED ((size_t)100 << 20)

/* The surface's route: claims every path that matches (?i)/v1/.* */
bool tfserving_route(http_request *req, void *surface_ctx);
/* The surface's reply_error: {\n    "error": "..."\n} with TF Serving's
 * status for the error's code (err borrowed). */
void tfserving_reply_error(http_request *req, osp_error *err);
