/* test_pinned.c - the pinned-host pool.
 *
 * Most tests run the pool over a fake provider written here: host memory
 * for segments, and events that complete only when the test says so
 * (fake_complete), so "a block is not reused while a copy may still touch
 * it" can be observed. The fake also fails chosen calls and checks that the
 * pool never frees what it did not get or leaks an event. One test runs over
 * the shared host and fault providers (alloc/provider.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tests/tests.h"
#include "alloc/pinned.h"
#include "alloc/trace.h"

#define EXPECT(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)
#define KiB ((size_t)1024)
#define NSTREAMS 8
#define MAX_SEGS 4096

/* ---- the fake provider ---- */

typedef struct fake_event {
    int recorded;
    unsigned stream;
    uint64_t seq;                 /* the stream's record count at record time */
} fake_event;

typedef struct fake {
    l8_segment_provider prov;
    pthread_mutex_t mu;           /* the pool calls the provider outside its own lock */
    /* gate: the call gate_kind names (segment_alloc or segment_free of
     * gate_bytes, any event_sync) announces itself (gate_in) and waits until
     * the test opens the gate, at most 5 s (then gate_timeout) */
    int gate_kind;
    size_t gate_bytes;
    int gate_in, gate_open, gate_timeout;
    pthread_cond_t cv;
    size_t capacity;              /* 0: unlimited; else real OOM above it */
    uint64_t fail_nth;            /* fail this segment_alloc (1-based), 0: never */
    int fail_sticky;              /* ... and every later one */
    l8_status fail_status;        /* what the injected failure returns */
    int fail_event_create, fail_event_record;   /* fail the next N calls */
    int auto_complete;            /* events complete at once */
    uint64_t seg_calls, seg_frees;
    size_t live_bytes;
    uint64_t live_segs;
    uint64_t rec_seq[NSTREAMS], done_seq[NSTREAMS];
    int ev_created, ev_destroyed, ev_syncs, ev_records, ev_queries;
    int bad_calls;                /* a free of something not handed out, a bad stream */
    struct { void *p; size_t bytes; } segs[MAX_SEGS];
} fake;

enum { GATE_NONE, GATE_ALLOC, GATE_FREE, GATE_SYNC };

static l8_status seg_alloc_locked(fake *f, size_t bytes, void **ptr);

/* With f->mu held: when this call is the gated one, announce it and wait
 * for the test to open the gate (at most 5 s). */
static void gate_locked(fake *f, int kind, size_t bytes)
{
    if (f->gate_kind != kind || (kind != GATE_SYNC && bytes != f->gate_bytes)) return;
    f->gate_in = 1;
    pthread_cond_broadcast(&f->cv);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (!f->gate_open && !f->gate_timeout)
        if (pthread_cond_timedwait(&f->cv, &f->mu, &until) != 0) f->gate_timeout = 1;
}

static l8_status fake_seg_alloc(void *user, size_t bytes, void **ptr)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    gate_locked(f, GATE_ALLOC, bytes);
    l8_status st = seg_alloc_locked(f, bytes, ptr);
    pthread_mutex_unlock(&f->mu);
    return st;
}

static l8_status seg_alloc_locked(fake *f, size_t bytes, void **ptr)
{
    uint64_t n = ++f->seg_calls;
    *ptr = NULL;
    if (f->fail_nth && (n == f->fail_nth || (f->fail_sticky && n > f->fail_nth)))
        return l8_error_set(f->fail_status, 2, "FAKE_ERROR", "fake_seg_alloc", __FILE__, __LINE__,
                            "fake: injected failure of segment_alloc #%llu", (unsigned long long)n);
    if (f->capacity && f->live_bytes + bytes > f->capacity)
        return L8_FAIL(L8_ERR_OOM, "fake: out of memory (%zu of %zu bytes in use)", f->live_bytes,
                       f->capacity);
    int slot = -1;
    for (int i = 0; i < MAX_SEGS && slot < 0; i++)
        if (!f->segs[i].p) slot = i;
    if (slot < 0) return L8_FAIL(L8_ERR_OOM, "fake: segment table full");
    void *p = aligned_alloc(256, bytes);
    if (!p) return L8_FAIL(L8_ERR_OOM, "fake: host malloc failed");
    f->segs[slot].p = p;
    f->segs[slot].bytes = bytes;
    f->live_bytes += bytes;
    f->live_segs++;
    *ptr = p;
    return L8_OK;
}

static l8_status fake_seg_free(void *user, void *ptr, size_t bytes)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    gate_locked(f, GATE_FREE, bytes);
    for (int i = 0; i < MAX_SEGS; i++) {
        if (f->segs[i].p != ptr) continue;
        if (f->segs[i].bytes != bytes) f->bad_calls++;
        free(ptr);
        f->segs[i].p = NULL;
        f->live_bytes -= f->segs[i].bytes;
        f->live_segs--;
        f->seg_frees++;
        pthread_mutex_unlock(&f->mu);
        return L8_OK;
    }
    f->bad_calls++;
    pthread_mutex_unlock(&f->mu);
    return L8_FAIL(L8_ERR_INVALID_ARG, "fake: segment_free of unknown %p", ptr);
}

static l8_status fake_ev_create(void *user, void **ev)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    l8_status st = L8_OK;
    if (f->fail_event_create > 0) {
        f->fail_event_create--;
        st = l8_error_set(L8_ERR_CUDA, 2, "CUDA_ERROR_OUT_OF_MEMORY", "cuEventCreate", __FILE__,
                          __LINE__, "fake: injected event_create failure");
    } else if ((*ev = calloc(1, sizeof(fake_event))) == NULL) {
        st = L8_FAIL(L8_ERR_OOM, "fake: no memory for an event");
    } else {
        f->ev_created++;
    }
    pthread_mutex_unlock(&f->mu);
    return st;
}

static l8_status fake_ev_record(void *user, void *ev, l8_stream_id stream)
{
    fake *f = user;
    fake_event *e = ev;
    pthread_mutex_lock(&f->mu);
    l8_status st = L8_OK;
    if (f->fail_event_record > 0) {
        f->fail_event_record--;
        st = l8_error_set(L8_ERR_CUDA, 700, "CUDA_ERROR_ILLEGAL_ADDRESS", "cuEventRecord",
                          __FILE__, __LINE__, "fake: injected event_record failure");
    } else if (stream >= NSTREAMS) {
        f->bad_calls++;
        st = L8_FAIL(L8_ERR_INVALID_ARG, "fake: bad stream");
    } else {
        f->ev_records++;
        e->recorded = 1;
        e->stream = (unsigned)stream;
        e->seq = ++f->rec_seq[stream];
    }
    pthread_mutex_unlock(&f->mu);
    return st;
}

static int fake_done(const fake *f, const fake_event *e)
{
    return f->auto_complete || !e->recorded || e->seq <= f->done_seq[e->stream];
}

