/*
 * The CPU device's intra-op threads: one process-wide pool of worker
 * threads that every CPU stream shares, and the thread count each stream
 * may use (osp_stream_set_threads).
 *
 * cpu_parallel_for runs tasks 0 .. n-1 on the calling thread and on as
 * many idle workers as the caller's cap allows. Workers are taken, never
 * waited for: when another call holds them all, the caller runs every task
 * itself. So the pool bounds the host threads all streams use together
 * (workers + callers), several streams can run ops at once without
 * oversubscribing the machine, and a call never blocks on another. A
 * task may itself call cpu_parallel_for.
 *
 * Workers are created on first need, up to one less than the CPUs the
 * process may run on (or than the default thread count, if that is
 * larger; CPU_THREADS_MAX - 1 at most), spin a little after each job so
 * that back-to-back ops find them awake, then sleep; they are joined at
 * process exit. A child of fork starts with none.
 */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads one call may use at most (the caller and 63 workers). */
#define CPU_THREADS_MAX 64

/* One task of a parallel_for: task is in [0, n_tasks). */
typedef void (*cpu_task_fn)(void *ctx, int64_t task);

/* Runs fn(ctx, t) once for every t in [0, n_tasks), on the calling thread
 * and up to max_threads - 1 idle workers, and returns when all have
 * finished (their writes are then visible to the caller). Tasks run in no
 * particular order and may run concurrently. Allocates nothing; safe to
 * call from several threads at once and from inside a task. n_tasks <= 0
 * does nothing; max_threads <= 1 runs everything on the caller. ctx is
 * borrowed for the call. */
void cpu_parallel_for(int64_t n_tasks, cpu_task_fn fn, void *ctx,
                      int max_threads);

/* Work below which a task is not worth handing to another thread, in
 * units of an element a memory-bound op reads and writes once: 256K of
 * them (a megabyte or more of data) before a split. Data that fit in one
 * core's caches gain nothing from a second core, whose share would first
 * have to move over; only math-heavy elements (CPU_WORK_MATH units each)
 * split that small. */
#define CPU_GRAIN ((int64_t)1 << 18)
/* The work of an element of transcendental math (exp, erf, tanh, pow):
 * some tens of instructions. */
#define CPU_WORK_MATH 16

/* One range [lo, hi) of cpu_parallel_range's items. */
typedef void (*cpu_range_fn)(void *ctx, int64_t lo, int64_t hi);

/* Runs fn over the items [0, n) cut into contiguous ranges, at most
 * `threads` of them and each of at least CPU_GRAIN work where an item is
 * `item_work` work (>= 1): fn(ctx, 0, n) on the caller when one range
 * will do. ctx borrowed. */
void cpu_parallel_range(int64_t n, int64_t item_work, int threads,
                        cpu_range_fn fn, void *ctx);

/* The thread count of a stream whose count is 0 (the device's default):
 * OSPREY_CPU_THREADS when set to a positive number, else
 * OPENBLAS_NUM_THREADS when set (what bounded the CPU's GEMM before the
 * pool existed), else the CPUs this process may run on. Read once. */
int cpu_threads_default(void);

/* The threads ops on `stream` (a CPU stream's impl, borrowed; NULL for a
 * caller without a stream) may use: its osp_stream_set_threads count, or
 * the default. At least 1. Defined in cpu_device.c. */
int cpu_stream_threads(const void *stream);

/* How many parts to split `work` units into so that each part has at
 * least `grain` units, with at most `threads` parts (at least 1). */
static inline int cpu_split_parts(int64_t work, int64_t grain, int threads) {
    int64_t parts = grain > 0 ? work / grain : work;
    if (parts > threads)
        parts = threads;
    return parts < 1 ? 1 : (int)parts;
}

/* Part `part` of [0, n) cut into `parts` nearly equal ranges whose bounds
 * are multiples of `align` (but the last, which ends at n): [*lo, *hi),
 * possibly empty. */
static inline void cpu_split_range(int64_t n, int64_t parts, int64_t part,
                                   int64_t align, int64_t *lo, int64_t *hi) {
    int64_t units = (n + align - 1) / align;
    int64_t l = units * part / parts * align, h = units * (part + 1) / parts;
    h *= align;
    *lo = l < n ? l : n;
    *hi = h < n ? h : n;
}

#ifdef __cplusplus
}
#endif
