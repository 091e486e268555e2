/* The server's side of the stub's shared-memory region (python_shm.h). */
#define _GNU_SOURCE
#include "python_shm.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

size_t pyshm_align(size_t offset) {
    if (offset > SIZE_MAX - 63)
        return SIZE_MAX;
    return (offset + 63) & ~(size_t)63;
}

/* Replaces the mapping by one of `size` bytes (the file is that large). */
static osp_error *region_remap(pyshm_region *region, size_t size) {
    uint8_t *base = NULL;
    if (size > 0) {
        void *p =
            mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, region->fd, 0);
        if (p == MAP_FAILED)
            return osp_error_new(OSP_ERROR_UNAVAILABLE,
                                 "python backend: cannot map %zu bytes of "
                                 "shared memory: %s",
                                 size, strerror(errno));
        base = p;
    }
    if (region->base)
        munmap(region->base, region->size);
    region->base = base;
    region->size = size;
    return NULL;
}

osp_error *pyshm_region_init(pyshm_region *region, size_t initial,
                             size_t growth, size_t limit) {
    memset(region, 0, sizeof *region);
    region->fd = -1;
    region->growth = growth ? growth : 1;
    region->limit = limit;
    if (initial > limit)
        initial = limit;
    int fd = memfd_create("osprey-python", MFD_CLOEXEC);
    if (fd < 0)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: cannot create shared memory: %s",
                             strerror(errno));
    if (ftruncate(fd, (off_t)initial) != 0) {
        int e = errno;
        close(fd);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: cannot size shared memory to "
                             "%zu bytes: %s",
                             initial, strerror(e));
    }
    region->fd = fd;
    osp_error *err = region_remap(region, initial);
    if (err)
        pyshm_region_destroy(region);
    return err;
}

osp_error *pyshm_region_reserve(pyshm_region *region, size_t end) {
    if (end <= region->size)
        return NULL;
    if (end > region->limit)
        return osp_error_new_reason(
            OSP_ERROR_INVALID_ARG, OSP_REASON_TOO_LARGE,
            "python backend: the batch needs %zu bytes of shared memory, "
            "more than the limit of %zu (shm-region-max-byte-size)",
            end, region->limit);
    /* The stub may have grown the file in a call that failed before it
     * reported the size: follow it rather than truncate under its map. */
    struct stat st;
    if (fstat(region->fd, &st) == 0 && (uint64_t)st.st_size >= end &&
        (uint64_t)st.st_size <= region->limit)
        return region_remap(region, (size_t)st.st_size);
    size_t steps = (end - region->size + region->growth - 1) / region->growth;
    size_t size = region->size + steps * region->growth;
    if (size > region->limit || size < end)
        size = region->limit;
    if (ftruncate(region->fd, (off_t)size) != 0)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: cannot grow shared memory to "
                             "%zu bytes: %s",
                             size, strerror(errno));
    return region_remap(region, size);
}

osp_error *pyshm_region_follow(pyshm_region *region, size_t size) {
    if (size <= region->size)
        return NULL;
    struct stat st;
    if (size > region->limit || fstat(region->fd, &st) != 0 ||
        (uint64_t)st.st_size < (uint64_t)size)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "python backend: the stub reported a shared "
                             "memory region of %zu bytes that does not exist",
                             size);
    return region_remap(region, size);
}

void pyshm_region_destroy(pyshm_region *region) {
    if (region->base)
        munmap(region->base, region->size);
    if (region->fd >= 0)
        close(region->fd);
    region->base = NULL;
    region->size = 0;
    region->fd = -1;
}
