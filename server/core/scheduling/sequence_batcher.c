/*
 * The sequence batcher (see sequence_batcher.h): correlation ids, the
 * per-sequence backlog, control inputs and implicit state, in front of the
 * model's queue.
 */
#include "sequence_batcher.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cond_deadline.h"
#include "model_internal.h"
#include "osprey/clock.h"
#include "sequence_state.h"
#include "sequence_table.h"

struct sequence_batcher {
    pthread_mutex_t lock; /* guards the table and every slot in it */
    sequence_table table;
    /* Releases idle sequences that hold a batch slot while others wait
     * for one (started by sequence_batcher_start). */
    osp_model *model; /* borrowed: the model owns the batcher */
    pthread_t reaper;
    bool reaper_started, stopping;
    pthread_cond_t reaper_wake;     /* a sequence started waiting; stop */
    const osp_model_config *config; /* borrowed: the model owns it */
    osp_buffer **initial;           /* per state: its initial bytes */
    bool *initial_is_zero;          /* per state: zero_data */
    size_t *state_bytes;            /* per state: bytes of one row */
    /* The states' initial values and zeros on each instance's device
     * (sequence_batcher_start). */
    sequence_state_store store;
    const osp_sequence_control *corrid; /* NULL without CORRID */
    /* Requests waiting in the sequences' backlogs: pending, as Triton
     * counts them (nv_inference_pending_request_count). */
    atomic_size_t backlogged;
};

/* State k's bytes per sequence (dims are fixed: the parser checks). */
static size_t state_row_bytes(const osp_sequence_state *st) {
    size_t n = osp_datatype_byte_size(st->dtype);
    for (int d = 0; d < st->dims.rank; d++)
        n *= (size_t)st->dims.dims[d];
    return n;
}

/* Reads initial_state/<file> of the version folder into a host buffer of
 * exactly `bytes` bytes. Messages name the file, never the server path. */
static osp_error *read_initial_state(const char *version_path,
                                     const osp_sequence_state *st, size_t bytes,
                                     osp_buffer **out) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/initial_state/%s", version_path,
             st->initial_data_file);
    osp_error *err = NULL;
    FILE *f = fopen(path, "rb");
    struct stat info;
    if (!f || fstat(fileno(f), &info) != 0) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to read initial state file "
                            "'initial_state/%s' of state '%s': %s",
                            st->initial_data_file, st->input_name,
                            strerror(errno));
        goto out;
    }
    if ((size_t)info.st_size != bytes) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "initial state file 'initial_state/%s' of state "
                            "'%s' has %lld bytes, expected %zu",
                            st->initial_data_file, st->input_name,
                            (long long)info.st_size, bytes);
        goto out;
    }
    *out = osp_buffer_new_host(bytes);
    if (!*out) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if (bytes && fread((*out)->data, 1, bytes, f) != bytes) {
        osp_buffer_free(*out);
        *out = NULL;
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to read initial state file "
                            "'initial_state/%s' of state '%s'",
                            st->initial_data_file, st->input_name);
    }
out:
    if (f)
        fclose(f);
    return err;
}

/* Load checks: the tensors the batcher adds must not clash with the
 * config's own inputs. A state's output_name may also be a config output
 * (Triton's backends then give it to the client too, see
 * instance_exec.c). */
static osp_error *check_names(const osp_model_config *cfg) {
    const osp_sequence_batching *sb = &cfg->sequence_batching;
    for (size_t i = 0; i < sb->n_controls; i++)
        if (osp_model_config_input_index(cfg, sb->controls[i].name) >= 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "sequence_batching control input '%s' is "
                                 "also an input of model '%s'",
                                 sb->controls[i].name, cfg->name);
    for (size_t i = 0; i < sb->n_states; i++) {
        if (osp_model_config_input_index(cfg, sb->states[i].input_name) >= 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "state input '%s' is also an input of "
                                 "model '%s'",
                                 sb->states[i].input_name, cfg->name);
    }
    return NULL;
}

