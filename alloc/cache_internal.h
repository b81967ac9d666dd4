/* cache_internal.h - the caching allocator's data model, shared by cache.c
 * (allocation, free, segments, events) and cache_check.c (describe, visit,
 * check). Not installed; see cache.c for the design and the invariants. */
#ifndef L8_CACHE_INTERNAL_H
#define L8_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include "alloc/alloc.h"
#include "alloc/trace.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

#define MIN_BLOCK     ((size_t)512)     /* rounding unit and block alignment */
#define SMALL_SIZE    MIB               /* requests up to this use the small pool */
#define SMALL_SEGMENT (2 * MIB)         /* small-pool segment size */
#define LARGE_ROUND   (2 * MIB)         /* large segments are multiples of this */
#define MID_LIMIT     (10 * MIB)        /* requests below this ... */
#define MID_SEGMENT   (20 * MIB)        /* ... get at least this much (PyTorch's rule) */
#define GROW_DIV      16                /* new large segment >= pool reserved / GROW_DIV */
#define GROW_CAP      (8 * GIB)         /* ... but the geometric part at most this */
/* Larger requests fail at once: no device is this big, and every size below
 * it can be rounded and summed without overflow. */
#define MAX_REQUEST   ((size_t)1 << 50)

/* Bins: size in 512-B units u; u < 16 exact, then 16 bins per power of two. */
#define SUB_BITS 4
#define NSUB     (1u << SUB_BITS)
#define NBINS    ((50 - 9 - SUB_BITS + 2) * NSUB)      /* u < 2^41: 624 bins */
#define NWORDS   ((NBINS + 63) / 64)

#define SLAB_BLOCKS 256
#define HASH_MIN    1024
#define DESCRIBE_OOM 1600   /* bytes of state in an OOM message (it is capped at 2 KiB) */

enum { B_FREE = 0, B_LIVE = 1, B_PENDING = 2 };

typedef struct segment segment;
typedef struct pool pool;

typedef struct block {
    uintptr_t addr;
    size_t size;                  /* rounded, a multiple of 512 */
    size_t requested;             /* LIVE: bytes asked for; else 0 */
    segment *seg;
    struct block *prev, *next;    /* address neighbours in the segment */
    struct block *fprev, *fnext;  /* bin list while FREE; fnext: spare list */
    l8_stream_id *xs;             /* other streams that used it (record_stream) */
    uint32_t nxs, capxs;
    l8_stream_id xs_inline[2];
    uint32_t events;              /* PENDING: events not yet complete */
    uint8_t state;
    uint8_t held;                 /* PENDING until empty_cache (event failure), or graph release */
    uint16_t bin;
    uint32_t gheld;               /* held for graph pool id gheld (freed during its capture) */
} block;

struct segment {
    uintptr_t base;               /* what the provider returned */
    size_t bytes;                 /* what the provider was asked for */
    uintptr_t start;              /* 512-aligned start of the tiled range */
    size_t usable;
    pool *pool;
    block *head;
    segment *prev, *next;         /* all segments of the allocator */
    size_t busy;                  /* LIVE + PENDING blocks */
    size_t free_bytes;            /* bytes in FREE blocks */
    size_t nblocks;
    segment *dnext;               /* detached for segment_free: the caller's list */
    l8_status fst;                /* ... and what segment_free returned */
};

struct pool {
    l8_stream_id stream;
    int small;
    uint32_t gid;                 /* 0: an ordinary pool; else a graph-private pool's id */
    int released;                 /* graph pool whose graph is gone: segments go home when free */
    pool *home;                   /* graph pool: the ordinary pool of (stream, small) */
    size_t reserved;
    uint32_t pins;                /* threads using it with the lock released: it stays */
    size_t nfree;                 /* blocks in the bins */
    size_t nidle;                 /* wholly free segments */
    uint64_t summary;             /* bit w: map[w] != 0 */
    uint64_t map[NWORDS];         /* bit b: bins[b] != NULL */
    block *bins[NBINS];
};

