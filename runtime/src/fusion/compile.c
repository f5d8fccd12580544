/* compile.c — phases 2 (partition) and 3 (scratch) of the fusion compiler,
 * the verifier run after each, the program dump, and the program cache. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fusion/analysis.h"
#include "tpu/program_cache.h"
#include "tpu/ops.h"

void tpu_program_retain(tpu_program_t* p) {
  if (p) __atomic_fetch_add(&p->refs, 1, __ATOMIC_RELAXED);
}

void tpu_program_release(tpu_program_t* p) {
  if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  free(p->groups);
  free(p->out_slot);
  free(p->in_slot);
  free(p->out_base);
  free(p->in_base);
  free(p);
}

static tpu_status_t program_alloc(const tpu_fusion_analysis_t* a, tpu_program_t** out) {
  int32_t n = a->n, nin = a->in_base[n], nout = a->out_base[n];
  tpu_program_t* p = calloc(1, sizeof(*p));
  if (p) {
    p->refs = 1;
    p->node_count = n;
    p->groups = calloc((size_t)n + 1, sizeof(*p->groups));
    p->out_slot = malloc(sizeof(int32_t) * (size_t)(nout + 1));
    p->in_slot = malloc(sizeof(int32_t) * (size_t)(nin + 1));
    p->out_base = malloc(sizeof(int32_t) * (size_t)(n + 1));
    p->in_base = malloc(sizeof(int32_t) * (size_t)(n + 1));
  }
  if (!p || !p->groups || !p->out_slot || !p->in_slot || !p->out_base || !p->in_base) {
    tpu_program_release(p);
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "fusion program allocation failed");
  }
  memcpy(p->out_base, a->out_base, sizeof(int32_t) * (size_t)(n + 1));
  memcpy(p->in_base, a->in_base, sizeof(int32_t) * (size_t)(n + 1));
  for (int32_t k = 0; k < nout; ++k) p->out_slot[k] = -1;
  for (int32_t k = 0; k < nin; ++k) p->in_slot[k] = -1;
  p->hash = a->hash;
  *out = p;
  return TPU_OK;
}

/* Phase 2: groups from the analysis' cut decisions. */
static void partition(const tpu_fusion_analysis_t* a, tpu_program_t* p) {
  p->group_count = 0;
  for (int32_t i = 0; i < a->n; ++i) {
    if ((a->flags[i] & TPU_NODE_CUT_BEFORE) || p->group_count == 0) {
      tpu_program_group_t* g = &p->groups[p->group_count++];
      g->first = i;
      g->count = 0;
      g->kind = (a->flags[i] & TPU_NODE_GEMM)       ? TPU_GROUP_GEMM
                : (a->flags[i] & TPU_NODE_ROWS)     ? TPU_GROUP_ROWS
                : (a->flags[i] & TPU_NODE_TILEABLE) ? TPU_GROUP_TILED
                                                    : TPU_GROUP_SINGLE;
      g->rows = g->kind == TPU_GROUP_ROWS ? a->group_k[i] : 0;
    }
    p->groups[p->group_count - 1].count++;
  }
  /* A run of one node gains nothing from tiling. */
  for (int32_t g = 0; g < p->group_count; ++g)
    if (p->groups[g].count == 1) p->groups[g].kind = TPU_GROUP_SINGLE, p->groups[g].rows = 0;
}

/* Whether every node that reads the value of output (i, o) before its
 * buffer is freed is in [first, end) and reads the identical view. */
static bool readers_inside(const tpu_graph_t* graph, const tpu_fusion_analysis_t* a, int32_t i,
                           int32_t o, int32_t end) {
  const tpu_view_t* v = &tpu_graph_node(graph, i)->outputs[o];
  int32_t until = a->out_free[a->out_base[i] + o];
  if (until > a->n) until = a->n;
  for (int32_t k = i + 1; k < until; ++k) {
    const tpu_node_t* r = tpu_graph_node(graph, k);
    for (int32_t j = 0; j < r->num_inputs; ++j) {
      if (r->inputs[j].kind != TPU_VALUE_VIEW) continue;
      const tpu_view_t* in = &r->inputs[j].u.view;
      if (!tpu_views_may_overlap(in, v)) continue;
      if (k >= end || !tpu_fusion_same_view(in, v)) return false;
    }
  }
  return true;
}

