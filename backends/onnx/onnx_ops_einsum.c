/*
 * Einsum of one or two inputs. One input: a strided copy (transpose,
 * diagonal) and, for labels it sums away, a reduction. Two inputs: every
 * label is a batch, row (M), column (N) or contracted (K) label of one
 * batched GEMM; an operand whose layout already reads as [batch, M, K]
 * (or [batch, K, M], transposed) is used in place, any other is first
 * copied into that layout in the workspace, and so is the output when its
 * labels are not in [batch, M, N] order. The operand roles and the order
 * of the K labels are chosen to copy the fewest elements. A label summed
 * within one input, or more than two inputs, is UNSUPPORTED naming the
 * equation.
 *
 * Precision fp16 (ctx->fp16, FP32 inputs on a GPU): each input is cast to
 * FP16 whole (a constant comes from the session's FP16 copy instead),
 * an operand's layout copy then moves FP16 elements (in the FP32 copy's
 * block, which has room for it), and the GEMM multiplies them with FP32
 * accumulation into its FP32 C, so the output side is as in FP32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_math.h"

static int64_t at_least_1(int64_t v) {
    return v > 1 ? v : 1;
}

/* Labels: letters a-z are 0-25, A-Z 26-51, and the dims an ellipsis
 * stands for 52 and up (right-aligned across the terms, as numpy
 * broadcasts them). */
#define EIN_LETTERS 52
#define EIN_LABELS (EIN_LETTERS + OSP_MAX_DIMS)
#define EIN_MAX_INPUTS 2

typedef struct ein_term {
    int n_letters;
    int8_t letters[OSP_MAX_DIMS]; /* label ids, in order */
    int ellipsis_at;              /* letters before the "...", or -1 */
} ein_term;

typedef struct einsum_state {
    int n_terms;
    ein_term in[EIN_MAX_INPUTS];
    bool explicit_out;
    ein_term out;
    char equation[128]; /* for messages, truncated */
} einsum_state;

static int ein_letter(char ch) {
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a';
    if (ch >= 'A' && ch <= 'Z')
        return 26 + (ch - 'A');
    return -1;
}

/* Parses one term from *p up to ',' or '-' or the end. */
static bool ein_parse_term(const char **p, ein_term *t) {
    memset(t, 0, sizeof *t);
    t->ellipsis_at = -1;
    const char *s = *p;
    for (; *s && *s != ',' && *s != '-'; s++) {
        if (*s == ' ')
            continue;
        if (*s == '.') {
            if (t->ellipsis_at >= 0 || s[1] != '.' || s[2] != '.')
                return false;
            t->ellipsis_at = t->n_letters;
            s += 2;
            continue;
        }
        int l = ein_letter(*s);
        if (l < 0 || t->n_letters == OSP_MAX_DIMS)
            return false;
        t->letters[t->n_letters++] = (int8_t)l;
    }
    *p = s;
    return true;
}

osp_error *onnx_math__einsum_prepare(const onnx_node *node, void **state) {
    const char *eq;
    osp_error *err = onnx_attr_string(node, "equation", NULL, &eq);
    if (err)
        return err;
    if (!eq)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'equation' is required");
    einsum_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    snprintf(st->equation, sizeof st->equation, "%s", eq);
    const char *p = eq;
    for (;;) {
        if (st->n_terms == EIN_MAX_INPUTS) {
            err = onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                  "equation '%s': Einsum of more than %d "
                                  "inputs is not supported",
                                  st->equation, EIN_MAX_INPUTS);
            goto out;
        }
        if (!ein_parse_term(&p, &st->in[st->n_terms++]))
            goto bad;
        if (*p != ',')
            break;
        p++;
    }
    if (*p == '-') {
        if (p[1] != '>')
            goto bad;
        p += 2;
        st->explicit_out = true;
        if (!ein_parse_term(&p, &st->out) || *p != '\0')
            goto bad;
    } else if (*p != '\0') {
        goto bad;
    }
    *state = st;
    return NULL;
bad:
    err = onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                          "equation '%s' is not a valid Einsum equation",
                          st->equation);
out:
    free(st);
    return err;
}

/* One input seen through its labels: per label, the size, and the stride
 * of the view that reads the label's dims together (strides of a
 * repeated label add up: a diagonal). */
typedef struct ein_view {
    bool has[EIN_LABELS];
    int64_t stride[EIN_LABELS];
    int rank;
    int8_t dim_label[OSP_MAX_DIMS];
    bool repeated;  /* a label twice in the term */
    bool broadcast; /* a dim of 1 read as a larger label */
} ein_view;

