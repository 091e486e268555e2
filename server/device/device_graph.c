/*
 * Graphs (osprey/device.h): recorded work replayed with one launch, over
 * the device's optional graph slots. The dispatcher keeps a stream's
 * capturing flag so that the layer itself refuses what a replay would
 * repeat (host functions).
 */
#include <stdlib.h>

#include "device_internal.h"

struct osp_graph {
    osp_device *device;
    void *impl; /* the device's graph */
};

bool osp_stream_supports_graphs(const osp_stream *stream) {
    return stream != NULL && stream->device->ops->graph_begin != NULL;
}

osp_error *osp_stream_begin_capture(osp_stream *stream) {
    if (stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_stream_begin_capture: stream is NULL");
    osp_device *dev = stream->device;
    if (dev->ops->graph_begin == NULL)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "device %s cannot record graphs", dev->info.name);
    if (stream->capturing)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_stream_begin_capture: the stream is "
                             "recording already");
    osp_error *err = dev->ops->graph_begin(dev, stream->impl);
    if (err == NULL)
        stream->capturing = true;
    return err;
}

osp_error *osp_stream_end_capture(osp_stream *stream, osp_graph **out) {
    if (stream == NULL || out == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_stream_end_capture: stream and out are "
                             "required");
    if (!stream->capturing)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_stream_end_capture: the stream is not "
                             "recording");
    osp_device *dev = stream->device;
    stream->capturing = false;
    osp_graph *g = malloc(sizeof *g);
    void *impl = NULL;
    osp_error *err = dev->ops->graph_end(dev, stream->impl, &impl);
    if (err == NULL && g == NULL) {
        dev->ops->graph_free(dev, impl);
        err = osp_error_out_of_memory();
    }
    if (err != NULL) {
        free(g);
        return err;
    }
    *g = (osp_graph){.device = dev, .impl = impl};
    *out = g;
    return NULL;
}

osp_error *osp_graph_launch(osp_graph *graph, osp_stream *stream) {
    if (graph == NULL || stream == NULL)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_graph_launch: graph and stream are "
                             "required");
    if (graph->device != stream->device)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "osp_graph_launch: the graph and the stream "
                             "belong to different devices");
    if (stream->capturing)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "osp_graph_launch: the stream is recording");
    return graph->device->ops->graph_launch(graph->device, graph->impl,
                                            stream->impl);
}

void osp_graph_free(osp_graph *graph) {
    if (graph == NULL)
        return;
    graph->device->ops->graph_free(graph->device, graph->impl);
    free(graph);
}
