/*
 * The CUDA runtime calls of the .c files of cuda/, faked on the CPU (see
 * fake_cuda.h for what is checked). Only what Osprey calls is here; anything
 * else is a link error, on purpose.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

/* ---- state --------------------------------------------------------------- */

typedef struct allocation {
    char *device; /* PROT_NONE: what callers get */
    char *view;   /* the same pages, writable: what the fake uses */
    size_t size, mapped;
    int gpu;
    bool imported; /* mapped from another process's memory (fake_ipc.c) */
    int fd;        /* the memfd behind both mappings, kept open so that
                      another process can map it (fake_ipc.c); -1 when
                      imported */
    uint64_t id;   /* unique for the process's life: a freed and reused
                      address is another allocation */
    struct allocation *next;
} allocation;

typedef struct host_block { /* cudaHostAlloc'd (pinned) memory */
    char *ptr;
    size_t size;
    struct host_block *next;
} host_block;

typedef struct op {
    fake_op_fn run;
    fake_op_fn drop; /* frees ctx and what it owns; NULL: free(ctx) */
    void *ctx;
    struct op *next;
} op;

/* A device range a captured operation touches, and the allocation it lay
 * in when captured. */
typedef struct captured_range {
    const char *ptr;
    size_t bytes;
    uint64_t allocation_id;
} captured_range;

/* What a stream capture recorded: its operations, in order, and the device
 * ranges they touch. Shared by the capture, the cudaGraph_t made from it
 * and every cudaGraphExec_t instantiated from that; refs under g_lock. */
typedef struct recording {
    int refs;
    int gpu;
    bool invalidated; /* a call the capture refuses was made */
    op *head, *tail;
    captured_range *ranges;
    size_t n_ranges, cap_ranges;
} recording;

struct CUgraph_st {
    recording *rec;
};

struct CUgraphExec_st {
    recording *rec;
};

struct CUstream_st {
    int gpu;
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    op *head, *tail; /* an op stays at head while it runs */
    bool stopping;
    uint64_t rng;
    recording *capture; /* while capturing: where operations go instead */
    pthread_t capture_thread;
    struct CUstream_st *next;
};

