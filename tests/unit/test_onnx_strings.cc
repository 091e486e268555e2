// STRING tensors in the ONNX runtime: the BYTES wire form <-> onnx_string
// references (onnx_strings.c), string pools, and Cast's number text both
// ways (onnx_ops_strings.c). The expected texts and values are what
// onnxruntime 1.32's Cast gives for the same inputs (its CPU kernel;
// tests/integration/test_onnx_strings.py compares with onnxruntime live).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "onnx_ops_strings.h"
#include "onnx_strings.h"
#include "osp_test.h"

namespace {

std::string Wire(const std::vector<std::string> &elems) {
    std::string out;
    for (const std::string &e : elems) {
        uint32_t len = (uint32_t)e.size();
        for (int i = 0; i < 4; i++)
            out += (char)(len >> (8 * i));
        out += e;
    }
    return out;
}

std::string Text(const onnx_string &s) { return std::string(s.data, s.len); }

TEST(OnnxStrings, WireRoundTrip) {
    std::vector<std::string> elems = {"", "a", std::string("x\0y", 3),
                                      "h\xc3\xa9llo", std::string(300, 'z')};
    std::string wire = Wire(elems);
    std::vector<onnx_string> refs(elems.size());
    ASSERT_OK(onnx_strings_from_wire(wire.data(), wire.size(),
                                     (int64_t)elems.size(), refs.data(), "t"));
    for (size_t i = 0; i < elems.size(); i++) {
        EXPECT_EQ(elems[i], Text(refs[i]));
        EXPECT_GE(refs[i].data, wire.data()); // borrowed, not copied
    }
    size_t bytes = 0;
    ASSERT_OK(onnx_strings_wire_size(refs.data(), (int64_t)refs.size(), &bytes));
    ASSERT_EQ(wire.size(), bytes);
    std::string back(bytes, '\0');
    onnx_strings_to_wire(refs.data(), (int64_t)refs.size(), &back[0]);
    EXPECT_EQ(wire, back);
}

TEST(OnnxStrings, EmptyTensor) {
    ASSERT_OK(onnx_strings_from_wire("", 0, 0, nullptr, "t"));
    size_t bytes = 7;
    ASSERT_OK(onnx_strings_wire_size(nullptr, 0, &bytes));
    EXPECT_EQ(0u, bytes);
}

TEST(OnnxStrings, MalformedWireIsRefused) {
    onnx_string refs[2];
    std::string past_end = Wire({"ab"}).substr(0, 5); // says 2, has 1
    osp_error *err =
        onnx_strings_from_wire(past_end.data(), past_end.size(), 1, refs,
                               "input 'x'");
    ASSERT_NE(nullptr, err);
    EXPECT_EQ(OSP_ERROR_INVALID_ARG, osp_error_get_code(err));
    EXPECT_NE(nullptr, strstr(osp_error_message(err), "input 'x'"))
        << osp_error_message(err);
    EXPECT_NE(nullptr, strstr(osp_error_message(err), "2 bytes long"))
        << osp_error_message(err);
    osp_error_free(err);

    std::string short_len = Wire({"a"}) + "\x01\x00";
    err = onnx_strings_from_wire(short_len.data(), short_len.size(), 2, refs,
                                 "t");
    ASSERT_NE(nullptr, err);
    EXPECT_NE(nullptr, strstr(osp_error_message(err), "no 4-byte length"));
    osp_error_free(err);

    std::string extra = Wire({"a", "b"});
    err = onnx_strings_from_wire(extra.data(), extra.size(), 1, refs, "t");
    ASSERT_NE(nullptr, err);
    EXPECT_NE(nullptr, strstr(osp_error_message(err), "left after"));
    osp_error_free(err);
}

TEST(OnnxStrings, PoolKeepsEveryStringUntilReset) {
    onnx_string_pool pool;
    onnx_string_pool_init(&pool);
    std::vector<char *> at;
    for (int i = 0; i < 5000; i++) { // several chunks
        char *p = onnx_string_pool_alloc(&pool, 40);
        ASSERT_NE(nullptr, p);
        memset(p, 'a' + i % 26, 40);
        at.push_back(p);
    }
    char *big = onnx_string_pool_alloc(&pool, 1 << 20); // past a chunk
    ASSERT_NE(nullptr, big);
    memset(big, 1, 1 << 20);
    for (int i = 0; i < 5000; i++)
        EXPECT_EQ('a' + i % 26, at[i][39]) << i;
    onnx_string_pool_reset(&pool);
    EXPECT_NE(nullptr, onnx_string_pool_alloc(&pool, 10));
    onnx_string_pool_destroy(&pool);
    onnx_string_pool_destroy(&pool); // idempotent
}

template <typename T>
std::string Format(osp_datatype dt, T v) {
    char buf[ONNX_NUMBER_TEXT_MAX];
    size_t n = onnx_string_format_number(dt, &v, 0, buf);
    return std::string(buf, n);
}

TEST(OnnxStringsCast, NumbersToStringAsOnnxruntime) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ("1.5", Format<float>(OSP_TYPE_FP32, 1.5f));
    EXPECT_EQ("0.1", Format<float>(OSP_TYPE_FP32, 0.1f));
    EXPECT_EQ("1e+20", Format<float>(OSP_TYPE_FP32, 1e20f));
    EXPECT_EQ("-0", Format<float>(OSP_TYPE_FP32, -0.0f));
    EXPECT_EQ("NaN", Format<float>(OSP_TYPE_FP32, std::nanf("")));
    EXPECT_EQ("INF", Format<float>(OSP_TYPE_FP32, inf));
    EXPECT_EQ("-INF", Format<float>(OSP_TYPE_FP32, -inf));
    EXPECT_EQ("0.33333334", Format<float>(OSP_TYPE_FP32, 1.0f / 3));
    EXPECT_EQ("1e-07", Format<float>(OSP_TYPE_FP32, 1e-7f));
    EXPECT_EQ("1.2345679e+08", Format<float>(OSP_TYPE_FP32, 123456789.0f));
    EXPECT_EQ("0.60484552", Format<float>(OSP_TYPE_FP32, 0.6048455238342285f));
    EXPECT_EQ("0.33333333", Format<double>(OSP_TYPE_FP64, 1.0 / 3));
    EXPECT_EQ("-INF", Format<double>(OSP_TYPE_FP64, -HUGE_VAL));
    EXPECT_EQ("0.099975586", Format<uint16_t>(OSP_TYPE_FP16, 0x2e66)); // 0.1
    EXPECT_EQ("2147483647", Format<int32_t>(OSP_TYPE_INT32, 2147483647));
    EXPECT_EQ("-5", Format<int32_t>(OSP_TYPE_INT32, -5));
    EXPECT_EQ("-3", Format<int8_t>(OSP_TYPE_INT8, -3));
    EXPECT_EQ("255", Format<uint8_t>(OSP_TYPE_UINT8, 255));
    EXPECT_EQ("-9223372036854775808",
              Format<int64_t>(OSP_TYPE_INT64, INT64_MIN));
    EXPECT_EQ("18446744073709551615",
              Format<uint64_t>(OSP_TYPE_UINT64, UINT64_MAX));
    EXPECT_EQ("1", Format<uint8_t>(OSP_TYPE_BOOL, 1));
    EXPECT_EQ("0", Format<uint8_t>(OSP_TYPE_BOOL, 0));
}

