/* flush_memo.c — a host queue's last compiled recordings, kept so that a
 * loop which records the same graph every step skips the fusion compiler's
 * front end (flush_memo.h; host_compile.c uses it).
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
 * the node order, the program (retained), the nodes' kernel plans
 * (node_plans.c: what a kernel works out from everything but addresses,
 * so a repeat's run skips it) and the estimate. A flush whose
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
 * Making the addresses canonical is a third of a repeat's cost, and a loop
 * comes back to the same few placements: so a flush first writes the raw
 * signature (the same words, the addresses as they are) and looks it up
 * among the raw signatures filed for the entries (TPU_MEMO_RAW slots, each
 * naming its entry by index and stamp). The canonical signature is a
 * function of the raw words (each address's byte range comes from the view
 * or record the words hold), so equal raw words find the entry the full
 * path would; any difference falls to the full path, which files the raw
 * signature for the entry it finds or stores (defer metric
 * `flush_repeats_raw` counts the raw finds).
 *
 * Owned by a host queue; used only by its executable_prepare calls, which
 * never overlap (tpu/hal.h). */
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "hal/flush_memo.h"

/* One address the signature holds: the bytes it stands for, and the word
 * it was written to (the raw address until the regions are known). */
typedef struct tpu_memo_span {
  uint64_t lo, hi; /* hi > lo: an empty view still has an address */
  int64_t word;    /* in `spans`: the signature word of the address */
  int32_t index;   /* in `spans`: its region; in `sorted`: which span it is */
} tpu_memo_span_t;

typedef struct tpu_memo_region {
  uint64_t start;
  int32_t id; /* by first use in the signature, -1 until used */
} tpu_memo_region_t;

/* Room for `words` signature words and `spans` addresses, reserved once
 * per signature at their largest size: each word is then a plain store. */
static bool reserve(tpu_flush_memo_t* m, int64_t words, int64_t spans) {
  if (words > m->next_cap) {
    int64_t cap = m->next_cap ? m->next_cap : 512;
    while (cap < words) cap *= 2;
    uint64_t* grown = realloc(m->next, sizeof(uint64_t) * (size_t)cap);
    if (!grown) return false;
    m->next = grown;
    m->next_cap = cap;
  }
  if (spans > m->span_cap) {
    int64_t cap = m->span_cap ? m->span_cap : 256;
    while (cap < spans) cap *= 2;
    tpu_memo_span_t* a = realloc(m->spans, sizeof(tpu_memo_span_t) * (size_t)cap);
    if (a) m->spans = a;
    tpu_memo_span_t* b = a ? realloc(m->sorted, sizeof(tpu_memo_span_t) * (size_t)cap) : NULL;
    if (b) m->sorted = b;
    tpu_memo_region_t* r = b ? realloc(m->regions, sizeof(tpu_memo_region_t) * (size_t)cap) : NULL;
    if (r) m->regions = r;
    if (!r) return false;
    m->span_cap = cap;
  }
  return true;
}

static const uint64_t PRIME = 1099511628211ull;

