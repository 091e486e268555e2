/*
 * The CPU conv's direct route (cpu_conv.h): a conv as the packed GEMM
 * kernel reading the im2col matrix's rows straight from a zero-padded,
 * phase-split copy of the input, without writing that matrix.
 *
 * At stride 1, output (oh, ow) reads for tap (c, kh, kw) the input at
 * row oh + kh dh - pad_top, column ow + kw dw - pad_left. In a padded
 * copy whose rows are Wq = OW + (KW - 1) dw wide, output (oh, ow) sits at
 * flat column q = oh Wq + ow, and the tap's input at q + (c plane + kh dh
 * Wq + kw dw): the same offset for every q. So row p of the im2col matrix
 * is the copy read from an offset of its own, and cpu_packed_gemm_at
 * reads it there. The columns q with ow >= OW (the KW - 1 past each row)
 * are computed and dropped as the rows are copied out.
 *
 * At stride s (sh, sw), the copy is split by phase: sub-plane (a, b) of
 * channel c holds the padded input's rows sh i + a and columns sw j + b,
 * so that tap (kh, kw) reads sub-plane (kh dh % sh, kw dw % sw) at row
 * oh + kh dh / sh, column ow + kw dw / sw: again one offset for all q,
 * with Wq = OW + (KW - 1) dw / sw. (Sub-planes no tap reads stay unset.)
 * The copy holds about the input once, where im2col writes it
 * kernel_size / (sh sw) times; the GEMM reads three taps of a row from
 * the same cache lines.
 *
 * A tile is a run of output rows with its own copy of the input rows it
 * reads (the rows shared with the next tile are copied twice), sized so
 * that copy and output stay in L2 while the weights' row panels pass.
 * Threads take (image, group, tile) tasks, or split a tile's panels when
 * the tasks are fewer than the threads.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "cpu_conv.h"
#include "cpu_ops.h"
#include "cpu_ops_nn.h"
#include "cpu_packed_gemm.h"
#include "cpu_sgemm.h"
#include "cpu_threads.h"

/* Scratch per tile, about: its copy of the input and its output (a tile
 * is at least one output row; convs whose one row needs more than 4x this
 * take im2col). */
#define DIRECT_TILE_BYTES ((size_t)1 << 20)

static _Atomic bool direct_route_on = true;

void cpu_conv_direct_enable(bool on) {
    atomic_store(&direct_route_on, on);
}

bool cpu_conv_direct_serves(const cpu_nn_geom *g, bool packed) {
    if (!atomic_load(&direct_route_on) ||
        !(packed || cpu_packed_gemm_avx512_selected()))
        return false;
    return g->in[0] == 1 && g->out[0] == 1 && g->kernel[0] == 1 &&
           g->stride[1] >= 1 && g->stride[2] >= 1 && g->pad[1] >= 0 &&
           g->pad[2] >= 0;
}

typedef struct direct_job {
    const osp_conv_args *a;
    const cpu_nn_geom *g;
    int64_t cg, mg, k;
    int64_t sh, sw;       /* strides: sh x sw sub-planes per channel */
    int64_t halo;         /* sub-plane rows past a tile's output rows */
    int64_t wq;           /* sub-plane row width, flat output row width */
    int64_t rows, tiles;  /* output rows per tile, tiles per plane */
    const float *weights; /* packed panels, or w as it lies */
    bool packed;
    size_t group_floats; /* floats of weights per group */
    _Atomic bool out_of_memory;
} direct_job;

static int64_t round_up_16(int64_t n) {
    return (n + 15) / 16 * 16;
}

/* Floats of one channel's copy for a tile of `rows` output rows. */
static int64_t direct_channel_floats(const direct_job *job, int64_t rows) {
    return job->sh * job->sw * (rows + job->halo) * job->wq;
}

/* Floats of one tile's scratch: the input copy, the row offsets (int32,
 * counted as floats) and the flat output, each 64-byte aligned. */
