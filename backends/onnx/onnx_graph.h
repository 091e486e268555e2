/*
 * The ONNX model as the runtime sees it: a plain, owned copy of what the
 * protobuf file says (onnx_loader.c reads it with the protoc-c code
 * generated from Debian's onnx.proto), before any planning. Every pointer
 * in these structs is owned by its onnx_model and freed by
 * onnx_model_free().
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/datatype.h"
#include "osprey/error.h"
#include "osprey/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor whose bytes the model file holds (an initializer, a Constant
 * node's value, a tensor attribute) or that the runtime computed on the
 * host. Dense and row-major; BYTES tensors hold Triton's serialisation
 * (each element a 4-byte little-endian length, then its bytes). */
typedef struct onnx_tensor {
    osp_datatype dtype;
    osp_shape shape;
    void *data; /* owned; 64-byte aligned (host_alloc_aligned) */
    size_t byte_size;
} onnx_tensor;

typedef enum onnx_attr_type {
    ONNX_ATTR_UNDEFINED = 0,
    ONNX_ATTR_FLOAT,
    ONNX_ATTR_INT,
    ONNX_ATTR_STRING,
    ONNX_ATTR_TENSOR,
    ONNX_ATTR_GRAPH,
    ONNX_ATTR_FLOATS,
    ONNX_ATTR_INTS,
    ONNX_ATTR_STRINGS,
    ONNX_ATTR_TENSORS,
    ONNX_ATTR_GRAPHS,
} onnx_attr_type;

struct onnx_graph;

typedef struct onnx_attr {
    char *name;
    onnx_attr_type type;
    float f;
    int64_t i;
    char *s; /* STRING: bytes plus a terminating NUL; s_len excludes it */
    size_t s_len;
    onnx_tensor *t;        /* TENSOR */
    struct onnx_graph *g;  /* GRAPH */
    float *floats;         /* FLOATS */
    int64_t *ints;         /* INTS */
    char **strings;        /* STRINGS (NUL-terminated) */
    onnx_tensor *tensors;  /* TENSORS */
    struct onnx_graph **graphs; /* GRAPHS */
    size_t n;              /* element count of the list types */
} onnx_attr;

typedef struct onnx_node {
    char *name;    /* "" when the file gives none */
    char *op_type; /* "Conv" */
    char *domain;  /* "" for the default domain (ai.onnx) */
    int64_t opset; /* the model's opset_import version for `domain` */
    char **inputs; /* "" marks an omitted optional input */
    size_t n_inputs;
    char **outputs; /* "" marks an omitted optional output */
    size_t n_outputs;
    onnx_attr *attrs;
    size_t n_attrs;
} onnx_node;

/* A graph input, output or value_info: type and (maybe) shape. */
typedef struct onnx_value_info {
    char *name;
    osp_datatype dtype; /* OSP_TYPE_INVALID when not a tensor we know */
    bool has_shape;     /* false: rank unknown */
    int rank;
    int64_t dims[OSP_MAX_DIMS]; /* -1 where symbolic or unknown */
    char *dim_params[OSP_MAX_DIMS]; /* symbolic name, or NULL */
} onnx_value_info;

typedef struct onnx_initializer {
    char *name;
    onnx_tensor tensor;
} onnx_initializer;

typedef struct onnx_graph {
    char *name;
    onnx_node *nodes; /* in file order (not necessarily topological) */
    size_t n_nodes;
    /* Inputs the caller feeds: the file's graph inputs minus those that
     * name an initializer (older exports list weights as inputs too). */
    onnx_value_info *inputs;
    size_t n_inputs;
    onnx_value_info *outputs;
    size_t n_outputs;
    onnx_value_info *value_infos;
    size_t n_value_infos;
    onnx_initializer *initializers;
    size_t n_initializers;
} onnx_graph;

typedef struct onnx_opset {
    char *domain; /* "" for ai.onnx */
    int64_t version;
} onnx_opset;

typedef struct onnx_model {
    int64_t ir_version;
    char *producer_name;
    onnx_opset *opsets;
    size_t n_opsets;
    onnx_graph *graph;
} onnx_model;

/* Limits on what a model file may ask for (0 = the default). */
typedef struct onnx_load_limits {
    uint64_t max_file_bytes;     /* default 4 GiB */
    uint64_t max_tensor_bytes;   /* per tensor, default 4 GiB */
    uint32_t max_nodes;          /* per graph, default 1,000,000 */
    uint32_t max_graph_depth;    /* nested subgraphs, default 16 */
} onnx_load_limits;

/* Reads a model: `path` is model.onnx, or a folder named like it that holds
 * model.onnx (the graph) beside its external data files. External data
 * (data_location EXTERNAL: location/offset/length) is read relative to the
 * folder holding the graph and refused when `location` leaves it
 * (absolute, "..", a symlink out). Errors are INVALID_ARG and say what is
 * wrong with the file (messages may name `path`; the core strips the
 * repository's folder from them). limits may be NULL. Caller owns *out. */
osp_error *onnx_model_load_file(const char *path,
                                const onnx_load_limits *limits,
                                onnx_model **out);
/* Reads a model from memory (borrowed). External data is read relative to
 * base_dir, or refused when base_dir is NULL. Caller owns *out. */
osp_error *onnx_model_load_bytes(const void *data, size_t len,
                                 const char *base_dir,
                                 const onnx_load_limits *limits,
                                 onnx_model **out);
void onnx_model_free(onnx_model *model);

/* Reads a serialized TensorProto file (ONNX's test data input_0.pb).
 * Sets *out (caller owns its data; free with onnx_tensor_clear) and
 * *name (caller frees; "" when unnamed). */
osp_error *onnx_tensor_load_pb_file(const char *path, onnx_tensor *out,
                                    char **name);
/* Frees a tensor's data and zeroes it. */
void onnx_tensor_clear(onnx_tensor *t);

/* The model's opset for `domain` ("" or "ai.onnx" for the default), or 0
 * when the model imports none. */
int64_t onnx_model_opset(const onnx_model *model, const char *domain);

/* Attribute `name` of `node` (borrowed), or NULL. */
const onnx_attr *onnx_node_attr(const onnx_node *node, const char *name);

#ifdef __cplusplus
}
#endif
