/*
 * The CUDA device as a run-time module (libosprey_cuda.so, built from
 * cuda/): the osprey program asks for it only on a host whose NVIDIA
 * driver sees a GPU, so a host without one never maps the CUDA runtime
 * and cuBLAS (~150 MiB resident with cuBLASLt) nor initialises them.
 */
#pragma once

#include "osprey/device_impl.h"

/* The CUDA device provider, or NULL when this host cannot use it. In
 * order, each step cheap before the next:
 *   1. the driver: dlopen("libcuda.so.1"), cuInit(0) and
 *      cuDeviceGetCount() > 0; the driver library is closed again, the
 *      module opens its own reference;
 *   2. the module: $OSPREY_CUDA_MODULE when set, else libosprey_cuda.so
 *      beside the executable, else ../lib/osprey/libosprey_cuda.so from
 *      it; its symbol osp_cuda_device_provider.
 * A missing driver or no GPU is logged at verbose level; a GPU without a
 * loadable module is a warning (the models then run on the CPU). The
 * module stays loaded for the life of the process; the provider returned
 * is borrowed from it. Call once, from main(), before the server starts. */
const osp_device_provider *cuda_module_load(void);
