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
#include "tfs_model.h"

/* The surface's context; main.c builds one and lists it as the
 * surface_ctx of the "tfserving" http_surface. */
typedef struct tfserving_context {
    osp_server *server; /* borrowed for the HTTP server's lifetime */
    osp_tracer *tracer; /* borrowed likewise; may be NULL */
    bool cors;          /* --rest-api-enable-cors-support */
} tfserving_context;

/* TF Serving decompresses gzip bodies up to ZLib::kMaxUncompressedBytes. */
#define TFSERVING_MAX_BODY ((size_t)100 << 20)

/* The surface's route: claims every path that matches (?i)/v1/.* */
bool tfserving_route(http_request *req, void *surface_ctx);
/* The surface's reply_error: {\n    "error": "..."\n} with TF Serving's
 * status for the error's code (err borrowed). */
void tfserving_reply_error(http_request *req, osp_error *err);

/* ---- shared by tfserving.c and tfserving_infer.c ---- */

typedef enum tfserving_action {
    TFSERVING_STATUS = 0,
    TFSERVING_METADATA,
    TFSERVING_PREDICT,
    TFSERVING_CLASSIFY,
    TFSERVING_REGRESS,
} tfserving_action;

/* What the URL names, decoded. */
typedef struct tfserving_target {
    char *name; /* owned */
    bool has_version;
    int64_t version;
    char *label; /* owned; NULL when none */
    tfserving_action action;
} tfserving_target;

/* The model version a request names (latest, a version, or a label), with
 * a reference held (*model, release with osp_model_unref) and its TF
 * Serving view (*view, caller frees). TF Serving's lookup errors: 404
 * "Servable not found for request: Latest(<m>)" / "Specific(<m>, <v>)",
 * 400 "Unrecognized servable version label: <l>". */
osp_error *tfserving_servable(osp_server *server, const tfserving_target *t,
                              osp_model **model, tfs_model_view **view);

/* Replies 200 application/json with the body in b (taken over; NULL on
 * OOM is an error reply), with the CORS headers when enabled. */
void tfserving_reply_json(http_request *req, struct jbuf *b);

/* Where tfserving_infer.c keeps its per-request state; freed with
 * tfserving_infer_free when the request ends. */
void **tfserving_infer_slot(http_request *req);

/* POST :predict / :classify / :regress once the body is in (its text is
 * borrowed). Sets a reply, or starts the inference (asynchronous). */
osp_error *tfserving_infer_start(http_request *req, tfserving_target *t,
                                 const char *body, size_t len);
/* The asynchronous inference finished: writes the reply. */
osp_error *tfserving_infer_finish(http_request *req);
/* Frees what tfserving_infer_start left in the request's handler state. */
void tfserving_infer_free(void *infer_state);
