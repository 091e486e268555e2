// The queue store contract (include/osprey/queue.h, the store-level
// semantics of ../shared/protocols/eas-queue.md §2, §3 and §6), run on
// every store in kStores. A store joins by adding one row: a function that
// opens a fresh, empty store with the limits it is given, and one that
// cleans up after it. Nothing below may depend on which store it is.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "osp_test.h"
#include "osprey/queue.h"
#include "queue_test_util.h"
#include "redis_test_server.h"

using namespace queue_test;
using namespace std::chrono_literals;

namespace {

// ---- the stores ----

struct StoreFactory {
    const char *name;
    // Opens a fresh, empty store. `opts` holds the limits; the factory
    // fills in where the store lives. *env is the factory's own state,
    // given back to teardown after the store is freed.
    osp_error *(*open)(osp_queue_store_options *opts, void **env,
                       osp_queue_store **out);
    void (*teardown)(void *env);
};

osp_error *OpenEmbedded(osp_queue_store_options *opts, void **env,
                        osp_queue_store **out) {
    char tmpl[] = "/tmp/osprey-queue-conformance-XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (dir == nullptr)
        return osp_error_new(OSP_ERROR_INTERNAL, "mkdtemp failed");
    auto *path = new std::string(dir);
    *env = path;
    opts->dir = path->c_str();
    opts->fsync = OSP_QUEUE_FSYNC_NONE; // the semantics, not the disk
    return osp_queue_store_open(opts, out);
}

void TeardownEmbedded(void *env) {
    auto *path = static_cast<std::string *>(env);
    std::error_code ec;
    std::filesystem::remove_all(*path, ec);
    delete path;
}

// Redis Streams: one redis-server for the program, a key prefix of its
// own per store (so every store starts empty).
osp_error *OpenRedis(osp_queue_store_options *opts, void **env,
                     osp_queue_store **out) {
    static std::atomic<int> seq{0};
    std::string why;
    RedisTestServer *server = SharedRedisTestServer(&why);
    if (server == nullptr)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "redis-server: %s",
                             why.c_str());
    auto *url = new std::string(server->Url("/0?prefix=conf" +
                                            std::to_string(getpid()) + "_" +
                                            std::to_string(seq++)));
    *env = url;
    opts->url = url->c_str();
    return osp_queue_store_open(opts, out);
}

void TeardownRedis(void *env) {
    delete static_cast<std::string *>(env);
}

// gtest prints a parameter with this (its name, not its bytes).
[[maybe_unused]] void PrintTo(const StoreFactory &f, std::ostream *os) {
    *os << f.name;
}

const StoreFactory kStores[] = {
    {"embedded", OpenEmbedded, TeardownEmbedded},
    {"redis", OpenRedis, TeardownRedis},
};

constexpr uint64_t kMaxPayload = 1024;
constexpr uint64_t kMaxLength = 50;
constexpr uint64_t kGraceMs = 500;

class QueueConformance : public ::testing::TestWithParam<StoreFactory> {
  protected:
    void SetUp() override {
        osp_queue_store_options opts = {};
        opts.max_payload_bytes = kMaxPayload;
        opts.max_length = kMaxLength;
        opts.consumer_grace_ns = kGraceMs * 1000000ull;
        ASSERT_OK(GetParam().open(&opts, &env_, &store_));
        ASSERT_OK(osp_queue_store_queue(store_, "svc", &q_));
    }
    void TearDown() override {
        CloseStore();
        if (env_ != nullptr)
            GetParam().teardown(env_);
    }
    void CloseStore() {
        osp_queue_store_free(store_);
        store_ = nullptr;
    }
    osp_queue *Queue(const char *name) {
        osp_queue *q = nullptr;
        osp_error *err = osp_queue_store_queue(store_, name, &q);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
        return q;
    }
    std::vector<uint64_t> PutMany(osp_queue *q, int n, int from = 0) {
        std::vector<uint64_t> indexes;
        for (int i = from; i < from + n; i++) {
            PutResult r = Put(q, std::to_string(i));
            EXPECT_TRUE(r.status.ok) << r.status.message;
            indexes.push_back(r.index);
        }
        return indexes;
    }