/* Everything run needs, rebuilt from the descs. */
typedef struct ein_plan {
    osp_shape out;
    int n_out;
    int8_t out_labels[OSP_MAX_DIMS];
    int64_t size[EIN_LABELS];
    ein_view view[EIN_MAX_INPUTS];
    /* one input: copy (view -> out order, then summed labels), reduce */
    int n_sum;
    int8_t sum_labels[OSP_MAX_DIMS];
    /* two inputs: gemm roles and layouts */
    int first; /* the input that plays A */
    int n_batch, n_m, n_n, n_k;
    int8_t batch[OSP_MAX_DIMS], ml[OSP_MAX_DIMS], nl[OSP_MAX_DIMS],
        kl[OSP_MAX_DIMS];
    int64_t batch_size, m, n, k;
    bool copy_a, copy_b, trans_a, trans_b, copy_out;
    size_t off_a, off_b, off_c;
    size_t workspace;
    /* precision fp16: each input's FP16 cast (none for a constant), after
     * the FP32 layout's blocks, and the bytes of the whole */
    size_t off_cast[EIN_MAX_INPUTS];
    size_t workspace_fp16;
} ein_plan;

/* Labels of the (possibly ellipsis) term for an input of `rank` dims;
 * ell_rank is the widest ellipsis. False when the rank does not fit. */
static bool ein_term_labels(const ein_term *t, int rank, int ell_rank,
                            int8_t *labels) {
    int ell = rank - t->n_letters;
    if (ell < 0 || (t->ellipsis_at < 0 && ell != 0))
        return false;
    int j = 0;
    for (int i = 0; i < t->n_letters; i++) {
        if (i == t->ellipsis_at)
            for (int e = 0; e < ell; e++)
                labels[j++] = (int8_t)(EIN_LETTERS + ell_rank - ell + e);
        labels[j++] = t->letters[i];
    }
    if (t->ellipsis_at == t->n_letters)
        for (int e = 0; e < ell; e++)
            labels[j++] = (int8_t)(EIN_LETTERS + ell_rank - ell + e);
    return true;
}

/* Filters out labels of size 1 (they never change a layout). */
static int ein_squeeze(const ein_plan *p, const int8_t *labels, int n,
                       int8_t *out) {
    int j = 0;
    for (int i = 0; i < n; i++)
        if (p->size[labels[i]] != 1)
            out[j++] = labels[i];
    return j;
}

/* True when the squeezed label sequences a (na) and the concatenation of
 * x, y, z are the same. */
static bool ein_same(const ein_plan *p, const int8_t *a, int na,
                     const int8_t *x, int nx, const int8_t *y, int ny,
                     const int8_t *z, int nz) {
    int8_t cat[3 * OSP_MAX_DIMS], sa[OSP_MAX_DIMS], sc[3 * OSP_MAX_DIMS];
    memcpy(cat, x, (size_t)nx);
    memcpy(cat + nx, y, (size_t)ny);
    memcpy(cat + nx + ny, z, (size_t)nz);
    int ka = ein_squeeze(p, a, na, sa);
    int kc = ein_squeeze(p, cat, nx + ny + nz, sc);
    return ka == kc && memcmp(sa, sc, (size_t)ka) == 0;
}

static int64_t ein_product(const ein_plan *p, const int8_t *labels, int n) {
    int64_t r = 1;
    for (int i = 0; i < n; i++)
        r *= p->size[labels[i]];
    return r;
}

/* Can operand `v` be read in place as [batch, x, y] (trans false) or
 * [batch, y, x] (trans true)? */
static bool ein_direct(const ein_plan *p, const ein_view *v, const int8_t *x,
                       int nx, const int8_t *y, int ny, bool *trans) {
    if (v->repeated || v->broadcast)
        return false;
    if (ein_same(p, v->dim_label, v->rank, p->batch, p->n_batch, x, nx, y,
                 ny)) {
        *trans = false;
        return true;
    }
    if (ein_same(p, v->dim_label, v->rank, p->batch, p->n_batch, y, ny, x,
                 nx)) {
        *trans = true;
        return true;
    }
    return false;
}

/* Sets the two-input roles for A = input `first`, with the contracted
 * labels in the order of input `k_from`; returns the elements it copies
 * (the cost to minimise). */
