// The redis response cache's value layout (server/core/cache/cache_value.c):
// every datatype round-trips byte for byte, BYTES included; the encoder
// refuses what the decoder would; and a truncated, corrupt or foreign
// value is refused without reading outside it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cache_value.h"
#include "osprey/datatype.h"
#include "osprey/tensor.h"

namespace {

struct Out {
    std::string name;
    osp_datatype dtype;
    std::vector<int64_t> dims;
    std::vector<unsigned char> bytes;
};

osp_infer_response *Response(const std::vector<Out> &outs) {
    auto *resp = static_cast<osp_infer_response *>(
        calloc(1, sizeof(osp_infer_response)));
    resp->outputs = static_cast<osp_infer_output *>(
        calloc(outs.size() + 1, sizeof(osp_infer_output)));
    resp->n_outputs = outs.size();
    for (size_t i = 0; i < outs.size(); i++) {
        osp_infer_output *o = &resp->outputs[i];
        o->name = strdup(outs[i].name.c_str());
        o->dtype = outs[i].dtype;
        o->shape.rank = static_cast<int>(outs[i].dims.size());
        for (size_t d = 0; d < outs[i].dims.size(); d++)
            o->shape.dims[d] = outs[i].dims[d];
        o->data = osp_buffer_new_host(outs[i].bytes.size());
        if (!outs[i].bytes.empty())
            memcpy(o->data->data, outs[i].bytes.data(), outs[i].bytes.size());
        o->byte_size = outs[i].bytes.size();
    }
    return resp;
}

osp_infer_response *Empty() {
    return static_cast<osp_infer_response *>(
        calloc(1, sizeof(osp_infer_response)));
}

// BYTES elements as Triton serialises them: 4-byte LE length, then bytes.
std::vector<unsigned char> Strings(const std::vector<std::string> &items) {
    std::vector<unsigned char> b;
    for (const auto &s : items) {
        uint32_t n = static_cast<uint32_t>(s.size());
        for (int i = 0; i < 4; i++)
            b.push_back(static_cast<unsigned char>(n >> (8 * i)));
        b.insert(b.end(), s.begin(), s.end());
    }
    return b;
}

std::vector<unsigned char> Pattern(size_t n) {
    std::vector<unsigned char> b(n);
    for (size_t i = 0; i < n; i++)
        b[i] = static_cast<unsigned char>(i * 37 + 11);
    return b;
}

std::vector<unsigned char> Encode(const osp_infer_response *resp) {
    unsigned char *value = nullptr;
    size_t len = 0;
    const char *why = nullptr;
    EXPECT_TRUE(cache_value_encode(resp, SIZE_MAX, &value, &len, &why))
        << (why ? why : "");
    std::vector<unsigned char> v(value, value + len);
    free(value);
    return v;
}

// Decodes v; on failure checks that nothing was left in the response.
bool Decode(const std::vector<unsigned char> &v, osp_infer_response *into,
            std::string *why = nullptr) {
    const char *w = nullptr;
    bool ok = cache_value_decode(v.data(), v.size(), into, &w);
    if (!ok) {
        EXPECT_EQ(into->n_outputs, 0u);
        EXPECT_EQ(into->outputs, nullptr);
        EXPECT_NE(w, nullptr);
        if (why)
            *why = w;
    }
    return ok;
}

void ExpectSame(const osp_infer_response *a, const osp_infer_response *b) {
    ASSERT_EQ(a->n_outputs, b->n_outputs);
    for (size_t i = 0; i < a->n_outputs; i++) {
        const osp_infer_output *x = &a->outputs[i], *y = &b->outputs[i];
        EXPECT_STREQ(x->name, y->name);
        EXPECT_EQ(x->dtype, y->dtype);
        EXPECT_TRUE(osp_shape_equal(&x->shape, &y->shape));
        ASSERT_EQ(x->byte_size, y->byte_size);
        if (x->byte_size) {
            EXPECT_EQ(memcmp(x->data->data, y->data->data, x->byte_size), 0);
        }
    }
}

// One output of every datatype, shapes of rank 0 to 3, a zero-element
// tensor and BYTES with an empty string.
std::vector<Out> EveryDatatype() {
    std::vector<Out> outs;
    for (int t = OSP_TYPE_BOOL; t < OSP_TYPE_COUNT_; t++) {
        auto dt = static_cast<osp_datatype>(t);
        if (dt == OSP_TYPE_BYTES)
            continue;
        size_t size = osp_datatype_byte_size(dt);
        outs.push_back({std::string("OUT_") + osp_datatype_wire_name(dt),
                        dt,
                        {2, 3},
                        Pattern(6 * size)});
    }
    outs.push_back({"SCALAR", OSP_TYPE_FP32, {}, Pattern(4)});
    outs.push_back({"NONE", OSP_TYPE_INT64, {4, 0, 2}, {}});
    outs.push_back({"TEXT",
                    OSP_TYPE_BYTES,
                    {1, 3},
                    Strings({"hello", "", std::string("\0\xff", 2)})});
    return outs;
}

TEST(CacheValue, EveryDatatypeRoundTrips) {
    osp_infer_response *resp = Response(EveryDatatype());
    std::vector<unsigned char> v = Encode(resp);
    EXPECT_EQ(v[0], 'O');
    EXPECT_EQ(v[2], CACHE_VALUE_VERSION);
    osp_infer_response *got = Empty();
    ASSERT_TRUE(Decode(v, got));
    ExpectSame(resp, got);
    osp_infer_response_free(got);
    osp_infer_response_free(resp);
}

TEST(CacheValue, AResponseWithoutOutputsRoundTrips) {
    osp_infer_response *resp = Response({});
    osp_infer_response *got = Empty();
    ASSERT_TRUE(Decode(Encode(resp), got));
    EXPECT_EQ(got->n_outputs, 0u);
    osp_infer_response_free(got);
    osp_infer_response_free(resp);
}

TEST(CacheValue, EveryTruncationIsRefused) {
    osp_infer_response *resp = Response(EveryDatatype());
    std::vector<unsigned char> v = Encode(resp);
    for (size_t n = 0; n < v.size(); n++) {
        // An exact-size copy, so that ASan sees any read past the end.
        std::vector<unsigned char> cut(v.begin(), v.begin() + n);
        cut.shrink_to_fit();
        osp_infer_response *got = Empty();
        EXPECT_FALSE(Decode(cut, got)) << "prefix of " << n << " bytes";
        osp_infer_response_free(got);
    }
    osp_infer_response_free(resp);
}

// Offsets into the value of one FP32 output named "X" of shape [2].
constexpr size_t kHeader = 3, kCount = 3, kNameLen = 7, kName = 11, kDtype = 12,
                 kRank = 13, kDim0 = 14, kByteSize = 22, kBytes = 30;

std::vector<unsigned char> OneFloatPair() {
    osp_infer_response *resp =
        Response({{"X", OSP_TYPE_FP32, {2}, Pattern(8)}});
    std::vector<unsigned char> v = Encode(resp);
    osp_infer_response_free(resp);
    return v;
}

TEST(CacheValue, CorruptValuesAreRefused) {
    std::vector<unsigned char> good = OneFloatPair();
    ASSERT_EQ(good.size(), kBytes + 8);
    ASSERT_EQ(good[kName], 'X');
    struct Case {
        const char *what;
        size_t at;
        std::vector<unsigned char> bytes;
    };
    const std::vector<Case> cases = {
        {"magic", 0, {'X'}},
        {"version", kHeader - 1, {2}},
        {"output count", kCount, {2}},
        {"huge output count", kCount, {0xff, 0xff, 0xff, 0xff}},
        {"empty name", kNameLen, {0}},
        {"name past the end", kNameLen, {0xff, 0xff, 0, 0}},
        {"NUL in the name", kName, {0}},
        {"datatype 0", kDtype, {0}},
        {"unknown datatype", kDtype, {200}},
        {"rank past OSP_MAX_DIMS", kRank, {17}},
        {"negative dimension", kDim0 + 7, {0x80}},
        {"shape larger than the bytes", kDim0, {3}},
        {"byte size past the end", kByteSize, {0xff}},
        {"byte size not the shape's", kByteSize, {4}},
        {"another datatype's size", kDtype, {9 /* INT64 */}},
    };
    for (const auto &c : cases) {
        std::vector<unsigned char> v = good;
        memcpy(v.data() + c.at, c.bytes.data(), c.bytes.size());
        osp_infer_response *got = Empty();
        EXPECT_FALSE(Decode(v, got)) << c.what;
        osp_infer_response_free(got);
    }
    std::vector<unsigned char> longer = good;
    longer.push_back(0);
    osp_infer_response *got = Empty();
    std::string why;
    EXPECT_FALSE(Decode(longer, got, &why));
    EXPECT_EQ(why, "bytes after the last output");
    osp_infer_response_free(got);
}

TEST(CacheValue, BytesElementsMustFillTheirBytesExactly) {
    for (const auto &bytes :
         {Strings({"ab"}),                        // one element for two
          Strings({"ab", "c", "d"}),              // three for two
          std::vector<unsigned char>{5, 0, 0, 0}, // a length past the end
          std::vector<unsigned char>{1, 0}}) {    // a cut length
        osp_infer_response *resp =
            Response({{"S", OSP_TYPE_BYTES, {2}, bytes}});
        unsigned char *value = nullptr;
        size_t len = 0;
        const char *why = nullptr;
        EXPECT_FALSE(cache_value_encode(resp, SIZE_MAX, &value, &len, &why));
        EXPECT_STREQ(why,
                     "an output's bytes do not match its datatype and shape");
        osp_infer_response_free(resp);
    }
    // The decoder checks the same: a valid two-element value whose second
    // length is made to run past the end.
    osp_infer_response *resp =
        Response({{"S", OSP_TYPE_BYTES, {2}, Strings({"ab", "c"})}});
    std::vector<unsigned char> v = Encode(resp);
    v[v.size() - 5] = 9; // the second element's length
    osp_infer_response *got = Empty();
    EXPECT_FALSE(Decode(v, got));
    osp_infer_response_free(got);
    osp_infer_response_free(resp);
}

TEST(CacheValue, TheEncoderKeepsToItsLimit) {
    osp_infer_response *resp =
        Response({{"X", OSP_TYPE_UINT8, {100}, Pattern(100)}});
    unsigned char *value = nullptr;
    size_t len = 0;
    const char *why = nullptr;
    EXPECT_FALSE(cache_value_encode(resp, 100, &value, &len, &why));
    EXPECT_STREQ(why, "the response is larger than a cache value may be");
    ASSERT_TRUE(cache_value_encode(resp, 200, &value, &len, &why));
    EXPECT_LE(len, 200u);
    free(value);
    osp_infer_response_free(resp);
}

// Random damage: every decode either refuses the value or yields outputs
// whose bytes match their shapes; never a read outside the value (ASan).
TEST(CacheValue, RandomDamageNeverReadsOutside) {
    osp_infer_response *resp = Response(EveryDatatype());
    std::vector<unsigned char> good = Encode(resp);
    std::mt19937 rng(12345);
    for (int round = 0; round < 2000; round++) {
        std::vector<unsigned char> v = good;
        int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; f++)
            v[rng() % v.size()] = static_cast<unsigned char>(rng());
        v.resize(rng() % 8 == 0 ? rng() % v.size() : v.size());
        v.shrink_to_fit();
        osp_infer_response *got = Empty();
        if (Decode(v, got)) {
            for (size_t i = 0; i < got->n_outputs; i++) {
                const osp_infer_output *o = &got->outputs[i];
                int64_t count = 0;
                ASSERT_TRUE(osp_shape_element_count(&o->shape, &count));
                if (o->dtype != OSP_TYPE_BYTES) {
                    EXPECT_EQ(o->byte_size,
                              count * osp_datatype_byte_size(o->dtype));
                }
            }
        }
        osp_infer_response_free(got);
    }
    osp_infer_response_free(resp);
}

} // namespace
