// The local response cache (server/core/cache/cache_local.c, behind
// response_cache.h): what the key covers (and the same for the redis
// cache's SHA-256 key, cache_request_key.c), byte-identical copies on a
// hit, least-recently-used eviction by size, entries larger than the
// cache, and a 0-byte cache refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cache_request_key.h"
#include "response_cache.h"

namespace {

// A request with one FP32 input per name, its bytes from `values`.
osp_infer_request *Request(const std::vector<std::string> &names,
                           const std::vector<float> &values,
                           const std::vector<std::string> &outputs = {}) {
    osp_infer_request *req = osp_infer_request_new("m", -1);
    for (const auto &name : names) {
        osp_buffer *buf = osp_buffer_new_host(values.size() * sizeof(float));
        memcpy(buf->data, values.data(), buf->size);
        osp_shape shape = {2, {1, static_cast<int64_t>(values.size())}};
        EXPECT_EQ(osp_infer_request_add_input(req, name.c_str(), OSP_TYPE_FP32,
                                              &shape, buf),
                  nullptr);
    }
    for (const auto &o : outputs)
        EXPECT_EQ(osp_infer_request_add_output(req, o.c_str()), nullptr);
    return req;
}

// A response with one output of `bytes` bytes, each `fill`.
osp_infer_response *Response(size_t bytes, unsigned char fill) {
    auto *resp = static_cast<osp_infer_response *>(
        calloc(1, sizeof(osp_infer_response)));
    resp->outputs =
        static_cast<osp_infer_output *>(calloc(1, sizeof(osp_infer_output)));
    resp->n_outputs = 1;
    resp->outputs[0].name = strdup("OUT");
    resp->outputs[0].dtype = OSP_TYPE_UINT8;
    resp->outputs[0].shape = {1, {static_cast<int64_t>(bytes)}};
    resp->outputs[0].data = osp_buffer_new_host(bytes);
    memset(resp->outputs[0].data->data, fill, bytes);
    resp->outputs[0].byte_size = bytes;
    return resp;
}

class ResponseCache : public ::testing::Test {
  protected:
    void Make(size_t capacity) {
        ASSERT_EQ(response_cache_local_new(capacity, &cache_), nullptr);
    }
    void TearDown() override {
        response_cache_free(cache_);
    }

    cache_key Key(osp_infer_request *req, int64_t version = 1,
                  const char *model = "m") {
        cache_key k = sha256_ ? cache_key_sha256(model, version, req)
                              : response_cache_key(cache_, model, version, req);
        osp_infer_request_free(req);
        return k;
    }
    void Insert(cache_key k, size_t bytes, unsigned char fill) {
        osp_infer_response *resp = Response(bytes, fill);
        response_cache_insert(cache_, k, resp);
        osp_infer_response_free(resp);
    }
    // The fill byte of the cached entry, or -1 on a miss.
    int Lookup(cache_key k) {
        auto *resp = static_cast<osp_infer_response *>(
            calloc(1, sizeof(osp_infer_response)));
        int fill = -1;
        if (response_cache_lookup(cache_, k, resp))
            fill = static_cast<unsigned char *>(resp->outputs[0].data->data)[0];
        osp_infer_response_free(resp);
        return fill;
    }

