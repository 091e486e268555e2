/*
 * The CPU device's conv and conv_transpose (osprey/tensor_ops.h), FP32,
 * 1 to 3 spatial dimensions (seen as three, cpu_ops_nn.h), NCHW.
 *
 * conv takes one of four routes per call:
 * - depthwise (one input channel per group, any channel multiplier):
 *   with multiplier 1, 3x3 or 5x5 taps and stride 1 or 2 on a CPU with
 *   AVX-512, cpu_ops_depthwise.c's kernel (epilogue in registers);
 *   otherwise direct loops, an output row at a time. The 3x3 kernel
 *   (MobileNet's) has its own: stride 1 runs over a zero-padded copy of
 *   the plane, so that every output takes the same vectorised nine-tap
 *   loop; stride 2 reads the input rows in place, even and odd columns
 *   split by vector shuffles;
 * - pointwise (1x1 kernel, stride 1, no padding): the input already is
 *   the [channels, positions] matrix, so sgemm runs on it directly;
 * - direct (any other 2-d or 1-d conv, when its weights are packed or
 *   the AVX-512 kernel is selected): the packed kernel reads the im2col
 *   matrix's rows straight from a zero-padded copy of the input, through
 *   a table of row offsets (cpu_ops_conv_direct.c);
 * - everything else: im2col of each image and group, a tile of output
 *   positions at a time, into a per-thread scratch buffer, then sgemm.
 * Each route applies the epilogue (bias, residual, activation) to a tile
 * while it is in cache. With weights packed at plan time (packed_w, from
 * cpu_op_conv_prepack) the GEMM routes run cpu_packed_gemm.h's kernel on
 * the im2col tile (or the input planes), epilogue in registers, instead
 * of OpenBLAS, which would repack the weights on every call; the tiles
 * are then whole 32-column strips, so im2col rows stay 64-byte aligned.
 *
 * conv_transpose is sgemm (W^T x) into column tiles, scattered into y
 * with col2im over y first filled with the bias.
 *
 * Threads (the stream's, cpu_threads.h): the GEMM routes run a tile per
 * task (narrower tiles where there would be too few), or split each
 * tile's GEMM when even then the tiles are fewer than the threads;
 * depthwise runs ranges of planes; conv_transpose runs (image, group,
 * range of output channels), so that no two tasks scatter into one
 * plane. Each task has its own scratch.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv.h"
#include "cpu_depthwise.h"
#include "cpu_ops.h"
#include "cpu_ops_nn.h"
#include "cpu_packed_gemm.h"
#include "cpu_sgemm.h"
#include "cpu_threads.h"
#include "half.h"
#include "osprey/error.h"

/* The scratch a thread keeps between calls, and the im2col / col2im tile:
 * tiles stay well inside it, so in steady state a conv allocates nothing. */
#define SCRATCH_KEEP_BYTES ((size_t)32 << 20)
#define COL_TILE_BYTES ((size_t)2 << 20)
/* A group's weights are packed only up to this size: the packed kernel
 * streams them once per 32 columns, which pays while they stay in L2;
 * larger ones (ResNet's 256- and 512-channel layers) run faster on
 * OpenBLAS, which blocks k. */
#define PACKED_GROUP_MAX_BYTES ((size_t)640 << 10)
/* Pointwise convs run sgemm on column tiles of at most this many output
 * bytes, so the epilogue finds them in cache. */
#define POINTWISE_TILE_BYTES ((size_t)512 << 10)

/* ---- scratch ------------------------------------------------------------ */

/* n rounded up to a multiple of 64 (aligned_alloc's sizes; 64-byte rows
 * keep the kernels' vector loads inside one cache line). */
static size_t round_up_64(size_t n) {
    return (n + 63) / 64 * 64;
}

/* Each thread's scratch buffer grows to the largest request up to
 * SCRATCH_KEEP_BYTES and is kept; a pthread key frees it when the thread
 * exits (the main thread's stays reachable through the thread-local
 * pointer, so leak checkers stay quiet). */
static _Thread_local float *scratch_data;
static _Thread_local size_t scratch_cap; /* floats */
static pthread_key_t scratch_key;
static bool scratch_key_ok;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free_at_exit(void *data) {
    free(data);
}

static void scratch_key_create(void) {
    scratch_key_ok =
        pthread_key_create(&scratch_key, scratch_free_at_exit) == 0;
}

/* An array of n floats for the current call: the thread's buffer, or for
 * a request larger than the buffer may grow, a fresh one. Give it back
 * with cpu_conv__scratch_release. NULL when out of memory. */
float *cpu_conv__scratch_acquire(size_t n) {
    if (n <= scratch_cap)
        return scratch_data;
    if (n > SIZE_MAX / sizeof(float))
        return NULL;
    size_t bytes = round_up_64(n * sizeof(float));
    if (bytes > SCRATCH_KEEP_BYTES)
        return aligned_alloc(64, bytes);
    pthread_once(&scratch_once, scratch_key_create);
    float *grown = aligned_alloc(64, bytes);
    if (grown == NULL)
        return NULL;
    free(scratch_data);
    scratch_data = grown;
    scratch_cap = n;
    if (scratch_key_ok)
        pthread_setspecific(scratch_key, grown);
    return grown;
}

void cpu_conv__scratch_release(float *p) {
    if (p != scratch_data)
        free(p);
}

/* ---- shared pieces ------------------------------------------------------ */

static bool fits_blas(int64_t v) {
    return v <= INT_MAX;
}

static osp_error *too_large(const char *op) {
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "CPU device: %s is too large for a BLAS call", op);
}

