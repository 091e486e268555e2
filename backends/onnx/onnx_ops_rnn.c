/*
 * Recurrent ops: RNN, GRU and LSTM, opset 7 on (`layout` from 14), every
 * direction, sequence_lens (values known when the model is planned),
 * initial states, LSTM peepholes, input_forget and clip, and the
 * activations that are one osp_unary_op, plus ScaledTanh and Affine
 * composed with binary_nd.
 *
 * A run, per direction, only through device ops:
 *  1. one gemm_ex computes X W^T + (Wb + Rb) for every time step at once,
 *     the batch folded into M, into `tmpxw` (X's rows, G*H columns);
 *  2. a copy regroups it as `xw` [step, slot, batch, H], so that each gate
 *     of a step is one contiguous [batch, H] block (skipped where tmpxw
 *     already is that: one gate, or a batch of one);
 *  3. per step, one gemm_ex batched over the gates accumulates
 *     H_{t-1} R^T onto the step's gate blocks (beta 1), then unary ops
 *     (in place) and binary ops on whole blocks make the new H (and C),
 *     written to `hs` (Y itself for layout 0 with full-length sequences),
 *     about eight calls a step;
 *  4. copies into Y, Y_h and Y_c.
 *
 * Sequences of different lengths (sequence_lens): the batch entries get
 * positions sorted by decreasing length (stable), so that at step k the
 * entries still running are the first n(k) rows of every block and a
 * step computes only those. A reverse direction runs each entry from its
 * own last time step; the regrouping copy (one per entry) and the copies
 * out put time back in order. Y is zero past each entry's length; Y_h and
 * Y_c are the state after its last step (the initial state, or zeros,
 * for a length of 0).
 *
 * Activations follow onnxruntime where ONNX leaves it open: names are
 * matched without case; activation_alpha and activation_beta are consumed
 * in order by the activations that take them, defaults otherwise; clip
 * bounds the input of every gate activation (not h(C) in LSTM);
 * input_forget sets f = 1 - i.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "onnx_ops.h"

#define END OSP_OP_KIND_COUNT_

typedef enum rnn_cell {
    RNN_CELL_SIMPLE = 0,
    RNN_CELL_GRU,
    RNN_CELL_LSTM,
} rnn_cell;

/* How an activation runs: one unary op, or a composition of a few. */
typedef enum rnn_act_kind {
    RNN_ACT_UNARY = 0,
    RNN_ACT_SCALED_TANH, /* alpha * tanh(beta * x) */
    RNN_ACT_AFFINE,      /* alpha * x + beta */
} rnn_act_kind;

typedef struct rnn_act {
    rnn_act_kind kind;
    osp_unary_op op;
    float alpha, beta;
} rnn_act;

#define RNN_MAX_ACTS 3
/* Device constants at the start of the workspace (floats): 1, 0, then
 * alpha and beta of each composed activation. */
#define RNN_N_CONSTS 16
#define RNN_CONST_ONE 0
#define RNN_CONST_ZERO 1
#define RNN_CONST_ACT(d, j) (2 + ((d)*RNN_MAX_ACTS + (j)) * 2)

typedef struct rnn_state {
    rnn_cell cell;
    int n_dirs;
    bool reverse;   /* direction "reverse" (bidirectional: d == 1 is) */
    int64_t hidden; /* the attribute; 0 when absent */
    int layout;     /* 0 before opset 14 */
    bool has_clip;
    float clip;
    bool linear_before_reset; /* GRU */
    bool input_forget;        /* LSTM */
    int n_acts;               /* per direction: 1, 2 or 3 */
    rnn_act acts[2][RNN_MAX_ACTS];
    bool composite; /* some activation is composed: scratch and constants */
} rnn_state;

/* ---- attributes ----------------------------------------------------------
 */

typedef struct rnn_act_def {
    const char *name;
    rnn_act_kind kind;
    osp_unary_op op;
    bool uses_alpha, uses_beta;
    float alpha, beta; /* defaults, as the ONNX operator of the name */
} rnn_act_def;

static const rnn_act_def rnn_act_defs[] = {
    {"Relu", RNN_ACT_UNARY, OSP_UNARY_RELU, false, false, 0.0f, 0.0f},
    {"Tanh", RNN_ACT_UNARY, OSP_UNARY_TANH, false, false, 0.0f, 0.0f},
    {"Sigmoid", RNN_ACT_UNARY, OSP_UNARY_SIGMOID, false, false, 0.0f, 0.0f},
    {"LeakyRelu", RNN_ACT_UNARY, OSP_UNARY_LEAKY_RELU, true, false, 0.01f,
     0.0f},
    {"ThresholdedRelu", RNN_ACT_UNARY, OSP_UNARY_THRESHOLDED_RELU, true, false,
     1.0f, 0.0f},
    {"HardSigmoid", RNN_ACT_UNARY, OSP_UNARY_HARD_SIGMOID, true, true, 0.2f,
     0.5f},
    {"Elu", RNN_ACT_UNARY, OSP_UNARY_ELU, true, false, 1.0f, 0.0f},
    {"Softsign", RNN_ACT_UNARY, OSP_UNARY_SOFTSIGN, false, false, 0.0f, 0.0f},
    {"Softplus", RNN_ACT_UNARY, OSP_UNARY_SOFTPLUS, false, false, 0.0f, 0.0f},
    {"ScaledTanh", RNN_ACT_SCALED_TANH, OSP_UNARY_TANH, true, true, 1.0f, 1.0f},
    {"Affine", RNN_ACT_AFFINE, OSP_UNARY_IDENTITY, true, true, 1.0f, 0.0f},
};

/* Reads activations, activation_alpha and activation_beta into st->acts:
 * none given is the cell's defaults; n_acts names serve both directions
 * of a bidirectional node, else there must be n_acts per direction. */
