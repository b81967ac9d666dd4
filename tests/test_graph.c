/* test_graph.c - CUDA graphs: the capture-safe caching allocator on the host
 * (fault-injecting provider: a captured allocation is served from the
 * graph-private pool, one that would need the driver is an error, no event
 * is touched during a capture, blocks freed during a capture wait for the
 * graph, the pool goes back with the graph), the graph API on the host
 * backend (it runs the step eagerly at each launch), and on a GPU: replay
 * equals eager bitwise, streams fork and join inside the capture, and an
 * allocation during capture never reaches the driver.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/tests.h"
#include "runtime/lean8.h"
#include "runtime/graph.h"
#include "runtime/internal.h"   /* l8i_graph_kernel_priorities, l8i_graph_refuse_chain */
#include "alloc/alloc.h"
#include "alloc/pinned.h"
#include "ops/elementwise.h"
#include "ops/optim.h"
#include "runtime/params.h"

/* ---- the allocator under capture (host provider, fault injection) ---- */

/* The fault provider, plus counts of every event call. */
typedef struct counting {
    l8_fault_provider fp;
    l8_segment_provider base;     /* what the allocator gets */
    uint64_t seg_allocs, seg_frees, events;
} counting;

static l8_status c_salloc(void *u, size_t n, void **p)
{
    counting *c = u;
    c->seg_allocs++;
    return c->fp.base.segment_alloc(c->fp.base.user, n, p);
}
static l8_status c_sfree(void *u, void *p, size_t n)
{
    counting *c = u;
    c->seg_frees++;
    return c->fp.base.segment_free(c->fp.base.user, p, n);
}
static l8_status c_ecreate(void *u, void **e)
{
    counting *c = u;
    c->events++;
    return c->fp.base.event_create(c->fp.base.user, e);
}
static l8_status c_erecord(void *u, void *e, l8_stream_id s)
{
    counting *c = u;
    c->events++;
    return c->fp.base.event_record(c->fp.base.user, e, s);
}
static l8_status c_equery(void *u, void *e, int *d)
{
    counting *c = u;
    c->events++;
    return c->fp.base.event_query(c->fp.base.user, e, d);
}
static l8_status c_esync(void *u, void *e)
{
    counting *c = u;
    c->events++;
    return c->fp.base.event_sync(c->fp.base.user, e);
}
static void c_edestroy(void *u, void *e)
{
    counting *c = u;
    c->fp.base.event_destroy(c->fp.base.user, e);
}

static l8_alloc *counting_alloc(counting *c)
{
    l8_segment_provider host;
    memset(c, 0, sizeof *c);
    l8_host_provider(&host);
    l8_fault_provider_init(&c->fp, &host);
    c->base = c->fp.base;
    c->base.user = c;
    c->base.name = "counting(fault(host))";
    c->base.segment_alloc = c_salloc;
    c->base.segment_free = c_sfree;
    c->base.event_create = c_ecreate;
    c->base.event_record = c_erecord;
    c->base.event_query = c_equery;
    c->base.event_sync = c_esync;
    c->base.event_destroy = c_edestroy;
    l8_alloc *a = NULL;
    L8_CK(l8_alloc_create(NULL, &c->base, &a));
    return a;
}

static l8_alloc_stats astats(l8_alloc *a)
{
    l8_alloc_stats s = { .size = sizeof s };
    L8_CK(l8_alloc_get_stats(a, &s));
    return s;
}

#define S1 ((l8_stream_id)0x100)  /* the captured stream */
#define S2 ((l8_stream_id)0x200)  /* another captured stream (comm) */
#define S3 ((l8_stream_id)0x300)  /* not captured */
#define MIB ((size_t)1 << 20)

/* Does any of the graph pool's blocks appear among eager allocations? */
static int overlaps(const void *p, size_t n, void *const *q, const size_t *qn, int m)
{
    for (int i = 0; i < m; i++)
        if ((const char *)p < (const char *)q[i] + qn[i] && (const char *)q[i] < (const char *)p + n)
            return 1;
    return 0;
}

