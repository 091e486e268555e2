// Store-level put throughput of the Redis Streams queue store: N putters
// (default 16), each with one put in flight, 1 KiB payloads, for a few
// seconds, through include/osprey/queue.h (no HTTP). Not run by ctest.
//   queue_redis_put_bench redis://127.0.0.1:6379 [seconds] [putters]
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "osprey/queue.h"

namespace {

struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool failed = false;
};

void OnPut(void *ctx, osp_error *err, uint64_t, const char *) {
    auto *s = static_cast<Slot *>(ctx);
    std::lock_guard<std::mutex> lock(s->mu);
    s->failed = err != nullptr;
    osp_error_free(err);
    s->done = true;
    s->cv.notify_one();
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s redis://HOST:PORT [seconds] [putters]\n",
                argv[0]);
        return 2;
    }
    double seconds = argc > 2 ? atof(argv[2]) : 5;
    int putters = argc > 3 ? atoi(argv[3]) : 16;
    std::string url =
        std::string(argv[1]) + "?prefix=bench" + std::to_string(time(nullptr));
    osp_queue_store_options opts = {};
    opts.url = url.c_str();
    opts.max_length = 100000000;
    osp_queue_store *store = nullptr;
    osp_error *err = osp_queue_store_open(&opts, &store);
    if (err != nullptr) {
        fprintf(stderr, "%s\n", osp_error_message(err));
        return 1;
    }
    osp_queue *q = nullptr;
    osp_queue_store_queue(store, "bench", &q);
    std::string body(1024, 'x');
    std::atomic<uint64_t> ok{0}, failed{0};
    auto end = std::chrono::steady_clock::now() +
               std::chrono::duration<double>(seconds);
    std::vector<std::thread> threads;
    for (int t = 0; t < putters; t++)
        threads.emplace_back([&] {
            while (std::chrono::steady_clock::now() < end) {
                Slot s;
                osp_queue_put_args args = {};
                args.data = body.data();
                args.size = body.size();
                osp_queue_put(q, &args, OnPut, &s);
                std::unique_lock<std::mutex> lock(s.mu);
                s.cv.wait(lock, [&] { return s.done; });
                (s.failed ? failed : ok)++;
            }
        });
    for (auto &t : threads)
        t.join();
    printf("redis store puts: %.0f/s (%d putters, 1 KiB, %llu ok, %llu "
           "failed)\n",
           ok / seconds, putters, (unsigned long long)ok.load(),
           (unsigned long long)failed.load());
    osp_queue_store_free(store);
    return 0;
}
