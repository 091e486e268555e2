/*
 * What the CPU device's conv files share (cpu_ops_conv.c, the routes and
 * the scratch; cpu_ops_conv_direct.c, the direct route): the per-thread
 * scratch buffer, the im2col row gather, and the direct route's entry.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_ops_nn.h"
#include "osprey/error.h"
#include "osprey/tensor_ops.h"

/* An array of n floats for the current call (64-byte aligned): the
 * calling thread's kept buffer, or for a request larger than that may
 * grow, a fresh one. Give it back with cpu_conv__scratch_release. NULL
 * when out of memory. */
float *cpu_conv__scratch_acquire(size_t n);
void cpu_conv__scratch_release(float *p);

/* dst[0, len) = the input row src at positions ow * s + offset for ow in
 * [ow0, ow0 + len) (zero where that falls outside [0, in)). src NULL is
 * a row of padding. */
CPU_NN_INLINE void cpu_conv__im2col_row(float *dst, const float *src,
                                        int64_t ow0, int64_t len, int64_t s,
                                        int64_t offset, int64_t in) {
    int64_t lo = 0, hi = 0;
    if (src != NULL) {
        cpu_nn_valid_range(ow0 + len, s, offset, in, &lo, &hi);
        if (lo < ow0)
            lo = ow0;
        if (hi < lo)
            hi = lo;
    } else {
        lo = hi = ow0;
    }
    if (lo > ow0)
        memset(dst, 0, (size_t)(lo - ow0) * sizeof(float));
    if (s == 1) {
        if (hi > lo)
            memcpy(dst + (lo - ow0), src + (lo + offset),
                   (size_t)(hi - lo) * sizeof(float));
    } else if (s == 2) {
        if (hi > lo)
            cpu_nn_gather_even(dst + (lo - ow0), src + (lo * 2 + offset),
                               hi - lo);
    } else {
        for (int64_t ow = lo; ow < hi; ow++)
            dst[ow - ow0] = src[ow * s + offset];
    }
    if (ow0 + len > hi)
        memset(dst + (hi - ow0), 0, (size_t)(ow0 + len - hi) * sizeof(float));
}

/* Whether the direct route (cpu_ops_conv_direct.c) serves a conv of
 * geometry g that is not pointwise: it is 2-d (or 1-d), the route is on
 * (cpu_conv_direct_enable) and the kernel reads its weights well (packed,
 * or the AVX-512 kernel selected, which reads them as they lie). */
bool cpu_conv_direct_serves(const cpu_nn_geom *g, bool packed);

/* conv a (borrowed) on the direct route, weights packed (packed non-NULL,
 * by cpu_pack_a, a group every group_floats) or as they lie, on up to
 * `threads` threads. False when the route does not take it (its
 * copy would pass the kernel's 32-bit offsets, or one output row's tile
 * would need more than 4 MiB of scratch): the caller takes im2col.
 * True otherwise, *err the result (NULL, or out of memory). */
bool cpu_conv_direct(const osp_conv_args *a, const cpu_nn_geom *g,
                     const float *packed, size_t group_floats, int threads,
                     osp_error **err);
