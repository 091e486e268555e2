// server/common/memory.c: host buffers and wrapped buffers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "osprey/memory.h"

extern "C" {
#include "device_internal.h"
}

namespace {

TEST(Memory, HostBuffersAreAlignedAndUsable) {
    for (size_t size :
         {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1} << 20}) {
        osp_buffer *b = osp_buffer_new_host(size);
        ASSERT_NE(b, nullptr);
        EXPECT_NE(b->data, nullptr);
        EXPECT_EQ((uintptr_t)b->data % 64, 0u);
        EXPECT_EQ(b->size, size);
        EXPECT_EQ(b->kind, OSP_MEMORY_HOST);
        EXPECT_EQ(b->device, nullptr);
        memset(b->data, 0xab, size);
        osp_buffer_free(b);
    }
}

TEST(Memory, HugeHostBufferFailsCleanly) {
    EXPECT_EQ(osp_buffer_new_host(SIZE_MAX), nullptr);
    EXPECT_EQ(osp_buffer_new_host(SIZE_MAX - 10), nullptr);
}

void CountCall(void *ctx) {
    ++*static_cast<int *>(ctx);
}

// Large blocks come back from the cache: the same class gives the same
// block, so a request-sized buffer costs no mmap or page faults the second
// time; small blocks bypass the cache.
TEST(Memory, LargeHostBlocksAreReused) {
    const size_t size = (size_t{16} << 20) + 100;
    void *a = host_alloc_aligned(size);
    ASSERT_NE(a, nullptr);
    memset(a, 1, size);
    host_free_aligned(a, size);
    void *b = host_alloc_aligned(size + 1000); // same size class
    EXPECT_EQ(a, b);
    host_free_aligned(b, size + 1000);

    osp_buffer *buf = osp_buffer_new_host(size);
    ASSERT_NE(buf, nullptr);
    void *first = buf->data;
    osp_buffer_free(buf);
    buf = osp_buffer_new_host(size);
    EXPECT_EQ(buf->data, first);
    EXPECT_EQ((uintptr_t)buf->data % 64, 0u);
    osp_buffer_free(buf);

    // A cached block may still be released with plain free().
    void *c = host_alloc_aligned(size);
    free(c);
}

TEST(Memory, WrapCallsFreeFnOnce) {
    int calls = 0;
    char storage[16];
    osp_buffer *b = osp_buffer_wrap(storage, sizeof storage,
                                    OSP_MEMORY_HOST_PINNED, CountCall, &calls);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->data, storage);
    EXPECT_EQ(b->size, sizeof storage);
    EXPECT_EQ(b->kind, OSP_MEMORY_HOST_PINNED);
    EXPECT_EQ(calls, 0);
    osp_buffer_free(b);
    EXPECT_EQ(calls, 1);

    b = osp_buffer_wrap(storage, 4, OSP_MEMORY_HOST, nullptr, nullptr);
    ASSERT_NE(b, nullptr);
    osp_buffer_free(b); // no free_fn: only the wrapper goes
    osp_buffer_free(nullptr);
}

} // namespace
