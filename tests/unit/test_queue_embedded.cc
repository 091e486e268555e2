// The embedded store's own promises (docs/queue-store.md): what was
// acknowledged is there after a restart, indexes continue, a damaged
// record is skipped with every intact one after it kept, a torn tail is cut,
// neither is ever fatal, compaction keeps every live item and
// the high-water mark, the fsync policies, and a process killed with
// SIGKILL under load loses nothing it acknowledged.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "osp_test.h"
#include "osprey/log.h"
#include "osprey/queue.h"
#include "queue_embedded.h"
#include "queue_log.h"
#include "queue_test_util.h"

using namespace queue_test;
using namespace std::chrono_literals;

namespace {

std::string MakeTempDir() {
    char tmpl[] = "/tmp/osprey-queue-embedded-XXXXXX";
    char *dir = mkdtemp(tmpl);
    EXPECT_NE(dir, nullptr);
    return dir ? dir : "";
}

class QueueEmbedded : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = MakeTempDir();
    }
    void TearDown() override {
        Close();
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    void Open(osp_queue_fsync fsync = OSP_QUEUE_FSYNC_BATCH,
              uint64_t max_length = 0) {
        Close();
        osp_queue_store_options opts = {};
        opts.dir = dir_.c_str();
        opts.fsync = fsync;
        opts.max_length = max_length;
        ASSERT_OK(osp_queue_store_open(&opts, &store_));
        ASSERT_OK(osp_queue_store_queue(store_, "svc", &q_));
    }
    void Close() {
        osp_queue_store_free(store_);
        store_ = nullptr;
        q_ = nullptr;
    }
    osp_queue *Queue(const char *name) {
        osp_queue *q = nullptr;
        osp_error *err = osp_queue_store_queue(store_, name, &q);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
        return q;
    }
    queue_log_stats LogStats() {
        queue_log_stats s;
        queue_log_get_stats(queue_embedded_log(store_), &s);
        return s;
    }
    std::string LogPath() const {
        return dir_ + "/queue.log";
    }
    uint64_t LogSize() const {
        return std::filesystem::file_size(LogPath());
    }
    // Flips one byte of the log file at `offset`.
    void FlipByte(uint64_t offset) {
        int fd = open(LogPath().c_str(), O_RDWR);
        ASSERT_GE(fd, 0);
        unsigned char b = 0;
        ASSERT_EQ(pread(fd, &b, 1, offset), 1);
        b ^= 0x5a;
        ASSERT_EQ(pwrite(fd, &b, 1, offset), 1);
        close(fd);
    }
    std::vector<Item> All(osp_queue *q) {
        return Get(q, GetOptions().Length(1000000)).items;
    }

    std::string dir_;
    osp_queue_store *store_ = nullptr;
    osp_queue *q_ = nullptr;
};

TEST_F(QueueEmbedded, RestartKeepsEverythingAcknowledged) {
    Open();
    std::vector<PutResult> puts;
    for (int i = 0; i < 10; i++)
        puts.push_back(Put(q_, "item" + std::to_string(i),
                           {{"k", std::to_string(i)}}, i == 3 ? 1 : 0));
    ASSERT_TRUE(Delete(q_, {puts[0].index}).ok);
    ASSERT_TRUE(Commit(q_, "eas", "u", {puts[1].index}).ok);
    GetResult g = Get(
        q_,
        GetOptions().RequestId(puts[2].request_id.c_str()).AutoDelete(true));
    ASSERT_EQ(g.items.size(), 1u);
    ASSERT_TRUE(Truncate(q_, puts[2].index).ok); // nothing left below it
    osp_queue *sink = Queue("svc/sink");
    Put(sink, "result", {{"requestId", puts[5].request_id}});
    ASSERT_TRUE(End(sink, false).ok);
    Close();

    Open();
    auto items = All(q_);
    ASSERT_EQ(items.size(), 7u);
    EXPECT_EQ(items[0].data, "item3"); // priority survives
    EXPECT_EQ(items[0].priority, 1);
    EXPECT_EQ(items[1].data, "item4");
    EXPECT_EQ(items[1].tags["k"], "4");
    EXPECT_EQ(items[1].request_id, puts[4].request_id);
    EXPECT_EQ(items[1].tags["requestId"], puts[4].request_id);
    sink = Queue("svc/sink");
    g = Get(sink, GetOptions().RequestId(puts[5].request_id.c_str()));
    ASSERT_EQ(g.items.size(), 1u);
    EXPECT_EQ(g.items[0].data, "result");
    EXPECT_EQ(Attributes(sink)["meta.state"], "End");
    // Indexes continue.
    EXPECT_EQ(Put(q_, "after").index, puts[9].index + 1);
}

