/*
 * Helpers the KServe v2 HTTP handlers share (kserve.c, kserve_stats.c,
 * kserve_trace.c, kserve_logging.c). Protocol logic that other surfaces
 * need as well lives in server/kserve/ instead.
 */
#include <stdlib.h>

#include "json_util.h"
#include "kserve.h"

osp_error *kserve_reply_json(http_request *req, jbuf *b) {
    size_t len;
    char *body = jbuf_take(b, &len);
    if (!body)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of memory");
    http_reply(req, 200, "application/json", body, len);
    return NULL;
}
