// config.pbtxt: the protobuf text parser (pbtxt.h) and the mapping onto
// osp_model_config (osprey/model_config.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "osprey/model_config.h"
#include "pbtxt.h"

namespace fs = std::filesystem;

namespace {

const char *const kFile = "models/x/config.pbtxt";

// Parses `text`; holds either the config or the error's code and message.
struct Parsed {
    osp_model_config *cfg = nullptr;
    std::string error;
    osp_error_code code = OSP_ERROR_UNKNOWN;

    explicit Parsed(const std::string &text, const char *file = kFile) {
        osp_error *err =
            osp_model_config_parse(text.data(), text.size(), file, &cfg);
        if (err) {
            error = osp_error_message(err);
            code = osp_error_get_code(err);
            osp_error_free(err);
            cfg = nullptr;
        }
    }
    ~Parsed() {
        osp_model_config_free(cfg);
    }
    Parsed(const Parsed &) = delete;
    Parsed &operator=(const Parsed &) = delete;
    const osp_model_config *operator->() const {
        return cfg;
    }
};

// The error for `text`, which must fail with INVALID_ARG.
std::string ParseError(const std::string &text) {
    Parsed p(text);
    EXPECT_EQ(p.cfg, nullptr) << "parsed unexpectedly: " << text;
    EXPECT_EQ(p.code, OSP_ERROR_INVALID_ARG) << p.error;
    return p.error;
}

// A valid input block, to build test configs around.
const char *const kInput =
    "input { name: \"IN\" data_type: TYPE_FP32 dims: [ 4 ] }\n";

// Triton's qa `simple` model (tensorflow_graphdef/simple/config.pbtxt).
const char *const kSimple = R"(
name: "simple"
platform: "tensorflow_graphdef"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
)";

TEST(ModelConfig, TritonSimple) {
    Parsed p(kSimple);
    ASSERT_NE(p.cfg, nullptr) << p.error;
    EXPECT_STREQ(p->name, "simple");
    EXPECT_STREQ(p->platform, "tensorflow_graphdef");
    EXPECT_STREQ(p->backend, "");
    EXPECT_EQ(p->max_batch_size, 8);
    ASSERT_EQ(p->n_inputs, 2u);
    ASSERT_EQ(p->n_outputs, 2u);
    EXPECT_STREQ(p->inputs[0].name, "INPUT0");
    EXPECT_STREQ(p->inputs[1].name, "INPUT1");
    EXPECT_EQ(p->inputs[1].dtype, OSP_TYPE_INT32);
    ASSERT_EQ(p->inputs[1].dims.rank, 1);
    EXPECT_EQ(p->inputs[1].dims.dims[0], 16);
    EXPECT_FALSE(p->inputs[0].optional);
    EXPECT_STREQ(p->outputs[1].name, "OUTPUT1");
    EXPECT_EQ(p->outputs[1].label_filename, nullptr);

    // Defaults of everything not given.
    EXPECT_EQ(p->version_policy.kind, OSP_VERSION_POLICY_LATEST);
    EXPECT_EQ(p->version_policy.latest_num_versions, 1u);
    EXPECT_EQ(p->n_instance_groups, 0u);
    EXPECT_FALSE(p->dynamic_batching.enabled);
    EXPECT_EQ(p->n_parameters, 0u);
    EXPECT_FALSE(p->decoupled);

    EXPECT_EQ(osp_model_config_input_index(p.cfg, "INPUT1"), 1);
    EXPECT_EQ(osp_model_config_input_index(p.cfg, "OUTPUT0"), -1);
    EXPECT_EQ(osp_model_config_output_index(p.cfg, "OUTPUT0"), 0);
    EXPECT_EQ(osp_model_config_output_index(p.cfg, nullptr), -1);
    EXPECT_EQ(osp_model_config_input_index(nullptr, "INPUT0"), -1);
}

TEST(ModelConfig, EmptyTextGivesDefaults) {
    Parsed p("");
    ASSERT_NE(p.cfg, nullptr) << p.error;
    EXPECT_STREQ(p->name, ""); // the loader fills it from the folder
    EXPECT_STREQ(p->platform, "");
    EXPECT_STREQ(p->backend, "");
    EXPECT_STREQ(p->default_model_filename, "");
    EXPECT_EQ(p->n_inputs, 0u);
    EXPECT_EQ(p->max_batch_size, 0);
    // Triton normalises a config without optimization to these.
    EXPECT_FALSE(p->optimization.has_graph);
    EXPECT_EQ(p->optimization.graph_level, 0);
    EXPECT_EQ(p->optimization.priority, OSP_MODEL_PRIORITY_DEFAULT);
    EXPECT_FALSE(p->optimization.has_execution_accelerators);
    EXPECT_TRUE(p->optimization.input_pinned_memory);
    EXPECT_TRUE(p->optimization.output_pinned_memory);
    EXPECT_EQ(p->n_backend_config, 0u);
    EXPECT_EQ(osp_model_config_backend_setting(p.cfg, "x"), nullptr);

    Parsed comments("# nothing here\n   \n# at all");
    ASSERT_NE(comments.cfg, nullptr) << comments.error;
}

