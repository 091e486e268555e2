// The TF Serving REST codec (server/tfserving/tfs_codec.h) and its JSON
// DOM: the [J]/[V] vectors of the protocol reference §7, the exact bytes of
// §4/§5, rapidjson's parse errors and offsets, and deep nesting.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "json_doc.h"
#include "osp_test.h"
#include "tfs_codec.h"

extern "C" {
#include "json_util.h"
}

namespace {

constexpr size_t kMaxBytes = 1 << 26;

// Parses a body; "" on success (and *out set) or the error message.
std::string Parse(const std::string &text, tfs_body **out,
                  std::string *sig = nullptr) {
    const char *name = nullptr;
    osp_error *err = tfs_body_parse(text.data(), text.size(), out, &name);
    if (!err && sig)
        *sig = name;
    return TakeMessage(err);
}

std::string ParseError(const std::string &text) {
    tfs_body *body = nullptr;
    std::string msg = Parse(text, &body);
    tfs_body_free(body);
    return msg;
}

struct Predicted {
    std::string error;
    osp_error_code code = OSP_ERROR_UNKNOWN;
    osp_error_reason reason = OSP_REASON_NONE;
    tfs_format format = TFS_FORMAT_ROW;
    std::vector<tfs_tensor> tensors;
};

Predicted Predict(const std::string &text,
                  const std::vector<tfs_input_spec> &specs,
                  size_t max_bytes = kMaxBytes) {
    Predicted p;
    tfs_body *body = nullptr;
    p.error = Parse(text, &body);
    if (!p.error.empty())
        return p;
    tfs_tensor *t = nullptr;
    osp_error *err = tfs_predict_inputs(body, specs.data(), specs.size(),
                                        max_bytes, &p.format, &t);
    if (err) {
        p.code = osp_error_get_code(err);
        p.reason = osp_error_get_reason(err);
        p.error = TakeMessage(err);
    } else {
        p.tensors.assign(t, t + specs.size());
        // the buffers stay alive: copied structs, freed below by the caller
        for (size_t i = 0; i < specs.size(); i++)
            t[i].data = nullptr;
        tfs_tensors_free(t, specs.size());
    }
    tfs_body_free(body);
    return p;
}

void FreePredicted(Predicted *p) {
    for (auto &t : p->tensors)
        osp_buffer_free(t.data);
    p->tensors.clear();
}

std::vector<int64_t> Shape(const tfs_tensor &t) {
    return std::vector<int64_t>(t.shape.dims, t.shape.dims + t.shape.rank);
}

template <typename T> std::vector<T> Values(const tfs_tensor &t) {
    const T *p = static_cast<const T *>(t.data->data);
    return std::vector<T>(p, p + t.data->size / sizeof(T));
}

std::vector<std::string> Strings(const tfs_tensor &t) {
    std::vector<std::string> out;
    const unsigned char *p = static_cast<const unsigned char *>(t.data->data);
    size_t off = 0;
    while (off + 4 <= t.data->size) {
        uint32_t n = p[off] | p[off + 1] << 8 | p[off + 2] << 16 |
                     (uint32_t)p[off + 3] << 24;
        out.emplace_back(reinterpret_cast<const char *>(p + off + 4), n);
        off += 4 + n;
    }
    return out;
}

// The predict error for one spec list (must fail).
std::string PredictError(const std::string &text,
                         const std::vector<tfs_input_spec> &specs) {
    Predicted p = Predict(text, specs);
    EXPECT_TRUE(p.tensors.empty()) << text;
    FreePredicted(&p);
    return p.error;
}

const std::vector<tfs_input_spec> kInt32 = {{"default", OSP_TYPE_INT32}};
const std::vector<tfs_input_spec> kFloat = {{"default", OSP_TYPE_FP32}};
const std::vector<tfs_input_spec> kString = {{"default", OSP_TYPE_BYTES}};
const std::vector<tfs_input_spec> kX = {{"x", OSP_TYPE_FP32}};
const std::vector<tfs_input_spec> kIntStr = {{"int_tensor", OSP_TYPE_INT32},
                                             {"str_tensor", OSP_TYPE_BYTES}};

std::string Jbuf(bytebuf *b) {
    std::string s(b->data ? b->data : "", b->len);
    bytebuf_free(b);
    return s;
}

tfs_output Out(const char *name, osp_datatype dt, std::vector<int64_t> shape,
               const void *data, size_t bytes) {
    tfs_output o;
    o.name = name;
    o.dtype = dt;
    o.shape.rank = (int)shape.size();
    for (size_t i = 0; i < shape.size(); i++)
        o.shape.dims[i] = shape[i];
    o.data = data;
    o.byte_size = bytes;
    return o;
}

std::string BytesLayout(const std::vector<std::string> &v) {
    std::string s;
    for (const auto &e : v) {
        uint32_t n = (uint32_t)e.size();
        s.append(reinterpret_cast<const char *>(&n), 4);
        s += e;
    }
    return s;
}

std::string Write(tfs_format f, const std::vector<tfs_output> &outs,
                  std::string *error = nullptr) {
    bytebuf b;
    bytebuf_init(&b);
    osp_error *err = tfs_write_predict(f, outs.data(), outs.size(), &b);
    std::string msg = TakeMessage(err);
    if (error)
        *error = msg;
    else
        EXPECT_EQ(msg, "");
    return Jbuf(&b);
}

std::string Decimal(float v) {
    bytebuf b;
    bytebuf_init(&b);
    EXPECT_EQ(TakeMessage(tfs_write_regress(&v, 1, &b)), "");
    std::string s = Jbuf(&b);
    // {\n    "results": [X]\n}
    size_t open = s.find('['), close = s.rfind(']');
    return s.substr(open + 1, close - open - 1);
}

std::string DecimalDouble(double v) {
    return Write(TFS_FORMAT_COLUMNAR,
                 {Out("y", OSP_TYPE_FP64, {}, &v, sizeof v)})
        .substr(strlen("{\n    \"outputs\": "))
        .substr(0, std::string::npos);
}

// ---- parsing (§3.1, §6) ----

TEST(TfsBody, EmptyAndParseErrors) {
    EXPECT_EQ(ParseError(""), "JSON Parse error: The document is empty");
    EXPECT_EQ(ParseError("   "),
              "JSON Parse error: The document is empty. at offset: 3");
    EXPECT_EQ(ParseError("instances = [1, 2]"),
              "JSON Parse error: Invalid value. at offset: 0");
    EXPECT_EQ(ParseError("{\"a\":1,}"),
              "JSON Parse error: Missing a name for object member. at "
              "offset: 7");
    EXPECT_EQ(ParseError("[01]"), "JSON Parse error: Missing a comma or ']' "
                                  "after an array element. at offset: 2");
    EXPECT_EQ(ParseError("1e400"), "JSON Parse error: Number too big to be "
                                   "stored in double. at offset: 0");
    EXPECT_EQ(ParseError("[1,]"),
              "JSON Parse error: Invalid value. at offset: 3");
    EXPECT_EQ(ParseError("{\"v\":[nan]}"),
              "JSON Parse error: Invalid value. at offset: 7"); // [V] 102
    EXPECT_EQ(ParseError("{\"v\":[Nan]}"),
              "JSON Parse error: Invalid value. at offset: 8");
    EXPECT_EQ(ParseError("{\"v\":[.5]}"),
              "JSON Parse error: Invalid value. at offset: 6");
    EXPECT_EQ(ParseError("{\"v\":[+1]}"),
              "JSON Parse error: Invalid value. at offset: 6");
    EXPECT_EQ(ParseError("{\"v\":[inf]}"),
              "JSON Parse error: Invalid value. at offset: 6");
    EXPECT_EQ(ParseError("{\"v\":[Infinit]}"),
              "JSON Parse error: Invalid value. at offset: 13");
    EXPECT_EQ(ParseError("{\"v\":\"\\ud800x\"}"),
              "JSON Parse error: The surrogate pair in string is invalid. at "
              "offset: 6");
    EXPECT_EQ(ParseError("{\"v\":\"\\ud800\\u0041\"}"),
              "JSON Parse error: The surrogate pair in string is invalid. at "
              "offset: 6");
    EXPECT_EQ(ParseError("{\"v\":\"\\uZZZZ\"}"),
              "JSON Parse error: Incorrect hex digit after \\u escape in "
              "string. at offset: 6");
    EXPECT_EQ(ParseError("{\"v\":\"\\q\"}"),
              "JSON Parse error: Invalid escape character in string. at "
              "offset: 6");
    EXPECT_EQ(ParseError("{\"v\":\"a\tb\"}"),
              "JSON Parse error: Invalid escape character in string. at "
              "offset: 7");
    EXPECT_EQ(ParseError("{\"v\":\"ab"),
              "JSON Parse error: Missing a closing quotation mark in string. "
              "at offset: 8");
    EXPECT_EQ(ParseError("{\"a\" 1}"), "JSON Parse error: Missing a colon "
                                       "after a name of object member. at "
                                       "offset: 5");
    EXPECT_EQ(ParseError("{\"a\":1 2}"), "JSON Parse error: Missing a comma "
                                         "or '}' after an object member. at "
                                         "offset: 7");
    EXPECT_EQ(ParseError("{\"a\":1."),
              "JSON Parse error: Miss fraction part in number. at offset: 7");
    EXPECT_EQ(ParseError("{\"a\":1e}"),
              "JSON Parse error: Miss exponent in number. at offset: 7");
    EXPECT_EQ(ParseError("{\"a\":[1"),
              "JSON Parse error: Missing a comma or ']' after an array "
              "element. at offset: 7");
    EXPECT_EQ(ParseError("]"),
              "JSON Parse error: The document is empty. at offset: 0");
    EXPECT_EQ(ParseError("{\"a\":nul}"),
              "JSON Parse error: Invalid value. at offset: 8");
}

TEST(TfsBody, TopLevelAndSignature) {
    EXPECT_EQ(ParseError("[1,2]"), "JSON Value: [1, 2] Is not object"); // 90
    EXPECT_EQ(ParseError("{\"signature_name\": 100}"),
              "JSON Value: {\n    \"signature_name\": 100\n} not formatted "
              "correctly. 'signature_name' key must be a string value.");
    EXPECT_EQ(ParseError("{\"signature_name\": [\"hello\"], \"examples\": []}"),
              "JSON Value: {\n    \"signature_name\": [\"hello\"],\n    "
              "\"examples\": []\n} not formatted correctly. 'signature_name' "
              "key must be a string value."); // 75
    tfs_body *body = nullptr;
    std::string sig;
    EXPECT_EQ(Parse("{\"instances\": [1]}", &body, &sig), "");
    EXPECT_EQ(sig, "serving_default");
    tfs_body_free(body);
    EXPECT_EQ(Parse("{\"signature_name\": \"\"}", &body, &sig), "");
    EXPECT_EQ(sig, "serving_default");
    tfs_body_free(body);
    EXPECT_EQ(Parse("{\"signature_name\": \"s\", \"signature_name\": 5}", &body,
                    &sig),
              "");
    EXPECT_EQ(sig, "s"); // the first duplicate wins
    tfs_body_free(body);
}

TEST(TfsBody, TrailingDataIgnored) { // [V] 84
    Predicted p = Predict("{\"instances\": [1]} trailing-garbage", kX);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({1}));
    FreePredicted(&p);
    EXPECT_EQ(ParseError("\xEF\xBB\xBF{}"), "");
}

