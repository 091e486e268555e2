/* GPU tensors of python models (python_gpu.h). */
#include "python_gpu.h"

#include <string.h>

/* Copies GPU tensor `t` into dst through CUDA IPC. */
static osp_error *read_from_gpu(const pyproto_output *t, void *dst) {
    osp_device *dev = NULL;
    osp_error *err = osp_device_cuda_get(t->gpu.device_id, &dev);
    if (err) {
        osp_error_free(err);
        /* Triton's words for a GPU tensor where there is no GPU. */
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "DLPack capsule passed pointer to memory "
                             "allocated on GPU device, when GPU is not "
                             "available: tensor '%s' is in the memory of CUDA "
                             "device %d and this server has no CUDA device %d",
                             t->name, (int)t->gpu.device_id,
                             (int)t->gpu.device_id);
    }
    void *base = NULL;
    size_t size = 0;
    err = osp_device_ipc_open(dev, t->gpu.ipc_handle, sizeof t->gpu.ipc_handle,
                              &base, &size);
    if (err) {
        osp_error *named =
            osp_error_new(osp_error_get_code(err), "GPU tensor '%s': %s",
                          t->name, osp_error_message(err));
        osp_error_free(err);
        return named;
    }
    if (t->offset > size || t->byte_size > size - t->offset)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "GPU tensor '%s' (%llu bytes at offset %llu) lies "
                            "outside its CUDA allocation of %zu bytes",
                            t->name, (unsigned long long)t->byte_size,
                            (unsigned long long)t->offset, size);
    else
        err = osp_device_memcpy(dev, dst, (const uint8_t *)base + t->offset,
                                t->byte_size, OSP_COPY_DEVICE_TO_HOST);
    osp_error *closed = osp_device_ipc_close(dev, base);
    if (!err)
        return closed;
    osp_error_free(closed);
    return err;
}

osp_error *pygpu_read_tensor(const pyproto_output *t, const uint8_t *base,
                             void *dst) {
    if (t->byte_size == 0)
        return NULL;
    if (t->on_gpu)
        return read_from_gpu(t, dst);
    memcpy(dst, base + t->offset, t->byte_size);
    return NULL;
}

bool pygpu_release(pystub *stub, const pyproto_response *responses, size_t n) {
    pyproto_text payload = {0};
    bool sent = true;
    if (pyproto_append_release(&payload, responses, n) > 0) {
        /* Without memory for the frame the stub keeps the tensors until
         * it exits: a leak, never a use after free. */
        if (!payload.failed)
            sent =
                pystub_send(stub, PYPROTO_RELEASE, payload.data, payload.len);
    }
    pyproto_text_free(&payload);
    return sent;
}

osp_error *pygpu_export(osp_device *dev, const void *ptr, pyproto_gpu_ref *ref,
                        uint64_t *offset) {
    osp_device_info info;
    osp_device_get_info(dev, &info);
    memset(ref, 0, sizeof *ref);
    ref->device_id = info.index;
    return osp_device_ipc_export(dev, ptr, ref->ipc_handle,
                                 sizeof ref->ipc_handle, offset);
}
