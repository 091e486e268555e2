// The step graph of an ensemble (server/core/scheduling/ensemble_graph.h):
// Triton's load checks on the config alone and against the steps' model
// configs, with its messages, and the plan the scheduler follows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ensemble_graph.h"

namespace {

osp_model_config *Parse(const std::string &text) {
    osp_model_config *cfg = nullptr;
    osp_error *err =
        osp_model_config_parse(text.data(), text.size(), "config.pbtxt", &cfg);
    EXPECT_EQ(err, nullptr) << osp_error_message(err);
    return cfg;
}

// "" when the check passes, else its message.
std::string Message(osp_error *err) {
    std::string m = err ? osp_error_message(err) : "";
    osp_error_free(err);
    return m;
}

std::string Step(const std::string &model,
                 const std::vector<std::pair<std::string, std::string>> &in,
                 const std::vector<std::pair<std::string, std::string>> &out) {
    std::string s = "step { model_name: \"" + model + "\" model_version: -1\n";
    for (auto &m : in)
        s += " input_map { key: \"" + m.first + "\" value: \"" + m.second +
             "\" }\n";
    for (auto &m : out)
        s += " output_map { key: \"" + m.first + "\" value: \"" + m.second +
             "\" }\n";
    return s + "}\n";
}

// An ensemble of INT32 [16] tensors, batching up to 8.
std::string Ensemble(const std::vector<std::string> &inputs,
                     const std::vector<std::string> &outputs,
                     const std::string &steps, const std::string &extra = "") {
    std::string s =
        "name: \"ens\"\nplatform: \"ensemble\"\nmax_batch_size: 8\n";
    for (auto &n : inputs)
        s += "input { name: \"" + n +
             "\" data_type: TYPE_INT32 dims: [ 16 ] }\n";
    for (auto &n : outputs)
        s += "output { name: \"" + n +
             "\" data_type: TYPE_INT32 dims: [ 16 ] }\n";
    return s + extra + "ensemble_scheduling {\n" + steps + "}\n";
}

std::string CheckConfig(const std::string &text) {
    osp_model_config *cfg = Parse(text);
    std::string m = cfg ? Message(ensemble_check_config(cfg)) : "parse";
    osp_model_config_free(cfg);
    return m;
}

TEST(EnsembleConfig, StepsAndMapsAreParsed) {
    osp_model_config *cfg = Parse(
        "name: \"ens\" platform: \"ensemble\"\n"
        "response_cache { enable: true }\n"
        "ensemble_scheduling { step [ { model_name: \"a\" model_version: 3 "
        "input_map { key: \"INPUT0\" value: \"IN\" } "
        "input_map { key: \"INPUT1\" value: \"IN2\" } "
        "output_map { key: \"OUTPUT0\" value: \"OUT\" } }, "
        "{ model_name: \"b\" input_map { key: \"X\" value: \"OUT\" } "
        "output_map { key: \"Y\" value: \"Z\" } } ] }\n");
    ASSERT_NE(cfg, nullptr);
    EXPECT_TRUE(cfg->response_cache);
    const osp_ensemble_scheduling &es = cfg->ensemble_scheduling;
    ASSERT_TRUE(es.enabled);
    ASSERT_EQ(es.n_steps, 2u);
    EXPECT_STREQ(es.steps[0].model_name, "a");
    EXPECT_EQ(es.steps[0].model_version, 3);
    ASSERT_EQ(es.steps[0].n_input_map, 2u);
    EXPECT_STREQ(es.steps[0].input_map[1].key, "INPUT1");
    EXPECT_STREQ(es.steps[0].input_map[1].value, "IN2");
    EXPECT_STREQ(es.steps[0].output_map[0].value, "OUT");
    EXPECT_EQ(es.steps[1].model_version, -1); // absent: the latest
    osp_model_config_free(cfg);
}

TEST(EnsembleConfig, BadStepsAreParseErrors) {
    auto error = [](const std::string &text) {
        osp_model_config *cfg = nullptr;
        std::string m = Message(osp_model_config_parse(text.data(), text.size(),
                                                       "config.pbtxt", &cfg));
        osp_model_config_free(cfg);
        return m;
    };
    EXPECT_EQ(error("ensemble_scheduling { step { model: \"a\" } }"),
              "config.pbtxt:1: ensemble_scheduling.step.model: unknown field "
              "(not in model_config.proto)");
    EXPECT_EQ(error("ensemble_scheduling { step { input_map { key: \"A\" "
                    "value: \"x\" } input_map { key: \"A\" value: \"y\" "
                    "} } }"),
              "config.pbtxt:1: ensemble_scheduling.step.input_map.key: "
              "duplicate key 'A'");
    EXPECT_EQ(error("response_cache { enable: maybe }"),
              "config.pbtxt:1: response_cache.enable: expected true or false, "
              "got 'maybe'");
    EXPECT_EQ(error("dynamic_batching { } ensemble_scheduling { }"),
              "config.pbtxt:1: ensemble_scheduling: cannot be given together "
              "with dynamic_batching");
}

const std::string kChain = Step("a", {{"INPUT0", "IN"}}, {{"OUTPUT0", "mid"}}) +
                           Step("b", {{"INPUT0", "mid"}}, {{"OUTPUT0", "OUT"}});

TEST(EnsembleGraph, AChainPasses) {
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT"}, kChain)), "");
}

TEST(EnsembleGraph, NotAnEnsemblePasses) {
    EXPECT_EQ(CheckConfig("name: \"m\" backend: \"identity\""), "");
}

TEST(EnsembleGraph, PlatformAndSchedulingGoTogether) {
    EXPECT_EQ(CheckConfig("name: \"ens\" platform: \"ensemble\""),
              "ensemble scheduling must be set for ensemble ens whose "
              "platform is ensemble");
    EXPECT_EQ(CheckConfig("name: \"m\" backend: \"identity\" "
                          "ensemble_scheduling { " +
                          kChain + "}"),
              "ensemble scheduling cannot be set for model 'm' whose "
              "platform is not ensemble");
}

TEST(EnsembleGraph, InstanceGroupsAndStepsAreChecked) {
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT"}, kChain,
                                   "instance_group { count: 1 }\n")),
              "instance group should not be specified for ensemble 'ens'");
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT"}, "")),
              "must specify 'step' for ensemble 'ens'");
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT"},
                                   "step { model_name: \"a\" output_map { "
                                   "key: \"O\" value: \"OUT\" } }\n")),
              "must specify 'input_map' in step 0 of ensemble 'ens'");
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT"},
                                   kChain + Step("c", {{"INPUT0", "IN"}},
                                                 {{"OUTPUT0", "OUT"}}))),
              "ensemble tensor 'OUT' can appear in an output map only once "
              "for ensemble 'ens' step 2");
}

