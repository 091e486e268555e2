// The system shared memory registry (server/kserve/kserve_shm.h) on real
// POSIX shared memory objects: registration checks, status JSON, Triton's
// messages, and the lifetime rule that a region a request uses stays
// mapped (and listed) until the request releases it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

extern "C" {
#include "json_util.h" // a C header without extern "C"
}
#include "kserve_shm.h"
#include "osp_test.h"

namespace {

class ShmRegistryTest : public ::testing::Test {
  protected:
    void SetUp() override {
        key_ = "/osprey_unit_shm_" + std::to_string(getpid());
        int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR, 0600);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(ftruncate(fd, 8192), 0);
        obj_ = static_cast<char *>(
            mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        close(fd);
        ASSERT_NE(obj_, MAP_FAILED);
        ASSERT_OK(kserve_shm_registry_new(&reg_));
    }
    void TearDown() override {
        kserve_shm_registry_free(reg_);
        munmap(obj_, 8192);
        shm_unlink(key_.c_str());
    }
    std::string Status(const char *name = nullptr) {
        bytebuf b;
        bytebuf_init(&b);
        osp_error *err = kserve_shm_status(reg_, KSERVE_SHM_SYSTEM, name, &b);
        std::string s = err ? "error: " + TakeMessage(err)
                            : std::string(b.data ? b.data : "", b.len);
        bytebuf_free(&b);
        return s;
    }
    std::string key_;
    char *obj_ = nullptr;
    kserve_shm_registry *reg_ = nullptr;
};

TEST_F(ShmRegistryTest, RegistersAndListsInNameOrder) {
    ASSERT_OK(kserve_shm_register(reg_, "b", key_.c_str(), 100, 50));
    ASSERT_OK(kserve_shm_register(reg_, "a", key_.c_str(), 0, 8192));
    EXPECT_EQ(Status(), "[{\"name\":\"a\",\"key\":\"" + key_ +
                            "\",\"offset\":0,\"byte_size\":8192},"
                            "{\"name\":\"b\",\"key\":\"" +
                            key_ + "\",\"offset\":100,\"byte_size\":50}]");
    EXPECT_EQ(Status("b"), "[{\"name\":\"b\",\"key\":\"" + key_ +
                               "\",\"offset\":100,\"byte_size\":50}]");
    EXPECT_EQ(Status("c"),
              "error: Unable to find system shared memory region: 'c'");
}

TEST_F(ShmRegistryTest, RegisterErrorsAreTritons) {
    EXPECT_EQ(TakeMessage(kserve_shm_register(reg_, "r", "/osprey_none", 0, 8)),
              "Unable to open shared memory region: '/osprey_none'");
    EXPECT_EQ(
        TakeMessage(kserve_shm_register(reg_, "r", key_.c_str(), 1, 8192)),
        "failed to register shared memory region 'r': invalid args");
    EXPECT_EQ(TakeMessage(
                  kserve_shm_register(reg_, "r", key_.c_str(), UINT64_MAX, 2)),
              "failed to register shared memory region 'r': invalid args");
    EXPECT_EQ(
        TakeMessage(kserve_shm_register(reg_, "r", "//", 0, 8)),
        "cannot register shared memory region 'r' - invalid shm key '//'");
    ASSERT_OK(kserve_shm_register(reg_, "r", key_.c_str(), 0, 8));
    osp_error *err = kserve_shm_register(reg_, "r", key_.c_str(), 0, 8);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_ALREADY_EXISTS);
    EXPECT_EQ(TakeMessage(err), "shared memory region 'r' already in manager");
}

TEST_F(ShmRegistryTest, AcquireSeesTheObjectAtTheRegisteredOffset) {
    ASSERT_OK(kserve_shm_register(reg_, "r", key_.c_str(), 4097, 100));
    kserve_shm_region *region = nullptr;
    void *addr = nullptr;
    ASSERT_OK(kserve_shm_acquire(reg_, "r", 10, 90, &region, &addr));
    std::memcpy(addr, "hello", 5);
    EXPECT_EQ(std::memcmp(obj_ + 4097 + 10, "hello", 5), 0);
    kserve_shm_region_release(region);

    EXPECT_EQ(TakeMessage(kserve_shm_acquire(reg_, "x", 0, 1, &region, &addr)),
              "Unable to find shared memory region: 'x'");
    EXPECT_EQ(
        TakeMessage(kserve_shm_acquire(reg_, "r", 100, 0, &region, &addr)),
        "Invalid offset for shared memory region: 'r'");
    EXPECT_EQ(
        TakeMessage(kserve_shm_acquire(reg_, "r", 10, 91, &region, &addr)),
        "Invalid offset + byte size for shared memory region: 'r'");
    std::string overflow = TakeMessage(
        kserve_shm_acquire(reg_, "r", 10, UINT64_MAX, &region, &addr));
    EXPECT_EQ(overflow.rfind("Integer overflow detected: byte_size (", 0), 0u)
        << overflow;
}

TEST_F(ShmRegistryTest, UnregisterWaitsForTheLastUser) {
    ASSERT_OK(kserve_shm_register(reg_, "r", key_.c_str(), 0, 64));
    kserve_shm_region *r1 = nullptr, *r2 = nullptr;
    void *a1 = nullptr, *a2 = nullptr;
    ASSERT_OK(kserve_shm_acquire(reg_, "r", 0, 64, &r1, &a1));
    ASSERT_OK(kserve_shm_unregister_all(reg_, KSERVE_SHM_SYSTEM));
    // still registered, mapped and usable while a request holds it
    EXPECT_NE(Status("r").find("\"name\":\"r\""), std::string::npos);
    ASSERT_OK(kserve_shm_acquire(reg_, "r", 0, 64, &r2, &a2));
    std::memset(a1, 7, 64);
    kserve_shm_region_release(r1);
    EXPECT_EQ(Status(), "[{\"name\":\"r\",\"key\":\"" + key_ +
                            "\",\"offset\":0,\"byte_size\":64}]");
    EXPECT_EQ(static_cast<char *>(a2)[63], 7);
    kserve_shm_region_release(r2);
    EXPECT_EQ(Status(), "[]");
    // the name is free again
    ASSERT_OK(kserve_shm_register(reg_, "r", key_.c_str(), 0, 64));
    ASSERT_OK(kserve_shm_unregister(reg_, KSERVE_SHM_SYSTEM, "r"));
    ASSERT_OK(kserve_shm_unregister(reg_, KSERVE_SHM_SYSTEM, "unknown"));
    EXPECT_EQ(Status(), "[]");
}

} // namespace
