// server/json/json_util.h: json_parse keeps the tree it builds bounded by
// JSON_TREE_MAX_DEPTH whatever the body's nesting (a hostile body nested
// 250,000 levels deep cost ~90 MB per request before), replacing deeper
// containers by empty ones of their kind so the handlers' type checks
// still see what Triton's full parse would.
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "json_util.h"
}
#include "osp_test.h"

namespace {

// Parses text with json_parse_body; the tree or a failed test.
json_object *Parse(const std::string &text) {
    json_object *root = nullptr;
    osp_error *err = json_parse_body(text.c_str(), text.size(), &root);
    EXPECT_EQ(err, nullptr) << (err ? osp_error_message(err) : "");
    if (err)
        osp_error_free(err);
    return root;
}

// Depth of the first-child chain under v (a container counts 1).
size_t ChainDepth(json_object *v) {
    size_t d = 0;
    while (v && (json_object_is_type(v, json_type_array) ||
                 json_object_is_type(v, json_type_object))) {
        d++;
        json_object *next = nullptr;
        if (json_object_is_type(v, json_type_array)) {
            if (json_object_array_length(v) > 0)
                next = json_object_array_get_idx(v, 0);
        } else {
            json_object_object_foreach(v, key, val) {
                (void)key;
                next = val;
                break;
            }
        }
        v = next;
    }
    return d;
}

TEST(JsonParse, DeepNestingIsPrunedToAnEmptyContainerOfItsKind) {
    const size_t depth = 250000;
    std::string text = "{\"ready\":" + std::string(depth, '[') + "true" +
                       std::string(depth, ']') + ",\"after\":\"x\"}";
    json_object *root = Parse(text);
    ASSERT_NE(root, nullptr);
    json_object *ready = json_member(root, "ready");
    ASSERT_NE(ready, nullptr);
    EXPECT_TRUE(json_object_is_type(ready, json_type_array));
    // JSON_TREE_MAX_DEPTH levels in full, then one empty array
    EXPECT_EQ(ChainDepth(root), (size_t)JSON_TREE_MAX_DEPTH + 1);
    // members after the pruned value are still there
    json_object *after = json_member(root, "after");
    ASSERT_NE(after, nullptr);
    EXPECT_STREQ(json_object_get_string(after), "x");
    json_free(root);
}

TEST(JsonParse, PrunedObjectsStayObjectsAndBracketsInStringsAreText) {
    std::string deep;
    for (int i = 0; i < 200; i++)
        deep += "{\"k]\\\"[\":";
    deep += "\"v\"";
    for (int i = 0; i < 200; i++)
        deep += "}";
    std::string text = "[" + deep + ",\"[[{\",7]";
    json_object *root = Parse(text);
    ASSERT_NE(root, nullptr);
    ASSERT_EQ(json_object_array_length(root), 3u);
    EXPECT_EQ(ChainDepth(root), (size_t)JSON_TREE_MAX_DEPTH + 1);
    EXPECT_STREQ(json_object_get_string(json_object_array_get_idx(root, 1)),
                 "[[{");
    EXPECT_EQ(json_object_get_int(json_object_array_get_idx(root, 2)), 7);
    json_free(root);
}

TEST(JsonParse, ShallowDocumentsAreUntouched) {
    std::string text = std::string(JSON_TREE_MAX_DEPTH, '[') + "1" +
                       std::string(JSON_TREE_MAX_DEPTH, ']');
    json_object *root = Parse(text);
    ASSERT_NE(root, nullptr);
    json_object *v = root;
    for (int i = 0; i < JSON_TREE_MAX_DEPTH; i++) {
        ASSERT_TRUE(json_object_is_type(v, json_type_array));
        ASSERT_EQ(json_object_array_length(v), 1u);
        v = json_object_array_get_idx(v, 0);
    }
    EXPECT_EQ(json_object_get_int(v), 1);
    json_free(root);
}

TEST(JsonRootMembers, KeepsOrderRepeatsAndValueTexts) {
    std::string text =
        " { \"a\" : [1, \"]\", {\"x\": [2]}] ,\"b\\\"\":\"s,}\", \"a\":-1.5e3 "
        ",\"n\":null}";
    json_member_span *m = nullptr;
    size_t n = 0;
    ASSERT_EQ(json_root_members(text.c_str(), text.size(), &m, &n), nullptr);
    ASSERT_EQ(n, 4u);
    auto key = [&](size_t i) {
        return text.substr(m[i].key_start, m[i].key_end - m[i].key_start);
    };
    auto value = [&](size_t i) {
        return text.substr(m[i].value_start, m[i].value_end - m[i].value_start);
    };
    EXPECT_EQ(key(0), "a");
    EXPECT_EQ(value(0), "[1, \"]\", {\"x\": [2]}]");
    EXPECT_EQ(key(1), "b\\\"");
    EXPECT_EQ(value(1), "\"s,}\"");
    EXPECT_EQ(key(2), "a");
    EXPECT_EQ(value(2), "-1.5e3");
    EXPECT_EQ(key(3), "n");
    EXPECT_EQ(value(3), "null");
    free(m);

    ASSERT_EQ(json_root_members("[1]", 3, &m, &n), nullptr);
    EXPECT_EQ(n, 0u);
    free(m);
}

} // namespace
