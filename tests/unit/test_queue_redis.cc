// The Redis Streams queue store (server/queue/queue_redis*.c) through the
// public API of include/osprey/queue.h, against a real redis-server on a
// free loopback port: two store instances on one Redis act as two
// replicas; Redis is killed and restarted mid-test.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "osp_test.h"
#include "osprey/queue.h"
#include "queue_test_util.h"
#include "redis_test_server.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

RedisTestServer *g_redis = nullptr;
std::string g_skip;
std::atomic<int> g_prefix_seq{0};

// A store on the shared test Redis; each test gets its own key prefix
// (its own queues), and a short claim threshold for the dead-consumer
// cases.
osp_queue_store *OpenStore(const std::string &prefix, uint64_t max_length = 0,
                           uint64_t max_payload = 0, int claim_idle_ms = 600) {
    std::string url = g_redis->Url("/0?prefix=" + prefix + "&claim_idle_ms=" +
                                   std::to_string(claim_idle_ms));
    osp_queue_store_options opts = {};
    opts.url = url.c_str();
    opts.max_length = max_length;
    opts.max_payload_bytes = max_payload;
    osp_queue_store *store = nullptr;
    osp_error *err = osp_queue_store_open(&opts, &store);
    EXPECT_EQ(err, nullptr) << TakeMessage(err);
    return store;
}

std::string NewPrefix() {
    return "t" + std::to_string(getpid()) + "_" +
           std::to_string(g_prefix_seq++);
}

osp_queue *Queue(osp_queue_store *store, const char *name) {
    osp_queue *q = nullptr;
    osp_error *err = osp_queue_store_queue(store, name, &q);
    EXPECT_EQ(err, nullptr) << TakeMessage(err);
    return q;
}

struct PutResult {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    osp_error_code code = OSP_ERROR_UNKNOWN;
    osp_error_reason reason = OSP_REASON_NONE;
    std::string message;
    uint64_t index = 0;
    std::string request_id;
};

void OnPut(void *ctx, osp_error *err, uint64_t index, const char *rid) {
    auto *r = static_cast<PutResult *>(ctx);
    std::lock_guard<std::mutex> lock(r->mu);
    if (err != nullptr) {
        r->code = osp_error_get_code(err);
        r->reason = osp_error_get_reason(err);
        r->message = osp_error_message(err);
        osp_error_free(err);
    }
    r->index = index;
    r->request_id = rid ? rid : "";
    r->done = true;
    r->cv.notify_all();
}

// Puts and waits; the index (0 on error: *res says why).
uint64_t Put(osp_queue *q, const std::string &data,
             std::vector<osp_queue_tag> tags = {}, int priority = 0,
             PutResult *res = nullptr) {
    PutResult local;
    PutResult *r = res ? res : &local;
    osp_queue_put_args args = {};
    args.data = data.data();
    args.size = data.size();
    args.tags = tags.data();
    args.n_tags = tags.size();
    args.priority = priority;
    osp_queue_put(q, &args, OnPut, r);
    std::unique_lock<std::mutex> lock(r->mu);
    r->cv.wait_for(lock, std::chrono::seconds(10), [&] { return r->done; });
    EXPECT_TRUE(r->done);
    return r->index;
}

struct DoneResult {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string error;
    osp_error_code code = OSP_ERROR_UNKNOWN;
};

void OnDone(void *ctx, osp_error *err) {
    auto *r = static_cast<DoneResult *>(ctx);
    std::lock_guard<std::mutex> lock(r->mu);
    if (err != nullptr) {
        r->code = osp_error_get_code(err);
        r->error = osp_error_message(err);
        osp_error_free(err);
    }
    r->done = true;
    r->cv.notify_all();
}

std::string Wait(DoneResult *r) {
    std::unique_lock<std::mutex> lock(r->mu);
    r->cv.wait_for(lock, std::chrono::seconds(10), [&] { return r->done; });
    EXPECT_TRUE(r->done);
    return r->error;
}

std::string Delete(osp_queue *q, std::vector<uint64_t> idx) {
    DoneResult r;
    osp_queue_delete(q, idx.data(), idx.size(), OnDone, &r);
    return Wait(&r);
}

