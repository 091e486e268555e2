// The gRPC inference codec (server/grpc/grpc_convert.c, grpc_wire.c) with
// no gRPC transport: ModelInferRequest messages packed with protobuf-c and
// cut into several segments (as gRPC hands them over) decode to the
// expected osp_infer_request, with Triton's messages for bad ones; a
// response encodes to parts that protobuf-c reads back as the
// ModelInferResponse / ModelStreamInferResponse a client gets.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "grpc_convert.h"
#include "grpc_service.pb-c.h"
#include "grpc_wire.h"
#include "osp_test.h"

namespace {

osp_error *host_alloc(void *, size_t size, osp_buffer **out) {
    *out = osp_buffer_new_host(size);
    return *out ? nullptr : osp_error_new(OSP_ERROR_UNAVAILABLE, "oom");
}

// A ModelInferRequest under construction (protobuf-c structs on the stack
// of the test, strings borrowed).
struct Request {
    Inference__ModelInferRequest msg = INFERENCE__MODEL_INFER_REQUEST__INIT;
    std::vector<Inference__ModelInferRequest__InferInputTensor> inputs;
    std::vector<Inference__ModelInferRequest__InferInputTensor *> input_ptrs;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<Inference__InferTensorContents> contents;
    std::vector<ProtobufCBinaryData> raw;

    void input(const char *name, const char *dt, std::vector<int64_t> shape) {
        Inference__ModelInferRequest__InferInputTensor t;
        inference__model_infer_request__infer_input_tensor__init(&t);
        t.name = const_cast<char *>(name);
        t.datatype = const_cast<char *>(dt);
        shapes.push_back(shape);
        inputs.push_back(t);
    }

