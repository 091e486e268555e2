/*
 * Aligned host memory with a cache of large blocks.
 *
 * glibc serves blocks above its mmap threshold with a fresh mmap each time,
 * so a 16 MiB tensor costs an mmap, ~4000 page faults and an munmap per
 * request. Blocks of 64 KiB and more are therefore rounded up to a size
 * class (8 classes per power of two, so at most 12.5% slack) and kept on a
 * per-class free list when released, up to OSP_HOST_POOL_CACHE_BYTES in
 * all; past that they go back to the system. Smaller blocks use
 * aligned_alloc/free directly (the malloc arenas already reuse them).
 *
 * Every block, cached or not, is an aligned_alloc pointer, so free() on one
 * is always safe (it just skips the cache).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "host_memory.h"

#define POOL_MIN_SHIFT 16 /* 64 KiB: smallest pooled class */
#define POOL_MAX_SHIFT 34 /* 16 GiB: larger blocks are not pooled */
#define CLASSES_PER_DOUBLING 8
#define POOL_CLASSES ((POOL_MAX_SHIFT - POOL_MIN_SHIFT) * CLASSES_PER_DOUBLING)
#define OSP_HOST_POOL_CACHE_BYTES ((size_t)1 << 30)

typedef struct free_block {
    struct free_block *next;
} free_block;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static free_block *free_lists[POOL_CLASSES];
static size_t cached_bytes;

/* The class of a request of `size` bytes and its rounded capacity; -1 when
 * the size is not pooled (too small or too large). */
static int size_class(size_t size, size_t *capacity) {
    if (size < ((size_t)1 << POOL_MIN_SHIFT) ||
        size > ((size_t)1 << POOL_MAX_SHIFT) - 1)
        return -1;
    int shift = 63 - __builtin_clzll((unsigned long long)size);
    size_t step = (size_t)1 << (shift - 3);
    size_t rounded = (size + step - 1) & ~(step - 1);
    /* Rounding may reach the next power of two: reclassify. */
    shift = 63 - __builtin_clzll((unsigned long long)rounded);
    step = (size_t)1 << (shift - 3);
    int sub = (int)(rounded / step) - CLASSES_PER_DOUBLING; /* 0..7 */
    int cls = (shift - POOL_MIN_SHIFT) * CLASSES_PER_DOUBLING + sub;
    if (cls >= POOL_CLASSES)
        return -1;
    *capacity = rounded;
    return cls;
}

static size_t align_up(size_t size) {
    size_t rounded =
        (size + OSP_HOST_ALIGNMENT - 1) & ~(size_t)(OSP_HOST_ALIGNMENT - 1);
    return rounded ? rounded : OSP_HOST_ALIGNMENT;
}

void *host_alloc_aligned(size_t size) {
    if (size > SIZE_MAX - OSP_HOST_ALIGNMENT)
        return NULL;
    size_t capacity;
    int cls = size_class(size, &capacity);
    if (cls < 0)
        return aligned_alloc(OSP_HOST_ALIGNMENT, align_up(size));
    pthread_mutex_lock(&pool_lock);
    free_block *b = free_lists[cls];
    if (b) {
        free_lists[cls] = b->next;
        cached_bytes -= capacity;
    }
    pthread_mutex_unlock(&pool_lock);
    return b ? (void *)b : aligned_alloc(OSP_HOST_ALIGNMENT, capacity);
}

void host_free_aligned(void *ptr, size_t size) {
    if (!ptr)
        return;
    size_t capacity;
    int cls = size_class(size, &capacity);
    if (cls >= 0) {
        pthread_mutex_lock(&pool_lock);
        bool keep = cached_bytes + capacity <= OSP_HOST_POOL_CACHE_BYTES;
        if (keep) {
            free_block *b = ptr;
            b->next = free_lists[cls];
            free_lists[cls] = b;
            cached_bytes += capacity;
        }
        pthread_mutex_unlock(&pool_lock);
        if (keep)
            return;
    }
    free(ptr);
}
