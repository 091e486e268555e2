// The KServe v2 inference codec (server/kserve/kserve_codec.h) without
// HTTP: JSON headers and whole bodies decoded into osp_infer_requests for a
// server on a temporary repository, Triton's error messages and their
// order, one request run through osp_server_infer_async, and the response
// encoded as a JSON header plus binary parts.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "backends.h"
#include "kserve_codec.h"
#include "osp_test.h"
#include "osprey/server.h"

namespace fs = std::filesystem;

namespace {

std::string Io(const char *name, const char *type, const char *dims) {
    return std::string("{ name: \"") + name + "\" data_type: TYPE_" + type +
           " dims: " + dims + " }";
}

std::string Int32Bytes(const std::vector<int32_t> &v) {
    return std::string(reinterpret_cast<const char *>(v.data()),
                       v.size() * sizeof(int32_t));
}

std::vector<int32_t> Seq() {
    std::vector<int32_t> v;
    for (int i = 0; i < 16; i++)
        v.push_back(i);
    return v;
}

std::string BufferBytes(const osp_buffer *b) {
    return b ? std::string(static_cast<const char *>(b->data), b->size) : "";
}

// A server on a temporary repository with two models: "simple" (add_sub,
// INT32 [16], max_batch_size 8) and "echo" (identity over FP32, BOOL and
// STRING, no batching).
class KserveCodec : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        char tmpl[] = "/tmp/osp_kserve_codec_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        repo_ = new std::string(tmpl);
        Model("simple",
              "name: \"simple\" backend: \"add_sub\" max_batch_size: 8\n"
              "input [ " +
                  Io("INPUT0", "INT32", "[ 16 ]") + ", " +
                  Io("INPUT1", "INT32", "[ 16 ]") + " ]\noutput [ " +
                  Io("OUTPUT0", "INT32", "[ 16 ]") + ", " +
                  Io("OUTPUT1", "INT32", "[ 16 ]") + " ]\n");
        Model("echo", "name: \"echo\" backend: \"identity\"\n"
                      "input [ " +
                          Io("INPUT0", "FP32", "[ -1 ]") + ", " +
                          Io("INPUT1", "BOOL", "[ -1 ]") + ", " +
                          Io("INPUT2", "STRING", "[ -1 ]") + " ]\noutput [ " +
                          Io("OUTPUT0", "FP32", "[ -1 ]") + ", " +
                          Io("OUTPUT1", "BOOL", "[ -1 ]") + ", " +
                          Io("OUTPUT2", "STRING", "[ -1 ]") + " ]\n");
        osp_server_options opts;
        osp_server_options_init(&opts);
        opts.model_repository = repo_->c_str();
        opts.backends = backends_builtin;
        opts.n_backends = backends_builtin_count;
        ASSERT_OK(osp_server_new(&opts, &server_));
        ASSERT_TRUE(osp_server_is_ready(server_));
    }
    static void TearDownTestSuite() {
        osp_server_free(server_);
        server_ = nullptr;
        std::error_code ec;
        fs::remove_all(*repo_, ec);
        delete repo_;
    }
    static void Model(const std::string &name, const std::string &config) {
        fs::create_directories(*repo_ + "/" + name + "/1");
        FILE *f = fopen((*repo_ + "/" + name + "/config.pbtxt").c_str(), "w");
        ASSERT_NE(f, nullptr);
        fputs(config.c_str(), f);
        fclose(f);
    }

    // kserve_decode_request_body on a body of `header` then `blobs`.
    osp_error *DecodeBody(const char *model, const std::string &header,
                          const std::string &blobs = "") {
        std::string body = header + blobs;
        osp_infer_request_free(request_);
        request_ = nullptr;
        kserve_output_choices_destroy(&outputs_);
        return kserve_decode_request_body(server_, model, -1, body.data(),
                                          body.size(), header.size(), 1 << 20,
                                          &request_, &outputs_);
    }

    // Runs request_ (taken) and waits for the response (caller owns it).
    osp_infer_response *Infer() {
        struct Wait {
            std::mutex mu;
            std::condition_variable cv;
            osp_infer_response *response = nullptr;
            bool done = false;
        } w;
        auto done = [](osp_infer_response *r, void *user) {
            Wait *w = static_cast<Wait *>(user);
            std::lock_guard<std::mutex> lock(w->mu);
            w->response = r;
            w->done = true;
            w->cv.notify_one();
        };
        osp_infer_request *req = request_;
        request_ = nullptr;
        osp_error *err = osp_server_infer_async(server_, req, done, &w);
        if (err) {
            ADD_FAILURE() << "infer: " << TakeMessage(err);
            return nullptr;
        }
        std::unique_lock<std::mutex> lock(w.mu);
        w.cv.wait(lock, [&] { return w.done; });
        return w.response;
    }

    void TearDown() override {
        osp_infer_request_free(request_);
        kserve_output_choices_destroy(&outputs_);
    }

    static std::string *repo_;
    static osp_server *server_;
    osp_infer_request *request_ = nullptr;
    kserve_output_choices outputs_ = {};
};

