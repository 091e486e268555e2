// The tracer (osprey/trace.h): --trace-config parsing, Triton's settings
// semantics (inheritance, clearing, validation messages), sampling and
// counts, the trace file format and its indexed files, tensor captures,
// trace_file names inside --trace-file-directory, and the writer's bound.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "osp_test.h"
#include "osprey/trace.h"

namespace fs = std::filesystem;

namespace {

osp_error_code CodeOf(osp_error *err) {
    osp_error_code code = osp_error_get_code(err);
    osp_error_free(err);
    return code;
}

std::string ReadFile(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

size_t Count(const std::string &text, const std::string &what) {
    size_t n = 0;
    for (size_t pos = text.find(what); pos != std::string::npos;
         pos = text.find(what, pos + what.size()))
        n++;
    return n;
}

// Waits for the writer thread to produce `path` (it batches for ~10 ms).
bool WaitForFile(const std::string &path) {
    for (int i = 0; i < 500; i++) {
        if (fs::exists(path))
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

class Trace : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/osp_trace_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        osp_tracer_options_init(&opts_);
    }
    void TearDown() override {
        osp_tracer_free(tracer_);
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    void Start() {
        osp_error *err = osp_tracer_new(&opts_, &tracer_);
        ASSERT_EQ(err, nullptr) << TakeMessage(err);
    }
    // Tracing on, every request, into <dir>/<name>.
    void StartTracing(const char *name = "trace.log") {
        file_ = dir_ + "/" + name;
        opts_.level = OSP_TRACE_LEVEL_TIMESTAMPS;
        opts_.rate = 1;
        opts_.file = file_.c_str();
        Start();
    }
    void Stop() {
        osp_tracer_free(tracer_);
        tracer_ = nullptr;
    }
    osp_trace_settings Get(const char *model = nullptr) {
        osp_trace_settings s;
        osp_tracer_get_settings(tracer_, model, &s);
        return s;
    }
    // One traced request with every stage stamped.
    void Run(const char *model = "simple", const char *id = "") {
        osp_trace *t = osp_tracer_sample(tracer_, model);
        ASSERT_NE(t, nullptr);
        for (int a = 0; a < OSP_TRACE_ACTIVITY_COUNT_; a++)
            osp_trace_stamp(t, (osp_trace_activity)a, 1000 + a);
        osp_trace_set_model(t, model, 1, id);
        osp_trace_end(t);
    }

    std::string dir_;
    std::string file_;
    osp_tracer_options opts_;
    osp_tracer *tracer_ = nullptr;
};

osp_trace_update Update() {
    osp_trace_update u;
    memset(&u, 0, sizeof u);
    return u;
}

// ---- --trace-config
// ----------------------------------------------------------------

TEST(TraceOptions, TritonDefaults) {
    osp_tracer_options o;
    osp_tracer_options_init(&o);
    EXPECT_EQ(o.level, OSP_TRACE_LEVEL_OFF);
    EXPECT_EQ(o.rate, 1000u);
    EXPECT_EQ(o.count, -1);
    EXPECT_EQ(o.log_frequency, 0u);
    EXPECT_STREQ(o.file, "");
    EXPECT_EQ(o.file_directory, nullptr);
}

TEST(TraceOptions, ParsesTritonSyntax) {
    osp_tracer_options o;
    osp_tracer_options_init(&o);
    EXPECT_EQ(osp_tracer_options_parse(&o, "triton,file=global.log"), nullptr);
    EXPECT_EQ(osp_tracer_options_parse(&o, "level=TIMESTAMPS"), nullptr);
    EXPECT_EQ(osp_tracer_options_parse(&o, "level=tensors"), nullptr);
    EXPECT_EQ(osp_tracer_options_parse(&o, "rate=1"), nullptr);
    EXPECT_EQ(osp_tracer_options_parse(&o, "count=5"), nullptr);
    EXPECT_EQ(osp_tracer_options_parse(&o, "mode=triton"), nullptr);
    EXPECT_EQ(osp_tracer_options_parse(&o, "triton,log-frequency=7"), nullptr);
    EXPECT_STREQ(o.file, "global.log");
    EXPECT_EQ(o.level, OSP_TRACE_LEVEL_TIMESTAMPS | OSP_TRACE_LEVEL_TENSORS);
    EXPECT_EQ(o.rate, 1u);
    EXPECT_EQ(o.count, 5);
    EXPECT_EQ(o.log_frequency, 7u);
    // the plain key=value form of the triton-mode settings
    EXPECT_EQ(osp_tracer_options_parse(&o, "file=plain.log"), nullptr);
    EXPECT_EQ(osp_tracer_options_parse(&o, "log-frequency=2"), nullptr);
    EXPECT_STREQ(o.file, "plain.log");
    EXPECT_EQ(o.log_frequency, 2u);
    EXPECT_EQ(osp_tracer_options_parse(&o, "level=OFF"), nullptr);
    EXPECT_EQ(o.level, OSP_TRACE_LEVEL_OFF);
    EXPECT_EQ(osp_tracer_options_parse(&o, "count=-1"), nullptr);
    EXPECT_EQ(o.count, -1);
}

TEST(TraceOptions, RejectsBadValues) {
    osp_tracer_options o;
    osp_tracer_options_init(&o);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "rate")),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "rate=-1")),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "rate=4294967296")),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "count=-2")),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "level=MAX")),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "colour=blue")),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "triton,rate=1")),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "zipkin,file=x")),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(&o, "mode=opentelemetry")),
              OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(CodeOf(osp_tracer_options_parse(
                  &o, "opentelemetry,url=localhost:4318")),
              OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(o.rate, 1000u); // untouched by the failures
}

