/* sort.c — the sort/search family: sort (stable or not, ascending or
 * descending), topk, kthvalue, median/nanmedian (with and without dim), mode,
 * searchsorted and bucketize; argsort and msort reach sort through
 * PyTorch's composite kernels. Also the sort-like RNG ops: randperm (the
 * order of per-element Philox keys) and multinomial (top-k of p / Exp(1)
 * without replacement, inverse CDF with it), drawn from the row's seed and
 * offset attrs like the random family, so reproducible from the generator.
 *
 * Results equal PyTorch CPU's exactly, indices of ties included: each op
 * runs the algorithm CPU's kernel runs (sort_algo.h ports libstdc++'s
 * introsort/introselect/heap select, and ATen's own quick select for
 * kthvalue) with the same comparator (NaN sorts as the largest value), on
 * (key, index) pairs where the key is the value in its compute type (int64,
 * float32 for half types, float64): the comparisons are those of CPU's
 * scalar type. CPU's special cases are kept: a stride-0 sort dim leaves the
 * identity order, and a 1-D ascending integer sort of at least 32768
 * elements (CPU's radix sort path) is stable.
 *
 * Layout: the dims other than `dim` form a row iterator (walk_t over input
 * and outputs, outputs without keepdim get a stride-0 dim); each row is
 * gathered (converted) into a key buffer, ordered, and its m results are
 * converted back with one tpu_convert per output. Rows are spread over
 * tpu_parallel_for. Per-key-type code is generated once per type (KEY_TYPES)
 * and picked from a table by compute type.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sort/sort.h"
#include "kernels/random/random.h"
#include "kernels/sort/sort_algo.h"

/* ---- per key type: generated code ------------------------------------------------ */

#define KEY_TYPES(X) X(i64, int64_t) X(f32, float) X(f64, double)

