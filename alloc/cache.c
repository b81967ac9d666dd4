/* cache.c - the caching device allocator (alloc.h): allocation, free,
 * segments and events. The data model described below is declared in
 * cache_internal.h; describe, visit and the invariant check in cache_check.c.
 *
 * Data model
 *   segment  one provider allocation; belongs to one pool. Its usable range
 *            [start, start + usable) is tiled exactly by a doubly linked list
 *            of blocks in address order.
 *   block    FREE (in its pool's bins), LIVE (in the pointer hash) or
 *            PENDING (freed, waiting for events recorded on the other streams
 *            that used it; in neither). A PENDING block with `held` set had an
 *            event that could not be created or recorded: it stays out of the
 *            cache until empty_cache, which is told the caller has synced.
 *   pool     one per (stream, small/large): segregated free bins (16 per
 *            power of two, sizes in 512-B units, exact below 8 KiB) with a
 *            two-level bitmap. Lookup = bin of the size, best fit in that bin,
 *            else the first non-empty bin above it (best fit inside it).
 *
 * Invariants (all verified by l8_alloc_check)
 *   - blocks tile each segment; no two address-neighbours are both FREE
 *     (freeing coalesces at once, PENDING blocks coalesce when they finish);
 *   - a block is in a bin iff it is FREE; in the hash iff it is LIVE;
 *   - the statistics equal their recomputation from the blocks (segments
 *     another thread is giving back count as reserved until they are gone);
 *   - every failing path returns before changing anything, or after a change
 *     that is itself complete and valid (a released cached segment);
 *   - no provider call that can block (segment_alloc, segment_free,
 *     event_sync) runs with the lock held, and every one of them leaves the
 *     state above whole while the lock is free ("Blocking calls" below), so
 *     the invariants hold whenever another thread takes the lock.
 *
 * Hot path (warm cache, one stream): lock, bin lookup, split, hash insert,
 * unlock; free is the mirror. Block structs come from a free list refilled in
 * slabs, the hash grows ahead of need, so no host malloc happens there, and
 * the provider is called only for segments and events. Pending events are
 * only queried there; a wait (event_sync) happens on the OOM path alone
 * (oom_ladder), after giving cached segments back has not helped.
 *
 * Large-pool segments (seg_grow, seg_policy, consolidate). Activations are
 * a stack pushed in forward and popped in backward, a little bigger or
 * smaller every step. Cut into many segments, every segment boundary loses a
 * tail and a slightly bigger step needs a new segment (PyTorch: reserved
 * about 1.3x allocated). So: (1) a new segment is at least 1/16 of what the
 * pool holds (growth is geometric, the overshoot of the last one is at most
 * about 6%); (2) when a request lands in a wholly free segment while the
 * pool has other wholly free segments, those are replaced by one segment of
 * their total size, so after the step that grew, the next one runs as one
 * contiguous stack; (3) at growth, wholly free segments too small for the
 * request are folded into the new one. (2) and (3) lower the segment count
 * and only growth raises it, so provider calls stay bounded by growths. On
 * the replay trace (tools/replay.h) this gives reserved/allocated peaks of
 * 1.01-1.07 (1.05 for the default config).
 *
 * Errors: l8_alloc_free after a failed event create/record still takes the
 * block (it is held, see above) and returns the error; the pointer is no
 * longer live either way, and `frees` counts it.
 *
 * Trace events (when cfg->trace is set): ALLOC (aux = requested),
 * FREE_REQUESTED (aux = requested), FREE_COMPLETED, SEGMENT_ALLOC and
 * SEGMENT_FREE (aux = reserved bytes after the call), OOM (size = request,
 * aux = reserved bytes).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "alloc/cache_internal.h"
#include "runtime/config_internal.h"

static size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* ---- bins ---- */

static HOT void bin_insert(pool *p, block *b)
{
    unsigned i = bin_of(b->size);
    b->bin = (uint16_t)i;
    b->fprev = NULL;
    b->fnext = p->bins[i];
    if (b->fnext) b->fnext->fprev = b;
    p->bins[i] = b;
    p->map[i >> 6] |= 1ull << (i & 63);
    p->summary |= 1ull << (i >> 6);
    p->nfree++;
}

static HOT void bin_remove(pool *p, block *b)
{
    unsigned i = b->bin;
    if (b->fprev) b->fprev->fnext = b->fnext;
    else p->bins[i] = b->fnext;
    if (b->fnext) b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
    if (!p->bins[i]) {
        p->map[i >> 6] &= ~(1ull << (i & 63));
        if (!p->map[i >> 6]) p->summary &= ~(1ull << (i >> 6));
    }
    p->nfree--;
}

/* First non-empty bin >= from, or NBINS. */
static HOT unsigned next_bin(const pool *p, unsigned from)
{
    if (from >= NBINS) return NBINS;
    unsigned w = from >> 6;
    uint64_t bits = p->map[w] & (~0ull << (from & 63));
    if (bits) return w * 64 + (unsigned)__builtin_ctzll(bits);
    uint64_t s = w + 1 < 64 ? p->summary & (~0ull << (w + 1)) : 0;
    if (!s) return NBINS;
    w = (unsigned)__builtin_ctzll(s);
    return w * 64 + (unsigned)__builtin_ctzll(p->map[w]);
}

/* Smallest free block >= size, lowest address on ties. */
static HOT block *pool_find(const pool *p, size_t size)
{
    unsigned i = bin_of(size);
    block *best = NULL;
    for (block *x = p->bins[i]; x; x = x->fnext)
        if (x->size >= size &&
            (!best || x->size < best->size || (x->size == best->size && x->addr < best->addr)))
            best = x;
    if (best) return best;
    i = next_bin(p, i + 1);
    if (i >= NBINS) return NULL;
    best = p->bins[i];   /* every block here is larger than size */
    for (block *x = best->fnext; x; x = x->fnext)
        if (x->size < best->size || (x->size == best->size && x->addr < best->addr)) best = x;
    return best;
}

/* ---- pointer hash (live blocks): linear probing, backward-shift deletion ---- */

static HOT void hash_put(l8_alloc *a, block *b)
{
    size_t mask = a->hcap - 1;
    size_t i = hash_idx(a, b->addr);
    while (a->htab[i].key) i = (i + 1) & mask;
    a->htab[i].key = b->addr;
    a->htab[i].b = b;
    a->hcount++;
}

static HOT void hash_del(l8_alloc *a, size_t i)
{
    size_t mask = a->hcap - 1;
    for (size_t j = (i + 1) & mask; a->htab[j].key; j = (j + 1) & mask) {
        size_t k = hash_idx(a, a->htab[j].key);
        /* Entry j may move into the hole at i unless its home k lies
         * cyclically in (i, j]. */
        int stays = i <= j ? (k > i && k <= j) : (k > i || k <= j);
        if (!stays) {
            a->htab[i] = a->htab[j];
            i = j;
        }
    }
    a->htab[i].key = 0;
    a->htab[i].b = NULL;
    a->hcount--;
}