static osp_error *rnn_read_acts(const onnx_node *node, rnn_state *st) {
    static const char *const defaults[3][RNN_MAX_ACTS] = {
        {"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    const float *alphas, *betas;
    size_t n_alpha, n_beta, n_names = 0;
    osp_error *err;
    if ((err = onnx_attr_floats(node, "activation_alpha", &alphas, &n_alpha)) !=
            NULL ||
        (err = onnx_attr_floats(node, "activation_beta", &betas, &n_beta)) !=
            NULL)
        return err;
    const onnx_attr *names = onnx_node_attr(node, "activations");
    if (names) {
        if (names->type != ONNX_ATTR_STRINGS)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'activations' must be STRINGS");
        n_names = names->n;
    }
    size_t per_dir = (size_t)st->n_acts;
    if (n_names != 0 && n_names != per_dir * (size_t)st->n_dirs &&
        n_names != per_dir)
        return onnx_node_error(
            node, OSP_ERROR_INVALID_ARG,
            "attribute 'activations' has %zu names, expected "
            "%zu",
            n_names, per_dir * (size_t)st->n_dirs);
    size_t ia = 0, ib = 0;
    for (int d = 0; d < st->n_dirs; d++) {
        for (int j = 0; j < st->n_acts; j++) {
            size_t idx = (size_t)d * per_dir + (size_t)j;
            if (n_names != 0 && idx >= n_names) {
                st->acts[d][j] = st->acts[0][j]; /* one list for both */
                continue;
            }
            const char *name =
                n_names == 0 ? defaults[st->cell][j] : names->strings[idx];
            const rnn_act_def *def = NULL;
            for (size_t k = 0; k < sizeof rnn_act_defs / sizeof *rnn_act_defs;
                 k++)
                if (name && strcasecmp(rnn_act_defs[k].name, name) == 0)
                    def = &rnn_act_defs[k];
            if (!def)
                return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                       "activation '%s' is not supported",
                                       name ? name : "");
            rnn_act *a = &st->acts[d][j];
            a->kind = def->kind;
            a->op = def->op;
            a->alpha = def->alpha;
            a->beta = def->beta;
            if (def->uses_alpha && ia < n_alpha)
                a->alpha = alphas[ia++];
            if (def->uses_beta && ib < n_beta)
                a->beta = betas[ib++];
            if (a->kind != RNN_ACT_UNARY)
                st->composite = true;
        }
    }
    return NULL;
}

static osp_error *rnn_prepare_cell(const onnx_node *node, rnn_cell cell,
                                   void **state) {
    osp_error *err = NULL;
    rnn_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    st->cell = cell;
    st->n_acts = cell == RNN_CELL_SIMPLE ? 1 : cell == RNN_CELL_GRU ? 2 : 3;
    const char *dir;
    int64_t layout = 0, lbr = 0, input_forget = 0;
    if ((err = onnx_attr_string(node, "direction", "forward", &dir)) != NULL ||
        (err = onnx_attr_int(node, "hidden_size", 0, &st->hidden)) != NULL)
        goto out;
    if (strcmp(dir, "forward") == 0) {
        st->n_dirs = 1;
    } else if (strcmp(dir, "reverse") == 0) {
        st->n_dirs = 1;
        st->reverse = true;
    } else if (strcmp(dir, "bidirectional") == 0) {
        st->n_dirs = 2;
    } else {
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'direction' = '%s' is not forward, "
                              "reverse or bidirectional",
                              dir);
        goto out;
    }
    if (st->hidden < 0 ||
        (onnx_node_attr(node, "hidden_size") && st->hidden == 0)) {
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'hidden_size' = %lld is not positive",
                              (long long)st->hidden);
        goto out;
    }
    if (node->opset >= 14 &&
        (err = onnx_attr_int(node, "layout", 0, &layout)) != NULL)
        goto out;
    if (layout != 0 && layout != 1) {
        err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                              "attribute 'layout' = %lld is not 0 or 1",
                              (long long)layout);
        goto out;
    }
    st->layout = (int)layout;
    if (onnx_node_attr(node, "clip")) {
        if ((err = onnx_attr_float(node, "clip", 0.0f, &st->clip)) != NULL)
            goto out;
        if (!(st->clip >= 0.0f)) {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'clip' = %g is negative",
                                  (double)st->clip);
            goto out;
        }
        st->has_clip = true;
    }
    if (cell == RNN_CELL_GRU &&
        (err = onnx_attr_int(node, "linear_before_reset", 0, &lbr)) != NULL)
        goto out;
    if (cell == RNN_CELL_LSTM &&
        (err = onnx_attr_int(node, "input_forget", 0, &input_forget)) != NULL)
        goto out;
    st->linear_before_reset = lbr != 0;
    st->input_forget = input_forget != 0;
    if ((err = rnn_read_acts(node, st)) != NULL)
        goto out;
    *state = st;
    return NULL;
out:
    free(st);
    return err;
}

static osp_error *rnn_prepare(const onnx_node *node, void **state) {
    return rnn_prepare_cell(node, RNN_CELL_SIMPLE, state);
}

static osp_error *gru_prepare(const onnx_node *node, void **state) {
    return rnn_prepare_cell(node, RNN_CELL_GRU, state);
}

static osp_error *lstm_prepare(const onnx_node *node, void **state) {
    return rnn_prepare_cell(node, RNN_CELL_LSTM, state);
}

/* ---- geometry ------------------------------------------------------------
 */

enum {
    RNN_IN_X = 0,
    RNN_IN_W,
    RNN_IN_R,
    RNN_IN_B,
    RNN_IN_LENS,
    RNN_IN_H0,
    RNN_IN_C0,
    RNN_IN_P,
};

/* Everything a run needs to know, from the state and the descs: infer
 * and run compute it alike. Offsets and sizes count floats. */
typedef struct rnn_geom {
    int64_t seq, batch, input, hidden;
    int64_t gates; /* G: 1, 3 or 4 gate blocks in W and R */
    int64_t slots; /* gate blocks per step in xw (GRU with
                      linear_before_reset: 4, z r hr hx) */
    int nd;
    int layout;
    const onnx_desc *b, *lens, *h0, *c0, *p; /* NULL when absent */
    bool has_y, has_yh, has_yc;
    bool uniform;   /* every sequence runs all seq steps */
    int64_t steps;  /* the longest sequence */
    bool direct_xw; /* tmpxw is already xw's layout */
    bool direct_y;  /* hs is Y */
    bool pingpong;  /* no Y: hs holds two steps */
    size_t off_const, off_bias, off_tmpxw, off_xw, off_hs, off_hinit, off_c,
        off_tmp, off_act;
    size_t total;
} rnn_geom;

static const onnx_desc *rnn_input(size_t n, const onnx_desc *in, size_t i) {
    return onnx_present(n, in, i) ? &in[i] : NULL;
}

/* INVALID_ARG unless `d` has the given shape. */
static osp_error *rnn_want_shape(const onnx_node *node, const char *name,
                                 const onnx_desc *d, int rank,
                                 const int64_t *dims) {
    osp_shape want = {.rank = rank};
    for (int i = 0; i < rank; i++)
        want.dims[i] = dims[i];
    if (osp_shape_equal(&d->shape, &want))
        return NULL;
    char got[256], exp[256];
    return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                           "input %s is %s, expected %s", name,
                           osp_shape_format(&d->shape, got, sizeof got),
                           osp_shape_format(&want, exp, sizeof exp));
}

