/*
 * The nn family's table (convolution, pooling, normalisation, resizing)
 * and the helpers its files share (onnx_ops_nn.h): the check of X and the
 * window geometry of conv and pool. The ops themselves are in
 * onnx_ops_conv.c, onnx_ops_pool.c, onnx_ops_norm.c and onnx_ops_resize.c.
 * Entries whose semantics change with the opset (BatchNormalization's
 * spatial and training_mode, Resize's inputs and coordinate modes) branch
 * on node->opset inside one entry.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops_nn.h"

osp_error *onnx_nn__want_nc(const onnx_node *node, size_t n_in,
                            const onnx_desc *in, int64_t *batch,
                            int64_t *channels, int64_t *spatial) {
    if (!onnx_present(n_in, in, 0))
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input X is required");
    osp_error *err = onnx_want_fp32(node, &in[0], 0);
    if (err)
        return err;
    const osp_shape *x = &in[0].shape;
    if (x->rank < 2)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "input X has rank %d; [N, C, ...] expected",
                               x->rank);
    if (batch)
        *batch = x->dims[0];
    if (channels)
        *channels = x->dims[1];
    if (spatial)
        *spatial = onnx_shape_span(x, 2, x->rank);
    return NULL;
}

/* ---- windows ------------------------------------------------------------
 */

/* Reads the INTS attribute `name` (at most `cap` values, each >= min) into
 * out; *n = 0 when absent. */
static osp_error *window_ints(const onnx_node *node, const char *name,
                              size_t cap, int64_t min, int64_t *out,
                              size_t *n) {
    const int64_t *v;
    osp_error *err = onnx_attr_ints(node, name, &v, n);
    if (err)
        return err;
    if (*n > cap)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "attribute '%s' has %zu values: more than %d "
                               "spatial dimensions are not supported",
                               name, *n, OSP_CONV_MAX_SPATIAL);
    for (size_t i = 0; i < *n; i++) {
        if (v[i] < min)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "attribute '%s'[%zu] = %lld is below %lld",
                                   name, i, (long long)v[i], (long long)min);
        out[i] = v[i];
    }
    return NULL;
}

osp_error *onnx_nn__window_read(const onnx_node *node, bool with_ceil,
                                onnx_nn_window *w) {
    memset(w, 0, sizeof *w);
    const char *ap;
    osp_error *err = onnx_attr_string(node, "auto_pad", "NOTSET", &ap);
    if (err)
        return err;
    if (strcmp(ap, "NOTSET") == 0 || ap[0] == '\0')
        w->auto_pad = ONNX_NN_PAD_NOTSET;
    else if (strcmp(ap, "SAME_UPPER") == 0)
        w->auto_pad = ONNX_NN_PAD_SAME_UPPER;
    else if (strcmp(ap, "SAME_LOWER") == 0)
        w->auto_pad = ONNX_NN_PAD_SAME_LOWER;
    else if (strcmp(ap, "VALID") == 0)
        w->auto_pad = ONNX_NN_PAD_VALID;
    else
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'auto_pad' = '%s' is not NOTSET, "
                               "SAME_UPPER, SAME_LOWER or VALID",
                               ap);
    if ((err = window_ints(node, "kernel_shape", OSP_CONV_MAX_SPATIAL, 1,
                           w->kernel, &w->n_kernel)) ||
        (err = window_ints(node, "strides", OSP_CONV_MAX_SPATIAL, 1, w->strides,
                           &w->n_strides)) ||
        (err = window_ints(node, "dilations", OSP_CONV_MAX_SPATIAL, 1,
                           w->dilations, &w->n_dilations)) ||
        (err = window_ints(node, "pads", 2 * OSP_CONV_MAX_SPATIAL, 0, w->pads,
                           &w->n_pads)))
        return err;
    if (w->n_pads % 2 != 0)
        return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                               "attribute 'pads' has %zu values, an even "
                               "count expected",
                               w->n_pads);
    if (with_ceil) {
        int64_t ceil_mode;
        if ((err = onnx_attr_int(node, "ceil_mode", 0, &ceil_mode)))
            return err;
        w->ceil_mode = ceil_mode != 0;
    }
    return NULL;
}

/* INVALID_ARG unless an attribute of n values fits `rank` (n == want, or
 * absent). */
static osp_error *window_len(const onnx_node *node, const char *name, size_t n,
                             size_t want) {
    if (n == 0 || n == want)
        return NULL;
    return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                           "attribute '%s' has %zu values, %zu expected for "
                           "the input's spatial rank",
                           name, n, want);
}

