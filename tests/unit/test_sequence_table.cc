// The sequence table (server/core/scheduling/sequence_table.h) with a fake
// clock: lookups by uint64 and string ids, the bound, idle release, END,
// batch slots and the sequences waiting for one.
#include <gtest/gtest.h>

#include <string>

#include "pending_request.h"
#include "sequence_table.h"

namespace {

const uint64_t kMs = 1000 * 1000;

sequence_id Num(uint64_t n) {
    sequence_id id{};
    id.number = n;
    return id;
}

sequence_id Str(const char *s) {
    sequence_id id{};
    id.is_string = true;
    id.string = s;
    return id;
}

struct Table {
    sequence_table t{};
    Table(size_t capacity, uint64_t idle_ns, size_t states = 1) {
        osp_error *err = sequence_table_init(&t, capacity, states, idle_ns);
        EXPECT_EQ(err, nullptr);
    }
    ~Table() {
        sequence_table_destroy(&t);
    }
    sequence_slot *Open(const sequence_id &id, uint64_t now) {
        sequence_slot *s = nullptr;
        osp_error *err = sequence_table_open(&t, &id, now, &s);
        if (err) {
            last_error = osp_error_message(err);
            osp_error_free(err);
            return nullptr;
        }
        return s;
    }
    std::string last_error;
};

TEST(SequenceTable, FindsByTypeAndValue) {
    Table tb(8, 1000 * kMs);
    std::string owned = "alpha";
    sequence_slot *a = tb.Open(Str(owned.c_str()), 0);
    sequence_slot *n = tb.Open(Num(7), 0);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(n, nullptr);
    owned = "other"; // the slot keeps its own copy of the string
    sequence_id alpha = Str("alpha"), seven = Num(7), seven_text = Str("7");
    EXPECT_EQ(sequence_table_find(&tb.t, &alpha, 1), a);
    EXPECT_EQ(sequence_table_find(&tb.t, &seven, 1), n);
    EXPECT_EQ(sequence_table_find(&tb.t, &seven_text, 1), nullptr);
    char buf[32];
    EXPECT_STREQ(sequence_id_format(&seven, buf, sizeof buf), "7");
    EXPECT_EQ(tb.t.used, 2u);
}

TEST(SequenceTable, FullTableRefusesUntilASlotIsFree) {
    Table tb(2, 1000 * kMs);
    ASSERT_NE(tb.Open(Num(1), 0), nullptr);
    sequence_slot *two = tb.Open(Num(2), 0);
    ASSERT_NE(two, nullptr);
    EXPECT_EQ(tb.Open(Num(3), 1), nullptr);
    EXPECT_EQ(tb.last_error,
              "the sequence table is full (2 sequences in progress)");
    sequence_table_release(&tb.t, two);
    EXPECT_NE(tb.Open(Num(3), 2), nullptr);
    EXPECT_EQ(tb.t.used, 2u);
}

TEST(SequenceTable, IdleSequencesAreReleasedOnlyWhenNothingIsPending) {
    Table tb(2, 10 * kMs);
    sequence_slot *busy = tb.Open(Num(1), 0);
    sequence_slot *waiting = tb.Open(Num(2), 0);
    busy->in_flight = true;
    pending_request queued{};
    waiting->backlog_head = waiting->backlog_tail = &queued;
    sequence_id one = Num(1), two = Num(2);
    // both have work: neither is idle, however long ago they started
    EXPECT_EQ(sequence_table_reap(&tb.t, 100 * kMs), 0u);
    EXPECT_EQ(sequence_table_find(&tb.t, &one, 100 * kMs), busy);
    waiting->backlog_head = waiting->backlog_tail = nullptr;
    waiting->last_active_ns = 100 * kMs;
    // just before the limit it lives, at the limit it is released on lookup
    EXPECT_EQ(sequence_table_find(&tb.t, &two, 110 * kMs - 1), waiting);
    EXPECT_EQ(sequence_table_find(&tb.t, &two, 110 * kMs), nullptr);
    EXPECT_EQ(tb.t.used, 1u);
    // a full table reaps idle sequences to make room
    busy->in_flight = false;
    ASSERT_NE(tb.Open(Num(3), 200 * kMs), nullptr);
    ASSERT_NE(tb.Open(Num(4), 200 * kMs), nullptr);
    EXPECT_EQ(sequence_table_find(&tb.t, &one, 200 * kMs), nullptr);
}

TEST(SequenceTable, EndingSequenceIsNotFoundAndItsIdCanStartAgain) {
    Table tb(4, 1000 * kMs);
    sequence_slot *old_seq = tb.Open(Num(5), 0);
    old_seq->ending = true;
    old_seq->in_flight = true;
    sequence_id five = Num(5);
    EXPECT_EQ(sequence_table_find(&tb.t, &five, 1), nullptr);
    sequence_slot *fresh = tb.Open(Num(5), 1);
    ASSERT_NE(fresh, nullptr);
    EXPECT_NE(fresh, old_seq);
    EXPECT_EQ(sequence_table_find(&tb.t, &five, 2), fresh);
}

TEST(SequenceTable, ReleaseFreesTheState) {
    Table tb(1, 1000 * kMs, 2);
    sequence_slot *s = tb.Open(Str("x"), 0);
    ASSERT_NE(s, nullptr);
    s->state[0] = osp_buffer_new_host(16);
    s->state[1] = osp_buffer_new_host(4);
    sequence_table_release(&tb.t, s); // leak-checked by the sanitizer build
    EXPECT_EQ(tb.t.used, 0u);
    EXPECT_FALSE(s->used);
}

// A table with 2 instances x 2 batch slots.
struct SlotTable : Table {
    SlotTable(size_t capacity, uint64_t idle_ns) : Table(capacity, idle_ns) {
        osp_error *err = sequence_table_set_batch_slots(&t, 2, 2);
        EXPECT_EQ(err, nullptr);
    }
    // A sequence's first request, queued while it waits for a slot.
    void Queue(sequence_slot *s, pending_request *p) {
        s->backlog_head = s->backlog_tail = p;
    }
};

TEST(SequenceTableSlots, LowestRowFirstThenLowestInstance) {
    SlotTable tb(8, 1000 * kMs);
    int expect[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
    for (int i = 0; i < 4; i++) {
        sequence_slot *s = tb.Open(Num(i + 1), 0);
        ASSERT_NE(s, nullptr);
        EXPECT_FALSE(s->waiting_for_slot);
        EXPECT_EQ(s->instance, expect[i][0]) << i;
        EXPECT_EQ(s->batch_index, expect[i][1]) << i;
    }
    EXPECT_EQ(sequence_table_waiting(&tb.t), 0u);
}

TEST(SequenceTableSlots, BacklogTakesFreedSlotsInArrivalOrder) {
    SlotTable tb(8, 1000 * kMs);
    sequence_slot *held[4];
    for (int i = 0; i < 4; i++)
        held[i] = tb.Open(Num(i + 1), 0);
    pending_request firsts[3]{};
    sequence_slot *wait[3];
    for (int i = 0; i < 3; i++) {
        wait[i] = tb.Open(Num(10 + i), 1);
        ASSERT_NE(wait[i], nullptr);
        EXPECT_TRUE(wait[i]->waiting_for_slot);
        EXPECT_EQ(wait[i]->instance, -1);
        tb.Queue(wait[i], &firsts[i]);
    }
    EXPECT_EQ(sequence_table_waiting(&tb.t), 3u);
    EXPECT_EQ(sequence_table_take_promoted(&tb.t), nullptr);
    // instance 1, row 1 frees: the oldest waiting sequence gets it
    sequence_table_release(&tb.t, held[3]);
    EXPECT_FALSE(wait[0]->waiting_for_slot);
    EXPECT_EQ(wait[0]->instance, 1);
    EXPECT_EQ(wait[0]->batch_index, 1);
    EXPECT_EQ(sequence_table_waiting(&tb.t), 2u);
    // a waiting sequence that goes away leaves the queue
    wait[1]->backlog_head = wait[1]->backlog_tail = nullptr;
    sequence_table_release(&tb.t, wait[1]);
    EXPECT_EQ(sequence_table_waiting(&tb.t), 1u);
    sequence_table_release(&tb.t, held[0]);
    EXPECT_EQ(wait[2]->instance, 0);
    EXPECT_EQ(wait[2]->batch_index, 0);
    EXPECT_EQ(sequence_table_take_promoted(&tb.t), wait[0]);
    EXPECT_EQ(sequence_table_take_promoted(&tb.t), wait[2]);
    EXPECT_EQ(sequence_table_take_promoted(&tb.t), nullptr);
    EXPECT_EQ(sequence_table_waiting(&tb.t), 0u);
    // nobody waits: a freed slot is free again
    sequence_table_release(&tb.t, held[1]);
    sequence_slot *next = tb.Open(Num(20), 2);
    EXPECT_EQ(next->instance, 1);
    EXPECT_EQ(next->batch_index, 0);
    for (sequence_slot *s : {wait[0], wait[2]})
        s->backlog_head = s->backlog_tail = nullptr;
}

TEST(SequenceTableSlots, IdleHolderIsReapedForTheBacklog) {
    SlotTable tb(8, 10 * kMs);
    sequence_slot *held[4];
    for (int i = 0; i < 4; i++) {
        held[i] = tb.Open(Num(i + 1), 0);
        held[i]->in_flight = true;
    }
    // nobody holding a slot can go idle yet
    EXPECT_EQ(sequence_table_next_idle_ns(&tb.t), UINT64_MAX);
    pending_request first{};
    sequence_slot *w = tb.Open(Num(9), 1 * kMs);
    tb.Queue(w, &first);
    held[2]->in_flight = false;
    held[2]->last_active_ns = 5 * kMs;
    held[1]->in_flight = false;
    held[1]->last_active_ns = 3 * kMs;
    // the first holder to go idle: sequence 2 at 3 + 10 ms
    EXPECT_EQ(sequence_table_next_idle_ns(&tb.t), 13 * kMs);
    EXPECT_EQ(sequence_table_reap(&tb.t, 13 * kMs - 1), 0u);
    // the waiting sequence has its request queued: never reaped itself
    EXPECT_EQ(sequence_table_reap(&tb.t, 13 * kMs), 1u);
    EXPECT_EQ(sequence_table_take_promoted(&tb.t), w);
    EXPECT_EQ(w->instance, 1);
    EXPECT_EQ(w->batch_index, 0);
    EXPECT_EQ(sequence_table_next_idle_ns(&tb.t), 15 * kMs);
    w->backlog_head = w->backlog_tail = nullptr;
}

} // namespace
