/* embedding_bag.c — the embedding_bag family: _embedding_bag and
 * _embedding_bag_forward_only (modes sum/mean/max, per_sample_weights,
 * padding_idx, include_last_offset), _embedding_bag_backward /
 * _embedding_bag_dense_backward and _embedding_bag_per_sample_weights_backward.
 *
 * Indices and offsets are loaded to int64 and checked first (PyTorch's
 * messages: offsets[0] must be 0, offsets[-1] within the input, each index in
 * [0, num_weights)). The forward runs in parallel over bags, accumulating a
 * row in the compute type (float32 for half types); its auxiliary outputs
 * follow the CPU kernel's: offset2bag [N], bag_size (non-padding indices per
 * bag for mean/max, zeros for sum), max_indices ([B, D] argmax rows for max,
 * bag_size for mean, zeros for sum; empty bags give 0). The weight gradient
 * buckets positions by index (a stable counting sort) and sums each weight
 * row in position order on one thread (max mode: each column in bag order),
 * so results do not depend on the thread count. Dtypes: float32/64, f16, bf16.
 * `embedding_bag_reference` is the plain reference the C tests compare with.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

typedef enum eb_kind { EB_FORWARD = 0, EB_BACKWARD, EB_DENSE_BACKWARD, EB_PSW_BACKWARD } eb_kind_t;
enum { EB_SUM = 0, EB_MEAN = 1, EB_MAX = 2 };

typedef struct eb_spec {
  eb_kind_t kind;
} eb_spec_t;

typedef struct eb_args {
  eb_kind_t kind;
  const tpu_view_t *weight, *grad, *indices, *offsets, *psw, *offset2bag, *bag_size, *max_indices;
  int64_t mode, padding_idx, num_weights, N, B, D;
  bool include_last_offset, scale_grad_by_freq;
  tpu_dtype_t dtype;
} eb_args_t;

static tpu_status_t unimpl(const char* w) { return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", w); }

static bool is_index(const tpu_view_t* v) {
  return v && (v->dtype == TPU_DTYPE_I64 || v->dtype == TPU_DTYPE_I32);
}

static tpu_status_t eb_parse(const tpu_op_def_t* def, const tpu_node_t* node, eb_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = ((const eb_spec_t*)def->impl)->kind;
  a->weight = ku_input(def, node, "weight");
  a->grad = ku_input(def, node, "grad");
  a->indices = ku_input(def, node, "indices");
  a->offsets = ku_input(def, node, "offsets");
  a->psw = ku_input(def, node, "per_sample_weights");
  a->offset2bag = ku_input(def, node, "offset2bag");
  a->bag_size = ku_input(def, node, "bag_size");
  a->max_indices = ku_input(def, node, "maximum_indices");
  a->mode = tpu_attr_int(ku_attr(def, node, "mode"), 0);
  a->padding_idx = tpu_attr_int(ku_attr(def, node, "padding_idx"), -1);
  a->include_last_offset = tpu_attr_bool(ku_attr(def, node, "include_last_offset"), false);
  a->scale_grad_by_freq = tpu_attr_bool(ku_attr(def, node, "scale_grad_by_freq"), false);
  if (tpu_attr_bool(ku_attr(def, node, "sparse"), false) && a->kind == EB_BACKWARD)
    return unimpl("sparse gradient");
  if (a->mode < 0 || a->mode > 2) return unimpl("mode");
  if (!is_index(a->indices) || a->indices->ndim != 1) return unimpl("indices");
  a->N = a->indices->sizes[0];
  const tpu_view_t* f = a->kind == EB_FORWARD || a->kind == EB_PSW_BACKWARD ? a->weight : a->grad;
  if (!f || f->ndim != 2 || !tpu_dtype_is_floating(f->dtype)) return unimpl("weight/grad");
  a->dtype = f->dtype;
  a->D = f->sizes[1];
  if (a->psw && (a->psw->dtype != a->dtype || a->psw->ndim != 1 || a->psw->sizes[0] != a->N ||
                 a->mode != EB_SUM))
    return unimpl("per_sample_weights");
  if (a->offsets && (!is_index(a->offsets) || a->offsets->ndim != 1)) return unimpl("offsets");
  switch (a->kind) {
    case EB_FORWARD:
      if (!a->offsets) return unimpl("offsets");
      if (a->weight->dtype != a->dtype) return unimpl("dtype");
      a->num_weights = a->weight->sizes[0];
      a->B = a->offsets->sizes[0] - (a->include_last_offset ? 1 : 0);
      if (a->B < 0) return unimpl("offsets");
      return TPU_OK;
    case EB_BACKWARD:
    case EB_DENSE_BACKWARD:
      a->num_weights = tpu_attr_int(ku_attr(def, node, "num_weights"), -1);
      a->B = a->grad->sizes[0];
      if (a->num_weights < 0 || !is_index(a->offset2bag) || !is_index(a->bag_size) ||
          !is_index(a->max_indices) || a->bag_size->ndim != 1 || a->bag_size->sizes[0] != a->B)
        return unimpl("backward arguments");
      if (tpu_view_numel(a->offset2bag) != a->N && !(a->offsets && tpu_view_numel(a->offset2bag) == 0))
        return unimpl("offset2bag");
      if (a->mode == EB_MAX && (a->max_indices->ndim != 2 || a->max_indices->sizes[0] != a->B ||
                                a->max_indices->sizes[1] != a->D))
        return unimpl("max_indices");
      return TPU_OK;
    case EB_PSW_BACKWARD:
      if (!a->grad || a->grad->dtype != a->dtype || a->grad->ndim != 2 || a->grad->sizes[1] != a->D ||
          !is_index(a->offset2bag) || a->mode != EB_SUM)
        return unimpl("per_sample_weights backward arguments");
      a->num_weights = a->weight->sizes[0];
      a->B = a->grad->sizes[0];
      if (tpu_view_numel(a->offset2bag) != a->N && !(a->offsets && tpu_view_numel(a->offset2bag) == 0))
        return unimpl("offset2bag");
      return TPU_OK;
  }
  return unimpl("kind");
}

/* ---- shared pieces ---------------------------------------------------------------- */