TEST(TfsBody, NanAndInfinity) { // [V] 102
    Predicted p = Predict(
        "{\"inputs\": [NaN, -NaN, Inf, -Inf, Infinity, -Infinity]}", kX);
    ASSERT_EQ(p.error, "");
    auto v = Values<float>(p.tensors[0]);
    ASSERT_EQ(v.size(), 6u);
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]));
    EXPECT_EQ(v[2], INFINITY);
    EXPECT_EQ(v[3], -INFINITY);
    EXPECT_EQ(v[4], INFINITY);
    EXPECT_EQ(v[5], -INFINITY);
    FreePredicted(&p);
}

TEST(TfsBody, DeepNesting) {
    std::string deep(500000, '[');
    auto t0 = std::chrono::steady_clock::now();
    // As the value of an ignored key: TF's test (unterminated -> error).
    EXPECT_EQ(ParseError("{\"ignored\": " + deep + "}"),
              "JSON Parse error: Invalid value. at offset: 500012");
    // Terminated, under an ignored key: parses.
    std::string closed = deep + std::string(500000, ']');
    Predicted p =
        Predict("{\"ignored\": " + closed + ", \"instances\": [1.5]}", kX);
    EXPECT_EQ(p.error, "");
    FreePredicted(&p);
    // As the instances value: a clean error, no crash.
    p = Predict("{\"instances\": " + closed + "}", kX);
    EXPECT_NE(p.error, "");
    FreePredicted(&p);
    p = Predict("{\"inputs\": " + closed + "}", kX);
    EXPECT_NE(p.error, "");
    FreePredicted(&p);
    // As the top level: not an object, with a short debug string.
    std::string msg = ParseError(closed);
    EXPECT_EQ(msg.compare(0, 13, "JSON Value: ["), 0);
    EXPECT_LT(msg.size(), 400u);
    auto secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_LT(secs, 5.0);
}

