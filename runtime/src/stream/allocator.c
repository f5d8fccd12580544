/* allocator.c — the caching device-memory allocator of a chip.
 *
 * Same contract as PyTorch's CUDA caching allocator:
 *  - sizes round up to 512 bytes; requests up to 1 MiB come from the small
 *    pool (2 MiB segments), larger ones from the large pool (20 MiB segments
 *    below 10 MiB, else the size rounded to 2 MiB);
 *  - a block belongs to the stream it was allocated for; freed, it is reused
 *    at once by later work on that stream (stream order makes this safe);
 *  - a block used on other streams (tpu_block_record_stream) is reused only
 *    once those streams have passed the point where it was freed (events);
 *  - free neighbours in a segment merge; empty_cache returns whole free
 *    segments to the chip;
 *  - when the chip is full, cached segments are released and the request
 *    retried before OUT_OF_MEMORY is reported.
 * The segments are also kept on a list (through their first blocks), so
 * tpu_memory_snapshot can copy the whole layout, and a segment observer
 * (tpu_memory_set_segment_observer) hears each map and unmap.
 * Statistics follow c10::CachingDeviceAllocator::DeviceStats; a block
 * allocated while deferring is provisional, counted when the graph that
 * writes it is flushed (tpu_allocator_commit, which also raises the peak by
 * the driver's estimate for the flushed executable).
 * The allocator knows nothing of the streams' pending state: it tells it of
 * each allocation and free through the hooks given at creation
 * (tpu_allocator_hooks_t, internal.h), and its lock is taken and released
 * in one function here, never held across a hook. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"
#include "tpu/profiler.h"

#define ROUND 512u
#define SMALL_LIMIT ((size_t)1 << 20)
#define SMALL_SEGMENT ((size_t)2 << 20)
#define LARGE_SEGMENT ((size_t)20 << 20)
#define LARGE_DIRECT ((size_t)10 << 20)
#define SEGMENT_ROUND ((size_t)2 << 20)

struct tpu_block {
  tpu_allocator_t* owner;
  uint64_t addr;
  size_t size;
  size_t requested;
  int pool;   /* TPU_POOL_SMALL or TPU_POOL_LARGE */
  int stream; /* owning stream index */
  uint32_t stream_uses; /* other streams that used it (bit per stream) */
  bool allocated;
  bool provisional; /* allocated while deferring, not yet in the statistics */
  tpu_block_t *prev, *next; /* neighbours within the segment */
  /* The allocator's list of segments, through their first blocks (a
   * segment's first block lives as long as the segment: merges keep the
   * lower block, splits cut from its end). NULL on the other blocks. */
  tpu_block_t *seg_prev, *seg_next;
  tpu_block_t *prov_prev, *prov_next; /* the stream's provisional blocks */
  /* while awaiting other streams after free: */
  tpu_event_t* pending[TPU_STREAMS_PER_CHIP];
  int pending_count;
};

typedef struct free_list {
  tpu_block_t** items; /* sorted by (stream, size, addr) */
  int count, capacity;
} free_list_t;

struct tpu_allocator {
  tpu_chip_t* chip;
  const tpu_allocator_hooks_t* hooks; /* static */
  pthread_mutex_t mu;
  free_list_t free[TPU_POOL_COUNT]; /* index SMALL/LARGE used */
  tpu_block_t** waiting;            /* freed, awaiting other streams */
  tpu_block_t* provisional[TPU_STREAMS_PER_CHIP]; /* per stream, see tpu_allocator_commit */
  int waiting_count, waiting_capacity;
  tpu_block_t* segments; /* first blocks of the mapped segments, newest first */
  tpu_memory_stats_t stats;
};

/* The segment observer (tpu_memory_set_segment_observer): rarely set, read
 * only when a segment is mapped or returned. */
static _Atomic(tpu_segment_observer_fn) g_seg_observer;
static _Atomic(void*) g_seg_observer_arg;

void tpu_memory_set_segment_observer(tpu_segment_observer_fn fn, void* arg) {
  atomic_store(&g_seg_observer, NULL);
  atomic_store(&g_seg_observer_arg, arg);
  atomic_store(&g_seg_observer, fn);
}

