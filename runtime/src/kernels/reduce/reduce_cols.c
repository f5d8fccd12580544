/* reduce_cols.c — the reduction family's column-sum fast path: sum and mean
 * of float32 / bfloat16 / float16 tensors over a contiguous block of dims
 * followed by at least one kept dim (bias gradients: sum over the token dims
 * of [tokens, features]), written in the input's dtype.
 *
 * The contiguous input is seen as [O, R, C]: O outer (kept) rows, R reduced
 * rows, C kept columns. A work item takes one outer row, a tile of up to
 * TILE_MAX columns and a chunk of reduced rows, and walks those rows in
 * memory order, eight rows per pass: their segments are added pairwise in
 * float (vectorised), and the block sums added into a vector of double
 * partial sums (in L1). Float rounding spans three additions, so the result
 * is at least as accurate as PyTorch CPU's float32 cascade sums. bfloat16
 * is widened to float inside the loop; float16 is converted (tpu_convert)
 * eight rows at a time first. The tiling and the row chunks depend only on
 * the shape, and chunk sums are combined in chunk order: results do not
 * depend on the thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce/reduce.h"
#include "kernels/common/vmath.h"

#define TILE_MAX 1024     /* columns per work item */
/* Elements a task takes: a column sum of fewer runs on one thread. A task
 * of 128 Ki elements is ~5 us, about what handing one to a pool worker
 * costs while the stream's submitting thread holds the other core (float32
 * sum(0) of 512x384, a stream of calls: 7.7 us on one thread, 9.8 on two;
 * of 512x1024: 43 and 24). */
#define CHUNK_WORK 131072
#define MAX_CHUNKS 64
#define FEW_ITEMS 8       /* split rows into chunks below this many (outer, tile) items */

typedef struct cols_job {
  const char* in;
  char* out;
  tpu_dtype_t dtype;
  int64_t O, R, C;
  int64_t tiles, width;   /* column tiles per outer row, and their width */
  int64_t chunks, rows;   /* row chunks per (outer, tile), and their rows */
  double scale;           /* 1, or 1 / R for mean */
  double* partial;        /* [O * tiles][chunks][width] when chunks > 1 */
} cols_job_t;

/* acc[j] += sum of rows [r0, r1) of x (row stride C), j < cnt: eight rows
 * at a time added pairwise in float (three roundings deep), the result
 * added into the double sums; leftover rows one at a time in double. */
VM_SIMD_CLONES static void sum_rows_f32(const float* restrict x, int64_t C, int64_t r0, int64_t r1,
                                        int64_t cnt, double* restrict acc) {
  int64_t r = r0;
  for (; r + 8 <= r1; r += 8) {
    const float* restrict p = x + r * C;
    for (int64_t j = 0; j < cnt; ++j) {
      float s01 = p[j] + p[C + j], s23 = p[2 * C + j] + p[3 * C + j];
      float s45 = p[4 * C + j] + p[5 * C + j], s67 = p[6 * C + j] + p[7 * C + j];
      acc[j] += (double)((s01 + s23) + (s45 + s67));
    }
  }
  for (; r < r1; ++r) {
    const float* restrict a = x + r * C;
    for (int64_t j = 0; j < cnt; ++j) acc[j] += (double)a[j];
  }
}

