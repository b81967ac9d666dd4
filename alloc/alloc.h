/* alloc.h - the caching device allocator and its segment providers.
 *
 * The allocator hands out blocks carved from segments that a provider
 * supplies (cuMemAlloc on a GPU, aligned host memory on the host backend, or
 * a fault-injecting wrapper in tests). It never talks to the driver itself:
 * everything device-specific arrives through l8_segment_provider, so this
 * module includes nothing of runtime/ but status.h.
 *
 * Policy:
 *  - requests are rounded up to 512 B; requests <= 1 MiB come from the small
 *    pool (2 MiB segments), larger ones from the large pool;
 *  - best fit with splitting and coalescing inside a segment;
 *  - free blocks are kept per stream: a block freed on the stream it was
 *    allocated on is reusable by that stream at once; a block the caller
 *    recorded as used on other streams (l8_alloc_record_stream) becomes
 *    reusable only after an event recorded on each of those streams at free
 *    time has completed;
 *  - out of memory: give the cached free segments back, retry; wait for the
 *    pending cross-stream frees, retry; then L8_ERR_OOM with the allocator's
 *    state in the message (l8_alloc_malloc says exactly when it waits).
 *
 * Thread safety: every function may be called from any thread; one mutex per
 * allocator, never held across a provider call that can block
 * (segment_alloc, segment_free, event_sync): while one thread frees a
 * segment or waits for an event, the others allocate and free from the
 * cache. Pointers are device addresses for GPU providers (never
 * dereferenced here) and host addresses for the host provider.
 */
#ifndef L8_ALLOC_H
#define L8_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct l8_alloc l8_alloc;
typedef struct l8_trace l8_trace;   /* alloc/trace.h */

/* An opaque stream handle as the provider knows it (a CUstream on CUDA).
 * 0 is a valid stream (the host backend's only one). */
typedef uintptr_t l8_stream_id;

/* Where segments and events come from. All callbacks receive `user`.
 * segment_alloc returns L8_ERR_OOM when memory is exhausted (any other
 * status is passed through to the caller); the pointer must be aligned to at
 * least 256 B. segment_free may fail: the allocator then keeps the segment
 * cached and reports the status. event_query sets *done to 1 once all work
 * recorded before the event on its stream has completed, without waiting;
 * event_sync blocks until then.
 * Threads: the allocator and the pinned pool call segment_alloc,
 * segment_free and event_sync without holding their locks, so they may run
 * concurrently with each other and with the other callbacks, from any thread
 * that calls them: a provider must be thread-safe (the host, fault and CUDA
 * providers are). Neither calls two callbacks on one event at once. The
 * other callbacks run under the lock and must not block. */
typedef struct l8_segment_provider {
    size_t size;                  /* sizeof(l8_segment_provider) */
    void *user;
    const char *name;             /* "cuda", "host", "fault(...)" */
    int device;                   /* CUDA ordinal, or -1 for host memory */
    l8_status (*segment_alloc)(void *user, size_t bytes, void **ptr);
    l8_status (*segment_free)(void *user, void *ptr, size_t bytes);
    l8_status (*event_create)(void *user, void **event);
    l8_status (*event_record)(void *user, void *event, l8_stream_id stream);
    l8_status (*event_query)(void *user, void *event, int *done);
    l8_status (*event_sync)(void *user, void *event);
    void (*event_destroy)(void *user, void *event);
} l8_segment_provider;

/* The host provider: 256-B aligned host memory; events are always complete.
 * Fills *out; keeps no state. */
void l8_host_provider(l8_segment_provider *out);

/* Fault injection around another provider (tests). fail_nth = N > 0 makes
 * the N-th segment_alloc (counting from 1 after creation or reset) and every
 * later one fail with L8_ERR_OOM while fail_sticky is 1, or only that one
 * when 0; memory_limit > 0 makes any segment_alloc that would take the
 * provider's live bytes above it fail with L8_ERR_OOM. Thread-safe (the
 * counters are updated atomically); set the knobs while no call runs. */