static void observe_segment(tpu_allocator_t* a, const tpu_block_t* head, bool mapped) {
  tpu_segment_observer_fn fn = atomic_load_explicit(&g_seg_observer, memory_order_acquire);
  if (fn)
    fn(atomic_load(&g_seg_observer_arg), tpu_chip_index(a->chip), head->stream, head->addr,
       head->size, mapped);
}

/* ---- statistics ---------------------------------------------------------------- */

static void stat_add(tpu_stat_t* s, int64_t delta) {
  s->current += delta;
  if (s->current > s->peak) s->peak = s->current;
  if (delta > 0) s->allocated += delta;
  else s->freed -= delta;
}

static void stat_update(tpu_stat_t arr[TPU_POOL_COUNT], int pool, int64_t delta) {
  stat_add(&arr[TPU_POOL_ALL], delta);
  stat_add(&arr[pool], delta);
}

/* The statistics a live block counts in (sign +1 when it becomes counted,
 * -1 when it stops). */
static void count_block(tpu_allocator_t* a, const tpu_block_t* b, int sign) {
  stat_update(a->stats.allocation, b->pool, sign);
  stat_update(a->stats.allocated_bytes, b->pool, sign * (int64_t)b->size);
  stat_update(a->stats.active, b->pool, sign);
  stat_update(a->stats.active_bytes, b->pool, sign * (int64_t)b->size);
  stat_update(a->stats.requested_bytes, b->pool, sign * (int64_t)b->requested);
}

static void provisional_unlink(tpu_allocator_t* a, tpu_block_t* b) {
  if (b->prov_prev) b->prov_prev->prov_next = b->prov_next;
  else a->provisional[b->stream] = b->prov_next;
  if (b->prov_next) b->prov_next->prov_prev = b->prov_prev;
  b->prov_prev = b->prov_next = NULL;
  b->provisional = false;
}

static void commit_locked(tpu_allocator_t* a, int stream) {
  while (a->provisional[stream]) {
    tpu_block_t* b = a->provisional[stream];
    provisional_unlink(a, b);
    count_block(a, b, +1);
  }
}

int32_t tpu_allocator_provisional(tpu_allocator_t* a, int stream, uint64_t* out_addr,
                                  uint64_t* out_size, int32_t capacity) {
  pthread_mutex_lock(&a->mu);
  int32_t n = 0;
  for (tpu_block_t* b = a->provisional[stream]; b; b = b->prov_next, ++n)
    if (n < capacity) {
      out_addr[n] = b->addr;
      out_size[n] = b->size;
    }
  pthread_mutex_unlock(&a->mu);
  return n;
}

void tpu_allocator_commit(tpu_allocator_t* a, int stream, int64_t extra) {
  pthread_mutex_lock(&a->mu);
  tpu_stat_t* s = &a->stats.allocated_bytes[TPU_POOL_ALL];
  if (s->current + extra > s->peak) s->peak = s->current + extra;
  commit_locked(a, stream);
  pthread_mutex_unlock(&a->mu);
}

/* ---- free lists ----------------------------------------------------------------- */

static int block_less(const tpu_block_t* a, int stream, size_t size, uint64_t addr) {
  if (a->stream != stream) return a->stream < stream;
  if (a->size != size) return a->size < size;
  return a->addr < addr;
}