/* bfloat16 bits to float: the high half of a float32. */
static inline float bf16_at(const uint16_t* p, int64_t i) {
  uint32_t b = (uint32_t)p[i] << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* sum_rows_f32 for bfloat16 rows, widened to float on the fly. */
VM_SIMD_CLONES static void sum_rows_bf16(const uint16_t* restrict x, int64_t C, int64_t r0,
                                         int64_t r1, int64_t cnt, double* restrict acc) {
  int64_t r = r0;
  for (; r + 8 <= r1; r += 8) {
    const uint16_t* restrict p = x + r * C;
    for (int64_t j = 0; j < cnt; ++j) {
      float s01 = bf16_at(p, j) + bf16_at(p, C + j);
      float s23 = bf16_at(p, 2 * C + j) + bf16_at(p, 3 * C + j);
      float s45 = bf16_at(p, 4 * C + j) + bf16_at(p, 5 * C + j);
      float s67 = bf16_at(p, 6 * C + j) + bf16_at(p, 7 * C + j);
      acc[j] += (double)((s01 + s23) + (s45 + s67));
    }
  }
  for (; r < r1; ++r)
    for (int64_t j = 0; j < cnt; ++j) acc[j] += (double)bf16_at(x + r * C, j);
}

/* float16: each row segment is converted to float first. */
static void sum_rows_half(const char* x, tpu_dtype_t dt, int64_t C, int64_t r0, int64_t r1,
                          int64_t cnt, double* restrict acc) {
  float row[8 * TILE_MAX];
  size_t es = tpu_dtype_size(dt);
  for (int64_t r = r0; r < r1; r += 8) {
    int64_t k = r1 - r < 8 ? r1 - r : 8;
    if (cnt == C) /* whole rows: one conversion for the k rows */
      tpu_convert(row, TPU_DTYPE_F32, 1, x + (size_t)(r * C) * es, dt, 1, k * cnt);
    else
      for (int64_t i = 0; i < k; ++i)
        tpu_convert(row + i * cnt, TPU_DTYPE_F32, 1, x + (size_t)((r + i) * C) * es, dt, 1, cnt);
    sum_rows_f32(row, cnt, 0, k, cnt, acc);
  }
}

/* Columns of tile `tile` of outer row o: first column and count. */
static int64_t tile_cols(const cols_job_t* jb, int64_t tile, int64_t* c0) {
  *c0 = tile * jb->width;
  return jb->C - *c0 < jb->width ? jb->C - *c0 : jb->width;
}

static void write_out(const cols_job_t* jb, int64_t o, int64_t c0, int64_t cnt, double* acc) {
  for (int64_t j = 0; j < cnt; ++j) acc[j] *= jb->scale;
  size_t es = tpu_dtype_size(jb->dtype);
  tpu_convert(jb->out + (size_t)(o * jb->C + c0) * es, jb->dtype, 1, acc, TPU_DTYPE_F64, 1, cnt);
}

/* Items are (outer row, tile, chunk), chunk fastest. */
static void cols_work(void* arg, int64_t begin, int64_t end) {
  const cols_job_t* jb = (const cols_job_t*)arg;
  double local[TILE_MAX];
  size_t es = tpu_dtype_size(jb->dtype);
  for (int64_t item = begin; item < end; ++item) {
    int64_t ot = item / jb->chunks, c = item % jb->chunks;
    int64_t o = ot / jb->tiles, c0 = 0;
    int64_t cnt = tile_cols(jb, ot % jb->tiles, &c0);
    int64_t r0 = c * jb->rows, r1 = r0 + jb->rows < jb->R ? r0 + jb->rows : jb->R;
    double* acc = jb->chunks > 1 ? jb->partial + item * jb->width : local;
    memset(acc, 0, (size_t)cnt * sizeof(double));
    const char* x = jb->in + (size_t)(o * jb->R * jb->C + c0) * es;
    if (jb->dtype == TPU_DTYPE_F32)
      sum_rows_f32((const float*)x, jb->C, r0, r1, cnt, acc);
    else if (jb->dtype == TPU_DTYPE_BF16)
      sum_rows_bf16((const uint16_t*)x, jb->C, r0, r1, cnt, acc);
    else
      sum_rows_half(x, jb->dtype, jb->C, r0, r1, cnt, acc);
    if (jb->chunks == 1) write_out(jb, o, c0, cnt, acc);
  }
}

/* Adds each (outer, tile)'s chunk sums in chunk order and writes them. */
static void cols_combine(void* arg, int64_t begin, int64_t end) {
  const cols_job_t* jb = (const cols_job_t*)arg;
  for (int64_t ot = begin; ot < end; ++ot) {
    int64_t c0 = 0, cnt = tile_cols(jb, ot % jb->tiles, &c0);
    double* acc = jb->partial + ot * jb->chunks * jb->width;
    for (int64_t c = 1; c < jb->chunks; ++c)
      for (int64_t j = 0; j < cnt; ++j) acc[j] += acc[c * jb->width + j];
    write_out(jb, ot / jb->tiles, c0, cnt, acc);
  }
}

bool tpu_reduce_cols_applies(const reduce_args_t* a, const tpu_view_t* out) {
  const tpu_view_t* in = a->in;
  tpu_dtype_t dt = in->dtype;
  if (a->impl->acc != RACC_SUM || (a->impl->out != ROUT_VALUE && a->impl->out != ROUT_MEAN))
    return false;
  if (dt != TPU_DTYPE_F32 && dt != TPU_DTYPE_BF16 && dt != TPU_DTYPE_F16) return false;
  if (out->dtype != dt || !tpu_view_is_contiguous(in) || !tpu_view_is_contiguous(out))
    return false;
  if (tpu_view_numel(in) == 0) return false;
  /* the reduced dims (of size > 1) form one block [first, last] of dims
   * (size-1 kept dims inside it do not matter), with a kept dim after it */
  int32_t first = -1, last = -1;
  for (int32_t d = 0; d < in->ndim; ++d)
    if (a->reduced[d] && in->sizes[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  for (int32_t d = first; first >= 0 && d <= last; ++d)
    if (!a->reduced[d] && in->sizes[d] != 1) return false;
  if (first < 0) return false;
  int64_t C = 1;
  for (int32_t d = last + 1; d < in->ndim; ++d) C *= in->sizes[d];
  return C >= 16;
}

tpu_status_t tpu_reduce_cols(const reduce_args_t* a, const tpu_view_t* out) {
  const tpu_view_t* in = a->in;
  int32_t first = -1, last = -1;
  for (int32_t d = 0; d < in->ndim; ++d)
    if (a->reduced[d] && in->sizes[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  cols_job_t jb;
  memset(&jb, 0, sizeof(jb));
  jb.O = jb.R = jb.C = 1;
  for (int32_t d = 0; d < in->ndim; ++d)
    *(d < first ? &jb.O : d <= last ? &jb.R : &jb.C) *= in->sizes[d];
  if (jb.O * jb.C == 0) return TPU_OK;
  jb.in = (const char*)tpu_view_ptr(in);
  jb.out = (char*)tpu_view_ptr(out);
  jb.dtype = in->dtype;
  jb.scale = a->impl->out == ROUT_MEAN ? 1.0 / (double)jb.R : 1.0;
  jb.tiles = (jb.C + TILE_MAX - 1) / TILE_MAX;
  jb.width = (jb.C + jb.tiles - 1) / jb.tiles;
  jb.chunks = 1;
  if (jb.O * jb.tiles < FEW_ITEMS) {
    int64_t c = jb.R * jb.width / CHUNK_WORK;
    jb.chunks = c < 1 ? 1 : c > MAX_CHUNKS ? MAX_CHUNKS : c;
    if (jb.chunks > jb.R) jb.chunks = jb.R;
  }
  jb.rows = (jb.R + jb.chunks - 1) / jb.chunks;
  jb.rows = (jb.rows + 7) / 8 * 8; /* whole blocks of eight rows */
  jb.chunks = (jb.R + jb.rows - 1) / jb.rows;
  int64_t items = jb.O * jb.tiles * jb.chunks;
  int64_t work = jb.width * jb.rows;
  int64_t grain = work >= CHUNK_WORK ? 1 : CHUNK_WORK / (work > 0 ? work : 1);
  if (jb.chunks == 1) {
    tpu_parallel_for(items, grain, cols_work, &jb);
    return TPU_OK;
  }
  jb.partial = (double*)malloc(sizeof(double) * (size_t)(items * jb.width));
  if (!jb.partial) TPU_KERNEL_FAIL(TPU_CODE_OUT_OF_MEMORY, "no host memory for column sums");
  tpu_parallel_for(items, grain, cols_work, &jb);
  tpu_parallel_for(jb.O * jb.tiles, 64, cols_combine, &jb);
  free(jb.partial);
  return TPU_OK;
}
