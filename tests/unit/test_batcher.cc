// The dynamic batcher (server/core/scheduling/batcher.h) driven by a fake
// clock: delays, preferred sizes, priority levels, queue policies (size limit,
// REJECT and DELAY timeouts), shape compatibility and response ordering.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "batcher.h"
#include "osprey/model_config.h"

namespace {

const uint64_t kUs = 1000;
const uint64_t kMs = 1000 * kUs;

// A fake request: the entry plus what the test checks.
struct Req {
    batcher_entry entry{};
    int id = 0;
    int shape = 0; // requests batch together only with equal shapes
};

bool SameShape(const batcher_entry *a, const batcher_entry *b, void *) {
    return static_cast<const Req *>(a->owner)->shape ==
           static_cast<const Req *>(b->owner)->shape;
}

// One batcher over a config given as config.pbtxt text (inputs added).
class Queue {
  public:
    explicit Queue(const std::string &pbtxt) {
        std::string text =
            "name: \"m\"\n"
            "input { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] }\n"
            "output { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] }\n" +
            pbtxt;
        osp_error *err = osp_model_config_parse(text.data(), text.size(),
                                                "config.pbtxt", &cfg_);
        EXPECT_EQ(err, nullptr) << (err ? osp_error_message(err) : "");
        osp_error_free(err);
        err = batcher_init(&b_, cfg_, SameShape, nullptr);
        EXPECT_EQ(err, nullptr);
        osp_error_free(err);
    }
    ~Queue() {
        batcher_destroy(&b_);
        osp_model_config_free(cfg_);
    }
    Queue(const Queue &) = delete;
    Queue &operator=(const Queue &) = delete;

    // Queues request `id`; returns "" or the error message.
    std::string Add(int id, int64_t rows = 1, uint64_t priority = 0,
                    uint64_t timeout_us = 0, int shape = 0) {
        reqs_.emplace_back();
        Req &r = reqs_.back();
        r.id = id;
        r.shape = shape;
        r.entry.owner = &r;
        r.entry.batch_size = rows;
        r.entry.priority = priority;
        r.entry.timeout_us = timeout_us;
        osp_error *err = batcher_enqueue(&b_, &r.entry, now);
        if (!err)
            return "";
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNAVAILABLE);
        std::string msg = osp_error_message(err);
        osp_error_free(err);
        return msg;
    }

    // The ids of the next batch ({} = none ready; see wait, expired).
    std::vector<int> Take(bool flush = false) {
        std::vector<batcher_entry *> slots(batcher_max_entries(&b_));
        batcher_entry *gone = nullptr;
        size_t n = batcher_take(&b_, now, flush, slots.data(), slots.size(),
                                &gone, &wait);
        std::vector<int> ids;
        for (size_t i = 0; i < n; i++) {
            ids.push_back(static_cast<Req *>(slots[i]->owner)->id);
            taken.push_back(slots[i]);
        }
        for (; gone; gone = gone->next)
            expired.push_back(static_cast<Req *>(gone->owner)->id);
        return ids;
    }

    size_t Queued() const {
        return batcher_queued(&b_);
    }

    // Removes the requests whose id is in `ids`; returns the removed ids
    // in list order.
    std::vector<int> RemoveIf(const std::vector<int> &ids) {
        batcher_entry *gone = nullptr;
        size_t n = batcher_remove_if(
            &b_,
            [](const batcher_entry *e, void *ctx) {
                auto *want = static_cast<const std::vector<int> *>(ctx);
                int id = static_cast<const Req *>(e->owner)->id;
                return std::find(want->begin(), want->end(), id) != want->end();
            },
            const_cast<std::vector<int> *>(&ids), &gone);
        std::vector<int> out;
        for (; gone; gone = gone->next)
            out.push_back(static_cast<Req *>(gone->owner)->id);
        EXPECT_EQ(n, out.size());
        return out;
    }

    uint64_t now = 5 * 1000 * kMs; // any origin: only differences matter
    uint64_t wait = 0;             // from the last Take
    std::vector<int> expired;      // REJECTed so far, latest first per call
    std::vector<batcher_entry *> taken;

