/* matmul_int8.c — int8 matrix products: torch._int_mm and
 * aten._weight_int8pack_mm (the linear layer of weight-only int8
 * quantisation, torchao's int8_weight_only on CPU-style devices).
 *
 *   _int_mm(self [m,k] int8|uint8, mat2 [k,n] int8) -> [m,n] int32
 *       exact sums, wrapping as int32 as PyTorch's do: on the matrix unit
 *       (oneDNN s8/u8 x s8 -> s32 on AMX-INT8 or AVX512-VNNI, mxu.h) where
 *       it takes the layout, else an exact loop, rows split over the pool;
 *   _weight_int8pack_mm(self [m,k] f32|f16|bf16, mat2 [n,k] int8,
 *                       scales [n] self's dtype) -> [m,n] self's dtype
 *       out[i,j] = (sum_k self[i,k] * mat2[j,k]) * scales[j]: float32 sums,
 *       one rounding at the store, as the CPU kernel computes it. Units are
 *       blocks of I8_COLS output channels by I8_ROWS rows of self. Few rows
 *       (a decode step): dot products read the weight where it lies (int8
 *       widens exactly to float32), streaming it once at half the bytes of
 *       a bfloat16 weight. More rows (prefill): the block is widened to
 *       float32 once and multiplied by one OpenBLAS sgemm.
 *
 * Arguments PyTorch's CPU kernels accept are validated here (i8_parse);
 * anything else is UNIMPLEMENTED to check and infer, so the bridge raises
 * PyTorch's own error (meta kernel or CPU), and INVALID_ARGUMENT to a kernel
 * reached directly through the C API.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef TPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "kernels/common/kernel_util.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/mxu.h"
#include "kernels/common/view_walk.h"

#define I8_COLS 128 /* output channels per unit: 128 x k int8 of weight */
/* rows of self per unit: a GEMM unit widens its block of the weight once
 * for all of them (at 64, a 128-row product widened each block twice) */
#define I8_ROWS 256
/* From this many rows a unit widens its block of the weight to float32 once
 * and runs one sgemm (compute-bound, like any GEMM); below, each row is a
 * set of dot products that stream the block (memory-bound). */
#define I8_GEMM_ROWS 8

typedef enum { I8_INT_MM = 0, I8_WEIGHT_PACK } i8_kind_t;

typedef struct i8_spec {
  i8_kind_t kind;
} i8_spec_t;

typedef struct i8_args {
  const tpu_view_t *a, *b, *scales; /* scales: _weight_int8pack_mm only */
  int64_t m, k, n;
  tpu_dtype_t out_dtype;
} i8_args_t;

static tpu_status_t bad(const char* msg) {
  return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s", msg);
}

static tpu_status_t i8_parse(const tpu_op_def_t* def, const tpu_node_t* node, i8_args_t* out) {
  i8_kind_t kind = ((const i8_spec_t*)def->impl)->kind;
  int32_t want = kind == I8_INT_MM ? 2 : 3;
  if (node->num_inputs != want) return bad("wrong number of inputs");
  for (int32_t i = 0; i < want; ++i)
    if (node->inputs[i].kind != TPU_VALUE_VIEW) return bad("inputs must be tensors");
  const tpu_view_t* a = &node->inputs[0].u.view;
  const tpu_view_t* b = &node->inputs[1].u.view;
  if (a->ndim != 2 || b->ndim != 2) return bad("expected 2-D self and mat2");
  out->a = a, out->b = b, out->scales = NULL, out->m = a->sizes[0], out->k = a->sizes[1];
  if (kind == I8_INT_MM) {
    if (a->dtype != TPU_DTYPE_I8 && a->dtype != TPU_DTYPE_U8)
      return bad("_int_mm: expected self to be int8 or uint8");
    if (b->dtype != TPU_DTYPE_I8) return bad("_int_mm: expected mat2 to be int8");
    if (b->sizes[0] != out->k) return bad("_int_mm: self.size(1) needs to match mat2.size(0)");
    out->n = b->sizes[1], out->out_dtype = TPU_DTYPE_I32;
    return TPU_OK;
  }
  const tpu_view_t* s = &node->inputs[2].u.view;
  if (a->dtype != TPU_DTYPE_F32 && a->dtype != TPU_DTYPE_F16 && a->dtype != TPU_DTYPE_BF16)
    return bad("_weight_int8pack_mm: expect A to be either 32-bit or 16-bit float tensor");
  if (a->sizes[1] > 1 && a->strides[1] != 1)
    return bad("_weight_int8pack_mm: A must be contiguous on the last dimension");
  if (b->dtype != TPU_DTYPE_I8) return bad("_weight_int8pack_mm: expect B to be int8 tensor");
  if (!tpu_view_is_contiguous(b)) return bad("_weight_int8pack_mm: expect B to be contiguous");
  if (b->sizes[1] != out->k) return bad("_weight_int8pack_mm: expect B.size(1) == A.size(1)");
  out->n = b->sizes[0];
  if (s->ndim != 1 || s->sizes[0] != out->n)
    return bad("_weight_int8pack_mm: expect scales to be 1d tensor with size B.size(0)");
  if (s->dtype != a->dtype) return bad("_weight_int8pack_mm: expected scales of A's dtype");
  out->scales = s, out->out_dtype = a->dtype;
  return TPU_OK;
}

