/*
 * The ONNX model loader: a ModelProto (protoc-c, onnx_wire.c's checked
 * unpack) converted into the plain, owned structs of onnx_graph.h, then
 * the protobuf message freed. See onnx_graph.h for the contract.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx_load_internal.h"

/* How deep protobuf messages may nest for a model whose subgraphs nest
 * max_graph_depth deep: each level is graph -> node -> attribute -> graph,
 * and a graph holds value infos (type -> tensor type -> shape -> dim),
 * tensors and nested types below it. */
static unsigned wire_depth_for(uint32_t max_graph_depth) {
    uint64_t depth = 3 * (uint64_t)max_graph_depth + 40;
    return depth > ONNX__WIRE_MAX_DEPTH ? ONNX__WIRE_MAX_DEPTH
                                        : (unsigned)depth;
}

/* What converting one model needs at hand. */
typedef struct load_ctx {
    onnx_load_limits limits; /* defaults filled in */
    const onnx_model *model; /* its opsets are set before the graph */
    onnx__tensor_ctx tensors;
} load_ctx;

static osp_error *convert_graph(load_ctx *ctx, Onnx__GraphProto *gp,
                                uint32_t depth, const char *where,
                                onnx_graph **out);
static void graph_free(onnx_graph *g);

/* INVALID_ARG with a printf message (a shorthand). */
static osp_error *invalid(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static osp_error *invalid(const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return osp_error_new(OSP_ERROR_INVALID_ARG, "%s", msg);
}

/* strdup of s, "" for NULL; NULL only when memory is short. */
static char *dup_or_empty(const char *s) {
    return strdup(s ? s : "");
}

/* The default domain is spelled "" or "ai.onnx"; both become "". */
static const char *normal_domain(const char *domain) {
    if (!domain || strcmp(domain, "ai.onnx") == 0)
        return "";
    return domain;
}

/* ---- freeing ---- */

static void value_info_clear(onnx_value_info *vi) {
    free(vi->name);
    for (int i = 0; i < OSP_MAX_DIMS; i++)
        free(vi->dim_params[i]);
}

static void attr_clear(onnx_attr *a) {
    free(a->name);
    free(a->s);
    if (a->t) {
        onnx_tensor_clear(a->t);
        free(a->t);
    }
    graph_free(a->g);
    free(a->floats);
    free(a->ints);
    if (a->strings)
        for (size_t i = 0; i < a->n; i++)
            free(a->strings[i]);
    free(a->strings);
    if (a->tensors)
        for (size_t i = 0; i < a->n; i++)
            onnx_tensor_clear(&a->tensors[i]);
    free(a->tensors);
    if (a->graphs)
        for (size_t i = 0; i < a->n; i++)
            graph_free(a->graphs[i]);
    free(a->graphs);
}

static void node_clear(onnx_node *n) {
    free(n->name);
    free(n->op_type);
    free(n->domain);
    if (n->inputs)
        for (size_t i = 0; i < n->n_inputs; i++)
            free(n->inputs[i]);
    free(n->inputs);
    if (n->outputs)
        for (size_t i = 0; i < n->n_outputs; i++)
            free(n->outputs[i]);
    free(n->outputs);
    if (n->attrs)
        for (size_t i = 0; i < n->n_attrs; i++)
            attr_clear(&n->attrs[i]);
    free(n->attrs);
}

/* Frees a graph, also one that conversion left half-built (counts are set
 * with calloc'ed arrays, so unset entries are zero). */
static void graph_free(onnx_graph *g) {
    if (!g)
        return;
    free(g->name);
    if (g->nodes)
        for (size_t i = 0; i < g->n_nodes; i++)
            node_clear(&g->nodes[i]);
    free(g->nodes);
    onnx_value_info *lists[] = {g->inputs, g->outputs, g->value_infos};
    size_t counts[] = {g->n_inputs, g->n_outputs, g->n_value_infos};
    for (int l = 0; l < 3; l++) {
        if (lists[l])
            for (size_t i = 0; i < counts[l]; i++)
                value_info_clear(&lists[l][i]);
        free(lists[l]);
    }
    if (g->initializers)
        for (size_t i = 0; i < g->n_initializers; i++) {
            free(g->initializers[i].name);
            onnx_tensor_clear(&g->initializers[i].tensor);
        }
    free(g->initializers);
    free(g);
}

void onnx_model_free(onnx_model *model) {
    if (!model)
        return;
    free(model->producer_name);
    if (model->opsets)
        for (size_t i = 0; i < model->n_opsets; i++)
            free(model->opsets[i].domain);
    free(model->opsets);
    graph_free(model->graph);
    free(model);
}

/* ---- lookups ---- */

int64_t onnx_model_opset(const onnx_model *model, const char *domain) {
    if (!model)
        return 0;
    domain = normal_domain(domain);
    for (size_t i = 0; i < model->n_opsets; i++)
        if (strcmp(model->opsets[i].domain, domain) == 0)
            return model->opsets[i].version;
    return 0;
}

const onnx_attr *onnx_node_attr(const onnx_node *node, const char *name) {
    if (!node || !name)
        return NULL;
    for (size_t i = 0; i < node->n_attrs; i++)
        if (strcmp(node->attrs[i].name, name) == 0)
            return &node->attrs[i];
    return NULL;
}

/* ---- value infos ---- */

/* Converts a graph input, output or value_info; `kind` ("graph input")
 * names it in errors. */
static osp_error *convert_value_info(const Onnx__ValueInfoProto *vp,
                                     const char *kind, const char *where,
                                     onnx_value_info *out) {
    if (!vp->name || !*vp->name)
        return invalid("%s: a %s has no name", where, kind);
    out->name = strdup(vp->name);
    if (!out->name)
        return osp_error_out_of_memory();
    out->dtype = OSP_TYPE_INVALID;
    const Onnx__TypeProto *type = vp->type;
    if (!type || type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
        !type->tensor_type)
        return NULL; /* sequences, maps, optionals, sparse: not ours */
    const Onnx__TypeProto__Tensor *tt = type->tensor_type;
    if (tt->has_elem_type)
        out->dtype = onnx__datatype(tt->elem_type);
    if (!tt->shape)
        return NULL;
    if (tt->shape->n_dim > OSP_MAX_DIMS)
        return invalid("%s: %s '%s' has rank %zu, more than the %d supported",
                       where, kind, vp->name, tt->shape->n_dim, OSP_MAX_DIMS);
    out->has_shape = true;
    out->rank = (int)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        out->dims[i] = -1;
        if (d->value_case ==
                ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
            d->dim_value >= 0) {
            out->dims[i] = d->dim_value;
        } else if (d->value_case ==
                       ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   d->dim_param && *d->dim_param) {
            out->dim_params[i] = strdup(d->dim_param);
            if (!out->dim_params[i])
                return osp_error_out_of_memory();
        }
    }
    return NULL;
}