static int lower_bound(free_list_t* fl, int stream, size_t size, uint64_t addr) {
  int lo = 0, hi = fl->count;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (block_less(fl->items[mid], stream, size, addr)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool fl_insert(free_list_t* fl, tpu_block_t* b) {
  if (fl->count == fl->capacity) {
    int cap = fl->capacity ? fl->capacity * 2 : 64;
    tpu_block_t** items = realloc(fl->items, sizeof(*items) * (size_t)cap);
    if (!items) return false;
    fl->items = items;
    fl->capacity = cap;
  }
  int i = lower_bound(fl, b->stream, b->size, b->addr);
  memmove(&fl->items[i + 1], &fl->items[i], sizeof(*fl->items) * (size_t)(fl->count - i));
  fl->items[i] = b;
  fl->count++;
  return true;
}

static void fl_remove(free_list_t* fl, tpu_block_t* b) {
  int i = lower_bound(fl, b->stream, b->size, b->addr);
  if (i < fl->count && fl->items[i] == b) {
    memmove(&fl->items[i], &fl->items[i + 1], sizeof(*fl->items) * (size_t)(fl->count - i - 1));
    fl->count--;
  }
}

/* ---- creation -------------------------------------------------------------------- */

tpu_status_t tpu_allocator_create(tpu_chip_t* chip, const tpu_allocator_hooks_t* hooks,
                                  tpu_allocator_t** out_allocator) {
  tpu_allocator_t* a = calloc(1, sizeof(*a));
  if (!a) return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "allocator allocation failed");
  a->chip = chip;
  a->hooks = hooks;
  pthread_mutex_init(&a->mu, NULL);
  *out_allocator = a;
  return TPU_OK;
}

/* ---- segments ----------------------------------------------------------------------- */

static size_t segment_size(size_t size) {
  if (size <= SMALL_LIMIT) return SMALL_SEGMENT;
  if (size < LARGE_DIRECT) return LARGE_SEGMENT;
  return (size + SEGMENT_ROUND - 1) / SEGMENT_ROUND * SEGMENT_ROUND;
}

static void release_segment(tpu_allocator_t* a, tpu_block_t* b) {
  if (b->seg_prev) b->seg_prev->seg_next = b->seg_next;
  else a->segments = b->seg_next;
  if (b->seg_next) b->seg_next->seg_prev = b->seg_prev;
  observe_segment(a, b, false);
  tpu_hal()->memory_unmap(a->chip->hal, b->addr, b->size);
  stat_update(a->stats.segment, b->pool, -1);
  stat_update(a->stats.reserved_bytes, b->pool, -(int64_t)b->size);
  free(b);
}

/* Releases every cached block that spans a whole segment. */
static void release_cached(tpu_allocator_t* a) {
  for (int pool = TPU_POOL_SMALL; pool <= TPU_POOL_LARGE; ++pool) {
    free_list_t* fl = &a->free[pool];
    for (int i = fl->count - 1; i >= 0; --i) {
      tpu_block_t* b = fl->items[i];
      if (b->prev || b->next) continue;
      memmove(&fl->items[i], &fl->items[i + 1], sizeof(*fl->items) * (size_t)(fl->count - i - 1));
      fl->count--;
      release_segment(a, b);
    }
  }
}

void tpu_allocator_destroy(tpu_allocator_t* a) {
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  release_cached(a);
  pthread_mutex_unlock(&a->mu);
  for (int pool = 0; pool < TPU_POOL_COUNT; ++pool) free(a->free[pool].items);
  free(a->waiting);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

/* ---- freeing ------------------------------------------------------------------------- */

static void merge_into_free(tpu_allocator_t* a, tpu_block_t* b) {
  free_list_t* fl = &a->free[b->pool];
  int64_t split_delta = 0, split_bytes_delta = 0;
  /* A block with neighbours is an "inactive split" piece while free. */
  tpu_block_t* prev = b->prev;
  if (prev && !prev->allocated && prev->pending_count == 0 && prev->stream == b->stream) {
    fl_remove(fl, prev);
    split_delta--;
    split_bytes_delta -= (int64_t)prev->size;
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    free(b);
    b = prev;
  }
  tpu_block_t* next = b->next;
  if (next && !next->allocated && next->pending_count == 0 && next->stream == b->stream) {
    fl_remove(fl, next);
    split_delta--;
    split_bytes_delta -= (int64_t)next->size;
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    free(next);
  }
  if (b->prev || b->next) {
    split_delta++;
    split_bytes_delta += (int64_t)b->size;
  }
  stat_update(a->stats.inactive_split, b->pool, split_delta);
  stat_update(a->stats.inactive_split_bytes, b->pool, split_bytes_delta);
  if (!fl_insert(fl, b)) {
    /* No room to cache it: the block is leaked to the cache's bookkeeping
     * but stays accounted as reserved; this only happens when the host is
     * out of memory. */
  }
}

static void finish_free(tpu_allocator_t* a, tpu_block_t* b) {
  stat_update(a->stats.active, b->pool, -1);
  stat_update(a->stats.active_bytes, b->pool, -(int64_t)b->size);
  b->stream_uses = 0;
  merge_into_free(a, b);
}

/* Moves blocks whose other-stream uses have completed into the free lists. */
static void process_waiting(tpu_allocator_t* a) {
  int k = 0;
  for (int i = 0; i < a->waiting_count; ++i) {
    tpu_block_t* b = a->waiting[i];
    bool done = true;
    for (int e = 0; e < b->pending_count; ++e)
      if (!tpu_event_query(b->pending[e])) done = false;
    if (!done) {
      a->waiting[k++] = b;
      continue;
    }
    for (int e = 0; e < b->pending_count; ++e) tpu_event_release(b->pending[e]);
    b->pending_count = 0;
    finish_free(a, b);
  }
  a->waiting_count = k;
}

/* The profiler's allocator event (tpu/profiler.h), when it records them. */
static void prof_memory(tpu_allocator_t* a, tpu_prof_kind_t kind, int stream, uint64_t addr,
                        size_t size) {
  if (!tpu_profiler_memory_enabled()) return;
  int64_t now = tpu_profiler_now_ns();
  tpu_prof_event_t ev = {.kind = kind, .chip = (int16_t)tpu_chip_index(a->chip),
                         .stream = (int16_t)stream, .start_ns = now, .end_ns = now,
                         .correlation = tpu_profiler_correlation(), .bytes = (int64_t)size,
                         .flops = -1, .addr = addr};
  snprintf(ev.name, sizeof(ev.name), "%s", kind == TPU_PROF_ALLOC ? "alloc" : "free");
  tpu_profiler_record(&ev);
}

/* Under the allocator lock: the block stops being allocated; it becomes
 * free now, or (used by other streams) joins the waiting list until those
 * streams reach the point recorded here. `b` may be merged away. */
static void retire_locked(tpu_allocator_t* a, tpu_block_t* b) {
  b->allocated = false;
  bool provisional = b->provisional;
  if (provisional) {
    provisional_unlink(a, b);
    /* active counts blocks awaiting reuse too: it drops in finish_free. */
    stat_update(a->stats.active, b->pool, 1);
    stat_update(a->stats.active_bytes, b->pool, (int64_t)b->size);
  } else {
    stat_update(a->stats.allocation, b->pool, -1);
    stat_update(a->stats.allocated_bytes, b->pool, -(int64_t)b->size);
    stat_update(a->stats.requested_bytes, b->pool, -(int64_t)b->requested);
  }
  uint32_t uses = b->stream_uses & ~(1u << b->stream);
  if (uses) {
    /* Mark where each other stream is now; reuse waits for those points. */
    for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) {
      if (!(uses & (1u << s))) continue;
      tpu_event_t* ev = NULL;
      tpu_stream_t* st = &a->chip->streams[s];
      tpu_status_t cs = tpu_event_create(false, &ev);
      if (cs != TPU_OK) {
        tpu_status_free(cs);
        continue;
      }
      tpu_status_t rs = tpu_event_record_queued(ev, st);
      if (rs != TPU_OK) {
        tpu_status_free(rs);
        tpu_event_release(ev);
        continue;
      }
      b->pending[b->pending_count++] = ev;
    }
    if (b->pending_count) {
      if (a->waiting_count == a->waiting_capacity) {
        int cap = a->waiting_capacity ? a->waiting_capacity * 2 : 16;
        tpu_block_t** w = realloc(a->waiting, sizeof(*w) * (size_t)cap);
        if (w) {
          a->waiting = w;
          a->waiting_capacity = cap;
        }
      }
      if (a->waiting_count < a->waiting_capacity) {
        a->waiting[a->waiting_count++] = b;
        return;
      }
      /* Could not track it: wait for the other streams here instead. */
      for (int e = 0; e < b->pending_count; ++e) {
        tpu_status_free(tpu_event_synchronize(b->pending[e]));
        tpu_event_release(b->pending[e]);
      }
      b->pending_count = 0;
    }
  }
  finish_free(a, b);
}

/* The free hook's retire: the block goes back to the allocator (reusable
 * from now on); *out says what it was. */
static void retire(tpu_block_t* b, tpu_freed_t* out) {
  tpu_allocator_t* a = b->owner;
  pthread_mutex_lock(&a->mu);
  *out = (tpu_freed_t){b->addr, b->size, b->provisional};
  retire_locked(a, b);
  pthread_mutex_unlock(&a->mu);
}

void tpu_block_free(tpu_block_t* b) {
  if (!b) return;
  tpu_allocator_t* a = b->owner;
  prof_memory(a, TPU_PROF_FREE, b->stream, b->addr, b->size);
  if (tpu_hal()->memory_released) /* what the driver derived from a dead tensor goes */
    tpu_hal()->memory_released(a->chip->hal, b->addr, b->size);
  /* Deferred work of other streams that used the block goes to their queues
   * first (flushing takes the allocator lock, so not under it); the events
   * recorded below then follow it. */
  pthread_mutex_lock(&a->mu);
  uint32_t other_uses = b->stream_uses & ~(1u << b->stream);
  pthread_mutex_unlock(&a->mu);
  for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s)
    if (other_uses & (1u << s)) tpu_status_free(a->hooks->flush(&a->chip->streams[s]));
  /* The hook retires the block inside the stream's pending state, so that
   * no node writing a new tenant of the range is recorded ahead of the
   * free's record (defer.c). */
  a->hooks->freeing(&a->chip->streams[b->stream], b, retire);
}

