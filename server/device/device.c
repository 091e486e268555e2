/*
 * The public device API (osprey/device.h): device discovery, and a thin
 * dispatch layer over each device's ops table (osprey/device_impl.h).
 *
 * Everything a device would otherwise repeat lives here: argument checks
 * (so an implementation may trust its arguments), the fallbacks for the
 * optional slots, and wrapping raw allocations into osp_buffer.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device_internal.h"
#include "osprey/clock.h"
#include "osprey/device.h"
#include "osprey/device_impl.h"
#include "osprey/error.h"

#define MAX_GPU_DEVICES 16
#define MAX_PROVIDERS 4

struct osp_event {
    osp_device *device;
    void *impl; /* the device's event, or NULL when it has none */
    bool recorded;
    uint64_t host_ns; /* fallback events: monotonic time of the record */
};

/* ---- discovery --------------------------------------------------------- */

/* The devices one provider created: gpu[first .. first + count). */
typedef struct provider_devices {
    const osp_device_provider *provider;
    int first;
    int count;
} provider_devices;

/* Discovery runs once; its outcome is kept so that later calls return the
 * same result (a copy of the first error, since callers own errors). */
static struct {
    pthread_mutex_t lock;
    bool initialized;
    osp_error_code init_code; /* OSP_ERROR_UNKNOWN when init succeeded */
    char init_message[256];
    osp_device *gpu[MAX_GPU_DEVICES];
    int gpu_count;
    /* which provider made which devices, to give them back */
    provider_devices owners[MAX_PROVIDERS];
    size_t n_owners;
} devices = {.lock = PTHREAD_MUTEX_INITIALIZER};

void osp_device_options_init(osp_device_options *opts) {
    memset(opts, 0, sizeof *opts);
    opts->pinned_pool_bytes = (size_t)256 << 20;
    opts->cuda_pool_bytes_default = (size_t)64 << 20;
    for (size_t i = 0; i < sizeof opts->cuda_pool_bytes / sizeof(size_t); i++)
        opts->cuda_pool_bytes[i] = OSP_CUDA_POOL_UNSET;
}

osp_error *osp_devices_init(const osp_device_options *opts) {
    osp_device_options defaults;
    if (opts == NULL) {
        osp_device_options_init(&defaults);
        opts = &defaults;
    }
    osp_error *err = NULL;
    pthread_mutex_lock(&devices.lock);
    if (devices.initialized) {
        if (devices.init_code != OSP_ERROR_UNKNOWN)
            err = osp_error_new(devices.init_code, "%s", devices.init_message);
        goto out;
    }
    devices.initialized = true;
    devices.init_code = OSP_ERROR_UNKNOWN;
    devices.gpu_count = 0;
    (void)cpu_device_get(); /* fills in the CPU's info */
    for (size_t p = 0; p < opts->n_providers && p < MAX_PROVIDERS; p++) {
        const osp_device_provider *provider = opts->providers[p];
        int count = 0;
        err = provider->create(opts, devices.gpu + devices.gpu_count,
                               MAX_GPU_DEVICES - devices.gpu_count, &count);
        if (err != NULL) {
            devices.init_code = osp_error_get_code(err);
            snprintf(devices.init_message, sizeof devices.init_message, "%s",
                     osp_error_message(err));
            break;
        }
        devices.owners[devices.n_owners++] =
            (provider_devices){provider, devices.gpu_count, count};
        devices.gpu_count += count;
    }
out:
    pthread_mutex_unlock(&devices.lock);
    return err;
}

void osp_devices_shutdown(void) {
    pthread_mutex_lock(&devices.lock);
    for (size_t i = devices.n_owners; i-- > 0;) {
        provider_devices *o = &devices.owners[i];
        if (o->count > 0)
            o->provider->destroy(devices.gpu + o->first, o->count);
    }
    memset(devices.gpu, 0, sizeof devices.gpu);
    devices.gpu_count = 0;
    devices.n_owners = 0;
    devices.initialized = false;
    pthread_mutex_unlock(&devices.lock);
}

osp_device *osp_device_cpu(void) {
    return cpu_device_get();
}

int osp_device_cuda_count(void) {
    pthread_mutex_lock(&devices.lock);
    int count = devices.gpu_count;
    pthread_mutex_unlock(&devices.lock);
    return count;
}

