/* test_alloc.c - the caching allocator (alloc/alloc.h), its providers and
 * the training-like replay (tools/replay.h).
 *
 * Most tests run over `tp`, a test provider whose segments come from the host
 * provider (or are fake addresses) and whose events complete only when the
 * test says so; the fault provider wraps it where failures are injected.
 * Every test frees what it allocates: valgrind runs these with
 * --leak-check=full.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tests/tests.h"
#include "alloc/alloc.h"
#include "tools/replay.h"
#include "alloc/trace.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* ---- the test provider ----
 * Thread-safe (the allocator calls segment_alloc, segment_free and
 * event_sync without its lock, from several threads): every callback runs
 * under tp.mu. Gates: while shut_alloc (shut_free, shut_sync) is set,
 * segment_alloc (segment_free, event_sync) blocks at its start, counted in
 * in_alloc (in_free, in_sync), until the test opens the gate; a call seen
 * inside is provably still there. */

typedef struct tp_event {
    int done;
    struct tp_event *next;
} tp_event;

typedef struct tp {
    l8_segment_provider base;
    l8_segment_provider host;
    int fake_addrs;               /* fake addresses instead of host memory */
    int misalign;                 /* hand out base + 256 */
    int auto_complete;            /* events complete when recorded */
    int fail_record, fail_create; /* event calls fail with L8_ERR_CUDA */
    int fail_record_at;           /* > 0: only the record call with this number fails */
    uintptr_t next_fake;
    int fail_free;                /* segment_free fails with L8_ERR_CUDA, keeps the memory */
    tp_event *events;             /* every live event */
    int creates, destroys, records, queries, syncs;
    int seg_allocs, seg_frees;    /* calls, failed ones included */
    size_t live_bytes;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int shut_alloc, shut_free, shut_sync;   /* gates (see above) */
    int in_alloc, in_free, in_sync;
} tp;

/* With t->mu held: block here while *shut, counted in *inside. */
static void tp_gate(tp *t, const int *shut, int *inside)
{
    if (!*shut) return;
    (*inside)++;
    pthread_cond_broadcast(&t->cv);
    while (*shut) pthread_cond_wait(&t->cv, &t->mu);
    (*inside)--;
}

static l8_status tp_seg_alloc(void *user, size_t bytes, void **ptr)
{
    tp *t = user;
    l8_status st = L8_OK;
    pthread_mutex_lock(&t->mu);
    t->seg_allocs++;
    tp_gate(t, &t->shut_alloc, &t->in_alloc);
    if (t->fake_addrs) {
        *ptr = (void *)(t->next_fake + (t->misalign ? 256 : 0));
        t->next_fake += (bytes + 4 * MIB) & ~(2 * MIB - 1);
    } else {
        void *p = NULL;
        st = t->host.segment_alloc(t->host.user, bytes + (t->misalign ? 512 : 0), &p);
        if (st == L8_OK) *ptr = (char *)p + (t->misalign ? 256 : 0);
    }
    if (st == L8_OK) t->live_bytes += bytes;
    pthread_mutex_unlock(&t->mu);
    return st;
}

static l8_status tp_seg_free(void *user, void *ptr, size_t bytes)
{
    tp *t = user;
    l8_status st = L8_OK;
    pthread_mutex_lock(&t->mu);
    t->seg_frees++;
    tp_gate(t, &t->shut_free, &t->in_free);
    if (t->fail_free) st = L8_FAIL(L8_ERR_CUDA, "tp: segment_free fails");
    else if (!t->fake_addrs)
        st = t->host.segment_free(t->host.user, (char *)ptr - (t->misalign ? 256 : 0), bytes);
    if (st == L8_OK) t->live_bytes -= bytes;
    pthread_mutex_unlock(&t->mu);
    return st;
}

static l8_status tp_ev_create(void *user, void **ev)
{
    tp *t = user;
    if (t->fail_create) return L8_FAIL(L8_ERR_CUDA, "tp: event_create fails");
    tp_event *e = calloc(1, sizeof *e);
    if (!e) return L8_FAIL(L8_ERR_OOM, "tp: no memory");
    pthread_mutex_lock(&t->mu);
    e->next = t->events;
    t->events = e;
    t->creates++;
    pthread_mutex_unlock(&t->mu);
    *ev = e;
    return L8_OK;
}

static l8_status tp_ev_record(void *user, void *ev, l8_stream_id s)
{
    tp *t = user;
    (void)s;
    l8_status st = L8_OK;
    pthread_mutex_lock(&t->mu);
    if (t->fail_record || (t->fail_record_at && t->records + 1 == t->fail_record_at)) {
        t->fail_record_at = 0;
        st = L8_FAIL(L8_ERR_CUDA, "tp: event_record fails");
    } else {
        ((tp_event *)ev)->done = t->auto_complete;
        t->records++;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

static l8_status tp_ev_query(void *user, void *ev, int *done)
{
    tp *t = user;
    pthread_mutex_lock(&t->mu);
    t->queries++;
    *done = ((tp_event *)ev)->done;
    pthread_mutex_unlock(&t->mu);
    return L8_OK;
}

static l8_status tp_ev_sync(void *user, void *ev)
{
    tp *t = user;
    pthread_mutex_lock(&t->mu);
    t->syncs++;
    tp_gate(t, &t->shut_sync, &t->in_sync);
    ((tp_event *)ev)->done = 1;   /* waiting = the other stream finished */
    pthread_mutex_unlock(&t->mu);
    return L8_OK;
}

static void tp_ev_destroy(void *user, void *ev)
{
    tp *t = user;
    pthread_mutex_lock(&t->mu);
    for (tp_event **pp = &t->events; *pp; pp = &(*pp)->next)
        if (*pp == ev) {
            *pp = ((tp_event *)ev)->next;
            break;
        }
    t->destroys++;
    pthread_mutex_unlock(&t->mu);
    free(ev);
}

static void tp_init(tp *t, int fake_addrs)
{
    memset(t, 0, sizeof *t);
    ck_assert_int_eq(pthread_mutex_init(&t->mu, NULL), 0);
    ck_assert_int_eq(pthread_cond_init(&t->cv, NULL), 0);
    l8_host_provider(&t->host);
    t->fake_addrs = fake_addrs;
    t->next_fake = (uintptr_t)1 << 40;
    t->base.size = sizeof t->base;
    t->base.user = t;
    t->base.name = "tp";
    t->base.device = -1;
    t->base.segment_alloc = tp_seg_alloc;
    t->base.segment_free = tp_seg_free;
    t->base.event_create = tp_ev_create;
    t->base.event_record = tp_ev_record;
    t->base.event_query = tp_ev_query;
    t->base.event_sync = tp_ev_sync;
    t->base.event_destroy = tp_ev_destroy;
}

/* The other streams have finished everything recorded so far. */
static void tp_complete_all(tp *t)
{
    pthread_mutex_lock(&t->mu);
    for (tp_event *e = t->events; e; e = e->next) e->done = 1;
    pthread_mutex_unlock(&t->mu);
}

/* Open both gates: blocked calls go on. */
static void tp_open(tp *t)
{
    pthread_mutex_lock(&t->mu);
    t->shut_alloc = t->shut_free = t->shut_sync = 0;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* Wait up to `secs` until *count >= want (a call has reached a gate).
 * Returns whether it did. */
static int tp_wait_inside(tp *t, const int *count, int want, int secs)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += secs;
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    while (*count < want && rc == 0) rc = pthread_cond_timedwait(&t->cv, &t->mu, &until);
    int ok = *count >= want;
    pthread_mutex_unlock(&t->mu);
    return ok;
}

static int tp_read(tp *t, const int *field)
{
    pthread_mutex_lock(&t->mu);
    int v = *field;
    pthread_mutex_unlock(&t->mu);
    return v;
}

/* After the allocator is destroyed: nothing of the provider is left. */
static void tp_check_released(tp *t)
{
    ck_assert_uint_eq(t->live_bytes, 0);
    ck_assert_ptr_null(t->events);
    ck_assert_int_eq(t->creates, t->destroys);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}

/* ---- helpers ---- */

static l8_alloc_stats stats_of(l8_alloc *a)
{
    l8_alloc_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    L8_CK(l8_alloc_get_stats(a, &s));
    return s;
}

static l8_alloc *make_alloc(const l8_segment_provider *p, size_t limit)
{
    l8_alloc_config cfg = L8_ALLOC_CONFIG_INIT;
    cfg.memory_limit = limit;
    l8_alloc *a = NULL;
    L8_CK(l8_alloc_create(&cfg, p, &a));
    ck_assert_ptr_nonnull(a);
    return a;
}

static size_t round512(size_t n) { return (n + 511) & ~(size_t)511; }

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct visit_sum {
    size_t blocks, free_blocks, pending, live, segments_single_free;
    uintptr_t last_seg;
    size_t seg_blocks;
    int bad;
    const void *pending_addr;
    int pending_seen;
} visit_sum;

static void visit_fn(void *arg, const l8_block_info *b)
{
    visit_sum *v = arg;
    v->blocks++;
    v->free_blocks += !b->allocated && !b->pending;
    v->pending += b->pending;
    v->live += b->allocated;
    if (b->addr % 512 || b->bytes % 512 || b->addr < b->segment ||
        b->addr + b->bytes > b->segment + b->segment_bytes)
        v->bad++;
    if (b->allocated && (b->requested == 0 || b->requested > b->bytes)) v->bad++;
    if (b->pending && (const void *)b->addr == v->pending_addr) v->pending_seen = 1;
    if (!b->allocated && !b->pending && b->addr == b->segment && b->bytes == b->segment_bytes)
        v->segments_single_free++;
}

static visit_sum visit_all(l8_alloc *a)
{
    visit_sum v;
    memset(&v, 0, sizeof v);
    L8_CK(l8_alloc_visit(a, visit_fn, &v));
    ck_assert_int_eq(v.bad, 0);
    return v;
}

/* ---- basics ---- */

START_TEST(test_basic_alloc_free)
{
    l8_segment_provider hp;
    l8_host_provider(&hp);
    ck_assert_str_eq(hp.name, "host");
    ck_assert_int_eq(hp.device, -1);
    l8_alloc *a = make_alloc(&hp, 0);
    void *p = (void *)1;
    L8_CK(l8_alloc_malloc(a, 0, 0, &p));
    ck_assert_ptr_null(p);
    const size_t sizes[] = { 1, 511, 512, 513, 4000, MIB, MIB + 1, 3 * MIB + 7, 25 * MIB };
    void *ptrs[9];
    size_t want_alloc = 0, want_req = 0;
    for (int i = 0; i < 9; i++) {
        L8_CK(l8_alloc_malloc(a, sizes[i], 7, &ptrs[i]));
        ck_assert_ptr_nonnull(ptrs[i]);
        ck_assert_uint_eq((uintptr_t)ptrs[i] % 512, 0);
        size_t bytes = 0;
        l8_stream_id s = 0;
        L8_CK(l8_alloc_block_info(a, ptrs[i], &bytes, &s));
        ck_assert_uint_eq(s, 7);
        ck_assert_uint_ge(bytes, round512(sizes[i]));
        if (sizes[i] <= MIB) ck_assert_uint_eq(bytes, round512(sizes[i]));
        else ck_assert_uint_le(bytes, round512(sizes[i]) + MIB);
        memset(ptrs[i], 0xA5, sizes[i]);   /* host memory: really usable */
        want_alloc += bytes;
        want_req += sizes[i];
    }
    l8_alloc_stats st = stats_of(a);
    ck_assert_uint_eq(st.allocated_bytes, want_alloc);
    ck_assert_uint_eq(st.requested_bytes, want_req);
    ck_assert_uint_eq(st.active_bytes, want_alloc);
    ck_assert_uint_eq(st.live_blocks, 9);
    ck_assert_uint_eq(st.allocations, 9);
    ck_assert_uint_ge(st.reserved_bytes, want_alloc);
    ck_assert_uint_eq(st.segments, st.segment_allocs);
    L8_CK(l8_alloc_check(a));
    for (int i = 0; i < 9; i++) L8_CK(l8_alloc_free(a, ptrs[i]));
    L8_CK(l8_alloc_free(a, NULL));
    st = stats_of(a);
    ck_assert_uint_eq(st.allocated_bytes, 0);
    ck_assert_uint_eq(st.requested_bytes, 0);
    ck_assert_uint_eq(st.active_bytes, 0);
    ck_assert_uint_eq(st.inactive_split_bytes, 0);
    ck_assert_uint_eq(st.frees, 9);
    ck_assert_uint_eq(st.allocated_peak, want_alloc);
    ck_assert_uint_eq(st.requested_peak, want_req);
    visit_sum v = visit_all(a);
    ck_assert_uint_eq(v.segments_single_free, st.segments);
    ck_assert_uint_eq(v.blocks, st.segments);
    L8_CK(l8_alloc_empty_cache(a));
    st = stats_of(a);
    ck_assert_uint_eq(st.reserved_bytes, 0);
    ck_assert_uint_eq(st.segments, 0);
    ck_assert_uint_eq(st.segment_frees, st.segment_allocs);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    l8_alloc_destroy(NULL);
}
END_TEST

START_TEST(test_same_stream_immediate_reuse)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 0);
    const size_t sizes[] = { 4096, 700 * KIB, 3 * MIB, 64 * MIB };
    for (int i = 0; i < 4; i++) {
        void *p = NULL, *q = NULL;
        L8_CK(l8_alloc_malloc(a, sizes[i], 1, &p));
        /* recording the allocation stream itself changes nothing */
        L8_CK(l8_alloc_record_stream(a, p, 1));
        L8_CK(l8_alloc_free(a, p));
        l8_alloc_stats before = stats_of(a);
        L8_CK(l8_alloc_malloc(a, sizes[i], 1, &q));
        ck_assert_ptr_eq(p, q);
        l8_alloc_stats after = stats_of(a);
        ck_assert_uint_eq(after.segment_allocs, before.segment_allocs);
        ck_assert_uint_eq(after.cache_hits, before.cache_hits + 1);
        L8_CK(l8_alloc_free(a, q));
    }
    ck_assert_int_eq(t.records, 0);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

START_TEST(test_stats_inactive_split_and_peaks)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 0);
    void *x = NULL, *y = NULL;
    L8_CK(l8_alloc_malloc(a, 4096, 0, &x));
    L8_CK(l8_alloc_malloc(a, 4096, 0, &y));
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.reserved_bytes, 2 * MIB);
    ck_assert_uint_eq(s.inactive_split_bytes, 2 * MIB - 8192);
    L8_CK(l8_alloc_free(a, x));
    s = stats_of(a);
    /* x's hole and the tail: free bytes of a segment that is still in use */
    ck_assert_uint_eq(s.inactive_split_bytes, 2 * MIB - 4096);
    ck_assert_uint_eq(s.inactive_split_peak, 2 * MIB - 4096);
    L8_CK(l8_alloc_check(a));
    L8_CK(l8_alloc_free(a, y));
    s = stats_of(a);
    ck_assert_uint_eq(s.inactive_split_bytes, 0);   /* wholly free now */
    ck_assert_uint_eq(s.allocated_peak, 8192);
    l8_alloc_reset_peaks(a);
    s = stats_of(a);
    ck_assert_uint_eq(s.allocated_peak, 0);
    ck_assert_uint_eq(s.inactive_split_peak, 0);
    ck_assert_uint_eq(s.reserved_peak, 2 * MIB);
    L8_CK(l8_alloc_malloc(a, 1000, 0, &x));
    s = stats_of(a);
    ck_assert_uint_eq(s.allocated_peak, 1024);
    ck_assert_uint_eq(s.requested_peak, 1000);
    L8_CK(l8_alloc_free(a, x));
    /* an older, shorter stats struct is filled up to its size */
    l8_alloc_stats small;
    memset(&small, 0xEE, sizeof small);
    small.size = offsetof(l8_alloc_stats, requested_bytes);
    L8_CK(l8_alloc_get_stats(a, &small));
    ck_assert_uint_eq(small.allocated_peak, 1024);
    ck_assert_uint_eq(small.requested_bytes, 0xEEEEEEEEEEEEEEEEull);
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* ---- streams ---- */