static osp_error *rnn_want_fp32(const onnx_node *node, const char *name,
                                const onnx_desc *d) {
    if (d->dtype == OSP_TYPE_FP32)
        return NULL;
    return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                           "input %s: dtype %s is not supported (FP32 only)",
                           name, osp_datatype_wire_name(d->dtype));
}

/* The length of batch entry b's sequence. */
static int64_t rnn_len(const rnn_geom *g, int64_t b) {
    if (!g->lens)
        return g->seq;
    if (g->lens->dtype == OSP_TYPE_INT32)
        return ((const int32_t *)g->lens->host)[b];
    return ((const int64_t *)g->lens->host)[b];
}

/* Entry b's position in the blocks: after every longer entry and every
 * earlier one of its length. */
static int64_t rnn_pos(const rnn_geom *g, int64_t b) {
    if (!g->lens)
        return b;
    int64_t len = rnn_len(g, b), pos = 0;
    for (int64_t i = 0; i < g->batch; i++) {
        int64_t l = rnn_len(g, i);
        if (l > len || (l == len && i < b))
            pos++;
    }
    return pos;
}

/* Entries still running at step k: the first rnn_active() positions. */
static int64_t rnn_active(const rnn_geom *g, int64_t k) {
    if (!g->lens)
        return g->batch;
    int64_t n = 0;
    for (int64_t b = 0; b < g->batch; b++)
        n += rnn_len(g, b) > k;
    return n;
}

/* Batch entries moved together: all of them (full-length sequences), or
 * one at a time. Entry b0 + i sits at position p0 + i. */
typedef struct rnn_group {
    int64_t b0, p0, nb, len;
} rnn_group;

static int64_t rnn_n_groups(const rnn_geom *g) {
    return g->lens ? g->batch : 1;
}

static rnn_group rnn_group_at(const rnn_geom *g, int64_t i) {
    if (!g->lens)
        return (rnn_group){0, 0, g->batch, g->seq};
    return (rnn_group){i, rnn_pos(g, i), 1, rnn_len(g, i)};
}

/* Reserves `count` floats (a product of up to three dims) at *cursor,
 * 64-byte aligned; INVALID_ARG when the sizes overflow. */
static osp_error *rnn_take(const onnx_node *node, size_t *cursor, int64_t a,
                           int64_t b, int64_t c, size_t *off) {
    int64_t n;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
        n > ((int64_t)1 << 40))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "the recurrence needs too much scratch memory");
    *off = *cursor;
    *cursor += ((size_t)n + 15) & ~(size_t)15;
    return NULL;
}

/* Checks the inputs against each other and fills *g. node names inputs
 * whose values are needed (sequence_lens). */
static osp_error *rnn_geometry(const onnx_node *node, const rnn_state *st,
                               size_t n_in, const onnx_desc *in, size_t n_out,
                               const onnx_desc *out, rnn_geom *g) {
    osp_error *err;
    memset(g, 0, sizeof *g);
    bool lstm = st->cell == RNN_CELL_LSTM;
    const onnx_desc *x = rnn_input(n_in, in, RNN_IN_X);
    const onnx_desc *w = rnn_input(n_in, in, RNN_IN_W);
    const onnx_desc *r = rnn_input(n_in, in, RNN_IN_R);
    if (!x || !w || !r)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "inputs X, W and R are required");
    g->b = rnn_input(n_in, in, RNN_IN_B);
    g->lens = rnn_input(n_in, in, RNN_IN_LENS);
    g->h0 = rnn_input(n_in, in, RNN_IN_H0);
    g->c0 = lstm ? rnn_input(n_in, in, RNN_IN_C0) : NULL;
    g->p = lstm ? rnn_input(n_in, in, RNN_IN_P) : NULL;
    if ((err = rnn_want_fp32(node, "X", x)) != NULL ||
        (err = rnn_want_fp32(node, "W", w)) != NULL ||
        (err = rnn_want_fp32(node, "R", r)) != NULL ||
        (g->b && (err = rnn_want_fp32(node, "B", g->b)) != NULL) ||
        (g->h0 && (err = rnn_want_fp32(node, "initial_h", g->h0)) != NULL) ||
        (g->c0 && (err = rnn_want_fp32(node, "initial_c", g->c0)) != NULL) ||
        (g->p && (err = rnn_want_fp32(node, "P", g->p)) != NULL))
        return err;
    char s[256];
    if (x->shape.rank != 3)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input X is %s, expected 3-D",
                               osp_shape_format(&x->shape, s, sizeof s));
    if (r->shape.rank != 3)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input R is %s, expected 3-D",
                               osp_shape_format(&r->shape, s, sizeof s));
    g->layout = st->layout;
    g->seq = x->shape.dims[g->layout == 0 ? 0 : 1];
    g->batch = x->shape.dims[g->layout == 0 ? 1 : 0];
    g->input = x->shape.dims[2];
    g->hidden = st->hidden > 0 ? st->hidden : r->shape.dims[2];
    g->nd = st->n_dirs;
    g->gates = st->cell == RNN_CELL_SIMPLE ? 1
               : st->cell == RNN_CELL_GRU  ? 3
                                           : 4;
    g->slots =
        st->cell == RNN_CELL_GRU && st->linear_before_reset ? 4 : g->gates;
    const int64_t nd = g->nd, batch = g->batch, H = g->hidden,
                  GH = g->gates * H;
    bool l0 = g->layout == 0;
    if ((err = rnn_want_shape(node, "W", w, 3,
                              (int64_t[]){nd, GH, g->input})) != NULL ||
        (err = rnn_want_shape(node, "R", r, 3, (int64_t[]){nd, GH, H})) !=
            NULL ||
        (g->b && (err = rnn_want_shape(node, "B", g->b, 2,
                                       (int64_t[]){nd, 2 * GH})) != NULL) ||
        (g->h0 &&
         (err = rnn_want_shape(node, "initial_h", g->h0, 3,
                               l0 ? (int64_t[]){nd, batch, H}
                                  : (int64_t[]){batch, nd, H})) != NULL) ||
        (g->c0 &&
         (err = rnn_want_shape(node, "initial_c", g->c0, 3,
                               l0 ? (int64_t[]){nd, batch, H}
                                  : (int64_t[]){batch, nd, H})) != NULL) ||
        (g->p && (err = rnn_want_shape(node, "P", g->p, 2,
                                       (int64_t[]){nd, 3 * H})) != NULL))
        return err;

    g->uniform = true;
    g->steps = g->seq;
    if (g->lens) {
        if (g->lens->dtype != OSP_TYPE_INT32 &&
            g->lens->dtype != OSP_TYPE_INT64)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "input sequence_lens is %s, expected INT32",
                                   osp_datatype_wire_name(g->lens->dtype));
        if ((err = rnn_want_shape(node, "sequence_lens", g->lens, 1,
                                  (int64_t[]){batch})) != NULL)
            return err;
        if (!g->lens->host)
            return onnx_error_needs_values(node, RNN_IN_LENS);
        int64_t longest = 0;
        for (int64_t b = 0; b < batch; b++) {
            int64_t len = rnn_len(g, b);
            if (len < 0 || len > g->seq)
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "sequence_lens[%lld] = %lld is outside "
                                       "[0, %lld]",
                                       (long long)b, (long long)len,
                                       (long long)g->seq);
            if (len != g->seq)
                g->uniform = false;
            if (len > longest)
                longest = len;
        }
        if (g->uniform)
            g->lens = NULL; /* the fast path: nothing differs by entry */
        else
            g->steps = longest;
    }

    g->has_y = onnx_present(n_out, out, 0);
    g->has_yh = onnx_present(n_out, out, 1);
    g->has_yc = lstm && onnx_present(n_out, out, 2);
    if (!lstm && onnx_present(n_out, out, 2))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "the op has 2 outputs, not %zu", n_out);
    g->direct_xw = g->uniform && g->slots == g->gates &&
                   (g->gates == 1 || batch == 1) && (l0 || batch == 1);
    g->direct_y = g->uniform && l0 && g->has_y;
    g->pingpong = !g->has_y;

    size_t cur = 0;
    const int64_t bh = batch * H;
    if ((err = rnn_take(node, &cur, RNN_N_CONSTS, 1, 1, &g->off_const)) !=
            NULL ||
        (g->b &&
         (err = rnn_take(node, &cur, nd, GH, 1, &g->off_bias)) != NULL) ||
        (err = rnn_take(node, &cur, g->seq, batch, GH, &g->off_tmpxw)) !=
            NULL ||
        (!g->direct_xw && (err = rnn_take(node, &cur, g->steps, g->slots, bh,
                                          &g->off_xw)) != NULL) ||
        (!g->direct_y && (err = rnn_take(node, &cur, g->pingpong ? 2 : g->steps,
                                         bh, 1, &g->off_hs)) != NULL) ||
        (err = rnn_take(node, &cur, bh, 1, 1, &g->off_hinit)) != NULL ||
        (lstm && (err = rnn_take(node, &cur, 2, bh, 1, &g->off_c)) != NULL) ||
        (err = rnn_take(node, &cur, 2, bh, 1, &g->off_tmp)) != NULL ||
        (st->composite &&
         (err = rnn_take(node, &cur, g->slots, bh, 1, &g->off_act)) != NULL))
        return err;
    g->total = cur;
    return NULL;
}