    void *env_ = nullptr;
    osp_queue_store *store_ = nullptr;
    osp_queue *q_ = nullptr;
};

// ---- items, indexes, request ids ----

TEST_P(QueueConformance, IndexesStartAtOneAndStrictlyIncrease) {
    auto idx = PutMany(q_, 10);
    EXPECT_EQ(idx.front(), 1u);
    for (size_t i = 1; i < idx.size(); i++)
        EXPECT_GT(idx[i], idx[i - 1]);
    // Deleting the newest does not give its index out again.
    ASSERT_TRUE(Delete(q_, {idx.back()}).ok);
    EXPECT_GT(Put(q_, "x").index, idx.back());
    ASSERT_TRUE(Truncate(q_, 1000).ok);
    EXPECT_GT(Put(q_, "y").index, idx.back() + 1);
}

TEST_P(QueueConformance, RequestIdsUniqueAndStoredAsTag) {
    std::set<std::string> ids;
    const int n = 40; // more than one refill of the random byte pool
    for (int i = 0; i < n; i++) {
        PutResult r = Put(q_, "d");
        ASSERT_TRUE(r.status.ok);
        // a version 4 UUID: 8-4-4-4-12 lowercase hex digits
        const std::string &id = r.request_id;
        ASSERT_EQ(id.size(), 36u) << id;
        for (size_t c = 0; c < id.size(); c++) {
            if (c == 8 || c == 13 || c == 18 || c == 23)
                EXPECT_EQ(id[c], '-') << id;
            else
                EXPECT_TRUE(isxdigit((unsigned char)id[c]) &&
                            !isupper((unsigned char)id[c]))
                    << id;
        }
        EXPECT_EQ(id[14], '4') << id;
        EXPECT_NE(std::string("89ab").find(id[19]), std::string::npos) << id;
        ids.insert(id);
    }
    EXPECT_EQ(ids.size(), (size_t)n);
    GetResult g = Get(q_, GetOptions().Length(1));
    ASSERT_EQ(g.items.size(), 1u);
    EXPECT_EQ(g.items[0].tags["requestId"], g.items[0].request_id);
}

TEST_P(QueueConformance, RequestIdTagIsKept) {
    PutResult r = Put(q_, "result", {{"requestId", "abc-1"}, {"k", "v"}});
    ASSERT_TRUE(r.status.ok);
    EXPECT_EQ(r.request_id, "abc-1");
    GetResult g = Get(q_, GetOptions().RequestId("abc-1"));
    ASSERT_EQ(g.items.size(), 1u);
    EXPECT_EQ(g.items[0].data, "result");
    EXPECT_EQ(g.items[0].request_id, "abc-1");
    EXPECT_EQ(g.items[0].tags["requestId"], "abc-1");
    EXPECT_EQ(g.items[0].tags["k"], "v");
}

TEST_P(QueueConformance, HigherPriorityFirstThenIndex) {
    Put(q_, "n1");
    Put(q_, "n2");
    Put(q_, "u1", {}, 1);
    Put(q_, "n3");
    Put(q_, "u2", {}, 1);
    GetResult g = Get(q_, GetOptions().Length(10));
    ASSERT_EQ(g.items.size(), 5u);
    std::vector<std::string> order;
    for (auto &it : g.items)
        order.push_back(it.data);
    EXPECT_EQ(order, (std::vector<std::string>{"u1", "u2", "n1", "n2", "n3"}));
    EXPECT_EQ(g.items[0].priority, 1);
}

TEST_P(QueueConformance, GetByIndexAndLengthKeepsItems) {
    auto idx = PutMany(q_, 10);
    GetResult g = Get(q_, GetOptions().Index(idx[3]).Length(2));
    ASSERT_TRUE(g.status.ok);
    ASSERT_EQ(g.items.size(), 2u);
    EXPECT_EQ(g.items[0].index, idx[3]);
    EXPECT_EQ(g.items[1].index, idx[4]);
    EXPECT_EQ(g.items[0].data, "3");
    EXPECT_EQ(Length(q_), 10u);
}