static l8_status fake_ev_query(void *user, void *ev, int *done)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    f->ev_queries++;
    *done = fake_done(f, ev);
    pthread_mutex_unlock(&f->mu);
    return L8_OK;
}

static l8_status fake_ev_sync(void *user, void *ev)
{
    fake *f = user;
    fake_event *e = ev;
    pthread_mutex_lock(&f->mu);
    gate_locked(f, GATE_SYNC, 0);
    f->ev_syncs++;
    if (e->recorded && f->done_seq[e->stream] < e->seq) f->done_seq[e->stream] = e->seq;
    pthread_mutex_unlock(&f->mu);
    return L8_OK;
}

static void fake_ev_destroy(void *user, void *ev)
{
    fake *f = user;
    pthread_mutex_lock(&f->mu);
    f->ev_destroyed++;
    pthread_mutex_unlock(&f->mu);
    free(ev);
}

static fake *fake_new(void)
{
    fake *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(pthread_mutex_init(&f->mu, NULL), 0);
    ck_assert_int_eq(pthread_cond_init(&f->cv, NULL), 0);
    f->prov.size = sizeof f->prov;
    f->prov.user = f;
    f->prov.name = "fake";
    f->prov.device = -1;
    f->prov.segment_alloc = fake_seg_alloc;
    f->prov.segment_free = fake_seg_free;
    f->prov.event_create = fake_ev_create;
    f->prov.event_record = fake_ev_record;
    f->prov.event_query = fake_ev_query;
    f->prov.event_sync = fake_ev_sync;
    f->prov.event_destroy = fake_ev_destroy;
    f->fail_status = L8_ERR_OOM;
    return f;
}

/* All work recorded so far on `stream` has finished. */
static void fake_complete(fake *f, unsigned stream)
{
    pthread_mutex_lock(&f->mu);
    f->done_seq[stream] = f->rec_seq[stream];
    pthread_mutex_unlock(&f->mu);
}