TEST(EnsembleGraph, DataFlowChecks) {
    EXPECT_EQ(CheckConfig(Ensemble({"IN", "EXTRA"}, {"OUT"}, kChain)),
              "ensemble input 'EXTRA' for ensemble ens' is not used");
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT", "NONE"}, kChain)),
              "ensemble output 'NONE' for ensemble ens' is not used");
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT"},
                                   kChain + Step("c", {{"INPUT0", "IN"}},
                                                 {{"OUTPUT0", "spare"}}))),
              "ensemble tensor 'spare' is unused in ensemble 'ens'");
    // A step reading a tensor nothing writes.
    EXPECT_EQ(
        CheckConfig(Ensemble({"IN"}, {"OUT"},
                             Step("a", {{"INPUT0", "IN"}, {"INPUT1", "ghost"}},
                                  {{"OUTPUT0", "OUT"}}))),
        "output 'OUT' for ensemble 'ens' is not written: at least one "
        "of its depending tensors, 'ghost', is not connected");
}

TEST(EnsembleGraph, ACycleLeavesItsOutputUnwritten) {
    EXPECT_EQ(CheckConfig(Ensemble(
                  {"IN"}, {"OUT"},
                  Step("a", {{"INPUT0", "IN"}, {"INPUT1", "y"}},
                       {{"OUTPUT0", "x"}, {"OUTPUT1", "OUT"}}) +
                      Step("b", {{"INPUT0", "x"}}, {{"OUTPUT0", "y"}}))),
              "output 'OUT' for ensemble 'ens' is not written: at least one "
              "of its depending tensors, 'x', is not connected");
    EXPECT_EQ(CheckConfig(Ensemble(
                  {"IN"}, {"OUT"},
                  Step("a", {{"INPUT0", "OUT"}}, {{"OUTPUT0", "OUT"}}) +
                      Step("b", {{"INPUT0", "IN"}}, {{"OUTPUT0", "z"}}))),
              "output 'OUT' for ensemble 'ens' is not written");
}

