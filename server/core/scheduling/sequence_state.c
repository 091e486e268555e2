/* The per-instance values of a sequence model's states (see
 * sequence_state.h). */
#include "sequence_state.h"

#include <stdlib.h>
#include <string.h>

/* Uploads `bytes` of host memory `src` to a new buffer on `dev`. */
static osp_error *upload_row(osp_device *dev, const void *src, size_t bytes,
                             osp_buffer **out) {
    osp_buffer *buf = NULL;
    osp_error *err = osp_device_alloc(dev, bytes ? bytes : 1, &buf);
    if (!err && bytes)
        err = osp_device_memcpy(dev, buf->data, src, bytes,
                                OSP_COPY_HOST_TO_DEVICE);
    if (err) {
        osp_buffer_free(buf);
        return err;
    }
    *out = buf;
    return NULL;
}

osp_error *sequence_state_store_init(sequence_state_store *s, size_t n_states,
                                     const size_t *row_bytes,
                                     osp_buffer *const *initial,
                                     const bool *initial_is_zero,
                                     osp_device *const *devices,
                                     size_t n_instances) {
    memset(s, 0, sizeof(*s));
    s->n_states = n_states;
    s->row_bytes = row_bytes;
    s->instances = calloc(n_instances + 1, sizeof(*s->instances));
    if (!s->instances)
        return osp_error_out_of_memory();
    s->n_instances = n_instances;
    /* One host row of zeros, as large as the largest state. */
    size_t widest = 1;
    for (size_t k = 0; k < n_states; k++)
        if (row_bytes[k] > widest)
            widest = row_bytes[k];
    void *zero_row = calloc(1, widest);
    osp_error *err = zero_row ? NULL : osp_error_out_of_memory();
    for (size_t i = 0; i < n_instances && !err; i++) {
        sequence_state_instance *inst = &s->instances[i];
        inst->device = devices[i];
        inst->initial = calloc(n_states + 1, sizeof(*inst->initial));
        inst->zeros = calloc(n_states + 1, sizeof(*inst->zeros));
        if (!inst->initial || !inst->zeros) {
            err = osp_error_out_of_memory();
            break;
        }
        for (size_t k = 0; k < n_states && !err; k++) {
            err = upload_row(inst->device, initial[k]->data, row_bytes[k],
                             &inst->initial[k]);
            if (!err && !initial_is_zero[k])
                err = upload_row(inst->device, zero_row, row_bytes[k],
                                 &inst->zeros[k]);
        }
    }
    free(zero_row);
    if (err)
        sequence_state_store_destroy(s);
    return err;
}

void sequence_state_store_destroy(sequence_state_store *s) {
    for (size_t i = 0; s->instances && i < s->n_instances; i++) {
        sequence_state_instance *inst = &s->instances[i];
        for (size_t k = 0; k < s->n_states; k++) {
            if (inst->initial)
                osp_buffer_free(inst->initial[k]);
            if (inst->zeros)
                osp_buffer_free(inst->zeros[k]);
        }
        free(inst->initial);
        free(inst->zeros);
    }
    free(s->instances);
    memset(s, 0, sizeof(*s));
}

const osp_buffer *sequence_state_initial(const sequence_state_store *s,
                                         size_t instance, size_t k) {
    if (instance >= s->n_instances || k >= s->n_states)
        return NULL;
    return s->instances[instance].initial[k];
}

const osp_buffer *sequence_state_zeros(const sequence_state_store *s,
                                       size_t instance, size_t k) {
    if (instance >= s->n_instances || k >= s->n_states)
        return NULL;
    const sequence_state_instance *inst = &s->instances[instance];
    return inst->zeros[k] ? inst->zeros[k] : inst->initial[k];
}

osp_error *sequence_state_alloc(const sequence_state_store *s, size_t instance,
                                size_t k, osp_buffer **out) {
    if (instance >= s->n_instances || k >= s->n_states)
        return osp_error_new(OSP_ERROR_INTERNAL, "no state %zu on instance %zu",
                             k, instance);
    size_t bytes = s->row_bytes[k];
    return osp_device_alloc(s->instances[instance].device, bytes ? bytes : 1,
                            out);
}