/* After the pool is destroyed: everything came back, nothing was misused. */
static void fake_done_check(fake *f)
{
    ck_assert_uint_eq(f->live_bytes, 0);
    ck_assert_uint_eq(f->live_segs, 0);
    ck_assert_int_eq(f->ev_created, f->ev_destroyed);
    ck_assert_int_eq(f->bad_calls, 0);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

static l8_pinned_stats stats_of(l8_pinned *p)
{
    l8_pinned_stats s = { .size = sizeof s };
    L8_CK(l8_pinned_get_stats(p, &s));
    return s;
}

/* Allocate and touch every requested byte (valgrind sees an undersized block). */
static void *alloc_touch(l8_pinned *p, size_t bytes, int fill)
{
    void *ptr = NULL;
    L8_CK(l8_pinned_alloc(p, bytes, &ptr));
    ck_assert_ptr_nonnull(ptr);
    ck_assert_uint_eq((uintptr_t)ptr % 256, 0);
    memset(ptr, fill, bytes);
    return ptr;
}

/* ---- size classes ---- */

START_TEST(test_class_sizes)
{
    ck_assert_uint_eq(l8_pinned_class_size(0), 0);
    ck_assert_uint_eq(l8_pinned_class_size(1), 4 * KiB);
    ck_assert_uint_eq(l8_pinned_class_size(4 * KiB), 4 * KiB);
    ck_assert_uint_eq(l8_pinned_class_size(4 * KiB + 1), 5 * KiB);
    ck_assert_uint_eq(l8_pinned_class_size(5 * KiB), 5 * KiB);
    ck_assert_uint_eq(l8_pinned_class_size(5 * KiB + 1), 6 * KiB);
    ck_assert_uint_eq(l8_pinned_class_size(7 * KiB + 1), 8 * KiB);
    ck_assert_uint_eq(l8_pinned_class_size(8 * KiB + 1), 10 * KiB);
    ck_assert_uint_eq(l8_pinned_class_size((size_t)1 << 30), (size_t)1 << 30);
    ck_assert_uint_eq(l8_pinned_class_size(((size_t)1 << 30) + 1), (size_t)5 << 28);
    ck_assert_uint_eq(l8_pinned_class_size((size_t)1 << 62), (size_t)1 << 62);
    ck_assert_uint_eq(l8_pinned_class_size(((size_t)1 << 62) + 1), 0);
    ck_assert_uint_eq(l8_pinned_class_size(SIZE_MAX), 0);

    /* exactly four classes in every (2^k, 2^(k+1)] */
    for (int k = 12; k < 62; k++) {
        size_t lo = (size_t)1 << k, prev = lo;
        int distinct = 0;
        for (size_t q = 1; q <= 16; q++) {           /* probe at 1/16 steps and just above */
            size_t b = lo + lo / 16 * q;
            size_t c1 = l8_pinned_class_size(b - lo / 16 + 1), c2 = l8_pinned_class_size(b);
            EXPECT(c1 >= prev && c2 >= c1, "classes not monotonic near %zu", b);
            if (c2 != prev) distinct++;
            prev = c2;
        }
        EXPECT(distinct == 4, "2^%d: %d classes, wanted 4", k, distinct);
    }

    l8_rng r;
    l8_rng_init(&r, 11);
    int n = l8_test_quick() ? 2000 : 200000;
    for (int i = 0; i < n; i++) {
        size_t b = (size_t)(l8_rng_next(&r) >> (l8_rng_below(&r, 50) + 14)) + 1;   /* up to 2^50 */
        size_t c = l8_pinned_class_size(b);
        EXPECT(c >= b, "class(%zu) = %zu is smaller", b, c);
        EXPECT(b < 4 * KiB || c / 4 * 5 <= b + b / 4 + 1 || (double)c <= 1.25 * (double)b,
               "class(%zu) = %zu wastes more than 25%%", b, c);
        EXPECT(b > 4 * KiB || c == 4 * KiB, "class(%zu) = %zu", b, c);
        EXPECT(l8_pinned_class_size(c) == c, "class(class(%zu)) != class", b);
        EXPECT(c % KiB == 0, "class(%zu) = %zu is not a multiple of 1 KiB", b, c);
        EXPECT(l8_pinned_class_size(b + 1) >= c, "class(%zu) < class(%zu)", b + 1, b);
        EXPECT(b == 1 || l8_pinned_class_size(b - 1) <= c, "class(%zu) > class(%zu)", b - 1, b);
    }
}
END_TEST

/* ---- reuse ---- */

START_TEST(test_reuse_same_class)
{
    fake *f = fake_new();
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    void *a = alloc_touch(p, 5000, 0x11);                 /* class 5 KiB */
    L8_CK(l8_pinned_free(p, a));
    void *b = alloc_touch(p, 4500, 0x22);                 /* same class: the same block */
    ck_assert_ptr_eq(b, a);
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.cache_hits, 1);
    ck_assert_uint_eq(s.segment_allocs, 1);
    ck_assert_uint_eq(s.allocated_bytes, 5 * KiB);
    ck_assert_uint_eq(s.requested_bytes, 4500);

    void *c = alloc_touch(p, 5100, 0x33);                 /* same class, a is live: new */
    void *d = alloc_touch(p, 6000, 0x44);                 /* class 6 KiB: new */
    ck_assert_ptr_ne(c, a);
    ck_assert_ptr_ne(d, a);
    ck_assert_ptr_ne(d, c);
    L8_CK(l8_pinned_free(p, d));
    void *e = alloc_touch(p, 5 * KiB, 0x55);              /* 6 KiB block is not 5 KiB's */
    ck_assert_ptr_ne(e, d);
    s = stats_of(p);
    ck_assert_uint_eq(s.segment_allocs, 4);
    ck_assert_uint_eq(s.reserved_bytes, 5 * KiB * 3 + 6 * KiB);
    ck_assert_uint_eq(s.reserved_bytes, f->live_bytes);
    L8_CK(l8_pinned_free(p, b));
    L8_CK(l8_pinned_free(p, c));
    L8_CK(l8_pinned_free(p, e));
    s = stats_of(p);
    ck_assert_uint_eq(s.allocated_bytes, 0);
    ck_assert_uint_eq(s.requested_bytes, 0);
    ck_assert_uint_eq(s.allocated_peak, 5 * KiB * 2 + 6 * KiB);   /* b, c, d */
    ck_assert_uint_eq(s.allocations, 5);
    ck_assert_uint_eq(s.frees, 5);
    L8_CK(l8_pinned_empty_cache(p));
    s = stats_of(p);
    ck_assert_uint_eq(s.reserved_bytes, 0);
    ck_assert_uint_eq(s.segment_frees, 4);
    ck_assert_uint_eq(f->live_bytes, 0);
    ck_assert_uint_eq(s.reserved_peak, 5 * KiB * 3 + 6 * KiB);
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

/* ---- stream-ordered reuse ---- */

START_TEST(test_stream_pending)
{
    fake *f = fake_new();
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    char *a = alloc_touch(p, 64 * KiB, 1);
    L8_CK(l8_pinned_record_stream(p, a + 100, 1));        /* inside the block */
    L8_CK(l8_pinned_record_stream(p, a + 64 * KiB - 1, 2)); /* its last byte */
    L8_CK(l8_pinned_record_stream(p, a, 2));              /* again: one event per stream */
    L8_CK(l8_pinned_free(p, a));
    ck_assert_uint_eq(f->rec_seq[1], 1);
    ck_assert_uint_eq(f->rec_seq[2], 1);
    ck_assert_uint_eq(stats_of(p).pending_blocks, 1);
    ck_assert_uint_eq(stats_of(p).allocated_bytes, 0);
    ck_assert_uint_eq(stats_of(p).reserved_bytes, 64 * KiB);

    char *b = alloc_touch(p, 64 * KiB, 2);                /* a is in flight: not a */
    ck_assert_ptr_ne(b, a);
    L8_CK(l8_pinned_free(p, b));                          /* no streams: reusable at once */
    ck_assert_ptr_eq(alloc_touch(p, 60 * KiB, 3), b);
    fake_complete(f, 1);                                  /* one of two streams done */
    char *c = alloc_touch(p, 64 * KiB, 4);
    ck_assert_ptr_ne(c, a);
    ck_assert_uint_eq(stats_of(p).pending_blocks, 1);
    fake_complete(f, 2);                                  /* both done: a comes back */
    char *d = alloc_touch(p, 64 * KiB, 5);
    ck_assert_ptr_eq(d, a);
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.pending_blocks, 0);
    ck_assert_uint_eq(s.segment_allocs, 3);
    ck_assert_int_eq(f->ev_created, 2);
    ck_assert_int_eq(f->ev_syncs, 0);                     /* never blocked */

    /* again: the events come from the pool, not from event_create */
    L8_CK(l8_pinned_record_stream(p, d, 3));
    L8_CK(l8_pinned_record_stream(p, d, 1));
    L8_CK(l8_pinned_free(p, d));
    ck_assert_int_eq(f->ev_created, 2);
    ck_assert_int_eq(f->ev_records, 4);
    /* empty_cache waits for the pending block and frees it too */
    L8_CK(l8_pinned_free(p, b));
    L8_CK(l8_pinned_free(p, c));
    L8_CK(l8_pinned_empty_cache(p));
    s = stats_of(p);
    ck_assert_uint_eq(s.pending_blocks, 0);
    ck_assert_uint_eq(s.reserved_bytes, 0);
    ck_assert_int_ge(f->ev_syncs, 1);
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

START_TEST(test_destroy_waits)
{
    fake *f = fake_new();
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    void *a = alloc_touch(p, 10 * KiB, 1);
    void *b = alloc_touch(p, 100 * KiB, 2);
    alloc_touch(p, 1 * KiB, 3);                           /* still live at destroy */
    L8_CK(l8_pinned_record_stream(p, a, 4));
    L8_CK(l8_pinned_record_stream(p, a, 5));
    L8_CK(l8_pinned_free(p, a));
    L8_CK(l8_pinned_free(p, b));
    l8_pinned_destroy(p);
    ck_assert_int_eq(f->ev_syncs, 2);                     /* waited for a's two copies */
    l8_pinned_destroy(NULL);
    fake_done_check(f);
}
END_TEST

/* Events on one stream complete in order: a poll stops querying a stream at
 * its first busy event, and older blocks come back before newer ones. */
START_TEST(test_poll_in_order)
{
    enum { N = 10 };
    fake *f = fake_new();
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    void *blk[N];
    for (int i = 0; i < N; i++) blk[i] = alloc_touch(p, 8 * KiB, i);
    for (int i = 0; i < N; i++) {
        L8_CK(l8_pinned_record_stream(p, blk[i], 1));
        L8_CK(l8_pinned_free(p, blk[i]));                /* event seq i + 1 on stream 1 */
    }
    f->ev_queries = 0;
    alloc_touch(p, 100 * KiB, 0);                        /* polls; live until destroy */
    ck_assert_int_eq(f->ev_queries, 1);                   /* not one per pending block */
    ck_assert_uint_eq(stats_of(p).pending_blocks, N);
    f->done_seq[1] = 3;                                   /* the three oldest copies ended */
    for (int i = 0; i < 3; i++) {
        void *x = alloc_touch(p, 8 * KiB, 1);
        int found = 0;
        for (int j = 0; j < 3; j++) found |= x == blk[j];
        ck_assert_msg(found, "a block still in flight was handed out");
    }
    ck_assert_uint_eq(stats_of(p).pending_blocks, N - 3);
    void *y = alloc_touch(p, 8 * KiB, 2);                 /* the rest are busy: fresh block */
    for (int j = 3; j < N; j++) ck_assert_ptr_ne(y, blk[j]);

    /* A waits on streams 1 and 2, the newer B on 1 only. Once stream 1 is
     * done, B is free even though A still waits on 2. */
    void *a = alloc_touch(p, 20 * KiB, 3), *b = alloc_touch(p, 20 * KiB, 4);
    L8_CK(l8_pinned_record_stream(p, a, 1));
    L8_CK(l8_pinned_record_stream(p, a, 2));
    L8_CK(l8_pinned_record_stream(p, b, 1));
    L8_CK(l8_pinned_free(p, a));
    L8_CK(l8_pinned_free(p, b));
    fake_complete(f, 1);
    ck_assert_ptr_eq(alloc_touch(p, 20 * KiB, 5), b);
    ck_assert_uint_eq(stats_of(p).pending_blocks, 1);     /* a */
    l8_pinned_destroy(p);
    ck_assert_int_eq(f->ev_syncs, 1);                     /* a's event on stream 2 */
    fake_done_check(f);
}
END_TEST

/* ---- memory limit and OOM ---- */

START_TEST(test_memory_limit)
{
    fake *f = fake_new();
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 96 * KiB, NULL, &p));
    void *a = alloc_touch(p, 16 * KiB, 1);
    void *b = alloc_touch(p, 32 * KiB, 2);
    L8_CK(l8_pinned_free(p, a));
    L8_CK(l8_pinned_free(p, b));
    /* 48 KiB cached + 64 KiB > 96 KiB: the largest cached block goes first */
    void *c = alloc_touch(p, 64 * KiB, 3);
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.segment_frees, 1);
    ck_assert_uint_eq(s.reserved_bytes, 80 * KiB);
    ck_assert_uint_le(s.reserved_peak, 96 * KiB);
    ck_assert_ptr_eq(alloc_touch(p, 16 * KiB, 4), a);     /* the small one stayed cached */

    void *x = (void *)&x;
    L8_CK_ST(l8_pinned_alloc(p, 128 * KiB, &x), L8_ERR_OOM);   /* larger than the limit */
    ck_assert_ptr_null(x);
    L8_CK_ST(l8_pinned_alloc(p, 32 * KiB, &x), L8_ERR_OOM);    /* 80 live + 32 > 96 */
    ck_assert_msg(strstr(l8_last_error()->message, "memory_limit") &&
                  strstr(l8_last_error()->message, "reserved 81920"), "%s",
                  l8_last_error()->message);

    /* still usable; a pending block is waited for when the limit needs it */
    L8_CK(l8_pinned_record_stream(p, c, 1));
    L8_CK(l8_pinned_free(p, c));
    ck_assert_uint_eq(stats_of(p).pending_blocks, 1);
    void *d = alloc_touch(p, 32 * KiB, 5);
    ck_assert_int_ge(f->ev_syncs, 1);
    s = stats_of(p);
    ck_assert_uint_eq(s.pending_blocks, 0);
    ck_assert_uint_eq(s.reserved_bytes, 48 * KiB);
    ck_assert_uint_le(s.reserved_peak, 96 * KiB);
    ck_assert_uint_eq(s.reserved_bytes, f->live_bytes);
    L8_CK(l8_pinned_free(p, d));
    L8_CK(l8_pinned_free(p, a));
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

