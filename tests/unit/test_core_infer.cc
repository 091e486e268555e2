// The core inference API (include/osprey/server.h, infer.h, stats.h) with no
// frontend: a temporary model repository, osp_server_new, and
// osp_server_infer_async driven from several threads at once. Checks the
// callback contract (every accepted request completes exactly once, a
// refused one never does), outputs, batching, Triton's error messages, the
// full queue, and shutdown with requests in flight.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends.h"
#include "osp_test.h"
#include "osprey/infer.h"
#include "osprey/server.h"
#include "osprey/stats.h"

namespace {

namespace fs = std::filesystem;

// The one place that says what an expected error is: its code, its
// structured reason (OSP_REASON_NONE for errors that are no well-known
// situation) and its exact message. Frees `err`.
::testing::AssertionResult
ExpectError(osp_error *err, osp_error_code code, const std::string &message,
            osp_error_reason reason = OSP_REASON_NONE) {
    if (!err)
        return ::testing::AssertionFailure()
               << "succeeded; expected " << osp_error_code_name(code) << " \""
               << message << "\"";
    osp_error_code got_code = osp_error_get_code(err);
    osp_error_reason got_reason = osp_error_get_reason(err);
    std::string got = TakeMessage(err);
    if (got_code != code || got != message || got_reason != reason)
        return ::testing::AssertionFailure()
               << "got " << osp_error_code_name(got_code) << " reason "
               << got_reason << " \"" << got << "\"; expected "
               << osp_error_code_name(code) << " reason " << reason << " \""
               << message << "\"";
    return ::testing::AssertionSuccess();
}

// ---- model repository ------------------------------------------------------

std::string Io(const char *name, const char *type, const char *dims) {
    return std::string("{ name: \"") + name + "\" data_type: " + type +
           " dims: " + dims + " }";
}

// add_sub on INT32 [16] (Triton's `simple`).
std::string AddSubConfig(const std::string &name, const std::string &extra) {
    return "name: \"" + name +
           "\"\nbackend: \"add_sub\"\nmax_batch_size: 8\n"
           "input [ " +
           Io("INPUT0", "TYPE_INT32", "[ 16 ]") + ", " +
           Io("INPUT1", "TYPE_INT32", "[ 16 ]") +
           " ]\n"
           "output [ " +
           Io("OUTPUT0", "TYPE_INT32", "[ 16 ]") + ", " +
           Io("OUTPUT1", "TYPE_INT32", "[ 16 ]") +
           " ]\n"
           "instance_group [ { count: 1 kind: KIND_CPU } ]\n" +
           extra;
}

// identity on INT32 [4], each execute sleeping `delay_ms` first.
std::string SlowIdentityConfig(const std::string &name, int delay_ms,
                               const std::string &extra) {
    return "name: \"" + name +
           "\"\nbackend: \"identity\"\nmax_batch_size: 8\n"
           "input [ " +
           Io("INPUT0", "TYPE_INT32", "[ 4 ]") +
           " ]\n"
           "output [ " +
           Io("OUTPUT0", "TYPE_INT32", "[ 4 ]") +
           " ]\n"
           "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
           "parameters [ { key: \"execute_delay_ms\" value: { string_value: "
           "\"" +
           std::to_string(delay_ms) + "\" } } ]\n" + extra;
}

class TempRepository {
  public:
    TempRepository() {
        char tmpl[] = "/tmp/osp_core_infer_XXXXXX";
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

    // <root>/<name>/config.pbtxt and an empty version folder 1.
    void AddModel(const std::string &name, const std::string &config) {
        fs::create_directories(root_ + "/" + name + "/1");
        std::ofstream(root_ + "/" + name + "/config.pbtxt") << config;
    }
    const std::string &root() const {
        return root_;
    }

  private:
    std::string root_;
};

// ---- requests and their completions ----------------------------------------

osp_buffer *Int32Buffer(const std::vector<int32_t> &values) {
    osp_buffer *buf = osp_buffer_new_host(values.size() * sizeof(int32_t));
    if (buf && !values.empty())
        memcpy(buf->data, values.data(), values.size() * sizeof(int32_t));
    return buf;
}

osp_shape Shape(std::initializer_list<int64_t> dims) {
    osp_shape s{};
    for (int64_t d : dims)
        s.dims[s.rank++] = d;
    return s;
}

// Adds an INT32 input; returns false (and the test fails) on error.
bool AddInput(osp_infer_request *req, const char *name, const osp_shape &shape,
              const std::vector<int32_t> &values,
              osp_datatype dtype = OSP_TYPE_INT32) {
    osp_buffer *buf = Int32Buffer(values);
    EXPECT_NE(buf, nullptr);
    osp_error *err = osp_infer_request_add_input(req, name, dtype, &shape, buf);
    if (err) {
        ADD_FAILURE() << "add_input: " << TakeMessage(err);
        osp_buffer_free(buf);
        return false;
    }
    return true;
}

// What one request's completion callback saw.
struct Outcome {
    std::atomic<int> calls{0};
    bool failed = false;
    std::string error;
    std::vector<std::string> names;
    std::vector<osp_shape> shapes;
    std::vector<std::vector<int32_t>> values;
};

// Counts completions and keeps each request's Outcome. The callback runs on
// a server thread; the test thread reads outcomes after Wait().
class Completions {
  public:
    explicit Completions(size_t n) : outcomes_(n), refs_(n) {}

