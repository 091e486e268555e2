// The `direct` strategy's per-instance batches
// (server/core/scheduling/slot_batcher.h) with a fake clock: rows at their
// batch slots with holes between, the queue delay, minimum_slot_utilization,
// requests that cannot share a batch.
#include <gtest/gtest.h>

#include <vector>

#include "slot_batcher.h"

namespace {

const uint64_t kUs = 1000;

struct Rows {
    slot_batcher sb{};
    std::vector<batcher_entry *> out;
    Rows(size_t slots, int64_t max_batch, uint64_t delay_us, float util,
         batcher_compatible_fn compatible = nullptr, void *ctx = nullptr)
        : out(slots, nullptr) {
        EXPECT_EQ(slot_batcher_init(&sb, slots, max_batch, delay_us, util,
                                    compatible, ctx),
                  nullptr);
    }
    ~Rows() {
        slot_batcher_destroy(&sb);
    }
    size_t Take(uint64_t now, uint64_t *wait, bool flush = false) {
        return slot_batcher_take(&sb, now, flush, out.data(), wait);
    }
};

TEST(SlotBatcher, RowsSitAtTheirSlotsWithHolesBetween) {
    Rows r(4, 4, 0, 0.0f);
    batcher_entry a{}, b{};
    ASSERT_TRUE(slot_batcher_put(&r.sb, 2, &a, 5));
    ASSERT_TRUE(slot_batcher_put(&r.sb, 0, &b, 6));
    EXPECT_FALSE(slot_batcher_put(&r.sb, 2, &b, 7)); // one per slot
    EXPECT_FALSE(slot_batcher_put(&r.sb, 4, &b, 7)); // out of range
    EXPECT_EQ(slot_batcher_queued(&r.sb), 2u);
    uint64_t wait = 99;
    ASSERT_EQ(r.Take(10, &wait), 3u); // rows 0..2: the highest ready + 1
    EXPECT_EQ(r.out[0], &b);
    EXPECT_EQ(r.out[1], nullptr); // a hole: a READY=false filler
    EXPECT_EQ(r.out[2], &a);
    EXPECT_EQ(a.enqueue_ns, 5u);
    EXPECT_EQ(slot_batcher_queued(&r.sb), 0u);
    EXPECT_EQ(r.Take(11, &wait), 0u);
    EXPECT_EQ(wait, 0u); // empty: wait for an arrival
}

TEST(SlotBatcher, NoDelayOrNoUtilizationRunsAtOnce) {
    // Triton: a delay of 0 or a utilization of 0 means no waiting at all
    for (auto [delay, util] : {std::pair<uint64_t, float>{0, 0.9f},
                               std::pair<uint64_t, float>{1000, 0.0f}}) {
        Rows r(4, 4, delay, util);
        batcher_entry a{};
        slot_batcher_put(&r.sb, 3, &a, 0);
        uint64_t wait = 0;
        EXPECT_EQ(r.Take(0, &wait), 4u);
    }
}

TEST(SlotBatcher, WaitsForTheDelayOrTheUtilization) {
    Rows r(4, 4, 100, 0.5f);
    batcher_entry a{}, b{}, c{};
    slot_batcher_put(&r.sb, 1, &a, 1000 * kUs);
    uint64_t wait = 0;
    // 1 of 4 ready: below 0.5, waits for what is left of the delay
    EXPECT_EQ(r.Take(1030 * kUs, &wait), 0u);
    EXPECT_EQ(wait, 70 * kUs);
    // 2 of 4 reaches 0.5: runs now
    slot_batcher_put(&r.sb, 3, &b, 1040 * kUs);
    EXPECT_EQ(r.Take(1040 * kUs, &wait), 4u);
    EXPECT_EQ(r.out[1], &a);
    EXPECT_EQ(r.out[3], &b);
    // alone again: runs once the oldest has waited the delay
    slot_batcher_put(&r.sb, 0, &c, 2000 * kUs);
    EXPECT_EQ(r.Take(2100 * kUs - 1, &wait), 0u);
    EXPECT_EQ(wait, 1u);
    EXPECT_EQ(r.Take(2100 * kUs, &wait), 1u);
    EXPECT_EQ(r.out[0], &c);
}

TEST(SlotBatcher, UtilizationCountsAgainstMaxBatchSize) {
    // 8 candidate slots but max_batch_size 2: 1 ready is already 0.5
    Rows r(8, 2, 1000000, 0.5f);
    batcher_entry a{};
    slot_batcher_put(&r.sb, 5, &a, 0);
    uint64_t wait = 0;
    EXPECT_EQ(r.Take(0, &wait), 6u);
}

TEST(SlotBatcher, FlushRunsWhateverIsReady) {
    Rows r(4, 4, 1000000, 1.0f);
    batcher_entry a{};
    slot_batcher_put(&r.sb, 0, &a, 0);
    uint64_t wait = 0;
    EXPECT_EQ(r.Take(1, &wait), 0u);
    EXPECT_EQ(r.Take(1, &wait, true), 1u);
}

bool SameBatchSize(const batcher_entry *a, const batcher_entry *b, void *) {
    return a->batch_size == b->batch_size;
}

TEST(SlotBatcher, IncompatibleRequestWaitsForTheNextBatch) {
    Rows r(4, 4, 0, 0.0f, SameBatchSize);
    batcher_entry a{}, odd{}, c{};
    a.batch_size = c.batch_size = 1;
    odd.batch_size = 7; // stands for other input shapes
    slot_batcher_put(&r.sb, 0, &a, 0);
    slot_batcher_put(&r.sb, 3, &odd, 0);
    slot_batcher_put(&r.sb, 1, &c, 0);
    uint64_t wait = 0;
    ASSERT_EQ(r.Take(0, &wait), 2u); // rows 0 and 1; row 3 stays
    EXPECT_EQ(r.out[0], &a);
    EXPECT_EQ(r.out[1], &c);
    EXPECT_EQ(slot_batcher_queued(&r.sb), 1u);
    ASSERT_EQ(r.Take(0, &wait), 4u);
    EXPECT_EQ(r.out[0], nullptr);
    EXPECT_EQ(r.out[3], &odd);
}

TEST(SlotBatcher, RemoveIfEmptiesTheSlotsOfCancelledRequests) {
    Rows r(4, 4, 100, 0.5f);
    batcher_entry a{}, b{}, c{};
    a.batch_size = 1;
    b.batch_size = 2; // stands for "cancelled"
    c.batch_size = 2;
    slot_batcher_put(&r.sb, 0, &a, 0);
    slot_batcher_put(&r.sb, 1, &b, 0);
    slot_batcher_put(&r.sb, 3, &c, 0);
    batcher_entry *gone = nullptr;
    EXPECT_EQ(slot_batcher_remove_if(
                  &r.sb,
                  [](const batcher_entry *e, void *) {
                      return e->batch_size == 2;
                  },
                  nullptr, &gone),
              2u);
    ASSERT_EQ(gone, &b); // in slot order
    EXPECT_EQ(gone->next, &c);
    EXPECT_EQ(c.next, nullptr);
    EXPECT_EQ(slot_batcher_queued(&r.sb), 1u);
    // 1 of 4 ready is below the utilization again: the batch waits
    uint64_t wait = 0;
    EXPECT_EQ(r.Take(10, &wait), 0u);
    EXPECT_TRUE(slot_batcher_put(&r.sb, 1, &b, 10)); // the slot is free
    ASSERT_EQ(r.Take(10, &wait), 2u);
    EXPECT_EQ(r.out[0], &a);
    EXPECT_EQ(r.out[1], &b);
}

} // namespace