#define KV_DEFINE(S, K)                             \
  typedef struct kv_##S {                           \
    K k;                                            \
    int64_t i;                                      \
  } kv_##S;                                         \
  SA_ALL(asc_##S, kv_##S, SA_ASC)                   \
  SA_ALL(desc_##S, kv_##S, SA_DESC)                 \
  SA_ALL(lt_##S, kv_##S, SA_LT)                     \
  SA_ALL(med_##S, kv_##S, SA_MED)                   \
  SA_ALL(nanmed_##S, kv_##S, SA_NANMED)
KEY_TYPES(KV_DEFINE)
#undef KV_DEFINE

/* What a row's typed processing needs to know. */
typedef struct row_job {
  sort_kind_t kind;
  int64_t n, k;
  bool descending, stable, largest, sorted;
  bool identity; /* sort over a stride-0 dim: CPU keeps the identity order */
} row_job_t;

/* ATen's quick_select_template (SortingUtils.h) for kthvalue, with
 * gt_or_nan = SA_DESC and a swap that moves keys and indices together. */
#define QSELECT_DEFINE(S, K)                                               \
  static void qselect_##S(kv_##S* arr, int64_t n, int64_t k) {            \
    int64_t L = 0, R = n - 1, P, i, j;                                     \
    for (;;) {                                                             \
      if (R <= L) return;                                                  \
      if (R == L + 1) {                                                    \
        if (SA_DESC(arr[L], arr[R])) desc_##S##_swap(&arr[L], &arr[R]);    \
        return;                                                            \
      }                                                                    \
      P = L + (R - L) / 2;                                                 \
      desc_##S##_swap(&arr[P], &arr[L + 1]);                               \
      if (SA_DESC(arr[L + 1], arr[R])) desc_##S##_swap(&arr[L + 1], &arr[R]); \
      if (SA_DESC(arr[L], arr[R])) desc_##S##_swap(&arr[L], &arr[R]);      \
      if (SA_DESC(arr[L + 1], arr[L])) desc_##S##_swap(&arr[L + 1], &arr[L]); \
      i = L + 1;                                                           \
      j = R;                                                               \
      kv_##S piv = arr[L];                                                 \
      for (;;) {                                                           \
        do i++;                                                            \
        while (SA_DESC(piv, arr[i]));                                      \
        do j--;                                                            \
        while (SA_DESC(arr[j], piv));                                      \
        if (j < i) break;                                                  \
        desc_##S##_swap(&arr[i], &arr[j]);                                 \
      }                                                                    \
      desc_##S##_swap(&arr[L], &arr[j]);                                   \
      if (j <= k) L = i;                                                   \
      if (j >= k) R = j - 1;                                               \
    }                                                                      \
  }
KEY_TYPES(QSELECT_DEFINE)
#undef QSELECT_DEFINE

/* pack: keys -> (key, index) pairs; process: orders them, returns how many
 * results lead the array; unpack: results -> keys and indices. */
#define ROW_DEFINE(S, K)                                                                 \
  static void pack_##S(const void* keys, void* kv, int64_t n) {                         \
    const K* x = (const K*)keys;                                                        \
    kv_##S* p = (kv_##S*)kv;                                                            \
    for (int64_t j = 0; j < n; ++j) p[j].k = x[j], p[j].i = j;                          \
  }                                                                                     \
  static void unpack_##S(const void* kv, int64_t m, void* keys, int64_t* idx) {         \
    const kv_##S* p = (const kv_##S*)kv;                                                \
    K* x = (K*)keys;                                                                    \
    for (int64_t j = 0; j < m; ++j) x[j] = p[j].k, idx[j] = p[j].i;                     \
  }                                                                                     \
  static int64_t process_##S(const row_job_t* jb, void* kvp, void* tmpp) {              \
    kv_##S *a = (kv_##S*)kvp, *tmp = (kv_##S*)tmpp;                                     \
    int64_t n = jb->n, k = jb->k;                                                       \
    switch (jb->kind) {                                                                 \
      case SK_SORT:                                                                     \
        if (jb->identity) return n;                                                     \
        if (jb->stable) {                                                               \
          if (jb->descending) desc_##S##_stable_sort(a, n, tmp);                        \
          else asc_##S##_stable_sort(a, n, tmp);                                        \
        } else {                                                                        \
          if (jb->descending) desc_##S##_sort(a, n);                                    \
          else asc_##S##_sort(a, n);                                                    \
        }                                                                               \
        return n;                                                                       \
      case SK_TOPK:                                                                     \
        if (k == 0) return 0;                                                           \
        if (k * 64 <= n) {                                                              \
          if (jb->largest) desc_##S##_partial_sort(a, k, n);                            \
          else asc_##S##_partial_sort(a, k, n);                                         \
        } else if (jb->largest) {                                                       \
          desc_##S##_nth_element(a, k - 1, n);                                          \
          if (jb->sorted) desc_##S##_sort(a, k - 1);                                    \
        } else {                                                                        \
          asc_##S##_nth_element(a, k - 1, n);                                           \
          if (jb->sorted) asc_##S##_sort(a, k - 1);                                     \
        }                                                                               \
        return k;                                                                       \
      case SK_KTH:                                                                      \
        qselect_##S(a, n, k - 1);                                                       \
        a[0] = a[k - 1];                                                                \
        return 1;                                                                       \
      case SK_MEDIAN:                                                                   \
        for (int64_t j = 0; j < n; ++j)                                                 \
          if (SA_ISNAN(a[j].k)) {                                                       \
            a[0] = a[j];                                                                \
            return 1;                                                                   \
          }                                                                             \
        med_##S##_nth_element(a, (n - 1) / 2, n);                                       \
        a[0] = a[(n - 1) / 2];                                                          \
        return 1;                                                                       \
      case SK_NANMEDIAN: {                                                              \
        int64_t nans = 0;                                                               \
        for (int64_t j = 0; j < n; ++j) nans += SA_ISNAN(a[j].k);                       \
        int64_t nth = (n - nans - 1) / 2;                                               \
        nanmed_##S##_nth_element(a, nth, n);                                            \
        a[0] = a[nth];                                                                  \
        return 1;                                                                       \
      }                                                                                 \
      case SK_MODE: {                                                                   \
        lt_##S##_sort(a, n);                                                            \
        kv_##S best = a[0];                                                             \
        int64_t freq = 0, max_freq = 0;                                                 \
        for (int64_t j = 0; j < n; ++j) {                                               \
          freq++;                                                                       \
          if (j == n - 1 || a[j].k != a[j + 1].k) {                                     \
            if (freq > max_freq) best = a[j], max_freq = freq;                          \
            freq = 0;                                                                   \
          }                                                                             \
        }                                                                               \
        a[0] = best;                                                                    \
        return 1;                                                                       \
      }                                                                                 \
      case SK_MEDIAN_ALL:                                                               \
      case SK_NANMEDIAN_ALL: {                                                          \
        int64_t c = 0;                                                                  \
        for (int64_t j = 0; j < n; ++j)                                                 \
          if (!SA_ISNAN(a[j].k)) a[c++] = a[j];                                         \
        if (c == 0 || (c < n && jb->kind == SK_MEDIAN_ALL)) return -1; /* NaN */       \
        lt_##S##_nth_element(a, (c - 1) / 2, c);                                        \
        a[0] = a[(c - 1) / 2];                                                          \
        return 1;                                                                       \
      }                                                                                 \
      default:                                                                          \
        return 0;                                                                       \
    }                                                                                   \
  }                                                                                     \
  /* topk's partial_sort (k * 64 <= n) reading keys in place: heap_select only    \
   * reads the elements past k (those it evicts go where nobody looks again), so   \
   * they need not be packed first. Same comparisons and moves on [0, k). */        \
  static void topk_heap_##S(const void* keysp, void* kvp, int64_t n, int64_t k,        \
                            bool largest) {                                            \
    const K* x = (const K*)keysp;                                                       \
    kv_##S* h = (kv_##S*)kvp;                                                           \
    for (int64_t j = 0; j < k; ++j) h[j].k = x[j], h[j].i = j;                          \
    if (largest) {                                                                      \
      desc_##S##_make_heap(h, h + k);                                                   \
      for (int64_t j = k; j < n; ++j) {                                                 \
        kv_##S e = {x[j], j};                                                           \
        if (SA_DESC(e, h[0])) desc_##S##_adjust_heap(h, 0, k, e);                       \
      }                                                                                 \
      desc_##S##_sort_heap(h, h + k);                                                   \
    } else {                                                                            \
      asc_##S##_make_heap(h, h + k);                                                    \
      for (int64_t j = k; j < n; ++j) {                                                 \
        kv_##S e = {x[j], j};                                                           \
        if (SA_ASC(e, h[0])) asc_##S##_adjust_heap(h, 0, k, e);                         \
      }                                                                                 \
      asc_##S##_sort_heap(h, h + k);                                                    \
    }                                                                                   \
  }                                                                                     \
  /* lower_bound / upper_bound of ATen's searchsorted (cus_lower_bound). */             \
  static void search_##S(const void* bdp, const int64_t* sorter, int64_t len,          \
                         const void* valp, int64_t* out, int64_t count, bool right) {   \
    const K* bd = (const K*)bdp;                                                        \
    const K* vals = (const K*)valp;                                                     \
    for (int64_t q = 0; q < count; ++q) {                                               \
      K val = vals[q];                                                                  \
      int64_t start = 0, end = len;                                                     \
      while (start < end) {                                                             \
        int64_t mid = start + ((end - start) >> 1);                                     \
        K mv = sorter ? bd[sorter[mid]] : bd[mid];                                      \
        bool go = right ? !(mv > val) : !(mv >= val);                                   \
        if (go) start = mid + 1;                                                        \
        else end = mid;                                                                 \
      }                                                                                 \
      out[q] = start;                                                                   \
    }                                                                                   \
  }
