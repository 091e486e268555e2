/*
 * The activations of osp_op_bias_activation, shared by the CPU device (the
 * reference) and the CUDA kernels so that both follow one definition.
 * Compiles as C and as CUDA (host + device).
 */
#pragma once

#include <math.h>

#include "osprey/device.h"

#ifdef __CUDACC__
#define OSP_ACTIVATION_FN static __host__ __device__ inline
#else
#define OSP_ACTIVATION_FN static inline
#endif

OSP_ACTIVATION_FN float activation_apply(osp_activation act, float x) {
    switch (act) {
    case OSP_ACTIVATION_RELU:
        return x > 0.0f ? x : 0.0f;
    case OSP_ACTIVATION_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case OSP_ACTIVATION_TANH:
        return tanhf(x);
    case OSP_ACTIVATION_GELU: {
        /* 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
         * written as x / (1 + exp(-2u)): the same function, without the
         * cancellation in 1 + tanh(u) for negative x. */
        const float k = 0.7978845608028654f; /* sqrt(2/pi) */
        float u = k * (x + 0.044715f * x * x * x);
        return x / (1.0f + expf(-2.0f * u));
    }
    default: /* OSP_ACTIVATION_NONE */
        return x;
    }
}