static tpu_status_t oom(void) {
  return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "embedding_bag scratch allocation failed");
}

static int64_t* load_i64(const tpu_view_t* v) {
  int64_t n = tpu_view_numel(v);
  int64_t* buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
  if (!buf) return NULL;
  tpu_view_t d = view_of(buf, TPU_DTYPE_I64, v->ndim, v->sizes);
  if (n) view_copy(&d, v);
  return buf;
}

/* A view converted to a contiguous compute-type copy, or the view itself. */
static const void* as_compute(const tpu_view_t* v, tpu_dtype_t cdt, void** owned) {
  *owned = NULL;
  if (v->dtype == cdt && tpu_view_is_contiguous(v)) return tpu_view_ptr(v);
  *owned = malloc((size_t)(tpu_view_numel(v) > 0 ? tpu_view_numel(v) : 1) * tpu_dtype_size(cdt));
  if (!*owned) return NULL;
  tpu_view_t d = view_of(*owned, cdt, v->ndim, v->sizes);
  if (tpu_view_numel(v)) view_copy(&d, v);
  return *owned;
}

/* Bag starts (B + 1 entries) from offsets, checked as PyTorch checks them. */
static tpu_status_t bag_starts(const eb_args_t* a, const int64_t* off, int64_t* start) {
  int64_t n_off = a->offsets->sizes[0];
  if (n_off > 0 && off[0] != 0)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                           "has to start from position 0. However, got %lld",
                           (long long)off[0]);
  if (n_off > 0 && off[n_off - 1] > a->N)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "offsets[-1] can not be greater than input's length %lld but got "
                           "offsets[-1] of %lld",
                           (long long)a->N, (long long)off[n_off - 1]);
  for (int64_t b = 0; b < a->B; ++b) start[b] = off[b];
  start[a->B] = a->include_last_offset ? off[a->B] : a->N;
  for (int64_t b = 0; b < a->B; ++b)
    if (start[b + 1] < start[b])
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "offsets must be non-decreasing, but offsets[%lld] = %lld > "
                             "offsets[%lld] = %lld",
                             (long long)b, (long long)start[b], (long long)(b + 1),
                             (long long)start[b + 1]);
  return TPU_OK;
}

static tpu_status_t check_indices(const int64_t* idx, int64_t n, int64_t num_weights) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= num_weights)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Index %lld of input takes value %lld which is not in the valid "
                             "range [0, %lld)",
                             (long long)i, (long long)idx[i], (long long)num_weights);
  return TPU_OK;
}

/* ---- forward ------------------------------------------------------------------------ */

typedef struct fwd_job {
  const eb_args_t* a;
  const int64_t *idx, *start;
  const char* w; /* [V, D] compute type, contiguous */
  const char* psw;
  char* out;     /* [B, D] compute type, contiguous */
  int64_t *bag_size, *max_idx;
} fwd_job_t;

