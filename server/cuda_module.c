/*
 * Loading the CUDA device module only where a GPU is (cuda_module.h).
 *
 * Measured on a host with the CUDA toolkit and no GPU, with models/:
 * when the program linked the CUDA device, idle RSS was 163 MiB and start
 * to ready 0.12-0.17 s (the CUDA runtime, cuBLAS and cuBLASLt mapped and
 * cudart initialised, only to find no device); with the probe below it is
 * 9.5 MiB and 0.015 s: one failed dlopen, or a cuInit that answers "no
 * device".
 */
#include "cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "osprey/log.h"

/* The driver API's entry points the probe needs (cuda.h, by value: this
 * file must build without the CUDA headers). CUDA_SUCCESS is 0. */
typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_device_get_count_fn)(int *count);

/* GPUs the NVIDIA driver sees: 0 without a driver, without a device, or
 * when the driver cannot initialise. */
static int driver_gpu_count(void) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver) {
        OSP_LOG_VERBOSE("no NVIDIA driver (libcuda.so.1): %s", dlerror());
        return 0;
    }
    int count = 0;
    cu_init_fn cu_init = (cu_init_fn)dlsym(driver, "cuInit");
    cu_device_get_count_fn cu_count =
        (cu_device_get_count_fn)dlsym(driver, "cuDeviceGetCount");
    int status = -1;
    if (cu_init && cu_count && (status = cu_init(0)) == 0)
        status = cu_count(&count);
    if (status != 0) {
        OSP_LOG_VERBOSE("the NVIDIA driver sees no GPU (CUresult %d)", status);
        count = 0;
    }
    /* The module's CUDA runtime opens the driver again; closing here keeps
     * a host without GPUs from keeping the driver mapped. */
    if (count == 0)
        dlclose(driver);
    return count;
}

/* Writes into path (cap bytes) the module file beside the executable
 * (`relative` appended to its folder). False when it cannot be named. */
static bool module_path_near_exe(const char *relative, char *path, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = '\0';
    int w = snprintf(path, cap, "%s/%s", exe, relative);
    return w > 0 && (size_t)w < cap;
}

/* dlopens the module: the environment's path, else beside the program. */
static void *open_module(void) {
    const char *from_env = getenv("OSPREY_CUDA_MODULE");
    if (from_env && from_env[0]) {
        void *m = dlopen(from_env, RTLD_NOW | RTLD_LOCAL);
        if (!m)
            OSP_LOG_WARN("OSPREY_CUDA_MODULE: %s", dlerror());
        return m;
    }
    static const char *const candidates[] = {"libosprey_cuda.so",
                                             "../lib/osprey/libosprey_cuda.so"};
    const char *last_error = "libosprey_cuda.so not found";
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char path[PATH_MAX];
        if (!module_path_near_exe(candidates[i], path, sizeof path) ||
            access(path, R_OK) != 0)
            continue;
        void *m = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (m)
            return m;
        last_error = dlerror();
    }
    OSP_LOG_WARN("%s", last_error);
    return NULL;
}

const osp_device_provider *cuda_module_load(void) {
    int gpus = driver_gpu_count();
    if (gpus == 0)
        return NULL;
    void *module = open_module();
    const osp_device_provider *provider =
        module ? dlsym(module, "osp_cuda_device_provider") : NULL;
    if (!provider) {
        OSP_LOG_WARN("%d GPU(s) found but the CUDA device module could not "
                     "be loaded; models run on the CPU",
                     gpus);
        if (module)
            dlclose(module);
        return NULL;
    }
    OSP_LOG_VERBOSE("CUDA device module loaded (%d GPU(s))", gpus);
    return provider; /* the module stays loaded: never dlclosed */
}