TEST(TfsBody, NumberClasses) {
    tfs_body *body = nullptr;
    tj_doc *doc = nullptr;
    std::string text = "[1, -1, 3000000000, -3000000000, 9223372036854775808, "
                       "18446744073709551616, 1.0, 1e2, -0, -0.0]";
    ASSERT_OK(tj_parse(text.data(), text.size(), &doc));
    const tj_value *a = tj_doc_root(doc);
    ASSERT_EQ(a->n, 10u);
    EXPECT_EQ(a->u.items[0].num,
              TJ_NUM_INT | TJ_NUM_UINT | TJ_NUM_INT64 | TJ_NUM_UINT64);
    EXPECT_EQ(a->u.items[1].num, TJ_NUM_INT | TJ_NUM_INT64);
    EXPECT_EQ(a->u.items[2].num, TJ_NUM_UINT | TJ_NUM_INT64 | TJ_NUM_UINT64);
    EXPECT_EQ(a->u.items[3].num, TJ_NUM_INT64);
    EXPECT_EQ(a->u.items[4].num, TJ_NUM_UINT64);
    EXPECT_EQ(a->u.items[5].num, TJ_NUM_DOUBLE);
    EXPECT_EQ(a->u.items[6].num, TJ_NUM_DOUBLE);
    EXPECT_EQ(a->u.items[7].num, TJ_NUM_DOUBLE);
    EXPECT_EQ(a->u.items[8].num,
              TJ_NUM_INT | TJ_NUM_UINT | TJ_NUM_INT64 | TJ_NUM_UINT64);
    EXPECT_EQ(a->u.items[9].num, TJ_NUM_DOUBLE);
    bytebuf b;
    bytebuf_init(&b);
    tj_debug_string(a, &b);
    EXPECT_EQ(Jbuf(&b), "[1, -1, 3000000000, -3000000000, 9223372036854775808, "
                        "18446744073709552000.0, 1.0, 100.0, 0, -0.0]");
    tj_doc_free(doc);
    (void)body;
}

TEST(TfsBody, DebugStringLimit) {
    std::string text = "{\"instances\": [], \"pad\": [";
    for (int i = 0; i < 200; i++)
        text += (i ? ", " : "") + std::to_string(i);
    text += "]}";
    Predicted p = Predict(text, kX);
    // Cut at the first token that starts at or beyond 256 bytes.
    std::string prefix = "JSON Value: ";
    ASSERT_EQ(p.error.compare(0, prefix.size(), prefix), 0);
    std::string dbg = p.error.substr(
        prefix.size(), p.error.size() - prefix.size() -
                           strlen(" No values in 'instances' array"));
    EXPECT_GE(dbg.size(), 256u);
    EXPECT_LE(dbg.size(), 260u);
    std::string head = "{\n    \"instances\": [],\n    \"pad\": [0, 1";
    EXPECT_EQ(dbg.compare(0, head.size(), head), 0) << dbg;
    // A NaN stops the writer (after its prefix).
    p = Predict("{\"instances\": [], \"v\": [1, NaN, 2]}", kX);
    EXPECT_EQ(p.error, "JSON Value: {\n    \"instances\": [],\n    \"v\": [1, "
                       " No values in 'instances' array");
}

// ---- predict, row and columnar ([J] 45-63, [V] 84-101) ----

TEST(TfsPredict, RowShapes) {
    Predicted p = Predict("{\"instances\": [[1,2],[3,4],[5,6]]}", kInt32);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(p.format, TFS_FORMAT_ROW);
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({3, 2}));
    EXPECT_EQ(Values<int32_t>(p.tensors[0]),
              std::vector<int32_t>({1, 2, 3, 4, 5, 6}));
    EXPECT_STREQ(p.tensors[0].key, "default");
    FreePredicted(&p);

    p = Predict("{\"instances\": [1, 2.0, 3, 4, 5.003, 0.007, 0.0]}", kFloat);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Values<float>(p.tensors[0]),
              std::vector<float>({1, 2, 3, 4, 5.003f, 0.007f, 0}));
    FreePredicted(&p);

    for (const char *t :
         {"{\"instances\": [1435774380]}", "{\"instances\": [1435774380.0]}"}) {
        p = Predict(t, kFloat);
        ASSERT_EQ(p.error, "");
        EXPECT_EQ(Values<float>(p.tensors[0])[0], 1435774336.0f);
        FreePredicted(&p);
    }
    p = Predict("{\"instances\": [1.79769e+308, -1.79769e+308, 2.22507e-308, "
                "-2.22507e-308]}",
                kFloat); // 48
    ASSERT_EQ(p.error, "");
    auto f = Values<float>(p.tensors[0]);
    EXPECT_EQ(f[0], INFINITY);
    EXPECT_EQ(f[1], -INFINITY);
    EXPECT_EQ(f[2], 0.0f);
    EXPECT_FALSE(std::signbit(f[2]));
    EXPECT_EQ(f[3], 0.0f);
    EXPECT_TRUE(std::signbit(f[3]));
    FreePredicted(&p);
}

