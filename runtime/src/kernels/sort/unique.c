/* kernels/sort/unique.c — the unique family: ops whose output size is the number
 * of distinct values (or runs, or bins), through the bridge's sync_size
 * mechanism (docs/kernel-guide.md): each row has a `sync_size` attr and a
 * "<name>_count" companion that computes the size first.
 *   unique             (_unique2: torch.unique without dim; sorted or not,
 *                       the CPU always sorts), with inverse and counts,
 *   unique_consecutive (dim None: runs of the flattened tensor),
 *   bincount           (optional weights, minlength),
 *   isin               (all overloads: membership of each element in the
 *                       sorted keys of test_elements, by binary search).
 *
 * Values are read once into a contiguous int64 (integer and bool dtypes) or
 * float64 (floating dtypes, exact for every one) buffer with view_copy, and
 * turned into order-preserving uint64 keys (-0.0 folds into 0.0). As on the
 * CPU (equal_nan=False) every NaN is its own value: NaNs sort after every
 * number, each forming a group of one. unique sorts (key, position) pairs;
 * only for floating inputs does the tie order show (the inverse of NaNs, the
 * sign of a zero), and there the CPU's unstable flatten().sort() is
 * reproduced by running the sort family's "sort" kernel; output
 * values, the inverse and counts are built in int64/float64 buffers and
 * converted into the outputs. bincount adds weights sequentially in the
 * output type (float32 for float32 weights, else float64), as the CPU does.
 *
 * Errors PyTorch raises on shapes (bincount of a non-1-d or float input,
 * negative minlength, weights of another length) are UNIMPLEMENTED, so the
 * CPU raises them; a negative bincount value is reported by the count row
 * as INVALID_ARGUMENT (RuntimeError, PyTorch's message).
 * tpu_unique_reference is a plain quadratic reference.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"
#include "kernels/sort/sort_algo.h"

tpu_status_t tpu_unique_reference(const tpu_op_def_t* def, const tpu_node_t* node);

typedef enum { UQ_UNIQUE, UQ_CONSECUTIVE, UQ_BINCOUNT, UQ_DIM } uq_kind_t;

typedef struct uq_impl {
  uq_kind_t kind;
  bool count; /* the "_count" companion */
} uq_impl_t;

typedef struct uq_args {
  uq_kind_t kind;
  bool count, inverse, counts;
  bool by_dim;       /* unique_dim, unique_consecutive with a dim: slices along dim */
  int32_t dim;       /* wrapped */
  const tpu_view_t *self, *weights;
  int64_t n, sync, minlength;
  tpu_dtype_t out_dtype;
} uq_args_t;

static tpu_status_t unimpl(const char* what) {
  return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s", what);
}

static tpu_status_t uq_parse(const tpu_op_def_t* def, const tpu_node_t* node, uq_args_t* a) {
  memset(a, 0, sizeof(*a));
  const uq_impl_t* impl = (const uq_impl_t*)def->impl;
  a->kind = impl->kind;
  a->count = impl->count;
  a->self = ku_input(def, node, "self");
  if (!a->self) return unimpl("expected self");
  a->n = tpu_view_numel(a->self);
  const tpu_attr_t* s = ku_attr(def, node, "sync_size");
  a->sync = (s && s->kind == TPU_ATTR_INT) ? s->u.i : -1;
  a->inverse = tpu_attr_bool(ku_attr(def, node, "return_inverse"), false);
  a->counts = tpu_attr_bool(ku_attr(def, node, "return_counts"), false);
  a->out_dtype = a->self->dtype;
  const tpu_attr_t* d = ku_attr(def, node, "dim");
  if ((a->kind == UQ_CONSECUTIVE || a->kind == UQ_DIM) && d && d->kind == TPU_ATTR_INT) {
    a->by_dim = true;
    if (a->self->ndim < 1) return unimpl("unique with a dim of a 0-dim tensor");
    TPU_RETURN_IF_ERROR(ku_wrap_dim(d->u.i, a->self->ndim, &a->dim));
    for (int32_t k = 0; k < a->self->ndim; ++k)
      if (a->self->sizes[k] == 0) return unimpl("unique with a dim of an empty tensor");
  } else if (a->kind == UQ_DIM) {
    return unimpl("unique_dim needs a dim");
  }
  if (a->kind == UQ_BINCOUNT) {
    if (a->self->ndim != 1 || !tpu_dtype_is_integral(a->self->dtype))
      return unimpl("bincount only supports 1-d non-negative integral inputs.");
    a->minlength = tpu_attr_int(ku_attr(def, node, "minlength"), 0);
    if (a->minlength < 0) return unimpl("minlength should be >= 0");
    a->weights = ku_input(def, node, "weights");
    a->out_dtype = TPU_DTYPE_I64;
    if (a->weights) {
      if (a->weights->ndim != 1 || a->weights->sizes[0] != a->n)
        return unimpl("weights should be 1-d and have the same length as input");
      a->out_dtype = a->weights->dtype == TPU_DTYPE_F32 ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
    }
  }
  return TPU_OK;
}

static tpu_status_t uq_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  uq_args_t a;
  return ku_unimplemented(uq_parse(def, node, &a));
}

