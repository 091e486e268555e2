// Helpers every unit test shares: an error's message, and ASSERT_OK for the
// osp_error * (NULL = success) convention of the C API.
#pragma once

#include <gtest/gtest.h>

#include <string>

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
