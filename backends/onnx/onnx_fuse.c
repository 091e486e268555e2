/*
 * Fusion passes, run at load unless the config's graph level is -1. Each
 * pass finds a chain whose inner tensors nobody else reads (and that are
 * not graph outputs), puts one node in place of the chain's last node (so
 * the order stays topological) and marks the others dead:
 *
 *   Conv → BatchNormalization        FusedConv, weights and bias rescaled
 *   Conv → Add(constant [C,1,1])     FusedConv with the sum as its bias
 *   Conv → Add(tensor)               FusedConv with a residual input
 *   Conv → Relu|Clip|LeakyRelu|...   FusedConv with an activation
 *   MatMul → Add(constant [N])       FusedMatMul with a bias
 *   FusedMatMul → activation         FusedMatMul with an activation
 *   Gemm → activation                FusedGemm
 *   x·½·(1 + erf(x/√2))              Gelu
 *   (x - mean) / sqrt(var + eps)·γ+β LayerNormalization
 *
 * The fused ops (domain "osprey") take Conv's and MatMul's attributes plus
 * "activation" and "activation_params" (onnx_ops.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_memory.h"
#include "onnx_rt_internal.h"

#define FUSED_DOMAIN "osprey"

/* ---- building nodes ------------------------------------------------------
 */

void onnx_node_free_synth(onnx_node *n) {
    if (!n)
        return;
    free(n->name);
    free(n->op_type);
    free(n->domain);
    for (size_t i = 0; i < n->n_inputs; i++)
        free(n->inputs[i]);
    for (size_t i = 0; i < n->n_outputs; i++)
        free(n->outputs[i]);
    free(n->inputs);
    free(n->outputs);
    for (size_t i = 0; i < n->n_attrs; i++) {
        onnx_attr *a = &n->attrs[i];
        free(a->name);
        free(a->s);
        free(a->floats);
        free(a->ints);
        if (a->strings)
            for (size_t k = 0; k < a->n; k++)
                free(a->strings[k]);
        free(a->strings);
    }
    free(n->attrs);
    free(n);
}

/* A copy of the scalar and list attributes of `from` (not tensors or
 * graphs: the ops fused here have none). */
static bool copy_attr(onnx_attr *to, const onnx_attr *from) {
    memset(to, 0, sizeof *to);
    to->type = from->type;
    to->f = from->f;
    to->i = from->i;
    to->n = from->n;
    if (!(to->name = strdup(from->name)))
        return false;
    if (from->s && !(to->s = strdup(from->s)))
        return false;
    to->s_len = from->s_len;
    if (from->ints && !(to->ints = malloc(from->n * sizeof *to->ints + 1)))
        return false;
    if (from->ints)
        memcpy(to->ints, from->ints, from->n * sizeof *to->ints);
    if (from->floats &&
        !(to->floats = malloc(from->n * sizeof *to->floats + 1)))
        return false;
    if (from->floats)
        memcpy(to->floats, from->floats, from->n * sizeof *to->floats);
    return from->type != ONNX_ATTR_TENSOR && from->type != ONNX_ATTR_GRAPH &&
           from->type != ONNX_ATTR_TENSORS && from->type != ONNX_ATTR_GRAPHS &&
           from->type != ONNX_ATTR_STRINGS;
}

/* A new node `op_type` in `domain` (opset `opset`) named after `like`,
 * with the attributes of `attrs_of` (may be NULL), reading `inputs` and
 * writing `output`. The model owns it. NULL on OOM or an attribute that
 * cannot be copied. */
