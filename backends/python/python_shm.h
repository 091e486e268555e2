/*
 * The shared-memory region between the server and one python stub: a memfd
 * both processes map. The server writes a batch's inputs at its start; the
 * stub writes outputs after them and may grow the file (by whole growth
 * steps, never past the limit), which the server then follows.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pyshm_region {
    int fd;        /* the memfd, close-on-exec; -1 when not open */
    uint8_t *base; /* mapping of [0, size) */
    size_t size;   /* bytes mapped */
    size_t growth; /* grow by multiples of this (> 0) */
    size_t limit;  /* never grow past this */
} pyshm_region;

/* Creates a region of `initial` bytes (0 allowed) growing by `growth`
 * bytes up to `limit`. On failure *region is left closed (fd -1). */
osp_error *pyshm_region_init(pyshm_region *region, size_t initial,
                             size_t growth, size_t limit);
/* Makes bytes [0, end) mapped, growing the file by whole growth steps (or
 * mapping what the stub already grew it to; the file never shrinks).
 * INVALID_ARG (reason too large) past the limit; the region is unchanged
 * on failure. */
osp_error *pyshm_region_reserve(pyshm_region *region, size_t end);
/* Maps the region again after the stub grew the file to `size` bytes;
 * checks the file really is that large. A smaller size is a no-op. */
osp_error *pyshm_region_follow(pyshm_region *region, size_t size);
void pyshm_region_destroy(pyshm_region *region);

/* `offset` rounded up to the 64-byte alignment every tensor starts at;
 * SIZE_MAX on overflow. */
size_t pyshm_align(size_t offset);

#ifdef __cplusplus
}
#endif
