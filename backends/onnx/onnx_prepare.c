/*
 * Load-time preparation of an ONNX graph: every tensor gets an index,
 * every node its op (and the op's checked attributes), the nodes a
 * topological order, constant subgraphs are evaluated once on the host,
 * and the fusion passes run. What is left is what a plan (onnx_plan.c)
 * binds to shapes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* glibc's malloc_trim, except where a sanitizer replaces malloc (its
 * arena is then never set up, and trimming it crashes). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||     \
    __has_feature(memory_sanitizer)
#define ONNX_MALLOC_REPLACED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ONNX_MALLOC_REPLACED 1
#endif
#if defined(__GLIBC__) && !defined(ONNX_MALLOC_REPLACED)
#define ONNX_TRIM_HEAP 1
#include <malloc.h>
#endif

#include "host_memory.h"
#include "onnx_rt_internal.h"
#include "osprey/log.h"

osp_error *rt_node_error(const onnx_node *node, osp_error *inner) {
    if (!inner)
        return NULL;
    /* Ops name their node already ("node 'n' (Op): why"); that short
     * prefix gives way to the full one. */
    char own[512];
    snprintf(own, sizeof own, "node '%s' (%s): ", node->name, node->op_type);
    const char *msg = osp_error_message(inner);
    if (strncmp(msg, own, strlen(own)) == 0) {
        osp_error *err = osp_error_new_reason(
            osp_error_get_code(inner), osp_error_get_reason(inner),
            "node '%s' (%s%s%s, opset %lld): %s", node->name,
            node->domain[0] ? node->domain : "", node->domain[0] ? "." : "",
            node->op_type, (long long)node->opset, msg + strlen(own));
        osp_error_free(inner);
        return err;
    }
    return osp_error_wrap(inner, "node '%s' (%s%s%s, opset %lld)", node->name,
                          node->domain[0] ? node->domain : "",
                          node->domain[0] ? "." : "", node->op_type,
                          (long long)node->opset);
}

int rt_value_find(const onnx_rt_model *m, const char *name) {
    for (size_t i = 0; i < m->n_values; i++)
        if (strcmp(m->values[i].name, name) == 0)
            return (int)i;
    return -1;
}

int rt_value_intern(onnx_rt_model *m, const char *name) {
    int found = rt_value_find(m, name);
    if (found >= 0)
        return found;
    if (m->n_values == m->cap_values) {
        size_t cap = m->cap_values ? m->cap_values * 2 : 64;
        rt_value *grown = realloc(m->values, cap * sizeof *grown);
        if (!grown)
            return -1;
        m->values = grown;
        m->cap_values = cap;
    }
    rt_value *v = &m->values[m->n_values];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->producer = -1;
    v->graph_input = -1;
    return (int)m->n_values++;
}

size_t rt_value_consumers(const onnx_rt_model *m, int v) {
    size_t count = 0;
    for (size_t i = 0; i < m->n_nodes; i++) {
        const rt_node *n = &m->nodes[i];
        if (n->dead)
            continue;
        for (size_t j = 0; j < n->n_in; j++)
            count += n->in[j] == v;
    }
    return count;
}

bool rt_value_is_output(const onnx_rt_model *m, int v) {
    for (size_t i = 0; i < m->n_outputs; i++)
        if (m->outputs[i] == v)
            return true;
    return false;
}

/* Interns the names of `count` node inputs or outputs into idx[] ("" →
 * -1). */
static osp_error *intern_names(onnx_rt_model *m, char *const *names,
                               size_t count, int **idx) {
    *idx = calloc(count ? count : 1, sizeof **idx);
    if (!*idx)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < count; i++) {
        if (!names[i][0]) {
            (*idx)[i] = -1;
            continue;
        }
        int v = rt_value_intern(m, names[i]);
        if (v < 0)
            return osp_error_out_of_memory();
        (*idx)[i] = v;
    }
    return NULL;
}

