/* The core's reports into request traces (see trace_report.h). */
#include "trace_report.h"

#include <stdlib.h>

#include "osprey/log.h"
#include "osprey/trace.h"

void trace_report_accepted(const pending_request *p) {
    osp_trace *trace = p->req->trace;
    if (!osp_trace_wants_tensors(trace))
        return;
    const osp_infer_request *req = p->req;
    for (size_t j = 0; j < req->n_inputs; j++) {
        const osp_infer_input *in = &req->inputs[j];
        osp_trace_capture_tensor(trace, OSP_TRACE_TENSOR_QUEUE_INPUT, in->name,
                                 in->dtype, &in->shape,
                                 in->data ? in->data->data : NULL,
                                 in->data ? in->data->size : 0);
    }
}

/* Captures `size` bytes of input tensor t at byte `offset` for one
 * request: read in place from host memory, or the capped prefix copied
 * from the device first. */
static void capture_device_slice(model_instance *inst, bool host_memory,
                                 osp_trace *trace, const osp_backend_tensor *t,
                                 const osp_shape *shape, size_t offset,
                                 size_t size) {
    const char *src = (const char *)t->data + offset;
    if (host_memory) {
        osp_trace_capture_tensor(trace, OSP_TRACE_TENSOR_BACKEND_INPUT, t->name,
                                 t->dtype, shape, src, size);
        return;
    }
    size_t n = osp_trace_tensor_capture_bytes(t->dtype, size);
    void *host = malloc(n ? n : 1);
    if (!host)
        return;
    osp_error *err = NULL;
    if (n)
        err = osp_memcpy_async(inst->stream, host, src, n,
                               OSP_COPY_DEVICE_TO_HOST);
    if (!err && n)
        err = osp_stream_synchronize(inst->stream);
    if (err) {
        OSP_LOG_VERBOSE("trace: cannot copy input '%s' to the host: %s",
                        t->name, osp_error_message(err));
        osp_error_free(err);
    } else {
        osp_trace_capture_tensor(trace, OSP_TRACE_TENSOR_BACKEND_INPUT, t->name,
                                 t->dtype, shape, host, n);
    }
    free(host);
}

void trace_report_backend_tensors(model_instance *inst, pending_request **batch,
                                  size_t n, const osp_backend_tensor *inputs,
                                  osp_infer_response **resps) {
    bool any = false;
    for (size_t r = 0; r < n && !any; r++)
        any = osp_trace_wants_tensors(batch[r]->req->trace);
    if (!any)
        return;
    const osp_model_config *cfg = inst->model->config;
    osp_device_info info;
    osp_device_get_info(inst->device, &info);
    bool host_memory = info.type == OSP_DEVICE_CPU;

    for (size_t i = 0; i < cfg->n_inputs; i++) {
        const osp_backend_tensor *t = &inputs[i];
        size_t offset = 0; /* the requests' slices follow each other */
        for (size_t r = 0; r < n; r++) {
            int j = batch[r]->input_map[i];
            if (j < 0)
                continue;
            const osp_infer_input *in = &batch[r]->req->inputs[j];
            size_t size = in->data ? in->data->size : 0;
            if (t->data && osp_trace_wants_tensors(batch[r]->req->trace))
                capture_device_slice(inst, host_memory, batch[r]->req->trace, t,
                                     &in->shape, offset, size);
            offset += size;
        }
    }
    for (size_t r = 0; r < n; r++) {
        osp_trace *trace = batch[r]->req->trace;
        if (!osp_trace_wants_tensors(trace) || !resps[r])
            continue;
        for (size_t k = 0; k < resps[r]->n_outputs; k++) {
            const osp_infer_output *o = &resps[r]->outputs[k];
            osp_trace_capture_tensor(trace, OSP_TRACE_TENSOR_BACKEND_OUTPUT,
                                     o->name, o->dtype, &o->shape,
                                     o->data ? o->data->data : NULL,
                                     o->data ? o->byte_size : 0);
        }
    }
}

void trace_report_finish(const pending_request *p) {
    osp_trace *trace = p->req->trace;
    const request_times *t = &p->times;
    osp_trace_set_model(
        trace, p->model ? p->model->config->name : p->req->model_name,
        p->model ? p->model->version : p->req->model_version, p->req->id);
    osp_trace_stamp(trace, OSP_TRACE_REQUEST_START, t->request_start);
    osp_trace_stamp(trace, OSP_TRACE_QUEUE_START, t->queue_start);
    osp_trace_stamp(trace, OSP_TRACE_COMPUTE_START, t->compute_start);
    osp_trace_stamp(trace, OSP_TRACE_COMPUTE_INPUT_END, t->compute_input_end);
    osp_trace_stamp(trace, OSP_TRACE_COMPUTE_OUTPUT_START,
                    t->compute_output_start);
    osp_trace_stamp(trace, OSP_TRACE_COMPUTE_END, t->compute_end);
    /* Device-measured compute stamps can run a hair ahead of the host
     * clock; keep the stages in order. */
    uint64_t now = osp_now_ns();
    if (now < t->compute_end)
        now = t->compute_end;
    osp_trace_stamp(trace, OSP_TRACE_INFER_RESPONSE_COMPLETE, now);
    osp_trace_stamp(trace, OSP_TRACE_REQUEST_END, now);
}
