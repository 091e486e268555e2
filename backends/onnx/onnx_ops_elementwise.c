/*
 * The elementwise ops of more than one input, and the conversions:
 *   binary    Add Sub Mul Div Pow Mod PRelu, Equal Less LessOrEqual
 *             Greater GreaterOrEqual, And Or Xor, BitShift: one
 *             osp_op_binary_nd with numpy broadcasting;
 *   variadic  Max Min Sum Mean: a chain of binary_nd over 1..N inputs;
 *   Clip      osp_op_unary CLIP when its bounds are known while planning,
 *             binary_nd MAX / MIN against the bound tensors otherwise;
 *   Where     osp_op_where (STRING X and Y as pairs of 8-byte halves);
 *   Cast, CastLike  osp_op_cast.
 * The one-input ops are in onnx_ops_activation.c; this file holds the
 * family's one table (onnx_ops_elementwise_family) for both.
 *
 * Every op reads its inputs through broadcast strides collapsed by
 * ew_coalesce, so the common same-shape case is one flat loop. Half types
 * (FP16, BF16) are computed in FP32 through the workspace (see
 * onnx_ops_elementwise.h). Results that the contract of binary_nd forbids
 * writing over an input (a chain of Sum) ping-pong through the workspace.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_elementwise.h"
#include "onnx_ops_strings.h"

#define NO_SLOT SIZE_MAX

static const char *dt_name(osp_datatype dt) {
    return osp_datatype_wire_name(dt);
}

/* ---- shared helpers ------------------------------------------------------
 */

/* Shrinks the iteration space of an elementwise op over a contiguous output
 * of `rank` dims: dims of 1 go, and neighbours that every operand walks
 * contiguously (strides[k][i] == strides[k][i + 1] * dims[i + 1], broadcast
 * strides of 0 included) merge, so that operands of the output's shape
 * become one flat run and a per-channel operand [C, 1, 1] becomes
 * [N, C, HW]. Rewrites dims and each operand's strides in place and returns
 * the new rank (at least 1). The output stays contiguous since merging
 * never reorders dims. */
static int ew_coalesce(int rank, int64_t dims[OSP_MAX_DIMS], size_t n_ops,
                       int64_t *const strides[]) {
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1)
            continue;
        bool merge = r > 0;
        for (size_t k = 0; merge && k < n_ops; k++)
            merge = strides[k][r - 1] == strides[k][i] * dims[i];
        if (merge) {
            dims[r - 1] *= dims[i];
            for (size_t k = 0; k < n_ops; k++)
                strides[k][r - 1] = strides[k][i];
            continue;
        }
        dims[r] = dims[i];
        for (size_t k = 0; k < n_ops; k++)
            strides[k][r] = strides[k][i];
        r++;
    }
    if (r == 0) {
        dims[0] = 1;
        for (size_t k = 0; k < n_ops; k++)
            strides[k][0] = 0;
        r = 1;
    }
    for (int i = r; i < OSP_MAX_DIMS; i++) {
        dims[i] = 0;
        for (size_t k = 0; k < n_ops; k++)
            strides[k][i] = 0;
    }
    return r;
}

/* out = a op b over out_shape, a and b (device memory, borrowed) read as
 * their own shapes broadcast to it. out must not overlap a or b. */
static osp_error *ew_binary(osp_stream *stream, osp_binary_nd_op op,
                            osp_datatype dtype, const osp_shape *out_shape,
                            const void *a, const osp_shape *a_shape,
                            const void *b, const osp_shape *b_shape,
                            void *out) {
    osp_binary_nd_args args;
    memset(&args, 0, sizeof args);
    args.op = op;
    args.dtype = dtype;
    args.a = a;
    args.b = b;
    args.out = out;
    memcpy(args.dims, out_shape->dims, sizeof args.dims);
    onnx_broadcast_strides(a_shape, out_shape, args.a_strides);
    onnx_broadcast_strides(b_shape, out_shape, args.b_strides);
    int64_t *const strides[2] = {args.a_strides, args.b_strides};
    args.rank = ew_coalesce(out_shape->rank, args.dims, 2, strides);
    return osp_op_binary_nd(stream, &args);
}

static void *ws_at(const onnx_run_ctx *ctx, size_t off) {
    return (char *)ctx->workspace + off;
}

/* INVALID_ARG unless inputs 0 to need - 1 are given. */
static osp_error *need_inputs(const onnx_node *node, size_t n_inputs,
                              const onnx_desc *inputs, size_t need) {
    for (size_t i = 0; i < need; i++) {
        osp_error *err = onnx_required_input(node, n_inputs, inputs, i);
        if (err)
            return err;
    }
    return NULL;
}

/* Fills the one-element workspace slot at `off` with v in dt (FP32 or
 * FP64: Mean's 1/N, and Clip's attribute bounds, exist only for floats). */
static osp_error *fill_scalar(onnx_run_ctx *ctx, size_t off, osp_datatype dt,
                              double v) {
    osp_fill_args fill = {.elem_size = osp_datatype_byte_size(dt),
                          .dst = ws_at(ctx, off),
                          .n = 1};
    onnx_number_bytes(dt, v, fill.value);
    return osp_op_fill(ctx->stream, &fill);
}

/* ---- binary ops ----------------------------------------------------------
 */

typedef struct binary_state {
    osp_binary_nd_op op;
    bool mean; /* variadic Mean: the sum times 1/N */
} binary_state;

