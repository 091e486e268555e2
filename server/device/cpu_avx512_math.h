/*
 * e^x on 16 lanes for the CPU device's AVX-512 loops (cpu_ops_*_avx512.c):
 * unary_rules.h's unary_expf, the same clamps, reduction and polynomial.
 * Where the scalar rule builds 2^n from exponent bits in two halves (so
 * that GCC vectorises it), this uses vscalefps, exact for every n that
 * unary_expf produces, its overflow to inf and denormal results included.
 * Defines CPU_HAVE_AVX512_MATH where the compiler can target AVX-512 (GCC
 * or Clang on x86-64); callers still check the CPU at run time
 * (cpu_packed_gemm_avx512_selected) before calling.
 */
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_HAVE_AVX512_MATH 1

/* Compiled for AVX-512 whatever the file's flags, and inlined into the
 * caller (which must carry the same target). */
#define CPU_AVX512_INLINE                                                      \
    __attribute__((target("avx512f,fma"), always_inline)) static inline

/* unary_expf on 16 lanes: x clamped to [-104, 88.8] (NaN put back at the
 * end), x = n ln 2 + r, e^r by Cephes' polynomial, times 2^n. */
CPU_AVX512_INLINE __m512 cpu_exp_avx512(__m512 x) {
    __m512 c = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.8f)),
                             _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(
        _mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
                      _mm512_set1_ps(1.0f));
    __m512 y = _mm512_scalef_ps(p, n);
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

#endif
