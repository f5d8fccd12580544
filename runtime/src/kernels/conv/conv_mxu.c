/* conv_mxu.c — convolutions on the matrix unit (oneDNN's convolution
 * primitives; the unit itself: mxu.h).
 *
 * The family's three products (conv.h) are oneDNN's three convolution
 * primitives over the same X (image), W (weight), Y (grid) views:
 *   CONV_Y  forward            src = X, weights = W, bias, dst = Y
 *   CONV_X  backward data      diff_src = X, weights = W, diff_dst = Y
 *   CONV_W  backward weights   src = X, diff_weights = W, diff_bias, diff_dst = Y
 * so a convolution, its transposed form and both gradients of either map
 * onto them as conv.c maps them onto its GEMMs. oneDNN's bfloat16 kernels
 * accumulate in float32 and round once, at the store, as the float32 path
 * does. Groups become oneDNN's grouped weights [groups, cy, cx, K...].
 *
 * Which problems: bfloat16 where the unit computes bfloat16
 * (tpu_mxu_supports), depthwise included (oneDNN's jit_dw kernels beat the
 * float32 path's direct loops there too). float32 never: on this project's
 * AVX-512 machine (Zen 4, 2 cores) oneDNN's float32 convolutions lost to
 * the float32 path (sgemm over im2col, Winograd, the 1x1 micro-kernel) on
 * ResNet-50's bottleneck layers: sums of forward / input-gradient /
 * weight-gradient times 73 / 54 / 60 ms against 61 / 40 / 45 ms; they won
 * only the 3x3 forward on 14x14 and 7x7 grids. A problem the unit takes but
 * oneDNN has no direct JIT kernel for (only its reference loops, or its
 * im2col + GEMM: impl_is_jit), or whose result would overlap an operand, or a
 * transposed convolution with a bias (backward data has no bias), is
 * declined and counted (tpu_mxu_info_t's conv_declined); the caller runs
 * it on the float32 path. One exception: a grouped weight gradient with few
 * channels per group (8: oneDNN offers only im2col + GEMM) is run a group
 * at a time, each group an ungrouped problem that has a JIT kernel, the
 * groups side by side on the pool; declined only when those have none
 * either. Empty problems are not offered.
 *
 * 1x1 products with no padding and one group do not come here: they run
 * as GEMMs, on NCHW operands of 384+ positions per image (192+ for the
 * forward and input gradient on AMX tiles) where they lie
 * (conv_mxu_1x1.c, no reorder), or (forward and input gradient at stride
 * 2 or on channels_last operands) as one GEMM with the grid positions as
 * rows (conv_mxu_rows.c); the rest of them (small NCHW images at stride 1,
 * those weight gradients) and what the unit declines come here.
 *
 * Layouts: each primitive is asked for with its layouts left to oneDNN
 * (format "any"), which on AVX512-BF16 gives the blocked (nChw16c) JIT
 * kernels (jit_bf16, jit_bf16_1x1, jit_dw);
 * operands in another layout (PyTorch's NCHW, channels_last, any strides)
 * are reordered into scratch, results back out. Asking for NHWC instead
 * gets the brgemm kernels (brgconv), slower here even without the reorders
 * they save: ResNet-50 bottleneck forward 34-35 against 30 ms, input
 * gradient 37 against 31 ms. A contiguous weight read by CONV_Y / CONV_X
 * keeps its blocked copy in the unit's weight cache (mxu_pack.h), like a
 * GEMM's B.
 *
 * Plans: creating a convolution's primitive descriptor runs the set-up of
 * each candidate kernel (and a backward one needs the forward's as a hint),
 * which oneDNN's primitive cache does not save, so the primitives (with
 * their reorders) are kept in a small cache keyed by the problem:
 * direction, dtype, geometry, the operands' strides, the team size. A
 * declined problem is cached too. A primitive's scratchpad is ours
 * (oneDNN's user mode, from tpu_scratch_alloc for each run), since the
 * parts of a split problem run one plan on several threads at once.
 *
 * Threads: a problem that splits is split over the compute pool
 * (tpu_parallel_for) into parts, one single-threaded primitive each, with
 * no OpenMP team: the forward and the input gradient over the images (2 or
 * more), an ungrouped weight gradient over output channels (each part lays
 * out all of X) or input channels (all of Y), whichever operand is the
 * smaller, in whole blocks of 16 (32 or more channels). Why: oneDNN 2.6's
 * kernels on a 2-thread team meet at spin barriers (its weight gradient
 * reduces the images' partial sums behind them), and on a shared machine
 * one descheduled thread stalls the other: a 3x3 weight gradient at 14x14
 * or 7x7 took 30-60 ms against 4 ms on one thread (load 7 on 2 cores),
 * and the team's idle OpenMP thread spins after each product, taking a
 * core from the pool's next kernel. The parts finish apart, and a part a
 * busy thread has not started runs on the other (the pool's chunks are
 * taken, not assigned). What does not split (one image, a grouped weight
 * gradient, few channels) runs as a GEMM does (mxu.c): the pool claimed
 * (tpu_parallel_exclusive), the primitives on an OpenMP team of its size
 * (1 when the pool is busy). A plan is built for its team size, with that
 * size set: oneDNN splits the work for the threads it sees at creation,
 * and its gemm-based kernels refuse to run on another team.
 * TORCH_TPU_CONV_SPLIT=0 turns the split off (read per call, for A/B
 * measurements); tpu_mxu_info_t's conv_split counts the products that ran
 * split.
 */
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/config.h"
#include "kernels/conv/conv.h"
#include "kernels/common/kernel_util.h"
#include "kernels/matmul/mxu.h"
#include "kernels/matmul/mxu_pack.h"