TEST(EnsembleGraph, ALongChainInReverseOrderPasses) {
    // Steps listed last-first: data reaches each only after all later
    // ones in the list (a queue of ready tensors, not rounds over steps).
    const int n = 4000;
    std::string steps;
    for (int k = n - 1; k >= 0; k--)
        steps += Step(
            "a", {{"INPUT0", k ? "t" + std::to_string(k) : "IN"}},
            {{"OUTPUT0", k == n - 1 ? "OUT" : "t" + std::to_string(k + 1)}});
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT"}, steps)), "");
}

TEST(EnsembleGraph, TooManyMapEntriesAreRefused) {
    std::string steps;
    for (int k = 0; k < 8200; k++)
        steps += Step("a", {{"INPUT0", "IN"}}, {{"OUTPUT0", "OUT"}});
    EXPECT_EQ(CheckConfig(Ensemble({"IN"}, {"OUT"}, steps)),
              "ensemble 'ens' has more than 16384 input_map and output_map "
              "entries");
}

// A step model's config: inputs/outputs as "NAME:TYPE:dims".
std::string Model(const std::string &name, int max_batch,
                  const std::vector<std::string> &inputs,
                  const std::vector<std::string> &outputs) {
    std::string s = "name: \"" + name + "\"\nbackend: \"identity\"\n" +
                    "max_batch_size: " + std::to_string(max_batch) + "\n";
    auto io = [](const std::string &kind, const std::string &spec) {
        size_t a = spec.find(':'), b = spec.rfind(':');
        return kind + " { name: \"" + spec.substr(0, a) +
               "\" data_type: " + spec.substr(a + 1, b - a - 1) +
               " dims: " + spec.substr(b + 1) + " }\n";
    };
    for (auto &i : inputs)
        s += io("input", i);
    for (auto &o : outputs)
        s += io("output", o);
    return s;
}

std::string CheckSteps(const std::string &ens,
                       const std::vector<std::string> &models) {
    osp_model_config *cfg = Parse(ens);
    std::vector<osp_model_config *> owned;
    for (auto &m : models)
        owned.push_back(Parse(m));
    std::vector<const osp_model_config *> steps(owned.begin(), owned.end());
    std::string m = Message(ensemble_check_steps(cfg, steps.data()));
    for (auto *c : owned)
        osp_model_config_free(c);
    osp_model_config_free(cfg);
    return m;
}

const std::string kIntModel =
    Model("a", 8, {"INPUT0:TYPE_INT32:[16]"}, {"OUTPUT0:TYPE_INT32:[16]"});

TEST(EnsembleGraph, StepsAgreeWithTheirModels) {
    std::string ens = Ensemble({"IN"}, {"OUT"}, kChain);
    std::string b =
        Model("b", 8, {"INPUT0:TYPE_INT32:[-1]"}, {"OUTPUT0:TYPE_INT32:[16]"});
    EXPECT_EQ(CheckSteps(ens, {kIntModel, b}), "");
    // A non-batching model whose full shape matches.
    std::string flat = Model("b", 0, {"INPUT0:TYPE_INT32:[-1,16]"},
                             {"OUTPUT0:TYPE_INT32:[-1,16]"});
    EXPECT_EQ(CheckSteps(ens, {kIntModel, flat}), "");
}