static size_t direct_scratch_floats(const direct_job *job, int64_t rows) {
    return (size_t)(round_up_16(job->cg * direct_channel_floats(job, rows)) +
                    round_up_16(job->k) +
                    job->mg * round_up_16(rows * job->wq));
}

/* dst[0, n) = src[j - left] inside [0, in), else zero (src NULL: all
 * zero): the stride-1 case of cpu_conv__im2col_row, without its range
 * arithmetic. */
CPU_NN_INLINE void copy_row_padded(float *restrict dst, int64_t n,
                                   const float *restrict src, int64_t left,
                                   int64_t in) {
    int64_t lo = src == NULL ? n : (left < n ? left : n);
    int64_t hi = src == NULL ? n : (left + in < n ? left + in : n);
    CPU_NN_LOOP(lo, j, dst[j] = 0.0f);
    CPU_NN_LOOP(hi - lo, j, dst[lo + j] = src[j]);
    CPU_NN_LOOP(n - hi, j, dst[hi + j] = 0.0f);
}

/* The copy of a tile's input: copy[c][a][b][i][j] = the input at row
 * sh (oh0 + i) + a - pad_top, column sw j + b - pad_left (zero outside),
 * for the sub-planes some tap reads. */
CPU_NN_HOT static void direct_copy_input(const direct_job *job, const float *x,
                                         int64_t oh0, int64_t in_rows,
                                         float *copy) {
    const cpu_nn_geom *g = job->g;
    const int64_t *dil = g->dilation, *ks = g->kernel;
    int64_t H = g->in[1], W = g->in[2], wq = job->wq;
    int64_t sub = in_rows * wq;
    for (int64_t a = 0; a < job->sh; a++) {
        bool used = false;
        for (int64_t kh = 0; kh < ks[1] && !used; kh++)
            used = kh * dil[1] % job->sh == a;
        if (!used)
            continue;
        for (int64_t b = 0; b < job->sw; b++) {
            used = false;
            for (int64_t kw = 0; kw < ks[2] && !used; kw++)
                used = kw * dil[2] % job->sw == b;
            if (!used)
                continue;
            for (int64_t c = 0; c < job->cg; c++) {
                float *plane = copy + ((c * job->sh + a) * job->sw + b) * sub;
                for (int64_t i = 0; i < in_rows; i++) {
                    int64_t ih = job->sh * (oh0 + i) + a - g->pad[1];
                    const float *src =
                        ih >= 0 && ih < H ? x + (c * H + ih) * W : NULL;
                    if (job->sw == 1)
                        copy_row_padded(plane + i * wq, wq, src, g->pad[2], W);
                    else
                        cpu_conv__im2col_row(plane + i * wq, src, 0, wq,
                                             job->sw, b - g->pad[2], W);
                }
            }
        }
    }
}

/* One tile of output rows [oh0, oh0 + rows) of image b, group gi, for
 * cpu_parallel_range over its row panels. */
typedef struct direct_tile {
    const direct_job *job;
    const float *copy;
    const int32_t *offsets;
    float *out; /* [mg, ldo], flat columns */
    int64_t ldo, cols, b, gi, oh0, rows;
} direct_tile;

/* rows rows of n floats: dst (rows ldd apart) = src (rows lds apart). */
CPU_NN_HOT static void copy_rows(float *restrict dst, int64_t ldd,
                                 const float *restrict src, int64_t lds,
                                 int64_t rows, int64_t n) {
    for (int64_t i = 0; i < rows; i++) {
        float *d = dst + i * ldd;
        const float *s = src + i * lds;
        CPU_NN_LOOP(n, j, d[j] = s[j]);
    }
}

/* Panels [lo, hi) of a tile. Where the flat output rows are y's (wq ==
 * OW: no columns to drop), the GEMM writes y, epilogue and all; else it
 * writes the flat output (bias, and the activation unless a residual
 * must come first), and each output row's OW columns are copied to y,
 * residual and activation there. */
