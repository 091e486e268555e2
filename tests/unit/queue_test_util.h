// Synchronous wrappers over the asynchronous queue API
// (include/osprey/queue.h) for the queue tests: each call waits for its
// callback (with a time limit) and returns plain C++ values.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "osp_test.h"
#include "osprey/queue.h"

namespace queue_test {

using Tags = std::vector<std::pair<std::string, std::string>>;

// An item copied out of the store.
struct Item {
    uint64_t index = 0;
    int priority = 0;
    std::string request_id;
    std::map<std::string, std::string> tags;
    std::string data;
};

inline Item CopyItem(const osp_queue_item *item) {
    Item out;
    out.index = item->index;
    out.priority = item->priority;
    out.request_id = item->request_id;
    for (size_t i = 0; i < item->n_tags; i++)
        out.tags[item->tags[i].key] = item->tags[i].value;
    out.data.assign(static_cast<const char *>(item->data), item->size);
    return out;
}

// An error's code, reason and message (code UNKNOWN with ok=true for
// success).
struct Status {
    bool ok = true;
    osp_error_code code = OSP_ERROR_UNKNOWN;
    osp_error_reason reason = OSP_REASON_NONE;
    std::string message;
};

inline Status TakeStatus(osp_error *err) {
    Status s;
    if (err != nullptr) {
        s.ok = false;
        s.code = osp_error_get_code(err);
        s.reason = osp_error_get_reason(err);
        s.message = osp_error_message(err);
        osp_error_free(err);
    }
    return s;
}

// One callback's answer, waited for.
template <typename T> struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int calls = 0;
    T value{};

    void Set(T v) {
        std::lock_guard<std::mutex> lock(mu);
        value = std::move(v);
        done = true;
        calls++;
        cv.notify_all();
    }
    bool Wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
        std::unique_lock<std::mutex> lock(mu);
        return cv.wait_for(lock, limit, [&] { return done; });
    }
};

struct PutResult {
    Status status;
    uint64_t index = 0;
    std::string request_id;
};

struct TagArray {
    std::vector<osp_queue_tag> tags;
    explicit TagArray(const Tags &t) {
        for (auto &kv : t)
            tags.push_back({kv.first.c_str(), kv.second.c_str()});
    }
    const osp_queue_tag *data() const {
        return tags.empty() ? nullptr : tags.data();
    }
    size_t size() const {
        return tags.size();
    }
};

inline void OnPut(void *ctx, osp_error *err, uint64_t index,
                  const char *request_id) {
    PutResult r;
    r.status = TakeStatus(err);
    r.index = index;
    r.request_id = request_id ? request_id : "";
    static_cast<Pending<PutResult> *>(ctx)->Set(r);
}

inline PutResult Put(osp_queue *q, const std::string &data,
                     const Tags &tags = {}, int priority = 0) {
    TagArray t(tags);
    osp_queue_put_args args = {};
    args.data = data.data();
    args.size = data.size();
    args.tags = t.data();
    args.n_tags = t.size();
    args.priority = priority;
    Pending<PutResult> p;
    osp_queue_put(q, &args, OnPut, &p);
    EXPECT_TRUE(p.Wait()) << "put never answered";
    return p.value;
}

inline void OnDone(void *ctx, osp_error *err) {
    static_cast<Pending<Status> *>(ctx)->Set(TakeStatus(err));
}

inline Status WaitDone(Pending<Status> &p) {
    EXPECT_TRUE(p.Wait()) << "never answered";
    return p.value;
}

inline Status Delete(osp_queue *q, const std::vector<uint64_t> &indexes) {
    Pending<Status> p;
    osp_queue_delete(q, indexes.data(), indexes.size(), OnDone, &p);
    return WaitDone(p);
}

inline Status Truncate(osp_queue *q, uint64_t before) {
    Pending<Status> p;
    osp_queue_truncate(q, before, OnDone, &p);
    return WaitDone(p);
}

inline Status Commit(osp_queue *q, const char *gid, const char *uid,
                     const std::vector<uint64_t> &indexes) {
    Pending<Status> p;
    osp_queue_commit(q, gid, uid, indexes.data(), indexes.size(), OnDone, &p);
    return WaitDone(p);
}

inline Status Reject(osp_queue *q, const char *gid, const char *uid,
                     const std::vector<uint64_t> &indexes) {
    Pending<Status> p;
    osp_queue_reject(q, gid, uid, indexes.data(), indexes.size(), "Shutdown",
                     "test", OnDone, &p);
    return WaitDone(p);
}

inline Status End(osp_queue *q, bool force) {
    Pending<Status> p;
    osp_queue_end(q, force, OnDone, &p);
    return WaitDone(p);
}

struct GetResult {
    Status status;
    std::vector<Item> items;
};

inline void OnItems(void *ctx, osp_error *err, osp_queue_item **items,
                    size_t n) {
    GetResult r;
    r.status = TakeStatus(err);
    for (size_t i = 0; i < n; i++)
        r.items.push_back(CopyItem(items[i]));
    osp_queue_items_free(items, n);
    static_cast<Pending<GetResult> *>(ctx)->Set(r);
}