const char *const kAllFields = R"pb(
# Every field Osprey reads, plus some it skips.
name: "everything"  # trailing comment
backend: "identity"
platform: 'custom'
max_batch_size: 0x10
version_policy: { specific { versions: [ 1, 3 ] versions: 7 } }
input [
  {
    name: "TEXT"
    data_type: TYPE_STRING
    dims: [ -1 ]
    optional: true
    format: FORMAT_NONE
    reshape: { shape: [ ] }
    allow_ragged_batch: false
  },
  {
    name: "IMAGE";
    data_type: TYPE_FP16,
    dims: 3 dims: -1 dims: 224
    is_shape_tensor: false
  }
]
output {
  name: "PROB"
  data_type: TYPE_FP32
  dims: [ 1000 ]
  label_filename: "labels.txt"
  reshape { shape: [ 1, 1000 ] }
}
output < name: "BF" data_type: TYPE_BF16 dims: [ 2, 2 ] >
instance_group [
  { name: "gpu_group" count: 2 kind: KIND_GPU gpus: [ 0, 1 ] },
  { kind: KIND_CPU passive: false host_policy: "cpu"
    rate_limiter { resources [ { name: "R1" count: 4 } ] priority: 2 } }
]
instance_group { kind: KIND_MODEL }
instance_group { count: 1 kind: KIND_AUTO gpus: 2 }
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  preferred_batch_size: 16
  max_queue_delay_microseconds: 100
  preserve_ordering: True
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy {
    timeout_action: DELAY
    default_timeout_microseconds: 5000
    allow_timeout_override: true
    max_queue_size: 32
  }
  priority_queue_policy {
    key: 1
    value: { timeout_action: REJECT max_queue_size: 4 }
  }
  priority_queue_policy [
    { key: 3 value { default_timeout_microseconds: 18446744073709551615 } }
  ]
}
parameters { key: "execute_delay_ms" value { string_value: "500" } }
parameters [
  { key: "escaped" value: { string_value: "a\tb\"c\\d\x41\101\n" 'e\'f' } },
  { key: "empty" value {} }
]
model_transaction_policy { decoupled: 1 }
optimization { cuda { graphs: true } execution_accelerators {
  gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] } }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "TEXT" value: { data_type: TYPE_STRING dims: [ 1 ] zero_data: true } } } ]
default_model_filename: "model.bin"
cc_model_filenames { key: "7.5" value: "model_75.bin" }
response_cache { enable: true }
)pb";

TEST(ModelConfig, AllFields) {
    Parsed p(kAllFields);
    ASSERT_NE(p.cfg, nullptr) << p.error;
    EXPECT_STREQ(p->name, "everything");
    EXPECT_STREQ(p->backend, "identity");
    EXPECT_STREQ(p->platform, "custom");
    EXPECT_EQ(p->max_batch_size, 16);

    ASSERT_EQ(p->version_policy.kind, OSP_VERSION_POLICY_SPECIFIC);
    ASSERT_EQ(p->version_policy.n_versions, 3u);
    EXPECT_EQ(p->version_policy.versions[0], 1);
    EXPECT_EQ(p->version_policy.versions[1], 3);
    EXPECT_EQ(p->version_policy.versions[2], 7);

    ASSERT_EQ(p->n_inputs, 2u);
    EXPECT_EQ(p->inputs[0].dtype, OSP_TYPE_BYTES); // TYPE_STRING
    ASSERT_EQ(p->inputs[0].dims.rank, 1);
    EXPECT_EQ(p->inputs[0].dims.dims[0], -1);
    EXPECT_TRUE(p->inputs[0].optional);
    EXPECT_STREQ(p->inputs[1].name, "IMAGE");
    EXPECT_EQ(p->inputs[1].dtype, OSP_TYPE_FP16);
    ASSERT_EQ(p->inputs[1].dims.rank, 3);
    EXPECT_EQ(p->inputs[1].dims.dims[0], 3);
    EXPECT_EQ(p->inputs[1].dims.dims[1], -1);
    EXPECT_EQ(p->inputs[1].dims.dims[2], 224);

    ASSERT_EQ(p->n_outputs, 2u);
    EXPECT_STREQ(p->outputs[0].label_filename, "labels.txt");
    EXPECT_EQ(p->outputs[1].dtype, OSP_TYPE_BF16);
    EXPECT_EQ(p->outputs[1].dims.rank, 2);

    ASSERT_EQ(p->n_instance_groups, 4u);
    EXPECT_STREQ(p->instance_groups[0].name, "gpu_group");
    EXPECT_EQ(p->instance_groups[0].count, 2);
    EXPECT_EQ(p->instance_groups[0].kind, OSP_INSTANCE_KIND_GPU);
    ASSERT_EQ(p->instance_groups[0].n_gpus, 2u);
    EXPECT_EQ(p->instance_groups[0].gpus[1], 1);
    EXPECT_EQ(p->instance_groups[1].name, nullptr);
    EXPECT_EQ(p->instance_groups[1].count, 0); // not given
    EXPECT_EQ(p->instance_groups[1].kind, OSP_INSTANCE_KIND_CPU);
    EXPECT_EQ(p->instance_groups[2].kind, OSP_INSTANCE_KIND_MODEL);
    EXPECT_EQ(p->instance_groups[3].kind, OSP_INSTANCE_KIND_AUTO);
    ASSERT_EQ(p->instance_groups[3].n_gpus, 1u);
    EXPECT_EQ(p->instance_groups[3].gpus[0], 2);

    const osp_dynamic_batching &db = p->dynamic_batching;
    EXPECT_TRUE(db.enabled);
    ASSERT_EQ(db.n_preferred_batch_sizes, 3u);
    EXPECT_EQ(db.preferred_batch_sizes[0], 4);
    EXPECT_EQ(db.preferred_batch_sizes[2], 16);
    EXPECT_EQ(db.max_queue_delay_us, 100u);
    EXPECT_TRUE(db.preserve_ordering);
    EXPECT_EQ(db.priority_levels, 3u);
    EXPECT_EQ(db.default_priority_level, 2u);
    EXPECT_EQ(db.default_queue_policy.timeout_action, OSP_TIMEOUT_DELAY);
    EXPECT_EQ(db.default_queue_policy.default_timeout_us, 5000u);
    EXPECT_TRUE(db.default_queue_policy.allow_timeout_override);
    EXPECT_EQ(db.default_queue_policy.max_queue_size, 32u);
    ASSERT_EQ(db.n_priority_queue_policies, 2u);
    EXPECT_EQ(db.priority_queue_policies[0].level, 1u);
    EXPECT_EQ(db.priority_queue_policies[0].policy.timeout_action,
              OSP_TIMEOUT_REJECT);
    EXPECT_EQ(db.priority_queue_policies[0].policy.max_queue_size, 4u);
    EXPECT_EQ(db.priority_queue_policies[1].level, 3u);
    EXPECT_EQ(db.priority_queue_policies[1].policy.default_timeout_us,
              UINT64_MAX);

    ASSERT_EQ(p->n_parameters, 3u);
    EXPECT_STREQ(osp_model_config_parameter(p.cfg, "execute_delay_ms"), "500");
    EXPECT_STREQ(osp_model_config_parameter(p.cfg, "escaped"),
                 "a\tb\"c\\dAA\ne'f");
    EXPECT_STREQ(osp_model_config_parameter(p.cfg, "empty"), "");
    EXPECT_EQ(osp_model_config_parameter(p.cfg, "missing"), nullptr);
    EXPECT_EQ(osp_model_config_parameter(p.cfg, nullptr), nullptr);

    EXPECT_TRUE(p->decoupled);

    EXPECT_STREQ(p->default_model_filename, "model.bin");
    const osp_model_optimization &o = p->optimization;
    EXPECT_FALSE(o.has_graph);
    ASSERT_TRUE(o.has_execution_accelerators);
    ASSERT_EQ(o.n_gpu_accelerators, 1u);
    EXPECT_STREQ(o.gpu_accelerators[0].name, "tensorrt");
    ASSERT_EQ(o.gpu_accelerators[0].n_parameters, 1u);
    EXPECT_STREQ(o.gpu_accelerators[0].parameters[0].key, "precision_mode");
    EXPECT_STREQ(o.gpu_accelerators[0].parameters[0].value, "FP16");
    EXPECT_EQ(o.n_cpu_accelerators, 0u);
    EXPECT_TRUE(o.input_pinned_memory);
}

