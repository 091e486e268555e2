/*
 * Matrix products: MatMul and Gemm, and the fused forms the lead's passes
 * make (domain "osprey": FusedMatMul = MatMul + bias [N] + residual +
 * activation, FusedGemm = Gemm + activation). Everything ends in
 * osp_op_gemm_ex; a batch that one (count, stride) pair per operand
 * cannot describe is split into an outer loop of gemm_ex calls, and the
 * 2-D-weight case ([..., M, K] x [K, N], BERT's projections) folds its
 * batch into M so that it is a single plain GEMM.
 *
 * Precision fp16 (ctx->fp16, FP32 tensors on a GPU): A and B are
 * multiplied as FP16 with FP32 accumulation straight into the FP32
 * output (gemm_ex's c_dtype), epilogues included: a constant operand
 * comes from the session's FP16 copy (converted once per device), any
 * other is cast into the workspace. A constant the session does not
 * hold in FP16 (a value computed per plan) keeps the product FP32.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_math.h"
#include "onnx_packed.h"

/* ---- batches of GEMMs --------------------------------------------------- */

/* How a batch of GEMMs is enqueued: `count` matrices per gemm_ex call
 * with one stride per operand (elements), repeated over the outer
 * `loop_dims` whose strides no single stride can express (a broadcast in
 * an outer dim under a real inner one). */
typedef struct mm_batches {
    int64_t count, stride_a, stride_b, stride_c;
    int n_loop;
    int64_t loop_dims[OSP_MAX_DIMS];
    int64_t loop_sa[OSP_MAX_DIMS], loop_sb[OSP_MAX_DIMS], loop_sc[OSP_MAX_DIMS];
} mm_batches;

/* Splits batch dims (rank of them, each with the element strides of A, B
 * and C, 0 where an operand broadcasts) into the innermost run that one
 * gemm_ex call covers and outer dims looped over. Dims of 1 are dropped
 * first: they never need a stride. */
static void mm_split_batches(int rank, const int64_t *dims, const int64_t *sa,
                             const int64_t *sb, const int64_t *sc,
                             mm_batches *out) {
    int64_t d[OSP_MAX_DIMS], a[OSP_MAX_DIMS], b[OSP_MAX_DIMS], c[OSP_MAX_DIMS];
    int n = 0;
    memset(out, 0, sizeof *out);
    out->count = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1)
            continue;
        d[n] = dims[i];
        a[n] = sa[i];
        b[n] = sb[i];
        c[n] = sc[i];
        n++;
    }
    if (n == 0)
        return;
    int i = n - 1;
    int64_t count = d[i];
    for (i = n - 2; i >= 0; i--) {
        if (a[i] != a[n - 1] * count || b[i] != b[n - 1] * count ||
            c[i] != c[n - 1] * count)
            break;
        count *= d[i];
    }
    out->count = count;
    out->stride_a = a[n - 1];
    out->stride_b = b[n - 1];
    out->stride_c = c[n - 1];
    out->n_loop = i + 1;
    for (int j = 0; j <= i; j++) {
        out->loop_dims[j] = d[j];
        out->loop_sa[j] = a[j];
        out->loop_sb[j] = b[j];
        out->loop_sc[j] = c[j];
    }
}

/* Enqueues `base` (its pointers at batch element 0; residual, when set,
 * laid out as C) once per index of the outer loop of `bt`, with bt's
 * count and strides. elem_size is A's and B's, c_size C's; the residual
 * is FP32. */
static osp_error *mm_run_batches(osp_stream *stream,
                                 const osp_gemm_ex_args *base,
                                 const mm_batches *bt, size_t elem_size,
                                 size_t c_size) {
    osp_gemm_ex_args x = *base;
    x.batch_count = bt->count;
    x.stride_a = bt->stride_a;
    x.stride_b = bt->stride_b;
    x.stride_c = bt->stride_c;
    if (bt->n_loop == 0)
        return osp_op_gemm_ex(stream, &x);
    int64_t idx[OSP_MAX_DIMS] = {0};
    for (;;) {
        int64_t oa = 0, ob = 0, oc = 0;
        for (int d = 0; d < bt->n_loop; d++) {
            oa += idx[d] * bt->loop_sa[d];
            ob += idx[d] * bt->loop_sb[d];
            oc += idx[d] * bt->loop_sc[d];
        }
        x.gemm.a = (const char *)base->gemm.a + (size_t)oa * elem_size;
        x.gemm.b = (const char *)base->gemm.b + (size_t)ob * elem_size;
        x.gemm.c = (char *)base->gemm.c + (size_t)oc * c_size;
        if (base->residual)
            x.residual = base->residual + oc;
        osp_error *err = osp_op_gemm_ex(stream, &x);
        if (err)
            return err;
        int d = bt->n_loop - 1;
        while (d >= 0 && ++idx[d] == bt->loop_dims[d])
            idx[d--] = 0;
        if (d < 0)
            return NULL;
    }
}