std::string Commit(osp_queue *q, const char *gid, const char *uid,
                   std::vector<uint64_t> idx) {
    DoneResult r;
    osp_queue_commit(q, gid, uid, idx.data(), idx.size(), OnDone, &r);
    return Wait(&r);
}

struct GetResult {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    osp_error_code code = OSP_ERROR_UNKNOWN;
    std::string error;
    std::vector<uint64_t> indexes;
    std::vector<std::string> data;
    std::vector<std::string> request_ids;
};

void OnItems(void *ctx, osp_error *err, osp_queue_item **items, size_t n) {
    auto *r = static_cast<GetResult *>(ctx);
    std::lock_guard<std::mutex> lock(r->mu);
    if (err != nullptr) {
        r->code = osp_error_get_code(err);
        r->error = osp_error_message(err);
        osp_error_free(err);
    }
    for (size_t i = 0; i < n; i++) {
        r->indexes.push_back(items[i]->index);
        r->data.emplace_back(static_cast<const char *>(items[i]->data),
                             items[i]->size);
        r->request_ids.emplace_back(items[i]->request_id);
    }
    osp_queue_items_free(items, n);
    r->done = true;
    r->cv.notify_all();
}

void StartGet(osp_queue *q, GetResult *r, uint64_t index, size_t length,
              uint64_t timeout_ms, bool auto_delete,
              const char *request_id = nullptr) {
    osp_queue_get_args args = {};
    args.index = index;
    args.length = length;
    args.request_id = request_id;
    args.auto_delete = auto_delete;
    args.timeout_ns = timeout_ms * 1000000ull;
    osp_queue_get(q, &args, OnItems, r);
}

void WaitGet(GetResult *r, int seconds = 10) {
    std::unique_lock<std::mutex> lock(r->mu);
    r->cv.wait_for(lock, std::chrono::seconds(seconds),
                   [&] { return r->done; });
    EXPECT_TRUE(r->done);
}

using queue_test::Attributes;
using queue_test::Length;

// A consumer that records what it is given and, when asked, commits each
// item from its deliver callback.
struct Recorder {
    osp_queue *queue = nullptr;
    std::string gid, uid;
    bool commit_on_deliver = false;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<uint64_t> got;

    static void Deliver(void *ctx, osp_queue_item *item) {
        auto *self = static_cast<Recorder *>(ctx);
        uint64_t index = item->index;
        osp_queue_item_free(item);
        {
            std::lock_guard<std::mutex> lock(self->mu);
            self->got.push_back(index);
            self->cv.notify_all();
        }
        if (self->commit_on_deliver)
            osp_queue_commit(self->queue, self->gid.c_str(), self->uid.c_str(),
                             &index, 1, IgnoreDone, nullptr);
    }
    static void IgnoreDone(void *, osp_error *err) {
        osp_error_free(err);
    }

    osp_queue_consumer *Open(osp_queue *q, const char *g, const char *u,
                             unsigned window, int64_t start = 0,
                             bool auto_commit = false) {
        queue = q;
        gid = g;
        uid = u;
        osp_queue_consumer_args args = {};
        args.gid = gid.c_str();
        args.uid = uid.c_str();
        args.start_index = start;
        args.window = window;
        args.auto_commit = auto_commit;
        args.deliver = Deliver;
        args.ctx = this;
        osp_queue_consumer *c = nullptr;
        osp_error *err = osp_queue_consumer_open(q, &args, &c);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
        return c;
    }
    // Waits until at least n items arrived; how many did.
    size_t WaitFor(size_t n, int ms) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, milliseconds(ms), [&] { return got.size() >= n; });
        return got.size();
    }
    std::vector<uint64_t> Got() {
        std::lock_guard<std::mutex> lock(mu);
        return got;
    }
};

