// The S3 repository's pieces without a network: s3:// URL forms and the
// request URLs they give, SigV4 signing (libcurl, as Osprey sets it up)
// against the examples of S3's documentation, the ListObjectsV2 and error
// readers, and where credentials and region come from.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "osp_test.h"
#include "s3_credentials.h"
#include "s3_list_xml.h"
#include "s3_sign.h"
#include "s3_url.h"

namespace fs = std::filesystem;

// ---- URL forms --------------------------------------------------------------

static std::string Url(const s3_location &loc, const char *key,
                       const char *query = nullptr,
                       const char *region = "us-east-1") {
    char *u = s3_location_url(&loc, region, key, query);
    std::string s = u ? u : "";
    free(u);
    return s;
}

TEST(S3Url, AwsBucketAndPrefix) {
    s3_location loc;
    ASSERT_OK(s3_location_parse("s3://my-bucket/models/prod/", &loc));
    EXPECT_STREQ(loc.bucket, "my-bucket");
    EXPECT_STREQ(loc.prefix, "models/prod");
    EXPECT_STREQ(loc.host, "");
    EXPECT_TRUE(loc.https);
    // Virtual-hosted style on AWS, keys encoded as SigV4 signs them.
    EXPECT_EQ(Url(loc, "models/prod/a b/1/model+x.onnx", nullptr, "eu-west-1"),
              "https://my-bucket.s3.eu-west-1.amazonaws.com/"
              "models/prod/a%20b/1/model%2Bx.onnx");
    EXPECT_EQ(Url(loc, nullptr, "list-type=2&prefix=m%2F"),
              "https://my-bucket.s3.us-east-1.amazonaws.com/"
              "?list-type=2&prefix=m%2F");
}

TEST(S3Url, AwsBucketWithDotsIsPathStyle) {
    s3_location loc;
    ASSERT_OK(s3_location_parse("s3://my.bucket", &loc));
    EXPECT_STREQ(loc.prefix, "");
    EXPECT_EQ(Url(loc, "m/config.pbtxt"),
              "https://s3.us-east-1.amazonaws.com/my.bucket/m/config.pbtxt");
}

TEST(S3Url, EndpointForms) {
    s3_location loc;
    ASSERT_OK(s3_location_parse("s3://127.0.0.1:9000/bucket/a/b", &loc));
    EXPECT_FALSE(loc.https);
    EXPECT_STREQ(loc.host, "127.0.0.1");
    EXPECT_EQ(loc.port, 9000);
    EXPECT_STREQ(loc.bucket, "bucket");
    EXPECT_STREQ(loc.prefix, "a/b");
    EXPECT_EQ(Url(loc, "a/b/m/1/x"), "http://127.0.0.1:9000/bucket/a/b/m/1/x");

    ASSERT_OK(s3_location_parse("s3://http://minio.local:9000/bucket", &loc));
    EXPECT_FALSE(loc.https);
    EXPECT_STREQ(loc.host, "minio.local");
    EXPECT_STREQ(loc.prefix, "");

    ASSERT_OK(
        s3_location_parse("s3://https://minio.local:9443/bucket/p", &loc));
    EXPECT_TRUE(loc.https);
    EXPECT_EQ(Url(loc, "p/k"), "https://minio.local:9443/bucket/p/k");

    char buf[256];
    s3_location_describe(&loc, buf, sizeof buf);
    EXPECT_STREQ(buf, "s3://https://minio.local:9443/bucket/p");
}

TEST(S3Url, BadUrlsSayWhy) {
    s3_location loc;
    const char *bad[] = {
        "/models",                // not s3://
        "s3://",                  // no bucket
        "s3://Bucket/x",          // upper case
        "s3://ab",                // too short
        "s3://https://bucket/x",  // a scheme needs HOST:PORT
        "s3://host:0/bucket",     // port 0
        "s3://host:70000/bucket", // port out of range
        "s3://host:12ab/bucket",  // not a port
        "s3://127.0.0.1:9000/",   // endpoint without bucket
        "s3://-bucket-/x",        // must start and end alphanumeric
    };
    for (const char *url : bad)
        EXPECT_ERROR_CODE(s3_location_parse(url, &loc), OSP_ERROR_INVALID_ARG);
    std::string longer = "s3://bucket/" + std::string(S3_MAX_PREFIX, 'a');
    EXPECT_ERROR_CODE(s3_location_parse(longer.c_str(), &loc),
                      OSP_ERROR_INVALID_ARG);
}