  private:
    osp_model_config *cfg_ = nullptr;
    batcher b_{};
    std::deque<Req> reqs_; // stable addresses
};

using Ids = std::vector<int>;

TEST(Batcher, WithoutDynamicBatchingEachRequestRunsAloneInFifoOrder) {
    Queue q("max_batch_size: 8\n");
    EXPECT_EQ(q.Add(1, 1, 3), "");
    EXPECT_EQ(q.Add(2, 2, 1), ""); // priorities do not apply
    EXPECT_EQ(q.Add(3, 1, 0, 1), "");
    EXPECT_EQ(q.Take(), Ids({1}));
    EXPECT_EQ(q.Take(), Ids({2}));
    q.now += 10 * kMs; // no timeouts either
    EXPECT_EQ(q.Take(), Ids({3}));
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.wait, 0u);
    EXPECT_TRUE(q.expired.empty());
}

TEST(Batcher, EmptyQueueAsksToWaitForAnArrival) {
    Queue q("max_batch_size: 8\ndynamic_batching { }\n");
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.wait, 0u);
}

TEST(Batcher, DelayIsHonouredFromTheOldestRequest) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000 }\n");
    q.Add(1);
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.wait, 1000 * kUs);
    q.now += 400 * kUs;
    q.Add(2);
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.wait, 600 * kUs); // counted from request 1, not 2
    q.now += 599 * kUs;
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.wait, 1 * kUs);
    q.now += 1 * kUs;
    EXPECT_EQ(q.Take(), Ids({1, 2}));
    EXPECT_EQ(q.Queued(), 0u);
}

TEST(Batcher, ZeroDelaySendsWhateverIsQueued) {
    Queue q("max_batch_size: 8\ndynamic_batching { }\n");
    q.Add(1);
    q.Add(2);
    q.Add(3);
    EXPECT_EQ(q.Take(), Ids({1, 2, 3}));
}

TEST(Batcher, FullMaxBatchGoesWithoutWaiting) {
    Queue q("max_batch_size: 4\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000 }\n");
    for (int i = 1; i <= 5; i++)
        q.Add(i);
    EXPECT_EQ(q.Take(), Ids({1, 2, 3, 4})); // preferred defaults to [4]
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.wait, 1000 * kMs);
}

TEST(Batcher, BatchDimensionsAreCountedNotRequests) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000 }\n");
    q.Add(1, 5);
    q.Add(2, 4); // 9 rows would not fit in 8
    q.Add(3, 3);
    EXPECT_EQ(q.Take(), Ids({1}));
    EXPECT_EQ(q.Take(), Ids()); // 7 rows wait for an 8th
    q.Add(4, 5);
    EXPECT_EQ(q.Take(), Ids({2, 3})); // 12 rows would not fit
    EXPECT_EQ(q.Take(), Ids());
    q.Add(5, 3);
    EXPECT_EQ(q.Take(), Ids({4, 5}));
}

TEST(Batcher, LargestReachablePreferredSizeGoesAtOnce) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { preferred_batch_size: [ 2, 4 ]\n"
            "  max_queue_delay_microseconds: 1000000 }\n");
    q.Add(1);
    EXPECT_EQ(q.Take(), Ids());
    q.Add(2);
    q.Add(3);
    EXPECT_EQ(q.Take(), Ids({1, 2})); // 3 is not preferred; 2 is
    EXPECT_EQ(q.Take(), Ids());
    for (int i = 4; i <= 8; i++)
        q.Add(i);
    EXPECT_EQ(q.Take(), Ids({3, 4, 5, 6})); // 4 beats 2
    EXPECT_EQ(q.Take(), Ids({7, 8}));       // 2 is preferred too
}

TEST(Batcher, PreferredSizeOfRowsAndOverflowPastTheLargest) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { preferred_batch_size: [ 4 ]\n"
            "  max_queue_delay_microseconds: 1000000 }\n");
    q.Add(1, 3);
    EXPECT_EQ(q.Take(), Ids());
    q.Add(2, 2); // 5 rows would pass the largest preferred size (4)
    EXPECT_EQ(q.Take(), Ids({1}));
    q.Add(3, 2);
    EXPECT_EQ(q.Take(), Ids({2, 3})); // exactly 4
}

