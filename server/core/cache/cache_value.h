/*
 * The bytes the redis response cache keeps for one response: its outputs
 * (name, datatype, shape, bytes) in a compact binary layout that starts
 * with a version, so that a value written by another layout (an older or
 * newer Osprey, or anything else sharing the Redis) is recognised and
 * refused rather than misread.
 *
 * Layout, version 1 (integers little-endian):
 *   "OC" 0x01                          magic and version
 *   u32 n_outputs
 *   per output:
 *     u32 name length, name bytes      1..65535 bytes, no NUL
 *     u8  datatype code                1 BOOL .. 14 BF16 (cache_value.c)
 *     u8  rank                         0..OSP_MAX_DIMS
 *     i64 dims[rank]                   each >= 0
 *     u64 byte size, bytes             exactly what the shape and datatype
 *                                      make (BYTES: 4-byte lengths + bytes,
 *                                      one element per shape element)
 * and nothing after the last output.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "osprey/infer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CACHE_VALUE_VERSION 1

/* Encodes resp's outputs (borrowed). On success *out is the value (caller
 * frees it with free()) of *len bytes. False with *why (a static string)
 * when an output is not one a decode would accept (bytes that do not
 * match its shape, a name too long), the value would pass max_len, or
 * memory is short. */
bool cache_value_encode(const osp_infer_response *resp, size_t max_len,
                        unsigned char **out, size_t *len, const char **why);

/* Appends the outputs of value[0..len) (borrowed) to resp, which has
 * none. False with *why (a static string) when the value is not a whole,
 * valid version-1 value or memory is short: resp is then left without
 * outputs. Reads nothing outside value. */
bool cache_value_decode(const unsigned char *value, size_t len,
                        osp_infer_response *resp, const char **why);

/* Frees resp's outputs and leaves it with none (a copy or decode cut
 * short). */
void cache_response_drop_outputs(osp_infer_response *resp);

#ifdef __cplusplus
}
#endif