/* ---- allocation ---------------------------------------------------------------------- */

static tpu_block_t* take_free(tpu_allocator_t* a, int pool, int stream, size_t size) {
  free_list_t* fl = &a->free[pool];
  int i = lower_bound(fl, stream, size, 0);
  if (i >= fl->count || fl->items[i]->stream != stream) return NULL;
  /* The best fit, split by the caller whatever its size (PyTorch's default,
   * max_split_size unlimited): refusing to carve a request out of a merged
   * free segment made every call of a loop map a new one. */
  tpu_block_t* b = fl->items[i];
  memmove(&fl->items[i], &fl->items[i + 1], sizeof(*fl->items) * (size_t)(fl->count - i - 1));
  fl->count--;
  if (b->prev || b->next) {
    stat_update(a->stats.inactive_split, pool, -1);
    stat_update(a->stats.inactive_split_bytes, pool, -(int64_t)b->size);
  }
  return b;
}

static tpu_status_t oom_status(tpu_allocator_t* a, size_t size) {
  uint64_t total = a->chip->capacity;
  int64_t reserved = a->stats.reserved_bytes[TPU_POOL_ALL].current;
  int64_t allocated = a->stats.allocated_bytes[TPU_POOL_ALL].current;
  double gib = 1024.0 * 1024.0 * 1024.0, mib = 1024.0 * 1024.0;
  a->stats.num_ooms++;
  return tpu_status_make(
      TPU_CODE_OUT_OF_MEMORY,
      "TPU out of memory. Tried to allocate %.2f MiB. tpu:%d has a total capacity of %.2f GiB "
      "of which %.2f GiB is free. Of the allocated memory %.2f MiB is allocated by PyTorch, "
      "and %.2f MiB is reserved by PyTorch but unallocated. Free tensors or call "
      "torch.tpu.empty_cache(); the capacity is set by TORCH_TPU_MEMORY_GB.",
      (double)size / mib, a->chip->index, (double)total / gib,
      (double)((int64_t)total - reserved) / gib, (double)allocated / mib,
      (double)(reserved - allocated) / mib);
}

