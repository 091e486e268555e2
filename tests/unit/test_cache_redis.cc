// The redis response cache (server/core/cache/cache_redis.c and
// cache_redis_pool.c) against a real redis-server on a free loopback port
// (redis_test_server.h): hits across two cache objects (two replicas),
// statistics, values it cannot read, Redis killed and frozen mid-run
// (misses within the timeouts, one log line per outage, then recovery),
// an address nothing listens on, and AUTH.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

#include "osprey/clock.h"
#include "osprey/log.h"
#include "redis_test_server.h"
#include "response_cache.h"

namespace {

osp_infer_request *Request(float value) {
    osp_infer_request *req = osp_infer_request_new("m", -1);
    osp_buffer *buf = osp_buffer_new_host(sizeof(float));
    memcpy(buf->data, &value, sizeof value);
    osp_shape shape = {1, {1}};
    EXPECT_EQ(
        osp_infer_request_add_input(req, "IN", OSP_TYPE_FP32, &shape, buf),
        nullptr);
    return req;
}

osp_infer_response *Response(int32_t first) {
    auto *resp = static_cast<osp_infer_response *>(
        calloc(1, sizeof(osp_infer_response)));
    resp->outputs =
        static_cast<osp_infer_output *>(calloc(2, sizeof(osp_infer_output)));
    resp->n_outputs = 1;
    osp_infer_output *o = &resp->outputs[0];
    o->name = strdup("OUT");
    o->dtype = OSP_TYPE_INT32;
    o->shape = {2, {1, 4}};
    o->data = osp_buffer_new_host(16);
    int32_t v[4] = {first, first + 1, first + 2, first + 3};
    memcpy(o->data->data, v, sizeof v);
    o->byte_size = 16;
    return resp;
}

// The first int of the cached OUT, or -1 on a miss.
int Lookup(response_cache *c, cache_key k) {
    auto *resp = static_cast<osp_infer_response *>(
        calloc(1, sizeof(osp_infer_response)));
    int first = -1;
    if (response_cache_lookup(c, k, resp)) {
        EXPECT_EQ(resp->n_outputs, 1u);
        EXPECT_STREQ(resp->outputs[0].name, "OUT");
        EXPECT_EQ(resp->outputs[0].byte_size, 16u);
        int32_t v[4];
        memcpy(v, resp->outputs[0].data->data, sizeof v);
        EXPECT_EQ(v[3], v[0] + 3);
        first = v[0];
    }
    osp_infer_response_free(resp);
    return first;
}

void Insert(response_cache *c, cache_key k, int32_t first) {
    osp_infer_response *resp = Response(first);
    response_cache_insert(c, k, resp);
    osp_infer_response_free(resp);
}

cache_key KeyOf(response_cache *c, float value) {
    osp_infer_request *req = Request(value);
    cache_key k = response_cache_key(c, "m", 1, req);
    osp_infer_request_free(req);
    return k;
}

std::string Hex(const cache_key &k) {
    char hex[65];
    cache_key_hex(&k, hex);
    return hex;
}

// Runs one command on its own connection; false when Redis did not answer.
bool RedisRun(int port, const std::vector<std::string> &args) {
    redisContext *ctx = redisConnect("127.0.0.1", port);
    if (!ctx || ctx->err) {
        if (ctx)
            redisFree(ctx);
        return false;
    }
    std::vector<const char *> argv;
    std::vector<size_t> lens;
    for (const auto &a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    auto *r = static_cast<redisReply *>(redisCommandArgv(
        ctx, static_cast<int>(args.size()), argv.data(), lens.data()));
    bool ok = r && r->type != REDIS_REPLY_ERROR;
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return ok;
}

double SecondsSince(uint64_t start) {
    return static_cast<double>(osp_now_ns() - start) / 1e9;
}

class RedisCache : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string why;
        if (!redis_.Start(&why))
            GTEST_SKIP() << why;
        opts_.host = "127.0.0.1";
        opts_.port = redis_.port();
        opts_.pool_size = 2;
        opts_.wait_timeout_ms = 1000;
        opts_.connect_timeout_ms = 1000;
        opts_.socket_timeout_ms = 300;
        char tmpl[] = "/tmp/osprey-cache-log-XXXXXX";
        int fd = mkstemp(tmpl);
        ASSERT_GE(fd, 0);
        close(fd);
        log_path_ = tmpl;
        ASSERT_EQ(osp_log_set_file(log_path_.c_str()), nullptr);
    }
    void TearDown() override {
        response_cache_free(a_);
        response_cache_free(b_);
        osp_log_close_file();
        if (!log_path_.empty())
            unlink(log_path_.c_str());
    }
    response_cache *Open() {
        response_cache *c = nullptr;
        EXPECT_EQ(response_cache_redis_new(&opts_, &c), nullptr);
        return c;
    }
    // How many records of the log hold `text`.
    int LogCount(const std::string &text) {
        std::ifstream in(log_path_);
        std::string line;
        int n = 0;
        while (std::getline(in, line))
            n += line.find(text) != std::string::npos;
        return n;
    }
    std::string Log() {
        std::ifstream in(log_path_);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    // Inserts under k until a lookup hits (Redis coming back), within 10 s.
    bool RecoversWithin10s(response_cache *c, cache_key k, int32_t first) {
        uint64_t deadline = osp_now_ns() + 10000000000ull;
        while (osp_now_ns() < deadline) {
            Insert(c, k, first);
            if (Lookup(c, k) == first)
                return true;
            usleep(20000);
        }
        return false;
    }

    RedisTestServer redis_;
    osp_redis_cache_options opts_ = {};
    response_cache *a_ = nullptr, *b_ = nullptr;
    std::string log_path_;
};

TEST_F(RedisCache, AResponseInsertedByOneReplicaIsAHitForAnother) {
    a_ = Open();
    b_ = Open();
    cache_key k = KeyOf(a_, 1.5f);
    ASSERT_EQ(k.len, 32u);
    // Both compute the same key: that is what makes the cache shared.
    EXPECT_EQ(Hex(k), Hex(KeyOf(b_, 1.5f)));
    EXPECT_EQ(Lookup(b_, k), -1);
    Insert(a_, k, 40);
    EXPECT_EQ(Lookup(b_, k), 40);
    EXPECT_EQ(Lookup(a_, k), 40);
    EXPECT_EQ(Lookup(b_, KeyOf(b_, 2.5f)), -1);

    response_cache_stats s;
    response_cache_get_stats(b_, &s);
    EXPECT_EQ(s.lookups, 3u);
    EXPECT_EQ(s.hits, 1u);
    EXPECT_EQ(s.misses, 2u);
    EXPECT_GT(s.lookup_ns, 0u);
    EXPECT_EQ(s.capacity, 0u); // Redis' maxmemory bounds it, not Osprey
    response_cache_get_stats(a_, &s);
    EXPECT_EQ(s.inserts, 1u);
    EXPECT_GT(s.insertion_ns, 0u);
    EXPECT_NE(Log().find("connected (pool of 2)"), std::string::npos);
    // No expiry, as Triton's: eviction is Redis' maxmemory policy.
    redisContext *ctx = redisConnect("127.0.0.1", redis_.port());
    ASSERT_TRUE(ctx && !ctx->err);
    auto *r = static_cast<redisReply *>(
        redisCommand(ctx, "TTL osprey:cache:%s", Hex(k).c_str()));
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->type, REDIS_REPLY_INTEGER);
    EXPECT_EQ(r->integer, -1);
    freeReplyObject(r);
    redisFree(ctx);
}