TEST_F(QueueEmbedded, IndexesContinueAfterEverythingWasDeleted) {
    Open();
    for (int i = 0; i < 5; i++)
        Put(q_, "x");
    ASSERT_TRUE(Truncate(q_, 100).ok);
    Close();
    Open();
    EXPECT_EQ(Length(q_), 0u);
    EXPECT_EQ(Put(q_, "y").index, 6u);
}

TEST_F(QueueEmbedded, TornTailIsCut) {
    Open();
    for (int i = 0; i < 5; i++)
        Put(q_, std::string(100, 'a' + i));
    Close();
    uint64_t size = LogSize();
    std::filesystem::resize_file(LogPath(), size - 30); // into the 5th
    Open();
    auto items = All(q_);
    ASSERT_EQ(items.size(), 4u);
    EXPECT_EQ(items[3].data, std::string(100, 'd'));
    EXPECT_GT(LogStats().cut_bytes, 0u);
    EXPECT_TRUE(std::filesystem::exists(LogPath() + ".cut"));
    // The cut log takes new records and reads back cleanly.
    EXPECT_EQ(Put(q_, "new").index, 5u);
    Close();
    Open();
    EXPECT_EQ(Length(q_), 5u);
    EXPECT_EQ(LogStats().cut_bytes, 0u);
}

TEST_F(QueueEmbedded, ZerosAheadOfTheRecordsAreTheCleanEnd) {
    // The writer keeps zeroed file ahead of its records (batch, always),
    // so an fdatasync need not commit a new file size each time.
    Open();
    for (int i = 0; i < 3; i++)
        Put(q_, std::string(100, 'a' + i));
    EXPECT_GT(LogSize(), LogStats().file_bytes);
    uint64_t records = LogStats().file_bytes;
    Close(); // a clean close cuts the zeros off
    EXPECT_EQ(LogSize(), records);
    // What a kill -9 leaves: the records, then zeros.
    std::filesystem::resize_file(LogPath(), records + (1 << 20));
    Open();
    EXPECT_EQ(Length(q_), 3u);
    EXPECT_EQ(LogStats().cut_bytes, 0u);
    EXPECT_FALSE(std::filesystem::exists(LogPath() + ".cut"));
    EXPECT_EQ(Put(q_, "next").index, 4u); // written over the zeros
    Close();
    Open();
    auto items = All(q_);
    ASSERT_EQ(items.size(), 4u);
    EXPECT_EQ(items[3].data, "next");
    Close();
    // Under the policy none nothing is preallocated.
    Open(OSP_QUEUE_FSYNC_NONE);
    Put(q_, "x");
    EXPECT_EQ(LogSize(), LogStats().file_bytes);
}

TEST_F(QueueEmbedded, ARecordAfterZerosIsCut) {
    // A crash can persist a later page of a write and not an earlier one:
    // zeros, then a record. Nothing after the zeros was acknowledged.
    Open();
    Put(q_, "keep");
    Close();
    uint64_t records = LogSize();
    Open();
    Put(q_, "lost");
    Close();
    uint64_t second = LogSize();
    std::string tail(second - records, '\0');
    {
        std::ifstream f(LogPath(), std::ios::binary);
        f.seekg((std::streamoff)records);
        f.read(tail.data(), (std::streamsize)tail.size());
    }
    std::filesystem::resize_file(LogPath(), records);
    {
        std::ofstream f(LogPath(), std::ios::app | std::ios::binary);
        f.write(std::string(4096, '\0').data(), 4096);
        f.write(tail.data(), (std::streamsize)tail.size());
        f.write(std::string(4096, '\0').data(), 4096);
    }
    Open();
    auto items = All(q_);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(items[0].data, "keep");
    EXPECT_GT(LogStats().cut_bytes, 0u);
    EXPECT_TRUE(std::filesystem::exists(LogPath() + ".cut"));
}

