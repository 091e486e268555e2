/*
 * The CUDA device: osprey/device_impl.h over the CUDA runtime.
 *
 * - Device memory comes from a per-GPU caching pool: one cudaMalloc'd
 *   region of the configured size up front, more regions added when it is
 *   full, blocks sub-allocated best fit. Freed blocks go back to the pool,
 *   not to CUDA (cudaFree synchronises the whole device). A buffer must be
 *   freed only after the work that uses it has completed.
 * - Pinned host memory comes from one process-wide cudaHostAlloc'd region
 *   (portable, so every GPU can DMA from it). When it is full, host
 *   buffers fall back to pageable memory; fallbacks are counted and the
 *   first one is logged.
 * - A stream is a non-blocking cudaStream_t with its own cuBLAS handle.
 * - Every call makes the stream's GPU current first, so any thread may use
 *   any device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_internal.h"
#include "cuda_provider.h"
#include "kernels.h"
#include "osprey/log.h"

#define DEVICE_ALIGNMENT 256 /* what cudaMalloc guarantees */
#define PINNED_ALIGNMENT 64  /* like every other host buffer */
#define MIN_POOL_GROWTH ((size_t)2 << 20)

osp_error *cuda_device_make_current(osp_device *dev) {
    return OSP_CUDA_CHECK(cudaSetDevice(cuda_device_of(dev)->ordinal));
}

/* ---- device memory ----------------------------------------------------- */

static void release_device_region(void *base, void *ctx) {
    (void)ctx;
    osp_error *err = OSP_CUDA_CHECK(cudaFree(base));
    if (err != NULL) {
        OSP_LOG_ERROR("%s", osp_error_message(err));
        osp_error_free(err);
    }
}

/* Adds a cudaMalloc'd region of `region` bytes to cd's pool and takes
 * `size` bytes from it. */
static osp_error *add_region_and_alloc(cuda_device *cd, void *base,
                                       size_t region, size_t size, void **out) {
    pthread_mutex_lock(&cd->pool_lock);
    bool added = range_pool_add_region(&cd->pool, base, region);
    void *p = added ? range_pool_alloc(&cd->pool, size) : NULL;
    pthread_mutex_unlock(&cd->pool_lock);
    if (!added)
        release_device_region(base, NULL);
    if (p == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of host memory");
    *out = p;
    return NULL;
}

/* Gives the pool's empty regions back to CUDA. The regions are detached
 * under the lock but freed outside it: cudaFree waits for the whole GPU,
 * and a host function on some stream may be waiting for the lock to free
 * a buffer. */
static void collect_region(void *base, void *ctx) {
    void ***next = ctx;
    *(*next)++ = base;
}

static void trim_pool(cuda_device *cd) {
    pthread_mutex_lock(&cd->pool_lock);
    int n = cd->pool.n_regions;
    void **bases = n > 0 ? malloc((size_t)n * sizeof *bases) : NULL;
    void **next = bases;
    if (bases != NULL)
        range_pool_trim(&cd->pool, collect_region, &next);
    pthread_mutex_unlock(&cd->pool_lock);
    for (void **b = bases; b < next; b++)
        release_device_region(*b, NULL);
    free(bases);
}

/* Grows cd's pool by a region big enough for `size` (at least the
 * configured growth step) and allocates from it. When cudaMalloc runs out,
 * the pool's empty regions go back to CUDA and an exactly-sized region is
 * tried once more. */
static osp_error *grow_pool(cuda_device *cd, size_t size, void **out) {
    if (size > SIZE_MAX - MIN_POOL_GROWTH)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "GPU %d: allocation of %zu bytes is too large",
                             cd->ordinal, size);
    size_t exact =
        (size + MIN_POOL_GROWTH - 1) / MIN_POOL_GROWTH * MIN_POOL_GROWTH;
    if (exact == 0) /* size 0 still takes one aligned block */
        exact = MIN_POOL_GROWTH;
    size_t region = exact > cd->pool_grow_bytes ? exact : cd->pool_grow_bytes;

    void *base = NULL;
    cudaError_t st = cudaMalloc(&base, region);
    if (st == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        trim_pool(cd);
        region = exact;
        st = cudaMalloc(&base, region);
    }
    if (st == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        pthread_mutex_lock(&cd->pool_lock);
        size_t used = cd->pool.used;
        pthread_mutex_unlock(&cd->pool_lock);
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "GPU %d: out of memory allocating %zu bytes "
                             "(%zu bytes in use)",
                             cd->ordinal, size, used);
    }
    osp_error *err = OSP_CUDA_CHECK(st);
    if (err != NULL)
        return err;
    return add_region_and_alloc(cd, base, region, size, out);
}

