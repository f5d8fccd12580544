/* index.c — the index family: index_select, gather, scatter (src and value
 * forms), scatter_add, index_add, embedding_dense_backward and cat.
 *
 * Gather- and scatter-like ops share one engine. It walks an iteration shape
 * (the index's, or for index_select/index_add the result's/source's) split
 * into the indexed dim `dim` (length J) and the rest (R elements, walked by
 * view_walk.h). For element (j, r) it reads the index value p and moves one
 * element between a `from` and a `to` view, one of which is addressed with p
 * along `dim` instead of j:
 *   gather-like (index_select, gather): to = out, from = self[p];
 *   scatter-like (scatter*, index_add): to = out[p], from = src / value.
 * Gathers run in parallel over j. Scatters run in parallel over r only, with
 * j in increasing order inside a task, so duplicate indices resolve the same
 * way every time (last write wins; sums add in index order) and no two
 * threads touch one element. index_select of contiguous tensors copies
 * whole rows instead (embedding). Copies are typed per dtype (X-macros over
 * TPU_DTYPE_LIST); sums run in the compute type (half types in float32,
 * integers in wrapping int64) on `out` itself or on a converted copy.
 *
 * Indices are first copied to an int64 buffer and checked as a whole, so an
 * out-of-range index fails with TPU_CODE_INDEX_ERROR ("index 7 is out of
 * bounds for dimension 0 with size 5") before anything is written.
 * embedding_dense_backward buckets positions by index (a stable counting
 * sort) and sums each weight row in position order on one thread: results do
 * not depend on the thread count. cat converts each input into its slice of
 * the result (PyTorch's type promotion; legacy 1-D empty inputs are skipped).
 */
#include "kernels/index/index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/kernel_util.h"

/* ---- argument parsing ------------------------------------------------------ */

static const tpu_view_t* in_view(const tpu_node_t* node, int32_t i) {
  return (i < node->num_inputs && node->inputs[i].kind == TPU_VALUE_VIEW)
             ? &node->inputs[i].u.view
             : NULL;
}

static bool is_index_dtype(tpu_dtype_t d) { return d == TPU_DTYPE_I64 || d == TPU_DTYPE_I32; }

/* Size along d, treating a 0-dim tensor as [1]. */
static int64_t size_at(const tpu_view_t* v, int32_t d) { return v->ndim ? v->sizes[d] : 1; }
static int32_t rank1(const tpu_view_t* v) { return v->ndim ? v->ndim : 1; }

tpu_status_t tpu_ix_out_of_bounds(tpu_status_code_t code, int64_t index, int32_t dim, int64_t size) {
  return tpu_status_make(code, "index %lld is out of bounds for dimension %d with size %lld",
                         (long long)index, dim, (long long)size);
}

static void set_result(ix_args_t* a, const tpu_view_t* like, tpu_dtype_t dtype) {
  a->ndim = like->ndim;
  memcpy(a->sizes, like->sizes, sizeof(a->sizes));
  a->dtype = dtype;
}

static tpu_status_t parse_cat(const tpu_node_t* node, ix_args_t* a) {
  if (node->num_inputs == 0)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "torch.cat(): expected a non-empty list of Tensors");
  const tpu_view_t* ref = NULL;
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_view_t* v = in_view(node, i);
    if (!v) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "cat input %d is not a tensor", i);
    if (v->ndim == 0)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "zero-dimensional tensor (at position %d) cannot be concatenated", i);
    if (!ref && !(v->ndim == 1 && v->sizes[0] == 0)) ref = v;
  }
  a->dtype = tpu_result_type(node->inputs, node->num_inputs);
  if (!ref) { /* only legacy empty tensors: the result is one of them */
    set_result(a, in_view(node, 0), a->dtype);
    return TPU_OK;
  }
  TPU_RETURN_IF_ERROR(ku_wrap_dim(node->num_attrs ? tpu_attr_int(&node->attrs[0], 0) : 0,
                                  ref->ndim, &a->dim));
  set_result(a, ref, a->dtype);
  a->sizes[a->dim] = 0;
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_view_t* v = in_view(node, i);
    if (v->ndim == 1 && v->sizes[0] == 0) continue;
    if (v->ndim != ref->ndim)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Tensors must have same number of dimensions: got %d and %d",
                             ref->ndim, v->ndim);
    for (int32_t d = 0; d < v->ndim; ++d)
      if (d != a->dim && v->sizes[d] != ref->sizes[d])
        return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                               "Sizes of tensors must match except in dimension %d. Expected "
                               "size %lld but got size %lld for tensor number %d in the list.",
                               a->dim, (long long)ref->sizes[d], (long long)v->sizes[d], i);
    a->sizes[a->dim] += v->sizes[a->dim];
  }
  return TPU_OK;
}

