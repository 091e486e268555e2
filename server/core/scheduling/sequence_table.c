/* The sequence table (see sequence_table.h). */
#include "sequence_table.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

osp_error *sequence_table_init(sequence_table *t, size_t capacity,
                               size_t n_states, uint64_t idle_ns) {
    memset(t, 0, sizeof(*t));
    t->slots = calloc(capacity ? capacity : 1, sizeof(*t->slots));
    if (!t->slots)
        return osp_error_out_of_memory();
    t->capacity = capacity ? capacity : 1;
    t->n_states = n_states;
    t->idle_ns = idle_ns;
    return NULL;
}

void sequence_table_destroy(sequence_table *t) {
    for (size_t i = 0; t->slots && i < t->capacity; i++)
        if (t->slots[i].used)
            sequence_table_release(t, &t->slots[i]);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

bool sequence_id_equal(const sequence_id *a, const sequence_id *b) {
    if (a->is_string != b->is_string)
        return false;
    return a->is_string ? strcmp(a->string, b->string) == 0
                        : a->number == b->number;
}

const char *sequence_id_format(const sequence_id *id, char *buf, size_t cap) {
    if (id->is_string)
        snprintf(buf, cap, "%s", id->string);
    else
        snprintf(buf, cap, "%" PRIu64, id->number);
    return buf;
}

/* Whether the slot's sequence has waited longer than the idle limit with
 * nothing queued or running. */
static bool slot_idle(const sequence_table *t, const sequence_slot *s,
                      uint64_t now_ns) {
    return s->used && !s->in_flight && !s->backlog_head &&
           now_ns - s->last_active_ns >= t->idle_ns;
}

sequence_slot *sequence_table_find(sequence_table *t, const sequence_id *id,
                                   uint64_t now_ns) {
    for (size_t i = 0, seen = 0; i < t->capacity && seen < t->used; i++) {
        sequence_slot *s = &t->slots[i];
        if (!s->used)
            continue;
        seen++;
        if (s->ending || !sequence_id_equal(&s->id, id))
            continue;
        if (slot_idle(t, s, now_ns)) {
            sequence_table_release(t, s);
            return NULL;
        }
        return s;
    }
    return NULL;
}

osp_error *sequence_table_open(sequence_table *t, const sequence_id *id,
                               uint64_t now_ns, sequence_slot **out) {
    if (t->used == t->capacity)
        sequence_table_reap(t, now_ns);
    if (t->used == t->capacity)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "the sequence table is full (%zu sequences in "
                             "progress)",
                             t->capacity);
    sequence_slot *s = NULL;
    for (size_t i = 0; i < t->capacity && !s; i++)
        if (!t->slots[i].used)
            s = &t->slots[i];
    memset(s, 0, sizeof(*s));
    s->id = *id;
    if (id->is_string && !(s->id.string = strdup(id->string)))
        return osp_error_out_of_memory();
    if (t->n_states && !(s->state = calloc(t->n_states, sizeof(*s->state)))) {
        free((char *)s->id.string);
        return osp_error_out_of_memory();
    }
    s->used = true;
    s->last_active_ns = now_ns;
    t->used++;
    *out = s;
    return NULL;
}

void sequence_table_release(sequence_table *t, sequence_slot *slot) {
    if (slot->id.is_string)
        free((char *)slot->id.string);
    for (size_t k = 0; slot->state && k < t->n_states; k++)
        osp_buffer_free(slot->state[k]);
    free(slot->state);
    memset(slot, 0, sizeof(*slot));
    t->used--;
}

size_t sequence_table_reap(sequence_table *t, uint64_t now_ns) {
    size_t released = 0;
    for (size_t i = 0; i < t->capacity && t->used > 0; i++) {
        if (slot_idle(t, &t->slots[i], now_ns)) {
            sequence_table_release(t, &t->slots[i]);
            released++;
        }
    }
    return released;
}
