/* flush_memo.h — the host driver's memo of repeated recordings (private to
 * src/hal/): a loop flushes the same recording (but for addresses) flush
 * after flush, and what the front end made of it the first time is reused
 * (flush_memo.c describes the signature). One per host queue. */
#ifndef TPU_HAL_FLUSH_MEMO_H_
#define TPU_HAL_FLUSH_MEMO_H_

#include <stdbool.h>
#include <stdint.h>

#include "tpu/ir.h"

struct tpu_program;
struct tpu_node_plans;

/* A queue's last compiled recordings: each recording's signature and what
 * the fusion compiler made of it (flush_memo.c). Used only by the queue's
 * executable_prepare calls, which the HAL serialises per queue. */
#define TPU_MEMO_ENTRIES 8
typedef struct tpu_flush_memo_entry {
  uint64_t* key;                 /* the recording's signature */
  int64_t key_len, key_cap;
  uint64_t hash;                 /* of the key */
  int32_t* order;                /* the scheduled order, or NULL when unmoved */
  int32_t order_len;
  struct tpu_program* program;   /* retained, or NULL: an empty entry */
  struct tpu_node_plans* plans;  /* the nodes' kernel plans (fusion.h), owned; NULL: none */
  int64_t extra;                 /* the memory estimate (host_compile.c's peak_extra) */
  uint64_t used;                 /* when last matched or stored (LRU) */
  uint64_t generation;           /* the program cache's when stored: a clear drops it */
  uint64_t stamp;                /* which store filled it (a raw slot names it so) */
} tpu_flush_memo_entry_t;

/* A way to an entry by a recording's raw signature (its addresses as they
 * are, not made canonical), kept when that recording was found or stored:
 * the placements a loop cycles through each get one. Valid while the entry
 * holds what it held then (the same stamp and cache generation). */
#define TPU_MEMO_RAW 16
typedef struct tpu_flush_memo_raw {
  uint64_t* key; /* the raw signature, or NULL: an empty slot */
  int64_t key_len, key_cap;
  uint64_t hash;
  int32_t entry;  /* index into entries */
  uint64_t stamp; /* the entry's when filed */
  uint64_t used;  /* when last matched or filed (LRU) */
} tpu_flush_memo_raw_t;

typedef struct tpu_flush_memo {
  tpu_flush_memo_entry_t entries[TPU_MEMO_ENTRIES];
  uint64_t* next;                /* the signature being compared */
  int64_t next_len, next_cap;
  uint64_t next_hash;
  bool next_valid;               /* built completely (no allocation failed) */
  uint64_t clock;
  uint64_t stores;               /* entries filled so far (their stamps) */
  tpu_flush_memo_raw_t raw_slots[TPU_MEMO_RAW];
  uint64_t* raw;                 /* the last lookup's raw signature, kept */
  int64_t raw_len, raw_cap;      /* (raw_valid) until its entry is known */
  uint64_t raw_hash;
  bool raw_valid;
  struct tpu_memo_span* spans;   /* canonical addresses (flush_memo.c): each */
  struct tpu_memo_span* sorted;  /* address's byte range and word, the ranges */
  struct tpu_memo_region* regions; /* sorted and merged into regions, each */
  int64_t span_cap;              /* region's id by first use (grown as needed) */
} tpu_flush_memo_t;

/* Frees what the memo holds (entries, programs, arrays); *m is then empty. */
void tpu_flush_memo_free(tpu_flush_memo_t* m);

/* Builds the signature of a recording (its nodes, free records, live
 * provisional blocks and the compiler's switches, with addresses made
 * relative to the memory regions they fall in) into m->next; false when
 * out of memory (then nothing matches). */
bool tpu_flush_memo_sign(tpu_flush_memo_t* m, const tpu_graph_t* graph,
                         const struct tpu_free_record* frees, int32_t free_count,
                         const uint64_t* live_addr, const uint64_t* live_size, int32_t live,
                         uint64_t settings);
/* The entry whose signature is the one just built, or NULL. */
const tpu_flush_memo_entry_t* tpu_flush_memo_find(tpu_flush_memo_t* m);
/* The entry for a recording, or NULL: first by its raw signature (a slot
 * filed for the same words, addresses as they are: *out_fast set, nothing
 * made canonical), else as tpu_flush_memo_sign and tpu_flush_memo_find
 * (the raw signature is then filed for the entry found, or for the one
 * tpu_flush_memo_store fills next). */
const tpu_flush_memo_entry_t* tpu_flush_memo_lookup(tpu_flush_memo_t* m,
                                                    const tpu_graph_t* graph,
                                                    const struct tpu_free_record* frees,
                                                    int32_t free_count, const uint64_t* live_addr,
                                                    const uint64_t* live_size, int32_t live,
                                                    uint64_t settings, bool* out_fast);
/* Keeps the signature just built with what was compiled for it (the
 * scheduled order: n entries, or NULL when unmoved; the program, retained;
 * the nodes' plans, taken: released if nothing is kept; the estimate) in
 * place of the least recently used entry, and files the last lookup's raw
 * signature for it. Without a complete signature, or out of memory,
 * nothing is kept. */
void tpu_flush_memo_store(tpu_flush_memo_t* m, const int32_t* order, int32_t n,
                          struct tpu_program* program, struct tpu_node_plans* plans,
                          int64_t extra);

#endif /* TPU_HAL_FLUSH_MEMO_H_ */
