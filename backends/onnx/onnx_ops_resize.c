/*
 * Resize (10, 11, 13, 18, 19) and Upsample (7 to 9) without a resize
 * device op. Resizing is separable: each axis whose size or coordinates
 * change is one step from [outer, in, inner] to [outer, out, inner].
 *
 * The output coordinate j of an axis maps to the input coordinate x(j)
 * of the coordinate_transformation_mode (ONNX's reference formulas; the
 * Upsample and Resize-10 ones are "asymmetric", nearest rounding down when
 * upsampling and up when downsampling, as onnxruntime). Run computes the
 * exact index table of every axis on the host from the shapes (no tensor
 * data) and picks the cheapest step:
 *   - an index table off + (j / r) * k (nearest with an integer factor,
 *     up or down, and linear whose coordinates all land on pixels) is a
 *     strided view: when every step is one, the whole resize is a single
 *     osp_op_copy_strided with stride-0 dimensions for the repeats;
 *   - other nearest tables are an osp_op_gather along the axis, with
 *     indices computed on the device (an iota from fill and cumsum, the
 *     affine map with binary_nd, the rounding with unary, a cast);
 *   - linear is two such gathers (floor(x) and floor(x) + 1, clamped)
 *     blended by the fraction: a + (b - a) * w.
 * Steps that shrink run first so that intermediates stay small.
 *
 * Unsupported (UNSUPPORTED naming the attribute): mode "cubic",
 * coordinate_transformation_mode "tf_crop_and_resize", antialias when
 * linear resizing shrinks an axis, linear on types other than FP32.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_nn.h"

typedef enum rs_mode { RS_NEAREST = 0, RS_LINEAR } rs_mode;

typedef enum rs_coord {
    CT_HALF_PIXEL = 0,
    CT_HALF_PIXEL_SYMMETRIC,
    CT_PYTORCH_HALF_PIXEL,
    CT_ALIGN_CORNERS,
    CT_ASYMMETRIC,
    CT_TF_HALF_PIXEL_FOR_NN,
} rs_coord;

typedef enum rs_round {
    NR_ROUND_PREFER_FLOOR = 0,
    NR_ROUND_PREFER_CEIL,
    NR_FLOOR,
    NR_CEIL,
    NR_SIMPLE, /* Upsample, Resize-10: floor upsampling, ceil downsampling */
} rs_round;

typedef enum rs_keep {
    KA_STRETCH = 0,
    KA_NOT_LARGER,
    KA_NOT_SMALLER,
} rs_keep;

typedef struct resize_state {
    rs_mode mode;
    rs_coord coord;
    rs_round round;
    rs_keep keep;
    bool antialias;
    int scales_input, sizes_input; /* input indices, -1 when none */
    size_t n_attr_scales;          /* Upsample before 9 */
    float attr_scales[OSP_MAX_DIMS];
    size_t n_axes; /* Resize 18: axes the scales or sizes apply to */
    int64_t axes[OSP_MAX_DIMS];
} resize_state;