START_TEST(test_real_oom)
{
    fake *f = fake_new();
    f->capacity = 256 * KiB;
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    void *blk[5] = { 0 };
    for (int i = 0; i < 4; i++) blk[i] = alloc_touch(p, 64 * KiB, i);
    L8_CK_ST(l8_pinned_alloc(p, 64 * KiB, &blk[4]), L8_ERR_OOM);
    ck_assert_ptr_null(blk[4]);
    const char *m = l8_last_error()->message;
    ck_assert_msg(strstr(m, "pinned pool out of memory") && strstr(m, "reserved 262144") &&
                  strstr(m, "fake: out of memory") && strstr(m, "provider 'fake'"), "%s", m);
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.allocations, 4);
    ck_assert_uint_eq(s.allocated_bytes, 256 * KiB);

    /* usable after: a freed block is handed out again */
    L8_CK(l8_pinned_free(p, blk[0]));
    blk[0] = alloc_touch(p, 64 * KiB, 9);
    /* a bigger class needs the cache released: two cached, one pending */
    L8_CK(l8_pinned_free(p, blk[0]));
    L8_CK(l8_pinned_free(p, blk[1]));
    L8_CK(l8_pinned_record_stream(p, blk[2], 3));
    L8_CK(l8_pinned_free(p, blk[2]));
    void *big = alloc_touch(p, 192 * KiB, 7);             /* class 192 KiB */
    s = stats_of(p);
    ck_assert_uint_eq(s.segment_frees, 3);
    ck_assert_uint_eq(s.pending_blocks, 0);
    ck_assert_int_eq(f->ev_syncs, 1);
    ck_assert_uint_eq(s.reserved_bytes, 256 * KiB);
    L8_CK(l8_pinned_free(p, big));
    L8_CK(l8_pinned_free(p, blk[3]));
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

/* ---- fault injection ---- */

START_TEST(test_segment_faults)
{
    fake *f = fake_new();
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    void *a = alloc_touch(p, 8 * KiB, 1);
    f->fail_nth = 2;                                      /* once: the retry gets #3 */
    void *b = alloc_touch(p, 8 * KiB, 2);
    ck_assert_uint_eq(f->seg_calls, 3);
    f->fail_nth = 4;                                      /* from #4 on */
    f->fail_sticky = 1;
    void *x = NULL;
    L8_CK_ST(l8_pinned_alloc(p, 8 * KiB, &x), L8_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "injected failure"));
    L8_CK(l8_pinned_free(p, b));
    ck_assert_ptr_eq(alloc_touch(p, 8 * KiB, 3), b);      /* the cache still works */
    f->fail_status = L8_ERR_CUDA;                         /* not OOM: passed through, no retry */
    uint64_t calls = f->seg_calls;
    L8_CK_ST(l8_pinned_alloc(p, 8 * KiB, &x), L8_ERR_CUDA);
    ck_assert_uint_eq(f->seg_calls, calls + 1);
    ck_assert_str_eq(l8_last_error()->foreign_name, "FAKE_ERROR");
    f->fail_nth = 0;
    void *c = alloc_touch(p, 8 * KiB, 4);
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.allocations, 4);
    ck_assert_uint_eq(s.allocated_bytes, 3 * 8 * KiB);
    ck_assert_uint_eq(s.reserved_bytes, f->live_bytes);
    L8_CK(l8_pinned_free(p, a));
    L8_CK(l8_pinned_free(p, b));
    L8_CK(l8_pinned_free(p, c));
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

/* An event that cannot be created or recorded: free reports it, the block
 * counts as freed but is never handed out again, and empty_cache returns it. */