void omp_set_num_threads(int threads); /* libgomp's (see mxu.c) */

enum { DIR_Y = CONV_DIR_Y, DIR_X = CONV_DIR_X, DIR_W = CONV_DIR_W };
enum { OP_X, OP_W, OP_Y, OP_B, OP_COUNT }; /* operands of a plan */

#define PLAN_CACHE 128

/* A problem, as the plan cache keys it (memset to 0, compared bytewise). */
typedef struct plan_key {
  int32_t dir, nsp;
  int32_t threads; /* the OpenMP team it runs on: oneDNN sizes its work split
                    * and scratch for the team at creation (its gemm-based
                    * kernels refuse to run on another) */
  tpu_dtype_t dtype;
  bool bias; /* CONV_Y: a bias; CONV_W: the bias gradient too */
  conv_geom_t g;
  int64_t strides[OP_COUNT][5];
} plan_key_t;

typedef struct conv_plan {
  plan_key_t key;
  dnnl_primitive_t prim; /* NULL: declined */
  /* per operand: the caller's layout, the primitive's, and the reorder
   * between them (caller -> primitive for inputs, back for outputs), NULL
   * when they are the same */
  dnnl_memory_desc_t user[OP_COUNT], mine[OP_COUNT]; /* owned (NULL: none) */
  dnnl_primitive_t reorder[OP_COUNT];
  dnnl_memory_desc_t pad; /* the primitive's scratchpad (size 0: none), owned */
  char impl[64];
  atomic_int refs;
  uint64_t used;
} conv_plan_t;

static struct {
  pthread_mutex_t mu;
  conv_plan_t* plans[PLAN_CACHE];
  int count;
  uint64_t clock;
} g_plans = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void plan_release(conv_plan_t* p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  if (p->prim) dnnl_primitive_destroy(p->prim);
  for (int i = 0; i < OP_COUNT; ++i) {
    if (p->reorder[i]) dnnl_primitive_destroy(p->reorder[i]);
    if (p->user[i]) dnnl_memory_desc_destroy(p->user[i]);
    if (p->mine[i]) dnnl_memory_desc_destroy(p->mine[i]);
  }
  if (p->pad) dnnl_memory_desc_destroy(p->pad);
  free(p);
}

/* ---- descriptors ---------------------------------------------------------------- */

static dnnl_data_type_t dt_of(tpu_dtype_t d) {
  return d == TPU_DTYPE_BF16 ? dnnl_bf16 : d == TPU_DTYPE_F32 ? dnnl_f32 : dnnl_data_type_undef;
}

/* The dims of operand `op` (X, Y: [N, C, spatial...]; W: [groups, cy, cx,
 * K...] when grouped, else [cy, cx, K...]; B: [channels]) and the strides
 * of the caller's view in those dims; returns the number of dims. */
static int op_dims(const plan_key_t* k, int op, const tpu_view_t* v, dnnl_dims_t dims,
                   dnnl_dims_t strides) {
  const conv_geom_t* g = &k->g;
  int nsp = k->nsp, o = 3 - nsp;
  if (op == OP_B) {
    dims[0] = v->sizes[0], strides[0] = v->strides[0];
    return 1;
  }
  if (op == OP_W) {
    int lead = g->groups > 1 ? 1 : 0;
    if (lead) dims[0] = g->groups, strides[0] = g->cy * v->strides[0];
    dims[lead] = g->cy, strides[lead] = v->strides[0];
    dims[lead + 1] = g->cx, strides[lead + 1] = v->strides[1];
    for (int d = 0; d < nsp; ++d) dims[lead + 2 + d] = g->K[o + d], strides[lead + 2 + d] = v->strides[2 + d];
    return lead + 2 + nsp;
  }
  const int64_t* sp = op == OP_X ? g->S : g->G;
  dims[0] = g->n, strides[0] = v->strides[0];
  dims[1] = g->groups * (op == OP_X ? g->cx : g->cy), strides[1] = v->strides[1];
  for (int d = 0; d < nsp; ++d) dims[2 + d] = sp[o + d], strides[2 + d] = v->strides[2 + d];
  return 2 + nsp;
}

/* The caller's layout of operand `op` and the primitive's request ("any";
 * the bias plain), as new descriptors the caller destroys (left NULL on
 * failure). */