TEST_F(RedisCache, AValueItCannotReadIsAMissThenOverwritten) {
    a_ = Open();
    cache_key k = KeyOf(a_, 3.0f), h = KeyOf(a_, 4.0f);
    std::string name = "osprey:cache:" + Hex(k);
    ASSERT_TRUE(RedisRun(redis_.port(), {"SET", name, "OC\x01garbage"}));
    ASSERT_TRUE(
        RedisRun(redis_.port(), {"HSET", "osprey:cache:" + Hex(h), "f", "v"}));
    EXPECT_EQ(Lookup(a_, k), -1);
    EXPECT_EQ(Lookup(a_, h), -1); // WRONGTYPE: not a string
    EXPECT_EQ(LogCount("is not one this Osprey reads"), 2);
    Insert(a_, k, 7);
    Insert(a_, h, 8);
    EXPECT_EQ(Lookup(a_, k), 7);
    EXPECT_EQ(Lookup(a_, h), 8);
}

TEST_F(RedisCache, RedisKilledMidRunIsAMissThenRecovers) {
    a_ = Open();
    cache_key k = KeyOf(a_, 5.0f);
    Insert(a_, k, 50);
    ASSERT_EQ(Lookup(a_, k), 50);
    redis_.Stop();
    uint64_t start = osp_now_ns();
    for (int i = 0; i < 20; i++) {
        EXPECT_EQ(Lookup(a_, k), -1);
        Insert(a_, k, 51);
    }
    EXPECT_LT(SecondsSince(start), 2.0);      // refused at once, no waits
    EXPECT_EQ(LogCount("is unavailable"), 1); // once per outage
    std::string why;
    ASSERT_TRUE(redis_.Start(&why)) << why; // same port, empty
    ASSERT_TRUE(RecoversWithin10s(a_, k, 52));
    EXPECT_EQ(LogCount("is reachable again"), 1);
    // A second outage is logged again.
    redis_.Stop();
    EXPECT_EQ(Lookup(a_, k), -1);
    EXPECT_EQ(LogCount("is unavailable"), 2);
    response_cache_stats s;
    response_cache_get_stats(a_, &s);
    EXPECT_EQ(s.lookups, s.hits + s.misses);
    EXPECT_GE(s.misses, 21u);
}