static osp_error *cuda_alloc(osp_device *dev, size_t size, void **ptr) {
    cuda_device *cd = cuda_device_of(dev);
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    pthread_mutex_lock(&cd->pool_lock);
    void *p = range_pool_alloc(&cd->pool, size);
    pthread_mutex_unlock(&cd->pool_lock);
    if (p == NULL) {
        /* CUDA calls happen outside the lock (see trim_pool). */
        err = grow_pool(cd, size, &p);
        if (err != NULL)
            return err;
    }
    *ptr = p;
    return NULL;
}

static void cuda_free(osp_device *dev, void *ptr, size_t size) {
    cuda_device *cd = cuda_device_of(dev);
    pthread_mutex_lock(&cd->pool_lock);
    bool ok = range_pool_free(&cd->pool, ptr);
    pthread_mutex_unlock(&cd->pool_lock);
    if (!ok)
        OSP_LOG_ERROR("GPU %d: freeing %p (%zu bytes), which is not an "
                      "allocated block of its memory pool",
                      cd->ordinal, ptr, size);
}

/* ---- pinned host memory ------------------------------------------------ */

static void *pageable_alloc(size_t size) {
    if (size > SIZE_MAX - PINNED_ALIGNMENT)
        return NULL;
    size_t rounded =
        (size + PINNED_ALIGNMENT - 1) / PINNED_ALIGNMENT * PINNED_ALIGNMENT;
    return aligned_alloc(PINNED_ALIGNMENT,
                         rounded ? rounded : PINNED_ALIGNMENT);
}

static osp_error *cuda_alloc_host(osp_device *dev, size_t size, void **ptr,
                                  bool *pinned) {
    cuda_pinned_pool *pp = cuda_device_of(dev)->pinned;
    pthread_mutex_lock(&pp->lock);
    void *p = pp->pool.n_regions > 0 ? range_pool_alloc(&pp->pool, size) : NULL;
    size_t pool_total = pp->pool.total;
    pthread_mutex_unlock(&pp->lock);
    if (p != NULL) {
        *ptr = p;
        *pinned = true;
        return NULL;
    }
    p = pageable_alloc(size);
    if (p == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "out of host memory allocating %zu bytes", size);
    /* With pinning disabled by configuration nothing "falls back"; when
     * the configured pool could not be pinned at start, everything does. */
    if (pp->configured) {
        atomic_fetch_add(&pp->pageable_fallbacks, 1);
        if (!atomic_exchange(&pp->fallback_logged, true) && pool_total > 0)
            OSP_LOG_WARN("pinned memory pool (%zu bytes) exhausted: host "
                         "buffers fall back to pageable memory (counted, "
                         "logged once); consider a larger "
                         "--pinned-memory-pool-byte-size",
                         pool_total);
    }
    *ptr = p;
    *pinned = false;
    return NULL;
}

static void cuda_free_host(osp_device *dev, void *ptr, size_t size,
                           bool pinned) {
    if (!pinned) {
        free(ptr);
        return;
    }
    cuda_pinned_pool *pp = cuda_device_of(dev)->pinned;
    pthread_mutex_lock(&pp->lock);
    bool ok = range_pool_free(&pp->pool, ptr);
    pthread_mutex_unlock(&pp->lock);
    if (!ok)
        OSP_LOG_ERROR("freeing %p (%zu bytes), which is not an allocated "
                      "block of the pinned memory pool",
                      ptr, size);
}