std::string *KserveCodec::repo_ = nullptr;
osp_server *KserveCodec::server_ = nullptr;

const osp_infer_input *FindInput(const osp_infer_request *r, const char *name) {
    for (size_t i = 0; i < r->n_inputs; i++)
        if (strcmp(r->inputs[i].name, name) == 0)
            return &r->inputs[i];
    return nullptr;
}

std::vector<int64_t> Dims(const osp_shape &s) {
    return std::vector<int64_t>(s.dims, s.dims + s.rank);
}

// ---- decoding ---------------------------------------------------------------

TEST_F(KserveCodec, DecodesJsonDataOfEachDatatype) {
    ASSERT_OK(DecodeBody(
        "echo",
        R"({"id":"req-7","inputs":[)"
        R"({"name":"I32","datatype":"INT32","shape":[2,2],"data":[[1,2],[3,-4]]},)"
        R"({"name":"F32","datatype":"FP32","shape":[2],"data":[1.5,-2]},)"
        R"({"name":"B","datatype":"BOOL","shape":[3],"data":[true,false,true]},)"
        R"({"name":"S","datatype":"BYTES","shape":[2],"data":["ab",""]}]})"));
    ASSERT_NE(request_, nullptr);
    EXPECT_STREQ(request_->model_name, "echo");
    EXPECT_EQ(request_->model_version, -1);
    EXPECT_STREQ(request_->id, "req-7");
    ASSERT_EQ(request_->n_inputs, 4u);

    const osp_infer_input *in = FindInput(request_, "I32");
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(in->dtype, OSP_TYPE_INT32);
    EXPECT_EQ(Dims(in->shape), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(BufferBytes(in->data), Int32Bytes({1, 2, 3, -4}));

    in = FindInput(request_, "F32");
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(in->dtype, OSP_TYPE_FP32);
    const float f32[] = {1.5f, -2.0f};
    EXPECT_EQ(BufferBytes(in->data),
              std::string(reinterpret_cast<const char *>(f32), sizeof f32));

    in = FindInput(request_, "B");
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(in->dtype, OSP_TYPE_BOOL);
    EXPECT_EQ(BufferBytes(in->data), std::string("\1\0\1", 3));

    in = FindInput(request_, "S");
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(in->dtype, OSP_TYPE_BYTES);
    EXPECT_EQ(BufferBytes(in->data), std::string("\2\0\0\0ab\0\0\0\0", 10));

    // No outputs named: all of them, as JSON.
    EXPECT_EQ(request_->n_outputs, 0u);
    EXPECT_FALSE(outputs_.default_binary);
    EXPECT_EQ(outputs_.n, 0u);
}

TEST_F(KserveCodec, DecodesParametersAndOutputChoices) {
    ASSERT_OK(DecodeBody(
        "simple",
        R"({"parameters":{"priority":2,"timeout":1500,"sequence_id":"s1",)"
        R"("binary_data_output":true,"tag":"x","n":-5,"flag":false,"w":0.25},)"
        R"("inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],)"
        R"("data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}],)"
        R"("outputs":[{"name":"OUTPUT1","parameters":{"binary_data":false}},)"
        R"({"name":"OUTPUT0","parameters":{"classification":2}}]})"));
    ASSERT_NE(request_, nullptr);
    EXPECT_STREQ(request_->id, "");
    EXPECT_EQ(request_->priority, 2u);
    EXPECT_EQ(request_->timeout_us, 1500u);
    ASSERT_EQ(request_->n_parameters, 5u);
    EXPECT_STREQ(request_->parameters[0].key, "sequence_id");
    EXPECT_EQ(request_->parameters[0].type, OSP_PARAM_STRING);
    EXPECT_STREQ(request_->parameters[0].value.s, "s1");
    EXPECT_STREQ(request_->parameters[1].key, "tag");
    EXPECT_STREQ(request_->parameters[1].value.s, "x");
    EXPECT_STREQ(request_->parameters[2].key, "n");
    EXPECT_EQ(request_->parameters[2].type, OSP_PARAM_INT);
    EXPECT_EQ(request_->parameters[2].value.i, -5);
    EXPECT_STREQ(request_->parameters[3].key, "flag");
    EXPECT_EQ(request_->parameters[3].type, OSP_PARAM_BOOL);
    EXPECT_FALSE(request_->parameters[3].value.b);
    EXPECT_STREQ(request_->parameters[4].key, "w");
    EXPECT_EQ(request_->parameters[4].type, OSP_PARAM_DOUBLE);
    EXPECT_EQ(request_->parameters[4].value.d, 0.25);

    ASSERT_EQ(request_->n_outputs, 2u);
    EXPECT_STREQ(request_->outputs[0], "OUTPUT1");
    EXPECT_STREQ(request_->outputs[1], "OUTPUT0");
    EXPECT_EQ(request_->output_class_counts[0], 0u);
    EXPECT_EQ(request_->output_class_counts[1], 2u);

    EXPECT_TRUE(outputs_.default_binary);
    ASSERT_EQ(outputs_.n, 2u);
    EXPECT_STREQ(outputs_.items[0].name, "OUTPUT1");
    EXPECT_FALSE(outputs_.items[0].binary);
    EXPECT_STREQ(outputs_.items[1].name, "OUTPUT0");
    EXPECT_FALSE(outputs_.items[1].binary); // "binary_data" absent
}