static bool op_mds(const plan_key_t* k, int op, const tpu_view_t* v, dnnl_memory_desc_t* out_user,
                   dnnl_memory_desc_t* out_any) {
  dnnl_dims_t dims, strides;
  int nd = op_dims(k, op, v, dims, strides);
  dnnl_data_type_t dt = dt_of(k->dtype);
  for (int d = 0; d < nd; ++d)
    if (strides[d] < 0) return false;
  if (dnnl_memory_desc_create_with_strides(out_user, nd, dims, dt, strides) != dnnl_success) {
    *out_user = NULL;
    return false;
  }
  if (dnnl_memory_desc_create_with_tag(out_any, nd, dims, dt,
                                       op == OP_B ? dnnl_a : dnnl_format_tag_any) != dnnl_success) {
    *out_any = NULL;
    return false;
  }
  return true;
}

/* oneDNN's convolution of `k` in direction `dir` on `md`: its primitive
 * descriptor in *out_pd (`hint`: the forward's, for the backward ones). */
static dnnl_status_t conv_pd(const plan_key_t* k, int dir, const dnnl_memory_desc_t* md,
                             const_dnnl_primitive_desc_t hint, const_dnnl_primitive_attr_t attr,
                             dnnl_primitive_desc_t* out_pd) {
  dnnl_engine_t eng = tpu_mxu_engine();
  const conv_geom_t* g = &k->g;
  dnnl_dims_t stride, dil, pl, pr;
  for (int d = 0; d < k->nsp; ++d) {
    int e = 3 - k->nsp + d;
    int64_t ker = (g->K[e] - 1) * g->dil[e] + 1;
    stride[d] = g->stride[e], dil[d] = g->dil[e] - 1, pl[d] = g->pad[e];
    /* oneDNN needs G = (S + pl + pr - ker) / stride + 1 (rounded down) */
    pr[d] = g->pad[e];
    if ((g->S[e] + pl[d] + pr[d] - ker) / stride[d] + 1 != g->G[e])
      pr[d] = (g->G[e] - 1) * stride[d] + ker - g->S[e] - pl[d];
  }
  const_dnnl_memory_desc_t b = k->bias ? md[OP_B] : NULL;
  if (dir == DIR_Y)
    return dnnl_convolution_forward_primitive_desc_create(
        out_pd, eng, dnnl_forward_training, dnnl_convolution_direct, md[OP_X], md[OP_W], b,
        md[OP_Y], stride, dil, pl, pr, attr);
  if (dir == DIR_X)
    return dnnl_convolution_backward_data_primitive_desc_create(
        out_pd, eng, dnnl_convolution_direct, md[OP_X], md[OP_W], md[OP_Y], stride, dil, pl, pr,
        hint, attr);
  return dnnl_convolution_backward_weights_primitive_desc_create(
      out_pd, eng, dnnl_convolution_direct, md[OP_X], md[OP_W], b, md[OP_Y], stride, dil, pl, pr,
      hint, attr);
}

/* oneDNN's direct JIT kernels ("jit_bf16:...", "jit_dw:...", "brgconv:...").
 * Declined: its reference loops ("ref:...") and its im2col + GEMM ones
 * ("x64:gemm:jit", picked for few channels per group), which in a process
 * that has loaded PyTorch's own oneDNN and MKL fail at run time with
 * "unimplemented" (seen on the grouped weight gradient; not in the C tests'
 * process) and are no faster than the float32 path's im2col. */
static bool impl_is_jit(const char* impl) {
  return impl && (strncmp(impl, "jit", 3) == 0 || strncmp(impl, "brg", 3) == 0);
}

/* Fills p->prim (NULL when declined), its layouts and reorders; an engine
 * failure (other than "no kernel") is returned. */
