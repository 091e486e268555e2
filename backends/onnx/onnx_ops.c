/*
 * The op registry: every family's table, searched by domain, op_type and
 * opset. Families are listed here once; a new op goes into its family's
 * table, a new family into `families`.
 */
#include <string.h>

#include "onnx_ops.h"

extern const onnx_op_family onnx_ops_elementwise_family; /* elementwise.c */
extern const onnx_op_family onnx_ops_shape_family;       /* shape.c */
extern const onnx_op_family onnx_ops_movement_family;    /* movement.c */
extern const onnx_op_family onnx_ops_nn_family;          /* nn.c, norm.c */
extern const onnx_op_family onnx_ops_math_family; /* matmul.c, reduce.c */
extern const onnx_op_family onnx_ops_rnn_family;  /* rnn.c */
/* extra.c, loss.c, quant.c, index.c */
extern const onnx_op_family onnx_ops_extra_family;

static const onnx_op_family *const families[] = {
    &onnx_ops_elementwise_family, &onnx_ops_shape_family,
    &onnx_ops_movement_family,    &onnx_ops_nn_family,
    &onnx_ops_math_family,        &onnx_ops_rnn_family,
    &onnx_ops_extra_family,
};

static bool same_domain(const char *a, const char *b) {
    if (strcmp(a, "ai.onnx") == 0)
        a = "";
    if (strcmp(b, "ai.onnx") == 0)
        b = "";
    return strcmp(a, b) == 0;
}

const onnx_op *onnx_op_find(const char *domain, const char *op_type,
                            int64_t opset) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        const onnx_op_family *fam = families[f];
        for (size_t i = 0; i < fam->n_ops; i++) {
            const onnx_op *op = &fam->ops[i];
            if (strcmp(op->op_type, op_type) == 0 &&
                same_domain(op->domain, domain) && opset >= op->since &&
                (op->until == 0 || opset <= op->until))
                return op;
        }
    }
    return NULL;
}

void onnx_op_each(void (*fn)(const onnx_op *op, void *ctx), void *ctx) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (size_t i = 0; i < families[f]->n_ops; i++)
            fn(&families[f]->ops[i], ctx);
}
