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
#include "kserve_context.h"
#include "kserve_errors.h"

struct jbuf;

/* Replies 200 with the JSON in b (taken over), or returns UNAVAILABLE
 * "out of memory" for the caller's error reply (kserve_http_util.c). */
osp_error *kserve_reply_json(http_request *req, struct jbuf *b);

/* The surface to list in http_server_options, with a kserve_context as
 * its surface_ctx and kserve_reply_error as its reply_error. */
bool kserve_route(http_request *req, void *surface_ctx);

/* Extensions reported by GET /v2, in Triton's order; exactly what Osprey
 * implements. */
extern const char *const kserve_extensions[];

/* Starts POST .../infer for model `name` (borrowed) and version string
 * `version` ("" when absent). Claims the request. */
void kserve_infer_route(http_request *req, const char *name,
                        const char *version);

/* GET/POST /v2/trace/setting (model NULL) and
 * /v2/models/{model}/trace/setting (kserve_trace.c). `model` (model_len
 * bytes) is borrowed. Claims the request. */
void kserve_trace_route(http_request *req, const char *model, size_t model_len);

/* GET/POST /v2/logging (kserve_logging.c). Claims the request. */
void kserve_logging_route(http_request *req);

/* Replies to a statistics request for `model` ("" = every model) and
 * `version` ("" = every ready version) with Triton's JSON, or returns the
 * error (kserve_stats.c). Both strings borrowed. */
osp_error *kserve_stats_reply(http_request *req, const char *model,
                              const char *version);
