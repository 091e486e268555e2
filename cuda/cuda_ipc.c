/*
 * Memory of other processes on a GPU (CUDA IPC), and synchronous copies to
 * and from it: the ipc_open, ipc_close, ipc_export and memcpy_sync slots
 * of the CUDA device, for Triton's CUDA shared memory extension and the
 * python backend's GPU tensors. A client exports a cudaMalloc'd
 * allocation with cudaIpcGetMemHandle and sends the handle; the server
 * maps it with cudaIpcOpenMemHandle and learns the allocation's size from
 * the driver (cuMemGetAddressRange, reached through the runtime so that
 * the server does not link libcuda and still starts on hosts without a
 * GPU, as Triton does). ipc_export is the other way round: a python stub
 * opens the server's input tensors.
 *
 * Errors here are read by clients: they carry CUDA's text, never a file
 * name.
 */
#include <cuda.h>
#include <string.h>

#include "cuda_internal.h"
#include "osprey/log.h"

typedef CUresult (*mem_get_address_range_fn)(CUdeviceptr *base, size_t *size,
                                             CUdeviceptr ptr);

static osp_error *status_error(osp_error_code code, const char *what,
                               cudaError_t status) {
    (void)cudaGetLastError(); /* clears a non-sticky error */
    return osp_error_new(code, "%s: %s", what, cudaGetErrorString(status));
}

/* The driver's cuMemGetAddressRange, or NULL (logged) when the driver
 * does not give it. */
static mem_get_address_range_fn address_range_fn(void) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    cudaError_t st = cudaGetDriverEntryPointByVersion(
        "cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found);
#else
    cudaError_t st = cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn,
                                             cudaEnableDefault, &found);
#endif
    if (st != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) {
        (void)cudaGetLastError();
        OSP_LOG_ERROR("Failed to get CUDA driver entry point for "
                      "cuMemGetAddressRange: %s",
                      cudaGetErrorString(st));
        return NULL;
    }
    return (mem_get_address_range_fn)fn;
}

/* The allocation that holds ptr: its start and its size in bytes. */
static osp_error *allocation_of(const void *ptr, CUdeviceptr *base,
                                size_t *range) {
    mem_get_address_range_fn fn = address_range_fn();
    if (!fn)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "Failed to get CUDA driver entry point");
    CUresult r = fn(base, range, (CUdeviceptr)(uintptr_t)ptr);
    if (r != CUDA_SUCCESS)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "Failed to get CUDA address range: error %d",
                             (int)r);
    return NULL;
}

/* Bytes of the allocation that holds ptr, from ptr to its end. */
static osp_error *allocation_size_from(void *ptr, size_t *size) {
    CUdeviceptr base = 0;
    size_t range = 0;
    osp_error *err = allocation_of(ptr, &base, &range);
    if (!err)
        *size = range - (size_t)((CUdeviceptr)(uintptr_t)ptr - base);
    return err;
}

osp_error *cuda_ipc_open(osp_device *dev, const void *handle, size_t handle_len,
                         void **ptr, size_t *size) {
    cudaIpcMemHandle_t h;
    if (handle_len != sizeof h)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "a CUDA IPC handle has %zu bytes, not %zu",
                             sizeof h, handle_len);
    memcpy(&h, handle, sizeof h);
    cudaError_t st = cudaSetDevice(cuda_device_of(dev)->ordinal);
    if (st != cudaSuccess)
        return status_error(OSP_ERROR_INVALID_ARG,
                            "failed to open CUDA IPC handle", st);
    void *p = NULL;
    st = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (st != cudaSuccess)
        return status_error(OSP_ERROR_INVALID_ARG,
                            "failed to open CUDA IPC handle", st);
    osp_error *err = allocation_size_from(p, size);
    if (err) {
        osp_error_free(cuda_ipc_close(dev, p));
        return err;
    }
    *ptr = p;
    return NULL;
}

osp_error *cuda_ipc_close(osp_device *dev, void *ptr) {
    cudaError_t st = cudaSetDevice(cuda_device_of(dev)->ordinal);
    if (st == cudaSuccess)
        st = cudaIpcCloseMemHandle(ptr);
    if (st != cudaSuccess)
        return status_error(OSP_ERROR_INTERNAL,
                            "failed to close CUDA IPC handle", st);
    return NULL;
}

osp_error *cuda_ipc_export(osp_device *dev, const void *ptr, void *handle,
                           size_t handle_len, uint64_t *offset) {
    cudaIpcMemHandle_t h;
    if (handle_len != sizeof h)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "a CUDA IPC handle has %zu bytes, not %zu",
                             sizeof h, handle_len);
    cudaError_t st = cudaSetDevice(cuda_device_of(dev)->ordinal);
    if (st == cudaSuccess)
        st = cudaIpcGetMemHandle(&h, (void *)ptr);
    if (st != cudaSuccess)
        return status_error(OSP_ERROR_INVALID_ARG,
                            "failed to get CUDA IPC handle", st);
    CUdeviceptr base = 0;
    size_t range = 0;
    osp_error *err = allocation_of(ptr, &base, &range);
    if (err)
        return err;
    memcpy(handle, &h, sizeof h);
    *offset = (uint64_t)((CUdeviceptr)(uintptr_t)ptr - base);
    return NULL;
}

/* One stream per GPU for these copies, made on first use; copies take
 * turns on it (cd->copy_lock) and each waits for its own end. */
osp_error *cuda_memcpy_sync(osp_device *dev, void *dst, const void *src,
                            size_t n, osp_copy_kind kind) {
    static const enum cudaMemcpyKind kinds[] = {
        [OSP_COPY_HOST_TO_DEVICE] = cudaMemcpyHostToDevice,
        [OSP_COPY_DEVICE_TO_HOST] = cudaMemcpyDeviceToHost,
        [OSP_COPY_DEVICE_TO_DEVICE] = cudaMemcpyDeviceToDevice,
        [OSP_COPY_HOST_TO_HOST] = cudaMemcpyHostToHost,
    };
    if (kind == OSP_COPY_HOST_TO_HOST) {
        memmove(dst, src, n);
        return NULL;
    }
    cuda_device *cd = cuda_device_of(dev);
    pthread_mutex_lock(&cd->copy_lock);
    cudaError_t st = cudaSetDevice(cd->ordinal);
    if (st == cudaSuccess && cd->copy_stream == NULL)
        st = cudaStreamCreateWithFlags(&cd->copy_stream, cudaStreamNonBlocking);
    if (st == cudaSuccess)
        st = cudaMemcpyAsync(dst, src, n, kinds[kind], cd->copy_stream);
    if (st == cudaSuccess)
        st = cudaStreamSynchronize(cd->copy_stream);
    pthread_mutex_unlock(&cd->copy_lock);
    if (st != cudaSuccess)
        return status_error(OSP_ERROR_INTERNAL, "GPU copy failed", st);
    return NULL;
}