/* Double the hash. Host OOM: nothing changed. */
static l8_status hash_grow(l8_alloc *a)
{
    size_t ncap = a->hcap * 2;
    hslot *nt = calloc(ncap, sizeof *nt);
    if (!nt) return L8_FAIL(L8_ERR_OOM, "allocator: no host memory for a %zu-slot hash", ncap);
    hslot *old = a->htab;
    size_t ocap = a->hcap;
    a->htab = nt;
    a->hcap = ncap;
    a->hshift--;
    a->hcount = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key) hash_put(a, old[i].b);
    free(old);
    return L8_OK;
}

/* Make room for one more entry (load <= 1/2). Host OOM: nothing changed. */
static HOT l8_status hash_reserve(l8_alloc *a)
{
    return (a->hcount + 1) * 2 <= a->hcap ? L8_OK : hash_grow(a);
}

/* ---- block structs ---- */

/* One more slab of block structs. Host OOM: nothing changed. */
static l8_status spare_refill(l8_alloc *a)
{
    slab *s = calloc(1, sizeof *s);
    if (!s) return L8_FAIL(L8_ERR_OOM, "allocator: no host memory for block metadata");
    s->next = a->slabs;
    a->slabs = s;
    for (size_t i = 0; i < SLAB_BLOCKS; i++) {
        s->blocks[i].fnext = a->spare;
        a->spare = &s->blocks[i];
    }
    a->nspare += SLAB_BLOCKS;
    return L8_OK;
}

/* At least n spare block structs (n <= SLAB_BLOCKS). Host OOM: nothing changed. */
static HOT l8_status spare_reserve(l8_alloc *a, size_t n)
{
    return a->nspare >= n ? L8_OK : spare_refill(a);
}

/* Take a block struct off the spare list (reserved by the caller) without
 * counting it in a segment yet: seg_new holds one across the provider call,
 * so that publishing the segment afterwards cannot fail. */
static HOT block *block_claim(l8_alloc *a)
{
    block *b = a->spare;
    a->spare = b->fnext;
    a->nspare--;
    return b;
}

static void block_unclaim(l8_alloc *a, block *b)
{
    b->fnext = a->spare;
    a->spare = b;
    a->nspare++;
}

/* A claimed struct becomes a block of some segment. */
static HOT block *block_init(l8_alloc *a, block *b)
{
    /* Field by field: a memset here was a tenth of the hot path. */
    b->requested = 0;
    b->prev = b->next = b->fprev = b->fnext = NULL;
    b->xs = b->xs_inline;
    b->nxs = 0;
    b->capxs = 2;
    b->events = 0;
    b->held = 0;
    b->gheld = 0;
    a->nblocks++;
    return b;
}

/* Caller has reserved it. */
static HOT block *block_get(l8_alloc *a)
{
    return block_init(a, block_claim(a));
}

static HOT void block_put(l8_alloc *a, block *b)
{
    if (b->xs != b->xs_inline) free(b->xs);
    b->xs = NULL;
    b->fnext = a->spare;
    a->spare = b;
    a->nspare++;
    a->nblocks--;
}

/* ---- statistics ---- */

/* Change a segment's busy count and free bytes, keeping inactive_split (free
 * bytes of segments that are not wholly free) in step. */
static HOT void seg_account(l8_alloc *a, segment *s, int dbusy, size_t free_add, size_t free_sub)
{
    if (s->busy) a->st.inactive_split_bytes -= s->free_bytes;
    else s->pool->nidle--;
    s->busy = (size_t)((long long)s->busy + dbusy);
    s->free_bytes = s->free_bytes + free_add - free_sub;
    if (s->busy) a->st.inactive_split_bytes += s->free_bytes;
    else s->pool->nidle++;
}

static HOT void update_peaks(l8_alloc *a)
{
    l8_alloc_stats *s = &a->st;
    if (s->allocated_bytes > s->allocated_peak) s->allocated_peak = s->allocated_bytes;
    if (s->requested_bytes > s->requested_peak) s->requested_peak = s->requested_bytes;
    if (s->reserved_bytes > s->reserved_peak) s->reserved_peak = s->reserved_bytes;
    if (s->active_bytes > s->active_peak) s->active_peak = s->active_bytes;
    if (s->inactive_split_bytes > s->inactive_split_peak)
        s->inactive_split_peak = s->inactive_split_bytes;
}

/* A free lowers every statistic but inactive_split. */
static HOT void update_peaks_free(l8_alloc *a)
{
    l8_alloc_stats *s = &a->st;
    if (s->inactive_split_bytes > s->inactive_split_peak)
        s->inactive_split_peak = s->inactive_split_bytes;
}

/* ---- pools ---- */

/* The graph pool id for an allocation on stream: the capture's when the
 * stream is captured, else 0. One compare when no capture is underway. */
static HOT uint32_t route(const l8_alloc *a, l8_stream_id stream)
{
    if (!a->cap_gid) return 0;
    for (int i = 0; i < a->ncap; i++)
        if (a->cap_streams[i] == stream) return a->cap_gid;
    return 0;
}

static l8_status pool_get(l8_alloc *a, l8_stream_id stream, int small, uint32_t gid, pool **out)
{
    pool *p = a->last[small];
    if (p && p->stream == stream && p->gid == gid) {
        *out = p;
        return L8_OK;
    }
    for (size_t i = 0; i < a->npools; i++) {
        p = a->pools[i];
        if (p->stream == stream && p->small == small && p->gid == gid && !p->released) {
            a->last[small] = p;
            *out = p;
            return L8_OK;
        }
    }
    pool *home = NULL;
    if (gid) L8_CHECK(pool_get(a, stream, small, 0, &home));   /* where its segments go later */
    if (a->npools == a->cap_pools) {
        size_t ncap = a->cap_pools ? a->cap_pools * 2 : 8;
        pool **np = realloc(a->pools, ncap * sizeof *np);
        if (!np) return L8_FAIL(L8_ERR_OOM, "allocator: no host memory for a pool");
        a->pools = np;
        a->cap_pools = ncap;
    }
    p = calloc(1, sizeof *p);
    if (!p) return L8_FAIL(L8_ERR_OOM, "allocator: no host memory for a pool");
    p->stream = stream;
    p->small = small;
    p->gid = gid;
    p->home = home;
    a->pools[a->npools++] = p;
    a->last[small] = p;
    *out = p;
    return L8_OK;
}

/* ---- blocks: take, release ---- */

/* Split rule. Small pool: any 512-B remainder is useful. Large pool: only a
 * remainder above 1 MiB can serve a large-pool request, so a smaller one
 * would be a splinter that only waits for coalescing; it rides with the
 * block instead (at most 1 MiB of slack on a > 1 MiB block). */
