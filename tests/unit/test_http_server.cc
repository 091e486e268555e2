// The HTTP transport (server/http/http_server.c) with a fake surface and no
// osp_server: query decoding, header lists, body limits, the surface's
// error renderer and the hand-off of upgraded sockets, spoken as raw HTTP
// over loopback sockets.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

extern "C" {
#include "http_server.h"
#include "metrics.h"
}

namespace {

struct FakeSurface {
    osp_tracer *tracer = nullptr;
    std::atomic<int> opened{0};
    std::atomic<int> closed{0};
    std::atomic<int> bytes{0};
};

char *Dup(const std::string &s) {
    char *p = static_cast<char *>(malloc(s.size() + 1));
    memcpy(p, s.data(), s.size() + 1);
    return p;
}

void ReplyText(http_request *req, unsigned status, const std::string &s) {
    http_reply(req, status, "text/plain", Dup(s), s.size());
}

// /query: every decoded parameter as [key]=[value] lines, then raw and
// lookups.
osp_error *QueryComplete(http_request *req) {
    const http_query_param *params = nullptr;
    size_t n = http_request_query_params(req, &params);
    std::string out;
    for (size_t i = 0; i < n; i++) {
        out += "[" + std::string(params[i].key, params[i].key_len) + "]";
        if (params[i].has_value)
            out += "=";
        out += "[" + std::string(params[i].value, params[i].value_len) + "]\n";
    }
    const char *raw = http_request_raw_query(req);
    out += std::string("raw:") + (raw ? raw : "(null)") + "\n";
    const char *b = http_request_query(req, "b");
    out += std::string("b:") + (b ? b : "(null)") + "\n";
    out += std::string("truncated:") +
           (http_request_query_truncated(req) ? "1" : "0") + "\n";
    ReplyText(req, 200, out);
    return nullptr;
}

bool CountHeader(void *ctx, const char *name, const char *value) {
    (void)value;
    if (strncmp(name, "X-Test-", 7) == 0)
        ++*static_cast<int *>(ctx);
    return true;
}

// /headers: counts the X-Test-* request headers, answers with ten headers.
osp_error *HeadersComplete(http_request *req) {
    int n = 0;
    http_request_header_foreach(req, CountHeader, &n);
    for (int i = 0; i < 10; i++) {
        std::string name = "X-Reply-" + std::to_string(i);
        http_reply_header(req, name.c_str(), std::to_string(i * i).c_str());
    }
    const char *last = http_request_header(req, "x-test-39");
    ReplyText(req, 200, std::to_string(n) + " " + (last ? last : "(null)"));
    return nullptr;
}

// /body: a buffered body; replies its length.
osp_error *BodyComplete(http_request *req) {
    size_t len = 0;
    http_request_body(req, &len);
    ReplyText(req, 200, "len " + std::to_string(len));
    return nullptr;
}

// /trace-*: a sampled trace handed to the transport; a reply set in
// on_complete, after asynchronous work, or an error from on_complete.
osp_error *TraceComplete(http_request *req) {
    std::string path = http_request_path(req);
    if (path == "/trace-error")
        return osp_error_new(OSP_ERROR_INVALID_ARG, "bad");
    if (path == "/trace-sync") {
        ReplyText(req, 200, "sync");
        return nullptr;
    }
    http_request_begin_async(req);
    std::thread([req] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        http_request_resume(req);
    }).detach();
    return nullptr;
}

osp_error *TraceResume(http_request *req) {
    ReplyText(req, 200, "async");
    return nullptr;
}

const http_handler kTraceHandler = {nullptr, TraceComplete, TraceResume,
                                    nullptr, false};

const http_handler kQueryHandler = {nullptr, QueryComplete, nullptr, nullptr,
                                    false};
const http_handler kHeadersHandler = {nullptr, HeadersComplete, nullptr,
                                      nullptr, false};
const http_handler kBodyHandler = {nullptr, BodyComplete, nullptr, nullptr,
                                   false};

// The echo protocol: every byte back; "bye" makes the server close.
void EchoOpen(void *ctx, http_upgraded *conn) {
    static_cast<FakeSurface *>(ctx)->opened++;
    osp_error *err = http_upgraded_send(conn, "hello:", 6);
    EXPECT_EQ(err, nullptr);
    osp_error_free(err);
}

