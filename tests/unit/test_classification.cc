// Top-k classification of an output (server/core/requests/classification.c).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "classification.h"
#include "osprey/memory.h"

namespace {

// An output of `dtype` holding `values` with shape `dims`.
template <typename T>
osp_infer_output MakeOutput(osp_datatype dtype, const std::vector<T> &values,
                            std::vector<int64_t> dims) {
    osp_infer_output out = {};
    out.dtype = dtype;
    out.shape.rank = (int)dims.size();
    for (size_t i = 0; i < dims.size(); i++)
        out.shape.dims[i] = dims[i];
    out.byte_size = values.size() * sizeof(T);
    out.data = osp_buffer_new_host(out.byte_size);
    if (out.byte_size)
        memcpy(out.data->data, values.data(), out.byte_size);
    return out;
}

// The BYTES elements of a classified output.
std::vector<std::string> Strings(const osp_infer_output &out) {
    std::vector<std::string> s;
    const char *p = (const char *)out.data->data;
    for (size_t off = 0; off < out.byte_size;) {
        uint32_t n;
        memcpy(&n, p + off, 4);
        s.emplace_back(p + off + 4, n);
        off += 4 + n;
    }
    return s;
}

TEST(Classification, TopKPerBatchItemWithTiesByIndex) {
    auto out =
        MakeOutput<float>(OSP_TYPE_FP32, {1, 3, 3, 0, 0.5f, 2, 2, -1}, {2, 4});
    ASSERT_EQ(classification_apply(&out, true, 2, nullptr), nullptr);
    EXPECT_EQ(out.dtype, OSP_TYPE_BYTES);
    EXPECT_EQ(out.shape.rank, 2);
    EXPECT_EQ(out.shape.dims[0], 2);
    EXPECT_EQ(out.shape.dims[1], 2);
    EXPECT_EQ(Strings(out),
              (std::vector<std::string>{"3.000000:1", "3.000000:2",
                                        "2.000000:1", "2.000000:2"}));
    osp_buffer_free(out.data);
}

TEST(Classification, NanSortsLastAndLabelsApply) {
    auto out = MakeOutput<double>(OSP_TYPE_FP64, {NAN, -2.5, 1e300}, {3});
    char a[] = "a", b[] = "b";
    char *names[] = {a, b};
    class_labels labels = {names, 2};
    ASSERT_EQ(classification_apply(&out, false, 5, &labels), nullptr);
    EXPECT_EQ(out.shape.rank, 1);
    EXPECT_EQ(out.shape.dims[0], 3);
    std::vector<std::string> s = Strings(out);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0].substr(s[0].size() - 9), ".000000:2"); // 1e300 in %f
    EXPECT_EQ(s[1], "-2.500000:1:b");
    EXPECT_EQ(s[2], "nan:0:a");
    osp_buffer_free(out.data);
}

TEST(Classification, IntegersPrintExactly) {
    auto out = MakeOutput<uint64_t>(OSP_TYPE_UINT64,
                                    {UINT64_MAX, 0, UINT64_MAX - 1}, {1, 3});
    ASSERT_EQ(classification_apply(&out, true, 3, nullptr), nullptr);
    EXPECT_EQ(Strings(out),
              (std::vector<std::string>{"18446744073709551615:0",
                                        "18446744073709551614:2", "0:1"}));
    osp_buffer_free(out.data);
    auto small = MakeOutput<int8_t>(OSP_TYPE_INT8, {-128, 127}, {2});
    ASSERT_EQ(classification_apply(&small, false, 1, nullptr), nullptr);
    EXPECT_EQ(Strings(small), (std::vector<std::string>{"127:1"}));
    osp_buffer_free(small.data);
}

TEST(Classification, EmptyBatchAndUnsupportedTypes) {
    auto out = MakeOutput<float>(OSP_TYPE_FP32, {}, {0, 4});
    ASSERT_EQ(classification_apply(&out, true, 2, nullptr), nullptr);
    EXPECT_EQ(out.byte_size, 0u);
    EXPECT_EQ(out.shape.dims[0], 0);
    osp_buffer_free(out.data);
    for (osp_datatype dt :
         {OSP_TYPE_BOOL, OSP_TYPE_FP16, OSP_TYPE_BF16, OSP_TYPE_BYTES}) {
        osp_error *err = classification_check_dtype(dt);
        ASSERT_NE(err, nullptr);
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
        osp_error_free(err);
    }
}

TEST(Classification, LabelFileLines) {
    std::string path = ::testing::TempDir() + "/osprey_labels.txt";
    FILE *f = fopen(path.c_str(), "wb");
    fputs("cat\r\ndog\n\nbird", f);
    fclose(f);
    class_labels labels;
    ASSERT_EQ(class_labels_load(path.c_str(), &labels), nullptr);
    ASSERT_EQ(labels.n, 4u);
    EXPECT_STREQ(labels.labels[0], "cat");
    EXPECT_STREQ(labels.labels[1], "dog");
    EXPECT_STREQ(labels.labels[2], "");
    EXPECT_STREQ(labels.labels[3], "bird");
    class_labels_free(&labels);
    osp_error *err = class_labels_load("/nonexistent/labels.txt", &labels);
    EXPECT_NE(err, nullptr);
    osp_error_free(err);
}

} // namespace
