// The load API's override codecs: base64 file contents (server/json) and
// the ModelConfig JSON -> protobuf text rewrite (server/kserve), checked
// through the config parser that reads the result.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "base64.h"
#include "model_config_from_json.h"
#include "model_config_json.h"
#include "osprey/model_config.h"

extern "C" {
#include "json_util.h" // a C header without extern "C"
}

namespace {

std::string Decode(const std::string &in, bool *ok) {
    unsigned char *out = nullptr;
    size_t n = 0;
    *ok = base64_decode(in.data(), in.size(), &out, &n);
    std::string s = *ok ? std::string(reinterpret_cast<char *>(out), n) : "";
    free(out);
    return s;
}

TEST(Base64, Rfc4648Vectors) {
    const char *vectors[][2] = {{"", ""},
                                {"Zg==", "f"},
                                {"Zm8=", "fo"},
                                {"Zm9v", "foo"},
                                {"Zm9vYg==", "foob"},
                                {"Zm9vYmE=", "fooba"},
                                {"Zm9vYmFy", "foobar"},
                                {"+/+/", "\xfb\xff\xbf"}};
    for (auto &v : vectors) {
        bool ok = false;
        EXPECT_EQ(Decode(v[0], &ok), v[1]) << v[0];
        EXPECT_TRUE(ok) << v[0];
    }
}

TEST(Base64, RejectsMalformed) {
    for (const char *bad : {"Zg=", "Zg", "Z===", "====", "Zg==Zg==", "Zm9v\n",
                            "Zm-v", "Zm_v", "Z m9", "Zm9\x80"}) {
        bool ok = true;
        Decode(bad, &ok);
        EXPECT_FALSE(ok) << bad;
    }
}

struct ConfigDeleter {
    void operator()(osp_model_config *c) const {
        osp_model_config_free(c);
    }
};
using ConfigPtr = std::unique_ptr<osp_model_config, ConfigDeleter>;

// JSON -> text -> parsed config; fails the test on any error.
ConfigPtr FromJson(const std::string &json) {
    char *text = nullptr;
    osp_error *err =
        model_config_json_to_pbtxt(json.c_str(), json.size(), &text);
    EXPECT_EQ(err, nullptr) << (err ? osp_error_message(err) : "");
    osp_error_free(err);
    if (!text)
        return nullptr;
    osp_model_config *cfg = nullptr;
    err = osp_model_config_parse(text, strlen(text), "json", &cfg);
    EXPECT_EQ(err, nullptr) << (err ? osp_error_message(err) : "") << "\n"
                            << text;
    osp_error_free(err);
    free(text);
    return ConfigPtr(cfg);
}

TEST(ConfigJson, ProtoNamesAndProtobufJsonForms) {
    ConfigPtr c = FromJson(R"({
        "name": "m", "backend": "identity", "maxBatchSize": 8,
        "input": [{"name": "IN", "dataType": "TYPE_FP32", "dims": ["-1", 4]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1, "4"],
                    "label_filename": ""}],
        "instance_group": [{"kind": "KIND_CPU", "count": 2}],
        "dynamic_batching": {"preferredBatchSize": [2, 4],
                             "maxQueueDelayMicroseconds": "100",
                             "priorityLevels": "3",
                             "defaultPriorityLevel": "2",
                             "defaultQueuePolicy": {"timeoutAction": "DELAY",
                                                    "maxQueueSize": "7"},
                             "priorityQueuePolicy": {"1": {"maxQueueSize": 2}}},
        "parameters": {"k\"ey": {"string_value": "v\u00e9\n"}},
        "version_policy": {"specific": {"versions": ["1", 3]}},
        "optimization": null, "batch_input": [], "cc_model_filenames": {}
    })");
    ASSERT_NE(c, nullptr);
    EXPECT_STREQ(c->name, "m");
    EXPECT_EQ(c->max_batch_size, 8);
    ASSERT_EQ(c->n_inputs, 1u);
    EXPECT_EQ(c->inputs[0].dtype, OSP_TYPE_FP32);
    EXPECT_EQ(c->inputs[0].dims.rank, 2);
    EXPECT_EQ(c->inputs[0].dims.dims[0], -1);
    EXPECT_EQ(c->outputs[0].label_filename, nullptr);
    EXPECT_EQ(c->instance_groups[0].count, 2);
    const osp_dynamic_batching &db = c->dynamic_batching;
    EXPECT_TRUE(db.enabled);
    EXPECT_EQ(db.n_preferred_batch_sizes, 2u);
    EXPECT_EQ(db.max_queue_delay_us, 100u);
    EXPECT_EQ(db.priority_levels, 3u);
    EXPECT_EQ(db.default_queue_policy.timeout_action, OSP_TIMEOUT_DELAY);
    EXPECT_EQ(db.default_queue_policy.max_queue_size, 7u);
    ASSERT_EQ(db.n_priority_queue_policies, 1u);
    EXPECT_EQ(db.priority_queue_policies[0].level, 1u);
    ASSERT_EQ(c->n_parameters, 1u);
    EXPECT_STREQ(c->parameters[0].key, "k\"ey");
    EXPECT_STREQ(c->parameters[0].value, "v\xc3\xa9\n");
    EXPECT_EQ(c->version_policy.kind, OSP_VERSION_POLICY_SPECIFIC);
}