static int64_t at_least_1(int64_t v) {
    return v > 1 ? v : 1;
}

/* ---- MatMul, FusedMatMul ------------------------------------------------ */

typedef struct matmul_state {
    bool fused;
    osp_unary_op act;
    float act_alpha, act_beta;
    onnx_packed pack; /* a constant 2-D B, packed on the first run */
} matmul_state;

static osp_error *gemm_prepack(osp_stream *stream, const void *args,
                               osp_packed_weights **out) {
    return osp_op_gemm_prepack(stream, args, out);
}

/* x->packed_b: B packed once when it is a constant (its values known
 * while planning) of FP32 and the product has a k. */
static osp_error *use_packed_b(onnx_packed *pk, osp_stream *stream,
                               const onnx_desc *b, osp_gemm_ex_args *x) {
    if (b->host == NULL || x->gemm.dtype != OSP_TYPE_FP32 || x->gemm.k == 0)
        return NULL;
    return onnx_packed_get(pk, stream, x->gemm.b, gemm_prepack, x,
                           &x->packed_b);
}

/* MatMul's numpy geometry: 1-D operands promoted (A [K] -> [1, K], B [K]
 * -> [K, 1], the added dim dropped from the output), batch dims
 * broadcast. */
typedef struct mm_geom {
    osp_shape out;
    int64_t m, n, k;
    mm_batches batches;
} mm_geom;

static osp_error *mm_geometry(const onnx_node *node, const osp_shape *a,
                              const osp_shape *b, mm_geom *g) {
    char sa[256], sb[256];
    int ra = a->rank, rb = b->rank;
    if (ra < 1 || rb < 1)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "inputs must have rank 1 or more, got %s "
                               "and %s",
                               osp_shape_format(a, sa, sizeof sa),
                               osp_shape_format(b, sb, sizeof sb));
    int64_t m = ra >= 2 ? a->dims[ra - 2] : 1;
    int64_t ka = a->dims[ra - 1];
    int64_t kb = rb >= 2 ? b->dims[rb - 2] : b->dims[0];
    int64_t n = rb >= 2 ? b->dims[rb - 1] : 1;
    if (ka != kb)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "shapes %s and %s cannot be multiplied "
                               "(inner dimensions %lld and %lld)",
                               osp_shape_format(a, sa, sizeof sa),
                               osp_shape_format(b, sb, sizeof sb),
                               (long long)ka, (long long)kb);
    osp_shape ab = {0}, bb = {0}, ob;
    ab.rank = ra > 2 ? ra - 2 : 0;
    bb.rank = rb > 2 ? rb - 2 : 0;
    memcpy(ab.dims, a->dims, (size_t)ab.rank * sizeof(int64_t));
    memcpy(bb.dims, b->dims, (size_t)bb.rank * sizeof(int64_t));
    osp_error *err = onnx_broadcast_shape(node, &ab, &bb, &ob);
    if (err)
        return err;
    g->out = ob;
    if (ra >= 2)
        g->out.dims[g->out.rank++] = m;
    if (rb >= 2)
        g->out.dims[g->out.rank++] = n;
    g->m = m;
    g->n = n;
    g->k = ka;

    int64_t s_a[OSP_MAX_DIMS], s_b[OSP_MAX_DIMS], s_c[OSP_MAX_DIMS];
    onnx_broadcast_strides(&ab, &ob, s_a);
    onnx_broadcast_strides(&bb, &ob, s_b);
    onnx_contiguous_strides(&ob, s_c);
    for (int i = 0; i < ob.rank; i++) {
        s_a[i] *= m * ka;
        s_b[i] *= ka * n;
        s_c[i] *= m * n;
    }
    mm_split_batches(ob.rank, ob.dims, s_a, s_b, s_c, &g->batches);
    /* B shared by every batch element and A's rows contiguous across the
     * batch: one GEMM of batch * M rows. */
    mm_batches *bt = &g->batches;
    if (bt->n_loop == 0 && bt->count > 1 && bt->stride_b == 0 &&
        bt->stride_a == m * ka && bt->stride_c == m * n) {
        g->m = m * bt->count;
        bt->count = 1;
        bt->stride_a = bt->stride_b = bt->stride_c = 0;
    }
    return NULL;
}