START_TEST(test_host_alloc_capture_pool)
{
    counting c;
    l8_alloc *a = counting_alloc(&c);
    /* an eager step before: blocks on S1, freed (their segments stay cached) */
    void *keep = NULL;                            /* allocated before, freed during capture */
    L8_CK(l8_alloc_malloc(a, 8192, S1, &keep));
    void *xs = NULL;                              /* used on S2 too: its free records an event */
    L8_CK(l8_alloc_malloc(a, 2 * MIB + 4096, S1, &xs));
    L8_CK(l8_alloc_record_stream(a, xs, S2));
    void *w[3];
    size_t wn[3] = { 4096, 24 * MIB, 64 * MIB };
    for (int i = 0; i < 3; i++) L8_CK(l8_alloc_malloc(a, wn[i], S1, &w[i]));
    for (int i = 0; i < 3; i++) L8_CK(l8_alloc_free(a, w[i]));
    l8_alloc_stats before = astats(a);

    /* the warm-up, routed to a new graph pool: it grows through the provider */
    l8_stream_id cs[2] = { S1, S2 };
    uint32_t gid = 0;
    size_t pn[4] = { 4096, 300 * 1024, 1000, 20 * MIB };
    void *p[4];
    uint64_t seg0 = c.seg_allocs;
    L8_CK(l8_alloc_capture_begin(a, cs, 2, &gid, 0));
    ck_assert_uint_gt(gid, 0);
    for (int i = 0; i < 3; i++) L8_CK(l8_alloc_malloc(a, pn[i], i == 2 ? S2 : S1, &p[i]));
    ck_assert_uint_eq(c.seg_allocs, seg0 + 2);    /* small segments for S1 and S2 */
    for (int i = 0; i < 3; i++) L8_CK(l8_alloc_free(a, p[i]));
    L8_CK(l8_alloc_capture_end(a, gid));
    ck_assert_uint_gt(astats(a).graph_reserved_bytes, 0);

    /* the capture: served from the pool, or from a wholly free cached
     * segment (the 20 MiB), never from the provider, no event touched */
    uint64_t seg1 = c.seg_allocs, ev1 = c.events;
    L8_CK(l8_alloc_capture_begin(a, cs, 2, &gid, 1));
    uint32_t g2 = 0;
    L8_CK_ST(l8_alloc_capture_begin(a, cs, 2, &g2, 1), L8_ERR_STATE);   /* one at a time */
    for (int i = 0; i < 4; i++) L8_CK(l8_alloc_malloc(a, pn[i], i == 2 ? S2 : S1, &p[i]));
    ck_assert_uint_eq(c.seg_allocs, seg1);
    /* freed and allocated again in the capture: the same block (stream order) */
    L8_CK(l8_alloc_free(a, p[1]));
    void *again = NULL;
    L8_CK(l8_alloc_malloc(a, pn[1], S1, &again));
    ck_assert_ptr_eq(again, p[1]);
    /* freed during capture, allocated before it: held for the graph */
    L8_CK(l8_alloc_free(a, keep));
    L8_CK(l8_alloc_free(a, xs));                  /* recorded on S2: held, no event recorded */
    ck_assert_uint_eq(astats(a).graph_held_bytes, 8192 + 2 * MIB + 4096);
    /* a request nothing cached fits: an error, no driver call */
    void *big = (void *)1;
    L8_CK_ST(l8_alloc_malloc(a, 512 * MIB, S1, &big), L8_ERR_STATE);
    ck_assert_ptr_null(big);
    ck_assert_msg(strstr(l8_last_error()->message, "graph capture") != NULL, "%s",
                  l8_last_error()->message);
    ck_assert_uint_eq(astats(a).capture_refusals, 1);
    L8_CK_ST(l8_alloc_empty_cache(a), L8_ERR_STATE);
    ck_assert_uint_eq(c.seg_allocs, seg1);
    ck_assert_uint_eq(c.seg_frees, 0);
    ck_assert_uint_eq(c.events, ev1);             /* no event created, recorded or queried */
    /* an uncaptured stream is served as usual (it is not captured) */
    void *other = NULL;
    L8_CK(l8_alloc_malloc(a, 4096, S3, &other));
    L8_CK(l8_alloc_check(a));
    L8_CK(l8_alloc_capture_end(a, gid));
    L8_CK_ST(l8_alloc_capture_end(a, gid), L8_ERR_INVALID_ARG);

    /* after the capture, eager allocations never see the graph's memory */
    void *e[6];
    size_t en[6] = { 4096, 4096, 300 * 1024, 8192, 20 * MIB, 2 * MIB + 4096 };
    p[1] = again;
    for (int i = 0; i < 6; i++) {
        L8_CK(l8_alloc_malloc(a, en[i], S1, &e[i]));
        ck_assert_msg(!overlaps(e[i], en[i], p, pn, 4), "eager block %d inside the graph pool", i);
        ck_assert_msg(e[i] != keep && e[i] != xs, "eager block %d reuses a held block", i);
    }
    for (int i = 0; i < 6; i++) L8_CK(l8_alloc_free(a, e[i]));
    L8_CK(l8_alloc_check(a));
    L8_CK_ST(l8_alloc_graph_release(a, gid + 7), L8_ERR_INVALID_ARG);

    /* the graph is gone: held blocks and the pool's segments come back */
    for (int i = 0; i < 4; i++) L8_CK(l8_alloc_free(a, p[i]));
    L8_CK(l8_alloc_graph_release(a, gid));
    l8_alloc_stats after = astats(a);
    ck_assert_uint_eq(after.graph_reserved_bytes, 0);
    ck_assert_uint_eq(after.graph_held_bytes, 0);
    ck_assert_uint_eq(after.allocated_bytes, 4096);               /* `other` only */
    ck_assert_uint_eq(after.active_bytes, 4096);
    ck_assert_uint_le(before.allocated_bytes, 8192 + 2 * MIB + 4096);
    L8_CK(l8_alloc_check(a));
    L8_CK_ST(l8_alloc_graph_release(a, gid), L8_ERR_INVALID_ARG);   /* released once */
    /* and the cache serves eager code again without the driver (large
     * requests may consolidate the idle segments: the provider's business) */
    uint64_t seg2 = c.seg_allocs;
    void *r = NULL;
    L8_CK(l8_alloc_malloc(a, 300 * 1024, S1, &r));
    L8_CK(l8_alloc_free(a, r));
    ck_assert_uint_eq(c.seg_allocs, seg2);
    L8_CK(l8_alloc_free(a, other));
    L8_CK(l8_alloc_check(a));
    l8_alloc_destroy(a);
}
END_TEST

