/*
 * Depthwise convolution under AVX-512 (cpu_depthwise.h).
 *
 * Outputs are vectorised across the output row, 16 at a time, and four
 * output rows are computed together, so that each input row vector is
 * loaded once and feeds every output row whose window covers it (with 3x3
 * taps at stride 1, 18 loads for 36 multiply-adds). Padding costs no copy:
 * the loads are masked to the lanes whose input column lies inside the
 * row (a table of masks per vector and tap column, the same for every
 * row), and a row of zeros stands in for padding rows. Stride 2 loads 32
 * input columns and keeps the even ones (one permute). The accumulators
 * start as the bias; the residual, ReLU and Clip are applied before the
 * one store.
 */
#include "cpu_depthwise.h"

#include <stddef.h>
#include <stdint.h>

#include "cpu_packed_gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DEPTHWISE_HAVE_AVX512 1
#endif

#define DW_LANES 16
#define DW_ROWS 4 /* output rows per step */
#define DW_MAX_K 5
#define DW_MAX_VECS (CPU_DEPTHWISE_MAX_OUT_W / DW_LANES)

bool cpu_depthwise_avx512_serves(const cpu_nn_geom *g) {
#ifdef DEPTHWISE_HAVE_AVX512
    if (!cpu_packed_gemm_avx512_selected())
        return false;
    int64_t k = g->kernel[2];
    return g->in[0] == 1 && g->out[0] == 1 && g->kernel[0] == 1 &&
           (k == 3 || k == 5) && g->kernel[1] == k &&
           g->stride[1] == g->stride[2] &&
           (g->stride[2] == 1 || g->stride[2] == 2) && g->dilation[1] == 1 &&
           g->dilation[2] == 1 && g->out[2] <= CPU_DEPTHWISE_MAX_OUT_W;
#else
    (void)g;
    return false;
#endif
}

#ifdef DEPTHWISE_HAVE_AVX512

#define AVX512_TARGET __attribute__((target("avx512f,fma")))

/* One plane's call: geometry, operands and the load masks. */
typedef struct dw_plane {
    const float *x, *residual, *zeros;
    float *y;
    float w[DW_MAX_K * DW_MAX_K]; /* the taps, row-major */
    float bias;
    int64_t in_h, in_w, out_h, out_w, pad_h, pad_w, vecs;
    osp_unary_op act;
    float act_alpha, act_beta;
    /* [vecs][K]: the lanes of the input vector(s) of output vector j and
     * tap column kw that lie inside the row (bits 16-31: stride 2's
     * second vector) */
    const uint32_t *load_mask;
} dw_plane;

/* row + offset floats, where offset may point before the row: only
 * masked loads that leave such lanes out read through it. */
static inline const float *shifted(const float *row, int64_t offset) {
    return (const float *)((uintptr_t)row +
                           (uintptr_t)(offset * (int64_t)sizeof(float)));
}

/* The bits [lo, hi) of a 32-bit mask (0 <= lo, hi <= 32). */
static uint32_t mask_range(int64_t lo, int64_t hi) {
    if (hi <= lo)
        return 0;
    uint64_t below_hi = ((uint64_t)1 << hi) - 1,
             below_lo = ((uint64_t)1 << lo) - 1;
    return (uint32_t)(below_hi & ~below_lo);
}

/* Output rows [oh0, oh0 + R), all vectors; K, S and R are constants
 * after inlining, so the tap loops unroll and the test of which output
 * row a tap row feeds disappears. */