static void cuda_memory_stats(const osp_device *dev,
                              osp_device_memory_stats *out) {
    cuda_device *cd = dev->impl;
    cuda_pinned_pool *pp = cd->pinned;
    pthread_mutex_lock(&pp->lock);
    out->pinned_pool_total = pp->pool.total;
    out->pinned_pool_used = pp->pool.used;
    pthread_mutex_unlock(&pp->lock);
    out->pageable_fallbacks = atomic_load(&pp->pageable_fallbacks);
    pthread_mutex_lock(&cd->pool_lock);
    out->device_pool_total = cd->pool.total;
    out->device_pool_used = cd->pool.used;
    pthread_mutex_unlock(&cd->pool_lock);
}

/* ---- streams ----------------------------------------------------------- */

static osp_error *cuda_stream_new(osp_device *dev, void **impl) {
    cuda_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of host memory");
    osp_error *err = cuda_device_make_current(dev);
    if (err == NULL)
        err = OSP_CUDA_CHECK(
            cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    if (err == NULL)
        err = OSP_CUBLAS_CHECK(cublasCreate(&s->blas));
    if (err == NULL)
        err = OSP_CUBLAS_CHECK(cublasSetStream(s->blas, s->stream));
    if (err != NULL) {
        if (s->blas != NULL)
            cublasDestroy(s->blas);
        if (s->stream != NULL)
            cudaStreamDestroy(s->stream);
        free(s);
        return err;
    }
    *impl = s;
    return NULL;
}

/* Logs and frees err: for teardown paths that cannot report. */
static void log_error(osp_error *err) {
    if (err != NULL) {
        OSP_LOG_ERROR("%s", osp_error_message(err));
        osp_error_free(err);
    }
}

static void cuda_stream_free(osp_device *dev, void *impl) {
    cuda_stream *s = impl;
    log_error(cuda_device_make_current(dev));
    log_error(OSP_CUDA_CHECK(cudaStreamSynchronize(s->stream)));
    log_error(OSP_CUBLAS_CHECK(cublasDestroy(s->blas)));
    log_error(OSP_CUDA_CHECK(cudaStreamDestroy(s->stream)));
    free(s);
}

static osp_error *cuda_stream_synchronize(osp_device *dev, void *impl) {
    cuda_stream *s = impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(cudaStreamSynchronize(s->stream));
}

static osp_error *cuda_memcpy_async(osp_device *dev, void *impl, void *dst,
                                    const void *src, size_t n,
                                    osp_copy_kind kind) {
    static const enum cudaMemcpyKind kinds[] = {
        [OSP_COPY_HOST_TO_DEVICE] = cudaMemcpyHostToDevice,
        [OSP_COPY_DEVICE_TO_HOST] = cudaMemcpyDeviceToHost,
        [OSP_COPY_DEVICE_TO_DEVICE] = cudaMemcpyDeviceToDevice,
        [OSP_COPY_HOST_TO_HOST] = cudaMemcpyHostToHost,
    };
    cuda_stream *s = impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    if (kind == OSP_COPY_HOST_TO_HOST) {
        /* CUDA runs host-to-host copies synchronously anyway; waiting for
         * the stream first keeps stream order explicitly and, like the
         * CPU device, allows overlapping ranges. */
        err = OSP_CUDA_CHECK(cudaStreamSynchronize(s->stream));
        if (err == NULL)
            memmove(dst, src, n);
        return err;
    }
    return OSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kinds[kind], s->stream));
}

/* fn runs on a CUDA-owned thread, where no CUDA call is allowed: it may
 * free osp_buffers (the pools take only a mutex) but must not allocate,
 * copy, launch ops or synchronize. */
