// Several repositories read as one (repository_set.c): the union of their
// models, a name in two of them left out (Triton's rule), each model's
// folder taken from the repository that has it.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "osp_test.h"
#include "repository_set.h"

namespace fs = std::filesystem;

class RepositorySet : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() /
                ("osprey-repo-set-" + std::to_string(getpid()));
        fs::create_directories(root_ / "a");
        fs::create_directories(root_ / "b");
        Model("a", "only_a");
        Model("a", "both");
        Model("b", "only_b");
        Model("b", "both");
        a_ = (root_ / "a").string();
        b_ = (root_ / "b").string();
    }
    void TearDown() override {
        fs::remove_all(root_);
    }
    void Model(const char *repo, const char *name) {
        fs::create_directories(root_ / repo / name / "1");
        std::ofstream(root_ / repo / name / "config.pbtxt") << "";
    }
    std::vector<std::string> List(const osp_repository_source *s) {
        char **names = nullptr;
        size_t n = 0;
        osp_error *err = s->list(s->self, &names, &n);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
        std::vector<std::string> out;
        for (size_t i = 0; i < n; i++) {
            out.push_back(names[i]);
            free(names[i]);
        }
        free(names);
        return out;
    }
    fs::path root_;
    std::string a_, b_;
};

TEST_F(RepositorySet, UnionWithoutNamesInTwoRepositories) {
    const char *paths[] = {a_.c_str(), b_.c_str()};
    repository_set *set = nullptr;
    ASSERT_OK(repository_set_new(paths, nullptr, 2, &set));
    const osp_repository_source *s = repository_set_source(set);
    EXPECT_EQ(List(s), (std::vector<std::string>{"only_a", "only_b"}));

    char *dir = nullptr;
    ASSERT_OK(s->model_dir(s->self, "only_b", &dir));
    EXPECT_EQ(fs::path(dir), fs::canonical(root_ / "b" / "only_b"));
    free(dir);
    EXPECT_NE(s->fingerprint(s->self, "only_a"), 0u);
    EXPECT_EQ(s->fingerprint(s->self, "missing"), 0u);
    EXPECT_ERROR_CODE(s->model_dir(s->self, "both", &dir), OSP_ERROR_NOT_FOUND);
    EXPECT_ERROR_CODE(s->model_dir(s->self, "missing", &dir),
                      OSP_ERROR_NOT_FOUND);
    repository_set_free(set);
}

TEST_F(RepositorySet, AMissingFolderIsNamed) {
    std::string missing = (root_ / "nope").string();
    const char *paths[] = {a_.c_str(), missing.c_str()};
    repository_set *set = nullptr;
    osp_error *err = repository_set_new(paths, nullptr, 2, &set);
    ASSERT_NE(err, nullptr);
    EXPECT_NE(TakeMessage(err).find("nope"), std::string::npos);
}

// A caller's source stands in for a folder.
TEST_F(RepositorySet, SourcesMixWithFolders) {
    repository_set *inner = nullptr;
    const char *b_only[] = {b_.c_str()};
    ASSERT_OK(repository_set_new(b_only, nullptr, 1, &inner));
    const osp_repository_source *sources[] = {nullptr,
                                              repository_set_source(inner)};
    const char *paths[] = {a_.c_str(), nullptr};
    repository_set *set = nullptr;
    ASSERT_OK(repository_set_new(paths, sources, 2, &set));
    EXPECT_EQ(List(repository_set_source(set)),
              (std::vector<std::string>{"only_a", "only_b"}));
    repository_set_free(set);
    repository_set_free(inner);
}