static onnx_node *synth_node(onnx_rt_model *m, const char *op_type,
                             const char *domain, int64_t opset,
                             const onnx_node *like, const onnx_node *attrs_of,
                             const char *const *inputs, size_t n_inputs,
                             const char *output) {
    if (m->n_synth == m->cap_synth) {
        size_t cap = m->cap_synth ? m->cap_synth * 2 : 16;
        onnx_node **grown = realloc(m->synth, cap * sizeof *grown);
        if (!grown)
            return NULL;
        m->synth = grown;
        m->cap_synth = cap;
    }
    onnx_node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    m->synth[m->n_synth++] = n;
    size_t n_attrs = attrs_of ? attrs_of->n_attrs : 0;
    n->name = strdup(like->name);
    n->op_type = strdup(op_type);
    n->domain = strdup(domain);
    n->opset = opset;
    n->inputs = calloc(n_inputs, sizeof *n->inputs);
    n->outputs = calloc(1, sizeof *n->outputs);
    n->attrs = calloc(n_attrs + 2, sizeof *n->attrs);
    if (!n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs ||
        !n->attrs)
        return NULL;
    for (size_t i = 0; i < n_inputs; i++, n->n_inputs++)
        if (!(n->inputs[i] = strdup(inputs[i] ? inputs[i] : "")))
            return NULL;
    if (!(n->outputs[0] = strdup(output)))
        return NULL;
    n->n_outputs = 1;
    for (size_t i = 0; i < n_attrs; i++, n->n_attrs++)
        if (!copy_attr(&n->attrs[i], &attrs_of->attrs[i])) {
            n->n_attrs++;
            return NULL;
        }
    return n;
}

/* Adds attribute "activation" = act and "activation_params" = params. */
static bool add_activation(onnx_node *n, const char *act, const float *params,
                           size_t n_params) {
    onnx_attr *a = &n->attrs[n->n_attrs];
    memset(a, 0, 2 * sizeof *a);
    a->type = ONNX_ATTR_STRING;
    a->name = strdup("activation");
    a->s = strdup(act);
    a->s_len = strlen(act);
    n->n_attrs++;
    if (!a->name || !a->s)
        return false;
    a++;
    a->type = ONNX_ATTR_FLOATS;
    a->name = strdup("activation_params");
    a->floats = malloc(2 * sizeof *a->floats);
    a->n = n_params;
    n->n_attrs++;
    if (!a->name || !a->floats)
        return false;
    if (n_params) /* params may be NULL then; memcpy must not see it */
        memcpy(a->floats, params, n_params * sizeof *params);
    return true;
}

/* Replaces m->nodes[at] by `node` (already built), binding it afresh;
 * the replaced node's state goes. */
static osp_error *replace_node(onnx_rt_model *m, size_t at, onnx_node *node) {
    rt_node old = m->nodes[at];
    /* rt_node_add appends; move the appended node into place. */
    osp_error *err = rt_node_add(m, node);
    rt_node fresh = m->nodes[--m->n_nodes];
    if (err) {
        if (fresh.op && fresh.op->free && fresh.state)
            fresh.op->free(fresh.state);
        free(fresh.in);
        free(fresh.out);
        return err;
    }
    if (old.op && old.op->free && old.state)
        old.op->free(old.state);
    free(old.in);
    free(old.out);
    m->nodes[at] = fresh;
    for (size_t j = 0; j < fresh.n_out; j++)
        if (fresh.out[j] >= 0)
            m->values[fresh.out[j]].producer = (int)at;
    return NULL;
}

/* ---- matching --------------------------------------------------------------
 */

static bool is_op(const rt_node *n, const char *op_type) {
    return !n->dead && strcmp(n->node->op_type, op_type) == 0 &&
           (!n->node->domain[0] || strcmp(n->node->domain, "ai.onnx") == 0);
}

static bool is_fused(const rt_node *n, const char *op_type) {
    return !n->dead && strcmp(n->node->op_type, op_type) == 0 &&
           strcmp(n->node->domain, FUSED_DOMAIN) == 0;
}

/* The one live node reading value v (v not a graph output), or -1. */
static int sole_consumer(const onnx_rt_model *m, int v) {
    if (v < 0 || rt_value_is_output(m, v))
        return -1;
    int found = -1;
    for (size_t i = 0; i < m->n_nodes; i++) {
        const rt_node *n = &m->nodes[i];
        if (n->dead)
            continue;
        for (size_t j = 0; j < n->n_in; j++)
            if (n->in[j] == v) {
                if (found >= 0)
                    return -1;
                found = (int)i;
            }
    }
    return found;
}

static const onnx_tensor *konst_of(const onnx_rt_model *m, int v) {
    return v >= 0 ? m->values[v].konst : NULL;
}