// Runs `scenario` in a child process (a file size limit there must not
// touch the test runner) and expects it to pass.
template <typename F> void InChild(F scenario) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        scenario();
        _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died of a signal";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed";
}

TEST_F(QueueEmbedded, ADiskFullPutIsRefusedAndTheStoreGoesOnWhenSpaceReturns) {
    // RLIMIT_FSIZE with SIGXFSZ ignored makes a write past the limit fail
    // with EFBIG (after a short write: a torn append), as a full disk
    // fails with ENOSPC. Both fsync policies: with and without the zeros
    // the writer keeps ahead of its records.
    for (osp_queue_fsync policy :
         {OSP_QUEUE_FSYNC_NONE, OSP_QUEUE_FSYNC_BATCH}) {
        SCOPED_TRACE(policy);
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directory(dir_);
        InChild([&] {
            signal(SIGXFSZ, SIG_IGN);
            Open(policy);
            std::string a(1000, 'a'), c(1000, 'c'), d(1000, 'd'), f(1000, 'f');
            ASSERT_TRUE(Put(q_, a).status.ok);
            uint64_t records = LogStats().file_bytes;
            struct rlimit saved;
            ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
            // Room for one more record of ~1.1 KB, not two.
            struct rlimit small = {(rlim_t)(records + 1500), saved.rlim_max};
            ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
            ASSERT_TRUE(Put(q_, c).status.ok);
            uint64_t before_refusal = LogStats().file_bytes;
            for (int i = 0; i < 2; i++) {
                PutResult refused = Put(q_, d);
                ASSERT_FALSE(refused.status.ok);
                EXPECT_EQ(refused.status.reason, OSP_REASON_STORAGE_FULL);
                EXPECT_NE(refused.status.message.find("disk is full"),
                          std::string::npos)
                    << refused.status.message;
                EXPECT_EQ(refused.status.message.find(dir_), std::string::npos)
                    << "a reply names a server path";
            }
            // Nothing of the torn appends is left; memory matches the file.
            EXPECT_EQ(LogStats().file_bytes, before_refusal);
            EXPECT_EQ(LogSize(), before_refusal);
            EXPECT_EQ(LogStats().no_space_writes, 2u);
            auto items = All(q_);
            ASSERT_EQ(items.size(), 2u);
            EXPECT_EQ(items[0].data, a);
            EXPECT_EQ(items[1].data, c);
            // Space returns: the same store takes changes again.
            ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
            PutResult later = Put(q_, f);
            ASSERT_TRUE(later.status.ok) << later.status.message;
            ASSERT_TRUE(Delete(q_, {items[0].index}).ok);
            Close();
            Open(policy);
            items = All(q_);
            ASSERT_EQ(items.size(), 2u);
            EXPECT_EQ(items[0].data, c);
            EXPECT_EQ(items[1].data, f);
            EXPECT_EQ(LogStats().cut_bytes, 0u);
            EXPECT_EQ(LogStats().lost_records, 0u);
            Close();
        });
    }
}

TEST_F(QueueEmbedded, ADamagedRecordInTheMiddleLosesOnlyItself) {
    Open();
    std::vector<uint64_t> sizes;
    for (int i = 0; i < 10; i++) {
        Put(q_, std::string(200, 'a' + i));
        Close(); // so each record's end is known
        sizes.push_back(LogSize());
        Open();
    }
    Close();
    FlipByte(sizes[4] + 100); // inside the 6th record's payload
    Open();
    auto items = All(q_);
    ASSERT_EQ(items.size(), 9u);
    for (size_t i = 0; i < items.size(); i++) {
        int k = i < 5 ? (int)i : (int)i + 1;
        EXPECT_EQ(items[i].index, (uint64_t)k + 1);
        EXPECT_EQ(items[i].data, std::string(200, 'a' + k));
    }
    EXPECT_EQ(LogStats().lost_records, 1u);
    EXPECT_EQ(LogStats().damaged_bytes, sizes[5] - sizes[4]);
    EXPECT_EQ(std::filesystem::file_size(LogPath() + ".damaged"),
              sizes[5] - sizes[4]);
    EXPECT_EQ(Put(q_, "again").index, 11u);
    Close();
    Open(); // the damage left the log: nothing lost this time
    EXPECT_EQ(Length(q_), 10u);
    EXPECT_EQ(LogStats().lost_records, 0u);
}

