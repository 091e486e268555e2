/*
 * NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12 on).
 *
 * Both view the scores as [N, C, D] (D the product of the trailing dims,
 * 1 for [N, C]) and the target as [N, D]. SoftmaxCrossEntropyLoss first
 * takes the log-softmax over C (into its optional second output, or the
 * workspace); the rest is NLL:
 *   loss[n, d] = -x[n, t, d] * w[t]  with t = target[n, d]
 * and 0 where t is the ignore_index. The picked scores are one flat
 * gather at t * D + (n * C * D + d), the offsets from an iota; the
 * weights a gather of the weight input at t (1 without it). Targets equal
 * to ignore_index read class 0 instead (it may be out of range) and get
 * weight 0. Reductions: none, sum, and mean = sum / sum of the weights
 * (the count of targets not ignored without a weight input), as
 * onnxruntime does.
 *
 * The index arithmetic runs in the target's dtype (INT64, or INT32 when
 * N * C * D fits in it), so no cast is needed.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_extra.h"

typedef enum loss_reduction {
    LOSS_NONE,
    LOSS_SUM,
    LOSS_MEAN,
} loss_reduction;

typedef struct loss_state {
    loss_reduction reduction;
    bool has_ignore;
    int64_t ignore_index;
    bool softmax; /* SoftmaxCrossEntropyLoss */
} loss_state;

osp_error *onnx_extra__loss_prepare(const onnx_node *node, void **state) {
    const char *red;
    osp_error *err = onnx_attr_string(node, "reduction", "mean", &red);
    if (err)
        return err;
    loss_state st = {.softmax =
                         strcmp(node->op_type, "SoftmaxCrossEntropyLoss") == 0};
    if (strcmp(red, "none") == 0)
        st.reduction = LOSS_NONE;
    else if (strcmp(red, "sum") == 0)
        st.reduction = LOSS_SUM;
    else if (strcmp(red, "mean") == 0)
        st.reduction = LOSS_MEAN;
    else
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "attribute 'reduction' = '%s' is not "
                                 "supported (none, sum, mean)",
                                 red);
    st.has_ignore = onnx_node_attr(node, "ignore_index") != NULL;
    if ((err = onnx_attr_int(node, "ignore_index", 0, &st.ignore_index)))
        return err;
    loss_state *p = malloc(sizeof *p);
    if (!p)
        return osp_error_out_of_memory();
    *p = st;
    *state = p;
    return NULL;
}

typedef struct loss_geometry {
    int64_t n, c, d, nd;
    osp_datatype idt; /* the target's dtype */
    bool weighted;
} loss_geometry;

/* The scores' and target's dtypes and shapes. */
static osp_error *loss_shapes(const onnx_node *node, size_t n_inputs,
                              const onnx_desc *inputs, loss_geometry *g) {
    osp_error *err = onnx_required_input(node, n_inputs, inputs, 0);
    if (!err)
        err = onnx_required_input(node, n_inputs, inputs, 1);
    if (err)
        return err;
    const onnx_desc *x = &inputs[0], *t = &inputs[1];
    if (x->dtype != OSP_TYPE_FP32)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "input 0: dtype %s is not supported (FP32)",
                                 osp_datatype_wire_name(x->dtype));
    if (t->dtype != OSP_TYPE_INT64 && t->dtype != OSP_TYPE_INT32)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "input 1 is %s, expected INT64 or INT32",
                                 osp_datatype_wire_name(t->dtype));
    const osp_shape *xs = &x->shape, *ts = &t->shape;
    if (xs->rank < 2)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "input 0 has rank %d, expected at least 2",
                                 xs->rank);
    bool match = ts->rank == xs->rank - 1 && ts->dims[0] == xs->dims[0];
    for (int i = 1; match && i < ts->rank; i++)
        match = ts->dims[i] == xs->dims[i + 1];
    if (!match) {
        char a[160], b[160];
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                 "target shape %s does not match scores %s "
                                 "([N, d...] for [N, C, d...])",
                                 osp_shape_format(ts, b, sizeof b),
                                 osp_shape_format(xs, a, sizeof a));
    }
    g->n = xs->dims[0];
    g->c = xs->dims[1];
    g->d = onnx_shape_span(xs, 2, xs->rank);
    g->nd = g->n * g->d;
    g->idt = t->dtype;
    if (g->idt == OSP_TYPE_INT32 && onnx_shape_count(xs) > INT32_MAX)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                 "INT32 targets into more than 2^31 scores");
    return NULL;
}

