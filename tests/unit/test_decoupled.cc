// Decoupled models in the core (response_sender.h, osprey/backend.h):
// responses from the backend's own threads reach the frontend's callback in
// order, the final flag exactly once; a failed execute ends what it left
// open; a cancelled token drops later responses; non-streaming calls are
// refused; a model that is not decoupled answers a streaming call once.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "builtin.h"
#include "osp_test.h"
#include "osprey/backend.h"
#include "osprey/server.h"

#include "response_sender.h"

namespace fs = std::filesystem;

namespace {

std::mutex g_threads_mu;
std::vector<std::thread> g_threads; // the backend's senders, joined last

osp_error *SendValue(osp_response_sender *sender, int32_t value, bool final) {
    osp_buffer *buf = osp_buffer_new_host(sizeof value);
    memcpy(buf->data, &value, sizeof value);
    osp_infer_output out{};
    out.name = const_cast<char *>("OUT");
    out.dtype = OSP_TYPE_INT32;
    out.shape.rank = 1;
    out.shape.dims[0] = 1;
    out.data = buf;
    out.byte_size = sizeof value;
    osp_sent_response r{&out, 1, nullptr};
    return osp_response_sender_send(sender, &r, final);
}

void Spawn(std::thread t) {
    std::lock_guard<std::mutex> lock(g_threads_mu);
    g_threads.push_back(std::move(t));
}

// IN[0] picks what the backend does with the values IN[1..]:
//  0: a thread sends each, then the final flag alone, after execute returned
//  1: sends IN[1], then execute fails
//  2: a thread sends IN[1], waits for the client to go, sends the rest
//  3: execute sends each, the last one final
osp_error *DecoupledExecute(void *, osp_execute_ctx *ctx) {
    EXPECT_EQ(osp_execute_request_count(ctx), 1u);
    const osp_backend_tensor *in = osp_execute_input(ctx, 0);
    std::vector<int32_t> v(in->byte_size / 4);
    memcpy(v.data(), in->data, in->byte_size);
    osp_response_sender *sender = osp_execute_response_sender(ctx, 0);
    std::vector<int32_t> rest(v.begin() + 1, v.end());
    switch (v[0]) {
    case 0:
        Spawn(std::thread([sender, rest] {
            for (int32_t x : rest)
                EXPECT_EQ(TakeMessage(SendValue(sender, x, false)), "");
            EXPECT_EQ(TakeMessage(osp_response_sender_send(sender, nullptr,
                                                           true)),
                      "");
        }));
        return nullptr;
    case 1:
        EXPECT_EQ(TakeMessage(SendValue(sender, rest[0], false)), "");
        return osp_error_new(OSP_ERROR_INTERNAL, "execute broke");
    case 2:
        Spawn(std::thread([sender, rest] {
            EXPECT_EQ(TakeMessage(SendValue(sender, rest[0], false)), "");
            auto until = std::chrono::steady_clock::now() +
                         std::chrono::seconds(30);
            while (!osp_response_sender_is_cancelled(sender) &&
                   std::chrono::steady_clock::now() < until)
                std::this_thread::yield();
            for (size_t i = 1; i < rest.size(); i++)
                osp_error_free(SendValue(sender, rest[i], false));
            osp_error_free(osp_response_sender_send(sender, nullptr, true));
        }));
        return nullptr;
    default:
        for (size_t i = 0; i < rest.size(); i++)
            EXPECT_EQ(TakeMessage(
                          SendValue(sender, rest[i], i + 1 == rest.size())),
                      "");
        return nullptr;
    }
}

osp_error *ModelNew(const osp_model_config *, const char *, void **model) {
    *model = nullptr;
    return nullptr;
}
void ModelFree(void *) {}
osp_error *InstanceNew(void *, osp_device *, osp_stream *, void **instance) {
    *instance = nullptr;
    return nullptr;
}
void InstanceFree(void *) {}

const osp_backend kDecoupled = {
    .name = "test_decoupled",
    .model_new = ModelNew,
    .model_free = ModelFree,
    .instance_new = InstanceNew,
    .instance_free = InstanceFree,
    .execute = DecoupledExecute,
    .execute_is_quick = nullptr,
    .auto_complete = nullptr,
    .attach_server = nullptr,
};

// What one request's callback saw.
struct Collected {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> values; // OUT of each response, in order
    std::vector<std::string> errors;
    int finals = 0;
    bool final_had_response = false;