START_TEST(test_cross_stream_pending)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 0);
    const l8_stream_id A = 0xA, B = 0xB;
    void *x = NULL, *y = NULL, *z = NULL;
    L8_CK(l8_alloc_malloc(a, 4096, A, &x));
    L8_CK(l8_alloc_malloc(a, 4096, A, &y));   /* pins the segment, keeps x's slot exact */
    L8_CK(l8_alloc_record_stream(a, x, B));
    L8_CK(l8_alloc_record_stream(a, x, B));   /* twice: still one stream */
    L8_CK(l8_alloc_free(a, x));
    ck_assert_int_eq(t.records, 1);
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.allocated_bytes, 4096);
    ck_assert_uint_eq(s.active_bytes, 8192);   /* x is still active: pending */
    ck_assert_uint_eq(s.frees, 1);
    visit_sum v;
    memset(&v, 0, sizeof v);
    v.pending_addr = x;
    L8_CK(l8_alloc_visit(a, visit_fn, &v));
    ck_assert_int_eq(v.pending_seen, 1);
    ck_assert_uint_eq(v.pending, 1);
    /* x is pending: never handed out, however often we ask */
    for (int i = 0; i < 5; i++) {
        L8_CK(l8_alloc_malloc(a, 4096, A, &z));
        ck_assert_ptr_ne(z, x);
        ck_assert((uintptr_t)z + 4096 <= (uintptr_t)x || (uintptr_t)z >= (uintptr_t)x + 4096);
        L8_CK(l8_alloc_free(a, z));
    }
    ck_assert_int_gt(t.queries, 0);   /* malloc polls pending events */
    L8_CK(l8_alloc_check(a));
    /* B finished its work: x comes back (exact fit, nothing else fits as well) */
    tp_complete_all(&t);
    L8_CK(l8_alloc_malloc(a, 4096, A, &z));
    ck_assert_ptr_eq(z, x);
    s = stats_of(a);
    ck_assert_uint_eq(s.active_bytes, 8192);
    L8_CK(l8_alloc_free(a, z));
    L8_CK(l8_alloc_free(a, y));
    /* Many pending cycles reuse one event object. */
    for (int i = 0; i < 50; i++) {
        L8_CK(l8_alloc_malloc(a, 8192, A, &x));
        L8_CK(l8_alloc_record_stream(a, x, B));
        L8_CK(l8_alloc_free(a, x));
        tp_complete_all(&t);
    }
    ck_assert_int_le(t.creates, 2);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

START_TEST(test_streams_keep_their_blocks)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 0);
    void *x = NULL, *y = NULL;
    L8_CK(l8_alloc_malloc(a, 64 * KIB, 1, &x));
    L8_CK(l8_alloc_free(a, x));
    L8_CK(l8_alloc_malloc(a, 64 * KIB, 2, &y));   /* another stream: not x */
    ck_assert_ptr_ne(x, y);
    l8_stream_id s = 0;
    L8_CK(l8_alloc_block_info(a, y, NULL, &s));
    ck_assert_uint_eq(s, 2);
    ck_assert_uint_eq(stats_of(a).segments, 2);
    L8_CK(l8_alloc_free(a, y));
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

START_TEST(test_event_failure_holds_block)
{
    /* mode 0: record fails; 1: create fails; 2: one of two records fails,
     * so the block has one live event and is held as well */
    for (int mode = 0; mode < 3; mode++) {
        tp t;
        tp_init(&t, 1);
        l8_alloc *a = make_alloc(&t.base, 0);
        void *x = NULL, *y = NULL, *z = NULL;
        L8_CK(l8_alloc_malloc(a, 4096, 1, &x));
        L8_CK(l8_alloc_malloc(a, 4096, 1, &y));
        L8_CK(l8_alloc_record_stream(a, x, 2));
        L8_CK(l8_alloc_record_stream(a, x, 3));
        if (mode == 0) t.fail_record = 1;
        else if (mode == 1) t.fail_create = 1;
        else t.fail_record_at = 2;
        L8_CK_ST(l8_alloc_free(a, x), L8_ERR_CUDA);
        t.fail_record = t.fail_create = 0;
        /* the pointer is gone ... */
        L8_CK_ST(l8_alloc_free(a, x), L8_ERR_INVALID_ARG);
        ck_assert_uint_eq(stats_of(a).frees, 1);
        /* ... but never handed out while held, even with no events left */
        if (mode == 2) ck_assert_int_eq(t.records, 1);
        tp_complete_all(&t);
        for (int i = 0; i < 3; i++) {
            L8_CK(l8_alloc_malloc(a, 4096, 1, &z));
            ck_assert_ptr_ne(z, x);
            L8_CK(l8_alloc_free(a, z));
        }
        ck_assert_uint_eq(stats_of(a).active_bytes, 8192);
        L8_CK(l8_alloc_check(a));
        L8_CK(l8_alloc_empty_cache(a));   /* the caller synced: held blocks come back */
        L8_CK(l8_alloc_check(a));
        ck_assert_uint_eq(stats_of(a).active_bytes, 4096);
        L8_CK(l8_alloc_malloc(a, 4096, 1, &z));
        ck_assert_ptr_eq(z, x);
        L8_CK(l8_alloc_free(a, z));
        L8_CK(l8_alloc_free(a, y));
        L8_CK(l8_alloc_empty_cache(a));
        l8_alloc_stats s = stats_of(a);
        ck_assert_uint_eq(s.active_bytes, 0);
        ck_assert_uint_eq(s.reserved_bytes, 0);
        l8_alloc_destroy(a);
        tp_check_released(&t);
    }
}
END_TEST