/* Converts `n` value infos into *out (calloc'ed; *n_out set first so that
 * a half-built list is freed with the graph). */
static osp_error *convert_value_infos(Onnx__ValueInfoProto **vps, size_t n,
                                      const char *kind, const char *where,
                                      onnx_value_info **out, size_t *n_out) {
    if (n == 0)
        return NULL;
    *out = calloc(n, sizeof **out);
    if (!*out)
        return osp_error_out_of_memory();
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        osp_error *err = convert_value_info(vps[i], kind, where, &(*out)[i]);
        if (err)
            return err;
    }
    return NULL;
}

/* ---- attributes ---- */

/* The type of an attribute written without one (IR version 1 files): the
 * field that is set. */
static int inferred_attr_type(const Onnx__AttributeProto *ap) {
    if (ap->has_f)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    if (ap->has_i)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    if (ap->has_s)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    if (ap->t)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    if (ap->g)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    if (ap->n_floats)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    if (ap->n_ints)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    if (ap->n_strings)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    if (ap->n_tensors)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
    if (ap->n_graphs)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS;
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

/* Copies `n` elements of `size` bytes (NULL when n is 0). */
static osp_error *copy_array(const void *src, size_t n, size_t size,
                             void **out) {
    if (n == 0)
        return NULL;
    *out = malloc(n * size); /* n * size: the array already exists */
    if (!*out)
        return osp_error_out_of_memory();
    memcpy(*out, src, n * size);
    return NULL;
}

/*
 * Converts attribute `ap` of the node `what_node` ("node 'conv1'") in a
 * graph at subgraph depth `depth`; GRAPH and GRAPHS attributes convert
 * their graphs at depth + 1.
 */
static osp_error *convert_attr(load_ctx *ctx, Onnx__AttributeProto *ap,
                               const char *what_node, uint32_t depth,
                               onnx_attr *out) {
    if (!ap->name || !*ap->name)
        return invalid("%s has an attribute without a name", what_node);
    out->name = strdup(ap->name);
    if (!out->name)
        return osp_error_out_of_memory();
    char what[640];
    snprintf(what, sizeof what, "attribute '%.128s' of %s", ap->name,
             what_node);
    int type = ap->has_type ? (int)ap->type : inferred_attr_type(ap);
    osp_error *err = NULL;
    switch (type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED:
        out->type = ONNX_ATTR_UNDEFINED;
        return NULL;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        out->type = ONNX_ATTR_FLOAT;
        out->f = ap->f;
        return NULL;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        out->type = ONNX_ATTR_INT;
        out->i = ap->i;
        return NULL;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        out->type = ONNX_ATTR_STRING;
        out->s = malloc(ap->s.len + 1);
        if (!out->s)
            return osp_error_out_of_memory();
        if (ap->s.len)
            memcpy(out->s, ap->s.data, ap->s.len);
        out->s[ap->s.len] = '\0';
        out->s_len = ap->s.len;
        return NULL;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
        out->type = ONNX_ATTR_TENSOR;
        if (!ap->t)
            return invalid("%s: a TENSOR attribute without its tensor", what);
        out->t = calloc(1, sizeof *out->t);
        if (!out->t)
            return osp_error_out_of_memory();
        return onnx__tensor_from_proto(&ctx->tensors, ap->t, what, out->t);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
        out->type = ONNX_ATTR_GRAPH;
        if (!ap->g)
            return invalid("%s: a GRAPH attribute without its graph", what);
        return convert_graph(ctx, ap->g, depth + 1, what, &out->g);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        out->type = ONNX_ATTR_FLOATS;
        out->n = ap->n_floats;
        return copy_array(ap->floats, ap->n_floats, sizeof(float),
                          (void **)&out->floats);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        out->type = ONNX_ATTR_INTS;
        out->n = ap->n_ints;
        return copy_array(ap->ints, ap->n_ints, sizeof(int64_t),
                          (void **)&out->ints);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
        out->type = ONNX_ATTR_STRINGS;
        if (ap->n_strings == 0)
            return NULL;
        out->strings = calloc(ap->n_strings, sizeof *out->strings);
        if (!out->strings)
            return osp_error_out_of_memory();
        out->n = ap->n_strings;
        for (size_t i = 0; i < ap->n_strings; i++) {
            const ProtobufCBinaryData *s = &ap->strings[i];
            if (s->len && memchr(s->data, 0, s->len))
                return invalid("%s: string %zu holds a NUL byte", what, i);
            out->strings[i] = malloc(s->len + 1);
            if (!out->strings[i])
                return osp_error_out_of_memory();
            if (s->len)
                memcpy(out->strings[i], s->data, s->len);
            out->strings[i][s->len] = '\0';
        }
        return NULL;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS:
        out->type = ONNX_ATTR_TENSORS;
        if (ap->n_tensors == 0)
            return NULL;
        out->tensors = calloc(ap->n_tensors, sizeof *out->tensors);
        if (!out->tensors)
            return osp_error_out_of_memory();
        out->n = ap->n_tensors;
        for (size_t i = 0; i < ap->n_tensors && !err; i++)
            err = onnx__tensor_from_proto(&ctx->tensors, ap->tensors[i], what,
                                          &out->tensors[i]);
        return err;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
        out->type = ONNX_ATTR_GRAPHS;
        if (ap->n_graphs == 0)
            return NULL;
        out->graphs = calloc(ap->n_graphs, sizeof *out->graphs);
        if (!out->graphs)
            return osp_error_out_of_memory();
        out->n = ap->n_graphs;
        for (size_t i = 0; i < ap->n_graphs && !err; i++)
            err = convert_graph(ctx, ap->graphs[i], depth + 1, what,
                                &out->graphs[i]);
        return err;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS:
        return invalid("%s: sparse tensor attributes are not supported", what);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS:
        return invalid("%s: type attributes are not supported", what);
    default:
        return invalid("%s: unknown attribute type %d", what, type);
    }
}

/* ---- nodes ---- */

/* Copies a node's input or output names ("" for omitted ones). */
static osp_error *copy_names(char **names, size_t n, char ***out,
                             size_t *n_out) {
    if (n == 0)
        return NULL;
    *out = calloc(n, sizeof **out);
    if (!*out)
        return osp_error_out_of_memory();
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        (*out)[i] = dup_or_empty(names[i]);
        if (!(*out)[i])
            return osp_error_out_of_memory();
    }
    return NULL;
}