osp_error *onnx_nn__window_geom(const onnx_node *node, const onnx_nn_window *w,
                                int rank, const int64_t *in,
                                const int64_t *kernel, onnx_nn_geom *g) {
    osp_error *err;
    if (rank < 1 || rank > OSP_CONV_MAX_SPATIAL)
        return onnx_node_error(node, OSP_ERROR_UNSUPPORTED,
                               "%d spatial dimensions: 1 to %d are supported",
                               rank, OSP_CONV_MAX_SPATIAL);
    if ((err = window_len(node, "strides", w->n_strides, (size_t)rank)) ||
        (err = window_len(node, "dilations", w->n_dilations, (size_t)rank)) ||
        (err = window_len(node, "pads", w->n_pads, 2 * (size_t)rank)))
        return err;
    memset(g, 0, sizeof *g);
    g->rank = rank;
    for (int d = 0; d < rank; d++) {
        int64_t k = kernel[d];
        int64_t s = w->n_strides ? w->strides[d] : 1;
        int64_t dl = w->n_dilations ? w->dilations[d] : 1;
        int64_t pb = w->n_pads ? w->pads[d] : 0;
        int64_t pe = w->n_pads ? w->pads[rank + d] : 0;
        int64_t n = in[d];
        if (n < 1)
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "spatial dimension %d of the input is "
                                   "%lld; at least 1 is needed",
                                   d, (long long)n);
        if (k < 1 || k > (INT64_C(1) << 31) || dl > (INT64_C(1) << 31) ||
            pb > (INT64_C(1) << 40) || pe > (INT64_C(1) << 40) ||
            s > (INT64_C(1) << 40))
            return onnx_node_error(node, OSP_ERROR_INVALID_ARG,
                                   "spatial dimension %d: kernel %lld, pads "
                                   "%lld/%lld or stride %lld out of range",
                                   d, (long long)k, (long long)pb,
                                   (long long)pe, (long long)s);
        int64_t span = (k - 1) * dl + 1; /* the dilated window */
        int64_t out;
        switch (w->auto_pad) {
        case ONNX_NN_PAD_SAME_UPPER:
        case ONNX_NN_PAD_SAME_LOWER: {
            out = (n + s - 1) / s;
            int64_t total = (out - 1) * s + span - n;
            if (total < 0)
                total = 0;
            pb = w->auto_pad == ONNX_NN_PAD_SAME_UPPER ? total / 2
                                                       : total - total / 2;
            pe = total - pb;
            break;
        }
        default: {
            if (w->auto_pad == ONNX_NN_PAD_VALID)
                pb = pe = 0; /* VALID is NOTSET without pads */
            int64_t room = n + pb + pe - span;
            if (room < 0)
                return onnx_node_error(
                    node, OSP_ERROR_INVALID_ARG,
                    "spatial dimension %d: the window (%lld with dilation) "
                    "is larger than the padded input (%lld)",
                    d, (long long)span, (long long)(n + pb + pe));
            if (w->ceil_mode && w->auto_pad == ONNX_NN_PAD_NOTSET) {
                out = (room + s - 1) / s + 1;
                /* The last window must start inside the input or its
                 * leading pad (onnxruntime, PyTorch). */
                if ((out - 1) * s >= n + pb)
                    out--;
            } else {
                out = room / s + 1;
            }
            break;
        }
        }
        g->in[d] = n;
        g->out[d] = out;
        g->kernel[d] = k;
        g->stride[d] = s;
        g->dilation[d] = dl;
        g->pad_begin[d] = pb;
        g->pad_end[d] = pe;
    }
    return NULL;
}

/* ---- the table ----------------------------------------------------------
 */

#define END OSP_OP_KIND_COUNT_

/* One entry of the family: prepare keeps the attributes in a state from
 * malloc, infer and run read it. */
#define NN_OP(name, dom, from, prepare_fn, infer_fn, run_fn, ...)              \
    {                                                                          \
        .op_type = name, .domain = dom, .since = from, .prepare = prepare_fn,  \
        .free = free, .infer = infer_fn, .run = run_fn,                        \
        .uses = {__VA_ARGS__, END},                                            \
    }

#define POOL_OP(name)                                                          \
    NN_OP(name, "", 1, onnx_nn__pool_prepare, onnx_nn__pool_infer,             \
          onnx_nn__pool_run, OSP_OP_POOL, OSP_OP_PAD, OSP_OP_CAST,             \
          OSP_OP_FILL, OSP_OP_BINARY_ND)

