/* The list of built-in backends that main() hands to the server. */
#include "backends.h"

#include "builtin.h"

const osp_backend *const backends_builtin[] = {
    &builtin_backend_identity,       &builtin_backend_add_sub,
    &builtin_backend_dense,          &builtin_backend_affine,
    &builtin_backend_string_add_sub, &builtin_backend_onnxruntime,
    &builtin_backend_accumulator,    &builtin_backend_python,
};

const size_t backends_builtin_count =
    sizeof backends_builtin / sizeof backends_builtin[0];
