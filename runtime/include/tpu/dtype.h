/* tpu/dtype.h — the one table of element types.
 *
 * TPU_DTYPE_LIST is the single source of truth: every per-dtype switch in the
 * runtime is generated from it (sizes, names, promotion in dtype.c; the
 * conversion loops in convert.c).
 * Half types (float16, bfloat16) are stored as 16-bit patterns and computed in
 * float32. Integers compute in int64, floats in float32/float64, bool in bool.
 *
 * Complex dtypes (TPU_DTYPE_COMPLEX_LIST) are a storage category: a value is
 * a (real, imaginary) pair of its part dtype, laid out as PyTorch lays it out.
 * They are in the enum and in every dtype fact (size, name, promotion) and
 * tpu_convert moves them (PyTorch's casts: complex -> real keeps the real
 * part, real -> complex has imaginary part 0), but the per-dtype code the
 * kernel families generate ranges over TPU_DTYPE_LIST, the real dtypes
 * only: the op registry refuses complex views and dtype attrs for every row
 * that does not declare TPU_OP_COMPLEX (tpu/ops.h), so no generic kernel
 * sees one.
 *
 * The wide unsigned dtypes (TPU_DTYPE_UNSIGNED_LIST: uint16, uint32, uint64)
 * are a storage category too, as PyTorch keeps them ("barebones": copies,
 * casts, bit operations, equality, indexing; no arithmetic on CPU either).
 * tpu_convert moves them; rows that only move elements or whose result bits
 * do not depend on signedness run them as the signed integer of the same
 * width (TPU_OP_COMPLEX_AS_BITS, TPU_OP_UNSIGNED_AS_SIGNED in tpu/ops.h);
 * rows declaring TPU_OP_UNSIGNED take them as they are (copy, fill); every
 * other row refuses them, and the CPU fallback runs the op as PyTorch does.
 */
#ifndef TPU_DTYPE_H_
#define TPU_DTYPE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(ENUM, name, storage C type, compute class, category)
 * category: 0 bool, 1 integer, 2 floating. */
#define TPU_DTYPE_LIST(X)                       \
  X(BOOL, "bool", uint8_t, B8, 0)               \
  X(U8, "uint8", uint8_t, I64, 1)               \
  X(I8, "int8", int8_t, I64, 1)                 \
  X(I16, "int16", int16_t, I64, 1)              \
  X(I32, "int32", int32_t, I64, 1)              \
  X(I64, "int64", int64_t, I64, 1)              \
  X(F16, "float16", uint16_t, F32, 2)           \
  X(BF16, "bfloat16", uint16_t, F32, 2)         \
  X(F32, "float32", float, F32, 2)              \
  X(F64, "float64", double, F64, 2)

/* The complex dtypes, after the real ones: X(ENUM, name, storage C type,
 * compute class of the parts, 3). */
typedef struct tpu_complex64 {
  float re, im;
} tpu_complex64_t;
typedef struct tpu_complex128 {
  double re, im;
} tpu_complex128_t;
#define TPU_DTYPE_COMPLEX_LIST(X)                  \
  X(C64, "complex64", tpu_complex64_t, F32, 3)     \
  X(C128, "complex128", tpu_complex128_t, F64, 3)

/* The wide unsigned dtypes, after the complex ones: X(ENUM, name, storage C
 * type, compute class, 4). Their compute class is int64's, which holds
 * uint16 and uint32 exactly and uint64 bit for bit. */
#define TPU_DTYPE_UNSIGNED_LIST(X)   \
  X(U16, "uint16", uint16_t, I64, 4) \
  X(U32, "uint32", uint32_t, I64, 4) \
  X(U64, "uint64", uint64_t, I64, 4)

/* Every dtype: the real ones, the complex ones, the wide unsigned ones. */
#define TPU_DTYPE_ALL_LIST(X) \
  TPU_DTYPE_LIST(X) TPU_DTYPE_COMPLEX_LIST(X) TPU_DTYPE_UNSIGNED_LIST(X)

