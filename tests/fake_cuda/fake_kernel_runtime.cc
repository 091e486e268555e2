/*
 * The host side of fake_kernel_runtime.h: launches queued on the fake
 * streams, the grid walked block by block, and __syncthreads() by fibers
 * for the kernels that use it.
 */
#include "fake_kernel_runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <ucontext.h>
#include <vector>

#include "fake_cuda.h"

#if defined(__SANITIZE_ADDRESS__)
#define FAKE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FAKE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FAKE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FAKE_TSAN 1
#endif
#endif
#ifdef FAKE_ASAN
#include <sanitizer/asan_interface.h>
#endif
#ifdef FAKE_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* Fiber switching. On x86-64 a dozen instructions that keep the
 * callee-saved registers on the fiber's own stack (ucontext's swapcontext
 * also saves the signal mask, a system call per switch, which made a
 * softmax test take seconds); elsewhere ucontext. */
#if defined(__x86_64__)
extern "C" void fake_fiber_switch(void **save_sp, void *new_sp);
asm(".text\n"
    ".globl fake_fiber_switch\n"
    ".type fake_fiber_switch,@function\n"
    "fake_fiber_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n"
    "  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n"
    "  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size fake_fiber_switch,.-fake_fiber_switch\n");

struct fiber_context {
    void *sp;
};

/* Makes ctx start entry() on [stack, stack + size) at its first switch. */
static void fiber_context_make(fiber_context *ctx, char *stack, size_t size,
                               void (*entry)(void)) {
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;          /* entry's return address: it never returns */
    *--sp = (void *)entry;    /* where fake_fiber_switch's ret goes */
    for (int i = 0; i < 6; i++) /* rbp rbx r12 r13 r14 r15 */
        *--sp = nullptr;
    ctx->sp = sp;
}

static void fiber_context_switch(fiber_context *from, fiber_context *to) {
    fake_fiber_switch(&from->sp, to->sp);
}
#else
struct fiber_context {
    ucontext_t uc;
};

static void fiber_context_make(fiber_context *ctx, char *stack, size_t size,
                               void (*entry)(void)) {
    getcontext(&ctx->uc);
    ctx->uc.uc_stack.ss_sp = stack;
    ctx->uc.uc_stack.ss_size = size;
    ctx->uc.uc_link = nullptr;
    makecontext(&ctx->uc, entry, 0);
}

static void fiber_context_switch(fiber_context *from, fiber_context *to) {
    swapcontext(&from->uc, &to->uc);
}
#endif

namespace {

constexpr size_t kFiberStack = 256 * 1024;
constexpr unsigned kMaxThreadsPerBlock = 1024;

struct launch {
    const char *kernel;
    dim3 grid, block;
    size_t shmem;
    bool block_sync;
    std::function<void()> body;
};

enum class fiber_state { runnable, at_barrier, done };

struct fiber {
    fake_kernel_thread where;
    fiber_context context;
    fiber_state state;
    char *stack;
#ifdef FAKE_TSAN
    void *tsan_fiber;
#endif
};

/* The block being run by this OS thread (a stream's worker). */
struct block_run {
    const launch *l;
    std::vector<fiber> fibers;
    fiber *running; /* NULL between fibers, and for plain launches */
    fiber_context scheduler;
#ifdef FAKE_TSAN
    void *tsan_scheduler;
#endif
#ifdef FAKE_ASAN
    const void *scheduler_stack; /* the worker's stack, for ASan */
    size_t scheduler_stack_size;
#endif
    std::vector<unsigned char> shared;
};

thread_local const fake_kernel_thread *t_current;
thread_local block_run *t_block;
thread_local bool t_arg_failed;

[[noreturn]] void die(const char *kernel, const char *what) {
    fprintf(stderr, "fake CUDA: kernel %s: %s\n", kernel, what);
    abort();
}

/* Switches from the running fiber (or the scheduler) to `to`, telling the
 * sanitizers whose stack is whose. */
void switch_to_fiber(block_run *b, fiber *f) {
    b->running = f;
    t_current = &f->where;
#ifdef FAKE_ASAN
    void *fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, f->stack, kFiberStack);
#endif
#ifdef FAKE_TSAN
    __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
    fiber_context_switch(&b->scheduler, &f->context);
#ifdef FAKE_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
    b->running = nullptr;
}

void switch_to_scheduler(block_run *b, fiber *f, bool finished) {
#ifdef FAKE_ASAN
    void *fake_stack = nullptr;
    __sanitizer_start_switch_fiber(finished ? nullptr : &fake_stack,
                                   b->scheduler_stack, b->scheduler_stack_size);
#endif
#ifdef FAKE_TSAN
    __tsan_switch_to_fiber(b->tsan_scheduler, 0);
#endif
    fiber_context_switch(&f->context, &b->scheduler);
#ifdef FAKE_ASAN
    if (!finished)
        __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
    (void)finished;
}

void fiber_main(void) {
    block_run *b = t_block;
    fiber *f = b->running;
#ifdef FAKE_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b->scheduler_stack,
                                    &b->scheduler_stack_size);
#endif
    b->l->body();
    f->state = fiber_state::done;
    switch_to_scheduler(b, f, true);
}

/* Runs one block of a block_sync launch: every thread as a fiber, in
 * rounds that end when every live thread waits at the barrier. */