// ---- settings
// ----------------------------------------------------------------------

TEST_F(Trace, GetShowsStartupValues) {
    opts_.file = "global_unittest.log";
    opts_.level = OSP_TRACE_LEVEL_TIMESTAMPS;
    opts_.rate = 1;
    Start();
    for (const char *model : {(const char *)nullptr, "simple"}) {
        osp_trace_settings s = Get(model);
        EXPECT_EQ(s.level, OSP_TRACE_LEVEL_TIMESTAMPS);
        EXPECT_EQ(s.rate, 1u);
        EXPECT_EQ(s.count, -1);
        EXPECT_EQ(s.log_frequency, 0u);
        EXPECT_STREQ(s.file, "global_unittest.log");
        EXPECT_STREQ(s.mode, "triton");
    }
}

// qa/L0_trace/trace_endpoint_test.py test_http_clear_settings, in C.
TEST_F(Trace, ClearAndInheritance) {
    opts_.file = "global_unittest.log";
    opts_.level = OSP_TRACE_LEVEL_TIMESTAMPS;
    opts_.rate = 1;
    Start();
    osp_trace_update m = Update();
    m.rate_change = OSP_TRACE_SET;
    m.rate = 12;
    m.log_frequency_change = OSP_TRACE_SET;
    m.log_frequency = 34;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, "simple", &m), nullptr);
    osp_trace_update g = Update();
    g.rate_change = OSP_TRACE_SET;
    g.rate = 56;
    g.count_change = OSP_TRACE_SET;
    g.count = 78;
    g.level_change = OSP_TRACE_SET;
    g.level = OSP_TRACE_LEVEL_OFF;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &g), nullptr);
    EXPECT_EQ(Get("simple").count, 78); // tracks the global value

    osp_trace_update gc = Update();
    gc.rate_change = OSP_TRACE_CLEAR;
    gc.count_change = OSP_TRACE_CLEAR;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, "", &gc), nullptr);
    osp_trace_settings s = Get();
    EXPECT_EQ(s.level, OSP_TRACE_LEVEL_OFF);
    EXPECT_EQ(s.rate, 1u); // back to the startup value
    EXPECT_EQ(s.count, -1);
    s = Get("simple");
    EXPECT_EQ(s.level, OSP_TRACE_LEVEL_OFF);
    EXPECT_EQ(s.rate, 12u);
    EXPECT_EQ(s.count, -1);
    EXPECT_EQ(s.log_frequency, 34u);
    EXPECT_STREQ(s.file, "global_unittest.log");

    osp_trace_update mc = Update();
    mc.rate_change = OSP_TRACE_CLEAR;
    mc.level_change = OSP_TRACE_CLEAR;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, "simple", &mc), nullptr);
    s = Get("simple");
    EXPECT_EQ(s.level, OSP_TRACE_LEVEL_OFF);
    EXPECT_EQ(s.rate, 1u);
    EXPECT_EQ(s.log_frequency, 34u);

    // Clearing the last specified field removes the model setting: it
    // follows the global one again, live.
    osp_trace_update last = Update();
    last.log_frequency_change = OSP_TRACE_CLEAR;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, "simple", &last), nullptr);
    osp_trace_update g2 = Update();
    g2.rate_change = OSP_TRACE_SET;
    g2.rate = 9;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &g2), nullptr);
    EXPECT_EQ(Get("simple").rate, 9u);
    EXPECT_EQ(Get("simple").log_frequency, 0u);
}