osp_error *onnx_math__matmul_prepare(const onnx_node *node, void **state) {
    matmul_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = onnx_packed_init(&st->pack);
    if (err) {
        free(st);
        return err;
    }
    st->act = OSP_UNARY_IDENTITY;
    if (strcmp(node->op_type, "FusedMatMul") == 0) {
        st->fused = true;
        err = onnx_fused_activation(node, &st->act, &st->act_alpha,
                                    &st->act_beta);
        if (err) {
            onnx_math__matmul_free(st);
            return err;
        }
    }
    *state = st;
    return NULL;
}

void onnx_math__matmul_free(void *state) {
    matmul_state *st = state;
    if (st == NULL)
        return;
    onnx_packed_destroy(&st->pack);
    free(st);
}

/* ---- FP16 operands (precision fp16) ------------------------------------ */

/* The workspace of a product's FP16 operands (the FP32 path uses none):
 * A's cast, then B's unless B is a constant (the session holds those in
 * FP16). */
typedef struct fp16_operands {
    size_t off_a, off_b, end;
} fp16_operands;

static fp16_operands fp16_layout(const onnx_desc *a, const onnx_desc *b) {
    fp16_operands o;
    o.off_a = 0;
    o.off_b = onnx_align64((size_t)onnx_shape_count(&a->shape) * 2);
    o.end =
        o.off_b +
        (b->host ? 0 : onnx_align64((size_t)onnx_shape_count(&b->shape) * 2));
    return o;
}

/* Whether run multiplies in FP16: the device does (ctx->fp16), the
 * tensors are FP32, there is a k to sum over, and B is either an
 * activation (cast in the workspace) or a constant with an FP16 copy. */
static bool fp16_product(const onnx_run_ctx *ctx, int64_t k) {
    const onnx_desc *a = &ctx->in_desc[0], *b = &ctx->in_desc[1];
    return ctx->fp16 && a->dtype == OSP_TYPE_FP32 && k > 0 &&
           (b->host == NULL || (ctx->in_fp16 && ctx->in_fp16[1]));
}

/* Points x's A and B at FP16 forms of inputs 0 and 1 (cast into the
 * workspace at o, or the session's copy of a constant B) and makes x an
 * FP16 product into its FP32 C. */
static osp_error *fp16_operands_of(onnx_run_ctx *ctx, const fp16_operands *o,
                                   osp_gemm_ex_args *x) {
    char *ws = ctx->workspace;
    const onnx_desc *a = &ctx->in_desc[0], *b = &ctx->in_desc[1];
    osp_error *err =
        osp_op_cast(ctx->stream, ctx->in[0], OSP_TYPE_FP32, ws + o->off_a,
                    OSP_TYPE_FP16, (size_t)onnx_shape_count(&a->shape));
    x->gemm.a = ws + o->off_a;
    if (!err && b->host == NULL) {
        err = osp_op_cast(ctx->stream, ctx->in[1], OSP_TYPE_FP32, ws + o->off_b,
                          OSP_TYPE_FP16, (size_t)onnx_shape_count(&b->shape));
        x->gemm.b = ws + o->off_b;
    } else {
        x->gemm.b = ctx->in_fp16[1];
    }
    x->gemm.dtype = OSP_TYPE_FP16;
    x->gemm.c_dtype = OSP_TYPE_FP32;
    x->gemm.allow_tf32 = false;
    x->packed_b = NULL;
    return err;
}