    static void Callback(osp_infer_response *resp, void *user) {
        auto *u = static_cast<UserRef *>(user);
        Outcome &o = u->self->outcomes_[u->index];
        if (o.calls.fetch_add(1) == 0) {
            o.failed = resp->error != nullptr;
            if (resp->error)
                o.error = osp_error_message(resp->error);
            for (size_t i = 0; i < resp->n_outputs; i++) {
                const osp_infer_output &out = resp->outputs[i];
                o.names.push_back(out.name);
                o.shapes.push_back(out.shape);
                std::vector<int32_t> v(out.byte_size / sizeof(int32_t));
                if (out.data && !v.empty())
                    memcpy(v.data(), out.data->data, v.size() * 4);
                o.values.push_back(std::move(v));
            }
        }
        osp_infer_response_free(resp);
        std::lock_guard<std::mutex> lock(u->self->mu_);
        u->self->done_++;
        u->self->cv_.notify_all();
    }

    // Queues `req` as request `i`. Returns the refusal, if any (the
    // callback must then never run for `i`).
    osp_error *Submit(osp_server *server, osp_infer_request *req, size_t i) {
        refs_[i] = {this, i};
        return osp_server_infer_async(server, req, Callback, &refs_[i]);
    }

    // Waits until `n` callbacks have run. A hang guard, not a timing
    // check: a correct server finishes in a fraction of it.
    bool Wait(size_t n) {
        std::unique_lock<std::mutex> lock(mu_);
        return cv_.wait_for(lock, std::chrono::minutes(2),
                            [&] { return done_ >= n; });
    }
    size_t Done() {
        std::lock_guard<std::mutex> lock(mu_);
        return done_;
    }
    Outcome &operator[](size_t i) {
        return outcomes_[i];
    }

  private:
    struct UserRef {
        Completions *self;
        size_t index;
    };
    std::vector<Outcome> outcomes_;
    std::vector<UserRef> refs_;
    std::mutex mu_;
    std::condition_variable cv_;
    size_t done_ = 0;
};

// ---- the fixture
// -------------------------------------------------------------

class CoreInfer : public ::testing::Test {
  protected:
    void TearDown() override {
        osp_server_free(server_);
        server_ = nullptr;
    }

    void Start() {
        ASSERT_FALSE(repo_.root().empty());
        osp_server_options opts;
        osp_server_options_init(&opts);
        opts.model_repository = repo_.root().c_str();
        opts.backends = backends_builtin;
        opts.n_backends = backends_builtin_count;
        ASSERT_OK(osp_server_new(&opts, &server_));
        ASSERT_TRUE(osp_server_is_ready(server_));
    }

    // A `simple` request: INPUT0 = base + [0..15], INPUT1 = 1 (batch 1).
    static osp_infer_request *SimpleRequest(const char *model, int32_t base,
                                            int64_t version = -1) {
        osp_infer_request *req = osp_infer_request_new(model, version);
        std::vector<int32_t> in0(16), in1(16, 1);
        for (int i = 0; i < 16; i++)
            in0[i] = base + i;
        AddInput(req, "INPUT0", Shape({1, 16}), in0);
        AddInput(req, "INPUT1", Shape({1, 16}), in1);
        return req;
    }

