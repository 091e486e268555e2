/*
 * Small value parsers of the KServe v2 protocol that every surface (HTTP,
 * gRPC, the queue worker) applies with the same semantics and messages.
 */
#pragma once

#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* std::stoi as Triton applies it to header and setting values: leading
 * whitespace, a sign, digits, anything after. `s` is borrowed. Returns 0
 * and sets *out on success, 1 when there are no digits, 2 when out of int
 * range (*out untouched then). */
int kserve_parse_stoi(const char *s, long long *out);

/* Model version from the URL or request ("" = latest, *out = -1). `s` is
 * borrowed. INVALID_ARG with Triton's message when it is not an integral
 * value >= 0. */
osp_error *kserve_parse_version(const char *s, int64_t *out);

#ifdef __cplusplus
}
#endif