TEST(Batcher, DelayRunOutSendsEverythingThatFits) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { preferred_batch_size: [ 4 ]\n"
            "  max_queue_delay_microseconds: 100 }\n");
    for (int i = 1; i <= 6; i++)
        q.Add(i);
    q.now += 100 * kUs;
    // The oldest waited the delay: up to max_batch_size goes, not just 4.
    EXPECT_EQ(q.Take(), Ids({1, 2, 3, 4, 5, 6}));
}

TEST(Batcher, HigherPriorityFirstFifoWithinALevel) {
    Queue q(
        "max_batch_size: 1\n"
        "dynamic_batching { priority_levels: 3 default_priority_level: 2 }\n");
    q.Add(1, 1, 3);
    q.Add(2, 1, 0); // default level 2
    q.Add(3, 1, 1);
    q.Add(4, 1, 9); // out of range: default level
    q.Add(5, 1, 1);
    EXPECT_EQ(q.Take(), Ids({3}));
    EXPECT_EQ(q.Take(), Ids({5}));
    EXPECT_EQ(q.Take(), Ids({2}));
    EXPECT_EQ(q.Take(), Ids({4}));
    EXPECT_EQ(q.Take(), Ids({1}));
    EXPECT_EQ(q.Queued(), 0u);
}

TEST(Batcher, ABatchSpansLevelsInPriorityOrder) {
    Queue q(
        "max_batch_size: 8\n"
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 }\n");
    q.Add(1, 1, 2);
    q.Add(2, 1, 1);
    q.Add(3, 1, 2);
    EXPECT_EQ(q.Take(), Ids({2, 1, 3}));
}

TEST(Batcher, FullQueueRefusesWithTritonsMessage) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000\n"
            "  preferred_batch_size: [ 8 ]\n"
            "  default_queue_policy { max_queue_size: 1 } }\n");
    EXPECT_EQ(q.Add(1), "");
    EXPECT_EQ(q.Add(2), "Exceeds maximum queue size");
    EXPECT_EQ(q.Queued(), 1u);
    q.now += 1000 * kMs;
    EXPECT_EQ(q.Take(), Ids({1}));
    EXPECT_EQ(q.Add(3), ""); // room again
}

TEST(Batcher, QueueSizeIsPerPriorityLevel) {
    Queue q(
        "max_batch_size: 8\n"
        "dynamic_batching { max_queue_delay_microseconds: 1000000\n"
        "  priority_levels: 2 default_priority_level: 2\n"
        "  default_queue_policy { max_queue_size: 2 }\n"
        "  priority_queue_policy { key: 1 value { max_queue_size: 1 } } }\n");
    EXPECT_EQ(q.Add(1, 1, 1), "");
    EXPECT_EQ(q.Add(2, 1, 1), "Exceeds maximum queue size");
    EXPECT_EQ(q.Add(3, 1, 2), "");
    EXPECT_EQ(q.Add(4, 1, 2), "");
    EXPECT_EQ(q.Add(5, 1, 0), "Exceeds maximum queue size");
}

TEST(Batcher, RejectTimeoutExpiresTheRequest) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000\n"
            "  default_queue_policy { timeout_action: REJECT\n"
            "    default_timeout_microseconds: 100 } }\n");
    q.Add(1);
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.wait, 101 * kUs); // wakes just past the deadline
    q.now += 100 * kUs;
    EXPECT_EQ(q.Take(), Ids()); // at the deadline: still valid
    EXPECT_TRUE(q.expired.empty());
    q.now += 1 * kUs;
    q.Add(2);
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.expired, Ids({1}));
    EXPECT_EQ(q.Queued(), 1u);
}

TEST(Batcher, RequestTimeoutOnlyShortensAnAllowedDefault) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000\n"
            "  default_queue_policy { default_timeout_microseconds: 1000\n"
            "    allow_timeout_override: true } }\n");
    q.Add(1, 1, 0, 100);  // shorter: 100 us
    q.Add(2, 1, 0, 5000); // longer: the default 1000 us applies
    q.now += 101 * kUs;
    q.Take();
    EXPECT_EQ(q.expired, Ids({1}));
    q.now += 900 * kUs;
    q.Take();
    EXPECT_EQ(q.expired, Ids({1, 2}));
}

