/* The one clock of Osprey's timestamps (trace stamps, statistics, request
 * receive times): CLOCK_MONOTONIC in nanoseconds. */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t osp_now_ns(void);

#ifdef __cplusplus
}
#endif
