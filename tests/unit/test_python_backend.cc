// The python backend's server side without Python: the shared-memory
// region (sizes from 0 bytes past its growth to its limit), the control
// channel's frames and RESULT payloads (valid, truncated, hostile), and
// stub processes played by /bin/sh scripts (answers, LOG frames, a stub
// that exits, a stub that hangs past its deadline), BLS calls and the
// watcher of an idle channel.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "osp_test.h"
#include "osprey/clock.h"
#include "python/python_bls_async.h"
#include "python/python_complete.h"
#include "python/python_metrics.h"
#include "python/python_protocol.h"
#include "python/python_requests.h"
#include "python/python_shm.h"
#include "python/python_stub.h"
#include "python/python_watch.h"

namespace {

// ---- shared-memory region ----

TEST(PythonShm, StartsEmptyAndGrowsByWholeSteps) {
    pyshm_region r;
    ASSERT_OK(pyshm_region_init(&r, 0, 4096, 1 << 20));
    EXPECT_EQ(r.size, 0u);
    EXPECT_EQ(r.base, nullptr);
    ASSERT_OK(pyshm_region_reserve(&r, 0));
    EXPECT_EQ(r.size, 0u);
    ASSERT_OK(pyshm_region_reserve(&r, 1));
    EXPECT_EQ(r.size, 4096u);
    ASSERT_OK(pyshm_region_reserve(&r, 4096));
    EXPECT_EQ(r.size, 4096u);
    ASSERT_OK(pyshm_region_reserve(&r, 4097));
    EXPECT_EQ(r.size, 8192u);
    ASSERT_OK(pyshm_region_reserve(&r, 3 * 4096 + 5));
    EXPECT_EQ(r.size, 4u * 4096);
    memset(r.base, 0xab, r.size); // every byte is mapped
    pyshm_region_destroy(&r);
    EXPECT_EQ(r.fd, -1);
}

TEST(PythonShm, TheLimitIsReachableAndNeverPassed) {
    pyshm_region r;
    ASSERT_OK(pyshm_region_init(&r, 1000, 3000, 10000));
    ASSERT_OK(pyshm_region_reserve(&r, 9999));
    EXPECT_EQ(r.size, 10000u); // the last step is cut at the limit
    ASSERT_OK(pyshm_region_reserve(&r, 10000));
    osp_error *err = pyshm_region_reserve(&r, 10001);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_reason(err), OSP_REASON_TOO_LARGE);
    EXPECT_NE(
        std::string(osp_error_message(err)).find("shm-region-max-byte-size"),
        std::string::npos);
    osp_error_free(err);
    EXPECT_EQ(r.size, 10000u);
    EXPECT_ERROR_CODE(pyshm_region_reserve(&r, SIZE_MAX),
                      OSP_ERROR_INVALID_ARG);
    pyshm_region_destroy(&r);
}

