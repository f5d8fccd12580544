/* test_runtime.c — chips, streams, events, the caching allocator and pinned
 * memory of the host driver. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tpu/ops.h"
#include "tpu/runtime.h"

static tpu_chip_t* chip0(void) {
  tpu_chip_t* chip = NULL;
  CHECK_OK(tpu_chip_get(0, &chip));
  return chip;
}

static tpu_stream_t* stream_of(tpu_chip_t* chip, int index) {
  tpu_stream_t* s = NULL;
  CHECK_OK(tpu_stream_get(chip, index, &s));
  return s;
}

TEST(runtime_has_chips) {
  CHECK(tpu_chip_count() >= 1);
  tpu_chip_t* chip = NULL;
  tpu_status_t s = tpu_chip_get(99, &chip);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
}

TEST(allocator_reuses_and_accounts) {
  tpu_chip_t* chip = chip0();
  tpu_stream_t* st = stream_of(chip, 0);
  tpu_memory_stats_t before, during, after;
  tpu_memory_get_stats(chip, &before);
  tpu_block_t *a = NULL, *b = NULL;
  CHECK_OK(tpu_block_alloc(st, 1000, &a));
  CHECK_OK(tpu_block_alloc(st, 3 << 20, &b));
  CHECK(tpu_block_addr(a) != 0 && tpu_block_addr(b) != 0);
  CHECK(tpu_chip_of_address(tpu_block_addr(a)) == 0);
  tpu_memory_get_stats(chip, &during);
  CHECK(during.allocated_bytes[TPU_POOL_ALL].current ==
        before.allocated_bytes[TPU_POOL_ALL].current + 1024 + (3 << 20));
  CHECK(during.requested_bytes[TPU_POOL_ALL].current ==
        before.requested_bytes[TPU_POOL_ALL].current + 1000 + (3 << 20));
  uint64_t addr_a = tpu_block_addr(a);
  tpu_block_free(a);
  tpu_block_t* c = NULL;
  CHECK_OK(tpu_block_alloc(st, 900, &c)); /* same stream: reused at once */
  CHECK(tpu_block_addr(c) == addr_a);
  tpu_block_free(c);
  tpu_block_free(b);
  tpu_memory_get_stats(chip, &after);
  CHECK(after.allocated_bytes[TPU_POOL_ALL].current == before.allocated_bytes[TPU_POOL_ALL].current);
  CHECK(after.allocated_bytes[TPU_POOL_ALL].peak >= during.allocated_bytes[TPU_POOL_ALL].current);
  tpu_memory_empty_cache(chip);
  tpu_memory_get_stats(chip, &after);
  CHECK(after.reserved_bytes[TPU_POOL_ALL].current <= before.reserved_bytes[TPU_POOL_ALL].current);
}

TEST(allocator_reuses_merged_segments_in_a_loop) {
  /* A loop step allocates two 8 MiB blocks of one 20 MiB segment and frees
   * both (they merge back into the whole segment): later steps must carve
   * from that free segment, not map a new one per step. */
  tpu_chip_t* chip = chip0();
  tpu_stream_t* st = stream_of(chip, 0);
  tpu_memory_empty_cache(chip);
  tpu_memory_stats_t first, later;
  for (int step = 0; step < 6; ++step) {
    tpu_block_t *t = NULL, *u = NULL;
    CHECK_OK(tpu_block_alloc(st, 8 << 20, &t));
    CHECK_OK(tpu_block_alloc(st, 8 << 20, &u));
    tpu_block_free(t);
    tpu_block_free(u);
    tpu_memory_get_stats(chip, step == 0 ? &first : &later);
  }
  CHECK(later.segment[TPU_POOL_LARGE].current == first.segment[TPU_POOL_LARGE].current);
  CHECK(later.reserved_bytes[TPU_POOL_ALL].current == first.reserved_bytes[TPU_POOL_ALL].current);
  tpu_memory_empty_cache(chip);
}

TEST(allocator_out_of_memory_recovers) {
  tpu_chip_t* chip = chip0();
  tpu_stream_t* st = stream_of(chip, 0);
  uint64_t total = tpu_chip_capacity(chip);
  tpu_block_t* big = NULL;
  tpu_status_t s = tpu_block_alloc(st, (size_t)total + 1, &big);
  CHECK(tpu_status_code(s) == TPU_CODE_OUT_OF_MEMORY);
  CHECK(strstr(tpu_status_message(s), "out of memory") != NULL);
  tpu_status_free(s);
  CHECK(big == NULL);
  /* Fill most of the chip, fail, free, and succeed again. */
  tpu_block_t* half = NULL;
  CHECK_OK(tpu_block_alloc(st, (size_t)(total / 2 + (64 << 20)), &half));
  tpu_block_t* other = NULL;
  s = tpu_block_alloc(st, (size_t)(total / 2 + (64 << 20)), &other);
  CHECK(tpu_status_code(s) == TPU_CODE_OUT_OF_MEMORY);
  tpu_status_free(s);
  tpu_block_free(half);
  CHECK_OK(tpu_block_alloc(st, (size_t)(total / 2 + (64 << 20)), &other));
  tpu_block_free(other);
  tpu_memory_empty_cache(chip);
}