osp_error *osp_device_cuda_get(int index, osp_device **out) {
    if (out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_cuda_get: out is NULL");
    osp_device *dev = NULL;
    pthread_mutex_lock(&devices.lock);
    int count = devices.gpu_count;
    if (index >= 0 && index < count)
        dev = devices.gpu[index];
    pthread_mutex_unlock(&devices.lock);
    if (dev == NULL)
        return osp_error_new(OSP_ERROR_NOT_FOUND,
                             "no CUDA GPU %d (%d GPU%s available)", index,
                             count, count == 1 ? "" : "s");
    *out = dev;
    return NULL;
}

void osp_device_get_info(const osp_device *dev, osp_device_info *out) {
    *out = dev->info;
}

void osp_device_get_memory_stats(const osp_device *dev,
                                 osp_device_memory_stats *out) {
    memset(out, 0, sizeof *out);
    if (dev->ops->memory_stats != NULL)
        dev->ops->memory_stats(dev, out);
}

/* ---- memory ------------------------------------------------------------ */

/* A buffer made by a device: released through the device's ops. */
typedef struct device_buffer {
    osp_buffer super;
    bool pinned;            /* host buffers: what alloc_host said */
    bool from_device_alloc; /* DEVICE kind, from ops->alloc */
    bool from_fallback;     /* host buffer from the aligned fallback */
} device_buffer;

static void device_buffer_release(osp_buffer *buf) {
    device_buffer *db = (device_buffer *)buf;
    osp_device *dev = buf->device;
    if (db->from_device_alloc)
        dev->ops->free(dev, buf->data, buf->size);
    else if (db->from_fallback)
        host_free_aligned(buf->data, buf->size);
    else
        dev->ops->free_host(dev, buf->data, buf->size, db->pinned);
    free(db);
}

osp_error *osp_device_alloc(osp_device *dev, size_t size, osp_buffer **out) {
    if (dev == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_alloc: dev and out are required");
    device_buffer *db = malloc(sizeof *db);
    if (db == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "osp_device_alloc: out of host memory");
    void *ptr = NULL;
    osp_error *err = dev->ops->alloc(dev, size, &ptr);
    if (err != NULL) {
        free(db);
        return err;
    }
    *db = (device_buffer){
        .super = {.data = ptr,
                  .size = size,
                  .kind = OSP_MEMORY_DEVICE,
                  .device = dev,
                  .release_ = device_buffer_release},
        .from_device_alloc = true,
    };
    *out = &db->super;
    return NULL;
}

osp_error *osp_device_alloc_host(osp_device *dev, size_t size,
                                 osp_buffer **out) {
    if (dev == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_alloc_host: dev and out are required");
    device_buffer *db = malloc(sizeof *db);
    if (db == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "osp_device_alloc_host: out of host memory");
    void *ptr = NULL;
    bool pinned = false, fallback = dev->ops->alloc_host == NULL;
    if (fallback) {
        ptr = host_alloc_aligned(size);
        if (ptr == NULL) {
            free(db);
            return osp_error_new(OSP_ERROR_UNAVAILABLE,
                                 "out of host memory allocating %zu bytes",
                                 size);
        }
    } else {
        osp_error *err = dev->ops->alloc_host(dev, size, &ptr, &pinned);
        if (err != NULL) {
            free(db);
            return err;
        }
    }
    *db = (device_buffer){
        .super = {.data = ptr,
                  .size = size,
                  .kind = pinned ? OSP_MEMORY_HOST_PINNED : OSP_MEMORY_HOST,
                  .device = dev,
                  .release_ = device_buffer_release},
        .pinned = pinned,
        .from_fallback = fallback,
    };
    *out = &db->super;
    return NULL;
}

/* ---- streams ----------------------------------------------------------- */

osp_error *osp_stream_new(osp_device *dev, osp_stream **out) {
    if (dev == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_stream_new: dev and out are required");
    osp_stream *s = malloc(sizeof *s);
    if (s == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "osp_stream_new: out of memory");
    s->device = dev;
    s->impl = NULL;
    s->capturing = false;
    osp_error *err = dev->ops->stream_new(dev, &s->impl);
    if (err != NULL) {
        free(s);
        return err;
    }
    *out = s;
    return NULL;
}

void osp_stream_free(osp_stream *stream) {
    if (stream == NULL)
        return;
    /* stream_free waits for pending work itself. */
    stream->device->ops->stream_free(stream->device, stream->impl);
    free(stream);
}

osp_device *osp_stream_device(const osp_stream *stream) {
    return stream->device;
}

osp_error *osp_stream_synchronize(osp_stream *stream) {
    if (stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_stream_synchronize: stream is NULL");
    return stream->device->ops->stream_synchronize(stream->device,
                                                   stream->impl);
}

osp_error *osp_stream_set_threads(osp_stream *stream, int threads) {
    if (stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_stream_set_threads: stream is NULL");
    if (threads < 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_stream_set_threads: %d threads", threads);
    osp_device *dev = stream->device;
    if (dev->ops->stream_set_threads == NULL)
        return NULL;
    return dev->ops->stream_set_threads(dev, stream->impl, threads);
}

osp_error *osp_memcpy_async(osp_stream *stream, void *dst, const void *src,
                            size_t n, osp_copy_kind kind) {
    if (stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_memcpy_async: stream is NULL");
    if (kind < OSP_COPY_HOST_TO_DEVICE || kind > OSP_COPY_HOST_TO_HOST)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_memcpy_async: unknown copy kind %d",
                             (int)kind);
    if (n == 0)
        return NULL;
    if (dst == NULL || src == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_memcpy_async: NULL pointer for %zu bytes", n);
    osp_device *dev = stream->device;
    if (dev->ops->memcpy_async != NULL)
        return dev->ops->memcpy_async(dev, stream->impl, dst, src, n, kind);
    /* Without an async copy all memory is host-visible. */
    osp_error *err = dev->ops->stream_synchronize(dev, stream->impl);
    if (err != NULL)
        return err;
    memmove(dst, src, n);
    return NULL;
}

osp_error *osp_stream_launch_host_func(osp_stream *stream,
                                       void (*fn)(void *arg), void *arg) {
    if (stream == NULL || fn == NULL)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "osp_stream_launch_host_func: stream and fn are required");
    osp_device *dev = stream->device;
    if (stream->capturing) /* a graph would call it at every replay */
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "osp_stream_launch_host_func: the stream is "
                             "recording a graph");
    if (dev->ops->launch_host_func != NULL)
        return dev->ops->launch_host_func(dev, stream->impl, fn, arg);
    osp_error *err = dev->ops->stream_synchronize(dev, stream->impl);
    if (err != NULL)
        return err;
    fn(arg);
    return NULL;
}

osp_error *osp_device_memcpy(osp_device *dev, void *dst, const void *src,
                             size_t n, osp_copy_kind kind) {
    if (dev == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_memcpy: dev is NULL");
    if (kind < OSP_COPY_HOST_TO_DEVICE || kind > OSP_COPY_HOST_TO_HOST)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_memcpy: unknown copy kind %d",
                             (int)kind);
    if (n == 0)
        return NULL;
    if (dst == NULL || src == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_memcpy: NULL pointer for %zu bytes",
                             n);
    if (dev->ops->memcpy_sync != NULL)
        return dev->ops->memcpy_sync(dev, dst, src, n, kind);
    memmove(dst, src, n);
    return NULL;
}

/* ---- memory shared by another process ---------------------------------- */

bool osp_device_supports_ipc(const osp_device *dev) {
    return dev != NULL && dev->ops->ipc_open != NULL &&
           dev->ops->ipc_close != NULL;
}

osp_error *osp_device_ipc_open(osp_device *dev, const void *handle,
                               size_t handle_len, void **ptr, size_t *size) {
    if (dev == NULL || handle == NULL || ptr == NULL || size == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_ipc_open: dev, handle, ptr and size "
                             "are required");
    if (!osp_device_supports_ipc(dev))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "device %s cannot open memory of other processes",
                             dev->info.name);
    return dev->ops->ipc_open(dev, handle, handle_len, ptr, size);
}

osp_error *osp_device_ipc_close(osp_device *dev, void *ptr) {
    if (dev == NULL || ptr == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_ipc_close: dev and ptr are required");
    if (!osp_device_supports_ipc(dev))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "device %s cannot open memory of other processes",
                             dev->info.name);
    return dev->ops->ipc_close(dev, ptr);
}

osp_error *osp_device_ipc_export(osp_device *dev, const void *ptr, void *handle,
                                 size_t handle_len, uint64_t *offset) {
    if (dev == NULL || ptr == NULL || handle == NULL || offset == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_device_ipc_export: dev, ptr, handle and "
                             "offset are required");
    if (dev->ops->ipc_export == NULL)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "device %s cannot share its memory with other "
                             "processes",
                             dev->info.name);
    return dev->ops->ipc_export(dev, ptr, handle, handle_len, offset);
}

/* ---- events ------------------------------------------------------------ */

osp_error *osp_event_new(osp_device *dev, osp_event **out) {
    if (dev == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_event_new: dev and out are required");
    osp_event *ev = calloc(1, sizeof *ev);
    if (ev == NULL)
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "osp_event_new: out of memory");
    ev->device = dev;
    if (dev->ops->event_new != NULL) {
        osp_error *err = dev->ops->event_new(dev, &ev->impl);
        if (err != NULL) {
            free(ev);
            return err;
        }
    }
    *out = ev;
    return NULL;
}

void osp_event_free(osp_event *event) {
    if (event == NULL)
        return;
    if (event->device->ops->event_free != NULL)
        event->device->ops->event_free(event->device, event->impl);
    free(event);
}

osp_error *osp_event_record(osp_event *event, osp_stream *stream) {
    if (event == NULL || stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_event_record: event and stream are required");
    if (event->device != stream->device)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_event_record: event and stream belong to "
                             "different devices");
    osp_device *dev = stream->device;
    osp_error *err;
    if (dev->ops->event_record != NULL) {
        err = dev->ops->event_record(dev, event->impl, stream->impl);
    } else {
        err = dev->ops->stream_synchronize(dev, stream->impl);
        event->host_ns = osp_now_ns();
    }
    if (err == NULL)
        event->recorded = true;
    return err;
}

osp_error *osp_event_synchronize(osp_event *event) {
    if (event == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_event_synchronize: event is NULL");
    if (event->device->ops->event_synchronize == NULL)
        return NULL; /* fallback events complete when recorded */
    return event->device->ops->event_synchronize(event->device, event->impl);
}

osp_error *osp_event_elapsed_ns(osp_event *start, osp_event *end,
                                uint64_t *ns) {
    if (start == NULL || end == NULL || ns == NULL)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "osp_event_elapsed_ns: start, end and ns are required");
    if (start->device != end->device)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "osp_event_elapsed_ns: events of different devices");
    if (!start->recorded || !end->recorded)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_event_elapsed_ns: event not recorded");
    osp_device *dev = start->device;
    if (dev->ops->event_new != NULL) {
        if (dev->ops->event_elapsed_ns == NULL)
            return osp_error_new(OSP_ERROR_UNSUPPORTED,
                                 "device %s does not time events",
                                 dev->info.name);
        return dev->ops->event_elapsed_ns(dev, start->impl, end->impl, ns);
    }
    if (end->host_ns < start->host_ns)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_event_elapsed_ns: end recorded before start");
    *ns = end->host_ns - start->host_ns;
    return NULL;
}

/* ---- compute ops ------------------------------------------------------- */

/* Checks that a row-major matrix of rows x cols stored with row stride ld
 * is describable to BLAS (int dimensions, ld >= max(1, cols)). Shared with
 * osp_op_gemm_ex (tensor_ops_nn.c). */
osp_error *device_gemm_check_matrix(const char *name, const void *ptr,
                                    int64_t rows, int64_t cols, int64_t ld) {
    if (ptr == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "gemm: %s is NULL", name);
    if (ld < (cols > 1 ? cols : 1) || ld > INT_MAX)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm: ld%s=%lld invalid for a %lldx%lld matrix",
                             name, (long long)ld, (long long)rows,
                             (long long)cols);
    return NULL;
}

osp_error *osp_op_gemm(osp_stream *stream, const osp_gemm_args *args) {
    if (stream == NULL || args == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm: stream and args are required");
    const osp_gemm_args *g = args;
    if (g->dtype != OSP_TYPE_FP32 && g->dtype != OSP_TYPE_FP16)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "gemm: datatype %s is not FP32 or FP16",
                             osp_datatype_wire_name(g->dtype));
    if (osp_gemm_c_dtype(g) != g->dtype)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "gemm: C of %s with %s operands is gemm_ex's",
                             osp_datatype_wire_name(g->c_dtype),
                             osp_datatype_wire_name(g->dtype));
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->m > INT_MAX || g->n > INT_MAX ||
        g->k > INT_MAX)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "gemm: invalid shape m=%lld n=%lld k=%lld",
                             (long long)g->m, (long long)g->n, (long long)g->k);
    if (g->m == 0 || g->n == 0)
        return NULL;
    osp_error *err;
    if ((err = device_gemm_check_matrix("a", g->a, g->trans_a ? g->k : g->m,
                                        g->trans_a ? g->m : g->k, g->lda)) !=
            NULL ||
        (err = device_gemm_check_matrix("b", g->b, g->trans_b ? g->n : g->k,
                                        g->trans_b ? g->k : g->n, g->ldb)) !=
            NULL ||
        (err = device_gemm_check_matrix("c", g->c, g->m, g->n, g->ldc)) != NULL)
        return err;
    return stream->device->ops->gemm(stream->device, stream->impl, g);
}

