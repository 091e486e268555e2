// An Osprey model as TF Serving sees it (server/tfserving/tfs_model.h): the
// "tf_serving" declaration of the bundled half_plus_two and
// saved_model_half_plus_three, the default serving_default of a model that
// declares nothing, declarations refused with clear messages, and the exact
// bytes of the status and metadata replies from a real server on a
// temporary repository.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "backends.h"
#include "json_util.h"
#include "osp_test.h"
#include "osprey/model_config.h"
#include "osprey/server.h"
#include "tfs_model.h"
}

namespace {

namespace fs = std::filesystem;

struct ConfigDeleter {
    void operator()(osp_model_config *c) const {
        osp_model_config_free(c);
    }
};
using ConfigPtr = std::unique_ptr<osp_model_config, ConfigDeleter>;

struct ViewDeleter {
    void operator()(tfs_model_view *v) const {
        tfs_model_view_free(v);
    }
};
using ViewPtr = std::unique_ptr<tfs_model_view, ViewDeleter>;

ConfigPtr ParseConfig(const std::string &text) {
    osp_model_config *cfg = nullptr;
    osp_error *err =
        osp_model_config_parse(text.data(), text.size(), "test.pbtxt", &cfg);
    if (err)
        ADD_FAILURE() << "config does not parse: " << TakeMessage(err) << "\n"
                      << text;
    return ConfigPtr(cfg);
}

ConfigPtr BundledConfig(const std::string &model) {
    osp_model_config *cfg = nullptr;
    std::string path =
        std::string(OSPREY_SOURCE_DIR) + "/models/" + model + "/config.pbtxt";
    osp_error *err = osp_model_config_load(path.c_str(), &cfg);
    if (err)
        ADD_FAILURE() << path << ": " << TakeMessage(err);
    return ConfigPtr(cfg);
}

ViewPtr View(const osp_model_config *cfg) {
    tfs_model_view *view = nullptr;
    osp_error *err = tfs_model_view_new(cfg, &view);
    if (err)
        ADD_FAILURE() << "view: " << TakeMessage(err);
    return ViewPtr(view);
}

std::vector<int64_t> Dims(const tfs_tensor_info &t) {
    return std::vector<int64_t>(t.shape.dims, t.shape.dims + t.shape.rank);
}

// ---- the view of a config ---------------------------------------------------

TEST(TfsModelView, HalfPlusTwoDeclaresSixSignaturesAndALabel) {
    ConfigPtr cfg = BundledConfig("half_plus_two");
    ASSERT_TRUE(cfg);
    ViewPtr view = View(cfg.get());
    ASSERT_TRUE(view);

    ASSERT_EQ(view->n_signatures, 6u);
    const char *names[] = {"classify_x2_to_y3", "classify_x_to_y",
                           "regress_x2_to_y3",  "regress_x_to_y",
                           "regress_x_to_y2",   "serving_default"};
    for (size_t i = 0; i < 6; i++)
        EXPECT_STREQ(view->signatures[i].name, names[i]);

    const tfs_signature *def =
        tfs_model_view_signature(view.get(), "serving_default");
    ASSERT_NE(def, nullptr);
    EXPECT_EQ(def->method, TFS_METHOD_PREDICT);
    EXPECT_TRUE(def->elementwise);
    ASSERT_EQ(def->n_inputs, 1u);
    ASSERT_EQ(def->n_outputs, 1u);
    EXPECT_EQ(def->n_features, 0u);
    EXPECT_STREQ(def->inputs[0].key, "x");
    EXPECT_STREQ(def->inputs[0].tensor, "x");
    EXPECT_STREQ(def->inputs[0].name, "x:0");
    EXPECT_EQ(def->inputs[0].dtype, OSP_TYPE_FP32);
    EXPECT_TRUE(def->inputs[0].has_shape);
    EXPECT_FALSE(def->inputs[0].unknown_rank);
    EXPECT_EQ(Dims(def->inputs[0]), (std::vector<int64_t>{-1, 1}));
    EXPECT_STREQ(def->outputs[0].key, "y");
    EXPECT_STREQ(def->outputs[0].tensor, "y");
    EXPECT_STREQ(def->outputs[0].name, "y:0");

    const tfs_signature *cls =
        tfs_model_view_signature(view.get(), "classify_x_to_y");
    ASSERT_NE(cls, nullptr);
    EXPECT_EQ(cls->method, TFS_METHOD_CLASSIFY);
    EXPECT_FALSE(cls->elementwise);
    ASSERT_EQ(cls->n_inputs, 1u);
    EXPECT_STREQ(cls->inputs[0].key, "inputs");
    EXPECT_EQ(cls->inputs[0].tensor, nullptr); // serialized tf.Examples
    EXPECT_STREQ(cls->inputs[0].name, "tf_example:0");
    EXPECT_EQ(cls->inputs[0].dtype, OSP_TYPE_BYTES);
    EXPECT_TRUE(cls->inputs[0].has_shape);
    EXPECT_TRUE(cls->inputs[0].unknown_rank);
    ASSERT_EQ(cls->n_outputs, 1u);
    EXPECT_STREQ(cls->outputs[0].key, "scores");
    EXPECT_STREQ(cls->outputs[0].tensor, "y");
    EXPECT_STREQ(cls->outputs[0].name, "y:0");
    ASSERT_EQ(cls->n_features, 1u);
    EXPECT_STREQ(cls->features[0].feature, "x");
    EXPECT_STREQ(cls->features[0].input, "x");
    EXPECT_FALSE(cls->features[0].has_default);

    const tfs_signature *r3 =
        tfs_model_view_signature(view.get(), "regress_x2_to_y3");
    ASSERT_NE(r3, nullptr);
    EXPECT_EQ(r3->method, TFS_METHOD_REGRESS);
    // a float tensor inside the graph: :predict feeds it directly
    EXPECT_STREQ(r3->inputs[0].tensor, "x2");
    EXPECT_STREQ(r3->inputs[0].name, "x2:0"); // as TF's graph shows it
    EXPECT_EQ(r3->inputs[0].dtype, OSP_TYPE_FP32);
    EXPECT_EQ(Dims(r3->inputs[0]), (std::vector<int64_t>{-1, 1}));
    EXPECT_STREQ(r3->outputs[0].key, "outputs");
    EXPECT_STREQ(r3->outputs[0].tensor, "y3");
    ASSERT_EQ(r3->n_features, 1u);
    EXPECT_STREQ(r3->features[0].feature, "x2");
    EXPECT_STREQ(r3->features[0].input, "x2");
    EXPECT_TRUE(r3->features[0].has_default);
    EXPECT_EQ(r3->features[0].default_value, 0.0f);

    const tfs_signature *r2 =
        tfs_model_view_signature(view.get(), "regress_x_to_y2");
    ASSERT_NE(r2, nullptr);
    EXPECT_STREQ(r2->outputs[0].tensor, "y2");
    EXPECT_STREQ(r2->outputs[0].name, "y2:0");
    EXPECT_EQ(tfs_model_view_signature(view.get(), "nope"), nullptr);
    EXPECT_EQ(tfs_model_view_signature(view.get(), nullptr), nullptr);

    int64_t version = 0;
    ASSERT_EQ(view->n_labels, 1u);
    EXPECT_TRUE(tfs_model_view_label(view.get(), "Version_Label", &version));
    EXPECT_EQ(version, 123);
    EXPECT_FALSE(tfs_model_view_label(view.get(), "version_label", &version));
    EXPECT_FALSE(tfs_model_view_label(view.get(), "bogus", &version));
}

TEST(TfsModelView, HalfPlusThreeHasShapelessTensorInfos) {
    ConfigPtr cfg = BundledConfig("saved_model_half_plus_three");
    ASSERT_TRUE(cfg);
    ViewPtr view = View(cfg.get());
    ASSERT_TRUE(view);
    ASSERT_EQ(view->n_signatures, 2u);
    EXPECT_STREQ(view->signatures[0].name, "serving_default");
    EXPECT_STREQ(view->signatures[1].name, "tensorflow/serving/regress");
    const tfs_signature &def = view->signatures[0];
    EXPECT_TRUE(def.elementwise);
    EXPECT_FALSE(def.inputs[0].has_shape);
    EXPECT_FALSE(def.outputs[0].has_shape);
    const tfs_signature &reg = view->signatures[1];
    EXPECT_EQ(reg.method, TFS_METHOD_REGRESS);
    EXPECT_STREQ(reg.outputs[0].name, "Identity:0");
    EXPECT_STREQ(reg.outputs[0].tensor, "y");
    EXPECT_FALSE(reg.inputs[0].has_shape);
    EXPECT_EQ(view->n_labels, 0u);
}

std::string PlainConfig(int max_batch, const std::string &extra = "") {
    return "name: \"plain\" backend: \"identity\" max_batch_size: " +
           std::to_string(max_batch) +
           "\ninput [ { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ 16 ] }, "
           "{ name: \"INPUT0\" data_type: TYPE_STRING dims: [ -1, 2 ] } ]\n"
           "output [ { name: \"OUTPUT0\" data_type: TYPE_BF16 dims: [ 3 ] }, "
           "{ name: \"OUTPUT1\" data_type: TYPE_FP32 dims: [ 1 ] } ]\n" +
           extra;
}

TEST(TfsModelView, APlainModelGetsServingDefaultFromItsConfig) {
    for (int max_batch : {8, 0}) {
        ConfigPtr cfg = ParseConfig(PlainConfig(max_batch));
        ASSERT_TRUE(cfg);
        ViewPtr view = View(cfg.get());
        ASSERT_TRUE(view);
        EXPECT_EQ(view->n_labels, 0u);
        ASSERT_EQ(view->n_signatures, 1u);
        const tfs_signature &sig = view->signatures[0];
        EXPECT_STREQ(sig.name, "serving_default");
        EXPECT_EQ(sig.method, TFS_METHOD_PREDICT);
        EXPECT_FALSE(sig.elementwise);
        EXPECT_EQ(sig.n_features, 0u);
        ASSERT_EQ(sig.n_inputs, 2u);
        ASSERT_EQ(sig.n_outputs, 2u);
        // Sorted by key, whatever the config order.
        EXPECT_STREQ(sig.inputs[0].key, "INPUT0");
        EXPECT_STREQ(sig.inputs[0].tensor, "INPUT0");
        EXPECT_STREQ(sig.inputs[0].name, "INPUT0:0");
        EXPECT_EQ(sig.inputs[0].dtype, OSP_TYPE_BYTES);
        EXPECT_STREQ(sig.inputs[1].key, "INPUT1");
        EXPECT_EQ(sig.inputs[1].dtype, OSP_TYPE_INT32);
        EXPECT_EQ(sig.outputs[0].dtype, OSP_TYPE_BF16);
        EXPECT_EQ(sig.outputs[1].dtype, OSP_TYPE_FP32);
        for (const tfs_tensor_info *t : {&sig.inputs[0], &sig.inputs[1]}) {
            EXPECT_TRUE(t->has_shape);
            EXPECT_FALSE(t->unknown_rank);
        }
        if (max_batch > 0) {
            EXPECT_EQ(Dims(sig.inputs[0]), (std::vector<int64_t>{-1, -1, 2}));
            EXPECT_EQ(Dims(sig.inputs[1]), (std::vector<int64_t>{-1, 16}));
            EXPECT_EQ(Dims(sig.outputs[0]), (std::vector<int64_t>{-1, 3}));
        } else {
            EXPECT_EQ(Dims(sig.inputs[0]), (std::vector<int64_t>{-1, 2}));
            EXPECT_EQ(Dims(sig.inputs[1]), (std::vector<int64_t>{16}));
            EXPECT_EQ(Dims(sig.outputs[0]), (std::vector<int64_t>{3}));
        }
    }
}

std::string Declaring(const std::string &json) {
    // Single-quoted pbtxt string: the JSON keeps its double quotes.
    return PlainConfig(8, "parameters [ { key: \"tf_serving\" value: { "
                          "string_value: '" +
                              json + "' } } ]\n");
}

TEST(TfsModelView, LabelsAloneKeepTheDefaultSignature) {
    ConfigPtr cfg = ParseConfig(
        Declaring(R"({"version_labels": {"stable": 1, "canary": 2}})"));
    ASSERT_TRUE(cfg);
    ViewPtr view = View(cfg.get());
    ASSERT_TRUE(view);
    ASSERT_EQ(view->n_signatures, 1u);
    EXPECT_STREQ(view->signatures[0].name, "serving_default");
    ASSERT_EQ(view->n_labels, 2u);
    EXPECT_STREQ(view->labels[0].label, "canary"); // sorted
    int64_t v = 0;
    EXPECT_TRUE(tfs_model_view_label(view.get(), "stable", &v));
    EXPECT_EQ(v, 1);
    EXPECT_TRUE(tfs_model_view_label(view.get(), "canary", &v));
    EXPECT_EQ(v, 2);
}

TEST(TfsModelView, DeclaredTensorInfosDefaultFromTheConfig) {
    ConfigPtr cfg = ParseConfig(Declaring(
        R"({"signatures": {"s": {"method": "predict",)"
        R"( "inputs": {"a": {"tensor": "INPUT1"},)"
        R"(            "b": {"tensor": "INPUT0", "name": "b/x:0", "shape": "unknown_rank"}},)"
        R"( "outputs": {"o": {"tensor": "OUTPUT0", "dtype": "DT_BFLOAT16", "shape": [2, -1]}}}}})"));
    ASSERT_TRUE(cfg);
    ViewPtr view = View(cfg.get());
    ASSERT_TRUE(view);
    ASSERT_EQ(view->n_signatures, 1u);
    EXPECT_EQ(tfs_model_view_signature(view.get(), "serving_default"),
              nullptr); // declared signatures are the whole set
    const tfs_signature &s = view->signatures[0];
    EXPECT_FALSE(s.elementwise);
    EXPECT_STREQ(s.inputs[0].name, "INPUT1:0");
    EXPECT_EQ(Dims(s.inputs[0]), (std::vector<int64_t>{-1, 16}));
    EXPECT_STREQ(s.inputs[1].name, "b/x:0");
    EXPECT_TRUE(s.inputs[1].unknown_rank);
    EXPECT_EQ(s.inputs[1].dtype, OSP_TYPE_BYTES);
    EXPECT_EQ(Dims(s.outputs[0]), (std::vector<int64_t>{2, -1}));
    EXPECT_EQ(s.outputs[0].dtype, OSP_TYPE_BF16);
}

TEST(TfsModelView, RefusesBadDeclarationsWithClearMessages) {
    const std::string p = "model 'plain': parameter 'tf_serving': ";
    const std::string reg_in =
        R"("inputs": {"inputs": {"name": "tf_example:0"}})";
    const std::string reg_out =
        R"("outputs": {"outputs": {"tensor": "OUTPUT1"}})";
    struct Case {
        std::string json, message;
    } cases[] = {
        {"{", p + "not valid JSON: "},
        {"[1]", p + "the declaration must be an object, got an array"},
        {R"({"signature": {}})",
         p + "the declaration: unknown key 'signature' (known: "
             "version_labels, signatures)"},
        {R"({"version_labels": [1]})",
         p + "\"version_labels\" must be an object, got an array"},
        {R"({"version_labels": {"a": "1"}})",
         p + "\"version_labels\": label 'a' must map to a version number (an "
             "integer >= 0), got a string"},
        {R"({"version_labels": {"a": -1}})",
         p + "\"version_labels\": label 'a' must map to a version number"},
        {R"({"version_labels": {"": 1}})",
         p + "\"version_labels\": a label must not be empty"},
        {R"({"signatures": {}})",
         p + "\"signatures\" is empty; leave it out for the default "
             "serving_default"},
        {R"({"signatures": {"s": 1}})",
         p + "signature 's' must be an object, got a number"},
        {R"({"signatures": {"s": {"inputs": {}}}})",
         p + "signature 's': needs \"method\": \"predict\", \"classify\" or "
             "\"regress\""},
        {R"({"signatures": {"s": {"method": "explain"}}})",
         p + "signature 's': unknown \"method\" 'explain' (predict, classify, "
             "regress)"},
        {R"({"signatures": {"s": {"method": "predict", "input": {}}}})",
         p + "signature 's': unknown key 'input' (known: method, inputs, "
             "outputs, features, elementwise)"},
        {R"({"signatures": {"s": {"method": "predict"}}})",
         p + "signature 's': \"inputs\" is missing"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {}}}})",
         p + "signature 's': \"inputs\" is empty"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"name": "a:0"}}}}})",
         p + "signature 's': input 'a': needs \"tensor\", the model input it "
             "is"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"tensor": "OUTPUT0"}}}}})",
         p + "signature 's': input 'a': \"tensor\" 'OUTPUT0' is not an input "
             "of the model"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"tensor": "INPUT1"}}, "outputs": {"o": {"tensor": "INPUT1"}}}}})",
         p + "signature 's': output 'o': \"tensor\" 'INPUT1' is not an output "
             "of the model"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"tensor": "INPUT1", "dtype": "DT_FLOAT"}}}}})",
         p + "signature 's': input 'a': \"dtype\" DT_FLOAT does not match "
             "input 'INPUT1', which is TYPE_INT32"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"tensor": "INPUT1", "dtype": "float"}}}}})",
         p + "signature 's': input 'a': unknown \"dtype\" 'float'"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"tensor": "INPUT1", "shape": [1, -2]}}}}})",
         p + "signature 's': input 'a': \"shape\" dimension 1 must be an "
             "integer >= -1 (-1: any size)"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"tensor": "INPUT1", "shape": "any"}}}}})",
         p + "signature 's': input 'a': \"shape\" must be an array of "
             "dimensions, \"unknown_rank\" or null, got a string"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"tensor": "INPUT1", "tensr": 1}}}}})",
         p + "signature 's': input 'a': unknown key 'tensr' (known: tensor, "
             "name, dtype, shape)"},
        {R"({"signatures": {"s": {"method": "predict", "inputs": {"a": {"tensor": ""}}}}})",
         p + "signature 's': input 'a' must be a non-empty string, got \"\""},
        {R"({"signatures": {"s": {"method": "predict", "elementwise": 1, "inputs": {"a": {"tensor": "INPUT1"}}, "outputs": {"o": {"tensor": "OUTPUT0"}}}}})",
         p + "signature 's': \"elementwise\" must be true or false, got a "
             "number"},
        {R"({"signatures": {"s": {"method": "predict", "features": {}, "inputs": {"a": {"tensor": "INPUT1"}}, "outputs": {"o": {"tensor": "OUTPUT0"}}}}})",
         p + "signature 's': \"features\" are for classify and regress "
             "signatures only"},
        {R"({"signatures": {"r": {"method": "regress", )" + reg_in + ", " +
             reg_out + "}}}",
         p + "signature 'r': \"features\" is missing: a classify or regress "
             "signature says which model input each tf.Example feature "
             "fills"},
        {R"({"signatures": {"r": {"method": "regress", "inputs": {"inputs": {"tensor": "INPUT1"}}}}})",
         p + "signature 'r': input 'inputs': the input of a classify or "
             "regress signature takes serialized tf.Examples"},
        {R"({"signatures": {"r": {"method": "regress", "inputs": {"inputs": {}}}}})",
         p + "signature 'r': input 'inputs': needs \"name\", the TensorFlow "
             "tensor name metadata shows"},
        {R"({"signatures": {"r": {"method": "regress", )" + reg_in + ", " +
             reg_out + R"(, "features": {"x": {"input": "INPUT1"}}}}})",
         p + "signature 'r': feature 'x': input 'INPUT1' is TYPE_INT32; "
             "features are float"},
        {R"({"signatures": {"r": {"method": "regress", )" + reg_in + ", " +
             reg_out + R"(, "features": {"x": {"input": "nope"}}}}})",
         p + "signature 'r': feature 'x': \"input\" 'nope' is not an input "
             "of the model"},
        {R"({"signatures": {"r": {"method": "regress", )" + reg_in + ", " +
             reg_out + R"(, "features": {"x": {}}}}})",
         p + "signature 'r': feature 'x': needs \"input\", the model input "
             "it fills"},
        {R"({"signatures": {"r": {"method": "regress", )" + reg_in + ", " +
             reg_out +
             R"(, "features": {"x": {"input": "INPUT1", "default": "0"}}}}})",
         p + "signature 'r': feature 'x': input 'INPUT1' is TYPE_INT32"},
        {R"({"signatures": {"r": {"method": "regress", "inputs": {"x": {"name": "t:0"}}, )" +
             reg_out + "}}}",
         p + "signature 'r': a regress signature has exactly one input, "
             "keyed \"inputs\""},
        {R"({"signatures": {"r": {"method": "regress", )" + reg_in +
             R"(, "outputs": {"scores": {"tensor": "OUTPUT0"}}}}})",
         p + "signature 'r': a regress signature has exactly one output, "
             "keyed \"outputs\""},
        {R"({"signatures": {"c": {"method": "classify", )" + reg_in +
             R"(, "outputs": {"probabilities": {"tensor": "OUTPUT0"}}}}})",
         p + "signature 'c': output 'probabilities': a classify signature's "
             "outputs are \"classes\" and/or \"scores\""},
        {R"({"signatures": {"c": {"method": "classify", )" + reg_in +
             R"(, "outputs": {"scores": {"tensor": "OUTPUT0"}}}}})",
         p + "signature 'c': output 'scores' must be DT_FLOAT"},
    };
    for (const Case &c : cases) {
        ConfigPtr cfg = ParseConfig(Declaring(c.json));
        ASSERT_TRUE(cfg) << c.json;
        tfs_model_view *view = nullptr;
        osp_error *err = tfs_model_view_new(cfg.get(), &view);
        if (!err) {
            ADD_FAILURE() << "accepted " << c.json;
            tfs_model_view_free(view);
            continue;
        }
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG) << c.json;
        std::string msg = TakeMessage(err);
        EXPECT_EQ(msg.rfind(c.message, 0), 0u)
            << "json: " << c.json << "\n got: " << msg
            << "\nwant: " << c.message << "...";
    }
}