KEY_TYPES(ROW_DEFINE)
#undef ROW_DEFINE

typedef struct key_ops {
  tpu_dtype_t dtype; /* the key's storage dtype */
  size_t kv_size;
  void (*pack)(const void* keys, void* kv, int64_t n);
  void (*unpack)(const void* kv, int64_t m, void* keys, int64_t* idx);
  int64_t (*process)(const row_job_t* jb, void* kv, void* tmp);
  void (*search)(const void* bd, const int64_t* sorter, int64_t len, const void* vals,
                 int64_t* out, int64_t count, bool right);
  void (*topk_heap)(const void* keys, void* kv, int64_t n, int64_t k, bool largest);
} key_ops_t;

static const key_ops_t k_key_ops[3] = {
    {TPU_DTYPE_I64, sizeof(kv_i64), pack_i64, unpack_i64, process_i64, search_i64,
     topk_heap_i64},
    {TPU_DTYPE_F32, sizeof(kv_f32), pack_f32, unpack_f32, process_f32, search_f32,
     topk_heap_f32},
    {TPU_DTYPE_F64, sizeof(kv_f64), pack_f64, unpack_f64, process_f64, search_f64,
     topk_heap_f64},
};
/* Key type of each compute type (bool and integers: int64). */
static const int k_key_of_compute[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_B8] = 0, [TPU_COMPUTE_I64] = 0, [TPU_COMPUTE_F32] = 1, [TPU_COMPUTE_F64] = 2};

static const key_ops_t* key_ops_for(tpu_dtype_t dt) {
  return &k_key_ops[k_key_of_compute[tpu_dtype_compute(dt)]];
}

/* ---- parsing ------------------------------------------------------------------- */

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

tpu_status_t tpu_sort_parse(const tpu_op_def_t* def, const tpu_node_t* node, sort_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = ((const sort_impl_t*)def->impl)->kind;
  a->in = ku_input(def, node, "self");
  if (!a->in) return unimpl("expected a tensor for 'self'");
  const tpu_view_t* in = a->in;
  bool all = a->kind == SK_MEDIAN_ALL || a->kind == SK_NANMEDIAN_ALL;
  if (in->dtype == TPU_DTYPE_BOOL && a->kind != SK_SORT && a->kind != SK_MODE)
    return unimpl("no bool kernel on CPU");
  a->num_outputs = all ? 1 : 2;
  tpu_view_t* s = a->shape;
  s[0] = *in;
  s[0].addr = 0;
  s[1] = s[0];
  s[1].dtype = TPU_DTYPE_I64;
  if (all) {
    a->n = tpu_view_numel(in);
    a->m = 1;
    s[0].ndim = 0;
    tpu_view_set_contiguous(&s[0]);
    return TPU_OK;
  }
  int64_t dim = tpu_attr_int(ku_attr(def, node, "dim"), -1);
  TPU_RETURN_IF_ERROR(ku_wrap_dim(dim, in->ndim, &a->dim));
  a->n = in->ndim ? in->sizes[a->dim] : 1;
  bool keepdim = tpu_attr_bool(ku_attr(def, node, "keepdim"), false);
  a->k = tpu_attr_int(ku_attr(def, node, "k"), 1);
  switch (a->kind) {
    case SK_SORT:
      a->stable = tpu_attr_bool(ku_attr(def, node, "stable"), false);
      a->descending = tpu_attr_bool(ku_attr(def, node, "descending"), false);
      a->m = a->n;
      break;
    case SK_TOPK:
      a->largest = tpu_attr_bool(ku_attr(def, node, "largest"), true);
      a->sorted = tpu_attr_bool(ku_attr(def, node, "sorted"), true);
      if (a->k < 0 || a->k > a->n) return unimpl("selected index k out of range");
      a->m = a->k;
      break;
    case SK_KTH:
      if (a->k < 1 || a->k > a->n) return unimpl("selected number k out of range");
      a->m = 1;
      break;
    default:
      if (a->n == 0) return unimpl("cannot reduce a dimension of size 0");
      a->m = 1;
      break;
  }
  if (in->ndim > 0 && (a->kind == SK_SORT || a->kind == SK_TOPK)) {
    s[0].sizes[a->dim] = s[1].sizes[a->dim] = a->m;
  } else if (in->ndim > 0 && keepdim) {
    s[0].sizes[a->dim] = s[1].sizes[a->dim] = 1;
  } else if (in->ndim > 0) {
    for (int32_t d = a->dim; d + 1 < in->ndim; ++d)
      s[0].sizes[d] = s[1].sizes[d] = in->sizes[d + 1];
    s[0].ndim = s[1].ndim = in->ndim - 1;
  }
  tpu_view_set_contiguous(&s[0]);
  tpu_view_set_contiguous(&s[1]);
  return TPU_OK;
}

static tpu_status_t sort_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  sort_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_sort_parse(def, node, &a)));
  for (int i = 0; i < a.num_outputs; ++i) out_views[i] = a.shape[i];
  return TPU_OK;
}

static tpu_status_t sort_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  sort_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(tpu_sort_parse(def, node, &a)));
  return ku_check_dim_outputs(node, a.in, a.shape, a.num_outputs);
}