// Corruption at every byte of a small log: the store always opens, every
// item it returns is one that was put, under its own index, and every
// intact record survives (at most the one damaged record is lost).
TEST_F(QueueEmbedded, CorruptionAtEveryOffsetLosesAtMostOneRecord) {
    Open(OSP_QUEUE_FSYNC_NONE);
    const int n = 5;
    for (int i = 0; i < n; i++)
        Put(q_, std::string(8 + i, 'a' + i));
    Close();
    std::string pristine;
    {
        std::ifstream f(LogPath(), std::ios::binary);
        pristine.assign(std::istreambuf_iterator<char>(f), {});
    }
    for (uint64_t at = 16; at < pristine.size(); at++) { // after the header
        std::filesystem::remove(LogPath() + ".damaged");
        std::filesystem::remove(LogPath() + ".cut");
        {
            std::ofstream f(LogPath(), std::ios::binary | std::ios::trunc);
            f.write(pristine.data(), (std::streamsize)pristine.size());
        }
        FlipByte(at);
        Open(OSP_QUEUE_FSYNC_NONE);
        auto items = All(q_);
        EXPECT_GE(items.size(), (size_t)n - 1) << "flipped byte " << at;
        for (const Item &item : items) {
            ASSERT_GE(item.index, 1u);
            ASSERT_LE(item.index, (uint64_t)n);
            int k = (int)item.index - 1;
            EXPECT_EQ(item.data, std::string(8 + k, 'a' + k)) << at;
        }
        queue_log_stats st = LogStats();
        if (items.size() < (size_t)n) {
            EXPECT_TRUE(st.lost_records == 1 || st.cut_bytes > 0) << at;
        }
        Close();
    }
}

// A write torn at every length at the tail: every whole record stays, the
// torn one is cut, and the log takes new records.
TEST_F(QueueEmbedded, TornTailAtEveryLength) {
    Open(OSP_QUEUE_FSYNC_NONE);
    std::vector<uint64_t> ends;
    for (int i = 0; i < 3; i++) {
        Put(q_, std::string(20, 'a' + i));
        Close();
        ends.push_back(LogSize());
        Open(OSP_QUEUE_FSYNC_NONE);
    }
    Close();
    std::string pristine;
    {
        std::ifstream f(LogPath(), std::ios::binary);
        pristine.assign(std::istreambuf_iterator<char>(f), {});
    }
    for (uint64_t len = ends[1]; len <= pristine.size(); len++) {
        {
            std::ofstream f(LogPath(), std::ios::binary | std::ios::trunc);
            f.write(pristine.data(), (std::streamsize)len);
        }
        Open(OSP_QUEUE_FSYNC_NONE);
        size_t whole = len == pristine.size() ? 3 : 2;
        EXPECT_EQ(Length(q_), whole) << len;
        EXPECT_EQ(Put(q_, "next").index, whole + 1) << len;
        Close();
    }
}

TEST_F(QueueEmbedded, CorruptChecksumAtTheTail) {
    Open();
    for (int i = 0; i < 3; i++)
        Put(q_, "abc");
    Close();
    FlipByte(LogSize() - 1);
    Open();
    EXPECT_EQ(Length(q_), 2u);
}

TEST_F(QueueEmbedded, ImpossibleRecordLengthIsCutNotAllocated) {
    Open();
    Put(q_, "keep");
    Close();
    {
        std::ofstream f(LogPath(), std::ios::app | std::ios::binary);
        const unsigned char junk[] = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 1};
        f.write(reinterpret_cast<const char *>(junk), sizeof junk);
        f.write(std::string(64, 'z').data(), 64);
    }
    Open();
    EXPECT_EQ(Length(q_), 1u);
    EXPECT_EQ(LogStats().cut_bytes, 73u);
}

TEST_F(QueueEmbedded, RefusesAFileThatIsNotAQueueLog) {
    {
        std::ofstream f(LogPath(), std::ios::binary);
        f << "this is somebody else's file, keep it";
    }
    osp_queue_store_options opts = {};
    opts.dir = dir_.c_str();
    osp_error *err = osp_queue_store_open(&opts, &store_);
    ASSERT_NE(err, nullptr);
    osp_error_free(err);
    EXPECT_EQ(LogSize(), 37u); // untouched
}