static tpu_status_t plan_build(conv_plan_t* p, const tpu_view_t* const* views) {
  const plan_key_t* k = &p->key;
  dnnl_engine_t eng = tpu_mxu_engine();
  dnnl_memory_desc_t any[OP_COUNT] = {NULL};
  int nops = k->bias ? OP_COUNT : OP_B;
  bool described = true;
  for (int i = 0; i < nops && described; ++i)
    described = op_mds(k, i, views[i], &p->user[i], &any[i]);
  dnnl_primitive_desc_t hint = NULL, pd = NULL;
  dnnl_status_t s = described ? dnnl_success : dnnl_unimplemented;
  if (s == dnnl_success && k->dir != DIR_Y) {
    /* the forward, as the backward primitives' hint (no bias needed) */
    plan_key_t fk = *k;
    fk.bias = false;
    s = conv_pd(&fk, DIR_Y, any, NULL, NULL, &hint);
  }
  /* the scratchpad is ours (tpu_scratch_alloc, per run): parts of a split
   * problem run one plan on several threads at once */
  dnnl_primitive_attr_t attr = NULL;
  if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success) s = conv_pd(k, k->dir, any, hint, attr, &pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  for (int i = 0; i < OP_COUNT; ++i)
    if (any[i]) dnnl_memory_desc_destroy(any[i]);
  if (!described) return TPU_OK;
  const char* impl = NULL;
  if (s == dnnl_success) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  snprintf(p->impl, sizeof p->impl, "%s", impl ? impl : "none");
  tpu_status_t st = TPU_OK;
  if (s == dnnl_success && impl_is_jit(impl)) {
    static const int q[3][OP_COUNT] = {
        {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md, dnnl_query_weights_md},
        {dnnl_query_diff_src_md, dnnl_query_weights_md, dnnl_query_diff_dst_md, 0},
        {dnnl_query_src_md, dnnl_query_diff_weights_md, dnnl_query_diff_dst_md,
         dnnl_query_diff_weights_md}};
    /* the bias is weights #1 */
    for (int i = 0; i < nops && s == dnnl_success; ++i)
      s = dnnl_memory_desc_clone(
          &p->mine[i], dnnl_primitive_desc_query_md(pd, (dnnl_query_t)q[k->dir][i], i == OP_B));
    if (s == dnnl_success)
      s = dnnl_memory_desc_clone(&p->pad,
                                 dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    /* outputs: Y (forward), X (backward data), W and B (backward weights) */
    for (int i = 0; i < nops && s == dnnl_success; ++i) {
      if (dnnl_memory_desc_equal(p->user[i], p->mine[i])) continue;
      bool out = (k->dir == DIR_Y && i == OP_Y) || (k->dir == DIR_X && i == OP_X) ||
                 (k->dir == DIR_W && (i == OP_W || i == OP_B));
      dnnl_primitive_desc_t rpd = NULL;
      s = out ? dnnl_reorder_primitive_desc_create(&rpd, p->mine[i], eng, p->user[i], eng, NULL)
              : dnnl_reorder_primitive_desc_create(&rpd, p->user[i], eng, p->mine[i], eng, NULL);
      if (s == dnnl_success) s = dnnl_primitive_create(&p->reorder[i], rpd);
      if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    if (s == dnnl_success) s = dnnl_primitive_create(&p->prim, pd);
    if (s != dnnl_success) {
      if (p->prim) dnnl_primitive_destroy(p->prim);
      p->prim = NULL;
      st = tpu_status_make(s == dnnl_out_of_memory ? TPU_CODE_OUT_OF_MEMORY : TPU_CODE_INTERNAL,
                           "the matrix unit could not build a convolution (oneDNN status %d)",
                           (int)s);
    }
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (hint) dnnl_primitive_desc_destroy(hint);
  return st;
}

/* The plan of `k` (a new reference), from the cache or built now. */
static tpu_status_t plan_get(const plan_key_t* k, const tpu_view_t* const* views,
                             conv_plan_t** out_plan) {
  *out_plan = NULL;
  pthread_mutex_lock(&g_plans.mu);
  for (int i = 0; i < g_plans.count; ++i)
    if (memcmp(&g_plans.plans[i]->key, k, sizeof *k) == 0) {
      conv_plan_t* p = g_plans.plans[i];
      p->used = ++g_plans.clock;
      atomic_fetch_add(&p->refs, 1);
      pthread_mutex_unlock(&g_plans.mu);
      *out_plan = p;
      return TPU_OK;
    }
  pthread_mutex_unlock(&g_plans.mu);
  conv_plan_t* p = calloc(1, sizeof *p);
  if (!p) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a plan");
  p->key = *k;
  atomic_init(&p->refs, 1);
  tpu_status_t st = plan_build(p, views);
  if (st != TPU_OK) {
    plan_release(p);
    return st;
  }
  pthread_mutex_lock(&g_plans.mu);
  if (g_plans.count == PLAN_CACHE) { /* evict the least recently used */
    int lru = 0;
    for (int i = 1; i < g_plans.count; ++i)
      if (g_plans.plans[i]->used < g_plans.plans[lru]->used) lru = i;
    plan_release(g_plans.plans[lru]);
    g_plans.plans[lru] = g_plans.plans[--g_plans.count];
  }
  p->used = ++g_plans.clock;
  atomic_fetch_add(&p->refs, 1); /* the cache's */
  g_plans.plans[g_plans.count++] = p;
  pthread_mutex_unlock(&g_plans.mu);
  *out_plan = p;
  return TPU_OK;
}

/* ---- execution ------------------------------------------------------------------- */

typedef struct conv_exec {
  plan_key_t key; /* all but threads */
  const tpu_view_t* views[OP_COUNT];
  bool cache_w;  /* W (an input) may keep its blocked copy in the weight cache */
  bool declined; /* oneDNN has no JIT kernel for it */
  dnnl_status_t status;
  tpu_status_t pack_status; /* also a failure to build the plan */
} conv_exec_t;

static bool is_output(int dir, int op) {
  return (dir == DIR_Y && op == OP_Y) || (dir == DIR_X && op == OP_X) ||
         (dir == DIR_W && (op == OP_W || op == OP_B));
}

/* W (read by CONV_Y / CONV_X) in plan p's layout: the caller's bytes when
 * the plan reads them as they are, else a blocked copy (the weight cache's
 * with `cacheable`); *out_packed holds the copy's reference. */
static tpu_status_t weight_blocked(const conv_plan_t* p, const tpu_view_t* w, bool cacheable,
                                   dnnl_stream_t stream, mxu_packed_t** out_packed,
                                   void** out_data) {
  *out_packed = NULL;
  *out_data = tpu_view_ptr(w);
  if (!p->reorder[OP_W]) return TPU_OK;
  /* the cache's key: the weight as one [1, rows, cols] matrix */
  tpu_view_t key = *w;
  int64_t rows = key.sizes[0], numel = tpu_view_numel(&key);
  key.ndim = 3, key.sizes[0] = 1, key.sizes[1] = rows, key.sizes[2] = rows ? numel / rows : 0;
  key.strides[0] = numel, key.strides[2] = 1, key.strides[1] = key.sizes[2];
  TPU_RETURN_IF_ERROR(mxu_pack_get(&key, p->user[OP_W], p->mine[OP_W], cacheable,
                                   tpu_mxu_engine(), stream, out_packed));
  *out_data = (*out_packed)->data;
  return TPU_OK;
}

/* Runs plan p (built) on `views` with the calling thread's OpenMP team:
 * inputs reordered into scratch, the primitive (its scratchpad from
 * tpu_scratch_alloc), outputs reordered back. `w_data`: W already in the
 * plan's layout (CONV_Y / CONV_X), or NULL to lay it out here. */
static void run_plan(conv_exec_t* e, const conv_plan_t* p, const tpu_view_t* const* views,
                     void* w_data) {
  int dir = p->key.dir, nops = p->key.bias ? OP_COUNT : OP_B;
  dnnl_engine_t eng = tpu_mxu_engine();
  dnnl_stream_t stream = NULL;
  dnnl_memory_t user[OP_COUNT] = {NULL}, mine[OP_COUNT] = {NULL}, pad = NULL;
  void* scratch[OP_COUNT] = {NULL};
  void* pad_data = NULL;
  mxu_packed_t* packed = NULL;
  dnnl_status_t s = dnnl_stream_create(&stream, eng, dnnl_stream_default_flags);
  for (int i = 0; i < nops && s == dnnl_success; ++i) {
    void* ptr = tpu_view_ptr(views[i]);
    if (!p->reorder[i]) {
      s = dnnl_memory_create(&mine[i], p->mine[i], eng, ptr);
      continue;
    }
    if (i == OP_W && dir != DIR_W) { /* a weight read: blocked, maybe cached */
      if (!w_data)
        e->pack_status = weight_blocked(p, views[i], e->cache_w, stream, &packed, &w_data);
      if (e->pack_status != TPU_OK) break;
      s = dnnl_memory_create(&mine[i], p->mine[i], eng, w_data);
      continue;
    }
    size_t bytes = dnnl_memory_desc_get_size(p->mine[i]);
    scratch[i] = tpu_scratch_alloc(bytes ? bytes : 1);
    if (!scratch[i]) {
      s = dnnl_out_of_memory;
      break;
    }
    s = dnnl_memory_create(&user[i], p->user[i], eng, ptr);
    if (s == dnnl_success) s = dnnl_memory_create(&mine[i], p->mine[i], eng, scratch[i]);
    if (s == dnnl_success && !is_output(dir, i)) {
      dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user[i]}, {DNNL_ARG_TO, mine[i]}};
      s = dnnl_primitive_execute(p->reorder[i], stream, 2, args);
    }
  }
  size_t pad_bytes = dnnl_memory_desc_get_size(p->pad);
  if (s == dnnl_success && e->pack_status == TPU_OK && pad_bytes) {
    pad_data = tpu_scratch_alloc(pad_bytes);
    s = pad_data ? dnnl_memory_create(&pad, p->pad, eng, pad_data) : dnnl_out_of_memory;
  }
  if (s == dnnl_success && e->pack_status == TPU_OK) {
    dnnl_exec_arg_t args[OP_COUNT + 1];
    int n = 0;
    if (dir == DIR_Y) {
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mine[OP_X]};
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mine[OP_W]};
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mine[OP_Y]};
      if (p->key.bias) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mine[OP_B]};
    } else if (dir == DIR_X) {
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, mine[OP_X]};
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mine[OP_W]};
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, mine[OP_Y]};
    } else {
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mine[OP_X]};
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, mine[OP_W]};
      args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, mine[OP_Y]};
      if (p->key.bias) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, mine[OP_B]};
    }
    if (pad) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad};
    s = dnnl_primitive_execute(p->prim, stream, n, args);
    for (int i = 0; i < nops && s == dnnl_success; ++i)
      if (p->reorder[i] && is_output(dir, i)) {
        dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, mine[i]}, {DNNL_ARG_TO, user[i]}};
        s = dnnl_primitive_execute(p->reorder[i], stream, 2, rargs);
      }
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
  }
  e->status = s;
  for (int i = 0; i < OP_COUNT; ++i) {
    if (user[i]) dnnl_memory_destroy(user[i]);
    if (mine[i]) dnnl_memory_destroy(mine[i]);
    tpu_scratch_free(scratch[i]);
  }
  if (pad) dnnl_memory_destroy(pad);
  tpu_scratch_free(pad_data);
  mxu_packed_release(packed);
  if (stream) dnnl_stream_destroy(stream);
}