    // Packs and returns the bytes.
    std::string pack() {
        input_ptrs.clear();
        for (size_t i = 0; i < inputs.size(); i++) {
            inputs[i].shape = shapes[i].data();
            inputs[i].n_shape = shapes[i].size();
            input_ptrs.push_back(&inputs[i]);
        }
        msg.inputs = input_ptrs.data();
        msg.n_inputs = input_ptrs.size();
        msg.raw_input_contents = raw.data();
        msg.n_raw_input_contents = raw.size();
        std::string out(inference__model_infer_request__get_packed_size(&msg),
                        '\0');
        inference__model_infer_request__pack(
            &msg, reinterpret_cast<uint8_t *>(&out[0]));
        return out;
    }
};

// Decodes `bytes` cut into segments of `piece` bytes.
osp_error *decode(const std::string &bytes, size_t piece, kgrpc_decoded *d) {
    std::vector<kgrpc_segment> segs;
    for (size_t at = 0; at < bytes.size(); at += piece)
        segs.push_back({reinterpret_cast<const uint8_t *>(bytes.data()) + at,
                        std::min(piece, bytes.size() - at)});
    kgrpc_message m = {segs.data(), segs.size(), bytes.size()};
    kgrpc_decode_env env = {host_alloc, nullptr, nullptr};
    return kgrpc_decode_infer_request(&m, &env, d);
}

ProtobufCBinaryData bin(const void *p, size_t n) {
    return {n, static_cast<uint8_t *>(const_cast<void *>(p))};
}

TEST(GrpcConvert, RawInputsCopiedAcrossSegments) {
    int32_t a[16], b[16];
    for (int i = 0; i < 16; i++) {
        a[i] = i;
        b[i] = 100 + i;
    }
    Request r;
    r.msg.model_name = const_cast<char *>("simple");
    r.msg.id = const_cast<char *>("req-1");
    r.input("INPUT0", "INT32", {1, 16});
    r.input("INPUT1", "INT32", {1, 16});
    r.raw = {bin(a, sizeof a), bin(b, sizeof b)};
    std::string bytes = r.pack();
    for (size_t piece : {size_t(1), size_t(7), bytes.size()}) {
        kgrpc_decoded d;
        kgrpc_decoded_init(&d);
        ASSERT_OK(decode(bytes, piece, &d));
        ASSERT_NE(d.request, nullptr);
        EXPECT_STREQ(d.request->model_name, "simple");
        EXPECT_STREQ(d.request->id, "req-1");
        EXPECT_EQ(d.request->model_version, -1);
        ASSERT_EQ(d.request->n_inputs, 2u);
        EXPECT_EQ(d.request->inputs[0].dtype, OSP_TYPE_INT32);
        EXPECT_EQ(d.request->inputs[0].shape.rank, 2);
        ASSERT_EQ(d.request->inputs[1].data->size, sizeof b);
        EXPECT_EQ(memcmp(d.request->inputs[0].data->data, a, sizeof a), 0);
        EXPECT_EQ(memcmp(d.request->inputs[1].data->data, b, sizeof b), 0);
        kgrpc_decoded_destroy(&d);
    }
}

TEST(GrpcConvert, TypedContentsConverted) {
    Request r;
    r.msg.model_name = const_cast<char *>("m");
    r.input("I8", "INT8", {3});
    r.input("B", "BOOL", {2});
    r.input("S", "BYTES", {2});
    int32_t ints[] = {-1, 2, 127};
    protobuf_c_boolean bools[] = {1, 0};
    ProtobufCBinaryData strs[] = {bin("hey", 3), bin("", 0)};
    r.contents.resize(3);
    for (auto &c : r.contents)
        inference__infer_tensor_contents__init(&c);
    r.contents[0].int_contents = ints;
    r.contents[0].n_int_contents = 3;
    r.contents[1].bool_contents = bools;
    r.contents[1].n_bool_contents = 2;
    r.contents[2].bytes_contents = strs;
    r.contents[2].n_bytes_contents = 2;
    for (int i = 0; i < 3; i++)
        r.inputs[i].contents = &r.contents[i];
    kgrpc_decoded d;
    kgrpc_decoded_init(&d);
    ASSERT_OK(decode(r.pack(), 5, &d));
    const osp_infer_input *in = d.request->inputs;
    ASSERT_EQ(in[0].data->size, 3u);
    EXPECT_EQ(memcmp(in[0].data->data, "\xff\x02\x7f", 3), 0);
    ASSERT_EQ(in[1].data->size, 2u);
    EXPECT_EQ(memcmp(in[1].data->data, "\x01\x00", 2), 0);
    ASSERT_EQ(in[2].data->size, 4u + 3 + 4);
    EXPECT_EQ(memcmp(in[2].data->data, "\x03\0\0\0hey\0\0\0\0", 11), 0);
    kgrpc_decoded_destroy(&d);
}

TEST(GrpcConvert, TritonMessages) {
    float f[2] = {1, 2};
    // contents and raw mixed
    {
        Request r;
        r.msg.model_name = const_cast<char *>("m");
        r.input("A", "FP32", {2});
        Inference__InferTensorContents c =
            INFERENCE__INFER_TENSOR_CONTENTS__INIT;
        c.fp32_contents = f;
        c.n_fp32_contents = 2;
        r.inputs[0].contents = &c;
        r.raw = {bin(f, sizeof f)};
        kgrpc_decoded d;
        kgrpc_decoded_init(&d);
        EXPECT_EQ(TakeMessage(decode(r.pack(), 3, &d)),
                  "contents field must not be specified when using "
                  "raw_input_contents for 'A' for model 'm'");
        EXPECT_EQ(d.request, nullptr);
        EXPECT_STREQ(d.model_name, "m");
        kgrpc_decoded_destroy(&d);
    }
    // a typed field of the wrong datatype
    {
        Request r;
        r.msg.model_name = const_cast<char *>("m");
        r.input("A", "INT32", {2});
        Inference__InferTensorContents c =
            INFERENCE__INFER_TENSOR_CONTENTS__INIT;
        c.fp32_contents = f;
        c.n_fp32_contents = 2;
        r.inputs[0].contents = &c;
        kgrpc_decoded d;
        kgrpc_decoded_init(&d);
        EXPECT_EQ(TakeMessage(decode(r.pack(), 64, &d)),
                  "unexpected explicit tensor data for input tensor 'A' for "
                  "model 'm' of type 'FP32', expected datatype 'INT32'");
        kgrpc_decoded_destroy(&d);
    }
    // a missing raw entry
    {
        Request r;
        r.msg.model_name = const_cast<char *>("m");
        r.input("A", "FP32", {2});
        r.input("B", "FP32", {2});
        r.raw = {bin(f, sizeof f)};
        kgrpc_decoded d;
        kgrpc_decoded_init(&d);
        EXPECT_EQ(TakeMessage(decode(r.pack(), 64, &d)),
                  "unable to find data for input tensor 'B' for model 'm' in "
                  "request.");
        kgrpc_decoded_destroy(&d);
    }
    // not a protobuf message
    for (std::string junk : {std::string("\xff\xff"),
                             std::string("\x3a\x05"
                                         "ab"),
                             std::string("\x0b")}) {
        kgrpc_decoded d;
        kgrpc_decoded_init(&d);
        osp_error *err = decode(junk, 1, &d);
        ASSERT_NE(err, nullptr);
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INTERNAL);
        EXPECT_EQ(TakeMessage(err), "Unable to parse request");
        kgrpc_decoded_destroy(&d);
    }
}