osp_error *rt_node_add(onnx_rt_model *m, const onnx_node *node) {
    if (m->n_nodes == m->cap_nodes) {
        size_t cap = m->cap_nodes ? m->cap_nodes * 2 : 64;
        rt_node *grown = realloc(m->nodes, cap * sizeof *grown);
        if (!grown)
            return osp_error_out_of_memory();
        m->nodes = grown;
        m->cap_nodes = cap;
    }
    rt_node *n = &m->nodes[m->n_nodes];
    memset(n, 0, sizeof *n);
    n->node = node;
    n->n_in = node->n_inputs;
    n->n_out = node->n_outputs;
    m->n_nodes++; /* counted now so that a failure below frees it */
    if (node->opset < 7 && (!node->domain[0] ||
                            strcmp(node->domain, "ai.onnx") == 0))
        return rt_node_error(
            node, osp_error_new(OSP_ERROR_UNSUPPORTED,
                                "opsets below 7 are not supported; convert "
                                "the model with onnx.version_converter"));
    n->op = onnx_op_find(node->domain, node->op_type, node->opset);
    if (!n->op)
        return rt_node_error(
            node, osp_error_new(OSP_ERROR_UNSUPPORTED,
                                "the operator is not implemented for this "
                                "domain and opset"));
    osp_error *err = intern_names(m, node->inputs, node->n_inputs, &n->in);
    if (!err)
        err = intern_names(m, node->outputs, node->n_outputs, &n->out);
    if (!err && n->op->prepare)
        err = rt_node_error(node, n->op->prepare(node, &n->state));
    return err;
}

/* Orders m->nodes so that every node comes after the producers of its
 * inputs (Kahn's algorithm, stable in file order). INVALID_ARG for a
 * tensor defined twice, read but never defined, or a cycle. */
static osp_error *sort_nodes(onnx_rt_model *m) {
    osp_error *err = NULL;
    size_t n = m->n_nodes;
    int *missing = calloc(n ? n : 1, sizeof *missing);
    rt_node *sorted = calloc(n ? n : 1, sizeof *sorted);
    bool *placed = calloc(n ? n : 1, sizeof *placed);
    if (!missing || !sorted || !placed) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < m->nodes[i].n_out; j++) {
            int v = m->nodes[i].out[j];
            if (v < 0)
                continue;
            rt_value *val = &m->values[v];
            if (val->producer >= 0 || val->konst || val->graph_input >= 0) {
                err = rt_node_error(
                    m->nodes[i].node,
                    osp_error_new(OSP_ERROR_INVALID_ARG,
                                  "output '%s' is already defined by the "
                                  "graph",
                                  val->name));
                goto out;
            }
            val->producer = (int)i;
        }
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < m->nodes[i].n_in; j++) {
            int v = m->nodes[i].in[j];
            if (v < 0)
                continue;
            const rt_value *val = &m->values[v];
            if (val->producer < 0 && !val->konst && val->graph_input < 0) {
                err = rt_node_error(
                    m->nodes[i].node,
                    osp_error_new(OSP_ERROR_INVALID_ARG,
                                  "input '%s' is not defined by any node, "
                                  "initializer or graph input",
                                  val->name));
                goto out;
            }
            if (val->producer >= 0)
                missing[i]++;
        }
    }
    /* Repeated passes in file order keep the order stable; graphs are
     * mostly in order already, so this is close to linear. */
    size_t done = 0;
    while (done < n) {
        size_t before = done;
        for (size_t i = 0; i < n; i++) {
            if (placed[i] || missing[i] > 0)
                continue;
            placed[i] = true;
            sorted[done++] = m->nodes[i];
            for (size_t k = 0; k < n; k++)
                for (size_t j = 0; j < m->nodes[k].n_in; j++) {
                    int v = m->nodes[k].in[j];
                    if (v >= 0 && m->values[v].producer == (int)i)
                        missing[k]--;
                }
        }
        if (done == before) {
            for (size_t i = 0; i < n; i++)
                if (!placed[i]) {
                    err = rt_node_error(
                        m->nodes[i].node,
                        osp_error_new(OSP_ERROR_INVALID_ARG,
                                      "the graph has a cycle through this "
                                      "node"));
                    goto out;
                }
        }
    }
    memcpy(m->nodes, sorted, n * sizeof *sorted);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m->nodes[i].n_out; j++)
            if (m->nodes[i].out[j] >= 0)
                m->values[m->nodes[i].out[j]].producer = (int)i;
out:
    free(missing);
    free(sorted);
    free(placed);
    return err;
}

size_t rt_desc_bytes(const onnx_desc *d) {
    int64_t count = onnx_shape_count(&d->shape);
    return (size_t)count * rt_dtype_bytes(d->dtype);
}

size_t rt_dtype_bytes(osp_datatype dt) {
    return dt == OSP_TYPE_BYTES ? ONNX_STRING_BYTES : osp_datatype_byte_size(dt);
}

