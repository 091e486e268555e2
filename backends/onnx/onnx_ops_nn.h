/*
 * The nn op family, private to its files: onnx_ops_nn.c holds the one
 * family table (onnx_ops_nn_family), the helpers below and the window
 * geometry that conv and pool share; the ops live in
 *   onnx_ops_conv.c    Conv, ConvTranspose, osprey FusedConv
 *   onnx_ops_pool.c    MaxPool, AveragePool, LpPool, Global*Pool
 *   onnx_ops_norm.c    BatchNormalization, InstanceNormalization,
 *                      LayerNormalization, GroupNormalization, LRN
 *   onnx_ops_resize.c  Resize, Upsample
 * Every op keeps only attributes in its state; run recomputes the geometry
 * from its descs (cheap host arithmetic on shapes), so one state serves
 * every binding.
 */
#pragma once

#include "onnx_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks X, input 0 of the normalisations and global pools: INVALID_ARG
 * unless it is given with rank 2 or more ([N, C, ...]), UNSUPPORTED unless
 * it is FP32. Sets *batch to N, *channels to C and *spatial to the product
 * of the other dims, each when not NULL. */
osp_error *onnx_nn__want_nc(const onnx_node *node, size_t n_in,
                            const onnx_desc *in, int64_t *batch,
                            int64_t *channels, int64_t *spatial);

/* ---- conv and pool windows ----------------------------------------------
 */

typedef enum onnx_nn_auto_pad {
    ONNX_NN_PAD_NOTSET = 0,
    ONNX_NN_PAD_SAME_UPPER,
    ONNX_NN_PAD_SAME_LOWER,
    ONNX_NN_PAD_VALID,
} onnx_nn_auto_pad;

/* The window attributes of Conv, ConvTranspose and the pools, as read
 * (a count of 0 means the attribute is absent). Lengths are checked
 * against the spatial rank at infer, when it is known. */
typedef struct onnx_nn_window {
    onnx_nn_auto_pad auto_pad;
    size_t n_kernel, n_strides, n_dilations, n_pads;
    int64_t kernel[OSP_CONV_MAX_SPATIAL];
    int64_t strides[OSP_CONV_MAX_SPATIAL];
    int64_t dilations[OSP_CONV_MAX_SPATIAL];
    int64_t pads[2 * OSP_CONV_MAX_SPATIAL]; /* begins, then ends */
    bool ceil_mode;
} onnx_nn_window;

/* Reads auto_pad, kernel_shape, strides, dilations, pads (and ceil_mode
 * when with_ceil) into *w. More than 3 spatial dimensions is UNSUPPORTED;
 * a zero or negative kernel, stride or dilation, a negative pad or an
 * unknown auto_pad is INVALID_ARG. */
osp_error *onnx_nn__window_read(const onnx_node *node, bool with_ceil,
                                onnx_nn_window *w);

/* The geometry of one window op over `rank` spatial dimensions. */
typedef struct onnx_nn_geom {
    int rank;
    int64_t in[OSP_CONV_MAX_SPATIAL];
    int64_t out[OSP_CONV_MAX_SPATIAL];
    int64_t kernel[OSP_CONV_MAX_SPATIAL];
    int64_t stride[OSP_CONV_MAX_SPATIAL];
    int64_t dilation[OSP_CONV_MAX_SPATIAL];
    int64_t pad_begin[OSP_CONV_MAX_SPATIAL];
    int64_t pad_end[OSP_CONV_MAX_SPATIAL]; /* the attribute's (or auto) */
} onnx_nn_geom;

/* Output dims and pads of a conv or pool window (ONNX's rules: explicit
 * pads, SAME_UPPER/SAME_LOWER with out = ceil(in / stride), VALID, and
 * ceil_mode for explicit pads, where the last window must start inside
 * the input or its leading pad). `in` are the input's spatial dims,
 * `kernel` the kernel's (from W, or from kernel_shape). Checks attribute
 * lengths against rank; a window larger than the padded input or an
 * empty spatial input is INVALID_ARG naming the node. */
osp_error *onnx_nn__window_geom(const onnx_node *node, const onnx_nn_window *w,
                                int rank, const int64_t *in,
                                const int64_t *kernel, onnx_nn_geom *g);

/* ---- the ops ------------------------------------------------------------
 */

/* onnx_ops_conv.c */
osp_error *onnx_nn__conv_prepare(const onnx_node *node, void **state);
/* Frees conv_prepare's state and the packed weights it holds. */
void onnx_nn__conv_free(void *state);
osp_error *onnx_nn__conv_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__conv_run(onnx_run_ctx *ctx);
osp_error *onnx_nn__conv_transpose_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__conv_transpose_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__conv_transpose_run(onnx_run_ctx *ctx);

/* onnx_ops_pool.c */
osp_error *onnx_nn__pool_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__pool_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__pool_run(onnx_run_ctx *ctx);
osp_error *onnx_nn__global_pool_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__global_pool_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__global_pool_run(onnx_run_ctx *ctx);

/* onnx_ops_norm.c */
osp_error *onnx_nn__batch_norm_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__batch_norm_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__batch_norm_run(onnx_run_ctx *ctx);
osp_error *onnx_nn__instance_norm_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__instance_norm_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__instance_norm_run(onnx_run_ctx *ctx);
osp_error *onnx_nn__layer_norm_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__layer_norm_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__layer_norm_run(onnx_run_ctx *ctx);
osp_error *onnx_nn__group_norm_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__group_norm_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__group_norm_run(onnx_run_ctx *ctx);
osp_error *onnx_nn__lrn_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__lrn_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__lrn_run(onnx_run_ctx *ctx);

/* onnx_ops_resize.c */
osp_error *onnx_nn__resize_prepare(const onnx_node *node, void **state);
osp_error *onnx_nn__resize_infer(onnx_infer_ctx *ctx);
osp_error *onnx_nn__resize_run(onnx_run_ctx *ctx);

#ifdef __cplusplus
}
#endif