/* Index of `s` in names[n], or -1. */
static int pick(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

static osp_error *resize_prepare_attrs(const onnx_node *node,
                                       resize_state *st) {
    bool legacy = strcmp(node->op_type, "Upsample") == 0 || node->opset < 11;
    const char *mode;
    osp_error *err = onnx_attr_string(node, "mode", "nearest", &mode);
    if (err)
        return err;
    if (strcmp(mode, "nearest") == 0) {
        st->mode = RS_NEAREST;
    } else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0) {
        st->mode = RS_LINEAR;
    } else {
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "attribute 'mode' = '%s' is not supported "
                               "(nearest and linear are)",
                               mode);
    }
    st->scales_input = st->sizes_input = -1;
    if (legacy) {
        st->coord = CT_ASYMMETRIC;
        st->round = NR_SIMPLE;
        if (strcmp(node->op_type, "Upsample") == 0 && node->opset < 9) {
            const float *v;
            if ((err =
                     onnx_attr_floats(node, "scales", &v, &st->n_attr_scales)))
                return err;
            if (st->n_attr_scales == 0 || st->n_attr_scales > OSP_MAX_DIMS)
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "attribute 'scales' is required (one "
                                       "value per dimension)");
            memcpy(st->attr_scales, v, st->n_attr_scales * sizeof *v);
        } else {
            st->scales_input = 1;
        }
        return NULL;
    }
    st->scales_input = 2;
    st->sizes_input = 3;
    static const char *const coords[] = {
        "half_pixel",    "half_pixel_symmetric", "pytorch_half_pixel",
        "align_corners", "asymmetric",           "tf_half_pixel_for_nn",
    };
    const char *s;
    if ((err = onnx_attr_string(node, "coordinate_transformation_mode",
                                "half_pixel", &s)))
        return err;
    int c = pick(s, coords, 6);
    /* tf_half_pixel_for_nn left the spec at 13; onnxruntime (and ONNX's
     * own test data) still use it. */
    if (c < 0 || (c == CT_HALF_PIXEL_SYMMETRIC && node->opset < 19))
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "attribute 'coordinate_transformation_mode' = "
                               "'%s' is not supported",
                               s);
    st->coord = (rs_coord)c;
    static const char *const rounds[] = {"round_prefer_floor",
                                         "round_prefer_ceil", "floor", "ceil"};
    if ((err =
             onnx_attr_string(node, "nearest_mode", "round_prefer_floor", &s)))
        return err;
    int r = pick(s, rounds, 4);
    if (r < 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'nearest_mode' = '%s' is unknown", s);
    st->round = (rs_round)r;
    if (node->opset >= 18) {
        int64_t aa;
        if ((err = onnx_attr_int(node, "antialias", 0, &aa)))
            return err;
        st->antialias = aa != 0;
        static const char *const keeps[] = {"stretch", "not_larger",
                                            "not_smaller"};
        if ((err = onnx_attr_string(node, "keep_aspect_ratio_policy", "stretch",
                                    &s)))
            return err;
        int k = pick(s, keeps, 3);
        if (k < 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'keep_aspect_ratio_policy' = "
                                   "'%s' is unknown",
                                   s);
        st->keep = (rs_keep)k;
        const int64_t *axes;
        if ((err = onnx_attr_ints(node, "axes", &axes, &st->n_axes)))
            return err;
        if (st->n_axes > OSP_MAX_DIMS)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute 'axes' has %zu values",
                                   st->n_axes);
        memcpy(st->axes, axes, st->n_axes * sizeof *axes);
    }
    return NULL;
}

osp_error *onnx_nn__resize_prepare(const onnx_node *node, void **state) {
    resize_state *st = calloc(1, sizeof *st);
    if (!st)
        return osp_error_out_of_memory();
    osp_error *err = resize_prepare_attrs(node, st);
    if (err) {
        free(st);
        return err;
    }
    *state = st;
    return NULL;
}

/* ---- the plan ------------------------------------------------------------
 */

typedef enum rs_step_kind {
    STEP_SKIP = 0, /* identity */
    STEP_STRIDED,  /* idx[j] = off + (j / repeat) * step */
    STEP_GATHER,   /* nearest, indices computed on the device */
    STEP_LINEAR,
} rs_step_kind;

typedef struct rs_axis {
    int64_t in, out;
    double scale;
    rs_step_kind kind;
    int64_t off, step, repeat; /* STEP_STRIDED */
    /* Device coordinates x(j) = (j * m + p) / d + q, clamped to [0, in-1];
     * nearest adds its rounding into q and then takes ceil or floor. */
    float m, p, d, q;
    bool ceil;
} rs_axis;

typedef struct rs_plan {
    int rank;
    size_t elem;
    osp_datatype dtype;
    int64_t in_dims[OSP_MAX_DIMS];
    osp_shape y;
    rs_axis ax[OSP_MAX_DIMS];
    int order[OSP_MAX_DIMS]; /* axes with a step, shrinking ones first */
    int n_steps;
    bool one_copy; /* every step strided: one copy_strided */
    /* workspace: two data buffers, two FP32 blend buffers, four FP32
     * vectors, two INT64 vectors, the scalars */
    size_t ws_data[2], ws_blend[2], ws_vec[4], ws_idx[2], ws_scalars;
    size_t ws_bytes;
} rs_plan;