static osp_error *cuda_launch_host_func(osp_device *dev, void *impl,
                                        void (*fn)(void *arg), void *arg) {
    cuda_stream *s = impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(cudaLaunchHostFunc(s->stream, fn, arg));
}

/* ---- events ------------------------------------------------------------ */

static osp_error *cuda_event_new(osp_device *dev, void **impl) {
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    /* Blocking sync: a thread waiting for a batch sleeps instead of
     * spinning, so instance workers leave the cores to the HTTP threads.
     * Timing stays on (the trace's compute stamps need it). */
    cudaEvent_t ev = NULL;
    err = OSP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventBlockingSync));
    if (err == NULL)
        *impl = ev;
    return err;
}

static void cuda_event_free(osp_device *dev, void *impl) {
    log_error(cuda_device_make_current(dev));
    log_error(OSP_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)impl)));
}

static osp_error *cuda_event_record(osp_device *dev, void *impl,
                                    void *stream_impl) {
    cuda_stream *s = stream_impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(cudaEventRecord((cudaEvent_t)impl, s->stream));
}

static osp_error *cuda_event_synchronize(osp_device *dev, void *impl) {
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)impl));
}

static osp_error *cuda_event_elapsed_ns(osp_device *dev, void *start, void *end,
                                        uint64_t *ns) {
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    float ms = 0.0f;
    err = OSP_CUDA_CHECK(
        cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end));
    if (err != NULL)
        return err;
    if (ms < 0.0f)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "event elapsed time: end completed before start");
    *ns = (uint64_t)((double)ms * 1e6 + 0.5);
    return NULL;
}

/* ---- compute ops ------------------------------------------------------- */

static osp_error *cuda_binary(osp_device *dev, void *impl, osp_binary_op op,
                              osp_datatype dtype, const void *a, const void *b,
                              void *out, size_t n) {
    cuda_stream *s = impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(
        cuda_launch_binary(s->stream, op, dtype, a, b, out, n));
}

static osp_error *cuda_bias_activation(osp_device *dev, void *impl, float *x,
                                       const float *bias, int64_t rows,
                                       int64_t cols, osp_activation act) {
    cuda_stream *s = impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(
        cuda_launch_bias_activation(s->stream, x, bias, rows, cols, act));
}

static osp_error *cuda_softmax_rows(osp_device *dev, void *impl, const float *x,
                                    float *out, int64_t rows, int64_t cols) {
    cuda_stream *s = impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(
        cuda_launch_softmax_rows(s->stream, x, out, rows, cols));
}

static osp_error *cuda_cast(osp_device *dev, void *impl, const void *src,
                            osp_datatype src_dtype, void *dst,
                            osp_datatype dst_dtype, size_t n) {
    cuda_stream *s = impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(
        cuda_launch_cast(s->stream, src, src_dtype, dst, dst_dtype, n));
}

static const osp_device_ops cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .alloc_host = cuda_alloc_host,
    .free_host = cuda_free_host,
    .memory_stats = cuda_memory_stats,
    .stream_new = cuda_stream_new,
    .stream_free = cuda_stream_free,
    .stream_synchronize = cuda_stream_synchronize,
    .memcpy_async = cuda_memcpy_async,
    .launch_host_func = cuda_launch_host_func,
    .event_new = cuda_event_new,
    .event_free = cuda_event_free,
    .event_record = cuda_event_record,
    .event_synchronize = cuda_event_synchronize,
    .event_elapsed_ns = cuda_event_elapsed_ns,
    .gemm = cuda_gemm,
    .binary = cuda_binary,
    .bias_activation = cuda_bias_activation,
    .softmax_rows = cuda_softmax_rows,
    .cast = cuda_cast,
    .memcpy_sync = cuda_memcpy_sync,
    .ipc_open = cuda_ipc_open,
    .ipc_close = cuda_ipc_close,
    .ipc_export = cuda_ipc_export,
    .gemm_ex = cuda_gemm_ex,
    .conv = cuda_conv,
    .conv_transpose = cuda_conv_transpose,
    .pool = cuda_pool,
    .reduce = cuda_reduce,
    .softmax = cuda_softmax,
    .layer_norm = cuda_layer_norm,
    .channel_affine = cuda_channel_affine,
    .unary = cuda_unary,
    .binary_nd = cuda_binary_nd,
    .where = cuda_where,
    .copy_strided = cuda_copy_strided,
    .gather = cuda_gather,
    .fill = cuda_fill,
    .pad = cuda_pad,
    .topk = cuda_topk,
    .cumsum = cuda_cumsum,
    .scatter = cuda_scatter,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
};

