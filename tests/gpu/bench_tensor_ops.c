/*
 * The memory-bound tensor ops of the CUDA device (unary, binary_nd, where,
 * copy_strided, gather, pad, cumsum) on 64 Mi FP32 elements, as effective
 * bandwidth: the bytes each op must read and write over its time, beside
 * a device-to-device copy's, so that each kernel's distance from the
 * memory's speed shows. Wall-clock time of a burst of launches on one
 * stream, synchronised at the end, after a warm-up launch.
 *
 * Prints a table, then one "RESULT ops op=... gbps=... pct_copy=..." line
 * per op for check.sh.
 */
#include <stdint.h>
#include <string.h>

#include "bench_common.h"
#include "osprey/tensor_ops.h"

#ifndef SIDE
#define SIDE 8192 /* matrices are SIDE x SIDE */
#endif
#define N ((size_t)SIDE * SIDE)
#define REPS 20

typedef struct bench {
    osp_stream *s;
    float *a, *b, *out;
    bool *cond;
    int64_t *indices;
} bench;

typedef void (*bench_op)(const bench *b);

/* GB/s of op moving `bytes` per run. */
static double run_gbps(const bench *b, bench_op op, double bytes) {
    op(b);
    BENCH_CHECK(osp_stream_synchronize(b->s)); /* warm-up */
    double t0 = bench_now_s();
    for (int i = 0; i < REPS; i++)
        op(b);
    BENCH_CHECK(osp_stream_synchronize(b->s));
    return bytes * REPS / (bench_now_s() - t0) / 1e9;
}

static void op_copy(const bench *b) {
    BENCH_CHECK(osp_memcpy_async(b->s, b->out, b->a, N * sizeof(float),
                                 OSP_COPY_DEVICE_TO_DEVICE));
}

static void unary(const bench *b, osp_unary_op op) {
    osp_unary_args u = {
        .op = op, .dtype = OSP_TYPE_FP32, .x = b->a, .y = b->out, .n = N};
    BENCH_CHECK(osp_op_unary(b->s, &u));
}

static void op_relu(const bench *b) {
    unary(b, OSP_UNARY_RELU);
}

static void op_gelu(const bench *b) {
    unary(b, OSP_UNARY_GELU);
}

/* a + b over [SIDE, SIDE], b [SIDE, SIDE] or a row [SIDE]. */
static void add(const bench *b, bool row) {
    osp_binary_nd_args a = {.op = OSP_BINARY_ND_ADD,
                            .dtype = OSP_TYPE_FP32,
                            .rank = 2,
                            .dims = {SIDE, SIDE},
                            .a = b->a,
                            .a_strides = {SIDE, 1},
                            .b = b->b,
                            .b_strides = {row ? 0 : SIDE, 1},
                            .out = b->out};
    BENCH_CHECK(osp_op_binary_nd(b->s, &a));
}

static void op_add_same(const bench *b) {
    add(b, false);
}

static void op_add_row(const bench *b) {
    add(b, true);
}

static void op_where(const bench *b) {
    osp_where_args w = {.elem_size = 4,
                        .rank = 1,
                        .dims = {(int64_t)N},
                        .cond = b->cond,
                        .cond_strides = {1},
                        .x = b->a,
                        .x_strides = {1},
                        .y = b->b,
                        .y_strides = {1},
                        .out = b->out};
    BENCH_CHECK(osp_op_where(b->s, &w));
}

static void op_transpose(const bench *b) {
    osp_copy_strided_args c = {.elem_size = 4,
                               .rank = 2,
                               .dims = {SIDE, SIDE},
                               .src = b->a,
                               .src_strides = {1, SIDE},
                               .dst = b->out,
                               .dst_strides = {SIDE, 1}};
    BENCH_CHECK(osp_op_copy_strided(b->s, &c));
}

/* Columns 1 .. SIDE/2 of each row (Slice; Concat writes the same way). */
static void op_slice(const bench *b) {
    osp_copy_strided_args c = {.elem_size = 4,
                               .rank = 2,
                               .dims = {SIDE, SIDE / 2},
                               .src = b->a + 2,
                               .src_strides = {SIDE, 1},
                               .dst = b->out,
                               .dst_strides = {SIDE / 2, 1}};
    BENCH_CHECK(osp_op_copy_strided(b->s, &c));
}

/* SIDE rows of SIDE floats picked by random indices (an embedding). */
static void op_gather(const bench *b) {
    osp_gather_args g = {.elem_size = 4,
                         .data = b->a,
                         .outer = 1,
                         .axis_len = SIDE,
                         .inner = SIDE,
                         .index_dtype = OSP_TYPE_INT64,
                         .indices = b->indices,
                         .n_indices = SIDE,
                         .out = b->out};
    BENCH_CHECK(osp_op_gather(b->s, &g));
}