/* The reference's input coordinate of output j on one axis. */
static double rs_coord_of(const resize_state *st, const rs_axis *a, int64_t j) {
    double s = a->scale, x = (double)j, in = (double)a->in;
    double width = s * in; /* the reference's output_width */
    switch (st->coord) {
    case CT_HALF_PIXEL:
        return (x + 0.5) / s - 0.5;
    case CT_HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)a->out / width;
        double offset = in / 2 * (1 - adjustment);
        return offset + (x + 0.5) / s - 0.5;
    }
    case CT_PYTORCH_HALF_PIXEL:
        return width == 1.0 ? -0.5 : (x + 0.5) / s - 0.5;
    case CT_ALIGN_CORNERS:
        return width == 1.0 ? 0.0 : x * (in - 1) / (width - 1);
    case CT_TF_HALF_PIXEL_FOR_NN:
        return (x + 0.5) / s;
    default:
        return x / s;
    }
}

/* Sets the device map (m, p, d, q) of an axis for the same formula. When
 * the scale is exactly out / in (sizes, stretched), the division is by
 * integers: (j * in + a * in) / out, exact where the reference is. */
static void rs_device_map(const resize_state *st, rs_axis *a, bool exact) {
    double s = a->scale, in = (double)a->in, width = s * in;
    double add = 0.0, q = 0.0;
    bool constant = false;
    switch (st->coord) {
    case CT_HALF_PIXEL:
        add = 0.5, q = -0.5;
        break;
    case CT_HALF_PIXEL_SYMMETRIC:
        add = 0.5;
        q = in / 2 * (1 - (double)a->out / width) - 0.5;
        break;
    case CT_PYTORCH_HALF_PIXEL:
        if (width == 1.0)
            constant = true, q = -0.5;
        else
            add = 0.5, q = -0.5;
        break;
    case CT_ALIGN_CORNERS:
        if (width == 1.0) {
            constant = true;
        } else {
            /* j * (in - 1) / (width - 1), width being out when exact */
            a->m = (float)(in - 1);
            a->p = 0.0f;
            a->d = exact ? (float)(a->out - 1) : (float)(width - 1);
            a->q = 0.0f;
            return;
        }
        break;
    case CT_TF_HALF_PIXEL_FOR_NN:
        add = 0.5;
        break;
    default:
        break;
    }
    if (constant) {
        a->m = a->p = 0.0f;
        a->d = 1.0f;
    } else if (exact) {
        a->m = (float)a->in;
        a->p = (float)(add * in);
        a->d = (float)a->out;
    } else {
        a->m = 1.0f;
        a->p = (float)add;
        a->d = (float)s;
    }
    a->q = (float)q;
}

/* Nearest rounding of x per the mode (ceil for SIMPLE when shrinking). */
static double rs_round_of(rs_round r, double x, bool shrinking) {
    switch (r) {
    case NR_ROUND_PREFER_FLOOR:
        return ceil(x - 0.5);
    case NR_ROUND_PREFER_CEIL:
        return floor(x + 0.5);
    case NR_FLOOR:
        return floor(x);
    case NR_CEIL:
        return ceil(x);
    default:
        return shrinking ? ceil(x) : floor(x);
    }
}

/* Decides one axis's step from its exact index table (and, for linear,
 * its fractions). */
static void rs_axis_step(const resize_state *st, rs_axis *a) {
    int64_t in = a->in, out = a->out;
    /* An axis of scale 1 keeps its size and its values whatever the
     * coordinate mode (ONNX's reference skips it; tf_half_pixel_for_nn
     * would otherwise shift it by half a pixel). */
    if (in == out && fabs(a->scale - 1.0) <= 1e-9) {
        a->kind = STEP_SKIP;
        return;
    }
    bool shrinking = a->scale < 1.0;
    bool pixels = true; /* every coordinate on a pixel (linear) */
    int64_t first = 0, prev = 0, run = 0, step = 0;
    bool strided = true, identity = in == out;
    for (int64_t j = 0; j < out; j++) {
        double x = rs_coord_of(st, a, j);
        int64_t idx;
        if (st->mode == RS_LINEAR) {
            if (x < 0)
                x = 0;
            if (x > (double)(in - 1))
                x = (double)(in - 1);
            double f = floor(x);
            if (x != f)
                pixels = false;
            idx = (int64_t)f;
        } else {
            double r = rs_round_of(st->round, x, shrinking);
            idx = r < 0 ? 0 : r > (double)(in - 1) ? in - 1 : (int64_t)r;
        }
        if (idx != j)
            identity = false;
        /* Fit idx[j] = first + (j / run) * step: run is the length of
         * the leading run of equal indices, step the jump after it. */
        if (j == 0) {
            first = prev = idx;
            run = 1;
        } else if (step == 0 && idx == prev && run == j) {
            run++;
        } else {
            if (step == 0 && run == j)
                step = idx - first;
            if (step < 0 || idx != first + (j / run) * step)
                strided = false;
        }
        prev = idx;
    }
    if (out > 0 && out % run != 0)
        strided = false;
    if (identity && (st->mode == RS_NEAREST || pixels)) {
        a->kind = STEP_SKIP;
    } else if (strided && (st->mode == RS_NEAREST || pixels)) {
        a->kind = STEP_STRIDED;
        a->off = first;
        a->step = step;
        a->repeat = run;
    } else {
        /* Linear on pixels that no stride reaches still blends (with
         * zero weights): device coordinates may miss an exact pixel by an
         * ulp, which floor would turn into the pixel before. */
        a->kind = st->mode == RS_LINEAR ? STEP_LINEAR : STEP_GATHER;
    }
}

