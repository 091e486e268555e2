// Helpers every unit test shares: an error's message, ASSERT_OK and
// EXPECT_ERROR_CODE for the osp_error * (NULL = success) convention of the
// C API, a stream freed with its holder, and the seed of randomised tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "osprey/device.h"
#include "osprey/error.h"

// The message of `err`, which is freed; "" for success (NULL).
inline std::string TakeMessage(osp_error *err) {
    std::string msg = err ? osp_error_message(err) : "";
    osp_error_free(err);
    return msg;
}

#define ASSERT_OK(expr)                                                        \
    do {                                                                       \
        osp_error *err_ = (expr);                                              \
        if (err_ != nullptr)                                                   \
            FAIL() << #expr << ": " << TakeMessage(err_);                      \
    } while (0)

// EXPECTs that expr fails with `code`; frees the error.
#define EXPECT_ERROR_CODE(expr, code)                                          \
    do {                                                                       \
        osp_error *err_ = (expr);                                              \
        EXPECT_NE(err_, nullptr) << #expr << " succeeded";                     \
        if (err_ != nullptr) {                                                 \
            EXPECT_EQ(osp_error_get_code(err_), (code))                        \
                << #expr << ": " << osp_error_message(err_);                   \
            osp_error_free(err_);                                              \
        }                                                                      \
    } while (0)

struct StreamDeleter {
    void operator()(osp_stream *s) const {
        osp_stream_free(s);
    }
};
using StreamPtr = std::unique_ptr<osp_stream, StreamDeleter>;

// The seed of a randomised test: $OSPREY_TEST_SEED, else `fallback`.
inline uint64_t TestSeed(uint64_t fallback) {
    const char *env = getenv("OSPREY_TEST_SEED");
    return env != nullptr ? strtoull(env, nullptr, 10) : fallback;
}