TEST(TfsPredict, Strings) {
    Predicted p = Predict(
        "{\"instances\": [{\"b64\": \"aGVsbG8=\"}, {\"b64\": \"d29ybGQ=\"}]}",
        kString);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({2}));
    EXPECT_EQ(Strings(p.tensors[0]),
              std::vector<std::string>({"hello", "world"}));
    FreePredicted(&p);
    p = Predict("{\"instances\": [[{\"b64\":\"aGVsbG8=\"}],[{\"b64\":"
                "\"d29ybGQ=\"}]]}",
                kString);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({2, 1}));
    FreePredicted(&p);
    p = Predict("{\"instances\": [{\"default\": [[{\"b64\": \"aGVsbG8=\"}], "
                "[{\"b64\": \"d29ybGQ=\"}]]}]}",
                kString); // 50
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({1, 2, 1}));
    FreePredicted(&p);
    // absl padding rules
    p = Predict("{\"inputs\": [{\"b64\": \"aGVsbG8\"}, {\"b64\": \" aG k= \"}, "
                "{\"b64\": \"\"}]}",
                kString);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Strings(p.tensors[0]),
              std::vector<std::string>({"hello", "hi", ""}));
    FreePredicted(&p);
    EXPECT_EQ(PredictError("{\"inputs\": [{\"b64\": \"aGk==\"}]}", kString),
              "Unable to base64 decode");
    EXPECT_EQ(PredictError("{\"instances\": [{\"b64\": \"a-b\"}]}", kString),
              "Failed to process element: 0 of 'instances' list. Error: "
              "INVALID_ARGUMENT: Unable to base64 decode"); // 100
    EXPECT_EQ(PredictError("{\"instances\": [[{\"b64\": \"aGk=\", \"x\": 1}]]}",
                           kString),
              "Failed to process element: 0 of 'instances' list. Error: "
              "INVALID_ARGUMENT: JSON Value: {\n    \"b64\": \"aGk=\",\n    "
              "\"x\": 1\n} not formatted correctly for base64 data");
    // A raw string keeps embedded NULs.
    p = Predict("{\"inputs\": \"a\\u0000b\"}", kString);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>());
    EXPECT_EQ(Strings(p.tensors[0])[0], std::string("a\0b", 3));
    FreePredicted(&p);
}

TEST(TfsPredict, ObjectsMode) { // 51, 60-63, 95-98
    std::vector<tfs_input_spec> four = {{"dbl_tensor", OSP_TYPE_FP64},
                                        {"float_tensor", OSP_TYPE_FP32},
                                        {"int_tensor", OSP_TYPE_INT32},
                                        {"str_tensor", OSP_TYPE_BYTES}};
    Predicted p = Predict(
        "{\"instances\": [{\"int_tensor\": [[1,2],[3,4],[5,6]], "
        "\"str_tensor\": [\"foo\", \"bar\"], \"float_tensor\": [1.0, NaN], "
        "\"dbl_tensor\": [1.0]}, {\"int_tensor\": [[7,8],[9,0],[1,2]], "
        "\"str_tensor\": [\"baz\", \"bat\"], \"float_tensor\": [2.0, "
        "Infinity], \"dbl_tensor\": [2.0]}]}",
        four);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({2, 1}));
    EXPECT_EQ(Shape(p.tensors[1]), std::vector<int64_t>({2, 2}));
    EXPECT_EQ(Shape(p.tensors[2]), std::vector<int64_t>({2, 3, 2}));
    EXPECT_EQ(Shape(p.tensors[3]), std::vector<int64_t>({2, 2}));
    EXPECT_EQ(Strings(p.tensors[3]),
              std::vector<std::string>({"foo", "bar", "baz", "bat"}));
    FreePredicted(&p);

    EXPECT_EQ(PredictError("{\"instances\": [{\"int_tensor\": [[1,2],[3,4],"
                           "[5,6]], \"str_tensor\": [\"a\"]}, {\"int_tensor\": "
                           "[[[7,8],[9,0],[1,2]]], \"str_tensor\": [\"b\"]}]}",
                           kIntStr),
              "Failed to process element: 1 key: int_tensor of 'instances' "
              "list. Error: INVALID_ARGUMENT: Expecting shape [3,2] but got: "
              "[1,3,2]");
    EXPECT_EQ(PredictError("{\"instances\": [{\"int_tensor\": [[1,2],[3,4],"
                           "[5,6],[7,8]], \"str_tensor\": [\"a\"]}, "
                           "{\"int_tensor\": [[7,8],[9,0],[1,2]], "
                           "\"str_tensor\": [\"b\"]}]}",
                           kIntStr),
              "Failed to process element: 1 key: int_tensor of 'instances' "
              "list. Error: INVALID_ARGUMENT: Expecting tensor size: 8 but "
              "got: 6");
    EXPECT_EQ(PredictError("{\"instances\": [{\"int_tensor\": [1], "
                           "\"str_tensor\": [\"a\"]}, [1, 20, 30], "
                           "{\"int_tensor\": [1], \"str_tensor\": [\"a\"]}]}",
                           kIntStr),
              "Expecting object but got list at item 1 of input list");
    EXPECT_EQ(
        PredictError("{\"instances\": [[\"baz\",\"bar\"], {\"str_tensor\":"
                     " [\"baz\",\"bat\"]}]}",
                     {{"str_tensor", OSP_TYPE_BYTES}}),
        "Expecting value/list but got object at item 1 of input list");
    EXPECT_EQ(PredictError("{\"instances\": [{\"x\": 1.0}, {\"y\": 2.0}]}", kX),
              "Failed to process element: 1 key: y of 'instances' list. "
              "Error: INVALID_ARGUMENT: JSON object: does not have named "
              "input: y");
    EXPECT_EQ(PredictError("{\"instances\": [{\"int_tensor\": [1]}]}", kIntStr),
              "Failed to process element: 0 of 'instances' list. JSON object: "
              "{\n    \"int_tensor\": [1]\n} keys must be equal to: "
              "int_tensor,str_tensor");
    EXPECT_EQ(PredictError("{\"instances\": [[1,2]]}", kIntStr),
              "instances is a plain list, but expecting list of objects as "
              "multiple input tensors required as per tensorinfo_map");
    EXPECT_EQ(PredictError("{\"inputs\": [1]}", kIntStr),
              "inputs is a plain value/list, but expecting an object as "
              "multiple input tensors required as per tensorinfo_map");
    p = Predict("{\"inputs\": {\"int_tensor\": [1], \"str_tensor\": "
                "[\"a\",\"b\"], \"ignored\": 5}}",
                kIntStr); // 98
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(p.format, TFS_FORMAT_COLUMNAR);
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({1}));
    EXPECT_EQ(Shape(p.tensors[1]), std::vector<int64_t>({2}));
    FreePredicted(&p);
    // A single-input model may use objects too.
    p = Predict("{\"instances\": [{\"x\": 1.0}, {\"x\": 2.0}]}", kX);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Values<float>(p.tensors[0]), std::vector<float>({1, 2}));
    FreePredicted(&p);
}