/* Capturing the same graph pool again (a graph update) reuses its blocks;
 * argument errors change nothing; destroy with a live graph pool is clean. */
START_TEST(test_host_alloc_capture_again)
{
    counting c;
    l8_alloc *a = counting_alloc(&c);
    l8_stream_id cs[1] = { S1 };
    uint32_t gid = 0, bad = 99;
    L8_CK_ST(l8_alloc_capture_begin(a, cs, 0, &gid, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_capture_begin(a, cs, 9, &gid, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_alloc_capture_begin(a, cs, 1, &bad, 1), L8_ERR_INVALID_ARG);
    ck_assert_uint_eq(gid, 0);
    void *q[3][3];
    for (int round = 0; round < 3; round++) {
        uint64_t seg = c.seg_allocs;
        L8_CK(l8_alloc_capture_begin(a, cs, 1, &gid, round > 0));   /* round 0: the warm-up */
        for (int i = 0; i < 3; i++) L8_CK(l8_alloc_malloc(a, (size_t)(i + 1) * MIB, S1, &q[round][i]));
        /* the warm-up's block used on S2 too: its free waits for an event,
         * which the strict capture_begin processes before capturing */
        if (round == 0) L8_CK(l8_alloc_record_stream(a, q[0][0], S2));
        for (int i = 0; i < 3; i++) L8_CK(l8_alloc_free(a, q[round][i]));
        L8_CK(l8_alloc_capture_end(a, gid));
        L8_CK(l8_alloc_check(a));
        if (round > 0) ck_assert_uint_eq(c.seg_allocs, seg);
    }
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_eq(q[0][i], q[1][i]);
        ck_assert_ptr_eq(q[1][i], q[2][i]);
    }
    ck_assert_uint_gt(astats(a).graph_reserved_bytes, 0);
    l8_alloc_destroy(a);                          /* a live graph pool: freed with the rest */
}
END_TEST

/* The pinned pool refuses service during a capture and changes nothing. */
START_TEST(test_host_pinned_capture_refusal)
{
    l8_segment_provider host;
    l8_host_provider(&host);
    l8_pinned *pp = NULL;
    L8_CK(l8_pinned_create(&host, 0, NULL, &pp));
    void *b = NULL, *c = (void *)1;
    L8_CK(l8_pinned_alloc(pp, 10000, &b));
    l8_pinned_set_capturing(pp, 1);
    L8_CK_ST(l8_pinned_alloc(pp, 4096, &c), L8_ERR_STATE);
    ck_assert_ptr_null(c);
    L8_CK_ST(l8_pinned_record_stream(pp, b, S2), L8_ERR_STATE);
    L8_CK_ST(l8_pinned_free(pp, b), L8_ERR_STATE);
    L8_CK_ST(l8_pinned_empty_cache(pp), L8_ERR_STATE);
    L8_CK(l8_pinned_free(pp, NULL));
    l8_pinned_stats ps = { .size = sizeof ps };
    L8_CK(l8_pinned_get_stats(pp, &ps));
    ck_assert_uint_eq(ps.allocations, 1);
    ck_assert_uint_eq(ps.frees, 0);
    l8_pinned_set_capturing(pp, 0);
    L8_CK(l8_pinned_free(pp, b));                 /* the block was still live */
    l8_pinned_destroy(pp);
}
END_TEST

/* ---- the graph API ---- */

typedef struct step {
    l8_tensor *x, *y;             /* (n) f32 */
    int runs;
    int fail_at;                  /* run number that returns an error; 0: never */
} step;

/* y = x + y, with a temporary allocated and freed inside the step. */
static l8_status step_fn(void *arg, l8_stream *s)
{
    step *st = arg;
    st->runs++;
    if (st->fail_at && st->runs == st->fail_at)
        return L8_FAIL(L8_ERR_INVALID_ARG, "step: failing on purpose (run %d)", st->runs);
    l8_ctx *ctx = l8_tensor_ctx(st->x);
    int64_t n = l8_tensor_numel(st->x);
    l8_tensor *t = NULL;
    L8_CHECK(l8_tensor_empty(ctx, L8_F32, 1, &n, &t));
    l8_status r = l8_tensor_copy(t, st->x, s);
    if (r == L8_OK) r = l8_add_into(st->y, t, s);
    l8_tensor_destroy(t);
    return r;
}

static void fill(l8_tensor *t, float v0, float dv)
{
    int64_t n = l8_tensor_numel(t);
    float *h = l8t_xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = v0 + dv * (float)i;
    L8_CK(l8_tensor_copy_from_host(t, h, (size_t)n * 4, NULL));
    free(h);
}

static float *download(l8_tensor *t)
{
    int64_t n = l8_tensor_numel(t);
    float *h = l8t_xmalloc((size_t)n * 4);
    L8_CK(l8_tensor_copy_to_host(t, h, (size_t)n * 4, NULL));
    return h;
}

/* Host backend: capture runs nothing, each launch runs the step eagerly. */
/* L8_GRAPH_REFUSE=capture (graph.h): a capture of another step fails by
 * name, and g keeps the step it had (b; on the host, run `runs` times so
 * far), which the launch here runs; an unknown word: l8_graph_create
 * refuses. Leaves the variable unset. */
static void refused_capture(l8_ctx *ctx, l8_graph *g, step *b, int runs)
{
    step c = *b;
    c.runs = 0;
    ck_assert_int_eq(setenv("L8_GRAPH_REFUSE", "chain,capture", 1), 0);
    L8_CK_ST(l8_graph_capture(g, step_fn, &c), L8_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "L8_GRAPH_REFUSE=capture"));
    L8_CK(l8_graph_launch(g));
    L8_CK(l8_ctx_synchronize(ctx));
    if (l8_graph_native(ctx)) {
        ck_assert_int_eq(c.runs, 1);              /* recorded under the capture */
    } else {
        ck_assert_int_eq(c.runs, 0);              /* the host records fn alone */
        ck_assert_int_eq(b->runs, runs + 1);      /* the launch: b's step */
    }
    ck_assert_int_eq(setenv("L8_GRAPH_REFUSE", "capture,bogus", 1), 0);
    l8_graph *g2 = g;
    L8_CK_ST(l8_graph_create(ctx, NULL, &g2), L8_ERR_INVALID_ARG);
    ck_assert_ptr_null(g2);
    ck_assert_ptr_nonnull(strstr(l8_last_error_string(), "L8_GRAPH_REFUSE holds \"bogus\""));
    ck_assert_int_eq(unsetenv("L8_GRAPH_REFUSE"), 0);
    l8_error_clear();
}