typedef enum tpu_dtype {
#define TPU_X_(E, n, T, C, K) TPU_DTYPE_##E,
  TPU_DTYPE_ALL_LIST(TPU_X_)
#undef TPU_X_
  TPU_DTYPE_COUNT,
  TPU_DTYPE_INVALID = -1,
} tpu_dtype_t;

/* The types kernels compute in. Every storage dtype maps to exactly one. */
typedef enum tpu_compute_type {
  TPU_COMPUTE_B8 = 0, /* bool as uint8 0/1 */
  TPU_COMPUTE_I64,
  TPU_COMPUTE_F32,
  TPU_COMPUTE_F64,
  TPU_COMPUTE_COUNT,
} tpu_compute_type_t;

size_t tpu_dtype_size(tpu_dtype_t dtype);
const char* tpu_dtype_name(tpu_dtype_t dtype);
/* The C++ type name PyTorch's messages print for the dtype ("float",
 * "c10::BFloat16", "long int"; static storage; "invalid" out of range). */
const char* tpu_dtype_cpp_name(tpu_dtype_t dtype);
tpu_compute_type_t tpu_dtype_compute(tpu_dtype_t dtype);
bool tpu_dtype_is_floating(tpu_dtype_t dtype);
bool tpu_dtype_is_integral(tpu_dtype_t dtype); /* the real integers: excludes bool and uint16/32/64 */
bool tpu_dtype_is_complex(tpu_dtype_t dtype);
/* uint16, uint32, uint64 (not uint8, which is a real dtype). */
bool tpu_dtype_is_wide_unsigned(tpu_dtype_t dtype);
/* Complex or wide unsigned: a dtype the generic kernels never see. */
bool tpu_dtype_is_storage_only(tpu_dtype_t dtype);
/* The signed integer dtype of the same width as a wide unsigned dtype
 * (uint16 -> int16, uint32 -> int32, uint64 -> int64); INVALID otherwise. */
tpu_dtype_t tpu_dtype_signed_twin(tpu_dtype_t dtype);
/* complex64 -> float32, complex128 -> float64; a real dtype is its own part. */
tpu_dtype_t tpu_dtype_part(tpu_dtype_t dtype);
/* The complex dtype with parts of `dtype` (float32 -> complex64, float64 ->
 * complex128, a complex dtype itself); INVALID for the others. */
tpu_dtype_t tpu_dtype_to_complex(tpu_dtype_t dtype);
/* The storage dtype whose compute type is `ct` (B8->BOOL, I64->I64, ...). */
tpu_dtype_t tpu_compute_storage_dtype(tpu_compute_type_t ct);
size_t tpu_compute_size(tpu_compute_type_t ct);

/* PyTorch's promoteTypes lattice for the dtypes above (complex included). A
 * wide unsigned dtype promotes with itself, and to the floating or complex
 * dtype it meets; with any other dtype PyTorch refuses: INVALID. */
tpu_dtype_t tpu_dtype_promote(tpu_dtype_t a, tpu_dtype_t b);

/* Converts n elements between any two dtypes, with source and destination
 * element strides (in elements; 0 repeats one source element). A same-dtype
 * conversion copies bits. Values follow PyTorch's casts: floating -> integer
 * truncates (NaN -> 0, beyond int64 saturates, narrower integers wrap),
 * nonzero (NaN too) -> true, integer -> floating rounds once to nearest
 * even, half types round to nearest even through float32; a wide unsigned
 * destination takes the int64 conversion's low bits (uint64 also takes a
 * floating value in [2^63, 2^64) exactly). Implemented in
 * convert.c, the runtime's only conversion code; fast for any strides, and
 * for short calls. */
void tpu_convert(void* dst, tpu_dtype_t dst_dtype, int64_t dst_stride,
                 const void* src, tpu_dtype_t src_dtype, int64_t src_stride, int64_t n);

/* One element of a half type from and to float32, as tpu_convert does it. */
float tpu_f16_to_f32(uint16_t h);
uint16_t tpu_f32_to_f16(float f);
float tpu_bf16_to_f32(uint16_t h);
uint16_t tpu_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif
#endif /* TPU_DTYPE_H_ */