/* A 2-D view as the [1, rows, cols] view the matrix unit takes. */
static tpu_view_t batch_of_one(const tpu_view_t* v) {
  tpu_view_t r = *v;
  r.ndim = 3;
  r.sizes[0] = 1, r.sizes[1] = v->sizes[0], r.sizes[2] = v->sizes[1];
  r.strides[0] = 0, r.strides[1] = v->strides[0], r.strides[2] = v->strides[1];
  return r;
}

/* ---- _int_mm ------------------------------------------------------------------- */

typedef struct int_mm_job {
  const i8_args_t* a;
  const int32_t* b;    /* mat2 widened, contiguous [k, n] */
  const tpu_view_t* c; /* int32 [m, n] */
  atomic_int failed;
} int_mm_job_t;

/* Rows [begin, end) of C: each a row of uint32 sums (wrapping as int32
 * does) over k, then stored. */
static void int_mm_rows(void* arg, int64_t begin, int64_t end) {
  int_mm_job_t* j = (int_mm_job_t*)arg;
  const i8_args_t* a = j->a;
  int64_t n = a->n;
  uint32_t* row = malloc((size_t)n * sizeof(uint32_t));
  int32_t* x = malloc((size_t)(a->k > 0 ? a->k : 1) * sizeof(int32_t));
  if (!row || !x) {
    atomic_store(&j->failed, 1);
    free(row);
    free(x);
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    tpu_convert(x, TPU_DTYPE_I32, 1, view_at(a->a, i * a->a->strides[0]), a->a->dtype,
                a->a->strides[1], a->k);
    memset(row, 0, (size_t)n * sizeof(uint32_t));
    for (int64_t kk = 0; kk < a->k; ++kk) {
      uint32_t xv = (uint32_t)x[kk];
      const int32_t* br = j->b + kk * n;
      if (xv)
        for (int64_t c = 0; c < n; ++c) row[c] += xv * (uint32_t)br[c];
    }
    tpu_convert(view_at(j->c, i * j->c->strides[0]), TPU_DTYPE_I32, j->c->strides[1], row,
                TPU_DTYPE_I32, 1, n);
  }
  free(row);
  free(x);
}