START_TEST(test_event_faults)
{
    for (int mode = 0; mode < 2; mode++) {
        fake *f = fake_new();
        l8_pinned *p;
        L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
        void *a = alloc_touch(p, 20 * KiB, 1);
        L8_CK(l8_pinned_record_stream(p, a, 1));
        L8_CK(l8_pinned_record_stream(p, a, 2));
        if (mode == 0) {
            f->fail_event_record = 1;                     /* the first record fails */
        } else {
            /* one event in the pool, so the first record works and the
             * second needs event_create, which fails */
            void *warm = alloc_touch(p, 4 * KiB, 0);
            L8_CK(l8_pinned_record_stream(p, warm, 4));
            L8_CK(l8_pinned_free(p, warm));
            fake_complete(f, 4);
            ck_assert_ptr_eq(alloc_touch(p, 4 * KiB, 0), warm);   /* polls: event pooled */
            L8_CK(l8_pinned_free(p, warm));
            f->fail_event_create = 1;
        }
        L8_CK_ST(l8_pinned_free(p, a), L8_ERR_CUDA);
        ck_assert_int_eq(f->ev_records, mode ? 2 : 0);
        l8_pinned_stats s = stats_of(p);
        ck_assert_uint_eq(s.pending_blocks, 1);
        ck_assert_uint_eq(s.allocated_bytes, 0);
        ck_assert_uint_eq(s.frees, mode ? 3 : 1);
        for (unsigned st = 0; st < NSTREAMS; st++) fake_complete(f, st);
        void *b = alloc_touch(p, 20 * KiB, 2);            /* stranded: never reused */
        ck_assert_ptr_ne(b, a);
        L8_CK_ST(l8_pinned_free(p, a), L8_ERR_INVALID_ARG);   /* already freed */
        L8_CK(l8_pinned_free(p, b));
        L8_CK(l8_pinned_empty_cache(p));
        s = stats_of(p);
        ck_assert_uint_eq(s.pending_blocks, 0);
        ck_assert_uint_eq(s.reserved_bytes, 0);
        ck_assert_uint_eq(f->live_bytes, 0);
        l8_pinned_destroy(p);
        fake_done_check(f);
    }
}
END_TEST

/* Fail the n-th segment_alloc (and all later ones) for every n a scripted
 * workload reaches: each call returns OK or OOM, stats stay true, and once
 * the fault is cleared the pool serves everything again. */
START_TEST(test_fail_every_nth)
{
    static const size_t sizes[] = { 3000, 70000, 4096, 9000, 70000, 1 << 20, 100, 9000 };
    enum { NS = sizeof sizes / sizeof sizes[0] };
    uint64_t baseline = 0;                                /* segment_allocs with no fault */
    for (uint64_t nth = 0; nth <= baseline + 1; nth++) {
        fake *f = fake_new();
        f->fail_nth = nth;
        f->fail_sticky = 1;
        l8_pinned *p;
        L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
        void *ptr[NS] = { 0 };
        int failed = 0;
        for (int i = 0; i < NS; i++) {
            l8_status st = l8_pinned_alloc(p, sizes[i], &ptr[i]);
            ck_assert_msg(st == L8_OK || st == L8_ERR_OOM, "%s", l8_last_error_string());
            if (st != L8_OK) {
                failed++;
                ck_assert_ptr_null(ptr[i]);
            } else {
                memset(ptr[i], i, sizes[i]);
                if (i % 3 == 0) {
                    L8_CK(l8_pinned_free(p, ptr[i]));
                    ptr[i] = NULL;
                }
            }
            l8_pinned_stats s = stats_of(p);
            ck_assert_uint_eq(s.reserved_bytes, f->live_bytes);
            ck_assert_uint_eq(s.segment_allocs - s.segment_frees, f->live_segs);
        }
        if (nth == 0) baseline = f->seg_calls;
        ck_assert_int_eq(failed > 0, nth > 0 && nth <= baseline);
        f->fail_nth = 0;
        for (int i = 0; i < NS; i++) {
            if (!ptr[i]) ptr[i] = alloc_touch(p, sizes[i], 7);
        }
        l8_pinned_stats s = stats_of(p);
        ck_assert_uint_eq(s.allocations - s.frees, NS);
        for (int i = 0; i < NS; i++) L8_CK(l8_pinned_free(p, ptr[i]));
        ck_assert_uint_eq(stats_of(p).allocated_bytes, 0);
        l8_pinned_destroy(p);
        fake_done_check(f);
    }
}
END_TEST

/* The shared providers: host memory with always-complete events, wrapped
 * in the fault provider's memory limit. */
START_TEST(test_host_and_fault_providers)
{
    l8_segment_provider host;
    l8_host_provider(&host);
    l8_fault_provider fp;
    l8_fault_provider_init(&fp, &host);
    fp.memory_limit = 220 * KiB;
    l8_pinned *p;
    L8_CK(l8_pinned_create(&fp.base, 0, NULL, &p));
    char *a = alloc_touch(p, 100 * KiB, 1);               /* class 112 KiB */
    L8_CK(l8_pinned_record_stream(p, a + 5, 2));
    L8_CK(l8_pinned_free(p, a));                          /* host events: done at once */
    ck_assert_ptr_eq(alloc_touch(p, 110 * KiB, 2), a);
    void *b = alloc_touch(p, 96 * KiB, 3);                /* class 96 KiB */
    void *x = NULL;
    L8_CK_ST(l8_pinned_alloc(p, 16 * KiB, &x), L8_ERR_OOM);   /* 112 + 96 + 16 > 220 */
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "memory limit"));
    L8_CK(l8_pinned_free(p, b));
    void *c = alloc_touch(p, 16 * KiB, 4);                /* releases b's cached block */
    ck_assert_uint_eq(fp.live_bytes, 128 * KiB);
    L8_CK(l8_pinned_free(p, a));
    L8_CK(l8_pinned_free(p, c));
    l8_pinned_destroy(p);
    ck_assert_uint_eq(fp.live_bytes, 0);
}
END_TEST

/* ---- bad arguments ---- */