static tpu_status_t parse_embedding(const tpu_node_t* node, ix_args_t* a) {
  a->self = in_view(node, 0);
  a->index = in_view(node, 1);
  if (!a->self || !a->index || node->num_attrs < 3)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "expected grad_output, indices and 3 attrs");
  if (!tpu_dtype_is_floating(a->self->dtype) || !is_index_dtype(a->index->dtype))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "embedding backward of %s with %s indices",
                           tpu_dtype_name(a->self->dtype), tpu_dtype_name(a->index->dtype));
  a->num_weights = tpu_attr_int(&node->attrs[0], 0);
  a->padding_idx = tpu_attr_int(&node->attrs[1], -1);
  a->scale_grad_by_freq = tpu_attr_bool(&node->attrs[2], false);
  int64_t d = a->self->ndim ? a->self->sizes[a->self->ndim - 1] : 1;
  if (a->num_weights < 0 || tpu_view_numel(a->self) != tpu_view_numel(a->index) * d)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "embedding_dense_backward: grad_output must have shape "
                           "indices.shape + [embedding_dim] and num_weights must be >= 0");
  a->ndim = 2;
  a->sizes[0] = a->num_weights, a->sizes[1] = d;
  a->dtype = a->self->dtype;
  return TPU_OK;
}

/* PyTorch's scatter/gather shape rules (ScatterGatherChecks.h). */
static tpu_status_t check_scatter_gather(const ix_args_t* a) {
  const tpu_view_t *self = a->self, *index = a->index, *src = a->src;
  bool gather = a->kind == IX_GATHER;
  if (tpu_view_numel(index) == 0) return TPU_OK; /* as PyTorch: no shape check when empty */
  if (rank1(index) != rank1(self) || (src && rank1(src) != rank1(index)))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Index tensor must have the same number of dimensions as %s tensor",
                           gather ? "input" : "self");
  for (int32_t d = 0; d < rank1(index); ++d) {
    bool bad_self = d != a->dim && size_at(index, d) > size_at(self, d);
    bool bad_src = src && size_at(index, d) > size_at(src, d);
    if (!bad_self && !bad_src) continue;
    char bi[160], bs[160], bsrc[160];
    ku_format_sizes(index, bi, sizeof bi), ku_format_sizes(self, bs, sizeof bs);
    if (gather)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Size does not match at dimension %d expected index %s to be no "
                             "larger than self %s apart from dimension %d",
                             d, bi, bs, a->dim);
    if (src)
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "Expected index %s to be no larger than self %s apart from "
                             "dimension %d and to be no larger size than src %s",
                             bi, bs, a->dim, ku_format_sizes(src, bsrc, sizeof bsrc));
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected index %s to be no larger than self %s apart from dimension %d",
                           bi, bs, a->dim);
  }
  return TPU_OK;
}

static tpu_status_t check_index_add(const ix_args_t* a) {
  const tpu_view_t *self = a->self, *src = a->src;
  int64_t n = tpu_view_numel(a->index);
  if (a->index->ndim > 1)
    return tpu_status_make(TPU_CODE_INDEX_ERROR, "index_add_(): Index is supposed to be a vector");
  if (rank1(src) != rank1(self))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "index_add_(): self (%dD) and source (%dD) must have the same number "
                           "of dimensions",
                           self->ndim, src->ndim);
  if (n != size_at(src, a->dim))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "index_add_(): Number of indices (%lld) should be equal to "
                           "source.size(dim) (%lld)",
                           (long long)n, (long long)size_at(src, a->dim));
  for (int32_t d = 0; d < rank1(self); ++d)
    if (d != a->dim && size_at(src, d) != size_at(self, d))
      return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                             "index_add_(): source.size(%d) (%lld) must equal self.size(%d) "
                             "(%lld)",
                             d, (long long)size_at(src, d), d, (long long)size_at(self, d));
  return TPU_OK;
}