TEST_F(Trace, ValidationMessages) {
    opts_.file = "x.log";
    opts_.level = OSP_TRACE_LEVEL_TIMESTAMPS;
    Start();
    osp_trace_update u = Update();
    u.rate_change = OSP_TRACE_SET;
    u.rate = 0;
    EXPECT_EQ(TakeMessage(osp_tracer_update_settings(tracer_, nullptr, &u)),
              "Attempting to set invalid trace setting :sample rate must be "
              "non-zero");
    u = Update();
    u.count_change = OSP_TRACE_SET;
    u.count = 0;
    EXPECT_EQ(TakeMessage(osp_tracer_update_settings(tracer_, "m", &u)),
              "Attempting to set invalid trace setting :");
    // Invalid but OFF is allowed.
    u.level_change = OSP_TRACE_SET;
    u.level = OSP_TRACE_LEVEL_OFF;
    EXPECT_EQ(osp_tracer_update_settings(tracer_, "m", &u), nullptr);
    EXPECT_EQ(Get("m").count, 0);
    EXPECT_EQ(Get().rate, 1000u); // the failed update changed nothing

    u = Update();
    u.file_change = OSP_TRACE_SET;
    u.file = "y.log";
    u.file_len = 5;
    osp_error *err = osp_tracer_update_settings(tracer_, nullptr, &u);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(TakeMessage(err), "trace file location can not be updated "
                                "through network protocol");
    u.file_change = OSP_TRACE_CLEAR;
    EXPECT_EQ(CodeOf(osp_tracer_update_settings(tracer_, nullptr, &u)),
              OSP_ERROR_UNSUPPORTED);
}

TEST_F(Trace, NoFileMeansInvalid) {
    opts_.level = OSP_TRACE_LEVEL_TIMESTAMPS;
    opts_.rate = 1;
    Start();
    EXPECT_EQ(osp_tracer_sample(tracer_, "simple"), nullptr);
    osp_trace_update u = Update();
    u.rate_change = OSP_TRACE_SET;
    u.rate = 2;
    EXPECT_EQ(TakeMessage(osp_tracer_update_settings(tracer_, nullptr, &u)),
              "Attempting to set invalid trace setting :trace file name is "
              "not given");
}

// ---- sampling
// ---------------------------------------------------------------------------

TEST_F(Trace, OffNeverSamples) {
    Start();
    for (int i = 0; i < 100; i++)
        EXPECT_EQ(osp_tracer_sample(tracer_, "simple"), nullptr);
    EXPECT_EQ(osp_tracer_sample(nullptr, "simple"), nullptr);
}