START_TEST(test_bad_pointers)
{
    fake *f = fake_new();
    l8_pinned *p;
    void *x = NULL;
    L8_CK_ST(l8_pinned_create(NULL, 0, NULL, &p), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_pinned_create(&f->prov, 0, NULL, NULL), L8_ERR_INVALID_ARG);
    l8_segment_provider broken = f->prov;
    broken.event_query = NULL;
    L8_CK_ST(l8_pinned_create(&broken, 0, NULL, &p), L8_ERR_INVALID_ARG);
    broken = f->prov;
    broken.size = 8;
    L8_CK_ST(l8_pinned_create(&broken, 0, NULL, &p), L8_ERR_INVALID_ARG);
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));

    L8_CK_ST(l8_pinned_alloc(NULL, 10, &x), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_pinned_alloc(p, 10, NULL), L8_ERR_INVALID_ARG);
    x = (void *)&x;
    L8_CK(l8_pinned_alloc(p, 0, &x));
    ck_assert_ptr_null(x);
    L8_CK_ST(l8_pinned_alloc(p, SIZE_MAX, &x), L8_ERR_OOM);
    ck_assert_uint_eq(f->seg_calls, 0);

    char *a = alloc_touch(p, 10 * KiB, 1);
    int local;
    L8_CK_ST(l8_pinned_free(p, &local), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "not a block"));
    L8_CK_ST(l8_pinned_free(p, a + 256), L8_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "inside a block"));
    L8_CK_ST(l8_pinned_record_stream(p, &local, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_pinned_record_stream(p, NULL, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_pinned_record_stream(NULL, a, 1), L8_ERR_INVALID_ARG);
    L8_CK(l8_pinned_free(p, NULL));
    L8_CK_ST(l8_pinned_free(NULL, a), L8_ERR_INVALID_ARG);
    ck_assert_uint_eq(stats_of(p).allocated_bytes, 10 * KiB);   /* nothing changed */
    L8_CK(l8_pinned_free(p, a));
    L8_CK_ST(l8_pinned_free(p, a), L8_ERR_INVALID_ARG);          /* double free */
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "not live"));
    L8_CK_ST(l8_pinned_record_stream(p, a + 1, 1), L8_ERR_INVALID_ARG);
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.frees, 1);
    ck_assert_uint_eq(s.allocated_bytes, 0);

    l8_pinned_stats bad = { .size = 0 };
    L8_CK_ST(l8_pinned_get_stats(p, &bad), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_pinned_get_stats(p, NULL), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_pinned_empty_cache(NULL), L8_ERR_INVALID_ARG);
    /* an older caller's shorter struct gets a prefix and nothing beyond */
    struct { l8_pinned_stats s; uint64_t canary; } old;
    memset(&old, 0xAB, sizeof old);
    old.s.size = offsetof(l8_pinned_stats, requested_bytes);
    L8_CK(l8_pinned_get_stats(p, &old.s));
    ck_assert_uint_eq(old.s.allocated_peak, 10 * KiB);
    ck_assert_uint_eq(old.s.requested_bytes, 0xABABABABABABABABull);
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

/* ---- statistics against a model, random workload ---- */

typedef struct mblock {
    char *ptr;
    size_t req, cls;
    int live;                     /* 1 live, 0 pending or cached */
    unsigned streams;             /* bit mask while live */
    uint64_t need[NSTREAMS];      /* after free: seq that must be done per stream */
} mblock;

START_TEST(test_stats_random)
{
    fake *f = fake_new();
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    l8_rng r;
    l8_rng_init(&r, 21);
    int nops = l8_test_quick() ? 400 : 6000;
    enum { MAXB = 2048 };
    mblock *m = calloc(MAXB, sizeof *m);
    int nb = 0;
    for (int op = 0; op < nops; op++) {
        uint64_t what = l8_rng_below(&r, 100);
        if (what < 38) {                                  /* alloc */
            size_t req = (size_t)1 + (size_t)l8_rng_below(&r, (uint64_t)1 << l8_rng_below(&r, 19));
            void *vp = NULL;
            L8_CK(l8_pinned_alloc(p, req, &vp));
            char *ptr = vp;
            memset(ptr, op, req);
            int idx = -1;
            for (int i = 0; i < nb; i++)
                if (m[i].ptr == ptr) idx = i;
            if (idx >= 0) {                               /* a reused block: must be safe */
                EXPECT(!m[idx].live, "op %d: live block %p handed out twice", op, ptr);
                for (unsigned st = 0; st < NSTREAMS; st++)
                    EXPECT(f->done_seq[st] >= m[idx].need[st],
                           "op %d: %p reused before stream %u finished", op, ptr, st);
                EXPECT(m[idx].cls == l8_pinned_class_size(req), "op %d: wrong class reused", op);
            } else {
                ck_assert_int_lt(nb, MAXB);
                idx = nb++;
            }
            m[idx] = (mblock){ .ptr = ptr, .req = req, .cls = l8_pinned_class_size(req),
                               .live = 1 };
        } else if (what < 76) {                           /* free */
            int live[MAXB], nl = 0;
            for (int i = 0; i < nb; i++)
                if (m[i].live) live[nl++] = i;
            if (!nl) continue;
            mblock *b = &m[live[l8_rng_below(&r, (uint64_t)nl)]];
            L8_CK(l8_pinned_free(p, b->ptr));
            b->live = 0;
            for (unsigned st = 0; st < NSTREAMS; st++)
                b->need[st] = (b->streams >> st & 1) ? f->rec_seq[st] : 0;
            b->streams = 0;
        } else if (what < 90) {                           /* record a stream */
            for (int i = 0; i < nb; i++) {
                if (!m[i].live) continue;
                unsigned st = (unsigned)l8_rng_below(&r, NSTREAMS);
                L8_CK(l8_pinned_record_stream(p, m[i].ptr + l8_rng_below(&r, m[i].req), st));
                m[i].streams |= 1u << st;
                break;
            }
        } else if (what < 98) {
            fake_complete(f, (unsigned)l8_rng_below(&r, NSTREAMS));
        } else {
            L8_CK(l8_pinned_empty_cache(p));
            for (int i = 0; i < nb; i++)                  /* cached blocks are gone */
                if (!m[i].live) m[i--] = m[--nb];
        }
        /* the stats against the model */
        l8_pinned_stats s = stats_of(p);
        uint64_t alloc_b = 0, req_b = 0, nlive = 0;
        for (int i = 0; i < nb; i++)
            if (m[i].live) {
                alloc_b += m[i].cls;
                req_b += m[i].req;
                nlive++;
            }
        EXPECT(s.allocated_bytes == alloc_b && s.requested_bytes == req_b &&
               s.allocations - s.frees == nlive,
               "op %d: stats %llu/%llu/%llu, model %llu/%llu/%llu",
               op, (unsigned long long)s.allocated_bytes, (unsigned long long)s.requested_bytes,
               (unsigned long long)(s.allocations - s.frees), (unsigned long long)alloc_b,
               (unsigned long long)req_b, (unsigned long long)nlive);
        EXPECT(s.reserved_bytes == f->live_bytes &&
               s.segment_allocs - s.segment_frees == f->live_segs,
               "op %d: reserved %llu, provider %zu", op, (unsigned long long)s.reserved_bytes,
               f->live_bytes);
        EXPECT(s.allocated_peak >= s.allocated_bytes && s.reserved_peak >= s.reserved_bytes &&
               s.reserved_bytes >= s.allocated_bytes, "op %d: peaks", op);
        EXPECT(s.segment_allocs + s.cache_hits == s.allocations, "op %d: hits + segments", op);
    }
    for (int i = 0; i < nb; i++)
        if (m[i].live) L8_CK(l8_pinned_free(p, m[i].ptr));
    free(m);
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

/* ---- threads ---- */

typedef struct pin_worker {
    l8_pinned *p;
    int id, n, errors;
} pin_worker;

static void *pin_thread(void *arg)
{
    pin_worker *w = arg;
    l8_rng r;
    l8_rng_init(&r, 100 + (uint64_t)w->id);
    enum { K = 8 };
    uint64_t *held[K] = { 0 };
    size_t len[K] = { 0 };
    for (int i = 0; i < w->n; i++) {
        int k = (int)l8_rng_below(&r, K);
        if (held[k]) {
            /* nobody else may have written into our block */
            if (held[k][0] != (uint64_t)w->id || held[k][len[k] / 8 - 1] != (uint64_t)w->id)
                w->errors++;
            l8_stream_id s = (l8_stream_id)w->id % NSTREAMS;
            if (l8_rng_below(&r, 2) && l8_pinned_record_stream(w->p, held[k], s) != L8_OK)
                w->errors++;
            if (l8_pinned_free(w->p, held[k]) != L8_OK) w->errors++;
            held[k] = NULL;
        } else {
            len[k] = 8 * (1 + (size_t)l8_rng_below(&r, 4096));
            void *ptr;
            if (l8_pinned_alloc(w->p, len[k], &ptr) != L8_OK) {
                w->errors++;
                continue;
            }
            held[k] = ptr;
            held[k][0] = (uint64_t)w->id;
            held[k][len[k] / 8 - 1] = (uint64_t)w->id;
        }
    }
    for (int k = 0; k < K; k++)
        if (held[k] && l8_pinned_free(w->p, held[k]) != L8_OK) w->errors++;
    return NULL;
}

START_TEST(test_threads)
{
    enum { T = 4 };
    fake *f = fake_new();
    f->auto_complete = 1;
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    pin_worker w[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        w[i] = (pin_worker){ .p = p, .id = i + 1, .n = l8_test_quick() ? 500 : 20000 };
        ck_assert_int_eq(pthread_create(&th[i], NULL, pin_thread, &w[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].errors, 0);
    }
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.allocated_bytes, 0);
    ck_assert_uint_eq(s.allocations, s.frees);
    ck_assert_uint_eq(s.reserved_bytes, f->live_bytes);
    ck_assert_uint_gt(s.cache_hits, 0);
    L8_CK(l8_pinned_empty_cache(p));
    ck_assert_uint_eq(f->live_bytes, 0);
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

/* ---- a cold allocation does not hold the pool ---- */

typedef struct cold_job {
    l8_pinned *p;
    size_t bytes;
    void *ptr;
    l8_status st;
} cold_job;

static void *cold_thread(void *arg)
{
    cold_job *j = arg;
    j->st = l8_pinned_alloc(j->p, j->bytes, &j->ptr);
    return NULL;
}

/* Until the gated segment_alloc is entered (at most 5 s); 1 if it was. */
static int gate_entered(fake *f)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&f->mu);
    while (!f->gate_in && pthread_cond_timedwait(&f->cv, &f->mu, &until) == 0) {}
    int in = f->gate_in;
    pthread_mutex_unlock(&f->mu);
    return in;
}

