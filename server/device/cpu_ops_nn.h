/*
 * Pieces shared by the CPU device's matrix, convolution and pooling ops
 * (cpu_ops_gemm.c, cpu_ops_conv.c, cpu_ops_pool.c): the fused epilogue,
 * the spatial geometry of conv and pool seen as three dimensions, and the
 * attribute that gives hot loops an AVX2 clone.
 */
#pragma once

#include <stdint.h>
#include <string.h>

#include "osprey/tensor_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hot loops are written in blocks of CPU_NN_BLOCK elements (an inner loop
 * of constant trip count), which GCC vectorises even at -O2; CPU_NN_HOT
 * compiles a function twice, for x86-64-v3 (AVX2, FMA) and the baseline,
 * and picks one at load time, so the default build runs 8-wide where the
 * CPU can. */
#define CPU_NN_BLOCK 8
/* Not under ThreadSanitizer: the load-time resolver it generates is
 * instrumented too and runs before the TSan runtime exists (SIGSEGV at
 * start). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    __GNUC__ >= 11 && !defined(__SANITIZE_THREAD__)
#define CPU_NN_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CPU_NN_HOT
#endif

/* Runs stmt for i = 0 .. n-1 (int64_t i declared by the macro), in
 * blocks of CPU_NN_BLOCK and then the remainder. */
#define CPU_NN_LOOP(n, i, stmt)                                                \
    do {                                                                       \
        int64_t n_##i = (n), i;                                                \
        for (int64_t b_##i = 0; b_##i + CPU_NN_BLOCK <= n_##i;                 \
             b_##i += CPU_NN_BLOCK)                                            \
            for (int j_##i = 0; j_##i < CPU_NN_BLOCK; j_##i++) {               \
                i = b_##i + j_##i;                                             \
                stmt;                                                          \
            }                                                                  \
        for (i = n_##i / CPU_NN_BLOCK * CPU_NN_BLOCK; i < n_##i; i++) {        \
            stmt;                                                              \
        }                                                                      \
    } while (0)

/* One row of an epilogue, in place: y[i] = act(y[i] + bias + bias_vec[i] +
 * residual[i]) for i < n, bias_vec and residual each optional (NULL) and
 * not overlapping y. act is an FP32 op (unary_is_f32_op); its math is
 * unary_rules.h's. Defined in cpu_ops_gemm.c. */
void cpu_nn__epilogue_row(float *y, int64_t n, float bias,
                          const float *bias_vec, const float *residual,
                          osp_unary_op act, float alpha, float beta);

/* Small helpers of hot loops: always inlined, so that they are compiled
 * into each CPU_NN_HOT clone that calls them (a call per short row would
 * cost more than the row). */
#define CPU_NN_INLINE static inline __attribute__((always_inline))

/* The vectoriser leaves stride-2 loads scalar at -O2; where the compiler
 * has __builtin_shufflevector, cpu_nn_gather_even splits them explicitly,
 * 8 at a time. */
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define CPU_NN_SHUFFLE 1
typedef float cpu_nn_v8 __attribute__((vector_size(32)));
#endif
#endif

/* dst[i] = src[2 i] for i < n (src has 2 n - 1 elements); dst and src do
 * not overlap. */
CPU_NN_INLINE void cpu_nn_gather_even(float *restrict dst,
                                      const float *restrict src, int64_t n) {
    int64_t i = 0;
#ifdef CPU_NN_SHUFFLE
    for (; i + 8 <= n; i += 8) {
        cpu_nn_v8 a, b; /* src[2i .. 2i + 8) and src[2i + 7 .. 2i + 15) */
        memcpy(&a, src + 2 * i, sizeof a);
        memcpy(&b, src + 2 * i + 7, sizeof b);
        cpu_nn_v8 even =
            __builtin_shufflevector(a, b, 0, 2, 4, 6, 9, 11, 13, 15);
        memcpy(dst + i, &even, sizeof even);
    }
#endif
    for (; i < n; i++)
        dst[i] = src[2 * i];
}

/* The spatial shape of a conv or pool as three dimensions (depth, height,
 * width): a rank below 3 gets leading dimensions of size 1 (kernel,
 * stride and dilation 1, no padding), so one set of loops serves 1-d, 2-d
 * and 3-d. */
typedef struct cpu_nn_geom {
    int64_t in[3], out[3], kernel[3], stride[3], pad[3], dilation[3];
    int64_t in_size, out_size, kernel_size; /* products over the three */
} cpu_nn_geom;

/* Fills g from rank (1 to 3) entries of each array (borrowed). */
static inline void cpu_nn_geom_init(cpu_nn_geom *g, int rank, const int64_t *in,
                                    const int64_t *out, const int64_t *kernel,
                                    const int64_t *stride, const int64_t *pad,
                                    const int64_t *dilation) {
    g->in_size = g->out_size = g->kernel_size = 1;
    for (int d = 0; d < 3; d++) {
        int s = d - (3 - rank);
        g->in[d] = s < 0 ? 1 : in[s];
        g->out[d] = s < 0 ? 1 : out[s];
        g->kernel[d] = s < 0 ? 1 : kernel[s];
        g->stride[d] = s < 0 ? 1 : stride[s];
        g->pad[d] = s < 0 ? 0 : pad[s];
        g->dilation[d] = s < 0 ? 1 : dilation[s];
        g->in_size *= g->in[d];
        g->out_size *= g->out[d];
        g->kernel_size *= g->kernel[d];
    }
}

/* The outputs o in [0, out) whose input position o * stride + offset lies
 * in [0, in): [*lo, *hi), empty (lo == hi) when there are none. */
static inline void cpu_nn_valid_range(int64_t out, int64_t stride,
                                      int64_t offset, int64_t in, int64_t *lo,
                                      int64_t *hi) {
    /* o * stride + offset >= 0  <=>  o >= ceil(-offset / stride) */
    int64_t l = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    /* o * stride + offset <= in - 1 */
    int64_t h = in - 1 - offset < 0 ? 0 : (in - 1 - offset) / stride + 1;
    if (h > out)
        h = out;
    if (l > h)
        l = h;
    *lo = l;
    *hi = h;
}

#ifdef __cplusplus
}
#endif