TEST(GrpcConvert, ParameterTypes) {
    Request r;
    r.msg.model_name = const_cast<char *>("m");
    Inference__InferParameter v = INFERENCE__INFER_PARAMETER__INIT;
    Inference__ModelInferRequest__ParametersEntry e =
        INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
    Inference__ModelInferRequest__ParametersEntry *entries[] = {&e};
    e.value = &v;
    r.msg.parameters = entries;
    r.msg.n_parameters = 1;

    e.key = const_cast<char *>("priority");
    v.parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    v.uint64_param = 3;
    kgrpc_decoded d;
    kgrpc_decoded_init(&d);
    ASSERT_OK(decode(r.pack(), 4, &d));
    EXPECT_EQ(d.request->priority, 3u);
    kgrpc_decoded_destroy(&d);

    e.key = const_cast<char *>("custom");
    v.parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
    v.double_param = 0.25;
    kgrpc_decoded_init(&d);
    ASSERT_OK(decode(r.pack(), 4, &d));
    ASSERT_EQ(d.request->n_parameters, 1u);
    EXPECT_EQ(d.request->parameters[0].type, OSP_PARAM_DOUBLE);
    EXPECT_EQ(d.request->parameters[0].value.d, 0.25);
    kgrpc_decoded_destroy(&d);

    v.parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    kgrpc_decoded_init(&d);
    EXPECT_EQ(TakeMessage(decode(r.pack(), 4, &d)),
              "invalid value type for 'custom' parameter, expected "
              "int64_param, bool_param, or string_param.");
    kgrpc_decoded_destroy(&d);

    e.key = const_cast<char *>("timeout");
    kgrpc_decoded_init(&d);
    EXPECT_EQ(TakeMessage(decode(r.pack(), 4, &d)),
              "invalid value type for 'timeout' parameter, expected "
              "int64_param.");
    kgrpc_decoded_destroy(&d);
}

// Joins an encoded response's parts.
std::string join(const kgrpc_encoded &e) {
    std::string out;
    for (size_t i = 0; i < e.n_parts; i++)
        out.append(static_cast<const char *>(e.parts[i].base), e.parts[i].len);
    return out;
}

osp_infer_response *make_response() {
    auto *r = static_cast<osp_infer_response *>(
        calloc(1, sizeof(osp_infer_response)));
    r->model_name = strdup("simple");
    r->model_version = 1;
    r->id = strdup("x");
    r->n_outputs = 2;
    r->outputs =
        static_cast<osp_infer_output *>(calloc(2, sizeof(osp_infer_output)));
    const char *names[] = {"OUT_A", "OUT_B"};
    for (int i = 0; i < 2; i++) {
        osp_infer_output *o = &r->outputs[i];
        o->name = strdup(names[i]);
        o->dtype = OSP_TYPE_INT32;
        o->shape.rank = 1;
        o->shape.dims[0] = i == 0 ? 3 : 0;
        o->data = osp_buffer_new_host(i == 0 ? 12 : 0);
        o->byte_size = i == 0 ? 12 : 0;
        if (i == 0)
            memcpy(o->data->data, "\x01\0\0\0\x02\0\0\0\x03\0\0\0", 12);
    }
    return r;
}