static void rnn_state_shape(const rnn_geom *g, osp_shape *s) {
    s->rank = 3;
    s->dims[0] = g->layout == 0 ? g->nd : g->batch;
    s->dims[1] = g->layout == 0 ? g->batch : g->nd;
    s->dims[2] = g->hidden;
}

static osp_error *rnn_infer(onnx_infer_ctx *ctx) {
    const rnn_state *st = ctx->state;
    rnn_geom g;
    osp_error *err = rnn_geometry(ctx->node, st, ctx->n_inputs, ctx->inputs,
                                  ctx->n_outputs, ctx->outputs, &g);
    if (err)
        return err;
    onnx_desc *out = ctx->outputs;
    if (g.has_y) {
        out[0].dtype = OSP_TYPE_FP32;
        osp_shape *s = &out[0].shape;
        s->rank = 4;
        if (g.layout == 0) {
            s->dims[0] = g.seq;
            s->dims[1] = g.nd;
            s->dims[2] = g.batch;
        } else {
            s->dims[0] = g.batch;
            s->dims[1] = g.seq;
            s->dims[2] = g.nd;
        }
        s->dims[3] = g.hidden;
        if ((err = onnx_check_shape(ctx->node, s, OSP_TYPE_FP32)) != NULL)
            return err;
    }
    for (size_t i = 1; i <= 2; i++) {
        if (!(i == 1 ? g.has_yh : g.has_yc))
            continue;
        out[i].dtype = OSP_TYPE_FP32;
        rnn_state_shape(&g, &out[i].shape);
        if ((err = onnx_check_shape(ctx->node, &out[i].shape, OSP_TYPE_FP32)) !=
            NULL)
            return err;
    }
    ctx->workspace_bytes = g.total * sizeof(float);
    return NULL;
}

/* ---- device-op helpers ---------------------------------------------------
 */

static osp_error *rnn_copy(osp_stream *stream, int rank, const int64_t *dims,
                           const float *src, const int64_t *src_strides,
                           float *dst, const int64_t *dst_strides) {
    osp_copy_strided_args c = {
        .elem_size = sizeof(float), .rank = rank, .src = src, .dst = dst};
    for (int i = 0; i < rank; i++) {
        c.dims[i] = dims[i];
        c.src_strides[i] = src_strides[i];
        c.dst_strides[i] = dst_strides[i];
    }
    return osp_op_copy_strided(stream, &c);
}

static osp_error *rnn_binary_nd(osp_stream *stream, osp_binary_nd_op op,
                                int rank, const int64_t *dims, const float *a,
                                const int64_t *a_strides, const float *b,
                                const int64_t *b_strides, float *out) {
    osp_binary_nd_args x = {.op = op,
                            .dtype = OSP_TYPE_FP32,
                            .rank = rank,
                            .a = a,
                            .b = b,
                            .out = out};
    for (int i = 0; i < rank; i++) {
        x.dims[i] = dims[i];
        x.a_strides[i] = a_strides[i];
        x.b_strides[i] = b_strides[i];
    }
    return osp_op_binary_nd(stream, &x);
}

/* One direction of a run: what its steps share. */
typedef struct rnn_dir {
    osp_stream *stream;
    const onnx_node *node; /* names it in errors */
    const rnn_state *st;
    const rnn_geom *g;
    int d;
    const rnn_act *acts; /* st->acts[d] */
    const float *r;      /* R of the direction [G*H, H] */
    const float *p;      /* P of the direction [3H], or NULL */
    const float *consts; /* RNN_N_CONSTS device floats */
    float *tmp;          /* [2, batch, H] */
    float *act_tmp;      /* [slots, batch, H], composed activations */
    int64_t h, bh;       /* hidden, batch * hidden (a gate block) */
} rnn_dir;

/* out[i] = a[i] op b[i] over n contiguous elements; out may alias. */
static osp_error *rnn_bin(const rnn_dir *dr, osp_binary_op op, const float *a,
                          const float *b, float *out, int64_t n) {
    return osp_op_binary(dr->stream, op, OSP_TYPE_FP32, a, b, out, (size_t)n);
}

