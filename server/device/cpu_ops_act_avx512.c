/*
 * AVX-512 GELU and Erf (cpu_act_avx512.h): unary_rules.h's formulas,
 * 16 lanes at a time, the tail by masked loads and stores.
 *
 * Where the scalar rules work on the bits so that GCC vectorises them
 * (the clamps, the selects), these use the instructions that do the
 * same directly: min/max with the operand order that lets NaN through,
 * and mask blends; e^x is cpu_avx512_math.h's.
 */
#include "cpu_act_avx512.h"

#include "cpu_avx512_math.h"
#include "cpu_packed_gemm.h"

bool cpu_act_avx512_serves(osp_unary_op act) {
#ifdef CPU_HAVE_AVX512_MATH
    return (act == OSP_UNARY_GELU || act == OSP_UNARY_ERF) &&
           cpu_packed_gemm_avx512_selected();
#else
    (void)act;
    return false;
#endif
}

#ifdef CPU_HAVE_AVX512_MATH

/* unary_erfcf on 16 lanes: t exp(-x^2 + P(t)), t = 1 / (1 + |x| / 2),
 * and 2 - that for negative x. */
CPU_AVX512_INLINE __m512 erfc_avx512(__m512 x) {
    __m512 ax = _mm512_abs_ps(x);
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 t =
        _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.5f), ax, one));
    __m512 p = _mm512_set1_ps(0.17087277f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.82215223f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
    __m512 r = _mm512_mul_ps(t, cpu_exp_avx512(_mm512_fnmadd_ps(ax, ax, p)));
    __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_sub_ps(r, negative, _mm512_set1_ps(2.0f), r);
}

/* unary_gelu_f32: 0.5 x erfc(-x / sqrt 2). */
CPU_AVX512_INLINE __m512 gelu_avx512(__m512 x) {
    __m512 e =
        erfc_avx512(_mm512_mul_ps(x, _mm512_set1_ps(-0.70710678118654752f)));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), e);
}

/* unary_erff: x P(x^2) / Q(x^2) on x clamped to [-4, 4]; min and max
 * return their second operand for NaN, so NaN passes the clamp. */
CPU_AVX512_INLINE __m512 erf_avx512(__m512 x) {
    __m512 c = _mm512_max_ps(_mm512_set1_ps(-4.0f),
                             _mm512_min_ps(_mm512_set1_ps(4.0f), x));
    __m512 x2 = _mm512_mul_ps(c, c);
    __m512 p = _mm512_set1_ps(-2.72614225801306e-10f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.77068142495902e-08f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.10102402082508e-06f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-5.69250639462346e-05f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-7.34990630326855e-04f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.95459980854025e-03f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.60960333262415e-02f));
    __m512 q = _mm512_set1_ps(-1.45660718464996e-05f);
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-2.13374055278905e-04f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.68282697438203e-03f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-7.37332916720468e-03f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.42647390514189e-02f));
    return _mm512_div_ps(_mm512_mul_ps(c, p), q);
}

/* The loop of one activation f: whole vectors, then the tail masked
 * (lanes past n load 0 and are not stored). Inlined into
 * cpu_act_avx512: the GEMM epilogue calls it for every row of a 32-column
 * tile, where each call layer costs a tenth of the row's work. */
#define ACT_LOOP(name, f)                                                      \
    CPU_AVX512_INLINE void name(const float *x, float *y, int64_t n) {         \
        int64_t i = 0;                                                         \
        for (; i + 16 <= n; i += 16)                                           \
            _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));                \
        if (i < n) {                                                           \
            __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                   \
            _mm512_mask_storeu_ps(y + i, m,                                    \
                                  f(_mm512_maskz_loadu_ps(m, x + i)));         \
        }                                                                      \
    }
ACT_LOOP(gelu_loop, gelu_avx512)
ACT_LOOP(erf_loop, erf_avx512)
#undef ACT_LOOP

__attribute__((target("avx512f,fma"))) void
cpu_act_avx512(const float *x, float *y, int64_t n, osp_unary_op act) {
    if (act == OSP_UNARY_GELU)
        gelu_loop(x, y, n);
    else if (act == OSP_UNARY_ERF)
        erf_loop(x, y, n);
}

#else

void cpu_act_avx512(const float *x, float *y, int64_t n, osp_unary_op act) {
    (void)x;
    (void)y;
    (void)n;
    (void)act;
}

#endif
