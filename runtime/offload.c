/* offload.c - activation offload over refcounted storages (offload.h).
 *
 * Data model: a hash table keyed by storage pointer, plus a list of all
 * entries in registration order (polls and layer calls walk it). An entry
 * holds one reference on its storage (the registry's), so the key cannot be
 * freed and reused while registered, and a list of saves: (tensor, name)
 * pairs. Every saved tensor holds one reference on its storage too, so
 *     other holders = refcount - 1 - (distinct saved tensors)
 * and the device block may go only when that is 0 (the TE bug of the seed:
 * force-releasing one alias emptied another live one; here nothing is taken
 * from a holder that may still read it).
 *
 * Invariants (under off->mu):
 *   COPYING_OUT  host != NULL, dev = the storage's block, ev_out recorded
 *   KEPT         host != NULL, dev = the block, copy complete
 *   ON_HOST      host != NULL, dev == NULL, storage HOST (the copy out may
 *                still run: a copy back is enqueued behind it on the same
 *                stream)
 *   COPYING_IN   host != NULL, dev = new block, ev_in recorded, storage
 *                IN_FLIGHT not readable
 *   RESTORED     host == NULL, dev = the block, storage DEVICE
 *   stats.host_bytes = sum of bytes over entries with host != NULL;
 *   stats.device_bytes_freed = sum over ON_HOST and COPYING_IN entries.
 * Pinned blocks and device blocks touched by a copy are recorded on the
 * copy stream before the copy is enqueued, so freeing either early (an
 * owner dropping out mid-copy) is stream-safe.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/offload.h"
#include "runtime/internal.h"
#include "alloc/trace.h"

typedef struct save_rec {
    const l8_tensor *t;
    char name[64];
} save_rec;

typedef struct entry {
    l8_storage *st;               /* one reference held */
    struct entry *hnext;          /* hash chain */
    struct entry *prev, *next;    /* all entries */
    int layer;
    uint64_t mark;                /* off->marks when saved */
    l8_offload_state state;
    int wanted;                   /* a backward is near: keep the device bytes */
    int had_in;                   /* ev_in was recorded for the current device block */
    size_t bytes;
    void *dev, *host;
    l8_event *ev_out, *ev_in;
    save_rec *saves;
    int nsaves, cap;
} entry;

struct l8_offload {
    pthread_mutex_t mu;
    l8_ctx *ctx;
    l8_stream *copy;
    l8_offload_config cfg;
    l8_trace *trace;
    int layer, enabled;
    uint64_t marks;               /* l8_offload_forward_layer calls so far */
    entry **buckets;
    size_t nbuckets, count;
    entry *head, *tail;
    l8_event *scratch;            /* recorded and waited on at once: ordering only */
    l8_event **evpool;
    size_t nev, evcap;
    l8_offload_stats st;
};

static const char *k_names[] = { "none", "copying out", "kept", "on host", "copying in",
                                 "restored" };

const char *l8_offload_state_name(l8_offload_state s)
{
    return (unsigned)s <= L8_OFFLOAD_RESTORED ? k_names[s] : "invalid";
}

/* ---- registry ---- */

static size_t bucket_of(const l8_offload *off, const l8_storage *st)
{
    uint64_t h = (uint64_t)(uintptr_t)st * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (off->nbuckets - 1);
}

static entry *find(const l8_offload *off, const l8_storage *st)
{
    for (entry *e = off->buckets[bucket_of(off, st)]; e; e = e->hnext)
        if (e->st == st) return e;
    return NULL;
}

static l8_status insert(l8_offload *off, entry *e)
{
    if (off->count + 1 > off->nbuckets) {           /* grow: load factor <= 1 */
        size_t n = off->nbuckets * 2;
        entry **b = calloc(n, sizeof *b);
        if (!b) return L8_FAIL(L8_ERR_OOM, "l8_offload: no host memory for the registry");
        entry **old = off->buckets;
        size_t on = off->nbuckets;
        off->buckets = b;
        off->nbuckets = n;
        for (size_t i = 0; i < on; i++)
            for (entry *x = old[i], *nx; x; x = nx) {
                nx = x->hnext;
                size_t k = bucket_of(off, x->st);
                x->hnext = b[k];
                b[k] = x;
            }
        free(old);
    }
    size_t k = bucket_of(off, e->st);
    e->hnext = off->buckets[k];
    off->buckets[k] = e;
    e->prev = off->tail;
    e->next = NULL;
    if (off->tail) off->tail->next = e;
    else off->head = e;
    off->tail = e;
    off->count++;
    off->st.entries++;
    return L8_OK;
}