TEST(PythonShm, FollowsARegionTheStubGrew) {
    pyshm_region r;
    ASSERT_OK(pyshm_region_init(&r, 4096, 4096, 1 << 20));
    r.base[0] = 7;
    // The stub's side: grow the file and write past the old end.
    ASSERT_EQ(ftruncate(r.fd, 3 * 4096), 0);
    void *theirs =
        mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
    ASSERT_NE(theirs, MAP_FAILED);
    static_cast<uint8_t *>(theirs)[3 * 4096 - 1] = 42;
    ASSERT_OK(pyshm_region_follow(&r, 3 * 4096));
    EXPECT_EQ(r.size, 3u * 4096);
    EXPECT_EQ(r.base[0], 7);
    EXPECT_EQ(r.base[3 * 4096 - 1], 42);
    munmap(theirs, 3 * 4096);
    ASSERT_OK(pyshm_region_follow(&r, 100)); // smaller: nothing to do
    EXPECT_EQ(r.size, 3u * 4096);
    // A size the file does not have, or past the limit, is refused.
    EXPECT_ERROR_CODE(pyshm_region_follow(&r, 8 * 4096), OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(pyshm_region_follow(&r, 2 << 20), OSP_ERROR_INTERNAL);
    EXPECT_EQ(r.size, 3u * 4096);
    pyshm_region_destroy(&r);
}

TEST(PythonShm, NeverShrinksAFileTheStubGrewUnreported) {
    pyshm_region r;
    ASSERT_OK(pyshm_region_init(&r, 4096, 4096, 1 << 20));
    ASSERT_EQ(ftruncate(r.fd, 10 * 4096), 0); // the stub grew it, then failed
    ASSERT_OK(pyshm_region_reserve(&r, 2 * 4096));
    EXPECT_EQ(r.size, 10u * 4096);
    struct stat st;
    ASSERT_EQ(fstat(r.fd, &st), 0);
    EXPECT_EQ(st.st_size, 10 * 4096);
    pyshm_region_destroy(&r);
}

TEST(PythonShm, AlignsTensorsTo64Bytes) {
    EXPECT_EQ(pyshm_align(0), 0u);
    EXPECT_EQ(pyshm_align(1), 64u);
    EXPECT_EQ(pyshm_align(64), 64u);
    EXPECT_EQ(pyshm_align(65), 128u);
    EXPECT_EQ(pyshm_align(SIZE_MAX - 10), SIZE_MAX);
}

// ---- RESULT payloads ----

// Builds payloads as the stub's struct.pack does (little-endian).
struct Payload {
    std::vector<uint8_t> bytes;
    template <typename T> Payload &put(T v) {
        const uint8_t *p = reinterpret_cast<const uint8_t *>(&v);
        bytes.insert(bytes.end(), p, p + sizeof v);
        return *this;
    }
    Payload &str(const std::string &s, int width) {
        if (width == 1)
            put<uint8_t>(static_cast<uint8_t>(s.size()));
        else if (width == 2)
            put<uint16_t>(static_cast<uint16_t>(s.size()));
        else
            put<uint32_t>(static_cast<uint32_t>(s.size()));
        bytes.insert(bytes.end(), s.begin(), s.end());
        return *this;
    }
    Payload &output(const std::string &name, const std::string &dtype,
                    std::vector<int64_t> dims, uint64_t offset, uint64_t size) {
        str(name, 2).str(dtype, 1).put<uint8_t>(uint8_t(dims.size()));
        for (int64_t d : dims)
            put<int64_t>(d);
        return put<uint64_t>(offset).put<uint64_t>(size);
    }
    // A GPU tensor's descriptor: rank byte with bit 7, then after the byte
    // size the device id, the lease and the 64-byte IPC handle.
    Payload &gpu_output(const std::string &name, const std::string &dtype,
                        std::vector<int64_t> dims, uint64_t offset,
                        uint64_t size, int32_t device, uint64_t lease,
                        uint8_t handle_fill) {
        str(name, 2).str(dtype, 1).put<uint8_t>(
            uint8_t(dims.size() | PYPROTO_RANK_ON_GPU));
        for (int64_t d : dims)
            put<int64_t>(d);
        put<uint64_t>(offset).put<uint64_t>(size);
        put<int32_t>(device).put<uint64_t>(lease);
        bytes.insert(bytes.end(), OSP_DEVICE_IPC_HANDLE_BYTES, handle_fill);
        return *this;
    }
};

Payload ValidResult() {
    Payload p;
    p.put<uint64_t>(1 << 20).put<uint32_t>(2);
    p.put<uint32_t>(0).put<uint32_t>(3);
    p.output("OUT0", "FP32", {2, 3}, 0, 24);
    p.output("EMPTY", "INT8", {0}, 64, 0);
    p.output("S", "BYTES", {2}, 128, 13);
    p.put<uint32_t>(1).put<uint32_t>(3).str("bad MODE", 4);
    return p;
}

TEST(PythonProtocol, DecodesOutputsAndErrorResponses) {
    Payload p = ValidResult();
    pyproto_result r;
    ASSERT_OK(pyproto_result_decode(p.bytes.data(), p.bytes.size(), &r));
    EXPECT_EQ(r.region_size, 1u << 20);
    ASSERT_EQ(r.n_responses, 2u);
    ASSERT_FALSE(r.responses[0].is_error);
    ASSERT_EQ(r.responses[0].n_outputs, 3u);
    const pyproto_output &o = r.responses[0].outputs[0];
    EXPECT_STREQ(o.name, "OUT0");
    EXPECT_EQ(o.dtype, OSP_TYPE_FP32);
    EXPECT_EQ(o.shape.rank, 2);
    EXPECT_EQ(o.shape.dims[1], 3);
    EXPECT_EQ(o.byte_size, 24u);
    EXPECT_EQ(r.responses[0].outputs[1].byte_size, 0u);
    EXPECT_EQ(r.responses[0].outputs[2].dtype, OSP_TYPE_BYTES);
    ASSERT_TRUE(r.responses[1].is_error);
    EXPECT_STREQ(r.responses[1].error_message, "bad MODE");
    EXPECT_EQ(pyproto_error_code(r.responses[1].error_code),
              OSP_ERROR_INVALID_ARG);
    pyproto_result_destroy(&r);
}

TEST(PythonProtocol, EveryTruncationIsAnErrorNotACrash) {
    Payload p = ValidResult();
    for (size_t len = 0; len < p.bytes.size(); len++) {
        std::vector<uint8_t> cut(p.bytes.begin(), p.bytes.begin() + len);
        pyproto_result r;
        SCOPED_TRACE("length " + std::to_string(len));
        EXPECT_ERROR_CODE(pyproto_result_decode(cut.data(), cut.size(), &r),
                          OSP_ERROR_INTERNAL);
    }
}

TEST(PythonProtocol, RefusesHostileDescriptors) {
    auto decode = [](Payload p) {
        pyproto_result r;
        return pyproto_result_decode(p.bytes.data(), p.bytes.size(), &r);
    };
    auto one = [](auto fill) {
        Payload p;
        p.put<uint64_t>(4096).put<uint32_t>(1).put<uint32_t>(0).put<uint32_t>(
            1);
        fill(p);
        return p;
    };
    EXPECT_ERROR_CODE(decode(one([](Payload &p) {
                          p.output("X", "FP32", {1}, 4096, 4); // past the end
                      })),
                      OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(decode(one([](Payload &p) {
                          p.output("X", "FP32", {3}, 0, 4); // 3 floats != 4 B
                      })),
                      OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(
        decode(one([](Payload &p) { p.output("X", "FP99", {1}, 0, 4); })),
        OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(
        decode(one([](Payload &p) { p.output("X", "FP32", {-1}, 0, 4); })),
        OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(decode(one([](Payload &p) {
                          p.output("X", "FP32", std::vector<int64_t>(17, 1), 0,
                                   4);
                      })),
                      OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(decode(one([](Payload &p) {
                          p.output("X", "FP32", {1}, UINT64_MAX, 4);
                      })),
                      OSP_ERROR_INTERNAL);
    Payload many; // claims more responses than it has bytes for
    many.put<uint64_t>(0).put<uint32_t>(0xffffffffu);
    EXPECT_ERROR_CODE(decode(many), OSP_ERROR_INTERNAL);
    Payload trailing = ValidResult();
    trailing.put<uint8_t>(0);
    EXPECT_ERROR_CODE(decode(trailing), OSP_ERROR_INTERNAL);
}

// The tail of a BLS request: its timeout and parameters (a string, an int
// and a bool), as the stub's request_body packs them.
Payload &BlsOptions(Payload &p, uint64_t timeout_us) {
    p.put<uint64_t>(timeout_us).put<uint32_t>(3);
    p.str("s", 2).put<uint8_t>(0).str("text", 4);
    p.str("i", 2).put<uint8_t>(1).put<int64_t>(-7);
    p.str("b", 2).put<uint8_t>(2).put<uint8_t>(1);
    return p;
}


// ---- GPU tensors (Tensor.from_dlpack of a CUDA tensor) ----

// One response: a GPU output far past the region (it lies in its CUDA
// allocation, not in the region), then one in the region.
Payload GpuResult() {
    Payload p;
    p.put<uint64_t>(4096).put<uint32_t>(1).put<uint32_t>(0).put<uint32_t>(2);
    p.gpu_output("G", "FP32", {2, 2}, 1 << 20, 16, 1, 9, 0xab);
    p.output("H", "INT8", {4}, 0, 4);
    return p;
}

TEST(PythonProtocol, DecodesGpuTensorDescriptors) {
    Payload p = GpuResult();
    pyproto_result r;
    ASSERT_OK(pyproto_result_decode(p.bytes.data(), p.bytes.size(), &r));
    ASSERT_EQ(r.n_responses, 1u);
    ASSERT_EQ(r.responses[0].n_outputs, 2u);
    const pyproto_output &g = r.responses[0].outputs[0];
    EXPECT_TRUE(g.on_gpu);
    EXPECT_EQ(g.shape.rank, 2); // the flag is not part of the rank
    EXPECT_EQ(g.offset, 1u << 20);
    EXPECT_EQ(g.byte_size, 16u);
    EXPECT_EQ(g.gpu.device_id, 1);
    EXPECT_EQ(g.gpu.lease, 9u);
    EXPECT_EQ(g.gpu.ipc_handle[0], 0xab);
    EXPECT_EQ(g.gpu.ipc_handle[OSP_DEVICE_IPC_HANDLE_BYTES - 1], 0xab);
    EXPECT_FALSE(r.responses[0].outputs[1].on_gpu);

    // RELEASE names the leases the server is done with.
    pyproto_text release = {};
    ASSERT_EQ(pyproto_append_release(&release, r.responses, r.n_responses), 1u);
    ASSERT_EQ(release.len, 12u);
    uint32_t count;
    uint64_t lease;
    memcpy(&count, release.data, 4);
    memcpy(&lease, release.data + 4, 8);
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(lease, 9u);
    pyproto_text_free(&release);
    pyproto_result_destroy(&r);

    for (size_t len = 0; len < p.bytes.size(); len++) {
        std::vector<uint8_t> cut(p.bytes.begin(), p.bytes.begin() + len);
        SCOPED_TRACE("length " + std::to_string(len));
        EXPECT_ERROR_CODE(pyproto_result_decode(cut.data(), cut.size(), &r),
                          OSP_ERROR_INTERNAL);
    }
}

TEST(PythonProtocol, RefusesHostileGpuDescriptors) {
    auto decode = [](auto fill) {
        Payload p;
        p.put<uint64_t>(4096).put<uint32_t>(1).put<uint32_t>(0).put<uint32_t>(
            1);
        fill(p);
        pyproto_result r;
        osp_error *err =
            pyproto_result_decode(p.bytes.data(), p.bytes.size(), &r);
        if (!err)
            pyproto_result_destroy(&r);
        return err;
    };
    ASSERT_OK(decode(
        [](Payload &p) { p.gpu_output("X", "FP32", {1}, 0, 4, 0, 1, 0); }));
    EXPECT_ERROR_CODE(decode([](Payload &p) { // a negative device
                          p.gpu_output("X", "FP32", {1}, 0, 4, -1, 1, 0);
                      }),
                      OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(decode([](Payload &p) { // offset + size wraps
                          p.gpu_output("X", "FP32", {1}, UINT64_MAX - 1, 4, 0,
                                       1, 0);
                      }),
                      OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(decode([](Payload &p) { // BYTES never live on a GPU
                          p.gpu_output("X", "BYTES", {1}, 0, 8, 0, 1, 0);
                      }),
                      OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(decode([](Payload &p) { // size not the shape's
                          p.gpu_output("X", "FP32", {3}, 0, 4, 0, 1, 0);
                      }),
                      OSP_ERROR_INTERNAL);
    EXPECT_ERROR_CODE(decode([](Payload &p) { // rank over the limit
                          p.gpu_output("X", "FP32", std::vector<int64_t>(17, 1),
                                       0, 4, 0, 1, 0);
                      }),
                      OSP_ERROR_INTERNAL);
}

TEST(PythonProtocol, GpuInputsOfABlsCallTakeNoData) {
    // The call's data holds only the host input; the GPU input's offset
    // counts in its allocation, past the data.
    Payload p;
    p.put<uint64_t>(5).put<uint8_t>(0).put<uint64_t>(4);
    p.str("m", 2).put<int64_t>(-1).str("", 2).put<uint32_t>(2);
    p.gpu_output("G", "INT32", {2}, 4096, 8, 0, 0, 1);
    p.output("H", "INT8", {4}, 0, 4);
    p.put<uint32_t>(0);
    p.put<uint64_t>(0).put<uint32_t>(0); // no timeout, no parameters
    p.put<int32_t>(0);
    pyproto_bls_request req;
    uint64_t id = 0;
    ASSERT_OK(
        pyproto_bls_call_decode(p.bytes.data(), p.bytes.size(), &req, &id));
    ASSERT_EQ(req.n_inputs, 2u);
    EXPECT_TRUE(req.inputs[0].on_gpu);
    EXPECT_EQ(req.inputs[0].gpu.lease, 0u);
    EXPECT_FALSE(req.inputs[1].on_gpu);
    pyproto_bls_destroy(&req);
}

TEST(PythonProtocol, AppendsGpuDescriptorsTheDecoderReads) {
    // What the server writes for an input it hands over in GPU memory
    // (EXEC) reads back as written.
    pyproto_gpu_ref ref = {};
    ref.device_id = 1;
    ref.lease = 0;
    for (size_t i = 0; i < sizeof ref.ipc_handle; i++)
        ref.ipc_handle[i] = (uint8_t)i;
    osp_shape shape = {};
    shape.rank = 2;
    shape.dims[0] = 3;
    shape.dims[1] = 2;
    Payload p;
    p.put<uint64_t>(0).put<uint32_t>(1).put<uint32_t>(0).put<uint32_t>(1);
    pyproto_text t = {};
    ASSERT_OK(pyproto_append_gpu_tensor(&t, "IN", OSP_TYPE_FP64, &shape, &ref,
                                        256, 48));
    p.bytes.insert(p.bytes.end(), t.data, t.data + t.len);
    pyproto_text_free(&t);
    pyproto_result r;
    ASSERT_OK(pyproto_result_decode(p.bytes.data(), p.bytes.size(), &r));
    const pyproto_output &o = r.responses[0].outputs[0];
    EXPECT_TRUE(o.on_gpu);
    EXPECT_STREQ(o.name, "IN");
    EXPECT_EQ(o.dtype, OSP_TYPE_FP64);
    EXPECT_EQ(o.shape.rank, 2);
    EXPECT_EQ(o.shape.dims[0], 3);
    EXPECT_EQ(o.offset, 256u);
    EXPECT_EQ(o.byte_size, 48u);
    EXPECT_EQ(o.gpu.device_id, 1);
    EXPECT_EQ(memcmp(o.gpu.ipc_handle, ref.ipc_handle, sizeof ref.ipc_handle),
              0);
    // no lease: nothing to release
    pyproto_text release = {};
    EXPECT_EQ(pyproto_append_release(&release, r.responses, 1), 0u);
    EXPECT_EQ(release.len, 0u);
    pyproto_text_free(&release);
    pyproto_result_destroy(&r);
}

// ---- custom metrics (METRIC frames) ----

// A METRIC frame's head: call id, op, handle id.
Payload MetricFrame(uint64_t call, uint8_t op, uint64_t id) {
    Payload p;
    p.put<uint64_t>(call).put<uint8_t>(op).put<uint64_t>(id);
    return p;
}

// Serves the frame; returns the answer's status and message (or the
// protocol error's message, prefixed "broken: ").
std::string ServeMetric(pymetrics *m, const Payload &p, double *value = nullptr) {
    pyproto_text answer = {};
    osp_error *err = pymetrics_serve(m, p.bytes.data(), p.bytes.size(), &answer);
    if (err) {
        std::string why = std::string("broken: ") + osp_error_message(err);
        osp_error_free(err);
        pyproto_text_free(&answer);
        return why;
    }
    std::string out = "none";
    if (answer.len) {
        uint32_t status, len;
        memcpy(&status, answer.data + 8, 4);
        if (value)
            memcpy(value, answer.data + 12, 8);
        memcpy(&len, answer.data + 20, 4);
        out = (status ? "error: " : "ok") + std::string(answer.data + 24, len);
    }
    pyproto_text_free(&answer);
    return out;
}

TEST(PythonMetrics, ServesFamiliesMetricsAndTheirOperations) {
    pymetrics *m = pymetrics_new();
    ASSERT_NE(m, nullptr);
    Payload family = MetricFrame(1, 0, 10);
    family.put<uint8_t>(1).str("unit_py_gauge", 2).str("help", 4);
    EXPECT_EQ(ServeMetric(m, family), "ok");
    Payload metric = MetricFrame(2, 1, 11);
    metric.put<uint64_t>(10).put<uint32_t>(1).str("k", 2).str("v", 4);
    metric.put<uint32_t>(UINT32_MAX);
    EXPECT_EQ(ServeMetric(m, metric), "ok");
    Payload set = MetricFrame(3, 4, 11);
    set.put<double>(2.5);
    EXPECT_EQ(ServeMetric(m, set), "ok");
    double value = 0;
    EXPECT_EQ(ServeMetric(m, MetricFrame(4, 6, 11), &value), "ok");
    EXPECT_EQ(value, 2.5);
    Payload observe = MetricFrame(5, 5, 11);
    observe.put<double>(1);
    EXPECT_EQ(ServeMetric(m, observe),
              "error: Failed to observe metric value: "
              "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe");
    // A delete wants no answer.
    EXPECT_EQ(ServeMetric(m, MetricFrame(0, 2, 11)), "none");
    pymetrics_free(m);
}

TEST(PythonMetrics, MalformedFramesBreakTheProtocol) {
    pymetrics *m = pymetrics_new();
    Payload family = MetricFrame(1, 0, 10);
    family.put<uint8_t>(0).str("unit_py_counter", 2).str("", 4);
    ASSERT_EQ(ServeMetric(m, family), "ok");
    // every truncation of a valid frame
    for (size_t len = 0; len < family.bytes.size(); len++) {
        Payload cut;
        cut.bytes.assign(family.bytes.begin(), family.bytes.begin() + len);
        EXPECT_EQ(ServeMetric(m, cut).rfind("broken: ", 0), 0u) << len;
    }
    EXPECT_EQ(ServeMetric(m, family), "broken: python backend: malformed METRIC "
                                      "frame (an id used twice)");
    Payload unknown = MetricFrame(2, 3, 99);
    unknown.put<double>(1);
    EXPECT_EQ(ServeMetric(m, unknown),
              "broken: python backend: malformed METRIC frame (an unknown metric)");
    Payload labels = MetricFrame(3, 1, 12);
    labels.put<uint64_t>(10).put<uint32_t>(1000000);
    EXPECT_EQ(ServeMetric(m, labels),
              "broken: python backend: malformed METRIC frame (labels)");
    Payload buckets = MetricFrame(4, 1, 12);
    buckets.put<uint64_t>(10).put<uint32_t>(0).put<uint32_t>(3).put<double>(1);
    EXPECT_EQ(ServeMetric(m, buckets),
              "broken: python backend: malformed METRIC frame (buckets)");
    Payload op = MetricFrame(5, 42, 10);
    EXPECT_EQ(ServeMetric(m, op),
              "broken: python backend: malformed METRIC frame (unknown operation)");
    pymetrics_free(m);
}

TEST(PythonProtocol, DecodesBlsRequestsAndRefusesTruncatedOnes) {
    Payload p;
    p.put<uint64_t>(4096).put<uint64_t>(128).str("py_add_sub", 2);
    p.put<int64_t>(-1).str("req-1", 2).put<uint32_t>(2);
    p.output("INPUT0", "FP32", {1, 4}, 0, 16);
    p.output("INPUT1", "BYTES", {2}, 64, 10);
    p.put<uint32_t>(1).str("OUTPUT0", 2);
    BlsOptions(p, 100000);
    pyproto_bls_request req;
    ASSERT_OK(pyproto_bls_decode(p.bytes.data(), p.bytes.size(), &req));
    EXPECT_STREQ(req.model, "py_add_sub");
    EXPECT_EQ(req.version, -1);
    EXPECT_STREQ(req.id, "req-1");
    EXPECT_EQ(req.out_offset, 128u);
    ASSERT_EQ(req.n_inputs, 2u);
    EXPECT_EQ(req.inputs[1].dtype, OSP_TYPE_BYTES);
    ASSERT_EQ(req.n_outputs, 1u);
    EXPECT_STREQ(req.outputs[0], "OUTPUT0");
    EXPECT_EQ(req.timeout_us, 100000u);
    ASSERT_EQ(req.n_parameters, 3u);
    EXPECT_STREQ(req.parameters[0].key, "s");
    EXPECT_EQ(req.parameters[0].type, OSP_PARAM_STRING);
    EXPECT_STREQ(req.parameters[0].value.s, "text");
    EXPECT_EQ(req.parameters[1].type, OSP_PARAM_INT);
    EXPECT_EQ(req.parameters[1].value.i, -7);
    EXPECT_EQ(req.parameters[2].type, OSP_PARAM_BOOL);
    EXPECT_TRUE(req.parameters[2].value.b);
    pyproto_bls_destroy(&req);
    for (size_t len = 0; len < p.bytes.size(); len++) {
        SCOPED_TRACE("length " + std::to_string(len));
        EXPECT_ERROR_CODE(pyproto_bls_decode(p.bytes.data(), len, &req),
                          OSP_ERROR_INTERNAL);
    }
    // Parameters of an unknown type, a bool that is neither 0 nor 1, and
    // more of them than the payload could hold.
    for (int bad = 0; bad < 3; bad++) {
        Payload q;
        q.put<uint64_t>(4096).put<uint64_t>(0).str("m", 2).put<int64_t>(1);
        q.str("", 2).put<uint32_t>(0).put<uint32_t>(0).put<uint64_t>(0);
        if (bad == 0)
            q.put<uint32_t>(1).str("k", 2).put<uint8_t>(3).put<int64_t>(0);
        else if (bad == 1)
            q.put<uint32_t>(1).str("k", 2).put<uint8_t>(2).put<uint8_t>(2);
        else
            q.put<uint32_t>(1000).str("k", 2).put<uint8_t>(2).put<uint8_t>(1);
        SCOPED_TRACE("bad parameters " + std::to_string(bad));
        EXPECT_ERROR_CODE(
            pyproto_bls_decode(q.bytes.data(), q.bytes.size(), &req),
            OSP_ERROR_INTERNAL);
    }
    EXPECT_EQ(pyproto_triton_code(OSP_ERROR_INVALID_ARG), 3u);
    EXPECT_EQ(pyproto_error_code(pyproto_triton_code(OSP_ERROR_NOT_FOUND)),
              OSP_ERROR_NOT_FOUND);
}

// A decoupled model's RESPONSE frame: header, one output with its bytes
// inline, offsets into the data that follows.
Payload ValidStreamResponse() {
    Payload p;
    p.put<uint64_t>(7).put<uint32_t>(1).put<uint32_t>(1).put<uint64_t>(8);
    p.put<uint32_t>(0).put<uint32_t>(1);
    p.output("OUT", "INT32", {2}, 0, 8);
    p.put<int32_t>(5).put<int32_t>(6);
    return p;
}

TEST(PythonProtocol, DecodesStreamResponsesAndRefusesBrokenOnes) {
    Payload p = ValidStreamResponse();
    pyproto_stream_response r;
    ASSERT_OK(
        pyproto_stream_response_decode(p.bytes.data(), p.bytes.size(), &r));
    EXPECT_EQ(r.batch, 7u);
    EXPECT_TRUE(r.final);
    ASSERT_TRUE(r.has_response);
    ASSERT_EQ(r.response.n_outputs, 1u);
    EXPECT_EQ(r.data_len, 8u);
    int32_t second;
    memcpy(&second, r.data + r.response.outputs[0].offset + 4, 4);
    EXPECT_EQ(second, 6);
    pyproto_stream_response_destroy(&r);

    for (size_t len = 0; len < p.bytes.size(); len++) {
        SCOPED_TRACE("length " + std::to_string(len));
        EXPECT_ERROR_CODE(
            pyproto_stream_response_decode(p.bytes.data(), len, &r),
            OSP_ERROR_INTERNAL);
    }
    // A tensor past the data, and the flags alone with data after them.
    Payload outside;
    outside.put<uint64_t>(1).put<uint32_t>(0).put<uint32_t>(1).put<uint64_t>(4);
    outside.put<uint32_t>(0).put<uint32_t>(1).output("OUT", "INT32", {2}, 0, 8);
    outside.put<int32_t>(5);
    EXPECT_ERROR_CODE(pyproto_stream_response_decode(outside.bytes.data(),
                                                     outside.bytes.size(), &r),
                      OSP_ERROR_INTERNAL);
    Payload flags;
    flags.put<uint64_t>(1).put<uint32_t>(1).put<uint32_t>(0).put<uint64_t>(0);
    ASSERT_OK(pyproto_stream_response_decode(flags.bytes.data(),
                                             flags.bytes.size(), &r));
    EXPECT_FALSE(r.has_response);
    pyproto_stream_response_destroy(&r);
    flags.put<uint8_t>(0);
    EXPECT_ERROR_CODE(pyproto_stream_response_decode(flags.bytes.data(),
                                                     flags.bytes.size(), &r),
                      OSP_ERROR_INTERNAL);
}

// A decoupled model's BLS_CALL: id, decoupled byte, data size, the body
// (offsets into the data), then two FP32s of data.
Payload ValidBlsCall() {
    Payload p;
    p.put<uint64_t>(42).put<uint8_t>(1).put<uint64_t>(8);
    p.str("py_square", 2).put<int64_t>(2).str("", 2).put<uint32_t>(1);
    p.output("IN", "FP32", {2}, 0, 8);
    p.put<uint32_t>(1).str("OUT", 2);
    BlsOptions(p, 5);
    p.put<float>(1.5f).put<float>(-2.0f);
    return p;
}

TEST(PythonProtocol, DecodesBlsCallsWithInlineTensors) {
    Payload p = ValidBlsCall();
    pyproto_bls_request req;
    uint64_t id = 0;
    ASSERT_OK(
        pyproto_bls_call_decode(p.bytes.data(), p.bytes.size(), &req, &id));
    EXPECT_EQ(id, 42u);
    EXPECT_EQ(req.call_id, 42u);
    EXPECT_TRUE(req.decoupled);
    EXPECT_STREQ(req.model, "py_square");
    EXPECT_EQ(req.version, 2);
    ASSERT_EQ(req.n_inputs, 1u);
    ASSERT_EQ(req.data_len, 8u);
    float second;
    memcpy(&second, req.data + req.inputs[0].offset + 4, 4);
    EXPECT_EQ(second, -2.0f);
    ASSERT_EQ(req.n_outputs, 1u);
    EXPECT_STREQ(req.outputs[0], "OUT");
    EXPECT_EQ(req.timeout_us, 5u);
    ASSERT_EQ(req.n_parameters, 3u);
    EXPECT_STREQ(req.parameters[1].key, "i");
    pyproto_bls_destroy(&req);

    for (size_t len = 0; len < p.bytes.size(); len++) {
        SCOPED_TRACE("length " + std::to_string(len));
        id = 0;
        EXPECT_ERROR_CODE(
            pyproto_bls_call_decode(p.bytes.data(), len, &req, &id),
            OSP_ERROR_INTERNAL);
        EXPECT_EQ(id, len >= 8 ? 42u : 0u); // named once it is there
    }
}

TEST(PythonProtocol, RefusesBlsCallsWhoseTensorsLeaveTheirData) {
    auto call = [](uint8_t decoupled, uint64_t data_len, uint64_t offset,
                   uint64_t size, size_t data_bytes) {
        Payload p;
        p.put<uint64_t>(1).put<uint8_t>(decoupled).put<uint64_t>(data_len);
        p.str("m", 2).put<int64_t>(-1).str("", 2).put<uint32_t>(1);
        p.output("IN", "INT8", {int64_t(size)}, offset, size);
        p.put<uint32_t>(0).put<uint64_t>(0).put<uint32_t>(0);
        p.bytes.insert(p.bytes.end(), data_bytes, 0);
        return p;
    };
    pyproto_bls_request req;
    uint64_t id;
    Payload ok = call(0, 4, 0, 4, 4);
    ASSERT_OK(
        pyproto_bls_call_decode(ok.bytes.data(), ok.bytes.size(), &req, &id));
    pyproto_bls_destroy(&req);
    for (Payload bad : {call(0, 4, 1, 4, 4),          // past the data
                        call(0, 4, UINT64_MAX, 4, 4), // wraps
                        call(0, 9, 0, 4, 4),  // data size past the frame
                        call(2, 4, 0, 4, 4),  // decoupled byte not 0 or 1
                        call(0, 3, 0, 4, 4)}) // body and data disagree
        EXPECT_ERROR_CODE(pyproto_bls_call_decode(bad.bytes.data(),
                                                  bad.bytes.size(), &req, &id),
                          OSP_ERROR_INTERNAL);
}

TEST(PythonProtocol, DecodesBlsCancelsOfExactlyOneId) {
    Payload p;
    p.put<uint64_t>(77);
    uint64_t id = 0;
    ASSERT_OK(pyproto_bls_cancel_decode(p.bytes.data(), p.bytes.size(), &id));
    EXPECT_EQ(id, 77u);
    EXPECT_ERROR_CODE(pyproto_bls_cancel_decode(p.bytes.data(), 7, &id),
                      OSP_ERROR_INTERNAL);
    p.put<uint8_t>(0);
    EXPECT_ERROR_CODE(
        pyproto_bls_cancel_decode(p.bytes.data(), p.bytes.size(), &id),
        OSP_ERROR_INTERNAL);
}

TEST(PythonProtocol, JsonStringsAreEscaped) {
    pyproto_text t = {};
    pyproto_text_json_string(&t, "a\"b\\c\n\x01");
    pyproto_text_printf(&t, ",%d", 5);
    EXPECT_STREQ(t.data, "\"a\\\"b\\\\c\\u000a\\u0001\",5");
    EXPECT_FALSE(t.failed);
    pyproto_text_free(&t);
}

// ---- the requests of an EXEC ----

// Reads the binary requests of an EXEC (python_protocol.h) back as text,
// one "{...}" per request: "id=a corr=42 params={} out=OUT0,OUT1
// in=IN:FP32:[1,2]@128+8".
class ExecReader {
  public:
    ExecReader(const char *data, size_t len) : p_(data), end_(data + len) {}
    std::string Requests() {
        std::string s;
        uint32_t n = Take<uint32_t>();
        for (uint32_t r = 0; r < n && ok_; r++) {
            s += r ? "," : "";
            s += "{id=" + String16();
            s += Take<uint8_t>() ? " corr=" + String16()
                                 : " corr=" + std::to_string(Take<uint64_t>());
            uint32_t params = Take<uint32_t>();
            s += " params=" + Bytes(params) + " out=";
            uint16_t outs = Take<uint16_t>();
            for (uint16_t o = 0; o < outs; o++)
                s += (o ? "," : "") + String16();
            uint16_t ins = Take<uint16_t>();
            s += " in=";
            for (uint16_t i = 0; i < ins; i++) {
                s += (i ? "," : "") + String16() + ":";
                s += Bytes(Take<uint8_t>()) + ":[";
                uint8_t rank = Take<uint8_t>();
                bool on_gpu = rank & PYPROTO_RANK_ON_GPU;
                rank &= ~PYPROTO_RANK_ON_GPU;
                for (uint8_t d = 0; d < rank; d++)
                    s += (d ? "," : "") + std::to_string(Take<int64_t>());
                s += "]@" + std::to_string(Take<uint64_t>());
                s += "+" + std::to_string(Take<uint64_t>());
                if (on_gpu) { // device, lease, then the handle's first byte
                    s += "@gpu" + std::to_string(Take<int32_t>());
                    s += "/lease" + std::to_string(Take<uint64_t>());
                    std::string handle = Bytes(OSP_DEVICE_IPC_HANDLE_BYTES);
                    s += "/h" + std::to_string(handle.empty() ? -1 : handle[0]);
                }
            }
            s += "}";
        }
        if (p_ != end_)
            ok_ = false;
        return ok_ ? s : "malformed: " + s;
    }

  private:
    template <typename T> T Take() {
        T v{};
        if (end_ - p_ < (ptrdiff_t)sizeof v) {
            ok_ = false;
            return v;
        }
        memcpy(&v, p_, sizeof v);
        p_ += sizeof v;
        return v;
    }
    std::string Bytes(size_t n) {
        if ((size_t)(end_ - p_) < n) {
            ok_ = false;
            return "";
        }
        std::string s(p_, n);
        p_ += n;
        return s;
    }
    std::string String16() {
        return Bytes(Take<uint16_t>());
    }
    const char *p_, *end_;
    bool ok_ = true;
};

// The requests of an EXEC for `reqs` over `inputs`, as ExecReader shows
// them; "error: <message>" when building them fails.
std::string RequestsJson(const std::vector<pyreq_input> &inputs,
                         const std::vector<osp_batch_request> &reqs) {
    char out0[] = "OUT0", out1[] = "OUT1";
    char *const names[] = {out0, out1};
    pyproto_text t = {};
    osp_error *err = pyreq_append_requests(&t, inputs.data(), inputs.size(),
                                           reqs.data(), reqs.size(), names, 2);
    std::string s = err ? "error: " + TakeMessage(err)
                        : ExecReader(t.data, t.len).Requests();
    pyproto_text_free(&t);
    return s;
}

osp_shape Shape(std::initializer_list<int64_t> dims) {
    osp_shape s{};
    for (int64_t d : dims)
        s.dims[s.rank++] = d;
    return s;
}

TEST(PythonRequests, EachRequestViewsItsOwnRowsOfTheRegion) {
    // FP32 [3, 2] at offset 128: request 0 has row 0, request 1 rows 1-2.
    std::vector<pyreq_input> in = {
        {"IN", OSP_TYPE_FP32, Shape({3, 2}), 128, 24, nullptr, false, {}}};
    const bool both[] = {true, true}, second[] = {false, true};
    osp_batch_request a{}, b{};
    a.id = "a";
    a.first_row = 0;
    a.rows = 1;
    a.output_requested = both;
    a.correlation_id = 42;
    b.id = "b\"";
    b.first_row = 1;
    b.rows = 2;
    b.output_requested = second;
    b.correlation_id_string = "corr";
    EXPECT_EQ(RequestsJson(in, {a, b}),
              "{id=a corr=42 params={} out=OUT0,OUT1 in=IN:FP32:[1,2]@128+8},"
              "{id=b\" corr=corr params={} out=OUT1 in=IN:FP32:[2,2]@136+16}");
    // One request of a batch, or of a model that does not batch (rows 0):
    // the whole input.
    a.rows = 0;
    EXPECT_EQ(RequestsJson(in, {a}),
              "{id=a corr=42 params={} out=OUT0,OUT1 in=IN:FP32:[3,2]@128+24}");
}

TEST(PythonRequests, GpuInputsNameTheirRowsInTheirAllocation) {
    // FORCE_CPU_ONLY_INPUT_TENSORS "no": INT64 [2, 3] at offset 4096 of an
    // allocation of GPU 1; each request's descriptor names its rows there.
    pyproto_gpu_ref ref = {};
    ref.device_id = 1;
    ref.ipc_handle[0] = 7;
    std::vector<pyreq_input> in = {
        {"G", OSP_TYPE_INT64, Shape({2, 3}), 4096, 48, nullptr, true, ref}};
    osp_batch_request a{}, b{};
    a.id = b.id = "";
    a.rows = 1;
    b.first_row = 1;
    b.rows = 1;
    EXPECT_EQ(RequestsJson(in, {a, b}),
              "{id= corr=0 params={} out=OUT0,OUT1 "
              "in=G:INT64:[1,3]@4096+24@gpu1/lease0/h7},"
              "{id= corr=0 params={} out=OUT0,OUT1 "
              "in=G:INT64:[1,3]@4120+24@gpu1/lease0/h7}");
}

TEST(PythonRequests, BytesRowsEndWhereTheirElementsEnd) {
    // BYTES [3, 1]: "a", "bcd", "" (4-byte length, then the bytes).
    std::vector<uint8_t> bytes;
    for (std::string e : {"a", "bcd", ""}) {
        uint32_t n = (uint32_t)e.size();
        bytes.insert(bytes.end(), (uint8_t *)&n, (uint8_t *)&n + 4);
        bytes.insert(bytes.end(), e.begin(), e.end());
    }
    std::vector<pyreq_input> in = {{"S",
                                    OSP_TYPE_BYTES,
                                    Shape({3, 1}),
                                    64,
                                    bytes.size(),
                                    bytes.data(),
                                    false,
                                    {}}};
    osp_batch_request a{}, b{};
    a.id = b.id = "";
    a.rows = 2;
    b.first_row = 2;
    b.rows = 1;
    std::string json = RequestsJson(in, {a, b});
    EXPECT_NE(json.find("S:BYTES:[2,1]@64+12"), std::string::npos) << json;
    EXPECT_NE(json.find("S:BYTES:[1,1]@76+4"), std::string::npos) << json;
    // An element whose length runs past the input, and rows past the
    // batch, are refused.
    uint32_t huge = 1000;
    memcpy(bytes.data() + 5, &huge, 4);
    EXPECT_EQ(RequestsJson(in, {a, b}),
              "error: python backend: the elements of input 'S' overrun it");
    b.rows = 2;
    in[0].dtype = OSP_TYPE_INT8;
    in[0].byte_size = 3;
    EXPECT_EQ(RequestsJson(in, {a, b}),
              "error: python backend: a request's rows do not fit input 'S'");
}

TEST(PythonRequests, ParametersAreAJsonObjectsText) {
    osp_parameter p[4] = {};
    p[0].key = const_cast<char *>("s");
    p[0].type = OSP_PARAM_STRING;
    p[0].value.s = const_cast<char *>("v\"");
    p[1].key = const_cast<char *>("i");
    p[1].type = OSP_PARAM_INT;
    p[1].value.i = -3;
    p[2].key = const_cast<char *>("b");
    p[2].type = OSP_PARAM_BOOL;
    p[2].value.b = true;
    p[3].key = const_cast<char *>("d");
    p[3].type = OSP_PARAM_DOUBLE;
    p[3].value.d = 0.1;
    pyproto_text t = {};
    pyreq_append_parameters(&t, p, 4);
    EXPECT_STREQ(t.data, "{\"s\":\"v\\\"\",\"i\":-3,\"b\":true,\"d\":0.1}");
    pyproto_text_free(&t);
    p[3].value.d = 2.0;
    pyreq_append_parameters(&t, p + 3, 1);
    EXPECT_STREQ(t.data, "{\"d\":2.0}");
    pyproto_text_free(&t);
}

// ---- auto_complete_config answers ----

TEST(PythonAutoComplete, AddsTensorsBatchingAndPolicy) {
    osp_model_config *config = nullptr;
    const char text[] = "name: \"m\"\nbackend: \"python\"\n";
    ASSERT_OK(
        osp_model_config_parse(text, sizeof text - 1, "config.pbtxt", &config));
    ASSERT_OK(pycomplete_apply(config, "max_batch_size\t4\n"
                                       "dynamic_batching\n"
                                       "decoupled\t0\n"
                                       "input\tIN\tTYPE_FP32\t0\t3,-1\n"
                                       "input\tOPT\tTYPE_STRING\t1\t\n"
                                       "output\tOUT\tTYPE_INT64\t2\n"));
    EXPECT_EQ(config->max_batch_size, 4);
    EXPECT_TRUE(config->dynamic_batching.enabled);
    EXPECT_FALSE(config->decoupled);
    ASSERT_EQ(config->n_inputs, 2u);
    EXPECT_STREQ(config->inputs[0].name, "IN");
    EXPECT_EQ(config->inputs[0].dtype, OSP_TYPE_FP32);
    EXPECT_EQ(config->inputs[0].dims.rank, 2);
    EXPECT_EQ(config->inputs[0].dims.dims[1], -1);
    EXPECT_TRUE(config->inputs[1].optional);
    EXPECT_EQ(config->inputs[1].dims.rank, 0);
    ASSERT_EQ(config->n_outputs, 1u);
    EXPECT_EQ(config->outputs[0].dtype, OSP_TYPE_INT64);
    osp_model_config_free(config); // frees what was added
}

TEST(PythonAutoComplete, RefusesMalformedLines) {
    for (const char *bad :
         {"max_batch_size\t-1\n", "max_batch_size\tx\n", "frobnicate\n",
          "input\tIN\tTYPE_NOPE\t0\t1\n", "input\tIN\tTYPE_FP32\t0\t-2\n",
          "input\tIN\tTYPE_FP32\t0\t1,,2\n", "output\t\tTYPE_FP32\t1\n",
          "output\tOUT\tTYPE_FP32\n",
          "input\tIN\tTYPE_FP32\t0\t1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1\n"}) {
        osp_model_config *config = nullptr;
        const char text[] = "name: \"m\"\n";
        ASSERT_OK(osp_model_config_parse(text, sizeof text - 1, "config.pbtxt",
                                         &config));
        SCOPED_TRACE(bad);
        EXPECT_ERROR_CODE(pycomplete_apply(config, bad), OSP_ERROR_INVALID_ARG);
        osp_model_config_free(config);
    }
}

// ---- frames ----

struct SocketPair {
    int fd[2] = {-1, -1};
    SocketPair() {
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
    }
    ~SocketPair() {
        for (int f : fd)
            if (f >= 0)
                close(f);
    }
};

TEST(PythonProtocol, FramesOfEverySizeArriveWhole) {
    SocketPair s;
    std::vector<size_t> sizes = {0, 1, 4096, 3u << 20};
    std::thread writer([&] {
        for (size_t n : sizes) {
            std::vector<uint8_t> data(n, uint8_t(n % 251));
            EXPECT_TRUE(pyproto_send(s.fd[0], PYPROTO_EXEC, data.data(), n));
        }
    });
    for (size_t n : sizes) {
        uint32_t type = 0;
        uint8_t *payload = nullptr;
        size_t len = 0;
        ASSERT_EQ(
            pyproto_recv(s.fd[1], 0, PYPROTO_MAX_FRAME, &type, &payload, &len),
            PYPROTO_RECV_OK);
        EXPECT_EQ(type, uint32_t(PYPROTO_EXEC));
        ASSERT_EQ(len, n);
        for (size_t i = 0; i < n; i += 997)
            ASSERT_EQ(payload[i], uint8_t(n % 251));
        free(payload);
    }
    writer.join();
}

TEST(PythonProtocol, RecvReportsDeadlineCloseAndOversizeFrames) {
    uint32_t type;
    uint8_t *payload = nullptr;
    size_t len;
    {
        SocketPair s;
        EXPECT_EQ(pyproto_recv(s.fd[1], osp_now_ns() + 20000000,
                               PYPROTO_MAX_FRAME, &type, &payload, &len),
                  PYPROTO_RECV_TIMEOUT);
        uint32_t huge[2] = {PYPROTO_RESULT, PYPROTO_MAX_FRAME + 1};
        ASSERT_EQ(write(s.fd[0], huge, sizeof huge), ssize_t(sizeof huge));
        EXPECT_EQ(
            pyproto_recv(s.fd[1], 0, PYPROTO_MAX_FRAME, &type, &payload, &len),
            PYPROTO_RECV_INVALID);
    }
    {
        // A stub's own limit: its region's plus the descriptors'.
        SocketPair s;
        size_t max = pyproto_frame_max(64u << 20);
        EXPECT_EQ(max, size_t(80u << 20));
        uint32_t over[2] = {PYPROTO_BLS_CALL, uint32_t(max + 1)};
        ASSERT_EQ(write(s.fd[0], over, sizeof over), ssize_t(sizeof over));
        EXPECT_EQ(pyproto_recv(s.fd[1], 0, max, &type, &payload, &len),
                  PYPROTO_RECV_INVALID);
    }
    // The frame length is a u32: larger regions still cap frames there.
    EXPECT_EQ(pyproto_frame_max(SIZE_MAX), size_t(UINT32_MAX));
    EXPECT_EQ(pyproto_frame_max(0), size_t(PYPROTO_MAX_FRAME));
    SocketPair s;
    uint32_t half[2] = {PYPROTO_OK, 100};
    ASSERT_EQ(write(s.fd[0], half, sizeof half), ssize_t(sizeof half));
    close(s.fd[0]);
    s.fd[0] = -1;
    EXPECT_EQ(
        pyproto_recv(s.fd[1], 0, PYPROTO_MAX_FRAME, &type, &payload, &len),
        PYPROTO_RECV_CLOSED);
    EXPECT_FALSE(pyproto_send(s.fd[1], PYPROTO_EXEC, "x", 1));
}

// ---- stub processes played by /bin/sh ----

// A stub script in a temporary file; the shell runs it as the stub.
struct FakeStub {
    std::string path;
    explicit FakeStub(const std::string &body) {
        char tmpl[] = "/tmp/osprey-fake-stub-XXXXXX";
        int fd = mkstemp(tmpl);
        EXPECT_GE(fd, 0);
        EXPECT_EQ(write(fd, body.data(), body.size()), ssize_t(body.size()));
        close(fd);
        path = tmpl;
    }
    ~FakeStub() {
        unlink(path.c_str());
    }
    osp_error *start(pystub *stub) {
        pystub_options options = {"/bin/sh", path.c_str(), 4096,
                                  4096,      65536,        0};
        snprintf(stub->name, sizeof stub->name, "fake_0_0");
        return pystub_start(stub, &options);
    }
};

TEST(PythonStub, AnswersAfterLogFramesAndSeesTheRegion) {
    // Reads the 8-byte request, logs "hi!", checks fd 4 is the 4 KiB
    // region, then answers OK (type 10, no payload).
    FakeStub fake("head -c 8 <&3 >/dev/null\n"
                  "printf '\\015\\000\\000\\000\\007\\000\\000\\000"
                  "\\000\\000\\000\\000hi!' >&3\n"
                  "[ \"$(wc -c <&4)\" = 4096 ] || exit 1\n"
                  "printf '\\012\\000\\000\\000\\000\\000\\000\\000' >&3\n"
                  "exec sleep 30\n");
    pystub stub = {};
    ASSERT_OK(fake.start(&stub));
    EXPECT_GT(stub.pid, 0);
    uint32_t type = 0;
    uint8_t *reply = nullptr;
    size_t len = 0;
    ASSERT_EQ(pystub_call(&stub, PYPROTO_FINALIZE, nullptr, 0, 0, &type, &reply,
                          &len),
              PYSTUB_ANSWERED);
    EXPECT_EQ(type, uint32_t(PYPROTO_OK));
    EXPECT_EQ(len, 0u);
    free(reply);
    // It answered FINALIZE but does not exit: stop kills it.
    pystub_stop(&stub, 50);
    EXPECT_EQ(stub.pid, 0);
    EXPECT_EQ(stub.control, -1);
}

TEST(PythonStub, AStubThatExitsIsDeadAndNotHealthy) {
    FakeStub fake("exit 3\n");
    pystub stub = {};
    ASSERT_OK(fake.start(&stub));
    uint32_t type;
    uint8_t *reply = nullptr;
    size_t len;
    EXPECT_EQ(pystub_call(&stub, PYPROTO_EXEC, "{}", 2, 0, &type, &reply, &len),
              PYSTUB_DEAD);
    EXPECT_EQ(stub.pid, 0); // reaped
    EXPECT_EQ(TakeMessage(pystub_unhealthy_error(&stub)),
              "Stub process 'fake_0_0' is not healthy.");
    // Calling a dead stub again is safe and says so.
    EXPECT_EQ(pystub_call(&stub, PYPROTO_EXEC, "{}", 2, 0, &type, &reply, &len),
              PYSTUB_DEAD);
    pystub_stop(&stub, 0);
}

TEST(PythonStub, AStubThatHangsIsKilledAtTheDeadline) {
    FakeStub fake("exec sleep 30\n");
    pystub stub = {};
    ASSERT_OK(fake.start(&stub));
    uint32_t type;
    uint8_t *reply = nullptr;
    size_t len;
    EXPECT_EQ(pystub_call(&stub, PYPROTO_EXEC, "{}", 2, osp_now_ns() + 50000000,
                          &type, &reply, &len),
              PYSTUB_TIMED_OUT);
    EXPECT_EQ(stub.pid, 0);
    EXPECT_EQ(stub.control, -1);
}

TEST(PythonStub, AMissingExecutableIsALoadError) {
    pystub stub = {};
    pystub_options options = {
        "/nonexistent/python3", "stub.py", 0, 4096, 4096, 0};
    EXPECT_ERROR_CODE(pystub_start(&stub, &options), OSP_ERROR_UNAVAILABLE);
    EXPECT_EQ(stub.pid, 0);
}

// ---- BLS calls of a decoupled model (python_bls_async.h) ----

// One BLS_ANSWER read from a socket: its call id, final flag and, for an
// error response, the message ("" otherwise).
struct Answer {
    uint64_t id = 0;
    bool final = false;
    std::string error;
};

Answer ReadAnswer(int fd) {
    uint32_t type = 0;
    uint8_t *payload = nullptr;
    size_t len = 0;
    Answer a;
    EXPECT_EQ(pyproto_recv(fd, osp_now_ns() + 5000000000ull, PYPROTO_MAX_FRAME,
                           &type, &payload, &len),
              PYPROTO_RECV_OK);
    EXPECT_EQ(type, uint32_t(PYPROTO_BLS_ANSWER));
    if (!payload || len < 24) {
        free(payload);
        return a;
    }
    uint32_t flags = 0, kind = 0, n = 0;
    memcpy(&a.id, payload, 8);
    memcpy(&flags, payload + 8, 4);
    memcpy(&kind, payload + 20, 4);
    a.final = flags & 1;
    if (kind == 1 && len >= 32) {
        memcpy(&n, payload + 28, 4);
        a.error.assign(reinterpret_cast<char *>(payload) + 32, n);
    }
    free(payload);
    return a;
}

// Whether the outbox's wake fd polls readable (answers wait).
bool Waiting(pybls_outbox *o) {
    struct pollfd p = {pybls_outbox_wake_fd(o), POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

bool Readable(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

TEST(PythonBlsCalls, EveryCallIsAnsweredByItsIdEvenWhenItFails) {
    SocketPair s;
    pystub stub = {};
    stub.control = s.fd[0];
    stub.region.fd = -1;
    pybls_outbox *o = pybls_outbox_new(PYPROTO_MAX_FRAME);
    ASSERT_NE(o, nullptr);
    EXPECT_FALSE(Waiting(o));
    Payload call = ValidBlsCall();
    // No server: the call is answered with an error, final.
    pybls_call_start(o, nullptr, "m_0_0", call.bytes.data(), call.bytes.size());
    // A frame that names its call but does not decode.
    pybls_call_start(o, nullptr, "m_0_0", call.bytes.data(), 20);
    // A frame too short to name a call: logged, never answered.
    pybls_call_start(o, nullptr, "m_0_0", call.bytes.data(), 5);
    ASSERT_TRUE(Waiting(o));
    ASSERT_TRUE(pybls_outbox_flush(o, &stub));
    EXPECT_FALSE(Waiting(o));
    Answer a = ReadAnswer(s.fd[1]);
    EXPECT_EQ(a.id, 42u);
    EXPECT_TRUE(a.final);
    EXPECT_NE(a.error.find("need a server"), std::string::npos) << a.error;
    Answer b = ReadAnswer(s.fd[1]);
    EXPECT_EQ(b.id, 42u);
    EXPECT_TRUE(b.final);
    EXPECT_NE(b.error.find("malformed"), std::string::npos) << b.error;
    EXPECT_FALSE(Readable(s.fd[1])); // nothing for the short frame
    pybls_outbox_close(o);
    pybls_outbox_unref(o);
}

TEST(PythonBlsCalls, AnswersWaitingForAStubThatWentAreDropped) {
    SocketPair s;
    pystub stub = {};
    stub.control = s.fd[0];
    stub.region.fd = -1;
    pybls_outbox *o = pybls_outbox_new(PYPROTO_MAX_FRAME);
    ASSERT_NE(o, nullptr);
    Payload call = ValidBlsCall();
    pybls_call_start(o, nullptr, "m_0_0", call.bytes.data(), call.bytes.size());
    ASSERT_TRUE(Waiting(o));
    pybls_outbox_forget_stub(o);
    EXPECT_FALSE(Waiting(o));
    ASSERT_TRUE(pybls_outbox_flush(o, &stub));
    EXPECT_FALSE(Readable(s.fd[1]));
    // A broken channel is reported.
    pybls_call_start(o, nullptr, "m_0_0", call.bytes.data(), call.bytes.size());
    close(s.fd[1]);
    s.fd[1] = -1;
    EXPECT_FALSE(pybls_outbox_flush(o, &stub));
    pybls_outbox_close(o);
    pybls_outbox_unref(o);
}

// ---- the watcher of an idle channel (python_watch.h) ----

// A stub between requests, played by a socket pair: the test writes what
// the stub would send and reads what the server answers. Its pid is a
// child that only waits, so that killing it harms nothing.
struct IdleStub {
    SocketPair s;
    pystub stub = {};
    pybls_outbox *outbox = nullptr;
    pywatch *watch = nullptr;
    IdleStub() {
        pid_t child = fork();
        if (child == 0) {
            pause();
            _exit(0);
        }
        stub.pid = child;
        stub.control = s.fd[0];
        s.fd[0] = -1; // the stub's now: pystub_kill closes it
        stub.region.fd = -1;
        stub.max_frame = PYPROTO_MAX_FRAME;
        snprintf(stub.name, sizeof stub.name, "idle_0_0");
        outbox = pybls_outbox_new(PYPROTO_MAX_FRAME);
        stub.bls = outbox;
        EXPECT_EQ(pywatch_new(&stub, outbox, &watch), nullptr);
        EXPECT_GE(pywatch_doorbell_fd(watch), 6); // above the stub's fds
    }
    ~IdleStub() {
        pywatch_free(watch);
        pystub_kill(&stub); // reaps the child
        pybls_outbox_close(outbox);
        pybls_outbox_unref(outbox);
    }
    // Sends a frame as the stub does between requests: its header, the
    // doorbell, then the rest.
    void send_rung(uint32_t type, const Payload &p) {
        uint32_t header[2] = {type, uint32_t(p.bytes.size())};
        ASSERT_EQ(write(s.fd[1], header, sizeof header),
                  ssize_t(sizeof header));
        uint64_t one = 1;
        ASSERT_EQ(write(pywatch_doorbell_fd(watch), &one, 8), 8);
        ASSERT_EQ(write(s.fd[1], p.bytes.data(), p.bytes.size()),
                  ssize_t(p.bytes.size()));
    }
    pid_t pid() {
        pywatch_take(watch);
        pid_t pid = stub.pid;
        pywatch_give(watch);
        return pid;
    }
};

TEST(PythonWatch, ServesACallMadeWhileNoRequestRuns) {
    IdleStub idle;
    idle.send_rung(PYPROTO_BLS_CALL, ValidBlsCall());
    Answer a = ReadAnswer(idle.s.fd[1]); // no server: an error, final
    EXPECT_EQ(a.id, 42u);
    EXPECT_TRUE(a.final);
    EXPECT_NE(a.error.find("need a server"), std::string::npos) << a.error;
    // While the worker holds the channel the watcher waits; the call is
    // served once it is given back.
    pywatch_take(idle.watch);
    idle.send_rung(PYPROTO_BLS_CALL, ValidBlsCall());
    pywatch_give(idle.watch);
    EXPECT_EQ(ReadAnswer(idle.s.fd[1]).id, 42u);
}

TEST(PythonWatch, AStubThatGoesBetweenRequestsIsKilled) {
    IdleStub idle;
    Payload nothing;
    idle.send_rung(PYPROTO_RESULT, nothing); // no request waits for one
    uint64_t deadline = osp_now_ns() + 10000000000ull;
    while (idle.pid() != 0 && osp_now_ns() < deadline)
        usleep(1000);
    EXPECT_EQ(idle.pid(), 0);
}

} // namespace