/* ---- the randomized model test ---- */

typedef struct mlive {
    uintptr_t p;
    size_t req, size;
    l8_stream_id s;
    int extra;                    /* recorded on another stream */
} mlive;

typedef struct model {
    mlive live[512];
    size_t nlive;
    uintptr_t pend_p[4096];       /* freed with events the test has not completed */
    size_t pend_n[4096];
    size_t npend;
    uint64_t allocations, frees;
    size_t allocated, requested;
} model;

static void model_check_fresh(const model *m, uintptr_t p, size_t size)
{
    for (size_t i = 0; i < m->nlive; i++)
        ck_assert_msg(p + size <= m->live[i].p || p >= m->live[i].p + m->live[i].size,
                      "block %#lx+%zu overlaps live %#lx+%zu", (unsigned long)p, size,
                      (unsigned long)m->live[i].p, m->live[i].size);
    for (size_t i = 0; i < m->npend; i++)
        ck_assert_msg(p + size <= m->pend_p[i] || p >= m->pend_p[i] + m->pend_n[i],
                      "block %#lx+%zu overlaps a block still pending on another stream",
                      (unsigned long)p, size);
}

static void model_compare(l8_alloc *a, const model *m, size_t limit, const l8_fault_provider *fp)
{
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.allocated_bytes, m->allocated);
    ck_assert_uint_eq(s.requested_bytes, m->requested);
    ck_assert_uint_eq(s.live_blocks, m->nlive);
    ck_assert_uint_eq(s.allocations, m->allocations);
    ck_assert_uint_eq(s.frees, m->frees);
    ck_assert_uint_ge(s.active_bytes, s.allocated_bytes);
    ck_assert_uint_le(s.reserved_bytes, limit);
    ck_assert_uint_eq(s.reserved_bytes, fp->live_bytes);
    ck_assert_uint_le(s.allocated_peak, s.reserved_peak);
    ck_assert_uint_ge(s.allocated_peak, s.allocated_bytes);
}

static size_t random_size(l8_rng *r)
{
    uint64_t k = l8_rng_below(r, 100);
    if (k < 55) return 1 + (size_t)l8_rng_below(r, 64 * KIB);
    if (k < 80) return 64 * KIB + (size_t)l8_rng_below(r, MIB - 64 * KIB + 1);
    return MIB + 1 + (size_t)l8_rng_below(r, 11 * MIB);
}

/* limit_in_cfg: the allocator's own memory_limit; else the provider's. */
static void run_stress(uint64_t salt, int limit_in_cfg)
{
    l8_rng r;
    l8_rng_init(&r, salt);
    const size_t limit = 48 * MIB;
    tp t;
    tp_init(&t, 0);   /* real host memory: the blocks are written to */
    l8_fault_provider fp;
    l8_fault_provider_init(&fp, &t.base);
    if (!limit_in_cfg) fp.memory_limit = limit;
    l8_alloc *a = make_alloc(&fp.base, limit_in_cfg ? limit : 0);
    model *m = calloc(1, sizeof *m);
    ck_assert_ptr_nonnull(m);
    const int ops = l8_test_quick() ? 1500 : 12000;
    const int every = l8_test_quick() ? 16 : 1;
    uint64_t ooms = 0;
    for (int op = 0; op < ops; op++) {
        uint64_t k = l8_rng_below(&r, 100);
        if ((k < 48 && m->nlive < 512) || m->nlive == 0) {
            size_t n = random_size(&r);
            l8_stream_id s = (l8_stream_id)l8_rng_below(&r, 3);
            void *p = NULL;
            int syncs = t.syncs;
            l8_status st = l8_alloc_malloc(a, n, s, &p);
            if (t.syncs != syncs) m->npend = 0;   /* the OOM path waited for every event */
            if (st == L8_ERR_OOM) {
                ck_assert_ptr_null(p);
                ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "reserved"));
                ooms++;
            } else {
                ck_assert_msg(st == L8_OK, "%s", l8_last_error_string());
                size_t bytes = 0;
                L8_CK(l8_alloc_block_info(a, p, &bytes, NULL));
                ck_assert_uint_eq((uintptr_t)p % 512, 0);
                ck_assert_uint_ge(bytes, round512(n));
                model_check_fresh(m, (uintptr_t)p, bytes);
                memset(p, (int)(op & 0xFF), n < 4096 ? n : 4096);
                m->live[m->nlive++] = (mlive){ (uintptr_t)p, n, bytes, s, 0 };
                m->allocations++;
                m->allocated += bytes;
                m->requested += n;
            }
        } else if (k < 80) {
            size_t i = (size_t)l8_rng_below(&r, m->nlive);
            mlive b = m->live[i];
            L8_CK(l8_alloc_free(a, (void *)b.p));
            m->live[i] = m->live[--m->nlive];
            m->frees++;
            m->allocated -= b.size;
            m->requested -= b.req;
            if (b.extra && m->npend < 4096) {
                m->pend_p[m->npend] = b.p;
                m->pend_n[m->npend++] = b.size;
            } else if (b.extra) {
                tp_complete_all(&t);   /* the model's list is full: let them all go */
                m->npend = 0;
            }
            if (l8_rng_below(&r, 4) == 0)   /* and a double free is refused */
                L8_CK_ST(l8_alloc_free(a, (void *)b.p), L8_ERR_INVALID_ARG);
        } else if (k < 92) {
            size_t i = (size_t)l8_rng_below(&r, m->nlive);
            l8_stream_id s = (l8_stream_id)l8_rng_below(&r, 3);
            L8_CK(l8_alloc_record_stream(a, (void *)m->live[i].p, s));
            if (s != m->live[i].s) m->live[i].extra = 1;
        } else if (k < 98) {
            tp_complete_all(&t);
            m->npend = 0;
        } else {
            L8_CK(l8_alloc_empty_cache(a));   /* waits for every pending event */
            m->npend = 0;
        }
        model_compare(a, m, limit, &fp);
        if (op % every == 0) L8_CK(l8_alloc_check(a));
    }
    /* Free everything: every segment becomes one free block. */
    while (m->nlive) {
        L8_CK(l8_alloc_free(a, (void *)m->live[--m->nlive].p));
        m->frees++;
    }
    m->allocated = m->requested = 0;
    tp_complete_all(&t);
    void *p = NULL;
    L8_CK(l8_alloc_malloc(a, 512, 0, &p));   /* processes the completed events */
    L8_CK(l8_alloc_free(a, p));
    m->allocations++;
    m->frees++;
    model_compare(a, m, limit, &fp);
    L8_CK(l8_alloc_check(a));
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.allocated_bytes, 0);
    ck_assert_uint_eq(s.active_bytes, 0);
    ck_assert_uint_eq(s.inactive_split_bytes, 0);
    ck_assert_uint_eq(s.ooms, ooms);
    visit_sum v = visit_all(a);
    ck_assert_uint_eq(v.blocks, s.segments);
    ck_assert_uint_eq(v.segments_single_free, s.segments);
    L8_CK(l8_alloc_empty_cache(a));
    s = stats_of(a);
    ck_assert_uint_eq(s.reserved_bytes, 0);
    ck_assert_uint_eq(fp.live_bytes, 0);
    l8_alloc_destroy(a);
    free(m);
    tp_check_released(&t);
}

START_TEST(test_stress_vs_model_provider_limit)
{
    run_stress(101, 0);
}
END_TEST

START_TEST(test_stress_vs_model_config_limit)
{
    run_stress(202, 1);
}
END_TEST

/* ---- fault injection ---- */

#define SCRIPT_N 14
static const size_t g_script[SCRIPT_N] = { 3000, 2 * MIB + 1, 700 * KIB, 30 * MIB, 512,
                                           5 * MIB, 64 * KIB, 12 * MIB, MIB, 40 * MIB,
                                           900 * KIB, 3 * MIB, 100, 18 * MIB };

/* Run the script: malloc each size (streams alternate), free the one two
 * back every third step. Returns the number of OOMs; *ok[i] says which
 * malloc succeeded, ptr[i] holds what is still live. */
static int run_script(l8_alloc *a, void **ptr, int *ok)
{
    int ooms = 0;
    for (int i = 0; i < SCRIPT_N; i++) {
        ptr[i] = NULL;
        l8_status st = l8_alloc_malloc(a, g_script[i], (l8_stream_id)(i % 2), &ptr[i]);
        ok[i] = st == L8_OK;
        if (st != L8_OK) {
            ck_assert_msg(st == L8_ERR_OOM, "%s", l8_last_error_string());
            ck_assert_ptr_null(ptr[i]);
            const char *msg = l8_last_error()->message;
            char want[64];
            snprintf(want, sizeof want, "cannot allocate %zu bytes", g_script[i]);
            ck_assert_msg(strstr(msg, want) != NULL, "message: %s", msg);
            ck_assert_ptr_nonnull(strstr(msg, "reserved"));
            ck_assert_ptr_nonnull(strstr(msg, "segment"));
            ck_assert_uint_lt(strlen(msg), 2048);
            ooms++;
        }
        L8_CK(l8_alloc_check(a));
        if (i % 3 == 2 && ptr[i - 2]) {
            L8_CK(l8_alloc_free(a, ptr[i - 2]));
            ptr[i - 2] = NULL;
        }
    }
    return ooms;
}