osp_error *sequence_batcher_new(const osp_model_config *config,
                                const char *version_path, size_t max_sequences,
                                sequence_batcher **out) {
    const osp_sequence_batching *seq = &config->sequence_batching;
    osp_error *err = check_names(config);
    if (err)
        return err;
    sequence_batcher *sb = calloc(1, sizeof(*sb));
    if (!sb)
        return osp_error_out_of_memory();
    pthread_mutex_init(&sb->lock, NULL);
    cond_init_monotonic(&sb->reaper_wake);
    sb->config = config;
    for (size_t i = 0; i < seq->n_controls; i++)
        if (seq->controls[i].kind == OSP_SEQUENCE_CONTROL_CORRID)
            sb->corrid = &seq->controls[i];
    /* Triton normalises an idle limit of 0 to its default, 1 s. */
    uint64_t idle_us =
        seq->max_sequence_idle_us ? seq->max_sequence_idle_us : 1000000;
    sb->initial = calloc(seq->n_states + 1, sizeof(*sb->initial));
    sb->state_bytes = calloc(seq->n_states + 1, sizeof(*sb->state_bytes));
    sb->initial_is_zero =
        calloc(seq->n_states + 1, sizeof(*sb->initial_is_zero));
    if (!sb->initial || !sb->state_bytes || !sb->initial_is_zero)
        err = osp_error_out_of_memory();
    if (!err)
        err = sequence_table_init(
            &sb->table, max_sequences ? max_sequences : SEQUENCE_TABLE_CAPACITY,
            seq->n_states, idle_us * 1000u);
    for (size_t k = 0; k < seq->n_states && !err; k++) {
        const osp_sequence_state *st = &seq->states[k];
        sb->state_bytes[k] = state_row_bytes(st);
        if (st->initial_data_file) {
            err = read_initial_state(version_path, st, sb->state_bytes[k],
                                     &sb->initial[k]);
        } else if (!(sb->initial[k] =
                         osp_buffer_new_host(sb->state_bytes[k]))) {
            err = osp_error_out_of_memory();
        } else {
            memset(sb->initial[k]->data, 0, sb->state_bytes[k]);
            sb->initial_is_zero[k] = true;
        }
    }
    if (err) {
        sequence_batcher_free(sb);
        return err;
    }
    *out = sb;
    return NULL;
}

void sequence_batcher_free(sequence_batcher *sb) {
    if (!sb)
        return;
    sequence_batcher_stop(sb);
    pthread_cond_destroy(&sb->reaper_wake);
    size_t n_states = sb->config->sequence_batching.n_states;
    for (size_t k = 0; sb->initial && k < n_states; k++)
        osp_buffer_free(sb->initial[k]);
    free(sb->initial);
    /* The sequences' buffers first: they are on the instances' devices,
     * as the store's are. */
    if (sb->table.slots)
        sequence_table_destroy(&sb->table);
    sequence_state_store_destroy(&sb->store);
    free(sb->initial_is_zero);
    free(sb->state_bytes);
    pthread_mutex_destroy(&sb->lock);
    free(sb);
}

size_t sequence_batcher_extra_inputs(const sequence_batcher *sb) {
    const osp_sequence_batching *seq = &sb->config->sequence_batching;
    return seq->n_controls + seq->n_states;
}

void sequence_batcher_extra_input(const sequence_batcher *sb, size_t k,
                                  const char **name, osp_datatype *dtype) {
    const osp_sequence_batching *seq = &sb->config->sequence_batching;
    if (k < seq->n_controls) {
        *name = seq->controls[k].name;
        *dtype = seq->controls[k].dtype;
    } else {
        *name = seq->states[k - seq->n_controls].input_name;
        *dtype = seq->states[k - seq->n_controls].dtype;
    }
}

size_t sequence_batcher_extra_outputs(const sequence_batcher *sb) {
    return sb->config->sequence_batching.n_states;
}

const osp_sequence_state *sequence_batcher_state(const sequence_batcher *sb,
                                                 size_t k) {
    return &sb->config->sequence_batching.states[k];
}

size_t sequence_batcher_state_bytes(const sequence_batcher *sb, size_t k) {
    return sb->state_bytes[k];
}

void sequence_step_free(sequence_step *step) {
    if (!step)
        return;
    size_t n_states = step->batcher->config->sequence_batching.n_states;
    for (size_t k = 0; step->next_state && k < n_states; k++)
        osp_buffer_free(step->next_state[k]);
    free(step->next_state);
    free(step);
}

