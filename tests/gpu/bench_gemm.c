/*
 * GEMM throughput through osp_op_gemm on GPU 0: FP32, TF32 (FP32 with
 * allow_tf32) and FP16 (FP32 accumulation), at 8192^3 and at the shapes of
 * a digits_mlp-like model (batch x 64 -> 64 -> 10, batch 1..256, one call
 * per layer). Timed with device events over a burst of calls.
 *
 * Prints a table, then "RESULT gemm ..." / "RESULT mlp ..." lines for
 * check.sh.
 */
#include <stdint.h>
#include <string.h>

#include "bench_common.h"

typedef struct precision {
    const char *name;
    osp_datatype dtype;
    bool tf32;
} precision;

static const precision precisions[] = {
    {"FP32", OSP_TYPE_FP32, false},
    {"TF32", OSP_TYPE_FP32, true},
    {"FP16", OSP_TYPE_FP16, false},
};

typedef struct operands {
    osp_buffer *a32, *b32, *c32; /* FP32 */
    osp_buffer *a16, *b16, *c16; /* the same values as FP16 */
} operands;

/* Device operands large enough for max_elems each, filled with values in
 * [-1, 1) (FP16 copies made on the device with osp_op_cast). */
static operands operands_new(osp_device *dev, osp_stream *s, size_t max_elems) {
    operands o;
    size_t bytes = max_elems * sizeof(float);
    float *host = malloc(bytes);
    if (host == NULL) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < max_elems; i++) {
        x = x * 1664525u + 1013904223u; /* LCG: cheap, never all zeros */
        host[i] = (float)(x >> 8) / (float)(1u << 23) - 1.0f;
    }
    osp_buffer **f32[] = {&o.a32, &o.b32, &o.c32};
    osp_buffer **f16[] = {&o.a16, &o.b16, &o.c16};
    for (int i = 0; i < 3; i++) {
        BENCH_CHECK(osp_device_alloc(dev, bytes, f32[i]));
        BENCH_CHECK(osp_device_alloc(dev, bytes / 2, f16[i]));
        BENCH_CHECK(osp_memcpy_async(s, (*f32[i])->data, host, bytes,
                                     OSP_COPY_HOST_TO_DEVICE));
        BENCH_CHECK(osp_op_cast(s, (*f32[i])->data, OSP_TYPE_FP32,
                                (*f16[i])->data, OSP_TYPE_FP16, max_elems));
    }
    BENCH_CHECK(osp_stream_synchronize(s));
    free(host);
    return o;
}

static void operands_free(operands *o) {
    osp_buffer *all[] = {o->a32, o->b32, o->c32, o->a16, o->b16, o->c16};
    for (int i = 0; i < 6; i++)
        osp_buffer_free(all[i]);
}

/* Mean seconds per call of C[m,n] = A[m,k] B[k,n] over `reps` calls. */
static double time_gemm(osp_stream *s, osp_event *start, osp_event *end,
                        const operands *o, const precision *p, int64_t m,
                        int64_t n, int64_t k, int reps) {
    bool half = p->dtype == OSP_TYPE_FP16;
    osp_gemm_args g = {
        .m = m,
        .n = n,
        .k = k,
        .alpha = 1.0f,
        .beta = 0.0f,
        .dtype = p->dtype,
        .allow_tf32 = p->tf32,
        .a = (half ? o->a16 : o->a32)->data,
        .lda = k,
        .b = (half ? o->b16 : o->b32)->data,
        .ldb = n,
        .c = (half ? o->c16 : o->c32)->data,
        .ldc = n,
    };
    for (int i = 0; i < 3; i++) /* warm-up: cuBLAS picks its kernels */
        BENCH_CHECK(osp_op_gemm(s, &g));
    BENCH_CHECK(osp_event_record(start, s));
    for (int i = 0; i < reps; i++)
        BENCH_CHECK(osp_op_gemm(s, &g));
    BENCH_CHECK(osp_event_record(end, s));
    BENCH_CHECK(osp_event_synchronize(end));
    uint64_t ns = 0;
    BENCH_CHECK(osp_event_elapsed_ns(start, end, &ns));
    return (double)ns * 1e-9 / reps;
}

int main(void) {
    osp_device *dev = bench_gpu0(0);
    osp_stream *s = NULL;
    osp_event *start = NULL, *end = NULL;
    BENCH_CHECK(osp_stream_new(dev, &s));
    BENCH_CHECK(osp_event_new(dev, &start));
    BENCH_CHECK(osp_event_new(dev, &end));

    const int64_t big = 8192;
    operands o = operands_new(dev, s, (size_t)big * big);

    printf("\n%-6s %-22s %12s %10s\n", "prec", "shape (m x n x k)", "us/call",
           "TFLOP/s");
    for (size_t i = 0; i < sizeof precisions / sizeof precisions[0]; i++) {
        const precision *p = &precisions[i];
        double sec = time_gemm(s, start, end, &o, p, big, big, big, 10);
        double tflops = 2.0 * big * big * big / sec / 1e12;
        printf("%-6s %-22s %12.1f %10.1f\n", p->name, "8192 x 8192 x 8192",
               sec * 1e6, tflops);
        printf("RESULT gemm prec=%s m=%lld n=%lld k=%lld us=%.1f tflops=%.2f\n",
               p->name, (long long)big, (long long)big, (long long)big,
               sec * 1e6, tflops);
    }

    /* digits_mlp-like: hidden layer [b,64]x[64,64], output [b,64]x[64,10]. */
    printf("\n%-6s %6s %16s %16s %10s\n", "prec", "batch", "64->64 us/call",
           "64->10 us/call", "GFLOP/s");
    for (size_t i = 0; i < sizeof precisions / sizeof precisions[0]; i++) {
        const precision *p = &precisions[i];
        for (int64_t b = 1; b <= 256; b *= 2) {
            double hidden = time_gemm(s, start, end, &o, p, b, 64, 64, 2000);
            double out = time_gemm(s, start, end, &o, p, b, 10, 64, 2000);
            double gflops = 2.0 * b * 64 * (64 + 10) / (hidden + out) / 1e9;
            printf("%-6s %6lld %16.2f %16.2f %10.2f\n", p->name, (long long)b,
                   hidden * 1e6, out * 1e6, gflops);
            printf("RESULT mlp prec=%s batch=%lld hidden_us=%.2f out_us=%.2f "
                   "gflops=%.2f\n",
                   p->name, (long long)b, hidden * 1e6, out * 1e6, gflops);
        }
    }

    operands_free(&o);
    osp_event_free(start);
    osp_event_free(end);
    osp_stream_free(s);
    osp_devices_shutdown();
    return 0;
}