TEST_F(Trace, RateCountAndModelCounters) {
    StartTracing();
    osp_trace_update u = Update();
    u.rate_change = OSP_TRACE_SET;
    u.rate = 3;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &u), nullptr);
    std::string taken;
    uint64_t last_id = 0;
    for (int i = 1; i <= 9; i++) {
        osp_trace *t = osp_tracer_sample(tracer_, "simple");
        taken += t ? "x" : ".";
        if (t) {
            EXPECT_GT(osp_trace_id(t), last_id);
            last_id = osp_trace_id(t);
            EXPECT_FALSE(osp_trace_wants_tensors(t));
        }
        osp_trace_end(t);
    }
    EXPECT_EQ(taken, "..x..x..x");

    // A model with its own setting counts on its own; the rest share global.
    osp_trace_update m = Update();
    m.rate_change = OSP_TRACE_SET;
    m.rate = 2;
    m.count_change = OSP_TRACE_SET;
    m.count = 2;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, "mine", &m), nullptr);
    taken.clear();
    for (int i = 1; i <= 8; i++) {
        osp_trace *t = osp_tracer_sample(tracer_, "mine");
        taken += t ? "x" : ".";
        osp_trace_end(t);
    }
    EXPECT_EQ(taken, ".x.x....");
    EXPECT_EQ(Get("mine").count, 0);
    EXPECT_EQ(Get().count, -1);
    // Other models keep sharing the global counters (at 9 requests now).
    taken.clear();
    for (int i = 1; i <= 3; i++) {
        osp_trace *t = osp_tracer_sample(tracer_, "other");
        taken += t ? "x" : ".";
        osp_trace_end(t);
    }
    EXPECT_EQ(taken, "..x");
}

// ---- files
// -------------------------------------------------------------------------------

TEST_F(Trace, FileIsAJsonArrayOfCompactRecords) {
    StartTracing();
    Run("simple", "req-7");
    Run("simple");
    Stop();
    std::string text = ReadFile(file_);
    ASSERT_FALSE(text.empty());
    EXPECT_EQ(text.front(), '[');
    EXPECT_EQ(text.back(), ']');
    EXPECT_NE(text.find("{\"id\":1,\"timestamps\":[{\"name\":\"HTTP_RECV_"
                        "START\",\"ns\":1000}]},{\"id\":1,\"timestamps\":[{"
                        "\"name\":\"HTTP_RECV_END\",\"ns\":1001}]}"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("{\"id\":1,\"model_name\":\"simple\",\"model_version"
                        "\":1,\"request_id\":\"req-7\"},{\"id\":1,"
                        "\"timestamps\":[{\"name\":\"REQUEST_START\""),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("{\"id\":2,\"model_name\":\"simple\",\"model_version"
                        "\":1},"),
              std::string::npos)
        << text;
    EXPECT_EQ(Count(text, "\"name\":\"REQUEST_END\""), 2u);
    EXPECT_EQ(Count(text, "\"name\":\"INFER_RESPONSE_COMPLETE\""), 2u);
    EXPECT_EQ(text.find(' '), std::string::npos); // compact
}

TEST_F(Trace, LogFrequencyWritesIndexedFiles) {
    StartTracing();
    osp_trace_update u = Update();
    u.log_frequency_change = OSP_TRACE_SET;
    u.log_frequency = 2;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, "simple", &u), nullptr);
    Run();
    Run();
    ASSERT_TRUE(WaitForFile(file_ + ".0"));
    Run();
    Stop(); // the third goes to .1 at shutdown
    std::string zero = ReadFile(file_ + ".0");
    std::string one = ReadFile(file_ + ".1");
    EXPECT_EQ(Count(zero, "\"name\":\"REQUEST_START\""), 2u);
    EXPECT_EQ(zero.front(), '[');
    EXPECT_EQ(zero.back(), ']');
    EXPECT_EQ(Count(one, "\"name\":\"REQUEST_START\""), 1u);
    EXPECT_EQ(one.back(), ']');
    EXPECT_FALSE(fs::exists(file_)); // nothing went to the plain file
    EXPECT_FALSE(fs::exists(file_ + ".2"));
}