static uint64_t bits_of(double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

/* A signature being written: the next word, the hash so far and, for a
 * canonical signature, the addresses noted. A local of write_signature,
 * kept in registers by the helpers below (inlined); written through
 * m->next and m->next_len instead, both were reloaded for every word. */
#define SIG_INLINE static inline __attribute__((always_inline))
typedef struct sig_writer {
  uint64_t* w;    /* the next word */
  uint64_t* base; /* the first word */
  tpu_memo_span_t* spans;
  int64_t count;  /* spans noted */
  uint64_t h;
  bool raw;       /* addresses stay as they are, and go into h */
} sig_writer_t;

SIG_INLINE void put(sig_writer_t* s, uint64_t word) { *s->w++ = word; }

/* The raw address, made canonical by canonicalize once all are written;
 * in a raw signature it stays as it is and goes into the hash instead, and
 * no span is noted. */
SIG_INLINE void put_address(sig_writer_t* s, uint64_t addr, uint64_t lo, uint64_t hi) {
  if (s->raw) {
    s->h = (s->h ^ addr) * PRIME;
  } else {
    tpu_memo_span_t* sp = &s->spans[s->count++];
    sp->lo = lo;
    sp->hi = hi > lo ? hi : lo + 1;
    sp->word = s->w - s->base;
  }
  put(s, addr);
}

SIG_INLINE void put_view(sig_writer_t* s, const tpu_view_t* v) {
  uint64_t lo = 0, hi = 0;
  if (!s->raw) tpu_view_bytes(v, &lo, &hi);
  put_address(s, v->addr, lo, hi);
  put(s, (uint64_t)(uint32_t)v->dtype | (uint64_t)v->ndim << 32);
  int32_t nd = v->ndim < 0 ? 0 : v->ndim > TPU_MAX_DIMS ? TPU_MAX_DIMS : v->ndim;
  uint64_t* w = s->w;
  for (int32_t d = 0; d < nd; ++d) {
    w[2 * d] = (uint64_t)v->sizes[d];
    w[2 * d + 1] = (uint64_t)v->strides[d];
  }
  s->w = w + 2 * nd;
}

/* The attribute's words; its value also goes into the hash. */
SIG_INLINE void put_attr(sig_writer_t* s, const tpu_attr_t* a) {
  put(s, (uint64_t)(uint32_t)a->kind | (uint64_t)(uint32_t)a->count << 32);
  uint64_t value = 0;
  switch (a->kind) {
    case TPU_ATTR_INT:
    case TPU_ATTR_BOOL:
      value = (uint64_t)a->u.i;
      put(s, value);
      break;
    case TPU_ATTR_FLOAT:
      value = bits_of(a->u.f);
      put(s, value);
      break;
    case TPU_ATTR_DTYPE:
      value = (uint64_t)(uint32_t)a->u.dtype;
      put(s, value);
      break;
    case TPU_ATTR_INTS: {
      int32_t count = a->count < 0 ? 0 : a->count > TPU_MAX_INTS ? TPU_MAX_INTS : a->count;
      for (int32_t k = 0; k < count; ++k) {
        put(s, (uint64_t)a->u.ints[k]);
        value = value * 31 + (uint64_t)a->u.ints[k];
      }
      break;
    }
    case TPU_ATTR_FLOATS:
    case TPU_ATTR_COMPLEX: {
      int32_t count = a->count < 0 ? 0 : a->count > TPU_MAX_INTS ? TPU_MAX_INTS : a->count;
      for (int32_t k = 0; k < count; ++k) {
        put(s, bits_of(a->u.floats[k]));
        value = value * 31 + bits_of(a->u.floats[k]);
      }
      break;
    }
    case TPU_ATTR_STR: {
      uint64_t w[TPU_MAX_STR / sizeof(uint64_t) + 1] = {0};
      memcpy(w, a->u.str, strnlen(a->u.str, TPU_MAX_STR));
      for (size_t k = 0; k < sizeof(w) / sizeof(w[0]); ++k) put(s, w[k]);
      value = w[0];
      break;
    }
    case TPU_ATTR_NONE:
      break;
  }
  s->h = (s->h ^ value) * PRIME;
}

static int cmp_span(const void* a, const void* b) {
  uint64_t x = ((const tpu_memo_span_t*)a)->lo, y = ((const tpu_memo_span_t*)b)->lo;
  return (x > y) - (x < y);
}

/* With spans taken in order of start: opens a region at `lo`, or extends
 * the last one (index *r, end *end) when `lo` falls inside it; returns the
 * span's region. */
static inline int32_t merge_span(tpu_flush_memo_t* m, int32_t* r, uint64_t* end, uint64_t lo,
                                 uint64_t hi) {
  if (*r >= 0 && lo < *end) {
    if (hi > *end) *end = hi;
  } else {
    m->regions[++*r] = (tpu_memo_region_t){lo, -1};
    *end = hi;
  }
  return *r;
}

/* Sorts the spans by start, merges those that meet into regions (each
 * span's `index` becomes its region), and rewrites each address word as
 * (its region's id + 1) << 40 | its offset in the region, the ids given in
 * order of first use; the address words go into the hash (*h). A decode
 * step's few tens of spans start at a dozen or so addresses (a value is
 * written once and read several times): up to SMALL_MAX spans, those with
 * one start are made one (a small hash table), and the starts are sorted
 * by insertion as one word each (the start above its number: starts below
 * 2^48, as user-space addresses are); more or higher ones go by qsort. */
static void canonicalize(tpu_flush_memo_t* m, int64_t count, uint64_t* h) {
  enum { SMALL_MAX = 64, TABLE = 256, KEY_SHIFT = 16 };
  tpu_memo_span_t* spans = m->spans;
  uint64_t high = 0;
  for (int64_t k = 0; k < count; ++k) high |= spans[k].lo;
  int32_t r = -1;
  uint64_t end = 0;
  if (count <= SMALL_MAX && high >> (64 - KEY_SHIFT) == 0) {
    uint64_t starts[SMALL_MAX], ends[SMALL_MAX], keys[SMALL_MAX];
    int32_t region_of[SMALL_MAX];
    int8_t table[TABLE];
    memset(table, -1, sizeof(table));
    int32_t unique = 0;
    for (int64_t k = 0; k < count; ++k) {
      uint64_t lo = spans[k].lo;
      uint32_t slot = (uint32_t)(((lo >> 4) * 0x9e3779b97f4a7c15ull) >> 56);
      while (table[slot] >= 0 && starts[table[slot]] != lo) slot = (slot + 1) & (TABLE - 1);
      int32_t u = table[slot];
      if (u < 0) {
        u = unique++;
        table[slot] = (int8_t)u;
        starts[u] = lo;
        ends[u] = spans[k].hi;
      } else if (spans[k].hi > ends[u]) {
        ends[u] = spans[k].hi;
      }
      spans[k].index = u;
    }
    for (int32_t u = 0; u < unique; ++u) keys[u] = starts[u] << KEY_SHIFT | (uint64_t)u;
    for (int32_t i = 1; i < unique; ++i) {
      uint64_t x = keys[i];
      int32_t j = i;
      for (; j > 0 && keys[j - 1] > x; --j) keys[j] = keys[j - 1];
      keys[j] = x;
    }
    for (int32_t i = 0; i < unique; ++i) {
      int32_t u = (int32_t)(keys[i] & ((1u << KEY_SHIFT) - 1));
      region_of[u] = merge_span(m, &r, &end, starts[u], ends[u]);
    }
    for (int64_t k = 0; k < count; ++k) spans[k].index = region_of[spans[k].index];
  } else {
    tpu_memo_span_t* s = m->sorted;
    for (int64_t k = 0; k < count; ++k) s[k] = (tpu_memo_span_t){spans[k].lo, spans[k].hi, 0, (int32_t)k};
    qsort(s, (size_t)count, sizeof(*s), cmp_span);
    for (int64_t i = 0; i < count; ++i)
      spans[s[i].index].index = merge_span(m, &r, &end, s[i].lo, s[i].hi);
  }
  int32_t next_id = 0;
  uint64_t hash = *h;
  for (int64_t k = 0; k < count; ++k) {
    tpu_memo_region_t* region = &m->regions[m->spans[k].index];
    if (region->id < 0) region->id = next_id++;
    uint64_t* w = &m->next[m->spans[k].word];
    *w = (uint64_t)(region->id + 1) << 40 | (*w - region->start);
    hash = (hash ^ *w) * PRIME;
  }
  *h = hash;
}

/* ---- the signature --------------------------------------------------------------- */

/* One pass over the recording writes every word into m->next, the
 * addresses raw. For a canonical signature (!raw) it notes each address's
 * byte range, and canonicalize then rewrites the addresses; the hash covers
 * what differs between recordings of one op sequence (addresses, scalars,
 * attribute values, the node count). A raw signature (`raw`) keeps the
 * addresses as they are, in the hash too. False when out of memory. */
static bool write_signature(tpu_flush_memo_t* m, const tpu_graph_t* graph,
                            const tpu_free_record_t* frees, int32_t free_count,
                            const uint64_t* live_addr, const uint64_t* live_size, int32_t live,
                            uint64_t settings, bool raw, uint64_t* out_hash) {
  m->next_len = 0;
  m->next_valid = false;
  int32_t n = tpu_graph_node_count(graph);
  int64_t inputs, outputs;
  tpu_graph_operand_counts(graph, &inputs, &outputs);
  enum { VIEW_WORDS = 3 + 2 * TPU_MAX_DIMS, ATTR_WORDS = 2 + TPU_MAX_STR / 8 + TPU_MAX_INTS };
  if (!reserve(m,
               4 + (int64_t)n * (2 + TPU_MAX_ATTRS * ATTR_WORDS) + (inputs + outputs) * VIEW_WORDS +
                   3 * (int64_t)free_count + 2 * (int64_t)live,
               raw ? 0 : inputs + outputs + free_count + live))
    return false;
  sig_writer_t sw = {.w = m->next, .base = m->next, .spans = m->spans, .count = 0,
                     .h = 1469598103934665603ull, .raw = raw};
  sig_writer_t* s = &sw;
  put(s, settings);
  put(s, (uint64_t)n);
  s->h = (s->h ^ settings ^ (uint64_t)n << 8) * PRIME;
  for (int32_t i = 0; i < n; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    put(s, (uint64_t)(uint32_t)node->op | (uint64_t)(uint32_t)node->num_inputs << 32);
    put(s, (uint64_t)(uint32_t)node->num_outputs | (uint64_t)(uint32_t)node->num_attrs << 32);
    for (int32_t k = 0; k < node->num_inputs; ++k) {
      const tpu_value_t* v = &node->inputs[k];
      put(s, (uint64_t)v->kind);
      if (v->kind == TPU_VALUE_VIEW) {
        put_view(s, &v->u.view);
      } else if (v->kind == TPU_VALUE_SCALAR) {
        bool cx = tpu_dtype_is_complex(v->u.scalar.dtype); /* both parts */
        uint64_t value = cx ? bits_of(v->u.scalar.v.c[0])
                         : tpu_dtype_is_floating(v->u.scalar.dtype) ? bits_of(v->u.scalar.v.f)
                                                                    : (uint64_t)v->u.scalar.v.i;
        put(s, (uint64_t)(uint32_t)v->u.scalar.dtype | (uint64_t)v->u.scalar.is_tensor << 32);
        put(s, value);
        if (cx) {
          put(s, bits_of(v->u.scalar.v.c[1]));
          value = value * 31 + bits_of(v->u.scalar.v.c[1]);
        }
        s->h = (s->h ^ value) * PRIME;
      }
    }
    for (int32_t o = 0; o < node->num_outputs; ++o) put_view(s, &node->outputs[o]);
    for (int32_t a = 0; a < node->num_attrs; ++a) put_attr(s, &node->attrs[a]);
  }
  put(s, (uint64_t)free_count);
  for (int32_t f = 0; f < free_count; ++f) {
    put_address(s, frees[f].lo, frees[f].lo, frees[f].hi);
    put(s, frees[f].hi - frees[f].lo);
    put(s, (uint64_t)(uint32_t)frees[f].point | (uint64_t)frees[f].provisional << 32);
  }
  put(s, (uint64_t)live);
  for (int32_t b = 0; b < live; ++b) {
    put_address(s, live_addr[b], live_addr[b], live_addr[b] + live_size[b]);
    put(s, live_size[b]);
  }
  m->next_len = s->w - s->base;
  uint64_t h = s->h;
  if (!raw) canonicalize(m, s->count, &h);
  *out_hash = (h ^ (uint64_t)m->next_len) * PRIME;
  return true;
}

bool tpu_flush_memo_sign(tpu_flush_memo_t* m, const tpu_graph_t* graph,
                         const tpu_free_record_t* frees, int32_t free_count,
                         const uint64_t* live_addr, const uint64_t* live_size, int32_t live,
                         uint64_t settings) {
  uint64_t hash = 0;
  if (!write_signature(m, graph, frees, free_count, live_addr, live_size, live, settings, false,
                       &hash))
    return false;
  m->next_hash = hash;
  m->next_valid = true;
  return true;
}

/* ---- the raw signatures ------------------------------------------------------------ */

/* Whether raw slot r still stands for a live entry: the one it was made
 * for (not replaced since: the same stamp), of the program cache's
 * current generation. */
static tpu_flush_memo_entry_t* raw_target(tpu_flush_memo_t* m, const tpu_flush_memo_raw_t* r,
                                          uint64_t generation) {
  if (!r->key || r->entry < 0) return NULL;
  tpu_flush_memo_entry_t* e = &m->entries[r->entry];
  return e->program && e->stamp == r->stamp && e->generation == generation ? e : NULL;
}

/* Files the raw signature kept by the last lookup (m->raw) as a way to
 * entry e, in a slot that stands for nothing any more or else the least
 * recently used one; its buffer is taken, not copied. */
static void raw_remember(tpu_flush_memo_t* m, const tpu_flush_memo_entry_t* e) {
  if (!m->raw_valid) return;
  m->raw_valid = false;
  uint64_t generation = tpu_program_cache_generation();
  tpu_flush_memo_raw_t* r = &m->raw_slots[0];
  for (int i = 0; i < TPU_MEMO_RAW; ++i) {
    tpu_flush_memo_raw_t* c = &m->raw_slots[i];
    if (!raw_target(m, c, generation)) {
      r = c;
      break;
    }
    if (c->used < r->used) r = c;
  }
  uint64_t* key = r->key;
  int64_t cap = r->key_cap;
  r->key = m->raw;
  r->key_cap = m->raw_cap;
  r->key_len = m->raw_len;
  r->hash = m->raw_hash;
  r->entry = (int32_t)(e - m->entries);
  r->stamp = e->stamp;
  r->used = ++m->clock;
  m->raw = key;
  m->raw_cap = cap;
  m->raw_len = 0;
}

const tpu_flush_memo_entry_t* tpu_flush_memo_lookup(tpu_flush_memo_t* m,
                                                    const tpu_graph_t* graph,
                                                    const tpu_free_record_t* frees,
                                                    int32_t free_count, const uint64_t* live_addr,
                                                    const uint64_t* live_size, int32_t live,
                                                    uint64_t settings, bool* out_fast) {
  *out_fast = false;
  m->raw_valid = false;
  uint64_t hash = 0;
  if (!write_signature(m, graph, frees, free_count, live_addr, live_size, live, settings, true,
                       &hash))
    return NULL;
  uint64_t generation = tpu_program_cache_generation();
  for (int i = 0; i < TPU_MEMO_RAW; ++i) {
    tpu_flush_memo_raw_t* r = &m->raw_slots[i];
    if (r->hash != hash || r->key_len != m->next_len || !r->key ||
        memcmp(r->key, m->next, sizeof(uint64_t) * (size_t)r->key_len) != 0)
      continue;
    tpu_flush_memo_entry_t* e = raw_target(m, r, generation);
    if (!e) continue;
    r->used = e->used = ++m->clock;
    m->next_len = 0;
    *out_fast = true;
    return e;
  }
  /* Kept (the buffers swapped) for raw_remember; the canonical signature
   * is then written into the other buffer. */
  uint64_t* words = m->raw;
  int64_t cap = m->raw_cap;
  m->raw = m->next;
  m->raw_cap = m->next_cap;
  m->raw_len = m->next_len;
  m->raw_hash = hash;
  m->raw_valid = true;
  m->next = words;
  m->next_cap = cap;
  m->next_len = 0;
  if (!tpu_flush_memo_sign(m, graph, frees, free_count, live_addr, live_size, live, settings)) {
    m->raw_valid = false;
    return NULL;
  }
  const tpu_flush_memo_entry_t* e = tpu_flush_memo_find(m);
  if (e) raw_remember(m, e);
  return e;
}

void tpu_flush_memo_free(tpu_flush_memo_t* m) {
  for (int i = 0; i < TPU_MEMO_ENTRIES; ++i) {
    tpu_program_release(m->entries[i].program);
    tpu_node_plans_release(m->entries[i].plans);
    free(m->entries[i].key);
    free(m->entries[i].order);
  }
  for (int i = 0; i < TPU_MEMO_RAW; ++i) free(m->raw_slots[i].key);
  free(m->raw);
  free(m->next);
  free(m->spans);
  free(m->sorted);
  free(m->regions);
  memset(m, 0, sizeof(*m));
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
                          tpu_program_t* program, tpu_node_plans_t* plans, int64_t extra) {
  if (!m->next_valid || !program) {
    tpu_node_plans_release(plans);
    return;
  }
  tpu_flush_memo_entry_t* e = &m->entries[0];
  for (int i = 1; i < TPU_MEMO_ENTRIES; ++i)
    if (!m->entries[i].program || (e->program && m->entries[i].used < e->used))
      e = &m->entries[i];
  int32_t* kept = NULL;
  if (order) {
    kept = malloc(sizeof(int32_t) * (size_t)n);
    if (!kept) {
      tpu_node_plans_release(plans);
      return;
    }
    memcpy(kept, order, sizeof(int32_t) * (size_t)n);
  }
  tpu_program_release(e->program);
  tpu_node_plans_release(e->plans);
  e->plans = plans;
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
  e->stamp = ++m->stores;
  raw_remember(m, e);
}