/* Row-major y[m, n] (row stride ldy) = w[m, k] x[k, n] (row stride ldx). */
static cpu_sgemm_args sgemm_nn(int64_t m, int64_t n, int64_t k, const float *w,
                               const float *x, int64_t ldx, float *y,
                               int64_t ldy) {
    return (cpu_sgemm_args){.m = m,
                            .n = n,
                            .k = k,
                            .alpha = 1.0f,
                            .a = w,
                            .lda = k,
                            .b = x,
                            .ldb = ldx,
                            .c = y,
                            .ldc = ldy};
}

/* Output columns [p0, p0 + cols) of channels [oc0, oc0 + m) of image
 * `image`: the epilogue of conv, bias per channel (unless the GEMM
 * already started from it: with_bias false). */
static void conv_epilogue(const osp_conv_args *a, int64_t out_size,
                          int64_t image, int64_t oc0, int64_t m, int64_t p0,
                          int64_t cols, bool with_bias) {
    bool bias = with_bias && a->bias != NULL;
    if (!bias && a->residual == NULL && a->act == OSP_UNARY_IDENTITY)
        return;
    for (int64_t oc = oc0; oc < oc0 + m; oc++) {
        int64_t at = (image * a->out_channels + oc) * out_size + p0;
        cpu_nn__epilogue_row(a->y + at, cols, bias ? a->bias[oc] : 0.0f, NULL,
                             a->residual != NULL ? a->residual + at : NULL,
                             a->act, a->act_alpha, a->act_beta);
    }
}

/* y[r * ldy + i] = v[r] for r < rows, i < cols: C's start when the GEMM
 * adds to it (beta 1), which spares OpenBLAS its pass zeroing C and the
 * epilogue its pass adding the bias. */
CPU_NN_HOT static void fill_rows(float *y, int64_t ldy, int64_t rows,
                                 int64_t cols, const float *v) {
    for (int64_t r = 0; r < rows; r++) {
        float *row = y + r * ldy, x = v[r];
        CPU_NN_LOOP(cols, i, row[i] = x);
    }
}

/* y[i * step] += x[i] for i < n. */
CPU_NN_HOT static void scatter_add(float *restrict y, const float *restrict x,
                                   int64_t n, int64_t step) {
    if (step == 1)
        CPU_NN_LOOP(n, i, y[i] += x[i]);
    else
        CPU_NN_LOOP(n, i, y[i * step] += x[i]);
}

/* y[i] += w * x[i * step] for i < n. */
CPU_NN_HOT static void axpy_strided(float *restrict y, const float *restrict x,
                                    int64_t n, int64_t step, float w) {
    if (step == 1)
        CPU_NN_LOOP(n, i, y[i] += w * x[i]);
    else if (step == 2)
        CPU_NN_LOOP(n, i, y[i] += w * x[2 * i]);
    else
        CPU_NN_LOOP(n, i, y[i] += w * x[i * step]);
}

/* ---- im2col ------------------------------------------------------------ */

/* col[K, p1 - p0] (rows ldcol >= p1 - p0 apart) = the im2col matrix of
 * `channels` input planes starting at x, for output positions [p0, p1):
 * row (c, kd, kh, kw), column p holds the input that tap sees for output
 * p. */
CPU_NN_HOT static void im2col(const cpu_nn_geom *g, const float *x,
                              int64_t channels, int64_t p0, int64_t p1,
                              float *col, int64_t ldcol) {
    int64_t OH = g->out[1], OW = g->out[2], H = g->in[1], W = g->in[2];
    float *row_start = col;
    for (int64_t c = 0; c < channels; c++) {
        const float *xc = x + c * g->in_size;
        for (int64_t kd = 0; kd < g->kernel[0]; kd++)
            for (int64_t kh = 0; kh < g->kernel[1]; kh++)
                for (int64_t kw = 0; kw < g->kernel[2]; kw++) {
                    float *dst = row_start;
                    row_start += ldcol;
                    int64_t offset = kw * g->dilation[2] - g->pad[2];
                    for (int64_t p = p0; p < p1;) {
                        int64_t r = p / OW, ow0 = p % OW;
                        int64_t len = OW - ow0 < p1 - p ? OW - ow0 : p1 - p;
                        int64_t od = r / OH, oh = r % OH;
                        int64_t id =
                            od * g->stride[0] - g->pad[0] + kd * g->dilation[0];
                        int64_t ih =
                            oh * g->stride[1] - g->pad[1] + kh * g->dilation[1];
                        const float *src =
                            id >= 0 && id < g->in[0] && ih >= 0 && ih < H
                                ? xc + (id * H + ih) * W
                                : NULL;
                        cpu_conv__im2col_row(dst, src, ow0, len, g->stride[2],
                                             offset, W);
                        dst += len;
                        p += len;
                    }
                }
    }
}

/* ---- the GEMM routes: im2col and pointwise ------------------------------ */

/* Whether p (cpu_op_conv_prepack's) holds these groups of mg x k. */
static bool packed_fits(const osp_packed_weights *p, int64_t groups, int64_t mg,
                        int64_t k) {
    return p->layout == CPU_PACKED_CONV_A && p->groups == groups &&
           p->rows == mg && p->k == k;
}

/* A conv as GEMMs, per image and group: y_g[mg, n] = w_g[mg, k] col[k, n],
 * where col is the im2col matrix (or for pointwise, x itself), a tile of
 * `tile` output positions at a time. Tasks are (image, group, tile);
 * when there are fewer than threads, each tile's GEMM is split instead. */
