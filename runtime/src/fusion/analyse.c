/* analyse.c — phase 1 of the fusion compiler: the structural analysis of a
 * recorded graph, and its key (see fusion.h). */
#include <stdlib.h>
#include <string.h>

#include "fusion/analysis.h"
#include "fusion/extent.h"
#include "tpu/ops.h"

/* ---- view identity ------------------------------------------------------------ */

bool tpu_fusion_same_view(const tpu_view_t* a, const tpu_view_t* b) {
  if (a->addr != b->addr || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d] || a->strides[d] != b->strides[d]) return false;
  return true;
}

uint64_t tpu_fusion_view_hash(const tpu_view_t* v) {
  uint64_t h = 1469598103934665603ull ^ v->addr;
  h = (h ^ (uint64_t)v->dtype) * 1099511628211ull;
  for (int32_t d = 0; d < v->ndim; ++d) {
    h = (h ^ (uint64_t)v->sizes[d]) * 1099511628211ull;
    h = (h ^ (uint64_t)v->strides[d]) * 1099511628211ull;
  }
  return h ^ (h >> 29);
}

/* Open-addressing map from a view (by content) to its current value id. */
typedef struct vmap {
  const tpu_view_t** keys;
  int32_t* ids;
  int32_t* freed; /* when the written value's buffer is freed (free point) */
  int64_t mask;
} vmap_t;

static int64_t vmap_slot(const vmap_t* m, const tpu_view_t* v) {
  int64_t i = (int64_t)(tpu_fusion_view_hash(v) & (uint64_t)m->mask);
  while (m->keys[i] && !tpu_fusion_same_view(m->keys[i], v)) i = (i + 1) & m->mask;
  return i;
}

/* ---- key building ---------------------------------------------------------------- */

static bool key_reserve(tpu_fusion_analysis_t* a, int64_t more) {
  if (a->key_len + more <= a->key_cap) return true;
  int64_t cap = a->key_cap ? a->key_cap : 256;
  while (cap < a->key_len + more) cap *= 2;
  uint8_t* k = realloc(a->key, (size_t)cap);
  if (!k) return false;
  a->key = k;
  a->key_cap = cap;
  return true;
}

/* The key's hash, a word at a time (the cache compares whole keys, so a
 * collision costs a comparison, never a wrong program). */