/* ---- one request's control and state tensors ----------------------------
 */

/* The value of control c for a request of the sequence `id` (NULL: a
 * filler row, whose CORRID is 0 or "") with the flags start, end and
 * ready, as a one-element tensor. NULL on OOM. */
static osp_buffer *control_tensor(const osp_sequence_control *c, bool start,
                                  bool end, bool ready, const sequence_id *id) {
    char text[32];
    if (c->kind == OSP_SEQUENCE_CONTROL_CORRID && c->dtype == OSP_TYPE_BYTES) {
        const char *s = !id             ? ""
                        : id->is_string ? id->string
                                        : sequence_id_format(id, text, 32);
        uint32_t len = (uint32_t)strlen(s);
        osp_buffer *buf = osp_buffer_new_host(4 + (size_t)len);
        if (buf) {
            memcpy(buf->data, &len, 4);
            memcpy((char *)buf->data + 4, s, len);
        }
        return buf;
    }
    osp_buffer *buf = osp_buffer_new_host(osp_datatype_byte_size(c->dtype));
    if (!buf)
        return NULL;
    if (c->kind == OSP_SEQUENCE_CONTROL_CORRID) {
        uint64_t v = id ? id->number : 0; /* numeric: the submit checked */
        if (c->dtype == OSP_TYPE_UINT64 || c->dtype == OSP_TYPE_INT64) {
            memcpy(buf->data, &v, 8);
        } else {
            uint32_t v32 = (uint32_t)v;
            memcpy(buf->data, &v32, 4);
        }
        return buf;
    }
    bool on = c->kind == OSP_SEQUENCE_CONTROL_START ? start
              : c->kind == OSP_SEQUENCE_CONTROL_END ? end
                                                    : ready;
    if (c->dtype == OSP_TYPE_INT32)
        memcpy(buf->data, &c->int32_false_true[on], 4);
    else if (c->dtype == OSP_TYPE_FP32)
        memcpy(buf->data, &c->fp32_false_true[on], 4);
    else
        *(uint8_t *)buf->data = c->bool_false_true[on] ? 1 : 0;
    return buf;
}

/* Adds `buf` (ownership moves, also on error) to p's request as extra
 * input k, and routes it (input_map). */
static osp_error *add_extra_input(const sequence_batcher *sb,
                                  pending_request *p, size_t k,
                                  const osp_shape *shape, osp_buffer *buf) {
    const char *name;
    osp_datatype dtype;
    if (!buf)
        return osp_error_out_of_memory();
    sequence_batcher_extra_input(sb, k, &name, &dtype);
    osp_error *err =
        osp_infer_request_add_input(p->req, name, dtype, shape, buf);
    if (err) {
        osp_buffer_free(buf);
        return err;
    }
    p->input_map[sb->config->n_inputs + k] = (int)(p->req->n_inputs - 1);
    return NULL;
}

/* Gives p (the request of its sequence now in flight; or with step NULL a
 * filler row) its control inputs. A filler gets START, END and READY
 * false and CORRID 0. The state inputs are no request inputs (their
 * input_map entries are -1): the batch gathers them on the instance's
 * device (sequence_batcher_state_row). */
static osp_error *attach_inputs(sequence_batcher *sb, pending_request *p,
                                const sequence_step *step) {
    const osp_model_config *cfg = sb->config;
    const osp_sequence_batching *seq = &cfg->sequence_batching;
    size_t n_map = cfg->n_inputs + sequence_batcher_extra_inputs(sb);
    int *map = realloc(p->input_map, sizeof(int) * (n_map + 1));
    if (!map)
        return osp_error_out_of_memory();
    p->input_map = map;
    bool batching = cfg->max_batch_size > 0;
    osp_shape one = {.rank = batching ? 2 : 1, .dims = {1, 1}};
    osp_error *err = NULL;
    for (size_t k = 0; k < seq->n_controls && !err; k++)
        err = add_extra_input(
            sb, p, k, &one,
            step
                ? control_tensor(&seq->controls[k], step->start, step->end,
                                 true, &step->slot->id)
                : control_tensor(&seq->controls[k], false, false, false, NULL));
    for (size_t k = 0; k < seq->n_states; k++)
        p->input_map[cfg->n_inputs + seq->n_controls + k] = -1;
    return err;
}