/* A constant FP32 scalar (any shape of one element) near `want`. */
static bool konst_near(const onnx_rt_model *m, int v, double want) {
    const onnx_tensor *t = konst_of(m, v);
    if (!t || t->dtype != OSP_TYPE_FP32 || t->byte_size != sizeof(float))
        return false;
    return fabs(*(const float *)t->data - want) <= 1e-4 * fabs(want) + 1e-6;
}

/* The input of binary node n that is not `v` (-1 when both are). */
static int other_input(const rt_node *n, int v) {
    if (n->n_in != 2)
        return -1;
    return n->in[0] == v ? n->in[1] : n->in[1] == v ? n->in[0] : -1;
}

static const char *node_input_name(const onnx_rt_model *m, const rt_node *n,
                                   size_t j) {
    return j < n->n_in && n->in[j] >= 0 ? m->values[n->in[j]].name : "";
}

/* A constant tensor the model owns, added as a new value named
 * `<base>/<suffix>`; its name string is owned by a synth node slot. */
static int add_konst(onnx_rt_model *m, const onnx_node *like,
                     const char *suffix, onnx_tensor *t) {
    char name[512];
    snprintf(name, sizeof name, "%s/%s", like->name[0] ? like->name : "node",
             suffix);
    /* The name must outlive the value: keep it in a synth node. */
    onnx_node *holder =
        synth_node(m, "Constant", "", 1, like, NULL, NULL, 0, name);
    if (!holder)
        return -1;
    int v = rt_value_intern(m, holder->outputs[0]);
    if (v < 0)
        return -1;
    onnx_tensor *copy = malloc(sizeof *copy);
    if (!copy)
        return -1;
    *copy = *t;
    m->values[v].konst = copy;
    m->values[v].konst_owned = true;
    return v;
}

/* ---- Conv ------------------------------------------------------------------
 */

/* Folds BatchNormalization (constant statistics) into the Conv before it:
 * w' = w·s, b' = (b - mean)·s + beta with s = scale / sqrt(var + eps). */
static osp_error *fuse_conv_bn(onnx_rt_model *m, size_t ci) {
    rt_node *conv = &m->nodes[ci];
    if (!(is_op(conv, "Conv") || is_fused(conv, "FusedConv")) ||
        conv->n_in > 3 || conv->n_out != 1)
        return NULL;
    if (onnx_node_attr(conv->node, "activation"))
        return NULL;
    int bi = sole_consumer(m, conv->out[0]);
    if (bi < 0)
        return NULL;
    rt_node *bn = &m->nodes[bi];
    if (!is_op(bn, "BatchNormalization") || bn->n_in != 5 ||
        bn->in[0] != conv->out[0])
        return NULL;
    for (size_t j = 1; j < bn->n_out; j++)
        if (bn->out[j] >= 0)
            return NULL; /* training outputs */
    const onnx_attr *training = onnx_node_attr(bn->node, "training_mode");
    if (training && training->i)
        return NULL;
    const onnx_tensor *w = konst_of(m, conv->in[1]);
    const onnx_tensor *b = conv->n_in > 2 ? konst_of(m, conv->in[2]) : NULL;
    const onnx_tensor *st[4];
    for (int k = 0; k < 4; k++)
        st[k] = konst_of(m, bn->in[1 + k]);
    if (!w || w->dtype != OSP_TYPE_FP32 || w->shape.rank < 3 ||
        (conv->n_in > 2 && conv->in[2] >= 0 && !b))
        return NULL;
    int64_t cout = w->shape.dims[0];
    for (int k = 0; k < 4; k++)
        if (!st[k] || st[k]->dtype != OSP_TYPE_FP32 ||
            st[k]->byte_size != (size_t)cout * sizeof(float))
            return NULL;
    if (b && (b->dtype != OSP_TYPE_FP32 ||
              b->byte_size != (size_t)cout * sizeof(float)))
        return NULL;
    const onnx_attr *eps_attr = onnx_node_attr(bn->node, "epsilon");
    float eps = eps_attr ? eps_attr->f : 1e-5f;

    onnx_tensor nw = {.dtype = OSP_TYPE_FP32, .shape = w->shape,
                      .byte_size = w->byte_size};
    onnx_tensor nb = {.dtype = OSP_TYPE_FP32,
                      .shape = {.rank = 1, .dims = {cout}},
                      .byte_size = (size_t)cout * sizeof(float)};
    nw.data = host_alloc_aligned(nw.byte_size);
    nb.data = host_alloc_aligned(nb.byte_size);
    if (!nw.data || !nb.data) {
        onnx_tensor_clear(&nw);
        onnx_tensor_clear(&nb);
        return osp_error_out_of_memory();
    }
    const float *scale = st[0]->data, *beta = st[1]->data,
                *mean = st[2]->data, *var = st[3]->data;
    size_t per = w->byte_size / sizeof(float) / (size_t)cout;
    for (int64_t c = 0; c < cout; c++) {
        float s = scale[c] / sqrtf(var[c] + eps);
        const float *src = (const float *)w->data + (size_t)c * per;
        float *dst = (float *)nw.data + (size_t)c * per;
        for (size_t k = 0; k < per; k++)
            dst[k] = src[k] * s;
        float bias = b ? ((const float *)b->data)[c] : 0.0f;
        ((float *)nb.data)[c] = (bias - mean[c]) * s + beta[c];
    }
    int wv = add_konst(m, bn->node, "fused_weight", &nw);
    int bv = wv >= 0 ? add_konst(m, bn->node, "fused_bias", &nb) : -1;
    if (wv < 0 || bv < 0) {
        if (wv < 0)
            onnx_tensor_clear(&nw);
        if (bv < 0)
            onnx_tensor_clear(&nb);
        return osp_error_out_of_memory();
    }
    const char *inputs[3] = {node_input_name(m, conv, 0), m->values[wv].name,
                             m->values[bv].name};
    onnx_node *fused = synth_node(m, "FusedConv", FUSED_DOMAIN, 1, conv->node,
                                  conv->node, inputs, 3,
                                  m->values[bn->out[0]].name);
    if (!fused || !add_activation(fused, "", NULL, 0))
        return osp_error_out_of_memory();
    m->nodes[ci].dead = true;
    return replace_node(m, (size_t)bi, fused);
}