// optimization as the ONNX Runtime backend reads it.
TEST(ModelConfig, Optimization) {
    Parsed p(R"pb(
optimization {
  graph { level: -1 }
  priority: PRIORITY_MAX
  execution_accelerators {
    cpu_execution_accelerator [
      { name: "openvino" parameters { key: "k" value: "v" }
        parameters { key: "empty" value: "" } },
      { name: "dnnl" }
    ]
    gpu_execution_accelerator { name: "tensorrt" parameters [
      { key: "precision_mode" value: "FP16" },
      { key: "max_workspace_size_bytes" value: "1073741824" } ] }
  }
  input_pinned_memory { enable: false }
  output_pinned_memory { }
  gather_kernel_buffer_threshold: 7
  eager_batching: true
  cuda { graphs: true busy_wait_events: true }
}
default_model_filename: "graph.onnx"
)pb");
    ASSERT_NE(p.cfg, nullptr) << p.error;
    const osp_model_optimization &o = p->optimization;
    EXPECT_TRUE(o.has_graph);
    EXPECT_EQ(o.graph_level, -1);
    EXPECT_EQ(o.priority, OSP_MODEL_PRIORITY_MAX);
    ASSERT_EQ(o.n_cpu_accelerators, 2u);
    EXPECT_STREQ(o.cpu_accelerators[0].name, "openvino");
    ASSERT_EQ(o.cpu_accelerators[0].n_parameters, 2u);
    EXPECT_STREQ(o.cpu_accelerators[0].parameters[0].key, "k");
    EXPECT_STREQ(o.cpu_accelerators[0].parameters[0].value, "v");
    EXPECT_STREQ(o.cpu_accelerators[0].parameters[1].value, "");
    EXPECT_STREQ(o.cpu_accelerators[1].name, "dnnl");
    EXPECT_EQ(o.cpu_accelerators[1].n_parameters, 0u);
    ASSERT_EQ(o.n_gpu_accelerators, 1u);
    ASSERT_EQ(o.gpu_accelerators[0].n_parameters, 2u);
    EXPECT_STREQ(o.gpu_accelerators[0].parameters[1].value, "1073741824");
    // A buffer message without `enable` is enable: false, as in protobuf.
    EXPECT_FALSE(o.input_pinned_memory);
    EXPECT_FALSE(o.output_pinned_memory);
    EXPECT_EQ(o.gather_kernel_buffer_threshold, 7u);
    EXPECT_TRUE(o.eager_batching);
    EXPECT_TRUE(o.cuda_graphs);
    EXPECT_STREQ(p->default_model_filename, "graph.onnx");

    Parsed level0("optimization { graph { } }");
    ASSERT_NE(level0.cfg, nullptr) << level0.error;
    EXPECT_TRUE(level0->optimization.has_graph);
    EXPECT_EQ(level0->optimization.graph_level, 0);
    EXPECT_TRUE(level0->optimization.input_pinned_memory);
    EXPECT_FALSE(level0->optimization.cuda_graphs);
    EXPECT_NE(ParseError("optimization { cuda { graphs: 3 } }")
                  .find("optimization.cuda.graphs"),
              std::string::npos);
}