TEST(TfsPredict, RaggedAndTypes) {
    EXPECT_EQ(PredictError("{\"instances\": [[1,2],[3,4],[5,6,7]]}", kInt32),
              "Failed to process element: 2 of 'instances' list. Error: "
              "INVALID_ARGUMENT: Expecting tensor size: 2 but got: 3");
    EXPECT_EQ(PredictError("{\"instances\": [[1,2],[3,4],[[5,6]]]}", kInt32),
              "Failed to process element: 2 of 'instances' list. Error: "
              "INVALID_ARGUMENT: Expecting shape [2] but got: [1,2]");
    EXPECT_EQ(PredictError("{\"instances\": [1, [1]]}", kInt32),
              "Failed to process element: 1 of 'instances' list. Error: "
              "INVALID_ARGUMENT: Expecting shape [] but got: [1]");
    EXPECT_EQ(PredictError("{\"instances\": [[1,2],[\"a\", \"b\"]]}", kInt32),
              "Failed to process element: 1 of 'instances' list. Error: "
              "INVALID_ARGUMENT: JSON Value: \"a\" Type: String is not of "
              "expected type: int32");
    EXPECT_EQ(PredictError("{\"instances\": [\"x\", \"y\"]}", kX),
              "Failed to process element: 0 of 'instances' list. Error: "
              "INVALID_ARGUMENT: JSON Value: \"x\" Type: String is not of "
              "expected type: float");
    EXPECT_EQ(PredictError("{\"instances\": [[1,2],[3]]}", kX),
              "Failed to process element: 1 of 'instances' list. Error: "
              "INVALID_ARGUMENT: Expecting tensor size: 2 but got: 1");
    EXPECT_EQ(PredictError("{\"instances\": [[[1,2],[3]]]}", kX),
              "Failed to process element: 0 of 'instances' list. Error: "
              "INVALID_ARGUMENT: Encountered list at unexpected size: 1 at "
              "level: 1 expected size: 2");
    EXPECT_EQ(PredictError("{\"instances\": [[[1,2],5]]}", kX),
              "Failed to process element: 0 of 'instances' list. Error: "
              "INVALID_ARGUMENT: JSON Value: 5 found at incorrect level: 2 in "
              "the JSON DOM. Expected at level: 2");
    EXPECT_EQ(PredictError("{\"instances\": [[1,[2]]]}", kX),
              "Failed to process element: 0 of 'instances' list. Error: "
              "INVALID_ARGUMENT: Encountered list at unexpected level: 1 "
              "expected < 1");
    EXPECT_EQ(PredictError("{\"instances\": [1.0]}", kInt32),
              "Failed to process element: 0 of 'instances' list. Error: "
              "INVALID_ARGUMENT: JSON Value: 1.0 Type: Number is not of "
              "expected type: int32");
    EXPECT_EQ(PredictError("{\"instances\": [3000000000]}", kInt32),
              "Failed to process element: 0 of 'instances' list. Error: "
              "INVALID_ARGUMENT: JSON Value: 3000000000 Type: Number is not of "
              "expected type: int32");
    EXPECT_EQ(PredictError("{\"inputs\": [9223372036854775808]}",
                           {{"x", OSP_TYPE_INT64}}),
              "JSON Value: 9223372036854775808 Type: Number is not of expected "
              "type: int64");
    EXPECT_EQ(PredictError("{\"inputs\": [1]}", {{"x", OSP_TYPE_BOOL}}),
              "JSON Value: 1 Type: Number is not of expected type: bool");
    EXPECT_EQ(PredictError("{\"inputs\": [1e2]}", kInt32),
              "JSON Value: 100.0 Type: Number is not of expected type: int32");
    EXPECT_EQ(PredictError("{\"inputs\": [{\"a\": 1}]}", kInt32),
              "JSON Value: {\n    \"a\": 1\n} Type: Object is not of expected "
              "type: int32");
    // UNIMPLEMENTED: 501 in columnar, wrapped 400 in row (101).
    Predicted p = Predict("{\"inputs\": [1.0]}", {{"x", OSP_TYPE_FP16}});
    EXPECT_EQ(p.code, OSP_ERROR_UNSUPPORTED);
    EXPECT_EQ(p.error, "Conversion of JSON Value: 1.0 to type: half");
    p = Predict("{\"instances\": [1.0]}", {{"x", OSP_TYPE_FP16}});
    EXPECT_EQ(p.code, OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(p.error, "Failed to process element: 0 of 'instances' list. "
                       "Error: UNIMPLEMENTED: Conversion of JSON Value: 1.0 to "
                       "type: half");
    // Narrow ints are not range checked; uint64 takes the whole range.
    p = Predict("{\"inputs\": [300, -1]}", {{"x", OSP_TYPE_UINT8}});
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Values<uint8_t>(p.tensors[0]), std::vector<uint8_t>({44, 255}));
    FreePredicted(&p);
    p = Predict("{\"inputs\": [18446744073709551615, 1]}",
                {{"x", OSP_TYPE_UINT64}});
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Values<uint64_t>(p.tensors[0]),
              std::vector<uint64_t>({UINT64_MAX, 1}));
    FreePredicted(&p);
}

TEST(TfsPredict, Columnar) { // 52, 53, 85, 86
    std::vector<tfs_input_spec> it = {{"int_tensor", OSP_TYPE_INT32}};
    for (const char *t :
         {"{\"inputs\": {\"int_tensor\": [[[1,2],[3,4],[5,6]]]}}",
          "{\"inputs\": [[[1,2],[3,4],[5,6]]]}"}) {
        Predicted p = Predict(t, it);
        ASSERT_EQ(p.error, "");
        EXPECT_EQ(p.format, TFS_FORMAT_COLUMNAR);
        EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({1, 3, 2}));
        FreePredicted(&p);
    }
    std::vector<tfs_input_spec> three = {{"bin_tensor", OSP_TYPE_BYTES},
                                         {"int_tensor", OSP_TYPE_INT32},
                                         {"str_tensor", OSP_TYPE_BYTES}};
    Predicted p = Predict("{\"inputs\": {\"int_tensor\": [[[1,2],[3,4],[5,6]]],"
                          " \"str_tensor\": [\"foo\",\"bar\"], \"bin_tensor\": "
                          "{\"b64\": \"aGVsbG8=\"}}}",
                          three);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>());
    EXPECT_EQ(Strings(p.tensors[0]), std::vector<std::string>({"hello"}));
    FreePredicted(&p);
    p = Predict("{\"inputs\": 3.0}", kX);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>());
    FreePredicted(&p);
    p = Predict("{\"inputs\": []}", kX);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Shape(p.tensors[0]), std::vector<int64_t>({0}));
    EXPECT_EQ(p.tensors[0].data->size, 0u);
    FreePredicted(&p);
    EXPECT_EQ(PredictError("{\"inputs\": {\"y\": [1]}}", kX),
              "Missing named input: x in 'inputs' object.");
    EXPECT_EQ(PredictError("{\"inputs\": {}}", kX),
              "Missing named input: x in 'inputs' object.");
}