/* Converts node `index` of a graph (`where` names the graph). */
static osp_error *convert_node(load_ctx *ctx, Onnx__NodeProto *np, size_t index,
                               const char *where, uint32_t depth,
                               onnx_node *out) {
    char what[400];
    if (np->name && *np->name)
        snprintf(what, sizeof what, "node '%.128s'", np->name);
    else
        snprintf(what, sizeof what, "node %zu of %.256s", index, where);
    if (!np->op_type || !*np->op_type)
        return invalid("%s has no op_type", what);
    const char *domain = normal_domain(np->domain);
    out->name = dup_or_empty(np->name);
    out->op_type = strdup(np->op_type);
    out->domain = strdup(domain);
    if (!out->name || !out->op_type || !out->domain)
        return osp_error_out_of_memory();
    out->opset = onnx_model_opset(ctx->model, domain);
    osp_error *err =
        copy_names(np->input, np->n_input, &out->inputs, &out->n_inputs);
    if (!err)
        err = copy_names(np->output, np->n_output, &out->outputs,
                         &out->n_outputs);
    if (err || np->n_attribute == 0)
        return err;
    out->attrs = calloc(np->n_attribute, sizeof *out->attrs);
    if (!out->attrs)
        return osp_error_out_of_memory();
    out->n_attrs = np->n_attribute;
    for (size_t i = 0; i < np->n_attribute && !err; i++)
        err = convert_attr(ctx, np->attribute[i], what, depth, &out->attrs[i]);
    return err;
}

