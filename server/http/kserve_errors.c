/*
 * The KServe surface's error rendering (see kserve_errors.h): Triton's
 * table of error codes to HTTP statuses, which only this surface uses.
 */
#include "kserve_errors.h"

/* Indexed by osp_error_code. */
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