osp_error *rt_check_strings(const rt_node *n, const onnx_desc *descs,
                            size_t count, const char *kind) {
    if (n->op->takes_strings)
        return NULL;
    for (size_t j = 0; j < count; j++)
        if (descs[j].present && descs[j].dtype == OSP_TYPE_BYTES)
            return rt_node_error(
                n->node, onnx_node_error(n->node, OSP_ERROR_UNSUPPORTED,
                                         "%s %zu: dtype STRING is not "
                                         "supported",
                                         kind, j));
    return NULL;
}

osp_error *rt_run_on_host(const rt_node *n, const onnx_desc *in_desc,
                          const void *const *in, const onnx_desc *out_desc,
                          size_t ws_bytes, onnx_string_pool *strings,
                          void **out) {
    osp_error *err = NULL;
    osp_stream *stream = NULL;
    void *ws = NULL;
    for (size_t i = 0; i < n->n_out; i++)
        out[i] = NULL;
    for (size_t i = 0; i < n->n_out; i++) {
        if (!out_desc[i].present)
            continue;
        out[i] = host_alloc_aligned(rt_desc_bytes(&out_desc[i]));
        if (!out[i]) {
            err = osp_error_out_of_memory();
            goto out;
        }
    }
    if (ws_bytes && !(ws = host_alloc_aligned(ws_bytes))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if (n->op->output_aliases_input) {
        memcpy(out[0], in[0], rt_desc_bytes(&out_desc[0]));
        goto out;
    }
    if ((err = osp_stream_new(osp_device_cpu(), &stream)))
        goto out;
    onnx_run_ctx ctx = {
        .stream = stream,
        .node = n->node,
        .state = n->state,
        .n_inputs = n->n_in,
        .in_desc = in_desc,
        .in = in,
        .n_outputs = n->n_out,
        .out_desc = out_desc,
        .out = out,
        .workspace = ws,
        .strings = strings,
    };
    err = rt_node_error(n->node, n->op->run(&ctx));
out:
    osp_stream_free(stream);
    host_free_aligned(ws, ws_bytes);
    if (err)
        for (size_t i = 0; i < n->n_out; i++) {
            if (out[i])
                host_free_aligned(out[i], rt_desc_bytes(&out_desc[i]));
            out[i] = NULL;
        }
    return err;
}

static onnx_desc konst_desc(const onnx_tensor *t) {
    onnx_desc d = {.present = true, .dtype = t->dtype, .shape = t->shape,
                   .host = t->data};
    return d;
}

/* Evaluates node i now when every input it reads is a constant; its
 * outputs become constants (owned) and the node dies. */
static osp_error *fold_node(onnx_rt_model *m, rt_node *n) {
    onnx_desc in_desc[n->n_in ? n->n_in : 1];
    const void *in[n->n_in ? n->n_in : 1];
    onnx_desc out_desc[n->n_out ? n->n_out : 1];
    void *out[n->n_out ? n->n_out : 1];
    for (size_t j = 0; j < n->n_in; j++) {
        int v = n->in[j];
        if (v >= 0 && !m->values[v].konst)
            return NULL; /* not foldable */
        in_desc[j] = v >= 0 ? konst_desc(m->values[v].konst)
                            : (onnx_desc){.present = false};
        in[j] = v >= 0 ? m->values[v].konst->data : NULL;
    }
    for (size_t j = 0; j < n->n_out; j++)
        out_desc[j] = (onnx_desc){.present = n->out[j] >= 0};
    onnx_infer_ctx ictx = {.node = n->node,
                           .state = n->state,
                           .n_inputs = n->n_in,
                           .inputs = in_desc,
                           .n_outputs = n->n_out,
                           .outputs = out_desc};
    osp_error *err = rt_check_strings(n, in_desc, n->n_in, "input");
    if (!err)
        err = rt_node_error(n->node, n->op->infer(&ictx));
    if (!err)
        err = rt_check_strings(n, out_desc, n->n_out, "output");
    for (size_t j = 0; !err && j < n->n_out; j++)
        if (out_desc[j].present)
            err = onnx_check_shape(n->node, &out_desc[j].shape,
                                   out_desc[j].dtype);
    if (!err)
        err = rt_run_on_host(n, in_desc, in, out_desc, ictx.workspace_bytes,
                             &m->strings, out);
    if (err)
        return err;
    for (size_t j = 0; j < n->n_out; j++) {
        if (n->out[j] < 0)
            continue;
        onnx_tensor *t = calloc(1, sizeof *t);
        if (!t) {
            for (size_t k = j; k < n->n_out; k++)
                if (out[k])
                    host_free_aligned(out[k], rt_desc_bytes(&out_desc[k]));
            return osp_error_out_of_memory();
        }
        t->dtype = out_desc[j].dtype;
        t->shape = out_desc[j].shape;
        t->data = out[j];
        t->byte_size = rt_desc_bytes(&out_desc[j]);
        rt_value *val = &m->values[n->out[j]];
        val->konst = t;
        val->konst_owned = true;
        val->producer = -1;
    }
    n->dead = true;
    return NULL;
}

static osp_error *fold_constants(onnx_rt_model *m) {
    for (size_t i = 0; i < m->n_nodes; i++) {
        rt_node *n = &m->nodes[i];
        if (n->dead || n->op->needs_only_shapes)
            continue;
        osp_error *err = fold_node(m, n);
        if (err)
            return err;
    }
    return NULL;
}

/* Drops dead nodes, keeping the order, and renumbers producers. */
static void compact_nodes(onnx_rt_model *m) {
    size_t w = 0;
    for (size_t i = 0; i < m->n_nodes; i++) {
        rt_node *n = &m->nodes[i];
        if (n->dead) {
            if (n->op && n->op->free && n->state)
                n->op->free(n->state);
            free(n->in);
            free(n->out);
            continue;
        }
        m->nodes[w++] = *n;
    }
    m->n_nodes = w;
    for (size_t i = 0; i < m->n_values; i++)
        if (!m->values[i].konst)
            m->values[i].producer = -1;
    for (size_t i = 0; i < m->n_nodes; i++)
        for (size_t j = 0; j < m->nodes[i].n_out; j++)
            if (m->nodes[i].out[j] >= 0)
                m->values[m->nodes[i].out[j]].producer = (int)i;
}

/* The runtime's form of STRING initializer `init`: a tensor (caller owns
 * *out and its data) of onnx_string elements pointing into the
 * initializer's wire bytes, which stay the model's. */
static osp_error *string_constant(const onnx_initializer *init,
                                  onnx_tensor **out) {
    const onnx_tensor *wire = &init->tensor;
    int64_t count = onnx_shape_count(&wire->shape);
    onnx_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return osp_error_out_of_memory();
    t->dtype = OSP_TYPE_BYTES;
    t->shape = wire->shape;
    t->byte_size = (size_t)count * ONNX_STRING_BYTES;
    t->data = host_alloc_aligned(t->byte_size);
    if (!t->data && t->byte_size) {
        free(t);
        return osp_error_out_of_memory();
    }
    char what[160];
    snprintf(what, sizeof what, "initializer '%s'", init->name);
    osp_error *err = onnx_strings_from_wire(wire->data, wire->byte_size, count,
                                            t->data, what);
    if (err) {
        host_free_aligned(t->data, t->byte_size);
        free(t);
        return err;
    }
    *out = t;
    return NULL;
}

/* Whether node n makes strings from nothing: a Cast to STRING, a
 * Constant or ConstantOfShape of a STRING value. */
static bool node_makes_strings(const onnx_node *n) {
    if (n->domain[0] != '\0')
        return false;
    const onnx_attr *to = onnx_node_attr(n, "to");
    if (strcmp(n->op_type, "Cast") == 0)
        return to && to->type == ONNX_ATTR_INT &&
               onnx_proto_dtype(to->i) == OSP_TYPE_BYTES;
    if (strcmp(n->op_type, "Constant") != 0 &&
        strcmp(n->op_type, "ConstantOfShape") != 0)
        return false;
    const onnx_attr *value = onnx_node_attr(n, "value");
    return (value && value->type == ONNX_ATTR_TENSOR && value->t &&
            value->t->dtype == OSP_TYPE_BYTES) ||
           onnx_node_attr(n, "value_string") ||
           onnx_node_attr(n, "value_strings");
}

bool onnx_rt_model_has_strings(const onnx_rt_model *m) {
    return m->has_strings;
}

/* Whether the graph has STRING tensors: inputs, outputs, value_infos,
 * initializers, or a node that makes strings (what a model needs strings
 * for). */
static bool graph_has_strings(const onnx_graph *g) {
    for (size_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i].dtype == OSP_TYPE_BYTES)
            return true;
    for (size_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i].dtype == OSP_TYPE_BYTES)
            return true;
    for (size_t i = 0; i < g->n_value_infos; i++)
        if (g->value_infos[i].dtype == OSP_TYPE_BYTES)
            return true;
    for (size_t i = 0; i < g->n_initializers; i++)
        if (g->initializers[i].tensor.dtype == OSP_TYPE_BYTES)
            return true;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (node_makes_strings(&g->nodes[i]))
            return true;
    return false;
}

