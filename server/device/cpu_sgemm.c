/*
 * FP32 GEMM split across the worker pool (cpu_sgemm.h).
 *
 * The split is along the longer side of C that gives each thread at
 * least CPU_SGEMM_GRAIN multiply-adds: columns in multiples of 16 (the
 * width of OpenBLAS's micro-kernels, which see the row-major C as its
 * column-major transpose), else rows in multiples of 4. A block of C
 * needs all of k and its own rows of op(A) and columns of op(B), so
 * blocks are independent sgemm calls.
 */
#include "cpu_sgemm.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops_nn.h"
#include "cpu_threads.h"

#define COL_ALIGN 16
#define ROW_ALIGN 4

/* ---- a few rows of A against B^T ----------------------------------------- */

/* The kernels work on 8 floats at a time (GCC's generic vectors: AVX2 in
 * the x86-64-v3 clone, two SSE registers in the baseline). */
typedef float sgemm_v8 __attribute__((vector_size(32)));

/* Rows of A up to which the small kernels beat OpenBLAS: OpenBLAS packs
 * all of B for every call, which for a few rows of A costs about what
 * the multiply-adds do, while these read B once, where it lies. */
#define SMALL_M_MAX 16
/* Lanes of the packed A^T: 8 for m <= 8, else 16. */
#define SMALL_M_LANES(m) ((m) <= 8 ? 8 : 16)

/* C[0, j] = alpha dot(a, B[j, :]) + beta C[0, j] for j < n, a of k
 * floats, B's rows ldb apart: four rows of B at a time, two
 * accumulators each (a 16-float step), then the odd columns of k one by
 * one. */
CPU_NN_HOT static void sgemm_1xn_tn(int64_t n, int64_t k, float alpha,
                                    const float *restrict a,
                                    const float *restrict b, int64_t ldb,
                                    float beta, float *restrict c) {
    int64_t k16 = k / 16 * 16;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        sgemm_v8 acc[4][2] = {{{0}}};
        const float *rows[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            rows[r] = b + (j + r) * ldb;
        for (int64_t p = 0; p < k16; p += 16) {
            sgemm_v8 a0, a1;
            memcpy(&a0, a + p, sizeof a0);
            memcpy(&a1, a + p + 8, sizeof a1);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                sgemm_v8 b0, b1;
                memcpy(&b0, rows[r] + p, sizeof b0);
                memcpy(&b1, rows[r] + p + 8, sizeof b1);
                acc[r][0] += a0 * b0;
                acc[r][1] += a1 * b1;
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            float t[8];
            sgemm_v8 s = acc[r][0] + acc[r][1];
            memcpy(t, &s, sizeof t);
            float sum = ((t[0] + t[4]) + (t[1] + t[5])) +
                        ((t[2] + t[6]) + (t[3] + t[7]));
            for (int64_t p = k16; p < k; p++)
                sum += a[p] * rows[r][p];
            c[j + r] = alpha * sum + (beta != 0.0f ? beta * c[j + r] : 0.0f);
        }
    }
    for (; j < n; j++) {
        const float *row = b + j * ldb;
        float sum = 0.0f;
        for (int64_t p = 0; p < k; p++)
            sum += a[p] * row[p];
        c[j] = alpha * sum + (beta != 0.0f ? beta * c[j] : 0.0f);
    }
}

/* One block of RB rows of B (j0 .. j0 + RB) against the packed A^T (NV
 * vectors of 8 lanes per column of k), stored into C's columns j0 ..:
 * acc[r] holds C[0 .. 8 NV, j0 + r]. */
#define SMALL_TN_BLOCK(RB, NV)                                                 \
    do {                                                                       \
        sgemm_v8 acc[RB][NV] = {{{0}}};                                        \
        const float *rows[RB];                                                 \
        _Pragma("GCC unroll 8") for (int r = 0; r < (RB); r++) rows[r] =       \
            b + (j0 + r) * ldb;                                                \
        for (int64_t p = 0; p < k; p++) {                                      \
            sgemm_v8 av[NV];                                                   \
            _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++)             \
                memcpy(&av[v], at + p * 8 * (NV) + 8 * v, sizeof av[v]);       \
            _Pragma("GCC unroll 8") for (int r = 0; r < (RB); r++) {           \
                float s = rows[r][p];                                          \
                _Pragma("GCC unroll 2") for (int v = 0; v < (NV); v++)         \
                    acc[r][v] += s * av[v];                                    \
            }                                                                  \
        }                                                                      \
        _Pragma("GCC unroll 8") for (int r = 0; r < (RB); r++)                 \
            small_tn_store(acc[r], NV, m, alpha, beta, c + j0 + r, ldc);       \
    } while (0)