osp_error *onnx_math__matmul_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    const matmul_state *st = ctx->state;
    if (!onnx_present(ctx->n_inputs, ctx->inputs, 0) ||
        !onnx_present(ctx->n_inputs, ctx->inputs, 1))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "inputs A and B are required");
    const onnx_desc *a = &ctx->inputs[0], *b = &ctx->inputs[1];
    if (a->dtype != b->dtype)
        return onnx_node_error(
            node, OSP_ERROR_INVALID_ARG, "A is %s but B is %s",
            osp_datatype_wire_name(a->dtype), osp_datatype_wire_name(b->dtype));
    bool fused_extras =
        st->fused && (onnx_present(ctx->n_inputs, ctx->inputs, 2) ||
                      onnx_present(ctx->n_inputs, ctx->inputs, 3) ||
                      st->act != OSP_UNARY_IDENTITY);
    if (a->dtype != OSP_TYPE_FP32 &&
        (a->dtype != OSP_TYPE_FP16 || fused_extras))
        return onnx_node_error(
            node, OSP_ERROR_UNSUPPORTED, "dtype %s is not supported (FP32%s)",
            osp_datatype_wire_name(a->dtype), fused_extras ? "" : " or FP16");
    mm_geom g;
    osp_error *err = mm_geometry(node, &a->shape, &b->shape, &g);
    if (err)
        return err;
    if ((err = onnx_check_shape(node, &g.out, a->dtype)) != NULL)
        return err;
    if (st->fused && onnx_present(ctx->n_inputs, ctx->inputs, 2)) {
        const onnx_desc *bias = &ctx->inputs[2];
        char s[256];
        if (bias->dtype != OSP_TYPE_FP32 ||
            onnx_shape_count(&bias->shape) != g.n ||
            (bias->shape.rank > 0 &&
             bias->shape.dims[bias->shape.rank - 1] != g.n))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "bias is %s %s, expected FP32 [%lld]",
                                   osp_datatype_wire_name(bias->dtype),
                                   osp_shape_format(&bias->shape, s, sizeof s),
                                   (long long)g.n);
    }
    if (st->fused && onnx_present(ctx->n_inputs, ctx->inputs, 3)) {
        const onnx_desc *res = &ctx->inputs[3];
        char s[256], o[256];
        if (res->dtype != OSP_TYPE_FP32 ||
            !osp_shape_equal(&res->shape, &g.out))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "residual is %s %s, expected FP32 %s",
                                   osp_datatype_wire_name(res->dtype),
                                   osp_shape_format(&res->shape, s, sizeof s),
                                   osp_shape_format(&g.out, o, sizeof o));
    }
    ctx->outputs[0].dtype = a->dtype;
    ctx->outputs[0].shape = g.out;
    if (ctx->fp16_weights && a->dtype == OSP_TYPE_FP32 && g.k > 0) {
        ctx->workspace_bytes = fp16_layout(a, b).end;
        ctx->fp16_inputs = b->host ? 1u << 1 : 0;
    }
    return NULL;
}

osp_error *onnx_math__matmul_run(onnx_run_ctx *ctx) {
    matmul_state *st = ctx->state;
    const onnx_desc *a = &ctx->in_desc[0], *b = &ctx->in_desc[1];
    mm_geom g;
    osp_error *err = mm_geometry(ctx->node, &a->shape, &b->shape, &g);
    if (err)
        return err;
    if (onnx_shape_count(&g.out) == 0)
        return NULL;
    void *y = ctx->out[0];
    /* K == 0: the product is zeros (beta 0); A and B hold nothing, so any
     * valid pointer stands in for them. */
    const void *pa = g.k > 0 ? ctx->in[0] : y;
    const void *pb = g.k > 0 ? ctx->in[1] : y;
    osp_gemm_ex_args x = {
        .gemm =
            {
                .m = g.m,
                .n = g.n,
                .k = g.k,
                .alpha = 1.0f,
                .beta = 0.0f,
                .dtype = a->dtype,
                .allow_tf32 = ctx->allow_tf32,
                .a = pa,
                .lda = at_least_1(g.k),
                .b = pb,
                .ldb = at_least_1(g.n),
                .c = y,
                .ldc = at_least_1(g.n),
            },
        .act = st->act,
        .act_alpha = st->act_alpha,
        .act_beta = st->act_beta,
    };
    if (st->fused) {
        if (onnx_present(ctx->n_inputs, ctx->in_desc, 2))
            x.bias = ctx->in[2];
        if (onnx_present(ctx->n_inputs, ctx->in_desc, 3))
            x.residual = ctx->in[3];
    }
    size_t elem = osp_datatype_byte_size(a->dtype), c_size = elem;
    if (fp16_product(ctx, g.k)) {
        fp16_operands o = fp16_layout(a, b);
        if ((err = fp16_operands_of(ctx, &o, &x)) != NULL)
            return err;
        elem = 2;
    } else if (b->shape.rank == 2 && /* one B for every batch element */
               (err = use_packed_b(&st->pack, ctx->stream, b, &x)) != NULL) {
        return err;
    }
    return mm_run_batches(ctx->stream, &x, &g.batches, elem, c_size);
}