TEST(ModelConfig, OptimizationErrors) {
    EXPECT_EQ(ParseError("optimization {\n graph { level: 2147483648 } }"),
              "models/x/config.pbtxt:2: optimization.graph.level: value "
              "2147483648 out of range [-2147483648, 2147483647]");
    EXPECT_EQ(ParseError("optimization { graph { lvl: 1 } }"),
              "models/x/config.pbtxt:1: optimization.graph.lvl: unknown "
              "field (not in model_config.proto)");
    EXPECT_EQ(ParseError("optimization { graph: 1 }"),
              "models/x/config.pbtxt:1: optimization.graph: expected a "
              "message, got an integer");
    EXPECT_EQ(ParseError("\noptimization { priority: PRIORITY_HIGH }"),
              "models/x/config.pbtxt:2: optimization.priority: unknown enum "
              "value 'PRIORITY_HIGH'");
    EXPECT_EQ(ParseError("optimization { execution_accelerators {\n"
                         "  cpu_execution_accelerator { name: \"openvino\"\n"
                         "    parameters { key: \"k\" value: 1 } } } }"),
              "models/x/config.pbtxt:3: optimization.execution_accelerators."
              "cpu_execution_accelerator.parameters.value: expected a "
              "string, got an integer");
    EXPECT_EQ(ParseError("optimization { execution_accelerators {\n"
                         "  gpu_execution_accelerator { name: \"trt\"\n"
                         "    parameters { key: \"k\" value: \"1\" }\n"
                         "    parameters { key: \"k\" value: \"2\" } } } }"),
              "models/x/config.pbtxt:4: optimization.execution_accelerators."
              "gpu_execution_accelerator.parameters.key: duplicate key 'k'");
    EXPECT_EQ(ParseError("optimization { execution_accelerators {\n"
                         "  tpu_execution_accelerator { } } }"),
              "models/x/config.pbtxt:2: optimization.execution_accelerators."
              "tpu_execution_accelerator: unknown field (not in "
              "model_config.proto)");
    EXPECT_EQ(ParseError("optimization { execution_accelerators {\n"
                         "  gpu_execution_accelerator: \"tensorrt\" } }"),
              "models/x/config.pbtxt:2: optimization.execution_accelerators."
              "gpu_execution_accelerator: expected a message, got a string");
    EXPECT_EQ(
        ParseError("optimization {\n input_pinned_memory { enable: 2 } }"),
        "models/x/config.pbtxt:2: optimization.input_pinned_memory."
        "enable: expected true or false, got an integer");
    EXPECT_EQ(ParseError("optimization { eager_batching: true }\n"
                         "optimization { }"),
              "models/x/config.pbtxt:2: optimization: non-repeated field is "
              "specified more than once");
    EXPECT_EQ(ParseError("\n\ndefault_model_filename: \"../model.onnx\""),
              "models/x/config.pbtxt:3: default_model_filename: must be a file "
              "name in the version folder, got '../model.onnx'");
    EXPECT_EQ(ParseError("default_model_filename: 1"),
              "models/x/config.pbtxt:1: default_model_filename: expected a "
              "string, got an integer");
}

TEST(ModelConfig, VersionPolicies) {
    {
        Parsed p("version_policy: { latest: { num_versions: 3 } }");
        ASSERT_NE(p.cfg, nullptr) << p.error;
        EXPECT_EQ(p->version_policy.kind, OSP_VERSION_POLICY_LATEST);
        EXPECT_EQ(p->version_policy.latest_num_versions, 3u);
    }
    {
        Parsed p("version_policy { all {} }");
        ASSERT_NE(p.cfg, nullptr) << p.error;
        EXPECT_EQ(p->version_policy.kind, OSP_VERSION_POLICY_ALL);
    }
    {
        Parsed p("version_policy { }");
        ASSERT_NE(p.cfg, nullptr) << p.error;
        EXPECT_EQ(p->version_policy.kind, OSP_VERSION_POLICY_LATEST);
        EXPECT_EQ(p->version_policy.latest_num_versions, 1u);
    }
    {
        Parsed p("version_policy { specific { } }");
        ASSERT_NE(p.cfg, nullptr) << p.error;
        EXPECT_EQ(p->version_policy.kind, OSP_VERSION_POLICY_SPECIFIC);
        EXPECT_EQ(p->version_policy.n_versions, 0u);
    }
}

TEST(ModelConfig, ScalarForms) {
    Parsed p(std::string(kInput) + R"(
        max_batch_size: 010            # octal, as protobuf reads it
        name: "con" 'cat' "enated"
        dynamic_batching { preserve_ordering: t max_queue_delay_microseconds: 0 }
        model_transaction_policy { decoupled: False }
    )");
    ASSERT_NE(p.cfg, nullptr) << p.error;
    EXPECT_EQ(p->max_batch_size, 8);
    EXPECT_STREQ(p->name, "concatenated");
    EXPECT_TRUE(p->dynamic_batching.preserve_ordering);
    EXPECT_FALSE(p->decoupled);
}