TEST(S3Url, EncodeKeepsUnreservedAndMaybeSlash) {
    char buf[64];
    size_t len = 0;
    ASSERT_TRUE(s3_url_encode("a-Z_0.~/ é=", false, buf, &len, sizeof buf));
    EXPECT_STREQ(buf, "a-Z_0.~%2F%20%C3%A9%3D");
    len = 0;
    ASSERT_TRUE(s3_url_encode("a/b", true, buf, &len, sizeof buf));
    EXPECT_STREQ(buf, "a/b");
    len = 0;
    EXPECT_FALSE(s3_url_encode("////", false, buf, &len, 8)); // does not fit
}

// ---- SigV4 ------------------------------------------------------------------

// Accepts one connection on a loopback port, keeps the request head and
// answers 200 with no body.
class OneRequestServer {
  public:
    OneRequestServer() {
        fd_ = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        bind(fd_, reinterpret_cast<sockaddr *>(&addr), sizeof addr);
        listen(fd_, 1);
        getsockname(fd_, reinterpret_cast<sockaddr *>(&addr), &len);
        port_ = ntohs(addr.sin_port);
        thread_ = std::thread([this] { Serve(); });
    }
    ~OneRequestServer() {
        if (thread_.joinable())
            thread_.join();
        close(fd_);
    }
    int port() const {
        return port_;
    }
    // The request head (waits for it).
    std::string Head() {
        thread_.join();
        return head_;
    }

  private:
    void Serve() {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0)
            return;
        char buf[4096];
        while (head_.find("\r\n\r\n") == std::string::npos) {
            ssize_t n = read(c, buf, sizeof buf);
            if (n <= 0)
                break;
            head_.append(buf, static_cast<size_t>(n));
        }
        const char reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        (void)!write(c, reply, sizeof reply - 1);
        close(c);
    }
    int fd_ = -1;
    int port_ = 0;
    std::thread thread_;
    std::string head_;
};

// The value of header `name` (lower case) in an HTTP request head.
static std::string Header(const std::string &head, const std::string &name) {
    std::istringstream in(head);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        std::string lower = line;
        for (char &ch : lower)
            ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
        if (lower.rfind(name + ":", 0) == 0)
            return line.substr(line.find(':') + 2);
    }
    return "";
}

// The Authorization header Osprey's request setup makes libcurl send for
// `url`, with the documentation's keys and date.
static std::string SignedAuthorization(const std::string &url,
                                       const char *range,
                                       const char *session_token = nullptr) {
    OneRequestServer server;
    s3_credentials creds{};
    creds.access_key_id = const_cast<char *>("AKIAIOSFODNN7EXAMPLE");
    creds.secret_access_key =
        const_cast<char *>("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    creds.session_token = const_cast<char *>(session_token);
    creds.region = const_cast<char *>("us-east-1");
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = nullptr;
    EXPECT_TRUE(s3_sign_request(curl, &creds, url.c_str(), range,
                                "20130524T000000Z", &headers));
    std::string connect_to = "examplebucket.s3.amazonaws.com:80:127.0.0.1:" +
                             std::to_string(server.port());
    struct curl_slist *connect = curl_slist_append(nullptr, connect_to.c_str());
    curl_easy_setopt(curl, CURLOPT_CONNECT_TO, connect);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    CURLcode rc = curl_easy_perform(curl);
    EXPECT_EQ(rc, CURLE_OK) << curl_easy_strerror(rc);
    curl_slist_free_all(headers);
    curl_slist_free_all(connect);
    curl_easy_cleanup(curl);
    return Header(server.Head(), "authorization");
}

TEST(S3Sign, MatchesTheExamplesOfS3Documentation) {
    std::ifstream in(std::string(OSPREY_SOURCE_DIR) +
                     "/tests/unit/data/s3_sigv4_examples.txt");
    ASSERT_TRUE(in.good());
    std::string line;
    int checked = 0;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#')
            continue;
        std::vector<std::string> f;
        std::istringstream fields(line);
        for (std::string part; std::getline(fields, part, '|');)
            f.push_back(part);
        ASSERT_EQ(f.size(), 5u) << line;
        std::string expected =
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/"
            "us-east-1/s3/aws4_request, SignedHeaders=" +
            f[3] + ", Signature=" + f[4];
        EXPECT_EQ(
            SignedAuthorization(f[1], f[2] == "-" ? nullptr : f[2].c_str()),
            expected)
            << f[0];
        checked++;
    }
    EXPECT_EQ(checked, 3);
}

