// The requests of a batch as a backend sees and answers them
// (osp_execute_request, osp_execute_respond in osprey/backend.h), through
// a real server and its dynamic batcher: each request's id, correlation
// id, custom parameters and rows; each answered with outputs of its own
// shape or an error of its own; a request left unanswered, a second
// answer and an answer out of range.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "osp_test.h"
#include "osprey/backend.h"
#include "osprey/server.h"

namespace fs = std::filesystem;

namespace {

// What the fake backend saw of the last batch.
struct SeenRequest {
    std::string id;
    uint64_t correlation_id = 0;
    std::string correlation_string;
    std::vector<std::string> parameters;
    int64_t first_row = 0, rows = 0;
    bool out_wanted = false, extra_wanted = false;
};
std::vector<SeenRequest> g_seen;
std::vector<std::string> g_respond_errors; // of the deliberate misuses

osp_error *ModelNew(const osp_model_config *, const char *, void **model) {
    *model = &g_seen;
    return nullptr;
}
void ModelFree(void *) {}
osp_error *InstanceNew(void *model, osp_device *, osp_stream *, void **inst) {
    *inst = model;
    return nullptr;
}
void InstanceFree(void *) {}

// Answers request r by its id: "bad" gets an error, "skip" no answer;
// others OUT with first_row + rows copies of their IN value (a shape of
// their own), and EXTRA, which they did not ask for.
osp_error *Execute(void *, osp_execute_ctx *ctx) {
    g_seen.clear();
    g_respond_errors.clear();
    const float *in =
        static_cast<const float *>(osp_execute_input(ctx, 0)->data);
    size_t n = osp_execute_request_count(ctx);
    for (size_t r = 0; r < n; r++) {
        const osp_batch_request *req = osp_execute_request(ctx, r);
        SeenRequest s;
        s.id = req->id;
        s.correlation_id = req->correlation_id;
        if (req->correlation_id_string)
            s.correlation_string = req->correlation_id_string;
        for (size_t i = 0; i < req->n_parameters; i++)
            s.parameters.push_back(req->parameters[i].key);
        s.first_row = req->first_row;
        s.rows = req->rows;
        s.out_wanted = req->output_requested[0];
        s.extra_wanted = req->output_requested[1];
        g_seen.push_back(s);
        if (s.id == "skip")
            continue;
        osp_sent_response sent{};
        osp_infer_output outs[2]{};
        if (s.id == "bad") {
            sent.error = osp_error_new(OSP_ERROR_INVALID_ARG, "bad request");
        } else {
            int64_t count = req->first_row + req->rows;
            for (int k = 0; k < 2; k++) {
                outs[k].name = const_cast<char *>(k ? "EXTRA" : "OUT");
                outs[k].dtype = OSP_TYPE_FP32;
                outs[k].shape.rank = 2;
                outs[k].shape.dims[0] = 1;
                outs[k].shape.dims[1] = count;
                outs[k].byte_size = (size_t)count * sizeof(float);
                outs[k].data = osp_buffer_new_host(outs[k].byte_size);
                for (int64_t e = 0; e < count; e++)
                    static_cast<float *>(outs[k].data->data)[e] =
                        in[req->first_row];
            }
            sent.outputs = outs;
            sent.n_outputs = 2;
        }
        osp_error *err = osp_execute_respond(ctx, r, &sent);
        if (err)
            return err;
    }
    // Misuses answer errors and take what they were given.
    osp_sent_response again{};
    again.error = osp_error_new(OSP_ERROR_INTERNAL, "again");
    g_respond_errors.push_back(
        TakeMessage(osp_execute_respond(ctx, 0, &again)));
    osp_sent_response beyond{};
    g_respond_errors.push_back(
        TakeMessage(osp_execute_respond(ctx, n, &beyond)));
    return nullptr;
}

const osp_backend kAnswers = {
    .name = "answers",
    .model_new = ModelNew,
    .model_free = ModelFree,
    .instance_new = InstanceNew,
    .instance_free = InstanceFree,
    .execute = Execute,
    .execute_is_quick = nullptr,
    .auto_complete = nullptr,
    .attach_server = nullptr,
};

struct Answer {
    std::string error;
    osp_error_code code = OSP_ERROR_INTERNAL;
    std::vector<int64_t> shape;
    std::vector<float> values;
    std::vector<std::string> names;
};

class RequestAnswers : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/osp_request_answers_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root_ = tmpl;
        fs::create_directories(root_ + "/per_request/1");
        // Three rows make a batch at once; nothing runs before that.
        std::ofstream(root_ + "/per_request/config.pbtxt")
            << "name: \"per_request\"\nbackend: \"answers\"\n"
               "max_batch_size: 8\n"
               "dynamic_batching { preferred_batch_size: [ 3 ] "
               "max_queue_delay_microseconds: 60000000 }\n"
               "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 1 ] } ]\n"
               "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] },"
               " { name: \"EXTRA\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n";
        backends_ = {&kAnswers};
        osp_server_options opts;
        osp_server_options_init(&opts);
        opts.model_repository = root_.c_str();
        opts.control_mode = OSP_MODEL_CONTROL_EXPLICIT;
        opts.backends = backends_.data();
        opts.n_backends = backends_.size();
        ASSERT_OK(osp_server_new(&opts, &server_));
        ASSERT_OK(osp_server_load_model(server_, "per_request"));
    }
    void TearDown() override {
        osp_server_free(server_);
        std::error_code ec;
        fs::remove_all(root_, ec);
    }

    // Sends one request of one row (IN = value, asking for OUT only) with
    // `id` and parameters; its answer comes through the future.
    std::future<Answer> Send(const char *id, float value,
                             std::vector<osp_parameter> params = {}) {
        osp_infer_request *req = osp_infer_request_new("per_request", -1);
        EXPECT_EQ(TakeMessage(osp_infer_request_set_id(req, id)), "");
        osp_shape shape{};
        shape.rank = 2;
        shape.dims[0] = 1;
        shape.dims[1] = 1;
        osp_buffer *buf = osp_buffer_new_host(sizeof(float));
        memcpy(buf->data, &value, sizeof value);
        EXPECT_EQ(TakeMessage(osp_infer_request_add_input(
                      req, "IN", OSP_TYPE_FP32, &shape, buf)),
                  "");
        EXPECT_EQ(TakeMessage(osp_infer_request_add_output(req, "OUT")), "");
        for (const osp_parameter &p : params)
            EXPECT_EQ(TakeMessage(osp_infer_request_add_parameter(req, &p)),
                      "");
        auto *promise = new std::promise<Answer>();
        std::future<Answer> got = promise->get_future();
        osp_error *err = osp_server_infer_async(
            server_, req,
            [](osp_infer_response *resp, void *user) {
                Answer a;
                if (resp->error) {
                    a.error = osp_error_message(resp->error);
                    a.code = osp_error_get_code(resp->error);
                }
                for (size_t k = 0; k < resp->n_outputs; k++) {
                    const osp_infer_output &o = resp->outputs[k];
                    a.names.push_back(o.name);
                    a.shape.assign(o.shape.dims, o.shape.dims + o.shape.rank);
                    const float *f = static_cast<const float *>(o.data->data);
                    a.values.assign(f, f + o.byte_size / sizeof(float));
                }
                osp_infer_response_free(resp);
                auto *p = static_cast<std::promise<Answer> *>(user);
                p->set_value(a);
                delete p;
            },
            promise);
        EXPECT_EQ(TakeMessage(err), "");
        return got;
    }

    std::string root_;
    osp_server *server_ = nullptr;
    std::vector<const osp_backend *> backends_;
};

