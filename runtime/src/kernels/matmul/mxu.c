/* mxu.c — the matrix unit on oneDNN's matmul primitive (see mxu.h).
 *
 * Why oneDNN: measured side by side on this project's 2-core machine
 * (AMX-BF16), bfloat16 GEMM in GFLOP/s on 128x768x3072 / 512x768x768 / 2048^3:
 * oneDNN 2.6 brgemm 1,650 / 2,370 / 1,500 (2 OpenMP threads); MKL 2026.2's
 * cblas_gemm_bf16bf16f32 990 / 1,100 / 1,680 (sequential, 2 threads over
 * column halves), about the same with its packed-B API; our earlier path
 * (widen to float32, OpenBLAS sgemm) 207 / 239 / 290. The unit now runs on
 * oneDNN 3.2 (PyPI's onednn-cpu-gomp), level with 2.6 on bfloat16 and
 * float32 and with float16 kernels on AVX512-FP16 that 2.6 lacked (float16
 * 0.63-0.82x PyTorch CPU on 2.6's float32 path, 0.85-1.08x on the unit).
 * On a CPU without AVX512-BF16 its bfloat16 matmul is a slower float32 GEMM
 * than ours, so the unit is on only where the CPU has AVX512-BF16 or AMX
 * (bench/RESULTS.md).
 *
 * Each GEMM builds its descriptors and asks for the primitive: oneDNN's
 * primitive cache (1,024 entries, least recently used evicted) makes the
 * repeat a lookup of about 2 us, and the first call of a shape JITs its
 * kernel (about 0.7 ms). A primitive that is not a brgemm kernel (oneDNN's
 * reference loops, for a layout brgemm does not take) is declined: the
 * caller's path is faster than those.
 */
#include "tpu/config.h"
#include "kernels/matmul/mxu.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"
#include "kernels/matmul/mxu_pack.h"
#include "tpu/runtime.h"
#include "kernels/common/view_walk.h"

/* libgomp's, the OpenMP runtime of Debian's oneDNN build (and of PyTorch):
 * the number of threads the calling thread's next parallel region gets, set
 * and read. Declared here because the fuzzing build's clang ships no omp.h. */
void omp_set_num_threads(int threads);
int omp_get_max_threads(void);

static struct {
  dnnl_engine_t engine;
  bool bf16;     /* bfloat16 GEMMs run on the unit */
  bool f32;      /* float32 GEMMs with a 2-D B do (AVX-512 brgemm) */
  bool f16;      /* float16 GEMMs do (AVX512-FP16: float32 sums) */
  bool int8;     /* int8 GEMMs do (AVX512-VNNI or AMX-INT8) */
  bool tiles;    /* the CPU has AMX-BF16 tiles (oneDNN may still pick AVX512-BF16) */
  char isa[64];  /* the instruction set, or why the unit is off */
  char library[32];
  atomic_ullong gemms, declined, convs, conv_declined, conv_split, conv_gemm;
} g_mxu;

