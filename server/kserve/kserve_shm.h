/*
 * Triton's shared memory extensions without a transport: a registry of
 * named regions that clients created, mapped into the server so tensors
 * can be read from and written to them instead of travelling in request
 * and response bodies. A region is either system shared memory (a POSIX
 * shared memory object) or CUDA shared memory (a GPU allocation another
 * process exported as a CUDA IPC handle, opened through the device layer).
 * As in Triton, both kinds share one name space. Used by the HTTP surface
 * (/v2/systemsharedmemory, /v2/cudasharedmemory and the infer codec) and
 * the gRPC one (server/grpc).
 *
 * Thread-safe. A region that an in-flight request uses stays mapped and
 * registered until that request releases it; unregistering it meanwhile
 * only marks it, and the last release unmaps and removes it, as Triton
 * does (its status keeps listing the region until then).
 *
 * Errors carry Triton's messages (shared_memory_manager.cc).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bytebuf;
struct osp_device;

typedef enum kserve_shm_kind {
    KSERVE_SHM_SYSTEM = 0,
    KSERVE_SHM_CUDA,
} kserve_shm_kind;

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

/* True when some GPU of this process can open CUDA IPC handles, so that
 * kserve_shm_register_cuda can succeed. */
bool kserve_shm_cuda_supported(void);

/* Registers region `name` (borrowed) as the byte_size bytes of GPU memory
 * that another process exported as the CUDA IPC handle `handle`
 * (handle_len bytes, borrowed), opened on GPU device_id. Errors, as
 * Triton's: ALREADY_EXISTS "shared memory region '<name>' already in
 * manager"; INVALID_ARG "failed to register shared memory region: invalid
 * args" when the handle does not open on that GPU (the reason is logged),
 * and "failed to register shared memory region '<name>': invalid args"
 * when byte_size passes the end of the exported allocation. */
osp_error *kserve_shm_register_cuda(kserve_shm_registry *reg, const char *name,
                                    const void *handle, size_t handle_len,
                                    uint64_t device_id, uint64_t byte_size);

/* Unregisters region `name` (borrowed) of `kind`; an unknown name, or one
 * of the other kind, is not an error. A region in use is removed when its
 * last user releases it. A CUDA handle that fails to close: INTERNAL
 * "failed to close CUDA IPC handle: <CUDA's reason>", and the region stays. */
osp_error *kserve_shm_unregister(kserve_shm_registry *reg, kserve_shm_kind kind,
                                 const char *name);
/* Every region of `kind`; INTERNAL "Failed to unregister the following
 * <system|cuda> shared memory regions: <name> ,..." for those that stay. */
osp_error *kserve_shm_unregister_all(kserve_shm_registry *reg,
                                     kserve_shm_kind kind);

/* Appends the status JSON of the regions of `kind` to out:
 * `[{"name","key","offset","byte_size"}]` for system shared memory,
 * `[{"name","device_id","byte_size"}]` for CUDA; every region (name NULL or
 * "") or region `name` (borrowed). NOT_FOUND "Unable to find <system|cuda>
 * shared memory region: '<name>'", or "The region named '<name>' is
 * registered as <CUDA|system> shared memory, not <system|CUDA> shared
 * memory". */
osp_error *kserve_shm_status(kserve_shm_registry *reg, kserve_shm_kind kind,
                             const char *name, struct bytebuf *out);

/* A registered region as its status reports it (strings owned). */
typedef struct kserve_shm_region_info {
    kserve_shm_kind kind;
    char *name;
    char *key; /* system shared memory only (NULL for CUDA) */
    uint64_t offset;
    uint64_t byte_size;
    uint64_t device_id; /* CUDA only */
} kserve_shm_region_info;

/* Copies out the status of every region of `kind` in name order (name NULL
 * or "") or of region `name` (borrowed), with kserve_shm_status's errors.
 * Caller frees *infos with kserve_shm_info_free. */
osp_error *kserve_shm_list(kserve_shm_registry *reg, kserve_shm_kind kind,
                           const char *name, kserve_shm_region_info **infos,
                           size_t *n);
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

/* Copies n bytes at addr (from kserve_shm_acquire of region) to host
 * memory dst: a memcpy for system shared memory, a device-to-host copy
 * for CUDA shared memory. */
osp_error *kserve_shm_read(const kserve_shm_region *region, const void *addr,
                           void *dst, size_t n);
/* Copies n bytes of host memory src to addr in region (the reverse). */
osp_error *kserve_shm_write(const kserve_shm_region *region, void *addr,
                            const void *src, size_t n);

/* Gives back a use from kserve_shm_acquire. NULL is a no-op. */
void kserve_shm_region_release(kserve_shm_region *region);

#ifdef __cplusplus
}
#endif