std::string BinaryInput(const char *name, uint64_t size) {
    return std::string(R"({"name":")") + name +
           R"(","datatype":"INT32","shape":[1,16],)"
           R"("parameters":{"binary_data_size":)" +
           std::to_string(size) + "}}";
}

TEST_F(KserveCodec, FillsBinaryInputsFromTheWholeBody) {
    std::vector<int32_t> a = Seq(), b;
    for (int32_t x : a)
        b.push_back(100 * x);
    ASSERT_OK(DecodeBody("simple",
                         "{\"inputs\":[" + BinaryInput("INPUT0", 64) + "," +
                             BinaryInput("INPUT1", 64) + "]}",
                         Int32Bytes(a) + Int32Bytes(b)));
    ASSERT_NE(request_, nullptr);
    ASSERT_EQ(request_->n_inputs, 2u);
    EXPECT_EQ(BufferBytes(request_->inputs[0].data), Int32Bytes(a));
    EXPECT_EQ(BufferBytes(request_->inputs[1].data), Int32Bytes(b));
}

TEST_F(KserveCodec, BlobSizeErrors) {
    const std::string header = "{\"inputs\":[" + BinaryInput("INPUT0", 64) +
                               "," + BinaryInput("INPUT1", 64) + "]}";
    const std::string seq = Int32Bytes(Seq());
    EXPECT_EQ(
        TakeMessage(DecodeBody("simple", header, seq + seq.substr(0, 36))),
        "unexpected size for input 'INPUT1', expecting 28 additional "
        "bytes for model 'simple'");
    EXPECT_EQ(request_, nullptr);
    EXPECT_EQ(TakeMessage(DecodeBody("simple", header, seq + seq + "extra")),
              "unexpected additional input data for model 'simple'");
    // JSON only, but bytes after it.
    EXPECT_EQ(TakeMessage(DecodeBody(
                  "simple",
                  R"({"inputs":[{"name":"INPUT0","datatype":"INT32",)"
                  R"("shape":[0],"data":[]}]})",
                  "x")),
              "unexpected additional input data for model 'simple'");
}

