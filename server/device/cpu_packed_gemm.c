/*
 * GEMM against packed weights, epilogue in registers (cpu_packed_gemm.h).
 *
 * The micro-kernel holds a tile of CPU_PACK_MR rows by 32 columns of C
 * in registers (sixteen 16-float vectors under AVX-512) over the whole of
 * k: per step p it loads two vectors of the right operand's row p and
 * broadcasts the left operand's MR values of column p (for conv, the
 * packed panel's, which lie next to each other; for gemm_b, one from
 * each row of A). The tile starts as the bias; residual and ReLU/Clip are
 * applied before the one store; other activations run over the stored
 * rows while in L1. cpu_packed_gemm_at (the direct conv route's) reads
 * B's row p through a table of offsets instead of at p ldb, and with A
 * as it lies holds 12 rows under AVX-512 (24 accumulators).
 *
 * cpu_packed_gemm runs blocks of B's columns (about 256 KiB of B, whole
 * 32-column strips) outside, row panels inside them and the block's
 * strips innermost: the block stays in L2 while the panels pass it, and
 * each panel writes runs of a block's width into its eight rows of C (a
 * strip at a time across all panels wrote 128 bytes into every row of C,
 * one page each on wide planes: a 16-to-96-channel pointwise conv on
 * 112x112 ran at a third of the speed); cpu_packed_gemm_b runs blocks of
 * 64 rows of A outside, the strips of B inside; cpu_packed_gemm_at row
 * panels outside and all strips inside (its caller keeps B in L2).
 */
#include "cpu_packed_gemm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops_nn.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PACKED_HAVE_AVX512 1
#endif

#define TILE_N CPU_PACK_STRIP
/* Floats of B per block of cpu_packed_gemm's columns (256 KiB: in L2
 * while every row panel passes it). */
#define B_BLOCK_FLOATS ((int64_t)64 << 10)
/* Rows of A per block of cpu_packed_gemm_b (a multiple of CPU_PACK_MR). */
#define ROWS_BLOCK 64

void cpu_pack_a(const float *a, int64_t lda, int64_t m, int64_t k,
                float *packed) {
    for (int64_t i0 = 0; i0 < m; i0 += CPU_PACK_MR) {
        float *panel = packed + i0 * k;
        int64_t rows = m - i0 < CPU_PACK_MR ? m - i0 : CPU_PACK_MR;
        for (int64_t p = 0; p < k; p++) {
            for (int64_t r = 0; r < rows; r++)
                panel[p * CPU_PACK_MR + r] = a[(i0 + r) * lda + p];
            for (int64_t r = rows; r < CPU_PACK_MR; r++)
                panel[p * CPU_PACK_MR + r] = 0.0f;
        }
    }
}

/* Whether the kernel applies e's activation itself (else the rows are
 * finished with cpu_nn__epilogue_row after the store). */
static bool act_in_kernel(osp_unary_op act) {
    return act == OSP_UNARY_IDENTITY || act == OSP_UNARY_RELU ||
           act == OSP_UNARY_CLIP;
}

/* The activations the kernel leaves: rows [0, rows) x [0, cols) of c. */
static void finish_rows(float *c, int64_t ldc, int64_t rows, int64_t cols,
                        const cpu_packed_epilogue *e) {
    if (act_in_kernel(e->act))
        return;
    for (int64_t r = 0; r < rows; r++)
        cpu_nn__epilogue_row(c + r * ldc, cols, 0.0f, NULL, NULL, e->act,
                             e->act_alpha, e->act_beta);
}

/* ---- portable kernel ---------------------------------------------------- */

/* One tile of C: rows [0, rows), columns [0, cols) (cols <= TILE_N).
 * The left operand is read by broadcast: element (r, p) at a[r * a_rs +
 * p * a_ps] (a packed panel: a_rs 1, a_ps MR; rows of A: a_rs lda, a_ps
 * 1); the right one by vectors, row p at b + p * ldb, or with b_rows at
 * b + b_rows[p] (cpu_packed_gemm_at's table). The bias is per
 * row of C, or with bias_per_col per column; bias and residual are
 * offset to the tile's first row and column. */