class QueueRedis : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        g_redis = new RedisTestServer();
        if (!g_redis->Start(&g_skip)) {
            delete g_redis;
            g_redis = nullptr;
        }
    }
    static void TearDownTestSuite() {
        delete g_redis;
        g_redis = nullptr;
    }
    void SetUp() override {
        if (g_redis == nullptr)
            GTEST_SKIP() << g_skip;
        if (!g_redis->running()) {
            std::string why;
            ASSERT_TRUE(g_redis->Start(&why)) << why;
        }
        prefix_ = NewPrefix();
    }
    std::string prefix_;
};

TEST_F(QueueRedis, UrlErrorsAreInvalidArg) {
    for (const char *url :
         {"redis://", "redis://host", "redis://h:0", "redis://h:99999",
          "redis://h:1/x", "redis://h:1?nope=1",
          "redis://h:1?claim_idle_ms=0"}) {
        osp_queue_store_options opts = {};
        opts.url = url;
        osp_queue_store *store = nullptr;
        osp_error *err = osp_queue_store_open(&opts, &store);
        ASSERT_NE(err, nullptr) << url;
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG) << url;
        osp_error_free(err);
    }
}

TEST_F(QueueRedis, PutOnOneReplicaGetOnTheOther) {
    osp_queue_store *a = OpenStore(prefix_), *b = OpenStore(prefix_);
    osp_queue *qa = Queue(a, "svc"), *qb = Queue(b, "svc");
    PutResult p1, p2;
    EXPECT_EQ(Put(qa, "one", {}, 0, &p1), 1u);
    EXPECT_EQ(Put(qb, "two", {{"requestId", "rid-2"}, {"k", "v"}}, 0, &p2), 2u);
    EXPECT_EQ(p1.request_id.size(), 36u);
    EXPECT_EQ(p2.request_id, "rid-2");
    EXPECT_EQ(Length(qa), 2u);
    EXPECT_EQ(Length(qb), 2u);

    GetResult g;
    StartGet(qb, &g, 0, 10, 0, false);
    WaitGet(&g);
    EXPECT_EQ(g.error, "");
    EXPECT_EQ(g.indexes, (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(g.data, (std::vector<std::string>{"one", "two"}));

    // By request id, deleting: gone for both replicas.
    GetResult byid;
    StartGet(qa, &byid, 0, 1, 0, true, "rid-2");
    WaitGet(&byid);
    EXPECT_EQ(byid.indexes, (std::vector<uint64_t>{2}));
    EXPECT_EQ(byid.request_ids, (std::vector<std::string>{"rid-2"}));
    EXPECT_EQ(Length(qb), 1u);

    osp_queue_store_free(a);
    osp_queue_store_free(b);
}

TEST_F(QueueRedis, LongPollOnOneReplicaSeesAPutOnTheOther) {
    osp_queue_store *a = OpenStore(prefix_), *b = OpenStore(prefix_);
    osp_queue *qa = Queue(a, "svc/sink"), *qb = Queue(b, "svc/sink");
    GetResult g;
    auto t0 = Clock::now();
    StartGet(qb, &g, 0, 1, 5000, true);
    std::this_thread::sleep_for(milliseconds(300));
    {
        std::lock_guard<std::mutex> lock(g.mu);
        EXPECT_FALSE(g.done);
    }
    Put(qa, "late");
    WaitGet(&g);
    auto waited = Clock::now() - t0;
    EXPECT_EQ(g.data, (std::vector<std::string>{"late"}));
    EXPECT_LT(waited, milliseconds(1500));

    // Nothing there: a get with a timeout answers empty after it.
    GetResult empty;
    t0 = Clock::now();
    StartGet(qa, &empty, 0, 1, 300, true);
    WaitGet(&empty);
    EXPECT_TRUE(empty.indexes.empty());
    EXPECT_EQ(empty.error, "");
    EXPECT_GE(Clock::now() - t0, milliseconds(290));

    osp_queue_store_free(a);
    osp_queue_store_free(b);
}

TEST_F(QueueRedis, WatchOnOneReplicaSeesPutsOnTheOther) {
    osp_queue_store *a = OpenStore(prefix_), *b = OpenStore(prefix_);
    osp_queue *qa = Queue(a, "svc"), *qb = Queue(b, "svc");
    Recorder rec;
    osp_queue_consumer *c = rec.Open(qb, "eas", "w1", 5);
    for (int i = 0; i < 3; i++)
        Put(qa, "x" + std::to_string(i));
    EXPECT_EQ(rec.WaitFor(3, 3000), 3u);
    EXPECT_EQ(rec.Got(), (std::vector<uint64_t>{1, 2, 3}));
    // The window: 5 delivered and uncommitted at most.
    for (int i = 0; i < 4; i++)
        Put(qa, "y");
    EXPECT_EQ(rec.WaitFor(6, 800), 5u);
    EXPECT_EQ(rec.Got().size(), 5u);
    // A commit through replica A frees a slot of B's consumer.
    EXPECT_EQ(Commit(qa, "eas", "w1", {1}), "");
    EXPECT_EQ(rec.WaitFor(6, 3000), 6u);

    osp_queue_search_result s;
    ASSERT_OK(osp_queue_search(qa, 2, &s));
    EXPECT_TRUE(s.found);
    EXPECT_TRUE(s.is_pending);
    EXPECT_STREQ(s.consumer_id, "eas.w1");
    ASSERT_OK(osp_queue_search(qa, 7, &s));
    EXPECT_TRUE(s.found);
    EXPECT_FALSE(s.is_pending);
    ASSERT_OK(osp_queue_search(qa, 1, &s));
    EXPECT_FALSE(s.found);

    auto attrs = Attributes(qa);
    EXPECT_EQ(attrs["consumers.stats.total"], "1");
    EXPECT_NE(attrs["consumers.list.[0]"].find("Id: eas.w1, "),
              std::string::npos)
        << attrs["consumers.list.[0]"];
    osp_queue_consumer_close(c);
    osp_queue_store_free(a);
    osp_queue_store_free(b);
}

TEST_F(QueueRedis, AGroupSplitsItemsExactlyOnceAcrossReplicas) {
    osp_queue_store *a = OpenStore(prefix_), *b = OpenStore(prefix_);
    osp_queue *qa = Queue(a, "svc"), *qb = Queue(b, "svc");
    Recorder ra, rb, other;
    ra.commit_on_deliver = rb.commit_on_deliver = true;
    osp_queue_consumer *ca = ra.Open(qa, "workers", "a", 2);
    osp_queue_consumer *cb = rb.Open(qb, "workers", "b", 2);
    // Another group sees everything (it does not commit: window 100).
    osp_queue_consumer *co = other.Open(qa, "audit", "x", 100);
    const int n = 60;
    std::thread producer_b([&] {
        for (int i = 0; i < n / 2; i++)
            Put(qb, "b");
    });
    for (int i = 0; i < n / 2; i++)
        Put(qa, "a");
    producer_b.join();
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (ra.Got().size() + rb.Got().size() < (size_t)n &&
           Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(20));
    std::this_thread::sleep_for(milliseconds(300));
    std::multiset<uint64_t> all;
    for (uint64_t i : ra.Got())
        all.insert(i);
    for (uint64_t i : rb.Got())
        all.insert(i);
    EXPECT_EQ(all.size(), (size_t)n);
    for (uint64_t i = 1; i <= (uint64_t)n; i++)
        EXPECT_EQ(all.count(i), 1u) << "index " << i;
    EXPECT_GT(ra.Got().size(), 0u);
    EXPECT_GT(rb.Got().size(), 0u);
    osp_queue_consumer_close(ca);
    osp_queue_consumer_close(cb);
    osp_queue_consumer_close(co);
    // Commits delete for every group: the audit group saw some items
    // before they were committed, none twice.
    std::vector<uint64_t> audit = other.Got();
    std::set<uint64_t> seen(audit.begin(), audit.end());
    EXPECT_EQ(seen.size(), audit.size());
    EXPECT_EQ(Length(qa), 0u);
    osp_queue_store_free(a);
    osp_queue_store_free(b);
}

TEST_F(QueueRedis, ADeadReplicasPendingItemsAreClaimedByAnother) {
    std::string prefix = prefix_;
    // Replica A runs in a child process that takes two items and dies
    // without closing anything.
    {
        osp_queue_store *s = OpenStore(prefix);
        osp_queue *q = Queue(s, "svc");
        for (int i = 0; i < 3; i++)
            Put(q, "item" + std::to_string(i));
        osp_queue_store_free(s);
    }
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        osp_queue_store *s = OpenStore(prefix);
        Recorder rec;
        rec.Open(Queue(s, "svc"), "eas", "dying", 2);
        _exit(rec.WaitFor(2, 5000) == 2 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);

    osp_queue_store *b = OpenStore(prefix);
    osp_queue *qb = Queue(b, "svc");
    osp_queue_search_result s;
    ASSERT_OK(osp_queue_search(qb, 1, &s));
    EXPECT_TRUE(s.is_pending);
    EXPECT_STREQ(s.consumer_id, "eas.dying");
    Recorder rec;
    auto t0 = Clock::now();
    osp_queue_consumer *c = rec.Open(qb, "eas", "survivor", 10);
    // Item 3 was never delivered: at once. Items 1 and 2 after the claim
    // threshold (600 ms since the dead consumer's last heartbeat).
    EXPECT_GE(rec.WaitFor(1, 2000), 1u);
    EXPECT_EQ(rec.WaitFor(3, 5000), 3u);
    std::vector<uint64_t> delivered = rec.Got();
    std::set<uint64_t> got(delivered.begin(), delivered.end());
    EXPECT_EQ(got, (std::set<uint64_t>{1, 2, 3}));
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(4));
    osp_queue_stats st;
    osp_queue_get_stats(qb, &st);
    EXPECT_EQ(st.redeliveries, 2u);
    osp_queue_consumer_close(c);
    osp_queue_store_free(b);
}

TEST_F(QueueRedis, TheSameConsumerBackGetsItsUncommittedItemsFirst) {
    osp_queue_store *a = OpenStore(prefix_, 0, 0, 10000);
    osp_queue *q = Queue(a, "svc");
    for (int i = 0; i < 4; i++)
        Put(q, "v");
    Recorder first;
    osp_queue_consumer *c = first.Open(q, "eas", "u1", 2);
    ASSERT_EQ(first.WaitFor(2, 3000), 2u);
    osp_queue_consumer_close(c);
    // Another consumer of the group does not get them within the grace
    // period, the same gid.uid does at once.
    Recorder other;
    osp_queue_consumer *co = other.Open(q, "eas", "u2", 4);
    EXPECT_EQ(other.WaitFor(2, 2000), 2u);
    EXPECT_EQ(other.Got(), (std::vector<uint64_t>{3, 4}));
    Recorder again;
    c = again.Open(q, "eas", "u1", 2);
    EXPECT_EQ(again.WaitFor(2, 3000), 2u);
    EXPECT_EQ(again.Got(), (std::vector<uint64_t>{1, 2}));
    osp_queue_consumer_close(c);
    osp_queue_consumer_close(co);
    osp_queue_store_free(a);
}

TEST_F(QueueRedis, LimitsAreCheckedBeforeStoring) {
    osp_queue_store *a = OpenStore(prefix_, 3, 8);
    osp_queue *q = Queue(a, "svc");
    PutResult big;
    EXPECT_EQ(Put(q, "123456789", {}, 0, &big), 0u);
    EXPECT_EQ(big.code, OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(big.reason, OSP_REASON_TOO_LARGE);
    EXPECT_EQ(Put(q, "12345678"), 1u); // the limit is inclusive
    EXPECT_EQ(Put(q, "b"), 2u);
    EXPECT_EQ(Put(q, "c"), 3u);
    PutResult full;
    EXPECT_EQ(Put(q, "d", {}, 0, &full), 0u);
    EXPECT_EQ(full.code, OSP_ERROR_UNAVAILABLE);
    EXPECT_EQ(full.reason, OSP_REASON_QUEUE_FULL);
    EXPECT_EQ(Length(q), 3u);
    EXPECT_EQ(Delete(q, {1}), "");
    EXPECT_EQ(Put(q, "e"), 4u); // indexes continue past the refusal
    osp_queue_store_free(a);
}

TEST_F(QueueRedis, PutsInFlightTogetherArePipelinedInOrder) {
    // 100 puts at once: the store threads send the waiting ones in
    // pipelines. Each is answered once, with its own index, and the queue
    // limit cuts in the middle of a pipeline exactly as one by one.
    osp_queue_store *a = OpenStore(prefix_, 60);
    osp_queue *q = Queue(a, "svc");
    const int n = 100;
    std::vector<PutResult> res(n);
    std::vector<std::string> data(n);
    for (int i = 0; i < n; i++) {
        data[i] = "item" + std::to_string(i);
        osp_queue_put_args args = {};
        args.data = data[i].data();
        args.size = data[i].size();
        osp_queue_put(q, &args, OnPut, &res[i]);
    }
    std::set<uint64_t> indexes;
    int full = 0;
    for (auto &r : res) {
        std::unique_lock<std::mutex> lock(r.mu);
        ASSERT_TRUE(r.cv.wait_for(lock, std::chrono::seconds(10),
                                  [&] { return r.done; }));
        if (r.index != 0) {
            indexes.insert(r.index);
        } else {
            EXPECT_EQ(r.reason, OSP_REASON_QUEUE_FULL) << r.message;
            full++;
        }
    }
    EXPECT_EQ(indexes.size(), 60u);
    EXPECT_EQ(*indexes.begin(), 1u);
    EXPECT_EQ(*indexes.rbegin(), 60u);
    EXPECT_EQ(full, 40);
    EXPECT_EQ(Length(q), 60u);
    osp_queue_store_free(a);
}

TEST_F(QueueRedis, IndexesContinueAcrossDeletesTruncateAndInstances) {
    osp_queue_store *a = OpenStore(prefix_);
    osp_queue *q = Queue(a, "svc");
    for (int i = 0; i < 5; i++)
        Put(q, "v");
    DoneResult tr;
    osp_queue_truncate(q, 4, OnDone, &tr);
    EXPECT_EQ(Wait(&tr), "");
    auto attrs = Attributes(q);
    EXPECT_EQ(attrs["stream.length"], "2");
    EXPECT_EQ(attrs["stream.firstEntry"], "4");
    EXPECT_EQ(attrs["stream.lastEntry"], "5");
    EXPECT_EQ(attrs["meta.backend"], "redis");
    EXPECT_EQ(Delete(q, {4, 5, 99}), "");
    attrs = Attributes(q);
    EXPECT_EQ(attrs["stream.length"], "0");
    EXPECT_EQ(attrs.count("stream.lastEntry"), 0u);
    osp_queue_store_free(a);
    osp_queue_store *b = OpenStore(prefix_);
    EXPECT_EQ(Put(Queue(b, "svc"), "v"), 6u);
    EXPECT_EQ(Put(Queue(b, "other"), "v"), 1u); // per queue
    osp_queue_store_free(b);
}

TEST_F(QueueRedis, PriorityFirstThenIndexAndCounts) {
    osp_queue_store *a = OpenStore(prefix_);
    osp_queue *q = Queue(a, "svc");
    Put(q, "normal1", {{"k", "a"}});
    Put(q, "urgent", {{"k", "b"}}, 1);
    Put(q, "normal2", {{"k", "a"}});
    GetResult g;
    StartGet(q, &g, 0, 3, 0, false);
    WaitGet(&g);
    EXPECT_EQ(g.data,
              (std::vector<std::string>{"urgent", "normal1", "normal2"}));
    uint64_t n = 0;
    osp_queue_tag ka = {"k", "a"};
    ASSERT_OK(osp_queue_count(q, -1, &ka, 1, &n));
    EXPECT_EQ(n, 2u);
    ASSERT_OK(osp_queue_count(q, 1, nullptr, 0, &n));
    EXPECT_EQ(n, 1u);
    ASSERT_OK(osp_queue_count(q, -1, nullptr, 0, &n));
    EXPECT_EQ(n, 3u);
    osp_queue_search_result s;
    ASSERT_OK(osp_queue_search(q, 3, &s));
    EXPECT_TRUE(s.found);
    EXPECT_EQ(s.wait_count, 2u);
    // A consumer gets the urgent item first too.
    Recorder rec;
    osp_queue_consumer *c = rec.Open(q, "eas", "u", 3);
    EXPECT_EQ(rec.WaitFor(3, 3000), 3u);
    EXPECT_EQ(rec.Got(), (std::vector<uint64_t>{2, 1, 3}));
    osp_queue_consumer_close(c);
    osp_queue_store_free(a);
}

TEST_F(QueueRedis, RedisDownMeansUnavailableAndTheStoreRecovers) {
    osp_queue_store *a = OpenStore(prefix_);
    osp_queue *q = Queue(a, "svc");
    Recorder rec;
    osp_queue_consumer *c = rec.Open(q, "eas", "u", 100, 0, true);
    EXPECT_EQ(Put(q, "before"), 1u);
    EXPECT_EQ(rec.WaitFor(1, 3000), 1u);
    GetResult waiting; // a long poll across the outage
    StartGet(q, &waiting, 0, 1, 8000, true);
    std::this_thread::sleep_for(milliseconds(200)); // it waits now

    g_redis->Stop();
    PutResult down;
    EXPECT_EQ(Put(q, "during", {}, 0, &down), 0u);
    EXPECT_EQ(down.code, OSP_ERROR_UNAVAILABLE);
    EXPECT_NE(down.message.find("queue store unavailable"), std::string::npos)
        << down.message;
    GetResult g;
    StartGet(q, &g, 0, 1, 0, false);
    WaitGet(&g);
    EXPECT_EQ(g.code, OSP_ERROR_UNAVAILABLE);
    osp_queue_attribute *attrs = nullptr;
    size_t n = 0;
    osp_error *err = osp_queue_attributes(q, &attrs, &n);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNAVAILABLE);
    osp_error_free(err);

    std::string why;
    ASSERT_TRUE(g_redis->Start(&why)) << why;
    // Back within the backoff; Redis lost everything (no persistence), the
    // index still continues from what this replica saw.
    uint64_t index = 0;
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (index == 0 && Clock::now() < deadline) {
        index = Put(q, "after");
        if (index == 0)
            std::this_thread::sleep_for(milliseconds(100));
    }
    EXPECT_EQ(index, 2u);
    // The put reaches either the waiting get or the consumer, whichever
    // runs first; one more makes sure the consumer resumed.
    WaitGet(&waiting);
    EXPECT_EQ(waiting.error, "");
    EXPECT_EQ(Put(q, "after2"), 3u);
    size_t got = rec.WaitFor(3, 5000);
    EXPECT_GE(got + waiting.indexes.size(), 3u);
    osp_queue_consumer_close(c);
    osp_queue_store_free(a);
}

TEST_F(QueueRedis, EndOfStreamAndReject) {
    osp_queue_store *a = OpenStore(prefix_);
    osp_queue *q = Queue(a, "svc");
    for (int i = 0; i < 3; i++)
        Put(q, "v");
    Recorder r1;
    osp_queue_consumer *c1 = r1.Open(q, "eas", "u1", 1);
    ASSERT_EQ(r1.WaitFor(1, 3000), 1u);
    // A worker shutting down gives its item back: another consumer of the
    // group takes it at once instead of after the grace period.
    osp_queue_consumer_close(c1);
    DoneResult rj;
    uint64_t idx = r1.Got()[0];
    osp_queue_reject(q, "eas", "u1", &idx, 1, "Shutdown", "test", OnDone, &rj);
    EXPECT_EQ(Wait(&rj), "");
    Recorder r2;
    osp_queue_consumer *c2 = r2.Open(q, "eas", "u2", 1);
    ASSERT_EQ(r2.WaitFor(1, 3000), 1u);
    EXPECT_EQ(r2.Got()[0], idx);
    // Forced end: what no one holds is deleted, the held item stays.
    DoneResult e;
    osp_queue_end(q, true, OnDone, &e);
    EXPECT_EQ(Wait(&e), "");
    auto attrs = Attributes(q);
    EXPECT_EQ(attrs["meta.state"], "End");
    EXPECT_EQ(attrs["stream.length"], "1");
    osp_queue_consumer_close(c2);
    osp_queue_store_free(a);
}

} // namespace
