// A config's backend fields completed as Triton completes them
// (server/core/config/backend_fields.h), and what the server does with
// them: models without config.pbtxt, platform and backend mapped onto each
// other, --backend-config settings handed to the backend, and a backend's
// auto_complete that turns batching on.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "builtin.h"
#include "osp_test.h"
#include "osprey/backend.h"
#include "osprey/device.h"
#include "osprey/server.h"

#include "backend_fields.h"

namespace fs = std::filesystem;

namespace {

class TempDir {
  public:
    TempDir() {
        char tmpl[] = "/tmp/osp_backend_fields_XXXXXX";
        if (mkdtemp(tmpl))
            root_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        if (!root_.empty())
            fs::remove_all(root_, ec);
    }
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;

    void Dir(const std::string &rel) {
        fs::create_directories(root_ + "/" + rel);
    }
    void File(const std::string &rel, const std::string &text = "") {
        fs::create_directories(fs::path(root_ + "/" + rel).parent_path());
        std::ofstream(root_ + "/" + rel) << text;
    }
    std::string Path(const std::string &rel) const {
        return root_ + "/" + rel;
    }
    const std::string &root() const {
        return root_;
    }

  private:
    std::string root_;
};

// The config `text` of model `name` completed against folder <dir>/<name>:
// "backend|platform|default_model_filename", or "error: <message>".
std::string Complete(const TempDir &dir, const std::string &name,
                     const std::string &text) {
    osp_model_config *cfg = nullptr;
    osp_error *err =
        osp_model_config_parse(text.data(), text.size(), "config.pbtxt", &cfg);
    if (err)
        return "parse error: " + TakeMessage(err);
    err = backend_fields_complete(cfg, name.c_str(), dir.Path(name).c_str());
    std::string out = err ? "error: " + TakeMessage(err)
                          : std::string(cfg->backend) + "|" + cfg->platform +
                                "|" + cfg->default_model_filename;
    osp_model_config_free(cfg);
    return out;
}

TEST(BackendFields, PlatformAndBackendMapOntoEachOther) {
    TempDir d;
    d.Dir("m/1");
    EXPECT_EQ(Complete(d, "m", "platform: \"onnxruntime_onnx\""),
              "onnxruntime|onnxruntime_onnx|model.onnx");
    EXPECT_EQ(Complete(d, "m", "backend: \"onnxruntime\""),
              "onnxruntime|onnxruntime_onnx|model.onnx");
    EXPECT_EQ(Complete(d, "m", "default_model_filename: \"model.onnx\""),
              "onnxruntime|onnxruntime_onnx|model.onnx");
    EXPECT_EQ(Complete(d, "m",
                       "backend: \"onnxruntime\" default_model_filename: "
                       "\"graph.onnx\""),
              "onnxruntime|onnxruntime_onnx|graph.onnx");
    EXPECT_EQ(Complete(d, "m", "backend: \"python\""), "python||model.py");
    EXPECT_EQ(Complete(d, "m", "default_model_filename: \"model.py\""),
              "python||model.py");
    // What a config gives is kept, even when the two disagree.
    EXPECT_EQ(Complete(d, "m",
                       "backend: \"identity\" platform: \"onnxruntime_onnx\""),
              "identity|onnxruntime_onnx|");
    // Platforms Osprey does not serve stay as they are (the loader then
    // answers "unknown platform").
    EXPECT_EQ(Complete(d, "m", "platform: \"tensorrt_plan\""),
              "|tensorrt_plan|");
    EXPECT_EQ(Complete(d, "m", "backend: \"add_sub\""), "add_sub||");
}

TEST(BackendFields, DetectedFromTheFirstVersionFolder) {
    TempDir d;
    d.File("onnx_file/1/model.onnx");
    d.Dir("onnx_dir/3/model.onnx"); // a graph with external data
    d.File("py/1/model.py");
    d.File("both/1/model.onnx");
    d.File("both/1/model.py");
    // Triton inspects the first subfolder in name order ("1" < "2"),
    // whatever the version policy selects.
    d.File("versions/1/model.py");
    d.File("versions/2/model.onnx");
    d.File("loose/model.onnx"); // not in a version folder
    d.Dir("loose/1");
    EXPECT_EQ(Complete(d, "onnx_file", ""),
              "onnxruntime|onnxruntime_onnx|model.onnx");
    EXPECT_EQ(Complete(d, "onnx_dir", ""),
              "onnxruntime|onnxruntime_onnx|model.onnx");
    EXPECT_EQ(Complete(d, "py", "max_batch_size: 2"), "python||model.py");
    EXPECT_EQ(Complete(d, "both", ""),
              "onnxruntime|onnxruntime_onnx|model.onnx");
    EXPECT_EQ(Complete(d, "versions", ""), "python||model.py");
    // A platform or file name given: the folder is not looked at.
    EXPECT_EQ(Complete(d, "py", "platform: \"custom\""), "|custom|");
    EXPECT_EQ(Complete(d, "py", "default_model_filename: \"m.bin\""),
              "||m.bin");
    const std::string undetectable =
        "error: Invalid model name: Could not determine backend for model "
        "'loose' with no backend in model configuration. Expected model "
        "name of the form 'model.<backend_name>'.";
    EXPECT_EQ(Complete(d, "loose", ""), undetectable);
}

TEST(BackendFields, CustomBackendFromTheModelName) {
    TempDir d;
    d.Dir("model.identity/1");
    d.Dir("a.b.c/1");
    d.Dir("plain");
    EXPECT_EQ(Complete(d, "model.identity", ""), "identity||model.identity");
    EXPECT_EQ(Complete(d, "a.b.c", ""), "b.c||model.b.c");
    EXPECT_EQ(Complete(d, "plain", ""),
              "error: Invalid model name: Could not determine backend for "
              "model 'plain' with no backend in model configuration. "
              "Expected model name of the form 'model.<backend_name>'.");
}

// ---- the server ----------------------------------------------------------
// A test backend named "onnxruntime" that auto-completes like Triton's:
// one FP32 [-1] input and output, batching with default-max-batch-size
// and dynamic batching turned on. model_new notes what it was given.

struct Seen {
    std::string backend, platform, filename;
    std::string max_batch_setting, x_setting, y_setting;
    bool dynamic = false;
    int32_t max_batch_size = -1;
    int auto_completes = 0;
};
Seen g_seen;

osp_error *AddTensor(osp_model_io **list, size_t *n, const char *name) {
    auto *io = static_cast<osp_model_io *>(calloc(1, sizeof(osp_model_io)));
    if (!io || !(io->name = strdup(name))) {
        free(io);
        return osp_error_out_of_memory();
    }
    io->dtype = OSP_TYPE_FP32;
    io->dims.rank = 1;
    io->dims.dims[0] = -1;
    *list = io;
    *n = 1;
    return nullptr;
}

osp_error *FakeAutoComplete(osp_model_config *cfg, const char *) {
    g_seen.auto_completes++;
    osp_error *err = nullptr;
    if (cfg->n_inputs == 0 &&
        (err = AddTensor(&cfg->inputs, &cfg->n_inputs, "INPUT0")))
        return err;
    if (cfg->n_outputs == 0 &&
        (err = AddTensor(&cfg->outputs, &cfg->n_outputs, "OUTPUT0")))
        return err;
    const char *mbs =
        osp_model_config_backend_setting(cfg, "default-max-batch-size");
    cfg->max_batch_size = mbs ? atoi(mbs) : 0;
    if (cfg->max_batch_size > 0 && !cfg->dynamic_batching.enabled)
        cfg->dynamic_batching.enabled = true;
    return nullptr;
}

const char *Or(const char *s) {
    return s ? s : "(none)";
}

osp_error *FakeModelNew(const osp_model_config *cfg, const char *,
                        void **model) {
    g_seen.backend = cfg->backend;
    g_seen.platform = cfg->platform;
    g_seen.filename = cfg->default_model_filename;
    g_seen.max_batch_setting =
        Or(osp_model_config_backend_setting(cfg, "default-max-batch-size"));
    g_seen.x_setting = Or(osp_model_config_backend_setting(cfg, "x"));
    g_seen.y_setting = Or(osp_model_config_backend_setting(cfg, "y"));
    g_seen.dynamic = cfg->dynamic_batching.enabled;
    g_seen.max_batch_size = cfg->max_batch_size;
    *model = &g_seen;
    return nullptr;
}

void FakeModelFree(void *) {}

osp_error *FakeInstanceNew(void *model, osp_device *, osp_stream *,
                           void **instance) {
    *instance = model;
    return nullptr;
}

void FakeInstanceFree(void *) {}

osp_error *FakeExecute(void *, osp_execute_ctx *ctx) {
    const osp_backend_tensor *in = osp_execute_input(ctx, 0);
    void *out = nullptr;
    osp_error *err =
        osp_execute_output_alloc(ctx, 0, &in->shape, in->byte_size, &out);
    if (!err && in->byte_size > 0)
        err = osp_memcpy_async(osp_execute_stream(ctx), out, in->data,
                               in->byte_size, OSP_COPY_DEVICE_TO_DEVICE);
    return err;
}

const osp_backend kFakeOnnx = {
    .name = "onnxruntime",
    .model_new = FakeModelNew,
    .model_free = FakeModelFree,
    .instance_new = FakeInstanceNew,
    .instance_free = FakeInstanceFree,
    .execute = FakeExecute,
    .execute_is_quick = nullptr,
    .auto_complete = FakeAutoComplete,
    .attach_server = nullptr,
};

class ServerConfig : public ::testing::Test {
  protected:
    void SetUp() override {
        g_seen = Seen();
    }
    void TearDown() override {
        osp_server_free(server_);
    }