static uint64_t key_hash(const uint8_t* key, int64_t len) {
  uint64_t h = 1469598103934665603ull;
  int64_t b = 0;
  for (; b + 8 <= len; b += 8) {
    uint64_t w;
    memcpy(&w, key + b, sizeof(w));
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  for (; b < len; ++b) h = (h ^ key[b]) * 1099511628211ull;
  return h;
}

static void key_put(tpu_fusion_analysis_t* a, int32_t value) {
  memcpy(a->key + a->key_len, &value, sizeof(value));
  a->key_len += (int64_t)sizeof(value);
}

/* ---- eligibility and conflicts ------------------------------------------------------ */

/* A node that can run tile by tile: a pointwise op with one non-empty output
 * whose view inputs broadcast to it (right-aligned, sizes equal or 1), and
 * whose inputs either are its output or do not touch it. */
static bool tileable(const tpu_node_t* node) {
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (!(def->flags & TPU_OP_POINTWISE) || node->num_outputs != 1) return false;
  if (tpu_op_mutated_inputs(node->op)) return false; /* writes an input: runs alone */
  const tpu_view_t* out = &node->outputs[0];
  if (tpu_view_is_absent(out) || tpu_view_numel(out) == 0 || tpu_dtype_is_storage_only(out->dtype))
    return false;
  for (int32_t k = 0; k < node->num_inputs; ++k) {
    const tpu_value_t* v = &node->inputs[k];
    if (v->kind != TPU_VALUE_VIEW) continue;
    const tpu_view_t* in = &v->u.view;
    if (in->ndim > out->ndim || tpu_dtype_is_storage_only(in->dtype)) return false;
    int32_t shift = out->ndim - in->ndim;
    for (int32_t d = 0; d < in->ndim; ++d)
      if (in->sizes[d] != 1 && in->sizes[d] != out->sizes[d + shift]) return false;
    if (tpu_views_may_overlap(in, out) && !tpu_fusion_same_view(in, out)) return false;
  }
  return true;
}

static bool same_shape(const tpu_view_t* a, const tpu_view_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

/* ---- GEMM groups ----------------------------------------------------------------------- */

bool tpu_fusion_gemm_form(const tpu_view_t* v, const tpu_view_t* out, const tpu_view_t* c,
                          tpu_view_t* out_form) {
  if (c->ndim < 2 || c->ndim > 3 || out->ndim < 1 || v->ndim > out->ndim) return false;
  int64_t b = c->ndim == 3 ? c->sizes[0] : 1, m = c->sizes[c->ndim - 2];
  int64_t n = c->sizes[c->ndim - 1];
  if (out->sizes[out->ndim - 1] != n || tpu_view_numel(out) != b * m * n) return false;
  if (c->ndim == 3 && !same_shape(out, c)) return false;
  int64_t st[TPU_MAX_DIMS]; /* v's strides broadcast to out's shape */
  int32_t nd = out->ndim, shift = nd - v->ndim;
  for (int32_t d = 0; d < nd; ++d) {
    int64_t size = d < shift ? 1 : v->sizes[d - shift];
    if (size != 1 && size != out->sizes[d]) return false;
    st[d] = size == 1 ? 0 : v->strides[d - shift];
  }
  tpu_view_t* f = out_form;
  *f = (tpu_view_t){.addr = v->addr, .dtype = v->dtype, .ndim = 3};
  f->sizes[0] = b, f->sizes[1] = m, f->sizes[2] = n;
  f->strides[2] = n == 1 ? 0 : st[nd - 1];
  if (c->ndim == 3) {
    f->strides[0] = b == 1 ? 0 : st[0];
    f->strides[1] = m == 1 ? 0 : st[1];
    return true;
  }
  /* out's leading dims merge into C's rows: each dim of more than one
   * element steps over the whole of the next such dim. */
  int64_t rs = 0;
  for (int32_t d = nd - 2, inner = -1; d >= 0; --d) {
    if (out->sizes[d] == 1) continue;
    if (inner < 0) rs = st[d];
    else if (st[d] != st[inner] * out->sizes[inner]) return false;
    inner = d;
  }
  f->strides[0] = 0;
  f->strides[1] = m == 1 ? 0 : rs;
  return true;
}

bool tpu_fusion_gemm_lead(const tpu_node_t* node) {
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (!(def->flags & TPU_OP_EPILOGUE) || node->num_outputs != 1) return false;
  if (tpu_op_mutated_inputs(node->op)) return false;
  const tpu_view_t* c = &node->outputs[0];
  if (tpu_view_is_absent(c) || tpu_view_numel(c) == 0 || (c->ndim != 2 && c->ndim != 3) ||
      tpu_dtype_is_storage_only(c->dtype))
    return false;
  for (int32_t k = 0; k < node->num_inputs; ++k)
    if (node->inputs[k].kind == TPU_VALUE_VIEW && tpu_views_may_overlap(&node->inputs[k].u.view, c))
      return false;
  return true;
}

bool tpu_fusion_gemm_joins(const tpu_graph_t* graph, int32_t first, int32_t i) {
  const tpu_node_t* node = tpu_graph_node(graph, i);
  const tpu_view_t* c = &tpu_graph_node(graph, first)->outputs[0];
  const tpu_op_def_t* def = tpu_op_def(node->op);
  if (!(def->flags & TPU_OP_POINTWISE) || node->num_outputs != 1 ||
      node->num_inputs > TPU_FUSION_EPILOGUE_MAX_INPUTS)
    return false;
  const tpu_view_t* out = &node->outputs[0];
  tpu_view_t of, f, pf;
  if (!tpu_fusion_gemm_form(out, out, c, &of)) return false;
  for (int32_t j = 0; j < node->num_inputs; ++j)
    if (node->inputs[j].kind == TPU_VALUE_VIEW &&
        !tpu_fusion_gemm_form(&node->inputs[j].u.view, out, c, &f))
      return false;
  for (int32_t m = first; m < i; ++m) {
    const tpu_node_t* prev = tpu_graph_node(graph, m);
    const tpu_view_t* pout = &prev->outputs[0];
    if (!tpu_fusion_gemm_form(pout, pout, c, &pf)) return false;
    for (int32_t j = 0; j < node->num_inputs; ++j) { /* reads what prev wrote: in step */
      const tpu_view_t* in = &node->inputs[j].u.view;
      if (node->inputs[j].kind != TPU_VALUE_VIEW || !tpu_views_may_overlap(in, pout)) continue;
      if (!tpu_fusion_gemm_form(in, out, c, &f) || !tpu_fusion_same_view(&f, &pf)) return false;
    }
    if (tpu_views_may_overlap(out, pout) && !tpu_fusion_same_view(&of, &pf)) return false;
    /* writes what prev read: never what the GEMM reads, else in step */
    for (int32_t j = 0; j < prev->num_inputs; ++j) {
      const tpu_view_t* in = &prev->inputs[j].u.view;
      if (prev->inputs[j].kind != TPU_VALUE_VIEW || !tpu_views_may_overlap(out, in)) continue;
      if (m == first || !tpu_fusion_gemm_form(in, pout, c, &f) || !tpu_fusion_same_view(&f, &of))
        return false;
    }
  }
  return true;
}

/* ---- row-tiled groups ------------------------------------------------------------------ */

bool tpu_fusion_has_rows(const tpu_view_t* v, const tpu_view_t* rows, int32_t k) {
  if (v->ndim < k || rows->ndim < k) return false;
  for (int32_t d = 0; d < k; ++d)
    if (v->sizes[d] != rows->sizes[d]) return false;
  return true;
}

bool tpu_fusion_reads_by_rows(const tpu_node_t* node, int32_t j, uint32_t row_mask,
                              const tpu_view_t* rows, int32_t k) {
  const tpu_view_t* in = &node->inputs[j].u.view;
  if (tpu_op_def(node->op)->flags & TPU_OP_POINTWISE)
    return in->ndim == node->outputs[0].ndim && tpu_fusion_has_rows(in, rows, k);
  return (row_mask >> j) & 1u;
}

/* A row-local node's row dims when it can run by rows: its row inputs and
 * outputs have the rows of its first row input, nothing is complex, and no
 * input shares memory with an output. 0 otherwise. */
static int32_t row_op_k(const tpu_node_t* node, uint32_t* out_mask) {
  const tpu_op_def_t* def = tpu_op_def(node->op);
  *out_mask = 0;
  if (!def->rows || node->num_inputs > 16 || node->num_outputs > 4) return 0;
  if (tpu_op_mutated_inputs(node->op)) return 0; /* writes an input: runs alone */
  int32_t k = def->rows(def, node, out_mask);
  if (k < 1 || k >= TPU_MAX_DIMS) return 0;
  const tpu_view_t* rows = NULL;
  for (int32_t j = 0; j < node->num_inputs && !rows; ++j)
    if (node->inputs[j].kind == TPU_VALUE_VIEW && ((*out_mask >> j) & 1u))
      rows = &node->inputs[j].u.view;
  if (!rows) return 0;
  for (int32_t j = 0; j < node->num_inputs; ++j) {
    if (node->inputs[j].kind != TPU_VALUE_VIEW) continue;
    const tpu_view_t* in = &node->inputs[j].u.view;
    if (tpu_dtype_is_storage_only(in->dtype)) return 0;
    if (((*out_mask >> j) & 1u) && !tpu_fusion_has_rows(in, rows, k)) return 0;
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (!tpu_view_is_absent(&node->outputs[o]) && tpu_views_may_overlap(in, &node->outputs[o]))
        return 0;
  }
  for (int32_t o = 0; o < node->num_outputs; ++o) {
    const tpu_view_t* out = &node->outputs[o];
    if (tpu_view_is_absent(out)) continue;
    if (tpu_dtype_is_storage_only(out->dtype) || !tpu_fusion_has_rows(out, rows, k)) return 0;
  }
  return k;
}

/* The byte ranges the open group's members read (ins) and write (outs),
 * sorted by start, each with its member and operand: a node joining the
 * group is checked against the members whose ranges meet its own, not
 * against every member. Sized for every view of the graph up front. */
typedef struct span {
  uint64_t lo, hi;
  int32_t node, slot;
} span_t;

typedef struct span_list {
  span_t* v;
  int32_t n;
  uint64_t widest; /* the longest span: none starting widest below a byte reaches it */
} span_list_t;

typedef struct group_spans {
  span_list_t ins, outs;
} group_spans_t;

static void spans_add(span_list_t* l, tpu_extent_t e, int32_t node, int32_t slot) {
  if (e.lo >= e.hi) return; /* not a view, absent or empty: meets nothing */
  int32_t k = l->n++;
  for (; k > 0 && l->v[k - 1].lo > e.lo; --k) l->v[k] = l->v[k - 1];
  l->v[k] = (span_t){e.lo, e.hi, node, slot};
  if (e.hi - e.lo > l->widest) l->widest = e.hi - e.lo;
}

/* The first span that may meet e; the candidates run on while lo < e.hi. */
static int32_t spans_from(const span_list_t* l, tpu_extent_t e) {
  if (e.lo <= l->widest) return 0;
  uint64_t below = e.lo - l->widest; /* spans starting here or lower end by e.lo */
  int32_t lo = 0, hi = l->n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (l->v[mid].lo > below) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/* The open group of the partition. */
typedef struct open_group {
  int32_t first;           /* -1: none */
  int32_t kind;            /* TPU_GROUP_TILED, _ROWS or _GEMM */
  int32_t k;               /* ROWS: row dims */
  const tpu_view_t* shape; /* TILED, GEMM: the lead's output; ROWS: the rows (leading k dims) */
  group_spans_t* spans;    /* the members' ranges (members are [first, the node at hand)) */
} open_group_t;

/* Whether output q of node m is dead before node i is recorded and read
 * only through its identical view: inside a fused group, phase 3 then keeps
 * it in scratch, so its memory is never written, and a later tenant of its
 * address (the allocator reuses freed blocks) does not conflict with it. */
static bool scratch_bound(const tpu_graph_t* graph, const tpu_fusion_analysis_t* a, int32_t m,
                          int32_t q, int32_t i) {
  int32_t until = a->out_free[a->out_base[m] + q];
  if (until > i) return false;
  const tpu_view_t* v = &tpu_graph_node(graph, m)->outputs[q];
  tpu_extent_t ve = a->out_ext[a->out_base[m] + q];
  for (int32_t x = a->in_base[m + 1]; x < a->in_base[until]; ++x) {
    if (!tpu_extents_meet(a->in_ext[x], ve)) continue; /* empty: not a view */
    int32_t r = m + 1; /* the reader: the node whose inputs hold slot x */
    while (a->in_base[r + 1] <= x) ++r;
    if (!tpu_fusion_same_view(&tpu_graph_node(graph, r)->inputs[x - a->in_base[r]].u.view, v))
      return false;
  }
  return true;
}

/* Whether `in`, read by node m of the group starting at `first`, is the
 * identical view of a scratch-bound output of an earlier group node. */
static bool reads_scratch_bound(const tpu_graph_t* graph, const tpu_fusion_analysis_t* a,
                                int32_t first, int32_t m, const tpu_view_t* in, int32_t i) {
  for (int32_t w = first; w < m; ++w) {
    const tpu_node_t* writer = tpu_graph_node(graph, w);
    for (int32_t q = 0; q < writer->num_outputs; ++q)
      if (tpu_fusion_same_view(&writer->outputs[q], in) && scratch_bound(graph, a, w, q, i))
        return true;
  }
  return false;
}

/* Whether input j of group node m is read as the group writes: a pointwise
 * group reads any identical view element by element; a row-tiled group
 * needs a read by rows. */
static bool reads_in_step(const tpu_fusion_analysis_t* a, const open_group_t* g,
                          const tpu_node_t* node, int32_t m, int32_t j) {
  return g->kind != TPU_GROUP_ROWS ||
         tpu_fusion_reads_by_rows(node, j, a->row_mask[m], g->shape, g->k);
}

/* Whether node i may join the open fused group g without a conflict: a
 * value it reads that the group wrote is read in step, from the identical
 * view; what it writes was not read by the group other than in step from
 * the identical view, nor written through another view -- except values
 * already dead and kept in scratch. Then running the group a tile at a time
 * computes what running its nodes one after the other does. */
static bool joins_cleanly(const tpu_graph_t* graph, const tpu_fusion_analysis_t* a,
                          const open_group_t* g, int32_t i) {
  const tpu_node_t* node = tpu_graph_node(graph, i);
  const tpu_extent_t* in_ext = a->in_ext + a->in_base[i];
  const tpu_extent_t* out_ext = a->out_ext + a->out_base[i];
  const span_list_t *ins = &g->spans->ins, *outs = &g->spans->outs;
  int32_t nin = a->in_base[i + 1] - a->in_base[i], nout = a->out_base[i + 1] - a->out_base[i];
  for (int32_t j = 0; j < nin; ++j) /* what it reads that a member wrote */
    for (int32_t k = spans_from(outs, in_ext[j]);
         in_ext[j].lo < in_ext[j].hi && k < outs->n && outs->v[k].lo < in_ext[j].hi; ++k) {
      const span_t* sp = &outs->v[k];
      if (sp->hi <= in_ext[j].lo) continue;
      const tpu_node_t* prev = tpu_graph_node(graph, sp->node);
      if (!(reads_in_step(a, g, node, i, j) &&
            tpu_fusion_same_view(&node->inputs[j].u.view, &prev->outputs[sp->slot])) &&
          !scratch_bound(graph, a, sp->node, sp->slot, i))
        return false;
    }
  for (int32_t o = 0; o < nout; ++o) {
    const tpu_view_t* out = &node->outputs[o];
    tpu_extent_t e = out_ext[o];
    if (e.lo >= e.hi) continue; /* absent or empty: meets nothing */
    for (int32_t k = spans_from(ins, e); k < ins->n && ins->v[k].lo < e.hi; ++k) {
      const span_t* sp = &ins->v[k]; /* what it writes that a member read */
      if (sp->hi <= e.lo) continue;
      const tpu_node_t* prev = tpu_graph_node(graph, sp->node);
      const tpu_view_t* in = &prev->inputs[sp->slot].u.view;
      if (!(reads_in_step(a, g, prev, sp->node, sp->slot) && tpu_fusion_same_view(out, in)) &&
          !reads_scratch_bound(graph, a, g->first, sp->node, in, i))
        return false;
    }
    for (int32_t k = spans_from(outs, e); k < outs->n && outs->v[k].lo < e.hi; ++k) {
      const span_t* sp = &outs->v[k]; /* what it writes that a member wrote */
      if (sp->hi <= e.lo) continue;
      const tpu_node_t* prev = tpu_graph_node(graph, sp->node);
      if (!tpu_fusion_same_view(out, &prev->outputs[sp->slot]) &&
          !scratch_bound(graph, a, sp->node, sp->slot, i))
        return false;
    }
  }
  return true;
}

/* Whether node i may join the open row-tiled group g: its outputs have the
 * group's rows and it joins cleanly. */
static bool rows_join_ok(const tpu_graph_t* graph, const tpu_fusion_analysis_t* a,
                         const open_group_t* g, int32_t i) {
  const tpu_node_t* node = tpu_graph_node(graph, i);
  for (int32_t o = 0; o < node->num_outputs; ++o)
    if (!tpu_view_is_absent(&node->outputs[o]) &&
        !tpu_fusion_has_rows(&node->outputs[o], g->shape, g->k))
      return false;
  return joins_cleanly(graph, a, g, i);
}

/* Partition decision for node i: joins the open group (flags without
 * TPU_NODE_CUT_BEFORE) or starts one. */
static uint8_t partition_step(const tpu_graph_t* graph, tpu_fusion_analysis_t* a,
                              open_group_t* g, int32_t i) {
  const tpu_node_t* node = tpu_graph_node(graph, i);
  bool room = g->first >= 0 && i - g->first < TPU_FUSION_MAX_GROUP;
  if (tileable(node)) {
    uint8_t f = TPU_NODE_TILEABLE;
    if (room && g->kind == TPU_GROUP_GEMM && tpu_fusion_gemm_joins(graph, g->first, i))
      return f | TPU_NODE_GEMM;
    if (room && g->kind == TPU_GROUP_TILED && same_shape(&node->outputs[0], g->shape) &&
        joins_cleanly(graph, a, g, i))
      return f;
    if (room && g->kind == TPU_GROUP_ROWS && rows_join_ok(graph, a, g, i)) {
      a->group_k[i] = (int8_t)g->k;
      return f | TPU_NODE_ROWS;
    }
    *g = (open_group_t){i, TPU_GROUP_TILED, 0, &node->outputs[0], g->spans};
    return f | TPU_NODE_CUT_BEFORE;
  }
  if (tpu_fusion_epilogues_enabled() && tpu_fusion_gemm_lead(node)) {
    *g = (open_group_t){i, TPU_GROUP_GEMM, 0, &node->outputs[0], g->spans};
    return TPU_NODE_GEMM | TPU_NODE_CUT_BEFORE;
  }
  int32_t k = a->row_k[i];
  if (k == 0) {
    g->first = -1;
    return TPU_NODE_CUT_BEFORE;
  }
  const tpu_view_t* rows = NULL;
  for (int32_t j = 0; j < node->num_inputs && !rows; ++j)
    if (node->inputs[j].kind == TPU_VALUE_VIEW && ((a->row_mask[i] >> j) & 1u))
      rows = &node->inputs[j].u.view;
  if (room && g->kind == TPU_GROUP_ROWS && g->k == k && tpu_fusion_has_rows(rows, g->shape, k) &&
      rows_join_ok(graph, a, g, i)) {
    a->group_k[i] = (int8_t)k;
    return TPU_NODE_ROWS;
  }
  if (room && g->kind == TPU_GROUP_TILED && tpu_fusion_has_rows(g->shape, rows, k)) {
    /* The pointwise run becomes row-tiled: its outputs all have g->shape. */
    open_group_t as_rows = {g->first, TPU_GROUP_ROWS, k, rows, g->spans};
    if (rows_join_ok(graph, a, &as_rows, i)) {
      for (int32_t j = g->first; j < i; ++j) {
        a->flags[j] |= TPU_NODE_ROWS;
        a->group_k[j] = (int8_t)k;
      }
      *g = as_rows;
      a->group_k[i] = (int8_t)k;
      return TPU_NODE_ROWS;
    }
  }
  *g = (open_group_t){i, TPU_GROUP_ROWS, k, rows, g->spans};
  a->group_k[i] = (int8_t)k;
  return TPU_NODE_ROWS | TPU_NODE_CUT_BEFORE;
}

/* ---- the phase ---------------------------------------------------------------------------- */

/* The first free after node `node` of a range holding all of v: the point
 * at which the value v holds dies (n + 1: alive at the flush). */
static int32_t first_free_after(const tpu_free_index_t* frees, int32_t node, const tpu_view_t* v,
                                int32_t n) {
  uint64_t lo = v->addr;
  uint64_t hi = lo + 1;
  for (int32_t d = 0; d < v->ndim; ++d) hi += (uint64_t)((v->sizes[d] - 1) * v->strides[d]);
  hi = lo + (hi - lo) * tpu_dtype_size(v->dtype);
  for (int32_t k = tpu_free_index_after(frees, node); k < frees->count; ++k) {
    const tpu_free_record_t* f = tpu_free_index_at(frees, k);
    if (f->point > n) break;
    if (f->lo <= lo && hi <= f->hi) return f->point;
  }
  return n + 1;
}

tpu_status_t tpu_fusion_analyse(const tpu_graph_t* graph, const tpu_free_record_t* frees,
                                int32_t free_count, tpu_fusion_analysis_t** out_analysis) {
  *out_analysis = NULL;
  int32_t n = tpu_graph_node_count(graph);
  tpu_fusion_analysis_t* a = calloc(1, sizeof(*a));
  if (!a) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion analysis allocation failed");
  a->n = n;
  a->in_base = malloc(sizeof(int32_t) * (size_t)(n + 1));
  a->out_base = malloc(sizeof(int32_t) * (size_t)(n + 1));
  a->flags = calloc((size_t)n + 1, 1);
  a->group_k = calloc((size_t)n + 1, 1);
  a->row_k = calloc((size_t)n + 1, 1);
  a->row_mask = calloc((size_t)n + 1, sizeof(uint32_t));
  int32_t nin = 0, nout = 0;
  if (a->in_base && a->out_base) {
    for (int32_t i = 0; i < n; ++i) {
      const tpu_node_t* node = tpu_graph_node(graph, i);
      a->in_base[i] = nin;
      a->out_base[i] = nout;
      nin += node->num_inputs;
      nout += node->num_outputs;
    }
    a->in_base[n] = nin;
    a->out_base[n] = nout;
  }
  a->in_vid = malloc(sizeof(int32_t) * (size_t)(nin + 1));
  a->out_vid = malloc(sizeof(int32_t) * (size_t)(nout + 1));
  a->out_free = malloc(sizeof(int32_t) * (size_t)(nout + 1));
  a->in_ext = malloc(sizeof(tpu_extent_t) * (size_t)(nin + 1));
  a->out_ext = malloc(sizeof(tpu_extent_t) * (size_t)(nout + 1));
  tpu_free_index_t fix = {0};
  tpu_status_t fs = tpu_free_index_init(&fix, frees, free_count);
  int64_t cap = 16;
  while (cap < 2 * (int64_t)(nin + nout)) cap *= 2;
  vmap_t m = {calloc((size_t)cap, sizeof(*m.keys)), malloc(sizeof(int32_t) * (size_t)cap),
              malloc(sizeof(int32_t) * (size_t)cap), cap - 1};
  group_spans_t spans = {{malloc(sizeof(span_t) * (size_t)(nin + 1)), 0, 0},
                         {malloc(sizeof(span_t) * (size_t)(nout + 1)), 0, 0}};
  if (!spans.ins.v || !spans.outs.v || !a->in_base || !a->out_base || !a->flags || !a->group_k || !a->row_k || !a->row_mask ||
      !a->in_vid || !a->out_vid || !a->out_free || !a->in_ext || !a->out_ext ||
      fs != TPU_OK || !m.keys || !m.ids || !m.freed ||
      !key_reserve(a, (int64_t)(4 * n + 4 * (nin + nout) + 8) * 4)) {
    free(m.keys);
    free(m.ids);
    free(m.freed);
    free(spans.ins.v);
    free(spans.outs.v);
    tpu_free_index_release(&fix);
    tpu_fusion_analysis_free(a);
    return fs != TPU_OK ? fs
                        : tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion analysis allocation failed");
  }

  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    for (int32_t k = 0; k < node->num_inputs; ++k)
      a->in_ext[a->in_base[i] + k] = node->inputs[k].kind == TPU_VALUE_VIEW
                                         ? tpu_extent_of(&node->inputs[k].u.view)
                                         : (tpu_extent_t){0, 0};
    for (int32_t o = 0; o < node->num_outputs; ++o)
      a->out_ext[a->out_base[i] + o] = tpu_extent_of(&node->outputs[o]);
  }
  /* Value ids: a read takes the id of the last write of the identical view
   * while that value's buffer is alive; every write makes a fresh id. Values
   * the graph did not write (its inputs), and views that only reuse a freed
   * value's address, read as TPU_VALUE_EXTERNAL: where the allocator put
   * things is not the program's structure. */
  int32_t next_id = 0;
  open_group_t g = {-1, TPU_GROUP_SINGLE, 0, NULL, &spans};
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    for (int32_t k = 0; k < node->num_inputs; ++k) {
      int32_t vid = -1;
      if (node->inputs[k].kind == TPU_VALUE_VIEW) {
        int64_t s = vmap_slot(&m, &node->inputs[k].u.view);
        vid = m.keys[s] && i < m.freed[s] ? m.ids[s] : TPU_VALUE_EXTERNAL;
      }
      a->in_vid[a->in_base[i] + k] = vid;
    }
    for (int32_t o = 0; o < node->num_outputs; ++o) {
      int64_t s = vmap_slot(&m, &node->outputs[o]);
      m.keys[s] = &node->outputs[o];
      m.ids[s] = next_id++;
      m.freed[s] = first_free_after(&fix, i, &node->outputs[o], n);
      a->out_vid[a->out_base[i] + o] = m.ids[s];
      a->out_free[a->out_base[i] + o] = m.freed[s];
    }

    /* Partition decision: join the open group or cut before this node. */
    uint32_t mask = 0;
    a->row_k[i] = (int8_t)row_op_k(node, &mask);
    a->row_mask[i] = mask;
    a->flags[i] = partition_step(graph, a, &g, i);
    if (a->flags[i] & TPU_NODE_CUT_BEFORE) { /* a new group, or none */
      spans.ins = (span_list_t){spans.ins.v, 0, 0};
      spans.outs = (span_list_t){spans.outs.v, 0, 0};
    }
    if (g.first >= 0) { /* a member now */
      for (int32_t k = 0; k < node->num_inputs; ++k)
        spans_add(&spans.ins, a->in_ext[a->in_base[i] + k], i, k);
      for (int32_t o = 0; o < node->num_outputs; ++o)
        spans_add(&spans.outs, a->out_ext[a->out_base[i] + o], i, o);
    }
  }
  free(m.keys);
  free(m.ids);
  free(m.freed);
  free(spans.ins.v);
  free(spans.outs.v);
  tpu_free_index_release(&fix);

  /* The key: everything the later phases decide on, nothing else. */
  key_put(a, n);
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    key_put(a, node->op);
    key_put(a, node->num_inputs | node->num_outputs << 8 | (int32_t)a->flags[i] << 16 |
                   (int32_t)a->group_k[i] << 24);
    key_put(a, (int32_t)a->row_k[i] | (int32_t)(a->row_mask[i] << 8));
    for (int32_t k = 0; k < node->num_inputs; ++k) {
      const tpu_value_t* v = &node->inputs[k];
      int32_t d = v->kind == TPU_VALUE_VIEW     ? (int32_t)v->u.view.dtype | v->u.view.ndim << 8
                  : v->kind == TPU_VALUE_SCALAR ? (int32_t)v->u.scalar.dtype | 1 << 16
                                                : 0;
      key_put(a, (int32_t)v->kind | d << 4);
      key_put(a, a->in_vid[a->in_base[i] + k]);
    }
    for (int32_t o = 0; o < node->num_outputs; ++o) {
      bool dead = a->out_free[a->out_base[i] + o] <= n;
      key_put(a, (int32_t)node->outputs[o].dtype | node->outputs[o].ndim << 8 | (int32_t)dead << 16);
      key_put(a, a->out_vid[a->out_base[i] + o]);
    }
  }
  a->hash = key_hash(a->key, a->key_len);
  *out_analysis = a;
  return TPU_OK;
}

void tpu_fusion_analysis_free(tpu_fusion_analysis_t* a) {
  if (!a) return;
  free(a->in_base);
  free(a->out_base);
  free(a->flags);
  free(a->group_k);
  free(a->row_k);
  free(a->row_mask);
  free(a->in_vid);
  free(a->out_vid);
  free(a->out_free);
  free(a->in_ext);
  free(a->out_ext);
  free(a->key);
  free(a);
}

uint64_t tpu_fusion_analysis_hash(const tpu_fusion_analysis_t* a) { return a->hash; }

const uint8_t* tpu_fusion_analysis_key(const tpu_fusion_analysis_t* a, int64_t* out_len) {
  *out_len = a->key_len;
  return a->key;
}