/* The activation a node computes, as FusedConv/FusedMatMul spell it, or
 * NULL; params gets its parameters. */
static const char *activation_of(const onnx_rt_model *m, const rt_node *n,
                                 float params[2], size_t *n_params) {
    *n_params = 0;
    const onnx_attr *a;
    if (is_op(n, "Relu"))
        return "Relu";
    if (is_op(n, "Sigmoid"))
        return "Sigmoid";
    if (is_op(n, "Tanh"))
        return "Tanh";
    if (is_op(n, "HardSwish"))
        return "HardSwish";
    if (is_op(n, "LeakyRelu")) {
        a = onnx_node_attr(n->node, "alpha");
        params[0] = a ? a->f : 0.01f;
        *n_params = 1;
        return "LeakyRelu";
    }
    if (is_op(n, "HardSigmoid")) {
        a = onnx_node_attr(n->node, "alpha");
        params[0] = a ? a->f : 0.2f;
        a = onnx_node_attr(n->node, "beta");
        params[1] = a ? a->f : 0.5f;
        *n_params = 2;
        return "HardSigmoid";
    }
    if (is_op(n, "Clip")) {
        params[0] = -INFINITY;
        params[1] = INFINITY;
        if (n->node->opset < 11) {
            if ((a = onnx_node_attr(n->node, "min")))
                params[0] = a->f;
            if ((a = onnx_node_attr(n->node, "max")))
                params[1] = a->f;
        } else {
            for (size_t j = 1; j < 3 && j < n->n_in; j++) {
                if (n->in[j] < 0)
                    continue;
                const onnx_tensor *t = konst_of(m, n->in[j]);
                if (!t || t->dtype != OSP_TYPE_FP32 ||
                    t->byte_size != sizeof(float))
                    return NULL;
                params[j - 1] = *(const float *)t->data;
            }
        }
        *n_params = 2;
        return "Clip";
    }
    if (is_op(n, "Gelu")) {
        a = onnx_node_attr(n->node, "approximate");
        return a && a->s && strcmp(a->s, "tanh") == 0 ? "GeluTanh" : "Gelu";
    }
    return NULL;
}