TEST_P(QueueConformance, GetByRequestIdAutoDeletes) {
    std::vector<PutResult> puts;
    for (int i = 0; i < 10; i++)
        puts.push_back(Put(q_, std::to_string(i)));
    GetResult g = Get(
        q_,
        GetOptions().RequestId(puts[7].request_id.c_str()).AutoDelete(true));
    ASSERT_EQ(g.items.size(), 1u);
    EXPECT_EQ(g.items[0].data, "7");
    EXPECT_EQ(g.items[0].tags["requestId"], puts[7].request_id);
    EXPECT_EQ(Length(q_), 9u);
    g = Get(q_, GetOptions().RequestId(puts[7].request_id.c_str()));
    EXPECT_TRUE(g.items.empty());
}

TEST_P(QueueConformance, GetByTags) {
    Put(q_, "a", {{"foo", "x"}});
    Put(q_, "b", {{"foo", "y"}, {"bar", "1"}});
    Put(q_, "c", {{"foo", "y"}});
    GetResult g = Get(q_, GetOptions().Length(10).Filters({{"foo", "y"}}));
    ASSERT_EQ(g.items.size(), 2u);
    EXPECT_EQ(g.items[0].data, "b");
    EXPECT_EQ(g.items[1].data, "c");
    g = Get(q_, GetOptions().Length(10).Filters({{"foo", "y"}, {"bar", "1"}}));
    ASSERT_EQ(g.items.size(), 1u);
    EXPECT_EQ(g.items[0].data, "b");
}

TEST_P(QueueConformance, EmptyGetAnswersAtOnce) {
    auto start = std::chrono::steady_clock::now();
    GetResult g = Get(Queue("svc/sink"), GetOptions().AutoDelete(true));
    EXPECT_TRUE(g.status.ok);
    EXPECT_TRUE(g.items.empty());
    EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
}

TEST_P(QueueConformance, LongPollWakesOnPut) {
    osp_queue *sink = Queue("svc/sink");
    TagArray none({});
    Pending<GetResult> p;
    auto start = std::chrono::steady_clock::now();
    GetAsync(sink, GetOptions().AutoDelete(true).TimeoutMs(3000), p, none);
    // The get did not block its caller, and has not answered yet.
    EXPECT_LT(std::chrono::steady_clock::now() - start, 200ms);
    EXPECT_FALSE(p.Wait(100ms));
    std::thread putter([&] { Put(sink, "late"); });
    ASSERT_TRUE(p.Wait(2500ms));
    putter.join();
    ASSERT_EQ(p.value.items.size(), 1u);
    EXPECT_EQ(p.value.items[0].data, "late");
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2500ms);
    EXPECT_EQ(Length(sink), 0u); // auto-deleted
}

TEST_P(QueueConformance, LongPollByRequestIdWakesOnlyForIt) {
    osp_queue *sink = Queue("svc/sink");
    TagArray none({});
    Pending<GetResult> p;
    GetOptions o =
        GetOptions().RequestId("rid-9").AutoDelete(true).TimeoutMs(3000);
    GetAsync(sink, o, p, none);
    Put(sink, "other", {{"requestId", "rid-8"}});
    EXPECT_FALSE(p.Wait(200ms));
    Put(sink, "mine", {{"requestId", "rid-9"}});
    ASSERT_TRUE(p.Wait(2s));
    ASSERT_EQ(p.value.items.size(), 1u);
    EXPECT_EQ(p.value.items[0].data, "mine");
    EXPECT_EQ(Length(sink), 1u);
}

TEST_P(QueueConformance, LongPollTimesOutEmpty) {
    auto start = std::chrono::steady_clock::now();
    GetResult g = Get(q_, GetOptions().TimeoutMs(300));
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_TRUE(g.status.ok);
    EXPECT_TRUE(g.items.empty());
    EXPECT_GE(took, 250ms);
    EXPECT_LT(took, 3s);
}

