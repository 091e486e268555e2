/* The sliding-window geometry convolution and pooling share: up to three
 * spatial dimensions, right-aligned (a 1-D or 2-D window gets leading
 * dimensions of 1), read from the slot's args by value for the kernels. */
#pragma once

#include <stdint.h>

struct window_geom {
    int64_t in[3], out[3], kernel[3], stride[3], pad[3], dilation[3];
    int64_t in_size, out_size, kernel_size; /* products over the three */
};

/* The window of an osp_conv_args or osp_pool_args (same field names). */
template <typename Args> static window_geom window_geom_of(const Args *a) {
    window_geom g;
    g.in_size = g.out_size = g.kernel_size = 1;
    for (int d = 0; d < 3; d++) {
        int s = d - (3 - a->spatial_rank);
        g.in[d] = s < 0 ? 1 : a->in_dims[s];
        g.out[d] = s < 0 ? 1 : a->out_dims[s];
        g.kernel[d] = s < 0 ? 1 : a->kernel[s];
        g.stride[d] = s < 0 ? 1 : a->stride[s];
        g.pad[d] = s < 0 ? 0 : a->pad_begin[s];
        g.dilation[d] = s < 0 ? 1 : a->dilation[s];
        g.in_size *= g.in[d];
        g.out_size *= g.out[d];
        g.kernel_size *= g.kernel[d];
    }
    return g;
}