/* y = x op k over n elements, k one device float. y must not alias x. */
static osp_error *rnn_scalar(const rnn_dir *dr, osp_binary_nd_op op,
                             const float *x, const float *k, float *y,
                             int64_t n) {
    return onnx_binary_flat(dr->stream, op, OSP_TYPE_FP32, x, false, k, true, y,
                            n);
}

/* y = act_j(x) over n contiguous elements; y may alias x. */
static osp_error *rnn_act_apply(const rnn_dir *dr, int j, const float *x,
                                float *y, int64_t n) {
    const rnn_act *a = &dr->acts[j];
    const float *ka = dr->consts + RNN_CONST_ACT(dr->d, j), *kb = ka + 1;
    osp_error *err;
    osp_unary_args u = {.op = a->op,
                        .dtype = OSP_TYPE_FP32,
                        .x = x,
                        .y = y,
                        .n = (size_t)n,
                        .alpha = a->alpha,
                        .beta = a->beta};
    switch (a->kind) {
    case RNN_ACT_UNARY:
        return osp_op_unary(dr->stream, &u);
    case RNN_ACT_SCALED_TANH:
        if ((err = rnn_scalar(dr, OSP_BINARY_ND_MUL, x, kb, dr->act_tmp, n)) !=
            NULL)
            return err;
        u.x = u.y = dr->act_tmp;
        if ((err = osp_op_unary(dr->stream, &u)) != NULL)
            return err;
        return rnn_scalar(dr, OSP_BINARY_ND_MUL, dr->act_tmp, ka, y, n);
    case RNN_ACT_AFFINE:
        if ((err = rnn_scalar(dr, OSP_BINARY_ND_MUL, x, ka, dr->act_tmp, n)) !=
            NULL)
            return err;
        return rnn_scalar(dr, OSP_BINARY_ND_ADD, dr->act_tmp, kb, y, n);
    }
    return onnx_node_error(dr->node, OSP_ERROR_INVALID_ARG,
                           "unknown activation kind");
}

/* clip, when the op has it, in place on n contiguous elements. */
static osp_error *rnn_clip(const rnn_dir *dr, float *x, int64_t n) {
    if (!dr->st->has_clip)
        return NULL;
    osp_unary_args u = {.op = OSP_UNARY_CLIP,
                        .dtype = OSP_TYPE_FP32,
                        .x = x,
                        .y = x,
                        .n = (size_t)n,
                        .alpha = -dr->st->clip,
                        .beta = dr->st->clip};
    return osp_op_unary(dr->stream, &u);
}

/* act_j (or clip, j < 0) in place on the first n rows of `count` gate
 * blocks of the step from block `first`: one call when the rows fill the
 * blocks (they are contiguous then), else one per block. */
static osp_error *rnn_blocks(const rnn_dir *dr, int j, float *xk, int64_t first,
                             int64_t count, int64_t n) {
    if (j < 0 && !dr->st->has_clip)
        return NULL;
    bool whole = n == dr->g->batch;
    int64_t calls = whole ? 1 : count;
    int64_t len = whole ? count * dr->bh : n * dr->h;
    for (int64_t i = 0; i < calls; i++) {
        float *x = xk + (first + i) * dr->bh;
        osp_error *err =
            j < 0 ? rnn_clip(dr, x, len) : rnn_act_apply(dr, j, x, x, len);
        if (err)
            return err;
    }
    return NULL;
}

/* Gate blocks [first, first + count) of step xk += h R_gate^T, for the
 * first n rows: one gemm_ex batched over the gates. */
static osp_error *rnn_gemm_rec(const rnn_dir *dr, int64_t n, const float *h,
                               int64_t first, int64_t count, float *xk) {
    const int64_t H = dr->h;
    osp_gemm_ex_args x = {
        .gemm =
            {
                .trans_b = true,
                .m = n,
                .n = H,
                .k = H,
                .alpha = 1.0f,
                .beta = 1.0f,
                .dtype = OSP_TYPE_FP32,
                .a = h,
                .lda = H,
                .b = dr->r + first * H * H,
                .ldb = H,
                .c = xk + first * dr->bh,
                .ldc = H,
            },
        .batch_count = count,
        .stride_a = 0,
        .stride_b = H * H,
        .stride_c = dr->bh,
        .act = OSP_UNARY_IDENTITY,
    };
    return osp_op_gemm_ex(dr->stream, &x);
}

/* ---- the cells, one step each ---------------------------------------------
 * xk: the step's gate blocks (X W^T + biases in, scratch after); only the
 * first n rows of each block, and of hprev, hcur, cprev, ccur, count.
 */

/* Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb) */
static osp_error *rnn_step_simple(const rnn_dir *dr, int64_t n, float *xk,
                                  const float *hprev, float *hcur) {
    osp_error *err;
    if ((err = rnn_gemm_rec(dr, n, hprev, 0, 1, xk)) != NULL ||
        (err = rnn_clip(dr, xk, n * dr->h)) != NULL)
        return err;
    return rnn_act_apply(dr, 0, xk, hcur, n * dr->h);
}

/* z = f(.. z), r = f(.. r); h~ = g(Xt Wh^T + (r . Ht-1) Rh^T + Wbh + Rbh),
 * or with linear_before_reset g(Xt Wh^T + r . (Ht-1 Rh^T + Rbh) + Wbh);
 * Ht = h~ + z . (Ht-1 - h~). Blocks z, r, h (linear_before_reset: z, r,
 * hr = Ht-1 Rh^T + Rbh, hx = Xt Wh^T + Wbh). */