TEST_F(KserveCodec, HeaderErrors) {
    EXPECT_EQ(TakeMessage(DecodeBody("simple", R"({"inputs":[]}  x)"))
                  .rfind("failed to parse the request JSON buffer: ", 0),
              0u);
    EXPECT_EQ(TakeMessage(DecodeBody("simple", R"({"id":"a"})")),
              "Unable to parse 'inputs': attempt to access non-existing "
              "object member 'inputs'");
    EXPECT_EQ(TakeMessage(DecodeBody(
                  "simple", R"({"parameters":{"triton_x":1},"inputs":[]})")),
              "parameter keys starting with 'triton_' are reserved for Triton "
              "usage and should not be specified.");
    EXPECT_EQ(TakeMessage(DecodeBody(
                  "simple", R"({"inputs":[{"name":"INPUT0",)"
                            R"("datatype":"INT32","shape":[1,16]}]})")),
              "Input must set only one of the following fields: 'data', "
              "'binary_data_size' in 'parameters', 'shared_memory_region' in "
              "'parameters'. But no field is set");
    EXPECT_EQ(TakeMessage(DecodeBody(
                  "simple", R"({"inputs":[{"name":"INPUT0","datatype":"FP16",)"
                            R"("shape":[1],"data":[1]}]})")),
              "receiving FP16 data via JSON is not supported. Please use the "
              "binary data format for input INPUT0");
    EXPECT_EQ(request_, nullptr);
}

// Triton reads the blobs of the inputs before a header error first.
TEST_F(KserveCodec, HeaderErrorsWaitForEarlierBlobs) {
    const std::string seq = Int32Bytes(Seq());
    const std::string bad_input = R"({"name":"INPUT1","shape":[1],"data":[1]})";
    const std::string in_inputs =
        "{\"inputs\":[" + BinaryInput("INPUT0", 64) + "," + bad_input + "]}";
    // The blob before the bad input is short: that is reported.
    EXPECT_EQ(TakeMessage(DecodeBody("simple", in_inputs, seq.substr(0, 10))),
              "unexpected size for input 'INPUT0', expecting 54 additional "
              "bytes for model 'simple'");
    // Complete: the header error, even with bytes after it (they may be
    // the blobs of the inputs that were not read).
    const std::string missing_datatype =
        "Unable to parse 'datatype': attempt to access non-existing object "
        "member 'datatype'";
    EXPECT_EQ(TakeMessage(DecodeBody("simple", in_inputs, seq)),
              missing_datatype);
    EXPECT_EQ(TakeMessage(DecodeBody("simple", in_inputs, seq + "more")),
              missing_datatype);

    // An error in "outputs": every input was read, so extra bytes count.
    const std::string in_outputs = "{\"inputs\":[" + BinaryInput("INPUT0", 64) +
                                   R"(],"outputs":[{"parameters":{}}]})";
    EXPECT_EQ(TakeMessage(DecodeBody("simple", in_outputs, seq + "more")),
              "unexpected additional input data for model 'simple'");
    EXPECT_EQ(TakeMessage(DecodeBody("simple", in_outputs, seq)),
              "Unable to parse 'name': attempt to access non-existing object "
              "member 'name'");
}