START_TEST(test_fault_nth_segment_alloc)
{
    tp t;
    tp_init(&t, 0);
    l8_fault_provider fp;
    l8_fault_provider_init(&fp, &t.base);
    ck_assert_int_eq(fp.base.device, -1);
    void *ptr[SCRIPT_N];
    int ok[SCRIPT_N];
    /* Without faults: how many segment allocations the script makes. */
    l8_alloc *a = make_alloc(&fp.base, 0);
    ck_assert_int_eq(run_script(a, ptr, ok), 0);
    uint64_t calls = fp.calls;
    ck_assert_uint_gt(calls, 3);
    for (int i = 0; i < SCRIPT_N; i++) L8_CK(l8_alloc_free(a, ptr[i]));
    l8_alloc_destroy(a);
    ck_assert_uint_eq(fp.live_bytes, 0);

    for (int sticky = 0; sticky < 2; sticky++)
        for (uint64_t n = 1; n <= calls + 1; n++) {
            l8_fault_provider_init(&fp, &t.base);
            fp.fail_nth = n;
            fp.fail_sticky = sticky;
            a = make_alloc(&fp.base, 0);
            int ooms = run_script(a, ptr, ok);
            l8_alloc_stats s = stats_of(a);
            ck_assert_uint_eq(s.ooms, (uint64_t)ooms);
            if (!sticky) {
                /* one failure: the allocator falls back or retries, and wins */
                ck_assert_int_eq(ooms, 0);
                ck_assert_uint_le(fp.failures, 1);
            } else if (n <= calls) {
                ck_assert_uint_ge(fp.failures, 1);
            }
            /* Lift the fault: what failed now succeeds. */
            fp.fail_nth = 0;
            for (int i = 0; i < SCRIPT_N; i++)
                if (!ok[i]) L8_CK(l8_alloc_malloc(a, g_script[i], 0, &ptr[i]));
            L8_CK(l8_alloc_check(a));
            for (int i = 0; i < SCRIPT_N; i++) L8_CK(l8_alloc_free(a, ptr[i]));
            s = stats_of(a);
            ck_assert_uint_eq(s.allocated_bytes, 0);
            ck_assert_uint_eq(s.reserved_bytes, fp.live_bytes);
            l8_alloc_destroy(a);
            ck_assert_uint_eq(fp.live_bytes, 0);
        }
    tp_check_released(&t);
}
END_TEST

START_TEST(test_fault_provider_limit_and_counters)
{
    tp t;
    tp_init(&t, 1);
    l8_fault_provider fp;
    l8_fault_provider_init(&fp, &t.base);
    fp.memory_limit = 10 * MIB;
    void *p = NULL, *q = NULL;
    L8_CK(fp.base.segment_alloc(fp.base.user, 8 * MIB, &p));
    ck_assert_uint_eq(fp.live_bytes, 8 * MIB);
    L8_CK_ST(fp.base.segment_alloc(fp.base.user, 4 * MIB, &q), L8_ERR_OOM);
    ck_assert_ptr_null(q);
    L8_CK_ST(fp.base.segment_alloc(fp.base.user, SIZE_MAX, &q), L8_ERR_OOM);
    ck_assert_uint_eq(fp.calls, 3);
    ck_assert_uint_eq(fp.failures, 2);
    L8_CK(fp.base.segment_free(fp.base.user, p, 8 * MIB));
    ck_assert_uint_eq(fp.live_bytes, 0);
    ck_assert_uint_eq(fp.peak_bytes, 8 * MIB);
    fp.memory_limit = 0;
    fp.fail_nth = 2;   /* counted from a reset: call 1 passes, 2 fails, 3 passes */
    fp.calls = 0;
    L8_CK(fp.base.segment_alloc(fp.base.user, MIB, &p));
    L8_CK_ST(fp.base.segment_alloc(fp.base.user, MIB, &q), L8_ERR_OOM);
    L8_CK(fp.base.segment_alloc(fp.base.user, MIB, &q));
    L8_CK(fp.base.segment_free(fp.base.user, p, MIB));
    L8_CK(fp.base.segment_free(fp.base.user, q, MIB));
    /* events pass through */
    void *ev = NULL;
    int done = 7;
    L8_CK(fp.base.event_create(fp.base.user, &ev));
    L8_CK(fp.base.event_record(fp.base.user, ev, 3));
    L8_CK(fp.base.event_query(fp.base.user, ev, &done));
    ck_assert_int_eq(done, 0);
    L8_CK(fp.base.event_sync(fp.base.user, ev));
    L8_CK(fp.base.event_query(fp.base.user, ev, &done));
    ck_assert_int_eq(done, 1);
    fp.base.event_destroy(fp.base.user, ev);
    tp_check_released(&t);
    /* the host provider's events are complete at once */
    l8_segment_provider hp;
    l8_host_provider(&hp);
    L8_CK(hp.event_create(hp.user, &ev));
    ck_assert_ptr_nonnull(ev);
    L8_CK(hp.event_record(hp.user, ev, 1));
    done = 0;
    L8_CK(hp.event_query(hp.user, ev, &done));
    ck_assert_int_eq(done, 1);
    L8_CK(hp.event_sync(hp.user, ev));
    hp.event_destroy(hp.user, ev);
}
END_TEST

/* ---- OOM path ---- */

START_TEST(test_oom_releases_cache_then_fails)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 64 * MIB);
    void *x = NULL, *y = NULL, *z = NULL;
    /* stream 1 caches a 40 MiB segment */
    L8_CK(l8_alloc_malloc(a, 40 * MIB, 1, &x));
    L8_CK(l8_alloc_free(a, x));
    ck_assert_uint_eq(stats_of(a).reserved_bytes, 40 * MIB);
    /* stream 2 cannot use it; a new segment would pass the limit: the cache
     * is released and the retry succeeds */
    L8_CK(l8_alloc_malloc(a, 40 * MIB, 2, &y));
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.retries, 1);
    ck_assert_uint_eq(s.ooms, 0);
    ck_assert_uint_eq(s.reserved_bytes, 40 * MIB);
    ck_assert_uint_le(s.reserved_peak, 64 * MIB);
    /* a real OOM: the state is in the message, nothing changed */
    L8_CK_ST(l8_alloc_malloc(a, 40 * MIB, 2, &z), L8_ERR_OOM);
    ck_assert_ptr_null(z);
    const char *msg = l8_last_error()->message;
    ck_assert_ptr_nonnull(strstr(msg, "cannot allocate 41943040 bytes"));
    ck_assert_ptr_nonnull(strstr(msg, "stream 0x2"));
    ck_assert_ptr_nonnull(strstr(msg, "reserved 40.00 MiB"));
    ck_assert_ptr_nonnull(strstr(msg, "limit 64.00 MiB"));
    s = stats_of(a);
    ck_assert_uint_eq(s.ooms, 1);
    ck_assert_uint_eq(s.retries, 2);
    ck_assert_uint_eq(s.live_blocks, 1);
    L8_CK(l8_alloc_check(a));
    /* bigger than the limit: fails at once, the cache is left alone */
    L8_CK(l8_alloc_malloc(a, 4096, 1, &z));
    L8_CK(l8_alloc_free(a, z));
    uint64_t reserved = stats_of(a).reserved_bytes;
    L8_CK_ST(l8_alloc_malloc(a, 65 * MIB, 1, &z), L8_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "limit"));
    ck_assert_uint_eq(stats_of(a).reserved_bytes, reserved);
    ck_assert_uint_eq(stats_of(a).retries, 2);
    L8_CK(l8_alloc_free(a, y));
    L8_CK(l8_alloc_malloc(a, 60 * MIB, 3, &z));   /* everything cached gives way */
    L8_CK(l8_alloc_free(a, z));
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

START_TEST(test_oom_waits_for_pending)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 8 * MIB);
    void *x = NULL, *y = NULL;
    L8_CK(l8_alloc_malloc(a, 6 * MIB, 1, &x));
    L8_CK(l8_alloc_record_stream(a, x, 2));
    L8_CK(l8_alloc_free(a, x));
    /* x is pending and no other segment fits under the limit: the OOM path
     * waits for the event and reuses x */
    L8_CK(l8_alloc_malloc(a, 6 * MIB, 1, &y));
    ck_assert_ptr_eq(x, y);
    ck_assert_int_ge(t.syncs, 1);
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.retries, 1);
    ck_assert_uint_eq(s.ooms, 0);
    L8_CK(l8_alloc_free(a, y));
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* ---- blocking provider calls run without the lock ---- */

#define S_COMPUTE ((l8_stream_id)0xC0)
#define S_COMM    ((l8_stream_id)0xC1)
#define S_OTHER   ((l8_stream_id)0xC2)

/* A malloc (empty_cache when bytes == 0) on a thread of its own. */
typedef struct call {
    l8_alloc *a;
    size_t bytes;
    l8_stream_id stream;
    void *p;
    l8_status st;
    char msg[512];
} call;

static void *call_body(void *arg)
{
    call *c = arg;
    c->st = c->bytes ? l8_alloc_malloc(c->a, c->bytes, c->stream, &c->p)
                     : l8_alloc_empty_cache(c->a);
    if (c->st != L8_OK) snprintf(c->msg, sizeof c->msg, "%s", l8_last_error_string());
    return NULL;
}

/* What must never wait for another thread's blocked provider call: a cache
 * hit, a record_stream, a free (which records an event), the statistics,
 * the invariant check and describe. On a thread of its own, so that a test
 * of an allocator that does wait still ends (the gate opens after a
 * timeout) and reports it. */
typedef struct quick {
    l8_alloc *a;
    l8_stream_id stream;
    void *expect;                 /* the cached block the malloc must return */
    int ok;
    char msg[512];
    double ns;                    /* how long all of it took */
    l8_status check;              /* l8_alloc_check meanwhile */
    l8_alloc_stats stats;         /* meanwhile */
    char desc[4096];              /* l8_alloc_describe meanwhile */
} quick;

static void *quick_body(void *arg)
{
    quick *q = arg;
    double t0 = now_ns();
    void *p = NULL;
    l8_status st = l8_alloc_malloc(q->a, 4096, q->stream, &p);
    if (st == L8_OK && p != q->expect) {
        snprintf(q->msg, sizeof q->msg, "the malloc did not return the cached block");
        return NULL;
    }
    if (st == L8_OK) st = l8_alloc_record_stream(q->a, p, S_OTHER);
    if (st == L8_OK) st = l8_alloc_free(q->a, p);
    q->check = l8_alloc_check(q->a);
    q->stats.size = sizeof q->stats;
    if (st == L8_OK) st = l8_alloc_get_stats(q->a, &q->stats);
    (void)l8_alloc_describe(q->a, q->desc, sizeof q->desc);
    q->ns = now_ns() - t0;
    q->ok = st == L8_OK;
    if (!q->ok) snprintf(q->msg, sizeof q->msg, "%s", l8_last_error_string());
    return NULL;
}

