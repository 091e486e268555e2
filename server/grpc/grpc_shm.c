/*
 * The shared memory RPCs, answering as the HTTP routes do
 * (server/http/kserve_shm_http.c), on the one registry of
 * server/kserve/kserve_shm.c: system regions, and CUDA regions opened from
 * CUDA IPC handles where a GPU can open them (elsewhere register fails with
 * "GPUs not supported", as a Triton built without GPU support says).
 * Status is always open; register and unregister need --allow-client-shm.
 */
#include <stdlib.h>
#include <string.h>

#include "grpc_internal.h"
#include "grpc_service.pb-c.h"

static osp_error *disabled_error(void) {
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "Client shared memory is disabled. Start the server "
                         "with '--allow-client-shm=true' to enable.");
}

static bool failed(kgrpc_call *call, osp_error *err) {
    if (!err)
        return false;
    kgrpc_call_reply_error(call, err);
    osp_error_free(err);
    return true;
}

void kgrpc_system_shm_status(kgrpc_call *call) {
    Inference__SystemSharedMemoryStatusRequest *req =
        (Inference__SystemSharedMemoryStatusRequest *)kgrpc_call_unpack(
            call, &inference__system_shared_memory_status_request__descriptor);
    if (!req)
        return;
    kserve_shm_registry *reg = call->server->opts.shm;
    kserve_shm_region_info *infos = NULL;
    size_t n = 0;
    osp_error *err =
        reg ? kserve_shm_list(reg, KSERVE_SHM_SYSTEM, req->name, &infos, &n)
            : NULL;
    Inference__SystemSharedMemoryStatusResponse__RegionStatus *regions =
        calloc(n ? n : 1, sizeof *regions);
    Inference__SystemSharedMemoryStatusResponse__RegionsEntry *entries =
        calloc(n ? n : 1, sizeof *entries);
    Inference__SystemSharedMemoryStatusResponse__RegionsEntry **ptrs =
        calloc(n ? n : 1, sizeof *ptrs);
    if (!err && (!regions || !entries || !ptrs))
        err = osp_error_out_of_memory();
    if (!err) {
        for (size_t i = 0; i < n; i++) {
            inference__system_shared_memory_status_response__region_status__init(
                &regions[i]);
            regions[i].name = infos[i].name;
            regions[i].key = infos[i].key;
            regions[i].offset = infos[i].offset;
            regions[i].byte_size = infos[i].byte_size;
            inference__system_shared_memory_status_response__regions_entry__init(
                &entries[i]);
            entries[i].key = infos[i].name;
            entries[i].value = &regions[i];
            ptrs[i] = &entries[i];
        }
        Inference__SystemSharedMemoryStatusResponse resp =
            INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__INIT;
        resp.regions = ptrs;
        resp.n_regions = n;
        kgrpc_call_reply(call, &resp.base);
    }
    free(regions);
    free(entries);
    free(ptrs);
    kserve_shm_info_free(infos, n);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    failed(call, err);
}

void kgrpc_system_shm_register(kgrpc_call *call) {
    Inference__SystemSharedMemoryRegisterRequest *req =
        (Inference__SystemSharedMemoryRegisterRequest *)kgrpc_call_unpack(
            call,
            &inference__system_shared_memory_register_request__descriptor);
    if (!req)
        return;
    const kgrpc_server *s = call->server;
    osp_error *err = !s->opts.allow_client_shm || !s->opts.shm
                         ? disabled_error()
                         : kserve_shm_register(s->opts.shm, req->name, req->key,
                                               req->offset, req->byte_size);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (!failed(call, err)) {
        Inference__SystemSharedMemoryRegisterResponse resp =
            INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
        kgrpc_call_reply(call, &resp.base);
    }
}

void kgrpc_system_shm_unregister(kgrpc_call *call) {
    Inference__SystemSharedMemoryUnregisterRequest *req =
        (Inference__SystemSharedMemoryUnregisterRequest *)kgrpc_call_unpack(
            call,
            &inference__system_shared_memory_unregister_request__descriptor);
    if (!req)
        return;
    const kgrpc_server *s = call->server;
    osp_error *err =
        !s->opts.allow_client_shm || !s->opts.shm ? disabled_error()
        : req->name[0]
            ? kserve_shm_unregister(s->opts.shm, KSERVE_SHM_SYSTEM, req->name)
            : kserve_shm_unregister_all(s->opts.shm, KSERVE_SHM_SYSTEM);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (!failed(call, err)) {
        Inference__SystemSharedMemoryUnregisterResponse resp =
            INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
        kgrpc_call_reply(call, &resp.base);
    }
}

