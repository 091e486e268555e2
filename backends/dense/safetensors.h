/*
 * A reader for the safetensors format (Hugging Face), just enough for
 * weights files:
 *
 *   8 bytes   N, the header length, little-endian uint64
 *   N bytes   a JSON object: tensor name -> {"dtype": "F32",
 *             "shape": [..], "data_offsets": [begin, end]}, plus an
 *             optional "__metadata__" entry (skipped); may end in spaces
 *   the rest  tensor bytes; offsets count from the start of this part
 *
 * The header parser is written for this format only (no JSON library) and
 * checks everything before anything is used: header size and nesting
 * limits, known dtypes, offsets inside the file, byte counts equal to shape
 * times element size, no overlapping tensors, no duplicate names. Every
 * error names the file and says why (and at which byte, for syntax).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Headers longer than this are refused (the reference reader's limit). */
#define OSP_SAFETENSORS_MAX_HEADER ((uint64_t)100 * 1024 * 1024)

typedef struct safetensors_tensor {
    char *name;
    char dtype[8];       /* as in the file: "F32", "F16", "I64", ... */
    size_t element_size; /* bytes per element of dtype */
    osp_shape shape;
    const uint8_t *data; /* into the file's bytes; not aligned in general */
    size_t byte_size;
} safetensors_tensor;

typedef struct safetensors {
    safetensors_tensor *tensors; /* in header order */
    size_t n_tensors;
    uint8_t *owned_bytes_; /* the file, when read by _load */
} safetensors;

/* Parses a whole safetensors file held in `bytes` (borrowed: it must
 * outlive *out, whose tensor data points into it). `what` (borrowed) names
 * the file in error messages. Malformed input is INVALID_ARG. Caller owns
 * *out, freed with safetensors_free. */
osp_error *safetensors_parse(const uint8_t *bytes, size_t len, const char *what,
                             safetensors **out);

/* Reads the file at `path` and parses it; *out owns the bytes. A missing
 * file is NOT_FOUND, one that cannot be read UNAVAILABLE. Caller owns
 * *out. */
osp_error *safetensors_load(const char *path, safetensors **out);

/* The tensor called `name` (borrowed from st), or NULL. */
const safetensors_tensor *safetensors_find(const safetensors *st,
                                           const char *name);

/* NULL is a no-op. */
void safetensors_free(safetensors *st);

#ifdef __cplusplus
}
#endif