TEST_P(QueueConformance, WaitingGetFailsWhenStoreCloses) {
    TagArray none({});
    Pending<GetResult> p;
    GetAsync(q_, GetOptions().TimeoutMs(60000), p, none);
    EXPECT_FALSE(p.Wait(50ms));
    CloseStore();
    ASSERT_TRUE(p.Wait(1s));
    EXPECT_FALSE(p.value.status.ok);
    EXPECT_EQ(p.value.status.code, OSP_ERROR_UNAVAILABLE);
    EXPECT_EQ(p.value.status.reason, OSP_REASON_SHUTTING_DOWN);
}

// ---- delete, truncate, commit ----

TEST_P(QueueConformance, DeleteAndTruncate) {
    auto idx = PutMany(q_, 10);
    ASSERT_TRUE(Delete(q_, {idx[0], idx[1], 999999}).ok);
    EXPECT_EQ(Length(q_), 8u);
    auto attrs = Attributes(q_);
    EXPECT_EQ(attrs["stream.firstEntry"], std::to_string(idx[2]));
    ASSERT_TRUE(Truncate(q_, idx[5]).ok); // deletes every index < idx[5]
    EXPECT_EQ(Length(q_), 5u);
    EXPECT_EQ(Attributes(q_)["stream.firstEntry"], std::to_string(idx[5]));
    ASSERT_TRUE(
        Truncate(q_, std::stoull(Attributes(q_)["stream.lastEntry"]) + 1).ok);
    EXPECT_EQ(Length(q_), 0u);
    attrs = Attributes(q_);
    EXPECT_EQ(attrs.count("stream.firstEntry"), 0u);
    EXPECT_EQ(attrs.count("stream.lastEntry"), 0u);
}

TEST_P(QueueConformance, CommitDeletesAndIsIdempotent) {
    auto idx = PutMany(q_, 3);
    ASSERT_TRUE(Commit(q_, "eas", "u1", {idx[0]}).ok);
    ASSERT_TRUE(Commit(q_, "eas", "u1", {idx[0]}).ok);
    ASSERT_TRUE(Commit(q_, "eas", "u1", {123456}).ok);
    EXPECT_EQ(Length(q_), 2u);
    osp_queue_stats stats;
    osp_queue_get_stats(q_, &stats);
    EXPECT_EQ(stats.commits, 1u);
}

// ---- consumers ----

TEST_P(QueueConformance, WindowEnforcedAndCommitFreesOneSlot) {
    auto idx = PutMany(q_, 8);
    Consumer c(q_, "eas", "w1", 5);
    ASSERT_TRUE(c.WaitFor(5));
    auto items = c.Items();
    for (int i = 0; i < 5; i++) {
        EXPECT_EQ(items[i].index, idx[i]);
        EXPECT_EQ(items[i].data, std::to_string(i));
    }
    EXPECT_FALSE(c.WaitFor(6, 300ms)) << "window exceeded";
    ASSERT_TRUE(Commit(q_, "eas", "w1", {items[0].index}).ok);
    ASSERT_TRUE(c.WaitFor(6, 2s));
    EXPECT_EQ(c.Items()[5].index, idx[5]);
    EXPECT_FALSE(c.WaitFor(7, 200ms));
    std::vector<uint64_t> rest;
    for (auto &it : c.Items())
        rest.push_back(it.index);
    ASSERT_TRUE(Commit(q_, "eas", "w1", rest).ok);
    ASSERT_TRUE(c.WaitFor(8, 2s));
    c.Close();
    EXPECT_EQ(Length(q_), 2u); // the last two were sent, not committed
}