static void mxu_init(void) {
  const dnnl_version_t* v = dnnl_version();
  snprintf(g_mxu.library, sizeof g_mxu.library, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
  if (!tpu_config_bool(TPU_CONFIG_MXU)) {
    snprintf(g_mxu.isa, sizeof g_mxu.isa, "off (TORCH_TPU_MXU=0)");
    return;
  }
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  bool avx512 = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  if ((isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx) {
    snprintf(g_mxu.isa, sizeof g_mxu.isa, "amx_bf16");
    g_mxu.tiles = true;
  }
  else if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
    snprintf(g_mxu.isa, sizeof g_mxu.isa, "avx512_bf16");
  else {
    snprintf(g_mxu.isa, sizeof g_mxu.isa,
             avx512 ? "avx512_f32 (no AVX512-BF16 or AMX)" : "off (no AVX512-BF16 or AMX)");
    if (!avx512) return;
  }
  if (dnnl_engine_create(&g_mxu.engine, dnnl_cpu, 0) != dnnl_success) {
    snprintf(g_mxu.isa, sizeof g_mxu.isa, "off (oneDNN engine failed)");
    return;
  }
  /* float32 on AVX-512: oneDNN's brgemm on a blocked B outruns OpenBLAS
   * (and PyTorch's MKL) there; on AVX2 OpenBLAS is the faster one. */
  g_mxu.f32 = avx512;
  if (strncmp(g_mxu.isa, "avx512_f32", 10) == 0) return;
  g_mxu.bf16 = true;
  /* float16: oneDNN's brgemm on AVX512-FP16 (Sapphire Rapids and later;
   * AMX-FP16 where present) converts to float32 and sums there, rounding
   * once at the store as PyTorch's CPU kernels do */
  g_mxu.f16 = (isa & dnnl_cpu_isa_avx512_core_fp16) == dnnl_cpu_isa_avx512_core_fp16;
  /* Both ISAs above include AVX512-VNNI, whose int8 dot products sum in
   * int32 exactly; oneDNN's AVX2 / plain AVX-512 int8 kernels (vpmaddubsw)
   * saturate int16 partial sums, so the unit takes int8 only here. */
  g_mxu.int8 = true;
}

static void mxu_once(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, mxu_init);
}

void tpu_mxu_get_info(tpu_mxu_info_t* out_info) {
  mxu_once();
  out_info->library = g_mxu.library;
  out_info->isa = g_mxu.isa;
  out_info->bfloat16 = g_mxu.bf16;
  out_info->float32 = g_mxu.f32;
  out_info->int8 = g_mxu.int8;
  out_info->float16 = g_mxu.f16;
  out_info->gemms = atomic_load(&g_mxu.gemms);
  out_info->declined = atomic_load(&g_mxu.declined);
  out_info->convs = atomic_load(&g_mxu.convs);
  out_info->conv_declined = atomic_load(&g_mxu.conv_declined);
  out_info->conv_split = atomic_load(&g_mxu.conv_split);
  out_info->conv_gemm = atomic_load(&g_mxu.conv_gemm);
}

dnnl_engine_t tpu_mxu_engine(void) {
  mxu_once();
  return g_mxu.engine;
}

void tpu_mxu_count_conv(bool ran) { atomic_fetch_add(ran ? &g_mxu.convs : &g_mxu.conv_declined, 1); }

void tpu_mxu_count_conv_split(void) { atomic_fetch_add(&g_mxu.conv_split, 1); }

void tpu_mxu_count_conv_gemm(void) { atomic_fetch_add(&g_mxu.conv_gemm, 1); }

bool tpu_mxu_supports(tpu_dtype_t dtype) {
  mxu_once();
  return (dtype == TPU_DTYPE_BF16 && g_mxu.bf16) || (dtype == TPU_DTYPE_F16 && g_mxu.f16) ||
         (dtype == TPU_DTYPE_F32 && g_mxu.f32);
}

bool tpu_mxu_supports_int8(void) {
  mxu_once();
  return g_mxu.int8;
}

/* A B the kernel reads in its blocked layout: one matrix for the batch. */
static bool b_is_matrix(const tpu_view_t* b) { return b->sizes[0] == 1 || b->strides[0] == 0; }

/* The operand dtypes the unit takes: bfloat16 x bfloat16, float32 x
 * float32 -> float32 with a 2-D B, or int8/uint8 x int8. */
static bool operands_supported(const mxu_gemm_t* g) {
  if (g->a.dtype == TPU_DTYPE_BF16 || g->a.dtype == TPU_DTYPE_F16)
    return g->b.dtype == g->a.dtype && tpu_mxu_supports(g->a.dtype);
  if (g->a.dtype == TPU_DTYPE_F32)
    return g->b.dtype == TPU_DTYPE_F32 && g->c.dtype == TPU_DTYPE_F32 && b_is_matrix(&g->b) &&
           tpu_mxu_supports(TPU_DTYPE_F32);
  return (g->a.dtype == TPU_DTYPE_I8 || g->a.dtype == TPU_DTYPE_U8) &&
         g->b.dtype == TPU_DTYPE_I8 && g->c.dtype == TPU_DTYPE_I32 && tpu_mxu_supports_int8();
}

/* ---- descriptors ------------------------------------------------------------ */

/* oneDNN's data type for a runtime dtype (undef: none the unit takes). */
static dnnl_data_type_t dnnl_type_of(tpu_dtype_t dtype) {
  switch (dtype) {
  case TPU_DTYPE_BF16: return dnnl_bf16;
  case TPU_DTYPE_F16: return dnnl_f16;
  case TPU_DTYPE_F32: return dnnl_f32;
  case TPU_DTYPE_I8: return dnnl_s8;
  case TPU_DTYPE_U8: return dnnl_u8;
  case TPU_DTYPE_I32: return dnnl_s32;
  default: return dnnl_data_type_undef;
  }
}

/* A 3-D view as a new oneDNN memory descriptor of `nd` dims (2: the view's
 * batch is 1 and is dropped), in *out_md (the caller destroys it). A
 * broadcast batch (stride 0) is a batch of 1, which matmul broadcasts;
 * size-1 dims get the strides of a dense layout, since only their extent
 * matters. With `any_layout` the descriptor has the view's dims and type
 * but leaves the layout to the kernel (format tag any). */
static bool md_of(const tpu_view_t* v, int nd, bool any_layout, dnnl_memory_desc_t* out_md) {
  *out_md = NULL;
  dnnl_data_type_t dt = dnnl_type_of(v->dtype);
  if (dt == dnnl_data_type_undef) return false;
  dnnl_dims_t dims, strides;
  for (int d = 0; d < 3; ++d) dims[d] = v->sizes[d], strides[d] = v->strides[d];
  if (strides[0] == 0) dims[0] = 1;
  int64_t dense = 1;
  for (int d = 2; d >= 0; --d) {
    if (dims[d] == 1) strides[d] = dense;
    if (strides[d] < 0) return false;
    dense *= dims[d];
  }
  dnnl_status_t s =
      any_layout
          ? dnnl_memory_desc_create_with_tag(out_md, nd, dims + 3 - nd, dt, dnnl_format_tag_any)
          : dnnl_memory_desc_create_with_strides(out_md, nd, dims + 3 - nd, dt, strides + 3 - nd);
  if (s == dnnl_success) return true;
  *out_md = NULL;
  return false;
}

/* The bias row vector as a new [1, (1,) n] descriptor (the caller
 * destroys it). */
static bool bias_md(const mxu_gemm_t* g, int nd, dnnl_memory_desc_t* out_md) {
  *out_md = NULL;
  tpu_view_t v = g->bias;
  dnnl_data_type_t dt = dnnl_type_of(v.dtype);
  if ((dt != dnnl_bf16 && dt != dnnl_f16 && dt != dnnl_f32) ||
      (v.sizes[0] != 1 && v.strides[0] != 0) || (v.sizes[1] != 1 && v.strides[1] != 0) ||
      g->c.sizes[2] != v.sizes[2])
    return false;
  dnnl_dims_t dims = {1, 1, v.sizes[2]};
  if (dnnl_memory_desc_create_with_tag(out_md, nd, dims + 3 - nd, dt,
                                       nd == 2 ? dnnl_ab : dnnl_abc) == dnnl_success)
    return true;
  *out_md = NULL;
  return false;
}

static void md_destroy(dnnl_memory_desc_t md) {
  if (md) dnnl_memory_desc_destroy(md);
}

/* 2 when every operand is one matrix (the batch folded into A's and C's
 * rows: tpu_mxu_gemm), else 3. brgemm picks a better blocking for a 2-D
 * problem (128x768x3072 float32: 316 against 165 GF/s as 3-D). */
static int gemm_ndims(const mxu_gemm_t* g) {
  return g->a.sizes[0] == 1 && g->b.sizes[0] == 1 && g->c.sizes[0] == 1 ? 2 : 3;
}

/* A [batch, m, k] whose rows continue evenly across batches as one
 * [1, batch*m, k] (dense rows; C alike). */
static bool fold_rows(tpu_view_t* v) {
  if (v->sizes[0] == 1) return true;
  if (v->strides[0] == 0 || (v->sizes[2] > 1 && v->strides[2] != 1)) return false;
  if (v->strides[0] != v->sizes[1] * v->strides[1] && v->sizes[1] > 1) return false;
  if (v->sizes[1] == 1) v->strides[1] = v->strides[0];
  v->sizes[1] *= v->sizes[0];
  v->sizes[0] = 1;
  return true;
}

/* oneDNN's primitive descriptor for `g` (NULL when it has none), for
 * gemm_primitive and tpu_mxu_gemm_on_tiles; the caller destroys it. */
static dnnl_primitive_desc_t gemm_pd(const mxu_gemm_t* g, bool blocked) {
  dnnl_memory_desc_t a = NULL, b = NULL, c = NULL, bias = NULL;
  int nd = gemm_ndims(g);
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_desc_t pd = NULL;
  bool ok = md_of(&g->a, nd, false, &a) && md_of(&g->b, nd, blocked, &b) &&
            md_of(&g->c, nd, false, &c) && (!g->has_bias || bias_md(g, nd, &bias));
  ok = ok && dnnl_primitive_attr_create(&attr) == dnnl_success;
  if (ok && (g->alpha != 1.0f || g->beta != 0.0f)) {
    ok = dnnl_post_ops_create(&ops) == dnnl_success;
    if (ok && g->alpha != 1.0f)
      ok = dnnl_post_ops_append_eltwise(ops, dnnl_eltwise_linear, g->alpha, 0.0f) == dnnl_success;
    if (ok && g->beta != 0.0f)
      ok = dnnl_post_ops_append_sum(ops, g->beta, 0, dnnl_data_type_undef) == dnnl_success;
    ok = ok && dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
  }
  if (ok && dnnl_matmul_primitive_desc_create(&pd, g_mxu.engine, a, b, bias, c, attr) !=
                dnnl_success)
    pd = NULL;
  if (ops) dnnl_post_ops_destroy(ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  md_destroy(a), md_destroy(b), md_destroy(c), md_destroy(bias);
  return pd;
}

/* The primitive of `g`, or NULL when oneDNN has no brgemm kernel for it;
 * *out_status is set on an engine failure. With `blocked`, B is left to the
 * kernel's choice of layout, returned in *out_b (a new descriptor the caller
 * destroys; NULL with no primitive). alpha is an eltwise linear post-op and
 * beta a sum post-op after it: C = beta*C + alpha*(A@B). */
static dnnl_primitive_t gemm_primitive(const mxu_gemm_t* g, bool blocked, dnnl_memory_desc_t* out_b,
                                       tpu_status_t* out_status) {
  *out_status = TPU_OK;
  if (blocked) *out_b = NULL;
  dnnl_primitive_t prim = NULL;
  dnnl_primitive_desc_t pd = gemm_pd(g, blocked);
  if (pd) {
    const char* impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl && strncmp(impl, "brg", 3) == 0) {
      dnnl_status_t s = dnnl_primitive_create(&prim, pd);
      if (s == dnnl_success && blocked &&
          dnnl_memory_desc_clone(out_b, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md,
                                                                     0)) != dnnl_success) {
        *out_b = NULL;
        s = dnnl_out_of_memory;
      }
      if (s != dnnl_success) {
        if (prim) dnnl_primitive_destroy(prim);
        prim = NULL;
        *out_status = tpu_status_make(
            s == dnnl_out_of_memory ? TPU_CODE_OUT_OF_MEMORY : TPU_CODE_INTERNAL,
            "the matrix unit could not build its kernel (oneDNN status %d)", (int)s);
      }
    }
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  return prim;
}

bool tpu_mxu_has_tiles(void) {
  mxu_once();
  return g_mxu.bf16 && g_mxu.tiles;
}

bool tpu_mxu_gemm_on_tiles(const mxu_gemm_t* g) {
  mxu_once();
  if (!g_mxu.bf16 || !g_mxu.tiles || g->a.dtype != TPU_DTYPE_BF16) return true;
  int prev = omp_get_max_threads();
  /* oneDNN blocks for the team it sees: one thread, but for a GEMM on a team */
  int team = g->team && !g->serial ? tpu_parallel_threads() : 1;
  omp_set_num_threads(team > 0 ? team : 1);
  dnnl_primitive_desc_t pd = gemm_pd(g, false);
  omp_set_num_threads(prev);
  const char* impl = NULL;
  bool tiles = pd && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
                         dnnl_success && impl && strstr(impl, "amx") != NULL;
  if (pd) dnnl_primitive_desc_destroy(pd);
  return tiles;
}

/* ---- execution --------------------------------------------------------------- */

/* How a GEMM (or one part of it) reads B, decided once per GEMM. */
typedef struct b_plan {
  bool cacheable;       /* the weight cache may keep B's blocked form */
  bool blocked;         /* B is read in the kernel's blocked layout */
  mxu_packed_t* packed; /* the whole B laid out once for every part (borrowed), or NULL */
  int64_t col0;         /* this part's B: the whole B's columns from col0 on */
} b_plan_t;

typedef struct mxu_run {
  dnnl_primitive_t prim; /* built for a team of `team` threads */
  int team;
  const mxu_gemm_t* g;
  const b_plan_t* plan;
  dnnl_memory_desc_t blocked; /* B's layout for the kernel (owned), or NULL: B as it is */
  dnnl_status_t status;
  tpu_status_t pack_status; /* laying out B failed */
} mxu_run_t;

static void* view_base(const tpu_view_t* v) { return (void*)(uintptr_t)v->addr; }

/* A blocked layout's description, borrowed from its descriptor. */
typedef struct blocked_md {
  dnnl_data_type_t dt;
  int nd, nb; /* dims, inner blocks */
  const dnnl_dims_t *dims, *padded, *strides, *blks, *idxs;
} blocked_md_t;

/* `md`'s layout into *out; false unless it is a blocked one. */
static bool blocked_md(const_dnnl_memory_desc_t md, blocked_md_t* out) {
  dnnl_format_kind_t kind = dnnl_format_kind_undef;
  return dnnl_memory_desc_query(md, dnnl_query_format_kind, &kind) == dnnl_success &&
         kind == dnnl_blocked &&
         dnnl_memory_desc_query(md, dnnl_query_data_type, &out->dt) == dnnl_success &&
         dnnl_memory_desc_query(md, dnnl_query_ndims_s32, &out->nd) == dnnl_success &&
         dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &out->nb) == dnnl_success &&
         dnnl_memory_desc_query(md, dnnl_query_dims, &out->dims) == dnnl_success &&
         dnnl_memory_desc_query(md, dnnl_query_padded_dims, &out->padded) == dnnl_success &&
         dnnl_memory_desc_query(md, dnnl_query_strides, &out->strides) == dnnl_success &&
         dnnl_memory_desc_query(md, dnnl_query_inner_blks, &out->blks) == dnnl_success &&
         dnnl_memory_desc_query(md, dnnl_query_inner_idxs, &out->idxs) == dnnl_success;
}

