/* mxu_pack.h — the matrix unit's weight cache (internal; mxu_pack.c).
 *
 * A brgemm kernel reads its B operand in a blocked layout (VNNI pairs for
 * bfloat16); handed a plain matrix, it re-lays it out on every call, which
 * costs up to as much as the product itself for a 128-row GEMM against a
 * GPT-2-sized weight. The unit therefore always multiplies a 2-D B (a
 * weight, or anything else of that form) in the blocked layout, and this
 * cache keeps the blocked copy of a B that GEMMs read again unchanged, so a
 * decode or evaluation loop lays each weight out once.
 *
 * Which layout a GEMM reads: float32 the blocked one (from the cache, or
 * laid out into scratch for this call), except a transposed B (columns
 * contiguous: a Linear's weight read as W.t()) seen for the first time,
 * which is read as it is: a weight an optimizer step just changed costs a
 * layout per step otherwise, and oneDNN's plain kernel on a transposed B is
 * as fast as the blocked one or faster (256x384 @ 384x384 with a new B each
 * call: 333 against 402 us, 64x4096 @ 4096x4096 8.0 against 14.2 ms), where
 * on a row-major B it can be 2.5x slower (1024x768 @ 768x3072). oneDNN's
 * float32 kernels on plain and blocked B give the same bits
 * (tests/test_weight_cache.py checks a weight's first product against later
 * ones).
 * bfloat16 and int8 read a B seen for the first time as it is (plain), and
 * the blocked form from the second sighting on (int8's carries the s8 x s8
 * compensation; oneDNN 2.6's reorder into it was slow: 17-120 ms for a
 * 768x3072 weight on the loaded 2-core machine, once per cached weight): laying out a one-shot B (an
 * autocast copy of a weight, a weight an optimizer step just changed, an
 * activation) costs up to as much as the AMX product, so the plain kernel
 * is faster for it. oneDNN's plain-B and blocked-B bfloat16 kernels may
 * block K differently (seen at k = 3072), so a weight's first product can
 * differ from later ones in the last bit of some sums.
 *
 * Keys: B's view (address, dtype, sizes, strides) and the layout the kernel
 * asked for. A view is cached on its second sighting, so one-shot operands
 * (activations, gradients) never fill it.
 *
 * Validity: an entry is dropped when anything may write the bytes it
 * covers. The host driver reports each command's writes when the command
 * ends (tpu_weight_cache_note_write: an exec's node outputs, a copy's
 * destination; tpu_weight_cache_note_write_all after a host function, which
 * may write anything: collectives), the allocator reports frees, and a GEMM
 * neither uses nor fills the cache for a B that the graph it runs in writes
 * (mxu_gemm_t.graph). So an entry exists only while no command since its
 * packing has written its bytes.
 *
 * Bounds: TORCH_TPU_WEIGHT_CACHE_MB (default 1024) of packed data and 4,096
 * entries; beyond them the least recently used entries are evicted and
 * counted (tpu_mxu_info_t). Thread-safe: one mutex, held for bookkeeping
 * only (never while packing).
 */
#ifndef TPU_KERNELS_MXU_PACK_H_
#define TPU_KERNELS_MXU_PACK_H_

#include <oneapi/dnnl/dnnl.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tpu/ir.h"
#include "tpu/status.h"

/* A blocked copy of a B operand; reference-counted (the cache holds one
 * reference while it lists it). */
typedef struct mxu_packed {
  dnnl_memory_desc_t md; /* its layout (owned) */
  void* data;            /* owned */
  atomic_int refs;
} mxu_packed_t;

/* The blocked form of `b` (a 3-D view whose batch is 1 or broadcast) in
 * layout `want`: with `cacheable`, from the cache, or laid out now from `b`
 * (plain layout `plain`) by a reorder on `stream` and kept when the view
 * was seen before; without, laid out for this GEMM only. *out_packed is a new reference
 * (mxu_packed_release). OUT_OF_MEMORY or INTERNAL on failure. The reorder
 * runs on the calling thread's OpenMP setting: one thread for a GEMM split
 * over the pool, the team's size with the pool claimed. */
tpu_status_t mxu_pack_get(const tpu_view_t* b, const_dnnl_memory_desc_t plain,
                          const_dnnl_memory_desc_t want, bool cacheable, dnnl_engine_t engine,
                          dnnl_stream_t stream, mxu_packed_t** out_packed);

/* Fills `data` (laid out as `want`) from `b`: the way mxu_pack_get_with
 * lays out a B it does not find cached (ctx: the caller's). */
typedef tpu_status_t (*mxu_layout_fn)(void* ctx, const tpu_view_t* b,
                                      const_dnnl_memory_desc_t want, void* data);

/* mxu_pack_get with the laying out left to `layout` (a split over the
 * compute pool, say): the cache's lookup, sizing and storing as above. */
tpu_status_t mxu_pack_get_with(const tpu_view_t* b, const_dnnl_memory_desc_t want, bool cacheable,
                               mxu_layout_fn layout, void* ctx, mxu_packed_t** out_packed);

/* One oneDNN reorder from `from_data` (laid out as `from_md`) to `to_data`
 * (`to_md`, which may be a submemory of a larger layout), run on `stream`
 * and waited for. OUT_OF_MEMORY or INTERNAL on failure. */
tpu_status_t mxu_pack_reorder(const_dnnl_memory_desc_t from_md, void* from_data,
                              const_dnnl_memory_desc_t to_md, void* to_data, dnnl_engine_t engine,
                              dnnl_stream_t stream);

/* A new reference to `packed` (returned). */
mxu_packed_t* mxu_packed_retain(mxu_packed_t* packed);
void mxu_packed_release(mxu_packed_t* packed);

/* True when `b` was seen before (listed, packed or not); else lists it as
 * seen now. For the bfloat16 choice of layout above. */
bool mxu_pack_seen(const tpu_view_t* b);

/* True when `b` was seen before; lists nothing. */
bool mxu_pack_peek(const tpu_view_t* b);

#endif /* TPU_KERNELS_MXU_PACK_H_ */