static bool op_is_comparison(osp_binary_nd_op op) {
    return op == OSP_BINARY_ND_EQUAL || op == OSP_BINARY_ND_LESS ||
           op == OSP_BINARY_ND_LESS_EQUAL || op == OSP_BINARY_ND_GREATER ||
           op == OSP_BINARY_ND_GREATER_EQUAL;
}

static bool op_is_logic(osp_binary_nd_op op) {
    return op == OSP_BINARY_ND_AND || op == OSP_BINARY_ND_OR ||
           op == OSP_BINARY_ND_XOR;
}

static bool op_is_bitshift(osp_binary_nd_op op) {
    return op == OSP_BINARY_ND_BITSHIFT_LEFT ||
           op == OSP_BINARY_ND_BITSHIFT_RIGHT;
}

static const struct {
    const char *op_type;
    osp_binary_nd_op op;
} binary_names[] = {
    {"Add", OSP_BINARY_ND_ADD},
    {"Sub", OSP_BINARY_ND_SUB},
    {"Mul", OSP_BINARY_ND_MUL},
    {"Div", OSP_BINARY_ND_DIV},
    {"Pow", OSP_BINARY_ND_POW},
    {"Mod", OSP_BINARY_ND_MOD},
    {"PRelu", OSP_BINARY_ND_PRELU},
    {"Equal", OSP_BINARY_ND_EQUAL},
    {"Less", OSP_BINARY_ND_LESS},
    {"LessOrEqual", OSP_BINARY_ND_LESS_EQUAL},
    {"Greater", OSP_BINARY_ND_GREATER},
    {"GreaterOrEqual", OSP_BINARY_ND_GREATER_EQUAL},
    {"And", OSP_BINARY_ND_AND},
    {"Or", OSP_BINARY_ND_OR},
    {"Xor", OSP_BINARY_ND_XOR},
    {"BitShift", OSP_BINARY_ND_BITSHIFT_LEFT},
    {"Max", OSP_BINARY_ND_MAX},
    {"Min", OSP_BINARY_ND_MIN},
    {"Sum", OSP_BINARY_ND_ADD},
    {"Mean", OSP_BINARY_ND_ADD},
};

/* Maps the node's op_type (and Mod's fmod, BitShift's direction) to a
 * binary_nd op. *state: a binary_state the caller frees with free(). */
static osp_error *binary_prepare(const onnx_node *node, void **state) {
    osp_error *err = NULL;
    binary_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    size_t i = 0, n = sizeof binary_names / sizeof binary_names[0];
    while (i < n && strcmp(binary_names[i].op_type, node->op_type) != 0)
        i++;
    if (i == n) {
        err = onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                              "op '%s' is not an elementwise binary op",
                              node->op_type);
        goto out;
    }
    st->op = binary_names[i].op;
    st->mean = strcmp(node->op_type, "Mean") == 0;
    if (strcmp(node->op_type, "Mod") == 0) {
        int64_t fmod;
        if ((err = onnx_attr_int(node, "fmod", 0, &fmod)) != NULL)
            goto out;
        if (fmod != 0 && fmod != 1) {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'fmod' is %lld, expected 0 or 1",
                                  (long long)fmod);
            goto out;
        }
        st->op = fmod ? OSP_BINARY_ND_FMOD : OSP_BINARY_ND_MOD;
    } else if (strcmp(node->op_type, "BitShift") == 0) {
        const char *dir;
        if ((err = onnx_attr_string(node, "direction", "", &dir)) != NULL)
            goto out;
        if (strcmp(dir, "LEFT") == 0) {
            st->op = OSP_BINARY_ND_BITSHIFT_LEFT;
        } else if (strcmp(dir, "RIGHT") == 0) {
            st->op = OSP_BINARY_ND_BITSHIFT_RIGHT;
        } else {
            err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                  "attribute 'direction' is '%s', expected "
                                  "'LEFT' or 'RIGHT'",
                                  dir);
            goto out;
        }
    }
out:
    if (err) {
        free(st);
        return err;
    }
    *state = st;
    return NULL;
}

/* Whether binary op `op` (of node `node`) takes operands of dtype `dt`
 * (after half promotion); INVALID_ARG for dtypes the ONNX spec rules out,
 * UNSUPPORTED for those it allows but the device ops lack. */
static osp_error *binary_check_dtype(const onnx_node *node, osp_binary_nd_op op,
                                     osp_datatype dt) {
    if (op_is_logic(op)) {
        if (dt != OSP_TYPE_BOOL)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "%s takes BOOL inputs, not %s",
                                   node->op_type, dt_name(dt));
        return NULL;
    }
    if (op_is_bitshift(op)) {
        if (!onnx_ew__is_unsigned(dt))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "BitShift takes unsigned integer inputs, "
                                   "not %s",
                                   dt_name(dt));
        return NULL;
    }
    if (op == OSP_BINARY_ND_EQUAL && dt == OSP_TYPE_BOOL)
        return NULL;
    if (op == OSP_BINARY_ND_MOD &&
        (onnx_ew__is_float(dt) || onnx_ew__is_half(dt)))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "Mod of %s inputs needs attribute fmod = 1",
                               dt_name(dt));
    if (!onnx_ew__is_number(dt) && !onnx_ew__is_half(dt))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "%s of %s inputs is not supported",
                               node->op_type, dt_name(dt));
    return NULL;
}