/* The plan for this team (built with the team's size set), then the run. */
static void exec_on(void* arg, int threads) {
  conv_exec_t* e = (conv_exec_t*)arg;
  omp_set_num_threads(threads);
  e->key.threads = threads;
  conv_plan_t* p = NULL;
  e->pack_status = plan_get(&e->key, e->views, &p);
  if (e->pack_status != TPU_OK) return;
  if (!p->prim)
    e->declined = true;
  else
    run_plan(e, p, e->views, NULL);
  plan_release(p);
}

/* ---- the problem split over the compute pool ------------------------------------ */

#define MAX_PARTS 64

/* One part of a split problem: a convolution of its own (fewer images, or
 * a range of channels, or one group) on sub-views of the operands. */
typedef struct conv_part {
  conv_exec_t e; /* key.threads 1 */
  tpu_view_t views[OP_COUNT];
  const tpu_view_t* vp[OP_COUNT];
  conv_plan_t* plan;
} conv_part_t;

typedef struct conv_split {
  conv_part_t* parts;
  void* w_data; /* CONV_Y / CONV_X: W in the parts' layout */
} conv_split_t;

/* Part `e` of the whole `whole`: images [n0, n0 + n), groups [g0, g0 +
 * groups) with each group's output channels [y0, y0 + cy) and input
 * channels [x0, x0 + cx); `bias` whether this part has the bias. */