#define EB_FWD(C, T)                                                                      \
  static void fwd_##C(void* arg, int64_t b0, int64_t b1) {                                 \
    const fwd_job_t* j = (const fwd_job_t*)arg;                                            \
    const eb_args_t* a = j->a;                                                             \
    int64_t D = a->D;                                                                      \
    const T* w = (const T*)j->w;                                                           \
    const T* psw = (const T*)j->psw;                                                       \
    for (int64_t b = b0; b < b1; ++b) {                                                    \
      T* o = (T*)j->out + b * D;                                                           \
      int64_t* mi = a->mode == EB_MAX ? j->max_idx + b * D : NULL;                         \
      for (int64_t d = 0; d < D; ++d) o[d] = 0;                                            \
      if (mi)                                                                              \
        for (int64_t d = 0; d < D; ++d) mi[d] = -1;                                        \
      int64_t cnt = 0;                                                                     \
      for (int64_t i = j->start[b]; i < j->start[b + 1]; ++i) {                            \
        int64_t x = j->idx[i];                                                             \
        if (x == a->padding_idx) continue;                                                 \
        const T* row = w + x * D;                                                          \
        if (mi) {                                                                          \
          for (int64_t d = 0; d < D; ++d)                                                  \
            if (mi[d] < 0 || row[d] > o[d]) o[d] = row[d], mi[d] = x;                      \
        } else {                                                                           \
          T s = psw ? psw[i] : (T)1;                                                       \
          for (int64_t d = 0; d < D; ++d) o[d] += row[d] * s;                              \
        }                                                                                  \
        cnt++;                                                                             \
      }                                                                                    \
      if (a->mode == EB_MEAN && cnt > 0)                                                   \
        for (int64_t d = 0; d < D; ++d) o[d] /= (T)cnt;                                    \
      if (mi)                                                                              \
        for (int64_t d = 0; d < D; ++d)                                                    \
          if (mi[d] < 0) mi[d] = 0;                                                        \
      j->bag_size[b] = a->mode == EB_SUM ? 0 : cnt;                                        \
    }                                                                                      \
  }
EB_FWD(F32, float)
EB_FWD(F64, double)
#undef EB_FWD

static void (*const k_fwd[TPU_COMPUTE_COUNT])(void*, int64_t, int64_t) = {
    [TPU_COMPUTE_F32] = fwd_F32, [TPU_COMPUTE_F64] = fwd_F64};

static tpu_status_t run_forward(const eb_args_t* a, const tpu_node_t* node) {
  const tpu_view_t* outs = node->outputs;
  tpu_compute_type_t ct = tpu_dtype_compute(a->dtype);
  tpu_dtype_t cdt = tpu_compute_storage_dtype(ct);
  int64_t B = a->B, D = a->D, n_off = a->offsets->sizes[0];
  int64_t* idx = load_i64(a->indices);
  int64_t* off = load_i64(a->offsets);
  int64_t* start = malloc((size_t)(B + 1) * sizeof(int64_t));
  int64_t* bag_size = malloc((size_t)(B > 0 ? B : 1) * sizeof(int64_t));
  int64_t* max_idx = malloc((size_t)(B * D > 0 ? B * D : 1) * sizeof(int64_t));
  int64_t* o2b = malloc((size_t)(a->N > 0 ? a->N : 1) * sizeof(int64_t));
  bool direct = outs[0].dtype == cdt && tpu_view_is_contiguous(&outs[0]);
  void* out = direct ? tpu_view_ptr(&outs[0]) : malloc((size_t)(B * D > 0 ? B * D : 1) * tpu_dtype_size(cdt));
  void *wown = NULL, *pown = NULL;
  tpu_status_t s = TPU_OK;
  if (!idx || !off || !start || !bag_size || !max_idx || !o2b || !out) s = oom();
  if (s == TPU_OK) s = check_indices(idx, a->N, a->num_weights);
  if (s == TPU_OK) s = bag_starts(a, off, start);
  (void)n_off;
  const void* w = NULL;
  const void* psw = NULL;
  if (s == TPU_OK) {
    w = as_compute(a->weight, cdt, &wown);
    psw = a->psw ? as_compute(a->psw, cdt, &pown) : NULL;
    if (!w || (a->psw && !psw)) s = oom();
  }
  if (s == TPU_OK) {
    fwd_job_t j = {a, idx, start, w, psw, out, bag_size, max_idx};
    tpu_parallel_for(B, D >= 4096 ? 1 : 4096 / (D ? D : 1), k_fwd[ct], &j);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = start[b]; i < start[b + 1]; ++i) o2b[i] = b;
    for (int64_t i = start[B]; i < a->N; ++i) o2b[i] = B > 0 ? B - 1 : 0;
    for (int64_t i = 0; i < (B > 0 ? start[0] : a->N); ++i) o2b[i] = 0;
    int64_t sz2[2] = {B, D};
    tpu_view_t ov = view_of(out, cdt, 2, sz2);
    if (!direct && B > 0 && D > 0) view_copy(&outs[0], &ov);
    tpu_view_t o2v = view_of(o2b, TPU_DTYPE_I64, 1, &a->N);
    if (a->N) view_copy(&outs[1], &o2v);
    tpu_view_t bsv = view_of(bag_size, TPU_DTYPE_I64, 1, &B);
    if (B) view_copy(&outs[2], &bsv);
    if (a->mode == EB_MAX) {
      tpu_view_t mv = view_of(max_idx, TPU_DTYPE_I64, 2, sz2);
      if (B > 0 && D > 0) view_copy(&outs[3], &mv);
    } else if (B) {
      view_copy(&outs[3], &bsv);
    }
  }
  free(idx), free(off), free(start), free(bag_size), free(max_idx), free(o2b);
  if (!direct) free(out);
  free(wown), free(pown);
  return s;
}

