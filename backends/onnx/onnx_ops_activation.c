/*
 * The one-input elementwise ops (activations and math functions): each is
 * one osp_op_unary, its parameters read from the node's attributes at
 * prepare. Half types (FP16, BF16) run in FP32 through a workspace slot
 * (onnx_ops_elementwise.h). Their entries are in the family's table in
 * onnx_ops_elementwise.c, as is Clip, whose bounds may be inputs.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_elementwise.h"

/* The dtypes an op takes besides FP32 (and the half types through it). */
enum {
    TAKES_FLOAT = 1 << 0,    /* FP32, and FP16 / BF16 computed in FP32 */
    TAKES_SIGNED = 1 << 1,   /* INT8..INT64 */
    TAKES_UNSIGNED = 1 << 2, /* UINT8..UINT64 */
    TAKES_BOOL = 1 << 3,     /* BOOL only (Not) */
};

typedef struct unary_kind {
    const char *op_type;
    osp_unary_op op;
    unsigned takes;
    /* attributes read into alpha and beta (NULL: none), and defaults */
    const char *alpha_attr;
    float alpha;
    const char *beta_attr;
    float beta;
} unary_kind;

/* Selu's defaults are ONNX's, the float nearest to the paper's constants. */
static const unary_kind unary_kinds[] = {
    {"Abs", OSP_UNARY_ABS, TAKES_FLOAT | TAKES_SIGNED | TAKES_UNSIGNED, NULL, 0,
     NULL, 0},
    {"Neg", OSP_UNARY_NEG, TAKES_FLOAT | TAKES_SIGNED, NULL, 0, NULL, 0},
    {"Sign", OSP_UNARY_SIGN, TAKES_FLOAT | TAKES_SIGNED, NULL, 0, NULL, 0},
    {"Not", OSP_UNARY_NOT, TAKES_BOOL, NULL, 0, NULL, 0},
    {"Relu", OSP_UNARY_RELU, TAKES_FLOAT | TAKES_SIGNED, NULL, 0, NULL, 0},
    {"Exp", OSP_UNARY_EXP, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Log", OSP_UNARY_LOG, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Sqrt", OSP_UNARY_SQRT, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Reciprocal", OSP_UNARY_RECIPROCAL, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Floor", OSP_UNARY_FLOOR, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Ceil", OSP_UNARY_CEIL, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Round", OSP_UNARY_ROUND, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Sigmoid", OSP_UNARY_SIGMOID, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Tanh", OSP_UNARY_TANH, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Erf", OSP_UNARY_ERF, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Softplus", OSP_UNARY_SOFTPLUS, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Softsign", OSP_UNARY_SOFTSIGN, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Elu", OSP_UNARY_ELU, TAKES_FLOAT, "alpha", 1.0f, NULL, 0},
    {"Celu", OSP_UNARY_CELU, TAKES_FLOAT, "alpha", 1.0f, NULL, 0},
    {"Selu", OSP_UNARY_SELU, TAKES_FLOAT, "alpha", 1.67326319217681884765625f,
     "gamma", 1.05070102214813232421875f},
    {"LeakyRelu", OSP_UNARY_LEAKY_RELU, TAKES_FLOAT, "alpha", 0.01f, NULL, 0},
    {"ThresholdedRelu", OSP_UNARY_THRESHOLDED_RELU, TAKES_FLOAT, "alpha", 1.0f,
     NULL, 0},
    {"HardSigmoid", OSP_UNARY_HARD_SIGMOID, TAKES_FLOAT, "alpha", 0.2f, "beta",
     0.5f},
    {"HardSwish", OSP_UNARY_HARD_SWISH, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Mish", OSP_UNARY_MISH, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Sin", OSP_UNARY_SIN, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Cos", OSP_UNARY_COS, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Tan", OSP_UNARY_TAN, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Asin", OSP_UNARY_ASIN, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Acos", OSP_UNARY_ACOS, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Atan", OSP_UNARY_ATAN, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Sinh", OSP_UNARY_SINH, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Cosh", OSP_UNARY_COSH, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Asinh", OSP_UNARY_ASINH, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Acosh", OSP_UNARY_ACOSH, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"Atanh", OSP_UNARY_ATANH, TAKES_FLOAT, NULL, 0, NULL, 0},
    {"IsNaN", OSP_UNARY_ISNAN, TAKES_FLOAT, NULL, 0, NULL, 0},
    /* alpha, beta: detect_positive, detect_negative (ints, read below) */
    {"IsInf", OSP_UNARY_ISINF, TAKES_FLOAT, NULL, 1.0f, NULL, 1.0f},
    /* approximate = "none" | "tanh" (read below) */
    {"Gelu", OSP_UNARY_GELU, TAKES_FLOAT, NULL, 0, NULL, 0},
};

typedef struct unary_state {
    const unary_kind *kind;
    osp_unary_op op;
    float alpha, beta;
} unary_state;

static const unary_kind *unary_kind_of(const char *op_type) {
    for (size_t i = 0; i < sizeof unary_kinds / sizeof unary_kinds[0]; i++)
        if (strcmp(unary_kinds[i].op_type, op_type) == 0)
            return &unary_kinds[i];
    return NULL;
}

osp_error *onnx_ew__unary_prepare(const onnx_node *node, void **state) {
    const unary_kind *kind = unary_kind_of(node->op_type);
    if (!kind)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "op '%s' is not a unary op", node->op_type);
    unary_state st = {kind, kind->op, kind->alpha, kind->beta};
    osp_error *err = NULL;
    if (kind->alpha_attr &&
        (err = onnx_attr_float(node, kind->alpha_attr, kind->alpha, &st.alpha)))
        return err;
    if (kind->beta_attr &&
        (err = onnx_attr_float(node, kind->beta_attr, kind->beta, &st.beta)))
        return err;
    if (kind->op == OSP_UNARY_ISINF) {
        int64_t pos, neg;
        if ((err = onnx_attr_int(node, "detect_positive", 1, &pos)) ||
            (err = onnx_attr_int(node, "detect_negative", 1, &neg)))
            return err;
        st.alpha = pos ? 1.0f : 0.0f;
        st.beta = neg ? 1.0f : 0.0f;
    } else if (kind->op == OSP_UNARY_GELU) {
        const char *approx;
        if ((err = onnx_attr_string(node, "approximate", "none", &approx)))
            return err;
        if (strcmp(approx, "tanh") == 0)
            st.op = OSP_UNARY_GELU_TANH;
        else if (strcmp(approx, "none") != 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'approximate' is '%s', expected "
                                   "'none' or 'tanh'",
                                   approx);
    }
    unary_state *out = malloc(sizeof *out);
    if (!out)
        return osp_error_out_of_memory();
    *out = st;
    *state = out;
    return NULL;
}