typedef struct conv_gemm_job {
    const osp_conv_args *a;
    const cpu_nn_geom *g;
    bool pointwise;
    int64_t cg, mg, k, n, tile, tiles;
    /* The weights packed for cpu_packed_gemm, a group after another
     * (packed_group floats each), or NULL: OpenBLAS on w as it lies. */
    const float *packed;
    size_t packed_group;
    _Atomic bool out_of_memory;
} conv_gemm_job;

/* The epilogue of a block of one tile's GEMM (channels [r0, r1) of the
 * group, columns [c0, c1) of the tile). */
typedef struct conv_block_ctx {
    const conv_gemm_job *job;
    int64_t image, oc0, p0;
} conv_block_ctx;

static void conv_block_epilogue(void *arg, int64_t r0, int64_t r1, int64_t c0,
                                int64_t c1) {
    const conv_block_ctx *b = arg;
    conv_epilogue(b->job->a, b->job->n, b->image, b->oc0 + r0, r1 - r0,
                  b->p0 + c0, c1 - c0, false);
}

/* Rows [r0, r1) of one tile's output with the packed weights, epilogue
 * included: y[r, 0 .. cols) = act(w_g[r] col + bias + residual). */
typedef struct packed_tile {
    const conv_gemm_job *job;
    const float *b;
    int64_t ldb, cols, oc0, image, p0;
} packed_tile;

static void packed_tile_rows(void *arg, int64_t lo, int64_t hi) {
    const packed_tile *t = arg;
    const conv_gemm_job *job = t->job;
    const osp_conv_args *a = job->a;
    int64_t n = job->n;
    int64_t at = (t->image * a->out_channels + t->oc0) * n + t->p0;
    cpu_packed_epilogue e = {.bias = a->bias != NULL ? a->bias + t->oc0 : NULL,
                             .residual =
                                 a->residual != NULL ? a->residual + at : NULL,
                             .ldr = n,
                             .act = a->act,
                             .act_alpha = a->act_alpha,
                             .act_beta = a->act_beta};
    const float *w =
        job->packed + (size_t)(t->oc0 / job->mg) * job->packed_group;
    cpu_packed_gemm(w, job->k, lo * CPU_PACK_MR,
                    hi * CPU_PACK_MR < job->mg ? hi * CPU_PACK_MR : job->mg,
                    t->b, t->ldb, t->cols, a->y + at, n, &e);
}

/* Tile t of image b, group gi, on up to `threads` threads; col is the
 * im2col scratch (NULL for pointwise). */
static void conv_gemm_tile(const conv_gemm_job *job, int64_t b, int64_t gi,
                           int64_t t, float *col, int threads) {
    const osp_conv_args *a = job->a;
    int64_t n = job->n, p0 = t * job->tile;
    int64_t cols = n - p0 < job->tile ? n - p0 : job->tile;
    const float *x =
        a->x + (b * a->in_channels + gi * job->cg) * job->g->in_size;
    const float *w = a->w + gi * job->mg * job->k;
    float *y = a->y + (b * a->out_channels + gi * job->mg) * n;
    if (job->packed != NULL) {
        packed_tile pt = {.job = job,
                          .b = job->pointwise ? x + p0 : col,
                          .ldb = job->pointwise ? n : job->tile,
                          .cols = cols,
                          .oc0 = gi * job->mg,
                          .image = b,
                          .p0 = p0};
        if (!job->pointwise)
            im2col(job->g, x, job->cg, p0, p0 + cols, col, job->tile);
        cpu_parallel_range((job->mg + CPU_PACK_MR - 1) / CPU_PACK_MR,
                           CPU_PACK_MR * job->k * cols, threads,
                           packed_tile_rows, &pt);
        return;
    }
    cpu_sgemm_args s;
    if (job->pointwise) {
        s = sgemm_nn(job->mg, cols, job->k, w, x + p0, n, y + p0, n);
    } else {
        im2col(job->g, x, job->cg, p0, p0 + cols, col, cols);
        s = sgemm_nn(job->mg, cols, job->k, w, col, cols, y + p0, n);
    }
    if (a->bias != NULL) {
        fill_rows(y + p0, n, job->mg, cols, a->bias + gi * job->mg);
        s.beta = 1.0f;
    }
    conv_block_ctx ctx = {job, b, gi * job->mg, p0};
    cpu_sgemm(&s, threads, conv_block_epilogue, &ctx);
}

/* Tasks [lo, hi) in (image, group, tile) order: a thread takes a run of
 * them, so that it works on the same images from one conv to the next
 * (their planes stay in its caches). */
static void conv_gemm_range(void *arg, int64_t lo, int64_t hi) {
    conv_gemm_job *job = arg;
    int64_t per_image = job->a->group * job->tiles;
    float *col = NULL;
    if (!job->pointwise) {
        col = cpu_conv__scratch_acquire((size_t)job->k * (size_t)job->tile);
        if (col == NULL) {
            atomic_store(&job->out_of_memory, true);
            return;
        }
    }
    for (int64_t task = lo; task < hi; task++)
        conv_gemm_tile(job, task / per_image, task % per_image / job->tiles,
                       task % job->tiles, col, 1);
    if (col != NULL)
        cpu_conv__scratch_release(col);
}

/* The tile width: at most max_tile, and where the (image, group) pairs
 * give the threads too few tiles, narrower (down to 64 columns), until
 * the tiles are a multiple of the threads or four per thread. */
static int64_t conv_tile(int64_t n, int64_t max_tile, int64_t pairs,
                         int threads) {
    int64_t tile = max_tile < n ? max_tile : n;
    int64_t tiles = (n + tile - 1) / tile;
    while (threads > 1 && pairs * tiles < 4 * threads &&
           (pairs * tiles) % threads != 0 && n / (tiles + 1) >= 64)
        tiles++;
    return (n + tiles - 1) / tiles;
}