    static void CheckSimple(Outcome &o, int32_t base) {
        ASSERT_EQ(o.calls.load(), 1);
        ASSERT_FALSE(o.failed) << o.error;
        ASSERT_EQ(o.names.size(), 2u);
        EXPECT_EQ(o.names[0], "OUTPUT0");
        EXPECT_EQ(o.names[1], "OUTPUT1");
        osp_shape want = Shape({1, 16});
        for (size_t k = 0; k < 2; k++) {
            EXPECT_TRUE(osp_shape_equal(&o.shapes[k], &want));
            ASSERT_EQ(o.values[k].size(), 16u);
        }
        for (int i = 0; i < 16; i++) {
            EXPECT_EQ(o.values[0][i], base + i + 1) << i;
            EXPECT_EQ(o.values[1][i], base + i - 1) << i;
        }
    }

    // Statistics of version 1 of `model`.
    osp_model_stats Stats(const char *model) {
        osp_model_stats *stats = nullptr;
        size_t n = 0;
        osp_model_stats copy{};
        osp_error *err =
            osp_server_model_statistics(server_, model, 1, &stats, &n);
        if (err) {
            ADD_FAILURE() << TakeMessage(err);
            return copy;
        }
        EXPECT_EQ(n, 1u);
        if (n == 1) {
            copy = stats[0];
            copy.name = nullptr;
            copy.batch_stats = nullptr;
            copy.n_batch_stats = 0;
        }
        osp_model_stats_free(stats, n);
        return copy;
    }

