/*
 * The system shared memory registry (see kserve_shm.h): POSIX shared
 * memory objects opened with shm_open, mapped with mmap, listed by name in
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
#include "osprey/log.h"

/* Keys with this prefix (after any leading slashes) belong to Triton's
 * Python backend; clients may not register them. */
#define RESERVED_KEY_PREFIX "triton_python_backend_shm_region_"

struct kserve_shm_region {
    kserve_shm_registry *reg; /* borrowed: outlives its regions */
    kserve_shm_region *next;  /* in name order */
    char *name;               /* owned */
    char *key;                /* owned */
    uint64_t offset;
    uint64_t byte_size;
    void *base;     /* byte_size bytes at offset; NULL when 0 bytes */
    void *map_base; /* the mapping that holds them */
    size_t map_len;
    /* Guarded by reg->mu: requests using the region, and whether it was
     * unregistered while they did. */
    unsigned users;
    bool awaiting_unregister;
};

struct kserve_shm_registry {
    pthread_mutex_t mu;
    kserve_shm_region *head;
};

static osp_error *oom(void) {
    return osp_error_new(OSP_ERROR_UNAVAILABLE, "out of memory");
}

osp_error *kserve_shm_registry_new(kserve_shm_registry **out) {
    kserve_shm_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return oom();
    if (pthread_mutex_init(&reg->mu, NULL) != 0) {
        free(reg);
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "unable to create the shared memory registry");
    }
    *out = reg;
    return NULL;
}

static void region_unmap_free(kserve_shm_region *r) {
    if (r->map_base && munmap(r->map_base, r->map_len) != 0)
        OSP_LOG_ERROR("unable to munmap shared memory region '%s': %s", r->name,
                      strerror(errno));
    free(r->name);
    free(r->key);
    free(r);
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
        err = oom();
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

/* Removes r (linked at *link) now, or when its last user releases it.
 * Caller holds reg->mu. */
static void unregister_locked(kserve_shm_region **link) {
    kserve_shm_region *r = *link;
    if (r->users > 0) {
        r->awaiting_unregister = true;
        OSP_LOG_VERBOSE("Shared memory region '%s' will be unregistered "
                        "after in-flight requests complete.",
                        r->name);
        return;
    }
    *link = r->next;
    region_unmap_free(r);
}

osp_error *kserve_shm_unregister(kserve_shm_registry *reg, const char *name) {
    pthread_mutex_lock(&reg->mu);
    kserve_shm_region **link = find_link(reg, name);
    if (*link && strcmp((*link)->name, name) == 0)
        unregister_locked(link);
    pthread_mutex_unlock(&reg->mu);
    return NULL;
}

osp_error *kserve_shm_unregister_all(kserve_shm_registry *reg) {
    pthread_mutex_lock(&reg->mu);
    kserve_shm_region **link = &reg->head;
    while (*link) {
        kserve_shm_region *r = *link;
        unregister_locked(link);
        if (*link == r) /* kept for its users */
            link = &r->next;
    }
    pthread_mutex_unlock(&reg->mu);
    return NULL;
}

static void write_status(jbuf *out, const kserve_shm_region_info *r) {
    jbuf_puts(out, "{\"name\":");
    jbuf_json_cstr(out, r->name);
    jbuf_puts(out, ",\"key\":");
    jbuf_json_cstr(out, r->key);
    jbuf_puts(out, ",\"offset\":");
    jbuf_json_uint(out, r->offset);
    jbuf_puts(out, ",\"byte_size\":");
    jbuf_json_uint(out, r->byte_size);
    jbuf_putc(out, '}');
}

void kserve_shm_info_free(kserve_shm_region_info *infos, size_t n) {
    for (size_t i = 0; i < n && infos; i++) {
        free(infos[i].name);
        free(infos[i].key);
    }
    free(infos);
}

/* Copies region r into *info; false on OOM. */
static bool copy_info(const kserve_shm_region *r, kserve_shm_region_info *info) {
    info->name = strdup(r->name);
    info->key = strdup(r->key);
    info->offset = r->offset;
    info->byte_size = r->byte_size;
    return info->name && info->key;
}

osp_error *kserve_shm_list(kserve_shm_registry *reg, const char *name,
                           kserve_shm_region_info **infos, size_t *n) {
    osp_error *err = NULL;
    kserve_shm_region_info *out = NULL;
    size_t count = 0;
    pthread_mutex_lock(&reg->mu);
    if (name && name[0]) {
        kserve_shm_region *r = find(reg, name);
        if (!r) {
            err = osp_error_new(OSP_ERROR_NOT_FOUND,
                                "Unable to find system shared memory region: "
                                "'%s'",
                                name);
            goto out;
        }
        if (!(out = calloc(1, sizeof *out)) || !copy_info(r, &out[0])) {
            count = out ? 1 : 0;
            err = oom();
            goto out;
        }
        count = 1;
        goto out;
    }
    size_t total = 0;
    for (kserve_shm_region *r = reg->head; r; r = r->next)
        total++;
    if (total && !(out = calloc(total, sizeof *out))) {
        err = oom();
        goto out;
    }
    for (kserve_shm_region *r = reg->head; r; r = r->next) {
        if (!copy_info(r, &out[count++])) {
            err = oom();
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

osp_error *kserve_shm_status(kserve_shm_registry *reg, const char *name,
                             jbuf *out) {
    kserve_shm_region_info *infos = NULL;
    size_t n = 0;
    osp_error *err = kserve_shm_list(reg, name, &infos, &n);
    if (err)
        return err;
    jbuf_putc(out, '[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            jbuf_putc(out, ',');
        write_status(out, &infos[i]);
    }
    jbuf_putc(out, ']');
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

void kserve_shm_region_release(kserve_shm_region *r) {
    if (!r)
        return;
    kserve_shm_registry *reg = r->reg;
    pthread_mutex_lock(&reg->mu);
    if (--r->users == 0 && r->awaiting_unregister) {
        kserve_shm_region **link = find_link(reg, r->name);
        if (*link == r)
            unregister_locked(link);
    }
    pthread_mutex_unlock(&reg->mu);
}