    // Starts a server on repo_ in explicit mode with the identity backend
    // and, when `with_fake`, the test's "onnxruntime".
    void Start(bool with_fake, bool auto_complete = true,
               const osp_backend_setting *settings = nullptr,
               size_t n_settings = 0) {
        backends_ = {&builtin_backend_identity};
        if (with_fake)
            backends_.push_back(&kFakeOnnx);
        osp_server_options opts;
        osp_server_options_init(&opts);
        opts.model_repository = repo_.root().c_str();
        opts.control_mode = OSP_MODEL_CONTROL_EXPLICIT;
        opts.backends = backends_.data();
        opts.n_backends = backends_.size();
        opts.auto_complete_config = auto_complete;
        opts.backend_settings = settings;
        opts.n_backend_settings = n_settings;
        ASSERT_OK(osp_server_new(&opts, &server_));
    }

    // The load's error message ("" when it loaded).
    std::string Load(const char *name) {
        return TakeMessage(osp_server_load_model(server_, name));
    }

    // Runs FP32 `values` (batch 1) through `model`; the output's values.
    std::vector<float> Infer(const char *model, std::vector<float> values) {
        osp_infer_request *req = osp_infer_request_new(model, -1);
        osp_shape shape{};
        shape.rank = 2;
        shape.dims[0] = 1;
        shape.dims[1] = (int64_t)values.size();
        osp_buffer *buf = osp_buffer_new_host(values.size() * sizeof(float));
        memcpy(buf->data, values.data(), values.size() * sizeof(float));
        osp_error *err = osp_infer_request_add_input(
            req, "INPUT0", OSP_TYPE_FP32, &shape, buf);
        EXPECT_EQ(TakeMessage(err), "");
        std::promise<std::vector<float>> got;
        err = osp_server_infer_async(
            server_, req,
            [](osp_infer_response *resp, void *user) {
                std::vector<float> out;
                if (!resp->error && resp->n_outputs == 1) {
                    const float *f =
                        static_cast<const float *>(resp->outputs[0].data->data);
                    out.assign(f,
                               f + resp->outputs[0].byte_size / sizeof(float));
                }
                osp_infer_response_free(resp);
                static_cast<std::promise<std::vector<float>> *>(user)
                    ->set_value(out);
            },
            &got);
        EXPECT_EQ(TakeMessage(err), "");
        return err ? std::vector<float>() : got.get_future().get();
    }

