/* sort_algo.h — the ordering algorithms of PyTorch's CPU kernels, ported
 * step for step so results match them exactly, ties included (internal to
 * sort.c and its test).
 *
 * PyTorch's CPU sort (stable=False), topk, median and mode call libstdc++'s
 * std::sort, std::partial_sort and std::nth_element; which of several equal
 * keys lands where depends on every comparison and swap those algorithms
 * make. SA_DEFINE(P, T, LESS) generates, for an element type T (a key and
 * its index) and a strict weak order LESS(a, b) on T values:
 *   P_sort(a, n)               introsort (median-of-3 pivot, unguarded
 *                              partition, heap sort past 2*lg(n) levels,
 *                              final insertion sort with threshold 16),
 *   P_partial_sort(a, m, n)    heap select + sort_heap,
 *   P_nth_element(a, nth, n)   introselect (insertion sort below 4),
 *   P_stable_sort(a, n, tmp)   a merge sort (a stable order is unique, so
 *                              any stable algorithm gives std::stable_sort's
 *                              result); tmp holds n elements.
 * The shapes of the loops follow libstdc++'s bits/stl_algo.h and stl_heap.h.
 */
#ifndef TPU_KERNELS_SORT_ALGO_H_
#define TPU_KERNELS_SORT_ALGO_H_

#include <stdint.h>
#include <string.h>

#define SA_LG(n) (63 - __builtin_clzll((unsigned long long)(n)))
#define SA_THRESHOLD 16

#define SA_DEFINE(P, T, LESS)                                                                 \
  static inline void P##_swap(T* a, T* b) {                                                   \
    T t = *a;                                                                                 \
    *a = *b;                                                                                  \
    *b = t;                                                                                   \
  }                                                                                           \
  static inline void P##_linear_insert(T* last) {                                             \
    T val = *last;                                                                            \
    T* next = last - 1;                                                                       \
    while (LESS(val, (*next))) {                                                              \
      *last = *next;                                                                          \
      last = next;                                                                            \
      --next;                                                                                 \
    }                                                                                         \
    *last = val;                                                                              \
  }                                                                                           \
  static inline void P##_insertion_sort(T* first, T* last) {                                  \
    if (first == last) return;                                                                \
    for (T* i = first + 1; i != last; ++i) {                                                  \
      if (LESS((*i), (*first))) {                                                             \
        T val = *i;                                                                           \
        memmove(first + 1, first, (size_t)(i - first) * sizeof(T));                          \
        *first = val;                                                                         \
      } else {                                                                                \
        P##_linear_insert(i);                                                                 \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
  static inline void P##_adjust_heap(T* first, int64_t hole, int64_t len, T value) {          \
    const int64_t top = hole;                                                                 \
    int64_t child = hole;                                                                     \
    while (child < (len - 1) / 2) {                                                           \
      child = 2 * (child + 1);                                                                \
      if (LESS(first[child], first[child - 1])) child--;                                      \
      first[hole] = first[child];                                                             \
      hole = child;                                                                           \
    }                                                                                         \
    if ((len & 1) == 0 && child == (len - 2) / 2) {                                           \
      child = 2 * (child + 1);                                                                \
      first[hole] = first[child - 1];                                                         \
      hole = child - 1;                                                                       \
    }                                                                                         \
    int64_t parent = (hole - 1) / 2;                                                          \
    while (hole > top && LESS(first[parent], value)) {                                        \
      first[hole] = first[parent];                                                            \
      hole = parent;                                                                          \
      parent = (hole - 1) / 2;                                                                \
    }                                                                                         \
    first[hole] = value;                                                                      \
  }                                                                                           \
  static inline void P##_make_heap(T* first, T* last) {                                       \
    const int64_t len = last - first;                                                         \
    if (len < 2) return;                                                                      \
    for (int64_t parent = (len - 2) / 2;; --parent) {                                         \
      P##_adjust_heap(first, parent, len, first[parent]);                                     \
      if (parent == 0) return;                                                                \
    }                                                                                         \
  }                                                                                           \
  static inline void P##_pop_heap(T* first, T* last, T* result) {                             \
    T value = *result;                                                                        \
    *result = *first;                                                                         \
    P##_adjust_heap(first, 0, last - first, value);                                           \
  }                                                                                           \
  static inline void P##_heap_select(T* first, T* middle, T* last) {                          \
    P##_make_heap(first, middle);                                                             \
    for (T* i = middle; i < last; ++i)                                                        \
      if (LESS((*i), (*first))) P##_pop_heap(first, middle, i);                               \
  }                                                                                           \
  static inline void P##_sort_heap(T* first, T* last) {                                       \
    while (last - first > 1) {                                                                \
      --last;                                                                                 \
      P##_pop_heap(first, last, last);                                                        \
    }                                                                                         \
  }                                                                                           \
  static inline void P##_median_to_first(T* result, T* a, T* b, T* c) {                       \
    if (LESS((*a), (*b))) {                                                                   \
      if (LESS((*b), (*c))) P##_swap(result, b);                                              \
      else if (LESS((*a), (*c))) P##_swap(result, c);                                         \
      else P##_swap(result, a);                                                               \
    } else if (LESS((*a), (*c))) {                                                            \
      P##_swap(result, a);                                                                    \
    } else if (LESS((*b), (*c))) {                                                            \
      P##_swap(result, c);                                                                    \
    } else {                                                                                  \
      P##_swap(result, b);                                                                    \
    }                                                                                         \
  }                                                                                           \
  static inline T* P##_partition(T* first, T* last, T* pivot) {                               \
    for (;;) {                                                                                \
      while (LESS((*first), (*pivot))) ++first;                                               \
      --last;                                                                                 \
      while (LESS((*pivot), (*last))) --last;                                                 \
      if (!(first < last)) return first;                                                      \
      P##_swap(first, last);                                                                  \
      ++first;                                                                                \
    }                                                                                         \
  }                                                                                           \
  static inline T* P##_partition_pivot(T* first, T* last) {                                   \
    T* mid = first + (last - first) / 2;                                                      \
    P##_median_to_first(first, first + 1, mid, last - 1);                                     \
    return P##_partition(first + 1, last, first);                                             \
  }                                                                                           \
  static void P##_introsort_loop(T* first, T* last, int64_t depth) {                          \
    while (last - first > SA_THRESHOLD) {                                                     \
      if (depth == 0) {                                                                       \
        P##_heap_select(first, last, last);                                                   \
        P##_sort_heap(first, last);                                                           \
        return;                                                                               \
      }                                                                                       \
      --depth;                                                                                \
      T* cut = P##_partition_pivot(first, last);                                              \
      P##_introsort_loop(cut, last, depth);                                                   \
      last = cut;                                                                             \
    }                                                                                         \
  }                                                                                           \
  static __attribute__((unused)) void P##_sort(T* a, int64_t n) {                             \
    if (n < 2) return;                                                                        \
    P##_introsort_loop(a, a + n, 2 * (int64_t)SA_LG(n));                                      \
    if (n > SA_THRESHOLD) {                                                                   \
      P##_insertion_sort(a, a + SA_THRESHOLD);                                                \
      for (T* i = a + SA_THRESHOLD; i != a + n; ++i) P##_linear_insert(i);                    \
    } else {                                                                                  \
      P##_insertion_sort(a, a + n);                                                           \
    }                                                                                         \
  }                                                                                           \
  static __attribute__((unused)) void P##_partial_sort(T* a, int64_t m, int64_t n) {          \
    P##_heap_select(a, a + m, a + n);                                                         \
    P##_sort_heap(a, a + m);                                                                  \
  }                                                                                           \
  static __attribute__((unused)) void P##_nth_element(T* a, int64_t nth, int64_t n) {         \
    T *first = a, *last = a + n;                                                              \
    if (n == 0 || nth == n) return;                                                           \
    int64_t depth = 2 * (int64_t)SA_LG(n);                                                    \
    while (last - first > 3) {                                                                \
      if (depth == 0) {                                                                       \
        P##_heap_select(first, a + nth + 1, last);                                            \
        P##_swap(first, a + nth);                                                             \
        return;                                                                               \
      }                                                                                       \
      --depth;                                                                                \
      T* cut = P##_partition_pivot(first, last);                                              \
      if (cut <= a + nth) first = cut;                                                        \
      else last = cut;                                                                        \
    }                                                                                         \
    P##_insertion_sort(first, last);                                                          \
  }                                                                                           \
  static __attribute__((unused)) void P##_stable_sort(T* a, int64_t n, T* tmp) {              \
    const int64_t run = 32;                                                                   \
    for (int64_t s = 0; s < n; s += run) {                                                    \
      int64_t e = s + run < n ? s + run : n;                                                  \
      for (int64_t i = s + 1; i < e; ++i) P##_linear_insert_guarded(a + s, a + i);            \
    }                                                                                         \
    T *src = a, *dst = tmp;                                                                   \
    for (int64_t w = run; w < n; w *= 2) {                                                    \
      for (int64_t s = 0; s < n; s += 2 * w) {                                                \
        int64_t m = s + w < n ? s + w : n, e = s + 2 * w < n ? s + 2 * w : n;                 \
        int64_t i = s, j = m, k = s;                                                          \
        while (i < m && j < e) dst[k++] = LESS(src[j], src[i]) ? src[j++] : src[i++];         \
        while (i < m) dst[k++] = src[i++];                                                    \
        while (j < e) dst[k++] = src[j++];                                                    \
      }                                                                                       \
      T* t = src;                                                                             \
      src = dst;                                                                              \
      dst = t;                                                                                \
    }                                                                                         \
    if (src != a) memcpy(a, src, (size_t)n * sizeof(T));                                      \
  }