/* A float layout (an int8 one's compensation follows its own data). */
static bool float_layout(const blocked_md_t* l) {
  return l->dt == dnnl_bf16 || l->dt == dnnl_f16 || l->dt == dnnl_f32;
}

/* The columns' block: the product of the inner blocks of the last dim. */
static int64_t column_block_of(const blocked_md_t* l) {
  int64_t block = 1;
  for (int i = 0; i < l->nb; ++i)
    if ((*l->idxs)[i] == l->nd - 1) block *= (*l->blks)[i];
  return block;
}

/* The byte offset in blocked layout `whole` of column col0 of a matrix
 * whose columns [col0, col0 + n) are laid out as `part` would lay them out
 * on its own (same blocks and strides, col0 on a block boundary); false when
 * they are not (another blocking, or an int8 layout). */
static bool column_offset(const_dnnl_memory_desc_t whole, const_dnnl_memory_desc_t part,
                          int64_t col0, int64_t* out_bytes) {
  blocked_md_t w, p;
  if (!blocked_md(whole, &w) || !blocked_md(part, &p) || !float_layout(&w) || w.nb != p.nb)
    return false;
  for (int i = 0; i < w.nb; ++i)
    if ((*w.blks)[i] != (*p.blks)[i] || (*w.idxs)[i] != (*p.idxs)[i]) return false;
  for (int d = 0; d < w.nd; ++d)
    if ((*w.strides)[d] != (*p.strides)[d] || (d < w.nd - 1 && (*w.padded)[d] != (*p.padded)[d]))
      return false;
  int64_t block = column_block_of(&w);
  if (col0 % block != 0 || col0 + (*p.padded)[w.nd - 1] > (*w.padded)[w.nd - 1]) return false;
  *out_bytes = col0 / block * (*w.strides)[w.nd - 1] * (int64_t)dnnl_data_type_size(w.dt);
  return true;
}