/* Phase 3: dead outputs read only inside their group live in tile scratch;
 * in-group reads of the value they hold take the slot. (In a GEMM group not
 * C: the GEMM writes it to memory.) */
static void assign_scratch(const tpu_graph_t* graph, const tpu_fusion_analysis_t* a,
                           tpu_program_t* p) {
  p->elided_per_run = 0;
  for (int32_t g = 0; g < p->group_count; ++g) {
    tpu_program_group_t* grp = &p->groups[g];
    if (grp->kind == TPU_GROUP_SINGLE) continue;
    int32_t end = grp->first + grp->count;
    int32_t slot_vid[TPU_FUSION_MAX_SLOTS];
    grp->slots = 0;
    for (int32_t i = grp->first; i < end; ++i) {
      const tpu_node_t* node = tpu_graph_node(graph, i);
      for (int32_t k = 0; k < node->num_inputs; ++k) {
        int32_t vid = a->in_vid[a->in_base[i] + k];
        for (int32_t s = 0; vid >= 0 && s < grp->slots; ++s)
          if (slot_vid[s] == vid) p->in_slot[a->in_base[i] + k] = s;
      }
      for (int32_t o = 0; o < node->num_outputs; ++o) {
        int32_t at = a->out_base[i] + o;
        if (grp->kind == TPU_GROUP_GEMM && i == grp->first) break;
        if (a->out_free[at] <= a->n && !tpu_view_is_absent(&node->outputs[o]) &&
            grp->slots < TPU_FUSION_MAX_SLOTS && readers_inside(graph, a, i, o, end)) {
          slot_vid[grp->slots] = a->out_vid[at];
          p->out_slot[at] = grp->slots++;
          p->elided_per_run++;
        }
      }
    }
  }
}

/* Whether output q of node m is (after phase 3), or must become (after
 * phase 2: dead before node i), a scratch value: another tenant of its
 * memory then does not conflict with it. */
static bool in_scratch(const tpu_program_t* p, const tpu_fusion_analysis_t* a, int32_t m,
                       int32_t q, int32_t i) {
  return a ? a->out_free[a->out_base[m] + q] <= i : p->out_slot[p->out_base[m] + q] >= 0;
}

/* A row-tiled group: every node is pointwise or row-local over the group's
 * rows, every output has them, and every read of a value the group wrote is
 * a read by rows of the identical view. */
static tpu_status_t verify_rows(const tpu_graph_t* graph, const tpu_program_t* p,
                                const tpu_fusion_analysis_t* a, const tpu_program_group_t* grp,
                                int32_t g) {
  int32_t k = grp->rows, end = grp->first + grp->count;
  const tpu_view_t* rows = NULL;
  for (int32_t i = grp->first; i < end; ++i) {
    const tpu_node_t* node = tpu_graph_node(graph, i);
    const tpu_op_def_t* def = tpu_op_def(node->op);
    uint32_t mask = 0;
    bool pointwise = (def->flags & TPU_OP_POINTWISE) && node->num_outputs == 1;
    if (!pointwise && (!def->rows || def->rows(def, node, &mask) != k))
      return tpu_status_make(TPU_CODE_INTERNAL,
                             "fusion: node %d (%s) is not row-local over group %d's %d dims", i,
                             def->name, g, k);
    if (!rows) rows = &node->outputs[0];
    for (int32_t o = 0; o < node->num_outputs; ++o)
      if (!tpu_view_is_absent(&node->outputs[o]) &&
          !tpu_fusion_has_rows(&node->outputs[o], rows, k))
        return tpu_status_make(TPU_CODE_INTERNAL,
                               "fusion: node %d (%s) output %d lacks group %d's rows", i,
                               def->name, o, g);
    for (int32_t j = 0; j < node->num_inputs; ++j) {
      if (node->inputs[j].kind != TPU_VALUE_VIEW) continue;
      const tpu_view_t* in = &node->inputs[j].u.view;
      for (int32_t m = grp->first; m < i; ++m) {
        const tpu_node_t* prev = tpu_graph_node(graph, m);
        for (int32_t q = 0; q < prev->num_outputs; ++q)
          if (!tpu_view_is_absent(&prev->outputs[q]) &&
              tpu_views_may_overlap(in, &prev->outputs[q]) &&
              !(tpu_fusion_same_view(in, &prev->outputs[q]) &&
                tpu_fusion_reads_by_rows(node, j, mask, rows, k)) &&
              !in_scratch(p, a, m, q, i))
            return tpu_status_make(TPU_CODE_INTERNAL,
                                   "fusion: node %d (%s) input %d reads node %d's output "
                                   "other than by rows",
                                   i, def->name, j, m);
      }
    }
  }
  return TPU_OK;
}

