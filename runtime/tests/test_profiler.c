/* test_profiler.c — the device event recorder (tpu/profiler.h): bounded
 * buffers whose overflow is counted, drain order, and the events the host
 * driver and the allocator record for real commands. */
#include <string.h>

#include "test.h"
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
