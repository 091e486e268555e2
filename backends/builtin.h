/*
 * The backends compiled into Osprey. Each is a static table defined in its
 * own folder and listed in backends.c.
 */
#pragma once

#include <stdbool.h>

#include "osprey/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const osp_backend builtin_backend_identity; /* identity/identity.c */
extern const osp_backend builtin_backend_add_sub;  /* add_sub/add_sub.c */
extern const osp_backend builtin_backend_dense;    /* dense/dense.c */
extern const osp_backend builtin_backend_affine;   /* affine/affine.c */
/* onnx/onnx_backend.c: Triton's "onnxruntime" models on Osprey's runtime */
extern const osp_backend builtin_backend_onnxruntime;
/* accumulator/accumulator.c: a stateful model for the sequence batcher */
extern const osp_backend builtin_backend_accumulator;
/* string_add_sub/string_add_sub.c */
extern const osp_backend builtin_backend_string_add_sub;
/* python/python_backend.c: Triton's model.py files in stub processes */
extern const osp_backend builtin_backend_python;

/* Whether batch input `t` was sent. An optional input that no request sent
 * has neither data nor shape; an empty tensor that was sent keeps its shape
 * even when it has no data (zero bytes need no memory). */
static inline bool builtin_input_given(const osp_backend_tensor *t) {
    return t->data != NULL || t->shape.rank > 0;
}

#ifdef __cplusplus
}
#endif
