/* pinned.c - the pinned-host memory pool.
 *
 * Size classes: requests up to 4 KiB get 4 KiB; a request in (2^k, 2^(k+1)]
 * for k >= 12 gets the smallest of 1.25, 1.5, 1.75, 2 x 2^k that holds it,
 * so a block is never more than 25% larger than its request (PyTorch's pure
 * power-of-two rounding wastes up to 2x). Classes go up to 2^62 bytes.
 * Every block is one provider segment (cuMemHostAlloc on CUDA), never split,
 * cached per class after it is freed.
 *
 * Block states and where each lives:
 *   LIVE      handed out; in by_addr only
 *   PENDING   freed, waiting on the events recorded on the streams that used
 *             it; in the pending list
 *   CACHED    reusable; in its class's free list
 *   STRANDED  freed, but recording an event failed, so we cannot know when
 *             the last copy ends: never handed out again; empty_cache and
 *             destroy wait for the events that were recorded and return it
 *             to the provider (the device allocator's rule, alloc.h)
 * Every block but a detached one is in by_addr (sorted by base address) for
 * pointer lookups, including pointers into the middle of a block
 * (record_stream).
 *
 * Invariants (under p->mu): reserved_bytes = sum of the class sizes of all
 * blocks, detached ones included (below), <= memory_limit when set; allocated_bytes = sum over LIVE blocks;
 * pending_blocks = PENDING + STRANDED blocks. Events are pooled: an event is
 * created only when the pool of completed ones is empty.
 *
 * Polling is cheap with many blocks in flight: the pending list is oldest
 * first, and events on one stream complete in the order they were recorded,
 * so once a poll finds a stream's event not done it skips the later events
 * of that stream instead of querying each (an offload keeps dozens of
 * buffers pending on the copy stream; cuEventQuery is not free).
 *
 * A cold allocation calls segment_alloc (cuMemHostAlloc: milliseconds)
 * without the pool mutex, so other threads keep allocating from the cache
 * and freeing meanwhile; its bytes count in `growing` until it returns, and
 * memory_limit holds for reserved + growing, so concurrent cold allocations
 * never overshoot it. The provider is thread-safe (alloc.h). Giving memory
 * back and waiting for copies (empty_cache, the OOM ladder, a cold
 * allocation making room under the limit) run without the mutex too: the
 * blocks are detached first (off their list and the address index, where a
 * new segment at the same address may then go), their bytes stay reserved
 * and count in `shrinking` until segment_free returns, and `waiting` counts
 * the event waits in flight; an allocation that finds no room while either
 * is non-zero waits for them (p->cv) and tries again rather than fail.
 * destroy runs alone and keeps the simple path. Warm allocations and frees
 * never call the provider except to record and query events.
 *
 * Trace: PINNED_ALLOC (addr, size = class bytes, aux = requested bytes) and
 * PINNED_FREE (addr, size = class bytes, aux = number of streams the block
 * waits on; 0 means reusable at once), device = the provider's device.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "alloc/pinned.h"
#include "alloc/trace.h"
#include "runtime/config_internal.h"

#define MIN_SHIFT 12                       /* 4 KiB */
#define MAX_SHIFT 62                       /* largest class: 2^62 bytes */
#define NCLASSES (1 + 4 * (MAX_SHIFT - MIN_SHIFT))
#define INLINE_STREAMS 4

enum { B_LIVE, B_PENDING, B_CACHED, B_STRANDED };

typedef struct pblock {
    uintptr_t base;
    size_t bytes;                 /* class size */
    size_t requested;             /* 0 unless LIVE */
    int cls;
    int state;
    struct pblock *next;          /* free list, pending list or stranded list */
    uint32_t nstreams, cap;       /* streams recorded while LIVE */
    l8_stream_id *streams;        /* -> inl_streams or heap */
    void **events;                /* after free: events[i] was recorded on streams[i] */
    uint32_t nevents;             /* events[0..nevents) not yet seen complete */
    int unlocked_ok;              /* while detached (no mutex): the provider call succeeded */
    l8_stream_id inl_streams[INLINE_STREAMS];
    void *inl_events[INLINE_STREAMS];
} pblock;

