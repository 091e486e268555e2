/*
 * Sessions: one per instance. A session owns an arena of device memory
 * (grown to the largest plan it has run) and, on a device whose memory is
 * not the host's, device copies of the host values its plans read
 * (weights, folded constants, shape tensors), made the first time a value
 * is needed. On the CPU device the weights are the model's own host
 * memory, shared by every instance without a copy.
 */
#include <stdlib.h>
#include <string.h>

#include "osprey/clock.h"

#include "onnx_rt_internal.h"

typedef struct device_copy {
    const void *host; /* the host value it mirrors (borrowed) */
    osp_buffer *buf;
} device_copy;

struct onnx_session {
    onnx_rt_model *model;
    osp_device *device;
    osp_stream *stream;
    bool host_memory; /* the device's memory is host memory (CPU) */
    osp_buffer *arena;
    device_copy *copies;
    size_t n_copies, cap_copies;
    /* per-run scratch, sized for the model */
    void **ptr; /* per value */
    const void **in_ptrs;
    void **out_ptrs;
    size_t max_io;
    /* per-op timing, when profiling */
    bool profiling;
    struct op_time {
        const char *op_type;
        uint64_t calls, ns;
    } *times;
    size_t n_times;
};

osp_error *onnx_session_new(onnx_rt_model *m, osp_device *device,
                            osp_stream *stream, onnx_session **out) {
    osp_error *err = onnx_rt_model_check_device(m, device);
    if (err)
        return err;
    onnx_session *s = calloc(1, sizeof *s);
    if (!s)
        return osp_error_out_of_memory();
    s->model = m;
    s->device = device;
    s->stream = stream;
    osp_device_info info;
    osp_device_get_info(device, &info);
    s->host_memory = info.type == OSP_DEVICE_CPU;
    for (size_t i = 0; i < m->n_nodes; i++) {
        if (m->nodes[i].n_in > s->max_io)
            s->max_io = m->nodes[i].n_in;
        if (m->nodes[i].n_out > s->max_io)
            s->max_io = m->nodes[i].n_out;
    }
    s->ptr = calloc(m->n_values ? m->n_values : 1, sizeof *s->ptr);
    s->in_ptrs = calloc(s->max_io ? s->max_io : 1, sizeof *s->in_ptrs);
    s->out_ptrs = calloc(s->max_io ? s->max_io : 1, sizeof *s->out_ptrs);
    if (!s->ptr || !s->in_ptrs || !s->out_ptrs) {
        onnx_session_free(s);
        return osp_error_out_of_memory();
    }
    *out = s;
    return NULL;
}

void onnx_session_free(onnx_session *s) {
    if (!s)
        return;
    if (s->stream && (s->arena || s->n_copies)) {
        osp_error *err = osp_stream_synchronize(s->stream);
        osp_error_free(err);
    }
    osp_buffer_free(s->arena);
    for (size_t i = 0; i < s->n_copies; i++)
        osp_buffer_free(s->copies[i].buf);
    free(s->copies);
    free(s->times);
    free(s->ptr);
    free(s->in_ptrs);
    free(s->out_ptrs);
    free(s);
}

size_t onnx_session_arena_bytes(const onnx_session *s) {
    return s->arena ? s->arena->size : 0;
}

/* The device address of a model constant: itself on the CPU, else a
 * copy this session uploads once (keyed by the constant's host address,
 * which lives as long as the model). */
static osp_error *device_value(onnx_session *s, const void *host,
                               size_t bytes, const void **out) {
    if (s->host_memory) {
        *out = host;
        return NULL;
    }
    for (size_t i = 0; i < s->n_copies; i++)
        if (s->copies[i].host == host) {
            *out = s->copies[i].buf->data;
            return NULL;
        }
    if (s->n_copies == s->cap_copies) {
        size_t cap = s->cap_copies ? s->cap_copies * 2 : 64;
        device_copy *grown = realloc(s->copies, cap * sizeof *grown);
        if (!grown)
            return osp_error_out_of_memory();
        s->copies = grown;
        s->cap_copies = cap;
    }
    osp_buffer *buf = NULL;
    osp_error *err = osp_device_alloc(s->device, bytes, &buf);
    if (!err && bytes)
        err = osp_memcpy_async(s->stream, buf->data, host, bytes,
                               OSP_COPY_HOST_TO_DEVICE);
    if (err) {
        osp_buffer_free(buf);
        return err;
    }
    s->copies[s->n_copies++] = (device_copy){.host = host, .buf = buf};
    *out = buf->data;
    return NULL;
}

