/*
 * Plans: the prepared graph bound to one set of input shapes.
 *
 * Binding walks the nodes in order and asks each op for its outputs'
 * dtypes and shapes. A node whose inputs are all known on the host (or
 * that needs only their shapes: Shape, Size) is evaluated right there on
 * the CPU device, so the shape arithmetic transformer exports are full of
 * never reaches the instance's device; the others become the plan's steps.
 * Then memory: every tensor a step writes is a block of one arena, placed
 * by liveness (a block is free again after its last reader), views
 * (Reshape, Squeeze, ...) share their input's block, and a graph output
 * that owns its block is written straight into the caller's buffer.
 *
 * Plans are cached per model by input shapes (bounded, least recently used
 * first out) and shared by the model's sessions; a plan in use is never
 * freed.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host_memory.h"
#include "onnx_rt_internal.h"

#define PLAN_ALIGN 64

static size_t align_up(size_t n) {
    return (n + PLAN_ALIGN - 1) & ~(size_t)(PLAN_ALIGN - 1);
}

/* The most one plan's arena (and, apart, the values it computes while
 * planning) may take: half the machine's memory, so that a request with
 * outsized shapes fails instead of exhausting memory. */
static size_t arena_limit(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return (size_t)8 << 30;
    return (size_t)pages * (size_t)page / 2;
}

void onnx_plan_free(onnx_rt_model *m, onnx_plan *p) {
    if (!p)
        return;
    if (p->host_owned)
        for (size_t v = 0; v < m->n_values; v++)
            if (p->host_owned[v])
                host_free_aligned(p->host_owned[v], rt_desc_bytes(&p->desc[v]));
    if (p->steps)
        for (size_t i = 0; i < p->n_steps; i++) {
            free(p->steps[i].in_desc);
            free(p->steps[i].out_desc);
        }
    free(p->steps);
    free(p->host_owned);
    free(p->desc);
    free(p->root);
    free(p->offset);
    if (p->input_values)
        for (size_t i = 0; i < m->n_inputs; i++)
            free(p->input_values[i]);
    free(p->input_values);
    free(p->input_shapes);
    free(p->output_mode);
    onnx_string_pool_destroy(&p->strings);
    free(p);
}

/* ---- binding shapes ------------------------------------------------------
 */

/* Host bytes of input i, NULL when the caller has none (device memory
 * with no host copy). */
static const void *input_host_bytes(const onnx_io *inputs, size_t i,
                                    bool host_inputs) {
    return host_inputs ? inputs[i].data : inputs[i].host_data;
}

static osp_error *bind_inputs(onnx_rt_model *m, onnx_plan *p,
                              const onnx_io *inputs, bool host_inputs,
                              const bool *value_inputs) {
    const onnx_graph *g = m->model->graph;
    for (size_t i = 0; i < m->n_inputs; i++) {
        const onnx_value_info *vi = &g->inputs[i];
        const onnx_io *in = &inputs[i];
        if (in->dtype != vi->dtype)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "input '%s' has datatype %s, the model "
                                 "expects %s",
                                 vi->name, osp_datatype_wire_name(in->dtype),
                                 osp_datatype_wire_name(vi->dtype));
        if (vi->has_shape) {
            bool ok = in->shape.rank == vi->rank;
            for (int d = 0; ok && d < vi->rank; d++)
                ok = vi->dims[d] < 0 || vi->dims[d] == in->shape.dims[d];
            if (!ok) {
                char got[160], want[160];
                osp_shape decl = {.rank = vi->rank};
                memcpy(decl.dims, vi->dims, sizeof decl.dims);
                return osp_error_new(
                    OSP_ERROR_INVALID_ARG,
                    "input '%s' has shape %s, the model expects %s",
                    vi->name, osp_shape_format(&in->shape, got, sizeof got),
                    osp_shape_format(&decl, want, sizeof want));
            }
        }
        int v = m->inputs[i];
        p->desc[v] = (onnx_desc){
            .present = true, .dtype = in->dtype, .shape = in->shape};
        p->input_shapes[i] = in->shape;
        const void *host = input_host_bytes(inputs, i, host_inputs);
        if (value_inputs[i] && host) {
            p->input_values[i] = malloc(in->byte_size ? in->byte_size : 1);
            if (!p->input_values[i])
                return osp_error_out_of_memory();
            memcpy(p->input_values[i], host, in->byte_size);
            p->desc[v].host = p->input_values[i];
        }
    }
    return NULL;
}

