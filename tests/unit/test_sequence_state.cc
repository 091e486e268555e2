// The per-instance state values of a sequence model
// (server/core/scheduling/sequence_state.h) on the CPU device: each
// instance gets the initial value once, zeros alias a zero initial value
// and are their own buffer otherwise, and row buffers live on the
// instance's device.
#include <gtest/gtest.h>

#include <cstring>

#include "osprey/device.h"
#include "sequence_state.h"

namespace {

struct Store {
    sequence_state_store s{};
    osp_buffer *initial[2] = {nullptr, nullptr};
    size_t row_bytes[2] = {8, 3};
    bool is_zero[2] = {true, false};
    osp_device *devices[2] = {osp_device_cpu(), osp_device_cpu()};

    Store() {
        initial[0] = osp_buffer_new_host(8);
        initial[1] = osp_buffer_new_host(3);
        memset(initial[0]->data, 0, 8);
        memcpy(initial[1]->data, "abc", 3);
        osp_error *err = sequence_state_store_init(&s, 2, row_bytes, initial,
                                                   is_zero, devices, 2);
        EXPECT_EQ(err, nullptr);
        osp_error_free(err);
    }
    ~Store() {
        sequence_state_store_destroy(&s);
        osp_buffer_free(initial[0]);
        osp_buffer_free(initial[1]);
    }
};

TEST(SequenceState, EachInstanceGetsItsOwnCopyOfTheInitialValue) {
    Store st;
    const osp_buffer *a = sequence_state_initial(&st.s, 0, 1);
    const osp_buffer *b = sequence_state_initial(&st.s, 1, 1);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_NE(a, b);
    EXPECT_NE(a->data, st.initial[1]->data); // uploaded, not borrowed
    EXPECT_EQ(memcmp(a->data, "abc", 3), 0);
    EXPECT_EQ(memcmp(b->data, "abc", 3), 0);
}

TEST(SequenceState, ZerosAreTheInitialValueOnlyWhenThatIsZeros) {
    Store st;
    EXPECT_EQ(sequence_state_zeros(&st.s, 0, 0),
              sequence_state_initial(&st.s, 0, 0));
    const osp_buffer *z = sequence_state_zeros(&st.s, 1, 1);
    ASSERT_NE(z, nullptr);
    EXPECT_NE(z, sequence_state_initial(&st.s, 1, 1));
    EXPECT_EQ(memcmp(z->data, "\0\0\0", 3), 0);
}

TEST(SequenceState, RowsAreAllocatedOnTheInstancesDevice) {
    Store st;
    osp_buffer *row = nullptr;
    osp_error *err = sequence_state_alloc(&st.s, 1, 0, &row);
    ASSERT_EQ(err, nullptr);
    EXPECT_EQ(row->device, osp_device_cpu());
    EXPECT_GE(row->size, 8u);
    osp_buffer_free(row);
}

TEST(SequenceState, UnknownInstancesAndStatesAreRefused) {
    Store st;
    EXPECT_EQ(sequence_state_initial(&st.s, 2, 0), nullptr);
    EXPECT_EQ(sequence_state_zeros(&st.s, 0, 2), nullptr);
    osp_buffer *row = nullptr;
    osp_error *err = sequence_state_alloc(&st.s, 5, 0, &row);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(row, nullptr);
    osp_error_free(err);
}

TEST(SequenceState, DestroyingAZeroedStoreIsANoOp) {
    sequence_state_store s{};
    sequence_state_store_destroy(&s);
}

} // namespace
