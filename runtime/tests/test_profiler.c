/* test_profiler.c — the device event recorder (tpu/profiler.h): bounded
 * buffers whose overflow is counted, drain order, and the events the host
 * driver and the allocator record for real commands. */
#include <string.h>

#include "test.h"
#include "tpu/ir.h"
#include "tpu/ops.h"
#include "tpu/profiler.h"

static tpu_prof_event_t synthetic(int64_t t) {
  tpu_prof_event_t ev = {.kind = TPU_PROF_KERNEL, .chip = 0, .stream = 3,
                         .start_ns = t, .end_ns = t + 1, .bytes = -1, .flops = -1};
  strcpy(ev.name, "synthetic");
  return ev;
}

TEST(profiler_overflow_is_counted_and_drain_keeps_order) {
  tpu_profiler_config_t cfg = {.events_per_chip = 4};
  CHECK_OK(tpu_profiler_start(&cfg));
  CHECK(tpu_profiler_enabled());
  for (int64_t t = 0; t < 6; ++t) {
    tpu_prof_event_t ev = synthetic(t);
    tpu_profiler_record(&ev);
  }
  tpu_profiler_stop();
  tpu_prof_event_t after = synthetic(100); /* stopped: not kept, not counted */
  tpu_profiler_record(&after);
  tpu_profiler_stats_t st;
  tpu_profiler_get_stats(&st);
  CHECK(st.recorded == 4);
  CHECK(st.dropped == 2);
  tpu_prof_event_t out[8];
  size_t n = 0;
  CHECK_OK(tpu_profiler_drain(0, out, 3, &n)); /* a partial drain, then the rest */
  CHECK(n == 3);
  for (size_t i = 0; i < n; ++i) CHECK(out[i].start_ns == (int64_t)i);
  CHECK_OK(tpu_profiler_drain(0, out, 8, &n));
  CHECK(n == 1 && out[0].start_ns == 3);
  CHECK_OK(tpu_profiler_drain(0, out, 8, &n));
  CHECK(n == 0);
  tpu_status_t s = tpu_profiler_drain(TPU_MAX_CHIPS, out, 8, &n);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
}

TEST(profiler_records_copies_and_memory_in_stream_order) {
  tpu_stream_t* stream = test_stream0();
  tpu_profiler_config_t cfg = {.memory = true};
  CHECK_OK(tpu_profiler_start(&cfg));
  uint64_t prev = tpu_profiler_set_correlation(42);
  float host[64], back[64];
  for (int i = 0; i < 64; ++i) host[i] = (float)i;
  tpu_block_t* block = NULL;
  CHECK_OK(tpu_block_alloc(stream, sizeof(host), &block));
  uint64_t addr = tpu_block_addr(block);
  CHECK_OK(tpu_stream_copy(stream, TPU_COPY_H2D, addr, (uint64_t)(uintptr_t)host, sizeof(host)));
  tpu_profiler_set_correlation(43);
  CHECK_OK(tpu_stream_copy(stream, TPU_COPY_D2H, (uint64_t)(uintptr_t)back, addr, sizeof(back)));
  CHECK_OK(tpu_stream_synchronize(stream));
  tpu_block_free(block);
  tpu_profiler_set_correlation(prev);
  tpu_profiler_stop();
  CHECK(memcmp(host, back, sizeof(host)) == 0);

  tpu_prof_event_t out[64];
  size_t n = 0;
  CHECK_OK(tpu_profiler_drain(0, out, 64, &n));
  int copies = 0, allocs = 0, frees = 0;
  int64_t last_end = 0;
  for (size_t i = 0; i < n; ++i) {
    const tpu_prof_event_t* e = &out[i];
    CHECK(e->start_ns <= e->end_ns);
    if (e->kind == TPU_PROF_COPY) {
      CHECK(e->stream == 0 && e->bytes == (int64_t)sizeof(host));
      CHECK(strcmp(e->name, copies == 0 ? "memcpy H2D" : "memcpy D2H") == 0);
      CHECK(e->correlation == (copies == 0 ? 42u : 43u));
      CHECK(e->start_ns >= last_end); /* one stream: in order, not overlapping */
      last_end = e->end_ns;
      copies++;
    } else if (e->kind == TPU_PROF_ALLOC) {
      CHECK(e->addr == addr && e->bytes >= (int64_t)sizeof(host) && e->correlation == 42);
      allocs++;
    } else if (e->kind == TPU_PROF_FREE) {
      CHECK(e->addr == addr && strcmp(e->name, "free") == 0);
      frees++;
    }
  }
  CHECK(copies == 2);
  CHECK(allocs == 1 && frees == 1);

  /* Stopped: the same commands record nothing. */
  float again[4] = {0};
  CHECK_OK(tpu_block_alloc(stream, sizeof(again), &block));
  CHECK_OK(tpu_stream_copy(stream, TPU_COPY_H2D, tpu_block_addr(block),
                           (uint64_t)(uintptr_t)again, sizeof(again)));
  CHECK_OK(tpu_stream_synchronize(stream));
  tpu_block_free(block);
  CHECK_OK(tpu_profiler_drain(0, out, 64, &n));
  CHECK(n == 0);
}