AVX512_TARGET static inline __attribute__((always_inline)) void
dw_rows(const dw_plane *p, int64_t oh0, const int K, const int S, const int R) {
    enum { MAX_T = (DW_ROWS - 1) * 2 + DW_MAX_K };
    const float *rows[MAX_T];
    const int T = (R - 1) * S + K;
    for (int t = 0; t < T; t++) {
        int64_t ih = oh0 * S - p->pad_h + t;
        rows[t] = ih >= 0 && ih < p->in_h ? p->x + ih * p->in_w : p->zeros;
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
                                           20, 22, 24, 26, 28, 30);
    const __m512 lo =
        _mm512_set1_ps(p->act == OSP_UNARY_CLIP ? p->act_alpha : 0.0f);
    const __m512 hi = _mm512_set1_ps(p->act_beta);
    for (int64_t j = 0; j < p->vecs; j++) {
        const uint32_t *m = p->load_mask + j * K;
        int64_t first = j * DW_LANES * S - p->pad_w; /* input column of tap 0 */
        __m512 acc[DW_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_set1_ps(p->bias);
#pragma GCC unroll 11
        for (int t = 0; t < T; t++) {
#pragma GCC unroll 5
            for (int kw = 0; kw < K; kw++) {
                const float *at = shifted(rows[t], first + kw);
                __m512 v;
                if (S == 1) {
                    v = _mm512_maskz_loadu_ps((__mmask16)m[kw], at);
                } else {
                    __m512 a = _mm512_maskz_loadu_ps((__mmask16)m[kw], at);
                    __m512 b = _mm512_maskz_loadu_ps((__mmask16)(m[kw] >> 16),
                                                     shifted(at, DW_LANES));
                    v = _mm512_permutex2var_ps(a, even, b);
                }
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    int kh = t - r * S;
                    if (kh >= 0 && kh < K)
                        acc[r] = _mm512_fmadd_ps(
                            _mm512_set1_ps(p->w[kh * K + kw]), v, acc[r]);
                }
            }
        }
        int64_t n = p->out_w - j * DW_LANES;
        __mmask16 store = n >= DW_LANES ? 0xFFFF : (__mmask16)((1u << n) - 1);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            int64_t at = (oh0 + r) * p->out_w + j * DW_LANES;
            __m512 x = acc[r];
            if (p->residual != NULL)
                x = _mm512_add_ps(
                    x, _mm512_maskz_loadu_ps(store, p->residual + at));
            if (p->act == OSP_UNARY_RELU || p->act == OSP_UNARY_CLIP)
                x = _mm512_max_ps(x, lo);
            if (p->act == OSP_UNARY_CLIP)
                x = _mm512_min_ps(x, hi);
            if (n >= DW_LANES)
                _mm512_storeu_ps(p->y + at, x);
            else
                _mm512_mask_storeu_ps(p->y + at, store, x);
        }
    }
}

/* A whole plane with K x K taps at stride S: DW_ROWS rows at a time,
 * then the rest one by one. */
#define DW_PLANE(name, K, S)                                                   \
    AVX512_TARGET static void name(const dw_plane *p) {                        \
        int64_t oh = 0;                                                        \
        for (; oh + DW_ROWS <= p->out_h; oh += DW_ROWS)                        \
            dw_rows(p, oh, K, S, DW_ROWS);                                     \
        for (; oh < p->out_h; oh++)                                            \
            dw_rows(p, oh, K, S, 1);                                           \
    }

DW_PLANE(dw_plane_k3_s1, 3, 1)
DW_PLANE(dw_plane_k3_s2, 3, 2)
DW_PLANE(dw_plane_k5_s1, 5, 1)
DW_PLANE(dw_plane_k5_s2, 5, 2)

#endif

void cpu_depthwise_avx512_plane(const cpu_nn_geom *g, const float *x,
                                const float *w, float bias,
                                const float *residual, float *y,
                                osp_unary_op act, float act_alpha,
                                float act_beta, const float *zeros) {
#ifdef DEPTHWISE_HAVE_AVX512
    int k = (int)g->kernel[2], s = (int)g->stride[2];
    uint32_t masks[DW_MAX_VECS * DW_MAX_K];
    dw_plane p = {.x = x,
                  .residual = residual,
                  .zeros = zeros,
                  .y = y,
                  .bias = bias,
                  .in_h = g->in[1],
                  .in_w = g->in[2],
                  .out_h = g->out[1],
                  .out_w = g->out[2],
                  .pad_h = g->pad[1],
                  .pad_w = g->pad[2],
                  .vecs = (g->out[2] + DW_LANES - 1) / DW_LANES,
                  .act = act,
                  .act_alpha = act_alpha,
                  .act_beta = act_beta,
                  .load_mask = masks};
    for (int t = 0; t < k * k; t++)
        p.w[t] = w[t];
    int64_t span = DW_LANES * s; /* input columns one vector's loads cover */
    for (int64_t j = 0; j < p.vecs; j++)
        for (int kw = 0; kw < k; kw++) {
            int64_t start = j * span - p.pad_w + kw;
            int64_t lo = start < 0 ? -start : 0;
            int64_t hi = p.in_w - start < span ? p.in_w - start : span;
            masks[j * k + kw] = mask_range(lo < span ? lo : span, hi);
        }
    if (k == 3)
        (s == 1 ? dw_plane_k3_s1 : dw_plane_k3_s2)(&p);
    else
        (s == 1 ? dw_plane_k5_s1 : dw_plane_k5_s2)(&p);
    if (act != OSP_UNARY_IDENTITY && act != OSP_UNARY_RELU &&
        act != OSP_UNARY_CLIP)
        cpu_nn__epilogue_row(y, p.out_h * p.out_w, 0.0f, NULL, NULL, act,
                             act_alpha, act_beta);
#else
    (void)g, (void)x, (void)w, (void)bias, (void)residual, (void)y;
    (void)act, (void)act_alpha, (void)act_beta, (void)zeros;
#endif
}
