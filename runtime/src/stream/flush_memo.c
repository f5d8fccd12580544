/* flush_memo.c — a stream's last flushes, kept so that a loop which records
 * the same graph every step skips the fusion compiler's front end.
 *
 * A flush runs phase 0 (schedule), phase 1 (analysis and the structural
 * key), the program cache lookup and the memory estimate: ~5 µs for a
 * ten-node decode step, more than its kernels on small tensors. Each is a
 * function of the recording: the nodes (ops, attributes, scalars, views),
 * the free records and the stream's live provisional blocks, plus the
 * compiler's switches — and of the addresses only through which byte ranges
 * meet (conflicts, aliasing, a value's buffer reused, when a block is first
 * written), never through where a range lies or how two disjoint ranges
 * are ordered. So the signature writes each address relative to its region
 * (the byte ranges of the recording merged where they meet), regions
 * numbered in order of first use: the caching allocator may put a step's
 * tensors elsewhere each time, and the step still repeats.
 *
 * The memo keeps a recording's signature and what the compiler made of it:
 * the node order, the program (retained) and the estimate. A flush whose
 * signature is the same word for word reuses them; any difference (another
 * shape, a new scalar value, one node more, an alias the last one did not
 * have) runs the front end as before and takes the least recently used of
 * TPU_MEMO_ENTRIES entries (the allocator's placements cycle: the issue-30
 * decode loop records six signatures in turn). So the memo never changes what runs, only
 * whether it is worked out again: its hits are counted (defer metric
 * `flush_repeats`), an entry is replaced, never lost silently, and with
 * TORCH_TPU_DEFER_MEMO_CHECK=1 every hit is checked against the front end
 * run in full (defer.c). Clearing the program cache (torch.tpu._clear_cache)
 * retires every entry: the next flush compiles.
 *
 * Owned by the stream's pending state and used under its lock. */
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "stream/internal.h"

/* The signature is written after one reservation of its largest size
 * (sign): each word is a plain store. */
static bool reserve(tpu_flush_memo_t* m, int64_t words) {
  if (words <= m->next_cap) return true;
  int64_t cap = m->next_cap ? m->next_cap : 512;
  while (cap < words) cap *= 2;
  uint64_t* grown = realloc(m->next, sizeof(uint64_t) * (size_t)cap);
  if (!grown) return false;
  m->next = grown;
  m->next_cap = cap;
  return true;
}

static inline bool put(tpu_flush_memo_t* m, uint64_t word) {
  m->next[m->next_len++] = word;
  return true;
}