/* Where a binary op's operands and result live: each operand whose dtype
 * is not the compute dtype is cast into a workspace slot first, and a
 * result computed in another dtype than the output's is cast back from
 * one. Offsets are NO_SLOT when unused. */
typedef struct binary_plan {
    osp_datatype compute;
    size_t a_off, b_off, out_off;
    size_t bytes;
} binary_plan;

static void binary_plan_make(osp_binary_nd_op op, const onnx_desc *a,
                             const onnx_desc *b, const onnx_desc *out,
                             binary_plan *p) {
    p->compute = op_is_logic(op) || op_is_bitshift(op)
                     ? a->dtype
                     : onnx_ew__compute_dtype(a->dtype);
    p->a_off = p->b_off = p->out_off = NO_SLOT;
    p->bytes = 0;
    if (a->dtype != p->compute) {
        p->a_off = p->bytes;
        p->bytes += onnx_ew__slot(onnx_shape_count(&a->shape), p->compute);
    }
    if (b->dtype != p->compute) {
        p->b_off = p->bytes;
        p->bytes += onnx_ew__slot(onnx_shape_count(&b->shape), p->compute);
    }
    if (out->dtype != p->compute && out->dtype != OSP_TYPE_BOOL) {
        p->out_off = p->bytes;
        p->bytes += onnx_ew__slot(onnx_shape_count(&out->shape), p->compute);
    }
}

static osp_error *binary_infer(onnx_infer_ctx *ctx) {
    const binary_state *st = ctx->state;
    osp_error *err = need_inputs(ctx->node, ctx->n_inputs, ctx->inputs, 2);
    if (err)
        return err;
    const onnx_desc *a = &ctx->inputs[0], *b = &ctx->inputs[1];
    if (st->op == OSP_BINARY_ND_POW) {
        /* Pow's exponent may have any numeric type: it is cast to the
         * base's. */
        if ((err = binary_check_dtype(ctx->node, st->op, a->dtype)) ||
            (err = binary_check_dtype(ctx->node, st->op, b->dtype)))
            return err;
    } else {
        if (a->dtype != b->dtype)
            return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                                   "inputs A (%s) and B (%s) must have the "
                                   "same dtype",
                                   dt_name(a->dtype), dt_name(b->dtype));
        if ((err = binary_check_dtype(ctx->node, st->op, a->dtype)))
            return err;
    }
    onnx_desc *out = &ctx->outputs[0];
    if ((err = onnx_broadcast_shape(ctx->node, &a->shape, &b->shape,
                                    &out->shape)))
        return err;
    if (st->op == OSP_BINARY_ND_PRELU &&
        !osp_shape_equal(&out->shape, &a->shape)) {
        char sa[128], sb[128];
        return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                               "slope %s does not broadcast to X %s",
                               osp_shape_format(&b->shape, sb, sizeof sb),
                               osp_shape_format(&a->shape, sa, sizeof sa));
    }
    out->dtype = op_is_comparison(st->op) ? OSP_TYPE_BOOL : a->dtype;
    if ((err = onnx_check_shape(ctx->node, &out->shape, out->dtype)))
        return err;
    binary_plan p;
    binary_plan_make(st->op, a, b, out, &p);
    ctx->workspace_bytes = p.bytes;
    return NULL;
}

static osp_error *binary_run(onnx_run_ctx *ctx) {
    const binary_state *st = ctx->state;
    const onnx_desc *a = &ctx->in_desc[0], *b = &ctx->in_desc[1];
    const onnx_desc *out = &ctx->out_desc[0];
    int64_t n_out = onnx_shape_count(&out->shape);
    if (n_out == 0)
        return NULL;
    binary_plan p;
    binary_plan_make(st->op, a, b, out, &p);
    osp_error *err = NULL;
    const void *pa = ctx->in[0], *pb = ctx->in[1];
    if (p.a_off != NO_SLOT) {
        void *dst = ws_at(ctx, p.a_off);
        err = osp_op_cast(ctx->stream, pa, a->dtype, dst, p.compute,
                          (size_t)onnx_shape_count(&a->shape));
        if (err)
            return err;
        pa = dst;
    }
    if (p.b_off != NO_SLOT) {
        void *dst = ws_at(ctx, p.b_off);
        err = osp_op_cast(ctx->stream, pb, b->dtype, dst, p.compute,
                          (size_t)onnx_shape_count(&b->shape));
        if (err)
            return err;
        pb = dst;
    }
    void *res = p.out_off != NO_SLOT ? ws_at(ctx, p.out_off) : ctx->out[0];
    err = ew_binary(ctx->stream, st->op, p.compute, &out->shape, pa, &a->shape,
                    pb, &b->shape, res);
    if (err || p.out_off == NO_SLOT)
        return err;
    return osp_op_cast(ctx->stream, res, p.compute, ctx->out[0], out->dtype,
                       (size_t)n_out);
}

/* ---- variadic ops: Max, Min, Sum, Mean -----------------------------------
 */

/* Step t of T (1-based) of the chain writes `final` when T - t is even and
 * the ping-pong slot otherwise, so that each step reads the other buffer
 * and the last writes `final`. final is the output, or (half types) an
 * FP32 slot cast to the output at the end, the inputs then cast one at a
 * time into c0 (input 0) and c1 (the others). Mean's last step multiplies
 * by the scalar slot, holding 1/N. */