tpu_status_t tpu_block_alloc(tpu_stream_t* stream, size_t bytes, tpu_block_t** out_block) {
  *out_block = NULL;
  if (bytes == 0) return TPU_OK;
  tpu_allocator_t* a = stream->chip->allocator;
  if (bytes > (size_t)1 << 60) return oom_status(a, bytes);
  size_t size = (bytes + ROUND - 1) / ROUND * ROUND;
  int pool = size <= SMALL_LIMIT ? TPU_POOL_SMALL : TPU_POOL_LARGE;
  bool provisional = a->hooks->deferring();
  pthread_mutex_lock(&a->mu);
  if (a->waiting_count) process_waiting(a);
  tpu_block_t* b = take_free(a, pool, stream->index, size);
  if (!b) {
    size_t seg = segment_size(size);
    uint64_t addr = 0;
    tpu_status_t s = TPU_OK;
    if ((uint64_t)a->stats.reserved_bytes[TPU_POOL_ALL].current + seg > a->chip->capacity)
      s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "capacity");
    else
      s = tpu_hal()->memory_map(a->chip->hal, seg, &addr);
    if (s != TPU_OK) {
      /* Retry after returning every cached segment to the chip. */
      tpu_status_free(s);
      a->stats.num_alloc_retries++;
      release_cached(a);
      if ((uint64_t)a->stats.reserved_bytes[TPU_POOL_ALL].current + seg > a->chip->capacity)
        s = tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "capacity");
      else
        s = tpu_hal()->memory_map(a->chip->hal, seg, &addr);
      if (s != TPU_OK) {
        tpu_status_free(s);
        s = oom_status(a, bytes);
        pthread_mutex_unlock(&a->mu);
        return s;
      }
    }
    b = calloc(1, sizeof(*b));
    if (!b) {
      tpu_hal()->memory_unmap(a->chip->hal, addr, seg);
      pthread_mutex_unlock(&a->mu);
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "host out of memory for a block");
    }
    b->owner = a;
    b->addr = addr;
    b->size = seg;
    b->pool = pool;
    b->stream = stream->index;
    stat_update(a->stats.segment, pool, 1);
    stat_update(a->stats.reserved_bytes, pool, (int64_t)seg);
    b->seg_next = a->segments;
    if (b->seg_next) b->seg_next->seg_prev = b;
    a->segments = b;
    observe_segment(a, b, true);
  }
  /* Split off the remainder when it is worth keeping. */
  size_t remaining = b->size - size;
  if (remaining >= (pool == TPU_POOL_SMALL ? ROUND : SMALL_LIMIT)) {
    tpu_block_t* rest = calloc(1, sizeof(*rest));
    if (rest) {
      *rest = (tpu_block_t){.owner = a, .addr = b->addr + size, .size = remaining, .pool = pool,
                            .stream = b->stream, .prev = b, .next = b->next};
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->size = size;
      stat_update(a->stats.inactive_split, pool, 1);
      stat_update(a->stats.inactive_split_bytes, pool, (int64_t)remaining);
      if (!fl_insert(&a->free[pool], rest)) { /* undo the split */
        b->next = rest->next;
        if (rest->next) rest->next->prev = b;
        b->size += remaining;
        stat_update(a->stats.inactive_split, pool, -1);
        stat_update(a->stats.inactive_split_bytes, pool, -(int64_t)remaining);
        free(rest);
      }
    }
  }
  b->allocated = true;
  b->requested = bytes;
  b->stream_uses = 0;
  if (provisional) {
    /* Counted when the graph that writes it is flushed (tpu/defer.h). */
    b->provisional = true;
    b->prov_prev = NULL;
    b->prov_next = a->provisional[b->stream];
    if (b->prov_next) b->prov_next->prov_prev = b;
    a->provisional[b->stream] = b;
  } else {
    count_block(a, b, +1);
  }
  pthread_mutex_unlock(&a->mu);
  a->hooks->allocated(stream, b, bytes);
  prof_memory(a, TPU_PROF_ALLOC, stream->index, b->addr, b->size);
  *out_block = b;
  return TPU_OK;
}

