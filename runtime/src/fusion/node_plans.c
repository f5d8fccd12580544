/* node_plans.c — per-node kernel plans kept with a flush memo entry, so a
 * repeated recording skips the kernels' per-call planning.
 *
 * Kept per node: a row-local node's row inputs (its row's `rows`
 * function), and an elementwise node's plan (tpu_ew_plan: its dtypes, tile function and
 * parameters) is a function of the op, its operands' kinds and dtypes,
 * which tensors are 0-dim, its scalars' values and its attributes: never
 * of an address, a size or a stride (but for TPU_EW_VALUE_0DIM impls,
 * which are not planned here). A flush memo hit has a recording equal to
 * the stored one word for word but for addresses (flush_memo.c), node
 * for node in the program's order, so the plans made for the stored
 * recording are the plans of the repeat. They hold no address.
 *
 * Made once when the memo stores an entry, read-only afterwards (runs of
 * the stream's commands may be on any thread), counted by references: the
 * memo entry holds one and a graph it is attached to another
 * (ir/attach.h), so replacing the entry while its last run is queued is
 * safe. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/fusion.h"
#include "ir/attach.h"
#include "kernel.h"
#include "kernels/elementwise/elementwise.h"

typedef struct node_plan {
  bool ew;            /* plan is the node's tpu_ew_plan */
  bool rows;          /* rows_mask is what its row's `rows` function gives */
  uint32_t rows_mask;
  tpu_ew_plan_t plan;
} node_plan_t;

struct tpu_node_plans {
  atomic_int refs;
  int32_t count;
  int32_t planned;
  node_plan_t node[];
};

/* Whether node may run with a plan made for another node equal to it but
 * for addresses (and, in row tiles, sizes): an elementwise row whose
 * kernel tpu_node_execute calls on the node as it is, with a plan that
 * reads no shape. */
static bool plannable(const tpu_op_def_t* def, const tpu_node_t* node) {
  if (def->kernel != tpu_ew_kernel || !def->impl) return false;
  const tpu_ew_impl_t* impl = (const tpu_ew_impl_t*)def->impl;
  return !(impl->flags & TPU_EW_VALUE_0DIM) && !tpu_ew_node_is_complex(node) &&
         tpu_node_runs_as_is(node);
}

static void make_one(const tpu_node_t* node, node_plan_t* out) {
  const tpu_op_def_t* def = tpu_op_def(node->op);
  memset(out, 0, sizeof(*out));
  if (!def) return;
  /* A row-local node's row inputs (exec.c's row groups ask every run): a
   * function of its row, attributes and dims, as the mask the group's
   * run would get. */
  if (def->rows && !(def->flags & TPU_OP_POINTWISE)) {
    def->rows(def, node, &out->rows_mask);
    out->rows = true;
  }
  if (!plannable(def, node)) return;
  tpu_status_t s = tpu_ew_plan(def, node, &out->plan);
  if (s != TPU_OK) { /* the kernel reports it, every run */
    tpu_status_free(s);
    memset(&out->plan, 0, sizeof(out->plan));
    return;
  }
  out->ew = true;
}

tpu_node_plans_t* tpu_node_plans_make(const tpu_graph_t* graph) {
  int32_t n = tpu_graph_node_count(graph);
  tpu_node_plans_t* p = malloc(sizeof(*p) + sizeof(node_plan_t) * (size_t)(n > 0 ? n : 0));
  if (!p) return NULL;
  atomic_init(&p->refs, 1);
  p->count = n;
  p->planned = 0;
  for (int32_t i = 0; i < n; ++i) {
    make_one(tpu_graph_node(graph, i), &p->node[i]);
    p->planned += p->node[i].ew || p->node[i].rows;
  }
  if (p->planned == 0) { /* nothing to keep */
    free(p);
    return NULL;
  }
  return p;
}

tpu_node_plans_t* tpu_node_plans_retain(tpu_node_plans_t* plans) {
  if (plans) atomic_fetch_add_explicit(&plans->refs, 1, memory_order_relaxed);
  return plans;
}

void tpu_node_plans_release(tpu_node_plans_t* plans) {
  if (plans && atomic_fetch_sub_explicit(&plans->refs, 1, memory_order_acq_rel) == 1)
    free(plans);
}

static void release_attached(const void* data) {
  tpu_node_plans_release((tpu_node_plans_t*)(uintptr_t)data);
}

void tpu_node_plans_attach(tpu_graph_t* graph, tpu_node_plans_t* plans) {
  if (plans) tpu_graph_attach(graph, tpu_node_plans_retain(plans), release_attached);
}

const tpu_node_plans_t* tpu_node_plans_of(const tpu_graph_t* graph) {
  return (const tpu_node_plans_t*)tpu_graph_attachment(graph, release_attached);
}

const struct tpu_ew_plan* tpu_node_plans_ew(const tpu_node_plans_t* plans, int32_t node) {
  if (!plans || node < 0 || node >= plans->count || !plans->node[node].ew) return NULL;
  return &plans->node[node].plan;
}

bool tpu_node_plans_rows(const tpu_node_plans_t* plans, int32_t node, uint32_t* out_mask) {
  if (!plans || node < 0 || node >= plans->count || !plans->node[node].rows) return false;
  *out_mask = plans->node[node].rows_mask;
  return true;
}

int32_t tpu_node_plans_planned(const tpu_node_plans_t* plans) {
  return plans ? plans->planned : 0;
}

int32_t tpu_node_plans_check(const tpu_node_plans_t* plans, const tpu_graph_t* graph) {
  int32_t n = tpu_graph_node_count(graph);
  if (plans && plans->count != n) return plans->count < n ? plans->count : n;
  for (int32_t i = 0; i < n; ++i) {
    node_plan_t fresh;
    make_one(tpu_graph_node(graph, i), &fresh);
    const tpu_ew_plan_t* kept = tpu_node_plans_ew(plans, i);
    if (fresh.ew != (kept != NULL)) return i;
    uint32_t mask = 0;
    bool rows = tpu_node_plans_rows(plans, i, &mask);
    if (rows != fresh.rows || mask != fresh.rows_mask) return i;
    /* both memset before they were filled: their padding compares equal */
    if (kept && memcmp(kept, &fresh.plan, sizeof(fresh.plan)) != 0) return i;
  }
  return -1;
}
