// cuda/range_pool.c: the sub-allocator behind the CUDA device's memory
// pool and pinned host pool. It never touches the memory it manages, so it
// is tested here on plain host regions, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

extern "C" {
#include "range_pool.h"
}

namespace {

class RangePoolTest : public ::testing::Test {
  protected:
    void SetUp() override {
        range_pool_init(&pool_, 64);
    }
    void TearDown() override {
        range_pool_destroy(&pool_, nullptr, nullptr);
    }

    // Regions are aligned, like cudaMalloc and cudaHostAlloc memory.
    char *NewStorage(size_t size) {
        storage_.emplace_back((char *)aligned_alloc(256, size));
        return storage_.back().get();
    }

    char *AddRegion(size_t size) {
        char *base = NewStorage(size);
        EXPECT_TRUE(range_pool_add_region(&pool_, base, size));
        return base;
    }

    struct FreeDeleter {
        void operator()(char *p) const {
            free(p);
        }
    };
    range_pool pool_;
    std::vector<std::unique_ptr<char, FreeDeleter>> storage_;
};

TEST_F(RangePoolTest, AlignsSplitsAndCoalesces) {
    char *base = AddRegion(4096);
    EXPECT_EQ(pool_.total, 4096u);
    char *a = (char *)range_pool_alloc(&pool_, 1);
    char *b = (char *)range_pool_alloc(&pool_, 100);
    char *c = (char *)range_pool_alloc(&pool_, 0);
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(a, base);
    EXPECT_EQ(b, base + 64);  // 1 byte rounds up to 64
    EXPECT_EQ(c, base + 192); // 100 bytes round up to 128
    EXPECT_EQ(pool_.used, 64u + 128u + 64u);

    // Nothing larger than what is left fits.
    EXPECT_EQ(range_pool_alloc(&pool_, 4096), nullptr);
    EXPECT_TRUE(range_pool_free(&pool_, b));
    EXPECT_FALSE(range_pool_free(&pool_, b)); // double free is refused
    EXPECT_TRUE(range_pool_free(&pool_, a));
    EXPECT_TRUE(range_pool_free(&pool_, c));
    EXPECT_EQ(pool_.used, 0u);
    // All blocks merged back: the whole region is one block again.
    EXPECT_EQ(range_pool_alloc(&pool_, 4096), base);
}

TEST_F(RangePoolTest, BestFitPrefersTheSmallestHole) {
    char *base = AddRegion(64 * 10);
    void *p[10];
    for (int i = 0; i < 10; i++)
        p[i] = range_pool_alloc(&pool_, 64);
    // Holes of 3 blocks (at 1..3) and 1 block (at 6).
    for (int i : {1, 2, 3, 6})
        ASSERT_TRUE(range_pool_free(&pool_, p[i]));
    EXPECT_EQ(range_pool_alloc(&pool_, 64), base + 6 * 64);
    EXPECT_EQ(range_pool_alloc(&pool_, 128), base + 1 * 64);
}

TEST_F(RangePoolTest, ForeignPointersAreRefused) {
    char *base = AddRegion(1024);
    char outside[64];
    EXPECT_FALSE(range_pool_owns(&pool_, outside));
    EXPECT_FALSE(range_pool_free(&pool_, outside));
    void *a = range_pool_alloc(&pool_, 128);
    ASSERT_EQ(a, base);
    EXPECT_TRUE(range_pool_owns(&pool_, base + 100));
    EXPECT_FALSE(range_pool_free(&pool_, base + 64)); // inside, not a start
    EXPECT_EQ(pool_.used, 128u);
}

TEST_F(RangePoolTest, RegionsDoNotMergeAndTrimReleasesEmptyOnes) {
    // Two regions that happen to be adjacent in memory stay separate.
    char *base = NewStorage(2048);
    ASSERT_TRUE(range_pool_add_region(&pool_, base, 1024));
    ASSERT_TRUE(range_pool_add_region(&pool_, base + 1024, 1024));
    EXPECT_EQ(range_pool_alloc(&pool_, 2048), nullptr);
    void *a = range_pool_alloc(&pool_, 1024);
    ASSERT_NE(a, nullptr);

    std::vector<void *> released;
    size_t bytes = range_pool_trim(
        &pool_,
        [](void *region, void *ctx) {
            static_cast<std::vector<void *> *>(ctx)->push_back(region);
        },
        &released);
    EXPECT_EQ(bytes, 1024u);
    ASSERT_EQ(released.size(), 1u);
    EXPECT_NE(released[0], a); // the region in use stays
    EXPECT_EQ(pool_.total, 1024u);
    EXPECT_EQ(pool_.n_regions, 1);
    EXPECT_TRUE(range_pool_free(&pool_, a));
}

TEST_F(RangePoolTest, RandomAllocationsNeverOverlap) {
    AddRegion(1 << 20);
    AddRegion(1 << 18);
    std::mt19937 gen(std::random_device{}());
    struct Live {
        char *p;
        size_t size;
    };
    std::vector<Live> live;
    for (int step = 0; step < 20000; step++) {
        if (live.empty() || gen() % 3 != 0) {
            size_t size = 1 + gen() % 20000;
            char *p = (char *)range_pool_alloc(&pool_, size);
            if (p == nullptr)
                continue; // full: fine
            ASSERT_EQ((uintptr_t)p % 64, 0u);
            ASSERT_TRUE(range_pool_owns(&pool_, p));
            ASSERT_TRUE(range_pool_owns(&pool_, p + size - 1));
            for (const Live &l : live)
                ASSERT_TRUE(p + size <= l.p || l.p + l.size <= p)
                    << "overlap at step " << step;
            live.push_back({p, size});
        } else {
            size_t i = gen() % live.size();
            ASSERT_TRUE(range_pool_free(&pool_, live[i].p));
            live.erase(live.begin() + i);
        }
    }
    for (const Live &l : live)
        ASSERT_TRUE(range_pool_free(&pool_, l.p));
    EXPECT_EQ(pool_.used, 0u);
    EXPECT_NE(range_pool_alloc(&pool_, 1 << 20), nullptr);
    EXPECT_NE(range_pool_alloc(&pool_, 1 << 18), nullptr);
}

} // namespace
