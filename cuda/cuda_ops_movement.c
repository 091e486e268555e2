/*
 * The CUDA device's data-movement, index and scan tensor-op slots
 * (osprey/tensor_ops.h): copy_strided, fill, pad (kernels_movement.cu),
 * gather, scatter (kernels_index.cu), topk, cumsum (kernels_select.cu).
 * Each enqueues its kernel on the stream; the dispatcher validated the
 * args. gather and scatter cannot report an index out of range before
 * returning (the indices are device memory): gather writes zeros for it,
 * scatter skips it, as the contract allows.
 */
#include "cuda_check.h"
#include "cuda_internal.h"
#include "kernels.h"

CUDA_TENSOR_OP_SLOT(copy_strided, osp_copy_strided_args,
                    cuda_launch_copy_strided)
CUDA_TENSOR_OP_SLOT(fill, osp_fill_args, cuda_launch_fill)
CUDA_TENSOR_OP_SLOT(pad, osp_pad_args, cuda_launch_pad)
CUDA_TENSOR_OP_SLOT(gather, osp_gather_args, cuda_launch_gather)
CUDA_TENSOR_OP_SLOT(scatter, osp_scatter_args, cuda_launch_scatter)
CUDA_TENSOR_OP_SLOT(topk, osp_topk_args, cuda_launch_topk)
CUDA_TENSOR_OP_SLOT(cumsum, osp_cumsum_args, cuda_launch_cumsum)