tpu_status_t tpu_ix_parse(const tpu_op_def_t* def, const tpu_node_t* node, ix_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = ((const ix_spec_t*)def->impl)->kind;
  if (a->kind == IX_CAT) return parse_cat(node, a);
  if (a->kind == IX_EMBEDDING_BACKWARD) return parse_embedding(node, a);
  a->self = in_view(node, 0);
  a->index = in_view(node, 1);
  bool has_src = a->kind == IX_SCATTER || a->kind == IX_SCATTER_ADD || a->kind == IX_INDEX_ADD;
  a->src = has_src ? in_view(node, 2) : NULL;
  if (a->kind == IX_SCATTER_VALUE)
    a->value = (node->num_inputs > 2 && node->inputs[2].kind != TPU_VALUE_NONE) ? &node->inputs[2]
                                                                               : NULL;
  if (!a->self || !a->index || (has_src && !a->src) || (a->kind == IX_SCATTER_VALUE && !a->value))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "missing tensor inputs");
  tpu_dtype_t dt = a->self->dtype;
  /* gather/scatter check the index dtype only when the index is non-empty. */
  bool any_index = (a->kind == IX_GATHER || a->kind == IX_SCATTER || a->kind == IX_SCATTER_VALUE ||
                    a->kind == IX_SCATTER_ADD) &&
                   tpu_view_numel(a->index) == 0 && a->index->dtype != TPU_DTYPE_BOOL &&
                   !tpu_dtype_is_floating(a->index->dtype);
  if (!(is_index_dtype(a->index->dtype) || any_index) || (a->src && a->src->dtype != dt))
    return tpu_status_make(TPU_CODE_UNIMPLEMENTED, "%s with %s index%s%s", tpu_dtype_name(dt),
                           tpu_dtype_name(a->index->dtype), a->src ? " and src " : "",
                           a->src ? tpu_dtype_name(a->src->dtype) : "");
  TPU_RETURN_IF_ERROR(ku_wrap_dim(node->num_attrs ? tpu_attr_int(&node->attrs[0], 0) : 0,
                                  a->self->ndim, &a->dim));
  set_result(a, a->self, dt);
  if (a->kind == IX_INDEX_SELECT) {
    int64_t n = tpu_view_numel(a->index);
    if (a->index->ndim > 1)
      return tpu_status_make(TPU_CODE_INDEX_ERROR,
                             "index_select(): Index is supposed to be a vector");
    if (a->self->ndim == 0 && n != 1)
      return tpu_status_make(TPU_CODE_INDEX_ERROR,
                             "index_select(): Index to scalar can have only 1 value, got %lld "
                             "value(s)",
                             (long long)n);
    if (a->self->ndim) a->sizes[a->dim] = n;
    return TPU_OK;
  }
  if (a->kind == IX_INDEX_ADD) {
    const tpu_attr_t* alpha = node->num_attrs > 1 ? &node->attrs[1] : NULL;
    a->alpha = tpu_attr_float(alpha, 1.0);
    a->ialpha = tpu_attr_int(alpha, 1);
    return check_index_add(a);
  }
  if (a->kind == IX_GATHER) set_result(a, a->index, dt);
  return check_scatter_gather(a);
}

tpu_status_t tpu_ix_check_out(const ix_args_t* a, const tpu_view_t* out) {
  bool same = out->ndim == a->ndim;
  for (int32_t d = 0; same && d < a->ndim; ++d) same = out->sizes[d] == a->sizes[d];
  if (!same) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "out has the wrong shape");
  if (a->kind != IX_CAT && out->dtype != a->dtype)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "Expected out tensor to have dtype %s, but got %s instead",
                           tpu_dtype_name(a->dtype), tpu_dtype_name(out->dtype));
  return TPU_OK;
}

/* ---- the gather/scatter engine ------------------------------------------------ */

typedef struct ix_job ix_job_t;
/* Moves the n elements of one run: rest elements [r0, r0 + n) at index row j. */
typedef void (*ix_run_fn)(const ix_job_t* jb, int64_t j, const int64_t* offs,
                          const int64_t* steps, int64_t n, int64_t r0);

struct ix_job {
  walk_t rest;               /* the dims other than `dim`: view 0 = to, 1 = from */
  int64_t J, R;              /* length of `dim`; elements of the rest */
  int64_t to_j, to_p;        /* `to` stride applied to j / to the index value p */
  int64_t from_j, from_p;
  const int64_t* idx;        /* index value of (j, r): idx[j * idx_j + r * idx_r] */
  int64_t idx_j, idx_r;
  char* to;
  const char* from;
  bool scatter;              /* `to` is indexed */
  ix_run_fn run;
  double falpha;
  int64_t ialpha;
};

#define IX_COPY(E, name, T, C, K)                                                       \
  static void copy_##E(const ix_job_t* jb, int64_t j, const int64_t* offs,              \
                       const int64_t* steps, int64_t n, int64_t r0) {                   \
    T* to = (T*)jb->to + offs[0] + j * jb->to_j;                                        \
    const T* from = (const T*)jb->from + offs[1] + j * jb->from_j;                      \
    const int64_t* ix = jb->idx + j * jb->idx_j + r0 * jb->idx_r;                       \
    if (jb->idx_r == 0) { /* one index for the whole run (index_select, embedding) */   \
      to += ix[0] * jb->to_p, from += ix[0] * jb->from_p;                               \
      if (steps[0] == 1 && steps[1] == 1) {                                             \
        memcpy(to, from, (size_t)n * sizeof(T));                                        \
        return;                                                                         \
      }                                                                                 \
      for (int64_t e = 0; e < n; ++e) to[e * steps[0]] = from[e * steps[1]];            \
      return;                                                                           \
    }                                                                                   \
    for (int64_t e = 0; e < n; ++e) {                                                   \
      int64_t p = ix[e * jb->idx_r];                                                    \
      to[e * steps[0] + p * jb->to_p] = from[e * steps[1] + p * jb->from_p];            \
    }                                                                                   \
  }
TPU_DTYPE_LIST(IX_COPY)
#undef IX_COPY

static const ix_run_fn k_copy[TPU_DTYPE_COUNT] = {
#define IX_ENTRY(E, name, T, C, K) copy_##E,
    TPU_DTYPE_LIST(IX_ENTRY)
#undef IX_ENTRY
};