/* Reads the FP32 scales of input i (n values) into out; an empty tensor
 * (Resize 11 and 12 with sizes) gives n = 0. */
static osp_error *read_scales(const onnx_node *node, size_t i,
                              const onnx_desc *d, double *out, size_t cap,
                              size_t *n) {
    int64_t count = onnx_shape_count(&d->shape);
    *n = 0;
    if (count == 0)
        return NULL;
    if (!d->host)
        return onnx_error_needs_values(node, i);
    if (d->dtype != OSP_TYPE_FP32)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu (scales) is %s, FP32 expected", i,
                               osp_datatype_wire_name(d->dtype));
    if ((uint64_t)count > cap)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input %zu (scales) has %lld values", i,
                               (long long)count);
    const float *v = d->host;
    for (int64_t k = 0; k < count; k++)
        out[k] = v[k];
    *n = (size_t)count;
    return NULL;
}

/* The output size and scale of every axis (Resize's and Upsample's rules:
 * floor(in * scale) from scales; sizes as given, scale out / in, or one
 * scale for all `axes` under keep_aspect_ratio_policy). *exact is set per
 * axis when the scale is exactly out / in. */
static osp_error *rs_sizes(const onnx_node *node, const resize_state *st,
                           size_t n_in, const onnx_desc *in, rs_plan *p,
                           bool exact[OSP_MAX_DIMS]) {
    int rank = p->rank;
    int axes[OSP_MAX_DIMS];
    int n_axes = rank;
    osp_error *err;
    if (st->n_axes) {
        bool seen[OSP_MAX_DIMS] = {false};
        n_axes = (int)st->n_axes;
        for (int i = 0; i < n_axes; i++) {
            if ((err = onnx_axis(node, st->axes[i], rank, &axes[i])))
                return err;
            if (seen[axes[i]])
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "attribute 'axes' repeats axis %d",
                                       axes[i]);
            seen[axes[i]] = true;
        }
    } else {
        for (int i = 0; i < rank; i++)
            axes[i] = i;
    }
    for (int d = 0; d < rank; d++) {
        p->ax[d].in = p->in_dims[d];
        p->ax[d].out = p->in_dims[d];
        p->ax[d].scale = 1.0;
        exact[d] = true;
    }
    double scales[OSP_MAX_DIMS];
    size_t n_scales = 0;
    if (st->n_attr_scales) {
        n_scales = st->n_attr_scales;
        for (size_t i = 0; i < n_scales; i++)
            scales[i] = st->attr_scales[i];
    } else if (st->scales_input >= 0 &&
               onnx_present(n_in, in, (size_t)st->scales_input)) {
        size_t i = (size_t)st->scales_input;
        if ((err =
                 read_scales(node, i, &in[i], scales, OSP_MAX_DIMS, &n_scales)))
            return err;
    }
    bool have_sizes =
        st->sizes_input >= 0 && onnx_present(n_in, in, (size_t)st->sizes_input);
    if (n_scales > 0) {
        if (have_sizes && onnx_shape_count(&in[st->sizes_input].shape) > 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "scales and sizes are both given; one is "
                                   "expected");
        if (n_scales != (size_t)n_axes)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "%zu scales for %d axes", n_scales, n_axes);
        for (int i = 0; i < n_axes; i++) {
            rs_axis *a = &p->ax[axes[i]];
            if (!(scales[i] > 0.0) || !isfinite(scales[i]))
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "scale %g of axis %d is not positive",
                                       scales[i], axes[i]);
            a->scale = scales[i];
            double o = floor(scales[i] * (double)a->in);
            if (o > (double)(INT64_C(1) << 40))
                return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                       "axis %d would have %g elements",
                                       axes[i], o);
            a->out = (int64_t)o;
            exact[axes[i]] = false;
        }
        return NULL;
    }
    if (!have_sizes)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "one of scales and sizes is required");
    int64_t sizes[OSP_MAX_DIMS];
    size_t n_sizes;
    size_t si = (size_t)st->sizes_input;
    if ((err =
             onnx_read_ints(node, si, &in[si], sizes, OSP_MAX_DIMS, &n_sizes)))
        return err;
    if (n_sizes != (size_t)n_axes)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "%zu sizes for %d axes", n_sizes, n_axes);
    for (int i = 0; i < n_axes; i++) {
        rs_axis *a = &p->ax[axes[i]];
        if (sizes[i] < 0 || sizes[i] > (INT64_C(1) << 40))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "size %lld of axis %d is out of range",
                                   (long long)sizes[i], axes[i]);
        if (a->in == 0 && sizes[i] != 0)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "axis %d is empty and cannot grow to %lld",
                                   axes[i], (long long)sizes[i]);
        a->out = sizes[i];
        a->scale = a->in ? (double)sizes[i] / (double)a->in : 1.0;
    }
    if (st->keep != KA_STRETCH) {
        double s = p->ax[axes[0]].scale;
        for (int i = 1; i < n_axes; i++) {
            double t = p->ax[axes[i]].scale;
            s = st->keep == KA_NOT_LARGER ? fmin(s, t) : fmax(s, t);
        }
        for (int i = 0; i < n_axes; i++) {
            rs_axis *a = &p->ax[axes[i]];
            a->scale = s;
            a->out = (int64_t)(s * (double)a->in + 0.5);
            exact[axes[i]] = false;
        }
    }
    return NULL;
}

