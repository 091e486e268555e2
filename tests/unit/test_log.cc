// The log record as Triton writes it: prefix and JSON-escaped message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>

#include "osprey/log.h"

namespace {

std::string last_record(const std::string &path) {
    std::ifstream in(path);
    std::string line, last;
    while (std::getline(in, line))
        last = line;
    return last;
}

TEST(Log, RecordPrefixAndEscapedMessage) {
    char path[] = "/tmp/osprey_log_test_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    osp_error *err = osp_log_set_file(path);
    ASSERT_EQ(err, nullptr);
    OSP_LOG_WARN("a\"b\\c\nd\te\x01 caf\xc3\xa9");
    std::string record = last_record(path);
    std::smatch m;
    ASSERT_TRUE(std::regex_match(
        record, m,
        std::regex(
            R"(W\d{4} \d\d:\d\d:\d\d\.\d{6} (\d+) test_log\.cc:\d+\] (.*))")))
        << record;
    EXPECT_EQ(std::stoul(m[1]), (unsigned long)getpid());
    EXPECT_EQ(m[2].str(), "\"a\\\"b\\\\c\\nd\\te\\u0001 caf\xc3\xa9\"");

    osp_log_set_format(OSP_LOG_FORMAT_ISO8601);
    osp_log_set_verbose(1);
    OSP_LOG_VERBOSE("v");
    record = last_record(path);
    EXPECT_TRUE(std::regex_match(
        record,
        std::regex(
            R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ test_log\.cc:\d+\] "v")")))
        << record;
    osp_log_set_format(OSP_LOG_FORMAT_DEFAULT);
    osp_log_set_verbose(0);
    osp_log_close_file();
    unlink(path);
}

} // namespace