struct CUevent_st {
    int gpu;
    bool timing;
    uint64_t recorded, done; /* cudaEventRecord calls issued / completed */
    uint64_t time_ns;
    int refs; /* the handle + each pending record */
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_devices;
static bool g_no_pinned; /* cudaHostAlloc always fails */
static size_t g_memory_limit;
/* g_lock guards the lists below and g_used. Waits for streams happen under
 * g_streams_rw (read), never under g_lock; destroying a stream takes it for
 * writing, so a stream being waited for stays alive. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t g_streams_rw = PTHREAD_RWLOCK_INITIALIZER;
static allocation *g_allocations;
static host_block *g_host_blocks;
static struct CUstream_st *g_streams;
static size_t *g_used;
static pthread_mutex_t g_event_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_event_cond = PTHREAD_COND_INITIALIZER;

static _Thread_local int t_device;
static _Thread_local cudaError_t t_last_error;
static _Thread_local bool t_in_host_func;
/* The capture this thread began (cudaStreamCaptureModeThreadLocal: the
 * calls CUDA calls unsafe during a capture are refused on this thread). */
static _Thread_local recording *t_capture;
static uint64_t g_next_allocation_id = 1; /* under g_lock */
/* FAKE_CUDA_COPY_LOG: where accepted copies are logged (copy_log_note),
 * or NULL; written under g_copy_log_lock. */
static FILE *g_copy_log;
static pthread_mutex_t g_copy_log_lock = PTHREAD_MUTEX_INITIALIZER;

static void init_once(void) {
    const char *devices = getenv("FAKE_CUDA_DEVICES");
    const char *mib = getenv("FAKE_CUDA_MEMORY_MIB");
    g_devices = devices != NULL ? atoi(devices) : 2;
    g_no_pinned = getenv("FAKE_CUDA_NO_PINNED") != NULL;
    g_memory_limit = (size_t)(mib != NULL ? atol(mib) : 4096) << 20;
    g_used = calloc(g_devices > 0 ? (size_t)g_devices : 1, sizeof *g_used);
    const char *copy_log = getenv("FAKE_CUDA_COPY_LOG");
    if (copy_log != NULL && (g_copy_log = fopen(copy_log, "a")) == NULL)
        fprintf(stderr, "fake CUDA: cannot open FAKE_CUDA_COPY_LOG %s\n",
                copy_log);
}

/* Appends "<kind> <bytes>" for an accepted copy to FAKE_CUDA_COPY_LOG,
 * flushed at once (a test reads it while the process runs). */
static void copy_log_note(enum cudaMemcpyKind kind, size_t n) {
    if (g_copy_log == NULL)
        return;
    const char *name = kind == cudaMemcpyHostToDevice     ? "H2D"
                       : kind == cudaMemcpyDeviceToHost   ? "D2H"
                       : kind == cudaMemcpyDeviceToDevice ? "D2D"
                                                          : "H2H";
    pthread_mutex_lock(&g_copy_log_lock);
    fprintf(g_copy_log, "%s %zu\n", name, n);
    fflush(g_copy_log);
    pthread_mutex_unlock(&g_copy_log_lock);
}

void fake_enter(const char *function) {
    if (t_in_host_func) {
        fprintf(stderr,
                "fake CUDA: %s called from a host function "
                "(cudaLaunchHostFunc); CUDA forbids this\n",
                function);
        abort();
    }
    pthread_once(&g_once, init_once);
}

cudaError_t fake_status(cudaError_t status) {
    if (status != cudaSuccess)
        t_last_error = status;
    return status;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- lookups (callers hold g_lock) -------------------------------------- */

static allocation *allocation_of(const void *ptr, size_t bytes) {
    const char *p = ptr;
    for (allocation *a = g_allocations; a != NULL; a = a->next)
        if (p >= a->device && p < a->device + a->size)
            return bytes <= (size_t)(a->device + a->size - p) ? a : NULL;
    return NULL;
}

static bool is_device(const void *ptr) {
    return allocation_of(ptr, 0) != NULL;
}

static bool is_pinned(const void *ptr, size_t bytes) {
    const char *p = ptr;
    for (host_block *b = g_host_blocks; b != NULL; b = b->next)
        if (p >= b->ptr && p < b->ptr + b->size)
            return bytes <= (size_t)(b->ptr + b->size - p);
    return false;
}

static bool stream_is_live(cudaStream_t s) {
    for (struct CUstream_st *it = g_streams; it != NULL; it = it->next)
        if (it == s)
            return true;
    return false;
}

/* Notes, while this thread captures, that the operation being captured
 * touches [ptr, ptr + bytes) of allocation a (g_lock held). */
static void capture_note_range(const allocation *a, const void *ptr,
                               size_t bytes) {
    recording *r = t_capture;
    if (r == NULL || a == NULL)
        return;
    if (r->n_ranges == r->cap_ranges) {
        size_t cap = r->cap_ranges ? r->cap_ranges * 2 : 16;
        captured_range *grown = realloc(r->ranges, cap * sizeof *grown);
        if (grown == NULL) {
            r->invalidated = true;
            return;
        }
        r->ranges = grown;
        r->cap_ranges = cap;
    }
    r->ranges[r->n_ranges++] =
        (captured_range){.ptr = ptr, .bytes = bytes, .allocation_id = a->id};
}

void *fake_device_view(const void *ptr, size_t bytes, int *device) {
    pthread_mutex_lock(&g_lock);
    allocation *a = allocation_of(ptr, bytes);
    void *view = a != NULL ? a->view + ((const char *)ptr - a->device) : NULL;
    if (a != NULL && device != NULL)
        *device = a->gpu;
    capture_note_range(a, ptr, bytes);
    pthread_mutex_unlock(&g_lock);
    return view;
}

int fake_current_device(void) {
    return t_device;
}

/* ---- devices ------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
    fake_enter(__func__);
    *count = g_devices > 0 ? g_devices : 0;
    return g_devices > 0 ? cudaSuccess : fake_status(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    fake_enter(__func__);
    if (device < 0 || device >= g_devices)
        return fake_status(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    fake_enter(__func__);
    *device = t_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    fake_enter(__func__);
    if (device < 0 || device >= g_devices)
        return fake_status(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "Fake CUDA GPU %d", device);
    prop->totalGlobalMem = g_memory_limit;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 4;
    prop->warpSize = 32;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    fake_enter(__func__);
    pthread_mutex_lock(&g_lock);
    *free_bytes = g_memory_limit - g_used[t_device];
    *total_bytes = g_memory_limit;
    pthread_mutex_unlock(&g_lock);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) {
    return t_last_error;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorMapBufferObjectFailed:
        return "cudaErrorMapBufferObjectFailed";
    case cudaErrorIllegalState:
        return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
        return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
        return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread:
        return "cudaErrorStreamCaptureWrongThread";
    default:
        return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorMapBufferObjectFailed:
        return "mapping of buffer object failed";
    case cudaErrorIllegalState:
        return "the resource is not in a valid state";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from "
               "another thread";
    default:
        return "unknown error";
    }
}

/* ---- streams ------------------------------------------------------------- */

/* Sleeps 0-200 us before one op in four, so that host code that does not
 * wait for a stream reads before the stream wrote. */
static void jitter(struct CUstream_st *s) {
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    if ((s->rng & 3) == 0) {
        struct timespec ts = {0, (long)((s->rng >> 8) % 200000)};
        nanosleep(&ts, NULL);
    }
}

static void op_drop(op *o) {
    if (o->drop != NULL)
        o->drop(o->ctx);
    else
        free(o->ctx);
    free(o);
}

static void *stream_worker(void *arg) {
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stopping)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->head == NULL)
            break;
        op *o = s->head;
        pthread_mutex_unlock(&s->lock);
        jitter(s);
        o->run(o->ctx);
        pthread_mutex_lock(&s->lock);
        s->head = o->next;
        if (s->head == NULL)
            s->tail = NULL;
        op_drop(o);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Blocks until s has run everything queued so far. */
static void stream_drain(struct CUstream_st *s) {
    pthread_mutex_lock(&s->lock);
    while (s->head != NULL)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

cudaError_t fake_stream_enqueue_owned(cudaStream_t stream, fake_op_fn run,
                                      fake_op_fn drop, void *ctx) {
    op *o = malloc(sizeof *o);
    if (o == NULL) {
        if (drop != NULL)
            drop(ctx);
        else
            free(ctx);
        return fake_status(cudaErrorMemoryAllocation);
    }
    *o = (op){.run = run, .drop = drop, .ctx = ctx};
    pthread_mutex_lock(&stream->lock);
    if (stream->capture != NULL) { /* recorded, not run */
        recording *r = stream->capture;
        if (r->tail != NULL)
            r->tail->next = o;
        else
            r->head = o;
        r->tail = o;
        pthread_mutex_unlock(&stream->lock);
        return cudaSuccess;
    }
    if (stream->tail != NULL)
        stream->tail->next = o;
    else
        stream->head = o;
    stream->tail = o;
    pthread_cond_broadcast(&stream->cond);
    pthread_mutex_unlock(&stream->lock);
    return cudaSuccess;
}

cudaError_t fake_stream_enqueue(cudaStream_t stream, fake_op_fn run,
                                void *ctx) {
    return fake_stream_enqueue_owned(stream, run, NULL, ctx);
}

bool fake_stream_capturing(cudaStream_t stream) {
    pthread_mutex_lock(&stream->lock);
    bool capturing = stream->capture != NULL;
    pthread_mutex_unlock(&stream->lock);
    return capturing;
}

/* For calls CUDA refuses while this thread captures (synchronisation,
 * allocation, event queries: "unsafe" in cudaStreamCaptureModeThreadLocal):
 * cudaSuccess when the thread is not capturing; otherwise the capture is
 * invalidated, as CUDA does, and the call fails. */
static cudaError_t capture_refuse(const char *what) {
    if (t_capture == NULL)
        return cudaSuccess;
    fprintf(stderr, "fake CUDA: %s while the thread captures a stream\n", what);
    t_capture->invalidated = true;
    return fake_status(cudaErrorStreamCaptureUnsupported);
}

/* Like capture_refuse, for an operation on `stream` that cannot be
 * captured: refused when that stream captures (from any thread). */
static cudaError_t capture_refuse_on(cudaStream_t stream, const char *what) {
    pthread_mutex_lock(&stream->lock);
    recording *r = stream->capture;
    if (r != NULL)
        r->invalidated = true;
    pthread_mutex_unlock(&stream->lock);
    if (r == NULL)
        return capture_refuse(what);
    fprintf(stderr, "fake CUDA: %s on a capturing stream\n", what);
    return fake_status(cudaErrorStreamCaptureUnsupported);
}

/* cudaSuccess when s is a live stream. Osprey never uses the legacy
 * default stream (NULL), so the fake refuses it. */
static cudaError_t check_stream(cudaStream_t s) {
    pthread_mutex_lock(&g_lock);
    bool live = s != NULL && stream_is_live(s);
    pthread_mutex_unlock(&g_lock);
    if (!live)
        fprintf(stderr, "fake CUDA: stream %p is not a live stream\n",
                (void *)s);
    return live ? cudaSuccess : fake_status(cudaErrorInvalidResourceHandle);
}

int fake_stream_device(cudaStream_t stream) {
    return stream->gpu;
}

cudaError_t fake_check_launch(cudaStream_t stream) {
    cudaError_t st = check_stream(stream);
    if (st != cudaSuccess)
        return st;
    if (stream->gpu != t_device) {
        fprintf(stderr,
                "fake CUDA: launch on a stream of GPU %d while GPU %d is "
                "current\n",
                stream->gpu, t_device);
        return fake_status(cudaErrorInvalidResourceHandle);
    }
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream,
                                      unsigned int flags) {
    (void)flags;
    fake_enter(__func__);
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (s == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    s->gpu = t_device;
    s->rng = now_ns() | 1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->worker, NULL, stream_worker, s) != 0) {
        free(s);
        return fake_status(cudaErrorMemoryAllocation);
    }
    pthread_mutex_lock(&g_lock);
    s->next = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_lock);
    *stream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    return cudaStreamCreateWithFlags(stream, 0);
}