TEST(stream_copies_are_ordered) {
  tpu_chip_t* chip = chip0();
  tpu_stream_t* st = stream_of(chip, 0);
  enum { N = 1 << 16 };
  int* host = malloc(N * sizeof(int));
  int* back = calloc(N, sizeof(int));
  for (int i = 0; i < N; ++i) host[i] = i * 7;
  tpu_block_t *a = NULL, *b = NULL;
  CHECK_OK(tpu_block_alloc(st, N * sizeof(int), &a));
  CHECK_OK(tpu_block_alloc(st, N * sizeof(int), &b));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(a), (uint64_t)(uintptr_t)host,
                           N * sizeof(int)));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2D, tpu_block_addr(b), tpu_block_addr(a), N * sizeof(int)));
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)back, tpu_block_addr(b),
                           N * sizeof(int)));
  CHECK_OK(tpu_stream_synchronize(st));
  CHECK(memcmp(host, back, N * sizeof(int)) == 0);
  CHECK(tpu_stream_query(st));
  tpu_block_free(a);
  tpu_block_free(b);
  free(host);
  free(back);
}

/* Sets the atomic_int at arg after a while. Tests read it while a stream's
 * worker may still be running this, hence the atomic. */
static void slow_fn(void* arg) {
  atomic_int* flag = arg;
  for (volatile int i = 0; i < 2000000; ++i) {
  }
  atomic_store_explicit(flag, 1, memory_order_release);
}

TEST(events_order_streams) {
  tpu_chip_t* chip = chip0();
  tpu_stream_t* s1 = stream_of(chip, 1);
  tpu_stream_t* s2 = stream_of(chip, 2);
  atomic_int flag;
  atomic_init(&flag, 0);
  int seen = -1;
  tpu_event_t *ev = NULL, *t0 = NULL, *t1 = NULL;
  CHECK_OK(tpu_event_create(false, &ev));
  CHECK_OK(tpu_event_create(true, &t0));
  CHECK_OK(tpu_event_create(true, &t1));
  CHECK(tpu_event_query(ev)); /* never recorded: complete */
  CHECK_OK(tpu_event_record(t0, s1));
  CHECK_OK(tpu_stream_host_fn(s1, slow_fn, (void*)&flag));
  CHECK_OK(tpu_event_record(ev, s1));
  CHECK_OK(tpu_event_record(t1, s1));
  CHECK_OK(tpu_stream_wait_event(s2, ev));
  /* s2 copies the flag only after s1 set it. */
  CHECK_OK(tpu_stream_copy(s2, TPU_COPY_D2D, (uint64_t)(uintptr_t)&seen, (uint64_t)(uintptr_t)&flag,
                           sizeof(int)));
  CHECK_OK(tpu_stream_synchronize(s2));
  CHECK(seen == 1);
  CHECK_OK(tpu_event_synchronize(t1));
  CHECK(tpu_event_query(ev));
  double ms = -1;
  CHECK_OK(tpu_event_elapsed_ms(t0, t1, &ms));
  CHECK(ms >= 0.0);
  tpu_status_t s = tpu_event_elapsed_ms(ev, t1, &ms); /* no timing on ev */
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
  tpu_event_release(ev);
  tpu_event_release(t0);
  tpu_event_release(t1);
}

TEST(cross_stream_free_waits_for_use) {
  tpu_chip_t* chip = chip0();
  tpu_stream_t* s0 = stream_of(chip, 0);
  tpu_stream_t* s3 = stream_of(chip, 3);
  tpu_block_t* a = NULL;
  CHECK_OK(tpu_block_alloc(s0, 4096, &a));
  tpu_block_record_stream(a, s3);
  atomic_int flag;
  atomic_init(&flag, 0);
  CHECK_OK(tpu_stream_host_fn(s3, slow_fn, (void*)&flag));
  uint64_t addr = tpu_block_addr(a);
  tpu_block_free(a);
  tpu_block_t* b = NULL;
  CHECK_OK(tpu_block_alloc(s0, 4096, &b));
  /* Either s3 already finished, or the block was not handed out again. */
  CHECK(atomic_load_explicit(&flag, memory_order_acquire) == 1 || tpu_block_addr(b) != addr);
  CHECK_OK(tpu_stream_synchronize(s3));
  tpu_block_free(b);
}