    response_cache *cache_ = nullptr;
    bool sha256_ = false; // Key() makes the redis cache's keys
};

bool Same(cache_key a, cache_key b) {
    return a.len == b.len && memcmp(a.bytes, b.bytes, a.len) == 0;
}

// The key's coverage, for the local cache's keyed hash and for the redis
// cache's SHA-256 alike (both walk cache_key_walk).
class ResponseCacheKey : public ResponseCache,
                         public ::testing::WithParamInterface<bool> {};

TEST_P(ResponseCacheKey, TheKeyCoversModelVersionInputsAndOutputs) {
    Make(1 << 20);
    sha256_ = GetParam();
    cache_key base = Key(Request({"A", "B"}, {1, 2, 3}));
    EXPECT_TRUE(Same(base, Key(Request({"A", "B"}, {1, 2, 3}))));
    // Inputs count by name, not by their order in the request.
    EXPECT_TRUE(Same(base, Key(Request({"B", "A"}, {1, 2, 3}))));
    EXPECT_FALSE(Same(base, Key(Request({"A", "B"}, {1, 2, 4}))));
    EXPECT_FALSE(Same(base, Key(Request({"A", "C"}, {1, 2, 3}))));
    EXPECT_FALSE(Same(base, Key(Request({"A", "B"}, {1, 2, 3}), 2)));
    EXPECT_FALSE(Same(base, Key(Request({"A", "B"}, {1, 2, 3}), 1, "n")));
    EXPECT_FALSE(Same(base, Key(Request({"A", "B"}, {1, 2, 3}, {"OUT"}))));
    // The same bytes under another shape.
    osp_infer_request *flat = Request({"A", "B"}, {1, 2, 3});
    flat->inputs[0].shape = {1, {3}};
    EXPECT_FALSE(Same(base, Key(flat)));
    // The same bytes under another datatype.
    osp_infer_request *ints = Request({"A", "B"}, {1, 2, 3});
    ints->inputs[1].dtype = OSP_TYPE_INT32;
    EXPECT_FALSE(Same(base, Key(ints)));
    // Another class count of the same output.
    cache_key top = Key(Request({"A", "B"}, {1, 2, 3}, {"OUT"}));
    osp_infer_request *top3 = Request({"A", "B"}, {1, 2, 3});
    ASSERT_EQ(osp_infer_request_add_output_classified(top3, "OUT", 3), nullptr);
    EXPECT_FALSE(Same(top, Key(top3)));
}

INSTANTIATE_TEST_SUITE_P(LocalAndSha256, ResponseCacheKey,
                         ::testing::Values(false, true));

// Replicas share the redis cache only if each computes the same key for
// the same request: a fixed SHA-256, whatever the process, where the
// local cache's keys are seeded per cache.
TEST_F(ResponseCache, Sha256KeysAreTheSameInEveryProcess) {
    Make(1 << 20);
    osp_infer_request *req = Request({"A", "B"}, {1, 2, 3}, {"OUT"});
    cache_key k = cache_key_sha256("m", 1, req);
    char hex[65];
    cache_key_hex(&k, hex);
    // The layout of cache_request_key.h, recomputed by hand (hashlib):
    // a change here strands every value already in a shared Redis.
    EXPECT_STREQ(
        hex,
        "42a3024e2181fb7ae750383d428a879aafc22c7339aac4d71656016579abd86d");
    response_cache *other = nullptr;
    ASSERT_EQ(response_cache_local_new(1 << 20, &other), nullptr);
    EXPECT_FALSE(Same(response_cache_key(cache_, "m", 1, req),
                      response_cache_key(other, "m", 1, req)));
    response_cache_free(other);
    osp_infer_request_free(req);
}

TEST_F(ResponseCache, AHitCopiesTheOutputsExactly) {
    Make(1 << 20);
    cache_key k = Key(Request({"A"}, {1}));
    osp_infer_response *resp = Response(100, 7);
    static_cast<unsigned char *>(resp->outputs[0].data->data)[99] = 9;
    response_cache_insert(cache_, k, resp);
    auto *got = static_cast<osp_infer_response *>(
        calloc(1, sizeof(osp_infer_response)));
    ASSERT_TRUE(response_cache_lookup(cache_, k, got));
    ASSERT_EQ(got->n_outputs, 1u);
    EXPECT_STREQ(got->outputs[0].name, "OUT");
    EXPECT_EQ(got->outputs[0].dtype, OSP_TYPE_UINT8);
    EXPECT_TRUE(
        osp_shape_equal(&got->outputs[0].shape, &resp->outputs[0].shape));
    ASSERT_EQ(got->outputs[0].byte_size, 100u);
    EXPECT_EQ(
        memcmp(got->outputs[0].data->data, resp->outputs[0].data->data, 100),
        0);
    EXPECT_NE(got->outputs[0].data->data, resp->outputs[0].data->data);
    osp_infer_response_free(got);
    osp_infer_response_free(resp);
    EXPECT_EQ(Lookup(Key(Request({"A"}, {2}))), -1);
    response_cache_stats s;
    response_cache_get_stats(cache_, &s);
    EXPECT_EQ(s.entries, 1u);
    EXPECT_EQ(s.hits, 1u);
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.lookups, 2u);
}

TEST_F(ResponseCache, EvictsTheLeastRecentlyUsedBySize) {
    Make(2500); // two 1000-byte entries with their bookkeeping, not three
    cache_key a = Key(Request({"A"}, {1})), b = Key(Request({"A"}, {2})),
              c = Key(Request({"A"}, {3}));
    Insert(a, 1000, 'a');
    Insert(b, 1000, 'b');
    EXPECT_EQ(Lookup(a), 'a'); // a is now the most recent
    Insert(c, 1000, 'c');      // evicts b
    EXPECT_EQ(Lookup(b), -1);
    EXPECT_EQ(Lookup(a), 'a');
    EXPECT_EQ(Lookup(c), 'c');
    response_cache_stats s;
    response_cache_get_stats(cache_, &s);
    EXPECT_EQ(s.evictions, 1u);
    EXPECT_EQ(s.entries, 2u);
    EXPECT_LE(s.bytes, s.capacity);
}

TEST_F(ResponseCache, AnEntryLargerThanTheCacheIsNotKept) {
    Make(2500);
    cache_key a = Key(Request({"A"}, {1})), big = Key(Request({"A"}, {9}));
    Insert(a, 1000, 'a');
    Insert(big, 3000, 'z');
    EXPECT_EQ(Lookup(big), -1);
    EXPECT_EQ(Lookup(a), 'a'); // and nothing was evicted for it
}

TEST_F(ResponseCache, TheFirstOfTwoIdenticalInsertsStays) {
    Make(1 << 20);
    cache_key a = Key(Request({"A"}, {1}));
    Insert(a, 10, 'x');
    Insert(a, 10, 'y');
    EXPECT_EQ(Lookup(a), 'x');
}

TEST(ResponseCacheNew, AZeroByteCacheIsRefused) {
    response_cache *c = nullptr;
    osp_error *err = response_cache_local_new(0, &c);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(c, nullptr);
    osp_error_free(err);
}

} // namespace