static void gate_release(fake *f)
{
    pthread_mutex_lock(&f->mu);
    f->gate_open = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

START_TEST(test_cold_alloc_unlocked)
{
    /* One thread's segment_alloc is held inside the provider (the gate)
     * while this thread uses the pool: with the pool's lock held across the
     * provider call these calls would wait for the gate's 5 s timeout, and
     * the test sees gate_timeout. */
    fake *f = fake_new();
    f->auto_complete = 1;
    const size_t cold = (size_t)1 << 20, warm = 64 * KiB, limit = warm + cold + cold / 2;
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, limit, NULL, &p));
    void *w = alloc_touch(p, warm, 1);
    L8_CK(l8_pinned_free(p, w));                   /* cached */
    f->gate_kind = GATE_ALLOC;
    f->gate_bytes = cold;
    cold_job j = { p, cold, NULL, L8_OK };
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, cold_thread, &j), 0);
    ck_assert_msg(gate_entered(f), "the cold allocation never reached the provider");
    /* the pool is free meanwhile: a warm allocation, a free, the stats */
    void *w2 = alloc_touch(p, warm, 2);
    ck_assert_ptr_eq(w2, w);
    L8_CK(l8_pinned_free(p, w2));
    ck_assert_uint_eq(stats_of(p).reserved_bytes, warm);
    /* a second cold block would pass the limit counting the one in flight:
     * refused without a provider call (it would wait at the gate) */
    void *x = NULL;
    L8_CK_ST(l8_pinned_alloc(p, cold, &x), L8_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(l8_last_error()->message, "in flight"));
    ck_assert_int_eq(f->gate_timeout, 0);
    gate_release(f);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    L8_CK(j.st);
    ck_assert_int_eq(f->gate_timeout, 0);
    /* the refused allocation gave the cached warm block back to make room */
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.reserved_bytes, cold);
    ck_assert_uint_le(s.reserved_peak, limit);
    L8_CK(l8_pinned_free(p, j.ptr));
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

/* empty_cache on another thread, held inside the provider (the gate). */
typedef struct empty_job {
    l8_pinned *p;
    l8_status st;
} empty_job;

static void *empty_thread(void *arg)
{
    empty_job *j = arg;
    j->st = l8_pinned_empty_cache(j->p);
    return NULL;
}

/* Start l8_pinned_empty_cache on thread *th with the provider call `kind`
 * (of `bytes`) gated, and wait until it is held there. */
static void start_gated_empty(fake *f, int kind, size_t bytes, empty_job *j, pthread_t *th)
{
    f->gate_kind = kind;
    f->gate_bytes = bytes;
    ck_assert_int_eq(pthread_create(th, NULL, empty_thread, j), 0);
    ck_assert_msg(gate_entered(f), "empty_cache never reached the gated provider call");
}

/* Opens the gate after about 200 ms (a thread: the test itself is blocked). */
static void *gate_later(void *arg)
{
    struct timespec d = { 0, 200 * 1000 * 1000 };
    nanosleep(&d, NULL);
    gate_release(arg);
    return NULL;
}

