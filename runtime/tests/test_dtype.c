/* test_dtype.c — the dtype table and conversion (convert.c): promotion,
 * the half helpers against exact rounding boundaries, and tpu_convert
 * against a plain per-element statement of PyTorch's cast rules, over every
 * dtype pair, on random bit patterns (NaN payloads, infinities, subnormals,
 * huge integers), contiguous (the SIMD paths), strided and broadcast. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tpu/dtype.h"

TEST(dtype_promotion_follows_pytorch) {
  CHECK(tpu_dtype_promote(TPU_DTYPE_U8, TPU_DTYPE_I8) == TPU_DTYPE_I16);
  CHECK(tpu_dtype_promote(TPU_DTYPE_BOOL, TPU_DTYPE_BOOL) == TPU_DTYPE_BOOL);
  CHECK(tpu_dtype_promote(TPU_DTYPE_I64, TPU_DTYPE_F16) == TPU_DTYPE_F16);
  CHECK(tpu_dtype_promote(TPU_DTYPE_F16, TPU_DTYPE_BF16) == TPU_DTYPE_F32);
  CHECK(tpu_dtype_promote(TPU_DTYPE_BF16, TPU_DTYPE_F64) == TPU_DTYPE_F64);
  for (int a = 0; a < TPU_DTYPE_COUNT; ++a)
    for (int b = 0; b < TPU_DTYPE_COUNT; ++b)
      CHECK(tpu_dtype_promote(a, b) == tpu_dtype_promote(b, a));
}

TEST(dtype_half_round_trips) {
  /* Every finite f16 and bf16 bit pattern survives f32 and back. */
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t x = (uint16_t)h;
    if ((x & 0x7c00u) != 0x7c00u) CHECK(tpu_f32_to_f16(tpu_f16_to_f32(x)) == x);
    if ((x & 0x7f80u) != 0x7f80u) CHECK(tpu_f32_to_bf16(tpu_bf16_to_f32(x)) == x);
  }
  CHECK(tpu_f16_to_f32(tpu_f32_to_f16(65504.0f)) == 65504.0f);
  CHECK(tpu_f32_to_f16(1e6f) == 0x7c00u); /* overflow to inf */
  CHECK(tpu_f16_to_f32(tpu_f32_to_f16(1.0f + 1.0f / 4096)) == 1.0f); /* ties to even */
  CHECK(tpu_bf16_to_f32(tpu_f32_to_bf16(1.00390625f)) == 1.0f);
}

/* Every rounding boundary of float32 -> float16 and -> bfloat16: between
 * adjacent finite values a < b, the midpoint (exact in float32) rounds to the
 * one with an even last bit, and its float32 neighbours to the nearer one. */
static void check_boundaries(uint16_t (*narrow)(float), float (*widen)(uint16_t),
                             uint16_t max_finite) {
  for (uint32_t h = 0; h < max_finite; ++h) {
    float a = widen((uint16_t)h), b = widen((uint16_t)(h + 1)), mid = a + (b - a) / 2;
    uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
    if (narrow(mid) != even || narrow(nextafterf(mid, a)) != h ||
        narrow(nextafterf(mid, b)) != h + 1 || narrow(-mid) != (even | 0x8000u)) {
      tpu_test_fail(__FILE__, __LINE__, "rounding between 0x%04x and 0x%04x", h, h + 1);
      return;
    }
  }
}

TEST(dtype_half_rounding_boundaries) {
  check_boundaries(tpu_f32_to_f16, tpu_f16_to_f32, 0x7bff);
  check_boundaries(tpu_f32_to_bf16, tpu_bf16_to_f32, 0x7f7f);
  CHECK(tpu_f16_to_f32(1) == ldexpf(1.0f, -24)); /* smallest subnormal */
  CHECK(tpu_f32_to_f16(ldexpf(1.0f, -25)) == 0);  /* half of it ties to 0 */
  CHECK(tpu_f32_to_f16(nextafterf(65520.0f, 0)) == 0x7bffu);
  CHECK(tpu_f32_to_f16(65520.0f) == 0x7c00u);    /* rounds up to inf */
  CHECK(tpu_f32_to_f16(-INFINITY) == 0xfc00u);
  CHECK(tpu_f32_to_f16(-NAN) == 0xfe00u);         /* quiet, payload dropped */
  CHECK(tpu_f32_to_bf16(INFINITY) == 0x7f80u);
  CHECK(tpu_f32_to_bf16(tpu_bf16_to_f32(0x7f81u)) == 0x7fc1u); /* quieted, payload kept */
  CHECK(isnan(tpu_f16_to_f32(0x7e00u)) && tpu_f16_to_f32(0xfc00u) == -INFINITY);
}