typedef struct variadic_plan {
    osp_datatype compute;
    bool promote;
    size_t steps;
    size_t final_off, pong_off, c0_off, c1_off, scalar_off;
    size_t bytes;
} variadic_plan;

static void variadic_plan_make(const binary_state *st, size_t n_in,
                               const onnx_desc *in, const onnx_desc *out,
                               variadic_plan *p) {
    int64_t n_out = onnx_shape_count(&out->shape), max_in = 0;
    for (size_t i = 1; i < n_in; i++) {
        int64_t c = onnx_shape_count(&in[i].shape);
        max_in = c > max_in ? c : max_in;
    }
    p->compute = onnx_ew__compute_dtype(out->dtype);
    p->promote = p->compute != out->dtype;
    p->steps = n_in - 1 + (st->mean ? 1 : 0);
    p->final_off = p->pong_off = p->c0_off = p->c1_off = p->scalar_off =
        NO_SLOT;
    p->bytes = 0;
    if (p->steps >= 2) {
        p->pong_off = p->bytes;
        p->bytes += onnx_ew__slot(n_out, p->compute);
    }
    if (st->mean) {
        p->scalar_off = p->bytes;
        p->bytes += ONNX_WORKSPACE_ALIGN;
    }
    if (p->promote) {
        p->final_off = p->bytes;
        p->bytes += onnx_ew__slot(n_out, p->compute);
        p->c0_off = p->bytes;
        p->bytes += onnx_ew__slot(onnx_shape_count(&in[0].shape), p->compute);
        p->c1_off = p->bytes;
        p->bytes += onnx_ew__slot(max_in, p->compute);
    }
}

static osp_error *variadic_infer(onnx_infer_ctx *ctx) {
    const binary_state *st = ctx->state;
    osp_error *err;
    if (ctx->n_inputs < 1)
        return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                               "%s needs an input", ctx->node->op_type);
    if ((err =
             need_inputs(ctx->node, ctx->n_inputs, ctx->inputs, ctx->n_inputs)))
        return err;
    osp_datatype dt = ctx->inputs[0].dtype;
    osp_shape shape = ctx->inputs[0].shape;
    for (size_t i = 1; i < ctx->n_inputs; i++) {
        if (ctx->inputs[i].dtype != dt)
            return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                                   "inputs 0 (%s) and %zu (%s) must have the "
                                   "same dtype",
                                   dt_name(dt), i,
                                   dt_name(ctx->inputs[i].dtype));
        if ((err = onnx_broadcast_shape(ctx->node, &shape,
                                        &ctx->inputs[i].shape, &shape)))
            return err;
    }
    if (st->mean ? !onnx_ew__is_float(dt) && !onnx_ew__is_half(dt)
                 : !onnx_ew__is_number(dt) && !onnx_ew__is_half(dt))
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                               "%s of %s inputs is not supported",
                               ctx->node->op_type, dt_name(dt));
    onnx_desc *out = &ctx->outputs[0];
    out->dtype = dt;
    out->shape = shape;
    if ((err = onnx_check_shape(ctx->node, &out->shape, dt)))
        return err;
    variadic_plan p;
    variadic_plan_make(st, ctx->n_inputs, ctx->inputs, out, &p);
    ctx->workspace_bytes = p.bytes;
    return NULL;
}

/* Input i in the compute dtype: itself, or cast into workspace slot off. */
static osp_error *variadic_operand(onnx_run_ctx *ctx, const variadic_plan *p,
                                   size_t i, size_t off, const void **out) {
    const onnx_desc *d = &ctx->in_desc[i];
    if (!p->promote) {
        *out = ctx->in[i];
        return NULL;
    }
    void *dst = ws_at(ctx, off);
    osp_error *err =
        osp_op_cast(ctx->stream, ctx->in[i], d->dtype, dst, p->compute,
                    (size_t)onnx_shape_count(&d->shape));
    if (err)
        return err;
    *out = dst;
    return NULL;
}

static osp_error *variadic_run(onnx_run_ctx *ctx) {
    const binary_state *st = ctx->state;
    const onnx_desc *out = &ctx->out_desc[0];
    int64_t n_out = onnx_shape_count(&out->shape);
    if (n_out == 0)
        return NULL;
    variadic_plan p;
    variadic_plan_make(st, ctx->n_inputs, ctx->in_desc, out, &p);
    osp_error *err = NULL;
    if (p.steps == 0) /* Max, Min or Sum of one input */
        return onnx_copy_bytes(ctx->stream, ctx->out[0], ctx->in[0],
                               (size_t)n_out *
                                   osp_datatype_byte_size(out->dtype));
    if (st->mean && (err = fill_scalar(ctx, p.scalar_off, p.compute,
                                       1.0 / (double)ctx->n_inputs)))
        return err;
    void *final = p.promote ? ws_at(ctx, p.final_off) : ctx->out[0];
    const void *prev;
    const osp_shape *prev_shape = &ctx->in_desc[0].shape;
    static const osp_shape scalar_shape = {0, {0}};
    if ((err = variadic_operand(ctx, &p, 0, p.c0_off, &prev)))
        return err;
    for (size_t t = 1; t <= p.steps; t++) {
        void *dst = (p.steps - t) % 2 == 0 ? final : ws_at(ctx, p.pong_off);
        const void *operand;
        const osp_shape *operand_shape;
        osp_binary_nd_op op = st->op;
        if (t < ctx->n_inputs) {
            if ((err = variadic_operand(ctx, &p, t, p.c1_off, &operand)))
                return err;
            operand_shape = &ctx->in_desc[t].shape;
        } else { /* Mean's division */
            operand = ws_at(ctx, p.scalar_off);
            operand_shape = &scalar_shape;
            op = OSP_BINARY_ND_MUL;
        }
        if ((err = ew_binary(ctx->stream, op, p.compute, &out->shape, prev,
                             prev_shape, operand, operand_shape, dst)))
            return err;
        prev = dst;
        prev_shape = &out->shape;
    }
    if (!p.promote)
        return NULL;
    return osp_op_cast(ctx->stream, final, p.compute, ctx->out[0], out->dtype,
                       (size_t)n_out);
}

