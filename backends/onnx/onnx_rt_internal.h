/*
 * Inside the ONNX runtime (onnx_prepare.c, onnx_fuse.c, onnx_plan.c,
 * onnx_session.c): the prepared graph and the plans made from it.
 */
#pragma once

#include <pthread.h>
#include <stdint.h>

#include "onnx_ops.h"
#include "onnx_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor of the graph. Names are borrowed from the model's nodes. */
typedef struct rt_value {
    const char *name;
    int producer;    /* index in rt_model.nodes, or -1 */
    int graph_input; /* index among the graph's inputs, or -1 */
    /* The value when it is a constant (initializer or folded at load):
     * borrowed from the model's initializers, or owned (konst_owned). */
    onnx_tensor *konst;
    bool konst_owned;
    osp_datatype declared_dtype; /* graph input/output/value_info, or 0 */
} rt_value;

typedef struct rt_node {
    const onnx_node *node; /* borrowed: the model's, or a fused one that
                              rt_model.synth owns */
    const onnx_op *op;
    void *state; /* prepare's, freed with op->free */
    int *in;     /* value index per node input; -1 when omitted */
    int *out;    /* value index per node output; -1 when omitted */
    size_t n_in, n_out;
    bool dead; /* removed by folding or fusion */
} rt_node;

typedef struct onnx_plan onnx_plan;
typedef struct rt_weights rt_weights;

struct onnx_rt_model {
    onnx_model *model; /* owned */
    onnx_rt_options opts;
    rt_value *values;
    size_t n_values, cap_values;
    rt_node *nodes; /* in topological order once prepared */
    size_t n_nodes, cap_nodes;
    int *inputs; /* value index of each graph input */
    size_t n_inputs;
    int *outputs; /* value index of each graph output */
    size_t n_outputs;
    /* Nodes the fusion passes made (owned, freed with the model). */
    onnx_node **synth;
    size_t n_synth, cap_synth;

    /* Graph inputs whose values a node needs while planning (a shape
     * fed as an input: Expand's shape, Pad's pads); such inputs are read
     * on the host and their values are part of a plan's key. Learnt on the
     * first plan that needs them; under plans_lock. */
    bool *value_inputs;
    pthread_mutex_t plans_lock; /* guards the plan cache */
    onnx_plan **plans;
    size_t n_plans;
    uint64_t plan_clock;
    uint64_t plan_ids; /* the last onnx_plan.id handed out */

    /* The bytes of strings folded at load (Cast of a constant to STRING),
     * and whether the model has STRING tensors at all (graph inputs,
     * outputs, constants, value_infos, Cast to STRING), which only the
     * CPU device runs. */
    onnx_string_pool strings;
    bool has_strings;

    /* Device copies of the constants, one store per device (onnx_weights.c). */
    pthread_mutex_t weights_lock;
    rt_weights *weights;
};

/* "node 'name' (Op, opset N): <inner>" with inner's code, unless inner
 * names its node already (ownership of inner moves). */
osp_error *rt_node_error(const onnx_node *node, osp_error *inner);

/* Index of the value named `name`, adding it when absent; -1 on OOM. */
int rt_value_intern(onnx_rt_model *m, const char *name);
/* Index of `name` or -1. */
int rt_value_find(const onnx_rt_model *m, const char *name);

/* Binds node `node` (borrowed) as a new rt_node after the existing ones:
 * finds and prepares its op, interns its values. */
osp_error *rt_node_add(onnx_rt_model *m, const onnx_node *node);

/* Count of live nodes reading value v. */
size_t rt_value_consumers(const onnx_rt_model *m, int v);
/* Whether v is a graph output. */
bool rt_value_is_output(const onnx_rt_model *m, int v);

/* Frees a node the fusion passes made (its strings and attributes). */
void onnx_node_free_synth(onnx_node *n);

/* The fusion passes (onnx_fuse.c): rewrite m->nodes in place (marking
 * nodes dead, appending fused ones, keeping topological order). */
osp_error *onnx_fuse(onnx_rt_model *m);

/* ---- plans (onnx_plan.c) -------------------------------------------------
 */

typedef struct plan_step {
    int node; /* index in m->nodes */
    onnx_desc *in_desc, *out_desc;
    size_t ws_offset, ws_bytes;
    uint32_t fp16_inputs; /* infer's: inputs run may read as FP16 */
} plan_step;