/* Unlike CUDA, waits for the stream's work (CUDA returns at once and
 * finishes it in the background); Osprey synchronises first anyway. */
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    fake_enter(__func__);
    pthread_rwlock_wrlock(&g_streams_rw);
    pthread_mutex_lock(&g_lock);
    bool live = stream != NULL && stream_is_live(stream);
    for (struct CUstream_st **it = &g_streams; live && *it != NULL;
         it = &(*it)->next)
        if (*it == stream) {
            *it = stream->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    if (!live) {
        pthread_rwlock_unlock(&g_streams_rw);
        return fake_status(cudaErrorInvalidResourceHandle);
    }
    pthread_mutex_lock(&stream->lock);
    if (stream->capture != NULL) {
        fprintf(stderr, "fake CUDA: cudaStreamDestroy of a capturing "
                        "stream\n");
        abort();
    }
    stream->stopping = true;
    pthread_cond_broadcast(&stream->cond);
    pthread_mutex_unlock(&stream->lock);
    pthread_join(stream->worker, NULL);
    pthread_rwlock_unlock(&g_streams_rw);
    pthread_cond_destroy(&stream->cond);
    pthread_mutex_destroy(&stream->lock);
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    fake_enter(__func__);
    pthread_rwlock_rdlock(&g_streams_rw);
    cudaError_t st = check_stream(stream);
    if (st == cudaSuccess)
        st = capture_refuse_on(stream, "cudaStreamSynchronize");
    if (st == cudaSuccess)
        stream_drain(stream);
    pthread_rwlock_unlock(&g_streams_rw);
    return st;
}

