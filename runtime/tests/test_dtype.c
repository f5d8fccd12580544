/* test_dtype.c — the dtype table: promotion, half conversions, and
 * tpu_convert against a plain per-element reference over every dtype pair. */
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

/* Reference: one element at a time through double (floats) or int64. */
static void ref_convert(void* dst, tpu_dtype_t dt, const void* src, tpu_dtype_t st) {
  double f = 0;
  int64_t i = 0;
  int fl = tpu_dtype_is_floating(st);
  if (st == TPU_DTYPE_BOOL) i = *(const uint8_t*)src != 0;
  else if (st == TPU_DTYPE_U8) i = *(const uint8_t*)src;
  else if (st == TPU_DTYPE_I8) i = *(const int8_t*)src;
  else if (st == TPU_DTYPE_I16) i = *(const int16_t*)src;
  else if (st == TPU_DTYPE_I32) i = *(const int32_t*)src;
  else if (st == TPU_DTYPE_I64) i = *(const int64_t*)src;
  else if (st == TPU_DTYPE_F16) f = tpu_f16_to_f32(*(const uint16_t*)src);
  else if (st == TPU_DTYPE_BF16) f = tpu_bf16_to_f32(*(const uint16_t*)src);
  else if (st == TPU_DTYPE_F32) f = *(const float*)src;
  else f = *(const double*)src;
  int64_t as_int = fl ? (int64_t)f : i;
  double as_f = fl ? f : (double)i;
  if (dt == TPU_DTYPE_BOOL) *(uint8_t*)dst = fl ? f != 0 : i != 0;
  else if (dt == TPU_DTYPE_U8) *(uint8_t*)dst = (uint8_t)as_int;
  else if (dt == TPU_DTYPE_I8) *(int8_t*)dst = (int8_t)as_int;
  else if (dt == TPU_DTYPE_I16) *(int16_t*)dst = (int16_t)as_int;
  else if (dt == TPU_DTYPE_I32) *(int32_t*)dst = (int32_t)as_int;
  else if (dt == TPU_DTYPE_I64) *(int64_t*)dst = as_int;
  else if (dt == TPU_DTYPE_F16) *(uint16_t*)dst = tpu_f32_to_f16((float)as_f);
  else if (dt == TPU_DTYPE_BF16) *(uint16_t*)dst = tpu_f32_to_bf16((float)as_f);
  else if (dt == TPU_DTYPE_F32) *(float*)dst = (float)as_f;
  else *(double*)dst = as_f;
}

TEST(dtype_convert_matches_reference_for_every_pair) {
  enum { N = 700 }; /* more than one chunk */
  static const double values[] = {0, 1, -1, 2.5, -3.75, 100, 127, 255, -128, 0.125};
  for (int s = 0; s < TPU_DTYPE_COUNT; ++s) {
    for (int d = 0; d < TPU_DTYPE_COUNT; ++d) {
      size_t ss = tpu_dtype_size(s), ds = tpu_dtype_size(d);
      unsigned char* src = calloc(N * 3, ss);
      unsigned char* got = calloc(N * 2, ds);
      unsigned char* want = calloc(N * 2, ds);
      /* Source values: small numbers valid in every dtype, at stride 3. */
      for (int i = 0; i < N; ++i) {
        double v = values[i % 10];
        if (s == TPU_DTYPE_U8 && v < 0) v = -v;
        if (s == TPU_DTYPE_BOOL) v = v != 0;
        if (!tpu_dtype_is_floating(s)) v = (double)(int64_t)v;
        tpu_convert(src + (size_t)i * 3 * ss, s, 1, &v, TPU_DTYPE_F64, 1, 1);
      }
      tpu_convert(got, d, 2, src, s, 3, N);
      for (int i = 0; i < N; ++i)
        ref_convert(want + (size_t)i * 2 * ds, d, src + (size_t)i * 3 * ss, s);
      int bad = 0;
      for (int i = 0; i < N && !bad; ++i)
        bad = memcmp(got + (size_t)i * 2 * ds, want + (size_t)i * 2 * ds, ds) != 0;
      if (bad) tpu_test_fail(__FILE__, __LINE__, "%s -> %s", tpu_dtype_name(s), tpu_dtype_name(d));
      free(src);
      free(got);
      free(want);
    }
  }
}
