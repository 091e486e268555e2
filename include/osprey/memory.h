/*
 * Buffers: a pointer, a size, where the bytes live, and how to give them
 * back. Every buffer has exactly one owner; osp_buffer_free() returns it to
 * whatever pool or allocator made it.
 */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum osp_memory_kind {
    OSP_MEMORY_HOST = 0,    /* ordinary (pageable) host memory */
    OSP_MEMORY_HOST_PINNED, /* page-locked host memory, DMA-able by a GPU */
    OSP_MEMORY_DEVICE,      /* memory of a device (for the CPU device: host) */
} osp_memory_kind;

struct osp_device;
typedef struct osp_buffer osp_buffer;

/* Fields are read-only for everyone but the allocator that made it. */
struct osp_buffer {
    void *data;  /* first byte; a device pointer for DEVICE */
    size_t size; /* usable bytes */
    osp_memory_kind kind;
    struct osp_device *device; /* device whose memory this is, or NULL */
    /* private to the allocator */
    void (*release_)(osp_buffer *buf);
    void *allocator_;
};

/* 64-byte aligned host memory. Returns NULL when size is too large or
 * memory is short. A size of 0 gives a valid buffer with data != NULL.
 * Caller owns the result. */
osp_buffer *osp_buffer_new_host(size_t size);

/* Wraps memory owned elsewhere: osp_buffer_free calls free_fn(ctx) (if
 * non-NULL) and frees the wrapper only. Returns NULL on OOM (free_fn is
 * then NOT called). */
osp_buffer *osp_buffer_wrap(void *data, size_t size, osp_memory_kind kind,
                            void (*free_fn)(void *ctx), void *ctx);

/* Returns the buffer to its allocator. NULL is a no-op. */
void osp_buffer_free(osp_buffer *buf);

#ifdef __cplusplus
}
#endif