static int64_t ein_roles(ein_plan *p, int first, int k_from) {
    const ein_view *va = &p->view[first], *vb = &p->view[1 - first];
    p->first = first;
    p->n_batch = p->n_m = p->n_n = p->n_k = 0;
    for (int i = 0; i < p->n_out; i++) {
        int l = p->out_labels[i];
        if (va->has[l] && vb->has[l])
            p->batch[p->n_batch++] = (int8_t)l;
        else if (va->has[l])
            p->ml[p->n_m++] = (int8_t)l;
        else
            p->nl[p->n_n++] = (int8_t)l;
    }
    const ein_view *vk = &p->view[k_from];
    for (int i = 0; i < vk->rank; i++) {
        int l = vk->dim_label[i];
        bool in_out = false, seen = false;
        for (int j = 0; j < p->n_out; j++)
            in_out |= p->out_labels[j] == l;
        for (int j = 0; j < p->n_k; j++)
            seen |= p->kl[j] == l;
        if (!in_out && !seen)
            p->kl[p->n_k++] = (int8_t)l;
    }
    p->batch_size = ein_product(p, p->batch, p->n_batch);
    p->m = ein_product(p, p->ml, p->n_m);
    p->n = ein_product(p, p->nl, p->n_n);
    p->k = ein_product(p, p->kl, p->n_k);
    p->copy_a = !ein_direct(p, va, p->ml, p->n_m, p->kl, p->n_k, &p->trans_a);
    p->copy_b = !ein_direct(p, vb, p->kl, p->n_k, p->nl, p->n_n, &p->trans_b);
    if (p->copy_a)
        p->trans_a = false;
    if (p->copy_b)
        p->trans_b = false;
    p->copy_out = !ein_same(p, p->out_labels, p->n_out, p->batch, p->n_batch,
                            p->ml, p->n_m, p->nl, p->n_n);
    int64_t cost = 0;
    if (p->copy_a)
        cost += p->batch_size * p->m * p->k;
    if (p->copy_b)
        cost += p->batch_size * p->k * p->n;
    if (p->copy_out)
        cost += p->batch_size * p->m * p->n;
    return cost;
}