void EchoData(void *ctx, http_upgraded *conn, const char *data, size_t len) {
    static_cast<FakeSurface *>(ctx)->bytes += (int)len;
    osp_error_free(http_upgraded_send(conn, data, len));
    if (std::string(data, len).find("bye") != std::string::npos)
        http_upgraded_close(conn);
}

void EchoClose(void *ctx) {
    static_cast<FakeSurface *>(ctx)->closed++;
}

const http_upgrade_handler kEcho = {EchoOpen, EchoData, EchoClose, 0};

bool FakeRoute(http_request *req, void *surface_ctx) {
    EXPECT_EQ(http_request_surface_ctx(req), surface_ctx);
    EXPECT_GT(http_request_start_ns(req), 0u);
    std::string path = http_request_path(req);
    if (path == "/query") {
        http_request_set_handler(req, &kQueryHandler, nullptr);
    } else if (path == "/headers") {
        http_request_set_handler(req, &kHeadersHandler, nullptr);
    } else if (path == "/body") {
        http_request_set_handler(req, &kBodyHandler, nullptr);
    } else if (path == "/fail") {
        http_request_set_handler(req, &kBodyHandler, nullptr);
        http_request_fail(req, osp_error_new(OSP_ERROR_NOT_FOUND, "nope"));
    } else if (path == "/upgrade") {
        const char *up = http_request_header(req, "Upgrade");
        if (!up || strcmp(up, "echo") != 0) {
            http_reply_error_status(req, 400, "not an upgrade");
            return true;
        }
        http_reply_header(req, "X-Extra", "1");
        http_request_upgrade(req, "echo", &kEcho, surface_ctx);
    } else if (path.rfind("/trace-", 0) == 0) {
        http_request_set_handler(req, &kTraceHandler, nullptr);
        auto *fake = static_cast<FakeSurface *>(surface_ctx);
        http_request_set_trace(req, osp_tracer_sample(fake->tracer, "m"));
    } else if (path == "/upgrade-fail") {
        http_request_upgrade(req, "echo", &kEcho, surface_ctx);
        http_request_fail(req, osp_error_new(OSP_ERROR_UNAVAILABLE, "refused"));
    } else {
        return false;
    }
    return true;
}

// The fake surface's renderer: 418 and its own body.
void FakeReplyError(http_request *req, osp_error *err) {
    ReplyText(req, 418,
              std::string("fake:") +
                  osp_error_code_name(osp_error_get_code(err)) + ":" +
                  osp_error_message(err));
}

class HttpServerTest : public ::testing::Test {
  protected:
    void SetUp() override {
        surface_ = {"fake", FakeRoute, &fake_, FakeReplyError, 100};
        http_server_options opts = {};
        opts.address = "127.0.0.1";
        opts.port = 0;
        opts.thread_count = 2;
        opts.max_input_size = 1 << 20;
        opts.surfaces = &surface_;
        opts.n_surfaces = 1;
        osp_error *err = http_server_start(&opts, &server_);
        ASSERT_EQ(err, nullptr) << osp_error_message(err);
        port_ = http_server_port(server_);
    }
    void TearDown() override {
        if (server_) {
            EXPECT_TRUE(http_server_drain(server_, 5000));
            http_server_free(server_);
        }
    }

    int Connect() {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a = {};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port_);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(connect(fd, (sockaddr *)&a, sizeof a), 0);
        return fd;
    }
    static void SendAll(int fd, const std::string &s) {
        size_t off = 0;
        while (off < s.size()) {
            ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            ASSERT_GT(n, 0);
            off += (size_t)n;
        }
    }
    // Reads until `until` is seen (empty: until EOF) or 5 s pass.
    static std::string Read(int fd, const std::string &until = "") {
        std::string got;
        auto deadline =
            std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (std::chrono::steady_clock::now() < deadline) {
            if (!until.empty() && got.find(until) != std::string::npos)
                break;
            pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 100) <= 0)
                continue;
            char buf[4096];
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n <= 0)
                break;
            got.append(buf, (size_t)n);
        }
        return got;
    }
    // One request with Connection: close; the whole response.
    std::string Exchange(const std::string &request) {
        int fd = Connect();
        SendAll(fd, request);
        std::string r = Read(fd);
        close(fd);
        return r;
    }
    static std::string Body(const std::string &response) {
        size_t p = response.find("\r\n\r\n");
        return p == std::string::npos ? "" : response.substr(p + 4);
    }

    FakeSurface fake_;
    http_surface surface_;
    http_server *server_ = nullptr;
    int port_ = 0;
};