/* A stable insertion step bounded by `lo` (for the merge sort's runs). */
#define SA_DEFINE_GUARDED(P, T, LESS)                                        \
  static inline void P##_linear_insert_guarded(T* lo, T* last) {             \
    T val = *last;                                                           \
    while (last > lo && LESS(val, last[-1])) {                               \
      *last = last[-1];                                                      \
      --last;                                                                \
    }                                                                        \
    *last = val;                                                             \
  }

#define SA_ISNAN(x) ((x) != (x))
/* Ascending with NaN largest; descending with NaN first (KeyValueCompAsc/Desc). */
#define SA_ASC(a, b) ((!SA_ISNAN((a).k) && SA_ISNAN((b).k)) || (a).k < (b).k)
#define SA_DESC(a, b) ((SA_ISNAN((a).k) && !SA_ISNAN((b).k)) || (a).k > (b).k)
/* mode's plain `<`. */
#define SA_LT(a, b) ((a).k < (b).k)
/* median.dim: value, then index; nanmedian.dim: NaN after every number. */
#define SA_MED(a, b) ((a).k < (b).k || ((a).k == (b).k && (a).i < (b).i))
#define SA_NANMED(a, b) (SA_MED(a, b) || (SA_ISNAN((b).k) && !SA_ISNAN((a).k)))

#define SA_ALL(P, T, LESS)      \
  SA_DEFINE_GUARDED(P, T, LESS) \
  SA_DEFINE(P, T, LESS)

#endif /* TPU_KERNELS_SORT_ALGO_H_ */
