/*
 * Pieces of the device layer shared inside server/core: the CPU device
 * (cpu_device.c) and the aligned host allocator (memory.c) that both the
 * dispatcher (device.c) and the CPU device use.
 */
#pragma once

#include <stddef.h>

#include "osprey/device_impl.h"

/* Alignment of every host allocation Osprey makes (a cache line, and enough
 * for any SIMD load). */
#define OSP_HOST_ALIGNMENT 64

/* OSP_HOST_ALIGNMENT-aligned host memory of `size` bytes (0 allowed: a
 * valid, unique pointer), from the large-block cache where it has one
 * (host_pool.c). NULL when size is too large or memory is short. Release
 * with osp_host_free_aligned(ptr, size) (same size) to return it to the
 * cache; plain free() is also valid and skips the cache. */
void *osp_host_alloc_aligned(size_t size);
void osp_host_free_aligned(void *ptr, size_t size);

/* The process-wide CPU device (a static object; never NULL, never freed). */
osp_device *osp_cpu_device_get(void);
