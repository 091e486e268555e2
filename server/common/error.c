/* osp_error: a code, a reason and a heap-allocated message. */
#include "osprey/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct osp_error {
    osp_error_code code;
    osp_error_reason reason;
    char *message;
};

/* Returned when even the error cannot be allocated; never freed. */
static osp_error out_of_memory_error = {OSP_ERROR_UNAVAILABLE, OSP_REASON_NONE,
                                        (char *)"out of memory"};

static osp_error *error_new_va(osp_error_code code, osp_error_reason reason,
                               const char *prefix, const char *fmt,
                               va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int body = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (body < 0)
        body = 0;
    size_t plen = prefix ? strlen(prefix) : 0;
    osp_error *err = malloc(sizeof(*err));
    char *msg = malloc(plen + (size_t)body + 1);
    if (!err || !msg) {
        free(err);
        free(msg);
        return &out_of_memory_error;
    }
    if (plen)
        memcpy(msg, prefix, plen);
    vsnprintf(msg + plen, (size_t)body + 1, fmt, ap);
    err->code = code;
    err->reason = reason;
    err->message = msg;
    return err;
}

osp_error *osp_error_out_of_memory(void) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of memory");
}

osp_error *osp_error_new(osp_error_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    osp_error *err = error_new_va(code, OSP_REASON_NONE, NULL, fmt, ap);
    va_end(ap);
    return err;
}

osp_error *osp_error_new_reason(osp_error_code code, osp_error_reason reason,
                                const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    osp_error *err = error_new_va(code, reason, NULL, fmt, ap);
    va_end(ap);
    return err;
}

osp_error *osp_error_wrap(osp_error *inner, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    /* "<prefix>: <inner>": format the prefix, then append. */
    osp_error *prefix =
        error_new_va(osp_error_get_code(inner), OSP_REASON_NONE, NULL, fmt, ap);
    va_end(ap);
    osp_error *err = osp_error_new_reason(
        osp_error_get_code(inner), osp_error_get_reason(inner), "%s: %s",
        osp_error_message(prefix), osp_error_message(inner));
    osp_error_free(prefix);
    osp_error_free(inner);
    return err;
}

void osp_error_free(osp_error *err) {
    if (!err || err == &out_of_memory_error)
        return;
    free(err->message);
    free(err);
}

osp_error_code osp_error_get_code(const osp_error *err) {
    return err ? err->code : OSP_ERROR_UNKNOWN;
}

osp_error_reason osp_error_get_reason(const osp_error *err) {
    return err ? err->reason : OSP_REASON_NONE;
}

const char *osp_error_message(const osp_error *err) {
    return err ? err->message : "";
}

static const char *const code_names[] = {
    [OSP_ERROR_UNKNOWN] = "UNKNOWN",
    [OSP_ERROR_INTERNAL] = "INTERNAL",
    [OSP_ERROR_NOT_FOUND] = "NOT_FOUND",
    [OSP_ERROR_INVALID_ARG] = "INVALID_ARG",
    [OSP_ERROR_UNAVAILABLE] = "UNAVAILABLE",
    [OSP_ERROR_UNSUPPORTED] = "UNSUPPORTED",
    [OSP_ERROR_ALREADY_EXISTS] = "ALREADY_EXISTS",
    [OSP_ERROR_CANCELLED] = "CANCELLED",
};

const char *osp_error_code_name(osp_error_code code) {
    if ((unsigned)code >= sizeof code_names / sizeof code_names[0])
        return "UNKNOWN";
    return code_names[code];
}