/* Conv/FusedConv followed by Add (a [C,1,1] constant becomes the bias,
 * another tensor the residual) or an activation. */
static osp_error *fuse_conv_tail(onnx_rt_model *m, size_t ci) {
    rt_node *conv = &m->nodes[ci];
    if (!(is_op(conv, "Conv") || is_fused(conv, "FusedConv")) ||
        conv->n_out != 1)
        return NULL;
    const onnx_attr *act = onnx_node_attr(conv->node, "activation");
    bool has_act = act && act->s && act->s[0];
    int ni = sole_consumer(m, conv->out[0]);
    if (ni < 0)
        return NULL;
    rt_node *next = &m->nodes[ni];
    const char *in[4] = {node_input_name(m, conv, 0),
                         node_input_name(m, conv, 1),
                         node_input_name(m, conv, 2),
                         node_input_name(m, conv, 3)};
    const char *fused_act = has_act ? act->s : "";
    float params[2] = {0, 0};
    size_t n_params = 0;
    const onnx_attr *ap = onnx_node_attr(conv->node, "activation_params");
    if (has_act && ap) {
        n_params = ap->n < 2 ? ap->n : 2;
        memcpy(params, ap->floats, n_params * sizeof(float));
    }
    if (is_op(next, "Add") && !has_act && !in[3][0]) {
        int other = other_input(next, conv->out[0]);
        if (other < 0 || other == conv->out[0])
            return NULL;
        const onnx_tensor *w = konst_of(m, conv->in[1]);
        const onnx_tensor *k = konst_of(m, other);
        if (k) {
            /* A per-channel constant folds into the bias. */
            if (!w || k->dtype != OSP_TYPE_FP32 || w->shape.rank < 3)
                return NULL;
            int64_t cout = w->shape.dims[0];
            if ((int64_t)(k->byte_size / sizeof(float)) != cout)
                return NULL;
            for (int d = 0; d < k->shape.rank; d++)
                if (k->shape.dims[d] != 1 && k->shape.dims[d] != cout)
                    return NULL;
            if (k->shape.rank < 3 || k->shape.dims[k->shape.rank - 3] != cout)
                return NULL;
            const onnx_tensor *b = in[2][0] ? konst_of(m, conv->in[2]) : NULL;
            if (in[2][0] && !b)
                return NULL;
            onnx_tensor nb = {.dtype = OSP_TYPE_FP32,
                              .shape = {.rank = 1, .dims = {cout}},
                              .byte_size = (size_t)cout * sizeof(float)};
            if (!(nb.data = host_alloc_aligned(nb.byte_size)))
                return osp_error_out_of_memory();
            for (int64_t c = 0; c < cout; c++)
                ((float *)nb.data)[c] =
                    ((const float *)k->data)[c] +
                    (b ? ((const float *)b->data)[c] : 0.0f);
            int bv = add_konst(m, next->node, "fused_bias", &nb);
            if (bv < 0) {
                onnx_tensor_clear(&nb);
                return osp_error_out_of_memory();
            }
            in[2] = m->values[bv].name;
        } else {
            in[3] = m->values[other].name;
        }
    } else {
        const char *a = has_act ? NULL : activation_of(m, next, params,
                                                       &n_params);
        if (!a || next->in[0] != conv->out[0])
            return NULL;
        fused_act = a;
    }
    size_t n_in = in[3][0] ? 4 : 3;
    onnx_node *fused = synth_node(m, "FusedConv", FUSED_DOMAIN, 1, conv->node,
                                  conv->node, in, n_in,
                                  m->values[next->out[0]].name);
    if (!fused)
        return osp_error_out_of_memory();
    /* The copied attributes may already hold an activation: drop them. */
    for (size_t i = 0; i < fused->n_attrs;) {
        onnx_attr *at = &fused->attrs[i];
        if (strncmp(at->name, "activation", 10) == 0) {
            free(at->name);
            free(at->s);
            free(at->floats);
            memmove(at, at + 1, (fused->n_attrs - i - 1) * sizeof *at);
            fused->n_attrs--;
            continue;
        }
        i++;
    }
    if (!add_activation(fused, fused_act, params, n_params))
        return osp_error_out_of_memory();
    m->nodes[ci].dead = true;
    return replace_node(m, (size_t)ni, fused);
}

