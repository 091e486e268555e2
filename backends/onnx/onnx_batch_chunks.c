/*
 * Which plans may run their batch in chunks (onnx_rt_internal.h).
 *
 * On the CPU device a CNN's activations at batch 8 outgrow the last-level
 * cache (MobileNetV2: 55 MB of arena), so every layer streams its input
 * and output through memory; the same layers on chunks of the batch whose
 * arena fits in the cache cost 8-9% less per image. That is only right for
 * a graph whose every node treats dim 0 as independent samples, which
 * plan_batch_separable decides from a plan's concrete shapes: every node
 * is one of the ops below, reads the batch only as its dim 0 and writes
 * outputs with the same dim 0, and takes everything else from the model's
 * constants. Anything else (a Reshape, a Shape, a reduction or transpose
 * over dim 0, a constant broadcast along dim 0) keeps the batch whole.
 */
#include <stdio.h>
#include <stdbool.h>
#include <string.h>

#include "onnx_ops.h"
#include "onnx_rt_internal.h"

/* How a node may read its inputs and stay per-sample. */
typedef enum sample_kind {
    /* every input a batch tensor of the output's rank, or a constant
     * broadcast that does not span dim 0 (rank below the output's, or dim
     * 0 of 1) */
    SAMPLE_BROADCAST,
    /* input 0 the batch tensor, every other input a constant (weights,
     * bias, scales); FusedConv's residual (input 3) a batch tensor */
    SAMPLE_FIRST,
    /* every input a batch tensor (Concat) */
    SAMPLE_ALL,
} sample_kind;

static const struct {
    const char *op;
    sample_kind kind;
} separable_ops[] = {
    {"Add", SAMPLE_BROADCAST},
    {"Sub", SAMPLE_BROADCAST},
    {"Mul", SAMPLE_BROADCAST},
    {"Div", SAMPLE_BROADCAST},
    {"Max", SAMPLE_BROADCAST},
    {"Min", SAMPLE_BROADCAST},
    {"Sum", SAMPLE_BROADCAST},
    {"Relu", SAMPLE_BROADCAST},
    {"Clip", SAMPLE_BROADCAST},
    {"LeakyRelu", SAMPLE_BROADCAST},
    {"Sigmoid", SAMPLE_BROADCAST},
    {"HardSigmoid", SAMPLE_BROADCAST},
    {"HardSwish", SAMPLE_BROADCAST},
    {"Tanh", SAMPLE_BROADCAST},
    {"Gelu", SAMPLE_BROADCAST},
    {"Erf", SAMPLE_BROADCAST},
    {"Identity", SAMPLE_BROADCAST},
    {"Dropout", SAMPLE_BROADCAST},
    {"Conv", SAMPLE_FIRST},
    {"FusedConv", SAMPLE_FIRST},
    {"BatchNormalization", SAMPLE_FIRST},
    {"MaxPool", SAMPLE_FIRST},
    {"AveragePool", SAMPLE_FIRST},
    {"GlobalAveragePool", SAMPLE_FIRST},
    {"GlobalMaxPool", SAMPLE_FIRST},
    {"Flatten", SAMPLE_FIRST},
    {"Gemm", SAMPLE_FIRST},
    {"FusedGemm", SAMPLE_FIRST},
    {"MatMul", SAMPLE_FIRST},
    {"FusedMatMul", SAMPLE_FIRST},
    {"Softmax", SAMPLE_FIRST},
    {"LogSoftmax", SAMPLE_FIRST},
    {"Concat", SAMPLE_ALL},
};

static bool find_kind(const char *op, sample_kind *out) {
    for (size_t i = 0; i < sizeof separable_ops / sizeof *separable_ops; i++)
        if (strcmp(separable_ops[i].op, op) == 0) {
            *out = separable_ops[i].kind;
            return true;
        }
    return false;
}

/* Whether integer attribute `name` (default dflt), as an axis of a tensor
 * of `rank`, names an axis other than 0. */
static bool axis_not_batch(const onnx_node *node, const char *name,
                           int64_t dflt, int rank) {
    int64_t axis;
    osp_error *err = onnx_attr_int(node, name, dflt, &axis);
    if (err) {
        osp_error_free(err);
        return false;
    }
    if (axis < 0)
        axis += rank;
    return axis > 0;
}