TEST(TfsModelView, FeatureDefaultsMustBeNumbers) {
    ConfigPtr cfg = ParseConfig(
        "name: \"m\" backend: \"affine\" input [ { name: \"x\" data_type: "
        "TYPE_FP32 dims: [ -1 ] } ] output [ { name: \"y\" data_type: "
        "TYPE_FP32 dims: [ -1 ] } ] parameters [ { key: \"tf_serving\" value: "
        "{ string_value: '{\"signatures\": {\"r\": {\"method\": \"regress\", "
        "\"inputs\": {\"inputs\": {\"name\": \"e:0\"}}, \"outputs\": "
        "{\"outputs\": {\"tensor\": \"y\"}}, \"features\": {\"x\": {\"input\": "
        "\"x\", \"default\": \"0\"}}}}}' } } ]");
    ASSERT_TRUE(cfg);
    tfs_model_view *view = nullptr;
    EXPECT_EQ(TakeMessage(tfs_model_view_new(cfg.get(), &view)),
              "model 'm': parameter 'tf_serving': signature 'r': feature "
              "'x': \"default\" must be a number, got a string");
}

// ---- replies from a real server --------------------------------------------

class TempRepository {
  public:
    TempRepository() {
        char tmpl[] = "/tmp/osp_tfs_model_XXXXXX";
        if (mkdtemp(tmpl))
            root_ = tmpl;
    }
    ~TempRepository() {
        std::error_code ec;
        if (!root_.empty())
            fs::remove_all(root_, ec);
    }
    TempRepository(const TempRepository &) = delete;
    TempRepository &operator=(const TempRepository &) = delete;