typedef struct l8_fault_provider {
    l8_segment_provider base;     /* what the allocator is given */
    l8_segment_provider inner;    /* what it wraps */
    uint64_t fail_nth;
    int fail_sticky;
    size_t memory_limit;
    uint64_t calls;               /* segment_alloc calls so far */
    uint64_t failures;            /* injected failures so far */
    size_t live_bytes;            /* bytes currently handed out by inner */
    size_t peak_bytes;
} l8_fault_provider;

/* Set up fp to wrap inner; fp->base is then the provider to hand to
 * l8_alloc_create. fp must outlive the allocator. */
void l8_fault_provider_init(l8_fault_provider *fp, const l8_segment_provider *inner);

typedef struct l8_alloc_config {
    size_t size;                  /* sizeof(l8_alloc_config) */
    size_t memory_limit;          /* 0: none. Reserved bytes never exceed it. */
    l8_trace *trace;              /* NULL: no tracing */
} l8_alloc_config;
#define L8_ALLOC_CONFIG_INIT { sizeof(l8_alloc_config), 0, NULL }
/* Fill *cfg with the defaults of L8_ALLOC_CONFIG_INIT (size included), for callers
 * that cannot use the macro: bindings. NULL: nothing. */
void l8_alloc_config_init(l8_alloc_config *cfg);

/* Bytes; "peak" is the high-water mark since creation or l8_alloc_reset_peaks. */
typedef struct l8_alloc_stats {
    size_t size;                  /* caller sets sizeof(l8_alloc_stats) */
    uint64_t allocated_bytes, allocated_peak;   /* live blocks (rounded sizes) */
    uint64_t requested_bytes, requested_peak;   /* live blocks (sizes asked for) */
    uint64_t reserved_bytes, reserved_peak;     /* segments held */
    uint64_t active_bytes, active_peak;         /* live + freed but awaiting events */
    uint64_t inactive_split_bytes, inactive_split_peak; /* free blocks in partly used segments */
    uint64_t allocations, frees;                /* counts of successful calls */
    uint64_t live_blocks, segments;             /* current counts */
    uint64_t segment_allocs, segment_frees;     /* provider calls that succeeded */
    uint64_t cache_hits;                        /* allocations served without a new segment */
    uint64_t retries;                           /* OOM -> release cache -> retry */
    uint64_t ooms;                              /* L8_ERR_OOM returned */
    uint64_t graph_reserved_bytes;              /* segments held by graph-private pools */
    uint64_t graph_held_bytes;                  /* blocks freed during a capture, kept until
                                                   their graph is released */
    uint64_t capture_refusals;                  /* captured allocations that would have needed
                                                   a new segment (L8_ERR_STATE) */
} l8_alloc_stats;

/* Create an allocator over a provider (copied; its user pointer must stay
 * valid until destroy). cfg may be NULL for defaults.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM (host memory). */
L8_NODISCARD l8_status l8_alloc_create(const l8_alloc_config *cfg, const l8_segment_provider *prov,
                                        l8_alloc **out);

/* Wait for pending events, free every segment, free the allocator. Live
 * blocks are released with their segments (the caller should have freed
 * them). No other call on `a` may be in progress or follow. NULL: no-op. */
void l8_alloc_destroy(l8_alloc *a);