struct l8_pinned {
    pthread_mutex_t mu;
    l8_segment_provider prov;
    size_t memory_limit;
    l8_trace *trace;
    pblock **by_addr;             /* every block, sorted by base */
    size_t nblocks, blocks_cap;
    pblock *cached[NCLASSES];
    size_t cached_bytes;
    pblock *pending, **pending_tail;  /* oldest first */
    pblock *stranded;
    void **evpool;                /* completed events ready for reuse */
    size_t nev, evcap;
    l8_pinned_stats st;
    size_t growing;               /* class bytes of segment_allocs in flight (unlocked) */
    size_t shrinking;             /* class bytes of segment_frees in flight (unlocked) */
    int waiting;                  /* unlocked waits for pending blocks' events in flight */
    pthread_cond_t cv;            /* signalled when shrinking or waiting drops */
    int capturing;                /* l8_pinned_set_capturing: atomic */
};

/* ---- size classes ---- */

/* Class index of a request (> 0 bytes), its size in *cbytes; -1 if too big. */
static int class_of(size_t bytes, size_t *cbytes)
{
    if (bytes <= ((size_t)1 << MIN_SHIFT)) {
        *cbytes = (size_t)1 << MIN_SHIFT;
        return 0;
    }
    if (bytes > ((size_t)1 << MAX_SHIFT)) return -1;
    int k = 63 - __builtin_clzll((unsigned long long)(bytes - 1));  /* 2^k < bytes <= 2^(k+1) */
    size_t base = (size_t)1 << k, step = base >> 2;
    size_t i = (bytes - base + step - 1) / step;                  /* 1..4 */
    *cbytes = base + i * step;
    return 1 + 4 * (k - MIN_SHIFT) + (int)(i - 1);
}

size_t l8_pinned_class_size(size_t bytes)
{
    size_t c;
    return bytes && class_of(bytes, &c) >= 0 ? c : 0;
}

/* ---- the address index ---- */