static int64_t rs_count(const int64_t *dims, int rank) {
    int64_t c = 1;
    for (int d = 0; d < rank; d++)
        c *= dims[d];
    return c;
}

static osp_error *rs_plan_make(const onnx_node *node, const resize_state *st,
                               size_t n_in, const onnx_desc *in, rs_plan *p) {
    memset(p, 0, sizeof *p);
    if (!onnx_present(n_in, in, 0))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input X is required");
    const osp_shape *x = &in[0].shape;
    p->rank = x->rank;
    p->dtype = in[0].dtype;
    p->elem = osp_datatype_byte_size(p->dtype);
    memcpy(p->in_dims, x->dims, sizeof p->in_dims);
    osp_error *err = onnx_want_fixed_size(node, p->dtype, "input 0");
    if (err)
        return err;
    if (st->mode == RS_LINEAR && p->dtype != OSP_TYPE_FP32)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "linear mode on %s: FP32 only",
                               osp_datatype_wire_name(p->dtype));
    bool exact[OSP_MAX_DIMS];
    err = rs_sizes(node, st, n_in, in, p, exact);
    if (err)
        return err;
    p->y = *x;
    for (int d = 0; d < p->rank; d++)
        p->y.dims[d] = p->ax[d].out;
    if ((err = onnx_check_shape(node, &p->y, p->dtype)))
        return err;
    if (onnx_shape_count(&p->y) == 0)
        return NULL;
    /* Steps, shrinking axes first. */
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < p->rank; d++) {
            rs_axis *a = &p->ax[d];
            if (pass == 0) {
                if (st->antialias && st->mode == RS_LINEAR && a->scale < 1.0)
                    return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                                           "attribute 'antialias' = 1 when "
                                           "linear resizing shrinks axis %d",
                                           d);
                rs_axis_step(st, a);
                rs_device_map(st, a, exact[d]);
                if (st->mode == RS_NEAREST) {
                    bool shrinking = a->scale < 1.0;
                    switch (st->round) {
                    case NR_ROUND_PREFER_FLOOR:
                        a->q -= 0.5f, a->ceil = true;
                        break;
                    case NR_ROUND_PREFER_CEIL:
                        a->q += 0.5f;
                        break;
                    case NR_CEIL:
                        a->ceil = true;
                        break;
                    case NR_SIMPLE:
                        a->ceil = shrinking;
                        break;
                    default:
                        break;
                    }
                }
            }
            bool shrink = a->out < a->in;
            if (a->kind != STEP_SKIP && (pass == 0) == shrink) {
                p->order[p->n_steps++] = d;
            }
        }
    p->one_copy = 2 * p->rank <= OSP_MAX_DIMS;
    for (int i = 0; i < p->n_steps; i++)
        if (p->ax[p->order[i]].kind != STEP_STRIDED)
            p->one_copy = false;
    if (p->one_copy || p->n_steps == 0)
        return NULL;
    /* The largest intermediate, the largest output axis, and whether a
     * linear step needs blend buffers. */
    int64_t dims[OSP_MAX_DIMS];
    memcpy(dims, p->in_dims, sizeof dims);
    int64_t max_mid = 0, max_out = 1;
    bool linear = false;
    for (int i = 0; i < p->n_steps; i++) {
        rs_axis *a = &p->ax[p->order[i]];
        dims[p->order[i]] = a->out;
        int64_t c = rs_count(dims, p->rank);
        if (i + 1 < p->n_steps || a->kind == STEP_LINEAR)
            max_mid = c > max_mid ? c : max_mid;
        if (a->out > max_out)
            max_out = a->out;
        linear |= a->kind == STEP_LINEAR;
    }
    size_t off = 0;
    size_t data = onnx_align64((size_t)max_mid * p->elem);
    size_t vec = onnx_align64((size_t)max_out * sizeof(float));
    size_t idx = onnx_align64((size_t)max_out * sizeof(int64_t));
    for (int i = 0; i < 2; i++) {
        p->ws_data[i] = off;
        off += data;
    }
    if (linear)
        for (int i = 0; i < 2; i++) {
            p->ws_blend[i] = off;
            off += onnx_align64((size_t)max_mid * sizeof(float));
        }
    for (int i = 0; i < 4; i++) {
        p->ws_vec[i] = off;
        off += vec;
    }
    for (int i = 0; i < 2; i++) {
        p->ws_idx[i] = off;
        off += idx;
    }
    p->ws_scalars = off;
    off += 64;
    p->ws_bytes = off;
    return NULL;
}