    TempRepository repo_;
    osp_server *server_ = nullptr;
};

// Runs fn(thread, i) for i in [0, n) spread over `threads` threads.
template <typename Fn> void OnThreads(size_t threads, size_t n, Fn fn) {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; t++)
        pool.emplace_back([&, t] {
            for (size_t i = t; i < n; i += threads)
                fn(i);
        });
    for (auto &th : pool)
        th.join();
}

// (a) Without dynamic batching: 64 requests from 4 threads, each completed
// once with its own sums, each executed alone.
TEST_F(CoreInfer, ConcurrentRequestsWithoutBatching) {
    repo_.AddModel("simple", AddSubConfig("simple", ""));
    Start();
    constexpr size_t kRequests = 64;
    Completions done(kRequests);
    std::atomic<int> refused{0};
    OnThreads(4, kRequests, [&](size_t i) {
        osp_error *err =
            done.Submit(server_, SimpleRequest("simple", int32_t(i * 100)), i);
        if (err) {
            refused++;
            ADD_FAILURE() << "request " << i << ": " << TakeMessage(err);
        }
    });
    ASSERT_EQ(refused.load(), 0);
    ASSERT_TRUE(done.Wait(kRequests)) << done.Done() << " of " << kRequests;
    for (size_t i = 0; i < kRequests; i++) {
        SCOPED_TRACE(i);
        CheckSimple(done[i], int32_t(i * 100));
    }
    osp_model_stats s = Stats("simple");
    EXPECT_EQ(s.inference_count, kRequests);
    EXPECT_EQ(s.execution_count, kRequests);
    EXPECT_EQ(s.success.count, kRequests);
    EXPECT_EQ(s.fail.count, 0u);
}

// A quick model (add_sub) whose instance is idle runs the request on the
// calling thread: the callback has run when osp_server_infer_async returns,
// on this thread. A slow one (identity with execute_delay_ms) never does:
// its batch runs on the instance's worker.
TEST_F(CoreInfer, QuickModelRunsInlineWhenItsInstanceIsIdle) {
    repo_.AddModel("simple", AddSubConfig("simple", ""));
    repo_.AddModel("slow", SlowIdentityConfig("slow", 20, ""));
    Start();
    struct Seen {
        std::atomic<int> calls{0};
        std::thread::id thread;
    };
    auto callback = [](osp_infer_response *resp, void *user) {
        auto *seen = static_cast<Seen *>(user);
        seen->thread = std::this_thread::get_id();
        seen->calls++;
        osp_infer_response_free(resp);
    };
    for (int i = 0; i < 3; i++) {
        Seen quick;
        ASSERT_OK(osp_server_infer_async(server_, SimpleRequest("simple", i),
                                         callback, &quick));
        EXPECT_EQ(quick.calls.load(), 1);
        EXPECT_EQ(quick.thread, std::this_thread::get_id());
    }
    Seen slow;
    osp_infer_request *req = osp_infer_request_new("slow", -1);
    AddInput(req, "INPUT0", Shape({1, 4}), {1, 2, 3, 4});
    ASSERT_OK(osp_server_infer_async(server_, req, callback, &slow));
    EXPECT_EQ(slow.calls.load(), 0); /* still sleeping on its worker */
    for (int i = 0; i < 500 && slow.calls.load() == 0; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(slow.calls.load(), 1);
    EXPECT_NE(slow.thread, std::this_thread::get_id());
}

// (b) With dynamic batching on a slow model: while one batch executes the
// others queue up, so batches form (execution_count < inference_count),
// and every request still gets exactly its own rows back (batch sizes 1
// and 2 mixed).
TEST_F(CoreInfer, ConcurrentRequestsWithDynamicBatching) {
    repo_.AddModel("batched",
                   SlowIdentityConfig("batched", 20,
                                      "dynamic_batching { "
                                      "max_queue_delay_microseconds: 100000 "
                                      "}\n"));
    repo_.AddModel("simple_batched",
                   AddSubConfig("simple_batched",
                                "dynamic_batching { "
                                "max_queue_delay_microseconds: 100000 }\n"));
    Start();
    constexpr size_t kRequests = 48;
    auto rows = [](size_t i) { return int64_t(1 + i % 2); };
    auto value = [](size_t i, int64_t row, int col) {
        return int32_t(i * 1000 + row * 10 + col);
    };
    Completions done(kRequests), simple_done(kRequests);
    OnThreads(6, kRequests, [&](size_t i) {
        osp_infer_request *req = osp_infer_request_new("batched", -1);
        std::string id = "req-" + std::to_string(i);
        ASSERT_OK(osp_infer_request_set_id(req, id.c_str()));
        std::vector<int32_t> in;
        for (int64_t r = 0; r < rows(i); r++)
            for (int c = 0; c < 4; c++)
                in.push_back(value(i, r, c));
        AddInput(req, "INPUT0", Shape({rows(i), 4}), in);
        osp_error *err = done.Submit(server_, req, i);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
        err = simple_done.Submit(
            server_, SimpleRequest("simple_batched", int32_t(i)), i);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
    });
    ASSERT_TRUE(done.Wait(kRequests)) << done.Done();
    ASSERT_TRUE(simple_done.Wait(kRequests)) << simple_done.Done();

    uint64_t rows_total = 0;
    for (size_t i = 0; i < kRequests; i++) {
        SCOPED_TRACE(i);
        Outcome &o = done[i];
        ASSERT_EQ(o.calls.load(), 1);
        ASSERT_FALSE(o.failed) << o.error;
        ASSERT_EQ(o.names.size(), 1u);
        EXPECT_EQ(o.names[0], "OUTPUT0");
        osp_shape want = Shape({rows(i), 4});
        EXPECT_TRUE(osp_shape_equal(&o.shapes[0], &want));
        ASSERT_EQ(o.values[0].size(), size_t(rows(i) * 4));
        for (int64_t r = 0; r < rows(i); r++)
            for (int c = 0; c < 4; c++)
                EXPECT_EQ(o.values[0][r * 4 + c], value(i, r, c));
        rows_total += uint64_t(rows(i));
        CheckSimple(simple_done[i], int32_t(i));
    }
    osp_model_stats s = Stats("batched");
    EXPECT_EQ(s.inference_count, rows_total);
    EXPECT_EQ(s.success.count, kRequests);
    EXPECT_LT(s.execution_count, kRequests) << "no batch formed";
    EXPECT_GE(s.execution_count, rows_total / 8);
    osp_model_stats t = Stats("simple_batched");
    EXPECT_EQ(t.inference_count, kRequests);
    EXPECT_LE(t.execution_count, kRequests);
}

// (c) Requests refused before queuing: the error (code and Triton's text),
// and no callback. Ownership of the request moved to the server either way
// (ASan/LSan builds catch a leak or a double free here).
TEST_F(CoreInfer, RefusedRequests) {
    repo_.AddModel("simple", AddSubConfig("simple", ""));
    Start();
    Completions done(16);
    size_t next = 0;

    EXPECT_TRUE(ExpectError(
        done.Submit(server_, SimpleRequest("no_such_model", 0), next++),
        OSP_ERROR_NOT_FOUND,
        "Request for unknown model: 'no_such_model' is not found",
        OSP_REASON_MODEL_NOT_FOUND));
    EXPECT_TRUE(ExpectError(
        done.Submit(server_, SimpleRequest("simple", 0, 2), next++),
        OSP_ERROR_NOT_FOUND,
        "Request for unknown model: 'simple' version 2 is not found",
        OSP_REASON_VERSION_NOT_FOUND));

    std::vector<int32_t> seq(16, 1);
    osp_infer_request *req = osp_infer_request_new("simple", -1);
    AddInput(req, "INPUT0", Shape({1, 16}), seq);
    AddInput(req, "INPUT2", Shape({1, 16}), seq);
    EXPECT_TRUE(ExpectError(done.Submit(server_, req, next++),
                            OSP_ERROR_INVALID_ARG,
                            "unexpected inference input 'INPUT2' for model "
                            "'simple'"));

    req = osp_infer_request_new("simple", -1);
    AddInput(req, "INPUT0", Shape({1, 16}), seq);
    EXPECT_TRUE(ExpectError(
        done.Submit(server_, req, next++), OSP_ERROR_INVALID_ARG,
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for "
        "model 'simple'. Got "
        "input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. "
        "Please provide all required input(s)."));

    req = osp_infer_request_new("simple", -1);
    AddInput(req, "INPUT0", Shape({1, 16}), seq, OSP_TYPE_FP32);
    AddInput(req, "INPUT1", Shape({1, 16}), seq);
    EXPECT_TRUE(ExpectError(done.Submit(server_, req, next++),
                            OSP_ERROR_INVALID_ARG,
                            "[request id: <id_unknown>] inference input "
                            "'INPUT0' data-type is 'FP32', but model "
                            "'simple' expects 'INT32'"));

    req = osp_infer_request_new("simple", -1);
    ASSERT_OK(osp_infer_request_set_id(req, "my-id"));
    std::vector<int32_t> seq15(15, 1);
    AddInput(req, "INPUT0", Shape({1, 15}), seq15);
    AddInput(req, "INPUT1", Shape({1, 15}), seq15);
    EXPECT_TRUE(ExpectError(
        done.Submit(server_, req, next++), OSP_ERROR_INVALID_ARG,
        "[request id: my-id] unexpected shape for input 'INPUT0' for model "
        "'simple'. Expected [-1,16], got [1,15]. NOTE: Setting a non-zero "
        "max_batch_size in the model config requires a batch dimension to be "
        "prepended to each input shape. If you want to specify the full "
        "shape including the batch dim in your input dims config, try "
        "setting max_batch_size to zero. See the model configuration docs "
        "for more info on max_batch_size."));

    req = osp_infer_request_new("simple", -1);
    std::vector<int32_t> seq9(9 * 16, 1);
    AddInput(req, "INPUT0", Shape({9, 16}), seq9);
    AddInput(req, "INPUT1", Shape({9, 16}), seq9);
    EXPECT_TRUE(ExpectError(done.Submit(server_, req, next++),
                            OSP_ERROR_INVALID_ARG,
                            "[request id: <id_unknown>] inference request "
                            "batch-size must be <= 8 for 'simple'"));

    req = SimpleRequest("simple", 0);
    ASSERT_OK(osp_infer_request_add_output(req, "OUTPUT9"));
    EXPECT_TRUE(ExpectError(done.Submit(server_, req, next++),
                            OSP_ERROR_INVALID_ARG,
                            "unexpected inference output 'OUTPUT9' for model "
                            "'simple'"));

    // A good request afterwards is served, and is the only callback.
    size_t good = next++;
    ASSERT_OK(done.Submit(server_, SimpleRequest("simple", 7), good));
    ASSERT_TRUE(done.Wait(1));
    CheckSimple(done[good], 7);
    for (size_t i = 0; i < good; i++)
        EXPECT_EQ(done[i].calls.load(), 0) << "refused request " << i;
    EXPECT_EQ(done.Done(), 1u);
    EXPECT_EQ(Stats("simple").inference_count, 1u); // refusals not counted
}

// (c) A full queue: max_queue_size 1 in front of a slow instance. Each
// request is either queued (then completed exactly once, successfully) or
// refused with UNAVAILABLE "Exceeds maximum queue size" (never called
// back); nothing else.
TEST_F(CoreInfer, FullQueueRefusesOrCompletesEachRequestOnce) {
    repo_.AddModel("queue1", SlowIdentityConfig("queue1", 20,
                                                "dynamic_batching { "
                                                "default_queue_policy { "
                                                "max_queue_size: 1 } }\n"));
    Start();
    constexpr size_t kRequests = 32;
    Completions done(kRequests);
    std::vector<int> refused(kRequests, 0);
    OnThreads(4, kRequests, [&](size_t i) {
        osp_infer_request *req = osp_infer_request_new("queue1", -1);
        AddInput(req, "INPUT0", Shape({1, 4}),
                 {int32_t(i), int32_t(i), int32_t(i), int32_t(i)});
        osp_error *err = done.Submit(server_, req, i);
        if (err) {
            refused[i] = 1;
            EXPECT_TRUE(ExpectError(err, OSP_ERROR_UNAVAILABLE,
                                    "[request id: <id_unknown>] Exceeds "
                                    "maximum queue size",
                                    OSP_REASON_QUEUE_FULL));
        }
    });
    size_t accepted = 0;
    for (int r : refused)
        accepted += r ? 0 : 1;
    ASSERT_TRUE(done.Wait(accepted)) << done.Done() << " of " << accepted;
    for (size_t i = 0; i < kRequests; i++) {
        SCOPED_TRACE(i);
        EXPECT_EQ(done[i].calls.load(), refused[i] ? 0 : 1);
        if (!refused[i]) {
            EXPECT_FALSE(done[i].failed) << done[i].error;
            ASSERT_EQ(done[i].values.size(), 1u);
            EXPECT_EQ(done[i].values[0], std::vector<int32_t>(4, int32_t(i)));
        }
    }
    EXPECT_EQ(done.Done(), accepted);
    EXPECT_GE(accepted, 1u);
    EXPECT_EQ(Stats("queue1").success.count, accepted);
    RecordProperty("refused", int(kRequests - accepted));
}

// (d) Shutdown with requests in flight: 64 requests on a slow model (full
// batches of 8, most still queued when shutdown begins) and 5 on a model
// whose batcher would wait 10 s for a full batch; begin_shutdown refuses
// new requests, and by the time osp_server_free returns every accepted
// request has been called back exactly once (served or failed).
TEST_F(CoreInfer, ShutdownCompletesEveryQueuedRequestOnce) {
    const std::string long_delay =
        "dynamic_batching { max_queue_delay_microseconds: 10000000 }\n";
    repo_.AddModel("slow", SlowIdentityConfig("slow", 5, long_delay));
    repo_.AddModel("parked", SlowIdentityConfig("parked", 0, long_delay));
    repo_.AddModel("simple", AddSubConfig("simple", ""));
    Start();
    constexpr size_t kRequests = 64 + 5;
    Completions done(kRequests + 2);
    std::vector<int> refused(kRequests, 0);
    OnThreads(4, kRequests, [&](size_t i) {
        osp_infer_request *req =
            osp_infer_request_new(i < 64 ? "slow" : "parked", -1);
        AddInput(req, "INPUT0", Shape({1, 4}), {1, 2, 3, int32_t(i)});
        osp_error *err = done.Submit(server_, req, i);
        if (err) {
            refused[i] = 1;
            ADD_FAILURE() << "request " << i << ": " << TakeMessage(err);
        }
    });

    osp_server_begin_shutdown(server_);
    EXPECT_FALSE(osp_server_is_ready(server_));
    EXPECT_FALSE(osp_server_is_live(server_));
    EXPECT_TRUE(
        ExpectError(done.Submit(server_, SimpleRequest("simple", 0), kRequests),
                    OSP_ERROR_UNAVAILABLE, "Server is shutting down",
                    OSP_REASON_SHUTTING_DOWN));
    osp_infer_request *late = osp_infer_request_new("slow", -1);
    AddInput(late, "INPUT0", Shape({1, 4}), {1, 2, 3, 4});
    EXPECT_TRUE(ExpectError(done.Submit(server_, late, kRequests + 1),
                            OSP_ERROR_UNAVAILABLE, "Server is shutting down",
                            OSP_REASON_SHUTTING_DOWN));

    osp_server_free(server_);
    server_ = nullptr;
    // No waiting: free has returned, so every callback has run.
    size_t accepted = 0;
    for (size_t i = 0; i < kRequests; i++) {
        SCOPED_TRACE(i);
        EXPECT_EQ(done[i].calls.load(), refused[i] ? 0 : 1);
        accepted += refused[i] ? 0 : 1;
        if (!refused[i] && !done[i].failed) {
            ASSERT_EQ(done[i].values.size(), 1u);
            EXPECT_EQ(done[i].values[0],
                      (std::vector<int32_t>{1, 2, 3, int32_t(i)}));
        }
    }
    EXPECT_EQ(done[kRequests].calls.load(), 0);
    EXPECT_EQ(done[kRequests + 1].calls.load(), 0);
    EXPECT_EQ(done.Done(), accepted);
    size_t failed = 0;
    for (size_t i = 0; i < kRequests; i++)
        failed += done[i].failed ? 1 : 0;
    RecordProperty("failed_at_shutdown", int(failed));
}

} // namespace