/* ---- backward ------------------------------------------------------------------------ */

typedef struct bwd_job {
  const eb_args_t* a;
  const int64_t *order, *bucket, *o2b, *bag_size, *max_idx, *idx;
  const char *grad, *psw;
  char* gw; /* [V, D] compute type */
} bwd_job_t;

#define EB_BWD(C, T)                                                                      \
  static void bwd_##C(void* arg, int64_t w0, int64_t w1) {                                 \
    const bwd_job_t* j = (const bwd_job_t*)arg;                                            \
    const eb_args_t* a = j->a;                                                             \
    int64_t D = a->D;                                                                      \
    const T* g = (const T*)j->grad;                                                        \
    const T* psw = (const T*)j->psw;                                                       \
    for (int64_t w = w0; w < w1; ++w) {                                                    \
      T* row = (T*)j->gw + w * D;                                                          \
      for (int64_t d = 0; d < D; ++d) row[d] = 0;                                          \
      int64_t cnt = j->bucket[w + 1] - j->bucket[w];                                       \
      if (w == a->padding_idx || cnt == 0) continue;                                       \
      T freq = a->scale_grad_by_freq ? (T)cnt : (T)1;                                      \
      for (int64_t k = j->bucket[w]; k < j->bucket[w + 1]; ++k) {                          \
        int64_t i = j->order[k], b = j->o2b[i];                                            \
        T s = psw ? psw[i] : (T)1;                                                         \
        if (a->mode == EB_MEAN) s /= (T)(j->bag_size[b] ? j->bag_size[b] : 1);             \
        s /= freq;                                                                         \
        const T* gr = g + b * D;                                                           \
        for (int64_t d = 0; d < D; ++d) row[d] += gr[d] * s;                               \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  /* max: columns [d0, d1) over the bags in order */                                     \
  static void bwd_max_##C(void* arg, int64_t d0, int64_t d1) {                             \
    const bwd_job_t* j = (const bwd_job_t*)arg;                                            \
    const eb_args_t* a = j->a;                                                             \
    int64_t D = a->D;                                                                      \
    const T* g = (const T*)j->grad;                                                        \
    T* gw = (T*)j->gw;                                                                     \
    for (int64_t w = 0; w < a->num_weights; ++w)                                           \
      for (int64_t d = d0; d < d1; ++d) gw[w * D + d] = 0;                                 \
    for (int64_t b = 0; b < a->B; ++b) {                                                   \
      if (j->bag_size[b] == 0) continue;                                                   \
      for (int64_t d = d0; d < d1; ++d) {                                                  \
        int64_t w = j->max_idx[b * D + d];                                                 \
        if (w < 0 || w >= a->num_weights || w == a->padding_idx) continue;                 \
        T s = a->scale_grad_by_freq ? (T)(j->bucket[w + 1] - j->bucket[w]) : (T)1;         \
        gw[w * D + d] += g[b * D + d] / (s > 0 ? s : (T)1);                                \
      }                                                                                    \
    }                                                                                      \
  }
EB_BWD(F32, float)
EB_BWD(F64, double)
#undef EB_BWD

static void (*const k_bwd[TPU_COMPUTE_COUNT])(void*, int64_t, int64_t) = {
    [TPU_COMPUTE_F32] = bwd_F32, [TPU_COMPUTE_F64] = bwd_F64};
static void (*const k_bwd_max[TPU_COMPUTE_COUNT])(void*, int64_t, int64_t) = {
    [TPU_COMPUTE_F32] = bwd_max_F32, [TPU_COMPUTE_F64] = bwd_max_F64};

/* offset2bag from the call, or rebuilt from offsets when the call's is empty. */
static tpu_status_t get_o2b(const eb_args_t* a, int64_t** out) {
  if (tpu_view_numel(a->offset2bag) == a->N) {
    *out = load_i64(a->offset2bag);
    return *out ? TPU_OK : oom();
  }
  int64_t* off = load_i64(a->offsets);
  int64_t* o2b = malloc((size_t)(a->N > 0 ? a->N : 1) * sizeof(int64_t));
  if (!off || !o2b) {
    free(off), free(o2b);
    return oom();
  }
  int64_t n_off = a->offsets->sizes[0], b = 0;
  for (int64_t i = 0; i < a->N; ++i) {
    while (b + 1 < n_off && off[b + 1] <= i) b++;
    o2b[i] = b;
  }
  free(off);
  *out = o2b;
  return TPU_OK;
}

static tpu_status_t run_backward(const eb_args_t* a, const tpu_node_t* node) {
  const tpu_view_t* out = &node->outputs[0];
  tpu_compute_type_t ct = tpu_dtype_compute(a->dtype);
  tpu_dtype_t cdt = tpu_compute_storage_dtype(ct);
  int64_t V = a->num_weights, D = a->D, N = a->N;
  int64_t *idx = load_i64(a->indices), *o2b = NULL;
  int64_t* bag_size = load_i64(a->bag_size);
  int64_t* max_idx = a->mode == EB_MAX ? load_i64(a->max_indices) : NULL;
  int64_t* bucket = calloc((size_t)V + 2, sizeof(int64_t));
  int64_t* order = malloc((size_t)(N > 0 ? N : 1) * sizeof(int64_t));
  bool direct = out->dtype == cdt && tpu_view_is_contiguous(out); /* sum into out itself */
  char* gw = direct ? tpu_view_ptr(out) : malloc((size_t)(V * D > 0 ? V * D : 1) * tpu_dtype_size(cdt));
  void *gown = NULL, *pown = NULL;
  tpu_status_t s = TPU_OK;
  if (!idx || !bag_size || (a->mode == EB_MAX && !max_idx) || !bucket || !order || !gw) s = oom();
  if (s == TPU_OK) s = check_indices(idx, N, V);
  if (s == TPU_OK) s = get_o2b(a, &o2b);
  const void *g = NULL, *psw = NULL;
  if (s == TPU_OK) {
    g = as_compute(a->grad, cdt, &gown);
    psw = a->psw ? as_compute(a->psw, cdt, &pown) : NULL;
    if (!g || (a->psw && !psw)) s = oom();
  }
  for (int64_t i = 0; s == TPU_OK && i < N; ++i)
    if (o2b[i] < 0 || o2b[i] >= a->B)
      s = tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "offset2bag value out of range");
  if (s == TPU_OK) {
    /* stable counting sort of positions by index */
    for (int64_t i = 0; i < N; ++i) bucket[idx[i] + 2]++;
    for (int64_t i = 2; i < V + 2; ++i) bucket[i] += bucket[i - 1];
    for (int64_t i = 0; i < N; ++i) order[bucket[idx[i] + 1]++] = i;
    bwd_job_t j = {a, order, bucket, o2b, bag_size, max_idx, idx, g, psw, gw};
    if (a->mode == EB_MAX)
      tpu_parallel_for(D, 1 + 4096 / (V ? V : 1), k_bwd_max[ct], &j);
    else
      tpu_parallel_for(V, D >= 4096 ? 1 : 4096 / (D ? D : 1), k_bwd[ct], &j);
    int64_t sz[2] = {V, D};
    tpu_view_t gv = view_of(gw, cdt, 2, sz);
    if (!direct && V > 0 && D > 0) view_copy(out, &gv);
  }
  free(idx), free(o2b), free(bag_size), free(max_idx), free(bucket), free(order);
  if (!direct) free(gw);
  free(gown), free(pown);
  return s;
}