TEST_F(RedisCache, AFrozenRedisIsAMissWithinTheSocketTimeout) {
    a_ = Open();
    cache_key k = KeyOf(a_, 6.0f);
    Insert(a_, k, 60);
    ASSERT_EQ(Lookup(a_, k), 60);
    redis_.Pause();
    uint64_t start = osp_now_ns();
    EXPECT_EQ(Lookup(a_, k), -1);
    // socket_timeout is 300 ms; one fresh try after a closed socket at most.
    EXPECT_LT(SecondsSince(start), 2.0);
    start = osp_now_ns();
    for (int i = 0; i < 10; i++) {
        EXPECT_EQ(Lookup(a_, k), -1);
        Insert(a_, k, 61);
    }
    // The outage is known: these did not wait for Redis at all.
    EXPECT_LT(SecondsSince(start), 0.25);
    EXPECT_EQ(LogCount("is unavailable"), 1);
    EXPECT_NE(Log().find("no reply within socket_timeout"), std::string::npos);
    redis_.Resume();
    ASSERT_TRUE(RecoversWithin10s(a_, k, 62));
}

TEST_F(RedisCache, NothingListeningIsAMissFromTheStart) {
    redis_.Stop(); // its port is now closed
    a_ = Open();   // starts anyway
    ASSERT_NE(a_, nullptr);
    cache_key k = KeyOf(a_, 7.0f);
    uint64_t start = osp_now_ns();
    EXPECT_EQ(Lookup(a_, k), -1);
    Insert(a_, k, 70);
    EXPECT_EQ(Lookup(a_, k), -1);
    EXPECT_LT(SecondsSince(start), 2.0);
    EXPECT_EQ(LogCount("is unavailable"), 1);
    EXPECT_EQ(LogCount("Failed to insert key"), 0); // the outage line says it
}

// More threads than connections: each command waits for a free one, and
// every hit is a whole value.
TEST_F(RedisCache, ThreadsShareAPoolSmallerThanThem) {
    opts_.pool_size = 2;
    a_ = Open();
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 8; t++)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 100; i++) {
                int v = (t * 100 + i) % 10;
                cache_key k = KeyOf(a_, static_cast<float>(v));
                int got = Lookup(a_, k);
                if (got == -1)
                    Insert(a_, k, v * 10);
                else if (got != v * 10)
                    wrong++;
            }
        });
    for (auto &th : threads)
        th.join();
    EXPECT_EQ(wrong.load(), 0);
    response_cache_stats s;
    response_cache_get_stats(a_, &s);
    EXPECT_EQ(s.lookups, 800u);
    EXPECT_GE(s.hits, 700u); // ten keys, each missed at most once per thread
    EXPECT_EQ(LogCount("unavailable"), 0);
}

TEST_F(RedisCache, SettingsOutOfRangeAreRefused) {
    response_cache *c = nullptr;
    osp_redis_cache_options bad = opts_;
    bad.pool_size = 0;
    osp_error *err = response_cache_redis_new(&bad, &c);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    osp_error_free(err);
    bad = opts_;
    bad.host = nullptr;
    err = response_cache_redis_new(&bad, &c);
    ASSERT_NE(err, nullptr);
    osp_error_free(err);
    EXPECT_EQ(c, nullptr);
}

class RedisCacheAuth : public RedisCache {
  protected:
    void SetUp() override {
        RedisCache::SetUp();
        if (IsSkipped())
            return;
        ASSERT_TRUE(RedisRun(redis_.port(),
                             {"CONFIG", "SET", "requirepass", "s3cret-pw"}));
    }
};

TEST_F(RedisCacheAuth, ThePasswordIsSentAndNeverLogged) {
    opts_.password = "wrong-pw";
    a_ = Open();
    EXPECT_EQ(Lookup(a_, KeyOf(a_, 8.0f)), -1);
    EXPECT_EQ(LogCount("AUTH refused"), 1);
    opts_.password = "s3cret-pw";
    b_ = Open();
    cache_key k = KeyOf(b_, 8.0f);
    Insert(b_, k, 80);
    EXPECT_EQ(Lookup(b_, k), 80);
    std::string log = Log();
    EXPECT_EQ(log.find("s3cret-pw"), std::string::npos);
    EXPECT_EQ(log.find("wrong-pw"), std::string::npos);
}

} // namespace