static tpu_status_t uq_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                             tpu_view_t* outs) {
  uq_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(uq_parse(def, node, &a)));
  if (a.count) {
    memset(&outs[0], 0, sizeof(outs[0]));
    outs[0].dtype = TPU_DTYPE_I64;
    return TPU_OK;
  }
  if (a.sync < 0) return unimpl("needs the number of values (sync_size)");
  int32_t nout = a.kind == UQ_BINCOUNT ? 1 : 3;
  for (int32_t k = 0; k < nout; ++k) memset(&outs[k], 0, sizeof(outs[k]));
  outs[0].dtype = a.out_dtype, outs[0].ndim = 1, outs[0].sizes[0] = a.sync;
  if (a.by_dim) { /* self's shape with K slices; inverse [S] and counts [K] always */
    outs[0].ndim = a.self->ndim;
    for (int32_t d = 0; d < a.self->ndim; ++d) outs[0].sizes[d] = a.self->sizes[d];
    outs[0].sizes[a.dim] = a.sync;
    outs[1].dtype = outs[2].dtype = TPU_DTYPE_I64;
    outs[1].ndim = outs[2].ndim = 1;
    outs[1].sizes[0] = a.self->sizes[a.dim];
    outs[2].sizes[0] = a.sync;
  } else if (nout == 3) {
    outs[1].dtype = outs[2].dtype = TPU_DTYPE_I64;
    outs[1].ndim = outs[2].ndim = 1;
    if (a.inverse) {
      outs[1].ndim = a.self->ndim;
      for (int32_t d = 0; d < a.self->ndim; ++d) outs[1].sizes[d] = a.self->sizes[d];
    }
    outs[2].sizes[0] = a.counts ? a.sync : 0;
  }
  for (int32_t k = 0; k < nout; ++k) tpu_view_set_contiguous(&outs[k]);
  return TPU_OK;
}

/* ---- keys ------------------------------------------------------------------- */

typedef struct uq_pair {
  uint64_t key;
  int64_t pos;
} uq_pair_t;

#define UQ_NAN_KEY UINT64_MAX

static int uq_pair_cmp(const void* pa, const void* pb) {
  const uq_pair_t *a = (const uq_pair_t*)pa, *b = (const uq_pair_t*)pb;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* Values of the flattened self: vals (int64 or float64, *fl says which) and
 * order-preserving keys; *isnan_key marks NaN's key (floats only). */
typedef struct uq_data {
  bool fl;
  void* vals;
  uint64_t* keys;
} uq_data_t;

static void uq_free(uq_data_t* d) {
  free(d->vals);
  free(d->keys);
}

static tpu_status_t uq_load(const tpu_view_t* self, uq_data_t* d) {
  int64_t n = tpu_view_numel(self);
  d->fl = tpu_dtype_is_floating(self->dtype);
  d->vals = malloc(8 * (size_t)(n > 0 ? n : 1));
  d->keys = malloc(sizeof(uint64_t) * (size_t)(n > 0 ? n : 1));
  if (!d->vals || !d->keys) {
    uq_free(d);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "unique buffers");
  }
  tpu_view_t b = view_of(d->vals, d->fl ? TPU_DTYPE_F64 : TPU_DTYPE_I64, self->ndim, self->sizes);
  view_copy(&b, self);
  const uint64_t sign = (uint64_t)1 << 63;
  for (int64_t i = 0; i < n; ++i) {
    if (d->fl) {
      double x = ((const double*)d->vals)[i];
      if (isnan(x)) {
        d->keys[i] = UQ_NAN_KEY;
        continue;
      }
      if (x == 0.0) x = 0.0;
      uint64_t bits;
      memcpy(&bits, &x, sizeof(bits));
      d->keys[i] = (bits & sign) ? ~bits : (bits | sign);
    } else {
      d->keys[i] = (uint64_t)((const int64_t*)d->vals)[i] ^ sign;
    }
  }
  return TPU_OK;
}

/* Whether element with key `k` starts a new group after key `prev`. */
static inline bool uq_new_group(const uq_data_t* d, uint64_t prev, uint64_t k) {
  return k != prev || (d->fl && k == UQ_NAN_KEY);
}

/* ---- isin ----------------------------------------------------------------------- */

/* isin(elements, test_elements; assume_unique, invert) and its Scalar forms:
 * both operands are converted to result_type(elements, test_elements) (as
 * the CPU compares them), then to int64/float64 keys (exact); NaN matches
 * nothing. Bool is not supported by the CPU kernels (UNIMPLEMENTED). */
typedef struct isin_args {
  tpu_value_t in[2];
  tpu_dtype_t common;
  bool invert;
} isin_args_t;

/* `out`: the output when known (check, kernel); NULL for shape inference. */
static tpu_status_t isin_parse(const tpu_op_def_t* def, const tpu_node_t* node,
                               const tpu_view_t* out, isin_args_t* a) {
  if (node->num_inputs != 2) return unimpl("isin: two operands expected");
  a->in[0] = node->inputs[0], a->in[1] = node->inputs[1];
  for (int k = 0; k < 2; ++k)
    if (a->in[k].kind != TPU_VALUE_VIEW && a->in[k].kind != TPU_VALUE_SCALAR)
      return unimpl("isin: operand");
  if (a->in[0].kind != TPU_VALUE_VIEW && a->in[1].kind != TPU_VALUE_VIEW)
    return unimpl("isin: no tensor");
  a->common = tpu_result_type(a->in, 2);
  if (a->common == TPU_DTYPE_BOOL || a->common == TPU_DTYPE_INVALID)
    return unimpl("isin: dtype not supported");
  a->invert = tpu_attr_bool(ku_attr(def, node, "invert"), false);
  if (out) {
    if (out->dtype != TPU_DTYPE_BOOL) return unimpl("isin: out must be bool");
    if (a->in[0].kind == TPU_VALUE_VIEW ? !views_same_shape(out, &a->in[0].u.view) : out->ndim != 0)
      return unimpl("isin: out of another shape");
    for (int k = 0; k < 2; ++k)
      if (out->addr > 1 && a->in[k].kind == TPU_VALUE_VIEW && views_overlap(out, &a->in[k].u.view))
        return unimpl("isin: out overlaps an input");
  }
  return TPU_OK;
}