/* A GEMM group: its lead takes an epilogue, writes no scratch, and every
 * later node joins it (tpu_fusion_gemm_joins). */
static tpu_status_t verify_gemm(const tpu_graph_t* graph, const tpu_program_t* p,
                                const tpu_program_group_t* grp, int32_t g) {
  const tpu_node_t* lead = tpu_graph_node(graph, grp->first);
  if (!tpu_fusion_gemm_lead(lead))
    return tpu_status_make(TPU_CODE_INTERNAL, "fusion: group %d's lead (%s) takes no epilogue",
                           g, tpu_op_def(lead->op)->name);
  if (lead->num_outputs == 1 && p->out_slot[p->out_base[grp->first]] >= 0)
    return tpu_status_make(TPU_CODE_INTERNAL, "fusion: GEMM group %d's C is in scratch", g);
  for (int32_t i = grp->first + 1; i < grp->first + grp->count; ++i)
    if (!tpu_fusion_gemm_joins(graph, grp->first, i))
      return tpu_status_make(TPU_CODE_INTERNAL,
                             "fusion: node %d (%s) is not an epilogue of group %d's GEMM", i,
                             tpu_op_def(tpu_graph_node(graph, i)->op)->name, g);
  return TPU_OK;
}

tpu_status_t tpu_fusion_verify(const tpu_graph_t* graph, const tpu_program_t* p,
                               const tpu_fusion_analysis_t* a) {
  int32_t next = 0;
  for (int32_t g = 0; g < p->group_count; ++g) {
    const tpu_program_group_t* grp = &p->groups[g];
    if (grp->first != next || grp->count <= 0)
      return tpu_status_make(TPU_CODE_INTERNAL, "fusion: group %d does not follow group %d", g,
                             g - 1);
    next += grp->count;
    if (grp->kind != TPU_GROUP_SINGLE && grp->count > TPU_FUSION_MAX_GROUP)
      return tpu_status_make(TPU_CODE_INTERNAL, "fusion: group %d holds %d nodes", g, grp->count);
    if (grp->slots < 0 || grp->slots > TPU_FUSION_MAX_SLOTS)
      return tpu_status_make(TPU_CODE_INTERNAL, "fusion: group %d has %d slots", g, grp->slots);
    if (grp->kind == TPU_GROUP_ROWS) TPU_RETURN_IF_ERROR(verify_rows(graph, p, a, grp, g));
    if (grp->kind == TPU_GROUP_GEMM) TPU_RETURN_IF_ERROR(verify_gemm(graph, p, grp, g));
    const tpu_node_t* lead = tpu_graph_node(graph, grp->first);
    for (int32_t i = grp->first; i < next; ++i) {
      const tpu_node_t* node = tpu_graph_node(graph, i);
      const tpu_op_def_t* def = tpu_op_def(node->op);
      if (grp->kind == TPU_GROUP_TILED) {
        if (!(def->flags & TPU_OP_POINTWISE) || node->num_outputs != 1 ||
            node->outputs[0].ndim != lead->outputs[0].ndim ||
            memcmp(node->outputs[0].sizes, lead->outputs[0].sizes,
                   sizeof(int64_t) * (size_t)lead->outputs[0].ndim) != 0)
          return tpu_status_make(TPU_CODE_INTERNAL,
                                 "fusion: node %d (%s) is not pointwise over group %d's shape", i,
                                 def->name, g);
      }
      for (int32_t k = 0; k < node->num_inputs; ++k) {
        int32_t s = p->in_slot[p->in_base[i] + k];
        if (s < 0) continue;
        /* The slot must be written earlier in this group by the same view. */
        bool found = false;
        for (int32_t j = grp->first; j < i && !found; ++j)
          for (int32_t o = 0; o < tpu_graph_node(graph, j)->num_outputs && !found; ++o)
            found = p->out_slot[p->out_base[j] + o] == s &&
                    tpu_fusion_same_view(&tpu_graph_node(graph, j)->outputs[o],
                                         &node->inputs[k].u.view);
        if (grp->kind == TPU_GROUP_SINGLE || !found)
          return tpu_status_make(TPU_CODE_INTERNAL,
                                 "fusion: node %d (%s) input %d reads slot %d no earlier node "
                                 "of its group wrote",
                                 i, def->name, k, s);
      }
      for (int32_t o = 0; o < node->num_outputs; ++o)
        if (p->out_slot[p->out_base[i] + o] >= 0 && grp->kind == TPU_GROUP_SINGLE)
          return tpu_status_make(TPU_CODE_INTERNAL, "fusion: untiled node %d writes scratch", i);
    }
  }
  if (next != p->node_count || next != tpu_graph_node_count(graph))
    return tpu_status_make(TPU_CODE_INTERNAL, "fusion: groups cover %d of %d nodes", next,
                           tpu_graph_node_count(graph));
  return TPU_OK;
}