/* to += alpha * from in compute type T, wrapping through W. */
#define IX_ADD(C, T, W, ALPHA)                                                          \
  static void add_##C(const ix_job_t* jb, int64_t j, const int64_t* offs,               \
                      const int64_t* steps, int64_t n, int64_t r0) {                    \
    T* to = (T*)jb->to + offs[0] + j * jb->to_j;                                        \
    const T* from = (const T*)jb->from + offs[1] + j * jb->from_j;                      \
    const int64_t* ix = jb->idx + j * jb->idx_j + r0 * jb->idx_r;                       \
    const W alpha = (W)(T)jb->ALPHA;                                                    \
    for (int64_t e = 0; e < n; ++e) {                                                   \
      int64_t p = ix[e * jb->idx_r];                                                    \
      T* dst = &to[e * steps[0] + p * jb->to_p];                                        \
      *dst = (T)((W)*dst + alpha * (W)from[e * steps[1] + p * jb->from_p]);             \
    }                                                                                   \
  }
IX_ADD(I64, int64_t, uint64_t, ialpha)
IX_ADD(F32, float, float, falpha)
IX_ADD(F64, double, double, falpha)
#undef IX_ADD

static const ix_run_fn k_add[TPU_COMPUTE_COUNT] = {
    [TPU_COMPUTE_I64] = add_I64, [TPU_COMPUTE_F32] = add_F32, [TPU_COMPUTE_F64] = add_F64};

typedef struct ix_task {
  const ix_job_t* jb;
  int64_t j;
} ix_task_t;

static void ix_run(void* arg, const int64_t* offs, const int64_t* steps, int64_t n,
                   int64_t logical) {
  const ix_task_t* t = (const ix_task_t*)arg;
  t->jb->run(t->jb, t->j, offs, steps, n, logical);
}

static void ix_chunk(void* arg, int64_t begin, int64_t end) {
  const ix_job_t* jb = (const ix_job_t*)arg;
  ix_task_t t = {jb, 0};
  if (jb->scatter) {
    for (t.j = 0; t.j < jb->J; ++t.j) walk_range(&jb->rest, begin, end, ix_run, &t);
  } else {
    for (t.j = begin; t.j < end; ++t.j) walk_range(&jb->rest, 0, jb->R, ix_run, &t);
  }
}

/* Lays the job over an iteration shape whose dim `dim` is indexed. */
static void job_init(ix_job_t* jb, const tpu_view_t* shape, int32_t dim, const int64_t* to_strides,
                     const int64_t* from_strides, bool scatter) {
  int64_t rs[TPU_MAX_DIMS], ts[TPU_MAX_DIMS], fs[TPU_MAX_DIMS];
  int32_t n = 0;
  for (int32_t d = 0; d < shape->ndim; ++d) {
    if (d == dim) continue;
    rs[n] = shape->sizes[d], ts[n] = to_strides[d], fs[n] = from_strides[d];
    n++;
  }
  const int64_t* st[2] = {ts, fs};
  walk_init(&jb->rest, n, rs, 2, st);
  jb->J = shape->sizes[dim];
  jb->R = jb->rest.numel;
  jb->scatter = scatter;
  jb->to_j = scatter ? 0 : to_strides[dim];
  jb->to_p = scatter ? to_strides[dim] : 0;
  jb->from_j = scatter ? from_strides[dim] : 0;
  jb->from_p = scatter ? 0 : from_strides[dim];
}

static void job_execute(const ix_job_t* jb) {
  if (jb->J == 0 || jb->R == 0) return;
  if (jb->scatter)
    tpu_parallel_for(jb->R, WALK_GRAIN, ix_chunk, (void*)jb);
  else
    tpu_parallel_for(jb->J, jb->R >= WALK_GRAIN ? 1 : WALK_GRAIN / jb->R, ix_chunk, (void*)jb);
}

/* A 0-dim view as [1]. */
static tpu_view_t as_1d(const tpu_view_t* v) {
  tpu_view_t r = *v;
  if (r.ndim == 0) r.ndim = 1, r.sizes[0] = 1, r.strides[0] = 1;
  return r;
}

/* Copies `index` into a new int64 buffer ordered [dim, other dims...] and
 * checks every value against `bound` (messages name dimension `msg_dim`).
 * An out-of-range value fails with `code`: PyTorch raises IndexError for
 * index_select/index_add/embedding but RuntimeError for gather/scatter. */