/* Targets known while planning must name a class or be the ignore_index
 * (the device gathers would read another sample's score, or fail, for one
 * out of range). */
static osp_error *check_known_targets(const onnx_node *node,
                                      const loss_state *st, const onnx_desc *t,
                                      int64_t classes) {
    if (!t->host)
        return NULL;
    int64_t n = onnx_shape_count(&t->shape);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = t->dtype == OSP_TYPE_INT64 ? ((const int64_t *)t->host)[i]
                                               : ((const int32_t *)t->host)[i];
        if ((v < 0 || v >= classes) &&
            !(st->has_ignore && v == st->ignore_index))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "target %lld is not a class in [0, "
                                     "%lld) nor the ignore_index",
                                     (long long)v, (long long)classes);
    }
    return NULL;
}

/* The optional weight: FP32 [C]. */
static osp_error *loss_weight(const onnx_node *node, size_t n_inputs,
                              const onnx_desc *inputs, loss_geometry *g) {
    g->weighted = onnx_present(n_inputs, inputs, 2);
    if (g->weighted) {
        const onnx_desc *w = &inputs[2];
        if (w->dtype != OSP_TYPE_FP32 || w->shape.rank != 1 ||
            w->shape.dims[0] != g->c)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                     "weight must be FP32 [C] with C = %lld",
                                     (long long)g->c);
    }
    return NULL;
}

static osp_error *loss_geometry_of(const onnx_node *node, const loss_state *st,
                                   size_t n_inputs, const onnx_desc *inputs,
                                   loss_geometry *g) {
    osp_error *err = loss_shapes(node, n_inputs, inputs, g);
    if (!err)
        err = loss_weight(node, n_inputs, inputs, g);
    if (!err)
        err = check_known_targets(node, st, &inputs[1], g->c);
    return err;
}

typedef struct loss_layout {
    float *log_prob;   /* SCE without its second output */
    uint8_t *iscalars; /* ignore_index, 0, D in the index dtype */
    float *fscalars;   /* 0, 1, N * D */
    bool *ignored;
    void *safe, *base, *scaled, *flat;
    onnx_extra__offsets_ws offsets;
    float *picked, *w, *w2, *loss, *sums;
} loss_layout;

static void loss_carve(onnx_extra__ws *ws, const loss_state *st,
                       const loss_geometry *g, bool log_prob_output,
                       loss_layout *l) {
    size_t is = osp_datatype_byte_size(g->idt), nd = (size_t)g->nd;
    memset(l, 0, sizeof *l);
    if (st->softmax && !log_prob_output)
        l->log_prob = onnx_extra__take(ws, (size_t)(g->nd * g->c) * 4);
    l->iscalars = onnx_extra__take(ws, 3 * 8);
    l->fscalars = onnx_extra__take(ws, 3 * 4);
    if (st->has_ignore) {
        l->ignored = onnx_extra__take(ws, nd);
        l->safe = onnx_extra__take(ws, nd * is);
    }
    l->base = onnx_extra__take(ws, nd * is);
    l->scaled = onnx_extra__take(ws, nd * is);
    l->flat = onnx_extra__take(ws, nd * is);
    int64_t grid[2] = {g->n, g->d};
    onnx_extra__offsets_layout(ws, 2, grid, &l->offsets);
    l->picked = onnx_extra__take(ws, nd * 4);
    l->w = onnx_extra__take(ws, nd * 4);
    l->w2 = onnx_extra__take(ws, nd * 4);
    l->loss = onnx_extra__take(ws, nd * 4);
    l->sums = onnx_extra__take(ws, 4 * 4);
}

