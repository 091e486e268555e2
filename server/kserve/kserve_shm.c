/*
 * The shared memory registry (see kserve_shm.h): POSIX shared memory
 * objects opened with shm_open and mapped with mmap, and CUDA IPC handles
 * opened through the device layer (osp_device_ipc_open), listed by name in
 * name order (Triton keeps them in a std::map, and its status lists them
 * so).
 */
#include "kserve_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_util.h"
#include "osprey/device.h"
#include "osprey/log.h"

/* Keys with this prefix (after any leading slashes) belong to Triton's
 * Python backend; clients may not register them. */
#define RESERVED_KEY_PREFIX "triton_python_backend_shm_region_"

struct kserve_shm_region {
    kserve_shm_registry *reg; /* borrowed: outlives its regions */
    kserve_shm_region *next;  /* in name order */
    kserve_shm_kind kind;
    char *name; /* owned */
    char *key;  /* owned; system shared memory only */
    uint64_t offset;
    uint64_t byte_size;
    void *base;     /* byte_size bytes at offset; NULL when 0 bytes */
    void *map_base; /* system: the mapping that holds them */
    size_t map_len;
    /* CUDA: the GPU whose memory base is (opened with
     * osp_device_ipc_open; closed when the region goes) */
    osp_device *device;
    uint64_t device_id;
    /* Guarded by reg->mu: requests using the region, and whether it was
     * unregistered while they did. */
    unsigned users;
    bool awaiting_unregister;
};

struct kserve_shm_registry {
    pthread_mutex_t mu;
    kserve_shm_region *head;
};

osp_error *kserve_shm_registry_new(kserve_shm_registry **out) {
    kserve_shm_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return osp_error_out_of_memory();
    if (pthread_mutex_init(&reg->mu, NULL) != 0) {
        free(reg);
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "unable to create the shared memory registry");
    }
    *out = reg;
    return NULL;
}

/* Unmaps r's memory: munmap, or closes its CUDA IPC handle. On an error
 * (a handle CUDA refused to close) r keeps its memory. */
static osp_error *region_unmap(kserve_shm_region *r) {
    if (r->map_base && munmap(r->map_base, r->map_len) != 0)
        OSP_LOG_ERROR("unable to munmap shared memory region '%s': %s", r->name,
                      strerror(errno));
    r->map_base = NULL;
    if (r->device && r->base) {
        osp_error *err = osp_device_ipc_close(r->device, r->base);
        if (err)
            return err;
    }
    r->base = NULL;
    return NULL;
}

static void region_free(kserve_shm_region *r) {
    free(r->name);
    free(r->key);
    free(r);
}

/* For teardown: unmaps whatever it can, logs what it cannot. */
static void region_unmap_free(kserve_shm_region *r) {
    osp_error *err = region_unmap(r);
    if (err) {
        OSP_LOG_ERROR("shared memory region '%s': %s", r->name,
                      osp_error_message(err));
        osp_error_free(err);
    }
    region_free(r);
}

void kserve_shm_registry_free(kserve_shm_registry *reg) {
    if (!reg)
        return;
    kserve_shm_region *r = reg->head;
    while (r) {
        kserve_shm_region *next = r->next;
        region_unmap_free(r);
        r = next;
    }
    pthread_mutex_destroy(&reg->mu);
    free(reg);
}

/* The link that points at region `name`, or at where it would go. Caller
 * holds reg->mu. */
static kserve_shm_region **find_link(kserve_shm_registry *reg,
                                     const char *name) {
    kserve_shm_region **link = &reg->head;
    while (*link && strcmp((*link)->name, name) < 0)
        link = &(*link)->next;
    return link;
}

static kserve_shm_region *find(kserve_shm_registry *reg, const char *name) {
    kserve_shm_region *r = *find_link(reg, name);
    return r && strcmp(r->name, name) == 0 ? r : NULL;
}

/* Triton's ValidateSharedMemoryKey. */
static osp_error *validate_key(const char *name, const char *key) {
    const char *p = key;
    while (*p == '/')
        p++;
    if (!*p)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "cannot register shared memory region '%s' - "
                             "invalid shm key '%s'",
                             name, key);
    if (strncmp(p, RESERVED_KEY_PREFIX, strlen(RESERVED_KEY_PREFIX)) == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "cannot register shared memory region '%s' with "
                             "key '%s' as the key contains the reserved "
                             "prefix '%s'",
                             name, key, RESERVED_KEY_PREFIX);
    return NULL;
}

/* Opens, checks and maps the object into r (its name, key, offset and
 * byte_size set): r->base points at the region, inside the mapping
 * r->map_base (r->map_len bytes) that starts at a page boundary, as mmap
 * wants; both NULL for 0 bytes. */