static void direct_tile_panels(void *arg, int64_t lo, int64_t hi) {
    const direct_tile *t = arg;
    const direct_job *job = t->job;
    const osp_conv_args *a = job->a;
    const cpu_nn_geom *g = job->g;
    int64_t r0 = lo * CPU_PACK_MR,
            r1 = hi * CPU_PACK_MR < job->mg ? hi * CPU_PACK_MR : job->mg;
    int64_t oc0 = t->gi * job->mg, OW = g->out[2];
    int64_t first = (t->b * a->out_channels + oc0) * g->out_size + t->oh0 * OW;
    const float *weights = job->weights + (size_t)t->gi * job->group_floats;
    bool residual = a->residual != NULL;
    cpu_packed_epilogue e = {.bias = a->bias != NULL ? a->bias + oc0 : NULL,
                             .act = a->act,
                             .act_alpha = a->act_alpha,
                             .act_beta = a->act_beta};
    if (job->wq == OW) {
        e.residual = residual ? a->residual + first : NULL;
        e.ldr = g->out_size;
        cpu_packed_gemm_at(weights, job->packed, job->k, r0, r1, t->copy,
                           t->offsets, t->cols, a->y + first, g->out_size, &e);
        return;
    }
    if (residual)
        e.act = OSP_UNARY_IDENTITY;
    cpu_packed_gemm_at(weights, job->packed, job->k, r0, r1, t->copy,
                       t->offsets, t->cols, t->out, t->ldo, &e);
    for (int64_t r = r0; r < r1; r++) {
        int64_t at = first + r * g->out_size;
        copy_rows(a->y + at, OW, t->out + r * t->ldo, job->wq, t->rows, OW);
        if (residual)
            cpu_nn__epilogue_row(a->y + at, t->rows * OW, 0.0f, NULL,
                                 a->residual + at, a->act, a->act_alpha,
                                 a->act_beta);
    }
}

/* Tile t of image b, group gi, in scratch (direct_scratch_floats), on up
 * to `threads` threads. */
static void direct_run_tile(const direct_job *job, int64_t b, int64_t gi,
                            int64_t t, float *scratch, int threads) {
    const osp_conv_args *a = job->a;
    const cpu_nn_geom *g = job->g;
    int64_t oh0 = t * job->rows, OH = g->out[1];
    int64_t rows = OH - oh0 < job->rows ? OH - oh0 : job->rows;
    int64_t in_rows = rows + job->halo, sub = in_rows * job->wq;
    float *copy = scratch;
    int32_t *offsets =
        (int32_t *)(copy +
                    round_up_16(job->cg * direct_channel_floats(job, rows)));
    float *out = (float *)offsets + round_up_16(job->k);
    const float *x = a->x + (b * a->in_channels + gi * job->cg) * g->in_size;
    direct_copy_input(job, x, oh0, in_rows, copy);
    /* im2col's row order: (c, kh, kw) */
    int64_t p = 0;
    for (int64_t c = 0; c < job->cg; c++)
        for (int64_t kh = 0; kh < g->kernel[1]; kh++)
            for (int64_t kw = 0; kw < g->kernel[2]; kw++) {
                int64_t th = kh * g->dilation[1], tw = kw * g->dilation[2];
                int64_t phase =
                    (c * job->sh + th % job->sh) * job->sw + tw % job->sw;
                offsets[p++] = (int32_t)(phase * sub + th / job->sh * job->wq +
                                         tw / job->sw);
            }
    direct_tile dt = {.job = job,
                      .copy = copy,
                      .offsets = offsets,
                      .out = out,
                      .ldo = round_up_16(rows * job->wq),
                      .cols = (rows - 1) * job->wq + g->out[2],
                      .b = b,
                      .gi = gi,
                      .oh0 = oh0,
                      .rows = rows};
    cpu_parallel_range((job->mg + CPU_PACK_MR - 1) / CPU_PACK_MR,
                       CPU_PACK_MR * job->k * dt.cols, threads,
                       direct_tile_panels, &dt);
}