/* ---- graphs ---- */

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether `name` is in the sorted array `names`. */
static bool name_in(char *const *names, size_t n, const char *name) {
    return n && bsearch(&name, names, n, sizeof *names, compare_names);
}

/* The graph's inputs minus those that name an initializer. */
static osp_error *convert_inputs(const Onnx__GraphProto *gp, onnx_graph *g,
                                 const char *where) {
    osp_error *err = NULL;
    char **init_names = NULL;
    if (gp->n_input == 0)
        return NULL;
    if (g->n_initializers) {
        init_names = malloc(g->n_initializers * sizeof *init_names);
        if (!init_names)
            return osp_error_out_of_memory();
        for (size_t i = 0; i < g->n_initializers; i++)
            init_names[i] = g->initializers[i].name;
        qsort(init_names, g->n_initializers, sizeof *init_names, compare_names);
    }
    g->inputs = calloc(gp->n_input, sizeof *g->inputs);
    if (!g->inputs) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vp = gp->input[i];
        if (vp->name && name_in(init_names, g->n_initializers, vp->name))
            continue;
        err = convert_value_info(vp, "graph input", where,
                                 &g->inputs[g->n_inputs++]);
        if (err)
            goto out;
    }
out:
    free(init_names);
    return err;
}

/*
 * Converts graph `gp` at subgraph depth `depth` (0: the model's graph);
 * `where` names it in errors (its name, or the attribute holding it).
 * *out is set even on error, to the half-built graph the caller frees.
 */