osp_error *onnx_nn__resize_infer(onnx_infer_ctx *ctx) {
    rs_plan p;
    osp_error *err =
        rs_plan_make(ctx->node, ctx->state, ctx->n_inputs, ctx->inputs, &p);
    if (err)
        return err;
    ctx->outputs[0].dtype = p.dtype;
    ctx->outputs[0].shape = p.y;
    ctx->workspace_bytes = p.ws_bytes;
    return NULL;
}

/* ---- run -----------------------------------------------------------------
 */

/* The whole resize as one copy_strided: every axis a view of the input,
 * split in [out / repeat, repeat] (stride 0 for the repeat) where it
 * repeats. */
static osp_error *rs_one_copy(osp_stream *s, const rs_plan *p, const void *x,
                              void *y) {
    osp_copy_strided_args c = {.elem_size = p->elem, .dst = y};
    int64_t in_stride[OSP_MAX_DIMS];
    int64_t st = 1, src_off = 0;
    for (int d = p->rank - 1; d >= 0; d--) {
        in_stride[d] = st;
        st *= p->in_dims[d];
    }
    int r = 0;
    for (int d = 0; d < p->rank; d++) {
        const rs_axis *a = &p->ax[d];
        if (a->kind != STEP_STRIDED) {
            c.dims[r] = a->out;
            c.src_strides[r++] = in_stride[d];
            continue;
        }
        src_off += a->off * in_stride[d];
        c.dims[r] = a->out / a->repeat;
        c.src_strides[r++] = a->step * in_stride[d];
        if (a->repeat > 1) {
            c.dims[r] = a->repeat;
            c.src_strides[r++] = 0;
        }
    }
    c.rank = r;
    int64_t ds = 1;
    for (int i = r - 1; i >= 0; i--) {
        c.dst_strides[i] = ds;
        ds *= c.dims[i];
    }
    if (r == 0) {
        c.rank = 1;
        c.dims[0] = 1;
        c.src_strides[0] = c.dst_strides[0] = 1;
    }
    c.src = (const char *)x + (size_t)src_off * p->elem;
    return osp_op_copy_strided(s, &c);
}