// The streaming steps a transport uses: a blob the body cannot hold gets no
// buffer and is only counted.
TEST_F(KserveCodec, StreamingBlobPastTheBodyIsOnlyCounted) {
    const std::string header = "{\"inputs\":[" + BinaryInput("INPUT0", 8) +
                               "," + BinaryInput("INPUT1", 64) + "]}";
    kserve_decode_limits limits = {};
    limits.max_input = 1 << 20;
    limits.body_limited = true;
    limits.header_bytes = header.size();
    limits.body_bytes = header.size() + 8 + 50;
    kserve_decoded d;
    kserve_decoded_init(&d);
    kserve_decode_header(&d, server_, "simple", 1, header.c_str(),
                         header.size(), &limits);
    ASSERT_EQ(d.error, nullptr);
    ASSERT_EQ(d.n_blobs, 2u);
    EXPECT_STREQ(d.blobs[0].name, "INPUT0");
    EXPECT_NE(d.blobs[0].dst, nullptr);
    EXPECT_EQ(d.blobs[1].dst, nullptr);
    std::string body(58, '\7');
    kserve_decoded_feed(&d, body.data(), 5);
    kserve_decoded_feed(&d, body.data() + 5, body.size() - 5);
    EXPECT_EQ(BufferBytes(d.request->inputs[0].data), std::string(8, '\7'));
    EXPECT_EQ(TakeMessage(kserve_decoded_finish(&d)),
              "unexpected size for input 'INPUT1', expecting 14 additional "
              "bytes for model 'simple'");
    kserve_decoded_destroy(&d);

    // Without a body limit (chunked), every blob gets its buffer.
    limits.body_limited = false;
    kserve_decoded_init(&d);
    kserve_decode_header(&d, server_, "simple", 1, header.c_str(),
                         header.size(), &limits);
    ASSERT_EQ(d.error, nullptr);
    EXPECT_NE(d.blobs[1].dst, nullptr);
    std::string all(72, '\1');
    kserve_decoded_feed(&d, all.data(), all.size());
    ASSERT_OK(kserve_decoded_finish(&d));
    osp_infer_request *req = kserve_decoded_take_request(&d);
    ASSERT_NE(req, nullptr);
    EXPECT_EQ(req->model_version, 1);
    EXPECT_EQ(d.request, nullptr);
    osp_infer_request_free(req);
    kserve_decoded_destroy(&d);
}

// ---- inference and encoding -------------------------------------------------

std::string Parts(const kserve_encoded &e, size_t from) {
    std::string s;
    for (size_t i = from; i < e.n_parts; i++)
        s.append(static_cast<const char *>(e.parts[i].base), e.parts[i].len);
    return s;
}

