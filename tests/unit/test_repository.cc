// The model repository on disk (server/core/config/repository.h): names, model
// listing, model folders and version selection, including symlinks that
// try to leave the repository.
#include <gtest/gtest.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

extern "C" {
#include "repository.h" // has no extern "C" guard of its own
}

namespace fs = std::filesystem;

namespace {

// Frees an error and returns its code (OSP_ERROR_UNKNOWN for success).
osp_error_code CodeOf(osp_error *err) {
    osp_error_code code = osp_error_get_code(err);
    osp_error_free(err);
    return code;
}

class Repository : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/osp_repository_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        base_ = tmpl;
        root_ = base_ + "/models";
        outside_ = base_ + "/outside";
        ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
        ASSERT_EQ(mkdir(outside_.c_str(), 0755), 0);
        ASSERT_EQ(mkdir((outside_ + "/1").c_str(), 0755), 0);
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(base_, ec);
    }

    void Dir(const std::string &rel) {
        fs::create_directories(root_ + "/" + rel);
    }
    void File(const std::string &rel) {
        FILE *f = fopen((root_ + "/" + rel).c_str(), "w");
        ASSERT_NE(f, nullptr) << rel;
        fclose(f);
    }
    void Link(const std::string &target, const std::string &rel) {
        ASSERT_EQ(symlink(target.c_str(), (root_ + "/" + rel).c_str()), 0)
            << rel;
    }

    std::vector<std::string> List(osp_error_code *code = nullptr) {
        char **names = nullptr;
        size_t n = 0;
        std::vector<std::string> out;
        osp_error *err = repository_list(root_.c_str(), &names, &n);
        if (code)
            *code = osp_error_get_code(err);
        osp_error_free(err);
        if (err)
            return out;
        for (size_t i = 0; i < n; i++) {
            out.push_back(names[i]);
            free(names[i]);
        }
        free(names);
        return out;
    }

    // Versions of model folder `rel` selected by `policy`; an empty vector
    // and *code set on error.
    std::vector<int64_t> Select(const std::string &rel,
                                const osp_version_policy &policy,
                                osp_error_code *code = nullptr) {
        int64_t *versions = nullptr;
        size_t n = 0;
        osp_error *err = repository_select_versions((root_ + "/" + rel).c_str(),
                                                    &policy, &versions, &n);
        if (code)
            *code = osp_error_get_code(err);
        std::vector<int64_t> out;
        if (err) {
            osp_error_free(err);
            return out;
        }
        out.assign(versions, versions + n);
        free(versions);
        return out;
    }

    static osp_version_policy Latest(uint32_t n) {
        osp_version_policy p{};
        p.kind = OSP_VERSION_POLICY_LATEST;
        p.latest_num_versions = n;
        return p;
    }

    std::string base_, root_, outside_;
};

