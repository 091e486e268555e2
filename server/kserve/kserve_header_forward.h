/* Triton's --http-header-forward-pattern and --grpc-header-forward-pattern:
 * the request headers (gRPC metadata) whose name the pattern matches
 * become string parameters of the inference request, which the model sees
 * (a python model in request.parameters()). */
#ifndef OSPREY_KSERVE_HEADER_FORWARD_H
#define OSPREY_KSERVE_HEADER_FORWARD_H

#include <stdbool.h>
#include <stddef.h>

#include "osprey/error.h"
#include "osprey/infer.h"

typedef struct kserve_header_forward kserve_header_forward;

/* Compiles `pattern` (a POSIX extended regular expression, which covers
 * the RE2 patterns such flags are given: "^x-", "trace|tenant"). An empty
 * or NULL pattern forwards nothing: *out is NULL. An invalid one fails
 * naming `flag`. Caller owns *out. */
osp_error *kserve_header_forward_new(const char *flag, const char *pattern,
                                     kserve_header_forward **out);
void kserve_header_forward_free(kserve_header_forward *f);

/* Adds the header as a string parameter of req when `f` (may be NULL)
 * matches its name anywhere in it, as RE2::PartialMatch does in Triton.
 * name and value need not be NUL-terminated (gRPC slices); both are
 * copied. Returns an error only when memory runs out. */
osp_error *kserve_header_forward_apply(const kserve_header_forward *f,
                                       osp_infer_request *req,
                                       const char *name, size_t name_len,
                                       const char *value, size_t value_len);

#endif