TEST_F(QueueEmbedded, TornHeaderOfANewLogIsRewritten) {
    {
        std::ofstream f(LogPath(), std::ios::binary);
        f << "OSPQ";
    }
    Open();
    EXPECT_EQ(Put(q_, "x").index, 1u);
}

TEST_F(QueueEmbedded, ASecondStoreOnTheSameDirectoryIsRefused) {
    Open();
    osp_queue_store_options opts = {};
    opts.dir = dir_.c_str();
    osp_queue_store *second = nullptr;
    osp_error *err = osp_queue_store_open(&opts, &second);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNAVAILABLE);
    osp_error_free(err);
}

TEST_F(QueueEmbedded, CompactionKeepsLiveItemsAndTheHighWaterMark) {
    Open();
    queue_log_set_compact_min_bytes(queue_embedded_log(store_), 1);
    std::vector<uint64_t> idx;
    for (int i = 0; i < 100; i++)
        idx.push_back(Put(q_, std::string(1000, 'a' + i % 26)).index);
    std::vector<uint64_t> dead(idx.begin(), idx.begin() + 90);
    ASSERT_TRUE(Delete(q_, dead).ok);
    Put(Queue("other"), "o"); // a write after the deletions
    // Compaction runs on the writer after a write once dead bytes dominate.
    for (int i = 0; i < 100 && LogStats().compactions == 0; i++)
        std::this_thread::sleep_for(10ms);
    queue_log_stats s = LogStats();
    EXPECT_GE(s.compactions, 1u);
    EXPECT_LT(s.file_bytes, 30000u);
    Close(); // cuts the zeros kept ahead of the records
    EXPECT_EQ(LogSize(), s.file_bytes);

    Open();
    auto items = All(q_);
    ASSERT_EQ(items.size(), 10u);
    EXPECT_EQ(items[0].index, idx[90]);
    EXPECT_EQ(items[0].data, std::string(1000, 'a' + 90 % 26));
    EXPECT_EQ(Length(Queue("other")), 1u);
    // Everything gone, compacted, restarted: the index still continues.
    ASSERT_TRUE(Truncate(q_, 1000).ok);
    ASSERT_OK(queue_log_compact(queue_embedded_log(store_)));
    Close();
    Open();
    EXPECT_EQ(Length(q_), 0u);
    EXPECT_EQ(Put(q_, "next").index, 101u);
}

TEST_F(QueueEmbedded, AppendsDuringCompactionSurvive) {
    Open();
    queue_log_set_compact_min_bytes(queue_embedded_log(store_), 1);
    std::atomic<bool> stop{false};
    std::vector<uint64_t> kept;
    std::thread writer([&] {
        for (int i = 0; i < 400; i++) {
            PutResult r = Put(q_, std::string(500, 'k'));
            if (i % 4 == 0)
                kept.push_back(r.index);
            else
                Delete(q_, {r.index});
        }
        stop = true;
    });
    while (!stop) {
        osp_error *err = queue_log_compact(queue_embedded_log(store_));
        osp_error_free(err);
    }
    writer.join();
    EXPECT_GT(LogStats().compactions, 0u);
    Close();
    Open();
    auto items = All(q_);
    ASSERT_EQ(items.size(), kept.size());
    for (size_t i = 0; i < kept.size(); i++)
        EXPECT_EQ(items[i].index, kept[i]);
}

// Puts `n` items at once (no waiting between them) and waits for all.
void PutBurst(osp_queue *q, int n, size_t bytes) {
    std::string data(bytes, 'p');
    std::vector<Pending<PutResult>> pending(n);
    for (int i = 0; i < n; i++) {
        osp_queue_put_args args = {};
        args.data = data.data();
        args.size = data.size();
        osp_queue_put(q, &args, OnPut, &pending[i]);
    }
    for (auto &p : pending) {
        ASSERT_TRUE(p.Wait());
        EXPECT_TRUE(p.value.status.ok);
    }
}