uint64_t tpu_block_addr(const tpu_block_t* block) { return block ? block->addr : 0; }
size_t tpu_block_size(const tpu_block_t* block) { return block ? block->size : 0; }

void tpu_block_record_stream(tpu_block_t* block, tpu_stream_t* stream) {
  if (!block || stream->chip->allocator != block->owner) return;
  pthread_mutex_lock(&block->owner->mu);
  block->stream_uses |= 1u << stream->index;
  pthread_mutex_unlock(&block->owner->mu);
}

/* ---- queries ------------------------------------------------------------------------- */

void tpu_memory_get_stats(tpu_chip_t* chip, tpu_memory_stats_t* out_stats) {
  tpu_allocator_t* a = chip->allocator;
  pthread_mutex_lock(&a->mu);
  /* A query counts live provisional blocks now (they are memory the program
   * holds); it flushes nothing, so it never moves a deferred graph's cuts. */
  for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) commit_locked(a, s);
  *out_stats = a->stats;
  out_stats->max_split_size = -1;
  pthread_mutex_unlock(&a->mu);
}

static void reset_peaks(tpu_stat_t* s, int n) {
  for (int i = 0; i < n; ++i) s[i].peak = s[i].current;
}

static void reset_accumulated(tpu_stat_t* s, int n) {
  for (int i = 0; i < n; ++i) s[i].allocated = s[i].freed = 0;
}