/* Floating -> int64: NaN -> 0, beyond int64 saturates, else truncates. */
static int64_t ref_f2i(double f) {
  if (f != f) return 0;
  if (f >= 9223372036854775808.0) return INT64_MAX;
  if (f <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)f;
}

/* A NaN made quiet, payload kept, as tpu_convert reads a half type's NaNs
 * (written out: a compiler may fold a float -> double -> float round trip
 * that would quiet it in hardware). */
static float quiet(float f) {
  if (f == f) return f;
  uint32_t b;
  memcpy(&b, &f, 4);
  b |= 0x00400000u;
  memcpy(&f, &b, 4);
  return f;
}

/* The reference: one element at a time, PyTorch's cast rules written out. */
static void ref_convert(void* dst, tpu_dtype_t dt, const void* src, tpu_dtype_t st) {
  if (dt == st) { /* a same-dtype conversion copies bits */
    memcpy(dst, src, tpu_dtype_size(dt));
    return;
  }
  double f = 0;
  int64_t i = 0;
  int fl = tpu_dtype_is_floating(st);
  if (st == TPU_DTYPE_BOOL) i = *(const uint8_t*)src != 0;
  else if (st == TPU_DTYPE_U8) i = *(const uint8_t*)src;
  else if (st == TPU_DTYPE_I8) i = *(const int8_t*)src;
  else if (st == TPU_DTYPE_I16) i = *(const int16_t*)src;
  else if (st == TPU_DTYPE_I32) i = *(const int32_t*)src;
  else if (st == TPU_DTYPE_I64) i = *(const int64_t*)src;
  else if (st == TPU_DTYPE_U16) i = *(const uint16_t*)src;
  else if (st == TPU_DTYPE_U32) i = *(const uint32_t*)src;
  else if (st == TPU_DTYPE_U64) i = (int64_t) * (const uint64_t*)src; /* bits */
  else if (st == TPU_DTYPE_F16) f = quiet(tpu_f16_to_f32(*(const uint16_t*)src));
  else if (st == TPU_DTYPE_BF16) f = quiet(tpu_bf16_to_f32(*(const uint16_t*)src));
  else if (st == TPU_DTYPE_F32) f = *(const float*)src;
  else f = *(const double*)src;
  uint64_t as_int = (uint64_t)(fl ? ref_f2i(f) : i); /* narrower integers wrap */
  float as_f32 = fl ? (float)f : (float)i;            /* one rounding from int64 */
  if (st == TPU_DTYPE_U64) { /* unsigned, beyond int64 */
    as_f32 = (float)*(const uint64_t*)src;
    if (dt == TPU_DTYPE_F64) {
      *(double*)dst = (double)*(const uint64_t*)src;
      return;
    }
  }
  if (dt == TPU_DTYPE_U64 && fl && f >= 9223372036854775808.0 && f < 18446744073709551616.0)
    as_int = (uint64_t)f; /* exact in [2^63, 2^64) */
  if (dt == TPU_DTYPE_BOOL) *(uint8_t*)dst = fl ? f != 0 : i != 0;
  else if (dt == TPU_DTYPE_U8) *(uint8_t*)dst = (uint8_t)as_int;
  else if (dt == TPU_DTYPE_I8) *(int8_t*)dst = (int8_t)as_int;
  else if (dt == TPU_DTYPE_I16) *(int16_t*)dst = (int16_t)as_int;
  else if (dt == TPU_DTYPE_I32) *(int32_t*)dst = (int32_t)as_int;
  else if (dt == TPU_DTYPE_I64) *(int64_t*)dst = (int64_t)as_int;
  else if (dt == TPU_DTYPE_U16) *(uint16_t*)dst = (uint16_t)as_int;
  else if (dt == TPU_DTYPE_U32) *(uint32_t*)dst = (uint32_t)as_int;
  else if (dt == TPU_DTYPE_U64) *(uint64_t*)dst = as_int;
  else if (dt == TPU_DTYPE_F16) *(uint16_t*)dst = tpu_f32_to_f16(as_f32);
  else if (dt == TPU_DTYPE_BF16) *(uint16_t*)dst = tpu_f32_to_bf16(as_f32);
  else if (dt == TPU_DTYPE_F32) *(float*)dst = as_f32;
  else *(double*)dst = fl ? f : (double)i;
}

