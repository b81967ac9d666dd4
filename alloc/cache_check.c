/* cache_check.c - looking at the caching allocator: its state as text
 * (l8_alloc_describe, and the state in OOM messages), a copy of every block
 * (l8_alloc_visit), and l8_alloc_check, which verifies every invariant
 * listed in cache.c against a recomputation from the blocks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "alloc/cache_internal.h"

/* ---- describe ---- */

void l8i_fmt_bytes(char *buf, size_t n, uint64_t v)
{
    if (v >= GIB) snprintf(buf, n, "%.2f GiB", (double)v / GIB);
    else if (v >= MIB) snprintf(buf, n, "%.2f MiB", (double)v / MIB);
    else if (v >= KIB) snprintf(buf, n, "%.1f KiB", (double)v / KIB);
    else snprintf(buf, n, "%llu B", (unsigned long long)v);
}

typedef struct sbuf {
    char *p;
    size_t n, len;
} sbuf;

static void L8_PRINTF(2, 3) sb_add(sbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(sb->len < sb->n ? sb->p + sb->len : NULL,
                      sb->len < sb->n ? sb->n - sb->len : 0, fmt, ap);
    va_end(ap);
    if (r > 0) sb->len += (size_t)r;
}

size_t l8i_alloc_describe_locked(l8_alloc *a, char *buf, size_t n)
{
    sbuf sb = { n ? buf : NULL, n, 0 };
    if (n) buf[0] = '\0';
    const l8_alloc_stats *s = &a->st;
    char r[32], rp[32], al[32], ap[32], ac[32], is[32], lim[32];
    l8i_fmt_bytes(r, sizeof r, s->reserved_bytes);
    l8i_fmt_bytes(rp, sizeof rp, s->reserved_peak);
    l8i_fmt_bytes(al, sizeof al, s->allocated_bytes);
    l8i_fmt_bytes(ap, sizeof ap, s->allocated_peak);
    l8i_fmt_bytes(ac, sizeof ac, s->active_bytes);
    l8i_fmt_bytes(is, sizeof is, s->inactive_split_bytes);
    l8i_fmt_bytes(lim, sizeof lim, a->memory_limit);
    size_t npend = 0, nheld = 0;
    for (pend *e = a->pend_head; e; e = e->next) npend++;
    for (segment *g = a->segs; g; g = g->next)
        for (block *b = g->head; b; b = b->next) nheld += b->state == B_PENDING && b->held;
    sb_add(&sb, "allocator[%s, device %d]: reserved %s (peak %s) in %llu segments, allocated %s "
                "(peak %s) in %llu blocks, active %s, inactive split %s, limit %s, "
                "%zu events pending, %zu blocks held; %llu allocs, %llu frees, %llu retries, "
                "%llu ooms\n",
           a->prov.name ? a->prov.name : "?", a->prov.device, r, rp,
           (unsigned long long)s->segments, al, ap, (unsigned long long)s->live_blocks, ac, is,
           a->memory_limit ? lim : "none", npend, nheld, (unsigned long long)s->allocations,
           (unsigned long long)s->frees, (unsigned long long)s->retries,
           (unsigned long long)s->ooms);
    if (a->inflight) {
        char dy[32], gr[32];
        l8i_fmt_bytes(dy, sizeof dy, a->dying_bytes);
        l8i_fmt_bytes(gr, sizeof gr, a->growing);
        sb_add(&sb, "  in flight: %u provider calls made without the lock (%zu segments, %s, "
                    "being given back; %s being obtained)\n", (unsigned)a->inflight, a->ndying,
               dy, gr);
    }
    for (segment *g = a->segs; g; g = g->next) {
        size_t live = 0, live_b = 0, pendb = 0, freeb = 0, largest = 0;
        for (block *b = g->head; b; b = b->next) {
            if (b->state == B_LIVE) { live++; live_b += b->size; }
            else if (b->state == B_PENDING) pendb += b->size;
            else { freeb += b->size; if (b->size > largest) largest = b->size; }
        }
        char sz[32], lb[32], fb[32], lg[32], pb[32];
        l8i_fmt_bytes(sz, sizeof sz, g->bytes);
        l8i_fmt_bytes(lb, sizeof lb, live_b);
        l8i_fmt_bytes(fb, sizeof fb, freeb);
        l8i_fmt_bytes(lg, sizeof lg, largest);
        l8i_fmt_bytes(pb, sizeof pb, pendb);
        sb_add(&sb, "  segment 0x%llx %s %s stream 0x%llx: %zu blocks, %zu live (%s), pending %s, "
                    "free %s (largest %s)\n",
               (unsigned long long)g->base, sz, g->pool->small ? "small" : "large",
               (unsigned long long)g->pool->stream, g->nblocks, live, lb, pb, fb, lg);
    }
    return sb.len;
}