TEST(RepositoryName, Check) {
    EXPECT_EQ(CodeOf(repository_check_name("simple")), OSP_ERROR_UNKNOWN);
    EXPECT_EQ(CodeOf(repository_check_name("a.b-c_d")), OSP_ERROR_UNKNOWN);
    EXPECT_EQ(CodeOf(repository_check_name("...")), OSP_ERROR_UNKNOWN);

    for (const char *bad : {"", ".", "..", "a/b", "/abs", "../x", "x/"})
        EXPECT_EQ(CodeOf(repository_check_name(bad)), OSP_ERROR_INVALID_ARG)
            << "'" << bad << "'";
    EXPECT_EQ(CodeOf(repository_check_name(nullptr)), OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(
        CodeOf(repository_check_name(std::string(NAME_MAX + 1, 'a').c_str())),
        OSP_ERROR_INVALID_ARG);

    osp_error *err = repository_check_name("a/b");
    EXPECT_STREQ(osp_error_message(err), "model name 'a/b' contains '/'");
    osp_error_free(err);
}

TEST_F(Repository, ListSortsAndSkips) {
    Dir("zeta");
    Dir("alpha");
    Dir("mid/1");
    Dir(".hidden");
    File("plain_file");
    Link("alpha", "alias");          // inside the root: listed
    Link(outside_, "escape");        // outside the root: skipped
    Link("../outside", "escape2");   // relative, still outside
    Link(".", "self");               // the root itself is not a model
    Link("plain_file", "file_link"); // not a folder
    Link("missing", "dangling");

    EXPECT_EQ(List(),
              (std::vector<std::string>{"alias", "alpha", "mid", "zeta"}));
}

TEST_F(Repository, ListEmptyAndMissing) {
    EXPECT_TRUE(List().empty());

    char **names = nullptr;
    size_t n = 0;
    EXPECT_EQ(CodeOf(repository_list((base_ + "/nope").c_str(), &names, &n)),
              OSP_ERROR_NOT_FOUND);
    EXPECT_EQ(CodeOf(repository_list(nullptr, &names, &n)),
              OSP_ERROR_INVALID_ARG);
}

TEST_F(Repository, ModelDir) {
    Dir("simple/1");
    Link("simple", "alias");
    Link(outside_, "escape");
    Link("../outside/1", "escape_deep");
    File("plain_file");

    char *path = nullptr;
    osp_error *err = repository_model_dir(root_.c_str(), "simple", &path);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    char *expected = realpath((root_ + "/simple").c_str(), nullptr);
    ASSERT_NE(expected, nullptr);
    EXPECT_STREQ(path, expected);
    free(path);

    err = repository_model_dir(root_.c_str(), "alias", &path);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    EXPECT_STREQ(path, expected); // resolved
    free(path);
    free(expected);

    // A root given through a relative path with dot segments works too.
    err =
        repository_model_dir((root_ + "/./simple/..").c_str(), "simple", &path);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    free(path);

    path = nullptr;
    EXPECT_EQ(CodeOf(repository_model_dir(root_.c_str(), "missing", &path)),
              OSP_ERROR_NOT_FOUND);
    EXPECT_EQ(CodeOf(repository_model_dir(root_.c_str(), "plain_file", &path)),
              OSP_ERROR_NOT_FOUND);
    EXPECT_EQ(CodeOf(repository_model_dir(root_.c_str(), "escape", &path)),
              OSP_ERROR_INVALID_ARG);
    EXPECT_EQ(CodeOf(repository_model_dir(root_.c_str(), "escape_deep", &path)),
              OSP_ERROR_INVALID_ARG);
    for (const char *bad : {"", ".", "..", "simple/1", "../outside"})
        EXPECT_EQ(CodeOf(repository_model_dir(root_.c_str(), bad, &path)),
                  OSP_ERROR_INVALID_ARG)
            << bad;
    EXPECT_EQ(CodeOf(repository_model_dir((base_ + "/nope").c_str(), "simple",
                                          &path)),
              OSP_ERROR_NOT_FOUND);
    EXPECT_EQ(path, nullptr); // untouched on failure
}

TEST_F(Repository, SelectVersionsByPolicy) {
    for (const char *v : {"1", "2", "3", "10"})
        Dir(std::string("m/") + v);
    // Ignored: leading zeros, non-numeric, too large, files, escapes.
    for (const char *v : {"0", "010", "007", "abc", "1a", "-5", "+5", " 4",
                          "99999999999999999999"})
        Dir(std::string("m/") + v);
    File("m/4");
    File("m/config.pbtxt");
    Link(outside_ + "/1", "m/5"); // outside the repository
    Link("../other", "m/6");      // inside the root, outside the model
    Dir("other");
    Link("2", "m/7"); // inside the model folder: a version

    osp_error_code code = OSP_ERROR_UNKNOWN;
    osp_version_policy zeroed{}; // latest, num_versions 0 = default 1
    EXPECT_EQ(Select("m", zeroed), (std::vector<int64_t>{10}));
    EXPECT_EQ(Select("m", Latest(1)), (std::vector<int64_t>{10}));
    EXPECT_EQ(Select("m", Latest(2)), (std::vector<int64_t>{7, 10}));
    EXPECT_EQ(Select("m", Latest(100)), (std::vector<int64_t>{1, 2, 3, 7, 10}));

    osp_version_policy all{};
    all.kind = OSP_VERSION_POLICY_ALL;
    EXPECT_EQ(Select("m", all), (std::vector<int64_t>{1, 2, 3, 7, 10}));

    int64_t wanted[] = {10, 3, 42, 3, 4, 5, 6};
    osp_version_policy specific{};
    specific.kind = OSP_VERSION_POLICY_SPECIFIC;
    specific.versions = wanted;
    specific.n_versions = sizeof(wanted) / sizeof(wanted[0]);
    EXPECT_EQ(Select("m", specific), (std::vector<int64_t>{3, 10}));

    int64_t absent[] = {42};
    specific.versions = absent;
    specific.n_versions = 1;
    EXPECT_TRUE(Select("m", specific, &code).empty());
    EXPECT_EQ(code, OSP_ERROR_NOT_FOUND);

    specific.n_versions = 0;
    EXPECT_TRUE(Select("m", specific, &code).empty());
    EXPECT_EQ(code, OSP_ERROR_NOT_FOUND);
}

TEST_F(Repository, SelectVersionsNoneOrMissing) {
    Dir("empty");
    Dir("only_junk/0");
    Dir("only_junk/01");
    File("only_junk/1");
    osp_error_code code = OSP_ERROR_UNKNOWN;
    EXPECT_TRUE(Select("empty", Latest(1), &code).empty());
    EXPECT_EQ(code, OSP_ERROR_NOT_FOUND);
    EXPECT_TRUE(Select("only_junk", Latest(1), &code).empty());
    EXPECT_EQ(code, OSP_ERROR_NOT_FOUND);
    EXPECT_TRUE(Select("missing", Latest(1), &code).empty());
    EXPECT_EQ(code, OSP_ERROR_NOT_FOUND);

    int64_t *versions = nullptr;
    size_t n = 0;
    EXPECT_EQ(CodeOf(repository_select_versions(root_.c_str(), nullptr,
                                                &versions, &n)),
              OSP_ERROR_INVALID_ARG);
}

// The pieces together, as the loader uses them: a config's version policy
// applied to the folder the repository resolves.
TEST_F(Repository, ConfigPolicyDrivesSelection) {
    Dir("simple/1");
    Dir("simple/2");
    Dir("simple/3");
    const std::string text = "version_policy: { specific: { versions: [1, 3] "
                             "} }";
    osp_model_config *cfg = nullptr;
    osp_error *err =
        osp_model_config_parse(text.data(), text.size(), "simple", &cfg);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);

    char *dir = nullptr;
    err = repository_model_dir(root_.c_str(), "simple", &dir);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    int64_t *versions = nullptr;
    size_t n = 0;
    err = repository_select_versions(dir, &cfg->version_policy, &versions, &n);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    ASSERT_EQ(n, 2u);
    EXPECT_EQ(versions[0], 1);
    EXPECT_EQ(versions[1], 3);
    free(versions);
    free(dir);
    osp_model_config_free(cfg);
}

} // namespace