tpu_status_t tpu_fusion_compile(const tpu_graph_t* graph, const tpu_fusion_analysis_t* a,
                                tpu_program_t** out_program) {
  *out_program = NULL;
  tpu_program_t* p = NULL;
  TPU_RETURN_IF_ERROR(program_alloc(a, &p));
  partition(a, p);
  tpu_status_t s = tpu_fusion_verify(graph, p, a);
  if (s == TPU_OK) {
    assign_scratch(graph, a, p);
    s = tpu_fusion_verify(graph, p, NULL);
  }
  if (s != TPU_OK) {
    tpu_program_release(p);
    return tpu_status_annotate(s, "compiling a deferred graph of %d nodes", a->n);
  }
  *out_program = p;
  return TPU_OK;
}

static void dump_view(FILE* f, const tpu_view_t* v) {
  fprintf(f, "%s[", tpu_dtype_name(v->dtype));
  for (int32_t d = 0; d < v->ndim; ++d) fprintf(f, d ? ",%" PRId64 : "%" PRId64, v->sizes[d]);
  fprintf(f, "]");
}

void tpu_fusion_format(FILE* f, const tpu_graph_t* graph, const tpu_program_t* p) {
  fprintf(f, "[tpu defer] program %016" PRIx64 ": %d nodes, %d kernels, %" PRId64
             " intermediates in scratch\n",
          p->hash, p->node_count, p->group_count, p->elided_per_run);
  for (int32_t g = 0; g < p->group_count; ++g) {
    const tpu_program_group_t* grp = &p->groups[g];
    fprintf(f, "  kernel %d: %s, %d node(s), %d slot(s)\n", g,
            grp->kind == TPU_GROUP_TILED  ? "tiled"
            : grp->kind == TPU_GROUP_ROWS ? "rows"
            : grp->kind == TPU_GROUP_GEMM ? "gemm+epilogue"
                                          : "single",
            grp->count, grp->slots);
    for (int32_t i = grp->first; i < grp->first + grp->count; ++i) {
      const tpu_node_t* node = tpu_graph_node(graph, i);
      fprintf(f, "    %%%d = %s(", i, tpu_op_def(node->op)->name);
      for (int32_t k = 0; k < node->num_inputs; ++k) {
        if (k) fprintf(f, ", ");
        int32_t s = p->in_slot[p->in_base[i] + k];
        if (s >= 0) fprintf(f, "slot%d:", s);
        if (node->inputs[k].kind == TPU_VALUE_VIEW) dump_view(f, &node->inputs[k].u.view);
        else fprintf(f, node->inputs[k].kind == TPU_VALUE_SCALAR ? "scalar" : "None");
      }
      fprintf(f, ") -> ");
      for (int32_t o = 0; o < node->num_outputs; ++o) {
        int32_t s = p->out_slot[p->out_base[i] + o];
        if (s >= 0) fprintf(f, "slot%d:", s);
        dump_view(f, &node->outputs[o]);
        fprintf(f, " ");
      }
      fprintf(f, "\n");
    }
  }
}

void tpu_fusion_dump(const tpu_graph_t* graph, const tpu_program_t* p) {
  tpu_fusion_format(stderr, graph, p);
}

/* ---- program cache ---------------------------------------------------------------- */