TEST(ModelConfig, ErrorsNameFileLineAndField) {
    EXPECT_EQ(ParseError("name: \"simple\nmax_batch_size: 8\n"),
              "models/x/config.pbtxt:1: name: unterminated string");
    EXPECT_EQ(ParseError("\n\ninput [ { name: \"a\n"),
              "models/x/config.pbtxt:3: input.name: unterminated string");
    EXPECT_EQ(ParseError("name: 'x' max_batch_size: 1\ninput {\n"
                         "  name: \"a\"\n  dims: [1]\n"),
              "models/x/config.pbtxt:2: input: '{' is never closed (end of "
              "input at line 5)");
    EXPECT_EQ(ParseError("input [ { name: \"a\" }\n"),
              "models/x/config.pbtxt:1: input: '[' is never closed (end of "
              "input at line 2)");
    EXPECT_EQ(ParseError("name: \"a\"\n}\n"),
              "models/x/config.pbtxt:2: expected a field name, got '}'");
    EXPECT_EQ(ParseError("input { name: \"a\" >"),
              "models/x/config.pbtxt:1: input: expected a field name, got '>'");
    EXPECT_EQ(ParseError("instance_group [\n  { count: 1 },\n"
                         "  { kind: KIND_TPU }\n]"),
              "models/x/config.pbtxt:3: instance_group.kind: unknown enum "
              "value 'KIND_TPU'");
    EXPECT_EQ(ParseError("# header\n\ninput {\n  name: \"x\"\n"
                         "  dims: [1]\n\n  data_type: TYPE_FOO\n}"),
              "models/x/config.pbtxt:7: input.data_type: unknown data type "
              "'TYPE_FOO'");
    EXPECT_EQ(ParseError("max_batch_size: \"8\""),
              "models/x/config.pbtxt:1: max_batch_size: expected an integer, "
              "got a string");
    EXPECT_EQ(ParseError("name: simple"),
              "models/x/config.pbtxt:1: name: expected a string, got "
              "'simple'");
    EXPECT_EQ(ParseError("input: 5"),
              "models/x/config.pbtxt:1: input: expected a message, got an "
              "integer");
    EXPECT_EQ(ParseError("dynamic_batching { preserve_ordering: yes }"),
              "models/x/config.pbtxt:1: dynamic_batching.preserve_ordering: "
              "expected true or false, got 'yes'");
    EXPECT_EQ(ParseError("input { name: \"a\" data_type: \"TYPE_FP32\" }"),
              "models/x/config.pbtxt:1: input.data_type: expected a data "
              "type, got a string");
    EXPECT_EQ(ParseError("input { name: \"a\" data_type: TYPE_FP32 "
                         "dims: [1.5] }"),
              "models/x/config.pbtxt:1: input.dims: expected an integer, got "
              "a floating-point number");
    EXPECT_EQ(ParseError("input { name: \"A\" data_type: TYPE_FP32 dims: 1 }\n"
                         "input { name: \"B\" data_type: TYPE_FP32 dims: 1 }\n"
                         "input { name: \"A\" data_type: TYPE_FP32 dims: 1 }"),
              "models/x/config.pbtxt:3: input.name: duplicate input name 'A'");
    EXPECT_EQ(ParseError("output [{ name: \"o\" data_type: TYPE_FP32\n"
                         "dims: [ 2, -2 ] }]"),
              "models/x/config.pbtxt:2: output.dims: dimension must be -1 or "
              "> 0, got -2");
    EXPECT_EQ(ParseError("input { name: \"a\" data_type: TYPE_INT8 dims: 0 }"),
              "models/x/config.pbtxt:1: input.dims: dimension must be -1 or "
              "> 0, got 0");
    EXPECT_EQ(ParseError("\ninput { }"),
              "models/x/config.pbtxt:2: input.name: is required");
    EXPECT_EQ(ParseError("input { name: \"\" }"),
              "models/x/config.pbtxt:1: input.name: is required");
    EXPECT_EQ(ParseError("input { name: \"a\" dims: 1 }"),
              "models/x/config.pbtxt:1: input.data_type: is required for "
              "input 'a'");
    EXPECT_EQ(ParseError("input { name: \"a\" data_type: TYPE_FP32 }"),
              "models/x/config.pbtxt:1: input.dims: is required for input 'a'");
    EXPECT_EQ(ParseError("input { name: \"a\" data_type: TYPE_FP32 "
                         "dims: [ ] }"),
              "models/x/config.pbtxt:1: input.dims: is required for input 'a'");
}

TEST(ModelConfig, SyntaxErrors) {
    EXPECT_EQ(ParseError("name \"x\""),
              "models/x/config.pbtxt:1: name: expected ':' after the field "
              "name, got a string");
    EXPECT_EQ(ParseError("input { name: \"a\" data_type: TYPE_FP32\n"
                         " dims: [1,] }"),
              "models/x/config.pbtxt:2: input.dims: expected a value after "
              "','");
    EXPECT_EQ(ParseError("input { dims: [1 2] }"),
              "models/x/config.pbtxt:1: input.dims: expected ',' or ']' in "
              "list, got a number");
    EXPECT_EQ(ParseError("name: \"a\" ,, max_batch_size: 1"),
              "models/x/config.pbtxt:1: unexpected ','");
    EXPECT_EQ(ParseError("name: \"bad \\q escape\""),
              "models/x/config.pbtxt:1: name: unknown escape sequence in "
              "string");
    EXPECT_EQ(ParseError("name: \"\\777\""),
              "models/x/config.pbtxt:1: name: octal escape out of range in "
              "string");
    EXPECT_EQ(ParseError("name: \"\\xZZ\""),
              "models/x/config.pbtxt:1: name: invalid \\x escape in string");
    EXPECT_EQ(ParseError("name: \"\\000\""),
              "models/x/config.pbtxt:1: name: string contains a NUL byte");
    EXPECT_EQ(ParseError("dynamic_batching {\n max_queue_delay_microseconds: "
                         "99999999999999999999 }"),
              "models/x/config.pbtxt:2: "
              "dynamic_batching.max_queue_delay_microseconds: integer out of "
              "range");
    EXPECT_EQ(ParseError("max_batch_size: 08"),
              "models/x/config.pbtxt:1: max_batch_size: invalid octal number");
    EXPECT_EQ(ParseError("max_batch_size: 12ab"),
              "models/x/config.pbtxt:1: max_batch_size: invalid number");
    EXPECT_EQ(ParseError("max_batch_size: - x"),
              "models/x/config.pbtxt:1: max_batch_size: expected a number "
              "after '-', got 'x'");
    EXPECT_EQ(ParseError("max_batch_size: @"),
              "models/x/config.pbtxt:1: max_batch_size: unexpected character "
              "'@'");
    EXPECT_EQ(ParseError("max_batch_size:"),
              "models/x/config.pbtxt:1: max_batch_size: expected a value, got "
              "end of input");
    EXPECT_EQ(ParseError(std::string("name: \"a\"\n\x01", 11)),
              "models/x/config.pbtxt:2: unexpected byte 0x01");
    // After a value, a lexical error belongs to what follows, except in a
    // string literal that would have been concatenated to the value.
    EXPECT_EQ(ParseError("name: \"a\"\n@"),
              "models/x/config.pbtxt:2: unexpected character '@'");
    EXPECT_EQ(ParseError("input [ { name: \"a\"\n # c\n 'b"),
              "models/x/config.pbtxt:3: input.name: unterminated string");
    EXPECT_EQ(ParseError(std::string("name: \"a\0b\"", 11)),
              "models/x/config.pbtxt:1: name: string contains a NUL byte");
    EXPECT_EQ(ParseError("[ext.field]: 1"),
              "models/x/config.pbtxt:1: expected a field name, got '['");
}

