#include "range_pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct range_block {
    char *start;
    size_t size;
    bool free;
    range_block *prev, *next;
};

void range_pool_init(range_pool *pool, size_t alignment) {
    memset(pool, 0, sizeof *pool);
    pool->alignment = alignment;
}

static void free_blocks(range_block *b) {
    while (b != NULL) {
        range_block *next = b->next;
        free(b);
        b = next;
    }
}

void range_pool_destroy(range_pool *pool,
                        void (*release)(void *base, void *ctx), void *ctx) {
    for (int i = 0; i < pool->n_regions; i++) {
        if (release != NULL)
            release(pool->regions[i].base, ctx);
        free_blocks(pool->regions[i].blocks);
    }
    free(pool->regions);
    range_pool_init(pool, pool->alignment);
}

bool range_pool_add_region(range_pool *pool, void *base, size_t size) {
    size = size / pool->alignment * pool->alignment;
    if (pool->n_regions == pool->cap_regions) {
        int cap = pool->cap_regions ? pool->cap_regions * 2 : 4;
        range_region *regions =
            realloc(pool->regions, (size_t)cap * sizeof *regions);
        if (regions == NULL)
            return false;
        pool->regions = regions;
        pool->cap_regions = cap;
    }
    range_block *b = malloc(sizeof *b);
    if (b == NULL)
        return false;
    *b = (range_block){.start = base, .size = size, .free = true};
    pool->regions[pool->n_regions++] =
        (range_region){.base = base, .size = size, .blocks = b};
    pool->total += size;
    return true;
}

void *range_pool_alloc(range_pool *pool, size_t size) {
    if (size > SIZE_MAX - pool->alignment)
        return NULL;
    size = (size + pool->alignment - 1) / pool->alignment * pool->alignment;
    if (size == 0)
        size = pool->alignment;

    range_block *best = NULL;
    for (int i = 0; i < pool->n_regions; i++)
        for (range_block *b = pool->regions[i].blocks; b != NULL; b = b->next)
            if (b->free && b->size >= size &&
                (best == NULL || b->size < best->size))
                best = b;
    if (best == NULL)
        return NULL;

    if (best->size > size) { /* split: the tail stays free */
        range_block *rest = malloc(sizeof *rest);
        if (rest == NULL)
            return NULL;
        *rest = (range_block){.start = best->start + size,
                              .size = best->size - size,
                              .free = true,
                              .prev = best,
                              .next = best->next};
        if (best->next != NULL)
            best->next->prev = rest;
        best->next = rest;
        best->size = size;
    }
    best->free = false;
    pool->used += size;
    return best->start;
}

static range_region *region_of(const range_pool *pool, const void *ptr) {
    const char *p = ptr;
    for (int i = 0; i < pool->n_regions; i++) {
        range_region *r = &pool->regions[i];
        if (p >= r->base && p < r->base + r->size)
            return r;
    }
    return NULL;
}

bool range_pool_owns(const range_pool *pool, const void *ptr) {
    return region_of(pool, ptr) != NULL;
}

/* Merges b's successor into b (both free). */
static void merge_next(range_block *b) {
    range_block *next = b->next;
    b->size += next->size;
    b->next = next->next;
    if (next->next != NULL)
        next->next->prev = b;
    free(next);
}

bool range_pool_free(range_pool *pool, void *ptr) {
    range_region *r = region_of(pool, ptr);
    if (r == NULL)
        return false;
    range_block *b = r->blocks;
    while (b != NULL && b->start != (char *)ptr)
        b = b->next;
    if (b == NULL || b->free)
        return false;
    b->free = true;
    pool->used -= b->size;
    if (b->next != NULL && b->next->free)
        merge_next(b);
    if (b->prev != NULL && b->prev->free)
        merge_next(b->prev);
    return true;
}

size_t range_pool_trim(range_pool *pool, void (*release)(void *base, void *ctx),
                       void *ctx) {
    size_t released = 0;
    int kept = 0;
    for (int i = 0; i < pool->n_regions; i++) {
        range_region *r = &pool->regions[i];
        if (r->blocks->free && r->blocks->next == NULL) {
            release(r->base, ctx);
            free(r->blocks);
            released += r->size;
        } else {
            pool->regions[kept++] = *r;
        }
    }
    pool->n_regions = kept;
    pool->total -= released;
    return released;
}