/* per_sample_weights: out[i] = <grad[bag(i)], weight[idx[i]]> (0 for padding). */
static tpu_status_t run_psw_backward(const eb_args_t* a, const tpu_node_t* node) {
  const tpu_view_t* out = &node->outputs[0];
  tpu_compute_type_t ct = tpu_dtype_compute(a->dtype);
  tpu_dtype_t cdt = tpu_compute_storage_dtype(ct);
  int64_t N = a->N, D = a->D;
  int64_t *idx = load_i64(a->indices), *o2b = NULL;
  double* res = malloc((size_t)(N > 0 ? N : 1) * sizeof(double));
  void *gown = NULL, *wown = NULL;
  tpu_status_t s = (!idx || !res) ? oom() : TPU_OK;
  if (s == TPU_OK) s = check_indices(idx, N, a->num_weights);
  if (s == TPU_OK) s = get_o2b(a, &o2b);
  if (s == TPU_OK) {
    tpu_view_t g64 = *a->grad, w64 = *a->weight;
    const double* g = as_compute(&g64, TPU_DTYPE_F64, &gown);
    const double* w = as_compute(&w64, TPU_DTYPE_F64, &wown);
    if (!g || !w) s = oom();
    for (int64_t i = 0; s == TPU_OK && i < N; ++i) {
      double acc = 0;
      if (idx[i] != a->padding_idx && o2b[i] >= 0 && o2b[i] < a->B)
        for (int64_t d = 0; d < D; ++d) acc += g[o2b[i] * D + d] * w[idx[i] * D + d];
      res[i] = acc;
    }
    tpu_view_t rv = view_of(res, TPU_DTYPE_F64, 1, &N);
    if (s == TPU_OK && N) view_copy(out, &rv);
  }
  (void)cdt;
  free(idx), free(o2b), free(res), free(gown), free(wown);
  return s;
}