/* Index of the last block with base <= addr, or -1. */
static long find_floor(const l8_pinned *p, uintptr_t addr)
{
    size_t lo = 0, hi = p->nblocks;               /* answer in [lo - 1, hi) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->by_addr[mid]->base <= addr) lo = mid + 1;
        else hi = mid;
    }
    return (long)lo - 1;
}

static pblock *find_containing(const l8_pinned *p, const void *ptr)
{
    long i = find_floor(p, (uintptr_t)ptr);
    if (i < 0) return NULL;
    pblock *b = p->by_addr[i];
    return (uintptr_t)ptr - b->base < b->bytes ? b : NULL;
}

static int index_insert(l8_pinned *p, pblock *b)
{
    if (p->nblocks == p->blocks_cap) {
        size_t ncap = p->blocks_cap ? p->blocks_cap * 2 : 64;
        pblock **n = realloc(p->by_addr, ncap * sizeof *n);
        if (!n) return -1;
        p->by_addr = n;
        p->blocks_cap = ncap;
    }
    size_t i = (size_t)(find_floor(p, b->base) + 1);
    memmove(p->by_addr + i + 1, p->by_addr + i, (p->nblocks - i) * sizeof *p->by_addr);
    p->by_addr[i] = b;
    p->nblocks++;
    return 0;
}

static void index_remove(l8_pinned *p, pblock *b)
{
    size_t i = (size_t)find_floor(p, b->base);
    memmove(p->by_addr + i, p->by_addr + i + 1, (p->nblocks - i - 1) * sizeof *p->by_addr);
    p->nblocks--;
}

/* ---- events ---- */

static l8_status event_get(l8_pinned *p, void **ev)
{
    if (p->nev) {
        *ev = p->evpool[--p->nev];
        return L8_OK;
    }
    return p->prov.event_create(p->prov.user, ev);
}

static void event_put(l8_pinned *p, void *ev)
{
    if (p->nev == p->evcap) {
        size_t ncap = p->evcap ? p->evcap * 2 : 16;
        void **n = realloc(p->evpool, ncap * sizeof *n);
        if (!n) {
            p->prov.event_destroy(p->prov.user, ev);
            return;
        }
        p->evpool = n;
        p->evcap = ncap;
    }
    p->evpool[p->nev++] = ev;
}

/* Streams seen busy during one poll (a small set; when it is full, later
 * events are simply queried). */
#define BUSY_MAX 16
typedef struct busy_set {
    int n;
    l8_stream_id s[BUSY_MAX];
} busy_set;

static int busy_has(const busy_set *bs, l8_stream_id s)
{
    for (int i = 0; i < bs->n; i++)
        if (bs->s[i] == s) return 1;
    return 0;
}

/* Drop events of b that have completed. wait = 1: wait for each; else
 * query, skipping streams in bs and adding those found busy. Returns the
 * first error; b->nevents is then what is still outstanding. */
static l8_status block_events_done(l8_pinned *p, pblock *b, int wait, busy_set *bs)
{
    uint32_t i = 0;
    while (i < b->nevents) {
        int done = 0;
        l8_status st = L8_OK;
        if (wait) {
            st = p->prov.event_sync(p->prov.user, b->events[i]);
            done = 1;
        } else if (!busy_has(bs, b->streams[i])) {
            st = p->prov.event_query(p->prov.user, b->events[i], &done);
            if (st == L8_OK && !done && bs->n < BUSY_MAX) bs->s[bs->n++] = b->streams[i];
        }
        if (st != L8_OK) return st;
        if (done) {
            event_put(p, b->events[i]);
            b->nevents--;
            b->events[i] = b->events[b->nevents];   /* keep the pairs together */
            b->streams[i] = b->streams[b->nevents];
        } else {
            i++;
        }
    }
    return L8_OK;
}

/* ---- block lists ---- */

static void cache_push(l8_pinned *p, pblock *b)
{
    b->state = B_CACHED;
    b->next = p->cached[b->cls];
    p->cached[b->cls] = b;
    p->cached_bytes += b->bytes;
}

static pblock *cache_pop(l8_pinned *p, int cls)
{
    pblock *b = p->cached[cls];
    if (!b) return NULL;
    p->cached[cls] = b->next;
    p->cached_bytes -= b->bytes;
    b->next = NULL;
    return b;
}

/* Move pending blocks whose events have completed to their free lists,
 * oldest first (queries only; wait_pending waits). */
static l8_status poll_pending(l8_pinned *p)
{
    l8_status first = L8_OK;
    busy_set bs = { 0 };
    pblock **link = &p->pending;
    while (*link) {
        pblock *b = *link;
        l8_status st = block_events_done(p, b, 0, &bs);
        if (st != L8_OK && first == L8_OK) first = st;
        if (b->nevents == 0) {
            *link = b->next;
            if (p->pending_tail == &b->next) p->pending_tail = link;
            p->st.pending_blocks--;
            cache_push(p, b);
        } else {
            link = &b->next;
        }
    }
    return first;
}

static void block_free_arrays(pblock *b)
{
    if (b->streams != b->inl_streams) {
        free(b->streams);
        free(b->events);
    }
}

/* Free cached blocks, largest classes first, until `need` more bytes fit
 * under the limit (need = SIZE_MAX: free them all). The segment_frees run
 * without the mutex (the banner): the blocks leave their free lists and the
 * index first and count in p->shrinking. Returns the first provider error;
 * blocks that could not be freed are cached again. Called and returns with
 * p->mu held. */
static l8_status release_cached(l8_pinned *p, size_t need)
{
    pblock *take = NULL;
    size_t bytes = 0;
    for (int c = NCLASSES - 1; c >= 0; c--)
        while (p->cached[c]) {
            if (need != SIZE_MAX &&
                p->st.reserved_bytes - p->shrinking - bytes + need <= p->memory_limit)
                goto taken;
            pblock *b = cache_pop(p, c);
            index_remove(p, b);
            b->next = take;
            take = b;
            bytes += b->bytes;
        }
taken:
    if (!take) return L8_OK;
    p->shrinking += bytes;
    pthread_mutex_unlock(&p->mu);
    l8_status first = L8_OK;
    for (pblock *b = take; b; b = b->next) {
        l8_status st = p->prov.segment_free(p->prov.user, (void *)b->base, b->bytes);
        b->unlocked_ok = st == L8_OK;
        if (st != L8_OK && first == L8_OK) first = st;
    }
    pthread_mutex_lock(&p->mu);
    p->shrinking -= bytes;
    while (take) {
        pblock *b = take;
        take = b->next;
        if (b->unlocked_ok) {
            p->st.reserved_bytes -= b->bytes;
            p->st.segment_frees++;
            block_free_arrays(b);
            free(b);
        } else if (index_insert(p, b) == 0) {
            cache_push(p, b);
        } else {
            /* no host memory to index it again: the segment is lost to the
             * pool (it stays with the provider); the error says why */
            p->st.reserved_bytes -= b->bytes;
            block_free_arrays(b);
            free(b);
        }
    }
    pthread_cond_broadcast(&p->cv);   /* get_block may wait for this */
    return first;
}

/* Wait for every event of the detached blocks `take` without the mutex,
 * then cache those whose events all completed; the others (a failed wait)
 * come back in *back, in order. Called and returns with p->mu held. */
static l8_status wait_detached(l8_pinned *p, pblock *take, pblock **back)
{
    p->waiting++;
    pthread_mutex_unlock(&p->mu);
    l8_status first = L8_OK;
    for (pblock *b = take; b; b = b->next) {
        b->unlocked_ok = 1;
        for (uint32_t i = 0; i < b->nevents && b->unlocked_ok; i++) {
            l8_status st = p->prov.event_sync(p->prov.user, b->events[i]);
            if (st != L8_OK) {
                b->unlocked_ok = 0;
                if (first == L8_OK) first = st;
            }
        }
    }
    pthread_mutex_lock(&p->mu);
    p->waiting--;
    pblock **back_tail = back;
    *back = NULL;
    while (take) {
        pblock *b = take;
        take = b->next;
        b->next = NULL;
        if (b->unlocked_ok) {
            for (uint32_t i = 0; i < b->nevents; i++) event_put(p, b->events[i]);
            b->nevents = 0;
            p->st.pending_blocks--;
            cache_push(p, b);
        } else {
            *back_tail = b;
            back_tail = &b->next;
        }
    }
    pthread_cond_broadcast(&p->cv);   /* get_block may wait for this */
    return first;
}

/* Wait for the pending blocks (wait_detached); those with a failed wait go
 * back to the front of the pending list, older than anything freed
 * meanwhile. Called and returns with p->mu held. */
static l8_status wait_pending(l8_pinned *p)
{
    pblock *take = p->pending, *back;
    if (!take) return L8_OK;
    p->pending = NULL;
    p->pending_tail = &p->pending;
    l8_status st = wait_detached(p, take, &back);
    if (back) {
        pblock **tail = &back;
        while (*tail) tail = &(*tail)->next;
        *tail = p->pending;
        if (!p->pending) p->pending_tail = tail;
        p->pending = back;
    }
    return st;
}

/* ---- create / destroy ---- */

l8_status l8_pinned_create(const l8_segment_provider *prov, size_t memory_limit, l8_trace *trace,
                           l8_pinned **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(prov != NULL);
    l8_segment_provider pv = { .size = sizeof pv };
    L8I_CONFIG_COPY(pv, prov, "l8_pinned_create", "sizeof(l8_segment_provider)");
    prov = &pv;
    L8_ARG(prov->segment_alloc && prov->segment_free && prov->event_create &&
           prov->event_record && prov->event_query && prov->event_sync && prov->event_destroy);
    l8_pinned *p = calloc(1, sizeof *p);
    if (!p) return L8_FAIL(L8_ERR_OOM, "no host memory for a pinned pool");
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return L8_FAIL(L8_ERR_OOM, "pthread_mutex_init failed for a pinned pool");
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return L8_FAIL(L8_ERR_OOM, "pthread_cond_init failed for a pinned pool");
    }
    p->prov = *prov;
    p->prov.size = sizeof p->prov;
    p->memory_limit = memory_limit;
    p->trace = trace;
    p->st.size = sizeof p->st;
    p->pending_tail = &p->pending;
    *out = p;
    return L8_OK;
}