static HOT int should_split(const pool *p, size_t remainder)
{
    return p->small ? remainder >= MIN_BLOCK : remainder > SMALL_SIZE;
}

/* Hand out free block b for `size` (rounded) bytes. Needs one spare block
 * struct and one hash slot reserved. */
static HOT void take(l8_alloc *a, pool *p, block *b, size_t size, size_t requested)
{
    segment *s = b->seg;
    bin_remove(p, b);
    size_t rem = b->size - size;
    if (should_split(p, rem)) {
        block *r = block_get(a);
        r->addr = b->addr + size;
        r->size = rem;
        r->seg = s;
        r->state = B_FREE;
        r->prev = b;
        r->next = b->next;
        if (b->next) b->next->prev = r;
        b->next = r;
        b->size = size;
        s->nblocks++;
        bin_insert(p, r);
    }
    b->state = B_LIVE;
    b->requested = requested;
    b->nxs = 0;
    seg_account(a, s, +1, 0, b->size);
    hash_put(a, b);
    a->st.allocated_bytes += b->size;
    a->st.requested_bytes += requested;
    a->st.active_bytes += b->size;
    a->st.live_blocks++;
    a->st.allocations++;
    TRACE(a, L8_TRACE_ALLOC, p->stream, b->addr, b->size, requested);
}