TEST(Batcher, RequestTimeoutIgnoredWithoutOverride) {
    Queue q(
        "max_batch_size: 8\n"
        "dynamic_batching { max_queue_delay_microseconds: 1000000\n"
        "  default_queue_policy { default_timeout_microseconds: 1000 } }\n");
    q.Add(1, 1, 0, 100);
    q.now += 500 * kUs;
    q.Take();
    EXPECT_TRUE(q.expired.empty());
    q.now += 501 * kUs;
    q.Take();
    EXPECT_EQ(q.expired, Ids({1}));
}

TEST(Batcher, NoDefaultTimeoutMeansNoneEvenWithOverride) {
    // Triton: a request may only lower the default, and 0 is "none".
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000\n"
            "  default_queue_policy { allow_timeout_override: true } }\n");
    q.Add(1, 1, 0, 100);
    q.now += 500 * kMs;
    q.Take();
    EXPECT_TRUE(q.expired.empty());
}

TEST(Batcher, DelayTimeoutMovesTheRequestBehindTheOthers) {
    Queue q("max_batch_size: 1\n"
            "dynamic_batching { default_queue_policy {\n"
            "  timeout_action: DELAY default_timeout_microseconds: 100 } }\n");
    q.Add(1);
    q.now += 200 * kUs;
    q.Add(2);
    q.Add(3);
    EXPECT_EQ(q.Take(), Ids({2})); // 1 expired: it waits behind 2 and 3
    EXPECT_EQ(q.Take(), Ids({3}));
    EXPECT_EQ(q.Take(), Ids({1})); // but it still runs
    EXPECT_TRUE(q.expired.empty());
}

TEST(Batcher, RemoveIfTakesRequestsOutOfEveryLevelAndList) {
    // cancelled requests leave the queue wherever they wait: any level,
    // unexpired or delayed, and the counts and deadlines follow
    Queue q("max_batch_size: 1\n"
            "dynamic_batching { priority_levels: 2 default_priority_level: 2\n"
            "  default_queue_policy { timeout_action: DELAY\n"
            "    default_timeout_microseconds: 100 } }\n");
    q.Add(1, 1, 1);
    q.Add(2, 1, 2);
    q.now += 200 * kUs; // 1 and 2 expire: delayed
    q.Add(3, 1, 2);
    q.Add(4, 1, 1);
    EXPECT_EQ(q.Take(), Ids({4}));
    std::vector<int> gone = q.RemoveIf({1, 3, 9});
    std::sort(gone.begin(), gone.end());
    EXPECT_EQ(gone, Ids({1, 3}));
    EXPECT_EQ(q.Queued(), 1u);
    EXPECT_EQ(q.Take(), Ids({2}));
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.wait, 0u);
    EXPECT_EQ(q.RemoveIf({1}), Ids()); // nothing left to remove
}

TEST(Batcher, DelayedRequestsStillCountAgainstTheQueueSize) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000\n"
            "  default_queue_policy {\n"
            "  timeout_action: DELAY default_timeout_microseconds: 100\n"
            "  max_queue_size: 1 } }\n");
    q.Add(1);
    q.now += 200 * kUs;
    EXPECT_EQ(q.Take(), Ids()); // 1 is delayed, and still waits
    EXPECT_EQ(q.Queued(), 1u);
    EXPECT_EQ(q.Add(2), "Exceeds maximum queue size");
    q.now += 1000 * kMs;
    EXPECT_EQ(q.Take(), Ids({1}));
}

TEST(Batcher, IncompatibleShapesAreKeptApart) {
    Queue q("max_batch_size: 8\ndynamic_batching { }\n");
    q.Add(1, 1, 0, 0, 16);
    q.Add(2, 1, 0, 0, 16);
    q.Add(3, 1, 0, 0, 15);
    q.Add(4, 1, 0, 0, 16);
    EXPECT_EQ(q.Take(), Ids({1, 2}));
    EXPECT_EQ(q.Take(), Ids({3}));
    EXPECT_EQ(q.Take(), Ids({4}));
}