/* ---- Clip ----------------------------------------------------------------
 */

/* One bound of Clip: absent, a value known while planning, or only a
 * device tensor (input 1 or 2). */
typedef struct clip_bound {
    bool present;
    bool known;
    double value;
} clip_bound;

/* How Clip runs: one unary CLIP (FP32 or a signed integer whose bounds are
 * exact in FP32; half types through an FP32 slot), or binary_nd MAX then
 * MIN against the bounds, a bound that is no input (opset < 11
 * attributes) filled into a scalar slot, and the MAX result kept in a slot
 * when a MIN follows. */
typedef struct clip_plan {
    clip_bound lo, hi;
    bool unary;
    osp_datatype compute;
    size_t x32_off;        /* unary on a half type */
    size_t lo_off, hi_off; /* scalar slots for attribute bounds */
    size_t mid_off;        /* MAX result before the MIN */
    size_t bytes;
} clip_plan;

static bool exact_in_float(double v) {
    return isinf(v) || (double)(float)v == v;
}

static osp_error *clip_read_bound(const onnx_node *node, size_t n_in,
                                  const onnx_desc *in, size_t i,
                                  clip_bound *b) {
    b->present = onnx_present(n_in, in, i);
    b->known = false;
    if (!b->present)
        return NULL;
    if (in[i].dtype != in[0].dtype)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu (%s) must have the dtype of input "
                               "(%s)",
                               i, dt_name(in[i].dtype), dt_name(in[0].dtype));
    if (onnx_shape_count(&in[i].shape) != 1)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu must be a scalar", i);
    if (!in[i].host)
        return NULL;
    b->known = true;
    return onnx_read_scalar(node, i, &in[i], &b->value);
}

static osp_error *clip_plan_make(const onnx_node *node, size_t n_in,
                                 const onnx_desc *in, clip_plan *p) {
    osp_error *err;
    osp_datatype dt = in[0].dtype;
    memset(p, 0, sizeof *p);
    p->x32_off = p->lo_off = p->hi_off = p->mid_off = NO_SLOT;
    p->compute = onnx_ew__compute_dtype(dt);
    if (node->opset < 11) {
        float lo, hi;
        if ((err = onnx_attr_float(node, "min", -FLT_MAX, &lo)) ||
            (err = onnx_attr_float(node, "max", FLT_MAX, &hi)))
            return err;
        p->lo = (clip_bound){true, true, lo};
        p->hi = (clip_bound){true, true, hi};
    } else if ((err = clip_read_bound(node, n_in, in, 1, &p->lo)) ||
               (err = clip_read_bound(node, n_in, in, 2, &p->hi))) {
        return err;
    }
    if (!onnx_ew__is_number(dt) && !onnx_ew__is_half(dt))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "Clip of %s is not supported", dt_name(dt));
    int64_t n = onnx_shape_count(&in[0].shape);
    bool known =
        (!p->lo.present || p->lo.known) && (!p->hi.present || p->hi.known);
    bool exact = (!p->lo.present || exact_in_float(p->lo.value)) &&
                 (!p->hi.present || exact_in_float(p->hi.value));
    if (onnx_ew__is_half(dt)) {
        /* Half bounds are exact in FP32; an unknown one would need its own
         * cast, which no model seen so far asks for. */
        if (!p->lo.known && p->lo.present)
            return onnx_error_needs_values(node, 1);
        if (!p->hi.known && p->hi.present)
            return onnx_error_needs_values(node, 2);
        p->unary = true;
        p->x32_off = 0;
        p->bytes = onnx_ew__slot(n, OSP_TYPE_FP32);
        return NULL;
    }
    if (known && (dt == OSP_TYPE_FP32 || (onnx_ew__is_signed(dt) && exact))) {
        p->unary = true;
        return NULL;
    }
    /* binary_nd against device scalars; attribute bounds need a slot */
    if (p->lo.present && node->opset < 11) {
        p->lo_off = p->bytes;
        p->bytes += ONNX_WORKSPACE_ALIGN;
    }
    if (p->hi.present && node->opset < 11) {
        p->hi_off = p->bytes;
        p->bytes += ONNX_WORKSPACE_ALIGN;
    }
    if (p->lo.present && p->hi.present) {
        p->mid_off = p->bytes;
        p->bytes += onnx_ew__slot(n, dt);
    }
    return NULL;
}

static osp_error *clip_infer(onnx_infer_ctx *ctx) {
    osp_error *err = need_inputs(ctx->node, ctx->n_inputs, ctx->inputs, 1);
    if (err)
        return err;
    clip_plan p;
    if ((err = clip_plan_make(ctx->node, ctx->n_inputs, ctx->inputs, &p)))
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = ctx->inputs[0].shape;
    ctx->workspace_bytes = p.bytes;
    return NULL;
}