/* C[i, 0] = alpha acc[i] + beta C[i, 0] for i < m (C's rows ldc apart). */
CPU_NN_INLINE void small_tn_store(const sgemm_v8 *acc, int nv, int64_t m,
                                  float alpha, float beta, float *c,
                                  int64_t ldc) {
    float t[16];
    memcpy(t, acc, (size_t)nv * sizeof(sgemm_v8));
    for (int64_t i = 0; i < m; i++)
        c[i * ldc] = alpha * t[i] + (beta != 0.0f ? beta * c[i * ldc] : 0.0f);
}

/* C = alpha A B^T + beta C for 2 <= m <= 16 rows of A, given A^T packed
 * as at[p * lanes + i] (lanes = SMALL_M_LANES(m), zeros past m): each
 * row of B is read once, against all of A^T, which stays in L1 for
 * moderate k. A block of B's rows keeps its accumulators in registers:
 * 8 rows of one vector (m <= 8) or 6 rows of two. */
CPU_NN_HOT static void sgemm_small_tn(int64_t m, int64_t n, int64_t k,
                                      float alpha, const float *restrict at,
                                      const float *restrict b, int64_t ldb,
                                      float beta, float *restrict c,
                                      int64_t ldc) {
    int64_t j0 = 0;
    if (SMALL_M_LANES(m) == 8) {
        for (; j0 + 8 <= n; j0 += 8)
            SMALL_TN_BLOCK(8, 1);
        for (; j0 < n; j0++)
            SMALL_TN_BLOCK(1, 1);
    } else {
        for (; j0 + 6 <= n; j0 += 6)
            SMALL_TN_BLOCK(6, 2);
        for (; j0 < n; j0++)
            SMALL_TN_BLOCK(1, 2);
    }
}

/* ---- a few rows of A: the dot-product kernel (AVX-512 machines) --------- */

#if defined(CPU_NN_SHUFFLE) && defined(__x86_64__) && defined(__GNUC__) &&     \
    !defined(__clang__) && __GNUC__ >= 11
#define SGEMM_DOT 1
#define SGEMM_V4 __attribute__((target("arch=x86-64-v4")))

/* out = the lane sums of v[0 .. 8): out[i] = v[i][0] + ... + v[i][7], by a
 * tree of shuffles (three levels, seven additions of whole vectors). */
#define SGEMM_SUM8(out, v)                                                     \
    do {                                                                       \
        sgemm_v8 l1_[4], l2_[2];                                               \
        for (int q_ = 0; q_ < 4; q_++)                                         \
            l1_[q_] = __builtin_shufflevector((v)[2 * q_], (v)[2 * q_ + 1], 0, \
                                              1, 2, 3, 8, 9, 10, 11) +         \
                      __builtin_shufflevector((v)[2 * q_], (v)[2 * q_ + 1], 4, \
                                              5, 6, 7, 12, 13, 14, 15);        \
        for (int q_ = 0; q_ < 2; q_++)                                         \
            l2_[q_] = __builtin_shufflevector(l1_[2 * q_], l1_[2 * q_ + 1], 0, \
                                              1, 4, 5, 8, 9, 12, 13) +         \
                      __builtin_shufflevector(l1_[2 * q_], l1_[2 * q_ + 1], 2, \
                                              3, 6, 7, 10, 11, 14, 15);        \
        (out) = __builtin_shufflevector(l2_[0], l2_[1], 0, 2, 4, 6, 8, 10, 12, \
                                        14) +                                  \
                __builtin_shufflevector(l2_[0], l2_[1], 1, 3, 5, 7, 9, 11, 13, \
                                        15);                                   \
    } while (0)

/* Columns j0 .. j0 + RB of C for RA rows of A (rows past m repeat the last
 * one; their results are dropped): RA x RB accumulators of dot products
 * over k, 8 floats a step, summed across lanes by SGEMM_SUM8, then the
 * last k % 8 terms one by one. */