osp_error *sequence_batcher_state_row(sequence_batcher *sb,
                                      const pending_request *p, size_t instance,
                                      size_t k, const osp_buffer **out) {
    const sequence_step *step = p->sequence;
    *out = NULL;
    if (!step)
        return NULL; /* a warmup sample: it gives its states itself */
    if (step->filler)
        *out = sequence_state_zeros(&sb->store, instance, k);
    else if (step->slot && step->instance == (int)instance)
        /* Read without the lock: only the step in flight, this one,
         * changes the slot's state. */
        *out = step->slot->state[k] && !step->start
                   ? step->slot->state[k]
                   : sequence_state_initial(&sb->store, instance, k);
    if (!*out)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "model '%s': no state '%s' for a request on "
                             "instance %zu",
                             sb->config->name,
                             sb->config->sequence_batching.states[k].input_name,
                             instance);
    return NULL;
}

osp_error *sequence_batcher_next_state_row(sequence_batcher *sb,
                                           pending_request *p, size_t instance,
                                           size_t k, osp_buffer **out) {
    sequence_step *step = p->sequence;
    *out = NULL;
    if (!step || step->filler || !step->slot)
        return NULL; /* a warmup sample or a filler row: nobody keeps it */
    osp_error *err = sequence_state_alloc(&sb->store, instance, k, out);
    if (err)
        return err;
    osp_buffer_free(step->next_state[k]);
    step->next_state[k] = *out;
    return NULL;
}

/* ---- the flow of requests -------------------------------------------------
 */

/* Lock held. Appends p to slot's backlog. */
static void backlog_push_locked(sequence_batcher *sb, sequence_slot *slot,
                                pending_request *p) {
    p->next = NULL;
    if (slot->backlog_tail)
        slot->backlog_tail->next = p;
    else
        slot->backlog_head = p;
    slot->backlog_tail = p;
    atomic_fetch_add(&sb->backlogged, 1);
}

/* Lock held. Removes and returns the first request of slot's backlog, or
 * NULL when it is empty. */
static pending_request *backlog_pop_locked(sequence_batcher *sb,
                                           sequence_slot *slot) {
    pending_request *p = slot->backlog_head;
    if (!p)
        return NULL;
    slot->backlog_head = p->next;
    if (!slot->backlog_head)
        slot->backlog_tail = NULL;
    p->next = NULL;
    atomic_fetch_sub(&sb->backlogged, 1);
    return p;
}

size_t sequence_batcher_backlogged(sequence_batcher *sb) {
    return atomic_load(&sb->backlogged);
}

/* A list of requests, linked by ->next, that are to be answered
 * CANCELLED once the lock is dropped (answer_cancelled). */
typedef struct cancel_list {
    pending_request *head, **tail;
} cancel_list;

static void cancel_list_init(cancel_list *l) {
    l->head = NULL;
    l->tail = &l->head;
}

/* Lock held. Cancels the sequence of `slot`, as Triton releases a
 * sequence whose next request was cancelled: every request waiting in its
 * backlog moves to `out` (to be answered CANCELLED), and the sequence is
 * released (its id forgotten: a later request needs START; its batch slot
 * goes to the oldest waiting sequence). Nothing of it may be in flight. */
static void cancel_sequence_locked(sequence_batcher *sb, sequence_slot *slot,
                                   cancel_list *out) {
    pending_request *p;
    while ((p = backlog_pop_locked(sb, slot))) {
        p->sequence->slot = NULL; /* its sequence is gone */
        *out->tail = p;
        out->tail = &p->next;
    }
    sequence_table_release(&sb->table, slot);
}

/* Whether any request waiting in slot's backlog has been cancelled. */
static bool backlog_has_cancelled(const sequence_slot *slot) {
    for (const pending_request *p = slot->backlog_head; p; p = p->next)
        if (pending_request_cancelled(p))
            return true;
    return false;
}

/* Answers every request of the list CANCELLED (lock not held). */
static void answer_cancelled(cancel_list *l) {
    pending_request *p = l->head;
    while (p) {
        pending_request *next = p->next;
        p->next = NULL;
        pending_request_cancel(p);
        p = next;
    }
    cancel_list_init(l);
}