struct GetOptions {
    uint64_t index = 0;
    size_t length = 1;
    const char *request_id = nullptr;
    Tags filters;
    bool auto_delete = false;
    uint64_t timeout_ms = 0;

    GetOptions &Index(uint64_t v) {
        index = v;
        return *this;
    }
    GetOptions &Length(size_t v) {
        length = v;
        return *this;
    }
    GetOptions &RequestId(const char *v) {
        request_id = v;
        return *this;
    }
    GetOptions &Filters(const Tags &v) {
        filters = v;
        return *this;
    }
    GetOptions &AutoDelete(bool v) {
        auto_delete = v;
        return *this;
    }
    GetOptions &TimeoutMs(uint64_t v) {
        timeout_ms = v;
        return *this;
    }
};

// Starts a get; the caller waits on `p`.
inline void GetAsync(osp_queue *q, const GetOptions &o, Pending<GetResult> &p,
                     TagArray &t) {
    osp_queue_get_args args = {};
    args.index = o.index;
    args.length = o.length;
    args.request_id = o.request_id;
    args.filters = t.data();
    args.n_filters = t.size();
    args.auto_delete = o.auto_delete;
    args.timeout_ns = o.timeout_ms * 1000000ull;
    osp_queue_get(q, &args, OnItems, &p);
}

inline GetResult Get(osp_queue *q, const GetOptions &o) {
    TagArray t(o.filters);
    Pending<GetResult> p;
    GetAsync(q, o, p, t);
    EXPECT_TRUE(p.Wait()) << "get never answered";
    return p.value;
}

inline std::map<std::string, std::string> Attributes(osp_queue *q) {
    osp_queue_attribute *attrs = nullptr;
    size_t n = 0;
    std::map<std::string, std::string> out;
    osp_error *err = osp_queue_attributes(q, &attrs, &n);
    EXPECT_EQ(err, nullptr) << TakeMessage(err);
    for (size_t i = 0; i < n; i++)
        out[attrs[i].key] = attrs[i].value;
    osp_queue_attributes_free(attrs, n);
    return out;
}

inline uint64_t Length(osp_queue *q) {
    return std::stoull(Attributes(q)["stream.length"]);
}

// A consumer whose deliveries are kept; optionally commits each item from
// inside the deliver callback.
class Consumer {
  public:
    Consumer(osp_queue *q, const char *gid, const char *uid, unsigned window,
             int64_t start = 0, bool auto_commit = false,
             const Tags &filters = {}, bool commit_in_callback = false)
        : q_(q), gid_(gid), uid_(uid), commit_in_callback_(commit_in_callback),
          filters_(filters) {
        TagArray t(filters_);
        osp_queue_consumer_args args = {};
        args.gid = gid_.c_str();
        args.uid = uid_.c_str();
        args.start_index = start;
        args.window = window;
        args.auto_commit = auto_commit;
        args.filters = t.data();
        args.n_filters = t.size();
        args.deliver = Deliver;
        args.ctx = this;
        osp_error *err = osp_queue_consumer_open(q, &args, &handle_);
        EXPECT_EQ(err, nullptr) << TakeMessage(err);
    }
    ~Consumer() {
        Close();
    }
    void Close() {
        if (handle_ != nullptr) {
            osp_queue_consumer_close(handle_);
            handle_ = nullptr;
        }
    }
    // Waits until at least n items arrived in all; true when they did.
    bool WaitFor(size_t n,
                 std::chrono::milliseconds limit = std::chrono::seconds(5)) {
        std::unique_lock<std::mutex> lock(mu_);
        return cv_.wait_for(lock, limit, [&] { return items_.size() >= n; });
    }
    std::vector<Item> Items() {
        std::lock_guard<std::mutex> lock(mu_);
        return items_;
    }
    size_t Count() {
        std::lock_guard<std::mutex> lock(mu_);
        return items_.size();
    }
    int concurrent_violations() const {
        return violations_;
    }

  private:
    static void Deliver(void *ctx, osp_queue_item *item) {
        auto *self = static_cast<Consumer *>(ctx);
        if (self->in_deliver_.exchange(true))
            self->violations_++;
        uint64_t index = item->index;
        {
            std::lock_guard<std::mutex> lock(self->mu_);
            self->items_.push_back(CopyItem(item));
        }
        osp_queue_item_free(item);
        if (self->commit_in_callback_) {
            // The callback may call back into the store; the answer comes
            // later, so it must not wait for it here.
            auto *pending = new Pending<Status>();
            osp_queue_commit(
                self->q_, self->gid_.c_str(), self->uid_.c_str(), &index, 1,
                [](void *c, osp_error *err) {
                    osp_error_free(err);
                    delete static_cast<Pending<Status> *>(c);
                },
                pending);
        }
        self->in_deliver_ = false;
        self->cv_.notify_all();
    }

    osp_queue *q_;
    std::string gid_, uid_;
    bool commit_in_callback_;
    Tags filters_;
    osp_queue_consumer *handle_ = nullptr;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Item> items_;
    std::atomic<bool> in_deliver_{false};
    std::atomic<int> violations_{0};
};

} // namespace queue_test