// Protobuf's JSON parser takes a number or a string for every integer
// field, 32-bit ones included (tritonclient's simple_http_model_control.py
// sends "max_batch_size": "16"), and enum numbers as well as names.
TEST(ConfigJson, IntegersAsStringsAndEnumsAsNumbers) {
    ConfigPtr c = FromJson(R"({
        "name": "m", "backend": "identity", "max_batch_size": "16",
        "input": [{"name": "IN", "data_type": 11, "dims": ["-1"]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}],
        "instance_group": [{"kind": 2, "count": "3"}],
        "dynamic_batching": {"preferred_batch_size": ["2", 4],
                             "default_queue_policy": {"timeout_action": 1}},
        "version_policy": {"latest": {"num_versions": "2"}}
    })");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->max_batch_size, 16);
    EXPECT_EQ(c->inputs[0].dtype, OSP_TYPE_FP32);
    EXPECT_EQ(c->instance_groups[0].count, 3);
    EXPECT_EQ(c->instance_groups[0].kind, OSP_INSTANCE_KIND_CPU);
    EXPECT_EQ(c->dynamic_batching.n_preferred_batch_sizes, 2u);
    EXPECT_EQ(c->dynamic_batching.default_queue_policy.timeout_action,
              OSP_TIMEOUT_DELAY);
    EXPECT_EQ(c->version_policy.kind, OSP_VERSION_POLICY_LATEST);

    // A string field keeps integer text as a string.
    c = FromJson(R"({"name": "123", "backend": "identity"})");
    ASSERT_NE(c, nullptr);
    EXPECT_STREQ(c->name, "123");

    char *text = nullptr;
    const std::string bad = R"({"input": [{"data_type": 99}]})";
    osp_error *err = model_config_json_to_pbtxt(bad.data(), bad.size(), &text);
    ASSERT_NE(err, nullptr);
    EXPECT_STREQ(osp_error_message(err),
                 "config: field 'data_type': unknown enum value 99");
    osp_error_free(err);
    free(text);
}

// GET .../config's JSON of a config (what model_config_to_json writes).
std::string ToJson(const osp_model_config *c) {
    bytebuf b;
    bytebuf_init(&b);
    model_config_to_json(c, &b);
    size_t n = 0;
    char *text = bytebuf_take(&b, &n);
    std::string out = text ? std::string(text, n) : "";
    free(text);
    return out;
}

ConfigPtr FromPbtxt(const std::string &text) {
    osp_model_config *cfg = nullptr;
    osp_error *err =
        osp_model_config_parse(text.data(), text.size(), "pbtxt", &cfg);
    EXPECT_EQ(err, nullptr) << (err ? osp_error_message(err) : "");
    osp_error_free(err);
    return ConfigPtr(cfg);
}

// The "optimization" object of a config's JSON.
std::string OptimizationJson(const std::string &json) {
    size_t at = json.find("\"optimization\":");
    size_t end = json.find(",\"instance_group\":");
    return at == std::string::npos || end == std::string::npos
               ? json
               : json.substr(at, end - at);
}