/* The attribute conditions under which the op keeps samples apart. */
static bool attributes_per_sample(const onnx_node *node, int in_rank) {
    const char *op = node->op_type;
    if (strcmp(op, "Flatten") == 0)
        return axis_not_batch(node, "axis", 1, in_rank);
    if (strcmp(op, "Softmax") == 0 || strcmp(op, "LogSoftmax") == 0)
        return axis_not_batch(node, "axis", node->opset >= 13 ? -1 : 1,
                              in_rank);
    if (strcmp(op, "Concat") == 0)
        return axis_not_batch(node, "axis", 0, in_rank);
    if (strcmp(op, "Gemm") == 0 || strcmp(op, "FusedGemm") == 0) {
        int64_t trans_a;
        osp_error *err = onnx_attr_int(node, "transA", 0, &trans_a);
        osp_error_free(err);
        return !err && trans_a == 0;
    }
    if (strcmp(op, "BatchNormalization") == 0) {
        int64_t training;
        osp_error *err = onnx_attr_int(node, "training_mode", 0, &training);
        osp_error_free(err);
        return !err && training == 0;
    }
    return true;
}

static bool is_batch_tensor(const onnx_desc *d, int64_t batch) {
    return d->present && d->shape.rank >= 1 && d->shape.dims[0] == batch;
}

/* A constant of the model (not a value computed while planning, which
 * may depend on the batch) that broadcasting does not spread over dim 0
 * of an output of rank out_rank. */
static bool constant_off_batch(const onnx_rt_model *m, int v,
                               const onnx_desc *d, int out_rank) {
    return m->values[v].konst &&
           (d->shape.rank < out_rank || d->shape.dims[0] == 1);
}

static bool step_per_sample(const onnx_rt_model *m, const plan_step *step,
                            int64_t batch) {
    const rt_node *rn = &m->nodes[step->node];
    sample_kind kind;
    if (!find_kind(rn->node->op_type, &kind) || rn->n_out == 0)
        return false;
    int out_rank = step->out_desc[0].shape.rank;
    for (size_t k = 0; k < rn->n_out; k++)
        if (step->out_desc[k].present &&
            !is_batch_tensor(&step->out_desc[k], batch))
            return false;
    for (size_t k = 0; k < rn->n_in; k++) {
        const onnx_desc *d = &step->in_desc[k];
        int v = rn->in[k];
        if (v < 0 || !d->present)
            continue;
        bool batch_input = is_batch_tensor(d, batch) && !m->values[v].konst;
        bool ok;
        switch (kind) {
        case SAMPLE_BROADCAST:
            ok = (batch_input && d->shape.rank == out_rank) ||
                 constant_off_batch(m, v, d, out_rank);
            break;
        case SAMPLE_FIRST:
            if (k == 0 || (k == 3 && strcmp(rn->node->op_type,
                                             "FusedConv") == 0))
                ok = batch_input;
            else
                ok = m->values[v].konst != NULL;
            break;
        default: /* SAMPLE_ALL */
            ok = batch_input;
        }
        if (!ok)
            return false;
    }
    return attributes_per_sample(rn->node, step->in_desc[0].shape.rank);
}

int64_t rt_plan_separable_batch(const onnx_rt_model *m, const onnx_plan *p) {
    if (m->n_inputs == 0 || m->n_outputs == 0)
        return 0;
    int64_t batch = p->desc[m->inputs[0]].shape.dims[0];
    if (p->desc[m->inputs[0]].shape.rank < 1 || batch < 2)
        return 0;
    for (size_t i = 0; i < m->n_inputs; i++) {
        const onnx_desc *d = &p->desc[m->inputs[i]];
        if ((m->value_inputs && m->value_inputs[i]) ||
            d->dtype == OSP_TYPE_BYTES || !is_batch_tensor(d, batch))
            return 0;
    }
    for (size_t k = 0; k < m->n_outputs; k++) {
        int v = m->outputs[k];
        const onnx_desc *d = &p->desc[v];
        /* Outputs must come from the steps: one known while planning (a
         * constant, a graph input passed through) is not cut per chunk. */
        if (d->host || m->values[v].graph_input >= 0 ||
            m->values[v].producer < 0 || d->dtype == OSP_TYPE_BYTES ||
            !is_batch_tensor(d, batch))
            return 0;
    }
    for (size_t i = 0; i < p->n_steps; i++)
        if (!step_per_sample(m, &p->steps[i], batch))
            return 0;
    return batch;
}

/* The size of the CPU's last-level cache as Linux reports it for CPU 0
 * (sysfs; glibc's sysconf gives AMD's per-package total times the
 * threads here), or 0 when unknown. */
static size_t last_level_cache_bytes(void) {
    size_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 8; i++) {
        char path[80];
        int level = 0;
        unsigned long kib = 0;
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        bool got = fscanf(f, "%d", &level) == 1;
        fclose(f);
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!got || !(f = fopen(path, "r")))
            continue;
        if (fscanf(f, "%luK", &kib) == 1 && level > best_level) {
            best_level = level;
            best = (size_t)kib << 10;
        }
        fclose(f);
    }
    return best;
}

size_t rt_default_chunk_bytes(void) {
    /* Half the last-level cache: the other half holds the weights being
     * read and whatever the other instances touch. */
    size_t llc = last_level_cache_bytes();
    return llc ? llc / 2 : (size_t)8 << 20;
}
