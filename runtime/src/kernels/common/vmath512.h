/* vmath512.h — exp on 16 float lanes with AVX-512F and FMA, for the kernels
 * built for those instruction sets with target attributes and chosen at run
 * time (attention's rows, softmax's rows).
 *
 * x = n ln2 + r (ln2 in two parts), exp(r) by the degree-6 polynomial of
 * vmath.h, and p * 2^n by vscalefps: one rounding, into the subnormals too
 * (p is in [0.70, 1.42]). Lanes below `lo` give 0 and NaN stays NaN;
 * attention passes VM_EXP_LO (its rows are shifted by their running max and
 * sum in float), softmax -150 (exp keeps its subnormal results, as
 * PyTorch CPU's does). */
#ifndef TPU_KERNELS_VMATH512_H_
#define TPU_KERNELS_VMATH512_H_

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx512f,fma"), always_inline)) static inline __m512 vm_exp512(__m512 x,
                                                                              float lo) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  const __m512 z = _mm512_mul_ps(r, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, z, r), _mm512_set1_ps(1.0f));
  __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(lo), _CMP_NLT_UQ);
  return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n));
}

#endif
#endif /* TPU_KERNELS_VMATH512_H_ */