/* Values for the graph's inputs, initializers and outputs. */
static osp_error *add_graph_values(onnx_rt_model *m) {
    onnx_graph *g = m->model->graph;
    for (size_t i = 0; i < g->n_initializers; i++) {
        int v = rt_value_intern(m, g->initializers[i].name);
        if (v < 0)
            return osp_error_out_of_memory();
        m->values[v].konst = &g->initializers[i].tensor;
        m->values[v].declared_dtype = g->initializers[i].tensor.dtype;
        if (g->initializers[i].tensor.dtype == OSP_TYPE_BYTES) {
            osp_error *err =
                string_constant(&g->initializers[i], &m->values[v].konst);
            if (err)
                return err;
            m->values[v].konst_owned = true;
        }
    }
    m->inputs = calloc(g->n_inputs ? g->n_inputs : 1, sizeof *m->inputs);
    m->outputs = calloc(g->n_outputs ? g->n_outputs : 1, sizeof *m->outputs);
    if (!m->inputs || !m->outputs)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = rt_value_intern(m, g->inputs[i].name);
        if (v < 0)
            return osp_error_out_of_memory();
        if (m->values[v].graph_input >= 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "graph input '%s' is listed twice",
                                 g->inputs[i].name);
        m->values[v].graph_input = (int)i;
        m->values[v].declared_dtype = g->inputs[i].dtype;
        m->inputs[i] = v;
    }
    m->n_inputs = g->n_inputs;
    m->value_inputs =
        calloc(g->n_inputs ? g->n_inputs : 1, sizeof *m->value_inputs);
    if (!m->value_inputs)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < g->n_outputs; i++) {
        int v = rt_value_intern(m, g->outputs[i].name);
        if (v < 0)
            return osp_error_out_of_memory();
        m->values[v].declared_dtype = g->outputs[i].dtype;
        m->outputs[i] = v;
    }
    m->n_outputs = g->n_outputs;
    return NULL;
}