START_TEST(test_host_graph_eager)
{
    l8_ctx *ctx = l8t_ctx("host", NULL, 0);
    ck_assert_int_eq(l8_graph_native(ctx), 0);
    int64_t n = 1000;
    step a = { NULL, NULL, 0, 0 }, e = { NULL, NULL, 0, 0 };
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &a.x));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &a.y));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &e.x));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &e.y));
    fill(a.x, 0.25f, 0.001f); fill(a.y, -3.0f, 0.37f);
    fill(e.x, 0.25f, 0.001f); fill(e.y, -3.0f, 0.37f);
    l8_graph *g = NULL;
    L8_CK_ST(l8_graph_create(NULL, NULL, &g), L8_ERR_INVALID_ARG);
    L8_CK(l8_graph_create(ctx, NULL, &g));
    L8_CK_ST(l8_graph_launch(g), L8_ERR_STATE);   /* nothing captured */
    L8_CK_ST(l8_graph_launch_repeat(g, 2), L8_ERR_STATE);
    L8_CK_ST(l8_graph_capture(g, NULL, &a), L8_ERR_INVALID_ARG);
    L8_CK(l8_graph_warmup(g, step_fn, &a));       /* runs: a real step */
    L8_CK(step_fn(&e, NULL));
    ck_assert_int_eq(a.runs, 1);
    L8_CK(l8_graph_capture(g, step_fn, &a));
    ck_assert_int_eq(a.runs, 1);                  /* capture records, runs nothing */
    for (int i = 0; i < 3; i++) {
        L8_CK(l8_graph_launch(g));
        L8_CK(step_fn(&e, NULL));
    }
    ck_assert_int_eq(a.runs, 4);
    float *ga = download(a.y), *ea = download(e.y);
    ck_assert(memcmp(ga, ea, (size_t)n * 4) == 0);
    free(ga); free(ea);
    /* a failing launch reports the step's error */
    a.fail_at = 5;
    L8_CK_ST(l8_graph_launch(g), L8_ERR_INVALID_ARG);
    /* update: the next launches run the new step */
    step b = a;
    b.runs = 0;
    b.fail_at = 0;
    L8_CK(l8_graph_capture(g, step_fn, &b));
    L8_CK(l8_graph_launch(g));
    ck_assert_int_eq(b.runs, 1);
    /* a repeat runs the step n times, counts n launches, and stops at an error */
    L8_CK(l8_graph_launch_repeat(g, 3));
    ck_assert_int_eq(b.runs, 4);
    L8_CK_ST(l8_graph_launch_repeat(NULL, 1), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_graph_launch_repeat(g, 0), L8_ERR_INVALID_ARG);
    L8_CK_ST(l8_graph_launch_repeat(g, L8_GRAPH_MAX_REPEAT + 1), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(b.runs, 4);
    b.fail_at = 6;
    L8_CK_ST(l8_graph_launch_repeat(g, 3), L8_ERR_INVALID_ARG);
    ck_assert_int_eq(b.runs, 6);                  /* run 5, then the failing run 6 */
    b.fail_at = 0;
    l8_graph_stats gs = { .size = sizeof gs };
    L8_CK(l8_graph_get_stats(g, &gs));
    ck_assert_uint_eq(gs.launches, 8);            /* 3 + 1 + 3 + 1 that ran */
    ck_assert_uint_eq(gs.captures, 2);
    ck_assert_uint_eq(gs.warmups, 1);
    ck_assert_uint_eq(gs.chained, 0);             /* no chains on the host backend */
    l8i_graph_refuse_chain(1);                    /* and nothing to refuse */
    L8_CK(l8_graph_launch_repeat(g, 2));
    l8i_graph_refuse_chain(0);
    ck_assert_int_eq(b.runs, 8);
    L8_CK(l8_graph_get_stats(g, &gs));
    ck_assert_uint_eq(gs.launches, 10);
    ck_assert_uint_eq(gs.chain_refusals, 0);
    l8_graph_stats small = { .size = 8 };
    L8_CK_ST(l8_graph_get_stats(g, &small), L8_ERR_INVALID_ARG);
    int prio[2];
    size_t nk = 7;                                /* no driver graph to read on the host */
    L8_CK_ST(l8i_graph_kernel_priorities(g, prio, 2, &nk), L8_ERR_UNSUPPORTED);
    ck_assert_uint_eq(nk, 0);
    refused_capture(ctx, g, &b, 8);
    l8_graph_destroy(g);
    l8_graph_destroy(NULL);
    l8_tensor_destroy(a.x); l8_tensor_destroy(a.y);
    l8_tensor_destroy(e.x); l8_tensor_destroy(e.y);
    l8t_ctx_finish(ctx);
}
END_TEST