static osp_error *ein_plan_build(const onnx_node *node, const einsum_state *st,
                                 size_t n_inputs, const onnx_desc *inputs,
                                 ein_plan *p) {
    memset(p, 0, sizeof *p);
    if ((int)n_inputs != st->n_terms)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "equation '%s' has %d inputs, the node %zu",
                               st->equation, st->n_terms, n_inputs);
    int ell_rank = 0;
    osp_datatype dtype = inputs[0].dtype;
    for (int i = 0; i < st->n_terms; i++) {
        if (!inputs[i].present || inputs[i].dtype != dtype)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "every input must be given, of one "
                                   "dtype");
        int ell = inputs[i].shape.rank - st->in[i].n_letters;
        if (ell > ell_rank)
            ell_rank = ell;
    }
    for (int l = 0; l < EIN_LABELS; l++)
        p->size[l] = -1;
    int count[EIN_LABELS] = {0};
    for (int i = 0; i < st->n_terms; i++) {
        const osp_shape *s = &inputs[i].shape;
        ein_view *v = &p->view[i];
        v->rank = s->rank;
        if (!ein_term_labels(&st->in[i], s->rank, ell_rank, v->dim_label)) {
            char b[256];
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "equation '%s': input %d of shape %s "
                                   "does not fit its term",
                                   st->equation, i,
                                   osp_shape_format(s, b, sizeof b));
        }
        int64_t strides[OSP_MAX_DIMS];
        onnx_contiguous_strides(s, strides);
        for (int d = 0; d < s->rank; d++) {
            int l = v->dim_label[d];
            int64_t dim = s->dims[d];
            count[l]++;
            if (v->has[l])
                v->repeated = true;
            v->has[l] = true;
            if (dim != 1)
                v->stride[l] += strides[d];
            if (p->size[l] < 0 || p->size[l] == 1)
                p->size[l] = dim;
            else if (dim != p->size[l] && dim != 1)
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "equation '%s': a label has sizes "
                                       "%lld and %lld",
                                       st->equation, (long long)p->size[l],
                                       (long long)dim);
        }
    }
    for (int i = 0; i < st->n_terms; i++) {
        const osp_shape *s = &inputs[i].shape;
        for (int d = 0; d < s->rank; d++)
            if (s->dims[d] == 1 && p->size[p->view[i].dim_label[d]] != 1)
                p->view[i].broadcast = true;
    }
    /* The output's labels. */
    if (st->explicit_out) {
        int8_t labels[OSP_MAX_DIMS + OSP_MAX_DIMS];
        const ein_term *t = &st->out;
        int n = 0;
        for (int i = 0; i <= t->n_letters; i++) {
            if (i == t->ellipsis_at)
                for (int e = 0; e < ell_rank; e++)
                    labels[n++] = (int8_t)(EIN_LETTERS + e);
            if (i < t->n_letters)
                labels[n++] = t->letters[i];
        }
        if (n > OSP_MAX_DIMS)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "equation '%s': output rank %d is over "
                                   "%d",
                                   st->equation, n, OSP_MAX_DIMS);
        for (int i = 0; i < n; i++) {
            if (count[labels[i]] == 0)
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "equation '%s': an output label is "
                                       "in no input",
                                       st->equation);
            for (int j = 0; j < i; j++)
                if (labels[j] == labels[i])
                    return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                           "equation '%s': an output "
                                           "label repeats",
                                           st->equation);
            p->out_labels[p->n_out++] = labels[i];
        }
    } else {
        for (int e = 0; e < ell_rank; e++)
            p->out_labels[p->n_out++] = (int8_t)(EIN_LETTERS + e);
        /* Letters seen once, in ASCII order (A-Z before a-z). */
        static const int8_t ascii_order[EIN_LETTERS] = {
            26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38,
            39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51,
            0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
            13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
        for (int i = 0; i < EIN_LETTERS; i++)
            if (count[ascii_order[i]] == 1) {
                if (p->n_out == OSP_MAX_DIMS)
                    return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                           "equation '%s': output rank "
                                           "is over %d",
                                           st->equation, OSP_MAX_DIMS);
                p->out_labels[p->n_out++] = ascii_order[i];
            }
    }
    p->out.rank = p->n_out;
    for (int i = 0; i < p->n_out; i++)
        p->out.dims[i] = p->size[p->out_labels[i]];
    osp_error *err = onnx_check_shape(node, &p->out, dtype);
    if (err)
        return err;
    size_t esize = osp_datatype_byte_size(dtype);

    if (st->n_terms == 1) {
        const ein_view *v = &p->view[0];
        for (int l = 0; l < EIN_LABELS; l++) {
            bool in_out = false;
            for (int j = 0; j < p->n_out; j++)
                in_out |= p->out_labels[j] == l;
            if (v->has[l] && !in_out)
                p->sum_labels[p->n_sum++] = (int8_t)l;
        }
        if (p->n_sum > 0) {
            if (dtype != OSP_TYPE_FP32 && dtype != OSP_TYPE_INT32 &&
                dtype != OSP_TYPE_INT64)
                return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                       "equation '%s': a sum over %s is "
                                       "not supported",
                                       st->equation,
                                       osp_datatype_wire_name(dtype));
            p->workspace = onnx_align64(
                (size_t)onnx_shape_count(&p->out) *
                (size_t)ein_product(p, p->sum_labels, p->n_sum) * esize);
        }
        return NULL;
    }

    /* Two inputs: every label is a batch, row (M), column (N) or
     * contracted (K) label of one GEMM; one summed inside a single input
     * is not. */
    for (int l = 0; l < EIN_LABELS; l++) {
        bool in_out = false;
        for (int j = 0; j < p->n_out; j++)
            in_out |= p->out_labels[j] == l;
        if (!in_out && (p->view[0].has[l] != p->view[1].has[l]))
            return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                   "equation '%s': a label summed within "
                                   "one input is not supported",
                                   st->equation);
    }
    if (dtype != OSP_TYPE_FP32 && dtype != OSP_TYPE_FP16)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "equation '%s': dtype %s is not supported "
                               "(FP32 or FP16)",
                               st->equation, osp_datatype_wire_name(dtype));
    int best_first = 0, best_k = 0;
    int64_t best = -1;
    for (int first = 0; first < 2; first++)
        for (int k_from = 0; k_from < 2; k_from++) {
            int64_t cost = ein_roles(p, first, k_from);
            if (best < 0 || cost < best) {
                best = cost;
                best_first = first;
                best_k = k_from;
            }
        }
    ein_roles(p, best_first, best_k);
    size_t ws = 0;
    if (p->copy_a) {
        p->off_a = ws;
        ws += onnx_align64((size_t)(p->batch_size * p->m * p->k) * esize);
    }
    if (p->copy_b) {
        p->off_b = ws;
        ws += onnx_align64((size_t)(p->batch_size * p->k * p->n) * esize);
    }
    if (p->copy_out) {
        p->off_c = ws;
        ws += onnx_align64((size_t)(p->batch_size * p->m * p->n) * esize);
    }
    p->workspace = ws;
    for (int i = 0; i < 2; i++) {
        p->off_cast[i] = ws;
        if (inputs[i].host == NULL)
            ws += onnx_align64((size_t)onnx_shape_count(&inputs[i].shape) * 2);
    }
    p->workspace_fp16 = ws;
    return NULL;
}