/* B in `r`'s blocked layout, at *out_data: the plan's shared copy of the
 * whole B when it has that layout at this part's columns, else from the
 * cache or laid out now. *out_packed holds the reference to release. */
static tpu_status_t packed_b(const mxu_run_t* r, const_dnnl_memory_desc_t plain,
                             dnnl_stream_t stream, mxu_packed_t** out_packed, void** out_data) {
  mxu_packed_t* shared = r->plan->packed;
  int64_t off = 0;
  if (shared && ((r->plan->col0 == 0 && dnnl_memory_desc_equal(shared->md, r->blocked)) ||
                 column_offset(shared->md, r->blocked, r->plan->col0, &off))) {
    *out_packed = mxu_packed_retain(shared);
    *out_data = (char*)shared->data + off;
    return TPU_OK;
  }
  tpu_status_t st = mxu_pack_get(&r->g->b, plain, r->blocked, r->plan->cacheable, g_mxu.engine,
                                 stream, out_packed);
  if (st == TPU_OK) *out_data = (*out_packed)->data;
  return st;
}

static void run_on(void* arg, int threads) {
  mxu_run_t* r = (mxu_run_t*)arg;
  const mxu_gemm_t* g = r->g;
  dnnl_memory_t mem[3] = {NULL, NULL, NULL};
  dnnl_stream_t stream = NULL;
  const tpu_view_t* views[3] = {&g->a, &g->b, &g->c};
  dnnl_memory_t bias_mem = NULL;
  mxu_packed_t* packed = NULL;
  omp_set_num_threads(threads);
  if (threads != r->team) {
    /* the pool was busy: a primitive built for the whole pool would fork
     * a team of that size anyway (oneDNN fixes the count when it builds
     * one), so it is rebuilt for this team (a lookup when the primitive
     * cache has it) */
    tpu_status_t st;
    dnnl_memory_desc_t layout = NULL;
    dnnl_primitive_t p = gemm_primitive(g, r->blocked != NULL, &layout, &st);
    tpu_status_free(st);
    if (p) {
      dnnl_primitive_destroy(r->prim);
      r->prim = p, r->team = threads;
      if (r->blocked) md_destroy(r->blocked), r->blocked = layout;
    }
  }
  r->status = dnnl_stream_create(&stream, g_mxu.engine, dnnl_stream_default_flags);
  for (int i = 0; i < 3 && r->status == dnnl_success; ++i) {
    dnnl_memory_desc_t md = NULL;
    if (!md_of(views[i], gemm_ndims(g), false, &md)) {
      r->status = dnnl_out_of_memory;
      break;
    }
    if (i == 1 && r->blocked) {
      void* data = NULL;
      r->pack_status = packed_b(r, md, stream, &packed, &data);
      if (r->pack_status == TPU_OK)
        r->status = dnnl_memory_create(&mem[i], r->blocked, g_mxu.engine, data);
    } else {
      r->status = dnnl_memory_create(&mem[i], md, g_mxu.engine, view_base(views[i]));
    }
    md_destroy(md);
    if (r->pack_status != TPU_OK) break;
  }
  if (r->status == dnnl_success && r->pack_status == TPU_OK && g->has_bias) {
    dnnl_memory_desc_t md = NULL;
    r->status = bias_md(g, gemm_ndims(g), &md)
                    ? dnnl_memory_create(&bias_mem, md, g_mxu.engine, view_base(&g->bias))
                    : dnnl_out_of_memory;
    md_destroy(md);
  }
  if (r->status == dnnl_success && r->pack_status == TPU_OK) {
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]},
                               {DNNL_ARG_WEIGHTS, mem[1]},
                               {DNNL_ARG_DST, mem[2]},
                               {DNNL_ARG_BIAS, bias_mem}};
    r->status = dnnl_primitive_execute(r->prim, stream, g->has_bias ? 4 : 3, args);
    if (r->status == dnnl_success) r->status = dnnl_stream_wait(stream);
  }
  for (int i = 0; i < 3; ++i)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  if (bias_mem) dnnl_memory_destroy(bias_mem);
  mxu_packed_release(packed);
  if (stream) dnnl_stream_destroy(stream);
}

/* ---- layouts ---------------------------------------------------------------- */

/* brgemm reads a matrix whose rows or columns are dense; any other view is
 * copied to a dense scratch first (a bfloat16 copy, far cheaper than the
 * float32 path). */
static bool dense_rows_or_cols(const tpu_view_t* v) {
  return v->sizes[2] == 1 || v->strides[2] == 1 || v->sizes[1] == 1 || v->strides[1] == 1;
}

static tpu_view_t transposed(const tpu_view_t* v) {
  tpu_view_t t = *v;
  t.sizes[1] = v->sizes[2], t.sizes[2] = v->sizes[1];
  t.strides[1] = v->strides[2], t.strides[2] = v->strides[1];
  return t;
}

/* dst, a dense row-major [rows, cols] of `esize`-byte elements, from src
 * whose rows are its columns (element (r, c) at src[r + c * ld]): a
 * transposed operand made dense, as a weight gradient's dY^T is. In 32x32
 * tiles so that each side moves whole cache lines: the element-by-element
 * gather this replaces read one element per cache line of a column. */