/* ---- Gemm, FusedGemm ---------------------------------------------------- */

typedef struct gemm_state {
    bool trans_a, trans_b;
    float alpha, beta;
    osp_unary_op act;
    float act_alpha, act_beta;
    onnx_packed pack; /* a constant B, packed on the first run */
} gemm_state;

void onnx_math__gemm_free(void *state) {
    gemm_state *st = state;
    if (st == NULL)
        return;
    onnx_packed_destroy(&st->pack);
    free(st);
}

osp_error *onnx_math__gemm_prepare(const onnx_node *node, void **state) {
    gemm_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    int64_t ta, tb;
    osp_error *err = onnx_packed_init(&st->pack);
    if (err) {
        free(st);
        return err;
    }
    if ((err = onnx_attr_int(node, "transA", 0, &ta)) != NULL ||
        (err = onnx_attr_int(node, "transB", 0, &tb)) != NULL ||
        (err = onnx_attr_float(node, "alpha", 1.0f, &st->alpha)) != NULL ||
        (err = onnx_attr_float(node, "beta", 1.0f, &st->beta)) != NULL)
        goto out;
    st->trans_a = ta != 0;
    st->trans_b = tb != 0;
    st->act = OSP_UNARY_IDENTITY;
    if (strcmp(node->op_type, "FusedGemm") == 0 &&
        (err = onnx_fused_activation(node, &st->act, &st->act_alpha,
                                     &st->act_beta)) != NULL)
        goto out;
    *state = st;
    return NULL;
out:
    onnx_math__gemm_free(st);
    return err;
}

/* M, N and K of a Gemm from A's and B's shapes and the trans flags; C
 * (when given) must broadcast to [M, N] one way. */
static osp_error *gemm_geometry(const onnx_node *node, const gemm_state *st,
                                const onnx_desc *a, const onnx_desc *b,
                                const onnx_desc *c, int64_t *m, int64_t *n,
                                int64_t *k) {
    char sa[256], sb[256];
    if (a->shape.rank != 2 || b->shape.rank != 2)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "A and B must be 2-D, got %s and %s",
                               osp_shape_format(&a->shape, sa, sizeof sa),
                               osp_shape_format(&b->shape, sb, sizeof sb));
    *m = st->trans_a ? a->shape.dims[1] : a->shape.dims[0];
    *k = st->trans_a ? a->shape.dims[0] : a->shape.dims[1];
    int64_t kb = st->trans_b ? b->shape.dims[1] : b->shape.dims[0];
    *n = st->trans_b ? b->shape.dims[0] : b->shape.dims[1];
    if (*k != kb)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "A %s and B %s (transA=%d, transB=%d) "
                               "have inner dimensions %lld and %lld",
                               osp_shape_format(&a->shape, sa, sizeof sa),
                               osp_shape_format(&b->shape, sb, sizeof sb),
                               st->trans_a, st->trans_b, (long long)*k,
                               (long long)kb);
    if (c) {
        bool ok = c->shape.rank <= 2;
        int64_t want[2] = {*m, *n};
        for (int i = 0; ok && i < c->shape.rank; i++) {
            int64_t d = c->shape.dims[i];
            int64_t w = want[2 - c->shape.rank + i];
            ok = d == w || d == 1;
        }
        if (!ok)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "C %s does not broadcast to [%lld,%lld]",
                                   osp_shape_format(&c->shape, sa, sizeof sa),
                                   (long long)*m, (long long)*n);
    }
    return NULL;
}