/* Tasks [lo, hi) in (image, group, tile) order, each on one thread. */
static void direct_range(void *arg, int64_t lo, int64_t hi) {
    direct_job *job = arg;
    float *scratch =
        cpu_conv__scratch_acquire(direct_scratch_floats(job, job->rows));
    if (scratch == NULL) {
        atomic_store(&job->out_of_memory, true);
        return;
    }
    int64_t per_image = job->a->group * job->tiles;
    for (int64_t task = lo; task < hi; task++)
        direct_run_tile(job, task / per_image, task % per_image / job->tiles,
                        task % job->tiles, scratch, 1);
    cpu_conv__scratch_release(scratch);
}

bool cpu_conv_direct(const osp_conv_args *a, const cpu_nn_geom *g,
                     const float *packed, size_t group_floats, int threads,
                     osp_error **err) {
    int64_t groups = a->group, cg = a->in_channels / groups,
            mg = a->out_channels / groups;
    /* the AVX-512 kernel reads weights as they lie 12 rows at a time,
     * faster than packed panels of 8 */
    if (cpu_packed_gemm_avx512_selected())
        packed = NULL;
    direct_job job = {.a = a,
                      .g = g,
                      .cg = cg,
                      .mg = mg,
                      .k = cg * g->kernel_size,
                      .sh = g->stride[1],
                      .sw = g->stride[2],
                      .weights = packed != NULL ? packed : a->w,
                      .packed = packed != NULL,
                      .group_floats = packed != NULL
                                          ? group_floats
                                          : (size_t)(mg * cg * g->kernel_size)};
    job.halo = (g->kernel[1] - 1) * g->dilation[1] / job.sh;
    job.wq = g->out[2] + (g->kernel[2] - 1) * g->dilation[2] / job.sw;
    int64_t OH = g->out[1];
    /* the copy of a whole plane must be addressable by int32 offsets */
    if ((double)cg * (double)(job.sh * job.sw) * (double)(OH + job.halo) *
            (double)job.wq >=
        (double)INT32_MAX)
        return false;
    /* rows per tile: the tile's scratch about DIRECT_TILE_BYTES, at least
     * one row; then as even as the tile count allows */
    int64_t per_row = (cg * job.sh * job.sw + mg) * job.wq;
    int64_t fixed = cg * job.sh * job.sw * job.halo * job.wq + job.k;
    /* a tile of one row past 4x the budget (very long rows of many
     * channels): im2col, whose tiles are bounded, keeps the scratch small */
    if ((double)(fixed + per_row) * sizeof(float) > 4.0 * DIRECT_TILE_BYTES)
        return false;
    int64_t budget = (int64_t)(DIRECT_TILE_BYTES / sizeof(float)) - fixed;
    int64_t rows = budget > per_row ? budget / per_row : 1;
    if (rows > OH)
        rows = OH;
    job.tiles = (OH + rows - 1) / rows;
    int64_t pairs = a->batch * groups;
    if ((double)mg * (double)job.k * (double)g->out_size * (double)pairs <
        2.0 * (double)CPU_SGEMM_GRAIN)
        threads = 1;
    while (threads > 1 && pairs * job.tiles < threads && job.tiles < OH)
        job.tiles++;
    job.rows = (OH + job.tiles - 1) / job.tiles;
    job.tiles = (OH + job.rows - 1) / job.rows;
    atomic_init(&job.out_of_memory, false);
    int64_t tasks = pairs * job.tiles;
    *err = NULL;
    if (tasks >= threads) {
        cpu_parallel_range(tasks, mg * job.k * job.rows * g->out[2], threads,
                           direct_range, &job);
        if (atomic_load(&job.out_of_memory))
            *err = osp_error_out_of_memory();
        return true;
    }
    /* fewer tiles than threads: each tile's panels are split */
    float *scratch =
        cpu_conv__scratch_acquire(direct_scratch_floats(&job, job.rows));
    if (scratch == NULL) {
        *err = osp_error_out_of_memory();
        return true;
    }
    int64_t per_image = groups * job.tiles;
    for (int64_t t = 0; t < tasks; t++)
        direct_run_tile(&job, t / per_image, t % per_image / job.tiles,
                        t % job.tiles, scratch, threads);
    cpu_conv__scratch_release(scratch);
    return true;
}