/* Largest graph input a plan reads on the host (elements). */
#define VALUE_INPUT_MAX_ELEMENTS 1024

/* After node n failed to bind: marks the small graph inputs its unknown
 * inputs are computed from (directly, or through their producers) and
 * whose host bytes this run has, so that the next attempt reads their
 * values: a shape fed as an input, or computed from one. True when it
 * marked one. Walks the graph with a stack of its own (a hostile graph
 * may be deep). */
static bool learn_value_inputs(onnx_rt_model *m, const onnx_plan *p,
                               const rt_node *n, const onnx_io *inputs,
                               bool host_inputs, bool *value_inputs) {
    /* Room for every node input once (a producer with several outputs
     * may push its inputs again; the bound only stops the walk early). */
    size_t edges = n->n_in + 1;
    for (size_t i = 0; i < m->n_nodes; i++)
        edges += m->nodes[i].n_in;
    bool *seen = calloc(m->n_values + 1, sizeof *seen);
    int *stack = malloc(edges * sizeof *stack);
    size_t depth = 0;
    bool marked = false;
    for (size_t j = 0; seen && stack && j < n->n_in; j++)
        if (n->in[j] >= 0)
            stack[depth++] = n->in[j];
    while (seen && stack && depth > 0) {
        int v = stack[--depth];
        if (seen[v] || p->desc[v].host)
            continue;
        seen[v] = true;
        const rt_value *val = &m->values[v];
        int gi = val->graph_input;
        if (gi >= 0) {
            if (!value_inputs[gi] &&
                input_host_bytes(inputs, (size_t)gi, host_inputs) &&
                osp_datatype_byte_size(p->desc[v].dtype) != 0 &&
                onnx_shape_count(&p->desc[v].shape) <=
                    VALUE_INPUT_MAX_ELEMENTS) {
                value_inputs[gi] = true;
                marked = true;
            }
        } else if (val->producer >= 0) {
            const rt_node *prod = &m->nodes[val->producer];
            for (size_t j = 0; j < prod->n_in && depth < edges; j++)
                if (prod->in[j] >= 0 && !seen[prod->in[j]])
                    stack[depth++] = prod->in[j];
        }
    }
    free(stack);
    free(seen);
    return marked;
}

/* Infers node n's outputs; evaluates it on the host when it can. Appends
 * a step otherwise (steps has room for every node). */
static osp_error *bind_node(onnx_rt_model *m, onnx_plan *p, int index) {
    const rt_node *n = &m->nodes[index];
    osp_error *err = NULL;
    onnx_desc *in_desc = calloc(n->n_in ? n->n_in : 1, sizeof *in_desc);
    onnx_desc *out_desc = calloc(n->n_out ? n->n_out : 1, sizeof *out_desc);
    if (!in_desc || !out_desc) {
        err = osp_error_out_of_memory();
        goto out;
    }
    bool all_host = true;
    for (size_t j = 0; j < n->n_in; j++) {
        if (n->in[j] < 0)
            continue;
        in_desc[j] = p->desc[n->in[j]];
        all_host &= in_desc[j].host != NULL;
    }
    for (size_t j = 0; j < n->n_out; j++)
        out_desc[j].present = n->out[j] >= 0;
    onnx_infer_ctx ictx = {.node = n->node,
                           .state = n->state,
                           .n_inputs = n->n_in,
                           .inputs = in_desc,
                           .n_outputs = n->n_out,
                           .outputs = out_desc,
                           .fp16_weights = m->opts.fp16_weights,
                           .allow_tf32 = m->opts.allow_tf32};
    if ((err = rt_check_strings(n, in_desc, n->n_in, "input")) ||
        (err = rt_node_error(n->node, n->op->infer(&ictx))) ||
        (err = rt_check_strings(n, out_desc, n->n_out, "output")))
        goto out;
    for (size_t j = 0; j < n->n_out; j++) {
        out_desc[j].host = NULL;
        if (out_desc[j].present &&
            (err = onnx_check_shape(n->node, &out_desc[j].shape,
                                    out_desc[j].dtype)))
            goto out;
    }
    if (all_host || n->op->needs_only_shapes) {
        for (size_t j = 0; j < n->n_out; j++)
            if (out_desc[j].present)
                p->host_bytes += rt_desc_bytes(&out_desc[j]);
        if (p->host_bytes > arena_limit()) {
            err = rt_node_error(
                n->node, osp_error_new(OSP_ERROR_INVALID_ARG,
                                       "the values computed while planning "
                                       "for these input shapes are over the "
                                       "limit of %zu MiB",
                                       arena_limit() >> 20));
            goto out;
        }
        const void *in[n->n_in ? n->n_in : 1];
        void *out[n->n_out ? n->n_out : 1];
        for (size_t j = 0; j < n->n_in; j++)
            in[j] = in_desc[j].host;
        if ((err = rt_run_on_host(n, in_desc, in, out_desc,
                                  ictx.workspace_bytes, &p->strings, out)))
            goto out;
        for (size_t j = 0; j < n->n_out; j++) {
            if (n->out[j] < 0)
                continue;
            int v = n->out[j];
            p->desc[v] = out_desc[j];
            p->desc[v].host = out[j];
            p->host_owned[v] = out[j];
        }
        goto out;
    }
    for (size_t j = 0; j < n->n_out; j++)
        if (n->out[j] >= 0)
            p->desc[n->out[j]] = out_desc[j];
    plan_step *s = &p->steps[p->n_steps++];
    s->node = index;
    s->in_desc = in_desc;
    s->out_desc = out_desc;
    s->ws_bytes = ictx.workspace_bytes;
    s->fp16_inputs = ictx.fp16_inputs;
    in_desc = out_desc = NULL;
out:
    free(in_desc);
    free(out_desc);
    return err;
}