/* Every graph output must be defined by something. */
static osp_error *check_outputs(const onnx_rt_model *m) {
    for (size_t i = 0; i < m->n_outputs; i++) {
        const rt_value *v = &m->values[m->outputs[i]];
        if (v->producer < 0 && !v->konst && v->graph_input < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "graph output '%s' is not defined by any "
                                 "node, initializer or graph input",
                                 v->name);
    }
    return NULL;
}

/* A flag per value (caller owns the array, m->n_values long; NULL when
 * out of memory): whether the value is a constant some live node reads. */
static bool *constants_read(const onnx_rt_model *m) {
    bool *read = calloc(m->n_values ? m->n_values : 1, sizeof *read);
    if (!read)
        return NULL;
    for (size_t i = 0; i < m->n_nodes; i++) {
        const rt_node *n = &m->nodes[i];
        for (size_t j = 0; !n->dead && j < n->n_in; j++)
            if (n->in[j] >= 0 && m->values[n->in[j]].konst)
                read[n->in[j]] = true;
    }
    return read;
}

/* Frees the data of the constants that nodes read before fusion and none
 * reads after (a Conv's weights once BatchNormalization is folded into a
 * rescaled copy): without this, ResNet-18 kept its 45 MiB of weights
 * twice. read_before is constants_read's before fusion, over the first
 * n_before values. A constant no node ever read (one a subgraph may name)
 * and the graph's outputs are kept. */
static void release_constants_fused_away(onnx_rt_model *m,
                                         const bool *read_before,
                                         size_t n_before) {
    bool *read_after = constants_read(m);
    if (!read_after)
        return; /* only memory is lost */
    for (size_t v = 0; v < n_before; v++) {
        rt_value *val = &m->values[v];
        if (!read_before[v] || read_after[v] || !val->konst ||
            rt_value_is_output(m, (int)v))
            continue;
        /* free(), not host_free_aligned: the host pool would keep
         * the block (host_pool.c says free() is safe on its blocks) */
        free(val->konst->data);
        memset(val->konst, 0, sizeof *val->konst);
        if (val->konst_owned)
            free(val->konst);
        val->konst = NULL;
        val->konst_owned = false;
    }
    free(read_after);
}