/* Allocate `bytes` for use on `stream`. bytes == 0 gives *ptr = NULL and
 * L8_OK. The block is at least 512-B aligned.
 * Blocking. It never waits for the GPU work of any stream, except as the
 * last resort before L8_ERR_OOM:
 *  - a cache hit takes the lock, queries pending events (event_query, never
 *    a wait) and returns; it waits for nothing but the lock, which no thread
 *    holds across a provider call;
 *  - a miss (no free block of the stream fits; or, large pool, the best fit
 *    is a wholly free segment while the pool holds other wholly free ones,
 *    which are then merged into one) calls the provider without the lock:
 *    segment_free for the pool's wholly free segments too small for the
 *    request or being merged, then segment_alloc. cuMemFree may synchronize
 *    the device, so a miss can wait for every stream's work; misses are
 *    rare once the cache is warm. A block freed on another stream whose
 *    event has not completed is not waited for: the malloc grows instead;
 *  - out of memory (the provider or the memory limit refused): (1) every
 *    wholly free cached segment is given back (segment_free) and it tries
 *    again; (2) then it waits for every pending cross-stream free
 *    (event_sync: the work recorded on those streams) and tries again;
 *    (3) then, while other threads have provider calls in flight that may
 *    return memory, it waits for them to end (at most 8 times) and tries
 *    again; then L8_ERR_OOM. During a strict capture (below) it does none
 *    of this: a captured allocation never calls the provider, and an
 *    uncaptured one that cannot grow fails at once.
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM (state in the message), a
 * provider's error from segment_alloc (other than L8_ERR_OOM). */
L8_NODISCARD l8_status l8_alloc_malloc(l8_alloc *a, size_t bytes, l8_stream_id stream, void **ptr);

/* Give a block back. NULL: no-op. If the block was recorded on other streams,
 * events are recorded on them now and the block is reusable once they
 * complete; otherwise it is reusable at once by its own stream. Never
 * blocks: no segment is freed and no event waited on here (event_create
 * and event_record only, which do not wait for the device).
 * Errors: L8_ERR_INVALID_ARG (not a live block of this allocator: nothing
 * changes), L8_ERR_CUDA (event record failed) or L8_ERR_OOM (no host memory
 * for the event record): in both of the last two the block counts as freed
 * but is kept out of the cache until l8_alloc_empty_cache, never handed out
 * early. */
L8_NODISCARD l8_status l8_alloc_free(l8_alloc *a, void *ptr);

/* Note that a live block is used on `stream` (not its allocation stream).
 * Errors: L8_ERR_INVALID_ARG, L8_ERR_OOM (host memory, beyond two extra streams). */
L8_NODISCARD l8_status l8_alloc_record_stream(l8_alloc *a, void *ptr, l8_stream_id stream);

/* Rounded size and allocation stream of a live block.
 * Errors: L8_ERR_INVALID_ARG. */
L8_NODISCARD l8_status l8_alloc_block_info(l8_alloc *a, const void *ptr, size_t *bytes,
                                            l8_stream_id *stream);

/* Wait for pending events (event_sync), then return every wholly free
 * segment to the provider (segment_free); blocks for both, without the
 * lock, so other threads keep allocating from the cache meanwhile. A
 * segment whose segment_free fails stays cached. Errors: the provider's;
 * L8_ERR_STATE during a strict capture (also one that began while this call
 * waited: then no segment is freed). */
L8_NODISCARD l8_status l8_alloc_empty_cache(l8_alloc *a);

/* Statistics; the caller sets stats->size (the stats rule of docs/api.md).
 * Errors: L8_ERR_INVALID_ARG (NULL, a size covering no field). */
L8_NODISCARD l8_status l8_alloc_get_stats(l8_alloc *a, l8_alloc_stats *stats);
void l8_alloc_reset_peaks(l8_alloc *a);

/* One line per segment and totals, for OOM messages and tools. Writes at most
 * n bytes including the NUL; returns the length it wanted (snprintf rules). */
size_t l8_alloc_describe(l8_alloc *a, char *buf, size_t n);

