/*
 * How the program sets up devices: the options of device discovery and
 * the device providers it lists (cuda/ provides one). Split from
 * device_impl.h so that server.h, which carries these options, does not
 * hand every user of the server API the device implementers' table.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "osprey/device.h"
#include "osprey/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OSP_CUDA_POOL_UNSET SIZE_MAX

struct osp_device_options;

/* A source of accelerator devices (cuda/ provides one). The program that
 * embeds the server lists its providers in osp_device_options; the device
 * layer itself names none, so it builds and runs without any. */
typedef struct osp_device_provider {
    const char *name; /* "cuda" */
    /* Creates up to `cap` devices into `out` and sets *count (0 when the
     * hardware or driver is missing: not an error). The devices are owned
     * by the device layer until destroy. */
    osp_error *(*create)(const struct osp_device_options *opts,
                         osp_device **out, int cap, int *count);
    /* Frees what create made; only at process exit, after every user. */
    void (*destroy)(osp_device **devices, int count);
} osp_device_provider;

/* Options for device discovery, from the command line. */
typedef struct osp_device_options {
    size_t
        pinned_pool_bytes; /* --pinned-memory-pool-byte-size; 0 = no pinning */
    size_t cuda_pool_bytes_default; /* per GPU, default 64 MiB */
    /* --cuda-memory-pool-byte-size=<gpu>:<bytes> overrides, indexed by GPU
     * ordinal; OSP_CUDA_POOL_UNSET = use the default. 0 reserves nothing
     * up front (the pool still grows on demand). */
    size_t cuda_pool_bytes[16];
    /* Accelerator providers, asked in order (borrowed; static tables).
     * Their devices are the "GPUs" of osp_device_cuda_get. None: the CPU
     * device only. */
    const osp_device_provider *const *providers;
    size_t n_providers;
} osp_device_options;

void osp_device_options_init(osp_device_options *opts);

/* Discovers devices once per process (idempotent; later calls return the
 * first result). Without a provider or a GPU it succeeds with 0 GPUs. */
osp_error *osp_devices_init(const osp_device_options *opts);
/* Frees GPU devices and pools; only at process exit, after every user. */
void osp_devices_shutdown(void);

#ifdef __cplusplus
}
#endif
