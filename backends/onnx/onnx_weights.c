/*
 * Weights once per device: the device copies of a model's constants
 * (initializers, values folded at load) for one device, shared by every
 * session (instance) of the model on that device and freed with the last
 * of them. A constant is uploaded the first time a plan needs it, with a
 * synchronous copy (osp_device_memcpy, on no instance's stream), so that
 * once its address is handed out every instance's stream may read it
 * without waiting for anything. With precision fp16, a constant MatMul
 * reads as FP16 is held converted (and its FP32 copy only made if another
 * op reads it so). The CPU device never gets a store: its sessions read
 * the model's host memory.
 */
#include <stdlib.h>

#include "half.h"
#include "onnx_rt_internal.h"

typedef struct weight_copy {
    const void *host; /* the constant it mirrors (borrowed from the model) */
    bool fp16;        /* an FP16 conversion of that FP32 constant */
    osp_buffer *buf;
} weight_copy;

struct rt_weights {
    osp_device *device;
    int refs; /* sessions holding it, under the model's weights_lock */
    pthread_mutex_t lock; /* guards the copies */
    weight_copy *copies;
    size_t n_copies, cap_copies;
    size_t bytes;
    rt_weights *next;
};

osp_error *rt_weights_acquire(onnx_rt_model *m, osp_device *dev,
                              rt_weights **out) {
    pthread_mutex_lock(&m->weights_lock);
    rt_weights *w = m->weights;
    while (w && w->device != dev)
        w = w->next;
    if (!w && (w = calloc(1, sizeof *w))) {
        w->device = dev;
        pthread_mutex_init(&w->lock, NULL);
        w->next = m->weights;
        m->weights = w;
    }
    if (w)
        w->refs++;
    pthread_mutex_unlock(&m->weights_lock);
    if (!w)
        return osp_error_out_of_memory();
    *out = w;
    return NULL;
}

void rt_weights_release(onnx_rt_model *m, rt_weights *w) {
    if (!w)
        return;
    pthread_mutex_lock(&m->weights_lock);
    bool last = --w->refs == 0;
    if (last)
        for (rt_weights **it = &m->weights; *it; it = &(*it)->next)
            if (*it == w) {
                *it = w->next;
                break;
            }
    pthread_mutex_unlock(&m->weights_lock);
    if (!last)
        return;
    for (size_t i = 0; i < w->n_copies; i++)
        osp_buffer_free(w->copies[i].buf);
    free(w->copies);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* The device copy of `host` (fp16: its FP16 conversion, `count`
 * elements; else `bytes` bytes as they are), made now if missing. */
static osp_error *get_copy(rt_weights *w, const void *host, bool fp16,
                           size_t count, size_t bytes, const void **out) {
    osp_error *err = NULL;
    uint16_t *halves = NULL;
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->n_copies; i++)
        if (w->copies[i].host == host && w->copies[i].fp16 == fp16) {
            *out = w->copies[i].buf->data;
            goto out;
        }
    if (w->n_copies == w->cap_copies) {
        size_t cap = w->cap_copies ? w->cap_copies * 2 : 64;
        weight_copy *grown = realloc(w->copies, cap * sizeof *grown);
        if (!grown) {
            err = osp_error_out_of_memory();
            goto out;
        }
        w->copies = grown;
        w->cap_copies = cap;
    }
    const void *src = host;
    if (fp16) {
        bytes = count * sizeof *halves;
        if (!(halves = malloc(bytes ? bytes : 1))) {
            err = osp_error_out_of_memory();
            goto out;
        }
        for (size_t i = 0; i < count; i++)
            halves[i] = fp32_to_fp16(((const float *)host)[i]);
        src = halves;
    }
    osp_buffer *buf = NULL;
    err = osp_device_alloc(w->device, bytes, &buf);
    if (!err && bytes)
        err = osp_device_memcpy(w->device, buf->data, src, bytes,
                                OSP_COPY_HOST_TO_DEVICE);
    if (err) {
        osp_buffer_free(buf);
        goto out;
    }
    w->copies[w->n_copies++] =
        (weight_copy){.host = host, .fp16 = fp16, .buf = buf};
    w->bytes += bytes;
    *out = buf->data;
out:
    pthread_mutex_unlock(&w->lock);
    free(halves);
    return err;
}

osp_error *rt_weights_get(rt_weights *w, const void *host, size_t bytes,
                          const void **out) {
    return get_copy(w, host, false, 0, bytes, out);
}

osp_error *rt_weights_get_fp16(rt_weights *w, const float *host, size_t count,
                               const void **out) {
    return get_copy(w, host, true, count, 0, out);
}

size_t rt_weights_bytes(rt_weights *w) {
    pthread_mutex_lock(&w->lock);
    size_t bytes = w->bytes;
    pthread_mutex_unlock(&w->lock);
    return bytes;
}
