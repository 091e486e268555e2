/*
 * A model's configuration, parsed from protobuf text format (config.pbtxt,
 * the fields of Triton's model_config.proto that Osprey uses). The struct
 * is plain data: every pointer in it is owned by the osp_model_config and
 * freed by osp_model_config_free().
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

typedef struct osp_model_io {
    char *name;
    osp_datatype dtype;
    osp_shape dims;       /* as configured, without the batch dim; -1 = any */
    bool optional;        /* inputs only */
    char *label_filename; /* outputs only; NULL if absent */
} osp_model_io;

typedef enum osp_version_policy_kind {
    OSP_VERSION_POLICY_LATEST = 0, /* default, num_versions 1 */
    OSP_VERSION_POLICY_ALL,
    OSP_VERSION_POLICY_SPECIFIC,
} osp_version_policy_kind;

typedef struct osp_version_policy {
    osp_version_policy_kind kind;
    uint32_t latest_num_versions; /* LATEST */
    int64_t *versions;            /* SPECIFIC */
    size_t n_versions;
} osp_version_policy;

typedef enum osp_instance_kind {
    OSP_INSTANCE_KIND_AUTO = 0,
    OSP_INSTANCE_KIND_GPU,
    OSP_INSTANCE_KIND_CPU,
    OSP_INSTANCE_KIND_MODEL,
} osp_instance_kind;

typedef struct osp_instance_group {
    char *name;    /* may be NULL */
    int32_t count; /* 0 = not given (the loader picks: 1) */
    osp_instance_kind kind;
    int32_t *gpus;
    size_t n_gpus;
} osp_instance_group;

typedef enum osp_timeout_action {
    OSP_TIMEOUT_REJECT = 0,
    OSP_TIMEOUT_DELAY,
} osp_timeout_action;

typedef struct osp_queue_policy {
    osp_timeout_action timeout_action;
    uint64_t default_timeout_us; /* 0 = none */
    bool allow_timeout_override;
    uint32_t max_queue_size; /* 0 = unbounded */
} osp_queue_policy;

typedef struct osp_priority_queue_policy {
    uint64_t level;
    osp_queue_policy policy;
} osp_priority_queue_policy;

typedef struct osp_dynamic_batching {
    bool enabled; /* the block was present */
    int32_t *preferred_batch_sizes;
    size_t n_preferred_batch_sizes;
    uint64_t max_queue_delay_us;
    bool preserve_ordering;
    uint64_t priority_levels;
    uint64_t default_priority_level;
    osp_queue_policy default_queue_policy;
    osp_priority_queue_policy *priority_queue_policies;
    size_t n_priority_queue_policies;
} osp_dynamic_batching;

typedef struct osp_model_parameter {
    char *key;
    char *value; /* string_value */
} osp_model_parameter;

typedef enum osp_model_priority {
    OSP_MODEL_PRIORITY_DEFAULT = 0,
    OSP_MODEL_PRIORITY_MAX,
    OSP_MODEL_PRIORITY_MIN,
} osp_model_priority;

/* One entry of optimization.execution_accelerators (an ONNX Runtime
 * execution provider such as "openvino" or "tensorrt", and its settings). */
typedef struct osp_execution_accelerator {
    char *name;                      /* "" when absent, never NULL */
    osp_model_parameter *parameters; /* map<string, string>, config order */
    size_t n_parameters;
} osp_execution_accelerator;

/* optimization { ... } (ModelOptimizationPolicy). What a config leaves out
 * has Triton's defaults: pinned memory enabled, PRIORITY_DEFAULT. Of its
 * `cuda` message only `graphs` is kept; the other fields are accepted. */
typedef struct osp_model_optimization {
    bool has_graph;      /* graph { } was given */
    int32_t graph_level; /* graph.level; 0 when absent */
    osp_model_priority priority;
    bool has_execution_accelerators; /* execution_accelerators { } given */
    osp_execution_accelerator *gpu_accelerators;
    size_t n_gpu_accelerators;
    osp_execution_accelerator *cpu_accelerators;
    size_t n_cpu_accelerators;
    bool input_pinned_memory;  /* input_pinned_memory.enable */
    bool output_pinned_memory; /* output_pinned_memory.enable */
    uint32_t gather_kernel_buffer_threshold;
    bool eager_batching;
    bool cuda_graphs; /* cuda.graphs */
} osp_model_optimization;