    static void Respond(osp_infer_response *r, bool final, void *user) {
        auto *c = static_cast<Collected *>(user);
        std::lock_guard<std::mutex> lock(c->mu);
        if (r && r->error)
            c->errors.push_back(osp_error_message(r->error));
        else if (r && r->n_outputs == 1)
            c->values.push_back(
                *static_cast<int32_t *>(r->outputs[0].data->data));
        if (final) {
            c->finals++;
            c->final_had_response = r != nullptr;
        }
        osp_infer_response_free(r);
        c->cv.notify_all();
    }
    size_t WaitValues(size_t n) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::seconds(30),
                    [&] { return values.size() >= n || finals > 0; });
        return values.size();
    }
    void WaitFinal() {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::seconds(30), [&] { return finals > 0; });
    }
};

class Decoupled : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/osp_decoupled_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root_ = tmpl;
        Write("rep", "backend: \"test_decoupled\"\n"
                     "model_transaction_policy { decoupled: true }\n"
                     "input [{ name: \"IN\" data_type: TYPE_INT32 dims: [ -1 "
                     "] }]\n"
                     "output [{ name: \"OUT\" data_type: TYPE_INT32 dims: [ "
                     "1 ] }]\n");
        Write("ident", "backend: \"identity\"\n"
                       "input [{ name: \"INPUT0\" data_type: TYPE_INT32 "
                       "dims: [ -1 ] }]\n"
                       "output [{ name: \"OUTPUT0\" data_type: TYPE_INT32 "
                       "dims: [ -1 ] }]\n");
        backends_ = {&builtin_backend_identity, &kDecoupled};
        osp_server_options opts;
        osp_server_options_init(&opts);
        opts.model_repository = root_.c_str();
        opts.backends = backends_.data();
        opts.n_backends = backends_.size();
        ASSERT_OK(osp_server_new(&opts, &server_));
    }
    void TearDown() override {
        // The server first: once its instances are stopped, every execute
        // has returned and put its thread in g_threads.
        osp_server_free(server_);
        {
            std::lock_guard<std::mutex> lock(g_threads_mu);
            for (auto &t : g_threads)
                t.join();
            g_threads.clear();
        }
        EXPECT_EQ(response_senders_open(), 0u);
        std::error_code ec;
        fs::remove_all(root_, ec);
    }
    void Write(const std::string &name, const std::string &config) {
        fs::create_directories(root_ + "/" + name + "/1");
        std::ofstream(root_ + "/" + name + "/config.pbtxt")
            << "name: \"" << name << "\"\n"
            << config;
    }
    osp_infer_request *Request(const char *model, const char *input,
                               std::vector<int32_t> values) {
        osp_infer_request *req = osp_infer_request_new(model, -1);
        osp_shape shape{};
        shape.rank = 1;
        shape.dims[0] = (int64_t)values.size();
        osp_buffer *buf = osp_buffer_new_host(values.size() * 4);
        memcpy(buf->data, values.data(), values.size() * 4);
        EXPECT_EQ(TakeMessage(osp_infer_request_add_input(
                      req, input, OSP_TYPE_INT32, &shape, buf)),
                  "");
        return req;
    }
    osp_error *Stream(std::vector<int32_t> values, Collected *c,
                      osp_cancel_token *cancel = nullptr) {
        return osp_server_infer_stream_async(server_,
                                             Request("rep", "IN", values),
                                             cancel, Collected::Respond, c);
    }

    std::string root_;
    std::vector<const osp_backend *> backends_;
    osp_server *server_ = nullptr;
};