static void unlink_entry(l8_offload *off, entry *e)
{
    entry **p = &off->buckets[bucket_of(off, e->st)];
    while (*p != e) p = &(*p)->hnext;
    *p = e->hnext;
    if (e->prev) e->prev->next = e->next;
    else off->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else off->tail = e->prev;
    off->count--;
    off->st.entries--;
}

static l8_status add_save(entry *e, const l8_tensor *t, const char *name)
{
    if (e->nsaves == e->cap) {
        int n = e->cap ? e->cap * 2 : 2;
        save_rec *s = realloc(e->saves, (size_t)n * sizeof *s);
        if (!s) return L8_FAIL(L8_ERR_OOM, "l8_offload_save: no host memory for a save record");
        e->saves = s;
        e->cap = n;
    }
    save_rec *r = &e->saves[e->nsaves++];
    r->t = t;
    snprintf(r->name, sizeof r->name, "%s", name ? name : "(unnamed)");
    return L8_OK;
}

/* Distinct saved tensors: each holds one reference on the storage. */
static int saved_tensors(const entry *e)
{
    int distinct = 0;
    for (int i = 0; i < e->nsaves; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = e->saves[j].t == e->saves[i].t;
        distinct += !seen;
    }
    return distinct;
}

/* References on the storage that are neither the registry's nor a saved
 * tensor's. */
static int other_holders(const entry *e)
{
    return l8_storage_refcount(e->st) - 1 - saved_tensors(e);
}

/* Frees of blocks we know are live fail only on an internal fault, which
 * is then in the last error; the paths that call this have nothing better
 * to do with it. */
static void ignore(l8_status st) { (void)st; }

/* ---- events ---- */

static l8_status event_get(l8_offload *off, l8_event **ev)
{
    if (*ev) return L8_OK;
    if (off->nev) {
        *ev = off->evpool[--off->nev];
        return L8_OK;
    }
    return l8_event_create(off->ctx, 0, ev);
}

static void event_put(l8_offload *off, l8_event **ev)
{
    if (!*ev) return;
    if (off->nev == off->evcap) {
        size_t n = off->evcap ? off->evcap * 2 : 16;
        l8_event **p = realloc(off->evpool, n * sizeof *p);
        if (!p) {
            l8_event_destroy(*ev);
            *ev = NULL;
            return;
        }
        off->evpool = p;
        off->evcap = n;
    }
    off->evpool[off->nev++] = *ev;
    *ev = NULL;
}

/* ---- copies ---- */

static l8_stream_id handle(l8_stream *s) { return l8_stream_handle(s); }

/* The device block is used on the copy stream: the allocator must not reuse
 * it before the copy ends, whoever frees it. */
static l8_status record_block(l8_offload *off, l8_storage *st, void *dev)
{
    if (handle(l8i_storage_stream(st)) == handle(off->copy)) return L8_OK;
    return l8_alloc_record_stream(l8_ctx_allocator(off->ctx), dev, handle(off->copy));
}

/* Enqueue the copy of e's whole storage to a new pinned block, after the
 * work enqueued on the producer stream s. On failure nothing is left
 * registered or allocated that is not safe to drop. */
