/* The list of built-in backends that main() hands to the server. */
#include "backends.h"

#include "builtin.h"

const osp_backend *const backends_builtin[] = {
    &osp_backend_identity,       &osp_backend_add_sub,
    &osp_backend_dense,          &osp_backend_affine,
    &osp_backend_string_add_sub, &osp_backend_onnxruntime,
    &osp_backend_accumulator,    &osp_backend_python,
};

const size_t backends_builtin_count =
    sizeof backends_builtin / sizeof backends_builtin[0];
