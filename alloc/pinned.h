/* pinned.h - the pinned-host memory pool.
 *
 * Page-locked host memory (cuMemHostAlloc on CUDA, plain aligned host memory
 * without a GPU) cached by size class. Requests are rounded up to a class:
 * four classes per power of two from 4 KiB (so at most 25% is wasted), each
 * cached block one provider segment; blocks are never split.
 *
 * A block that was copied from or into on a stream (l8_pinned_record_stream)
 * is reused only after an event recorded on each such stream at free time
 * has completed, so an in-flight DMA never sees its buffer handed out again.
 *
 * Uses the same provider type as the device allocator: segment_alloc /
 * segment_free give page-locked memory, events as for streams.
 * Thread safety: every function may be called from any thread; a cold
 * allocation's segment_alloc (cuMemHostAlloc, milliseconds) runs without the
 * pool's lock, so other threads keep allocating from the cache and freeing
 * meanwhile (memory_limit counts the bytes in flight).
 */
#ifndef L8_PINNED_H
#define L8_PINNED_H

#include <stddef.h>
#include <stdint.h>
#include "alloc/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_pinned l8_pinned;

typedef struct l8_pinned_stats {
    size_t size;                  /* caller sets sizeof(l8_pinned_stats) */
    uint64_t allocated_bytes, allocated_peak;   /* live blocks (class sizes) */
    uint64_t requested_bytes;                   /* live blocks (sizes asked for) */
    uint64_t reserved_bytes, reserved_peak;     /* all blocks held */
    uint64_t allocations, frees, cache_hits, segment_allocs, segment_frees;
    uint64_t pending_blocks;                    /* freed, waiting on events */
} l8_pinned_stats;

/* memory_limit: 0 = none; reserved bytes never exceed it (cached blocks are
 * released first). trace: may be NULL. Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM. */
L8_NODISCARD l8_status l8_pinned_create(const l8_segment_provider *prov, size_t memory_limit,
                                         l8_trace *trace, l8_pinned **out);
/* Waits for pending events and frees everything. NULL: no-op. */
void l8_pinned_destroy(l8_pinned *p);

/* bytes == 0 gives NULL and L8_OK. The block is 256-B aligned.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM (after waiting for pending blocks
 * and freeing cached ones; the message gives the pool's state; also for
 * requests above 2^62 B), or the provider's status when it fails otherwise. */
L8_NODISCARD l8_status l8_pinned_alloc(l8_pinned *p, size_t bytes, void **ptr);
/* ptr must be what l8_pinned_alloc returned. NULL: no-op.
 * Errors: L8_ERR_INVALID_ARG (not a live block), L8_ERR_CUDA (an event could
 * not be created or recorded: the block then counts as freed but is kept out
 * of the cache until l8_pinned_empty_cache, never handed out early). */
L8_NODISCARD l8_status l8_pinned_free(l8_pinned *p, void *ptr);
/* ptr may point anywhere inside a live block. Recording a stream twice is
 * harmless. Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM (host memory, past four
 * streams on one block). */
L8_NODISCARD l8_status l8_pinned_record_stream(l8_pinned *p, void *ptr, l8_stream_id stream);
/* Size class a request is rounded to; 0 for 0 or a request above 2^62 B. */
size_t l8_pinned_class_size(size_t bytes);
/* Waits for pending events, then frees every cached block. */
L8_NODISCARD l8_status l8_pinned_empty_cache(l8_pinned *p);
/* Statistics (the stats rule of docs/api.md). Errors: L8_ERR_INVALID_ARG
 * (NULL, a size covering no field). */
L8_NODISCARD l8_status l8_pinned_get_stats(l8_pinned *p, l8_pinned_stats *stats);

/* CUDA graph capture (runtime/graph.c sets it around a capture): while on,
 * l8_pinned_alloc (bytes > 0), l8_pinned_free (ptr != NULL),
 * l8_pinned_record_stream and l8_pinned_empty_cache fail with L8_ERR_STATE
 * and change nothing. Each would query or record events, or call
 * cuMemHostAlloc, which a capture forbids, and a block handed back during
 * a capture could be reused while the graph still copies from it. Pinned
 * staging belongs outside the captured work. */
void l8_pinned_set_capturing(l8_pinned *p, int on);

#ifdef __cplusplus
}
#endif
#endif /* L8_PINNED_H */