#define SGEMM_DOT_BLOCK(RA, RB)                                                \
    do {                                                                       \
        sgemm_v8 acc[(RA) * (RB)] = {{0}};                                     \
        const float *ar[RA], *br[RB];                                          \
        for (int r = 0; r < (RA); r++)                                         \
            ar[r] = a + (r < m ? r : m - 1) * lda;                             \
        for (int q = 0; q < (RB); q++)                                         \
            br[q] = b + (j0 + q) * ldb;                                        \
        for (int64_t p = 0; p < k8; p += 8) {                                  \
            sgemm_v8 bv[RB];                                                   \
            _Pragma("GCC unroll 8") for (int q = 0; q < (RB); q++)             \
                memcpy(&bv[q], br[q] + p, sizeof bv[q]);                       \
            _Pragma("GCC unroll 8") for (int r = 0; r < (RA); r++) {           \
                sgemm_v8 av;                                                   \
                memcpy(&av, ar[r] + p, sizeof av);                             \
                _Pragma("GCC unroll 8") for (int q = 0; q < (RB); q++)         \
                    acc[q * (RA) + r] += av * bv[q];                           \
            }                                                                  \
        }                                                                      \
        float out[(RA) * (RB)];                                                \
        _Pragma("GCC unroll 4") for (int s = 0; s < (RA) * (RB) / 8; s++) {    \
            sgemm_v8 sum;                                                      \
            SGEMM_SUM8(sum, acc + 8 * s);                                      \
            memcpy(out + 8 * s, &sum, sizeof sum);                             \
        }                                                                      \
        for (int q = 0; q < (RB); q++)                                         \
            for (int r = 0; r < (RA) && r < m; r++) {                          \
                float v = out[q * (RA) + r];                                   \
                for (int64_t p = k8; p < k; p++)                               \
                    v += ar[r][p] * br[q][p];                                  \
                float *cp = c + r * ldc + j0 + q;                              \
                *cp = alpha * v + (beta != 0.0f ? beta * *cp : 0.0f);          \
            }                                                                  \
    } while (0)

/* C = alpha A B^T + beta C for 2 <= m <= 8 rows of A, reading A's rows
 * and B's rows in place (A stays in L1, B streams once): 16 accumulators
 * of 8 lanes, which want AVX-512's 32 registers. The columns past the
 * last whole block take one column at a time. */
SGEMM_V4 static void sgemm_dot_tn(int64_t m, int64_t n, int64_t k, float alpha,
                                  const float *restrict a, int64_t lda,
                                  const float *restrict b, int64_t ldb,
                                  float beta, float *restrict c, int64_t ldc) {
    int64_t k8 = k / 8 * 8, j0 = 0;
    if (m <= 2) {
        for (; j0 + 8 <= n; j0 += 8)
            SGEMM_DOT_BLOCK(2, 8);
        for (; j0 < n; j0++)
            SGEMM_DOT_BLOCK(8, 1);
    } else if (m <= 4) {
        for (; j0 + 6 <= n; j0 += 6)
            SGEMM_DOT_BLOCK(4, 6);
        for (; j0 < n; j0++)
            SGEMM_DOT_BLOCK(8, 1);
    } else {
        for (; j0 + 3 <= n; j0 += 3)
            SGEMM_DOT_BLOCK(8, 3);
        for (; j0 < n; j0++)
            SGEMM_DOT_BLOCK(8, 1);
    }
}

static bool sgemm_have_v4(void) {
    static int have = -1; /* a benign race: every thread finds the same */
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq");
    return have != 0;
}
#endif

/* Whether g suits the small kernels: A not transposed, B transposed, m
 * <= SMALL_M_MAX. */
static bool sgemm_is_small(const cpu_sgemm_args *g) {
    return !g->trans_a && g->trans_b && g->m <= SMALL_M_MAX && g->k >= 16;
}

/* g by the small kernels when it suits them; false to leave it to
 * OpenBLAS. */