CPU_NN_HOT static void
tile_portable(const float *restrict a, int64_t a_rs, int64_t a_ps, int64_t k,
              const float *restrict b, int64_t ldb, const int32_t *b_rows,
              int64_t rows, int64_t cols, float *restrict c, int64_t ldc,
              const float *bias, bool bias_per_col, const float *residual,
              int64_t ldr, const cpu_packed_epilogue *e) {
    float acc[CPU_PACK_MR][TILE_N];
    for (int r = 0; r < CPU_PACK_MR; r++)
        for (int j = 0; j < TILE_N; j++)
            acc[r][j] = bias == NULL || r >= rows ? 0.0f
                        : bias_per_col            ? (j < cols ? bias[j] : 0.0f)
                                                  : bias[r];
    float brow[TILE_N] = {0};
    for (int64_t p = 0; p < k; p++) {
        memcpy(brow, b_rows != NULL ? b + b_rows[p] : b + p * ldb,
               (size_t)cols * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            float w = a[r * a_rs + p * a_ps];
            for (int j = 0; j < TILE_N; j++)
                acc[r][j] += w * brow[j];
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        float *row = c + r * ldc;
        for (int64_t j = 0; j < cols; j++) {
            float v = acc[r][j];
            if (residual != NULL)
                v += residual[r * ldr + j];
            if (e->act == OSP_UNARY_RELU)
                v = v > 0.0f ? v : 0.0f;
            else if (e->act == OSP_UNARY_CLIP)
                v = v < e->act_alpha ? e->act_alpha
                                     : (v > e->act_beta ? e->act_beta : v);
            row[j] = v;
        }
    }
}

/* ---- AVX-512 kernel ----------------------------------------------------- */

#ifdef PACKED_HAVE_AVX512

#define AVX512_TARGET __attribute__((target("avx512f,fma")))

/* Most rows of C an AVX-512 tile holds: 12 x 2 accumulators, two vectors
 * of B and a broadcast fill 27 of the 32 registers. */
#define AVX512_MR_MAX 12

/* tile_portable's tile with lane masks m0 (columns 0..15) and m1
 * (16..31), mr rows (CPU_PACK_MR for packed panels; AVX512_MR_MAX for
 * cpu_packed_gemm_at's rows of A as they lie, 24 FMAs per 12 broadcasts
 * instead of 16 per 8); nv (a constant after inlining, as mr is) is 1
 * when the tile has at most 16 columns, so that a narrow last tile costs
 * half a wide one. Rows past `rows` broadcast the last row's values
 * (inside the operand) and are not stored. */
AVX512_TARGET static inline __attribute__((always_inline)) void
tile_avx512_body(const float *restrict a, int64_t a_rs, int64_t a_ps, int64_t k,
                 const float *restrict b, int64_t ldb, bool at,
                 const int32_t *restrict b_rows, int mr, int64_t rows, int nv,
                 __mmask16 m0, __mmask16 m1, bool full, float *restrict c,
                 int64_t ldc, const float *bias, bool bias_per_col,
                 const float *residual, int64_t ldr,
                 const cpu_packed_epilogue *e) {
    __m512 acc[AVX512_MR_MAX][2];
    const float *arow[AVX512_MR_MAX];
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        arow[r] = a + (r < rows ? r : rows - 1) * a_rs;
        if (bias_per_col && bias != NULL) {
            acc[r][0] = _mm512_maskz_loadu_ps(m0, bias);
            acc[r][1] = _mm512_maskz_loadu_ps(m1, bias + 16);
        } else {
            __m512 v =
                _mm512_set1_ps(bias != NULL && r < rows ? bias[r] : 0.0f);
            acc[r][0] = v;
            acc[r][1] = v;
        }
    }
    for (int64_t p = 0; p < k; p++) {
        const float *brow = at ? b + b_rows[p] : b + p * ldb;
        __m512 b0 =
            full ? _mm512_loadu_ps(brow) : _mm512_maskz_loadu_ps(m0, brow);
        __m512 b1 = _mm512_setzero_ps();
        if (nv == 2)
            b1 = full ? _mm512_loadu_ps(brow + 16)
                      : _mm512_maskz_loadu_ps(m1, brow + 16);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            __m512 wv = _mm512_set1_ps(arow[r][p * a_ps]);
            acc[r][0] = _mm512_fmadd_ps(wv, b0, acc[r][0]);
            if (nv == 2)
                acc[r][1] = _mm512_fmadd_ps(wv, b1, acc[r][1]);
        }
    }
    __m512 lo = _mm512_set1_ps(e->act == OSP_UNARY_CLIP ? e->act_alpha : 0.0f);
    __m512 hi = _mm512_set1_ps(e->act_beta);
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        if (r >= rows)
            break;
        for (int v = 0; v < nv; v++) {
            __mmask16 mask = v == 0 ? m0 : m1;
            __m512 x = acc[r][v];
            if (residual != NULL)
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(
                                         mask, residual + r * ldr + 16 * v));
            if (e->act == OSP_UNARY_RELU || e->act == OSP_UNARY_CLIP)
                x = _mm512_max_ps(x, lo);
            if (e->act == OSP_UNARY_CLIP)
                x = _mm512_min_ps(x, hi);
            float *out = c + r * ldc + 16 * v;
            if (full)
                _mm512_storeu_ps(out, x);
            else
                _mm512_mask_storeu_ps(out, mask, x);
        }
    }
}