TEST_F(Trace, CountWritesIndexedFileWhenDone) {
    StartTracing("count.log");
    osp_trace_update u = Update();
    u.count_change = OSP_TRACE_SET;
    u.count = 3;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &u), nullptr);
    for (int i = 0; i < 3; i++)
        Run();
    for (int i = 0; i < 5; i++)
        EXPECT_EQ(osp_tracer_sample(tracer_, "simple"), nullptr);
    EXPECT_EQ(Get().count, 0);
    ASSERT_TRUE(WaitForFile(file_ + ".0"));
    Stop();
    EXPECT_EQ(Count(ReadFile(file_ + ".0"), "\"name\":\"REQUEST_START\""), 3u);
    EXPECT_FALSE(fs::exists(file_));
}

TEST_F(Trace, UpdateFlushesBufferedTraces) {
    StartTracing();
    Run();
    osp_trace_update u = Update();
    u.rate_change = OSP_TRACE_SET;
    u.rate = 1;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &u), nullptr);
    ASSERT_TRUE(WaitForFile(file_)); // the replaced setting wrote it
    Run();
    Stop();
    std::string text = ReadFile(file_);
    EXPECT_EQ(Count(text, "\"name\":\"REQUEST_START\""), 2u);
    EXPECT_EQ(text.back(), ']');
    EXPECT_NE(text.find("}]},{\"id\":2,"), std::string::npos) << text;
}

TEST_F(Trace, LevelTensorsOnlyWritesNoStamps) {
    StartTracing();
    osp_trace_update u = Update();
    u.level_change = OSP_TRACE_SET;
    u.level = OSP_TRACE_LEVEL_TENSORS;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &u), nullptr);
    osp_trace *t = osp_tracer_sample(tracer_, "simple");
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(osp_trace_wants_tensors(t));
    osp_trace_stamp(t, OSP_TRACE_REQUEST_START, 5);
    osp_trace_set_model(t, "simple", 1, "");
    int32_t v[2] = {7, -8};
    osp_shape shape = {2, {1, 2}};
    osp_trace_capture_tensor(t, OSP_TRACE_TENSOR_QUEUE_INPUT, "IN",
                             OSP_TYPE_INT32, &shape, v, sizeof v);
    osp_trace_end(t);
    // A trace with nothing to write is skipped (no dangling comma).
    osp_trace *empty = osp_tracer_sample(tracer_, "simple");
    osp_trace_end(empty);
    Stop();
    EXPECT_EQ(ReadFile(file_),
              "[{\"id\":1,\"activity\":\"TENSOR_QUEUE_INPUT\",\"tensor\":{"
              "\"name\":\"IN\",\"data\":\"7,-8\",\"shape\":\"1,2\",\"dtype\":"
              "\"INT32\"}}]");
}