void kgrpc_cuda_shm_status(kgrpc_call *call) {
    Inference__CudaSharedMemoryStatusRequest *req =
        (Inference__CudaSharedMemoryStatusRequest *)kgrpc_call_unpack(
            call, &inference__cuda_shared_memory_status_request__descriptor);
    if (!req)
        return;
    kserve_shm_registry *reg = call->server->opts.shm;
    kserve_shm_region_info *infos = NULL;
    size_t n = 0;
    osp_error *err = NULL;
    if (reg)
        err = kserve_shm_list(reg, KSERVE_SHM_CUDA, req->name, &infos, &n);
    else if (req->name[0])
        err = osp_error_new(OSP_ERROR_NOT_FOUND,
                            "Unable to find cuda shared memory region: '%s'",
                            req->name);
    Inference__CudaSharedMemoryStatusResponse__RegionStatus *regions =
        calloc(n ? n : 1, sizeof *regions);
    Inference__CudaSharedMemoryStatusResponse__RegionsEntry *entries =
        calloc(n ? n : 1, sizeof *entries);
    Inference__CudaSharedMemoryStatusResponse__RegionsEntry **ptrs =
        calloc(n ? n : 1, sizeof *ptrs);
    if (!err && (!regions || !entries || !ptrs))
        err = osp_error_out_of_memory();
    if (!err) {
        for (size_t i = 0; i < n; i++) {
            inference__cuda_shared_memory_status_response__region_status__init(
                &regions[i]);
            regions[i].name = infos[i].name;
            regions[i].device_id = infos[i].device_id;
            regions[i].byte_size = infos[i].byte_size;
            inference__cuda_shared_memory_status_response__regions_entry__init(
                &entries[i]);
            entries[i].key = infos[i].name;
            entries[i].value = &regions[i];
            ptrs[i] = &entries[i];
        }
        Inference__CudaSharedMemoryStatusResponse resp =
            INFERENCE__CUDA_SHARED_MEMORY_STATUS_RESPONSE__INIT;
        resp.regions = ptrs;
        resp.n_regions = n;
        kgrpc_call_reply(call, &resp.base);
    }
    free(regions);
    free(entries);
    free(ptrs);
    kserve_shm_info_free(infos, n);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    failed(call, err);
}

void kgrpc_cuda_shm_register(kgrpc_call *call) {
    Inference__CudaSharedMemoryRegisterRequest *req =
        (Inference__CudaSharedMemoryRegisterRequest *)kgrpc_call_unpack(
            call, &inference__cuda_shared_memory_register_request__descriptor);
    if (!req)
        return;
    const kgrpc_server *s = call->server;
    osp_error *err;
    if (!s->opts.allow_client_shm || !s->opts.shm)
        err = disabled_error();
    else if (!req->name[0])
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "'region name' is necessary to register cuda "
                            "shared memory region");
    else if (!kserve_shm_cuda_supported())
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to register CUDA shared memory region: "
                            "'%s', GPUs not supported",
                            req->name);
    else if (req->device_id < 0)
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to register shared memory region: "
                            "invalid args");
    else
        err = kserve_shm_register_cuda(
            s->opts.shm, req->name, req->raw_handle.data, req->raw_handle.len,
            (uint64_t)req->device_id, req->byte_size);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (!failed(call, err)) {
        Inference__CudaSharedMemoryRegisterResponse resp =
            INFERENCE__CUDA_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
        kgrpc_call_reply(call, &resp.base);
    }
}

void kgrpc_cuda_shm_unregister(kgrpc_call *call) {
    Inference__CudaSharedMemoryUnregisterRequest *req =
        (Inference__CudaSharedMemoryUnregisterRequest *)kgrpc_call_unpack(
            call,
            &inference__cuda_shared_memory_unregister_request__descriptor);
    if (!req)
        return;
    const kgrpc_server *s = call->server;
    osp_error *err =
        !s->opts.allow_client_shm || !s->opts.shm ? disabled_error()
        : req->name[0]
            ? kserve_shm_unregister(s->opts.shm, KSERVE_SHM_CUDA, req->name)
            : kserve_shm_unregister_all(s->opts.shm, KSERVE_SHM_CUDA);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (!failed(call, err)) {
        Inference__CudaSharedMemoryUnregisterResponse resp =
            INFERENCE__CUDA_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
        kgrpc_call_reply(call, &resp.base);
    }
}