TEST_F(QueueEmbedded, FsyncPolicies) {
    Open(OSP_QUEUE_FSYNC_NONE);
    PutBurst(q_, 200, 100);
    EXPECT_EQ(LogStats().fsyncs, 0u);
    Close();

    Open(OSP_QUEUE_FSYNC_ALWAYS);
    uint64_t before = LogStats().fsyncs;
    PutBurst(q_, 200, 100);
    EXPECT_GE(LogStats().fsyncs - before, 200u); // one per mutation
    Close();

    Open(OSP_QUEUE_FSYNC_BATCH);
    before = LogStats().fsyncs;
    PutBurst(q_, 200, 100);
    uint64_t batch = LogStats().fsyncs - before;
    EXPECT_GE(batch, 1u);
    EXPECT_LT(batch, 100u) << "puts in flight together share an fsync";
    Close();
    Open();
    EXPECT_EQ(Length(q_), 600u);
}

// ---- kill -9 under load ----

std::string KillPayload(int thread, int seq) {
    size_t n = 10 + static_cast<size_t>(seq * 37 + thread * 11) % 1500;
    std::string s(n, ' ');
    for (size_t i = 0; i < n; i++)
        s[i] = static_cast<char>('a' + (thread + seq + i) % 26);
    return s;
}

void WriteLine(int fd, const std::string &line) {
    // One write of less than PIPE_BUF bytes: atomic among the threads.
    ssize_t w = write(fd, line.data(), line.size());
    (void)w;
}

// The child: 4 threads put, delete, commit and auto-delete get, and report
// each acknowledgement (after its callback ran) on `fd`. Never returns.
[[noreturn]] void KillChild(const std::string &dir, int fd) {
    osp_queue_store_options opts = {};
    opts.dir = dir.c_str();
    opts.fsync = OSP_QUEUE_FSYNC_BATCH;
    opts.max_length = 1000000;
    osp_queue_store *store = nullptr;
    osp_error *err = osp_queue_store_open(&opts, &store);
    if (err != nullptr)
        _exit(2);
    queue_log_set_compact_min_bytes(queue_embedded_log(store), 256 * 1024);
    osp_queue *q = nullptr;
    if (osp_queue_store_queue(store, "svc", &q) != nullptr)
        _exit(3);
    WriteLine(fd, "R\n");
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++)
        threads.emplace_back([=] {
            for (int seq = 0;; seq++) {
                std::string data = KillPayload(t, seq);
                Tags tags = {{"w", std::to_string(t)},
                             {"s", std::to_string(seq)}};
                PutResult r = Put(q, data, tags);
                if (!r.status.ok)
                    continue;
                WriteLine(fd, "P " + std::to_string(r.index) + " " +
                                  std::to_string(t) + " " +
                                  std::to_string(seq) + "\n");
                if (seq % 5 != 0 && seq % 5 != 4) // a removal in flight
                    WriteLine(fd, "d " + std::to_string(r.index) + "\n");
                if (seq % 5 == 1) {
                    if (Delete(q, {r.index}).ok)
                        WriteLine(fd, "D " + std::to_string(r.index) + "\n");
                } else if (seq % 5 == 2) {
                    if (Commit(q, "eas", "k", {r.index}).ok)
                        WriteLine(fd, "D " + std::to_string(r.index) + "\n");
                } else if (seq % 5 == 3) {
                    GetResult g = Get(q, GetOptions()
                                             .RequestId(r.request_id.c_str())
                                             .AutoDelete(true));
                    if (g.status.ok && g.items.size() == 1)
                        WriteLine(fd, "D " + std::to_string(r.index) + "\n");
                }
            }
        });
    for (auto &th : threads)
        th.join(); // never
    _exit(0);
}

struct Acked {
    std::map<uint64_t, std::pair<int, int>> puts; // index -> (thread, seq)
    std::set<uint64_t> deleted;                   // acknowledged removals
    std::set<uint64_t> removing; // removals started (maybe not done)
    bool ready = false;
};

void ParseLines(const std::string &text, Acked &acked) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream l(line);
        char kind = 0;
        l >> kind;
        if (kind == 'R') {
            acked.ready = true;
        } else if (kind == 'P') {
            uint64_t index;
            int t, s;
            if (l >> index >> t >> s)
                acked.puts[index] = {t, s};
        } else if (kind == 'd') {
            uint64_t index;
            if (l >> index)
                acked.removing.insert(index);
        } else if (kind == 'D') {
            uint64_t index;
            if (l >> index)
                acked.deleted.insert(index);
        }
    }
}