static osp_error *convert_graph(load_ctx *ctx, Onnx__GraphProto *gp,
                                uint32_t depth, const char *where,
                                onnx_graph **out) {
    if (depth > ctx->limits.max_graph_depth)
        return invalid("%s: subgraphs nest deeper than %u levels", where,
                       ctx->limits.max_graph_depth);
    if (gp->n_sparse_initializer)
        return invalid("%s: sparse initializers are not supported", where);
    if (gp->n_node > ctx->limits.max_nodes)
        return invalid("%s has %zu nodes, over the limit of %u", where,
                       gp->n_node, ctx->limits.max_nodes);
    onnx_graph *g = calloc(1, sizeof *g);
    if (!g)
        return osp_error_out_of_memory();
    *out = g;
    g->name = dup_or_empty(gp->name);
    if (!g->name)
        return osp_error_out_of_memory();
    char graph_what[300];
    if (gp->name && *gp->name)
        snprintf(graph_what, sizeof graph_what, "graph '%.256s'", gp->name);
    else
        snprintf(graph_what, sizeof graph_what, "%.256s", where);
    where = graph_what;

    osp_error *err = NULL;
    if (gp->n_initializer) {
        g->initializers = calloc(gp->n_initializer, sizeof *g->initializers);
        if (!g->initializers)
            return osp_error_out_of_memory();
        g->n_initializers = gp->n_initializer;
    }
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->name || !*tp->name)
            return invalid("%s: initializer %zu has no name", where, i);
        g->initializers[i].name = strdup(tp->name);
        if (!g->initializers[i].name)
            return osp_error_out_of_memory();
        char what[300];
        snprintf(what, sizeof what, "initializer '%.256s'", tp->name);
        err = onnx__tensor_from_proto(&ctx->tensors, tp, what,
                                      &g->initializers[i].tensor);
        if (err)
            return err;
    }
    err = convert_inputs(gp, g, where);
    if (!err)
        err = convert_value_infos(gp->output, gp->n_output, "graph output",
                                  where, &g->outputs, &g->n_outputs);
    if (!err)
        err =
            convert_value_infos(gp->value_info, gp->n_value_info, "value_info",
                                where, &g->value_infos, &g->n_value_infos);
    if (err || gp->n_node == 0)
        return err;
    g->nodes = calloc(gp->n_node, sizeof *g->nodes);
    if (!g->nodes)
        return osp_error_out_of_memory();
    g->n_nodes = gp->n_node;
    for (size_t i = 0; i < gp->n_node && !err; i++)
        err = convert_node(ctx, gp->node[i], i, where, depth, &g->nodes[i]);
    return err;
}

/* ---- the model ---- */

static void resolve_limits(const onnx_load_limits *in, onnx_load_limits *out) {
    onnx_load_limits l = in ? *in : (onnx_load_limits){0};
    if (!l.max_file_bytes)
        l.max_file_bytes = ONNX__DEFAULT_MAX_FILE_BYTES;
    if (!l.max_tensor_bytes)
        l.max_tensor_bytes = ONNX__DEFAULT_MAX_TENSOR_BYTES;
    if (!l.max_nodes)
        l.max_nodes = ONNX__DEFAULT_MAX_NODES;
    if (!l.max_graph_depth)
        l.max_graph_depth = ONNX__DEFAULT_MAX_GRAPH_DEPTH;
    *out = l;
}

/* Converts an unpacked ModelProto (tensor raw_data is released as it is
 * copied). Caller owns *out. */
static osp_error *convert_model(load_ctx *ctx, Onnx__ModelProto *mp,
                                onnx_model **out) {
    osp_error *err = NULL;
    if (!mp->graph)
        return invalid("not an ONNX model: it has no graph");
    onnx_model *m = calloc(1, sizeof *m);
    if (!m)
        return osp_error_out_of_memory();
    ctx->model = m;
    m->ir_version = mp->has_ir_version ? mp->ir_version : 0;
    m->producer_name = dup_or_empty(mp->producer_name);
    if (!m->producer_name) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if (mp->n_opset_import) {
        m->opsets = calloc(mp->n_opset_import, sizeof *m->opsets);
        if (!m->opsets) {
            err = osp_error_out_of_memory();
            goto out;
        }
        m->n_opsets = mp->n_opset_import;
    }
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *op = mp->opset_import[i];
        m->opsets[i].domain = strdup(normal_domain(op->domain));
        if (!m->opsets[i].domain) {
            err = osp_error_out_of_memory();
            goto out;
        }
        m->opsets[i].version = op->has_version ? op->version : 0;
    }
    err = convert_graph(ctx, mp->graph, 0, "the main graph", &m->graph);
    if (err)
        goto out;
    *out = m;
    m = NULL;
