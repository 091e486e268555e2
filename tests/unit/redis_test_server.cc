// RedisTestServer (redis_test_server.h).
#include "redis_test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

extern char **environ;

namespace {

int FreeLoopbackPort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}

// true when a PING on 127.0.0.1:port answers +PONG.
bool Pings(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    timeval tv{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0 &&
        write(fd, "PING\r\n", 6) == 6) {
        char buf[16] = {0};
        ssize_t n = read(fd, buf, sizeof buf - 1);
        ok = n >= 5 && strncmp(buf, "+PONG", 5) == 0;
    }
    close(fd);
    return ok;
}

} // namespace

RedisTestServer::~RedisTestServer() {
    Stop();
    if (!dir_.empty()) {
        std::string cmd = "rm -rf '" + dir_ + "'";
        if (system(cmd.c_str()) != 0)
            fprintf(stderr, "could not remove %s\n", dir_.c_str());
    }
}

std::string RedisTestServer::Url(const std::string &suffix) const {
    return "redis://127.0.0.1:" + std::to_string(port_) + suffix;
}

bool RedisTestServer::Start(std::string *why) {
    if (pid_ > 0)
        return true;
    if (dir_.empty()) {
        char tmpl[] = "/tmp/osprey-redis-XXXXXX";
        if (mkdtemp(tmpl) == nullptr) {
            *why = "mkdtemp failed";
            return false;
        }
        dir_ = tmpl;
    }
    // A restart keeps its port (the clients' URL); a first start tries a
    // few free ports, in case another process takes one meanwhile.
    bool restart = port_ != 0;
    for (int attempt = 0; attempt < (restart ? 1 : 5); attempt++) {
        if (!restart)
            port_ = FreeLoopbackPort();
        std::string port = std::to_string(port_);
        std::string log = dir_ + "/redis.log";
        std::vector<std::string> args = {"redis-server",
                                         "--port",
                                         port,
                                         "--bind",
                                         "127.0.0.1",
                                         "--save",
                                         "",
                                         "--appendonly",
                                         "no",
                                         "--dir",
                                         dir_,
                                         "--logfile",
                                         log,
                                         "--daemonize",
                                         "no"};
        std::vector<char *> argv;
        for (auto &a : args)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);
        pid_t pid;
        if (posix_spawnp(&pid, "redis-server", nullptr, nullptr, argv.data(),
                         environ) != 0) {
            *why = "redis-server is not installed (apt-get install "
                   "redis-server)";
            return false;
        }
        pid_ = pid;
        for (int i = 0; i < 200; i++) { // 10 s
            if (Pings(port_))
                return true;
            int status;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1; // port taken meanwhile: try another
                break;
            }
            usleep(50000);
        }
        if (pid_ > 0) {
            Stop();
            *why = "redis-server did not answer PING within 10 s";
            return false;
        }
    }
    *why = "redis-server did not start";
    return false;
}

void RedisTestServer::Stop() {
    if (pid_ <= 0)
        return;
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
}

void RedisTestServer::Pause() {
    if (pid_ > 0)
        kill(pid_, SIGSTOP);
}

void RedisTestServer::Resume() {
    if (pid_ > 0)
        kill(pid_, SIGCONT);
}

RedisTestServer *SharedRedisTestServer(std::string *why) {
    static std::mutex mu;
    static std::unique_ptr<RedisTestServer> server;
    static std::string failure;
    std::lock_guard<std::mutex> lock(mu);
    if (server == nullptr && failure.empty()) {
        auto s = std::make_unique<RedisTestServer>();
        if (s->Start(&failure))
            server = std::move(s);
    }
    if (server != nullptr && !server->running() && !server->Start(why))
        return nullptr;
    if (server == nullptr)
        *why = failure;
    return server.get();
}