/* ---- MatMul ----------------------------------------------------------------
 */

/* MatMul → Add(constant [N]) → FusedMatMul(bias); FusedMatMul →
 * activation. */
static osp_error *fuse_matmul(onnx_rt_model *m, size_t mi) {
    rt_node *mm = &m->nodes[mi];
    bool plain = is_op(mm, "MatMul");
    if (!(plain || is_fused(mm, "FusedMatMul")) || mm->n_out != 1)
        return NULL;
    int ni = sole_consumer(m, mm->out[0]);
    if (ni < 0)
        return NULL;
    rt_node *next = &m->nodes[ni];
    const char *in[3] = {node_input_name(m, mm, 0), node_input_name(m, mm, 1),
                         node_input_name(m, mm, 2)};
    const char *act = "";
    float params[2] = {0, 0};
    size_t n_params = 0;
    if (plain && is_op(next, "Add")) {
        int other = other_input(next, mm->out[0]);
        const onnx_tensor *k = konst_of(m, other);
        const onnx_tensor *w = konst_of(m, mm->in[1]);
        if (!k || !w || k->dtype != OSP_TYPE_FP32 || k->shape.rank != 1 ||
            w->shape.rank < 1 ||
            k->shape.dims[0] != w->shape.dims[w->shape.rank - 1])
            return NULL;
        in[2] = m->values[other].name;
    } else if (!plain) {
        const onnx_attr *has = onnx_node_attr(mm->node, "activation");
        if (has && has->s && has->s[0])
            return NULL;
        act = activation_of(m, next, params, &n_params);
        if (!act || next->in[0] != mm->out[0])
            return NULL;
    } else {
        return NULL;
    }
    onnx_node *fused =
        synth_node(m, "FusedMatMul", FUSED_DOMAIN, 1, mm->node, NULL, in, 3,
                   m->values[next->out[0]].name);
    if (!fused || !add_activation(fused, act, params, n_params))
        return osp_error_out_of_memory();
    m->nodes[mi].dead = true;
    return replace_node(m, (size_t)ni, fused);
}

/* Gemm → activation: FusedGemm (Gemm's inputs and attributes). */
static osp_error *fuse_gemm(onnx_rt_model *m, size_t gi) {
    rt_node *gemm = &m->nodes[gi];
    if (!is_op(gemm, "Gemm") || gemm->n_out != 1)
        return NULL;
    int ni = sole_consumer(m, gemm->out[0]);
    if (ni < 0)
        return NULL;
    rt_node *next = &m->nodes[ni];
    float params[2] = {0, 0};
    size_t n_params = 0;
    const char *act = activation_of(m, next, params, &n_params);
    if (!act || next->in[0] != gemm->out[0])
        return NULL;
    const char *in[3] = {node_input_name(m, gemm, 0),
                         node_input_name(m, gemm, 1),
                         node_input_name(m, gemm, 2)};
    onnx_node *fused = synth_node(m, "FusedGemm", FUSED_DOMAIN, 1, gemm->node,
                                  gemm->node, in, gemm->n_in,
                                  m->values[next->out[0]].name);
    if (!fused || !add_activation(fused, act, params, n_params))
        return osp_error_out_of_memory();
    m->nodes[gi].dead = true;
    return replace_node(m, (size_t)ni, fused);
}

/* ---- Gelu and LayerNormalization patterns ----------------------------------
 */

