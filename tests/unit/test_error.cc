// The one out-of-memory error: UNAVAILABLE "out of memory" (503 on HTTP,
// UNAVAILABLE on gRPC), which every failed allocation returns.
#include <gtest/gtest.h>

#include "osprey/error.h"

TEST(Error, OutOfMemoryIsOneErrorEverywhere) {
    osp_error *err = osp_error_out_of_memory();
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNAVAILABLE);
    EXPECT_STREQ(osp_error_message(err), "out of memory");
    EXPECT_EQ(osp_error_get_reason(err), OSP_REASON_NONE);
    osp_error_free(err);
}
