/* The direct strategy's per-instance batches (see slot_batcher.h). */
#include "slot_batcher.h"

#include <stdlib.h>

osp_error *slot_batcher_init(slot_batcher *sb, size_t n_slots,
                             int64_t max_batch_size, uint64_t max_delay_us,
                             float min_utilization,
                             batcher_compatible_fn compatible, void *ctx) {
    *sb = (slot_batcher){0};
    sb->ready = calloc(n_slots ? n_slots : 1, sizeof(*sb->ready));
    if (!sb->ready)
        return osp_error_out_of_memory();
    sb->n_slots = n_slots ? n_slots : 1;
    sb->max_batch = max_batch_size > 0 ? max_batch_size : 1;
    sb->max_delay_ns = max_delay_us * 1000u;
    sb->min_utilization = min_utilization;
    sb->compatible = compatible;
    sb->compatible_ctx = ctx;
    return NULL;
}

void slot_batcher_destroy(slot_batcher *sb) {
    free(sb->ready);
    *sb = (slot_batcher){0};
}

bool slot_batcher_put(slot_batcher *sb, size_t slot, batcher_entry *e,
                      uint64_t now_ns) {
    if (slot >= sb->n_slots || sb->ready[slot])
        return false;
    e->enqueue_ns = now_ns;
    e->next = NULL;
    sb->ready[slot] = e;
    sb->n_ready++;
    return true;
}

size_t slot_batcher_take(slot_batcher *sb, uint64_t now_ns, bool flush,
                         batcher_entry **batch, uint64_t *wait_ns) {
    *wait_ns = 0;
    if (sb->n_ready == 0)
        return 0;
    size_t rows = 0;
    uint64_t oldest = UINT64_MAX;
    for (size_t s = 0; s < sb->n_slots; s++) {
        if (!sb->ready[s])
            continue;
        rows = s + 1;
        if (sb->ready[s]->enqueue_ns < oldest)
            oldest = sb->ready[s]->enqueue_ns;
    }
    bool now = flush || sb->max_delay_ns == 0 || sb->min_utilization <= 0.0f;
    if (!now) {
        uint64_t waited = now_ns > oldest ? now_ns - oldest : 0;
        float utilization = (float)sb->n_ready / (float)sb->max_batch;
        now = waited >= sb->max_delay_ns || utilization >= sb->min_utilization;
        if (!now) {
            *wait_ns = sb->max_delay_ns - waited;
            return 0;
        }
    }
    const batcher_entry *first = NULL;
    size_t taken_rows = 0;
    for (size_t s = 0; s < rows; s++) {
        batcher_entry *e = sb->ready[s];
        batch[s] = NULL;
        if (!e)
            continue;
        if (first && sb->compatible &&
            !sb->compatible(first, e, sb->compatible_ctx))
            continue; /* waits for the next batch */
        if (!first)
            first = e;
        batch[s] = e;
        sb->ready[s] = NULL;
        sb->n_ready--;
        taken_rows = s + 1;
    }
    return taken_rows;
}

size_t slot_batcher_remove_if(slot_batcher *sb, batcher_drop_fn drop,
                              void *ctx, batcher_entry **removed) {
    size_t n = 0;
    for (size_t s = sb->n_slots; s-- > 0;) {
        batcher_entry *e = sb->ready[s];
        if (!e || !drop(e, ctx))
            continue;
        sb->ready[s] = NULL;
        sb->n_ready--;
        e->next = *removed;
        *removed = e;
        n++;
    }
    return n;
}

size_t slot_batcher_queued(const slot_batcher *sb) {
    return sb->n_ready;
}