static tpu_status_t load_index(const tpu_view_t* index, int32_t dim, int32_t msg_dim,
                               int64_t bound, tpu_status_code_t code, int64_t** out) {
  tpu_view_t v = as_1d(index), perm = v;
  for (int32_t d = 0, k = 1; d < v.ndim; ++d) {
    int32_t to = d == dim ? 0 : k++;
    perm.sizes[to] = v.sizes[d], perm.strides[to] = v.strides[d];
  }
  int64_t n = tpu_view_numel(&v);
  int64_t* buf = malloc((size_t)n * sizeof(int64_t) + sizeof(int64_t));
  if (!buf) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "index buffer of %lld entries", (long long)n);
  tpu_view_t dst = view_of(buf, TPU_DTYPE_I64, perm.ndim, perm.sizes);
  view_copy(&dst, &perm);
  for (int64_t i = 0; i < n; ++i)
    if (buf[i] < 0 || buf[i] >= bound) {
      int64_t bad = buf[i];
      free(buf);
      return tpu_ix_out_of_bounds(code, bad, msg_dim, bound);
    }
  *out = buf;
  return TPU_OK;
}

/* index_select of contiguous self and out, seen as [A, S, B] and [A, N, B]:
 * out[a, j, :] = self[a, idx[j], :], one memcpy of B elements per (a, j)
 * (embedding's rows). Tasks take whole rows, at least ROWS_BYTES each, so
 * small tables stay on one thread. */
#define ROWS_BYTES 65536
typedef struct rows_job {
  const char* from;
  char* to;
  const int64_t* idx;
  int64_t N, S;
  size_t row; /* bytes per row: B elements */
} rows_job_t;

/* Rows ahead of the copy whose lines are prefetched: the rows of a large
 * table are scattered over DRAM, and a row's first miss waits a full
 * memory latency that the hardware prefetchers cannot foresee. */
#define ROWS_AHEAD 4
#define ROWS_PREFETCH_MAX 8192 /* bytes of a row prefetched */

static const char* rows_src(const rows_job_t* jb, int64_t i) {
  int64_t a = i / jb->N, j = i % jb->N;
  return jb->from + (size_t)(a * jb->S + jb->idx[j]) * jb->row;
}

static void rows_chunk(void* arg, int64_t begin, int64_t end) {
  const rows_job_t* jb = (const rows_job_t*)arg;
  size_t ahead = jb->row < ROWS_PREFETCH_MAX ? jb->row : ROWS_PREFETCH_MAX;
  for (int64_t i = begin; i < end; ++i) {
    if (i + ROWS_AHEAD < end) {
      const char* next = rows_src(jb, i + ROWS_AHEAD);
      for (size_t b = 0; b < ahead; b += 64) __builtin_prefetch(next + b, 0, 3);
    }
    memcpy(jb->to + (size_t)i * jb->row, rows_src(jb, i), jb->row);
  }
}

static void select_rows(const tpu_view_t* self, const tpu_view_t* out, int32_t dim,
                        const int64_t* idx) {
  rows_job_t jb = {tpu_view_ptr(self), tpu_view_ptr(out), idx, out->sizes[dim], self->sizes[dim],
                   tpu_dtype_size(self->dtype)};
  int64_t A = 1;
  for (int32_t d = 0; d < dim; ++d) A *= out->sizes[d];
  for (int32_t d = dim + 1; d < out->ndim; ++d) jb.row *= (size_t)out->sizes[d];
  int64_t grain = jb.row >= ROWS_BYTES ? 1 : (int64_t)(ROWS_BYTES / (jb.row ? jb.row : 1));
  tpu_parallel_for(A * jb.N, grain, rows_chunk, &jb);
}

/* index_select, gather: out[i] = self[i with dim -> p]. */
static tpu_status_t run_gather(const ix_args_t* a, const tpu_node_t* node, const tpu_view_t* out) {
  tpu_view_t self = as_1d(a->self), res = as_1d(out);
  bool select = a->kind == IX_INDEX_SELECT;
  if (tpu_view_numel(&res) == 0) return TPU_OK;
  int64_t* idx = NULL;
  TPU_RETURN_IF_ERROR(load_index(a->index, select ? 0 : a->dim, a->dim, self.sizes[a->dim],
                                 select ? TPU_CODE_INDEX_ERROR : TPU_CODE_INVALID_ARGUMENT, &idx));
  if (select && tpu_view_is_contiguous(&self) && tpu_view_is_contiguous(&res)) {
    select_rows(&self, &res, a->dim, idx);
    free(idx);
    return TPU_OK;
  }
  ix_job_t jb = {0};
  job_init(&jb, &res, a->dim, res.strides, self.strides, false);
  jb.idx = idx;
  jb.idx_j = select ? 1 : jb.R;
  jb.idx_r = select ? 0 : 1;
  jb.to = tpu_view_ptr(&res);
  jb.from = tpu_view_ptr(&self);
  jb.run = k_copy[a->dtype];
  job_execute(&jb);
  free(idx);
  return TPU_OK;
}