osp_error *osp_op_binary(osp_stream *stream, osp_binary_op op,
                         osp_datatype dtype, const void *a, const void *b,
                         void *out, size_t n) {
    if (stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "binary: stream is NULL");
    if (op < OSP_BINARY_ADD || op > OSP_BINARY_MUL)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "binary: unknown op %d",
                             (int)op);
    if (dtype != OSP_TYPE_INT32 && dtype != OSP_TYPE_INT64 &&
        dtype != OSP_TYPE_FP32 && dtype != OSP_TYPE_FP16)
        return osp_error_new(
            OSP_ERROR_UNSUPPORTED,
            "binary: datatype %s is not INT32, INT64, FP32 or FP16",
            osp_datatype_wire_name(dtype));
    if (n == 0)
        return NULL;
    if (a == NULL || b == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "binary: NULL operand");
    return stream->device->ops->binary(stream->device, stream->impl, op, dtype,
                                       a, b, out, n);
}

/* rows x cols must be a non-negative shape whose element count fits in
 * memory (so implementations may index with int64 freely). */
static osp_error *check_rows_cols(const char *op, int64_t rows, int64_t cols) {
    size_t count;
    if (rows < 0 || cols < 0 ||
        __builtin_mul_overflow((size_t)rows, (size_t)cols, &count) ||
        count > SIZE_MAX / sizeof(float))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "%s: invalid shape %lldx%lld", op, (long long)rows,
                             (long long)cols);
    return NULL;
}