/* The full tile, or the masked one of a narrow tile (see tile_portable).
 * a_ps and at (B's rows through b_rows) are constants in each caller, so
 * the inlined body's loads are plain broadcasts and its B addresses need
 * no test. */
#define TILE_AVX512(name, a_ps, at, mr)                                        \
    AVX512_TARGET static void name(                                            \
        const float *a, int64_t a_rs, int64_t k, const float *b, int64_t ldb,  \
        const int32_t *b_rows, int64_t rows, int64_t cols, float *c,           \
        int64_t ldc, const float *bias, bool bias_per_col,                     \
        const float *residual, int64_t ldr, const cpu_packed_epilogue *e) {    \
        if (cols == TILE_N) {                                                  \
            tile_avx512_body(a, a_rs, a_ps, k, b, ldb, at, b_rows, mr, rows,   \
                             2, 0xFFFF, 0xFFFF, true, c, ldc, bias,            \
                             bias_per_col, residual, ldr, e);                  \
            return;                                                            \
        }                                                                      \
        __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);    \
        if (cols <= 16) {                                                      \
            tile_avx512_body(a, a_rs, a_ps, k, b, ldb, at, b_rows, mr, rows,   \
                             1, m0, 0, false, c, ldc, bias, bias_per_col,      \
                             residual, ldr, e);                                \
            return;                                                            \
        }                                                                      \
        __mmask16 m1 = (__mmask16)((1u << (cols - 16)) - 1);                   \
        tile_avx512_body(a, a_rs, a_ps, k, b, ldb, at, b_rows, mr, rows, 2,    \
                         m0, m1, false, c, ldc, bias, bias_per_col, residual,  \
                         ldr, e);                                              \
    }

TILE_AVX512(tile_avx512_panel, CPU_PACK_MR, false, CPU_PACK_MR)
TILE_AVX512(tile_avx512_rows, 1, false, CPU_PACK_MR)
TILE_AVX512(tile_avx512_panel_at, CPU_PACK_MR, true, CPU_PACK_MR)
TILE_AVX512(tile_avx512_rows_at, 1, true, CPU_PACK_MR)
TILE_AVX512(tile_avx512_rows_at12, 1, true, AVX512_MR_MAX)

#endif

static _Atomic int selected_kernel = CPU_PACKED_KERNEL_BEST;

void cpu_packed_gemm_select(cpu_packed_kernel kernel) {
    atomic_store(&selected_kernel, (int)kernel);
}

bool cpu_packed_gemm_has_avx512(void) {
#ifdef PACKED_HAVE_AVX512
    static _Atomic int cached = -1; /* every thread computes the same */
    int have = atomic_load(&cached);
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f") ? 1 : 0;
        atomic_store(&cached, have);
    }
    return have == 1;
