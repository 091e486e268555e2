/*
 * A stand-in for the CUDA runtime and cuBLAS, so that the host code of the
 * CUDA device (the .c files of cuda/) runs, and is tested, on machines without
 * a GPU.
 *
 * The kernels are the real ones: the kernel files of cuda/ are compiled
 * for the host and run here thread by thread (fake_kernel_runtime.h), so
 * their math and indexing are tested without a GPU; what the host cannot
 * show (races within a block, performance) is left to the gpu-labelled
 * tests and tests/gpu/check.sh. The host side is checked strictly where
 * the real runtime would corrupt memory silently or only fail on a GPU:
 *
 * - Device memory is mapped twice: the address handed out is PROT_NONE, so
 *   host code that touches device memory directly crashes; the fake works on
 *   a second, writable mapping of the same pages, and each pointer a kernel
 *   is given must lie inside one allocation of the stream's GPU.
 * - Each stream has its own worker thread that runs its operations in order,
 *   after a short random delay, so host code that reads results without
 *   waiting for the stream sees stale data.
 * - Copies must match their kind (host vs device pointers) and stay inside
 *   one allocation; kernels and cuBLAS calls must run with the stream's GPU
 *   current; cuBLAS arguments are checked as cuBLAS checks them.
 * - Calling any CUDA function from a host function (cudaLaunchHostFunc)
 *   is forbidden by CUDA and aborts the test here.
 * - Pageable copies follow CUDA's rules: H2D copies the source before
 *   returning, D2H returns when the data has arrived.
 * - Stream capture (cudaStreamBeginCapture ... cudaStreamEndCapture,
 *   cudaGraphInstantiate, cudaGraphLaunch): while a stream captures, what
 *   is queued on it (kernels, copies, cuBLAS calls, host functions) is
 *   recorded instead of run, and a graph launch replays the recording in
 *   order on its stream. What CUDA refuses during a capture fails here
 *   too and invalidates it (synchronising, allocating, freeing, event
 *   queries on the capturing thread; copies involving pageable memory);
 *   so does cudaEventRecord on a capturing stream, which the fake does
 *   not capture. A launch whose captured device ranges were freed since
 *   the capture fails instead of writing into freed memory.
 *
 * - IPC handles (fake_ipc.c) name either an allocation of a process that
 *   uses the fake (cudaIpcGetMemHandle: this process, or another one such
 *   as a python stub that loaded the fake as a shared library,
 *   libosprey_fake_cudart.so) or a POSIX shared memory object that a test
 *   made; cudaIpcOpenMemHandle maps either as device memory of the current
 *   GPU: a test writes inputs into the object and reads outputs from it,
 *   and the server's copies to and from that "GPU memory" are checked like
 *   any other. Handles still open at exit are reported on stderr.
 *
 * Settings, read once from the environment: FAKE_CUDA_DEVICES (default 2,
 * so that every test also covers more than one GPU),
 * FAKE_CUDA_MEMORY_MIB per device (default 4096), FAKE_CUDA_NO_PINNED (set:
 * cudaHostAlloc fails, as when the host cannot pin memory),
 * FAKE_CUDA_COPY_LOG (a file path: each copy cudaMemcpyAsync accepts
 * appends a line "<H2D|D2H|D2D|H2H> <bytes>" to it, written out at once,
 * so that a test can tell which copies the server made, e.g. that some
 * tensor never passes through the host).
 */
#pragma once

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One queued operation: run(ctx) on the stream's worker (see
 * fake_stream_enqueue for when ctx is freed). */
typedef void (*fake_op_fn)(void *ctx);

/* Runs at the top of every fake entry point: aborts when called from a
 * host function, initialises the fake on first use. */
void fake_enter(const char *function);

/* Records status as the calling thread's last error (unless success) and
 * returns it. */
cudaError_t fake_status(cudaError_t status);

/* The writable view of device range [ptr, ptr + bytes), or NULL when the
 * range is not inside one live allocation. *device gets the owning GPU. */