/* Run q on a thread while another thread's call is parked at a gate of t;
 * returns whether q finished within secs, and whether the parked call was
 * still parked then (only the test opens a gate). Opens the gates after. */
static void run_while_parked(tp *t, const int *in_gate, quick *q, int *finished, int *still)
{
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, quick_body, q), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    *finished = pthread_timedjoin_np(th, NULL, &until) == 0;
    *still = tp_read(t, in_gate) == 1;
    tp_open(t);
    if (!*finished) pthread_join(th, NULL);
}

/* "Promptly": 200 ms, or 2 s under valgrind (quick mode). */
static double prompt_ns(void) { return l8_test_quick() ? 2e9 : 2e8; }

static void assert_quick(const quick *q, int finished, int still, const char *blocked_in)
{
    ck_assert_msg(finished, "a cache hit and a free waited for another thread's %s (the "
                  "allocator's lock was held across it)", blocked_in);
    ck_assert_msg(still, "the blocked %s left its gate on its own", blocked_in);
    ck_assert_msg(q->ok, "%s", q->msg);
    ck_assert_msg(q->ns < prompt_ns(), "the cache hit took %.1f ms while another thread was "
                  "blocked in %s", q->ns / 1e6, blocked_in);
    ck_assert_msg(q->check == L8_OK, "l8_alloc_check while another thread was in %s failed",
                  blocked_in);
}

START_TEST(test_blocked_segment_free_does_not_stall)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 0);
    /* the comm stream's cache: a free 4 KiB block */
    void *w = NULL, *x = NULL;
    L8_CK(l8_alloc_malloc(a, 4096, S_COMM, &w));
    L8_CK(l8_alloc_free(a, w));
    /* the compute stream's: an idle 12 MiB segment, too small for 40 MiB */
    L8_CK(l8_alloc_malloc(a, 12 * MIB, S_COMPUTE, &x));
    L8_CK(l8_alloc_free(a, x));
    ck_assert_uint_eq(stats_of(a).segments, 2);
    /* A: 40 MiB on the compute stream folds the idle segment into a new
     * one; its segment_free (cuMemFree) blocks at the gate */
    t.shut_free = 1;
    call ca = { .a = a, .bytes = 40 * MIB, .stream = S_COMPUTE };
    pthread_t tha;
    ck_assert_int_eq(pthread_create(&tha, NULL, call_body, &ca), 0);
    int parked = tp_wait_inside(&t, &t.in_free, 1, 20), finished = 0, still = 0;
    quick q = { .a = a, .stream = S_COMM, .expect = w };
    if (parked) run_while_parked(&t, &t.in_free, &q, &finished, &still);
    tp_open(&t);
    pthread_join(tha, NULL);
    ck_assert_msg(parked, "the 40 MiB malloc never called segment_free");
    assert_quick(&q, finished, still, "segment_free");
    /* meanwhile the segment on its way out was still reserved (the device
     * held it), in no pool, and said so */
    ck_assert_uint_eq(q.stats.reserved_bytes, 14 * MIB);
    ck_assert_uint_eq(q.stats.segments, 2);
    ck_assert_uint_eq(q.stats.segment_frees, 0);
    ck_assert_msg(strstr(q.desc, "being given back") != NULL, "%s", q.desc);
    /* and A went on once the free returned */
    ck_assert_msg(ca.st == L8_OK, "%s", ca.msg);
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.segment_frees, 1);
    ck_assert_uint_eq(s.reserved_bytes, t.live_bytes);
    ck_assert_int_eq(t.syncs, 0);
    L8_CK(l8_alloc_check(a));
    L8_CK(l8_alloc_free(a, ca.p));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

START_TEST(test_blocked_event_sync_does_not_stall)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 8 * MIB);
    /* the comm stream's cache: a free block in a segment that stays in use */
    void *k = NULL, *w = NULL, *x = NULL;
    L8_CK(l8_alloc_malloc(a, 4096, S_COMM, &k));
    L8_CK(l8_alloc_malloc(a, 4096, S_COMM, &w));
    L8_CK(l8_alloc_free(a, w));
    /* x: 4 MiB of the compute stream, used by the comm stream, freed: pending */
    L8_CK(l8_alloc_malloc(a, 4 * MIB, S_COMPUTE, &x));
    L8_CK(l8_alloc_record_stream(a, x, S_COMM));
    L8_CK(l8_alloc_free(a, x));
    ck_assert_uint_eq(stats_of(a).reserved_bytes, 6 * MIB);
    /* A: 4 MiB more would pass the 8 MiB limit and no cached segment is
     * wholly free: the last resort waits for x's event, blocked at the gate */
    t.shut_sync = 1;
    call ca = { .a = a, .bytes = 4 * MIB, .stream = S_COMPUTE };
    pthread_t tha;
    ck_assert_int_eq(pthread_create(&tha, NULL, call_body, &ca), 0);
    int parked = tp_wait_inside(&t, &t.in_sync, 1, 20), finished = 0, still = 0;
    quick q = { .a = a, .stream = S_COMM, .expect = w };
    if (parked) run_while_parked(&t, &t.in_sync, &q, &finished, &still);
    tp_open(&t);
    pthread_join(tha, NULL);
    ck_assert_msg(parked, "the malloc out of memory never waited for the pending free");
    assert_quick(&q, finished, still, "event_sync");
    ck_assert_uint_eq(q.stats.retries, 1);
    /* the wait over, A got x back */
    ck_assert_msg(ca.st == L8_OK, "%s", ca.msg);
    ck_assert_ptr_eq(ca.p, x);
    ck_assert_int_eq(t.syncs, 1);
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.ooms, 0);
    ck_assert_uint_eq(s.segment_frees, 0);
    L8_CK(l8_alloc_check(a));
    L8_CK(l8_alloc_free(a, ca.p));
    L8_CK(l8_alloc_free(a, k));
    tp_complete_all(&t);
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* The compute stream's malloc never waits for the comm stream's work while
 * it can grow; only memory exhaustion makes it wait. */
START_TEST(test_compute_never_waits_for_comm)
{
    /* small pool: x and a filler take a whole 2 MiB segment; large: x is a
     * whole 20 MiB segment. Either way x is the only block that fits. */
    const size_t sizes[2] = { MIB, 20 * MIB };
    for (int i = 0; i < 2; i++) {
        tp t;
        tp_init(&t, 1);
        l8_alloc *a = make_alloc(&t.base, 0);
        void *x = NULL, *y = NULL, *f = NULL;
        L8_CK(l8_alloc_malloc(a, sizes[i], S_COMPUTE, &x));
        if (i == 0) L8_CK(l8_alloc_malloc(a, MIB, S_COMPUTE, &f));
        ck_assert_uint_eq(stats_of(a).inactive_split_bytes, 0);
        L8_CK(l8_alloc_record_stream(a, x, S_COMM));   /* the all-reduce reads x */
        L8_CK(l8_alloc_free(a, x));
        l8_alloc_stats before = stats_of(a);
        /* x is the only cached candidate and its event is not complete */
        for (int k = 0; k < 3; k++) {
            L8_CK(l8_alloc_malloc(a, sizes[i], S_COMPUTE, &y));
            ck_assert_ptr_ne(y, x);
            L8_CK(l8_alloc_free(a, y));
        }
        l8_alloc_stats s = stats_of(a);
        ck_assert_int_eq(t.syncs, 0);
        ck_assert_int_gt(t.queries, 0);
        ck_assert_uint_eq(s.segment_allocs, before.segment_allocs + 1);   /* it grew once */
        ck_assert_uint_eq(s.retries, 0);
        L8_CK(l8_alloc_check(a));
        /* the comm stream finished: x is reused, still without a wait */
        tp_complete_all(&t);
        L8_CK(l8_alloc_malloc(a, sizes[i], S_COMPUTE, &y));
        ck_assert_int_eq(t.syncs, 0);
        L8_CK(l8_alloc_free(a, y));
        L8_CK(l8_alloc_free(a, f));
        l8_alloc_destroy(a);
        tp_check_released(&t);
        /* memory exhausted (a limit of what is reserved now): the malloc
         * waits for the comm stream, then reuses x */
        tp_init(&t, 1);
        a = make_alloc(&t.base, 8 * MIB);
        L8_CK(l8_alloc_malloc(a, 6 * MIB, S_COMPUTE, &x));
        L8_CK(l8_alloc_record_stream(a, x, S_COMM));
        L8_CK(l8_alloc_free(a, x));
        L8_CK(l8_alloc_malloc(a, 6 * MIB, S_COMPUTE, &y));
        ck_assert_ptr_eq(y, x);
        ck_assert_int_eq(t.syncs, 1);
        ck_assert_uint_eq(stats_of(a).retries, 1);
        L8_CK(l8_alloc_free(a, y));
        l8_alloc_destroy(a);
        tp_check_released(&t);
    }
}
END_TEST

/* The OOM ladder: cached segments go back first (no wait), then pending
 * frees are waited for, then L8_ERR_OOM with the state; a segment_free that
 * fails keeps its segment. */