/* ---- GPU ---- */

static l8_alloc_stats ctx_astats(l8_ctx *ctx) { return astats(l8_ctx_allocator(ctx)); }

/* Replay equals eager bit for bit; the capture calls no driver allocator;
 * the graph's pool lives as long as the graph. */
START_TEST(test_gpu_graph_replay_equals_eager)
{
    l8_ctx *ctx = l8t_ctx("cuda:0", NULL, 0);
    ck_assert_int_eq(l8_graph_native(ctx), 1);
    int64_t n = (1 << 20) + 37;
    step a = { NULL, NULL, 0, 0 }, e = { NULL, NULL, 0, 0 };
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &a.x));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &a.y));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &e.x));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &e.y));
    fill(a.x, 0.125f, 1e-5f); fill(a.y, 1.5f, -3e-6f);
    fill(e.x, 0.125f, 1e-5f); fill(e.y, 1.5f, -3e-6f);
    L8_CK(step_fn(&a, NULL));                     /* the eager warm-up is step 1 */
    L8_CK(step_fn(&e, NULL));
    l8_graph *g = NULL;
    L8_CK(l8_graph_create(ctx, NULL, &g));
    L8_CK(l8_graph_warmup(g, step_fn, &a));       /* step 2, into the graph's pool */
    L8_CK(step_fn(&e, NULL));
    l8_alloc_stats s0 = ctx_astats(ctx);
    L8_CK(l8_graph_capture(g, step_fn, &a));
    l8_alloc_stats s1 = ctx_astats(ctx);
    ck_assert_uint_eq(s1.segment_allocs, s0.segment_allocs);  /* no cuMemAlloc in capture */
    ck_assert_uint_gt(s1.graph_reserved_bytes, 0);            /* the step's temporary */
    for (int i = 0; i < 5; i++) {
        L8_CK(l8_graph_launch(g));
        L8_CK(step_fn(&e, NULL));
    }
    L8_CK(l8_ctx_synchronize(ctx));
    float *ga = download(a.y), *ea = download(e.y);
    ck_assert(memcmp(ga, ea, (size_t)n * 4) == 0);
    ck_assert(ga[5] != 1.5f + 5 * -3e-6f);        /* it did run */
    l8_graph_stats gs = { .size = sizeof gs };
    L8_CK(l8_graph_get_stats(g, &gs));
    ck_assert_uint_eq(gs.launches, 5);
    free(ga); free(ea);
    l8_graph_destroy(g);
    ck_assert_uint_eq(ctx_astats(ctx).graph_reserved_bytes, 0);
    L8_CK(l8_alloc_check(l8_ctx_allocator(ctx)));
    l8_tensor_destroy(a.x); l8_tensor_destroy(a.y);
    l8_tensor_destroy(e.x); l8_tensor_destroy(e.y);
    l8t_ctx_finish(ctx);
}
END_TEST

/* A step that forks onto the comm stream and joins back through events
 * recorded inside the capture. */
typedef struct fork_step {
    l8_tensor *x, *y, *z;
    l8_event *e1, *e2;
} fork_step;