void *fake_device_view(const void *ptr, size_t bytes, int *device);

/* The GPU of stream (0 for the legacy default stream). */
int fake_stream_device(cudaStream_t stream);

/* The calling thread's current GPU. */
int fake_current_device(void);

/* Queues run(ctx) on stream. ctx (malloc'd; ownership moves, also on
 * error) is freed when the op is dropped: after it ran, or, when the
 * stream was capturing, when the graph holding it is destroyed, after
 * any number of replays. So run must leave ctx as it found it: what ctx
 * owns is freed by drop (fake_stream_enqueue_owned), never by run. */
cudaError_t fake_stream_enqueue(cudaStream_t stream, fake_op_fn run, void *ctx);
/* The same, with drop(ctx) instead of free(ctx) to free ctx and what it
 * owns (drop NULL: free). */
cudaError_t fake_stream_enqueue_owned(cudaStream_t stream, fake_op_fn run,
                                      fake_op_fn drop, void *ctx);

/* Whether stream is capturing (cudaStreamBeginCapture). */
bool fake_stream_capturing(cudaStream_t stream);

/* cudaSuccess when stream may take a kernel or cuBLAS call from the calling
 * thread: it is live and its GPU is current. */
cudaError_t fake_check_launch(cudaStream_t stream);

/* cuBLAS (and cuBLASLt) calls that computed something, since the
 * process started, by the precision they multiplied in: for tests that
 * check which route an op took. A call counts once whatever its batch;
 * a graph's replays do not count again. */
typedef struct fake_cublas_counts {
    unsigned long fp32;       /* FP32 operands, FP32 math */
    unsigned long tf32;       /* FP32 operands rounded to TF32 */
    unsigned long fp16;       /* FP16 operands, FP16 C */
    unsigned long fp16_fp32c; /* FP16 operands, FP32 C */
} fake_cublas_counts;
void fake_cublas_counts_get(fake_cublas_counts *out);

/* The fake IPC handle (64 bytes, cudaIpcMemHandle_t):
 *   bytes 0..15  FAKE_IPC_MAGIC, NUL-padded
 *   byte  16     FAKE_IPC_LOCAL (what cudaIpcGetMemHandle makes): bytes
 *                24..31 hold the address of the allocation in the
 *                exporting process, 32..35 that process's pid (u32; 0 in
 *                handles of older tests: this process), 36..39 the fd of
 *                the memfd behind it there (i32), 40..47 its size (u64),
 *                48..55 its id (u64: a freed and reused address makes
 *                another handle). Another process maps the memfd through
 *                /proc/<pid>/fd/<fd>, as CUDA maps another process's memory.
 *                FAKE_IPC_SHM: bytes 24..63 hold the NUL-terminated
 *                name of a POSIX shared memory object (shm_open) whose
 *                whole size is the allocation. */
#define FAKE_IPC_MAGIC "osprey-fake-ipc"
#define FAKE_IPC_LOCAL 1
#define FAKE_IPC_SHM 2

/* The first byte of the allocation holding ptr (and its size), or NULL. */
void *fake_allocation_base(const void *ptr, size_t *size);

/* What another process needs to map an allocation of this one. */
typedef struct fake_export {
    void *base;
    size_t size;
    int fd; /* the memfd; stays this process's (closed by cudaFree) */
    uint64_t id;
} fake_export;
/* Fills *out for the allocation (not an imported one) holding ptr; false
 * when there is none. */
bool fake_allocation_export(const void *ptr, fake_export *out);
/* Maps size bytes of fd as device memory of gpu (the fake's usual two
 * mappings; fd may be closed afterwards). */
cudaError_t fake_allocation_import(int fd, size_t size, int gpu, void **ptr);
/* Unmaps what fake_allocation_import mapped at ptr. */
cudaError_t fake_allocation_unimport(void *ptr);

#ifdef __cplusplus
}
#endif