/* Merge free neighbour n into b (n follows b). */
static HOT void absorb_next(l8_alloc *a, block *b, block *n)
{
    bin_remove(b->seg->pool, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    b->seg->nblocks--;
    block_put(a, n);
}

/* ---- graph pools: moving wholly free segments ---- */

/* Drop an empty, released graph pool. */
static void pool_drop(l8_alloc *a, pool *p)
{
    for (size_t i = 0; i < a->npools; i++)
        if (a->pools[i] == p) {
            a->pools[i] = a->pools[--a->npools];
            break;
        }
    if (a->last[0] == p) a->last[0] = NULL;
    if (a->last[1] == p) a->last[1] = NULL;
    free(p);
}

/* Move wholly free segment s (one FREE block) from its pool to pool `to`. */
static void seg_move(l8_alloc *a, segment *s, pool *to)
{
    pool *from = s->pool;
    bin_remove(from, s->head);
    from->nidle--;
    from->reserved -= s->bytes;
    if (from->gid) a->st.graph_reserved_bytes -= s->bytes;
    s->pool = to;
    to->nidle++;
    to->reserved += s->bytes;
    if (to->gid) a->st.graph_reserved_bytes += s->bytes;
    bin_insert(to, s->head);
}

/* A released graph pool's segment became wholly free: back to the ordinary
 * pool it came from; the pool goes when it holds nothing more. */
static void seg_go_home(l8_alloc *a, segment *s)
{
    pool *p = s->pool;
    seg_move(a, s, p->home);
    if (p->reserved == 0 && p->pins == 0) pool_drop(a, p);
}

/* A LIVE or PENDING block becomes FREE: coalesce and put it in its bin. */
static HOT void release_block(l8_alloc *a, block *b)
{
    segment *s = b->seg;
    pool *p = s->pool;
    TRACE(a, L8_TRACE_FREE_COMPLETED, p->stream, b->addr, b->size, 0);
    a->st.active_bytes -= b->size;
    seg_account(a, s, -1, b->size, 0);
    b->state = B_FREE;
    b->held = 0;
    b->gheld = 0;
    b->events = 0;
    b->requested = 0;
    b->nxs = 0;
    if (b->next && b->next->state == B_FREE) absorb_next(a, b, b->next);
    if (b->prev && b->prev->state == B_FREE) {
        block *pr = b->prev;
        bin_remove(p, pr);
        pr->size += b->size;
        pr->next = b->next;
        if (b->next) b->next->prev = pr;
        s->nblocks--;
        block_put(a, b);
        b = pr;
    }
    bin_insert(p, b);
    if (p->released && s->busy == 0) seg_go_home(a, s);
}

/* ---- pending events ---- */

/* The end of a provider call made without the lock (see "Blocking calls"
 * below): wake the allocations waiting for one before they give up. */
static void call_done(l8_alloc *a)
{
    a->inflight--;
    a->done_gen++;
    pthread_cond_broadcast(&a->cv);
}

/* Event e has completed: unlink it, keep its event for reuse, and give its
 * block back when that was its last event. */
static void pend_done(l8_alloc *a, pend *e)
{
    if (e->prev) e->prev->next = e->next;
    else a->pend_head = e->next;
    if (e->next) e->next->prev = e->prev;
    else a->pend_tail = e->prev;
    block *b = e->b;
    e->b = NULL;
    e->prev = NULL;
    e->next = a->pend_spare;
    a->pend_spare = e;
    if (--b->events == 0 && !b->held) release_block(a, b);
}

/* Query every recorded event (never waits); blocks whose events are all
 * done go back to their pools. Events another thread is waiting on are
 * left to it; a failing query leaves its event pending, so nothing is
 * handed out early. */
static void pending_poll(l8_alloc *a)
{
    pend *e = a->pend_head;
    while (e) {
        pend *next = e->next;
        int done = 0;
        if (!e->waiting && a->prov.event_query(a->prov.user, e->event, &done) == L8_OK && done)
            pend_done(a, e);
        e = next;
    }
}

/* Wait for every pending event no other thread waits on, without the lock
 * (event_sync is cuEventSynchronize). Called and returns with the lock held.
 * While unlocked the events stay in the list marked `waiting` (their blocks
 * PENDING, so l8_alloc_check still holds); afterwards the completed ones
 * are processed and a failed wait leaves its event pending. Returns the
 * first failure; *waited (optional) says whether there was anything. */
static l8_status pending_wait(l8_alloc *a, int *waited)
{
    pend *list = NULL;
    for (pend *e = a->pend_head; e; e = e->next)
        if (!e->waiting) {
            e->waiting = 1;
            e->wnext = list;
            list = e;
        }
    if (waited) *waited = list != NULL;
    if (!list) return L8_OK;
    a->inflight++;
    pthread_mutex_unlock(&a->mu);
    for (pend *e = list; e; e = e->wnext) e->wst = a->prov.event_sync(a->prov.user, e->event);
    pthread_mutex_lock(&a->mu);
    call_done(a);
    l8_status first = L8_OK;
    while (list) {
        pend *e = list;
        list = e->wnext;
        e->wnext = NULL;
        e->waiting = 0;
        if (e->wst == L8_OK) pend_done(a, e);
        else if (first == L8_OK) first = e->wst;
    }
    return first;
}

/* A node with a created event, from the spare list or new. */
static l8_status pend_get(l8_alloc *a, pend **out)
{
    pend *e = a->pend_spare;
    if (e) {
        a->pend_spare = e->next;
        e->next = NULL;
        *out = e;
        return L8_OK;
    }
    e = calloc(1, sizeof *e);
    if (!e) return L8_FAIL(L8_ERR_OOM, "allocator: no host memory for an event record");
    l8_status st = a->prov.event_create(a->prov.user, &e->event);
    if (st != L8_OK) {
        free(e);
        return st;
    }
    *out = e;
    return L8_OK;
}

/* Record one event per extra stream of b (now PENDING). On any failure b is
 * held out of the cache and the first failure is returned. */
static l8_status pending_start(l8_alloc *a, block *b)
{
    l8_status first = L8_OK;
    b->state = B_PENDING;
    b->events = 0;
    for (uint32_t i = 0; i < b->nxs; i++) {
        pend *e = NULL;
        l8_status st = pend_get(a, &e);
        if (st == L8_OK) {
            st = a->prov.event_record(a->prov.user, e->event, b->xs[i]);
            if (st != L8_OK) {
                e->next = a->pend_spare;
                a->pend_spare = e;
            }
        }
        if (st != L8_OK) {
            b->held = 1;
            if (first == L8_OK) first = st;
            continue;
        }
        e->b = b;
        e->next = NULL;
        e->prev = a->pend_tail;
        e->waiting = 0;
        if (a->pend_tail) a->pend_tail->next = e;
        else a->pend_head = e;
        a->pend_tail = e;
        b->events++;
    }
    b->nxs = 0;
    return first;
}

/* ---- segments ----
 *
 * Blocking calls. segment_alloc (cuMemAlloc), segment_free (cuMemFree, which
 * may synchronize the device) and event_sync (cuEventSynchronize) never run
 * with a->mu held, so that an allocation on one stream never queues behind
 * another thread's wait for the device. The caller, holding the lock,
 * detaches what the call works on, so that no other thread can see it, and
 * keeps the state whole for l8_alloc_check; unlocks; calls; relocks and
 * publishes the result:
 *   - a segment being given back (seg_detach) is in no pool and not in the
 *     segment list; its bytes stay in reserved_bytes and `segments` (the
 *     device still holds them; ndying and dying_bytes say how much) and its
 *     one FREE block stays with it, in no bin. When segment_free fails, the
 *     segment is cached again as it was (seg_reap): nothing is lost.
 *   - a segment being obtained (seg_new) counts only in a->growing, so that
 *     concurrent growth never passes the memory limit; it is published
 *     whole, with its block struct claimed before the lock was released.
 *   - an event being waited on (pending_wait) stays in the pending list,
 *     marked `waiting`: other threads neither query nor recycle it.
 *   - a pool used across the unlock is pinned (pool->pins): a graph pool
 *     released meanwhile is dropped only by the last thread to unpin it.
 * Each such call counts in a->inflight; its end bumps done_gen and
 * broadcasts a->cv, where an allocation about to fail waits (oom_ladder). */

static int seg_wholly_free(const segment *s)
{
    return s->busy == 0;
}

/* Would `bytes` more pass the memory limit? Segments being obtained count,
 * and so do those being given back until the provider has taken them. */
static int over_limit(const l8_alloc *a, size_t bytes)
{
    if (!a->memory_limit) return 0;
    size_t held = a->st.reserved_bytes + a->growing;   /* <= memory_limit */
    return bytes > a->memory_limit || held > a->memory_limit - bytes;
}

static void seg_link(l8_alloc *a, segment *s)
{
    s->prev = NULL;
    s->next = a->segs;
    if (a->segs) a->segs->prev = s;
    a->segs = s;
}

static void seg_unlink(l8_alloc *a, segment *s)
{
    if (s->prev) s->prev->next = s->next;
    else a->segs = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

/* Wholly free segment s, whose one FREE block is in no bin, becomes a
 * cached segment of its pool (a new one, or one segment_free refused). */
static void seg_publish(l8_alloc *a, segment *s)
{
    pool *p = s->pool;
    seg_link(a, s);
    bin_insert(p, s->head);
    p->nidle++;
    p->reserved += s->bytes;
    if (p->gid) a->st.graph_reserved_bytes += s->bytes;
}

/* Get a segment of `bytes` for pool p that can hold `need` bytes and cache
 * it (one free block). L8_ERR_OOM without a provider call when the memory
 * limit would be passed. Called and returns with the lock held, which is
 * released around the provider; the segment is published before the lock
 * is released again, so the caller can take its block. p must be pinned. */
static l8_status seg_new(l8_alloc *a, pool *p, size_t bytes, size_t need, segment **out)
{
    L8_CHECK(spare_reserve(a, 1));
    block *hb = block_claim(a);
    segment *s = NULL;
    l8_status st = L8_OK;
    for (int attempt = 0;; attempt++) {
        if (over_limit(a, bytes)) {
            st = L8_FAIL(L8_ERR_OOM, "allocator: %zu more bytes would pass the memory limit",
                         bytes);
            break;
        }
        a->growing += bytes;
        a->inflight++;
        pthread_mutex_unlock(&a->mu);
        int fits = 0;
        void *ptr = NULL;
        if (!s) s = calloc(1, sizeof *s);
        st = s ? a->prov.segment_alloc(a->prov.user, bytes, &ptr)
               : L8_FAIL(L8_ERR_OOM, "allocator: no host memory for a segment record");
        if (st == L8_OK && !ptr)
            st = L8_FAIL(L8_ERR_INTERNAL, "provider %s returned L8_OK and a NULL segment",
                         a->prov.name ? a->prov.name : "?");
        if (st == L8_OK) {
            /* alloc.h lets a provider align to 256 B only; blocks promise 512. */
            s->base = (uintptr_t)ptr;
            s->bytes = bytes;
            s->start = round_up(s->base, MIN_BLOCK);
            s->usable = (bytes - (s->start - s->base)) & ~(MIN_BLOCK - 1);
            fits = s->usable >= need;
            if (!fits) (void)a->prov.segment_free(a->prov.user, ptr, bytes);
        }
        pthread_mutex_lock(&a->mu);
        a->growing -= bytes;
        call_done(a);
        if (st != L8_OK || fits) break;
        bytes += LARGE_ROUND;   /* once more, with room to align */
        if (attempt == 1) {
            st = L8_FAIL(L8_ERR_OOM, "allocator: provider segment misaligned, too small");
            break;
        }
    }
    if (st != L8_OK) {
        block_unclaim(a, hb);
        free(s);
        return st;
    }
    s->pool = p;
    block *b = block_init(a, hb);
    b->addr = s->start;
    b->size = s->usable;
    b->seg = s;
    b->state = B_FREE;
    s->head = b;
    s->nblocks = 1;
    s->free_bytes = s->usable;
    seg_publish(a, s);
    a->st.reserved_bytes += bytes;
    a->st.segments++;
    a->st.segment_allocs++;
    TRACE(a, L8_TRACE_SEGMENT_ALLOC, p->stream, s->base, bytes, a->st.reserved_bytes);
    *out = s;
    return L8_OK;
}

/* Detach every wholly free ordinary segment (of pool `only`, or all when
 * NULL) whose usable size is below `below` (0: any) onto *list, to be given
 * back without the lock. Returns how many. */
static size_t seg_detach(l8_alloc *a, pool *only, size_t below, segment **list)
{
    size_t n = 0;
    segment *s = a->segs;
    while (s) {
        segment *next = s->next;
        pool *p = s->pool;
        if (seg_wholly_free(s) && !p->gid && (!only || p == only) &&
            (!below || s->usable < below)) {
            bin_remove(p, s->head);
            p->nidle--;
            p->reserved -= s->bytes;
            seg_unlink(a, s);
            s->dnext = *list;
            *list = s;
            a->ndying++;
            a->dying_bytes += s->bytes;
            n++;
        }
        s = next;
    }
    return n;
}

/* Give detached segments back to the provider, without the lock (called
 * and returns with it held). A segment the provider refuses is cached again
 * as it was. Returns the first failure; adds the bytes given back to
 * *freed when non-NULL. */
static l8_status seg_give_back(l8_alloc *a, segment *list, size_t *freed)
{
    if (!list) return L8_OK;
    a->inflight++;
    pthread_mutex_unlock(&a->mu);
    for (segment *s = list; s; s = s->dnext)
        s->fst = a->prov.segment_free(a->prov.user, (void *)s->base, s->bytes);
    pthread_mutex_lock(&a->mu);
    l8_status first = L8_OK;
    while (list) {
        segment *s = list;
        list = s->dnext;
        s->dnext = NULL;
        a->ndying--;
        a->dying_bytes -= s->bytes;
        if (s->fst != L8_OK) {
            if (first == L8_OK) first = s->fst;
            seg_publish(a, s);
            continue;
        }
        a->st.reserved_bytes -= s->bytes;
        a->st.segments--;
        a->st.segment_frees++;
        TRACE(a, L8_TRACE_SEGMENT_FREE, s->pool->stream, s->base, s->bytes,
              a->st.reserved_bytes);
        if (freed) *freed += s->bytes;
        block_put(a, s->head);
        free(s);
    }
    call_done(a);   /* after the accounting: a waiter wakes to the new state */
    return first;
}

/* Give back every wholly free ordinary segment (of pool `only`, or all when
 * NULL) smaller than `below` (0: any). */
static l8_status seg_release_free(l8_alloc *a, pool *only, size_t below, size_t *freed)
{
    segment *list = NULL;
    if (!seg_detach(a, only, below, &list)) return L8_OK;
    return seg_give_back(a, list, freed);
}

/* Segment size for `size` in pool p: (big, exact). */
static void seg_policy(const pool *p, size_t size, size_t merged, size_t *big, size_t *exact)
{
    if (p->small) {
        *big = *exact = SMALL_SEGMENT;
        return;
    }
    size_t e = round_up(size, LARGE_ROUND);
    size_t geo = (p->reserved + merged) / GROW_DIV;
    if (geo > GROW_CAP) geo = GROW_CAP;
    size_t want = size + merged;
    if (want < geo) want = geo;
    if (size < MID_LIMIT && want < MID_SEGMENT) want = MID_SEGMENT;
    *exact = e;
    *big = round_up(want, LARGE_ROUND);
}

/* Add a segment that can hold `size`, preferring the policy's big size. */
static l8_status seg_grow(l8_alloc *a, pool *p, size_t size, segment **out)
{
    size_t merged = 0;
    if (!p->small) {
        /* Wholly free segments here are all smaller than size (else
         * pool_find would have used them): fold them into the new one. */
        l8_status st = seg_release_free(a, p, size, &merged);
        if (st != L8_OK) merged = 0;   /* keep going: those that failed stay cached */
    }
    size_t big, exact;
    seg_policy(p, size, merged, &big, &exact);
    l8_status st = L8_ERR_OOM;
    if (big > exact) st = seg_new(a, p, big, size, out);
    if (st == L8_ERR_OOM) st = seg_new(a, p, exact, size, out);
    return st;
}

/* Large pool: the best fit lies in a wholly free segment and the pool has
 * other wholly free segments, i.e. it is between two waves of a stack-like
 * pattern (a training step ended, and an earlier one made it grow). Replace
 * the idle segments by one of their total size, so that the next wave is one
 * contiguous stack instead of a stack per segment that loses each segment's
 * tail. Each call lowers the pool's segment count and only growth raises it,
 * so this costs at most one provider alloc (and the frees) per growth: rare
 * once warm. On failure to get the merged segment, *out is NULL and the
 * caller grows as usual (the idle memory went back to the provider first,
 * so nothing is lost). */
static void consolidate(l8_alloc *a, pool *p, size_t size, block **out)
{
    *out = NULL;
    size_t freed = 0;
    (void)seg_release_free(a, p, 0, &freed);
    segment *s = NULL;
    if (freed >= size && seg_new(a, p, round_up(freed, LARGE_ROUND), size, &s) == L8_OK)
        *out = s->head;
}

/* Record an OOM and return L8_ERR_OOM with the state in the message. */
static l8_status oom_fail(l8_alloc *a, size_t bytes, l8_stream_id stream, const char *why)
{
    a->st.ooms++;
    TRACE(a, L8_TRACE_OOM, stream, 0, bytes, a->st.reserved_bytes);
    char state[DESCRIBE_OOM];
    size_t len = l8i_alloc_describe_locked(a, state, sizeof state);
    if (len >= sizeof state) memcpy(state + sizeof state - 5, "...\n", 5);
    char sz[32];
    l8i_fmt_bytes(sz, sizeof sz, bytes);
    return L8_FAIL(L8_ERR_OOM, "out of memory: cannot allocate %zu bytes (%s) on stream 0x%llx "
                   "(%s); state: %s", bytes, sz, (unsigned long long)stream, why, state);
}

/* ---- public API ---- */

void l8_alloc_config_init(l8_alloc_config *cfg)
{
    if (cfg) *cfg = (l8_alloc_config)L8_ALLOC_CONFIG_INIT;
}

l8_status l8_alloc_create(const l8_alloc_config *cfg, const l8_segment_provider *prov,
                          l8_alloc **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(prov != NULL);
    l8_segment_provider pv = { .size = sizeof pv };
    L8I_CONFIG_COPY(pv, prov, "l8_alloc_create", "sizeof(l8_segment_provider)");
    prov = &pv;
    L8_ARG(prov->segment_alloc && prov->segment_free && prov->event_create &&
           prov->event_record && prov->event_query && prov->event_sync && prov->event_destroy);
    l8_alloc_config c = L8_ALLOC_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_alloc_create", "L8_ALLOC_CONFIG_INIT");
    l8_status st = L8_OK;
    l8_alloc *a = calloc(1, sizeof *a);
    if (!a) return L8_FAIL(L8_ERR_OOM, "allocator: no host memory");
    a->prov = *prov;
    a->memory_limit = c.memory_limit;
    a->trace = c.trace;
    a->st.size = sizeof a->st;
    a->hcap = HASH_MIN;
    a->hshift = 64 - 10;
    a->htab = calloc(a->hcap, sizeof *a->htab);
    if (!a->htab) {
        st = L8_FAIL(L8_ERR_OOM, "allocator: no host memory");
        goto fail;
    }
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        st = L8_FAIL(L8_ERR_OOM, "allocator: pthread_mutex_init failed");
        goto fail;
    }
    if (pthread_cond_init(&a->cv, NULL) != 0) {
        pthread_mutex_destroy(&a->mu);
        st = L8_FAIL(L8_ERR_OOM, "allocator: pthread_cond_init failed");
        goto fail;
    }
    *out = a;
    return L8_OK;
fail:
    free(a->htab);
    free(a);
    return st;
}

static void pend_free_list(l8_alloc *a, pend *e)
{
    while (e) {
        pend *next = e->next;
        a->prov.event_destroy(a->prov.user, e->event);
        free(e);
        e = next;
    }
}

void l8_alloc_destroy(l8_alloc *a)
{
    if (!a) return;
    /* No other call may be in progress (alloc.h), so nothing is detached or
     * waited on elsewhere and no lock is needed: the waits and frees below
     * block only this thread. */
    for (pend *e = a->pend_head; e; e = e->next) (void)a->prov.event_sync(a->prov.user, e->event);
    /* Events whose wait failed are destroyed anyway: the memory goes too. */
    pend_free_list(a, a->pend_head);
    pend_free_list(a, a->pend_spare);
    while (a->segs) {
        segment *s = a->segs;
        a->segs = s->next;
        TRACE(a, L8_TRACE_SEGMENT_FREE, s->pool->stream, s->base, s->bytes,
              a->st.reserved_bytes - s->bytes);
        a->st.reserved_bytes -= s->bytes;
        (void)a->prov.segment_free(a->prov.user, (void *)s->base, s->bytes);
        for (block *b = s->head; b; b = b->next)
            if (b->xs && b->xs != b->xs_inline) free(b->xs);
        free(s);
    }
    while (a->slabs) {
        slab *s = a->slabs;
        a->slabs = s->next;
        free(s);
    }
    for (size_t i = 0; i < a->npools; i++) free(a->pools[i]);
    free(a->pools);
    free(a->gids);
    free(a->htab);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* A captured allocation that its graph pool cannot serve: adopt the
 * smallest wholly free ordinary segment of the same kind that fits. Never a
 * provider call: L8_ERR_STATE when there is none. */
static l8_status graph_adopt(l8_alloc *a, pool *p, size_t size, size_t bytes, l8_stream_id stream,
                             block **out)
{
    segment *best = NULL;
    for (segment *s = a->segs; s; s = s->next)
        if (seg_wholly_free(s) && !s->pool->gid && s->pool->small == p->small &&
            s->usable >= size && (!best || s->usable < best->usable))
            best = s;
    if (!best) {
        a->st.capture_refusals++;
        char sz[32];
        l8i_fmt_bytes(sz, sizeof sz, bytes);
        return L8_FAIL(L8_ERR_STATE, "allocator: %zu bytes (%s) on stream 0x%llx during a graph "
                       "capture would need a new segment from the driver, which a capture must "
                       "not call: run the captured work once eagerly first, so the cache holds "
                       "free segments the graph can take", bytes, sz, (unsigned long long)stream);
    }
    seg_move(a, best, p);
    a->st.cache_hits++;
    *out = best->head;
    return L8_OK;
}

/* Times an allocation about to fail waits for other threads' provider
 * calls to end and tries again (oom_ladder, step 3). */
#define OOM_ROUNDS 8

/* Out of memory: growing failed. In order, each followed by another try:
 * (1) give every wholly free cached segment back to the provider; (2) wait
 * for the pending cross-stream frees (their events); (3) while other
 * threads' provider calls are in flight (segments being given back or
 * obtained, events being waited on), wait for one to end. Then L8_ERR_OOM
 * with the state. Called and returns with the lock held; every provider
 * call and wait runs without it. p is pinned. */
static l8_status oom_ladder(l8_alloc *a, pool *p, size_t size, size_t bytes, l8_stream_id stream,
                            block **out)
{
    char why[256];
    snprintf(why, sizeof why, "%s", l8_last_error()->message);
    a->st.retries++;
    int waited = 0, rounds = 0;
    for (;;) {
        block *b = pool_find(p, size);   /* what came back while the lock was free */
        if (b) {
            a->st.cache_hits++;
            *out = b;
            return L8_OK;
        }
        (void)seg_release_free(a, NULL, 0, NULL);   /* failures stay cached */
        segment *s = NULL;
        l8_status st = seg_grow(a, p, size, &s);
        if (st == L8_OK) {
            *out = s->head;
            return L8_OK;
        }
        if (st != L8_ERR_OOM) return st;
        snprintf(why, sizeof why, "%s", l8_last_error()->message);
        if (a->cap_strict) break;   /* a capture began meanwhile: no event may be touched */
        if (!waited) {
            int any = 0;
            waited = 1;
            (void)pending_wait(a, &any);   /* a failed wait leaves its block pending */
            if (any) continue;
        }
        if (!a->inflight || rounds++ == OOM_ROUNDS) break;
        uint64_t gen = a->done_gen;
        while (a->done_gen == gen) pthread_cond_wait(&a->cv, &a->mu);
    }
    return oom_fail(a, bytes, stream, why);
}

/* The slow path of a malloc: no free block of p fits `size` (b is NULL), or
 * the best fit b lies in a wholly free large segment while p has other idle
 * ones (consolidate). Grow, else go through the OOM ladder. Called and
 * returns with the lock held (released around provider calls); p is pinned. */
static l8_status find_or_grow(l8_alloc *a, pool *p, size_t size, size_t bytes,
                              l8_stream_id stream, block *b, block **out)
{
    if (p->gid) {
        if (a->cap_strict) return graph_adopt(a, p, size, bytes, stream, out);
        /* a warm-up: the pool grows as any pool does (no consolidation) */
        segment *gs = NULL;
        L8_CHECK(seg_grow(a, p, size, &gs));
        *out = gs->head;
        return L8_OK;
    }
    if (b) {
        consolidate(a, p, size, &b);
        if (b) {
            *out = b;
            return L8_OK;
        }
    }
    segment *s = NULL;
    l8_status st = seg_grow(a, p, size, &s);
    if (st == L8_OK) {
        *out = s->head;
        return L8_OK;
    }
    if (st != L8_ERR_OOM) return st;
    if (a->cap_strict)   /* waiting on events is illegal during a capture */
        return oom_fail(a, bytes, stream, l8_last_error()->message);
    return oom_ladder(a, p, size, bytes, stream, out);
}

/* find_or_grow with p pinned; the lock may have been released, so the
 * metadata take() needs is reserved again. A failure there leaves the
 * block found free in its (cached) segment: a valid state. Kept out of
 * line, so that the hit path of l8_alloc_malloc stays small. */
__attribute__((noinline, cold)) static l8_status malloc_slow(l8_alloc *a, pool *p, size_t size,
                                                             size_t bytes, l8_stream_id stream,
                                                             block **b)
{
    p->pins++;
    l8_status st = find_or_grow(a, p, size, bytes, stream, *b, b);
    if (st == L8_OK && (spare_reserve(a, 1) != L8_OK || hash_reserve(a) != L8_OK)) {
        segment *s = (*b)->seg;
        if (p->released && seg_wholly_free(s)) seg_go_home(a, s);
        st = oom_fail(a, bytes, stream, "host memory for allocator metadata");
    }
    /* A pool that served the block holds its segment (reserved > 0): only a
     * failure can leave a released pool empty. st says so where the caller
     * goes on to take() from p, for readers and the static analyzer alike. */
    if (--p->pins == 0 && st != L8_OK && p->released && p->reserved == 0) pool_drop(a, p);
    return st;
}

l8_status l8_alloc_malloc(l8_alloc *a, size_t bytes, l8_stream_id stream, void **ptr)
{
    L8_ARG(ptr != NULL);
    *ptr = NULL;
    L8_ARG(a != NULL);
    if (bytes == 0) return L8_OK;
    pthread_mutex_lock(&a->mu);
    l8_status st;
    if (bytes > MAX_REQUEST || (a->memory_limit && round_up(bytes, MIN_BLOCK) > a->memory_limit)) {
        /* Can never succeed: fail without releasing the cache. */
        st = oom_fail(a, bytes, stream, bytes > MAX_REQUEST ? "larger than any device"
                                                            : "larger than the memory limit");
        goto out;
    }
    size_t size = round_up(bytes, MIN_BLOCK);
    uint32_t gid = route(a, stream);
    if (a->pend_head && !a->cap_strict) pending_poll(a);   /* queries only: never waits */
    /* Metadata first: after this point nothing below can fail for want of
     * host memory, so a failure leaves the allocator untouched. */
    st = spare_reserve(a, 2);
    if (st == L8_OK) st = hash_reserve(a);
    pool *p = NULL;
    if (st == L8_OK) st = pool_get(a, stream, size <= SMALL_SIZE, gid, &p);
    if (st == L8_ERR_OOM) {
        st = oom_fail(a, bytes, stream, "host memory for allocator metadata");
        goto out;
    }
    block *b = NULL;
    if (st == L8_OK) {
        b = pool_find(p, size);
        if (b && (p->small || p->gid || b->seg->busy || p->nidle < 2)) a->st.cache_hits++;
        else st = malloc_slow(a, p, size, bytes, stream, &b);
    }
    if (st != L8_OK) goto out;
    take(a, p, b, size, bytes);
    update_peaks(a);
    *ptr = (void *)b->addr;
out:
    pthread_mutex_unlock(&a->mu);
    return st;
}

l8_status l8_alloc_free(l8_alloc *a, void *ptr)
{
    L8_ARG(a != NULL);
    if (!ptr) return L8_OK;
    pthread_mutex_lock(&a->mu);
    l8_status st = L8_OK;
    size_t i = hash_find(a, (uintptr_t)ptr);
    if (i == SIZE_MAX) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "l8_alloc_free: %p is not a live block of this "
                     "allocator (double free or foreign pointer)", ptr);
        goto out;
    }
    block *b = a->htab[i].b;
    hash_del(a, i);
    a->st.allocated_bytes -= b->size;
    a->st.requested_bytes -= b->requested;
    a->st.live_blocks--;
    a->st.frees++;
    TRACE(a, L8_TRACE_FREE_REQUESTED, b->seg->pool->stream, b->addr, b->size, b->requested);
    b->requested = 0;
    pool *bp = b->seg->pool;
    if (a->cap_strict && (b->nxs > 0 || (!bp->gid && route(a, bp->stream)))) {
        /* captured users of b run at replay: keep it for the graph (no events now) */
        b->state = B_PENDING;
        b->held = 1;
        b->gheld = a->cap_gid;
        b->events = 0;
        b->nxs = 0;
        a->st.graph_held_bytes += b->size;
    } else if (b->nxs == 0) {
        release_block(a, b);
    } else {
        st = pending_start(a, b);   /* still counted active until the events finish */
    }
    update_peaks_free(a);
out:
    pthread_mutex_unlock(&a->mu);
    return st;
}