static osp_error *map_region(kserve_shm_region *r) {
    osp_error *err = NULL;
    int fd = shm_open(r->key, O_RDWR, S_IRUSR | S_IWUSR);
    if (fd < 0) {
        OSP_LOG_VERBOSE("shm_open failed, errno: %d", errno);
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "Unable to open shared memory region: '%s'",
                             r->key);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0) {
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "Invalid shared memory region: '%s'", r->key);
        goto out;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (r->offset > size || r->byte_size > size - r->offset) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to register shared memory region '%s': "
                            "invalid args",
                            r->name);
        goto out;
    }
    if (r->byte_size == 0)
        goto out; /* nothing to map; every use of it fails its checks */
    long page = sysconf(_SC_PAGESIZE);
    uint64_t skew = page > 0 ? r->offset % (uint64_t)page : 0;
    if (r->byte_size > SIZE_MAX - skew) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to register shared memory region '%s': "
                            "invalid args",
                            r->name);
        goto out;
    }
    size_t len = (size_t)(r->byte_size + skew);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   (off_t)(r->offset - skew));
    if (m == MAP_FAILED) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to register shared memory region '%s': "
                            "unable to process address space%s",
                            r->name, strerror(errno));
        goto out;
    }
    r->map_base = m;
    r->map_len = len;
    r->base = (char *)m + skew;
out:
    close(fd);
    return err;
}

osp_error *kserve_shm_register(kserve_shm_registry *reg, const char *name,
                               const char *key, uint64_t offset,
                               uint64_t byte_size) {
    osp_error *err = validate_key(name, key);
    if (err)
        return err;
    kserve_shm_region *r = NULL;
    pthread_mutex_lock(&reg->mu);
    kserve_shm_region **link = find_link(reg, name);
    if (*link && strcmp((*link)->name, name) == 0) {
        err =
            osp_error_new(OSP_ERROR_ALREADY_EXISTS,
                          "shared memory region '%s' already in manager", name);
        goto out;
    }
    r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name)) || !(r->key = strdup(key))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    r->reg = reg;
    r->offset = offset;
    r->byte_size = byte_size;
    if ((err = map_region(r)))
        goto out;
    r->next = *link;
    *link = r;
    r = NULL;
out:
    pthread_mutex_unlock(&reg->mu);
    if (r)
        region_unmap_free(r);
    return err;
}

bool kserve_shm_cuda_supported(void) {
    int n = osp_device_cuda_count();
    for (int i = 0; i < n; i++) {
        osp_device *dev = NULL;
        osp_error *err = osp_device_cuda_get(i, &dev);
        if (err)
            osp_error_free(err);
        else if (osp_device_supports_ipc(dev))
            return true;
    }
    return false;
}

/* Opens the handle into r (name, device_id and byte_size set) with
 * Triton's checks and messages: a handle that does not open gets the
 * generic message; an allocation too small, or of a size the driver does
 * not tell (INTERNAL from osp_device_ipc_open), names the region. The
 * reasons are logged. */
static osp_error *open_cuda_region(kserve_shm_region *r, const void *handle,
                                   size_t handle_len) {
    osp_device *dev = NULL;
    osp_error *err = NULL;
    if (r->device_id > INT32_MAX)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to open CUDA IPC handle: no GPU %llu",
                            (unsigned long long)r->device_id);
    else
        err = osp_device_cuda_get((int)r->device_id, &dev);
    void *base = NULL;
    size_t size = 0;
    if (!err)
        err = osp_device_ipc_open(dev, handle, handle_len, &base, &size);
    if (err) {
        bool size_unknown = osp_error_get_code(err) == OSP_ERROR_INTERNAL;
        OSP_LOG_ERROR("%s", osp_error_message(err));
        osp_error_free(err);
        if (size_unknown)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "failed to register shared memory region "
                                 "'%s': invalid args",
                                 r->name);
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "failed to register shared memory region: "
                             "invalid args");
    }
    if (r->byte_size > size) {
        OSP_LOG_ERROR("CUDA shared memory region '%s': %llu bytes asked, the "
                      "exported allocation has %zu",
                      r->name, (unsigned long long)r->byte_size, size);
        osp_error *close_err = osp_device_ipc_close(dev, base);
        if (close_err) {
            OSP_LOG_ERROR("%s", osp_error_message(close_err));
            osp_error_free(close_err);
        }
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "failed to register shared memory region '%s': "
                             "invalid args",
                             r->name);
    }
    r->device = dev;
    r->base = base;
    return NULL;
}