START_TEST(test_oom_ladder_order)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 16 * MIB);
    void *c = NULL, *x = NULL, *y = NULL, *z = NULL;
    L8_CK(l8_alloc_malloc(a, 8 * MIB, S_OTHER, &c));   /* an 8 MiB cached segment */
    L8_CK(l8_alloc_free(a, c));
    L8_CK(l8_alloc_malloc(a, 6 * MIB, S_COMPUTE, &x));   /* x: pending on the comm stream */
    L8_CK(l8_alloc_record_stream(a, x, S_COMM));
    L8_CK(l8_alloc_free(a, x));
    ck_assert_uint_eq(stats_of(a).reserved_bytes, 14 * MIB);
    /* (1) giving the cached segment back is enough: no wait */
    L8_CK(l8_alloc_malloc(a, 6 * MIB, S_COMPUTE, &y));
    ck_assert_ptr_ne(y, x);
    l8_alloc_stats s = stats_of(a);
    ck_assert_int_eq(t.syncs, 0);
    ck_assert_uint_eq(s.retries, 1);
    ck_assert_uint_eq(s.segment_frees, 1);
    /* (2) nothing cached: wait for x, reuse it */
    L8_CK(l8_alloc_malloc(a, 6 * MIB, S_COMPUTE, &z));
    ck_assert_ptr_eq(z, x);
    ck_assert_int_eq(t.syncs, 1);
    ck_assert_uint_eq(stats_of(a).retries, 2);
    /* (3) nothing helps: L8_ERR_OOM with the state, nothing changed */
    void *q = (void *)1;
    L8_CK_ST(l8_alloc_malloc(a, 6 * MIB, S_COMPUTE, &q), L8_ERR_OOM);
    ck_assert_ptr_null(q);
    const char *msg = l8_last_error()->message;
    ck_assert_msg(strstr(msg, "cannot allocate 6291456 bytes") && strstr(msg, "reserved 12.00 MiB")
                  && strstr(msg, "segment 0x"), "%s", msg);
    s = stats_of(a);
    ck_assert_uint_eq(s.ooms, 1);
    ck_assert_uint_eq(s.live_blocks, 2);
    L8_CK(l8_alloc_check(a));
    /* a segment_free that fails keeps its segment (cached, counted) and the
     * OOM still reports the state */
    L8_CK(l8_alloc_free(a, y));
    t.fail_free = 1;
    L8_CK_ST(l8_alloc_malloc(a, 10 * MIB, S_OTHER, &q), L8_ERR_OOM);
    s = stats_of(a);
    ck_assert_uint_eq(s.reserved_bytes, 12 * MIB);
    ck_assert_uint_eq(s.segments, 2);
    ck_assert_uint_eq(s.reserved_bytes, t.live_bytes);
    L8_CK(l8_alloc_check(a));
    L8_CK_ST(l8_alloc_empty_cache(a), L8_ERR_CUDA);
    ck_assert_uint_eq(stats_of(a).reserved_bytes, 12 * MIB);
    L8_CK(l8_alloc_check(a));
    L8_CK(l8_alloc_malloc(a, 6 * MIB, S_COMPUTE, &q));   /* the kept segment serves again */
    ck_assert_ptr_eq(q, y);
    L8_CK(l8_alloc_free(a, q));
    t.fail_free = 0;
    L8_CK(l8_alloc_free(a, z));
    L8_CK(l8_alloc_empty_cache(a));
    ck_assert_uint_eq(stats_of(a).reserved_bytes, 0);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* A malloc that runs out of memory while another thread is giving memory
 * back (its segment_free blocked) waits for that call instead of failing. */
START_TEST(test_oom_waits_for_calls_in_flight)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 64 * MIB);
    void *x = NULL;
    L8_CK(l8_alloc_malloc(a, 40 * MIB, S_COMPUTE, &x));
    L8_CK(l8_alloc_free(a, x));
    /* A: empty_cache, blocked in segment_free of the 40 MiB */
    t.shut_free = 1;
    call ca = { .a = a, .bytes = 0 };
    pthread_t tha, thb;
    ck_assert_int_eq(pthread_create(&tha, NULL, call_body, &ca), 0);
    int parked = tp_wait_inside(&t, &t.in_free, 1, 20);
    /* B: 40 MiB on another stream fits only once those 40 MiB are back */
    call cb = { .a = a, .bytes = 40 * MIB, .stream = S_COMM };
    int waiting = 0;
    if (parked) {
        ck_assert_int_eq(pthread_create(&thb, NULL, call_body, &cb), 0);
        /* B entered the OOM path (retries counts it) and, holding the lock
         * from there on, is waiting for A when the count shows: stats need
         * the lock */
        for (int i = 0; i < 20000 && !waiting; i++) {
            l8_alloc_stats s = { .size = sizeof s };
            waiting = l8_alloc_get_stats(a, &s) == L8_OK && s.retries == 1;
            if (!waiting) usleep(1000);
        }
    }
    tp_open(&t);
    pthread_join(tha, NULL);
    if (parked) pthread_join(thb, NULL);
    ck_assert_msg(parked, "empty_cache never called segment_free");
    ck_assert_msg(waiting, "the 40 MiB malloc never entered the OOM path");
    ck_assert_msg(ca.st == L8_OK, "%s", ca.msg);
    ck_assert_msg(cb.st == L8_OK, "the malloc failed instead of waiting for memory on its way "
                  "back: %s", cb.msg);
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.ooms, 0);
    ck_assert_uint_eq(s.reserved_bytes, 40 * MIB);
    ck_assert_uint_le(s.reserved_peak, 64 * MIB);
    ck_assert_int_eq(t.syncs, 0);
    L8_CK(l8_alloc_check(a));
    L8_CK(l8_alloc_free(a, cb.p));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* During a strict capture the slow paths never reach the provider: a
 * captured request nothing cached fits is refused without releasing the
 * cache or waiting, and an uncaptured one out of memory fails at once. */
START_TEST(test_capture_slow_paths_never_call_provider)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 64 * MIB);
    void *c = NULL, *x = NULL, *k = NULL, *p = NULL;
    L8_CK(l8_alloc_malloc(a, 12 * MIB, S_COMPUTE, &c));   /* a cached idle segment */
    L8_CK(l8_alloc_free(a, c));
    L8_CK(l8_alloc_malloc(a, 6 * MIB, S_COMM, &x));       /* a pending free (20 MiB segment) */
    L8_CK(l8_alloc_record_stream(a, x, S_COMPUTE));
    L8_CK(l8_alloc_free(a, x));
    L8_CK(l8_alloc_malloc(a, 20 * MIB, S_OTHER, &k));     /* uncaptured, live */
    ck_assert_uint_eq(stats_of(a).reserved_bytes, 52 * MIB);
    int allocs = t.seg_allocs, frees = t.seg_frees, calls = t.queries + t.syncs + t.records +
                                                            t.creates;
    l8_stream_id cs[1] = { S_COMPUTE };
    uint32_t gid = 0;
    L8_CK(l8_alloc_capture_begin(a, cs, 1, &gid, 1));
    int calls_at_begin = t.queries + t.syncs + t.records + t.creates;   /* begin may query */
    L8_CK(l8_alloc_malloc(a, 10 * MIB, S_COMPUTE, &p));   /* adopts the idle segment */
    void *q = (void *)1;
    L8_CK_ST(l8_alloc_malloc(a, 40 * MIB, S_COMPUTE, &q), L8_ERR_STATE);
    ck_assert_ptr_null(q);
    L8_CK_ST(l8_alloc_malloc(a, 30 * MIB, S_OTHER, &q), L8_ERR_OOM);   /* over the limit */
    L8_CK_ST(l8_alloc_empty_cache(a), L8_ERR_STATE);
    L8_CK(l8_alloc_check(a));
    ck_assert_int_eq(t.seg_allocs, allocs);
    ck_assert_int_eq(t.seg_frees, frees);
    ck_assert_int_eq(t.queries + t.syncs + t.records + t.creates, calls_at_begin);
    ck_assert_int_ge(calls_at_begin, calls);
    ck_assert_int_eq(t.syncs, 0);
    L8_CK(l8_alloc_free(a, p));
    L8_CK(l8_alloc_capture_end(a, gid));
    L8_CK(l8_alloc_graph_release(a, gid));
    L8_CK(l8_alloc_free(a, k));
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* A warm-up allocation parked in segment_alloc while its graph is captured,
 * ended and released: the graph pool stays until the allocation is done,
 * which then lands in it, and the segment goes home when freed. */
START_TEST(test_graph_pool_released_during_growth)
{
    tp t;
    tp_init(&t, 0);   /* real host memory: valgrind sees any use after free */
    l8_alloc *a = make_alloc(&t.base, 0);
    l8_stream_id cs[1] = { S_COMPUTE };
    uint32_t gid = 0;
    L8_CK(l8_alloc_capture_begin(a, cs, 1, &gid, 0));   /* a warm-up: the pool may grow */
    t.shut_alloc = 1;
    call ca = { .a = a, .bytes = 3 * MIB, .stream = S_COMPUTE };
    pthread_t tha;
    ck_assert_int_eq(pthread_create(&tha, NULL, call_body, &ca), 0);
    int parked = tp_wait_inside(&t, &t.in_alloc, 1, 20);
    l8_status end = L8_ERR_INTERNAL, rel = L8_ERR_INTERNAL, chk = L8_ERR_INTERNAL;
    if (parked) {
        end = l8_alloc_capture_end(a, gid);
        rel = l8_alloc_graph_release(a, gid);   /* the pool is in use: kept */
        chk = l8_alloc_check(a);
    }
    tp_open(&t);
    pthread_join(tha, NULL);
    ck_assert_msg(parked, "the warm-up allocation never called segment_alloc");
    L8_CK(end);
    L8_CK(rel);
    L8_CK(chk);
    ck_assert_msg(ca.st == L8_OK, "%s", ca.msg);
    memset(ca.p, 0x5A, 3 * MIB);
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_gt(s.graph_reserved_bytes, 0);   /* in the released pool until freed */
    L8_CK(l8_alloc_check(a));
    L8_CK(l8_alloc_free(a, ca.p));                  /* its segment goes home, the pool goes */
    s = stats_of(a);
    ck_assert_uint_eq(s.graph_reserved_bytes, 0);
    ck_assert_uint_eq(s.reserved_bytes, t.live_bytes);
    L8_CK(l8_alloc_check(a));
    void *p = NULL;                                 /* and serves eager code */
    uint64_t allocs = s.segment_allocs;
    L8_CK(l8_alloc_malloc(a, 3 * MIB, S_COMPUTE, &p));
    ck_assert_uint_eq(stats_of(a).segment_allocs, allocs);
    L8_CK(l8_alloc_free(a, p));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* Threads allocating under a memory limit (so growth, folding and the OOM
 * ladder run without the lock, concurrently) while another thread checks
 * every invariant, empties the cache and completes events. */
typedef struct churn {
    l8_alloc *a;
    tp *t;
    l8_stream_id s;
    int ops;
    uint64_t seed;
    int failures, ooms;
    char msg[512];
} churn;

static void *churn_body(void *arg)
{
    churn *c = arg;
    void *live[16] = { 0 };
    uint64_t x = c->seed | 1;
    for (int i = 0; i < c->ops; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int k = (int)(x % 16);
        l8_status st = L8_OK;
        if (live[k]) {
            st = l8_alloc_free(c->a, live[k]);
            live[k] = NULL;
        } else {
            size_t n = (x >> 8) % 3 == 0 ? 2 * MIB + (x >> 16) % (6 * MIB)
                                         : 1 + (x >> 16) % (256 * KIB);
            st = l8_alloc_malloc(c->a, n, c->s, &live[k]);
            if (st == L8_ERR_OOM) {
                c->ooms++;
                st = L8_OK;
            } else if (st == L8_OK && k % 3 == 0) {
                st = l8_alloc_record_stream(c->a, live[k], c->s ^ 1);
            }
        }
        if (st != L8_OK && !c->failures++)
            snprintf(c->msg, sizeof c->msg, "%s", l8_last_error_string());
    }
    for (int k = 0; k < 16; k++)
        if (live[k] && l8_alloc_free(c->a, live[k]) != L8_OK) c->failures++;
    return NULL;
}

typedef struct checker {
    l8_alloc *a;
    tp *t;
    volatile int stop;
    int checks, bad;
    char msg[512];
} checker;

static void *checker_body(void *arg)
{
    checker *c = arg;
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        l8_status st = l8_alloc_check(c->a);
        if (st != L8_OK && !c->bad++) snprintf(c->msg, sizeof c->msg, "%s", l8_last_error_string());
        c->checks++;
        if (c->checks % 8 == 0) tp_complete_all(c->t);
        if (c->checks % 32 == 0 && l8_alloc_empty_cache(c->a) != L8_OK && !c->bad++)
            snprintf(c->msg, sizeof c->msg, "%s", l8_last_error_string());
    }
    return NULL;
}