/* ---- the allocator's layout (memory snapshots) ------------------------------ */

typedef struct seg_note {
  int maps, unmaps;
  uint64_t last_addr, last_size;
} seg_note_t;

static void note_segment(void* arg, int chip, int stream, uint64_t addr, uint64_t size,
                         bool mapped) {
  seg_note_t* n = arg;
  if (chip != 0 || stream != 0) return;
  if (mapped) n->maps++;
  else n->unmaps++;
  n->last_addr = addr;
  n->last_size = size;
}

/* The layout's totals against the allocator's statistics, and `addr` a
 * block in `want_state` of size >= min_size (when addr != 0). */
static void check_layout(tpu_chip_t* chip, uint64_t addr, int want_state, uint64_t min_size) {
  size_t ns = 0, nb = 0;
  CHECK_OK(tpu_memory_snapshot(chip, NULL, 0, NULL, 0, &ns, &nb)); /* counting */
  CHECK(ns >= 1 && nb >= ns);
  tpu_segment_info_t segs[64];
  tpu_block_info_t blocks[256];
  CHECK(ns <= 64 && nb <= 256);
  size_t ns2 = 0, nb2 = 0;
  CHECK_OK(tpu_memory_snapshot(chip, segs, 64, blocks, 256, &ns2, &nb2));
  CHECK(ns2 == ns && nb2 == nb);
  tpu_memory_stats_t st;
  tpu_memory_get_stats(chip, &st);
  uint64_t reserved = 0, allocated = 0, found = 0;
  for (size_t i = 0; i < ns; ++i) {
    uint64_t total = 0, alloc = 0, next = segs[i].addr;
    for (size_t k = segs[i].first_block; k < segs[i].first_block + segs[i].num_blocks; ++k) {
      CHECK(blocks[k].addr == next); /* the blocks tile the segment */
      next += blocks[k].size;
      total += blocks[k].size;
      if (blocks[k].state == TPU_BLOCK_ACTIVE_ALLOCATED) alloc += blocks[k].size;
      if (blocks[k].addr == addr && blocks[k].state == want_state && blocks[k].size >= min_size)
        found++;
    }
    CHECK(total == segs[i].total_size && alloc == segs[i].allocated_size);
    CHECK(segs[i].active_size >= segs[i].allocated_size);
    reserved += total;
    allocated += alloc;
  }
  CHECK(reserved == (uint64_t)st.reserved_bytes[TPU_POOL_ALL].current);
  CHECK(allocated == (uint64_t)st.allocated_bytes[TPU_POOL_ALL].current);
  CHECK(addr == 0 || found == 1);
  /* Too little room: the counts still say how many, nothing past it written. */
  tpu_segment_info_t one[1];
  CHECK_OK(tpu_memory_snapshot(chip, one, 1, blocks, 1, &ns2, &nb2));
  CHECK(ns2 == ns && nb2 == nb);
  tpu_status_t s = tpu_memory_snapshot(chip, NULL, 0, NULL, 0, NULL, &nb2);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
}