osp_error *onnx_extra__loss_infer(onnx_infer_ctx *ctx) {
    const loss_state *st = ctx->state;
    loss_geometry g;
    osp_error *err =
        loss_geometry_of(ctx->node, st, ctx->n_inputs, ctx->inputs, &g);
    if (err)
        return err;
    ctx->outputs[0].dtype = OSP_TYPE_FP32;
    if (st->reduction == LOSS_NONE)
        ctx->outputs[0].shape = ctx->inputs[1].shape;
    else
        ctx->outputs[0].shape = (osp_shape){.rank = 0};
    bool log_prob =
        st->softmax && onnx_present(ctx->n_outputs, ctx->outputs, 1);
    if (log_prob) {
        ctx->outputs[1].dtype = OSP_TYPE_FP32;
        ctx->outputs[1].shape = ctx->inputs[0].shape;
    }
    onnx_extra__ws ws = {0};
    loss_layout l;
    loss_carve(&ws, st, &g, log_prob, &l);
    ctx->workspace_bytes = ws.used;
    return NULL;
}

/* One FP32 sum of n elements into out[0]. */
static osp_error *sum_all(osp_stream *stream, const float *x, int64_t n,
                          float *out) {
    osp_reduce_args r = {.op = OSP_REDUCE_SUM,
                         .dtype = OSP_TYPE_FP32,
                         .x = x,
                         .outer = 1,
                         .n = n,
                         .inner = 1,
                         .out = out};
    return osp_op_reduce(stream, &r);
}

