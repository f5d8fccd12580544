/* attach.h — one attachment a graph may carry for whoever runs it (the
 * fusion interpreter's per-node plans, fusion.h), internal to the runtime:
 * `data` with the function that releases it, which also names its kind.
 * The graph takes the reference and releases it with itself (or when
 * another is attached); a graph has none when created. */
#ifndef TPU_IR_ATTACH_H_
#define TPU_IR_ATTACH_H_

#include "tpu/ir.h"

void tpu_graph_attach(tpu_graph_t* graph, const void* data, void (*release)(const void*));
/* The data if it was attached with `release`, else NULL (borrowed, valid
 * while the graph lives and nothing else is attached). */
const void* tpu_graph_attachment(const tpu_graph_t* graph, void (*release)(const void*));

#endif /* TPU_IR_ATTACH_H_ */