    void AddModel(const std::string &name, const std::string &config,
                  std::initializer_list<int> versions) {
        for (int v : versions)
            fs::create_directories(root_ + "/" + name + "/" +
                                   std::to_string(v));
        std::ofstream(root_ + "/" + name + "/config.pbtxt") << config;
    }
    void AddBundled(const std::string &name) {
        std::ifstream in(std::string(OSPREY_SOURCE_DIR) + "/models/" + name +
                         "/config.pbtxt");
        std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
        AddModel(name, text, {123});
    }
    const std::string &root() const {
        return root_;
    }

  private:
    std::string root_;
};

std::string Take(bytebuf *b) {
    size_t len = 0;
    char *s = bytebuf_take(b, &len);
    std::string out = s ? std::string(s, len) : "(oom)";
    free(s);
    return out;
}

class TfsReplies : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        repo_ = new TempRepository();
        repo_->AddBundled("half_plus_two");
        repo_->AddBundled("saved_model_half_plus_three");
        // Two versions, served both: listed newest first.
        repo_->AddModel("two",
                        "name: \"two\" backend: \"identity\" max_batch_size: 4 "
                        "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: "
                        "[ -1 ] } ] output [ { name: \"OUTPUT0\" data_type: "
                        "TYPE_FP32 dims: [ -1 ] } ] version_policy: { all: { "
                        "} }",
                        {1, 3});
        // Fails to load: its reason has quotes and <> to escape.
        repo_->AddModel("broken",
                        "name: \"broken\" backend: \"affine\" input [ { name: "
                        "\"x\" data_type: TYPE_FP32 dims: [ -1 ] } ] output [ "
                        "{ name: \"y\" data_type: TYPE_FP32 dims: [ -1 ] } ] "
                        "parameters [ { key: \"y\" value: { string_value: \"x "
                        "*\" } } ]",
                        {7});
        osp_server_options opts;
        osp_server_options_init(&opts);
        opts.model_repository = repo_->root().c_str();
        opts.backends = backends_builtin;
        opts.n_backends = backends_builtin_count;
        osp_error *err = osp_server_new(&opts, &server_);
        if (err)
            ADD_FAILURE() << TakeMessage(err);
    }
    static void TearDownTestSuite() {
        osp_server_free(server_);
        server_ = nullptr;
        delete repo_;
        repo_ = nullptr;
    }

    static std::string Status(const char *name, bool has_version = false,
                              int64_t version = 0) {
        bytebuf b;
        bytebuf_init(&b);
        osp_error *err =
            tfs_write_model_status(server_, name, has_version, version, &b);
        if (err) {
            bytebuf_free(&b);
            std::string code = osp_error_code_name(osp_error_get_code(err));
            std::string reason = std::to_string((int)osp_error_get_reason(err));
            return "error " + code + " " + reason + ": " + TakeMessage(err);
        }
        return Take(&b);
    }

    static std::string Metadata(const char *name) {
        osp_model *model = nullptr;
        osp_error *err = osp_server_model_get(server_, name, -1, &model);
        if (err)
            return "error: " + TakeMessage(err);
        tfs_model_view *view = nullptr;
        err = tfs_model_view_new(osp_model_get_config(model), &view);
        std::string out;
        if (err) {
            out = "error: " + TakeMessage(err);
        } else {
            bytebuf b;
            bytebuf_init(&b);
            tfs_write_model_metadata(name, osp_model_get_version(model), view,
                                     &b);
            out = Take(&b);
        }
        tfs_model_view_free(view);
        osp_model_unref(model);
        return out;
    }

    static TempRepository *repo_;
    static osp_server *server_;
};