/* Erf(x / √2) (or x · 1/√2) → +1 → · x → · ½ (in either order): Gelu. */
static osp_error *fuse_gelu(onnx_rt_model *m, size_t ei) {
    rt_node *erf = &m->nodes[ei];
    if (!is_op(erf, "Erf"))
        return NULL;
    int di = m->values[erf->in[0]].producer;
    if (di < 0)
        return NULL;
    rt_node *div = &m->nodes[di];
    int x = -1;
    if (is_op(div, "Div") && konst_near(m, div->in[1], M_SQRT2))
        x = div->in[0];
    else if (is_op(div, "Mul") && konst_near(m, div->in[1], M_SQRT1_2))
        x = div->in[0];
    if (x < 0 || sole_consumer(m, div->out[0]) != (int)ei)
        return NULL;
    int ai = sole_consumer(m, erf->out[0]);
    if (ai < 0 || !is_op(&m->nodes[ai], "Add") ||
        !konst_near(m, other_input(&m->nodes[ai], erf->out[0]), 1.0))
        return NULL;
    rt_node *add = &m->nodes[ai];
    int m1 = sole_consumer(m, add->out[0]);
    if (m1 < 0 || !is_op(&m->nodes[m1], "Mul"))
        return NULL;
    int m1_other = other_input(&m->nodes[m1], add->out[0]);
    int last = -1;
    if (m1_other == x) {
        /* (x · (1 + erf)) · ½ */
        int m2 = sole_consumer(m, m->nodes[m1].out[0]);
        if (m2 >= 0 && is_op(&m->nodes[m2], "Mul") &&
            konst_near(m, other_input(&m->nodes[m2], m->nodes[m1].out[0]),
                       0.5))
            last = m2;
    } else if (m1_other >= 0) {
        /* (x · ½) · (1 + erf) */
        int hp = m->values[m1_other].producer;
        if (hp >= 0 && is_op(&m->nodes[hp], "Mul") &&
            other_input(&m->nodes[hp], x) >= 0 &&
            konst_near(m, other_input(&m->nodes[hp], x), 0.5) &&
            sole_consumer(m, m->nodes[hp].out[0]) == m1) {
            m->nodes[hp].dead = true;
            last = m1;
        }
    }
    if (last < 0)
        return NULL;
    const char *in[1] = {m->values[x].name};
    onnx_node *gelu = synth_node(m, "Gelu", "", 20, m->nodes[last].node, NULL,
                                 in, 1,
                                 m->values[m->nodes[last].out[0]].name);
    if (!gelu)
        return osp_error_out_of_memory();
    m->nodes[di].dead = true;
    m->nodes[ei].dead = true;
    m->nodes[ai].dead = true;
    if (last != m1)
        m->nodes[m1].dead = true;
    return replace_node(m, (size_t)last, gelu);
}

/* ReduceMean over the last axis, as exporters write it for opset < 18. */
static bool reduces_last_axis(const rt_node *n) {
    if (!is_op(n, "ReduceMean") || n->n_in != 1)
        return false;
    const onnx_attr *axes = onnx_node_attr(n->node, "axes");
    const onnx_attr *keep = onnx_node_attr(n->node, "keepdims");
    return axes && axes->n == 1 && axes->ints[0] == -1 && (!keep || keep->i);
}

/* d = x - mean(x); y = d / sqrt(mean(d²) + eps) · γ + β over the last
 * axis: LayerNormalization(x, γ, β). */