static osp_error *ensure_arena(onnx_session *s, size_t bytes) {
    if (s->arena && s->arena->size >= bytes)
        return NULL;
    if (s->arena) {
        /* Work still queued may use the old arena. */
        osp_error *err = osp_stream_synchronize(s->stream);
        if (err)
            return err;
        osp_buffer_free(s->arena);
        s->arena = NULL;
    }
    return osp_device_alloc(s->device, bytes, &s->arena);
}

/* Points s->ptr[v] at every value the plan's steps and outputs touch. */
static osp_error *resolve_values(onnx_session *s, const onnx_plan *p,
                                 const onnx_io *inputs) {
    onnx_rt_model *m = s->model;
    char *arena = s->arena ? s->arena->data : NULL;
    for (size_t v = 0; v < m->n_values; v++) {
        s->ptr[v] = NULL;
        int r = p->root[v];
        const rt_value *rv = &m->values[r];
        if (rv->graph_input >= 0) {
            s->ptr[v] = (void *)inputs[rv->graph_input].data;
        } else if (p->desc[r].host && s->host_memory) {
            s->ptr[v] = (void *)p->desc[r].host;
        } else if (p->desc[r].host && !rv->konst) {
            /* A value of this plan: sent into its block each run. */
            if (p->offset[r] < 0)
                continue; /* no step reads it */
            size_t bytes = rt_desc_bytes(&p->desc[r]);
            s->ptr[v] = arena + p->offset[r];
            osp_error *err =
                v == (size_t)r && bytes
                    ? osp_memcpy_async(s->stream, s->ptr[v], p->desc[r].host,
                                       bytes, OSP_COPY_HOST_TO_DEVICE)
                    : NULL;
            if (err)
                return err;
        } else if (p->desc[r].host) {
            const void *dev = NULL;
            osp_error *err = device_value(s, p->desc[r].host,
                                          rt_desc_bytes(&p->desc[r]), &dev);
            if (err)
                return err;
            s->ptr[v] = (void *)dev;
        } else if (p->offset[r] >= 0) {
            s->ptr[v] = arena + p->offset[r];
        }
    }
    return NULL;
}

/* Asks the caller for each output's buffer; a DIRECT output's storage
 * becomes that buffer. copy_to[k] is where a COPY output goes. */
static osp_error *bind_outputs(onnx_session *s, const onnx_plan *p,
                               onnx_output_alloc_fn alloc, void *alloc_ctx,
                               void **copy_to) {
    onnx_rt_model *m = s->model;
    for (size_t k = 0; k < m->n_outputs; k++) {
        int v = m->outputs[k];
        const onnx_desc *d = &p->desc[v];
        void *buf = NULL;
        copy_to[k] = NULL;
        osp_error *err =
            alloc(alloc_ctx, k, d->dtype, &d->shape, rt_desc_bytes(d), &buf);
        if (err)
            return err;
        if (!buf)
            continue;
        if (p->output_mode[k] == PLAN_OUTPUT_DIRECT) {
            /* Every view of this root reads the caller's buffer too. */
            void *old = s->ptr[v];
            for (size_t w = 0; w < m->n_values; w++)
                if (s->ptr[w] == old && p->root[w] == p->root[v])
                    s->ptr[w] = buf;
        } else {
            copy_to[k] = buf;
        }
    }
    return NULL;
}

