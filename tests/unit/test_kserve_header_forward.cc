// Header forwarding (kserve_header_forward.h): which names a pattern
// forwards, as RE2::PartialMatch picks them in Triton, and what the
// request gets.
#include <gtest/gtest.h>

#include <string.h>

#include <string>

extern "C" {
#include "kserve_header_forward.h"
#include "osprey/infer.h"
}

namespace {

struct Forward {
    kserve_header_forward *f = nullptr;
    explicit Forward(const char *pattern) {
        osp_error *err = kserve_header_forward_new("flag", pattern, &f);
        EXPECT_EQ(err, nullptr) << osp_error_message(err);
        osp_error_free(err);
    }
    ~Forward() { kserve_header_forward_free(f); }
};

struct Request {
    osp_infer_request *r = osp_infer_request_new("m", -1);
    ~Request() { osp_infer_request_free(r); }
};

void apply(const kserve_header_forward *f, osp_infer_request *r,
           const char *name, const char *value) {
    osp_error *err = kserve_header_forward_apply(f, r, name, strlen(name),
                                                 value, strlen(value));
    EXPECT_EQ(err, nullptr);
    osp_error_free(err);
}

TEST(HeaderForward, MatchesAnywhereInTheName) {
    Forward fwd("fwd");
    Request req;
    apply(fwd.f, req.r, "x-fwd-tenant", "acme");
    apply(fwd.f, req.r, "forward", "no");
    apply(fwd.f, req.r, "FWD", "no: matching is case-sensitive");
    ASSERT_EQ(req.r->n_parameters, 1u);
    EXPECT_STREQ(req.r->parameters[0].key, "x-fwd-tenant");
    EXPECT_EQ(req.r->parameters[0].type, OSP_PARAM_STRING);
    EXPECT_STREQ(req.r->parameters[0].value.s, "acme");
}

TEST(HeaderForward, AnchorsAndAlternatives) {
    Forward fwd("^x-(tenant|trace)$");
    Request req;
    apply(fwd.f, req.r, "x-tenant", "a");
    apply(fwd.f, req.r, "x-trace", "b");
    apply(fwd.f, req.r, "y-x-tenant", "no");
    apply(fwd.f, req.r, "x-tenants", "no");
    ASSERT_EQ(req.r->n_parameters, 2u);
    EXPECT_STREQ(req.r->parameters[1].key, "x-trace");
}

TEST(HeaderForward, NamesAndValuesNeedNoTerminator) {
    // gRPC metadata are slices: only name_len and value_len bytes count.
    Forward fwd("^tenant$");
    Request req;
    const char name[] = "tenantXXXX";
    const char value[] = "acme-and-more";
    osp_error *err = kserve_header_forward_apply(fwd.f, req.r, name, 6, value, 4);
    ASSERT_EQ(err, nullptr);
    ASSERT_EQ(req.r->n_parameters, 1u);
    EXPECT_STREQ(req.r->parameters[0].key, "tenant");
    EXPECT_STREQ(req.r->parameters[0].value.s, "acme");
}

TEST(HeaderForward, NoPatternForwardsNothing) {
    kserve_header_forward *f = reinterpret_cast<kserve_header_forward *>(1);
    ASSERT_EQ(kserve_header_forward_new("flag", "", &f), nullptr);
    EXPECT_EQ(f, nullptr);
    ASSERT_EQ(kserve_header_forward_new("flag", nullptr, &f), nullptr);
    EXPECT_EQ(f, nullptr);
    Request req;
    apply(nullptr, req.r, "anything", "v");
    EXPECT_EQ(req.r->n_parameters, 0u);
}

TEST(HeaderForward, AnInvalidPatternNamesTheFlag) {
    kserve_header_forward *f = nullptr;
    osp_error *err = kserve_header_forward_new("grpc-header-forward-pattern",
                                               "(x", &f);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(f, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
    const std::string want = "--grpc-header-forward-pattern: invalid regular "
                             "expression '(x': ";
    EXPECT_EQ(std::string(osp_error_message(err)).substr(0, want.size()), want);
    osp_error_free(err);
}

} // namespace