static l8_status copy_out(l8_offload *off, entry *e, l8_stream *s, const char *name)
{
    l8_pinned *pool = l8_ctx_pinned(off->ctx);
    void *host = NULL;
    l8_status ret = l8_pinned_alloc(pool, e->bytes, &host);
    if (ret != L8_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", l8_last_error_string());
        return L8_FAIL(ret, "l8_offload_save(%s): no pinned host memory for %zu bytes; the"
                       " storage stays on the device, unchanged (%s)", name, e->bytes, why);
    }
    L8_TRY(ret, l8_pinned_record_stream(pool, host, handle(off->copy)), fail);
    L8_TRY(ret, record_block(off, e->st, e->dev), fail);
    L8_TRY(ret, event_get(off, &e->ev_out), fail);
    L8_TRY(ret, l8_event_record(off->scratch, s), fail);
    L8_TRY(ret, l8_stream_wait_event(off->copy, off->scratch), fail);
    L8_TRY(ret, l8_memcpy_dtoh(off->copy, host, e->dev, e->bytes), fail);
    L8_TRY(ret, l8_event_record(e->ev_out, off->copy), fail);
    e->host = host;
    e->state = L8_OFFLOAD_COPYING_OUT;
    e->wanted = 0;
    e->had_in = 0;
    l8i_storage_set(e->st, L8_STORAGE_IN_FLIGHT, e->dev, 1);
    off->st.copies_out++;
    off->st.bytes_out += e->bytes;
    off->st.host_bytes += e->bytes;
    l8_trace_record(off->trace, L8_TRACE_OFFLOAD_OUT, l8_ctx_device(off->ctx), handle(off->copy),
                    (uint64_t)(uintptr_t)e->dev, e->bytes, (uint64_t)(uintptr_t)host);
    return L8_OK;
fail:
    /* recorded on the copy stream: not reused before anything enqueued ends */
    ignore(l8_pinned_free(pool, host));
    return ret;
}

/* Enqueue the copy back into a new device block on the storage's stream. */
static l8_status copy_in(l8_offload *off, entry *e)
{
    l8_stream *as = l8i_storage_stream(e->st);
    void *dev = NULL;
    l8_status ret = l8_ctx_malloc(off->ctx, e->bytes, as, &dev);
    if (ret != L8_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", l8_last_error_string());
        return L8_FAIL(ret, "l8_offload: no device memory to bring back %zu bytes of \"%s\"; the"
                       " data stays in pinned host memory (free some and restore again) (%s)",
                       e->bytes, e->nsaves ? e->saves[0].name : "?", why);
    }
    L8_TRY(ret, record_block(off, e->st, dev), fail);
    L8_TRY(ret, event_get(off, &e->ev_in), fail);
    /* the block may have served earlier work on its stream: copy after it */
    L8_TRY(ret, l8_event_record(off->scratch, as), fail);
    L8_TRY(ret, l8_stream_wait_event(off->copy, off->scratch), fail);
    L8_TRY(ret, l8_memcpy_htod(off->copy, dev, e->host, e->bytes), fail);
    L8_TRY(ret, l8_event_record(e->ev_in, off->copy), fail);
    e->dev = dev;
    e->state = L8_OFFLOAD_COPYING_IN;
    e->had_in = 1;
    l8i_storage_set(e->st, L8_STORAGE_IN_FLIGHT, dev, 0);
    off->st.copies_in++;
    off->st.bytes_in += e->bytes;
    l8_trace_record(off->trace, L8_TRACE_OFFLOAD_IN, l8_ctx_device(off->ctx), handle(off->copy),
                    (uint64_t)(uintptr_t)dev, e->bytes, (uint64_t)(uintptr_t)e->host);
    return L8_OK;
fail:
    ignore(l8_ctx_free(off->ctx, dev));   /* stream-ordered, copy stream recorded */
    return ret;
}

/* The device bytes are valid again (or still): publish DEVICE, drop the
 * pinned copy. */
static void settle_on_device(l8_offload *off, entry *e)
{
    if (e->state == L8_OFFLOAD_COPYING_IN) off->st.device_bytes_freed -= e->bytes;
    l8i_storage_set(e->st, L8_STORAGE_DEVICE, e->dev, 1);
    if (e->host) {
        ignore(l8_pinned_free(l8_ctx_pinned(off->ctx), e->host));
        off->st.host_bytes -= e->bytes;
        e->host = NULL;
    }
    e->state = L8_OFFLOAD_RESTORED;
    e->wanted = 0;
}