l8_status l8_alloc_record_stream(l8_alloc *a, void *ptr, l8_stream_id stream)
{
    L8_ARG(a != NULL);
    L8_ARG(ptr != NULL);
    pthread_mutex_lock(&a->mu);
    l8_status st = L8_OK;
    size_t i = hash_find(a, (uintptr_t)ptr);
    if (i == SIZE_MAX) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "l8_alloc_record_stream: %p is not a live block", ptr);
        goto out;
    }
    block *b = a->htab[i].b;
    if (stream == b->seg->pool->stream) goto out;
    for (uint32_t k = 0; k < b->nxs; k++)
        if (b->xs[k] == stream) goto out;
    if (b->nxs == b->capxs) {
        uint32_t ncap = b->capxs * 2;
        l8_stream_id *nx = malloc(ncap * sizeof *nx);
        if (!nx) {
            st = L8_FAIL(L8_ERR_OOM, "allocator: no host memory to record a stream");
            goto out;
        }
        memcpy(nx, b->xs, b->nxs * sizeof *nx);
        if (b->xs != b->xs_inline) free(b->xs);
        b->xs = nx;
        b->capxs = ncap;
    }
    b->xs[b->nxs++] = stream;
out:
    pthread_mutex_unlock(&a->mu);
    return st;
}