/* Lock held. The slot's request in flight has finished or was refused:
 * returns the next waiting request, which is then in flight, or NULL;
 * after the sequence's END (ended) with nothing waiting, releases the
 * slot. When the next request has been cancelled by its client the
 * sequence is cancelled instead (cancel_sequence_locked, into
 * `cancelled`), as Triton's sequence batcher does. */
static pending_request *leave_flight_locked(sequence_batcher *sb,
                                            sequence_slot *slot, bool ended,
                                            cancel_list *cancelled) {
    slot->in_flight = false;
    slot->last_active_ns = osp_now_ns();
    pending_request *next = slot->backlog_head;
    if (next && pending_request_cancelled(next)) {
        cancel_sequence_locked(sb, slot, cancelled);
        return NULL;
    }
    if (next) {
        backlog_pop_locked(sb, slot);
        slot->in_flight = true;
        return next;
    }
    if (ended)
        sequence_table_release(&sb->table, slot);
    return NULL;
}

/* Lock held. The first waiting request of each sequence that a release
 * gave a batch slot, now in flight, linked by ->next after *tail (NULL:
 * none). A promoted sequence with a cancelled request among those waiting
 * is cancelled instead (into `cancelled`), passing the batch slot on, as
 * Triton does with a cancelled sequence of its backlog. */
static void take_promoted_locked(sequence_batcher *sb, pending_request ***tail,
                                 cancel_list *cancelled) {
    sequence_slot *s;
    while ((s = sequence_table_take_promoted(&sb->table))) {
        pending_request *first = s->backlog_head;
        if (!first)
            continue; /* nothing to run: reaped once idle */
        if (backlog_has_cancelled(s)) {
            cancel_sequence_locked(sb, s, cancelled);
            continue;
        }
        backlog_pop_locked(sb, s);
        s->in_flight = true;
        **tail = first;
        *tail = &first->next;
    }
}

/* Hands p, its sequence's request now in flight, to the model's queue
 * (the instance holding the sequence's batch slot), then each request of
 * the list `more` (linked by ->next, likewise in flight). When the queue
 * refuses one its sequence moves on to its next request, and so on; a
 * sequence released on the way may give its batch slot to a waiting one,
 * whose first request follows. callers_own: p is the submitter's own
 * request, whose refusal is returned (p freed); every other refused
 * request is failed through its completion callback. */
static osp_error *dispatch(sequence_batcher *sb, osp_model *model,
                           pending_request *p, pending_request *more,
                           bool callers_own) {
    osp_error *result = NULL;
    pending_request **more_tail = &more;
    while (*more_tail)
        more_tail = &(*more_tail)->next;
    for (;;) {
        if (!p && more) {
            p = more;
            more = p->next;
            p->next = NULL;
            if (!more)
                more_tail = &more;
        }
        if (!p)
            break;
        p->sequence->instance = p->sequence->slot->instance;
        p->sequence->batch_index = p->sequence->slot->batch_index;
        osp_error *err = attach_inputs(sb, p, p->sequence);
        if (!err)
            err = model_enqueue_keep(model, p);
        if (!err) {
            p = NULL; /* it may already have run: not touched again */
            callers_own = false;
            continue;
        }
        sequence_step *step = p->sequence;
        cancel_list cancelled;
        cancel_list_init(&cancelled);
        pthread_mutex_lock(&sb->lock);
        pending_request *next =
            leave_flight_locked(sb, step->slot, step->end, &cancelled);
        take_promoted_locked(sb, &more_tail, &cancelled);
        pthread_mutex_unlock(&sb->lock);
        answer_cancelled(&cancelled);
        step->slot = NULL; /* its outcome is recorded */
        if (callers_own) {
            result = err;
            pending_request_free(p);
            callers_own = false;
        } else {
            pending_request_fail(p, err);
        }
        p = next;
    }
    return result;
}

/* Reads the request's sequence_id, sequence_start and sequence_end
 * parameters (the frontends checked their types). */