TEST_F(RequestAnswers, EachRequestIsSeenAndAnsweredOnItsOwn) {
    osp_parameter seq{};
    seq.key = const_cast<char *>("sequence_id");
    seq.type = OSP_PARAM_INT;
    seq.value.i = 7;
    osp_parameter custom{};
    custom.key = const_cast<char *>("k");
    custom.type = OSP_PARAM_INT;
    custom.value.i = 5;
    osp_parameter corr{};
    corr.key = const_cast<char *>("sequence_id");
    corr.type = OSP_PARAM_STRING;
    corr.value.s = const_cast<char *>("corr-c");
    auto a = Send("a", 1.0f, {seq, custom});
    auto bad = Send("bad", 2.0f);
    auto c = Send("c", 3.0f, {corr});

    Answer got = a.get();
    EXPECT_EQ(got.error, "");
    EXPECT_EQ(got.names, std::vector<std::string>{"OUT"}); // EXTRA dropped
    EXPECT_EQ(got.shape, (std::vector<int64_t>{1, 1}));
    EXPECT_EQ(got.values, std::vector<float>{1.0f});
    got = bad.get();
    EXPECT_EQ(got.error, "bad request");
    EXPECT_EQ(got.code, OSP_ERROR_INVALID_ARG);
    got = c.get();
    EXPECT_EQ(got.error, "");
    EXPECT_EQ(got.shape, (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(got.values, (std::vector<float>{3.0f, 3.0f, 3.0f}));

    ASSERT_EQ(g_seen.size(), 3u);
    EXPECT_EQ(g_seen[0].id, "a");
    EXPECT_EQ(g_seen[0].correlation_id, 7u);
    EXPECT_EQ(g_seen[0].parameters, std::vector<std::string>{"k"});
    EXPECT_EQ(g_seen[2].correlation_string, "corr-c");
    EXPECT_TRUE(g_seen[2].parameters.empty());
    for (int64_t r = 0; r < 3; r++) {
        EXPECT_EQ(g_seen[r].first_row, r);
        EXPECT_EQ(g_seen[r].rows, 1);
        EXPECT_TRUE(g_seen[r].out_wanted);
        EXPECT_FALSE(g_seen[r].extra_wanted);
    }
    EXPECT_EQ(g_respond_errors,
              (std::vector<std::string>{"backend answered request 0 twice",
                                        "backend answered request 3 of 3"}));
}

TEST_F(RequestAnswers, ARequestLeftUnansweredFailsAlone) {
    auto a = Send("a", 1.0f);
    auto skip = Send("skip", 2.0f);
    auto c = Send("c", 3.0f);
    EXPECT_EQ(a.get().error, "");
    Answer got = skip.get();
    EXPECT_EQ(got.error,
              "backend 'answers' did not answer request 1 of a batch of 3");
    EXPECT_EQ(c.get().values, (std::vector<float>{3.0f, 3.0f, 3.0f}));
}

} // namespace