static osp_error *clip_run(onnx_run_ctx *ctx) {
    const onnx_desc *x = &ctx->in_desc[0];
    int64_t n = onnx_shape_count(&x->shape);
    if (n == 0)
        return NULL;
    clip_plan p;
    osp_error *err = clip_plan_make(ctx->node, ctx->n_inputs, ctx->in_desc, &p);
    if (err)
        return err;
    if (p.unary) {
        osp_unary_args u;
        memset(&u, 0, sizeof u);
        u.op = OSP_UNARY_CLIP;
        u.dtype = p.compute;
        u.x = ctx->in[0];
        u.y = ctx->out[0];
        u.n = (size_t)n;
        u.alpha = p.lo.present ? (float)p.lo.value : -INFINITY;
        u.beta = p.hi.present ? (float)p.hi.value : INFINITY;
        if (p.x32_off != NO_SLOT) {
            void *x32 = ws_at(ctx, p.x32_off);
            if ((err = osp_op_cast(ctx->stream, ctx->in[0], x->dtype, x32,
                                   OSP_TYPE_FP32, (size_t)n)))
                return err;
            u.x = u.y = x32;
        }
        if ((err = osp_op_unary(ctx->stream, &u)))
            return err;
        if (p.x32_off == NO_SLOT)
            return NULL;
        return osp_op_cast(ctx->stream, u.y, OSP_TYPE_FP32, ctx->out[0],
                           x->dtype, (size_t)n);
    }
    if (!p.lo.present && !p.hi.present)
        return onnx_copy_bytes(ctx->stream, ctx->out[0], ctx->in[0],
                               (size_t)n * osp_datatype_byte_size(x->dtype));
    static const osp_shape scalar_shape = {0, {0}};
    const void *lo = ctx->n_inputs > 1 ? ctx->in[1] : NULL;
    const void *hi = ctx->n_inputs > 2 ? ctx->in[2] : NULL;
    if (p.lo_off != NO_SLOT) {
        if ((err = fill_scalar(ctx, p.lo_off, x->dtype, p.lo.value)))
            return err;
        lo = ws_at(ctx, p.lo_off);
    }
    if (p.hi_off != NO_SLOT) {
        if ((err = fill_scalar(ctx, p.hi_off, x->dtype, p.hi.value)))
            return err;
        hi = ws_at(ctx, p.hi_off);
    }
    const void *src = ctx->in[0];
    if (p.lo.present) {
        void *dst = p.hi.present ? ws_at(ctx, p.mid_off) : ctx->out[0];
        if ((err =
                 ew_binary(ctx->stream, OSP_BINARY_ND_MAX, x->dtype, &x->shape,
                           src, &x->shape, lo, &scalar_shape, dst)))
            return err;
        src = dst;
    }
    if (!p.hi.present)
        return NULL;
    return ew_binary(ctx->stream, OSP_BINARY_ND_MIN, x->dtype, &x->shape, src,
                     &x->shape, hi, &scalar_shape, ctx->out[0]);
}

/* ---- Where ---------------------------------------------------------------
 */

static osp_error *where_infer(onnx_infer_ctx *ctx) {
    osp_error *err = need_inputs(ctx->node, ctx->n_inputs, ctx->inputs, 3);
    if (err)
        return err;
    const onnx_desc *c = &ctx->inputs[0], *x = &ctx->inputs[1],
                    *y = &ctx->inputs[2];
    if (c->dtype != OSP_TYPE_BOOL)
        return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                               "condition must be BOOL, not %s",
                               dt_name(c->dtype));
    if (x->dtype != y->dtype)
        return onnx_node_error(ctx->node, OSP_ERROR_INVALID_ARG,
                               "inputs X (%s) and Y (%s) must have the same "
                               "dtype",
                               dt_name(x->dtype), dt_name(y->dtype));
    size_t es = onnx_elem_bytes(x->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8 && es != 16)
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                               "Where of %s is not supported",
                               dt_name(x->dtype));
    onnx_desc *out = &ctx->outputs[0];
    if ((err = onnx_broadcast_shape(ctx->node, &c->shape, &x->shape,
                                    &out->shape)) ||
        (err = onnx_broadcast_shape(ctx->node, &out->shape, &y->shape,
                                    &out->shape)))
        return err;
    out->dtype = x->dtype;
    return onnx_check_shape(ctx->node, &out->shape, out->dtype);
}

/* Where of STRING X and Y: the device's where moves elements of at most 8
 * bytes, so each 16-byte onnx_string is taken as two 8-byte halves, an
 * innermost axis of 2 that X, Y and the output walk (stride 1, their
 * other strides doubled) and the condition broadcasts over (stride 0).
 * The output borrows the chosen strings' bytes. */
static osp_error *where_split_halves(const onnx_node *node, osp_where_args *w) {
    if (w->rank >= OSP_MAX_DIMS)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "Where of STRING tensors of rank %d after "
                               "merging dims (the limit is %d)",
                               w->rank, OSP_MAX_DIMS - 1);
    for (int d = 0; d < w->rank; d++) {
        w->x_strides[d] *= 2;
        w->y_strides[d] *= 2;
    }
    w->dims[w->rank] = 2;
    w->cond_strides[w->rank] = 0;
    w->x_strides[w->rank] = 1;
    w->y_strides[w->rank] = 1;
    w->rank++;
    w->elem_size = ONNX_STRING_BYTES / 2;
    return NULL;
}