static l8_status fork_fn(void *arg, l8_stream *s)
{
    fork_step *f = arg;
    l8_stream *comm = l8_ctx_stream(l8_tensor_ctx(f->x), L8_STREAM_COMM);
    L8_CHECK(l8_add_into(f->y, f->x, s));         /* y += x on s */
    L8_CHECK(l8_event_record(f->e1, s));
    L8_CHECK(l8_stream_wait_event(comm, f->e1));
    L8_CHECK(l8_add_into(f->z, f->y, comm));      /* z += y on comm, after it */
    L8_CHECK(l8_event_record(f->e2, comm));
    return l8_stream_wait_event(s, f->e2);
}

START_TEST(test_gpu_graph_streams_and_update)
{
    /* on a context whose compute stream is above comm: the graph runs the
     * fork and join as before, and each captured kernel carries the priority
     * of the stream it was captured on (the graph is instantiated to use the
     * nodes' priorities, so a replay keeps them). */
    l8_ctx_config cfg = L8_CTX_CONFIG_INIT;
    l8_ctx *ctx = NULL;
    cfg.device = "cuda:0";
    cfg.high_priority = 1u << L8_STREAM_COMPUTE;
    L8_CK(l8_ctx_create(&cfg, &ctx));
    int64_t n = 4096;
    fork_step f;
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &f.x));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &f.y));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &f.z));
    L8_CK(l8_event_create(ctx, 0, &f.e1));
    L8_CK(l8_event_create(ctx, 0, &f.e2));
    fill(f.x, 1.0f, 0.0f); fill(f.y, 0.0f, 0.0f); fill(f.z, 0.0f, 0.0f);
    l8_graph *g = NULL;
    L8_CK(l8_graph_create(ctx, NULL, &g));
    L8_CK(l8_graph_warmup(g, fork_fn, &f));       /* y = 1, z = 1 */
    L8_CK(l8_graph_capture(g, fork_fn, &f));
    int hi = 0, lo = 1, prio[4] = { 1, 1, 1, 1 };
    size_t nk = 0;
    L8_CK(l8_stream_priority(l8_ctx_stream(ctx, L8_STREAM_COMPUTE), &hi));
    L8_CK(l8_stream_priority(l8_ctx_stream(ctx, L8_STREAM_COMM), &lo));
    ck_assert_int_lt(hi, lo);
    L8_CK(l8i_graph_kernel_priorities(g, prio, 4, &nk));
    ck_assert_uint_eq(nk, 2);                     /* y += x on compute, z += y on comm */
    ck_assert_msg((prio[0] == hi && prio[1] == lo) || (prio[0] == lo && prio[1] == hi),
                  "kernel priorities %d, %d; the streams' %d (compute), %d (comm)", prio[0],
                  prio[1], hi, lo);
    for (int i = 0; i < 2; i++) L8_CK(l8_graph_launch(g));
    L8_CK(l8_ctx_synchronize(ctx));
    float *z = download(f.z);
    ck_assert_float_eq(z[0], 6.0f);               /* y = 1, 2, 3; z = 1 + 2 + 3 */
    ck_assert_float_eq(z[n - 1], 6.0f);
    free(z);
    /* update: other tensors of the same shape (in place), then another shape */
    fork_step h = f;
    L8_CK(l8_tensor_narrow(f.x, 0, 0, n / 2, &h.x));
    L8_CK(l8_tensor_narrow(f.y, 0, 0, n / 2, &h.y));
    L8_CK(l8_tensor_narrow(f.z, 0, 0, n / 2, &h.z));
    L8_CK(l8_graph_capture(g, fork_fn, &h));
    L8_CK(l8_graph_launch(g));
    L8_CK(l8_ctx_synchronize(ctx));
    z = download(f.z);
    ck_assert_float_eq(z[0], 10.0f);              /* y = 4: z += 4 on the first half */
    ck_assert_float_eq(z[n - 1], 6.0f);
    free(z);
    /* repeats: each copy of the step starts after the last one ended on both
     * streams (z += y sees its own copy's y); one launch of 1, then 3 again
     * (the chain kept); a capture drops the chain and the next repeat runs
     * the new work */
    L8_CK(l8_graph_launch_repeat(g, 3));          /* y = 5, 6, 7 */
    L8_CK(l8_graph_launch_repeat(g, 1));          /* y = 8 */
    L8_CK(l8_graph_launch_repeat(g, 3));          /* y = 9, 10, 11 */
    L8_CK(l8_ctx_synchronize(ctx));
    z = download(f.z);
    ck_assert_float_eq(z[0], 66.0f);              /* 10 + 18 + 8 + 30 */
    ck_assert_float_eq(z[n - 1], 6.0f);
    free(z);
    L8_CK(l8_graph_capture(g, fork_fn, &f));
    L8_CK(l8_graph_launch_repeat(g, 2));          /* y = 12, 13 | 4, 5 */
    L8_CK(l8_ctx_synchronize(ctx));
    z = download(f.z);
    ck_assert_float_eq(z[0], 91.0f);              /* 66 + 12 + 13 */
    ck_assert_float_eq(z[n - 1], 15.0f);          /* 6 + 4 + 5 */
    free(z);
    l8_graph_stats gs = { .size = sizeof gs };
    L8_CK(l8_graph_get_stats(g, &gs));
    ck_assert_uint_eq(gs.captures, 3);
    ck_assert_uint_eq(gs.launches, 2 + 1 + 7 + 2);
    ck_assert_uint_eq(gs.chained, 3 + 3 + 2);     /* the repeat of 1 is a plain launch */
    ck_assert_uint_eq(gs.chain_refusals, 0);
    ck_assert_uint_eq(gs.updates_in_place + gs.reinstantiations, 2);
    /* a driver that refuses the chain: the same work as single launches,
     * one refusal, no other try until the next capture */
    l8i_graph_refuse_chain(1);
    L8_CK(l8_graph_launch_repeat(g, 3));          /* y = 14, 15, 16 | 6, 7, 8 */
    ck_assert_int_eq(l8_last_error()->status, L8_OK);   /* handled, not left behind */
    L8_CK(l8_graph_launch_repeat(g, 2));          /* y = 17, 18 | 9, 10 */
    l8i_graph_refuse_chain(0);
    L8_CK(l8_graph_launch_repeat(g, 2));          /* still one by one: 19, 20 | 11, 12 */
    L8_CK(l8_ctx_synchronize(ctx));
    z = download(f.z);
    ck_assert_float_eq(z[0], 210.0f);             /* 91 + 45 + 35 + 39 */
    ck_assert_float_eq(z[n - 1], 78.0f);          /* 15 + 21 + 19 + 23 */
    free(z);
    L8_CK(l8_graph_get_stats(g, &gs));
    ck_assert_uint_eq(gs.chained, 8);
    ck_assert_uint_eq(gs.chain_refusals, 1);
    L8_CK(l8_graph_capture(g, fork_fn, &f));      /* a capture tries the chain again */
    L8_CK(l8_graph_launch_repeat(g, 2));          /* y = 21, 22 | 13, 14 */
    L8_CK(l8_ctx_synchronize(ctx));
    z = download(f.z);
    ck_assert_float_eq(z[0], 253.0f);
    ck_assert_float_eq(z[n - 1], 105.0f);
    free(z);
    L8_CK(l8_graph_get_stats(g, &gs));
    ck_assert_uint_eq(gs.launches, 12 + 3 + 2 + 2 + 2);
    ck_assert_uint_eq(gs.chained, 10);
    ck_assert_uint_eq(gs.chain_refusals, 1);
    l8_graph_destroy(g);
    l8_tensor_destroy(h.x); l8_tensor_destroy(h.y); l8_tensor_destroy(h.z);
    l8_event_destroy(f.e1); l8_event_destroy(f.e2);
    l8_tensor_destroy(f.x); l8_tensor_destroy(f.y); l8_tensor_destroy(f.z);
    l8t_ctx_finish(ctx);
}
END_TEST