static void part_make(const conv_exec_t* whole, int64_t n0, int64_t n, int64_t g0,
                      int64_t groups, int64_t y0, int64_t cy, int64_t x0, int64_t cx, bool bias,
                      conv_part_t* out) {
  const conv_geom_t* g = &whole->key.g;
  memset(out, 0, sizeof *out);
  out->e = *whole;
  out->e.declined = false, out->e.status = dnnl_success, out->e.pack_status = TPU_OK;
  plan_key_t* k = &out->e.key;
  k->threads = 1, k->bias = bias;
  k->g.n = n, k->g.groups = groups, k->g.cy = cy, k->g.cx = cx;
  int64_t xc = g0 * g->cx + x0, yc = g0 * g->cy + y0; /* first channels of X, Y */
  for (int i = 0; i < OP_COUNT; ++i) {
    const tpu_view_t* v = whole->views[i];
    if (!v || (i == OP_B && !bias)) continue;
    tpu_view_t* pv = &out->views[i];
    *pv = *v;
    int64_t off = i == OP_X   ? n0 * v->strides[0] + xc * v->strides[1]
                  : i == OP_Y ? n0 * v->strides[0] + yc * v->strides[1]
                  : i == OP_W ? yc * v->strides[0] + x0 * v->strides[1]
                              : yc * v->strides[0];
    pv->addr += (uint64_t)(off * (int64_t)tpu_dtype_size(v->dtype));
    if (i == OP_B) pv->sizes[0] = groups * cy;
    out->vp[i] = pv;
  }
  for (int i = 0; i < OP_COUNT; ++i) out->e.views[i] = out->vp[i];
}

/* Splits `e` into parts the pool's threads run side by side (returns the
 * count; 0: not split). CONV_Y / CONV_X: the images (each part reads all of
 * W). CONV_W, ungrouped: the output channels (each part reads all of X) or
 * the input channels (all of Y), whichever operand is the smaller to lay
 * out twice, in whole blocks of 16; `by_group`: each group alone (every
 * part ungrouped). */
static int split_parts(const conv_exec_t* e, int threads, bool by_group, conv_part_t* parts) {
  const conv_geom_t* g = &e->key.g;
  int dir = e->key.dir;
  bool bias = e->key.bias;
  if (by_group) {
    if (g->groups < 2 || g->groups > MAX_PARTS) return 0;
    for (int64_t i = 0; i < g->groups; ++i)
      part_make(e, 0, g->n, i, 1, 0, g->cy, 0, g->cx, bias, &parts[i]);
    return (int)g->groups;
  }
  if (threads > MAX_PARTS) threads = MAX_PARTS;
  if (threads < 2) return 0;
  if (dir != DIR_W) {
    int count = g->n < threads ? (int)g->n : threads;
    if (count < 2) return 0;
    for (int i = 0; i < count; ++i) {
      int64_t n0 = g->n * i / count, n1 = g->n * (i + 1) / count;
      part_make(e, n0, n1 - n0, 0, g->groups, 0, g->cy, 0, g->cx, bias, &parts[i]);
    }
    return count;
  }
  if (g->groups != 1) return 0;
  int64_t sx = g->n * g->cx, sy = g->n * g->cy;
  for (int d = 0; d < 3; ++d) sx *= g->S[d], sy *= g->G[d];
  bool by_y = sx <= sy ? g->cy >= 32 : !(g->cx >= 32);
  int64_t c = by_y ? g->cy : g->cx, blocks = c / 16;
  int count = blocks < threads ? (int)blocks : threads;
  if (count < 2) return 0;
  for (int i = 0; i < count; ++i) {
    int64_t c0 = blocks * i / count * 16, c1 = i + 1 == count ? c : blocks * (i + 1) / count * 16;
    if (by_y)
      part_make(e, 0, g->n, 0, 1, c0, c1 - c0, 0, g->cx, bias, &parts[i]);
    else /* the bias gradient (all of Y's channels) with the first part */
      part_make(e, 0, g->n, 0, 1, 0, g->cy, c0, c1 - c0, bias && i == 0, &parts[i]);
  }
  return count;
}

