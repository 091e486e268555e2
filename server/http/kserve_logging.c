/*
 * GET/POST /v2/logging: Triton's logging extension. POST applies the
 * given settings in Triton's order (log_file refused, then log_info,
 * log_warning, log_error, log_verbose_level, log_format; an error stops
 * there, with the earlier ones applied, as in Triton) and both answer with
 * the settings now in force; log_file is --log-file's path ("" for stderr).
 * The update rules are in server/kserve/kserve_log_settings.c.
 */
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "kserve.h"
#include "kserve_log_settings.h"
#include "osprey/log.h"

/* Applies a POST body (kserve_log_settings.c has the rules). */
static osp_error *apply_update(http_request *req) {
    size_t len;
    const char *body = http_request_body(req, &len);
    struct json_object *root = NULL;
    osp_error *err = json_parse_body(body ? body : "", body ? len : 0, &root);
    if (err)
        return err;
    err = kserve_log_settings_update(root);
    json_free(root);
    return err;
}

static osp_error *logging_on_complete(http_request *req) {
    osp_error *err;
    if (http_request_method(req) == HTTP_METHOD_POST &&
        (err = apply_update(req)))
        return err;
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_puts(&b, "{\"log_file\":");
    json_write_cstr(&b, osp_log_file());
    bytebuf_printf(
        &b,
        ",\"log_info\":%s,\"log_warning\":%s,"
        "\"log_error\":%s,\"log_verbose_level\":%d,"
        "\"log_format\":\"%s\"}",
        osp_log_enabled(OSP_LOG_INFO) ? "true" : "false",
        osp_log_enabled(OSP_LOG_WARNING) ? "true" : "false",
        osp_log_enabled(OSP_LOG_ERROR) ? "true" : "false", osp_log_verbose(),
        osp_log_get_format() == OSP_LOG_FORMAT_ISO8601 ? "ISO8601" : "default");
    return kserve_reply_json(req, &b);
}

static const http_handler logging_handler = {
    .on_body = NULL, /* POST bodies are buffered (bounded by the limit) */
    .on_complete = logging_on_complete,
    .destroy = NULL,
    .decode_body = false,
};

void kserve_logging_route(http_request *req) {
    http_method m = http_request_method(req);
    if (m != HTTP_METHOD_GET && m != HTTP_METHOD_POST) {
        http_reply_error_status(req, 405, "Method Not Allowed");
        return;
    }
    http_request_set_handler(req, &logging_handler, NULL);
}