#define CACHE_CAPACITY 4096 /* a power of two */
/* Entries held at most (3/4 of the table keeps the probe runs short); past
 * it, a new program evicts the least recently read one. */
#define CACHE_LIMIT (CACHE_CAPACITY / 4 * 3)

typedef struct cache_entry {
  uint64_t hash;
  uint8_t* key;
  int64_t key_len;
  tpu_program_t* program;
  int64_t reads;        /* served from the cache (hits and noted reuses) */
  int64_t compile_ns;   /* the compile that made it */
  int64_t last_read_ns; /* CLOCK_REALTIME of its last use (its compile counts) */
} cache_entry_t;

static struct {
  pthread_mutex_t mu;
  cache_entry_t entries[CACHE_CAPACITY];
  int32_t count;
  int64_t requests, hits, compiles, uncached, evictions;
} g_cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * INT64_C(1000000000) + ts.tv_nsec;
}

/* Empties slot i, releasing its program and key; the entries after it in
 * its probe run move back into the hole when their home slot allows, so
 * every lookup still reaches them (linear probing's deletion). The caller
 * holds g_cache.mu. */
static void remove_slot_locked(uint32_t i) {
  const uint32_t mask = CACHE_CAPACITY - 1;
  tpu_program_release(g_cache.entries[i].program); /* queued work keeps its own */
  free(g_cache.entries[i].key);
  memset(&g_cache.entries[i], 0, sizeof(cache_entry_t));
  g_cache.count--;
  for (uint32_t j = (i + 1) & mask; g_cache.entries[j].program; j = (j + 1) & mask) {
    uint32_t home = (uint32_t)g_cache.entries[j].hash & mask;
    /* entry j stays when its home lies cyclically in (i, j] */
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    g_cache.entries[i] = g_cache.entries[j];
    memset(&g_cache.entries[j], 0, sizeof(cache_entry_t));
    i = j;
  }
}

/* Evicts the entry read least recently (its compile counts as a read). The
 * caller holds g_cache.mu and the cache is not empty. */
static void evict_oldest_locked(void) {
  uint32_t oldest = CACHE_CAPACITY;
  for (uint32_t i = 0; i < CACHE_CAPACITY; ++i)
    if (g_cache.entries[i].program &&
        (oldest == CACHE_CAPACITY ||
         g_cache.entries[i].last_read_ns < g_cache.entries[oldest].last_read_ns))
      oldest = i;
  remove_slot_locked(oldest);
}

/* A read of entry e; the caller holds g_cache.mu. */
static void note_read_locked(cache_entry_t* e) {
  g_cache.requests++;
  g_cache.hits++;
  e->reads++;
  e->last_read_ns = clock_ns(CLOCK_REALTIME);
}

tpu_status_t tpu_program_cache_get(const tpu_graph_t* graph, const tpu_fusion_analysis_t* a,
                                   tpu_program_t** out_program, bool* out_hit) {
  *out_program = NULL;
  *out_hit = false;
  pthread_mutex_lock(&g_cache.mu);
  uint32_t i = (uint32_t)a->hash & (CACHE_CAPACITY - 1);
  for (uint32_t probe = 0; probe < CACHE_CAPACITY; ++probe, i = (i + 1) & (CACHE_CAPACITY - 1)) {
    cache_entry_t* e = &g_cache.entries[i];
    if (!e->program) break;
    if (e->hash == a->hash && e->key_len == a->key_len &&
        memcmp(e->key, a->key, (size_t)a->key_len) == 0) {
      tpu_program_retain(e->program);
      note_read_locked(e);
      *out_program = e->program;
      *out_hit = true;
      pthread_mutex_unlock(&g_cache.mu);
      return TPU_OK;
    }
  }
  g_cache.requests++;
  pthread_mutex_unlock(&g_cache.mu);
  tpu_program_t* p = NULL;
  int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  TPU_RETURN_IF_ERROR(tpu_fusion_compile(graph, a, &p));
  int64_t compile_ns = clock_ns(CLOCK_MONOTONIC) - t0;
  pthread_mutex_lock(&g_cache.mu);
  g_cache.compiles++;
  /* Full: the least recently read entry makes room (counted). */
  bool kept = false;
  uint8_t* key = malloc((size_t)a->key_len);
  if (key) {
    if (g_cache.count >= CACHE_LIMIT) {
      evict_oldest_locked();
      g_cache.evictions++;
    }
    memcpy(key, a->key, (size_t)a->key_len);
    i = (uint32_t)a->hash & (CACHE_CAPACITY - 1);
    while (g_cache.entries[i].program) i = (i + 1) & (CACHE_CAPACITY - 1);
    g_cache.entries[i] = (cache_entry_t){a->hash, key,       a->key_len,
                                         p,       0,         compile_ns,
                                         clock_ns(CLOCK_REALTIME)};
    g_cache.count++;
    tpu_program_retain(p);
    kept = true;
  }
  if (!kept) g_cache.uncached++; /* the key's copy failed: runs, not kept */
  pthread_mutex_unlock(&g_cache.mu);
  *out_program = p;
  return TPU_OK;
}