#define GLOBAL_POOL_OP(name)                                                   \
    NN_OP(name, "", 1, onnx_nn__global_pool_prepare,                           \
          onnx_nn__global_pool_infer, onnx_nn__global_pool_run, OSP_OP_REDUCE, \
          OSP_OP_POOL)

#define RESIZE_OP(name, from, to)                                              \
    {                                                                          \
        .op_type = name, .domain = "", .since = from, .until = to,             \
        .prepare = onnx_nn__resize_prepare, .free = free,                      \
        .infer = onnx_nn__resize_infer, .run = onnx_nn__resize_run,            \
        .uses = {                                                              \
            OSP_OP_COPY_STRIDED, OSP_OP_GATHER, OSP_OP_FILL, OSP_OP_CUMSUM,    \
            OSP_OP_BINARY_ND,    OSP_OP_UNARY,  OSP_OP_CAST, END},             \
    }

/* Conv's state also holds the device's packed weights. */
#define CONV_OP(name, dom, ...)                                                \
    {                                                                          \
        .op_type = name, .domain = dom, .since = 1,                            \
        .prepare = onnx_nn__conv_prepare, .free = onnx_nn__conv_free,          \
        .infer = onnx_nn__conv_infer, .run = onnx_nn__conv_run,                \
        .uses = {__VA_ARGS__, END},                                            \
    }

static const onnx_op nn_ops[] = {
    /* the cast: FP16 tensors, and precision fp16's weights */
    CONV_OP("Conv", "", OSP_OP_CONV, OSP_OP_CAST),
    /* Conv + optional residual Z (input 3) + activation, made by the fusion
     * passes. */
    CONV_OP("FusedConv", "osprey", OSP_OP_CONV, OSP_OP_COPY_STRIDED,
            OSP_OP_BINARY_ND, OSP_OP_UNARY, OSP_OP_CAST),
    NN_OP("ConvTranspose", "", 1, onnx_nn__conv_transpose_prepare,
          onnx_nn__conv_transpose_infer, onnx_nn__conv_transpose_run,
          OSP_OP_CONV_TRANSPOSE, OSP_OP_CAST),
    POOL_OP("MaxPool"),
    POOL_OP("AveragePool"),
    POOL_OP("LpPool"),
    GLOBAL_POOL_OP("GlobalMaxPool"),
    GLOBAL_POOL_OP("GlobalAveragePool"),
    GLOBAL_POOL_OP("GlobalLpPool"),
    NN_OP("BatchNormalization", "", 7, onnx_nn__batch_norm_prepare,
          onnx_nn__batch_norm_infer, onnx_nn__batch_norm_run, OSP_OP_FILL,
          OSP_OP_BINARY_ND, OSP_OP_UNARY, OSP_OP_CHANNEL_AFFINE),
    NN_OP("InstanceNormalization", "", 1, onnx_nn__instance_norm_prepare,
          onnx_nn__instance_norm_infer, onnx_nn__instance_norm_run,
          OSP_OP_LAYER_NORM, OSP_OP_CHANNEL_AFFINE),
    NN_OP("LayerNormalization", "", 17, onnx_nn__layer_norm_prepare,
          onnx_nn__layer_norm_infer, onnx_nn__layer_norm_run, OSP_OP_LAYER_NORM,
          OSP_OP_COPY_STRIDED),
    /* Scale and bias per group at 18, per channel from 21. */
    NN_OP("GroupNormalization", "", 18, onnx_nn__group_norm_prepare,
          onnx_nn__group_norm_infer, onnx_nn__group_norm_run, OSP_OP_LAYER_NORM,
          OSP_OP_CHANNEL_AFFINE),
    NN_OP("LRN", "", 1, onnx_nn__lrn_prepare, onnx_nn__lrn_infer,
          onnx_nn__lrn_run, OSP_OP_BINARY_ND, OSP_OP_POOL, OSP_OP_FILL,
          OSP_OP_CHANNEL_AFFINE),
    /* Upsample: scales an attribute to 8, an input from 9 (deprecated at
     * 10, where Resize takes over; later opsets are served as 9). Resize: 10
     * (X, scales), 11 (X, roi, scales, sizes), 13 (roi and scales optional), 18
     * (axes, antialias, keep_aspect_ratio_policy), 19 (half_pixel_symmetric).
     */
    RESIZE_OP("Upsample", 1, 0),
    RESIZE_OP("Resize", 10, 0),
};

const onnx_op_family onnx_ops_nn_family = {
    .ops = nn_ops,
    .n_ops = sizeof nn_ops / sizeof nn_ops[0],
};