/* ---- memory ----------------------------------------------------------------
 */

typedef struct live_block {
    size_t offset, size;
    int root; /* -1 for a workspace */
} live_block;

typedef struct arena_state {
    live_block *blocks; /* sorted by offset */
    size_t n, cap;
    size_t high;
} arena_state;

/* Places `size` bytes in the lowest gap that fits, else at the end. */
static osp_error *arena_place(arena_state *a, size_t size, int root,
                              size_t *offset) {
    size = align_up(size ? size : 1);
    size_t pos = 0, at = 0;
    for (; pos < a->n; pos++) {
        if (a->blocks[pos].offset - at >= size)
            break;
        at = a->blocks[pos].offset + a->blocks[pos].size;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        live_block *grown = realloc(a->blocks, cap * sizeof *grown);
        if (!grown)
            return osp_error_out_of_memory();
        a->blocks = grown;
        a->cap = cap;
    }
    memmove(&a->blocks[pos + 1], &a->blocks[pos],
            (a->n - pos) * sizeof *a->blocks);
    a->blocks[pos] = (live_block){.offset = at, .size = size, .root = root};
    a->n++;
    if (at + size > a->high)
        a->high = at + size;
    *offset = at;
    return NULL;
}

static void arena_release(arena_state *a, int root, size_t offset) {
    for (size_t i = 0; i < a->n; i++)
        if (a->blocks[i].root == root && a->blocks[i].offset == offset) {
            memmove(&a->blocks[i], &a->blocks[i + 1],
                    (a->n - i - 1) * sizeof *a->blocks);
            a->n--;
            return;
        }
}

/* Roots and lifetimes, then offsets. A value's root is the value whose
 * memory it is: itself, or for a view the root of its input. */