#define TRANSPOSE_TILE 32
#define DEFINE_TRANSPOSE(name, T)                                                       \
  static void name(T* dst, const T* src, int64_t rows, int64_t cols, int64_t ld) {      \
    for (int64_t r0 = 0; r0 < rows; r0 += TRANSPOSE_TILE)                               \
      for (int64_t c0 = 0; c0 < cols; c0 += TRANSPOSE_TILE) {                           \
        int64_t r1 = r0 + TRANSPOSE_TILE < rows ? r0 + TRANSPOSE_TILE : rows;           \
        int64_t c1 = c0 + TRANSPOSE_TILE < cols ? c0 + TRANSPOSE_TILE : cols;           \
        for (int64_t r = r0; r < r1; ++r)                                               \
          for (int64_t c = c0; c < c1; ++c) dst[r * cols + c] = src[r + c * ld];        \
      }                                                                                 \
  }
DEFINE_TRANSPOSE(transpose_tiles_32, uint32_t)
DEFINE_TRANSPOSE(transpose_tiles_16, uint16_t)

static void transpose_tiles(void* dst, const void* src, int64_t rows, int64_t cols, int64_t ld,
                            size_t esize) {
  if (esize == 4) transpose_tiles_32(dst, src, rows, cols, ld);
  else transpose_tiles_16(dst, src, rows, cols, ld);
}

/* A dense copy of `v` in `*out_scratch` (owned by the caller), its values
 * copied in when `fill`: by transpose_tiles where each matrix of `v` is a
 * transposed dense one, else element by element. */
static tpu_status_t dense_copy(tpu_view_t src, bool fill, void** out_scratch,
                               tpu_view_t* out_view) {
  const tpu_view_t* v = &src; /* out_view may be the source */
  size_t bytes = (size_t)tpu_view_numel(v) * tpu_dtype_size(v->dtype);
  *out_scratch = malloc(bytes ? bytes : 1);
  if (!*out_scratch)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no %zu bytes of scratch", bytes);
  *out_view = view_of(*out_scratch, v->dtype, 3, v->sizes);
  size_t esize = tpu_dtype_size(v->dtype);
  int64_t rows = v->sizes[1], cols = v->sizes[2], matrix = rows * cols;
  if (fill && v->strides[1] == 1 && v->strides[2] >= rows && (esize == 2 || esize == 4)) {
    for (int64_t i = 0; i < v->sizes[0]; ++i)
      transpose_tiles((char*)*out_scratch + i * matrix * (int64_t)esize,
                      (const char*)view_base(v) + i * v->strides[0] * (int64_t)esize, rows, cols,
                      v->strides[2], esize);
  } else if (fill) {
    view_copy(out_view, v);
  }
  return TPU_OK;
}

/* How `g` reads B (`cacheable`: b_cacheable's answer): float32 blocked unless B is transposed
 * (a Linear's weight, W.t()) and new; bfloat16 and int8 once B was seen
 * before (mxu_pack.h). An int8 B laid out blocked carries the s8 x s8
 * compensation, so the kernel neither copies nor sums it per call: 128x768
 * @ 768x3072 0.71 against 0.86 ms on 2 threads (issue 21's notes in
 * bench/RESULTS.md); int8 sums are exact in either layout. Lists B as seen:
 * called once per GEMM, whatever its parts. */
static b_plan_t plan_b(const mxu_gemm_t* g, bool cacheable) {
  b_plan_t p = {cacheable, false, NULL, 0};
  bool b_rows = g->b.sizes[2] == 1 || g->b.strides[2] == 1;
  p.blocked = b_is_matrix(&g->b) && ((g->a.dtype == TPU_DTYPE_F32 && b_rows) ||
                                     (cacheable && mxu_pack_seen(&g->b)));
  return p;
}

/* Whether the weight cache may keep `g`'s B: one matrix for the batch, the
 * caller's own view (`b_own`: not a scratch copy), in a graph that does not
 * write it. Walks the graph's writes: asked once per GEMM. */
static bool b_cacheable(const mxu_gemm_t* g, bool b_own) {
  return b_is_matrix(&g->b) && b_own && g->graph &&
         !tpu_weight_cache_graph_writes(g->graph, &g->b);
}

/* Runs `g` on a team of `team` threads (1: on the calling thread), B read
 * as `plan` says; *out_done stays false when oneDNN has no brgemm kernel for
 * it (declined). Sets the calling thread's OpenMP team size (run_gemm
 * restores it). */
static tpu_status_t run_part(const mxu_gemm_t* g, const b_plan_t* plan, int team,
                             bool* out_done) {
  tpu_status_t st;
  dnnl_memory_desc_t bmd = NULL;
  /* built for the team it will run on: oneDNN takes a primitive's thread
   * count from the calling thread's OpenMP setting when it builds it, and
   * an earlier serial run on this thread leaves that at 1, which made the
   * next GEMMs here run on one thread (test_matmul_int8.c); run_on rebuilds
   * it if the pool is busy */
  omp_set_num_threads(team);
  dnnl_primitive_t prim = gemm_primitive(g, plan->blocked, &bmd, &st);
  if (!prim) return st; /* declined, or an engine failure */
  mxu_run_t run = {prim, team, g, plan, plan->blocked ? bmd : NULL, dnnl_success, TPU_OK};
  if (team == 1)
    run_on(&run, 1);
  else
    tpu_parallel_exclusive(run_on, &run);
  dnnl_primitive_destroy(run.prim);
  md_destroy(run.blocked);
  if (run.pack_status != TPU_OK) return run.pack_status;
  if (run.status != dnnl_success)
    return tpu_status_make(
        run.status == dnnl_out_of_memory ? TPU_CODE_OUT_OF_MEMORY : TPU_CODE_INTERNAL,
        "the matrix unit failed (oneDNN status %d)", (int)run.status);
  *out_done = true;
  return TPU_OK;
}

/* ---- splitting over the compute pool ------------------------------------------ */

