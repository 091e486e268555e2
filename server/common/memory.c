/*
 * osp_buffer for plain host memory and for memory owned elsewhere. Device
 * and pinned buffers are made by the device dispatcher (device.c), which
 * sets release_ to give the bytes back to their device.
 */
#include <stdint.h>
#include <stdlib.h>

#include "host_memory.h"
#include "osprey/memory.h"

/* Header and bytes in one allocation: the header takes the first aligned
 * line, the data starts on the next one. */
typedef union host_buffer_header {
    osp_buffer buf;
    unsigned char pad[OSP_HOST_ALIGNMENT];
} host_buffer_header;

_Static_assert(sizeof(osp_buffer) <= OSP_HOST_ALIGNMENT,
               "osp_buffer must fit in one aligned line");

static void host_buffer_release(osp_buffer *buf) {
    host_free_aligned(buf, sizeof(host_buffer_header) + buf->size);
}

osp_buffer *osp_buffer_new_host(size_t size) {
    if (size > SIZE_MAX - sizeof(host_buffer_header))
        return NULL;
    host_buffer_header *h = host_alloc_aligned(sizeof *h + size);
    if (h == NULL)
        return NULL;
    h->buf = (osp_buffer){
        .data = (unsigned char *)h + sizeof *h,
        .size = size,
        .kind = OSP_MEMORY_HOST,
        .device = NULL,
        .release_ = host_buffer_release,
        .allocator_ = NULL,
    };
    return &h->buf;
}

typedef struct wrapped_buffer {
    osp_buffer super;
    void (*free_fn)(void *ctx);
    void *ctx;
} wrapped_buffer;

static void wrapped_buffer_release(osp_buffer *buf) {
    wrapped_buffer *w = (wrapped_buffer *)buf;
    if (w->free_fn != NULL)
        w->free_fn(w->ctx);
    free(w);
}

osp_buffer *osp_buffer_wrap(void *data, size_t size, osp_memory_kind kind,
                            void (*free_fn)(void *ctx), void *ctx) {
    wrapped_buffer *w = malloc(sizeof *w);
    if (w == NULL)
        return NULL;
    w->super = (osp_buffer){
        .data = data,
        .size = size,
        .kind = kind,
        .device = NULL,
        .release_ = wrapped_buffer_release,
        .allocator_ = NULL,
    };
    w->free_fn = free_fn;
    w->ctx = ctx;
    return &w->super;
}

void osp_buffer_free(osp_buffer *buf) {
    if (buf != NULL)
        buf->release_(buf);
}