osp_error *onnx_math__gemm_infer(onnx_infer_ctx *ctx) {
    const onnx_node *node = ctx->node;
    const gemm_state *st = ctx->state;
    if (!onnx_present(ctx->n_inputs, ctx->inputs, 0) ||
        !onnx_present(ctx->n_inputs, ctx->inputs, 1))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "inputs A and B are required");
    const onnx_desc *a = &ctx->inputs[0], *b = &ctx->inputs[1];
    const onnx_desc *c =
        onnx_present(ctx->n_inputs, ctx->inputs, 2) ? &ctx->inputs[2] : NULL;
    if (a->dtype != OSP_TYPE_FP32 && a->dtype != OSP_TYPE_FP16)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "dtype %s is not supported (FP32 or FP16)",
                               osp_datatype_wire_name(a->dtype));
    if (b->dtype != a->dtype || (c && c->dtype != a->dtype))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "A, B and C must share one dtype (A is %s)",
                               osp_datatype_wire_name(a->dtype));
    int64_t m, n, k;
    osp_error *err = gemm_geometry(node, st, a, b, c, &m, &n, &k);
    if (err)
        return err;
    ctx->outputs[0].dtype = a->dtype;
    ctx->outputs[0].shape.rank = 2;
    ctx->outputs[0].shape.dims[0] = m;
    ctx->outputs[0].shape.dims[1] = n;
    if (ctx->fp16_weights && a->dtype == OSP_TYPE_FP32 && k > 0) {
        ctx->workspace_bytes = fp16_layout(a, b).end;
        ctx->fp16_inputs = b->host ? 1u << 1 : 0;
    }
    return onnx_check_shape(node, &ctx->outputs[0].shape, a->dtype);
}

/* C joins the product in one of three ways: as gemm_ex's bias when it is
 * one row ([N], [1, N]) and beta is 1, as its residual when it is the
 * whole [M, N] and beta is 1 (neither copies anything), else copied,
 * broadcast, into Y for the GEMM to scale by beta and accumulate onto.
 * Under precision fp16 only A and B change (FP16, transposes as they
 * lie); C, Y and the epilogue stay FP32. */
osp_error *onnx_math__gemm_run(onnx_run_ctx *ctx) {
    gemm_state *st = ctx->state;
    const onnx_desc *a = &ctx->in_desc[0], *b = &ctx->in_desc[1];
    const onnx_desc *c =
        onnx_present(ctx->n_inputs, ctx->in_desc, 2) ? &ctx->in_desc[2] : NULL;
    int64_t m, n, k;
    osp_error *err = gemm_geometry(ctx->node, st, a, b, c, &m, &n, &k);
    if (err)
        return err;
    if (m == 0 || n == 0)
        return NULL;
    void *y = ctx->out[0];
    size_t esize = osp_datatype_byte_size(a->dtype);
    osp_gemm_ex_args x = {
        .gemm =
            {
                .trans_a = st->trans_a,
                .trans_b = st->trans_b,
                .m = m,
                .n = n,
                .k = k,
                .alpha = st->alpha,
                .beta = 0.0f,
                .dtype = a->dtype,
                .allow_tf32 = ctx->allow_tf32,
                .a = k > 0 ? ctx->in[0] : y,
                .lda = at_least_1(a->shape.dims[1]),
                .b = k > 0 ? ctx->in[1] : y,
                .ldb = at_least_1(b->shape.dims[1]),
                .c = y,
                .ldc = n,
            },
        .act = st->act,
        .act_alpha = st->act_alpha,
        .act_beta = st->act_beta,
    };
    if (c && st->beta != 0.0f) {
        const osp_shape *cs = &c->shape;
        int64_t c_count = onnx_shape_count(cs);
        bool fp32_unit = a->dtype == OSP_TYPE_FP32 && st->beta == 1.0f;
        if (fp32_unit && c_count == n &&
            (cs->rank == 0 || cs->dims[cs->rank - 1] == n)) {
            x.bias = ctx->in[2];
        } else if (fp32_unit && cs->rank == 2 && cs->dims[0] == m &&
                   cs->dims[1] == n) {
            x.residual = ctx->in[2];
        } else {
            osp_shape ys = {.rank = 2, .dims = {m, n}};
            osp_copy_strided_args cp = {
                .elem_size = esize,
                .rank = 2,
                .dims = {m, n},
                .src = ctx->in[2],
                .dst = y,
                .dst_strides = {n, 1},
            };
            onnx_broadcast_strides(cs, &ys, cp.src_strides);
            if ((err = osp_op_copy_strided(ctx->stream, &cp)) != NULL)
                return err;
            x.gemm.beta = st->beta;
        }
    }
    if (fp16_product(ctx, k)) {
        fp16_operands o = fp16_layout(a, b);
        err = fp16_operands_of(ctx, &o, &x);
    } else {
        err = use_packed_b(&st->pack, ctx->stream, b, &x);
    }
    return err ? err : osp_op_gemm_ex(ctx->stream, &x);
}