static tpu_status_t int_mm(const i8_args_t* a, const tpu_view_t* c, const tpu_graph_t* graph) {
  if (a->m * a->n == 0) return TPU_OK;
  if (a->k > 0 && tpu_mxu_supports_int8() && !views_overlap(c, a->a) &&
      !views_overlap(c, a->b)) {
    /* with the graph, a mat2 read again unchanged (a weight) is laid out
     * blocked once and kept by the weight cache (mxu_pack.h) */
    mxu_gemm_t g = {.a = batch_of_one(a->a), .b = batch_of_one(a->b), .c = batch_of_one(c),
                    .alpha = 1.0f, .graph = graph};
    bool done = false;
    TPU_RETURN_IF_ERROR(tpu_mxu_gemm(&g, &done));
    if (done) return TPU_OK;
  }
  int32_t* b = malloc((size_t)(a->k * a->n > 0 ? a->k * a->n : 1) * sizeof(int32_t));
  if (!b) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "_int_mm: no scratch for mat2");
  for (int64_t kk = 0; kk < a->k; ++kk)
    tpu_convert(b + kk * a->n, TPU_DTYPE_I32, 1, view_at(a->b, kk * a->b->strides[0]),
                TPU_DTYPE_I8, a->b->strides[1], a->n);
  int_mm_job_t j = {.a = a, .b = b, .c = c};
  atomic_init(&j.failed, 0);
  int64_t work = a->n * (a->k > 0 ? a->k : 1);
  tpu_parallel_for(a->m, work >= (1 << 16) ? 1 : (1 << 16) / work, int_mm_rows, &j);
  free(b);
  if (atomic_load(&j.failed))
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "_int_mm: scratch allocation failed");
  return TPU_OK;
}

/* ---- _weight_int8pack_mm ------------------------------------------------------- */

typedef struct w8_job {
  const i8_args_t* a;
  const float* x;      /* self widened, contiguous [m, k] */
  const float* scales; /* [n] */
  const tpu_view_t* c;
  int64_t cblocks;     /* column blocks per row block */
  atomic_int failed;   /* a unit's scratch allocation failed */
} w8_job_t;

/* Rows of C from float32 sums: scaled per column, rounded once. */
static void w8_store(const w8_job_t* j, int64_t i, int64_t j0, int64_t nb, float* acc) {
  for (int64_t c = 0; c < nb; ++c) acc[c] *= j->scales[j0 + c];
  tpu_convert(view_at(j->c, i * j->c->strides[0] + j0 * j->c->strides[1]), j->c->dtype,
              j->c->strides[1], acc, TPU_DTYPE_F32, 1, nb);
}

static void w8_units(void* arg, int64_t begin, int64_t end) {
  w8_job_t* j = (w8_job_t*)arg;
  const i8_args_t* a = j->a;
  const int8_t* w = (const int8_t*)(const void*)view_at(a->b, 0);
  float acc[I8_COLS];
  float* wf = NULL; /* a widened block of the weight, then its products */
  for (int64_t u = begin; u < end; ++u) {
    int64_t i0 = u / j->cblocks * I8_ROWS, j0 = u % j->cblocks * I8_COLS;
    int64_t rows = a->m - i0 < I8_ROWS ? a->m - i0 : I8_ROWS;
    int64_t nb = a->n - j0 < I8_COLS ? a->n - j0 : I8_COLS;
#ifdef TPU_HAVE_OPENBLAS
    if (rows >= I8_GEMM_ROWS && a->k <= INT32_MAX) {
      if (!wf) wf = malloc((size_t)(I8_COLS * a->k + I8_ROWS * I8_COLS) * sizeof(float));
      if (!wf) {
        atomic_store(&j->failed, 1);
        return;
      }
      float* prod = wf + I8_COLS * a->k;
      tpu_convert(wf, TPU_DTYPE_F32, 1, w + j0 * a->k, TPU_DTYPE_I8, 1, nb * a->k);
      scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)nb, (int)a->k,
                        1.0f, j->x + i0 * a->k, (int)a->k, wf, (int)a->k, 0.0f, prod, (int)nb);
      for (int64_t i = 0; i < rows; ++i) w8_store(j, i0 + i, j0, nb, prod + i * nb);
      continue;
    }
#endif
    for (int64_t i = i0; i < i0 + rows; ++i) {
      tpu_mm_dot_i8(j->x + i * a->k, a->k, w + j0 * a->k, a->k, nb, acc);
      w8_store(j, i, j0, nb, acc);
    }
  }
  free(wf);
}

#ifdef TPU_HAVE_OPENBLAS
/* OpenBLAS runs single-threaded: the pool provides the threads. */
static void blas_init(void) { scipy_openblas_set_num_threads(1); }
#endif