static osp_error *plan_memory(onnx_rt_model *m, onnx_plan *p) {
    osp_error *err = NULL;
    size_t nv = m->n_values;
    int *last_use = malloc(nv * sizeof *last_use);
    arena_state a = {0};
    if (!last_use)
        return osp_error_out_of_memory();
    for (size_t v = 0; v < nv; v++) {
        p->root[v] = (int)v;
        p->offset[v] = -1;
        last_use[v] = -1;
    }
    for (size_t i = 0; i < p->n_steps; i++) {
        const rt_node *n = &m->nodes[p->steps[i].node];
        if (n->op->output_aliases_input && n->out[0] >= 0 && n->in[0] >= 0)
            p->root[n->out[0]] = p->root[n->in[0]];
        for (size_t j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                last_use[p->root[n->in[j]]] = (int)i;
    }
    /* Host values this plan computed (shape tensors, mostly) and a step
     * reads get a block for the whole run: a device without host memory
     * receives them there each run (constants of the model are uploaded
     * once per session instead). */
    for (size_t v = 0; v < nv; v++) {
        if (!p->host_owned[v] || p->root[v] != (int)v || last_use[v] < 0)
            continue;
        size_t off;
        if ((err = arena_place(&a, rt_desc_bytes(&p->desc[v]), -2, &off)))
            goto out;
        p->offset[v] = (int64_t)off;
    }
    for (size_t k = 0; k < m->n_outputs; k++)
        last_use[p->root[m->outputs[k]]] = (int)p->n_steps;

    for (size_t i = 0; i < p->n_steps; i++) {
        plan_step *s = &p->steps[i];
        const rt_node *n = &m->nodes[s->node];
        if (!n->op->output_aliases_input)
            for (size_t j = 0; j < n->n_out; j++) {
                int v = n->out[j];
                if (v < 0)
                    continue;
                size_t off;
                if ((err = arena_place(&a, rt_desc_bytes(&p->desc[v]), v,
                                       &off)))
                    goto out;
                p->offset[v] = (int64_t)off;
                if (last_use[v] < (int)i)
                    last_use[v] = (int)i; /* written even if unread */
            }
        if (s->ws_bytes) {
            if ((err = arena_place(&a, s->ws_bytes, -1, &s->ws_offset)))
                goto out;
            arena_release(&a, -1, s->ws_offset);
        }
        /* Blocks whose last reader is this step are free for the next. */
        for (size_t b = 0; b < a.n;) {
            int r = a.blocks[b].root;
            if (r >= 0 && last_use[r] <= (int)i) {
                arena_release(&a, r, a.blocks[b].offset);
                continue;
            }
            b++;
        }
    }
    p->arena_bytes = a.high;
    if (p->arena_bytes > arena_limit()) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "these input shapes need %zu MiB of working "
                            "memory, over the limit of %zu MiB (half the "
                            "machine's memory)",
                            p->arena_bytes >> 20, arena_limit() >> 20);
        goto out;
    }

    /* An output writes straight into the caller's buffer when its memory
     * is a block of its own, not shared with another output. */
    for (size_t k = 0; k < m->n_outputs; k++) {
        int r = p->root[m->outputs[k]];
        bool own = p->offset[r] >= 0 && !p->desc[r].host &&
                   r == m->outputs[k];
        for (size_t o = 0; own && o < k; o++)
            own = p->root[m->outputs[o]] != r;
        p->output_mode[k] = own ? PLAN_OUTPUT_DIRECT : PLAN_OUTPUT_COPY;
    }
out:
    free(a.blocks);
    free(last_use);
    return err;
}

/* Makes the plan for these inputs, reading the values of the inputs
 * value_inputs marks that have host bytes (it may mark more: *retry then
 * says to plan again). Caller owns *out. */
static osp_error *plan_new(onnx_rt_model *m, const onnx_io *inputs,
                           bool host_inputs, bool *value_inputs, bool *retry,
                           onnx_plan **out) {
    osp_error *err = NULL;
    size_t nv = m->n_values;
    onnx_plan *p = calloc(1, sizeof *p);
    if (!p)
        return osp_error_out_of_memory();
    p->input_shapes =
        calloc(m->n_inputs ? m->n_inputs : 1, sizeof *p->input_shapes);
    p->desc = calloc(nv ? nv : 1, sizeof *p->desc);
    p->host_owned = calloc(nv ? nv : 1, sizeof *p->host_owned);
    p->root = calloc(nv ? nv : 1, sizeof *p->root);
    p->offset = calloc(nv ? nv : 1, sizeof *p->offset);
    p->steps = calloc(m->n_nodes ? m->n_nodes : 1, sizeof *p->steps);
    p->output_mode =
        calloc(m->n_outputs ? m->n_outputs : 1, sizeof *p->output_mode);
    p->input_values =
        calloc(m->n_inputs ? m->n_inputs : 1, sizeof *p->input_values);
    if (!p->input_values || !p->input_shapes || !p->desc || !p->host_owned || !p->root ||
        !p->offset || !p->steps || !p->output_mode) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t v = 0; v < nv; v++)
        if (m->values[v].konst) {
            const onnx_tensor *t = m->values[v].konst;
            p->desc[v] = (onnx_desc){.present = true,
                                     .dtype = t->dtype,
                                     .shape = t->shape,
                                     .host = t->data};
        }
    if ((err = bind_inputs(m, p, inputs, host_inputs, value_inputs)))
        goto out;
    for (size_t i = 0; i < m->n_nodes; i++)
        if ((err = bind_node(m, p, (int)i))) {
            *retry = learn_value_inputs(m, p, &m->nodes[i], inputs,
                                        host_inputs, value_inputs);
            goto out;
        }
    if (!(err = plan_memory(m, p)))
        p->separable_batch = rt_plan_separable_batch(m, p);
