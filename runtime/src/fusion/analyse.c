/* analyse.c — phase 1 of the fusion compiler: the structural analysis of a
 * recorded graph, and its key (see fusion.h). */
#include <stdlib.h>
#include <string.h>

#include "fusion/analysis.h"
#include "tpu/ops.h"

/* ---- view identity ------------------------------------------------------------ */

bool tpu_fusion_same_view(const tpu_view_t* a, const tpu_view_t* b) {
  if (a->addr != b->addr || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d] || a->strides[d] != b->strides[d]) return false;
  return true;
}

static uint64_t view_hash(const tpu_view_t* v) {
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
  int64_t i = (int64_t)(view_hash(v) & (uint64_t)m->mask);
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
  const tpu_view_t* out = &node->outputs[0];
  if (tpu_view_is_absent(out) || tpu_view_numel(out) == 0 || tpu_dtype_is_complex(out->dtype))
    return false;
  for (int32_t k = 0; k < node->num_inputs; ++k) {
    const tpu_value_t* v = &node->inputs[k];
    if (v->kind != TPU_VALUE_VIEW) continue;
    const tpu_view_t* in = &v->u.view;
    if (in->ndim > out->ndim || tpu_dtype_is_complex(in->dtype)) return false;
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

/* Two accesses conflict inside a tile loop when they overlap without being
 * the same view: element i of one is not element i of the other. */
static bool conflicting(const tpu_view_t* a, const tpu_view_t* b) {
  return tpu_views_may_overlap(a, b) && !tpu_fusion_same_view(a, b);
}

static bool conflicts_with(const tpu_node_t* n, const tpu_node_t* m) {
  for (int32_t o = 0; o < n->num_outputs; ++o) {
    for (int32_t k = 0; k < m->num_inputs; ++k)
      if (m->inputs[k].kind == TPU_VALUE_VIEW && conflicting(&n->outputs[o], &m->inputs[k].u.view))
        return true;
    for (int32_t p = 0; p < m->num_outputs; ++p)
      if (conflicting(&n->outputs[o], &m->outputs[p])) return true;
  }
  for (int32_t k = 0; k < n->num_inputs; ++k) {
    if (n->inputs[k].kind != TPU_VALUE_VIEW) continue;
    for (int32_t p = 0; p < m->num_outputs; ++p)
      if (conflicting(&n->inputs[k].u.view, &m->outputs[p])) return true;
  }
  return false;
}

/* ---- the phase ---------------------------------------------------------------------------- */

static int32_t first_free_after(const tpu_free_record_t* frees, int32_t free_count, int32_t node,
                                const tpu_view_t* v, int32_t n) {
  uint64_t lo = v->addr;
  uint64_t hi = lo + 1;
  for (int32_t d = 0; d < v->ndim; ++d) hi += (uint64_t)((v->sizes[d] - 1) * v->strides[d]);
  hi = lo + (hi - lo) * tpu_dtype_size(v->dtype);
  int32_t best = n + 1; /* alive at the flush */
  for (int32_t f = 0; f < free_count; ++f)
    if (frees[f].point > node && frees[f].point < best && frees[f].lo <= lo && hi <= frees[f].hi)
      best = frees[f].point;
  return best;
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
  int64_t cap = 16;
  while (cap < 2 * (int64_t)(nin + nout)) cap *= 2;
  vmap_t m = {calloc((size_t)cap, sizeof(*m.keys)), malloc(sizeof(int32_t) * (size_t)cap),
              malloc(sizeof(int32_t) * (size_t)cap), cap - 1};
  if (!a->in_base || !a->out_base || !a->flags || !a->in_vid || !a->out_vid || !a->out_free ||
      !m.keys || !m.ids || !m.freed || !key_reserve(a, (int64_t)(4 * n + 4 * (nin + nout) + 8) * 4)) {
    free(m.keys);
    free(m.ids);
    free(m.freed);
    tpu_fusion_analysis_free(a);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion analysis allocation failed");
  }

  /* Value ids: a read takes the id of the last write of the identical view
   * while that value's buffer is alive; every write makes a fresh id. Values
   * the graph did not write (its inputs), and views that only reuse a freed
   * value's address, read as TPU_VALUE_EXTERNAL: where the allocator put
   * things is not the program's structure. */
  int32_t next_id = 0;
  int32_t group_first = -1; /* first node of the open tiled run */
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
      m.freed[s] = first_free_after(frees, free_count, i, &node->outputs[o], n);
      a->out_vid[a->out_base[i] + o] = m.ids[s];
      a->out_free[a->out_base[i] + o] = m.freed[s];
    }

    /* Partition decision: join the open run or cut before this node. */
    uint8_t f = 0;
    if (tileable(node)) {
      f |= TPU_NODE_TILEABLE;
      bool join = group_first >= 0 && i - group_first < TPU_FUSION_MAX_GROUP &&
                  same_shape(&node->outputs[0], &tpu_graph_node(graph, group_first)->outputs[0]);
      for (int32_t j = group_first; join && j < i; ++j)
        if (conflicts_with(node, tpu_graph_node(graph, j))) join = false;
      if (!join) {
        f |= TPU_NODE_CUT_BEFORE;
        group_first = i;
      }
    } else {
      f |= TPU_NODE_CUT_BEFORE;
      group_first = -1;
    }
    a->flags[i] = f;
  }
  /* Dead outputs, for members of runs of two or more nodes. */
  for (int32_t i = 0; i < n; ++i) {
    bool in_run = (a->flags[i] & TPU_NODE_TILEABLE) &&
                  (!(a->flags[i] & TPU_NODE_CUT_BEFORE) ||
                   (i + 1 < n && (a->flags[i + 1] & TPU_NODE_TILEABLE) &&
                    !(a->flags[i + 1] & TPU_NODE_CUT_BEFORE)));
    if (!in_run) continue;
    if (a->out_free[a->out_base[i]] <= n) a->flags[i] |= TPU_NODE_DEAD_OUT;
  }
  free(m.keys);
  free(m.ids);
  free(m.freed);

  /* The key: everything the later phases decide on, nothing else. */
  key_put(a, n);
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    key_put(a, node->op);
    key_put(a, node->num_inputs | node->num_outputs << 8 | (int32_t)a->flags[i] << 16);
    for (int32_t k = 0; k < node->num_inputs; ++k) {
      const tpu_value_t* v = &node->inputs[k];
      int32_t d = v->kind == TPU_VALUE_VIEW     ? (int32_t)v->u.view.dtype | v->u.view.ndim << 8
                  : v->kind == TPU_VALUE_SCALAR ? (int32_t)v->u.scalar.dtype | 1 << 16
                                                : 0;
      key_put(a, (int32_t)v->kind | d << 4);
      key_put(a, a->in_vid[a->in_base[i] + k]);
    }
    for (int32_t o = 0; o < node->num_outputs; ++o) {
      key_put(a, (int32_t)node->outputs[o].dtype | node->outputs[o].ndim << 8);
      key_put(a, a->out_vid[a->out_base[i] + o]);
    }
  }
  uint64_t h = 1469598103934665603ull;
  for (int64_t b = 0; b < a->key_len; ++b) h = (h ^ a->key[b]) * 1099511628211ull;
  a->hash = h;
  *out_analysis = a;
  return TPU_OK;
}

void tpu_fusion_analysis_free(tpu_fusion_analysis_t* a) {
  if (!a) return;
  free(a->in_base);
  free(a->out_base);
  free(a->flags);
  free(a->in_vid);
  free(a->out_vid);
  free(a->out_free);
  free(a->key);
  free(a);
}

uint64_t tpu_fusion_analysis_hash(const tpu_fusion_analysis_t* a) { return a->hash; }

const uint8_t* tpu_fusion_analysis_key(const tpu_fusion_analysis_t* a, int64_t* out_len) {
  *out_len = a->key_len;
  return a->key;
}