TempRepository *TfsReplies::repo_ = nullptr;
osp_server *TfsReplies::server_ = nullptr;

TEST_F(TfsReplies, StatusOfAnAvailableVersion) {
    const std::string want = "{\n"
                             " \"model_version_status\": [\n"
                             "  {\n"
                             "   \"version\": \"123\",\n"
                             "   \"state\": \"AVAILABLE\",\n"
                             "   \"status\": {\n"
                             "    \"error_code\": \"OK\",\n"
                             "    \"error_message\": \"\"\n"
                             "   }\n"
                             "  }\n"
                             " ]\n"
                             "}\n";
    EXPECT_EQ(Status("half_plus_two"), want);
    EXPECT_EQ(Status("half_plus_two", true, 123), want);
    EXPECT_EQ(Status("saved_model_half_plus_three"), want);
}

TEST_F(TfsReplies, StatusListsVersionsNewestFirst) {
    EXPECT_EQ(Status("two"), "{\n"
                             " \"model_version_status\": [\n"
                             "  {\n"
                             "   \"version\": \"3\",\n"
                             "   \"state\": \"AVAILABLE\",\n"
                             "   \"status\": {\n"
                             "    \"error_code\": \"OK\",\n"
                             "    \"error_message\": \"\"\n"
                             "   }\n"
                             "  },\n"
                             "  {\n"
                             "   \"version\": \"1\",\n"
                             "   \"state\": \"AVAILABLE\",\n"
                             "   \"status\": {\n"
                             "    \"error_code\": \"OK\",\n"
                             "    \"error_message\": \"\"\n"
                             "   }\n"
                             "  }\n"
                             " ]\n"
                             "}\n");
    std::string one = Status("two", true, 1);
    EXPECT_NE(one.find("\"version\": \"1\""), std::string::npos) << one;
    EXPECT_EQ(one.find("\"version\": \"3\""), std::string::npos) << one;
}

