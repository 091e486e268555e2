// server/common's internal helpers: the byte buffer (bytebuf.h), array
// growth (array_grow.h) and the timed condition waits on the monotonic
// clock (cond_deadline.h).
#include <gtest/gtest.h>

#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "array_grow.h"
#include "bytebuf.h"
#include "cond_deadline.h"
#include "osprey/clock.h"

TEST(ByteBuf, AppendsGrowAndTakeEndsWithANul) {
    bytebuf b;
    bytebuf_init(&b);
    std::string want;
    for (int i = 0; i < 1000; i++) {
        bytebuf_puts(&b, "ab");
        bytebuf_putc(&b, 'c');
        bytebuf_printf(&b, "%d;", i);
        want += "abc" + std::to_string(i) + ";";
    }
    bytebuf_put(&b, "", 0);
    ASSERT_FALSE(b.oom);
    EXPECT_LT(b.len, b.cap); // room for the NUL, always
    size_t len = 0;
    char *s = bytebuf_take(&b, &len);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(len, want.size());
    EXPECT_EQ(std::string(s), want);
    EXPECT_EQ(b.data, nullptr); // empty again
    EXPECT_EQ(b.len, 0u);
    free(s);
}

TEST(ByteBuf, PrintfLongerThanAnyFirstGuess) {
    bytebuf b;
    bytebuf_init(&b);
    std::string big(10000, 'x');
    bytebuf_printf(&b, "<%s>", big.c_str());
    char *s = bytebuf_take(&b, nullptr);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(std::string(s), "<" + big + ">");
    free(s);
}

TEST(ByteBuf, ReserveIsRoomToWriteInto) {
    bytebuf b;
    bytebuf_init(&b);
    ASSERT_TRUE(bytebuf_reserve(&b, 300));
    memset(b.data + b.len, 'z', 300);
    b.len += 300;
    EXPECT_LT(b.len, b.cap);
    char *s = bytebuf_take(&b, nullptr);
    EXPECT_EQ(std::string(s), std::string(300, 'z'));
    free(s);
    bytebuf_free(&b); // a taken buffer frees as empty
}

TEST(ByteBuf, AFailedAppendIsStickyAndTakeSaysSo) {
    bytebuf b;
    bytebuf_init(&b);
    bytebuf_puts(&b, "kept so far");
    EXPECT_FALSE(bytebuf_reserve(&b, SIZE_MAX - 8)); // cannot be had
    EXPECT_TRUE(b.oom);
    bytebuf_puts(&b, "ignored");
    EXPECT_EQ(bytebuf_take(&b, nullptr), nullptr);
    EXPECT_EQ(b.data, nullptr); // freed
}

TEST(ArrayGrow, DoublesKeepsContentsAndRefusesOverflow) {
    int *a = nullptr;
    size_t cap = 0;
    for (int i = 0; i < 1000; i++) {
        ASSERT_TRUE(array_grow((void **)&a, &cap, (size_t)i + 1, sizeof *a));
        a[i] = i;
    }
    EXPECT_GE(cap, 1000u);
    EXPECT_EQ(cap & (cap - 1), 0u); // powers of two from 16
    for (int i = 0; i < 1000; i++)
        ASSERT_EQ(a[i], i);
    size_t before = cap;
    EXPECT_TRUE(array_grow((void **)&a, &cap, 10, sizeof *a)); // room already
    EXPECT_EQ(cap, before);
    int *kept = a;
    EXPECT_FALSE(array_grow((void **)&a, &cap, SIZE_MAX / 2, sizeof *a));
    EXPECT_EQ(a, kept); // unchanged on failure
    EXPECT_EQ(cap, before);
    free(a);
}

TEST(CondDeadline, APassedDeadlineReturnsFalseAtOnce) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond;
    cond_init_monotonic(&cond);
    pthread_mutex_lock(&mu);
    EXPECT_FALSE(cond_wait_until(&cond, &mu, osp_now_ns() - 1));
    uint64_t deadline = deadline_after_ns(20 * 1000 * 1000);
    while (cond_wait_until(&cond, &mu, deadline)) {
    }
    EXPECT_GE(osp_now_ns(), deadline); // false only once it has passed
    pthread_mutex_unlock(&mu);
    pthread_cond_destroy(&cond);
    EXPECT_EQ(deadline_after_ns(UINT64_MAX), UINT64_MAX); // saturates
}

TEST(CondDeadline, ASignalEndsTheWaitBeforeTheDeadline) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond;
    cond_init_monotonic(&cond);
    bool ready = false;
    std::thread signaller([&] {
        pthread_mutex_lock(&mu);
        ready = true;
        pthread_cond_signal(&cond);
        pthread_mutex_unlock(&mu);
    });
    uint64_t deadline = deadline_after_ns(600ull * 1000 * 1000 * 1000);
    pthread_mutex_lock(&mu);
    bool in_time = true;
    while (!ready && in_time)
        in_time = cond_wait_until(&cond, &mu, deadline);
    pthread_mutex_unlock(&mu);
    signaller.join();
    EXPECT_TRUE(ready);
    EXPECT_TRUE(in_time);
    pthread_cond_destroy(&cond);
}
