/*
 * The KServe v2 HTTP surface (/v2/...) with Triton's extensions: health,
 * server and model metadata, model config, repository index and control,
 * and inference (kserve_infer.c). Routing follows Triton's dispatch order
 * and regular expressions exactly (§1 of the protocol reference).
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
 * "out of memory" for the caller's error reply. */
osp_error *kserve_reply_json(http_request *req, struct jbuf *b);

/* The surface to list in http_server_options, with a kserve_context as
 * its surface_ctx and kserve_reply_error as its reply_error. */
bool kserve_route(http_request *req, void *surface_ctx);

/* Extensions reported by GET /v2, in Triton's order; exactly what Osprey
 * implements. */
extern const char *const kserve_extensions[];

/* std::stoi as Triton applies it to header and setting values: leading
 * whitespace, a sign, digits, anything after. Returns 0 and sets *out on
 * success, 1 when there are no digits, 2 when out of int range. */
int kserve_parse_stoi(const char *s, long long *out);

/* Version from the URL ("" = latest). Caller owns nothing. */
osp_error *kserve_parse_version(const char *s, int64_t *out);

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

/* Appends the model configuration as protobuf JSON (model_config_json.c).
 * A loaded model's instance groups are the placed ones (kind, count, gpus
 * as chosen by the loader). */
void model_config_to_json(const osp_model_config *config, struct jbuf *b);
