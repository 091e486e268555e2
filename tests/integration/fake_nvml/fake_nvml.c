/*
 * A stand-in for libnvidia-ml.so.1 with two fake GPUs and fixed readings,
 * so that the integration suite checks the GPU metrics (loaded with dlopen
 * at run time) on machines without an NVIDIA driver. Only the entry points
 * server/http/metrics.c resolves are defined; their signatures follow
 * nvml.h (handles are opaque pointers, 0 is NVML_SUCCESS).
 */
#include <stdio.h>

typedef struct fake_device {
    int index;
    unsigned long long energy_mj;
} fake_device;

static fake_device devices[2] = {{0, 5000}, {1, 9000}};

typedef struct nvml_utilization {
    unsigned int gpu, memory;
} nvml_utilization;

typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory;

int nvmlInit_v2(void) {
    return 0;
}

int nvmlShutdown(void) {
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    *count = 2;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, fake_device **out) {
    if (index >= 2)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *out = &devices[index];
    return 0;
}

int nvmlDeviceGetUUID(fake_device *d, char *uuid, unsigned int len) {
    snprintf(uuid, len, "GPU-fake-%d", d->index);
    return 0;
}

int nvmlDeviceGetUtilizationRates(fake_device *d, nvml_utilization *u) {
    u->gpu = 25u + 50u * (unsigned)d->index;
    u->memory = 10;
    return 0;
}

int nvmlDeviceGetMemoryInfo(fake_device *d, nvml_memory *m) {
    m->total = 80ull << 30;
    m->used = (1ull + (unsigned long long)d->index) << 30;
    m->free = m->total - m->used;
    return 0;
}

int nvmlDeviceGetPowerUsage(fake_device *d, unsigned int *mw) {
    *mw = 100000u + 1000u * (unsigned)d->index;
    return 0;
}

int nvmlDeviceGetPowerManagementLimit(fake_device *d, unsigned int *mw) {
    (void)d;
    *mw = 700000u;
    return 0;
}

/* Each reading adds 2 J, so a scrape after start reports 2 J per read. */
int nvmlDeviceGetTotalEnergyConsumption(fake_device *d,
                                        unsigned long long *mj) {
    d->energy_mj += 2000;
    *mj = d->energy_mj;
    return 0;
}