TEST(TfsPredict, KeyChecks) { // 55, 87-89
    EXPECT_EQ(
        PredictError("{\"instances\": [[1,2]], \"inputs\": [[1,2]]}", kInt32),
        "JSON Value: {\n    \"instances\": [[1, 2]],\n    \"inputs\": "
        "[[1, 2]]\n} Not formatted correctly expecting only one of "
        "'inputs' or 'instances' keys to exist ");
    EXPECT_EQ(PredictError("{\"instances\": []}", kX),
              "JSON Value: {\n    \"instances\": []\n} No values in "
              "'instances' array");
    EXPECT_EQ(PredictError("{\"instances\": 1.0}", kX),
              "JSON Value: {\n    \"instances\": 1.0\n} Expecting 'instances' "
              "to be an list/array");
    EXPECT_EQ(PredictError("{\"signature_name\": \"serving_default\"}", kX),
              "Missing 'inputs' or 'instances' key");
    // 113: the first duplicate wins.
    Predicted p = Predict("{\"instances\": [1.0], \"instances\": [9.0]}", kX);
    ASSERT_EQ(p.error, "");
    EXPECT_EQ(Values<float>(p.tensors[0]), std::vector<float>({1.0f}));
    FreePredicted(&p);
}

TEST(TfsPredict, MaxBytes) {
    Predicted p = Predict("{\"inputs\": [1, 2, 3, 4]}", kX, 12);
    EXPECT_EQ(p.reason, OSP_REASON_TOO_LARGE);
    EXPECT_EQ(p.code, OSP_ERROR_INVALID_ARG);
    p = Predict("{\"instances\": [1, 2, 3]}", kX, 12);
    ASSERT_EQ(p.error, "");
    FreePredicted(&p);
}

// ---- predict replies (§4, [J] 64-72) ----

TEST(TfsWrite, DecimalFloat) {
    EXPECT_EQ(Decimal(3), "3.0");
    EXPECT_EQ(Decimal(2.5f), "2.5");
    EXPECT_EQ(Decimal(0.1f), "0.1");
    EXPECT_EQ(Decimal(1.0f / 3), "0.333333343");
    EXPECT_EQ(Decimal(9000000), "9e+06");
    EXPECT_EQ(Decimal(999999), "999999.0");
    EXPECT_EQ(Decimal(0.00003f), "3e-05");
    EXPECT_EQ(Decimal(555557.5f), "555557.5");
    EXPECT_EQ(Decimal(1234567), "1234567.0");
    EXPECT_EQ(Decimal(1e10f), "1e+10");
    EXPECT_EQ(Decimal(-0.0f), "-0.0");
    EXPECT_EQ(Decimal(1435774336.0f), "1.43577434e+09");
    EXPECT_EQ(Decimal(16777216.0f), "16777216.0");
    EXPECT_EQ(Decimal(1e-45f), "1.4013e-45");
    EXPECT_EQ(Decimal(NAN), "NaN");
    EXPECT_EQ(Decimal(-NAN), "NaN");
    EXPECT_EQ(Decimal(INFINITY), "Infinity");
    EXPECT_EQ(Decimal(-INFINITY), "-Infinity");
}

TEST(TfsWrite, DecimalDouble) {
    EXPECT_EQ(DecimalDouble(0.1), "0.1\n}");
    EXPECT_EQ(DecimalDouble(1.0 / 3), "0.33333333333333331\n}");
    EXPECT_EQ(DecimalDouble(8), "8.0\n}");
    EXPECT_EQ(DecimalDouble(1e21), "1e+21\n}");
}

TEST(TfsWrite, RowAndColumnarBytes) {
    float y[2] = {2.5f, 3.0f};
    EXPECT_EQ(Write(TFS_FORMAT_ROW, {Out("y", OSP_TYPE_FP32, {2}, y, 8)}),
              "{\n    \"predictions\": [2.5, 3.0\n    ]\n}");
    EXPECT_EQ(Write(TFS_FORMAT_ROW, {Out("y", OSP_TYPE_FP32, {2, 1}, y, 8)}),
              "{\n    \"predictions\": [[2.5], [3.0]\n    ]\n}");
    EXPECT_EQ(Write(TFS_FORMAT_COLUMNAR, {Out("y", OSP_TYPE_FP32, {2}, y, 8)}),
              "{\n    \"outputs\": [\n        2.5,\n        3.0\n    ]\n}");
    EXPECT_EQ(Write(TFS_FORMAT_COLUMNAR, {Out("y", OSP_TYPE_FP32, {}, y, 4)}),
              "{\n    \"outputs\": 2.5\n}");
    int32_t it[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2};
    EXPECT_EQ(
        Write(TFS_FORMAT_ROW,
              {Out("int_tensor", OSP_TYPE_INT32, {2, 3, 2}, it, sizeof it)}),
        "{\n    \"predictions\": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], "
        "[1, 2]]\n    ]\n}");
    EXPECT_EQ(
        Write(TFS_FORMAT_ROW, {Out("int_tensor", OSP_TYPE_INT32, {5}, it, 20)}),
        "{\n    \"predictions\": [1, 2, 3, 4, 5\n    ]\n}");
    float ft[6] = {9000000, 999999, 0.5f, 0.0003f, 0.00003f, 555557.5f};
    EXPECT_EQ(Write(TFS_FORMAT_ROW,
                    {Out("float_tensor", OSP_TYPE_FP32, {2, 3}, ft, 24)}),
              "{\n    \"predictions\": [[9e+06, 999999.0, 0.5], [0.0003, "
              "3e-05, 555557.5]\n    ]\n}");
    float nt[4] = {NAN, INFINITY, 3, -INFINITY};
    EXPECT_EQ(Write(TFS_FORMAT_ROW,
                    {Out("float_tensor", OSP_TYPE_FP32, {2, 2}, nt, 16)}),
              "{\n    \"predictions\": [[NaN, Infinity], [3.0, -Infinity]\n   "
              " ]\n}");
    std::string s = BytesLayout({"hello", "world", "tf", "serving"});
    EXPECT_EQ(Write(TFS_FORMAT_ROW, {Out("str_tensor_bytes", OSP_TYPE_BYTES,
                                         {2, 2}, s.data(), s.size())}),
              "{\n    \"predictions\": [[{\n                \"b64\": "
              "\"aGVsbG8=\"\n            }, {\n                \"b64\": "
              "\"d29ybGQ=\"\n            }], [{\n                \"b64\": "
              "\"dGY=\"\n            }, {\n                \"b64\": "
              "\"c2VydmluZw==\"\n            }]\n    ]\n}");
    EXPECT_EQ(Write(TFS_FORMAT_ROW, {Out("str_tensor", OSP_TYPE_BYTES, {2},
                                         s.data(), s.size())}),
              "{\n    \"predictions\": [\"hello\", \"world\"\n    ]\n}");
}

