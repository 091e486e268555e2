/*
 * The CPU device's tensor ops (osprey/tensor_ops.h), one family per file:
 *   cpu_ops_elementwise.c  unary, binary_nd, where
 *   cpu_ops_data.c         copy_strided, gather, fill, pad
 *   cpu_ops_reduce.c       reduce, softmax, layer_norm, channel_affine,
 *                          topk, cumsum
 *   cpu_ops_gemm.c         gemm_ex, gemm_prepack
 *   cpu_ops_conv.c         conv, conv_transpose, conv_prepack
 *   cpu_ops_pool.c         pool
 *   cpu_ops_index.c        scatter
 * cpu_device.c puts them in its table. Arguments arrive validated by the
 * dispatchers (tensor_ops.c, tensor_ops_nn.c, tensor_ops_index.c) and
 * describe at least one element; the CPU runs them synchronously.
 */
#pragma once

#include "osprey/device_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPU_OP(name, args_type)                                                \
    osp_error *cpu_op_##name(osp_device *dev, void *stream,                    \
                             const args_type *args)

CPU_OP(gemm_ex, osp_gemm_ex_args);
CPU_OP(unary, osp_unary_args);
CPU_OP(binary_nd, osp_binary_nd_args);
CPU_OP(where, osp_where_args);
CPU_OP(copy_strided, osp_copy_strided_args);
CPU_OP(gather, osp_gather_args);
CPU_OP(fill, osp_fill_args);
CPU_OP(pad, osp_pad_args);
CPU_OP(reduce, osp_reduce_args);
CPU_OP(softmax, osp_softmax_args);
CPU_OP(layer_norm, osp_layer_norm_args);
CPU_OP(channel_affine, osp_channel_affine_args);
CPU_OP(conv, osp_conv_args);
CPU_OP(conv_transpose, osp_conv_transpose_args);
CPU_OP(pool, osp_pool_args);
CPU_OP(topk, osp_topk_args);
CPU_OP(cumsum, osp_cumsum_args);
CPU_OP(scatter, osp_scatter_args);

#undef CPU_OP

osp_error *cpu_op_gemm_prepack(osp_device *dev, void *stream,
                               const osp_gemm_ex_args *args,
                               osp_packed_weights **out);
osp_error *cpu_op_conv_prepack(osp_device *dev, void *stream,
                               const osp_conv_args *args,
                               osp_packed_weights **out);
void cpu_op_packed_weights_free(osp_device *dev, osp_packed_weights *packed);

/* Whether conv may take its direct route (stride-1 convs read through
 * row offsets into a padded copy, no im2col; cpu_ops_conv.c), on by
 * default; off, they take im2col + GEMM as before. Process-wide, for the
 * tests and micro-benchmarks that compare the two; not while a conv runs. */
void cpu_conv_direct_enable(bool on);

#ifdef __cplusplus
}
#endif