TEST(Batcher, IncompatibleRequestSendsThePendingBatchAtOnce) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000 }\n");
    q.Add(1, 1, 0, 0, 1);
    EXPECT_EQ(q.Take(), Ids());
    q.Add(2, 1, 0, 0, 2);
    EXPECT_EQ(q.Take(), Ids({1}));
    EXPECT_EQ(q.Take(), Ids()); // 2 waits for company
}

TEST(Batcher, ModelsWithoutBatchingRunOneRequestPerBatch) {
    Queue q("max_batch_size: 0\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000 }\n");
    q.Add(1, 0);
    q.Add(2, 0);
    EXPECT_EQ(q.Take(), Ids({1}));
    EXPECT_EQ(q.Take(), Ids({2}));
}

TEST(Batcher, FlushIgnoresTheDelay) {
    Queue q("max_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 1000000 }\n");
    q.Add(1);
    q.Add(2);
    EXPECT_EQ(q.Take(), Ids());
    EXPECT_EQ(q.Take(true), Ids({1, 2}));
    EXPECT_EQ(q.Take(true), Ids());
}

TEST(Batcher, SequenceNumbersFollowTheOrderRequestsLeave) {
    Queue q(
        "max_batch_size: 2\n"
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 }\n");
    q.Add(1, 1, 2);
    q.Add(2, 1, 2);
    q.Add(3, 1, 1);
    EXPECT_EQ(q.Take(), Ids({3, 1}));
    EXPECT_EQ(q.Take(), Ids({2}));
    ASSERT_EQ(q.taken.size(), 3u);
    for (size_t i = 0; i < q.taken.size(); i++)
        EXPECT_EQ(q.taken[i]->sequence, i);
}

// ---- reorder buffer
// ---------------------------------------------------------------

std::vector<uint64_t> Sequences(batcher_entry *list) {
    std::vector<uint64_t> out;
    for (; list; list = list->next)
        out.push_back(list->sequence);
    return out;
}

TEST(ReorderBuffer, ReleasesInSequenceOrder) {
    batcher_entry e[5] = {};
    for (uint64_t i = 0; i < 5; i++)
        e[i].sequence = i;
    reorder_buffer rb;
    reorder_init(&rb);
    using Seq = std::vector<uint64_t>;
    EXPECT_EQ(Sequences(reorder_push(&rb, &e[2])), Seq());
    EXPECT_EQ(Sequences(reorder_push(&rb, &e[4])), Seq());
    EXPECT_EQ(reorder_held(&rb), 2u);
    EXPECT_EQ(Sequences(reorder_push(&rb, &e[0])), Seq({0}));
    EXPECT_EQ(Sequences(reorder_push(&rb, &e[1])), Seq({1, 2}));
    EXPECT_EQ(Sequences(reorder_push(&rb, &e[3])), Seq({3, 4}));
    EXPECT_EQ(reorder_held(&rb), 0u);
}

TEST(ReorderBuffer, BatchesFinishingOutOfOrderAcrossInstances) {
    // Two instances: batch A = {0,1}, batch B = {2,3}; B finishes first.
    Queue q("max_batch_size: 2\n"
            "dynamic_batching { preserve_ordering: true }\n");
    for (int i = 0; i < 4; i++)
        q.Add(i);
    Ids a = q.Take(), b = q.Take();
    ASSERT_EQ(a, Ids({0, 1}));
    ASSERT_EQ(b, Ids({2, 3}));
    reorder_buffer rb;
    reorder_init(&rb);
    std::vector<int> delivered;
    auto finish = [&](size_t i) {
        for (batcher_entry *r = reorder_push(&rb, q.taken[i]); r;) {
            batcher_entry *next = r->next;
            delivered.push_back(static_cast<Req *>(r->owner)->id);
            r = next;
        }
    };
    finish(2);
    finish(3);
    EXPECT_TRUE(delivered.empty());
    finish(0);
    EXPECT_EQ(delivered, Ids({0}));
    finish(1);
    EXPECT_EQ(delivered, Ids({0, 1, 2, 3}));
}

} // namespace