#else
    return false;
#endif
}

bool cpu_packed_gemm_avx512_selected(void) {
    return atomic_load(&selected_kernel) == CPU_PACKED_KERNEL_BEST &&
           cpu_packed_gemm_has_avx512();
}

void cpu_packed_gemm(const float *packed, int64_t k, int64_t r0, int64_t r1,
                     const float *b, int64_t ldb, int64_t n, float *c,
                     int64_t ldc, const cpu_packed_epilogue *e) {
#ifdef PACKED_HAVE_AVX512
    bool avx512 = cpu_packed_gemm_avx512_selected();
#endif
    /* blocks of B's columns of about B_BLOCK_FLOATS, whole strips */
    int64_t block = B_BLOCK_FLOATS / (k > 0 ? k : 1) / TILE_N * TILE_N;
    if (block < TILE_N)
        block = TILE_N;
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        int64_t b1 = n - b0 < block ? n : b0 + block;
        for (int64_t i0 = r0; i0 < r1; i0 += CPU_PACK_MR) {
            int64_t rows = r1 - i0 < CPU_PACK_MR ? r1 - i0 : CPU_PACK_MR;
            const float *panel = packed + i0 * k;
            const float *bias = e->bias != NULL ? e->bias + i0 : NULL;
            for (int64_t j0 = b0; j0 < b1; j0 += TILE_N) {
                int64_t cols = b1 - j0 < TILE_N ? b1 - j0 : TILE_N;
                const float *res =
                    e->residual != NULL ? e->residual + i0 * e->ldr + j0 : NULL;
                float *tile = c + i0 * ldc + j0;
#ifdef PACKED_HAVE_AVX512
                if (avx512)
                    tile_avx512_panel(panel, 1, k, b + j0, ldb, NULL, rows,
                                      cols, tile, ldc, bias, false, res, e->ldr,
                                      e);
                else
#endif
                    tile_portable(panel, 1, CPU_PACK_MR, k, b + j0, ldb, NULL,
                                  rows, cols, tile, ldc, bias, false, res,
                                  e->ldr, e);
                finish_rows(tile, ldc, rows, cols, e);
            }
        }
    }
}

void cpu_packed_gemm_at(const float *a, bool a_packed, int64_t k, int64_t r0,
                        int64_t r1, const float *b, const int32_t *b_rows,
                        int64_t n, float *c, int64_t ldc,
                        const cpu_packed_epilogue *e) {
#ifdef PACKED_HAVE_AVX512
    bool avx512 = cpu_packed_gemm_avx512_selected();
#endif
    /* a packed panel reads its 8 values of column p side by side; rows of
     * A as they lie, one from each row */
    int64_t a_rs = a_packed ? 1 : k, a_ps = a_packed ? CPU_PACK_MR : 1;
    for (int64_t i0 = r0, step; i0 < r1; i0 += step) {
        int64_t left = r1 - i0;
        step = CPU_PACK_MR;
#ifdef PACKED_HAVE_AVX512
        /* rows as they lie: 12 at a time, but 8 where 12 would leave a
         * part-empty tile that 8s fill (64 = 4 x 12 + 2 x 8) */
        bool tall = avx512 && !a_packed &&
                    (left == AVX512_MR_MAX || left >= AVX512_MR_MAX + 8);
        if (tall)
            step = AVX512_MR_MAX;
#endif
        int64_t rows = left < step ? left : step;
        const float *panel = a + i0 * k; /* both layouts */
        const float *bias = e->bias != NULL ? e->bias + i0 : NULL;
        for (int64_t j0 = 0; j0 < n; j0 += TILE_N) {
            int64_t cols = n - j0 < TILE_N ? n - j0 : TILE_N;
            const float *res =
                e->residual != NULL ? e->residual + i0 * e->ldr + j0 : NULL;
            float *tile = c + i0 * ldc + j0;
#ifdef PACKED_HAVE_AVX512
            if (tall)
                tile_avx512_rows_at12(panel, a_rs, k, b + j0, 0, b_rows, rows,
                                      cols, tile, ldc, bias, false, res, e->ldr,
                                      e);
            else if (avx512 && a_packed)
                tile_avx512_panel_at(panel, a_rs, k, b + j0, 0, b_rows, rows,
                                     cols, tile, ldc, bias, false, res, e->ldr,
                                     e);
            else if (avx512)
                tile_avx512_rows_at(panel, a_rs, k, b + j0, 0, b_rows, rows,
                                    cols, tile, ldc, bias, false, res, e->ldr,
                                    e);
            else
#endif
                tile_portable(panel, a_rs, a_ps, k, b + j0, 0, b_rows, rows,
                              cols, tile, ldc, bias, false, res, e->ldr, e);
            finish_rows(tile, ldc, rows, cols, e);
        }
    }
}