template <typename T>
T Parse(osp_datatype dt, const std::string &text) {
    T v{};
    osp_error *err =
        onnx_string_parse_number(dt, text.data(), text.size(), &v, 0);
    EXPECT_EQ(nullptr, err) << text << ": "
                            << (err ? osp_error_message(err) : "");
    osp_error_free(err);
    return v;
}

std::string ParseError(osp_datatype dt, const std::string &text) {
    uint64_t v = 0;
    osp_error *err =
        onnx_string_parse_number(dt, text.data(), text.size(), &v, 0);
    if (!err)
        return "";
    EXPECT_EQ(OSP_ERROR_INVALID_ARG, osp_error_get_code(err));
    std::string msg = osp_error_message(err);
    osp_error_free(err);
    return msg;
}

TEST(OnnxStringsCast, StringsToNumbersAsOnnxruntime) {
    // integers: strtoll's prefix, then C++'s truncation to the width
    EXPECT_EQ(12, Parse<int32_t>(OSP_TYPE_INT32, "12"));
    EXPECT_EQ(12, Parse<int32_t>(OSP_TYPE_INT32, " 12"));
    EXPECT_EQ(12, Parse<int32_t>(OSP_TYPE_INT32, "12abc"));
    EXPECT_EQ(7, Parse<int32_t>(OSP_TYPE_INT32, "+7"));
    EXPECT_EQ(1, Parse<int32_t>(OSP_TYPE_INT32, "1e3"));
    EXPECT_EQ(3, Parse<int32_t>(OSP_TYPE_INT32, "3.7"));
    EXPECT_EQ(0, Parse<int32_t>(OSP_TYPE_INT32, "0x10"));
    EXPECT_EQ(1215752191, Parse<int32_t>(OSP_TYPE_INT32, "99999999999"));
    EXPECT_EQ(INT64_MAX,
              Parse<int64_t>(OSP_TYPE_INT64, "9223372036854775807"));
    EXPECT_EQ(44, Parse<uint8_t>(OSP_TYPE_UINT8, "300"));
    EXPECT_EQ(255, Parse<uint8_t>(OSP_TYPE_UINT8, "-1"));
    EXPECT_EQ(1, Parse<uint8_t>(OSP_TYPE_BOOL, "2"));
    EXPECT_EQ(0, Parse<uint8_t>(OSP_TYPE_BOOL, "0"));
    EXPECT_EQ(12, Parse<int32_t>(OSP_TYPE_INT32, std::string("12\0" "9", 4)));
    // floating: strtod, then rounded to the target
    EXPECT_EQ(1.5f, Parse<float>(OSP_TYPE_FP32, "1.5x"));
    EXPECT_EQ(8.0f, Parse<float>(OSP_TYPE_FP32, "0x1p3"));
    EXPECT_TRUE(std::isnan(Parse<float>(OSP_TYPE_FP32, "NaN")));
    EXPECT_EQ(-INFINITY, Parse<float>(OSP_TYPE_FP32, "-Infinity"));
    EXPECT_EQ(INFINITY, Parse<float>(OSP_TYPE_FP32, "1e50"));
    EXPECT_EQ(0.1, Parse<double>(OSP_TYPE_FP64, "0.1"));
    EXPECT_EQ(0x7c00, Parse<uint16_t>(OSP_TYPE_FP16, "1e10")); // +inf
    // onnxruntime's errors (std::stoll / stod throw)
    EXPECT_NE("", ParseError(OSP_TYPE_INT32, "abc"));
    EXPECT_NE("", ParseError(OSP_TYPE_INT32, ""));
    EXPECT_NE("", ParseError(OSP_TYPE_BOOL, "true"));
    EXPECT_NE("", ParseError(OSP_TYPE_FP32, "abc"));
    EXPECT_NE(std::string::npos,
              ParseError(OSP_TYPE_INT64, "9223372036854775808")
                  .find("out of range"));
    EXPECT_NE(std::string::npos,
              ParseError(OSP_TYPE_FP64, "1e400").find("out of range"));
    std::string msg = ParseError(OSP_TYPE_FP32, std::string("a\x01") +
                                                    std::string(100, 'b'));
    EXPECT_NE(std::string::npos, msg.find("'a?bbb")) << msg;
    EXPECT_NE(std::string::npos, msg.find("...' is not a number")) << msg;
}

TEST(OnnxStringsCast, LongTextParses) {
    std::string text = std::string(500, ' ') + "42";
    EXPECT_EQ(42, Parse<int64_t>(OSP_TYPE_INT64, text));
}

TEST(OnnxStringsCast, Castable) {
    EXPECT_TRUE(onnx_strings_castable(OSP_TYPE_BYTES, OSP_TYPE_FP32));
    EXPECT_TRUE(onnx_strings_castable(OSP_TYPE_INT64, OSP_TYPE_BYTES));
    EXPECT_TRUE(onnx_strings_castable(OSP_TYPE_BYTES, OSP_TYPE_BYTES));
    EXPECT_FALSE(onnx_strings_castable(OSP_TYPE_BYTES, OSP_TYPE_INVALID));
}

} // namespace