static osp_error *rnn_step_gru(const rnn_dir *dr, int64_t n, float *xk,
                               const float *hprev, float *hcur) {
    const int64_t bh = dr->bh, nh = n * dr->h;
    float *z = xk, *r = xk + bh, *t0 = dr->tmp, *t1 = dr->tmp + bh;
    float *cand;
    osp_error *err;
    if (!dr->st->linear_before_reset) {
        cand = xk + 2 * bh;
        if ((err = rnn_gemm_rec(dr, n, hprev, 0, 2, xk)) != NULL ||
            (err = rnn_blocks(dr, -1, xk, 0, 2, n)) != NULL ||
            (err = rnn_blocks(dr, 0, xk, 0, 2, n)) != NULL ||
            (err = rnn_bin(dr, OSP_BINARY_MUL, r, hprev, t0, nh)) != NULL ||
            (err = rnn_gemm_rec(dr, n, t0, 2, 1, xk)) != NULL ||
            (err = rnn_clip(dr, cand, nh)) != NULL ||
            (err = rnn_act_apply(dr, 1, cand, cand, nh)) != NULL)
            return err;
    } else {
        cand = t0;
        if ((err = rnn_gemm_rec(dr, n, hprev, 0, 3, xk)) != NULL ||
            (err = rnn_blocks(dr, -1, xk, 0, 2, n)) != NULL ||
            (err = rnn_blocks(dr, 0, xk, 0, 2, n)) != NULL ||
            (err = rnn_bin(dr, OSP_BINARY_MUL, r, xk + 2 * bh, t0, nh)) !=
                NULL ||
            (err = rnn_bin(dr, OSP_BINARY_ADD, t0, xk + 3 * bh, t0, nh)) !=
                NULL ||
            (err = rnn_clip(dr, t0, nh)) != NULL ||
            (err = rnn_act_apply(dr, 1, t0, t0, nh)) != NULL)
            return err;
    }
    if ((err = rnn_bin(dr, OSP_BINARY_SUB, hprev, cand, t1, nh)) != NULL ||
        (err = rnn_bin(dr, OSP_BINARY_MUL, z, t1, t1, nh)) != NULL)
        return err;
    return rnn_bin(dr, OSP_BINARY_ADD, cand, t1, hcur, nh);
}

/* Blocks i, o, f, c (W's order). i = f(.. + Pi . Ct-1), f = f(.. + Pf .
 * Ct-1) (1 - i with input_forget), c~ = g(..), Ct = f . Ct-1 + i . c~,
 * o = f(.. + Po . Ct), Ht = o . h(Ct). */
static osp_error *rnn_step_lstm(const rnn_dir *dr, int64_t n, float *xk,
                                const float *hprev, float *hcur,
                                const float *cprev, float *ccur) {
    const int64_t bh = dr->bh, H = dr->h, nh = n * H;
    float *gi = xk, *go = xk + bh, *gf = xk + 2 * bh, *gc = xk + 3 * bh;
    float *t0 = dr->tmp;
    bool forget_is_input = dr->st->input_forget;
    osp_error *err;
    if ((err = rnn_gemm_rec(dr, n, hprev, 0, 4, xk)) != NULL)
        return err;
    if (dr->p) {
        /* t0 [2, n, H] = (Pi, Pf) . Ct-1 */
        if ((err = rnn_binary_nd(dr->stream, OSP_BINARY_ND_MUL, 3,
                                 (int64_t[]){2, n, H}, dr->p,
                                 (int64_t[]){2 * H, 0, 1}, cprev,
                                 (int64_t[]){0, H, 1}, t0)) != NULL ||
            (err = rnn_bin(dr, OSP_BINARY_ADD, gi, t0, gi, nh)) != NULL ||
            (err = rnn_bin(dr, OSP_BINARY_ADD, gf, t0 + nh, gf, nh)) != NULL ||
            (err = rnn_blocks(dr, -1, xk, 0, 1, n)) != NULL ||
            (err = rnn_blocks(dr, -1, xk, 2, 2, n)) != NULL ||
            (err = rnn_blocks(dr, 0, xk, 0, 1, n)) != NULL ||
            (!forget_is_input &&
             (err = rnn_blocks(dr, 0, xk, 2, 1, n)) != NULL))
            return err;
    } else {
        if ((err = rnn_blocks(dr, -1, xk, 0, 4, n)) != NULL ||
            (err = rnn_blocks(dr, 0, xk, 0, forget_is_input ? 2 : 3, n)) !=
                NULL)
            return err;
    }
    if (forget_is_input &&
        (err = onnx_binary_flat(dr->stream, OSP_BINARY_ND_SUB, OSP_TYPE_FP32,
                                dr->consts + RNN_CONST_ONE, true, gi, false, gf,
                                nh)) != NULL)
        return err;
    if ((err = rnn_blocks(dr, 1, xk, 3, 1, n)) != NULL ||
        (err = rnn_bin(dr, OSP_BINARY_MUL, gf, cprev, t0, nh)) != NULL ||
        (err = rnn_bin(dr, OSP_BINARY_MUL, gi, gc, gc, nh)) != NULL ||
        (err = rnn_bin(dr, OSP_BINARY_ADD, t0, gc, ccur, nh)) != NULL)
        return err;
    if (dr->p) {
        if ((err = rnn_binary_nd(
                 dr->stream, OSP_BINARY_ND_MUL, 2, (int64_t[]){n, H}, dr->p + H,
                 (int64_t[]){0, 1}, ccur, (int64_t[]){H, 1}, t0)) != NULL ||
            (err = rnn_bin(dr, OSP_BINARY_ADD, go, t0, go, nh)) != NULL ||
            (err = rnn_blocks(dr, -1, xk, 1, 1, n)) != NULL ||
            (err = rnn_blocks(dr, 0, xk, 1, 1, n)) != NULL)
            return err;
    }
    if ((err = rnn_act_apply(dr, 2, ccur, t0, nh)) != NULL)
        return err;
    return rnn_bin(dr, OSP_BINARY_MUL, go, t0, hcur, nh);
}

/* ---- a direction ----------------------------------------------------------
 */

/* Where step k's H lives: Y itself, two alternating blocks, or one block
 * per step. */
typedef struct rnn_hs {
    float *base;
    int64_t stride;
    bool pingpong;
    int64_t bh;
} rnn_hs;

static float *rnn_hs_at(const rnn_hs *hs, int64_t k) {
    if (hs->pingpong)
        return hs->base + (k & 1) * hs->bh;
    return hs->base + k * hs->stride;
}

/* Element strides of the op's tensors in their layout. */
typedef struct rnn_strides {
    int64_t x_t, x_b;      /* tmpxw: a time step, a batch entry */
    int64_t y_t, y_b, y_d; /* Y */
    int64_t s_b, s_d;      /* Y_h, Y_c, initial_h, initial_c */
} rnn_strides;

static rnn_strides rnn_layout_strides(const rnn_geom *g) {
    const int64_t H = g->hidden, GH = g->gates * H, nd = g->nd;
    rnn_strides s;
    if (g->layout == 0) {
        s.x_t = g->batch * GH;
        s.x_b = GH;
        s.y_t = nd * g->batch * H;
        s.y_b = H;
        s.y_d = g->batch * H;
        s.s_b = H;
        s.s_d = g->batch * H;
    } else {
        s.x_t = GH;
        s.x_b = g->seq * GH;
        s.y_t = nd * H;
        s.y_b = g->seq * nd * H;
        s.y_d = H;
        s.s_b = nd * H;
        s.s_d = H;
    }
    return s;
}

/* Y_h and Y_c of a group from the state at its end (h, c: position-
 * ordered blocks). */
