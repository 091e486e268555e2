/*
 * Aligned host memory with a cache of large blocks (host_pool.c): the
 * allocator behind osp_buffer_new_host (memory.c) and the CPU device.
 */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Alignment of every host allocation Osprey makes (a cache line, and enough
 * for any SIMD load). */
#define OSP_HOST_ALIGNMENT 64

/* OSP_HOST_ALIGNMENT-aligned host memory of `size` bytes (0 allowed: a
 * valid, unique pointer), from the large-block cache where it has one
 * (host_pool.c). NULL when size is too large or memory is short. Release
 * with host_free_aligned(ptr, size) (same size) to return it to the
 * cache; plain free() is also valid and skips the cache. */
void *host_alloc_aligned(size_t size);
void host_free_aligned(void *ptr, size_t size);

#ifdef __cplusplus
}
#endif