/* No holder but the saves: give the device block back now, even with the
 * copy out still running. It was recorded on the copy stream, so the
 * allocator hands it out again only once the copy's event has completed;
 * the host never waits for that (it runs far ahead of the GPU, and a
 * release that waited for a host-side poll to see the event would come
 * too late to lower the forward's peak). */
static l8_status release_device(l8_offload *off, entry *e)
{
    void *dev = e->dev;
    l8i_storage_set(e->st, L8_STORAGE_HOST, NULL, 0);
    l8_status ret = l8_ctx_free(off->ctx, dev);
    if (ret != L8_OK) {                 /* the allocator does not know it: keep it */
        l8i_storage_set(e->st, L8_STORAGE_DEVICE, dev, 1);
        e->state = L8_OFFLOAD_KEPT;
        return ret;
    }
    e->dev = NULL;
    e->state = L8_OFFLOAD_ON_HOST;
    off->st.released++;
    off->st.device_bytes_freed += e->bytes;
    return L8_OK;
}

/* Given back once the forward has moved on to another layer (callers that
 * never number layers: at once), so the last layer's storages, which the
 * backward reads first, make no round trip; and only while no one but the
 * saves holds the storage. */
static int releasable(const l8_offload *off, const entry *e)
{
    return !e->wanted && e->nsaves > 0 && (off->marks == 0 || off->marks > e->mark) &&
           other_holders(e) <= 0;
}

static l8_status poll_entry(l8_offload *off, entry *e)
{
    int done = 0;
    switch (e->state) {
    case L8_OFFLOAD_COPYING_OUT:
        if (releasable(off, e)) return release_device(off, e);
        L8_CHECK(l8_event_query(e->ev_out, &done));
        if (!done) return L8_OK;
        e->state = L8_OFFLOAD_KEPT;     /* copied; someone else still holds it */
        l8i_storage_set(e->st, L8_STORAGE_DEVICE, e->dev, 1);
        return L8_OK;
    case L8_OFFLOAD_KEPT:
        return releasable(off, e) ? release_device(off, e) : L8_OK;
    case L8_OFFLOAD_COPYING_IN:
        L8_CHECK(l8_event_query(e->ev_in, &done));
        if (done) settle_on_device(off, e);
        return L8_OK;
    default:
        return L8_OK;
    }
}

static l8_status poll_locked(l8_offload *off)
{
    l8_status first = L8_OK;
    for (entry *e = off->head; e; e = e->next) {
        l8_status st = poll_entry(off, e);
        if (st != L8_OK && first == L8_OK) first = st;
    }
    return first;
}

/* Drop e, whose last saves (`gone` tensors, still alive as their owners
 * release them) have been released. A storage someone else still holds gets
 * its bytes back first (blocking); if that fails the entry stays, without
 * saves, until l8_offload_destroy. */
static l8_status drop_entry(l8_offload *off, entry *e, int gone)
{
    int others = l8_storage_refcount(e->st) - 1 - gone > 0;
    if (others && e->state == L8_OFFLOAD_ON_HOST) L8_CHECK(copy_in(off, e));
    if (e->state == L8_OFFLOAD_COPYING_IN) {
        if (others) L8_CHECK(l8_event_synchronize(e->ev_in));
        settle_on_device(off, e);      /* not readable by anyone else otherwise */
    }
    if (e->state == L8_OFFLOAD_COPYING_OUT || e->state == L8_OFFLOAD_KEPT)
        l8i_storage_set(e->st, L8_STORAGE_DEVICE, e->dev, 1);
    if (e->host) {
        ignore(l8_pinned_free(l8_ctx_pinned(off->ctx), e->host));
        off->st.host_bytes -= e->bytes;
    }
    if (e->state == L8_OFFLOAD_ON_HOST) off->st.device_bytes_freed -= e->bytes;
    unlink_entry(off, e);
    event_put(off, &e->ev_out);
    event_put(off, &e->ev_in);
    l8_storage_release(e->st);      /* may free the block: stream-ordered, copy recorded */
    free(e->saves);
    free(e);
    return L8_OK;
}