static osp_error *conv_gemm(const osp_conv_args *a, const cpu_nn_geom *g,
                            bool pointwise, int threads) {
    int64_t groups = a->group, cg = a->in_channels / groups,
            mg = a->out_channels / groups;
    int64_t k = pointwise ? cg : cg * g->kernel_size, n = g->out_size;
    if (!fits_blas(k) || !fits_blas(n))
        return too_large("conv");
    int64_t max_tile =
        pointwise ? (int64_t)(POINTWISE_TILE_BYTES / sizeof(float)) / mg
                  : (int64_t)(COL_TILE_BYTES / sizeof(float)) / k;
    int64_t min_tile = pointwise ? 256 : 16;
    if (max_tile < min_tile)
        max_tile = min_tile;
    int64_t pairs = a->batch * groups;
    if ((double)mg * (double)k * (double)n * (double)pairs <
        2.0 * (double)CPU_SGEMM_GRAIN)
        threads = 1;
    conv_gemm_job job = {.a = a,
                         .g = g,
                         .pointwise = pointwise,
                         .cg = cg,
                         .mg = mg,
                         .k = k,
                         .n = n};
    bool packed =
        a->packed_w != NULL && packed_fits(a->packed_w, groups, mg, k);
    osp_error *err = NULL;
    if (!pointwise && cpu_conv_direct_serves(g, packed) &&
        cpu_conv_direct(a, g, packed ? a->packed_w->data : NULL,
                        packed ? a->packed_w->group_floats : 0, threads, &err))
        return err;
    job.tile = conv_tile(n, max_tile, pairs, threads);
    if (packed) {
        job.packed = a->packed_w->data;
        job.packed_group = a->packed_w->group_floats;
        /* whole strips of the kernel, so im2col rows stay 64-byte aligned */
        job.tile =
            (job.tile + CPU_PACK_STRIP - 1) / CPU_PACK_STRIP * CPU_PACK_STRIP;
    }
    job.tiles = (n + job.tile - 1) / job.tile;
    atomic_init(&job.out_of_memory, false);
    int64_t tasks = pairs * job.tiles;
    if (tasks >= threads) {
        cpu_parallel_range(tasks, job.mg * job.k * job.tile, threads,
                           conv_gemm_range, &job);
        return atomic_load(&job.out_of_memory) ? osp_error_out_of_memory()
                                               : NULL;
    }
    /* Fewer tiles than threads: each tile's GEMM is split. */
    float *col = NULL;
    if (!pointwise) {
        col = cpu_conv__scratch_acquire((size_t)k * (size_t)job.tile);
        if (col == NULL)
            return osp_error_out_of_memory();
    }
    int64_t per_image = groups * job.tiles;
    for (int64_t t = 0; t < tasks; t++)
        conv_gemm_tile(&job, t / per_image, t % per_image / job.tiles,
                       t % job.tiles, col, threads);
    if (col != NULL)
        cpu_conv__scratch_release(col);
    return NULL;
}

static bool is_pointwise(const cpu_nn_geom *g) {
    for (int d = 0; d < 3; d++)
        if (g->kernel[d] != 1 || g->stride[d] != 1 || g->pad[d] != 0 ||
            g->out[d] != g->in[d])
            return false;
    return true;
}

/* ---- depthwise route ---------------------------------------------------- */

/* y[i] = the 3x3 window of rows r0..r2 at column i (taps w, row-major),
 * for i < n. Every tap is inside its row. */
CPU_NN_INLINE void dw3x3_interior_s1(float *restrict y,
                                     const float *restrict r0,
                                     const float *restrict r1,
                                     const float *restrict r2,
                                     const float *restrict w, int64_t n) {
    float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5],
          w6 = w[6], w7 = w[7], w8 = w[8];
    CPU_NN_LOOP(n, i,
                y[i] = w0 * r0[i] + w1 * r0[i + 1] + w2 * r0[i + 2] +
                       w3 * r1[i] + w4 * r1[i + 1] + w5 * r1[i + 2] +
                       w6 * r2[i] + w7 * r2[i + 1] + w8 * r2[i + 2]);
}

/* The same at column 2 i, the even and odd columns split by vector
 * shuffles where the compiler has them (cpu_ops_nn.h). */
#ifdef CPU_NN_SHUFFLE

/* acc += the 8 outputs' taps of row r (columns 2 i .. 2 i + 16), weights
 * wa, wb, wc. A macro: a function returning cpu_nn_v8 would change the ABI of
 * the baseline clone. */
#define DW3X3_S2_ROW(acc, r, wa, wb, wc)                                       \
    do {                                                                       \
        cpu_nn_v8 a_, b_, c_, d_;                                              \
        memcpy(&a_, (r), sizeof a_);                                           \
        memcpy(&b_, (r) + 8, sizeof b_);                                       \
        memcpy(&c_, (r) + 2, sizeof c_);                                       \
        memcpy(&d_, (r) + 9, sizeof d_);                                       \
        (acc) +=                                                               \
            (wa)*__builtin_shufflevector(a_, b_, 0, 2, 4, 6, 8, 10, 12, 14) +  \
            (wb)*__builtin_shufflevector(a_, b_, 1, 3, 5, 7, 9, 11, 13, 15) +  \
            (wc)*__builtin_shufflevector(c_, d_, 0, 2, 4, 6, 9, 11, 13, 15);   \
    } while (0)
#endif