osp_error *onnx_math__einsum_infer(onnx_infer_ctx *ctx) {
    ein_plan p;
    osp_error *err =
        ein_plan_build(ctx->node, ctx->state, ctx->n_inputs, ctx->inputs, &p);
    if (err)
        return err;
    ctx->outputs[0].dtype = ctx->inputs[0].dtype;
    ctx->outputs[0].shape = p.out;
    ctx->workspace_bytes = p.workspace;
    if (ctx->fp16_weights && ctx->n_inputs == 2 &&
        ctx->inputs[0].dtype == OSP_TYPE_FP32 && p.k > 0) {
        ctx->workspace_bytes = p.workspace_fp16;
        ctx->fp16_inputs =
            (ctx->inputs[0].host ? 1u : 0u) | (ctx->inputs[1].host ? 2u : 0u);
    }
    return NULL;
}

/* Whether run multiplies in FP16 (see the top of the file): two FP32
 * inputs on a device that does, each an activation or a constant the
 * session holds in FP16. */
static bool ein_fp16(const onnx_run_ctx *ctx, const ein_plan *p) {
    if (!ctx->fp16 || ctx->n_inputs != 2 ||
        ctx->in_desc[0].dtype != OSP_TYPE_FP32 || p->k == 0)
        return false;
    for (int i = 0; i < 2; i++)
        if (ctx->in_desc[i].host && !(ctx->in_fp16 && ctx->in_fp16[i]))
            return false;
    return true;
}

/* Copies input view v into dst contiguous in the order of the label
 * lists x, y, z. */
static osp_error *ein_copy_view(osp_stream *stream, const ein_plan *p,
                                const ein_view *v, const void *src, void *dst,
                                size_t esize, const int8_t *x, int nx,
                                const int8_t *y, int ny, const int8_t *z,
                                int nz) {
    osp_copy_strided_args c = {.elem_size = esize, .src = src, .dst = dst};
    const int8_t *lists[3] = {x, y, z};
    int ns[3] = {nx, ny, nz};
    for (int li = 0; li < 3; li++)
        for (int i = 0; i < ns[li]; i++) {
            int l = lists[li][i];
            c.dims[c.rank] = p->size[l];
            c.src_strides[c.rank] = v->stride[l];
            c.rank++;
        }
    if (c.rank == 0) {
        c.rank = 1;
        c.dims[0] = 1;
    }
    osp_shape s = {.rank = c.rank};
    memcpy(s.dims, c.dims, sizeof s.dims);
    onnx_contiguous_strides(&s, c.dst_strides);
    return osp_op_copy_strided(stream, &c);
}