/* A GEMM runs as parts, one single-threaded oneDNN GEMM each, over the
 * compute pool, not on an OpenMP team: a team started from a stream's
 * worker is a second libgomp team in the process, and libgomp, counting
 * more threads than cores, then throttles every team's spinning, so
 * PyTorch's own CPU kernels in the same process wake their worker on every
 * parallel region (measured after one GEMM on a team: sum(0) of 512x512
 * 8.6 -> 17.4 us, layer_norm of 512x128 17 -> 69 us, the train_gpt step
 * 11.2 -> 24.6 ms).
 *
 * The parts (run_split): the batch when it has a part for every thread;
 * else rows, 32 or more a part (a transposed A's copied dense per part);
 * else, or where that moves fewer elements for a B the cache keeps
 * (cols_cheaper: a GPT-2 LM head at 128 rows), 64-column blocks of B. A
 * transposed B read plain (plan_b: a Linear's new W.t()) is read by each
 * row part, copied block by block in each: measured on a Llama training
 * step's and GPT-2 batch 8's GEMMs, that beat column parts, which need a
 * scratch C, on every shape but one (8000x512x512, a weight gradient), and
 * beat laying it out blocked once over the pool (the Llama 15.7M step's
 * forward GEMMs, one process alternating: 0.16-6.7 ms a call against
 * 0.19-7.8). A B read blocked is laid out once per GEMM for all parts
 * (prime_b: one sighting, at most one packing, the layout itself split
 * over the pool), a column part reading its block range of it
 * (column_offset); brgemm takes no plain B or C whose row stride exceeds
 * its width, so a column part lays out a new row-major B's slice and
 * writes a dense scratch C when its slice of C is not dense. */
enum { SPLIT_BATCH, SPLIT_ROWS, SPLIT_COLS };
#define SPLIT_COL_BLOCK 64
#define SPLIT_MIN_ROWS 32

typedef struct gemm_split {
  const mxu_gemm_t* g;
  b_plan_t plan; /* how the parts read B (its shared blocked copy, if any) */
  int how;
  int64_t total, parts;
  tpu_status_t* st; /* [parts] */
  bool* done;       /* [parts] */
} gemm_split_t;

static tpu_view_t slice(tpu_view_t v, int dim, int64_t i0, int64_t i1) {
  v.addr += (uint64_t)(i0 * v.strides[dim] * (int64_t)tpu_dtype_size(v.dtype));
  v.sizes[dim] = i1 - i0;
  return v;
}

/* Part i of a column split: B's columns [i0, i1), read from the whole B
 * laid out once (prime_b) where the part's kernel blocks them alike, else
 * laid out for the part; into a dense scratch C unless C's slice is dense
 * (brgemm takes no C whose row stride exceeds its width either). */
static tpu_status_t run_cols(const gemm_split_t* j, mxu_gemm_t p, int64_t i0, int64_t i1,
                             bool* out_done) {
  /* a column slice of a transposed B (a Linear's W.t()) is itself a dense
   * transposed matrix, read plain like a whole one (plan_b); a row-major
   * B's is not, and is laid out for this part: for this call only, unless
   * the whole B is kept and this part's kernel blocks it differently from
   * the whole's layout (then the slice is cached too). */
  bool plain = p.b.sizes[1] == 1 || p.b.strides[1] == 1;
  p.b = slice(p.b, 2, i0, i1);
  tpu_view_t c = slice(p.c, 2, i0, i1);
  if (p.has_bias) p.bias = slice(p.bias, 2, i0, i1);
  b_plan_t plan = {j->plan.packed && j->plan.cacheable, j->plan.packed || !plain,
                   j->plan.packed, i0};
  void* scratch = NULL;
  p.c = c;
  tpu_status_t st = TPU_OK;
  if (c.sizes[1] > 1 && c.strides[1] != c.sizes[2])
    st = dense_copy(c, p.beta != 0.0f, &scratch, &p.c);
  if (st == TPU_OK) st = run_part(&p, &plan, 1, out_done);
  if (st == TPU_OK && *out_done && scratch) view_copy(&c, &p.c);
  free(scratch);
  return st;
}

/* A row part: A's rows as they lie when dense, else copied dense first (a
 * transposed A, as in a weight gradient dY^T @ X: brgemm takes no plain A
 * whose column stride exceeds its height). */
static tpu_status_t run_rows(const gemm_split_t* j, mxu_gemm_t p, bool* out_done) {
  void* scratch = NULL;
  tpu_status_t st = TPU_OK;
  if (p.a.sizes[2] > 1 && p.a.strides[2] != 1) st = dense_copy(p.a, true, &scratch, &p.a);
  if (st == TPU_OK) st = run_part(&p, &j->plan, 1, out_done);
  free(scratch);
  return st;
}

/* Part i's range [*out_i0, *out_i1) of the dimension j splits, and the
 * serial GEMM over it with A, C (and a per-batch B) sliced; a column part's
 * B, C and bias are sliced by run_cols. */
static mxu_gemm_t part_of(const gemm_split_t* j, int64_t i, int64_t* out_i0, int64_t* out_i1) {
  mxu_gemm_t p = *j->g;
  p.serial = true;
  int64_t i0, i1;
  if (j->how == SPLIT_ROWS) {
    mxu_row_part(j->total, j->parts, i, &i0, &i1);
    p.a = slice(p.a, 1, i0, i1), p.c = slice(p.c, 1, i0, i1);
  } else if (j->how == SPLIT_COLS) {
    int64_t blocks = j->total / SPLIT_COL_BLOCK;
    i0 = blocks * i / j->parts * SPLIT_COL_BLOCK;
    i1 = i + 1 == j->parts ? j->total : blocks * (i + 1) / j->parts * SPLIT_COL_BLOCK;
  } else {
    i0 = j->total * i / j->parts, i1 = j->total * (i + 1) / j->parts;
    p.a = slice(p.a, 0, i0, i1), p.c = slice(p.c, 0, i0, i1);
    if (!b_is_matrix(&p.b)) p.b = slice(p.b, 0, i0, i1);
  }
  *out_i0 = i0, *out_i1 = i1;
  return p;
}

static void split_part(void* arg, int64_t begin, int64_t end) {
  gemm_split_t* j = (gemm_split_t*)arg;
  for (int64_t i = begin; i < end; ++i) {
    int64_t i0, i1;
    mxu_gemm_t p = part_of(j, i, &i0, &i1);
    if (j->how == SPLIT_ROWS) j->st[i] = run_rows(j, p, &j->done[i]);
    else if (j->how == SPLIT_COLS) j->st[i] = run_cols(j, p, i0, i1, &j->done[i]);
    else j->st[i] = run_part(&p, &j->plan, 1, &j->done[i]);
  }
}

/* ---- laying out B over the pool ----------------------------------------------- */