static void read_sequence_parameters(const osp_infer_request *req,
                                     sequence_id *id, bool *start, bool *end) {
    for (size_t i = 0; i < req->n_parameters; i++) {
        const osp_parameter *prm = &req->parameters[i];
        if (!strcmp(prm->key, "sequence_id")) {
            id->is_string = prm->type == OSP_PARAM_STRING;
            id->string = id->is_string ? prm->value.s : NULL;
            id->number = id->is_string ? 0 : (uint64_t)prm->value.i;
        } else if (!strcmp(prm->key, "sequence_start") &&
                   prm->type == OSP_PARAM_BOOL) {
            *start = prm->value.b;
        } else if (!strcmp(prm->key, "sequence_end") &&
                   prm->type == OSP_PARAM_BOOL) {
            *end = prm->value.b;
        }
    }
}

osp_error *sequence_batcher_submit(sequence_batcher *sb, osp_model *model,
                                   pending_request *p) {
    const char *name = sb->config->name;
    sequence_id id = {0};
    bool start = false, end = false;
    osp_error *err = NULL;
    sequence_step *step = NULL;
    read_sequence_parameters(p->req, &id, &start, &end);
    if (id.is_string ? !id.string[0] : id.number == 0)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "inference request to model '%s' must specify a "
                            "non-zero or non-empty correlation ID",
                            name);
    else if (p->batch_size > 1)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "inference request to model '%s' must specify "
                            "batch-size 1 due to requirements of sequence "
                            "batcher",
                            name);
    else if (id.is_string && sb->corrid && sb->corrid->dtype != OSP_TYPE_BYTES)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "sequence ID '%s' of a request to model '%s' is "
                            "a string but its CORRID control input is %s",
                            id.string, name,
                            osp_datatype_config_name(sb->corrid->dtype));
    if (err)
        goto fail;
    step = calloc(1, sizeof(*step));
    size_t n_states = sequence_batcher_extra_outputs(sb);
    if (!step ||
        !(step->next_state = calloc(n_states + 1, sizeof(*step->next_state)))) {
        free(step);
        step = NULL;
        err = osp_error_out_of_memory();
        goto fail;
    }
    step->batcher = sb;
    step->start = start;
    step->end = end;

    pthread_mutex_lock(&sb->lock);
    uint64_t now = osp_now_ns();
    /* Sequences waiting for a batch slot get the slots of idle ones. */
    if (sequence_table_waiting(&sb->table) > 0)
        sequence_table_reap(&sb->table, now);
    sequence_slot *slot = sequence_table_find(&sb->table, &id, now);
    if (!slot && !start) {
        char text[64];
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "inference request for sequence %s to model '%s' "
                            "must specify the START flag on the first "
                            "request of the sequence",
                            id.is_string
                                ? id.string
                                : sequence_id_format(&id, text, sizeof text),
                            name);
    } else if (!slot) {
        err = sequence_table_open(&sb->table, &id, now, &slot);
    }
    pending_request *promoted = NULL, **promoted_tail = &promoted;
    cancel_list cancelled;
    cancel_list_init(&cancelled);
    take_promoted_locked(sb, &promoted_tail, &cancelled);
    if (err) {
        pthread_mutex_unlock(&sb->lock);
        answer_cancelled(&cancelled);
        osp_error_free(dispatch(sb, model, NULL, promoted, false));
        goto fail;
    }
    step->slot = slot;
    p->sequence = step;
    p->next = NULL;
    slot->last_active_ns = now;
    if (end)
        slot->ending = true;
    /* A sequence waiting for a batch slot runs nothing yet. */
    bool run_now = !slot->in_flight && !slot->waiting_for_slot;
    if (slot->waiting_for_slot)
        pthread_cond_signal(&sb->reaper_wake);
    if (run_now) {
        slot->in_flight = true;
    } else {
        backlog_push_locked(sb, slot, p);
    }
    pthread_mutex_unlock(&sb->lock);
    answer_cancelled(&cancelled);
    return dispatch(sb, model, run_now ? p : NULL, promoted, run_now);

fail:
    /* Triton answers these without the request-id prefix. */
    sequence_step_free(step);
    pending_request_free(p);
    return err;
}

