/*
 * Custom metrics of a python model (pb_utils.MetricFamily and its
 * Metric objects, Triton's python backend API) on the server's registry
 * (osprey/custom_metrics.h). The stub names each family and metric it
 * makes with an id of its own; the server keeps the handle under that id
 * until the stub deletes it or ends.
 *
 * METRIC frame (stub -> server): u64 call id (0: no answer wanted), u8
 * op, u64 handle id, then per op:
 *   0 family new  u8 kind (0 counter, 1 gauge, 2 histogram), u16 name
 *                 length, name, u32 description length, description
 *   1 metric new  u64 family id, u32 label count, per label u16 name
 *                 length, name, u32 value length, value, u32 bucket count
 *                 (UINT32_MAX: none), f64 buckets
 *   2 delete      (a family or a metric)
 *   3 increment, 4 set, 5 observe   f64 value
 *   6 value
 * CALL_ANSWER (server -> stub, python_protocol.h) carries the value of op 6
 * or the refusal's message.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "python_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pymetrics pymetrics;

/* The handles of one stub; NULL on OOM. */
pymetrics *pymetrics_new(void);
/* Deletes every handle the stub left (its metrics' series leave /metrics
 * when no other handle holds them). NULL is fine. */
void pymetrics_free(pymetrics *m);

/* Serves one METRIC frame (payload borrowed). Returns the answer to send
 * as CALL_ANSWER in *answer (caller frees; len 0: none wanted), or an
 * error when the frame is malformed (the stub broke the protocol).
 * Thread-safe. */
osp_error *pymetrics_serve(pymetrics *m, const uint8_t *payload, size_t len,
                           pyproto_text *answer);

#ifdef __cplusplus
}
#endif