TEST(TfsWrite, SeveralOutputs) { // 70, 71
    int32_t it[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2};
    double dt[2] = {8, 9};
    std::vector<tfs_output> outs = {
        Out("double_scalar_tensor", OSP_TYPE_FP64, {2}, dt, 16),
        Out("int_tensor", OSP_TYPE_INT32, {2, 3, 2}, it, sizeof it)};
    EXPECT_EQ(Write(TFS_FORMAT_ROW, outs),
              "{\n    \"predictions\": [\n        {\n            "
              "\"double_scalar_tensor\": 8.0,\n            \"int_tensor\": "
              "[[1, 2], [3, 4], [5, 6]]\n        },\n        {\n            "
              "\"double_scalar_tensor\": 9.0,\n            \"int_tensor\": "
              "[[7, 8], [9, 0], [1, 2]]\n        }\n    ]\n}");
    EXPECT_EQ(Write(TFS_FORMAT_COLUMNAR, outs),
              "{\n    \"outputs\": {\n        \"double_scalar_tensor\": [\n    "
              "        8.0,\n            9.0\n        ],\n        "
              "\"int_tensor\": [\n            [\n                [\n           "
              "         1,\n                    2\n                ],\n       "
              "         [\n                    3,\n                    4\n    "
              "            ],\n                [\n                    5,\n     "
              "               6\n                ]\n            ],\n          "
              "  [\n                [\n                    7,\n               "
              "     8\n                ],\n                [\n                "
              "    9,\n                    0\n                ],\n             "
              "   [\n                    1,\n                    2\n           "
              "     ]\n            ]\n        ]\n    }\n}");
}

TEST(TfsWrite, Errors) { // 69, 72
    std::string err;
    EXPECT_EQ(Write(TFS_FORMAT_ROW, {}, &err), "");
    EXPECT_EQ(err, "Cannot convert empty tensor map to JSON");
    int32_t it[6] = {1, 2, 3, 4, 5, 6};
    EXPECT_EQ(
        Write(TFS_FORMAT_ROW, {Out("c", OSP_TYPE_FP16, {2}, it, 4)}, &err), "");
    EXPECT_EQ(err, "Failed to write JSON value for tensor type: half");
    EXPECT_EQ(
        Write(TFS_FORMAT_ROW, {Out("i", OSP_TYPE_INT32, {}, it, 4)}, &err), "");
    EXPECT_EQ(err, "Tensor name: i has no shape information ");
    std::string s = BytesLayout({"a", "b", "c"});
    EXPECT_EQ(Write(TFS_FORMAT_ROW,
                    {Out("i", OSP_TYPE_INT32, {2, 3}, it, 24),
                     Out("s", OSP_TYPE_BYTES, {1, 3}, s.data(), s.size())},
                    &err),
              "");
    EXPECT_EQ(err,
              "Tensor name: s has inconsistent batch size: 1 expecting: 2");
    EXPECT_EQ(Write(TFS_FORMAT_ROW, {Out("i", OSP_TYPE_INT32, {0, 2}, it, 0)}),
              "{\n    \"predictions\": []\n}");
    EXPECT_EQ(
        Write(TFS_FORMAT_ROW, {Out("s", OSP_TYPE_BYTES, {0, 1, 2}, it, 0),
                               Out("f", OSP_TYPE_FP32, {0, 3, 4}, it, 0)}),
        "{\n    \"predictions\": []\n}");
    EXPECT_EQ(
        Write(TFS_FORMAT_ROW, {Out("i", OSP_TYPE_INT32, {2}, it, 4)}, &err),
        "");
    EXPECT_NE(err, ""); // too few bytes for the shape
}

// ---- classify and regress (§5, [J] 73-82) ----

TEST(TfsExamples, Parse) {
    tfs_body *body = nullptr;
    ASSERT_EQ(
        Parse("{\"signature_name\": \"custom_signture\", \"context\": "
              "{\"query\": \"pizza\", \"location\": [\"sfo\"]}, \"examples\": "
              "[{\"names\": [\"foo\",\"bar\"], \"ratings\": [8.0, 9.0, NaN, "
              "Infinity], \"age\": 20}, {\"names\": [\"baz\", {\"b64\": "
              "\"aGVsbG8=\"}], \"intboolmix\": [1, true, false]}, {\"names\": "
              "\"bar\", \"ratings\": -Infinity, \"query\": []}]}",
              &body),
        "");
    tfs_examples *ex = nullptr;
    ASSERT_OK(tfs_parse_examples(body, &ex));
    ASSERT_EQ(tfs_examples_count(ex), 3u);
    const tfs_example *e0 = tfs_examples_at(ex, 0);
    const tfs_feature *f = tfs_example_feature(e0, "ratings");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->kind, TFS_FEATURE_FLOAT);
    ASSERT_EQ(f->n, 4u);
    EXPECT_TRUE(std::isnan(f->floats[2]));
    f = tfs_example_feature(e0, "age");
    EXPECT_EQ(f->kind, TFS_FEATURE_INT64);
    EXPECT_EQ(f->ints[0], 20);
    f = tfs_example_feature(e0, "query"); // from the context
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(std::string(f->bytes[0], f->lens[0]), "pizza");
    const tfs_example *e1 = tfs_examples_at(ex, 1);
    f = tfs_example_feature(e1, "intboolmix");
    ASSERT_EQ(f->n, 3u);
    EXPECT_EQ(f->ints[0], 1);
    EXPECT_EQ(f->ints[1], 1);
    EXPECT_EQ(f->ints[2], 0);
    f = tfs_example_feature(e1, "names");
    EXPECT_EQ(std::string(f->bytes[1], f->lens[1]), "hello");
    const tfs_example *e2 = tfs_examples_at(ex, 2);
    f = tfs_example_feature(e2, "query"); // the example's own wins
    EXPECT_EQ(f->kind, TFS_FEATURE_EMPTY);
    EXPECT_EQ(tfs_example_feature(e2, "location")->n, 1u);
    tfs_examples_free(ex);
    tfs_body_free(body);
}