void l8_pinned_destroy(l8_pinned *p)
{
    if (!p) return;
    /* Wait for every copy still reading or writing a freed block, then
     * return everything; errors cannot be reported here. */
    for (size_t i = 0; i < p->nblocks; i++) {
        pblock *b = p->by_addr[i];
        if (block_events_done(p, b, 1, NULL) != L8_OK) {
            for (uint32_t j = 0; j < b->nevents; j++)
                p->prov.event_destroy(p->prov.user, b->events[j]);
            b->nevents = 0;
        }
        (void)p->prov.segment_free(p->prov.user, (void *)b->base, b->bytes);
        block_free_arrays(b);
        free(b);
    }
    for (size_t i = 0; i < p->nev; i++) p->prov.event_destroy(p->prov.user, p->evpool[i]);
    free(p->evpool);
    free(p->by_addr);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ---- allocation ---- */

static l8_status oom_error(l8_pinned *p, size_t bytes, size_t cbytes, const char *why)
{
    char limit[32];
    if (p->memory_limit) snprintf(limit, sizeof limit, "%zu B", p->memory_limit);
    else snprintf(limit, sizeof limit, "none");
    return L8_FAIL(L8_ERR_OOM,
                   "pinned pool out of memory: %zu B requested (class %zu B): %s; pool: "
                   "reserved %llu B in %zu blocks (live %llu B, cached %zu B, %llu blocks "
                   "pending on stream events), memory_limit %s, provider '%s'",
                   bytes, cbytes, why, (unsigned long long)p->st.reserved_bytes, p->nblocks,
                   (unsigned long long)p->st.allocated_bytes, p->cached_bytes,
                   (unsigned long long)p->st.pending_blocks, limit,
                   p->prov.name ? p->prov.name : "?");
}

/* A fresh segment of class cls. L8_ERR_OOM also when the limit forbids it.
 * Called and returns with p->mu held; the provider call runs without it
 * (the banner), its bytes in p->growing meanwhile. */
static l8_status new_block(l8_pinned *p, int cls, size_t cbytes, pblock **out)
{
    if (p->memory_limit) {
        if (cbytes > p->memory_limit) return L8_ERR_OOM;
        if (p->st.reserved_bytes + p->growing + cbytes > p->memory_limit)
            (void)release_cached(p, p->growing + cbytes);
        if (p->st.reserved_bytes + p->growing + cbytes > p->memory_limit) return L8_ERR_OOM;
    }
    pblock *b = calloc(1, sizeof *b);
    if (!b) return L8_FAIL(L8_ERR_OOM, "no host memory for a pinned block record");
    void *ptr = NULL;
    p->growing += cbytes;
    pthread_mutex_unlock(&p->mu);
    l8_status st = p->prov.segment_alloc(p->prov.user, cbytes, &ptr);
    pthread_mutex_lock(&p->mu);
    p->growing -= cbytes;
    if (st != L8_OK) {
        free(b);
        return st;
    }
    b->base = (uintptr_t)ptr;
    b->bytes = cbytes;
    b->cls = cls;
    b->streams = b->inl_streams;
    b->events = b->inl_events;
    b->cap = INLINE_STREAMS;
    if (index_insert(p, b) != 0) {
        (void)p->prov.segment_free(p->prov.user, ptr, cbytes);
        free(b);
        return L8_FAIL(L8_ERR_OOM, "no host memory for the pinned pool's block index");
    }
    p->st.reserved_bytes += cbytes;
    if (p->st.reserved_bytes > p->st.reserved_peak) p->st.reserved_peak = p->st.reserved_bytes;
    p->st.segment_allocs++;
    *out = b;
    return L8_OK;
}

/* The retry ladder: cache, new segment; on OOM wait for pending blocks,
 * try the cache again, free all cached blocks, one more new segment; and
 * while another thread is giving memory back or waiting for copies without
 * the mutex, wait for it and climb the ladder again. */
static l8_status get_block(l8_pinned *p, size_t bytes, int cls, size_t cbytes, pblock **out)
{
    l8_status st;
    for (;;) {
        (void)poll_pending(p);    /* a failed query leaves the block pending: safe */
        if ((*out = cache_pop(p, cls)) != NULL) {
            p->st.cache_hits++;
            return L8_OK;
        }
        st = new_block(p, cls, cbytes, out);
        if (st != L8_ERR_OOM) return st;
        L8_CHECK(wait_pending(p));
        if ((*out = cache_pop(p, cls)) != NULL) {
            p->st.cache_hits++;
            return L8_OK;
        }
        (void)release_cached(p, SIZE_MAX);
        l8_error_clear();   /* so the message below is the provider's, not a stale one */
        st = new_block(p, cls, cbytes, out);
        if (st != L8_ERR_OOM) return st;
        if (!p->shrinking && !p->waiting) break;
        while (p->shrinking || p->waiting) pthread_cond_wait(&p->cv, &p->mu);
    }
    if (p->memory_limit && cbytes > p->memory_limit)
        return oom_error(p, bytes, cbytes, "the class is larger than memory_limit");
    if (p->memory_limit && p->st.reserved_bytes + p->growing + cbytes > p->memory_limit)
        return oom_error(p, bytes, cbytes, p->growing
                         ? "memory_limit reached, counting other threads' allocations in flight"
                         : "memory_limit reached with no cached block left to free");
    char why[600];
    const char *said = l8_last_error()->message;
    snprintf(why, sizeof why, "the provider said: %s", said[0] ? said : "L8_ERR_OOM");
    return oom_error(p, bytes, cbytes, why);
}

/* L8_ERR_STATE while a graph capture is underway (pinned.h). */
static l8_status not_capturing(const l8_pinned *p, const char *fn)
{
    if (!__atomic_load_n(&p->capturing, __ATOMIC_ACQUIRE)) return L8_OK;
    return L8_FAIL(L8_ERR_STATE, "%s: the pinned pool cannot be used during a CUDA graph capture "
                   "(events, cuMemHostAlloc, and blocks the graph still copies from)", fn);
}

void l8_pinned_set_capturing(l8_pinned *p, int on)
{
    if (p) __atomic_store_n(&p->capturing, on ? 1 : 0, __ATOMIC_RELEASE);
}

l8_status l8_pinned_alloc(l8_pinned *p, size_t bytes, void **ptr)
{
    L8_ARG(p != NULL && ptr != NULL);
    *ptr = NULL;
    if (bytes == 0) return L8_OK;
    L8_CHECK(not_capturing(p, "l8_pinned_alloc"));
    size_t cbytes = 0;
    int cls = class_of(bytes, &cbytes);
    if (cls < 0)
        return L8_FAIL(L8_ERR_OOM, "pinned pool: %zu B is larger than the largest size class "
                       "(2^%d B)", bytes, MAX_SHIFT);
    pthread_mutex_lock(&p->mu);
    pblock *b = NULL;
    l8_status st = get_block(p, bytes, cls, cbytes, &b);
    if (st == L8_OK) {
        b->state = B_LIVE;
        b->requested = bytes;
        b->nstreams = 0;
        p->st.allocations++;
        p->st.allocated_bytes += b->bytes;
        p->st.requested_bytes += bytes;
        if (p->st.allocated_bytes > p->st.allocated_peak)
            p->st.allocated_peak = p->st.allocated_bytes;
        l8_trace_record(p->trace, L8_TRACE_PINNED_ALLOC, p->prov.device, 0, b->base, b->bytes,
                        bytes);
        *ptr = (void *)b->base;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* Record one event on each stream b was used on; events[i] goes with
 * streams[i]. On failure b keeps the events that were recorded and the
 * first error is returned. */
static l8_status record_events(l8_pinned *p, pblock *b)
{
    for (uint32_t i = 0; i < b->nstreams; i++) {
        void *ev;
        L8_CHECK(event_get(p, &ev));
        l8_status st = p->prov.event_record(p->prov.user, ev, b->streams[i]);
        if (st != L8_OK) {
            event_put(p, ev);       /* never recorded: still a usable event */
            return st;
        }
        b->events[b->nevents++] = ev;
    }
    return L8_OK;
}

l8_status l8_pinned_free(l8_pinned *p, void *ptr)
{
    L8_ARG(p != NULL);
    if (!ptr) return L8_OK;
    L8_CHECK(not_capturing(p, "l8_pinned_free"));
    pthread_mutex_lock(&p->mu);
    l8_status st = L8_OK;
    pblock *b = find_containing(p, ptr);
    if (!b || b->base != (uintptr_t)ptr || b->state != B_LIVE) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "l8_pinned_free(%p): %s", ptr,
                     !b ? "not a block of this pinned pool"
                     : b->base != (uintptr_t)ptr ? "points inside a block, not at its start"
                     : "block is not live (double free?)");
        goto out;
    }
    p->st.frees++;
    p->st.allocated_bytes -= b->bytes;
    p->st.requested_bytes -= b->requested;
    b->requested = 0;
    l8_trace_record(p->trace, L8_TRACE_PINNED_FREE, p->prov.device, 0, b->base, b->bytes,
                    b->nstreams);
    if (b->nstreams == 0) {
        cache_push(p, b);
        goto out;
    }
    st = record_events(p, b);
    b->nstreams = 0;
    p->st.pending_blocks++;
    if (st != L8_OK) {
        /* We cannot tell when the copy on the failed stream ends: keep the
         * block out of reach until empty_cache/destroy (see the banner). */
        b->state = B_STRANDED;
        b->next = p->stranded;
        p->stranded = b;
        goto out;
    }
    b->state = B_PENDING;
    b->next = NULL;
    *p->pending_tail = b;
    p->pending_tail = &b->next;
out:
    pthread_mutex_unlock(&p->mu);
    return st;
}

static int grow_streams(pblock *b)
{
    uint32_t ncap = b->cap * 2;
    l8_stream_id *s = malloc(ncap * sizeof *s);
    void **e = malloc(ncap * sizeof *e);
    if (!s || !e) {
        free(s);
        free(e);
        return -1;
    }
    memcpy(s, b->streams, b->nstreams * sizeof *s);
    block_free_arrays(b);
    b->streams = s;
    b->events = e;
    b->cap = ncap;
    return 0;
}

l8_status l8_pinned_record_stream(l8_pinned *p, void *ptr, l8_stream_id stream)
{
    L8_ARG(p != NULL && ptr != NULL);
    L8_CHECK(not_capturing(p, "l8_pinned_record_stream"));
    pthread_mutex_lock(&p->mu);
    l8_status st = L8_OK;
    pblock *b = find_containing(p, ptr);
    if (!b || b->state != B_LIVE) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "l8_pinned_record_stream(%p): %s", ptr,
                     !b ? "not inside a block of this pinned pool" : "block is not live");
        goto out;
    }
    for (uint32_t i = 0; i < b->nstreams; i++)
        if (b->streams[i] == stream) goto out;
    if (b->nstreams == b->cap && grow_streams(b) != 0) {
        st = L8_FAIL(L8_ERR_OOM, "no host memory to record stream %#llx on a pinned block",
                     (unsigned long long)stream);
        goto out;
    }
    b->streams[b->nstreams++] = stream;