TEST_F(TfsReplies, AFailedVersionEndsWithItsReason) {
    EXPECT_EQ(
        Status("broken"),
        "{\n"
        " \"model_version_status\": [\n"
        "  {\n"
        "   \"version\": \"7\",\n"
        "   \"state\": \"END\",\n"
        "   \"status\": {\n"
        "    \"error_code\": \"UNKNOWN\",\n"
        "    \"error_message\": \"affine model 'broken': output 'y': "
        "parameter 'y' is \\\"x *\\\"; expected \\\"\\u003cinput\\u003e "
        "* \\u003cscale\\u003e + \\u003coffset\\u003e\\\" (tokens "
        "separated by spaces, finite numbers; \\\"* \\u003cscale\\u003e\\\" "
        "and \\\"+ \\u003coffset\\u003e\\\" optional)\"\n"
        "   }\n"
        "  }\n"
        " ]\n"
        "}\n");
}

TEST_F(TfsReplies, StatusErrors) {
    const std::string nf =
        "error NOT_FOUND " + std::to_string((int)OSP_REASON_MODEL_NOT_FOUND);
    const std::string vnf =
        "error NOT_FOUND " + std::to_string((int)OSP_REASON_VERSION_NOT_FOUND);
    EXPECT_EQ(Status("nope"),
              nf + ": Could not find any versions of model nope");
    EXPECT_EQ(Status("half_plus_two", true, 999),
              vnf + ": Could not find version 999 of model half_plus_two");
    EXPECT_EQ(Status("two", true, 2),
              vnf + ": Could not find version 2 of model two");
    EXPECT_EQ(Status("nope", true, 1),
              vnf + ": Could not find version 1 of model nope");
}

