/*
 * Sessions: one per instance. A session owns an arena of device memory
 * (grown to the largest plan it has run). On a device whose memory is not
 * the host's, the model's constants (weights, folded values) come from the
 * store the model's sessions on that device share (onnx_weights.c); on the
 * CPU device they are the model's own host memory.
 *
 * Graphs (when the model asks and the device can record them): a
 * session's inputs are copied into blocks of its arena placed after the
 * plan's, so that every pointer a plan's steps use is the session's own
 * and stays put from run to run. The first run of a plan is enqueued step
 * by step (the warm-up, with the arena already sized); the second records
 * the steps as a graph and launches it; later ones only launch it. A
 * graph is dropped when the arena has to move, and the least recently
 * used one when the session holds max_graphs. A plan whose recording the
 * device refuses (a step that synchronises, or launches a host function)
 * keeps running step by step.
 */
#include <stdlib.h>
#include <string.h>

#include "osprey/clock.h"
#include "osprey/log.h"

#include "onnx_rt_internal.h"

#define IO_ALIGNMENT 256 /* input blocks start where cudaMalloc'd memory may */

/* What a session knows of one plan (keyed by plan id) for graphs. */
typedef struct session_graph {
    uint64_t plan_id;
    osp_graph *graph; /* NULL: not recorded (yet) */
    bool warm;        /* ran once step by step */
    bool eager_only;  /* the device refused to record it */
    uint64_t last_used;
} session_graph;

struct onnx_session {
    onnx_rt_model *model;
    osp_device *device;
    osp_stream *stream;
    bool host_memory; /* the device's memory is host memory (CPU) */
    osp_buffer *arena;
    rt_weights *weights; /* NULL on the CPU device */
    /* graphs (see the top of the file) */
    bool graphs;
    session_graph *graph_cache;
    size_t n_graphs;
    uint64_t graph_clock;
    onnx_graph_stats graph_stats;
    const void **input_ptrs; /* per graph input: where the steps read it */
    /* per-run scratch, sized for the model */
    void **ptr; /* per value */
    bool *read_fp32; /* per value: a step (or output) reads its FP32 copy */
    const void **in_ptrs;
    const void **in_fp16; /* per node input: FP16 copies (precision fp16) */
    void **out_ptrs;
    size_t max_io;
    /* the bytes of the strings this run's ops made (Cast to STRING):
     * reset at the start of each run, so a run's STRING outputs point
     * into it until the next run */
    onnx_string_pool strings;
    /* per-op timing, when profiling */
    onnx_profile_mode profiling;
    struct op_time {
        const char *key; /* an op type, or a node's name */
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
    if (m->has_strings && !s->host_memory) {
        free(s);
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "the model has STRING tensors, which the ONNX "
                             "runtime runs on the CPU device only (device "
                             "%s); give it an instance_group of kind "
                             "KIND_CPU",
                             info.name);
    }
    s->graphs = m->opts.graphs && !s->host_memory &&
                osp_stream_supports_graphs(stream);
    if (!s->host_memory && (err = rt_weights_acquire(m, device, &s->weights))) {
        free(s);
        return err;
    }
    for (size_t i = 0; i < m->n_nodes; i++) {
        if (m->nodes[i].n_in > s->max_io)
            s->max_io = m->nodes[i].n_in;
        if (m->nodes[i].n_out > s->max_io)
            s->max_io = m->nodes[i].n_out;
    }
    s->ptr = calloc(m->n_values ? m->n_values : 1, sizeof *s->ptr);
    s->in_ptrs = calloc(s->max_io ? s->max_io : 1, sizeof *s->in_ptrs);
    s->in_fp16 = calloc(s->max_io ? s->max_io : 1, sizeof *s->in_fp16);
    s->read_fp32 = calloc(m->n_values ? m->n_values : 1, sizeof *s->read_fp32);
    s->out_ptrs = calloc(s->max_io ? s->max_io : 1, sizeof *s->out_ptrs);
    s->input_ptrs =
        calloc(m->n_inputs ? m->n_inputs : 1, sizeof *s->input_ptrs);
    s->graph_cache = s->graphs ? calloc(m->opts.max_graphs,
                                        sizeof *s->graph_cache)
                               : NULL;
    if (!s->ptr || !s->in_ptrs || !s->in_fp16 || !s->read_fp32 ||
        !s->out_ptrs || !s->input_ptrs ||
        (s->graphs && !s->graph_cache)) {
        onnx_session_free(s);
        return osp_error_out_of_memory();
    }
    *out = s;
    return NULL;
}