/* ---- the dim kernels ------------------------------------------------------------ */

typedef struct sort_plan {
  const sort_args_t* a;
  const key_ops_t* ops;
  row_job_t job;
  walk_t rows; /* views: input, values, indices */
  const tpu_view_t* out[2];
  int64_t steps[3]; /* along dim */
  int failed;       /* no host memory in some chunk */
} sort_plan_t;

static void sort_rows(void* arg, int64_t begin, int64_t end) {
  sort_plan_t* p = (sort_plan_t*)arg;
  const sort_args_t* a = p->a;
  const key_ops_t* ops = p->ops;
  int64_t n = a->n;
  size_t nn = (size_t)(n > 0 ? n : 1);
  char* keys = malloc(nn * 8);
  int64_t* idx = malloc(nn * sizeof(int64_t));
  char* kv = malloc(nn * ops->kv_size);
  char* tmp = (a->kind == SK_SORT && p->job.stable) ? malloc(nn * ops->kv_size) : NULL;
  if (!keys || !idx || !kv || (a->kind == SK_SORT && p->job.stable && !tmp)) {
    __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
  } else {
    int64_t offs[3];
    const tpu_view_t* in = a->in;
    for (int64_t r = begin; r < end; ++r) {
      walk_offsets(&p->rows, p->rows.ndim, r, offs);
      tpu_convert(keys, ops->dtype, 1, view_at(in, offs[0]), in->dtype, p->steps[0], n);
      int64_t m;
      if (a->kind == SK_TOPK && a->k > 0 && a->k * 64 <= n) {
        ops->topk_heap(keys, kv, n, a->k, a->largest);
        m = a->k;
      } else {
        ops->pack(keys, kv, n);
        m = ops->process(&p->job, kv, tmp);
      }
      ops->unpack(kv, m, keys, idx);
      tpu_convert(view_at(p->out[0], offs[1]), p->out[0]->dtype, p->steps[1], keys, ops->dtype,
                  1, m);
      if (p->out[1])
        tpu_convert(view_at(p->out[1], offs[2]), TPU_DTYPE_I64, p->steps[2], idx, TPU_DTYPE_I64,
                    1, m);
    }
  }
  free(keys);
  free(idx);
  free(kv);
  free(tmp);
}

/* An output view with the input's rank (a size-1, stride-0 dim put back at
 * `dim` when keepdim is false). */
static tpu_view_t with_dim(const tpu_view_t* o, int32_t ndim, int32_t dim) {
  tpu_view_t v = *o;
  if (o->ndim == ndim) return v;
  for (int32_t d = ndim - 1; d > dim; --d) v.sizes[d] = o->sizes[d - 1], v.strides[d] = o->strides[d - 1];
  v.sizes[dim] = 1;
  v.strides[dim] = 0;
  v.ndim = ndim;
  return v;
}

static tpu_status_t whole_kernel(const sort_args_t* a, const tpu_node_t* node) {
  /* median/nanmedian over every element: the value only. */
  const key_ops_t* ops = key_ops_for(a->in->dtype);
  int64_t n = a->n;
  size_t nn = (size_t)(n > 0 ? n : 1);
  char* keys = malloc(nn * 8);
  char* kv = malloc(nn * ops->kv_size);
  int64_t idx = 0;
  tpu_status_t s = TPU_OK;
  if (!keys || !kv) {
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for %lld keys", (long long)n);
  } else {
    walk_t w;
    walk_init_tail(&w, a->in, 0);
    walk_gather(keys, ops->dtype, tpu_view_ptr(a->in), a->in->dtype, &w, 0, n);
    ops->pack(keys, kv, n);
    row_job_t jb = {.kind = a->kind, .n = n};
    if (ops->process(&jb, kv, NULL) < 0) {
      view_set_f64(&node->outputs[0], 0, NAN);
    } else {
      ops->unpack(kv, 1, keys, &idx);
      tpu_convert(tpu_view_ptr(&node->outputs[0]), node->outputs[0].dtype, 1, keys, ops->dtype,
                  1, 1);
    }
  }
  free(keys);
  free(kv);
  return s;
}

static tpu_status_t sort_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  sort_args_t a;
  TPU_RETURN_IF_ERROR(tpu_sort_parse(def, node, &a));
  tpu_status_t s = ku_check_dim_outputs(node, a.in, a.shape, a.num_outputs);
  if (s) {
    tpu_status_t e = tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "%s", tpu_status_message(s));
    tpu_status_free(s);
    return e;
  }
  if (a.kind == SK_MEDIAN_ALL || a.kind == SK_NANMEDIAN_ALL) {
    if (a.n == 0) {
      view_set_f64(&node->outputs[0], 0, NAN);
      return TPU_OK;
    }
    return whole_kernel(&a, node);
  }
  const tpu_view_t* in = a.in;
  int32_t nd = in->ndim;
  sort_plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.ops = key_ops_for(in->dtype);
  p.job = (row_job_t){a.kind, a.n, a.k, a.descending, a.stable, a.largest, a.sorted, false};
  tpu_view_t o0 = with_dim(&node->outputs[0], nd, a.dim);
  tpu_view_t o1 = with_dim(&node->outputs[1], nd, a.dim);
  p.out[0] = &o0;
  p.out[1] = &o1;
  if (nd > 0) {
    p.steps[0] = in->strides[a.dim];
    p.steps[1] = o0.strides[a.dim];
    p.steps[2] = o1.strides[a.dim];
  }
  if (a.kind == SK_SORT) {
    if (nd > 0 && in->strides[a.dim] == 0) p.job.identity = true;
    /* CPU's radix sort path (1-D, integral, >= GRAIN_SIZE, ascending) is stable. */
    if (nd == 1 && a.n >= 32768 && tpu_dtype_is_integral(in->dtype) && !a.descending)
      p.job.stable = true;
  }
  walk_start(&p.rows, 3);
  for (int32_t d = 0; d < nd; ++d) {
    if (d == a.dim) continue;
    int64_t st[3] = {in->strides[d], o0.strides[d], o1.strides[d]};
    walk_add(&p.rows, in->sizes[d], st);
  }
  walk_order(&p.rows);
  int64_t rows = p.rows.numel;
  if (rows == 0 || (a.n == 0 && a.m == 0)) return TPU_OK;
  int64_t work = a.n > 0 ? a.n : 1;
  int64_t grain = work >= 16384 ? 1 : 16384 / work;
  tpu_parallel_for(rows, grain, sort_rows, &p);
  if (p.failed)
    TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for rows of %lld", (long long)a.n);
  return TPU_OK;
}