void run_block_fibers(block_run *b) {
    for (fiber &f : b->fibers) {
        f.state = fiber_state::runnable;
        fiber_context_make(&f.context, f.stack, kFiberStack, fiber_main);
    }
    for (;;) {
        size_t waiting = 0, done = 0;
        for (fiber &f : b->fibers) {
            if (f.state == fiber_state::done)
                continue;
            f.state = fiber_state::runnable;
            switch_to_fiber(b, &f);
            if (f.state == fiber_state::at_barrier)
                waiting++;
        }
        for (fiber &f : b->fibers)
            done += f.state == fiber_state::done;
        if (done == b->fibers.size())
            return;
        if (waiting + done == b->fibers.size() && done > 0)
            die(b->l->kernel, "a thread returned while others of its block "
                              "wait at __syncthreads()");
    }
}

/* The stream worker's side of one launch. */
void run_launch(void *ctx) {
    launch *l = *static_cast<launch **>(ctx);
    block_run b;
    b.l = l;
    b.running = nullptr;
    b.shared.resize(l->shmem);
    t_block = &b;
    unsigned threads = l->block.x * l->block.y * l->block.z;
    if (l->block_sync) {
        b.fibers.resize(threads);
        for (fiber &f : b.fibers) {
            f.stack = static_cast<char *>(malloc(kFiberStack));
            if (f.stack == nullptr)
                die(l->kernel, "out of memory for the fibers");
#ifdef FAKE_TSAN
            f.tsan_fiber = __tsan_create_fiber(0);
#endif
        }
#ifdef FAKE_TSAN
        b.tsan_scheduler = __tsan_get_current_fiber();
#endif
    }
    fake_kernel_thread plain;
    for (unsigned bz = 0; bz < l->grid.z; bz++)
        for (unsigned by = 0; by < l->grid.y; by++)
            for (unsigned bx = 0; bx < l->grid.x; bx++) {
                /* uninitialised on a GPU: poison it (NaN, -1) */
                std::fill(b.shared.begin(), b.shared.end(), 0xff);
                unsigned t = 0;
                for (unsigned tz = 0; tz < l->block.z; tz++)
                    for (unsigned ty = 0; ty < l->block.y; ty++)
                        for (unsigned tx = 0; tx < l->block.x; tx++, t++) {
                            fake_kernel_thread w;
                            w.thread_idx = make_uint3(tx, ty, tz);
                            w.block_idx = make_uint3(bx, by, bz);
                            w.block_dim = l->block;
                            w.grid_dim = l->grid;
                            if (l->block_sync) {
                                b.fibers[t].where = w;
                            } else {
                                plain = w;
                                t_current = &plain;
                                l->body();
                            }
                        }
                if (l->block_sync)
                    run_block_fibers(&b);
            }
    for (fiber &f : b.fibers) {
        free(f.stack);
#ifdef FAKE_TSAN
        __tsan_destroy_fiber(f.tsan_fiber);
#endif
    }
    t_current = nullptr;
    t_block = nullptr;
}

/* The launch is freed when dropped (after it ran, or with its graph). */
void drop_launch(void *ctx) {
    delete *static_cast<launch **>(ctx);
    free(ctx);
}

} // namespace

const fake_kernel_thread *fake_kernel_current(void) {
    if (t_current == nullptr) {
        fprintf(stderr, "fake CUDA: threadIdx read outside a kernel\n");
        abort();
    }
    return t_current;
}

void __syncthreads(void) {
    block_run *b = t_block;
    if (b == nullptr || b->running == nullptr)
        die(b != nullptr ? b->l->kernel : "?",
            "__syncthreads() in a kernel not launched with "
            "OSP_LAUNCH_BLOCK_SYNC");
    fiber *f = b->running;
    f->state = fiber_state::at_barrier;
    switch_to_scheduler(b, f, false);
}

void *fake_kernel_dynamic_shared(void) {
    block_run *b = t_block;
    if (b == nullptr)
        die("?", "dynamic shared memory read outside a kernel");
    return b->shared.data();
}

void *fake_kernel_arg_view(cudaStream_t stream, const char *what,
                           const void *ptr, size_t bytes) {
    if (bytes == 0)
        return const_cast<void *>(ptr);
    int gpu = -1;
    void *view = fake_device_view(ptr, bytes, &gpu);
    if (view == nullptr || gpu != fake_stream_device(stream)) {
        fprintf(stderr,
                "fake CUDA: kernel argument %s %p (%zu bytes) is not device "
                "memory of GPU %d\n",
                what, ptr, bytes, fake_stream_device(stream));
        t_arg_failed = true;
        return nullptr;
    }
    return view;
}

cudaError_t fake_kernel_launch(cudaStream_t stream, const char *kernel,
                               dim3 grid, dim3 block, size_t shmem,
                               bool block_sync, std::function<void()> body) {
    fake_enter(kernel);
    bool arg_failed = t_arg_failed;
    t_arg_failed = false;
    cudaError_t st = fake_check_launch(stream);
    if (st != cudaSuccess)
        return st;
    if (arg_failed)
        return fake_status(cudaErrorInvalidValue);
    unsigned long long threads =
        (unsigned long long)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 ||
        threads > kMaxThreadsPerBlock || grid.y > 65535 || grid.z > 65535)
        return fake_status(cudaErrorInvalidConfiguration);
    launch *l = new (std::nothrow)
        launch{kernel, grid, block, shmem, block_sync, std::move(body)};
    launch **ctx = static_cast<launch **>(malloc(sizeof *ctx));
    if (l == nullptr || ctx == nullptr) {
        delete l;
        free(ctx);
        return fake_status(cudaErrorMemoryAllocation);
    }
    *ctx = l;
    return fake_stream_enqueue_owned(stream, run_launch, drop_launch, ctx);
}
