/*
 * Triton's system shared memory extension without a transport: a registry
 * of named regions of POSIX shared memory objects that clients created,
 * mapped into the server so tensors can be read from and written to them
 * instead of travelling in request and response bodies. Used by the HTTP
 * surface (/v2/systemsharedmemory and the infer codec) and the gRPC one
 * (server/grpc).
 *
 * Thread-safe. A region that an in-flight request uses stays mapped and
 * registered until that request releases it; unregistering it meanwhile
 * only marks it, and the last release unmaps and removes it, as Triton
 * does (its status keeps listing the region until then).
 *
 * Errors carry Triton's messages (shared_memory_manager.cc).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct jbuf;

typedef struct kserve_shm_registry kserve_shm_registry;
/* A registered region, counted while a request uses it. */
typedef struct kserve_shm_region kserve_shm_region;

/* Caller owns *out; free with kserve_shm_registry_free once nothing can
 * use it any more (no request holds a region). */
osp_error *kserve_shm_registry_new(kserve_shm_registry **out);
/* Unmaps every region. NULL is a no-op. */
void kserve_shm_registry_free(kserve_shm_registry *reg);

/* Registers region `name` as byte_size bytes at `offset` of the shared
 * memory object `key` (shm_open name), mapped read-write. Both strings
 * borrowed. Errors: INVALID_ARG for a reserved or all-slash key,
 * ALREADY_EXISTS "shared memory region '<name>' already in manager",
 * INTERNAL "Unable to open shared memory region: '<key>'", INVALID_ARG
 * "failed to register shared memory region '<name>': invalid args" when
 * offset + byte_size passes the object's end. Unlike Triton, which hands
 * the offset to mmap and so fails on one that is not a multiple of the
 * page size, any offset is accepted (the mapping starts at its page). */
osp_error *kserve_shm_register(kserve_shm_registry *reg, const char *name,
                               const char *key, uint64_t offset,
                               uint64_t byte_size);

/* Unregisters `name` (borrowed); an unknown name is not an error. A
 * region in use is removed when its last user releases it. */
osp_error *kserve_shm_unregister(kserve_shm_registry *reg, const char *name);
osp_error *kserve_shm_unregister_all(kserve_shm_registry *reg);

/* Appends the status JSON to out: `[{"name","key","offset","byte_size"}]`
 * of every region (name NULL or "") or of region `name` (borrowed; NOT_FOUND
 * "Unable to find system shared memory region: '<name>'"). */
osp_error *kserve_shm_status(kserve_shm_registry *reg, const char *name,
                             struct jbuf *out);

/* A registered region as its status reports it (strings owned). */
typedef struct kserve_shm_region_info {
    char *name;
    char *key;
    uint64_t offset;
    uint64_t byte_size;
} kserve_shm_region_info;

/* Copies out the status of every region in name order (name NULL or "")
 * or of region `name` (borrowed; NOT_FOUND "Unable to find system shared
 * memory region: '<name>'"). Caller frees *infos with
 * kserve_shm_info_free. */
osp_error *kserve_shm_list(kserve_shm_registry *reg, const char *name,
                           kserve_shm_region_info **infos, size_t *n);
void kserve_shm_info_free(kserve_shm_region_info *infos, size_t n);

/* Takes a use of region `name` (borrowed) for byte_size bytes at `offset`
 * into it and sets *addr to them, with Triton's checks: NOT_FOUND "Unable
 * to find shared memory region: '<name>'", INVALID_ARG "Invalid offset for
 * shared memory region: '<name>'", "Integer overflow detected: ..." and
 * "Invalid offset + byte size for shared memory region: '<name>'". On
 * success the caller owns the use (*region) and gives it back with
 * kserve_shm_region_release; *addr is valid until then. */
osp_error *kserve_shm_acquire(kserve_shm_registry *reg, const char *name,
                              uint64_t offset, uint64_t byte_size,
                              kserve_shm_region **region, void **addr);

/* Gives back a use from kserve_shm_acquire. NULL is a no-op. */
void kserve_shm_region_release(kserve_shm_region *region);

#ifdef __cplusplus
}
#endif