std::string ExamplesError(const std::string &text) {
    tfs_body *body = nullptr;
    std::string msg = Parse(text, &body);
    if (!msg.empty())
        return msg;
    tfs_examples *ex = nullptr;
    msg = TakeMessage(tfs_parse_examples(body, &ex));
    tfs_examples_free(ex);
    tfs_body_free(body);
    return msg;
}

TEST(TfsExamples, Errors) {
    EXPECT_EQ(ExamplesError("{\"context\": [{\"names\": [\"foo\",\"bar\"]}]}"),
              "Example must be JSON object but got JSON Array");
    EXPECT_EQ(ExamplesError("{\"examples\": {\"names\": [\"foo\",\"bar\"]}}"),
              "JSON Value: {\n    \"examples\": {\n        \"names\": "
              "[\"foo\", \"bar\"]\n    }\n} Expecting 'examples' value to be "
              "an list/array");
    EXPECT_EQ(ExamplesError("{\"examples\": [[{\"names\": [\"foo\"]}]]}"),
              "Example must be JSON object but got JSON Array");
    EXPECT_EQ(ExamplesError("{}"), "JSON Value: {} When method is classify, "
                                   "key 'examples' is expected and was not "
                                   "found");
    EXPECT_EQ(ExamplesError("{\"examples\": []}"),
              "JSON Value: {\n    \"examples\": []\n} 'examples' value is an "
              "empty array");
    EXPECT_EQ(ExamplesError("{\"examples\": [{\"names\": [10, null]}]}"),
              "Feature: names has element with unexpected JSON type: Null");
    EXPECT_EQ(
        ExamplesError("{\"examples\": [{\"names\": [10, {\"test\": 10}]}]}"),
        "Feature: names has element with unexpected JSON type: Object");
    EXPECT_EQ(ExamplesError("{\"examples\": [{\"names\": [[10], 20]}]}"),
              "Feature: names has element with unexpected JSON type: Array");
    EXPECT_EQ(ExamplesError("{\"examples\": [{\"names\": [10, 10.0]}]}"),
              "Unexpected element type in feature: names expecting type: "
              "int64");
    EXPECT_EQ(
        ExamplesError(
            "{\"examples\": [{\"names\": [20, 18446744073709551603]}]}"),
        "Feature: names has uint64_t element. Only int64_t is supported.");
}

TEST(TfsExamples, Results) {
    const char *labels[] = {"car", "bike", "bus", "car", "bike", "bus"};
    float scores[] = {.2f, .7f, .1f, .7f, .1f, .2f};
    bytebuf b;
    bytebuf_init(&b);
    ASSERT_OK(tfs_write_classify(2, 3, labels, scores, &b));
    EXPECT_EQ(Jbuf(&b), "{\n    \"results\": [[[\"car\", 0.2], [\"bike\", "
                        "0.7], [\"bus\", 0.1]], [[\"car\", 0.7], [\"bike\", "
                        "0.1], [\"bus\", 0.2]]\n    ]\n}");
    float twelve = 12;
    bytebuf_init(&b);
    ASSERT_OK(tfs_write_classify(1, 1, nullptr, &twelve, &b));
    EXPECT_EQ(Jbuf(&b), "{\n    \"results\": [[[\"\", 12.0]]\n    ]\n}");
    bytebuf_init(&b);
    ASSERT_OK(tfs_write_classify(1, 1, labels, nullptr, &b));
    EXPECT_EQ(Jbuf(&b), "{\n    \"results\": [[[\"car\", 0.0]]\n    ]\n}");
    bytebuf_init(&b);
    EXPECT_EQ(TakeMessage(tfs_write_classify(0, 1, nullptr, nullptr, &b)),
              "Cannot convert empty ClassificationResults to JSON");
    bytebuf_free(&b);
    float r[] = {0.2f, INFINITY, 1.0f, -INFINITY, NAN};
    bytebuf_init(&b);
    ASSERT_OK(tfs_write_regress(r, 5, &b));
    EXPECT_EQ(Jbuf(&b), "{\n    \"results\": [0.2, Infinity, 1.0, -Infinity, "
                        "NaN]\n}");
    float f42 = 42;
    bytebuf_init(&b);
    ASSERT_OK(tfs_write_regress(&f42, 1, &b));
    EXPECT_EQ(Jbuf(&b), "{\n    \"results\": [42.0]\n}");
    bytebuf_init(&b);
    EXPECT_EQ(TakeMessage(tfs_write_regress(r, 0, &b)),
              "Cannot convert empty RegressionResults to JSON");
    bytebuf_free(&b);
}

TEST(TfsErrors, ErrorBodyAndDtypes) { // 83
    bytebuf b;
    bytebuf_init(&b);
    tfs_write_error("Bad key: \"key\"\n\x01/\\", &b);
    EXPECT_EQ(Jbuf(&b),
              "{\n    \"error\": \"Bad key: \\\"key\\\"\\n\\u0001/\\\\\"\n}");
    EXPECT_STREQ(tfs_dtype_string(OSP_TYPE_FP32), "float");
    EXPECT_STREQ(tfs_dtype_string(OSP_TYPE_BYTES), "string");
    EXPECT_STREQ(tfs_dtype_string(OSP_TYPE_FP16), "half");
    EXPECT_STREQ(tfs_dtype_enum_name(OSP_TYPE_FP32), "DT_FLOAT");
    EXPECT_STREQ(tfs_dtype_enum_name(OSP_TYPE_BYTES), "DT_STRING");
    EXPECT_STREQ(tfs_dtype_enum_name(OSP_TYPE_BF16), "DT_BFLOAT16");
}

} // namespace