/* One step of ensemble_scheduling: a model and how its inputs and outputs
 * map to the ensemble's tensors (map<string, string>: key = the step
 * model's tensor, value = the ensemble tensor; config order). */
typedef struct osp_ensemble_step {
    char *model_name;
    int64_t model_version; /* -1 = latest */
    osp_model_parameter *input_map;
    size_t n_input_map;
    osp_model_parameter *output_map;
    size_t n_output_map;
} osp_ensemble_step;

/* ensemble_scheduling { step [ ... ] } (ModelEnsembling). */
typedef struct osp_ensemble_scheduling {
    bool enabled; /* the block was present */
    /* Per step, the most of its requests in flight at once across all the
     * ensemble's requests (Triton's backpressure); 0 = no limit. */
    uint32_t max_inflight_requests;
    osp_ensemble_step *steps;
    size_t n_steps;
} osp_ensemble_scheduling;
/* sequence_batching.control_input: one Control of a ControlInput, flattened
 * (a control input naming several controls gives one entry each). */
typedef enum osp_sequence_control_kind {
    OSP_SEQUENCE_CONTROL_START = 0,
    OSP_SEQUENCE_CONTROL_END,
    OSP_SEQUENCE_CONTROL_READY,
    OSP_SEQUENCE_CONTROL_CORRID,
} osp_sequence_control_kind;

typedef struct osp_sequence_control {
    char *name; /* the tensor the core fills in */
    osp_sequence_control_kind kind;
    /* The tensor's datatype: FP32, INT32 or BOOL from whichever
     * *_false_true list is given; CORRID: its data_type (UINT64, INT64,
     * UINT32, INT32 or STRING). */
    osp_datatype dtype;
    /* false and true values, [0] and [1], of the list that is given. */
    int32_t int32_false_true[2];
    float fp32_false_true[2];
    bool bool_false_true[2];
} osp_sequence_control;

/* sequence_batching.state: an implicit state tensor the core keeps per
 * sequence, fed as input `input_name`, taken back from output
 * `output_name`. Its initial value is zeros, or the bytes of
 * `initial_data_file` in the version folder's initial_state/ folder. */
typedef struct osp_sequence_state {
    char *input_name;
    char *output_name;
    osp_datatype dtype;
    osp_shape dims;          /* without the batch dim */
    char *initial_name;      /* initial_state.name; NULL without one */
    char *initial_data_file; /* NULL: zero_data (or no initial_state) */
} osp_sequence_state;

typedef enum osp_sequence_strategy {
    OSP_SEQUENCE_DIRECT = 0, /* the default when neither is given */
    OSP_SEQUENCE_OLDEST,
} osp_sequence_strategy;

typedef struct osp_sequence_batching {
    bool enabled; /* the block was present */
    osp_sequence_strategy strategy;
    bool strategy_given;           /* direct {} or oldest {} was written */
    uint64_t max_sequence_idle_us; /* Triton's default: 1000000 */
    osp_sequence_control *controls;
    size_t n_controls;
    osp_sequence_state *states;
    size_t n_states;
    /* direct { max_queue_delay_microseconds minimum_slot_utilization } */
    uint64_t direct_max_queue_delay_us;
    float direct_minimum_slot_utilization;
    /* oldest { max_candidate_sequences preferred_batch_size
     * max_queue_delay_microseconds preserve_ordering } */
    int32_t max_candidate_sequences;
    int32_t *preferred_batch_sizes;
    size_t n_preferred_batch_sizes;
    uint64_t oldest_max_queue_delay_us;
    bool oldest_preserve_ordering;
} osp_sequence_batching;

/* model_warmup[].inputs: one input of a warmup sample. */
typedef enum osp_warmup_data {
    OSP_WARMUP_DATA_UNSET = 0, /* none given: the sample fails at load */
    OSP_WARMUP_ZERO_DATA,
    OSP_WARMUP_RANDOM_DATA,
    OSP_WARMUP_INPUT_DATA_FILE,
} osp_warmup_data;