void sequence_batcher_step_finished(pending_request *p, bool succeeded) {
    sequence_step *step = p->sequence;
    if (!step || !step->slot)
        return;
    sequence_batcher *sb = step->batcher;
    sequence_slot *slot = step->slot;
    size_t n_states = sequence_batcher_extra_outputs(sb);
    /* Taken out of its instance's queue because its client cancelled it:
     * `direct` releases the sequence (Triton's DirectSequenceBatch finds
     * it at the head of the slot's queue), `oldest` goes on with the next
     * request (its dynamic batcher skipped it). */
    bool cancel_sequence =
        !succeeded && p->failure_reason == OSP_FAILURE_CANCELED &&
        sb->config->sequence_batching.strategy == OSP_SEQUENCE_DIRECT;
    cancel_list cancelled;
    cancel_list_init(&cancelled);
    pthread_mutex_lock(&sb->lock);
    for (size_t k = 0; k < n_states; k++) {
        /* A failed START leaves the initial value, not the old state. */
        if (succeeded ? step->next_state[k] != NULL : step->start) {
            osp_buffer_free(slot->state[k]);
            slot->state[k] = succeeded ? step->next_state[k] : NULL;
            step->next_state[k] = NULL;
        }
    }
    pending_request *next = NULL;
    if (cancel_sequence) {
        slot->in_flight = false;
        cancel_sequence_locked(sb, slot, &cancelled);
    } else {
        next = leave_flight_locked(sb, slot, step->end, &cancelled);
    }
    pending_request *promoted = NULL, **promoted_tail = &promoted;
    if (sequence_table_waiting(&sb->table) > 0)
        sequence_table_reap(&sb->table, osp_now_ns());
    take_promoted_locked(sb, &promoted_tail, &cancelled);
    pthread_mutex_unlock(&sb->lock);
    step->slot = NULL;
    answer_cancelled(&cancelled);
    if (next || promoted)
        osp_error_free(dispatch(sb, p->model, next, promoted, false));
}

/* ---- batch slots: filler rows, the reaper ---------------------------------
 */

osp_error *sequence_batcher_filler_new(sequence_batcher *sb,
                                       const pending_request *like,
                                       pending_request **out) {
    const osp_model_config *cfg = sb->config;
    osp_error *err = NULL;
    pending_request *f = calloc(1, sizeof(*f));
    if (!f)
        return osp_error_out_of_memory();
    f->batch_size = 1;
    f->req = osp_infer_request_new(cfg->name, -1);
    f->input_map = malloc(sizeof(int) * (cfg->n_inputs + 1));
    f->output_requested = calloc(cfg->n_outputs + 1, sizeof(bool));
    if (!f->req || !f->input_map || !f->output_requested) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < cfg->n_inputs && !err; i++) {
        f->input_map[i] = -1;
        int j = like->input_map[i];
        if (j < 0)
            continue; /* an optional input the batch does not give */
        const osp_infer_input *in = &like->req->inputs[j];
        size_t bytes = osp_datatype_byte_size(in->dtype);
        int64_t elements = 0;
        if (!osp_shape_element_count(&in->shape, &elements) || elements < 0) {
            err = osp_error_new(OSP_ERROR_INTERNAL, "bad filler shape");
            break;
        }
        /* BYTES: every element the empty string (a zero length). */
        size_t size =
            (size_t)elements * (in->dtype == OSP_TYPE_BYTES ? 4 : bytes);
        osp_buffer *zeros = osp_buffer_new_host(size);
        if (!zeros) {
            err = osp_error_out_of_memory();
            break;
        }
        memset(zeros->data, 0, size);
        err = osp_infer_request_add_input(f->req, cfg->inputs[i].name,
                                          in->dtype, &in->shape, zeros);
        if (err)
            osp_buffer_free(zeros);
        else
            f->input_map[i] = (int)(f->req->n_inputs - 1);
    }
    if (!err && !(f->sequence = calloc(1, sizeof(*f->sequence))))
        err = osp_error_out_of_memory();
    if (!err) {
        /* Its state rows are zeros (sequence_batcher_state_row). */
        f->sequence->batcher = sb;
        f->sequence->filler = true;
        f->sequence->instance = f->sequence->batch_index = -1;
        err = attach_inputs(sb, f, NULL);
    }
out:
    if (err) {
        pending_request_free(f);
        return err;
    }
    *out = f;
    return NULL;
}