START_TEST(test_threads_limit_concurrent_check)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 96 * MIB);
    enum { N = 3 };
    pthread_t th[N], tc;
    churn cw[N];
    checker ck = { .a = a, .t = &t };
    l8_rng r;
    l8_rng_init(&r, 505);
    ck_assert_int_eq(pthread_create(&tc, NULL, checker_body, &ck), 0);
    for (int i = 0; i < N; i++) {
        cw[i] = (churn){ .a = a, .t = &t, .s = (l8_stream_id)(0x10 + 2 * i),
                         .ops = l8_test_quick() ? 300 : 20000, .seed = l8_rng_next(&r) };
        ck_assert_int_eq(pthread_create(&th[i], NULL, churn_body, &cw[i]), 0);
    }
    int ooms = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ooms += cw[i].ooms;
    }
    __atomic_store_n(&ck.stop, 1, __ATOMIC_RELEASE);
    ck_assert_int_eq(pthread_join(tc, NULL), 0);
    for (int i = 0; i < N; i++) ck_assert_msg(cw[i].failures == 0, "%s", cw[i].msg);
    ck_assert_msg(ck.bad == 0, "l8_alloc_check failed %d of %d times: %s", ck.bad, ck.checks,
                  ck.msg);
    printf("alloc: 3 threads under a 96 MiB limit, a checker: %d checks, %d OOMs\n", ck.checks,
           ooms);
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.allocated_bytes, 0);
    ck_assert_uint_eq(s.allocations, s.frees);
    ck_assert_uint_eq(s.ooms, (uint64_t)ooms);
    ck_assert_uint_le(s.reserved_peak, 96 * MIB);
    ck_assert_uint_eq(s.reserved_bytes, t.live_bytes);
    tp_complete_all(&t);
    L8_CK(l8_alloc_empty_cache(a));
    ck_assert_uint_eq(stats_of(a).reserved_bytes, 0);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* ---- bad input ---- */