static osp_error *where_run(onnx_run_ctx *ctx) {
    const onnx_desc *out = &ctx->out_desc[0];
    if (onnx_shape_count(&out->shape) == 0)
        return NULL;
    osp_where_args w;
    memset(&w, 0, sizeof w);
    w.elem_size = onnx_elem_bytes(out->dtype);
    w.cond = ctx->in[0];
    w.x = ctx->in[1];
    w.y = ctx->in[2];
    w.out = ctx->out[0];
    memcpy(w.dims, out->shape.dims, sizeof w.dims);
    onnx_broadcast_strides(&ctx->in_desc[0].shape, &out->shape, w.cond_strides);
    onnx_broadcast_strides(&ctx->in_desc[1].shape, &out->shape, w.x_strides);
    onnx_broadcast_strides(&ctx->in_desc[2].shape, &out->shape, w.y_strides);
    int64_t *const strides[3] = {w.cond_strides, w.x_strides, w.y_strides};
    w.rank = ew_coalesce(out->shape.rank, w.dims, 3, strides);
    if (out->dtype == OSP_TYPE_BYTES) {
        osp_error *err = where_split_halves(ctx->node, &w);
        if (err)
            return err;
    }
    return osp_op_where(ctx->stream, &w);
}

/* ---- Cast, CastLike ------------------------------------------------------
 */

typedef struct cast_state {
    osp_datatype to;
} cast_state;

static osp_error *cast_prepare(const onnx_node *node, void **state) {
    const onnx_attr *a = onnx_node_attr(node, "to");
    if (!a)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'to' is required");
    int64_t to;
    osp_error *err = onnx_attr_int(node, "to", 0, &to);
    if (err)
        return err;
    osp_datatype dt = onnx_proto_dtype(to);
    if (dt == OSP_TYPE_INVALID)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "attribute 'to' = %lld (%s) is not supported",
                               (long long)to, onnx_proto_dtype_name(to));
    cast_state *st = malloc(sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    st->to = dt;
    *state = st;
    return NULL;
}

static bool castable(osp_datatype dt) {
    return dt != OSP_TYPE_BYTES && osp_datatype_byte_size(dt) > 0;
}

static osp_error *cast_set_output(onnx_infer_ctx *ctx, osp_datatype to) {
    const onnx_desc *x = &ctx->inputs[0];
    if (x->dtype == OSP_TYPE_BYTES || to == OSP_TYPE_BYTES) {
        if (!onnx_strings_castable(x->dtype, to))
            return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                                   "casting from %s to %s is not supported",
                                   dt_name(x->dtype), dt_name(to));
        ctx->outputs[0].dtype = to;
        ctx->outputs[0].shape = x->shape;
        return onnx_check_shape(ctx->node, &x->shape, to);
    }
    if (!castable(x->dtype))
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                               "casting from %s is not supported",
                               dt_name(x->dtype));
    if (!castable(to))
        return onnx_node_error(ctx->node, OSP_ERROR_UNSUPPORTED,
                               "casting to %s is not supported", dt_name(to));
    ctx->outputs[0].dtype = to;
    ctx->outputs[0].shape = x->shape;
    return onnx_check_shape(ctx->node, &x->shape, to);
}

static osp_error *cast_infer(onnx_infer_ctx *ctx) {
    const cast_state *st = ctx->state;
    osp_error *err = need_inputs(ctx->node, ctx->n_inputs, ctx->inputs, 1);
    if (err)
        return err;
    return cast_set_output(ctx, st->to);
}

static osp_error *castlike_infer(onnx_infer_ctx *ctx) {
    osp_error *err = need_inputs(ctx->node, ctx->n_inputs, ctx->inputs, 2);
    if (err)
        return err;
    return cast_set_output(ctx, ctx->inputs[1].dtype);
}

/* Cast and CastLike: the output's dtype is the target. */
static osp_error *cast_run(onnx_run_ctx *ctx) {
    const onnx_desc *x = &ctx->in_desc[0], *y = &ctx->out_desc[0];
    int64_t n = onnx_shape_count(&x->shape);
    if (x->dtype == OSP_TYPE_BYTES || y->dtype == OSP_TYPE_BYTES)
        return onnx_strings_cast_run(ctx);
    if (n == 0)
        return NULL;
    if (x->dtype == y->dtype)
        return onnx_copy_bytes(ctx->stream, ctx->out[0], ctx->in[0],
                               (size_t)n * osp_datatype_byte_size(x->dtype));
    return osp_op_cast(ctx->stream, ctx->in[0], x->dtype, ctx->out[0], y->dtype,
                       (size_t)n);
}

/* ---- Equal ----------------------------------------------------------------
 * A binary op, but also of two STRING tensors (onnx_ops_strings.c). */

static bool has_string_input(size_t n, const onnx_desc *d) {
    return (n > 0 && d[0].present && d[0].dtype == OSP_TYPE_BYTES) ||
           (n > 1 && d[1].present && d[1].dtype == OSP_TYPE_BYTES);
}

static osp_error *equal_infer(onnx_infer_ctx *ctx) {
    if (!has_string_input(ctx->n_inputs, ctx->inputs))
        return binary_infer(ctx);
    osp_error *err = need_inputs(ctx->node, ctx->n_inputs, ctx->inputs, 2);
    return err ? err : onnx_strings_equal_infer(ctx);
}