TEST(ModelConfig, ValidationErrors) {
    EXPECT_EQ(ParseError("max_batch_sise: 8"),
              "models/x/config.pbtxt:1: max_batch_sise: unknown field (not in "
              "model_config.proto)");
    EXPECT_EQ(ParseError(std::string(kInput) +
                         "input { name: \"b\" data_type: TYPE_FP32 dims: 1 "
                         "label_filename: \"l\" }"),
              "models/x/config.pbtxt:2: input.label_filename: unknown field "
              "(not in model_config.proto)");
    EXPECT_EQ(ParseError("name: \"a\"\nname: \"b\""),
              "models/x/config.pbtxt:2: name: non-repeated field is "
              "specified more than once");
    EXPECT_EQ(ParseError("max_batch_size: -1"),
              "models/x/config.pbtxt:1: max_batch_size: value -1 out of range "
              "[0, 2147483647]");
    EXPECT_EQ(ParseError("max_batch_size: 4294967296"),
              "models/x/config.pbtxt:1: max_batch_size: value 4294967296 out "
              "of range [0, 2147483647]");
    EXPECT_EQ(ParseError("max_batch_size: 4\ndynamic_batching {\n"
                         " preferred_batch_size: [ 0 ] }"),
              "models/x/config.pbtxt:3: dynamic_batching.preferred_batch_size: "
              "value 0 out of range [1, 2147483647]");
    EXPECT_EQ(ParseError("max_batch_size: 4\ndynamic_batching {\n"
                         " preferred_batch_size: [ 2, 8 ] }"),
              "models/x/config.pbtxt:3: dynamic_batching.preferred_batch_size: "
              "8 is larger than max_batch_size 4");
    EXPECT_EQ(ParseError("instance_group [ { count: -1 } ]"),
              "models/x/config.pbtxt:1: instance_group.count: value -1 out of "
              "range [0, 2147483647]");
    EXPECT_EQ(ParseError("instance_group [ { gpus: [ 0, -1 ] } ]"),
              "models/x/config.pbtxt:1: instance_group.gpus: value -1 out of "
              "range [0, 2147483647]");
    EXPECT_EQ(ParseError("instance_group [ { kind: KIND_CPU gpus: 0 } ]"),
              "models/x/config.pbtxt:1: instance_group.gpus: must not be given "
              "for KIND_CPU");
    EXPECT_EQ(ParseError("instance_group [ { kind: 2 } ]"),
              "models/x/config.pbtxt:1: instance_group.kind: expected an enum "
              "value, got an integer");
    EXPECT_EQ(ParseError("parameters { key: \"k\" value { string_value: "
                         "\"1\" } }\nparameters { key: \"k\" }"),
              "models/x/config.pbtxt:2: parameters.key: duplicate key 'k'");
    EXPECT_EQ(ParseError("parameters { value { string_value: \"1\" } }"),
              "models/x/config.pbtxt:1: parameters.key: is required");
    EXPECT_EQ(ParseError("parameters { key: \"k\" value: \"v\" }"),
              "models/x/config.pbtxt:1: parameters.value: expected a message, "
              "got a string");
    EXPECT_EQ(ParseError("parameters { key: \"k\" value { int_value: 1 } }"),
              "models/x/config.pbtxt:1: parameters.value.int_value: unknown "
              "field (not in model_config.proto)");
    EXPECT_EQ(ParseError("dynamic_batching { priority_levels: 2\n"
                         "priority_queue_policy { key: 3 value { } } }"),
              "models/x/config.pbtxt:2: dynamic_batching.priority_queue_policy:"
              " key 3 is not in [1, priority_levels]");
    EXPECT_EQ(ParseError("dynamic_batching { priority_levels: 2\n"
                         "priority_queue_policy { key: 1 value { } }\n"
                         "priority_queue_policy { key: 1 value { } } }"),
              "models/x/config.pbtxt:3: dynamic_batching.priority_queue_policy:"
              " duplicate key 1");
    EXPECT_EQ(ParseError("dynamic_batching { priority_levels: 2\n"
                         "default_priority_level: 3 }"),
              "models/x/config.pbtxt:2: dynamic_batching.default_priority_level"
              ": must be in [1, priority_levels]");
    EXPECT_EQ(ParseError("dynamic_batching { default_queue_policy { "
                         "timeout_action: DROP } }"),
              "models/x/config.pbtxt:1: "
              "dynamic_batching.default_queue_policy.timeout_action: unknown "
              "enum value 'DROP'");
    EXPECT_EQ(ParseError("dynamic_batching { }\nsequence_batching { }"),
              "models/x/config.pbtxt:2: sequence_batching: cannot be given "
              "together with dynamic_batching");
    EXPECT_EQ(ParseError("version_policy { latest { num_versions: 1 }\n"
                         "all { } }"),
              "models/x/config.pbtxt:2: version_policy.all: only one of "
              "latest, all and specific may be given");
    EXPECT_EQ(ParseError("version_policy { latest { } }"),
              "models/x/config.pbtxt:1: version_policy.latest.num_versions: "
              "must be > 0");
    EXPECT_EQ(ParseError("version_policy { specific { versions: [ 0 ] } }"),
              "models/x/config.pbtxt:1: version_policy.specific.versions: "
              "value 0 out of range [1, 9223372036854775807]");
    EXPECT_EQ(ParseError("output { name: \"o\" data_type: TYPE_FP32 dims: 1 "
                         "label_filename: \"../../etc/passwd\" }"),
              "models/x/config.pbtxt:1: output.label_filename: must be a file "
              "name in the model folder, got '../../etc/passwd'");
    EXPECT_EQ(ParseError("model_transaction_policy { decoupled: 2 }"),
              "models/x/config.pbtxt:1: model_transaction_policy.decoupled: "
              "expected true or false, got an integer");
}