TEST_F(Decoupled, ResponsesFromAnotherThreadArriveInOrderThenTheFinalFlag) {
    Collected c;
    ASSERT_OK(Stream({0, 5, 6, 7, 8}, &c));
    c.WaitFinal();
    EXPECT_EQ(c.values, (std::vector<int32_t>{5, 6, 7, 8}));
    EXPECT_EQ(c.finals, 1);
    EXPECT_FALSE(c.final_had_response); // the flag came alone
}

TEST_F(Decoupled, TheFinalFlagMayRideOnTheLastResponse) {
    Collected c;
    ASSERT_OK(Stream({3, 1, 2}, &c));
    c.WaitFinal();
    EXPECT_EQ(c.values, (std::vector<int32_t>{1, 2}));
    EXPECT_TRUE(c.final_had_response);
}

TEST_F(Decoupled, AFailedExecuteEndsTheRequestItLeftOpen) {
    Collected c;
    ASSERT_OK(Stream({1, 9}, &c));
    c.WaitFinal();
    EXPECT_EQ(c.values, (std::vector<int32_t>{9}));
    EXPECT_EQ(c.errors, (std::vector<std::string>{"execute broke"}));
    EXPECT_EQ(c.finals, 1);
}

TEST_F(Decoupled, ACancelledTokenDropsLaterResponsesButNotTheFinalFlag) {
    osp_cancel_token *token = osp_cancel_token_new();
    Collected c;
    ASSERT_OK(Stream({2, 1, 2, 3, 4}, &c, token));
    ASSERT_EQ(c.WaitValues(1), 1u);
    osp_cancel_token_cancel(token);
    osp_cancel_token_unref(token); // the request keeps its own reference
    c.WaitFinal();
    EXPECT_EQ(c.values, (std::vector<int32_t>{1}));
    EXPECT_EQ(c.finals, 1);
    EXPECT_FALSE(c.final_had_response);
}

TEST_F(Decoupled, ANonStreamingCallIsRefused) {
    osp_error *err = osp_server_infer_async(
        server_, Request("rep", "IN", {3, 1}),
        [](osp_infer_response *r, void *) { osp_infer_response_free(r); },
        nullptr);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNSUPPORTED);
    EXPECT_NE(TakeMessage(err).find("decoupled"), std::string::npos);
}

TEST_F(Decoupled, AModelThatIsNotDecoupledAnswersAStreamOnceWithFinal) {
    Collected c;
    ASSERT_OK(osp_server_infer_stream_async(
        server_, Request("ident", "INPUT0", {42}), nullptr, Collected::Respond,
        &c));
    c.WaitFinal();
    EXPECT_EQ(c.values, (std::vector<int32_t>{42}));
    EXPECT_TRUE(c.final_had_response);
}

TEST_F(Decoupled, StatisticsCountEachRequestOnceAtItsEnd) {
    for (std::vector<int32_t> v : {std::vector<int32_t>{0, 1, 2},
                                   std::vector<int32_t>{1, 3}}) {
        Collected c;
        ASSERT_OK(Stream(v, &c));
        c.WaitFinal();
    }
    osp_model_stats *stats = nullptr;
    size_t n = 0;
    ASSERT_OK(osp_server_model_statistics(server_, "rep", -1, &stats, &n));
    ASSERT_EQ(n, 1u);
    EXPECT_EQ(stats[0].success.count, 1u);
    EXPECT_EQ(stats[0].fail.count, 1u);
    EXPECT_EQ(stats[0].execution_count, 1u); // the failed one is not counted
    // Per response index: the first request sent 1, 2 and the flag alone;
    // the second 3, then its execute failed (the core's error response).
    ASSERT_EQ(stats[0].n_response_stats, 3u);
    const osp_response_stat *r = stats[0].response_stats;
    EXPECT_EQ(r[0].success.count, 2u);
    EXPECT_EQ(r[0].compute_infer.count, 2u);
    EXPECT_EQ(r[1].success.count, 1u);
    EXPECT_EQ(r[1].fail.count, 1u);
    EXPECT_EQ(r[2].empty_response.count, 1u);
    EXPECT_EQ(r[2].success.count + r[2].fail.count, 0u);
    osp_model_stats_free(stats, n);
}

} // namespace
