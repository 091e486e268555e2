/*
 * The AVX-512 softmax line and LayerNormalization row
 * (cpu_reduce_avx512.h): passes over the line, 16 lanes at a time with
 * the tail masked, as the reference's loops.
 */
#include "cpu_reduce_avx512.h"

#include <math.h>

#include "cpu_avx512_math.h"
#include "cpu_packed_gemm.h"

bool cpu_reduce_avx512_serves(void) {
#ifdef CPU_HAVE_AVX512_MATH
    return cpu_packed_gemm_avx512_selected();
#else
    return false;
#endif
}

#ifdef CPU_HAVE_AVX512_MATH

/* Lanes [0, left) of a vector, left < 16 or more. */
CPU_AVX512_INLINE __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* softmax_line's exp_shifted: e^d, 0 where d < -87 (NaN stays NaN:
 * max returns its second operand for NaN). */
CPU_AVX512_INLINE __m512 exp_shifted_avx512(__m512 d) {
    __m512 floor = _mm512_set1_ps(-87.0f);
    __m512 e = cpu_exp_avx512(_mm512_max_ps(floor, d));
    return _mm512_maskz_mov_ps(
        (__mmask16)~_mm512_cmp_ps_mask(d, floor, _CMP_LT_OQ), e);
}

/* The sum of the 16 lanes of v, widened to double, added to acc. */
CPU_AVX512_INLINE __m512d add_widened(__m512d acc, __m512 v) {
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    return _mm512_add_pd(acc,
                         _mm512_cvtps_pd(_mm256_castpd_ps(
                             _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

__attribute__((target("avx512f,fma"))) void
cpu_softmax_line_avx512(const float *x, float *out, int64_t n) {
    if (n <= 0)
        return;
    /* the maximum, and whether any element is NaN (then it is NaN) */
    __m512 mv = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mv = _mm512_max_ps(mv, v);
    }
    float m = nan ? NAN : _mm512_reduce_max_ps(mv);
    __m512 mb = _mm512_set1_ps(m);
    /* exp(x - m) stored, and summed in double */
    __m512d s = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512 e =
            _mm512_maskz_mov_ps(k, exp_shifted_avx512(_mm512_sub_ps(
                                       _mm512_maskz_loadu_ps(k, x + i), mb)));
        _mm512_mask_storeu_ps(out + i, k, e);
        s = add_widened(s, e);
    }
    __m512 inv = _mm512_set1_ps((float)(1.0 / _mm512_reduce_add_pd(s)));
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(
            out + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, out + i), inv));
    }
}

__attribute__((target("avx512f,fma"))) void
cpu_layer_norm_row_avx512(const float *x, const float *scale, const float *bias,
                          float *y, int64_t cols, float epsilon,
                          float *mean_out, float *inv_out) {
    __m512d s = _mm512_setzero_pd();
    for (int64_t i = 0; i < cols; i += 16)
        s = add_widened(s, _mm512_maskz_loadu_ps(tail_mask(cols - i), x + i));
    double mean = _mm512_reduce_add_pd(s) / (double)cols;
    /* the variance from the differences in double, as the reference */
    __m512d md = _mm512_set1_pd(mean), v0 = _mm512_setzero_pd(),
            v1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < cols; i += 16) {
        __mmask16 k = tail_mask(cols - i);
        __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        __m512d d0 = _mm512_maskz_sub_pd(
            (__mmask8)k, _mm512_cvtps_pd(_mm512_castps512_ps256(v)), md);
        __m512d d1 = _mm512_maskz_sub_pd(
            (__mmask8)(k >> 8),
            _mm512_cvtps_pd(_mm256_castpd_ps(
                _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))),
            md);
        v0 = _mm512_fmadd_pd(d0, d0, v0);
        v1 = _mm512_fmadd_pd(d1, d1, v1);
    }
    double var = _mm512_reduce_add_pd(_mm512_add_pd(v0, v1)) / (double)cols;
    float m = (float)mean;
    float inv = (float)(1.0 / sqrt(var + (double)epsilon));
    if (mean_out != NULL)
        *mean_out = m;
    if (inv_out != NULL)
        *inv_out = inv;
    __m512 mv = _mm512_set1_ps(m), iv = _mm512_set1_ps(inv);
    for (int64_t i = 0; i < cols; i += 16) {
        __mmask16 k = tail_mask(cols - i);
        __m512 v = _mm512_mul_ps(
            _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv), iv);
        _mm512_mask_storeu_ps(
            y + i, k,
            _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(k, scale + i),
                            _mm512_maskz_loadu_ps(k, bias + i)));
    }
}

#else

void cpu_softmax_line_avx512(const float *x, float *out, int64_t n) {
    (void)x;
    (void)out;
    (void)n;
}

void cpu_layer_norm_row_avx512(const float *x, const float *scale,
                               const float *bias, float *y, int64_t cols,
                               float epsilon, float *mean, float *inv_std) {
    (void)x;
    (void)scale;
    (void)bias;
    (void)y;
    (void)cols;
    (void)epsilon;
    (void)mean;
    (void)inv_std;
}

#endif