static tpu_status_t isin_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  isin_args_t a;
  return isin_parse(def, node, node->num_outputs >= 1 ? &node->outputs[0] : NULL, &a);
}

static tpu_status_t isin_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                               tpu_view_t* out) {
  isin_args_t a;
  TPU_RETURN_IF_ERROR(isin_parse(def, node, NULL, &a));
  memset(out, 0, sizeof(*out));
  if (a.in[0].kind == TPU_VALUE_VIEW) {
    out->ndim = a.in[0].u.view.ndim;
    memcpy(out->sizes, a.in[0].u.view.sizes, sizeof(out->sizes));
  }
  out->dtype = TPU_DTYPE_BOOL;
  tpu_view_set_contiguous(out);
  return TPU_OK;
}

/* Keys of `v` converted to `common`: *n of them, NaNs dropped when drop_nan
 * (test elements) or kept as UQ_NAN_KEY. */
static tpu_status_t isin_keys(const tpu_value_t* val, tpu_dtype_t common, bool drop_nan,
                              uint64_t** keys, int64_t* n) {
  uint64_t storage;
  tpu_view_t v;
  tpu_value_to_view(val, common, &storage, &v);
  int64_t m = tpu_view_numel(&v);
  void* tmp = malloc(8 * (size_t)(m > 0 ? m : 1));
  uq_data_t d = {0};
  if (!tmp) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "isin buffers");
  tpu_view_t c = view_of(tmp, common, v.ndim, v.sizes);
  view_copy(&c, &v);
  tpu_status_t st = uq_load(&c, &d);
  free(tmp);
  if (st != TPU_OK) return st;
  free(d.vals);
  int64_t k = 0;
  for (int64_t i = 0; i < m; ++i)
    if (!(drop_nan && d.fl && d.keys[i] == UQ_NAN_KEY)) d.keys[k++] = d.keys[i];
  *keys = d.keys;
  *n = k;
  return TPU_OK;
}

static int isin_key_cmp(const void* pa, const void* pb) {
  uint64_t a = *(const uint64_t*)pa, b = *(const uint64_t*)pb;
  return a < b ? -1 : a > b;
}

typedef struct isin_job {
  const uint64_t *keys, *test;
  int64_t ntest;
  uint8_t* res;
  bool invert, fl;
} isin_job_t;

static void isin_chunk(void* arg, int64_t begin, int64_t end) {
  const isin_job_t* j = (const isin_job_t*)arg;
  for (int64_t i = begin; i < end; ++i) {
    uint64_t k = j->keys[i];
    int64_t lo = 0, hi = j->ntest;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (j->test[mid] < k) lo = mid + 1;
      else hi = mid;
    }
    bool found = lo < j->ntest && j->test[lo] == k && !(j->fl && k == UQ_NAN_KEY);
    j->res[i] = (uint8_t)(found != j->invert);
  }
}

static tpu_status_t isin_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_exec_ctx_t* ctx) {
  (void)ctx;
  isin_args_t a;
  if (node->num_outputs != 1) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "isin: output");
  TPU_RETURN_IF_ERROR(ku_unimplemented(isin_parse(def, node, &node->outputs[0], &a)));
  const tpu_view_t* out = &node->outputs[0];
  uint64_t *keys = NULL, *test = NULL;
  int64_t n = 0, ntest = 0;
  tpu_status_t st = isin_keys(&a.in[0], a.common, false, &keys, &n);
  if (st == TPU_OK) st = isin_keys(&a.in[1], a.common, true, &test, &ntest);
  uint8_t* res = st == TPU_OK ? malloc((size_t)(n > 0 ? n : 1)) : NULL;
  if (st == TPU_OK && !res) st = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "isin buffers");
  if (st == TPU_OK) {
    qsort(test, (size_t)ntest, sizeof(uint64_t), isin_key_cmp);
    isin_job_t j = {keys, test, ntest, res, a.invert, tpu_dtype_is_floating(a.common)};
    tpu_parallel_for(n, 4096, isin_chunk, &j);
    tpu_view_t r = view_of(res, TPU_DTYPE_BOOL, out->ndim, out->sizes);
    view_copy(out, &r);
  }
  free(keys);
  free(test);
  free(res);
  return st;
}

/* ---- bincount ------------------------------------------------------------------ */

static tpu_status_t bincount_size(const uq_args_t* a, const uq_data_t* d, int64_t* size) {
  int64_t mx = -1;
  const int64_t* v = (const int64_t*)d->vals;
  for (int64_t i = 0; i < a->n; ++i) {
    if (v[i] < 0)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "bincount only supports 1-d non-negative integral inputs.");
    if (v[i] > mx) mx = v[i];
  }
  *size = mx + 1 > a->minlength ? mx + 1 : a->minlength;
  return TPU_OK;
}

static tpu_status_t bincount_run(const uq_args_t* a, const uq_data_t* d, const tpu_view_t* out,
                                 int64_t size) {
  double* acc = calloc((size_t)(size > 0 ? size : 1), sizeof(double));
  double* w = a->weights ? malloc(sizeof(double) * (size_t)(a->n > 0 ? a->n : 1)) : NULL;
  if (!acc || (a->weights && !w)) {
    free(acc), free(w);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "bincount buffers");
  }
  const int64_t* v = (const int64_t*)d->vals;
  if (w) {
    tpu_view_t wb = view_of(w, TPU_DTYPE_F64, 1, a->weights->sizes);
    view_copy(&wb, a->weights);
    bool f32 = a->out_dtype == TPU_DTYPE_F32;
    for (int64_t i = 0; i < a->n; ++i) {
      double s = acc[v[i]] + w[i];
      acc[v[i]] = f32 ? (double)(float)s : s;
    }
    tpu_view_t ab = view_of(acc, TPU_DTYPE_F64, 1, &size);
    view_copy(out, &ab);
  } else {
    int64_t* cnt = (int64_t*)acc; /* same size as doubles, zeroed */
    for (int64_t i = 0; i < a->n; ++i) cnt[v[i]]++;
    tpu_view_t cb = view_of(cnt, TPU_DTYPE_I64, 1, &size);
    view_copy(out, &cb);
  }
  free(acc), free(w);
  return TPU_OK;
}