/* n random elements of dtype t; no NaNs when `finite` (they become 0). */
static void random_elements(unsigned char* p, tpu_dtype_t t, int64_t n, uint64_t seed,
                            int finite) {
  size_t size = tpu_dtype_size(t);
  for (int64_t k = 0; k < n; ++k) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    memcpy(p + k * size, &seed, size);
    double back = 0;
    if (finite && tpu_dtype_is_floating(t)) {
      tpu_convert(&back, TPU_DTYPE_F64, 1, p + k * size, t, 1, 1);
      if (back != back) memset(p + k * size, 0, size);
    }
  }
}

TEST(dtype_convert_matches_reference_for_every_pair) {
  enum { N = 1000 };
  /* (source stride, destination stride): contiguous runs take the SIMD
   * paths, strided and broadcast (source stride 0) runs the generic loops. */
  static const int64_t strides[3][2] = {{1, 1}, {3, 2}, {0, 1}};
  unsigned char* src = malloc(N * 3 * 8);
  unsigned char* got = malloc(N * 2 * 8);
  for (int s = 0; s < TPU_DTYPE_COUNT; ++s)
    for (int d = 0; d < TPU_DTYPE_COUNT; ++d)
      for (int finite = 0; finite < 2 && !tpu_dtype_is_complex(s) && !tpu_dtype_is_complex(d);
           ++finite)
        for (int c = 0; c < 3; ++c) {
          size_t ss = tpu_dtype_size(s), ds = tpu_dtype_size(d);
          int64_t sst = strides[c][0], dst = strides[c][1];
          random_elements(src, s, N * 3, 0x9e3779b97f4a7c15ull + (uint64_t)(s * 31 + d), finite);
          memset(got, 0xa5, N * 2 * 8);
          tpu_convert(got, d, dst, src, s, sst, N);
          for (int64_t k = 0; k < N; ++k) {
            uint64_t want = 0;
            ref_convert(&want, d, src + k * sst * ss, s);
            if (memcmp(got + k * dst * ds, &want, ds) != 0) {
              tpu_test_fail(__FILE__, __LINE__, "%s -> %s, strides %lld/%lld: element %lld",
                            tpu_dtype_name(s), tpu_dtype_name(d), (long long)sst,
                            (long long)dst, (long long)k);
              break;
            }
          }
        }
  free(src);
  free(got);
}

TEST(dtype_convert_follows_pytorch_casts) {
  /* int64 reaches bfloat16 through float32, rounding once on the way:
   * 2^60 (1 + 2^-8) + 2^36 + 1 is just above a float32 midpoint, so float32
   * rounds it up, past the bfloat16 midpoint 2^60 (1 + 2^-8), and bfloat16
   * rounds up too (0x5d81, as PyTorch). Through float64 it would land on
   * both midpoints and tie to even twice (0x5d80). */
  int64_t big = ((int64_t)1 << 60) + ((int64_t)1 << 52) + ((int64_t)1 << 36) + 1;
  uint16_t bf;
  tpu_convert(&bf, TPU_DTYPE_BF16, 1, &big, TPU_DTYPE_I64, 1, 1);
  CHECK(bf == 0x5d81u);
  /* float -> integer: truncation, NaN -> 0, saturation, then wrapping. */
  double in[6] = {-2.75, NAN, 1e300, -1e300, 300.5, -129.0};
  int64_t i64[6];
  int8_t i8[6];
  uint8_t b[6];
  tpu_convert(i64, TPU_DTYPE_I64, 1, in, TPU_DTYPE_F64, 1, 6);
  tpu_convert(i8, TPU_DTYPE_I8, 1, in, TPU_DTYPE_F64, 1, 6);
  tpu_convert(b, TPU_DTYPE_BOOL, 1, in, TPU_DTYPE_F64, 1, 6);
  CHECK(i64[0] == -2 && i64[1] == 0 && i64[2] == INT64_MAX && i64[3] == INT64_MIN);
  CHECK(i8[0] == -2 && i8[4] == 44 && i8[5] == 127 && i8[2] == -1 && i8[3] == 0);
  CHECK(b[0] == 1 && b[1] == 1 && b[4] == 1);
  /* float64 -> float16 rounds through float32, as c10::Half(double) does. */
  double d = 1.0 + ldexp(1.0, -11) + ldexp(1.0, -40); /* above the f16 midpoint... */
  uint16_t h;
  tpu_convert(&h, TPU_DTYPE_F16, 1, &d, TPU_DTYPE_F64, 1, 1);
  CHECK(h == 0x3c00u); /* ...but float32 rounds it onto the midpoint, which ties to even */
  /* A non-canonical bool byte reads as true. */
  uint8_t two = 2;
  double one;
  tpu_convert(&one, TPU_DTYPE_F64, 1, &two, TPU_DTYPE_BOOL, 1, 1);
  CHECK(one == 1.0);
}