size_t l8_alloc_describe(l8_alloc *a, char *buf, size_t n)
{
    if (!a) {
        if (n) snprintf(buf, n, "allocator: (null)");
        return n ? strlen(buf) : 0;
    }
    pthread_mutex_lock(&a->mu);
    size_t len = l8i_alloc_describe_locked(a, buf, n);
    pthread_mutex_unlock(&a->mu);
    return len;
}

l8_status l8_alloc_visit(l8_alloc *a, void (*fn)(void *arg, const l8_block_info *b), void *arg)
{
    L8_ARG(a != NULL);
    L8_ARG(fn != NULL);
    /* Copy under the lock, call outside it: fn may call the allocator. */
    pthread_mutex_lock(&a->mu);
    size_t n = a->nblocks;
    l8_block_info *v = n ? malloc(n * sizeof *v) : NULL;
    if (n && !v) {
        pthread_mutex_unlock(&a->mu);
        return L8_FAIL(L8_ERR_OOM, "l8_alloc_visit: no host memory for %zu blocks", n);
    }
    size_t k = 0;
    for (segment *s = a->segs; s; s = s->next)
        for (block *b = s->head; b && k < n; b = b->next) {
            l8_block_info *o = &v[k++];
            o->segment = s->base;
            o->segment_bytes = s->bytes;
            o->addr = b->addr;
            o->bytes = b->size;
            o->requested = b->state == B_LIVE ? b->requested : 0;
            o->stream = s->pool->stream;
            o->allocated = b->state == B_LIVE;
            o->pending = b->state == B_PENDING;
            o->small_pool = s->pool->small;
        }
    pthread_mutex_unlock(&a->mu);
    for (size_t i = 0; i < k; i++) fn(arg, &v[i]);
    free(v);
    return L8_OK;
}

/* ---- check ---- */

#define INV(cond, ...)                                                                        \
    do {                                                                                      \
        if (!(cond)) return L8_FAIL(L8_ERR_INTERNAL, "allocator check: " __VA_ARGS__);        \
    } while (0)

static l8_status check_segment(l8_alloc *a, segment *s, l8_alloc_stats *r, size_t *nfree,
                               size_t *nblocks)
{
    INV(s->start % MIN_BLOCK == 0 && s->start >= s->base &&
        s->start - s->base + s->usable <= s->bytes, "segment 0x%llx range",
        (unsigned long long)s->base);
    INV(s->head && s->head->prev == NULL && s->head->addr == s->start,
        "segment 0x%llx does not start with its first block", (unsigned long long)s->base);
    uintptr_t at = s->start;
    size_t busy = 0, freeb = 0, n = 0;
    for (block *b = s->head; b; b = b->next) {
        INV(b->seg == s && b->addr == at, "block 0x%llx does not tile segment 0x%llx",
            (unsigned long long)b->addr, (unsigned long long)s->base);
        INV(b->size >= MIN_BLOCK && b->size % MIN_BLOCK == 0, "block 0x%llx size %zu",
            (unsigned long long)b->addr, b->size);
        INV(!b->next || b->next->prev == b, "block 0x%llx: broken neighbour links",
            (unsigned long long)b->addr);
        INV(b->state <= B_PENDING, "block 0x%llx: bad state", (unsigned long long)b->addr);
        if (b->state == B_FREE) {
            INV(!b->next || b->next->state != B_FREE, "free blocks 0x%llx and its successor "
                "are not coalesced", (unsigned long long)b->addr);
            INV(b->bin == bin_of(b->size), "free block 0x%llx in the wrong bin",
                (unsigned long long)b->addr);
            freeb += b->size;
            (*nfree)++;
        } else {
            busy++;
            r->active_bytes += b->size;
        }
        if (b->state == B_LIVE) {
            size_t i = hash_find(a, b->addr);
            INV(i != SIZE_MAX && a->htab[i].b == b, "live block 0x%llx missing from the hash",
                (unsigned long long)b->addr);
            INV(b->requested > 0 && b->requested <= b->size, "live block 0x%llx requested %zu",
                (unsigned long long)b->addr, b->requested);
            r->allocated_bytes += b->size;
            r->requested_bytes += b->requested;
            r->live_blocks++;
        } else {
            INV(hash_find(a, b->addr) == SIZE_MAX, "block 0x%llx in the hash but not live",
                (unsigned long long)b->addr);
        }
        if (b->state == B_PENDING) {
            size_t ev = 0;
            for (pend *e = a->pend_head; e; e = e->next) ev += e->b == b;
            INV(ev == b->events && (ev > 0 || b->held), "pending block 0x%llx: %zu events "
                "queued, %u counted", (unsigned long long)b->addr, ev, b->events);
        }
        at += b->size;
        n++;
    }
    INV(at == s->start + s->usable, "blocks of segment 0x%llx cover %llu of %zu bytes",
        (unsigned long long)s->base, (unsigned long long)(at - s->start), s->usable);
    INV(busy == s->busy && freeb == s->free_bytes && n == s->nblocks,
        "segment 0x%llx counters", (unsigned long long)s->base);
    r->reserved_bytes += s->bytes;
    r->segments++;
    if (busy) r->inactive_split_bytes += freeb;
    *nblocks += n;
    return L8_OK;
}