/* ---- searchsorted / bucketize ---------------------------------------------------- */

#define SEARCH_CHUNK 1024

typedef struct search_args {
  const tpu_view_t* bd;     /* sorted sequence / boundaries */
  tpu_view_t x;             /* the values (a 0-dim view of a scalar) */
  const tpu_view_t* sorter; /* or NULL */
  bool right;
  tpu_dtype_t common;  /* the dtype both are compared in */
  tpu_view_t shape;    /* the output */
  uint64_t scalar;     /* storage of a scalar x */
} search_args_t;

static tpu_status_t search_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                 search_args_t* a) {
  memset(a, 0, sizeof(*a));
  bool bucket = ((const sort_impl_t*)def->impl)->kind == SK_BUCKETIZE;
  const char* bname = bucket ? "boundaries" : "sorted_sequence";
  int32_t bi = tpu_spec_index(def->inputs, bname), xi = tpu_spec_index(def->inputs, "self");
  if (bi < 0 || xi < 0 || bi >= node->num_inputs || xi >= node->num_inputs)
    return unimpl("missing inputs");
  a->bd = ku_input(def, node, bname);
  const tpu_value_t* xv = &node->inputs[xi];
  if (!a->bd || xv->kind == TPU_VALUE_NONE) return unimpl("missing inputs");
  tpu_value_to_view(xv, TPU_DTYPE_INVALID, &a->scalar, &a->x);
  a->sorter = ku_input(def, node, "sorter");
  const tpu_view_t *bd = a->bd, *x = &a->x;
  if (bd->dtype == TPU_DTYPE_BOOL || x->dtype == TPU_DTYPE_BOOL) return unimpl("bool inputs");
  if (bd->ndim == 0) return unimpl("boundaries of 0 dims");
  if (bucket && bd->ndim != 1) return unimpl("boundaries must be 1-D");
  if (bd->ndim > 1) {
    if (x->ndim != bd->ndim) return unimpl("leading dims differ");
    for (int32_t d = 0; d + 1 < bd->ndim; ++d)
      if (x->sizes[d] != bd->sizes[d]) return unimpl("leading dims differ");
  }
  if (a->sorter) {
    if (a->sorter->dtype != TPU_DTYPE_I64 || !views_same_shape(a->sorter, bd))
      return unimpl("sorter must be int64 of the boundaries' shape");
  }
  a->right = tpu_attr_bool(ku_attr(def, node, "right"), false);
  const tpu_attr_t* side = ku_attr(def, node, "side");
  if (side && side->kind == TPU_ATTR_STR) {
    if (strcmp(side->u.str, "right") == 0) {
      a->right = true;
    } else if (strcmp(side->u.str, "left") == 0) {
      if (a->right) return unimpl("side 'left' with right=True");
    } else {
      return unimpl("side must be 'left' or 'right'");
    }
  }
  tpu_value_t both[2];
  both[0] = node->inputs[bi];
  both[1] = *xv;
  a->common = tpu_result_type(both, 2);
  if (a->common == TPU_DTYPE_INVALID || a->common == TPU_DTYPE_BOOL)
    return unimpl("no common dtype");
  bool i32 = tpu_attr_bool(ku_attr(def, node, "out_int32"), false);
  a->shape = *x;
  a->shape.addr = 0;
  a->shape.dtype = i32 ? TPU_DTYPE_I32 : TPU_DTYPE_I64;
  tpu_view_set_contiguous(&a->shape);
  return TPU_OK;
}

static tpu_status_t search_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_view_t* out_views) {
  search_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(search_parse(def, node, &a)));
  out_views[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t search_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  search_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(search_parse(def, node, &a)));
  if (node->num_outputs < 1) return unimpl("missing output");
  const tpu_view_t* o = &node->outputs[0];
  if (!views_same_shape(o, &a.shape) || o->dtype != a.shape.dtype)
    return unimpl("output of another shape or dtype");
  if (o->addr > 1 && (views_overlap(o, a.bd) || (a.x.ndim > 0 && views_overlap(o, &a.x))))
    return unimpl("output overlaps an input");
  return TPU_OK;
}

typedef struct search_plan {
  const search_args_t* a;
  const key_ops_t* ops;
  const char* bd;  /* boundaries as keys, contiguous */
  const int64_t* sorter;
  int64_t len;     /* boundaries per row */
  int64_t inner;   /* values per boundaries row (all of them for 1-D boundaries) */
  bool one_row;
  walk_t xw, ow;   /* values and output in logical order */
  const tpu_view_t* out;
} search_plan_t;