// What Triton 2.51 prints: every config is normalised to have an
// optimization (pinned memory on), between batch_output and the scheduler;
// default_model_filename is always there.
TEST(ConfigJson, OptimizationAsTritonPrintsIt) {
    ConfigPtr none = FromPbtxt("name: \"m\" backend: \"identity\"");
    ASSERT_NE(none, nullptr);
    std::string json = ToJson(none.get());
    EXPECT_EQ(OptimizationJson(json),
              "\"optimization\":{\"priority\":\"PRIORITY_DEFAULT\","
              "\"input_pinned_memory\":{\"enable\":true},"
              "\"output_pinned_memory\":{\"enable\":true},"
              "\"gather_kernel_buffer_threshold\":0,\"eager_batching\":false}");
    EXPECT_NE(json.find("\"batch_output\":[],\"optimization\":"),
              std::string::npos);
    EXPECT_NE(json.find("\"default_model_filename\":\"\","), std::string::npos);

    ConfigPtr graph = FromPbtxt("optimization { graph { level: -1 } }\n"
                                "default_model_filename: \"model.onnx\"\n"
                                "max_batch_size: 2 dynamic_batching { }");
    ASSERT_NE(graph, nullptr);
    json = ToJson(graph.get());
    EXPECT_EQ(OptimizationJson(json),
              "\"optimization\":{\"graph\":{\"level\":-1},"
              "\"priority\":\"PRIORITY_DEFAULT\","
              "\"input_pinned_memory\":{\"enable\":true},"
              "\"output_pinned_memory\":{\"enable\":true},"
              "\"gather_kernel_buffer_threshold\":0,\"eager_batching\":false},"
              "\"dynamic_batching\":{\"preferred_batch_size\":[],"
              "\"max_queue_delay_microseconds\":0,\"preserve_ordering\":false,"
              "\"priority_levels\":0,\"default_priority_level\":0,"
              "\"default_queue_policy\":{\"timeout_action\":\"REJECT\","
              "\"default_timeout_microseconds\":0,"
              "\"allow_timeout_override\":false,\"max_queue_size\":0},"
              "\"priority_queue_policy\":{}}");
    EXPECT_NE(json.find("\"default_model_filename\":\"model.onnx\","),
              std::string::npos);

    ConfigPtr accel = FromPbtxt(R"pb(
optimization {
  priority: PRIORITY_MIN
  execution_accelerators {
    gpu_execution_accelerator [ { name: "tensorrt"
      parameters { key: "precision_mode" value: "FP16" } } ]
  }
  output_pinned_memory { enable: false }
  eager_batching: true
})pb");
    ASSERT_NE(accel, nullptr);
    EXPECT_EQ(OptimizationJson(ToJson(accel.get())),
              "\"optimization\":{\"priority\":\"PRIORITY_MIN\","
              "\"execution_accelerators\":{\"gpu_execution_accelerator\":"
              "[{\"name\":\"tensorrt\",\"parameters\":"
              "{\"precision_mode\":\"FP16\"}}],"
              "\"cpu_execution_accelerator\":[]},"
              "\"input_pinned_memory\":{\"enable\":true},"
              "\"output_pinned_memory\":{\"enable\":false},"
              "\"gather_kernel_buffer_threshold\":0,\"eager_batching\":true}");
}

// What GET .../config prints loads back unchanged through the load API's
// JSON rewrite; protobuf's other JSON forms (lowerCamelCase, enum numbers,
// integers as strings) read the same.
TEST(ConfigJson, OptimizationRoundTrips) {
    ConfigPtr c = FromPbtxt(R"pb(
name: "m" backend: "onnxruntime" default_model_filename: "g.onnx"
optimization {
  graph { level: 3 } priority: PRIORITY_MAX
  execution_accelerators {
    cpu_execution_accelerator { name: "openvino"
      parameters { key: "k" value: "v" } }
    gpu_execution_accelerator { name: "tensorrt" }
  }
  input_pinned_memory { enable: false } gather_kernel_buffer_threshold: 9
})pb");
    ASSERT_NE(c, nullptr);
    std::string json = ToJson(c.get());
    ConfigPtr back = FromJson(json);
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(ToJson(back.get()), json);

    ConfigPtr forms = FromJson(R"({"defaultModelFilename": "x.onnx",
        "optimization": {"graph": {"level": "-1"}, "priority": 2,
                         "executionAccelerators": {"cpuExecutionAccelerator":
                             [{"name": "openvino", "parameters": {"a": "b"}}]},
                         "outputPinnedMemory": {"enable": false},
                         "gatherKernelBufferThreshold": "5"}})");
    ASSERT_NE(forms, nullptr);
    const osp_model_optimization &o = forms->optimization;
    EXPECT_STREQ(forms->default_model_filename, "x.onnx");
    EXPECT_TRUE(o.has_graph);
    EXPECT_EQ(o.graph_level, -1);
    EXPECT_EQ(o.priority, OSP_MODEL_PRIORITY_MIN);
    ASSERT_EQ(o.n_cpu_accelerators, 1u);
    EXPECT_STREQ(o.cpu_accelerators[0].parameters[0].key, "a");
    EXPECT_STREQ(o.cpu_accelerators[0].parameters[0].value, "b");
    EXPECT_TRUE(o.input_pinned_memory);
    EXPECT_FALSE(o.output_pinned_memory);
    EXPECT_EQ(o.gather_kernel_buffer_threshold, 5u);
}

TEST(ConfigJson, EmptyObjectIsAnEmptyConfig) {
    char *text = nullptr;
    ASSERT_EQ(model_config_json_to_pbtxt("{}", 2, &text), nullptr);
    EXPECT_STREQ(text, "");
    free(text);
}

TEST(ConfigJson, RejectsWhatIsNotAConfig) {
    std::string deep = std::string(100, '[') + std::string(100, ']');
    std::string deep_obj;
    for (int i = 0; i < 70; i++)
        deep_obj += "{\"a\":";
    deep_obj += "1" + std::string(70, '}');
    for (const std::string &bad :
         {std::string("{"), std::string("[]"), std::string("1"),
          std::string(R"({"input": [[1]]})"),
          std::string(R"({"dims": [null]})"), deep, deep_obj}) {
        char *text = nullptr;
        osp_error *err =
            model_config_json_to_pbtxt(bad.c_str(), bad.size(), &text);
        EXPECT_NE(err, nullptr) << bad;
        osp_error_free(err);
        free(text);
    }
}

} // namespace