/* ---- embedding_renorm_ ------------------------------------------------------------------ */

/* self[w] *= max_norm / (norm + 1e-7) for each distinct index w whose row's
 * p-norm exceeds max_norm (PyTorch's embedding_renorm_; rows in parallel). */
typedef struct renorm_job {
  const tpu_view_t* self;
  const int64_t* rows;
  double max_norm, p;
} renorm_job_t;

static void renorm_rows(void* arg, int64_t r0, int64_t r1) {
  const renorm_job_t* j = (const renorm_job_t*)arg;
  const tpu_view_t* v = j->self;
  int64_t D = v->sizes[1];
  for (int64_t r = r0; r < r1; ++r) {
    int64_t base = j->rows[r] * v->strides[0];
    double norm = 0;
    for (int64_t d = 0; d < D; ++d) {
      double x = fabs(view_get_f64(v, base + d * v->strides[1]));
      norm = isinf(j->p) ? (x > norm ? x : norm) : norm + pow(x, j->p);
    }
    if (!isinf(j->p)) norm = pow(norm, 1.0 / j->p);
    uint64_t tmp = 0; /* the norm as the CPU has it: a tensor of self's dtype */
    tpu_convert(&tmp, v->dtype, 1, &norm, TPU_DTYPE_F64, 1, 1);
    tpu_convert(&norm, TPU_DTYPE_F64, 1, &tmp, v->dtype, 1, 1);
    if (!(norm > j->max_norm)) continue;
    double scale = j->max_norm / (norm + 1e-7);
    for (int64_t d = 0; d < D; ++d) {
      int64_t o = base + d * v->strides[1];
      view_set_f64(v, o, view_get_f64(v, o) * (v->dtype == TPU_DTYPE_F64 ? scale : (float)scale));
    }
  }
}

static tpu_status_t renorm_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                                 const tpu_view_t** self, const tpu_view_t** idx) {
  *self = ku_input(def, node, "self");
  *idx = ku_input(def, node, "indices");
  if (!*self || !*idx || (*self)->ndim != 2 || !tpu_dtype_is_floating((*self)->dtype) ||
      !is_index(*idx))
    return unimpl("embedding_renorm_ arguments");
  return TPU_OK;
}

static tpu_status_t renorm_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                  tpu_exec_ctx_t* ctx) {
  (void)ctx;
  const tpu_view_t *self, *iv;
  TPU_RETURN_IF_ERROR(renorm_parse(def, node, &self, &iv));
  const tpu_view_t* out = &node->outputs[0];
  if (!views_same(out, self)) view_copy(out, self);
  int64_t n = tpu_view_numel(iv), V = self->sizes[0]; /* indices of any shape, flattened */
  int64_t* idx = load_i64(iv);
  uint8_t* seen = calloc((size_t)(V > 0 ? V : 1), 1);
  if (!idx || !seen) {
    free(idx), free(seen);
    return oom();
  }
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= V) {
      int64_t bad = idx[i];
      free(idx), free(seen);
      return tpu_status_make(TPU_CODE_INDEX_ERROR, "index %lld is out of bounds for dimension 0 with size %lld",
                             (long long)bad, (long long)V);
    }
    if (!seen[idx[i]]) seen[idx[i]] = 1, idx[m++] = idx[i];
  }
  renorm_job_t j = {out, idx, tpu_attr_float(ku_attr(def, node, "max_norm"), 1.0),
                    tpu_attr_float(ku_attr(def, node, "norm_type"), 2.0)};
  tpu_parallel_for(m, 64, renorm_rows, &j);
  free(idx), free(seen);
  return TPU_OK;
}