typedef struct osp_warmup_input {
    char *key; /* the input's name */
    osp_datatype dtype;
    osp_shape dims; /* without the batch dim */
    osp_warmup_data data;
    char *input_data_file; /* INPUT_DATA_FILE: a file in warmup/ */
} osp_warmup_input;

typedef struct osp_model_warmup {
    char *name;
    uint32_t batch_size; /* 0: the sample is skipped, as Triton does */
    uint32_t count;      /* 0 is taken as 1 */
    osp_warmup_input *inputs;
    size_t n_inputs;
} osp_model_warmup;

typedef struct osp_model_config {
    char *name;
    char *platform;               /* "" when absent, never NULL */
    char *backend;                /* "" when absent, never NULL */
    char *default_model_filename; /* "" when absent, never NULL */
    int32_t max_batch_size;
    osp_model_io *inputs;
    size_t n_inputs;
    osp_model_io *outputs;
    size_t n_outputs;
    osp_version_policy version_policy;
    osp_instance_group *instance_groups;
    size_t n_instance_groups;
    osp_dynamic_batching dynamic_batching;
    osp_sequence_batching sequence_batching;
    osp_model_warmup *warmups; /* model_warmup, in config order */
    size_t n_warmups;
    osp_model_parameter *parameters;
    size_t n_parameters;
    bool decoupled; /* model_transaction_policy { decoupled } */
    osp_model_optimization optimization;
    osp_ensemble_scheduling ensemble_scheduling; /* platform "ensemble" */
    bool response_cache; /* response_cache { enable } */
    /* Not part of config.pbtxt: the --backend-config settings that apply to
     * this model's backend (Triton's backend command-line config), one per
     * key, a backend's own setting in place of a global one of the same
     * key, and Triton's default-max-batch-size "4" unless set. The core
     * fills them in before auto_complete and model_new. */
    osp_model_parameter *backend_config;
    size_t n_backend_config;
} osp_model_config;

/* Parses config.pbtxt text. `filename` (borrowed) is used in messages, which
 * name the file, the line and the field: "<file>:<line>: <field>: <why>".
 * Unknown fields of model_config.proto are skipped; unknown enum values and
 * type mismatches are errors. Validates the result (names present and
 * unique, dims non-empty and >= -1, batch size >= 0). Caller owns *out. */
osp_error *osp_model_config_parse(const char *text, size_t len,
                                  const char *filename, osp_model_config **out);
/* Parses `text` (a load request's config override) completed from `base`
 * (the repository's config.pbtxt of the model; may be NULL) as Triton
 * auto-completes a partial override: when the override names neither a
 * backend nor a platform, each top-level field it sets replaces the base's
 * and every other field comes from the base; otherwise the override stands
 * alone. Messages name `filename` or `base_filename` (borrowed) and the
 * line. Caller owns *out. */
osp_error *osp_model_config_parse_over(const char *text, size_t len,
                                       const char *filename, const char *base,
                                       size_t base_len,
                                       const char *base_filename,
                                       osp_model_config **out);
/* Reads and parses a file. Caller owns *out. */
osp_error *osp_model_config_load(const char *path, osp_model_config **out);
void osp_model_config_free(osp_model_config *config);

/* Triton's name of an instance kind ("KIND_GPU"; "KIND_AUTO" for an
 * unknown value). */
const char *osp_instance_kind_name(osp_instance_kind kind);

/* Borrowed value of parameter `key`, or NULL. */
const char *osp_model_config_parameter(const osp_model_config *config,
                                       const char *key);
/* Borrowed value of --backend-config setting `key` for this model's
 * backend (see backend_config), or NULL. */
const char *osp_model_config_backend_setting(const osp_model_config *config,
                                             const char *key);
/* Index of the input/output named `name`, or -1. */
int osp_model_config_input_index(const osp_model_config *config,
                                 const char *name);
int osp_model_config_output_index(const osp_model_config *config,
                                  const char *name);

#ifdef __cplusplus
}
#endif
