/*
 * The depthwise convolution kernel of the CPU device under AVX-512
 * (cpu_ops_depthwise.c): one input plane to one output plane, 3x3 or 5x5
 * taps, stride 1 or 2, dilation 1, any padding, the epilogue (bias,
 * residual, ReLU/Clip) in registers. cpu_ops_conv.c's depthwise route
 * calls it per plane where cpu_depthwise_avx512_serves says so, and runs
 * its own loops (AVX2 clones and the baseline) everywhere else.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cpu_ops_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Widest output row the kernel takes (its edge masks live on the stack). */
#define CPU_DEPTHWISE_MAX_OUT_W 2048

/* Whether cpu_depthwise_avx512_plane serves planes of geometry g: the CPU
 * has AVX-512 and the kernel is selected (cpu_packed_gemm_select), the
 * conv is 2-d (or 1-d) with a 3x3 or 5x5 kernel, equal strides of 1 or 2,
 * dilation 1, and rows up to CPU_DEPTHWISE_MAX_OUT_W. */
bool cpu_depthwise_avx512_serves(const cpu_nn_geom *g);

/* y (out[1] x out[2]) = act(conv(x, w) + bias + residual) for one plane:
 * x the input plane (in[1] x in[2]), w its kernel taps (row-major),
 * residual (optional) in y's layout, zeros at least in[2] zero floats
 * (standing in for padding rows). All borrowed; act any FP32 unary op
 * (ReLU and Clip in registers, the others over each finished row). Only
 * for geometries cpu_depthwise_avx512_serves accepts. */
void cpu_depthwise_avx512_plane(const cpu_nn_geom *g, const float *x,
                                const float *w, float bias,
                                const float *residual, float *y,
                                osp_unary_op act, float act_alpha,
                                float act_beta, const float *zeros);

#ifdef __cplusplus
}
#endif