/* scatter, scatter_value, scatter_add, index_add: out = self, then out[p] op= src. */
static tpu_status_t run_scatter(const ix_args_t* a, const tpu_node_t* node, const tpu_view_t* out) {
  if (!views_same(out, a->self)) view_copy(out, a->self);
  bool add = a->kind == IX_SCATTER_ADD || a->kind == IX_INDEX_ADD;
  bool by_row = a->kind == IX_INDEX_ADD; /* a 1-D index along dim, else one per element */
  tpu_view_t dst = as_1d(out);
  tpu_view_t shape = as_1d(by_row ? a->src : a->index);
  if (tpu_view_numel(&shape) == 0 || tpu_view_numel(&dst) == 0) return TPU_OK;
  tpu_view_t src;
  uint64_t scalar = 0;
  int64_t zeros[TPU_MAX_DIMS] = {0};
  if (a->value)
    tpu_value_to_view(a->value, a->dtype, &scalar, &src);
  else
    src = as_1d(a->src);
  int64_t* idx = NULL;
  TPU_RETURN_IF_ERROR(load_index(a->index, by_row ? 0 : a->dim, a->dim, dst.sizes[a->dim],
                                 by_row ? TPU_CODE_INDEX_ERROR : TPU_CODE_INVALID_ARGUMENT, &idx));
  ix_job_t jb = {0};
  jb.idx = idx;
  jb.run = k_copy[a->dtype];
  /* Sums run in the compute type: on out/src directly when they already
   * hold it, else on converted contiguous copies. */
  void *acc_buf = NULL, *src_buf = NULL;
  tpu_view_t acc = dst;
  if (add) {
    /* bool sums (PyTorch: a logical or) run in int64, converted back as != 0. */
    tpu_compute_type_t ct =
        a->dtype == TPU_DTYPE_BOOL ? TPU_COMPUTE_I64 : tpu_dtype_compute(a->dtype);
    tpu_dtype_t cdt = tpu_compute_storage_dtype(ct);
    jb.run = k_add[ct];
    jb.falpha = a->kind == IX_INDEX_ADD ? a->alpha : 1.0;
    jb.ialpha = a->kind == IX_INDEX_ADD ? a->ialpha : 1;
    size_t es = tpu_dtype_size(cdt);
    if (cdt != a->dtype) {
      acc_buf = malloc((size_t)tpu_view_numel(&dst) * es);
      src_buf = malloc((size_t)tpu_view_numel(&src) * es + es);
      if (!acc_buf || !src_buf) {
        free(acc_buf), free(src_buf), free(idx);
        return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "scatter-add scratch allocation failed");
      }
      acc = view_of(acc_buf, cdt, dst.ndim, dst.sizes);
      view_copy(&acc, &dst);
      tpu_view_t s2 = view_of(src_buf, cdt, src.ndim, src.sizes);
      view_copy(&s2, &src);
      src = s2;
    }
  }
  job_init(&jb, &shape, a->dim, acc.strides, a->value ? zeros : src.strides, true);
  jb.idx_j = by_row ? 1 : jb.R;
  jb.idx_r = by_row ? 0 : 1;
  jb.to = tpu_view_ptr(&acc);
  jb.from = tpu_view_ptr(&src);
  job_execute(&jb);
  if (acc_buf) view_copy(&dst, &acc);
  free(acc_buf), free(src_buf), free(idx);
  return TPU_OK;
}

/* ---- embedding_dense_backward --------------------------------------------------- */

typedef struct emb_job {
  int64_t d;            /* embedding dim */
  const int64_t* start; /* bucket w holds order[start[w] .. start[w + 1]) */
  const int64_t* order; /* positions, grouped by index, increasing within a bucket */
  const char* grad;     /* [N, d] in the compute type */
  char* acc;            /* [num_weights, d] in the compute type */
  int64_t padding_idx;
  bool scale;
  tpu_dtype_t half;     /* emb_rows_half: the dtype of acc (float32 compute) */
} emb_job_t;

#define EMB_ROWS(C, T)                                                                  \
  static void emb_rows_##C(void* arg, int64_t begin, int64_t end) {                     \
    const emb_job_t* j = (const emb_job_t*)arg;                                         \
    for (int64_t w = begin; w < end; ++w) {                                             \
      T* row = (T*)j->acc + w * j->d;                                                   \
      for (int64_t x = 0; x < j->d; ++x) row[x] = 0;                                    \
      int64_t count = j->start[w + 1] - j->start[w];                                    \
      if (w == j->padding_idx || count == 0) continue;                                  \
      T scale = j->scale ? (T)(1.0 / (double)count) : (T)1;                             \
      for (int64_t k = j->start[w]; k < j->start[w + 1]; ++k) {                         \
        const T* g = (const T*)j->grad + j->order[k] * j->d;                            \
        for (int64_t x = 0; x < j->d; ++x) row[x] += g[x] * scale;                      \
      }                                                                                 \
    }                                                                                   \
  }
EMB_ROWS(F32, float)
EMB_ROWS(F64, double)
#undef EMB_ROWS

static void (*const k_emb_rows[TPU_COMPUTE_COUNT])(void*, int64_t, int64_t) = {
    [TPU_COMPUTE_F32] = emb_rows_F32, [TPU_COMPUTE_F64] = emb_rows_F64};