/* [SIDE - 2, SIDE - 2] padded by 1 on every side, constant 0. */
static void op_pad(const bench *b) {
    osp_pad_args p = {.mode = OSP_PAD_CONSTANT,
                      .elem_size = 4,
                      .rank = 2,
                      .in_dims = {SIDE - 2, SIDE - 2},
                      .pad_begin = {1, 1},
                      .pad_end = {1, 1},
                      .x = b->a,
                      .y = b->out};
    BENCH_CHECK(osp_op_pad(b->s, &p));
}

/* [SIDE, SIDE] down the columns (rows: false; SIDE lines, consecutive
 * threads on consecutive columns) or along the rows (contiguous lines). */
static void cumsum(const bench *b, bool rows) {
    osp_cumsum_args c = {.dtype = OSP_TYPE_FP32,
                         .x = b->a,
                         .y = b->out,
                         .outer = rows ? SIDE : 1,
                         .n = SIDE,
                         .inner = rows ? 1 : SIDE};
    BENCH_CHECK(osp_op_cumsum(b->s, &c));
}

static void op_cumsum_cols(const bench *b) {
    cumsum(b, false);
}

static void op_cumsum_rows(const bench *b) {
    cumsum(b, true);
}

int main(void) {
    osp_device *dev = bench_gpu0(0);
    bench b = {0};
    BENCH_CHECK(osp_stream_new(dev, &b.s));
    osp_buffer *a = NULL, *bb = NULL, *out = NULL, *cond = NULL, *idx = NULL;
    BENCH_CHECK(osp_device_alloc(dev, N * sizeof(float), &a));
    BENCH_CHECK(osp_device_alloc(dev, N * sizeof(float), &bb));
    BENCH_CHECK(osp_device_alloc(dev, N * sizeof(float), &out));
    BENCH_CHECK(osp_device_alloc(dev, N, &cond));
    BENCH_CHECK(osp_device_alloc(dev, SIDE * sizeof(int64_t), &idx));
    b.a = a->data;
    b.b = bb->data;
    b.out = out->data;
    b.cond = cond->data;
    b.indices = idx->data;

    /* Inputs: a and b 0.5f, cond alternating, indices scattered. */
    osp_fill_args f = {.elem_size = 4, .dst = b.a, .n = N};
    float half = 0.5f;
    memcpy(f.value, &half, 4);
    BENCH_CHECK(osp_op_fill(b.s, &f));
    f.dst = b.b;
    BENCH_CHECK(osp_op_fill(b.s, &f));
    osp_fill_args fc = {
        .elem_size = 2, .value = {1, 0}, .dst = b.cond, .n = N / 2};
    BENCH_CHECK(osp_op_fill(b.s, &fc));
    int64_t *host_idx = malloc(SIDE * sizeof *host_idx);
    if (host_idx == NULL)
        return 1;
    for (int64_t i = 0; i < SIDE; i++)
        host_idx[i] = (i * 2654435761u) % SIDE;
    BENCH_CHECK(osp_memcpy_async(b.s, b.indices, host_idx,
                                 SIDE * sizeof *host_idx,
                                 OSP_COPY_HOST_TO_DEVICE));
    BENCH_CHECK(osp_stream_synchronize(b.s));
    free(host_idx);

    const double f4 = sizeof(float);
    const struct {
        const char *name;
        bench_op op;
        double bytes;
    } ops[] = {
        {"copy", op_copy, 2 * N * f4},
        {"relu", op_relu, 2 * N * f4},
        {"gelu", op_gelu, 2 * N * f4},
        {"add_same", op_add_same, 3 * N * f4},
        {"add_row", op_add_row, 2 * N * f4 + SIDE * f4},
        {"where", op_where, N * (3 * f4 + 1)},
        {"transpose", op_transpose, 2 * N * f4},
        {"slice", op_slice, N * f4},
        {"gather", op_gather, 2 * N * f4},
        {"pad", op_pad, (double)(SIDE - 2) * (SIDE - 2) * f4 + N * f4},
        {"cumsum_cols", op_cumsum_cols, 2 * N * f4},
        {"cumsum_rows", op_cumsum_rows, 2 * N * f4},
    };
    double copy_gbps = 0;
    printf("%-10s %10s %12s\n", "op", "GB/s", "% of copy");
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        double gbps = run_gbps(&b, ops[i].op, ops[i].bytes);
        if (i == 0)
            copy_gbps = gbps;
        double pct = 100.0 * gbps / copy_gbps;
        printf("%-10s %10.1f %11.0f%%\n", ops[i].name, gbps, pct);
        printf("RESULT ops op=%s gbps=%.1f pct_copy=%.0f\n", ops[i].name, gbps,
               pct);
    }
    osp_buffer_free(idx);
    osp_buffer_free(cond);
    osp_buffer_free(out);
    osp_buffer_free(bb);
    osp_buffer_free(a);
    osp_stream_free(b.s);
    osp_devices_shutdown();
    return 0;
}