TEST(pinned_memory_async_copy) {
  tpu_chip_t* chip = chip0();
  tpu_stream_t* st = stream_of(chip, 0);
  void* pinned = NULL;
  CHECK_OK(tpu_host_alloc(1 << 20, &pinned));
  CHECK(tpu_host_is_pinned(pinned));
  CHECK(tpu_host_is_pinned((char*)pinned + 100));
  int on_stack = 0;
  CHECK(!tpu_host_is_pinned(&on_stack));
  memset(pinned, 0x5a, 1 << 20);
  tpu_block_t* a = NULL;
  CHECK_OK(tpu_block_alloc(st, 1 << 20, &a));
  CHECK_OK(tpu_stream_copy_pinned(st, TPU_COPY_H2D, tpu_block_addr(a), (uint64_t)(uintptr_t)pinned,
                                  1 << 20));
  tpu_host_free(pinned); /* deferred until the copy ran */
  unsigned char* back = malloc(1 << 20);
  CHECK_OK(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)back, tpu_block_addr(a), 1 << 20));
  CHECK_OK(tpu_stream_synchronize(st));
  CHECK(back[0] == 0x5a && back[(1 << 20) - 1] == 0x5a);
  free(back);
  tpu_block_free(a);
}

TEST(launch_blocking_mode) {
  tpu_chip_t* chip = chip0();
  tpu_stream_t* st = stream_of(chip, 4);
  tpu_set_launch_blocking(true);
  atomic_int flag;
  atomic_init(&flag, 0);
  CHECK_OK(tpu_stream_host_fn(st, slow_fn, (void*)&flag));
  CHECK(atomic_load(&flag) == 1); /* returned only after it ran */
  tpu_set_launch_blocking(false);
}

/* Threads that each make their first submissions to a stream of their own at
 * once: their queues' workers start together, and the allocator, events and
 * queues are used concurrently (a ThreadSanitizer build checks the ordering;
 * run alone, it also covers the workers' first read of their settings). */
#define THREADED_STREAMS 4
#define THREADED_INTS 4096

typedef struct {
  int stream_index;
  atomic_int* host_fns_run;
  bool ok;
} threaded_use_t;

static void count_host_fn(void* arg) { atomic_fetch_add((atomic_int*)arg, 1); }

/* CHECK is for the test's own thread: the others report through this. */
static bool succeeded(tpu_status_t s) {
  bool ok = s == TPU_OK;
  tpu_status_free(s);
  return ok;
}

static bool copy_round_trip(tpu_stream_t* st, int seed, atomic_int* host_fns_run) {
  int* host = malloc(THREADED_INTS * sizeof(int));
  int* back = calloc(THREADED_INTS, sizeof(int));
  tpu_block_t* b = NULL;
  tpu_event_t* ev = NULL;
  bool ok = host && back && succeeded(tpu_block_alloc(st, THREADED_INTS * sizeof(int), &b)) &&
            succeeded(tpu_event_create(false, &ev));
  for (int i = 0; ok && i < THREADED_INTS; ++i) host[i] = seed * THREADED_INTS + i;
  ok = ok &&
       succeeded(tpu_stream_copy(st, TPU_COPY_H2D, tpu_block_addr(b), (uint64_t)(uintptr_t)host,
                                 THREADED_INTS * sizeof(int))) &&
       succeeded(tpu_stream_host_fn(st, count_host_fn, host_fns_run)) &&
       succeeded(tpu_stream_copy(st, TPU_COPY_D2H, (uint64_t)(uintptr_t)back, tpu_block_addr(b),
                                 THREADED_INTS * sizeof(int))) &&
       succeeded(tpu_event_record(ev, st)) && succeeded(tpu_event_synchronize(ev)) &&
       memcmp(host, back, THREADED_INTS * sizeof(int)) == 0;
  if (ev) tpu_event_release(ev);
  if (b) tpu_block_free(b);
  free(host);
  free(back);
  return ok;
}

static void* threaded_use_main(void* arg) {
  threaded_use_t* t = arg;
  tpu_chip_t* chip = NULL;
  tpu_stream_t* st = NULL;
  t->ok = succeeded(tpu_chip_get(0, &chip)) && succeeded(tpu_stream_get(chip, t->stream_index, &st)) &&
          copy_round_trip(st, t->stream_index, t->host_fns_run);
  return NULL;
}

TEST(streams_used_from_several_threads_at_once) {
  atomic_int host_fns_run;
  atomic_init(&host_fns_run, 0);
  threaded_use_t uses[THREADED_STREAMS];
  pthread_t threads[THREADED_STREAMS];
  for (int i = 0; i < THREADED_STREAMS; ++i) {
    uses[i] = (threaded_use_t){.stream_index = 8 + i, .host_fns_run = &host_fns_run};
    CHECK(pthread_create(&threads[i], NULL, threaded_use_main, &uses[i]) == 0);
  }
  for (int i = 0; i < THREADED_STREAMS; ++i) {
    pthread_join(threads[i], NULL);
    CHECK(uses[i].ok);
  }
  CHECK(atomic_load(&host_fns_run) == THREADED_STREAMS);
}