static osp_error *equal_run(onnx_run_ctx *ctx) {
    return has_string_input(ctx->n_inputs, ctx->in_desc)
               ? onnx_strings_equal_run(ctx)
               : binary_run(ctx);
}

/* ---- the table -----------------------------------------------------------
 */

#define USES(...)                                                              \
    { __VA_ARGS__, OSP_OP_KIND_COUNT_ }

#define BINARY(name, from)                                                     \
    {                                                                          \
        .op_type = name, .domain = "", .since = from,                          \
        .prepare = binary_prepare, .free = free, .infer = binary_infer,        \
        .run = binary_run, .uses = USES(OSP_OP_BINARY_ND, OSP_OP_CAST)         \
    }

#define VARIADIC(name)                                                         \
    {                                                                          \
        .op_type = name, .domain = "", .since = 7, .prepare = binary_prepare,  \
        .free = free, .infer = variadic_infer, .run = variadic_run,            \
        .uses = USES(OSP_OP_BINARY_ND, OSP_OP_FILL, OSP_OP_CAST)               \
    }

/* The unary ops of onnx_ops_activation.c. */
#define UNARY(name, from)                                                      \
    {                                                                          \
        .op_type = name, .domain = "", .since = from,                          \
        .prepare = onnx_ew__unary_prepare, .free = free,                       \
        .infer = onnx_ew__unary_infer, .run = onnx_ew__unary_run,              \
        .uses = USES(OSP_OP_UNARY, OSP_OP_CAST)                                \
    }

/* `since` is the first opset of each op, at least 7: opsets 7 and later
 * broadcast as numpy, which every entry implements, and no op here changed
 * meaning after (later versions added dtypes, or turned Clip's attributes
 * into inputs, which clip_plan_make reads by opset). Mish (18) and Gelu
 * (20) are past the opsets the runtime aims at, and cheap to serve. */
static const onnx_op elementwise_ops[] = {
    BINARY("Add", 7),
    BINARY("Sub", 7),
    BINARY("Mul", 7),
    BINARY("Div", 7),
    BINARY("Pow", 7),
    BINARY("Mod", 10),
    BINARY("PRelu", 7),
    {.op_type = "Equal",
     .domain = "",
     .since = 7,
     .prepare = binary_prepare,
     .free = free,
     .infer = equal_infer,
     .run = equal_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_BINARY_ND, OSP_OP_CAST)},
    BINARY("Less", 7),
    BINARY("LessOrEqual", 12),
    BINARY("Greater", 7),
    BINARY("GreaterOrEqual", 12),
    BINARY("And", 7),
    BINARY("Or", 7),
    BINARY("Xor", 7),
    BINARY("BitShift", 11),
    VARIADIC("Max"),
    VARIADIC("Min"),
    VARIADIC("Sum"),
    VARIADIC("Mean"),
    {.op_type = "Clip",
     .domain = "",
     .since = 7,
     .infer = clip_infer,
     .run = clip_run,
     .uses = USES(OSP_OP_UNARY, OSP_OP_BINARY_ND, OSP_OP_FILL, OSP_OP_CAST)},
    {.op_type = "Where",
     .domain = "",
     .since = 9,
     .infer = where_infer,
     .run = where_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_WHERE)},
    {.op_type = "Cast",
     .domain = "",
     .since = 7,
     .prepare = cast_prepare,
     .free = free,
     .infer = cast_infer,
     .run = cast_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_CAST)},
    {.op_type = "CastLike",
     .domain = "",
     .since = 15,
     .infer = castlike_infer,
     .run = cast_run,
     .takes_strings = true,
     .uses = USES(OSP_OP_CAST)},
    UNARY("Abs", 7),
    UNARY("Neg", 7),
    UNARY("Sign", 9),
    UNARY("Not", 7),
    UNARY("Relu", 7),
    UNARY("Exp", 7),
    UNARY("Log", 7),
    UNARY("Sqrt", 7),
    UNARY("Reciprocal", 7),
    UNARY("Floor", 7),
    UNARY("Ceil", 7),
    UNARY("Round", 11),
    UNARY("Sigmoid", 7),
    UNARY("Tanh", 7),
    UNARY("Erf", 9),
    UNARY("Softplus", 7),
    UNARY("Softsign", 7),
    UNARY("Elu", 7),
    UNARY("Celu", 12),
    UNARY("Selu", 7),
    UNARY("LeakyRelu", 7),
    UNARY("ThresholdedRelu", 10),
    UNARY("HardSigmoid", 7),
    UNARY("HardSwish", 14),
    UNARY("Mish", 18),
    UNARY("Sin", 7),
    UNARY("Cos", 7),
    UNARY("Tan", 7),
    UNARY("Asin", 7),
    UNARY("Acos", 7),
    UNARY("Atan", 7),
    UNARY("Sinh", 9),
    UNARY("Cosh", 9),
    UNARY("Asinh", 9),
    UNARY("Acosh", 9),
    UNARY("Atanh", 9),
    UNARY("IsNaN", 9),
    UNARY("IsInf", 10),
    UNARY("Gelu", 20),
};

const onnx_op_family onnx_ops_elementwise_family = {
    elementwise_ops, sizeof elementwise_ops / sizeof elementwise_ops[0]};