TEST_F(Trace, TensorDataFormats) {
    StartTracing();
    osp_trace_update u = Update();
    u.level_change = OSP_TRACE_SET;
    u.level = OSP_TRACE_LEVEL_TENSORS;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &u), nullptr);
    osp_trace *t = osp_tracer_sample(tracer_, "m");
    ASSERT_NE(t, nullptr);
    osp_shape s3 = {1, {3}};
    float f[3] = {1.5f, -0.25f, 1e-7f};
    osp_trace_capture_tensor(t, OSP_TRACE_TENSOR_BACKEND_OUTPUT, "F",
                             OSP_TYPE_FP32, &s3, f, sizeof f);
    uint8_t b[3] = {1, 0, 2};
    osp_trace_capture_tensor(t, OSP_TRACE_TENSOR_BACKEND_OUTPUT, "B",
                             OSP_TYPE_BOOL, &s3, b, sizeof b);
    uint8_t c[3] = {'A', '"', 1};
    osp_trace_capture_tensor(t, OSP_TRACE_TENSOR_BACKEND_OUTPUT, "U8",
                             OSP_TYPE_UINT8, &s3, c, sizeof c);
    uint16_t h[3] = {1, 2, 3};
    osp_trace_capture_tensor(t, OSP_TRACE_TENSOR_BACKEND_OUTPUT, "H",
                             OSP_TYPE_FP16, &s3, h, sizeof h);
    // BYTES: 4-byte little-endian length + bytes per element
    const char bytes[] = "\x02\x00\x00\x00hi\x03\x00\x00\x00"
                         "a\"b";
    osp_shape s2 = {1, {2}};
    osp_trace_capture_tensor(t, OSP_TRACE_TENSOR_BACKEND_OUTPUT, "S",
                             OSP_TYPE_BYTES, &s2, bytes, sizeof bytes - 1);
    // capped at OSP_TRACE_TENSOR_MAX_ELEMENTS elements
    std::vector<int64_t> big(5000, 3);
    osp_shape sbig = {2, {1, 5000}};
    osp_trace_capture_tensor(t, OSP_TRACE_TENSOR_BACKEND_OUTPUT, "BIG",
                             OSP_TYPE_INT64, &sbig, big.data(),
                             big.size() * sizeof(int64_t));
    EXPECT_EQ(osp_trace_tensor_capture_bytes(OSP_TYPE_INT64, 40000), 8192u);
    EXPECT_EQ(osp_trace_tensor_capture_bytes(OSP_TYPE_INT64, 80), 80u);
    osp_trace_end(t);
    Stop();
    std::string text = ReadFile(file_);
    EXPECT_NE(text.find("\"name\":\"F\",\"data\":\"1.5,-0.25,1e-07\""),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\"name\":\"B\",\"data\":\"1,0,1\""),
              std::string::npos);
    EXPECT_NE(text.find("\"name\":\"U8\",\"data\":\"A,\\\",\\u0001\""),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\"name\":\"H\",\"data\":\"\",\"shape\":\"3\","
                        "\"dtype\":\"FP16\""),
              std::string::npos);
    EXPECT_NE(text.find("\"name\":\"S\",\"data\":\"\\\"hi\\\",\\\"a\\\"b"
                        "\\\"\",\"shape\":\"2\",\"dtype\":\"BYTES\""),
              std::string::npos)
        << text;
    size_t big_at = text.find("\"name\":\"BIG\"");
    ASSERT_NE(big_at, std::string::npos);
    std::string big_rec = text.substr(big_at, text.find('}', big_at) - big_at);
    EXPECT_EQ(Count(big_rec, "3,"), 1023u);
    EXPECT_NE(big_rec.find("\"shape\":\"1,5000\""), std::string::npos);
}

TEST_F(Trace, FullQueueDropsAndCounts) {
    opts_.max_pending_bytes = 1; // nothing fits
    StartTracing();
    for (int i = 0; i < 5; i++)
        Run();
    osp_tracer_stats st;
    osp_tracer_get_stats(tracer_, &st);
    EXPECT_EQ(st.traces_dropped, 5u);
    EXPECT_EQ(st.traces_written, 0u);
    Stop();
    EXPECT_FALSE(fs::exists(file_));
}

TEST_F(Trace, ShutdownClosesFilesWithTracesInFlight) {
    StartTracing();
    Run();
    osp_trace *late = osp_tracer_sample(tracer_, "simple");
    ASSERT_NE(late, nullptr);
    osp_tracer_shutdown(tracer_);
    EXPECT_EQ(osp_tracer_sample(tracer_, "simple"), nullptr);
    std::string text = ReadFile(file_);
    EXPECT_EQ(text.back(), ']') << text;
    EXPECT_EQ(Count(text, "\"name\":\"REQUEST_START\""), 1u);
    osp_trace_stamp(late, OSP_TRACE_REQUEST_START, 1);
    osp_trace_end(late); // discarded
    Stop();
    EXPECT_EQ(ReadFile(file_), text);
}

// ---- trace_file inside --trace-file-directory
// ------------------------------------------