TEST_P(QueueConformance, CommitFromDeliverCallback) {
    PutMany(q_, 6);
    Consumer c(q_, "eas", "cb", 1, 0, false, {}, /*commit_in_callback=*/true);
    ASSERT_TRUE(c.WaitFor(6, 3s));
    EXPECT_EQ(c.concurrent_violations(), 0);
    c.Close();
    for (int i = 0; i < 50 && Length(q_) != 0; i++)
        std::this_thread::sleep_for(20ms);
    EXPECT_EQ(Length(q_), 0u);
}

TEST_P(QueueConformance, ItemsPutLaterArePushed) {
    Consumer c(q_, "eas", "p1", 3);
    EXPECT_FALSE(c.WaitFor(1, 100ms));
    Put(q_, "a");
    Put(q_, "b");
    ASSERT_TRUE(c.WaitFor(2, 2s));
    EXPECT_EQ(c.Items()[0].data, "a");
    EXPECT_EQ(c.Items()[1].data, "b");
}

TEST_P(QueueConformance, AutoCommitDeletesDelivered) {
    osp_queue *sink = Queue("svc/sink");
    PutMany(sink, 10);
    Consumer c(sink, "eas", "ac", 5, 0, /*auto_commit=*/true);
    ASSERT_TRUE(c.WaitFor(10, 3s));
    c.Close();
    for (int i = 0; i < 50 && Length(sink) != 0; i++)
        std::this_thread::sleep_for(20ms);
    EXPECT_EQ(Length(sink), 0u);
}

TEST_P(QueueConformance, ConsumerTagFilters) {
    osp_queue *sink = Queue("svc/sink");
    Put(sink, "x", {{"foo", "x"}});
    Put(sink, "y", {{"foo", "y"}});
    Consumer c(sink, "eas", "f", 5, 0, true, {{"foo", "y"}});
    ASSERT_TRUE(c.WaitFor(1, 2s));
    EXPECT_FALSE(c.WaitFor(2, 200ms));
    EXPECT_EQ(c.Items()[0].data, "y");
}

TEST_P(QueueConformance, StartIndexNewestOnlyAndFromIndex) {
    auto idx = PutMany(q_, 4);
    Consumer latest(q_, "g-latest", "u", 10, -1);
    Consumer from(q_, "g-from", "u", 10, static_cast<int64_t>(idx[2]));
    ASSERT_TRUE(from.WaitFor(2, 2s));
    EXPECT_EQ(from.Items()[0].index, idx[2]);
    EXPECT_FALSE(latest.WaitFor(1, 200ms));
    PutResult r = Put(q_, "new");
    ASSERT_TRUE(latest.WaitFor(1, 2s));
    EXPECT_EQ(latest.Items()[0].index, r.index);
}