void tpu_program_cache_note_read(tpu_program_t* program) {
  if (!program) return;
  pthread_mutex_lock(&g_cache.mu);
  uint32_t i = (uint32_t)program->hash & (CACHE_CAPACITY - 1);
  cache_entry_t* found = NULL;
  for (uint32_t probe = 0; probe < CACHE_CAPACITY && g_cache.entries[i].program;
       ++probe, i = (i + 1) & (CACHE_CAPACITY - 1))
    if (g_cache.entries[i].program == program) {
      found = &g_cache.entries[i];
      break;
    }
  if (found) {
    note_read_locked(found);
  } else { /* reused after a clear or its eviction, or never kept: still a hit */
    g_cache.requests++;
    g_cache.hits++;
  }
  pthread_mutex_unlock(&g_cache.mu);
}

/* Host memory a program takes (its arrays). */
static int64_t program_bytes(const tpu_program_t* p) {
  int32_t n = p->node_count;
  return (int64_t)sizeof(*p) + (int64_t)sizeof(*p->groups) * (n + 1) +
         (int64_t)sizeof(int32_t) * (p->out_base[n] + 1 + p->in_base[n] + 1 + 2 * (n + 1));
}

tpu_status_t tpu_program_cache_get_stats(int32_t capacity, tpu_program_cache_stats_t* out_stats,
                                         tpu_program_cache_entry_t* out_entries,
                                         int32_t* out_count) {
  if (!out_stats || !out_count || capacity < 0 || (capacity > 0 && !out_entries))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT,
                           "tpu_program_cache_get_stats: out_stats and out_count are required, "
                           "and out_entries when capacity (%d) > 0",
                           capacity);
  pthread_mutex_lock(&g_cache.mu);
  tpu_program_cache_stats_t st = {.requests = g_cache.requests,
                                  .hits = g_cache.hits,
                                  .compiles = g_cache.compiles,
                                  .uncached = g_cache.uncached,
                                  .evictions = g_cache.evictions,
                                  .entries = g_cache.count};
  int32_t n = 0;
  for (uint32_t i = 0; i < CACHE_CAPACITY; ++i) {
    const cache_entry_t* e = &g_cache.entries[i];
    if (!e->program) continue;
    st.host_bytes += program_bytes(e->program) + e->key_len;
    if (n < capacity)
      out_entries[n++] = (tpu_program_cache_entry_t){
          .structure = e->program->hash,
          .nodes = e->program->node_count,
          .kernels = e->program->group_count,
          .read_count = e->reads,
          .compile_ns = e->compile_ns,
          .last_read_ns = e->last_read_ns,
      };
  }
  pthread_mutex_unlock(&g_cache.mu);
  *out_stats = st;
  *out_count = n;
  return TPU_OK;
}

static _Atomic uint64_t g_cache_generation;

uint64_t tpu_program_cache_generation(void) { return atomic_load(&g_cache_generation); }

tpu_status_t tpu_program_cache_clear(void) {
  atomic_fetch_add(&g_cache_generation, 1); /* the streams' flush memos forget too */
  pthread_mutex_lock(&g_cache.mu);
  for (uint32_t i = 0; i < CACHE_CAPACITY; ++i) {
    cache_entry_t* e = &g_cache.entries[i];
    if (!e->program) continue;
    tpu_program_release(e->program); /* queued commands hold their own references */
    free(e->key);
    memset(e, 0, sizeof(*e));
  }
  g_cache.count = 0;
  pthread_mutex_unlock(&g_cache.mu);
  return TPU_OK;
}