TEST(EnsembleGraph, MismatchesNameTheTensorAndModels) {
    std::string ens = Ensemble({"IN"}, {"OUT"}, kChain);
    std::string fp =
        Model("b", 8, {"INPUT0:TYPE_FP32:[16]"}, {"OUTPUT0:TYPE_INT32:[16]"});
    EXPECT_EQ(CheckSteps(ens, {kIntModel, fp}),
              "in ensemble ens, ensemble tensor mid: inconsistent data type: "
              "TYPE_INT32 is inferred from model a while TYPE_FP32 is "
              "inferred from model b");
    std::string wide =
        Model("b", 8, {"INPUT0:TYPE_INT32:[32]"}, {"OUTPUT0:TYPE_INT32:[16]"});
    EXPECT_EQ(CheckSteps(ens, {kIntModel, wide}),
              "in ensemble ens, ensemble tensor mid: inconsistent shape: "
              "[-1,16] is inferred from model a while [-1,32] is inferred "
              "from model b");
    std::string small =
        Model("b", 4, {"INPUT0:TYPE_INT32:[16]"}, {"OUTPUT0:TYPE_INT32:[16]"});
    EXPECT_EQ(CheckSteps(ens, {kIntModel, small}),
              "ensemble ens allows maximum batch size 8, but it contains "
              "model b which only allows maximum batch size to be 4");
    std::string two =
        Model("b", 8, {"INPUT0:TYPE_INT32:[16]", "INPUT1:TYPE_INT32:[16]"},
              {"OUTPUT0:TYPE_INT32:[16]"});
    EXPECT_EQ(CheckSteps(ens, {kIntModel, two}),
              "in ensemble ens, input INPUT1 in model b is not mapped to any "
              "ensemble tensors");
    std::string renamed =
        Model("b", 8, {"INPUT0:TYPE_INT32:[16]"}, {"Y:TYPE_INT32:[16]"});
    EXPECT_EQ(CheckSteps(ens, {kIntModel, renamed}),
              "in ensemble ens, ensemble tensor OUT is mapped from "
              "non-existing output OUTPUT0 in model b");
}

TEST(EnsembleGraph, ThePlanLinksStepsThroughTensors) {
    osp_model_config *cfg = Parse(Ensemble(
        {"IN"}, {"OUT"},
        kChain +
            Step("c", {{"INPUT0", "mid"}, {"INPUT1", "IN"}},
                 {{"OUTPUT0", "side"}}) +
            Step("d", {{"INPUT0", "side"}}, {{"OUTPUT0", "unused_ok"}})));
    ASSERT_NE(cfg, nullptr);
    ensemble_plan *plan = nullptr;
    ASSERT_EQ(ensemble_plan_new(cfg, &plan), nullptr);
    ASSERT_EQ(plan->n_steps, 4u);
    auto name = [&](size_t t) { return std::string(plan->tensor_names[t]); };
    EXPECT_EQ(name(plan->input_tensors[0]), "IN");
    EXPECT_EQ(name(plan->output_tensors[0]), "OUT");
    EXPECT_TRUE(plan->is_output[plan->output_tensors[0]]);
    size_t mid = plan->steps[0].out_tensors[0];
    EXPECT_EQ(name(mid), "mid");
    EXPECT_EQ(plan->readers[mid], 2u); // steps b and c
    EXPECT_EQ(plan->steps[2].in_tensors[0], mid);
    EXPECT_EQ(plan->readers[plan->input_tensors[0]], 2u);
    ensemble_plan_free(plan);
    osp_model_config_free(cfg);
}

} // namespace