class TraceDirectory : public Trace {
  protected:
    void SetUp() override {
        Trace::SetUp();
        files_ = dir_ + "/files";
        ASSERT_EQ(mkdir(files_.c_str(), 0755), 0);
        opts_.file_directory = files_.c_str();
    }
    osp_error *SetFile(const char *name, const char *model = nullptr) {
        osp_trace_update u = Update();
        u.file_change = OSP_TRACE_SET;
        u.file = name;
        u.file_len = strlen(name);
        return osp_tracer_update_settings(tracer_, model, &u);
    }
    std::string files_;
};

TEST_F(TraceDirectory, RefusesNamesOutsideIt) {
    StartTracing();
    ASSERT_EQ(mkdir((files_ + "/sub").c_str(), 0755), 0);
    ASSERT_EQ(symlink("/etc/passwd", (files_ + "/out.log").c_str()), 0);
    ASSERT_EQ(symlink("inside.log", (files_ + "/rel.log").c_str()), 0);
    for (const char *bad : {"../x", "/etc/x", "sub/x", "..", ".", "", "out.log",
                            "rel.log", "sub"}) {
        osp_error *err = SetFile(bad);
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG) << bad;
        std::string m = TakeMessage(err);
        EXPECT_EQ(m.rfind(std::string("Unable to set 'trace_file' to '") + bad +
                              "': ",
                          0),
                  0u)
            << m;
    }
    EXPECT_NE(TakeMessage(SetFile("out.log")).find("symbolic link"),
              std::string::npos);
    EXPECT_NE(TakeMessage(SetFile("../x")).find("no '/'"), std::string::npos);
    osp_trace_update u = Update();
    u.file_change = OSP_TRACE_SET;
    u.file = "a\0b";
    u.file_len = 3;
    EXPECT_EQ(CodeOf(osp_tracer_update_settings(tracer_, nullptr, &u)),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(SetFile("ok.log", "simple")), OSP_ERROR_INVALID_ARG);
    osp_trace_update clear = Update();
    clear.file_change = OSP_TRACE_CLEAR; // a model has no file to clear
    EXPECT_EQ(osp_tracer_update_settings(tracer_, "simple", &clear), nullptr);
    EXPECT_EQ(Get().file, file_); // unchanged
}

TEST_F(TraceDirectory, WritesInsideAndRestartsTheIndex) {
    StartTracing();
    ASSERT_EQ(SetFile("api.log"), nullptr);
    EXPECT_STREQ(Get().file, "api.log");
    EXPECT_STREQ(Get("simple").file, "api.log");
    osp_trace_update u = Update();
    u.log_frequency_change = OSP_TRACE_SET;
    u.log_frequency = 1;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &u), nullptr);
    Run();
    Run();
    ASSERT_TRUE(WaitForFile(files_ + "/api.log.1"));
    // Setting the file again starts over at index 0.
    ASSERT_EQ(SetFile("api.log"), nullptr);
    Run("simple", "again");
    ASSERT_TRUE(WaitForFile(files_ + "/api.log.0"));
    for (int i = 0; i < 100 && ReadFile(files_ + "/api.log.0").find("again") ==
                                   std::string::npos;
         i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_NE(ReadFile(files_ + "/api.log.0").find("\"request_id\":\"again\""),
              std::string::npos);
    // A clear goes back to the startup file.
    u = Update();
    u.file_change = OSP_TRACE_CLEAR;
    ASSERT_EQ(osp_tracer_update_settings(tracer_, nullptr, &u), nullptr);
    EXPECT_EQ(Get().file, file_);
    Stop();
    EXPECT_FALSE(fs::exists(files_ + "/api.log")); // only indexed files
    EXPECT_FALSE(fs::exists(dir_ + "/api.log.0"));
}

TEST(TraceNew, BadDirectory) {
    osp_tracer_options o;
    osp_tracer_options_init(&o);
    o.file_directory = "/nonexistent/trace/dir";
    osp_tracer *t = nullptr;
    EXPECT_EQ(CodeOf(osp_tracer_new(&o, &t)), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(t, nullptr);
}

} // namespace