static bool unary_takes(const unary_kind *kind, osp_datatype dt) {
    if (dt == OSP_TYPE_BOOL)
        return kind->takes & TAKES_BOOL;
    if (dt == OSP_TYPE_FP32 || onnx_ew__is_half(dt))
        return kind->takes & TAKES_FLOAT;
    if (onnx_ew__is_signed(dt))
        return kind->takes & TAKES_SIGNED;
    if (onnx_ew__is_unsigned(dt))
        return kind->takes & TAKES_UNSIGNED;
    return false;
}

static osp_datatype unary_out_dtype(osp_unary_op op, osp_datatype in) {
    return op == OSP_UNARY_ISNAN || op == OSP_UNARY_ISINF ? OSP_TYPE_BOOL : in;
}

osp_error *onnx_ew__unary_infer(onnx_infer_ctx *ctx) {
    const unary_state *st = ctx->state;
    osp_error *err =
        onnx_required_input(ctx->node, ctx->n_inputs, ctx->inputs, 0);
    if (err)
        return err;
    const onnx_desc *x = &ctx->inputs[0];
    if (!unary_takes(st->kind, x->dtype))
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                               "%s of %s is not supported", ctx->node->op_type,
                               osp_datatype_wire_name(x->dtype));
    ctx->outputs[0].dtype = unary_out_dtype(st->op, x->dtype);
    ctx->outputs[0].shape = x->shape;
    ctx->workspace_bytes =
        onnx_ew__is_half(x->dtype)
            ? onnx_ew__slot(onnx_shape_count(&x->shape), OSP_TYPE_FP32)
            : 0;
    return NULL;
}

osp_error *onnx_ew__unary_run(onnx_run_ctx *ctx) {
    const unary_state *st = ctx->state;
    const onnx_desc *x = &ctx->in_desc[0], *y = &ctx->out_desc[0];
    int64_t n = onnx_shape_count(&x->shape);
    if (n == 0)
        return NULL;
    osp_unary_args u;
    memset(&u, 0, sizeof u);
    u.op = st->op;
    u.dtype = x->dtype;
    u.x = ctx->in[0];
    u.y = ctx->out[0];
    u.n = (size_t)n;
    u.alpha = st->alpha;
    u.beta = st->beta;
    if (!onnx_ew__is_half(x->dtype))
        return osp_op_unary(ctx->stream, &u);
    /* Half: x -> FP32 slot, the op in place (or into the BOOL output),
     * FP32 slot -> y. */
    osp_error *err = osp_op_cast(ctx->stream, ctx->in[0], x->dtype,
                                 ctx->workspace, OSP_TYPE_FP32, (size_t)n);
    if (err)
        return err;
    u.dtype = OSP_TYPE_FP32;
    u.x = ctx->workspace;
    bool to_bool = y->dtype == OSP_TYPE_BOOL;
    u.y = to_bool ? ctx->out[0] : ctx->workspace;
    if ((err = osp_op_unary(ctx->stream, &u)) || to_bool)
        return err;
    return osp_op_cast(ctx->stream, ctx->workspace, OSP_TYPE_FP32, ctx->out[0],
                       y->dtype, (size_t)n);
}
