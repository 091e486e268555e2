/*
 * The CUDA device's elementwise tensor-op slots (osprey/tensor_ops.h):
 * unary, binary_nd, where. Each enqueues its kernel
 * (kernels_unary.cu, kernels_broadcast.cu) on the stream; the dispatcher
 * validated the args.
 */
#include "cuda_check.h"
#include "cuda_internal.h"
#include "kernels.h"

CUDA_TENSOR_OP_SLOT(unary, osp_unary_args, cuda_launch_unary)
CUDA_TENSOR_OP_SLOT(binary_nd, osp_binary_nd_args, cuda_launch_binary_nd)
CUDA_TENSOR_OP_SLOT(where, osp_where_args, cuda_launch_where)
