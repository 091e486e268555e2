/*
 * The CUDA device provider: what a program lists in
 * osp_device_options.providers to serve models on NVIDIA GPUs. The only
 * symbol of cuda/ that code outside it names.
 */
#pragma once

#include "osprey/device_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const osp_device_provider osp_cuda_device_provider;

#ifdef __cplusplus
}
#endif