l8_status l8_alloc_block_info(l8_alloc *a, const void *ptr, size_t *bytes, l8_stream_id *stream)
{
    L8_ARG(a != NULL);
    L8_ARG(ptr != NULL);
    pthread_mutex_lock(&a->mu);
    l8_status st = L8_OK;
    size_t i = hash_find(a, (uintptr_t)ptr);
    if (i == SIZE_MAX) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "l8_alloc_block_info: %p is not a live block", ptr);
    } else {
        if (bytes) *bytes = a->htab[i].b->size;
        if (stream) *stream = a->htab[i].b->seg->pool->stream;
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

l8_status l8_alloc_empty_cache(l8_alloc *a)
{
    L8_ARG(a != NULL);
    pthread_mutex_lock(&a->mu);
    if (a->cap_strict) {
        pthread_mutex_unlock(&a->mu);
        return L8_FAIL(L8_ERR_STATE, "l8_alloc_empty_cache: a graph capture is underway (it "
                       "would wait on events and free segments)");
    }
    l8_status st = pending_wait(a, NULL);   /* without the lock */
    if (a->cap_strict) {
        /* another thread began a capture while this one waited */
        pthread_mutex_unlock(&a->mu);
        return L8_FAIL(L8_ERR_STATE, "l8_alloc_empty_cache: a graph capture began while it "
                       "waited for pending events; no segment was freed");
    }
    /* The caller has synchronized: held blocks (an event failed) whose
     * remaining events are done can come back now; those held for a graph
     * wait for l8_alloc_graph_release. */
    for (segment *s = a->segs; s; s = s->next) {
    again:;
        block *b = s->head;           /* a segment is never without blocks */
        do
            if (b->state == B_PENDING && b->held && !b->gheld && b->events == 0) {
                release_block(a, b);   /* may merge b away: rescan the segment */
                goto again;
            }
        while ((b = b->next) != NULL);
    }
    l8_status st2 = seg_release_free(a, NULL, 0, NULL);   /* without the lock */
    if (st == L8_OK) st = st2;
    pthread_mutex_unlock(&a->mu);
    return st;
}

l8_status l8_alloc_get_stats(l8_alloc *a, l8_alloc_stats *stats)
{
    L8_ARG(a != NULL);
    L8_ARG(stats != NULL);
    pthread_mutex_lock(&a->mu);
    l8_alloc_stats s = a->st;
    pthread_mutex_unlock(&a->mu);
    return l8i_stats_out(stats, &s, sizeof s, "l8_alloc_get_stats");
}

void l8_alloc_reset_peaks(l8_alloc *a)
{
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    l8_alloc_stats *s = &a->st;
    s->allocated_peak = s->allocated_bytes;
    s->requested_peak = s->requested_bytes;
    s->reserved_peak = s->reserved_bytes;
    s->active_peak = s->active_bytes;
    s->inactive_split_peak = s->inactive_split_bytes;
    pthread_mutex_unlock(&a->mu);
}

/* ---- CUDA graph capture (alloc.h) ---- */

static int gid_index(const l8_alloc *a, uint32_t gid)
{
    for (size_t i = 0; i < a->ngids; i++)
        if (a->gids[i] == gid) return (int)i;
    return -1;
}

l8_status l8_alloc_capture_begin(l8_alloc *a, const l8_stream_id *streams, int n, uint32_t *gid,
                                 int strict)
{
    L8_ARG(a != NULL && streams != NULL && gid != NULL);
    if (n < 1 || n > L8_ALLOC_MAX_CAPTURE_STREAMS)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_alloc_capture_begin: %d streams, not 1..%d", n,
                       L8_ALLOC_MAX_CAPTURE_STREAMS);
    l8_status st = L8_OK;
    pthread_mutex_lock(&a->mu);
    if (a->cap_gid) {
        st = L8_FAIL(L8_ERR_STATE, "l8_alloc_capture_begin: the capture of graph pool %u is "
                     "underway (one at a time)", (unsigned)a->cap_gid);
        goto out;
    }
    uint32_t g = *gid;
    if (g && gid_index(a, g) < 0) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "l8_alloc_capture_begin: %u is not a live graph pool",
                     (unsigned)g);
        goto out;
    }
    if (!g) {
        if (a->ngids == a->cap_gids) {
            size_t ncap = a->cap_gids ? 2 * a->cap_gids : 8;
            uint32_t *ng = realloc(a->gids, ncap * sizeof *ng);
            if (!ng) {
                st = L8_FAIL(L8_ERR_OOM, "l8_alloc_capture_begin: no host memory");
                goto out;
            }
            a->gids = ng;
            a->cap_gids = ncap;
        }
        g = ++a->next_gid;
        if (!g) g = ++a->next_gid;            /* after 2^32 graphs: skip 0 */
        a->gids[a->ngids++] = g;
    }
    /* the driver's capture has not begun yet: the last chance to query
     * events, so that blocks a warm-up freed across streams are back */
    if (strict && a->pend_head) pending_poll(a);
    memcpy(a->cap_streams, streams, (size_t)n * sizeof *streams);
    a->ncap = n;
    a->cap_gid = g;
    a->cap_strict = strict != 0;
    *gid = g;