/* Nodes keep their operands while the graph's arrays grow (from the inline
 * one-node storage, then past a reservation) and after it is reserved. */
TEST(graph_growth_keeps_every_nodes_operands) {
  tpu_graph_t* g = NULL;
  CHECK_OK(tpu_graph_create(&g));
  tpu_op_id_t add = tpu_op_lookup("add");
  int32_t nattrs = tpu_op_num_attrs(add);
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{0}};
  enum { N = 300 };
  for (int32_t i = 0; i < N; ++i) {
    if (i == 100) CHECK_OK(tpu_graph_reserve(g, 200, 600, 200));
    tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW}, {.kind = TPU_VALUE_VIEW}};
    tpu_view_t out = {.addr = 0x100000u + 64u * (uint64_t)i, .dtype = TPU_DTYPE_F32, .ndim = 1};
    out.sizes[0] = i + 1;
    tpu_view_set_contiguous(&out);
    in[0].u.view = out;
    in[0].u.view.addr += 1;
    in[1].u.view = out;
    in[1].u.view.addr += 2;
    CHECK_OK(tpu_graph_add_node(g, add, in, 2, &out, 1, attrs, nattrs));
  }
  CHECK(tpu_graph_node_count(g) == N);
  int64_t nin = 0, nout = 0;
  tpu_graph_operand_counts(g, &nin, &nout);
  CHECK(nin == 2 * N && nout == N);
  for (int32_t i = 0; i < N; ++i) {
    const tpu_node_t* node = tpu_graph_node(g, i);
    uint64_t base = 0x100000u + 64u * (uint64_t)i;
    CHECK(node->num_inputs == 2 && node->num_outputs == 1 && node->num_attrs == nattrs);
    CHECK(node->outputs[0].addr == base && node->outputs[0].sizes[0] == i + 1);
    CHECK(node->inputs[0].u.view.addr == base + 1 && node->inputs[1].u.view.addr == base + 2);
  }
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_release(g);
}

/* A graph made with room (DEFER_AND_FUSE's pending graph) reuses the arrays
 * of one released before, starts empty, and holds what is appended anew. */
TEST(graph_reserved_reuses_released_arrays) {
  enum { KEPT = 4, N = 9 };
  tpu_graph_t* held[KEPT]; /* whatever graphs ir.c kept, taken out of the way */
  for (int k = 0; k < KEPT; ++k) CHECK_OK(tpu_graph_create_reserved(2, 4, 2, &held[k]));
  tpu_op_id_t add = tpu_op_lookup("add");
  int32_t nattrs = tpu_op_num_attrs(add);
  tpu_attr_t attrs[TPU_MAX_ATTRS] = {{0}};
  const tpu_node_t* first = NULL;
  for (int round = 0; round < 3; ++round) {
    tpu_graph_t* g = NULL;
    CHECK_OK(tpu_graph_create_reserved(N, 2 * N, N, &g));
    CHECK(tpu_graph_node_count(g) == 0);
    int64_t nin = -1, nout = -1;
    tpu_graph_operand_counts(g, &nin, &nout);
    CHECK(nin == 0 && nout == 0);
    for (int32_t i = 0; i < N; ++i) {
      tpu_view_t out = {.addr = 0x200000u + 4096u * (uint64_t)(i + round), .dtype = TPU_DTYPE_F32,
                        .ndim = 1};
      out.sizes[0] = i + 1 + round;
      tpu_view_set_contiguous(&out);
      tpu_value_t in[2] = {{.kind = TPU_VALUE_VIEW, .u.view = out},
                           {.kind = TPU_VALUE_VIEW, .u.view = out}};
      in[1].u.view.addr += 8;
      CHECK_OK(tpu_graph_add_node(g, add, in, 2, &out, 1, attrs, nattrs));
    }
    if (round == 0) first = tpu_graph_node(g, 0);
    else CHECK(tpu_graph_node(g, 0) == first); /* the same arrays again */
    for (int32_t i = 0; i < N; ++i) {
      const tpu_node_t* node = tpu_graph_node(g, i);
      uint64_t base = 0x200000u + 4096u * (uint64_t)(i + round);
      CHECK(node->num_inputs == 2 && node->num_outputs == 1);
      CHECK(node->outputs[0].addr == base && node->outputs[0].sizes[0] == i + 1 + round);
      CHECK(node->inputs[0].u.view.addr == base && node->inputs[1].u.view.addr == base + 8);
    }
    CHECK_OK(tpu_graph_verify(g));
    tpu_graph_release(g);
  }
  for (int k = 0; k < KEPT; ++k) tpu_graph_release(held[k]);
}