/* ---- public ---- */

void l8_offload_config_init(l8_offload_config *cfg)
{
    if (cfg) *cfg = (l8_offload_config)L8_OFFLOAD_CONFIG_INIT;
}

l8_status l8_offload_create(l8_ctx *ctx, const l8_offload_config *cfg, l8_offload **out)
{
    L8_ARG(out != NULL);
    *out = NULL;
    L8_ARG(ctx != NULL);
    l8_offload_config c = L8_OFFLOAD_CONFIG_INIT;
    L8I_CONFIG_COPY(c, cfg, "l8_offload_create", "L8_OFFLOAD_CONFIG_INIT");
    if (c.prefetch_layers < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_offload_create: prefetch_layers %d is negative",
                       c.prefetch_layers);
    l8_offload *off = calloc(1, sizeof *off);
    if (!off) return L8_FAIL(L8_ERR_OOM, "l8_offload_create: no host memory");
    l8_status ret = L8_OK;
    pthread_mutex_init(&off->mu, NULL);
    off->ctx = ctx;
    off->copy = l8_ctx_stream(ctx, L8_STREAM_COPY);
    off->cfg = c;
    off->trace = c.trace ? c.trace : l8_ctx_trace(ctx);
    off->enabled = 1;
    off->nbuckets = 64;
    off->st.size = sizeof off->st;
    off->buckets = calloc(off->nbuckets, sizeof *off->buckets);
    if (!off->buckets) {
        ret = L8_FAIL(L8_ERR_OOM, "l8_offload_create: no host memory");
        goto fail;
    }
    L8_TRY(ret, l8_event_create(ctx, 0, &off->scratch), fail);
    *out = off;
    return L8_OK;
fail:
    l8_offload_destroy(off);
    return ret;
}

void l8_offload_destroy(l8_offload *off)
{
    if (!off) return;
    pthread_mutex_lock(&off->mu);
    while (off->head) {
        entry *e = off->head;
        int gone = saved_tensors(e);
        e->nsaves = 0;
        if (drop_entry(off, e, gone) != L8_OK) {
            /* no memory to bring it back: the holders lose the bytes, as
             * documented; never leak or crash */
            if (e->state == L8_OFFLOAD_ON_HOST) off->st.device_bytes_freed -= e->bytes;
            e->state = L8_OFFLOAD_RESTORED;
            if (e->host) {
                ignore(l8_pinned_free(l8_ctx_pinned(off->ctx), e->host));
                e->host = NULL;
            }
            (void)drop_entry(off, e, gone);
        }
    }
    pthread_mutex_unlock(&off->mu);
    for (size_t i = 0; i < off->nev; i++) l8_event_destroy(off->evpool[i]);
    l8_event_destroy(off->scratch);
    free(off->evpool);
    free(off->buckets);
    pthread_mutex_destroy(&off->mu);
    free(off);
}