out:
    pthread_mutex_unlock(&a->mu);
    return st;
}

l8_status l8_alloc_capture_end(l8_alloc *a, uint32_t gid)
{
    L8_ARG(a != NULL);
    l8_status st = L8_OK;
    pthread_mutex_lock(&a->mu);
    if (!gid || a->cap_gid != gid)
        st = L8_FAIL(L8_ERR_INVALID_ARG, "l8_alloc_capture_end: graph pool %u is not being "
                     "captured", (unsigned)gid);
    else {
        a->cap_gid = 0;
        a->cap_strict = 0;
        a->ncap = 0;
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

l8_status l8_alloc_graph_release(l8_alloc *a, uint32_t gid)
{
    L8_ARG(a != NULL);
    l8_status st = L8_OK;
    pthread_mutex_lock(&a->mu);
    int at = gid ? gid_index(a, gid) : -1;
    if (at < 0) {
        st = L8_FAIL(L8_ERR_INVALID_ARG, "l8_alloc_graph_release: %u is not a live graph pool",
                     (unsigned)gid);
        goto out;
    }
    if (a->cap_gid == gid) {
        st = L8_FAIL(L8_ERR_STATE, "l8_alloc_graph_release: graph pool %u is being captured",
                     (unsigned)gid);
        goto out;
    }
    a->gids[at] = a->gids[--a->ngids];
    /* its pools first, so blocks released below already find them released */
    for (size_t i = 0; i < a->npools; i++)
        if (a->pools[i]->gid == gid) a->pools[i]->released = 1;
    if (a->last[0] && a->last[0]->released) a->last[0] = NULL;
    if (a->last[1] && a->last[1]->released) a->last[1] = NULL;
    for (segment *s = a->segs; s; s = s->next) {
    again:;
        block *b = s->head;           /* a segment is never without blocks */
        do
            if (b->state == B_PENDING && b->gheld == gid) {
                a->st.graph_held_bytes -= b->size;
                release_block(a, b);   /* may merge b away or move s home: rescan */
                goto again;
            }
        while ((b = b->next) != NULL);
    }
    /* wholly free segments of its pools go home now (release_block moved those it freed) */
    segment *s = a->segs;
    while (s) {
        segment *next = s->next;
        if (s->pool->gid == gid && seg_wholly_free(s)) seg_go_home(a, s);
        s = next;
    }
    for (size_t i = 0; i < a->npools;) {
        pool *p = a->pools[i];
        if (p->gid == gid && p->reserved == 0 && !p->pins)
            pool_drop(a, p);   /* swaps the last in: recheck i */
        else i++;
    }
out:
    pthread_mutex_unlock(&a->mu);
    return st;
}
