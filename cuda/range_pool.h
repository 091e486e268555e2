/*
 * A sub-allocator over a few large regions of memory (device memory from
 * cudaMalloc, pinned host memory from cudaHostAlloc): best fit from a free
 * list, neighbours coalesced on free. It never touches the bytes it
 * manages, so it works for memory the host cannot read. Not thread-safe:
 * the owner holds a lock around every call.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct range_block range_block;

typedef struct range_region {
    char *base;
    size_t size;
    range_block *blocks; /* in address order, covering the whole region */
} range_region;

typedef struct range_pool {
    size_t alignment; /* every block starts and ends on a multiple */
    range_region *regions;
    int n_regions, cap_regions;
    size_t total; /* bytes in all regions */
    size_t used;  /* bytes in allocated blocks (rounded sizes) */
} range_pool;

void range_pool_init(range_pool *pool, size_t alignment);
/* Calls release(base, ctx) for every region, then frees the bookkeeping. */
void range_pool_destroy(range_pool *pool,
                        void (*release)(void *base, void *ctx), void *ctx);

/* Adds [base, base + size) to the pool; base must be aligned to the
 * pool's alignment, size is rounded down to it. False when out of host memory
 * (the region is not added). */
bool range_pool_add_region(range_pool *pool, void *base, size_t size);

/* `size` (0 allowed) rounded up to the alignment; NULL when nothing fits
 * (or on a host out-of-memory while splitting a block). */
void *range_pool_alloc(range_pool *pool, size_t size);

/* Returns a block from range_pool_alloc. False when ptr is not the start
 * of an allocated block of this pool (nothing is changed then). */
bool range_pool_free(range_pool *pool, void *ptr);

/* Whether ptr lies in one of the pool's regions. */
bool range_pool_owns(const range_pool *pool, const void *ptr);

/* Removes every region with nothing allocated in it, calling release(base,
 * ctx) for each; returns the bytes released. */
size_t range_pool_trim(range_pool *pool, void (*release)(void *base, void *ctx),
                       void *ctx);