static void search_chunks(void* arg, int64_t begin, int64_t end) {
  const search_plan_t* p = (const search_plan_t*)arg;
  const search_args_t* a = p->a;
  uint64_t tmp[SEARCH_CHUNK], keys[SEARCH_CHUNK];
  int64_t pos[SEARCH_CHUNK];
  size_t ksz = tpu_dtype_size(p->ops->dtype);
  for (int64_t c = begin; c < end; ++c) {
    int64_t k0 = c * SEARCH_CHUNK, cnt = SEARCH_CHUNK;
    int64_t total = p->xw.numel;
    if (k0 + cnt > total) cnt = total - k0;
    walk_gather(tmp, a->common, tpu_view_ptr(&a->x), a->x.dtype, &p->xw, k0, cnt);
    tpu_convert(keys, p->ops->dtype, 1, tmp, a->common, 1, cnt);
    for (int64_t q = 0; q < cnt;) {
      int64_t row = p->one_row ? 0 : (k0 + q) / p->inner;
      int64_t stop = p->one_row ? cnt : (row + 1) * p->inner - k0;
      if (stop > cnt) stop = cnt;
      p->ops->search(p->bd + (size_t)(row * p->len) * ksz,
                     p->sorter ? p->sorter + row * p->len : NULL, p->len,
                     (const char*)keys + (size_t)q * ksz, pos + q, stop - q, a->right);
      q = stop;
    }
    walk_scatter(tpu_view_ptr(p->out), p->out->dtype, &p->ow, k0, pos, TPU_DTYPE_I64, cnt);
  }
}

static tpu_status_t search_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  search_args_t a;
  TPU_RETURN_IF_ERROR(search_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  if (node->num_outputs < 1 || !views_same_shape(out, &a.shape))
    TPU_KERNEL_FAIL(TPU_CODE_INVALID_ARGUMENT, "output of another shape");
  search_plan_t p;
  memset(&p, 0, sizeof(p));
  p.a = &a;
  p.ops = key_ops_for(a.common);
  p.out = out;
  int64_t nb = tpu_view_numel(a.bd);
  p.len = a.bd->sizes[a.bd->ndim - 1];
  p.one_row = a.bd->ndim == 1;
  p.inner = a.x.ndim > 0 ? a.x.sizes[a.x.ndim - 1] : 1;
  int64_t nx = tpu_view_numel(&a.x);
  if (nx == 0) return TPU_OK;
  size_t nn = (size_t)(nb > 0 ? nb : 1);
  char* common = malloc(nn * 8);
  char* bd = malloc(nn * 8);
  int64_t* sorter = a.sorter ? malloc(nn * sizeof(int64_t)) : NULL;
  tpu_status_t s = TPU_OK;
  if (!common || !bd || (a.sorter && !sorter)) {
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for %lld boundaries",
                        (long long)nb);
  } else {
    walk_t w;
    walk_init_tail(&w, a.bd, 0);
    walk_gather(common, a.common, tpu_view_ptr(a.bd), a.bd->dtype, &w, 0, nb);
    tpu_convert(bd, p.ops->dtype, 1, common, a.common, 1, nb);
    p.bd = bd;
    if (a.sorter) {
      walk_init_tail(&w, a.sorter, 0);
      walk_gather(sorter, TPU_DTYPE_I64, tpu_view_ptr(a.sorter), TPU_DTYPE_I64, &w, 0, nb);
      for (int64_t i = 0; i < nb && s == TPU_OK; ++i)
        if (sorter[i] < 0 || sorter[i] >= p.len)
          s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                              "torch.searchsorted(): sorter index out of range");
      p.sorter = sorter;
    }
    if (s == TPU_OK) {
      walk_init_tail(&p.xw, &a.x, 0);
      walk_init_tail(&p.ow, out, 0);
      int64_t chunks = (nx + SEARCH_CHUNK - 1) / SEARCH_CHUNK;
      tpu_parallel_for(chunks, 16, search_chunks, &p);
    }
  }
  free(common);
  free(bd);
  free(sorter);
  return s;
}


/* ---- randperm and multinomial: sorting random keys ------------------------------ */

/* Largest n whose values 0..n-1 the output dtype holds exactly (0: not native). */
static const int64_t k_perm_max[TPU_DTYPE_COUNT] = {
    [TPU_DTYPE_U8] = 256, [TPU_DTYPE_I8] = 128, [TPU_DTYPE_I16] = 32768,
    [TPU_DTYPE_I32] = (int64_t)1 << 31, [TPU_DTYPE_I64] = INT64_MAX,
    [TPU_DTYPE_F16] = 2049, [TPU_DTYPE_BF16] = 257, [TPU_DTYPE_F32] = ((int64_t)1 << 24) + 1,
    [TPU_DTYPE_F64] = ((int64_t)1 << 53) + 1};

static tpu_status_t perm_parse(const tpu_op_def_t* def, const tpu_node_t* node, int64_t* n,
                               tpu_view_t* shape) {
  *n = tpu_attr_int(ku_attr(def, node, "n"), -1);
  if (*n < 0) return unimpl("n must be non-negative");
  memset(shape, 0, sizeof(*shape));
  shape->dtype = TPU_DTYPE_I64;
  shape->ndim = 1;
  shape->sizes[0] = *n;
  tpu_view_set_contiguous(shape);
  return TPU_OK;
}

static tpu_status_t perm_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out_views) {
  int64_t n;
  return perm_parse(def, node, &n, &out_views[0]);
}