/* Releases idle sequences that hold a batch slot while others wait for
 * one, when they become idle, and runs the first request of each waiting
 * sequence that gets the freed slot. Sleeps while nobody waits. */
static void *reaper_main(void *arg) {
    sequence_batcher *sb = arg;
    pthread_mutex_lock(&sb->lock);
    while (!sb->stopping) {
        uint64_t at = sequence_table_waiting(&sb->table) > 0
                          ? sequence_table_next_idle_ns(&sb->table)
                          : UINT64_MAX;
        uint64_t now = osp_now_ns();
        if (at == UINT64_MAX) {
            pthread_cond_wait(&sb->reaper_wake, &sb->lock);
            continue;
        }
        if (at > now) {
            cond_wait_until(&sb->reaper_wake, &sb->lock, at);
            continue;
        }
        sequence_table_reap(&sb->table, now);
        pending_request *promoted = NULL, **tail = &promoted;
        cancel_list cancelled;
        cancel_list_init(&cancelled);
        take_promoted_locked(sb, &tail, &cancelled);
        pthread_mutex_unlock(&sb->lock);
        answer_cancelled(&cancelled);
        if (promoted)
            osp_error_free(dispatch(sb, sb->model, NULL, promoted, false));
        pthread_mutex_lock(&sb->lock);
    }
    pthread_mutex_unlock(&sb->lock);
    return NULL;
}

osp_error *sequence_batcher_start(sequence_batcher *sb, osp_model *model,
                                  size_t n_instances) {
    const osp_model_config *cfg = sb->config;
    const osp_sequence_batching *seq = &cfg->sequence_batching;
    size_t per_instance =
        cfg->max_batch_size > 0 ? (size_t)cfg->max_batch_size : 1;
    if (seq->strategy == OSP_SEQUENCE_OLDEST &&
        seq->max_candidate_sequences > 0)
        per_instance = (size_t)seq->max_candidate_sequences;
    osp_error *err =
        sequence_table_set_batch_slots(&sb->table, n_instances, per_instance);
    if (err)
        return err;
    /* Each instance gets the states' initial values once, on its device. */
    osp_device **devices = calloc(n_instances + 1, sizeof(*devices));
    if (!devices)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < n_instances; i++)
        devices[i] = model->instances[i].device;
    err = sequence_state_store_init(&sb->store, seq->n_states, sb->state_bytes,
                                    sb->initial, sb->initial_is_zero, devices,
                                    n_instances);
    free(devices);
    if (err)
        return err;
    sb->model = model;
    if (pthread_create(&sb->reaper, NULL, reaper_main, sb) != 0)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "cannot start the sequence reaper thread");
    sb->reaper_started = true;
    return NULL;
}

size_t sequence_batcher_slots_per_instance(const sequence_batcher *sb) {
    return sb->table.per_instance;
}

void sequence_batcher_stop(sequence_batcher *sb) {
    pthread_mutex_lock(&sb->lock);
    bool started = sb->reaper_started;
    sb->stopping = true;
    sb->reaper_started = false;
    pthread_cond_signal(&sb->reaper_wake);
    pthread_mutex_unlock(&sb->lock);
    if (started)
        pthread_join(sb->reaper, NULL);
    /* The model no longer runs anything: the sequences waiting for a
     * batch slot get the slots of idle ones, their requests fail in the
     * stopped model's queue, which leaves them idle in turn, and so on
     * until none waits (or none can move on). */
    for (;;) {
        pthread_mutex_lock(&sb->lock);
        size_t waiting_before = sequence_table_waiting(&sb->table);
        pending_request *promoted = NULL, **tail = &promoted;
        cancel_list cancelled;
        cancel_list_init(&cancelled);
        if (sb->table.slots)
            sequence_table_reap(&sb->table, UINT64_MAX);
        take_promoted_locked(sb, &tail, &cancelled);
        size_t waiting_after = sequence_table_waiting(&sb->table);
        pthread_mutex_unlock(&sb->lock);
        answer_cancelled(&cancelled);
        if (promoted && sb->model)
            osp_error_free(dispatch(sb, sb->model, NULL, promoted, false));
        if (waiting_after == 0 ||
            (!promoted && waiting_after == waiting_before))
            break;
    }
}