osp_error *kserve_shm_register_cuda(kserve_shm_registry *reg, const char *name,
                                    const void *handle, size_t handle_len,
                                    uint64_t device_id, uint64_t byte_size) {
    osp_error *err = NULL;
    kserve_shm_region *r = NULL;
    pthread_mutex_lock(&reg->mu);
    kserve_shm_region **link = find_link(reg, name);
    if (*link && strcmp((*link)->name, name) == 0) {
        err =
            osp_error_new(OSP_ERROR_ALREADY_EXISTS,
                          "shared memory region '%s' already in manager", name);
        goto out;
    }
    r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    r->reg = reg;
    r->kind = KSERVE_SHM_CUDA;
    r->device_id = device_id;
    r->byte_size = byte_size;
    if ((err = open_cuda_region(r, handle, handle_len)))
        goto out;
    r->next = *link;
    *link = r;
    r = NULL;
out:
    pthread_mutex_unlock(&reg->mu);
    if (r)
        region_free(r);
    return err;
}

/* Removes r (linked at *link) now, or when its last user releases it.
 * Caller holds reg->mu. An error (a CUDA handle that did not close) leaves
 * r registered. */
static osp_error *unregister_locked(kserve_shm_region **link) {
    kserve_shm_region *r = *link;
    if (r->users > 0) {
        r->awaiting_unregister = true;
        OSP_LOG_VERBOSE("Shared memory region '%s' will be unregistered "
                        "after in-flight requests complete.",
                        r->name);
        return NULL;
    }
    osp_error *err = region_unmap(r);
    if (err)
        return err;
    *link = r->next;
    region_free(r);
    return NULL;
}

osp_error *kserve_shm_unregister(kserve_shm_registry *reg, kserve_shm_kind kind,
                                 const char *name) {
    osp_error *err = NULL;
    pthread_mutex_lock(&reg->mu);
    kserve_shm_region **link = find_link(reg, name);
    if (*link && strcmp((*link)->name, name) == 0 && (*link)->kind == kind)
        err = unregister_locked(link);
    pthread_mutex_unlock(&reg->mu);
    return err;
}

osp_error *kserve_shm_unregister_all(kserve_shm_registry *reg,
                                     kserve_shm_kind kind) {
    bytebuf failed;
    bytebuf_init(&failed);
    pthread_mutex_lock(&reg->mu);
    kserve_shm_region **link = &reg->head;
    while (*link) {
        kserve_shm_region *r = *link;
        if (r->kind == kind) {
            osp_error *err = unregister_locked(link);
            if (err) {
                OSP_LOG_VERBOSE("%s", osp_error_message(err));
                osp_error_free(err);
                bytebuf_puts(&failed, r->name);
                bytebuf_puts(&failed, " ,");
            }
        }
        if (*link == r) /* kept: in use, of the other kind, or failed */
            link = &r->next;
    }
    pthread_mutex_unlock(&reg->mu);
    osp_error *err = NULL;
    if (failed.len > 0) {
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "Failed to unregister the following %s shared "
                            "memory regions: %.*s",
                            kind == KSERVE_SHM_CUDA ? "cuda" : "system",
                            (int)failed.len, failed.data);
        OSP_LOG_ERROR("%s", osp_error_message(err));
    }
    bytebuf_free(&failed);
    return err;
}

static void write_status(bytebuf *out, const kserve_shm_region_info *r) {
    bytebuf_puts(out, "{\"name\":");
    json_write_cstr(out, r->name);
    if (r->kind == KSERVE_SHM_SYSTEM) {
        bytebuf_puts(out, ",\"key\":");
        json_write_cstr(out, r->key);
        bytebuf_puts(out, ",\"offset\":");
        json_write_uint(out, r->offset);
    } else {
        bytebuf_puts(out, ",\"device_id\":");
        json_write_uint(out, r->device_id);
    }
    bytebuf_puts(out, ",\"byte_size\":");
    json_write_uint(out, r->byte_size);
    bytebuf_putc(out, '}');
}

void kserve_shm_info_free(kserve_shm_region_info *infos, size_t n) {
    for (size_t i = 0; i < n && infos; i++) {
        free(infos[i].name);
        free(infos[i].key);
    }
    free(infos);
}

/* Copies region r into *info; false on OOM. */
static bool copy_info(const kserve_shm_region *r,
                      kserve_shm_region_info *info) {
    info->kind = r->kind;
    info->name = strdup(r->name);
    info->key = r->key ? strdup(r->key) : NULL;
    info->offset = r->offset;
    info->byte_size = r->byte_size;
    info->device_id = r->device_id;
    return info->name && (info->key || !r->key);
}