TEST_F(HttpServerTest, QueryDecoding) {
    std::string r = Exchange("GET /query?a=1&b=%2Fx+y&_watch_=true HTTP/1.1\r\n"
                             "Host: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
    EXPECT_EQ(Body(r), "[a]=[1]\n[b]=[/x y]\n[_watch_]=[true]\n"
                       "raw:a=1&b=%2Fx+y&_watch_=true\nb:/x y\ntruncated:0\n");
}

TEST_F(HttpServerTest, QueryRepeatedKeysBadEscapesAndEmptyPieces) {
    std::string r = Exchange(
        "GET /query?b=first&b=second&k%61y%3D=v%3d%26&bad=%zz%4&plain&"
        "empty=&&%2b=+ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(Body(r), "[b]=[first]\n[b]=[second]\n[kay=]=[v=&]\n"
                       "[bad]=[%zz%4]\n[plain][]\n[empty]=[]\n[+]=[ ]\n"
                       "raw:b=first&b=second&k%61y%3D=v%3d%26&bad=%zz%4&"
                       "plain&empty=&&%2b=+\nb:first\ntruncated:0\n");
}

TEST_F(HttpServerTest, NoQueryAndTooManyParameters) {
    std::string r =
        Exchange("GET /query HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(Body(r), "raw:(null)\nb:(null)\ntruncated:0\n");
    std::string q;
    for (int i = 0; i < HTTP_MAX_QUERY_PARAMS + 5; i++)
        q += (i ? "&p" : "p") + std::to_string(i) + "=" + std::to_string(i);
    r = Exchange("GET /query?" + q +
                 " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::string body = Body(r);
    EXPECT_NE(body.find("truncated:1"), std::string::npos);
    EXPECT_NE(body.find("[p255]=[255]\n"), std::string::npos);
    EXPECT_EQ(body.find("[p256]"), std::string::npos);
}

TEST(HttpPercentDecode, PathSegments) {
    char s[] = "Version%5FLabel+a%2";
    size_t n = http_percent_decode(s, strlen(s), false);
    EXPECT_EQ(std::string(s, n), "Version_Label+a%2");
    char t[] = "a+b%20c";
    n = http_percent_decode(t, strlen(t), true);
    EXPECT_EQ(std::string(t), "a b c");
}

TEST_F(HttpServerTest, ManyRequestAndReplyHeaders) {
    std::string req = "GET /headers HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 40; i++)
        req +=
            "X-Test-" + std::to_string(i) + ": v" + std::to_string(i) + "\r\n";
    req += "Connection: close\r\n\r\n";
    std::string r = Exchange(req);
    EXPECT_EQ(Body(r), "40 v39");
    for (int i = 0; i < 10; i++)
        EXPECT_NE(r.find("X-Reply-" + std::to_string(i) + ": " +
                         std::to_string(i * i) + "\r\n"),
                  std::string::npos)
            << i << "\n"
            << r;
}

TEST_F(HttpServerTest, SurfaceBodyLimitUsesSurfaceRenderer) {
    std::string small(100, 'x');
    std::string r =
        Exchange("POST /body HTTP/1.1\r\nHost: x\r\n"
                 "Content-Length: 100\r\nConnection: close\r\n\r\n" +
                 small);
    EXPECT_EQ(Body(r), "len 100");
    std::string big(101, 'x');
    r = Exchange("POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n"
                 "Connection: close\r\n\r\n" +
                 big);
    EXPECT_EQ(r.rfind("HTTP/1.1 418", 0), 0u) << r;
    EXPECT_EQ(Body(r),
              "fake:INVALID_ARG:request JSON size of 101 bytes exceeds the "
              "maximum allowed input size of 100 bytes. Use "
              "--http-max-input-size to increase the limit.");
    // Chunked: the limit applies as the body streams in.
    r = Exchange("POST /body HTTP/1.1\r\nHost: x\r\n"
                 "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                 "64\r\n" +
                 small + "\r\n1\r\nx\r\n0\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 418", 0), 0u) << r;
}

TEST_F(HttpServerTest, RecordedErrorAndUnclaimedPath) {
    std::string r =
        Exchange("GET /fail HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 418", 0), 0u) << r;
    EXPECT_EQ(Body(r), "fake:NOT_FOUND:nope");
    r = Exchange(
        "GET /elsewhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 404", 0), 0u) << r;
    EXPECT_EQ(Body(r), "{\"error\":\"Not Found\"}");
}