TEST(S3Sign, SessionTokenIsSentAndSigned) {
    std::string auth = SignedAuthorization(
        "http://examplebucket.s3.amazonaws.com/test.txt", nullptr, "TOKEN");
    EXPECT_NE(auth.find("SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
                        "x-amz-security-token,"),
              std::string::npos)
        << auth;
}

TEST(S3Sign, AnonymousRequestsAreNotSigned) {
    OneRequestServer server;
    s3_credentials creds{};
    creds.region = const_cast<char *>("us-east-1");
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = nullptr;
    std::string url =
        "http://127.0.0.1:" + std::to_string(server.port()) + "/b/k";
    ASSERT_TRUE(
        s3_sign_request(curl, &creds, url.c_str(), nullptr, nullptr, &headers));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    EXPECT_EQ(curl_easy_perform(curl), CURLE_OK);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    EXPECT_EQ(Header(server.Head(), "authorization"), "");
}

// ---- ListObjectsV2 and error replies
// -----------------------------------------

static const char kPage[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<Name>b</Name><Prefix>r/</Prefix><KeyCount>2</KeyCount>"
    "<MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>"
    "<Contents><Key>r/m/config.pbtxt</Key><Size>120</Size>"
    "<ETag>&quot;5d41402abc4b2a76b9719d911017c592&quot;</ETag></Contents>"
    "<Contents><Key>r/m/1/a&amp;b</Key><ETag>\"e-2\"</ETag>"
    "<Size>18446744073709551615</Size></Contents>"
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
    "</NextContinuationToken></ListBucketResult>";

TEST(S3ListXml, ReadsObjectsAndContinuation) {
    s3_list_page page;
    ASSERT_OK(s3_list_page_parse(kPage, sizeof kPage - 1, &page));
    ASSERT_EQ(page.n_objects, 2u);
    EXPECT_STREQ(page.objects[0].key, "r/m/config.pbtxt");
    EXPECT_EQ(page.objects[0].size, 120u);
    EXPECT_STREQ(page.objects[0].etag, "5d41402abc4b2a76b9719d911017c592");
    EXPECT_STREQ(page.objects[1].key, "r/m/1/a&b");
    EXPECT_EQ(page.objects[1].size, UINT64_MAX);
    EXPECT_STREQ(page.objects[1].etag, "e-2");
    EXPECT_TRUE(page.truncated);
    EXPECT_STREQ(page.next_token,
                 "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    s3_list_page_destroy(&page);
}

TEST(S3ListXml, EmptyLastPage) {
    const char xml[] = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                       "<KeyCount>0</KeyCount></ListBucketResult>";
    s3_list_page page;
    ASSERT_OK(s3_list_page_parse(xml, sizeof xml - 1, &page));
    EXPECT_EQ(page.n_objects, 0u);
    EXPECT_FALSE(page.truncated);
    EXPECT_EQ(page.next_token, nullptr);
    s3_list_page_destroy(&page);
}

TEST(S3ListXml, RefusesWhatIsNotAListing) {
    std::string deep = "<ListBucketResult>";
    for (int i = 0; i < 20; i++)
        deep += "<a>";
    const std::string bad[] = {
        "",
        "not xml",
        "<Error><Code>AccessDenied</Code></Error>",
        "<ListBucketResult><Contents><Size>1</Size></Contents>"
        "</ListBucketResult>", // no Key
        "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents>"
        "</ListBucketResult>", // not a size
        "<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999"
        "</Size></Contents></ListBucketResult>", // over 64 bits
        "<ListBucketResult><IsTruncated>true</IsTruncated>"
        "</ListBucketResult>", // truncated without a token
        "<ListBucketResult><Contents><Key>" + std::string(2000, 'k') +
            "</Key></Contents></ListBucketResult>", // key over 1024 bytes
        deep,
        // An entity that expands a billion times.
        "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\">"
        "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
        "<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">"
        "<!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\">"
        "<!ENTITY e \"&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;\">"
        "<!ENTITY f \"&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;\">"
        "<!ENTITY g \"&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;\">"
        "<!ENTITY h \"&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;\">"
        "<!ENTITY i \"&h;&h;&h;&h;&h;&h;&h;&h;&h;&h;\">]>"
        "<ListBucketResult><Contents><Key>&i;</Key></Contents>"
        "</ListBucketResult>",
    };
    for (const std::string &xml : bad) {
        s3_list_page page;
        EXPECT_ERROR_CODE(s3_list_page_parse(xml.data(), xml.size(), &page),
                          OSP_ERROR_INVALID_ARG);
        EXPECT_EQ(page.objects, nullptr);
    }
}

TEST(S3ListXml, ReadsErrorReplies) {
    const char xml[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error>"
        "<Code>AuthorizationHeaderMalformed</Code><Message>The authorization "
        "header is malformed; the region 'us-east-1' is wrong; expecting "
        "'eu-west-1'</Message><Region>eu-west-1</Region>"
        "<RequestId>X</RequestId></Error>";
    s3_error_reply e;
    ASSERT_TRUE(s3_error_parse(xml, sizeof xml - 1, &e));
    EXPECT_STREQ(e.code, "AuthorizationHeaderMalformed");
    EXPECT_STREQ(e.region, "eu-west-1");
    EXPECT_NE(std::string(e.message).find("expecting 'eu-west-1'"),
              std::string::npos);
    std::string long_message =
        "<Error><Message>" + std::string(5000, 'm') + "</Message></Error>";
    ASSERT_TRUE(s3_error_parse(long_message.data(), long_message.size(), &e));
    EXPECT_EQ(strlen(e.message), sizeof e.message - 1);
    EXPECT_FALSE(s3_error_parse("{\"error\":1}", 11, &e));
    EXPECT_FALSE(s3_error_parse(kPage, sizeof kPage - 1, &e));
}

// ---- credentials and region -------------------------------------------------

// Sets the AWS variables of one test and restores the environment after.
class S3Credentials : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("osprey-s3-creds-" + std::to_string(getpid()));
        fs::create_directories(dir_);
        for (const char *name : kVars) {
            const char *v = getenv(name);
            saved_.emplace_back(name, v ? std::optional<std::string>(v)
                                        : std::nullopt);
            unsetenv(name);
        }
        setenv("AWS_SHARED_CREDENTIALS_FILE", (dir_ / "credentials").c_str(),
               1);
        setenv("AWS_CONFIG_FILE", (dir_ / "config").c_str(), 1);
    }
    void TearDown() override {
        for (auto &[name, value] : saved_) {
            if (value)
                setenv(name, value->c_str(), 1);
            else
                unsetenv(name);
        }
        fs::remove_all(dir_);
    }
    void Write(const char *file, const std::string &text) {
        std::ofstream(dir_ / file) << text;
    }
    static constexpr const char *kVars[] = {
        "AWS_ACCESS_KEY_ID",           "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",           "AWS_REGION",
        "AWS_DEFAULT_REGION",          "AWS_PROFILE",
        "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"};
    fs::path dir_;
    std::vector<std::pair<const char *, std::optional<std::string>>> saved_;
};

TEST_F(S3Credentials, EnvironmentFirst) {
    Write("credentials", "[default]\naws_access_key_id = FILEKEY\n"
                         "aws_secret_access_key = filesecret\n");
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_SESSION_TOKEN", "envtoken", 1);
    setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
    s3_credentials c;
    ASSERT_OK(s3_credentials_load(&c));
    EXPECT_STREQ(c.access_key_id, "ENVKEY");
    EXPECT_STREQ(c.secret_access_key, "envsecret");
    EXPECT_STREQ(c.session_token, "envtoken");
    EXPECT_STREQ(c.region, "eu-west-3");
    EXPECT_STREQ(c.source, "the environment");
    s3_credentials_destroy(&c);
    setenv("AWS_REGION", "ap-south-1", 1); // wins over AWS_DEFAULT_REGION
    ASSERT_OK(s3_credentials_load(&c));
    EXPECT_STREQ(c.region, "ap-south-1");
    s3_credentials_destroy(&c);
}

TEST_F(S3Credentials, ProfilesOfTheSharedFiles) {
    Write("credentials",
          "# comment\n[default]\naws_access_key_id=DEFAULTKEY\n"
          "aws_secret_access_key=defaultsecret\n\n"
          "[ci]\n  aws_access_key_id = CIKEY  \n"
          "aws_secret_access_key = ci/secret+x\naws_session_token = citoken\n");
    Write("config", "[default]\nregion = us-west-2\n"
                    "[profile ci]\nregion = eu-central-1\n");
    s3_credentials c;
    ASSERT_OK(s3_credentials_load(&c));
    EXPECT_STREQ(c.access_key_id, "DEFAULTKEY");
    EXPECT_STREQ(c.region, "us-west-2");
    EXPECT_EQ(c.session_token, nullptr);
    EXPECT_STREQ(c.source, "the shared credentials file");
    s3_credentials_destroy(&c);

    setenv("AWS_PROFILE", "ci", 1);
    ASSERT_OK(s3_credentials_load(&c));
    EXPECT_STREQ(c.access_key_id, "CIKEY");
    EXPECT_STREQ(c.secret_access_key, "ci/secret+x");
    EXPECT_STREQ(c.session_token, "citoken");
    EXPECT_STREQ(c.region, "eu-central-1");
    s3_credentials_destroy(&c);
}

TEST_F(S3Credentials, KeysInTheConfigFile) {
    Write("config", "[profile other]\naws_access_key_id = CFGKEY\n"
                    "aws_secret_access_key = cfgsecret\n");
    setenv("AWS_PROFILE", "other", 1);
    s3_credentials c;
    ASSERT_OK(s3_credentials_load(&c));
    EXPECT_STREQ(c.access_key_id, "CFGKEY");
    EXPECT_STREQ(c.source, "the config file");
    EXPECT_STREQ(c.region, "us-east-1"); // the default
    s3_credentials_destroy(&c);
}

TEST_F(S3Credentials, NoneMeansAnonymous) {
    s3_credentials c;
    ASSERT_OK(s3_credentials_load(&c));
    EXPECT_EQ(c.access_key_id, nullptr);
    EXPECT_EQ(c.secret_access_key, nullptr);
    s3_credentials_destroy(&c);
}

TEST_F(S3Credentials, MistakesAreErrorsWithoutSecrets) {
    setenv("AWS_PROFILE", "missing", 1);
    s3_credentials c;
    EXPECT_ERROR_CODE(s3_credentials_load(&c), OSP_ERROR_INVALID_ARG);
    unsetenv("AWS_PROFILE");
    setenv("AWS_SECRET_ACCESS_KEY", "topsecret", 1);
    osp_error *err = s3_credentials_load(&c);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(std::string(osp_error_message(err)).find("topsecret"),
              std::string::npos);
    osp_error_free(err);
}