/* ---- unique / unique_consecutive ------------------------------------------- */

/* Groups in order (sorted for unique, flat for consecutive): pairs[i].pos
 * are positions in that order; returns the group count. */
static int64_t uq_groups(const uq_data_t* d, const uq_pair_t* pairs, int64_t n) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || uq_new_group(d, pairs[i - 1].key, pairs[i].key)) k++;
  return k;
}

/* The CPU's unique is input.flatten().sort() (unstable) and a pass over
 * it: which NaN lands where decides the inverse of NaNs (and which of -0.0
 * and 0.0 a group shows), so floating inputs are sorted by the sort family's
 * "sort" row (a port of the CPU's algorithm). `order` gets the permutation. */
static tpu_status_t uq_cpu_sort(const uq_args_t* a, tpu_exec_ctx_t* ctx, int64_t* order) {
  const tpu_op_def_t* def = tpu_op_def(tpu_op_lookup("sort"));
  if (!def) return tpu_status_make(TPU_CODE_INTERNAL, "the runtime has no sort op");
  size_t esz = tpu_dtype_size(a->self->dtype), n = (size_t)a->n;
  char *flat = malloc(esz * n), *vals = malloc(esz * n);
  if (!flat || !vals) {
    free(flat), free(vals);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "unique buffers");
  }
  tpu_view_t fv = view_of(flat, a->self->dtype, a->self->ndim, a->self->sizes);
  view_copy(&fv, a->self);
  tpu_node_t node = {0};
  tpu_value_t in = {.kind = TPU_VALUE_VIEW};
  in.u.view = view_of(flat, a->self->dtype, 1, &a->n);
  tpu_view_t outs[2] = {view_of(vals, a->self->dtype, 1, &a->n),
                        view_of(order, TPU_DTYPE_I64, 1, &a->n)};
  tpu_attr_t attrs[3];
  memset(attrs, 0, sizeof(attrs));
  attrs[0].kind = TPU_ATTR_BOOL, attrs[0].u.i = 0; /* stable */
  attrs[1].kind = TPU_ATTR_INT, attrs[1].u.i = 0;  /* dim */
  attrs[2].kind = TPU_ATTR_BOOL, attrs[2].u.i = 0; /* descending */
  node.op = tpu_op_lookup("sort");
  node.inputs = &in, node.num_inputs = 1;
  node.outputs = outs, node.num_outputs = 2;
  memcpy(node.attrs, attrs, sizeof(attrs));
  node.num_attrs = 3;
  tpu_status_t st = def->kernel(def, &node, ctx);
  free(flat), free(vals);
  return st;
}

static tpu_status_t uq_pairs(const uq_args_t* a, const uq_data_t* d, tpu_exec_ctx_t* ctx,
                             uq_pair_t** out) {
  uq_pair_t* p = malloc(sizeof(uq_pair_t) * (size_t)(a->n > 0 ? a->n : 1));
  if (!p) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "unique buffers");
  if (a->kind == UQ_UNIQUE && d->fl && !a->count && a->n > 1) {
    int64_t* order = malloc(sizeof(int64_t) * (size_t)a->n);
    tpu_status_t st = order ? uq_cpu_sort(a, ctx, order)
                            : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "unique buffers");
    if (st == TPU_OK)
      for (int64_t i = 0; i < a->n; ++i) p[i].key = d->keys[order[i]], p[i].pos = order[i];
    free(order);
    if (st != TPU_OK) {
      free(p);
      return st;
    }
    *out = p;
    return TPU_OK;
  }
  for (int64_t i = 0; i < a->n; ++i) p[i].key = d->keys[i], p[i].pos = i;
  if (a->kind == UQ_UNIQUE && a->n > 1) qsort(p, (size_t)a->n, sizeof(uq_pair_t), uq_pair_cmp);
  *out = p;
  return TPU_OK;
}

static tpu_status_t uq_write(const uq_args_t* a, const uq_data_t* d, const uq_pair_t* p,
                             int64_t k, const tpu_node_t* node) {
  int64_t* inv = malloc(sizeof(int64_t) * (size_t)(a->n > 0 ? a->n : 1));
  int64_t* cnt = malloc(sizeof(int64_t) * (size_t)(k > 0 ? k : 1));
  char* vals = malloc(8 * (size_t)(k > 0 ? k : 1));
  if (!inv || !cnt || !vals) {
    free(inv), free(cnt), free(vals);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "unique buffers");
  }
  int64_t g = -1;
  for (int64_t i = 0; i < a->n; ++i) {
    if (i == 0 || uq_new_group(d, p[i - 1].key, p[i].key)) {
      ++g;
      memcpy(vals + 8 * g, (const char*)d->vals + 8 * p[i].pos, 8);
      cnt[g] = 0;
    }
    cnt[g]++;
    inv[p[i].pos] = g;
  }
  tpu_view_t vb = view_of(vals, d->fl ? TPU_DTYPE_F64 : TPU_DTYPE_I64, 1, &k);
  view_copy(&node->outputs[0], &vb);
  if (a->inverse) {
    tpu_view_t ib = view_of(inv, TPU_DTYPE_I64, a->self->ndim, a->self->sizes);
    view_copy(&node->outputs[1], &ib);
  }
  if (a->counts) {
    tpu_view_t cb = view_of(cnt, TPU_DTYPE_I64, 1, &k);
    view_copy(&node->outputs[2], &cb);
  }
  free(inv), free(cnt), free(vals);
  return TPU_OK;
}

