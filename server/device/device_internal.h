/*
 * Pieces of the device layer shared inside server/device: the CPU device
 * (cpu_device.c), which the dispatcher (device.c) hands out.
 */
#pragma once

#include "host_memory.h"
#include "osprey/device_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The process-wide CPU device (a static object; never NULL, never freed). */
osp_device *osp_cpu_device_get(void);

#ifdef __cplusplus
}
#endif