    TempDir repo_;
    osp_server *server_ = nullptr;
    std::vector<const osp_backend *> backends_;
};

TEST_F(ServerConfig, ModelWithoutConfigIsCompletedFromItsFiles) {
    repo_.File("graph/1/model.onnx");
    const osp_backend_setting settings[] = {
        {"", "x", "global"},
        {"onnxruntime", "x", "own"}, // a backend's own setting wins
        {nullptr, "y", "global-y"},
        {"python", "y", "not for onnxruntime"},
        {"onnxruntime", "default-max-batch-size", "2"},
    };
    Start(true, true, settings, sizeof settings / sizeof settings[0]);
    ASSERT_EQ(Load("graph"), "");
    EXPECT_EQ(g_seen.auto_completes, 1);
    EXPECT_EQ(g_seen.backend, "onnxruntime");
    EXPECT_EQ(g_seen.platform, "onnxruntime_onnx");
    EXPECT_EQ(g_seen.filename, "model.onnx");
    EXPECT_EQ(g_seen.x_setting, "own");
    EXPECT_EQ(g_seen.y_setting, "global-y");
    EXPECT_EQ(g_seen.max_batch_setting, "2");
    EXPECT_TRUE(g_seen.dynamic);
    EXPECT_EQ(g_seen.max_batch_size, 2);

    osp_model *model = nullptr;
    ASSERT_OK(osp_server_model_get(server_, "graph", -1, &model));
    const osp_model_config *cfg = osp_model_get_config(model);
    EXPECT_STREQ(cfg->name, "graph");
    // Triton's normalisation after auto-complete: preferred = max.
    ASSERT_EQ(cfg->dynamic_batching.n_preferred_batch_sizes, 1u);
    EXPECT_EQ(cfg->dynamic_batching.preferred_batch_sizes[0], 2);
    EXPECT_TRUE(cfg->optimization.input_pinned_memory);
    osp_model_unref(model);
    // The batcher runs with what auto_complete turned on.
    EXPECT_EQ(Infer("graph", {1.5f, -2.0f, 3.0f}),
              (std::vector<float>{1.5f, -2.0f, 3.0f}));
}

TEST_F(ServerConfig, DefaultMaxBatchSizeIsTritons) {
    repo_.File("m/config.pbtxt", "platform: \"onnxruntime_onnx\"\n");
    repo_.File("m/1/model.onnx");
    Start(true);
    ASSERT_EQ(Load("m"), "");
    EXPECT_EQ(g_seen.max_batch_setting, "4");
    EXPECT_EQ(g_seen.x_setting, "(none)");
    EXPECT_EQ(g_seen.backend, "onnxruntime");
    EXPECT_EQ(g_seen.platform, "onnxruntime_onnx");
    EXPECT_EQ(g_seen.max_batch_size, 4);
}

TEST_F(ServerConfig, WithoutTheBackendTheLoadNamesIt) {
    repo_.File("by_platform/config.pbtxt",
               "platform: \"onnxruntime_onnx\" max_batch_size: 1\n");
    repo_.Dir("by_platform/1");
    repo_.File("by_file/1/model.onnx");
    repo_.File("trt/config.pbtxt", "platform: \"tensorrt_plan\"\n");
    repo_.Dir("trt/1");
    repo_.Dir("nothing/1");
    Start(false);
    const std::string registered = "(registered: identity)";
    EXPECT_EQ(Load("by_platform"),
              "load failed for model 'by_platform': version 1 is at "
              "UNAVAILABLE state: unknown backend 'onnxruntime' " +
                  registered);
    EXPECT_EQ(Load("by_file"),
              "load failed for model 'by_file': version 1 is at UNAVAILABLE "
              "state: unknown backend 'onnxruntime' " +
                  registered);
    EXPECT_EQ(Load("trt"), "load failed for model 'trt': version 1 is at "
                           "UNAVAILABLE state: unknown platform "
                           "'tensorrt_plan'");
    EXPECT_EQ(Load("nothing"),
              "Invalid model name: Could not determine backend for model "
              "'nothing' with no backend in model configuration. Expected "
              "model name of the form 'model.<backend_name>'.");
}

TEST_F(ServerConfig, WithoutAutoCompleteConfigPbtxtIsRequired) {
    repo_.File("graph/1/model.onnx");
    Start(true, false);
    EXPECT_EQ(Load("graph"), "cannot open 'graph/config.pbtxt': No such file "
                             "or directory");
    EXPECT_EQ(g_seen.auto_completes, 0);
}

} // namespace