void cpu_pack_b(const float *b, int64_t ldb, bool trans_b, int64_t k, int64_t n,
                float *packed) {
    for (int64_t j0 = 0; j0 < n; j0 += TILE_N) {
        float *strip = packed + j0 * k;
        int64_t cols = n - j0 < TILE_N ? n - j0 : TILE_N;
        for (int64_t p = 0; p < k; p++) {
            float *row = strip + p * TILE_N;
            for (int64_t j = 0; j < cols; j++)
                row[j] = trans_b ? b[(j0 + j) * ldb + p] : b[p * ldb + j0 + j];
            for (int64_t j = cols; j < TILE_N; j++)
                row[j] = 0.0f;
        }
    }
}

void cpu_packed_gemm_b(const float *a, int64_t lda, int64_t m, int64_t k,
                       const float *packed_b, int64_t s0, int64_t s1, int64_t n,
                       float *c, int64_t ldc, const cpu_packed_epilogue *e) {
#ifdef PACKED_HAVE_AVX512
    bool avx512 = cpu_packed_gemm_avx512_selected();
#endif
    /* blocks of ROWS_BLOCK rows outside, so that a block of A stays in
     * cache while the strips of B pass it */
    for (int64_t b0 = 0; b0 < m; b0 += ROWS_BLOCK)
        for (int64_t s = s0; s < s1; s++) {
            int64_t j0 = s * TILE_N;
            int64_t cols = n - j0 < TILE_N ? n - j0 : TILE_N;
            const float *strip = packed_b + j0 * k;
            const float *bias = e->bias != NULL ? e->bias + j0 : NULL;
            int64_t b1 = m - b0 < ROWS_BLOCK ? m : b0 + ROWS_BLOCK;
            for (int64_t i0 = b0; i0 < b1; i0 += CPU_PACK_MR) {
                int64_t rows = b1 - i0 < CPU_PACK_MR ? b1 - i0 : CPU_PACK_MR;
                const float *res =
                    e->residual != NULL ? e->residual + i0 * e->ldr + j0 : NULL;
                float *tile = c + i0 * ldc + j0;
#ifdef PACKED_HAVE_AVX512
                if (avx512)
                    tile_avx512_rows(a + i0 * lda, lda, k, strip, TILE_N, NULL,
                                     rows, cols, tile, ldc, bias, true, res,
                                     e->ldr, e);
                else
#endif
                    tile_portable(a + i0 * lda, lda, 1, k, strip, TILE_N, NULL,
                                  rows, cols, tile, ldc, bias, true, res,
                                  e->ldr, e);
                finish_rows(tile, ldc, rows, cols, e);
            }
        }
}

osp_packed_weights *cpu_packed_weights_new(cpu_packed_layout layout,
                                           int64_t groups, int64_t rows,
                                           int64_t k, size_t group_floats) {
    size_t head = (sizeof(osp_packed_weights) + 63) / 64 * 64;
    if (groups < 1 ||
        group_floats > (SIZE_MAX - head - 64) / sizeof(float) / (size_t)groups)
        return NULL;
    size_t bytes = head + group_floats * (size_t)groups * sizeof(float);
    osp_packed_weights *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == NULL)
        return NULL;
    p->layout = layout;
    p->groups = groups;
    p->rows = rows;
    p->k = k;
    p->group_floats = group_floats;
    return p;
}