/* ---- discovery --------------------------------------------------------- */

static void release_pinned_region(void *base, void *ctx) {
    (void)ctx;
    log_error(OSP_CUDA_CHECK(cudaFreeHost(base)));
}

static void pinned_pool_free(cuda_pinned_pool *pp) {
    range_pool_destroy(&pp->pool, release_pinned_region, NULL);
    pthread_mutex_destroy(&pp->lock);
    free(pp);
}

/* Reserves the pinned pool. Failing to pin is not fatal (as in Triton):
 * the server runs with pageable host buffers and says so. */
static void pinned_pool_reserve(cuda_pinned_pool *pp, size_t bytes) {
    pp->configured = bytes > 0;
    if (bytes == 0) {
        OSP_LOG_INFO("pinned memory pool disabled");
        return;
    }
    void *base = NULL;
    osp_error *err = OSP_CUDA_CHECK(cudaSetDevice(0));
    if (err == NULL)
        err =
            OSP_CUDA_CHECK(cudaHostAlloc(&base, bytes, cudaHostAllocPortable));
    if (err != NULL) {
        OSP_LOG_WARN("unable to allocate %zu bytes of pinned host memory, the "
                     "pinned memory pool will not be available: %s",
                     bytes, osp_error_message(err));
        osp_error_free(err);
        return;
    }
    if (!range_pool_add_region(&pp->pool, base, bytes)) {
        release_pinned_region(base, NULL);
        OSP_LOG_WARN("out of host memory: pinned memory pool not available");
        return;
    }
    OSP_LOG_INFO("pinned memory pool: %zu bytes at %p", bytes, base);
}

static void cuda_device_destroy(cuda_device *cd) {
    log_error(cuda_device_make_current(&cd->device));
    log_error(OSP_CUDA_CHECK(cudaDeviceSynchronize()));
    if (cd->copy_stream != NULL)
        log_error(OSP_CUDA_CHECK(cudaStreamDestroy(cd->copy_stream)));
    range_pool_destroy(&cd->pool, release_device_region, NULL);
    pthread_mutex_destroy(&cd->copy_lock);
    pthread_mutex_destroy(&cd->pool_lock);
    free(cd);
}

