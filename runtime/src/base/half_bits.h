/* half_bits.h — float16 / bfloat16 <-> float32 conversions of one value,
 * branch-free (internal).
 *
 * The scalar forms of convert.c's rules (see there): widening is exact
 * (`quiet` sets the quiet bit of a NaN), narrowing rounds to nearest even,
 * float16 overflows to inf, a NaN stays a quiet NaN of the same sign
 * (float16 drops its payload, bfloat16 keeps the top bits). Every case is
 * computed and one selected with masks, so loops over arrays of them
 * vectorise. convert.c builds its conversion loops from these; kernels that
 * widen half-type rows into float32 registers or buffers use them too, so
 * the results are bit for bit those of tpu_convert.
 */
#ifndef TPU_HALF_BITS_H_
#define TPU_HALF_BITS_H_

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- scalar conversions ------------------------------------------------------ */

static inline uint32_t f2bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static inline float bits2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* All ones when c holds, else zero: every case is computed and one is
 * selected with masks, so the loops using these have no branches. */
static inline uint32_t mask_if(bool c) { return 0u - (uint32_t)c; }

/* float16 -> float32; `quiet` sets the quiet bit of NaNs (see READ_F16 in convert.c). */
static inline float h2f(uint16_t h, bool quiet) {
  int32_t em = h & 0x7fff;                                      /* exponent and mantissa */
  uint32_t norm = ((uint32_t)em << 13) + ((127u - 15u) << 23);  /* rebias the exponent */
  norm += mask_if(em >= 0x7c00) & ((128u - 16u) << 23);         /* inf, nan: exponent 255 */
  if (quiet) norm |= mask_if(em > 0x7c00) & 0x00400000u;
  uint32_t sub = f2bits((float)em * 5.9604644775390625e-8f);    /* subnormal: em * 2^-24 */
  uint32_t is_sub = mask_if(em < 0x400);
  return bits2f(((is_sub & sub) | (~is_sub & norm)) | ((uint32_t)(h & 0x8000) << 16));
}

static inline uint16_t f2h(float f) {
  uint32_t x = f2bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t a = (int32_t)(x & 0x7fffffffu);
  uint32_t special = 0x7c00u | (mask_if(a > 0x7f800000) & 0x200u); /* inf, quiet nan */
  /* Subnormal results: adding 0.5 (exponent 126) leaves the value's 2^-24
   * units, rounded to nearest even by the float add, in the low bits. */
  uint32_t sub = f2bits(bits2f((uint32_t)a) + 0.5f) - (126u << 23);
  /* Normal results: rebias (-112 << 23, as 0xc8000000), round to nearest
   * even (0xfff plus the kept lsb), drop 13 mantissa bits. A carry out of
   * the largest finite value gives inf. */
  uint32_t norm = ((uint32_t)a + 0xc8000fffu + (((uint32_t)a >> 13) & 1u)) >> 13;
  uint32_t is_big = mask_if(a >= 0x47800000), is_sub = mask_if(a < 0x38800000);
  uint32_t r = (is_big & special) | (~is_big & ((is_sub & sub) | (~is_sub & norm)));
  return (uint16_t)(sign | r);
}

/* bfloat16 -> float32; `quiet` sets the quiet bit of NaNs (see READ_F16 in convert.c). */
static inline float bf2f(uint16_t h, bool quiet) {
  uint32_t x = (uint32_t)h << 16;
  if (quiet) x |= mask_if((x & 0x7fffffffu) > 0x7f800000u) & 0x00400000u;
  return bits2f(x);
}

static inline uint16_t f2bf(float f) {
  uint32_t x = f2bits(f);
  uint32_t nan = (x >> 16) | 0x40u;                            /* quiet, top payload kept */
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;         /* round to nearest even */
  uint32_t is_nan = mask_if((int32_t)(x & 0x7fffffffu) > 0x7f800000);
  return (uint16_t)((is_nan & nan) | (~is_nan & r));
}

#endif /* TPU_HALF_BITS_H_ */
