/*
 * GPU tensors of python models (Triton's DLPack support): a stub lends the
 * server a tensor in GPU memory as a CUDA IPC handle, an offset and a size
 * (python_protocol.h), and the server copies it once, through its CUDA
 * device, into the host buffer of the response's output or of a BLS
 * request's input; the other way, the server exports a GPU instance's
 * batch inputs for FORCE_CPU_ONLY_INPUT_TENSORS "no". Who owns what: a
 * lent tensor stays the stub's, alive until the server's RELEASE names its
 * lease (or, for BLS inputs, until the call's first answer); the server
 * only maps it while it copies. An exported input stays the core's, valid
 * for the stub while the EXEC runs.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "osprey/device.h"
#include "osprey/error.h"
#include "python_protocol.h"
#include "python_stub.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies the byte_size bytes of tensor `t` (borrowed) into host memory
 * `dst`: from `base` + its offset (the region or a frame's inline data,
 * ranges the decoder checked), or for a GPU tensor from its allocation,
 * opened through CUDA IPC on the tensor's GPU for the one device-to-host
 * copy and closed before this returns (an empty tensor opens nothing).
 * Errors (the request's; the server carries on): the server has no such
 * CUDA device (a CPU-only server), the handle does not open, the range
 * lies outside its allocation. */
osp_error *pygpu_read_tensor(const pyproto_output *t, const uint8_t *base,
                             void *dst);

/* Sends the RELEASE frame for the lent GPU tensors of `n` responses
 * (borrowed) once the server is done with them, whether they were copied
 * or not; nothing when none was lent. false only when the channel
 * broke. */
bool pygpu_release(pystub *stub, const pyproto_response *responses, size_t n);

/* The reference the stub opens for device memory `ptr` of `dev` (the
 * instance's GPU; borrowed), which lies inside one of its allocations:
 * *ref (lease 0) and *offset, ptr's offset in that allocation. */
osp_error *pygpu_export(osp_device *dev, const void *ptr, pyproto_gpu_ref *ref,
                        uint64_t *offset);

#ifdef __cplusplus
}
#endif