TEST_F(QueueEmbedded, KillDashNineLosesNothingAcknowledged) {
    for (int round = 0; round < 3; round++) {
        int fds[2];
        ASSERT_EQ(pipe(fds), 0);
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            close(fds[0]);
            KillChild(dir_, fds[1]);
        }
        close(fds[1]);
        std::string text;
        auto kill_at = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(300 + 250 * round);
        bool killed = false;
        for (;;) {
            if (!killed && std::chrono::steady_clock::now() >= kill_at) {
                kill(pid, SIGKILL);
                killed = true;
            }
            struct pollfd p = {fds[0], POLLIN, 0};
            if (poll(&p, 1, 20) > 0) {
                char buf[65536];
                ssize_t n = read(fds[0], buf, sizeof buf);
                if (n <= 0)
                    break; // the child is gone and the pipe drained
                text.append(buf, static_cast<size_t>(n));
            }
        }
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        ASSERT_TRUE(WIFSIGNALED(status)) << "the child died on its own";
        // A line cut by the kill is not an acknowledgement.
        text.erase(text.find_last_of('\n') + 1);
        Acked acked;
        ParseLines(text, acked);
        ASSERT_TRUE(acked.ready);
        ASSERT_GT(acked.puts.size(), 20u) << "too little load to judge";

        Open(OSP_QUEUE_FSYNC_BATCH, 1000000);
        std::map<uint64_t, Item> present;
        for (auto &it : All(q_))
            present[it.index] = it;
        for (auto &[index, who] : acked.puts) {
            if (acked.deleted.count(index)) {
                EXPECT_EQ(present.count(index), 0u)
                    << "acknowledged delete of " << index << " undone";
                continue;
            }
            auto found = present.find(index);
            if (found == present.end() && acked.removing.count(index))
                continue; // removed, its acknowledgement cut by the kill
            ASSERT_NE(found, present.end())
                << "acknowledged put " << index << " lost";
            EXPECT_EQ(found->second.data, KillPayload(who.first, who.second));
        }
        // Whatever else is there (puts not yet acknowledged) is whole.
        for (auto &[index, item] : present) {
            if (item.tags.count("w") == 0) { // an earlier round's check
                EXPECT_EQ(item.data, "after");
                continue;
            }
            int t = std::stoi(item.tags["w"]), s = std::stoi(item.tags["s"]);
            EXPECT_EQ(item.data, KillPayload(t, s)) << "item " << index;
        }
        uint64_t highest = acked.puts.rbegin()->first;
        EXPECT_GT(Put(q_, "after").index, highest);
        Close();
        RecordProperty("round" + std::to_string(round) + "_acked_puts",
                       static_cast<int>(acked.puts.size()));
    }
}

// ---- a measurement, not a test: run with
// --gtest_also_run_disabled_tests --gtest_filter='*Throughput*' ----

TEST_F(QueueEmbedded, DISABLED_ThroughputSixteenPutters) {
    const int threads = 16;
    const auto duration = 2s;
    std::string payload(1024, 'x');
    for (osp_queue_fsync policy :
         {OSP_QUEUE_FSYNC_BATCH, OSP_QUEUE_FSYNC_ALWAYS,
          OSP_QUEUE_FSYNC_NONE}) {
        Open(policy, 1000000);
        std::atomic<uint64_t> done{0};
        std::atomic<bool> stop{false};
        std::vector<std::thread> ts;
        auto start = std::chrono::steady_clock::now();
        for (int t = 0; t < threads; t++)
            ts.emplace_back([&] {
                while (!stop) {
                    PutResult r = Put(q_, payload);
                    if (r.status.ok)
                        done++;
                }
            });
        std::this_thread::sleep_for(duration);
        stop = true;
        for (auto &t : ts)
            t.join();
        double secs = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count();
        queue_log_stats s = LogStats();
        const char *name = policy == OSP_QUEUE_FSYNC_BATCH    ? "batch"
                           : policy == OSP_QUEUE_FSYNC_ALWAYS ? "always"
                                                              : "none";
        printf("fsync=%-6s puts/s=%9.0f  fsyncs=%llu  puts per fsync=%.1f\n",
               name, done / secs, (unsigned long long)s.fsyncs,
               s.fsyncs ? (double)done / s.fsyncs : 0.0);
        Close();
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        std::filesystem::create_directory(dir_);
    }
}

} // namespace