void onnx_session_free(onnx_session *s) {
    if (!s)
        return;
    if (s->stream && (s->arena || s->weights)) {
        osp_error *err = osp_stream_synchronize(s->stream);
        osp_error_free(err);
    }
    for (size_t i = 0; i < s->n_graphs; i++)
        osp_graph_free(s->graph_cache[i].graph);
    free(s->graph_cache);
    osp_buffer_free(s->arena);
    rt_weights_release(s->model, s->weights);
    free(s->input_ptrs);
    free(s->times);
    free(s->ptr);
    free(s->read_fp32);
    free(s->in_ptrs);
    free(s->in_fp16);
    free(s->out_ptrs);
    onnx_string_pool_destroy(&s->strings);
    free(s);
}

size_t onnx_session_arena_bytes(const onnx_session *s) {
    return s->arena ? s->arena->size : 0;
}

size_t onnx_session_weight_bytes(const onnx_session *s) {
    return s->weights ? rt_weights_bytes(s->weights) : 0;
}

void onnx_session_graph_stats(const onnx_session *s, onnx_graph_stats *out) {
    *out = s->graph_stats;
    out->graphs = 0;
    for (size_t i = 0; i < s->n_graphs; i++)
        out->graphs += s->graph_cache[i].graph != NULL;
}

/* Frees every graph: they point into an arena about to move. */
static void drop_graphs(onnx_session *s) {
    for (size_t i = 0; i < s->n_graphs; i++)
        if (s->graph_cache[i].graph) {
            osp_graph_free(s->graph_cache[i].graph);
            s->graph_cache[i].graph = NULL;
            s->graph_stats.invalidated++;
        }
}

static osp_error *ensure_arena(onnx_session *s, size_t bytes) {
    if (s->arena && s->arena->size >= bytes)
        return NULL;
    if (s->arena) {
        /* Work still queued may use the old arena. */
        osp_error *err = osp_stream_synchronize(s->stream);
        if (err)
            return err;
        drop_graphs(s);
        osp_buffer_free(s->arena);
        s->arena = NULL;
    }
    return osp_device_alloc(s->device, bytes, &s->arena);
}

static size_t align_io(size_t n) {
    return (n + IO_ALIGNMENT - 1) / IO_ALIGNMENT * IO_ALIGNMENT;
}

/* The arena this run needs: the plan's, then (with graphs) a block per
 * input. Zero on overflow. */
static size_t arena_for_run(const onnx_session *s, const onnx_plan *p,
                            const onnx_io *inputs) {
    size_t total = p->arena_bytes;
    if (!s->graphs)
        return total;
    total = align_io(total);
    for (size_t i = 0; i < s->model->n_inputs; i++) {
        size_t add = align_io(inputs[i].byte_size);
        if (add < inputs[i].byte_size || total > SIZE_MAX - add)
            return 0;
        total += add;
    }
    return total ? total : 1;
}

/* Sets s->input_ptrs: the caller's inputs, or with graphs the session's
 * input blocks, filled from them on the stream. */
static osp_error *place_inputs(onnx_session *s, const onnx_plan *p,
                               const onnx_io *inputs) {
    onnx_rt_model *m = s->model;
    size_t off = align_io(p->arena_bytes);
    for (size_t i = 0; i < m->n_inputs; i++) {
        if (!s->graphs) {
            s->input_ptrs[i] = inputs[i].data;
            continue;
        }
        char *block = (char *)s->arena->data + off;
        s->input_ptrs[i] = block;
        off += align_io(inputs[i].byte_size);
        if (inputs[i].byte_size == 0)
            continue;
        osp_error *err =
            osp_memcpy_async(s->stream, block, inputs[i].data,
                             inputs[i].byte_size, OSP_COPY_DEVICE_TO_DEVICE);
        if (err)
            return err;
    }
    return NULL;
}

/* Whether step st's input j is given to its op as an FP16 copy: the op
 * asked, the session has a store, and the input is an FP32 constant. */
static bool fp16_served(const onnx_session *s, const onnx_plan *p,
                        const plan_step *st, size_t j) {
    const rt_node *n = &s->model->nodes[st->node];
    if (!s->weights || j >= 32 || !(st->fp16_inputs >> j & 1) || n->in[j] < 0)
        return false;
    int r = p->root[n->in[j]];
    return s->model->values[r].konst && p->desc[r].dtype == OSP_TYPE_FP32;
}

