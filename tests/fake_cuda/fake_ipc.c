/*
 * CUDA IPC on the fake runtime (see fake_cuda.h for the handle layout):
 * cudaIpcGetMemHandle, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle, and the
 * driver's cuMemGetAddressRange as the runtime hands it out
 * (cudaGetDriverEntryPointByVersion).
 *
 * A handle of another process's allocation is mapped through that
 * process's memfd (/proc/<pid>/fd/<fd>): the server opens what a python
 * stub exported and the other way round, as two CUDA processes do. Unlike
 * CUDA, a process may open its own handles (the device's unit tests do);
 * such an open returns the allocation itself. Every open must be closed
 * once: handles left open at exit are reported on stderr, so that a test
 * of the server (or of a stub) sees one it forgot.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_cuda.h"

/* Pointers handed out by cudaIpcOpenMemHandle and not yet closed. */
typedef struct open_handle {
    void *ptr;
    bool imported; /* FAKE_IPC_SHM: unmapped on close */
    struct open_handle *next;
} open_handle;

static pthread_mutex_t g_ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static open_handle *g_open;

static void write_magic(cudaIpcMemHandle_t *h, char kind) {
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, FAKE_IPC_MAGIC, sizeof FAKE_IPC_MAGIC);
    h->reserved[16] = kind;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *dev_ptr) {
    fake_enter(__func__);
    fake_export e;
    if (handle == NULL || dev_ptr == NULL ||
        !fake_allocation_export(dev_ptr, &e))
        return fake_status(cudaErrorInvalidValue);
    write_magic(handle, FAKE_IPC_LOCAL);
    uint64_t addr = (uint64_t)(uintptr_t)e.base, size = e.size;
    uint32_t pid = (uint32_t)getpid();
    int32_t fd = e.fd;
    memcpy(handle->reserved + 24, &addr, sizeof addr);
    memcpy(handle->reserved + 32, &pid, sizeof pid);
    memcpy(handle->reserved + 36, &fd, sizeof fd);
    memcpy(handle->reserved + 40, &size, sizeof size);
    memcpy(handle->reserved + 48, &e.id, sizeof e.id);
    return cudaSuccess;
}

/* Maps the allocation of another process that h names (FAKE_IPC_LOCAL)
 * on the current GPU, through that process's memfd. */
static cudaError_t open_process_handle(const cudaIpcMemHandle_t *h,
                                       void **ptr) {
    uint32_t pid;
    int32_t fd;
    uint64_t size;
    memcpy(&pid, h->reserved + 32, sizeof pid);
    memcpy(&fd, h->reserved + 36, sizeof fd);
    memcpy(&size, h->reserved + 40, sizeof size);
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%d", (unsigned)pid, (int)fd);
    int mine = open(path, O_RDWR | O_CLOEXEC);
    if (mine < 0)
        return fake_status(cudaErrorInvalidValue);
    struct stat st;
    cudaError_t status = cudaErrorInvalidValue;
    if (fstat(mine, &st) == 0 && size > 0 && (uint64_t)st.st_size >= size)
        status = fake_allocation_import(mine, (size_t)size,
                                        fake_current_device(), ptr);
    close(mine);
    return fake_status(status);
}

/* Maps the shared memory object named in h on the current GPU. */
static cudaError_t open_shm_handle(const cudaIpcMemHandle_t *h, void **ptr) {
    char name[41];
    memcpy(name, h->reserved + 24, 40);
    name[40] = '\0';
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return fake_status(cudaErrorInvalidValue);
    struct stat st;
    cudaError_t status = cudaErrorInvalidValue;
    if (fstat(fd, &st) == 0 && st.st_size > 0)
        status = fake_allocation_import(fd, (size_t)st.st_size,
                                        fake_current_device(), ptr);
    close(fd);
    return fake_status(status);
}

