/*
 * ResNet-18's convolutions on the CPU device, one thread, the old route
 * and the new alternating in one process (so a shared machine's load
 * falls on both alike): im2col + GEMM (packed kernel for weights the
 * conv packs, OpenBLAS for the rest) against the direct route
 * (cpu_ops_conv_direct.c: the packed kernel reading a padded copy of the
 * input through row offsets), the weights as the runtime has them. Prints
 * thread CPU time per call (median over rounds) and GFLOP/s.
 *
 *     build/tests/bench/conv_layer_bench [rounds] [batch] [portable]
 *
 * (portable: both routes on the portable kernel, as on a CPU without
 * AVX-512, where the direct route serves only packed weights.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_ops.h"
#include "cpu_packed_gemm.h"
#include "osprey/device.h"
#include "osprey/tensor_ops.h"

typedef struct layer {
    const char *name;
    int64_t ch_in, ch_out, hw_in, kernel, stride, pad;
} layer;

static const layer layers[] = {
    {"3x3 64->64 56x56", 64, 64, 56, 3, 1, 1},
    {"3x3 128->128 28x28", 128, 128, 28, 3, 1, 1},
    {"3x3 256->256 14x14", 256, 256, 14, 3, 1, 1},
    {"3x3 512->512 7x7", 512, 512, 7, 3, 1, 1},
    {"3x3 64->128 s2 56x56", 64, 128, 56, 3, 2, 1},
    {"3x3 256->512 s2 14x14", 256, 512, 14, 3, 2, 1},
    {"1x1 128->256 s2 28x28", 128, 256, 28, 1, 2, 0},
    {"7x7 3->64 s2 224x224 (stem)", 3, 64, 224, 7, 2, 3},
};

static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float *random_floats(size_t n, unsigned seed) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n && v != NULL; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    }
    return v;
}

enum { ROUTE_IM2COL, ROUTE_DIRECT, ROUTES };

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    int64_t batch = argc > 2 ? atoll(argv[2]) : 1;
    cpu_packed_kernel kernel = argc > 3 && strcmp(argv[3], "portable") == 0
                                   ? CPU_PACKED_KERNEL_PORTABLE
                                   : CPU_PACKED_KERNEL_BEST;
    if (rounds < 1 || batch < 1)
        return 2;
    osp_stream *stream = NULL;
    if (osp_stream_new(osp_device_cpu(), &stream) != NULL ||
        osp_stream_set_threads(stream, 1) != NULL)
        return 1;
    printf("| layer | batch | im2col ms | direct ms | speedup | GFLOP/s "
           "(im2col / direct) |\n|---|---:|---:|---:|---:|---|\n");
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
        const layer *L = &layers[l];
        int64_t out_hw = (L->hw_in + 2 * L->pad - L->kernel) / L->stride + 1;
        size_t nx = (size_t)(batch * L->ch_in * L->hw_in * L->hw_in);
        size_t nw = (size_t)(L->ch_out * L->ch_in * L->kernel * L->kernel);
        size_t ny = (size_t)(batch * L->ch_out * out_hw * out_hw);
        float *x = random_floats(nx, 1), *w = random_floats(nw, 2),
              *bias = random_floats((size_t)L->ch_out, 3),
              *res = random_floats(ny, 4), *y = malloc(ny * sizeof(float));
        osp_conv_args a = {.spatial_rank = 2,
                           .batch = batch,
                           .in_channels = L->ch_in,
                           .out_channels = L->ch_out,
                           .group = 1,
                           .x = x,
                           .w = w,
                           .bias = bias,
                           .residual = res,
                           .y = y,
                           .act = OSP_UNARY_RELU};
        for (int d = 0; d < 2; d++) {
            a.in_dims[d] = L->hw_in;
            a.out_dims[d] = out_hw;
            a.kernel[d] = L->kernel;
            a.stride[d] = L->stride;
            a.pad_begin[d] = L->pad;
            a.dilation[d] = 1;
        }
        /* what the runtime had before the direct route: packed where
         * conv_prepack packs under the portable kernel (NULL for the large
         * layers, which im2col hands to OpenBLAS); the direct route
         * ignores it under AVX-512 */
        osp_packed_weights *as_runtime = NULL;
        cpu_packed_gemm_select(CPU_PACKED_KERNEL_PORTABLE);
        osp_error *err = osp_op_conv_prepack(stream, &a, &as_runtime);
        cpu_packed_gemm_select(kernel);
        if (err != NULL)
            return 1;
        a.packed_w = as_runtime;
        double *ms = malloc(sizeof(double) * (size_t)rounds * ROUTES);
        double flops =
            2.0 * (double)ny * (double)(L->ch_in * L->kernel * L->kernel);
        int reps = (int)(2e9 / flops) + 1; /* about 20-40 ms a round */
        for (int r = 0; r < rounds; r++)
            for (int route = 0; route < ROUTES; route++) {
                cpu_conv_direct_enable(route == ROUTE_DIRECT);
                if (osp_op_conv(stream, &a) != NULL) /* warm */
                    return 1;
                double t0 = thread_cpu_ms();
                for (int i = 0; i < reps; i++)
                    if (osp_op_conv(stream, &a) != NULL)
                        return 1;
                ms[route * rounds + r] = (thread_cpu_ms() - t0) / reps;
            }
        double med[ROUTES];
        for (int route = 0; route < ROUTES; route++) {
            qsort(ms + route * rounds, (size_t)rounds, sizeof(double),
                  cmp_double);
            med[route] = ms[route * rounds + rounds / 2];
        }
        printf("| %s | %lld | %.3f | %.3f | %.2fx | %.0f / %.0f |\n", L->name,
               (long long)batch, med[ROUTE_IM2COL], med[ROUTE_DIRECT],
               med[ROUTE_IM2COL] / med[ROUTE_DIRECT],
               flops / med[ROUTE_IM2COL] / 1e6,
               flops / med[ROUTE_DIRECT] / 1e6);
        fflush(stdout);
        osp_packed_weights_free(osp_device_cpu(), as_runtime);
        free(ms);
        free(x);
        free(w);
        free(bias);
        free(res);
        free(y);
    }
    cpu_conv_direct_enable(true);
    osp_stream_free(stream);
    return 0;
}