static tpu_status_t perm_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  int64_t n;
  tpu_view_t shape;
  TPU_RETURN_IF_ERROR(perm_parse(def, node, &n, &shape));
  if (node->num_outputs == 0) return TPU_OK;
  const tpu_view_t* o = &node->outputs[0];
  if (o->ndim != 1 || o->sizes[0] != n) return unimpl("output of another shape");
  if (o->dtype < 0 || o->dtype >= TPU_DTYPE_COUNT || n > k_perm_max[o->dtype])
    return unimpl("n does not fit the output dtype");
  return TPU_OK;
}

/* The 64-bit Philox key of element i of a stream, in a counter space of its
 * own (word 3 = tag) so draws never overlap the random family's. */
static int64_t rand_key(uint64_t seed, uint64_t offset, int64_t i, uint32_t j, uint32_t tag) {
  uint64_t c = offset + (uint64_t)i;
  const uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), j, tag};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t w[4];
  tpu_philox4x32_10(ctr, key, w);
  return (int64_t)(((uint64_t)w[0] << 32) | w[1]);
}

/* randperm: element i gets a random 64-bit key; the permutation is the
 * order of the keys (ties, all but impossible, by index): uniform, and a
 * function of (seed, offset) only. */
static tpu_status_t perm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  TPU_RETURN_IF_ERROR(perm_check(def, node));
  int64_t n = node->outputs[0].sizes[0];
  uint64_t seed = (uint64_t)tpu_attr_int(ku_attr(def, node, "seed"), 0);
  uint64_t offset = (uint64_t)tpu_attr_int(ku_attr(def, node, "offset"), 0);
  kv_i64* kv = malloc(sizeof(kv_i64) * (size_t)(n > 0 ? n : 1));
  int64_t* idx = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  tpu_status_t s = TPU_OK;
  if (!kv || !idx) {
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for randperm(%lld)", (long long)n);
  } else {
    for (int64_t i = 0; i < n; ++i) kv[i].k = rand_key(seed, offset, i, 0, 1), kv[i].i = i;
    med_i64_sort(kv, n); /* key, then index: a total order */
    for (int64_t i = 0; i < n; ++i) idx[i] = kv[i].i;
    const tpu_view_t* o = &node->outputs[0];
    tpu_convert(tpu_view_ptr(o), o->dtype, o->strides[0], idx, TPU_DTYPE_I64, 1, n);
  }
  free(kv);
  free(idx);
  return s;
}

typedef struct multi_args {
  const tpu_view_t* p;
  int64_t rows, cats, samples;
  bool replacement;
  tpu_view_t shape;
} multi_args_t;

static tpu_status_t multi_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                multi_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->p = ku_input(def, node, "self");
  if (!a->p) return unimpl("expected a tensor");
  const tpu_view_t* p = a->p;
  if (!tpu_dtype_is_floating(p->dtype) || p->ndim < 1 || p->ndim > 2)
    return unimpl("multinomial takes a 1-D or 2-D floating tensor");
  a->samples = tpu_attr_int(ku_attr(def, node, "num_samples"), 0);
  a->replacement = tpu_attr_bool(ku_attr(def, node, "replacement"), false);
  a->cats = p->sizes[p->ndim - 1];
  a->rows = p->ndim == 2 ? p->sizes[0] : 1;
  if (a->samples <= 0 || a->cats <= 0 || (!a->replacement && a->samples > a->cats))
    return unimpl("invalid number of samples or categories");
  a->shape = *p;
  a->shape.addr = 0;
  a->shape.dtype = TPU_DTYPE_I64;
  a->shape.sizes[p->ndim - 1] = a->samples;
  tpu_view_set_contiguous(&a->shape);
  return TPU_OK;
}

static tpu_status_t multi_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_view_t* out_views) {
  multi_args_t a;
  TPU_RETURN_IF_ERROR(multi_parse(def, node, &a));
  out_views[0] = a.shape;
  return TPU_OK;
}

static tpu_status_t multi_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  multi_args_t a;
  TPU_RETURN_IF_ERROR(multi_parse(def, node, &a));
  if (node->num_outputs == 0) return TPU_OK;
  const tpu_view_t* o = &node->outputs[0];
  if (!views_same_shape(o, &a.shape) || o->dtype != TPU_DTYPE_I64)
    return unimpl("output of another shape or dtype");
  return TPU_OK;
}

/* Per row, with its own counters (offset + row * samples): without
 * replacement (or one sample) CPU's method, the top `samples` of p / Exp(1)
 * (exponential races: each draw is the next category to finish); with
 * replacement, inverse-CDF sampling by binary search. */