/* ---- unique_dim / unique_consecutive(dim): slices along dim ---------------------
 * As the CPU's _unique_dim_cpu_template: self.moveaxis(dim, 0) as rows of M
 * elements, the row numbers sorted by std::sort (ported: sort_algo.h) with
 * its lexicographic `<` (a NaN compares neither less nor greater), unless
 * consecutive; a row starts a group unless at::equal to the group's first
 * row (NaN equals nothing). The output keeps each group's first row. */

typedef struct uqd_rows {
  const uint64_t* keys; /* [S, M] */
  int64_t M;
  bool fl;
} uqd_rows_t;

typedef struct uqd_row {
  int64_t idx;
  const uqd_rows_t* r;
} uqd_row_t;

static inline bool uqd_less(uqd_row_t a, uqd_row_t b) {
  const uqd_rows_t* r = a.r;
  const uint64_t *x = r->keys + a.idx * r->M, *y = r->keys + b.idx * r->M;
  for (int64_t i = 0; i < r->M; ++i) {
    if (r->fl && (x[i] == UQ_NAN_KEY || y[i] == UQ_NAN_KEY)) continue;
    if (x[i] < y[i]) return true;
    if (x[i] > y[i]) return false;
  }
  return false;
}

static bool uqd_equal(const uqd_rows_t* r, int64_t a, int64_t b) {
  const uint64_t *x = r->keys + a * r->M, *y = r->keys + b * r->M;
  for (int64_t i = 0; i < r->M; ++i)
    if (x[i] != y[i] || (r->fl && x[i] == UQ_NAN_KEY)) return false;
  return true;
}

#define UQD_LESS(a, b) uqd_less((a), (b))
SA_DEFINE_GUARDED(uqd, uqd_row_t, UQD_LESS)
SA_DEFINE(uqd, uqd_row_t, UQD_LESS)

/* v with `dim` moved to the front. */
static tpu_view_t dim_first(const tpu_view_t* v, int32_t dim) {
  tpu_view_t r = *v;
  r.sizes[0] = v->sizes[dim], r.strides[0] = v->strides[dim];
  for (int32_t d = 0, k = 1; d < v->ndim; ++d)
    if (d != dim) r.sizes[k] = v->sizes[d], r.strides[k] = v->strides[d], ++k;
  return r;
}

static tpu_status_t uqd_run(const uq_args_t* a, const tpu_node_t* node, int64_t* groups) {
  tpu_view_t pv = dim_first(a->self, a->dim);
  int64_t S = pv.sizes[0], M = S > 0 ? a->n / S : 0;
  uq_data_t d = {0};
  TPU_RETURN_IF_ERROR(uq_load(&pv, &d));
  uqd_rows_t rows = {d.keys, M, d.fl};
  uqd_row_t* order = malloc(sizeof(uqd_row_t) * (size_t)(S > 0 ? S : 1));
  int64_t* inv = malloc(sizeof(int64_t) * (size_t)(S > 0 ? S : 1));
  int64_t* cnt = malloc(sizeof(int64_t) * (size_t)(S > 0 ? S : 1));
  int64_t* first = malloc(sizeof(int64_t) * (size_t)(S > 0 ? S : 1)); /* group's first row */
  tpu_status_t st = TPU_OK;
  if (!order || !inv || !cnt || !first) {
    st = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "unique buffers");
    goto done;
  }
  for (int64_t i = 0; i < S; ++i) order[i] = (uqd_row_t){i, &rows};
  if (a->kind == UQ_DIM) uqd_sort(order, S);
  int64_t k = 0;
  for (int64_t i = 0; i < S; ++i) {
    if (i == 0 || !uqd_equal(&rows, order[i].idx, first[k - 1])) first[k] = order[i].idx, cnt[k++] = 0;
    cnt[k - 1]++;
    inv[order[i].idx] = k - 1;
  }
  *groups = k;
  if (!node) goto done;
  if (k != a->sync) {
    st = tpu_status_make(TPU_CODE_INTERNAL, "the number of values changed since it was read");
    goto done;
  }
  char* vals = malloc(8 * (size_t)(k * M > 0 ? k * M : 1));
  if (!vals) {
    st = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "unique buffers");
    goto done;
  }
  for (int64_t g = 0; g < k; ++g) memcpy(vals + 8 * g * M, (char*)d.vals + 8 * first[g] * M, 8 * (size_t)M);
  tpu_view_t ov = dim_first(&node->outputs[0], a->dim);
  int64_t vs[TPU_MAX_DIMS];
  for (int32_t q = 0; q < ov.ndim; ++q) vs[q] = ov.sizes[q];
  tpu_view_t vb = view_of(vals, d.fl ? TPU_DTYPE_F64 : TPU_DTYPE_I64, ov.ndim, vs);
  view_copy(&ov, &vb);
  tpu_view_t ib = view_of(inv, TPU_DTYPE_I64, 1, &S), cb = view_of(cnt, TPU_DTYPE_I64, 1, &k);
  view_copy(&node->outputs[1], &ib);
  view_copy(&node->outputs[2], &cb);
  free(vals);
done:
  free(order), free(inv), free(cnt), free(first);
  uq_free(&d);
  return st;
}

/* ---- the kernel ---------------------------------------------------------------- */