static tpu_status_t weight_int8pack_mm(const i8_args_t* a, const tpu_view_t* c) {
  if (a->m * a->n == 0) return TPU_OK;
  float* x = malloc((size_t)(a->m * a->k + a->n) * sizeof(float));
  if (!x)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "_weight_int8pack_mm: no scratch for A");
  float* scales = x + a->m * a->k;
  for (int64_t i = 0; i < a->m; ++i)
    tpu_convert(x + i * a->k, TPU_DTYPE_F32, 1, view_at(a->a, i * a->a->strides[0]),
                a->a->dtype, 1, a->k);
  tpu_convert(scales, TPU_DTYPE_F32, 1, view_at(a->scales, 0), a->scales->dtype,
              a->scales->strides[0], a->n);
#ifdef TPU_HAVE_OPENBLAS
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, blas_init);
#endif
  w8_job_t j = {.a = a, .x = x, .scales = scales, .c = c,
                .cblocks = (a->n + I8_COLS - 1) / I8_COLS};
  atomic_init(&j.failed, 0);
  int64_t units = (a->m + I8_ROWS - 1) / I8_ROWS * j.cblocks;
  int64_t unit_work = I8_COLS * (a->m < I8_ROWS ? a->m : I8_ROWS) * (a->k > 0 ? a->k : 1);
  tpu_parallel_for(units, unit_work >= (1 << 16) ? 1 : (1 << 16) / unit_work, w8_units, &j);
  free(x);
  if (atomic_load(&j.failed))
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "_weight_int8pack_mm: scratch allocation failed");
  return TPU_OK;
}

/* ---- rows --------------------------------------------------------------------- */

static tpu_status_t i8_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  i8_args_t a = {0};
  TPU_RETURN_IF_ERROR(i8_parse(def, node, &a));
  if (node->num_outputs != 1) return bad("missing output");
  const tpu_view_t* c = &node->outputs[0];
  if (c->ndim != 2 || c->sizes[0] != a.m || c->sizes[1] != a.n || c->dtype != a.out_dtype)
    return bad("out has the wrong shape or dtype");
  if (views_overlap(c, a.a) || views_overlap(c, a.b) ||
      (a.scales && views_overlap(c, a.scales)))
    return bad("out overlaps an input");
  return ((const i8_spec_t*)def->impl)->kind == I8_INT_MM ? int_mm(&a, c, ctx ? ctx->graph : NULL)
                                                          : weight_int8pack_mm(&a, c);
}

static tpu_status_t i8_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                             tpu_view_t* outs) {
  i8_args_t a = {0};
  TPU_RETURN_IF_ERROR(ku_unimplemented(i8_parse(def, node, &a)));
  tpu_view_t* o = &outs[0];
  o->addr = 0, o->dtype = a.out_dtype, o->ndim = 2, o->sizes[0] = a.m, o->sizes[1] = a.n;
  tpu_view_set_contiguous(o);
  return TPU_OK;
}

static tpu_status_t i8_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  i8_args_t a = {0};
  return ku_unimplemented(i8_parse(def, node, &a));
}

static const i8_spec_t k_int_mm = {I8_INT_MM}, k_weight_pack = {I8_WEIGHT_PACK};

static const tpu_op_def_t k_rows[] = {
    {.name = "int_mm", .inputs = "self,mat2", .attrs = "", .outputs = "out",
     .aten = "_int_mm _int_mm.out", .kernel = i8_kernel, .infer = i8_infer, .check = i8_check,
     .impl = &k_int_mm, .flags = TPU_OP_HEAVY},
    {.name = "weight_int8pack_mm", .inputs = "self,mat2,scales", .attrs = "", .outputs = "out",
     .aten = "_weight_int8pack_mm", .kernel = i8_kernel, .infer = i8_infer, .check = i8_check,
     .impl = &k_weight_pack, .flags = TPU_OP_HEAVY},
};

const tpu_op_family_t tpu_family_matmul_int8 = {"matmul_int8", k_rows,
                                                (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