static tpu_status_t renorm_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* outs) {
  const tpu_view_t *self, *iv;
  TPU_RETURN_IF_ERROR(renorm_parse(def, node, &self, &iv));
  outs[0] = *self;
  tpu_view_set_contiguous(&outs[0]);
  return TPU_OK;
}

static tpu_status_t renorm_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  const tpu_view_t *self, *iv;
  return renorm_parse(def, node, &self, &iv);
}

/* ---- reference ------------------------------------------------------------------------ */

/* Plain reference of the forward output 0 and of the weight gradient, in double. */
tpu_status_t embedding_bag_reference(const tpu_op_def_t* def, const tpu_node_t* node);
tpu_status_t embedding_bag_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  eb_args_t a;
  TPU_RETURN_IF_ERROR(eb_parse(def, node, &a));
  const tpu_view_t* out = &node->outputs[0];
  int64_t D = a.D;
  if (a.kind == EB_FORWARD) {
    for (int64_t b = 0; b < a.B; ++b) {
      int64_t lo = view_get_i64(a.offsets, b * a.offsets->strides[0]);
      int64_t hi = (b + 1 < a.offsets->sizes[0]) ? view_get_i64(a.offsets, (b + 1) * a.offsets->strides[0]) : a.N;
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        int64_t cnt = 0;
        for (int64_t i = lo; i < hi; ++i) {
          int64_t x = view_get_i64(a.indices, i * a.indices->strides[0]);
          if (x == a.padding_idx) continue;
          double v = view_get_f64(a.weight, x * a.weight->strides[0] + d * a.weight->strides[1]);
          if (a.psw) v *= view_get_f64(a.psw, i * a.psw->strides[0]);
          acc = a.mode == EB_MAX ? (cnt == 0 || v > acc ? v : acc) : acc + v;
          cnt++;
        }
        if (a.mode == EB_MEAN && cnt) acc /= (double)cnt;
        view_set_f64(out, b * out->strides[0] + d * out->strides[1], acc);
      }
    }
    return TPU_OK;
  }
  if (a.kind == EB_PSW_BACKWARD || tpu_view_numel(a.offset2bag) != a.N)
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "reference: forward and weight gradient");
  /* the weight gradient, one element at a time */
  for (int64_t w = 0; w < a.num_weights; ++w) {
    int64_t freq = 0;
    for (int64_t i = 0; i < a.N; ++i) freq += view_get_i64(a.indices, i * a.indices->strides[0]) == w;
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      if (w != a.padding_idx && a.mode == EB_MAX) {
        for (int64_t b = 0; b < a.B; ++b)
          if (view_get_i64(a.bag_size, b * a.bag_size->strides[0]) > 0 &&
              view_get_i64(a.max_indices, b * a.max_indices->strides[0] + d * a.max_indices->strides[1]) == w)
            acc += view_get_f64(a.grad, b * a.grad->strides[0] + d * a.grad->strides[1]);
      } else if (w != a.padding_idx) {
        for (int64_t i = 0; i < a.N; ++i) {
          if (view_get_i64(a.indices, i * a.indices->strides[0]) != w) continue;
          int64_t b = view_get_i64(a.offset2bag, i * a.offset2bag->strides[0]);
          double g = view_get_f64(a.grad, b * a.grad->strides[0] + d * a.grad->strides[1]);
          if (a.psw) g *= view_get_f64(a.psw, i * a.psw->strides[0]);
          if (a.mode == EB_MEAN) {
            int64_t bs = view_get_i64(a.bag_size, b * a.bag_size->strides[0]);
            g /= (double)(bs ? bs : 1);
          }
          acc += g;
        }
      }
      if (a.scale_grad_by_freq && freq > 0) acc /= (double)freq;
      view_set_f64(out, w * out->strides[0] + d * out->strides[1], acc);
    }
  }
  return TPU_OK;
}

/* ---- rows -------------------------------------------------------------------------------- */