static tpu_status_t uq_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                              tpu_exec_ctx_t* ctx) {
  uq_args_t a;
  TPU_RETURN_IF_ERROR(ku_unimplemented(uq_parse(def, node, &a)));
  if (!node->outputs || node->num_outputs < 1) return unimpl("expected outputs");
  if (!a.count) {
    if (a.sync < 0) return unimpl("needs the number of values (sync_size)");
    if (a.by_dim) {
      tpu_view_t want[3];
      TPU_RETURN_IF_ERROR(uq_infer(def, node, want));
      if (node->num_outputs != 3) return unimpl("expected three outputs");
      for (int k = 0; k < 3; ++k)
        if (!views_same_shape(&node->outputs[k], &want[k]) ||
            node->outputs[k].dtype != want[k].dtype)
          return unimpl("outputs unlike unique's");
      return uqd_run(&a, node, &(int64_t){0});
    }
    const tpu_view_t* o = &node->outputs[0];
    if (o->ndim != 1 || o->sizes[0] != a.sync || o->dtype != a.out_dtype)
      return unimpl("output 0 does not match sync_size");
    if (a.kind != UQ_BINCOUNT) {
      if (node->num_outputs != 3) return unimpl("expected three outputs");
      if (a.inverse && (node->outputs[1].dtype != TPU_DTYPE_I64 ||
                        !views_same_shape(&node->outputs[1], a.self)))
        return unimpl("inverse unlike self");
      if (a.counts && (node->outputs[2].dtype != TPU_DTYPE_I64 || node->outputs[2].ndim != 1 ||
                       node->outputs[2].sizes[0] != a.sync))
        return unimpl("counts unlike output");
    }
  }
  if (a.by_dim) { /* the count row */
    int64_t k = 0;
    TPU_RETURN_IF_ERROR(uqd_run(&a, NULL, &k));
    view_set_i64(&node->outputs[0], 0, k);
    return TPU_OK;
  }
  uq_data_t d = {0};
  TPU_RETURN_IF_ERROR(uq_load(a.self, &d));
  tpu_status_t st = TPU_OK;
  int64_t size = 0;
  uq_pair_t* p = NULL;
  if (a.kind == UQ_BINCOUNT) {
    st = bincount_size(&a, &d, &size);
  } else {
    st = uq_pairs(&a, &d, ctx, &p);
    if (st == TPU_OK) size = uq_groups(&d, p, a.n);
  }
  if (st == TPU_OK) {
    if (a.count) {
      view_set_i64(&node->outputs[0], 0, size);
    } else if (size != a.sync) {
      st = tpu_status_make(TPU_CODE_INTERNAL, "the number of values changed since it was read");
    } else if (a.kind == UQ_BINCOUNT) {
      st = bincount_run(&a, &d, &node->outputs[0], size);
    } else {
      st = uq_write(&a, &d, p, size, node);
    }
  }
  free(p);
  uq_free(&d);
  return st;
}

/* ---- the reference: quadratic, one element at a time ------------------------ */

static int64_t ref_off(const tpu_view_t* x, int64_t k) {
  int64_t off = 0;
  for (int32_t d = x->ndim - 1; d >= 0; --d) {
    off += (k % x->sizes[d]) * x->strides[d];
    k /= x->sizes[d];
  }
  return off;
}

/* -1, 0, 1 for x[i] vs x[j]; NaNs are greater than numbers and equal to no
 * value (ordered among themselves by position). */
static int ref_cmp(const tpu_view_t* x, int64_t i, int64_t j) {
  if (tpu_dtype_is_floating(x->dtype)) {
    double a = view_get_f64(x, ref_off(x, i)), b = view_get_f64(x, ref_off(x, j));
    bool na = isnan(a), nb = isnan(b);
    if (na || nb) {
      if (na && nb) return i < j ? -1 : i > j;
      return na ? 1 : -1;
    }
    return a < b ? -1 : a > b;
  }
  int64_t a = view_get_i64(x, ref_off(x, i)), b = view_get_i64(x, ref_off(x, j));
  return a < b ? -1 : a > b;
}

/* Slices i and j of x along dim: -1, 0, 1 lexicographically (NaN-free inputs). */
static int ref_slice_cmp(const tpu_view_t* x, int32_t dim, int64_t i, int64_t j) {
  tpu_view_t p = dim_first(x, dim);
  int64_t M = tpu_view_numel(&p) / p.sizes[0];
  tpu_view_t row = p; /* the remaining dims */
  row.ndim = p.ndim - 1;
  for (int32_t d = 0; d < row.ndim; ++d) row.sizes[d] = p.sizes[d + 1], row.strides[d] = p.strides[d + 1];
  for (int64_t m = 0; m < M; ++m) {
    int64_t off = ref_off(&row, m);
    double a = view_get_f64(x, i * p.strides[0] + off), b = view_get_f64(x, j * p.strides[0] + off);
    if (a != b) return a < b ? -1 : 1;
  }
  return 0;
}