static osp_error *run_step(onnx_session *s, const onnx_plan *p,
                           const plan_step *st) {
    const rt_node *n = &s->model->nodes[st->node];
    for (size_t j = 0; j < n->n_in; j++)
        s->in_ptrs[j] = n->in[j] >= 0 ? s->ptr[n->in[j]] : NULL;
    for (size_t j = 0; j < n->n_out; j++)
        s->out_ptrs[j] = n->out[j] >= 0 ? s->ptr[n->out[j]] : NULL;
    onnx_run_ctx ctx = {
        .stream = s->stream,
        .node = n->node,
        .state = n->state,
        .n_inputs = n->n_in,
        .in_desc = st->in_desc,
        .in = s->in_ptrs,
        .n_outputs = n->n_out,
        .out_desc = st->out_desc,
        .out = s->out_ptrs,
        .workspace = st->ws_bytes && s->arena
                         ? (char *)s->arena->data + st->ws_offset
                         : NULL,
    };
    (void)p;
    return rt_node_error(n->node, n->op->run(&ctx));
}

void onnx_session_set_profiling(onnx_session *s, bool on) {
    s->profiling = on;
}

/* Adds the time since `start` (after the step's work is done) to op_type's
 * total. */
static void profile_step(onnx_session *s, const char *op_type,
                         uint64_t start) {
    osp_error_free(osp_stream_synchronize(s->stream));
    uint64_t ns = osp_now_ns() - start;
    for (size_t i = 0; i < s->n_times; i++)
        if (strcmp(s->times[i].op_type, op_type) == 0) {
            s->times[i].calls++;
            s->times[i].ns += ns;
            return;
        }
    struct op_time *grown =
        realloc(s->times, (s->n_times + 1) * sizeof *grown);
    if (!grown)
        return;
    s->times = grown;
    s->times[s->n_times++] =
        (struct op_time){.op_type = op_type, .calls = 1, .ns = ns};
}

static int by_time_desc(const void *a, const void *b) {
    const struct op_time *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

void onnx_session_profile_report(const onnx_session *s, FILE *out) {
    struct op_time *sorted = malloc((s->n_times + 1) * sizeof *sorted);
    if (!sorted)
        return;
    memcpy(sorted, s->times, s->n_times * sizeof *sorted);
    qsort(sorted, s->n_times, sizeof *sorted, by_time_desc);
    uint64_t total = 0;
    for (size_t i = 0; i < s->n_times; i++)
        total += sorted[i].ns;
    for (size_t i = 0; i < s->n_times; i++)
        fprintf(out, "%-24s %8llu calls %10.3f ms %5.1f%%\n",
                sorted[i].op_type, (unsigned long long)sorted[i].calls,
                sorted[i].ns / 1e6, total ? 100.0 * sorted[i].ns / total : 0);
    free(sorted);
}

osp_error *onnx_session_run(onnx_session *s, const onnx_io *inputs,
                            size_t n_inputs, onnx_output_alloc_fn alloc,
                            void *alloc_ctx) {
    onnx_rt_model *m = s->model;
    if (n_inputs != m->n_inputs)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "the model takes %zu inputs, got %zu",
                             m->n_inputs, n_inputs);
    onnx_plan *p = NULL;
    osp_error *err = onnx_plan_acquire(m, inputs, s->host_memory, &p);
    if (err)
        return err;
    void **copy_to = calloc(m->n_outputs ? m->n_outputs : 1, sizeof *copy_to);
    if (!copy_to) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if ((err = ensure_arena(s, p->arena_bytes)) ||
        (err = resolve_values(s, p, inputs)) ||
        (err = bind_outputs(s, p, alloc, alloc_ctx, copy_to)))
        goto out;
    for (size_t i = 0; i < p->n_steps; i++) {
        uint64_t start = s->profiling ? osp_now_ns() : 0;
        if ((err = run_step(s, p, &p->steps[i])))
            goto out;
        if (s->profiling)
            profile_step(s, m->nodes[p->steps[i].node].node->op_type, start);
    }
    for (size_t k = 0; k < m->n_outputs; k++) {
        int v = m->outputs[k];
        size_t bytes = rt_desc_bytes(&p->desc[v]);
        if (!copy_to[k] || bytes == 0)
            continue;
        if ((err = osp_memcpy_async(s->stream, copy_to[k], s->ptr[v], bytes,
                                    OSP_COPY_DEVICE_TO_DEVICE)))
            goto out;
    }
out:
    free(copy_to);
    onnx_plan_release(m, p);
    return err;
}