cudaError_t cudaIpcOpenMemHandle(void **dev_ptr, cudaIpcMemHandle_t handle,
                                 unsigned int flags) {
    (void)flags;
    fake_enter(__func__);
    if (dev_ptr == NULL ||
        memcmp(handle.reserved, FAKE_IPC_MAGIC, sizeof FAKE_IPC_MAGIC) != 0)
        return fake_status(cudaErrorInvalidValue);
    open_handle *o = calloc(1, sizeof *o);
    if (o == NULL)
        return fake_status(cudaErrorMemoryAllocation);
    cudaError_t st = cudaErrorInvalidValue;
    uint32_t pid = 0;
    memcpy(&pid, handle.reserved + 32, sizeof pid);
    if (handle.reserved[16] == FAKE_IPC_LOCAL &&
        (pid == 0 || pid == (uint32_t)getpid())) {
        uint64_t addr;
        memcpy(&addr, handle.reserved + 24, sizeof addr);
        void *p = (void *)(uintptr_t)addr;
        if (fake_allocation_base(p, NULL) == p) {
            o->ptr = p;
            st = cudaSuccess;
        }
    } else if (handle.reserved[16] == FAKE_IPC_LOCAL) {
        st = open_process_handle(&handle, &o->ptr);
        o->imported = true;
    } else if (handle.reserved[16] == FAKE_IPC_SHM) {
        st = open_shm_handle(&handle, &o->ptr);
        o->imported = true;
    }
    if (st != cudaSuccess) {
        free(o);
        return fake_status(st);
    }
    pthread_mutex_lock(&g_ipc_lock);
    o->next = g_open;
    g_open = o;
    pthread_mutex_unlock(&g_ipc_lock);
    *dev_ptr = o->ptr;
    return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *dev_ptr) {
    fake_enter(__func__);
    open_handle *o = NULL;
    pthread_mutex_lock(&g_ipc_lock);
    for (open_handle **it = &g_open; *it != NULL; it = &(*it)->next)
        if ((*it)->ptr == dev_ptr) {
            o = *it;
            *it = o->next;
            break;
        }
    pthread_mutex_unlock(&g_ipc_lock);
    if (o == NULL)
        return fake_status(cudaErrorInvalidValue);
    cudaError_t st =
        o->imported ? fake_allocation_unimport(dev_ptr) : cudaSuccess;
    free(o);
    return st;
}

/* The driver's cuMemGetAddressRange over the fake's allocations. */
static CUresult fake_mem_get_address_range(CUdeviceptr *base, size_t *size,
                                           CUdeviceptr ptr) {
    size_t bytes = 0;
    void *b = fake_allocation_base((void *)(uintptr_t)ptr, &bytes);
    if (b == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (base != NULL)
        *base = (CUdeviceptr)(uintptr_t)b;
    if (size != NULL)
        *size = bytes;
    return CUDA_SUCCESS;
}

cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **func_ptr, unsigned int cuda_version,
    unsigned long long flags, enum cudaDriverEntryPointQueryResult *status) {
    (void)cuda_version;
    (void)flags;
    fake_enter(__func__);
    if (symbol == NULL || func_ptr == NULL)
        return fake_status(cudaErrorInvalidValue);
    *func_ptr = NULL;
    if (strcmp(symbol, "cuMemGetAddressRange") == 0)
        *func_ptr = (void *)fake_mem_get_address_range;
    if (status != NULL)
        *status = *func_ptr != NULL ? cudaDriverEntryPointSuccess
                                    : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

__attribute__((destructor)) static void report_open_handles(void) {
    size_t n = 0;
    pthread_mutex_lock(&g_ipc_lock);
    for (open_handle *o = g_open; o != NULL; o = o->next)
        n++;
    pthread_mutex_unlock(&g_ipc_lock);
    if (n > 0)
        fprintf(stderr,
                "fake CUDA: %zu IPC memory handle%s still open at "
                "exit\n",
                n, n == 1 ? "" : "s");
}