static tpu_status_t ref_by_dim(const uq_args_t* a, const tpu_node_t* node) {
  const tpu_view_t* x = a->self;
  int64_t S = x->sizes[a->dim], k = 0;
  int64_t* grp = malloc(sizeof(int64_t) * (size_t)S);
  if (!grp) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "ref");
  for (int64_t i = 0; i < S; ++i) {
    if (a->kind == UQ_CONSECUTIVE) {
      k += i == 0 || ref_slice_cmp(x, a->dim, i - 1, i) != 0;
      grp[i] = k - 1;
    } else { /* distinct slices below slice i */
      grp[i] = 0;
      for (int64_t j = 0; j < S; ++j) {
        if (ref_slice_cmp(x, a->dim, j, i) >= 0) continue;
        bool firstj = true;
        for (int64_t m = 0; m < j && firstj; ++m) firstj = ref_slice_cmp(x, a->dim, m, j) != 0;
        grp[i] += firstj;
      }
      if (grp[i] + 1 > k) k = grp[i] + 1;
    }
  }
  if (a->count) {
    view_set_i64(&node->outputs[0], 0, k);
    free(grp);
    return TPU_OK;
  }
  const tpu_view_t *o = &node->outputs[0], *inv = &node->outputs[1], *cnt = &node->outputs[2];
  for (int64_t g = 0; g < k; ++g) view_set_i64(cnt, ref_off(cnt, g), 0);
  tpu_view_t px = dim_first(x, a->dim), po = dim_first(o, a->dim);
  int64_t M = tpu_view_numel(&px) / S;
  for (int64_t i = 0; i < S; ++i) {
    view_set_i64(inv, ref_off(inv, i), grp[i]);
    view_set_i64(cnt, ref_off(cnt, grp[i]), view_get_i64(cnt, ref_off(cnt, grp[i])) + 1);
    for (int64_t m = 0; m < M; ++m)
      view_set_f64(&po, ref_off(&po, grp[i] * M + m), view_get_f64(&px, ref_off(&px, i * M + m)));
  }
  free(grp);
  return TPU_OK;
}

/* isin by a quadratic loop over values rounded through the common dtype. */
static int64_t ref_isin_offset(const tpu_view_t* v, int64_t k) {
  int64_t off = 0;
  for (int32_t d = v->ndim - 1; d >= 0; --d) {
    off += (k % v->sizes[d]) * v->strides[d];
    k /= v->sizes[d];
  }
  return off;
}

static double ref_isin_value(const tpu_view_t* v, int64_t k, tpu_dtype_t common, bool fl) {
  uint64_t tmp = 0;
  if (fl) {
    double x = view_get_f64(v, ref_isin_offset(v, k));
    tpu_convert(&tmp, common, 1, &x, TPU_DTYPE_F64, 1, 1);
    tpu_convert(&x, TPU_DTYPE_F64, 1, &tmp, common, 1, 1);
    return x;
  }
  int64_t x = view_get_i64(v, ref_isin_offset(v, k));
  tpu_convert(&tmp, common, 1, &x, TPU_DTYPE_I64, 1, 1);
  tpu_convert(&x, TPU_DTYPE_I64, 1, &tmp, common, 1, 1);
  return (double)x;
}

static tpu_status_t ref_isin(const tpu_op_def_t* def, const tpu_node_t* node) {
  isin_args_t a;
  if (node->num_outputs != 1) return unimpl("isin: output");
  TPU_RETURN_IF_ERROR(isin_parse(def, node, &node->outputs[0], &a));
  uint64_t st[2];
  tpu_view_t v[2];
  for (int k = 0; k < 2; ++k) tpu_value_to_view(&a.in[k], a.common, &st[k], &v[k]);
  bool fl = tpu_dtype_is_floating(a.common);
  int64_t n = tpu_view_numel(&v[0]), m = tpu_view_numel(&v[1]);
  const tpu_view_t* out = &node->outputs[0];
  for (int64_t i = 0; i < n; ++i) {
    bool found = false;
    double x = ref_isin_value(&v[0], i, a.common, fl);
    for (int64_t j = 0; j < m && !found; ++j) found = x == ref_isin_value(&v[1], j, a.common, fl);
    view_set_i64(out, ref_isin_offset(out, i), found != a.invert);
  }
  return TPU_OK;
}