CPU_NN_INLINE void dw3x3_interior_s2(float *restrict y,
                                     const float *restrict r0,
                                     const float *restrict r1,
                                     const float *restrict r2,
                                     const float *restrict w, int64_t n) {
    int64_t i = 0;
#ifdef CPU_NN_SHUFFLE
    for (; i + 8 <= n; i += 8) {
        cpu_nn_v8 acc = {0};
        DW3X3_S2_ROW(acc, r0 + 2 * i, w[0], w[1], w[2]);
        DW3X3_S2_ROW(acc, r1 + 2 * i, w[3], w[4], w[5]);
        DW3X3_S2_ROW(acc, r2 + 2 * i, w[6], w[7], w[8]);
        memcpy(y + i, &acc, sizeof acc);
    }
#endif
    for (; i < n; i++) {
        int64_t c = 2 * i;
        y[i] = w[0] * r0[c] + w[1] * r0[c + 1] + w[2] * r0[c + 2] +
               w[3] * r1[c] + w[4] * r1[c + 1] + w[5] * r1[c + 2] +
               w[6] * r2[c] + w[7] * r2[c + 1] + w[8] * r2[c + 2];
    }
}

/* Output ow of a 3x3 row whose window crosses the row's ends (only the
 * taps inside count). */
CPU_NN_INLINE float dw3x3_edge(const float *const rows[3], int64_t in,
                               int64_t start, const float *w) {
    int64_t lo = start < 0 ? -start : 0;
    int64_t hi = in - start < 3 ? in - start : 3;
    float acc = 0.0f;
    for (int kh = 0; kh < 3; kh++)
        for (int64_t kw = lo; kw < hi; kw++)
            acc += w[kh * 3 + kw] * rows[kh][start + kw];
    return acc;
}

/* The stride-1 3x3 route's input plane, padded: p[r][c] = x[r - pad_h][c
 * - pad_w] inside x (in_h x in_w; NULL when the whole slice is padding),
 * 0 outside, for r < padded_h and c < padded_w: with padded_h = out_h + 2
 * and padded_w = out_w + 2, every output's window lies inside p. */
static void dw3x3_pad_plane(const float *x, int64_t in_h, int64_t in_w,
                            int64_t pad_h, int64_t pad_w, int64_t padded_h,
                            int64_t padded_w, float *p) {
    /* columns [lo, hi) of a padded row hold input columns lo - pad_w .. */
    int64_t lo = pad_w < padded_w ? pad_w : padded_w;
    int64_t hi = pad_w + in_w < padded_w ? pad_w + in_w : padded_w;
    if (hi < lo)
        hi = lo;
    for (int64_t r = 0; r < padded_h; r++) {
        float *row = p + r * padded_w;
        int64_t ih = r - pad_h;
        if (x == NULL || ih < 0 || ih >= in_h) {
            memset(row, 0, (size_t)padded_w * sizeof(float));
            continue;
        }
        memset(row, 0, (size_t)lo * sizeof(float));
        if (hi > lo)
            memcpy(row + lo, x + (ih * in_w + lo - pad_w),
                   (size_t)(hi - lo) * sizeof(float));
        memset(row + hi, 0, (size_t)(padded_w - hi) * sizeof(float));
    }
}

/* One output row (od, oh) of a depthwise conv, any kernel: one strided
 * axpy per tap over the row's outputs. */
static void dw_row_generic(const cpu_nn_geom *g, const float *x, const float *w,
                           float *y, int64_t od, int64_t oh) {
    int64_t H = g->in[1], W = g->in[2], OW = g->out[2];
    memset(y, 0, (size_t)OW * sizeof(float));
    for (int64_t kd = 0; kd < g->kernel[0]; kd++) {
        int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dilation[0];
        if (id < 0 || id >= g->in[0])
            continue;
        for (int64_t kh = 0; kh < g->kernel[1]; kh++) {
            int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dilation[1];
            if (ih < 0 || ih >= H)
                continue;
            const float *src = x + (id * H + ih) * W;
            const float *wk = w + (kd * g->kernel[1] + kh) * g->kernel[2];
            for (int64_t kw = 0; kw < g->kernel[2]; kw++) {
                int64_t lo, hi, offset = kw * g->dilation[2] - g->pad[2];
                cpu_nn_valid_range(OW, g->stride[2], offset, W, &lo, &hi);
                if (hi > lo)
                    axpy_strided(y + lo, src + (lo * g->stride[2] + offset),
                                 hi - lo, g->stride[2], wk[kw]);
            }
        }
    }
}

/* One depth slice (od) of output plane y with the 3x3 route. Stride 1
 * pads the input slice into p first (p has room for the padded plane and
 * as many rows again for narrow planes' outputs), so that every output
 * is interior;
 * stride 2 reads the input rows in place (a copy would cost as much as
 * the arithmetic), with the row of zeros p standing in for padding rows
 * and the few outputs at the row ends done tap by tap. */