/* A B laid out for the parts is itself split over the pool: part i lays
 * out B's columns in its range of whole column blocks, a reorder into its
 * submemory of the blocked layout, so neither thread waits while the other
 * lays out all of B. In a training step every weight changes each step and
 * so is laid out afresh for each of its GEMMs: laid out on one thread, the
 * Llama 15.7M step's (b2 seq128) float32 GEMMs spent ~10 ms of ~100 a step
 * doing it while the second core idled. Split only where the layout has no
 * padding (a submemory reorder leaves padding unwritten) and is a float
 * layout (an int8 layout's compensation follows its own data). */
#define LAYOUT_SPLIT_MIN 32768 /* elements of B; below, one reorder */
#define LAYOUT_SPLIT_PARTS 64

typedef struct layout_split {
  const tpu_view_t* b;
  const_dnnl_memory_desc_t want;
  void* data;
  int nd;
  int64_t block, blocks, parts;
  tpu_status_t* st; /* [parts] */
} layout_split_t;

/* The column block of blocked layout `md` (column_block_of), or 0 where
 * it is not split: padded, or not a float layout. */
static int64_t column_block(const_dnnl_memory_desc_t md) {
  blocked_md_t l;
  if (!blocked_md(md, &l) || !float_layout(&l)) return 0;
  for (int d = 0; d < l.nd; ++d)
    if ((*l.dims)[d] != (*l.padded)[d]) return 0;
  return column_block_of(&l);
}

/* One reorder on a stream of its own (a pool thread's, or the caller's). */
static tpu_status_t reorder_now(const_dnnl_memory_desc_t from_md, void* from,
                                const_dnnl_memory_desc_t to_md, void* to) {
  dnnl_stream_t stream = NULL;
  if (dnnl_stream_create(&stream, g_mxu.engine, dnnl_stream_default_flags) != dnnl_success)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory to lay out B");
  tpu_status_t st = mxu_pack_reorder(from_md, from, to_md, to, g_mxu.engine, stream);
  dnnl_stream_destroy(stream);
  return st;
}

static void layout_part(void* arg, int64_t begin, int64_t end) {
  layout_split_t* j = (layout_split_t*)arg;
  int64_t n = j->b->sizes[2], k = j->b->sizes[1];
  omp_set_num_threads(1); /* one reorder per pool thread */
  for (int64_t i = begin; i < end; ++i) {
    int64_t c0 = j->blocks * i / j->parts * j->block;
    int64_t c1 = i + 1 == j->parts ? n : j->blocks * (i + 1) / j->parts * j->block;
    tpu_view_t cols = slice(*j->b, 2, c0, c1);
    dnnl_dims_t dims = {1, k, c1 - c0}, offsets = {0, 0, c0};
    dnnl_memory_desc_t plain = NULL, sub = NULL;
    if (!md_of(&cols, j->nd, false, &plain) ||
        dnnl_memory_desc_create_submemory(&sub, j->want, dims + 3 - j->nd,
                                          offsets + 3 - j->nd) != dnnl_success)
      j->st[i] = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory to lay out B");
    else
      j->st[i] = reorder_now(plain, view_base(&cols), sub, j->data);
    md_destroy(sub), md_destroy(plain);
  }
}

/* mxu_layout_fn: B laid out by column ranges over the pool (ctx: the
 * whole B's plain descriptor), or by one reorder where it is not split. */
static tpu_status_t layout_b_split(void* ctx, const tpu_view_t* b, const_dnnl_memory_desc_t want,
                                   void* data) {
  const_dnnl_memory_desc_t plain = (const_dnnl_memory_desc_t)ctx;
  int nd = 0;
  dnnl_memory_desc_query(want, dnnl_query_ndims_s32, &nd);
  int64_t block = column_block(want);
  int64_t blocks = block > 0 ? b->sizes[2] / block : 0;
  int64_t parts = tpu_parallel_threads();
  if (parts > blocks) parts = blocks;
  if (parts < 2 || b->sizes[1] * b->sizes[2] < LAYOUT_SPLIT_MIN || (nd != 2 && nd != 3))
    return reorder_now(plain, view_base(b), want, data);
  tpu_status_t st[LAYOUT_SPLIT_PARTS];
  if (parts > LAYOUT_SPLIT_PARTS) parts = LAYOUT_SPLIT_PARTS;
  layout_split_t j = {b, want, data, nd, block, blocks, parts, st};
  tpu_parallel_for(parts, 1, layout_part, &j);
  tpu_status_t first = TPU_OK;
  for (int64_t i = 0; i < parts; ++i) {
    if (first == TPU_OK) first = st[i];
    else tpu_status_free(st[i]);
  }
  return first;
}

/* Lays out the whole B once for the parts (plan->blocked), split over the
 * pool (layout_b_split), in the layout `part0`'s kernel asks for: from the
 * weight cache when it has it, with one sighting and at most one packing
 * per GEMM. A part whose kernel asks for another layout lays out its own
 * (packed_b). plan->packed is a new reference (run_split releases it). */
static tpu_status_t prime_b(const mxu_gemm_t* part0, b_plan_t* plan) {
  tpu_status_t st = TPU_OK;
  dnnl_memory_desc_t want = NULL, plain = NULL;
  omp_set_num_threads(1);
  dnnl_primitive_t prim = gemm_primitive(part0, true, &want, &st);
  if (!prim) return st; /* declined: each part declines too */
  if (!md_of(&part0->b, gemm_ndims(part0), false, &plain))
    st = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory to lay out B");
  if (st == TPU_OK)
    st = mxu_pack_get_with(&part0->b, want, plan->cacheable, layout_b_split, plain,
                           &plan->packed);
  md_destroy(plain), md_destroy(want);
  dnnl_primitive_destroy(prim);
  return st;
}

/* Whether column parts move fewer elements than row parts for a B kept
 * blocked: each row part reads all of B; each column part only its
 * columns of B but all of A, and with more than one row a scratch C
 * (allocated, written, copied back: weighed 5). */
static bool cols_cheaper(int64_t m, int64_t k, int64_t n, int64_t parts) {
  double rows = (double)parts * k * n + (double)m * k + (double)m * n;
  double cols = (double)k * n + (double)parts * m * k + (m > 1 ? 5.0 : 1.0) * m * n;
  return cols < rows;
}