tpu_status_t tpu_unique_reference(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (strncmp(def->name, "isin", 4) == 0) return ref_isin(def, node);
  uq_args_t a;
  TPU_RETURN_IF_ERROR(uq_parse(def, node, &a));
  if (a.by_dim) return ref_by_dim(&a, node);
  const tpu_view_t* x = a.self;
  int64_t n = a.n;
  if (a.kind == UQ_BINCOUNT) {
    int64_t size = a.minlength;
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = view_get_i64(x, ref_off(x, i));
      if (v < 0) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "negative");
      if (v + 1 > size) size = v + 1;
    }
    if (a.count) {
      view_set_i64(&node->outputs[0], 0, size);
      return TPU_OK;
    }
    const tpu_view_t* o = &node->outputs[0];
    for (int64_t b = 0; b < size; ++b) {
      double s = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        if (view_get_i64(x, ref_off(x, i)) != b) continue;
        s += a.weights ? view_get_f64(a.weights, ref_off(a.weights, i)) : 1.0;
        if (a.out_dtype == TPU_DTYPE_F32) s = (double)(float)s;
      }
      view_set_f64(o, ref_off(o, b), s);
    }
    return TPU_OK;
  }
  /* group of element i: unique — the number of distinct values below it;
   * consecutive — the number of run starts up to it, minus one. */
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool first = true;
    if (a.kind == UQ_CONSECUTIVE) {
      first = i == 0 || ref_cmp(x, i - 1, i) != 0;
    } else {
      for (int64_t j = 0; j < i && first; ++j) first = ref_cmp(x, j, i) != 0;
    }
    k += first;
  }
  if (a.count) {
    view_set_i64(&node->outputs[0], 0, k);
    return TPU_OK;
  }
  /* NaNs (unique of a floating input): the CPU numbers them in the order
   * of its unstable sort, taken from the sort row (tested against the CPU's
   * algorithm on its own); nan_rank[i]: NaNs before i in that order. */
  int64_t* nan_rank = NULL;
  if (a.kind == UQ_UNIQUE && tpu_dtype_is_floating(x->dtype) && n > 1) {
    int64_t* order = malloc(sizeof(int64_t) * (size_t)n);
    nan_rank = malloc(sizeof(int64_t) * (size_t)n);
    tpu_exec_ctx_t ctx = {0};
    tpu_status_t st = (order && nan_rank) ? uq_cpu_sort(&a, &ctx, order)
                                          : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "ref");
    if (st != TPU_OK) {
      free(order), free(nan_rank);
      return st;
    }
    int64_t r = 0;
    for (int64_t j = 0; j < n; ++j)
      if (isnan(view_get_f64(x, ref_off(x, order[j])))) nan_rank[order[j]] = r++;
    free(order);
  }
  int64_t run = -1;
  for (int64_t i = 0; i < n; ++i) {
    int64_t g;
    if (a.kind == UQ_CONSECUTIVE) {
      if (i == 0 || ref_cmp(x, i - 1, i) != 0) run++;
      g = run;
    } else if (nan_rank && isnan(view_get_f64(x, ref_off(x, i)))) {
      g = nan_rank[i]; /* after every number: distinct numbers below */
      for (int64_t j = 0; j < n; ++j) {
        if (isnan(view_get_f64(x, ref_off(x, j)))) continue;
        bool firstj = true;
        for (int64_t m = 0; m < j && firstj; ++m) firstj = ref_cmp(x, m, j) != 0;
        g += firstj;
      }
    } else {
      g = 0; /* distinct values less than x[i]: first occurrences j with x[j] < x[i] */
      for (int64_t j = 0; j < n; ++j) {
        if (ref_cmp(x, j, i) >= 0) continue;
        bool firstj = true;
        for (int64_t m = 0; m < j && firstj; ++m) firstj = ref_cmp(x, m, j) != 0;
        g += firstj;
      }
    }
    const tpu_view_t* o = &node->outputs[0];
    if (tpu_dtype_is_floating(x->dtype))
      view_set_f64(o, ref_off(o, g), view_get_f64(x, ref_off(x, i)));
    else
      view_set_i64(o, ref_off(o, g), view_get_i64(x, ref_off(x, i)));
    if (a.inverse) view_set_i64(&node->outputs[1], ref_off(&node->outputs[1], i), g);
    if (a.counts) {
      const tpu_view_t* c = &node->outputs[2];
      int64_t off = ref_off(c, g);
      bool firstg = true; /* zero the count at the group's first element */
      if (a.kind == UQ_CONSECUTIVE)
        firstg = i == 0 || ref_cmp(x, i - 1, i) != 0;
      else
        for (int64_t m = 0; m < i && firstg; ++m) firstg = ref_cmp(x, m, i) != 0;
      view_set_i64(c, off, (firstg ? 0 : view_get_i64(c, off)) + 1);
    }
  }
  free(nan_rank);
  return TPU_OK;
}

static const uq_impl_t k_unique = {UQ_UNIQUE, false}, k_unique_count = {UQ_UNIQUE, true},
                       k_consec = {UQ_CONSECUTIVE, false}, k_consec_count = {UQ_CONSECUTIVE, true},
                       k_bincount = {UQ_BINCOUNT, false}, k_bincount_count = {UQ_BINCOUNT, true},
                       k_dim = {UQ_DIM, false}, k_dim_count = {UQ_DIM, true};

#define UQ_ROW(name_, inputs_, attrs_, outputs_, aten_, impl_) \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = outputs_, .aten = aten_, \
   .kernel = uq_kernel, .infer = uq_infer, .check = uq_check, .impl = &impl_}

static const tpu_op_def_t k_rows[] = {
    UQ_ROW("unique", "self", "sorted,return_inverse,return_counts,sync_size",
           "output,inverse,counts", "_unique2", k_unique),
    UQ_ROW("unique_count", "self", "sorted,return_inverse,return_counts,sync_size", "count", "",
           k_unique_count),
    UQ_ROW("unique_consecutive", "self", "return_inverse,return_counts,dim,sync_size",
           "output,inverse,counts", "unique_consecutive", k_consec),
    UQ_ROW("unique_consecutive_count", "self", "return_inverse,return_counts,dim,sync_size",
           "count", "", k_consec_count),
    UQ_ROW("unique_dim", "self", "dim,sorted,return_inverse,return_counts,sync_size",
           "output,inverse,counts", "unique_dim", k_dim),
    UQ_ROW("unique_dim_count", "self", "dim,sorted,return_inverse,return_counts,sync_size",
           "count", "", k_dim_count),
    UQ_ROW("bincount", "self,weights?", "minlength,sync_size", "out", "bincount", k_bincount),
    UQ_ROW("bincount_count", "self,weights?", "minlength,sync_size", "count", "",
           k_bincount_count),
    {.name = "isin", .inputs = "elements,test_elements", .attrs = "assume_unique,invert",
     .outputs = "out", .aten = "isin.Tensor_Tensor isin.Tensor_Tensor_out", .kernel = isin_kernel,
     .infer = isin_infer, .check = isin_check, .impl = NULL},
    {.name = "isin_tensor_scalar", .inputs = "elements,test_element#",
     .attrs = "assume_unique,invert", .outputs = "out",
     .aten = "isin.Tensor_Scalar isin.Tensor_Scalar_out", .kernel = isin_kernel,
     .infer = isin_infer, .check = isin_check, .impl = NULL},
    {.name = "isin_scalar_tensor", .inputs = "element#,test_elements",
     .attrs = "assume_unique,invert", .outputs = "out",
     .aten = "isin.Scalar_Tensor isin.Scalar_Tensor_out", .kernel = isin_kernel,
     .infer = isin_infer, .check = isin_check, .impl = NULL},
};

const tpu_op_family_t tpu_family_unique

 = {"unique", k_rows,
                                           (int32_t)(sizeof(k_rows) / sizeof(k_rows[0]))};