/* TORCH_TPU_CONV_SPLIT=0 keeps every product on one OpenMP team (read per
 * call, so tpu_config_set switches it for side-by-side measurements); the
 * grouped weight gradient's route a group at a time stays. */
static bool split_allowed(void) { return tpu_config_bool(TPU_CONFIG_CONV_SPLIT); }

static void split_run(void* arg, int64_t begin, int64_t end) {
  conv_split_t* sp = (conv_split_t*)arg;
  omp_set_num_threads(1);
  for (int64_t i = begin; i < end; ++i) {
    conv_part_t* pt = &sp->parts[i];
    run_plan(&pt->e, pt->plan, pt->vp, sp->w_data);
  }
}

/* Runs `e` as `count` parts on the compute pool, each a single-threaded
 * primitive: no OpenMP team, so no barrier that a descheduled thread
 * stalls (2.6's weight gradient with a 2-thread team reduces over images
 * behind spin barriers: 30-60 ms against 4 for a 3x3 at 14x14 or 7x7 on a
 * loaded machine). Returns false when a part has no JIT kernel (nothing
 * ran); failures in e. */
static bool split_exec(conv_exec_t* e, conv_part_t* parts, int count) {
  omp_set_num_threads(1);
  bool ok = true;
  for (int i = 0; i < count; ++i) parts[i].plan = NULL;
  for (int i = 0; i < count && ok; ++i) {
    /* parts of one size share a plan (built once; run concurrently, each
     * run with its own scratchpad) */
    e->pack_status = plan_get(&parts[i].e.key, parts[i].vp, &parts[i].plan);
    ok = e->pack_status == TPU_OK && parts[i].plan->prim;
  }
  conv_split_t sp = {parts, NULL};
  mxu_packed_t* packed = NULL;
  dnnl_stream_t stream = NULL;
  if (ok && e->key.dir != DIR_W) { /* W, shared by the parts, laid out once */
    dnnl_status_t s = dnnl_stream_create(&stream, tpu_mxu_engine(), dnnl_stream_default_flags);
    if (s != dnnl_success)
      e->status = s;
    else
      e->pack_status =
          weight_blocked(parts[0].plan, e->views[OP_W], e->cache_w, stream, &packed, &sp.w_data);
  }
  bool run = ok && e->pack_status == TPU_OK && e->status == dnnl_success;
  if (run) tpu_parallel_for(count, 1, split_run, &sp);
  for (int i = 0; i < count; ++i) {
    if (run && e->pack_status == TPU_OK && parts[i].e.pack_status != TPU_OK)
      e->pack_status = parts[i].e.pack_status;
    if (run && e->status == dnnl_success) e->status = parts[i].e.status;
    plan_release(parts[i].plan);
  }
  mxu_packed_release(packed);
  if (stream) dnnl_stream_destroy(stream);
  if (run && e->pack_status == TPU_OK && e->status == dnnl_success) tpu_mxu_count_conv_split();
  return ok || e->pack_status != TPU_OK;
}

/* ---- the problems ------------------------------------------------------------------ */

/* Whether the unit is offered `dtype` at all. */
static bool offered(tpu_dtype_t dtype) {
  return dtype == TPU_DTYPE_BF16 && tpu_mxu_supports(TPU_DTYPE_BF16);
}

static bool nonempty(const conv_geom_t* g) {
  if (g->n == 0 || g->cx == 0 || g->cy == 0) return false;
  for (int d = 0; d < 3; ++d)
    if (g->S[d] == 0 || g->G[d] == 0) return false;
  return true;
}

/* Runs one product on the unit; *out_done says whether it ran (else it
 * was declined and counted). `out` is the view it writes. */
