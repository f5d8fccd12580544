/* fuzz_node.h — one fuzz input run through the public C API as the bridge
 * drives it.
 *
 * tpu_fuzz_node decodes `data` into a node of some op of the op table
 * (tpu/ops.h) — inputs that are views, scalars or absent, with dtypes, ranks,
 * sizes and strides in and out of range; attrs of every kind, with values at
 * the edges — and runs it in the bridge's order: tpu_op_check before the
 * outputs are set, tpu_op_infer, device memory for the inferred outputs,
 * tpu_op_check, tpu_stream_submit_node, tpu_stream_synchronize (rows without
 * a shape function get outputs of any shape, as PyTorch's meta kernels might
 * give the bridge). Every call
 * must return a status; the harness frees what it allocated. Views always
 * lie inside device memory it allocated (what the headers require of a
 * caller), except views whose sizes overflow, which no memory can hold.
 *
 * Used by the libFuzzer target (fuzz_main.c) and by the plain C tests, which
 * replay the saved corpus (runtime/fuzz/corpus/) as regression inputs: each
 * input the fuzzer once failed on, named for its bug, and seed-<op>, the
 * smallest input found that runs <op> to its end (the test command's bounded
 * fuzzing run starts from them all). TPU_FUZZ_VERBOSE=1 prints the decoded
 * node; TPU_FUZZ_STATS=1 prints "ran <op>" for each node that ran.
 */
#ifndef TPU_FUZZ_NODE_H_
#define TPU_FUZZ_NODE_H_

#include <stddef.h>
#include <stdint.h>

/* Runs one input; returns 0 (libFuzzer's convention). Aborts only through a
 * sanitizer or a crash: those are the bugs it looks for. */
int tpu_fuzz_node(const uint8_t* data, size_t size);

#endif /* TPU_FUZZ_NODE_H_ */