START_TEST(test_bad_input)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = NULL;
    L8_CK_ST(l8_alloc_create(NULL, NULL, &a), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_create(NULL, &t.base, NULL), L8_ERR_INVALID_ARG);
    l8_segment_provider broken = t.base;
    broken.event_query = NULL;
    L8_CK_ST(l8_alloc_create(NULL, &broken, &a), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(a);
    /* a config from newer headers: refused when its unknown tail is set (the
     * tail is a real field here, not whatever lies after a smaller struct) */
    struct { l8_alloc_config c; uint64_t tail; } newer = { L8_ALLOC_CONFIG_INIT, 1 };
    newer.c.size = sizeof newer.c + sizeof newer.tail;
    L8_CK_ST(l8_alloc_create(&newer.c, &t.base, &a), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(a);
    newer.tail = 0;
    L8_CK(l8_alloc_create(&newer.c, &t.base, &a));   /* a zero tail: accepted */
    l8_alloc_destroy(a);
    L8_CK(l8_alloc_create(NULL, &t.base, &a));

    void *x = NULL, *p = (void *)1;
    L8_CK(l8_alloc_malloc(a, 10000, 0, &x));
    l8_alloc_stats before = stats_of(a);
    int dummy;
    L8_CK_ST(l8_alloc_free(a, &dummy), L8_ERR_INVALID_ARG);        /* foreign */
    L8_CK_ST(l8_alloc_free(a, (char *)x + 512), L8_ERR_INVALID_ARG);  /* interior */
    L8_CK_ST(l8_alloc_record_stream(a, &dummy, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_record_stream(a, NULL, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_block_info(a, &dummy, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_malloc(NULL, 16, 0, &p), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(p);
    L8_CK_ST(l8_alloc_malloc(a, 16, 0, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_free(NULL, x), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_get_stats(a, NULL), L8_ERR_INVALID_ARG);
    l8_alloc_stats s0 = { 0 };
    L8_CK_ST(l8_alloc_get_stats(a, &s0), L8_ERR_INVALID_ARG);   /* size not set */
    L8_CK_ST(l8_alloc_visit(a, NULL, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_check(NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_empty_cache(NULL), L8_ERR_INVALID_ARG);
    l8_alloc_reset_peaks(NULL);
    char buf[8];
    ck_assert_uint_gt(l8_alloc_describe(NULL, buf, sizeof buf), 0);
    l8_alloc_stats after = stats_of(a);
    ck_assert_int_eq(memcmp(&before, &after, sizeof before), 0);
    L8_CK(l8_alloc_free(a, x));
    L8_CK_ST(l8_alloc_free(a, x), L8_ERR_INVALID_ARG);              /* double */
    ck_assert_uint_eq(stats_of(a).frees, 1);

    /* absurd sizes: refused without overflow, nothing reserved */
    const size_t absurd[] = { SIZE_MAX, SIZE_MAX - 511, SIZE_MAX / 2, ((size_t)1 << 50) + 1 };
    for (int i = 0; i < 4; i++) {
        p = (void *)1;
        l8_status st = l8_alloc_malloc(a, absurd[i], 0, &p);
        ck_assert(st == L8_ERR_OOM || st == L8_ERR_INVALID_ARG);
        ck_assert_ptr_null(p);
    }
    ck_assert_uint_eq(t.live_bytes, stats_of(a).reserved_bytes);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

START_TEST(test_misaligned_provider)
{
    tp t;
    tp_init(&t, 0);
    t.misalign = 1;   /* segments at 256 mod 512: legal for a provider */
    l8_alloc *a = make_alloc(&t.base, 0);
    const size_t sizes[] = { 100, MIB, 12 * MIB, 2 * MIB, 4 * MIB };
    void *p[5];
    for (int i = 0; i < 5; i++) {
        L8_CK(l8_alloc_malloc(a, sizes[i], 0, &p[i]));
        ck_assert_uint_eq((uintptr_t)p[i] % 512, 0);
        memset(p[i], 1, sizes[i]);   /* inside the host allocation: valgrind checks */
    }
    L8_CK(l8_alloc_check(a));
    for (int i = 0; i < 5; i++) L8_CK(l8_alloc_free(a, p[i]));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

/* ---- describe, visit, threads, trace ---- */

typedef struct reenter {
    l8_alloc *a;
    int calls, ok;
} reenter;

static void visit_reenter(void *arg, const l8_block_info *b)
{
    reenter *r = arg;
    r->calls++;
    if (b->allocated) {
        size_t n = 0;
        r->ok += l8_alloc_block_info(r->a, (void *)b->addr, &n, NULL) == L8_OK && n == b->bytes;
    }
}

START_TEST(test_describe_and_visit)
{
    tp t;
    tp_init(&t, 1);
    l8_alloc *a = make_alloc(&t.base, 0);
    void *p[6];
    for (int i = 0; i < 6; i++) L8_CK(l8_alloc_malloc(a, (size_t)(i + 1) * 3 * MIB, 0, &p[i]));
    char big[8192];
    size_t len = l8_alloc_describe(a, big, sizeof big);
    ck_assert_uint_eq(len, strlen(big));
    ck_assert_ptr_nonnull(strstr(big, "reserved"));
    ck_assert_ptr_nonnull(strstr(big, "segment 0x"));
    char tiny[40];
    size_t want = l8_alloc_describe(a, tiny, sizeof tiny);
    ck_assert_uint_eq(want, len);               /* snprintf rules */
    ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
    ck_assert_uint_eq(l8_alloc_describe(a, NULL, 0), len);
    reenter r = { a, 0, 0 };
    L8_CK(l8_alloc_visit(a, visit_reenter, &r));  /* fn may call the allocator */
    ck_assert_int_eq(r.ok, 6);
    for (int i = 0; i < 6; i++) L8_CK(l8_alloc_free(a, p[i]));
    l8_alloc_destroy(a);
    tp_check_released(&t);
}
END_TEST

typedef struct thr_arg {
    l8_alloc *a;
    l8_stream_id s;
    int ops;
    uint64_t seed;
    int failures;
} thr_arg;

static void *thread_body(void *arg)
{
    thr_arg *ta = arg;
    void *live[32] = { 0 };
    uint64_t x = ta->seed | 1;
    for (int i = 0; i < ta->ops; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int k = (int)(x % 32);
        if (live[k]) {
            ta->failures += l8_alloc_free(ta->a, live[k]) != L8_OK;
            live[k] = NULL;
        } else {
            size_t n = (x >> 8) % 4 == 0 ? 2 * MIB + (x >> 16) % MIB : 1 + (x >> 16) % (64 * KIB);
            ta->failures += l8_alloc_malloc(ta->a, n, ta->s, &live[k]) != L8_OK;
            if (live[k]) memset(live[k], k, 64);
            if (live[k] && k % 5 == 0)
                ta->failures += l8_alloc_record_stream(ta->a, live[k], ta->s + 1) != L8_OK;
        }
    }
    for (int k = 0; k < 32; k++)
        if (live[k]) ta->failures += l8_alloc_free(ta->a, live[k]) != L8_OK;
    return NULL;
}

START_TEST(test_threads)
{
    l8_segment_provider hp;
    l8_host_provider(&hp);
    l8_alloc *a = make_alloc(&hp, 0);
    enum { N = 4 };
    pthread_t th[N];
    thr_arg ta[N];
    l8_rng r;
    l8_rng_init(&r, 303);
    for (int i = 0; i < N; i++) {
        ta[i] = (thr_arg){ a, (l8_stream_id)(i * 2), l8_test_quick() ? 400 : 20000,
                           l8_rng_next(&r), 0 };
        ck_assert_int_eq(pthread_create(&th[i], NULL, thread_body, &ta[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_int_eq(ta[i].failures, 0);
    }
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.allocated_bytes, 0);
    ck_assert_uint_eq(s.allocations, s.frees);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
}
END_TEST

static size_t count_kind(const l8_trace_event *ev, size_t n, l8_trace_kind k)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ev[i].kind == k;
    return c;
}

START_TEST(test_trace_events)
{
    l8_trace *tr = NULL;
    l8_trace_config tc = L8_TRACE_CONFIG_INIT;
    tc.capacity = 1024;
    L8_CK(l8_trace_create(&tc, &tr));
    L8_CK(l8_trace_set_stream(tr, -1, 5, L8_TRACE_STREAM_COPY));   /* recorded by role */
    tp t;
    tp_init(&t, 1);
    l8_alloc_config cfg = L8_ALLOC_CONFIG_INIT;
    cfg.trace = tr;
    cfg.memory_limit = 4 * MIB;
    l8_alloc *a = NULL;
    L8_CK(l8_alloc_create(&cfg, &t.base, &a));
    void *x = NULL, *y = NULL;
    L8_CK(l8_alloc_malloc(a, 1000, 5, &x));
    L8_CK_ST(l8_alloc_malloc(a, 3 * MIB, 5, &y), L8_ERR_OOM);
    L8_CK(l8_alloc_free(a, x));
    L8_CK(l8_alloc_empty_cache(a));
    l8_trace_event ev[64];
    size_t n = l8_trace_events(tr, 0, ev, 64);
    ck_assert_uint_eq(count_kind(ev, n, L8_TRACE_SEGMENT_ALLOC), 1);
    ck_assert_uint_eq(count_kind(ev, n, L8_TRACE_ALLOC), 1);
    ck_assert_uint_eq(count_kind(ev, n, L8_TRACE_FREE_REQUESTED), 1);
    ck_assert_uint_eq(count_kind(ev, n, L8_TRACE_FREE_COMPLETED), 1);
    ck_assert_uint_eq(count_kind(ev, n, L8_TRACE_OOM), 1);
    ck_assert_uint_eq(count_kind(ev, n, L8_TRACE_SEGMENT_FREE), 1);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(ev[i].device, -1);
        if (ev[i].kind == L8_TRACE_ALLOC) {
            ck_assert_uint_eq(ev[i].addr, (uintptr_t)x);
            ck_assert_uint_eq(ev[i].size, 1024);
            ck_assert_uint_eq(ev[i].aux, 1000);
            ck_assert_uint_eq(ev[i].stream, L8_TRACE_STREAM_COPY);
        }
        if (ev[i].kind == L8_TRACE_OOM) {
            ck_assert_uint_eq(ev[i].size, 3 * MIB);
            ck_assert_uint_eq(ev[i].aux, 2 * MIB);
        }
    }
    l8_alloc_destroy(a);
    l8_trace_destroy(tr);
    tp_check_released(&t);
}
END_TEST

/* ---- consolidation and the replay ---- */

START_TEST(test_idle_segments_consolidate)
{
    replay_virtual_provider vp;
    replay_virtual_provider_init(&vp, 0);
    l8_alloc *a = make_alloc(&vp.base, 0);
    void *p[10];
    for (int i = 0; i < 10; i++) L8_CK(l8_alloc_malloc(a, 30 * MIB, 0, &p[i]));
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_gt(s.segments, 2);
    uint64_t reserved = s.reserved_bytes;
    for (int i = 9; i >= 0; i--) L8_CK(l8_alloc_free(a, p[i]));
    /* the next request lands in an idle segment: the idle ones become one */
    L8_CK(l8_alloc_malloc(a, 30 * MIB, 0, &p[0]));
    s = stats_of(a);
    ck_assert_uint_eq(s.segments, 1);
    ck_assert_uint_eq(s.reserved_bytes, reserved);
    ck_assert_uint_le(s.reserved_peak, reserved);
    for (int i = 1; i < 10; i++) L8_CK(l8_alloc_malloc(a, 30 * MIB, 0, &p[i]));
    ck_assert_uint_eq(stats_of(a).segments, 1);   /* the same wave fits again */
    L8_CK(l8_alloc_check(a));
    for (int i = 0; i < 10; i++) L8_CK(l8_alloc_free(a, p[i]));
    l8_alloc_destroy(a);
    ck_assert_uint_eq(vp.live_bytes, 0);
}
END_TEST

static void replay_one(replay_config *c, double bound)
{
    replay_virtual_provider vp;
    replay_virtual_provider_init(&vp, 0);
    l8_alloc *a = make_alloc(&vp.base, 0);
    replay_result res;
    memset(&res, 0, sizeof res);
    res.size = sizeof res;
    L8_CK(replay_training(a, 0, c, &res));
    printf("alloc replay: hidden %d, %d layers, %d steps, seed %llu: allocated peak %.2f GiB, "
           "reserved peak %.2f GiB, ratio %.3f (%llu ops, %.0f ns/op)\n", c->hidden, c->layers,
           c->steps, (unsigned long long)c->seed, (double)res.allocated_peak / (1 << 30),
           (double)res.reserved_peak / (1 << 30), res.ratio, (unsigned long long)res.ops,
           res.ns_per_op);
    ck_assert_uint_gt(res.allocated_peak, 0);
    ck_assert_msg(res.ratio <= bound, "reserved/allocated peak %.4f > %.2f", res.ratio, bound);
    ck_assert_uint_eq(res.reserved_peak, vp.peak_bytes);
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.allocated_bytes, 0);
    ck_assert_uint_eq(s.allocations, s.frees);
    ck_assert_uint_eq(s.allocations * 2, res.ops);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    ck_assert_uint_eq(vp.live_bytes, 0);
}

START_TEST(test_replay_fragmentation)
{
    l8_rng r;
    l8_rng_init(&r, 404);
    replay_config c = REPLAY_CONFIG_INIT;   /* 24 x 4096, 2k-16k tokens */
    c.seed = l8_rng_next(&r);
    if (l8_test_quick()) c.steps = 20;
    replay_one(&c, 1.10);
    c.hidden = 1024;                              /* activations dominate */
    c.seed = l8_rng_next(&r);
    replay_one(&c, 1.10);
}
END_TEST

START_TEST(test_replay_bad_config_and_oom)
{
    replay_virtual_provider vp;
    replay_virtual_provider_init(&vp, 2ull << 30);   /* a 2 GiB device */
    l8_alloc *a = make_alloc(&vp.base, 0);
    replay_result res;
    memset(&res, 0, sizeof res);
    res.size = sizeof res;
    replay_config c = REPLAY_CONFIG_INIT;
    c.hidden = 100;
    L8_CK_ST(replay_training(a, 0, &c, &res), L8_ERR_INVALID_ARG);
    c.hidden = 4096;
    c.steps = 2;
    L8_CK_ST(replay_training(a, 0, &c, &res), L8_ERR_OOM);
    /* the replay gave back everything it held */
    l8_alloc_stats s = stats_of(a);
    ck_assert_uint_eq(s.allocated_bytes, 0);
    ck_assert_uint_eq(s.live_blocks, 0);
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
    ck_assert_uint_eq(vp.live_bytes, 0);
}
END_TEST

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Printed, not asserted: timing belongs to lean8-bench. */
START_TEST(test_pair_timing_printout)
{
    l8_segment_provider hp;
    l8_host_provider(&hp);
    l8_alloc *a = make_alloc(&hp, 0);
    enum { BATCHES = 31 };
    int per = l8_test_quick() ? 100 : 20000;
    double med[BATCHES];
    void *p = NULL;
    L8_CK(l8_alloc_malloc(a, 4096, 0, &p));
    L8_CK(l8_alloc_free(a, p));
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_ns();
        for (int i = 0; i < per; i++) {
            if (l8_alloc_malloc(a, 4096, 0, &p) != L8_OK || l8_alloc_free(a, p) != L8_OK)
                ck_abort_msg("%s", l8_last_error_string());
        }
        med[b] = (now_ns() - t0) / per;
    }
    qsort(med, BATCHES, sizeof med[0], cmp_double);
    printf("alloc: malloc+free pair (4 KiB, warm, host provider): %.1f ns median%s\n",
           med[BATCHES / 2], l8_test_quick() ? " (quick mode)" : "");
    l8_alloc_destroy(a);
}
END_TEST

Suite *l8_alloc_suite(void)
{
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("alloc");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_basic_alloc_free);
    tcase_add_test(tc, test_same_stream_immediate_reuse);
    tcase_add_test(tc, test_stats_inactive_split_and_peaks);
    tcase_add_test(tc, test_cross_stream_pending);
    tcase_add_test(tc, test_streams_keep_their_blocks);
    tcase_add_test(tc, test_event_failure_holds_block);
    tcase_add_test(tc, test_stress_vs_model_provider_limit);
    tcase_add_test(tc, test_stress_vs_model_config_limit);
    tcase_add_test(tc, test_fault_nth_segment_alloc);
    tcase_add_test(tc, test_fault_provider_limit_and_counters);
    tcase_add_test(tc, test_oom_releases_cache_then_fails);
    tcase_add_test(tc, test_oom_waits_for_pending);
    tcase_add_test(tc, test_blocked_segment_free_does_not_stall);
    tcase_add_test(tc, test_blocked_event_sync_does_not_stall);
    tcase_add_test(tc, test_compute_never_waits_for_comm);
    tcase_add_test(tc, test_oom_ladder_order);
    tcase_add_test(tc, test_oom_waits_for_calls_in_flight);
    tcase_add_test(tc, test_capture_slow_paths_never_call_provider);
    tcase_add_test(tc, test_graph_pool_released_during_growth);
    tcase_add_test(tc, test_threads_limit_concurrent_check);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_misaligned_provider);
    tcase_add_test(tc, test_describe_and_visit);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_trace_events);
    tcase_add_test(tc, test_idle_segments_consolidate);
    tcase_add_test(tc, test_replay_fragmentation);
    tcase_add_test(tc, test_replay_bad_config_and_oom);
    tcase_add_test(tc, test_pair_timing_printout);
    suite_add_tcase(s, tc);
    return s;
}