static uint64_t bits_of(double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

/* ---- regions ------------------------------------------------------------------ */

static bool add_span(tpu_flush_memo_t* m, int64_t* count, uint64_t lo, uint64_t hi) {
  if (*count == m->span_cap) {
    int64_t cap = m->span_cap ? m->span_cap * 2 : 256;
    uint64_t* spans = realloc(m->spans, sizeof(uint64_t) * 2 * (size_t)cap);
    if (spans) m->spans = spans;
    int32_t* ids = spans ? realloc(m->span_ids, sizeof(int32_t) * (size_t)cap) : NULL;
    if (ids) m->span_ids = ids;
    if (!spans || !ids) return false;
    m->span_cap = cap;
  }
  m->spans[2 * *count] = lo;
  m->spans[2 * *count + 1] = hi > lo ? hi : lo + 1; /* an empty view still has an address */
  ++*count;
  return true;
}

static bool add_view(tpu_flush_memo_t* m, int64_t* count, const tpu_view_t* v) {
  uint64_t lo, hi;
  tpu_view_bytes(v, &lo, &hi);
  return add_span(m, count, lo, hi);
}

static int cmp_span(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

/* Sorts the spans by start (a decode step's few tens by insertion, more by
 * qsort) and merges those that meet into regions, in place; ids are given
 * on first use. */
static void merge_regions(tpu_flush_memo_t* m, int64_t count) {
  enum { INSERTION_MAX = 64 };
  uint64_t* s = m->spans;
  if (count > INSERTION_MAX) qsort(s, (size_t)count, 2 * sizeof(uint64_t), cmp_span);
  for (int64_t i = 1; count <= INSERTION_MAX && i < count; ++i) {
    uint64_t lo = s[2 * i], hi = s[2 * i + 1];
    int64_t j = i;
    for (; j > 0 && s[2 * (j - 1)] > lo; --j) {
      s[2 * j] = s[2 * (j - 1)];
      s[2 * j + 1] = s[2 * (j - 1) + 1];
    }
    s[2 * j] = lo;
    s[2 * j + 1] = hi;
  }
  int64_t r = -1;
  for (int64_t i = 0; i < count; ++i) {
    if (r >= 0 && s[2 * i] < s[2 * r + 1]) {
      if (s[2 * i + 1] > s[2 * r + 1]) s[2 * r + 1] = s[2 * i + 1];
    } else {
      ++r;
      s[2 * r] = s[2 * i];
      s[2 * r + 1] = s[2 * i + 1];
    }
  }
  m->region_count = (int32_t)(r + 1);
  for (int32_t k = 0; k < m->region_count; ++k) m->span_ids[k] = -1;
  m->next_id = 0;
}

/* An address as (its region's id + 1) << 40 | its offset in the region. */
static uint64_t canonical(tpu_flush_memo_t* m, uint64_t addr) {
  int32_t a = 0, b = m->region_count; /* the last region starting at or before addr */
  while (a < b) {
    int32_t mid = a + (b - a) / 2;
    if (m->spans[2 * mid] <= addr) a = mid + 1;
    else b = mid;
  }
  int32_t r = a - 1; /* every address the signature writes was added: r >= 0 */
  if (m->span_ids[r] < 0) m->span_ids[r] = m->next_id++;
  return (uint64_t)(m->span_ids[r] + 1) << 40 | (addr - m->spans[2 * r]);
}

/* ---- the signature --------------------------------------------------------------- */

static bool put_view(tpu_flush_memo_t* m, const tpu_view_t* v) {
  bool ok = put(m, canonical(m, v->addr)) && put(m, (uint64_t)(uint32_t)v->dtype | (uint64_t)v->ndim << 32);
  for (int32_t d = 0; ok && d < v->ndim; ++d)
    ok = put(m, (uint64_t)v->sizes[d]) && put(m, (uint64_t)v->strides[d]);
  return ok;
}

static bool put_attr(tpu_flush_memo_t* m, const tpu_attr_t* a) {
  if (!put(m, (uint64_t)(uint32_t)a->kind | (uint64_t)(uint32_t)a->count << 32)) return false;
  switch (a->kind) {
    case TPU_ATTR_INT:
    case TPU_ATTR_BOOL:
      return put(m, (uint64_t)a->u.i);
    case TPU_ATTR_FLOAT:
      return put(m, bits_of(a->u.f));
    case TPU_ATTR_DTYPE:
      return put(m, (uint64_t)(uint32_t)a->u.dtype);
    case TPU_ATTR_INTS: {
      int32_t count = a->count < 0 ? 0 : a->count > TPU_MAX_INTS ? TPU_MAX_INTS : a->count;
      for (int32_t k = 0; k < count; ++k)
        if (!put(m, (uint64_t)a->u.ints[k])) return false;
      return true;
    }
    case TPU_ATTR_STR: {
      uint64_t w[TPU_MAX_STR / sizeof(uint64_t) + 1] = {0};
      memcpy(w, a->u.str, strnlen(a->u.str, TPU_MAX_STR));
      for (size_t k = 0; k < sizeof(w) / sizeof(w[0]); ++k)
        if (!put(m, w[k])) return false;
      return true;
    }
    case TPU_ATTR_NONE:
      return true;
  }
  return true;
}

/* FNV-1a over 64-bit words in four interleaved lanes, folded at the end:
 * one lane is a chain of dependent multiplies (about 4 cycles a word over
 * a decode step's ~400 words); four run side by side. */
static uint64_t hash_words(const uint64_t* w, int64_t n) {
  const uint64_t prime = 1099511628211ull;
  uint64_t h[4] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                   0x165667b19e3779f9ull};
  int64_t k = 0;
  for (; k + 4 <= n; k += 4)
    for (int l = 0; l < 4; ++l) h[l] = (h[l] ^ w[k + l]) * prime;
  for (; k < n; ++k) h[0] = (h[0] ^ w[k]) * prime;
  uint64_t out = (uint64_t)n;
  for (int l = 0; l < 4; ++l) out = (out ^ h[l]) * prime;
  return out;
}

bool tpu_flush_memo_sign(tpu_flush_memo_t* m, const tpu_graph_t* graph,
                         const tpu_free_record_t* frees, int32_t free_count,
                         const uint64_t* live_addr, const uint64_t* live_size, int32_t live,
                         uint64_t settings) {
  m->next_len = 0;
  m->next_valid = false;
  int32_t n = tpu_graph_node_count(graph);
  int64_t spans = 0;
  bool ok = true;
  for (int32_t i = 0; ok && i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    for (int32_t k = 0; ok && k < node->num_inputs; ++k)
      if (node->inputs[k].kind == TPU_VALUE_VIEW) ok = add_view(m, &spans, &node->inputs[k].u.view);
    for (int32_t o = 0; ok && o < node->num_outputs; ++o)
      ok = add_view(m, &spans, &node->outputs[o]);
  }
  for (int32_t f = 0; ok && f < free_count; ++f) ok = add_span(m, &spans, frees[f].lo, frees[f].hi);
  for (int32_t b = 0; ok && b < live; ++b)
    ok = add_span(m, &spans, live_addr[b], live_addr[b] + live_size[b]);
  int64_t inputs, outputs;
  tpu_graph_operand_counts(graph, &inputs, &outputs);
  enum { VIEW_WORDS = 3 + 2 * TPU_MAX_DIMS, ATTR_WORDS = 2 + TPU_MAX_STR / 8 + TPU_MAX_INTS };
  ok = ok && reserve(m, 4 + (int64_t)n * (2 + TPU_MAX_ATTRS * ATTR_WORDS) +
                            (inputs + outputs) * VIEW_WORDS + 3 * (int64_t)free_count +
                            2 * (int64_t)live);
  if (!ok) return false;
  merge_regions(m, spans);
  ok = put(m, settings) && put(m, (uint64_t)n);
  for (int32_t i = 0; ok && i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    ok = put(m, (uint64_t)(uint32_t)node->op | (uint64_t)(uint32_t)node->num_inputs << 32) &&
         put(m, (uint64_t)(uint32_t)node->num_outputs | (uint64_t)(uint32_t)node->num_attrs << 32);
    for (int32_t k = 0; ok && k < node->num_inputs; ++k) {
      const tpu_value_t* v = &node->inputs[k];
      ok = put(m, (uint64_t)v->kind);
      if (ok && v->kind == TPU_VALUE_VIEW) ok = put_view(m, &v->u.view);
      if (ok && v->kind == TPU_VALUE_SCALAR)
        ok = put(m, (uint64_t)(uint32_t)v->u.scalar.dtype | (uint64_t)v->u.scalar.is_tensor << 32) &&
             put(m, tpu_dtype_is_floating(v->u.scalar.dtype) ? bits_of(v->u.scalar.v.f)
                                                              : (uint64_t)v->u.scalar.v.i);
    }
    for (int32_t o = 0; ok && o < node->num_outputs; ++o) ok = put_view(m, &node->outputs[o]);
    for (int32_t a = 0; ok && a < node->num_attrs; ++a) ok = put_attr(m, &node->attrs[a]);
  }
  ok = ok && put(m, (uint64_t)free_count);
  for (int32_t f = 0; ok && f < free_count; ++f)
    ok = put(m, canonical(m, frees[f].lo)) && put(m, frees[f].hi - frees[f].lo) &&
         put(m, (uint64_t)(uint32_t)frees[f].point | (uint64_t)frees[f].provisional << 32);
  ok = ok && put(m, (uint64_t)live);
  for (int32_t b = 0; ok && b < live; ++b)
    ok = put(m, canonical(m, live_addr[b])) && put(m, live_size[b]);
  m->next_hash = ok ? hash_words(m->next, m->next_len) : 0;
  m->next_valid = ok;
  return ok;
}

const tpu_flush_memo_entry_t* tpu_flush_memo_find(tpu_flush_memo_t* m) {
  if (!m->next_valid) return NULL;
  uint64_t generation = tpu_program_cache_generation();
  for (int i = 0; i < TPU_MEMO_ENTRIES; ++i) {
    tpu_flush_memo_entry_t* e = &m->entries[i];
    if (e->program && e->generation == generation && e->hash == m->next_hash && e->key_len == m->next_len &&
        memcmp(e->key, m->next, sizeof(uint64_t) * (size_t)e->key_len) == 0) {
      e->used = ++m->clock;
      return e;
    }
  }
  return NULL;
}

void tpu_flush_memo_store(tpu_flush_memo_t* m, const int32_t* order, int32_t n,
                          tpu_program_t* program, int64_t extra) {
  if (!m->next_valid || !program) return;
  tpu_flush_memo_entry_t* e = &m->entries[0];
  for (int i = 1; i < TPU_MEMO_ENTRIES; ++i)
    if (!m->entries[i].program || (e->program && m->entries[i].used < e->used))
      e = &m->entries[i];
  int32_t* kept = NULL;
  if (order) {
    kept = malloc(sizeof(int32_t) * (size_t)n);
    if (!kept) return;
    memcpy(kept, order, sizeof(int32_t) * (size_t)n);
  }
  tpu_program_release(e->program);
  free(e->order);
  e->order = kept;
  e->order_len = order ? n : 0;
  uint64_t* key = e->key; /* the signature becomes the key; the old key's buffer is reused */
  int64_t cap = e->key_cap;
  e->key = m->next;
  e->key_cap = m->next_cap;
  e->key_len = m->next_len;
  e->hash = m->next_hash;
  m->next = key;
  m->next_cap = cap;
  m->next_len = 0;
  m->next_valid = false;
  tpu_program_retain(program);
  e->program = program;
  e->extra = extra;
  e->used = ++m->clock;
  e->generation = tpu_program_cache_generation();
}