typedef enum plan_output_mode {
    PLAN_OUTPUT_DIRECT = 0, /* its storage is the caller's buffer */
    PLAN_OUTPUT_COPY,       /* copied from wherever it lives */
} plan_output_mode;

struct onnx_plan {
    osp_shape *input_shapes; /* the key: one per graph input ... */
    void **input_values;     /* ... and the values of value inputs */
    onnx_desc *desc;         /* per value */
    void **host_owned;       /* per value: host values computed here */
    int *root;               /* per value: the value whose memory it is */
    int64_t *offset;         /* per root value: arena offset, or -1 */
    size_t arena_bytes;
    size_t host_bytes; /* of the values computed while planning */
    plan_step *steps;
    size_t n_steps;
    plan_output_mode *output_mode; /* per graph output */
    uint64_t last_used;
    uint64_t id; /* unique among the model's plans, for the life of the model
                    (a session's CUDA graphs are keyed by it) */
    int refs;    /* sessions running it (under plans_lock) */
    int64_t separable_batch; /* rt_plan_separable_batch, or 0 */
    onnx_string_pool strings; /* of the strings computed while planning */
};

/* Batch chunks (onnx_batch_chunks.c): the batch of plan p when every
 * node keeps dim 0's samples apart (so the batch may run in chunks with
 * the same results), else 0. */
int64_t rt_plan_separable_batch(const onnx_rt_model *m, const onnx_plan *p);
/* The default of onnx_rt_options.batch_chunk_bytes: half the last-level
 * cache (8 MiB when the system does not say). */
size_t rt_default_chunk_bytes(void);

/* The plan for these input shapes, from the cache or made now; a
 * reference the caller gives back with onnx_plan_release. host_inputs:
 * the inputs' memory is host memory, so a plan may read their values;
 * otherwise it reads them from inputs[i].host_data where given. */
osp_error *onnx_plan_acquire(onnx_rt_model *m, const onnx_io *inputs,
                             bool host_inputs, onnx_plan **out);
void onnx_plan_release(onnx_rt_model *m, onnx_plan *p);
void onnx_plan_free(onnx_rt_model *m, onnx_plan *p);

/* Runs one node on the host with the CPU device (constant folding and
 * shape arithmetic): in[] host pointers (NULL where unknown), outputs
 * allocated here (caller owns out[i], host_free_aligned with its
 * byte size). */
osp_error *rt_run_on_host(const rt_node *n, const onnx_desc *in_desc,
                          const void *const *in, const onnx_desc *out_desc,
                          size_t ws_bytes, onnx_string_pool *strings,
                          void **out);

/* UNSUPPORTED naming node n and the tensor ("input 1: dtype STRING is
 * not supported") when one of descs[count] (n's inputs or outputs, as
 * `kind` says) is STRING and n's op does not take strings. */
osp_error *rt_check_strings(const rt_node *n, const onnx_desc *descs,
                            size_t count, const char *kind);

/* ---- weights once per device (onnx_weights.c) --------------------------
 */

/* The store of m's constants on dev (a device without host memory),
 * shared by the sessions on it: a reference the caller gives back with
 * rt_weights_release, which frees the store with the last reference
 * (after the caller made sure no stream still reads it). */
osp_error *rt_weights_acquire(onnx_rt_model *m, osp_device *dev,
                              rt_weights **out);
void rt_weights_release(onnx_rt_model *m, rt_weights *w);
/* *out: the device copy of the constant at host (bytes long, borrowed from
 * the model), uploaded now if it is the first time, and complete when this
 * returns; valid while the store is. */
osp_error *rt_weights_get(rt_weights *w, const void *host, size_t bytes,
                          const void **out);
/* The same for an FP16 device copy of the FP32 constant at host (`count`
 * elements), converted (round to nearest even) on the first call. */
osp_error *rt_weights_get_fp16(rt_weights *w, const float *host, size_t count,
                               const void **out);
/* Bytes of constants the store holds. */
size_t rt_weights_bytes(rt_weights *w);

/* Bytes of a tensor of this dtype and shape inside the runtime (a STRING
 * element is a 16-byte onnx_string). */
size_t rt_desc_bytes(const onnx_desc *d);
/* Bytes of one element inside the runtime: ONNX_STRING_BYTES for BYTES,
 * else osp_datatype_byte_size. */
size_t rt_dtype_bytes(osp_datatype dt);

#ifdef __cplusplus
}
#endif
