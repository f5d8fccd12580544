/* dtype.c — dtype facts (names, sizes, compute types, categories) and
 * PyTorch's type promotion, generated from TPU_DTYPE_LIST. Converting
 * values between dtypes is convert.c's. */
#include "tpu/dtype.h"

typedef struct dtype_info {
  const char* name;
  size_t size;
  tpu_compute_type_t compute;
  int category;
} dtype_info_t;

static const dtype_info_t g_info[TPU_DTYPE_COUNT] = {
#define TPU_X_(E, n, T, C, K) {n, sizeof(T), TPU_COMPUTE_##C, K},
    TPU_DTYPE_ALL_LIST(TPU_X_)
#undef TPU_X_
};

static int valid(tpu_dtype_t d) { return d >= 0 && d < TPU_DTYPE_COUNT; }

size_t tpu_dtype_size(tpu_dtype_t d) { return valid(d) ? g_info[d].size : 0; }

/* The C++ type names PyTorch prints for a dtype's TypeMeta (as GCC spells
 * them): what messages built from `tensor.dtype()` in ATen's checks show. */
static const char* const g_cpp_name[TPU_DTYPE_COUNT] = {
    [TPU_DTYPE_BOOL] = "bool",
    [TPU_DTYPE_U8] = "unsigned char",
    [TPU_DTYPE_I8] = "signed char",
    [TPU_DTYPE_I16] = "short int",
    [TPU_DTYPE_I32] = "int",
    [TPU_DTYPE_I64] = "long int",
    [TPU_DTYPE_F16] = "c10::Half",
    [TPU_DTYPE_BF16] = "c10::BFloat16",
    [TPU_DTYPE_F32] = "float",
    [TPU_DTYPE_F64] = "double",
    [TPU_DTYPE_C64] = "c10::complex<float>",
    [TPU_DTYPE_C128] = "c10::complex<double>",
    [TPU_DTYPE_U16] = "short unsigned int",
    [TPU_DTYPE_U32] = "unsigned int",
    [TPU_DTYPE_U64] = "long unsigned int",
};

const char* tpu_dtype_cpp_name(tpu_dtype_t d) {
  return valid(d) && g_cpp_name[d] ? g_cpp_name[d] : "invalid";
}
const char* tpu_dtype_name(tpu_dtype_t d) { return valid(d) ? g_info[d].name : "invalid"; }
tpu_compute_type_t tpu_dtype_compute(tpu_dtype_t d) {
  return valid(d) ? g_info[d].compute : TPU_COMPUTE_F32;
}
bool tpu_dtype_is_floating(tpu_dtype_t d) { return valid(d) && g_info[d].category == 2; }
bool tpu_dtype_is_integral(tpu_dtype_t d) { return valid(d) && g_info[d].category == 1; }
bool tpu_dtype_is_complex(tpu_dtype_t d) { return valid(d) && g_info[d].category == 3; }
bool tpu_dtype_is_wide_unsigned(tpu_dtype_t d) { return valid(d) && g_info[d].category == 4; }
bool tpu_dtype_is_storage_only(tpu_dtype_t d) { return valid(d) && g_info[d].category >= 3; }

tpu_dtype_t tpu_dtype_signed_twin(tpu_dtype_t d) {
  switch (d) {
    case TPU_DTYPE_U16: return TPU_DTYPE_I16;
    case TPU_DTYPE_U32: return TPU_DTYPE_I32;
    case TPU_DTYPE_U64: return TPU_DTYPE_I64;
    default: return TPU_DTYPE_INVALID;
  }
}

tpu_dtype_t tpu_dtype_part(tpu_dtype_t d) {
  return tpu_dtype_is_complex(d) ? tpu_compute_storage_dtype(g_info[d].compute) : d;
}

tpu_dtype_t tpu_dtype_to_complex(tpu_dtype_t d) {
  if (tpu_dtype_is_complex(d)) return d;
  for (int c = 0; c < TPU_DTYPE_COUNT; ++c)
    if (g_info[c].category == 3 && tpu_dtype_part((tpu_dtype_t)c) == d) return (tpu_dtype_t)c;
  return TPU_DTYPE_INVALID;
}

tpu_dtype_t tpu_compute_storage_dtype(tpu_compute_type_t ct) {
  static const tpu_dtype_t map[TPU_COMPUTE_COUNT] = {TPU_DTYPE_BOOL, TPU_DTYPE_I64,
                                                     TPU_DTYPE_F32, TPU_DTYPE_F64};
  return (unsigned)ct < TPU_COMPUTE_COUNT ? map[ct] : TPU_DTYPE_INVALID;
}

size_t tpu_compute_size(tpu_compute_type_t ct) {
  return tpu_dtype_size(tpu_compute_storage_dtype(ct));
}

/* PyTorch's promoteTypes for these dtypes (c10/core/ScalarType.cpp):
 * u8 with a signed int goes to the next wider signed type; f16 with bf16 is
 * f32; complex64 with float64 is complex128. */
tpu_dtype_t tpu_dtype_promote(tpu_dtype_t a, tpu_dtype_t b) {
  enum { b1 = TPU_DTYPE_BOOL, u1 = TPU_DTYPE_U8, i1 = TPU_DTYPE_I8, i2 = TPU_DTYPE_I16,
         i4 = TPU_DTYPE_I32, i8 = TPU_DTYPE_I64, f2 = TPU_DTYPE_F16, bf = TPU_DTYPE_BF16,
         f4 = TPU_DTYPE_F32, f8 = TPU_DTYPE_F64, c4 = TPU_DTYPE_C64, c8 = TPU_DTYPE_C128 };
  enum { lattice = TPU_DTYPE_C128 + 1 }; /* the real and complex dtypes */
  static const signed char table[lattice][lattice] = {
      /*        b1  u1  i1  i2  i4  i8  f2  bf  f4  f8  c4  c8 */
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8, c4, c8},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8, c4, c8},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8, c4, c8},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8, c4, c8},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8, c4, c8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8, c4, c8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8, c4, c8},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8, c4, c8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8, c4, c8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, c8, c8},
      /* c4 */ {c4, c4, c4, c4, c4, c4, c4, c4, c4, c8, c4, c8},
      /* c8 */ {c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8},
  };
  if (!valid(a) || !valid(b)) return TPU_DTYPE_INVALID;
  if (tpu_dtype_is_wide_unsigned(a) || tpu_dtype_is_wide_unsigned(b)) {
    if (a == b) return a;
    tpu_dtype_t other = tpu_dtype_is_wide_unsigned(a) ? b : a;
    return g_info[other].category == 2 || g_info[other].category == 3 ? other : TPU_DTYPE_INVALID;
  }
  return (tpu_dtype_t)table[a][b];
}
