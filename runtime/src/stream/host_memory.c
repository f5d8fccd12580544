/* host_memory.c — pinned host memory: page-aligned host buffers the runtime
 * knows about, so copies to and from them can run asynchronously. Each
 * buffer is reference counted: a queued copy holds a reference, so freeing
 * a buffer while a copy is in flight defers the release until it has run. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "stream/internal.h"

typedef struct pinned {
  uintptr_t start;
  size_t size;
  int refs;
} pinned_t;

static struct {
  pthread_mutex_t mu;
  pinned_t* items; /* sorted by start */
  int count, capacity;
} g_pinned = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

/* Index of the buffer containing p, or -1. Caller holds the lock. */
static int find(uintptr_t p) {
  int lo = 0, hi = g_pinned.count - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    pinned_t* b = &g_pinned.items[mid];
    if (p < b->start) hi = mid - 1;
    else if (p >= b->start + (b->size ? b->size : 1)) lo = mid + 1;
    else return mid;
  }
  return -1;
}

tpu_status_t tpu_host_alloc(size_t bytes, void** out_ptr) {
  *out_ptr = NULL;
  void* p = NULL;
  if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0)
    return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "cannot pin %zu bytes of host memory", bytes);
  pthread_mutex_lock(&g_pinned.mu);
  if (g_pinned.count == g_pinned.capacity) {
    int cap = g_pinned.capacity ? g_pinned.capacity * 2 : 64;
    pinned_t* items = realloc(g_pinned.items, sizeof(*items) * (size_t)cap);
    if (!items) {
      pthread_mutex_unlock(&g_pinned.mu);
      free(p);
      return tpu_status_make(TPU_CODE_OUT_OF_MEMORY, "pinned-memory table is full");
    }
    g_pinned.items = items;
    g_pinned.capacity = cap;
  }
  int i = 0;
  while (i < g_pinned.count && g_pinned.items[i].start < (uintptr_t)p) i++;
  memmove(&g_pinned.items[i + 1], &g_pinned.items[i], sizeof(pinned_t) * (size_t)(g_pinned.count - i));
  g_pinned.items[i] = (pinned_t){(uintptr_t)p, bytes, 1};
  g_pinned.count++;
  pthread_mutex_unlock(&g_pinned.mu);
  *out_ptr = p;
  return TPU_OK;
}

static void unref(uintptr_t p) {
  pthread_mutex_lock(&g_pinned.mu);
  int i = find(p);
  void* to_free = NULL;
  if (i >= 0 && --g_pinned.items[i].refs == 0) {
    to_free = (void*)g_pinned.items[i].start;
    memmove(&g_pinned.items[i], &g_pinned.items[i + 1],
            sizeof(pinned_t) * (size_t)(g_pinned.count - i - 1));
    g_pinned.count--;
  }
  pthread_mutex_unlock(&g_pinned.mu);
  free(to_free);
}

void tpu_host_free(void* ptr) {
  if (ptr) unref((uintptr_t)ptr);
}

bool tpu_host_is_pinned(const void* ptr) {
  pthread_mutex_lock(&g_pinned.mu);
  bool found = find((uintptr_t)ptr) >= 0;
  pthread_mutex_unlock(&g_pinned.mu);
  return found;
}

static void release_after_copy(void* arg) { unref((uintptr_t)arg); }

tpu_status_t tpu_stream_copy_pinned(tpu_stream_t* stream, tpu_copy_kind_t kind, uint64_t dst,
                                    uint64_t src, size_t bytes) {
  uintptr_t host = kind == TPU_COPY_H2D ? (uintptr_t)src : (uintptr_t)dst;
  pthread_mutex_lock(&g_pinned.mu);
  int i = find(host);
  uintptr_t start = 0;
  if (i >= 0) {
    g_pinned.items[i].refs++;
    start = g_pinned.items[i].start;
  }
  pthread_mutex_unlock(&g_pinned.mu);
  if (i < 0)
    return tpu_status_make(TPU_CODE_INVALID_ARGUMENT, "host pointer is not pinned memory");
  tpu_status_t s = tpu_stream_copy_queued(stream, kind, dst, src, bytes, false);
  if (s == TPU_OK) s = tpu_stream_host_fn(stream, release_after_copy, (void*)start);
  if (s != TPU_OK) {
    /* Not queued: wait for what is, then drop our reference. */
    tpu_status_free(tpu_stream_synchronize(stream));
    unref(start);
  }
  return s;
}