TEST(ModelConfig, DimsRankLimit) {
    auto with_dims = [](int rank, int max_batch_size) {
        std::string text = "max_batch_size: " + std::to_string(max_batch_size) +
                           "\ninput { name: \"a\" data_type: TYPE_FP32 dims: [";
        for (int i = 0; i < rank; i++)
            text += i ? ", 1" : "1";
        return text + "] }";
    };
    Parsed ok(with_dims(OSP_MAX_DIMS, 0));
    ASSERT_NE(ok.cfg, nullptr) << ok.error;
    EXPECT_EQ(ok->inputs[0].dims.rank, OSP_MAX_DIMS);
    Parsed ok_batched(with_dims(OSP_MAX_DIMS - 1, 4));
    ASSERT_NE(ok_batched.cfg, nullptr) << ok_batched.error;

    EXPECT_EQ(ParseError(with_dims(OSP_MAX_DIMS + 1, 0)),
              "models/x/config.pbtxt:2: input.dims: more than 16 dimensions");
    EXPECT_EQ(ParseError(with_dims(OSP_MAX_DIMS, 4)),
              "models/x/config.pbtxt:2: input.dims: more than 15 dimensions "
              "(plus the batch dimension)");
}

TEST(ModelConfig, NestingTooDeep) {
    // Skipped fields are still parsed: the depth cap guards the parser
    // itself, whatever the field.
    std::string deep = "optimization ";
    for (int i = 0; i < 100; i++)
        deep += "{ a ";
    std::string err = ParseError(deep);
    EXPECT_NE(err.find("models/x/config.pbtxt:1: optimization.a.a."),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("nesting deeper than 64 levels"), std::string::npos)
        << err;

    std::string lists = "a: ";
    for (int i = 0; i < 100000; i++)
        lists += "[{a ";
    err = ParseError(lists);
    EXPECT_NE(err.find("nesting deeper than 64 levels"), std::string::npos)
        << err;
}

TEST(ModelConfig, NullFilenameAndText) {
    osp_model_config *cfg = nullptr;
    osp_error *err = osp_model_config_parse("name: 1", 7, nullptr, &cfg);
    ASSERT_NE(err, nullptr);
    EXPECT_STREQ(osp_error_message(err),
                 "<config>:1: name: expected a string, got an integer");
    osp_error_free(err);

    err = osp_model_config_parse(nullptr, 0, nullptr, &cfg);
    ASSERT_EQ(err, nullptr);
    osp_model_config_free(cfg);
    osp_model_config_free(nullptr);
}

TEST(ModelConfig, Load) {
    char dir[] = "/tmp/osp_model_config_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string path = std::string(dir) + "/config.pbtxt";
    FILE *f = fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(kSimple, f);
    fputs("output { name: \"BAD\" data_type: TYPE_X dims: 1 }\n", f);
    fclose(f);

    osp_model_config *cfg = nullptr;
    osp_error *err = osp_model_config_load(path.c_str(), &cfg);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(std::string(osp_error_message(err)),
              path + ":29: output.data_type: unknown data type 'TYPE_X'");
    osp_error_free(err);

    f = fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(kSimple, f);
    fclose(f);
    err = osp_model_config_load(path.c_str(), &cfg);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    EXPECT_STREQ(cfg->name, "simple");
    osp_model_config_free(cfg);

    err = osp_model_config_load((std::string(dir) + "/missing").c_str(), &cfg);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_NOT_FOUND);
    osp_error_free(err);

    err = osp_model_config_load(dir, &cfg); // a directory
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    osp_error_free(err);

    unlink(path.c_str());
    rmdir(dir);
}

// Every config.pbtxt of the example repository the server ships.
TEST(ModelConfig, ExampleRepositoryParses) {
    const fs::path models = fs::path(OSPREY_SOURCE_DIR) / "models";
    if (!fs::is_directory(models))
        GTEST_SKIP() << "no " << models;
    int parsed = 0;
    for (const auto &entry : fs::directory_iterator(models)) {
        const fs::path config = entry.path() / "config.pbtxt";
        if (!fs::exists(config))
            continue;
        osp_model_config *cfg = nullptr;
        osp_error *err = osp_model_config_load(config.c_str(), &cfg);
        EXPECT_EQ(err, nullptr) << osp_error_message(err);
        osp_error_free(err);
        if (cfg) {
            EXPECT_EQ(entry.path().filename(), cfg->name);
        }
        osp_model_config_free(cfg);
        parsed++;
    }
    EXPECT_GT(parsed, 0);
}