static l8_status check_pool(const pool *p, size_t *members, size_t *reserved_sum)
{
    size_t n = 0;
    uint64_t summary = 0;
    for (unsigned i = 0; i < NBINS; i++) {
        int bit = (p->map[i >> 6] >> (i & 63)) & 1;
        INV(bit == (p->bins[i] != NULL), "pool bitmap bit %u", i);
        if (p->bins[i]) summary |= 1ull << (i >> 6);
        for (block *b = p->bins[i]; b; b = b->fnext) {
            INV(b->state == B_FREE && b->bin == i && b->seg->pool == p,
                "block 0x%llx listed in bin %u is not a free block of this pool",
                (unsigned long long)b->addr, i);
            INV(!b->fnext || b->fnext->fprev == b, "bin %u: broken links", i);
            n++;
        }
    }
    INV(summary == p->summary, "pool summary bitmap");
    INV(n == p->nfree, "pool free count %zu, %zu listed", p->nfree, n);
    *members += n;
    *reserved_sum += p->reserved;
    return L8_OK;
}

l8_status l8_alloc_check(l8_alloc *a)
{
    L8_ARG(a != NULL);
    pthread_mutex_lock(&a->mu);
    l8_status st = L8_OK;
    l8_alloc_stats r = { 0 };
    size_t nfree = 0, nblocks = 0, listed = 0, pool_reserved = 0;
    for (segment *s = a->segs; s && st == L8_OK; s = s->next) {
        if (s->next && s->next->prev != s) st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: "
                                                        "segment list links");
        if (st == L8_OK) st = check_segment(a, s, &r, &nfree, &nblocks);
    }
    for (size_t i = 0; i < a->npools && st == L8_OK; i++)
        st = check_pool(a->pools[i], &listed, &pool_reserved);
    if (st != L8_OK) goto out;
    /* segments another thread is giving back without the lock (cache.c
     * "Blocking calls"): still reserved, each with its one block, in no pool */
    r.reserved_bytes += a->dying_bytes;
    r.segments += a->ndying;
    nblocks += a->ndying;
    if ((a->ndying || a->growing) && !a->inflight) {
        st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: segments in flight, no call in flight");
        goto out;
    }
    const l8_alloc_stats *s = &a->st;
#define SAME(f) if (r.f != s->f) { st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: " #f \
        " is %llu, blocks say %llu", (unsigned long long)s->f, (unsigned long long)r.f); goto out; }
    SAME(allocated_bytes) SAME(requested_bytes) SAME(reserved_bytes) SAME(active_bytes)
    SAME(inactive_split_bytes) SAME(live_blocks) SAME(segments)
#undef SAME
    if (listed != nfree) {
        st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: %zu free blocks, %zu in free lists",
                     nfree, listed);
    } else if (a->hcount != r.live_blocks) {
        st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: hash holds %zu, %llu blocks live",
                     a->hcount, (unsigned long long)r.live_blocks);
    } else if (nblocks != a->nblocks || pool_reserved != r.reserved_bytes - a->dying_bytes) {
        st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: block count or pool reserved bytes");
    } else if (a->memory_limit && s->reserved_bytes + a->growing > a->memory_limit) {
        st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: reserved (with segments being "
                     "obtained) above the memory limit");
    } else {
        const pend *prev = NULL;
        for (pend *e = a->pend_head; e; prev = e, e = e->next)
            if (!e->b || e->b->state != B_PENDING || e->prev != prev ||
                (e->waiting && !a->inflight)) {
                st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: pending event list (event of "
                             "a non-pending block, broken links, or waited on by no call)");
                break;
            }
        if (st == L8_OK && a->pend_tail != prev)
            st = L8_FAIL(L8_ERR_INTERNAL, "allocator check: pending event list tail");
    }
out:
    pthread_mutex_unlock(&a->mu);
    return st;
}