CPU_NN_HOT static void dw3x3_slice(const cpu_nn_geom *g, const float *x,
                                   const float *w, float *y, int64_t od,
                                   float *p) {
    int64_t s = g->stride[2], H = g->in[1], W = g->in[2], OH = g->out[1],
            OW = g->out[2], pad_h = g->pad[1], pad_w = g->pad[2];
    int64_t id = od * g->stride[0] - g->pad[0];
    const float *slice = id >= 0 && id < g->in[0] ? x + id * H * W : NULL;
    if (s == 1) {
        int64_t padded_h = OH + 2, padded_w = OW + 2;
        dw3x3_pad_plane(slice, H, W, pad_h, pad_w, padded_h, padded_w, p);
        if (OW >= 32) {
            for (int64_t oh = 0; oh < OH; oh++) {
                const float *r0 = p + oh * padded_w;
                dw3x3_interior_s1(y + (od * OH + oh) * OW, r0, r0 + padded_w,
                                  r0 + 2 * padded_w, w, OW);
            }
            return;
        }
        /* Narrow rows would leave most outputs to the scalar remainder:
         * the rows run as one, padded_w apart (the two columns between
         * them are computed and dropped), into q after the plane. */
        float *q = p + padded_h * padded_w;
        int64_t flat = OH * padded_w - 2;
        dw3x3_interior_s1(q, p, p + padded_w, p + 2 * padded_w, w, flat);
        for (int64_t oh = 0; oh < OH; oh++)
            memcpy(y + (od * OH + oh) * OW, q + oh * padded_w,
                   (size_t)OW * sizeof(float));
        return;
    }
    int64_t lo, hi; /* outputs whose three columns are inside the row */
    cpu_nn_valid_range(OW, s, -pad_w, W - 2, &lo, &hi);
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *rows[3];
        for (int kh = 0; kh < 3; kh++) {
            int64_t ih = oh * s - pad_h + kh;
            rows[kh] = slice != NULL && ih >= 0 && ih < H ? slice + ih * W : p;
        }
        float *row = y + (od * OH + oh) * OW;
        for (int64_t ow = 0; ow < lo; ow++)
            row[ow] = dw3x3_edge(rows, W, ow * s - pad_w, w);
        if (hi > lo) {
            int64_t first = lo * s - pad_w;
            dw3x3_interior_s2(row + lo, rows[0] + first, rows[1] + first,
                              rows[2] + first, w, hi - lo);
        }
        for (int64_t ow = hi; ow < OW; ow++)
            row[ow] = dw3x3_edge(rows, W, ow * s - pad_w, w);
    }
}

/* Depthwise planes split into ranges, a range per task; each task has
 * its own scratch (the padded plane or the row of zeros). */
typedef struct depthwise_job {
    const osp_conv_args *a;
    const cpu_nn_geom *g;
    bool avx512; /* cpu_depthwise.h's kernel, epilogue included */
    bool k3;
    int parts;
    _Atomic bool out_of_memory;
} depthwise_job;

/* Planes [lo, hi) of a multiplier-1 depthwise conv with the AVX-512
 * kernel; zeros is a row of zeros of the input's width. */
static void depthwise_avx512_planes(const depthwise_job *job, int64_t lo,
                                    int64_t hi, const float *zeros) {
    const osp_conv_args *a = job->a;
    const cpu_nn_geom *g = job->g;
    for (int64_t plane = lo; plane < hi; plane++) {
        int64_t oc = plane % a->out_channels;
        cpu_depthwise_avx512_plane(
            g, a->x + plane * g->in_size, a->w + oc * g->kernel_size,
            a->bias != NULL ? a->bias[oc] : 0.0f,
            a->residual != NULL ? a->residual + plane * g->out_size : NULL,
            a->y + plane * g->out_size, a->act, a->act_alpha, a->act_beta,
            zeros);
    }
}

static void depthwise_task(void *arg, int64_t part) {
    depthwise_job *job = arg;
    const osp_conv_args *a = job->a;
    const cpu_nn_geom *g = job->g;
    int64_t mult = a->out_channels / a->in_channels;
    int64_t lo, hi;
    cpu_split_range(a->batch * a->out_channels, job->parts, part, 1, &lo, &hi);
    /* the AVX-512 kernel and the 3x3 loops at stride 2: a row of zeros;
     * the 3x3 loops at stride 1: the padded plane, then its rows of
     * outputs */
    float *padded = NULL;
    if ((job->k3 || job->avx512) && hi > lo) {
        bool zeros = job->avx512 || g->stride[2] == 2;
        size_t n = zeros
                       ? (size_t)g->in[2]
                       : (size_t)(2 * g->out[1] + 2) * (size_t)(g->out[2] + 2);
        padded = cpu_conv__scratch_acquire(n);
        if (padded == NULL) {
            atomic_store(&job->out_of_memory, true);
            return;
        }
        if (zeros)
            memset(padded, 0, n * sizeof(float));
    }
    if (job->avx512) {
        depthwise_avx512_planes(job, lo, hi, padded);
        if (padded != NULL)
            cpu_conv__scratch_release(padded);
        return;
    }
    for (int64_t plane = lo; plane < hi; plane++) {
        int64_t b = plane / a->out_channels, oc = plane % a->out_channels;
        const float *x = a->x + (b * a->in_channels + oc / mult) * g->in_size;
        const float *w = a->w + oc * g->kernel_size;
        float *y = a->y + plane * g->out_size;
        for (int64_t od = 0; od < g->out[0]; od++) {
            if (job->k3) {
                dw3x3_slice(g, x, w, y, od, padded);
                continue;
            }
            for (int64_t oh = 0; oh < g->out[1]; oh++)
                dw_row_generic(g, x, w, y + (od * g->out[1] + oh) * g->out[2],
                               od, oh);
        }
        cpu_nn__epilogue_row(
            y, g->out_size, a->bias != NULL ? a->bias[oc] : 0.0f, NULL,
            a->residual != NULL ? a->residual + plane * g->out_size : NULL,
            a->act, a->act_alpha, a->act_beta);
    }
    if (padded != NULL)
        cpu_conv__scratch_release(padded);
}