osp_error *osp_op_bias_activation(osp_stream *stream, float *x,
                                  const float *bias, int64_t rows, int64_t cols,
                                  osp_activation act) {
    if (stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "bias_activation: stream is NULL");
    if (act < OSP_ACTIVATION_NONE || act > OSP_ACTIVATION_GELU)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "bias_activation: unknown activation %d",
                             (int)act);
    osp_error *err = check_rows_cols("bias_activation", rows, cols);
    if (err != NULL)
        return err;
    if (rows == 0 || cols == 0)
        return NULL;
    if (x == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "bias_activation: x is NULL");
    return stream->device->ops->bias_activation(stream->device, stream->impl, x,
                                                bias, rows, cols, act);
}

osp_error *osp_op_softmax_rows(osp_stream *stream, const float *x, float *out,
                               int64_t rows, int64_t cols) {
    if (stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "softmax_rows: stream is NULL");
    osp_error *err = check_rows_cols("softmax_rows", rows, cols);
    if (err != NULL)
        return err;
    if (rows == 0 || cols == 0)
        return NULL;
    if (x == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "softmax_rows: NULL operand");
    return stream->device->ops->softmax_rows(stream->device, stream->impl, x,
                                             out, rows, cols);
}

static bool castable(osp_datatype dt) {
    return dt > OSP_TYPE_INVALID && dt < OSP_TYPE_COUNT_ &&
           dt != OSP_TYPE_BYTES;
}

osp_error *osp_op_cast(osp_stream *stream, const void *src,
                       osp_datatype src_dtype, void *dst,
                       osp_datatype dst_dtype, size_t n) {
    if (stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "cast: stream is NULL");
    if (!castable(src_dtype) || !castable(dst_dtype))
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "cast: cannot cast %s to %s",
                             osp_datatype_wire_name(src_dtype),
                             osp_datatype_wire_name(dst_dtype));
    if (n == 0)
        return NULL;
    if (src == NULL || dst == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG, "cast: NULL operand");
    return stream->device->ops->cast(stream->device, stream->impl, src,
                                     src_dtype, dst, dst_dtype, n);
}