static osp_error *cuda_device_create(int ordinal, size_t pool_bytes,
                                     cuda_pinned_pool *pinned,
                                     cuda_device **out) {
    struct cudaDeviceProp prop;
    osp_error *err = OSP_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    if (err != NULL)
        return err;
    cuda_device *cd = calloc(1, sizeof *cd);
    if (cd == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of host memory");
    cd->device.ops = &cuda_ops;
    cd->device.impl = cd;
    cd->device.info = (osp_device_info){
        .type = OSP_DEVICE_CUDA,
        .index = ordinal,
        .total_memory = prop.totalGlobalMem,
        .compute_major = prop.major,
        .compute_minor = prop.minor,
    };
    /* Names are shorter than 128 bytes in practice; truncate if not. */
    snprintf(cd->device.info.name, sizeof cd->device.info.name, "%.127s",
             prop.name);
    cd->ordinal = ordinal;
    cd->pinned = pinned;
    cd->pool_grow_bytes =
        pool_bytes > MIN_POOL_GROWTH ? pool_bytes : MIN_POOL_GROWTH;
    pthread_mutex_init(&cd->pool_lock, NULL);
    pthread_mutex_init(&cd->copy_lock, NULL);
    range_pool_init(&cd->pool, DEVICE_ALIGNMENT);

    if (pool_bytes > 0) {
        void *base = NULL;
        err = OSP_CUDA_CHECK(cudaSetDevice(ordinal));
        if (err == NULL)
            err = OSP_CUDA_CHECK(cudaMalloc(&base, pool_bytes));
        if (err != NULL) {
            cuda_device_destroy(cd);
            return osp_error_wrap(err,
                                  "cannot reserve the %zu-byte CUDA "
                                  "memory pool of GPU %d",
                                  pool_bytes, ordinal);
        }
        if (!range_pool_add_region(&cd->pool, base, pool_bytes)) {
            release_device_region(base, NULL);
            cuda_device_destroy(cd);
            return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of host memory");
        }
    }
    OSP_LOG_INFO("CUDA GPU %d: %s, compute capability %d.%d, %.1f GiB; "
                 "memory pool %zu bytes",
                 ordinal, prop.name, prop.major, prop.minor,
                 (double)prop.totalGlobalMem / (1 << 30), pool_bytes);
    *out = cd;
    return NULL;
}

static osp_error *cuda_devices_create(const osp_device_options *opts,
                                      osp_device **out, int cap, int *count) {
    *count = 0;
    int n = 0;
    cudaError_t st = cudaGetDeviceCount(&n);
    if (st != cudaSuccess) {
        (void)cudaGetLastError();
        /* No GPU or no driver is a normal CPU-only host. */
        if (st == cudaErrorNoDevice || st == cudaErrorInsufficientDriver)
            OSP_LOG_INFO("no CUDA GPU found (%s)", cudaGetErrorString(st));
        else
            OSP_LOG_WARN("CUDA is not usable (%s: %s); running on the CPU only",
                         cudaGetErrorName(st), cudaGetErrorString(st));
        return NULL;
    }
    if (n == 0)
        return NULL;
    if (n > cap) {
        OSP_LOG_WARN("%d CUDA GPUs found; using the first %d", n, cap);
        n = cap;
    }

    cuda_pinned_pool *pinned = calloc(1, sizeof *pinned);
    if (pinned == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of host memory");
    pthread_mutex_init(&pinned->lock, NULL);
    range_pool_init(&pinned->pool, PINNED_ALIGNMENT);
    atomic_init(&pinned->pageable_fallbacks, 0);
    atomic_init(&pinned->fallback_logged, false);

    const size_t n_overrides =
        sizeof opts->cuda_pool_bytes / sizeof opts->cuda_pool_bytes[0];
    for (int i = 0; i < n; i++) {
        size_t pool_bytes = opts->cuda_pool_bytes_default;
        if ((size_t)i < n_overrides &&
            opts->cuda_pool_bytes[i] != OSP_CUDA_POOL_UNSET)
            pool_bytes = opts->cuda_pool_bytes[i];
        cuda_device *cd = NULL;
        osp_error *err = cuda_device_create(i, pool_bytes, pinned, &cd);
        if (err != NULL) {
            for (int j = 0; j < i; j++)
                cuda_device_destroy(cuda_device_of(out[j]));
            pinned_pool_free(pinned);
            return err;
        }
        out[i] = &cd->device;
    }
    pinned_pool_reserve(pinned, opts->pinned_pool_bytes);
    *count = n;
    return NULL;
}

static void cuda_devices_destroy(osp_device **devices, int count) {
    if (count <= 0)
        return;
    cuda_pinned_pool *pinned = cuda_device_of(devices[0])->pinned;
    for (int i = 0; i < count; i++) {
        cuda_device_destroy(cuda_device_of(devices[i]));
        devices[i] = NULL;
    }
    pinned_pool_free(pinned);
}

const osp_device_provider osp_cuda_device_provider = {
    .name = "cuda",
    .create = cuda_devices_create,
    .destroy = cuda_devices_destroy,
};