static tpu_status_t run_dir(const conv_args_t* a, int dir, const tpu_view_t* x,
                            const tpu_view_t* w, const tpu_view_t* y, const tpu_view_t* b,
                            const tpu_graph_t* graph, bool* out_done) {
  *out_done = false;
  const tpu_view_t* views[OP_COUNT] = {x, w, y, b};
  const tpu_view_t* out = dir == DIR_Y ? y : dir == DIR_X ? x : w;
  bool overlap = false;
  for (int i = 0; i < OP_COUNT; ++i)
    if (views[i] && !is_output(dir, i))
      for (int j = 0; j < OP_COUNT; ++j)
        if (views[j] && is_output(dir, j) && tpu_views_may_overlap(views[j], views[i]))
          overlap = true;
  if (overlap || out->dtype != a->dtype) {
    tpu_mxu_count_conv(false);
    return TPU_OK;
  }
  /* a 1x1 product as GEMMs on the operands' layout (conv_mxu_1x1.c) */
  bool rows_instead = false; /* its GEMMs by positions declined: the rows path's */
  if (tpu_conv_mxu_1x1_fits(a)) {
    TPU_RETURN_IF_ERROR(tpu_conv_mxu_1x1(dir, x, w, y, b, &rows_instead, out_done));
    if (*out_done) {
      tpu_mxu_count_conv(true);
      return TPU_OK;
    }
  }
  /* the forward and input gradient at stride 2 or of channels_last operands: one GEMM
   * with the grid positions as rows (conv_mxu_rows.c) */
  if (tpu_conv_mxu_rows_fits(a)) {
    TPU_RETURN_IF_ERROR(tpu_conv_mxu_rows(a, dir, x, w, y, b, graph, rows_instead, out_done));
    if (*out_done) {
      tpu_mxu_count_conv(true);
      return TPU_OK;
    }
  }
  conv_exec_t e;
  memset(&e, 0, sizeof e);
  plan_key_t* k = &e.key;
  k->dir = dir, k->nsp = a->nsp, k->dtype = a->dtype, k->bias = b != NULL, k->g = a->g;
  for (int i = 0; i < OP_COUNT; ++i) {
    e.views[i] = views[i];
    if (views[i])
      for (int d = 0; d < views[i]->ndim && d < 5; ++d) k->strides[i][d] = views[i]->strides[d];
  }
  e.cache_w = dir != DIR_W && graph && tpu_view_is_contiguous(w) &&
              !tpu_weight_cache_graph_writes(graph, w);
  /* split over the pool where the problem splits; else (and when a part
   * has no JIT kernel) on an OpenMP team of the pool's size; a grouped
   * weight gradient oneDNN has only im2col + GEMM for, a group at a time */
  conv_part_t* parts = malloc(MAX_PARTS * sizeof *parts);
  if (!parts) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "matrix unit: no memory for a plan");
  int count = split_parts(&e, split_allowed() ? tpu_parallel_threads() : 1, false, parts);
  if (!count || !split_exec(&e, parts, count)) tpu_parallel_exclusive(exec_on, &e);
  if (e.declined && dir == DIR_W && (count = split_parts(&e, 1, true, parts)) > 0) {
    e.declined = !split_exec(&e, parts, count);
  }
  free(parts);
  /* "unimplemented" at run time (see impl_is_jit): declined, the caller's
   * path writes every output */
  if (e.declined || (e.pack_status == TPU_OK && e.status == dnnl_unimplemented)) {
    tpu_mxu_count_conv(false);
    return TPU_OK;
  }
  if (e.pack_status != TPU_OK) return e.pack_status;
  if (e.status != dnnl_success)
    return tpu_status_make(
        e.status == dnnl_out_of_memory ? TPU_CODE_OUT_OF_MEMORY : TPU_CODE_INTERNAL,
        "the matrix unit failed on a convolution (oneDNN status %d)", (int)e.status);
  tpu_mxu_count_conv(true);
  *out_done = true;
  return TPU_OK;
}

tpu_status_t tpu_conv_mxu(const conv_args_t* a, const tpu_node_t* node, const tpu_graph_t* graph,
                          bool out_done[3]) {
  out_done[0] = out_done[1] = out_done[2] = false;
  conv_kind_t kind = a->impl->kind;
  if ((kind != CONV_FORWARD && kind != CONV_BACKWARD) || !offered(a->dtype) || !nonempty(&a->g))
    return TPU_OK;
  const tpu_view_t* outs = node->outputs;
  if (kind == CONV_FORWARD) {
    if (!a->transposed)
      return run_dir(a, DIR_Y, a->input, a->weight, &outs[0], a->bias, graph, &out_done[0]);
    if (a->bias) { /* backward data has no bias */
      tpu_mxu_count_conv(false);
      return TPU_OK;
    }
    return run_dir(a, DIR_X, &outs[0], a->weight, a->input, NULL, graph, &out_done[0]);
  }
  if (a->mask[0]) {
    if (a->transposed)
      TPU_RETURN_IF_ERROR(
          run_dir(a, DIR_Y, a->grad_out, a->weight, &outs[0], NULL, graph, &out_done[0]));
    else
      TPU_RETURN_IF_ERROR(
          run_dir(a, DIR_X, &outs[0], a->weight, a->grad_out, NULL, graph, &out_done[0]));
  }
  if (a->mask[1]) {
    /* the bias gradient sums over Y's channels: with the weight's when
     * those are the output's (not transposed) */
    bool with_bias = a->mask[2] && !a->transposed;
    const tpu_view_t *x = a->transposed ? a->grad_out : a->input,
                     *y = a->transposed ? a->input : a->grad_out;
    bool done = false;
    TPU_RETURN_IF_ERROR(
        run_dir(a, DIR_W, x, &outs[1], y, with_bias ? &outs[2] : NULL, graph, &done));
    out_done[1] = done;
    out_done[2] = done && with_bias;
  }
  return TPU_OK;
}