TEST_F(KserveCodec, InfersAndEncodesBinaryAndJsonOutputs) {
    std::vector<int32_t> a = Seq(), ones(16, 1), sum, diff;
    for (int i = 0; i < 16; i++) {
        sum.push_back(a[i] + 1);
        diff.push_back(a[i] - 1);
    }
    ASSERT_OK(DecodeBody(
        "simple",
        R"({"id":"r1","inputs":[{"name":"INPUT0","datatype":"INT32",)"
        R"("shape":[1,16],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},)" +
            BinaryInput("INPUT1", 64) +
            R"(],"outputs":[{"name":"OUTPUT1"},)"
            R"({"name":"OUTPUT0","parameters":{"binary_data":true}}]})",
        Int32Bytes(ones)));
    osp_infer_response *r = Infer();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->error, nullptr) << osp_error_message(r->error);
    kserve_encoded e = {};
    ASSERT_OK(kserve_encode_response(r, "simple", &outputs_, &e));
    ASSERT_EQ(e.n_parts, 2u);
    EXPECT_TRUE(e.binary);
    const std::string json(static_cast<const char *>(e.parts[0].base),
                           e.parts[0].len);
    EXPECT_EQ(e.header_len, json.size());
    EXPECT_EQ(json,
              R"({"id":"r1","model_name":"simple","model_version":"1",)"
              R"("outputs":[{"name":"OUTPUT1","datatype":"INT32",)"
              R"("shape":[1,16],"data":[-1,0,1,2,3,4,5,6,7,8,9,10,11,)"
              R"(12,13,14]},{"name":"OUTPUT0","datatype":"INT32",)"
              R"("shape":[1,16],"parameters":{"binary_data_size":64}}]})");
    EXPECT_EQ(Parts(e, 1), Int32Bytes(sum));
    // The binary output's buffer moved into the payload.
    EXPECT_EQ(r->outputs[1].data, nullptr);
    osp_infer_response_free(r); // the parts stay valid: the payload owns them
    EXPECT_EQ(Parts(e, 1), Int32Bytes(sum));
    kserve_encoded_destroy(&e);

    // binary_data_output with no outputs named: every output binary, in
    // output order, and no JSON data.
    ASSERT_OK(DecodeBody("simple",
                         R"({"parameters":{"binary_data_output":true},)"
                         R"("inputs":[)" +
                             BinaryInput("INPUT0", 64) + "," +
                             BinaryInput("INPUT1", 64) + "]}",
                         Int32Bytes(a) + Int32Bytes(ones)));
    r = Infer();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->error, nullptr) << osp_error_message(r->error);
    ASSERT_OK(kserve_encode_response(r, "simple", &outputs_, &e));
    ASSERT_EQ(e.n_parts, 3u);
    EXPECT_EQ(
        std::string(static_cast<const char *>(e.parts[0].base), e.parts[0].len),
        R"({"model_name":"simple","model_version":"1","outputs":[)"
        R"({"name":"OUTPUT0","datatype":"INT32","shape":[1,16],)"
        R"("parameters":{"binary_data_size":64}},)"
        R"({"name":"OUTPUT1","datatype":"INT32","shape":[1,16],)"
        R"("parameters":{"binary_data_size":64}}]})");
    EXPECT_EQ(Parts(e, 1), Int32Bytes(sum) + Int32Bytes(diff));
    // A transport takes the payload and releases it itself.
    void *payload = e.payload;
    e.payload = nullptr;
    kserve_encoded_destroy(&e);
    kserve_encoded_payload_free(payload);
    osp_infer_response_free(r);
}

TEST_F(KserveCodec, EncodesFloatBoolAndBytesOutputsAsJson) {
    ASSERT_OK(DecodeBody(
        "echo", R"({"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[3],)"
                R"("data":[1.5,-2,0.1]},{"name":"INPUT1","datatype":"BOOL",)"
                R"("shape":[2],"data":[true,false]},{"name":"INPUT2",)"
                R"("datatype":"BYTES","shape":[2],"data":["ab","c\"d"]}]})"));
    osp_infer_response *r = Infer();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->error, nullptr) << osp_error_message(r->error);
    kserve_encoded e = {};
    ASSERT_OK(kserve_encode_response(r, "echo", &outputs_, &e));
    EXPECT_FALSE(e.binary);
    ASSERT_EQ(e.n_parts, 1u);
    // FP32 widened to double and printed as rapidjson does.
    EXPECT_EQ(
        std::string(static_cast<const char *>(e.parts[0].base), e.parts[0].len),
        R"({"model_name":"echo","model_version":"1","outputs":[)"
        R"({"name":"OUTPUT0","datatype":"FP32","shape":[3],)"
        R"("data":[1.5,-2.0,0.10000000149011612]},)"
        R"({"name":"OUTPUT1","datatype":"BOOL","shape":[2],)"
        R"("data":[true,false]},)"
        R"({"name":"OUTPUT2","datatype":"BYTES","shape":[2],)"
        R"("data":["ab","c\"d"]}]})");
    kserve_encoded_destroy(&e);
    osp_infer_response_free(r);
}

} // namespace