#define STAT_ARRAYS(X)                                                                   \
  X(allocation) X(segment) X(active) X(inactive_split) X(allocated_bytes) X(reserved_bytes) \
  X(active_bytes) X(inactive_split_bytes) X(requested_bytes)

void tpu_memory_reset_peak(tpu_chip_t* chip) {
  tpu_allocator_t* a = chip->allocator;
  pthread_mutex_lock(&a->mu);
#define TPU_X_(f) reset_peaks(a->stats.f, TPU_POOL_COUNT);
  STAT_ARRAYS(TPU_X_)
#undef TPU_X_
  pthread_mutex_unlock(&a->mu);
}

void tpu_memory_reset_accumulated(tpu_chip_t* chip) {
  tpu_allocator_t* a = chip->allocator;
  pthread_mutex_lock(&a->mu);
#define TPU_X_(f) reset_accumulated(a->stats.f, TPU_POOL_COUNT);
  STAT_ARRAYS(TPU_X_)
#undef TPU_X_
  a->stats.num_alloc_retries = a->stats.num_ooms = a->stats.num_sync_all_streams = 0;
  pthread_mutex_unlock(&a->mu);
}

void tpu_memory_empty_cache(tpu_chip_t* chip) {
  tpu_allocator_t* a = chip->allocator;
  if (tpu_hal()->caches_trim) tpu_hal()->caches_trim(a->chip->hal);
  pthread_mutex_lock(&a->mu);
  if (a->waiting_count) process_waiting(a);
  release_cached(a);
  pthread_mutex_unlock(&a->mu);
}

tpu_status_t tpu_memory_snapshot(tpu_chip_t* chip, tpu_segment_info_t* segments,
                                 size_t segment_capacity, tpu_block_info_t* blocks,
                                 size_t block_capacity, size_t* out_segments, size_t* out_blocks) {
  if (!chip || !out_segments || !out_blocks || (segment_capacity && !segments) ||
      (block_capacity && !blocks))
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "memory snapshot: missing argument");
  tpu_allocator_t* a = chip->allocator;
  size_t ns = 0, nb = 0;
  pthread_mutex_lock(&a->mu);
  /* As tpu_memory_get_stats: live provisional blocks count now, so the
   * active blocks add up to memory_allocated. */
  for (int s = 0; s < TPU_STREAMS_PER_CHIP; ++s) commit_locked(a, s);
  for (const tpu_block_t* head = a->segments; head; head = head->seg_next, ++ns) {
    tpu_segment_info_t seg = {.addr = head->addr, .stream = head->stream, .pool = head->pool,
                              .first_block = nb};
    for (const tpu_block_t* b = head; b; b = b->next, ++nb) {
      int32_t state = b->allocated             ? TPU_BLOCK_ACTIVE_ALLOCATED
                      : b->pending_count > 0 ? TPU_BLOCK_ACTIVE_PENDING_FREE
                                             : TPU_BLOCK_INACTIVE;
      seg.total_size += b->size;
      if (state == TPU_BLOCK_ACTIVE_ALLOCATED) {
        seg.allocated_size += b->size;
        seg.requested_size += b->requested;
      }
      if (state != TPU_BLOCK_INACTIVE) seg.active_size += b->size;
      seg.num_blocks++;
      if (nb < block_capacity)
        blocks[nb] = (tpu_block_info_t){.addr = b->addr, .size = b->size, .state = state,
                                        .requested = state == TPU_BLOCK_ACTIVE_ALLOCATED
                                                         ? b->requested : 0};
    }
    if (ns < segment_capacity) segments[ns] = seg;
  }
  pthread_mutex_unlock(&a->mu);
  *out_segments = ns;
  *out_blocks = nb;
  return TPU_OK;
}

void tpu_memory_info(tpu_chip_t* chip, uint64_t* out_free, uint64_t* out_total) {
  tpu_allocator_t* a = chip->allocator;
  pthread_mutex_lock(&a->mu);
  uint64_t reserved = (uint64_t)a->stats.reserved_bytes[TPU_POOL_ALL].current;
  pthread_mutex_unlock(&a->mu);
  *out_total = chip->capacity;
  *out_free = chip->capacity > reserved ? chip->capacity - reserved : 0;
}