osp_error *onnx_rt_model_new(onnx_model *model, const onnx_rt_options *opts,
                             onnx_rt_model **out) {
    osp_error *err = NULL;
    onnx_rt_model *m = calloc(1, sizeof *m);
    if (!m) {
        onnx_model_free(model);
        return osp_error_out_of_memory();
    }
    m->model = model;
    pthread_mutex_init(&m->plans_lock, NULL);
    pthread_mutex_init(&m->weights_lock, NULL);
    if (opts)
        m->opts = *opts;
    else
        m->opts.fuse = true;
    if (m->opts.max_plans == 0)
        m->opts.max_plans = 16;
    if (m->opts.max_graphs == 0)
        m->opts.max_graphs = 16;
    if (m->opts.batch_chunk_bytes == 0)
        m->opts.batch_chunk_bytes = rt_default_chunk_bytes();
    if (!model->graph) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG, "the model has no graph");
        goto out;
    }
    m->has_strings = graph_has_strings(model->graph);
    if ((err = add_graph_values(m)))
        goto out;
    for (size_t i = 0; i < model->graph->n_nodes; i++)
        if ((err = rt_node_add(m, &model->graph->nodes[i])))
            goto out;
    if ((err = sort_nodes(m)) || (err = check_outputs(m)) ||
        (err = fold_constants(m)))
        goto out;
    compact_nodes(m);
    if (m->opts.fuse) {
        bool *read_before = constants_read(m);
        if (!read_before) {
            err = osp_error_out_of_memory();
            goto out;
        }
        size_t n_before = m->n_values;
        err = onnx_fuse(m);
        if (!err) {
            compact_nodes(m);
            release_constants_fused_away(m, read_before, n_before);
        }
        free(read_before);
        if (err)
            goto out;
    }
out:
    if (err) {
        onnx_rt_model_free(m);
        return err;
    }
#ifdef ONNX_TRIM_HEAP
    /* Parsing left the file's buffers and the weights fusion replaced
     * free in the middle of the heap, where glibc keeps them resident */
    malloc_trim(0);
#endif
    *out = m;
    return NULL;
}

const onnx_graph *onnx_rt_model_graph(const onnx_rt_model *m) {
    return m->model->graph;
}

osp_error *onnx_rt_model_check_device(const onnx_rt_model *m,
                                      const osp_device *dev) {
    for (size_t i = 0; i < m->n_nodes; i++) {
        const onnx_op *op = m->nodes[i].op;
        for (size_t k = 0; k < 8 && op->uses[k] != OSP_OP_NONE &&
                           op->uses[k] != OSP_OP_KIND_COUNT_;
             k++) {
            if (!osp_device_supports_op(dev, op->uses[k])) {
                osp_device_info info;
                osp_device_get_info(dev, &info);
                return rt_node_error(
                    m->nodes[i].node,
                    osp_error_new(OSP_ERROR_UNSUPPORTED,
                                  "device %s has no %s op", info.name,
                                  osp_op_kind_name(op->uses[k])));
            }
        }
    }
    return NULL;
}

void onnx_rt_model_free(onnx_rt_model *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->n_plans; i++)
        onnx_plan_free(m, m->plans[i]);
    free(m->plans);
    for (size_t i = 0; i < m->n_nodes; i++) {
        rt_node *n = &m->nodes[i];
        if (n->op && n->op->free && n->state)
            n->op->free(n->state);
        free(n->in);
        free(n->out);
    }
    free(m->nodes);
    for (size_t i = 0; i < m->n_values; i++)
        if (m->values[i].konst_owned) {
            onnx_tensor_clear(m->values[i].konst);
            free(m->values[i].konst);
        }
    free(m->values);
    free(m->inputs);
    free(m->outputs);
    free(m->value_inputs);
    for (size_t i = 0; i < m->n_synth; i++)
        onnx_node_free_synth(m->synth[i]);
    free(m->synth);
    onnx_string_pool_destroy(&m->strings);
    pthread_mutex_destroy(&m->plans_lock);
    pthread_mutex_destroy(&m->weights_lock); /* the sessions are gone */
    onnx_model_free(m->model);
    free(m);
}
