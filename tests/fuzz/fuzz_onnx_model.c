/*
 * libFuzzer target for the ONNX model loader (backends/onnx/onnx_loader.c,
 * onnx_wire.c, onnx_tensor_proto.c): the input is a model file given as
 * bytes (no folder, so external data is refused). Any input must give
 * either a model that keeps the promises of onnx_graph.h, or an
 * INVALID_ARG error (UNAVAILABLE: out of memory), without crashing,
 * leaking, recursing without bound or reading out of bounds. Build: see
 * README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const onnx_load_limits limits = {
    .max_file_bytes = 1u << 20,
    .max_tensor_bytes = 16u << 20,
    .max_nodes = 10000,
    .max_graph_depth = 8,
};

/* Reads the first and last byte of [p, p + n), so ASan checks the range. */
static void touch(const void *p, size_t n) {
    volatile uint8_t sink;
    if (n) {
        sink = ((const uint8_t *)p)[0];
        sink = ((const uint8_t *)p)[n - 1];
    }
    (void)sink;
}

static void check_string(const char *s) {
    if (!s)
        abort();
    touch(s, strlen(s) + 1);
}

static void check_tensor(const onnx_tensor *t) {
    if (t->dtype <= OSP_TYPE_INVALID || t->dtype >= OSP_TYPE_COUNT_)
        abort();
    if (t->shape.rank < 0 || t->shape.rank > OSP_MAX_DIMS)
        abort();
    if (!t->data || (uintptr_t)t->data % 64 != 0)
        abort();
    int64_t count;
    if (!osp_shape_element_count(&t->shape, &count) || count < 0)
        abort();
    if (t->byte_size > limits.max_tensor_bytes)
        abort();
    size_t elem = osp_datatype_byte_size(t->dtype);
    if (elem) {
        if ((uint64_t)count * elem != t->byte_size)
            abort();
    } else {
        /* BYTES: exactly `count` length-prefixed strings. */
        const uint8_t *p = t->data, *end = p + t->byte_size;
        for (int64_t i = 0; i < count; i++) {
            if (end - p < 4)
                abort();
            uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                           (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            p += 4;
            if ((size_t)(end - p) < len)
                abort();
            p += len;
        }
        if (p != end)
            abort();
    }
    touch(t->data, t->byte_size);
}

static void check_value_info(const onnx_value_info *v) {
    check_string(v->name);
    if (v->rank < 0 || v->rank > OSP_MAX_DIMS || (!v->has_shape && v->rank))
        abort();
    for (int i = 0; i < v->rank; i++) {
        if (v->dims[i] < -1 || (v->dim_params[i] && v->dims[i] != -1))
            abort();
        if (v->dim_params[i])
            check_string(v->dim_params[i]);
    }
}

static void check_graph(const onnx_graph *g, unsigned depth);

static void check_attr(const onnx_attr *a, unsigned depth) {
    check_string(a->name);
    switch (a->type) {
    case ONNX_ATTR_STRING:
        if (!a->s || a->s[a->s_len] != '\0')
            abort();
        touch(a->s, a->s_len + 1);
        break;
    case ONNX_ATTR_TENSOR:
        check_tensor(a->t);
        break;
    case ONNX_ATTR_GRAPH:
        check_graph(a->g, depth + 1);
        break;
    case ONNX_ATTR_FLOATS:
        touch(a->floats, a->n * sizeof(float));
        break;
    case ONNX_ATTR_INTS:
        touch(a->ints, a->n * sizeof(int64_t));
        break;
    case ONNX_ATTR_STRINGS:
        for (size_t i = 0; i < a->n; i++)
            check_string(a->strings[i]);
        break;
    case ONNX_ATTR_TENSORS:
        for (size_t i = 0; i < a->n; i++)
            check_tensor(&a->tensors[i]);
        break;
    case ONNX_ATTR_GRAPHS:
        for (size_t i = 0; i < a->n; i++)
            check_graph(a->graphs[i], depth + 1);
        break;
    default:
        break;
    }
}

static void check_graph(const onnx_graph *g, unsigned depth) {
    if (!g || depth > limits.max_graph_depth || g->n_nodes > limits.max_nodes)
        abort();
    check_string(g->name);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const onnx_node *n = &g->nodes[i];
        check_string(n->name);
        check_string(n->op_type);
        check_string(n->domain);
        if (!*n->op_type || strcmp(n->domain, "ai.onnx") == 0)
            abort();
        for (size_t j = 0; j < n->n_inputs; j++)
            check_string(n->inputs[j]);
        for (size_t j = 0; j < n->n_outputs; j++)
            check_string(n->outputs[j]);
        for (size_t j = 0; j < n->n_attrs; j++) {
            check_attr(&n->attrs[j], depth);
            if (onnx_node_attr(n, n->attrs[j].name) == NULL)
                abort();
        }
    }
    for (size_t i = 0; i < g->n_inputs; i++)
        check_value_info(&g->inputs[i]);
    for (size_t i = 0; i < g->n_outputs; i++)
        check_value_info(&g->outputs[i]);
    for (size_t i = 0; i < g->n_value_infos; i++)
        check_value_info(&g->value_infos[i]);
    for (size_t i = 0; i < g->n_initializers; i++) {
        check_string(g->initializers[i].name);
        check_tensor(&g->initializers[i].tensor);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    onnx_model *model = NULL;
    osp_error *err = onnx_model_load_bytes(data, size, NULL, &limits, &model);
    if (err) {
        if (model)
            abort(); /* out is written only on success */
        osp_error_code code = osp_error_get_code(err);
        if (code != OSP_ERROR_INVALID_ARG && code != OSP_ERROR_UNAVAILABLE)
            abort();
        check_string(osp_error_message(err));
        osp_error_free(err);
        return 0;
    }
    check_string(model->producer_name);
    for (size_t i = 0; i < model->n_opsets; i++) {
        check_string(model->opsets[i].domain);
        onnx_model_opset(model, model->opsets[i].domain);
    }
    check_graph(model->graph, 0);
    onnx_model_free(model);
    return 0;
}