const char kUpgradeHead[] = "GET /upgrade HTTP/1.1\r\nHost: x\r\n"
                            "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n";

TEST_F(HttpServerTest, UpgradeEchoesIncludingBytesSentWithTheHead) {
    int fd = Connect();
    SendAll(fd, std::string(kUpgradeHead) + "early");
    std::string got = Read(fd, "hello:early");
    EXPECT_EQ(got.rfind("HTTP/1.1 101", 0), 0u) << got;
    EXPECT_NE(got.find("Upgrade: echo\r\n"), std::string::npos) << got;
    EXPECT_NE(got.find("X-Extra: 1\r\n"), std::string::npos) << got;
    EXPECT_NE(got.find("\r\n\r\nhello:early"), std::string::npos) << got;
    SendAll(fd, "ping");
    EXPECT_EQ(Read(fd, "ping"), "ping");
    // A large write exercises the output queue.
    std::string big(1 << 20, 'z');
    SendAll(fd, big);
    std::string back = Read(fd, big);
    EXPECT_EQ(back.size(), big.size());
    // The client closes: on_close runs.
    close(fd);
    for (int i = 0; i < 500 && fake_.closed.load() == 0; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(fake_.opened.load(), 1);
    EXPECT_EQ(fake_.closed.load(), 1);
    // The server keeps serving plain requests.
    std::string r = Exchange(
        "GET /query?b=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_NE(Body(r).find("b:1"), std::string::npos);
}

TEST_F(HttpServerTest, UpgradeClosedByTheSurface) {
    int fd = Connect();
    SendAll(fd, kUpgradeHead);
    Read(fd, "hello:");
    SendAll(fd, "bye");
    std::string rest = Read(fd); // until EOF
    EXPECT_EQ(rest, "bye");
    close(fd);
    for (int i = 0; i < 500 && fake_.closed.load() == 0; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(fake_.closed.load(), 1);
}

TEST_F(HttpServerTest, ServerStopClosesUpgradedSockets) {
    int fds[3];
    for (int &fd : fds) {
        fd = Connect();
        SendAll(fd, kUpgradeHead);
        EXPECT_NE(Read(fd, "hello:").find("hello:"), std::string::npos);
    }
    // Upgraded connections do not hold up the drain.
    EXPECT_TRUE(http_server_drain(server_, 2000));
    http_server_free(server_);
    server_ = nullptr;
    EXPECT_EQ(fake_.opened.load(), 3);
    EXPECT_EQ(fake_.closed.load(), 3);
    for (int fd : fds) {
        EXPECT_EQ(Read(fd), ""); // EOF
        close(fd);
    }
}

TEST_F(HttpServerTest, UpgradeRefusedByAnErrorReturnsTheContext) {
    // An error recorded after the offer wins: the surface's renderer
    // replies and on_close hands the ctx back, without on_open.
    int fd = Connect();
    SendAll(fd, "GET /upgrade-fail HTTP/1.1\r\nHost: x\r\n"
                "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n");
    std::string r = Read(fd, "refused");
    close(fd);
    EXPECT_EQ(r.rfind("HTTP/1.1 418", 0), 0u) << r;
    EXPECT_EQ(Body(r), "fake:UNAVAILABLE:refused");
    EXPECT_EQ(fake_.opened.load(), 0);
    EXPECT_EQ(fake_.closed.load(), 1);
}

// The names of the timestamps of trace `id` in a trace file, in order
// (the writer lists one object per stamp).
std::string StampsOf(const std::string &text, int id) {
    std::string key =
        "{\"id\":" + std::to_string(id) + ",\"timestamps\":[{\"name\":\"";
    std::string names;
    for (size_t p = text.find(key); p != std::string::npos;
         p = text.find(key, p + 1)) {
        size_t a = p + key.size(), b = text.find('"', a);
        names += (names.empty() ? "" : " ") + text.substr(a, b - a);
    }
    return names;
}

TEST_F(HttpServerTest, TraceStampsByTheTransport) {
    char tmpl[] = "/tmp/osp_http_trace_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string file = std::string(tmpl) + "/trace.json";
    osp_tracer_options topts;
    osp_tracer_options_init(&topts);
    topts.level = OSP_TRACE_LEVEL_TIMESTAMPS;
    topts.rate = 1;
    topts.file = file.c_str();
    osp_error *err = osp_tracer_new(&topts, &fake_.tracer);
    ASSERT_EQ(err, nullptr) << osp_error_message(err);
    for (const char *path : {"/trace-sync", "/trace-async", "/trace-error"}) {
        std::string r = Exchange(std::string("GET ") + path +
                                 " HTTP/1.1\r\nHost: x\r\n"
                                 "Connection: close\r\n\r\n");
        EXPECT_EQ(r.rfind("HTTP/1.1 ", 0), 0u) << r;
    }
    ASSERT_TRUE(http_server_drain(server_, 5000)); // every trace ended
    osp_tracer_free(fake_.tracer);
    fake_.tracer = nullptr;
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const char *full =
        "HTTP_RECV_START HTTP_RECV_END HTTP_SEND_START HTTP_SEND_END";
    EXPECT_EQ(StampsOf(text, 1), full) << text;
    EXPECT_EQ(StampsOf(text, 2), full) << text;
    EXPECT_EQ(StampsOf(text, 3), "HTTP_RECV_START HTTP_RECV_END") << text;
    std::remove(file.c_str());
    rmdir(tmpl);
}

TEST_F(HttpServerTest, AbandonedRequestsDoNotLeak) {
    int fd = Connect();
    SendAll(fd, "GET /query?a=1 HTTP/1.1\r\n"); // request line only
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    close(fd);
    fd = Connect();
    SendAll(fd, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n"
                "only part");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    close(fd);
    EXPECT_TRUE(http_server_drain(server_, 2000));
}

// The metrics surface on its own server: the replies that need no core
// (GET /metrics itself is covered by the integration tests).
TEST(MetricsSurface, MethodAndPathRules) {
    metrics_options mopts = {false, false, nullptr};
    metrics_exporter *ms = nullptr;
    ASSERT_EQ(metrics_new(&mopts, nullptr, &ms), nullptr);
    http_surface surface = {"metrics", metrics_route, ms, nullptr, 0};
    http_server_options opts = {};
    opts.name = "metrics";
    opts.address = "127.0.0.1";
    opts.thread_count = 2;
    opts.max_input_size = 1024;
    opts.connection_limit = 64;
    opts.connection_timeout_s = 60;
    opts.surfaces = &surface;
    opts.n_surfaces = 1;
    http_server *server = nullptr;
    ASSERT_EQ(http_server_start(&opts, &server), nullptr);
    auto exchange = [&](const std::string &request) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a = {};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)http_server_port(server));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(connect(fd, (sockaddr *)&a, sizeof a), 0);
        EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
                  (ssize_t)request.size());
        std::string got;
        char buf[4096];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof buf, 0)) > 0)
            got.append(buf, (size_t)n);
        close(fd);
        return got;
    };
    std::string r = exchange("POST /metrics HTTP/1.1\r\nHost: x\r\n"
                             "Content-Length: 5000\r\nConnection: close\r\n"
                             "\r\n" +
                             std::string(5000, 'x'));
    EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r;
    EXPECT_NE(r.find("\r\n\r\n{\"error\":\"Method Not Allowed\"}"),
              std::string::npos)
        << r;
    r = exchange("GET /other?x=1 HTTP/1.1\r\nHost: x\r\n"
                 "Connection: close\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
    EXPECT_NE(r.find("Content-Type: text/plain; charset=utf-8\r\n"),
              std::string::npos)
        << r;
    EXPECT_NE(r.find("Content-Length: 0\r\n"), std::string::npos) << r;
    http_server_free(server);
    metrics_free(ms);
}

} // namespace