/* Failures leave nothing behind: a step that synchronizes (forbidden in a
 * capture), and one whose allocation would need cuMemAlloc. */
static l8_status sync_fn(void *arg, l8_stream *s)
{
    (void)arg;
    return l8_stream_synchronize(s);
}

static l8_status huge_fn(void *arg, l8_stream *s)
{
    l8_ctx *ctx = arg;
    void *p = NULL;
    L8_CHECK(l8_ctx_malloc(ctx, (size_t)8 << 30, s, &p));
    return l8_ctx_free(ctx, p);
}

START_TEST(test_gpu_graph_capture_failures)
{
    l8_ctx *ctx = l8t_ctx("cuda:0", NULL, 0);
    l8_graph *g = NULL;
    L8_CK(l8_graph_create(ctx, NULL, &g));
    l8_status st = l8_graph_capture(g, sync_fn, NULL);
    ck_assert_int_ne(st, L8_OK);
    L8_CK_ST(l8_graph_launch(g), L8_ERR_STATE);
    l8_alloc_stats s0 = ctx_astats(ctx);
    L8_CK_ST(l8_graph_capture(g, huge_fn, ctx), L8_ERR_STATE);
    l8_alloc_stats s1 = ctx_astats(ctx);
    ck_assert_uint_eq(s1.segment_allocs, s0.segment_allocs);
    ck_assert_uint_eq(s1.graph_reserved_bytes, 0);
    L8_CK(l8_alloc_check(l8_ctx_allocator(ctx)));
    /* and a good capture still works afterwards */
    int64_t n = 256;
    step a = { NULL, NULL, 0, 0 };
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &a.x));
    L8_CK(l8_tensor_empty(ctx, L8_F32, 1, &n, &a.y));
    fill(a.x, 2.0f, 0.0f); fill(a.y, 1.0f, 0.0f);
    L8_CK(l8_graph_warmup(g, step_fn, &a));       /* y = 3 */
    L8_CK(l8_graph_capture(g, step_fn, &a));
    L8_CK(l8_graph_launch(g));
    L8_CK(l8_ctx_synchronize(ctx));
    float *y = download(a.y);
    ck_assert_float_eq(y[7], 5.0f);
    free(y);
    refused_capture(ctx, g, &a, 0);               /* the launch: y = 7 */
    y = download(a.y);
    ck_assert_float_eq(y[7], 7.0f);
    free(y);
    l8_graph_destroy(g);
    l8_tensor_destroy(a.x); l8_tensor_destroy(a.y);
    l8t_ctx_finish(ctx);
}
END_TEST