out:
    onnx_model_free(m);
    return err;
}

/* Checks and unpacks a ModelProto of `len` bytes (borrowed) under the
 * resolved limits; *budget must outlive *msg. */
static osp_error *unpack_model(const void *data, size_t len,
                               const onnx_load_limits *limits,
                               onnx__pb_budget *budget,
                               ProtobufCMessage **msg) {
    if (len > limits->max_file_bytes)
        return invalid("the model has %zu bytes, over the limit of %llu", len,
                       (unsigned long long)limits->max_file_bytes);
    return onnx__pb_unpack(&onnx__model_proto__descriptor, data, len,
                           wire_depth_for(limits->max_graph_depth), budget,
                           msg);
}

/* Converts an unpacked ModelProto and frees it (ownership moves). */
static osp_error *convert_and_free(ProtobufCMessage *msg,
                                   onnx__pb_budget *budget,
                                   const char *base_dir,
                                   const onnx_load_limits *limits,
                                   onnx_model **out) {
    load_ctx ctx = {
        .limits = *limits,
        .tensors = {.base_dir = base_dir,
                    .max_tensor_bytes = limits->max_tensor_bytes,
                    .budget = budget},
    };
    osp_error *err = convert_model(&ctx, (Onnx__ModelProto *)msg, out);
    onnx__pb_free(msg, budget);
    onnx__tensor_ctx_destroy(&ctx.tensors);
    return err;
}

osp_error *onnx_model_load_bytes(const void *data, size_t len,
                                 const char *base_dir,
                                 const onnx_load_limits *limits,
                                 onnx_model **out) {
    onnx_load_limits l;
    resolve_limits(limits, &l);
    onnx__pb_budget budget;
    ProtobufCMessage *msg = NULL;
    osp_error *err = unpack_model(data, len, &l, &budget, &msg);
    if (err)
        return err;
    return convert_and_free(msg, &budget, base_dir, &l, out);
}

osp_error *onnx_model_load_file(const char *path,
                                const onnx_load_limits *limits,
                                onnx_model **out) {
    osp_error *err = NULL;
    char *graph_path = NULL, *base_dir = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    onnx_load_limits l;
    resolve_limits(limits, &l);

    /* A folder holds model.onnx beside its external data; a file's
     * external data lies beside it. */
    struct stat st;
    bool is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    size_t path_len = strlen(path);
    graph_path = malloc(path_len + sizeof "/model.onnx");
    base_dir = malloc(path_len + 2);
    if (!graph_path || !base_dir) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if (is_dir) {
        snprintf(graph_path, path_len + sizeof "/model.onnx", "%s/model.onnx",
                 path);
        memcpy(base_dir, path, path_len + 1);
    } else {
        memcpy(graph_path, path, path_len + 1);
        memcpy(base_dir, path, path_len + 1);
        char *slash = strrchr(base_dir, '/');
        if (!slash)
            strcpy(base_dir, ".");
        else if (slash == base_dir)
            base_dir[1] = '\0';
        else
            *slash = '\0';
    }
    err = onnx__read_file(graph_path, l.max_file_bytes, "model", &bytes, &len);
    if (err)
        goto out;
    /* The file's bytes go before the conversion copies the weights out of
     * the message, so that at most two copies are held at once. */
    onnx__pb_budget budget;
    ProtobufCMessage *msg = NULL;
    err = unpack_model(bytes, len, &l, &budget, &msg);
    free(bytes);
    bytes = NULL;
    if (err)
        goto out;
    err = convert_and_free(msg, &budget, base_dir, &l, out);
out:
    if (err)
        err = osp_error_wrap(err, "%s", graph_path ? graph_path : path);
    free(bytes);
    free(base_dir);
    free(graph_path);
    return err;
}