out:
    if (err) {
        onnx_plan_free(m, p);
        return err;
    }
    *out = p;
    return NULL;
}

static bool plan_matches(const onnx_rt_model *m, const onnx_plan *p,
                         const onnx_io *inputs, bool host_inputs) {
    for (size_t i = 0; i < m->n_inputs; i++) {
        if (!osp_shape_equal(&p->input_shapes[i], &inputs[i].shape))
            return false;
        const void *host = input_host_bytes(inputs, i, host_inputs);
        if (p->input_values[i] &&
            (!host || memcmp(p->input_values[i], host, inputs[i].byte_size)))
            return false;
    }
    return true;
}

/* Drops the least recently used idle plan while the cache is full. */
static void evict_plans(onnx_rt_model *m) {
    while (m->n_plans >= m->opts.max_plans) {
        size_t victim = SIZE_MAX;
        for (size_t i = 0; i < m->n_plans; i++)
            if (m->plans[i]->refs == 0 &&
                (victim == SIZE_MAX ||
                 m->plans[i]->last_used < m->plans[victim]->last_used))
                victim = i;
        if (victim == SIZE_MAX)
            return;
        onnx_plan_free(m, m->plans[victim]);
        m->plans[victim] = m->plans[--m->n_plans];
    }
}

osp_error *onnx_plan_acquire(onnx_rt_model *m, const onnx_io *inputs,
                             bool host_inputs, onnx_plan **out) {
    pthread_mutex_lock(&m->plans_lock);
    for (size_t i = 0; i < m->n_plans; i++)
        if (plan_matches(m, m->plans[i], inputs, host_inputs)) {
            onnx_plan *p = m->plans[i];
            p->refs++;
            p->last_used = ++m->plan_clock;
            pthread_mutex_unlock(&m->plans_lock);
            *out = p;
            return NULL;
        }
    pthread_mutex_unlock(&m->plans_lock);

    /* Planned outside the lock: another session may plan the same shapes
     * meanwhile; the first to insert wins and the other is dropped. */
    onnx_plan *p = NULL;
    osp_error *err = NULL;
    bool *value_inputs = calloc(m->n_inputs + 1, sizeof *value_inputs);
    if (!value_inputs)
        return osp_error_out_of_memory();
    pthread_mutex_lock(&m->plans_lock);
    memcpy(value_inputs, m->value_inputs, m->n_inputs * sizeof *value_inputs);
    pthread_mutex_unlock(&m->plans_lock);
    for (size_t attempt = 0; attempt <= m->n_inputs; attempt++) {
        bool retry = false;
        osp_error_free(err);
        err = plan_new(m, inputs, host_inputs, value_inputs, &retry, &p);
        if (!err || !retry)
            break;
    }
    if (!err) {
        pthread_mutex_lock(&m->plans_lock);
        for (size_t i = 0; i < m->n_inputs; i++)
            m->value_inputs[i] |= value_inputs[i];
        pthread_mutex_unlock(&m->plans_lock);
    }
    free(value_inputs);
    if (err)
        return err;
    pthread_mutex_lock(&m->plans_lock);
    for (size_t i = 0; i < m->n_plans; i++)
        if (plan_matches(m, m->plans[i], inputs, host_inputs)) {
            onnx_plan_free(m, p);
            p = m->plans[i];
            p->refs++;
            p->last_used = ++m->plan_clock;
            pthread_mutex_unlock(&m->plans_lock);
            *out = p;
            return NULL;
        }
    evict_plans(m);
    onnx_plan **grown = realloc(m->plans, (m->n_plans + 1) * sizeof *grown);
    if (!grown) {
        pthread_mutex_unlock(&m->plans_lock);
        onnx_plan_free(m, p);
        return osp_error_out_of_memory();
    }
    m->plans = grown;
    m->plans[m->n_plans++] = p;
    p->id = ++m->plan_ids;
    p->refs = 1;
    p->last_used = ++m->plan_clock;
    pthread_mutex_unlock(&m->plans_lock);
    *out = p;
    return NULL;
}

void onnx_plan_release(onnx_rt_model *m, onnx_plan *p) {
    pthread_mutex_lock(&m->plans_lock);
    p->refs--;
    bool cached = false;
    for (size_t i = 0; i < m->n_plans; i++)
        cached |= m->plans[i] == p;
    pthread_mutex_unlock(&m->plans_lock);
    if (!cached && p->refs == 0)
        onnx_plan_free(m, p);
}