TEST(GrpcConvert, ResponseReadsBackAsProtobuf) {
    for (bool stream : {false, true}) {
        osp_infer_response *r = make_response();
        kgrpc_encoded e;
        ASSERT_OK(kgrpc_encode_infer_response(r, nullptr, stream, true, &e));
        std::string bytes = join(e);
        EXPECT_EQ(bytes.size(), e.total);
        Inference__ModelInferResponse *resp = nullptr;
        Inference__ModelStreamInferResponse *s = nullptr;
        if (stream) {
            s = inference__model_stream_infer_response__unpack(
                nullptr, bytes.size(),
                reinterpret_cast<const uint8_t *>(bytes.data()));
            ASSERT_NE(s, nullptr);
            EXPECT_STREQ(s->error_message, "");
            resp = s->infer_response;
        } else {
            resp = inference__model_infer_response__unpack(
                nullptr, bytes.size(),
                reinterpret_cast<const uint8_t *>(bytes.data()));
        }
        ASSERT_NE(resp, nullptr);
        EXPECT_STREQ(resp->model_name, "simple");
        EXPECT_STREQ(resp->model_version, "1");
        EXPECT_STREQ(resp->id, "x");
        ASSERT_EQ(resp->n_outputs, 2u);
        EXPECT_STREQ(resp->outputs[0]->name, "OUT_A");
        EXPECT_STREQ(resp->outputs[0]->datatype, "INT32");
        // One raw entry per output, even an empty one.
        ASSERT_EQ(resp->n_raw_output_contents, 2u);
        EXPECT_EQ(resp->raw_output_contents[0].len, 12u);
        EXPECT_EQ(resp->raw_output_contents[1].len, 0u);
        EXPECT_EQ(resp->n_parameters, stream ? 1u : 0u);
        if (stream)
            inference__model_stream_infer_response__free_unpacked(s, nullptr);
        else
            inference__model_infer_response__free_unpacked(resp, nullptr);
        kgrpc_encoded_destroy(&e);
        osp_infer_response_free(r);
    }
}

TEST(GrpcConvert, StreamError) {
    size_t len;
    uint8_t *packed =
        kgrpc_encode_stream_error("boom", "id-9", nullptr, nullptr, -1, &len);
    ASSERT_NE(packed, nullptr);
    Inference__ModelStreamInferResponse *s =
        inference__model_stream_infer_response__unpack(nullptr, len, packed);
    ASSERT_NE(s, nullptr);
    EXPECT_STREQ(s->error_message, "boom");
    EXPECT_STREQ(s->infer_response->id, "id-9");
    EXPECT_EQ(s->infer_response->n_parameters, 0u);
    inference__model_stream_infer_response__free_unpacked(s, nullptr);
    free(packed);
}

// A decoupled model's responses carry triton_final_response as it is; its
// final flag alone becomes an empty response that says true.
TEST(GrpcConvert, StreamFinalFlag) {
    osp_infer_response *r = make_response();
    kgrpc_encoded e;
    ASSERT_OK(kgrpc_encode_infer_response(r, nullptr, true, false, &e));
    std::string bytes = join(e);
    Inference__ModelStreamInferResponse *s =
        inference__model_stream_infer_response__unpack(
            nullptr, bytes.size(),
            reinterpret_cast<const uint8_t *>(bytes.data()));
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->infer_response->n_parameters, 1u);
    EXPECT_STREQ(s->infer_response->parameters[0]->key,
                 "triton_final_response");
    EXPECT_FALSE(s->infer_response->parameters[0]->value->bool_param);
    inference__model_stream_infer_response__free_unpacked(s, nullptr);
    kgrpc_encoded_destroy(&e);
    osp_infer_response_free(r);

    size_t len;
    uint8_t *packed =
        kgrpc_encode_stream_error(nullptr, "id-1", "m", "", 1, &len);
    ASSERT_NE(packed, nullptr);
    s = inference__model_stream_infer_response__unpack(nullptr, len, packed);
    ASSERT_NE(s, nullptr);
    EXPECT_STREQ(s->error_message, "");
    EXPECT_STREQ(s->infer_response->id, "id-1");
    EXPECT_EQ(s->infer_response->n_outputs, 0u);
    ASSERT_EQ(s->infer_response->n_parameters, 1u);
    EXPECT_TRUE(s->infer_response->parameters[0]->value->bool_param);
    inference__model_stream_infer_response__free_unpacked(s, nullptr);
    free(packed);
}

TEST(GrpcWire, VarintAndPrefix) {
    uint8_t buf[16];
    EXPECT_EQ(kgrpc_varint_size(0), 1u);
    EXPECT_EQ(kgrpc_varint_size(300), 2u);
    size_t n = kgrpc_put_length_prefix(buf, 6, 300);
    EXPECT_EQ(n, 3u);
    EXPECT_EQ(buf[0], 0x32);
    EXPECT_EQ(buf[1], 0xac);
    EXPECT_EQ(buf[2], 0x02);
}

} // namespace