TEST_F(TfsReplies, MetadataOfHalfPlusThree) {
    EXPECT_EQ(Metadata("saved_model_half_plus_three"),
              "{\n"
              "\"model_spec\":{\n"
              " \"name\": \"saved_model_half_plus_three\",\n"
              " \"version\": \"123\",\n"
              " \"signature_name\": \"\"\n"
              "}\n"
              ",\n"
              "\"metadata\": {\"signature_def\": {\n"
              " \"signature_def\": {\n"
              "  \"serving_default\": {\n"
              "   \"inputs\": {\n"
              "    \"x\": {\n"
              "     \"name\": \"x:0\",\n"
              "     \"dtype\": \"DT_FLOAT\"\n"
              "    }\n"
              "   },\n"
              "   \"outputs\": {\n"
              "    \"y\": {\n"
              "     \"name\": \"y:0\",\n"
              "     \"dtype\": \"DT_FLOAT\"\n"
              "    }\n"
              "   },\n"
              "   \"method_name\": \"tensorflow/serving/predict\",\n"
              "   \"defaults\": {}\n"
              "  },\n"
              "  \"tensorflow/serving/regress\": {\n"
              "   \"inputs\": {\n"
              "    \"inputs\": {\n"
              "     \"name\": \"tf_example:0\",\n"
              "     \"dtype\": \"DT_STRING\"\n"
              "    }\n"
              "   },\n"
              "   \"outputs\": {\n"
              "    \"outputs\": {\n"
              "     \"name\": \"Identity:0\",\n"
              "     \"dtype\": \"DT_FLOAT\"\n"
              "    }\n"
              "   },\n"
              "   \"method_name\": \"tensorflow/serving/regress\",\n"
              "   \"defaults\": {}\n"
              "  }\n"
              " }\n"
              "}\n"
              "}\n"
              "}\n");
}