/* Half-type weights: each row is summed in float32 over blocks of
 * EMB_BLOCK columns on the task's stack and rounded once into acc (a
 * contiguous bfloat16/float16 result), as emb_rows_F32 then a conversion
 * would, without a float32 copy of the whole table (at GPT-2's vocabulary,
 * 154 MB of fresh pages per call). */
#define EMB_BLOCK 512
static void emb_rows_half(void* arg, int64_t begin, int64_t end) {
  const emb_job_t* j = (const emb_job_t*)arg;
  size_t es = tpu_dtype_size(j->half);
  float row[EMB_BLOCK];
  for (int64_t w = begin; w < end; ++w) {
    char* dst = j->acc + (size_t)(w * j->d) * es;
    int64_t count = j->start[w + 1] - j->start[w];
    if (w == j->padding_idx || count == 0) { /* +0.0 is all-zero bits in both half types */
      memset(dst, 0, (size_t)j->d * es);
      continue;
    }
    float scale = j->scale ? (float)(1.0 / (double)count) : 1.0f;
    for (int64_t x0 = 0; x0 < j->d; x0 += EMB_BLOCK) {
      int64_t nx = j->d - x0 < EMB_BLOCK ? j->d - x0 : EMB_BLOCK;
      for (int64_t x = 0; x < nx; ++x) row[x] = 0;
      for (int64_t k = j->start[w]; k < j->start[w + 1]; ++k) {
        const float* g = (const float*)j->grad + j->order[k] * j->d + x0;
        for (int64_t x = 0; x < nx; ++x) row[x] += g[x] * scale;
      }
      tpu_convert(dst + (size_t)x0 * es, j->half, 1, row, TPU_DTYPE_F32, 1, nx);
    }
  }
}
#undef EMB_BLOCK

static tpu_status_t run_embedding(const ix_args_t* a, const tpu_node_t* node,
                                  const tpu_view_t* out) {
  int64_t n = tpu_view_numel(a->index), w = a->num_weights, d = a->sizes[1];
  if (w * d == 0) return TPU_OK;
  tpu_compute_type_t ct = tpu_dtype_compute(a->dtype);
  tpu_dtype_t cdt = tpu_compute_storage_dtype(ct);
  size_t es = tpu_dtype_size(cdt);
  int64_t* idx = NULL;
  TPU_RETURN_IF_ERROR(load_index(a->index, 0, 0, w, TPU_CODE_INDEX_ERROR, &idx));
  bool grad_direct = a->self->dtype == cdt && tpu_view_is_contiguous(a->self);
  bool acc_direct = out->dtype == cdt && tpu_view_is_contiguous(out);
  bool acc_half = !acc_direct && ct == TPU_COMPUTE_F32 && tpu_view_is_contiguous(out) &&
                  (out->dtype == TPU_DTYPE_BF16 || out->dtype == TPU_DTYPE_F16);
  int64_t* start = calloc((size_t)w + 2, sizeof(int64_t));
  int64_t* order = malloc((size_t)n * sizeof(int64_t) + sizeof(int64_t));
  void* grad = grad_direct ? NULL : malloc((size_t)(n * d) * es + es);
  void* acc = acc_direct || acc_half ? NULL : malloc((size_t)(w * d) * es);
  if (!start || !order || (!grad_direct && !grad) || (!acc_direct && !acc_half && !acc)) {
    free(idx), free(start), free(order), free(grad), free(acc);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "embedding backward scratch allocation failed");
  }
  /* Stable counting sort of positions by index. */
  for (int64_t i = 0; i < n; ++i) start[idx[i] + 2]++;
  for (int64_t i = 2; i < w + 2; ++i) start[i] += start[i - 1];
  for (int64_t i = 0; i < n; ++i) order[start[idx[i] + 1]++] = i;
  if (!grad_direct) {
    tpu_view_t g = view_of(grad, cdt, a->self->ndim, a->self->sizes);
    view_copy(&g, a->self);
  }
  emb_job_t job = {d,
                   start,
                   order,
                   grad_direct ? tpu_view_ptr(a->self) : grad,
                   acc_direct || acc_half ? tpu_view_ptr(out) : acc,
                   a->padding_idx,
                   a->scale_grad_by_freq,
                   out->dtype};
  tpu_parallel_for(w, d >= WALK_GRAIN ? 1 : WALK_GRAIN / d, acc_half ? emb_rows_half : k_emb_rows[ct],
                   &job);
  if (!acc_direct && !acc_half) {
    tpu_view_t src = view_of(acc, cdt, 2, a->sizes);
    view_copy(out, &src);
  }
  free(idx), free(start), free(order), free(grad), free(acc);
  return TPU_OK;
}

/* ---- cat ------------------------------------------------------------------------ */

