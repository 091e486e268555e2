// A throwaway redis-server for tests: Debian's redis-server on a free
// loopback port, in a fresh temporary directory, without persistence;
// stopped (and its directory removed) by the destructor.
#pragma once

#include <sys/types.h>

#include <string>

class RedisTestServer {
  public:
    RedisTestServer() = default;
    ~RedisTestServer();
    RedisTestServer(const RedisTestServer &) = delete;
    RedisTestServer &operator=(const RedisTestServer &) = delete;

    // Starts the server (on the same port after a Stop) and waits until it
    // answers PING. false with *why when redis-server is missing or does
    // not come up within 10 s.
    bool Start(std::string *why);
    // Kills the server (SIGKILL: as if it crashed or the network went)
    // and waits for it; a no-op when it is not running.
    void Stop();
    // Freezes the server (SIGSTOP): its sockets stay open and nothing is
    // answered, as a Redis stuck or a network that drops packets. Resume
    // lets it go on.
    void Pause();
    void Resume();
    bool running() const {
        return pid_ > 0;
    }
    int port() const {
        return port_;
    }
    // "redis://127.0.0.1:PORT" plus `suffix` (e.g. "/0?prefix=t1").
    std::string Url(const std::string &suffix = "") const;

  private:
    pid_t pid_ = -1;
    int port_ = 0;
    std::string dir_;
};

// One server for the whole test program, started on first use and killed
// when the program exits; NULL with *why when it cannot start.
RedisTestServer *SharedRedisTestServer(std::string *why);