static osp_error *conv_depthwise(const osp_conv_args *a, const cpu_nn_geom *g,
                                 int threads) {
    depthwise_job job = {.a = a,
                         .g = g,
                         .avx512 = a->out_channels == a->in_channels &&
                                   cpu_depthwise_avx512_serves(g)};
    job.k3 = g->kernel[0] == 1 && g->kernel[1] == 3 && g->kernel[2] == 3 &&
             g->dilation[1] == 1 && g->dilation[2] == 1 &&
             g->stride[1] == g->stride[2] &&
             (g->stride[2] == 1 || g->stride[2] == 2);
    int64_t planes = a->batch * a->out_channels;
    /* a multiply-add per tap and output, in cache */
    job.parts = cpu_split_parts(planes * g->out_size * g->kernel_size,
                                CPU_GRAIN, threads);
    if (job.parts > planes)
        job.parts = (int)planes;
    atomic_init(&job.out_of_memory, false);
    cpu_parallel_for(job.parts, depthwise_task, &job, job.parts);
    return atomic_load(&job.out_of_memory) ? osp_error_out_of_memory() : NULL;
}

static bool is_depthwise(const osp_conv_args *a) {
    return a->group > 1 && a->in_channels == a->group;
}

/* The w_fp16 form (osprey/tensor_ops.h; never depthwise, the dispatcher
 * checked): x rounded to FP16 and w_fp16 widened, into temporaries, then
 * the FP32 conv on them. The reference for the devices that multiply in
 * FP16; the ONNX runtime never asks the CPU for it. */
static osp_error *conv_fp16(const osp_conv_args *a, const cpu_nn_geom *g,
                            int threads) {
    size_t in_size = 1, kernel_size = 1;
    for (int d = 0; d < a->spatial_rank; d++) {
        in_size *= (size_t)a->in_dims[d];
        kernel_size *= (size_t)a->kernel[d];
    }
    size_t x_count = (size_t)(a->batch * a->in_channels) * in_size;
    size_t w_count = (size_t)a->out_channels *
                     (size_t)(a->in_channels / a->group) * kernel_size;
    float *x = malloc(x_count * sizeof *x), *w = malloc(w_count * sizeof *w);
    osp_error *err = NULL;
    if (x == NULL || w == NULL) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < x_count; i++)
        x[i] = fp16_to_fp32(fp32_to_fp16(a->x[i]));
    for (size_t i = 0; i < w_count; i++)
        w[i] = fp16_to_fp32(((const uint16_t *)a->w_fp16)[i]);
    osp_conv_args b = *a;
    b.x = x;
    b.w = w;
    b.w_fp16 = NULL;
    b.packed_w = NULL;
    err = conv_gemm(&b, g, is_pointwise(g), threads);
out:
    free(x);
    free(w);
    return err;
}

/* Picks the route (see the top of the file); group > 1 keeps a single
 * channel group out of the depthwise route (that is a plain conv). */
osp_error *cpu_op_conv(osp_device *dev, void *stream,
                       const osp_conv_args *args) {
    (void)dev;
    int threads = cpu_stream_threads(stream);
    cpu_nn_geom g;
    cpu_nn_geom_init(&g, args->spatial_rank, args->in_dims, args->out_dims,
                     args->kernel, args->stride, args->pad_begin,
                     args->dilation);
    if (is_depthwise(args))
        return conv_depthwise(args, &g, threads);
    if (args->w_fp16 != NULL)
        return conv_fp16(args, &g, threads);
    return conv_gemm(args, &g, is_pointwise(&g), threads);
}

/* The GEMM routes' weights, packed per group, when a group's fit
 * PACKED_GROUP_MAX_BYTES (else, for the depthwise route, and where the
 * direct route reads w as it lies, *out stays NULL). */
osp_error *cpu_op_conv_prepack(osp_device *dev, void *stream,
                               const osp_conv_args *args,
                               osp_packed_weights **out) {
    (void)dev;
    (void)stream;
    *out = NULL;
    if (is_depthwise(args))
        return NULL;
    /* the direct route under AVX-512 reads the weights as they lie: a
     * packed copy would only take memory */
    cpu_nn_geom g;
    cpu_nn_geom_init(&g, args->spatial_rank, args->in_dims, args->out_dims,
                     args->kernel, args->stride, args->pad_begin,
                     args->dilation);
    if (!is_pointwise(&g) && cpu_conv_direct_serves(&g, false))
        return NULL;
    int64_t kernel_size = 1;
    for (int d = 0; d < args->spatial_rank; d++)
        kernel_size *= args->kernel[d];
    int64_t groups = args->group, mg = args->out_channels / groups,
            k = args->in_channels / groups * kernel_size;
    size_t per_group = cpu_packed_floats(mg, k);
    if (mg == 0 || per_group * sizeof(float) > PACKED_GROUP_MAX_BYTES)
        return NULL;
    osp_packed_weights *p =
        cpu_packed_weights_new(CPU_PACKED_CONV_A, groups, mg, k, per_group);
    if (p == NULL)
        return osp_error_out_of_memory();
    for (int64_t gi = 0; gi < groups; gi++)
        cpu_pack_a(args->w + gi * mg * k, k, mg, k,
                   p->data + (size_t)gi * per_group);
    *out = p;
    return NULL;
}

void cpu_op_packed_weights_free(osp_device *dev, osp_packed_weights *packed) {
    (void)dev;
    free(packed);
}

/* ---- conv_transpose ----------------------------------------------------- */

/* Scatters col (rows (oc, kd, kh, kw) of mg output channels, columns the
 * input positions [p0, p1)) into y, the group's first output plane: each
 * input position i and tap k adds to output i * stride - pad + k *
 * dilation where that is inside y. */