TEST_F(TfsReplies, MetadataPrintsShapesAsProtobufDoes) {
    std::string md = Metadata("half_plus_two");
    // serving_default, whole, in protobuf's field order.
    const std::string serving_default =
        "  \"serving_default\": {\n"
        "   \"inputs\": {\n"
        "    \"x\": {\n"
        "     \"name\": \"x:0\",\n"
        "     \"dtype\": \"DT_FLOAT\",\n"
        "     \"tensor_shape\": {\n"
        "      \"dim\": [\n"
        "       {\n"
        "        \"size\": \"-1\",\n"
        "        \"name\": \"\"\n"
        "       },\n"
        "       {\n"
        "        \"size\": \"1\",\n"
        "        \"name\": \"\"\n"
        "       }\n"
        "      ],\n"
        "      \"unknown_rank\": false\n"
        "     }\n"
        "    }\n"
        "   },\n"
        "   \"outputs\": {\n"
        "    \"y\": {\n"
        "     \"name\": \"y:0\",\n"
        "     \"dtype\": \"DT_FLOAT\",\n"
        "     \"tensor_shape\": {\n"
        "      \"dim\": [\n"
        "       {\n"
        "        \"size\": \"-1\",\n"
        "        \"name\": \"\"\n"
        "       },\n"
        "       {\n"
        "        \"size\": \"1\",\n"
        "        \"name\": \"\"\n"
        "       }\n"
        "      ],\n"
        "      \"unknown_rank\": false\n"
        "     }\n"
        "    }\n"
        "   },\n"
        "   \"method_name\": \"tensorflow/serving/predict\",\n"
        "   \"defaults\": {}\n"
        "  }\n"
        " }\n"
        "}\n"
        "}\n"
        "}\n";
    ASSERT_GE(md.size(), serving_default.size());
    EXPECT_EQ(md.substr(md.size() - serving_default.size()), serving_default)
        << md;
    const std::string example_input = "    \"inputs\": {\n"
                                      "     \"name\": \"tf_example:0\",\n"
                                      "     \"dtype\": \"DT_STRING\",\n"
                                      "     \"tensor_shape\": {\n"
                                      "      \"dim\": [],\n"
                                      "      \"unknown_rank\": true\n"
                                      "     }\n"
                                      "    }\n";
    EXPECT_NE(md.find(example_input), std::string::npos) << md;
}