typedef struct pend {             /* one recorded event of a PENDING block */
    void *event;
    block *b;
    struct pend *prev, *next;     /* the pending list, oldest first */
    struct pend *wnext;           /* waiting: the waiter's list */
    int waiting;                  /* a thread waits on it without the lock: leave it alone */
    l8_status wst;                /* what event_sync returned */
} pend;

typedef struct slab {
    struct slab *next;
    block blocks[SLAB_BLOCKS];
} slab;

typedef struct hslot {
    uintptr_t key;                /* 0: empty */
    block *b;
} hslot;

struct l8_alloc {
    pthread_mutex_t mu;
    l8_segment_provider prov;
    size_t memory_limit;
    l8_trace *trace;
    pool **pools;
    size_t npools, cap_pools;
    pool *last[2];                /* last pool used, per small/large */
    segment *segs;
    hslot *htab;
    size_t hcap, hcount;
    unsigned hshift;
    block *spare;                 /* free block structs */
    size_t nspare;
    slab *slabs;
    pend *pend_head, *pend_tail;  /* recorded events, oldest first */
    pend *pend_spare;             /* completed: their events are reused */
    size_t nblocks;               /* block structs in segments, detached ones included */
    l8_alloc_stats st;
    /* graph capture (l8_alloc_capture_begin): while cap_gid != 0, allocations
     * on cap_streams go to graph pools of id cap_gid, and nothing calls the
     * provider's events; gids: the ids of live graph pools */
    uint32_t cap_gid, next_gid;
    int cap_strict;               /* 1: the driver's capture (no provider calls); 0: a warm-up */
    l8_stream_id cap_streams[L8_ALLOC_MAX_CAPTURE_STREAMS];
    int ncap;
    uint32_t *gids;
    size_t ngids, cap_gids;
    /* provider calls made without the lock (cache.c "Blocking calls"):
     * segments detached for segment_free still count in st.reserved_bytes
     * and st.segments (ndying, dying_bytes); segments being obtained count
     * only in growing (against the memory limit) */
    size_t ndying, dying_bytes;
    size_t growing;
    uint32_t inflight;            /* such calls in progress */
    uint64_t done_gen;            /* such calls finished so far */
    pthread_cond_t cv;            /* broadcast when one ends (call_done) */
};

/* The hot path is a handful of these small helpers: inline them. */
#define HOT inline __attribute__((always_inline))

#define TRACE(a, kind, stream, addr, size, aux)                                               \
    do {                                                                                      \
        if ((a)->trace)                                                                       \
            l8_trace_record((a)->trace, (kind), (a)->prov.device, (uint64_t)(stream),         \
                            (uint64_t)(addr), (uint64_t)(size), (uint64_t)(aux));            \
    } while (0)

/* Bin of a block size (512-B units; see cache.c). */
static HOT unsigned bin_of(size_t size)
{
    uint64_t u = size >> 9;
    if (u < NSUB) return (unsigned)u;
    unsigned fl = 63u - (unsigned)__builtin_clzll(u);
    unsigned sl = (unsigned)(u >> (fl - SUB_BITS)) & (NSUB - 1);
    unsigned b = (fl - SUB_BITS + 1) * NSUB + sl;
    /* Requests stay below MAX_REQUEST, but a merged segment may not: the
     * last bin takes everything above (lookups check sizes anyway). */
    return b < NBINS ? b : NBINS - 1;
}

/* Pointer hash of live blocks: linear probing (cache.c inserts and deletes). */
static HOT size_t hash_idx(const l8_alloc *a, uintptr_t key)
{
    return (size_t)(((uint64_t)key >> 9) * 0x9E3779B97F4A7C15ull >> a->hshift);
}

static HOT size_t hash_find(const l8_alloc *a, uintptr_t key)
{
    size_t mask = a->hcap - 1;
    for (size_t i = hash_idx(a, key);; i = (i + 1) & mask) {
        if (a->htab[i].key == key) return i;
        if (!a->htab[i].key) return SIZE_MAX;
    }
}

/* cache_check.c */
void l8i_fmt_bytes(char *buf, size_t n, uint64_t v);
/* The state as text (l8_alloc_describe) with the lock held. */
size_t l8i_alloc_describe_locked(l8_alloc *a, char *buf, size_t n);

#endif