osp_error *onnx_extra__loss_run(onnx_run_ctx *ctx) {
    const loss_state *st = ctx->state;
    loss_geometry g;
    osp_error *err =
        loss_geometry_of(ctx->node, st, ctx->n_inputs, ctx->in_desc, &g);
    if (err)
        return err;
    bool log_prob =
        st->softmax && onnx_present(ctx->n_outputs, ctx->out_desc, 1);
    onnx_extra__ws ws = {.base = ctx->workspace};
    loss_layout l;
    loss_carve(&ws, st, &g, log_prob, &l);
    osp_stream *s = ctx->stream;
    const osp_datatype f = OSP_TYPE_FP32, idt = g.idt;
    size_t is = osp_datatype_byte_size(idt);
    const float *scores = ctx->in[0];
    if (st->softmax) {
        float *lp = log_prob ? ctx->out[1] : l.log_prob;
        if (g.nd * g.c > 0) {
            osp_softmax_args sm = {.x = scores,
                                   .out = lp,
                                   .outer = g.n,
                                   .n = g.c,
                                   .inner = g.d,
                                   .log = true};
            if ((err = osp_op_softmax(s, &sm)))
                return err;
        }
        scores = lp;
    }
    float *zero_f = l.fscalars, *one_f = l.fscalars + 1,
          *count_f = l.fscalars + 2;
    void *ii = l.iscalars, *zero_i = l.iscalars + 8, *d_i = l.iscalars + 16;
    if ((err = onnx_extra__fill(s, zero_f, f, 0.0, 1)) ||
        (err = onnx_extra__fill(s, one_f, f, 1.0, 1)) ||
        (err = onnx_extra__fill(s, count_f, f, (double)g.nd, 1)))
        return err;
    if (g.nd > 0) {
        const void *target = ctx->in[1];
        if (st->has_ignore) {
            if ((err = onnx_extra__fill(s, ii, idt, (double)st->ignore_index,
                                        1)) ||
                (err = onnx_extra__fill(s, zero_i, idt, 0.0, 1)) ||
                (err = onnx_binary_flat(s, OSP_BINARY_ND_EQUAL, idt, target,
                                          false, ii, true, l.ignored, g.nd)))
                return err;
            osp_where_args w = {.elem_size = is,
                                .rank = 1,
                                .dims = {g.nd},
                                .cond = l.ignored,
                                .cond_strides = {1},
                                .x = zero_i,
                                .x_strides = {0},
                                .y = target,
                                .y_strides = {1},
                                .out = l.safe};
            if ((err = osp_op_where(s, &w)))
                return err;
            target = l.safe;
        }
        int64_t grid[2] = {g.n, g.d}, strides[2] = {g.c * g.d, 1};
        if ((err = onnx_extra__offsets(s, &l.offsets, idt, 2, grid, strides,
                                       l.base)) ||
            (err = onnx_extra__fill(s, d_i, idt, (double)g.d, 1)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_MUL, idt, target, false,
                                      d_i, true, l.scaled, g.nd)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, idt, l.scaled,
                                      false, l.base, false, l.flat, g.nd)))
            return err;
        osp_gather_args pick = {.elem_size = 4,
                                .data = scores,
                                .outer = 1,
                                .axis_len = g.nd * g.c,
                                .inner = 1,
                                .index_dtype = idt,
                                .indices = l.flat,
                                .n_indices = g.nd,
                                .out = l.picked};
        if ((err = osp_op_gather(s, &pick)))
            return err;
        const float *w = NULL;
        if (g.weighted) {
            osp_gather_args gw = {.elem_size = 4,
                                  .data = ctx->in[2],
                                  .outer = 1,
                                  .axis_len = g.c,
                                  .inner = 1,
                                  .index_dtype = idt,
                                  .indices = target,
                                  .n_indices = g.nd,
                                  .out = l.w};
            if ((err = osp_op_gather(s, &gw)))
                return err;
            w = l.w;
        }
        if (st->has_ignore) {
            osp_where_args sel = {.elem_size = 4,
                                  .rank = 1,
                                  .dims = {g.nd},
                                  .cond = l.ignored,
                                  .cond_strides = {1},
                                  .x = zero_f,
                                  .x_strides = {0},
                                  .y = w ? (const void *)w : one_f,
                                  .y_strides = {w ? 1 : 0},
                                  .out = l.w2};
            if ((err = osp_op_where(s, &sel)))
                return err;
            w = l.w2;
        }
        const float *loss = l.picked;
        if (w) {
            if ((err = onnx_binary_flat(s, OSP_BINARY_ND_MUL, f, l.picked,
                                          false, w, false, l.loss, g.nd)))
                return err;
            loss = l.loss;
        }
        if (st->reduction == LOSS_NONE)
            return onnx_binary_flat(s, OSP_BINARY_ND_SUB, f, zero_f, true,
                                      loss, false, ctx->out[0], g.nd);
        if ((err = sum_all(s, loss, g.nd, l.sums)))
            return err;
        if (st->reduction == LOSS_MEAN) {
            if (w && (err = sum_all(s, w, g.nd, l.sums + 1)))
                return err;
            if ((err = onnx_binary_flat(s, OSP_BINARY_ND_DIV, f, l.sums, true,
                                          w ? l.sums + 1 : count_f, true,
                                          l.sums + 2, 1)))
                return err;
            return onnx_binary_flat(s, OSP_BINARY_ND_SUB, f, zero_f, true,
                                      l.sums + 2, true, ctx->out[0], 1);
        }
        return onnx_binary_flat(s, OSP_BINARY_ND_SUB, f, zero_f, true, l.sums,
                                  true, ctx->out[0], 1);
    }
    /* no targets: a sum of nothing is 0, its mean 0 / 0 */
    if (st->reduction == LOSS_NONE)
        return NULL;
    if (st->reduction == LOSS_SUM)
        return onnx_extra__fill(s, ctx->out[0], f, 0.0, 1);
    return onnx_extra__fill(s, ctx->out[0], f, NAN, 1);
}