osp_error *onnx_math__einsum_run(onnx_run_ctx *ctx) {
    ein_plan p;
    osp_error *err =
        ein_plan_build(ctx->node, ctx->state, ctx->n_inputs, ctx->in_desc, &p);
    if (err)
        return err;
    int64_t out_count = onnx_shape_count(&p.out);
    if (out_count == 0)
        return NULL;
    osp_datatype dtype = ctx->in_desc[0].dtype;
    size_t esize = osp_datatype_byte_size(dtype);
    char *ws = ctx->workspace;

    if (p.n_sum == 0 && ctx->n_inputs == 1)
        return ein_copy_view(ctx->stream, &p, &p.view[0], ctx->in[0],
                             ctx->out[0], esize, p.out_labels, p.n_out, NULL, 0,
                             NULL, 0);
    if (ctx->n_inputs == 1) {
        int64_t n = ein_product(&p, p.sum_labels, p.n_sum);
        if (n > 0 &&
            (err = ein_copy_view(ctx->stream, &p, &p.view[0], ctx->in[0], ws,
                                 esize, p.out_labels, p.n_out, p.sum_labels,
                                 p.n_sum, NULL, 0)) != NULL)
            return err;
        osp_reduce_args r = {
            .op = OSP_REDUCE_SUM,
            .dtype = dtype,
            .x = n > 0 ? ws : NULL,
            .outer = out_count,
            .n = n,
            .inner = 1,
            .out = ctx->out[0],
        };
        return osp_op_reduce(ctx->stream, &r);
    }

    if (p.k == 0) {
        osp_fill_args f = {
            .elem_size = esize, .dst = ctx->out[0], .n = (size_t)out_count};
        return osp_op_fill(ctx->stream, &f);
    }
    int ia = p.first, ib = 1 - p.first;
    const void *a = ctx->in[ia], *b = ctx->in[ib];
    bool fp16 = ein_fp16(ctx, &p);
    if (fp16) {
        const void *in16[2];
        for (int i = 0; i < 2; i++) {
            if (ctx->in_desc[i].host) {
                in16[i] = ctx->in_fp16[i];
                continue;
            }
            in16[i] = ws + p.off_cast[i];
            if ((err = osp_op_cast(
                     ctx->stream, ctx->in[i], OSP_TYPE_FP32, ws + p.off_cast[i],
                     OSP_TYPE_FP16,
                     (size_t)onnx_shape_count(&ctx->in_desc[i].shape))) != NULL)
                return err;
        }
        a = in16[ia];
        b = in16[ib];
        esize = 2;
    }
    if (p.copy_a) {
        if ((err = ein_copy_view(ctx->stream, &p, &p.view[ia], a, ws + p.off_a,
                                 esize, p.batch, p.n_batch, p.ml, p.n_m, p.kl,
                                 p.n_k)) != NULL)
            return err;
        a = ws + p.off_a;
    }
    if (p.copy_b) {
        if ((err = ein_copy_view(ctx->stream, &p, &p.view[ib], b, ws + p.off_b,
                                 esize, p.batch, p.n_batch, p.kl, p.n_k, p.nl,
                                 p.n_n)) != NULL)
            return err;
        b = ws + p.off_b;
    }
    void *c = p.copy_out ? (void *)(ws + p.off_c) : ctx->out[0];
    osp_gemm_ex_args x = {
        .gemm =
            {
                .trans_a = p.trans_a,
                .trans_b = p.trans_b,
                .m = p.m,
                .n = p.n,
                .k = p.k,
                .alpha = 1.0f,
                .beta = 0.0f,
                .dtype = fp16 ? OSP_TYPE_FP16 : dtype,
                .allow_tf32 = ctx->allow_tf32,
                .c_dtype = fp16 ? OSP_TYPE_FP32 : OSP_TYPE_INVALID,
                .a = a,
                .lda = at_least_1(p.trans_a ? p.m : p.k),
                .b = b,
                .ldb = at_least_1(p.trans_b ? p.k : p.n),
                .c = c,
                .ldc = at_least_1(p.n),
            },
        .batch_count = p.batch_size,
        .stride_a = p.m * p.k,
        .stride_b = p.k * p.n,
        .stride_c = p.m * p.n,
        .act = OSP_UNARY_IDENTITY,
    };
    if ((err = osp_op_gemm_ex(ctx->stream, &x)) != NULL)
        return err;
    if (!p.copy_out)
        return NULL;
    /* C is [batch, M, N]; read it in the output's label order. */
    osp_copy_strided_args cp = {
        .elem_size = osp_datatype_byte_size(dtype),
        .rank = p.n_out,
        .src = c,
        .dst = ctx->out[0],
    };
    int8_t order[3 * OSP_MAX_DIMS];
    int n_order = 0;
    memcpy(order, p.batch, (size_t)p.n_batch);
    n_order += p.n_batch;
    memcpy(order + n_order, p.ml, (size_t)p.n_m);
    n_order += p.n_m;
    memcpy(order + n_order, p.nl, (size_t)p.n_n);
    n_order += p.n_n;
    int64_t cstride[3 * OSP_MAX_DIMS];
    int64_t s = 1;
    for (int i = n_order - 1; i >= 0; i--) {
        cstride[i] = s;
        s *= p.size[order[i]];
    }
    for (int i = 0; i < p.n_out; i++) {
        cp.dims[i] = p.size[p.out_labels[i]];
        for (int j = 0; j < n_order; j++)
            if (order[j] == p.out_labels[i])
                cp.src_strides[i] = cstride[j];
    }
    onnx_contiguous_strides(&p.out, cp.dst_strides);
    if (cp.rank == 0) {
        cp.rank = 1;
        cp.dims[0] = 1;
        cp.src_strides[0] = cp.dst_strides[0] = 1;
    }
    return osp_op_copy_strided(ctx->stream, &cp);
}