/* Waits for every stream of `gpu` (-1: all GPUs). */
static void drain_device(int gpu) {
    pthread_rwlock_rdlock(&g_streams_rw);
    pthread_mutex_lock(&g_lock);
    size_t n = 0;
    for (struct CUstream_st *s = g_streams; s != NULL; s = s->next)
        n++;
    struct CUstream_st **list = calloc(n ? n : 1, sizeof *list);
    n = 0;
    for (struct CUstream_st *s = g_streams; list != NULL && s != NULL;
         s = s->next)
        if (gpu < 0 || s->gpu == gpu)
            list[n++] = s;
    pthread_mutex_unlock(&g_lock);
    for (size_t i = 0; i < n; i++)
        stream_drain(list[i]);
    free(list);
    pthread_rwlock_unlock(&g_streams_rw);
}

cudaError_t cudaDeviceSynchronize(void) {
    fake_enter(__func__);
    cudaError_t st = capture_refuse(__func__);
    if (st != cudaSuccess)
        return st;
    drain_device(t_device);
    return cudaSuccess;
}

typedef struct host_func_ctx {
    cudaHostFn_t fn;
    void *arg;
} host_func_ctx;

static void run_host_func(void *ctx) {
    host_func_ctx *h = ctx;
    t_in_host_func = true;
    h->fn(h->arg);
    t_in_host_func = false;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
                               void *arg) {
    fake_enter(__func__);
    cudaError_t st = check_stream(stream);
    if (st != cudaSuccess)
        return st;
    if (fn == NULL)
        return fake_status(cudaErrorInvalidValue);
    host_func_ctx *h = malloc(sizeof *h);
    if (h == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    *h = (host_func_ctx){fn, arg};
    return fake_stream_enqueue(stream, run_host_func, h);
}

/* ---- memory -------------------------------------------------------------- */

cudaError_t cudaMalloc(void **ptr, size_t size) {
    fake_enter(__func__);
    if (ptr == NULL)
        return fake_status(cudaErrorInvalidValue);
    *ptr = NULL;
    cudaError_t refused = capture_refuse(__func__);
    if (refused != cudaSuccess)
        return refused;
    if (size == 0)
        return cudaSuccess;
    allocation *a = calloc(1, sizeof *a);
    if (a == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    long page = sysconf(_SC_PAGESIZE);
    a->size = size;
    a->mapped = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
    a->gpu = t_device;
    pthread_mutex_lock(&g_lock);
    bool fits = a->mapped <= g_memory_limit - g_used[a->gpu];
    if (fits)
        g_used[a->gpu] += a->mapped;
    pthread_mutex_unlock(&g_lock);
    if (!fits) {
        free(a);
        return fake_status(cudaErrorMemoryAllocation);
    }
    /* Pages are only backed when written, so large pools cost nothing. */
    int fd = memfd_create("fake-cuda", MFD_CLOEXEC);
    bool ok = fd >= 0 && ftruncate(fd, (off_t)a->mapped) == 0;
    a->device =
        ok ? mmap(NULL, a->mapped, PROT_NONE, MAP_SHARED, fd, 0) : MAP_FAILED;
    a->view =
        ok ? mmap(NULL, a->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
           : MAP_FAILED;
    a->fd = fd;
    if (a->device == MAP_FAILED || a->view == MAP_FAILED) {
        if (a->device != MAP_FAILED)
            munmap(a->device, a->mapped);
        if (a->view != MAP_FAILED)
            munmap(a->view, a->mapped);
        if (fd >= 0)
            close(fd);
        pthread_mutex_lock(&g_lock);
        g_used[a->gpu] -= a->mapped;
        pthread_mutex_unlock(&g_lock);
        free(a);
        return fake_status(cudaErrorMemoryAllocation);
    }
    pthread_mutex_lock(&g_lock);
    a->id = g_next_allocation_id++;
    a->next = g_allocations;
    g_allocations = a;
    pthread_mutex_unlock(&g_lock);
    *ptr = a->device;
    return cudaSuccess;
}

/* Like CUDA, synchronises the device that owns ptr first. */
cudaError_t cudaFree(void *ptr) {
    fake_enter(__func__);
    if (ptr == NULL)
        return cudaSuccess;
    cudaError_t refused = capture_refuse(__func__);
    if (refused != cudaSuccess)
        return refused;
    pthread_mutex_lock(&g_lock);
    allocation *a = allocation_of(ptr, 0);
    int gpu = a != NULL && a->device == ptr && !a->imported ? a->gpu : -1;
    pthread_mutex_unlock(&g_lock);
    if (gpu < 0)
        return fake_status(cudaErrorInvalidValue);
    drain_device(gpu);
    pthread_mutex_lock(&g_lock);
    for (allocation **it = &g_allocations; *it != NULL; it = &(*it)->next)
        if ((*it)->device == ptr) {
            a = *it;
            *it = a->next;
            g_used[a->gpu] -= a->mapped;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    munmap(a->device, a->mapped);
    munmap(a->view, a->mapped);
    close(a->fd);
    free(a);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
    (void)flags;
    fake_enter(__func__);
    if (ptr == NULL || size == 0)
        return fake_status(cudaErrorInvalidValue);
    cudaError_t refused = capture_refuse(__func__);
    if (refused != cudaSuccess)
        return refused;
    if (g_no_pinned)
        return fake_status(cudaErrorMemoryAllocation);
    host_block *b = calloc(1, sizeof *b);
    size_t rounded = (size + 4095) / 4096 * 4096;
    char *p = b != NULL ? aligned_alloc(4096, rounded) : NULL;
    if (p == NULL) {
        free(b);
        return fake_status(cudaErrorMemoryAllocation);
    }
    b->ptr = p;
    b->size = size;
    pthread_mutex_lock(&g_lock);
    b->next = g_host_blocks;
    g_host_blocks = b;
    pthread_mutex_unlock(&g_lock);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
    fake_enter(__func__);
    host_block *found = NULL;
    pthread_mutex_lock(&g_lock);
    for (host_block **it = &g_host_blocks; *it != NULL; it = &(*it)->next)
        if ((*it)->ptr == ptr) {
            found = *it;
            *it = found->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    if (found == NULL)
        return fake_status(cudaErrorInvalidValue);
    free(found->ptr);
    free(found);
    return cudaSuccess;
}

/* ---- copies -------------------------------------------------------------- */

typedef struct copy_ctx {
    void *dst;
    const void *src;
    size_t n;
    void *staging; /* owned: a pageable source copied at call time */
} copy_ctx;

static void run_copy(void *ctx) {
    copy_ctx *c = ctx;
    memcpy(c->dst, c->src, c->n);
}

static void drop_copy(void *ctx) {
    copy_ctx *c = ctx;
    free(c->staging);
    free(c);
}

/* Host pointers must not be device memory; device ranges must lie inside
 * one allocation. Rewrites device pointers to their writable views. */
static cudaError_t resolve_copy(void **dst, const void **src, size_t n,
                                enum cudaMemcpyKind kind, bool *dst_pinned,
                                bool *src_pinned) {
    bool dst_device =
        kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_device =
        kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    pthread_mutex_lock(&g_lock);
    bool ok = true;
    const char *why = NULL;
    if (dst_device) {
        allocation *a = allocation_of(*dst, n);
        capture_note_range(a, *dst, n);
        if (a == NULL)
            ok = false, why = "destination is not a device range";
        else
            *dst = a->view + ((char *)*dst - a->device);
    } else if (is_device(*dst)) {
        ok = false, why = "host destination is device memory";
    }
    if (ok && src_device) {
        allocation *a = allocation_of(*src, n);
        capture_note_range(a, *src, n);
        if (a == NULL)
            ok = false, why = "source is not a device range";
        else
            *src = a->view + ((const char *)*src - a->device);
    } else if (ok && is_device(*src)) {
        ok = false, why = "host source is device memory";
    }
    *dst_pinned = !dst_device && is_pinned(*dst, n);
    *src_pinned = !src_device && is_pinned(*src, n);
    pthread_mutex_unlock(&g_lock);
    if (!ok) {
        fprintf(stderr, "fake CUDA: cudaMemcpyAsync of %zu bytes: %s\n", n,
                why);
        return fake_status(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                            enum cudaMemcpyKind kind, cudaStream_t stream) {
    fake_enter(__func__);
    cudaError_t st = check_stream(stream);
    if (st != cudaSuccess || n == 0)
        return st;
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
        kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyHostToHost)
        return fake_status(cudaErrorInvalidValue); /* Default is unused */
    bool dst_pinned, src_pinned;
    st = resolve_copy(&dst, &src, n, kind, &dst_pinned, &src_pinned);
    if (st != cudaSuccess)
        return st;
    copy_ctx *c = calloc(1, sizeof *c);
    if (c == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    *c = (copy_ctx){.dst = dst, .src = src, .n = n};

    bool host_src =
        kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost;
    bool host_dst =
        kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost;
    if (host_src && !src_pinned && kind == cudaMemcpyHostToDevice) {
        /* CUDA stages a pageable source before returning. */
        c->staging = malloc(n);
        if (c->staging == NULL) {
            free(c);
            return fake_status(cudaErrorMemoryAllocation);
        }
        memcpy(c->staging, src, n);
        c->src = c->staging;
    }
    bool synchronous = (host_dst && !dst_pinned) ||
                       (kind == cudaMemcpyHostToHost && !src_pinned);
    if ((synchronous || c->staging != NULL || kind == cudaMemcpyHostToHost) &&
        fake_stream_capturing(stream)) {
        /* A graph cannot hold a copy that involves pageable memory. */
        drop_copy(c);
        return capture_refuse_on(stream, "cudaMemcpyAsync of pageable or "
                                         "host-to-host memory");
    }
    st = fake_stream_enqueue_owned(stream, run_copy, drop_copy, c);
    if (st == cudaSuccess)
        copy_log_note(kind, n);
    if (st == cudaSuccess && synchronous) /* returns once the data is there */
        stream_drain(stream);
    return st;
}

/* ---- events -------------------------------------------------------------- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    fake_enter(__func__);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (e == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    e->gpu = t_device;
    e->timing = (flags & cudaEventDisableTiming) == 0;
    e->refs = 1;
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

/* Drops one reference (g_event_lock held); frees e with the last. */
static void event_unref(struct CUevent_st *e) {
    if (--e->refs == 0)
        free(e);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    fake_enter(__func__);
    if (event == NULL)
        return fake_status(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&g_event_lock);
    event_unref(event);
    pthread_mutex_unlock(&g_event_lock);
    return cudaSuccess;
}

typedef struct record_ctx {
    struct CUevent_st *event;
    uint64_t generation;
} record_ctx;

static void run_record(void *ctx) {
    record_ctx *r = ctx;
    pthread_mutex_lock(&g_event_lock);
    if (r->generation > r->event->done) {
        r->event->done = r->generation;
        r->event->time_ns = now_ns();
    }
    event_unref(r->event);
    pthread_cond_broadcast(&g_event_cond);
    pthread_mutex_unlock(&g_event_lock);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    fake_enter(__func__);
    cudaError_t st = check_stream(stream);
    if (st != cudaSuccess)
        return st;
    if (event == NULL)
        return fake_status(cudaErrorInvalidResourceHandle);
    if (event->gpu != stream->gpu) {
        fprintf(stderr,
                "fake CUDA: event of GPU %d recorded on a stream of "
                "GPU %d\n",
                event->gpu, stream->gpu);
        return fake_status(cudaErrorInvalidResourceHandle);
    }
    if (fake_stream_capturing(stream)) /* CUDA allows it; the fake does not */
        return capture_refuse_on(stream, "cudaEventRecord (not captured by "
                                         "the fake)");
    record_ctx *r = malloc(sizeof *r);
    if (r == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&g_event_lock);
    r->event = event;
    r->generation = ++event->recorded;
    event->refs++;
    pthread_mutex_unlock(&g_event_lock);
    return fake_stream_enqueue(stream, run_record, r);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    fake_enter(__func__);
    if (event == NULL)
        return fake_status(cudaErrorInvalidResourceHandle);
    cudaError_t refused = capture_refuse(__func__);
    if (refused != cudaSuccess)
        return refused;
    pthread_mutex_lock(&g_event_lock);
    while (event->done < event->recorded)
        pthread_cond_wait(&g_event_cond, &g_event_lock);
    pthread_mutex_unlock(&g_event_lock);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    fake_enter(__func__);
    if (event == NULL)
        return fake_status(cudaErrorInvalidResourceHandle);
    cudaError_t refused = capture_refuse(__func__);
    if (refused != cudaSuccess)
        return refused;
    pthread_mutex_lock(&g_event_lock);
    bool done = event->done >= event->recorded;
    pthread_mutex_unlock(&g_event_lock);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
    fake_enter(__func__);
    if (ms == NULL || start == NULL || end == NULL)
        return fake_status(cudaErrorInvalidValue);
    pthread_mutex_lock(&g_event_lock);
    cudaError_t st = cudaSuccess;
    if (!start->timing || !end->timing || start->recorded == 0 ||
        end->recorded == 0)
        st = cudaErrorInvalidResourceHandle;
    else if (start->done < start->recorded || end->done < end->recorded)
        st = cudaErrorNotReady;
    else
        *ms = (float)(((double)end->time_ns - (double)start->time_ns) / 1e6);
    pthread_mutex_unlock(&g_event_lock);
    return fake_status(st);
}

/* ---- allocations of other processes (for fake_ipc.c) --------------------- */

void *fake_allocation_base(const void *ptr, size_t *size) {
    pthread_mutex_lock(&g_lock);
    allocation *a = allocation_of(ptr, 0);
    void *base = a != NULL ? a->device : NULL;
    if (a != NULL && size != NULL)
        *size = a->size;
    pthread_mutex_unlock(&g_lock);
    return base;
}

bool fake_allocation_export(const void *ptr, fake_export *out) {
    pthread_mutex_lock(&g_lock);
    allocation *a = allocation_of(ptr, 0);
    bool ok = a != NULL && !a->imported;
    if (ok)
        *out = (fake_export){
            .base = a->device, .size = a->size, .fd = a->fd, .id = a->id};
    pthread_mutex_unlock(&g_lock);
    return ok;
}

cudaError_t fake_allocation_import(int fd, size_t size, int gpu, void **ptr) {
    allocation *a = calloc(1, sizeof *a);
    if (a == NULL || size == 0) {
        free(a);
        return fake_status(cudaErrorInvalidValue);
    }
    long page = sysconf(_SC_PAGESIZE);
    a->size = size;
    a->mapped = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
    a->gpu = gpu;
    a->imported = true;
    a->fd = -1;
    pthread_mutex_lock(&g_lock);
    a->id = g_next_allocation_id++;
    pthread_mutex_unlock(&g_lock);
    a->device = mmap(NULL, a->mapped, PROT_NONE, MAP_SHARED, fd, 0);
    a->view = mmap(NULL, a->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->device == MAP_FAILED || a->view == MAP_FAILED) {
        if (a->device != MAP_FAILED)
            munmap(a->device, a->mapped);
        if (a->view != MAP_FAILED)
            munmap(a->view, a->mapped);
        free(a);
        return fake_status(cudaErrorMapBufferObjectFailed);
    }
    pthread_mutex_lock(&g_lock);
    a->next = g_allocations;
    g_allocations = a;
    pthread_mutex_unlock(&g_lock);
    *ptr = a->device;
    return cudaSuccess;
}

cudaError_t fake_allocation_unimport(void *ptr) {
    pthread_mutex_lock(&g_lock);
    allocation *a = allocation_of(ptr, 0);
    int gpu = a != NULL && a->device == ptr && a->imported ? a->gpu : -1;
    pthread_mutex_unlock(&g_lock);
    if (gpu < 0)
        return fake_status(cudaErrorInvalidValue);
    drain_device(gpu); /* as cudaFree: no copy may still use it */
    a = NULL;
    pthread_mutex_lock(&g_lock);
    for (allocation **it = &g_allocations; *it != NULL; it = &(*it)->next)
        if ((*it)->device == ptr) {
            a = *it;
            *it = a->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    if (a == NULL)
        return fake_status(cudaErrorInvalidValue);
    munmap(a->device, a->mapped);
    munmap(a->view, a->mapped);
    free(a);
    return cudaSuccess;
}

/* ---- graphs (stream capture) --------------------------------------------- */

/* Drops one reference to r (takes g_lock); the last frees its operations
 * (each op's drop) and ranges. */
static void recording_unref(recording *r) {
    pthread_mutex_lock(&g_lock);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&g_lock);
    if (!last)
        return;
    for (op *o = r->head, *next; o != NULL; o = next) {
        next = o->next;
        op_drop(o);
    }
    free(r->ranges);
    free(r);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                   enum cudaStreamCaptureMode mode) {
    fake_enter(__func__);
    cudaError_t st = check_stream(stream);
    if (st != cudaSuccess)
        return st;
    if (mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeGlobal)
        return fake_status(cudaErrorInvalidValue); /* Relaxed: unused */
    if (t_capture != NULL || fake_stream_capturing(stream))
        return fake_status(cudaErrorIllegalState);
    recording *r = calloc(1, sizeof *r);
    if (r == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    r->refs = 1; /* the capture's, handed to the graph at the end */
    r->gpu = stream->gpu;
    pthread_mutex_lock(&stream->lock);
    stream->capture = r;
    stream->capture_thread = pthread_self();
    pthread_mutex_unlock(&stream->lock);
    t_capture = r;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    fake_enter(__func__);
    cudaError_t st = check_stream(stream);
    if (st != cudaSuccess)
        return st;
    if (graph == NULL)
        return fake_status(cudaErrorInvalidValue);
    *graph = NULL;
    pthread_mutex_lock(&stream->lock);
    recording *r = stream->capture;
    bool same_thread =
        r != NULL && pthread_equal(stream->capture_thread, pthread_self());
    if (same_thread)
        stream->capture = NULL;
    pthread_mutex_unlock(&stream->lock);
    if (r == NULL)
        return fake_status(cudaErrorIllegalState);
    if (!same_thread)
        return fake_status(cudaErrorStreamCaptureWrongThread);
    t_capture = NULL;
    bool invalidated = r->invalidated;
    struct CUgraph_st *g = invalidated ? NULL : malloc(sizeof *g);
    if (g == NULL) {
        recording_unref(r);
        return fake_status(invalidated ? cudaErrorStreamCaptureInvalidated
                                       : cudaErrorMemoryAllocation);
    }
    g->rec = r;
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags) {
    fake_enter(__func__);
    if (exec == NULL || graph == NULL || flags != 0)
        return fake_status(cudaErrorInvalidValue);
    struct CUgraphExec_st *e = malloc(sizeof *e);
    if (e == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&g_lock);
    graph->rec->refs++;
    pthread_mutex_unlock(&g_lock);
    e->rec = graph->rec;
    *exec = e;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    fake_enter(__func__);
    if (graph == NULL)
        return fake_status(cudaErrorInvalidValue);
    recording_unref(graph->rec);
    free(graph);
    return cudaSuccess;
}

/* Unlike CUDA, a launch still queued keeps what it replays alive. */
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    fake_enter(__func__);
    if (exec == NULL)
        return fake_status(cudaErrorInvalidValue);
    recording_unref(exec->rec);
    free(exec);
    return cudaSuccess;
}

/* A queued graph launch: every recorded operation, in order. */
static void run_replay(void *ctx) {
    recording *r = ctx;
    for (op *o = r->head; o != NULL; o = o->next)
        o->run(o->ctx);
}

static void drop_replay(void *ctx) {
    recording_unref(ctx);
}

/* Besides CUDA's checks, the device ranges the graph touches must still
 * be the allocations they were at capture: replaying into freed (or
 * freed and reallocated) memory corrupts silently on a GPU; here it fails
 * the launch with cudaErrorInvalidValue and says which range. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    fake_enter(__func__);
    cudaError_t st = check_stream(stream);
    if (st != cudaSuccess)
        return st;
    if (exec == NULL)
        return fake_status(cudaErrorInvalidValue);
    recording *r = exec->rec;
    if (r->gpu != stream->gpu || fake_stream_capturing(stream)) {
        fprintf(stderr,
                "fake CUDA: graph of GPU %d launched on a %s stream "
                "of GPU %d\n",
                r->gpu, fake_stream_capturing(stream) ? "capturing" : "",
                stream->gpu);
        return fake_status(cudaErrorInvalidValue);
    }
    pthread_mutex_lock(&g_lock);
    const captured_range *stale = NULL;
    for (size_t i = 0; i < r->n_ranges && stale == NULL; i++) {
        allocation *a = allocation_of(r->ranges[i].ptr, r->ranges[i].bytes);
        if (a == NULL || a->id != r->ranges[i].allocation_id)
            stale = &r->ranges[i];
    }
    if (stale == NULL)
        r->refs++; /* the queued launch's */
    pthread_mutex_unlock(&g_lock);
    if (stale != NULL) {
        fprintf(stderr,
                "fake CUDA: cudaGraphLaunch: device range %p (%zu bytes) "
                "captured by the graph has been freed since\n",
                (const void *)stale->ptr, stale->bytes);
        return fake_status(cudaErrorInvalidValue);
    }
    return fake_stream_enqueue_owned(stream, run_replay, drop_replay, r);
}