static tpu_status_t run_split(const mxu_gemm_t* g, bool b_own, int threads, bool* out_done) {
  int64_t batch = g->c.sizes[0], m = g->c.sizes[1], k = g->a.sizes[2], n = g->c.sizes[2];
  gemm_split_t j = {g, {false, false, NULL, 0}, SPLIT_BATCH, 0, 0, NULL, NULL};
  bool cacheable = b_cacheable(g, b_own);
  bool rows_ok = m >= SPLIT_MIN_ROWS * threads;
  bool cols_ok = b_is_matrix(&g->b) && n >= SPLIT_COL_BLOCK * threads;
  /* seen before: its blocked form is cached, or will be by this GEMM */
  bool kept = cols_ok && cacheable && mxu_pack_peek(&g->b);
  if (batch >= threads) j.how = SPLIT_BATCH, j.total = batch, j.parts = batch;
  else if (cols_ok && (!rows_ok || (kept && cols_cheaper(m, k, n, threads))))
    j.how = SPLIT_COLS, j.total = n, j.parts = n / SPLIT_COL_BLOCK;
  else if (rows_ok) j.how = SPLIT_ROWS, j.total = m, j.parts = m / SPLIT_MIN_ROWS;
  else j.parts = 1;
  if (j.parts > threads) j.parts = threads;
  if (j.parts < 2) {
    j.plan = plan_b(g, cacheable);
    return run_part(g, &j.plan, 1, out_done);
  }
  tpu_status_t st = TPU_OK;
  if (j.how == SPLIT_COLS) {
    /* the whole B from the cache (prime_b) when it is kept, else each part
     * reads its slice as run_cols says, and B is listed as seen */
    j.plan.cacheable = cacheable, j.plan.blocked = true;
    if (kept) st = prime_b(g, &j.plan);
    else if (cacheable) mxu_pack_seen(&g->b);
  } else {
    j.plan = plan_b(g, cacheable);
    if (j.plan.blocked) { /* in the layout of part 0's kernel */
      int64_t i0, i1;
      mxu_gemm_t p0 = part_of(&j, 0, &i0, &i1);
      /* as run_rows will run it: a transposed A made dense (a slice of one
       * is no operand brgemm takes, and the parts would each lay out B) */
      if (j.how == SPLIT_ROWS && p0.a.sizes[2] > 1 && p0.a.strides[2] != 1)
        tpu_view_set_contiguous(&p0.a);
      st = prime_b(&p0, &j.plan);
    }
  }
  j.st = calloc((size_t)j.parts, sizeof *j.st);
  j.done = calloc((size_t)j.parts, sizeof *j.done);
  if (st == TPU_OK && (!j.st || !j.done))
    st = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a split");
  if (st == TPU_OK) {
    tpu_parallel_for(j.parts, 1, split_part, &j);
    bool all = true, any = false;
    for (int64_t i = 0; i < j.parts; ++i) {
      if (st == TPU_OK) st = j.st[i];
      else tpu_status_free(j.st[i]);
      all = all && j.done[i], any = any || j.done[i];
    }
    /* parts the unit declined leave the caller its own path for the whole
     * product, which reads C again when beta != 0: refuse that rather than
     * add the done parts twice */
    if (st == TPU_OK && any && !all && g->beta != 0.0f)
      st = tpu_status_make(TPU_CODE_INTERNAL, "matrix unit: part of a split GEMM was declined");
    *out_done = st == TPU_OK && all;
  }
  mxu_packed_release(j.plan.packed);
  free(j.st), free(j.done);
  return st;
}

/* Runs `g` split over the pool (above), or on an OpenMP team with the pool
 * claimed when the caller asks for one (mxu_gemm_t.team), or on the calling
 * thread (serial, a one-thread pool); leaves the calling thread's OpenMP
 * setting as it was: a small command may run on the submitting thread,
 * PyTorch's own, whose CPU kernels size their teams from that setting. */
static tpu_status_t run_gemm(const mxu_gemm_t* g, bool b_own, bool* out_done) {
  int prev = omp_get_max_threads();
  int threads = tpu_parallel_threads();
  if (threads < 1) threads = 1;
  tpu_status_t st;
  if (g->serial || threads == 1 || g->team) {
    b_plan_t plan = plan_b(g, b_cacheable(g, b_own));
    st = run_part(g, &plan, g->serial ? 1 : threads, out_done);
  } else {
    st = run_split(g, b_own, threads, out_done);
  }
  if (st == TPU_OK) atomic_fetch_add(*out_done ? &g_mxu.gemms : &g_mxu.declined, 1);
  omp_set_num_threads(prev);
  return st;
}

tpu_status_t tpu_mxu_gemm(const mxu_gemm_t* g, bool* out_done) {
  *out_done = false;
  if (!operands_supported(g) || g->a.ndim != 3 || g->b.ndim != 3 || g->c.ndim != 3) {
    atomic_fetch_add(&g_mxu.declined, 1);
    return TPU_OK;
  }
  if (g->has_bias && (g->alpha != 1.0f || (g->c.sizes[2] > 1 && g->c.strides[2] != 1) ||
                     (g->bias.sizes[2] > 1 && g->bias.strides[2] != 1))) {
    atomic_fetch_add(&g_mxu.declined, 1);
    return TPU_OK;
  }
  mxu_gemm_t n = *g;
  /* A column-major C is computed as C^T = B^T A^T, whose C^T is row-major. */
  if (n.c.sizes[2] > 1 && n.c.strides[2] != 1 && (n.c.sizes[1] == 1 || n.c.strides[1] == 1)) {
    n.a = transposed(&g->b), n.b = transposed(&g->a), n.c = transposed(&g->c);
  }
  if (n.a.dtype == TPU_DTYPE_F32 && !b_is_matrix(&n.b)) { /* float32 needs the blocked B */
    atomic_fetch_add(&g_mxu.declined, 1);
    return TPU_OK;
  }
  void* scratch[3] = {NULL, NULL, NULL};
  tpu_view_t* views[3] = {&n.a, &n.b, &n.c};
  tpu_view_t c_out = n.c;
  tpu_status_t st = TPU_OK;
  for (int i = 0; i < 3 && st == TPU_OK; ++i)
    if (!dense_rows_or_cols(views[i]))
      st = dense_copy(*views[i], i < 2 || n.beta != 0.0f, &scratch[i], views[i]);
  /* one B matrix: the batch folds into A's and C's rows where their
   * layouts let it (both or neither) */
  mxu_gemm_t r = n;
  if (st == TPU_OK && b_is_matrix(&r.b) && fold_rows(&r.a) && fold_rows(&r.c)) r.b.sizes[0] = 1;
  else r = n;
  if (st == TPU_OK) st = run_gemm(&r, !scratch[1], out_done);
  if (st == TPU_OK && *out_done && scratch[2]) view_copy(&c_out, &n.c);
  for (int i = 0; i < 3; ++i) free(scratch[i]);
  return st;
}