/* Complex dtypes are storage: tpu_convert moves them part by part. complex ->
 * complex converts both parts, real -> complex has imaginary part 0, complex
 * -> real keeps the real part (bool: either part nonzero); strided and
 * broadcast too. */
TEST(dtype_complex_conversions) {
  CHECK(tpu_dtype_size(TPU_DTYPE_C64) == 8 && tpu_dtype_size(TPU_DTYPE_C128) == 16);
  CHECK(tpu_dtype_is_complex(TPU_DTYPE_C64) && !tpu_dtype_is_floating(TPU_DTYPE_C64));
  CHECK(tpu_dtype_part(TPU_DTYPE_C128) == TPU_DTYPE_F64);
  CHECK(tpu_dtype_to_complex(TPU_DTYPE_F32) == TPU_DTYPE_C64);
  CHECK(tpu_dtype_to_complex(TPU_DTYPE_F16) == TPU_DTYPE_INVALID);
  CHECK(tpu_dtype_promote(TPU_DTYPE_C64, TPU_DTYPE_F64) == TPU_DTYPE_C128);
  CHECK(tpu_dtype_promote(TPU_DTYPE_I64, TPU_DTYPE_C64) == TPU_DTYPE_C64);
  enum { N = 37 };
  static const int64_t strides[3][2] = {{1, 1}, {3, 2}, {0, 1}};
  for (int s = 0; s < TPU_DTYPE_COUNT; ++s)
    for (int d = 0; d < TPU_DTYPE_COUNT; ++d) {
      if (!tpu_dtype_is_complex(s) && !tpu_dtype_is_complex(d)) continue;
      for (int c = 0; c < 3; ++c) {
        int64_t sst = strides[c][0], dst = strides[c][1];
        double src_re[N], src_im[N];
        unsigned char src[N * 3 * 16], got[N * 2 * 16];
        memset(src, 0, sizeof(src));
        memset(got, 0xa5, sizeof(got));
        size_t ss = tpu_dtype_size(s), ds = tpu_dtype_size(d);
        tpu_dtype_t sp = tpu_dtype_part(s), dp = tpu_dtype_part(d);
        for (int k = 0; k < N; ++k) {
          src_re[k] = (k * 7 % 11) - 5.5 + (s == TPU_DTYPE_BOOL ? 0 : 0.25 * k);
          src_im[k] = tpu_dtype_is_complex(s) ? 3.0 - k : 0.0;
          unsigned char* e = src + (size_t)k * (size_t)(sst ? sst : 1) * ss;
          tpu_convert(e, sp, 1, &src_re[k], TPU_DTYPE_F64, 1, 1);
          if (tpu_dtype_is_complex(s))
            tpu_convert(e + tpu_dtype_size(sp), sp, 1, &src_im[k], TPU_DTYPE_F64, 1, 1);
        }
        tpu_convert(got, d, dst, src, s, sst, N);
        for (int k = 0; k < N; ++k) {
          int j = sst ? k : 0;
          /* want: the source's real part as the destination's part dtype */
          double re = 0, im = 0, want_re = 0;
          const unsigned char* e = src + (size_t)j * (size_t)(sst ? sst : 1) * ss;
          tpu_convert(&want_re, TPU_DTYPE_F64, 1, e, sp, 1, 1);
          unsigned char part[8];
          tpu_convert(part, dp, 1, &want_re, TPU_DTYPE_F64, 1, 1);
          tpu_convert(&want_re, TPU_DTYPE_F64, 1, part, dp, 1, 1);
          const unsigned char* g = got + (size_t)k * (size_t)dst * ds;
          tpu_convert(&re, TPU_DTYPE_F64, 1, g, dp, 1, 1);
          if (tpu_dtype_is_complex(d)) tpu_convert(&im, TPU_DTYPE_F64, 1, g + tpu_dtype_size(dp), dp, 1, 1);
          double want_im = tpu_dtype_is_complex(d) ? src_im[j] : 0.0;
          if (d == TPU_DTYPE_BOOL) want_re = (src_re[j] != 0 || src_im[j] != 0);
          if (re != want_re || im != want_im) {
            tpu_test_fail(__FILE__, __LINE__, "%s -> %s, strides %lld/%lld: element %d",
                          tpu_dtype_name(s), tpu_dtype_name(d), (long long)sst, (long long)dst, k);
            break;
          }
        }
      }
    }
}