// half_plus_two's metadata is TF Serving's (testdata/half_plus_two_model_
// metadata.json plus classify_x2_to_y3 and "defaults"), compared as JSON
// values: key order aside, the same document.
TEST_F(TfsReplies, MetadataOfHalfPlusTwoIsTfServings) {
    auto info = [](const char *name, const char *dtype, const char *shape) {
        return std::string("{\"name\": \"") + name + "\", \"dtype\": \"" +
               dtype + "\", \"tensor_shape\": " + shape + "}";
    };
    const std::string col = "{\"dim\": [{\"size\": \"-1\", \"name\": \"\"}, "
                            "{\"size\": \"1\", \"name\": \"\"}], "
                            "\"unknown_rank\": false}";
    const std::string unk = "{\"dim\": [], \"unknown_rank\": true}";
    const std::string ex = info("tf_example:0", "DT_STRING", unk.c_str());
    auto sig = [&](const std::string &in_key, const std::string &in,
                   const std::string &out_key, const char *out,
                   const char *method) {
        return "{\"inputs\": {\"" + in_key + "\": " + in +
               "}, \"outputs\": {\"" + out_key +
               "\": " + info(out, "DT_FLOAT", col.c_str()) +
               "}, \"method_name\": \"tensorflow/serving/" + method +
               "\", \"defaults\": {}}";
    };
    const std::string x2 = info("x2:0", "DT_FLOAT", col.c_str());
    const std::string want =
        "{\"model_spec\": {\"name\": \"half_plus_two\", \"signature_name\": "
        "\"\", \"version\": \"123\"}, \"metadata\": {\"signature_def\": "
        "{\"signature_def\": {"
        "\"regress_x2_to_y3\": " +
        sig("inputs", x2, "outputs", "y3:0", "regress") +
        ", \"classify_x2_to_y3\": " +
        sig("inputs", x2, "scores", "y3:0", "classify") +
        ", \"serving_default\": " +
        sig("x", info("x:0", "DT_FLOAT", col.c_str()), "y", "y:0", "predict") +
        ", \"classify_x_to_y\": " +
        sig("inputs", ex, "scores", "y:0", "classify") +
        ", \"regress_x_to_y2\": " +
        sig("inputs", ex, "outputs", "y2:0", "regress") +
        ", \"regress_x_to_y\": " +
        sig("inputs", ex, "outputs", "y:0", "regress") + "}}}}";
    std::string got = Metadata("half_plus_two");
    json_object *a = nullptr, *b = nullptr;
    ASSERT_OK(json_parse_body(got.c_str(), got.size(), &a));
    ASSERT_OK(json_parse_body(want.c_str(), want.size(), &b));
    EXPECT_TRUE(json_object_equal(a, b)) << got;
    json_free(a);
    json_free(b);
}

TEST_F(TfsReplies, MetadataOfAPlainModelShowsTheBatchDimension) {
    std::string md = Metadata("two");
    EXPECT_NE(md.find(" \"version\": \"3\",\n"), std::string::npos) << md;
    EXPECT_NE(md.find("    \"INPUT0\": {\n"
                      "     \"name\": \"INPUT0:0\",\n"
                      "     \"dtype\": \"DT_FLOAT\",\n"
                      "     \"tensor_shape\": {\n"
                      "      \"dim\": [\n"
                      "       {\n"
                      "        \"size\": \"-1\",\n"
                      "        \"name\": \"\"\n"
                      "       },\n"
                      "       {\n"
                      "        \"size\": \"-1\",\n"
                      "        \"name\": \"\"\n"
                      "       }\n"
                      "      ],\n"
                      "      \"unknown_rank\": false\n"
                      "     }\n"
                      "    }\n"),
              std::string::npos)
        << md;
}

TEST(TfsMetadata, EscapesStringsAsProtobufDoes) {
    tfs_model_view view = {};
    bytebuf b;
    bytebuf_init(&b);
    // Quotes, backslash, control characters, <>, U+2028, an emoji-free
    // astral character in an escaped range (U+E0041), malformed UTF-8.
    tfs_write_model_metadata("a\"b\\c\n\x01<>\xe2\x80\xa8\xf3\xa0\x81\x81\xff"
                             "z\xc3\xa9",
                             5, &view, &b);
    EXPECT_EQ(Take(&b), "{\n"
                        "\"model_spec\":{\n"
                        " \"name\": \"a\\\"b\\\\c\\n\\u0001\\u003c\\u003e"
                        "\\u2028\\udb40\\udc41 z\xc3\xa9\",\n"
                        " \"version\": \"5\",\n"
                        " \"signature_name\": \"\"\n"
                        "}\n"
                        ",\n"
                        "\"metadata\": {\"signature_def\": {\n"
                        " \"signature_def\": {}\n"
                        "}\n"
                        "}\n"
                        "}\n");
}

} // namespace