static tpu_status_t run_cat(const ix_args_t* a, const tpu_node_t* node, const tpu_view_t* out) {
  if (tpu_view_numel(out) == 0) return TPU_OK;
  int64_t offset = 0;
  for (int32_t i = 0; i < node->num_inputs; ++i) {
    const tpu_view_t* v = &node->inputs[i].u.view;
    if (v->ndim == 1 && v->sizes[0] == 0) continue;
    tpu_view_t slice = *out;
    slice.addr = (uint64_t)(uintptr_t)view_at(out, offset * out->strides[a->dim]);
    slice.sizes[a->dim] = v->sizes[a->dim];
    view_copy(&slice, v);
    offset += v->sizes[a->dim];
  }
  return TPU_OK;
}

/* ---- rows ------------------------------------------------------------------------ */

typedef tpu_status_t (*ix_runner_fn)(const ix_args_t* a, const tpu_node_t* node,
                                     const tpu_view_t* out);

static const ix_runner_fn k_runners[] = {
    [IX_INDEX_SELECT] = run_gather,         [IX_GATHER] = run_gather,
    [IX_SCATTER] = run_scatter,             [IX_SCATTER_VALUE] = run_scatter,
    [IX_SCATTER_ADD] = run_scatter,         [IX_INDEX_ADD] = run_scatter,
    [IX_EMBEDDING_BACKWARD] = run_embedding, [IX_CAT] = run_cat,
};

static tpu_status_t index_kernel(const tpu_op_def_t* def, const tpu_node_t* node,
                                 tpu_exec_ctx_t* ctx) {
  (void)ctx;
  ix_args_t a;
  TPU_RETURN_IF_ERROR(tpu_ix_parse(def, node, &a));
  if (node->num_outputs < 1) return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "missing output");
  TPU_RETURN_IF_ERROR(tpu_ix_check_out(&a, &node->outputs[0]));
  return k_runners[a.kind](&a, node, &node->outputs[0]);
}

static tpu_status_t index_infer(const tpu_op_def_t* def, const tpu_node_t* node,
                                tpu_view_t* outs) {
  ix_args_t a;
  TPU_RETURN_IF_ERROR(tpu_ix_parse(def, node, &a));
  memset(&outs[0], 0, sizeof(outs[0]));
  outs[0].dtype = a.dtype;
  outs[0].ndim = a.ndim;
  memcpy(outs[0].sizes, a.sizes, sizeof(a.sizes));
  tpu_view_set_contiguous(&outs[0]);
  return TPU_OK;
}

static tpu_status_t index_check(const tpu_op_def_t* def, const tpu_node_t* node) {
  ix_args_t a;
  return tpu_ix_parse(def, node, &a);
}

static const ix_spec_t k_select = {IX_INDEX_SELECT}, k_gather = {IX_GATHER},
                       k_scatter = {IX_SCATTER}, k_scatter_value = {IX_SCATTER_VALUE},
                       k_scatter_add = {IX_SCATTER_ADD}, k_index_add = {IX_INDEX_ADD},
                       k_embedding = {IX_EMBEDDING_BACKWARD}, k_cat = {IX_CAT};

#define IX_ROW_F(name_, inputs_, attrs_, aten_, spec, flags_) \
  {.name = name_, .inputs = inputs_, .attrs = attrs_, .outputs = "out", .aten = aten_, \
   .kernel = index_kernel, .infer = index_infer, .check = index_check, .impl = &spec, \
   .flags = flags_}
#define IX_ROW(name, inputs, attrs, aten, spec) IX_ROW_F(name, inputs, attrs, aten, spec, 0)

static const tpu_op_def_t k_ops[] = {
    IX_ROW_F("index_select", "self,index", "dim", "index_select index_select.out", k_select,
             TPU_OP_OUT_NO_OVERLAP | TPU_OP_COMPLEX_AS_BITS),
    IX_ROW_F("gather", "self,index", "dim", "gather gather.out", k_gather,
             TPU_OP_OUT_NO_OVERLAP | TPU_OP_COMPLEX_AS_BITS),
    IX_ROW("scatter", "self,index,src", "dim", "scatter.src scatter_.src scatter.src_out",
           k_scatter),
    IX_ROW("scatter_value", "self,index,value#", "dim",
           "scatter.value scatter_.value scatter.value_out", k_scatter_value),
    IX_ROW("scatter_add", "self,index,src", "dim", "scatter_add scatter_add_ scatter_add.out",
           k_scatter_add),
    IX_ROW("index_add", "self,index,source", "dim,alpha", "index_add index_add_ index_add.out",
           k_index_add),
    IX_ROW("embedding_dense_backward", "grad_output,indices",
           "num_weights,padding_idx,scale_grad_by_freq",
           "embedding_dense_backward embedding_dense_backward.out", k_embedding),
    /* complex too: cat converts each input into its slice (view_copy) */
    IX_ROW_F("cat", "tensors*", "dim", "cat cat.out", k_cat, TPU_OP_OUT_NO_OVERLAP | TPU_OP_COMPLEX),
};

const tpu_op_family_t tpu_family_index = {"index", k_ops,
                                          (int32_t)(sizeof(k_ops) / sizeof(k_ops[0]))};
