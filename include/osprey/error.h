/*
 * Errors are values. Every fallible osprey function returns `osp_error *`:
 * NULL on success, otherwise an error the caller owns and frees with
 * osp_error_free(). Each code maps to exactly one HTTP and one gRPC status
 * (see osp_error_code_http_status / osp_error_code_grpc_status).
 */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef enum osp_error_code {
    OSP_ERROR_UNKNOWN = 0,
    OSP_ERROR_INTERNAL,
    OSP_ERROR_NOT_FOUND,
    OSP_ERROR_INVALID_ARG,
    OSP_ERROR_UNAVAILABLE,
    OSP_ERROR_UNSUPPORTED,
    OSP_ERROR_ALREADY_EXISTS,
    OSP_ERROR_CANCELLED,
} osp_error_code;

typedef struct osp_error osp_error;

/* New error with a printf-style message. Never returns NULL (falls back to a
 * static out-of-memory error that osp_error_free ignores). Caller owns it. */
osp_error *osp_error_new(osp_error_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* New error "<prefix>: <inner message>" with inner's code; frees `inner`
 * (ownership moves). Mirrors Triton's RETURN_MSG_IF_ERR prefixing. */
osp_error *osp_error_wrap(osp_error *inner, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void osp_error_free(osp_error *err);

osp_error_code osp_error_get_code(const osp_error *err);
/* Borrowed; valid until osp_error_free(err). */
const char *osp_error_message(const osp_error *err);

/* Stable upper-case name: "INTERNAL", "NOT_FOUND", ... */
const char *osp_error_code_name(osp_error_code code);
/* HTTP status per Triton's HttpCodeFromError. */
int osp_error_code_http_status(osp_error_code code);
/* grpc_status_code value (as int, so no gRPC header is needed here). */
int osp_error_code_grpc_status(osp_error_code code);

#ifdef __cplusplus
}
#endif
