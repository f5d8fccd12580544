/* test_allocator_hooks.c — the allocator reports to the stream layer only
 * through its hooks (tpu_allocator_hooks_t, src/stream/internal.h), holding
 * no lock of its own across any of them: an allocator made with test hooks
 * on a chip of its own (sharing the first chip's driver chip) calls back
 * into itself from inside each hook, which would deadlock otherwise. The
 * free hook retires the block itself, and from then on the range is the
 * allocator's again. */
#include <stdlib.h>

#include "stream/internal.h"
#include "test.h"
#include "tpu/runtime.h"

static struct {
  tpu_allocator_t* a;
  bool deferring;
  bool alloc_in_free; /* the free hook allocates again after retiring */
  int allocated, freeing;
  uint64_t last_bytes;
  int32_t provisional_seen; /* the stream's live provisional blocks, asked in the hook */
  tpu_freed_t freed;
  uint64_t freed_addr;
  tpu_block_t* again; /* what the free hook allocated */
} g_log;

static bool h_deferring(void) { return g_log.deferring; }

static void h_allocated(tpu_stream_t* stream, const tpu_block_t* block, uint64_t bytes) {
  g_log.allocated++;
  g_log.last_bytes = bytes;
  uint64_t addr[4], size[4];
  g_log.provisional_seen = tpu_allocator_provisional(g_log.a, stream->index, addr, size, 4);
}

static tpu_status_t h_flush(tpu_stream_t* stream) { return TPU_OK; }

static void h_freeing(tpu_stream_t* stream, tpu_block_t* block,
                      void (*retire)(tpu_block_t* block, tpu_freed_t* out)) {
  g_log.freeing++;
  g_log.freed_addr = tpu_block_addr(block);
  retire(block, &g_log.freed);
  if (g_log.alloc_in_free) {
    g_log.alloc_in_free = false;
    tpu_status_t s = tpu_block_alloc(stream, (size_t)g_log.last_bytes, &g_log.again);
    if (s != TPU_OK) g_log.again = NULL;
    tpu_status_free(s);
  }
}

static const tpu_allocator_hooks_t g_hooks = {
    .deferring = h_deferring, .allocated = h_allocated, .flush = h_flush, .freeing = h_freeing};

TEST(allocator_reports_through_hooks_holding_no_lock) {
  tpu_chip_t* real = NULL;
  CHECK_OK(tpu_chip_get(0, &real));
  if (!real) return;
  tpu_chip_t* chip = calloc(1, sizeof(*chip));
  CHECK(chip != NULL);
  if (!chip) return;
  chip->index = real->index;
  chip->capacity = real->capacity;
  chip->hal = real->hal;
  pthread_mutex_init(&chip->mu, NULL);
  for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) {
    chip->streams[s].chip = chip;
    chip->streams[s].index = s;
    tpu_pending_init(&chip->streams[s].pending);
  }
  CHECK_OK(tpu_allocator_create(chip, &g_hooks, &chip->allocator));
  g_log.a = chip->allocator;
  tpu_stream_t* st = &chip->streams[0];

  /* Not deferring: counted at once; the free hook retires it, and an
   * allocation of the same size made right after, inside the hook, gets
   * the same range back. */
  tpu_block_t* b = NULL;
  CHECK_OK(tpu_block_alloc(st, 1000, &b));
  CHECK(g_log.allocated == 1 && g_log.last_bytes == 1000 && g_log.provisional_seen == 0);
  uint64_t addr = tpu_block_addr(b);
  g_log.alloc_in_free = true;
  tpu_block_free(b);
  CHECK(g_log.freeing == 1 && g_log.freed_addr == addr);
  CHECK(g_log.freed.addr == addr && g_log.freed.size == 1024 && !g_log.freed.provisional);
  CHECK(g_log.again != NULL && tpu_block_addr(g_log.again) == addr);
  CHECK(g_log.allocated == 2);
  tpu_block_free(g_log.again);
  CHECK(g_log.freeing == 2);

  /* Deferring: provisional, listed as live until freed, and the free says
   * its bytes were never counted. */
  g_log.deferring = true;
  CHECK_OK(tpu_block_alloc(st, 4000, &b));
  CHECK(g_log.allocated == 3 && g_log.provisional_seen == 1);
  tpu_block_free(b);
  CHECK(g_log.freeing == 3 && g_log.freed.provisional && g_log.freed.size == 4096);
  uint64_t la[1], ls[1];
  CHECK(tpu_allocator_provisional(chip->allocator, 0, la, ls, 1) == 0);

  tpu_allocator_destroy(chip->allocator);
  pthread_mutex_destroy(&chip->mu);
  for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) pthread_mutex_destroy(&chip->streams[s].pending.mu);
  free(chip);
}