static tpu_status_t eb_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  (void)ctx;
  eb_args_t a;
  TPU_RETURN_IF_ERROR(eb_parse(def, node, &a));
  if (a.kind == EB_FORWARD) return run_forward(&a, node);
  if (a.kind == EB_PSW_BACKWARD) return run_psw_backward(&a, node);
  return run_backward(&a, node);
}

static tpu_status_t eb_infer(const tpu_op_def_t* def, const tpu_node_t* node, tpu_view_t* outs) {
  eb_args_t a;
  TPU_RETURN_IF_ERROR(eb_parse(def, node, &a));
  int32_t n = tpu_spec_count(def->outputs);
  memset(outs, 0, sizeof(tpu_view_t) * (size_t)n);
  if (a.kind == EB_FORWARD) {
    outs[0].dtype = a.dtype, outs[0].ndim = 2, outs[0].sizes[0] = a.B, outs[0].sizes[1] = a.D;
    outs[1].dtype = TPU_DTYPE_I64, outs[1].ndim = 1, outs[1].sizes[0] = a.N;
    outs[2].dtype = TPU_DTYPE_I64, outs[2].ndim = 1, outs[2].sizes[0] = a.B;
    outs[3].dtype = TPU_DTYPE_I64, outs[3].ndim = a.mode == EB_MAX ? 2 : 1;
    outs[3].sizes[0] = a.B, outs[3].sizes[1] = a.D;
  } else if (a.kind == EB_PSW_BACKWARD) {
    outs[0].dtype = a.dtype, outs[0].ndim = 1, outs[0].sizes[0] = a.N;
  } else {
    outs[0].dtype = a.dtype, outs[0].ndim = 2, outs[0].sizes[0] = a.num_weights;
    outs[0].sizes[1] = a.D;
  }
  for (int32_t k = 0; k < n; ++k) tpu_view_set_contiguous(&outs[k]);
  return TPU_OK;
}

static tpu_status_t eb_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  eb_args_t a;
  return eb_parse(def, node, &a);
}

static const eb_spec_t k_fwd_spec = {EB_FORWARD}, k_bwd_spec = {EB_BACKWARD},
                       k_dense_spec = {EB_DENSE_BACKWARD}, k_psw_spec = {EB_PSW_BACKWARD};

static const tpu_op_def_t k_ops[] = {
    {.name = "embedding_bag", .inputs = "weight,indices,offsets,per_sample_weights?",
     .attrs = "scale_grad_by_freq,mode,sparse,include_last_offset,padding_idx",
     .outputs = "out0,out1,out2,out3",
     .aten = "_embedding_bag _embedding_bag_forward_only _embedding_bag.out "
             "_embedding_bag_forward_only.out", .kernel = eb_kernel, .infer = eb_infer,
     .check = eb_check, .impl = &k_fwd_spec},
    {.name = "embedding_bag_backward",
     .inputs = "grad,indices,offsets,offset2bag,bag_size,maximum_indices,per_sample_weights?",
     .attrs = "num_weights,scale_grad_by_freq,mode,sparse,padding_idx", .outputs = "out",
     .aten = "_embedding_bag_backward", .kernel = eb_kernel, .infer = eb_infer, .check = eb_check,
     .impl = &k_bwd_spec},
    {.name = "embedding_bag_dense_backward",
     .inputs = "grad,indices,offset2bag,bag_size,maximum_indices,per_sample_weights?",
     .attrs = "num_weights,scale_grad_by_freq,mode,padding_idx", .outputs = "out",
     .aten = "_embedding_bag_dense_backward _embedding_bag_dense_backward.out",
     .kernel = eb_kernel, .infer = eb_infer, .check = eb_check, .impl = &k_dense_spec},
    {.name = "embedding_bag_per_sample_weights_backward",
     .inputs = "grad,weight,indices,offsets,offset2bag", .attrs = "mode,padding_idx",
     .outputs = "out",
     .aten = "_embedding_bag_per_sample_weights_backward "
             "_embedding_bag_per_sample_weights_backward.out", .kernel = eb_kernel,
     .infer = eb_infer, .check = eb_check, .impl = &k_psw_spec},
    {.name = "embedding_renorm", .inputs = "self,indices", .attrs = "max_norm,norm_type",
     .outputs = "out", .aten = "embedding_renorm_ embedding_renorm embedding_renorm.out",
     .kernel = renorm_kernel, .infer = renorm_infer, .check = renorm_check, .impl = NULL},
};

const tpu_op_family_t tpu_family_embedding_bag = {"embedding_bag", k_ops,
                                                  (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
