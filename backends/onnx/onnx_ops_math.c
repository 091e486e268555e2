/*
 * The math family's table (matrix products, reductions, softmax,
 * selection and scans). The ops themselves are in onnx_ops_matmul.c,
 * onnx_ops_einsum.c, onnx_ops_reduce.c and onnx_ops_softmax.c. Entries
 * whose semantics change with the opset (Reduce* axes as an input,
 * Softmax's 2-D coercion, TopK's k as an input) branch on node->opset
 * inside one entry.
 */
#include <stdlib.h>

#include "onnx_ops_math.h"

#define END OSP_OP_KIND_COUNT_

/* One entry of the family: prepare keeps the attributes in a state from
 * malloc, infer and run read it. */
#define MATH_OP(name, dom, from, prepare_fn, infer_fn, run_fn, ...)            \
    {                                                                          \
        .op_type = name, .domain = dom, .since = from, .prepare = prepare_fn,  \
        .free = free, .infer = infer_fn, .run = run_fn,                        \
        .uses = {__VA_ARGS__, END},                                            \
    }

/* One Reduce* entry: axes as an attribute or (ReduceSum from 13, the
 * others from 18) as input 1, decided in prepare from node->opset. */
#define REDUCE_OP(name)                                                        \
    MATH_OP(name, "", 1, onnx_math__reduce_prepare, onnx_math__reduce_infer,   \
            onnx_math__reduce_run, OSP_OP_REDUCE, OSP_OP_COPY_STRIDED)

/* MatMul and Gemm: their states hold packed weights. */
#define PRODUCT_OP(name, dom, kind, ...)                                       \
    {                                                                          \
        .op_type = name, .domain = dom, .since = 1,                            \
        .prepare = onnx_math__##kind##_prepare,                                \
        .free = onnx_math__##kind##_free, .infer = onnx_math__##kind##_infer,  \
        .run = onnx_math__##kind##_run, .uses = {__VA_ARGS__, END},            \
    }

static const onnx_op math_ops[] = {
    /* the casts are precision fp16's (onnx_ops_matmul.c) */
    PRODUCT_OP("MatMul", "", matmul, OSP_OP_GEMM_EX, OSP_OP_CAST),
    PRODUCT_OP("FusedMatMul", "osprey", matmul, OSP_OP_GEMM_EX, OSP_OP_CAST),
    PRODUCT_OP("Gemm", "", gemm, OSP_OP_GEMM_EX, OSP_OP_COPY_STRIDED,
               OSP_OP_CAST),
    PRODUCT_OP("FusedGemm", "osprey", gemm, OSP_OP_GEMM_EX, OSP_OP_COPY_STRIDED,
               OSP_OP_CAST),
    MATH_OP("Einsum", "", 12, onnx_math__einsum_prepare,
            onnx_math__einsum_infer, onnx_math__einsum_run, OSP_OP_GEMM_EX,
            OSP_OP_COPY_STRIDED, OSP_OP_REDUCE, OSP_OP_FILL, OSP_OP_CAST),
    REDUCE_OP("ReduceSum"),
    REDUCE_OP("ReduceMean"),
    REDUCE_OP("ReduceMax"),
    REDUCE_OP("ReduceMin"),
    REDUCE_OP("ReduceProd"),
    REDUCE_OP("ReduceL1"),
    REDUCE_OP("ReduceL2"),
    REDUCE_OP("ReduceLogSum"),
    REDUCE_OP("ReduceLogSumExp"),
    REDUCE_OP("ReduceSumSquare"),
    MATH_OP("ArgMax", "", 1, onnx_math__arg_prepare, onnx_math__arg_infer,
            onnx_math__arg_run, OSP_OP_REDUCE),
    MATH_OP("ArgMin", "", 1, onnx_math__arg_prepare, onnx_math__arg_infer,
            onnx_math__arg_run, OSP_OP_REDUCE),
    MATH_OP("Softmax", "", 1, onnx_math__softmax_prepare,
            onnx_math__softmax_infer, onnx_math__softmax_run, OSP_OP_SOFTMAX),
    MATH_OP("LogSoftmax", "", 1, onnx_math__softmax_prepare,
            onnx_math__softmax_infer, onnx_math__softmax_run, OSP_OP_SOFTMAX),
    /* argmax, then a one-hot built from an iota (fill + exclusive cumsum),
     * an equality and a cast */
    MATH_OP("Hardmax", "", 1, onnx_math__softmax_prepare,
            onnx_math__softmax_infer, onnx_math__hardmax_run, OSP_OP_REDUCE,
            OSP_OP_FILL, OSP_OP_CUMSUM, OSP_OP_BINARY_ND, OSP_OP_CAST),
    MATH_OP("TopK", "", 1, onnx_math__topk_prepare, onnx_math__topk_infer,
            onnx_math__topk_run, OSP_OP_TOPK),
    MATH_OP("CumSum", "", 11, onnx_math__cumsum_prepare,
            onnx_math__cumsum_infer, onnx_math__cumsum_run, OSP_OP_CUMSUM),
};

const onnx_op_family onnx_ops_math_family = {
    .ops = math_ops,
    .n_ops = sizeof math_ops / sizeof math_ops[0],
};
