/*
 * Errors are values. Every fallible osprey function returns `osp_error *`:
 * NULL on success, otherwise an error the caller owns and frees with
 * osp_error_free(). An error carries a code (the kind of failure), a reason
 * a frontend can switch on (which well-known situation it is, when it is
 * one) and a message. Each frontend renders errors its own way (KServe HTTP
 * with Triton's statuses, TF Serving's statuses, gRPC status codes); none
 * parses message text.
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

/* Situations that frontends answer differently from their code alone
 * (e.g. TF Serving's 404 vs 400, Triton's trace API on an unknown model).
 * OSP_REASON_NONE for everything else. */
typedef enum osp_error_reason {
    OSP_REASON_NONE = 0,
    OSP_REASON_MODEL_NOT_FOUND,   /* no model of that name */
    OSP_REASON_VERSION_NOT_FOUND, /* the model has no such version */
    OSP_REASON_MODEL_NOT_READY,   /* exists, but no ready version to serve */
    OSP_REASON_QUEUE_FULL,        /* the scheduler's max_queue_size */
    OSP_REASON_TIMEOUT,           /* a request's queue timeout expired */
    OSP_REASON_SHUTTING_DOWN,     /* the server no longer takes work */
    OSP_REASON_TOO_LARGE,         /* over a size limit (body, input, ...) */
    OSP_REASON_STORAGE_FULL,      /* a store's disk is full (ENOSPC, quota) */
} osp_error_reason;

typedef struct osp_error osp_error;

/* New error with a printf-style message. Never returns NULL (falls back to a
 * static out-of-memory error that osp_error_free ignores). Caller owns it. */
osp_error *osp_error_new(osp_error_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* osp_error_new with a reason. */
osp_error *osp_error_new_reason(osp_error_code code, osp_error_reason reason,
                                const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* New error "<prefix>: <inner message>" with inner's code and reason; frees
 * `inner`
 * (ownership moves). Mirrors Triton's RETURN_MSG_IF_ERR prefixing. */
osp_error *osp_error_wrap(osp_error *inner, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* UNAVAILABLE "out of memory": the one error for a failed allocation. */
osp_error *osp_error_out_of_memory(void);

void osp_error_free(osp_error *err);

osp_error_code osp_error_get_code(const osp_error *err);
/* OSP_REASON_NONE for NULL. */
osp_error_reason osp_error_get_reason(const osp_error *err);
/* Borrowed; valid until osp_error_free(err). */
const char *osp_error_message(const osp_error *err);

/* Stable upper-case name: "INTERNAL", "NOT_FOUND", ... Statuses are the
 * frontends' business (kserve_error_status in server/http/kserve_surface.c
 * for KServe HTTP). */
const char *osp_error_code_name(osp_error_code code);

#ifdef __cplusplus
}
#endif