osp_error *kserve_shm_list(kserve_shm_registry *reg, kserve_shm_kind kind,
                           const char *name, kserve_shm_region_info **infos,
                           size_t *n) {
    osp_error *err = NULL;
    kserve_shm_region_info *out = NULL;
    size_t count = 0;
    bool cuda = kind == KSERVE_SHM_CUDA;
    pthread_mutex_lock(&reg->mu);
    if (name && name[0]) {
        kserve_shm_region *r = find(reg, name);
        if (!r) {
            err = osp_error_new(OSP_ERROR_NOT_FOUND,
                                "Unable to find %s shared memory region: '%s'",
                                cuda ? "cuda" : "system", name);
            goto out;
        }
        if (r->kind != kind) {
            err = osp_error_new(OSP_ERROR_NOT_FOUND,
                                "The region named '%s' is registered as %s "
                                "shared memory, not %s shared memory",
                                name, cuda ? "system" : "CUDA",
                                cuda ? "CUDA" : "system");
            goto out;
        }
        if (!(out = calloc(1, sizeof *out)) || !copy_info(r, &out[0])) {
            count = out ? 1 : 0;
            err = osp_error_out_of_memory();
            goto out;
        }
        count = 1;
        goto out;
    }
    size_t total = 0;
    for (kserve_shm_region *r = reg->head; r; r = r->next)
        total += r->kind == kind;
    if (total && !(out = calloc(total, sizeof *out))) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (kserve_shm_region *r = reg->head; r; r = r->next) {
        if (r->kind != kind)
            continue;
        if (!copy_info(r, &out[count++])) {
            err = osp_error_out_of_memory();
            goto out;
        }
    }
out:
    pthread_mutex_unlock(&reg->mu);
    if (err) {
        kserve_shm_info_free(out, count);
        return err;
    }
    *infos = out;
    *n = count;
    return NULL;
}

osp_error *kserve_shm_status(kserve_shm_registry *reg, kserve_shm_kind kind,
                             const char *name, bytebuf *out) {
    kserve_shm_region_info *infos = NULL;
    size_t n = 0;
    osp_error *err = kserve_shm_list(reg, kind, name, &infos, &n);
    if (err)
        return err;
    bytebuf_putc(out, '[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            bytebuf_putc(out, ',');
        write_status(out, &infos[i]);
    }
    bytebuf_putc(out, ']');
    kserve_shm_info_free(infos, n);
    return NULL;
}

osp_error *kserve_shm_acquire(kserve_shm_registry *reg, const char *name,
                              uint64_t offset, uint64_t byte_size,
                              kserve_shm_region **region, void **addr) {
    osp_error *err = NULL;
    pthread_mutex_lock(&reg->mu);
    kserve_shm_region *r = find(reg, name);
    if (!r) {
        err = osp_error_new(OSP_ERROR_NOT_FOUND,
                            "Unable to find shared memory region: '%s'", name);
        goto out;
    }
    if (offset >= r->byte_size) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Invalid offset for shared memory region: '%s'",
                            name);
        goto out;
    }
    if (byte_size > SIZE_MAX - offset) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Integer overflow detected: byte_size (%llu) + "
                            "offset (%llu) exceeds maximum value (%llu) for "
                            "region '%s'",
                            (unsigned long long)byte_size,
                            (unsigned long long)offset,
                            (unsigned long long)SIZE_MAX, name);
        goto out;
    }
    if (offset + byte_size > r->byte_size) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "Invalid offset + byte size for shared memory "
                            "region: '%s'",
                            name);
        goto out;
    }
    r->users++;
    *region = r;
    *addr = (char *)r->base + offset;
out:
    pthread_mutex_unlock(&reg->mu);
    return err;
}

osp_error *kserve_shm_read(const kserve_shm_region *region, const void *addr,
                           void *dst, size_t n) {
    if (n == 0)
        return NULL;
    if (region->kind == KSERVE_SHM_CUDA)
        return osp_device_memcpy(region->device, dst, addr, n,
                                 OSP_COPY_DEVICE_TO_HOST);
    memcpy(dst, addr, n);
    return NULL;
}

osp_error *kserve_shm_write(const kserve_shm_region *region, void *addr,
                            const void *src, size_t n) {
    if (n == 0)
        return NULL;
    if (region->kind == KSERVE_SHM_CUDA)
        return osp_device_memcpy(region->device, addr, src, n,
                                 OSP_COPY_HOST_TO_DEVICE);
    memcpy(addr, src, n);
    return NULL;
}

void kserve_shm_region_release(kserve_shm_region *r) {
    if (!r)
        return;
    kserve_shm_registry *reg = r->reg;
    pthread_mutex_lock(&reg->mu);
    if (--r->users == 0 && r->awaiting_unregister) {
        kserve_shm_region **link = find_link(reg, r->name);
        if (*link == r) {
            osp_error *err = unregister_locked(link);
            if (err) {
                OSP_LOG_ERROR("%s", osp_error_message(err));
                osp_error_free(err);
            }
        }
    }
    pthread_mutex_unlock(&reg->mu);
}