static osp_error *fuse_layer_norm(onnx_rt_model *m, size_t si) {
    rt_node *sub = &m->nodes[si];
    if (!is_op(sub, "Sub"))
        return NULL;
    int x = sub->in[0];
    int mi = m->values[sub->in[1]].producer;
    if (mi < 0 || !reduces_last_axis(&m->nodes[mi]) ||
        m->nodes[mi].in[0] != x)
        return NULL;
    int d = sub->out[0];
    /* d has two readers: Pow and Div. */
    int pow_i = -1, div_i = -1;
    for (size_t i = 0; i < m->n_nodes; i++) {
        rt_node *n = &m->nodes[i];
        if (n->dead || n->n_in < 1 || n->in[0] != d)
            continue;
        if (is_op(n, "Pow") && konst_near(m, n->in[1], 2.0))
            pow_i = (int)i;
        else if (is_op(n, "Div"))
            div_i = (int)i;
        else
            return NULL;
    }
    if (pow_i < 0 || div_i < 0 || rt_value_is_output(m, d) ||
        rt_value_consumers(m, d) != 2)
        return NULL;
    int vi = sole_consumer(m, m->nodes[pow_i].out[0]);
    if (vi < 0 || !reduces_last_axis(&m->nodes[vi]))
        return NULL;
    int ei = sole_consumer(m, m->nodes[vi].out[0]);
    if (ei < 0 || !is_op(&m->nodes[ei], "Add"))
        return NULL;
    const onnx_tensor *eps =
        konst_of(m, other_input(&m->nodes[ei], m->nodes[vi].out[0]));
    if (!eps || eps->dtype != OSP_TYPE_FP32 || eps->byte_size != sizeof(float))
        return NULL;
    int qi = sole_consumer(m, m->nodes[ei].out[0]);
    if (qi < 0 || !is_op(&m->nodes[qi], "Sqrt") ||
        sole_consumer(m, m->nodes[qi].out[0]) != div_i ||
        m->nodes[div_i].in[1] != m->nodes[qi].out[0])
        return NULL;
    if (sole_consumer(m, m->nodes[mi].out[0]) != (int)si)
        return NULL;
    int gi = sole_consumer(m, m->nodes[div_i].out[0]);
    if (gi < 0 || !is_op(&m->nodes[gi], "Mul"))
        return NULL;
    int gamma = other_input(&m->nodes[gi], m->nodes[div_i].out[0]);
    int bi = sole_consumer(m, m->nodes[gi].out[0]);
    if (bi < 0 || !is_op(&m->nodes[bi], "Add"))
        return NULL;
    int beta = other_input(&m->nodes[bi], m->nodes[gi].out[0]);
    const onnx_tensor *g = konst_of(m, gamma), *b = konst_of(m, beta);
    if (!g || !b || g->shape.rank != 1 || b->shape.rank != 1 ||
        g->dtype != OSP_TYPE_FP32 || b->dtype != OSP_TYPE_FP32)
        return NULL;
    const char *in[3] = {m->values[x].name, m->values[gamma].name,
                         m->values[beta].name};
    onnx_node *ln = synth_node(m, "LayerNormalization", "", 17,
                               m->nodes[bi].node, NULL, in, 3,
                               m->values[m->nodes[bi].out[0]].name);
    if (!ln)
        return osp_error_out_of_memory();
    onnx_attr *a = &ln->attrs[ln->n_attrs++];
    a->type = ONNX_ATTR_FLOAT;
    a->f = *(const float *)eps->data;
    if (!(a->name = strdup("epsilon")))
        return osp_error_out_of_memory();
    a = &ln->attrs[ln->n_attrs++];
    a->type = ONNX_ATTR_INT;
    a->i = -1;
    if (!(a->name = strdup("axis")))
        return osp_error_out_of_memory();
    int dead[] = {(int)si, mi, pow_i, vi, ei, qi, div_i, gi};
    for (size_t k = 0; k < sizeof dead / sizeof dead[0]; k++)
        m->nodes[dead[k]].dead = true;
    return replace_node(m, (size_t)bi, ln);
}

typedef osp_error *(*fuse_pass)(onnx_rt_model *m, size_t i);

osp_error *onnx_fuse(onnx_rt_model *m) {
    /* Patterns that make new ops first, then the epilogues that absorb
     * them; each pass walks the nodes once, and runs only when the
     * registry has the op it makes. */
    static const struct {
        fuse_pass run;
        const char *domain, *makes; /* the op it puts in the graph */
        int64_t opset;
    } passes[] = {
        {fuse_gelu, "", "Gelu", 20},
        {fuse_layer_norm, "", "LayerNormalization", 17},
        {fuse_conv_bn, FUSED_DOMAIN, "FusedConv", 1},
        {fuse_conv_tail, FUSED_DOMAIN, "FusedConv", 1}, /* bias/residual */
        {fuse_conv_tail, FUSED_DOMAIN, "FusedConv", 1}, /* activation */
        {fuse_conv_tail, FUSED_DOMAIN, "FusedConv", 1},
        {fuse_matmul, FUSED_DOMAIN, "FusedMatMul", 1}, /* bias */
        {fuse_matmul, FUSED_DOMAIN, "FusedMatMul", 1}, /* activation */
        {fuse_gemm, FUSED_DOMAIN, "FusedGemm", 1},
    };
    for (size_t p = 0; p < sizeof passes / sizeof passes[0]; p++) {
        if (!onnx_op_find(passes[p].domain, passes[p].makes, passes[p].opset))
            continue;
        for (size_t i = 0; i < m->n_nodes; i++) {
            if (m->nodes[i].dead)
                continue;
            osp_error *err = passes[p].run(m, i);
            if (err)
                return err;
        }
    }
    return NULL;
}