/* An optimizer step captured once and replayed under a learning-rate
 * schedule (l8_optim_set_lr_external + l8_optim_push_lr before each launch)
 * equals eager steps bit for bit. On the host the graph API runs eagerly,
 * so the same test checks the plumbing there and the replays on a GPU. */
typedef struct opt_step {
    l8_optim *o;
} opt_step;

static l8_status opt_fn(void *arg, l8_stream *s)
{
    return l8_optim_step(((opt_step *)arg)->o, s, NULL);
}

static l8_params *opt_group(l8_ctx *ctx, const float *grad, int64_t n)
{
    l8_params *g = NULL;
    int64_t shape[2] = { 64, 48 };
    L8_CK(l8_params_create(ctx, NULL, &g));
    L8_CK(l8_params_add(g, "w", 2, shape, NULL));
    L8_CK(l8_params_finalize(g));
    L8_CK(l8_params_init_uniform(g, 0, -1.0f, 1.0f, 0x5eed));
    ck_assert_int_eq(l8_params_buffer_numel(g), n);
    L8_CK(l8_tensor_copy_from_host(l8_params_grad_flat(g), grad, (size_t)n * 4, NULL));
    return g;
}

static void optim_schedule(const char *dev)
{
    l8_ctx *ctx = l8t_ctx(dev, NULL, 0);
    int64_t n = 64 * 48;
    float *grad = l8t_xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) grad[i] = (float)((i * 7919) % 201 - 100) / 64.0f;
    l8_params *ga = opt_group(ctx, grad, n), *gb = opt_group(ctx, grad, n);
    l8_adamw_config c = L8_ADAMW_CONFIG_INIT;
    c.lr = 1e-2f;
    c.weight_decay = 0.05f;
    l8_optim *oa = NULL, *ob = NULL;
    L8_CK(l8_optim_create_adamw(ga, &c, &oa));
    L8_CK(l8_optim_create_adamw(gb, &c, &ob));
    L8_CK(l8_optim_set_lr_external(ob, 1));
    opt_step st = { ob };
    l8_graph *g = NULL;
    L8_CK(l8_graph_create(ctx, NULL, &g));
    for (int k = 0; k < 6; k++) {
        float lr = 1e-2f / (float)(k + 1);
        L8_CK(l8_optim_set_lr(oa, lr));
        L8_CK(l8_optim_step(oa, NULL, NULL));
        L8_CK(l8_optim_set_lr(ob, lr));
        L8_CK(l8_optim_push_lr(ob, NULL));
        if (k == 0) {
            L8_CK(l8_graph_warmup(g, opt_fn, &st));   /* step 1, eagerly */
            L8_CK(l8_graph_capture(g, opt_fn, &st));
        } else {
            L8_CK(l8_graph_launch(g));
        }
    }
    L8_CK(l8_ctx_synchronize(ctx));
    float *pa = download(l8_params_master_flat(ga)), *pb = download(l8_params_master_flat(gb));
    ck_assert_msg(memcmp(pa, pb, (size_t)n * 4) == 0, "%s: replayed steps differ from eager", dev);
    uint64_t sa = 0, sb = 0;
    L8_CK(l8_optim_get_step(oa, &sa));
    L8_CK(l8_optim_get_step(ob, &sb));
    ck_assert_uint_eq(sa, 6);
    ck_assert_uint_eq(sb, 6);
    l8_graph_stats gs = { .size = sizeof gs };
    L8_CK(l8_graph_get_stats(g, &gs));
    ck_assert_uint_eq(gs.launches, 5);
    ck_assert_uint_eq(gs.captures, 1);
    free(pa); free(pb); free(grad);
    l8_graph_destroy(g);
    l8_optim_destroy(oa);
    l8_optim_destroy(ob);
    l8_params_destroy(ga);
    l8_params_destroy(gb);
    l8t_ctx_finish(ctx);
}

START_TEST(test_host_graph_optimizer_schedule) { optim_schedule("host"); }
END_TEST

START_TEST(test_gpu_graph_optimizer_schedule) { optim_schedule("cuda:0"); }
END_TEST

Suite *l8_graph_suite(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("graph-host");
    tcase_set_tags(tc, "host");
    tcase_add_test(tc, test_host_alloc_capture_pool);
    tcase_add_test(tc, test_host_alloc_capture_again);
    tcase_add_test(tc, test_host_pinned_capture_refusal);
    tcase_add_test(tc, test_host_graph_eager);
    tcase_add_test(tc, test_host_graph_optimizer_schedule);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("graph-gpu");
    tcase_set_tags(tg, "gpu");
    tcase_set_timeout(tg, 120);
    tcase_add_test(tg, test_gpu_graph_replay_equals_eager);
    tcase_add_test(tg, test_gpu_graph_streams_and_update);
    tcase_add_test(tg, test_gpu_graph_capture_failures);
    tcase_add_test(tg, test_gpu_graph_optimizer_schedule);
    suite_add_tcase(s, tg);
    return s;
}