l8_status l8_offload_forward_layer(l8_offload *off, int layer, int enable)
{
    L8_ARG(off != NULL);
    if (layer < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_offload_forward_layer: layer %d is negative", layer);
    pthread_mutex_lock(&off->mu);
    off->layer = layer;
    off->enabled = enable != 0;
    off->marks++;
    l8_status ret = poll_locked(off);
    pthread_mutex_unlock(&off->mu);
    return ret;
}

l8_status l8_offload_backward_layer(l8_offload *off, int layer)
{
    L8_ARG(off != NULL);
    if (layer < 0)
        return L8_FAIL(L8_ERR_INVALID_ARG, "l8_offload_backward_layer: layer %d is negative", layer);
    pthread_mutex_lock(&off->mu);
    const int lo = layer - off->cfg.prefetch_layers;
    /* about to be read: bytes still on the device stay there (before the poll) */
    for (entry *e = off->head; e; e = e->next)
        if (e->layer <= layer && e->layer >= lo &&
            (e->state == L8_OFFLOAD_COPYING_OUT || e->state == L8_OFFLOAD_KEPT))
            e->wanted = 1;
    l8_status ret = poll_locked(off);
    for (entry *e = off->head; e && ret == L8_OK; e = e->next) {
        if (e->layer > layer || e->layer < lo) continue;
        if (e->state == L8_OFFLOAD_ON_HOST) {
            ret = copy_in(off, e);
            if (ret == L8_OK) {
                if (e->layer < layer) off->st.prefetches++;
            } else if (ret == L8_ERR_OOM) {
                off->st.prefetch_deferred++;    /* the restore will try again */
                l8_error_clear();
                ret = L8_OK;
            }
        }
    }
    pthread_mutex_unlock(&off->mu);
    return ret;
}

/* t's storage, checked against off's context. */
static l8_status hook_args(const char *fn, l8_offload *off, const l8_tensor *t, l8_stream **s,
                           l8_storage **st)
{
    L8_ARG(off != NULL && t != NULL);
    *st = l8_tensor_storage(t);
    if (l8_storage_ctx(*st) != off->ctx)
        return L8_FAIL(L8_ERR_INVALID_ARG, "%s: the tensor belongs to another context", fn);
    return s ? l8i_resolve_stream(fn, off->ctx, s) : L8_OK;
}

l8_status l8_offload_save(void *arg, l8_tensor *t, const char *name, l8_stream *s)
{
    static const char *fn = "l8_offload_save";
    l8_offload *off = arg;
    l8_storage *st = NULL;
    L8_CHECK(hook_args(fn, off, t, &s, &st));
    const char *nm = name ? name : "(unnamed)";
    pthread_mutex_lock(&off->mu);
    l8_status ret = poll_locked(off);
    entry *e = ret == L8_OK ? find(off, st) : NULL;
    if (ret != L8_OK) goto out;
    if (e) {                            /* an alias: one storage, one copy */
        L8_TRY(ret, add_save(e, t, nm), out);
        off->st.saves++;
        off->st.aliased++;
        /* saved again by a later layer: that layer's backward comes first */
        if (off->enabled && off->layer > e->layer) {
            e->layer = off->layer;
            e->mark = off->marks;
        }
        if (e->state == L8_OFFLOAD_RESTORED && off->enabled) {   /* a new round trip */
            e->layer = off->layer;
            e->mark = off->marks;
            if ((ret = copy_out(off, e, s, nm)) != L8_OK) {
                e->nsaves--;
                off->st.saves--;
                off->st.aliased--;
            }
        }
        if (ret == L8_OK) ret = poll_entry(off, e);
        goto out;
    }
    size_t bytes = l8_storage_bytes(st);
    if (l8_storage_is_resident(st)) { off->st.kept_resident++; goto out; }
    if (bytes == 0 || bytes < off->cfg.min_bytes) { off->st.kept_small++; goto out; }
    if (!off->enabled) { off->st.kept_layer++; goto out; }
    if (l8_storage_state_of(st) != L8_STORAGE_DEVICE) {
        ret = L8_FAIL(L8_ERR_STATE, "%s(%s): the storage of %zu bytes is not on the device"
                      " (state %d)", fn, nm, bytes, (int)l8_storage_state_of(st));
        goto out;
    }
    e = calloc(1, sizeof *e);
    if (!e) { ret = L8_FAIL(L8_ERR_OOM, "%s(%s): no host memory", fn, nm); goto out; }
    e->st = st;
    e->bytes = bytes;
    e->layer = off->layer;
    e->mark = off->marks;
    e->dev = l8i_storage_block(st);
    L8_TRY(ret, add_save(e, t, nm), fail);
    L8_TRY(ret, copy_out(off, e, s, nm), fail);
    l8_storage_retain(st);
    if ((ret = insert(off, e)) != L8_OK) {
        /* undo the registration; the copy already enqueued is harmless */
        e->state = L8_OFFLOAD_KEPT;
        l8i_storage_set(st, L8_STORAGE_DEVICE, e->dev, 1);
        ignore(l8_pinned_free(l8_ctx_pinned(off->ctx), e->host));
        off->st.host_bytes -= bytes;
        event_put(off, &e->ev_out);
        l8_storage_release(st);
        goto fail;
    }
    off->st.saves++;
    ret = poll_entry(off, e);           /* no other holder: the device block goes now */
    goto out;
fail:
    event_put(off, &e->ev_out);
    free(e->saves);
    free(e);
out:
    pthread_mutex_unlock(&off->mu);
    return ret;
}

l8_status l8_offload_restore(void *arg, l8_tensor *t, const char *name, l8_stream *s)
{
    l8_offload *off = arg;
    l8_storage *st = NULL;
    L8_CHECK(hook_args("l8_offload_restore", off, t, &s, &st));
    pthread_mutex_lock(&off->mu);
    l8_status ret = L8_OK;
    entry *e = find(off, st);
    if (!e) goto out;                   /* never offloaded: nothing to do */
    switch (e->state) {
    case L8_OFFLOAD_COPYING_OUT:
    case L8_OFFLOAD_KEPT:
        off->st.kept_in_place++;        /* the device bytes never left */
        settle_on_device(off, e);
        break;
    case L8_OFFLOAD_ON_HOST:
        L8_TRY(ret, copy_in(off, e), out);
        /* fall through */
    case L8_OFFLOAD_COPYING_IN:
        L8_TRY(ret, l8_stream_wait_event(s, e->ev_in), out);
        settle_on_device(off, e);
        break;
    case L8_OFFLOAD_RESTORED:
        if (e->had_in) L8_TRY(ret, l8_stream_wait_event(s, e->ev_in), out);
        break;
    default:
        break;
    }
    ret = poll_locked(off);
out:
    pthread_mutex_unlock(&off->mu);
    return ret;
}

void l8_offload_release(void *arg, l8_tensor *t, const char *name)
{
    l8_offload *off = arg;
    if (!off || !t) return;
    l8_storage *st = l8_tensor_storage(t);
    pthread_mutex_lock(&off->mu);
    entry *e = find(off, st);
    if (e) {
        int k = -1;
        for (int i = 0; i < e->nsaves && k < 0; i++)    /* same tensor and name first */
            if (e->saves[i].t == t && (!name || !strncmp(e->saves[i].name, name,
                                                         sizeof e->saves[i].name - 1)))
                k = i;
        for (int i = 0; i < e->nsaves && k < 0; i++)
            if (e->saves[i].t == t) k = i;
        if (k >= 0) {
            e->saves[k] = e->saves[--e->nsaves];
            /* a void hook: a failure (no memory to bring back bytes another
             * holder needs) stays in the last error and the entry is kept */
            if (e->nsaves == 0) (void)drop_entry(off, e, 1);
        }
    }
    pthread_mutex_unlock(&off->mu);
}

l8_status l8_offload_poll(l8_offload *off)
{
    L8_ARG(off != NULL);
    pthread_mutex_lock(&off->mu);
    l8_status ret = poll_locked(off);
    pthread_mutex_unlock(&off->mu);
    return ret;
}

l8_status l8_offload_wait(l8_offload *off)
{
    L8_ARG(off != NULL);
    pthread_mutex_lock(&off->mu);
    l8_status ret = l8_stream_synchronize(off->copy);     /* every copy runs there */
    if (ret == L8_OK) ret = poll_locked(off);
    pthread_mutex_unlock(&off->mu);
    return ret;
}

l8_offload_state l8_offload_state_of(l8_offload *off, const l8_storage *st)
{
    if (!off || !st) return L8_OFFLOAD_NONE;
    pthread_mutex_lock(&off->mu);
    entry *e = find(off, st);
    l8_offload_state s = e ? e->state : L8_OFFLOAD_NONE;
    pthread_mutex_unlock(&off->mu);
    return s;
}

l8_status l8_offload_get_stats(l8_offload *off, l8_offload_stats *stats)
{
    L8_ARG(off != NULL && stats != NULL);
    pthread_mutex_lock(&off->mu);
    l8_offload_stats copy = off->st;
    pthread_mutex_unlock(&off->mu);
    return l8i_stats_out(stats, &copy, sizeof copy, "l8_offload_get_stats");
}