out:
    pthread_mutex_unlock(&p->mu);
    return st;
}

l8_status l8_pinned_empty_cache(l8_pinned *p)
{
    L8_ARG(p != NULL);
    L8_CHECK(not_capturing(p, "l8_pinned_empty_cache"));
    pthread_mutex_lock(&p->mu);
    l8_status st = wait_pending(p);
    /* Stranded blocks: wait for what was recorded (without the mutex, as
     * the pending ones), cache them, and give everything cached back. */
    pblock *take = p->stranded, *back = NULL;
    p->stranded = NULL;
    if (take) {
        l8_status sw = wait_detached(p, take, &back);
        if (st == L8_OK) st = sw;
        while (back) {
            pblock *b = back;
            back = b->next;
            b->next = p->stranded;
            p->stranded = b;
        }
    }
    l8_status st2 = release_cached(p, SIZE_MAX);
    if (st == L8_OK) st = st2;
    pthread_mutex_unlock(&p->mu);
    return st;
}

l8_status l8_pinned_get_stats(l8_pinned *p, l8_pinned_stats *stats)
{
    L8_ARG(p != NULL && stats != NULL);
    pthread_mutex_lock(&p->mu);
    l8_pinned_stats copy = p->st;
    pthread_mutex_unlock(&p->mu);
    return l8i_stats_out(stats, &copy, sizeof copy, "l8_pinned_get_stats");
}