static void col2im(const cpu_nn_geom *g, const float *col, int64_t mg,
                   int64_t p0, int64_t p1, float *y) {
    int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const float *src = col;
    for (int64_t oc = 0; oc < mg; oc++) {
        float *yc = y + oc * g->out_size;
        for (int64_t kd = 0; kd < g->kernel[0]; kd++)
            for (int64_t kh = 0; kh < g->kernel[1]; kh++)
                for (int64_t kw = 0; kw < g->kernel[2]; kw++) {
                    int64_t offset = kw * g->dilation[2] - g->pad[2];
                    for (int64_t p = p0; p < p1;) {
                        int64_t r = p / W, iw0 = p % W;
                        int64_t len = W - iw0 < p1 - p ? W - iw0 : p1 - p;
                        int64_t id = r / H, ih = r % H;
                        int64_t od =
                            id * g->stride[0] - g->pad[0] + kd * g->dilation[0];
                        int64_t oh =
                            ih * g->stride[1] - g->pad[1] + kh * g->dilation[1];
                        if (od >= 0 && od < g->out[0] && oh >= 0 && oh < OH) {
                            int64_t lo, hi;
                            cpu_nn_valid_range(iw0 + len, g->stride[2], offset,
                                               OW, &lo, &hi);
                            if (lo < iw0)
                                lo = iw0;
                            if (hi > lo)
                                scatter_add(yc + (od * OH + oh) * OW +
                                                (lo * g->stride[2] + offset),
                                            src + (lo - iw0), hi - lo,
                                            g->stride[2]);
                        }
                        src += len;
                        p += len;
                    }
                }
    }
}

/* Per image, group and range of output channels (a task each): y starts
 * as the bias, then a tile of input positions at a time, col = W^T x
 * (sgemm, the rows of W^T for the range's channels) is scattered into
 * y's planes of those channels, which no other task writes. */
typedef struct conv_transpose_job {
    const osp_conv_args *a;
    const cpu_nn_geom *g;
    int64_t cg, mg, rows, n, tile, chunks;
    _Atomic bool out_of_memory;
} conv_transpose_job;

static void conv_transpose_task(void *arg, int64_t task) {
    conv_transpose_job *job = arg;
    const osp_conv_args *a = job->a;
    const cpu_nn_geom *g = job->g;
    int64_t groups = a->group, ks = g->kernel_size;
    int64_t b = task / (groups * job->chunks),
            gi = task % (groups * job->chunks) / job->chunks;
    int64_t c0, c1; /* the group's output channels [c0, c1) */
    cpu_split_range(job->mg, job->chunks, task % job->chunks, 1, &c0, &c1);
    if (c1 <= c0)
        return;
    float *col =
        cpu_conv__scratch_acquire((size_t)((c1 - c0) * ks) * (size_t)job->tile);
    if (col == NULL) {
        atomic_store(&job->out_of_memory, true);
        return;
    }
    float *y = a->y + (b * a->out_channels + gi * job->mg + c0) * g->out_size;
    for (int64_t oc = c0; oc < c1; oc++) {
        float *plane = y + (oc - c0) * g->out_size;
        float v = a->bias != NULL ? a->bias[gi * job->mg + oc] : 0.0f;
        for (int64_t i = 0; i < g->out_size; i++)
            plane[i] = v;
    }
    const float *x = a->x + (b * a->in_channels + gi * job->cg) * job->n;
    const float *w = a->w + gi * job->cg * job->rows + c0 * ks;
    for (int64_t p0 = 0; p0 < job->n; p0 += job->tile) {
        int64_t cols = job->n - p0 < job->tile ? job->n - p0 : job->tile;
        /* col[(c1 - c0) ks, cols] = w_g^T[rows of c0 .. c1, cg] x_g */
        cpu_sgemm_args s = {.trans_a = true,
                            .m = (c1 - c0) * ks,
                            .n = cols,
                            .k = job->cg,
                            .alpha = 1.0f,
                            .a = w,
                            .lda = job->rows,
                            .b = x + p0,
                            .ldb = job->n,
                            .c = col,
                            .ldc = cols};
        cpu_sgemm_serial(&s);
        col2im(g, col, c1 - c0, p0, p0 + cols, y);
    }
    cpu_conv__scratch_release(col);
}

osp_error *cpu_op_conv_transpose(osp_device *dev, void *stream,
                                 const osp_conv_transpose_args *args) {
    (void)dev;
    int threads = cpu_stream_threads(stream);
    const osp_conv_args *a = args;
    cpu_nn_geom g;
    cpu_nn_geom_init(&g, a->spatial_rank, a->in_dims, a->out_dims, a->kernel,
                     a->stride, a->pad_begin, a->dilation);
    int64_t groups = a->group, cg = a->in_channels / groups,
            mg = a->out_channels / groups;
    int64_t rows = mg * g.kernel_size, n = g.in_size;
    if (!fits_blas(rows) || !fits_blas(n) || !fits_blas(cg))
        return too_large("conv_transpose");
    int64_t tile = (int64_t)(COL_TILE_BYTES / sizeof(float)) / rows;
    if (tile < 16)
        tile = 16;
    if (tile > n)
        tile = n;
    int64_t pairs = a->batch * groups;
    if ((double)rows * (double)cg * (double)n * (double)pairs <
        2.0 * (double)CPU_SGEMM_GRAIN)
        threads = 1;
    int64_t chunks = pairs >= threads ? 1 : (threads + pairs - 1) / pairs;
    if (chunks > mg)
        chunks = mg;
    conv_transpose_job job = {.a = a,
                              .g = &g,
                              .cg = cg,
                              .mg = mg,
                              .rows = rows,
                              .n = n,
                              .tile = tile,
                              .chunks = chunks};
    atomic_init(&job.out_of_memory, false);
    cpu_parallel_for(pairs * chunks, conv_transpose_task, &job, threads);
    return atomic_load(&job.out_of_memory) ? osp_error_out_of_memory() : NULL;
}