static osp_error *rnn_capture(onnx_run_ctx *ctx, const rnn_geom *g,
                              const rnn_strides *ls, int d,
                              const rnn_group *grp, const float *h,
                              const float *c) {
    const int64_t H = g->hidden;
    osp_error *err;
    for (int i = 1; i <= 2; i++) {
        const float *src = i == 1 ? h : c;
        if (!(i == 1 ? g->has_yh : g->has_yc))
            continue;
        float *dst = (float *)ctx->out[i] + d * ls->s_d + grp->b0 * ls->s_b;
        if ((err = rnn_copy(ctx->stream, 2, (int64_t[]){grp->nb, H},
                            src + grp->p0 * H, (int64_t[]){H, 1}, dst,
                            (int64_t[]){ls->s_b, 1})) != NULL)
            return err;
    }
    return NULL;
}

/* The initial state (input `which`) of direction d into the position-
 * ordered block dst, or zeros without one. */
static osp_error *rnn_initial(onnx_run_ctx *ctx, const rnn_geom *g,
                              const rnn_strides *ls, int d,
                              const onnx_desc *init, size_t which, float *dst) {
    const int64_t H = g->hidden;
    if (!init)
        return onnx_fill_f32(ctx->stream, dst, (size_t)(g->batch * H), 0.0f);
    const float *src = (const float *)ctx->in[which] + d * ls->s_d;
    for (int64_t i = 0; i < rnn_n_groups(g); i++) {
        rnn_group grp = rnn_group_at(g, i);
        osp_error *err = rnn_copy(
            ctx->stream, 2, (int64_t[]){grp.nb, H}, src + grp.b0 * ls->s_b,
            (int64_t[]){ls->s_b, 1}, dst + grp.p0 * H, (int64_t[]){H, 1});
        if (err)
            return err;
    }
    return NULL;
}

static osp_error *rnn_run_direction(onnx_run_ctx *ctx, const rnn_state *st,
                                    const rnn_geom *g, int d) {
    osp_stream *stream = ctx->stream;
    float *ws = ctx->workspace;
    const int64_t H = g->hidden, I = g->input, GH = g->gates * H,
                  batch = g->batch, seq = g->seq, S = g->slots, bh = batch * H;
    const bool reverse = st->reverse || d == 1;
    const bool lbr = st->cell == RNN_CELL_GRU && st->linear_before_reset;
    const rnn_strides ls = rnn_layout_strides(g);
    const float *b = g->b ? ctx->in[RNN_IN_B] : NULL;
    float *tmpxw = ws + g->off_tmpxw;
    osp_error *err;

    rnn_dir dr = {
        .stream = stream,
        .node = ctx->node,
        .st = st,
        .g = g,
        .d = d,
        .acts = st->acts[d],
        .r = (const float *)ctx->in[RNN_IN_R] + d * GH * H,
        .p = g->p ? (const float *)ctx->in[RNN_IN_P] + d * 3 * H : NULL,
        .consts = ws + g->off_const,
        .tmp = ws + g->off_tmp,
        .act_tmp = ws + g->off_act,
        .h = H,
        .bh = bh,
    };

    /* 1. X W^T + bias for every step. K == 0 makes it the bias alone; any
     * valid pointer stands in for the empty operands then. */
    if (seq * batch > 0) {
        osp_gemm_ex_args x = {
            .gemm =
                {
                    .trans_b = true,
                    .m = seq * batch,
                    .n = GH,
                    .k = I,
                    .alpha = 1.0f,
                    .beta = 0.0f,
                    .dtype = OSP_TYPE_FP32,
                    .a = I > 0 ? ctx->in[RNN_IN_X] : (const void *)tmpxw,
                    .lda = I > 0 ? I : 1,
                    .b = I > 0 ? (const float *)ctx->in[RNN_IN_W] + d * GH * I
                               : (const float *)tmpxw,
                    .ldb = I > 0 ? I : 1,
                    .c = tmpxw,
                    .ldc = GH,
                },
            .bias = b ? ws + g->off_bias + d * GH : NULL,
            .act = OSP_UNARY_IDENTITY,
        };
        if ((err = osp_op_gemm_ex(stream, &x)) != NULL)
            return err;
    }

    /* 2. regroup into xw [step, slot, position, H] */
    float *xw;
    int64_t xw_stride;
    if (g->direct_xw) {
        xw_stride = batch * GH;
        xw = tmpxw;
        if (reverse && seq > 0) {
            xw = tmpxw + (seq - 1) * xw_stride;
            xw_stride = -xw_stride;
        }
    } else {
        xw = ws + g->off_xw;
        xw_stride = S * bh;
        const int64_t copied = lbr ? 2 : g->gates;
        for (int64_t i = 0; i < rnn_n_groups(g); i++) {
            rnn_group grp = rnn_group_at(g, i);
            if (grp.len == 0)
                continue;
            int64_t t0 = reverse ? grp.len - 1 : 0;
            int64_t ts = reverse ? -ls.x_t : ls.x_t;
            const float *src = tmpxw + t0 * ls.x_t + grp.b0 * ls.x_b;
            float *dst = xw + grp.p0 * H;
            if ((err = rnn_copy(stream, 4,
                                (int64_t[]){grp.len, grp.nb, copied, H}, src,
                                (int64_t[]){ts, ls.x_b, H, 1}, dst,
                                (int64_t[]){S * bh, H, bh, 1})) != NULL)
                return err;
            if (lbr && (err = rnn_copy(
                            stream, 3, (int64_t[]){grp.len, grp.nb, H},
                            src + 2 * H, (int64_t[]){ts, ls.x_b, 1},
                            dst + 3 * bh, (int64_t[]){S * bh, H, 1})) != NULL)
                return err;
        }
        /* hr starts as Rbh: the step's gemm accumulates Ht-1 Rh^T on it */
        if (lbr && (err = rnn_copy(stream, 3, (int64_t[]){g->steps, batch, H},
                                   b ? b + d * 2 * GH + GH + 2 * H
                                     : ws + g->off_const + RNN_CONST_ZERO,
                                   (int64_t[]){0, 0, b ? 1 : 0}, xw + 2 * bh,
                                   (int64_t[]){S * bh, H, 1})) != NULL)
            return err;
    }

    /* where H goes */
    rnn_hs hs = {.bh = bh};
    if (g->direct_y) {
        hs.stride = ls.y_t;
        hs.base = (float *)ctx->out[0] + d * ls.y_d;
        if (reverse && seq > 0) {
            hs.base += (seq - 1) * ls.y_t;
            hs.stride = -hs.stride;
        }
    } else {
        hs.base = ws + g->off_hs;
        hs.stride = bh;
        hs.pingpong = g->pingpong;
    }

    /* 3. initial states; entries of length 0 end there */
    float *hinit = ws + g->off_hinit;
    float *cbuf = st->cell == RNN_CELL_LSTM ? ws + g->off_c : NULL;
    if ((err = rnn_initial(ctx, g, &ls, d, g->h0, RNN_IN_H0, hinit)) != NULL ||
        (cbuf &&
         (err = rnn_initial(ctx, g, &ls, d, g->c0, RNN_IN_C0, cbuf)) != NULL))
        return err;
    for (int64_t i = 0; i < rnn_n_groups(g); i++) {
        if (rnn_len(g, i) != 0)
            continue;
        rnn_group grp = rnn_group_at(g, i);
        if ((err = rnn_capture(ctx, g, &ls, d, &grp, hinit, cbuf)) != NULL)
            return err;
    }

    /* 4. the steps */
    for (int64_t k = 0; k < g->steps; k++) {
        int64_t n = rnn_active(g, k);
        float *xk = xw + k * xw_stride;
        const float *hprev = k > 0 ? rnn_hs_at(&hs, k - 1) : hinit;
        float *hcur = rnn_hs_at(&hs, k);
        float *ccur = cbuf ? cbuf + ((k + 1) & 1) * bh : NULL;
        switch (st->cell) {
        case RNN_CELL_SIMPLE:
            err = rnn_step_simple(&dr, n, xk, hprev, hcur);
            break;
        case RNN_CELL_GRU:
            err = rnn_step_gru(&dr, n, xk, hprev, hcur);
            break;
        case RNN_CELL_LSTM:
            err = rnn_step_lstm(&dr, n, xk, hprev, hcur, cbuf + (k & 1) * bh,
                                ccur);
            break;
        }
        if (err)
            return err;
        for (int64_t i = 0; i < rnn_n_groups(g); i++) {
            if (rnn_len(g, i) != k + 1)
                continue;
            rnn_group grp = rnn_group_at(g, i);
            if ((err = rnn_capture(ctx, g, &ls, d, &grp, hcur, ccur)) != NULL)
                return err;
        }
    }

    /* 5. Y, time back in order (zero past each length: filled before) */
    if (!g->has_y || g->direct_y)
        return NULL;
    for (int64_t i = 0; i < rnn_n_groups(g); i++) {
        rnn_group grp = rnn_group_at(g, i);
        if (grp.len == 0)
            continue;
        const float *src =
            rnn_hs_at(&hs, reverse ? grp.len - 1 : 0) + grp.p0 * H;
        float *dst = (float *)ctx->out[0] + d * ls.y_d + grp.b0 * ls.y_b;
        if ((err = rnn_copy(stream, 3, (int64_t[]){grp.len, grp.nb, H}, src,
                            (int64_t[]){reverse ? -hs.stride : hs.stride, H, 1},
                            dst, (int64_t[]){ls.y_t, ls.y_b, 1})) != NULL)
            return err;
    }
    return NULL;
}

