/* mxu.h — the host driver's matrix unit (internal; mxu.c).
 *
 * A TPU's MXU multiplies bfloat16 matrices with float32 accumulation. The
 * host driver's counterpart is the CPU's own matrix engine: AMX tiles where
 * the CPU has them (brgemm kernels on avx512_core_amx), else AVX512-BF16 dot
 * products (avx512_core_bf16), reached through oneDNN's matmul primitive
 * (oneDNN 3.2's C API, PyPI's onednn-cpu-gomp). float16 runs there too where
 * the CPU has AVX512-FP16. Without either instruction set the
 * unit is absent and callers keep their own path (bfloat16 widened to
 * float32 for sgemm), which `tpu_mxu_info` reports.
 *
 * A GEMM here is batched and strided:
 *     C[b] = alpha * A[b] @ B[b] + beta * C[b]
 * with A [batch,m,k], B [batch,k,n], C [batch,m,n] as 3-D views (a batch
 * stride of 0 broadcasts a factor). A and B are bfloat16 and C bfloat16 or
 * float32; or all three float32 (on AVX-512 CPUs, for a B whose batch is 1
 * or broadcast); or A int8/uint8, B int8 and C int32. With beta != 0, C
 * holds the addend on entry (an addmm's bias already copied in) and is read
 * before it is written.
 *
 * A B whose batch is 1 or broadcast (a weight, typically) is multiplied in
 * the kernel's blocked layout (bfloat16, int8 and a transposed float32 B:
 * from its second sighting on), kept
 * by the weight cache while it is read again unchanged (mxu_pack.h).
 *
 * Threads: a GEMM runs as single-threaded oneDNN GEMMs over the compute
 * pool, split by batch, rows or 64-column blocks, B laid out once for all
 * parts (mxu.c). It starts no OpenMP team: the OpenMP runtime is the
 * process's one libgomp, which PyTorch's CPU kernels use too, and a second
 * team makes libgomp throttle every team's spinning. A caller that asks for
 * a team (mxu_gemm_t.team: the convolutions' GEMMs) claims the pool's cores
 * (tpu_parallel_exclusive) and runs on an OpenMP team of that many threads,
 * or one thread when the pool is busy; its primitive is built for that
 * team's size (oneDNN fixes the count when it builds one).
 */
#ifndef TPU_KERNELS_MXU_H_
#define TPU_KERNELS_MXU_H_

#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>

#if DNNL_VERSION_MAJOR < 3
#error "the matrix unit is written against oneDNN 3's C API (requirements.txt)"
#endif
#include <stdint.h>

#include "tpu/ir.h"
#include "tpu/status.h"

typedef struct mxu_gemm {
  tpu_view_t a, b, c; /* 3-D views, borrowed; see above */
  float alpha, beta;
  /* The graph the GEMM runs in (tpu_exec_ctx_t's, borrowed): B's blocked
   * form is cached only when it does not write B. NULL: never cached. */
  const tpu_graph_t* graph;
  /* With has_bias: a dense row vector [n] (a Linear's bias, A's dtype or
   * C's) added to every row of alpha*A@B, in the kernel; C must then be
   * row-major and alpha 1. */
  bool has_bias;
  tpu_view_t bias;
  /* Run on the calling thread alone (one part of a product the caller has
   * split over the compute pool itself: conv_mxu_1x1.c, conv_mxu_rows.c),
   * neither split nor on a team. */
  bool serial;
  /* Run on an OpenMP team with the pool claimed, not split over the pool
   * (the convolutions' GEMMs, whose paths were measured and tested that
   * way, and whose convolution primitives run on that team anyway);
   * ignored when serial. */
  bool team;
} mxu_gemm_t;

/* The [1, rows, cols] view of a matrix at `addr` with row stride rs and
 * column stride cs (elements), as a GEMM here takes one. */
static inline tpu_view_t mxu_matrix(uint64_t addr, tpu_dtype_t dtype, int64_t rows, int64_t cols,
                                    int64_t rs, int64_t cs) {
  tpu_view_t v = {.addr = addr, .dtype = dtype, .ndim = 3};
  v.sizes[0] = 1, v.sizes[1] = rows, v.sizes[2] = cols;
  v.strides[0] = rows * cols, v.strides[1] = rs, v.strides[2] = cs;
  return v;
}

/* Part i of `parts` over `rows` rows, for a caller that splits a product by
 * rows over the compute pool: whole blocks of 16 rows, the last part the
 * rest; rows [*out_r0, *out_r1). */
static inline void mxu_row_part(int64_t rows, int64_t parts, int64_t i, int64_t* out_r0,
                                int64_t* out_r1) {
  int64_t blocks = rows / 16;
  *out_r0 = blocks * i / parts * 16;
  *out_r1 = i + 1 == parts ? rows : blocks * (i + 1) / parts * 16;
}

/* True when the unit computes GEMMs of `dtype` operands on this CPU
 * (bfloat16: AMX or AVX512-BF16; float32: AVX-512, 2-D B only). */
bool tpu_mxu_supports(tpu_dtype_t dtype);

/* True when it computes int8 GEMMs: A int8 or uint8, B int8, C int32, exact
 * (AMX-INT8 tiles or AVX512-VNNI). */
bool tpu_mxu_supports_int8(void);

/* Runs one GEMM; *out_done says whether it ran. A GEMM the unit does not
 * take (dtype, a layout the engine has no kernel for, the CPU) leaves
 * *out_done false with TPU_OK: the caller runs its own path, and the refusal
 * is counted (tpu_mxu_info_t's `declined`). OUT_OF_MEMORY or INTERNAL when
 * the engine fails. */
tpu_status_t tpu_mxu_gemm(const mxu_gemm_t* g, bool* out_done);

/* False when the CPU has AMX-BF16 tiles but oneDNN would run bfloat16 GEMM
 * `g` (as tpu_mxu_gemm runs it, `serial` included) on its AVX512-BF16
 * kernel instead; true otherwise (no tiles to be had, or another dtype).
 * oneDNN 3.2's matmul sends shapes it deems small there (its
 * "buffer_a_chunk_sz <= 126" rule), which catches 1x1 convolutions' per-image
 * GEMMs with few input channels and many positions, e.g. [64, 256] @
 * [256, 3136]: about 100 GFLOP/s there against 700-900 on the tiles (one
 * thread, this project's AMX Xeon). A caller with another formulation of
 * the same product (conv_mxu_1x1.c: by positions) asks first. */
bool tpu_mxu_gemm_on_tiles(const mxu_gemm_t* g);
/* True when the unit's bfloat16 GEMMs may run on AMX-BF16 tiles. */
bool tpu_mxu_has_tiles(void);

/* For the unit's other primitives (conv_mxu.c): oneDNN's CPU engine, or
 * NULL where the unit is off; and their counters (tpu_mxu_info_t's convs,
 * or conv_declined when `ran` is false; conv_split for a product that ran
 * split over the pool, counted in convs too). */
dnnl_engine_t tpu_mxu_engine(void);
void tpu_mxu_count_conv(bool ran);
void tpu_mxu_count_conv_split(void);
/* A 1x1 product run as GEMMs (conv_mxu_1x1.c, conv_mxu_rows.c),
 * counted in convs too (tpu_mxu_info_t's conv_gemm). */
void tpu_mxu_count_conv_gemm(void);

#endif /* TPU_KERNELS_MXU_H_ */
