/* The sequence table (see sequence_table.h). */
#include "sequence_table.h"

#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
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
    free(t->holder);
    free(t->waiting.items);
    free(t->promoted.items);
    memset(t, 0, sizeof(*t));
}

osp_error *sequence_table_set_batch_slots(sequence_table *t, size_t n_instances,
                                          size_t per_instance) {
    if (n_instances == 0 || per_instance == 0 || per_instance > INT_MAX ||
        n_instances > INT_MAX || per_instance > SIZE_MAX / n_instances)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "invalid sequence batch slots: %zu x %zu",
                             n_instances, per_instance);
    t->holder = calloc(n_instances * per_instance, sizeof(*t->holder));
    t->waiting.items = calloc(t->capacity, sizeof(*t->waiting.items));
    t->promoted.items = calloc(t->capacity, sizeof(*t->promoted.items));
    if (!t->holder || !t->waiting.items || !t->promoted.items)
        return osp_error_out_of_memory(); /* destroy frees them */
    t->waiting.capacity = t->promoted.capacity = t->capacity;
    t->n_instances = n_instances;
    t->per_instance = per_instance;
    return NULL;
}

/* ---- FIFOs of sequences --------------------------------------------------
 */

/* Both rings hold at most one entry per used slot: never full. */
static void ring_push(sequence_ring *r, sequence_slot *s) {
    r->items[(r->head + r->count++) % r->capacity] = s;
}

static sequence_slot *ring_pop(sequence_ring *r) {
    if (r->count == 0)
        return NULL;
    sequence_slot *s = r->items[r->head];
    r->head = (r->head + 1) % r->capacity;
    r->count--;
    return s;
}

/* Removes s from r wherever it is, keeping the others' order. */
static void ring_remove(sequence_ring *r, sequence_slot *s) {
    size_t kept = 0;
    for (size_t i = 0; i < r->count; i++) {
        sequence_slot *x = r->items[(r->head + i) % r->capacity];
        if (x != s)
            r->items[(r->head + kept++) % r->capacity] = x;
    }
    r->count = kept;
}

/* ---- batch slots ---------------------------------------------------------
 */

/* Gives s the free batch slot with the lowest row, then the lowest
 * instance; false when every one is held. */
static bool take_batch_slot(sequence_table *t, sequence_slot *s) {
    size_t n = t->n_instances * t->per_instance;
    for (size_t k = 0; k < n; k++) {
        if (t->holder[k])
            continue;
        t->holder[k] = s;
        s->instance = (int)(k % t->n_instances);
        s->batch_index = (int)(k / t->n_instances);
        return true;
    }
    return false;
}

/* s is going away: its batch slot goes to the oldest waiting sequence (or
 * it leaves the queue of waiting ones). */
static void give_up_batch_slot(sequence_table *t, sequence_slot *s) {
    if (s->waiting_for_slot) {
        ring_remove(&t->waiting, s);
        return;
    }
    if (!t->holder || s->instance < 0)
        return;
    size_t k = (size_t)s->batch_index * t->n_instances + (size_t)s->instance;
    t->holder[k] = NULL;
    sequence_slot *next = ring_pop(&t->waiting);
    if (!next)
        return;
    next->waiting_for_slot = false;
    t->holder[k] = next;
    next->instance = s->instance;
    next->batch_index = s->batch_index;
    ring_push(&t->promoted, next);
}

sequence_slot *sequence_table_take_promoted(sequence_table *t) {
    return t->promoted.items ? ring_pop(&t->promoted) : NULL;
}

size_t sequence_table_waiting(const sequence_table *t) {
    return t->waiting.count;
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
    s->instance = s->batch_index = -1;
    t->used++;
    if (t->holder && !take_batch_slot(t, s)) {
        s->waiting_for_slot = true;
        ring_push(&t->waiting, s);
    }
    *out = s;
    return NULL;
}

void sequence_table_release(sequence_table *t, sequence_slot *slot) {
    give_up_batch_slot(t, slot);
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

uint64_t sequence_table_next_idle_ns(const sequence_table *t) {
    uint64_t first = UINT64_MAX;
    size_t n = t->holder ? t->n_instances * t->per_instance : 0;
    for (size_t k = 0; k < n; k++) {
        const sequence_slot *s = t->holder[k];
        if (!s || s->in_flight || s->backlog_head)
            continue;
        uint64_t at = s->last_active_ns + t->idle_ns;
        if (at < first)
            first = at;
    }
    return first;
}