/* s->read_fp32: the values a step or an output reads as they are (every
 * one but the constants only read as FP16 copies). */
static void mark_fp32_reads(onnx_session *s, const onnx_plan *p) {
    onnx_rt_model *m = s->model;
    memset(s->read_fp32, 0, m->n_values * sizeof *s->read_fp32);
    for (size_t i = 0; i < p->n_steps; i++) {
        const rt_node *n = &m->nodes[p->steps[i].node];
        for (size_t j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0 && !fp16_served(s, p, &p->steps[i], j))
                s->read_fp32[p->root[n->in[j]]] = true;
    }
    for (size_t k = 0; k < m->n_outputs; k++)
        s->read_fp32[p->root[m->outputs[k]]] = true;
}

/* Points s->ptr[v] at every value the plan's steps and outputs touch. */
static osp_error *resolve_values(onnx_session *s, const onnx_plan *p) {
    onnx_rt_model *m = s->model;
    mark_fp32_reads(s, p);
    char *arena = s->arena ? s->arena->data : NULL;
    for (size_t v = 0; v < m->n_values; v++) {
        s->ptr[v] = NULL;
        int r = p->root[v];
        const rt_value *rv = &m->values[r];
        if (rv->graph_input >= 0) {
            s->ptr[v] = (void *)s->input_ptrs[rv->graph_input];
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
            if (!s->read_fp32[r])
                continue; /* only read as FP16 */
            const void *dev = NULL;
            osp_error *err = rt_weights_get(s->weights, p->desc[r].host,
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
 * becomes that buffer (not with graphs: a graph's steps only write the
 * session's memory). copy_to[k] is where a COPY output goes. */
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
        if (p->output_mode[k] == PLAN_OUTPUT_DIRECT && !s->graphs) {
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
    bool fp16 = false;
    for (size_t j = 0; j < n->n_in; j++) {
        s->in_ptrs[j] = n->in[j] >= 0 ? s->ptr[n->in[j]] : NULL;
        s->in_fp16[j] = NULL;
        if (!fp16_served(s, p, st, j))
            continue;
        const onnx_desc *d = &p->desc[p->root[n->in[j]]];
        osp_error *err = rt_weights_get_fp16(
            s->weights, d->host, (size_t)onnx_shape_count(&d->shape),
            &s->in_fp16[j]);
        if (err)
            return rt_node_error(n->node, err);
        fp16 = true;
    }
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
        .allow_tf32 = s->model->opts.allow_tf32,
        .fp16 = s->model->opts.fp16_weights && !s->host_memory,
        .in_fp16 = fp16 ? s->in_fp16 : NULL,
        .strings = &s->strings,
    };
    return rt_node_error(n->node, n->op->run(&ctx));
}

void onnx_session_set_profiling(onnx_session *s, onnx_profile_mode mode) {
    s->profiling = mode;
}

/* Adds the time since `start` (after the step's work is done) to the
 * total of the node's op type, or of the node itself. */
static void profile_step(onnx_session *s, const onnx_node *node,
                         uint64_t start) {
    osp_error_free(osp_stream_synchronize(s->stream));
    uint64_t ns = osp_now_ns() - start;
    const char *key = s->profiling == ONNX_PROFILE_NODES && node->name &&
                              node->name[0]
                          ? node->name
                          : node->op_type;
    for (size_t i = 0; i < s->n_times; i++)
        if (strcmp(s->times[i].key, key) == 0) {
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
        (struct op_time){.key = key, .calls = 1, .ns = ns};
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
                sorted[i].key, (unsigned long long)sorted[i].calls,
                sorted[i].ns / 1e6, total ? 100.0 * sorted[i].ns / total : 0);
    free(sorted);
}

/* Enqueues the plan's steps one by one (timing them when profiling). */
static osp_error *run_steps(onnx_session *s, const onnx_plan *p) {
    for (size_t i = 0; i < p->n_steps; i++) {
        uint64_t start = s->profiling ? osp_now_ns() : 0;
        osp_error *err = run_step(s, p, &p->steps[i]);
        if (err)
            return err;
        if (s->profiling)
            profile_step(s, s->model->nodes[p->steps[i].node].node, start);
    }
    return NULL;
}

/* The session's entry for plan_id, made now (in place of the least
 * recently used one when the session holds max_graphs). */
static session_graph *graph_entry(onnx_session *s, uint64_t plan_id) {
    session_graph *e = NULL;
    for (size_t i = 0; i < s->n_graphs && !e; i++)
        if (s->graph_cache[i].plan_id == plan_id)
            e = &s->graph_cache[i];
    if (!e && s->n_graphs < s->model->opts.max_graphs) {
        e = &s->graph_cache[s->n_graphs++];
        *e = (session_graph){.plan_id = plan_id};
    } else if (!e) {
        e = &s->graph_cache[0];
        for (size_t i = 1; i < s->n_graphs; i++)
            if (s->graph_cache[i].last_used < e->last_used)
                e = &s->graph_cache[i];
        /* A launch still queued keeps what it replays (CUDA defers the
         * destruction of an executing graph). */
        osp_graph_free(e->graph);
        *e = (session_graph){.plan_id = plan_id};
    }
    e->last_used = ++s->graph_clock;
    return e;
}

/* Records the plan's steps as a graph; false (and nothing recorded) when
 * the device refused something a step did. */
static bool record_graph(onnx_session *s, const onnx_plan *p,
                         osp_graph **out) {
    osp_error *err = osp_stream_begin_capture(s->stream);
    if (err) {
        osp_error_free(err);
        return false;
    }
    osp_error *steps = run_steps(s, p);
    osp_graph *g = NULL;
    err = osp_stream_end_capture(s->stream, &g);
    if (steps || err) {
        osp_error_free(steps);
        osp_error_free(err);
        osp_graph_free(g);
        return false;
    }
    *out = g;
    return true;
}

/* The steps of plan p: replayed, recorded, or enqueued one by one. */
static osp_error *run_plan(onnx_session *s, const onnx_plan *p) {
    if (!s->graphs || s->profiling) {
        s->graph_stats.eager_runs++;
        return run_steps(s, p);
    }
    session_graph *e = graph_entry(s, p->id);
    if (!e->graph && e->warm && !e->eager_only) {
        if (record_graph(s, p, &e->graph)) {
            s->graph_stats.captures++;
            OSP_LOG_VERBOSE("ONNX plan %llu: CUDA graph recorded (%zu steps)",
                            (unsigned long long)p->id, p->n_steps);
        } else {
            e->eager_only = true;
            s->graph_stats.refused++;
            OSP_LOG_VERBOSE("ONNX plan %llu: the device refused to record "
                            "a graph; its steps run one by one",
                            (unsigned long long)p->id);
        }
    }
    if (e->graph) {
        s->graph_stats.replays++;
        return osp_graph_launch(e->graph, s->stream);
    }
    e->warm = true;
    s->graph_stats.eager_runs++;
    return run_steps(s, p);
}

/* Runs plan p (held by the caller) on inputs: binds the arena, inputs
 * and outputs, enqueues the steps and the output copies. */
static osp_error *run_with_plan(onnx_session *s, const onnx_plan *p,
                                const onnx_io *inputs,
                                onnx_output_alloc_fn alloc, void *alloc_ctx) {
    onnx_rt_model *m = s->model;
    osp_error *err = NULL;
    void **copy_to = calloc(m->n_outputs ? m->n_outputs : 1, sizeof *copy_to);
    size_t arena_bytes = arena_for_run(s, p, inputs);
    if (!copy_to || (s->graphs && arena_bytes == 0)) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if ((err = ensure_arena(s, arena_bytes)) ||
        (err = place_inputs(s, p, inputs)) || (err = resolve_values(s, p)) ||
        (err = bind_outputs(s, p, alloc, alloc_ctx, copy_to)) ||
        (err = run_plan(s, p)))
        goto out;
    for (size_t k = 0; k < m->n_outputs; k++) {
        int v = m->outputs[k];
        size_t bytes = rt_desc_bytes(&p->desc[v]);
        if (!copy_to[k] || bytes == 0)
            continue;
        /* An output known when planning that no step reads (Shape of an
         * input, say) has no device copy: it goes from the plan's host
         * value. */
        const void *host = p->desc[p->root[v]].host;
        bool from_host = !s->ptr[v] && host;
        if ((err = osp_memcpy_async(s->stream, copy_to[k],
                                    from_host ? host : s->ptr[v], bytes,
                                    from_host ? OSP_COPY_HOST_TO_DEVICE
                                              : OSP_COPY_DEVICE_TO_DEVICE)))
            goto out;
    }
out:
    free(copy_to);
    return err;
}

/* Rows per chunk when plan p's batch should run in chunks on this
 * session (onnx_batch_chunks.c), else 0. */
static int64_t chunk_rows(const onnx_session *s, const onnx_plan *p) {
    int64_t batch = p->separable_batch;
    if (!s->host_memory || batch < 2 || p->arena_bytes == 0)
        return 0;
    size_t per_sample = p->arena_bytes / (size_t)batch;
    size_t fit = per_sample ? s->model->opts.batch_chunk_bytes / per_sample : 0;
    if (per_sample == 0 || fit >= (size_t)batch)
        return 0;
    int64_t chunks = (batch + (int64_t)fit - 1) / (fit ? (int64_t)fit : 1);
    return (batch + chunks - 1) / chunks; /* even chunks, the last smaller */
}

/* What a chunk's run asks of the caller's output allocator: the whole
 * batch's buffer once, on the first chunk, then the chunk's rows of it. */
typedef struct chunk_outputs {
    onnx_output_alloc_fn alloc;
    void *alloc_ctx;
    int64_t batch, row0;
    void **base; /* per graph output: the whole buffer, or NULL */
    bool *asked; /* per graph output: alloc was asked */
} chunk_outputs;

static osp_error *chunk_output_alloc(void *ctx, size_t index,
                                     osp_datatype dtype,
                                     const osp_shape *shape,
                                     size_t byte_size, void **data) {
    chunk_outputs *c = ctx;
    if (shape->rank < 1 || shape->dims[0] < 1)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "a batch chunk's output %zu has no batch rows",
                             index);
    size_t row_bytes = byte_size / (size_t)shape->dims[0];
    if (!c->asked[index]) {
        osp_shape whole = *shape;
        whole.dims[0] = c->batch;
        c->asked[index] = true;
        osp_error *err = c->alloc(c->alloc_ctx, index, dtype, &whole,
                                  row_bytes * (size_t)c->batch, &c->base[index]);
        if (err)
            return err;
    }
    *data = c->base[index] ? (char *)c->base[index] + (size_t)c->row0 * row_bytes
                           : NULL;
    return NULL;
}

/* Runs a batch of `batch` samples as chunks of `rows` (the last one
 * smaller), each on its own plan, into the caller's whole outputs. */
static osp_error *run_in_chunks(onnx_session *s, const onnx_io *inputs,
                                int64_t batch, int64_t rows,
                                onnx_output_alloc_fn alloc, void *alloc_ctx) {
    onnx_rt_model *m = s->model;
    onnx_io *part = calloc(m->n_inputs, sizeof *part);
    chunk_outputs c = {.alloc = alloc,
                       .alloc_ctx = alloc_ctx,
                       .batch = batch,
                       .base = calloc(m->n_outputs, sizeof *c.base),
                       .asked = calloc(m->n_outputs, sizeof *c.asked)};
    osp_error *err = NULL;
    if (!part || !c.base || !c.asked)
        err = osp_error_out_of_memory();
    for (int64_t row0 = 0; !err && row0 < batch; row0 += rows) {
        int64_t n = batch - row0 < rows ? batch - row0 : rows;
        for (size_t i = 0; i < m->n_inputs; i++) {
            size_t row_bytes = inputs[i].byte_size / (size_t)batch;
            size_t skip = (size_t)row0 * row_bytes;
            part[i] = inputs[i];
            part[i].shape.dims[0] = n;
            part[i].byte_size = (size_t)n * row_bytes;
            part[i].data = (const char *)inputs[i].data + skip;
            if (inputs[i].host_data)
                part[i].host_data = (const char *)inputs[i].host_data + skip;
        }
        c.row0 = row0;
        onnx_plan *p = NULL;
        if ((err = onnx_plan_acquire(m, part, s->host_memory, &p)))
            break;
        err = run_with_plan(s, p, part, chunk_output_alloc, &c);
        onnx_plan_release(m, p);
    }
    if (!err)
        s->graph_stats.chunked_runs++;
    free(part);
    free(c.base);
    free(c.asked);
    return err;
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
    onnx_string_pool_reset(&s->strings); /* the last run's are given back */
    int64_t rows = chunk_rows(s, p);
    if (rows)
        err = run_in_chunks(s, inputs, p->separable_batch, rows, alloc,
                            alloc_ctx);
    else
        err = run_with_plan(s, p, inputs, alloc, alloc_ctx);
    onnx_plan_release(m, p);
    return err;
}