START_TEST(test_release_unlocked)
{
    /* empty_cache's segment_free is held in the provider while this thread
     * allocates (a new class: a cold allocation), frees and reads the
     * stats: with the pool's lock held across segment_free these would wait
     * for the gate's 5 s timeout (gate_timeout). The block on its way back
     * still counts as reserved until it is gone. */
    fake *f = fake_new();
    f->auto_complete = 1;
    const size_t big = (size_t)1 << 20, small = 64 * KiB;
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    L8_CK(l8_pinned_free(p, alloc_touch(p, big, 1)));
    empty_job j = { p, L8_OK };
    pthread_t th;
    start_gated_empty(f, GATE_FREE, big, &j, &th);
    void *x = alloc_touch(p, small, 2);
    L8_CK(l8_pinned_free(p, x));
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.reserved_bytes, big + small);
    ck_assert_int_eq(f->gate_timeout, 0);
    gate_release(f);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    L8_CK(j.st);
    s = stats_of(p);
    ck_assert_uint_eq(s.reserved_bytes, small);   /* cached after the detach: kept */
    ck_assert_uint_eq(s.segment_frees, 1);
    void *y = alloc_touch(p, small, 3);           /* the cached block again */
    ck_assert_ptr_eq(y, x);
    L8_CK(l8_pinned_free(p, y));
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

START_TEST(test_oom_waits_for_release)
{
    /* Under a limit with room for one big block: while another thread's
     * empty_cache is giving the cached big block back (held in segment_free),
     * an allocation that needs its room must wait for it and succeed, not
     * fail with L8_ERR_OOM. */
    fake *f = fake_new();
    f->auto_complete = 1;
    const size_t big = (size_t)1 << 20;
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, big + big / 4, NULL, &p));
    L8_CK(l8_pinned_free(p, alloc_touch(p, big, 1)));
    empty_job j = { p, L8_OK };
    pthread_t th, opener;
    start_gated_empty(f, GATE_FREE, big, &j, &th);
    ck_assert_int_eq(pthread_create(&opener, NULL, gate_later, f), 0);
    void *x = NULL;
    L8_CK(l8_pinned_alloc(p, big, &x));           /* waits for the release, then grows */
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(pthread_join(opener, NULL), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    L8_CK(j.st);
    ck_assert_int_eq(f->gate_timeout, 0);
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.reserved_bytes, big);
    ck_assert_uint_le(s.reserved_peak, big + big / 4);
    ck_assert_uint_eq(s.segment_frees, 1);
    L8_CK(l8_pinned_free(p, x));
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

START_TEST(test_event_wait_unlocked)
{
    /* empty_cache waits for a pending block's copy (event_sync, held in the
     * gate) while this thread allocates, frees and records streams: none of
     * it waits for that copy. Afterwards the block is cached and given back. */
    fake *f = fake_new();
    const size_t sz = 64 * KiB;
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, NULL, &p));
    void *a = alloc_touch(p, sz, 1);
    L8_CK(l8_pinned_record_stream(p, a, 1));
    L8_CK(l8_pinned_free(p, a));                  /* pending on stream 1 */
    ck_assert_uint_eq(stats_of(p).pending_blocks, 1);
    empty_job j = { p, L8_OK };
    pthread_t th;
    start_gated_empty(f, GATE_SYNC, 0, &j, &th);
    void *b = alloc_touch(p, sz, 2);              /* not a: its copy may still run */
    ck_assert_ptr_ne(b, a);
    L8_CK(l8_pinned_record_stream(p, b, 2));
    fake_complete(f, 2);
    L8_CK(l8_pinned_free(p, b));
    ck_assert_int_eq(f->gate_timeout, 0);
    gate_release(f);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    L8_CK(j.st);
    l8_pinned_stats s = stats_of(p);
    ck_assert_uint_eq(s.pending_blocks, 1);       /* b: freed after the wait began */
    L8_CK(l8_pinned_empty_cache(p));              /* b's copy is done: both gone */
    s = stats_of(p);
    ck_assert_uint_eq(s.pending_blocks, 0);
    ck_assert_uint_eq(s.reserved_bytes, 0);
    l8_pinned_destroy(p);
    fake_done_check(f);
}
END_TEST

/* ---- trace events ---- */

START_TEST(test_trace_events)
{
    fake *f = fake_new();
    f->prov.device = 3;
    l8_trace *t;
    L8_CK(l8_trace_create(NULL, &t));
    l8_pinned *p;
    L8_CK(l8_pinned_create(&f->prov, 0, t, &p));
    L8_CK(l8_tag_push("offload.layer2"));
    void *a = alloc_touch(p, 5000, 1);
    L8_CK(l8_pinned_record_stream(p, a, 1));
    L8_CK(l8_pinned_record_stream(p, a, 2));
    L8_CK(l8_pinned_free(p, a));
    L8_CK(l8_tag_pop());
    void *b = alloc_touch(p, 100, 2);
    L8_CK(l8_pinned_free(p, b));
    l8_trace_event ev[8];
    ck_assert_uint_eq(l8_trace_events(t, 0, ev, 8), 4);
    ck_assert_uint_eq(ev[0].kind, L8_TRACE_PINNED_ALLOC);
    ck_assert_uint_eq(ev[0].addr, (uintptr_t)a);
    ck_assert_uint_eq(ev[0].size, 5 * KiB);
    ck_assert_uint_eq(ev[0].aux, 5000);
    ck_assert_int_eq(ev[0].device, 3);
    ck_assert_str_eq(l8_trace_tag_name(t, ev[0].tag), "offload.layer2");
    ck_assert_uint_eq(ev[1].kind, L8_TRACE_PINNED_FREE);
    ck_assert_uint_eq(ev[1].addr, (uintptr_t)a);
    ck_assert_uint_eq(ev[1].aux, 2);                      /* waits on two streams */
    ck_assert_uint_eq(ev[2].kind, L8_TRACE_PINNED_ALLOC);
    ck_assert_uint_eq(ev[2].size, 4 * KiB);
    ck_assert_uint_eq(ev[2].tag, 0);
    ck_assert_uint_eq(ev[3].kind, L8_TRACE_PINNED_FREE);
    ck_assert_uint_eq(ev[3].aux, 0);
    l8_pinned_destroy(p);
    l8_trace_destroy(t);
    fake_done_check(f);
}
END_TEST

Suite *l8_pinned_suite(void)
{
    Suite *s = suite_create("pinned");
    TCase *tc = tcase_create("pinned");
    tcase_set_tags(tc, "host");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_class_sizes);
    tcase_add_test(tc, test_reuse_same_class);
    tcase_add_test(tc, test_stream_pending);
    tcase_add_test(tc, test_destroy_waits);
    tcase_add_test(tc, test_poll_in_order);
    tcase_add_test(tc, test_memory_limit);
    tcase_add_test(tc, test_real_oom);
    tcase_add_test(tc, test_segment_faults);
    tcase_add_test(tc, test_event_faults);
    tcase_add_test(tc, test_fail_every_nth);
    tcase_add_test(tc, test_host_and_fault_providers);
    tcase_add_test(tc, test_bad_pointers);
    tcase_add_test(tc, test_stats_random);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_cold_alloc_unlocked);
    tcase_add_test(tc, test_release_unlocked);
    tcase_add_test(tc, test_oom_waits_for_release);
    tcase_add_test(tc, test_event_wait_unlocked);
    tcase_add_test(tc, test_trace_events);
    suite_add_tcase(s, tc);
    return s;
}