TEST_P(QueueConformance, SameGroupLoadBalances) {
    Consumer a(q_, "eas", "a", 1);
    Consumer b(q_, "eas", "b", 1);
    PutMany(q_, 2);
    ASSERT_TRUE(a.WaitFor(1, 2s));
    ASSERT_TRUE(b.WaitFor(1, 2s));
    EXPECT_NE(a.Items()[0].index, b.Items()[0].index);
    // Commit as they come: every item goes to exactly one of them.
    PutMany(q_, 8, 2);
    std::set<uint64_t> seen;
    for (int round = 0; round < 100 && seen.size() < 10; round++) {
        for (Consumer *c : {&a, &b})
            for (auto &it : c->Items())
                if (seen.insert(it.index).second)
                    Commit(q_, "eas", c == &a ? "a" : "b", {it.index});
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(seen.size(), 10u);
    EXPECT_EQ(a.Count() + b.Count(), 10u) << "an item went to both";
    EXPECT_GE(a.Count(), 1u);
    EXPECT_GE(b.Count(), 1u);
}

TEST_P(QueueConformance, DifferentGroupsFanOut) {
    Consumer a(q_, "g1", "u", 10);
    Consumer b(q_, "g2", "u", 10);
    auto idx = PutMany(q_, 5);
    ASSERT_TRUE(a.WaitFor(5, 2s));
    ASSERT_TRUE(b.WaitFor(5, 2s));
    for (int i = 0; i < 5; i++) {
        EXPECT_EQ(a.Items()[i].index, idx[i]);
        EXPECT_EQ(b.Items()[i].index, idx[i]);
    }
}

TEST_P(QueueConformance, DroppedConsumerGetsItsItemsBackWithinGrace) {
    auto idx = PutMany(q_, 4);
    auto first = std::make_unique<Consumer>(q_, "eas", "same", 2);
    ASSERT_TRUE(first->WaitFor(2, 2s));
    first.reset(); // dropped with two uncommitted
    Consumer again(q_, "eas", "same", 2);
    ASSERT_TRUE(again.WaitFor(2, 2s));
    EXPECT_EQ(again.Items()[0].index, idx[0]);
    EXPECT_EQ(again.Items()[1].index, idx[1]);
    EXPECT_FALSE(again.WaitFor(3, 200ms)) << "window exceeded on rejoin";
    // Committing twice is harmless.
    ASSERT_TRUE(Commit(q_, "eas", "same", {idx[0], idx[1]}).ok);
    ASSERT_TRUE(Commit(q_, "eas", "same", {idx[0], idx[1]}).ok);
    ASSERT_TRUE(again.WaitFor(4, 2s));
    EXPECT_EQ(again.Items()[2].index, idx[2]);
}

TEST_P(QueueConformance, DroppedConsumerItemsGoToGroupAfterGrace) {
    auto idx = PutMany(q_, 2);
    auto gone = std::make_unique<Consumer>(q_, "eas", "gone", 5);
    ASSERT_TRUE(gone->WaitFor(2, 2s));
    gone.reset();
    Consumer other(q_, "eas", "other", 5);
    // Held for "gone" during the grace period...
    EXPECT_FALSE(other.WaitFor(1, std::chrono::milliseconds(kGraceMs / 2)));
    // ...then the group gets them.
    ASSERT_TRUE(other.WaitFor(2, 3s));
    EXPECT_EQ(other.Items()[0].index, idx[0]);
    EXPECT_EQ(other.Items()[1].index, idx[1]);
    osp_queue_stats stats;
    osp_queue_get_stats(q_, &stats);
    EXPECT_EQ(stats.redeliveries, 2u);
}

TEST_P(QueueConformance, RejectMakesItemsDeliverableAgain) {
    auto idx = PutMany(q_, 1);
    Consumer a(q_, "eas", "a", 1);
    ASSERT_TRUE(a.WaitFor(1, 2s));
    ASSERT_TRUE(Reject(q_, "eas", "a", {idx[0]}).ok);
    ASSERT_TRUE(a.WaitFor(2, 2s));
    EXPECT_EQ(a.Items()[1].index, idx[0]);
}

TEST_P(QueueConformance, DeleteOfHeldItemFreesTheSlot) {
    auto idx = PutMany(q_, 2);
    Consumer a(q_, "eas", "a", 1);
    ASSERT_TRUE(a.WaitFor(1, 2s));
    ASSERT_TRUE(Delete(q_, {idx[0]}).ok);
    ASSERT_TRUE(a.WaitFor(2, 2s));
    EXPECT_EQ(a.Items()[1].index, idx[1]);
}

// ---- limits ----

TEST_P(QueueConformance, PayloadLimitIsInclusiveAndNothingStored) {
    EXPECT_TRUE(Put(q_, std::string(kMaxPayload, 'a')).status.ok);
    PutResult r = Put(q_, std::string(kMaxPayload + 1, 'a'));
    EXPECT_FALSE(r.status.ok);
    EXPECT_EQ(r.status.code, OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(r.status.reason, OSP_REASON_TOO_LARGE);
    EXPECT_EQ(r.index, 0u);
    EXPECT_EQ(Length(q_), 1u);
}

TEST_P(QueueConformance, FullQueueRefusesAndStoresNothing) {
    PutMany(q_, kMaxLength);
    PutResult r = Put(q_, "one too many");
    EXPECT_FALSE(r.status.ok);
    EXPECT_EQ(r.status.code, OSP_ERROR_UNAVAILABLE);
    EXPECT_EQ(r.status.reason, OSP_REASON_QUEUE_FULL);
    EXPECT_EQ(Length(q_), kMaxLength);
    ASSERT_TRUE(Delete(q_, {1}).ok);
    EXPECT_TRUE(Put(q_, "room again").status.ok);
}

// ---- attributes, search, count, end, stats ----

TEST_P(QueueConformance, AttributesOfNewAndFilledQueue) {
    auto attrs = Attributes(q_);
    EXPECT_EQ(attrs["stream.length"], "0");
    EXPECT_EQ(attrs.count("stream.lastEntry"), 0u);
    EXPECT_EQ(attrs["meta.name"], "svc");
    EXPECT_EQ(attrs["meta.state"], "OK");
    EXPECT_EQ(attrs["meta.maxPayloadBytes"], std::to_string(kMaxPayload));
    EXPECT_EQ(attrs["stream.approxMaxLength"], std::to_string(kMaxLength));
    EXPECT_EQ(attrs["meta.header.user"], "X-EAS-QueueService-Redis-Uid");
    EXPECT_EQ(attrs["meta.header.group"], "X-EAS-QueueService-Redis-Gid");
    EXPECT_FALSE(attrs["meta.backend"].empty());
    EXPECT_EQ(attrs["consumers.stats.total"], "0");

    auto idx = PutMany(q_, 10);
    Consumer c(q_, "eas", "u1", 5, 0, false, {{"foo", "bar"}});
    // A Redis consumer's line appears with its first turn on a store
    // thread, a moment after it opens (the embedded store's at once).
    auto deadline = std::chrono::steady_clock::now() + 2s;
    attrs = Attributes(q_);
    while (attrs["consumers.stats.total"] != "1" &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
        attrs = Attributes(q_);
    }
    EXPECT_EQ(attrs["stream.length"], "10");
    EXPECT_EQ(attrs["stream.firstEntry"], std::to_string(idx[0]));
    EXPECT_EQ(attrs["stream.lastEntry"], std::to_string(idx[9]));
    EXPECT_EQ(attrs["consumers.stats.total"], "1");
    const std::string &line = attrs["consumers.list.[0]"];
    EXPECT_NE(line.find("Id: eas.u1"), std::string::npos) << line;
    EXPECT_NE(line.find("Window: 5"), std::string::npos) << line;
    EXPECT_NE(line.find("Tags: tags[foo=bar]"), std::string::npos) << line;
    EXPECT_NE(attrs["groups.list.[0]"].find("eas"), std::string::npos);
}

TEST_P(QueueConformance, SearchPendingWaitingAndUnknown) {
    auto idx = PutMany(q_, 4);
    Consumer c(q_, "eas", "s1", 1);
    ASSERT_TRUE(c.WaitFor(1, 2s));
    osp_queue_search_result r;
    ASSERT_OK(osp_queue_search(q_, idx[0], &r));
    EXPECT_TRUE(r.found);
    EXPECT_TRUE(r.is_pending);
    EXPECT_STREQ(r.consumer_id, "eas.s1");
    EXPECT_EQ(r.wait_count, 0u);
    ASSERT_OK(osp_queue_search(q_, idx[3], &r));
    EXPECT_TRUE(r.found);
    EXPECT_FALSE(r.is_pending);
    EXPECT_EQ(r.wait_count, 2u); // idx[1] and idx[2] wait ahead of it
    ASSERT_OK(osp_queue_search(q_, 987654, &r));
    EXPECT_FALSE(r.found);
}

TEST_P(QueueConformance, CountByPriorityAndTags) {
    Put(q_, "a", {{"t", "1"}});
    Put(q_, "b", {{"t", "2"}}, 1);
    Put(q_, "c", {{"t", "1"}}, 1);
    uint64_t n = 0;
    ASSERT_OK(osp_queue_count(q_, -1, nullptr, 0, &n));
    EXPECT_EQ(n, 3u);
    ASSERT_OK(osp_queue_count(q_, 1, nullptr, 0, &n));
    EXPECT_EQ(n, 2u);
    osp_queue_tag t1 = {"t", "1"};
    ASSERT_OK(osp_queue_count(q_, -1, &t1, 1, &n));
    EXPECT_EQ(n, 2u);
    ASSERT_OK(osp_queue_count(q_, 0, &t1, 1, &n));
    EXPECT_EQ(n, 1u);
}

TEST_P(QueueConformance, EndOfStream) {
    PutMany(q_, 3);
    ASSERT_TRUE(End(q_, false).ok);
    EXPECT_EQ(Attributes(q_)["meta.state"], "End");
    EXPECT_EQ(Length(q_), 3u);
}

TEST_P(QueueConformance, ForcedEndDropsUndeliveredOnly) {
    auto idx = PutMany(q_, 3);
    Consumer c(q_, "eas", "e", 1);
    ASSERT_TRUE(c.WaitFor(1, 2s));
    ASSERT_TRUE(End(q_, true).ok);
    EXPECT_EQ(Attributes(q_)["meta.state"], "End");
    EXPECT_EQ(Length(q_), 1u); // the delivered one is kept
    osp_queue_search_result r;
    ASSERT_OK(osp_queue_search(q_, idx[0], &r));
    EXPECT_TRUE(r.found);
}

TEST_P(QueueConformance, Stats) {
    auto idx = PutMany(q_, 5);
    Get(q_, GetOptions().Length(2));
    Commit(q_, "eas", "u", {idx[0]});
    Consumer c(q_, "eas", "st", 1);
    ASSERT_TRUE(c.WaitFor(1, 2s));
    osp_queue_stats s;
    osp_queue_get_stats(q_, &s);
    EXPECT_EQ(s.length, 4u);
    EXPECT_EQ(s.puts, 5u);
    EXPECT_EQ(s.gets, 2u);
    EXPECT_EQ(s.commits, 1u);
    EXPECT_EQ(s.consumers, 1u);
}

TEST_P(QueueConformance, QueuesAreSeparateAndListed) {
    osp_queue *a = Queue("test_group.qservice");
    osp_queue *b = Queue("test_group.qservice/sink");
    EXPECT_EQ(Queue("test_group.qservice"), a);
    EXPECT_STREQ(osp_queue_name(b), "test_group.qservice/sink");
    Put(a, "1");
    EXPECT_EQ(Length(b), 0u);
    EXPECT_EQ(Put(b, "x").index, 1u);
    std::set<std::string> names;
    osp_queue_store_foreach(
        store_,
        [](void *ctx, osp_queue *q) {
            static_cast<std::set<std::string> *>(ctx)->insert(
                osp_queue_name(q));
        },
        &names);
    EXPECT_TRUE(names.count("test_group.qservice"));
    EXPECT_TRUE(names.count("test_group.qservice/sink"));
    osp_queue *bad = nullptr;
    osp_error *err = osp_queue_store_queue(store_, "", &bad);
    EXPECT_NE(err, nullptr);
    osp_error_free(err);
}

TEST_P(QueueConformance, ConcurrentPutsGetDistinctIndexes) {
    osp_queue *q = Queue("concurrent");
    std::vector<std::thread> threads;
    std::mutex mu;
    std::set<uint64_t> indexes;
    for (int t = 0; t < 4; t++)
        threads.emplace_back([&] {
            for (int i = 0; i < 10; i++) {
                PutResult r = Put(q, "c");
                std::lock_guard<std::mutex> lock(mu);
                indexes.insert(r.index);
            }
        });
    for (auto &t : threads)
        t.join();
    EXPECT_EQ(indexes.size(), 40u);
    EXPECT_EQ(*indexes.begin(), 1u);
    EXPECT_EQ(*indexes.rbegin(), 40u);
}

INSTANTIATE_TEST_SUITE_P(Stores, QueueConformance, ::testing::ValuesIn(kStores),
                         [](const auto &info) {
                             return std::string(info.param.name);
                         });

} // namespace