/* Every block of every segment, in address order within a segment. */
typedef struct l8_block_info {
    uintptr_t segment;            /* segment base */
    size_t segment_bytes;
    uintptr_t addr;
    size_t bytes;                 /* rounded size */
    size_t requested;             /* 0 when free */
    l8_stream_id stream;          /* allocation stream */
    int allocated;                /* 1: live */
    int pending;                  /* 1: freed, waiting on events */
    int small_pool;               /* 1: small pool */
} l8_block_info;
L8_NODISCARD l8_status l8_alloc_visit(l8_alloc *a, void (*fn)(void *arg, const l8_block_info *b),
                                       void *arg);

/* ---- CUDA graph capture ----
 * A captured stream records work instead of running it; the graph replays
 * that work later with every address frozen. So while a capture is underway:
 *  - allocations on the captured streams come from a graph-private pool (one
 *    per graph id and stream and small/large), never from the ordinary pools,
 *    and stay there: blocks freed during the capture are reused by later
 *    allocations of the same capture in stream order (as on replay), and the
 *    pool's segments are kept for the graph's life, invisible to eager code;
 *  - a captured allocation that no free block of its graph pool fits takes a
 *    wholly free cached segment of the ordinary pools; it never calls the
 *    provider: when no cached segment is large enough it fails with
 *    L8_ERR_STATE. An eager warm-up routed to the pool (strict = 0 below)
 *    pre-reserves what the capture needs;
 *  - a block freed during the capture that eager code could otherwise reuse
 *    (an ordinary block of a captured stream, or any block used on other
 *    streams) is held until its graph is released: its captured users run at
 *    replay time;
 *  - no provider event is created, recorded, queried or waited on (pending
 *    frees stay pending), and l8_alloc_empty_cache fails with L8_ERR_STATE.
 * Allocations on other streams during a capture are served as usual.
 * One capture at a time per allocator. */
#define L8_ALLOC_MAX_CAPTURE_STREAMS 8

/* Start routing streams[0..n) (1 <= n <= 8) to graph pool *gid: a new pool
 * when *gid is 0 (its id, > 0, is written back), else the existing pool
 * *gid (capturing its graph again, e.g. for a graph update). strict = 1:
 * the driver's capture is about to begin - every rule above holds; call
 * before cuStreamBeginCapture (pending frees whose events are complete are
 * processed here, the last moment that may query events). strict = 0: an
 * eager warm-up of the work
 * about to be captured - allocations on the streams still go to the graph
 * pool, which may then grow through the provider, and frees behave as
 * outside a capture; this pre-reserves what the strict capture will need.
 * Errors: L8_ERR_INVALID_ARG (NULL, n out of range, *gid not a live graph
 * pool), L8_ERR_STATE (a capture is underway), L8_ERR_OOM (host memory):
 * nothing changes. */
L8_NODISCARD l8_status l8_alloc_capture_begin(l8_alloc *a, const l8_stream_id *streams, int n,
                                               uint32_t *gid, int strict);
/* Stop routing (after the driver's capture ended, successfully or not).
 * The pool stays reserved. Errors: L8_ERR_INVALID_ARG (gid is not the
 * capture underway). */
L8_NODISCARD l8_status l8_alloc_capture_end(l8_alloc *a, uint32_t gid);
/* The graph of pool gid is gone and its last launch has completed: blocks
 * held for it return to the cache, and the pool's segments go back to the
 * ordinary pools as soon as they are wholly free (at once for those that
 * are; live blocks of the pool keep theirs until freed). No provider call.
 * Errors: L8_ERR_INVALID_ARG (not a live graph pool), L8_ERR_STATE (its
 * capture is underway). */
L8_NODISCARD l8_status l8_alloc_graph_release(l8_alloc *a, uint32_t gid);

/* Check every internal invariant (blocks tile their segments, no two free
 * neighbours, free lists match blocks, statistics match blocks). L8_OK or
 * L8_ERR_INTERNAL naming the broken invariant. For tests and lean8-info. */
L8_NODISCARD l8_status l8_alloc_check(l8_alloc *a);

#ifdef __cplusplus
}
#endif
#endif /* L8_ALLOC_H */