static bool sgemm_small(const cpu_sgemm_args *g) {
    if (!sgemm_is_small(g))
        return false;
    if (g->m == 1) {
        sgemm_1xn_tn(g->n, g->k, g->alpha, g->a, g->b, g->ldb, g->beta, g->c);
        return true;
    }
#ifdef SGEMM_DOT
    if (g->m <= 8 && sgemm_have_v4()) {
        sgemm_dot_tn(g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b, g->ldb,
                     g->beta, g->c, g->ldc);
        return true;
    }
#endif
    int lanes = SMALL_M_LANES(g->m);
    size_t bytes;
    if (__builtin_mul_overflow((size_t)g->k, (size_t)lanes * sizeof(float),
                               &bytes))
        return false;
    float *at = malloc(bytes);
    if (at == NULL)
        return false;
    for (int64_t p = 0; p < g->k; p++) {
        float *col = at + p * lanes;
        for (int64_t i = 0; i < lanes; i++)
            col[i] = i < g->m ? g->a[i * g->lda + p] : 0.0f;
    }
    sgemm_small_tn(g->m, g->n, g->k, g->alpha, at, g->b, g->ldb, g->beta, g->c,
                   g->ldc);
    free(at);
    return true;
}

/* ---- one block, and the split ------------------------------------------- */

void cpu_sgemm_serial(const cpu_sgemm_args *g) {
    if (sgemm_small(g))
        return;
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, (blasint)g->m,
                (blasint)g->n, (blasint)g->k, g->alpha, g->a, (blasint)g->lda,
                g->b, (blasint)g->ldb, g->beta, g->c, (blasint)g->ldc);
}

/* The block of g made of rows [r0, r1) and columns [c0, c1) of C. */
static cpu_sgemm_args sgemm_block(const cpu_sgemm_args *g, int64_t r0,
                                  int64_t r1, int64_t c0, int64_t c1) {
    cpu_sgemm_args b = *g;
    b.m = r1 - r0;
    b.n = c1 - c0;
    b.a = g->trans_a ? g->a + r0 : g->a + r0 * g->lda;
    b.b = g->trans_b ? g->b + c0 * g->ldb : g->b + c0;
    b.c = g->c + r0 * g->ldc + c0;
    return b;
}

typedef struct sgemm_job {
    const cpu_sgemm_args *g;
    bool split_cols;
    int parts;
    cpu_sgemm_epilogue epilogue;
    void *ctx;
} sgemm_job;

static void sgemm_part(void *arg, int64_t part) {
    const sgemm_job *job = arg;
    const cpu_sgemm_args *g = job->g;
    int64_t r0 = 0, r1 = g->m, c0 = 0, c1 = g->n;
    if (job->split_cols)
        cpu_split_range(g->n, job->parts, part, COL_ALIGN, &c0, &c1);
    else
        cpu_split_range(g->m, job->parts, part, ROW_ALIGN, &r0, &r1);
    if (r1 <= r0 || c1 <= c0)
        return;
    cpu_sgemm_args block = sgemm_block(g, r0, r1, c0, c1);
    cpu_sgemm_serial(&block);
    if (job->epilogue != NULL)
        job->epilogue(job->ctx, r0, r1, c0, c1);
}

void cpu_sgemm(const cpu_sgemm_args *g, int threads,
               cpu_sgemm_epilogue epilogue, void *ctx) {
    int64_t macs;
    if (__builtin_mul_overflow(g->m, g->n, &macs) ||
        __builtin_mul_overflow(macs, g->k > 0 ? g->k : 1, &macs))
        macs = INT64_MAX;
    /* The small kernels stream B from memory and pack nothing: splitting
     * them pays off sooner. */
    int parts = cpu_split_parts(
        macs, sgemm_is_small(g) ? CPU_SGEMM_GRAIN / 8 : CPU_SGEMM_GRAIN,
        threads);
    int64_t col_units = (g->n + COL_ALIGN - 1) / COL_ALIGN;
    int64_t row_units = (g->m + ROW_ALIGN - 1) / ROW_ALIGN;
    bool split_cols = col_units * COL_ALIGN >= row_units * ROW_ALIGN;
    int64_t units = split_cols ? col_units : row_units;
    if (parts > units)
        parts = (int)units;
    if (parts <= 1) {
        cpu_sgemm_serial(g);
        if (epilogue != NULL)
            epilogue(ctx, 0, g->m, 0, g->n);
        return;
    }
    sgemm_job job = {g, split_cols, parts, epilogue, ctx};
    cpu_parallel_for(parts, sgemm_part, &job, parts);
}