// The text-format tree itself.
TEST(Pbtxt, TreeShapeAndLines) {
    const std::string text = "a: 1\n"
                             "b: [ 2, -3 ]  # list\n"
                             "m < x: 'y' >\n"
                             "l [ { z: 1.5 }, { z: -inf } ]\n"
                             "e: SOME_ENUM; f: 0x1F, g: -.5e1f\n"
                             "h: 18446744073709551615 i: -0\n";
    pbtxt_node *root = nullptr;
    osp_error *err = pbtxt_parse(text.data(), text.size(), "t", &root);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    EXPECT_EQ(pbtxt_count(root, "b"), 2u);
    EXPECT_EQ(pbtxt_count(root, "l"), 2u);

    const pbtxt_node *n = root->first_child;
    ASSERT_NE(n, nullptr);
    EXPECT_STREQ(n->name, "a");
    EXPECT_EQ(n->kind, PBTXT_INT);
    EXPECT_EQ(n->magnitude, 1u);
    EXPECT_EQ(n->line, 1);

    n = n->next;
    EXPECT_STREQ(n->name, "b");
    EXPECT_EQ(n->magnitude, 2u);
    EXPECT_FALSE(n->negative);
    n = n->next;
    EXPECT_STREQ(n->name, "b");
    EXPECT_TRUE(n->negative);
    EXPECT_EQ(n->magnitude, 3u);
    EXPECT_EQ(n->line, 2);

    n = n->next;
    EXPECT_STREQ(n->name, "m");
    EXPECT_EQ(n->kind, PBTXT_MESSAGE);
    EXPECT_EQ(n->line, 3);
    ASSERT_NE(n->first_child, nullptr);
    EXPECT_EQ(n->first_child->kind, PBTXT_STRING);
    EXPECT_STREQ(n->first_child->str, "y");

    n = n->next;
    EXPECT_STREQ(n->name, "l");
    EXPECT_EQ(n->first_child->kind, PBTXT_FLOAT);
    EXPECT_DOUBLE_EQ(n->first_child->fval, 1.5);
    n = n->next;
    EXPECT_STREQ(n->name, "l");
    EXPECT_TRUE(std::isinf(n->first_child->fval));
    EXPECT_LT(n->first_child->fval, 0);

    n = n->next;
    EXPECT_EQ(n->kind, PBTXT_IDENT);
    EXPECT_STREQ(n->str, "SOME_ENUM");
    EXPECT_EQ(n->line, 5);
    n = n->next;
    EXPECT_EQ(n->magnitude, 31u);
    n = n->next;
    EXPECT_EQ(n->kind, PBTXT_FLOAT);
    EXPECT_DOUBLE_EQ(n->fval, -5.0);
    n = n->next;
    EXPECT_EQ(n->magnitude, UINT64_MAX);
    n = n->next;
    EXPECT_TRUE(n->negative);
    EXPECT_EQ(n->magnitude, 0u);
    EXPECT_EQ(n->next, nullptr);
    pbtxt_free(root);
}

TEST(Pbtxt, DepthLimitIsExact) {
    auto nested = [](int depth) {
        std::string s;
        for (int i = 0; i < depth; i++)
            s += "a {";
        for (int i = 0; i < depth; i++)
            s += "}";
        return s;
    };
    pbtxt_node *root = nullptr;
    std::string ok = nested(PBTXT_MAX_DEPTH);
    osp_error *err = pbtxt_parse(ok.data(), ok.size(), "t", &root);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    pbtxt_free(root);

    std::string too_deep = nested(PBTXT_MAX_DEPTH + 1);
    err = pbtxt_parse(too_deep.data(), too_deep.size(), "t", &root);
    ASSERT_NE(err, nullptr);
    EXPECT_NE(std::string(osp_error_message(err)).find("nesting deeper"),
              std::string::npos);
    osp_error_free(err);
}

TEST(Pbtxt, LongFlatInputIsFreedIteratively) {
    // A wide tree of many siblings and children must not recurse.
    std::string text;
    for (int i = 0; i < 200000; i++)
        text += "m { a: 1 b { c: \"x\" } }\n";
    pbtxt_node *root = nullptr;
    osp_error *err = pbtxt_parse(text.data(), text.size(), "t", &root);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    EXPECT_EQ(pbtxt_count(root, "m"), 200000u);
    pbtxt_free(root);
    pbtxt_free(nullptr);
}

// A partial override (no backend, no platform) takes the base's fields
// and replaces those it sets, repeated ones whole; a full one stands alone.
TEST(ModelConfig, OverrideCompletedFromBase) {
    const std::string base =
        "name: \"m\" backend: \"identity\" max_batch_size: 8\n"
        "input [ { name: \"A\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
        "output [ { name: \"B\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
        "instance_group [ { kind: KIND_CPU count: 2 } ]\n";
    const std::string partial =
        "max_batch_size: 16 instance_group [ { kind: KIND_CPU count: 1 }, "
        "{ kind: KIND_CPU count: 3 } ]";
    osp_model_config *cfg = nullptr;
    osp_error *err = osp_model_config_parse_over(
        partial.data(), partial.size(), "override", base.data(), base.size(),
        "m/config.pbtxt", &cfg);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    EXPECT_STREQ(cfg->backend, "identity");
    EXPECT_EQ(cfg->max_batch_size, 16);
    ASSERT_EQ(cfg->n_inputs, 1u);
    ASSERT_EQ(cfg->n_instance_groups, 2u);
    EXPECT_EQ(cfg->instance_groups[1].count, 3);
    osp_model_config_free(cfg);

    const std::string full = "backend: \"add_sub\" max_batch_size: 4";
    err = osp_model_config_parse_over(full.data(), full.size(), "override",
                                      base.data(), base.size(),
                                      "m/config.pbtxt", &cfg);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    EXPECT_STREQ(cfg->backend, "add_sub");
    EXPECT_EQ(cfg->n_inputs, 0u);
    osp_model_config_free(cfg);

    // Without a base, a partial override is parsed as it is.
    err = osp_model_config_parse_over(partial.data(), partial.size(),
                                      "override", nullptr, 0, nullptr, &cfg);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    EXPECT_STREQ(cfg->backend, "");
    osp_model_config_free(cfg);
}

} // namespace
