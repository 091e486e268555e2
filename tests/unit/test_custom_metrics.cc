// The custom metrics registry (osprey/custom_metrics.h): Triton's rules
// for families, series and operations, and the text prometheus-cpp would
// write for them. The registry is per process: each test names its own
// families.
#include <gtest/gtest.h>

#include <math.h>
#include <stdlib.h>

#include <string>

extern "C" {
#include "osprey/custom_metrics.h"
}

namespace {

std::string text() {
    char *t = osp_custom_metrics_text();
    std::string s = t ? t : "";
    free(t);
    return s;
}

std::string message(osp_error *err) {
    std::string s = err ? osp_error_message(err) : "";
    osp_error_free(err);
    return s;
}

osp_metric_family *family(osp_metric_kind kind, const char *name,
                          const char *help = "help") {
    osp_metric_family *f = nullptr;
    osp_error *err = osp_metric_family_new(kind, name, help, &f);
    EXPECT_EQ(err, nullptr) << message(err);
    return f;
}

osp_metric *metric(osp_metric_family *f,
                   std::initializer_list<std::pair<const char *, const char *>>
                       labels = {},
                   const double *buckets = nullptr, size_t n_buckets = 0) {
    std::vector<const char *> names, values;
    for (auto &l : labels) {
        names.push_back(l.first);
        values.push_back(l.second);
    }
    osp_metric *m = nullptr;
    osp_error *err = osp_metric_new(f, names.data(), values.data(),
                                    names.size(), buckets, n_buckets, &m);
    EXPECT_EQ(err, nullptr) << message(err);
    return m;
}

TEST(CustomMetrics, CounterAsTritonsExampleReadsIt) {
    osp_metric_family *f =
        family(OSP_METRIC_COUNTER, "cm_latency_ns",
               "Cumulative time spent processing requests");
    osp_metric *m = metric(f, {{"version", "1"}, {"model", "custom_metrics"}});
    ASSERT_EQ(osp_metric_increment(m, 1234567), nullptr);
    ASSERT_EQ(osp_metric_increment(m, 0.5), nullptr);
    double v = 0;
    ASSERT_EQ(osp_metric_value(m, &v), nullptr);
    EXPECT_EQ(v, 1234567.5);
    std::string t = text();
    EXPECT_NE(t.find("# HELP cm_latency_ns Cumulative time spent processing "
                     "requests\n# TYPE cm_latency_ns counter\n"
                     "cm_latency_ns{model=\"custom_metrics\",version=\"1\"} "
                     "1234567.5\n"),
              std::string::npos)
        << t;
    EXPECT_EQ(message(osp_metric_increment(m, -1)),
              "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
              "monotonically by non-negative values.");
    EXPECT_EQ(message(osp_metric_set(m, 1)),
              "TRITONSERVER_METRIC_KIND_COUNTER does not support Set");
    EXPECT_EQ(message(osp_metric_observe(m, 1)),
              "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe");
    osp_metric_delete(m);
    osp_metric_family_delete(f);
}

TEST(CustomMetrics, GaugeSetsAndIncrementsBothWays) {
    osp_metric_family *f = family(OSP_METRIC_GAUGE, "cm_gauge");
    osp_metric *m = metric(f);
    ASSERT_EQ(osp_metric_set(m, 10), nullptr);
    ASSERT_EQ(osp_metric_increment(m, -2.5), nullptr);
    double v = 0;
    ASSERT_EQ(osp_metric_value(m, &v), nullptr);
    EXPECT_EQ(v, 7.5);
    EXPECT_NE(text().find("# TYPE cm_gauge gauge\ncm_gauge 7.5\n"),
              std::string::npos);
    osp_metric_delete(m);
    osp_metric_family_delete(f);
}

TEST(CustomMetrics, HistogramBucketsAreCumulative) {
    osp_metric_family *f = family(OSP_METRIC_HISTOGRAM, "cm_hist");
    const double bounds[] = {0.1, 1, 10};
    osp_metric *m = metric(f, {{"m", "x"}}, bounds, 3);
    for (double v : {0.05, 0.1, 0.5, 20.0})
        ASSERT_EQ(osp_metric_observe(m, v), nullptr);
    std::string t = text();
    EXPECT_NE(t.find("# TYPE cm_hist histogram\n"
                     "cm_hist_count{m=\"x\"} 4\n"
                     "cm_hist_sum{m=\"x\"} 20.65\n"
                     "cm_hist_bucket{m=\"x\",le=\"0.1\"} 2\n"
                     "cm_hist_bucket{m=\"x\",le=\"1\"} 3\n"
                     "cm_hist_bucket{m=\"x\",le=\"10\"} 3\n"
                     "cm_hist_bucket{m=\"x\",le=\"+Inf\"} 4\n"),
              std::string::npos)
        << t;
    double v;
    EXPECT_EQ(message(osp_metric_value(m, &v)),
              "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value");
    EXPECT_EQ(message(osp_metric_increment(m, 1)),
              "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment");
    osp_metric *none = nullptr;
    EXPECT_EQ(message(osp_metric_new(f, nullptr, nullptr, 0, nullptr, 0, &none)),
              "Bucket boundaries not found in Metric args.");
    const double unsorted[] = {1, 1};
    EXPECT_EQ(message(osp_metric_new(f, nullptr, nullptr, 0, unsorted, 2, &none)),
              "Bucket Boundaries must be strictly sorted");
    const char *le = "le";
    EXPECT_EQ(message(osp_metric_new(f, &le, &le, 1, bounds, 3, &none)),
              "Invalid label name");
    osp_metric_delete(m);
    osp_metric_family_delete(f);
}

TEST(CustomMetrics, SameNameSharesTheFamilyAndSameLabelsTheSeries) {
    osp_metric_family *a = family(OSP_METRIC_COUNTER, "cm_shared", "first");
    osp_metric_family *b = family(OSP_METRIC_COUNTER, "cm_shared", "second");
    osp_metric *ma = metric(a, {{"k", "v"}});
    osp_metric *mb = metric(b, {{"k", "v"}});
    ASSERT_EQ(osp_metric_increment(ma, 1), nullptr);
    ASSERT_EQ(osp_metric_increment(mb, 2), nullptr);
    double v = 0;
    ASSERT_EQ(osp_metric_value(ma, &v), nullptr);
    EXPECT_EQ(v, 3);
    std::string t = text();
    EXPECT_NE(t.find("# HELP cm_shared first\n"), std::string::npos) << t;
    EXPECT_EQ(t.find("second"), std::string::npos);
    osp_metric_family *other = nullptr;
    EXPECT_EQ(message(osp_metric_family_new(OSP_METRIC_GAUGE, "cm_shared", "",
                                            &other)),
              "Family name already exists with different type");
    // The series stays while a handle holds it; the family stays listed.
    osp_metric_delete(ma);
    EXPECT_NE(text().find("cm_shared{k=\"v\"} 3\n"), std::string::npos);
    osp_metric_delete(mb);
    t = text();
    EXPECT_EQ(t.find("cm_shared{"), std::string::npos) << t;
    EXPECT_NE(t.find("# TYPE cm_shared counter\n"), std::string::npos);
    osp_metric_family_delete(a);
    osp_metric_family_delete(b);
}

TEST(CustomMetrics, DeletingTheFamilyInvalidatesItsMetrics) {
    osp_metric_family *f = family(OSP_METRIC_GAUGE, "cm_invalidated");
    osp_metric *m = metric(f);
    osp_metric_family_delete(f);
    EXPECT_EQ(message(osp_metric_set(m, 1)),
              "Could not set metric value. Metric has been invalidated.");
    double v;
    EXPECT_EQ(message(osp_metric_value(m, &v)),
              "Could not get metric value. Metric has been invalidated.");
    osp_metric_delete(m);
}

TEST(CustomMetrics, NamesFollowPrometheus) {
    osp_metric_family *f = nullptr;
    for (const char *bad : {"", "1abc", "__x", "a-b", "a b"})
        EXPECT_EQ(message(osp_metric_family_new(OSP_METRIC_COUNTER, bad, "", &f)),
                  "Invalid metric name")
            << bad;
    osp_metric_family *ok = family(OSP_METRIC_COUNTER, "cm_ns:ok_1");
    osp_metric *m = nullptr;
    const char *names[] = {"a", "a"};
    const char *values[] = {"1", "2"};
    EXPECT_EQ(message(osp_metric_new(ok, names, values, 2, nullptr, 0, &m)),
              "Duplicate label name");
    const char *colon = "a:b";
    EXPECT_EQ(message(osp_metric_new(ok, &colon, values, 1, nullptr, 0, &m)),
              "Invalid label name");
    const double bounds[] = {1};
    EXPECT_EQ(message(osp_metric_new(ok, nullptr, nullptr, 0, bounds, 1, &m)),
              "Unexpected args found in counter Metric constructor.");
    osp_metric_family_delete(ok);
}

TEST(CustomMetrics, LabelValuesAreEscapedAndSpecialValuesSpelled) {
    osp_metric_family *f = family(OSP_METRIC_GAUGE, "cm_escape");
    osp_metric *m = metric(f, {{"path", "a\"b\\c\nd"}});
    ASSERT_EQ(osp_metric_set(m, INFINITY), nullptr);
    EXPECT_NE(text().find("cm_escape{path=\"a\\\"b\\\\c\\nd\"} +Inf\n"),
              std::string::npos)
        << text();
    ASSERT_EQ(osp_metric_set(m, NAN), nullptr);
    EXPECT_NE(text().find("} Nan\n"), std::string::npos);
    ASSERT_EQ(osp_metric_set(m, 1e21), nullptr);
    EXPECT_NE(text().find("} 1e+21\n"), std::string::npos);
    osp_metric_delete(m);
    osp_metric_family_delete(f);
}

} // namespace