TEST(memory_snapshot_tiles_segments_and_observer_sees_maps) {
  tpu_stream_t* stream = test_stream0();
  tpu_chip_t* chip = tpu_stream_chip(stream);
  CHECK_OK(tpu_stream_synchronize(stream));
  tpu_memory_empty_cache(chip);
  seg_note_t note = {0};
  tpu_memory_set_segment_observer(note_segment, &note);
  /* 24 MiB: its own large segment, mapped for this request. */
  size_t big = (size_t)24 << 20;
  tpu_block_t *a = NULL, *b = NULL;
  CHECK_OK(tpu_block_alloc(stream, big, &a));
  CHECK(note.maps == 1 && note.last_addr == tpu_block_addr(a) && note.last_size >= big);
  CHECK_OK(tpu_block_alloc(stream, 1000, &b)); /* a small segment, split */
  CHECK(note.maps == 2);
  check_layout(chip, tpu_block_addr(a), TPU_BLOCK_ACTIVE_ALLOCATED, big);
  check_layout(chip, tpu_block_addr(b), TPU_BLOCK_ACTIVE_ALLOCATED, 1000);
  uint64_t addr_a = tpu_block_addr(a);
  tpu_block_free(a);
  check_layout(chip, addr_a, TPU_BLOCK_INACTIVE, big); /* cached, still mapped */
  CHECK(note.unmaps == 0);
  tpu_memory_empty_cache(chip); /* returns the whole free segment */
  CHECK(note.unmaps == 1 && note.last_addr == addr_a);
  check_layout(chip, tpu_block_addr(b), TPU_BLOCK_ACTIVE_ALLOCATED, 1000);
  tpu_memory_set_segment_observer(NULL, NULL);
  tpu_block_free(b);
  tpu_memory_empty_cache(chip);
  CHECK(note.unmaps == 1); /* uninstalled: not told */
}

TEST(graph_copies_keep_the_recording_ops_correlation) {
  tpu_graph_t *g = NULL, *copy = NULL;
  CHECK_OK(tpu_graph_create(&g));
  CHECK_OK(tpu_graph_create(&copy));
  tpu_view_t v = {.addr = 0, .ndim = 1, .sizes = {4}, .strides = {1}};
  tpu_value_t in = {.kind = TPU_VALUE_VIEW, .u.view = v};
  tpu_op_id_t relu = tpu_op_lookup("relu");
  CHECK(relu >= 0);
  uint64_t prev = tpu_profiler_set_correlation(7);
  CHECK_OK(tpu_graph_add_node(g, relu, &in, 1, &v, 1, NULL, 0));
  tpu_profiler_set_correlation(8);
  tpu_node_t node = {.op = relu, .num_inputs = 1, .num_outputs = 1, .inputs = &in, .outputs = &v};
  CHECK_OK(tpu_graph_append(g, &node));
  tpu_profiler_set_correlation(9); /* a later op copying the recording */
  CHECK_OK(tpu_graph_append_from(copy, g, 1));
  CHECK_OK(tpu_graph_append_from(copy, g, 0));
  tpu_profiler_set_correlation(prev);
  CHECK(tpu_graph_node_correlation(g, 0) == 7 && tpu_graph_node_correlation(g, 1) == 8);
  CHECK(tpu_graph_node_correlation(copy, 0) == 8 && tpu_graph_node_correlation(copy, 1) == 7);
  CHECK(tpu_graph_node_correlation(copy, 2) == 0);
  tpu_status_t s = tpu_graph_append_from(copy, g, 5);
  CHECK(tpu_status_code(s) == TPU_CODE_INVALID_ARGUMENT);
  tpu_status_free(s);
  tpu_graph_release(g);
  tpu_graph_release(copy);
}