/* One axis as a strided copy from [outer, in, inner] to [outer, out,
 * inner]. */
static osp_error *rs_step_strided(osp_stream *s, const rs_plan *p,
                                  const rs_axis *a, int64_t outer,
                                  int64_t inner, const void *src, void *dst) {
    int64_t groups = a->out / a->repeat;
    osp_copy_strided_args c = {
        .elem_size = p->elem,
        .rank = 4,
        .dims = {outer, groups, a->repeat, inner},
        .src = (const char *)src + (size_t)(a->off * inner) * p->elem,
        .src_strides = {a->in * inner, a->step * inner, 0, 1},
        .dst = dst,
        .dst_strides = {a->out * inner, a->repeat * inner, inner, 1},
    };
    return osp_op_copy_strided(s, &c);
}

static osp_error *rs_unary(osp_stream *s, osp_unary_op op, float *x, int64_t n,
                           float alpha, float beta) {
    osp_unary_args u = {
        .op = op,
        .dtype = OSP_TYPE_FP32,
        .x = x,
        .y = x,
        .n = (size_t)n,
        .alpha = alpha,
        .beta = beta,
    };
    return osp_op_unary(s, &u);
}

/* The device coordinates of an axis, clamped to [0, in - 1], into v0 or
 * v1 (*res says which); the other is scratch. scal holds 3 floats of
 * scratch. */
static osp_error *rs_coords(osp_stream *s, const rs_axis *a, float *v0,
                            float *v1, float *scal, float **res) {
    int64_t n = a->out;
    osp_error *err;
    if ((err = onnx_fill_f32(s, v1, (size_t)n, a->m)) ||
        (err = onnx_fill_f32(s, v1, 1, a->p)))
        return err;
    osp_cumsum_args cs = {
        .dtype = OSP_TYPE_FP32,
        .x = v1,
        .y = v0,
        .outer = 1,
        .n = n,
        .inner = 1,
    };
    if ((err = osp_op_cumsum(s, &cs)))
        return err;
    float *cur = v0, *other = v1;
    if (a->d != 1.0f) {
        if ((err = onnx_fill_f32(s, scal, 1, a->d)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_DIV, OSP_TYPE_FP32, cur,
                                    false, scal, true, other, n)))
            return err;
        float *t = cur;
        cur = other, other = t;
    }
    if (a->q != 0.0f) {
        if ((err = onnx_fill_f32(s, scal + 1, 1, a->q)) ||
            (err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, OSP_TYPE_FP32, cur,
                                    false, scal + 1, true, other, n)))
            return err;
        float *t = cur;
        cur = other, other = t;
    }
    if ((err = rs_unary(s, OSP_UNARY_CLIP, cur, n, 0.0f, (float)(a->in - 1))))
        return err;
    *res = cur;
    return NULL;
}

static osp_error *rs_cast_idx(osp_stream *s, const float *v, int64_t *idx,
                              int64_t n) {
    return osp_op_cast(s, v, OSP_TYPE_FP32, idx, OSP_TYPE_INT64, (size_t)n);
}

static osp_error *rs_gather(osp_stream *s, const rs_plan *p, const void *src,
                            int64_t outer, int64_t axis_len, int64_t inner,
                            const int64_t *idx, int64_t n, void *dst) {
    osp_gather_args g = {
        .elem_size = p->elem,
        .data = src,
        .outer = outer,
        .axis_len = axis_len,
        .inner = inner,
        .index_dtype = OSP_TYPE_INT64,
        .indices = idx,
        .n_indices = n,
        .out = dst,
    };
    return osp_op_gather(s, &g);
}