static osp_error *rnn_run(onnx_run_ctx *ctx) {
    const rnn_state *st = ctx->state;
    rnn_geom g;
    osp_error *err = rnn_geometry(ctx->node, st, ctx->n_inputs, ctx->in_desc,
                                  ctx->n_outputs, ctx->out_desc, &g);
    if (err)
        return err;
    if (g.batch == 0 || g.hidden == 0)
        return NULL; /* every output is empty */
    osp_stream *stream = ctx->stream;
    float *ws = ctx->workspace;
    const int64_t GH = g.gates * g.hidden;
    float *consts = ws + g.off_const;
    if (st->input_forget &&
        (err = onnx_fill_f32(stream, consts + RNN_CONST_ONE, 1, 1.0f)) != NULL)
        return err;
    if (st->linear_before_reset && !g.b &&
        (err = onnx_fill_f32(stream, consts + RNN_CONST_ZERO, 1, 0.0f)) != NULL)
        return err;
    for (int d = 0; st->composite && d < g.nd; d++)
        for (int j = 0; j < st->n_acts; j++) {
            const rnn_act *a = &st->acts[d][j];
            if (a->kind == RNN_ACT_UNARY)
                continue;
            float *k = consts + RNN_CONST_ACT(d, j);
            if ((err = onnx_fill_f32(stream, k, 1, a->alpha)) != NULL ||
                (err = onnx_fill_f32(stream, k + 1, 1, a->beta)) != NULL)
                return err;
        }
    /* Wb + Rb (GRU with linear_before_reset: Rbh joins inside the step) */
    if (g.b) {
        const float *b = ctx->in[RNN_IN_B];
        float *bias = ws + g.off_bias;
        if ((err =
                 rnn_binary_nd(stream, OSP_BINARY_ND_ADD, 2,
                               (int64_t[]){g.nd, GH}, b, (int64_t[]){2 * GH, 1},
                               b + GH, (int64_t[]){2 * GH, 1}, bias)) != NULL)
            return err;
        if (st->cell == RNN_CELL_GRU && st->linear_before_reset &&
            (err = rnn_copy(stream, 2, (int64_t[]){g.nd, g.hidden},
                            b + 2 * g.hidden, (int64_t[]){2 * GH, 1},
                            bias + 2 * g.hidden, (int64_t[]){GH, 1})) != NULL)
            return err;
    }
    if (g.has_y && !g.uniform &&
        (err = onnx_fill_f32(stream, ctx->out[0],
                             (size_t)onnx_shape_count(&ctx->out_desc[0].shape),
                             0.0f)) != NULL)
        return err;
    for (int d = 0; d < g.nd; d++)
        if ((err = rnn_run_direction(ctx, st, &g, d)) != NULL)
            return err;
    return NULL;
}

/* ---- the table -----------------------------------------------------------
 */

#define RNN_USES                                                               \
    {                                                                          \
        OSP_OP_GEMM_EX, OSP_OP_UNARY, OSP_OP_BINARY, OSP_OP_BINARY_ND,         \
            OSP_OP_COPY_STRIDED, OSP_OP_FILL, END                              \
    }

/* One cell's entry; the three share infer, run and the device ops. */
#define RNN_OP(name, prepare_fn)                                               \
    {                                                                          \
        .op_type = name, .domain = "", .since = 7, .prepare = prepare_fn,      \
        .free = free, .infer = rnn_infer, .run = rnn_run, .uses = RNN_USES,    \
    }

static const onnx_op rnn_ops[] = {
    RNN_OP("RNN", rnn_prepare),
    RNN_OP("GRU", gru_prepare),
    RNN_OP("LSTM", lstm_prepare),
};

const onnx_op_family onnx_ops_rnn_family = {
    .ops = rnn_ops,
    .n_ops = sizeof rnn_ops / sizeof rnn_ops[0],
};