static tpu_status_t multi_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  (void)ctx;
  multi_args_t a;
  TPU_RETURN_IF_ERROR(multi_parse(def, node, &a));
  const tpu_view_t* o = &node->outputs[0];
  uint64_t seed = (uint64_t)tpu_attr_int(ku_attr(def, node, "seed"), 0);
  uint64_t offset = (uint64_t)tpu_attr_int(ku_attr(def, node, "offset"), 0);
  int64_t n = a.cats, ns = a.samples;
  /* No rows: nothing to draw, and num_samples alone (unbounded by any view
   * then) must not size the scratch (the fuzzer asked for 2^40 samples of
   * zero rows). */
  if (tpu_view_numel(o) == 0) return TPU_OK;
  double* p = malloc(sizeof(double) * (size_t)n);
  kv_f64* kv = malloc(sizeof(kv_f64) * (size_t)n);
  int64_t* res = malloc(sizeof(int64_t) * (size_t)ns);
  tpu_status_t s = TPU_OK;
  if (!p || !kv || !res)
    s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "no host memory for multinomial");
  walk_t w;
  walk_init_tail(&w, a.p, a.p->ndim - 1);
  for (int64_t r = 0; r < a.rows && s == TPU_OK; ++r) {
    int64_t poff = a.p->ndim == 2 ? r * a.p->strides[0] : 0;
    int64_t ooff = o->ndim == 2 ? r * o->strides[0] : 0;
    walk_gather(p, TPU_DTYPE_F64, view_at(a.p, poff), a.p->dtype, &w, 0, n);
    double total = 0.0;
    for (int64_t j = 0; j < n && s == TPU_OK; ++j) {
      if (!(p[j] >= 0.0 && p[j] < INFINITY))
        s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                            "probability tensor contains either `inf`, `nan` or element < 0");
      total += p[j];
    }
    if (s == TPU_OK && !(total > 0.0))
      s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                          "invalid multinomial distribution (sum of probabilities <= 0)");
    if (s != TPU_OK) break;
    uint64_t base = offset + (uint64_t)(r * ns);
    if (!a.replacement || ns == 1) {
      for (int64_t j = 0; j < n; ++j) {
        uint64_t bits = (uint64_t)rand_key(seed, base, 0, (uint32_t)j, 2) >> 11;
        double e = -log1p(-(double)bits * 0x1p-53); /* Exp(1) */
        kv[j].k = p[j] / e;
        kv[j].i = j;
      }
      desc_f64_partial_sort(kv, ns, n);
      for (int64_t q = 0; q < ns; ++q) res[q] = kv[q].i;
    } else {
      for (int64_t j = 1; j < n; ++j) p[j] += p[j - 1];
      for (int64_t q = 0; q < ns; ++q) {
        uint64_t bits = (uint64_t)rand_key(seed, base, q, 0, 3) >> 11;
        double u = (double)bits * 0x1p-53 * p[n - 1];
        int64_t lo = 0, hi = n - 1; /* first j with cdf[j] > u */
        while (lo < hi) {
          int64_t mid = lo + (hi - lo) / 2;
          if (p[mid] > u) hi = mid;
          else lo = mid + 1;
        }
        res[q] = lo;
      }
    }
    tpu_convert(view_at(o, ooff), TPU_DTYPE_I64, o->strides[o->ndim - 1], res, TPU_DTYPE_I64, 1,
                ns);
  }
  free(p);
  free(kv);
  free(res);
  return s;
}

/* ---- the op table ---------------------------------------------------------------- */

static const sort_impl_t k_sort = {SK_SORT}, k_topk = {SK_TOPK}, k_kth = {SK_KTH},
                         k_median = {SK_MEDIAN}, k_nanmedian = {SK_NANMEDIAN},
                         k_mode = {SK_MODE}, k_median_all = {SK_MEDIAN_ALL},
                         k_nanmedian_all = {SK_NANMEDIAN_ALL}, k_search = {SK_SEARCH},
                         k_bucketize = {SK_BUCKETIZE};

#define DIM_ROW_F(name_, attrs_, outs, aten_, impl_, flags_) \
  {.name = name_, .inputs = "self", .attrs = attrs_, .outputs = outs, .aten = aten_, \
   .kernel = sort_kernel, .infer = sort_infer, .check = sort_check, .impl = impl_, .flags = flags_}
#define DIM_ROW(name, attrs, outs, aten, impl) DIM_ROW_F(name, attrs, outs, aten, impl, 0)

static const tpu_op_def_t k_rows[] = {
    DIM_ROW("sort", "stable,dim,descending", "values,indices",
            "sort.default sort.stable sort.values sort.values_stable", &k_sort),
    DIM_ROW("topk", "k,dim,largest,sorted", "values,indices", "topk topk.values", &k_topk),
    DIM_ROW_F("kthvalue", "k,dim,keepdim", "values,indices", "kthvalue kthvalue.values", &k_kth,
              TPU_OP_OUT_NO_OVERLAP),
    DIM_ROW("median_dim", "dim,keepdim", "values,indices", "median.dim median.dim_values",
            &k_median),
    DIM_ROW("nanmedian_dim", "dim,keepdim", "values,indices",
            "nanmedian.dim nanmedian.dim_values", &k_nanmedian),
    DIM_ROW("mode", "dim,keepdim", "values,indices", "mode mode.values", &k_mode),
    DIM_ROW("median", "", "out", "median.default median.out", &k_median_all),
    DIM_ROW("nanmedian", "", "out", "nanmedian.default nanmedian.out", &k_nanmedian_all),
    {.name = "searchsorted", .inputs = "sorted_sequence,self#,sorter?",
     .attrs = "out_int32,right,side", .outputs = "out",
     .aten = "searchsorted.Tensor searchsorted.Tensor_out searchsorted.Scalar searchsorted.Scalar_out",
     .kernel = search_kernel, .infer = search_infer, .check = search_check, .impl = &k_search},
    {.name = "bucketize", .inputs = "self#,boundaries", .attrs = "out_int32,right",
     .outputs = "out", .aten = "bucketize.Tensor bucketize.Tensor_out bucketize.Scalar",
     .kernel = search_kernel, .infer = search_infer, .check = search_check, .impl = &k_bucketize},
    {.name = "randperm", .inputs = "", .attrs = "n,seed,offset", .outputs = "out",
     .aten = "randperm.generator_out", .kernel = perm_kernel, .infer = perm_infer,
     .check = perm_check, .impl = NULL},
    {.name = "multinomial", .inputs = "self", .attrs = "num_samples,replacement,seed,offset",
     .outputs = "out", .aten = "multinomial multinomial.out", .kernel = multi_kernel,
     .infer = multi_infer, .check = multi_check, .impl = NULL},
};

const tpu_op_family_t tpu_family_sort = {"sort", k_rows,
                                         (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