osp_error *onnx_nn__resize_run(onnx_run_ctx *ctx) {
    rs_plan p;
    osp_error *err =
        rs_plan_make(ctx->node, ctx->state, ctx->n_inputs, ctx->in_desc, &p);
    if (err)
        return err;
    osp_stream *s = ctx->stream;
    int64_t y_count = onnx_shape_count(&p.y);
    if (y_count == 0)
        return NULL;
    if (p.one_copy || p.n_steps == 0)
        return rs_one_copy(s, &p, ctx->in[0], ctx->out[0]);
    char *ws = ctx->workspace;
    float *vec[4];
    int64_t *idx[2];
    for (int i = 0; i < 4; i++)
        vec[i] = (float *)(ws + p.ws_vec[i]);
    for (int i = 0; i < 2; i++)
        idx[i] = (int64_t *)(ws + p.ws_idx[i]);
    float *scal = (float *)(ws + p.ws_scalars);
    int64_t dims[OSP_MAX_DIMS];
    memcpy(dims, p.in_dims, sizeof dims);
    const void *src = ctx->in[0];
    for (int i = 0; i < p.n_steps; i++) {
        int d = p.order[i];
        const rs_axis *a = &p.ax[d];
        int64_t outer = rs_count(dims, d);
        int64_t inner = rs_count(dims + d + 1, p.rank - d - 1);
        void *dst = i + 1 == p.n_steps ? ctx->out[0] : ws + p.ws_data[i % 2];
        int64_t n_out = outer * a->out * inner;
        if (a->kind == STEP_STRIDED) {
            err = rs_step_strided(s, &p, a, outer, inner, src, dst);
        } else if (a->kind == STEP_GATHER) {
            float *c;
            if (!(err = rs_coords(s, a, vec[0], vec[1], scal, &c)) &&
                !(err = rs_unary(s, a->ceil ? OSP_UNARY_CEIL : OSP_UNARY_FLOOR,
                                 c, a->out, 0.0f, 0.0f)) &&
                !(err = rs_cast_idx(s, c, idx[0], a->out)))
                err = rs_gather(s, &p, src, outer, a->in, inner, idx[0], a->out,
                                dst);
        } else {
            /* x clamped; f0 = floor(x); w = x - f0; f1 = min(f0 + 1, in-1);
             * y = A + (B - A) * w with A, B the rows at f0 and f1. */
            float *c, *f0 = vec[2], *w = vec[3];
            float *A = (float *)(ws + p.ws_blend[0]);
            float *B = (float *)(ws + p.ws_blend[1]);
            if ((err = rs_coords(s, a, vec[0], vec[1], scal, &c)))
                return err;
            float *f1 = c == vec[0] ? vec[1] : vec[0];
            osp_unary_args fl = {
                .op = OSP_UNARY_FLOOR,
                .dtype = OSP_TYPE_FP32,
                .x = c,
                .y = f0,
                .n = (size_t)a->out,
            };
            if ((err = onnx_fill_f32(s, scal + 2, 1, 1.0f)) ||
                (err = osp_op_unary(s, &fl)) ||
                (err = onnx_binary_flat(s, OSP_BINARY_ND_SUB, OSP_TYPE_FP32, c,
                                        false, f0, false, w, a->out)) ||
                (err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, OSP_TYPE_FP32, f0,
                                        false, scal + 2, true, f1, a->out)) ||
                (err = rs_unary(s, OSP_UNARY_CLIP, f1, a->out, 0.0f,
                                (float)(a->in - 1))) ||
                (err = rs_cast_idx(s, f0, idx[0], a->out)) ||
                (err = rs_cast_idx(s, f1, idx[1], a->out)) ||
                (err = rs_gather(s, &p, src, outer, a->in, inner, idx[0],
                                 a->out, A)) ||
                (err = rs_gather(s, &p, src, outer, a->in, inner, idx[1],
                                 a->out, B)) ||
                (err = onnx_binary_flat(s, OSP_BINARY_ND_SUB, OSP_TYPE_FP32, B,
                                        false, A, false, dst, n_out)))
                return err;
            osp_binary_nd_args mul = {
                .op = OSP_BINARY_ND_MUL,
                .dtype = OSP_TYPE_FP32,
                .rank = 3,
                .dims = {outer, a->out, inner},
                .a = dst,
                .a_strides = {a->out * inner, inner, 1},
                .b = w,
                .b_strides = {0, 1, 0},
                .out = B,
            };
            if ((err = osp_op_binary_nd(s, &mul)))
                return err;
            err = onnx_binary_flat(s, OSP_BINARY_ND_ADD, OSP_TYPE_FP32, A,
                                   false, B, false, dst, n_out);
        }
        if (err)
            return err;
        dims[d] = a->out;
        src = dst;
    }
    return NULL;
}
