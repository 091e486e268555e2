/*
 * The graph slots of the CUDA device: stream capture into a CUDA graph,
 * instantiated at once (the device's graph is the cudaGraphExec_t; the
 * cudaGraph_t is destroyed after instantiation, which CUDA allows).
 *
 * Capture uses cudaStreamCaptureModeThreadLocal: only the capturing
 * thread is kept from the calls CUDA considers unsafe during a capture,
 * so other instances' threads keep allocating and synchronising.
 */
#include "cuda_check.h"
#include "cuda_internal.h"
#include "osprey/log.h"

osp_error *cuda_graph_begin(osp_device *dev, void *stream_impl) {
    cuda_stream *s = stream_impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(
        cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
}

osp_error *cuda_graph_end(osp_device *dev, void *stream_impl, void **graph) {
    cuda_stream *s = stream_impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    cudaGraph_t captured = NULL;
    err = OSP_CUDA_CHECK(cudaStreamEndCapture(s->stream, &captured));
    if (err != NULL)
        return err;
    cudaGraphExec_t exec = NULL;
    err = OSP_CUDA_CHECK(cudaGraphInstantiate(&exec, captured, 0));
    osp_error *destroyed = OSP_CUDA_CHECK(cudaGraphDestroy(captured));
    if (err == NULL && destroyed != NULL) {
        (void)cudaGraphExecDestroy(exec);
        err = destroyed;
    } else {
        osp_error_free(destroyed);
    }
    if (err == NULL)
        *graph = exec;
    return err;
}

osp_error *cuda_graph_launch(osp_device *dev, void *graph, void *stream_impl) {
    cuda_stream *s = stream_impl;
    osp_error *err = cuda_device_make_current(dev);
    if (err != NULL)
        return err;
    return OSP_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, s->stream));
}

void cuda_graph_free(osp_device *dev, void *graph) {
    osp_error *err = cuda_device_make_current(dev);
    if (err == NULL)
        err = OSP_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
    if (err != NULL) {
        OSP_LOG_ERROR("%s", osp_error_message(err));
        osp_error_free(err);
    }
}
